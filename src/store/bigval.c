/* bigval.c -- values larger than one log segment (up to proto-max-bulk-len):
 * strings, and collection effects or snapshots holding large elements.
 *
 * Why not one entry: every log entry lives inside one 4 MiB segment (the
 * segment is the unit of allocation, cleaning and replication framing), and
 * readers want a value's bytes contiguous (db_val.ptr, an element's bytes).
 * So a large entry is split in the log and joined in DRAM.
 *
 * Log form. A single-key write (db.c, write_chunked) whose entry E (a
 * LOG_SET, LOG_COLL_OP or LOG_SNAPSHOT) would not fit one segment writes,
 * under the key's shard lock and in one go:
 *   LOG_CHUNK x n   key, aux = byte offset, payload = the piece; each takes
 *                   the shard's next version, so they are versions
 *                   [first, first + n) with nothing of the shard between;
 *   E's header      flagged LOG_F_CHUNKED, version first + n, the key's
 *                   expiry, payload = descriptor (bigval.h): length, n, first.
 * Each chunk's entry spans a quarter segment (bigval_chunk_len; a whole one
 * for a key over 512 KiB), so a run of chunks fills segments without
 * waste. Nothing is applied for a chunk: it
 * is remembered as pending (per shard, by pool reference). The final entry
 * is the commit: applying it (db.c, db_apply_entry, the one path used by the
 * write itself, recovery, the digest thread of a backup and a re-sync; and
 * verify.c's replay for DEBUG RELOAD, with the same pending table)
 * gathers the pending chunks of its key in its version range, checks that
 * they tile the payload exactly and joins it (bigval_join). A string
 * becomes one robj of type OBJ_STRING whose data is the joined bytes; a
 * collection entry is applied with its joined payload through the same
 * db_apply_obj as any other (so HSET of a 100 MB field, or a snapshot of a
 * collection holding one, works like a small one). So:
 *   - atomic: a crash before the final entry is durable leaves chunks that
 *     nothing claims; recovery replays them as pending and forgets them at
 *     the end of the shard: the key keeps its old value. The reply waits for
 *     the final entry's batch like any write's.
 *   - pending chunks are kept per shard and told apart by key: a final
 *     entry gathers exactly the chunks of its key in [first, first + n).
 *   - abandoned runs: a write that cannot get log space half-way (another
 *     worker took the last segments) forgets its pending chunks and replies
 *     -OOM. What ends an abandoned run depends on the order entries come in:
 *       version order (a backup's digest thread, the write path): the next
 *       entry of the shard that cannot continue a run (anything but a chunk
 *       at a nonzero offset or a final entry) ends it, which is exact
 *       because a run's versions are consecutive;
 *       pool order (recovery and DEBUG RELOAD, bigval_pool_order): only each
 *       key's versions and each shard's barriers keep their order there
 *       (recovery.c, order_replay), and entries of other keys of the shard,
 *       of any version, come between a run's pieces. So a run ends only
 *       with its key's next effect (a newer run, a write, a deletion) or a
 *       barrier (FLUSHDB, db map, functions); what no final entry claims
 *       is forgotten at the end (bigval_forget), and the key keeps the
 *       value of its last complete entry.
 *   - recovery: a run's chunks are effects on their key, so they come
 *     before their final entry, wherever the cleaner moved them. A
 *     cleaner's duplicate of a chunk carries the same version and is
 *     skipped like any duplicate (recovery.c).
 *   - cleaner: the robj's history (object.h) holds the chunks and the final
 *     entry, so each is live while the value is current and is relocated
 *     piece by piece (db_ref_is_live / db_relocate); a pending chunk is live
 *     too (a backup's b-log segment may be cleaned between a run's chunks
 *     and its final entry), and is moved in the pending table. Overwrite or
 *     deletion retires the whole history at once.
 *   - replication: chunks and final travel as ordinary entries through the
 *     worker's links (each fits a TCP transport message). A re-sync or
 *     delta catch-up exports a large string or snapshot as chunks then a
 *     final entry, all flagged LOG_F_RESYNC at the re-sync's version
 *     (db_shard.c); the final entry of a re-sync gathers the chunks of its
 *     key at exactly that version.
 *     Recovery sorts a re-sync's chunks before the other entries of the same
 *     version, since position in the pool says nothing after cleaning.
 *   - space: the write first checks that the free segments (beyond the
 *     reserve ordinary writes leave) can hold the whole run; a value larger
 *     than that is refused at once with -OOM and nothing is written.
 *
 * DRAM. A large string is held whole in DRAM (like a collection), which is
 * what lets every string command read it unchanged. The rule is that its
 * bytes are held once, as in Redis 7:
 *   - receiving: the edge reads a bulk of 32 KiB or more that is still
 *     arriving straight into a buffer of exactly its size (bigval_buf_new;
 *     networking.c, "Large arguments"), never grown in the query buffer;
 *     a client that goes half-way frees it at once. Such an argument
 *     buffer is offered to the store while its command runs (db.h,
 *     x->own).
 *   - storing: the writer that applies the final entry of its own run
 *     (db.c, writer_has) takes what it still has instead of joining a copy
 *     from the chunks: a string written from an argument buffer is stored
 *     as that buffer (bigval_adopt; buffers are reference counted, so the
 *     edge keeps its own until the command is over, whoever frees the
 *     value meanwhile), and a collection entry is applied from the payload
 *     its command built. Recovery, a backup's digest, DEBUG RELOAD and a
 *     re-sync have no argument: they join the chunks (bigval_join), as
 *     before.
 * So, at its peak, a write of an n-byte string from a client costs n bytes
 * (the argument, which becomes the value; the old value is freed when the
 * new one is indexed), and MSET or MULTI/EXEC with one costs n too (below).
 * Not covered, 2n: a string built by the server (APPEND, SETRANGE, a
 * script's redis.call, which passes a Lua string; SET of a bulk that was
 * already whole in the query buffer, as when a client held by
 * back-pressure keeps sending): that copy, and the joined value. An
 * element costs the argument and the element in the collection, 2n as in
 * Redis 7, when it is the command's last argument and the command builds
 * its effects in the room in front of it (HSET, HSETNX, LPUSH, RPUSH:
 * db_obj_write_ops_tail, BIGVAL_ROOM); otherwise the command's effects
 * hold a copy too (t_hash.c...; the payload's type byte goes in front of
 * them in place, db_obj_write_ops): SADD of an n-byte member about 3n
 * (ZADD, and the other commands that build effects with db_obj_write, one
 * more copy). Replies copy the bytes as for any string. Figures:
 * tests/integration/test_bigmem.py, BENCHMARKS.md.
 *
 * Batches (db.c, db_batch_end: MULTI/EXEC, MSET, RENAME, COPY, SMOVE,
 * *STORE, scripts...). The group entry that makes a batch atomic must fit
 * one segment, so when it would not, the batch's largest strings and
 * collection entries (plan_runs) are written as chunk runs first, by the
 * same writer as a single-key run (write_run), and the group carries their
 * final entries, descriptor and all, in their place. Versions are handed
 * out in batch order, under the locks the batch holds for all its keys; a
 * run's chunks take theirs just before its final entry does, so in each
 * shard's versions every run is immediately followed by its final entry,
 * exactly as for a single-key write: recovery, backups and DEBUG RELOAD
 * need nothing new. (A group may hold several runs of one key: MULTI with
 * two large HSETs of one hash. Each final entry's descriptor names its own
 * version range.) In the log all the runs come before the group entry,
 * which commits them together: a crash before it is durable leaves runs
 * nothing claims, forgotten as above, and every key keeps its old value;
 * the reply waits for the group's batch like any write's. On the writer,
 * a run's chunks are noted pending only when its final entry is applied
 * (apply_run), so the pending table sees each run then its final, in the
 * same order as a replay. The room check covers all the runs and the group
 * before anything is written. A batch whose other entries still do not fit
 * one group (many keys) goes in pieces committed by one small entry (db.c,
 * "Batches larger than one group"). Still refused: a key longer than
 * BIGVAL_MAX_KEY with a value that does not fit one entry with it ("key
 * too large").
 *
 * Memory of a batch: the batch buffer (db.c) holds its values until the
 * group is logged, except a value too large for one entry (it can only go
 * in a chunk run): the batch holds that one outside its buffer (batch_add,
 * LOG_F_HELD), by reference when it is an argument buffer (MSET's own
 * argument; a MULTI queue keeps the connection's buffer rather than a copy,
 * multi.c), else as its one copy in a buffer a string can be stored as; its
 * final entry's apply stores it as that buffer. So MSET or MULTI/EXEC with
 * an n-byte value costs n, as a single SET; a script's costs the Lua string
 * and the batch's copy, 2n (before: the batch's copy and the joined value
 * on top). Values under one entry that a batch puts in chunk runs are
 * copied into its buffer as before (each under 4 MiB). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "bigval.h"
#include "db.h"
#include "hash.h"
#include "le.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

/* A large string's bytes. refs: the holders (the stored object, and an
 * argument buffer's owner at the edge, a batch: bigval_buf_*). room: free
 * bytes right in front of them (bigval_buf_room). */
