/* reconcile.c -- a primary's shards are checked against their replicas
 * before they are served (see reconcile.h for the rule and its argument).
 *
 * The work is split by thread:
 *   - the replication manager thread runs reconcile_step every round: it
 *     asks peers (BUS_SHARDINFO, one call per peer covering every shard it
 *     backs up and we still check), folds their answers into per-shard
 *     state, decides, starts fetches (BUS_FETCH) and settles shards;
 *   - bus callbacks only store answers (under rc->mu) for the next step;
 *   - on the answering node, the bus handler hands the question to the
 *     digest thread (digest_run), which first digests everything landed,
 *     so an answer covers every entry this node has acknowledged; a fetch
 *     applies the shard's pending effects there and sends the re-sync from
 *     a thread of its own (it waits for the requester's acks).
 *
 * Questions (BUS_SHARDINFO request): u64 the asker's term, then u16 per
 * shard. A node whose configuration is older than the asker's refuses
 * (RC_STALE_TERM) until it adopted the newer one: after a planned
 * handover (rebalance, CLUSTER FAILOVER) the old primary is among the
 * backups asked, and it stops serving the shard only when it adopts the
 * new term; an answer from before that would miss writes it acknowledged
 * afterwards. Once all answers are in, the digest thread applies again
 * everything landed here (writes the old primary shipped meanwhile), then
 * the shard is decided.
 *
 * Answers (BUS_SHARDINFO response), per shard asked: u16 shard, u8 flags
 * (RC_DAMAGED: the copy may lack effects; RC_HERE: this node holds a copy
 * at all, i.e. is a backup of it), u64 largest version held, u64 version
 * up to which the copy is committed (digest_committed). Learners are asked
 * too (RC_LEARNER: the copy is suspect only because its node is a learner,
 * and no re-sync is half-way in): never a source by themselves, they are
 * named when a shard is refused, and CLUSTER ACCEPTCOPY (an operator
 * accepting that such a copy may lack acknowledged writes) fetches the
 * most recent of them (reconcile_accept).
 *
 * Settling a shard: each backup whose committed version already covers
 * the settled copy's largest version holds exactly that copy (it applied
 * every version up to it, and holds none above); every other backup gets
 * a re-sync of the shard (repl_resync_shard) before the shard is served,
 * so no write of ours lands on a copy that differs from ours. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus.h"
#include "cluster.h"
#include "digest.h"
#include "le.h"
#include "reconcile.h"
#include "zk.h"
#include "repl.h"
#include "server.h"
#include "shard.h"

#define RC_DAMAGED 0x1
#define RC_HERE    0x2
#define RC_LEARNER 0x4           /* damaged only as a learner's copy, whole */
#define RC_ANSWER  19            /* bytes per shard in a SHARDINFO answer */
#define RC_RETRY_US 250000
#define RC_STALE_RETRY_US 5000       /* a peer still adopting the new term */
#define RC_STALE_TERM "stale term"
#define RC_ASK_TIMEOUT_MS 5000
#define RC_FETCH_TIMEOUT_MS 600000

typedef struct rc_shard {
    int active;              /* still being checked */
    int settling;            /* decided: waiting for its backups' re-syncs */
    uint64_t answered;       /* backups that answered */
    uint64_t committed_at[CLUSTER_MAX_NODES];  /* each backup's committed version */
    uint64_t best_ver;       /* best undamaged copy among the answers */
    int best_node;           /* -1: none yet */
    uint64_t max_any;        /* largest version any answer held */
    int fetching;            /* a BUS_FETCH is in flight or being applied */
    int fetch_done;          /* its response came (status in fetch_status) */
    int fetch_status;
    uint64_t fetch_ver;
    int reapplying;          /* answers complete: the digest applies again */
    int empty;               /* this node holds nothing of it (holds_nothing) */
    uint64_t learner_at[CLUSTER_MAX_NODES];  /* RC_LEARNER copies: version + 1 */
    int from_learner;        /* the fetch takes an accepted learner's copy */
} rc_shard;

