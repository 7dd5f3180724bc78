/* shard.c -- shard table, version allocation and durable watermarks.
 *
 * See shard.h for the watermark argument. The invariant kept here:
 *   durable_ver == (min over every worker's nonzero slots) - 1, or
 *   next_ver - 1 when no slot holds anything,
 * recomputed under the shard lock whenever a slot is cleared. A slot gains a
 * value only in shard_next_version and is cleared only by
 * shard_worker_landed after the sync covering its batch returned; so the
 * watermark never passes a version whose entry is not yet durable. */
#include <stdlib.h>
#include <string.h>
#include "shard.h"
#include "hash.h"
#include "server.h"

/* This file's state, one per server (server.h). */
struct shard_state {
    int shard_nworkers;
};

void shard_state_new(void) {
    struct shard_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.shard_st = st;
}

/* The shards (shard_init_all) and this file's state. */
void shard_state_free(void) {
    for (int i = 0; server.shards && i < server.nshards; i++) {
        free(server.shards[i].pend);
        pthread_mutex_destroy(&server.shards[i].lock);
    }
    free(server.shards);
    server.shards = NULL;
    server.nshards = 0;
    free(server.shard_st);
    server.shard_st = NULL;
}

#define shard_nworkers (server.shard_st->shard_nworkers)

static void shard_init_one(shard *s, int id, int nshards, int nworkers, int databases) {
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->id = (uint16_t)id;
    s->first_slot = (unsigned)((long)id * HASH_SLOTS / nshards);
    s->last_slot = (unsigned)((long)(id + 1) * HASH_SLOTS / nshards - 1);
    s->next_ver = 1;
    atomic_store(&s->durable_ver, 0);
    s->pend = calloc((size_t)nworkers * SHARD_SLOTS, sizeof(uint64_t));
    for (int d = 0; d < SHARD_MAX_DBS; d++) s->dbmap[d] = (uint16_t)d;
    (void)databases;
}

void shard_init_all(int nshards, int nworkers, int databases) {
    server.nshards = nshards;
    server.shards = calloc((size_t)nshards, sizeof(shard));
    shard_nworkers = nworkers;
    for (int i = 0; i < nshards; i++) shard_init_one(&server.shards[i], i, nshards, nworkers, databases);
}

/* shard_init_one's ranges inverted: the largest id whose first slot,
 * id * HASH_SLOTS / nshards rounded down, is at most slot, which is
 * ((slot + 1) * nshards - 1) / HASH_SLOTS (checked for every slot and
 * every shard count by test-db-shard). Arithmetic rather than a slot ->
 * shard table: a table entry is a random cache line per key, and its load
 * was 1.8% of the server's CPU at GET -P 16 (perf). */
shard *shard_of_slot(unsigned slot) {
    unsigned long s = slot & (HASH_SLOTS - 1);
    return &server.shards[((s + 1) * (unsigned long)server.nshards - 1) / HASH_SLOTS];
}

shard *shard_of_key(const char *key, size_t len) {
    return shard_of_slot(hash_slot(key, len));
}

/* Which shard locks this thread holds: one bit per possible shard (there
 * are at most as many shards as slots), kept by the functions below. */
static __thread uint8_t held_here[HASH_SLOTS / 8];

static void held_mark(const shard *s, int on) {
    uint8_t bit = (uint8_t)(1u << (s->id & 7));
    if (on) held_here[s->id >> 3] |= bit;
    else held_here[s->id >> 3] &= (uint8_t)~bit;
}

void shard_lock(shard *s) {
    pthread_mutex_lock(&s->lock);
    held_mark(s, 1);
}

void shard_unlock(shard *s) {
    held_mark(s, 0);
    pthread_mutex_unlock(&s->lock);
}

int shard_trylock(shard *s) {
    int r = pthread_mutex_trylock(&s->lock);
    if (r == 0) held_mark(s, 1);
    return r;
}

int shard_held_by_me(const shard *s) { return (held_here[s->id >> 3] >> (s->id & 7)) & 1; }

uint64_t shard_next_version(shard *s, int wid, int slot) {
    uint64_t v = s->next_ver++;
    uint64_t *p = &s->pend[wid * SHARD_SLOTS + slot];
    if (*p == 0) *p = v;
    return v;
}

static uint64_t shard_watermark(const shard *s) {
    uint64_t lowest = 0;
    for (int i = 0; i < shard_nworkers * SHARD_SLOTS; i++) {
        uint64_t p = s->pend[i];
        if (p && (!lowest || p < lowest)) lowest = p;
    }
    return lowest ? lowest - 1 : s->next_ver - 1;
}

/* Move the watermark up to what the pending slots allow (lock held). */
static int shard_advance(shard *s) {
    uint64_t before = atomic_load(&s->durable_ver);
    uint64_t now = shard_watermark(s);
    if (now > before) atomic_store_explicit(&s->durable_ver, now, memory_order_release);
    return now > before;
}

/* The version has no effect to wait for, so the watermark may pass it at
 * once (a read of a missing key depends on next_ver - 1). */
uint64_t shard_resync_version(shard *s) {
    uint64_t v = s->next_ver++;
    shard_advance(s);
    return v;
}

int shard_worker_landed(shard *s, int wid, int slot) {
    shard_lock(s);
    s->pend[wid * SHARD_SLOTS + slot] = 0;
    int moved = shard_advance(s);
    shard_unlock(s);
    return moved;
}

uint64_t shard_durable_lag(shard *s) {
    /* INFO inside EXEC or a script already holds every shard */
    int locked = !shard_held_by_me(s);
    if (locked) shard_lock(s);
    uint64_t last = s->next_ver ? s->next_ver - 1 : 0;
    uint64_t dur = atomic_load(&s->durable_ver);
    if (locked) shard_unlock(s);
    return last > dur ? last - dur : 0;
}
