/* t_hash.c -- the hash commands.
 *
 * The hash type itself (its structure, effects, snapshot and class) is
 * src/types/type_hash.c. Commands compute what they want to change, encode
 * it as effects (hash_op_set, hash_op_del) and hand them to db_obj_write,
 * which logs them and applies them through the class, the same code
 * recovery replays them with. HINCRBY and HINCRBYFLOAT log the resulting
 * value, never the increment. A command whose effects would empty the hash
 * deletes the key instead. Fields are listed through hash_foreach, which
 * keeps Redis's insertion order while the hash is "listpack"-sized.
 *
 * Replies, error texts and the order of checks follow Redis 7.2. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "notify.h"
#include "dict.h"
#include "object.h"
#include "type_hash.h"
#include "util.h"

#define LDOUBLE_TEXT_MAX (5 * 1024)

/* ---------------- command helpers ---------------- */

/* Look the key (argv[1]) up as a hash. 1 found (*h set), 0 missing, -1 it
 * holds another type (WRONGTYPE replied). for_write: db_peek (no keyspace
 * hit/miss), as Redis's lookupKeyWrite. */
static int lookup_hash(client *c, int for_write, hashobj **h) {
    db_val v;
    int found = for_write ? db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &v)
                          : db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v);
    *h = NULL;
    if (!found) return 0;
    if (v.type != OBJ_HASH) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    *h = v.obj->data;
    return 1;
}

static int write_ops(client *c, rbuf *ops) {
    return db_obj_write_ops(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_HASH, ops);
}

/* Set fields argv[from..] (field, value pairs) through ops: the last value
 * goes in place, not copied into ops (db_obj_write_ops_tail). */
static int write_set_ops(client *c, rbuf *ops, rbuf *scratch, int from) {
    int last = c->argc - 2;
    for (int j = from; j < last; j += 2)
        hash_op_set(ops, scratch, c->argv[j], c->argvlen[j], c->argv[j + 1], c->argvlen[j + 1]);
    hash_op_set_head(ops, c->argv[last], c->argvlen[last], c->argvlen[last + 1]);
    return db_obj_write_ops_tail(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_HASH, ops,
                                 c->argv[last + 1], c->argvlen[last + 1]);
}


static size_t hsize(const hashobj *h) { return h ? dict_size(h->d) : 0; }

/* ---------------- writes ---------------- */

/* HSET / HMSET: fields set left to right (a repeated field: the last value
 * wins). HSET replies how many fields are new. */
static void hset_generic(client *c, int reply_count) {
    hashobj *h;
    rbuf ops, scratch;
    long long created = 0;

    if (c->argc % 2 == 1) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", c->cmd->name);
        return;
    }
    if (lookup_hash(c, 1, &h) < 0) return;
    /* The reply is worked out before the write: inside a batch (MULTI) the
     * effects are applied only when the batch ends. */
    dict *seen = dict_new();
    rbuf_init(&ops);
    rbuf_init(&scratch);
    for (int j = 2; j < c->argc; j += 2) {
        if (!(h && dict_find(h->d, c->argv[j], c->argvlen[j])) &&
            dict_set(seen, c->argv[j], c->argvlen[j], NULL, 0))
            created++;
    }
    dict_free(seen);
    int r = write_set_ops(c, &ops, &scratch, 2);
    rbuf_free(&ops);
    rbuf_free(&scratch);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_HASH, "hset", 1);
    if (!reply_count) {
        resp_add_ok(&c->out);
        return;
    }
    resp_add_int(&c->out, created);
}

void hsetCommand(client *c) { hset_generic(c, 1); }
void hmsetCommand(client *c) { hset_generic(c, 0); }

void hsetnxCommand(client *c) {
    hashobj *h;
    rbuf ops, scratch;
    if (lookup_hash(c, 1, &h) < 0) return;
    if (h && dict_find(h->d, c->argv[2], c->argvlen[2])) {
        resp_add_int(&c->out, 0);
        return;
    }
    rbuf_init(&ops);
    rbuf_init(&scratch);
    int r = write_set_ops(c, &ops, &scratch, 2);
    rbuf_free(&ops);
    rbuf_free(&scratch);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_HASH, "hset", 1);
    resp_add_int(&c->out, 1);
}

