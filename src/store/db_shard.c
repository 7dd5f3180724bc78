/* db_shard.c -- a shard's content digest and its export as log entries.
 *
 * See db_shard.h. Both walk the shard's index: a reference is either a
 * string's log entry (decoded in place) or a collection's DRAM object.
 *
 * Digest construction (our own): byte strings are hashed with hash_key (a
 * domain tag in place of the db number keeps the roles apart); dg_mix
 * combines two hashes in order (dg_mix(a, b) != dg_mix(b, a)); unordered
 * things (keys of a shard, elements of a hash, set or zset) are summed
 * mod 2^64 after a finalizer, so their order cannot matter while any change
 * to one of them changes the sum with high probability. Counts are mixed in
 * at the end so that sums over different numbers of items stay apart. */
#include <string.h>
#include "db_shard.h"
#include "bigval.h"
#include "hash.h"
#include "index.h"
#include "log.h"
#include "object.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

/* ---------------- digest ---------------- */

/* Domain tags (above any db number) for the byte strings hashed. */
enum { DG_STRING = 0x10000, DG_ELEM_A, DG_ELEM_B, DG_SNAPSHOT, DG_BUCKET };

unsigned db_shard_bucket(const char *key, size_t klen) {
    return (unsigned)(hash_key(DG_BUCKET, key, klen) % DB_SHARD_BUCKETS);
}

/* Every output bit depends on every input bit. */
static uint64_t dg_final(uint64_t h) {
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ULL;
    h ^= h >> 27;
    h *= 0x81dadef4bc2dd44dULL;
    h ^= h >> 33;
    return h;
}

/* Ordered combination of a running hash a with the next value b. */
static uint64_t dg_mix(uint64_t a, uint64_t b) {
    return dg_final(a * 0x9e3779b97f4a7c15ULL ^ dg_final(b + 0x632be59bd9b4e019ULL));
}

static uint64_t dg_bytes(unsigned tag, const char *p, size_t len) {
    return hash_key(tag, p ? p : "", len);
}

typedef struct dg_coll {
    int ordered;      /* lists */
    uint64_t acc;
    uint64_t n;
} dg_coll;

static void dg_elem(void *arg, const char *a, size_t alen, const char *b, size_t blen) {
    dg_coll *c = arg;
    uint64_t h = dg_mix(dg_bytes(DG_ELEM_A, a, alen), dg_bytes(DG_ELEM_B, b, blen));
    if (c->ordered) c->acc = dg_mix(c->acc, h);
    else c->acc += dg_final(h);
    c->n++;
}

static uint64_t dg_collection(const robj *o) {
    const obj_class *k = obj_class_of(o->type);
    if (!k || !k->elements) {
        /* A type without a visitor: its serialization (layout-dependent,
         * but still equal for equal histories). */
        rbuf snap;
        rbuf_init(&snap);
        obj_encode_snapshot(o, &snap);
        uint64_t h = dg_bytes(DG_SNAPSHOT, snap.buf, snap.len);
        rbuf_free(&snap);
        return h;
    }
    dg_coll c = {o->type == OBJ_LIST, 0, 0};
    k->elements(o->data, dg_elem, &c);
    return dg_mix(c.acc, c.n);
}

typedef struct dg_shard {
    uint16_t logical[SHARD_MAX_DBS];   /* physical db -> logical db */
    uint64_t sum;
    long long n;
    uint64_t *bsum;                    /* per bucket (db_shard_bucket_digests), or NULL */
    uint64_t *bn;
} dg_shard;

uint64_t db_key_digest(unsigned ldb, const char *key, size_t klen, int64_t expire_ms,
                       const char *p, size_t len, const robj *o) {
    uint64_t vh = o ? dg_collection(o) : dg_bytes(DG_STRING, p, len);
    uint64_t h = hash_key(ldb, key, klen);
    h = dg_mix(h, (uint64_t)(o ? o->type : OBJ_STRING));
    h = dg_mix(h, (uint64_t)expire_ms);
    return dg_final(dg_mix(h, vh));
}

