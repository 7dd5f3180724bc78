/* t_zset.c -- the sorted set commands.
 *
 * The sorted set type itself (its dict and skiplist, effects, snapshot,
 * encodings and class) is src/types/type_zset.c. Every command computes
 * the effects of what it does against the current contents (seeing its own
 * earlier effects, e.g. ZADD k 1 a 2 a), encodes them, and hands them to
 * db_obj_write, which logs them and applies them through the class: the
 * very code recovery replays them with. ZINCRBY logs the resulting score,
 * ZPOPMIN the members that left, ZREMRANGEBY* each member removed. A
 * command whose effects would empty the set deletes the key instead. The
 * *STORE commands build their result as a private object and write it as
 * one snapshot entry (db_set_copy), which replaces whatever the
 * destination held and clears its TTL, as Redis's setKey does.
 *
 * ZSCAN of a "listpack" set returns every element in one call, as Redis
 * does.
 *
 * ZUNION/ZINTER/ZDIFF (and STORE, ZINTERCARD) also take plain sets, every
 * member with score 1, as Redis does. A set's structure belongs to
 * src/types/type_set.c; its members are read through the set class's
 * snapshot, whose format is documented there and persisted in the log (u8
 * encoding, u32 count, then u32 length + bytes per member).
 *
 * Replies, errors and the order in which arguments are checked follow
 * Redis 7.2. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocking.h"
#include "commands.h"
#include "notify.h"
#include "dict.h"
#include "object.h"
#include "server.h"
#include "t_zset.h"
#include "type_zset.h"
#include "util.h"
#include "zskiplist.h"

/* A command's view of the set while it computes several effects: what it
 * has already decided (pend) over what the set holds. pend maps a member to
 * vlen 1 (now has .score) or vlen 0 (removed). Only needed when one command
 * may touch the same member twice. */
typedef struct zview {
    const zset *z;    /* NULL: the key does not exist yet */
    dict *pend;       /* NULL: single-element command */
} zview;

static int zview_get(const zview *v, const char *m, size_t mlen, double *score) {
    if (v->pend) {
        dict_entry *e = dict_find(v->pend, m, mlen);
        if (e) {
            if (!e->vlen) return 0;
            *score = e->score;
            return 1;
        }
    }
    return v->z ? zset_score(v->z, m, mlen, score) : 0;
}

static void zview_put(zview *v, const char *m, size_t mlen, double score) {
    if (!v->pend) return;
    dict_set(v->pend, m, mlen, "s", 1);
    dict_find(v->pend, m, mlen)->score = score;
}

static void zview_del(zview *v, const char *m, size_t mlen) {
    if (v->pend) dict_set(v->pend, m, mlen, NULL, 0);
}

/* ---------------- shared helpers ---------------- */

/* Look argv[i] up as a zset: 1 found, 0 missing, -1 another type
 * (WRONGTYPE replied). for_write picks db_peek (no hit/miss counting). */
int lookup_zset(client *c, int i, db_val *v, int for_write) {
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], v);
    if (!found) return 0;
    if (v->type != OBJ_ZSET) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    return 1;
}

static zset *zof(const db_val *v) { return v->obj->data; }

const zskiplist *zset_skiplist(const db_val *v) { return zof(v)->zsl; }

int zset_member_score(const db_val *v, const char *m, size_t mlen, double *score) {
    return zset_score(zof(v), m, mlen, score);
}

static int zwrite(client *c, int i, const rbuf *ops) {
    if (ops->len == 0) return DB_OK;
    return db_obj_write(&c->x, c->db, c->argv[i], c->argvlen[i], OBJ_ZSET, ops->buf, ops->len);
}

static int zdelete_key(client *c, int i) {
    return db_del(&c->x, c->db, c->argv[i], c->argvlen[i]) == DB_OOM ? DB_OOM : DB_OK;
}

static void reply_oom(client *c, size_t reply_start) {
    c->out.b.len = reply_start;
    resp_add_error(&c->out, db_error_text(&c->x));
}

/* A growable array of skiplist nodes: a range is collected first, so that
 * its length is known before the reply starts. */
typedef struct nodevec {
    zsl_node **v;
    size_t n, cap;
} nodevec;

static void nv_push(nodevec *nv, zsl_node *n) {
    if (nv->n == nv->cap) {
        nv->cap = nv->cap ? nv->cap * 2 : 16;
        nv->v = realloc(nv->v, nv->cap * sizeof(*nv->v));
        if (!nv->v) abort();
    }
    nv->v[nv->n++] = n;
}

static void nv_free(nodevec *nv) {
    free(nv->v);
    nv->v = NULL;
    nv->n = nv->cap = 0;
}

/* Members (and scores): RESP2 a flat array, RESP3 with scores an array of
 * [member, score] pairs. */
static void reply_nodes(client *c, const nodevec *nv, int withscores) {
    int pairs = withscores && c->out.proto >= 3;
    resp_add_array(&c->out, (long long)(withscores && !pairs ? nv->n * 2 : nv->n));
    for (size_t i = 0; i < nv->n; i++) {
        if (pairs) resp_add_array(&c->out, 2);
        resp_add_bulk(&c->out, nv->v[i]->member, nv->v[i]->mlen);
        if (withscores) resp_add_double(&c->out, nv->v[i]->score);
    }
}

/* strtod over the whole argument, like Redis's range parsing (which, unlike
 * string2d, lets strtod skip leading blanks and reads "" as 0). */
