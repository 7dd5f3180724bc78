/* log.c -- log entry codec and log writers.
 *
 * Entries (layout in log.h) are encoded field by field in little endian, so
 * the on-media format does not depend on struct layout. log_entry_check is
 * the gate for everything read back from the pool after a crash or off the
 * network: it reads nothing beyond `avail`, rejects unknown types and any
 * length that does not fit, and only then runs the CRC.
 *
 * Groups: log_group_next validates the whole group on its first call (pos 0)
 * and yields nothing if any sub-entry is malformed, so a caller applying
 * sub-entries as they come never applies part of a bad group. *pos packs the
 * byte offset of the next sub-entry inside the payload (low 32 bits) and the
 * number of sub-entries already returned (high 32 bits).
 *
 * Writers: a writer appends at w->pos of its current segment; an entry that
 * does not fit moves the writer to a freshly allocated segment, leaving the
 * old tail zero (the end of a log is where the checksum stops matching). The
 * dirty (appended, not yet synced) bytes are one run through a sequence of
 * segments: from dirty_lo in the oldest segment of closed[] (or the current
 * segment), through the whole written part of later closed segments, to
 * dirty_hi in the newest one. closed[] lists the segments left since the last
 * sync; they are sealed (USING -> USED, then on_sealed) only after their
 * bytes are durable. When closed[] is full the writer syncs early (so
 * on_sealed can run inside log_writer_reserve). On pmem every append is
 * persisted by log_writer_wrote, so a segment is sealed as soon as the
 * writer leaves it and sync has nothing to do.
 *
 * Durable ends (pool.h): sealing records the end of the segment's log, and
 * each completed sync or flush raises the open segment's recorded end to
 * where the writer had got when it began. Recovery then knows that every
 * byte before the end must parse, so damage to the last entries of a log is
 * not mistaken for a torn tail. A flush that completes after the writer
 * moved to another segment, or out of order, never lowers an end and never
 * touches a segment that is no longer the same allocation (seq).
 *
 * Contract: report each reservation with log_writer_wrote before reserving
 * again (offsets in different segments do not compare, so the dirty run is
 * tracked in reservation order), and never leave a reservation unwritten:
 * recovery would report the zero hole as damage and skip over it.
 * on_sealed must not append to the same writer (it may run inside
 * log_writer_reserve, between leaving one segment and entering the next). */
#include "log.h"
#include "le.h"
#include "crc32c.h"

#include <stdlib.h>
#include <string.h>

/* Header field offsets. */
enum { F_CRC = 0, F_TYPE = 4, F_FLAGS = 5, F_SHARD = 6, F_VERDB = 8, F_KLEN = 16,
       F_VLEN = 20, F_EXPIRE = 24, F_AUX = 32 };

/* ---- entries ---- */

size_t log_entry_encode(void *dst, const log_entry *e, int with_crc) {
    uint8_t *d = dst;
    size_t total = log_entry_len(e->klen, e->vlen);
    d[F_TYPE] = e->type;
    d[F_FLAGS] = e->flags;
    le_put_u16(d + F_SHARD, e->shard);
    le_put_u64(d + F_VERDB, (e->ver & LOG_VER_MASK) | (uint64_t)e->db << 48);
    le_put_u32(d + F_KLEN, e->klen);
    le_put_u32(d + F_VLEN, e->vlen);
    le_put_u64(d + F_EXPIRE, (uint64_t)e->expire_ms);
    le_put_u64(d + F_AUX, e->aux);
    if (e->klen)
        memcpy(d + LOG_HDR_SIZE, e->key, e->klen);
    if (e->vlen)
        memcpy(d + LOG_HDR_SIZE + e->klen, e->val, e->vlen);
    le_put_u32(d + F_CRC, with_crc ? crc32c(0, d + 4, total - 4) : 0);
    return total;
}

void log_entry_decode(const void *src, log_entry *out) {
    const uint8_t *s = src;
    uint64_t verdb = le_get_u64(s + F_VERDB);
    out->type = s[F_TYPE];
    out->flags = s[F_FLAGS];
    out->shard = le_get_u16(s + F_SHARD);
    out->ver = verdb & LOG_VER_MASK;
    out->db = (uint16_t)(verdb >> 48);
    out->klen = le_get_u32(s + F_KLEN);
    out->vlen = le_get_u32(s + F_VLEN);
    out->expire_ms = (int64_t)le_get_u64(s + F_EXPIRE);
    out->aux = le_get_u64(s + F_AUX);
    out->key = (const char *)s + LOG_HDR_SIZE;
    out->val = out->key + out->klen;
}

/* Length an entry header claims, or 0 if its type is unknown or the length
 * does not fit in avail / LOG_MAX_ENTRY. Reads only the header, which the
 * caller guarantees is inside avail. 64-bit arithmetic: two 32-bit lengths
 * cannot overflow it. */
