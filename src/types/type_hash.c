/* type_hash.c -- the hash type: its structure, effects and class (object.h).
 *
 * A hash is a dict (field -> value) in DRAM; its durable history is a chain
 * of effect entries (object.h). The effects are:
 *
 *   HASH_OP_SET  u32 field length (LE), field bytes, value bytes
 *   HASH_OP_DEL  field bytes
 *
 * Commands (redis-compat/t_hash.c) compute what they want to change, encode
 * it as those effects (hash_op_set, hash_op_del) and hand them to
 * db_obj_write, which logs them and applies them through hash_apply, the
 * same function recovery replays them with.
 *
 * The snapshot is: u8 "big" flag, u32 field count, then per field u32
 * length + bytes for the field and for the value.
 *
 * OBJECT ENCODING reports what Redis 7.2 would: "listpack" while the hash
 * has at most 512 fields and no field or value over 64 bytes, "hashtable"
 * once it has exceeded either (and from then on, as Redis never converts
 * back). The structure itself is always the dict.
 *
 * Field order: while the hash is "listpack"-sized, Redis keeps fields in
 * insertion order (an update keeps a field's place; a deleted field that
 * comes back goes last) and HGETALL/HKEYS/HVALS/HSCAN/HRANDFIELD list them
 * so; clients depend on it. Such a hash also keeps its field names in an
 * array in that order (order/nord), dropped for good when it turns "big".
 * Every walk goes through hash_foreach, which follows the array when there
 * is one. Order is state only apply and load change, so the live path,
 * recovery and replicas agree; the snapshot lists fields in that order so
 * a reload, COPY or RENAME keeps it (digests ignore order). */
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "dict.h"
#include "object.h"
#include "server.h"
#include "type_hash.h"

/* hash-max-listpack-entries / -value (CONFIG SET changes them for later writes) */
#define HASH_LP_ENTRIES ((size_t)server.cfg.hash_max_listpack_entries)
#define HASH_LP_VALUE ((size_t)server.cfg.hash_max_listpack_value)

static void order_free(hashobj *h) {
    for (size_t i = 0; i < h->nord; i++) free(h->order[i]);
    free(h->order);
    free(h->ordlen);
    h->order = NULL;
    h->ordlen = NULL;
    h->nord = h->capord = 0;
}

static void order_add(hashobj *h, const char *f, size_t flen) {
    if (h->nord == h->capord) {
        h->capord = h->capord ? h->capord * 2 : 8;
        h->order = realloc(h->order, h->capord * sizeof(*h->order));
        h->ordlen = realloc(h->ordlen, h->capord * sizeof(*h->ordlen));
        if (!h->order || !h->ordlen) abort();
    }
    char *copy = malloc(flen ? flen : 1);
    if (!copy) abort();
    memcpy(copy, f, flen);
    h->order[h->nord] = copy;
    h->ordlen[h->nord++] = (uint32_t)flen;
}

static void order_del(hashobj *h, const char *f, size_t flen) {
    for (size_t i = 0; i < h->nord; i++) {
        if (h->ordlen[i] != flen || memcmp(h->order[i], f, flen)) continue;
        free(h->order[i]);
        memmove(h->order + i, h->order + i + 1, (h->nord - i - 1) * sizeof(*h->order));
        memmove(h->ordlen + i, h->ordlen + i + 1, (h->nord - i - 1) * sizeof(*h->ordlen));
        h->nord--;
        return;
    }
}

/* Visit every field: insertion order while small, else the dict's. */
void hash_foreach(const hashobj *h, dict_iter_fn fn, void *arg) {
    if (h->big) {
        dict_foreach(h->d, fn, arg);
        return;
    }
    for (size_t i = 0; i < h->nord; i++) {
        const dict_entry *e = dict_find(h->d, h->order[i], h->ordlen[i]);
        if (e && fn(arg, e)) return;
    }
}

/* ---------------- the class ---------------- */

static void *hash_create(void) {
    hashobj *h = calloc(1, sizeof(*h));
    if (!h) abort();
    h->d = dict_new();
    return h;
}

static void hash_destroy(void *data) {
    hashobj *h = data;
    order_free(h);
    dict_free(h->d);
    free(h);
}