static int range_strtod(const char *s, size_t len, double *out) {
    char stackbuf[128], *buf = stackbuf, *end;
    if (len >= sizeof(stackbuf)) {
        buf = malloc(len + 1);
        if (!buf) abort();
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    *out = strtod(buf, &end);
    int ok = *end == '\0' && !isnan(*out);
    if (buf != stackbuf) free(buf);
    return ok;
}

/* One end of a score interval: "(x" excludes x. */
static int parse_score_bound(const char *s, size_t len, double *v, int *ex) {
    *ex = 0;
    if (len && s[0] == '(') {
        *ex = 1;
        s++;
        len--;
    }
    return range_strtod(s, len, v);
}

static int parse_score_range(client *c, int mini, int maxi, zrange_score *r) {
    if (!parse_score_bound(c->argv[mini], c->argvlen[mini], &r->min, &r->minex) ||
        !parse_score_bound(c->argv[maxi], c->argvlen[maxi], &r->max, &r->maxex)) {
        resp_add_error(&c->out, "ERR min or max is not a float");
        return -1;
    }
    return 0;
}

/* One end of a lex interval: "-", "+", "[member" or "(member". */
static int parse_lex_bound(const char *s, size_t len, int *kind, const char **v, size_t *vlen,
                           int *ex) {
    *ex = 0;
    *v = NULL;
    *vlen = 0;
    if (len == 0) return 0;
    switch (s[0]) {
    case '+':
        if (len != 1) return 0;
        *kind = ZLEX_POSINF;
        return 1;
    case '-':
        if (len != 1) return 0;
        *kind = ZLEX_NEGINF;
        return 1;
    case '(':
    case '[':
        *kind = ZLEX_VALUE;
        *ex = s[0] == '(';
        *v = s + 1;
        *vlen = len - 1;
        return 1;
    default:
        return 0;
    }
}

static int parse_lex_range(client *c, int mini, int maxi, zrange_lex *r) {
    if (!parse_lex_bound(c->argv[mini], c->argvlen[mini], &r->minkind, &r->min, &r->minlen,
                         &r->minex) ||
        !parse_lex_bound(c->argv[maxi], c->argvlen[maxi], &r->maxkind, &r->max, &r->maxlen,
                         &r->maxex)) {
        resp_add_error(&c->out, "ERR min or max not valid string range item");
        return -1;
    }
    return 0;
}

/* Redis's index rules for a rank range over llen elements: negative
 * indexes count from the end, start is clamped to 0 and end to the last
 * element. 0 when the range is empty. */
static int clamp_rank_range(long long *start, long long *end, long long llen) {
    if (*start < 0) *start += llen;
    if (*end < 0) *end += llen;
    if (*start < 0) *start = 0;
    if (*start > *end || *start >= llen) return 0;
    if (*end >= llen) *end = llen - 1;
    return 1;
}

/* ---------------- collecting ranges ---------------- */

static void collect_rank(const zset *z, long long start, long long end, int rev, nodevec *out) {
    unsigned long llen = z->zsl->length;
    zsl_node *n = rev ? zsl_at_rank(z->zsl, llen - (unsigned long)start)
                      : zsl_at_rank(z->zsl, (unsigned long)start + 1);
    for (long long i = start; i <= end && n; i++) {
        nv_push(out, n);
        n = rev ? n->backward : zsl_next(n);
    }
}

/* offset/limit as ZRANGEBYSCORE's LIMIT: a negative offset gives nothing,
 * a negative limit means no limit. */
static void collect_score(const zset *z, const zrange_score *r, int rev, long long offset,
                          long long limit, nodevec *out) {
    if (offset < 0 || (offset > 0 && (unsigned long long)offset >= z->zsl->length)) return;
    zsl_node *n = rev ? zsl_last_in_score(z->zsl, r) : zsl_first_in_score(z->zsl, r);
    while (n && offset--) n = rev ? n->backward : zsl_next(n);
    while (n && limit--) {
        if (rev ? !zsl_score_gte_min(n->score, r) : !zsl_score_lte_max(n->score, r)) break;
        nv_push(out, n);
        n = rev ? n->backward : zsl_next(n);
    }
}

/* Lex ranges are meant for sets whose scores are all equal. With mixed
 * scores the answer is whatever the search finds; for a small set that is
 * Redis's listpack walk (first element from the head at or above min, last
 * from the tail at or below max, after checking the two ends), which this
 * reproduces exactly. A big set searches the skiplist, like Redis's. */
static zsl_node *first_in_lex(const zset *z, const zrange_lex *r) {
    if (z->big) return zsl_first_in_lex(z->zsl, r);
    zsl_node *f = zsl_first(z->zsl), *l = z->zsl->tail;
    if (!f || zsl_lex_range_empty(r) || !zsl_lex_gte_min(l->member, l->mlen, r) ||
        !zsl_lex_lte_max(f->member, f->mlen, r))
        return NULL;
    for (zsl_node *n = f; n; n = zsl_next(n)) {
        if (zsl_lex_gte_min(n->member, n->mlen, r))
            return zsl_lex_lte_max(n->member, n->mlen, r) ? n : NULL;
    }
    return NULL;
}

static zsl_node *last_in_lex(const zset *z, const zrange_lex *r) {
    if (z->big) return zsl_last_in_lex(z->zsl, r);
    zsl_node *f = zsl_first(z->zsl), *l = z->zsl->tail;
    if (!f || zsl_lex_range_empty(r) || !zsl_lex_gte_min(l->member, l->mlen, r) ||
        !zsl_lex_lte_max(f->member, f->mlen, r))
        return NULL;
    for (zsl_node *n = l; n; n = n->backward) {
        if (zsl_lex_lte_max(n->member, n->mlen, r))
            return zsl_lex_gte_min(n->member, n->mlen, r) ? n : NULL;
    }
    return NULL;
}

static void collect_lex(const zset *z, const zrange_lex *r, int rev, long long offset,
                        long long limit, nodevec *out) {
    if (offset < 0 || (offset > 0 && (unsigned long long)offset >= z->zsl->length)) return;
    zsl_node *n = rev ? last_in_lex(z, r) : first_in_lex(z, r);
    while (n && offset--) n = rev ? n->backward : zsl_next(n);
    while (n && limit--) {
        if (rev ? !zsl_lex_gte_min(n->member, n->mlen, r)
                : !zsl_lex_lte_max(n->member, n->mlen, r))
            break;
        nv_push(out, n);
        n = rev ? n->backward : zsl_next(n);
    }
}

/* ---------------- storing a computed set ---------------- */

/* dst(argv[dsti]) := z (a private set), or deleted when z is empty; replies
 * with the new size and raises `event` (or "del"). One entry either way.
 * Frees z. */
static void store_result(client *c, int dsti, zset *z, const char *event) {
    size_t n = zset_len(z);
    zset_finish_result(z);
    int r, existed = 0;
    if (n == 0) {
        zset_destroy(z);
        existed = db_del(&c->x, c->db, c->argv[dsti], c->argvlen[dsti]);
        r = existed == DB_OOM ? DB_OOM : DB_OK;
    } else {
        robj *o = obj_new(OBJ_ZSET, 0, c->argv[dsti], c->argvlen[dsti]);
        zset_destroy(o->data);
        o->data = z;
        r = db_set_copy(&c->x, c->db, c->argv[dsti], c->argvlen[dsti], o, 0);
        obj_free(o);
    }
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    if (n) blocking_signal_key(c->db, c->argv[dsti], c->argvlen[dsti]);
    if (n) notify_key(c, NOTIFY_ZSET, event, dsti);
    else if (existed == 1) notify_key(c, NOTIFY_GENERIC, "del", dsti);
    resp_add_int(&c->out, (long long)n);
}

void *zset_result_new(void) { return zset_create_result(); }

void zset_result_add(void *z, const char *m, size_t mlen, double score) {
    zset_set(z, m, mlen, score);
}

/* GEORADIUS / GEOSEARCHSTORE ... STORE (t_geo.c), with Redis's event. */
void zset_store_result(client *c, int dsti, void *z) {
    store_result(c, dsti, z, !strcmp(c->cmd->name, "geosearchstore") ? "geosearchstore" : "georadiusstore");
}

/* ---------------- ZADD, ZINCRBY ---------------- */

#define ZADD_NX   (1 << 0)
#define ZADD_XX   (1 << 1)
#define ZADD_GT   (1 << 2)
#define ZADD_LT   (1 << 3)
#define ZADD_CH   (1 << 4)
#define ZADD_INCR (1 << 5)

static void zadd_generic(client *c, int flags) {
    static const struct { const char *name; int flag; } opts[] = {
        {"nx", ZADD_NX}, {"xx", ZADD_XX}, {"gt", ZADD_GT},
        {"lt", ZADD_LT}, {"ch", ZADD_CH}, {"incr", ZADD_INCR},
    };
    int scoreidx = 2;
    while (scoreidx < c->argc) {
        int matched = 0;
        for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
            if (arg_is(c, scoreidx, opts[k].name)) {
                flags |= opts[k].flag;
                matched = 1;
                break;
            }
        }
        if (!matched) break;
        scoreidx++;
    }
    int nx = flags & ZADD_NX, xx = flags & ZADD_XX, gt = flags & ZADD_GT, lt = flags & ZADD_LT;
    int incr = flags & ZADD_INCR;
    long elements = c->argc - scoreidx;
    if (elements % 2 || elements == 0) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    elements /= 2;
    if (nx && xx) {
        resp_add_error(&c->out, "ERR XX and NX options at the same time are not compatible");
        return;
    }
    if ((gt && nx) || (lt && nx) || (gt && lt)) {
        resp_add_error(&c->out, "ERR GT, LT, and/or NX options at the same time are not compatible");
        return;
    }
    if (incr && elements > 1) {
        resp_add_error(&c->out, "ERR INCR option supports a single increment-element pair");
        return;
    }
    double *scores = malloc(sizeof(double) * (size_t)elements);
    if (!scores) abort();
    for (long j = 0; j < elements; j++) {
        if (arg_double(c, scoreidx + (int)j * 2, &scores[j]) != 0) {
            free(scores);
            return;
        }
    }

    db_val v;
    int found = lookup_zset(c, 1, &v, 1);
    if (found < 0) {
        free(scores);
        return;
    }
    if (!found && xx) {
        free(scores);
        if (incr) resp_add_null(&c->out);
        else resp_add_int(&c->out, 0);
        return;
    }

    zview view = {found ? zof(&v) : NULL, elements > 1 ? dict_new() : NULL};
    rbuf ops;
    rbuf_init(&ops);
    long long added = 0, updated = 0;
    int processed = 0;
    double newscore = 0;
    for (long j = 0; j < elements; j++) {
        const char *m = c->argv[scoreidx + j * 2 + 1];
        size_t mlen = c->argvlen[scoreidx + j * 2 + 1];
        double score = scores[j], cur;
        if (zview_get(&view, m, mlen, &cur)) {
            if (nx) continue;
            if (incr) {
                score += cur;
                if (isnan(score)) {
                    resp_add_error(&c->out, "ERR resulting score is not a number (NaN)");
                    goto done;
                }
            }
            if ((lt && score >= cur) || (gt && score <= cur)) continue;
            processed = 1;
            newscore = score;
            if (score != cur) {
                zset_op_set(&ops, m, mlen, score);
                zview_put(&view, m, mlen, score);
                updated++;
            }
        } else if (!xx) {
            processed = 1;
            newscore = score;
            zset_op_set(&ops, m, mlen, score);
            zview_put(&view, m, mlen, score);
            added++;
        }
    }
    if (zwrite(c, 1, &ops) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        goto done;
    }
    if (added) blocking_signal_key(c->db, c->argv[1], c->argvlen[1]);
    if (added || updated) notify_key(c, NOTIFY_ZSET, incr ? "zincr" : "zadd", 1);
    if (incr) {
        if (processed) resp_add_double(&c->out, newscore);
        else resp_add_null(&c->out);
    } else {
        resp_add_int(&c->out, (flags & ZADD_CH) ? added + updated : added);
    }
done:
    rbuf_free(&ops);
    if (view.pend) dict_free(view.pend);
    free(scores);
}

