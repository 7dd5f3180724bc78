/* pubsub.c -- SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH,
 * PUBSUB, with subscribers on any worker.
 *
 * Registry. One global table under one mutex (ps_lock): channel name ->
 * subscribed clients (a chained hash table), and the list of distinct
 * patterns -> subscribed clients. Each client also keeps its own channel and
 * pattern lists (for UNSUBSCRIBE without arguments, the subscription count,
 * and to leave the registry when it goes away).
 *
 * Delivery. PUBLISH walks the registry under the mutex. A subscriber on the
 * publisher's own worker (another connection) gets the message written into
 * its output at once: only that worker's thread touches its clients. A
 * subscriber on another worker, or the publishing connection itself, gets a
 * record in its inbox (under the mutex), as does every subscriber of a
 * message published without a publishing client (keyspace notifications);
 * the client is put on its worker's delivery list and that worker is woken (worker_wake). The worker writes
 * the inbox into the client's output in its next before_sleep
 * (pubsub_deliver), ahead of that round's flush. Messages are not durable
 * (nor in Redis), so they need no gating; they are appended after whatever
 * the connection already has in its output, so they never overtake a held
 * reply, and a PUBLISH reply goes the normal way. A connection's message to
 * itself arrives after its PUBLISH reply (as in Redis 7.2, which defers
 * push messages to after the command's reply).
 *
 * A client is freed only by its own worker, which first calls pubsub_reset:
 * under the mutex it leaves the registry and its worker's delivery list, so
 * no publisher can reach a freed client.
 *
 * Lock order: ps_lock may be taken while shard locks are held (PUBLISH
 * inside EXEC), never the other way round.
 *
 * Context rule (RESP2): a client with subscriptions may only run
 * (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET; PING then answers
 * ["pong", arg]. RESP3 clients get push messages and may run anything.
 *
 * Sharded pub/sub (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH, PUBSUB SHARD*) is
 * the same machinery over a second channel table (shard_table) and a third
 * list per client: shard channels are a namespace of their own, patterns
 * never match them, messages are "smessage", and (S)SUBSCRIBE's counts are
 * the client's shard channels alone, as in Redis 7.0. The command table
 * gives the channels as key positions, so in a cluster they route by slot
 * (-MOVED, -CROSSSLOT) exactly as Redis Cluster's slot rules say. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pubsub.h"
#include "commands.h"
#include "multi.h"
#include "server.h"
#include "util.h"
#include "worker.h"
#include "edge_state.h"

typedef struct sublist {
    client **v;
    int n, cap;
} sublist;

typedef struct channel {
    struct channel *next;
    uint64_t hash;
    sublist subs;
    size_t len;
    char name[];
} channel;

typedef struct pattern {
    sublist subs;
    size_t len;
    char *name;
} pattern;

/* A client's side (c->ps). Lists: owner thread, changed under ps_lock.
 * inbox/queued: under ps_lock. */
typedef struct pubsub_client {
    char **chans; size_t *chlens; int nch, capch;
    char **pats; size_t *patlens; int npat, cappat;
    char **schans; size_t *schlens; int nsch, capsch;   /* shard channels */
    rbuf inbox;            /* records: u8 kind, then (u32 len, bytes) x 3; kinds: m message,
                            * p pmessage, s smessage, i/I invalidation (of a key / of all),
                            * l MONITOR line, b tracking-redir-broken */
    int queued;            /* on its worker's delivery list */
    int inbox_full;        /* a message was dropped: the inbox reached the limit */
} pubsub_client;

/* An inbox taken out of the registry for delivery. */
typedef struct taken_inbox {
    client *c;
    rbuf msgs;
    int full;
} taken_inbox;

/* Per worker: clients with something in their inbox. */
typedef struct delivery {
    client **v;
    int n, cap;
    _Atomic int pending;
    taken_inbox *taken;    /* owner only: pubsub_deliver's scratch */
    int captaken;
} delivery;

/* A channel name -> subscribers table: the plain one and the shard one. */
typedef struct chtable {
    channel **buckets;
    size_t nbuckets, nchannels;
} chtable;

/* This file's state, one per server (server.h). */
struct pubsub_state {
    pthread_mutex_t ps_lock;
    chtable plain_table;
    chtable shard_table;
    pattern *patterns;
    int npatterns;
    int cappatterns;
    delivery *deliveries;
    pthread_once_t deliveries_once;
};

