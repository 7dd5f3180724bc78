/* type_zset.c -- the sorted set type: its structure, effects and class
 * (object.h).
 *
 * A sorted set is a DRAM object (object.h) made of a dict (member -> score,
 * for ZSCORE and membership) and a skiplist with spans (zskiplist.c, for
 * order, ranks and ranges). Its durable history holds two element effects,
 * nothing else:
 *
 *   ZOP_SET  <8-byte score, little-endian IEEE bits><member>   member now has score
 *   ZOP_DEL  <member>                                          member removed
 *
 * Commands (redis-compat/t_zset.c) compute the effects of what they do
 * against the current contents, encode them (zset_op_set, zset_op_del)
 * and hand them to db_obj_write, which logs them and applies them through
 * zset_apply: the very function recovery replays them with.
 *
 * Encoding: Redis keeps small sets (<= 128 members, none longer than 64
 * bytes) as a listpack and converts them to a skiplist for good once either
 * limit is crossed. Rowan always uses the skiplist but reports the encoding
 * Redis would have ("listpack"/"skiplist") with the same one-way rule; the
 * flag is part of the snapshot. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "dict.h"
#include "le.h"
#include "object.h"
#include "server.h"
#include "type_zset.h"
#include "zskiplist.h"

/* zset-max-listpack-entries / -value (CONFIG SET changes them for later writes) */
#define ZSET_LISTPACK_ENTRIES ((size_t)server.cfg.zset_max_listpack_entries)
#define ZSET_LISTPACK_VALUE   ((size_t)server.cfg.zset_max_listpack_value)

#define ZSNAP_VERSION 1
#define ZSNAP_BIG     1

/* ---------------- the data structure ---------------- */

void zset_put_score(char *p, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    le_put_u64(p, u);
}

double zset_get_score(const char *p) {
    uint64_t u = le_get_u64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

zset *zset_create(void) {
    zset *z = malloc(sizeof(*z));
    if (!z) abort();
    z->d = dict_new();
    z->zsl = zsl_new();
    z->big = 0;
    return z;
}

zset *zset_create_result(void) {
    zset *z = zset_create();
    z->big = 1;
    return z;
}

void zset_destroy(void *data) {
    zset *z = data;
    if (!z) return;
    dict_free(z->d);
    zsl_free(z->zsl);
    free(z);
}

/* member := score (added or moved). A listpack stores a score as text
 * that reads back -0 as 0, so a small set never holds -0. */
void zset_set(zset *z, const char *m, size_t mlen, double score) {
    dict_entry *e = dict_find(z->d, m, mlen);
    if (mlen > ZSET_LISTPACK_VALUE || (!e && zset_len(z) + 1 > ZSET_LISTPACK_ENTRIES)) z->big = 1;
    if (!z->big && score == 0) score = 0.0;
    if (e) {
        if (e->score != score || signbit(e->score) != signbit(score)) {
            zsl_update_score(z->zsl, e->score, m, mlen, score);
            e->score = score;
        }
    } else {
        dict_set(z->d, m, mlen, NULL, 0);
        e = dict_find(z->d, m, mlen);
        e->score = score;
        zsl_insert(z->zsl, score, m, mlen);
    }
}

/* A computed result (ZUNIONSTORE...): see type_zset.h. */
void zset_finish_result(zset *z) {
    z->big = 0;
    for (zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n))
        if (n->mlen > ZSET_LISTPACK_VALUE) z->big = 1;
    if (zset_len(z) > ZSET_LISTPACK_ENTRIES) z->big = 1;
    if (z->big) return;
    for (zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n)) {
        if (n->score == 0) {
            n->score = 0.0;   /* same place in the order: -0 == 0 */
            dict_find(z->d, n->member, n->mlen)->score = 0.0;
        }
    }
}

int zset_remove(zset *z, const char *m, size_t mlen) {
    dict_entry *e = dict_find(z->d, m, mlen);
    if (!e) return 0;
    zsl_delete(z->zsl, e->score, m, mlen);
    dict_del(z->d, m, mlen);
    return 1;
}

int zset_score(const zset *z, const char *m, size_t mlen, double *score) {
    dict_entry *e = dict_find(z->d, m, mlen);
    if (!e) return 0;
    *score = e->score;
    return 1;
}

