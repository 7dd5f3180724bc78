/* log.h -- log entries and log writers (t-logs, b-log, clean logs).
 *
 * Entry layout (little endian, header is LOG_HDR_SIZE = 40 bytes):
 *
 *   off  size  field
 *    0    4    crc        CRC32C over bytes [4, total_len) of the entry
 *    4    1    type       enum log_type, never 0
 *    5    1    flags      LOG_F_*
 *    6    2    shard      shard id
 *    8    8    verdb      bits 0..47 shard version, bits 48..63 physical db
 *   16    4    klen       key length
 *   20    4    vlen       payload length
 *   24    8    expire_ms  absolute expiry in unix ms, 0 = none (LOG_SET)
 *   32    8    aux        type-specific (LOG_DEL: pool seq counter when written;
 *                         LOG_GROUP: number of sub-entries)
 *   40    ...  key bytes, then payload bytes
 *
 * total_len = LOG_HDR_SIZE + klen + vlen. Top-level entries start at 64-byte
 * aligned pool offsets and occupy log_entry_span() bytes (padding is zero).
 * Because type != 0, the first 8 bytes of a valid entry are never zero, so a
 * zeroed (fresh) region is never mistaken for an entry. The end of a log is
 * where the checksum stops matching; there is no tail pointer.
 *
 * Entries are effects, not commands (DESIGN.md §3):
 *   LOG_SET      key now holds payload (a string), with expire_ms.
 *   LOG_DEL      key no longer exists. aux = pool_seq_now() when written, so
 *                the cleaner knows which older segments may still hold a
 *                version of the key that this tombstone must keep shadowing.
 *   LOG_FLUSHDB  every key of physical db `db` (0xffff: every db) in this
 *                shard with a smaller version is gone. key empty. aux as
 *                LOG_DEL. With LOG_F_RESYNC it ends a re-sync (below).
 *   LOG_DBMAP    payload is the shard's logical->physical db map after a
 *                SWAPDB (u16 per logical db). key empty.
 *   LOG_GROUP    payload is `aux` sub-entries, each laid out exactly like an
 *                entry (40-byte header, crc field 0) and starting at an 8-byte
 *                aligned offset inside the payload. Sub-entries carry their own
 *                shard and version; the group's own shard is LOG_SHARD_NONE
 *                and its version 0. The group's single CRC makes it atomic:
 *                after a crash all of it is there or none of it. The index may
 *                point at a sub-entry (its offset is 8-byte aligned).
 *   LOG_FUNCS    payload is the whole set of FUNCTION libraries (its format
 *                is the edge's, redis-compat/t_function.c); key empty. Like
 *                LOG_DBMAP the shard keeps its latest one live; it is not a
 *                key (DBSIZE, FLUSHALL, digests never see it).
 *   LOG_COLL_OP / LOG_SNAPSHOT  collection effects and snapshots (object.h).
 *   LOG_COMMITVER / LOG_RESYNC  replication markers, b-logs only (repl.h,
 *                digest.h); LOG_F_RESYNC marks a catch-up copy of state.
 *   LOG_CHUNK    one piece of a large value (bigval.h): payload is the piece,
 *                aux its byte offset in the value. Applies nothing alone;
 *                an entry flagged LOG_F_CHUNKED completes the sequence.
 *                A batch too large for one group is logged as pieces: groups
 *                flagged LOG_F_PIECE, expire_ms = the batch's random id,
 *                applied only with their commit, a group flagged LOG_F_PIECE
 *                with the same id, no sub-entries (aux 0), and payload
 *                LOG_COMMIT_LEN bytes: u64 pool_seq_now() when written (the
 *                cleaner keeps it as long as older segments, which may hold
 *                its pieces, exist: as for LOG_DEL), u32 number of pieces,
 *                u32 0. Design: db.c, "Batches larger than one group".
 *   LOG_LOSS     a damaged region whose loss was accepted (rowan-check-pool
 *                --fix): it spans exactly the damaged bytes, so the log parses
 *                through it; its payload says what was lost (recovery.h).
 *                Never travels, never indexed.
 *
 * Re-sync. A shard's whole contents can be replaced by a copy taken from
 * another replica (a primary catching a backup up, or a primary fetching a
 * shard whose history it lacks). The sender takes a version V that no
 * write of the shard has, nor ever will (a fresh one from the shard's
 * counter, above every version any replica holds) and sends:
 *   LOG_RESYNC (aux 0, ver V)           begin: for the digest, not replayed;
 *   one entry per key, flag LOG_F_RESYNC, ver V (LOG_SET, LOG_SNAPSHOT,
 *                                       LOG_DBMAP);
 *   LOG_FLUSHDB (db 0xffff, flag LOG_F_RESYNC, ver V)   end.
 * The end record drops everything of the shard older than V, whatever
 * order entries and record are applied in (all are at V), so recovery
 * needs no notion of position. The shard's latest end record stays live
 * (the cleaner keeps it), so recovery can tell a complete re-sync (entries
 * at V and its end) from one a crash cut short (entries above the latest
 * end): that copy is marked damaged and its partial entries are not
 * applied.
 */
