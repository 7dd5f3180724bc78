/* recovery.c -- rebuild everything from the logs (DESIGN.md §3 "Recovery").
 *
 * 1. Read the segment meta table; every segment that is not free holds log.
 * 2. Scan each such segment from its start (seg_scan). Entries are 64-byte
 *    aligned and self-checking, so a scan needs no tail pointer: the log
 *    ends where only zeroes follow (free segments are zeroed before reuse).
 *    What fails its checksum is either a torn tail or damage, told apart by
 *    the segment's state and recorded durable end (recovery.h, pool.h):
 *      - open segment, at or after its end: a write that was in flight at
 *        the crash, never acknowledged. The rest of the segment is dropped
 *        (prefix semantics: valid entries after a gap there were in flight
 *        too) and logged;
 *      - anywhere else: damage. It is reported (CORRUPTION lines naming the
 *        region, its first entry and the shards it hit) and skipped by
 *        resynchronising at the next valid 64-byte aligned entry.
 *    A region that rowan-check-pool --fix accepted is a LOG_LOSS entry: it
 *    parses, and is reported (log, INFO) at every start.
 * 3. Damage stops a standalone server here, before anything in the pool is
 *    changed: the acknowledged entries in it are gone, and serving what is
 *    left would answer with older values. A cluster node goes on and marks
 *    the shards that lost entries (shard.h), to be fetched from replicas.
 * 4. Collect (shard, version, reference) of every effect, unpacking groups
 *    (a batch's pieces only when their commit is in the pool: db.c), and
 *    apply them through the same db_apply_entry the write path uses, in
 *    an order that keeps each key's versions, and each shard's barriers
 *    (FLUSHDB, db map, re-syncs), in version order but otherwise follows the
 *    pool (order_replay): so the replay reads the pool sequentially, and a
 *    recovered index is exactly the state the writes produced, with
 *    live-byte counts right.
 * 5. Shard versions restart above the largest version seen; segments the
 *    crash left open are sealed as committed with the end of their log, and
 *    bytes dropped after a log's end are zeroed, so that the next start
 *    reads the same log and never takes them for damage.
 *
 * A pool written with a different shard count cannot be replayed (versions
 * are per shard), so an entry whose key maps to another shard stops startup
 * with a clear error rather than building a wrong index.
 *
 * rowan-check-pool runs steps 1-2 through recovery_check (the same scan,
 * nothing collected, nothing changed) and accepts losses through
 * recovery_accept_loss.
 *
 * Progress (INFO loading_*, the log every second): loading_total_bytes is
 * the in-use segments' size; loading_loaded_bytes moves through its first
 * half as segments are scanned and through its second half as the ordered
 * effects are applied (a byte of log is read once by each pass). A
 * shutdown request (SIGTERM, SHUTDOWN while loading) stops recovery between
 * two segments or effects: only DRAM state is lost, the pool is left as a
 * finished recovery would leave it or untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "recovery.h"
#include "bigval.h"
#include "cluster.h"
#include "daemon.h"
#include "db.h"
#include "hash.h"
#include "le.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

/* ---------------- scanning a segment ---------------- */

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static uint32_t align64(uint32_t n) { return (n + LOG_ALIGN - 1) & ~(uint32_t)(LOG_ALIGN - 1); }

static const uint8_t *seg_bytes(uint32_t seg) {
    return pool_ptr(server.pool, pool_seg_offset(server.pool, seg));
}

/* Offset of the next valid entry at or after pos (64-byte steps), or -1. */
static int64_t next_valid(const uint8_t *seg, uint32_t pos) {
    for (; pos + LOG_HDR_SIZE <= POOL_SEG_SIZE; pos += LOG_ALIGN)
        if (log_entry_check(seg + pos, POOL_SEG_SIZE - pos, NULL)) return pos;
    return -1;
}

/* End of the last nonzero byte at or after pos (pos if there is none). */
static uint32_t nonzero_end(const uint8_t *seg, uint32_t pos) {
    uint32_t end = POOL_SEG_SIZE;
    while (end > pos && seg[end - 1] == 0) end--;
    return end;
}

/* Does e, read from a damaged region (nothing in it is trusted), look like
 * an entry of this pool? Marks the shards it names in mark (may be NULL;
 * a group may mark some before it fails). */
static int entry_shards(const log_entry *e, uint8_t *mark) {
    switch (e->type) {
    case LOG_SET: case LOG_DEL: case LOG_COLL_OP: case LOG_SNAPSHOT: case LOG_CHUNK:
        if (e->shard >= server.nshards || shard_of_key(e->key, e->klen)->id != e->shard) return 0;
        break;
    case LOG_COMMITVER:
        /* one marker of several shards (log.h): it holds no data of any */
        if (e->shard == LOG_SHARD_NONE) return e->vlen > 0 && e->vlen % 8 == 0 && e->klen == 0;
        if (e->shard >= server.nshards) return 0;
        break;
    case LOG_FLUSHDB: case LOG_DBMAP: case LOG_RESYNC: case LOG_FUNCS:
        if (e->shard >= server.nshards) return 0;
        break;
    case LOG_GROUP: {
        if (e->shard != LOG_SHARD_NONE) return 0;
        if (log_is_piece_commit(e)) return e->vlen == LOG_COMMIT_LEN;
        size_t pos = 0;
        uint64_t n = 0;
        log_entry sub;
        while (log_group_next(e, &pos, &sub, NULL)) {
            if (!entry_shards(&sub, mark)) return 0;
            n++;
        }
        return n > 0 && n == e->aux;
    }
    default: /* LOG_LOSS: what it names lies in a payload no checksum vouches for */
        return 0;
    }
    if (mark) mark[e->shard] = 1;
    return 1;
}

/* Follow entry headers from off while they look like entries' and fit
 * before limit. Returns where the chain stops; *consistent says whether each
 * header was also consistent (entry_shards), marking into mark. */
static uint32_t walk_headers(const uint8_t *p, uint32_t off, uint32_t limit, uint8_t *mark,
                             int *consistent) {
    uint32_t pos = off;
    *consistent = 1;
    while (pos < limit) {
        log_entry e;
        size_t n = log_entry_header(p + pos, limit - pos, &e);
        if (!n) break;
        if (!entry_shards(&e, mark)) *consistent = 0;
        pos += (uint32_t)log_entry_span(n);
    }
    return pos;
}

