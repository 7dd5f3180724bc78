/* digest.c -- the digest thread (see digest.h for what it does and why).
 *
 * State, all private to the digest thread except the published frontier:
 *   segs[]     b-log segments in b-log order, each with its MaxVer per shard
 *              (allocated when the first effect lands in it);
 *   cursor     (index into segs, byte position) of the next entry to read;
 *   frontier   (index, position) persisted by the control thread;
 *   held       effects of batches' pieces (db.c), until their commit is
 *              read: only then are they pending (a promotion takes in what
 *              is pending, and must not take half a batch);
 *   per shard: pending effects (version, pool offset), `applied` (every
 *              version <= applied is reflected in the index, or was covered
 *              by a catch-up), `commitver` (the primary's last CommitVer).
 *
 * Invariant: an effect is applied only once its version is <= its shard's
 * CommitVer, i.e. once it is durable on every replica, and effects of a
 * shard are applied in version order. An effect at or below `applied` that
 * arrives later is a duplicate (a catch-up already covered it) and is
 * dropped; that is what lets catch-up run while workers keep replicating. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "cluster.h"
#include "control.h"
#include "db.h"
#include "db_shard.h"
#include "digest.h"
#include "deadline.h"
#include "le.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

typedef struct dg_seg {
    uint32_t seg;
    int complete;          /* the b-log moved past it and we read all of it */
    uint64_t *maxver;      /* [nshards], NULL while it holds no pending effect */
} dg_seg;

typedef struct dg_item { uint64_t ver, ref; } dg_item;

typedef struct dg_shard {
    dg_item *pend;
    size_t n, cap;
    uint64_t applied, commitver;
    uint64_t resync_ver;   /* the re-sync being received (log.h), 0 when none */
    uint64_t resync_term;  /* its sender's term (the begin marker's aux) */
    int64_t progress_us;   /* last time CommitVer moved or nothing was pending */
    int stall_logged;
} dg_shard;

/* How often the digest looks for new b-log data. CommitVer markers come
 * every ~15 ms (and the control thread may hold a round of them for up to
 * 15 ms more, control.c), so entries wait for them anyway; polling every
 * 5 ms cost three wake-ups per marker round on each node, a sixth of all
 * the context switches of a k=3 SET load (issue 14). Jobs (digest_run)
 * still wake it at once. */
#define DIGEST_POLL_MS 15
/* Entries waiting this long for the primary's CommitVer make the shard
 * count as stalled (INFO, one log line): its primary cannot commit them,
 * usually because another replica of the shard is down. */
#define DIGEST_STALL_MS 10000

typedef struct dg_job {
    void (*fn)(void *);
    void *arg;
    struct dg_job *next;
} dg_job;

/* The digest's whole state: one per server (server.digest), allocated by
 * digest_init; the digest thread gets it as its argument. */
struct digest_state {
    pthread_t thread;
    int running;
    _Atomic int stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu: segments announced by the control thread, the frontier and
     * the jobs queued by digest_run */
    uint32_t *ann;
    size_t nann, capann;
    size_t front_idx;   /* index into ann of the frontier segment */
    uint32_t front_pos;
    int have_front;
    dg_job *jobs;
    /* digest thread only */
    dg_seg *segs;
    size_t nsegs, capsegs, first_open; /* segs[0..first_open) committed */
    size_t cur_idx;
    uint32_t cur_pos;
    dg_shard *sh;
    /* effects of batches' pieces (db.c) waiting for their commit */
    struct dg_held { int64_t id; uint64_t ref; } *held;
    size_t nheld, capheld;
    /* Serialises on_entry: the digest thread (rowan mode) or backup workers
     * (rpc mode) feed it. */
    pthread_mutex_t apply_mu;
    /* statistics */
    _Atomic uint64_t st_pub, st_dig, st_applied, st_dropped, st_pending, st_corrupt,
        st_resyncs, st_committed, st_diverged, st_stalled;
};
typedef struct digest_state digest_state;

void digest_init(void) {
    digest_state *ds = calloc(1, sizeof(*ds));
    pthread_mutex_init(&ds->mu, NULL);
    pthread_cond_init(&ds->cv, NULL);
    pthread_mutex_init(&ds->apply_mu, NULL);
    server.digest = ds;
}

