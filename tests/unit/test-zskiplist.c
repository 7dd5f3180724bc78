/* test-zskiplist.c -- the sorted-set skiplist against a sorted reference,
 * and the zset object class (src/types/type_zset.c) on good and damaged
 * input.
 *
 * Random inserts, deletes and score updates (with many equal scores, so the
 * member order matters), checked after every step against a sorted array:
 * the order both ways, ranks and the element at each rank, first/last in
 * random score and lex intervals, and the spans' bookkeeping. Then the
 * class: effects applied, snapshot -> load round trips, and every
 * truncation and many byte flips of a snapshot and of ops, which must be
 * refused or loaded, never crash. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "db.h"
#include "object.h"
#include "type_zset.h"
#include "unit.h"
#include "zskiplist.h"

typedef struct ref_el {
    double score;
    char m[16];
    size_t mlen;
} ref_el;

static ref_el ref[4096];
static size_t nref;
static uint64_t seed = 88172645463325252ULL;

static uint64_t rnd(void) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

static int ref_cmp(const void *a, const void *b) {
    const ref_el *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return zsl_cmp_member(x->m, x->mlen, y->m, y->mlen);
}

static long ref_find(const char *m, size_t mlen) {
    for (size_t i = 0; i < nref; i++)
        if (ref[i].mlen == mlen && memcmp(ref[i].m, m, mlen) == 0) return (long)i;
    return -1;
}

static void random_member(char *m, size_t *mlen) {
    /* Short members over a small alphabet: prefixes of each other occur. */
    size_t n = rnd() % 4;
    for (size_t i = 0; i < n; i++) m[i] = (char)('a' + rnd() % 3);
    *mlen = n;
    if (rnd() % 4 == 0) m[(*mlen)++] = (char)(rnd() % 256); /* binary byte */
}

static double random_score(void) {
    static const double special[] = {-1.0 / 0.0, 1.0 / 0.0, -0.5, 0.0, 2.5};
    if (rnd() % 10 == 0) return special[rnd() % 5];
    return (double)(rnd() % 8);
}

/* The whole structure against the reference. Returns failures found. */
static int verify(const zskiplist *zsl) {
    int bad = 0;
    if (zsl->length != nref) bad++;
    const zsl_node *n = zsl_first(zsl), *prev = NULL;
    for (size_t i = 0; i < nref; i++) {
        if (!n || n->score != ref[i].score || n->mlen != ref[i].mlen ||
            memcmp(n->member, ref[i].m, n->mlen) != 0) {
            bad++;
            break;
        }
        if (n->backward != prev) bad++;
        if (zsl_rank(zsl, n->score, n->member, n->mlen) != i + 1) bad++;
        if (zsl_at_rank(zsl, i + 1) != n) bad++;
        prev = n;
        n = zsl_next(n);
    }
    if (bad == 0 && n != NULL) bad++;
    if (zsl->tail != prev) bad++;
    if (zsl_at_rank(zsl, 0) || zsl_at_rank(zsl, nref + 1)) bad++;
    /* Each level's spans add up to the steps they cover. */
    for (int l = 0; l < zsl->level; l++) {
        unsigned long pos = 0;
        const zsl_node *x = zsl->header;
        while (x->level[l].forward) {
            pos += x->level[l].span;
            x = x->level[l].forward;
            if (zsl_rank(zsl, x->score, x->member, x->mlen) != pos) { bad++; break; }
        }
    }
    return bad;
}

static void check_score_ranges(const zskiplist *zsl, int rounds) {
    for (int k = 0; k < rounds; k++) {
        zrange_score r = {random_score(), random_score(), (int)(rnd() & 1), (int)(rnd() & 1)};
        long first = -1, last = -1;
        for (size_t i = 0; i < nref; i++) {
            if (zsl_score_gte_min(ref[i].score, &r) && zsl_score_lte_max(ref[i].score, &r)) {
                if (first < 0) first = (long)i;
                last = (long)i;
            }
        }
        zsl_node *f = zsl_first_in_score(zsl, &r), *l = zsl_last_in_score(zsl, &r);
        if (first < 0) {
            CHECK(f == NULL && l == NULL);
        } else {
            CHECK(f == zsl_at_rank(zsl, (unsigned long)first + 1));
            CHECK(l == zsl_at_rank(zsl, (unsigned long)last + 1));
        }
    }
}

