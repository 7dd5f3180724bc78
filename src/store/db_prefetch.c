/* db_prefetch.c -- cache hints for the keys of a batch of commands about to
 * run (issue 14, fifth pass).
 *
 * At redis-benchmark SET -P 16 the key lookup's cache misses were the
 * largest part of the server's CPU: the index bucket (find_match) and the
 * key's current entry in the pool (log_entry_decode), about a fifth of it
 * together, plus the access-clock slot evict_touch stores. Redis pays the
 * same misses in dictFind. When a connection's read brings several commands
 * at once, their keys are known before the first one runs, so the misses of
 * all of them can be started together and overlap, instead of being taken
 * one after the other as each command runs:
 *   0. every key: its shard's lock and index header (loaded);
 *   1. every key: the home bucket of its index (loaded);
 *   2. every key: the candidate references in that bucket, by the stored
 *      hash bits (no key compared), and the entry behind each (loaded), and
 *      the key's access-clock slot.
 * Each step looks at a shard only under its lock, taken with trylock and
 * released at once: a shard busy in the other worker is skipped (a hint
 * may be missing, never wrong: nothing is written, and the command takes the
 * lock and looks everything up as before; while recovery is loading, when
 * the indexes are built without locks, there are no hints). Keys that are
 * not keys (the edge passes each command's first argument) only cost their
 * hashing. */
#include "db.h"
#include "evict.h"
#include "hash.h"
#include "index.h"
#include "object.h"
#include "pool.h"
#include "server.h"
#include "shard.h"

#define PREFETCH_CANDIDATES 4

struct cands {
    uint64_t ref[PREFETCH_CANDIDATES];
    int n;
};

/* index_get's match function that never matches: lists the references
 * whose stored hash bits agree, without reading their entries. */
static int collect(void *ctx, uint64_t ref) {
    struct cands *c = ctx;
    if (c->n < PREFETCH_CANDIDATES) c->ref[c->n++] = ref;
    return 0;
}

void db_prefetch_keys(int db, int n, const char *const *keys, const size_t *klens) {
    /* recovery builds the indexes without shard locks while the workers
     * answer -LOADING: nothing may look at them until it is done */
    if (!server.pool || server_loading() || db < 0 || db >= SHARD_MAX_DBS) return;
    if (n > DB_PREFETCH_MAX) n = DB_PREFETCH_MAX;
    shard *sh[DB_PREFETCH_MAX];
    uint64_t h[DB_PREFETCH_MAX];
    /* 0: the shards' lines: the lock (often last written by the other
     * worker) and the index's header. s->idx is set before the workers
     * start and never changes while they run. */
    for (int i = 0; i < n; i++) {
        shard *s = sh[i] = shard_of_key(keys[i], klens[i]);
        if (!s) continue;
        __builtin_prefetch(&s->lock, 1, 3);
        if (s->idx) __builtin_prefetch(s->idx, 0, 3);
    }
    /* 1: each key's home bucket */
    for (int i = 0; i < n; i++) {
        shard *s = sh[i];
        if (!s || !s->idx || shard_trylock(s) != 0) {
            sh[i] = NULL;
            continue;
        }
        h[i] = hash_key(s->dbmap[db], keys[i], klens[i]);
        index_prefetch(s->idx, h[i]);
        shard_unlock(s);
    }
    /* 2: the entries its candidates reference, and the access-clock slot */
    for (int i = 0; i < n; i++) {
        shard *s = sh[i];
        if (!s || shard_trylock(s) != 0) continue;
        struct cands c = {.n = 0};
        index_get(s->idx, h[i], collect, &c);
        for (int k = 0; k < c.n; k++)
            if (!ref_is_obj(c.ref[k])) __builtin_prefetch(pool_ptr(server.pool, c.ref[k]), 0, 3);
        evict_prefetch(s->id, h[i]);
        shard_unlock(s);
    }
}
