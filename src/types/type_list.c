/* type_list.c -- the list type: its structure, effects and class (object.h).
 *
 * The value: a ring buffer of element pointers (rlist), so pushing and
 * popping at either end and reading by index are O(1); inserting or
 * removing in the middle moves the pointers of the shorter side.
 *
 * Effects (object.h): every list write is logged as element effects, never
 * as the command. Each effect payload starts with LOP_LEN, the length the
 * list has before the effects: the live path always satisfies it, and in
 * recovery it refuses (as a malformed entry) an effect whose predecessor in
 * the key's history was lost. That can happen legitimately: worker A's
 * push may still be in flight when worker B pops what it pushed, and B's
 * batch may land first. B's reply was held on A's version (its read
 * recorded it), so nothing acknowledged depends on the refused effect;
 * applying positional effects to the wrong list would instead remove or
 * overwrite acknowledged elements.
 *
 *   LOP_LEN        u64 n           the list has n elements here
 *   LOP_PUSH_HEAD  element         pushed at the head (left)
 *   LOP_PUSH_TAIL  element         pushed at the tail (right)
 *   LOP_POP_HEAD   u64 count       count elements removed from the head
 *   LOP_POP_TAIL   u64 count       count elements removed from the tail
 *   LOP_SET        u64 i, element  element i replaced
 *   LOP_REMOVE     u64 i...        the elements at these ascending indexes
 *                                  (positions before the op) removed
 *   LOP_INSERT     u64 i, element  element inserted so that it is at index i
 *   LOP_TRIM       u64 s, u64 n    only elements s .. s+n-1 kept
 * Integers are little endian. Commands (redis-compat/t_list.c) encode them
 * (list_ops_begin, list_op_u64...) and write them with db_obj_write, which
 * applies them through list_apply, the function recovery replays them with.
 *
 * Snapshot: u64 count, then count times (u32 length, bytes).
 *
 * Encoding (OBJECT ENCODING): "listpack" for at most 128 elements of at
 * most 64 bytes each, else "quicklist" (Redis 7.2's small/large split,
 * decided from the current contents, without Redis's hysteresis). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "le.h"
#include "object.h"
#include "type_list.h"

/* ---------------- the structure ---------------- */

#define RL_MIN_CAP 8

static lelem *elem_new(const char *p, size_t len) {
    lelem *e = malloc(sizeof(lelem) + len);
    if (!e) abort();
    e->len = (uint32_t)len;
    if (len) memcpy(e->b, p, len);
    return e;
}

static void rl_resize(rlist *l, size_t cap) {
    lelem **a = malloc(sizeof(lelem *) * cap);
    if (!a) abort();
    for (size_t i = 0; i < l->n; i++) a[i] = rl_at(l, i);
    free(l->a);
    l->a = a;
    l->cap = cap;
    l->head = 0;
}

static void rl_reserve(rlist *l, size_t extra) {
    if (l->n + extra <= l->cap) return;
    size_t cap = l->cap ? l->cap : RL_MIN_CAP;
    while (cap < l->n + extra) cap *= 2;
    rl_resize(l, cap);
}

/* Give memory back after the list shrank a lot. */
static void rl_maybe_shrink(rlist *l) {
    if (l->cap <= 4 * RL_MIN_CAP || l->n * 4 >= l->cap) return;
    size_t cap = RL_MIN_CAP;
    while (cap < l->n * 2) cap *= 2;
    rl_resize(l, cap);
}

static void rl_push_head(rlist *l, lelem *e) {
    rl_reserve(l, 1);
    l->head = (l->head - 1) & (l->cap - 1);
    l->a[l->head] = e;
    l->n++;
    l->bytes += e->len;
}

static void rl_push_tail(rlist *l, lelem *e) {
    rl_reserve(l, 1);
    *rl_slot(l, l->n) = e;
    l->n++;
    l->bytes += e->len;
}

static void rl_free_range(rlist *l, size_t from, size_t count) {
    for (size_t i = from; i < from + count; i++) {
        lelem *e = rl_at(l, i);
        l->bytes -= e->len;
        free(e);
    }
}