void digest_free(void) {
    digest_state *ds = server.digest;   /* after digest_stop */
    if (!ds) return;
    for (dg_job *j = ds->jobs, *next; j; j = next) {
        next = j->next;
        free(j);
    }
    for (int s = 0; ds->sh && s < server.nshards; s++) free(ds->sh[s].pend);
    free(ds->sh);
    free(ds->ann);
    for (size_t i = 0; i < ds->nsegs; i++) free(ds->segs[i].maxver);
    free(ds->segs);
    free(ds->held);
    pthread_mutex_destroy(&ds->mu);
    pthread_cond_destroy(&ds->cv);
    pthread_mutex_destroy(&ds->apply_mu);
    free(ds);
    server.digest = NULL;
}

void digest_segment_started(uint32_t seg) {
    digest_state *ds = server.digest;
    pthread_mutex_lock(&ds->mu);
    if (ds->nann == ds->capann) {
        ds->capann = ds->capann ? ds->capann * 2 : 64;
        ds->ann = realloc(ds->ann, ds->capann * sizeof(uint32_t));
    }
    ds->ann[ds->nann++] = seg;
    pthread_mutex_unlock(&ds->mu);
}

void digest_publish(uint32_t seg, uint32_t pos) {
    digest_state *ds = server.digest;
    pthread_mutex_lock(&ds->mu);
    /* seg is one of the newest announced segments (the b-log may have moved
     * on while the flush ran): the latest announcement of it */
    uint64_t before = ds->have_front ? (uint64_t)ds->front_idx * POOL_SEG_SIZE + ds->front_pos : 0;
    size_t i = ds->nann;
    while (i > 0 && ds->ann[i - 1] != seg) i--;
    if (i == 0) {
        pthread_mutex_unlock(&ds->mu);
        return;   /* cannot happen: every b-log segment is announced first */
    }
    if (ds->have_front && (i - 1 < ds->front_idx || (i - 1 == ds->front_idx && pos < ds->front_pos))) {
        pthread_mutex_unlock(&ds->mu);
        return;   /* an older flush finishing after a newer one: never move back */
    }
    ds->front_idx = i - 1;
    ds->front_pos = pos;
    ds->have_front = 1;
    uint64_t now = (uint64_t)ds->front_idx * POOL_SEG_SIZE + ds->front_pos;
    if (now > before) atomic_fetch_add(&ds->st_pub, now - before);
    /* No signal: the digest is off the critical path and polls every
     * DIGEST_POLL_MS; waking it on every control-thread round would cost a
     * context switch per round on the cores the workers need. */
    pthread_mutex_unlock(&ds->mu);
}

/* ---- applying ---- */

static void pend_push(digest_state *ds, dg_shard *d, uint64_t ver, uint64_t ref) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->pend = realloc(d->pend, d->cap * sizeof(dg_item));
    }
    /* keep sorted by version: arrivals are nearly in order, so this is an
     * insertion from the end */
    size_t i = d->n++;
    while (i > 0 && d->pend[i - 1].ver > ver) {
        d->pend[i] = d->pend[i - 1];
        i--;
    }
    d->pend[i] = (dg_item){ver, ref};
    atomic_fetch_add(&ds->st_pending, 1);
}

static void apply_one(digest_state *ds, shard *s, uint64_t ref) {
    log_entry e;
    log_entry_decode(pool_ptr(server.pool, ref), &e);
    if (db_apply_entry(s, ref, &e) != 0) db_report_refused(s, &e);
    if (e.ver >= s->next_ver) s->next_ver = e.ver + 1;
    atomic_fetch_add(&ds->st_applied, 1);
}

/* Apply shard sid's pending effects with version <= upto, in order. */
static void apply_upto(digest_state *ds, int sid, uint64_t upto) {
    dg_shard *d = &ds->sh[sid];
    shard *s = &server.shards[sid];
    size_t k = 0;
    if (d->n && d->pend[0].ver <= upto) {
        shard_lock(s);
        while (k < d->n && d->pend[k].ver <= upto) apply_one(ds, s, d->pend[k++].ref);
        shard_unlock(s);
        memmove(d->pend, d->pend + k, (d->n - k) * sizeof(dg_item));
        d->n -= k;
        atomic_fetch_sub(&ds->st_pending, k);
    }
    if (upto > d->applied) d->applied = upto;
    atomic_store(&s->durable_ver, d->applied);
}

static dg_seg *cur_seg(digest_state *ds) { return &ds->segs[ds->cur_idx]; }

/* Drop shard d's pending effects with version <= upto (a re-sync covers
 * them). Later ones stay: they were written after its snapshot. */
