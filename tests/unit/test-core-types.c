/* test-core-types.c -- the collection types through src/types/ alone.
 *
 * Linked against the core's objects only (libcore.a, the Makefile's
 * test-core-% rule: nothing of redis-compat/), so it proves that the core
 * owns how each type is applied, snapshotted and loaded (issue 15).
 *
 * For each type (hash, list, set, zset, stream): random effect payloads,
 * encoded with the type's own encoders (type_*.h) and applied through
 * obj_apply_payload (what recovery and the live path apply with), checked
 * against a plain reference model; half way, the object's snapshot is
 * loaded into a second object (obj_encode_snapshot -> obj_load_snapshot,
 * recovery's path), the rest of the effects go to both, as recovery
 * replays a history's effects after its snapshot, and both end with the
 * model's elements (obj_class.elements). Lists, zsets and streams
 * snapshot in a fixed order, so their snapshots must also match byte for
 * byte; a damaged payload is refused whole. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "db.h"
#include "object.h"
#include "rbuf.h"
#include "type_hash.h"
#include "type_list.h"
#include "type_set.h"
#include "type_stream.h"
#include "type_zset.h"
#include "types.h"
#include "unit.h"

#define ROUNDS 400

static uint64_t rng = 88172645463325252ULL;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* ---------------- element lists: "<hex of a>=<hex of b>" strings ---------------- */

typedef struct strs { char **v; size_t n, cap; } strs;

static void hex(char *out, const char *p, size_t len) {
    for (size_t i = 0; i < len; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned char)p[i]);
    out[2 * len] = '\0';
}

static char *elem_str(const char *a, size_t alen, const char *b, size_t blen) {
    char *s = malloc(2 * alen + 2 + 2 * blen);
    if (!s) abort();
    hex(s, a, alen);
    s[2 * alen] = '=';
    hex(s + 2 * alen + 1, b, blen);
    return s;
}

static void strs_insert(strs *l, size_t at, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = realloc(l->v, l->cap * sizeof(char *));
        if (!l->v) abort();
    }
    memmove(l->v + at + 1, l->v + at, (l->n - at) * sizeof(char *));
    l->v[at] = s;
    l->n++;
}

static void strs_remove(strs *l, size_t at) {
    free(l->v[at]);
    memmove(l->v + at, l->v + at + 1, (l->n - at - 1) * sizeof(char *));
    l->n--;
}

static void strs_free(strs *l) {
    while (l->n) strs_remove(l, l->n - 1);
    free(l->v);
    l->v = NULL;
    l->cap = 0;
}

/* The index of the element named a (its part before '='), or -1. */
static long strs_find(const strs *l, const char *a, size_t alen) {
    char *key = elem_str(a, alen, NULL, 0);
    long at = -1;
    for (size_t i = 0; i < l->n && at < 0; i++)
        if (strncmp(l->v[i], key, 2 * alen + 1) == 0) at = (long)i;
    free(key);
    return at;
}

/* Forget the element named a, if the model has it. */
static void strs_del(strs *l, const char *a, size_t alen) {
    long i = strs_find(l, a, alen);
    if (i >= 0) strs_remove(l, (size_t)i);
}

/* a := b in a keyed model (hash, set, zset). */
static void strs_put(strs *l, const char *a, size_t alen, const char *b, size_t blen) {
    strs_del(l, a, alen);
    strs_insert(l, l->n, elem_str(a, alen, b, blen));
}

static int str_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static void elem_fn(void *arg, const char *a, size_t alen, const char *b, size_t blen) {
    strs *l = arg;
    strs_insert(l, l->n, elem_str(a, alen, b, blen));
}

/* Does o hold exactly the model's elements (in order when ordered)? */
static int same_elements(const robj *o, const strs *model, int ordered) {
    strs got = {0}, want = {0};
    obj_class_of(o->type)->elements(o->data, elem_fn, &got);
    for (size_t i = 0; i < model->n; i++) strs_insert(&want, i, strdup(model->v[i]));
    /* qsort's base must not be NULL, even for no elements (UBSan) */
    if (!ordered && got.n) qsort(got.v, got.n, sizeof(char *), str_cmp);
    if (!ordered && want.n) qsort(want.v, want.n, sizeof(char *), str_cmp);
    int same = got.n == want.n;
    for (size_t i = 0; same && i < got.n; i++) same = strcmp(got.v[i], want.v[i]) == 0;
    strs_free(&got);
    strs_free(&want);
    return same;
}