void zaddCommand(client *c) { zadd_generic(c, 0); }
void zincrbyCommand(client *c) { zadd_generic(c, ZADD_INCR); }

/* ---------------- ZREM ---------------- */

void zremCommand(client *c) {
    db_val v;
    int found = lookup_zset(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_int(&c->out, 0);
        return;
    }
    zset *z = zof(&v);
    zview view = {z, c->argc > 3 ? dict_new() : NULL};
    rbuf ops;
    rbuf_init(&ops);
    long long deleted = 0;
    for (int j = 2; j < c->argc; j++) {
        double cur;
        if (!zview_get(&view, c->argv[j], c->argvlen[j], &cur)) continue;
        zset_op_del(&ops, c->argv[j], c->argvlen[j]);
        zview_del(&view, c->argv[j], c->argvlen[j]);
        deleted++;
    }
    int emptied = (size_t)deleted == zset_len(z);
    int r = emptied ? zdelete_key(c, 1) : zwrite(c, 1, &ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
    } else {
        if (deleted) notify_key(c, NOTIFY_ZSET, "zrem", 1);
        if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
        resp_add_int(&c->out, deleted);
    }
    rbuf_free(&ops);
    if (view.pend) dict_free(view.pend);
}

/* ---------------- simple reads ---------------- */

