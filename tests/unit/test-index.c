/* test-index.c -- unit tests for the DRAM bucket hash index.
 *
 * Keys are integers; a reference is (serial << 6), and refkey[serial] says
 * which key it belongs to, standing in for the log entry the keyspace layer
 * would read. Random operations are checked against a plain array model,
 * with a well-mixed hash (hash_key) and with a deliberately terrible one
 * (few buckets, few tags) that builds long overflow chains.
 *
 * References are multiples of 64 (pool offsets, stored compactly), or, with
 * odd_refs, (serial << 6 | 1) for odd keys (wide items, like the keyspace's
 * DRAM objects). The index must never ask rehash_ref about a compact
 * reference: growth must not read the entry behind it (the pool). */
#include "hash.h"
#include "index.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* ---- deterministic PRNG (xorshift64*) ---- */
static uint64_t rng_state = 0x9E1F2D3C4B5A6978ULL;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* ---- references and keys ---- */
static uint32_t *refkey;     /* serial -> key */
static uint8_t *published;   /* serial -> handed to the index and returned */
static size_t nref, capref;
static int bad_hash;         /* use the terrible hash */
static int odd_refs;         /* odd keys get wide (odd) references */
static long rehash_unpublished;
static long rehash_compact;  /* rehash_ref asked about a compact reference */
static long rehash_wide;

static uint64_t new_ref(uint32_t key) {
    if (nref == 0)
        nref = 1; /* serial 0 would make reference 0, which means "none" */
    if (nref >= capref) {
        capref = capref ? capref * 2 : 1024;
        refkey = realloc(refkey, capref * sizeof *refkey);
        published = realloc(published, capref);
    }
    refkey[nref] = key;
    published[nref] = 0;
    return (uint64_t)nref++ << 6 | (odd_refs && (key & 1));
}

static uint64_t ref_serial(uint64_t ref) { return ref >> 6; }

static uint64_t key_hash(uint32_t key) {
    if (bad_hash)
        return (uint64_t)(key % 5) << 48 | (key % 3);
    char k[16];
    int n = snprintf(k, sizeof k, "key:%u", key);
    return hash_key(0, k, (size_t)n);
}

static int match_key(void *ctx, uint64_t ref) {
    return refkey[ref_serial(ref)] == *(uint32_t *)ctx;
}

static uint64_t rehash_ref(void *ctx, uint64_t ref) {
    if (!published[ref_serial(ref)])
        rehash_unpublished++;
    if (ref & 1)
        rehash_wide++;
    else
        rehash_compact++;
    return key_hash(refkey[ref_serial(ref)]);
}

static uint64_t put(rw_index *ix, uint32_t key, uint64_t ref) {
    uint64_t old = index_put(ix, key_hash(key), ref, match_key, &key);
    published[ref_serial(ref)] = 1;
    return old;
}

static uint64_t get(rw_index *ix, uint32_t key) {
    return index_get(ix, key_hash(key), match_key, &key);
}

static uint64_t del(rw_index *ix, uint32_t key) {
    return index_del(ix, key_hash(key), match_key, &key);
}

/* ---- full comparison with the model via index_foreach ---- */

typedef struct visit_check {
    const uint64_t *model;
    uint8_t *seen;
    size_t visits, wrong, dups;
} visit_check;

static int visit_compare(void *ctx, uint64_t ref) {
    visit_check *vc = ctx;
    uint32_t key = refkey[ref_serial(ref)];
    vc->visits++;
    if (vc->model[key] != ref)
        vc->wrong++;
    if (vc->seen[key]++)
        vc->dups++;
    return 0;
}

static int model_matches(rw_index *ix, const uint64_t *model, uint32_t nkeys) {
    visit_check vc = {model, calloc(nkeys, 1), 0, 0, 0};
    index_foreach(ix, visit_compare, &vc);
    size_t live = 0;
    for (uint32_t k = 0; k < nkeys; k++)
        live += model[k] != 0;
    free(vc.seen);
    return vc.wrong == 0 && vc.dups == 0 && vc.visits == live && index_count(ix) == live;
}

/* ---- random operations against the model ---- */

