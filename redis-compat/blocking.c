/* blocking.c -- clients blocked on list keys.
 *
 * Design.
 *  - A global registry, guarded by one mutex (reg_lock), maps (logical db,
 *    key) to the FIFO of clients waiting on it. A blocked client has one
 *    node in the FIFO of each distinct key it named.
 *  - Blocking: the command (t_list.c) finds no elements and calls
 *    blocking_block while it still holds the keys' shard locks, so a push
 *    (which needs the same lock) either came before (and the command saw
 *    it) or comes after and finds the client registered: no lost wake-up.
 *    The command's arguments are copied (argv points into the query buffer)
 *    and the client stops processing input: later pipelined commands wait,
 *    as in Redis. A libevent timer on the client's worker handles the
 *    timeout: null array reply (RESP2 *-1, RESP3 _).
 *  - Waking: every write that adds elements calls blocking_signal_key
 *    (cheap when nobody is blocked: one atomic load). The key is queued per
 *    thread and handled after the command, once its shard locks are
 *    released (blocking_flush_signals, from the dispatcher): inside EXEC or
 *    another batch the elements are only there after the batch ends. The
 *    first client of the key's FIFO is then marked ready, put on its
 *    worker's ready list, and that worker is woken (worker_wake).
 *  - Serving: each worker, in before_sleep, re-runs the command of its ready
 *    clients through the normal dispatcher (shard locks, durability gate:
 *    the pop is a logged write and its reply is held like any write's).
 *    If the command replied (served, or an error such as WRONGTYPE), the
 *    client is unblocked and its pending input is processed; otherwise it
 *    stays blocked, keeping its place in the FIFOs (Redis 7.2 also re-runs
 *    the blocked command).
 *  - Fairness: a client may take from a key only if no other client is
 *    ahead of it in the key's FIFO (blocking_may_take; a fresh command
 *    queues behind existing waiters). When a client leaves a FIFO (served,
 *    timed out, disconnected, killed) and was its first, the next one is
 *    marked ready, so elements left over reach the next waiter in order.
 *    A command refused by blocking_may_take also marks the first waiter
 *    ready, so elements that arrived without a signal (RENAME, MOVE...)
 *    still reach the waiters as soon as anyone asks for them.
 *    Non-blocking pops (LPOP...) on other workers can still take elements
 *    between a push and the waiter's re-run; Redis, single threaded, serves
 *    the waiter first.
 *  - Per-client state lives here, not in struct client: each worker keeps a
 *    map client -> state, touched only by its own thread. Other threads
 *    reach a blocked client's state only through the registry, under
 *    reg_lock. The state is freed only by the owner thread, after it has
 *    been removed from the registry.
 *  - Lock order: shard locks, then reg_lock. worker_wake is called after
 *    reg_lock is released.
 *
 * CLIENT UNBLOCK (blocking_unblock_id, any thread) marks the client ready
 * with a forced outcome; its worker then answers it (null array, or the
 * UNBLOCKED error) instead of re-running the command.
 *
 * SWAPDB (blocking_signal_db) re-runs every waiter of both dbs.
 *
 * Not covered: keys filled by RENAME/MOVE/COPY do not wake waiters
 * by themselves (they would need a blocking_signal_key call there). */
#include "util.h"
#include <math.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <event2/event.h>

#include "blocking.h"
#include "cluster.h"
#include "networking.h"
#include "server.h"
#include "worker.h"
#include "edge_state.h"

typedef struct bclient bclient;
typedef struct bkey bkey;

typedef struct bwait {
    bkey *k;
    bclient *bc;
    struct bwait *prev, *next;   /* the key's FIFO */
} bwait;

struct bkey {
    bkey *hnext;
    uint64_t h;
    int db;
    size_t klen;
    bwait *head, *tail;
    char key[];
};

struct bclient {
    client *c;
    int wid;
    bclient *mnext;              /* worker map chain (owner thread) */
    bwait *waits;
    int nwaits;
    struct event *timer;         /* NULL: no timeout */
    int argc;
    const char **argv;           /* copies of the command's arguments */
    size_t *argvlen;
    char *argbuf;
    int ready;                   /* on the worker's ready list (reg_lock) */
    int forced;                  /* CLIENT UNBLOCK: 1 timeout, 2 error (reg_lock) */
    bclient *rprev, *rnext;
};