typedef struct rc_peer {
    int asking;              /* a SHARDINFO call is in flight */
    int warned;
    int64_t next_try_us;
    uint8_t *answer;         /* a reply waiting for the manager (under rc->mu) */
    size_t alen;
    int failed;              /* the last call failed (under rc->mu) */
    int stale;               /* it refused: its term is older (under rc->mu) */
} rc_peer;

/* Reconciliation's whole state: one per server (server.reconcile),
 * allocated by reconcile_alloc at startup. It runs on the replication
 * manager's and the digest's threads, which reach it through the server. */
struct reconcile_state {
    pthread_mutex_t mu;
    rc_shard *sh;
    rc_peer peers[CLUSTER_MAX_NODES];
    _Atomic int pending, lost;
    _Atomic int *activate;          /* [nshards]: promoted, ready to be checked */
    _Atomic int *reapplied;         /* [nshards]: the digest applied again */
    _Atomic int *accept;            /* [nshards]: CLUSTER ACCEPTCOPY asked for it */
    int late_pool;                  /* check_late_pool */
    int start_logged;               /* the startup phases were logged */
};

void reconcile_alloc(void) {
    struct reconcile_state *rc = calloc(1, sizeof(*rc));
    pthread_mutex_init(&rc->mu, NULL);
    server.reconcile = rc;
}

void reconcile_free(void) {
    struct reconcile_state *rc = server.reconcile;
    if (!rc) return;
    free(rc->sh);
    free(rc->activate);
    free(rc->reapplied);
    free(rc->accept);
    pthread_mutex_destroy(&rc->mu);
    free(rc);
    server.reconcile = NULL;
}

int reconcile_pending(void) { return atomic_load(&server.reconcile->pending); }
int reconcile_lost(void) { return atomic_load(&server.reconcile->lost); }

/* This node's pool holds no entry of shard sid, and the pool did not see
 * the cluster's history from its first configuration (check_late_pool):
 * the shard may have a history (acknowledged writes) this pool never saw
 * -- it was wiped, and maybe restarted since -- so the copy is served only
 * once a replica confirms there is nothing more (or supplies it); with no
 * replica to ask, it is refused. Serving the empty copy, and re-syncing it onto the nodes
 * that return as learners, would lose the shard's writes silently (the
 * chaos soak: a cluster shrunk to one member by CPU starvation, that
 * member's pool wiped). */
static int holds_nothing(int sid) {
    return server.reconcile->late_pool && server.shards[sid].next_ver <= 1;
}

/* Is this node's pool one that did not see the cluster's history from its
 * start? It is when it holds nothing at all while the configuration is past
 * the first one (wiped, or a node that never held data); a marker file
 * beside it says so at later starts too, once some shards (backed up here)
 * have entries and others still have none. A pool of the first
 * configuration that holds nothing of a shard saw every write of it: the
 * shard never had one. */
