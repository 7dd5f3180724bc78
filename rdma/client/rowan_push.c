/* rowan_push.c -- pushed output: pub/sub messages and MONITOR lines.
 *
 * A native session sends what is no command's reply (pub/sub messages,
 * MONITOR lines, tracking invalidations) as a reply with request id 0
 * (rdma/native.c). Such a datagram is neither cached nor retransmitted:
 * delivery is best effort, a message in a lost datagram is lost. A message
 * larger than one datagram comes in fragments that carry its push number
 * (rdma/dgram.h, "Pushed replies"): they are joined per node, and a join
 * another number interrupts (a fragment was lost) is dropped. A message
 * over DGRAM_REPLY_MAX arrives as a pushed error saying it was dropped.
 *
 * The engine hands every pushed value to its owner (on_push): the blocking
 * API queues them for rowanGetReply, the async API calls the callback
 * registered for the channel or pattern. A command's reply that holds
 * several values (SUBSCRIBE a b: one confirmation per channel) is its first
 * value; the others are pushed, as hiredis hands them out one by one.
 *
 * Subscriptions are noted per node from the confirmations (their third
 * element counts the link's subscriptions) and MONITOR's +OK. The server
 * forgets a native client it has not heard from for native-client-timeout
 * (60 s by default), subscriptions and all; so while a link is subscribed
 * or monitoring, the engine sends it a PING every keepalive interval (10 s
 * by default; rowanSetKeepalive). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "rowan_int.h"

#define KEEPALIVE_DEFAULT (10ull * 1000000000ull)

int rw_push_kind(const char *name, size_t len) {
    static const struct { const char *name; int kind; } k[] = {
        {"subscribe", RW_PUSH_SUB},     {"psubscribe", RW_PUSH_SUB},
        {"ssubscribe", RW_PUSH_SUB},    {"unsubscribe", RW_PUSH_UNSUB},
        {"punsubscribe", RW_PUSH_UNSUB}, {"sunsubscribe", RW_PUSH_UNSUB},
        {"monitor", RW_PUSH_MONITOR},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strlen(k[i].name) == len && strncasecmp(name, k[i].name, len) == 0) return k[i].kind;
    return RW_PUSH_NONE;
}

/* hiredis 0.14 (Debian's) has no RESP3 push type: HELLO 3 replies do not
 * decode there at all, so pushes are RESP2 arrays. */
static int is_aggregate(const redisReply *r) {
#ifdef REDIS_REPLY_PUSH
    if (r->type == REDIS_REPLY_PUSH) return 1;
#endif
    return r->type == REDIS_REPLY_ARRAY;
}

static uint64_t keepalive_ns(const rowanEngine *e) {
    return e->keepalive_ns ? e->keepalive_ns : KEEPALIVE_DEFAULT;
}

/* A (un)subscribe confirmation: [kind, name, count]. Its count says
 * whether the link is still subscribed to anything. */
static void note(rowanEngine *e, int node, const redisReply *r) {
    if (node < 0 || node >= 64 || !is_aggregate(r) || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[2]->type != REDIS_REPLY_INTEGER)
        return;
    const char *k = r->element[0]->str;
    size_t kl = r->element[0]->len;
    if (kl < 9 || strcasecmp(k + kl - 9, "subscribe") != 0) return;
    if (r->element[2]->integer > 0) e->sub_nodes |= 1ull << node;
    else e->sub_nodes &= ~(1ull << node);
    if (e->sub_nodes && !e->t_keepalive) e->t_keepalive = rw_now() + keepalive_ns(e);
}

static void deliver(rowanEngine *e, int node, redisReply *r) {
    uint64_t before = e->sub_nodes | e->mon_nodes;
    note(e, node, r);
    /* kept only for a context that is (or was just) subscribed or
     * monitoring: a client that never asked for pushes gets none */
    if (e->on_push && (before | e->sub_nodes | e->mon_nodes)) e->on_push(e, node, r);
    else freeReplyObject(r);
}

/* Every RESP value in buf, in order, into e->later (after what is there);
 * the number, or -1 if the bytes are not whole values (nothing added).
 * The engine's reader is kept between replies (no reader created and
 * freed per reply); one left in an unknown state is dropped. */