typedef struct bworker {
    bclient **map;               /* owner thread only */
    size_t mapcap, mapn;
    bclient *rhead, *rtail;      /* ready list (reg_lock) */
    _Atomic int has_ready;
} bworker;

/* This file's state, one per server (server.h). */
struct blocking_state {
    pthread_mutex_t reg_lock;
    bkey **ktab;   /* registry hash table (reg_lock) */
    size_t kcap;
    size_t kn;
    _Atomic long long nblocked;
    bworker *bws;
    int nbws;
    _Atomic int inited;
    pthread_once_t init_once;
    _Atomic uint64_t seen_term;  /* managed cluster: the term waiters were last checked in */
};

void blocking_state_new(void) {
    struct blocking_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->reg_lock, NULL);
    st->init_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    server.edge_state->blocking = st;
}

void blocking_state_free(void) {
    struct blocking_state *st = server.edge_state->blocking;
    for (size_t i = 0; st->ktab && i < st->kcap; i++)   /* empty once every client is freed */
        for (bkey *k = st->ktab[i], *next; k; k = next) {
            next = k->hnext;
            free(k);
        }
    free(st->ktab);
    for (int i = 0; i < st->nbws; i++) free(st->bws[i].map);
    free(st->bws);
    pthread_mutex_destroy(&st->reg_lock);
    free(st);
}

#define reg_lock (server.edge_state->blocking->reg_lock)
#define ktab (server.edge_state->blocking->ktab)   /* registry hash table (reg_lock) */
#define kcap (server.edge_state->blocking->kcap)
#define kn (server.edge_state->blocking->kn)
#define nblocked (server.edge_state->blocking->nblocked)
#define bws (server.edge_state->blocking->bws)
#define nbws (server.edge_state->blocking->nbws)
#define inited (server.edge_state->blocking->inited)
#define init_once (server.edge_state->blocking->init_once)
#define seen_term (server.edge_state->blocking->seen_term)

static void init(void) {
    nbws = server.nworkers > 0 ? server.nworkers : 1;
    bws = calloc((size_t)nbws, sizeof(bworker));
    kcap = 64;
    ktab = calloc(kcap, sizeof(bkey *));
    if (!bws || !ktab) abort();
    atomic_store(&inited, 1);
}

/* ---------------- small helpers ---------------- */

