/* index.h -- a per-shard DRAM bucket hash index (Rowan-KV §5.3).
 *
 * Each item is 64 bits and holds a reference plus bits of its key's hash.
 * References are opaque to the index, never 0, at most 48 bits; the keyspace
 * layer uses 8-byte aligned pool offsets for string values and (pointer | 1)
 * for DRAM collection objects. Two item forms:
 *
 *  - compact: a reference that is a multiple of 8 below 2^40 (any pool
 *    offset of a pool up to 1 TiB) is stored in 37 bits next to the low 26
 *    bits of its key's hash;
 *  - wide: any other reference, in 48 bits next to a 15-bit tag (the top
 *    bits of the hash).
 *
 * Buckets are one cache line: 7 items plus a link to an overflow bucket. The
 * table grows by linear hashing: one bucket is split per insert that passes
 * 75% load, so growth costs a few items' worth of work per insert and never
 * stops the owner for a whole-table rebuild. A split needs one more bit of
 * each moved item's hash: compact items carry it, so growth never asks the
 * caller about them (and so never reads the pool); for wide items (DRAM
 * objects) it asks index_rehash_fn.
 *
 * Keys are compared by the caller: lookups pass a match function that reads
 * the entry behind a candidate reference, called only for items whose stored
 * hash bits agree. The index never touches the pool.
 *
 * Not thread safe: the owning shard's lock protects it. */
#ifndef ROWAN_INDEX_H
#define ROWAN_INDEX_H
#include <stddef.h>
#include <stdint.h>

#define INDEX_REF_MASK ((1ULL << 48) - 1)
/* References below this that are multiples of 8 are stored compactly and
 * never passed to index_rehash_fn while the table has fewer than 2^26
 * buckets (about 350 million keys). */
#define INDEX_COMPACT_LIMIT (1ULL << 40)

typedef struct rw_index rw_index;
/* Does the key behind ref equal the key being looked up? */
typedef int (*index_match_fn)(void *ctx, uint64_t ref);
/* The 64-bit hash of the key behind ref (used when a bucket splits, for wide
 * items only). */
typedef uint64_t (*index_rehash_fn)(void *ctx, uint64_t ref);
/* Visitor for scans; return nonzero to stop early. */
typedef int (*index_visit_fn)(void *ctx, uint64_t ref);

rw_index *index_new(index_rehash_fn rehash, void *rehash_ctx);
void index_free(rw_index *ix);
size_t index_count(const rw_index *ix);
/* DRAM bytes used by the index (for INFO memory and the memory benchmark). */
size_t index_mem_bytes(const rw_index *ix);

/* Reference of the item whose key matches, or 0. */
uint64_t index_get(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx);
/* Insert ref for the key, replacing the matching item if any. Returns the
 * replaced reference, or 0 if the key was new. */
uint64_t index_put(rw_index *ix, uint64_t hash, uint64_t ref, index_match_fn match, void *ctx);
/* Remove the matching item; returns its reference or 0. */
uint64_t index_del(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx);
/* Replace old_ref by new_ref only if an item with this hash still holds
 * exactly old_ref (the cleaner's relocation). Returns 1 if replaced. */
int index_replace(rw_index *ix, uint64_t hash, uint64_t old_ref, uint64_t new_ref);
/* Remove the item holding exactly ref (with this hash); 1 if removed. */
int index_remove_ref(rw_index *ix, uint64_t hash, uint64_t ref);
void index_clear(rw_index *ix);

/* Redis-style reverse-binary cursor scan: visits the items of some buckets,
 * returns the next cursor (0 when complete). Every item present for the whole
 * scan is visited at least once even if the table grows between calls.
 * *budget is decremented per visited item; the call stops after the bucket in
 * which it reaches 0. */
uint64_t index_scan(rw_index *ix, uint64_t cursor, long *budget, index_visit_fn fn, void *ctx);
/* Visit every item (stops early if fn returns nonzero). */
void index_foreach(rw_index *ix, index_visit_fn fn, void *ctx);
/* A uniformly-ish random item's reference, or 0 when empty. rnd is any
 * random 64-bit number supplied by the caller. */
uint64_t index_random(rw_index *ix, uint64_t rnd);
/* Start loading the bucket a lookup of hash begins with into the cache (a
 * hint: no effect on the contents). Caller holds the owning shard's lock. */
void index_prefetch(const rw_index *ix, uint64_t hash);

#endif
