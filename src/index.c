/* index.c -- per-shard DRAM bucket hash index (Rowan-KV §5.3).
 *
 * Structure: a power-of-two array of 64-byte buckets, each 7 items and a
 * pointer to an overflow bucket. An item is tag << 48 | ref; 0 is empty. A
 * key with hash h lives in the chain starting at bucket h & mask.
 *
 * Invariants:
 *  - Chains are dense: the items of a chain fill its slots front to back
 *    with no holes, and an overflow bucket exists only while it holds at
 *    least one item. Lookups stop at the first empty slot, inserts go there,
 *    and a deletion moves the chain's last item into the hole (freeing the
 *    last overflow bucket when it empties).
 *  - count <= 75% of the primary slots (7 * buckets) after every insert: an
 *    insert of a new key that would pass it first doubles the table. Growth
 *    asks rehash_fn for every existing item's hash (the item holds only 16
 *    hash bits) but never for the item being inserted, so callers may insert
 *    a reference whose entry is not readable yet.
 *  - The table never shrinks (index_clear resets it to the initial size).
 *
 * Overflow buckets come from chunks (1 to 64 buckets, scaled to the table so
 * small indexes stay small) with a free list threaded through `next`; all
 * chunks are released when the table grows (the rebuilt table gets its own)
 * or is cleared.
 *
 * Scans use Redis's reverse-binary cursor: the cursor is a bucket number
 * whose bits are incremented from the top down. Because doubling the table
 * splits bucket b into b and b + old_size, i.e. adds a new top bit, every
 * bucket number with a given low-bit prefix is visited after the prefix, so
 * buckets already scanned before a growth are not needed again and none
 * still to come is skipped. A scan copies a bucket chain's references before
 * calling the visitor, so the visitor may modify the index (deletion moves
 * items inside a chain, growth rebuilds it) without corrupting the walk. */
#include "index.h"
#include "hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKET_ITEMS   7
#define INDEX_INIT_BUCKETS 4
#define CHUNK_MAX      64
#define TAG_SHIFT      48

typedef struct bucket {
    uint64_t item[BUCKET_ITEMS];
    struct bucket *next;
} __attribute__((aligned(64))) bucket;

_Static_assert(sizeof(bucket) == 64, "a bucket is one cache line");

struct rw_index {
    bucket *tab;
    uint64_t mask;           /* buckets - 1 */
    size_t count;
    bucket *ovf_free;        /* free overflow buckets */
    bucket **chunks;         /* overflow chunks, for freeing */
    size_t *chunk_len;
    size_t nchunks, capchunks;
    size_t ovf_bytes;        /* bytes in overflow chunks */
    index_rehash_fn rehash;
    void *rehash_ctx;
};

static void *xalloc(size_t align, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) {
        fprintf(stderr, "rowan: FATAL: index out of memory (%zu bytes)\n", size);
        abort();
    }
    return p;
}

static uint64_t make_item(uint64_t hash, uint64_t ref) {
    return (uint64_t)hash_tag(hash) << TAG_SHIFT | (ref & INDEX_REF_MASK);
}

static inline uint64_t item_ref(uint64_t it) { return it & INDEX_REF_MASK; }
static inline uint16_t item_tag(uint64_t it) { return (uint16_t)(it >> TAG_SHIFT); }

/* ---- table and overflow memory ---- */

static bucket *table_new(size_t nbuckets) {
    bucket *t = xalloc(64, nbuckets * sizeof(bucket));
    memset(t, 0, nbuckets * sizeof(bucket));
    return t;
}

static void ovf_release_all(rw_index *ix) {
    for (size_t i = 0; i < ix->nchunks; i++)
        free(ix->chunks[i]);
    free(ix->chunks);
    free(ix->chunk_len);
    ix->chunks = NULL;
    ix->chunk_len = NULL;
    ix->nchunks = ix->capchunks = 0;
    ix->ovf_free = NULL;
    ix->ovf_bytes = 0;
}

/* Add a chunk of overflow buckets to the free list, sized ~1/8 of the table:
 * at the 75% load limit roughly a seventh of the buckets overflow. */
