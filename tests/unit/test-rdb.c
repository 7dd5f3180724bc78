/* test-rdb.c -- redis-compat/rdb.c: Redis's CRC64, and DUMP payloads of
 * every collection type and encoding loading back to the same contents;
 * every truncation and random damage (under a recomputed checksum) is
 * refused or loads, never crashes (run it under ASan/UBSan). */
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "commands.h"
#include "db.h"
#include "le.h"
#include "object.h"
#include "rdb.h"
#include "types.h"

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* Order-independent fingerprint of a collection's elements. */
static void fp_fn(void *arg, const char *a, size_t alen, const char *b, size_t blen) {
    uint64_t *fp = arg;
    *fp += rdb_crc64(0, a, alen) * 31 + rdb_crc64(7, b ? b : "", blen);
}

static uint64_t fingerprint(const robj *o) {
    uint64_t fp = 0;
    obj_class_of(o->type)->elements(o->data, fp_fn, &fp);
    return fp;
}

static robj *build(int type, int n, int ints, int longvals) {
    robj *o = obj_new(type, 0, "k", 1);
    rbuf ops, arg;
    char t = (char)type;
    rbuf_init(&ops);
    rbuf_init(&arg);
    rbuf_append(&ops, &t, 1);
    if (type == OBJ_LIST) {  /* LOP_LEN 0 first: the list effects' rule */
        unsigned char z[8] = {0};
        obj_op(&ops, 1, z, 8);
    }
    for (int i = 0; i < n; i++) {
        char m[200];
        int ml = ints ? snprintf(m, sizeof(m), "%d", (i - n / 2) * 977)
                      : snprintf(m, sizeof(m), "m%d-%s", i, longvals ? "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" : "");
        arg.len = 0;
        switch (type) {
        case OBJ_HASH:
            obj_put_u32(&arg, (uint32_t)ml);
            rbuf_append(&arg, m, (size_t)ml);
            rbuf_append(&arg, m, (size_t)ml / 2);
            obj_op(&ops, 1, arg.buf, arg.len);
            break;
        case OBJ_SET:
            obj_op(&ops, 1, m, (size_t)ml);
            break;
        case OBJ_ZSET: {
            double s = (double)(i % 7) * 1.5 - 3;
            unsigned char d[8];
            uint64_t u;
            memcpy(&u, &s, 8);
            le_put_u64(d, u);
            rbuf_append(&arg, d, 8);
            rbuf_append(&arg, m, (size_t)ml);
            obj_op(&ops, 1, arg.buf, arg.len);
            break;
        }
        case OBJ_LIST:
            obj_op(&ops, 3, m, (size_t)ml);  /* LOP_PUSH_TAIL */
            break;
        }
    }
    CHECK_EQ_LL(obj_apply_payload(o, ops.buf, ops.len), 0);
    rbuf_free(&ops);
    rbuf_free(&arg);
    return o;
}

static void reseal(rbuf *p) {
    uint64_t crc = rdb_crc64(0, p->buf, p->len - 8);
    le_put_u64(p->buf + p->len - 8, crc);
}

/* Damage p in many ways; every result is refused or loads cleanly. */
static void torture(const rbuf *p) {
    rbuf d, s;
    rbuf_init(&d);
    rbuf_init(&s);
    for (size_t cut = 10; cut < p->len; cut += 1 + p->len / 200) {
        d.len = 0;
        rbuf_append(&d, p->buf, cut - 10);
        rbuf_append(&d, p->buf + p->len - 10, 10);
        reseal(&d);
        robj *o = NULL;
        s.len = 0;
        if (rdb_load_value(d.buf, d.len, &s, &o) > 0 && o) obj_free(o);
    }
    for (int i = 0; i < 300; i++) {
        d.len = 0;
        rbuf_append(&d, p->buf, p->len);
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++) d.buf[rnd() % (d.len - 10)] = (char)rnd();
        reseal(&d);
        CHECK_EQ_LL(rdb_verify_payload(d.buf, d.len), 0);
        robj *o = NULL;
        s.len = 0;
        if (rdb_load_value(d.buf, d.len, &s, &o) > 0 && o) obj_free(o);
    }
    rbuf_free(&d);
    rbuf_free(&s);
}

static void test_collection(int type, int n, int ints, int longvals) {
    robj *o = build(type, n, ints, longvals);
    db_val v = {.type = type, .obj = o};
    rbuf p, s;
    rbuf_init(&p);
    rbuf_init(&s);
    rdb_dump_value(&v, &p);
    CHECK_EQ_LL(rdb_verify_payload(p.buf, p.len), 0);
    robj *back = NULL;
    CHECK_EQ_LL(rdb_load_value(p.buf, p.len, &s, &back), type);
    CHECK(back != NULL);
    if (back) {
        const obj_class *k = obj_class_of(type);
        CHECK_EQ_LL(k->size(back->data), k->size(o->data));
        CHECK(fingerprint(back) == fingerprint(o));
        CHECK(strcmp(k->encoding(back->data), k->encoding(o->data)) == 0);
        obj_free(back);
    }
    /* a wrong checksum or a newer version is refused */
    p.buf[p.len - 1] ^= 1;
    CHECK_EQ_LL(rdb_verify_payload(p.buf, p.len), -1);
    p.buf[p.len - 1] ^= 1;
    p.buf[p.len - 10] = RDB_VERSION + 1;
    reseal(&p);
    CHECK_EQ_LL(rdb_verify_payload(p.buf, p.len), -1);
    p.buf[p.len - 10] = RDB_VERSION;
    reseal(&p);
    torture(&p);
    obj_free(o);
    rbuf_free(&p);
    rbuf_free(&s);
}

static void test_strings(void) {
    const char *vals[] = {"", "0", "-1", "127", "-128", "128", "32767", "-32769", "2147483647",
                          "2147483648", "-2147483648", "007", "+1", "hello", NULL};
    for (int i = 0; vals[i]; i++) {
        db_val v = {.type = OBJ_STRING, .ptr = vals[i], .len = strlen(vals[i])};
        rbuf p, s;
        robj *o = NULL;
        rbuf_init(&p);
        rbuf_init(&s);
        rdb_dump_value(&v, &p);
        CHECK_EQ_LL(rdb_verify_payload(p.buf, p.len), 0);
        CHECK_EQ_LL(rdb_load_value(p.buf, p.len, &s, &o), OBJ_STRING);
        CHECK(s.len == v.len && (v.len == 0 || memcmp(s.buf, v.ptr, v.len) == 0));
        torture(&p);
        rbuf_free(&p);
        rbuf_free(&s);
    }
}

int main(void) {
    types_init();
    CHECK(rdb_crc64(0, "123456789", 9) == 0xe9c6d914c4b8d9caULL);
    test_strings();
    for (int type = OBJ_LIST; type <= OBJ_HASH; type++) {
        test_collection(type, 5, 0, 0);
        test_collection(type, 5, 1, 0);
        test_collection(type, 300, 0, 0);
        test_collection(type, 1000, 1, 0);
        test_collection(type, 40, 0, 1);
    }
    return UNIT_DONE("test-rdb");
}