static void hash_put(hashobj *h, const char *f, size_t flen, const char *v, size_t vlen) {
    int added = dict_set(h->d, f, flen, v, vlen);
    if (flen > HASH_LP_VALUE || vlen > HASH_LP_VALUE || dict_size(h->d) > HASH_LP_ENTRIES)
        h->big = 1;
    if (h->big) order_free(h);
    else if (added) order_add(h, f, flen);
}

static int hash_apply(void *data, uint8_t op, const char *arg, size_t len) {
    hashobj *h = data;
    switch (op) {
    case HASH_OP_SET: {
        if (len < 4) return -1;
        uint32_t flen = obj_get_u32(arg);
        if (flen > len - 4) return -1;
        hash_put(h, arg + 4, flen, arg + 4 + flen, len - 4 - flen);
        return 0;
    }
    case HASH_OP_DEL:
        if (dict_del(h->d, arg, len) && !h->big) order_del(h, arg, len);
        return 0;
    default:
        return -1;
    }
}

static int snap_fn(void *arg, const dict_entry *e) {
    rbuf *out = arg;
    obj_put_str(out, e->key, e->klen);
    obj_put_str(out, e->val, e->vlen);
    return 0;
}

static void hash_snapshot(const void *data, rbuf *out) {
    const hashobj *h = data;
    unsigned char big = (unsigned char)h->big;
    rbuf_append(out, &big, 1);
    obj_put_u32(out, (uint32_t)dict_size(h->d));
    hash_foreach(h, snap_fn, out);
}

static void *hash_load(const char *buf, size_t len) {
    if (len < 5 || (unsigned char)buf[0] > 1) return NULL;
    hashobj *h = hash_create();
    h->big = buf[0];
    uint32_t n = obj_get_u32(buf + 1);
    size_t pos = 5;
    for (uint32_t i = 0; i < n; i++) {
        size_t flen, vlen;
        const char *f, *v;
        if (obj_get_str(buf, len, &pos, &f, &flen) || obj_get_str(buf, len, &pos, &v, &vlen)) goto bad;
        hash_put(h, f, flen, v, vlen);
    }
    if (pos != len || dict_size(h->d) != n) goto bad;
    return h;
bad:
    hash_destroy(h);
    return NULL;
}

static long long hash_size(const void *data) {
    return (long long)dict_size(((const hashobj *)data)->d);
}

static const char *hash_encoding(const void *data) {
    return ((const hashobj *)data)->big ? "hashtable" : "listpack";
}

static size_t hash_memory(const void *data) {
    const hashobj *h = data;
    size_t n = sizeof(hashobj) + dict_mem_bytes(h->d) +
               h->capord * (sizeof(char *) + sizeof(*h->ordlen));
    for (size_t i = 0; i < h->nord; i++) n += h->ordlen[i];
    return n;
}

typedef struct pair_ctx { obj_elem_fn fn; void *arg; } pair_ctx;

static int pair_fn(void *arg, const dict_entry *e) {
    pair_ctx *p = arg;
    p->fn(p->arg, e->key, e->klen, e->vlen ? e->val : "", e->vlen);
    return 0;
}

static void hash_elements(const void *data, obj_elem_fn fn, void *arg) {
    pair_ctx p = {fn, arg};
    hash_foreach(data, pair_fn, &p);
}

static const obj_class hash_class = {
    .name = "hash",
    .create = hash_create,
    .destroy = hash_destroy,
    .apply = hash_apply,
    .snapshot = hash_snapshot,
    .load = hash_load,
    .size = hash_size,
    .encoding = hash_encoding,
    .memory = hash_memory,
    .elements = hash_elements,
};

void hash_register(void) { obj_register(OBJ_HASH, &hash_class); }

/* ---------------- effects (for commands) ---------------- */

void hash_op_set(rbuf *ops, rbuf *scratch, const char *f, size_t flen, const char *v, size_t vlen) {
    scratch->len = 0;
    obj_put_str(scratch, f, flen);
    obj_op2(ops, HASH_OP_SET, scratch->buf, scratch->len, v, vlen);
}

void hash_op_set_head(rbuf *ops, const char *f, size_t flen, size_t vlen) {
    obj_op_head(ops, HASH_OP_SET, 4 + flen + vlen);
    obj_put_str(ops, f, flen);
}

void hash_op_del(rbuf *ops, const char *f, size_t flen) { obj_op(ops, HASH_OP_DEL, f, flen); }
