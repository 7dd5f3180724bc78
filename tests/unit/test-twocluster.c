/* test-twocluster.c -- a replicated cluster of two servers in one process
 * (issue 15).
 *
 * Two servers started by rowan_server_start in this process form a static
 * cluster (two cluster-node lines, replicas 2): every shard has a primary
 * on one and its backup on the other, so their replication links, control
 * threads and cluster buses run side by side in one process. Writes go to
 * each key's primary (following -MOVED) through hiredis; each write is
 * acknowledged only once its backup has persisted it; the backup applies
 * it to its copy once the primary's CommitVer covers it, so soon after the
 * writes both servers' ROWAN DIGEST agree on every shard, and the shards'
 * key counts add up to the keys written on each server, primaries and
 * backups alike.
 * Both are then stopped and freed. */
#include "boot.h"
#include "server.h"
#include "unit.h"
#include "unit_port.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NKEYS 300

typedef struct node {
    char name[16], dir[64], log[128], port[16], rport[16];
    struct rowan_server *s;
    redisContext *c;
} node;

static node nodes[2];

static void start(node *n) {
    node *a = &nodes[0], *b = &nodes[1];
    char *argv[] = {"rowan-server", "--port", n->port, "--bind", "127.0.0.1", "--dir", n->dir,
                    "--pool-size", "64mb", "--workers", "2", "--shards", "4", "--logfile", n->log,
                    "--replicas", "2",
                    "--cluster-node", a->name, "127.0.0.1", a->port, a->rport,
                    "--cluster-node", b->name, "127.0.0.1", b->port, b->rport,
                    "--cluster-self", n->name, NULL};
    char err[1024];
    n->s = rowan_server_start((int)(sizeof(argv) / sizeof(argv[0])) - 1, argv, 0, err, sizeof(err));
    if (!n->s) fprintf(stderr, "start %s: %s\n", n->name, err);
    CHECK(n->s != NULL);
    if (!n->s) exit(1);
    n->c = redisConnect("127.0.0.1", atoi(n->port));
    CHECK(n->c && !n->c->err);
}

static node *by_port(int port) {
    for (int i = 0; i < 2; i++)
        if (atoi(nodes[i].port) == port) return &nodes[i];
    return NULL;
}

/* SET key value on its primary: -MOVED names it. 1 when acknowledged. */
static int set_routed(const char *key, const char *value) {
    node *n = &nodes[0];
    for (int tries = 0; tries < 3; tries++) {
        redisReply *r = redisCommand(n->c, "SET %s %s", key, value);
        if (!r) return 0;
        int ok = r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
        int port = 0;
        if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED ", 6)) {
            const char *colon = strrchr(r->str, ':');
            port = colon ? atoi(colon + 1) : 0;
        } else if (!ok && !(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "TRYAGAIN", 8))) {
            fprintf(stderr, "SET %s: %s\n", key, r->type == REDIS_REPLY_ERROR ? r->str : "?");
        }
        freeReplyObject(r);
        if (ok) return 1;
        if (!port || !(n = by_port(port))) return 0;
    }
    return 0;
}

/* ROWAN DIGEST: per shard [id, digest, keys]. Fills keys[] and digest[]
 * (strings) by shard id; returns the number of shards, or -1. */
#define MAXSHARDS 16
static int digest_of(node *n, long long keys[MAXSHARDS], char digest[MAXSHARDS][64]) {
    redisReply *r = redisCommand(n->c, "ROWAN DIGEST");
    int count = -1;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        count = 0;
        for (size_t i = 0; i < r->elements && i < MAXSHARDS; i++) {
            redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 3) continue;
            long long sid = e->element[0]->integer;
            if (sid < 0 || sid >= MAXSHARDS) continue;
            keys[sid] = e->element[2]->integer;
            if (e->element[1]->type == REDIS_REPLY_STRING)
                snprintf(digest[sid], 64, "%s", e->element[1]->str);
            else
                snprintf(digest[sid], 64, "%lld", e->element[1]->integer);
            count++;
        }
    } else {
        fprintf(stderr, "ROWAN DIGEST on %s: %s\n", n->name,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    }
    if (r) freeReplyObject(r);
    return count;
}

int main(void) {
    for (int i = 0; i < 2; i++) {
        node *n = &nodes[i];
        snprintf(n->name, sizeof(n->name), "node%d", i);
        snprintf(n->dir, sizeof(n->dir), "/tmp/rowan-twocluster-XXXXXX");
        if (!mkdtemp(n->dir)) {
            perror("mkdtemp");
            return 1;
        }
        strcpy(n->log, n->dir);   /* dir is 63 bytes at most */
        strcat(n->log, "/log");
        snprintf(n->port, sizeof(n->port), "%d", unit_free_port(SOCK_STREAM));
        snprintf(n->rport, sizeof(n->rport), "%d", unit_free_port(SOCK_STREAM));
    }
    start(&nodes[0]);
    start(&nodes[1]);

    /* every write acknowledged: each waited for its backup */
    int acked = 0;
    for (int i = 0; i < NKEYS; i++) {
        char key[32], value[32];
        snprintf(key, sizeof(key), "key:%d", i);
        snprintf(value, sizeof(value), "value-%d", i);
        for (int t = 0; t < 50 && !set_routed(key, value); t++) usleep(100000);   /* links coming up */
        acked++;
    }
    CHECK_EQ_LL(acked, NKEYS);

    /* both servers hold every shard, primaries' and backups' copies alike */
    long long keys[2][MAXSHARDS];
    char digest[2][MAXSHARDS][64];
    int ns0 = -1, ns1 = -1;
    /* a backup applies what it persisted once the primary's CommitVer
     * covers it (its digest, src/repl/digest.h): poll until they agree */
    for (int t = 0; t < 300; t++) {
        memset(keys, 0, sizeof(keys));
        memset(digest, 0, sizeof(digest));
        ns0 = digest_of(&nodes[0], keys[0], digest[0]);
        ns1 = digest_of(&nodes[1], keys[1], digest[1]);
        if (ns0 == 4 && ns1 == 4 && !memcmp(keys[0], keys[1], sizeof(keys[0])) &&
            !memcmp(digest[0], digest[1], sizeof(digest[0])))
            break;
        usleep(100000);
    }
    CHECK_EQ_LL(ns0, 4);
    CHECK_EQ_LL(ns1, 4);
    long long total[2] = {0, 0};
    for (int s = 0; s < MAXSHARDS; s++) {
        total[0] += keys[0][s];
        total[1] += keys[1][s];
        CHECK_EQ_LL(keys[0][s], keys[1][s]);
        if (strcmp(digest[0][s], digest[1][s]) != 0)
            fprintf(stderr, "shard %d: %s != %s\n", s, digest[0][s], digest[1][s]);
        CHECK(strcmp(digest[0][s], digest[1][s]) == 0);
    }
    CHECK_EQ_LL(total[0], NKEYS);
    CHECK_EQ_LL(total[1], NKEYS);

    for (int i = 1; i >= 0; i--) {
        redisFree(nodes[i].c);
        rowan_server_stop(nodes[i].s);
    }
    for (int i = 0; i < 2; i++) {
        char rm[128];
        snprintf(rm, sizeof(rm), "rm -rf '%s'", nodes[i].dir);
        if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", nodes[i].dir);
    }
    return UNIT_DONE("test-twocluster");
}
