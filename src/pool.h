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
    uint32_t reserved;
    uint64_t seq;        /* allocation sequence number, 0 when free */
};

typedef struct pool pool;

/* Open or create the pool file. A new file is created with the given size
 * (rounded down to whole segments; at least 4 segments of data: the
 * server asks for more, db_min_pool_size). An existing
 * file keeps its own size (size is then ignored). Returns NULL and fills err
 * on failure (bad magic, wrong version, I/O error, too small). */
pool *pool_open(const char *path, uint64_t size, char *err, size_t errlen);
void pool_close(pool *p);

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
/* Change state (USING->USED, USED->COMMITTED, USING->COMMITTED...). */
void pool_seg_set_state(pool *p, uint32_t seg, enum seg_state st);
/* Zero the segment's data, persist, then mark it FREE and reset live bytes. */
void pool_seg_free(pool *p, uint32_t seg);
struct seg_meta pool_seg_meta(const pool *p, uint32_t seg);
uint32_t pool_free_count(const pool *p);
/* Current value of the global segment sequence counter (next seq to hand out). */
uint64_t pool_seq_now(const pool *p);

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
/* Copy len bytes into the pool at dst. On pmem: non-temporal copy plus drain,
 * i.e. durable on return. Otherwise: plain memcpy (caller persists later). */
void pool_write(pool *p, void *dst, const void *src, size_t len);

#endif
