/* db.c -- the keyspace: lookups, writes, batches, flush, swap, expiry.
 *
 * A string key lives in exactly one place: the newest log entry that set it.
 * The shard's index maps hash(physical db, key) to that entry's pool offset;
 * keys are compared by reading the entry. Keys with an expiry are also in the
 * shard's volatile index (same reference), which active expiry walks.
 *
 * A write (DESIGN.md §4), with the key's shard lock held by the caller:
 *   1. reserve log space in the worker's t-log (refuse with DB_OOM if none,
 *      before anything changed),
 *   2. allocate the shard's next version,
 *   3. encode the entry (with its CRC) in place in the log,
 *   4. apply it to the index and the live-byte counts,
 *   5. record (shard, version) as a dependency of the reply.
 * The entry becomes durable at the worker's next sync; the reply is held
 * until then. A read records the version of what it observed: the entry's
 * version for a found key, and the shard's last version for a missing one
 * (the key may be missing because of a deletion not yet durable).
 *
 * Live bytes: every indexed entry counts log_entry_len() bytes as live in its
 * segment; padding, group headers and deletion records count as dead (the
 * cleaner decides separately whether a deletion record must be kept, see
 * clean.c). Overwrite and delete subtract the old entry's bytes.
 *
 * Logical vs physical db: SWAPDB swaps a per-shard map instead of moving
 * keys, so entries and the index carry the physical db number.
 *
 * Large strings: a value whose entry would not fit one segment is written as
 * chunks and a final entry (write_chunked) and held as an OBJ_STRING robj; a
 * batch too large for one group entry writes its largest entries as chunk
 * runs before the group, which carries their final entries (db_batch_end);
 * see bigval.c for the design. A batch of too many entries for one group
 * is written as pieces and a commit ("Batches larger than one group"). */
#include <signal.h>
#include <sys/random.h>
#include <stdlib.h>
#include <string.h>
#include "bigval.h"
#include "clean.h"
#include "cluster.h"
#include "db.h"
#include "evict.h"
#include "db_shard.h"
#include "hash.h"
#include "le.h"
#include "log.h"
#include "member.h"
#include "object.h"
#include "pool.h"
#include "server.h"
#include "shard.h"
#include "worker.h"
#include "strutil.h"

#define OOM_TEXT "OOM command not allowed when the storage pool is full"

const char *db_too_big_error =
    "ERR value too large: this entry must fit one 4 MiB log segment";
const char *db_key_too_big_error =
    "ERR key too large: a key longer than 1 MiB must fit one 4 MiB log segment with its value";
static const char *no_room_error =
    OOM_TEXT ": the value needs more log space than the pool has free";

/* Why the last pool-full refusal happened, for INFO. */
/* This file's state, one per server (server.h). */
#define INFLIGHT_MAX 1024
struct db_state {
    _Atomic int last_refusal;
    /* per worker: 1 + the first t-log segment seq a write in progress may
     * use, 0 when none (db_seg_in_flight) */
    _Atomic uint64_t inflight[INFLIGHT_MAX];
};

void db_state_new(void) {
    struct db_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->last_refusal = DB_REFUSED_NONE;
    server.db_st = st;
}

void db_state_free(void) {
    free(server.db_st);
    server.db_st = NULL;
}

#define last_refusal (server.db_st->last_refusal)

const char *db_refusal_name(int why) {
    static const char *names[] = {"none", "too_big", "reclaiming", "live_data", "no_room",
                                  "key_too_big"};
    return why >= 0 && why <= DB_REFUSED_KEY_TOO_BIG ? names[why] : "?";
}

int db_last_refusal(void) { return atomic_load(&last_refusal); }

/* The -OOM text says why, from what the cleaner last found (clean.h): a
 * pool with reclaimable space (or not yet looked at since the last refusal
 * woke the cleaner) is worth retrying; one full of live data is not. */
const char *db_error_text(const db_ctx *x) {
    switch (x->refused) {
    case DB_REFUSED_TOO_BIG:
        return db_too_big_error;
    case DB_REFUSED_KEY_TOO_BIG:
        return db_key_too_big_error;
    case DB_REFUSED_LIVE_DATA:
        return OOM_TEXT ": live data fills it; delete keys or use a larger pool-size";
    case DB_REFUSED_NO_ROOM:
        return no_room_error;
    default:
        return OOM_TEXT ": the cleaner is reclaiming space, retry";
    }
}

/* Refuse a write whose entry of len bytes cannot get log space. A full pool
 * wakes the cleaner (it may reclaim above clean-threshold now). */
static int refuse(db_ctx *x, size_t len) {
    if (len > LOG_MAX_ENTRY) {
        x->refused = DB_REFUSED_TOO_BIG;
        return DB_OOM;
    }
    x->refused = clean_state_now() == CLEAN_FULL ? DB_REFUSED_LIVE_DATA : DB_REFUSED_RECLAIMING;
    atomic_store(&last_refusal, x->refused);
    atomic_fetch_add(&server.stat.oom_refused, 1);
    clean_note_refusal();
    return DB_OOM;
}

/* Segments kept free for deletions and the cleaner: a full pool must still
 * accept DEL (to make room) and the cleaner must always find a segment to
 * copy into. Ordinary writes leave DB_RESERVE_WRITE segments untouched. */
#define DB_RESERVE_CLEAN 1
#define DB_RESERVE_DEL   2
static uint32_t reserve_for(int nworkers) { return (uint32_t)(DB_RESERVE_DEL + 1 + nworkers); }
static uint32_t db_reserve_write(void) { return reserve_for(server.nworkers); }
uint32_t db_reserve_segments(void) { return db_reserve_write(); }
/* The header segment, the reserve and a t-log head for each worker: with
 * less, some worker is refused even its first segment and every write it
 * takes fails. (A full head then waits for the cleaner, as in any full
 * pool.) */
uint64_t db_min_pool_size(int nworkers) {
    return (1ull + reserve_for(nworkers) + (uint64_t)nworkers) * POOL_SEG_SIZE;
}
/* One segment of margin: a write may need a fresh segment for its entry. */
int db_space_low(void) { return pool_free_count(server.pool) <= db_reserve_write() + 1; }

/* Set while maybe_compact writes a snapshot (see there). */
static __thread int applying_own_snapshot;

/* Segments a write leaves free: deletions may use the reserve down to
 * DB_RESERVE_DEL, and so may a compaction snapshot, which turns at least
 * its own size of history dead (so that a collection holding a large
 * element can always be compacted, else its live history could fill the
 * pool with nothing left to clean). */
static uint32_t keep_free_for(uint8_t type) {
    if (type == LOG_DEL || type == LOG_FLUSHDB) return DB_RESERVE_DEL;
    return applying_own_snapshot ? DB_RESERVE_DEL + 1 : db_reserve_write();
}

/* Room for a large value: its segments beyond what its writes leave free,
 * and a margin. */
static uint64_t big_need(size_t klen, uint64_t vlen) {
    return (uint64_t)bigval_segments(klen, vlen) + keep_free_for(LOG_CHUNK) + 1;
}

static int big_fits(size_t klen, uint64_t vlen) {
    return pool_free_count(server.pool) >= big_need(klen, vlen);
}

/* A large write that needs `need` free segments was refused: counted and
 * reported like any pool-full refusal (INFO); the cleaner is asked for
 * that much room, for the next try. */
static void no_room(uint64_t need) {
    atomic_store(&last_refusal, DB_REFUSED_NO_ROOM);
    atomic_fetch_add(&server.stat.oom_refused, 1);
    clean_want_free(need > UINT32_MAX ? UINT32_MAX : (uint32_t)need);
}

const char *db_check_string(const db_ctx *x, size_t klen, uint64_t vlen) {
    (void)x;
    if (log_entry_len(klen, 0) + vlen <= LOG_MAX_ENTRY) return NULL;
    if (klen > BIGVAL_MAX_KEY) return db_key_too_big_error;
    if (vlen > BIGVAL_MAX_LEN) return db_too_big_error;
    if (big_fits(klen, vlen)) return NULL;
    no_room(big_need(klen, vlen));
    return no_room_error;
}

struct shard;
static void batch_drop_clones(db_ctx *x);
static void batch_drop_bigv(db_ctx *x);
static int write_obj_entry(db_ctx *x, shard *s, log_entry *e, int type, const db_val *cur,
                           int exists);

/* ---------------- context ---------------- */

void db_ctx_init(db_ctx *x, struct worker *w, int wid) {
    memset(x, 0, sizeof(*x));
    x->w = w;
    x->wid = wid;
    rbuf_init(&x->batch);
}

void db_ctx_free(db_ctx *x) {
    batch_drop_clones(x);
    batch_drop_bigv(x);
    free(x->bigv);
    free(x->clones);
    free(x->deps);
    free(x->bidx);
    free(x->bmap_at);
    free(x->flush_at);
    rbuf_free(&x->batch);
    memset(x, 0, sizeof(*x));
}

void db_ctx_reset(db_ctx *x) { x->ndeps = 0; }

int db_dep_broken(const db_dep *d) {
    return d->kind == DEP_SHARD && atomic_load(&server.shards[d->id].serve_epoch) != d->epoch;
}

int db_dep_durable(const db_dep *d) {
    if (d->kind == DEP_SHARD) return shard_is_durable(&server.shards[d->id], d->ver);
    return atomic_load(&server.workers[d->id]->landed_gen) >= d->ver;
}

/* Record a dependency of the reply (keeps the max per target: a shard's
 * watermark and a worker's landed batches only move forward). */
static void dep_push(db_ctx *x, uint8_t kind, uint16_t id, uint64_t ver) {
    if (ver == 0) return;
    for (int i = 0; i < x->ndeps; i++) {
        if (x->deps[i].id == id && x->deps[i].kind == kind) {
            if (x->deps[i].ver < ver) x->deps[i].ver = ver;
            return;
        }
    }
    db_dep d = {id, kind, 0, ver};
    if (kind == DEP_SHARD) d.epoch = atomic_load(&server.shards[id].serve_epoch);
    if (db_dep_durable(&d)) return;
    if (x->ndeps == x->capdeps) {
        x->capdeps = x->capdeps ? x->capdeps * 2 : 4;
        x->deps = realloc(x->deps, (size_t)x->capdeps * sizeof(db_dep));
    }
    x->deps[x->ndeps++] = d;
}

/* A read observed version ver of shard s. */
static void dep_add(db_ctx *x, const shard *s, uint64_t ver) { dep_push(x, DEP_SHARD, s->id, ver); }

/* A write of version ver of shard s went into this worker's accumulating
 * batch. Standalone, the batch landing is enough: one fdatasync of the pool
 * file (or pmem's persist-as-written) covers every earlier append of every
 * worker, so when this entry is durable so is everything its effect was
 * computed from. With replicas it is not: each worker has its own link to
 * each backup, so another worker's older version of the same shard may
 * still be in flight when this batch is acked. The reply must then also
 * wait for the shard's watermark: otherwise a failover could keep this
 * effect but lose one it was computed from (a list push on top of a lost
 * push, a SUNIONSTORE of a lost SADD), and the reply would describe a
 * state that never survives. */
static void dep_add_write(db_ctx *x, const shard *s, uint64_t ver) {
    worker *w = x->w;
    dep_push(x, DEP_BATCH, (uint16_t)w->id, w->slots[w->acc].gen);
    if (cluster_replicas() > 1) dep_add(x, s, ver);
}

/* ---------------- index glue ---------------- */

typedef struct keyref {
    unsigned pdb;
    const char *key;
    size_t klen;
} keyref;

static const void *ref_ptr(uint64_t ref) { return pool_ptr(server.pool, ref); }

/* What a reference in the index stands for: a string's log entry, or a
 * collection's DRAM object. */
typedef struct refinfo {
    unsigned pdb;
    const char *key;
    size_t klen;
    int64_t expire_ms;
} refinfo;

static void ref_info(uint64_t ref, refinfo *ri) {
    if (ref_is_obj(ref)) {
        const robj *o = ref_obj(ref);
        *ri = (refinfo){o->db, o->key, o->klen, o->expire_ms};
        return;
    }
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    *ri = (refinfo){e.db, e.key, e.klen, e.expire_ms};
}

static int match_key(void *ctx, uint64_t ref) {
    const keyref *k = ctx;
    refinfo ri;
    ref_info(ref, &ri);
    return ri.pdb == k->pdb && ri.klen == k->klen && memcmp(ri.key, k->key, k->klen) == 0;
}

/* A lookup's match: keeps the string entry it decoded to compare the key,
 * so the reader does not decode it a second time. */
typedef struct keyhit {
    keyref k;
    log_entry e;
    int have;          /* e is the matching entry's */
} keyhit;

