/* native.c -- the native RPC edge (issue 15, paper §5.2): rdma/dgram.h
 * requests, one per datagram or several in a packed frame, run by the same
 * command table and code as RESP requests, answered exactly once.
 *
 * Where requests enter. Each worker owns one endpoint of the configured
 * backend (native_transport.h: a SO_REUSEPORT UDP socket steered by client
 * id, or a verbs UD queue pair), registered in that worker's event loop, so
 * a datagram is received, decoded, run and answered by the worker it
 * arrived at, with no thread hand-off. Every datagram of one client id
 * reaches the same worker (the steering), which therefore owns everything
 * about that client: its session and its reply cache, touched by that
 * worker's thread only, without locks.
 *
 * Per client (`nclient`, found by the header's client id in the worker's
 * table): the peer address its latest datagram came from (replies go
 * there), a session (redis-compat/session.h, per-reply transport "native")
 * opened at its first request, and
 * its request records. A record is RUNNING from the moment its request is
 * handed to the session until the session delivers the reply, then DONE
 * with the reply bytes. The rules of dgram.h "Exactly once":
 *   - a new request id is run once and gets a record;
 *   - a duplicate of a DONE record is answered from the record (the
 *     original reply, all its fragments again), and nothing runs;
 *   - a duplicate of a RUNNING one (held for durability, blocked in BLPOP)
 *     is dropped: its reply leaves when it is ready;
 *   - `acked` in each request frees the records below it, and a request
 *     below the client's acked (a late duplicate of something the client
 *     already has) is dropped.
 *
 * Bounded memory. Records per client are capped (NATIVE_MAX_PENDING: the
 * client's window of unacknowledged ids), clients per worker are capped
 * (native-max-clients split over the workers), and so are the cached reply
 * bytes (native-reply-cache, split the same way). Nothing cached is ever
 * dropped to make room, since dropping a DONE record would let a
 * retransmission run twice; instead NEW requests are refused with
 * DGRAM_R_BUSY (nothing ran, the client retries later) while a cap is
 * reached. A reply over DGRAM_REPLY_MAX is replaced by an error telling the
 * client to use TCP. Clients idle for native-client-timeout seconds with
 * nothing running are forgotten (the worker's cron, once a second); a new
 * client meeting a full table takes the place of the least recently heard
 * one if that one has been idle for NATIVE_EVICT_IDLE_S, else gets BUSY.
 * So the exactly-once promise holds for a client that keeps talking, within
 * one server run (the cache is not persisted: after a restart or failover
 * a retransmitted request runs again, as a RESP client's retry after a
 * reconnect would).
 *
 * Refusals (DGRAM_REFUSE: nothing ran). STALE when a new request's term is
 * older than cluster_term() (checked after the cache, so a duplicate of an
 * applied request still gets its reply after a term change), with our
 * term; LOADING while recovery runs; BUSY as above; MALFORMED when the
 * header decodes but the arguments do not, or the request is larger than
 * one datagram (the reason says to use TCP). A datagram whose header does
 * not decode, or that is not a request, is counted and dropped without an
 * answer (no reflection towards forged source addresses).
 *
 * Durability: replies come from the session, which delivers them under
 * the same gate as a RESP reply (held until their versions are durable),
 * and only then are they cached and sent. Unsolicited output (tag 0:
 * pub/sub, MONITOR) is sent as replies with request id 0, not cached
 * (dgram.h, "Pushed replies"): whole RESP values grouped up to one
 * datagram each; a value larger than a datagram alone, in fragments
 * numbered by the client's push counter; one over DGRAM_REPLY_MAX
 * replaced by an error that tells the subscriber to use TCP.
 *
 * Packed frames (dgram.h, version 2). A DGRAM_PACKED_REQUESTS datagram is
 * unpacked here and each entry is handled exactly as a single request
 * with its own id (its record, its duplicate rules, its refusal). For a
 * client whose latest request was version 2, whole replies and refusals
 * that fit one entry go into that client's open reply pack instead of a
 * datagram each; the packs of the round leave at round_end (before the
 * worker sleeps, with the backend's batch), a pack of one entry as a
 * plain datagram. Replies that are fragmented, and unsolicited ones (id
 * 0), close the client's pack first and leave alone after it, so a
 * client's replies keep their order. Version 1 clients get version 1
 * single datagrams, as before.
 *
 * Protected mode applies as over TCP: with no password, only loopback
 * peers are served; others get the -DENIED reply. INFO's "# Native"
 * section sums the workers' counters. */
#include "native.h"
#include "dgram.h"
#include "native_transport.h"
#include "session.h"

#include "acl.h"
#include "cluster.h"
#include "server.h"
#include "worker.h"
#include "edge_state.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <event2/event.h>

/* Request ids a client may have unacknowledged (records) at once. */
#define NATIVE_MAX_PENDING 256
/* A full client table lets a new client replace one idle this long. */
#define NATIVE_EVICT_IDLE_S 10
/* Datagrams taken per readiness event before the loop serves others. */
#define NATIVE_RECV_BATCH 64

/* Replies up to this size are cached in their client's arena (below);
 * larger ones (fragmented anyway) get an allocation of their own. */
#define NATIVE_ARENA_REPLY_MAX 4096
/* An arena this large is given back once it holds no reply. */
#define NATIVE_ARENA_KEEP (64 * 1024)

typedef struct nreq {
    uint64_t id;
    int done;
    char *big;                    /* DONE, over NATIVE_ARENA_REPLY_MAX: the reply */
    size_t off;                   /* DONE, otherwise: the reply at the arena's off */
    size_t len;
} nreq;

