/* recovery.c -- rebuild everything from the logs (DESIGN.md §3 "Recovery").
 *
 * 1. Read the segment meta table; every segment that is not free holds log.
 * 2. Scan each such segment from its start. Entries are 64-byte aligned and
 *    self-checking, so a scan needs no tail pointer: the log ends where only
 *    zeroes follow (free segments are zeroed before reuse). A checksum that
 *    fails before the zeroes is damage: a torn tail when no valid entry
 *    follows (the last group commit was cut short: nothing in it had been
 *    acknowledged), corruption when one does (reported loudly; the damaged
 *    entry is skipped, never interpreted).
 * 3. Collect (shard, version, reference) of every effect, unpacking groups,
 *    sort them, and apply per shard in version order through the same
 *    db_apply_entry the write path uses. So a recovered index is exactly the
 *    state the writes produced, and live-byte counts come out right.
 * 4. Shard versions restart above the largest version seen; segments the
 *    crash left open are sealed as committed (single node: all durable).
 *
 * A pool written with a different shard count cannot be replayed (versions
 * are per shard), so an entry whose key maps to another shard stops startup
 * with a clear error rather than building a wrong index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recovery.h"
#include "db.h"
#include "hash.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

typedef struct rec_item {
    uint64_t ver;
    uint64_t ref;
    uint16_t shard;
    uint8_t type, flags;
} rec_item;

typedef struct rec_state {
    rec_item *items;
    size_t n, cap;
    int bad_shard;             /* first mismatch found, reported once */
    char bad_msg[256];
} rec_state;

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Offset of the next valid entry at or after pos (64-byte steps), or -1. */
static int64_t next_valid(const uint8_t *seg, uint64_t pos) {
    log_entry e;
    for (; pos + LOG_HDR_SIZE <= POOL_SEG_SIZE; pos += LOG_ALIGN)
        if (log_entry_check(seg + pos, POOL_SEG_SIZE - pos, &e)) return (int64_t)pos;
    return -1;
}

static uint64_t last_nonzero_end(const uint8_t *seg, uint64_t pos) {
    uint64_t end = POOL_SEG_SIZE;
    while (end > pos && seg[end - 1] == 0) end--;
    return end;
}

void seg_scan(uint32_t seg, seg_entry_fn fn, void *arg, seg_scan_report *rep) {
    uint64_t base = pool_seg_offset(server.pool, seg);
    const uint8_t *p = pool_ptr(server.pool, base);
    uint64_t pos = 0;
    /* A segment whose first bytes are zero holds no log: either nothing was
     * written yet, or a crash cut pool_seg_free short after it zeroed the
     * first page (the cleaner synced the copies of everything live before it
     * began freeing), so what follows is stale and must not be replayed. */
    if (all_zero(p, 8)) {
        if (!all_zero(p, POOL_SEG_SIZE))
            serverLog(LL_WARNING, "Recovery: segment %u starts with zeroes but holds %llu more bytes: "
                      "taken for a segment whose freeing was interrupted; its stale contents are "
                      "ignored", seg, (unsigned long long)last_nonzero_end(p, 0));
        return;
    }
    while (pos + LOG_HDR_SIZE <= POOL_SEG_SIZE) {
        log_entry e;
        size_t n = log_entry_check(p + pos, POOL_SEG_SIZE - pos, &e);
        if (n) {
            rep->entries++;
            fn(arg, base + pos, &e);
            pos += log_entry_span(n);
            continue;
        }
        if (all_zero(p + pos, POOL_SEG_SIZE - pos)) return;
        int64_t next = next_valid(p, pos + LOG_ALIGN);
        if (next < 0) {
            uint64_t dropped = last_nonzero_end(p, pos) - pos;
            rep->dropped_bytes += dropped;
            serverLog(LL_WARNING, "Recovery: dropped %llu bytes of torn log tail in segment %u at "
                      "offset %llu (an unfinished write; it was never acknowledged)",
                      (unsigned long long)dropped, seg, (unsigned long long)pos);
            return;
        }
        rep->corrupt++;
        serverLog(LL_WARNING, "CORRUPTION: segment %u offset %llu: %llu bytes fail their checksum "
                  "and were skipped; the entries there are lost, later entries are intact",
                  seg, (unsigned long long)pos, (unsigned long long)((uint64_t)next - pos));
        pos = (uint64_t)next;
    }
}

static void rec_push(rec_state *st, const log_entry *e, uint64_t ref) {
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 4096;
        st->items = realloc(st->items, st->cap * sizeof(rec_item));
    }
    st->items[st->n++] = (rec_item){e->ver, ref, e->shard, e->type, e->flags};
}