static int match_key_keep(void *ctx, uint64_t ref) {
    keyhit *m = ctx;
    if (ref_is_obj(ref)) return match_key(&m->k, ref);
    log_entry_decode(ref_ptr(ref), &m->e);
    m->have = m->e.db == m->k.pdb && m->e.klen == m->k.klen &&
              memcmp(m->e.key, m->k.key, m->k.klen) == 0;
    return m->have;
}

/* The index asks for a key's hash when it grows. */
static uint64_t rehash_ref(void *ctx, uint64_t ref) {
    refinfo ri;
    ref_info(ref, &ri);
    return hash_key(ri.pdb, ri.key, ri.klen);
}

static int free_obj_ref(void *ctx, uint64_t ref) {
    if (ref_is_obj(ref)) obj_free(ref_obj(ref));
    return 0;
}

void db_free_all(void) {
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        if (!s->idx) continue;   /* a start that failed before the indexes */
        index_foreach(s->idx, free_obj_ref, NULL);
        index_free(s->idx);
        index_free(s->vidx);
        s->idx = s->vidx = NULL;
    }
    bigval_free_all();
}

void db_init_indexes(void) {
    for (int i = 0; i < server.nshards; i++) {
        server.shards[i].idx = index_new(rehash_ref, NULL);
        server.shards[i].vidx = index_new(rehash_ref, NULL);
    }
    bigval_init(server.nshards);
}

static void live_add(uint64_t ref, int64_t delta) {
    pool_live_add(server.pool, pool_seg_of(server.pool, ref), delta);
}

static int64_t ref_bytes(uint64_t ref) {
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    return (int64_t)log_entry_len(e.klen, e.vlen);
}

/* ---------------- applying effects (shared by writes and recovery) ------- */

/* A collection's history entries die with it. */
static void retire_history(robj *o) {
    for (uint32_t i = 0; i < o->nhist; i++) live_add(o->hist[i], -ref_bytes(o->hist[i]));
    obj_hist_clear(o);
}

/* Drop whatever the index held for key k (already removed from the main
 * index): volatile index, counts, live bytes; a collection is freed. */
static void unindex(shard *s, const keyref *k, uint64_t h, uint64_t old) {
    refinfo ri;
    ref_info(old, &ri);
    if (ri.expire_ms) {
        index_remove_ref(s->vidx, h, old);
        s->dbexpires[k->pdb]--;
    }
    if (ref_is_obj(old)) {
        retire_history(ref_obj(old));
        obj_free(ref_obj(old));
    } else {
        live_add(old, -ref_bytes(old));
    }
}

void db_apply_set(shard *s, uint64_t ref) {
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    keyref k = {e.db, e.key, e.klen};
    uint64_t h = hash_key(e.db, e.key, e.klen);
    uint64_t old = index_put(s->idx, h, ref, match_key, &k);
    if (old) unindex(s, &k, h, old);
    else s->dbkeys[e.db]++;
    if (e.expire_ms) {
        index_put(s->vidx, h, ref, match_key, &k);
        s->dbexpires[e.db]++;
    }
    live_add(ref, (int64_t)log_entry_len(e.klen, e.vlen));
}

/* Returns 1 if the key was indexed. */
int db_apply_del(shard *s, unsigned pdb, const char *key, size_t klen) {
    keyref k = {pdb, key, klen};
    uint64_t h = hash_key(pdb, key, klen);
    uint64_t old = index_del(s->idx, h, match_key, &k);
    if (!old) return 0;
    unindex(s, &k, h, old);
    s->dbkeys[pdb]--;
    return 1;
}

typedef struct flush_ctx {
    unsigned pdb;      /* 0xffff: every db */
    uint64_t below;    /* only keys whose version is below this */
    uint64_t *refs;
    size_t n, cap;
} flush_ctx;

/* The version of the entry (or collection) a reference stands for. */
static uint64_t ref_version(uint64_t ref) {
    if (ref_is_obj(ref)) return ref_obj(ref)->ver;
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    return e.ver;
}

static int collect_db_ref(void *ctx, uint64_t ref) {
    flush_ctx *f = ctx;
    refinfo ri;
    ref_info(ref, &ri);
    if (f->pdb != 0xffff && ri.pdb != f->pdb) return 0;
    if (ref_version(ref) >= f->below) return 0;
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 256;
        f->refs = realloc(f->refs, f->cap * sizeof(uint64_t));
    }
    f->refs[f->n++] = ref;
    return 0;
}

/* Remove every key of physical db pdb (0xffff: all) whose version is below
 * ver. Replayed in version order (recovery, digest) every key present is
 * older than the flush, so this is "remove everything"; the condition
 * matters for a re-sync's end record, whose entries carry the same version
 * as the record and may be applied before or after it. */
void db_apply_flush(shard *s, unsigned pdb, uint64_t ver) {
    flush_ctx f = {pdb, ver, NULL, 0, 0};
    index_foreach(s->idx, collect_db_ref, &f);
    for (size_t i = 0; i < f.n; i++) {
        refinfo ri;
        ref_info(f.refs[i], &ri);
        db_apply_del(s, ri.pdb, ri.key, ri.klen);
    }
    free(f.refs);
}

static void reset_dbmap(shard *s) {
    if (s->dbmap_ref) live_add(s->dbmap_ref, -ref_bytes(s->dbmap_ref));
    s->dbmap_ref = 0;
    s->dbmap_ver = 0;
    for (int d = 0; d < SHARD_MAX_DBS; d++) s->dbmap[d] = (uint16_t)d;
}

/* ---- FUNCTION libraries (LOG_FUNCS) ----
 * Server metadata, not keys: each shard keeps the offset of its latest
 * LOG_FUNCS entry live (as the db map's), and every entry applied, written
 * here, replayed by recovery or received from a primary, is handed to the
 * edge's hook, which keeps the newest library set it has seen (the payload
 * carries its own ordering stamp; the core does not read it). */
static db_funcs_fn funcs_hook;

void db_funcs_hook(db_funcs_fn fn) { funcs_hook = fn; }

static void reset_funcs(shard *s) {
    if (s->funcs_ref) live_add(s->funcs_ref, -ref_bytes(s->funcs_ref));
    s->funcs_ref = 0;
    s->funcs_ver = 0;
}

static void db_apply_funcs(shard *s, uint64_t ref, const log_entry *e) {
    if (e->ver < s->funcs_ver) return;   /* an older one replayed late */
    if (s->funcs_ref) live_add(s->funcs_ref, -ref_bytes(s->funcs_ref));
    s->funcs_ref = ref;
    s->funcs_ver = e->ver;
    live_add(ref, (int64_t)log_entry_len(e->klen, e->vlen));
    if (funcs_hook) funcs_hook(s->id, e->val, e->vlen);
}

/* The end of a re-sync at version ver (a LOG_FLUSHDB of every db flagged
 * LOG_F_RESYNC, see log.h): the re-sync's entries, all at ver, are the
 * shard's whole contents, so everything older goes, the db map included.
 * The record stays live (it is the shard's latest re-sync) until a newer
 * re-sync ends; recovery relies on finding it. */
static void db_apply_resync_end(shard *s, uint64_t ref, const log_entry *e) {
    db_apply_flush(s, 0xffff, e->ver);
    if (s->dbmap_ver < e->ver) reset_dbmap(s);
    if (s->funcs_ver < e->ver) reset_funcs(s);
    if (e->ver < s->resync_ver) return;   /* an older re-sync replayed late */
    if (s->resync_ref) live_add(s->resync_ref, -ref_bytes(s->resync_ref));
    s->resync_ref = ref;
    s->resync_ver = e->ver;
    live_add(ref, (int64_t)log_entry_len(e->klen, e->vlen));
}

void db_apply_dbmap(shard *s, uint64_t ref, uint64_t ver) {
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    size_t n = e.vlen / 2;
    if (n > SHARD_MAX_DBS) n = SHARD_MAX_DBS;
    for (size_t i = 0; i < n; i++) {
        uint16_t m;
        memcpy(&m, e.val + 2 * i, 2);
        s->dbmap[i] = m;
    }
    if (s->dbmap_ref) live_add(s->dbmap_ref, -ref_bytes(s->dbmap_ref));
    s->dbmap_ref = ref;
    s->dbmap_ver = ver;
    live_add(ref, (int64_t)log_entry_len(e.klen, e.vlen));
}

/* Keep the volatile index and counts in step with a collection's expiry. */
static void set_obj_expire(shard *s, robj *o, uint64_t h, int64_t expire_ms) {
    if (!o->expire_ms == !expire_ms) {
        o->expire_ms = expire_ms;
        return;
    }
    keyref k = {o->db, o->key, o->klen};
    if (expire_ms) {
        o->expire_ms = expire_ms;
        index_put(s->vidx, h, obj_ref(o), match_key, &k);
        s->dbexpires[o->db]++;
    } else {
        index_remove_ref(s->vidx, h, obj_ref(o));
        o->expire_ms = 0;
        s->dbexpires[o->db]--;
    }
}

/* The collection the key holds if it is of `type`; otherwise a new empty one
 * replaces whatever the key held. NULL if the type is unknown. */
static robj *obj_for_apply(shard *s, const log_entry *e, int type, uint64_t h) {
    keyref k = {e->db, e->key, e->klen};
    uint64_t cur = index_get(s->idx, h, match_key, &k);
    if (cur && ref_is_obj(cur) && ref_obj(cur)->type == type) return ref_obj(cur);
    robj *o = obj_new(type, e->db, e->key, e->klen);
    if (!o) return NULL;
    uint64_t old = index_put(s->idx, h, obj_ref(o), match_key, &k);
    if (old) unindex(s, &k, h, old);
    else s->dbkeys[e->db]++;
    return o;
}

/* applying_own_snapshot is set while maybe_compact appends a snapshot it
 * made from the live object: applying it must only replace the history,
 * not rebuild the object from its own serialization (an O(n) reload
 * measured as most of HSET's time on a large hash). */

/* Add a large value's chunks to its object's history and count them live. */
static uint64_t hist_add_run(robj *o, const bigval_run *run) {
    uint64_t sum = 0;
    for (uint32_t i = 0; run && i < run->n; i++) {
        int64_t b = ref_bytes(run->refs[i]);
        obj_hist_add(o, run->refs[i], (uint64_t)b, 1);
        live_add(run->refs[i], b);
        sum += (uint64_t)b;
    }
    return sum;
}

/* A collection effect (LOG_COLL_OP) or snapshot (LOG_SNAPSHOT) at ref.
 * -1 when it does not fit the key's value (see db_apply_entry). With run,
 * e is a chunked one (bigval.h) seen with its joined payload, and the run's
 * chunks join the history before ref. */
static int db_apply_obj(shard *s, uint64_t ref, const log_entry *e, const bigval_run *run) {
    int type = e->vlen ? (uint8_t)e->val[0] : 0;
    uint64_t h = hash_key(e->db, e->key, e->klen);
    robj *o = obj_for_apply(s, e, type, h);
    int bad;
    if (!o) {
        bad = 1;
    } else if (e->type == LOG_SNAPSHOT) {
        retire_history(o);
        bad = applying_own_snapshot ? 0 : obj_load_snapshot(o, e->val, e->vlen) != 0;
    } else {
        bad = obj_apply_payload(o, e->val, e->vlen) != 0;
    }
    if (bad && !o) return -1;
    set_obj_expire(s, o, h, e->expire_ms);
    uint64_t own = log_entry_len(e->klen, run ? BIGVAL_DESC_LEN : e->vlen);
    uint64_t pieces = hist_add_run(o, run);
    obj_hist_add(o, ref, own, 0);
    if (e->type == LOG_SNAPSHOT) o->snap_bytes = own + pieces;
    live_add(ref, (int64_t)own);
    o->ver = e->ver;
    return bad ? -1 : 0;
}

/* What the writer applying the final entry of its own run still has of the
 * value (set around that one apply, see write_chunked and apply_group):
 * the bytes the chunks were cut from, and whether they are an argument
 * buffer (bigval_buf_new) a string can be stored as. Replay, backups and
 * re-syncs have none and join the chunks. */
typedef struct writer_src {
    const char *bytes;
    uint64_t len;
    int adoptable;
} writer_src;
static __thread writer_src writer_has;

/* Is val/vlen, whole, an argument buffer the write may store as is: one
 * the caller offers (x->own) or a large value the batch holds (x->bigv)? */
static int adoptable(const db_ctx *x, const char *val, size_t vlen) {
    for (int i = 0; i < x->nown; i++)
        if (x->own[i] == val) return bigval_buf_len(val) == vlen;
    for (int i = 0; i < x->nbigv; i++)
        if (x->bigv[i] == val) return bigval_buf_len(val) == vlen;
    return 0;
}

