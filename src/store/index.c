/* index.c -- per-shard DRAM bucket hash index (Rowan-KV §5.3).
 *
 * Structure: 64-byte buckets, each 7 items and a pointer to an overflow
 * bucket, addressed by linear hashing. An item is 0 when empty, else one of
 * (see index.h):
 *
 *   compact  1 | hash bits [0, 26) | ref >> 3 (37 bits)
 *   wide     0 | tag: hash bits [49, 64), never 0 (15 bits) | ref (48 bits)
 *
 * Linear hashing: with level L and split pointer p the table has 2^L + p
 * buckets; a key with hash h lives in the chain of bucket h mod 2^L, or
 * h mod 2^(L+1) when that is below p (its bucket was already split). Splitting
 * bucket p moves the items whose hash bit L is set to the new bucket
 * p + 2^L; when p reaches 2^L the level goes up and p restarts at 0. A compact
 * item's bit L is stored in it (for L < 26); a wide item's comes from the
 * caller's rehash_fn. Compared with doubling, the table grows one bucket at
 * a time, so its memory follows the key count (no half-empty table after a
 * doubling) and no insert pays for a rebuild of the whole table.
 *
 * Invariants:
 *  - Chains are dense: the items of a chain fill its slots front to back
 *    with no holes, and an overflow bucket exists only while it holds at
 *    least one item. Lookups stop at the first empty slot, inserts go there,
 *    and a deletion moves the chain's last item into the hole (freeing the
 *    last overflow bucket when it empties).
 *  - count <= 75% of the primary slots (7 * buckets) after every insert: an
 *    insert of a new key that would pass it first splits a bucket. A split
 *    never involves the item being inserted, so callers may insert a
 *    reference whose entry is not readable yet.
 *  - The table never shrinks (index_clear resets it to the initial size).
 *
 * Memory: primary buckets live in segments of SEG_BUCKETS (64 KiB), so
 * adding a bucket never moves the others; below one segment, segment 0 is
 * reallocated by doubling (small tables stay small). Overflow buckets come
 * from chunks (1 to 64 buckets, scaled to the table) with a free list
 * threaded through `next`; chunks are released only by index_clear/free.
 *
 * Scans use Redis's reverse-binary cursor: the cursor is a bucket number
 * whose bits are incremented from the top down. A bucket that covers the
 * hashes with low bits c (L bits, or L+1 once split) is visited whole and the
 * cursor then advances at that granularity. Growth only ever refines a
 * bucket (adds a top bit), and every bucket number with a given low-bit
 * prefix comes after the prefix in cursor order, so buckets already scanned
 * before a growth are not needed again and none still to come is skipped,
 * whatever mix of split and unsplit buckets each step sees. A scan copies a
 * bucket chain's references before calling the visitor, so the visitor may
 * modify the index (deletion moves items inside a chain, a split rebuilds
 * one) without corrupting the walk. */
#include "index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKET_ITEMS   7
#define INIT_LEVEL     2           /* 4 buckets */
#define SEG_SHIFT      10
#define SEG_BUCKETS    (1ULL << SEG_SHIFT)
#define CHUNK_MAX      64
#define RANDOM_SPAN    (3 * BUCKET_ITEMS)

#define COMPACT_BIT    (1ULL << 63)
#define C_OFF_BITS     37
#define C_OFF_MASK     ((1ULL << C_OFF_BITS) - 1)
#define C_HASH_BITS    26
#define C_HASH_MASK    ((1ULL << C_HASH_BITS) - 1)
#define W_TAG_SHIFT    48

_Static_assert(INDEX_COMPACT_LIMIT == 1ULL << (C_OFF_BITS + 3), "compact refs fill their bits");
_Static_assert(1 + C_HASH_BITS + C_OFF_BITS == 64, "a compact item is 64 bits");

typedef struct bucket {
    uint64_t item[BUCKET_ITEMS];
    struct bucket *next;
} __attribute__((aligned(64))) bucket;

_Static_assert(sizeof(bucket) == 64, "a bucket is one cache line");

struct rw_index {
    bucket **seg;            /* primary buckets, SEG_BUCKETS per segment */
    size_t nseg, capseg;
    uint64_t cap;            /* primary buckets allocated */
    unsigned level;          /* 2^level <= buckets < 2^(level+1) */
    uint64_t split;          /* next bucket to split: buckets = 2^level + split */
    size_t count;
    bucket *ovf_free;        /* free overflow buckets */
    bucket **chunks;         /* overflow chunks, for freeing */
    size_t nchunks, capchunks;
    size_t ovf_bytes;        /* bytes in overflow chunks */
    index_rehash_fn rehash;
    void *rehash_ctx;
};

