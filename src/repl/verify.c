/* verify.c -- check that the log replays to what memory holds (DEBUG
 * RELOAD: "restart from the log and verify the contents").
 *
 * Redis's DEBUG RELOAD saves an RDB and loads it back. Rowan's data already
 * lives in its log, which is what a restart loads; rebuilding the live
 * indexes under running clients would mean stopping every worker, so this
 * does the verifying half in place: it replays the log as recovery would
 * (recovery_replay_visit: the same scan, pool order and rules) into scratch
 * state beside the live indexes, and compares the two shard by shard with
 * the dataset digest (db_shard.h: per-key hashes of logical db, key, type,
 * expiry and value, summed). Equal digests mean a restart now would serve
 * exactly what memory serves.
 *
 * The scratch state of a shard is a dict from (physical db, key) to the
 * key's value: a string's log reference, or a collection rebuilt with the
 * type modules' own apply/load (object.h), as db_apply_entry would build
 * it, but touching no index, live-byte count or FUNCTION library. Only one
 * shard's scratch exists at a time.
 *
 * The log must hold still meanwhile: the caller takes the cleaner
 * (clean_hold, so no entry moves or disappears) and then every shard lock
 * (so no write is appended), which also stalls every client for the
 * duration, as Redis's DEBUG RELOAD does. Standalone servers only: a
 * cluster node's log also holds its backups' entries, whose indexes the
 * digest thread builds by other rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify.h"
#include "bigval.h"
#include "clean.h"
#include "db.h"
#include "db_shard.h"
#include "dict.h"
#include "log.h"
#include "object.h"
#include "pool.h"
#include "recovery.h"
#include "server.h"
#include "shard.h"

/* Packed: the dict stores values right after the key bytes, unaligned
 * (dict.c), so every access must be an unaligned one (UBSan). */
typedef struct __attribute__((packed)) sval {
    int64_t expire_ms;
    uint64_t ver;
    uint64_t ref;          /* a string's LOG_SET entry */
    robj *o;               /* a collection (or a large string), or NULL */
} sval;

typedef struct vstate {
    int sid;               /* the shard being replayed, -1 none yet */
    dict *keys;            /* (u16 pdb, key) -> sval */
    uint16_t dbmap[SHARD_MAX_DBS];
    uint64_t dbmap_ver;
    uint64_t *sum;         /* per shard: the replayed digest parts */
    long long *n;
    rbuf name;             /* scratch for composite keys */
} vstate;

static const char *composite(vstate *v, unsigned pdb, const char *key, size_t klen, size_t *len) {
    uint16_t d = (uint16_t)pdb;
    v->name.len = 0;
    rbuf_append(&v->name, (const char *)&d, 2);
    rbuf_append(&v->name, key, klen);
    *len = v->name.len;
    return v->name.buf;
}

static sval *lookup(vstate *v, const log_entry *e) {
    size_t len;
    const char *k = composite(v, e->db, e->key, e->klen, &len);
    dict_entry *de = dict_find(v->keys, k, len);
    return de ? (sval *)de->val : NULL;
}

static void put(vstate *v, const log_entry *e, const sval *val) {
    size_t len;
    const char *k = composite(v, e->db, e->key, e->klen, &len);
    dict_set(v->keys, k, len, val, sizeof(*val));
}

static void drop(vstate *v, const log_entry *e) {
    sval *old = lookup(v, e);
    if (!old) return;
    if (old->o) obj_free(old->o);
    size_t len;
    const char *k = composite(v, e->db, e->key, e->klen, &len);
    dict_del(v->keys, k, len);
}

/* ---- LOG_FLUSHDB: every key of physical db pdb (0xffff all) below ver ---- */

typedef struct flush_list {
    unsigned pdb;
    uint64_t below;
    rbuf names;            /* u32 length + composite key, each */
} flush_list;

