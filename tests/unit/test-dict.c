/* test-dict.c -- src/base/dict.c: the hash table behind hashes, sets and zsets.
 *
 *  - random inserts, replaces and deletes checked against a plain array
 *    model after every step (size, lookups, values, full iteration);
 *  - a scan visits every element present for the whole scan, while the
 *    table grows (and shrinks) between cursor calls;
 *  - dict_random is uniform, on small (walked) and large (rejection
 *    sampled) tables, also on a sparse table after many deletes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "dict.h"

static uint64_t rs = 88172645463325252ULL;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static int keyname(char *buf, int i) { return sprintf(buf, "key:%d", i); }

/* ---------------- random ops vs a model ---------------- */

#define MODEL_KEYS 600

typedef struct model {
    int present[MODEL_KEYS];
    char val[MODEL_KEYS][40];
    size_t vlen[MODEL_KEYS];
    size_t n;
    int walk_bad;
} model;

static int count_fn(void *arg, const dict_entry *e) {
    (void)e;
    (*(size_t *)arg)++;
    return 0;
}

static int check_fn(void *arg, const dict_entry *e) {
    model *m = arg;
    int i;
    char buf[32], kb[32];
    if (e->klen > 30) return m->walk_bad = 1;
    memcpy(kb, e->key, e->klen);
    kb[e->klen] = 0;
    if (sscanf(kb, "key:%d", &i) != 1 || i < 0 || i >= MODEL_KEYS) return m->walk_bad = 1;
    int l = keyname(buf, i);
    if ((size_t)l != e->klen || memcmp(buf, e->key, e->klen) != 0) return m->walk_bad = 1;
    if (!m->present[i] || m->vlen[i] != e->vlen || (e->vlen && memcmp(m->val[i], e->val, e->vlen) != 0))
        return m->walk_bad = 1;
    return 0;
}

static void test_model(void) {
    static model m;
    dict *d = dict_new();
    int bad = 0;
    memset(&m, 0, sizeof(m));
    for (int step = 0; step < 200000; step++) {
        int i = (int)(rnd() % MODEL_KEYS);
        char k[32];
        int kl = keyname(k, i);
        /* Phases: mostly inserts, then mostly deletes, so the table grows
         * and shrinks several times. */
        int insert_bias = (step / 20000) % 2 == 0 ? 70 : 30;
        if ((int)(rnd() % 100) < insert_bias) {
            char v[40];
            size_t vl = (size_t)(rnd() % 39);
            for (size_t j = 0; j < vl; j++) v[j] = (char)('a' + rnd() % 26);
            int r = dict_set(d, k, (size_t)kl, v, vl);
            if (r != !m.present[i]) bad++;
            if (!m.present[i]) m.n++;
            m.present[i] = 1;
            memcpy(m.val[i], v, vl);
            m.vlen[i] = vl;
        } else {
            int r = dict_del(d, k, (size_t)kl);
            if (r != m.present[i]) bad++;
            if (m.present[i]) m.n--;
            m.present[i] = 0;
        }
        if (dict_size(d) != m.n) bad++;
        dict_entry *e = dict_find(d, k, (size_t)kl);
        if ((e != NULL) != m.present[i]) bad++;
        if (e && (e->vlen != m.vlen[i] || (e->vlen && memcmp(e->val, m.val[i], e->vlen) != 0))) bad++;
        if (step % 997 == 0) {
            size_t cnt = 0;
            dict_foreach(d, count_fn, &cnt);
            if (cnt != m.n) bad++;
            size_t fails = 0;
            m.walk_bad = 0;
            dict_foreach(d, check_fn, &m);
            if (m.walk_bad) bad++;
            for (int j = 0; j < MODEL_KEYS; j++) {
                kl = keyname(k, j);
                if ((dict_find(d, k, (size_t)kl) != NULL) != m.present[j]) fails++;
            }
            if (fails) bad++;
        }
    }
    CHECK_EQ_LL(bad, 0);
    CHECK(dict_mem_bytes(d) > 0);
    /* Empty keys and values, and NULL values (sets). */
    CHECK_EQ_LL(dict_set(d, "", 0, "", 0), 1);
    CHECK(dict_find(d, "", 0) != NULL);
    CHECK_EQ_LL(dict_set(d, "", 0, "x", 1), 0);
    CHECK_EQ_LL(dict_find(d, "", 0)->vlen, 1);
    CHECK_EQ_LL(dict_del(d, "", 0), 1);
    CHECK_EQ_LL(dict_set(d, "member", 6, NULL, 0), 1);
    CHECK(dict_find(d, "member", 6)->val == NULL);
    CHECK_EQ_LL(dict_set(d, "member", 6, NULL, 0), 0);
    /* Binary keys: a NUL inside, and keys that differ only in length. */
    CHECK_EQ_LL(dict_set(d, "a\0b", 3, "1", 1), 1);
    CHECK_EQ_LL(dict_set(d, "a", 1, "2", 1), 1);
    CHECK_EQ_LL(dict_set(d, "a\0", 2, "3", 1), 1);
    CHECK(memcmp(dict_find(d, "a\0b", 3)->val, "1", 1) == 0);
    CHECK(memcmp(dict_find(d, "a\0", 2)->val, "3", 1) == 0);
    /* Score survives a value replace (zsets keep it in the entry). */
    dict_find(d, "a", 1)->score = 2.5;
    dict_set(d, "a", 1, "longer value", 12);
    CHECK(dict_find(d, "a", 1)->score == 2.5);
    dict_free(d);
    dict_free(NULL);
}

/* ---------------- scan ---------------- */

