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
 * What counts as durable: what the kernel makes durable. A flush covers the
 * pool's bytes in its range that the page cache holds at the call's ENTRY
 * and that differ from the image: fdatasync and fsync of the pool file
 * cover the whole file, msync(MS_SYNC) the range it was given. How the
 * bytes got into the page cache does not matter: pwrite to the pool file,
 * or stores through the shared mapping (log entries are encoded straight
 * into the mapping on block storage, src/store/log.c; meta entries, the
 * superblock, segment zeroing and recovery's copies are stores too). So no
 * write path can escape the model, and nothing is counted durable that no
 * completed flush covered. A flush's snapshot of those bytes (read through
 * the server's mapping, or with pread before the pool is mapped) is written
 * into the image only after the real call returned, so bytes written by
 * other threads during a flush are not counted as covered by it.
 * sync_file_range (the zero-fill thread) writes back without flushing the
 * device cache: not a flush, so not modelled. Concurrent flushes may
 * complete in any order; the image keeps, per 64-byte block, the newest
 * snapshot (by entry order). The shim keeps a copy of the image in memory
 * (the pool is small in tests) to find the differing blocks, and compares
 * only pages written since a flush last compared them: pwrite marks its
 * pages, and the server's writable mapping of the pool is write-protected,
 * so that the first store to each page after a compare faults once into
 * the shim (SIGSEGV handler), which marks the page and lets the store
 * through. A page a flush compared is compared again by every flush that
 * starts before that one completes: the kernel's later flush waits for the
 * earlier one's writeback, so its caller may rely on the page already.
 * (Comparing the whole pool at every flush cost 30-170 ms under
 * load; asking the kernel which pages are dirty, with cachestat, misses
 * pages that another thread's concurrent flush has cleaned.) Not modelled:
 * a block that changes and changes back while a flush that saw the first
 * change is in flight (the pool never rewrites a block within one flush).
 * The pool file as found when the server first opens it is durable (a new
 * pool is built, fsynced and linked into place before that).
 *
 * Options:
 *   ROWAN_SHIM_WRITEBACK=p   the kernel writing dirty pages back before any
 *                            flush: with probability p (0..1) a pwrite to
 *                            the pool reaches the image at once, and each
 *                            run of blocks a flush found changed reaches it
 *                            at the flush's entry, cut at a random 512-byte
 *                            sector, so the image holds torn,
 *                            never-acknowledged tails too;
 *   ROWAN_SHIM_SYNC_DELAY_MS=n   fdatasync and fsync of the pool take n ms
 *                            longer (a slow device): what the server does
 *                            while a flush is in flight gets a wide window;
 *   ROWAN_SHIM_FAULT=skip-fdatasync   fdatasync, fsync and msync of the pool
 *                            do nothing and succeed: a server whose flushes
 *                            are lies. Acknowledged writes must then be missing
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
#include <signal.h>
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
#define PAGE 4096u

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
static int (*real_munmap)(void *, size_t);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *pool_path, *image_path;
static int active;                 /* configured */
static int ready;                  /* the pool was seen and the image made */
static dev_t pool_dev;
static ino_t pool_ino;
static uint8_t is_pool_fd[MAX_FD];
static int read_fd = -1, image_fd = -1;
static uint64_t pool_size;
static uint8_t *shadow;            /* what the image holds, in memory */
static uintptr_t map_base;         /* address of file offset 0 in the mapping */
static uint64_t *block_seq;        /* per 64-byte block: entry seq of the image's bytes */
static uint64_t nblocks;
static uint64_t seq;               /* flush entries and early writebacks, in order */
static double writeback_p;
static int skip_sync;
static uintptr_t map_lo, map_hi;   /* the tracked mapping, page aligned */
static uint8_t *touched;           /* per pool page: written since a flush compared it */
static uint32_t *inflight;         /* per pool page: flushes in flight that compared it (mu) */
static uint64_t npages;
static useconds_t sync_delay_us;

typedef struct range {
    uint64_t off, len;
} range;

static void die(const char *what) {
    fprintf(stderr, "powerloss-shim: %s: %s\n", what, strerror(errno));
    abort();
}

/* The real functions are looked up at the first call into the shim, not in
 * its constructor: a sanitizer runtime (ASan, UBSan) initialises from the
 * executable's .preinit_array, before any library constructor runs, and
 * already calls mmap then (ASan's symbolizer allocates with it), which the
 * preload routes here. Racing first calls store the same values. */
static void resolve(void) {
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
    real_munmap = dlsym(RTLD_NEXT, "munmap");
}

#define REAL(f) (real_##f ? real_##f : (resolve(), real_##f))

__attribute__((constructor)) static void shim_init(void) {
    resolve();
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
        ssize_t n = REAL(pwrite)(fd, b, len, (off_t)off);
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
        memcpy(shadow + run, data + (run - off), pos - run);
    }
}

/* First sight of the pool file: the image starts as a copy of it. */
static void make_image(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) die("fstat of the pool");
    pool_size = (uint64_t)st.st_size;
    read_fd = REAL(open)(pool_path, O_RDONLY | O_CLOEXEC);
    image_fd = REAL(open)(image_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (read_fd < 0 || image_fd < 0) die("opening the pool or the image");
    size_t chunk = 1 << 20;
    uint8_t *buf = malloc(chunk);
    for (uint64_t off = 0; off < pool_size; off += chunk) {
        size_t n = pool_size - off < chunk ? (size_t)(pool_size - off) : chunk;
        full_pread(read_fd, buf, n, off);
        full_pwrite(image_fd, buf, n, off);
    }
    free(buf);
    shadow = calloc(1, pool_size ? pool_size : 1);
    if (!shadow) die("memory");
    full_pread(read_fd, shadow, pool_size, 0);
    npages = (pool_size + PAGE - 1) / PAGE;
    touched = calloc(npages ? npages : 1, 1);
    inflight = calloc(npages ? npages : 1, sizeof(uint32_t));
    if (!touched || !inflight) die("memory");
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
    int fd = REAL(open)(path, flags, mode);
    track(fd);
    return fd;
}

int open64(const char *path, int flags, ...) {
    int mode = 0;
    OPEN_MODE(flags, mode);
    int fd = (REAL(open64) ? REAL(open64) : REAL(open))(path, flags, mode);
    track(fd);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    int mode = 0;
    OPEN_MODE(flags, mode);
    int fd = REAL(openat)(dirfd, path, flags, mode);
    track(fd);
    return fd;
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FD) is_pool_fd[fd] = 0;
    return REAL(close)(fd);
}