static void check_late_pool(void) {
    struct reconcile_state *rc = server.reconcile;
    if (!cluster_managed() || cluster_replicas() < 2) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.late", server.cfg.dir, server.cfg.pool_file);
    if (access(path, F_OK) == 0) {
        rc->late_pool = 1;
        return;
    }
    if (cluster_term() <= 1) return;
    for (int s = 0; s < server.nshards; s++)
        if (server.shards[s].next_ver > 1) return;
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    int dfd = open(server.cfg.dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    rc->late_pool = 1;
    serverLog(LL_WARNING, "Reconcile: this node's pool holds nothing and cluster %s is at term "
              "%llu: the shards this node is primary of are served only once a replica confirms "
              "or supplies their history (marker %s)", cluster_name(),
              (unsigned long long)cluster_term(), path);
}

/* ---------------- answering (any node) ---------------- */

typedef struct info_job {
    bus_req *req;
    uint64_t term;
    int n;
    uint16_t ids[];
} info_job;

static void info_run(void *arg) {
    info_job *j = arg;
    if (cluster_term() < j->term) {   /* see the file comment */
        zk_poke();
        bus_reply_error(j->req, RC_STALE_TERM);
        free(j);
        return;
    }
    uint8_t *out = malloc((size_t)j->n * RC_ANSWER + 1), *p = out;
    for (int i = 0; i < j->n; i++) {
        int sid = j->ids[i];
        shard *s = &server.shards[sid];
        int dmg = atomic_load(&s->damaged);
        uint8_t flags = (dmg ? RC_DAMAGED : 0) | (cluster_is_backup(sid) ? RC_HERE : 0) |
                        (dmg == SHARD_DAMAGED_LEARNER && !digest_receiving_resync(sid) ?
                         RC_LEARNER : 0);
        le_put_u16(p, (uint16_t)sid);
        p[2] = flags;
        le_put_u64(p + 3, digest_max_version(sid));
        le_put_u64(p + 11, digest_committed(sid));
        p += RC_ANSWER;
    }
    bus_reply(j->req, out, (size_t)j->n * RC_ANSWER);
    free(out);
    free(j);
}

static void on_shardinfo(bus_req *r, int node, const uint8_t *p, size_t n) {
    (void)node;
    if (n < 8) {
        bus_reply_error(r, "malformed shard info request");
        return;
    }
    int cnt = (int)((n - 8) / 2);
    info_job *j = malloc(sizeof(*j) + sizeof(uint16_t) * (size_t)(cnt ? cnt : 1));
    j->req = r;
    j->term = le_get_u64(p);
    j->n = 0;
    for (int i = 0; i < cnt; i++) {
        uint16_t sid = le_get_u16(p + 8 + 2 * i);
        if (sid < server.nshards) j->ids[j->n++] = sid;
    }
    digest_run(info_run, j);
}

typedef struct fetch_job {
    bus_req *req;
    int node, sid;
    uint64_t vmin;
    int learner;             /* an accepted learner's copy (CLUSTER ACCEPTCOPY) */
} fetch_job;

static void *fetch_send_main(void *arg) {
    fetch_job *j = arg;
    pthread_setname_np(pthread_self(), "rowan-fetch");
    char err[256];
    uint64_t v = 0;
    int64_t t0 = monotonic_us();
    if (repl_send_resync(j->node, j->sid, j->vmin, &v, err, sizeof(err)) != 0) {
        serverLog(LL_WARNING, "Reconcile: sending shard %d to node %s failed: %s", j->sid,
                  cluster_node_at(j->node)->name, err);
        bus_reply_error(j->req, err);
    } else {
        serverLog(LL_NOTICE, "Reconcile: sent shard %d to its primary %s (version %llu, %.3f s)",
                  j->sid, cluster_node_at(j->node)->name, (unsigned long long)v,
                  (double)(monotonic_us() - t0) / 1e6);
        uint8_t b[8];
        le_put_u64(b, v);
        bus_reply(j->req, b, 8);
    }
    free(j);
    return NULL;
}

/* Digest thread: everything this node holds of the shard becomes its
 * state, then a thread sends it (it waits for the requester's acks). */
static void fetch_run(void *arg) {
    fetch_job *j = arg;
    if (j->learner && digest_receiving_resync(j->sid)) {
        bus_reply_error(j->req, "this learner's copy of the shard is half-way through a re-sync");
        free(j);
        return;
    }
    digest_apply_all(j->sid);
    pthread_t t;
    if (rowan_thread_create(&t, NULL, fetch_send_main, j) != 0) {
        bus_reply_error(j->req, "cannot start a thread");
        free(j);
        return;
    }
    pthread_detach(t);
}

static void on_fetch(bus_req *r, int node, const uint8_t *p, size_t n) {
    if (n < 10) {
        bus_reply_error(r, "malformed fetch");
        return;
    }
    int sid = le_get_u16(p);
    if (sid >= server.nshards || cluster_primary_of(sid) != node) {
        bus_reply_error(r, "the asker is not the shard's primary");
        return;
    }
    /* an accepted learner's copy: suspect only as a learner's (RC_LEARNER) */
    int learner = n >= 11 && p[10];
    int dmg = atomic_load(&server.shards[sid].damaged);
    if (dmg && !(learner && dmg == SHARD_DAMAGED_LEARNER)) {
        bus_reply_error(r, "this copy of the shard is damaged");
        return;
    }
    fetch_job *j = malloc(sizeof(*j));
    *j = (fetch_job){r, node, sid, le_get_u64(p + 2), learner};
    digest_run(fetch_run, j);
}

/* ---------------- asking (the primary) ---------------- */

/* The phases of a (cold) start, once: when every shard this node is
 * primary of is served, so at once when it has none to check. */
static void log_startup(void) {
    struct reconcile_state *rc = server.reconcile;
    if (rc->start_logged) return;
    rc->start_logged = 1;
    double total = (double)(mstime() - server.start_ms) / 1e3;
    serverLog(LL_NOTICE, "Startup: every shard this node is primary of is served %.3f s "
              "after the process started (pool recovery %.3f s, then cluster join and "
              "reconcile with the replicas %.3f s)", total, server.recovery_seconds,
              total - server.recovery_seconds);
}

void reconcile_init(void) {
    struct reconcile_state *rc = server.reconcile;
    bus_register(BUS_SHARDINFO, on_shardinfo);
    bus_register(BUS_FETCH, on_fetch);
    if (!cluster_enabled() || (cluster_replicas() < 2 && !cluster_managed())) return;
    rc->sh = calloc((size_t)server.nshards, sizeof(rc_shard));
    rc->activate = calloc((size_t)server.nshards, sizeof(*rc->activate));
    rc->reapplied = calloc((size_t)server.nshards, sizeof(*rc->reapplied));
    rc->accept = calloc((size_t)server.nshards, sizeof(*rc->accept));
    check_late_pool();
    int n = 0;
    for (int s = 0; s < server.nshards; s++) {
        /* A damaged or empty copy is checked even with no backup to ask:
         * then no replica holds its history and it is refused (decide). */
        int empty = holds_nothing(s);
        if (!cluster_is_primary(s) ||
            (!cluster_backups_of(s) && !atomic_load(&server.shards[s].damaged) && !empty))
            continue;
        rc->sh[s] = (rc_shard){.active = 1, .best_node = -1, .empty = empty};
        atomic_store(&server.shards[s].avail, SHARD_RECONCILING);
        n++;
    }
    atomic_store(&rc->pending, n);
    if (n)
        serverLog(LL_NOTICE, "Reconcile: %d shards wait for their replicas to confirm this node "
                  "holds their whole history before they are served", n);
    else
        log_startup();
}

/* Digest thread: a promoted shard's copy takes in everything this node
 * holds of it (its pending effects, committed or not), then the manager
 * may check it against the other replicas. */
static void promote_run(void *arg) {
    struct reconcile_state *rc = server.reconcile;
    int sid = (int)(intptr_t)arg;
    digest_apply_all(sid);
    atomic_store(&rc->activate[sid], 1);
}

void reconcile_begin(const uint16_t *ids, int n) {
    struct reconcile_state *rc = server.reconcile;
    if (!rc->sh) return;
    for (int i = 0; i < n; i++) digest_run(promote_run, (void *)(intptr_t)ids[i]);
}

/* Digest thread: what landed since the promotion (or the restart) is
 * applied before the shard is decided (see the file comment). */
static void reapply_run(void *arg) {
    struct reconcile_state *rc = server.reconcile;
    int sid = (int)(intptr_t)arg;
    digest_apply_all(sid);
    atomic_store(&rc->reapplied[sid], 1);
}

/* Shards whose promotion reached the manager, or refused ones an operator
 * accepted a learner's copy of (reconcile_accept): checked from scratch. */
static void activate_promoted(void) {
    struct reconcile_state *rc = server.reconcile;
    for (int s = 0; s < server.nshards; s++) {
        if (!atomic_exchange(&rc->activate[s], 0)) continue;
        if (!cluster_is_primary(s)) continue;   /* a newer configuration took it away */
        shard *sh = &server.shards[s];
        int was_lost = 0;
        shard_lock(sh);
        if (atomic_load(&sh->avail) == SHARD_LOST) {
            atomic_store(&sh->avail, SHARD_RECONCILING);
            was_lost = 1;
        }
        shard_unlock(sh);
        if (was_lost) atomic_fetch_sub(&rc->lost, 1);
        if (!rc->sh[s].active) atomic_fetch_add(&rc->pending, 1);
        rc->sh[s] = (rc_shard){.active = 1, .best_node = -1, .empty = was_lost && holds_nothing(s)};
        atomic_store(&rc->reapplied[s], 0);
    }
}

static void info_cb(void *arg, int status, const uint8_t *p, size_t n) {
    struct reconcile_state *rc = server.reconcile;
    rc_peer *pe = arg;
    pthread_mutex_lock(&rc->mu);
    pe->asking = 0;
    if (status == BUS_OK) {
        free(pe->answer);
        pe->answer = malloc(n + 1);
        memcpy(pe->answer, p, n);
        pe->alen = n;
    } else if (status == BUS_ERROR && n == strlen(RC_STALE_TERM) && !memcmp(p, RC_STALE_TERM, n)) {
        pe->stale = 1;
    } else {
        pe->failed = 1;
    }
    pthread_mutex_unlock(&rc->mu);
}

/* Shards peer p must still answer for (ids into buf, u16 each). */
static size_t unanswered(int p, uint8_t *buf) {
    struct reconcile_state *rc = server.reconcile;
    size_t n = 0;
    for (int s = 0; s < server.nshards; s++) {
        rc_shard *r = &rc->sh[s];
        if (r->active && cluster_mask_has(cluster_backups_of(s) | cluster_learners_of(s), p) &&
            !cluster_mask_has(r->answered, p)) {
            le_put_u16(buf + 2 * n, (uint16_t)s);
            n++;
        }
    }
    return n;
}

static void ask_peers(int64_t now) {
    struct reconcile_state *rc = server.reconcile;
    uint8_t *buf = malloc((size_t)server.nshards * 2 + 10);
    le_put_u64(buf, cluster_term());
    for (int p = 0; p < cluster_nnodes(); p++) {
        rc_peer *pe = &rc->peers[p];
        if (p == cluster_self() || now < pe->next_try_us) continue;
        pthread_mutex_lock(&rc->mu);
        int busy = pe->asking || pe->answer;
        pthread_mutex_unlock(&rc->mu);
        if (busy) continue;
        size_t n = unanswered(p, buf + 8);
        if (!n) continue;
        pthread_mutex_lock(&rc->mu);
        pe->asking = 1;
        pthread_mutex_unlock(&rc->mu);
        bus_call(p, BUS_SHARDINFO, buf, 8 + n * 2, RC_ASK_TIMEOUT_MS, info_cb, pe);
    }
    free(buf);
}

static void fold_answer(int p, const uint8_t *a, size_t n) {
    struct reconcile_state *rc = server.reconcile;
    for (size_t off = 0; off + RC_ANSWER <= n; off += RC_ANSWER) {
        int sid = le_get_u16(a + off);
        uint8_t flags = a[off + 2];
        uint64_t v = le_get_u64(a + off + 3);
        if (sid >= server.nshards || !rc->sh[sid].active) continue;
        rc_shard *r = &rc->sh[sid];
        r->answered |= 1ULL << p;
        r->committed_at[p] = (flags & RC_HERE) && !(flags & RC_DAMAGED) ? le_get_u64(a + off + 11) : 0;
        if (v > r->max_any) r->max_any = v;
        r->learner_at[p] = (flags & RC_HERE) && (flags & RC_LEARNER) ? v + 1 : 0;
        if ((flags & RC_HERE) && !(flags & RC_DAMAGED) && (r->best_node < 0 || v > r->best_ver)) {
            r->best_ver = v;
            r->best_node = p;
        }
    }
}

static void collect_answers(int64_t now) {
    struct reconcile_state *rc = server.reconcile;
    for (int p = 0; p < cluster_nnodes(); p++) {
        rc_peer *pe = &rc->peers[p];
        pthread_mutex_lock(&rc->mu);
        uint8_t *a = pe->answer;
        size_t n = pe->alen;
        int failed = pe->failed, stale = pe->stale;
        pe->answer = NULL;
        pe->failed = pe->stale = 0;
        pthread_mutex_unlock(&rc->mu);
        if (stale) pe->next_try_us = now + RC_STALE_RETRY_US;
        if (a) {
            fold_answer(p, a, n);
            free(a);
            pe->warned = 0;
        }
        if (failed) {
            pe->next_try_us = now + RC_RETRY_US;
            if (!pe->warned)
                serverLog(LL_WARNING, "Reconcile: node %s does not answer; the shards it backs up "
                          "stay unserved until it confirms what it holds",
                          cluster_node_at(p)->name);
            pe->warned = 1;
        }
    }
}

/* The shard's copy here is decided: the backups that do not already hold
 * exactly it are re-synced; it is served once they all are. */
static void settle(int sid, const char *how) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = &rc->sh[sid];
    shard *s = &server.shards[sid];
    uint64_t top = s->next_ver - 1, b = cluster_backups_of(sid), need = 0;
    for (int p = 0; p < CLUSTER_MAX_NODES; p++)
        if (cluster_mask_has(b, p) && r->committed_at[p] < top) need |= 1ULL << p;
    /* Learners too: a session's catch-up skipped this shard while it was
     * being reconciled (repl.c pushes_to), so a learner's copy of it is
     * whatever it held before; writes must not land on top of that. */
    need |= cluster_learners_of(sid);
    if (need) repl_resync_shard(sid, need);
    atomic_store(&rc->accept[sid], 0);
    r->settling = 1;
    serverLog(LL_VERBOSE, "Reconcile: shard %d settled (%s); %d backups to re-sync", sid, how,
              __builtin_popcountll(need));
}

