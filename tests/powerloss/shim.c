/* shim.c -- power loss for rowan-server, as an LD_PRELOAD library.
 *
 * kill -9 leaves the page cache alive, so it can never show a reply that ran
 * ahead of its flush. This shim keeps, next to the pool file, a "durable
 * image": the bytes of the pool that a completed flush covered, and nothing
 * else. Restarting a server from the image after a kill -9 is restarting it
 * after a power loss at that moment.
 *
 *   ROWAN_SHIM_POOL=<pool file>  ROWAN_SHIM_IMAGE=<image file>
 *   LD_PRELOAD=powerloss-shim.so rowan-server ...
 *
 * What counts as durable, following what the server does (src/pool.c):
 *   - pwrite to the pool file (log appends): durable once an fdatasync or
 *     fsync of the file that was called after the pwrite returned has
 *     returned, or an msync covering those pages (the cleaner's log);
 *   - stores through the shared mapping: meta entries and the superblock
 *     (persisted with msync at once; the durable ends of open segments are
 *     plain stores that the next fdatasync carries), segment zeroing (memset
 *     then msync). An msync(MS_SYNC) covers its range when it returns; an
 *     fdatasync covers the header area (superblock and meta table) as well,
 *     as the kernel writes back every dirty page of the file. The data area
 *     is never stored to through the mapping on block storage, so dirty
 *     pages there come only from pwrite;
 *   - the pool file as found when the server first opens it is durable (a
 *     new pool is built, fsynced and linked into place before that).
 * Each flush snapshots, at the call's ENTRY, the current contents of what it
 * covers (the pwritten ranges recorded before it, read back from the page
 * cache; the msynced range), and writes the snapshot into the image only
 * after the real call returned. So bytes written by other threads during a
 * flush are not counted as covered by it. Concurrent flushes may complete
 * in any order; the image keeps, per 64-byte block, the newest snapshot
 * (by entry order): log appends never share a block.
 *
 * Options:
 *   ROWAN_SHIM_WRITEBACK=p   with probability p (0..1) a pwrite also reaches
 *                            the image at once, cut at a random 512-byte
 *                            sector: the kernel writing dirty pages back
 *                            before any flush, so the image holds torn,
 *                            never-acknowledged tails too;
 *   ROWAN_SHIM_SYNC_DELAY_MS=n   fdatasync and fsync of the pool take n ms
 *                            longer (a slow device): what the server does
 *                            while a flush is in flight gets a wide window;
 *   ROWAN_SHIM_FAULT=skip-fdatasync   fdatasync and fsync of the pool do
 *                            nothing and succeed: a server whose flushes are
 *                            lies. Acknowledged writes must then be missing
 *                            from the image; the test proves its checker
 *                            sees that (the server itself has no such
 *                            switch).
 *
 * The shim writes the image itself, so a kill -9 in the middle of writing a
 * completed flush's snapshot leaves it half applied: a torn flush, as a
 * power loss during one would. No reply depends on that flush yet: the
 * server learns that it completed only after the image write. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define BLOCK 64
#define MAX_FD 65536

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fdatasync)(int);
static int (*real_fsync)(int);
static int (*real_msync)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *pool_path, *image_path;
static int active;                 /* configured */
static int ready;                  /* the pool was seen and the image made */
static dev_t pool_dev;
static ino_t pool_ino;
static uint8_t is_pool_fd[MAX_FD];
static int read_fd = -1, image_fd = -1;
static uint64_t pool_size, header_len;
static uintptr_t map_base;         /* address of file offset 0 in the mapping */
static uint64_t *block_seq;        /* per 64-byte block: entry seq of the image's bytes */
static uint64_t nblocks;
static uint64_t seq;               /* flush entries and early writebacks, in order */
static double writeback_p;
static int skip_sync;
static useconds_t sync_delay_us;

typedef struct range {
    uint64_t off, len, seq;
} range;
static range *pending;             /* pwritten since some flush, oldest first */
static size_t npending, cappending;

static void die(const char *what) {
    fprintf(stderr, "powerloss-shim: %s: %s\n", what, strerror(errno));
    abort();
}

__attribute__((constructor)) static void shim_init(void) {
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_close = dlsym(RTLD_NEXT, "close");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_msync = dlsym(RTLD_NEXT, "msync");
    real_mmap = dlsym(RTLD_NEXT, "mmap");
    real_mmap64 = dlsym(RTLD_NEXT, "mmap64");
    pool_path = getenv("ROWAN_SHIM_POOL");
    image_path = getenv("ROWAN_SHIM_IMAGE");
    active = pool_path && image_path;
    const char *wb = getenv("ROWAN_SHIM_WRITEBACK");
    writeback_p = wb ? atof(wb) : 0;
    const char *fault = getenv("ROWAN_SHIM_FAULT");
    skip_sync = fault && !strcmp(fault, "skip-fdatasync");
    const char *delay = getenv("ROWAN_SHIM_SYNC_DELAY_MS");
    sync_delay_us = delay ? (useconds_t)(atof(delay) * 1000) : 0;
    srandom((unsigned)getpid());
}

