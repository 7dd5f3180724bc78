/* repl.c -- Rowan replication, primary side: worker links, batch
 * bookkeeping, and the replication manager thread (sessions, catch-up,
 * CommitVer). See repl.h for the protocol and its argument.
 *
 * Peer sessions. Each peer we replicate to has a state (DOWN, SYNCING,
 * LIVE) and a generation number, bumped by the manager each time it opens a
 * new session. Workers open their links for the current generation on their
 * next round and drop links of older ones; a link failure anywhere marks the
 * peer DOWN (once per generation) and the manager starts over: connect its
 * own stream, bump the generation, catch the peer up, mark it LIVE.
 *
 * Stamps. A global counter orders three kinds of moments: an entry that
 * could not be sent (miss), a batch closing (its stamp: every effect in it
 * was applied before), and a catch-up starting (taken before any shard is
 * snapshotted). A catch-up with stamp C re-sends state that includes every
 * effect applied before C. So once it is acked, a batch is replicated on
 * that peer if its misses are < C and either its link messages were acked
 * or its own stamp is < C. (fetch_add gives distinct stamps, so "<" is
 * exact.)
 *
 * Locking: peer state words are atomics; a worker's link table is its own.
 * The manager takes shard locks only to snapshot a shard into memory, never
 * while doing I/O. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "blog.h"
#include "bus.h"
#include "cluster.h"
#include "control.h"
#include "db_shard.h"
#include "delta.h"
#include "digest.h"
#include "le.h"
#include "log.h"
#include "peer_auth.h"
#include "conn.h"
#include "peer_tls.h"
#include "pool.h"
#include "reconcile.h"
#include "repl.h"
#include "server.h"
#include "shard.h"
#include "transport.h"
#include "worker.h"

#define COMMITVER_INTERVAL_MS 15
enum { PEER_DOWN = 0, PEER_SYNCING = 1, PEER_LIVE = 2 };

typedef struct repl_peer {
    _Atomic int state;
    _Atomic int retire;             /* left our peers: the manager closes its stream */
    _Atomic uint64_t gen;
    _Atomic uint64_t caught_up;     /* stamp of the last acked catch-up */
    /* manager thread only */
    conn c;                         /* the manager's stream, fd -1 if none */
    uint64_t sent, acked;
    int64_t next_try_us;
    char warned[256];               /* the last failure logged, "" if none */
    uint64_t *commit_sent;          /* [nshards] last CommitVer sent */
    int no_delta;                   /* the last session's partial catch-up failed */
} repl_peer;

typedef struct repl_wlink {
    struct repl_state *rs;
    repl_link *link;
    uint64_t gen;
    uint64_t acked;
    int up, dead;
    int peer;
    struct worker *w;
} repl_wlink;

typedef struct repl_wstate {
    repl_wlink links[CLUSTER_MAX_NODES];
} repl_wstate;

#define LAT_BUCKETS 40
/* Replication's whole state on the primary side: one per server
 * (server.repl), allocated by repl_init; the manager thread gets it as its
 * argument, worker links carry it to their callbacks. */
struct repl_state {
    int active;
    /* Peers our workers replicate to (backups and learners of the shards we
     * are primary of), and those whose acks count (backups only): follow
     * the configuration (repl_config_changed). */
    _Atomic uint64_t peers_mask, ack_mask;
    repl_peer peers[CLUSTER_MAX_NODES];
    _Atomic uint64_t stamp_counter;
    const transport_ops *tp;
    pthread_t mgr_thread;
    _Atomic int mgr_stopping;
    int mgr_running;
    /* replication latency histogram: log2 buckets of microseconds */
    _Atomic uint64_t lat_hist[LAT_BUCKETS];
    _Atomic long long st_catchups, st_catchup_entries, st_catchup_bytes, st_link_failures;
    _Atomic long long st_catchup_delta, st_catchup_full;   /* shards caught up each way */
    /* [nshards]: peers that must get a re-sync of the shard (repl_resync_shard) */
    _Atomic uint64_t *resync_need;
    uint8_t *cv_pairs;              /* manager only: a CommitVer marker's payload, [8 * nshards] */
};
typedef struct repl_state repl_state;

static uint64_t next_stamp(repl_state *rs) { return atomic_fetch_add(&rs->stamp_counter, 1) + 1; }

int repl_active(void) { return server.repl->active; }

/* Backups of the shards we are primary of. */
static uint64_t backups_we_wait_for(void) {
    uint64_t m = 0;
    for (int s = 0; s < server.nshards; s++)
        if (cluster_is_primary(s)) m |= cluster_backups_of(s);
    return m;
}

/* The peers and the peers whose acks count, from the configuration in
 * force; the new peers mask. */
static uint64_t masks_follow_config(repl_state *rs) {
    uint64_t now = cluster_peers_we_replicate_to();
    atomic_store(&rs->ack_mask, backups_we_wait_for());
    atomic_store(&rs->peers_mask, now);
    return now;
}

void repl_init(void) {
    repl_state *rs = calloc(1, sizeof(*rs));
    server.repl = rs;
    masks_follow_config(rs);
    rs->active = cluster_enabled() && (cluster_replicas() > 1 || cluster_managed());
    rs->tp = server.cfg.replication_transport == REPL_TRANSPORT_VERBS ? &transport_verbs
                                                                    : &transport_tcp;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        rs->peers[p].c.fd = -1;
        atomic_store(&rs->peers[p].state, PEER_DOWN);
    }
}

void repl_free(void) {
    repl_state *rs = server.repl;   /* after repl_stop */
    if (!rs) return;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) free(rs->peers[p].commit_sent);
    free(rs->resync_need);
    free(rs);
    server.repl = NULL;
}

