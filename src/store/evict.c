/* evict.c -- maxmemory: used-memory accounting, eviction, access clocks.
 *
 * Design
 * ------
 * Used memory is the data set as stored (pool bytes held by live entries:
 * what deleting keys gives back at once, db_live_bytes) plus the heap
 * (malloc'd DRAM: indexes, collections, client buffers; mallinfo2, sampled
 * at most every 100 ms because it walks the allocator's arenas; 1 MiB
 * stands in for it under an allocator it cannot see, ASan's). Rowan keeps
 * values in its pool rather than in DRAM, so maxmemory bounds both together,
 * as Redis's bounds the heap that holds its data. INFO's used_memory is the
 * same number, so used_memory > maxmemory means what it means in Redis.
 *
 * Eviction runs like Redis's performEvictions: before a command, when used
 * memory is over maxmemory, it deletes keys chosen by maxmemory-policy until
 * the excess is freed. Each eviction is one DEL entry, logged and replicated
 * like any DEL (db_evict_key), so an evicted key stays gone after a crash
 * and on every replica. Candidates are sampled as in Redis (approximate
 * policies): maxmemory-samples random keys, each from a random shard clients
 * see (its primary shards in a cluster), and the best one by the policy is
 * evicted. noeviction, or nothing the policy may evict (volatile-* with no
 * key that has an expiry), leaves memory over the limit: the caller refuses
 * commands that may grow memory with Redis's -OOM error.
 *
 * Access clocks: the index item has no room for per-key metadata, so each
 * shard has a table of 64-bit slots indexed by key hash, updated under the
 * shard lock by every lookup and write: the last access time (unix seconds,
 * low 32 bits), and Redis's LFU fields (16 bits of decrement time in
 * minutes, the 8-bit logarithmic counter). Keys sharing a slot share their
 * clocks, which only coarsens the approximation; the table doubles when the
 * shard outgrows it, its slots empty (an empty slot reads as "accessed just
 * now, LFU_INIT_VAL", as a new key is in Redis). Slots are not
 * persisted: after a restart every key's clock starts at its first access.
 * Unless the policy is *-lfu, a touch only stores the slot, never reads it:
 * the slot is a random cache line per lookup, and reading it stalled every
 * GET (evict_touch was 8% of the server's CPU at GET -P 16, perf); storing
 * waits in the store buffer instead. Only the LFU fields need the old value,
 * and those are Redis's "lru" field read another way: under a non-LFU policy
 * Redis keeps no counter either. evict_mark's bits live in a bitmap beside
 * the slots (one bit per slot, small enough to stay cached), so a read's
 * store cannot lose them.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db.h"
#include "evict.h"
#include "server.h"
#include "shard.h"

/* ------------------------------------------------------------------------ */
/* Used memory                                                               */
/* ------------------------------------------------------------------------ */

long long evict_dataset_memory(void)
{
    return server.pool ? db_live_bytes() : 0;
}

#define HEAP_STAND_IN (1024LL * 1024)
static _Atomic long long heap_cached;
static _Atomic int64_t heap_cached_ms;

long long evict_heap_memory(void)
{
    int64_t now = mstime();
    if (now - atomic_load(&heap_cached_ms) < 100) return atomic_load(&heap_cached);
    long long used = 0;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    used = (long long)(mi.uordblks + mi.hblkhd);
#endif
    /* An allocator mallinfo2 cannot see (ASan's): a constant stand-in, so
     * the figure stays one that deletions can bring down. */
    if (used <= 0) used = HEAP_STAND_IN;
    atomic_store(&heap_cached, used);
    atomic_store(&heap_cached_ms, now);
    return used;
}

long long evict_used_memory(void)
{
    return evict_heap_memory() + evict_dataset_memory();
}

/* ------------------------------------------------------------------------ */
/* Access clocks                                                             */
/* ------------------------------------------------------------------------ */

#define LFU_INIT_VAL 5
#define SLOT_VALID (1ULL << 63)
#define CLOCK_MIN_SLOTS 1024

struct clock_ring {
    uint64_t *slot;
    uint64_t *mark;       /* evict_mark's bits, one per slot */
    uint64_t mask;        /* slots - 1 (a power of two minus one); 0: none yet */
};

