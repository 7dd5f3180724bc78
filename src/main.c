/* main.c -- rowan-server's entry point: the process's one server (boot.c).
 *
 *   rowan-server [rowan.conf] [--option value ...] */
#include <stdio.h>
#include <string.h>
#include "boot.h"
#include "server.h"

static void usage(void) {
    printf("Usage: ./rowan-server [/path/to/rowan.conf] [options]\n"
           "       ./rowan-server -v or --version\n"
           "       ./rowan-server -h or --help\n"
           "\n"
           "Examples:\n"
           "       ./rowan-server (run the server with default conf)\n"
           "       ./rowan-server /etc/rowan/rowan.conf\n"
           "       ./rowan-server --port 7777\n"
           "       ./rowan-server --port 7777 --dir /var/lib/rowan --pool-size 8gb\n"
           "       ./rowan-server /etc/rowan/rowan.conf --loglevel verbose\n"
           "       ./rowan-server /etc/rowan/rowan.conf --daemonize yes --pidfile /run/rowan.pid\n"
           "\n"
           "Options are rowan.conf's, written --name value (rowan.conf documents each).\n");
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-v") || !strcmp(argv[1], "--version"))) {
        printf("Rowan server v=%s (Redis protocol %s)\n", ROWAN_VERSION, ROWAN_REDIS_COMPAT_VERSION);
        return 0;
    }
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage();
        return 0;
    }
    char err[2048];
    struct rowan_server *s = rowan_server_start(argc, argv, ROWAN_START_PROCESS, err, sizeof(err));
    if (!s) {   /* logged already; redis-server prints it too, and exits 1 */
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rowan_server_wait(s);
    return 0;
}
