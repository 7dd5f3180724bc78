/* test-twoservers.c -- two servers in one process (issue 15).
 *
 * Every piece of a server's state hangs off its server object (server.h),
 * so one process can run two: this test starts two standalone servers
 * (rowan_server_start, boot.h) on their own ports and pool files, writes
 * different keys to each through hiredis, checks that each sees only its
 * own (keys, DBSIZE, INFO's port, CONFIG GET and SET, rename-command,
 * INFO commandstats, a pub/sub channel's subscribers, a counter both
 * increment at once), stops
 * them, and starts one again on its pool to check its data came back while
 * the other's never did. */
#include "boot.h"
#include "server.h"
#include "unit.h"
#include "unit_port.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NKEYS 200

typedef struct node {
    char dir[256], port[16], log[300];
    const char *rename_from, *rename_to;   /* a rename-command of its own */
    struct rowan_server *s;
    redisContext *c;
} node;

static void start(node *n) {
    char *argv[] = {"rowan-server", "--port", n->port, "--bind", "127.0.0.1", "--dir", n->dir,
                    "--pool-size", "64mb", "--workers", "2", "--shards", "4",
                    "--logfile", n->log, "--save", "",
                    "--rename-command", (char *)n->rename_from, (char *)n->rename_to, NULL};
    char err[512];
    n->s = rowan_server_start((int)(sizeof(argv) / sizeof(argv[0])) - 1, argv, 0, err, sizeof(err));
    if (!n->s) fprintf(stderr, "start on %s: %s\n", n->port, err);
    CHECK(n->s != NULL && n->s != rowan_self);
    n->c = redisConnect("127.0.0.1", atoi(n->port));
    if (!n->c || n->c->err) {
        fprintf(stderr, "connect to %s: %s\n", n->port, n->c ? n->c->errstr : "oom");
        exit(1);
    }
}

/* A stopped server is freed, all it owned (tests/unit/test-serverlife.c). */
static void stop(node *n) {
    redisFree(n->c);
    n->c = NULL;
    rowan_server_stop(n->s);
    n->s = NULL;
}

static redisReply *cmd(node *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(n->c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "%s: %s\n", n->port, n->c->errstr);
        exit(1);
    }
    return r;
}

static int reply_is(redisReply *r, const char *s) {
    int ok = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
             strcmp(r->str, s) == 0;
    freeReplyObject(r);
    return ok;
}

static long long reply_int(redisReply *r) {
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* Both servers under load at once: a thread per server pipelines INCRs
 * of one counter on its own connection. */
#define NINCR 5000

static void *incr_main(void *arg) {
    node *n = arg;
    redisContext *c = redisConnect("127.0.0.1", atoi(n->port));
    long long last = -1;
    if (c && !c->err) {
        for (int i = 0; i < NINCR; i++) redisAppendCommand(c, "INCR ctr");
        for (int i = 0; i < NINCR; i++) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK) break;
            last = reply_int(r);
        }
    }
    if (c) redisFree(c);
    return (void *)(intptr_t)last;
}

/* n holds exactly its own keys (prefix own), none of the other's. */
static void check_keys(node *n, const char *own, const char *other) {
    CHECK_EQ_LL(reply_int(cmd(n, "DBSIZE")), NKEYS);
    int mine = 0, theirs = 0;
    for (int i = 0; i < NKEYS; i++) {
        char want[64];
        snprintf(want, sizeof(want), "%s-value-%d", own, i);
        mine += reply_is(cmd(n, "GET %s:%d", own, i), want);
        theirs += reply_int(cmd(n, "EXISTS %s:%d", other, i)) != 0;
    }
    CHECK_EQ_LL(mine, NKEYS);
    CHECK_EQ_LL(theirs, 0);
}