static int dg_key(void *arg, uint64_t ref) {
    dg_shard *d = arg;
    unsigned pdb;
    const char *key;
    size_t klen;
    uint64_t kh;
    if (ref_is_obj(ref)) {
        const robj *o = ref_obj(ref);
        pdb = o->db, key = o->key, klen = o->klen;
        if (o->type == OBJ_STRING) {   /* a large string: the same digest as a small one */
            size_t len;
            const char *p = bigval_bytes(o, &len);
            kh = db_key_digest(d->logical[pdb % SHARD_MAX_DBS], key, klen, o->expire_ms, p, len,
                               NULL);
        } else {
            kh = db_key_digest(d->logical[pdb % SHARD_MAX_DBS], key, klen, o->expire_ms, NULL, 0,
                               o);
        }
    } else {
        log_entry e;
        log_entry_decode(pool_ptr(server.pool, ref), &e);
        pdb = e.db, key = e.key, klen = e.klen;
        kh = db_key_digest(d->logical[pdb % SHARD_MAX_DBS], key, klen, e.expire_ms, e.val, e.vlen,
                           NULL);
    }
    d->sum += kh;
    d->n++;
    if (d->bsum) {
        unsigned b = db_shard_bucket(key, klen);
        d->bsum[b] += kh;
        d->bn[b]++;
    }
    return 0;
}

/* Walk the shard into d (per-bucket sums too when d->bsum is set). */
static void dg_walk(shard *s, dg_shard *d) {
    int locked = !shard_held_by_me(s);
    if (locked) shard_lock(s);
    for (int l = 0; l < SHARD_MAX_DBS; l++) d->logical[s->dbmap[l] % SHARD_MAX_DBS] = (uint16_t)l;
    index_foreach(s->idx, dg_key, d);
    if (locked) shard_unlock(s);
}

uint64_t db_shard_digest(shard *s, long long *nkeys) {
    dg_shard d = {.sum = 0, .n = 0};
    dg_walk(s, &d);
    if (nkeys) *nkeys = d.n;
    return dg_mix(d.sum, (uint64_t)d.n);
}

void db_shard_digest_parts(shard *s, uint64_t *sum, long long *nkeys) {
    dg_shard d = {.sum = 0, .n = 0};
    dg_walk(s, &d);
    *sum = d.sum;
    *nkeys = d.n;
}

uint64_t db_value_digest(int type, const char *p, size_t len, const robj *o) {
    uint64_t vh = type == OBJ_STRING ? dg_bytes(DG_STRING, p, len) : dg_collection(o);
    return dg_mix((uint64_t)type, vh);
}

void db_shard_bucket_digests(shard *s, uint64_t out[DB_SHARD_BUCKETS],
                             uint64_t counts[DB_SHARD_BUCKETS]) {
    uint64_t own[DB_SHARD_BUCKETS];
    uint64_t *bn = counts ? counts : own;
    memset(out, 0, sizeof(uint64_t) * DB_SHARD_BUCKETS);
    memset(bn, 0, sizeof(uint64_t) * DB_SHARD_BUCKETS);
    dg_shard d = {.sum = 0, .n = 0, .bsum = out, .bn = bn};
    dg_walk(s, &d);
    for (int b = 0; b < DB_SHARD_BUCKETS; b++) out[b] = dg_mix(out[b], bn[b]);
}

int db_shard_dbmap_identity(const shard *s) {
    for (int d = 0; d < SHARD_MAX_DBS; d++)
        if (s->dbmap[d] != d) return 0;
    return 1;
}

/* ---------------- export ---------------- */

typedef struct ex_ctx {
    shard *s;
    uint64_t ver;
    db_export_fn fn;
    void *arg;
    const uint8_t *buckets;   /* export only keys of these buckets (a bitmap), NULL: all */
    rbuf out;    /* the encoded entry */
    rbuf snap;   /* a collection's snapshot payload */
} ex_ctx;

static void ex_emit(ex_ctx *x, log_entry *e) {
    e->flags |= LOG_F_RESYNC;
    e->shard = x->s->id;
    e->ver = x->ver;
    size_t len = log_entry_len(e->klen, e->vlen);
    x->out.len = 0;
    rbuf_reserve(&x->out, len);
    log_entry_encode(x->out.buf, e, 1);
    x->fn(x->arg, x->out.buf, len);
}