/* Each distinct existing field is deleted once; deleting the last field
 * deletes the key. */
void hdelCommand(client *c) {
    hashobj *h;
    rbuf ops;
    dict *seen;
    long long deleted = 0;
    int r;

    r = lookup_hash(c, 1, &h);
    if (r <= 0) {
        if (r == 0) resp_add_int(&c->out, 0);
        return;
    }
    rbuf_init(&ops);
    seen = dict_new();
    for (int j = 2; j < c->argc; j++) {
        if (!dict_find(h->d, c->argv[j], c->argvlen[j])) continue;
        if (!dict_set(seen, c->argv[j], c->argvlen[j], NULL, 0)) continue;
        hash_op_del(&ops, c->argv[j], c->argvlen[j]);
        deleted++;
    }
    dict_free(seen);
    int emptied = deleted && (size_t)deleted == dict_size(h->d);
    if (deleted == 0) r = DB_OK;
    else if (emptied) r = db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    else r = write_ops(c, &ops);
    rbuf_free(&ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    if (deleted) notify_key(c, NOTIFY_HASH, "hdel", 1);
    if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_int(&c->out, deleted);
}

/* HINCRBY: the increment is checked before the key (as Redis does). */
/* HINCRBY, HINCRBYFLOAT: write field argv[2] = the new number's text and
 * notify; on -OOM reply the error and return -1 (the number is not sent). */
static int set_number_field(client *c, const char *num, size_t len, const char *event) {
    rbuf ops, scratch;
    rbuf_init(&ops);
    rbuf_init(&scratch);
    hash_op_set(&ops, &scratch, c->argv[2], c->argvlen[2], num, len);
    int r = write_ops(c, &ops);
    rbuf_free(&ops);
    rbuf_free(&scratch);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return -1;
    }
    notify_key(c, NOTIFY_HASH, event, 1);
    return 0;
}

void hincrbyCommand(client *c) {
    long long incr, value = 0;
    hashobj *h;
    dict_entry *e;
    char buf[32];
    int len;

    if (arg_ll(c, 3, &incr) != 0) return;
    if (lookup_hash(c, 1, &h) < 0) return;
    e = h ? dict_find(h->d, c->argv[2], c->argvlen[2]) : NULL;
    if (e && !string2ll(e->val, e->vlen, &value)) {
        resp_add_error(&c->out, "ERR hash value is not an integer");
        return;
    }
    if ((incr < 0 && value < 0 && incr < LLONG_MIN - value) ||
        (incr > 0 && value > 0 && incr > LLONG_MAX - value)) {
        resp_add_error(&c->out, ERR_OVERFLOW);
        return;
    }
    value += incr;
    len = ll2string(buf, sizeof(buf), value);
    if (set_number_field(c, buf, (size_t)len, "hincrby") != 0) return;
    resp_add_int(&c->out, value);
}

void hincrbyfloatCommand(client *c) {
    long double incr, value = 0;
    hashobj *h;
    dict_entry *e;
    char buf[LDOUBLE_TEXT_MAX + 64];
    int len;

    if (arg_ldouble(c, 3, &incr) != 0) return;
    if (isnan(incr) || isinf(incr)) {
        resp_add_error(&c->out, "ERR value is NaN or Infinity");
        return;
    }
    if (lookup_hash(c, 1, &h) < 0) return;
    e = h ? dict_find(h->d, c->argv[2], c->argvlen[2]) : NULL;
    if (e && !string2ld(e->val, e->vlen, &value)) {
        resp_add_error(&c->out, "ERR hash value is not a float");
        return;
    }
    value += incr;
    if (isnan(value) || isinf(value)) {
        resp_add_error(&c->out, "ERR increment would produce NaN or Infinity");
        return;
    }
    len = ld2string(buf, sizeof(buf), value);
    if (set_number_field(c, buf, (size_t)len, "hincrbyfloat") != 0) return;
    resp_add_bulk(&c->out, buf, (size_t)len);
}