/* A store to a write-protected page of the pool's mapping: let it through
 * and mark the page for the next flush (in this order: see snap_take).
 * Anything else is a real fault: the default action then kills. */
static void on_segv(int sig, siginfo_t *si, void *ctx) {
    uintptr_t a = (uintptr_t)si->si_addr;
    if (si->si_code == SEGV_ACCERR && map_base && a >= map_lo && a < map_hi) {
        uintptr_t pg = a & ~(uintptr_t)(PAGE - 1);
        mprotect((void *)pg, PAGE, PROT_READ | PROT_WRITE);
        uint64_t i = (pg - map_base) / PAGE;
        if (i < npages) __atomic_store_n(&touched[i], 1, __ATOMIC_SEQ_CST);
        return;
    }
    signal(SIGSEGV, SIG_DFL);
}

/* The server mapped the pool (writable, shared): protect the mapping so
 * that stores through it can be tracked. */
static void note_map(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (addr == MAP_FAILED || !(flags & MAP_SHARED) || !(prot & PROT_WRITE) || !pool_fd(fd))
        return;
    pthread_mutex_lock(&mu);
    map_base = (uintptr_t)addr - (uintptr_t)off;
    map_lo = (uintptr_t)addr;
    map_hi = (uintptr_t)addr + (len & ~(size_t)(PAGE - 1));
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    if (mprotect(addr, map_hi - map_lo, PROT_READ) != 0) die("mprotect of the pool mapping");
    pthread_mutex_unlock(&mu);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = REAL(mmap)(addr, len, prot, flags, fd, off);
    note_map(p, len, prot, flags, fd, off);
    return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = (REAL(mmap64) ? REAL(mmap64) : REAL(mmap))(addr, len, prot, flags, fd, off);
    note_map(p, len, prot, flags, fd, off);
    return p;
}