/* Is this effect in the shard the current configuration maps its key to? */
static int shard_ok(rec_state *st, const log_entry *e) {
    int want = -1;
    if (e->shard < server.nshards && (e->type == LOG_SET || e->type == LOG_DEL ||
                                      e->type == LOG_COLL_OP || e->type == LOG_SNAPSHOT))
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
    if (e->type != LOG_GROUP) {
        if (shard_ok(st, e)) rec_push(st, e, off);
        return;
    }
    size_t pos = 0, sub_off;
    log_entry sub;
    while (log_group_next(e, &pos, &sub, &sub_off))
        if (shard_ok(st, &sub)) rec_push(st, &sub, off + sub_off);
}

static int cmp_item(const void *a, const void *b) {
    const rec_item *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    if (x->ver != y->ver) return x->ver < y->ver ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

static int is_resync_end(const rec_item *it) {
    return it->type == LOG_FLUSHDB && (it->flags & LOG_F_RESYNC);
}

/* Items are sorted by (shard, version). Re-syncs (log.h): a shard's
 * entries flagged LOG_F_RESYNC count only at the version of its latest end
 * record. Flagged entries above it belong to a re-sync a crash cut short:
 * applying them would mix two states, so they are skipped and the copy is
 * marked damaged (it must be re-synced before it is served or copied).
 * Flagged entries below it were superseded by that end anyway. */
static void replay(rec_state *st) {
    size_t i = 0;
    while (i < st->n) {
        uint16_t sid = st->items[i].shard;
        shard *s = &server.shards[sid];
        size_t end = i;
        uint64_t last_end = 0;
        for (; end < st->n && st->items[end].shard == sid; end++)
            if (is_resync_end(&st->items[end])) last_end = st->items[end].ver;
        for (; i < end; i++) {
            rec_item *it = &st->items[i];
            if (it->ver >= s->next_ver) s->next_ver = it->ver + 1;
            if ((it->flags & LOG_F_RESYNC) && !is_resync_end(it) && it->ver != last_end) {
                if (it->ver > last_end && !atomic_exchange(&s->damaged, 1))
                    serverLog(LL_WARNING, "Recovery: shard %u holds part of a re-sync at version "
                              "%llu that a crash cut short; this copy is marked damaged and "
                              "must be re-synced from a replica", sid,
                              (unsigned long long)it->ver);
                continue;
            }
            log_entry e;
            log_entry_decode(pool_ptr(server.pool, it->ref), &e);
            db_apply_entry(s, it->ref, &e);
        }
    }
    for (int k = 0; k < server.nshards; k++) {
        shard *s = &server.shards[k];
        atomic_store(&s->durable_ver, s->next_ver - 1);
    }
}

int recovery_run(char *err, size_t errlen) {
    int64_t t0 = monotonic_us();
    rec_state st = {0};
    seg_scan_report rep = {0};
    uint32_t nseg = pool_nsegs(server.pool), used = 0;
    for (uint32_t seg = 0; seg < nseg; seg++) {
        struct seg_meta m = pool_seg_meta(server.pool, seg);
        if (m.state == SEG_FREE) continue;
        used++;
        seg_scan(seg, rec_collect, &st, &rep);
    }
    if (st.bad_shard) {
        snprintf(err, errlen, "%s", st.bad_msg);
        free(st.items);
        return -1;
    }
    /* Open segments (t-log heads, clean targets) were cut by the crash: seal
     * them; every entry in them is as durable as it will get. Only now, so a
     * refused pool is left exactly as it was. */
    for (uint32_t seg = 0; seg < nseg; seg++) {
        struct seg_meta m = pool_seg_meta(server.pool, seg);
        if (m.state != SEG_FREE && m.state != SEG_COMMITTED)
            pool_seg_set_state(server.pool, seg, SEG_COMMITTED);
    }
    if (st.n) qsort(st.items, st.n, sizeof(rec_item), cmp_item);
    replay(&st);
    server.stat.recovered_entries = (long long)st.n;
    server.stat.recovery_dropped_bytes = (long long)rep.dropped_bytes;
    server.stat.recovery_corrupt_entries = (long long)rep.corrupt;
    server.recovery_seconds = (double)(monotonic_us() - t0) / 1e6;
    serverLog(LL_NOTICE, "Recovery: %zu effects from %u segments replayed in %.3f seconds "
              "(%llu bytes of torn tail dropped, %llu corrupt regions skipped)",
              st.n, used, server.recovery_seconds, (unsigned long long)rep.dropped_bytes,
              (unsigned long long)rep.corrupt);
    free(st.items);
    return 0;
}