/* The final entry of a large value (bigval.h): join its chunks and apply
 * the whole as a string or a collection entry. -1 when its chunks are not
 * all there (damage) or the joined entry does not apply. The writer's own
 * apply (writer_has) takes the bytes it has instead of joining a copy:
 * a string stored as its argument buffer, a collection entry applied from
 * the payload it built. */
static int db_apply_big(shard *s, uint64_t ref, const log_entry *e) {
    bigval_run run;
    writer_src src = writer_has;
    writer_has = (writer_src){0};
    if (!src.bytes || e->vlen != BIGVAL_DESC_LEN ||
        le_get_u64((const uint8_t *)e->val) != src.len || (e->type == LOG_SET && !src.adoptable))
        src.bytes = NULL;
    if (bigval_join(s, e, src.bytes == NULL, &run) != 0) return -1;
    if (src.bytes && e->type != LOG_SET) run.buf = (char *)src.bytes;
    int r = 0;
    if (e->type == LOG_SET) {
        robj *o = src.bytes ? bigval_adopt(e, src.bytes, &run) : bigval_string(e, ref, &run);
        keyref k = {e->db, e->key, e->klen};
        uint64_t h = hash_key(e->db, e->key, e->klen);
        uint64_t old = index_put(s->idx, h, obj_ref(o), match_key, &k);
        if (old) unindex(s, &k, h, old);
        else s->dbkeys[e->db]++;
        if (o->expire_ms) {
            index_put(s->vidx, h, obj_ref(o), match_key, &k);
            s->dbexpires[e->db]++;
        }
        hist_add_run(o, &run);
        obj_hist_add(o, ref, log_entry_len(e->klen, e->vlen), 0);
        live_add(ref, (int64_t)log_entry_len(e->klen, e->vlen));
    } else {
        log_entry j = *e;
        j.flags &= (uint8_t)~LOG_F_CHUNKED;
        j.val = run.buf;
        j.vlen = (uint32_t)run.len;
        r = db_apply_obj(s, ref, &j, &run);
    }
    bigval_run_free(&run);
    return r;
}

int db_apply_entry(shard *s, uint64_t ref, const log_entry *e) {
    bigval_note(s, ref, e);
    switch (e->type) {
    case LOG_SET:
        if (e->flags & LOG_F_CHUNKED) return db_apply_big(s, ref, e);
        db_apply_set(s, ref);
        break;
    case LOG_COLL_OP:
    case LOG_SNAPSHOT:
        if (e->flags & LOG_F_CHUNKED) return db_apply_big(s, ref, e);
        return db_apply_obj(s, ref, e, NULL);
    case LOG_DEL: db_apply_del(s, e->db, e->key, e->klen); break;
    case LOG_FLUSHDB:
        if (e->flags & LOG_F_RESYNC) db_apply_resync_end(s, ref, e);
        else db_apply_flush(s, e->db, e->ver);
        break;
    case LOG_DBMAP: db_apply_dbmap(s, ref, e->ver); break;
    case LOG_FUNCS: db_apply_funcs(s, ref, e); break;
    default: break;
    }
    return 0;
}

void db_report_refused(const shard *s, const log_entry *e) {
    serverLog(LL_WARNING, "Malformed collection entry (type %d, shard %u, version %llu) ignored",
              e->vlen ? (uint8_t)e->val[0] : 0, s->id, (unsigned long long)e->ver);
    atomic_fetch_add(&server.stat.recovery_corrupt_entries, 1);
}

/* ---------------- appending entries ---------------- */

/* Log one top-level entry for shard s (lock held) in the worker's t-log,
 * with the shard's next version, as a dependency of the reply. Returns its
 * offset, or 0 when there is no log space (nothing logged). Not applied. */
static uint64_t log_one(db_ctx *x, shard *s, log_entry *e) {
    worker *w = x->w;
    size_t len = log_entry_len(e->klen, e->vlen);
    uint64_t off = log_writer_reserve(&w->tlog, len, keep_free_for(e->type));
    if (!off) return 0;
    e->shard = s->id;
    e->ver = shard_next_version(s, x->wid, x->w->acc);
    log_entry_encode(log_writer_dst(&w->tlog, off, len), e, 1);
    log_writer_wrote(&w->tlog, off, len);
    worker_touch_shard(w, s->id);
    dep_add_write(x, s, e->ver);
    return off;
}

/* Apply an entry log_one logged at off. */
static void apply_logged(shard *s, uint64_t off, const log_entry *e) {
    if (db_apply_entry(s, off, e) != 0) db_report_refused(s, e);
    /* access clocks (evict.c): a write is an access, a delete frees the slot */
    if (e->type == LOG_DEL)
        evict_forget(s->id, hash_key(e->db, e->key, e->klen));
    else if (e->type == LOG_SET || e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT)
        evict_touch(s->id, hash_key(e->db, e->key, e->klen), 1);
}

/* Append one top-level entry for shard s (lock held) and apply it. */
static int append_one(db_ctx *x, shard *s, log_entry *e) {
    uint64_t off = log_one(x, s, e);
    if (!off) return refuse(x, log_entry_len(e->klen, e->vlen));
    apply_logged(s, off, e);
    return DB_OK;
}

/* Lookups in a large batch (batch_find): a hash table of each key's
 * latest sub-entry (its offset in x->batch, plus one), built at the first
 * lookup in a batch of BIDX_MIN sub-entries and kept up to date by
 * batch_add. Reading the whole batch per lookup made a DEL of n keys
 * quadratic (minutes for 100k keys). */
#define BIDX_MIN 64

static int same_key(const log_entry *a, const log_entry *b) {
    return a->db == b->db && a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0;
}

/* The slot of e's key: its entry, or the empty slot where it goes. */
static size_t bidx_slot(const db_ctx *x, const log_entry *e) {
    size_t mask = x->bidx_cap - 1, i = hash_key(e->db, e->key, e->klen) & mask;
    for (; x->bidx[i]; i = (i + 1) & mask) {
        log_entry o;
        log_entry_decode(x->batch.buf + x->bidx[i] - 1, &o);
        if (same_key(&o, e)) break;
    }
    return i;
}

static void bidx_build(db_ctx *x, size_t cap);
static int batch_next(const db_ctx *x, size_t *pos, log_entry *e, size_t *at);
static void batch_decode(const db_ctx *x, size_t at, log_entry *e);
static void resolve_held(const db_ctx *x, log_entry *e);

/* Sub-entries that name a key's value (the table holds only those). */
static int keyed_type(uint8_t type) {
    return type == LOG_SET || type == LOG_DEL || type == LOG_COLL_OP || type == LOG_SNAPSHOT;
}

static void bidx_put(db_ctx *x, size_t at) {
    if ((x->bidx_n + 1) * 2 > x->bidx_cap) bidx_build(x, x->bidx_cap * 2);
    log_entry e;
    batch_decode(x, at, &e);
    size_t i = bidx_slot(x, &e);
    if (!x->bidx[i]) x->bidx_n++;
    x->bidx[i] = at + 1;
}

/* (Re)build the table with cap slots (a power of two) over the batch. */
static void bidx_build(db_ctx *x, size_t cap) {
    while (cap < 2 * (size_t)x->nbatch + 2) cap *= 2;
    free(x->bidx);
    x->bidx = calloc(cap, sizeof(uint64_t));
    if (!x->bidx) abort();
    x->bidx_cap = cap;
    x->bidx_n = 0;
    x->bidx_on = 1;
    size_t pos = 0, at;
    log_entry e;
    while (batch_next(x, &pos, &e, &at))
        if (keyed_type(e.type)) bidx_put(x, at);
}

/* Large values of a batch: a value too large for one entry (it will be a
 * chunk run, bigval.c) is not copied into the batch buffer. The batch
 * takes a reference to it if it is an argument buffer (x->own, or a value
 * the batch already holds), else copies it into a buffer of its own
 * (bigval_buf_new); the sub-entry, flagged LOG_F_HELD (never logged: such
 * a batch is always written by batch_end_big, which logs its final entry
 * in its place), holds its index in x->bigv. batch_decode restores it.
 * So a large SET in MULTI or MSET costs no copy, and the string is stored
 * as that buffer (apply_group). */
#define LOG_F_HELD 0x80

static int batch_hold_big(db_ctx *x, const char *val, size_t vlen) {
    const char *b;
    if (adoptable(x, val, vlen)) {
        b = val;
        bigval_buf_retain(b);
    } else {
        char *c = bigval_buf_new(vlen, 0);
        memcpy(c, val, vlen);
        b = c;
    }
    if (x->nbigv == x->capbigv) {
        x->capbigv = x->capbigv ? x->capbigv * 2 : 4;
        x->bigv = realloc(x->bigv, sizeof(char *) * (size_t)x->capbigv);
        if (!x->bigv) abort();
    }
    x->bigv[x->nbigv] = b;
    return x->nbigv++;
}

static void batch_drop_bigv(db_ctx *x) {
    for (int i = 0; i < x->nbigv; i++) bigval_buf_release(x->bigv[i]);
    x->nbigv = 0;
}

/* A decoded sub-entry of the batch buffer, with its value. */
static void resolve_held(const db_ctx *x, log_entry *e) {
    if (!(e->flags & LOG_F_HELD)) return;
    uint64_t vi;
    memcpy(&vi, e->val, sizeof(vi));
    e->val = x->bigv[vi];
    e->vlen = (uint32_t)bigval_buf_len(e->val);
    e->flags &= (uint8_t)~LOG_F_HELD;
}

/* Decode the sub-entry at `at` of the batch buffer, with its value. */
static void batch_decode(const db_ctx *x, size_t at, log_entry *e) {
    log_entry_decode(x->batch.buf + at, e);
    resolve_held(x, e);
}

/* Queue a sub-entry into the current batch; its version is assigned at
 * db_batch_end. If the value lives inside the batch buffer itself (a value
 * read back from the batch), it is copied first because appending may move
 * the buffer. */
static void batch_add(db_ctx *x, shard *s, log_entry *e) {
    char *tmp = NULL;
    const char *b0 = x->batch.buf, *b1 = x->batch.buf + x->batch.len;
    uint64_t vi;
    if (bigval_needed(e->klen, e->vlen) &&
        (e->type == LOG_SET || e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT)) {
        vi = (uint64_t)batch_hold_big(x, e->val, e->vlen);
        e->val = (const char *)&vi;
        e->vlen = sizeof(vi);
        e->flags |= LOG_F_HELD;
    } else if (e->vlen && e->val >= b0 && e->val < b1) {
        tmp = malloc(e->vlen);
        memcpy(tmp, e->val, e->vlen);
        e->val = tmp;
    }
    e->shard = s->id;
    e->ver = 0;
    size_t len = log_entry_len(e->klen, e->vlen);
    size_t start = (x->batch.len + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1);
    rbuf_reserve(&x->batch, start - x->batch.len + len);
    memset(x->batch.buf + x->batch.len, 0, start - x->batch.len);
    log_entry_encode(x->batch.buf + start, e, 0);
    x->batch.len = start + len;
    x->nbatch++;
    if (e->type == LOG_FLUSHDB) {
        if (x->batch_flushes == x->capflush) {
            x->capflush = x->capflush ? 2 * x->capflush : 64;
            x->flush_at = realloc(x->flush_at, sizeof(size_t) * (size_t)x->capflush);
            if (!x->flush_at) abort();
        }
        x->flush_at[x->batch_flushes++] = start;
    }
    if (e->type == LOG_DBMAP) {
        if (!x->bmap_at) x->bmap_at = calloc((size_t)server.nshards, sizeof(size_t));
        if (!x->bmap_at) abort();
        x->bmap_at[s->id] = start + 1;
        x->batch_dbmaps++;
    }
    else if (x->bidx_on && keyed_type(e->type)) bidx_put(x, start);
    free(tmp);
}

/* ---- large values (bigval.c) ----
 * A chunk run: the chunks of one entry too large for its place (one
 * segment alone, or the group entry of a batch), logged consecutively for
 * its shard. */
typedef struct chunk_run {
    uint64_t *refs;        /* the chunks' offsets */
    uint32_t n;
    uint64_t first;        /* the first chunk's version */
    writer_src src;        /* a batch's: what its final entry's apply may take */
} chunk_run;

/* Chunks written by the current write (DEBUG CHUNK-CRASH counts them). */
static __thread uint32_t chunks_this_write;

/* In flight: see "Batches larger than one group" below. */

static void inflight_begin(db_ctx *x) {
    log_writer *l = &x->w->tlog;
    uint64_t seq = l->seg >= 0 ? pool_seg_meta(server.pool, (uint32_t)l->seg).seq
                               : pool_seq_now(server.pool);
    if (x->wid >= 0 && x->wid < INFLIGHT_MAX)
        atomic_store(&server.db_st->inflight[x->wid], seq + 1);
}