static void test_random_ops(int use_bad_hash, uint32_t nkeys, long nops) {
    bad_hash = use_bad_hash;
    rw_index *ix = index_new(rehash_ref, NULL);
    uint64_t *model = calloc(nkeys, sizeof *model);
    uint64_t *stale = calloc(nkeys, sizeof *stale); /* an older ref of the key */
    long bad_put = 0, bad_get = 0, bad_del = 0, bad_repl = 0, bad_rm = 0, bad_full = 0;
    for (long op = 0; op < nops; op++) {
        uint32_t key = (uint32_t)(rnd() % nkeys);
        unsigned r = (unsigned)(rnd() % 100);
        if (r < 40) {
            uint64_t ref = new_ref(key);
            if (put(ix, key, ref) != model[key])
                bad_put++;
            if (model[key])
                stale[key] = model[key];
            model[key] = ref;
        } else if (r < 60) {
            if (get(ix, key) != model[key])
                bad_get++;
        } else if (r < 72) {
            if (del(ix, key) != model[key])
                bad_del++;
            if (model[key])
                stale[key] = model[key];
            model[key] = 0;
        } else if (r < 86) {
            /* the cleaner's relocation: only if the item still holds old */
            uint64_t ref = new_ref(key);
            published[ref_serial(ref)] = 1;
            if (stale[key] && index_replace(ix, key_hash(key), stale[key], ref))
                bad_repl++;
            int done = model[key] ? index_replace(ix, key_hash(key), model[key], ref) : 0;
            if (done != (model[key] != 0))
                bad_repl++;
            if (done) {
                stale[key] = model[key];
                model[key] = ref;
            }
        } else if (r < 96) {
            if (stale[key] && index_remove_ref(ix, key_hash(key), stale[key]))
                bad_rm++;
            if (model[key]) {
                if (!index_remove_ref(ix, key_hash(key), model[key]))
                    bad_rm++;
                stale[key] = model[key];
                model[key] = 0;
            }
        } else {
            if (get(ix, key) != model[key])
                bad_get++;
        }
        if (op % 20000 == 0 && !model_matches(ix, model, nkeys))
            bad_full++;
    }
    CHECK_EQ_LL(bad_put, 0);
    CHECK_EQ_LL(bad_get, 0);
    CHECK_EQ_LL(bad_del, 0);
    CHECK_EQ_LL(bad_repl, 0);
    CHECK_EQ_LL(bad_rm, 0);
    CHECK_EQ_LL(bad_full, 0);
    CHECK(model_matches(ix, model, nkeys));
    CHECK_EQ_LL(rehash_unpublished, 0);

    /* delete everything: chains shrink back, nothing left behind */
    long bad_end = 0;
    for (uint32_t k = 0; k < nkeys; k++)
        if (del(ix, k) != model[k])
            bad_end++;
    CHECK_EQ_LL(bad_end, 0);
    CHECK_EQ_LL(index_count(ix), 0);
    memset(model, 0, nkeys * sizeof *model);
    CHECK(model_matches(ix, model, nkeys));
    index_free(ix);
    free(model);
    free(stale);
    bad_hash = 0;
}

/* ---- growth and memory ---- */

static void test_growth_and_memory(void) {
    enum { N = 2000000 };
    rw_index *ix = index_new(rehash_ref, NULL);
    size_t empty_bytes = index_mem_bytes(ix);
    CHECK(empty_bytes < 1024);
    uint64_t *refs = malloc(N * sizeof *refs);
    double sum = 0, lo = 1e9, hi = 0;
    int samples = 0;
    long missing = 0;
    for (uint32_t k = 0; k < N; k++) {
        refs[k] = new_ref(k);
        put(ix, k, refs[k]);
        if (k + 1 >= 100000 && (k + 1) % 10000 == 0) {
            double b = (double)index_mem_bytes(ix) / index_count(ix);
            sum += b;
            samples++;
            if (b < lo)
                lo = b;
            if (b > hi)
                hi = b;
        }
        if (k + 1 == 1000 || k + 1 == 100000 || k + 1 == 1000000)
            printf("test-index: %u items: %zu bytes, %.1f bytes/item\n", k + 1,
                   index_mem_bytes(ix), (double)index_mem_bytes(ix) / index_count(ix));
    }
    printf("test-index: bytes/item over 100k..2M items: mean %.1f, min %.1f, max %.1f\n",
           sum / samples, lo, hi);
    CHECK(sum / samples < 16); /* issue 14: at most 16 bytes per key */
    CHECK(hi < 16);
    CHECK_EQ_LL(index_count(ix), N);
    for (uint32_t k = 0; k < N; k++)
        if (get(ix, k) != refs[k])
            missing++;
    CHECK_EQ_LL(missing, 0);
    CHECK_EQ_LL(rehash_unpublished, 0);
    CHECK_EQ_LL(rehash_compact, 0); /* 2M inserts: growth never read an entry */

    index_clear(ix);
    CHECK_EQ_LL(index_count(ix), 0);
    CHECK_EQ_LL(get(ix, 5), 0);
    CHECK_EQ_LL(index_mem_bytes(ix), empty_bytes);
    put(ix, 5, refs[5]);
    CHECK_EQ_LL(get(ix, 5), refs[5]);
    index_free(ix);
    free(refs);
}

/* References use all 48 bits; tags and references do not bleed into each
 * other. Uses its own key->ref mapping since refs here are arbitrary. */