/* The pool's mapping goes away: read the page cache with pread again. */
int munmap(void *addr, size_t len) {
    pthread_mutex_lock(&mu);
    uintptr_t a = (uintptr_t)addr;
    if (map_base && a < map_hi && a + len > map_lo) map_base = map_lo = map_hi = 0;
    pthread_mutex_unlock(&mu);
    return REAL(munmap)(addr, len);
}

/* ---------------- writes ---------------- */

/* Writeback ahead of any flush, cut at a random 512-byte sector: the first
 * sectors of [off, off+len) as the page cache holds them now, as of entry
 * order s. mu held. */
static void early_writeback(uint64_t off, uint64_t len, uint64_t s) {
    uint64_t sectors = (len + 511) / 512, keep = 1 + (uint64_t)random() % sectors;
    uint64_t n = keep * 512 < len ? keep * 512 : len;
    uint8_t *buf = malloc(n);
    if (!buf) die("memory");
    full_pread(read_fd, buf, n, off);
    apply(buf, off, n, s);
    free(buf);
}

static int writeback_now(void) { return writeback_p > 0 && random() < writeback_p * RAND_MAX; }

/* A pwrite to the pool of len bytes at off returned: maybe the kernel writes
 * some of it back at once. (Which bytes a flush covers is found at the
 * flush, see the file comment.) */
