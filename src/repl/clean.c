/* clean.c -- the clean thread (Rowan-KV §4.4 "Garbage collection").
 *
 * A committed segment whose live bytes fall below clean-threshold percent is
 * cleaned: its live entries are copied to a segment the cleaner owns, the
 * index is repointed only where it still points at the old copy (a worker
 * may have overwritten the key meanwhile), the copies are synced, and only
 * then is the old segment zeroed and freed. A crash at any point leaves at
 * least one durable copy of every live entry; duplicates carry the same
 * version, so recovery treats them as one.
 *
 * Liveness:
 *  - a large string's chunks and final entry are live while they are in its
 *    object's history, or pending (bigval.c); like collection entries.
 *  - a SET (or DBMAP) entry is live iff the index holds exactly its offset
 *    (a LOG_FUNCS entry iff its shard's funcs_ref is its offset);
 *    checked and relocated under the shard lock, so readers never follow a
 *    reference into a segment that is being freed.
 *  - a deletion record (DEL, FLUSHDB) is never indexed. It must survive as
 *    long as an older version of what it deleted could still be replayed,
 *    i.e. while any other non-free segment is older than the record: its aux
 *    field is the segment sequence counter when it was written, and every
 *    segment that existed then has a smaller seq. Once all of those are
 *    freed the record has nothing left to shadow and is dropped.
 *    A record that came from another node (a backup's b-log, or an rpc-mode
 *    backup log: segments owned by OWNER_CONTROL) carries the PRIMARY's
 *    sequence counter, which says nothing about this pool's segments: such
 *    a record is always copied the first time, its copy stamped with our
 *    own counter. (Its segment is committed, so the record has been
 *    applied: every older version of the key is in a segment that exists
 *    now, all of which are older than the copy's stamp.)
 *  - the end record of a shard's latest re-sync (a FLUSHDB flagged
 *    LOG_F_RESYNC) is live while it is the latest (db.c); older ones are
 *    deletion records like the others.
 *
 * When: only under space pressure, i.e. when fewer than clean_target() free
 * segments remain. Cleaning costs CPU and device bandwidth (copies, and
 * zeroing the freed segment), and a segment left alone keeps getting sparser,
 * so cleaning it later is cheaper. The victim is the committed segment with
 * the fewest live bytes, if that is below clean-threshold percent.
 *
 * Reclaiming: a refused write (db.c's refuse -> clean_note_refusal) wakes
 * the cleaner at once and lifts the threshold until space is no longer low:
 * then any committed segment with at least CLEAN_MIN_GAIN reclaimable bytes
 * (dead entries, padding, the unused tail) is a victim, fewest live bytes
 * first, as long as the reclaimable bytes plus the room left in the clean
 * log's segment add up to a whole segment. Below that, cleaning could not
 * win a free segment, which is what the refused write needs, so nothing is
 * copied and the state is "full". Each reclaiming clean removes at least
 * CLEAN_MIN_GAIN dead bytes and copies only live ones, so reclaiming ends.
 * Freed space also hides in segments still being written (USING, never
 * victims): a refusal asks every log writer to hand over its current
 * segment if it holds CLEAN_MIN_GAIN reclaimable bytes (workers check
 * clean_handover_gen every loop round; the cleaner does it for its own log
 * when nothing else is left), so that a pool whose deleted data all sits in
 * segments being written still becomes writable.
 *
 * The cleaner has its own log writer and thread; it allocates with
 * keep_free 0, using the reserve that ordinary writes leave untouched. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "clean.h"
#include "db.h"
#include "le.h"
#include "log.h"
#include "pool.h"
#include "recovery.h"
#include "server.h"
#include "shard.h"

/* The cleaner's whole state: one per server (server.cleaner), allocated by
 * clean_init; the clean thread gets it as its argument. */
struct cleaner {
    pthread_t thread;
    int running;
    _Atomic int stopping;
    log_writer log;             /* where live entries are copied to */
    pthread_mutex_t mutex;      /* held while a segment is cleaned (clean_hold) */
    _Atomic int state;          /* enum clean_state */
    _Atomic int refused;        /* a write was refused since the cleaner looked */
    _Atomic uint64_t handover_gen;
    _Atomic uint32_t want_free;  /* free segments a refused large write needs */
    _Atomic int low;             /* an allocation went below the low water mark */
    /* Only for sleeping: never held together with mutex or a shard lock
     * by the cleaner, so a worker may signal it with its shard locks held. */
    pthread_mutex_t wake_mutex;
    pthread_cond_t wake_cond;
};