static void inflight_end(db_ctx *x) {
    if (x->wid >= 0 && x->wid < INFLIGHT_MAX) atomic_store(&server.db_st->inflight[x->wid], 0);
}

int db_seg_in_flight(uint32_t seg) {
    struct seg_meta m = pool_seg_meta(server.pool, seg);
    if (m.owner != OWNER_WORKER || m.owner_id >= INFLIGHT_MAX) return 0;
    uint64_t from = atomic_load(&server.db_st->inflight[m.owner_id]);
    return from && m.seq + 1 >= from;
}

/* Chunks and pieces written by the current write: DEBUG CHUNK-CRASH n
 * kills the process after the n-th, before the entry that commits them. */
static void piece_written(void) {
    if (atomic_load(&server.debug_chunk_crash) == (int)++chunks_this_write) {
        serverLog(LL_WARNING, "DEBUG CHUNK-CRASH: killing this process after %u chunks, "
                  "before the entry that commits them", chunks_this_write);
        raise(SIGKILL);
    }
}


/* Why a large entry (key klen, payload vlen) cannot be written now: 0, or
 * the refusal (DB_REFUSED_*). */
static int big_refusal(const db_ctx *x, size_t klen, uint64_t vlen) {
    const char *why = db_check_string(x, klen, vlen);
    if (!why) return DB_REFUSED_NONE;
    if (why == db_key_too_big_error) return DB_REFUSED_KEY_TOO_BIG;
    return why == db_too_big_error ? DB_REFUSED_TOO_BIG : DB_REFUSED_NO_ROOM;
}

/* The one writer of chunks, for a single-key write and a batch alike: log
 * the chunks of e for shard s, each with the shard's next version, so they
 * are versions [run->first, run->first + run->n) with nothing of the shard
 * between; the caller logs the final entry (bigval_final) with the next
 * version. Nothing is applied: apply_run notes the chunks as pending just
 * before their final entry is applied, so the pending table sees a run and
 * then its final, as recovery and backups do. DB_OK, or DB_OOM when log
 * space ran out half-way: the chunks logged are never applied (recovery
 * forgets them), and run is freed. */
static int write_run(db_ctx *x, shard *s, const log_entry *e, chunk_run *run) {
    uint32_t n = bigval_nchunks(e->klen, e->vlen);
    run->refs = malloc(sizeof(uint64_t) * n);
    if (!run->refs) abort();
    run->n = 0;
    for (uint32_t i = 0; i < n; i++) {
        log_entry c;
        bigval_chunk(e, i, &c);
        uint64_t off = log_one(x, s, &c);
        if (!off) {
            free(run->refs);
            run->refs = NULL;
            return refuse(x, log_entry_len(c.klen, c.vlen));
        }
        if (i == 0) run->first = c.ver;
        run->refs[run->n++] = off;
        piece_written();
    }
    return DB_OK;
}

/* Note the run's chunks as pending (bigval_note), then free it. */
static void apply_run(shard *s, chunk_run *run) {
    for (uint32_t i = 0; i < run->n; i++) {
        log_entry c;
        log_entry_decode(ref_ptr(run->refs[i]), &c);
        db_apply_entry(s, run->refs[i], &c);
    }
    free(run->refs);
    run->refs = NULL;
}

/* An entry too large for one segment, written alone: its chunks, then the
 * final entry that commits it (bigval.c). Refused before anything is
 * written when the pool cannot hold it all; if space still runs out
 * half-way, the chunks written are dead log and the key keeps its value. */
static int write_chunked(db_ctx *x, shard *s, const log_entry *e) {
    int why = big_refusal(x, e->klen, e->vlen);
    if (why != DB_REFUSED_NONE) {
        x->refused = why;
        return DB_OOM;
    }
    chunks_this_write = 0;
    chunk_run run;
    inflight_begin(x);
    if (write_run(x, s, e, &run) != DB_OK) {
        inflight_end(x);
        return DB_OOM;
    }
    char desc[BIGVAL_DESC_LEN];
    log_entry f;
    bigval_final(e, run.n, run.first, desc, &f);
    uint64_t off = log_one(x, s, &f);
    if (!off) {
        inflight_end(x);
        free(run.refs);
        return refuse(x, log_entry_len(f.klen, f.vlen));
    }
    apply_run(s, &run);
    writer_has = (writer_src){e->val, e->vlen, adoptable(x, e->val, e->vlen)};
    apply_logged(s, off, &f);
    writer_has = (writer_src){0};
    inflight_end(x);
    return DB_OK;
}

static int write_entry(db_ctx *x, shard *s, log_entry *e) {
    if (x->batching) {
        batch_add(x, s, e);
        return DB_OK;
    }
    if (log_entry_len(e->klen, e->vlen) > LOG_MAX_ENTRY &&
        (e->type == LOG_SET || e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT))
        return write_chunked(x, s, e);
    return append_one(x, s, e);
}

/* Batches nest (EXEC runs MSET, RENAME... which open their own): only the
 * outermost begin starts a batch and only the outermost end logs it, so a
 * whole transaction is one group entry. An inner end reports success; if
 * the outer one then fails, nothing of any of them was applied. */
void db_batch_begin(db_ctx *x) {
    if (x->batching++ > 0) return;
    x->batch_now = mstime();
    x->batch.len = 0;
    x->nbatch = 0;
    x->batch_flushes = 0;
    if (x->batch_dbmaps) memset(x->bmap_at, 0, sizeof(size_t) * (size_t)server.nshards);
    x->batch_dbmaps = 0;
    x->bidx_on = 0;
}

/* Walk the batch's sub-entries: pos is a byte offset into x->batch. */
static int batch_next(const db_ctx *x, size_t *pos, log_entry *e, size_t *at) {
    size_t p = (*pos + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1);
    if (p + LOG_HDR_SIZE > x->batch.len) return 0;
    log_entry_decode(x->batch.buf + p, e);
    *at = p;
    *pos = p + log_entry_len(e->klen, e->vlen);
    resolve_held(x, e);
    return 1;
}

void db_batch_abort(db_ctx *x) {
    x->batching = 0;
    batch_drop_clones(x);
    batch_drop_bigv(x);
    x->nbatch = 0;
}

/* The next sub-entry's version of its shard, written into its header at
 * buf + at. */
static void batch_version(db_ctx *x, char *buf, size_t at, log_entry *e) {
    shard *s = &server.shards[e->shard];
    e->ver = shard_next_version(s, x->wid, x->w->acc);
    uint64_t verdb = (e->ver & LOG_VER_MASK) | ((uint64_t)e->db << 48);
    memcpy(buf + at + 8, &verdb, 8);
    worker_touch_shard(x->w, s->id);
    dep_add_write(x, s, e->ver);
}

static size_t sub_span(size_t len) { return (len + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1); }

/* ---- batches larger than one group ----
 * A group entry must fit one segment. A batch whose group would not is
 * written, under the locks it holds for all its keys, as:
 *   chunk runs  for its largest entries (bigval.c), as many as it takes for
 *               the rest to fit one group; when that is not enough (many
 *               keys), every entry of PIECE_RUN_MIN bytes or more;
 *   pieces      when the rest still does not fit one group: groups flagged
 *               LOG_F_PIECE, each filled up to one segment with sub-entries
 *               in batch order (an entry's run just before the piece that
 *               holds its final entry), all carrying one random id;
 *   the commit  a small group flagged LOG_F_PIECE with that id and no
 *               sub-entries (log.h), after every piece.
 * Sub-entries take their versions in batch order as in one group, and are
 * applied (and indexed where they lie, in their piece) only once the commit
 * is written. Pieces are inert without their commit: recovery and DEBUG
 * RELOAD (recovery.c) apply a piece's sub-entries only when its commit is
 * in the pool, a backup's digest (digest.c) holds them until the commit
 * arrives, so a crash (or a primary lost) before the commit is durable
 * leaves nothing of the batch: all or nothing, as with one group. A piece
 * travels to backups like any group (the peers of its shards); the commit
 * goes to every peer. The cleaner (clean.c) keeps a commit while segments
 * older than it exist (the rule of deletion records: its pieces may be in
 * them), and makes the pool durable before it copies a sub-entry out of a
 * piece (the commit that made it live may not be durable yet).
 * Chosen over one group written as a chunk run: the index points at
 * sub-entries in the pool, which a run split at arbitrary bytes and joined
 * in DRAM would not allow without copying every value of the batch.
 * Memory: the pieces are built one at a time in a buffer of at most one
 * segment; the batch buffer (the batch's effects, as for any batch) is
 * all the rest.
 *
 * While a batch (or a single large value) is being written, the segments of
 * the worker's t-log it may use are "in flight" (db_seg_in_flight): a piece
 * or chunk in a segment sealed and committed before its commit or final
 * entry is written is not live yet, and the cleaner must not free it. */
#define PIECE_ROOM (LOG_MAX_ENTRY - LOG_HDR_SIZE)
#define PIECE_RUN_MIN (64 * 1024)

/* Log a top-level entry that takes no version (a group, a piece, a
 * commit) in the worker's t-log; its offset, or 0 when there is no room. */
static uint64_t log_unversioned(db_ctx *x, const log_entry *e, uint32_t keep) {
    worker *w = x->w;
    size_t len = log_entry_len(e->klen, e->vlen);
    uint64_t off = log_writer_reserve(&w->tlog, len, keep);
    if (!off) return 0;
    log_entry_encode(log_writer_dst(&w->tlog, off, len), e, 1);
    log_writer_wrote(&w->tlog, off, len);
    return off;
}

/* A sub-entry of a batch that could go in a chunk run: its index, length
 * and what the group saves when it does. */
typedef struct sub_size { size_t at, len, save; } sub_size;