/* ---------------- effects per type ---------------- */

/* One command's effects for the type, added to ops; the model follows. */
typedef void (*gen_fn)(rbuf *ops, strs *model);

static size_t name(char *buf, const char *prefix, unsigned range) {
    return (size_t)snprintf(buf, 32, "%s%u", prefix, rnd(range));
}

static void gen_hash(rbuf *ops, strs *model) {
    char f[32], v[32];
    rbuf scratch;
    rbuf_init(&scratch);
    for (unsigned k = 1 + rnd(4); k > 0; k--) {
        size_t fl = name(f, "f", 40);
        if (rnd(4) == 0) {
            hash_op_del(ops, f, fl);
            strs_del(model, f, fl);
        } else {
            size_t vl = name(v, "v", 1000);
            hash_op_set(ops, &scratch, f, fl, v, vl);
            strs_put(model, f, fl, v, vl);
        }
    }
    rbuf_free(&scratch);
}

static void gen_set(rbuf *ops, strs *model) {
    char m[32];
    /* integers first (an intset), then names (a listpack, a hashtable) */
    const char *prefix = model->n < 20 ? "" : "m";
    if (model->n == 0) set_op_new(ops, 1, "1", 1);
    for (unsigned k = 1 + rnd(4); k > 0; k--) {
        size_t ml = name(m, prefix, 200);
        if (rnd(5) == 0) {
            set_op_rem(ops, m, ml);
            strs_del(model, m, ml);
        } else {
            set_op_add(ops, m, ml);
            strs_put(model, m, ml, NULL, 0);
        }
    }
}

static void gen_zset(rbuf *ops, strs *model) {
    char m[32], s[8];
    for (unsigned k = 1 + rnd(4); k > 0; k--) {
        size_t ml = name(m, "z", 200);
        if (rnd(5) == 0) {
            zset_op_del(ops, m, ml);
            strs_del(model, m, ml);
        } else {
            double score = (double)rnd(100) - 49.5;
            zset_op_set(ops, m, ml, score);
            zset_put_score(s, score);
            strs_put(model, m, ml, s, 8);
        }
    }
}

static void gen_list(rbuf *ops, strs *model) {
    char e[32];
    list_ops_begin(ops, model->n);
    for (unsigned k = 1 + rnd(3); k > 0; k--) {
        size_t el = name(e, "e", 1000), n = model->n;
        unsigned w = n ? rnd(10) : rnd(2);
        switch (w >= 7 ? w % 2 : w) {   /* pushes weigh most: the list grows */
        case 0:
            obj_op(ops, LOP_PUSH_HEAD, e, el);
            strs_insert(model, 0, elem_str(e, el, NULL, 0));
            break;
        case 1:
            obj_op(ops, LOP_PUSH_TAIL, e, el);
            strs_insert(model, n, elem_str(e, el, NULL, 0));
            break;
        case 2: {
            size_t c = 1 + rnd((unsigned)(n < 3 ? n : 3));
            int head = (int)rnd(2);
            list_op_u64(ops, head ? LOP_POP_HEAD : LOP_POP_TAIL, c);
            if (head)
                while (c--) strs_remove(model, 0);
            else
                while (c--) strs_remove(model, model->n - 1);
            break;
        }
        case 3: {
            size_t i = rnd((unsigned)n);
            list_op_u64_elem(ops, LOP_SET, i, e, el);
            strs_remove(model, i);
            strs_insert(model, i, elem_str(e, el, NULL, 0));
            break;
        }
        case 4: {
            size_t i = rnd((unsigned)n + 1);
            list_op_u64_elem(ops, LOP_INSERT, i, e, el);
            strs_insert(model, i, elem_str(e, el, NULL, 0));
            break;
        }
        case 5: {   /* remove two ascending indexes (or one) */
            char idx[16];
            size_t a = rnd((unsigned)n), b = a + 1 + rnd(3), k2 = b < n ? 2 : 1;
            for (int j = 0; j < 8; j++) idx[j] = (char)((uint64_t)a >> (8 * j));
            for (int j = 0; j < 8; j++) idx[8 + j] = (char)((uint64_t)b >> (8 * j));
            obj_op(ops, LOP_REMOVE, idx, 8 * k2);
            if (k2 == 2) strs_remove(model, b);
            strs_remove(model, a);
            break;
        }
        default: {  /* trim a few from either end: keep s .. s+c-1 */
            size_t s = rnd((unsigned)(n < 3 ? n : 3)), c = n - s;
            if (c > 1 && rnd(2)) c--;
            char p[16];
            for (int j = 0; j < 8; j++) p[j] = (char)((uint64_t)s >> (8 * j));
            for (int j = 0; j < 8; j++) p[8 + j] = (char)((uint64_t)c >> (8 * j));
            obj_op(ops, LOP_TRIM, p, 16);
            while (model->n > s + c) strs_remove(model, model->n - 1);
            for (size_t j = 0; j < s; j++) strs_remove(model, 0);
            break;
        }
        }
    }
}