static uint64_t key_hash(int db, const char *key, size_t klen) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(unsigned)db;
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static size_t ptr_hash(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* A set of workers to wake once reg_lock is released. */
typedef struct wakeset {
    int ids[64];
    int n;
    int all;
} wakeset;

static void wakeset_add(wakeset *ws, int wid) {
    for (int i = 0; i < ws->n; i++)
        if (ws->ids[i] == wid) return;
    if (ws->n == (int)(sizeof(ws->ids) / sizeof(ws->ids[0]))) ws->all = 1;
    else ws->ids[ws->n++] = wid;
}

static void wakeset_wake(const wakeset *ws) {
    if (ws->all) {
        for (int i = 0; i < server.nworkers; i++) worker_wake(server.workers[i]);
        return;
    }
    for (int i = 0; i < ws->n; i++) worker_wake(server.workers[ws->ids[i]]);
}

/* ---------------- per-worker map (owner thread) ---------------- */

static bclient *map_get(const client *c) {
    if (!atomic_load(&inited) || c->w->id >= nbws) return NULL;
    bworker *b = &bws[c->w->id];
    if (!b->mapn) return NULL;
    for (bclient *bc = b->map[ptr_hash(c, b->mapcap)]; bc; bc = bc->mnext)
        if (bc->c == c) return bc;
    return NULL;
}

static void map_put(bworker *b, bclient *bc) {
    if (b->mapn >= b->mapcap) {
        size_t ncap = b->mapcap ? b->mapcap * 2 : 16;
        bclient **nm = calloc(ncap, sizeof(bclient *));
        if (!nm) abort();
        for (size_t i = 0; i < b->mapcap; i++) {
            bclient *x = b->map[i], *next;
            for (; x; x = next) {
                next = x->mnext;
                size_t s = ptr_hash(x->c, ncap);
                x->mnext = nm[s];
                nm[s] = x;
            }
        }
        free(b->map);
        b->map = nm;
        b->mapcap = ncap;
    }
    size_t s = ptr_hash(bc->c, b->mapcap);
    bc->mnext = b->map[s];
    b->map[s] = bc;
    b->mapn++;
}

static void map_del(bworker *b, bclient *bc) {
    bclient **pp = &b->map[ptr_hash(bc->c, b->mapcap)];
    for (; *pp; pp = &(*pp)->mnext) {
        if (*pp == bc) {
            *pp = bc->mnext;
            b->mapn--;
            return;
        }
    }
}

/* ---------------- registry (reg_lock held) ---------------- */

static bkey *key_find(int db, const char *key, size_t klen, uint64_t h) {
    for (bkey *k = ktab[h & (kcap - 1)]; k; k = k->hnext)
        if (k->h == h && k->db == db && k->klen == klen && memcmp(k->key, key, klen) == 0)
            return k;
    return NULL;
}

static void ktab_grow(void) {
    size_t ncap = kcap * 2;
    bkey **nt = calloc(ncap, sizeof(bkey *));
    if (!nt) abort();
    for (size_t i = 0; i < kcap; i++) {
        bkey *k = ktab[i], *next;
        for (; k; k = next) {
            next = k->hnext;
            k->hnext = nt[k->h & (ncap - 1)];
            nt[k->h & (ncap - 1)] = k;
        }
    }
    free(ktab);
    ktab = nt;
    kcap = ncap;
}

static bkey *key_get(int db, const char *key, size_t klen) {
    uint64_t h = key_hash(db, key, klen);
    bkey *k = key_find(db, key, klen, h);
    if (k) return k;
    if (kn >= kcap) ktab_grow();
    k = calloc(1, sizeof(bkey) + klen);
    if (!k) abort();
    k->h = h;
    k->db = db;
    k->klen = klen;
    memcpy(k->key, key, klen);
    k->hnext = ktab[h & (kcap - 1)];
    ktab[h & (kcap - 1)] = k;
    kn++;
    return k;
}

static void key_free(bkey *k) {
    bkey **pp = &ktab[k->h & (kcap - 1)];
    for (; *pp; pp = &(*pp)->hnext) {
        if (*pp == k) {
            *pp = k->hnext;
            break;
        }
    }
    kn--;
    free(k);
}

static void mark_ready(bclient *bc, wakeset *ws) {
    if (bc->ready) return;
    bworker *b = &bws[bc->wid];
    bc->ready = 1;
    bc->rnext = NULL;
    bc->rprev = b->rtail;
    if (b->rtail) b->rtail->rnext = bc;
    else b->rhead = bc;
    b->rtail = bc;
    atomic_store(&b->has_ready, 1);
    wakeset_add(ws, bc->wid);
}

static void ready_unlink(bclient *bc) {
    if (!bc->ready) return;
    bworker *b = &bws[bc->wid];
    if (bc->rprev) bc->rprev->rnext = bc->rnext;
    else b->rhead = bc->rnext;
    if (bc->rnext) bc->rnext->rprev = bc->rprev;
    else b->rtail = bc->rprev;
    bc->rprev = bc->rnext = NULL;
    bc->ready = 0;
}

/* Take w out of its key's FIFO. If it was first, the next waiter gets its
 * turn: elements may be left for it. */
static void wait_unlink(bwait *w, wakeset *ws) {
    bkey *k = w->k;
    int was_head = k->head == w;
    if (w->prev) w->prev->next = w->next;
    else k->head = w->next;
    if (w->next) w->next->prev = w->prev;
    else k->tail = w->prev;
    if (was_head && k->head) mark_ready(k->head->bc, ws);
    if (!k->head) key_free(k);
}

/* ---------------- blocking and unblocking ---------------- */

static void timeout_cb(evutil_socket_t fd, short what, void *arg);

int blocking_is_blocked(const client *c) {
    if (atomic_load(&nblocked) == 0) return 0;
    return map_get(c) != NULL;
}

int blocking_allowed(const client *c) { return !c->x.batching; }

int blocking_rerun_skips(client *c, int i, int want) {
    db_val v;
    if (!blocking_is_blocked(c)) return 0;
    return db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], &v) && v.type != want;
}

