/* coldread.c -- reader threads that fault in cold keys' pages for the
 * workers (see coldread.h for the design).
 *
 * A request belongs to one worker and one owner (a client). Its pages are
 * queued one by one, so the readers take the pages of one MGET in parallel;
 * the reader that brings in a request's last page puts the request on its
 * worker's done list and activates the worker's event (libevent's pthread
 * support makes that safe from any thread). The worker runs the done hook
 * for every request whose owner is still there and frees it. Cancelling
 * (the client closed) only clears the owner: the readers may still hold
 * the request, and reading a page of the mapping is harmless at any time,
 * because the mapping covers the whole pool file for the server's life. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include "coldread.h"
#include "hash.h"
#include "index.h"
#include "log.h"
#include "object.h"
#include "pool.h"
#include "server.h"
#include "shard.h"
#include "worker.h"

#define PAGE 4096u
#define MAX_CANDIDATES 4

struct coldread_req {
    struct worker *w;
    void *owner;                 /* NULL once cancelled (worker thread only) */
    coldread_done_fn *done;
    const uint8_t **pages;       /* entry starts (first page) to fault in */
    int npages, cap;
    _Atomic int left;            /* pages not in yet */
    struct coldread_req *next;   /* on the worker's done list */
};

struct job { coldread_req *r; int i; };

/* One per worker: requests whose pages are in. */
struct inbox {
    pthread_mutex_t mu;
    coldread_req *done;
    struct event *ev;            /* created by the worker on its first request */
    /* worker thread only: checks in a row that found nothing cold, and
     * commands since the last check (see coldread_skip) */
    unsigned calm, since;
    unsigned drops;              /* cr.drops when last seen */
    char pad[64];
};

/* This file's state, one per server (server.h). */
struct coldread_state {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* a page was queued, or stopping */
    pthread_cond_t idle;         /* busy fell to 0 */
    int busy;                    /* readers faulting a page in now */
    int stopping;
    struct job *q;               /* ring of pages to read */
    size_t head, len, cap;
    struct inbox *inbox;         /* [server.nworkers] */
    int started;
    _Atomic int force;
    _Atomic long long stat_requests, stat_pages;
    /* the resident scan (see coldread_skip): coarse ns of the last scan
     * that found every page in use resident (0: none since the last drop),
     * of the last scan, whether one runs now, and drops so far */
    _Atomic long long resident_at, scanned_at;
    _Atomic int scanning;
    _Atomic unsigned drops;
    /* the system's reclaim count (reclaimed_pages) read before the last
     * full scan that found everything resident, -1 when none stands; and
     * when that scan ran (coarse ns) */
    _Atomic long long reclaim_seen, full_at;
    _Atomic unsigned colds;      /* checks that found a cold page, so far */
};
#define cr (*server.coldread_st)
#define force (cr.force)
#define stat_requests (cr.stat_requests)
#define stat_pages (cr.stat_pages)

void coldread_state_new(void) {
    struct coldread_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->once = (pthread_once_t)PTHREAD_ONCE_INIT;
    st->reclaim_seen = -1;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    pthread_cond_init(&st->idle, NULL);
    server.coldread_st = st;
}

/* After coldread_stop (every reader gone). */
void coldread_state_free(void) {
    struct coldread_state *st = server.coldread_st;
    if (!st) return;
    for (int i = 0; st->inbox && i < server.nworkers; i++) {
        if (st->inbox[i].ev) event_free(st->inbox[i].ev);
        pthread_mutex_destroy(&st->inbox[i].mu);
    }
    free(st->inbox);
    free(st->q);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    pthread_cond_destroy(&st->idle);
    free(st);
    server.coldread_st = NULL;
}

int coldread_enabled(void) {
    return server.cfg.cold_read_threads > 0 && server.pool && !pool_is_pmem(server.pool);
}
void coldread_set_force(int on) { atomic_store(&force, on); }
long long coldread_stat_requests(void) { return atomic_load(&stat_requests); }
long long coldread_stat_pages(void) { return atomic_load(&stat_pages); }
void coldread_drop_cache(void) {
    atomic_fetch_add(&cr.drops, 1);
    atomic_store(&cr.reclaim_seen, -1);
    atomic_store(&cr.resident_at, 0);
    pool_drop_cache(server.pool);
}