void pubsub_state_new(void) {
    struct pubsub_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->ps_lock, NULL);
    st->deliveries_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    server.edge_state->pubsub = st;
}

void pubsub_state_free(void) {
    struct pubsub_state *st = server.edge_state->pubsub;
    /* every client is freed: no channel or pattern is left, only tables */
    free(st->plain_table.buckets);
    free(st->shard_table.buckets);
    free(st->patterns);
    for (int i = 0; st->deliveries && i < server.nworkers; i++) {
        free(st->deliveries[i].v);
        free(st->deliveries[i].taken);
    }
    free(st->deliveries);
    pthread_mutex_destroy(&st->ps_lock);
    free(st);
}

#define ps_lock (server.edge_state->pubsub->ps_lock)
#define plain_table (server.edge_state->pubsub->plain_table)
#define shard_table (server.edge_state->pubsub->shard_table)
#define patterns (server.edge_state->pubsub->patterns)
#define npatterns (server.edge_state->pubsub->npatterns)
#define cappatterns (server.edge_state->pubsub->cappatterns)
#define deliveries (server.edge_state->pubsub->deliveries)
#define deliveries_once (server.edge_state->pubsub->deliveries_once)

static void deliveries_init(void) {
    deliveries = calloc((size_t)server.nworkers, sizeof(delivery));
}

static uint64_t name_hash(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static int same(const char *a, size_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* ---------------- registry (ps_lock held) ---------------- */

static void sublist_add(sublist *l, client *c) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4;
        l->v = realloc(l->v, sizeof(client *) * (size_t)l->cap);
    }
    l->v[l->n++] = c;
}

static void sublist_remove(sublist *l, client *c) {
    for (int i = 0; i < l->n; i++) {
        if (l->v[i] == c) {
            memmove(l->v + i, l->v + i + 1, sizeof(client *) * (size_t)(l->n - i - 1));
            l->n--;
            return;
        }
    }
}

static channel *channel_find(const chtable *t, const char *name, size_t len) {
    if (!t->nbuckets) return NULL;
    uint64_t h = name_hash(name, len);
    for (channel *ch = t->buckets[h & (t->nbuckets - 1)]; ch; ch = ch->next)
        if (ch->hash == h && same(ch->name, ch->len, name, len)) return ch;
    return NULL;
}

