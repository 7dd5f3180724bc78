/* t_set.c -- the set commands.
 *
 * The set type itself (its structure, effects, encodings, snapshot and
 * class) is src/types/type_set.c. SPOP decides on the live path which
 * members leave and logs a removal for each of them, so replay never draws
 * random numbers. The *STORE commands compute their result into a private
 * object and write it as one snapshot entry (db_set_copy), replacing
 * whatever the destination held; SMOVE writes both keys in one batch. A
 * command whose effects would empty a set deletes the key instead.
 *
 * Replies, error texts and the order of checks follow Redis 7.2. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "notify.h"
#include "dict.h"
#include "object.h"
#include "server.h"
#include "type_set.h"
#include "util.h"

/* ---------------- command helpers ---------------- */

/* Look argv[i] up as a set. 1 found (*s set), 0 missing (*s NULL), -1 it
 * holds another type (WRONGTYPE replied). for_write: db_peek, as Redis's
 * lookupKeyWrite (no keyspace hit/miss). */
static int lookup_set(client *c, int i, int for_write, setobj **s) {
    db_val v;
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], &v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], &v);
    *s = NULL;
    if (!found) return 0;
    if (v.type != OBJ_SET) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    *s = v.obj->data;
    return 1;
}

static size_t ssize(const setobj *s) { return s ? dict_size(s->d) : 0; }

static int is_member(const setobj *s, const char *m, size_t len) {
    return s && dict_find(s->d, m, len) != NULL;
}

static void reply_oom(client *c, size_t reply_start) {
    c->out.b.len = reply_start;
    resp_add_error(&c->out, db_error_text(&c->x));
}

static int cmp_int_entries(const void *a, const void *b) {
    const dict_entry *x = *(const dict_entry *const *)a, *y = *(const dict_entry *const *)b;
    long long u = 0, v = 0;
    string2ll(x->key, x->klen, &u);
    string2ll(y->key, y->klen, &v);
    return u < v ? -1 : u > v;
}

/* Every member, in the order Redis would list them where that is fixed:
 * an intset is sorted by value. Caller frees the array. */
static const dict_entry **members_of(const setobj *s, size_t *n) {
    size_t size = dict_size(s->d);
    const dict_entry **all = malloc(sizeof(*all) * (size ? size : 1));
    if (!all) abort();
    dict_entries(s->d, all);
    if (s->enc == SET_ENC_INTSET) qsort(all, size, sizeof(*all), cmp_int_entries);
    *n = size;
    return all;
}

/* ---------------- SADD SREM ---------------- */