#ifndef ROWAN_LOG_H
#define ROWAN_LOG_H
#include <stddef.h>
#include <stdint.h>
#include "pool.h"

#define LOG_HDR_SIZE    40
#define LOG_ALIGN       64
#define LOG_SUB_ALIGN   8
#define LOG_SHARD_NONE  0xffff
#define LOG_VER_MASK    ((1ULL << 48) - 1)
/* Entry flags (the header's flags byte). */
#define LOG_F_RESYNC    0x01  /* a catch-up copy of current state (repl.c), not a new effect */
#define LOG_F_CHUNKED   0x02  /* payload describes a value held by LOG_CHUNK entries (bigval.h) */
#define LOG_F_PIECE     0x04  /* LOG_GROUP: a piece of a batch too large for one group, or
                               * (no sub-entries) the commit of its pieces (below) */
/* Largest entry a log accepts: fits one segment. */
#define LOG_MAX_ENTRY   (POOL_SEG_SIZE)

enum log_type {
    LOG_SET = 1,
    LOG_DEL = 2,
    LOG_FLUSHDB = 3,
    LOG_DBMAP = 4,
    LOG_GROUP = 5,
    LOG_COMMITVER = 6,   /* replication marker: CommitVer of `shard` is `ver`;
                          * or (shard LOG_SHARD_NONE) of several shards, the
                          * payload being log_commitver_pair()s */
    LOG_COLL_OP = 7,
    LOG_SNAPSHOT = 8,
    LOG_RESYNC = 9,      /* replication marker: catch-up of `shard` at version
                          * `ver` begins (aux 0) or ends (aux 1) */
    LOG_LOSS = 10,       /* an accepted loss (recovery.h) */
    LOG_FUNCS = 11,      /* the FUNCTION libraries (server metadata, not keys) */
    LOG_CHUNK = 12,      /* a piece of a value larger than one segment (bigval.h) */
    LOG_TYPE_MAX
};

/* Replication markers (LOG_COMMITVER, LOG_RESYNC) only ever travel to and
 * live in b-logs; they describe other entries and are never indexed. */
static inline int log_type_is_marker(int type) { return type == LOG_COMMITVER || type == LOG_RESYNC; }

/* One <shard, CommitVer> of a multi-shard LOG_COMMITVER's payload: a u64
 * (little endian on the wire), shard in the top 16 bits, the version in
 * the 48 below. */
static inline uint64_t log_commitver_pair(uint16_t shard, uint64_t ver) {
    return (uint64_t)shard << 48 | (ver & ((1ULL << 48) - 1));
}

