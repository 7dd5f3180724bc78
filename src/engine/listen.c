/* listen.c -- TCP listening sockets for the client and replication ports.
 *
 * Why no SO_REUSEPORT: with it, a second rowan-server started on the same
 * port (another `dir`, or the same one before the pool lock is taken) bound
 * happily and the kernel split new connections between two datasets. A
 * plain SO_REUSEADDR socket is exclusive for every process and user, so the
 * second server fails with "Address already in use" as redis-server does;
 * the workers share the one socket per address (worker.c hands accepted
 * connections round robin). docs/DECISIONS.md has the alternatives. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "listen.h"

int bind_tcp(const char *addr, int port, char *err, size_t errlen) {
    int af = strchr(addr, ':') ? AF_INET6 : AF_INET;
    const char *host = addr;
    if (!strcmp(addr, "*") || (af == AF_INET6 && !strcmp(addr, "::*"))) host = NULL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = af;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s", gai_strerror(rc));
        errno = 0; /* not a socket error: never skipped as optional */
        return -1;
    }
    /* Like anetTcpServer: the first address that yields a socket decides. */
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        const char *step = "setsockopt";
        if ((af == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) ||
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
            (step = "bind", bind(fd, ai->ai_addr, ai->ai_addrlen) != 0)) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", step, strerror(e));
            close(fd);
            freeaddrinfo(res);
            errno = e;
            return -1;
        }
        freeaddrinfo(res);
        return fd;
    }
    int e = errno;
    snprintf(err, errlen, "unable to bind socket, errno: %d", e);
    freeaddrinfo(res);
    errno = e;
    return -1;
}

int listen_tcp(const char *addr, int port, int backlog, char *err, size_t errlen) {
    int fd = bind_tcp(addr, port, err, errlen);
    if (fd < 0 || listen(fd, backlog) == 0) return fd;
    int e = errno;
    snprintf(err, errlen, "listen: %s", strerror(e));
    close(fd);
    errno = e;
    return -1;
}
