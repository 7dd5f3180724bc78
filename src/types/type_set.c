/* type_set.c -- the set type: its structure, effects and class (object.h).
 *
 * A set is a dict of members (no values) in DRAM; its durable history is a
 * chain of effect entries (object.h). The effects are:
 *
 *   SET_OP_ADD  member bytes
 *   SET_OP_REM  member bytes
 *   SET_OP_ENC  u8: the encoding Redis would report is at least this one
 *
 * Commands (redis-compat/t_set.c) encode them with set_op_add, set_op_rem
 * and set_op_new and write them with db_obj_write, which applies them
 * through set_apply, the function recovery replays them with.
 *
 * The snapshot is: u8 encoding, u32 member count, then per member u32
 * length + bytes.
 *
 * OBJECT ENCODING follows Redis 7.2's conversions, tracked by apply (and
 * never reverted, as in Redis): a set starts as "intset" and stays one while
 * every member is an integer and it has at most 512 of them; a non-integer
 * member turns it into "listpack" if it had fewer than 128 members and the
 * member is at most 64 bytes, else "hashtable"; a listpack becomes a
 * hashtable past 128 members or with a member over 64 bytes. SADD creating
 * a key with more members than those limits starts as a hashtable, as
 * Redis's size hint does (SET_OP_ENC). The structure is always the dict. */
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "dict.h"
#include "object.h"
#include "server.h"
#include "strutil.h"
#include "type_set.h"

/* set-max-intset-entries, set-max-listpack-entries / -value (CONFIG SET) */
#define SET_MAX_INTSET ((size_t)server.cfg.set_max_intset_entries)
#define SET_LP_ENTRIES ((size_t)server.cfg.set_max_listpack_entries)
#define SET_LP_VALUE ((size_t)server.cfg.set_max_listpack_value)

/* ---------------- the class ---------------- */

static void *set_create(void) {
    setobj *s = calloc(1, sizeof(*s));
    if (!s) abort();
    s->d = dict_new();
    s->enc = SET_ENC_INTSET;
    return s;
}

static void set_destroy(void *data) {
    setobj *s = data;
    dict_free(s->d);
    free(s);
}

static int is_int(const char *m, size_t len) {
    long long v;
    return string2ll(m, len, &v);
}

void set_add(setobj *s, const char *m, size_t len) {
    size_t before = dict_size(s->d);
    if (!dict_set(s->d, m, len, NULL, 0)) return;
    if (s->enc == SET_ENC_INTSET) {
        if (is_int(m, len)) {
            if (before + 1 > SET_MAX_INTSET) s->enc = SET_ENC_HT;
        } else {
            s->enc = before < SET_LP_ENTRIES && len <= SET_LP_VALUE ? SET_ENC_LISTPACK : SET_ENC_HT;
        }
    } else if (s->enc == SET_ENC_LISTPACK) {
        if (before >= SET_LP_ENTRIES || len > SET_LP_VALUE) s->enc = SET_ENC_HT;
    }
}

static int set_apply(void *data, uint8_t op, const char *arg, size_t len) {
    setobj *s = data;
    switch (op) {
    case SET_OP_ADD:
        set_add(s, arg, len);
        return 0;
    case SET_OP_REM:
        dict_del(s->d, arg, len);
        return 0;
    case SET_OP_ENC:
        if (len != 1 || (unsigned char)arg[0] > SET_ENC_HT) return -1;
        if ((unsigned char)arg[0] > s->enc) s->enc = (unsigned char)arg[0];
        return 0;
    default:
        return -1;
    }
}

static int snap_fn(void *arg, const dict_entry *e) {
    obj_put_str(arg, e->key, e->klen);
    return 0;
}

static void set_snapshot(const void *data, rbuf *out) {
    const setobj *s = data;
    unsigned char enc = (unsigned char)s->enc;
    rbuf_append(out, &enc, 1);
    obj_put_u32(out, (uint32_t)dict_size(s->d));
    dict_foreach(s->d, snap_fn, out);
}

static void *set_load(const char *buf, size_t len) {
    if (len < 5 || (unsigned char)buf[0] > SET_ENC_HT) return NULL;
    setobj *s = set_create();
    uint32_t n = obj_get_u32(buf + 1);
    size_t pos = 5;
    for (uint32_t i = 0; i < n; i++) {
        const char *m;
        size_t mlen;
        if (obj_get_str(buf, len, &pos, &m, &mlen)) goto bad;
        set_add(s, m, mlen);
    }
    if (pos != len || dict_size(s->d) != n) goto bad;
    if ((unsigned char)buf[0] > s->enc) s->enc = (unsigned char)buf[0];
    return s;
bad:
    set_destroy(s);
    return NULL;
}

static long long set_size(const void *data) {
    return (long long)dict_size(((const setobj *)data)->d);
}

static const char *set_encoding(const void *data) {
    switch (((const setobj *)data)->enc) {
    case SET_ENC_INTSET: return "intset";
    case SET_ENC_LISTPACK: return "listpack";
    default: return "hashtable";
    }
}

static size_t set_memory(const void *data) {
    return sizeof(setobj) + dict_mem_bytes(((const setobj *)data)->d);
}

static void set_elements(const void *data, obj_elem_fn fn, void *arg) {
    dict_foreach_pair(((const setobj *)data)->d, fn, arg);
}

static const obj_class set_class = {
    .name = "set",
    .create = set_create,
    .destroy = set_destroy,
    .apply = set_apply,
    .snapshot = set_snapshot,
    .load = set_load,
    .size = set_size,
    .encoding = set_encoding,
    .memory = set_memory,
    .elements = set_elements,
};

void set_register(void) { obj_register(OBJ_SET, &set_class); }

/* ---------------- effects (for commands) ---------------- */

void set_op_add(rbuf *ops, const char *m, size_t len) { obj_op(ops, SET_OP_ADD, m, len); }

void set_op_rem(rbuf *ops, const char *m, size_t len) { obj_op(ops, SET_OP_REM, m, len); }

void set_op_new(rbuf *ops, size_t n, const char *first, size_t flen) {
    if (n > SET_LP_ENTRIES && !(is_int(first, flen) && n <= SET_MAX_INTSET)) {
        char enc = SET_ENC_HT;
        obj_op(ops, SET_OP_ENC, &enc, 1);
    }
}