static int collect_flushed(void *arg, const dict_entry *de) {
    flush_list *f = arg;
    const sval *val = de->val;
    uint16_t pdb;
    memcpy(&pdb, de->key, 2);
    if ((f->pdb != 0xffff && pdb != f->pdb) || val->ver >= f->below) return 0;
    uint32_t len = (uint32_t)de->klen;
    rbuf_append(&f->names, (const char *)&len, 4);
    rbuf_append(&f->names, de->key, de->klen);
    return 0;
}

static void flush(vstate *v, unsigned pdb, uint64_t below) {
    flush_list f = {pdb, below, {0}};
    rbuf_init(&f.names);
    dict_foreach(v->keys, collect_flushed, &f);
    for (size_t at = 0; at < f.names.len;) {
        uint32_t len;
        memcpy(&len, f.names.buf + at, 4);
        const char *k = f.names.buf + at + 4;
        dict_entry *de = dict_find(v->keys, k, len);
        if (de && ((sval *)de->val)->o) obj_free(((sval *)de->val)->o);
        dict_del(v->keys, k, len);
        at += 4 + len;
    }
    rbuf_free(&f.names);
}

static void reset_dbmap(vstate *v) {
    for (int d = 0; d < SHARD_MAX_DBS; d++) v->dbmap[d] = (uint16_t)d;
    v->dbmap_ver = 0;
}

/* db_apply_obj's rules: the key's collection if it is of the entry's type,
 * else a new empty one in its place; an effect that does not fit leaves
 * the object as it is. */
static void apply_obj(vstate *v, const log_entry *e) {
    int type = e->vlen ? (uint8_t)e->val[0] : 0;
    sval *cur = lookup(v, e);
    robj *o = cur && cur->o && cur->o->type == type ? cur->o : NULL;
    if (!o) {
        o = obj_new(type, e->db, e->key, e->klen);
        if (!o) return;
        drop(v, e);
        sval val = {0, 0, 0, o};
        put(v, e, &val);
        cur = lookup(v, e);
    }
    if (e->type == LOG_SNAPSHOT) obj_load_snapshot(o, e->val, e->vlen);
    else obj_apply_payload(o, e->val, e->vlen);
    o->expire_ms = e->expire_ms;
    o->ver = e->ver;
    cur->expire_ms = e->expire_ms;
    cur->ver = e->ver;
}

/* ---- the digest of a shard's scratch state ---- */

typedef struct sum_ctx {
    const vstate *v;
    uint16_t logical[SHARD_MAX_DBS];
    uint64_t sum;
    long long n;
} sum_ctx;

static int sum_key(void *arg, const dict_entry *de) {
    sum_ctx *c = arg;
    const sval *val = de->val;
    uint16_t pdb;
    memcpy(&pdb, de->key, 2);
    unsigned ldb = c->logical[pdb % SHARD_MAX_DBS];
    const char *key = de->key + 2;
    size_t klen = de->klen - 2;
    if (val->o && val->o->type == OBJ_STRING) {   /* a large string (bigval.h) */
        size_t len;
        const char *p = bigval_bytes(val->o, &len);
        c->sum += db_key_digest(ldb, key, klen, val->expire_ms, p, len, NULL);
    } else if (val->o) {
        c->sum += db_key_digest(ldb, key, klen, val->expire_ms, NULL, 0, val->o);
    } else {
        log_entry e;
        log_entry_decode(pool_ptr(server.pool, val->ref), &e);
        c->sum += db_key_digest(ldb, key, klen, val->expire_ms, e.val, e.vlen, NULL);
    }
    c->n++;
    return 0;
}

static int free_obj(void *arg, const dict_entry *de) {
    (void)arg;
    if (((const sval *)de->val)->o) obj_free(((const sval *)de->val)->o);
    return 0;
}

/* The shard being replayed is complete: record its digest, start afresh. */
static void shard_done(vstate *v) {
    if (v->sid >= 0) {
        sum_ctx c = {v, {0}, 0, 0};
        for (int l = 0; l < SHARD_MAX_DBS; l++) c.logical[v->dbmap[l] % SHARD_MAX_DBS] = (uint16_t)l;
        dict_foreach(v->keys, sum_key, &c);
        v->sum[v->sid] = c.sum;
        v->n[v->sid] = c.n;
        bigval_forget(&server.shards[v->sid]);   /* runs a crash cut short */
        bigval_pool_order(&server.shards[v->sid], 0);
        dict_foreach(v->keys, free_obj, NULL);
        dict_free(v->keys);
    }
    v->keys = dict_new();
    reset_dbmap(v);
}

