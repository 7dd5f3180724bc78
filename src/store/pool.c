/* pool.c -- the persistent pool file: superblock, segment meta table, data.
 *
 * Layout (see pool.h): superblock at 0, meta table at POOL_META_OFF (4 KiB),
 * data from data_off, a multiple of POOL_SEG_SIZE. With 16-byte meta entries
 * one 4 MiB header segment describes ~1 TiB of data; bigger pools use more.
 *
 * Creation is atomic: the file is built under a temporary name (allocated
 * with posix_fallocate so later flushes never need to allocate blocks, then
 * initialised and synced) and linked into place only when complete. So a
 * file at `path` is either a whole pool or something we refuse to open.
 *
 * Lazy zero-fill. fallocate is instant, but it leaves "unwritten" extents:
 * they read as zeroes (so the free-segment invariant holds), yet the first
 * write into each block makes the next fdatasync convert extents and commit
 * filesystem metadata too, which made every group commit on a new pool about
 * twice as slow (docs/DECISIONS.md). So a segment whose blocks may still be
 * unwritten ("raw", found with FIEMAP when the pool is opened) gets real
 * zeroes written before its first use: a background thread keeps the next
 * POOL_ZERO_AHEAD segments to be allocated zero-filled and written back,
 * and pool_seg_alloc zero-fills a raw segment itself if the thread has not
 * reached it. A raw segment is never in use while it is zero-filled: the
 * thread works only on free segments and an allocation of the segment it is
 * filling waits for it.
 *
 * Superblock: the immutable geometry is covered by a CRC32C; the only field
 * that ever changes is seq_lease, a single aligned 8-byte word, so updates
 * cannot tear it.
 *
 * Sequence numbers: segment seqs come from a counter. To avoid a superblock
 * write per allocation, the superblock holds a lease: every seq handed out is
 * below seq_lease, and the lease is extended (and persisted) by
 * POOL_SEQ_LEASE before a seq at or past it is used. On open the counter
 * restarts at max(seq_lease, largest seq in the meta table + 1), so seqs are
 * strictly increasing across restarts. Seq 0 never names a live segment.
 *
 * Meta entries are written as two 8-byte words (state/owner/owner_id/end,
 * then seq), each an atomic store, persisted in an order that keeps every
 * crash state meaningful: allocation persists the seq before the state turns
 * USING; freeing persists end 0, then the zeroed data, then state FREE, then
 * seq 0. A FREE entry's seq is meaningless (it may be stale after a crash).
 *
 * Freeing zeroes the first page before the rest, each persisted: if a crash
 * interrupts the zeroing of a segment that is still marked used, recovery
 * finds a zero first entry and reads the segment as empty instead of finding
 * stale entries behind a hole. Its recorded end was cleared first, so the
 * zeroes are not taken for damage to a log that should reach that end.
 *
 * A truncated file (shorter than its superblock says) can be opened for
 * salvage (POOL_OPEN_SALVAGE): the file is mapped for what it has and
 * anonymous zero pages stand in for the rest, so recovery reads the missing
 * bytes as zeroes and finds damage wherever a recorded end says a log
 * reached into them. The file is not touched until pool_restore_size, which
 * the caller runs only once it has decided to use the pool (rowan-check-pool
 * --fix, or a cluster node that repairs from its replicas).
 *
 * DRAM state: a free stack (rebuilt from the meta table on open) and the
 * per-segment live-byte atomics. The mutex guards the free stack, the seq
 * counter and meta writes. An exclusive flock() on the file keeps a second
 * process from opening the same pool.
 *
 * A failed persist (msync error) aborts the process: carrying on would mean
 * acknowledging writes that are not durable. */
#include "pool.h"
#include "crc32c.h"

#include <errno.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <fcntl.h>
#include <libpmem.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pool layout is little endian");
_Static_assert(sizeof(struct seg_meta) == 16, "seg_meta is 16 bytes");

#define POOL_META_OFF   4096u
#define POOL_MIN_SEGS   4u
#define POOL_SEQ_LEASE  1024u
#define POOL_PAGE       4096u
#define POOL_ZERO_AHEAD 16u        /* raw segments zero-filled ahead of allocation */
/* Bytes per zero-filling pwrite. The page cache sizes a folio after the
 * write that creates it, and the folio is what the kernel writes back:
 * after each flush the next append into a folio dirties all of it again.
 * With 64 KiB chunks every flush at SET -P 1 wrote each worker's 64 KiB
 * tail folio for the ~2 KiB appended since the last flush (50-77 bytes
 * written per acknowledged byte, write_bytes of /proc/PID/io); 16 KiB
 * brought that to 15-17 (4.4 at -P 16) at the same CPU per SET, while
 * 4 KiB (6-8) cost SET -P 16 a write-protect fault and a writeback per
 * page: 15-20% more CPU per SET (issue 14, BENCHMARKS.md). Not more
 * either: every small append into a large folio walks all of its block
 * buffers (ext4_block_write_begin, block_commit_write; with 1 MiB chunks a
 * 150-byte append cost 2.4 us of CPU). */