void zcardCommand(client *c) {
    db_val v;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    resp_add_int(&c->out, found ? (long long)zset_len(zof(&v)) : 0);
}

void zscoreCommand(client *c) {
    db_val v;
    double s;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    if (found && zset_score(zof(&v), c->argv[2], c->argvlen[2], &s)) resp_add_double(&c->out, s);
    else resp_add_null(&c->out);
}

void zmscoreCommand(client *c) {
    db_val v;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) {
        double s;
        if (found && zset_score(zof(&v), c->argv[j], c->argvlen[j], &s)) resp_add_double(&c->out, s);
        else resp_add_null(&c->out);
    }
}

static void zrank_generic(client *c, int rev) {
    int withscore = 0;
    if (c->argc > 4) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", c->cmd->name);
        return;
    }
    if (c->argc == 4) {
        if (!arg_is(c, 3, "withscore")) {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
        withscore = 1;
    }
    db_val v;
    double s;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    if (!found || !zset_score(zof(&v), c->argv[2], c->argvlen[2], &s)) {
        if (withscore) resp_add_null_array(&c->out);
        else resp_add_null(&c->out);
        return;
    }
    const zset *z = zof(&v);
    unsigned long rank = zsl_rank(z->zsl, s, c->argv[2], c->argvlen[2]);
    long long r = rev ? (long long)(z->zsl->length - rank) : (long long)rank - 1;
    if (withscore) {
        resp_add_array(&c->out, 2);
        resp_add_int(&c->out, r);
        resp_add_double(&c->out, s);
    } else {
        resp_add_int(&c->out, r);
    }
}

void zrankCommand(client *c) { zrank_generic(c, 0); }
void zrevrankCommand(client *c) { zrank_generic(c, 1); }

void zcountCommand(client *c) {
    zrange_score r;
    db_val v;
    if (parse_score_range(c, 2, 3, &r) != 0) return;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    long long count = 0;
    if (found) {
        const zset *z = zof(&v);
        zsl_node *f = zsl_first_in_score(z->zsl, &r);
        if (f) {
            zsl_node *l = zsl_last_in_score(z->zsl, &r);
            count = (long long)zsl_rank(z->zsl, l->score, l->member, l->mlen) -
                    (long long)zsl_rank(z->zsl, f->score, f->member, f->mlen) + 1;
        }
    }
    resp_add_int(&c->out, count);
}

void zlexcountCommand(client *c) {
    zrange_lex r;
    db_val v;
    if (parse_lex_range(c, 2, 3, &r) != 0) return;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    long long count = 0;
    if (found) {
        const zset *z = zof(&v);
        zsl_node *f = first_in_lex(z, &r);
        if (f && !z->big) {
            /* Count from the first match while in range (see first_in_lex). */
            for (; f && zsl_lex_lte_max(f->member, f->mlen, &r); f = zsl_next(f)) count++;
        } else if (f) {
            zsl_node *l = last_in_lex(z, &r);
            if (l)
                count = (long long)zsl_rank(z->zsl, l->score, l->member, l->mlen) -
                        (long long)zsl_rank(z->zsl, f->score, f->member, f->mlen) + 1;
        }
    }
    resp_add_int(&c->out, count);
}

/* ---------------- ZRANGE and friends ---------------- */

enum { ZR_AUTO = 0, ZR_RANK, ZR_SCORE, ZR_LEX };
enum { ZD_AUTO = 0, ZD_FWD, ZD_REV };

/* ZRANGE [dst] src min max [options]: argv[argc_start] is min; src is the
 * argument before it; with store, dst is argv[1]. rangetype and direction
 * are fixed by the legacy commands and AUTO (option-driven) for ZRANGE and
 * ZRANGESTORE. */