static int parse_values(rowanEngine *e, int node, const char *buf, size_t len) {
    if (!e->reader && !(e->reader = redisReaderCreate())) return -1;
    redisReader *rd = e->reader;
    int n = 0, rc = -1, base = e->nlater;
    if (redisReaderFeed(rd, buf, len) == REDIS_OK) {
        for (;;) {
            void *v = NULL;
            if (redisReaderGetReply(rd, &v) != REDIS_OK) break;
            if (!v) {
                rc = rd->pos == rd->len && n ? n : -1;
                break;
            }
            if (e->nlater == e->caplater) {
                int cap = e->caplater ? 2 * e->caplater : 8;
                void *p = realloc(e->later, sizeof(*e->later) * (size_t)cap);
                if (!p) { freeReplyObject(v); break; }
                e->later = p;
                e->caplater = cap;
            }
            e->later[e->nlater].r = v;
            e->later[e->nlater++].node = node;
            n++;
        }
    }
    if (rc < 0) {
        redisReaderFree(rd);
        e->reader = NULL;
        while (e->nlater > base) freeReplyObject(e->later[--e->nlater].r);
    }
    return rc;
}

void rw_push_flush(rowanEngine *e) {
    /* deliver may run a callback that reaches here again: take the list */
    for (int i = 0; i < e->nlater; i++) {
        redisReply *r = e->later[i].r;
        e->later[i].r = NULL;
        if (r) deliver(e, e->later[i].node, r);
    }
    e->nlater = 0;
}

void rw_push_free(rowanEngine *e) {
    for (int i = 0; i < e->nnodes; i++) dgram_join_free(&e->nodes[i].push_join);
    while (e->nlater > 0) freeReplyObject(e->later[--e->nlater].r);
    free(e->later);
    e->later = NULL;
    e->caplater = 0;
}

redisReply *rw_push_reply(rowanEngine *e, rw_req *q, const char *buf, size_t len) {
    int base = e->nlater;
    if (parse_values(e, q->node, buf, len) < 0) return NULL;
    /* the first value is the reply; the others stay in `later`, pushed
     * once the reply is handed over (rw_push_flush), so they come after it */
    redisReply *r = e->later[base].r;
    memmove(&e->later[base], &e->later[base + 1], sizeof(*e->later) * (size_t)(e->nlater - base - 1));
    e->nlater--;
    if (q->push == RW_PUSH_MONITOR && r->type == REDIS_REPLY_STATUS && q->node >= 0 &&
        q->node < 64 && strcmp(r->str, "OK") == 0) {
        e->mon_nodes |= 1ull << q->node;
        if (!e->t_keepalive) e->t_keepalive = rw_now() + keepalive_ns(e);
    }
    note(e, q->node, r);
    return r;
}

void rw_push_datagram(rowanEngine *e, int node, const dgram_hdr *h, const unsigned char *pl,
                      size_t plen) {
    if (h->type != DGRAM_REPLY) return;
    if (h->nfrag == 1) {
        if (h->off == 0 && plen == h->total && parse_values(e, node, (const char *)pl, plen) > 0)
            rw_push_flush(e);
        return;
    }
    /* a fragment of a larger message: joined by its push number (0: a
     * server that does not number them; its fragments cannot be joined) */
    rw_node *n = &e->nodes[node];
    if (h->acked == 0) return;
    if (h->acked != n->push_num) {   /* another message begins: drop what was left */
        dgram_join_free(&n->push_join);
        n->push_num = h->acked;
    }
    int rc = dgram_join_add(&n->push_join, h, pl, plen);
    if (rc == 0) return;
    if (rc == 1 && parse_values(e, node, (const char *)n->push_join.buf, n->push_join.total) > 0) {
        dgram_join_free(&n->push_join);
        n->push_num = 0;
        rw_push_flush(e);
        return;
    }
    dgram_join_free(&n->push_join);   /* did not join or parse */
    n->push_num = 0;
}

static void keepalive_done(rowanEngine *e, rw_req *q) {
    (void)e;
    rw_req_free(q);    /* best effort: a lost keepalive is followed by the next */
}

void rw_push_timer(rowanEngine *e, uint64_t now) {
    uint64_t nodes = e->sub_nodes | e->mon_nodes;
    if (!nodes) {
        e->t_keepalive = 0;
        return;
    }
    if (now < e->t_keepalive) return;
    e->t_keepalive = now + keepalive_ns(e);
    for (int i = 0; i < e->nnodes && i < 64; i++) {
        if (!(nodes >> i & 1)) continue;
        static const char *ping[] = {"PING"};
        int err;
        char why[128];
        rw_req *q = rw_req_new(e, 1, ping, NULL, &err, why, sizeof why);
        if (!q) continue;
        q->done = keepalive_done;
        rw_submit_to(e, q, i);
    }
}

uint64_t rw_push_next(const rowanEngine *e, uint64_t now) {
    if (!(e->sub_nodes | e->mon_nodes) || !e->t_keepalive) return UINT64_MAX;
    return e->t_keepalive > now ? e->t_keepalive - now : 0;
}