void repl_hello_fill(repl_hello *h, uint16_t sender) {
    memset(h, 0, sizeof(*h));
    h->magic = REPL_HELLO_MAGIC;
    h->node = (uint16_t)cluster_self();
    h->sender = sender;
    h->mode = (uint32_t)server.cfg.replication_mode;
    h->term = cluster_term();
    h->config_digest = cluster_config_digest();
    /* the cap of our TCP links (tcp_blocks.c); the bus keeps its own framing */
    h->msg_max = sender == REPL_LINK_BUS ? 0 : (uint32_t)server.cfg.replication_msg_max;
}

/* A link of generation gen to peer p failed: the peer is DOWN until the
 * manager has a new session with it. */
static void peer_down(repl_state *rs, int p, uint64_t gen, const char *why) {
    repl_peer *pe = &rs->peers[p];
    if (atomic_load(&pe->gen) != gen) return;
    int st = atomic_load(&pe->state);
    if (st == PEER_DOWN) return;
    if (atomic_compare_exchange_strong(&pe->state, &st, PEER_DOWN)) {
        atomic_fetch_add(&rs->st_link_failures, 1);
        serverLog(LL_WARNING, "Replication to node %s is down (%s); writes to the shards it backs "
                  "up wait for it (or fail after replication-timeout)",
                  cluster_node_at(p)->name, why);
    }
}

/* ---------------- worker side ---------------- */

static void wl_on_ack(void *ctx, uint64_t acked) {
    repl_wlink *l = ctx;
    l->up = 1;
    l->acked = acked;
}

static void wl_on_down(void *ctx, const char *why) {
    repl_wlink *l = ctx;
    l->dead = 1;   /* closed on the worker's next round, not inside the callback */
    peer_down(l->rs, l->peer, l->gen, why);
}

void repl_worker_init(worker *w) {
    repl_state *rs = server.repl;
    if (!rs->active) return;
    repl_wstate *ws = calloc(1, sizeof(*ws));
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        ws->links[p].rs = rs;
        ws->links[p].peer = p;
        ws->links[p].w = w;
    }
    w->repl = ws;
    w->tlog.on_wrote = repl_on_wrote;
    w->tlog.ctx = w;
    for (int i = 0; i < SHARD_SLOTS; i++)
        w->slots[i].need = calloc(CLUSTER_MAX_NODES, sizeof(repl_need));
}

void repl_worker_free(worker *w) {
    repl_state *rs = server.repl;
    repl_wstate *ws = w->repl;
    if (!ws) return;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++)
        if (ws->links[p].link) rs->tp->link_close(ws->links[p].link);
    for (int i = 0; i < SHARD_SLOTS; i++) free(w->slots[i].need);
    free(ws);
    w->repl = NULL;
}

/* Bring worker w's link to peer p in line with the peer's session: close a
 * dead or stale link, open one for a new session (asynchronously). */
static void wl_sync(repl_state *rs, worker *w, int p) {
    repl_wlink *l = &w->repl->links[p];
    uint64_t g = atomic_load(&rs->peers[p].gen);
    int st = atomic_load(&rs->peers[p].state);
    if (l->link && (l->dead || l->gen != g)) {
        rs->tp->link_close(l->link);
        l->link = NULL;
    }
    if (l->link || st == PEER_DOWN || l->gen == g) return;
    const cluster_node *n = cluster_node_at(p);
    repl_hello h;
    repl_hello_fill(&h, (uint16_t)w->id);
    repl_link_cbs cbs = {wl_on_ack, wl_on_down, l};
    char err[256];
    l->gen = g;
    l->up = l->dead = 0;
    l->acked = 0;
    l->link = rs->tp->link_open(w->base, n->host, n->repl_port, &h, &cbs, 2000, err, sizeof(err));
    if (!l->link) peer_down(rs, p, g, err);
}

void repl_worker_round(worker *w) {
    repl_state *rs = server.repl;
    if (!w->repl) return;
    uint64_t m = atomic_load(&rs->peers_mask);
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        repl_wlink *l = &w->repl->links[p];
        if ((m >> p) & 1) {
            wl_sync(rs, w, p);
        } else if (l->link) {   /* no longer a peer of ours */
            rs->tp->link_close(l->link);
            l->link = NULL;
            l->gen = 0;
        }
    }
}

/* Peers that back up (or learn) shard sid. */
static uint64_t shard_peers(int sid) {
    return sid < server.nshards ? cluster_backups_of(sid) | cluster_learners_of(sid) : 0;
}

/* Peers of an entry: its shard's, or a group's shards'; the commit of a
 * batch's pieces (db.c) goes to every peer, as its pieces went to any. */
static uint64_t entry_peers(const log_entry *e) {
    if (e->type != LOG_GROUP) return shard_peers(e->shard);
    if (log_is_piece_commit(e)) return atomic_load(&server.repl->peers_mask);
    uint64_t m = 0;
    size_t pos = 0, sub_off;
    log_entry sub;
    while (log_group_next(e, &pos, &sub, &sub_off)) m |= shard_peers(sub.shard);
    return m;
}