/* A settled shard is served once no backup waits for its re-sync. */
static void check_settled(int sid) {
    struct reconcile_state *rc = server.reconcile;
    if (repl_resync_pending(sid)) return;
    shard *s = &server.shards[sid];
    shard_lock(s);
    atomic_store(&s->avail, SHARD_SERVING);
    shard_unlock(s);
    rc->sh[sid].active = 0;
    rc->sh[sid].settling = 0;
    atomic_fetch_sub(&rc->pending, 1);
}

/* The learners' copies a refused shard's log line names ("node0 version
 * 12, node2 version 14"); 0 when none answered with one. */
static int learner_copies(const rc_shard *r, char *buf, size_t len) {
    int n = 0;
    size_t off = 0;
    buf[0] = 0;
    for (int p = 0; p < cluster_nnodes() && off < len; p++) {
        if (!r->learner_at[p]) continue;
        off += (size_t)snprintf(buf + off, len - off, "%s%s version %llu", n ? ", " : "",
                                cluster_node_at(p)->name, (unsigned long long)(r->learner_at[p] - 1));
        n++;
    }
    return n;
}

static void lose(int sid) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = &rc->sh[sid];
    shard *s = &server.shards[sid];
    shard_lock(s);
    atomic_store(&s->avail, SHARD_LOST);
    shard_unlock(s);
    r->active = 0;
    atomic_store(&rc->accept[sid], 0);
    atomic_fetch_sub(&rc->pending, 1);
    atomic_fetch_add(&rc->lost, 1);
    char copies[512];
    int nl = learner_copies(r, copies, sizeof(copies));
    const char *why = r->empty ? "this node's pool holds nothing of it (wiped) and no backup "
                                 "confirms its history"
                               : "this node's copy is damaged and no backup holds an undamaged one";
    if (nl)
        serverLog(LL_WARNING, "Reconcile: shard %d (slots %u-%u) is NOT served: %s. Its keys are "
                  "refused with -CLUSTERDOWN. Learners hold copies (%s), suspect because writes "
                  "did not wait for a learner: they may lack acknowledged writes. To serve the most "
                  "recent of them, accepting that, run CLUSTER ACCEPTCOPY %d (or ALL) on this node.",
                  sid, s->first_slot, s->last_slot, why, copies, sid);
    else
        serverLog(LL_WARNING, "Reconcile: shard %d (slots %u-%u) is NOT served: %s. Its keys are "
                  "refused with -CLUSTERDOWN. Bring back a node that held a copy: as a backup it "
                  "is a source; as a learner, CLUSTER ACCEPTCOPY %d (or ALL) on this node serves "
                  "its copy, accepting that it may lack acknowledged writes. Or repair a damaged "
                  "copy with rowan-check-pool --fix (accepting the loss) and restart its node.",
                  sid, s->first_slot, s->last_slot, why, sid);
}