static void channels_grow(chtable *t) {
    size_t n = t->nbuckets ? t->nbuckets * 2 : 64;
    channel **b = calloc(n, sizeof(channel *));
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (channel *ch = t->buckets[i], *next; ch; ch = next) {
            next = ch->next;
            ch->next = b[ch->hash & (n - 1)];
            b[ch->hash & (n - 1)] = ch;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

static channel *channel_get(chtable *t, const char *name, size_t len) {
    channel *ch = channel_find(t, name, len);
    if (ch) return ch;
    if (t->nchannels >= t->nbuckets) channels_grow(t);
    ch = calloc(1, sizeof(channel) + len + 1);
    ch->hash = name_hash(name, len);
    ch->len = len;
    memcpy(ch->name, name, len);
    ch->next = t->buckets[ch->hash & (t->nbuckets - 1)];
    t->buckets[ch->hash & (t->nbuckets - 1)] = ch;
    t->nchannels++;
    return ch;
}

static void channel_unsubscribe(chtable *t, const char *name, size_t len, client *c) {
    channel *ch = channel_find(t, name, len);
    if (!ch) return;
    sublist_remove(&ch->subs, c);
    if (ch->subs.n) return;
    channel **pp = &t->buckets[ch->hash & (t->nbuckets - 1)];
    while (*pp != ch) pp = &(*pp)->next;
    *pp = ch->next;
    free(ch->subs.v);
    free(ch);
    t->nchannels--;
}

static pattern *pattern_find(const char *name, size_t len) {
    for (int i = 0; i < npatterns; i++)
        if (same(patterns[i].name, patterns[i].len, name, len)) return &patterns[i];
    return NULL;
}

static void pattern_subscribe(const char *name, size_t len, client *c) {
    pattern *p = pattern_find(name, len);
    if (!p) {
        if (npatterns == cappatterns) {
            cappatterns = cappatterns ? cappatterns * 2 : 8;
            patterns = realloc(patterns, sizeof(pattern) * (size_t)cappatterns);
        }
        p = &patterns[npatterns++];
        memset(p, 0, sizeof(*p));
        p->name = malloc(len + 1);
        memcpy(p->name, name, len);
        p->len = len;
    }
    sublist_add(&p->subs, c);
}

static void pattern_unsubscribe(const char *name, size_t len, client *c) {
    pattern *p = pattern_find(name, len);
    if (!p) return;
    sublist_remove(&p->subs, c);
    if (p->subs.n) return;
    free(p->subs.v);
    free(p->name);
    *p = patterns[--npatterns];
}

/* ---------------- the client's side ---------------- */

/* ps_lock held. */
static pubsub_client *ps_new(client *c) {
    pubsub_client *ps = calloc(1, sizeof(pubsub_client));
    rbuf_init(&ps->inbox);
    __atomic_store_n(&c->ps, ps, __ATOMIC_RELEASE);
    return ps;
}

/* c's side, made on first use. Another thread may make it too (an
 * invalidation for a tracking client, pubsub_push_invalidate), so it is
 * made under ps_lock. */
static pubsub_client *ps_of(client *c) {
    if (!__atomic_load_n(&c->ps, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&ps_lock);
        if (!c->ps) ps_new(c);
        pthread_mutex_unlock(&ps_lock);
    }
    return c->ps;
}

int pubsub_channel_count(const client *c) { return c->ps ? c->ps->nch : 0; }
int pubsub_pattern_count(const client *c) { return c->ps ? c->ps->npat : 0; }
static int sub_count(const client *c) { return c->ps ? c->ps->nch + c->ps->npat : 0; }
/* Any subscription at all (the RESP2 context rule). */
static int any_sub(const client *c) { return c->ps && (c->ps->nch + c->ps->npat + c->ps->nsch) > 0; }

static int list_find(char **names, size_t *lens, int n, const char *s, size_t len) {
    for (int i = 0; i < n; i++)
        if (same(names[i], lens[i], s, len)) return i;
    return -1;
}

static void list_add(char ***names, size_t **lens, int *n, int *cap, const char *s, size_t len) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *names = realloc(*names, sizeof(char *) * (size_t)*cap);
        *lens = realloc(*lens, sizeof(size_t) * (size_t)*cap);
    }
    char *copy = malloc(len + 1);
    memcpy(copy, s, len);
    copy[len] = 0;
    (*names)[*n] = copy;
    (*lens)[*n] = len;
    (*n)++;
}

static void list_del(char **names, size_t *lens, int *n, int i) {
    free(names[i]);
    names[i] = names[*n - 1];
    lens[i] = lens[*n - 1];
    (*n)--;
}

/* ["kind", name, count]: the answer to each (un)subscription; a shard
 * kind counts the shard channels only. */
static void reply_sub(client *c, const char *kind, const char *name, size_t len, int has_name) {
    resp_add_push(&c->out, 3);
    resp_add_bulkstr(&c->out, kind);
    if (has_name) resp_add_bulk(&c->out, name, len);
    else resp_add_null(&c->out);
    int sharded = !strcmp(kind, "ssubscribe") || !strcmp(kind, "sunsubscribe");
    resp_add_int(&c->out, sharded ? c->ps->nsch : sub_count(c));
}

/* ---------------- delivery ---------------- */

/* kind: 'm' message, 'p' pmessage (pat set), 's' smessage. */
static void write_message(client *c, char kind, const char *pat, size_t plen, const char *ch,
                          size_t clen, const char *msg, size_t mlen) {
    if (kind == 'p') {
        resp_add_push(&c->out, 4);
        resp_add_bulkstr(&c->out, "pmessage");
        resp_add_bulk(&c->out, pat, plen);
    } else {
        resp_add_push(&c->out, 3);
        resp_add_bulkstr(&c->out, kind == 's' ? "smessage" : "message");
    }
    resp_add_bulk(&c->out, ch, clen);
    resp_add_bulk(&c->out, msg, mlen);
}

/* A client-side caching invalidation (tracking.c), as Redis's
 * sendTrackingMessage: a RESP3 push, or for a RESP2 client in the pub/sub
 * context the message of channel __redis__:invalidate. key NULL: every
 * key (FLUSHALL). */
static void write_invalidate(client *c, const char *key, size_t klen) {
    if (c->out.proto > 2) {
        resp_add_push(&c->out, 2);
        resp_add_bulkstr(&c->out, "invalidate");
    } else if (sub_count(c) > 0) {
        resp_add_push(&c->out, 3);
        resp_add_bulkstr(&c->out, "message");
        resp_add_bulkstr(&c->out, "__redis__:invalidate");
    } else {
        return;
    }
    if (!key) {
        resp_add_null(&c->out);
        return;
    }
    resp_add_array(&c->out, 1);
    resp_add_bulk(&c->out, key, klen);
}