struct nworker;

typedef struct nclient {
    uint64_t id;
    struct nworker *nw;
    native_addr addr;             /* where its latest datagram came from */
    client *s;                    /* its session; NULL before its first request, or after it ended */
    int closing;                  /* the edge is forgetting it: its session's close is expected */
    uint64_t acked;
    uint64_t maxreq;              /* the highest id with a record: above it, nothing to find */
    uint8_t version;              /* of its latest request: 2 reads packed replies */
    uint64_t pushes;              /* fragmented pushed replies sent (their numbers) */
    int packing;                  /* pk is open (the client is on nw->packing) */
    uint64_t single;              /* !0: the open pack is just this request's cached
                                   * reply, not copied in yet (pk has no buffer) */
    dgram_pack pk;                /* replies of this round not yet sent */
    struct nclient *pknext;
    nreq *reqs;
    int nreqs, capreqs, running;
    size_t cached;
    /* The arena: the cached replies one after the other, in completion
     * order (which is request order but for refusals and edge answers),
     * so acks free a prefix of it. No allocation per request: it is
     * compacted when its freed prefix outgrows what is live, and emptied
     * when nothing is cached. */
    char *arena;
    size_t arena_len, arena_cap;
    int64_t last_us;
    struct nclient *hnext;        /* hash chain */
    struct nclient *prev, *next;  /* recency list, most recent first */
} nclient;

struct native_stats {
    _Atomic long long in, out, bytes_in, bytes_out, requests, dup_cached, dup_running,
        dup_old, refused_stale, refused_busy, refused_loading, refused_malformed, malformed,
        denied, too_large, evicted, sessions_closed, clients, cached_bytes, send_errors,
        send_calls, packs_in, packs_out;
};

typedef struct nworker {
    worker *w;
    native_endpoint *ep;
    struct event *ev, *cron;
    nclient **buckets;
    size_t nbuckets;
    int nclients;
    nclient *recent, *oldest;
    size_t cached;
    nclient *packing;             /* clients with an open reply pack */
    unsigned char *spare[64];     /* pack buffers to reuse */
    int nspare;
    /* Packs handed to the backend by reference (send_ref): theirs until
     * its flush, then spare again. */
    unsigned char **sent;
    int nsent, capsent;
    struct native_stats st;
    int64_t now_us;               /* monotonic_us() at this batch of datagrams */
    unsigned char rx[DGRAM_MTU + 1];
    unsigned char tx[DGRAM_MTU];
    const char *argv[DGRAM_MAX_ARGS];
    size_t argvlen[DGRAM_MAX_ARGS];
} nworker;

/* This file's state, one per server (server.h). */
struct native_state {
    const native_backend *backend;
    nworker **nws;
    int nnws;
};

void native_state_new(void) {
    struct native_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->native = st;
}

void native_state_free(void) {
    free(server.edge_state->native);   /* its endpoints: native_stop */
}

#define backend (server.edge_state->native->backend)
#define nws (server.edge_state->native->nws)
#define nnws (server.edge_state->native->nnws)

/* Only the worker owning the counters writes them (INFO reads them from
 * another thread): a relaxed load and store, no locked add per request. */
static void stat_add(_Atomic long long *c, long long v) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* ---------------- the client table ---------------- */

static size_t bucket_of(const nworker *nw, uint64_t id) {
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (nw->nbuckets - 1);
}

static nclient *client_find(nworker *nw, uint64_t id) {
    /* the client heard last first: the entries of a packed frame are one
     * client's, so all but the first find it here (no bucket walk) */
    if (nw->recent && nw->recent->id == id) return nw->recent;
    for (nclient *c = nw->buckets[bucket_of(nw, id)]; c; c = c->hnext)
        if (c->id == id) return c;
    return NULL;
}

static void recency_unlink(nworker *nw, nclient *c) {
    if (c->prev) c->prev->next = c->next;
    else nw->recent = c->next;
    if (c->next) c->next->prev = c->prev;
    else nw->oldest = c->prev;
    c->prev = c->next = NULL;
}

static void recency_front(nworker *nw, nclient *c) {
    c->next = nw->recent;
    c->prev = NULL;
    if (nw->recent) nw->recent->prev = c;
    nw->recent = c;
    if (!nw->oldest) nw->oldest = c;
}

static void table_grow(nworker *nw) {
    size_t n = nw->nbuckets * 2;
    nclient **b = calloc(n, sizeof(*b));
    for (size_t i = 0; i < nw->nbuckets; i++) {
        for (nclient *c = nw->buckets[i], *next; c; c = next) {
            next = c->hnext;
            size_t k = (size_t)((c->id * 0x9e3779b97f4a7c15ull) >> 32) & (n - 1);
            c->hnext = b[k];
            b[k] = c;
        }
    }
    free(nw->buckets);
    nw->buckets = b;
    nw->nbuckets = n;
}

static nclient *client_new(nworker *nw, uint64_t id) {
    if ((size_t)nw->nclients >= nw->nbuckets) table_grow(nw);
    nclient *c = calloc(1, sizeof(*c));
    c->id = id;
    c->nw = nw;
    size_t k = bucket_of(nw, id);
    c->hnext = nw->buckets[k];
    nw->buckets[k] = c;
    recency_front(nw, c);
    nw->nclients++;
    stat_add(&nw->st.clients, 1);
    return c;
}

static void pack_close(nworker *nw, nclient *c);
static void pack_recycle(nworker *nw, unsigned char *buf);
static void send_single(nworker *nw, nclient *c);

