/* db.h -- the keyspace: what commands read and write.
 *
 * Every command reaches the data through these functions; they hide the log,
 * the index, versions, expiry and the durability bookkeeping.
 *
 * Locking contract:
 *  - Functions that take a key require that the caller holds the lock of the
 *    key's shard. The command dispatcher takes the locks of every key a
 *    command names (per the command table's key positions) before calling it.
 *  - Functions without a key (db_scan, db_size, db_flush, db_swap,
 *    db_random_key) take shard locks themselves and must be called with no
 *    shard lock held.
 *
 * Durability: every read or write records in the db_ctx what the result
 * depends on: a write, its own entry (the worker's batch holding it); a read,
 * the version it observed (the shard's watermark). The connection holds the
 * reply until all of those are durable. Command code never deals with this.
 *
 * Batches: between db_batch_begin and db_batch_end, writes are collected and
 * then appended as ONE group entry (all or nothing after a crash) and applied
 * together. Lookups inside a batch see the batch's own earlier writes (a
 * collection changed in the batch is seen as a private copy with the
 * batch's effects applied; the real object changes at db_batch_end). Use a
 * batch for every command that writes more than one key (MSET, RENAME, DEL
 * with several keys, EXEC...).
 *
 * Refused writes: a write that cannot get log space (pool full) returns
 * DB_OOM and changes nothing; the command replies with db_error_text(x).
 * A value too large for one log segment, alone or in a batch, is logged in
 * pieces (bigval.h), or refused when the pool has no room for it; so is a
 * batch too large for one group entry, whatever its number of keys (db.c,
 * "Batches larger than one group"); what cannot be logged at all is a key
 * over 1 MiB with a value that does not fit one entry with it. Deletions may use a small reserve of segments, so DEL works
 * when SET no longer does. */
#ifndef ROWAN_DB_H
#define ROWAN_DB_H
#include <stddef.h>
#include <stdint.h>
#include "log.h"
#include "rbuf.h"

enum obj_type { OBJ_NONE = 0, OBJ_STRING = 1, OBJ_LIST, OBJ_SET, OBJ_ZSET, OBJ_HASH, OBJ_STREAM };

/* Why a write was refused (db_ctx.refused, INFO's oom_last_reason). */
enum db_refusal {
    DB_REFUSED_NONE,
    DB_REFUSED_TOO_BIG,      /* the entry cannot fit one log segment */
    DB_REFUSED_RECLAIMING,   /* pool full; the cleaner is reclaiming space */
    DB_REFUSED_LIVE_DATA,    /* pool full and nothing to reclaim */
    DB_REFUSED_NO_ROOM,      /* a large value needs more log space than is free */
    DB_REFUSED_KEY_TOO_BIG,  /* a key over BIGVAL_MAX_KEY with a value too large for one entry */
};
const char *db_refusal_name(int why);
/* Why the last pool-full refusal happened (DB_REFUSED_NONE if none yet). */
int db_last_refusal(void);

#define DB_OK   0
#define DB_OOM  (-1)     /* the write was refused; db_error_text says why: "OOM
                          * command not allowed when the storage pool is full:
                          * <why>", or a too-large entry */

/* "ERR value too large: ..." for an entry that cannot be logged at all (a
 * FUNCTION library set over 4 MiB), and "ERR key too large: ..." for a key
 * too long to be logged with its value (over 1 MiB, with a value that does
 * not fit one entry with it: bigval.h). */
extern const char *db_too_big_error;
extern const char *db_key_too_big_error;
/* The longest argument a write could store in one log entry: a log entry
 * minus its header. A longer value is logged in pieces when the pool has
 * room for it (db_check_string). */
#define DB_MAX_ARG_LEN (LOG_MAX_ENTRY - LOG_HDR_SIZE)


struct worker;

/* A key's current value, valid while the shard lock is held. */
typedef struct db_val {
    int type;              /* enum obj_type */
    const char *ptr;       /* OBJ_STRING: the bytes (in the pool, or batch) */
    size_t len;
    int64_t expire_ms;     /* absolute unix ms, 0 = no expiry */
    uint64_t ver;          /* version of the entry holding this value */
    struct robj *obj;      /* collections: the DRAM object (object.h) */
} db_val;

/* What a reply waits for. DEP_SHARD: the shard's durable watermark reaches
 * ver (reads: everything up to the observed version is durable). DEP_BATCH:
 * worker `id`'s group-commit batch number `ver` has landed (writes: the
 * entry itself is durable; it need not wait for other workers' batches). */