void clean_init(void) {
    struct cleaner *cl = calloc(1, sizeof(*cl));
    pthread_mutex_init(&cl->mutex, NULL);
    pthread_mutex_init(&cl->wake_mutex, NULL);
    pthread_cond_init(&cl->wake_cond, NULL);
    atomic_store(&cl->state, CLEAN_IDLE);
    server.cleaner = cl;
}

void clean_free(void) {
    struct cleaner *cl = server.cleaner;   /* after clean_stop */
    if (!cl) return;
    pthread_mutex_destroy(&cl->mutex);
    pthread_mutex_destroy(&cl->wake_mutex);
    pthread_cond_destroy(&cl->wake_cond);
    free(cl);
    server.cleaner = NULL;
}

/* The least a reclaiming clean must win: 1/64 segment (64 KiB). */
#define CLEAN_MIN_GAIN ((int64_t)POOL_SEG_SIZE / 64)

typedef struct clean_job {
    struct cleaner *cl;
    uint32_t seg;
    int foreign;               /* a segment of replicated entries (OWNER_CONTROL) */
    uint64_t oldest_other;     /* smallest seq of any other non-free segment */
    int failed;
    uint64_t copied;
    int piece_unsynced;        /* in a batch's piece, no pool sync yet (clean_visit) */
} clean_job;

static uint64_t oldest_other_seq(uint32_t except) {
    uint64_t oldest = UINT64_MAX;
    for (uint32_t s = 0; s < pool_nsegs(server.pool); s++) {
        if (s == except) continue;
        struct seg_meta m = pool_seg_meta(server.pool, s);
        if (m.state != SEG_FREE && m.seq < oldest) oldest = m.seq;
    }
    return oldest;
}

/* Copy entry e (top-level or sub-entry) as a top-level entry; 0 if no room. */
static uint64_t copy_entry(struct cleaner *cl, const log_entry *e) {
    size_t len = log_entry_len(e->klen, e->vlen);
    uint64_t off = log_writer_reserve(&cl->log, len, 0);
    if (!off) return 0;
    log_entry_encode(log_writer_dst(&cl->log, off, len), e, 1);
    log_writer_wrote(&cl->log, off, len);
    return off;
}

/* Is e a re-sync end record that is its shard's latest (live, db.c)? */
static int live_resync_end(const log_entry *e, uint64_t ref) {
    if (e->type != LOG_FLUSHDB || !(e->flags & LOG_F_RESYNC) || e->shard >= server.nshards)
        return 0;
    shard *s = &server.shards[e->shard];
    shard_lock(s);
    int live = db_ref_is_live(s, ref, e);
    shard_unlock(s);
    return live;
}

/* Copy a record that is not indexed but must stay (a deletion, a batch's
 * commit). A kept record counts as live in its new segment, or a segment
 * of nothing but records would be picked again at once and copied forever. */
static void keep_record(clean_job *job, const log_entry *e) {
    uint64_t off = copy_entry(job->cl, e);
    if (off) pool_live_add(server.pool, pool_seg_of(server.pool, off),
                           (int64_t)log_entry_len(e->klen, e->vlen));
    else job->failed = 1;
}

/* The commit of a batch's pieces (db.c) stays while a segment older than
 * it exists: one may hold its pieces (the rule of deletion records). */
static void keep_commit(clean_job *job, const log_entry *e) {
    if (e->vlen != LOG_COMMIT_LEN) return;
    if (!job->foreign && job->oldest_other >= le_get_u64(e->val)) return;
    char desc[LOG_COMMIT_LEN];
    memcpy(desc, e->val, LOG_COMMIT_LEN);
    if (job->foreign) le_put_u64(desc, pool_seq_now(server.pool));
    log_entry copy = *e;
    copy.val = desc;
    keep_record(job, &copy);
}