static void req_free(nworker *nw, nclient *c, nreq *r) {
    if (r->done) {
        c->cached -= r->len;
        nw->cached -= r->len;
        stat_add(&nw->st.cached_bytes, -(long long)r->len);
    }
    free(r->big);
    r->big = NULL;
}

static const char *reply_of(const nclient *c, const nreq *r) {
    if (!r->len) return "";   /* no bytes, and maybe no arena */
    return r->big ? r->big : c->arena + r->off;
}

/* Keep a copy of r's reply (its bytes are the session's). */
static void cache_put(nclient *c, nreq *r, const char *resp, size_t len) {
    r->len = len;
    if (len == 0) return;
    if (len > NATIVE_ARENA_REPLY_MAX) {
        r->big = malloc(len);
        memcpy(r->big, resp, len);
        return;
    }
    if (c->arena_len + len > c->arena_cap) {
        size_t cap = c->arena_cap ? c->arena_cap : 4096;
        while (cap < c->arena_len + len) cap *= 2;
        c->arena = realloc(c->arena, cap);
        c->arena_cap = cap;
    }
    memcpy(c->arena + c->arena_len, resp, len);
    r->off = c->arena_len;
    c->arena_len += len;
}

/* After records were freed: the arena's live bytes start at the lowest
 * offset of a cached reply. Nothing live: empty it (and give a large one
 * back). A freed prefix larger than what follows it: move the rest down. */
static void arena_compact(nclient *c) {
    size_t low = c->arena_len;
    for (int i = 0; i < c->nreqs; i++) {
        const nreq *r = &c->reqs[i];
        if (r->done && !r->big && r->len && r->off < low) low = r->off;
    }
    if (low == c->arena_len) {
        c->arena_len = 0;
        if (c->arena_cap > NATIVE_ARENA_KEEP) {
            free(c->arena);
            c->arena = NULL;
            c->arena_cap = 0;
        }
        return;
    }
    if (low < 1024 || low < c->arena_len - low) return;
    memmove(c->arena, c->arena + low, c->arena_len - low);
    c->arena_len -= low;
    for (int i = 0; i < c->nreqs; i++) {
        nreq *r = &c->reqs[i];
        if (r->done && !r->big && r->len) r->off -= low;
    }
}

/* Forget c entirely (idle, or replaced in a full table). */
static void client_free(nworker *nw, nclient *c) {
    nclient **pp = &nw->buckets[bucket_of(nw, c->id)];
    while (*pp != c) pp = &(*pp)->hnext;
    *pp = c->hnext;
    recency_unlink(nw, c);
    pack_close(nw, c);
    c->closing = 1;
    if (c->s) session_close(c->s);   /* calls on_close, which clears c->s */
    for (int i = 0; i < c->nreqs; i++) req_free(nw, c, &c->reqs[i]);
    free(c->reqs);
    free(c->arena);
    nw->nclients--;
    stat_add(&nw->st.clients, -1);
    free(c);
}

/* The records are in arrival order, and a client's ids are dense and
 * increasing unless datagrams were lost or reordered: the record of id is
 * then at its distance from the first one. That guess first (a pipelined
 * client has up to twice its pipeline in records, looked up twice per
 * request), the walk when it misses. */
static nreq *req_find(nclient *c, uint64_t id) {
    if (c->nreqs && id >= c->reqs[0].id) {
        uint64_t i = id - c->reqs[0].id;
        if (i < (uint64_t)c->nreqs && c->reqs[i].id == id) return &c->reqs[i];
    }
    for (int i = 0; i < c->nreqs; i++)
        if (c->reqs[i].id == id) return &c->reqs[i];
    return NULL;
}

/* The client has the replies of every id below acked: drop those records
 * (a RUNNING one stays until its reply; the client cannot have it). */
static void client_ack(nworker *nw, nclient *c, uint64_t acked) {
    if (acked <= c->acked) return;
    c->acked = acked;
    int n = 0;
    for (int i = 0; i < c->nreqs; i++) {
        nreq *r = &c->reqs[i];
        if (r->done && r->id < acked) req_free(nw, c, r);
        else c->reqs[n++] = *r;
    }
    if (n == c->nreqs) return;
    c->nreqs = n;
    arena_compact(c);
}

/* ---------------- sending ---------------- */

static void send_dgram(nworker *nw, const native_addr *to, const unsigned char *buf, size_t len) {
    if (backend->send(nw->ep, buf, len, to) != 0) {
        stat_add(&nw->st.send_errors, 1);
        return;
    }
    if (!backend->flush) stat_add(&nw->st.send_calls, 1);   /* sent now, one call each */
    stat_add(&nw->st.out, 1);
    stat_add(&nw->st.bytes_out, (long long)len);
}

/* Does the backend send from our buffers (send_ref, until its flush)? */
static int by_ref(void) { return backend->send_ref && backend->flush; }

static unsigned char *pack_buffer(nworker *nw) {
    return nw->nspare ? nw->spare[--nw->nspare] : malloc(DGRAM_MTU);
}

/* Send buf (a pack buffer) without copying it: it waits in nw->sent for
 * the backend's flush, then becomes spare again (round_end). */
static void send_kept(nworker *nw, const native_addr *to, unsigned char *buf, size_t len) {
    if (backend->send_ref(nw->ep, buf, len, to) != 0) {
        stat_add(&nw->st.send_errors, 1);
        pack_recycle(nw, buf);
        return;
    }
    stat_add(&nw->st.out, 1);
    stat_add(&nw->st.bytes_out, (long long)len);
    if (nw->nsent == nw->capsent) {
        nw->capsent = nw->capsent ? nw->capsent * 2 : 16;
        nw->sent = realloc(nw->sent, sizeof(*nw->sent) * (size_t)nw->capsent);
    }
    nw->sent[nw->nsent++] = buf;
}