typedef struct bigstr {
    size_t len;
    _Atomic uint32_t refs;
    char room[BIGVAL_ROOM];
    char bytes[];
} bigstr;

static bigstr *bigstr_of(const char *bytes) {
    return (bigstr *)(void *)(bytes - offsetof(bigstr, bytes));
}

#define BV_DUP 0x80   /* item flag: a duplicate of another chunk of its run */

typedef struct bv_item {
    uint64_t ver, ref;
    uint64_t khash;        /* hash_key of its db and key */
    uint32_t off, len;
    uint8_t flags;
} bv_item;

typedef struct bv_pend {
    bv_item *v;
    size_t n, cap;
    int pool_order;        /* entries come in pool order (bigval_pool_order) */
} bv_pend;

/* This file's state, one per server (server.h). */
struct bigval_state {
    bv_pend *pend;   /* [nshards], each under its shard's lock */
    int npend;
};

void bigval_state_new(void) {
    struct bigval_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.bigval_st = st;
}

void bigval_state_free(void) {
    free(server.bigval_st);   /* its lists: bigval_free_all */
    server.bigval_st = NULL;
}

#define pend (server.bigval_st->pend)   /* [nshards], each under its shard's lock */
#define npend (server.bigval_st->npend)

/* ---------------- sizes ---------------- */