/* The stream's model: its live entries as stream_elements presents them,
 * (id's 16 bytes, fields blob); the metadata and the groups are elements
 * too, so same_elements is not used for streams. */
static sid stream_last;
static unsigned stream_groups;

static void gen_stream(rbuf *ops, strs *model) {
    rbuf a;
    rbuf_init(&a);
    unsigned what = model->n ? rnd(6) : 0;
    if (what <= 2) {            /* XADD */
        stream_last.ms += 1 + rnd(3);
        stream_last.seq = rnd(2);
        stream_put_sid(&a, stream_last);
        char nn = (char)(rnd(8) == 0);
        rbuf_append(&a, &nn, 1);
        size_t at = a.len;
        char f[32];
        for (unsigned k = 1 + rnd(3); k > 0; k--) {
            size_t fl = name(f, "f", 5);
            obj_put_str(&a, f, fl);
            fl = name(f, "v", 1000);
            obj_put_str(&a, f, fl);
        }
        obj_op(ops, SOP_ADD, a.buf, a.len);
        strs_insert(model, model->n, elem_str(a.buf, 16, a.buf + at, a.len - at));
    } else if (what == 3) {     /* XDEL of a live entry: the model's i-th */
        size_t i = rnd((unsigned)model->n);
        sid id = {0, 0};
        for (int j = 0; j < 8; j++) {
            unsigned hi, lo;
            sscanf(model->v[i] + 2 * j, "%2x", &lo);
            sscanf(model->v[i] + 16 + 2 * j, "%2x", &hi);
            id.ms |= (uint64_t)lo << (8 * j);
            id.seq |= (uint64_t)hi << (8 * j);
        }
        stream_put_sid(&a, id);
        char xdel = 1;
        rbuf_append(&a, &xdel, 1);
        obj_op(ops, SOP_DEL, a.buf, a.len);
        strs_remove(model, i);
    } else {                    /* a group, a consumer, pending entries */
        char g[32];
        size_t gl = (size_t)snprintf(g, sizeof(g), "g%u", stream_groups++);
        stream_put_sid(&a, (sid){0, 0});
        stream_put_u64(&a, 0);
        rbuf_append(&a, g, gl);
        obj_op(ops, SOP_GCREATE, a.buf, a.len);
        a.len = 0;
        stream_put_u64(&a, 1234);
        obj_put_str(&a, g, gl);
        rbuf_append(&a, "alice", 5);
        obj_op(ops, SOP_CCREATE, a.buf, a.len);
        a.len = 0;
        obj_put_str(&a, g, gl);
        obj_put_str(&a, "alice", 5);
        stream_put_sid(&a, stream_last);
        stream_put_u64(&a, 5678);
        stream_put_u64(&a, 2);
        obj_op(ops, SOP_PELSET, a.buf, a.len);
    }
    rbuf_free(&a);
}

/* ---------------- the driver ---------------- */

static int apply(robj *o, const rbuf *ops) {
    rbuf p;
    rbuf_init(&p);
    rbuf_append(&p, &o->type, 1);
    rbuf_append(&p, ops->buf, ops->len);
    int rc = obj_apply_payload(o, p.buf, p.len);
    rbuf_free(&p);
    return rc;
}