/* A MONITOR line: a status reply (+line), in RESP2 and RESP3 alike. */
static void write_line(client *c, const char *line, size_t len) {
    resp_add_raw(&c->out, "+", 1);
    resp_add_raw(&c->out, line, len);
    resp_add_raw(&c->out, "\r\n", 2);
}

/* A tracking client whose REDIRECT target went away (RESP3 only). */
static void write_redir_broken(client *c, const char *id, size_t len) {
    if (c->out.proto < 3) return;
    long long v = 0;
    string2ll(id, len, &v);
    resp_add_push(&c->out, 2);
    resp_add_bulkstr(&c->out, "tracking-redir-broken");
    resp_add_int(&c->out, v);
}

static void inbox_put(rbuf *b, const char *s, size_t len) {
    uint32_t l = (uint32_t)len;
    rbuf_append(b, &l, 4);
    rbuf_append(b, s, len);
}

static const char *inbox_get(const char **p, size_t *len) {
    uint32_t l;
    memcpy(&l, *p, 4);
    const char *s = *p + 4;
    *p = s + l;
    *len = l;
    return s;
}

/* One message for subscriber sub, published by pub (ps_lock held). Sets
 * wake[worker id] when another worker must be woken.
 *
 * Output limits: a subscriber is in the pubsub class of
 * client-output-buffer-limit. Written at once, the message is checked like
 * any output (the subscriber is closed if it passed its limits); delivered
 * from the inbox, likewise, at delivery. The inbox itself only holds what
 * was published during one round of the subscriber's worker, which may lag
 * behind the publisher's: it is bounded by client-output-buffer-max, not by
 * the class limit, so a subscriber that reads is not closed because its
 * worker was late. A message that would take an inbox past that is dropped
 * and the owner closes the subscriber at delivery. */
static void inbox_add(client *sub, char kind, const char *pat, size_t plen, const char *ch,
                      size_t clen, const char *msg, size_t mlen, char *wake);
static void push_record(client *target, char kind, const char *s, size_t len);

/* kind: 'm' message, 'p' pmessage, 's' smessage. */
static void send_to(client *pub, client *sub, char kind, const char *pat, size_t plen,
                    const char *ch, size_t clen, const char *msg, size_t mlen, char *wake) {
    /* Written at once only when nothing waits in sub's inbox: a message
     * never overtakes an earlier one (a keyspace notification). */
    if (pub && sub->w == pub->w && sub != pub && !sub->ps->queued) {
        client_out_prepare(sub);
        write_message(sub, kind, pat, plen, ch, clen, msg, mlen);
        client_out_check(sub);
        worker_add_pending(sub->w, sub);
        return;
    }
    inbox_add(sub, kind, pat, plen, ch, clen, msg, mlen, wake);
}

/* Queue one record for sub's worker to write (ps_lock held). */
static void inbox_add(client *sub, char kind, const char *pat, size_t plen, const char *ch,
                      size_t clen, const char *msg, size_t mlen, char *wake) {
    pubsub_client *ps = sub->ps;
    long long cap = __atomic_load_n(&server.cfg.client_output_buffer_max, __ATOMIC_RELAXED);
    if (cap > 0 && ps->inbox.len + 13 + plen + clen + mlen > (unsigned long long)cap)
        ps->inbox_full = 1;
    if (!ps->inbox_full) {
        rbuf_append(&ps->inbox, &kind, 1);
        inbox_put(&ps->inbox, pat ? pat : "", pat ? plen : 0);
        inbox_put(&ps->inbox, ch, clen);
        inbox_put(&ps->inbox, msg, mlen);
    }
    if (!ps->queued) {
        delivery *d = &deliveries[sub->w->id];
        if (d->n == d->cap) {
            d->cap = d->cap ? d->cap * 2 : 16;
            d->v = realloc(d->v, sizeof(client *) * (size_t)d->cap);
        }
        d->v[d->n++] = sub;
        ps->queued = 1;
        atomic_store(&d->pending, 1);
        wake[sub->w->id] = 1;
    }
}

/* Write one taken inbox into c's output, within c's limits, writing to the
 * socket as it goes. */