void repl_on_wrote(struct log_writer *lw, uint64_t off, size_t len) {
    repl_state *rs = server.repl;
    worker *w = lw->ctx;
    repl_wstate *ws = w->repl;
    const void *bytes = pool_ptr(server.pool, off);
    log_entry e;
    log_entry_decode(bytes, &e);
    uint64_t m = entry_peers(&e);
    if (!m) return;
    struct batch *b = &w->slots[w->acc];
    b->peers |= m;
    for (int p = 0; p < CLUSTER_MAX_NODES && m; p++) {
        if (!((m >> p) & 1)) continue;
        m &= ~(1ULL << p);
        repl_wlink *l = &ws->links[p];
        repl_need *nd = &b->need[p];
        uint64_t seq = 0, stamp = 0;
        if (!l->link || l->dead || l->gen != atomic_load(&rs->peers[p].gen)) {
            /* Slow path. Stamp first, then look at the session: a catch-up
             * that began before this stamp already sees the new session and
             * we open our link for it now; one that begins after it covers
             * this effect. Either way nothing falls between the two. */
            stamp = next_stamp(rs);
            wl_sync(rs, w, p);
        }
        if (l->link && !l->dead && l->gen == atomic_load(&rs->peers[p].gen))
            seq = rs->tp->link_send(l->link, bytes, len);
        if (seq && (nd->gen == 0 || nd->gen == l->gen)) {
            nd->gen = l->gen;
            nd->seq = seq;
        } else {
            /* not sent, or the batch already used an older session's link:
             * only a catch-up can cover it */
            nd->miss = stamp ? stamp : next_stamp(rs);
        }
    }
}

void repl_batch_close(worker *w, struct batch *b) {
    repl_state *rs = server.repl;
    repl_wstate *ws = w->repl;
    if (!ws) return;
    b->stamp = next_stamp(rs);
    b->launch_us = monotonic_us();
    for (int p = 0; p < CLUSTER_MAX_NODES; p++)
        if (ws->links[p].link && !ws->links[p].dead) rs->tp->link_flush(ws->links[p].link);
}

static int need_met(repl_state *rs, const repl_wlink *l, const repl_need *nd, uint64_t batch_stamp, int p) {
    uint64_t caught = atomic_load(&rs->peers[p].caught_up);
    if (nd->miss && caught <= nd->miss) return 0;
    if (!nd->seq) return 1;
    if (nd->gen == l->gen && l->gen == atomic_load(&rs->peers[p].gen) && l->link && !l->dead &&
        l->acked >= nd->seq)
        return 1;
    return caught > batch_stamp;
}

/* Can only a catch-up satisfy nd (its entries were missed, or went out on
 * a link that died before acking them)? */
static int needs_catchup(const repl_wlink *l, const repl_need *nd) {
    return nd->miss || (nd->seq && (nd->gen != l->gen || !l->link || l->dead));
}

int repl_batch_replicated(worker *w, struct batch *b) {
    repl_state *rs = server.repl;
    repl_wstate *ws = w->repl;
    if (!ws || !b->peers) return 1;
    int ok = 1;
    uint64_t acks = atomic_load(&rs->ack_mask);
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        if (!((b->peers >> p) & 1) || need_met(rs, &ws->links[p], &b->need[p], b->stamp, p)) continue;
        if (!((acks >> p) & 1)) {
            /* Not a replica the configuration counts (a learner being
             * caught up, or a node that left): the write does not wait for
             * it. A learner that missed an effect must not stay live,
             * though, or it would be reported caught up without it: its
             * session starts over, with a full catch-up. */
            uint64_t g = atomic_load(&rs->peers[p].gen);
            if (atomic_load(&rs->peers[p].state) == PEER_LIVE && needs_catchup(&ws->links[p], &b->need[p]))
                peer_down(rs, p, g, "a learner missed an effect; catching it up again");
            continue;
        }
        ok = 0;
        /* Stuck on a peer whose catch-up is done (LIVE) and did not cover
         * this batch: its effects raced with that catch-up (applied after
         * the snapshot but sent on the old session's link). Only another
         * catch-up can cover them, so ask for one rather than wait forever. */
        uint64_t g = atomic_load(&rs->peers[p].gen);
        if (atomic_load(&rs->peers[p].state) == PEER_LIVE && needs_catchup(&ws->links[p], &b->need[p]))
            peer_down(rs, p, g, "a batch raced with the last catch-up; re-syncing");
    }
    return ok;
}

void repl_batch_reset(worker *w, struct batch *b) {
    repl_state *rs = server.repl;
    if (!w->repl) return;
    if (b->peers && b->launch_us) {
        int64_t us = monotonic_us() - b->launch_us;
        int k = 0;
        while (k < LAT_BUCKETS - 1 && (1LL << (k + 1)) <= us) k++;
        atomic_fetch_add(&rs->lat_hist[k], 1);
    }
    memset(b->need, 0, CLUSTER_MAX_NODES * sizeof(repl_need));
    b->peers = 0;
    b->stamp = 0;
    b->launch_us = 0;
}

/* ---------------- the manager's stream ---------------- */

/* Open the stream to node p into *c (TLS when the port speaks it): 0, or
 * -1 with err. */
static int mgr_connect(int p, conn *c, char *err, size_t errlen) {
    const cluster_node *n = cluster_node_at(p);
    if (peer_connect(c, n->host, n->repl_port, 1000, err, errlen) != 0) return -1;
    repl_hello h;
    repl_hello_fill(&h, REPL_LINK_MANAGER);
    uint8_t ack[8];
    if (pauth_client_run(c, &h, repl_hello_len(&h), 2000, err, errlen) != 0) {
        conn_close(c);
        return -1;
    }
    if (peer_recv_all(c, ack, 8, 2000) != 0) {
        snprintf(err, errlen, "the peer did not accept our hello (see its log)");
        conn_close(c);
        return -1;
    }
    return 0;
}

/* Wait until the peer acked `upto` messages of the stream; -1 on failure. */
static int mgr_wait_acks(repl_peer *pe, uint64_t upto, int timeout_ms) {
    while (pe->acked < upto) {
        uint8_t a[8];
        if (peer_recv_all(&pe->c, a, 8, timeout_ms) != 0) return -1;
        pe->acked = le_get_u64(a);
    }
    return 0;
}