/* Send c's open reply pack (one entry: as a plain datagram) and close it. */
static void pack_close(nworker *nw, nclient *c) {
    if (!c->packing) return;
    nclient **pp = &nw->packing;
    while (*pp != c) pp = &(*pp)->pknext;
    *pp = c->pknext;
    c->packing = 0;
    if (c->single) {
        send_single(nw, c);
        return;
    }
    dgram_pack *p = &c->pk;
    p->h.term = cluster_term();
    if (p->h.nfrag == 1) {
        dgram_entry e;
        size_t pos = 0;
        dgram_pack_next(p->buf + DGRAM_HDR_LEN, p->len - DGRAM_HDR_LEN, DGRAM_PACKED_REPLIES,
                        &pos, &e);
        dgram_hdr h = {0};
        h.version = DGRAM_VERSION;
        h.client = c->id;
        h.req = e.req;
        h.term = p->h.term;
        h.shard = 0xffff;
        long n;
        unsigned char *out = by_ref() ? pack_buffer(nw) : nw->tx;
        if (e.type == DGRAM_REPLY) {
            n = dgram_put_reply(out, &h, (const char *)e.payload, e.len, 0);
        } else {
            char msg[DGRAM_ENTRY_MAX + 1];   /* the refusal's text, as the C string it was */
            memcpy(msg, e.payload, e.len);
            msg[e.len] = '\0';
            n = dgram_put_refuse(out, &h, e.frag, msg);
        }
        if (out != nw->tx) send_kept(nw, &c->addr, out, (size_t)n);
        else send_dgram(nw, &c->addr, out, (size_t)n);
        pack_recycle(nw, p->buf);
    } else {
        long n = dgram_pack_end(p);
        stat_add(&nw->st.packs_out, 1);
        if (by_ref()) send_kept(nw, &c->addr, p->buf, (size_t)n);
        else {
            send_dgram(nw, &c->addr, p->buf, (size_t)n);
            pack_recycle(nw, p->buf);
        }
    }
    p->buf = NULL;
}

static void pack_recycle(nworker *nw, unsigned char *buf) {
    if (nw->nspare < (int)(sizeof(nw->spare) / sizeof(nw->spare[0]))) nw->spare[nw->nspare++] = buf;
    else free(buf);
}

/* The cached reply of request id, or NULL when its record is gone (the
 * client acknowledged it: it needs it no more) or holds no reply. */
static const nreq *cached_reply(nclient *c, uint64_t id) {
    const nreq *r = req_find(c, id);
    return r && r->done ? r : NULL;
}

/* A pack of one cached reply leaves as the plain datagram the client
 * would get from a pack of one (pack_close), built straight from the
 * cache: most rounds answer one request per client (pipeline 1), and
 * copying the reply into a pack only to take it out again was two copies
 * and a pack decode per request. */
static void send_single(nworker *nw, nclient *c) {
    uint64_t id = c->single;
    c->single = 0;
    const nreq *r = cached_reply(c, id);
    if (!r) return;
    dgram_hdr h = {0};
    h.version = DGRAM_VERSION;
    h.client = c->id;
    h.req = id;
    h.term = cluster_term();
    h.shard = 0xffff;
    unsigned char *out = by_ref() ? pack_buffer(nw) : nw->tx;
    long n = dgram_put_reply(out, &h, reply_of(c, r), r->len, 0);
    if (out != nw->tx) send_kept(nw, &c->addr, out, (size_t)n);
    else send_dgram(nw, &c->addr, out, (size_t)n);
}

/* Open c's reply pack (a buffer, the header). */
static void pack_open(nworker *nw, nclient *c) {
    dgram_hdr h = {0};
    h.client = c->id;
    dgram_pack_begin(&c->pk, pack_buffer(nw), &h, DGRAM_PACKED_REPLIES);
}

/* Put one whole reply or refusal into c's reply pack (opened if need be;
 * a full one is sent first). A cached reply (`cached`: e's bytes are its
 * request's record's, which stays until it leaves) opening the pack is
 * only noted (c->single); a second entry copies it in first. */
static void pack_put(nworker *nw, nclient *c, const dgram_entry *e, int cached) {
    if (c->packing && c->single) {
        uint64_t id = c->single;
        c->single = 0;
        pack_open(nw, c);
        const nreq *r = cached_reply(c, id);
        if (r) {
            dgram_entry first = {.req = id, .type = DGRAM_REPLY, .len = (uint32_t)r->len,
                                 .payload = (const unsigned char *)reply_of(c, r)};
            dgram_pack_add(&c->pk, &first);
        }
    }
    if (c->packing && !dgram_pack_room(&c->pk, e->len)) pack_close(nw, c);
    if (!c->packing) {
        c->packing = 1;
        c->pknext = nw->packing;
        nw->packing = c;
        if (cached) {
            c->single = e->req;
            return;
        }
        pack_open(nw, c);
    }
    dgram_pack_add(&c->pk, e);
}

/* Does this go into c's reply pack? (c reads packs, and it is one entry.) */
static int packable(const nclient *c, uint64_t req, size_t len) {
    return c && c->version == DGRAM_VERSION && req != 0 && len <= DGRAM_ENTRY_MAX;
}