static void clean_one(clean_job *job, uint64_t ref, const log_entry *e) {
    if (job->failed) return;
    if ((e->type == LOG_DEL || e->type == LOG_FLUSHDB) && !live_resync_end(e, ref)) {
        /* A kept deletion record counts as live in its new segment, or a
         * segment of nothing but records would be picked again at once and
         * copied forever. */
        if (job->foreign || job->oldest_other < e->aux) {
            log_entry copy = *e;
            if (job->foreign) copy.aux = pool_seq_now(server.pool);
            keep_record(job, &copy);
        }
        return;
    }
    if (e->type != LOG_SET && e->type != LOG_DBMAP && e->type != LOG_COLL_OP &&
        e->type != LOG_SNAPSHOT && e->type != LOG_FLUSHDB && e->type != LOG_FUNCS &&
        e->type != LOG_CHUNK) return;
    if (e->shard >= server.nshards) return;
    shard *s = &server.shards[e->shard];
    shard_lock(s);
    if (db_ref_is_live(s, ref, e)) {
        /* a piece's effect is live once its commit is applied, which may
         * not be durable yet: it must be before the copy can be */
        if (job->piece_unsynced) {
            pool_sync_all(server.pool);
            job->piece_unsynced = 0;
        }
        uint64_t off = copy_entry(job->cl, e);
        if (off) {
            db_relocate(s, ref, off, e);
            job->copied += log_entry_len(e->klen, e->vlen);
        } else {
            job->failed = 1;
        }
    }
    shard_unlock(s);
}

static void clean_visit(void *arg, uint64_t off, const log_entry *e) {
    clean_job *job = arg;
    if (e->type != LOG_GROUP) {
        clean_one(job, off, e);
        return;
    }
    if (log_is_piece_commit(e)) {
        keep_commit(job, e);
        return;
    }
    job->piece_unsynced = log_is_piece(e);
    size_t pos = 0, sub_off;
    log_entry sub;
    while (log_group_next(e, &pos, &sub, &sub_off)) clean_one(job, off + sub_off, &sub);
}

int clean_segment(uint32_t seg) {
    struct cleaner *cl = server.cleaner;
    pthread_mutex_lock(&cl->mutex);
    clean_job job = {.cl = cl, .seg = seg, .oldest_other = oldest_other_seq(seg),
                     .foreign = pool_seg_meta(server.pool, seg).owner == OWNER_CONTROL};
    seg_scan_report rep = {0};
    pool_advise_sequential(server.pool, seg, 1, 1); /* read it whole, ahead */
    seg_scan(seg, clean_visit, &job, &rep);
    pool_advise_sequential(server.pool, seg, 1, 0);
    /* The copies must be durable before the only other copy disappears. */
    log_writer_sync(&cl->log);
    /* So must every entry that made the others dead: an overwrite, a
     * deletion or a collection snapshot that a worker appended and applied,
     * but whose group commit has not completed yet. Freeing first, a power
     * loss could take both the old entry and its successor, i.e. an
     * acknowledged value (found by the power-loss test). Each was written to
     * the file before it was applied, so one device flush of the whole pool
     * covers them all; on pmem they were persisted as written. */
    pool_sync_all(server.pool);
    if (!job.failed) {
        pool_seg_free(server.pool, seg);
        atomic_fetch_add(&server.stat.clean_segments, 1);
        atomic_fetch_add(&server.stat.clean_bytes_copied, (long long)job.copied);
    }
    pthread_mutex_unlock(&cl->mutex);
    return job.failed ? -1 : 0;
}

/* Without server.cleaner (a unit test's verify_log) there is no cleaner
 * to hold. */
void clean_hold(void) {
    if (server.cleaner) pthread_mutex_lock(&server.cleaner->mutex);
}
void clean_release(void) {
    if (server.cleaner) pthread_mutex_unlock(&server.cleaner->mutex);
}

/* What a pass over the segment table found. */
typedef struct clean_scan {
    int64_t victim;        /* committed segment with the fewest live bytes, or -1 */
    int64_t victim_live;
    int64_t reclaimable;   /* sum of POOL_SEG_SIZE - live over committed segments
                            * with at least CLEAN_MIN_GAIN of it */
} clean_scan;

static void scan_segments(clean_scan *sc) {
    sc->victim = -1;
    sc->victim_live = INT64_MAX;
    sc->reclaimable = 0;
    for (uint32_t s = 0; s < pool_nsegs(server.pool); s++) {
        if (pool_seg_meta(server.pool, s).state != SEG_COMMITTED) continue;
        if (db_seg_in_flight(s)) continue; /* a write's pieces, not applied yet */
        int64_t live = pool_live_get(server.pool, s);
        if ((int64_t)POOL_SEG_SIZE - live >= CLEAN_MIN_GAIN)
            sc->reclaimable += (int64_t)POOL_SEG_SIZE - live;
        if (live < sc->victim_live) {
            sc->victim_live = live;
            sc->victim = s;
        }
    }
}