static void ovf_add_chunk(rw_index *ix) {
    size_t n = (ix->mask + 1) / 8;
    if (n < 1)
        n = 1;
    if (n > CHUNK_MAX)
        n = CHUNK_MAX;
    if (ix->nchunks == ix->capchunks) {
        size_t cap = ix->capchunks ? ix->capchunks * 2 : 4;
        ix->chunks = realloc(ix->chunks, cap * sizeof *ix->chunks);
        ix->chunk_len = realloc(ix->chunk_len, cap * sizeof *ix->chunk_len);
        if (!ix->chunks || !ix->chunk_len) {
            fprintf(stderr, "rowan: FATAL: index out of memory\n");
            abort();
        }
        ix->capchunks = cap;
    }
    bucket *c = xalloc(64, n * sizeof(bucket));
    memset(c, 0, n * sizeof(bucket));
    ix->chunks[ix->nchunks] = c;
    ix->chunk_len[ix->nchunks++] = n;
    ix->ovf_bytes += n * sizeof(bucket);
    for (size_t i = 0; i < n; i++) {
        c[i].next = ix->ovf_free;
        ix->ovf_free = &c[i];
    }
}

static bucket *ovf_get(rw_index *ix) {
    if (!ix->ovf_free)
        ovf_add_chunk(ix);
    bucket *b = ix->ovf_free;
    ix->ovf_free = b->next;
    memset(b, 0, sizeof *b);
    return b;
}

static void ovf_put(rw_index *ix, bucket *b) {
    memset(b, 0, sizeof *b);
    b->next = ix->ovf_free;
    ix->ovf_free = b;
}

/* ---- chain primitives ---- */

/* Store item at the end of the chain starting at home. */
static void chain_append(rw_index *ix, bucket *home, uint64_t item) {
    bucket *b = home;
    for (;;) {
        for (int i = 0; i < BUCKET_ITEMS; i++) {
            if (!b->item[i]) {
                b->item[i] = item;
                return;
            }
        }
        if (!b->next)
            b->next = ovf_get(ix);
        b = b->next;
    }
}

/* Remove the item at (b, i) of the chain starting at home, keeping the chain
 * dense: its last item takes the hole. */
static void chain_remove(rw_index *ix, bucket *home, bucket *b, int i) {
    bucket *last = home, *prev = NULL;
    while (last->next) {
        prev = last;
        last = last->next;
    }
    int j = BUCKET_ITEMS - 1;
    while (j > 0 && !last->item[j])
        j--;
    b->item[i] = last->item[j];
    last->item[j] = 0;
    if (j == 0 && prev) {
        prev->next = NULL;
        ovf_put(ix, last);
    }
}

/* A slot located by a search. */
typedef struct slot { bucket *b; int i; } slot;

static int find_match(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx, slot *s) {
    uint16_t tag = hash_tag(hash);
    for (bucket *b = &ix->tab[hash & ix->mask]; b; b = b->next) {
        for (int i = 0; i < BUCKET_ITEMS; i++) {
            uint64_t it = b->item[i];
            if (!it)
                return 0;
            if (item_tag(it) == tag && match(ctx, item_ref(it))) {
                s->b = b;
                s->i = i;
                return 1;
            }
        }
    }
    return 0;
}

static int find_item(rw_index *ix, uint64_t hash, uint64_t item, slot *s) {
    for (bucket *b = &ix->tab[hash & ix->mask]; b; b = b->next) {
        for (int i = 0; i < BUCKET_ITEMS; i++) {
            uint64_t it = b->item[i];
            if (!it)
                return 0;
            if (it == item) {
                s->b = b;
                s->i = i;
                return 1;
            }
        }
    }
    return 0;
}

/* ---- growth ---- */

static size_t grow_limit(const rw_index *ix) {
    return (ix->mask + 1) * BUCKET_ITEMS * 3 / 4;
}

/* Double the table, placing every item by the hash its owner reports. */
static void grow(rw_index *ix) {
    size_t old_n = ix->mask + 1;
    bucket *old = ix->tab;
    bucket **old_chunks = ix->chunks;
    size_t *old_chunk_len = ix->chunk_len;
    size_t old_nchunks = ix->nchunks;

    ix->tab = table_new(old_n * 2);
    ix->mask = old_n * 2 - 1;
    ix->chunks = NULL;
    ix->chunk_len = NULL;
    ix->nchunks = ix->capchunks = 0;
    ix->ovf_free = NULL;
    ix->ovf_bytes = 0;

    for (size_t k = 0; k < old_n; k++) {
        for (bucket *b = &old[k]; b; b = b->next) {
            for (int i = 0; i < BUCKET_ITEMS && b->item[i]; i++) {
                uint64_t it = b->item[i];
                uint64_t h = ix->rehash(ix->rehash_ctx, item_ref(it));
                chain_append(ix, &ix->tab[h & ix->mask], it);
            }
        }
    }
    free(old);
    for (size_t i = 0; i < old_nchunks; i++)
        free(old_chunks[i]);
    free(old_chunks);
    free(old_chunk_len);
}