/* A refusal of request h (nothing ran); c: its client, or NULL. */
static void send_refusal(nworker *nw, nclient *c, const dgram_hdr *req, const native_addr *to,
                         int code, const char *msg) {
    size_t mlen = strlen(msg);
    if (packable(c, req->req, mlen)) {
        dgram_entry e = {.req = req->req, .type = DGRAM_REFUSE, .frag = (uint16_t)code,
                         .len = (uint32_t)mlen, .payload = (const unsigned char *)msg};
        pack_put(nw, c, &e, 0);
        return;
    }
    if (c) pack_close(nw, c);
    dgram_hdr h = *req;
    h.term = cluster_term();
    long n = dgram_put_refuse(nw->tx, &h, code, msg);
    send_dgram(nw, to, nw->tx, (size_t)n);
}

/* The fragments of a reply from `first` on (c: the client, or NULL). A
 * fragment the backend cannot take is lost like any datagram; the client
 * retransmits, asking for the first one it misses (dgram.h, "Resuming a
 * large reply"). A whole reply for a client that reads packs goes into
 * its pack. `cached`: resp is request req's cached reply (its record's
 * bytes), not a copy. */
static void send_reply(nworker *nw, nclient *c, uint64_t cid, uint64_t req, uint8_t version,
                       const native_addr *to, const char *resp, size_t len, unsigned first,
                       int cached) {
    if (first == 0 && packable(c, req, len)) {
        dgram_entry e = {.req = req, .type = DGRAM_REPLY, .len = (uint32_t)len,
                         .payload = (const unsigned char *)resp};
        pack_put(nw, c, &e, cached);
        return;
    }
    if (c) pack_close(nw, c);    /* what was packed before it leaves before it */
    dgram_hdr h = {0};
    h.version = version;
    h.client = cid;
    h.req = req;
    h.term = cluster_term();
    h.shard = 0xffff;
    unsigned nfrag = dgram_reply_nfrag(len);
    if (req == 0 && c && nfrag > 1) h.acked = ++c->pushes;   /* a pushed reply's number */
    for (unsigned f = first; f < nfrag; f++) {
        long n = dgram_put_reply(nw->tx, &h, resp, len, f);
        send_dgram(nw, to, nw->tx, (size_t)n);
    }
}

/* The worker's round is over (before it sleeps): what the round queued
 * leaves in one go (native_transport.h, flush). */
static void round_end(void *arg) {
    nworker *nw = arg;
    while (nw->packing) pack_close(nw, nw->packing);
    if (!backend->flush) return;
    size_t bytes = 0;
    long long calls = 0;
    int lost = backend->flush(nw->ep, &bytes, &calls);
    while (nw->nsent) pack_recycle(nw, nw->sent[--nw->nsent]);   /* sent: the backend is done with them */
    if (calls) stat_add(&nw->st.send_calls, calls);
    if (lost > 0) {
        stat_add(&nw->st.send_errors, lost);
        stat_add(&nw->st.out, -lost);
        stat_add(&nw->st.bytes_out, -(long long)bytes);
    }
}

/* ---------------- the session's callbacks ---------------- */

static void complete(nclient *c, nreq *r, const char *resp, size_t len) {
    nworker *nw = c->nw;
    static const char too_large[] =
        "-ERR reply too large for the native transport (over 1048576 bytes); use TCP\r\n";
    if (len > DGRAM_REPLY_MAX) {
        resp = too_large;
        len = sizeof(too_large) - 1;
        stat_add(&nw->st.too_large, 1);
    }
    cache_put(c, r, resp, len);
    r->done = 1;
    c->running--;
    c->cached += len;
    nw->cached += len;
    stat_add(&nw->st.cached_bytes, (long long)len);
    send_reply(nw, c, c->id, r->id, c->version, &c->addr, reply_of(c, r), r->len, 0, 1);
}

/* The length of the RESP value at p (as a session wrote it: well formed),
 * or 0 when it does not end within len. */
static size_t resp_value_len(const char *p, size_t len) {
    size_t pos = 0;
    long long pending = 1;   /* values still to skip */
    while (pending-- > 0) {
        const char *nl = pos < len ? memchr(p + pos, '\n', len - pos) : NULL;
        if (!nl) return 0;
        char type = p[pos];
        long long n = strtoll(p + pos + 1, NULL, 10);   /* stops at the line's \r */
        pos = (size_t)(nl - p) + 1;
        switch (type) {
        case '$': case '=': case '!':   /* bulk: n bytes and CRLF (-1: null) */
            if (n >= 0) pos += (size_t)n + 2;
            break;
        case '*': case '>': case '~': if (n > 0) pending += n; break;
        case '%': if (n > 0) pending += 2 * n; break;
        case '|': if (n > 0) pending += 2 * n; pending++; break;   /* then the value itself */
        default: break;                 /* a line: + - : , # _ ( */
        }
        if (pos > len) return 0;
    }
    return pos;
}

/* One pushed reply of whole values (tag 0: dgram.h, "Pushed replies"). */
static void send_push(nclient *c, const char *resp, size_t len) {
    char big[160];
    if (len > DGRAM_REPLY_MAX) {   /* no fragments carry it: say so in its place */
        snprintf(big, sizeof(big),
                 "-ERR pushed message of %zu bytes dropped: the native transport carries at "
                 "most %u bytes; use TCP\r\n", len, DGRAM_REPLY_MAX);
        stat_add(&c->nw->st.too_large, 1);
        resp = big;
        len = strlen(big);
    }
    send_reply(c->nw, c, c->id, 0, c->version, &c->addr, resp, len, 0, 0);
}

/* Unsolicited output, as the session gathered it (maybe several values):
 * whole values go together while they fit one datagram; a larger one goes
 * alone, fragmented. */