/* ---------------- readers ---------------- */

/* The end of the segment holding p: an entry never crosses it. */
static const uint8_t *seg_end(const uint8_t *p) {
    const uint8_t *base = pool_base(server.pool);
    uint64_t off = (uint64_t)(p - base);
    uint64_t end = (off / POOL_SEG_SIZE + 1) * POOL_SEG_SIZE;
    uint64_t size = pool_missing_from(server.pool);   /* a truncated file: its size */
    if (!size || size > pool_size(server.pool)) size = pool_size(server.pool);
    if (end > size) end = size;
    return base + end;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Bytes of the entry at p as its header says, cut at its segment's end
 * (the header may be stale or garbage if the entry was cleaned meanwhile:
 * then this only touches a few pages for nothing). */
static size_t entry_len(const uint8_t *p) {
    size_t room = (size_t)(seg_end(p) - p);
    if (room < LOG_HDR_SIZE) return room;
    uint64_t len = (uint64_t)LOG_HDR_SIZE + le32(p + 16) + le32(p + 20);
    return len < room ? (size_t)len : room;
}

/* Fault in every page of the entry at p (this thread waits, not a worker). */
static void fault_in(const uint8_t *p) {
    (void)*(const volatile uint8_t *)p;
    if (p + LOG_HDR_SIZE <= seg_end(p))   /* a sub-entry's header may cross a page */
        (void)*(const volatile uint8_t *)(p + LOG_HDR_SIZE - 1);
    size_t len = entry_len(p);
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
    for (uintptr_t a = first + PAGE; a < (uintptr_t)p + len; a += PAGE)
        (void)*(const volatile uint8_t *)a;
}

static void deliver(coldread_req *r) {
    struct inbox *ib = &cr.inbox[r->w->id];
    pthread_mutex_lock(&ib->mu);
    r->next = ib->done;
    ib->done = r;
    pthread_mutex_unlock(&ib->mu);
    event_active(ib->ev, EV_READ, 0);
}

static void *reader_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "rowan-coldread");
    pthread_mutex_lock(&cr.mu);
    for (;;) {
        while (cr.len == 0 && !cr.stopping) pthread_cond_wait(&cr.cv, &cr.mu);
        if (cr.stopping) break;
        struct job j = cr.q[cr.head];
        cr.head = (cr.head + 1) % cr.cap;
        cr.len--;
        cr.busy++;
        pthread_mutex_unlock(&cr.mu);
        fault_in(j.r->pages[j.i]);
        atomic_fetch_add(&stat_pages, 1);
        if (atomic_fetch_sub(&j.r->left, 1) == 1) deliver(j.r);
        /* busy until here: coldread_stop waits for this, so once it
         * returns no reader touches the mapping or a worker's event */
        pthread_mutex_lock(&cr.mu);
        if (--cr.busy == 0 && cr.stopping) pthread_cond_broadcast(&cr.idle);
    }
    cr.started--;   /* coldread_stop waits for every reader to leave */
    pthread_cond_broadcast(&cr.idle);
    pthread_mutex_unlock(&cr.mu);
    return NULL;
}

static void start(void) {
    cr.inbox = calloc((size_t)server.nworkers, sizeof(*cr.inbox));
    for (int i = 0; i < server.nworkers; i++) pthread_mutex_init(&cr.inbox[i].mu, NULL);
    for (int i = 0; i < server.cfg.cold_read_threads; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 << 10);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (rowan_thread_create(&t, &a, reader_main, NULL) == 0) cr.started++;
        pthread_attr_destroy(&a);
    }
}

void coldread_stop(void) {
    pthread_mutex_lock(&cr.mu);
    cr.stopping = 1;
    pthread_cond_broadcast(&cr.cv);
    while (cr.busy || cr.started) pthread_cond_wait(&cr.idle, &cr.mu);
    pthread_mutex_unlock(&cr.mu);
}

