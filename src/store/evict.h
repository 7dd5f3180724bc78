/* evict.h -- maxmemory: used-memory accounting, eviction, access clocks.
 * See evict.c for the design. */
#ifndef ROWAN_EVICT_H
#define ROWAN_EVICT_H
#include <stdint.h>

struct db_ctx;

/* What INFO memory reports and maxmemory bounds: heap + data set. */
long long evict_used_memory(void);
/* The data set as stored: pool bytes of live entries. */
long long evict_dataset_memory(void);
/* The heap (malloc'd DRAM), sampled at most every 100 ms; a 1 MiB
 * stand-in when the allocator cannot say (ASan's). */
long long evict_heap_memory(void);

/* Bring used memory under maxmemory by evicting keys per maxmemory-policy.
 * Call with no shard lock held. 0: under the limit (or no limit), -1: still
 * over it (noeviction, or nothing left the policy may evict). */
int evict_perform(struct db_ctx *x);

/* Access clocks (caller holds shard sid's lock). hash is the key's hash
 * (db.c's hash_key). A read or write of the key: */
void evict_touch(int sid, uint64_t hash, int is_write);
/* Start loading the slot evict_touch would store for the key (a hint);
 * caller holds the shard's lock. */
void evict_prefetch(int sid, uint64_t hash);
/* The key was deleted: its slot starts over. */
void evict_forget(int sid, uint64_t hash);
/* Seconds since the key's last access (OBJECT IDLETIME). */
long long evict_idle_seconds(int sid, uint64_t hash);
/* The key's LFU counter, decayed to now (OBJECT FREQ). */
int evict_lfu_freq(int sid, uint64_t hash);
/* One bit of in-memory state per key for the command layer (Redis's "raw"
 * string encoding after an in-place edit): kept by reads, cleared by any
 * write or delete of the key, not persisted, as coarse as the clocks (keys
 * sharing a slot share it). Shard lock held. */
void evict_mark(int sid, uint64_t hash);
int evict_marked(int sid, uint64_t hash);

#endif
