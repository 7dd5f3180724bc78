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
 * keys, so entries and the index carry the physical db number. */
#include <stdlib.h>
#include <string.h>
#include "db.h"
#include "hash.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "shard.h"
#include "worker.h"
#include "util.h"

const char *db_oom_error = "OOM command not allowed when the storage pool is full";

/* Segments kept free for deletions and the cleaner: a full pool must still
 * accept DEL (to make room) and the cleaner must always find a segment to
 * copy into. Ordinary writes leave DB_RESERVE_WRITE segments untouched. */
#define DB_RESERVE_CLEAN 1
#define DB_RESERVE_DEL   2
static uint32_t db_reserve_write(void) { return (uint32_t)(DB_RESERVE_DEL + 1 + server.nworkers); }

/* ---------------- context ---------------- */

void db_ctx_init(db_ctx *x, struct worker *w, int wid) {
    memset(x, 0, sizeof(*x));
    x->w = w;
    x->wid = wid;
    rbuf_init(&x->batch);
}

void db_ctx_free(db_ctx *x) {
    free(x->deps);
    rbuf_free(&x->batch);
    memset(x, 0, sizeof(*x));
}

void db_ctx_reset(db_ctx *x) { x->ndeps = 0; }

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
    db_dep d = {id, kind, ver};
    if (db_dep_durable(&d)) return;
    if (x->ndeps == x->capdeps) {
        x->capdeps = x->capdeps ? x->capdeps * 2 : 4;
        x->deps = realloc(x->deps, (size_t)x->capdeps * sizeof(db_dep));
    }
    x->deps[x->ndeps++] = d;
}

/* A read observed version ver of shard s. */
static void dep_add(db_ctx *x, const shard *s, uint64_t ver) { dep_push(x, DEP_SHARD, s->id, ver); }

/* A write went into this worker's accumulating batch. */
static void dep_add_write(db_ctx *x) {
    worker *w = x->w;
    dep_push(x, DEP_BATCH, (uint16_t)w->id, w->slots[w->acc].gen);
}

/* ---------------- index glue ---------------- */

typedef struct keyref {
    unsigned pdb;
    const char *key;
    size_t klen;
} keyref;

static const void *ref_ptr(uint64_t ref) { return pool_ptr(server.pool, ref); }

static int match_key(void *ctx, uint64_t ref) {
    const keyref *k = ctx;
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    return e.db == k->pdb && e.klen == k->klen && memcmp(e.key, k->key, k->klen) == 0;
}

/* The index asks for a key's hash when it grows. */
static uint64_t rehash_ref(void *ctx, uint64_t ref) {
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    return hash_key(e.db, e.key, e.klen);
}

void db_init_indexes(void) {
    for (int i = 0; i < server.nshards; i++) {
        server.shards[i].idx = index_new(rehash_ref, NULL);
        server.shards[i].vidx = index_new(rehash_ref, NULL);
    }
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

/* Drop whatever the index holds for key k: counts, volatile index, live bytes. */
static void unindex(shard *s, const keyref *k, uint64_t h, uint64_t old) {
    log_entry e;
    log_entry_decode(ref_ptr(old), &e);
    if (e.expire_ms) {
        index_remove_ref(s->vidx, h, old);
        s->dbexpires[k->pdb]--;
    }
    live_add(old, -(int64_t)log_entry_len(e.klen, e.vlen));
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
    uint64_t *refs;
    size_t n, cap;
} flush_ctx;

static int collect_db_ref(void *ctx, uint64_t ref) {
    flush_ctx *f = ctx;
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    if (f->pdb != 0xffff && e.db != f->pdb) return 0;
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 256;
        f->refs = realloc(f->refs, f->cap * sizeof(uint64_t));
    }
    f->refs[f->n++] = ref;
    return 0;
}

