/* index.h -- a per-shard DRAM bucket hash index (Rowan-KV §5.3).
 *
 * Each item is 64 bits: a 16-bit tag (top bits of the key's hash, see
 * hash_tag) and a 48-bit reference. References are opaque to the index; the
 * keyspace layer uses a 64-byte/8-byte aligned pool offset for string values
 * and (pointer | 1) for DRAM collection objects. A reference is never 0, and
 * item value 0 marks an empty slot.
 *
 * Buckets are one cache line: 7 items plus a link to an overflow bucket. The
 * bucket array grows by doubling when the load passes 75% of the primary
 * slots; growth re-hashes every item by asking the caller for its key's hash
 * (index_rehash_fn), since the item alone does not hold enough hash bits.
 *
 * Keys are compared by the caller: lookups pass a match function that reads
 * the entry behind a candidate reference. The index never touches the pool.
 *
 * Not thread safe: the owning shard's lock protects it. */
#ifndef ROWAN_INDEX_H
#define ROWAN_INDEX_H
#include <stddef.h>
#include <stdint.h>

#define INDEX_REF_MASK ((1ULL << 48) - 1)

typedef struct rw_index rw_index;
/* Does the key behind ref equal the key being looked up? */
typedef int (*index_match_fn)(void *ctx, uint64_t ref);
/* The 64-bit hash of the key behind ref (used when the table grows). */
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
/* Replace old_ref by new_ref only if an item with this hash's tag still holds
 * exactly old_ref (the cleaner's relocation). Returns 1 if replaced. */
int index_replace(rw_index *ix, uint64_t hash, uint64_t old_ref, uint64_t new_ref);
/* Remove the item holding exactly ref (with this hash's tag); 1 if removed. */
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

#endif