/* Decoded view of an entry. key/val point into the bytes it was decoded from. */
typedef struct log_entry {
    uint8_t type, flags;
    uint16_t shard;
    uint16_t db;
    uint64_t ver;        /* 48 bits */
    int64_t expire_ms;
    uint64_t aux;
    const char *key; uint32_t klen;
    const char *val; uint32_t vlen;
} log_entry;

#define LOG_COMMIT_LEN 16
/* A piece of a batch (LOG_F_PIECE), and the entry that commits its pieces. */
static inline int log_is_piece(const log_entry *e) {
    return e->type == LOG_GROUP && (e->flags & LOG_F_PIECE) && e->aux;
}
static inline int log_is_piece_commit(const log_entry *e) {
    return e->type == LOG_GROUP && (e->flags & LOG_F_PIECE) && !e->aux;
}

/* Header bytes + key + payload (unpadded). */
static inline size_t log_entry_len(size_t klen, size_t vlen) { return LOG_HDR_SIZE + klen + vlen; }
/* Bytes a top-level entry occupies in a log: len rounded up to LOG_ALIGN. */
static inline size_t log_entry_span(size_t len) { return (len + LOG_ALIGN - 1) & ~(size_t)(LOG_ALIGN - 1); }

/* Encode e into dst (which has room for log_entry_len bytes) and return that
 * length. When with_crc is nonzero the crc field is computed, otherwise it is
 * 0 (sub-entries). Does not write padding. */
size_t log_entry_encode(void *dst, const log_entry *e, int with_crc);
/* Decode the header at src without checking the crc (for index reads of
 * entries already known good, including sub-entries). */
void log_entry_decode(const void *src, log_entry *out);
/* Validate a top-level entry at src with avail bytes readable: header sane
 * (type known, lengths fit in avail and in LOG_MAX_ENTRY) and crc matches.
 * Returns total_len (>0) and fills *out, or 0 if this is not a valid entry. */
size_t log_entry_check(const void *src, size_t avail, log_entry *out);
/* The same without the crc: does the header at src look like an entry's?
 * For reading what a damaged region held; nothing in it may be trusted. */
size_t log_entry_header(const void *src, size_t avail, log_entry *out);
/* Iterate a LOG_GROUP's sub-entries: *pos starts at 0; returns 1 and fills
 * *sub (and *sub_off, the byte offset of the sub-entry from the group's start)
 * while there are more, 0 at the end or on a malformed group. */
int log_group_next(const log_entry *group, size_t *pos, log_entry *sub, size_t *sub_off);

/* ---- Log writers ----
 * A log_writer appends entries to a chain of segments it owns. One thread
 * owns a writer; there is no locking inside. On a non-pmem pool, appended
 * bytes are durable only after log_writer_sync(); on pmem each append is
 * persisted as it is written. Whenever bytes become durable the writer
 * records it in the segment's meta entry (pool.h, `end`): a segment is
 * sealed with the end of its log, the open one's end is raised. */
#define LOG_MAX_CLOSED 8
typedef struct log_seg_end {
    int32_t seg;
    uint32_t end;         /* bytes of its log */
} log_seg_end;

/* What one flush of a writer covers (log_writer_detach): the segments left
 * since the previous one, each with the end of its log, and how far the
 * segment being written had got. */
typedef struct log_flush {
    log_seg_end closed[LOG_MAX_CLOSED];
    int nclosed;
    int32_t head;         /* the writer's segment at detach, -1 if none */
    uint32_t head_pos;    /* bytes of it written at detach */
    uint64_t head_seq;    /* its allocation seq: is it still that segment? */
} log_flush;