static int by_len_desc(const void *a, const void *b) {
    const sub_size *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* A batch whose group entry would not fit one segment: its largest
 * strings and collection entries go in chunk runs (bigval.c), the group
 * carrying their final entries, until it fits; when it cannot, the batch
 * goes in pieces (*pieces set; above). Sets big[i] for the i-th sub-entry
 * so chosen and returns how many, or -1 (refusal in x) when a sub-entry
 * cannot fit a piece even so (a key over BIGVAL_MAX_KEY with a value too
 * large for one entry), or the pool has no room for it all. */
static int plan_runs(db_ctx *x, uint8_t *big, int *pieces, uint32_t keep) {
    size_t glen = LOG_HDR_SIZE, pos = 0, at;
    int n = 0, nbig = 0;
    log_entry e;
    sub_size *c = malloc(sizeof(sub_size) * (size_t)x->nbatch);
    if (!c) abort();
    while (batch_next(x, &pos, &e, &at)) {
        size_t len = log_entry_len(e.klen, e.vlen), fin = log_entry_len(e.klen, BIGVAL_DESC_LEN);
        int can = (e.type == LOG_SET || e.type == LOG_COLL_OP || e.type == LOG_SNAPSHOT) &&
                  sub_span(len) > sub_span(fin) && e.klen <= BIGVAL_MAX_KEY;
        glen += sub_span(len);
        big[n] = 0;
        c[n] = can ? (sub_size){(size_t)n, len, sub_span(len) - sub_span(fin)}
                   : (sub_size){(size_t)n, 0, 0};
        n++;
    }
    qsort(c, (size_t)n, sizeof(sub_size), by_len_desc);
    for (int i = 0; i < n && glen > LOG_MAX_ENTRY && c[i].len; i++) {
        if (c[i].len < PIECE_RUN_MIN) break;
        big[c[i].at] = 1;
        nbig++;
        glen -= c[i].save;
    }
    free(c);
    *pieces = glen > LOG_MAX_ENTRY;
    /* what is left must fit a piece, entry by entry; count the pieces */
    uint64_t bytes = 0, npieces = 1, cur = 0;
    pos = 0;
    n = 0;
    while (batch_next(x, &pos, &e, &at)) {
        size_t s = sub_span(log_entry_len(e.klen, big[n] ? BIGVAL_DESC_LEN : e.vlen));
        if (big[n++]) bytes += bigval_run_bytes(e.klen, e.vlen);
        if (s > PIECE_ROOM) {
            x->refused = e.klen > BIGVAL_MAX_KEY ? DB_REFUSED_KEY_TOO_BIG : DB_REFUSED_TOO_BIG;
            return -1;
        }
        if (cur + s > PIECE_ROOM) {
            npieces++;
            cur = 0;
        }
        cur += s;
    }
    /* The runs and the group follow each other in one log, so they share
     * segments: one more for the segment being written when they start.
     * Pieces: each may leave the rest of a segment unused, and so may
     * chunks (a quarter segment at most, for each segment they fill). */
    uint64_t segs = !*pieces ? (bytes + glen + POOL_SEG_SIZE - 1) / POOL_SEG_SIZE + 1
                             : (bytes + glen) * 4 / 3 / POOL_SEG_SIZE + npieces + 2;
    if (pool_free_count(server.pool) < segs + keep + 1) {
        x->refused = DB_REFUSED_NO_ROOM;
        no_room(segs + keep + 1);
        return -1;
    }
    return nbig;
}

/* The pieces of a batch being written (NULL when it fits one group). */
typedef struct piece_log {
    int64_t id;
    uint64_t *offs;        /* the pieces written */
    uint32_t n, cap;
    uint64_t nsub;         /* sub-entries in the payload being built */
    uint32_t keep;
} piece_log;

/* Write the payload built in out as the next piece; empties out. */
static int flush_piece(db_ctx *x, rbuf *out, piece_log *pl) {
    log_entry p = {.type = LOG_GROUP, .flags = LOG_F_PIECE, .shard = LOG_SHARD_NONE,
                   .expire_ms = pl->id, .aux = pl->nsub, .val = out->buf,
                   .vlen = (uint32_t)out->len};
    uint64_t off = log_unversioned(x, &p, pl->keep);
    if (!off) return refuse(x, log_entry_len(0, out->len));
    if (pl->n == pl->cap) {
        pl->cap = pl->cap ? pl->cap * 2 : 16;
        pl->offs = realloc(pl->offs, sizeof(uint64_t) * pl->cap);
        if (!pl->offs) abort();
    }
    pl->offs[pl->n++] = off;
    out->len = 0;
    pl->nsub = 0;
    piece_written();
    return DB_OK;
}

/* The group of a batch with chunk runs or pieces: in batch order, each
 * sub-entry takes its shard's next version, a chosen one (big) after its
 * run's chunks are logged, so that each run is immediately followed, in its
 * shard's versions, by its final entry (bigval.c). The group's payload,
 * with the final entries in place of the chosen ones, goes to out, or with
 * pl, is written as pieces whenever the next sub-entry would not fit (the
 * last one is left in out); the runs to runs[i]. DB_OK or DB_OOM (log space
 * ran out: what was logged is dead, no run is left allocated). */
static int write_batch_runs(db_ctx *x, const uint8_t *big, rbuf *out, chunk_run *runs,
                            piece_log *pl) {
    size_t pos = 0, at;
    int i = 0;
    log_entry e;
    chunks_this_write = 0;
    while (batch_next(x, &pos, &e, &at)) {
        size_t need = log_entry_len(e.klen, big[i] ? BIGVAL_DESC_LEN : e.vlen);
        if (pl && pl->nsub && sub_span(out->len) + need > PIECE_ROOM &&
            flush_piece(x, out, pl) != DB_OK)
            goto fail;
        if (big[i] && write_run(x, &server.shards[e.shard], &e, &runs[i]) != DB_OK) goto fail;
        if (big[i]) runs[i].src = (writer_src){e.val, e.vlen, adoptable(x, e.val, e.vlen)};
        size_t start = sub_span(out->len);
        rbuf_reserve(out, start - out->len + need);
        memset(out->buf + out->len, 0, start - out->len);
        if (big[i]) {
            char desc[BIGVAL_DESC_LEN];
            log_entry f;
            bigval_final(&e, runs[i].n, runs[i].first, desc, &f);
            log_entry_encode(out->buf + start, &f, 0);
        } else {
            memcpy(out->buf + start, x->batch.buf + at, need);
        }
        out->len = start + need;
        batch_version(x, out->buf, start, &e);
        if (pl) pl->nsub++;
        i++;
    }
    return DB_OK;
fail:
    for (int j = 0; j < i; j++) free(runs[j].refs);
    return DB_OOM;
}

/* Apply the sub-entries of the group (or piece) g logged at off; *i counts
 * the batch's sub-entries, whose runs (big) are noted pending first. */
static void apply_group(uint64_t off, const log_entry *g, const uint8_t *big, chunk_run *runs,
                        int *i) {
    size_t gpos = 0, at;
    log_entry e;
    while (log_group_next(g, &gpos, &e, &at)) {
        uint64_t ref = off + at;
        shard *s = &server.shards[e.shard];
        log_entry_decode(pool_ptr(server.pool, ref), &e);
        if (big && big[*i]) {
            apply_run(s, &runs[*i]);
            writer_has = runs[*i].src;
        }
        if (db_apply_entry(s, ref, &e) != 0) db_report_refused(s, &e);
        writer_has = (writer_src){0};
        (*i)++;
    }
}

/* A random id for a batch's pieces: they must not be taken for another
 * batch's, from this pool or (in a backup's log) another node's. */
static int64_t piece_id(void) {
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = (uint64_t)monotonic_us() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)&id;
    return (int64_t)(id | 1);
}

/* Write and apply a batch too large for one group (above). */
static int batch_end_big(db_ctx *x, uint32_t keep) {
    uint8_t *big = malloc((size_t)x->nbatch);
    int pieces;
    if (!big) abort();
    if (plan_runs(x, big, &pieces, keep) < 0) {
        free(big);
        return DB_OOM;
    }
    chunk_run *runs = calloc((size_t)x->nbatch, sizeof(chunk_run));
    piece_log pl = {.id = piece_id(), .keep = keep};
    rbuf payload;
    rbuf_init(&payload);
    inflight_begin(x);
    int r = write_batch_runs(x, big, &payload, runs, pieces ? &pl : NULL);
    uint64_t off = 0;
    if (r == DB_OK && pieces && flush_piece(x, &payload, &pl) != DB_OK) {
        for (int i = 0; i < x->nbatch; i++) free(runs[i].refs);
        r = DB_OOM;
    }
    if (r == DB_OK) {
        char desc[LOG_COMMIT_LEN] = {0};
        log_entry g = {.type = LOG_GROUP, .shard = LOG_SHARD_NONE, .aux = (uint64_t)x->nbatch,
                       .val = payload.buf, .vlen = (uint32_t)payload.len};
        if (pieces) {
            le_put_u64(desc, pool_seq_now(server.pool));
            le_put_u32(desc + 8, pl.n);
            g = (log_entry){.type = LOG_GROUP, .flags = LOG_F_PIECE, .shard = LOG_SHARD_NONE,
                            .expire_ms = pl.id, .val = desc, .vlen = LOG_COMMIT_LEN};
        }
        off = log_unversioned(x, &g, keep);
        if (!off) {
            for (int i = 0; i < x->nbatch; i++) free(runs[i].refs);
            r = refuse(x, log_entry_len(g.klen, g.vlen));
        } else {
            int i = 0;
            if (!pieces) apply_group(off, &g, big, runs, &i);
            for (uint32_t p = 0; p < pl.n; p++) {
                log_entry pe;
                log_entry_decode(pool_ptr(server.pool, pl.offs[p]), &pe);
                apply_group(pl.offs[p], &pe, big, runs, &i);
            }
        }
    }
    inflight_end(x);
    free(big);
    free(runs);
    free(pl.offs);
    rbuf_free(&payload);
    return r;
}

static int batch_end(db_ctx *x);

int db_batch_end(db_ctx *x) {
    int outer = x->batching <= 1;
    int r = batch_end(x);
    if (outer) batch_drop_bigv(x);
    return r;
}

static int batch_end(db_ctx *x) {
    if (x->batching > 1) {
        x->batching--;
        return DB_OK;
    }
    x->batching = 0;
    batch_drop_clones(x);
    if (x->nbatch == 0) return DB_OK;
    size_t len = LOG_HDR_SIZE + x->batch.len;
    uint32_t keep = DB_RESERVE_DEL;
    size_t pos = 0, at;
    log_entry e;
    while (batch_next(x, &pos, &e, &at))
        if (keep_free_for(e.type) > keep) keep = keep_free_for(e.type);
    /* Too large for one group entry: chunk runs and pieces (above), logged
     * under the locks the caller holds for every key, committed by the last
     * entry: all or nothing. */
    if (len > LOG_MAX_ENTRY || x->nbigv) {
        int r = batch_end_big(x, keep);
        x->nbatch = 0;
        return r;
    }
    log_entry g = {.type = LOG_GROUP, .shard = LOG_SHARD_NONE, .aux = (uint64_t)x->nbatch,
                   .val = x->batch.buf, .vlen = (uint32_t)(len - LOG_HDR_SIZE)};
    worker *w = x->w;
    uint64_t off = log_writer_reserve(&w->tlog, len, keep);
    if (!off) {
        x->nbatch = 0;
        return refuse(x, len);
    }
    /* Versions are handed out now, in batch order, under the locks the
     * caller holds for every key in the batch. */
    pos = 0;
    while (batch_next(x, &pos, &e, &at)) batch_version(x, x->batch.buf, at, &e);
    log_entry_encode(log_writer_dst(&w->tlog, off, len), &g, 1);
    log_writer_wrote(&w->tlog, off, len);
    int i = 0;
    apply_group(off, &g, NULL, NULL, &i);
    x->nbatch = 0;
    return DB_OK;
}

/* The batch's private copy of the collection (pdb, key), or NULL. */
static robj *batch_clone(const db_ctx *x, unsigned pdb, const char *key, size_t klen) {
    for (int i = x->nclones - 1; i >= 0; i--) {
        robj *o = x->clones[i];
        if (o->db == pdb && o->klen == klen && memcmp(o->key, key, klen) == 0) return o;
    }
    return NULL;
}

/* What the open batch says key (pdb, key) is: -1 nothing (look at the
 * index), 0 deleted, 1 a string (*out), 2 a collection (*obj, the batch's
 * private copy). The newest sub-entry for the key decides. */
static size_t batch_flushed_at(const db_ctx *x, const shard *s, unsigned pdb);
static size_t batch_newest(db_ctx *x, unsigned pdb, const char *key, size_t klen);

static int batch_find(db_ctx *x, const shard *s, unsigned pdb, const char *key, size_t klen,
                      log_entry *out, robj **obj) {
    size_t pos = 0, at;
    log_entry e;
    int found = -1;
    if (x->nbatch >= BIDX_MIN) {
        size_t newest = batch_newest(x, pdb, key, klen);
        /* a FLUSHDB of its shard and db after its newest sub-entry: gone */
        size_t flushed = batch_flushed_at(x, s, pdb);
        if (!newest || newest < flushed) return flushed ? 0 : -1;
        batch_decode(x, newest - 1, &e);
        found = e.type == LOG_SET ? 1 : e.type == LOG_DEL ? 0 : 2;
        if (found == 1) *out = e;
        if (found == 2) *obj = batch_clone(x, pdb, key, klen);
        return found == 2 && !*obj ? -1 : found;
    }
    while (batch_next(x, &pos, &e, &at)) {
        if (e.type == LOG_FLUSHDB && (e.db == pdb || e.db == 0xffff)) found = 0;
        if (e.db != pdb || e.klen != klen || memcmp(e.key, key, klen) != 0) continue;
        if (e.type == LOG_SET) {
            *out = e;
            found = 1;
        } else if (e.type == LOG_DEL) {
            found = 0;
        } else if (e.type == LOG_COLL_OP || e.type == LOG_SNAPSHOT) {
            found = 2;
        }
    }
    if (found == 2) *obj = batch_clone(x, pdb, key, klen);
    return found == 2 && !*obj ? -1 : found;
}

/* Make the batch's private copy of key's collection of `type` current:
 * a copy of what the key holds now if it is such a collection (the real
 * object, or the batch's copy), else a new empty one. */
static robj *batch_clone_for(db_ctx *x, unsigned pdb, const char *key, size_t klen, int type,
                             const db_val *cur, int exists) {
    robj *c = obj_new(type, pdb, key, klen);
    if (!c) return NULL;
    if (exists && cur->type == type) {
        rbuf snap;
        rbuf_init(&snap);
        obj_encode_snapshot(cur->obj, &snap);
        obj_load_snapshot(c, snap.buf, snap.len);
        rbuf_free(&snap);
        c->expire_ms = cur->expire_ms;
        c->ver = cur->ver;
    }
    if (x->nclones == x->capclones) {
        x->capclones = x->capclones ? x->capclones * 2 : 4;
        x->clones = realloc(x->clones, sizeof(robj *) * (size_t)x->capclones);
    }
    x->clones[x->nclones++] = c;
    return c;
}

/* Copies made by the batch die with it: the real objects are changed by
 * applying the logged group (or not at all). Pointers to copies a command
 * obtained stay valid until then. */
static void batch_drop_clones(db_ctx *x) {
    for (int i = 0; i < x->nclones; i++) obj_free(x->clones[i]);
    x->nclones = 0;
}

/* ---------------- single-key operations ---------------- */

static void fill_val(db_val *v, const log_entry *e) {
    v->type = OBJ_STRING;
    v->ptr = e->val;
    v->len = e->vlen;
    v->expire_ms = e->expire_ms;
    v->ver = e->ver;
    v->obj = NULL;
}