#define POOL_ZERO_CHUNK (16u << 10)

/* On-media superblock. Bytes [0, SB_CRC_LEN) are immutable and checksummed. */
struct pool_sb {
    uint64_t magic;
    uint32_t version;
    uint32_t seg_size;
    uint64_t pool_size;
    uint64_t data_off;
    uint32_t nsegs;
    uint32_t meta_off;
    uint64_t ctime;      /* creation time, unix seconds */
    uint32_t crc;        /* CRC32C of bytes [0, offsetof(crc)) */
    uint32_t pad;
    uint64_t seq_lease;  /* every seq ever handed out is below this */
};
#define SB_CRC_LEN offsetof(struct pool_sb, crc)

struct pool {
    uint8_t *base;
    uint64_t size;
    int is_pmem;
    int own_map;            /* mapped by map_short (munmap), not by libpmem */
    uint64_t missing_from;  /* truncated file: its size; 0 when whole */
    int lock_fd;
    struct pool_sb *sb;
    struct seg_meta *meta;
    uint64_t data_off;
    uint32_t nsegs;

    pthread_mutex_t mu;
    uint32_t *free_stack;   /* free segment numbers; top = next allocated */
    /* written under mu; read without it by pool_free_count (every write
     * command asks it, db_space_low: the mutex was a cache line both
     * workers and the zero-fill thread bounced per SET) */
    _Atomic uint32_t nfree;
    _Atomic uint64_t next_seq; /* next seq to hand out; written under mu */
    _Atomic int64_t *live;  /* live bytes per segment */

    /* Lazy zero-fill (see the file comment); all under mu. */
    uint8_t *raw;           /* per segment: free, blocks may be unwritten */
    uint32_t nraw;
    int64_t zeroing;        /* segment the zero thread is filling, or -1 */
    int zstop, zrunning;
    pthread_cond_t zwork;   /* an allocation moved the free stack */
    /* pool_set_low_water: called after an allocation leaves fewer than
     * low_water segments free (the cleaner sleeps until then). */
    _Atomic uint32_t low_water;
    void (*on_low)(void);
    pthread_cond_t zdone;   /* the zero thread finished a segment */
    pthread_t zthread;
    uint8_t *zbuf;          /* POOL_ZERO_CHUNK zero bytes */
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- persistence ---- */

void pool_persist(pool *p, const void *addr, size_t len) {
    if (!len)
        return;
    if (p->is_pmem) {
        pmem_persist(addr, len);
        return;
    }
    if (pmem_msync(addr, len) != 0) {
        fprintf(stderr, "rowan: FATAL: msync of the pool failed: %s\n", strerror(errno));
        abort();
    }
}

void pool_write(pool *p, void *dst, const void *src, size_t len) {
    if (p->is_pmem)
        pmem_memcpy(dst, src, len, PMEM_F_MEM_NONTEMPORAL); /* drains: durable */
    else
        memcpy(dst, src, len);
}

/* ---- geometry ---- */

/* Header segments needed in front of `total` file segments so that the meta
 * table for the rest fits: smallest h with META_OFF + 16*(total-h) <= h*SEG. */
static uint32_t header_segs(uint64_t total) {
    uint64_t h = 1;
    while (h < total && POOL_META_OFF + 16 * (total - h) > h * (uint64_t)POOL_SEG_SIZE)
        h++;
    return (uint32_t)h;
}

static uint32_t sb_crc(const struct pool_sb *sb) {
    return crc32c(0, sb, SB_CRC_LEN);
}

/* ---- meta entries: two atomic 8-byte words ---- */

static uint64_t *meta_words(pool *p, uint32_t seg) {
    return (uint64_t *)(void *)&p->meta[seg];
}

static uint64_t state_word(enum seg_state st, enum seg_owner owner, uint16_t owner_id,
                           uint32_t end) {
    return (uint64_t)st | (uint64_t)owner << 8 | (uint64_t)owner_id << 16 | (uint64_t)end << 32;
}

static void meta_store_state(pool *p, uint32_t seg, uint64_t word) {
    uint64_t *w = meta_words(p, seg);
    __atomic_store_n(&w[0], word, __ATOMIC_RELEASE);
    pool_persist(p, &w[0], 8);
}

static void meta_store_seq(pool *p, uint32_t seg, uint64_t seq) {
    uint64_t *w = meta_words(p, seg);
    __atomic_store_n(&w[1], seq, __ATOMIC_RELEASE);
    pool_persist(p, &w[1], 8);
}

struct seg_meta pool_seg_meta(const pool *p, uint32_t seg) {
    const uint64_t *w = (const uint64_t *)(const void *)&p->meta[seg];
    uint64_t s = __atomic_load_n(&w[0], __ATOMIC_ACQUIRE);
    struct seg_meta m;
    m.state = (uint8_t)s;
    m.owner = (uint8_t)(s >> 8);
    m.owner_id = (uint16_t)(s >> 16);
    m.end = (uint32_t)(s >> 32);
    m.seq = __atomic_load_n(&w[1], __ATOMIC_ACQUIRE);
    return m;
}

/* ---- creation ---- */

/* Real zeroes over [from, to) of the file, durable on return. 0 or an
 * errno. */
static int fill_zero(int fd, uint64_t from, uint64_t to) {
    char *zero = calloc(1, POOL_ZERO_CHUNK);
    if (!zero)
        return ENOMEM;
    for (uint64_t off = from; off < to; off += POOL_ZERO_CHUNK) {
        size_t n = to - off < POOL_ZERO_CHUNK ? (size_t)(to - off) : POOL_ZERO_CHUNK;
        if (pwrite(fd, zero, n, (off_t)off) != (ssize_t)n) {
            int e = errno ? errno : EIO;
            free(zero);
            return e;
        }
    }
    free(zero);
    return fsync(fd) == 0 ? 0 : errno;
}

/* Reserve the file's blocks (instant; the data segments stay "unwritten"
 * until zero-filled lazily) and give the header area real zeroes: the meta
 * table is persisted page by page all the time, and each first touch of an
 * unwritten page would cost an extent conversion. 0 or an errno. */
static int pool_allocate(int fd, uint64_t size, uint64_t data_off) {
    int rc = posix_fallocate(fd, 0, (off_t)size);
    if (rc != 0)
        return rc;
    return fill_zero(fd, 0, data_off);
}

/* Build a complete pool file at tmp; 0 on success. */
static int pool_build(const char *tmp, uint64_t size, uint32_t nsegs, uint64_t data_off,
                      char *err, size_t errlen) {
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        set_err(err, errlen, "cannot create pool file %s: %s", tmp, strerror(errno));
        return -1;
    }
    int rc = pool_allocate(fd, size, data_off);
    if (rc != 0) {
        set_err(err, errlen, "cannot allocate %llu bytes for pool file %s: %s",
                (unsigned long long)size, tmp, strerror(rc));
        close(fd);
        return -1;
    }
    close(fd);