static void deliver_inbox(client *c, const rbuf *msgs, int full) {
    const char *p = msgs->buf, *end = msgs->buf + msgs->len;
    client_out_prepare(c);
    if (full) c->out.overflow = 1;
    while (p < end && !c->out.overflow) {
        char kind = *p++;
        size_t plen, clen, mlen;
        const char *pat = inbox_get(&p, &plen);
        const char *ch = inbox_get(&p, &clen);
        const char *msg = inbox_get(&p, &mlen);
        if (kind == 'i' || kind == 'I') write_invalidate(c, kind == 'i' ? ch : NULL, clen);
        else if (kind == 'l') write_line(c, ch, clen);
        else if (kind == 'b') write_redir_broken(c, ch, clen);
        else write_message(c, kind, pat, plen, ch, clen, msg, mlen);
        client_out_write_some(c);
    }
    client_out_check(c);
}

void pubsub_deliver(worker *w) {
    pthread_once(&deliveries_once, deliveries_init);
    delivery *d = &deliveries[w->id];
    if (!atomic_load(&d->pending)) return;
    /* Take the inboxes under the lock (publishers start new ones) and write
     * them after it: writing them out may write to sockets. Only this
     * thread frees these clients, so they outlive the unlocked part. */
    pthread_mutex_lock(&ps_lock);
    atomic_store(&d->pending, 0);
    int n = d->n;
    if (n > d->captaken) {
        d->captaken = n;
        d->taken = realloc(d->taken, sizeof(taken_inbox) * (size_t)n);
    }
    for (int i = 0; i < n; i++) {
        pubsub_client *ps = d->v[i]->ps;
        d->taken[i] = (taken_inbox){ d->v[i], ps->inbox, ps->inbox_full };
        rbuf_init(&ps->inbox);
        ps->inbox_full = 0;
        ps->queued = 0;
    }
    d->n = 0;
    pthread_mutex_unlock(&ps_lock);
    for (int i = 0; i < n; i++) {
        deliver_inbox(d->taken[i].c, &d->taken[i].msgs, d->taken[i].full);
        rbuf_free(&d->taken[i].msgs);
        worker_add_pending(w, d->taken[i].c);
    }
}

void pubsub_counts(long long *channels, long long *patterns_n, long long *shard_channels) {
    pthread_mutex_lock(&ps_lock);
    *channels = (long long)plain_table.nchannels;
    *patterns_n = npatterns;
    *shard_channels = (long long)shard_table.nchannels;
    pthread_mutex_unlock(&ps_lock);
}

void pubsub_reset(client *c) {
    pubsub_client *ps = c->ps;
    if (!ps) return;
    pthread_once(&deliveries_once, deliveries_init);
    pthread_mutex_lock(&ps_lock);
    c->ps = NULL;   /* under the lock: pubsub_push_invalidate reads it there */
    for (int i = 0; i < ps->nch; i++) {
        channel_unsubscribe(&plain_table, ps->chans[i], ps->chlens[i], c);
        free(ps->chans[i]);
    }
    for (int i = 0; i < ps->nsch; i++) {
        channel_unsubscribe(&shard_table, ps->schans[i], ps->schlens[i], c);
        free(ps->schans[i]);
    }
    for (int i = 0; i < ps->npat; i++) {
        pattern_unsubscribe(ps->pats[i], ps->patlens[i], c);
        free(ps->pats[i]);
    }
    if (ps->queued) {
        delivery *d = &deliveries[c->w->id];
        for (int i = 0; i < d->n; i++) {
            if (d->v[i] == c) {
                d->v[i] = d->v[--d->n];
                break;
            }
        }
    }
    pthread_mutex_unlock(&ps_lock);
    free(ps->chans);
    free(ps->chlens);
    free(ps->schans);
    free(ps->schlens);
    free(ps->pats);
    free(ps->patlens);
    rbuf_free(&ps->inbox);
    free(ps);
}

void pubsub_push_invalidate(client *target, const char *key, size_t klen) {
    push_record(target, key ? 'i' : 'I', key ? key : "", key ? klen : 0);
}

void pubsub_push_line(client *target, const char *line, size_t len) {
    push_record(target, 'l', line, len);
}

void pubsub_push_redir_broken(client *target, uint64_t id) {
    char buf[24];
    int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)id);
    push_record(target, 'b', buf, (size_t)n);
}