void db_apply_flush(shard *s, unsigned pdb) {
    flush_ctx f = {pdb, NULL, 0, 0};
    index_foreach(s->idx, collect_db_ref, &f);
    for (size_t i = 0; i < f.n; i++) {
        log_entry e;
        log_entry_decode(ref_ptr(f.refs[i]), &e);
        db_apply_del(s, e.db, e.key, e.klen);
    }
    free(f.refs);
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

/* Apply one decoded entry (top-level or sub-entry) found at ref. */
void db_apply_entry(shard *s, uint64_t ref, const log_entry *e) {
    switch (e->type) {
    case LOG_SET: db_apply_set(s, ref); break;
    case LOG_DEL: db_apply_del(s, e->db, e->key, e->klen); break;
    case LOG_FLUSHDB: db_apply_flush(s, e->db); break;
    case LOG_DBMAP: db_apply_dbmap(s, ref, e->ver); break;
    default: break;
    }
}

/* ---------------- appending entries ---------------- */

static uint32_t keep_free_for(uint8_t type) {
    return type == LOG_SET || type == LOG_DBMAP ? db_reserve_write() : DB_RESERVE_DEL;
}

/* Append one top-level entry for shard s (lock held) and apply it. */
static int append_one(db_ctx *x, shard *s, log_entry *e) {
    worker *w = x->w;
    size_t len = log_entry_len(e->klen, e->vlen);
    uint64_t off = log_writer_reserve(&w->tlog, len, keep_free_for(e->type));
    if (!off) {
        atomic_fetch_add(&server.stat.oom_refused, 1);
        return DB_OOM;
    }
    e->shard = s->id;
    e->ver = shard_next_version(s, x->wid, x->w->acc);
    log_entry_encode(log_writer_dst(&w->tlog, off, len), e, 1);
    log_writer_wrote(&w->tlog, off, len);
    worker_touch_shard(w, s->id);
    db_apply_entry(s, off, e);
    dep_add_write(x);
    return DB_OK;
}

/* Queue a sub-entry into the current batch; its version is assigned at
 * db_batch_end. If the value lives inside the batch buffer itself (a value
 * read back from the batch), it is copied first because appending may move
 * the buffer. */
static void batch_add(db_ctx *x, shard *s, log_entry *e) {
    char *tmp = NULL;
    const char *b0 = x->batch.buf, *b1 = x->batch.buf + x->batch.len;
    if (e->vlen && e->val >= b0 && e->val < b1) {
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
    free(tmp);
}

static int write_entry(db_ctx *x, shard *s, log_entry *e) {
    if (x->batching) {
        batch_add(x, s, e);
        return DB_OK;
    }
    return append_one(x, s, e);
}

void db_batch_begin(db_ctx *x) {
    x->batching = 1;
    x->batch.len = 0;
    x->nbatch = 0;
}

/* Walk the batch's sub-entries: pos is a byte offset into x->batch. */
static int batch_next(const db_ctx *x, size_t *pos, log_entry *e, size_t *at) {
    size_t p = (*pos + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1);
    if (p + LOG_HDR_SIZE > x->batch.len) return 0;
    log_entry_decode(x->batch.buf + p, e);
    *at = p;
    *pos = p + log_entry_len(e->klen, e->vlen);
    return 1;
}

int db_batch_end(db_ctx *x) {
    x->batching = 0;
    if (x->nbatch == 0) return DB_OK;
    worker *w = x->w;
    size_t len = LOG_HDR_SIZE + x->batch.len;
    uint32_t keep = DB_RESERVE_DEL;
    size_t pos = 0, at;
    log_entry e;
    while (batch_next(x, &pos, &e, &at))
        if (keep_free_for(e.type) > keep) keep = keep_free_for(e.type);
    uint64_t off = log_writer_reserve(&w->tlog, len, keep);
    if (!off) {
        atomic_fetch_add(&server.stat.oom_refused, 1);
        x->nbatch = 0;
        return DB_OOM;
    }
    /* Versions are handed out now, in batch order, under the locks the
     * caller holds for every key in the batch. */
    pos = 0;
    while (batch_next(x, &pos, &e, &at)) {
        shard *s = &server.shards[e.shard];
        e.ver = shard_next_version(s, x->wid, x->w->acc);
        uint64_t verdb = (e.ver & LOG_VER_MASK) | ((uint64_t)e.db << 48);
        memcpy(x->batch.buf + at + 8, &verdb, 8);
        worker_touch_shard(w, s->id);
    }
    dep_add_write(x);
    log_entry g = {.type = LOG_GROUP, .shard = LOG_SHARD_NONE, .aux = (uint64_t)x->nbatch,
                   .val = x->batch.buf, .vlen = (uint32_t)x->batch.len};
    log_entry_encode(log_writer_dst(&w->tlog, off, len), &g, 1);
    log_writer_wrote(&w->tlog, off, len);
    pos = 0;
    while (batch_next(x, &pos, &e, &at)) {
        uint64_t ref = off + LOG_HDR_SIZE + at;
        log_entry_decode(pool_ptr(server.pool, ref), &e);
        db_apply_entry(&server.shards[e.shard], ref, &e);
    }
    x->nbatch = 0;
    return DB_OK;
}

/* The newest sub-entry of the open batch for (pdb, key), or -1. */
static int batch_find(const db_ctx *x, unsigned pdb, const char *key, size_t klen, log_entry *out) {
    size_t pos = 0, at;
    log_entry e;
    int found = 0;
    while (batch_next(x, &pos, &e, &at)) {
        if (e.type == LOG_FLUSHDB && (e.db == pdb || e.db == 0xffff)) found = 0;
        if ((e.type == LOG_SET || e.type == LOG_DEL) && e.db == pdb && e.klen == klen &&
            memcmp(e.key, key, klen) == 0) {
            *out = e;
            found = 1;
        }
    }
    return found ? (out->type == LOG_SET ? 1 : 0) : -1;
}

/* ---------------- single-key operations ---------------- */

static void fill_val(db_val *v, const log_entry *e) {
    v->type = OBJ_STRING;
    v->ptr = e->val;
    v->len = e->vlen;
    v->expire_ms = e->expire_ms;
    v->ver = e->ver;
}

static unsigned phys_db(const shard *s, int db) { return s->dbmap[db]; }

/* The key's shard: the dispatcher already computed it for the command's
 * first key (the CRC16 is the single biggest cost of routing a GET). */
static shard *key_shard(const db_ctx *x, const char *key, size_t klen) {
    if (key == x->hint_key && klen == x->hint_klen) return x->hint_shard;
    return shard_of_key(key, klen);
}

/* Find the key; lazily delete it when expired. count != 0 updates hit/miss. */
static int lookup(db_ctx *x, int db, const char *key, size_t klen, db_val *v, int count) {
    shard *s = key_shard(x, key, klen);
    unsigned pdb = phys_db(s, db);
    log_entry e;
    if (x->batching) {
        int r = batch_find(x, pdb, key, klen, &e);
        if (r == 1 && !(e.expire_ms && e.expire_ms <= mstime())) {
            fill_val(v, &e);
            return 1;
        }
        if (r >= 0) return 0;
    }
    keyref k = {pdb, key, klen};
    uint64_t ref = index_get(s->idx, hash_key(pdb, key, klen), match_key, &k);
    if (ref) {
        log_entry_decode(ref_ptr(ref), &e);
        if (e.expire_ms && e.expire_ms <= mstime()) {
            log_entry d = {.type = LOG_DEL, .db = (uint16_t)pdb, .key = key,
                           .klen = (uint32_t)klen, .val = "", .aux = pool_seq_now(server.pool)};
            if (write_entry(x, s, &d) == DB_OK) atomic_fetch_add(&server.stat.expiredkeys, 1);
            ref = 0;
        }
    }
    if (!ref) {
        dep_add(x, s, s->next_ver - 1);
        if (count) x->w->round_misses++;
        return 0;
    }
    fill_val(v, &e);
    dep_add(x, s, e.ver);
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
    log_entry e = {.type = LOG_SET, .db = phys_db(s, db), .key = key, .klen = (uint32_t)klen,
                   .val = val, .vlen = (uint32_t)vlen, .expire_ms = expire_ms};
    return write_entry(x, s, &e);
}

int db_del(db_ctx *x, int db, const char *key, size_t klen) {
    db_val v;
    if (!db_peek(x, db, key, klen, &v)) return 0;
    shard *s = key_shard(x, key, klen);
    log_entry e = {.type = LOG_DEL, .db = phys_db(s, db), .key = key, .klen = (uint32_t)klen,
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
    int r = db_set(x, db, key, klen, v.ptr, v.len, expire_ms);
    return r == DB_OK ? 1 : r;
}

/* ---------------- whole keyspace ---------------- */

typedef struct scan_ctx {
    unsigned pdb;
    int64_t now;
    db_scan_fn fn;
    void *arg;
} scan_ctx;

static int scan_visit(void *ctx, uint64_t ref) {
    scan_ctx *sc = ctx;
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    if (e.db != sc->pdb) return 0;
    if (e.expire_ms && e.expire_ms <= sc->now) return 0;
    db_val v;
    fill_val(&v, &e);
    sc->fn(sc->arg, e.key, e.klen, &v);
    return 0;
}

/* Cursor layout: low 16 bits the shard, the rest the index cursor inside it. */
uint64_t db_scan(db_ctx *x, int db, uint64_t cursor, long count, db_scan_fn fn, void *arg) {
    uint64_t sid = cursor & 0xffff, icur = cursor >> 16;
    long budget = count > 0 ? count : 10;
    while (sid < (uint64_t)server.nshards && budget > 0) {
        shard *s = &server.shards[sid];
        shard_lock(s);
        scan_ctx sc = {phys_db(s, db), mstime(), fn, arg};
        icur = index_scan(s->idx, icur, &budget, scan_visit, &sc);
        dep_add(x, s, s->next_ver - 1);
        shard_unlock(s);
        if (icur == 0) sid++;
    }
    if (sid >= (uint64_t)server.nshards) return 0;
    return (icur << 16) | sid;
}

/* Keys (or keys with an expiry) of logical db `db`, over every shard. */
static long long count_keys(int db, int with_expiry) {
    long long n = 0;
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        shard_lock(s);
        unsigned pdb = phys_db(s, db);
        n += with_expiry ? s->dbexpires[pdb] : s->dbkeys[pdb];
        shard_unlock(s);
    }
    return n;
}

long long db_size(int db) { return count_keys(db, 0); }
long long db_expires(int db) { return count_keys(db, 1); }

/* Try a random item of one shard; 1 if it is a live key of pdb. */
static int random_in_shard(shard *s, unsigned pdb, rbuf *out) {
    for (int tries = 0; tries < 16; tries++) {
        uint64_t ref = index_random(s->idx, rnd64());
        if (!ref) return 0;
        log_entry e;
        log_entry_decode(ref_ptr(ref), &e);
        if (e.db != pdb || (e.expire_ms && e.expire_ms <= mstime())) continue;
        out->len = 0;
        rbuf_append(out, e.key, e.klen);
        return 1;
    }
    return 0;
}

int db_random_key(db_ctx *x, int db, rbuf *out) {
    int n = server.nshards;
    int start = (int)(rnd64() % (uint64_t)n);
    /* Random shards first, then a full pass so a sparse keyspace still finds
     * a key when there is one. */
    for (int i = 0; i < 2 * n; i++) {
        shard *s = &server.shards[i < n ? (int)(rnd64() % (uint64_t)n) : (start + i) % n];
        shard_lock(s);
        int found = s->dbkeys[phys_db(s, db)] > 0 && random_in_shard(s, phys_db(s, db), out);
        dep_add(x, s, s->next_ver - 1);
        shard_unlock(s);
        if (found) return 1;
    }
    return 0;
}

static void lock_all(void) {
    for (int i = 0; i < server.nshards; i++) shard_lock(&server.shards[i]);
}

static void unlock_all(void) {
    for (int i = server.nshards - 1; i >= 0; i--) shard_unlock(&server.shards[i]);
}

int db_flush(db_ctx *x, int db) {
    lock_all();
    db_batch_begin(x);
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        unsigned pdb = db < 0 ? 0xffff : phys_db(s, db);
        long long keys = 0;
        if (db < 0) for (int d = 0; d < SHARD_MAX_DBS; d++) keys += s->dbkeys[d];
        else keys = s->dbkeys[pdb];
        if (keys == 0) continue;
        log_entry e = {.type = LOG_FLUSHDB, .db = (uint16_t)pdb, .key = "", .val = "", .aux = pool_seq_now(server.pool)};
        batch_add(x, s, &e);
    }
    int r = db_batch_end(x);
    for (int i = 0; i < server.nshards; i++)
        dep_add(x, &server.shards[i], server.shards[i].next_ver - 1);
    unlock_all();
    return r;
}

int db_swap(db_ctx *x, int a, int b) {
    int ndb = server.cfg.databases;
    uint16_t map[SHARD_MAX_DBS];
    lock_all();
    db_batch_begin(x);
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        memcpy(map, s->dbmap, sizeof(uint16_t) * (size_t)ndb);
        uint16_t t = map[a];
        map[a] = map[b];
        map[b] = t;
        log_entry e = {.type = LOG_DBMAP, .key = "", .val = (const char *)map, .vlen = (uint32_t)(2 * ndb)};
        batch_add(x, s, &e);
    }
    int r = db_batch_end(x);
    unlock_all();
    return r;
}