static void pend_drop_upto(digest_state *ds, dg_shard *d, uint64_t upto) {
    size_t k = 0;
    while (k < d->n && d->pend[k].ver <= upto) k++;
    if (!k) return;
    memmove(d->pend, d->pend + k, (d->n - k) * sizeof(dg_item));
    d->n -= k;
    atomic_fetch_sub(&ds->st_pending, k);
    atomic_fetch_add(&ds->st_dropped, k);
}

/* An effect (top-level or inside a group) of shard e->shard at ref; g is
 * the b-log segment it is in (NULL: a per-worker backup log, rpc mode).
 *
 * The version rules, total:
 *  - a re-sync's own entries (LOG_F_RESYNC at the re-sync's version) apply
 *    at once: its end record decides what survives;
 *  - an effect at or below what the shard already reflects (`applied`, or
 *    the snapshot version of the re-sync being received) is covered by a
 *    re-sync and dropped;
 *  - any other effect waits for CommitVer, then applies in version order. */
/* Do we take b-log entries of shard sid? As its backup, or as its primary
 * while it fetches the shard from a replica (a re-sync only). */
static int takes_shard(int sid, int resync) {
    if (sid >= server.nshards) return 0;
    return cluster_is_backup(sid) || (resync && atomic_load(&server.shards[sid].fetching));
}

/* The segment g holds an effect not applied yet: it is committable once
 * its shard's applied version reaches it. */
static void seg_note(dg_seg *g, const log_entry *e) {
    if (!g) return;
    if (!g->maxver) g->maxver = calloc((size_t)server.nshards, sizeof(uint64_t));
    if (e->ver > g->maxver[e->shard]) g->maxver[e->shard] = e->ver;
}

static void on_effect(digest_state *ds, const log_entry *e, uint64_t ref, dg_seg *g) {
    if (!takes_shard(e->shard, (e->flags & LOG_F_RESYNC) != 0)) {
        atomic_fetch_add(&ds->st_dropped, 1);
        return;
    }
    dg_shard *d = &ds->sh[e->shard];
    if (e->flags & LOG_F_RESYNC) {
        if (!d->resync_ver || e->ver != d->resync_ver) {
            atomic_fetch_add(&ds->st_dropped, 1);
            return;
        }
        shard *s = &server.shards[e->shard];
        shard_lock(s);
        apply_one(ds, s, ref);
        shard_unlock(s);
        if (e->type == LOG_FLUSHDB) {   /* the end: everything <= ver is in */
            atomic_fetch_add(&ds->st_resyncs, 1);
            /* a whole new copy; a learner's copy stays suspect, though
             * (member.c): CommitVers did not wait for its acks */
            atomic_store(&s->resync_term, d->resync_term);
            if (!cluster_mask_has(cluster_learners_of(e->shard), cluster_self()))
                atomic_store(&s->damaged, 0);
            atomic_store(&s->fetching, 0);  /* a fetch is complete (reconcile.c) */
            d->resync_ver = 0;
            d->applied = e->ver;          /* reset, even if it was higher */
            d->commitver = e->ver;
            d->progress_us = monotonic_us();
            apply_upto(ds, e->shard, e->ver);
        }
        return;
    }
    if (e->ver <= d->applied || (d->resync_ver && e->ver <= d->resync_ver)) {
        atomic_fetch_add(&ds->st_dropped, 1);
        return;
    }
    if (d->n == 0) d->progress_us = monotonic_us();
    pend_push(ds, d, e->ver, ref);
    seg_note(g, e);
}

/* An effect of a batch's piece (db.c): it waits for the batch's commit,
 * which a crash of the primary may never send; its segment waits for it
 * (seg_committable) so that it is still there then. */
static void hold_piece(digest_state *ds, const log_entry *e, uint64_t ref, dg_seg *g, int64_t id) {
    if (!takes_shard(e->shard, 0)) {
        atomic_fetch_add(&ds->st_dropped, 1);
        return;
    }
    seg_note(g, e);
    if (ds->nheld == ds->capheld) {
        ds->capheld = ds->capheld ? ds->capheld * 2 : 1024;
        ds->held = realloc(ds->held, ds->capheld * sizeof(*ds->held));
    }
    ds->held[ds->nheld++] = (struct dg_held){id, ref};
}