enum { DEP_SHARD = 0, DEP_BATCH = 1 };
typedef struct db_dep { uint16_t id; uint8_t kind; uint32_t epoch; uint64_t ver; } db_dep;
int db_dep_durable(const db_dep *d);
/* DEP_SHARD only: the shard changed hands since the dependency was taken
 * (shard.h serve_epoch); the reply must not be sent as if durable. */
int db_dep_broken(const db_dep *d);

typedef struct db_ctx {
    struct worker *w;      /* whose t-log writes go to */
    int wid;
    /* dependencies of the reply being built */
    db_dep *deps;
    int ndeps, capdeps;
    int refused;           /* why the last DB_OOM: enum db_refusal */
    /* the dispatcher's routing of the command's first key, reused by db.c */
    const char *hint_key; size_t hint_klen; struct shard *hint_shard;
    /* batch state (private to db.c) */
    int batching;          /* nesting depth of open batches */
    rbuf batch;            /* encoded sub-entries */
    int nbatch;
    struct robj **clones;  /* collections as the batch has changed them */
    int nclones, capclones;
    uint16_t batch_shards[64]; int nbatch_shards; /* informational */
    int batch_flushes;     /* FLUSHDB sub-entries in the batch */
    size_t *flush_at;      /* their offsets in batch (batch_flushes of them) */
    int capflush;
    int batch_dbmaps;      /* DBMAP (SWAPDB) sub-entries in the batch */
    size_t *bmap_at;       /* per shard: 1 + offset of its newest DBMAP sub-entry */
    uint64_t *bidx;        /* a large batch's lookup table (db.c, batch_find) */
    size_t bidx_cap, bidx_n;
    int bidx_on;
    const char **bigv;     /* the batch's large values, held outside `batch` (batch_add) */
    int nbigv, capbigv;
    int64_t batch_now;     /* mstime() when the outermost batch began (db.c, expiry_now) */
    /* Argument buffers (bigval_buf_new) the caller holds while the command
     * runs, set by the edge: a large string written from one of them, whole,
     * is stored as that buffer, not a copy (bigval.c, "DRAM"). */
    const char *const *own;
    int nown;
} db_ctx;

/* Error reply text for the last DB_OOM returned to this context. */
const char *db_error_text(const db_ctx *x);
/* Can a write of a key of klen bytes and a string of vlen bytes be stored
 * now? NULL if so, else the error to reply (a key too long for a value
 * that large, or more than the pool has room for: bigval.h; the latter is
 * counted as a refusal, INFO oom_*). For the edge, to refuse before
 * building or buffering a large value. */
const char *db_check_string(const db_ctx *x, size_t klen, uint64_t vlen);
void db_ctx_init(db_ctx *x, struct worker *w, int wid);
void db_ctx_free(db_ctx *x);
/* Forget recorded dependencies (the dispatcher calls this per command). */
void db_ctx_reset(db_ctx *x);

/* ---- single key (caller holds the key's shard lock) ---- */
/* 1 and fills *v when the key exists (expired keys are deleted lazily and
 * reported missing); 0 otherwise. */
int db_lookup(db_ctx *x, int db, const char *key, size_t klen, db_val *v);
/* Like db_lookup but does not count a keyspace hit/miss (for internal reads). */
int db_peek(db_ctx *x, int db, const char *key, size_t klen, db_val *v);
/* key := string val with absolute expiry expire_ms (0 = none). */
int db_set(db_ctx *x, int db, const char *key, size_t klen,
           const char *val, size_t vlen, int64_t expire_ms);
/* Delete; returns 1 if the key existed, 0 if not, DB_OOM. */
int db_del(db_ctx *x, int db, const char *key, size_t klen);
/* Change only the expiry (0 = persist). 1 done, 0 no such key, DB_OOM.
 * An expiry in the past deletes the key (and returns 1). */
int db_set_expire(db_ctx *x, int db, const char *key, size_t klen, int64_t expire_ms);

/* ---- collections (object.h) ----
 * Log the effects `ops` (encoded with obj_op) on key's collection of type
 * `type` and apply them, creating the collection when the key is absent.
 * The caller has checked that the key holds no other type, and must use
 * db_del instead when the effects would leave the collection empty. The
 * collection keeps its expiry. DB_OK or DB_OOM (nothing changed). Any robj
 * pointer obtained before stays valid (same object, updated in place). */