/* Room left in the clean log's current segment: copies go there first. */
static int64_t clean_log_room(const struct cleaner *cl) {
    return cl->log.seg < 0 ? 0 : (int64_t)POOL_SEG_SIZE - cl->log.pos;
}

/* The segment to clean now, or -1 (cleaner thread only: it reads the clean
 * log). Segments the cleaner is writing are USING, so never picked.
 * reclaim: writes are being refused (file comment). */
static int64_t pick_victim(struct cleaner *cl, int reclaim) {
    clean_scan sc;
    scan_segments(&sc);
    int64_t limit = (int64_t)POOL_SEG_SIZE * server.cfg.clean_threshold / 100;
    if (reclaim && sc.reclaimable + clean_log_room(cl) >= (int64_t)POOL_SEG_SIZE)
        limit = (int64_t)POOL_SEG_SIZE - CLEAN_MIN_GAIN + 1;
    return sc.victim_live < limit ? sc.victim : -1;
}

int64_t clean_reclaimable_bytes(void) {
    clean_scan sc;
    scan_segments(&sc);
    return sc.reclaimable;
}

/* Free segments the cleaner tries to keep: an eighth of the pool, and never
 * fewer than the segments ordinary writes may not touch plus a margin of 5
 * (writes that still find space low wait for the cleaner, see
 * clean_wait_for_space). */
static uint32_t clean_target(void) {
    uint32_t t = pool_nsegs(server.pool) / 8;
    uint32_t floor = db_reserve_segments() + 5;
    return t > floor ? t : floor;
}

/* ---- state, wake-ups and hand-overs ---- */

static void clean_wake(struct cleaner *cl) {
    pthread_mutex_lock(&cl->wake_mutex);
    pthread_cond_signal(&cl->wake_cond);
    pthread_mutex_unlock(&cl->wake_mutex);
}

/* Sleep ms, or less if a refusal, an allocation below the low water mark
 * (clean_note_low) or clean_stop comes in meanwhile. */
static void clean_sleep(struct cleaner *cl, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&cl->wake_mutex);
    if (!atomic_load(&cl->refused) && !atomic_load(&cl->stopping) && !atomic_load(&cl->low))
        pthread_cond_timedwait(&cl->wake_cond, &cl->wake_mutex, &ts);
    pthread_mutex_unlock(&cl->wake_mutex);
}

/* pool_set_low_water's callback: an allocation left fewer free segments
 * than the cleaner wants (called with shard locks possibly held). */
static void clean_note_low(void) {
    struct cleaner *cl = server.cleaner;
    if (!cl) return;
    atomic_store(&cl->low, 1);
    clean_wake(cl);
}

/* Without server.cleaner (a tool such as rowan-check-pool, a unit test)
 * there is no cleaner to tell, and none is working. */
void clean_note_refusal(void) {
    struct cleaner *cl = server.cleaner;
    if (!cl) return;
    atomic_store(&cl->refused, 1);
    atomic_fetch_add(&cl->handover_gen, 1);
    clean_wake(cl);
}

void clean_want_free(uint32_t segs) {
    struct cleaner *cl = server.cleaner;
    if (!cl) return;
    uint32_t cur = atomic_load(&cl->want_free);
    while (segs > cur && !atomic_compare_exchange_weak(&cl->want_free, &cur, segs)) {
    }
    clean_note_refusal();
}

uint64_t clean_handover_gen(void) {
    return server.cleaner ? atomic_load(&server.cleaner->handover_gen) : 0;
}

int clean_should_take(const log_writer *w) {
    if (w->seg < 0) return 0;
    return (int64_t)POOL_SEG_SIZE - pool_live_get(w->p, (uint32_t)w->seg) >= CLEAN_MIN_GAIN;
}

int clean_state_now(void) {
    return server.cleaner ? atomic_load(&server.cleaner->state) : CLEAN_IDLE;
}

const char *clean_state_name(int state) {
    static const char *names[] = {"idle", "cleaning", "waiting", "reclaiming", "full"};
    return state >= 0 && state <= CLEAN_FULL ? names[state] : "?";
}