/* The commit of batch id: its pieces' effects go on as any effect. */
static void commit_pieces(digest_state *ds, int64_t id) {
    size_t keep = 0;
    for (size_t i = 0; i < ds->nheld; i++) {
        if (ds->held[i].id != id) {
            ds->held[keep++] = ds->held[i];
            continue;
        }
        log_entry e;
        log_entry_decode(pool_ptr(server.pool, ds->held[i].ref), &e);
        on_effect(ds, &e, ds->held[i].ref, NULL);
    }
    ds->nheld = keep;
}

/* The primary's CommitVer went backwards: its versions no longer extend
 * what this copy reflects (a primary that lost history, or a foreign one).
 * Never apply on top of it: log it, count it, and drop the primary's links
 * so that it starts a new session, whose catch-up re-syncs the shard. */
static void on_diverged(digest_state *ds, int sid, uint64_t got) {
    dg_shard *d = &ds->sh[sid];
    atomic_fetch_add(&ds->st_diverged, 1);
    serverLog(LL_WARNING, "Digest: shard %d diverged: its primary committed version %llu after "
              "%llu; dropping its links so that it re-syncs this copy", sid,
              (unsigned long long)got, (unsigned long long)d->commitver);
    int p = cluster_primary_of(sid);
    if (p >= 0) control_drop_nodes(1ULL << p, 0);
}

static void on_commitver(digest_state *ds, int sid, uint64_t ver) {
    if (sid >= server.nshards) return;
    dg_shard *d = &ds->sh[sid];
    if (d->resync_ver) return;            /* the re-sync's end sets it */
    if (ver < d->commitver) {
        on_diverged(ds, sid, ver);
        return;
    }
    if (ver == d->commitver) return;
    d->commitver = ver;
    d->progress_us = monotonic_us();
    d->stall_logged = 0;
    apply_upto(ds, sid, ver);
}

/* A CommitVer marker: of its shard, or (LOG_SHARD_NONE) of each shard its
 * payload names (log.h). */
static void on_commitvers(digest_state *ds, const log_entry *e) {
    if (e->shard != LOG_SHARD_NONE) {
        on_commitver(ds, e->shard, e->ver);
        return;
    }
    for (uint32_t i = 0; i + 8 <= e->vlen; i += 8) {
        uint64_t w = le_get_u64(e->val + i);
        on_commitver(ds, (int)(w >> 48), w & LOG_VER_MASK);
    }
}

static void on_resync_begin(digest_state *ds, const log_entry *e) {
    if (!takes_shard(e->shard, 1)) return;
    dg_shard *d = &ds->sh[e->shard];
    pend_drop_upto(ds, d, e->ver);
    d->resync_ver = e->ver;
    d->resync_term = e->aux;
}

static void on_entry(digest_state *ds, const log_entry *e, uint64_t off, dg_seg *g) {
    switch (e->type) {
    case LOG_COMMITVER:
        on_commitvers(ds, e);
        break;
    case LOG_RESYNC:
        on_resync_begin(ds, e);
        break;
    case LOG_GROUP: {
        if (log_is_piece_commit(e)) {
            commit_pieces(ds, e->expire_ms);
            break;
        }
        size_t pos = 0, sub_off;
        log_entry sub;
        while (log_group_next(e, &pos, &sub, &sub_off)) {
            if (log_is_piece(e)) hold_piece(ds, &sub, off + sub_off, g, e->expire_ms);
            else on_effect(ds, &sub, off + sub_off, g);
        }
        break;
    }
    default:
        on_effect(ds, e, off, g);
    }
}

/* Shards whose entries have waited too long for a CommitVer: counted for
 * INFO, logged once per episode. */
static void check_stalls(digest_state *ds) {
    int64_t now = monotonic_us();
    uint64_t stalled = 0;
    for (int sid = 0; sid < server.nshards; sid++) {
        dg_shard *d = &ds->sh[sid];
        if (!d->n || now - d->progress_us < (int64_t)DIGEST_STALL_MS * 1000) continue;
        stalled++;
        if (d->stall_logged) continue;
        d->stall_logged = 1;
        serverLog(LL_WARNING, "Digest: shard %d has %zu entries waiting %.1f s for its primary's "
                  "commit (is a replica of the shard down?); this copy is behind", sid, d->n,
                  (double)(now - d->progress_us) / 1e6);
    }
    atomic_store(&ds->st_stalled, stalled);
}

/* ---- segments ---- */

static int seg_committable(digest_state *ds, const dg_seg *g) {
    if (!g->complete) return 0;
    if (!g->maxver) return 1;
    for (int s = 0; s < server.nshards; s++)
        if (g->maxver[s] > ds->sh[s].applied) return 0;
    return 1;
}