long long blocking_count(void) { return atomic_load(&nblocked); }

int blocking_may_take(client *c, const char *key, size_t klen) {
    if (atomic_load(&nblocked) == 0) return 1;
    wakeset ws = {.n = 0};
    pthread_mutex_lock(&reg_lock);
    bkey *k = key_find(c->db, key, klen, key_hash(c->db, key, klen));
    int ok = !k || !k->head || k->head->bc->c == c;
    /* The key has elements (the caller looked) and someone else is first:
     * make sure it gets its turn, even if the elements came by a path that
     * does not signal (RENAME, MOVE...). */
    if (!ok) mark_ready(k->head->bc, &ws);
    pthread_mutex_unlock(&reg_lock);
    wakeset_wake(&ws);
    return ok;
}

void blocking_block(client *c, int first, int nkeys, int64_t deadline_ms) {
    pthread_once(&init_once, init);
    if (map_get(c)) return; /* a re-run that found nothing: stay as we are */
    bclient *bc = calloc(1, sizeof(*bc));
    if (!bc) abort();
    bc->c = c;
    bc->wid = c->w->id;
    /* Copy the command: its argv points into the query buffer. */
    size_t total = 0;
    for (int i = 0; i < c->argc; i++) total += c->argvlen[i] + 1;
    bc->argc = c->argc;
    bc->argv = malloc(sizeof(char *) * (size_t)c->argc);
    bc->argvlen = malloc(sizeof(size_t) * (size_t)c->argc);
    bc->argbuf = malloc(total ? total : 1);
    bc->waits = calloc((size_t)(nkeys > 0 ? nkeys : 1), sizeof(bwait));
    if (!bc->argv || !bc->argvlen || !bc->argbuf || !bc->waits) abort();
    char *p = bc->argbuf;
    for (int i = 0; i < c->argc; i++) {
        memcpy(p, c->argv[i], c->argvlen[i]);
        p[c->argvlen[i]] = '\0';
        bc->argv[i] = p;
        bc->argvlen[i] = c->argvlen[i];
        p += c->argvlen[i] + 1;
    }
    pthread_mutex_lock(&reg_lock);
    for (int j = first; j < first + nkeys && j < c->argc; j++) {
        int dup = 0;
        for (int i = first; i < j && !dup; i++)
            dup = c->argvlen[i] == c->argvlen[j] &&
                  memcmp(c->argv[i], c->argv[j], c->argvlen[j]) == 0;
        if (dup) continue;
        bkey *k = key_get(c->db, c->argv[j], c->argvlen[j]);
        bwait *w = &bc->waits[bc->nwaits++];
        w->k = k;
        w->bc = bc;
        w->next = NULL;
        w->prev = k->tail;
        if (k->tail) k->tail->next = w;
        else k->head = w;
        k->tail = w;
    }
    /* Before the shard locks are released: a push that follows sees it. */
    atomic_fetch_add(&nblocked, 1);
    pthread_mutex_unlock(&reg_lock);
    map_put(&bws[bc->wid], bc);
    if (deadline_ms > 0) {
        int64_t left = deadline_ms - mstime();
        if (left < 0) left = 0;
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)((left % 1000) * 1000)};
        bc->timer = evtimer_new(c->w->base, timeout_cb, bc);
        evtimer_add(bc->timer, &tv);
    }
}