static size_t align64(size_t n) { return (n + LOG_ALIGN - 1) & ~(size_t)(LOG_ALIGN - 1); }

/* A chunk's entry spans a quarter segment while its header and key take at
 * most half of that; a longer key (up to BIGVAL_MAX_KEY) gets a whole
 * segment per chunk, so each chunk still carries more value than key. */
static size_t chunk_span(size_t klen) {
    return align64(LOG_HDR_SIZE + klen) <= POOL_SEG_SIZE / 8 ? POOL_SEG_SIZE / 4 : POOL_SEG_SIZE;
}

size_t bigval_chunk_len(size_t klen) { return chunk_span(klen) - align64(LOG_HDR_SIZE + klen); }

uint32_t bigval_nchunks(size_t klen, size_t vlen) {
    size_t c = bigval_chunk_len(klen);
    return (uint32_t)((vlen + c - 1) / c);
}

uint64_t bigval_run_bytes(size_t klen, size_t vlen) {
    return (uint64_t)bigval_nchunks(klen, vlen) * chunk_span(klen);
}

/* The chunks, packed by segment, and one more segment for the one being
 * written when the run starts and the final entry. */
uint32_t bigval_segments(size_t klen, size_t vlen) {
    uint32_t per = (uint32_t)(POOL_SEG_SIZE / chunk_span(klen));
    return (bigval_nchunks(klen, vlen) + per - 1) / per + 1;
}

void bigval_desc_encode(char out[BIGVAL_DESC_LEN], uint64_t len, uint32_t nchunks,
                        uint64_t first_ver) {
    uint8_t *p = (uint8_t *)out;
    le_put_u64(p, len);
    le_put_u32(p + 8, nchunks);
    le_put_u32(p + 12, 0);
    le_put_u64(p + 16, first_ver);
}

void bigval_chunk(const log_entry *e, uint32_t i, log_entry *c) {
    size_t clen = bigval_chunk_len(e->klen), off = (size_t)i * clen;
    size_t len = e->vlen - off < clen ? e->vlen - off : clen;
    *c = (log_entry){.type = LOG_CHUNK, .flags = e->flags & LOG_F_RESYNC, .db = e->db,
                     .key = e->key, .klen = e->klen, .val = e->val + off,
                     .vlen = (uint32_t)len, .aux = off};
}

void bigval_final(const log_entry *e, uint32_t n, uint64_t first, char desc[BIGVAL_DESC_LEN],
                  log_entry *f) {
    bigval_desc_encode(desc, e->vlen, n, first);
    *f = *e;
    f->flags |= LOG_F_CHUNKED;
    f->val = desc;
    f->vlen = BIGVAL_DESC_LEN;
}

/* ---------------- pending chunks ---------------- */

void bigval_init(int nshards) {
    pend = calloc((size_t)nshards, sizeof(bv_pend));
    npend = nshards;
}

void bigval_free_all(void) {
    for (int i = 0; i < npend; i++) free(pend[i].v);
    free(pend);
    pend = NULL;
    npend = 0;
}