static void rl_pop_head(rlist *l, size_t count) {
    rl_free_range(l, 0, count);
    l->head = (l->head + count) & (l->cap - 1);
    l->n -= count;
    rl_maybe_shrink(l);
}

static void rl_pop_tail(rlist *l, size_t count) {
    rl_free_range(l, l->n - count, count);
    l->n -= count;
    rl_maybe_shrink(l);
}

/* Keep elements start .. start+count-1. */
static void rl_trim(rlist *l, size_t start, size_t count) {
    rl_free_range(l, start + count, l->n - start - count);
    l->n = start + count;
    rl_free_range(l, 0, start);
    l->head = (l->head + start) & (l->cap - 1);
    l->n = count;
    rl_maybe_shrink(l);
}

/* Insert e so that it ends up at index i (0..n), moving the shorter side. */
static void rl_insert(rlist *l, size_t i, lelem *e) {
    rl_reserve(l, 1);
    if (i < l->n - i) {
        l->head = (l->head - 1) & (l->cap - 1);
        for (size_t j = 0; j < i; j++) *rl_slot(l, j) = rl_at(l, j + 1);
    } else {
        for (size_t j = l->n; j > i; j--) *rl_slot(l, j) = rl_at(l, j - 1);
    }
    *rl_slot(l, i) = e;
    l->n++;
    l->bytes += e->len;
}

/* Remove the elements at the k ascending indexes idx[] (positions before
 * the removal). One element moves the shorter side; several compact in one
 * pass from the first removed index. */
static void rl_remove(rlist *l, const uint64_t *idx, size_t k) {
    if (k == 0) return;
    for (size_t j = 0; j < k; j++) {
        lelem *e = rl_at(l, (size_t)idx[j]);
        l->bytes -= e->len;
        free(e);
    }
    if (k == 1) {
        size_t i = (size_t)idx[0];
        if (i < l->n - 1 - i) {
            for (size_t j = i; j > 0; j--) *rl_slot(l, j) = rl_at(l, j - 1);
            l->head = (l->head + 1) & (l->cap - 1);
        } else {
            for (size_t j = i; j + 1 < l->n; j++) *rl_slot(l, j) = rl_at(l, j + 1);
        }
        l->n--;
    } else {
        size_t w = (size_t)idx[0], p = 0;
        for (size_t r = (size_t)idx[0]; r < l->n; r++) {
            if (p < k && idx[p] == r) {
                p++;
                continue;
            }
            *rl_slot(l, w++) = rl_at(l, r);
        }
        l->n = w;
    }
    rl_maybe_shrink(l);
}

/* ---------------- obj_class ---------------- */

static void *list_create(void) {
    rlist *l = calloc(1, sizeof(*l));
    if (!l) abort();
    return l;
}

static void list_destroy(void *data) {
    rlist *l = data;
    if (l->n) rl_free_range(l, 0, l->n);
    free(l->a);
    free(l);
}

/* Recovery may hand us anything that passed the CRC: check every bound. */
static int list_apply(void *data, uint8_t op, const char *arg, size_t len) {
    rlist *l = data;
    uint64_t a, b;
    switch (op) {
    case LOP_LEN:
        if (len != 8) return -1;
        return le_get_u64(arg) == l->n ? 0 : -1;
    case LOP_PUSH_HEAD:
    case LOP_PUSH_TAIL:
        if (len > UINT32_MAX) return -1;
        if (op == LOP_PUSH_HEAD) rl_push_head(l, elem_new(arg, len));
        else rl_push_tail(l, elem_new(arg, len));
        return 0;
    case LOP_POP_HEAD:
    case LOP_POP_TAIL:
        if (len != 8) return -1;
        a = le_get_u64(arg);
        if (a > l->n) return -1;
        if (op == LOP_POP_HEAD) rl_pop_head(l, (size_t)a);
        else rl_pop_tail(l, (size_t)a);
        return 0;
    case LOP_SET: {
        if (len < 8) return -1;
        a = le_get_u64(arg);
        if (a >= l->n || len - 8 > UINT32_MAX) return -1;
        lelem **s = rl_slot(l, (size_t)a);
        l->bytes -= (*s)->len;
        free(*s);
        *s = elem_new(arg + 8, len - 8);
        l->bytes += len - 8;
        return 0;
    }
    case LOP_REMOVE: {
        if (len % 8) return -1;
        size_t k = len / 8;
        if (k > l->n) return -1;
        uint64_t *idx = malloc(sizeof(uint64_t) * (k ? k : 1));
        if (!idx) abort();
        for (size_t j = 0; j < k; j++) {
            idx[j] = le_get_u64(arg + 8 * j);
            if (idx[j] >= l->n || (j && idx[j] <= idx[j - 1])) {
                free(idx);
                return -1;
            }
        }
        rl_remove(l, idx, k);
        free(idx);
        return 0;
    }
    case LOP_INSERT:
        if (len < 8) return -1;
        a = le_get_u64(arg);
        if (a > l->n || len - 8 > UINT32_MAX) return -1;
        rl_insert(l, (size_t)a, elem_new(arg + 8, len - 8));
        return 0;
    case LOP_TRIM:
        if (len != 16) return -1;
        a = le_get_u64(arg);
        b = le_get_u64(arg + 8);
        if (a > l->n || b > l->n - a) return -1;
        rl_trim(l, (size_t)a, (size_t)b);
        return 0;
    default:
        return -1;
    }
}

