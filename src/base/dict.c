/* dict.c -- the string-keyed hash table behind hashes, sets and zsets.
 *
 * Layout: a power-of-two array of bucket chains. Each entry is ONE
 * allocation: the chain link, the full 64-bit hash, the public dict_entry,
 * then the key bytes and the value bytes. The table doubles when it holds as
 * many entries as buckets and halves when it falls under 1/8 full, all at
 * once (no incremental rehash: the owning shard lock is held anyway, and a
 * collection large enough for that to matter is rare).
 *
 * Scanning uses a reverse-binary cursor: the cursor's bits are incremented
 * from the most significant bit of the mask downwards. Between two calls the
 * table may double or halve; because bucket i of a table of size 2^k splits
 * into buckets i and i + 2^k of the doubled table, and both of those come
 * after (or at) the cursor in reverse-binary order, every element present
 * for the whole scan is visited at least once. Shrinking can visit an
 * element twice, never miss one.
 *
 * Uniform random picks: small tables are walked (pick the n-th entry);
 * larger ones use rejection sampling: choose a bucket and a position below
 * an upper bound of the longest chain; a hit is accepted, a miss retried.
 * Every entry then has the same chance per trial. The bound is exact after
 * each resize and only grows with inserts (deletes leave it a valid upper
 * bound). */
#include <stdlib.h>
#include <string.h>
#include "dict.h"
#include "hash.h"

#define DICT_MIN_BUCKETS 4
#define DICT_WALK_RANDOM 128   /* at most this many entries: pick by walking */

typedef struct dnode {
    struct dnode *next;
    uint64_t hash;
    size_t alloc;        /* bytes of this allocation (memory accounting) */
    dict_entry e;
    char data[];         /* key bytes, then value bytes */
} dnode;

struct dict {
    dnode **table;
    uint64_t mask;       /* buckets - 1 */
    size_t size;
    size_t maxchain;     /* upper bound of the longest chain */
    size_t node_bytes;   /* sum of dnode allocations */
};

static uint64_t dhash(const char *key, size_t klen) {
    return hash_key(0x5e7u, key, klen);
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n, sz);
    if (!p) abort();
    return p;
}

dict *dict_new(void) {
    dict *d = xcalloc(1, sizeof(*d));
    d->table = xcalloc(DICT_MIN_BUCKETS, sizeof(dnode *));
    d->mask = DICT_MIN_BUCKETS - 1;
    return d;
}

void dict_free(dict *d) {
    if (!d) return;
    for (uint64_t i = 0; i <= d->mask; i++) {
        dnode *n = d->table[i];
        while (n) {
            dnode *next = n->next;
            free(n);
            n = next;
        }
    }
    free(d->table);
    free(d);
}

size_t dict_size(const dict *d) { return d->size; }

size_t dict_mem_bytes(const dict *d) {
    return sizeof(*d) + (size_t)(d->mask + 1) * sizeof(dnode *) + d->node_bytes;
}

/* Move every node into a table of `buckets` buckets (a power of two). */
static void dict_resize(dict *d, uint64_t buckets) {
    dnode **nt = xcalloc((size_t)buckets, sizeof(dnode *));
    size_t *len = NULL;
    uint64_t nmask = buckets - 1;
    size_t maxchain = 0;
    len = xcalloc((size_t)buckets, sizeof(size_t));
    for (uint64_t i = 0; i <= d->mask; i++) {
        dnode *n = d->table[i];
        while (n) {
            dnode *next = n->next;
            uint64_t b = n->hash & nmask;
            n->next = nt[b];
            nt[b] = n;
            if (++len[b] > maxchain) maxchain = len[b];
            n = next;
        }
    }
    free(len);
    free(d->table);
    d->table = nt;
    d->mask = nmask;
    d->maxchain = maxchain;
}

static dnode **find_link(const dict *d, const char *key, size_t klen, uint64_t h) {
    dnode **link = &d->table[h & d->mask];
    while (*link) {
        dnode *n = *link;
        if (n->hash == h && n->e.klen == klen && (klen == 0 || memcmp(n->e.key, key, klen) == 0))
            return link;
        link = &n->next;
    }
    return link;
}

dict_entry *dict_find(const dict *d, const char *key, size_t klen) {
    dnode **link = find_link(d, key, klen, dhash(key, klen));
    return *link ? &(*link)->e : NULL;
}

static dnode *node_new(const char *key, size_t klen, const void *val, size_t vlen, uint64_t h) {
    size_t alloc = sizeof(dnode) + klen + vlen;
    dnode *n = malloc(alloc);
    if (!n) abort();
    n->next = NULL;
    n->hash = h;
    n->alloc = alloc;
    if (klen) memcpy(n->data, key, klen);
    if (vlen) memcpy(n->data + klen, val, vlen);
    n->e.key = n->data;
    n->e.klen = klen;
    n->e.val = val ? (void *)(n->data + klen) : NULL;
    n->e.vlen = val ? vlen : 0;
    n->e.score = 0;
    return n;
}