static void fetch_cb(void *arg, int status, const uint8_t *p, size_t n) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = arg;
    pthread_mutex_lock(&rc->mu);
    r->fetch_status = status;
    r->fetch_ver = status == BUS_OK && n >= 8 ? le_get_u64(p) : 0;
    if (status == BUS_ERROR)
        serverLog(LL_WARNING, "Reconcile: fetch refused: %.*s", (int)n, (const char *)p);
    r->fetch_done = 1;
    pthread_mutex_unlock(&rc->mu);
}

static void start_fetch(int sid, int64_t now) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = &rc->sh[sid];
    uint64_t vmin = r->max_any;
    uint64_t mine = server.shards[sid].next_ver;
    if (mine > vmin) vmin = mine;
    vmin++;
    atomic_store(&server.shards[sid].fetching, vmin);
    r->fetching = 1;
    r->fetch_done = 0;
    serverLog(LL_NOTICE, "Reconcile: shard %d: node %s holds version %llu, this node only %llu%s; "
              "fetching the shard from it%s", sid, cluster_node_at(r->best_node)->name,
              (unsigned long long)r->best_ver, (unsigned long long)(mine - 1),
              atomic_load(&server.shards[sid].damaged) ? " (and its copy is damaged)" : "",
              r->from_learner ? " (a learner's copy, accepted by CLUSTER ACCEPTCOPY)" : "");
    uint8_t b[11];
    le_put_u16(b, (uint16_t)sid);
    le_put_u64(b + 2, vmin);
    b[10] = (uint8_t)r->from_learner;
    (void)now;
    bus_call(r->best_node, BUS_FETCH, b, sizeof(b), RC_FETCH_TIMEOUT_MS, fetch_cb, r);
}

