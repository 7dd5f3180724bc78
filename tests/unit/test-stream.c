/* test-stream.c -- the stream class (src/types/type_stream.c) as recovery
 * uses it: effects applied op by op, snapshot, load.
 *
 *  - a stream with deleted entries, several nodes, groups, consumers and
 *    pending entries snapshots to bytes that load back to the same
 *    snapshot and the same digest elements;
 *  - every truncation of a valid snapshot is refused (NULL);
 *  - effects that do not fit the state (an ID not above the last one, a
 *    pending entry for an unknown consumer, a deleted entry deleted again)
 *    are refused (-1), never applied;
 *  - random bit flips in snapshots never crash (run under make asan). */
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "commands.h"
#include "db.h"
#include "le.h"
#include "object.h"
#include "type_stream.h"
#include "types.h"

static void put_id(rbuf *b, uint64_t ms, uint64_t seq) { stream_put_sid(b, (sid){ms, seq}); }
static void put_str(rbuf *b, const char *s) { obj_put_str(b, s, strlen(s)); }

static int apply(const obj_class *k, void *d, uint8_t op, const rbuf *arg) {
    return k->apply(d, op, arg->buf, arg->len);
}

static int add(const obj_class *k, void *d, uint64_t ms, int new_node, const char *f, const char *v) {
    rbuf a;
    rbuf_init(&a);
    put_id(&a, ms, 1);
    unsigned char nn = (unsigned char)new_node;
    rbuf_append(&a, &nn, 1);
    put_str(&a, f);
    put_str(&a, v);
    int r = apply(k, d, SOP_ADD, &a);
    rbuf_free(&a);
    return r;
}

static int del(const obj_class *k, void *d, uint64_t ms, int xdel) {
    rbuf a;
    rbuf_init(&a);
    put_id(&a, ms, 1);
    unsigned char x = (unsigned char)xdel;
    rbuf_append(&a, &x, 1);
    int r = apply(k, d, SOP_DEL, &a);
    rbuf_free(&a);
    return r;
}

typedef struct elems { rbuf all; long n; } elems;
static void collect(void *arg, const char *a, size_t alen, const char *b, size_t blen) {
    elems *e = arg;
    obj_put_u32(&e->all, (uint32_t)alen);
    rbuf_append(&e->all, a, alen);
    obj_put_u32(&e->all, (uint32_t)blen);
    rbuf_append(&e->all, b, blen);
    e->n++;
}

static void build(const obj_class *k, void *d) {
    rbuf a;
    rbuf_init(&a);
    for (uint64_t i = 1; i <= 250; i++) CHECK_EQ_LL(add(k, d, i, i % 100 == 1, "f", "value"), 0);
    for (uint64_t i = 1; i <= 120; i++) CHECK_EQ_LL(del(k, d, i, 0), 0);   /* trim */
    CHECK_EQ_LL(del(k, d, 130, 1), 0);                                       /* XDEL */
    CHECK_EQ_LL(del(k, d, 130, 1), -1);                                      /* again */
    CHECK_EQ_LL(add(k, d, 250, 0, "f", "v"), -1);                            /* not above */
    /* groups */
    put_id(&a, 140, 1);
    stream_put_u64(&a, (uint64_t)-1);
    rbuf_append(&a, "grp", 3);
    CHECK_EQ_LL(apply(k, d, SOP_GCREATE, &a), 0);
    CHECK_EQ_LL(apply(k, d, SOP_GCREATE, &a), -1);                           /* exists */
    a.len = 0;
    put_id(&a, 0, 0);
    stream_put_u64(&a, 3);
    rbuf_append(&a, "other", 5);
    CHECK_EQ_LL(apply(k, d, SOP_GCREATE, &a), 0);
    a.len = 0;
    stream_put_u64(&a, 1234567);
    put_str(&a, "grp");
    rbuf_append(&a, "alice", 5);
    CHECK_EQ_LL(apply(k, d, SOP_CCREATE, &a), 0);
    a.len = 0;
    put_str(&a, "grp");
    put_str(&a, "bob");
    put_id(&a, 141, 1);
    stream_put_u64(&a, 99);
    stream_put_u64(&a, 1);
    CHECK_EQ_LL(apply(k, d, SOP_PELSET, &a), -1);                            /* no bob */
    a.len = 0;
    put_str(&a, "grp");
    put_str(&a, "alice");
    for (uint64_t i = 141; i <= 150; i++) {
        put_id(&a, i, 1);
        stream_put_u64(&a, 1000 + i);
        stream_put_u64(&a, i % 3 + 1);
    }
    CHECK_EQ_LL(apply(k, d, SOP_PELSET, &a), 0);
    a.len = 0;
    put_str(&a, "grp");
    put_id(&a, 145, 1);
    put_id(&a, 999, 1);       /* not pending: ignored */
    CHECK_EQ_LL(apply(k, d, SOP_PELDEL, &a), 0);
    a.len = 0;
    put_id(&a, 300, 0);
    put_id(&a, 130, 1);
    stream_put_u64(&a, 400);
    CHECK_EQ_LL(apply(k, d, SOP_META, &a), 0);
    CHECK_EQ_LL(apply(k, d, 77, &a), -1);                                    /* unknown op */
    rbuf_free(&a);
}

static void test_roundtrip(void) {
    const obj_class *k = obj_class_of(OBJ_STREAM);
    CHECK(k != NULL);
    void *d = k->create();
    build(k, d);
    CHECK_EQ_LL(k->size(d), 129);
    rbuf s1, s2;
    rbuf_init(&s1);
    rbuf_init(&s2);
    k->snapshot(d, &s1);
    void *l = k->load(s1.buf, s1.len);
    CHECK(l != NULL);
    if (l) {
        k->snapshot(l, &s2);
        CHECK(s1.len == s2.len && memcmp(s1.buf, s2.buf, s1.len) == 0);
        elems e1 = {{0}, 0}, e2 = {{0}, 0};
        rbuf_init(&e1.all);
        rbuf_init(&e2.all);
        k->elements(d, collect, &e1);
        k->elements(l, collect, &e2);
        CHECK(e1.n == e2.n && e1.all.len == e2.all.len && memcmp(e1.all.buf, e2.all.buf, e1.all.len) == 0);
        CHECK_EQ_LL(e1.n, 129 + 1 + 2);   /* entries, metadata, groups */
        rbuf_free(&e1.all);
        rbuf_free(&e2.all);
        /* The loaded copy goes on like the original: same next effects. */
        CHECK_EQ_LL(add(k, l, 301, 0, "g", "w"), 0);
        CHECK_EQ_LL(add(k, l, 300, 0, "g", "w"), -1);
        k->destroy(l);
    }
    /* Every truncation is refused. */
    int refused = 0;
    for (size_t n = 0; n < s1.len; n++) {
        void *t = k->load(s1.buf, n);
        if (!t) refused++;
        else k->destroy(t);
    }
    CHECK_EQ_LL(refused, (long long)s1.len);
    /* Bit flips never crash. */
    for (int i = 0; i < 3000; i++) {
        rbuf f;
        rbuf_init(&f);
        rbuf_append(&f, s1.buf, s1.len);
        size_t at = (size_t)rand() % f.len;
        f.buf[at] ^= (char)(1 << (rand() % 8));
        void *t = k->load(f.buf, f.len);
        if (t) k->destroy(t);
        rbuf_free(&f);
    }
    rbuf_free(&s1);
    rbuf_free(&s2);
    k->destroy(d);
}

int main(void) {
    types_init();
    test_roundtrip();
    return UNIT_DONE("test-stream");
}