static uint64_t header_len(const uint8_t *s, size_t avail) {
    uint8_t type = s[F_TYPE];
    if (type == 0 || type >= LOG_TYPE_MAX)
        return 0;
    uint64_t total = (uint64_t)LOG_HDR_SIZE + le_get_u32(s + F_KLEN) + le_get_u32(s + F_VLEN);
    if (total > avail || total > LOG_MAX_ENTRY)
        return 0;
    return total;
}

size_t log_entry_header(const void *src, size_t avail, log_entry *out) {
    const uint8_t *s = src;
    if (avail < LOG_HDR_SIZE)
        return 0;
    uint64_t total = header_len(s, avail);
    if (total && out)
        log_entry_decode(s, out);
    return (size_t)total;
}

size_t log_entry_check(const void *src, size_t avail, log_entry *out) {
    const uint8_t *s = src;
    size_t total = log_entry_header(src, avail, NULL);
    if (!total || crc32c(0, s + 4, total - 4) != le_get_u32(s + F_CRC))
        return 0;
    if (out)
        log_entry_decode(s, out);
    return total;
}

/* ---- groups ---- */

static inline uint64_t align_sub(uint64_t n) {
    return (n + LOG_SUB_ALIGN - 1) & ~(uint64_t)(LOG_SUB_ALIGN - 1);
}

/* Length of the sub-entry at payload offset off, or 0 if it is malformed:
 * misaligned, out of bounds, unknown or nested-group type, nonzero crc. */
static uint64_t sub_len(const log_entry *g, uint64_t off) {
    if (off % LOG_SUB_ALIGN || off > g->vlen || g->vlen - off < LOG_HDR_SIZE)
        return 0;
    const uint8_t *s = (const uint8_t *)g->val + off;
    if (s[F_TYPE] == LOG_GROUP || le_get_u32(s + F_CRC) != 0)
        return 0;
    return header_len(s, g->vlen - off);
}

/* Do exactly g->aux well-formed sub-entries fill the payload, leaving at most
 * alignment padding? */
static int group_valid(const log_entry *g) {
    if (g->type != LOG_GROUP || g->aux > g->vlen / LOG_HDR_SIZE)
        return 0;
    uint64_t off = 0;
    for (uint64_t i = 0; i < g->aux; i++) {
        uint64_t n = sub_len(g, off);
        if (!n)
            return 0;
        off = align_sub(off + n);
    }
    return off >= g->vlen;
}

int log_group_next(const log_entry *group, size_t *pos, log_entry *sub, size_t *sub_off) {
    uint64_t off = *pos & 0xffffffffu;
    uint64_t done = *pos >> 32;
    if (*pos == 0 && !group_valid(group))
        return 0;
    if (done >= group->aux)
        return 0;
    uint64_t n = sub_len(group, off);
    if (!n)
        return 0;
    const uint8_t *s = (const uint8_t *)group->val + off;
    log_entry_decode(s, sub);
    if (sub_off)
        *sub_off = (size_t)(LOG_HDR_SIZE + group->klen + off);
    *pos = (size_t)((done + 1) << 32 | align_sub(off + n));
    return 1;
}

/* ---- writers ---- */

static void log_writer_wrote_local(log_writer *w, uint64_t off, size_t len);

void log_writer_init(log_writer *w, pool *p, enum seg_owner owner, uint16_t owner_id) {
    memset(w, 0, sizeof *w);
    w->p = p;
    w->owner = owner;
    w->owner_id = owner_id;
    w->seg = -1;
}

void log_writer_free(log_writer *w) {
    (void)w; /* nothing allocated: entries are encoded in the pool */
}

static uint64_t seg_start(const log_writer *w, int32_t seg) {
    return pool_seg_offset(w->p, (uint32_t)seg);
}

/* Persist the dirty part of seg; *started tells whether the dirty run began
 * in an earlier segment. Returns 1 once the segment holding dirty_hi is done. */
static int persist_seg_part(log_writer *w, int32_t seg, int *started) {
    uint64_t start = seg_start(w, seg), end = start + POOL_SEG_SIZE;
    uint64_t lo = start;
    if (!*started) {
        if (w->dirty_lo < start || w->dirty_lo >= end)
            return 0; /* synced before it was closed */
        lo = w->dirty_lo;
        *started = 1;
    }
    int last = w->dirty_hi > start && w->dirty_hi <= end;
    uint64_t hi = last ? w->dirty_hi : end;
    if (hi > lo)
        pool_persist(w->p, pool_ptr(w->p, lo), hi - lo);
    return last;
}

/* Persist the dirty run across closed[] and the current segment. */
static void persist_dirty(log_writer *w) {
    if (!w->dirty_lo)
        return;
    int started = 0, last = 0;
    for (int i = 0; i < w->nclosed && !last; i++)
        last = persist_seg_part(w, w->closed[i].seg, &started);
    if (!last && w->seg >= 0)
        persist_seg_part(w, w->seg, &started);
    w->dirty_lo = w->dirty_hi = 0;
}