/* A fetch finished: settled once our digest applied the whole re-sync;
 * a failed one is tried again from the next answers. */
static void check_fetch(int sid, int64_t now) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = &rc->sh[sid];
    pthread_mutex_lock(&rc->mu);
    int done = r->fetch_done, status = r->fetch_status;
    pthread_mutex_unlock(&rc->mu);
    if (!done) return;
    if (status == BUS_OK) {
        if (atomic_load(&server.shards[sid].fetching)) return;   /* digest still applying */
        r->fetching = 0;
        char how[96];
        snprintf(how, sizeof(how), "fetched from node %s at version %llu",
                 cluster_node_at(r->best_node)->name, (unsigned long long)r->fetch_ver);
        serverLog(LL_NOTICE, "Reconcile: shard %d %s", sid, how);
        settle(sid, how);
        return;
    }
    /* ask everyone again: the source may be gone, another may do */
    (void)now;
    r->fetching = 0;
    r->answered = 0;
    r->best_node = -1;
    r->best_ver = 0;
    r->from_learner = 0;
    memset(r->learner_at, 0, sizeof(r->learner_at));
    r->reapplying = 0;
    atomic_store(&rc->reapplied[sid], 0);
}

static void decide(int sid, int64_t now) {
    struct reconcile_state *rc = server.reconcile;
    rc_shard *r = &rc->sh[sid];
    shard *s = &server.shards[sid];
    if (!cluster_is_primary(sid)) {   /* a newer configuration gave it to another node */
        r->active = 0;
        atomic_fetch_sub(&rc->pending, 1);
        return;
    }
    if (r->settling) {
        check_settled(sid);
        return;
    }
    if (r->fetching) {
        check_fetch(sid, now);
        return;
    }
    if ((r->answered & cluster_backups_of(sid)) != cluster_backups_of(sid)) return;
    if (!atomic_load(&rc->reapplied[sid])) {
        if (!r->reapplying) {
            r->reapplying = 1;
            digest_run(reapply_run, (void *)(intptr_t)sid);
        }
        return;
    }
    int damaged = atomic_load(&s->damaged);
    uint64_t mine = s->next_ver - 1;
    if (r->best_node < 0 && (r->empty || damaged)) {
        /* no source: hear the learners first, so the refusal names their
         * copies, and an operator's CLUSTER ACCEPTCOPY can take one */
        uint64_t l = cluster_learners_of(sid);
        if ((r->answered & l) != l) return;
        int best = -1;
        for (int p = 0; p < cluster_nnodes(); p++)
            if (r->learner_at[p] &&
                (best < 0 || r->learner_at[p] > r->learner_at[best]))
                best = p;
        if (best < 0 || !atomic_load(&rc->accept[sid])) {
            lose(sid);
            return;
        }
        r->best_node = best;
        r->best_ver = r->learner_at[best] - 1;
        r->from_learner = 1;
        start_fetch(sid, now);
        return;
    }
    if (!damaged && (r->best_node < 0 || mine >= r->best_ver)) {
        settle(sid, "this node's copy is the most recent");
        return;
    }
    start_fetch(sid, now);
}