static void oom(void) {
    fprintf(stderr, "rowan: FATAL: index out of memory\n");
    abort();
}

static void *xalloc(size_t align, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0)
        oom();
    return p;
}

static void *xrealloc(void *p, size_t size) {
    p = realloc(p, size);
    if (!p)
        oom();
    return p;
}

/* ---- items ---- */

static inline int is_compact_ref(uint64_t ref) {
    return (ref & 7) == 0 && ref < INDEX_COMPACT_LIMIT;
}

static inline uint64_t wide_tag(uint64_t hash) {
    uint64_t t = hash >> 49;
    return t ? t : 1;
}

static uint64_t make_item(uint64_t hash, uint64_t ref) {
    if (is_compact_ref(ref))
        return COMPACT_BIT | (hash & C_HASH_MASK) << C_OFF_BITS | ref >> 3;
    return wide_tag(hash) << W_TAG_SHIFT | (ref & INDEX_REF_MASK);
}

static inline uint64_t item_ref(uint64_t it) {
    return it & COMPACT_BIT ? (it & C_OFF_MASK) << 3 : it & INDEX_REF_MASK;
}

/* What an item's hash bits must be for a key with a given hash, in either
 * form: an item may be that key's iff its bits outside the reference equal
 * one of them. */
typedef struct probe { uint64_t ckey, wkey; } probe;

static inline probe probe_of(uint64_t hash) {
    return (probe){COMPACT_BIT | (hash & C_HASH_MASK) << C_OFF_BITS, wide_tag(hash) << W_TAG_SHIFT};
}

static inline int item_may_match(uint64_t it, const probe *p) {
    return (it & ~C_OFF_MASK) == p->ckey || (it & ~INDEX_REF_MASK) == p->wkey;
}

/* Bit `bit` of the hash of the item's key. */
static unsigned item_hash_bit(rw_index *ix, uint64_t it, unsigned bit) {
    if ((it & COMPACT_BIT) && bit < C_HASH_BITS)
        return (unsigned)(it >> (C_OFF_BITS + bit)) & 1;
    return (unsigned)(ix->rehash(ix->rehash_ctx, item_ref(it)) >> bit) & 1;
}

/* ---- table and overflow memory ---- */

static inline uint64_t nbuckets(const rw_index *ix) {
    return (1ULL << ix->level) + ix->split;
}

static inline bucket *bucket_at(const rw_index *ix, uint64_t b) {
    return &ix->seg[b >> SEG_SHIFT][b & (SEG_BUCKETS - 1)];
}

/* The bucket whose chain holds the key with this hash. */
static inline bucket *home_of(const rw_index *ix, uint64_t hash) {
    uint64_t b = hash & ((1ULL << ix->level) - 1);
    if (b < ix->split)
        b = hash & ((2ULL << ix->level) - 1);
    return bucket_at(ix, b);
}

static bucket *buckets_new(size_t n) {
    bucket *t = xalloc(64, n * sizeof(bucket));
    memset(t, 0, n * sizeof(bucket));
    return t;
}

static void table_init(rw_index *ix) {
    ix->capseg = 4;
    ix->seg = xrealloc(NULL, ix->capseg * sizeof *ix->seg);
    ix->nseg = 1;
    ix->cap = 1ULL << INIT_LEVEL;
    ix->seg[0] = buckets_new(ix->cap);
    ix->level = INIT_LEVEL;
    ix->split = 0;
    ix->count = 0;
}

static void table_release(rw_index *ix) {
    for (size_t i = 0; i < ix->nseg; i++)
        free(ix->seg[i]);
    free(ix->seg);
    ix->seg = NULL;
    ix->nseg = ix->capseg = 0;
    for (size_t i = 0; i < ix->nchunks; i++)
        free(ix->chunks[i]);
    free(ix->chunks);
    ix->chunks = NULL;
    ix->nchunks = ix->capchunks = 0;
    ix->ovf_free = NULL;
    ix->ovf_bytes = 0;
}

/* Make room for bucket number b (buckets are added one at a time). Existing
 * bucket addresses change only while everything fits segment 0. */