static void push_record(client *target, char kind, const char *s, size_t len) {
    pthread_once(&deliveries_once, deliveries_init);
    char wakestack[64];
    char *wake = server.nworkers <= 64 ? wakestack : malloc((size_t)server.nworkers);
    memset(wake, 0, (size_t)server.nworkers);
    pthread_mutex_lock(&ps_lock);
    if (!target->ps) ps_new(target);
    inbox_add(target, kind, "", 0, s, len, "", 0, wake);
    pthread_mutex_unlock(&ps_lock);
    for (int i = 0; i < server.nworkers; i++)
        if (wake[i]) worker_wake(server.workers[i]);
    if (wake != wakestack) free(wake);
}

/* ---------------- the context rule ---------------- */

int pubsub_intercept(client *c) {
    if (c->out.proto != 2 || !any_sub(c)) return 0;
    static const char *const allowed[] = {"subscribe", "unsubscribe", "psubscribe",
                                          "punsubscribe", "ssubscribe", "sunsubscribe",
                                          "quit", "reset", NULL};
    const char *name = c->cmd->name;
    for (int i = 0; allowed[i]; i++)
        if (strcmp(name, allowed[i]) == 0) return 0;
    if (strcmp(name, "ping") == 0) {
        if (c->argc > 2) return 0;  /* PING's own arity error */
        resp_add_array(&c->out, 2);
        resp_add_bulkstr(&c->out, "pong");
        if (c->argc == 2) resp_add_bulk(&c->out, c->argv[1], c->argvlen[1]);
        else resp_add_bulk(&c->out, "", 0);
        return 1;
    }
    char msg[256];
    snprintf(msg, sizeof(msg), "Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
             "PING / QUIT / RESET are allowed in this context", name);
    if (c->cmd->proc == execCommand) {
        resp_add_errorf(&c->out, "EXECABORT Transaction discarded because of: %s", msg);
        multi_reset(c);
    } else {
        resp_add_errorf(&c->out, "ERR %s", msg);
        multi_flag_error(c);
    }
    atomic_fetch_add(&command_stats(c->cmd)->rejected_calls, 1);
    return 1;
}

/* ---------------- commands ---------------- */

/* SUBSCRIBE / SSUBSCRIBE */
static void subscribe_generic(client *c, int sharded) {
    pubsub_client *ps = ps_of(c);
    char ***names = sharded ? &ps->schans : &ps->chans;
    size_t **lens = sharded ? &ps->schlens : &ps->chlens;
    int *n = sharded ? &ps->nsch : &ps->nch, *cap = sharded ? &ps->capsch : &ps->capch;
    for (int j = 1; j < c->argc; j++) {
        const char *ch = c->argv[j];
        size_t len = c->argvlen[j];
        if (list_find(*names, *lens, *n, ch, len) < 0) {
            pthread_mutex_lock(&ps_lock);
            sublist_add(&channel_get(sharded ? &shard_table : &plain_table, ch, len)->subs, c);
            list_add(names, lens, n, cap, ch, len);
            pthread_mutex_unlock(&ps_lock);
        }
        reply_sub(c, sharded ? "ssubscribe" : "subscribe", ch, len, 1);
    }
}

void subscribeCommand(client *c) { subscribe_generic(c, 0); }
void ssubscribeCommand(client *c) { subscribe_generic(c, 1); }

void psubscribeCommand(client *c) {
    pubsub_client *ps = ps_of(c);
    for (int j = 1; j < c->argc; j++) {
        const char *p = c->argv[j];
        size_t len = c->argvlen[j];
        if (list_find(ps->pats, ps->patlens, ps->npat, p, len) < 0) {
            pthread_mutex_lock(&ps_lock);
            pattern_subscribe(p, len, c);
            list_add(&ps->pats, &ps->patlens, &ps->npat, &ps->cappat, p, len);
            pthread_mutex_unlock(&ps_lock);
        }
        reply_sub(c, "psubscribe", p, len, 1);
    }
}

/* UNSUBSCRIBE / PUNSUBSCRIBE / SUNSUBSCRIBE (patterns_too 2): the named
 * ones, or all of them. */