/* ---- public API ---- */

rw_index *index_new(index_rehash_fn rehash, void *rehash_ctx) {
    rw_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        fprintf(stderr, "rowan: FATAL: index out of memory\n");
        abort();
    }
    ix->rehash = rehash;
    ix->rehash_ctx = rehash_ctx;
    ix->tab = table_new(INDEX_INIT_BUCKETS);
    ix->mask = INDEX_INIT_BUCKETS - 1;
    return ix;
}

void index_free(rw_index *ix) {
    if (!ix)
        return;
    ovf_release_all(ix);
    free(ix->tab);
    free(ix);
}

size_t index_count(const rw_index *ix) { return ix->count; }

size_t index_mem_bytes(const rw_index *ix) {
    return sizeof *ix + (ix->mask + 1) * sizeof(bucket) + ix->ovf_bytes +
           ix->capchunks * (sizeof *ix->chunks + sizeof *ix->chunk_len);
}

uint64_t index_get(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx) {
    slot s;
    return find_match(ix, hash, match, ctx, &s) ? item_ref(s.b->item[s.i]) : 0;
}

uint64_t index_put(rw_index *ix, uint64_t hash, uint64_t ref, index_match_fn match, void *ctx) {
    slot s;
    if (find_match(ix, hash, match, ctx, &s)) {
        uint64_t old = item_ref(s.b->item[s.i]);
        s.b->item[s.i] = make_item(hash, ref);
        return old;
    }
    if (ix->count + 1 > grow_limit(ix))
        grow(ix);
    chain_append(ix, &ix->tab[hash & ix->mask], make_item(hash, ref));
    ix->count++;
    return 0;
}

uint64_t index_del(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx) {
    slot s;
    if (!find_match(ix, hash, match, ctx, &s))
        return 0;
    uint64_t old = item_ref(s.b->item[s.i]);
    chain_remove(ix, &ix->tab[hash & ix->mask], s.b, s.i);
    ix->count--;
    return old;
}

int index_replace(rw_index *ix, uint64_t hash, uint64_t old_ref, uint64_t new_ref) {
    slot s;
    if (!find_item(ix, hash, make_item(hash, old_ref), &s))
        return 0;
    s.b->item[s.i] = make_item(hash, new_ref);
    return 1;
}

int index_remove_ref(rw_index *ix, uint64_t hash, uint64_t ref) {
    slot s;
    if (!find_item(ix, hash, make_item(hash, ref), &s))
        return 0;
    chain_remove(ix, &ix->tab[hash & ix->mask], s.b, s.i);
    ix->count--;
    return 1;
}

void index_clear(rw_index *ix) {
    ovf_release_all(ix);
    free(ix->tab);
    ix->tab = table_new(INDEX_INIT_BUCKETS);
    ix->mask = INDEX_INIT_BUCKETS - 1;
    ix->count = 0;
}

/* ---- scans ---- */

static uint64_t rev64(uint64_t v) {
    v = (v >> 1 & 0x5555555555555555ULL) | (v & 0x5555555555555555ULL) << 1;
    v = (v >> 2 & 0x3333333333333333ULL) | (v & 0x3333333333333333ULL) << 2;
    v = (v >> 4 & 0x0f0f0f0f0f0f0f0fULL) | (v & 0x0f0f0f0f0f0f0f0fULL) << 4;
    return __builtin_bswap64(v);
}

/* Next cursor: increment the bits covered by mask, most significant first. */
static uint64_t cursor_next(uint64_t v, uint64_t mask) {
    v |= ~mask;
    v = rev64(v);
    v++;
    return rev64(v);
}

/* References of one chain, copied out so visitors may modify the index. */
typedef struct refbuf {
    uint64_t *v;
    size_t n, cap;
    uint64_t local[8 * BUCKET_ITEMS];
} refbuf;