static int ex_wanted(const ex_ctx *x, const char *key, size_t klen) {
    if (!x->buckets) return 1;
    unsigned b = db_shard_bucket(key, klen);
    return (x->buckets[b / 8] >> (b % 8)) & 1;
}

/* An entry too large for one segment: its chunks, then the final entry,
 * all at the re-sync's version (bigval.c). Others go as they are. */
static void ex_emit_any(ex_ctx *x, log_entry *e) {
    if (!bigval_needed(e->klen, e->vlen) || e->klen > BIGVAL_MAX_KEY) {
        ex_emit(x, e);
        return;
    }
    uint32_t n = bigval_nchunks(e->klen, e->vlen);
    for (uint32_t i = 0; i < n; i++) {
        log_entry c;
        bigval_chunk(e, i, &c);
        ex_emit(x, &c);
    }
    char desc[BIGVAL_DESC_LEN];
    log_entry f;
    bigval_final(e, n, x->ver, desc, &f);
    ex_emit(x, &f);
}

static int ex_key(void *arg, uint64_t ref) {
    ex_ctx *x = arg;
    if (ref_is_obj(ref) && ref_obj(ref)->type == OBJ_STRING) {   /* a large string */
        const robj *o = ref_obj(ref);
        if (!ex_wanted(x, o->key, o->klen)) return 0;
        size_t len;
        const char *p = bigval_bytes(o, &len);
        log_entry e = {.type = LOG_SET, .db = o->db, .key = o->key, .klen = o->klen,
                       .val = p, .vlen = (uint32_t)len, .expire_ms = o->expire_ms};
        ex_emit_any(x, &e);
    } else if (ref_is_obj(ref)) {
        const robj *o = ref_obj(ref);
        if (!ex_wanted(x, o->key, o->klen)) return 0;
        x->snap.len = 0;
        obj_encode_snapshot(o, &x->snap);
        log_entry e = {.type = LOG_SNAPSHOT, .db = o->db, .key = o->key,
                       .klen = o->klen, .val = x->snap.buf, .vlen = (uint32_t)x->snap.len,
                       .expire_ms = o->expire_ms};
        ex_emit_any(x, &e);
    } else {
        /* Re-encoded: ref may be a sub-entry of a LOG_GROUP. */
        log_entry cur;
        log_entry_decode(pool_ptr(server.pool, ref), &cur);
        if (!ex_wanted(x, cur.key, cur.klen)) return 0;
        log_entry e = {.type = LOG_SET, .db = cur.db, .key = cur.key,
                       .klen = cur.klen, .val = cur.val, .vlen = cur.vlen,
                       .expire_ms = cur.expire_ms};
        ex_emit(x, &e);
    }
    return 0;
}

void db_shard_export_buckets(shard *s, uint64_t ver, const uint8_t *buckets, db_export_fn fn,
                             void *arg) {
    ex_ctx x = {.s = s, .ver = ver, .fn = fn, .arg = arg, .buckets = buckets};
    rbuf_init(&x.out);
    rbuf_init(&x.snap);
    if (!buckets && !db_shard_dbmap_identity(s)) {
        log_entry e = {.type = LOG_DBMAP, .key = "",
                       .val = (const char *)s->dbmap, .vlen = (uint32_t)sizeof(s->dbmap)};
        ex_emit(&x, &e);
    }
    if (!buckets && s->funcs_ref) {   /* the FUNCTION libraries (LOG_FUNCS) */
        log_entry f;
        log_entry_decode(pool_ptr(server.pool, s->funcs_ref), &f);
        log_entry e = {.type = LOG_FUNCS, .key = "", .val = f.val, .vlen = f.vlen};
        ex_emit(&x, &e);
    }
    index_foreach(s->idx, ex_key, &x);
    rbuf_free(&x.out);
    rbuf_free(&x.snap);
}

void db_shard_export(shard *s, uint64_t ver, db_export_fn fn, void *arg) {
    db_shard_export_buckets(s, ver, NULL, fn, arg);
}