/* ---------------- active expiry ---------------- */

typedef struct expire_ctx {
    int64_t now;
    uint64_t refs[64];
    int n;
} expire_ctx;

static int collect_expired(void *ctx, uint64_t ref) {
    expire_ctx *ec = ctx;
    log_entry e;
    log_entry_decode(ref_ptr(ref), &e);
    if (e.expire_ms && e.expire_ms <= ec->now && ec->n < 64) ec->refs[ec->n++] = ref;
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
        log_entry e;
        log_entry_decode(ref_ptr(ec.refs[i]), &e);
        /* Copy the key: the deletion appends to the log, and the entry we
         * decoded stays valid, but keep the code obviously safe. */
        char kb[256];
        char *key = e.klen <= sizeof(kb) ? kb : malloc(e.klen);
        memcpy(key, e.key, e.klen);
        log_entry d = {.type = LOG_DEL, .db = e.db, .key = key, .klen = e.klen,
                       .aux = pool_seq_now(server.pool)};
        if (append_one(x, s, &d) == DB_OK) deleted++;
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
        shard_lock(s);
        deleted += expire_shard_step(x, s, &icur, &budget);
        shard_unlock(s);
        if (icur == 0) { sid += (uint64_t)nw; visited++; }
    }
    w->expire_cursor = (icur << 16) | sid;
    if (deleted) atomic_fetch_add(&server.stat.expiredkeys, deleted);
    return deleted;
}

/* ---------------- cleaner support ---------------- */

int db_ref_is_live(shard *s, uint64_t ref, const log_entry *e) {
    if (e->type == LOG_DBMAP) return s->dbmap_ref == ref;
    if (e->type != LOG_SET) return 0;
    keyref k = {e->db, e->key, e->klen};
    return index_get(s->idx, hash_key(e->db, e->key, e->klen), match_key, &k) == ref;
}

/* The copy at new_ref holds the same bytes as old_ref, so live bytes move
 * from one segment to the other unchanged. */
void db_relocate(shard *s, uint64_t old_ref, uint64_t new_ref, const log_entry *e) {
    int64_t bytes = (int64_t)log_entry_len(e->klen, e->vlen);
    if (e->type == LOG_DBMAP) {
        s->dbmap_ref = new_ref;
    } else {
        uint64_t h = hash_key(e->db, e->key, e->klen);
        index_replace(s->idx, h, old_ref, new_ref);
        if (e->expire_ms) index_replace(s->vidx, h, old_ref, new_ref);
    }
    live_add(old_ref, -bytes);
    live_add(new_ref, bytes);
}