static void unsubscribe_generic(client *c, int patterns_too) {
    pubsub_client *ps = ps_of(c);
    int sharded = patterns_too == 2;
    if (sharded) patterns_too = 0;
    chtable *t = sharded ? &shard_table : &plain_table;
    char ***names = patterns_too ? &ps->pats : sharded ? &ps->schans : &ps->chans;
    size_t **lens = patterns_too ? &ps->patlens : sharded ? &ps->schlens : &ps->chlens;
    int *n = patterns_too ? &ps->npat : sharded ? &ps->nsch : &ps->nch;
    const char *kind = patterns_too ? "punsubscribe" : sharded ? "sunsubscribe" : "unsubscribe";
    if (c->argc == 1) {
        if (*n == 0) {
            reply_sub(c, kind, NULL, 0, 0);
            return;
        }
        while (*n > 0) {
            int i = *n - 1;
            char *name = (*names)[i];
            size_t len = (*lens)[i];
            pthread_mutex_lock(&ps_lock);
            if (patterns_too) pattern_unsubscribe(name, len, c);
            else channel_unsubscribe(t, name, len, c);
            (*n)--;
            pthread_mutex_unlock(&ps_lock);
            reply_sub(c, kind, name, len, 1);
            free(name);
        }
        return;
    }
    for (int j = 1; j < c->argc; j++) {
        const char *name = c->argv[j];
        size_t len = c->argvlen[j];
        int i = list_find(*names, *lens, *n, name, len);
        if (i >= 0) {
            pthread_mutex_lock(&ps_lock);
            if (patterns_too) pattern_unsubscribe(name, len, c);
            else channel_unsubscribe(t, name, len, c);
            list_del(*names, *lens, n, i);
            pthread_mutex_unlock(&ps_lock);
        }
        reply_sub(c, kind, name, len, 1);
    }
}

void unsubscribeCommand(client *c) { unsubscribe_generic(c, 0); }
void punsubscribeCommand(client *c) { unsubscribe_generic(c, 1); }
void sunsubscribeCommand(client *c) { unsubscribe_generic(c, 2); }

/* PUBLISH (sharded 0) or SPUBLISH (1): see pubsub_publish. */
static long long publish_to(client *pub, int sharded, const char *ch, size_t clen, const char *msg,
                            size_t mlen) {
    pthread_once(&deliveries_once, deliveries_init);
    char wakestack[64];
    char *wake = server.nworkers <= 64 ? wakestack : malloc((size_t)server.nworkers);
    memset(wake, 0, (size_t)server.nworkers);
    long long receivers = 0;
    pthread_mutex_lock(&ps_lock);
    channel *chan = channel_find(sharded ? &shard_table : &plain_table, ch, clen);
    if (chan) {
        for (int i = 0; i < chan->subs.n; i++)
            send_to(pub, chan->subs.v[i], sharded ? 's' : 'm', NULL, 0, ch, clen, msg, mlen,
                    wake);
        receivers += chan->subs.n;
    }
    for (int p = 0; p < npatterns && !sharded; p++) {
        pattern *pat = &patterns[p];
        if (!stringmatchlen(pat->name, pat->len, ch, clen, 0)) continue;
        for (int i = 0; i < pat->subs.n; i++)
            send_to(pub, pat->subs.v[i], 'p', pat->name, pat->len, ch, clen, msg, mlen, wake);
        receivers += pat->subs.n;
    }
    pthread_mutex_unlock(&ps_lock);
    for (int i = 0; i < server.nworkers; i++)
        if (wake[i] && (!pub || server.workers[i] != pub->w)) worker_wake(server.workers[i]);
    if (wake != wakestack) free(wake);
    return receivers;
}

long long pubsub_publish(client *pub, const char *ch, size_t clen, const char *msg, size_t mlen) {
    return publish_to(pub, 0, ch, clen, msg, mlen);
}

void publishCommand(client *c) {
    int sharded = c->cmd->proc == spublishCommand;
    resp_add_int(&c->out, publish_to(c, sharded, c->argv[1], c->argvlen[1], c->argv[2],
                                     c->argvlen[2]));
    /* the cluster's other nodes' subscribers too (Redis Cluster's rule) */
    if (!sharded) pubsub_broadcast(c->argv[1], c->argvlen[1], c->argv[2], c->argvlen[2]);
}

/* SPUBLISH: PUBLISH to the sharded table (publishCommand tells them apart). */
void spublishCommand(client *c) { publishCommand(c); }

/* ---------------- PUBSUB ---------------- */

static void pubsub_help(client *c) {
    static const char *const lines[] = {
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active sharded level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified sharded level channel(s)",
        "HELP",
        "    Print this help.",
        NULL,
    };
    int n = 0;
    while (lines[n]) n++;
    resp_add_array(&c->out, n);
    for (int i = 0; i < n; i++) resp_add_simple(&c->out, lines[i]);
}