static void zrange_generic(client *c, int argc_start, int store, int rangetype, int direction) {
    int srci = argc_start - 1, mini = argc_start, maxi = argc_start + 1;
    long long offset = 0, limit = -1;
    int withscores = 0;

    for (int j = argc_start + 2; j < c->argc; j++) {
        int left = c->argc - j - 1;
        if (!store && arg_is(c, j, "withscores")) {
            withscores = 1;
        } else if (arg_is(c, j, "limit") && left >= 2) {
            if (arg_ll(c, j + 1, &offset) != 0 || arg_ll(c, j + 2, &limit) != 0) return;
            j += 2;
        } else if (direction == ZD_AUTO && arg_is(c, j, "rev")) {
            direction = ZD_REV;
        } else if (rangetype == ZR_AUTO && arg_is(c, j, "bylex")) {
            rangetype = ZR_LEX;
        } else if (rangetype == ZR_AUTO && arg_is(c, j, "byscore")) {
            rangetype = ZR_SCORE;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (direction == ZD_AUTO) direction = ZD_FWD;
    if (rangetype == ZR_AUTO) rangetype = ZR_RANK;
    /* Redis only looks at the count: "LIMIT 5 -1" passes with a rank range. */
    if (limit != -1 && rangetype == ZR_RANK) {
        resp_add_error(&c->out, "ERR syntax error, LIMIT is only supported in combination "
                                "with either BYSCORE or BYLEX");
        return;
    }
    if (withscores && rangetype == ZR_LEX) {
        resp_add_error(&c->out, "ERR syntax error, WITHSCORES not supported in combination with BYLEX");
        return;
    }
    int rev = direction == ZD_REV;
    if (rev && rangetype != ZR_RANK) {
        int t = mini;
        mini = maxi;
        maxi = t;
    }

    long long start = 0, end = 0;
    zrange_score sr;
    zrange_lex lr;
    if (rangetype == ZR_RANK) {
        if (arg_ll(c, mini, &start) != 0 || arg_ll(c, maxi, &end) != 0) return;
    } else if (rangetype == ZR_SCORE) {
        if (parse_score_range(c, mini, maxi, &sr) != 0) return;
    } else {
        if (parse_lex_range(c, mini, maxi, &lr) != 0) return;
    }

    db_val v;
    int found = lookup_zset(c, srci, &v, 0);
    if (found < 0) return;
    nodevec nv = {0};
    if (found) {
        const zset *z = zof(&v);
        if (rangetype == ZR_RANK) {
            if (clamp_rank_range(&start, &end, (long long)zset_len(z)))
                collect_rank(z, start, end, rev, &nv);
        } else if (rangetype == ZR_SCORE) {
            collect_score(z, &sr, rev, offset, limit, &nv);
        } else {
            collect_lex(z, &lr, rev, offset, limit, &nv);
        }
    }
    if (store) {
        zset *dst = zset_create_result();
        for (size_t i = 0; i < nv.n; i++) zset_set(dst, nv.v[i]->member, nv.v[i]->mlen, nv.v[i]->score);
        store_result(c, 1, dst, "zrangestore");
    } else {
        reply_nodes(c, &nv, withscores);
    }
    nv_free(&nv);
}

void zrangeCommand(client *c) { zrange_generic(c, 2, 0, ZR_AUTO, ZD_AUTO); }
void zrangestoreCommand(client *c) { zrange_generic(c, 3, 1, ZR_AUTO, ZD_AUTO); }
void zrevrangeCommand(client *c) { zrange_generic(c, 2, 0, ZR_RANK, ZD_REV); }
void zrangebyscoreCommand(client *c) { zrange_generic(c, 2, 0, ZR_SCORE, ZD_FWD); }
void zrevrangebyscoreCommand(client *c) { zrange_generic(c, 2, 0, ZR_SCORE, ZD_REV); }
void zrangebylexCommand(client *c) { zrange_generic(c, 2, 0, ZR_LEX, ZD_FWD); }
void zrevrangebylexCommand(client *c) { zrange_generic(c, 2, 0, ZR_LEX, ZD_REV); }

/* ---------------- removing ranges ---------------- */

/* Delete the collected members: the whole key when that is all of them. */
static void remove_nodes(client *c, const zset *z, const nodevec *nv, const char *event) {
    int emptied = nv->n && nv->n == zset_len(z);
    int r;
    if (nv->n == zset_len(z)) {
        r = nv->n ? zdelete_key(c, 1) : DB_OK;
    } else {
        rbuf ops;
        rbuf_init(&ops);
        for (size_t i = 0; i < nv->n; i++) zset_op_del(&ops, nv->v[i]->member, nv->v[i]->mlen);
        r = zwrite(c, 1, &ops);
        rbuf_free(&ops);
    }
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    if (nv->n) notify_key(c, NOTIFY_ZSET, event, 1);
    if (emptied) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_int(&c->out, (long long)nv->n);
}

static void zremrange_generic(client *c, int rangetype) {
    long long start = 0, end = 0;
    zrange_score sr;
    zrange_lex lr;
    if (rangetype == ZR_RANK) {
        if (arg_ll(c, 2, &start) != 0 || arg_ll(c, 3, &end) != 0) return;
    } else if (rangetype == ZR_SCORE) {
        if (parse_score_range(c, 2, 3, &sr) != 0) return;
    } else {
        if (parse_lex_range(c, 2, 3, &lr) != 0) return;
    }
    db_val v;
    int found = lookup_zset(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_int(&c->out, 0);
        return;
    }
    const zset *z = zof(&v);
    nodevec nv = {0};
    if (rangetype == ZR_RANK) {
        if (clamp_rank_range(&start, &end, (long long)zset_len(z))) collect_rank(z, start, end, 0, &nv);
    } else if (rangetype == ZR_SCORE) {
        collect_score(z, &sr, 0, 0, -1, &nv);
    } else {
        collect_lex(z, &lr, 0, 0, -1, &nv);
    }
    static const char *const events[] = {[ZR_RANK] = "zremrangebyrank",
        [ZR_SCORE] = "zremrangebyscore", [ZR_LEX] = "zremrangebylex"};
    remove_nodes(c, z, &nv, events[rangetype]);
    nv_free(&nv);
}

void zremrangebyrankCommand(client *c) { zremrange_generic(c, ZR_RANK); }
void zremrangebyscoreCommand(client *c) { zremrange_generic(c, ZR_SCORE); }
void zremrangebylexCommand(client *c) { zremrange_generic(c, ZR_LEX); }

/* ---------------- ZPOPMIN, ZPOPMAX, ZMPOP ---------------- */

/* Reply shapes: ZPOPMIN's elements (flat or nested pairs), ZMPOP's
 * [key, [[member, score]...]] (nil when nothing), BZPOPMIN's
 * [key, member, score]. */
enum { ZPOP_PLAIN, ZPOP_MPOP, ZPOP_BZPOP };

/* Pop up to count (-1: one) elements from the first non-empty key among
 * argv[first..first+nkeys-1] and reply in the given shape. */
static void zpop_generic(client *c, int first, int nkeys, int max, long long count, int shape,
                         int nested) {
    int emitkey = shape != ZPOP_PLAIN;
    db_val v;
    int keyi = -1;
    for (int i = first; i < first + nkeys; i++) {
        int found = lookup_zset(c, i, &v, 1);
        if (found < 0) return;
        if (found) {
            keyi = i;
            break;
        }
    }
    if (count == 0) {
        resp_add_array(&c->out, 0);
        return;
    }
    if (keyi < 0) {
        if (emitkey) resp_add_null_array(&c->out);
        else resp_add_array(&c->out, 0);
        return;
    }
    const zset *z = zof(&v);
    size_t n = count < 0 ? 1 : (size_t)count;
    if (n > zset_len(z)) n = zset_len(z);

    nodevec nv = {0};
    zsl_node *x = max ? z->zsl->tail : zsl_first(z->zsl);
    for (size_t i = 0; i < n && x; i++) {
        nv_push(&nv, x);
        x = max ? x->backward : zsl_next(x);
    }
    size_t reply_start = c->out.b.len;
    if (shape == ZPOP_BZPOP) {
        resp_add_array(&c->out, 3);
        resp_add_bulk(&c->out, c->argv[keyi], c->argvlen[keyi]);
    } else {
        if (emitkey) {
            resp_add_array(&c->out, 2);
            resp_add_bulk(&c->out, c->argv[keyi], c->argvlen[keyi]);
        }
        resp_add_array(&c->out, (long long)(nested ? nv.n : nv.n * 2));
    }
    for (size_t i = 0; i < nv.n; i++) {
        if (nested) resp_add_array(&c->out, 2);
        resp_add_bulk(&c->out, nv.v[i]->member, nv.v[i]->mlen);
        resp_add_double(&c->out, nv.v[i]->score);
    }
    /* The reply holds copies; now the effects (which free the nodes). */
    int r, emptied = nv.n == zset_len(z);
    if (emptied) {
        r = zdelete_key(c, keyi);
    } else {
        rbuf ops;
        rbuf_init(&ops);
        for (size_t i = 0; i < nv.n; i++) zset_op_del(&ops, nv.v[i]->member, nv.v[i]->mlen);
        r = zwrite(c, keyi, &ops);
        rbuf_free(&ops);
    }
    if (r == DB_OOM) {
        reply_oom(c, reply_start);
    } else {
        notify_key(c, NOTIFY_ZSET, max ? "zpopmax" : "zpopmin", keyi);
        if (emptied) notify_key(c, NOTIFY_GENERIC, "del", keyi);
    }
    nv_free(&nv);
}

static void zpopminmax(client *c, int max) {
    long long count = -1;
    if (c->argc > 3) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (c->argc == 3 && arg_ll_range(c, 2, 0, LLONG_MAX, &count,
                                     "ERR value is out of range, must be positive") != 0)
        return;
    zpop_generic(c, 1, 1, max, count, ZPOP_PLAIN, c->out.proto >= 3 && count != -1);
}

void zpopminCommand(client *c) { zpopminmax(c, 0); }
void zpopmaxCommand(client *c) { zpopminmax(c, 1); }

/* ZMPOP's and BZMPOP's "numkeys key [key ...] MIN|MAX [COUNT count]" from
 * argv[ni]. Replies and returns -1 on error. */
static int parse_zmpop(client *c, int ni, long long *numkeys, int *max, long long *count) {
    *count = -1;
    if (arg_ll_range(c, ni, 1, LLONG_MAX, numkeys, "ERR numkeys should be greater than 0") != 0)
        return -1;
    long long where = ni + *numkeys + 1;
    if (*numkeys >= c->argc || where >= c->argc) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return -1;
    }
    if (arg_is(c, (int)where, "min")) {
        *max = 0;
    } else if (arg_is(c, (int)where, "max")) {
        *max = 1;
    } else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return -1;
    }
    return arg_mpop_count(c, (int)where + 1, count);
}