static void table_reserve(rw_index *ix, uint64_t b) {
    if (b < ix->cap)
        return;
    if (ix->cap < SEG_BUCKETS) {
        bucket *t = buckets_new(ix->cap * 2);
        memcpy(t, ix->seg[0], ix->cap * sizeof(bucket));
        free(ix->seg[0]);
        ix->seg[0] = t;
        ix->cap *= 2;
        return;
    }
    if (ix->nseg == ix->capseg) {
        ix->capseg *= 2;
        ix->seg = xrealloc(ix->seg, ix->capseg * sizeof *ix->seg);
    }
    ix->seg[ix->nseg++] = buckets_new(SEG_BUCKETS);
    ix->cap += SEG_BUCKETS;
}

/* Add a chunk of overflow buckets to the free list, sized ~1/8 of the table:
 * at the 75% load limit roughly a seventh of the buckets overflow. */
static void ovf_add_chunk(rw_index *ix) {
    size_t n = nbuckets(ix) / 8;
    if (n < 1)
        n = 1;
    if (n > CHUNK_MAX)
        n = CHUNK_MAX;
    if (ix->nchunks == ix->capchunks) {
        ix->capchunks = ix->capchunks ? ix->capchunks * 2 : 4;
        ix->chunks = xrealloc(ix->chunks, ix->capchunks * sizeof *ix->chunks);
    }
    bucket *c = buckets_new(n);
    ix->chunks[ix->nchunks++] = c;
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
    probe p = probe_of(hash);
    for (bucket *b = home_of(ix, hash); b; b = b->next) {
        for (int i = 0; i < BUCKET_ITEMS; i++) {
            uint64_t it = b->item[i];
            if (!it)
                return 0;
            if (item_may_match(it, &p) && match(ctx, item_ref(it))) {
                s->b = b;
                s->i = i;
                return 1;
            }
        }
    }
    return 0;
}