/* Drain whatever acks arrived, without waiting; -1 if the stream broke. */
static int mgr_drain_acks(repl_peer *pe) {
    for (;;) {
        int r = peer_readable_now(&pe->c);
        if (r == 0) return 0;
        if (r < 0) return -1;
        uint8_t a[8];
        if (peer_recv_all(&pe->c, a, 8, 1000) != 0) return -1;
        pe->acked = le_get_u64(a);
    }
}

typedef struct mgr_buf {
    uint8_t *b;
    size_t len, cap;
    uint64_t msgs;
    uint64_t base;       /* messages of the stream before this buffer's */
    uint32_t msg_max;    /* the cap our hello declared: larger entries go as blocks */
} mgr_buf;

/* An empty buffer for pe's stream. The cap is replication-msg-max, fixed
 * at startup: what every hello of ours declares. */
static mgr_buf mbuf_for(const repl_peer *pe) {
    return (mgr_buf){.base = pe->sent, .msg_max = (uint32_t)server.cfg.replication_msg_max};
}

static void mbuf_put(void *arg, const void *p, size_t n) {
    mgr_buf *m = arg;
    if (m->len + n > m->cap) {
        m->cap = (m->len + n) * 2;
        m->b = realloc(m->b, m->cap);
    }
    if (p) memcpy(m->b + m->len, p, n);
    else memset(m->b + m->len, 0, n);
    m->len += n;
}

/* Append one message: the entry padded to its span, or its blocks
 * (tcp_blocks.c) if the span is over the cap. */
static void mbuf_add(mgr_buf *m, const void *entry, size_t len) {
    size_t span = log_entry_span(len);
    if (m->msg_max && span > m->msg_max) {
        repl_send_blocks(entry, len, m->base + m->msgs + 1, m->msg_max, mbuf_put, m);
    } else {
        mbuf_put(m, entry, len);
        mbuf_put(m, NULL, span - len);
    }
    m->msgs++;
}

static void mbuf_export_fn(void *arg, const void *entry, size_t len) { mbuf_add(arg, entry, len); }

static void mbuf_entry(mgr_buf *m, const log_entry *e) {
    uint8_t hdr[LOG_HDR_SIZE];
    size_t len = log_entry_len(e->klen, e->vlen);
    uint8_t *enc = len <= sizeof(hdr) ? hdr : malloc(len);
    size_t n = log_entry_encode(enc, e, 1);
    mbuf_add(m, enc, n);
    if (enc != hdr) free(enc);
}

/* Append a re-sync of shard sh (its lock held) at a fresh version: begin
 * marker, every key at that version, end record (log.h, "Re-sync").
 * With b (what the receiver said of its copy, delta.h) the version is
 * above everything the receiver holds, and the buckets its copy has equal
 * are left out for it to land itself; *kept (if not NULL) gets their
 * number. Returns the version. */
static uint64_t mbuf_resync(mgr_buf *m, shard *sh, const delta_base *b, int *kept) {
    uint8_t send[DB_SHARD_BUCKETS / 8];
    uint8_t *payload = NULL;
    size_t plen = 0;
    int k = 0;
    if (b) {
        if (sh->next_ver <= b->maxver) sh->next_ver = b->maxver + 1;
        k = delta_plan(sh, b, &payload, &plen, send);
    }
    uint64_t v = shard_resync_version(sh);
    log_entry begin = {.type = LOG_RESYNC, .shard = sh->id, .ver = v,
                       .aux = cluster_term(),   /* the term (member.c) */
                       .key = "", .val = (const char *)payload, .vlen = (uint32_t)plen};
    mbuf_entry(m, &begin);
    if (k) db_shard_export_buckets(sh, v, send, mbuf_export_fn, m);
    else db_shard_export(sh, v, mbuf_export_fn, m);
    free(payload);
    if (kept) *kept = k;
    log_entry end = {.type = LOG_FLUSHDB, .flags = LOG_F_RESYNC, .shard = sh->id, .db = 0xffff,
                     .ver = v};
    mbuf_entry(m, &end);
    return v;
}

static int mgr_send(repl_peer *pe, mgr_buf *m) {
    if (peer_send_all(&pe->c, m->b, m->len) != 0) return -1;
    pe->sent += m->msgs;
    m->base = pe->sent;
    m->len = 0;
    m->msgs = 0;
    return 0;
}

static void mgr_close(repl_peer *pe) {
    if (pe->c.fd >= 0) conn_close(&pe->c);   /* sets fd to -1 */
}

/* Do we push shard s to peer p (catch-up, CommitVer)? Only the shards we
 * serve as primary: one still being reconciled (reconcile.h) may lack
 * history, and its backups must not take it for the truth. */
static int pushes_to(int s, int p) {
    return cluster_is_primary(s) && cluster_mask_has(shard_peers(s), p) &&
           atomic_load(&server.shards[s].avail) == SHARD_SERVING;
}

/* Bring peer p back: new session, catch-up of every shard it backs up for
 * us, LIVE. */