/* ---------------- the object class ---------------- */

static void *zset_create_v(void) { return zset_create(); }

/* Ops may come from a recovered log: check every length, refuse NaN. */
static int zset_apply(void *data, uint8_t op, const char *arg, size_t len) {
    zset *z = data;
    switch (op) {
    case ZOP_SET: {
        if (len < 8) return -1;
        double s = zset_get_score(arg);
        if (isnan(s)) return -1;
        zset_set(z, arg + 8, len - 8, s);
        return 0;
    }
    case ZOP_DEL:
        zset_remove(z, arg, len);
        return 0;
    default:
        return -1;
    }
}

/* u8 version, u8 flags, u64 count, then count times
 * <8-byte score><u32 member length><member>, in set order. */
static void zset_snapshot(const void *data, rbuf *out) {
    const zset *z = data;
    char hdr[10];
    hdr[0] = ZSNAP_VERSION;
    hdr[1] = z->big ? ZSNAP_BIG : 0;
    le_put_u64(hdr + 2, zset_len(z));
    rbuf_append(out, hdr, sizeof(hdr));
    for (const zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n)) {
        char el[12];
        zset_put_score(el, n->score);
        el[8] = (char)(n->mlen & 0xff);
        el[9] = (char)((n->mlen >> 8) & 0xff);
        el[10] = (char)((n->mlen >> 16) & 0xff);
        el[11] = (char)((n->mlen >> 24) & 0xff);
        rbuf_append(out, el, sizeof(el));
        rbuf_append(out, n->member, n->mlen);
    }
}

static void *zset_load(const char *buf, size_t len) {
    if (len < 10 || buf[0] != ZSNAP_VERSION || ((unsigned char)buf[1] & ~ZSNAP_BIG)) return NULL;
    uint64_t count = le_get_u64(buf + 2);
    size_t pos = 10;
    if (count > (len - pos) / 12) return NULL;
    zset *z = zset_create();
    if (buf[1] & ZSNAP_BIG) z->big = 1;
    for (uint64_t i = 0; i < count; i++) {
        if (len - pos < 12) goto bad;
        double s = zset_get_score(buf + pos);
        uint32_t mlen = obj_get_u32(buf + pos + 8);
        pos += 12;
        if (isnan(s) || mlen > len - pos) goto bad;
        if (dict_find(z->d, buf + pos, mlen)) goto bad;   /* duplicate member */
        zset_set(z, buf + pos, mlen, s);
        pos += mlen;
    }
    if (pos != len) goto bad;
    return z;
bad:
    zset_destroy(z);
    return NULL;
}

static long long zset_size(const void *data) { return (long long)zset_len(data); }

static const char *zset_encoding(const void *data) {
    return ((const zset *)data)->big ? "skiplist" : "listpack";
}

static size_t zset_memory(const void *data) {
    const zset *z = data;
    return sizeof(*z) + z->zsl->mem + dict_mem_bytes(z->d);
}

/* Scores by value: -0 and 0 are the same score (a big set may hold -0
 * where a small one holds 0). */
static void zset_elements(const void *data, obj_elem_fn fn, void *arg) {
    const zset *z = data;
    for (const zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n)) {
        char s[8];
        zset_put_score(s, n->score == 0 ? 0.0 : n->score);
        fn(arg, n->member, n->mlen, s, 8);
    }
}

static const obj_class zset_class = {
    .name = "zset",
    .create = zset_create_v,
    .destroy = zset_destroy,
    .apply = zset_apply,
    .snapshot = zset_snapshot,
    .load = zset_load,
    .size = zset_size,
    .encoding = zset_encoding,
    .memory = zset_memory,
    .elements = zset_elements,
};

void zset_register(void) { obj_register(OBJ_ZSET, &zset_class); }

/* ---------------- effects (for commands) ---------------- */

void zset_op_set(rbuf *ops, const char *m, size_t mlen, double score) {
    char s[8];
    zset_put_score(s, score);
    obj_op2(ops, ZOP_SET, s, 8, m, mlen);
}

void zset_op_del(rbuf *ops, const char *m, size_t mlen) { obj_op(ops, ZOP_DEL, m, mlen); }