/* Reclaiming found no victim: hand over the clean log's own segment if it
 * holds enough dead bytes (entries relocated into it and deleted since).
 * Only dead bytes count here, not its unused tail: a segment just copied
 * has none, so cleaning it again could not loop. 1 if it was sealed. */
static int seal_own_dead_segment(struct cleaner *cl) {
    if (cl->log.seg < 0) return 0;
    int64_t dead = (int64_t)cl->log.pos - pool_live_get(server.pool, (uint32_t)cl->log.seg);
    if (dead < CLEAN_MIN_GAIN) return 0;
    pthread_mutex_lock(&cl->mutex);
    log_writer_seal(&cl->log);
    pthread_mutex_unlock(&cl->mutex);
    return 1;
}

/* Idle (enough free segments), the cleaner sleeps until an allocation goes
 * below its target (pool_set_low_water) or a write is refused; the timeout
 * only catches a change of its target (configuration). Below its target
 * with nothing worth cleaning, it looks again after 20 ms, doubling up to
 * 320 ms, and at every new segment allocated. */
#define CLEAN_IDLE_MS     1000
#define CLEAN_WAIT_MIN_MS 20
#define CLEAN_WAIT_MAX_MS 320

static void *clean_main(void *arg) {
    struct cleaner *cl = arg;
    pthread_setname_np(pthread_self(), "rowan-clean");
    int reclaim = 0, wait_ms = CLEAN_WAIT_MIN_MS;
    uint32_t water = 0;
    while (!atomic_load(&cl->stopping)) {
        atomic_store(&cl->low, 0);   /* before the free count is read below */
        if (atomic_exchange(&cl->refused, 0)) reclaim = 1;
        if (!db_space_low()) reclaim = 0;
        uint32_t target = clean_target(), want = atomic_load(&cl->want_free);
        uint32_t level = want > target ? want : target;
        if (level != water) {   /* set before the count: no allocation is missed */
            pool_set_low_water(server.pool, level, clean_note_low);
            water = level;
        }
        if (!reclaim && pool_free_count(server.pool) >= level) {
            atomic_store(&cl->want_free, 0);
            atomic_store(&cl->state, CLEAN_IDLE);
            wait_ms = CLEAN_WAIT_MIN_MS;
            clean_sleep(cl, CLEAN_IDLE_MS);
            continue;
        }
        int64_t victim = pick_victim(cl, reclaim);
        if (victim < 0) {
            if (reclaim && seal_own_dead_segment(cl)) continue;
            atomic_store(&cl->want_free, 0);   /* nothing left to gain */
            atomic_store(&cl->state, reclaim ? CLEAN_FULL : CLEAN_WAITING);
            /* Segments get sparser only as writes go on, and every new
             * segment they take wakes us (the low water mark): back off. */
            clean_sleep(cl, wait_ms);
            if (wait_ms < CLEAN_WAIT_MAX_MS) wait_ms *= 2;
            continue;
        }
        wait_ms = CLEAN_WAIT_MIN_MS;
        atomic_store(&cl->state, reclaim ? CLEAN_RECLAIMING : CLEAN_CLEANING);
        if (clean_segment((uint32_t)victim) != 0) clean_sleep(cl, 20);
    }
    return NULL;
}

/* Waits while the cleaner is copying (it has a victim); the state is the
 * cleaner's own, so no other thread reads its log writer. */
void clean_wait_for_space(int timeout_ms) {
    for (int waited = 0; waited < timeout_ms && db_space_low(); waited++) {
        int st = clean_state_now();
        if (st != CLEAN_CLEANING && st != CLEAN_RECLAIMING) break;
        usleep(1000);
    }
}

void clean_start(void) {
    struct cleaner *cl = server.cleaner;
    log_writer_init(&cl->log, server.pool, OWNER_CLEAN, 0);
    cl->log.on_sealed = log_writer_commit_sealed;
    rowan_thread_create(&cl->thread, NULL, clean_main, cl);
    cl->running = 1;
}

void clean_stop(void) {
    struct cleaner *cl = server.cleaner;
    if (!cl->running) return; /* a shutdown during loading: never started */
    cl->running = 0;
    atomic_store(&cl->stopping, 1);
    clean_wake(cl);
    pthread_join(cl->thread, NULL);
    pool_set_low_water(server.pool, 0, NULL);
    log_writer_sync(&cl->log);
}