/* ---------------- reads ---------------- */

static void add_value(client *c, const dict_entry *e) {
    if (e) resp_add_bulk(&c->out, e->vlen ? e->val : "", e->vlen);
    else resp_add_null(&c->out);
}

void hgetCommand(client *c) {
    hashobj *h;
    int r = lookup_hash(c, 0, &h);
    if (r < 0) return;
    add_value(c, r ? dict_find(h->d, c->argv[2], c->argvlen[2]) : NULL);
}

void hmgetCommand(client *c) {
    hashobj *h;
    if (lookup_hash(c, 0, &h) < 0) return;
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++)
        add_value(c, h ? dict_find(h->d, c->argv[j], c->argvlen[j]) : NULL);
}

void hlenCommand(client *c) {
    hashobj *h;
    if (lookup_hash(c, 0, &h) < 0) return;
    resp_add_int(&c->out, (long long)hsize(h));
}

void hstrlenCommand(client *c) {
    hashobj *h;
    if (lookup_hash(c, 0, &h) < 0) return;
    dict_entry *e = h ? dict_find(h->d, c->argv[2], c->argvlen[2]) : NULL;
    resp_add_int(&c->out, e ? (long long)e->vlen : 0);
}

void hexistsCommand(client *c) {
    hashobj *h;
    if (lookup_hash(c, 0, &h) < 0) return;
    resp_add_int(&c->out, h && dict_find(h->d, c->argv[2], c->argvlen[2]) ? 1 : 0);
}

#define WANT_KEYS 1
#define WANT_VALS 2

typedef struct getall_ctx {
    client *c;
    int what;
} getall_ctx;

static int getall_fn(void *arg, const dict_entry *e) {
    getall_ctx *g = arg;
    if (g->what & WANT_KEYS) resp_add_bulk(&g->c->out, e->key, e->klen);
    if (g->what & WANT_VALS) resp_add_bulk(&g->c->out, e->vlen ? e->val : "", e->vlen);
    return 0;
}

static void getall_generic(client *c, int what) {
    hashobj *h;
    getall_ctx g = {c, what};
    if (lookup_hash(c, 0, &h) < 0) return;
    long long n = (long long)hsize(h);
    if (what == (WANT_KEYS | WANT_VALS)) resp_add_map(&c->out, n);
    else resp_add_array(&c->out, n);
    if (h) hash_foreach(h, getall_fn, &g);
}

void hgetallCommand(client *c) { getall_generic(c, WANT_KEYS | WANT_VALS); }
void hkeysCommand(client *c) { getall_generic(c, WANT_KEYS); }
void hvalsCommand(client *c) { getall_generic(c, WANT_VALS); }

/* ---------------- HRANDFIELD ---------------- */

static int collect_fn(void *arg, const dict_entry *e) {
    const dict_entry ***p = arg;
    *(*p)++ = e;
    return 0;
}

static void add_pair(client *c, const dict_entry *e, int withvalues) {
    if (withvalues && c->out.proto == 3) resp_add_array(&c->out, 2);
    resp_add_bulk(&c->out, e->key, e->klen);
    if (withvalues) resp_add_bulk(&c->out, e->vlen ? e->val : "", e->vlen);
}