static void send_pushes(nclient *c, const char *resp, size_t len) {
    size_t start = 0, pos = 0;
    while (pos < len) {
        size_t n = resp_value_len(resp + pos, len - pos);
        if (n == 0) n = len - pos;   /* not whole values (never from a session): as one */
        if (pos > start && pos + n - start > DGRAM_PAYLOAD_MAX) {
            send_push(c, resp + start, pos - start);
            start = pos;
        }
        pos += n;
    }
    if (pos > start) send_push(c, resp + start, pos - start);
}

static void on_reply(void *tctx, uint64_t tag, const char *resp, size_t len) {
    nclient *c = tctx;
    if (c->closing) return;
    if (tag == 0) {   /* unsolicited: pub/sub, MONITOR */
        send_pushes(c, resp, len);
        return;
    }
    nreq *r = req_find(c, tag);
    if (r && !r->done) complete(c, r, resp, len);
}

/* The session is being freed. When the edge did not ask for it (QUIT,
 * CLIENT KILL, output limits, a held reply broken by a handover,
 * shutdown), requests still running have no reply and never will: they
 * complete with an error saying their outcome is unknown, as a RESP
 * client's would after losing its connection. The client's records stay:
 * its next request opens a new session. */
static void on_close(void *tctx) {
    nclient *c = tctx;
    static const char gone[] =
        "-ERR native session closed before this request's reply; its outcome is unknown\r\n";
    c->s = NULL;
    if (c->closing) return;
    stat_add(&c->nw->st.sessions_closed, 1);
    for (int i = 0; i < c->nreqs; i++)
        if (!c->reqs[i].done) complete(c, &c->reqs[i], gone, sizeof(gone) - 1);
}

static const session_transport native_session = {
    .kind = "native", .reply = on_reply, .close = on_close,
};

/* ---------------- requests ---------------- */

/* Commands the edge answers itself: CLIENT REPLY would leave requests
 * without the reply the protocol promises. NULL to run the command. */
static const char *edge_answer(int argc, const char *const *argv, const size_t *argvlen) {
    if (argc >= 2 && argvlen[0] == 6 && !strncasecmp(argv[0], "client", 6) && argvlen[1] == 5 &&
        !strncasecmp(argv[1], "reply", 5))
        return "-ERR CLIENT REPLY is not available on the native transport: every request gets "
               "its reply\r\n";
    return NULL;
}

/* Make room for a new client: the least recently heard one goes if it has
 * been idle long enough and runs nothing. 0 when there is room. */
static int make_room(nworker *nw) {
    int cap = (server.cfg.native_max_clients + nnws - 1) / nnws;
    if (nw->nclients < cap) return 0;
    nclient *old = nw->oldest;
    if (old && old->running == 0 &&
        nw->now_us - old->last_us >= (int64_t)NATIVE_EVICT_IDLE_S * 1000000) {
        client_free(nw, old);
        stat_add(&nw->st.evicted, 1);
        return 0;
    }
    return -1;
}

static long long cache_cap(void) {
    long long v = __atomic_load_n(&server.cfg.native_reply_cache, __ATOMIC_RELAXED);
    return v / (nnws ? nnws : 1);
}

static void handle_request(nworker *nw, const dgram_hdr *h, const native_addr *from,
                           const unsigned char *payload, size_t plen) {
    const char *why = NULL;
    int argc = dgram_get_args(payload, plen, nw->argv, nw->argvlen, DGRAM_MAX_ARGS, &why);
    if (argc < 0) {
        stat_add(&nw->st.refused_malformed, 1);
        nclient *mc = client_find(nw, h->client);
        if (mc) mc->version = h->version;
        send_refusal(nw, mc, h, from, DGRAM_R_MALFORMED, why);
        return;
    }
    /* A request's own reply cannot have arrived: acked above its id is
     * clamped, so a bad `acked` cannot make the client's next ids look old. */
    uint64_t acked = h->acked < h->req ? h->acked : h->req;
    nclient *c = client_find(nw, h->client);
    if (c) {
        c->addr = *from;
        c->version = h->version;
        c->last_us = nw->now_us;
        if (nw->recent != c) {
            recency_unlink(nw, c);
            recency_front(nw, c);
        }
        client_ack(nw, c, acked);
        if (h->req < c->acked) {            /* the client has this reply already */
            stat_add(&nw->st.dup_old, 1);
            return;
        }
        nreq *r = h->req > c->maxreq ? NULL : req_find(c, h->req);
        if (r) {
            if (r->done) {
                stat_add(&nw->st.dup_cached, 1);
                send_reply(nw, c, c->id, r->id, c->version, from, reply_of(c, r), r->len, h->frag,
                           1);
            } else {
                stat_add(&nw->st.dup_running, 1);
            }
            return;
        }
    }
    /* a new request: refusals first, nothing has run */
    if (server_loading()) {
        stat_add(&nw->st.refused_loading, 1);
        send_refusal(nw, c, h, from, DGRAM_R_LOADING, "LOADING Rowan is loading the dataset in memory");
        return;
    }
    uint64_t term = cluster_term();
    if (h->term != 0 && h->term < term) {
        stat_add(&nw->st.refused_stale, 1);
        send_refusal(nw, c, h, from, DGRAM_R_STALE, "STALE configuration term; refresh and retry");
        return;
    }
    /* is_local first: acl_default_nopass takes the ACL lock */
    if (server.cfg.protected_mode && !backend->is_local(nw->ep, from) && acl_default_nopass()) {
        static const char denied[] =
            "-DENIED Rowan is running in protected mode because protected mode is enabled and no "
            "password is set for the default user. In this mode connections are only accepted "
            "from the loopback interface.\r\n";
        stat_add(&nw->st.denied, 1);
        send_reply(nw, c, h->client, h->req, h->version, from, denied, sizeof(denied) - 1, 0, 0);
        return;
    }
    if ((long long)nw->cached >= cache_cap() || (c && c->nreqs >= NATIVE_MAX_PENDING) ||
        (!c && make_room(nw) != 0)) {
        stat_add(&nw->st.refused_busy, 1);
        send_refusal(nw, c, h, from, DGRAM_R_BUSY, "BUSY too many native clients or requests in "
                     "flight; retry later");
        return;
    }
    if (!c) {
        c = client_new(nw, h->client);
        c->addr = *from;
        c->last_us = nw->now_us;
        c->acked = acked;
        c->version = h->version;
    }
    if (c->nreqs == c->capreqs) {
        c->capreqs = c->capreqs ? c->capreqs * 2 : 8;
        c->reqs = realloc(c->reqs, sizeof(nreq) * (size_t)c->capreqs);
    }
    nreq *r = &c->reqs[c->nreqs++];
    memset(r, 0, sizeof(*r));
    r->id = h->req;
    if (h->req > c->maxreq) c->maxreq = h->req;
    c->running++;
    stat_add(&nw->st.requests, 1);
    const char *answer = edge_answer(argc, nw->argv, nw->argvlen);
    if (answer) {
        complete(c, r, answer, strlen(answer));
        return;
    }
    if (!c->s) {
        char addr[128];
        native_addr_string(from, addr, sizeof(addr));
        c->s = session_open(nw->w, &native_session, c, addr);
        if (!c->s) {   /* maxclients, as for a TCP connection */
            static const char full[] = "-ERR max number of clients reached\r\n";
            complete(c, r, full, sizeof(full) - 1);
            return;
        }
        c->s->is_local = backend->is_local(nw->ep, from);
        backend->describe(nw->ep, c->s->laddr, sizeof(c->s->laddr));
    }
    session_run(c->s, h->req, argc, nw->argv, nw->argvlen);
}