void saddCommand(client *c) {
    setobj *s;
    rbuf ops;
    int r = lookup_set(c, 1, 1, &s);
    if (r < 0) return;
    rbuf_init(&ops);
    if (!s) {
        /* Redis sizes a new set by the number of arguments. */
        set_op_new(&ops, (size_t)c->argc - 2, c->argv[2], c->argvlen[2]);
    }
    /* The reply is worked out before the write: inside a batch (MULTI) the
     * effects are applied only when the batch ends. */
    long long adds = 0;
    dict *seen = dict_new();
    for (int j = 2; j < c->argc; j++) {
        if (is_member(s, c->argv[j], c->argvlen[j])) continue;
        if (!dict_set(seen, c->argv[j], c->argvlen[j], NULL, 0)) continue;
        set_op_add(&ops, c->argv[j], c->argvlen[j]);
        adds++;
    }
    dict_free(seen);
    r = adds ? db_obj_write_ops(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_SET, &ops) : DB_OK;
    rbuf_free(&ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    if (adds) notify_key(c, NOTIFY_SET, "sadd", 1);
    resp_add_int(&c->out, adds);
}

/* Each distinct member present is removed once; removing the last one
 * deletes the key. */
void sremCommand(client *c) {
    setobj *s;
    rbuf ops;
    long long removed = 0;
    int r = lookup_set(c, 1, 1, &s);
    if (r <= 0) {
        if (r == 0) resp_add_int(&c->out, 0);
        return;
    }
    dict *seen = dict_new();
    rbuf_init(&ops);
    for (int j = 2; j < c->argc; j++) {
        if (!is_member(s, c->argv[j], c->argvlen[j])) continue;
        if (!dict_set(seen, c->argv[j], c->argvlen[j], NULL, 0)) continue;
        set_op_rem(&ops, c->argv[j], c->argvlen[j]);
        removed++;
    }
    dict_free(seen);
    int emptied = removed && (size_t)removed == ssize(s);
    if (removed == 0) r = DB_OK;
    else if (emptied) r = db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    else r = db_obj_write(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_SET, ops.buf, ops.len);
    rbuf_free(&ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    if (removed) notify_key(c, NOTIFY_SET, "srem", 1);
    if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_int(&c->out, removed);
}

/* ---------------- reads ---------------- */

static void reply_members(client *c, const setobj *s) {
    size_t n = 0;
    if (!s) {
        resp_add_set(&c->out, 0);
        return;
    }
    const dict_entry **all = members_of(s, &n);
    resp_add_set(&c->out, (long long)n);
    for (size_t i = 0; i < n; i++) resp_add_bulk(&c->out, all[i]->key, all[i]->klen);
    free(all);
}

void smembersCommand(client *c) {
    setobj *s;
    if (lookup_set(c, 1, 0, &s) < 0) return;
    reply_members(c, s);
}

void sismemberCommand(client *c) {
    setobj *s;
    if (lookup_set(c, 1, 0, &s) < 0) return;
    resp_add_int(&c->out, is_member(s, c->argv[2], c->argvlen[2]));
}

void smismemberCommand(client *c) {
    setobj *s;
    if (lookup_set(c, 1, 0, &s) < 0) return;
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) resp_add_int(&c->out, is_member(s, c->argv[j], c->argvlen[j]));
}

void scardCommand(client *c) {
    setobj *s;
    if (lookup_set(c, 1, 0, &s) < 0) return;
    resp_add_int(&c->out, (long long)ssize(s));
}

/* ---------------- SPOP SRANDMEMBER ---------------- */

static void spop_count(client *c) {
    long long count;
    setobj *s;
    rbuf ops;
    size_t reply_start = c->out.b.len, size;
    int r;

    /* Redis answers the same text for a non-integer. */
    if (arg_ll_range(c, 2, 0, LLONG_MAX, &count, "ERR value is out of range, must be positive") != 0)
        return;
    r = lookup_set(c, 1, 1, &s);
    if (r < 0) return;
    if (r == 0 || count == 0) {
        resp_add_set(&c->out, 0);
        return;
    }
    size = ssize(s);
    if ((unsigned long long)count >= size) {
        /* Everything: reply with the members, then delete the key. */
        reply_members(c, s);
        if (db_del(&c->x, c->db, c->argv[1], c->argvlen[1]) == DB_OOM) reply_oom(c, reply_start);
        else {
            notify_key(c, NOTIFY_SET, "spop", 1);
            notify_key(c, NOTIFY_GENERIC, "del", 1);
        }
        return;
    }
    const dict_entry **picked = malloc(sizeof(*picked) * (size_t)count);
    if (!picked) abort();
    dict_pick_distinct(s->d, (size_t)count, picked, rnd64);
    rbuf_init(&ops);
    resp_add_set(&c->out, count);
    for (long long i = 0; i < count; i++) {
        resp_add_bulk(&c->out, picked[i]->key, picked[i]->klen);
        set_op_rem(&ops, picked[i]->key, picked[i]->klen);
    }
    free(picked);
    /* The reply holds copies: the entries go away with the write. */
    r = db_obj_write(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_SET, ops.buf, ops.len);
    rbuf_free(&ops);
    if (r == DB_OOM) reply_oom(c, reply_start);
    else notify_key(c, NOTIFY_SET, "spop", 1);
}

void spopCommand(client *c) {
    setobj *s;
    size_t reply_start = c->out.b.len;
    int r;

    if (c->argc == 3) {
        spop_count(c);
        return;
    }
    if (c->argc > 3) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    r = lookup_set(c, 1, 1, &s);
    if (r < 0) return;
    if (r == 0) {
        resp_add_null(&c->out);
        return;
    }
    const dict_entry *e = dict_random(s->d, rnd64());
    resp_add_bulk(&c->out, e->key, e->klen);
    int emptied = ssize(s) == 1;
    if (emptied) {
        r = db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    } else {
        rbuf ops;
        rbuf_init(&ops);
        set_op_rem(&ops, e->key, e->klen);
        r = db_obj_write(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_SET, ops.buf, ops.len);
        rbuf_free(&ops);
    }
    if (r == DB_OOM) {
        reply_oom(c, reply_start);
        return;
    }
    notify_key(c, NOTIFY_SET, "spop", 1);
    if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
}

void srandmemberCommand(client *c) {
    setobj *s;
    long long count;
    int r;

    if (c->argc > 3) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (c->argc == 2) {
        r = lookup_set(c, 1, 0, &s);
        if (r < 0) return;
        if (r == 0) {
            resp_add_null(&c->out);
            return;
        }
        const dict_entry *e = dict_random(s->d, rnd64());
        resp_add_bulk(&c->out, e->key, e->klen);
        return;
    }
    if (arg_ll_range(c, 2, -LLONG_MAX, LLONG_MAX, &count, NULL) != 0) return;
    r = lookup_set(c, 1, 0, &s);
    if (r < 0) return;
    if (r == 0 || count == 0) {
        resp_add_array(&c->out, 0);
        return;
    }
    size_t size = ssize(s);
    if (count < 0) {
        /* Repeats allowed: the reply's size is the client's to choose, not
         * bounded by the set. One over the client's output limit closes
         * the client before any of it is built, as its output limit would
         * part way through (see resp_out_fits). */
        if (!resp_out_fits(&c->out, (unsigned long long)-count, RESP_MIN_BULK)) return;
        resp_add_array(&c->out, -count);
        for (long long i = 0; i < -count && !c->out.overflow; i++) {
            const dict_entry *e = dict_random(s->d, rnd64());
            resp_add_bulk(&c->out, e->key, e->klen);
        }
        return;
    }
    if ((unsigned long long)count >= size) {
        size_t n;
        const dict_entry **all = members_of(s, &n);
        resp_add_array(&c->out, (long long)n);
        for (size_t i = 0; i < n; i++) resp_add_bulk(&c->out, all[i]->key, all[i]->klen);
        free(all);
        return;
    }
    const dict_entry **picked = malloc(sizeof(*picked) * (size_t)count);
    if (!picked) abort();
    dict_pick_distinct(s->d, (size_t)count, picked, rnd64);
    resp_add_array(&c->out, count);
    for (long long i = 0; i < count; i++) resp_add_bulk(&c->out, picked[i]->key, picked[i]->klen);
    free(picked);
}

/* ---------------- SMOVE ---------------- */

void smoveCommand(client *c) {
    setobj *src, *dst;
    const char *m = c->argv[3];
    size_t mlen = c->argvlen[3];
    int rs, rd, r;

    rs = lookup_set(c, 1, 1, &src);
    if (rs < 0) return;
    /* A missing source answers 0 before the destination's type matters. */
    if (rs == 0) {
        resp_add_int(&c->out, 0);
        return;
    }
    rd = lookup_set(c, 2, 1, &dst);
    if (rd < 0) return;
    if (c->argvlen[1] == c->argvlen[2] && memcmp(c->argv[1], c->argv[2], c->argvlen[1]) == 0) {
        resp_add_int(&c->out, is_member(src, m, mlen));
        return;
    }
    if (!is_member(src, m, mlen)) {
        resp_add_int(&c->out, 0);
        return;
    }
    rbuf ops;
    rbuf_init(&ops);
    int emptied = ssize(src) == 1, added = !is_member(dst, m, mlen);
    db_batch_begin(&c->x);
    if (emptied) {
        db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    } else {
        set_op_rem(&ops, m, mlen);
        db_obj_write(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_SET, ops.buf, ops.len);
    }
    if (!is_member(dst, m, mlen)) {
        ops.len = 0;
        set_op_add(&ops, m, mlen);
        db_obj_write(&c->x, c->db, c->argv[2], c->argvlen[2], OBJ_SET, ops.buf, ops.len);
    }
    r = db_batch_end(&c->x);
    rbuf_free(&ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_SET, "srem", 1);
    if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
    if (added) notify_key(c, NOTIFY_SET, "sadd", 2);
    resp_add_int(&c->out, 1);
}

/* ---------------- SINTER SUNION SDIFF and their STORE forms ---------------- */

enum { OP_INTER, OP_UNION, OP_DIFF };

/* Look up argv[first..first+n-1] as sets into sets[] (NULL = missing).
 * Every key is type checked, as Redis does. -1 after a WRONGTYPE reply. */
static int lookup_sets(client *c, int first, int n, setobj **sets) {
    for (int j = 0; j < n; j++)
        if (lookup_set(c, first + j, 0, &sets[j]) < 0) return -1;
    return 0;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = ssize(*(setobj *const *)a), y = ssize(*(setobj *const *)b);
    return x < y ? -1 : x > y;
}

typedef struct algebra {
    setobj **sets;
    int n;
    const dict_entry **out;  /* result members (pointers into the sets, or into acc) */
    size_t nout;
    dict *acc;               /* union's accumulator */
    long long limit;         /* SINTERCARD: stop here (0 = no limit) */
} algebra;

static int inter_fn(void *arg, const dict_entry *e) {
    algebra *a = arg;
    for (int j = 1; j < a->n; j++)
        if (a->sets[j] != a->sets[0] && !dict_find(a->sets[j]->d, e->key, e->klen)) return 0;
    a->out[a->nout++] = e;
    return a->limit && (long long)a->nout >= a->limit;
}

static int union_fn(void *arg, const dict_entry *e) {
    algebra *a = arg;
    dict_set(a->acc, e->key, e->klen, NULL, 0);
    return 0;
}

static int diff_fn(void *arg, const dict_entry *e) {
    algebra *a = arg;
    for (int j = 1; j < a->n; j++)
        if (a->sets[j] && dict_find(a->sets[j]->d, e->key, e->klen)) return 0;
    a->out[a->nout++] = e;
    return 0;
}

/* Compute the result of op over sets[0..n-1] into a->out. */
static void algebra_run(algebra *a, int op) {
    a->nout = 0;
    a->out = NULL;
    a->acc = NULL;
    if (op == OP_INTER) {
        for (int j = 0; j < a->n; j++)
            if (!a->sets[j]) return;
        qsort(a->sets, (size_t)a->n, sizeof(*a->sets), cmp_size);
        a->out = malloc(sizeof(*a->out) * (ssize(a->sets[0]) + 1));
        if (!a->out) abort();
        dict_foreach(a->sets[0]->d, inter_fn, a);
    } else if (op == OP_UNION) {
        a->acc = dict_new();
        for (int j = 0; j < a->n; j++)
            if (a->sets[j]) dict_foreach(a->sets[j]->d, union_fn, a);
        a->out = malloc(sizeof(*a->out) * (dict_size(a->acc) + 1));
        if (!a->out) abort();
        dict_entries(a->acc, a->out);
        a->nout = dict_size(a->acc);
    } else {
        if (!a->sets[0]) return;
        a->out = malloc(sizeof(*a->out) * (ssize(a->sets[0]) + 1));
        if (!a->out) abort();
        dict_foreach(a->sets[0]->d, diff_fn, a);
    }
}

static void algebra_free(algebra *a) {
    free(a->out);
    if (a->acc) dict_free(a->acc);
    free(a->sets);
}

static void algebra_generic(client *c, int op, int store) {
    int first = store ? 2 : 1, n = c->argc - first;
    algebra a = {calloc((size_t)n, sizeof(setobj *)), n, NULL, 0, NULL, 0};
    if (!a.sets) abort();
    if (lookup_sets(c, first, n, a.sets) != 0) {
        free(a.sets);
        return;
    }
    algebra_run(&a, op);
    if (!store) {
        resp_add_set(&c->out, (long long)a.nout);
        for (size_t i = 0; i < a.nout; i++) resp_add_bulk(&c->out, a.out[i]->key, a.out[i]->klen);
        algebra_free(&a);
        return;
    }
    /* STORE: the result replaces the destination whatever it held, with no
     * TTL, as one snapshot entry; an empty result deletes it. */
    int r;
    long long card = (long long)a.nout;
    if (a.nout == 0) {
        r = db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    } else {
        robj *tmp = obj_new(OBJ_SET, 0, "", 0);
        for (size_t i = 0; i < a.nout; i++) set_add(tmp->data, a.out[i]->key, a.out[i]->klen);
        r = db_set_copy(&c->x, c->db, c->argv[1], c->argvlen[1], tmp, 0);
        obj_free(tmp);
    }
    algebra_free(&a);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    static const char *const stored[] = {"sinterstore", "sunionstore", "sdiffstore"};
    if (card) notify_key(c, NOTIFY_SET, stored[op], 1);
    else if (r == 1) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_int(&c->out, card);
}

void sinterCommand(client *c) { algebra_generic(c, OP_INTER, 0); }
void sunionCommand(client *c) { algebra_generic(c, OP_UNION, 0); }
void sdiffCommand(client *c) { algebra_generic(c, OP_DIFF, 0); }
void sinterstoreCommand(client *c) { algebra_generic(c, OP_INTER, 1); }
void sunionstoreCommand(client *c) { algebra_generic(c, OP_UNION, 1); }
void sdiffstoreCommand(client *c) { algebra_generic(c, OP_DIFF, 1); }

/* SINTERCARD numkeys key [key ...] [LIMIT limit] */
void sintercardCommand(client *c) {
    long long numkeys, limit = 0;
    const char *nk_err = "ERR numkeys should be greater than 0";

    if (arg_ll_range(c, 1, 1, LLONG_MAX, &numkeys, nk_err) != 0) return;
    if (numkeys > c->argc - 2) {
        resp_add_error(&c->out, "ERR Number of keys can't be greater than number of args");
        return;
    }
    for (int j = 2 + (int)numkeys; j < c->argc; j++) {
        if (arg_is(c, j, "limit") && j + 1 < c->argc) {
            if (arg_ll_range(c, j + 1, 0, LLONG_MAX, &limit, "ERR LIMIT can't be negative") != 0)
                return;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    algebra a = {calloc((size_t)numkeys, sizeof(setobj *)), (int)numkeys, NULL, 0, NULL, limit};
    if (!a.sets) abort();
    if (lookup_sets(c, 2, (int)numkeys, a.sets) != 0) {
        free(a.sets);
        return;
    }
    algebra_run(&a, OP_INTER);
    resp_add_int(&c->out, (long long)a.nout);
    algebra_free(&a);
}

/* ---------------- SSCAN ---------------- */

typedef struct sscan_ctx {
    client *c;
    const char *pat;
    size_t plen;
    long long n;
} sscan_ctx;

static void sscan_fn(void *arg, const dict_entry *e) {
    sscan_ctx *s = arg;
    if (s->pat && !stringmatchlen(s->pat, s->plen, e->key, e->klen, 0)) return;
    resp_add_bulk(&s->c->out, e->key, e->klen);
    s->n++;
}

void sscanCommand(client *c) {
    setobj *s;
    uint64_t cursor;
    long long count = 10;
    sscan_ctx sc = {c, NULL, 0, 0};
    int r;

    if (arg_cursor(c, 2, &cursor) != 0) return;
    r = lookup_set(c, 1, 0, &s);
    if (r < 0) return;
    if (r == 0) {
        reply_scan_header(c, 0, 0);
        return;
    }
    if (arg_scan_options(c, 3, &count, &sc.pat, &sc.plen, NULL) != 0) return;
    scan_page page;
    scan_page_begin(c, &page);
    if (s->enc != SET_ENC_HT) {
        /* Like Redis's intset and listpack encodings: all in one call. */
        size_t n;
        const dict_entry **all = members_of(s, &n);
        for (size_t i = 0; i < n; i++) sscan_fn(&sc, all[i]);
        free(all);
        cursor = 0;
    } else {
        cursor = dict_scan(s->d, cursor, count, sscan_fn, &sc);
    }
    scan_page_end(c, &page, cursor, sc.n);
}