/* Mark seg USED with the end of its log and tell the owner; its bytes must
 * be durable already. */
static void seal_one(log_writer *w, const log_seg_end *se) {
    pool_seg_set_end(w->p, (uint32_t)se->seg, se->end);
    pool_seg_set_state(w->p, (uint32_t)se->seg, SEG_USED);
    if (w->on_sealed)
        w->on_sealed(w, (uint32_t)se->seg);
}

/* The first pos bytes of seg (allocated with seq) are durable: raise its
 * recorded end, if it is still that open segment of ours. */
static void raise_end(log_writer *w, int32_t seg, uint64_t seq, uint32_t pos) {
    if (seg < 0)
        return;
    struct seg_meta m = pool_seg_meta(w->p, (uint32_t)seg);
    if (m.state == SEG_USING && m.seq == seq && pos > m.end)
        pool_seg_set_end(w->p, (uint32_t)seg, pos);
}

void log_writer_detach(log_writer *w, log_flush *f) {
    f->nclosed = w->nclosed;
    memcpy(f->closed, w->closed, sizeof(log_seg_end) * (size_t)w->nclosed);
    f->head = w->seg;
    f->head_pos = w->pos;
    f->head_seq = w->seg >= 0 ? pool_seg_meta(w->p, (uint32_t)w->seg).seq : 0;
    w->nclosed = 0;
    w->dirty_lo = w->dirty_hi = 0;
}

void log_writer_flushed(log_writer *w, const log_flush *f) {
    for (int i = 0; i < f->nclosed; i++)
        seal_one(w, &f->closed[i]);
    raise_end(w, f->head, f->head_seq, f->head_pos);
}

void log_writer_commit_sealed(log_writer *w, uint32_t seg) {
    pool_seg_set_state(w->p, seg, SEG_COMMITTED);
}

void log_writer_sync(log_writer *w) {
    persist_dirty(w);
    /* what detach would hand a syncer, flushed at once: closed[] is cleared
     * first, so a reentrant sync from on_sealed is a no-op */
    log_flush f;
    log_writer_detach(w, &f);
    log_writer_flushed(w, &f);
}

/* Leave the current segment. On pmem its entries are durable already, so it
 * is sealed at once (a pmem owner need not call sync at all). Otherwise it
 * waits in closed[] for the next sync, which is forced early when closed[]
 * is full. */
static void close_current(log_writer *w) {
    if (w->seg < 0)
        return;
    /* a full closed[] is synced while the current segment is still current,
     * so its dirty part is persisted with the rest */
    if (!pool_is_pmem(w->p) && w->nclosed == LOG_MAX_CLOSED)
        log_writer_sync(w);
    log_seg_end se = {w->seg, w->pos};
    w->seg = -1;
    w->pos = 0;
    if (pool_is_pmem(w->p))
        seal_one(w, &se);
    else
        w->closed[w->nclosed++] = se;
}

uint64_t log_writer_reserve(log_writer *w, size_t len, int64_t keep_free) {
    size_t span = log_entry_span(len);
    if (len < LOG_HDR_SIZE || len > LOG_MAX_ENTRY)
        return 0;
    if (w->seg < 0 || (size_t)w->pos + span > POOL_SEG_SIZE) {
        uint32_t kf = keep_free >= 0 ? (uint32_t)keep_free : w->keep_free;
        int seg = pool_seg_alloc(w->p, w->owner, w->owner_id, kf);
        if (seg < 0)
            return 0; /* keep the current segment: a smaller entry may fit */
        close_current(w);
        w->seg = seg;
        w->pos = 0;
    }
    uint64_t off = seg_start(w, w->seg) + w->pos;
    w->pos += (uint32_t)span;
    return off;
}

void *log_writer_dst(log_writer *w, uint64_t off, size_t len) {
    (void)len;
    return pool_ptr(w->p, off);
}

void log_writer_wrote(log_writer *w, uint64_t off, size_t len) {
    log_writer_wrote_local(w, off, len);
    if (w->on_wrote)
        w->on_wrote(w, off, len);
}

static void log_writer_wrote_local(log_writer *w, uint64_t off, size_t len) {
    if (pool_is_pmem(w->p)) {
        pool_persist(w->p, pool_ptr(w->p, off), len);
        return;
    }
    /* Offsets only compare within one segment: a later segment may sit at a
     * lower address. The run starts at the first write since the last sync
     * and ends in the segment written last. */
    uint64_t seg = pool_seg_of(w->p, off);
    if (!w->dirty_lo || (pool_seg_of(w->p, w->dirty_lo) == seg && off < w->dirty_lo))
        w->dirty_lo = off;
    if (!w->dirty_hi || pool_seg_of(w->p, w->dirty_hi - 1) != seg || off + len > w->dirty_hi)
        w->dirty_hi = off + len;
}

void log_writer_leave(log_writer *w) { close_current(w); }

void log_writer_seal(log_writer *w) {
    close_current(w);
    log_writer_sync(w);
}
