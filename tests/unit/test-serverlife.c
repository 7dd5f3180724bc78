/* test-serverlife.c -- an embedded server's life in a process that goes on
 * (issue 15): a start that fails returns its reason instead of ending the
 * process, and a server that stopped gives back what it held.
 *
 * Failed starts: the client port taken by another socket, a pool directory
 * that cannot be created (below a regular file: refused even to root), a
 * bad option, a rename-command of an unknown command, and one that fails
 * late, with its workers running: a managed cluster whose ZooKeeper
 * cannot be reached. Each returns NULL with
 * its reason, and the process then starts a good server on the same port
 * and serves through hiredis.
 *
 * Stopped servers are freed: 20 start/stop cycles of a server (with the
 * native datagram edge on) that served writes, a native client, scripts, functions, ACL changes, a subscriber, a monitor, a
 * tracking client and a blocked client leave the number of open
 * descriptors (/proc/self/fd) as it was; under the ASan build
 * (make VARIANT=asan), LeakSanitizer checks at exit that nothing any of
 * these starts allocated is left (the test keeps no reference to them). */
#include "boot.h"
#include "dgram.h"
#include "server.h"
#include "unit.h"
#include "unit_port.h"

#include <dirent.h>
#include <stdarg.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char dir[64] = "/tmp/rowan-serverlife-XXXXXX";
static char logpath[128];

/* Open descriptors of this process. */
static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n - 1;   /* opendir's own */
}

/* A listening socket on a port of the kernel's choice: the port stays
 * taken while it is open. */