/* Commit complete segments whose MaxVer <= CommitVer (applied), oldest
 * first. Order is kept so first_open only moves forward. */
static void commit_segments(digest_state *ds) {
    for (size_t i = ds->first_open; i < ds->nsegs; i++) {
        dg_seg *g = &ds->segs[i];
        if (g->seg == UINT32_MAX) continue;
        if (!seg_committable(ds, g)) continue;
        pool_seg_set_state(server.pool, g->seg, SEG_COMMITTED);
        free(g->maxver);
        g->maxver = NULL;
        g->seg = UINT32_MAX;
        atomic_fetch_add(&ds->st_committed, 1);
    }
    while (ds->first_open < ds->nsegs && ds->segs[ds->first_open].seg == UINT32_MAX) ds->first_open++;
}

/* Read segment segs[cur_idx] from cur_pos up to limit. Returns 1 if the
 * segment has no more entries (only zeroes follow before limit). */
static int read_segment(digest_state *ds, uint32_t limit) {
    const uint8_t *base = pool_ptr(server.pool, pool_seg_offset(server.pool, cur_seg(ds)->seg));
    uint64_t seg_off = pool_seg_offset(server.pool, cur_seg(ds)->seg);
    while (ds->cur_pos + LOG_HDR_SIZE <= limit) {
        log_entry e;
        size_t n = log_entry_check(base + ds->cur_pos, limit - ds->cur_pos, &e);
        if (n) {
            pthread_mutex_lock(&ds->apply_mu);
            on_entry(ds, &e, seg_off + ds->cur_pos, cur_seg(ds));
            pthread_mutex_unlock(&ds->apply_mu);
            atomic_fetch_add(&ds->st_dig, log_entry_span(n));
            ds->cur_pos += (uint32_t)log_entry_span(n);
            continue;
        }
        uint64_t first8;
        memcpy(&first8, base + ds->cur_pos, 8);
        if (first8 == 0) return 1;   /* nothing more was written here */
        /* A message that fails its checksum (a faulty sender): skip it
         * 64 bytes at a time to the next valid entry, never interpret it. */
        atomic_fetch_add(&ds->st_corrupt, 1);
        serverLog(LL_WARNING, "Digest: b-log segment %u offset %u fails its checksum; skipped",
                  cur_seg(ds)->seg, ds->cur_pos);
        ds->cur_pos += LOG_ALIGN;
        atomic_fetch_add(&ds->st_dig, LOG_ALIGN);
    }
    return ds->cur_pos + LOG_HDR_SIZE > POOL_SEG_SIZE;
}

static void adopt_announced(digest_state *ds, size_t upto) {
    pthread_mutex_lock(&ds->mu);
    while (ds->nsegs < upto && ds->nsegs < ds->nann) {
        if (ds->nsegs == ds->capsegs) {
            ds->capsegs = ds->capsegs ? ds->capsegs * 2 : 64;
            ds->segs = realloc(ds->segs, ds->capsegs * sizeof(dg_seg));
        }
        ds->segs[ds->nsegs] = (dg_seg){.seg = ds->ann[ds->nsegs]};
        ds->nsegs++;
    }
    pthread_mutex_unlock(&ds->mu);
}