/* Report the damaged region [pos, stop) of seg. */
static void damage(seg_scan_report *rep, uint32_t seg, const struct seg_meta *m, uint32_t end,
                   uint32_t pos, uint32_t stop, int follows) {
    seg_damage d = {.seg = seg, .off = pos, .len = stop - pos, .state = m->state, .end = end,
                    .follows = follows};
    rep->corrupt++;
    rep->corrupt_bytes += d.len;
    if (rep->on_damage) rep->on_damage(rep->damage_arg, &d);
}

void seg_scan(uint32_t seg, seg_entry_fn fn, void *arg, seg_scan_report *rep) {
    struct seg_meta m = pool_seg_meta(server.pool, seg);
    uint64_t base = pool_seg_offset(server.pool, seg);
    const uint8_t *p = pool_ptr(server.pool, base);
    int open = m.state == SEG_USING;
    uint32_t end = m.end < POOL_SEG_SIZE ? m.end : POOL_SEG_SIZE;
    uint32_t pos = 0;
    rep->log_end = 0;
    /* A segment with no recorded end whose first bytes are zero holds no
     * log: either nothing was written yet, or a crash cut pool_seg_free
     * short after it zeroed the first page (the cleaner synced the copies
     * of everything live before it began freeing), so what follows is stale
     * and must not be replayed. */
    if (end == 0 && all_zero(p, 8)) {
        rep->stale_bytes += nonzero_end(p, 0);
        return;
    }
    while (pos + LOG_HDR_SIZE <= POOL_SEG_SIZE) {
        log_entry e;
        size_t n = log_entry_check(p + pos, POOL_SEG_SIZE - pos, &e);
        if (n) {
            rep->entries++;
            fn(arg, base + pos, &e);
            pos += (uint32_t)log_entry_span(n);
            rep->log_end = pos;
            continue;
        }
        uint32_t tail = nonzero_end(p, pos);
        int64_t next = tail > pos ? next_valid(p, pos + LOG_ALIGN) : -1;
        if (pos >= end && (next < 0 || open)) {
            /* Past every byte known durable: the log ends here. In an open
             * segment this is a torn tail (whatever follows was in flight);
             * in a sealed one, stray bytes after its end. */
            if (tail > pos) {
                rep->dropped_bytes += tail - pos;
                rep->dropped_at = pos;
            }
            return;
        }
        if (next >= 0) {
            damage(rep, seg, &m, end, pos, (uint32_t)next, 1);
            pos = (uint32_t)next;
            rep->log_end = pos;
            continue;
        }
        /* Nothing valid follows, but the log should reach `end`: its last
         * entries are damaged or missing. The region covers whatever they
         * left, and as far as their headers claim to reach. */
        int ignored;
        uint32_t stop = end > align64(tail) ? end : align64(tail);
        uint32_t chain = walk_headers(p, pos, POOL_SEG_SIZE, NULL, &ignored);
        if (chain > stop) stop = chain;
        damage(rep, seg, &m, end, pos, stop, 0);
        rep->log_end = stop;
        return;
    }
}

int seg_damage_shards(const seg_damage *d, uint8_t *mark) {
    int consistent;
    uint32_t limit = d->off + d->len;
    uint32_t stop = walk_headers(seg_bytes(d->seg), d->off, limit, mark, &consistent);
    return consistent && stop == limit && stop > d->off;
}

/* ---------------- describing damage ---------------- */

static const char *const type_names[LOG_TYPE_MAX] = {
    [LOG_SET] = "SET", [LOG_DEL] = "DEL", [LOG_FLUSHDB] = "FLUSHDB", [LOG_DBMAP] = "SWAPDB map",
    [LOG_GROUP] = "group (MULTI/EXEC, MSET...)", [LOG_COMMITVER] = "CommitVer marker",
    [LOG_COLL_OP] = "collection effect", [LOG_SNAPSHOT] = "collection snapshot",
    [LOG_RESYNC] = "catch-up marker", [LOG_LOSS] = "accepted loss",
    [LOG_FUNCS] = "FUNCTION libraries", [LOG_CHUNK] = "piece of a large value",
};