void zmpopCommand(client *c) {
    long long numkeys, count;
    int max;
    if (parse_zmpop(c, 1, &numkeys, &max, &count) != 0) return;
    zpop_generic(c, 2, (int)numkeys, max, count, ZPOP_MPOP, 1);
}

/* ---------------- BZPOPMIN, BZPOPMAX, BZMPOP ----------------
 * Served at once when a key has elements (and no earlier blocked client
 * waits on it), else the client blocks (blocking.c), which re-runs the
 * command when a write signals one of its keys. Where blocking is not
 * allowed (inside EXEC) the answer is the timeout's: a null array. */

static void bzpop_generic(client *c, int first, int nkeys, int max, long long count, int shape,
                          int64_t deadline) {
    for (int j = first; j < first + nkeys; j++) {
        db_val v;
        if (blocking_rerun_skips(c, j, OBJ_ZSET)) continue;
        int found = lookup_zset(c, j, &v, 1);
        if (found < 0) return;
        if (!found || !blocking_may_take(c, c->argv[j], c->argvlen[j])) continue;
        zpop_generic(c, j, 1, max, count, shape, shape == ZPOP_MPOP);
        return;
    }
    if (!blocking_allowed(c)) {
        resp_add_null_array(&c->out);
        return;
    }
    blocking_block(c, first, nkeys, deadline);
}

static void bzpopminmax(client *c, int max) {
    int64_t deadline;
    if (arg_block_deadline(c, c->argc - 1, &deadline) != 0) return;
    bzpop_generic(c, 1, c->argc - 2, max, -1, ZPOP_BZPOP, deadline);
}

void bzpopminCommand(client *c) { bzpopminmax(c, 0); }
void bzpopmaxCommand(client *c) { bzpopminmax(c, 1); }

/* BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count] */
void bzmpopCommand(client *c) {
    long long numkeys, count;
    int max;
    int64_t deadline;
    if (parse_zmpop(c, 2, &numkeys, &max, &count) != 0) return;
    if (arg_block_deadline(c, 1, &deadline) != 0) return;
    bzpop_generic(c, 3, (int)numkeys, max, count, ZPOP_MPOP, deadline);
}

/* ---------------- ZUNION, ZINTER, ZDIFF (and STORE), ZINTERCARD ---------------- */

enum { ZOP_UNION, ZOP_INTER, ZOP_DIFF };
enum { AGG_SUM, AGG_MIN, AGG_MAX };

typedef struct zsrc {
    const zset *z;     /* NULL: missing key */
    zset *owned;       /* a plain set's members as a private zset (freed after) */
    double weight;
} zsrc;

/* A plain set's members, each with score 1, as a private zset; NULL if its
 * snapshot cannot be read. */
static zset *zset_from_set(const robj *o) {
    const obj_class *k = obj_class_of(OBJ_SET);
    if (!k || !k->snapshot) return NULL;
    rbuf b;
    rbuf_init(&b);
    k->snapshot(o->data, &b);
    zset *z = zset_create_result();
    size_t pos = 5;
    if (b.len < 5) goto bad;
    uint32_t n = obj_get_u32(b.buf + 1);
    for (uint32_t i = 0; i < n; i++) {
        if (b.len - pos < 4) goto bad;
        uint32_t mlen = obj_get_u32(b.buf + pos);
        pos += 4;
        if (mlen > b.len - pos) goto bad;
        zset_set(z, b.buf + pos, mlen, 1.0);
        pos += mlen;
    }
    if (pos != b.len) goto bad;
    rbuf_free(&b);
    return z;
bad:
    rbuf_free(&b);
    zset_destroy(z);
    return NULL;
}

static size_t src_len(const zsrc *s) { return s->z ? zset_len(s->z) : 0; }

