/* listen.h -- TCP listening sockets for the client and replication ports.
 *
 * One socket per address, bound without SO_REUSEPORT, so a second process
 * (of any user, with any `dir`) asking for the same address and port gets
 * EADDRINUSE instead of a share of the connections. */
#ifndef ROWAN_LISTEN_H
#define ROWAN_LISTEN_H
#include <stddef.h>

/* Bind and listen on addr:port, like redis-server's anetTcpServer: "*" is
 * any IPv4 address, "::*" any IPv6 address, an address with ':' is IPv6
 * (V6ONLY), anything else IPv4 (names are resolved). The socket is
 * non-blocking and close-on-exec, with SO_REUSEADDR (a restart must not wait
 * for TIME_WAIT connections). Returns the fd, or -1 with Redis's reason in
 * err ("bind: Address already in use", "Name or service not known"...). */
int listen_tcp(const char *addr, int port, int backlog, char *err, size_t errlen);
/* The same without listen(): the caller listens later. Another process's
 * listening socket on addr:port already makes it fail (EADDRINUSE); while
 * this one is only bound, a second SO_REUSEADDR socket could still bind,
 * and whichever listens second then fails. */
int bind_tcp(const char *addr, int port, char *err, size_t errlen);

#endif