/* ---------------- the owning worker ---------------- */

static void done_cb(evutil_socket_t fd, short what, void *arg) {
    struct inbox *ib = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&ib->mu);
    coldread_req *r = ib->done;
    ib->done = NULL;
    pthread_mutex_unlock(&ib->mu);
    while (r) {
        coldread_req *next = r->next;
        if (r->owner) r->done(r->owner);
        free(r->pages);
        free(r);
        r = next;
    }
}

void coldread_submit(coldread_req *r, coldread_done_fn *done) {
    r->done = done;
    struct inbox *ib = &cr.inbox[r->w->id];
    if (!ib->ev) ib->ev = event_new(r->w->base, -1, EV_PERSIST, done_cb, ib);
    atomic_fetch_add(&stat_requests, 1);
    atomic_store(&r->left, r->npages);
    pthread_mutex_lock(&cr.mu);
    if (cr.len + (size_t)r->npages > cr.cap) {
        size_t ncap = cr.cap ? cr.cap : 256;
        while (ncap < cr.len + (size_t)r->npages) ncap *= 2;
        struct job *nq = malloc(ncap * sizeof(*nq));
        for (size_t i = 0; i < cr.len; i++) nq[i] = cr.q[(cr.head + i) % cr.cap];
        free(cr.q);
        cr.q = nq;
        cr.head = 0;
        cr.cap = ncap;
    }
    for (int i = 0; i < r->npages; i++)
        cr.q[(cr.head + cr.len++) % cr.cap] = (struct job){r, i};
    /* one reader per page: a broadcast would wake all of them for a GET */
    if (r->npages == 1)
        pthread_cond_signal(&cr.cv);
    else
        pthread_cond_broadcast(&cr.cv);
    pthread_mutex_unlock(&cr.mu);
}

void coldread_cancel(coldread_req *r) { r->owner = NULL; }

/* A check costs a lock, an index walk and a mincore per key: about a tenth
 * of an in-memory GET. A worker whose last CALM_CHECKS checks all found
 * everything resident checks only one command in CALM_EVERY; the first
 * cold page found makes it check every command again. So data in memory
 * pays little, and a cold read it misses meanwhile faults in the worker as
 * it did before this path existed.
 *
 * Once calm, a worker also scans, at most every RESIDENT_NS (one worker at
 * a time), the log of every segment in use with mincore; while the last
 * scan found it all resident, no command is checked at all. A scan costs a
 * few microseconds per segment, so it is only tried up to RESIDENT_SEGS
 * segments in use; a pool larger than that, or one with a cold page, is
 * sampled as above. Pages evicted after a scan fault in the worker until
 * the next one (at most RESIDENT_NS), as a sampled miss does. DEBUG
 * COLDREAD DROP forgets the scan and the calm: every worker checks every
 * command again (else the commands skipped right after it fault their
 * pages in, and their neighbours with them, before a check sees one).
 *
 * A page the scan found resident leaves memory only if the kernel
 * reclaims it (counted in /proc/vmstat's pgsteal_* whatever the cgroup),
 * someone drops the cache (drop_pagecache; DEBUG COLDREAD DROP counts its
 * own), or the file shrinks (never, while the server has it). So while
 * those counters have not moved since the last full scan that found
 * everything resident, the next scan is a read of /proc/vmstat instead of
 * a mincore per segment in use (issue 14, fifth pass: the full scan was
 * 9.4 mincore calls per thousand SETs at -P 16 and ~2.6% of the server's
 * CPU, a cost per second that a server short of CPU pays per SET all the
 * more); a full scan still runs every RESIDENT_FULL_NS (an eviction these
 * counters miss, e.g. another process's fadvise, then costs at most that
 * long of faults in the worker). */
#define CALM_CHECKS 1024
#define CALM_EVERY 16
#define RESIDENT_NS (100 * 1000000LL)
#define RESIDENT_SEGS 256u
#define RESIDENT_FULL_NS (5000 * 1000000LL)