static uint64_t wide_refs[6];
static int wide_match(void *ctx, uint64_t ref) { return ref == *(uint64_t *)ctx; }
static uint64_t wide_rehash(void *ctx, uint64_t ref) {
    for (int i = 0; i < 6; i++)
        if (wide_refs[i] == ref)
            return hash_key(0, (const char *)&i, sizeof i);
    return 0;
}

static void test_wide_refs(void) {
    wide_refs[0] = INDEX_REF_MASK;
    wide_refs[1] = 1;
    wide_refs[2] = INDEX_REF_MASK - 63;
    wide_refs[3] = 0x800000000001ULL;
    wide_refs[4] = INDEX_COMPACT_LIMIT - 8; /* the largest compact one */
    wide_refs[5] = INDEX_COMPACT_LIMIT;     /* the smallest aligned wide one */
    rw_index *ix = index_new(wide_rehash, NULL);
    for (int i = 0; i < 6; i++)
        index_put(ix, hash_key(0, (const char *)&i, sizeof i), wide_refs[i], wide_match, &wide_refs[i]);
    for (int i = 0; i < 6; i++)
        CHECK_EQ_LL(index_get(ix, hash_key(0, (const char *)&i, sizeof i), wide_match, &wide_refs[i]),
                    wide_refs[i]);
    index_free(ix);
}

/* ---- scans ---- */

typedef struct scan_state {
    uint32_t *hits;          /* per key */
    rw_index *ix;
    int delete_visited;      /* visitor deletes what it sees */
    int insert_on_visit;     /* visitor inserts a new key every few visits */
    uint32_t next_new_key;
    long visits;
} scan_state;

static int scan_visit(void *ctx, uint64_t ref) {
    scan_state *st = ctx;
    uint32_t key = refkey[ref_serial(ref)];
    st->hits[key]++;
    st->visits++;
    if (st->delete_visited)
        index_remove_ref(st->ix, key_hash(key), ref);
    if (st->insert_on_visit && st->visits % 3 == 0) {
        uint32_t k = st->next_new_key++;
        put(st->ix, k, new_ref(k));
    }
    return 0;
}

/* Stable keys [0, nstable) are present throughout; between scan calls we add
 * many keys (the table doubles several times) and delete some of them. */
static void test_scan_under_growth(int use_bad_hash, uint32_t nstable, uint32_t nextra) {
    bad_hash = use_bad_hash;
    rw_index *ix = index_new(rehash_ref, NULL);
    uint32_t nkeys = nstable + nextra;
    scan_state st;
    memset(&st, 0, sizeof st);
    st.hits = calloc(nkeys + 1000000, sizeof *st.hits);
    st.ix = ix;
    for (uint32_t k = 0; k < nstable; k++)
        put(ix, k, new_ref(k));
    uint32_t added = nstable;
    uint64_t cursor = 0;
    int calls = 0;
    size_t buckets_before = index_mem_bytes(ix);
    do {
        long budget = 1 + (long)(rnd() % 40);
        long before = budget;
        long v0 = st.visits;
        cursor = index_scan(ix, cursor, &budget, scan_visit, &st);
        CHECK_EQ_LL(before - budget, st.visits - v0); /* one per item */
        calls++;
        for (int i = 0; i < 200 && added < nkeys; i++, added++)
            put(ix, added, new_ref(added));
        for (int i = 0; i < 50 && added > nstable; i++) {
            uint32_t k = nstable + (uint32_t)(rnd() % (added - nstable));
            del(ix, k);
        }
    } while (cursor != 0);
    long missed = 0;
    for (uint32_t k = 0; k < nstable; k++)
        if (!st.hits[k])
            missed++;
    CHECK_EQ_LL(missed, 0);
    if (!use_bad_hash) /* the bad hash finishes in a few calls: long chains */
        CHECK(index_mem_bytes(ix) > 4 * buckets_before); /* it really grew */
    printf("test-index: scan under growth (%s hash): %d calls, %u stable keys, "
           "%ld visits, table %zu -> %zu bytes\n", use_bad_hash ? "bad" : "good",
           calls, nstable, st.visits, buckets_before, index_mem_bytes(ix));

    /* a visitor that deletes what it visits empties the index in one scan */
    index_clear(ix);
    memset(st.hits, 0, (nkeys + 1000000) * sizeof *st.hits);
    for (uint32_t k = 0; k < nstable; k++)
        put(ix, k, new_ref(k));
    st.delete_visited = 1;
    st.visits = 0;
    cursor = 0;
    do {
        long budget = 7;
        cursor = index_scan(ix, cursor, &budget, scan_visit, &st);
    } while (cursor);
    CHECK_EQ_LL(index_count(ix), 0);
    CHECK_EQ_LL(st.visits, nstable);

    /* a visitor that inserts (growing the table mid-call) still sees every
     * key that was there from the start */
    memset(st.hits, 0, (nkeys + 1000000) * sizeof *st.hits);
    for (uint32_t k = 0; k < nstable; k++)
        put(ix, k, new_ref(k));
    st.delete_visited = 0;
    st.insert_on_visit = 1;
    st.next_new_key = nkeys;
    cursor = 0;
    do {
        long budget = 100;
        cursor = index_scan(ix, cursor, &budget, scan_visit, &st);
    } while (cursor);
    missed = 0;
    for (uint32_t k = 0; k < nstable; k++)
        if (!st.hits[k])
            missed++;
    CHECK_EQ_LL(missed, 0);
    CHECK_EQ_LL(rehash_unpublished, 0);

    free(st.hits);
    index_free(ix);
    bad_hash = 0;
}