/* Forget bc everywhere and free it (owner thread). */
static void unblock(bclient *bc) {
    wakeset ws = {.n = 0};
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < bc->nwaits; i++) wait_unlink(&bc->waits[i], &ws);
    ready_unlink(bc);
    atomic_fetch_sub(&nblocked, 1);
    pthread_mutex_unlock(&reg_lock);
    wakeset_wake(&ws);
    map_del(&bws[bc->wid], bc);
    if (bc->timer) event_free(bc->timer);
    free(bc->waits);
    free(bc->argv);
    free(bc->argvlen);
    free(bc->argbuf);
    free(bc);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    bclient *bc = arg;
    client *c = bc->c;
    size_t start = c->out.b.len;
    resp_add_null_array(&c->out);
    unblock(bc);
    blocking_client_answered(c, start);
}

void blocking_client_freed(client *c) {
    if (atomic_load(&nblocked) == 0) return;
    bclient *bc = map_get(c);
    if (bc) unblock(bc);
}

/* ---------------- waking ---------------- */

typedef struct pending_key {
    int db;
    int all;         /* wake every waiter, not only the first (streams) */
    size_t klen;
    char *key;
} pending_key;

static __thread pending_key *pend;
static __thread int npend, cappend;
/* Logical dbs swapped by this thread's command (SWAPDB): every waiter on
 * them is re-run after the command, as Redis scans both dbs for keys that
 * became ready. At most two per command. */
static __thread int pend_db[2], npend_db;

static void signal_key(int db, const char *key, size_t klen, int all) {
    if (atomic_load(&nblocked) == 0) return;
    for (int i = 0; i < npend; i++) {
        if (pend[i].db == db && pend[i].klen == klen && memcmp(pend[i].key, key, klen) == 0) {
            pend[i].all |= all;
            return;
        }
    }
    if (npend == cappend) {
        cappend = cappend ? cappend * 2 : 8;
        pend = realloc(pend, sizeof(pending_key) * (size_t)cappend);
        if (!pend) abort();
    }
    pending_key *pk = &pend[npend++];
    pk->db = db;
    pk->all = all;
    pk->klen = klen;
    pk->key = malloc(klen ? klen : 1);
    if (!pk->key) abort();
    memcpy(pk->key, key, klen);
}

void blocking_signal_key(int db, const char *key, size_t klen) { signal_key(db, key, klen, 0); }

void blocking_signal_key_all(int db, const char *key, size_t klen) { signal_key(db, key, klen, 1); }

void blocking_signal_db(int db) {
    if (atomic_load(&nblocked) == 0) return;
    for (int i = 0; i < npend_db; i++)
        if (pend_db[i] == db) return;
    if (npend_db < 2) pend_db[npend_db++] = db;
}

/* Every waiter on a key of a db blocking_signal_db named (reg_lock held). */
static void mark_db_waiters(wakeset *ws) {
    for (size_t i = 0; i < kcap && npend_db; i++)
        for (bkey *k = ktab[i]; k; k = k->hnext)
            if (k->db == pend_db[0] || (npend_db > 1 && k->db == pend_db[1]))
                for (bwait *w = k->head; w; w = w->next) mark_ready(w->bc, ws);
    npend_db = 0;
}

void blocking_flush_signals(void) {
    if (npend == 0 && npend_db == 0) return;
    wakeset ws = {.n = 0};
    pthread_mutex_lock(&reg_lock);
    if (npend_db) mark_db_waiters(&ws);
    for (int i = 0; i < npend; i++) {
        bkey *k = key_find(pend[i].db, pend[i].key, pend[i].klen,
                           key_hash(pend[i].db, pend[i].key, pend[i].klen));
        if (k && k->head) mark_ready(k->head->bc, &ws);
        for (bwait *w = k && pend[i].all ? k->head : NULL; w; w = w->next) mark_ready(w->bc, &ws);
    }
    pthread_mutex_unlock(&reg_lock);
    for (int i = 0; i < npend; i++) free(pend[i].key);
    /* Freed each time: a thread-local array would outlive its thread. */
    free(pend);
    pend = NULL;
    npend = cappend = 0;
    wakeset_wake(&ws);
}