static void mgr_session(repl_state *rs, int p) {
    repl_peer *pe = &rs->peers[p];
    const cluster_node *n = cluster_node_at(p);
    char err[256];
    mgr_close(pe);
    if (mgr_connect(p, &pe->c, err, sizeof(err)) != 0) {
        /* once per distinct reason: a peer that was down and now refuses
         * our handshake says so */
        if (strcmp(pe->warned, err) != 0)
            serverLog(LL_WARNING, "Replication: cannot reach node %s at %s:%d (%s); retrying",
                      n->name, n->host, n->repl_port, err);
        snprintf(pe->warned, sizeof(pe->warned), "%s", err);
        pe->next_try_us = monotonic_us() + 250000;
        return;
    }
    pe->sent = pe->acked = 0;
    int64_t t0 = monotonic_us();
    /* What the peer holds of each shard, asked before the new generation
     * opens links to it: until then nothing changes its copies (delta.h).
     * After a failed session the next one sends whole shards. */
    delta_base **base_of = calloc((size_t)server.nshards, sizeof(*base_of));
    delta_base *bases = NULL;
    int nask = 0;
    if (!pe->no_delta) {
        int *sids = malloc(sizeof(int) * (size_t)server.nshards);
        for (int s = 0; s < server.nshards; s++)
            if (pushes_to(s, p)) sids[nask++] = s;
        bases = nask ? malloc(sizeof(*bases) * (size_t)nask) : NULL;
        if (nask && delta_ask(p, sids, nask, bases) == 0)
            for (int i = 0; i < nask; i++) base_of[sids[i]] = &bases[i];
        free(sids);
    }
    int used_delta = 0;
    long long partial = 0;   /* shards sent in part (delta.h) */
    /* New generation: workers open links for it on their next round. */
    atomic_fetch_add(&pe->gen, 1);
    atomic_store(&pe->state, PEER_SYNCING);
    uint64_t gen = atomic_load(&pe->gen);
    server_wake_workers();
    uint64_t c = next_stamp(rs);
    mgr_buf m = mbuf_for(pe);
    long long shards = 0, entries = 0, bytes = 0;
    for (int s = 0; s < server.nshards; s++) {
        if (!pushes_to(s, p)) continue;
        shard *sh = &server.shards[s];
        shard_lock(sh);
        uint64_t before = m.msgs;
        int kept = 0;
        uint64_t vsnap = mbuf_resync(&m, sh, base_of[s], &kept);
        entries += (long long)(m.msgs - before - 2);
        shard_unlock(sh);
        if (kept) used_delta = 1;
        partial += kept != 0;
        atomic_fetch_add(kept ? &rs->st_catchup_delta : &rs->st_catchup_full, 1);
        pe->commit_sent[s] = vsnap;
        atomic_fetch_and(&rs->resync_need[s], ~(1ULL << p));   /* this catch-up is one */
        shards++;
        bytes += (long long)m.len;
        if (mgr_send(pe, &m) != 0) goto fail;
    }
    int wait_ms = server.cfg.replication_timeout > 10000 ? (int)server.cfg.replication_timeout : 10000;
    if (mgr_wait_acks(pe, pe->sent, wait_ms) != 0) goto fail;
    free(m.b);
    free(bases);
    free(base_of);
    pe->no_delta = 0;
    atomic_store(&pe->caught_up, c);   /* true even if the session died since */
    int st = PEER_SYNCING;
    if (!atomic_compare_exchange_strong(&pe->state, &st, PEER_LIVE))
        return;   /* a link failed meanwhile (DOWN): the next session starts over */
    pe->warned[0] = '\0';
    atomic_fetch_add(&rs->st_catchups, 1);
    atomic_fetch_add(&rs->st_catchup_entries, entries);
    atomic_fetch_add(&rs->st_catchup_bytes, bytes);
    serverLog(LL_NOTICE, "Replication: node %s is caught up (%lld shards, %lld of them in part, "
              "%lld entries, %lld bytes in %.3f s) and counts as a replica again", n->name, shards,
              partial, entries, bytes, (double)(monotonic_us() - t0) / 1e6);
    server_wake_workers();
    return;
fail:
    free(m.b);
    free(bases);
    free(base_of);
    pe->no_delta = used_delta;
    peer_down(rs, p, gen, "catch-up stream failed");
    mgr_close(pe);
    pe->next_try_us = monotonic_us() + 250000;
}

void repl_resync_shard(int sid, uint64_t which) {
    repl_state *rs = server.repl;
    atomic_fetch_or(&rs->resync_need[sid], which & atomic_load(&rs->peers_mask));
}

int repl_resync_pending(int sid) {
    repl_state *rs = server.repl;
    return rs->resync_need && atomic_load(&rs->resync_need[sid]) != 0;
}

/* Re-sync shard sid to peer p on its live session's stream (the shard is
 * not served meanwhile, so nothing else of it is in flight). */
static void mgr_resync_shard(repl_state *rs, int p, int sid) {
    repl_peer *pe = &rs->peers[p];
    shard *sh = &server.shards[sid];
    mgr_buf m = mbuf_for(pe);
    delta_base base;
    int kept = 0;
    int asked = !pe->no_delta && delta_ask(p, &sid, 1, &base) == 0;
    shard_lock(sh);
    uint64_t v = mbuf_resync(&m, sh, asked ? &base : NULL, &kept);
    shard_unlock(sh);
    long long bytes = (long long)m.len, entries = (long long)m.msgs;
    atomic_fetch_add(kept ? &rs->st_catchup_delta : &rs->st_catchup_full, 1);
    uint64_t gen = atomic_load(&pe->gen);
    int wait_ms = server.cfg.replication_timeout > 10000 ? (int)server.cfg.replication_timeout : 10000;
    if (mgr_send(pe, &m) != 0 || mgr_wait_acks(pe, pe->sent, wait_ms) != 0) {
        pe->no_delta = kept != 0;
        peer_down(rs, p, gen, "shard re-sync stream failed");
        mgr_close(pe);
    } else {
        pe->commit_sent[sid] = v;
        atomic_fetch_and(&rs->resync_need[sid], ~(1ULL << p));
        atomic_fetch_add(&rs->st_catchup_entries, entries);
        atomic_fetch_add(&rs->st_catchup_bytes, bytes);
    }
    free(m.b);
}