/* db_val of whatever ref stands for. */
static void fill_ref(db_val *v, uint64_t ref) {
    if (!ref_is_obj(ref)) {
        log_entry e;
        log_entry_decode(ref_ptr(ref), &e);
        fill_val(v, &e);
        return;
    }
    robj *o = ref_obj(ref);
    if (o->type == OBJ_STRING) {   /* a large string (bigval.h) */
        *v = (db_val){.type = OBJ_STRING, .expire_ms = o->expire_ms, .ver = o->ver};
        v->ptr = bigval_bytes(o, &v->len);
        return;
    }
    *v = (db_val){.type = o->type, .expire_ms = o->expire_ms, .ver = o->ver, .obj = o};
}

/* Logical db -> physical db on shard s, as x sees it: a SWAPDB in x's open
 * batch (a DBMAP sub-entry, applied only when the batch is logged) counts
 * already, so the batch's later commands read and write the swapped
 * databases and a second SWAPDB composes with the first. x may be NULL. */
static unsigned phys_db(const db_ctx *x, const shard *s, int db) {
    if (x && x->batching && x->batch_dbmaps && x->bmap_at[s->id]) {
        log_entry e;
        uint16_t pdb;
        log_entry_decode(x->batch.buf + x->bmap_at[s->id] - 1, &e);
        memcpy(&pdb, e.val + 2 * (size_t)db, 2);
        return pdb;
    }
    return s->dbmap[db];
}

/* The key's shard: the dispatcher already computed it for the command's
 * first key (the CRC16 is the single biggest cost of routing a GET). */
static shard *key_shard(const db_ctx *x, const char *key, size_t klen) {
    if (key == x->hint_key && klen == x->hint_klen) return x->hint_shard;
    return shard_of_key(key, klen);
}

/* The time a key's expiry is judged at: inside a batch (a script, EXEC, a
 * multi-key command) the time the batch began, as Redis 7 freezes it for a
 * script or a transaction: a key does not expire halfway through, and every
 * command of it sees the same keys. TTLs and new expiries still use the
 * real time, as Redis's do (a key past its time reads PTTL 0). */
static int64_t expiry_now(const db_ctx *x) {
    return x->batching ? x->batch_now : mstime();
}

/* Find the key; lazily delete it when expired. count != 0 updates hit/miss. */
static int lookup(db_ctx *x, int db, const char *key, size_t klen, db_val *v, int count) {
    shard *s = key_shard(x, key, klen);
    unsigned pdb = phys_db(x, s, db);
    log_entry e = {0};
    if (x->batching) {
        robj *bo = NULL;
        int r = batch_find(x, s, pdb, key, klen, &e, &bo);
        if (r == 1 && !(e.expire_ms && e.expire_ms <= expiry_now(x))) {
            fill_val(v, &e);
            return 1;
        }
        if (r == 2) {
            *v = (db_val){.type = bo->type, .expire_ms = bo->expire_ms, .ver = bo->ver, .obj = bo};
            return 1;
        }
        if (r >= 0) return 0;
    }
    keyhit m = {.k = {pdb, key, klen}};
    uint64_t h = hash_key(pdb, key, klen);
    uint64_t ref = index_get(s->idx, h, match_key_keep, &m);
    if (ref && count) evict_touch(s->id, h, 0);   /* db_peek does not touch (OBJECT) */
    if (ref) {
        if (m.have) fill_val(v, &m.e);
        else fill_ref(v, ref);
        if (v->expire_ms && v->expire_ms <= expiry_now(x)) {
            log_entry d = {.type = LOG_DEL, .db = (uint16_t)pdb, .key = key,
                           .klen = (uint32_t)klen, .val = "", .aux = pool_seq_now(server.pool)};
            if (write_entry(x, s, &d) == DB_OK) {
                atomic_fetch_add(&server.stat.expiredkeys, 1);
                if (db_expired_hook) db_expired_hook(db, key, klen);
            }
            ref = 0;
        }
    }
    if (!ref) {
        dep_add(x, s, s->next_ver - 1);
        if (count) {
            x->w->round_misses++;
            if (db_miss_hook) db_miss_hook(db, key, klen);
        }
        return 0;
    }
    dep_add(x, s, v->ver);
    if (count) x->w->round_hits++;
    return 1;
}

int db_lookup(db_ctx *x, int db, const char *key, size_t klen, db_val *v) {
    return lookup(x, db, key, klen, v, 1);
}

int db_peek(db_ctx *x, int db, const char *key, size_t klen, db_val *v) {
    return lookup(x, db, key, klen, v, 0);
}

int db_set(db_ctx *x, int db, const char *key, size_t klen,
           const char *val, size_t vlen, int64_t expire_ms) {
    shard *s = key_shard(x, key, klen);
    if (vlen > BIGVAL_MAX_LEN) return refuse(x, (size_t)-1);
    log_entry e = {.type = LOG_SET, .db = phys_db(x, s, db), .key = key, .klen = (uint32_t)klen,
                   .val = val, .vlen = (uint32_t)vlen, .expire_ms = expire_ms};
    return write_entry(x, s, &e);
}

int db_del(db_ctx *x, int db, const char *key, size_t klen) {
    db_val v;
    if (!db_peek(x, db, key, klen, &v)) return 0;
    shard *s = key_shard(x, key, klen);
    log_entry e = {.type = LOG_DEL, .db = phys_db(x, s, db), .key = key, .klen = (uint32_t)klen,
                   .aux = pool_seq_now(server.pool)};
    int r = write_entry(x, s, &e);
    return r == DB_OK ? 1 : r;
}

int db_set_expire(db_ctx *x, int db, const char *key, size_t klen, int64_t expire_ms) {
    db_val v;
    if (!db_peek(x, db, key, klen, &v)) return 0;
    if (expire_ms && expire_ms <= mstime()) {
        int r = db_del(x, db, key, klen);
        if (r == 1) atomic_fetch_add(&server.stat.expiredkeys, 1);
        return r;
    }
    int r;
    if (v.type == OBJ_STRING) {
        r = db_set(x, db, key, klen, v.ptr, v.len, expire_ms);
    } else {
        /* A collection's expiry rides on an effect entry with no ops. */
        shard *s = key_shard(x, key, klen);
        char t = (char)v.type;
        log_entry e = {.type = LOG_COLL_OP, .db = (uint16_t)phys_db(x, s, db), .key = key,
                       .klen = (uint32_t)klen, .val = &t, .vlen = 1, .expire_ms = expire_ms};
        r = write_obj_entry(x, s, &e, v.type, &v, 1);
    }
    return r == DB_OK ? 1 : r;
}

/* Replace a long history by a snapshot (object.h). Best effort: a full pool
 * just leaves the history as it is. */
static void maybe_compact(db_ctx *x, shard *s, const char *key, size_t klen, unsigned pdb) {
    keyref k = {pdb, key, klen};
    uint64_t ref = index_get(s->idx, hash_key(pdb, key, klen), match_key, &k);
    if (!ref || !ref_is_obj(ref) || !obj_wants_snapshot(ref_obj(ref))) return;
    robj *o = ref_obj(ref);
    /* A snapshot larger than a segment is written in chunks (bigval.c) when
     * the pool has room for it. Short of room now, the cleaner is woken and
     * a later write tries again (compaction is what turns a large element's
     * old copies dead; giving up until the history doubled would let it
     * fill the pool). The last snapshot's size is the estimate, so the
     * encoding is not paid for nothing. */
    applying_own_snapshot = 1;   /* big_fits: the snapshot's reserve */
    int room = o->snap_bytes <= LOG_MAX_ENTRY || big_fits(klen, o->snap_bytes);
    applying_own_snapshot = 0;
    if (!room) {
        clean_note_refusal();
        return;
    }
    rbuf snap;
    rbuf_init(&snap);
    obj_encode_snapshot(o, &snap);
    log_entry e = {.type = LOG_SNAPSHOT, .db = (uint16_t)pdb, .key = key, .klen = (uint32_t)klen,
                   .val = snap.buf, .vlen = (uint32_t)snap.len, .expire_ms = o->expire_ms};
    int small = log_entry_len(e.klen, e.vlen) <= LOG_MAX_ENTRY;
    applying_own_snapshot = 1;
    if (!small && e.klen > BIGVAL_MAX_KEY) o->compact_failed_at = o->nhist;   /* never fits */
    else if (!small && !big_fits(e.klen, e.vlen)) clean_note_refusal();
    else if (write_entry(x, s, &e) != DB_OK) o->compact_failed_at = o->nhist;
    applying_own_snapshot = 0;
    rbuf_free(&snap);
}

/* Log a collection entry e (effects or snapshot) for key; inside a batch
 * also apply it to the batch's private copy, so later lookups in the batch
 * see it. cur/exists: what the key held before. */
static int write_obj_entry(db_ctx *x, shard *s, log_entry *e, int type, const db_val *cur,
                           int exists) {
    if (x->batching) {
        robj *c = batch_clone_for(x, e->db, e->key, e->klen, type, cur, exists);
        if (!c) return DB_OOM;
        if (e->type == LOG_SNAPSHOT) obj_load_snapshot(c, e->val, e->vlen);
        else obj_apply_payload(c, e->val, e->vlen);
        c->expire_ms = e->expire_ms;
    }
    return write_entry(x, s, e);
}

/* Log and apply the payload (type byte, then effects) of a collection
 * write on key. */
static int obj_write(db_ctx *x, int db, const char *key, size_t klen, int type,
                     const char *payload, size_t len) {
    shard *s = key_shard(x, key, klen);
    unsigned pdb = phys_db(x, s, db);
    db_val v;
    int exists = db_peek(x, db, key, klen, &v);
    int64_t expire = exists && v.type == type ? v.expire_ms : 0;
    log_entry e = {.type = LOG_COLL_OP, .db = (uint16_t)pdb, .key = key, .klen = (uint32_t)klen,
                   .val = payload, .vlen = (uint32_t)len, .expire_ms = expire};
    int r = write_obj_entry(x, s, &e, type, &v, exists);
    if (r == DB_OK && !x->batching) maybe_compact(x, s, key, klen, pdb);
    return r;
}

int db_obj_write(db_ctx *x, int db, const char *key, size_t klen, int type,
                 const char *ops, size_t opslen) {
    rbuf payload;
    rbuf_init(&payload);
    char t = (char)type;
    rbuf_append(&payload, &t, 1);
    rbuf_append(&payload, ops, opslen);
    int r = obj_write(x, db, key, klen, type, payload.buf, payload.len);
    rbuf_free(&payload);
    return r;
}

int db_obj_write_ops(db_ctx *x, int db, const char *key, size_t klen, int type, rbuf *ops) {
    rbuf_reserve(ops, 1);
    memmove(ops->buf + 1, ops->buf, ops->len);
    ops->buf[0] = (char)type;
    ops->len++;
    return obj_write(x, db, key, klen, type, ops->buf, ops->len);
}

int db_obj_write_ops_tail(db_ctx *x, int db, const char *key, size_t klen, int type, rbuf *ops,
                          const char *tail, size_t tlen) {
    char *p = adoptable(x, tail, tlen) ? bigval_buf_room(tail, 1 + ops->len) : NULL;
    if (!p) {
        rbuf_append(ops, tail, tlen);
        return db_obj_write_ops(x, db, key, klen, type, ops);
    }
    p[0] = (char)type;
    memcpy(p + 1, ops->buf, ops->len);
    return obj_write(x, db, key, klen, type, p, 1 + ops->len + tlen);
}

int db_set_copy(db_ctx *x, int db, const char *key, size_t klen, const robj *src,
                int64_t expire_ms) {
    shard *s = key_shard(x, key, klen);
    rbuf snap;
    rbuf_init(&snap);
    obj_encode_snapshot(src, &snap);
    log_entry e = {.type = LOG_SNAPSHOT, .db = (uint16_t)phys_db(x, s, db), .key = key,
                   .klen = (uint32_t)klen, .val = snap.buf, .vlen = (uint32_t)snap.len,
                   .expire_ms = expire_ms};
    db_val none = {0};
    int r = write_obj_entry(x, s, &e, src->type, &none, 0);
    rbuf_free(&snap);
    return r;
}

/* ---------------- whole keyspace ---------------- */

typedef struct scan_ctx {
    unsigned pdb;
    int64_t now;
    db_scan_fn fn;
    void *arg;
    db_ctx *x;             /* with an open batch to read through, else NULL */
} scan_ctx;

static int batch_open(const db_ctx *x);
static int batch_val(db_ctx *x, const log_entry *e, int64_t now, db_val *v);