static long long coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Is every page of every log in use resident? 0 when it cannot tell. */
static int pool_resident(void) {
    pool *p = server.pool;
    if (pool_missing_from(p)) return 0;
    uint32_t n = pool_nsegs(p), live = 0;
    unsigned char vec[POOL_SEG_SIZE / PAGE];
    for (uint32_t i = 0; i < n; i++) {
        struct seg_meta m = pool_seg_meta(p, i);
        if (m.state == SEG_FREE) continue;
        if (++live > RESIDENT_SEGS) return 0;
        /* an open log: what is durable (the rest was just written); a
         * sealed one without a known end: all of it */
        uint64_t len = m.end ? m.end : (m.state == SEG_USING ? 0 : POOL_SEG_SIZE);
        size_t pages = (size_t)((len + PAGE - 1) / PAGE);
        if (!pages) continue;
        if (mincore(pool_ptr(p, pool_seg_offset(p, i)), pages * PAGE, vec) != 0) return 0;
        for (size_t k = 0; k < pages; k++)
            if (!(vec[k] & 1)) return 0;
    }
    return 1;
}

/* Pages the kernel reclaimed or dropped from the page cache so far, over
 * the whole system (/proc/vmstat: every pgsteal_* line, drop_pagecache);
 * only compared with an earlier reading. -1 when it cannot tell. */
static long long reclaimed_pages(void) {
    int fd = open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[16384];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = 0;
    long long sum = 0;
    int seen = 0;
    for (char *line = buf; *line;) {
        char *eol = strchr(line, '\n');
        if (strncmp(line, "pgsteal_", 8) == 0 || strncmp(line, "drop_pagecache ", 15) == 0) {
            char *sp = strchr(line, ' ');
            if (sp && (!eol || sp < eol)) {
                sum += strtoll(sp + 1, NULL, 10);
                seen = 1;
            }
        }
        if (!eol) break;
        line = eol + 1;
    }
    return seen ? sum : -1;
}

/* Was everything resident at the last scan, RESIDENT_NS ago at most? Runs
 * the scan when due, unless another worker is running it: a read of the
 * reclaim counters while they stand still, else (or every
 * RESIDENT_FULL_NS) a mincore of every segment in use. */
static int known_resident(void) {
    long long now = coarse_ns();
    if (now - atomic_load(&cr.resident_at) < RESIDENT_NS) return 1;
    if (now - atomic_load(&cr.scanned_at) < RESIDENT_NS || atomic_exchange(&cr.scanning, 1))
        return 0;
    unsigned drops = atomic_load(&cr.drops), colds = atomic_load(&cr.colds);
    atomic_store(&cr.scanned_at, now);
    long long seen = atomic_load(&cr.reclaim_seen);
    long long reclaimed = reclaimed_pages();
    int yes;
    if (seen >= 0 && reclaimed == seen && now - atomic_load(&cr.full_at) < RESIDENT_FULL_NS) {
        yes = 1;   /* nothing left memory since the full scan below found it all in */
    } else {
        yes = pool_resident();
        atomic_store(&cr.reclaim_seen, yes ? reclaimed : -1);
        if (yes) atomic_store(&cr.full_at, now);
    }
    if (yes) {
        atomic_store(&cr.resident_at, now);
        /* a drop ran meanwhile, or a check found a cold page */
        if (atomic_load(&cr.drops) != drops || atomic_load(&cr.colds) != colds) {
            atomic_store(&cr.reclaim_seen, -1);
            atomic_store(&cr.resident_at, 0);
            yes = 0;
        }
    }
    atomic_store(&cr.scanning, 0);
    return yes;
}

int coldread_skip(struct worker *w) {
    pthread_once(&cr.once, start);
    struct inbox *ib = &cr.inbox[w->id];
    if (ib->calm < CALM_CHECKS || atomic_load(&force)) return 0;
    unsigned drops = atomic_load(&cr.drops);
    if (drops != ib->drops) {   /* DEBUG COLDREAD DROP: check everything again */
        ib->drops = drops;
        ib->calm = 0;
        return 0;
    }
    if (known_resident()) return 1;
    if (++ib->since < CALM_EVERY) return 1;
    ib->since = 0;
    return 0;
}