typedef struct scan_seen {
    unsigned char *seen;
    int max;
    long visits;
} scan_seen;

static void scan_fn(void *arg, const dict_entry *e) {
    scan_seen *s = arg;
    int i;
    char buf[32];
    memcpy(buf, e->key, e->klen < 31 ? e->klen : 31);
    buf[e->klen < 31 ? e->klen : 31] = 0;
    if (sscanf(buf, "key:%d", &i) == 1 && i >= 0 && i < s->max) s->seen[i] = 1;
    s->visits++;
}

/* Elements 0..base-1 stay for the whole scan; others come and go between
 * cursor calls (growth: mode 0, growth then shrink: mode 1). */
static int scan_under_change(int base, int extra, int mode, long count) {
    dict *d = dict_new();
    int max = base + extra;
    scan_seen s = {calloc((size_t)max, 1), max, 0};
    char k[32];
    for (int i = 0; i < base; i++) dict_set(d, k, (size_t)keyname(k, i), "v", 1);
    uint64_t cur = 0;
    int added = base, calls = 0;
    do {
        cur = dict_scan(d, cur, count, scan_fn, &s);
        calls++;
        if (mode == 0 || calls < 6) {
            for (int j = 0; j < extra / 8 && added < max; j++, added++)
                dict_set(d, k, (size_t)keyname(k, added), "v", 1);
        } else {
            for (int j = 0; j < extra / 4 && added > base; j++)
                dict_del(d, k, (size_t)keyname(k, --added));
        }
    } while (cur != 0 && calls < 1000000);
    int missing = 0;
    for (int i = 0; i < base; i++) missing += !s.seen[i];
    free(s.seen);
    dict_free(d);
    return missing;
}

static void test_scan(void) {
    /* A static table: exactly every element, each once. */
    dict *d = dict_new();
    char k[32];
    for (int i = 0; i < 1000; i++) dict_set(d, k, (size_t)keyname(k, i), NULL, 0);
    scan_seen s = {calloc(1000, 1), 1000, 0};
    uint64_t cur = 0;
    do cur = dict_scan(d, cur, 10, scan_fn, &s);
    while (cur != 0);
    int missing = 0;
    for (int i = 0; i < 1000; i++) missing += !s.seen[i];
    CHECK_EQ_LL(missing, 0);
    CHECK_EQ_LL(s.visits, 1000);
    free(s.seen);
    dict_free(d);

    /* Empty dict: cursor 0 at once. */
    d = dict_new();
    CHECK_EQ_LL(dict_scan(d, 0, 10, scan_fn, &(scan_seen){NULL, 0, 0}), 0);
    dict_free(d);

    CHECK_EQ_LL(scan_under_change(100, 5000, 0, 5), 0);
    CHECK_EQ_LL(scan_under_change(1000, 20000, 0, 10), 0);
    CHECK_EQ_LL(scan_under_change(3, 1000, 0, 1), 0);
    CHECK_EQ_LL(scan_under_change(200, 4000, 1, 3), 0);
    CHECK_EQ_LL(scan_under_change(50, 8000, 1, 1), 0);
}

/* ---------------- uniform random ---------------- */

/* Chi-square statistic of draws over n elements; returns it normalised
 * (statistic - df) / sqrt(2 df), ~N(0,1) for a uniform source. */
static double random_z(dict *d, int n, int draws_per) {
    long *hits = calloc((size_t)n, sizeof(long));
    long total = (long)n * draws_per;
    for (long t = 0; t < total; t++) {
        dict_entry *e = dict_random(d, rnd());
        int i = -1;
        char buf[32];
        memcpy(buf, e->key, e->klen);
        buf[e->klen] = 0;
        sscanf(buf, "key:%d", &i);
        if (i >= 0 && i < n) hits[i]++;
    }
    double chi = 0;
    for (int i = 0; i < n; i++) {
        double diff = (double)hits[i] - draws_per;
        chi += diff * diff / draws_per;
    }
    free(hits);
    return (chi - (n - 1)) / sqrt(2.0 * (n - 1));
}

static void test_random(void) {
    dict *d = dict_new();
    char k[32];
    CHECK(dict_random(d, 1) == NULL);
    for (int i = 0; i < 50; i++) dict_set(d, k, (size_t)keyname(k, i), NULL, 0);
    CHECK(fabs(random_z(d, 50, 2000)) < 6);
    for (int i = 50; i < 3000; i++) dict_set(d, k, (size_t)keyname(k, i), NULL, 0);
    CHECK(fabs(random_z(d, 3000, 200)) < 6);
    dict_free(d);

    /* Sparse: grow to 20000, delete down to 1000 (the first 1000 remain). */
    d = dict_new();
    for (int i = 0; i < 20000; i++) dict_set(d, k, (size_t)keyname(k, i), NULL, 0);
    for (int i = 1000; i < 20000; i++) dict_del(d, k, (size_t)keyname(k, i));
    CHECK_EQ_LL(dict_size(d), 1000);
    CHECK(fabs(random_z(d, 1000, 300)) < 6);
    /* A single element is always the one. */
    for (int i = 1; i < 1000; i++) dict_del(d, k, (size_t)keyname(k, i));
    int ok = 1;
    for (int t = 0; t < 100; t++) {
        dict_entry *e = dict_random(d, rnd());
        if (!e || e->klen != 5 || memcmp(e->key, "key:0", 5) != 0) ok = 0;
    }
    CHECK(ok);
    dict_free(d);
}

int main(void) {
    test_model();
    test_scan();
    test_random();
    return UNIT_DONE("test-dict");
}