static bv_pend *pend_of(const shard *s) { return s->id < npend ? &pend[s->id] : NULL; }

/* Drop the items whose re-sync flag is `resync`. */
static void drop(bv_pend *p, int resync) {
    size_t keep = 0;
    for (size_t i = 0; i < p->n; i++)
        if ((p->v[i].flags & LOG_F_RESYNC) != (resync ? LOG_F_RESYNC : 0)) p->v[keep++] = p->v[i];
    p->n = keep;
}

/* Is pending item it a chunk of e's key? */
static int same_key(const bv_item *it, const log_entry *e, uint64_t khash) {
    if (it->khash != khash) return 0;
    log_entry c;
    log_entry_decode(pool_ptr(server.pool, it->ref), &c);
    return c.db == e->db && c.klen == e->klen && memcmp(c.key, e->key, e->klen) == 0;
}

/* e (not of a re-sync) ends the abandoned runs it cannot continue: in
 * version order every older one of the shard, in pool order those of its
 * key below its version (see the file comment). */
static void end_runs(bv_pend *p, const log_entry *e) {
    if (!p->pool_order) {
        drop(p, 0);
        return;
    }
    uint64_t h = hash_key(e->db, e->key, e->klen);
    size_t keep = 0;
    for (size_t i = 0; i < p->n; i++) {
        const bv_item *it = &p->v[i];
        if ((it->flags & LOG_F_RESYNC) || it->ver >= e->ver || !same_key(it, e, h))
            p->v[keep++] = *it;
    }
    p->n = keep;
}

static int keyed(const log_entry *e) {
    return e->type == LOG_SET || e->type == LOG_DEL || e->type == LOG_COLL_OP ||
           e->type == LOG_SNAPSHOT || e->type == LOG_CHUNK;
}

void bigval_note(shard *s, uint64_t ref, const log_entry *e) {
    bv_pend *p = pend_of(s);
    if (!p) return;
    int resync = (e->flags & LOG_F_RESYNC) != 0;
    if (e->type == LOG_CHUNK) {
        if (!resync && e->aux == 0 && p->n) end_runs(p, e);   /* a new run ends older ones */
        if (p->n == p->cap) {
            p->cap = p->cap ? p->cap * 2 : 16;
            p->v = realloc(p->v, p->cap * sizeof(bv_item));
            if (!p->v) abort();
        }
        p->v[p->n++] = (bv_item){e->ver, ref, hash_key(e->db, e->key, e->klen),
                                 (uint32_t)e->aux, e->vlen, e->flags};
        return;
    }
    if (!p->n) return;
    if (resync) {
        if (e->type == LOG_FLUSHDB) drop(p, 1);   /* the re-sync's end */
        return;
    }
    if (e->flags & LOG_F_CHUNKED) return;   /* claims its run (bigval_join) */
    if (keyed(e)) end_runs(p, e);
    else drop(p, 0);                        /* a barrier ends every run */
}

void bigval_pool_order(shard *s, int on) {
    bv_pend *p = pend_of(s);
    if (p) p->pool_order = on;
}

size_t bigval_forget(shard *s) {
    bv_pend *p = pend_of(s);
    size_t n = p ? p->n : 0;
    if (p) p->n = 0;
    return n;
}

int bigval_pending(shard *s, uint64_t ref) {
    bv_pend *p = pend_of(s);
    for (size_t i = 0; p && i < p->n; i++)
        if (p->v[i].ref == ref) return 1;
    return 0;
}

void bigval_pending_move(shard *s, uint64_t old_ref, uint64_t new_ref) {
    bv_pend *p = pend_of(s);
    for (size_t i = 0; p && i < p->n; i++)
        if (p->v[i].ref == old_ref) p->v[i].ref = new_ref;
}

/* ---------------- joining ---------------- */

static int by_offset(const void *a, const void *b) {
    const bv_item *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->ver < y->ver ? -1 : x->ver > y->ver;
}

/* Is pending item it a chunk of the run that final entry e completes: of
 * its key, and at its version for a re-sync, else in [first, first + n)
 * below e's? */
static int in_run(const bv_item *it, const log_entry *e, uint64_t khash, uint64_t first,
                  uint32_t n) {
    int resync = (e->flags & LOG_F_RESYNC) != 0;
    if (((it->flags & LOG_F_RESYNC) != 0) != resync) return 0;
    if (resync ? it->ver != e->ver : it->ver < first || it->ver - first >= n || it->ver >= e->ver)
        return 0;
    return same_key(it, e, khash);
}