void coldread_checked(struct worker *w, int found_cold) {
    struct inbox *ib = &cr.inbox[w->id];
    if (found_cold) {
        ib->calm = 0;
        atomic_fetch_add(&cr.colds, 1);
        atomic_store(&cr.reclaim_seen, -1);   /* the next scan is a full one */
        atomic_store(&cr.resident_at, 0);   /* the other workers check again too */
    }
    else if (ib->calm < CALM_CHECKS)
        ib->calm++;
}
int coldread_pages(const coldread_req *r) { return r->npages; }

/* ---------------- which pages are cold ---------------- */

struct candidates { uint64_t ref[MAX_CANDIDATES]; int n; };

/* index_get's match function that never matches: it only lists the
 * references whose hash bits agree, without reading their entries. */
static int collect(void *ctx, uint64_t ref) {
    struct candidates *c = ctx;
    if (c->n < MAX_CANDIDATES) c->ref[c->n++] = ref;
    return 0;
}

/* Is any page of the entry at p not in memory? One mincore for the first
 * two pages (a 1 KB value crosses into a second page a quarter of the
 * time); the header, once resident, gives the length, and only a longer
 * entry needs a second call (its first 8 pages). */
static int cold(const uint8_t *p) {
    if (atomic_load(&force)) return 1;
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)(PAGE - 1);
    size_t room = ((uintptr_t)seg_end(p) - first) / PAGE;   /* pages to the segment's end */
    unsigned char vec[8];
    size_t n = room < 2 ? room : 2;
    if (n == 0 || mincore((void *)first, n * PAGE, vec) != 0) return 0;   /* cannot tell: run it */
    size_t hdr_last = ((uintptr_t)p + LOG_HDR_SIZE - 1 - first) / PAGE;
    for (size_t i = 0; i <= hdr_last && i < n; i++)
        if (!(vec[i] & 1)) return 1;
    size_t last = ((uintptr_t)p + entry_len(p) - 1 - first) / PAGE;   /* the header is in */
    if (last >= n) {
        n = last + 1 < sizeof vec ? last + 1 : sizeof vec;
        if (n > room) n = room;
        if (mincore((void *)first, n * PAGE, vec) != 0) return 0;
    }
    for (size_t i = 0; i <= last && i < n; i++)
        if (!(vec[i] & 1)) return 1;
    return 0;
}

static int add_page(coldread_req **rp, struct worker *w, void *owner, const uint8_t *p) {
    coldread_req *r = *rp;
    if (!r) {
        pthread_once(&cr.once, start);
        if (!cr.started) return 0;
        r = *rp = calloc(1, sizeof(*r));
        r->w = w;
        r->owner = owner;
    }
    if (r->npages == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 4;
        r->pages = realloc(r->pages, sizeof(*r->pages) * (size_t)r->cap);
    }
    r->pages[r->npages++] = p;
    return 1;
}

int coldread_add_key(coldread_req **r, struct worker *w, void *owner, int db,
                     const char *key, size_t klen) {
    shard *s = shard_of_key(key, klen);
    if (db < 0 || shard_trylock(s) != 0) return 0;
    unsigned pdb = s->dbmap[db];
    struct candidates c = {.n = 0};
    index_get(s->idx, hash_key(pdb, key, klen), collect, &c);
    const uint8_t *cold_at[MAX_CANDIDATES];
    int n = 0;
    for (int i = 0; i < c.n; i++) {
        if (ref_is_obj(c.ref[i])) continue;   /* DRAM */
        const uint8_t *p = pool_ptr(server.pool, c.ref[i]);
        if (cold(p)) cold_at[n++] = p;
    }
    shard_unlock(s);
    int added = 0;
    for (int i = 0; i < n; i++) added += add_page(r, w, owner, cold_at[i]);
    return added;
}