/* key, quoted, with non-printable bytes escaped, at most ~48 bytes of it. */
static void quote_key(const char *key, uint32_t klen, char *buf, size_t len) {
    size_t o = 0;
    buf[o++] = '"';
    for (uint32_t i = 0; i < klen && o + 8 < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (i == 48) {
            o += (size_t)snprintf(buf + o, len - o, "...");
            break;
        }
        if (c >= 32 && c < 127 && c != '"' && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
    }
    snprintf(buf + o, len - o, "\"");
}

/* "t-log of worker 1", "b-log"... from the segment's owner. */
static void seg_kind(uint32_t seg, char *buf, size_t len) {
    struct seg_meta m = pool_seg_meta(server.pool, seg);
    const char *state = m.state == SEG_USING ? "open" : "sealed";
    switch (m.owner) {
    case OWNER_WORKER: snprintf(buf, len, "%s t-log of worker %u", state, m.owner_id); break;
    case OWNER_CONTROL:
        if (m.owner_id) snprintf(buf, len, "%s backup log of worker %u", state, m.owner_id - 1u);
        else snprintf(buf, len, "%s b-log", state);
        break;
    case OWNER_CLEAN: snprintf(buf, len, "%s clean log", state); break;
    default: snprintf(buf, len, "%s log", state); break;
    }
}

/* The region's first entry, from its header when that is readable:
 * 'SET "k1" (db 0) of shard 49, version 2'. */
static void first_entry(const seg_damage *d, char *buf, size_t len) {
    log_entry e;
    char key[224];
    if (!log_entry_header(seg_bytes(d->seg) + d->off, d->len, &e) || !entry_shards(&e, NULL))
        snprintf(buf, len, "unreadable");
    else if (e.type == LOG_GROUP)
        snprintf(buf, len, "a group of %llu effects", (unsigned long long)e.aux);
    else if (e.klen) {
        quote_key(e.key, e.klen, key, sizeof(key));
        snprintf(buf, len, "%s %s (db %u) of shard %u, version %llu", type_names[e.type], key,
                 e.db, e.shard, (unsigned long long)e.ver);
    } else
        snprintf(buf, len, "%s (db %u) of shard %u, version %llu", type_names[e.type], e.db,
                 e.shard, (unsigned long long)e.ver);
}

void seg_damage_describe(const seg_damage *d, char *buf, size_t len) {
    char kind[64], what[160], first[400];
    seg_kind(d->seg, kind, sizeof(kind));
    if (d->follows)
        snprintf(what, sizeof(what), "fail their checksum, valid entries follow");
    else
        snprintf(what, sizeof(what), "fail their checksum or are missing, up to where the "
                 "log is recorded durable (%u)", d->end);
    first_entry(d, first, sizeof(first));
    snprintf(buf, len, "segment %u (%s) offset %u (pool offset %llu): %u bytes %s; first "
             "entry: %s", d->seg, kind, d->off,
             (unsigned long long)(pool_seg_offset(server.pool, d->seg) + d->off), d->len, what,
             first);
}

void recovery_describe_shards(const uint8_t *mark, int all, char *buf, size_t len) {
    if (all) {
        snprintf(buf, len, "any of the %d shards (the damaged entries cannot be told)",
                 server.nshards);
        return;
    }
    char ids[512] = "", slots[512] = "";
    size_t oi = 0, os = 0;
    int n = 0, i = 0;
    while (i < server.nshards) {
        if (!mark[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < server.nshards && mark[j + 1]) j++;
        const char *sep = n ? ", " : "";
        if (oi < sizeof(ids))
            oi += (size_t)(i == j ? snprintf(ids + oi, sizeof(ids) - oi, "%s%d", sep, i)
                                  : snprintf(ids + oi, sizeof(ids) - oi, "%s%d-%d", sep, i, j));
        if (os < sizeof(slots))
            os += (size_t)snprintf(slots + os, sizeof(slots) - os, "%s%u-%u", sep,
                                   server.shards[i].first_slot, server.shards[j].last_slot);
        n += j - i + 1;
        i = j + 1;
    }
    if (!n) snprintf(buf, len, "no shard");
    else snprintf(buf, len, "shard%s %s (slots %s)", n > 1 ? "s" : "", ids, slots);
}

/* ---------------- accepted losses (LOG_LOSS) ----------------
 *
 * Payload, little endian:
 *   0  u8   format (1)
 *   1  u8   flags: 1 = every shard may have lost entries
 *   2  u16  number of shard ids that follow
 *   4  u32  damaged bytes the entry stands for (its own span)
 *   8  u64  when the loss was accepted, unix ms
 *  16  u16  shard ids
 *  ..       the damage's description, NUL-terminated (cut to fit)
 *  ..       zero padding to the end of the region */
enum { LOSS_FORMAT = 1, LOSS_F_ALL = 1, LOSS_FIXED = 16 };

int loss_decode(const log_entry *e, loss_info *out) {
    const uint8_t *v = (const uint8_t *)e->val;
    if (e->type != LOG_LOSS || e->vlen < LOSS_FIXED || v[0] != LOSS_FORMAT) return -1;
    out->all_shards = v[1] & LOSS_F_ALL;
    out->nshards = le_get_u16(v + 2);
    out->bytes = le_get_u32(v + 4);
    out->accepted_ms = (int64_t)le_get_u64(v + 8);
    if (LOSS_FIXED + 2ull * out->nshards > e->vlen) return -1;
    out->shards = v + LOSS_FIXED;
    size_t t = LOSS_FIXED + 2u * out->nshards, n = 0;
    while (t + n < e->vlen && v[t + n] && n + 1 < sizeof(out->text)) n++;
    memcpy(out->text, v + t, n);
    out->text[n] = 0;
    return 0;
}

int recovery_accept_loss(const seg_damage *d, int64_t now_ms, char *err, size_t errlen) {
    if (d->len < LOG_ALIGN || d->len % LOG_ALIGN) {
        snprintf(err, errlen, "damaged region of %u bytes is not whole 64-byte slots", d->len);
        return -1;
    }
    uint8_t *mark = calloc((size_t)server.nshards, 1);
    size_t vlen = d->len - LOG_HDR_SIZE;
    uint8_t *val = calloc(1, vlen), *entry = malloc(d->len);
    if (!mark || !val || !entry) {
        free(mark), free(val), free(entry);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int all = !seg_damage_shards(d, mark);
    uint32_t n = 0;
    for (int i = 0; !all && i < server.nshards; i++) n += mark[i];
    if (LOSS_FIXED + 2ull * n > vlen) all = 1; /* no room to list them */
    val[0] = LOSS_FORMAT;
    val[1] = all ? LOSS_F_ALL : 0;
    le_put_u16(val + 2, (uint16_t)(all ? 0 : n));
    le_put_u32(val + 4, d->len);
    le_put_u64(val + 8, (uint64_t)now_ms);
    size_t o = LOSS_FIXED;
    for (int i = 0; !all && i < server.nshards; i++)
        if (mark[i]) {
            le_put_u16(val + o, (uint16_t)i);
            o += 2;
        }
    /* where it is goes without saying: what was there, as far as it fits */
    char text[400];
    first_entry(d, text, sizeof(text));
    if (o + 1 < vlen) {
        size_t t = strlen(text) < vlen - o - 1 ? strlen(text) : vlen - o - 1;
        memcpy(val + o, text, t);
    }
    log_entry e = {.type = LOG_LOSS, .shard = LOG_SHARD_NONE, .key = "", .val = (char *)val,
                   .vlen = (uint32_t)vlen};
    log_entry_encode(entry, &e, 1);
    uint8_t *dst = pool_ptr(server.pool, pool_seg_offset(server.pool, d->seg) + d->off);
    pool_write(server.pool, dst, entry, d->len);
    pool_persist(server.pool, dst, d->len);
    free(mark), free(val), free(entry);
    return 0;
}

int recovery_fix(const seg_damage *regions, size_t n, int64_t now_ms, char *err, size_t errlen) {
    if (pool_restore_size(server.pool, err, errlen) != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (recovery_accept_loss(&regions[i], now_ms, err, errlen) != 0) return -1;
    pool_sync_all(server.pool);
    return 0;
}

/* ---------------- the pass over the pool ---------------- */

typedef struct rec_item {
    uint64_t ver;
    uint64_t ref;
    uint64_t t;                /* replay order (order_replay) */
    uint32_t khash;            /* keyed effects: bits of the key's hash */
    uint32_t epoch;            /* barriers of its shard at or below its version */
    uint16_t shard;
    uint8_t type, flags;
    uint8_t dup;               /* the cleaner's second copy of a version: skipped */
} rec_item;

/* ---- progress ---- */

typedef struct rec_progress {
    uint64_t total;            /* bytes of in-use segments */
    int64_t next_log_us;
} rec_progress;

#define PROGRESS_EVERY_US 1000000

/* done of all units through pass (0 scan, 1 replay): publish for INFO and,
 * at most once a second, log it (and tell systemd). */
static void progress(rec_progress *pr, int pass, uint64_t done, uint64_t all, const char *what) {
    uint64_t half = pr->total / 2;
    uint64_t loaded = (uint64_t)pass * half + (all ? (uint64_t)((double)half * (double)done / (double)all) : half);
    atomic_store(&server.loading_loaded_bytes, loaded);
    int64_t now = monotonic_us();
    if (now < pr->next_log_us) return;
    pr->next_log_us = now + PROGRESS_EVERY_US;
    double perc = pr->total ? 100.0 * (double)loaded / (double)pr->total : 100.0;
    serverLog(LL_NOTICE, "Recovery: %.0f%% loaded (%s %llu of %llu)", perc, what,
              (unsigned long long)done, (unsigned long long)all);
    char status[128];
    snprintf(status, sizeof(status), "STATUS=Loading the pool: %.0f%%\n", perc);
    daemon_notify(status);
}

static int interrupted(void) { return atomic_load(&server.shutdown_asap) != 0; }

typedef struct rec_state {
    int collect;               /* gather effects to replay (not for a check) */
    rec_item *items;
    size_t n, cap;
    int bad_shard;             /* first mismatch found, reported once */
    char bad_msg[256];
    const recovery_hooks *hooks;
    recovery_totals tot;
    uint32_t *log_end;         /* [segment]: where its log ends */
    rec_progress *pr;          /* startup only: progress, and stop on shutdown */
    int interrupted;           /* a shutdown request stopped the scan */
    uint64_t *resync_end;      /* [shard]: version of its latest re-sync end */
    /* batches in pieces (db.c): the pieces' effects wait in held, with
     * their batch's id, until the scan is done; then those whose commit
     * was found join items, the others are forgotten */
    rec_item *held;
    int64_t *held_id;
    size_t nheld, capheld;
    int64_t *commits;
    size_t ncommits, capcommits;
} rec_state;

/* An effect on one key, ordered only against the same key's effects; every
 * other effect (FLUSHDB, the db map, functions, anything of a re-sync) is a
 * barrier, ordered against everything of its shard. A large value's chunks
 * are effects on its key: they come before its final entry, and runs of
 * other keys may come between them (bigval.c, bigval_pool_order). */
static int rec_keyed(const rec_item *it) {
    return !(it->flags & LOG_F_RESYNC) &&
           (it->type == LOG_SET || it->type == LOG_DEL || it->type == LOG_COLL_OP ||
            it->type == LOG_SNAPSHOT || it->type == LOG_CHUNK);
}

static void items_add(rec_item **v, size_t *n, size_t *cap, const rec_item *it) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4096;
        *v = realloc(*v, *cap * sizeof(rec_item));
    }
    (*v)[(*n)++] = *it;
}

static rec_item rec_item_of(const log_entry *e, uint64_t ref) {
    rec_item it = {.ver = e->ver, .ref = ref, .shard = e->shard, .type = e->type, .flags = e->flags};
    if (rec_keyed(&it)) it.khash = (uint32_t)hash_key(e->db, e->key, e->klen);
    return it;
}

static void rec_push(rec_state *st, const log_entry *e, uint64_t ref) {
    if (!st->collect) return;
    rec_item it = rec_item_of(e, ref);
    items_add(&st->items, &st->n, &st->cap, &it);
}

/* An effect of a batch's piece: held until its commit is known. */
static void rec_hold(rec_state *st, const log_entry *e, uint64_t ref, int64_t id) {
    if (!st->collect) return;
    rec_item it = rec_item_of(e, ref);
    size_t cap = st->capheld;
    items_add(&st->held, &st->nheld, &st->capheld, &it);
    if (st->capheld != cap) st->held_id = realloc(st->held_id, st->capheld * sizeof(int64_t));
    st->held_id[st->nheld - 1] = id;
}

static void rec_commit(rec_state *st, int64_t id) {
    if (!st->collect) return;
    if (st->ncommits == st->capcommits) {
        st->capcommits = st->capcommits ? st->capcommits * 2 : 64;
        st->commits = realloc(st->commits, st->capcommits * sizeof(int64_t));
    }
    st->commits[st->ncommits++] = id;
}

static int cmp_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The scan is done: effects of committed pieces join the replay; those of
 * batches whose commit was never written (a crash before it was durable;
 * never acknowledged) are forgotten. */
static void resolve_pieces(rec_state *st) {
    size_t dropped = 0;
    if (st->ncommits) /* qsort's base must not be NULL, even for no elements */
        qsort(st->commits, st->ncommits, sizeof(int64_t), cmp_id);
    for (size_t i = 0; i < st->nheld; i++) {
        if (st->ncommits && bsearch(&st->held_id[i], st->commits, st->ncommits, sizeof(int64_t),
                                    cmp_id))
            items_add(&st->items, &st->n, &st->cap, &st->held[i]);
        else
            dropped++;
    }
    if (dropped && st->pr)
        serverLog(LL_NOTICE, "Recovery: %zu effects of batches larger than one group whose "
                  "commit was never written (a crash cut them short; never acknowledged) "
                  "ignored", dropped);
    free(st->held), free(st->held_id), free(st->commits);
    st->held = NULL, st->held_id = NULL, st->commits = NULL;
    st->nheld = st->capheld = st->ncommits = st->capcommits = 0;
}

/* Is this effect in the shard the current configuration maps its key to? */
static int shard_ok(rec_state *st, const log_entry *e) {
    int want = -1;
    if (e->shard < server.nshards && (e->type == LOG_SET || e->type == LOG_DEL ||
                                      e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT ||
                                      e->type == LOG_CHUNK))
        want = shard_of_key(e->key, e->klen)->id;
    if (e->shard < server.nshards && (want < 0 || want == e->shard)) return 1;
    if (!st->bad_shard) {
        st->bad_shard = 1;
        if (want < 0)
            snprintf(st->bad_msg, sizeof(st->bad_msg),
                     "the pool was written with a different 'shards' setting (an entry names "
                     "shard %u, out of range for %d shards); start with the setting the pool "
                     "was created with", e->shard, server.nshards);
        else
            snprintf(st->bad_msg, sizeof(st->bad_msg),
                     "the pool was written with a different 'shards' setting (an entry of shard "
                     "%u belongs to shard %d of %d); start with the setting the pool was created "
                     "with", e->shard, want, server.nshards);
    }
    return 0;
}

static void rec_collect(void *arg, uint64_t off, const log_entry *e) {
    rec_state *st = arg;
    if (log_type_is_marker(e->type)) return; /* b-log bookkeeping, not effects */
    if (e->type == LOG_LOSS) {
        st->tot.losses++;
        st->tot.loss_bytes += log_entry_span(log_entry_len(e->klen, e->vlen));
        if (st->hooks->loss) st->hooks->loss(st->hooks->arg, off, e);
        return;
    }
    if (e->type != LOG_GROUP) {
        if (shard_ok(st, e)) rec_push(st, e, off);
        return;
    }
    if (log_is_piece_commit(e)) {
        rec_commit(st, e->expire_ms);
        return;
    }
    int piece = log_is_piece(e);
    size_t pos = 0, sub_off;
    log_entry sub;
    while (log_group_next(e, &pos, &sub, &sub_off)) {
        if (!shard_ok(st, &sub)) continue;
        if (piece) rec_hold(st, &sub, off + sub_off, e->expire_ms);
        else rec_push(st, &sub, off + sub_off);
    }
}

static void rec_damage(void *arg, const seg_damage *d) {
    rec_state *st = arg;
    if (st->hooks->damage) st->hooks->damage(st->hooks->arg, d);
}

static void scan_all(rec_state *st) {
    uint32_t nseg = pool_nsegs(server.pool), used = 0, scanned = 0;
    for (uint32_t seg = 0; seg < nseg; seg++)
        used += pool_seg_meta(server.pool, seg).state != SEG_FREE;
    for (uint32_t seg = 0; seg < nseg; seg++) {
        if (pool_seg_meta(server.pool, seg).state == SEG_FREE) continue;
        if (st->pr && interrupted()) {
            st->interrupted = 1;
            break;
        }
        seg_scan_report r = {.on_damage = rec_damage, .damage_arg = st};
        seg_scan(seg, rec_collect, st, &r);
        if (st->log_end) st->log_end[seg] = r.log_end;
        st->tot.segments++;
        st->tot.entries += r.entries;
        st->tot.damaged += r.corrupt;
        st->tot.damaged_bytes += r.corrupt_bytes;
        st->tot.dropped_bytes += r.dropped_bytes + r.stale_bytes;
        if ((r.dropped_bytes || r.stale_bytes) && st->hooks->dropped)
            st->hooks->dropped(st->hooks->arg, seg, &r);
        if (st->pr) progress(st->pr, 0, ++scanned, used, "segments scanned:");
    }
    resolve_pieces(st);
}

int recovery_check(const recovery_hooks *h, recovery_totals *t, char *err, size_t errlen) {
    rec_state st = {.hooks = h};
    pool_advise_sequential(server.pool, 0, pool_nsegs(server.pool), 1);
    scan_all(&st);
    pool_advise_sequential(server.pool, 0, pool_nsegs(server.pool), 0);
    *t = st.tot;
    if (st.bad_shard) {
        snprintf(err, errlen, "%s", st.bad_msg);
        return -1;
    }
    return 0;
}

/* ---------------- recovery at startup ---------------- */

/* What the server's hooks gather. */
typedef struct rec_run {
    uint8_t *damaged;          /* [shard]: may have lost acknowledged entries */
    int damaged_all;
    uint32_t first_seg;        /* where the first damage is, for the refusal */
    uint32_t first_off;
} rec_run;

static void run_damage(void *arg, const seg_damage *d) {
    rec_run *run = arg;
    char desc[768], shards[512];
    uint8_t *mark = calloc((size_t)server.nshards, 1);
    int known = seg_damage_shards(d, mark);
    recovery_describe_shards(mark, !known, shards, sizeof(shards));
    for (int i = 0; i < server.nshards; i++) run->damaged[i] |= mark[i];
    run->damaged_all |= !known;
    free(mark);
    if (server.stat.recovery_corrupt_entries == 0) {
        run->first_seg = d->seg;
        run->first_off = d->off;
    }
    server.stat.recovery_corrupt_entries++;
    seg_damage_describe(d, desc, sizeof(desc));
    serverLog(LL_WARNING, "CORRUPTION: %s. Acknowledged entries there are lost: %s.", desc, shards);
}

static void run_dropped(void *arg, uint32_t seg, const seg_scan_report *r) {
    if (r->stale_bytes)
        serverLog(LL_WARNING, "Recovery: segment %u starts with zeroes but holds %llu more bytes: "
                  "taken for a segment whose freeing was interrupted; its stale contents are "
                  "ignored", seg, (unsigned long long)r->stale_bytes);
    else if (pool_seg_meta(server.pool, seg).state == SEG_USING)
        serverLog(LL_WARNING, "Recovery: dropped %llu bytes of torn log tail in segment %u at "
                  "offset %u (an unfinished write; it was never acknowledged)",
                  (unsigned long long)r->dropped_bytes, seg, r->dropped_at);
    else
        serverLog(LL_WARNING, "Recovery: dropped %llu stray bytes after the recorded end of the "
                  "log in segment %u at offset %u (not part of the log)",
                  (unsigned long long)r->dropped_bytes, seg, r->dropped_at);
}

int loss_describe(uint64_t off, const log_entry *e, uint8_t *mark, char *buf, size_t len) {
    loss_info li;
    char when[64] = "?", shards[512];
    int all = 1;
    if (loss_decode(e, &li) == 0) {
        time_t t = (time_t)(li.accepted_ms / 1000);
        struct tm tm;
        if (localtime_r(&t, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        all = li.all_shards;
        for (uint32_t i = 0; i < li.nshards; i++) {
            uint16_t s = le_get_u16(li.shards + 2 * i);
            if (s < server.nshards) mark[s] = 1;
            else all = 1;
        }
    } else {
        snprintf(li.text, sizeof(li.text), "?");
    }
    recovery_describe_shards(mark, all, shards, sizeof(shards));
    uint32_t seg = pool_seg_of(server.pool, off);
    snprintf(buf, len, "segment %u offset %llu: %llu bytes whose entries are gone (%s), accepted "
             "with rowan-check-pool --fix on %s; first entry: %s", seg,
             (unsigned long long)(off - pool_seg_offset(server.pool, seg)),
             (unsigned long long)log_entry_span(log_entry_len(e->klen, e->vlen)), shards, when,
             li.text);
    return all;
}

static void run_loss(void *arg, uint64_t off, const log_entry *e) {
    rec_run *run = arg;
    char desc[1024];
    uint8_t *mark = calloc((size_t)server.nshards, 1);
    int all = loss_describe(off, e, mark, desc, sizeof(desc));
    serverLog(LL_WARNING, "Recovery: accepted loss in %s", desc);
    /* In a cluster the replicas still have what was lost: fetch it again. */
    if (cluster_enabled()) {
        for (int i = 0; i < server.nshards; i++) run->damaged[i] |= mark[i];
        run->damaged_all |= all;
    }
    free(mark);
}

/* Why a standalone server does not start on a damaged pool. */
static void refusal(const rec_state *st, const rec_run *run, char *err, size_t errlen) {
    char shards[512];
    recovery_describe_shards(run->damaged, run->damaged_all, shards, sizeof(shards));
    snprintf(err, errlen, "the pool %s/%s is damaged: %llu region%s (%llu bytes, the first in "
             "segment %u at offset %u) held acknowledged writes that are lost, in %s. Serving "
             "what is left could answer with older values, so the server does not start (see "
             "the CORRUPTION lines in the log). Run 'rowan-check-pool %s/%s' for a report, and "
             "'rowan-check-pool --fix %s/%s' to accept the loss",
             server.cfg.dir, server.cfg.pool_file, (unsigned long long)st->tot.damaged,
             st->tot.damaged == 1 ? "" : "s", (unsigned long long)st->tot.damaged_bytes,
             run->first_seg, run->first_off, shards, server.cfg.dir, server.cfg.pool_file,
             server.cfg.dir, server.cfg.pool_file);
}

/* Seal what the crash left open, with the end of its log, after zeroing
 * what was dropped beyond it (see the file comment, step 5). */
static void seal_segments(const rec_state *st) {
    for (uint32_t seg = 0; seg < pool_nsegs(server.pool); seg++) {
        struct seg_meta m = pool_seg_meta(server.pool, seg);
        if (m.state == SEG_FREE) continue;
        uint32_t end = st->log_end[seg], tail = nonzero_end(seg_bytes(seg), end);
        if (tail > end) pool_zero(server.pool, pool_seg_offset(server.pool, seg) + end, tail - end);
        if (m.state == SEG_USING && end > m.end) pool_seg_set_end(server.pool, seg, end);
        if (m.state != SEG_COMMITTED) pool_seg_set_state(server.pool, seg, SEG_COMMITTED);
    }
}

static int is_resync_end(const rec_item *it) {
    return it->type == LOG_FLUSHDB && (it->flags & LOG_F_RESYNC);
}

/* Is items[i] the cleaner's copy of the entry before it? A version of a
 * shard names one effect: a second entry with it is the cleaner's copy of
 * the first (a crash came between copying and freeing the original).
 * Applied once: a collection effect applied twice would not fit its own
 * result. */
static int is_copy(const rec_item *items, size_t i) {
    const rec_item *it = &items[i];
    return i > 0 && it[-1].shard == it->shard && it[-1].ver == it->ver &&
           it[-1].type == it->type && !(it->flags & LOG_F_RESYNC);
}

/* Is it part of a re-sync other than the shard's latest (which ended at
 * last_end)? See replay. */
static int stale_resync(const rec_item *it, uint64_t last_end) {
    return (it->flags & LOG_F_RESYNC) && !is_resync_end(it) && it->ver != last_end;
}

static int cmp_item(const void *a, const void *b) {
    const rec_item *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->ver != y->ver) return x->ver < y->ver ? -1 : 1;
    /* a re-sync's chunks (all at its version) before its other entries:
     * the final entry of a large value needs them (bigval.c) */
    if ((x->type == LOG_CHUNK) != (y->type == LOG_CHUNK)) return x->type == LOG_CHUNK ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

/* By shard and epoch, the epoch's barrier first, then each key's effects
 * together in version order. */
static int cmp_key(const void *a, const void *b) {
    const rec_item *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
    int kx = rec_keyed(x), ky = rec_keyed(y);
    if (kx != ky) return kx < ky ? -1 : 1;
    if (x->khash != y->khash) return x->khash < y->khash ? -1 : 1;
    return cmp_item(a, b);
}

static int cmp_replay(const void *a, const void *b) {
    const rec_item *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return cmp_item(a, b);
}

/* The same order, shard by shard (recovery_replay_visit). */
static int cmp_shard_replay(const void *a, const void *b) {
    const rec_item *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return cmp_replay(a, b);
}

typedef struct seg_seq { uint64_t seq; uint32_t seg; } seg_seq;

static int cmp_seg_seq(const void *a, const void *b) {
    const seg_seq *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return x->seg < y->seg ? -1 : x->seg > y->seg;
}

/* Where each used segment comes in allocation (seq) order, so that a
 * position counts up with the time its bytes were written. */
static uint32_t *seg_ranks(void) {
    uint32_t nseg = pool_nsegs(server.pool), n = 0;
    seg_seq *v = malloc(sizeof(seg_seq) * (nseg ? nseg : 1));
    uint32_t *rank = calloc(nseg ? nseg : 1, sizeof(uint32_t));
    for (uint32_t seg = 0; seg < nseg; seg++) {
        struct seg_meta m = pool_seg_meta(server.pool, seg);
        if (m.state != SEG_FREE) v[n++] = (seg_seq){m.seq, seg};
    }
    qsort(v, n, sizeof *v, cmp_seg_seq);
    for (uint32_t i = 0; i < n; i++) rank[v[i].seg] = i;
    free(v);
    return rank;
}

/* The replay order (step 4 of the file comment). Applying a shard's
 * effects in version order reads the pool at random: each shard's versions
 * are spread over every segment, so with a pool larger than memory every
 * shard read the whole pool again (51 minutes for 5.5M entries under a
 * 1 GiB cap, against 14 s without). But versions only order the effects on
 * one key, and barriers (effects not on one key) against all of their
 * shard. So each effect gets a time t: its position in the pool (segments
 * in allocation order), raised to the time of the same key's previous
 * version and of its shard's last barrier, whose own time is raised to
 * every earlier effect's of the shard. Sorted by t, a shard's barriers and
 * each key's versions keep their order, and the replay reads the pool in
 * allocation order, each segment front to back, except where a key's
 * versions come in a different order than their segments.
 *
 * On the way: marks the cleaner's duplicate copies (a second entry with the
 * same shard, version and type, as the version-order replay skipped them)
 * and finds each shard's latest re-sync end. */
static void order_replay(rec_state *st, int by_shard) {
    rec_item *v = st->items;
    size_t n = st->n;
    if (!n) return;
    uint32_t *rank = seg_ranks();
    for (size_t i = 0; i < n; i++) {
        uint32_t seg = pool_seg_of(server.pool, v[i].ref);
        v[i].t = (uint64_t)rank[seg] * POOL_SEG_SIZE + (v[i].ref - pool_seg_offset(server.pool, seg));
    }
    free(rank);

    /* version order: duplicates, re-sync ends, epochs */
    qsort(v, n, sizeof *v, cmp_item);
    uint32_t epoch = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || v[i].shard != v[i - 1].shard) epoch = 0;
        v[i].dup = (uint8_t)is_copy(v, i);
        if (is_resync_end(&v[i])) st->resync_end[v[i].shard] = v[i].ver;
        if (!rec_keyed(&v[i])) epoch++;
        v[i].epoch = epoch;
    }

    /* per shard, epoch and key: raise t along each chain */
    qsort(v, n, sizeof *v, cmp_key);
    uint64_t before = 0, floor = 0, in_epoch = 0; /* max t of earlier epochs; this epoch's floor */
    for (size_t i = 0; i < n; i++) {
        rec_item *it = &v[i];
        int new_shard = i == 0 || it->shard != v[i - 1].shard;
        if (new_shard || it->epoch != v[i - 1].epoch) {
            before = new_shard ? 0 : (before > in_epoch ? before : in_epoch);
            floor = new_shard ? 0 : before;
            in_epoch = 0;
        }
        if (!rec_keyed(it)) {                  /* the epoch's barrier */
            if (it->t < floor) it->t = floor;
            floor = it->t;
        } else {
            if (it->t < floor) it->t = floor;
            if (i > 0 && rec_keyed(&v[i - 1]) && v[i - 1].shard == it->shard &&
                v[i - 1].epoch == it->epoch && v[i - 1].khash == it->khash && it->t < v[i - 1].t)
                it->t = v[i - 1].t;
        }
        if (it->t > in_epoch) in_epoch = it->t;
    }

    qsort(v, n, sizeof *v, by_shard ? cmp_shard_replay : cmp_replay);
}

/* Collection effects that did not apply (db_apply_entry) wait here, per
 * shard, until a later version replaces or deletes their key: then they
 * were dead history, whose predecessors the cleaner reclaimed after that
 * deletion made them dead, and the key's state never depended on them.
 * Those still waiting when the shard is done are reported. */
typedef struct refused_set {
    log_entry *e;
    size_t n, cap;
    uint64_t superseded;
} refused_set;

static void refused_drop(refused_set *r, const log_entry *e) {
    size_t keep = 0;
    for (size_t i = 0; i < r->n; i++) {
        const log_entry *x = &r->e[i];
        int gone = e->type == LOG_FLUSHDB
                       ? e->db == 0xffff || e->db == x->db
                       : x->db == e->db && x->klen == e->klen && !memcmp(x->key, e->key, e->klen);
        if (gone) r->superseded++;
        else r->e[keep++] = *x;
    }
    r->n = keep;
}

static void refused_note(refused_set *r, const log_entry *e, int applied) {
    if (!applied) {
        if (r->n == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 16;
            r->e = realloc(r->e, r->cap * sizeof(log_entry));
        }
        r->e[r->n++] = *e;
    } else if (r->n && (e->type == LOG_SET || e->type == LOG_DEL || e->type == LOG_SNAPSHOT ||
                        e->type == LOG_FLUSHDB)) {
        refused_drop(r, e);
    }
}

static void refused_report(refused_set *r, const shard *s) {
    for (size_t i = 0; i < r->n; i++) db_report_refused(s, &r->e[i]);
    r->n = 0;
}

/* Does the replay apply it (not a cleaner's copy, not part of a re-sync
 * other than its shard's latest)? Re-syncs (log.h): a shard's entries
 * flagged LOG_F_RESYNC count only at the version of its latest end record.
 * Flagged entries above it belong to a re-sync a crash cut short: applying
 * them would mix two states, so they are skipped and, at startup
 * (mark_cut), the copy is marked damaged (it must be re-synced before it
 * is served or copied). Flagged entries below it were superseded by that
 * end anyway. */
static int replayed(const rec_state *st, const rec_item *it, int mark_cut) {
    uint64_t last_end = st->resync_end[it->shard];
    if (it->dup) return 0; /* is_copy */
    if (!stale_resync(it, last_end)) return 1;
    shard *s = &server.shards[it->shard];
    if (mark_cut && it->ver > last_end && !atomic_exchange(&s->damaged, 1)) {
        server.stat.damaged_shards++;
        serverLog(LL_WARNING, "Recovery: shard %u holds part of a re-sync at version %llu that "
                  "a crash cut short; this copy is marked damaged and must be re-synced from a "
                  "replica", it->shard, (unsigned long long)it->ver);
    }
    return 0;
}

/* Large values' pieces that no final entry claimed (bigval.c): a crash cut
 * their run short before its final entry was written, so nothing
 * acknowledged depends on them. Such a run is a write, or the compaction
 * snapshot a collection write of a large element appends right after its
 * own entry (db.c, maybe_compact): then the write itself is complete and
 * the key has its new value. Pieces stay in the log until cleaned, so a
 * later start may count them again. */
static void forget_pieces(int sid, int report) {
    shard *s = &server.shards[sid];
    size_t cut = bigval_forget(s);
    bigval_pool_order(s, 0);
    if (cut && report)
        serverLog(LL_NOTICE, "Recovery: shard %d: %zu pieces of a large value whose final entry "
                  "was never written (a write, or a compaction snapshot, that a crash cut "
                  "short; never acknowledged) ignored; each key keeps the value of its last "
                  "complete entry", sid, cut);
}

/* Items are in replay order (order_replay). Returns 0, or 1 if a shutdown
 * request stopped it. */
static int replay(rec_state *st) {
    refused_set *r = calloc((size_t)server.nshards, sizeof *r);
    int stopped = 0;
    for (int k = 0; k < server.nshards; k++) bigval_pool_order(&server.shards[k], 1);
    for (size_t i = 0; i < st->n; i++) {
        if ((i & 4095) == 0) {
            if (interrupted()) {
                stopped = 1;
                break;
            }
            progress(st->pr, 1, i, st->n, "effects replayed:");
        }
        rec_item *it = &st->items[i];
        uint16_t sid = it->shard;
        shard *s = &server.shards[sid];
        if (it->ver >= s->next_ver) s->next_ver = it->ver + 1;
        if (!replayed(st, it, 1)) continue;
        log_entry e;
        log_entry_decode(pool_ptr(server.pool, it->ref), &e);
        refused_note(&r[sid], &e, db_apply_entry(s, it->ref, &e) == 0);
    }
    uint64_t superseded = 0;
    for (int k = 0; k < server.nshards; k++) {
        if (!stopped) refused_report(&r[k], &server.shards[k]);
        forget_pieces(k, !stopped);
        superseded += r[k].superseded;
        free(r[k].e);
    }
    free(r);
    if (stopped) return 1;
    if (superseded)
        serverLog(LL_NOTICE, "Recovery: %llu collection effects of keys deleted or replaced "
                  "later did not apply (the cleaner had reclaimed their predecessors); ignored",
                  (unsigned long long)superseded);
    for (int k = 0; k < server.nshards; k++) {
        shard *s = &server.shards[k];
        atomic_store(&s->durable_ver, s->next_ver - 1);
    }
    progress(st->pr, 1, st->n, st->n, "effects replayed:");
    return 0;
}

/* Cluster: the shards that lost entries learn it (they are repaired from
 * their replicas before they serve). */
static void mark_damaged(const rec_run *run) {
    long long n = 0;
    for (int i = 0; i < server.nshards; i++) {
        int d = run->damaged_all || run->damaged[i];
        atomic_store(&server.shards[i].damaged, d);
        n += d;
    }
    server.stat.damaged_shards = n;
    if (n)
        serverLog(LL_WARNING, "Recovery: %lld shard%s lost entries to damage; they are to be "
                  "fetched again from their other replicas", n, n == 1 ? "" : "s");
}

int recovery_run(char *err, size_t errlen) {
    int64_t t0 = monotonic_us();
    uint32_t nseg = pool_nsegs(server.pool);
    rec_run run = {.damaged = calloc((size_t)server.nshards, 1)};
    recovery_hooks h = {run_damage, run_dropped, run_loss, &run};
    uint32_t used = 0;
    for (uint32_t seg = 0; seg < nseg; seg++)
        used += pool_seg_meta(server.pool, seg).state != SEG_FREE;
    rec_progress pr = {(uint64_t)used * POOL_SEG_SIZE, monotonic_us() + PROGRESS_EVERY_US};
    atomic_store(&server.loading_total_bytes, pr.total);
    serverLog(LL_NOTICE, "Recovery: loading %u segments (%llu bytes) from the pool", used,
              (unsigned long long)pr.total);
    rec_state st = {.collect = 1, .hooks = &h, .log_end = calloc(nseg, sizeof(uint32_t)),
                    .pr = &pr, .resync_end = calloc((size_t)server.nshards, sizeof(uint64_t))};
    server.stat.recovery_corrupt_entries = 0;
    uint64_t missing = pool_missing_from(server.pool);
    if (missing)
        serverLog(LL_WARNING, "The pool file %s/%s is truncated: %llu of its %llu bytes are "
                  "there; what lay beyond is read as zeroes", server.cfg.dir, server.cfg.pool_file,
                  (unsigned long long)missing, (unsigned long long)pool_size(server.pool));
    /* Both passes read the pool front to back (the replay segment by
     * segment in allocation order, order_replay). */
    pool_advise_sequential(server.pool, 0, nseg, 1);
    scan_all(&st);
    int rc = -1;
    if (st.interrupted) {
        rc = 1;   /* nothing changed yet */
        goto out;
    }
    if (st.bad_shard) {
        snprintf(err, errlen, "%s", st.bad_msg);
        goto out;
    }
    if (st.tot.damaged && !cluster_enabled()) {
        refusal(&st, &run, err, errlen);
        goto out;
    }
    /* Only now is the pool changed, so a refused pool is left exactly as it
     * was. */
    if (missing && pool_restore_size(server.pool, err, errlen) != 0) goto out;
    mark_damaged(&run);
    seal_segments(&st);
    server.stat.recovered_entries = (long long)st.n;
    server.stat.recovery_dropped_bytes = (long long)st.tot.dropped_bytes;
    server.stat.recovery_accepted_losses = (long long)st.tot.losses;
    server.stat.recovery_accepted_loss_bytes = (long long)st.tot.loss_bytes;
    order_replay(&st, 0);
    if (replay(&st)) {
        rc = 1;
        goto out;
    }
    server.recovery_seconds = (double)(monotonic_us() - t0) / 1e6;
    serverLog(LL_NOTICE, "Recovery: %zu effects from %u segments replayed in %.3f seconds "
              "(%llu bytes of torn tail dropped, %llu corrupt regions skipped, %llu accepted "
              "losses)", st.n, st.tot.segments, server.recovery_seconds,
              (unsigned long long)st.tot.dropped_bytes, (unsigned long long)st.tot.damaged,
              (unsigned long long)st.tot.losses);
    rc = 0;
out:
    pool_advise_sequential(server.pool, 0, nseg, 0);
    free(st.items);
    free(st.log_end);
    free(st.resync_end);
    free(run.damaged);
    return rc;
}

/* ---------------- replaying without applying (DEBUG RELOAD) ---------------- */

int recovery_replay_visit(recovery_effect_fn fn, void *arg, char *err, size_t errlen) {
    recovery_hooks none = {0};
    rec_state st = {.collect = 1, .hooks = &none,
                    .resync_end = calloc((size_t)server.nshards, sizeof(uint64_t))};
    scan_all(&st);
    int rc = -1;
    if (st.bad_shard) {
        snprintf(err, errlen, "%s", st.bad_msg);
    } else if (st.tot.damaged) {
        snprintf(err, errlen, "the log has %llu damaged region%s",
                 (unsigned long long)st.tot.damaged, st.tot.damaged == 1 ? "" : "s");
    } else {
        order_replay(&st, 1);
        for (size_t i = 0; i < st.n; i++) {
            if (!replayed(&st, &st.items[i], 0)) continue;
            log_entry e;
            log_entry_decode(pool_ptr(server.pool, st.items[i].ref), &e);
            fn(arg, st.items[i].shard, st.items[i].ref, &e);
        }
        rc = 0;
    }
    free(st.items);
    free(st.resync_end);
    return rc;
}