int main(void) {
    node a = {0}, b = {0};
    node *ns[2] = {&a, &b};
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i]->dir, sizeof(ns[i]->dir), "/tmp/rowan-twoservers-XXXXXX");
        if (!mkdtemp(ns[i]->dir)) {
            perror("mkdtemp");
            return 1;
        }
        snprintf(ns[i]->port, sizeof(ns[i]->port), "%d", unit_free_port(SOCK_STREAM));
        snprintf(ns[i]->log, sizeof(ns[i]->log), "%s/log", ns[i]->dir);
    }
    a.rename_from = "GETDEL", a.rename_to = "";   /* disabled on a only */
    b.rename_from = "ECHO", b.rename_to = "SAY";   /* b's ECHO is SAY */
    start(&a);
    start(&b);
    CHECK(a.s != b.s);

    for (int i = 0; i < NKEYS; i++) {
        CHECK(reply_is(cmd(&a, "SET a:%d a-value-%d", i, i), "OK"));
        CHECK(reply_is(cmd(&b, "SET b:%d b-value-%d", i, i), "OK"));
    }
    check_keys(&a, "a", "b");
    check_keys(&b, "b", "a");

    pthread_t ta, tb;
    void *ra, *rb;
    CHECK(reply_is(cmd(&b, "SET ctr 1000000"), "OK"));
    pthread_create(&ta, NULL, incr_main, &a);
    pthread_create(&tb, NULL, incr_main, &b);
    pthread_join(ta, &ra);
    pthread_join(tb, &rb);
    CHECK_EQ_LL((intptr_t)ra, NINCR);
    CHECK_EQ_LL((intptr_t)rb, 1000000 + NINCR);
    CHECK_EQ_LL(reply_int(cmd(&a, "DEL ctr")), 1);
    CHECK_EQ_LL(reply_int(cmd(&b, "DEL ctr")), 1);

    /* configuration and INFO are each server's own */
    redisReply *r = cmd(&b, "CONFIG GET port");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && !strcmp(r->element[1]->str, b.port));
    freeReplyObject(r);
    CHECK(reply_is(cmd(&a, "CONFIG SET maxmemory-samples 7"), "OK"));
    r = cmd(&b, "CONFIG GET maxmemory-samples");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2 && strcmp(r->element[1]->str, "7") != 0);
    freeReplyObject(r);
    r = cmd(&a, "INFO server");
    char want[64];
    snprintf(want, sizeof(want), "tcp_port:%s\r\n", a.port);
    CHECK(r->type == REDIS_REPLY_STRING);
    CHECK(strstr(r->str, want) != NULL);
    freeReplyObject(r);
    /* rename-command is each server's */
    CHECK(reply_is(cmd(&a, "ECHO hi"), "hi"));
    r = cmd(&a, "SAY hi");
    CHECK(r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    CHECK(reply_is(cmd(&b, "SAY hi"), "hi"));
    r = cmd(&b, "ECHO hi");
    CHECK(r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = cmd(&a, "GETDEL a:0");
    CHECK(r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    CHECK(reply_is(cmd(&b, "SET gd 1"), "OK"));
    CHECK(reply_is(cmd(&b, "GETDEL gd"), "1"));
    /* a key written to one after the others is not on the other */
    CHECK(reply_is(cmd(&a, "SET scratch 1"), "OK"));
    CHECK_EQ_LL(reply_int(cmd(&b, "EXISTS scratch")), 0);
    CHECK_EQ_LL(reply_int(cmd(&a, "DEL scratch")), 1);
    /* INFO commandstats is each server's: a's LPUSHes and b's SADDs are
     * counted where they ran only */
    for (int i = 0; i < 3; i++) CHECK_EQ_LL(reply_int(cmd(&a, "LPUSH onlya %d", i)), i + 1);
    for (int i = 0; i < 5; i++) CHECK_EQ_LL(reply_int(cmd(&b, "SADD onlyb %d", i)), 1);
    r = cmd(&a, "INFO commandstats");
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_lpush:calls=3,") != NULL);
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_sadd:") == NULL);
    freeReplyObject(r);
    r = cmd(&b, "INFO commandstats");
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_sadd:calls=5,") != NULL);
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_lpush:") == NULL);
    freeReplyObject(r);
    /* and so are the rejected and failed counts, and CONFIG RESETSTAT */
    r = cmd(&a, "LPUSH");   /* wrong number of arguments: rejected */
    CHECK(r->type == REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = cmd(&b, "INFO commandstats");
    CHECK(r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_lpush:") == NULL);
    freeReplyObject(r);
    CHECK(reply_is(cmd(&b, "CONFIG RESETSTAT"), "OK"));
    r = cmd(&a, "INFO commandstats");
    CHECK(r->type == REDIS_REPLY_STRING &&
          strstr(r->str, "cmdstat_lpush:calls=3,usec=") != NULL &&
          strstr(r->str, "rejected_calls=1,failed_calls=0") != NULL);
    freeReplyObject(r);
    CHECK_EQ_LL(reply_int(cmd(&a, "DEL onlya")), 1);
    CHECK_EQ_LL(reply_int(cmd(&b, "DEL onlyb")), 1);
    /* pub/sub: a channel's subscribers are per server */
    node sub = a;
    sub.c = redisConnect("127.0.0.1", atoi(a.port));
    CHECK(sub.c && !sub.c->err);
    r = cmd(&sub, "SUBSCRIBE chan");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    freeReplyObject(r);
    CHECK_EQ_LL(reply_int(cmd(&b, "PUBLISH chan hello")), 0);
    CHECK_EQ_LL(reply_int(cmd(&a, "PUBLISH chan hello")), 1);
    redisFree(sub.c);

    stop(&a);
    /* b serves on while a is gone */
    check_keys(&b, "b", "a");
    stop(&b);

    /* a again, on its pool: its keys came back, b's never were there */
    start(&a);
    check_keys(&a, "a", "b");
    stop(&a);

    for (int i = 0; i < 2; i++) {
        char rm[300];
        snprintf(rm, sizeof(rm), "rm -rf '%s'", ns[i]->dir);
        if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", ns[i]->dir);
    }
    return UNIT_DONE("test-twoservers");
}
