/* slots.c -- CLUSTER SLOTS map and -MOVED/-ASK parsing (see slots.h). */
#include "slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "hash.h"

unsigned key_slot(const char *key, size_t len) {
    return hash_slot(key, len);
}

int slotmap_node(struct slotmap *m, const char *host, int port) {
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && !strcmp(m->nodes[i].host, host))
            return i;
    if (m->nnodes == SLOTS_MAX_NODES)
        return -1;
    struct node *n = &m->nodes[m->nnodes];
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    return m->nnodes++;
}

static void slotmap_standalone(struct slotmap *m, const char *host, int port) {
    memset(m, 0, sizeof *m);
    slotmap_node(m, host, port);
}

/* One CLUSTER SLOTS entry: [start, end, [host, port, id, ...], replicas...]. */
static int slot_range(struct slotmap *m, const redisReply *e, const char *seed_host,
                      uint8_t *assigned) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
        return -1;
    const redisReply *lo = e->element[0], *hi = e->element[1], *pr = e->element[2];
    if (lo->type != REDIS_REPLY_INTEGER || hi->type != REDIS_REPLY_INTEGER ||
        pr->type != REDIS_REPLY_ARRAY || pr->elements < 2 ||
        pr->element[0]->type != REDIS_REPLY_STRING ||
        pr->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    if (lo->integer < 0 || hi->integer >= SLOTS_COUNT || lo->integer > hi->integer)
        return -1;
    /* Redis 7 sends "" or "?" when a node does not know its own address. */
    const char *host = pr->element[0]->str;
    if (!host[0] || !strcmp(host, "?"))
        host = seed_host;
    int idx = slotmap_node(m, host, (int)pr->element[1]->integer);
    if (idx < 0)
        return -1;
    for (long long s = lo->integer; s <= hi->integer; s++) {
        m->owner[s] = (uint8_t)idx;
        assigned[s] = 1;
    }
    return 0;
}

int slotmap_from_reply(struct slotmap *m, const redisReply *r, const char *seed_host) {
    static uint8_t assigned[SLOTS_COUNT];
    memset(m, 0, sizeof *m);
    memset(assigned, 0, sizeof assigned);
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return -1;
    for (size_t i = 0; i < r->elements; i++)
        if (slot_range(m, r->element[i], seed_host, assigned))
            return -1;
    /* Unassigned slots go to node 0: the reply will say -CLUSTERDOWN or
     * -MOVED, which is what the user should see. */
    m->cluster = true;
    return 0;
}

static redisContext *seed_connect(const char *host, int port, const char *password,
                                  char *err, size_t errlen) {
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port,
                 c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (password) {
        redisReply *r = redisCommand(c, "AUTH %s", password);
        bool ok = r && r->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(err, errlen, "AUTH failed: %s", r ? r->str : c->errstr);
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

int slotmap_fetch(struct slotmap *m, const char *host, int port, const char *password,
                  enum cluster_mode mode, char *err, size_t errlen) {
    redisContext *c = seed_connect(host, port, password, err, errlen);
    if (!c)
        return -1;
    int rc = 0;
    if (mode == CLUSTER_OFF) {
        /* Still prove the server answers before load starts. */
        redisReply *r = redisCommand(c, "PING");
        if (!r) {
            snprintf(err, errlen, "%s:%d does not answer: %s", host, port, c->errstr);
            rc = -1;
        }
        freeReplyObject(r);
        slotmap_standalone(m, host, port);
        redisFree(c);
        return rc;
    }
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (!r) {
        snprintf(err, errlen, "%s:%d does not answer: %s", host, port, c->errstr);
        rc = -1;
    } else if (r->type == REDIS_REPLY_ERROR) {
        /* "ERR This instance has cluster support disabled" and friends. */
        if (mode == CLUSTER_ON) {
            snprintf(err, errlen, "--cluster yes, but CLUSTER SLOTS says: %s", r->str);
            rc = -1;
        }
        slotmap_standalone(m, host, port);
    } else if (slotmap_from_reply(m, r, host)) {
        snprintf(err, errlen, "CLUSTER SLOTS reply from %s:%d is empty or malformed",
                 host, port);
        rc = -1;
    }
    freeReplyObject(r);
    redisFree(c);
    return rc;
}

enum redirect redirect_parse(const char *msg, size_t len, unsigned *slot, char *host,
                             size_t hostcap, int *port) {
    enum redirect kind;
    size_t skip;
    if (len > 6 && !memcmp(msg, "MOVED ", 6)) {
        kind = REDIRECT_MOVED;
        skip = 6;
    } else if (len > 4 && !memcmp(msg, "ASK ", 4)) {
        kind = REDIRECT_ASK;
        skip = 4;
    } else {
        return REDIRECT_NONE;
    }
    char buf[128];
    if (len - skip >= sizeof buf)
        return REDIRECT_NONE;
    memcpy(buf, msg + skip, len - skip);
    buf[len - skip] = 0;
    char *sp = strchr(buf, ' ');
    if (!sp)
        return REDIRECT_NONE;
    *sp = 0;
    char *end;
    unsigned long s = strtoul(buf, &end, 10);
    if (end == buf || *end || s >= SLOTS_COUNT)
        return REDIRECT_NONE;
    /* The port follows the last ':' so IPv6 addresses work too. */
    char *colon = strrchr(sp + 1, ':');
    if (!colon)
        return REDIRECT_NONE;
    *colon = 0;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || p <= 0 || p > 65535 || strlen(sp + 1) >= hostcap)
        return REDIRECT_NONE;
    snprintf(host, hostcap, "%s", sp + 1);
    *slot = (unsigned)s;
    *port = (int)p;
    return kind;
}
