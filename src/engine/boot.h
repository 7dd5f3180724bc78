/* boot.h -- start and stop one server (boot.c). */
#ifndef ROWAN_BOOT_H
#define ROWAN_BOOT_H
#include <stddef.h>

struct rowan_server;

/* The process's server: it daemonizes, handles SIGINT/SIGTERM, writes the
 * pidfile and talks to the supervisor (rowan-server's). */
#define ROWAN_START_PROCESS 1

/* Start a server from rowan-server's arguments (argv[0] is skipped); returns
 * once it serves (recovery done). The caller's thread binding is kept. A
 * failure (bad configuration, a port in use, a pool that cannot be opened)
 * returns NULL with the reason in err (also logged): the process goes on,
 * and what the start had built is released. */
struct rowan_server *rowan_server_start(int argc, char **argv, int flags, char *err,
                                        size_t errlen);
/* Wait until s shuts down (SHUTDOWN, a signal, rowan_server_stop), then
 * stop its threads, close its sockets and its pool, and (but for the
 * process's server, which exits next) free s and all it owned: s is gone
 * when this returns. */
void rowan_server_wait(struct rowan_server *s);
/* Ask s to shut down, then rowan_server_wait. */
void rowan_server_stop(struct rowan_server *s);

#endif