static void on_datagram(nworker *nw, const unsigned char *rx, size_t n, const native_addr *from) {
    dgram_hdr h;
    const char *why = NULL;
    stat_add(&nw->st.in, 1);
    stat_add(&nw->st.bytes_in, (long long)n);
    if (n > DGRAM_MTU) {
        /* A request that does not fit one datagram (a client that is not
         * librowan, which refuses it before sending): if its header reads
         * as a request, say why, so it is not retransmitted for ever. */
        stat_add(&nw->st.malformed, 1);
        if (dgram_get_hdr(rx, DGRAM_HDR_LEN, &h, &why) == 0 && h.type == DGRAM_REQUEST)
            send_refusal(nw, NULL, &h, from, DGRAM_R_MALFORMED, "request larger than one datagram "
                         "(4096 bytes): use TCP");
        return;
    }
    if (dgram_get_hdr(rx, n, &h, &why) != 0 ||
        (h.type != DGRAM_REQUEST && h.type != DGRAM_PACKED_REQUESTS)) {
        stat_add(&nw->st.malformed, 1);
        return;
    }
    const unsigned char *payload = rx + DGRAM_HDR_LEN;
    size_t plen = n - DGRAM_HDR_LEN;
    if (h.type == DGRAM_REQUEST) {
        handle_request(nw, &h, from, payload, plen);
        return;
    }
    /* a packed frame: each entry is a request of its own (dgram.h) */
    stat_add(&nw->st.packs_in, 1);
    dgram_entry e;
    size_t pos = 0;
    while (dgram_pack_next(payload, plen, h.type, &pos, &e)) {
        dgram_hdr eh = h;
        eh.type = DGRAM_REQUEST;
        eh.req = e.req;
        eh.shard = e.shard;
        eh.frag = e.frag;
        eh.nfrag = 0;
        handle_request(nw, &eh, from, e.payload, e.len);
    }
}

static void readable_cb(evutil_socket_t fd, short what, void *arg) {
    nworker *nw = arg;
    nw->now_us = monotonic_us();   /* one clock read per batch: last_us is for idle timeouts */
    for (int i = 0; i < NATIVE_RECV_BATCH; i++) {
        native_addr from;
        const unsigned char *rx = nw->rx;   /* recv_ref: the backend's buffer, no copy */
        ssize_t n = backend->recv_ref ? backend->recv_ref(nw->ep, &rx, &from)
                                      : backend->recv(nw->ep, nw->rx, sizeof(nw->rx), &from);
        if (n < 0) return;
        on_datagram(nw, rx, (size_t)n, &from);
    }
    /* more may be waiting: come back after the others had their turn */
    event_active(nw->ev, EV_READ, 0);
}

/* Once a second: forget clients idle for native-client-timeout. */
static void cron_cb(evutil_socket_t fd, short what, void *arg) {
    nworker *nw = arg;
    int64_t limit = (int64_t)server.cfg.native_client_timeout * 1000000;
    int64_t now = monotonic_us();
    for (nclient *c = nw->oldest, *prev; c; c = prev) {
        prev = c->prev;
        if (now - c->last_us < limit) break;   /* the rest were heard more recently */
        if (c->running) continue;
        client_free(nw, c);
        stat_add(&nw->st.evicted, 1);
    }
}

/* ---------------- setup ---------------- */