static int cmp_src_len(const void *a, const void *b) {
    size_t x = src_len(a), y = src_len(b);
    return x < y ? -1 : x > y;
}

static void aggregate(double *target, double val, int agg) {
    if (agg == AGG_SUM) {
        *target += val;
        /* inf + -inf: Redis's convention is 0. */
        if (isnan(*target)) *target = 0.0;
    } else if (agg == AGG_MIN) {
        if (val < *target) *target = val;
    } else {
        if (val > *target) *target = val;
    }
}

static double weighted(double score, double weight) {
    double v = score * weight;
    return isnan(v) ? 0.0 : v;
}

/* dsti: argv index of the destination (0: reply instead). numkeys_i: argv
 * index of numkeys. card_only: ZINTERCARD. */
static void zsetop_generic(client *c, int dsti, int numkeys_i, int op, int card_only) {
    long long setnum, limit = 0;
    int agg = AGG_SUM, withscores = 0;

    if (arg_ll(c, numkeys_i, &setnum) != 0) return;
    if (setnum < 1) {
        resp_add_errorf(&c->out, "ERR at least 1 input key is needed for '%s' command",
                        c->cmd->name);
        return;
    }
    if (setnum > c->argc - (numkeys_i + 1)) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    zsrc *src = calloc((size_t)setnum, sizeof(*src));
    if (!src) abort();
    int j = numkeys_i + 1;
    for (long long i = 0; i < setnum; i++, j++) {
        db_val v;
        int found = dsti ? db_peek(&c->x, c->db, c->argv[j], c->argvlen[j], &v)
                         : db_lookup(&c->x, c->db, c->argv[j], c->argvlen[j], &v);
        src[i].weight = 1.0;
        if (found && v.type == OBJ_SET) {
            src[i].owned = zset_from_set(v.obj);
            src[i].z = src[i].owned;
            if (src[i].z) continue;
        }
        if (found && v.type != OBJ_ZSET) {
            resp_add_error(&c->out, ERR_WRONGTYPE);
            goto done;
        }
        src[i].z = found ? zof(&v) : NULL;
    }
    while (j < c->argc) {
        int remaining = c->argc - j;
        if (op != ZOP_DIFF && !card_only && remaining >= setnum + 1 && arg_is(c, j, "weights")) {
            j++;
            for (long long i = 0; i < setnum; i++, j++) {
                if (!string2d(c->argv[j], c->argvlen[j], &src[i].weight)) {
                    resp_add_error(&c->out, "ERR weight value is not a float");
                    goto done;
                }
            }
        } else if (op != ZOP_DIFF && !card_only && remaining >= 2 && arg_is(c, j, "aggregate")) {
            j++;
            if (arg_is(c, j, "sum")) agg = AGG_SUM;
            else if (arg_is(c, j, "min")) agg = AGG_MIN;
            else if (arg_is(c, j, "max")) agg = AGG_MAX;
            else {
                resp_add_error(&c->out, ERR_SYNTAX);
                goto done;
            }
            j++;
        } else if (remaining >= 1 && !dsti && !card_only && arg_is(c, j, "withscores")) {
            j++;
            withscores = 1;
        } else if (card_only && remaining >= 2 && arg_is(c, j, "limit")) {
            j++;
            if (arg_ll_range(c, j, 0, LLONG_MAX, &limit, "ERR LIMIT can't be negative") != 0)
                goto done;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto done;
        }
    }

    zset *res = zset_create_result();
    long long card = 0;
    if (op == ZOP_INTER) {
        /* Walk the smallest set; nothing if any input is empty. */
        qsort(src, (size_t)setnum, sizeof(*src), cmp_src_len);
        if (src_len(&src[0]) > 0) {
            for (zsl_node *n = zsl_first(src[0].z->zsl); n; n = zsl_next(n)) {
                double score = weighted(n->score, src[0].weight), other;
                long long i;
                for (i = 1; i < setnum; i++) {
                    if (!zset_score(src[i].z, n->member, n->mlen, &other)) break;
                    /* Only the first factor gets NaN -> 0 here (as in
                     * Redis); SUM turns a NaN total into 0 itself. */
                    aggregate(&score, other * src[i].weight, agg);
                }
                if (i < setnum) continue;
                if (card_only) {
                    card++;
                    if (limit && card >= limit) break;
                } else {
                    zset_set(res, n->member, n->mlen, score);
                }
            }
        }
    } else if (op == ZOP_UNION) {
        qsort(src, (size_t)setnum, sizeof(*src), cmp_src_len);
        for (long long i = 0; i < setnum; i++) {
            if (!src[i].z) continue;
            for (zsl_node *n = zsl_first(src[i].z->zsl); n; n = zsl_next(n)) {
                double score = weighted(n->score, src[i].weight), cur;
                if (zset_score(res, n->member, n->mlen, &cur)) {
                    aggregate(&cur, score, agg);
                    score = cur;
                }
                zset_set(res, n->member, n->mlen, score);
            }
        }
    } else if (src[0].z) {
        for (zsl_node *n = zsl_first(src[0].z->zsl); n; n = zsl_next(n)) {
            double other;
            long long i;
            for (i = 1; i < setnum; i++)
                if (src[i].z && zset_score(src[i].z, n->member, n->mlen, &other)) break;
            if (i == setnum) zset_set(res, n->member, n->mlen, n->score);
        }
    }

    if (card_only) {
        zset_destroy(res);
        resp_add_int(&c->out, card);
    } else if (dsti) {
        store_result(c, dsti, res, op == ZOP_UNION ? "zunionstore" : op == ZOP_INTER ? "zinterstore" : "zdiffstore");
    } else {
        nodevec nv = {0};
        for (zsl_node *n = zsl_first(res->zsl); n; n = zsl_next(n)) nv_push(&nv, n);
        reply_nodes(c, &nv, withscores);
        nv_free(&nv);
        zset_destroy(res);
    }
done:
    for (long long i = 0; i < setnum; i++) zset_destroy(src[i].owned);
    free(src);
}