static void wrote(uint64_t off, uint64_t len) {
    if (!len) return;
    for (uint64_t pg = off / PAGE; pg < (off + len + PAGE - 1) / PAGE && pg < npages; pg++)
        __atomic_store_n(&touched[pg], 1, __ATOMIC_SEQ_CST);
    if (!(writeback_p > 0)) return;
    pthread_mutex_lock(&mu);
    if (writeback_now()) early_writeback(off, len, ++seq);
    pthread_mutex_unlock(&mu);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
    ssize_t n = REAL(pwrite)(fd, buf, len, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) {
    ssize_t n = (REAL(pwrite64) ? REAL(pwrite64) : REAL(pwrite))(fd, buf, len, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t n = REAL(pwritev)(fd, iov, cnt, off);
    if (n > 0 && pool_fd(fd)) wrote((uint64_t)off, (uint64_t)n);
    return n;
}

/* ---------------- flushes ---------------- */

typedef struct snapshot {
    uint64_t seq;                  /* entry order */
    size_t n;
    range *r;                      /* what it covers ... */
    uint8_t **data;                /* ... and its contents at entry */
    uint64_t *pages;               /* pages it compared (inflight counts them) */
    size_t npg;
} snapshot;

static void snap_add(snapshot *s, const uint8_t *now, uint64_t off, uint64_t len) {
    s->r = realloc(s->r, (s->n + 1) * sizeof(range));
    s->data = realloc(s->data, (s->n + 1) * sizeof(uint8_t *));
    s->data[s->n] = malloc(len ? len : 1);
    if (!s->r || !s->data || !s->data[s->n]) die("memory");
    memcpy(s->data[s->n], now, len);
    s->r[s->n++] = (range){off, len};
}

/* The page cache's bytes of [off, off+len) now: through the server's
 * mapping when there is one, else read into *buf. */
static const uint8_t *cache_now(uint64_t off, uint64_t len, uint8_t **buf) {
    if (map_base)
        return (const uint8_t *)(map_base + off);
    *buf = malloc(len ? len : 1);
    if (!*buf) die("memory");
    full_pread(read_fd, *buf, len, off);
    return *buf;
}

/* Add to s every run of 64-byte blocks of [off, off+len) whose page-cache
 * bytes differ from the image. mu held. */
static void diff_range(snapshot *s, uint64_t off, uint64_t len) {
    uint8_t *buf = NULL;
    const uint8_t *now = cache_now(off, len, &buf);
    uint64_t pos = off, end = off + len;
    while (pos < end) {
        uint64_t bend = (pos / BLOCK + 1) * BLOCK < end ? (pos / BLOCK + 1) * BLOCK : end;
        if (!memcmp(now + (pos - off), shadow + pos, bend - pos)) {
            pos = bend;
            continue;
        }
        uint64_t run = pos;
        while (pos < end) {
            bend = (pos / BLOCK + 1) * BLOCK < end ? (pos / BLOCK + 1) * BLOCK : end;
            if (!memcmp(now + (pos - off), shadow + pos, bend - pos)) break;
            pos = bend;
        }
        snap_add(s, now + (run - off), run, pos - run);
        /* before the flush's own entry order: its snapshot overrides it */
        if (writeback_now()) early_writeback(run, pos - run, s->seq - 1);
    }
    free(buf);
}

/* At a flush's entry (mu held): every run of 64-byte blocks of [off,
 * off+len) whose page-cache bytes differ from the image. Comparing a whole
 * pool at every flush costs tens of ms under load, so only pages written
 * since a flush last compared them are compared: pwrite marks them, and
 * stores through the mapping are caught by write-protecting the mapping
 * (the first store to a page after a compare faults once: on_segv). A
 * page's mark is cleared and the page protected again BEFORE it is read, so
 * a store racing with the compare either is in what is read or faults and
 * marks the page for the next flush. */
static void snap_take(snapshot *s, uint64_t off, uint64_t len) {
    memset(s, 0, sizeof(*s));
    seq += 2; /* seq - 1: what the kernel writes back ahead of this flush */
    s->seq = seq;
    if (off >= pool_size) return;
    if (off + len > pool_size) len = pool_size - off;
    if (!map_base) { /* no mapping (yet, or any more): compare it all */
        diff_range(s, off, len);
        return;
    }
    uint64_t p0 = off / PAGE, p1 = (off + len + PAGE - 1) / PAGE;
    for (uint64_t pg = p0; pg < p1 && pg < npages; pg++) {
        /* a page another flush in flight compared is compared again: that
         * flush may complete after this one, whose caller may already rely
         * on the page (the kernel's flush waits for its writeback) */
        int was = __atomic_exchange_n(&touched[pg], 0, __ATOMIC_SEQ_CST);
        if (!was && !inflight[pg]) continue;
        uintptr_t a = map_base + pg * PAGE;
        if (was && a >= map_lo && a + PAGE <= map_hi) mprotect((void *)a, PAGE, PROT_READ);
        s->pages = realloc(s->pages, (s->npg + 1) * sizeof(uint64_t));
        if (!s->pages) die("memory");
        s->pages[s->npg++] = pg;
        inflight[pg]++;
        uint64_t lo = pg * PAGE > off ? pg * PAGE : off;
        uint64_t hi = (pg + 1) * PAGE < off + len ? (pg + 1) * PAGE : off + len;
        if (hi > pool_size) hi = pool_size;
        if (hi > lo) diff_range(s, lo, hi - lo);
    }
}

/* The flush returned: its snapshot becomes durable (if it succeeded). */
static void snap_done(snapshot *s, int ok) {
    pthread_mutex_lock(&mu);
    if (ok)
        for (size_t i = 0; i < s->n; i++) apply(s->data[i], s->r[i].off, s->r[i].len, s->seq);
    for (size_t i = 0; i < s->npg; i++) inflight[s->pages[i]]--;
    pthread_mutex_unlock(&mu);
    free(s->pages);
    for (size_t i = 0; i < s->n; i++) free(s->data[i]);
    free(s->data);
    free(s->r);
}

static int sync_fd(int fd, int (*real)(int)) {
    if (!pool_fd(fd)) return real(fd);
    if (skip_sync) return 0;
    snapshot s;
    pthread_mutex_lock(&mu);
    snap_take(&s, 0, pool_size);
    pthread_mutex_unlock(&mu);
    if (sync_delay_us) usleep(sync_delay_us);
    int rc = real(fd);
    snap_done(&s, rc == 0);
    return rc;
}

int fdatasync(int fd) { return sync_fd(fd, REAL(fdatasync)); }
int fsync(int fd) { return sync_fd(fd, REAL(fsync)); }

int msync(void *addr, size_t len, int flags) {
    uintptr_t a = (uintptr_t)addr;
    if (!ready || !map_base || !(flags & MS_SYNC) || a < map_base || a - map_base >= pool_size)
        return REAL(msync)(addr, len, flags);
    if (skip_sync) return 0;
    uint64_t off = a - map_base;
    if (off + len > pool_size) len = pool_size - off;
    snapshot s;
    pthread_mutex_lock(&mu);
    snap_take(&s, off, len);
    pthread_mutex_unlock(&mu);
    int rc = REAL(msync)(addr, len, flags);
    snap_done(&s, rc == 0);
    return rc;
}