/* Lex intervals are only meaningful with equal scores: a list of its own. */
static void test_lex(void) {
    zskiplist *zsl = zsl_new();
    nref = 0;
    for (int i = 0; i < 300; i++) {
        char m[16];
        size_t mlen;
        random_member(m, &mlen);
        if (ref_find(m, mlen) >= 0) continue;
        zsl_insert(zsl, 0, m, mlen);
        ref[nref].score = 0;
        memcpy(ref[nref].m, m, mlen);
        ref[nref].mlen = mlen;
        nref++;
    }
    qsort(ref, nref, sizeof(ref[0]), ref_cmp);
    CHECK_EQ_LL(verify(zsl), 0);
    for (int k = 0; k < 2000; k++) {
        char a[16], b[16];
        size_t alen, blen;
        random_member(a, &alen);
        random_member(b, &blen);
        zrange_lex r = {(int)(rnd() % 6 == 0 ? 1 + rnd() % 2 : ZLEX_VALUE),
                        (int)(rnd() % 6 == 0 ? 1 + rnd() % 2 : ZLEX_VALUE),
                        a, b, alen, blen, (int)(rnd() & 1), (int)(rnd() & 1)};
        long first = -1, last = -1;
        for (size_t i = 0; i < nref; i++) {
            if (zsl_lex_gte_min(ref[i].m, ref[i].mlen, &r) &&
                zsl_lex_lte_max(ref[i].m, ref[i].mlen, &r)) {
                if (first < 0) first = (long)i;
                last = (long)i;
            }
        }
        zsl_node *f = zsl_first_in_lex(zsl, &r), *l = zsl_last_in_lex(zsl, &r);
        if (first < 0) {
            CHECK(f == NULL && l == NULL);
        } else {
            CHECK(f == zsl_at_rank(zsl, (unsigned long)first + 1));
            CHECK(l == zsl_at_rank(zsl, (unsigned long)last + 1));
        }
    }
    zsl_free(zsl);
}

static void test_random_ops(void) {
    zskiplist *zsl = zsl_new();
    size_t empty_mem = zsl->mem;
    int failures = 0;
    nref = 0;
    for (int step = 0; step < 20000; step++) {
        char m[16];
        size_t mlen;
        random_member(m, &mlen);
        long at = ref_find(m, mlen);
        int op = (int)(rnd() % 10);
        if (at < 0 && op < 6) {
            double s = random_score();
            zsl_node *n = zsl_insert(zsl, s, m, mlen);
            failures += !(n && n->score == s && n->mlen == mlen);
            ref[nref].score = s;
            memcpy(ref[nref].m, m, mlen);
            ref[nref].mlen = mlen;
            nref++;
        } else if (at >= 0 && op < 4) {
            failures += zsl_delete(zsl, ref[at].score, m, mlen) != 1;
            ref[at] = ref[--nref];
        } else if (at >= 0) {
            double s = random_score();
            zsl_node *n = zsl_update_score(zsl, ref[at].score, m, mlen, s);
            failures += !(n && n->score == s);
            ref[at].score = s;
        } else {
            /* Deleting or updating something absent changes nothing. */
            failures += zsl_delete(zsl, 1.0, m, mlen) != 0;
            failures += zsl_update_score(zsl, 1.0, m, mlen, 2.0) != NULL;
            failures += zsl_rank(zsl, 1.0, m, mlen) != 0;
        }
        qsort(ref, nref, sizeof(ref[0]), ref_cmp);
        if (step % 50 == 0 || step > 19900) {
            failures += verify(zsl);
            check_score_ranges(zsl, 20);
        }
    }
    CHECK_EQ_LL(failures, 0);
    CHECK(nref > 0);
    /* Drain it; memory accounting returns to the empty list's. */
    while (nref) {
        size_t i = rnd() % nref;
        CHECK(zsl_delete(zsl, ref[i].score, ref[i].m, ref[i].mlen) == 1);
        ref[i] = ref[--nref];
    }
    qsort(ref, nref, sizeof(ref[0]), ref_cmp);
    CHECK_EQ_LL(verify(zsl), 0);
    CHECK(zsl_first(zsl) == NULL && zsl->tail == NULL && zsl->level == 1);
    CHECK_EQ_LL(zsl->mem, empty_mem);
    zsl_free(zsl);
}