static void reply_channels(client *c, const chtable *t, const char *pat, size_t plen) {
    rbuf names;
    rbuf_init(&names);
    long long n = 0;
    pthread_mutex_lock(&ps_lock);
    for (size_t b = 0; b < t->nbuckets; b++) {
        for (channel *ch = t->buckets[b]; ch; ch = ch->next) {
            if (pat && !stringmatchlen(pat, plen, ch->name, ch->len, 0)) continue;
            inbox_put(&names, ch->name, ch->len);
            n++;
        }
    }
    pthread_mutex_unlock(&ps_lock);
    resp_add_array(&c->out, n);
    const char *p = names.buf;
    for (long long i = 0; i < n; i++) {
        size_t len;
        const char *s = inbox_get(&p, &len);
        resp_add_bulk(&c->out, s, len);
    }
    rbuf_free(&names);
}

void pubsubCommand(client *c) {
    const char *sub = c->argv[1];
    size_t sublen = c->argvlen[1];
    int sharded = 0;
    if (strcaseeqlen(sub, sublen, "help") && c->argc == 2) {
        pubsub_help(c);
    } else if ((strcaseeqlen(sub, sublen, "channels") ||
                (sharded = strcaseeqlen(sub, sublen, "shardchannels"))) && c->argc <= 3) {
        reply_channels(c, sharded ? &shard_table : &plain_table, c->argc == 3 ? c->argv[2] : NULL,
                       c->argc == 3 ? c->argvlen[2] : 0);
    } else if (strcaseeqlen(sub, sublen, "numsub") ||
               (sharded = strcaseeqlen(sub, sublen, "shardnumsub"))) {
        resp_add_array(&c->out, (long long)(c->argc - 2) * 2);
        for (int j = 2; j < c->argc; j++) {
            pthread_mutex_lock(&ps_lock);
            channel *ch = channel_find(sharded ? &shard_table : &plain_table, c->argv[j], c->argvlen[j]);
            long long n = ch ? ch->subs.n : 0;
            pthread_mutex_unlock(&ps_lock);
            resp_add_bulk(&c->out, c->argv[j], c->argvlen[j]);
            resp_add_int(&c->out, n);
        }
    } else if (strcaseeqlen(sub, sublen, "numpat") && c->argc == 2) {
        pthread_mutex_lock(&ps_lock);
        long long n = npatterns;
        pthread_mutex_unlock(&ps_lock);
        resp_add_int(&c->out, n);
    } else if (strcaseeqlen(sub, sublen, "help") || strcaseeqlen(sub, sublen, "channels") ||
               strcaseeqlen(sub, sublen, "shardchannels") || strcaseeqlen(sub, sublen, "numpat")) {
        char lower[32];
        size_t n = sublen < sizeof(lower) - 1 ? sublen : sizeof(lower) - 1;
        for (size_t i = 0; i < n; i++) lower[i] = (char)(sub[i] | 0x20);
        lower[n] = 0;
        resp_add_errorf(&c->out, "ERR wrong number of arguments for 'pubsub|%s' command", lower);
    } else {
        int n = sublen < 128 ? (int)sublen : 128;
        resp_add_errorf(&c->out, "ERR unknown subcommand '%.*s'. Try PUBSUB HELP.", n, sub);
    }
}

/* ---------------- ACL ---------------- */

/* acl.c, after a user's channel rules changed: fn sees every subscription
 * of every client, under ps_lock (so no subscriber can be freed meanwhile);
 * any thread. fn must not block nor call back into pub/sub. */
void pubsub_foreach_subscription(void (*fn)(void *arg, client *c, const char *name, size_t len,
                                            int is_pattern),
                                 void *arg) {
    pthread_mutex_lock(&ps_lock);
    for (int t = 0; t < 2; t++) {
        const chtable *tab = t ? &shard_table : &plain_table;
        for (size_t b = 0; b < tab->nbuckets; b++)
            for (channel *ch = tab->buckets[b]; ch; ch = ch->next)
                for (int i = 0; i < ch->subs.n; i++) fn(arg, ch->subs.v[i], ch->name, ch->len, 0);
    }
    for (int p = 0; p < npatterns; p++)
        for (int i = 0; i < patterns[p].subs.n; i++)
            fn(arg, patterns[p].subs.v[i], patterns[p].name, patterns[p].len, 1);
    pthread_mutex_unlock(&ps_lock);
}