static int scan_visit(void *ctx, uint64_t ref) {
    scan_ctx *sc = ctx;
    refinfo ri;
    ref_info(ref, &ri);
    if (ri.pdb != sc->pdb) return 0;
    db_val v;
    size_t at = sc->x ? batch_newest(sc->x, ri.pdb, ri.key, ri.klen) : 0;
    if (at) {              /* the open batch rewrote or deleted it */
        log_entry e;
        batch_decode(sc->x, at - 1, &e);
        if (batch_val(sc->x, &e, sc->now, &v))
            sc->fn(sc->arg, ri.key, ri.klen, &v);
        return 0;
    }
    if (ri.expire_ms && ri.expire_ms <= sc->now) return 0;
    fill_ref(&v, ref);
    sc->fn(sc->arg, ri.key, ri.klen, &v);
    return 0;
}

/* Keyspace-wide functions lock shard by shard, except a shard this thread
 * already holds: EXEC holds every shard while it runs FLUSHALL, KEYS,
 * DBSIZE... queued in a transaction. Returns whether it locked. */
static int lock_unless_held(shard *s) {
    if (shard_held_by_me(s)) return 0;
    shard_lock(s);
    return 1;
}

static void unlock_if(shard *s, int locked) {
    if (locked) shard_unlock(s);
}

/* Is shard i part of the keyspace clients see? In cluster mode only the
 * shards we are primary of: this node also holds backup copies of other
 * shards (applied by the digest thread), which KEYS, SCAN, DBSIZE,
 * RANDOMKEY, FLUSHALL/FLUSHDB and active expiry must never list, count,
 * flush or expire. Standalone: every shard. */
/* Shards keyspace-wide commands see: in a cluster, those we serve as
 * primary (never a backup copy, nor a shard still being reconciled). */
static int client_shard(int i) {
    return !cluster_enabled() ||
           (cluster_is_primary(i) && atomic_load(&server.shards[i].avail) == SHARD_SERVING &&
            member_lease_valid());
}

/* ---- keyspace-wide reads through the open batch ----
 * EXEC and scripts run their commands inside one open batch, whose writes
 * reach the index only when the batch is logged (db_batch_end). A key's
 * lookup reads the batch first (batch_find); DBSIZE, KEYS, SCAN and
 * RANDOMKEY walk the index, so they read through the batch here: as in
 * Redis, a transaction's or a script's later commands see its earlier
 * writes. After the batch a key is what its newest keyed sub-entry says
 * (SET, COLL_OP, SNAPSHOT: there; DEL: gone) unless a FLUSHDB sub-entry of
 * its shard and db follows it; a shard the batch flushed shows none of its
 * indexed keys. The shards read are held by the caller (EXEC and EVAL hold
 * every shard when they run one of these commands) or locked here. */

static int batch_open(const db_ctx *x) { return x->batching && x->nbatch > 0; }

/* The newest keyed sub-entry of (pdb, key) in the open batch: 1 + its
 * offset in x->batch, 0 if the batch never wrote the key. */
static size_t batch_newest(db_ctx *x, unsigned pdb, const char *key, size_t klen) {
    if (!x->bidx_on) bidx_build(x, 256);
    log_entry k = {.db = (uint16_t)pdb, .key = key, .klen = (uint32_t)klen};
    return x->bidx[bidx_slot(x, &k)];
}

/* 1 + the offset of the batch's last FLUSHDB of (s, pdb), 0 if none. */
static size_t batch_flushed_at(const db_ctx *x, const shard *s, unsigned pdb) {
    for (int i = x->batch_flushes - 1; i >= 0; i--) {
        log_entry e;
        log_entry_decode(x->batch.buf + x->flush_at[i], &e);
        if (e.shard == s->id && (e.db == pdb || e.db == 0xffff)) return x->flush_at[i] + 1;
    }
    return 0;
}

/* What the key of a newest sub-entry e is after the batch, at time now:
 * 1 and *v if it exists, 0 if deleted or expired. */
static int batch_val(db_ctx *x, const log_entry *e, int64_t now, db_val *v) {
    if (e->type == LOG_SET) {
        if (e->expire_ms && e->expire_ms <= now) return 0;
        fill_val(v, e);
        return 1;
    }
    robj *o = e->type == LOG_DEL ? NULL : batch_clone(x, e->db, e->key, e->klen);
    if (!o || (o->expire_ms && o->expire_ms <= now)) return 0;
    *v = (db_val){.type = o->type, .expire_ms = o->expire_ms, .ver = o->ver, .obj = o};
    return 1;
}

/* fn(arg, shard, newest sub-entry, live after the batch, its reference in
 * the index before it or 0) once per key of logical db `db` the open batch
 * wrote, on shard sid (-1: every shard clients see). "In the index" counts
 * as no for a shard the batch flushed. */
typedef void (*batch_key_fn)(void *arg, shard *s, const log_entry *e, int live, uint64_t indexed);
static void batch_keys(db_ctx *x, int db, int sid, batch_key_fn fn, void *arg) {
    size_t pos = 0, at;
    log_entry e;
    if (!x->bidx_on) bidx_build(x, 256);
    while (batch_next(x, &pos, &e, &at)) {
        if (!keyed_type(e.type) || (sid >= 0 && e.shard != sid) || !client_shard(e.shard))
            continue;
        shard *s = &server.shards[e.shard];
        if (e.db != phys_db(x, s, db) || x->bidx[bidx_slot(x, &e)] != at + 1) continue;
        int locked = lock_unless_held(s);
        size_t flushed = batch_flushed_at(x, s, e.db);
        int live = e.type != LOG_DEL && at + 1 > flushed;
        uint64_t indexed = 0;
        if (!flushed) {
            keyref k = {e.db, e.key, e.klen};
            indexed = index_get(s->idx, hash_key(e.db, e.key, e.klen), match_key, &k);
        }
        fn(arg, s, &e, live, indexed);
        unlock_if(s, locked);
    }
}

/* The keys the open batch created (live, not in the index) of logical db
 * `db`: counted, and the pick-th (from 0) copied to *out. Returns how many
 * there are; pick < 0 only counts. */
typedef struct new_keys { long long n, pick; rbuf *out; } new_keys;
static void new_key_fn(void *arg, shard *s, const log_entry *e, int live, uint64_t indexed) {
    new_keys *nk = arg;
    if (!live || indexed) return;
    if (nk->n++ == nk->pick) {
        nk->out->len = 0;
        rbuf_append(nk->out, e->key, e->klen);
    }
}
static long long batch_new_keys(db_ctx *x, int db, long long pick, rbuf *out) {
    new_keys nk = {0, pick, out};
    batch_keys(x, db, -1, new_key_fn, &nk);
    return nk.n;
}

/* SCAN's end of a shard: visit what the open batch created there. */
static void scan_new_fn(void *arg, shard *s, const log_entry *e, int live, uint64_t indexed) {
    scan_ctx *sc = arg;
    db_val v;
    if (live && !indexed && batch_val(sc->x, e, sc->now, &v)) sc->fn(sc->arg, e->key, e->klen, &v);
}
static void batch_scan_new(db_ctx *x, int db, shard *s, scan_ctx *sc) {
    batch_keys(x, db, s->id, scan_new_fn, sc);
}

/* Cursor layout: low 16 bits the shard, the rest the index cursor inside it. */
uint64_t db_scan(db_ctx *x, int db, uint64_t cursor, long count, db_scan_fn fn, void *arg) {
    uint64_t sid = cursor & 0xffff, icur = cursor >> 16;
    long budget = count > 0 ? count : 10;
    while (sid < (uint64_t)server.nshards && budget > 0) {
        if (!client_shard((int)sid)) { sid++; icur = 0; continue; }
        shard *s = &server.shards[sid];
        int locked = lock_unless_held(s);
        scan_ctx sc = {phys_db(x, s, db), expiry_now(x), fn, arg, batch_open(x) ? x : NULL};
        /* a shard the open batch flushed shows only the keys it wrote since */
        if (!(sc.x && batch_flushed_at(x, s, sc.pdb)))
            icur = index_scan(s->idx, icur, &budget, scan_visit, &sc);
        else
            icur = 0;
        if (icur == 0 && sc.x) batch_scan_new(x, db, s, &sc);
        dep_add(x, s, s->next_ver - 1);
        unlock_if(s, locked);
        if (icur == 0) sid++;
    }
    if (sid >= (uint64_t)server.nshards) return 0;
    return (icur << 16) | sid;
}

/* Keys (or keys with an expiry) of logical db `db`, over every shard. */
static long long count_keys(int db, int with_expiry) {
    long long n = 0;
    for (int i = 0; i < server.nshards; i++) {
        if (!client_shard(i)) continue;
        shard *s = &server.shards[i];
        int locked = lock_unless_held(s);
        unsigned pdb = phys_db(NULL, s, db);
        n += with_expiry ? s->dbexpires[pdb] : s->dbkeys[pdb];
        unlock_if(s, locked);
    }
    return n;
}

long long db_size(int db) { return count_keys(db, 0); }
long long db_expires(int db) { return count_keys(db, 1); }

/* Counting through the open batch: keys (or keys with an expiry) after the
 * batch minus those the index had before it, per key the batch wrote. */
typedef struct batch_count { db_ctx *x; long long n; int with_expiry; } batch_count;
static void count_batch_key(void *arg, shard *s, const log_entry *e, int live, uint64_t indexed) {
    batch_count *bc = arg;
    if (!bc->with_expiry) {
        bc->n += live - (indexed != 0);
        return;
    }
    db_val v;
    if (indexed) {
        refinfo ri;
        ref_info(indexed, &ri);
        bc->n -= ri.expire_ms != 0;
    }
    /* time 0: expired or not, the key is still there (as in DBSIZE) */
    bc->n += live && batch_val(bc->x, e, 0, &v) && v.expire_ms;
}

static long long count_through(db_ctx *x, int db, int with_expiry) {
    if (!batch_open(x)) return count_keys(db, with_expiry);
    batch_count bc = {x, 0, with_expiry};
    for (int i = 0; i < server.nshards; i++) {
        if (!client_shard(i)) continue;
        shard *s = &server.shards[i];
        int locked = lock_unless_held(s);
        unsigned pdb = phys_db(x, s, db);
        if (!batch_flushed_at(x, s, pdb)) bc.n += with_expiry ? s->dbexpires[pdb] : s->dbkeys[pdb];
        unlock_if(s, locked);
    }
    batch_keys(x, db, -1, count_batch_key, &bc);
    return bc.n;
}

long long db_count(db_ctx *x, int db) { return count_through(x, db, 0); }
long long db_count_expires(db_ctx *x, int db) { return count_through(x, db, 1); }

/* Try a random item of one shard; 1 if it is a live key of pdb (and the
 * open batch, if any, left it so). */
static int random_in_shard(db_ctx *x, shard *s, unsigned pdb, rbuf *out) {
    int batch = batch_open(x);
    if (batch && batch_flushed_at(x, s, pdb)) return 0;
    for (int tries = 0; tries < 16; tries++) {
        uint64_t ref = index_random(s->idx, rnd64());
        if (!ref) return 0;
        refinfo ri;
        ref_info(ref, &ri);
        if (ri.pdb != pdb) continue;
        size_t at = batch ? batch_newest(x, pdb, ri.key, ri.klen) : 0;
        if (at) {
            log_entry e;
            db_val v;
            batch_decode(x, at - 1, &e);
            if (!batch_val(x, &e, expiry_now(x), &v)) continue;
        } else if (ri.expire_ms && ri.expire_ms <= expiry_now(x)) {
            continue;
        }
        out->len = 0;
        rbuf_append(out, ri.key, ri.klen);
        return 1;
    }
    return 0;
}

int db_random_key(db_ctx *x, int db, rbuf *out) {
    int n = server.nshards;
    int start = (int)(rnd64() % (uint64_t)n);
    /* Keys the open batch created are not in the index: one of them, in
     * proportion to their share of the keyspace (or when the index has no
     * key left for us). */
    long long fresh = batch_open(x) ? batch_new_keys(x, db, -1, NULL) : 0;
    if (fresh > 0) {
        long long total = db_count(x, db);
        if (total <= fresh || (long long)(rnd64() % (uint64_t)total) < fresh)
            return batch_new_keys(x, db, (long long)(rnd64() % (uint64_t)fresh), out) > 0;
    }
    /* Random shards first, then a full pass so a sparse keyspace still finds
     * a key when there is one. */
    for (int i = 0; i < 2 * n; i++) {
        int sid = i < n ? (int)(rnd64() % (uint64_t)n) : (start + i) % n;
        if (!client_shard(sid)) continue;
        shard *s = &server.shards[sid];
        int locked = lock_unless_held(s);
        int found = s->dbkeys[phys_db(x, s, db)] > 0 && random_in_shard(x, s, phys_db(x, s, db), out);
        dep_add(x, s, s->next_ver - 1);
        unlock_if(s, locked);
        if (found) return 1;
    }
    if (fresh > 0) return batch_new_keys(x, db, (long long)(rnd64() % (uint64_t)fresh), out) > 0;
    return 0;
}

