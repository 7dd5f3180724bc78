/* boot.h -- start and stop one server (boot.c). */
#ifndef ROWAN_BOOT_H
#define ROWAN_BOOT_H

struct rowan_server;

/* The process's server: it daemonizes, handles SIGINT/SIGTERM, writes the
 * pidfile and talks to the supervisor (rowan-server's). */
#define ROWAN_START_PROCESS 1

/* Start a server from rowan-server's arguments (argv[0] is skipped); returns
 * once it serves (recovery done). The caller's thread binding is kept. A
 * failure ends the process with the reason logged. */
struct rowan_server *rowan_server_start(int argc, char **argv, int flags);
/* Wait until s shuts down (SHUTDOWN, a signal, rowan_server_stop), then
 * stop its threads and close its pool. */
void rowan_server_wait(struct rowan_server *s);
/* Ask s to shut down, then rowan_server_wait. */
void rowan_server_stop(struct rowan_server *s);

#endif