static int busy_socket(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("busy_socket");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Start with the usual test options plus extra ones; NULL and err on failure. */
static struct rowan_server *start(int port, const char *pooldir, const char **extra, char *err,
                                  size_t errlen) {
    char portbuf[16];
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    const char *argv[40] = {"rowan-server", "--port", portbuf, "--bind", "127.0.0.1",
                            "--dir", pooldir, "--pool-size", "64mb", "--workers", "2",
                            "--shards", "4", "--logfile", logpath};
    int argc = 15;
    for (int i = 0; extra && extra[i]; i++) argv[argc++] = extra[i];
    argv[argc] = NULL;
    err[0] = 0;
    return rowan_server_start(argc, (char **)argv, 0, err, errlen);
}

static void expect_failure(int port, const char *pooldir, const char **extra, const char *want) {
    char err[1024];
    struct rowan_server *s = start(port, pooldir, extra, err, sizeof(err));
    CHECK(s == NULL);
    if (!strstr(err, want)) fprintf(stderr, "expected '%s' in: %s\n", want, err);
    CHECK(strstr(err, want) != NULL);
    if (s) rowan_server_stop(s);
}

/* Run a command; the reply must be of type want (-1: any). */
static void run(redisContext *c, int want, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r || (want >= 0 && r->type != want))
        fprintf(stderr, "%s: reply type %d (%s)\n", fmt, r ? r->type : -1,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    CHECK(r && (want < 0 || r->type == want));
    if (r) freeReplyObject(r);
}

/* A native (datagram) client's request: its reply's first byte, or 0. */
static char native_request(int fd, uint64_t id, int argc, const char **argv) {
    unsigned char buf[DGRAM_MTU];
    size_t lens[8];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    dgram_hdr h = {0};
    h.client = 0x5e55104ull;
    h.req = id;
    h.acked = id;
    h.shard = 0xffff;
    long n = dgram_put_request(buf, &h, argc, argv, lens);
    if (n < 0 || send(fd, buf, (size_t)n, 0) != n) return 0;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (;;) {
        ssize_t got = recv(fd, buf, sizeof(buf), 0);
        const char *why;
        if (got < 0) return 0;
        if (dgram_get_hdr(buf, (size_t)got, &h, &why) == 0 && h.type == DGRAM_REPLY && h.req == id)
            return got > DGRAM_HDR_LEN ? (char)buf[DGRAM_HDR_LEN] : 0;
    }
}

/* A good server on port: round `round` of writes and of the state a server
 * keeps beside its data (a Lua interpreter, a function library, ACL users
 * and log, the slow log, a subscriber, a monitor, a tracking client, a
 * client blocked in BLPOP), left as it is when the server stops. */
static void serve_once(int port, int round) {
    char err[1024];
    static char native[16];
    if (!native[0]) snprintf(native, sizeof(native), "%d", unit_free_port(SOCK_DGRAM));
    const char *opts[] = {"--slowlog-log-slower-than", "0", "--native-port", native, NULL};
    struct rowan_server *s = start(port, dir, opts, err, sizeof(err));
    if (!s) fprintf(stderr, "good start failed: %s\n", err);
    CHECK(s != NULL);
    if (!s) return;
    redisContext *c = redisConnect("127.0.0.1", port);
    redisContext *sub = redisConnect("127.0.0.1", port);
    redisContext *mon = redisConnect("127.0.0.1", port);
    redisContext *blk = redisConnect("127.0.0.1", port);
    CHECK(c && !c->err && sub && !sub->err && mon && !mon->err && blk && !blk->err);
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "INCR rounds");
        CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == round + 1);
        freeReplyObject(r);
        run(c, REDIS_REPLY_STATUS, "SET k%d %s", round, "value");
        run(c, REDIS_REPLY_INTEGER, "HSET h%d f v", round);
        run(c, REDIS_REPLY_INTEGER, "EVAL %s 0", "return 1");
        run(c, REDIS_REPLY_STRING, "FUNCTION LOAD REPLACE %s",
            "#!lua name=lib\nredis.register_function('f', function() return 1 end)");
        run(c, REDIS_REPLY_INTEGER, "FCALL f 0");
        run(c, REDIS_REPLY_STATUS, "ACL SETUSER u%d on >pw ~k* +get", round);
        run(c, REDIS_REPLY_ERROR, "AUTH u%d wrong", round);   /* an ACL LOG entry */
        run(c, REDIS_REPLY_STATUS, "CLIENT TRACKING on");
        run(c, REDIS_REPLY_STRING, "GET k%d", round);
        run(c, REDIS_REPLY_ARRAY, "SLOWLOG GET");
        run(sub, REDIS_REPLY_ARRAY, "SUBSCRIBE ch%d", round);
        run(sub, -1, "PSUBSCRIBE p*");
        run(mon, REDIS_REPLY_STATUS, "MONITOR");
        redisAppendCommand(blk, "BLPOP nothing 0");
        int done = 0;
        redisBufferWrite(blk, &done);
        run(c, REDIS_REPLY_INTEGER, "PUBLISH ch%d hello", round);
        /* a native client, subscribed when the server stops */
        int u = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(native)),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        CHECK(u >= 0 && connect(u, (struct sockaddr *)&to, sizeof(to)) == 0);
        CHECK(native_request(u, 1, 3, (const char *[]){"SET", "native", "v"}) == '+');
        CHECK(native_request(u, 2, 2, (const char *[]){"SUBSCRIBE", "nch"}) == '*');
        close(u);
    }
    for (redisContext **p = (redisContext *[]){c, sub, mon, blk, NULL}; *p; p++) redisFree(*p);
    rowan_server_stop(s);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(logpath, sizeof(logpath), "%s/log", dir);
    char file[128], below[160];
    snprintf(file, sizeof(file), "%s/a-file", dir);
    snprintf(below, sizeof(below), "%s/a-file/pool", dir);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    int fds0 = count_fds();

    /* the client port is taken */
    int port;
    int busy = busy_socket(&port);
    expect_failure(port, dir, NULL, "Address already in use");
    /* the pool's directory cannot be created */
    close(busy);
    expect_failure(port, below, NULL, "Can't create dir");
    /* bad configuration */
    const char *bad_opt[] = {"--no-such-option", "1", NULL};
    expect_failure(port, dir, bad_opt, "Bad arguments");
    const char *bad_rename[] = {"--rename-command", "NOSUCHCOMMAND", "X", NULL};
    expect_failure(port, dir, bad_rename, "No such command");
    /* a late failure, with the workers serving (-LOADING) already: the
     * managed cluster's ZooKeeper cannot be reached */
    char zk[32], rport[16];
    snprintf(zk, sizeof(zk), "127.0.0.1:%d", unit_free_port(SOCK_DGRAM));   /* nothing listens (TCP) */
    snprintf(rport, sizeof(rport), "%d", unit_free_port(SOCK_DGRAM));
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    const char *managed[] = {"--zookeeper", zk, "--cluster-name", "life",
                             "--zookeeper-session-timeout", "1000",
                             "--cluster-node", "n0", "127.0.0.1", portstr, rport,
                             "--cluster-self", "n0", NULL};
    expect_failure(port, dir, managed, "Cluster:");
    /* the ZooKeeper library's log stream (/dev/null) is the process's, set
     * once (zoo_set_log_stream is global, src/cluster/zk.c): one more */
    CHECK_EQ_LL(count_fds(), fds0 + 1);
    fds0 = count_fds();

    /* the process goes on: a good server on the same port serves; and
     * again, 20 times, each freeing what it held */
    serve_once(port, 0);
    CHECK_EQ_LL(count_fds(), fds0);
    for (int i = 1; i <= 20; i++) serve_once(port, i);
    CHECK_EQ_LL(count_fds(), fds0);

    char rm[128];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return UNIT_DONE("test-serverlife");
}