int native_listen(char *err, size_t errlen) {
    if (server.cfg.native_port <= 0) return 0;
    backend = server.cfg.native_transport == NATIVE_TRANSPORT_VERBS ? &native_verbs_backend
                                                                     : &native_udp_backend;
    char bind[256];
    const char *b = server.cfg.native_bind;
    if (!b || !*b) {   /* the first `bind` address, without its optional '-' */
        const char *all = server.cfg.bind && *server.cfg.bind ? server.cfg.bind : "127.0.0.1";
        if (*all == '-') all++;
        size_t k = strcspn(all, " ");
        snprintf(bind, sizeof(bind), "%.*s", (int)k, all);
    } else {
        snprintf(bind, sizeof(bind), "%s", b);
    }
    int n = server.cfg.workers > 0 ? server.cfg.workers : 1;
    nws = calloc((size_t)n, sizeof(*nws));
    for (int i = 0; i < n; i++) {
        nworker *nw = calloc(1, sizeof(*nw));
        nw->ep = backend->open(i, n, bind, server.cfg.native_port, err, errlen);
        if (!nw->ep) {
            free(nw);
            native_stop();
            return -1;
        }
        nw->nbuckets = 64;
        nw->buckets = calloc(nw->nbuckets, sizeof(*nw->buckets));
        nws[nnws++] = nw;
    }
    char where[160];
    backend->describe(nws[0]->ep, where, sizeof(where));
    serverLog(LL_NOTICE, "Native datagram edge on %s (%s), %d worker endpoints", bind, where, n);
    return 0;
}

void native_attach(void) {
    for (int i = 0; i < nnws && i < server.nworkers; i++) {
        nworker *nw = nws[i];
        nw->w = server.workers[i];
        nw->ev = event_new(nw->w->base, backend->fd(nw->ep), EV_READ | EV_PERSIST, readable_cb, nw);
        event_add(nw->ev, NULL);
        nw->w->round_end_arg = nw;
        nw->w->round_end = round_end;
        nw->cron = event_new(nw->w->base, -1, EV_PERSIST, cron_cb, nw);
        struct timeval tv = {1, 0};
        event_add(nw->cron, &tv);
    }
}

void native_stop(void) {
    for (int i = 0; i < nnws; i++) {
        nworker *nw = nws[i];
        while (nw->packing) pack_close(nw, nw->packing);   /* replies of the last round */
        if (nw->ev) event_free(nw->ev);
        if (nw->cron) event_free(nw->cron);
        for (size_t k = 0; k < nw->nbuckets; k++) {
            for (nclient *c = nw->buckets[k], *next; c; c = next) {
                next = c->hnext;
                /* the workers freed every session already (on_close ran) */
                for (int j = 0; j < c->nreqs; j++) free(c->reqs[j].big);
                free(c->reqs);
                free(c->arena);
                free(c);
            }
        }
        free(nw->buckets);
        round_end(nw);
        while (nw->nspare) free(nw->spare[--nw->nspare]);
        free(nw->sent);   /* replies of sessions freed after the workers stopped */
        backend->close(nw->ep);
        free(nw);
    }
    free(nws);
    nws = NULL;
    nnws = 0;
}

/* ---------------- INFO ---------------- */

void native_info(rbuf *b) {
    struct { const char *name; size_t off; } f[] = {
#define F(x, n) {n, offsetof(struct native_stats, x)}
        F(in, "native_datagrams_in"), F(out, "native_datagrams_out"),
        F(bytes_in, "native_bytes_in"), F(bytes_out, "native_bytes_out"),
        F(requests, "native_requests"), F(dup_cached, "native_duplicates_answered_from_cache"),
        F(dup_running, "native_duplicates_dropped_running"), F(dup_old, "native_duplicates_dropped_acked"),
        F(refused_stale, "native_refused_stale"), F(refused_busy, "native_refused_busy"),
        F(refused_loading, "native_refused_loading"), F(refused_malformed, "native_refused_malformed"),
        F(malformed, "native_dropped_malformed"), F(denied, "native_denied"),
        F(too_large, "native_replies_too_large"), F(evicted, "native_clients_evicted"),
        F(sessions_closed, "native_sessions_closed"), F(clients, "native_clients"),
        F(cached_bytes, "native_reply_cache_bytes"), F(send_errors, "native_send_errors"),
        F(send_calls, "native_send_calls"), F(packs_in, "native_packed_datagrams_in"),
        F(packs_out, "native_packed_datagrams_out"),
#undef F
    };
    rbuf_appendf(b, "# Native\r\n");
    rbuf_appendf(b, "native_enabled:%d\r\n", nnws > 0);
    if (nnws == 0) return;
    char where[160];
    backend->describe(nws[0]->ep, where, sizeof(where));
    rbuf_appendf(b, "native_transport:%s\r\nnative_endpoint:%s\r\n", backend->name, where);
    /* verbs: each worker's queue pair is its own address */
    for (int k = 1; k < nnws && backend == &native_verbs_backend; k++) {
        backend->describe(nws[k]->ep, where, sizeof(where));
        rbuf_appendf(b, "native_endpoint_%d:%s\r\n", k, where);
    }
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        long long sum = 0;
        for (int k = 0; k < nnws; k++)
            sum += atomic_load_explicit((_Atomic long long *)((char *)&nws[k]->st + f[i].off),
                                        memory_order_relaxed);
        rbuf_appendf(b, "%s:%lld\r\n", f[i].name, sum);
    }
    rbuf_appendf(b, "native_worker_clients:");
    for (int k = 0; k < nnws; k++)
        rbuf_appendf(b, "%s%lld", k ? "," : "", (long long)atomic_load(&nws[k]->st.clients));
    rbuf_appendf(b, "\r\n");
}
