/* unit_port.h -- a loopback port nothing uses now, for unit tests that start
 * servers in their own process (test-twoservers, test-twocluster,
 * test-serverlife). The kernel picks it; the socket is closed again, so a
 * server started next can bind it. */
#ifndef ROWAN_UNIT_PORT_H
#define ROWAN_UNIT_PORT_H
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* type: SOCK_STREAM (a TCP port) or SOCK_DGRAM (a UDP one). */
static int unit_free_port(int type) {
    int fd = socket(AF_INET, type, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("unit_free_port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

#endif