typedef struct log_writer {
    pool *p;
    enum seg_owner owner;
    uint16_t owner_id;
    int32_t seg;          /* current segment, -1 before the first append */
    uint32_t pos;         /* next free byte inside the current segment */
    uint64_t dirty_lo;    /* pool range appended but not yet synced */
    uint64_t dirty_hi;
    log_seg_end closed[LOG_MAX_CLOSED]; /* segments filled since the last sync */
    int nclosed;
    uint32_t keep_free;   /* pool_seg_alloc's keep_free for this writer */
    /* Called for each filled segment after it has been synced; may be NULL.
     * Single-node t-logs mark it COMMITTED here (Rowan-KV Fig. 6). */
    void (*on_sealed)(struct log_writer *w, uint32_t seg);
    /* Called after each log_writer_wrote, with the entry readable at
     * pool_ptr(off); may be NULL. Workers replicate from here (repl.c). */
    void (*on_wrote)(struct log_writer *w, uint64_t off, size_t len);
    void *ctx;
} log_writer;

void log_writer_init(log_writer *w, pool *p, enum seg_owner owner, uint16_t owner_id);
/* Release what the writer allocated once it is done with (nothing today:
 * entries are encoded in the pool); neither syncs nor seals. */
void log_writer_free(log_writer *w);
/* Reserve room for an entry of len bytes (unpadded) and return its pool
 * offset, switching to a fresh segment when the current one cannot hold it.
 * keep_free overrides w->keep_free for this call when >= 0. Returns 0 when no
 * segment can be had (pool full). The caller then writes the entry at
 * pool_ptr(p, off) and calls log_writer_wrote(). */
uint64_t log_writer_reserve(log_writer *w, size_t len, int64_t keep_free);
/* Where to encode the entry reserved at off: the pool itself, through the
 * mapping, on pmem and on block storage alike. On block storage the stores
 * dirty the page cache and the next flush (fdatasync or msync) writes them
 * back. This used to be a staging buffer written with one pwrite per entry,
 * to spare each flush the write-protect faults of a mapped page (measured
 * then: 150 KB batches flushed in 2.7 ms via the mapping, 1.5 ms via pwrite);
 * but the pwrite was ~28% of the server's CPU at SET -P 16, and with the
 * server CPU-bound the mapping won: 2.65-3.2 against 4.1-4.4 CPU-seconds per
 * million SETs, and more SETs/s (BENCHMARKS.md, issue 14). */
void *log_writer_dst(log_writer *w, uint64_t off, size_t len);
/* The entry of len bytes at off is encoded (at log_writer_dst): make it part
 * of the log. On pmem it is persisted at once; otherwise it becomes durable
 * at the next sync. Readers may follow a reference
 * to it as soon as this returns. */
void log_writer_wrote(log_writer *w, uint64_t off, size_t len);
/* Make everything appended so far durable (group commit). Cheap when nothing
 * is dirty. Seals (USING->USED, then on_sealed) segments filled meanwhile
 * and records how far the current one is durable. */
void log_writer_sync(log_writer *w);
/* Hand the writer's unsynced state to an external persister (the
 * group-commit syncer): fills f with the segments filled since the last
 * sync and the current position, and forgets the dirty range. The caller
 * must make everything written so far durable (pool_sync_all) and then call
 * log_writer_flushed(w, f), which seals those segments and records the
 * position (unless the segment has moved on since). Flushes may complete
 * out of order. */
void log_writer_detach(log_writer *w, log_flush *f);
void log_writer_flushed(log_writer *w, const log_flush *f);
/* An on_sealed callback for logs whose entries are on every replica once
 * sealed (t-logs: sealed when their batch landed; clean logs; rpc-mode
 * backup logs, indexed as they land): the segment is COMMITTED at once
 * (Rowan-KV Fig. 6). */
void log_writer_commit_sealed(log_writer *w, uint32_t seg);
/* Leave the current segment as if it were full (it is sealed at the next
 * sync, like any filled segment), so that the cleaner can take it. The next
 * append allocates a fresh one. */
void log_writer_leave(log_writer *w);
/* Seal the current segment now (used at shutdown and by tests). */
void log_writer_seal(log_writer *w);

#endif