static void list_snapshot(const void *data, rbuf *out) {
    const rlist *l = data;
    char n[8];
    le_put_u64(n, l->n);
    rbuf_append(out, n, 8);
    rbuf_reserve(out, l->n * 4 + l->bytes);
    for (size_t i = 0; i < l->n; i++) {
        const lelem *e = rl_at(l, i);
        obj_put_str(out, e->b, e->len);
    }
}

static void *list_load(const char *buf, size_t len) {
    if (len < 8) return NULL;
    uint64_t n = le_get_u64(buf);
    /* Every element takes at least 4 bytes: bound n before trusting it. */
    if (n > (len - 8) / 4) return NULL;
    rlist *l = list_create();
    size_t pos = 8;
    for (uint64_t i = 0; i < n; i++) {
        const char *e;
        size_t el;
        if (obj_get_str(buf, len, &pos, &e, &el)) goto bad;
        rl_push_tail(l, elem_new(e, el));
    }
    if (pos != len) goto bad;
    return l;
bad:
    list_destroy(l);
    return NULL;
}

static long long list_size(const void *data) { return (long long)((const rlist *)data)->n; }

#define LISTPACK_MAX_ENTRIES 128
#define LISTPACK_MAX_VALUE   64

static const char *list_encoding(const void *data) {
    const rlist *l = data;
    if (l->n > LISTPACK_MAX_ENTRIES) return "quicklist";
    for (size_t i = 0; i < l->n; i++)
        if (rl_at(l, i)->len > LISTPACK_MAX_VALUE) return "quicklist";
    return "listpack";
}

static size_t list_memory(const void *data) {
    const rlist *l = data;
    return sizeof(*l) + l->cap * sizeof(lelem *) + l->n * sizeof(lelem) + l->bytes;
}

static void list_elements(const void *data, obj_elem_fn fn, void *arg) {
    const rlist *l = data;
    for (size_t i = 0; i < l->n; i++) {
        const lelem *e = rl_at(l, i);
        fn(arg, e->b, e->len, NULL, 0);
    }
}

static const obj_class list_class = {
    .name = "list",
    .create = list_create,
    .destroy = list_destroy,
    .apply = list_apply,
    .snapshot = list_snapshot,
    .load = list_load,
    .size = list_size,
    .encoding = list_encoding,
    .memory = list_memory,
    .elements = list_elements,
};

void list_register(void) { obj_register(OBJ_LIST, &list_class); }

/* ---------------- effects (for commands) ---------------- */

void list_op_u64(rbuf *b, uint8_t op, uint64_t v) {
    char p[8];
    le_put_u64(p, v);
    obj_op(b, op, p, 8);
}

void list_op_u64_elem(rbuf *b, uint8_t op, uint64_t v, const char *e, size_t elen) {
    char p[8];
    le_put_u64(p, v);
    obj_op2(b, op, p, 8, e, elen);
}

void list_ops_begin(rbuf *b, size_t n) {
    rbuf_init(b);
    list_op_u64(b, LOP_LEN, n);
}