int blocking_unblock_id(uint64_t id, int error) {
    if (atomic_load(&nblocked) == 0 || !atomic_load(&inited)) return 0;
    wakeset ws = {.n = 0};
    int found = 0;
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < kcap && !found; i++) {
        for (bkey *k = ktab[i]; k && !found; k = k->hnext) {
            for (bwait *w = k->head; w; w = w->next) {
                if (w->bc->c->id != id) continue;
                if (!w->bc->forced) w->bc->forced = error ? 2 : 1;
                mark_ready(w->bc, &ws);
                found = 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&reg_lock);
    wakeset_wake(&ws);
    return found;
}

/* A managed cluster's new configuration can give the slot of a waiter's
 * keys to another node (failover, rebalance, CLUSTER FAILOVER): the pushes
 * then land there and the waiter, left here, would wait forever (BLPOP 0,
 * XREAD BLOCK 0). After a term change every waiter is re-run, as Redis
 * Cluster redirects its blocked clients: the dispatcher answers -MOVED or
 * -CLUSTERDOWN (or closes a client whose lease went stale), or the command
 * finds nothing and stays blocked, keeping its place. One worker does it. */
static void recheck_on_new_term(void) {
    if (!cluster_managed() || atomic_load(&nblocked) == 0) return;
    uint64_t t = cluster_term(), old = atomic_load(&seen_term);
    if (t == old || !atomic_compare_exchange_strong(&seen_term, &old, t)) return;
    wakeset ws = {.n = 0};
    pthread_mutex_lock(&reg_lock);
    for (size_t i = 0; i < kcap; i++)
        for (bkey *k = ktab[i]; k; k = k->hnext)
            for (bwait *bw = k->head; bw; bw = bw->next) mark_ready(bw->bc, &ws);
    pthread_mutex_unlock(&reg_lock);
    wakeset_wake(&ws);
}

void blocking_run_ready(worker *w) {
    blocking_flush_signals();
    recheck_on_new_term();
    if (!atomic_load(&inited) || w->id >= nbws) return;
    bworker *b = &bws[w->id];
    if (!atomic_load(&b->has_ready)) return;
    for (;;) {
        pthread_mutex_lock(&reg_lock);
        bclient *bc = b->rhead;
        int forced = bc ? bc->forced : 0;
        if (!bc) atomic_store(&b->has_ready, 0);
        else ready_unlink(bc);
        pthread_mutex_unlock(&reg_lock);
        if (!bc) break;
        client *c = bc->c;
        if (forced) {
            size_t start = c->out.b.len;
            if (forced == 2) resp_add_error(&c->out, "UNBLOCKED client unblocked via CLIENT UNBLOCK");
            else resp_add_null_array(&c->out);
            unblock(bc);
            blocking_client_answered(c, start);
            continue;
        }
        size_t before = c->out.b.len;
        c->argc = bc->argc;
        c->argv = bc->argv;
        c->argvlen = bc->argvlen;
        blocking_client_rerun(c);
        c->argc = 0;
        if (c->out.b.len != before) {
            /* It replied: served, or an error (WRONGTYPE...). */
            unblock(bc);
            blocking_client_resume(c);
        }
    }
}

/* A blocking command's timeout in seconds (decimals allowed), as Redis
 * parses it: *ms = 0 for "block forever", else the absolute unix-ms
 * deadline, rounded up. */
int arg_block_deadline(client *c, int i, int64_t *ms) {
    long double t;
    if (c->argvlen[i] == 0 || c->argvlen[i] > 256 ||
        !string2ld(c->argv[i], c->argvlen[i], &t) || isnan(t)) {
        resp_add_error(&c->out, "ERR timeout is not a float or out of range");
        return -1;
    }
    t *= 1000.0L;
    if (t > (long double)LLONG_MAX) {
        resp_add_error(&c->out, "ERR timeout is out of range");
        return -1;
    }
    if (t < 0) {
        resp_add_error(&c->out, "ERR timeout is negative");
        return -1;
    }
    long long v = (long long)ceill(t);
    if (v > 0) {
        int64_t now = mstime();
        if (v > LLONG_MAX - now) {
            resp_add_error(&c->out, "ERR timeout is out of range");
            return -1;
        }
        v += now;
    }
    *ms = v;
    return 0;
}