int bigval_join(shard *s, const log_entry *e, int want_bytes, bigval_run *run) {
    memset(run, 0, sizeof(*run));
    bv_pend *p = pend_of(s);
    if (!p || e->vlen != BIGVAL_DESC_LEN) return -1;
    const uint8_t *d = (const uint8_t *)e->val;
    uint64_t total = le_get_u64(d), first = le_get_u64(d + 16);
    uint32_t n = le_get_u32(d + 8);
    uint64_t h = hash_key(e->db, e->key, e->klen);
    /* Move the run's chunks to the front, in offset order. */
    size_t m = 0;
    for (size_t i = 0; i < p->n; i++)
        if (in_run(&p->v[i], e, h, first, n)) {
            bv_item t = p->v[m];
            p->v[m++] = p->v[i];
            p->v[i] = t;
        }
    if (m) /* qsort's base must not be NULL, even for no elements (none pending) */
        qsort(p->v, m, sizeof(bv_item), by_offset);
    /* They must tile [0, total): a duplicate (a re-sync chunk the cleaner
     * copied) is skipped, anything else out of place is damage. */
    uint64_t pos = 0;
    uint32_t used = 0;
    int ok = total <= BIGVAL_MAX_LEN;
    for (size_t i = 0; ok && i < m; i++) {
        if (i > 0 && p->v[i].off == p->v[i - 1].off && p->v[i].len == p->v[i - 1].len) {
            p->v[i].flags |= BV_DUP;
            continue;
        }
        if (p->v[i].off != pos) ok = 0;
        pos += p->v[i].len;
        used++;
    }
    ok = ok && pos == total && used == n && n > 0;
    if (ok) {
        run->len = total;
        run->refs = malloc(sizeof(uint64_t) * used);
        run->buf = want_bytes ? bigval_buf_new(total, 0) : NULL;
        run->base = want_bytes ? bigstr_of(run->buf) : NULL;
        if (!run->refs) abort();
        for (size_t i = 0; i < m; i++) {
            if (p->v[i].flags & BV_DUP) continue;
            run->refs[run->n++] = p->v[i].ref;
            if (!want_bytes) continue;
            log_entry c;
            log_entry_decode(pool_ptr(server.pool, p->v[i].ref), &c);
            memcpy(run->buf + c.aux, c.val, c.vlen);
        }
    }
    /* The run is over either way. */
    memmove(p->v, p->v + m, (p->n - m) * sizeof(bv_item));
    p->n -= m;
    if (!(e->flags & LOG_F_RESYNC) && p->n) end_runs(p, e);
    return ok ? 0 : -1;
}

void bigval_run_free(bigval_run *run) {
    if (run->base) bigval_buf_release(run->buf);
    free(run->refs);
    memset(run, 0, sizeof(*run));
}

robj *bigval_string(const log_entry *e, uint64_t ref, bigval_run *run) {
    bigstr *b = run->base;
    robj *o = calloc(1, sizeof(robj) + e->klen);
    if (!o) abort();
    o->type = OBJ_STRING;
    o->db = e->db;
    o->klen = e->klen;
    memcpy(o->key, e->key, e->klen);
    o->data = b;
    o->expire_ms = e->expire_ms;
    o->ver = e->ver;
    run->base = NULL;   /* the object owns the bytes now */
    return o;
}

const char *bigval_bytes(const robj *o, size_t *len) {
    const bigstr *b = o->data;
    *len = b->len;
    return b->bytes;
}

void bigval_free_data(void *data) {
    bigstr *b = data;
    if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

/* ---------------- argument buffers ---------------- */

char *bigval_buf_new(size_t len, size_t slack) {
    bigstr *b = malloc(sizeof(bigstr) + len + slack);
    if (!b) abort();
    b->len = len;
    atomic_init(&b->refs, 1);
    return b->bytes;
}

size_t bigval_buf_len(const char *bytes) { return bigstr_of(bytes)->len; }

char *bigval_buf_room(const char *bytes, size_t n) {
    return n <= BIGVAL_ROOM ? bigstr_of(bytes)->bytes - n : NULL;
}

void bigval_buf_retain(const char *bytes) { atomic_fetch_add(&bigstr_of(bytes)->refs, 1); }

void bigval_buf_release(const char *bytes) {
    if (bytes) bigval_free_data(bigstr_of(bytes));
}

robj *bigval_adopt(const log_entry *e, const char *bytes, bigval_run *run) {
    bigval_buf_retain(bytes);
    run->base = bigstr_of(bytes);
    run->buf = (char *)bytes;
    return bigval_string(e, 0, run);
}
