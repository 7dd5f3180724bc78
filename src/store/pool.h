/* pool.h -- the persistent pool: one file per server, mapped with libpmem.
 *
 * Layout (all offsets fixed by the superblock, all little endian):
 *
 *   [0, 4 KiB)            superblock: magic, layout version, pool size,
 *                         segment count, segment size, global segment
 *                         sequence counter, creation time.
 *   [4 KiB, data_off)     segment meta table: one struct seg_meta per segment.
 *   [data_off, end)       data segments, each POOL_SEG_SIZE bytes; data_off is
 *                         a multiple of POOL_SEG_SIZE.
 *
 * Segment states follow Rowan-KV §4.2.1: free -> using -> used -> committed
 * -> free. The owner says which kind of thread allocated the segment. Every
 * state change is persisted before pool_seg_* returns.
 *
 * Each meta entry also records how much of its segment's log is known to be
 * durable (`end`, bytes from the segment start; 0 = nothing known). For a
 * sealed segment (USED, COMMITTED) it is the exact end of its log, written
 * when the writer sealed it after the flush that covered it. For an open one
 * (USING) it is a lower bound that the owner raises after each completed
 * flush (pool_seg_set_end): every byte before it is durable, so the claim is
 * true whenever it reaches the media, even before the next flush carries it
 * there (on block storage it is a plain store, made durable by the next
 * device flush of the pool: it lags one flush). Recovery uses it to tell
 * damage (bad bytes before `end`) from a torn tail (bad bytes after it, in
 * an open segment, where a write was in flight at the crash).
 *
 * Invariants:
 *  - A free segment's data is all zero (pool_seg_free zeroes it before it is
 *    marked free; a never-used segment of a new pool reads as zeroes from its
 *    fallocated blocks), so the end of a log is where checksums stop matching
 *    and a reader of a fresh segment sees zeroes.
 *  - seq is taken from a global counter, persisted, strictly increasing across
 *    restarts; a segment's seq tells which segments existed before it. A
 *    deletion entry records the counter's value when written (see log.h).
 *  - Persistence: on a real pmem mapping (pmem_is_pmem) pool_persist uses
 *    pmem_persist; otherwise pmem_msync. Never pmem_persist a non-pmem map.
 *
 * Thread safety: pool_seg_alloc/free/set_state are safe from any thread
 * (internal mutex). Live-byte counters are atomics. */
#ifndef ROWAN_POOL_H
#define ROWAN_POOL_H
#include <stddef.h>
#include <stdint.h>

#define POOL_SEG_SIZE   (4u << 20)
#define POOL_MAGIC      0x4c4f4f504e574f52ULL /* "ROWNPOOL" */
#define POOL_VERSION    1

enum seg_state { SEG_FREE = 0, SEG_USING = 1, SEG_USED = 2, SEG_COMMITTED = 3 };
enum seg_owner { OWNER_NONE = 0, OWNER_WORKER = 1, OWNER_CONTROL = 2, OWNER_CLEAN = 3 };

/* Persisted, 16 bytes per segment. */
struct seg_meta {
    uint8_t  state;      /* enum seg_state */
    uint8_t  owner;      /* enum seg_owner */
    uint16_t owner_id;   /* worker number etc. */
    uint32_t end;        /* bytes of the log known durable (see above), 0 = unknown */
    uint64_t seq;        /* allocation sequence number, 0 when free */
};

typedef struct pool pool;

/* pool_open flags. */
#define POOL_OPEN_EXISTING 0x1  /* never create: a missing file is an error */
#define POOL_OPEN_SALVAGE  0x2  /* accept a file shorter than its superblock says:
                                 * the missing bytes read as zeroes (and are
                                 * not backed by the file) until
                                 * pool_restore_size; see pool_missing_from */

/* Open or create the pool file. A new file is created with the given size
 * (rounded down to whole segments; at least 4 segments of data: the
 * server asks for more, db_min_pool_size). An existing
 * file keeps its own size (size is then ignored). Returns NULL and fills err
 * on failure (bad magic, wrong version, I/O error, too small, truncated
 * without POOL_OPEN_SALVAGE). */
pool *pool_open(const char *path, uint64_t size, int flags, char *err, size_t errlen);
void pool_close(pool *p);
/* A truncated pool (opened with POOL_OPEN_SALVAGE): the file's size, from
 * which on the pool's bytes are missing; 0 when the file is whole. */