int db_obj_write(db_ctx *x, int db, const char *key, size_t klen, int type,
                 const char *ops, size_t opslen);
/* The same with the effects in ops, which it may change (the payload's
 * type byte goes in front of them in place): no copy of them is made, so
 * an element of n bytes costs n less (bigval.c, "DRAM"). The caller only
 * frees ops after. */
int db_obj_write_ops(db_ctx *x, int db, const char *key, size_t klen, int type, rbuf *ops);
/* The same with effects that end with tail/tlen, the whole of one of the
 * caller's argument buffers (x->own), not in ops: when ops fit the room in
 * front of it (bigval.h, BIGVAL_ROOM) the payload is built there and the
 * argument is logged and applied in place, so an element of n bytes is
 * held twice (the argument, the collection's copy) instead of three times,
 * as in Redis. Otherwise tail is appended to ops. */
int db_obj_write_ops_tail(db_ctx *x, int db, const char *key, size_t klen, int type, rbuf *ops,
                          const char *tail, size_t tlen);
/* key := a copy of collection src (RENAME, MOVE, COPY), with expiry
 * expire_ms, replacing whatever key held. DB_OK or DB_OOM. */
int db_set_copy(db_ctx *x, int db, const char *key, size_t klen, const struct robj *src,
                int64_t expire_ms);

/* ---- batches ----
 * Batches nest: an inner begin/end pair joins the outer batch (an inner end
 * returns DB_OK; the outermost end logs and applies everything). */
#define DB_BATCH_NESTS 1
void db_batch_begin(db_ctx *x);
/* Append and apply the batch. DB_OK, or DB_OOM with nothing applied. */
int db_batch_end(db_ctx *x);
/* Drop the open batch (every nesting level) without applying anything: a
 * script cut short by shutdown leaves none of its effects. */
void db_batch_abort(db_ctx *x);

/* ---- whole keyspace (no shard lock held by the caller) ---- */
/* In cluster mode these (and db_active_expire) cover only the shards we are
 * primary of, never the backup copies this node also holds. */
/* Visit keys of logical db `db`: returns the next cursor, 0 when done. count
 * is a hint of how many keys to visit. fn is called under the shard lock with
 * a key that is not expired; it must not call db_* functions. The cursor's
 * low 16 bits are the shard being walked: cursor = shard id starts at that
 * shard (CLUSTER GETKEYSINSLOT walks one shard that way). */
typedef void (*db_scan_fn)(void *arg, const char *key, size_t klen, const db_val *v);
uint64_t db_scan(db_ctx *x, int db, uint64_t cursor, long count, db_scan_fn fn, void *arg);
long long db_size(int db);
/* DBSIZE as x sees it: db_size plus the keys its open batch (EXEC, a
 * script) created, minus those it deleted or flushed. */
long long db_count(db_ctx *x, int db);
long long db_expires(int db);
/* db_expires as x sees it (INFO keyspace in EXEC or a script). */
long long db_count_expires(db_ctx *x, int db);
/* A random key of db into *out (rbuf reset first). 1 found, 0 empty. */
int db_random_key(db_ctx *x, int db, rbuf *out);
/* Remove every key of db (db = -1: all databases). DB_OK or DB_OOM. */
int db_flush(db_ctx *x, int db);
/* SWAPDB a b. DB_OK or DB_OOM. */
int db_swap(db_ctx *x, int a, int b);

/* Called after an expired key was deleted, by a lookup (lazily) or by
 * active expiry, with the key's shard lock held; db is the logical db. The
 * RESP edge sets it to raise keyspace notifications; NULL: nothing. */
extern void (*db_expired_hook)(int db, const char *key, size_t klen);
/* Called when db_lookup (a read that counts a keyspace miss) finds no key,
 * with the shard lock held: keyspace notifications' "keymiss". */
extern void (*db_miss_hook)(int db, const char *key, size_t klen);
/* Called after maxmemory evicted a key (its DEL logged), shard lock held:
 * keyspace notifications' "evicted". */
extern void (*db_evicted_hook)(int db, const char *key, size_t klen);

/* FUNCTION libraries: server metadata kept in the log (LOG_FUNCS), never
 * keys. db_set_funcs logs payload (the whole library set, in the edge's
 * format) in the lowest shard this node is primary of: DB_OK, DB_OOM, or
 * DB_NOSHARD when it is primary of none. The hook sees every LOG_FUNCS
 * entry applied (written, recovered, replicated), under that shard's lock;
 * it must only copy what it needs. */