int dict_set(dict *d, const char *key, size_t klen, const void *val, size_t vlen) {
    uint64_t h = dhash(key, klen);
    dnode **link = find_link(d, key, klen, h);
    if (!val) vlen = 0;
    if (*link) {
        dnode *old = *link;
        if (!val && !old->e.val) return 0;   /* set member: nothing to replace */
        if (val && old->e.val == old->data + klen && old->e.vlen == vlen) {
            /* Same size: overwrite in place (the entry stays where it is). */
            if (vlen) memmove(old->data + klen, val, vlen);
            return 0;
        }
        dnode *n = node_new(key, klen, val, vlen, h);
        n->e.score = old->e.score;
        n->next = old->next;
        *link = n;
        d->node_bytes += n->alloc;
        d->node_bytes -= old->alloc;
        free(old);
        return 0;
    }
    dnode *n = node_new(key, klen, val, vlen, h);
    uint64_t b = h & d->mask;
    n->next = d->table[b];
    d->table[b] = n;
    d->size++;
    d->node_bytes += n->alloc;
    size_t chain = 0;
    for (dnode *p = n; p; p = p->next) chain++;
    if (chain > d->maxchain) d->maxchain = chain;
    if (d->size > d->mask) dict_resize(d, (d->mask + 1) * 2);
    return 1;
}

int dict_del(dict *d, const char *key, size_t klen) {
    dnode **link = find_link(d, key, klen, dhash(key, klen));
    dnode *n = *link;
    if (!n) return 0;
    *link = n->next;
    d->size--;
    d->node_bytes -= n->alloc;
    free(n);
    if (d->mask + 1 > DICT_MIN_BUCKETS && d->size * 8 < d->mask + 1)
        dict_resize(d, (d->mask + 1) / 2);
    return 1;
}

static uint64_t rev64(uint64_t v) {
    v = ((v >> 1) & 0x5555555555555555ULL) | ((v & 0x5555555555555555ULL) << 1);
    v = ((v >> 2) & 0x3333333333333333ULL) | ((v & 0x3333333333333333ULL) << 2);
    v = ((v >> 4) & 0x0F0F0F0F0F0F0F0FULL) | ((v & 0x0F0F0F0F0F0F0F0FULL) << 4);
    v = ((v >> 8) & 0x00FF00FF00FF00FFULL) | ((v & 0x00FF00FF00FF00FFULL) << 8);
    v = ((v >> 16) & 0x0000FFFF0000FFFFULL) | ((v & 0x0000FFFF0000FFFFULL) << 16);
    return (v >> 32) | (v << 32);
}

uint64_t dict_scan(const dict *d, uint64_t cursor, long count, dict_scan_fn fn, void *arg) {
    long want = count > 0 ? count : 10;
    /* Bound the work on a sparse table: at most 10 buckets per element. */
    long buckets = want * 10;
    long seen = 0;
    uint64_t m = d->mask;
    if (d->size == 0) return 0;
    do {
        for (dnode *n = d->table[cursor & m]; n; n = n->next) {
            fn(arg, &n->e);
            seen++;
        }
        /* Increment the bits under the mask in reverse order. */
        cursor |= ~m;
        cursor = rev64(cursor);
        cursor++;
        cursor = rev64(cursor);
    } while (cursor != 0 && seen < want && --buckets > 0);
    return cursor;
}

/* splitmix64: a stream of numbers from the caller's one seed. */
static uint64_t next_rnd(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

dict_entry *dict_random(const dict *d, uint64_t rnd) {
    if (d->size == 0) return NULL;
    uint64_t s = rnd;
    if (d->size <= DICT_WALK_RANDOM) {
        size_t k = (size_t)(next_rnd(&s) % d->size);
        for (uint64_t i = 0; i <= d->mask; i++)
            for (dnode *n = d->table[i]; n; n = n->next)
                if (k-- == 0) return &n->e;
        return NULL; /* not reached */
    }
    size_t bound = d->maxchain ? d->maxchain : 1;
    for (;;) {
        uint64_t b = next_rnd(&s) & d->mask;
        size_t pos = (size_t)(next_rnd(&s) % bound);
        dnode *n = d->table[b];
        while (n && pos) {
            n = n->next;
            pos--;
        }
        if (n) return &n->e;
    }
}

void dict_foreach(const dict *d, dict_iter_fn fn, void *arg) {
    for (uint64_t i = 0; i <= d->mask; i++)
        for (dnode *n = d->table[i]; n; n = n->next)
            if (fn(arg, &n->e)) return;
}

void dict_foreach_pair(const dict *d, dict_pair_fn fn, void *arg) {
    for (uint64_t i = 0; i <= d->mask; i++)
        for (dnode *n = d->table[i]; n; n = n->next)
            fn(arg, n->e.key, n->e.klen, n->e.val, n->e.vlen);
}

const dict_entry **dict_entries(const dict *d, const dict_entry **out) {
    for (uint64_t i = 0; i <= d->mask; i++)
        for (dnode *n = d->table[i]; n; n = n->next) *out++ = &n->e;
    return out;
}

/* Many of them (a third or more): a partial Fisher-Yates shuffle of all
 * entries, one pass. Few: random draws, remembering the keys already taken
 * in a scratch dict, so the cost follows count rather than the size. */
void dict_pick_distinct(const dict *d, size_t count, const dict_entry **out,
                        uint64_t (*rnd)(void)) {
    size_t n = dict_size(d);
    if (count * 3 > n) {
        const dict_entry **all = malloc(sizeof(*all) * (n ? n : 1));
        if (!all) abort();
        dict_entries(d, all);
        for (size_t i = 0; i < count; i++) {
            size_t j = i + (size_t)(rnd() % (n - i));
            const dict_entry *t = all[i];
            all[i] = all[j];
            all[j] = t;
            out[i] = all[i];
        }
        free(all);
        return;
    }
    dict *seen = dict_new();
    size_t got = 0;
    while (got < count) {
        const dict_entry *e = dict_random(d, rnd());
        if (dict_set(seen, e->key, e->klen, NULL, 0)) out[got++] = e;
    }
    dict_free(seen);
}