/* ---------------- the image ---------------- */

static void full_pread(int fd, void *buf, size_t len, uint64_t off) {
    uint8_t *b = buf;
    while (len) {
        ssize_t n = pread(fd, b, len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("pread of the pool");
        if (n == 0) { /* past the end: zeroes, as the mapping reads */
            memset(b, 0, len);
            return;
        }
        b += n, off += (uint64_t)n, len -= (size_t)n;
    }
}

static void full_pwrite(int fd, const void *buf, size_t len, uint64_t off) {
    const uint8_t *b = buf;
    while (len) {
        ssize_t n = real_pwrite(fd, b, len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write of the image");
        b += n, off += (uint64_t)n, len -= (size_t)n;
    }
}

static void grow_blocks(uint64_t end) {
    uint64_t need = (end + BLOCK - 1) / BLOCK;
    if (need <= nblocks) return;
    block_seq = realloc(block_seq, need * sizeof(uint64_t));
    if (!block_seq) die("memory");
    memset(block_seq + nblocks, 0, (need - nblocks) * sizeof(uint64_t));
    nblocks = need;
}

/* Write the bytes [off, off+len) snapshotted at entry seq s into the image,
 * block by block where nothing newer is there yet. Caller holds mu. */
static void apply(const uint8_t *data, uint64_t off, uint64_t len, uint64_t s) {
    grow_blocks(off + len);
    uint64_t pos = off, end = off + len;
    while (pos < end) {
        uint64_t b = pos / BLOCK, bend = (b + 1) * BLOCK < end ? (b + 1) * BLOCK : end;
        if (block_seq[b] > s) {
            pos = bend;
            continue;
        }
        /* a run of blocks that take this snapshot */
        uint64_t run = pos;
        while (pos < end && block_seq[pos / BLOCK] <= s) {
            block_seq[pos / BLOCK] = s;
            pos = (pos / BLOCK + 1) * BLOCK < end ? (pos / BLOCK + 1) * BLOCK : end;
        }
        full_pwrite(image_fd, data + (run - off), pos - run, run);
    }
}

/* First sight of the pool file: the image starts as a copy of it. */
static void make_image(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) die("fstat of the pool");
    pool_size = (uint64_t)st.st_size;
    read_fd = real_open(pool_path, O_RDONLY | O_CLOEXEC);
    image_fd = real_open(image_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (read_fd < 0 || image_fd < 0) die("opening the pool or the image");
    size_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    for (uint64_t off = 0; off < pool_size; off += chunk) {
        size_t n = pool_size - off < chunk ? (size_t)(pool_size - off) : chunk;
        full_pread(read_fd, buf, n, off);
        full_pwrite(image_fd, buf, n, off);
    }
    free(buf);
    uint64_t data_off = 0; /* struct pool_sb: data_off at byte 24 */
    full_pread(read_fd, &data_off, 8, 24);
    header_len = data_off && data_off < pool_size ? data_off : 0;
    grow_blocks(pool_size);
    ready = 1;
}

/* ---------------- tracking the pool's descriptors ---------------- */

static void track(int fd) {
    if (!active || fd < 0 || fd >= MAX_FD) return;
    struct stat st, ps;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || stat(pool_path, &ps) != 0) return;
    if (st.st_dev != ps.st_dev || st.st_ino != ps.st_ino) return;
    pthread_mutex_lock(&mu);
    if (!ready) {
        pool_dev = ps.st_dev;
        pool_ino = ps.st_ino;
        make_image(fd);
    }
    is_pool_fd[fd] = st.st_dev == pool_dev && st.st_ino == pool_ino;
    pthread_mutex_unlock(&mu);
}

static int pool_fd(int fd) { return ready && fd >= 0 && fd < MAX_FD && is_pool_fd[fd]; }

#define OPEN_MODE(flags, mode) do { \
    if ((flags) & (O_CREAT | O_TMPFILE)) { \
        va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); \
    } } while (0)

int open(const char *path, int flags, ...) {
    int mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_open(path, flags, mode);
    track(fd);
    return fd;
}

int open64(const char *path, int flags, ...) {
    int mode = 0;
    OPEN_MODE(flags, mode);
    int fd = (real_open64 ? real_open64 : real_open)(path, flags, mode);
    track(fd);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    int mode = 0;
    OPEN_MODE(flags, mode);
    int fd = real_openat(dirfd, path, flags, mode);
    track(fd);
    return fd;
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FD) is_pool_fd[fd] = 0;
    return real_close(fd);
}