void digest_run(void (*fn)(void *), void *arg) {
    digest_state *ds = server.digest;
    dg_job *j = malloc(sizeof(*j));
    j->fn = fn;
    j->arg = arg;
    pthread_mutex_lock(&ds->mu);
    j->next = ds->jobs;
    ds->jobs = j;
    pthread_cond_signal(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
}

/* Run the queued jobs, oldest first (after the round's digesting). */
static void run_jobs(digest_state *ds) {
    pthread_mutex_lock(&ds->mu);
    dg_job *j = ds->jobs, *rev = NULL;
    ds->jobs = NULL;
    pthread_mutex_unlock(&ds->mu);
    while (j) {
        dg_job *next = j->next;
        j->next = rev;
        rev = j;
        j = next;
    }
    while (rev) {
        dg_job *next = rev->next;
        pthread_mutex_lock(&ds->apply_mu);
        rev->fn(rev->arg);
        pthread_mutex_unlock(&ds->apply_mu);
        free(rev);
        rev = next;
    }
}

/* The largest version the shard's index reflects. */
static uint64_t index_top(int sid) {
    shard *s = &server.shards[sid];
    shard_lock(s);
    uint64_t v = s->next_ver - 1;
    shard_unlock(s);
    return v;
}

uint64_t digest_max_version(int sid) {
    digest_state *ds = server.digest;
    dg_shard *d = &ds->sh[sid];
    uint64_t v = index_top(sid);
    if (d->n && d->pend[d->n - 1].ver > v) v = d->pend[d->n - 1].ver;
    return v;
}

uint64_t digest_committed(int sid) { return server.digest->sh[sid].applied; }

int digest_receiving_resync(int sid) { return server.digest->sh[sid].resync_ver != 0; }

void digest_set_committed(int sid) {
    digest_state *ds = server.digest;
    dg_shard *d = &ds->sh[sid];
    uint64_t v = index_top(sid);
    pend_drop_upto(ds, d, v);
    d->resync_ver = 0;
    d->applied = d->commitver = v;
    d->progress_us = monotonic_us();
}

uint64_t digest_apply_all(int sid) {
    digest_state *ds = server.digest;
    dg_shard *d = &ds->sh[sid];
    if (d->n) apply_upto(ds, sid, d->pend[d->n - 1].ver);
    return digest_max_version(sid);
}

static void *digest_main(void *arg) {
    digest_state *ds = arg;
    pthread_setname_np(pthread_self(), "rowan-digest");
    while (!atomic_load(&ds->stopping)) {
        pthread_mutex_lock(&ds->mu);
        if (!ds->jobs && (!ds->have_front || (ds->cur_idx == ds->front_idx && ds->cur_pos == ds->front_pos))) {
            struct timespec ts = deadline_in_ms(CLOCK_REALTIME, DIGEST_POLL_MS);
            pthread_cond_timedwait(&ds->cv, &ds->mu, &ts);
        }
        int have = ds->have_front;
        size_t fidx = ds->front_idx;
        uint32_t fpos = ds->front_pos;
        pthread_mutex_unlock(&ds->mu);
        if (!have) {
            run_jobs(ds);
            continue;
        }
        adopt_announced(ds, fidx + 1);
        while (ds->cur_idx <= fidx) {
            uint32_t limit = ds->cur_idx == fidx ? fpos : POOL_SEG_SIZE;
            int ended = read_segment(ds, limit);
            if (ds->cur_idx == fidx) break;
            /* an older segment: the b-log moved on, so it is complete */
            (void)ended;
            atomic_fetch_add(&ds->st_dig, POOL_SEG_SIZE - ds->cur_pos); /* the unused tail */
            cur_seg(ds)->complete = 1;
            ds->cur_idx++;
            ds->cur_pos = 0;
        }
        commit_segments(ds);
        check_stalls(ds);
        run_jobs(ds);
    }
    run_jobs(ds);
    return NULL;
}

void digest_feed(const log_entry *e, uint64_t off) {
    digest_state *ds = server.digest;
    pthread_mutex_lock(&ds->apply_mu);
    on_entry(ds, e, off, NULL);
    atomic_fetch_add(&ds->st_dig, log_entry_span(log_entry_len(e->klen, e->vlen)));
    atomic_fetch_add(&ds->st_pub, log_entry_span(log_entry_len(e->klen, e->vlen)));
    pthread_mutex_unlock(&ds->apply_mu);
}

void digest_start(void) {
    digest_state *ds = server.digest;
    ds->sh = calloc((size_t)server.nshards, sizeof(dg_shard));
    ds->running = 1;
    rowan_thread_create(&ds->thread, NULL, digest_main, ds);
}

void digest_stop(void) {
    digest_state *ds = server.digest;
    if (!ds->running) return;
    atomic_store(&ds->stopping, 1);
    pthread_mutex_lock(&ds->mu);
    pthread_cond_signal(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    pthread_join(ds->thread, NULL);
    ds->running = 0;
}

void digest_get_stats(digest_stats *o) {
    digest_state *ds = server.digest;
    memset(o, 0, sizeof(*o));
    o->published_bytes = atomic_load(&ds->st_pub);
    o->digested_bytes = atomic_load(&ds->st_dig);
    o->applied = atomic_load(&ds->st_applied);
    o->dropped = atomic_load(&ds->st_dropped);
    o->pending = atomic_load(&ds->st_pending);
    o->corrupt = atomic_load(&ds->st_corrupt);
    o->resyncs = atomic_load(&ds->st_resyncs);
    o->segs_committed = atomic_load(&ds->st_committed);
    o->diverged = atomic_load(&ds->st_diverged);
    o->stalled_shards = atomic_load(&ds->st_stalled);
}