/* Shards waiting for a re-sync to live peers. */
static void mgr_shard_resyncs(repl_state *rs) {
    for (int sid = 0; sid < server.nshards; sid++) {
        uint64_t need = atomic_load(&rs->resync_need[sid]);
        for (int p = 0; p < CLUSTER_MAX_NODES && need; p++) {
            if (!cluster_mask_has(need, p)) continue;
            need &= ~(1ULL << p);
            if (atomic_load(&rs->peers[p].state) == PEER_LIVE) mgr_resync_shard(rs, p, sid);
        }
    }
}

/* One re-sync of shard sid to node on a connection of its own; with base
 * (delta.h) only what differs. *kept gets the buckets left out. */
static int send_resync_once(repl_state *rs, int node, int sid, uint64_t vmin, const delta_base *base, int *kept,
                            uint64_t *vout, char *err, size_t errlen) {
    repl_peer pe = {.c = {.fd = -1}};
    if (mgr_connect(node, &pe.c, err, errlen) != 0) return -1;
    shard *sh = &server.shards[sid];
    mgr_buf m = mbuf_for(&pe);
    shard_lock(sh);
    if (sh->next_ver < vmin) sh->next_ver = vmin;
    uint64_t v = mbuf_resync(&m, sh, base, kept);
    shard_unlock(sh);
    atomic_fetch_add(*kept ? &rs->st_catchup_delta : &rs->st_catchup_full, 1);
    int wait_ms = server.cfg.replication_timeout > 10000 ? (int)server.cfg.replication_timeout : 10000;
    long long bytes = (long long)m.len, entries = (long long)m.msgs;
    int rc = mgr_send(&pe, &m) == 0 && mgr_wait_acks(&pe, pe.sent, wait_ms) == 0 ? 0 : -1;
    if (rc) {
        snprintf(err, errlen, "the re-sync stream to the primary failed");
    } else {
        atomic_fetch_add(&rs->st_catchup_entries, entries);
        atomic_fetch_add(&rs->st_catchup_bytes, bytes);
    }
    free(m.b);
    mgr_close(&pe);
    *vout = v;
    return rc;
}

int repl_send_resync(int node, int sid, uint64_t vmin, uint64_t *vout, char *err, size_t errlen) {
    repl_state *rs = server.repl;
    delta_base base;
    int kept = 0;
    int asked = delta_ask(node, &sid, 1, &base) == 0;
    int rc = send_resync_once(rs, node, sid, vmin, asked ? &base : NULL, &kept, vout, err, errlen);
    if (rc != 0 && kept)   /* the partial one was refused: the whole shard, once */
        rc = send_resync_once(rs, node, sid, vmin, NULL, &kept, vout, err, errlen);
    return rc;
}

void repl_config_changed(const cluster_config *old) {
    repl_state *rs = server.repl;
    if (!rs->active) return;
    uint64_t before = atomic_load(&rs->peers_mask), now = masks_follow_config(rs);
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        int was = cluster_mask_has(before, p), is = cluster_mask_has(now, p);
        if (was == is) continue;
        /* A peer that left, or one (re)joining with a session state from
         * an earlier time: a new generation stops its old links counting,
         * DOWN makes the manager start a session (is) or forget it (was). */
        atomic_fetch_add(&rs->peers[p].gen, 1);
        atomic_store(&rs->peers[p].state, PEER_DOWN);
        atomic_store(&rs->peers[p].retire, 1);
        rs->peers[p].next_try_us = 0;
    }
    /* A pending re-sync is owed only to the shard's current peers, and only
     * while we are its primary: a peer that left (a backup that died while
     * reconcile waited for its re-sync) would otherwise hold the shard
     * unserved for good (check_settled waits for repl_resync_pending). One
     * that comes back gets a catch-up or an `added` re-sync below. */
    for (int sid = 0; rs->resync_need && sid < server.nshards; sid++)
        atomic_fetch_and(&rs->resync_need[sid], cluster_is_primary(sid) ? shard_peers(sid) : 0);
    /* shards we keep serving that got new peers: each new one gets a
     * re-sync of the shard (a session's catch-up, if it has none yet).
     * So does a learner that became a backup: while it was a learner,
     * writes did not wait for its acks, so a CommitVer could reach it
     * before entries it covers (on other links), and its digest takes such
     * late entries for duplicates. The re-sync replaces that copy; from it
     * on, every write waits for the backup's ack before its CommitVer. */
    const cluster_config *cur = cluster_current();
    int self = cluster_self();
    int oself = -1;
    for (int i = 0; old && i < old->nnodes; i++)
        if (!strcmp(old->nodes[i].name, cluster_self_name())) oself = i;
    for (int sid = 0; old && oself >= 0 && sid < server.nshards; sid++) {
        if (old->primary[sid] != oself || cur->primary[sid] != self) continue;
        uint64_t added = ((cur->backups[sid] | cur->learners[sid]) &
                          ~(old->backups[sid] | old->learners[sid])) |
                         (cur->backups[sid] & old->learners[sid]);
        /* Only a copy we serve: one being reconciled may lack history that
         * the newcomer holds (reconcile's settle re-syncs every learner
         * once it is decided), and a refused one (SHARD_LOST: a wiped
         * pool's empty copy) would overwrite the only copies left of it
         * -- the chaos run's learners, emptied that way. */
        if (added && atomic_load(&server.shards[sid].avail) == SHARD_SERVING)
            repl_resync_shard(sid, added);
    }
    server_wake_workers();
}