/* An early stop from the visitor ends the call. */
static int stop_after_first(void *ctx, uint64_t ref) {
    (*(long *)ctx)++;
    return 1;
}

static void test_scan_edges(void) {
    rw_index *ix = index_new(rehash_ref, NULL);
    long budget = 10, n = 0;
    CHECK_EQ_LL(index_scan(ix, 0, &budget, stop_after_first, &n), 0); /* empty: done */
    CHECK_EQ_LL(n, 0);
    for (uint32_t k = 0; k < 1000; k++)
        put(ix, k, new_ref(k));
    budget = 1000;
    n = 0;
    uint64_t c = index_scan(ix, 0, &budget, stop_after_first, &n);
    CHECK_EQ_LL(n, 1);
    CHECK(c != 0);
    n = 0;
    index_foreach(ix, stop_after_first, &n);
    CHECK_EQ_LL(n, 1);

    /* a sparse table: one call does bounded work yet the scan completes */
    for (uint32_t k = 1; k < 1000; k++)
        del(ix, k);
    long visits = 0;
    int calls = 0;
    c = 0;
    do {
        budget = 1;
        c = index_scan(ix, c, &budget, stop_after_first, &visits);
        /* stop_after_first stops the call after the one item; harmless */
        calls++;
    } while (c);
    CHECK_EQ_LL(visits, 1);
    CHECK(calls > 1);
    index_free(ix);
}

/* ---- random ---- */

static void test_random_item(void) {
    rw_index *ix = index_new(rehash_ref, NULL);
    CHECK_EQ_LL(index_random(ix, 12345), 0);
    enum { K = 200 };
    uint64_t refs[K];
    for (uint32_t k = 0; k < K; k++) {
        refs[k] = new_ref(k);
        put(ix, k, refs[k]);
    }
    static unsigned hits[K];
    long wrong = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t r = index_random(ix, rnd());
        uint32_t key = refkey[ref_serial(r)];
        if (!r || key >= K || refs[key] != r)
            wrong++;
        else
            hits[key]++;
    }
    CHECK_EQ_LL(wrong, 0);
    unsigned minhits = ~0u, maxhits = 0;
    for (int k = 0; k < K; k++) {
        if (hits[k] < minhits)
            minhits = hits[k];
        if (hits[k] > maxhits)
            maxhits = hits[k];
    }
    CHECK(minhits > 100000 / K / 2 && maxhits < 100000 / K * 3 / 2); /* near uniform */
    printf("test-index: index_random over %d keys: hits per key min %u max %u (mean %d)\n",
           K, minhits, maxhits, 100000 / K);

    /* grow big, then delete all but one key: random still finds it */
    for (uint32_t k = K; k < 200000; k++)
        put(ix, k, new_ref(k));
    for (uint32_t k = 0; k < 200000; k++)
        if (k != 777)
            del(ix, k);
    CHECK_EQ_LL(index_count(ix), 1);
    wrong = 0;
    for (int i = 0; i < 100; i++)
        if (index_random(ix, rnd()) != get(ix, 777))
            wrong++;
    CHECK_EQ_LL(wrong, 0);
    index_free(ix);
}

int main(void) {
    test_random_ops(0, 50000, 2000000);
    test_random_ops(1, 3000, 300000);
    odd_refs = 1; /* wide items mixed in: splits ask for exactly those */
    test_random_ops(0, 50000, 1000000);
    CHECK(rehash_wide > 0);
    test_scan_under_growth(0, 5000, 300000);
    odd_refs = 0;
    CHECK_EQ_LL(rehash_compact, 0);
    test_wide_refs();
    test_growth_and_memory();
    test_scan_under_growth(0, 5000, 300000);
    test_scan_under_growth(1, 300, 3000);
    test_scan_edges();
    test_random_item();
    free(refkey);
    free(published);
    return UNIT_DONE("test-index");
}