void zunionCommand(client *c) { zsetop_generic(c, 0, 1, ZOP_UNION, 0); }
void zinterCommand(client *c) { zsetop_generic(c, 0, 1, ZOP_INTER, 0); }
void zdiffCommand(client *c) { zsetop_generic(c, 0, 1, ZOP_DIFF, 0); }
void zunionstoreCommand(client *c) { zsetop_generic(c, 1, 2, ZOP_UNION, 0); }
void zinterstoreCommand(client *c) { zsetop_generic(c, 1, 2, ZOP_INTER, 0); }
void zdiffstoreCommand(client *c) { zsetop_generic(c, 1, 2, ZOP_DIFF, 0); }
void zintercardCommand(client *c) { zsetop_generic(c, 0, 1, ZOP_INTER, 1); }

/* ---------------- ZRANDMEMBER ---------------- */

static void reply_member_score(client *c, const char *m, size_t mlen, double s, int withscores) {
    if (withscores && c->out.proto >= 3) resp_add_array(&c->out, 2);
    resp_add_bulk(&c->out, m, mlen);
    if (withscores) resp_add_double(&c->out, s);
}

static void zrandmember_count(client *c, long long l, int withscores) {
    unsigned long long count = l >= 0 ? (unsigned long long)l : (unsigned long long)(-l);
    int uniq = l >= 0;
    int pairs = withscores && c->out.proto >= 3;
    db_val v;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    if (!found || count == 0) {
        resp_add_array(&c->out, 0);
        return;
    }
    const zset *z = zof(&v);
    size_t size = zset_len(z);

    if (!uniq) {
        /* Repeats allowed: count independent draws, bounded by the
         * client's output limit as SRANDMEMBER's are. (A score is at least
         * 4 bytes: ",0\r\n".) */
        if (!resp_out_fits(&c->out, count, RESP_MIN_BULK + (withscores ? 4 : 0))) return;
        resp_add_array(&c->out, (long long)(withscores && !pairs ? count * 2 : count));
        for (unsigned long long i = 0; i < count && !c->out.overflow; i++) {
            dict_entry *e = dict_random(z->d, rnd64());
            reply_member_score(c, e->key, e->klen, e->score, withscores);
        }
        return;
    }
    if (count > size) count = size;
    /* Distinct: a partial Fisher-Yates shuffle of every node. */
    nodevec nv = {0};
    for (zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n)) nv_push(&nv, n);
    for (size_t i = 0; i < count && count < size; i++) {
        size_t k = i + (size_t)(rnd64() % (size - i));
        zsl_node *t = nv.v[i];
        nv.v[i] = nv.v[k];
        nv.v[k] = t;
    }
    resp_add_array(&c->out, (long long)(withscores && !pairs ? count * 2 : count));
    for (size_t i = 0; i < count; i++)
        reply_member_score(c, nv.v[i]->member, nv.v[i]->mlen, nv.v[i]->score, withscores);
    nv_free(&nv);
}

void zrandmemberCommand(client *c) {
    if (c->argc >= 3) {
        long long l;
        int withscores = 0;
        if (arg_ll_range(c, 2, -LLONG_MAX, LLONG_MAX, &l, NULL) != 0) return;
        if (c->argc > 4 || (c->argc == 4 && !arg_is(c, 3, "withscores"))) {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
        if (c->argc == 4) {
            withscores = 1;
            if (l < -LLONG_MAX / 2 || l > LLONG_MAX / 2) {
                resp_add_error(&c->out, "ERR value is out of range");
                return;
            }
        }
        zrandmember_count(c, l, withscores);
        return;
    }
    db_val v;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    if (!found) {
        resp_add_null(&c->out);
        return;
    }
    dict_entry *e = dict_random(zof(&v)->d, rnd64());
    resp_add_bulk(&c->out, e->key, e->klen);
}

/* ---------------- ZSCAN ---------------- */

typedef struct zscan_ctx {
    const char *pat;
    size_t plen;     /* pat NULL: everything */
    rbuf items;      /* u32 mlen, member, 8-byte score; repeated */
    long long n;
} zscan_ctx;

static void zscan_add(zscan_ctx *sc, const char *m, size_t mlen, double score) {
    if (sc->pat && !stringmatchlen(sc->pat, sc->plen, m, mlen, 0)) return;
    char hdr[12];
    hdr[0] = (char)(mlen & 0xff);
    hdr[1] = (char)((mlen >> 8) & 0xff);
    hdr[2] = (char)((mlen >> 16) & 0xff);
    hdr[3] = (char)((mlen >> 24) & 0xff);
    zset_put_score(hdr + 4, score);
    rbuf_append(&sc->items, hdr, sizeof(hdr));
    rbuf_append(&sc->items, m, mlen);
    sc->n++;
}

static void zscan_visit(void *arg, const dict_entry *e) {
    zscan_add(arg, e->key, e->klen, e->score);
}

void zscanCommand(client *c) {
    uint64_t cursor;
    long long count = 10;
    zscan_ctx sc = {NULL, 0, {0}, 0};
    db_val v;

    if (arg_cursor(c, 2, &cursor) != 0) return;
    int found = lookup_zset(c, 1, &v, 0);
    if (found < 0) return;
    if (!found) {
        reply_scan_header(c, 0, 0);
        return;
    }
    if (arg_scan_options(c, 3, &count, &sc.pat, &sc.plen, NULL) != 0) return;
    const zset *z = zof(&v);
    rbuf_init(&sc.items);
    if (!z->big) {
        /* What Redis keeps as a listpack is returned whole, cursor 0. */
        for (zsl_node *n = zsl_first(z->zsl); n; n = zsl_next(n))
            zscan_add(&sc, n->member, n->mlen, n->score);
        cursor = 0;
    } else {
        cursor = dict_scan(z->d, cursor, (long)count, zscan_visit, &sc);
    }
    char buf[64];
    int len;
    reply_scan_header(c, cursor, sc.n * 2);
    for (size_t pos = 0; pos < sc.items.len;) {
        uint32_t mlen = obj_get_u32(sc.items.buf + pos);
        double s = zset_get_score(sc.items.buf + pos + 4);
        pos += 12;
        resp_add_bulk(&c->out, sc.items.buf + pos, mlen);
        pos += mlen;
        len = d2string(buf, sizeof(buf), s);
        resp_add_bulk(&c->out, buf, (size_t)len);
    }
    rbuf_free(&sc.items);
}