    size_t mapped;
    int is_pmem;
    uint8_t *base = pmem_map_file(tmp, 0, 0, 0, &mapped, &is_pmem);
    if (!base) {
        set_err(err, errlen, "cannot map pool file %s: %s", tmp, pmem_errormsg());
        return -1;
    }
    is_pmem = pmem_is_pmem(base, mapped);
    /* The meta table is already zero, which is SEG_FREE with seq 0 for
     * every segment. */
    struct pool_sb sb;
    memset(&sb, 0, sizeof sb);
    sb.magic = POOL_MAGIC;
    sb.version = POOL_VERSION;
    sb.seg_size = POOL_SEG_SIZE;
    sb.pool_size = size;
    sb.data_off = data_off;
    sb.nsegs = nsegs;
    sb.meta_off = POOL_META_OFF;
    sb.ctime = (uint64_t)time(NULL);
    sb.crc = sb_crc(&sb);
    sb.seq_lease = 1;
    memcpy(base, &sb, sizeof sb);
    if (is_pmem)
        pmem_persist(base, data_off);
    else if (pmem_msync(base, data_off) != 0) {
        set_err(err, errlen, "cannot sync pool file %s: %s", tmp, strerror(errno));
        pmem_unmap(base, mapped);
        return -1;
    }
    pmem_unmap(base, mapped);