/* The final entry of a large value (bigval.h): its run joined, applied as
 * db_apply_big does. The run's chunks wait in the shard's own pending
 * table, empty meanwhile (every shard lock is held: no write is half-way,
 * and a standalone server has no backup copies). */
static void apply_big(vstate *v, uint64_t ref, const log_entry *e) {
    bigval_run run;
    if (bigval_join(&server.shards[v->sid], e, 1, &run) != 0) return;
    if (e->type == LOG_SET) {
        drop(v, e);
        sval val = {e->expire_ms, e->ver, 0, bigval_string(e, ref, &run)};
        put(v, e, &val);
    } else {
        log_entry j = *e;
        j.flags &= (uint8_t)~LOG_F_CHUNKED;
        j.val = run.buf;
        j.vlen = (uint32_t)run.len;
        apply_obj(v, &j);
    }
    bigval_run_free(&run);
}

static void on_effect(void *arg, int sid, uint64_t ref, const log_entry *e) {
    vstate *v = arg;
    if (sid != v->sid) {
        shard_done(v);
        v->sid = sid;
        bigval_pool_order(&server.shards[sid], 1);   /* recovery's order */
    }
    bigval_note(&server.shards[sid], ref, e);
    if (e->flags & LOG_F_CHUNKED) {
        apply_big(v, ref, e);
        return;
    }
    switch (e->type) {
    case LOG_SET: {
        drop(v, e);
        sval val = {e->expire_ms, e->ver, ref, NULL};
        put(v, e, &val);
        break;
    }
    case LOG_COLL_OP:
    case LOG_SNAPSHOT: apply_obj(v, e); break;
    case LOG_DEL: drop(v, e); break;
    case LOG_FLUSHDB:
        if (e->flags & LOG_F_RESYNC) {
            flush(v, 0xffff, e->ver);
            if (v->dbmap_ver < e->ver) reset_dbmap(v);
        } else {
            flush(v, e->db, e->ver);
        }
        break;
    case LOG_DBMAP: {
        size_t n = e->vlen / 2;
        for (size_t i = 0; i < n && i < SHARD_MAX_DBS; i++) memcpy(&v->dbmap[i], e->val + 2 * i, 2);
        v->dbmap_ver = e->ver;
        break;
    }
    default: break;   /* FUNCTION libraries are not keys */
    }
}

int verify_log(char *err, size_t errlen) {
    int ns = server.nshards;
    vstate v = {.sid = -1};
    v.sum = calloc((size_t)ns, sizeof(uint64_t));
    v.n = calloc((size_t)ns, sizeof(long long));
    rbuf_init(&v.name);
    clean_hold();
    for (int i = 0; i < ns; i++) shard_lock(&server.shards[i]);
    int rc = recovery_replay_visit(on_effect, &v, err, errlen);
    if (rc == 0) {
        shard_done(&v);
        for (int i = 0; i < ns && rc == 0; i++) {
            uint64_t sum;
            long long n;
            db_shard_digest_parts(&server.shards[i], &sum, &n);
            if (sum != v.sum[i] || n != v.n[i]) {
                snprintf(err, errlen, "shard %d: memory holds %lld keys, the log replays to %lld%s",
                         i, n, v.n[i], n == v.n[i] ? " with other contents" : "");
                rc = 1;
            }
        }
    }
    if (v.sid >= 0) {
        bigval_forget(&server.shards[v.sid]);
        bigval_pool_order(&server.shards[v.sid], 0);
    }
    for (int i = ns - 1; i >= 0; i--) shard_unlock(&server.shards[i]);
    clean_release();
    if (v.keys) {
        dict_foreach(v.keys, free_obj, NULL);
        dict_free(v.keys);
    }
    rbuf_free(&v.name);
    free(v.sum);
    free(v.n);
    return rc;
}