static int find_item(rw_index *ix, uint64_t hash, uint64_t item, slot *s) {
    for (bucket *b = home_of(ix, hash); b; b = b->next) {
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
    return nbuckets(ix) * BUCKET_ITEMS * 3 / 4;
}

/* Items of one chain, copied out (a scan's references, a split's items). */
typedef struct itembuf {
    uint64_t *v;
    size_t n, cap;
    uint64_t local[8 * BUCKET_ITEMS];
} itembuf;

static void itembuf_init(itembuf *ib) {
    ib->v = ib->local;
    ib->n = 0;
    ib->cap = sizeof ib->local / sizeof ib->local[0];
}

static void itembuf_push(itembuf *ib, uint64_t x) {
    if (ib->n == ib->cap) {
        size_t cap = ib->cap * 2;
        uint64_t *v = xrealloc(NULL, cap * sizeof *v);
        memcpy(v, ib->v, ib->n * sizeof *v);
        if (ib->v != ib->local)
            free(ib->v);
        ib->v = v;
        ib->cap = cap;
    }
    ib->v[ib->n++] = x;
}

static void itembuf_free(itembuf *ib) {
    if (ib->v != ib->local)
        free(ib->v);
}

/* Split the next bucket: its items whose hash bit `level` is set move to the
 * new bucket 2^level + split. */
static void split_one(rw_index *ix) {
    uint64_t half = 1ULL << ix->level;
    uint64_t from = ix->split, to = from + half;
    table_reserve(ix, to);
    bucket *home = bucket_at(ix, from), *dst = bucket_at(ix, to);

    itembuf ib;
    itembuf_init(&ib);
    for (bucket *b = home; b; b = b->next)
        for (int i = 0; i < BUCKET_ITEMS && b->item[i]; i++)
            itembuf_push(&ib, b->item[i]);
    for (bucket *b = home->next, *next; b; b = next) {
        next = b->next;
        ovf_put(ix, b);
    }
    memset(home, 0, sizeof *home);
    for (size_t k = 0; k < ib.n; k++)
        chain_append(ix, item_hash_bit(ix, ib.v[k], ix->level) ? dst : home, ib.v[k]);
    itembuf_free(&ib);

    if (++ix->split == half) {
        ix->level++;
        ix->split = 0;
    }
}

/* ---- public API ---- */

rw_index *index_new(index_rehash_fn rehash, void *rehash_ctx) {
    rw_index *ix = calloc(1, sizeof *ix);
    if (!ix)
        oom();
    ix->rehash = rehash;
    ix->rehash_ctx = rehash_ctx;
    table_init(ix);
    return ix;
}

void index_free(rw_index *ix) {
    if (!ix)
        return;
    table_release(ix);
    free(ix);
}

size_t index_count(const rw_index *ix) { return ix->count; }

size_t index_mem_bytes(const rw_index *ix) {
    return sizeof *ix + ix->cap * sizeof(bucket) + ix->capseg * sizeof *ix->seg + ix->ovf_bytes +
           ix->capchunks * sizeof *ix->chunks;
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
    while (ix->count + 1 > grow_limit(ix))
        split_one(ix);
    chain_append(ix, home_of(ix, hash), make_item(hash, ref));
    ix->count++;
    return 0;
}

uint64_t index_del(rw_index *ix, uint64_t hash, index_match_fn match, void *ctx) {
    slot s;
    if (!find_match(ix, hash, match, ctx, &s))
        return 0;
    uint64_t old = item_ref(s.b->item[s.i]);
    chain_remove(ix, home_of(ix, hash), s.b, s.i);
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
    chain_remove(ix, home_of(ix, hash), s.b, s.i);
    ix->count--;
    return 1;
}

void index_clear(rw_index *ix) {
    table_release(ix);
    table_init(ix);
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

/* The low-bit mask of the bucket that covers cursor c: L bits, or L+1 when
 * that bucket has been split. */
static uint64_t cursor_mask(const rw_index *ix, uint64_t c) {
    uint64_t low = (1ULL << ix->level) - 1;
    return (c & low) < ix->split ? low << 1 | 1 : low;
}

/* The scan loop shared by index_scan and index_foreach. Sets *stopped when
 * the visitor asked to stop. max_buckets bounds work on sparse tables. */
static uint64_t scan_run(rw_index *ix, uint64_t cursor, long *budget, uint64_t max_buckets,
                         index_visit_fn fn, void *ctx, int *stopped) {
    itembuf rb;
    itembuf_init(&rb);
    *stopped = 0;
    uint64_t visited = 0;
    do {
        uint64_t mask = cursor_mask(ix, cursor); /* the visitor may grow the table */
        rb.n = 0;
        for (const bucket *b = bucket_at(ix, cursor & mask); b; b = b->next)
            for (int i = 0; i < BUCKET_ITEMS && b->item[i]; i++)
                itembuf_push(&rb, item_ref(b->item[i]));
        for (size_t i = 0; i < rb.n && !*stopped; i++) {
            (*budget)--;
            if (fn(ctx, rb.v[i]))
                *stopped = 1;
        }
        cursor = cursor_next(cursor, mask);
        visited++;
    } while (cursor && !*stopped && *budget > 0 && visited < max_buckets);
    itembuf_free(&rb);
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
    uint64_t x = rnd, n = nbuckets(ix);
    /* Rejection sampling: a random bucket and a random position among the
     * first RANDOM_SPAN slots of its chain; retry if that position is
     * empty. Every item in those positions (all but the tails of unusually
     * long chains) is equally likely. The span covers three buckets since a
     * bucket not yet split at this level holds twice the average. At the
     * 75% load limit a try succeeds at least a quarter of the time, so 64
     * tries almost never all fail; on a table emptied by deletions, fall
     * back to walking forward from the last try to the first non-empty
     * chain. */
    for (int try = 0; try < 64; try++) {
        x = probe_mix(x);
        const bucket *b = bucket_at(ix, (x & 0xffffffffffULL) % n);
        uint64_t j = (x >> 40) % RANDOM_SPAN;
        for (; b && j >= BUCKET_ITEMS; j -= BUCKET_ITEMS)
            b = b->next;
        if (b && b->item[j])
            return item_ref(b->item[j]);
    }
    for (uint64_t k = 0; k < n; k++) {
        const bucket *home = bucket_at(ix, ((x & 0xffffffffffULL) + k) % n);
        size_t len = chain_len(home);
        if (len)
            return chain_pick(home, (size_t)((x >> 32) % len));
    }
    return 0;
}

/* A hint: start loading the home bucket of hash (index_prefetch, index.h). */
void index_prefetch(const rw_index *ix, uint64_t hash) {
    __builtin_prefetch(home_of(ix, hash), 0, 3);
}
