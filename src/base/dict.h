/* dict.h -- a string-keyed hash table for collection values.
 *
 * Used by hashes (field -> value), sets (member -> nothing) and sorted sets
 * (member -> score, beside the skiplist). Keys and values are copied in.
 * Incremental-free growth by doubling; a Redis-style reverse-binary cursor
 * scan (HSCAN/SSCAN/ZSCAN) that visits every element present for the whole
 * scan at least once even if the table grows; uniform random entries
 * (HRANDFIELD, SRANDMEMBER, SPOP).
 *
 * Not thread safe: the owning shard's lock protects it. */
#ifndef ROWAN_DICT_H
#define ROWAN_DICT_H
#include <stddef.h>
#include <stdint.h>

typedef struct dict dict;
typedef struct dict_entry {
    const char *key;
    size_t klen;
    void *val;          /* owned value bytes (NULL for sets), or user data */
    size_t vlen;
    double score;       /* for sorted sets */
} dict_entry;

dict *dict_new(void);
void dict_free(dict *d);
size_t dict_size(const dict *d);
size_t dict_mem_bytes(const dict *d);
dict_entry *dict_find(const dict *d, const char *key, size_t klen);
/* Insert or replace; copies key and val (val may be NULL/0). Returns 1 if
 * the key was new, 0 if replaced. */
int dict_set(dict *d, const char *key, size_t klen, const void *val, size_t vlen);
/* Returns 1 if removed. */
int dict_del(dict *d, const char *key, size_t klen);
/* Visit some buckets from cursor; returns the next cursor (0 = done).
 * count is a hint of elements to visit. fn must not modify the dict. */
typedef void (*dict_scan_fn)(void *arg, const dict_entry *e);
uint64_t dict_scan(const dict *d, uint64_t cursor, long count, dict_scan_fn fn, void *arg);
/* A uniformly random entry (NULL when empty). */
dict_entry *dict_random(const dict *d, uint64_t rnd);
/* Iterate every entry (stop early when fn returns nonzero). fn must not
 * modify the dict. */
typedef int (*dict_iter_fn)(void *arg, const dict_entry *e);
void dict_foreach(const dict *d, dict_iter_fn fn, void *arg);
/* Visit every entry as (key, value bytes); a set's value is (NULL, 0). The
 * shape of object.h's obj_elem_fn, so hashes and sets pass it through. */
typedef void (*dict_pair_fn)(void *arg, const char *key, size_t klen, const char *val,
                             size_t vlen);
void dict_foreach_pair(const dict *d, dict_pair_fn fn, void *arg);
/* Store a pointer to every entry in out[] (room for dict_size(d)); returns
 * the end of what was written. */
const dict_entry **dict_entries(const dict *d, const dict_entry **out);
/* count distinct entries chosen uniformly at random (count <= size) into
 * out[] (HRANDFIELD, SRANDMEMBER, SPOP with a count). rnd supplies the
 * randomness, so the dict stays free of any seed of its own. */
void dict_pick_distinct(const dict *d, size_t count, const dict_entry **out,
                        uint64_t (*rnd)(void));

#endif