/* A large list: ranks stay right and the levels spread as 1/4 each. */
static void test_large(void) {
    zskiplist *zsl = zsl_new();
    int failures = 0;
    char m[32];
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(m, sizeof(m), "m%06d", i);
        zsl_insert(zsl, (double)(i / 10), m, (size_t)n);
    }
    CHECK_EQ_LL(zsl->length, 100000);
    for (int i = 0; i < 100000; i += 997) {
        int n = snprintf(m, sizeof(m), "m%06d", i);
        failures += zsl_rank(zsl, (double)(i / 10), m, (size_t)n) != (unsigned long)i + 1;
        zsl_node *x = zsl_at_rank(zsl, (unsigned long)i + 1);
        failures += !(x && x->mlen == (size_t)n && memcmp(x->member, m, (size_t)n) == 0);
    }
    CHECK_EQ_LL(failures, 0);
    CHECK(zsl->level >= 5 && zsl->level <= ZSL_MAXLEVEL);
    zrange_score r = {100, 200, 1, 0};
    zsl_node *f = zsl_first_in_score(zsl, &r), *l = zsl_last_in_score(zsl, &r);
    CHECK(f && l);
    if (f && l) {
        CHECK_EQ_LL(zsl_rank(zsl, f->score, f->member, f->mlen), 1011);
        CHECK_EQ_LL(zsl_rank(zsl, l->score, l->member, l->mlen), 2010);
    }
    int level1 = 0;
    for (int i = 0; i < 100000; i++) level1 += zsl_random_level() == 1;
    CHECK(level1 > 72000 && level1 < 78000);
    zsl_free(zsl);
}

/* ---------------- the zset class ---------------- */

static void put_set_op(char *buf, double score, const char *m, size_t mlen) {
    uint64_t u;
    memcpy(&u, &score, 8);
    for (int i = 0; i < 8; i++) buf[i] = (char)(u >> (8 * i));
    memcpy(buf + 8, m, mlen);
}

static void test_zset_class(void) {
    zset_register();
    const obj_class *k = obj_class_of(OBJ_ZSET);
    CHECK(k != NULL);
    if (!k) return;
    CHECK(strcmp(k->name, "zset") == 0);
    void *z = k->create();
    char op[64];
    for (int i = 0; i < 200; i++) {
        char m[16];
        int n = snprintf(m, sizeof(m), "m%d", i % 150);
        put_set_op(op, (double)(i % 7) - 3.0, m, (size_t)n);
        CHECK(k->apply(z, 1, op, 8 + (size_t)n) == 0);
        if (i == 120) CHECK(strcmp(k->encoding(z), "listpack") == 0);
    }
    CHECK_EQ_LL(k->size(z), 150);
    CHECK(strcmp(k->encoding(z), "skiplist") == 0);
    CHECK(k->apply(z, 2, "m3", 2) == 0);
    CHECK(k->apply(z, 2, "absent", 6) == 0);
    CHECK_EQ_LL(k->size(z), 149);
    /* malformed ops */
    CHECK(k->apply(z, 99, "x", 1) == -1);
    CHECK(k->apply(z, 1, "short", 5) == -1);
    put_set_op(op, NAN, "a", 1);
    CHECK(k->apply(z, 1, op, 9) == -1);
    CHECK_EQ_LL(k->size(z), 149);
    CHECK(k->memory(z) > 149 * 16);

    /* snapshot round trip, byte for byte */
    rbuf a, b;
    rbuf_init(&a);
    rbuf_init(&b);
    k->snapshot(z, &a);
    void *z2 = k->load(a.buf, a.len);
    CHECK(z2 != NULL);
    if (z2) {
        k->snapshot(z2, &b);
        CHECK(a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0);
        CHECK(strcmp(k->encoding(z2), "skiplist") == 0);
        k->destroy(z2);
    }
    /* every truncation is refused; byte flips never crash */
    int refused = 0;
    for (size_t len = 0; len < a.len; len++) {
        void *t = k->load(a.buf, len);
        refused += t == NULL;
        if (t) k->destroy(t);
    }
    CHECK_EQ_LL(refused, (long long)a.len);
    char *copy = malloc(a.len);
    for (int i = 0; i < 3000; i++) {
        memcpy(copy, a.buf, a.len);
        size_t at = (size_t)(rnd() % a.len);
        copy[at] = (char)(copy[at] ^ (1 + rnd() % 255));
        void *t = k->load(copy, a.len);
        if (t) {
            CHECK(k->size(t) >= 0);
            k->destroy(t);
        }
    }
    /* a duplicated member is refused */
    void *d = k->create();
    put_set_op(op, 1.0, "dup", 3);
    k->apply(d, 1, op, 11);
    rbuf_free(&b);
    rbuf_init(&b);
    k->snapshot(d, &b);
    size_t one = b.len - 10;
    char *elem = malloc(one);
    memcpy(elem, b.buf + 10, one);
    rbuf_append(&b, elem, one);
    free(elem);
    b.buf[2] = 2;   /* count 2 */
    void *t = k->load(b.buf, b.len);
    CHECK(t == NULL);
    if (t) k->destroy(t);
    k->destroy(d);
    free(copy);
    rbuf_free(&a);
    rbuf_free(&b);
    k->destroy(z);
}

int main(void) {
    config_init_defaults();   /* the encoding limits (zset-max-listpack-entries...) */
    test_zset_class();
    test_random_ops();
    test_lex();
    test_large();
    return UNIT_DONE("test-zskiplist");
}