uint64_t repl_live_learners(void) {
    repl_state *rs = server.repl;
    uint64_t live = 0, pending = 0, m = atomic_load(&rs->peers_mask);
    for (int p = 0; p < CLUSTER_MAX_NODES; p++)
        if (cluster_mask_has(m, p) && atomic_load(&rs->peers[p].state) == PEER_LIVE) live |= 1ULL << p;
    uint64_t learners = 0;
    for (int sid = 0; sid < server.nshards; sid++) {
        if (!cluster_is_primary(sid) || atomic_load(&server.shards[sid].avail) != SHARD_SERVING)
            continue;
        learners |= cluster_learners_of(sid);
        pending |= atomic_load(&rs->resync_need[sid]);
    }
    return learners & live & ~pending;
}

/* Send <shard, CommitVer> for every shard whose watermark moved, all in
 * one marker (log.h): one b-log message per interval for the peer to
 * land, persist and digest, instead of one per shard (issue 14: with 64
 * shards that was ~0.8 markers per replicated SET at k=3). */
static void mgr_commitvers(repl_state *rs, int p) {
    repl_peer *pe = &rs->peers[p];
    mgr_buf m = mbuf_for(pe);
    size_t n = 0;
    for (int s = 0; s < server.nshards; s++) {
        /* never before a pending re-sync of the shard reached p: p would
         * apply what it holds of the shard on top of a wrong base */
        if (!pushes_to(s, p) || cluster_mask_has(atomic_load(&rs->resync_need[s]), p)) continue;
        uint64_t v = atomic_load(&server.shards[s].durable_ver);
        if (v <= pe->commit_sent[s]) continue;
        le_put_u64(rs->cv_pairs + 8 * n++, log_commitver_pair((uint16_t)s, v));
        pe->commit_sent[s] = v;
    }
    if (n) {
        log_entry e = {.type = LOG_COMMITVER, .shard = LOG_SHARD_NONE, .key = "",
                       .val = (const char *)rs->cv_pairs, .vlen = (uint32_t)(8 * n)};
        mbuf_entry(&m, &e);
    }
    uint64_t gen = atomic_load(&pe->gen);
    if ((m.len && mgr_send(pe, &m) != 0) || mgr_drain_acks(pe) != 0) {
        peer_down(rs, p, gen, "CommitVer stream failed");
        mgr_close(pe);
    }
    free(m.b);
}

static void *mgr_main(void *arg) {
    repl_state *rs = arg;
    pthread_setname_np(pthread_self(), "rowan-repl");
    while (!atomic_load(&rs->mgr_stopping)) {
        reconcile_step();
        mgr_shard_resyncs(rs);
        int64_t now = monotonic_us();
        uint64_t pm = atomic_load(&rs->peers_mask);
        for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
            if (atomic_exchange(&rs->peers[p].retire, 0)) mgr_close(&rs->peers[p]);
            if (!((pm >> p) & 1)) continue;
            int st = atomic_load(&rs->peers[p].state);
            if (st == PEER_DOWN && now >= rs->peers[p].next_try_us) mgr_session(rs, p);
            else if (st == PEER_LIVE) mgr_commitvers(rs, p);
        }
        /* While shards wait to be reconciled (a failover, a restart) each
         * of their steps (answers folded, digest re-applied, settled) is
         * taken on the next round: 1 ms rounds keep a promotion to a few
         * milliseconds instead of several CommitVer intervals. */
        usleep(reconcile_pending() ? 1000 : COMMITVER_INTERVAL_MS * 1000);
    }
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) mgr_close(&rs->peers[p]);
    return NULL;
}

int repl_start(char *err, size_t errlen) {
    repl_state *rs = server.repl;
    if (!cluster_enabled()) return 0;
    /* The peers again: in managed mode the configuration is known only
     * since member_join, after repl_init ran (with none, every write would
     * be acknowledged without a backup). */
    masks_follow_config(rs);
    if (bus_start(err, errlen) != 0) return -1;
    /* Every cluster node can be a backup: the control thread and digest
     * run even when k = 1 would make them idle. */
    digest_start();
    if (control_start(err, errlen) != 0) return -1;
    if (!rs->active) return 0;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++)
        rs->peers[p].commit_sent = calloc((size_t)server.nshards, sizeof(uint64_t));
    rs->resync_need = calloc((size_t)server.nshards, sizeof(*rs->resync_need));
    rs->cv_pairs = calloc((size_t)server.nshards, 8);
    rs->mgr_running = 1;
    rowan_thread_create(&rs->mgr_thread, NULL, mgr_main, rs);
    return 0;
}

void repl_stop(void) {
    repl_state *rs = server.repl;   /* NULL: a start that failed before repl_init */
    if (rs && rs->mgr_running) {
        atomic_store(&rs->mgr_stopping, 1);
        pthread_join(rs->mgr_thread, NULL);
        rs->mgr_running = 0;
    }
    control_stop();
    bus_stop();
    digest_stop();
}

/* ---------------- INFO ---------------- */

static uint64_t lat_percentile(const uint64_t *h, uint64_t total, double q) {
    uint64_t want = (uint64_t)((double)total * q), acc = 0;
    for (int k = 0; k < LAT_BUCKETS; k++) {
        acc += h[k];
        if (acc > want) return 1ULL << (k + 1); /* upper bound of the bucket */
    }
    return 0;
}