static void refbuf_collect(refbuf *rb, const bucket *home) {
    rb->n = 0;
    for (const bucket *b = home; b; b = b->next) {
        for (int i = 0; i < BUCKET_ITEMS && b->item[i]; i++) {
            if (rb->n == rb->cap) {
                size_t cap = rb->cap * 2;
                uint64_t *v = malloc(cap * sizeof *v);
                if (!v) {
                    fprintf(stderr, "rowan: FATAL: index out of memory\n");
                    abort();
                }
                memcpy(v, rb->v, rb->n * sizeof *v);
                if (rb->v != rb->local)
                    free(rb->v);
                rb->v = v;
                rb->cap = cap;
            }
            rb->v[rb->n++] = item_ref(b->item[i]);
        }
    }
}

/* The scan loop shared by index_scan and index_foreach. Sets *stopped when
 * the visitor asked to stop. max_buckets bounds work on sparse tables. */
static uint64_t scan_run(rw_index *ix, uint64_t cursor, long *budget, uint64_t max_buckets,
                         index_visit_fn fn, void *ctx, int *stopped) {
    refbuf rb;
    rb.v = rb.local;
    rb.cap = sizeof rb.local / sizeof rb.local[0];
    *stopped = 0;
    uint64_t visited = 0;
    do {
        uint64_t mask = ix->mask; /* the visitor may grow the table */
        refbuf_collect(&rb, &ix->tab[cursor & mask]);
        for (size_t i = 0; i < rb.n && !*stopped; i++) {
            (*budget)--;
            if (fn(ctx, rb.v[i]))
                *stopped = 1;
        }
        cursor = cursor_next(cursor, mask);
        visited++;
    } while (cursor && !*stopped && *budget > 0 && visited < max_buckets);
    if (rb.v != rb.local)
        free(rb.v);
    return cursor;
}

uint64_t index_scan(rw_index *ix, uint64_t cursor, long *budget, index_visit_fn fn, void *ctx) {
    /* Like Redis, give up after ~10 empty buckets per requested item so a
     * sparse table cannot make one call walk the whole array. */
    long b = *budget > 0 ? *budget : 1;
    int stopped;
    return scan_run(ix, cursor, budget, (uint64_t)b * 10 + 16, fn, ctx, &stopped);
}

void index_foreach(rw_index *ix, index_visit_fn fn, void *ctx) {
    uint64_t cursor = 0;
    int stopped = 0;
    do {
        long budget = 1L << 40;
        cursor = scan_run(ix, cursor, &budget, UINT64_MAX, fn, ctx, &stopped);
    } while (cursor && !stopped);
}

/* ---- random ---- */

/* A different well-mixed number per probe, from the caller's one. */
static uint64_t probe_mix(uint64_t x) {
    x += 0x114929a1015df67bULL;
    x = (x ^ (x >> 31)) * 0x495b5e47d213b1ddULL;
    x = (x ^ (x >> 29)) * 0xa4875fcedb5d8765ULL;
    return x ^ (x >> 32);
}

static size_t chain_len(const bucket *home) {
    size_t n = 0;
    for (const bucket *b = home; b; b = b->next)
        for (int i = 0; i < BUCKET_ITEMS && b->item[i]; i++)
            n++;
    return n;
}

static uint64_t chain_pick(const bucket *home, size_t k) {
    for (const bucket *b = home; b; b = b->next) {
        if (k < BUCKET_ITEMS)
            return item_ref(b->item[k]);
        k -= BUCKET_ITEMS;
    }
    return 0;
}

uint64_t index_random(rw_index *ix, uint64_t rnd) {
    if (!ix->count)
        return 0;
    uint64_t x = rnd;
    /* Rejection sampling: a random bucket and a random position among the
     * first two buckets' worth of its chain; retry if that position is
     * empty. Every item in those positions (all but the tails of unusually
     * long chains) is equally likely. At the lowest load after a doubling a
     * probe succeeds ~19% of the time, so 64 probes almost never all fail;
     * on a table emptied by deletions, fall back to walking forward from the
     * last probe to the first non-empty chain. */
    for (int probe = 0; probe < 64; probe++) {
        x = probe_mix(x);
        const bucket *b = &ix->tab[x & ix->mask];
        uint64_t j = (x >> 40) % (2 * BUCKET_ITEMS);
        if (j >= BUCKET_ITEMS) {
            b = b->next;
            j -= BUCKET_ITEMS;
        }
        if (b && b->item[j])
            return item_ref(b->item[j]);
    }
    for (uint64_t k = 0; k <= ix->mask; k++) {
        const bucket *home = &ix->tab[(x + k) & ix->mask];
        size_t n = chain_len(home);
        if (n)
            return chain_pick(home, (size_t)((x >> 32) % n));
    }
    return 0;
}