#define DB_NOSHARD (-2)
typedef void (*db_funcs_fn)(int sid, const char *payload, size_t len);
void db_funcs_hook(db_funcs_fn fn);
int db_set_funcs(db_ctx *x, const char *payload, size_t len);

/* Active expiry: delete up to `budget` expired keys among shards s with
 * s % nworkers == wid. Returns how many it deleted. Called by workers. */
int db_active_expire(db_ctx *x, long budget);

/* ---- eviction support (evict.c) ----
 * Candidates are sampled one shard at a time: the caller holds the shard's
 * lock (db_evict_shard tells which shards it may evict from: those clients
 * see). */
typedef struct db_key_info {
    unsigned pdb;          /* physical db */
    const char *key;       /* valid while the shard lock is held */
    size_t klen;
    int64_t expire_ms;
    uint64_t hash;         /* the key's hash (evict.c's access clock slot) */
    long long bytes;       /* pool bytes its entries hold (what deleting it frees) */
} db_key_info;
int db_evict_shard(int sid);
/* A random key of shard s (volatile_only: among keys with an expiry). 1 and
 * *ki filled, 0 when there is none. */
int db_sample_key(struct shard *s, int volatile_only, uint64_t rnd, db_key_info *ki);
/* Delete the key as an eviction: one DEL entry, logged and replicated like
 * any DEL (the reply of the command that caused it waits for it). The
 * caller holds s's lock. 1 deleted, 0 gone already, DB_OOM. */
int db_evict_key(db_ctx *x, struct shard *s, unsigned pdb, const char *key, size_t klen);
/* The shard and hash behind key's access clock (evict.h), for OBJECT
 * IDLETIME / FREQ; the caller holds the key's shard lock. */
void db_key_clock(db_ctx *x, int db, const char *key, size_t klen, int *sid, uint64_t *hash);
/* Pool bytes held by live entries: the data set as stored. */
long long db_live_bytes(void);

/* Is seg a t-log segment that a write in progress (a batch's pieces, a
 * large value's chunks: db.c) may hold entries of that are not applied
 * yet? The cleaner must leave it alone until the write ends. */
int db_seg_in_flight(uint32_t seg);

/* Segments ordinary writes leave free, and whether the pool is down to them
 * (writes are then refused unless the cleaner makes room). */
uint32_t db_reserve_segments(void);
/* The smallest pool (bytes) a server with nworkers workers can write to:
 * the one rule for `pool-size` (checked when the pool is created, and for
 * an existing pool when it is opened). */
uint64_t db_min_pool_size(int nworkers);
int db_space_low(void);

/* ---- for startup, recovery.c and clean.c ----
 * Apply an effect found at pool offset ref to the in-memory state (index,
 * counters, live bytes). The caller holds the shard lock (or runs alone). */
struct shard;
struct log_entry;
void db_init_indexes(void);
/* Free every collection object and index (at shutdown, after the workers
 * stopped): the index holds tagged pointers no leak checker can follow. */
void db_free_all(void);
/* Apply one decoded entry (top-level or sub-entry) found at ref. Returns 0,
 * or -1 when a collection effect or snapshot does not fit the key's value:
 * checksummed but not understood (a bug or a newer format), or, replayed by
 * recovery, an effect whose predecessors the cleaner reclaimed after a later
 * deletion made them dead. It is ignored; the key keeps what the valid
 * entries gave it. */
int db_apply_entry(struct shard *s, uint64_t ref, const struct log_entry *e);
/* Log and count (recovery_corrupt_entries) an entry db_apply_entry refused. */
void db_report_refused(const struct shard *s, const struct log_entry *e);
/* Does the index hold exactly ref for this entry's key? (cleaner liveness) */
int db_ref_is_live(struct shard *s, uint64_t ref, const struct log_entry *e);
/* Repoint the key's index items from old_ref to new_ref (cleaner). */
void db_relocate(struct shard *s, uint64_t old_ref, uint64_t new_ref, const struct log_entry *e);
/* Cache hints for the keys of up to DB_PREFETCH_MAX commands about to run
 * in logical db `db` (db_prefetch.c): starts loading their index buckets,
 * entries and access-clock slots. Takes and drops shard locks with trylock;
 * call with no shard lock held. Changes nothing. */
#define DB_PREFETCH_MAX 32
void db_prefetch_keys(int db, int n, const char *const *keys, const size_t *klens);

#endif