void repl_info(rbuf *o) {
    repl_state *rs = server.repl;
    rbuf_appendf(o, "replication_mode:%s\r\n", server.cfg.replication_mode ? "rpc" : "rowan");
    rbuf_appendf(o, "replication_transport:%s\r\n", rs->tp ? rs->tp->name : "tcp");
    rbuf_appendf(o, "replication_factor:%d\r\n", cluster_replicas());
    int damaged = 0;
    for (int s = 0; s < server.nshards; s++) damaged += atomic_load(&server.shards[s].damaged) != 0;
    rbuf_appendf(o, "shards_reconciling:%d\r\nshards_lost:%d\r\nshards_damaged:%d\r\n",
                 reconcile_pending(), reconcile_lost(), damaged);
    int live = 0, n = 0;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++) {
        if (!((rs->peers_mask >> p) & 1)) continue;
        n++;
        int st = atomic_load(&rs->peers[p].state);
        live += st == PEER_LIVE;
        rbuf_appendf(o, "repl_peer_%s:state=%s,gen=%llu\r\n", cluster_node_at(p)->name,
                     st == PEER_LIVE ? "live" : st == PEER_SYNCING ? "syncing" : "down",
                     (unsigned long long)atomic_load(&rs->peers[p].gen));
    }
    rbuf_appendf(o, "repl_peers:%d\r\nrepl_peers_live:%d\r\n", n, live);
    uint64_t h[LAT_BUCKETS], total = 0;
    for (int k = 0; k < LAT_BUCKETS; k++) total += h[k] = atomic_load(&rs->lat_hist[k]);
    rbuf_appendf(o, "repl_batches:%llu\r\n", (unsigned long long)total);
    rbuf_appendf(o, "repl_latency_usec_p50:%llu\r\nrepl_latency_usec_p99:%llu\r\nrepl_latency_usec_p999:%llu\r\n",
                 (unsigned long long)lat_percentile(h, total, 0.5),
                 (unsigned long long)lat_percentile(h, total, 0.99),
                 (unsigned long long)lat_percentile(h, total, 0.999));
    rbuf_appendf(o, "repl_catchups:%lld\r\nrepl_catchup_entries:%lld\r\nrepl_catchup_bytes:%lld\r\n",
                 atomic_load(&rs->st_catchups), atomic_load(&rs->st_catchup_entries), atomic_load(&rs->st_catchup_bytes));
    rbuf_appendf(o, "repl_catchup_delta_shards:%lld\r\nrepl_catchup_full_shards:%lld\r\n",
                 atomic_load(&rs->st_catchup_delta), atomic_load(&rs->st_catchup_full));
    rbuf_appendf(o, "repl_link_failures:%lld\r\nrepl_timeouts:%lld\r\nrepl_replies_dropped_handover:%lld\r\n",
                 atomic_load(&rs->st_link_failures), atomic_load(&server.stat.replication_timeouts),
                 atomic_load(&server.stat.replies_dropped_handover));
    rbuf_appendf(o, "repl_auth:%s\r\nrepl_auth_failures:%lld\r\n", pauth_secret_source(),
                 pauth_failures());
    long long msgs = 0, refused = 0, links = 0, flushes = 0;
    control_get_stats(&msgs, &refused, &links, &flushes);
    rbuf_appendf(o, "blog_messages:%lld\r\nblog_bytes:%llu\r\nblog_refused:%lld\r\nblog_links:%lld\r\n", msgs,
                 (unsigned long long)blog_bytes_landed(), refused, links);
    rbuf_appendf(o, "blog_flushes:%lld\r\nblog_writes_per_flush:%.2f\r\n", flushes,
                 flushes ? (double)msgs / (double)flushes : 0.0);
    /* entries sent and received as blocks over TCP (replication-msg-max) */
    repl_block_stats bs;
    repl_block_stats_get(&bs);
    rbuf_appendf(o, "repl_msg_max:%lld\r\nrepl_blocks_sent:%lld\r\nrepl_blocks_received:%lld\r\n"
                 "repl_block_entries_sent:%lld\r\nrepl_block_entries_received:%lld\r\n"
                 "repl_block_errors:%lld\r\n", server.cfg.replication_msg_max, bs.sent,
                 bs.received, bs.entries_sent, bs.entries_received, bs.errors);
    digest_stats ds;
    digest_get_stats(&ds);
    rbuf_appendf(o, "digest_lag_bytes:%llu\r\ndigest_applied:%llu\r\ndigest_pending:%llu\r\n"
                 "digest_dropped:%llu\r\ndigest_corrupt:%llu\r\ndigest_resyncs:%llu\r\n"
                 "digest_committed_segments:%llu\r\ndigest_diverged:%llu\r\n"
                 "digest_stalled_shards:%llu\r\n",
                 (unsigned long long)(ds.published_bytes - ds.digested_bytes),
                 (unsigned long long)ds.applied, (unsigned long long)ds.pending,
                 (unsigned long long)ds.dropped, (unsigned long long)ds.corrupt,
                 (unsigned long long)ds.resyncs, (unsigned long long)ds.segs_committed,
                 (unsigned long long)ds.diverged, (unsigned long long)ds.stalled_shards);
    /* durable-version lag of the shards we are primary of */
    uint64_t maxlag = 0;
    rbuf_appendf(o, "durable_lag_by_shard:");
    int first = 1;
    for (int s = 0; s < server.nshards; s++) {
        if (!cluster_is_primary(s)) continue;
        uint64_t lag = shard_durable_lag(&server.shards[s]);
        if (lag > maxlag) maxlag = lag;
        if (!lag) continue;
        rbuf_appendf(o, "%s%d=%llu", first ? "" : ",", s, (unsigned long long)lag);
        first = 0;
    }
    rbuf_appendf(o, "\r\n");
    rbuf_appendf(o, "durable_lag_max:%llu\r\n", (unsigned long long)maxlag);
}