static void note_map(void *addr, int flags, int fd, off_t off) {
    if (addr != MAP_FAILED && (flags & MAP_SHARED) && pool_fd(fd))
        map_base = (uintptr_t)addr - (uintptr_t)off;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    note_map(p, flags, fd, off);
    return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = (real_mmap64 ? real_mmap64 : real_mmap)(addr, len, prot, flags, fd, off);
    note_map(p, flags, fd, off);
    return p;
}

/* ---------------- writes ---------------- */

/* A pwrite to the pool of len bytes at off returned: remember the range, and
 * maybe let "writeback" carry some of it to the image at once. */
static void wrote(uint64_t off, uint64_t len) {
    if (!len) return;
    pthread_mutex_lock(&mu);
    if (npending == cappending) {
        cappending = cappending ? cappending * 2 : 1024;
        pending = realloc(pending, cappending * sizeof(range));
        if (!pending) die("memory");
    }
    pending[npending++] = (range){off, len, ++seq};
    if (writeback_p > 0 && random() < writeback_p * RAND_MAX) {
        uint64_t sectors = (len + 511) / 512, keep = 1 + (uint64_t)random() % sectors;
        uint64_t n = keep * 512 < len ? keep * 512 : len;
        uint8_t *buf = malloc(n);
        full_pread(read_fd, buf, n, off);
        apply(buf, off, n, ++seq);
        free(buf);
    }
    pthread_mutex_unlock(&mu);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    ssize_t n = real_pwrite(fd, buf, len, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) {
    ssize_t n = (real_pwrite64 ? real_pwrite64 : real_pwrite)(fd, buf, len, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t n = real_pwritev(fd, iov, cnt, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

/* ---------------- flushes ---------------- */

typedef struct snapshot {
    uint64_t seq;                  /* entry order */
    size_t n;
    range *r;                      /* what it covers ... */
    uint8_t **data;                /* ... and its contents at entry */
} snapshot;

static void snap_add(snapshot *s, uint64_t off, uint64_t len) {
    s->r = realloc(s->r, (s->n + 1) * sizeof(range));
    s->data = realloc(s->data, (s->n + 1) * sizeof(uint8_t *));
    s->data[s->n] = malloc(len ? len : 1);
    if (!s->r || !s->data || !s->data[s->n]) die("memory");
    full_pread(read_fd, s->data[s->n], len, off);
    s->r[s->n++] = (range){off, len, 0};
}

/* At a flush's entry (mu held): everything it will cover. */
static void snap_take(snapshot *s, int all_pending, uint64_t off, uint64_t len) {
    memset(s, 0, sizeof(*s));
    s->seq = ++seq;
    if (all_pending) {
        for (size_t i = 0; i < npending; i++) snap_add(s, pending[i].off, pending[i].len);
        if (header_len) snap_add(s, 0, header_len);
    }
    if (len) snap_add(s, off, len);
}

/* The flush returned: its snapshot becomes durable; the ranges pending at
 * its entry are covered (later reads of them would get what they hold now). */
static void snap_done(snapshot *s, int all_pending) {
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < s->n; i++) apply(s->data[i], s->r[i].off, s->r[i].len, s->seq);
    size_t keep = 0;
    for (size_t i = 0; i < npending; i++) {
        int covered = all_pending ? pending[i].seq < s->seq
                                  : pending[i].seq < s->seq && s->n &&
                                    pending[i].off >= s->r[s->n - 1].off &&
                                    pending[i].off + pending[i].len <=
                                        s->r[s->n - 1].off + s->r[s->n - 1].len;
        if (!covered) pending[keep++] = pending[i];
    }
    npending = keep;
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < s->n; i++) free(s->data[i]);
    free(s->data);
    free(s->r);
}

static int sync_fd(int fd, int (*real)(int)) {
    if (!pool_fd(fd)) return real(fd);
    if (skip_sync) return 0;
    snapshot s;
    pthread_mutex_lock(&mu);
    snap_take(&s, 1, 0, 0);
    pthread_mutex_unlock(&mu);
    if (sync_delay_us) usleep(sync_delay_us);
    int rc = real(fd);
    if (rc == 0) snap_done(&s, 1);
    return rc;
}

int fdatasync(int fd) { return sync_fd(fd, real_fdatasync); }
int fsync(int fd) { return sync_fd(fd, real_fsync); }

int msync(void *addr, size_t len, int flags) {
    uintptr_t a = (uintptr_t)addr;
    if (!ready || !map_base || !(flags & MS_SYNC) || a < map_base || a - map_base >= pool_size)
        return real_msync(addr, len, flags);
    uint64_t off = a - map_base;
    if (off + len > pool_size) len = pool_size - off;
    snapshot s;
    pthread_mutex_lock(&mu);
    snap_take(&s, 0, off, len);
    pthread_mutex_unlock(&mu);
    int rc = real_msync(addr, len, flags);
    if (rc == 0) snap_done(&s, 0);
    return rc;
}