/* Growth is checked once in GROW_EVERY touches of a thread, on the shard
 * it touches then (each shard about once in GROW_EVERY of its own touches
 * per thread, as with a counter per shard): a counter in the ring itself
 * was a store per SET into a line two shards' rings share, and every worker
 * writes keys of every shard, so the line moved between the workers' cores
 * about once per SET. A check sums the shard's dbkeys (2 KiB). */
#define GROW_EVERY 1024
static __thread uint32_t touches;

/* This file's state, one per server (server.h). */
struct evict_state {
    struct clock_ring *clocks;   /* one per shard, under the shard's lock */
    pthread_once_t clocks_once;
};

void evict_state_new(void) {
    struct evict_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->clocks_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    server.evict_st = st;
}

void evict_state_free(void) {
    if (!server.evict_st) return;
    for (int i = 0; server.evict_st->clocks && i < server.nshards; i++) {   /* before the shards go */
        free(server.evict_st->clocks[i].slot);
        free(server.evict_st->clocks[i].mark);
    }
    free(server.evict_st->clocks);
    free(server.evict_st);
    server.evict_st = NULL;
}

#define clocks (server.evict_st->clocks)   /* one per shard, under the shard's lock */
#define clocks_once (server.evict_st->clocks_once)

static void clocks_alloc(void)
{
    clocks = calloc((size_t)server.nshards, sizeof(*clocks));
    if (!clocks) abort();
}

static uint32_t now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint32_t)ts.tv_sec;
}

static unsigned lfu_minutes(uint32_t secs) { return (secs / 60) & 65535; }

static uint64_t slot_pack(uint32_t secs, unsigned counter)
{
    return SLOT_VALID | (uint64_t)counter << 48 | (uint64_t)lfu_minutes(secs) << 32 | secs;
}

static unsigned slot_counter(uint64_t v) { return (unsigned)(v >> 48) & 255; }

/* Redis's LFUDecrAndReturn: one off per lfu-decay-time minutes elapsed. */
static unsigned lfu_decayed(uint64_t v, uint32_t now)
{
    unsigned ldt = (unsigned)(v >> 32) & 65535, nowmin = lfu_minutes(now);
    unsigned elapsed = nowmin >= ldt ? nowmin - ldt : 65535 - ldt + nowmin;
    unsigned counter = slot_counter(v);
    int decay = server.cfg.lfu_decay_time;
    unsigned periods = decay > 0 ? elapsed / (unsigned)decay : 0;
    return periods > counter ? 0 : counter - periods;
}