/* Lock every shard not already held; returns which ones it locked, for
 * unlock_all. */
static uint8_t *lock_all(void) {
    uint8_t *mine = calloc((size_t)server.nshards, 1);
    for (int i = 0; i < server.nshards; i++) mine[i] = (uint8_t)lock_unless_held(&server.shards[i]);
    return mine;
}

static void unlock_all(uint8_t *mine) {
    for (int i = server.nshards - 1; i >= 0; i--) unlock_if(&server.shards[i], mine[i]);
    free(mine);
}

/* Has the batch enclosing the caller's own (x->batching > 1) written
 * anything to shard s? */
static int batch_wrote_shard(const db_ctx *x, const shard *s) {
    size_t pos = 0, at;
    log_entry e;
    if (x->batching < 2) return 0;
    while (batch_next(x, &pos, &e, &at))
        if (e.shard == s->id && keyed_type(e.type)) return 1;
    return 0;
}

int db_flush(db_ctx *x, int db) {
    uint8_t *mine = lock_all();
    db_batch_begin(x);
    for (int i = 0; i < server.nshards; i++) {
        if (!client_shard(i)) continue;
        shard *s = &server.shards[i];
        unsigned pdb = db < 0 ? 0xffff : phys_db(x, s, db);
        long long keys = 0;
        if (db < 0) for (int d = 0; d < SHARD_MAX_DBS; d++) keys += s->dbkeys[d];
        else keys = s->dbkeys[pdb];
        /* an empty shard needs no flush, unless the enclosing batch (EXEC,
         * a script) wrote keys there that it must remove */
        if (keys == 0 && !batch_wrote_shard(x, s)) continue;
        log_entry e = {.type = LOG_FLUSHDB, .db = (uint16_t)pdb, .key = "", .val = "", .aux = pool_seq_now(server.pool)};
        batch_add(x, s, &e);
    }
    int r = db_batch_end(x);
    for (int i = 0; i < server.nshards; i++)
        if (client_shard(i)) dep_add(x, &server.shards[i], server.shards[i].next_ver - 1);
    unlock_all(mine);
    return r;
}

int db_swap(db_ctx *x, int a, int b) {
    int ndb = server.cfg.databases;
    uint16_t map[SHARD_MAX_DBS];
    uint8_t *mine = lock_all();
    db_batch_begin(x);
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        for (int d = 0; d < ndb; d++) map[d] = (uint16_t)phys_db(x, s, d);
        uint16_t t = map[a];
        map[a] = map[b];
        map[b] = t;
        log_entry e = {.type = LOG_DBMAP, .key = "", .val = (const char *)map, .vlen = (uint32_t)(2 * ndb)};
        batch_add(x, s, &e);
    }
    int r = db_batch_end(x);
    unlock_all(mine);
    return r;
}

/* The library set goes to ONE shard: the lowest this node serves as
 * primary (shard 0 standalone). Its replicas get it through the normal
 * write path like any entry, and every node's hook keeps the newest set
 * among all the shards it holds (DECISIONS.md, "FUNCTION"). */
int db_set_funcs(db_ctx *x, const char *payload, size_t len) {
    for (int i = 0; i < server.nshards; i++) {
        if (!client_shard(i)) continue;
        shard *s = &server.shards[i];
        int locked = lock_unless_held(s);
        log_entry e = {.type = LOG_FUNCS, .key = "", .val = payload, .vlen = (uint32_t)len};
        int r = write_entry(x, s, &e);
        unlock_if(s, locked);
        return r;
    }
    return DB_NOSHARD;
}

/* ---------------- active expiry ---------------- */

void (*db_expired_hook)(int db, const char *key, size_t klen);
void (*db_miss_hook)(int db, const char *key, size_t klen);
void (*db_evicted_hook)(int db, const char *key, size_t klen);

/* The logical db that physical db pdb of shard s holds now (SWAPDB). */
static int logical_db(const shard *s, unsigned pdb) {
    for (int d = 0; d < SHARD_MAX_DBS; d++)
        if (s->dbmap[d] == pdb) return d;
    return (int)pdb;
}

typedef struct expire_ctx {
    int64_t now;
    uint64_t refs[64];
    int n;
} expire_ctx;

static int collect_expired(void *ctx, uint64_t ref) {
    expire_ctx *ec = ctx;
    refinfo ri;
    ref_info(ref, &ri);
    if (ri.expire_ms && ri.expire_ms <= ec->now && ec->n < 64) ec->refs[ec->n++] = ref;
    return 0;
}

/* Delete the expired keys found in one bounded step over shard s's volatile
 * index, starting at *cursor. Deletions are logged like DEL so a restart
 * cannot resurrect the key (DESIGN.md §3). */
static int expire_shard_step(db_ctx *x, shard *s, uint64_t *cursor, long *budget) {
    expire_ctx ec = {.now = mstime()};
    long b = *budget < 64 ? *budget : 64;
    long before = b;
    *cursor = index_scan(s->vidx, *cursor, &b, collect_expired, &ec);
    *budget -= before - b;
    int deleted = 0;
    for (int i = 0; i < ec.n; i++) {
        refinfo ri;
        ref_info(ec.refs[i], &ri);
        /* Copy the key: deleting a collection frees the object holding it. */
        char kb[256];
        char *key = ri.klen <= sizeof(kb) ? kb : malloc(ri.klen);
        memcpy(key, ri.key, ri.klen);
        log_entry d = {.type = LOG_DEL, .db = (uint16_t)ri.pdb, .key = key, .klen = (uint32_t)ri.klen,
                       .val = "", .aux = pool_seq_now(server.pool)};
        if (append_one(x, s, &d) == DB_OK) {
            deleted++;
            if (db_expired_hook) db_expired_hook(logical_db(s, ri.pdb), key, ri.klen);
        }
        if (key != kb) free(key);
    }
    return deleted;
}

int db_active_expire(db_ctx *x, long budget) {
    worker *w = x->w;
    int deleted = 0;
    int nw = server.nworkers;
    /* expire_cursor: low 16 bits the shard, the rest the index cursor. */
    uint64_t sid = w->expire_cursor & 0xffff, icur = w->expire_cursor >> 16;
    if (sid % (uint64_t)nw != (uint64_t)x->wid || sid >= (uint64_t)server.nshards) {
        sid = (uint64_t)x->wid;
        icur = 0;
    }
    for (int visited = 0; budget > 0 && visited <= server.nshards; ) {
        if (sid >= (uint64_t)server.nshards) { sid = (uint64_t)x->wid; icur = 0; break; }
        shard *s = &server.shards[sid];
        if (!client_shard((int)sid)) { icur = 0; sid += (uint64_t)nw; visited++; continue; }
        /* Never wait for a shard another thread holds for long (a Lua
         * script or EXEC holds every shard): retry at the next tick, so
         * the worker keeps serving its clients (-BUSY, SCRIPT KILL). */
        if (shard_trylock(s) != 0) break;
        deleted += expire_shard_step(x, s, &icur, &budget);
        shard_unlock(s);
        if (icur == 0) { sid += (uint64_t)nw; visited++; }
    }
    w->expire_cursor = (icur << 16) | sid;
    if (deleted) atomic_fetch_add(&server.stat.expiredkeys, deleted);
    return deleted;
}

/* ---------------- whole shard (db_shard.h) ---------------- */

static int clear_ref(void *ctx, uint64_t ref) {
    if (ref_is_obj(ref)) {
        retire_history(ref_obj(ref));
        obj_free(ref_obj(ref));
    } else {
        live_add(ref, -ref_bytes(ref));
    }
    return 0;
}

void db_shard_clear(shard *s) {
    index_foreach(s->idx, clear_ref, NULL);
    index_clear(s->idx);
    index_clear(s->vidx);
    memset(s->dbkeys, 0, sizeof(s->dbkeys));
    memset(s->dbexpires, 0, sizeof(s->dbexpires));
    reset_dbmap(s);
    reset_funcs(s);
    if (s->resync_ref) live_add(s->resync_ref, -ref_bytes(s->resync_ref));
    s->resync_ref = 0;
    s->resync_ver = 0;
    bigval_forget(s);
}

void db_shard_read_dep(db_ctx *x, shard *s) { dep_add(x, s, s->next_ver - 1); }

/* ---------------- cleaner support ---------------- */

/* The collection that key of e currently is, or NULL. */
static robj *obj_of_entry(shard *s, const log_entry *e) {
    keyref k = {e->db, e->key, e->klen};
    uint64_t cur = index_get(s->idx, hash_key(e->db, e->key, e->klen), match_key, &k);
    return cur && ref_is_obj(cur) ? ref_obj(cur) : NULL;
}

int db_ref_is_live(shard *s, uint64_t ref, const log_entry *e) {
    if (e->type == LOG_DBMAP) return s->dbmap_ref == ref;
    if (e->type == LOG_FUNCS) return s->funcs_ref == ref;
    if (e->type == LOG_FLUSHDB) return (e->flags & LOG_F_RESYNC) && s->resync_ref == ref;
    if (e->type == LOG_CHUNK && bigval_pending(s, ref)) return 1;
    if (e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT || e->type == LOG_CHUNK ||
        (e->type == LOG_SET && (e->flags & LOG_F_CHUNKED))) {
        robj *o = obj_of_entry(s, e);
        return o && obj_hist_find(o, ref) >= 0;
    }
    if (e->type != LOG_SET) return 0;
    keyref k = {e->db, e->key, e->klen};
    return index_get(s->idx, hash_key(e->db, e->key, e->klen), match_key, &k) == ref;
}

/* The copy at new_ref holds the same bytes as old_ref, so live bytes move
 * from one segment to the other unchanged. */
void db_relocate(shard *s, uint64_t old_ref, uint64_t new_ref, const log_entry *e) {
    int64_t bytes = (int64_t)log_entry_len(e->klen, e->vlen);
    if (e->type == LOG_CHUNK && bigval_pending(s, old_ref)) {
        bigval_pending_move(s, old_ref, new_ref);   /* not counted live yet */
        return;
    }
    if (e->type == LOG_DBMAP) {
        s->dbmap_ref = new_ref;
    } else if (e->type == LOG_FUNCS) {
        s->funcs_ref = new_ref;
    } else if (e->type == LOG_FLUSHDB) {
        s->resync_ref = new_ref;
    } else if (e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT || e->type == LOG_CHUNK ||
               (e->type == LOG_SET && (e->flags & LOG_F_CHUNKED))) {
        robj *o = obj_of_entry(s, e);
        int i = o ? obj_hist_find(o, old_ref) : -1;
        if (i >= 0) o->hist[i] = new_ref;
    } else {
        uint64_t h = hash_key(e->db, e->key, e->klen);
        index_replace(s->idx, h, old_ref, new_ref);
        if (e->expire_ms) index_replace(s->vidx, h, old_ref, new_ref);
    }
    live_add(old_ref, -bytes);
    live_add(new_ref, bytes);
}

/* ---------------- eviction support (evict.c) ---------------- */

int db_evict_shard(int sid) { return client_shard(sid); }

int db_sample_key(shard *s, int volatile_only, uint64_t rnd, db_key_info *ki) {
    uint64_t ref = index_random(volatile_only ? s->vidx : s->idx, rnd);
    if (!ref) return 0;
    refinfo ri;
    ref_info(ref, &ri);
    long long bytes;
    if (ref_is_obj(ref)) bytes = (long long)ref_obj(ref)->hist_bytes;
    else bytes = ref_bytes(ref);
    *ki = (db_key_info){ri.pdb, ri.key, ri.klen, ri.expire_ms, hash_key(ri.pdb, ri.key, ri.klen), bytes};
    return 1;
}

int db_evict_key(db_ctx *x, shard *s, unsigned pdb, const char *key, size_t klen) {
    keyref k = {pdb, key, klen};
    if (!index_get(s->idx, hash_key(pdb, key, klen), match_key, &k)) return 0;
    log_entry d = {.type = LOG_DEL, .db = (uint16_t)pdb, .key = key, .klen = (uint32_t)klen,
                   .val = "", .aux = pool_seq_now(server.pool)};
    int r = append_one(x, s, &d);
    if (r != DB_OK) return r;
    if (db_evicted_hook) db_evicted_hook(logical_db(s, pdb), key, klen);
    return 1;
}

long long db_live_bytes(void) {
    long long sum = 0;
    uint32_t n = pool_nsegs(server.pool);
    for (uint32_t i = 0; i < n; i++) sum += pool_live_get(server.pool, i);
    return sum;
}

void db_key_clock(db_ctx *x, int db, const char *key, size_t klen, int *sid, uint64_t *hash) {
    shard *s = key_shard(x, key, klen);
    *sid = s->id;
    *hash = hash_key(phys_db(x, s, db), key, klen);
}