uint64_t pool_missing_from(const pool *p);
/* Give a truncated pool its full size back: the missing bytes become zero
 * blocks of the file (durable on return), mapped like the rest. Nothing is
 * written to the file before this is called. 0 ok, -1 with err filled. */
int pool_restore_size(pool *p, char *err, size_t errlen);

int pool_is_pmem(const pool *p);
uint8_t *pool_base(const pool *p);
uint64_t pool_size(const pool *p);
uint32_t pool_nsegs(const pool *p);
/* Byte offset of segment seg's first byte (always > 0 and 64-byte aligned). */
uint64_t pool_seg_offset(const pool *p, uint32_t seg);
/* Segment containing pool offset off; off must lie in the data area. */
uint32_t pool_seg_of(const pool *p, uint64_t off);
static inline void *pool_ptr(const pool *p, uint64_t off) { return pool_base(p) + off; }

/* Allocate a free segment: state USING, given owner, fresh seq. Returns the
 * segment number, or -1 when the number of free segments is <= keep_free (so
 * callers can hold some segments back, e.g. for the cleaner or deletions). */
int pool_seg_alloc(pool *p, enum seg_owner owner, uint16_t owner_id, uint32_t keep_free);
/* Change state (USING->USED, USED->COMMITTED, USING->COMMITTED...); the
 * recorded end is kept. */
void pool_seg_set_state(pool *p, uint32_t seg, enum seg_state st);
/* Record that the first `end` bytes of seg's log are durable. Only the
 * segment's owner calls it, only with bytes a completed flush (or persist)
 * covered. On pmem it is persisted at once; otherwise it becomes durable with
 * the next device flush of the pool (pool_sync_all, or a persist of the meta
 * page), which is fine because the claim is already true. */
void pool_seg_set_end(pool *p, uint32_t seg, uint32_t end);
/* Forget the segment's recorded end (persisted), zero its data (persisted),
 * then mark it FREE and reset live bytes. */
void pool_seg_free(pool *p, uint32_t seg);
struct seg_meta pool_seg_meta(const pool *p, uint32_t seg);
uint32_t pool_free_count(const pool *p);
/* Call fn (outside the pool's lock, from the allocating thread, which may
 * hold shard locks) after any allocation that leaves fewer than level
 * segments free; level 0 turns it off. The cleaner uses it to sleep until
 * its free-space target is threatened instead of polling. */
void pool_set_low_water(pool *p, uint32_t level, void (*fn)(void));
/* Current value of the global segment sequence counter (next seq to hand out). */
uint64_t pool_seq_now(const pool *p);

/* Access hints on a pool on block storage (no-op on pmem). The mapping is
 * MADV_RANDOM, so a cold read costs about one device read; a reader going
 * through whole segments front to back (recovery, the cleaner) marks them
 * sequential while it reads them (on), then random again (off). */
void pool_advise_sequential(pool *p, uint32_t seg, uint32_t nsegs, int on);
/* Tests (DEBUG COLDREAD DROP): evict the pool's clean pages from the page
 * cache, so the next reads of them go to the device. No-op on pmem. */
void pool_drop_cache(pool *p);

/* Live-byte accounting (DRAM only; rebuilt by recovery). */
void pool_live_add(pool *p, uint32_t seg, int64_t delta);
int64_t pool_live_get(const pool *p, uint32_t seg);

/* Make [addr, addr+len) durable: pmem_persist on pmem, pmem_msync otherwise. */
void pool_persist(pool *p, const void *addr, size_t len);
/* Make every byte written to the pool so far durable with one device flush
 * (fdatasync of the pool file); a no-op on pmem, where writes are persisted
 * as they are made. Used by the group-commit syncer. */
void pool_sync_all(pool *p);
/* Write len bytes at pool offset off through the file (pwrite), for pools
 * that are not pmem; the mapping sees them at once (same page cache). */
void pool_pwrite(pool *p, uint64_t off, const void *buf, size_t len);
/* Zero len bytes of the pool at off, durably (on return). */
void pool_zero(pool *p, uint64_t off, size_t len);
/* Copy len bytes into the pool at dst. On pmem: non-temporal copy plus drain,
 * i.e. durable on return. Otherwise: plain memcpy (caller persists later). */
void pool_write(pool *p, void *dst, const void *src, size_t len);

#endif