static uint64_t rng_next(void)
{
    static __thread uint64_t x;
    if (!x) x = (uint64_t)mstime() ^ (uint64_t)(uintptr_t)&x ^ 0x9e3779b97f4a7c15ULL;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/* Redis's LFULogIncr: the higher the counter, the less likely it grows. */
static unsigned lfu_log_incr(unsigned counter)
{
    if (counter >= 255) return 255;
    double r = (double)(rng_next() >> 11) / (double)(1ULL << 53);
    double base = counter > LFU_INIT_VAL ? counter - LFU_INIT_VAL : 0;
    double p = 1.0 / (base * server.cfg.lfu_log_factor + 1);
    return r < p ? counter + 1 : counter;
}

static long long shard_keys(int sid)
{
    long long n = 0;
    for (int d = 0; d < SHARD_MAX_DBS; d++) n += server.shards[sid].dbkeys[d];
    return n;
}

/* The shard's table, allocated or doubled as needed. */
static struct clock_ring *clocks_of(int sid)
{
    pthread_once(&clocks_once, clocks_alloc);
    struct clock_ring *c = &clocks[sid];
    if (c->mask && (++touches & (GROW_EVERY - 1))) return c;
    long long want = shard_keys(sid) * 2;
    if (c->mask && (uint64_t)want <= (c->mask + 1) * 2) return c;
    uint64_t n = CLOCK_MIN_SLOTS;
    while ((long long)n < want) n <<= 1;
    if (n == c->mask + 1) return c;
    /* Empty slots read as "accessed just now, LFU_INIT_VAL" (evict_idle_seconds). */
    uint64_t *slot = calloc(n, sizeof(*slot));
    uint64_t *mark = calloc((n + 63) / 64, sizeof(*mark));
    if (!slot || !mark) {   /* keep the old table */
        free(slot);
        free(mark);
        return c->mask ? c : NULL;
    }
    free(c->slot);
    free(c->mark);
    c->slot = slot;
    c->mark = mark;
    c->mask = n - 1;
    return c;
}

static uint64_t *slot_of(int sid, uint64_t hash)
{
    struct clock_ring *c = clocks_of(sid);
    return c ? &c->slot[hash & c->mask] : NULL;
}

/* The word of the mark bitmap holding the key's bit, and the bit. */
static uint64_t *mark_of(int sid, uint64_t hash, uint64_t *bit)
{
    struct clock_ring *c = clocks_of(sid);
    if (!c) return NULL;
    uint64_t i = hash & c->mask;
    *bit = 1ULL << (i & 63);
    return &c->mark[i / 64];
}

static int policy_lfu(void)
{
    int p = server.cfg.maxmemory_policy;
    return p == MAXMEMORY_ALLKEYS_LFU || p == MAXMEMORY_VOLATILE_LFU;
}

void evict_touch(int sid, uint64_t hash, int is_write)
{
    struct clock_ring *c = clocks_of(sid);
    if (!c) return;
    uint64_t i = hash & c->mask, *s = &c->slot[i];
    uint32_t now = now_seconds();
    /* a write replaces the value: its mark goes (evict_mark); stored only
     * when set, so the bitmap's lines stay shared between the workers */
    uint64_t bit = 1ULL << (i & 63);
    if (is_write && (c->mark[i / 64] & bit)) c->mark[i / 64] &= ~bit;
    /* Under a policy that does not count accesses (not *-lfu) a touch only
     * stores the access time (see the design above: OBJECT FREQ answers
     * under an LFU policy only; Redis, too, starts a new value's counter
     * afresh unless the policy is LFU, and its counters take time to adjust
     * after a switch). */
    if (!policy_lfu()) {
        *s = slot_pack(now, LFU_INIT_VAL);
        return;
    }
    /* A key written into a fresh slot starts at LFU_INIT_VAL, as a new key
     * does in Redis; any other access counts. */
    unsigned counter = (*s & SLOT_VALID) ? lfu_log_incr(lfu_decayed(*s, now))
                       : (is_write ? LFU_INIT_VAL : lfu_log_incr(LFU_INIT_VAL));
    *s = slot_pack(now, counter);
}

void evict_mark(int sid, uint64_t hash)
{
    uint64_t *s = slot_of(sid, hash);
    if (!s) return;
    if (!(*s & SLOT_VALID)) *s = slot_pack(now_seconds(), LFU_INIT_VAL);
    uint64_t bit, *m = mark_of(sid, hash, &bit);
    *m |= bit;
}

int evict_marked(int sid, uint64_t hash)
{
    uint64_t bit, *m = mark_of(sid, hash, &bit);
    return m && (*m & bit) != 0;
}

void evict_forget(int sid, uint64_t hash)
{
    uint64_t *s = slot_of(sid, hash);
    if (!s) return;
    *s = 0;
    uint64_t bit, *m = mark_of(sid, hash, &bit);
    *m &= ~bit;
}

long long evict_idle_seconds(int sid, uint64_t hash)
{
    uint64_t *s = slot_of(sid, hash);
    if (!s || !(*s & SLOT_VALID)) return 0;
    uint32_t now = now_seconds(), then = (uint32_t)*s;
    return now >= then ? now - then : 0;
}

int evict_lfu_freq(int sid, uint64_t hash)
{
    uint64_t *s = slot_of(sid, hash);
    if (!s || !(*s & SLOT_VALID)) return LFU_INIT_VAL;
    return (int)lfu_decayed(*s, now_seconds());
}

/* ------------------------------------------------------------------------ */
/* Eviction                                                                  */
/* ------------------------------------------------------------------------ */

static int policy_volatile(int p)
{
    return p == MAXMEMORY_VOLATILE_LRU || p == MAXMEMORY_VOLATILE_LFU ||
           p == MAXMEMORY_VOLATILE_RANDOM || p == MAXMEMORY_VOLATILE_TTL;
}

/* How good a victim the key is: the higher the better. */
static long long victim_score(int policy, int sid, const db_key_info *k)
{
    switch (policy) {
    case MAXMEMORY_ALLKEYS_LRU: case MAXMEMORY_VOLATILE_LRU:
        return evict_idle_seconds(sid, k->hash);
    case MAXMEMORY_ALLKEYS_LFU: case MAXMEMORY_VOLATILE_LFU:
        return 255 - evict_lfu_freq(sid, k->hash);
    case MAXMEMORY_VOLATILE_TTL:
        return -k->expire_ms;          /* the nearest expiry goes first */
    default:
        return 0;                      /* random: the first sample */
    }
}

struct victim {
    int sid;
    unsigned pdb;
    char *key;
    size_t klen;
    long long score, bytes;
};

/* A random shard clients see that has keys (volatile: keys with expiry). */
static int pick_shard(int volatile_only)
{
    int n = server.nshards;
    int start = (int)(rng_next() % (uint64_t)n);
    for (int i = 0; i < n; i++) {
        int sid = (start + i) % n;
        if (!db_evict_shard(sid)) continue;
        shard *s = &server.shards[sid];
        long long have = 0;
        for (int d = 0; d < SHARD_MAX_DBS; d++)
            have += volatile_only ? s->dbexpires[d] : s->dbkeys[d];
        if (have > 0) return sid;   /* read unlocked: a hint, rechecked when sampled */
    }
    return -1;
}

/* The best of maxmemory-samples candidates. 1 found (v->key malloc'd). */
static int choose_victim(int policy, struct victim *v)
{
    int vol = policy_volatile(policy);
    int samples = server.cfg.maxmemory_samples;
    int random_policy = policy == MAXMEMORY_ALLKEYS_RANDOM || policy == MAXMEMORY_VOLATILE_RANDOM;
    if (random_policy) samples = 1;
    int found = 0;
    for (int i = 0; i < samples; i++) {
        int sid = pick_shard(vol);
        if (sid < 0) break;
        shard *s = &server.shards[sid];
        db_key_info k;
        shard_lock(s);
        if (db_sample_key(s, vol, rng_next(), &k)) {
            long long score = victim_score(policy, sid, &k);
            if (!found || score > v->score) {
                char *copy = malloc(k.klen ? k.klen : 1);
                if (copy) {
                    memcpy(copy, k.key, k.klen);
                    free(found ? v->key : NULL);
                    *v = (struct victim){sid, k.pdb, copy, k.klen, score, k.bytes};
                    found = 1;
                }
            }
        }
        shard_unlock(s);
    }
    return found;
}

int evict_perform(struct db_ctx *x)
{
    long long limit = __atomic_load_n(&server.cfg.maxmemory, __ATOMIC_RELAXED);
    if (limit <= 0) return 0;
    long long used = evict_used_memory();
    if (used <= limit) return 0;
    int policy = __atomic_load_n(&server.cfg.maxmemory_policy, __ATOMIC_RELAXED);
    if (policy == MAXMEMORY_NO_EVICTION) return -1;
    long long tofree = used - limit, freed = 0, evicted = 0;
    /* A bound on one call's work: the rest waits for the next command. */
    for (int round = 0; freed < tofree && round < 1000; round++) {
        struct victim v = {0};
        if (!choose_victim(policy, &v)) break;
        shard *s = &server.shards[v.sid];
        shard_lock(s);
        int r = db_evict_key(x, s, v.pdb, v.key, v.klen);
        shard_unlock(s);
        free(v.key);
        if (r == 1) {
            evicted++;
            freed += v.bytes > 0 ? v.bytes : 1;
        } else if (r < 0) {
            break;     /* not even a DEL fits the pool */
        }
    }
    if (evicted) atomic_fetch_add(&server.stat.evicted_keys, evicted);
    /* As Redis does: enough freed by the estimate is success (the heap is
     * measured afresh at the next command). */
    atomic_store(&heap_cached_ms, 0);
    return freed >= tofree ? 0 : -1;
}

/* A hint: start loading the access-clock slot evict_touch will store for
 * the key, if the shard's table exists (it is never made here). Caller
 * holds the shard's lock. */
void evict_prefetch(int sid, uint64_t hash)
{
    if (!server.evict_st) return;
    pthread_once(&clocks_once, clocks_alloc);
    if (!clocks) return;
    struct clock_ring *c = &clocks[sid];
    if (c->mask) __builtin_prefetch(&c->slot[hash & c->mask], 1, 3);
}