    fd = open(tmp, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        set_err(err, errlen, "cannot sync pool file %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static void sync_parent_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Create a new pool at path (atomically: build under a temporary name, then
 * link). Returns 0 on success, also when another process created it first. */
static int pool_create(const char *path, uint64_t size, char *err, size_t errlen) {
    uint64_t total = size / POOL_SEG_SIZE;
    uint32_t hdr = total ? header_segs(total) : 1;
    if (total < (uint64_t)hdr + POOL_MIN_SEGS || total - hdr > UINT32_MAX) {
        set_err(err, errlen, "pool size %llu bytes is unusable: need at least %u MiB "
                "(%u data segments of %u MiB plus the header)",
                (unsigned long long)size,
                (unsigned)((POOL_MIN_SEGS + 1) * (POOL_SEG_SIZE >> 20)),
                POOL_MIN_SEGS, POOL_SEG_SIZE >> 20);
        return -1;
    }
    uint64_t rounded = total * POOL_SEG_SIZE;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.creating.%ld", path, (long)getpid());
    unlink(tmp); /* a leftover from an earlier crashed attempt of this pid */
    if (pool_build(tmp, rounded, (uint32_t)(total - hdr),
                   (uint64_t)hdr * POOL_SEG_SIZE, err, errlen) != 0) {
        unlink(tmp);
        return -1;
    }
    if (link(tmp, path) != 0 && errno != EEXIST) {
        set_err(err, errlen, "cannot create pool file %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    unlink(tmp);
    sync_parent_dir(path);
    return 0;
}

/* ---- open ---- */

/* Check the superblock of a file of file_size bytes. A file shorter than
 * the superblock's pool size is accepted with salvage (the caller maps the
 * missing tail as zeroes); one that is longer never is. */
static int sb_validate(const struct pool_sb *sb, uint64_t file_size, int salvage,
                       const char *path, char *err, size_t errlen) {
    if (sb->magic != POOL_MAGIC) {
        set_err(err, errlen, "%s is not a Rowan pool file (bad magic)", path);
        return -1;
    }
    if (sb->version != POOL_VERSION) {
        set_err(err, errlen, "%s has pool layout version %u, this build reads version %u",
                path, sb->version, POOL_VERSION);
        return -1;
    }
    if (sb_crc(sb) != sb->crc) {
        set_err(err, errlen, "%s: pool superblock checksum mismatch (corrupted)", path);
        return -1;
    }
    if (sb->seg_size != POOL_SEG_SIZE) {
        set_err(err, errlen, "%s uses %u-byte segments, this build uses %u",
                path, sb->seg_size, POOL_SEG_SIZE);
        return -1;
    }
    if (sb->pool_size != file_size && !(salvage && file_size < sb->pool_size)) {
        set_err(err, errlen, "%s: file size %llu does not match the pool size %llu "
                "in its superblock (truncated or extended?)", path,
                (unsigned long long)file_size, (unsigned long long)sb->pool_size);
        return -1;
    }
    if (sb->meta_off != POOL_META_OFF || sb->nsegs < POOL_MIN_SEGS ||
        sb->data_off % POOL_SEG_SIZE != 0 ||
        sb->data_off < POOL_META_OFF + 16ull * sb->nsegs ||
        sb->data_off + (uint64_t)sb->nsegs * POOL_SEG_SIZE != sb->pool_size) {
        set_err(err, errlen, "%s: inconsistent pool geometry in superblock", path);
        return -1;
    }
    return 0;
}

/* Check the meta table and rebuild the DRAM state from it. */
static int pool_load_meta(pool *p, const char *path, char *err, size_t errlen) {
    uint64_t max_seq = 0;
    p->nfree = 0;
    /* Push in descending order so the lowest-numbered free segment is on top. */
    for (uint32_t i = p->nsegs; i-- > 0;) {
        struct seg_meta m = pool_seg_meta(p, i);
        if (m.state > SEG_COMMITTED || m.owner > OWNER_CLEAN) {
            set_err(err, errlen, "%s: segment %u has an invalid meta entry "
                    "(state %u, owner %u)", path, i, m.state, m.owner);
            return -1;
        }
        if (m.state == SEG_FREE) {
            p->free_stack[p->nfree++] = i;
            continue;
        }
        if (m.seq == 0) {
            set_err(err, errlen, "%s: segment %u is in use but has no sequence number",
                    path, i);
            return -1;
        }
        if (m.seq > max_seq)
            max_seq = m.seq;
    }
    uint64_t next = p->sb->seq_lease;
    if (max_seq + 1 > next)
        next = max_seq + 1;
    if (next == 0)
        next = 1;
    atomic_store(&p->next_seq, next);
    return 0;
}

/* ---- lazy zero-fill ---- */

/* Mark free segments overlapping [from, to) of the file raw. */
static void mark_raw(pool *p, uint64_t from, uint64_t to) {
    if (to <= p->data_off)
        return;
    if (from < p->data_off)
        from = p->data_off;
    for (uint64_t seg = (from - p->data_off) / POOL_SEG_SIZE;
         seg < p->nsegs && p->data_off + seg * POOL_SEG_SIZE < to; seg++) {
        if (!p->raw[seg] && pool_seg_meta(p, (uint32_t)seg).state == SEG_FREE) {
            p->raw[seg] = 1;
            p->nraw++;
        }
    }
}

/* Find the free segments whose blocks are unwritten extents or holes. Where
 * FIEMAP is not supported (tmpfs...) there are no unwritten extents to
 * worry about, and nothing is raw. */
static void find_raw(pool *p) {
    enum { NEXT = 128 };
    struct fiemap *fm = calloc(1, sizeof(*fm) + NEXT * sizeof(struct fiemap_extent));
    if (!fm)
        return;
    uint64_t pos = p->data_off, end = p->size;
    while (pos < end) {
        memset(fm, 0, sizeof(*fm));
        fm->fm_start = pos;
        fm->fm_length = end - pos;
        fm->fm_extent_count = NEXT;
        if (ioctl(p->lock_fd, FS_IOC_FIEMAP, fm) != 0)
            break;
        if (fm->fm_mapped_extents == 0) {
            mark_raw(p, pos, end); /* a hole to the end */
            break;
        }
        int last = 0;
        for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
            const struct fiemap_extent *fe = &fm->fm_extents[i];
            if (fe->fe_logical > pos)
                mark_raw(p, pos, fe->fe_logical); /* a hole */
            if (fe->fe_flags & FIEMAP_EXTENT_UNWRITTEN)
                mark_raw(p, fe->fe_logical, fe->fe_logical + fe->fe_length);
            if (fe->fe_logical + fe->fe_length > pos)
                pos = fe->fe_logical + fe->fe_length;
            last |= (fe->fe_flags & FIEMAP_EXTENT_LAST) != 0;
        }
        if (last) {
            if (pos < end)
                mark_raw(p, pos, end);
            break;
        }
    }
    free(fm);
}

/* Write real zeroes over a raw segment through the file. wait: also write
 * them back now (the zero thread), so the extent conversion is done before
 * the segment is used; an allocation leaves that to its first flush. */
static void zero_fill(pool *p, uint32_t seg, int wait) {
    uint64_t off = pool_seg_offset(p, seg);
    for (uint32_t done = 0; done < POOL_SEG_SIZE; done += POOL_ZERO_CHUNK)
        pool_pwrite(p, off + done, p->zbuf, POOL_ZERO_CHUNK);
    if (wait)
        sync_file_range(p->lock_fd, (off64_t)off, POOL_SEG_SIZE,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                        SYNC_FILE_RANGE_WAIT_AFTER);
}

/* A raw segment among the next POOL_ZERO_AHEAD to be allocated, or -1.
 * Caller holds the mutex. */
static int64_t raw_ahead(const pool *p) {
    uint32_t low = p->nfree > POOL_ZERO_AHEAD ? p->nfree - POOL_ZERO_AHEAD : 0;
    for (uint32_t i = p->nfree; i-- > low;)
        if (p->raw[p->free_stack[i]])
            return p->free_stack[i];
    return -1;
}

static void *zero_main(void *arg) {
    pool *p = arg;
    pthread_setname_np(pthread_self(), "rowan-zero");
    pthread_mutex_lock(&p->mu);
    while (!p->zstop && p->nraw) {
        int64_t seg = raw_ahead(p);
        if (seg < 0) {
            pthread_cond_wait(&p->zwork, &p->mu);
            continue;
        }
        p->zeroing = seg;
        pthread_mutex_unlock(&p->mu);
        zero_fill(p, (uint32_t)seg, 1);
        pthread_mutex_lock(&p->mu);
        p->raw[seg] = 0;
        p->nraw--;
        p->zeroing = -1;
        pthread_cond_broadcast(&p->zdone);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Set up lazy zero-fill for an opened pool (block storage only). Not when
 * fill is 0: a truncated file (the fill would write past its end before
 * its size is restored) or a pool only being checked (rowan-check-pool
 * writes nothing). */
static int zero_setup(pool *p, int fill) {
    p->zeroing = -1;
    pthread_cond_init(&p->zwork, NULL);
    pthread_cond_init(&p->zdone, NULL);
    if (p->is_pmem || !fill)
        return 0;
    find_raw(p);
    if (!p->nraw)
        return 0;
    p->zbuf = calloc(1, POOL_ZERO_CHUNK);
    if (!p->zbuf)
        return -1;
    p->zrunning = pthread_create(&p->zthread, NULL, zero_main, p) == 0;
    return 0;
}

static void zero_stop(pool *p) {
    pthread_mutex_lock(&p->mu);
    p->zstop = 1;
    pthread_cond_broadcast(&p->zwork);
    pthread_mutex_unlock(&p->mu);
    if (p->zrunning)
        pthread_join(p->zthread, NULL);
    p->zrunning = 0;
}

/* Access hints, for a pool on block storage (pmem has no page cache). The
 * mapping is MADV_RANDOM: a read of a key not in memory faults in its own
 * pages, not the read-around window (up to the device's read-ahead, 8 MiB
 * here), which for a pool larger than memory turned each GET of a 1 KB value
 * into megabytes of device reads that evicted the rest of the cache. */
static void advise_random(pool *p, uint64_t from) {
    if (!p->is_pmem && from < p->size)
        (void)madvise(p->base + from, p->size - from, MADV_RANDOM);
}

void pool_advise_sequential(pool *p, uint32_t seg, uint32_t nsegs, int on) {
    if (p->is_pmem || !nsegs || seg >= p->nsegs)
        return;
    if (nsegs > p->nsegs - seg)
        nsegs = p->nsegs - seg;
    (void)madvise(p->base + pool_seg_offset(p, seg), (size_t)nsegs * POOL_SEG_SIZE,
                  on ? MADV_SEQUENTIAL : MADV_RANDOM);
}

void pool_drop_cache(pool *p) {
    if (p->is_pmem || p->lock_fd < 0)
        return;
    /* Unmap first: the page cache keeps pages that are mapped. Dirty ones
     * keep their data (a shared mapping's dirty bits pass to the page) and
     * stay until written back. */
    (void)madvise(p->base, p->size, MADV_DONTNEED);
    (void)posix_fadvise(p->lock_fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void unmap(pool *p) {
    if (p->own_map)
        munmap(p->base, p->size);
    else
        pmem_unmap(p->base, p->size);
}

static int lock_file(pool *p, const char *path, char *err, size_t errlen) {
    p->lock_fd = open(path, O_RDWR | O_CLOEXEC);
    if (p->lock_fd < 0) {
        set_err(err, errlen, "cannot open pool file %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(p->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        set_err(err, errlen, "pool file %s is in use by another process", path);
        return -1;
    }
    return 0;
}

/* Map a truncated file: anonymous zero pages for the whole pool, the file's
 * own pages over the part it has. */
static uint8_t *map_short(int fd, uint64_t file_size, uint64_t size) {
    uint8_t *base = mmap(NULL, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    uint64_t have = (file_size + POOL_PAGE - 1) & ~(uint64_t)(POOL_PAGE - 1);
    if (mmap(base, have, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(base, size);
        return NULL;
    }
    return base;
}

static pool *pool_map_existing(const char *path, int flags, char *err, size_t errlen) {
    pool *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    p->lock_fd = -1;
    if (lock_file(p, path, err, errlen) != 0)
        goto fail;
    struct stat st;
    struct pool_sb sb;
    if (fstat(p->lock_fd, &st) != 0 || st.st_size < (off_t)POOL_PAGE ||
        pread(p->lock_fd, &sb, sizeof sb, 0) != (ssize_t)sizeof sb) {
        set_err(err, errlen, "%s is not a Rowan pool file (size %lld bytes)", path,
                (long long)st.st_size);
        goto fail;
    }
    if (sb_validate(&sb, (uint64_t)st.st_size, flags & POOL_OPEN_SALVAGE, path, err, errlen) != 0)
        goto fail;
    if ((uint64_t)st.st_size < sb.pool_size) {
        p->base = map_short(p->lock_fd, (uint64_t)st.st_size, sb.pool_size);
        p->own_map = 1;
        p->missing_from = (uint64_t)st.st_size;
        p->size = sb.pool_size;
        if (!p->base) {
            set_err(err, errlen, "cannot map pool file %s: %s", path, strerror(errno));
            goto fail;
        }
    } else {
        size_t mapped;
        p->base = pmem_map_file(path, 0, 0, 0, &mapped, NULL);
        if (!p->base) {
            set_err(err, errlen, "cannot map pool file %s: %s", path, pmem_errormsg());
            goto fail;
        }
        p->size = mapped;
        if (mapped != sb.pool_size) { /* changed under us */
            set_err(err, errlen, "%s changed size while it was opened", path);
            goto fail;
        }
    }
    p->sb = (struct pool_sb *)(void *)p->base;
    p->is_pmem = pmem_is_pmem(p->base, p->size);
    advise_random(p, 0);
    p->meta = (struct seg_meta *)(void *)(p->base + POOL_META_OFF);
    p->data_off = p->sb->data_off;
    p->nsegs = p->sb->nsegs;
    p->free_stack = malloc(sizeof(uint32_t) * p->nsegs);
    p->live = calloc(p->nsegs, sizeof *p->live);
    p->raw = calloc(p->nsegs, 1);
    if (!p->free_stack || !p->live || !p->raw) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    if (pool_load_meta(p, path, err, errlen) != 0)
        goto fail;
    pthread_mutex_init(&p->mu, NULL);
    if (zero_setup(p, !p->missing_from && !(flags & POOL_OPEN_EXISTING)) != 0) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    return p;
fail:
    if (p->base)
        unmap(p);
    if (p->lock_fd >= 0)
        close(p->lock_fd);
    free(p->free_stack);
    free(p->live);
    free(p->raw);
    free(p);
    return NULL;
}

pool *pool_open(const char *path, uint64_t size, int flags, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT || (flags & POOL_OPEN_EXISTING)) {
            set_err(err, errlen, "cannot open pool file %s: %s", path, strerror(errno));
            return NULL;
        }
        if (pool_create(path, size, err, errlen) != 0)
            return NULL;
    }
    return pool_map_existing(path, flags, err, errlen);
}

uint64_t pool_missing_from(const pool *p) { return p->missing_from; }

int pool_restore_size(pool *p, char *err, size_t errlen) {
    if (!p->missing_from)
        return 0;
    int rc = fill_zero(p->lock_fd, p->missing_from, p->size);
    if (rc != 0) {
        set_err(err, errlen, "cannot restore the pool file's size (%llu bytes): %s",
                (unsigned long long)p->size, strerror(rc));
        return -1;
    }
    /* The pages past the old end were anonymous zeroes; map the file's new
     * zero blocks in their place (nothing was written to them). */
    uint64_t have = (p->missing_from + POOL_PAGE - 1) & ~(uint64_t)(POOL_PAGE - 1);
    if (have < p->size &&
        mmap(p->base + have, p->size - have, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             p->lock_fd, (off_t)have) == MAP_FAILED) {
        set_err(err, errlen, "cannot map the restored pool file: %s", strerror(errno));
        return -1;
    }
    advise_random(p, have);
    p->missing_from = 0;
    return 0;
}

void pool_close(pool *p) {
    if (!p)
        return;
    zero_stop(p);
    unmap(p);
    close(p->lock_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->zwork);
    pthread_cond_destroy(&p->zdone);
    free(p->free_stack);
    free(p->live);
    free(p->raw);
    free(p->zbuf);
    free(p);
}

/* ---- accessors ---- */

int pool_is_pmem(const pool *p) { return p->is_pmem; }
uint8_t *pool_base(const pool *p) { return p->base; }
uint64_t pool_size(const pool *p) { return p->size; }
uint32_t pool_nsegs(const pool *p) { return p->nsegs; }

uint64_t pool_seg_offset(const pool *p, uint32_t seg) {
    return p->data_off + (uint64_t)seg * POOL_SEG_SIZE;
}

uint32_t pool_seg_of(const pool *p, uint64_t off) {
    return (uint32_t)((off - p->data_off) / POOL_SEG_SIZE);
}

static void check_seg(const pool *p, uint32_t seg, const char *what) {
    if (seg >= p->nsegs) {
        fprintf(stderr, "rowan: FATAL: %s of segment %u, pool has %u\n", what, seg, p->nsegs);
        abort();
    }
}

/* ---- allocation ---- */

/* Next seq, extending the persisted lease first when it is used up.
 * Caller holds the mutex. */
static uint64_t take_seq(pool *p) {
    uint64_t seq = atomic_load(&p->next_seq);
    if (seq >= p->sb->seq_lease) {
        __atomic_store_n(&p->sb->seq_lease, seq + POOL_SEQ_LEASE, __ATOMIC_RELEASE);
        pool_persist(p, &p->sb->seq_lease, sizeof p->sb->seq_lease);
    }
    atomic_store(&p->next_seq, seq + 1);
    return seq;
}

int pool_seg_alloc(pool *p, enum seg_owner owner, uint16_t owner_id, uint32_t keep_free) {
    pthread_mutex_lock(&p->mu);
    if (p->nfree <= keep_free) {
        pthread_mutex_unlock(&p->mu);
        return -1;
    }
    uint32_t seg = p->free_stack[--p->nfree];
    while (p->zeroing == (int64_t)seg) /* the zero thread is filling it: a few ms */
        pthread_cond_wait(&p->zdone, &p->mu);
    int raw = p->raw[seg];
    if (raw) {
        p->raw[seg] = 0;
        p->nraw--;
    }
    if (p->nraw)
        pthread_cond_signal(&p->zwork); /* the next ones moved up */
    meta_store_seq(p, seg, take_seq(p));
    meta_store_state(p, seg, state_word(SEG_USING, owner, owner_id, 0));
    atomic_store(&p->live[seg], 0);
    int low = p->on_low && p->nfree < atomic_load(&p->low_water);
    pthread_mutex_unlock(&p->mu);
    if (low)
        p->on_low();
    /* Outside the mutex: the segment is ours and nobody reads it yet. */
    if (raw)
        zero_fill(p, seg, 0);
    return (int)seg;
}

void pool_seg_set_state(pool *p, uint32_t seg, enum seg_state st) {
    check_seg(p, seg, "state change");
    if (st == SEG_FREE) { /* freeing has its own ordering rules */
        pool_seg_free(p, seg);
        return;
    }
    pthread_mutex_lock(&p->mu);
    struct seg_meta m = pool_seg_meta(p, seg);
    if (m.state == SEG_FREE) { /* it is on the free stack: a caller bug */
        fprintf(stderr, "rowan: FATAL: state change of free segment %u\n", seg);
        abort();
    }
    meta_store_state(p, seg, state_word(st, (enum seg_owner)m.owner, m.owner_id, m.end));
    pthread_mutex_unlock(&p->mu);
}

void pool_seg_set_end(pool *p, uint32_t seg, uint32_t end) {
    check_seg(p, seg, "end");
    pthread_mutex_lock(&p->mu);
    struct seg_meta m = pool_seg_meta(p, seg);
    uint64_t *w = meta_words(p, seg);
    __atomic_store_n(&w[0], state_word(m.state, m.owner, m.owner_id, end), __ATOMIC_RELEASE);
    if (p->is_pmem) /* cheap there; on block storage the next flush carries it */
        pool_persist(p, &w[0], 8);
    pthread_mutex_unlock(&p->mu);
}

void pool_zero(pool *p, uint64_t off, size_t len) {
    uint8_t *d = p->base + off;
    if (p->is_pmem) {
        pmem_memset_persist(d, 0, len);
        return;
    }
    memset(d, 0, len);
    pool_persist(p, d, len);
}

/* Zero a segment's data durably, first page first (see the file comment). */
static void zero_segment(pool *p, uint32_t seg) {
    uint64_t off = pool_seg_offset(p, seg);
    pool_zero(p, off, POOL_PAGE);
    pool_zero(p, off + POOL_PAGE, POOL_SEG_SIZE - POOL_PAGE);
}

void pool_seg_free(pool *p, uint32_t seg) {
    check_seg(p, seg, "free");
    if (pool_seg_meta(p, seg).state == SEG_FREE) {
        fprintf(stderr, "rowan: FATAL: segment %u freed twice\n", seg);
        abort();
    }
    /* Its end goes first (persisted): zeroes below a recorded end would read
     * as damage if a crash interrupted the zeroing. */
    pthread_mutex_lock(&p->mu);
    struct seg_meta m = pool_seg_meta(p, seg);
    meta_store_state(p, seg, state_word(m.state, m.owner, m.owner_id, 0));
    pthread_mutex_unlock(&p->mu);
    /* Zero outside the mutex: it takes a while, and the segment is not
     * reachable by allocation until it is pushed below. */
    zero_segment(p, seg);
    pthread_mutex_lock(&p->mu);
    meta_store_state(p, seg, state_word(SEG_FREE, OWNER_NONE, 0, 0));
    meta_store_seq(p, seg, 0);
    atomic_store(&p->live[seg], 0);
    p->free_stack[p->nfree++] = seg;
    pthread_mutex_unlock(&p->mu);
}

void pool_set_low_water(pool *p, uint32_t level, void (*fn)(void)) {
    pthread_mutex_lock(&p->mu);
    p->on_low = fn;
    atomic_store(&p->low_water, level);
    pthread_mutex_unlock(&p->mu);
}

/* A moment stale at most: callers use it as a hint (wait for the cleaner,
 * refuse a large value) and the allocator rechecks under mu. */
uint32_t pool_free_count(const pool *p) {
    return atomic_load_explicit(&p->nfree, memory_order_relaxed);
}

/* Lock free: every deletion entry records it. */
uint64_t pool_seq_now(const pool *p) {
    return atomic_load(&p->next_seq);
}

/* ---- live bytes ---- */

void pool_live_add(pool *p, uint32_t seg, int64_t delta) {
    atomic_fetch_add_explicit(&p->live[seg], delta, memory_order_relaxed);
}

int64_t pool_live_get(const pool *p, uint32_t seg) {
    return atomic_load_explicit(&p->live[seg], memory_order_relaxed);
}

void pool_sync_all(pool *p) {
    if (p->is_pmem)
        return;
    /* fsync works on the read-only descriptor we hold for the lock, and
     * covers pages dirtied through the mapping. A failure means we can no
     * longer promise durability: stop rather than acknowledge. */
    if (fdatasync(p->lock_fd) != 0) {
        fprintf(stderr, "rowan: fdatasync of the pool failed: %s\n", strerror(errno));
        abort();
    }
}

void pool_pwrite(pool *p, uint64_t off, const void *buf, size_t len) {
    const char *b = buf;
    while (len) {
        ssize_t n = pwrite(p->lock_fd, b, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* The entry would silently be missing from the log: stop
             * rather than acknowledge it. */
            fprintf(stderr, "rowan: write to the pool failed: %s\n", strerror(errno));
            abort();
        }
        b += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
}