static int same_snapshot(const robj *a, const robj *b) {
    rbuf x, y;
    rbuf_init(&x);
    rbuf_init(&y);
    obj_encode_snapshot(a, &x);
    obj_encode_snapshot(b, &y);
    int same = x.len == y.len && memcmp(x.buf, y.buf, x.len) == 0;
    rbuf_free(&x);
    rbuf_free(&y);
    return same;
}

static void test_type(int type, const char *tname, gen_fn gen, int ordered_snapshot) {
    const obj_class *k = obj_class_of(type);
    CHECK(k != NULL && strcmp(k->name, tname) == 0);
    if (!k) return;
    robj *o = obj_new(type, 0, "k", 1), *copy = NULL;
    strs model = {0};
    rbuf ops;
    int applied = 1, grew = 0;
    for (int r = 0; r < ROUNDS; r++) {
        rbuf_init(&ops);
        gen(&ops, &model);
        if (apply(o, &ops) != 0) applied = 0;
        if (copy && apply(copy, &ops) != 0) applied = 0;
        rbuf_free(&ops);
        if (model.n > 30) grew = 1;
        if (type != OBJ_STREAM && r % 50 == 0) CHECK(same_elements(o, &model, type == OBJ_LIST));
        if (r == ROUNDS / 2) {
            /* recovery: the snapshot loads back as a copy; effects follow */
            rbuf snap;
            rbuf_init(&snap);
            obj_encode_snapshot(o, &snap);
            copy = obj_new(type, 0, "k", 1);
            CHECK(obj_load_snapshot(copy, snap.buf, snap.len) == 0);
            rbuf_free(&snap);
        }
    }
    CHECK(applied);
    CHECK(grew);
    CHECK_EQ_LL(k->size(o->data), (long long)model.n);
    CHECK_EQ_LL(k->size(copy->data), (long long)model.n);
    if (type != OBJ_STREAM) {
        CHECK(same_elements(o, &model, type == OBJ_LIST));
        CHECK(same_elements(copy, &model, type == OBJ_LIST));
    }
    strs mine = {0}, theirs = {0};
    k->elements(o->data, elem_fn, &mine);
    k->elements(copy->data, elem_fn, &theirs);
    CHECK(same_elements(copy, &mine, type == OBJ_LIST));
    CHECK(mine.n == theirs.n);
    CHECK(strcmp(k->encoding(o->data), k->encoding(copy->data)) == 0);
    if (ordered_snapshot) CHECK(same_snapshot(o, copy));
    /* a payload with a damaged op frame is refused */
    rbuf bad;
    rbuf_init(&bad);
    obj_op(&bad, 1, "xyz", 3);
    bad.len--;
    CHECK(apply(o, &bad) == -1);
    rbuf_free(&bad);
    strs_free(&mine);
    strs_free(&theirs);
    strs_free(&model);
    obj_free(o);
    obj_free(copy);
}

int main(void) {
    config_init_defaults();   /* the encoding limits (hash-max-listpack-entries...) */
    types_init();
    test_type(OBJ_HASH, "hash", gen_hash, 0);
    test_type(OBJ_SET, "set", gen_set, 0);
    test_type(OBJ_ZSET, "zset", gen_zset, 1);
    test_type(OBJ_LIST, "list", gen_list, 1);
    test_type(OBJ_STREAM, "stream", gen_stream, 1);
    /* the stream's entries against its model: every live entry, in order */
    {
        robj *o = obj_new(OBJ_STREAM, 0, "s", 1);
        strs model = {0}, got = {0};
        stream_last = (sid){0, 0};
        for (int r = 0; r < 100; r++) {
            rbuf ops;
            rbuf_init(&ops);
            gen_stream(&ops, &model);
            CHECK(apply(o, &ops) == 0);
            rbuf_free(&ops);
        }
        obj_class_of(OBJ_STREAM)->elements(o->data, elem_fn, &got);
        size_t entries = 0;   /* the live entries among the elements, as the model has them */
        for (size_t i = 0; i < got.n; i++)
            for (size_t j = 0; j < model.n; j++) entries += strcmp(got.v[i], model.v[j]) == 0;
        CHECK_EQ_LL(entries, (long long)model.n);
        strs_free(&model);
        strs_free(&got);
        obj_free(o);
    }
    return UNIT_DONE("test-core-types");
}