static void hrandfield_count(client *c, long long count, int withvalues) {
    hashobj *h;
    int r = lookup_hash(c, 0, &h);
    if (r < 0) return;
    if (r == 0 || count == 0) {
        resp_add_array(&c->out, 0);
        return;
    }
    size_t size = dict_size(h->d);
    int flat = withvalues && c->out.proto == 2;
    if (count < 0) {
        /* Repeats allowed: independent draws, as many as the client asks
         * for; bounded by its output limit as SRANDMEMBER's are. */
        long long n = -count;
        if (!resp_out_fits(&c->out, (unsigned long long)n, RESP_MIN_BULK * (withvalues ? 2 : 1)))
            return;
        resp_add_array(&c->out, flat ? n * 2 : n);
        for (long long i = 0; i < n && !c->out.overflow; i++)
            add_pair(c, dict_random(h->d, rnd64()), withvalues);
        return;
    }
    if ((unsigned long long)count >= size) {
        getall_ctx g = {c, WANT_KEYS | (withvalues ? WANT_VALS : 0)};
        resp_add_array(&c->out, flat ? (long long)size * 2 : (long long)size);
        if (withvalues && c->out.proto == 3) {
            /* RESP3: each pair is its own two-element array. */
            const dict_entry **all = malloc(sizeof(*all) * size), **p = all;
            if (!all) abort();
            hash_foreach(h, collect_fn, &p);
            for (size_t i = 0; i < size; i++) add_pair(c, all[i], 1);
            free(all);
        } else {
            hash_foreach(h, getall_fn, &g);
        }
        return;
    }
    const dict_entry **picked = malloc(sizeof(*picked) * (size_t)count);
    if (!picked) abort();
    dict_pick_distinct(h->d, (size_t)count, picked, rnd64);
    resp_add_array(&c->out, flat ? count * 2 : count);
    for (long long i = 0; i < count; i++) add_pair(c, picked[i], withvalues);
    free(picked);
}

void hrandfieldCommand(client *c) {
    hashobj *h;
    long long count;
    int withvalues = 0, r;

    if (c->argc >= 3) {
        if (arg_ll_range(c, 2, -LLONG_MAX, LLONG_MAX, &count, NULL) != 0) return;
        if (c->argc > 4 || (c->argc == 4 && !arg_is(c, 3, "withvalues"))) {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
        if (c->argc == 4) {
            withvalues = 1;
            if (count < -LLONG_MAX / 2 || count > LLONG_MAX / 2) {
                resp_add_error(&c->out, "ERR value is out of range");
                return;
            }
        }
        hrandfield_count(c, count, withvalues);
        return;
    }
    r = lookup_hash(c, 0, &h);
    if (r < 0) return;
    if (r == 0) {
        resp_add_null(&c->out);
        return;
    }
    const dict_entry *e = dict_random(h->d, rnd64());
    resp_add_bulk(&c->out, e->key, e->klen);
}

/* ---------------- HSCAN ---------------- */

typedef struct hscan_ctx {
    client *c;
    const char *pat;
    size_t plen;
    int novalues;
    long long n;
} hscan_ctx;

static void hscan_fn(void *arg, const dict_entry *e) {
    hscan_ctx *s = arg;
    if (s->pat && !stringmatchlen(s->pat, s->plen, e->key, e->klen, 0)) return;
    resp_add_bulk(&s->c->out, e->key, e->klen);
    s->n++;
    if (!s->novalues) {
        resp_add_bulk(&s->c->out, e->vlen ? e->val : "", e->vlen);
        s->n++;
    }
}

static int hscan_all_fn(void *arg, const dict_entry *e) {
    hscan_fn(arg, e);
    return 0;
}

void hscanCommand(client *c) {
    hashobj *h;
    uint64_t cursor;
    long long count = 10;
    hscan_ctx s = {c, NULL, 0, 0, 0};
    int r;

    if (arg_cursor(c, 2, &cursor) != 0) return;
    r = lookup_hash(c, 0, &h);
    if (r < 0) return;
    if (r == 0) {
        reply_scan_header(c, 0, 0);
        return;
    }
    if (arg_scan_options(c, 3, &count, &s.pat, &s.plen, &s.novalues) != 0) return;
    scan_page page;
    scan_page_begin(c, &page);
    if (!h->big) {
        /* Like Redis's listpack encoding: everything in one call. */
        hash_foreach(h, hscan_all_fn, &s);
        cursor = 0;
    } else {
        cursor = dict_scan(h->d, cursor, count, hscan_fn, &s);
    }
    scan_page_end(c, &page, cursor, s.n);
}