void reconcile_step(void) {
    struct reconcile_state *rc = server.reconcile;
    if (!rc->sh) return;
    activate_promoted();
    if (!atomic_load(&rc->pending)) return;
    int64_t now = monotonic_us();
    collect_answers(now);
    ask_peers(now);
    int before = atomic_load(&rc->pending);
    for (int s = 0; s < server.nshards; s++)
        if (rc->sh[s].active) decide(s, now);
    if (before && !atomic_load(&rc->pending)) {
        serverLog(LL_NOTICE, "Reconcile: every shard this node is primary of was checked against "
                  "its replicas%s", atomic_load(&rc->lost) ? "; some are refused (see above)" : "");
        log_startup();
    }
}

int reconcile_accept(int sid) {
    struct reconcile_state *rc = server.reconcile;
    if (!rc || !rc->sh) return 0;
    int n = 0;
    for (int s = 0; s < server.nshards; s++) {
        if ((sid >= 0 && s != sid) || !cluster_is_primary(s) ||
            atomic_load(&server.shards[s].avail) != SHARD_LOST)
            continue;
        atomic_store(&rc->accept[s], 1);
        atomic_store(&rc->activate[s], 1);
        n++;
    }
    if (n)
        serverLog(LL_WARNING, "Reconcile: CLUSTER ACCEPTCOPY: %d refused shard%s checked again; "
                  "the most recent learner's copy of each is served, accepting that it may lack "
                  "acknowledged writes", n, n == 1 ? "" : "s");
    return n;
}
