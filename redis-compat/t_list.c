/* t_list.c -- the list commands (issue 3).
 *
 * The list type itself (its ring buffer, effects, snapshot and class) is
 * src/types/type_list.c: every list write is logged as element effects,
 * never as the command, each payload starting with the length the list has
 * before them (list_ops_begin). A command whose effects would empty the
 * list deletes the key instead (db_del).
 *
 * Replies, errors and the order arguments are checked in follow Redis 7.2.
 * Reads Redis does with lookupKeyRead use db_lookup, the others db_peek.
 * Commands that reply before writing take the reply back on DB_OOM.
 *
 * Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) are here too;
 * blocking.c keeps the waiting clients and re-runs their command when a
 * key they wait for gets elements. Every write that adds elements calls
 * blocking_signal_key. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocking.h"
#include "commands.h"
#include "notify.h"
#include "le.h"
#include "object.h"
#include "server.h"
#include "type_list.h"
#include "util.h"

/* ---------------- shared helpers ---------------- */

enum { LIST_HEAD = 0, LIST_TAIL = 1 };

/* Look argv[i] up as a list. 1 found, 0 missing, -1 another type
 * (WRONGTYPE replied). for_write picks db_peek (no hit/miss counted). */
static int lookup_list(client *c, int i, db_val *v, int for_write) {
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], v);
    if (!found) return 0;
    if (v->type != OBJ_LIST) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    /* Never produced by the live path; recovery may leave one behind when
     * a key's first effect was refused (see LOP_LEN above). */
    if (((const rlist *)v->obj->data)->n == 0) return 0;
    return 1;
}

static rlist *LST(const db_val *v) { return (rlist *)v->obj->data; }

/* Replace whatever this command replied so far with the OOM error. */
static void reply_oom(client *c, size_t reply_start) {
    c->out.b.len = reply_start;
    resp_add_error(&c->out, db_error_text(&c->x));
}

/* Log + apply ops on argv[i]'s list; frees ops. DB_OK or DB_OOM. */
static int list_write(client *c, int i, rbuf *ops) {
    int r = db_obj_write_ops(&c->x, c->db, c->argv[i], c->argvlen[i], OBJ_LIST, ops);
    rbuf_free(ops);
    return r;
}

static int list_delete(client *c, int i) {
    int r = db_del(&c->x, c->db, c->argv[i], c->argvlen[i]);
    return r == DB_OOM ? DB_OOM : DB_OK;
}

static void add_elem(client *c, const lelem *e) { resp_add_bulk(&c->out, e->b, e->len); }

/* getPositiveLongFromObjectOrReply. */
static int arg_positive(client *c, int i, long long *v, const char *msg) {
    return arg_ll_range(c, i, 0, LLONG_MAX, v, msg ? msg : "ERR value is out of range, must be positive");
}

/* LEFT / RIGHT, else a syntax error. */
static int arg_where(client *c, int i, int *where) {
    if (arg_is(c, i, "left")) *where = LIST_HEAD;
    else if (arg_is(c, i, "right")) *where = LIST_TAIL;
    else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return -1;
    }
    return 0;
}

/* ---------------- push ---------------- */

/* LPUSH/RPUSH (xx = 0) and LPUSHX/RPUSHX (xx = 1). */
static void push_generic(client *c, int where, int xx) {
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found && xx) {
        resp_add_int(&c->out, 0);
        return;
    }
    size_t n = found ? LST(&v)->n : 0;
    rbuf ops;
    list_ops_begin(&ops, n);
    uint8_t op = where == LIST_HEAD ? LOP_PUSH_HEAD : LOP_PUSH_TAIL;
    int last = c->argc - 1;
    for (int j = 2; j < last; j++) obj_op(&ops, op, c->argv[j], c->argvlen[j]);
    /* the last element goes in place, not copied into ops */
    obj_op_head(&ops, op, c->argvlen[last]);
    int r = db_obj_write_ops_tail(&c->x, c->db, c->argv[1], c->argvlen[1], OBJ_LIST, &ops,
                                  c->argv[last], c->argvlen[last]);
    rbuf_free(&ops);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    blocking_signal_key(c->db, c->argv[1], c->argvlen[1]);
    notify_key(c, NOTIFY_LIST, where == LIST_HEAD ? "lpush" : "rpush", 1);
    resp_add_int(&c->out, (long long)(n + (size_t)(c->argc - 2)));
}

void lpushCommand(client *c) { push_generic(c, LIST_HEAD, 0); }
void rpushCommand(client *c) { push_generic(c, LIST_TAIL, 0); }
void lpushxCommand(client *c) { push_generic(c, LIST_HEAD, 1); }
void rpushxCommand(client *c) { push_generic(c, LIST_TAIL, 1); }

/* ---------------- pop ---------------- */

/* Pop up to count elements of argv[ki]'s list (found, non-empty) from
 * `where`, appending them to the reply as bulks (the caller wrote any
 * array header). Returns how many, or -1 after replying OOM (the reply
 * from reply_start on is replaced). */
static long long pop_and_reply(client *c, int ki, db_val *v, int where, long long count,
                               size_t reply_start) {
    rlist *l = LST(v);
    size_t n = l->n;
    size_t k = count > 0 && (unsigned long long)count < n ? (size_t)count : n;
    for (size_t j = 0; j < k; j++) add_elem(c, rl_at(l, where == LIST_HEAD ? j : n - 1 - j));
    int r;
    if (k == n) {
        r = list_delete(c, ki);
    } else {
        rbuf ops;
        list_ops_begin(&ops, n);
        list_op_u64(&ops, where == LIST_HEAD ? LOP_POP_HEAD : LOP_POP_TAIL, k);
        r = list_write(c, ki, &ops);
    }
    if (r == DB_OOM) {
        reply_oom(c, reply_start);
        return -1;
    }
    notify_key(c, NOTIFY_LIST, where == LIST_HEAD ? "lpop" : "rpop", ki);
    if (k == n) notify_key(c, NOTIFY_GENERIC, "del", ki);
    return (long long)k;
}

static void pop_generic(client *c, int where) {
    long long count = 0;
    int hascount = c->argc == 3;
    if (c->argc > 3) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", c->cmd->name);
        return;
    }
    if (hascount && arg_positive(c, 2, &count, NULL) != 0) return;
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        if (hascount) resp_add_null_array(&c->out);
        else resp_add_null(&c->out);
        return;
    }
    if (hascount && count == 0) {
        resp_add_array(&c->out, 0);
        return;
    }
    size_t start = c->out.b.len;
    if (hascount) {
        size_t n = LST(&v)->n;
        resp_add_array(&c->out, (unsigned long long)count < n ? count : (long long)n);
    }
    pop_and_reply(c, 1, &v, where, hascount ? count : 1, start);
}

void lpopCommand(client *c) { pop_generic(c, LIST_HEAD); }
void rpopCommand(client *c) { pop_generic(c, LIST_TAIL); }

/* ---------------- reads ---------------- */

void llenCommand(client *c) {
    db_val v;
    int found = lookup_list(c, 1, &v, 0);
    if (found < 0) return;
    resp_add_int(&c->out, found ? (long long)LST(&v)->n : 0);
}

void lrangeCommand(client *c) {
    long long start, end;
    if (arg_ll(c, 2, &start) != 0 || arg_ll(c, 3, &end) != 0) return;
    db_val v;
    int found = lookup_list(c, 1, &v, 0);
    if (found < 0) return;
    if (!found) {
        resp_add_array(&c->out, 0);
        return;
    }
    rlist *l = LST(&v);
    long long n = (long long)l->n;
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (start > end || start >= n) {
        resp_add_array(&c->out, 0);
        return;
    }
    if (end >= n) end = n - 1;
    resp_add_array(&c->out, end - start + 1);
    for (long long i = start; i <= end; i++) add_elem(c, rl_at(l, (size_t)i));
}

void lindexCommand(client *c) {
    long long idx;
    db_val v;
    int found = lookup_list(c, 1, &v, 0);
    if (found < 0) return;
    if (!found) {
        resp_add_null(&c->out);
        return;
    }
    if (arg_ll(c, 2, &idx) != 0) return;
    rlist *l = LST(&v);
    long long n = (long long)l->n;
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) resp_add_null(&c->out);
    else add_elem(c, rl_at(l, (size_t)idx));
}

void lposCommand(client *c) {
    const char *ele = c->argv[2];
    size_t elen = c->argvlen[2];
    int direction = LIST_TAIL;
    long long rank = 1, count = -1, maxlen = 0;
    for (int j = 3; j < c->argc; j++) {
        int moreargs = c->argc - 1 - j;
        if (arg_is(c, j, "rank") && moreargs) {
            j++;
            if (arg_ll_range(c, j, -LLONG_MAX, LLONG_MAX, &rank, NULL) != 0) return;
            if (rank == 0) {
                resp_add_error(&c->out, "ERR RANK can't be zero: use 1 to start from the first "
                               "match, 2 from the second ... or use negative to start from the "
                               "end of the list");
                return;
            }
        } else if (arg_is(c, j, "count") && moreargs) {
            j++;
            if (arg_positive(c, j, &count, "ERR COUNT can't be negative") != 0) return;
        } else if (arg_is(c, j, "maxlen") && moreargs) {
            j++;
            if (arg_positive(c, j, &maxlen, "ERR MAXLEN can't be negative") != 0) return;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (rank < 0) {
        rank = -rank;
        direction = LIST_HEAD;
    }
    db_val v;
    int found = db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v);
    if (!found) {
        if (count != -1) resp_add_array(&c->out, 0);
        else resp_add_null(&c->out);
        return;
    }
    if (v.type != OBJ_LIST) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return;
    }
    rlist *l = LST(&v);
    long long n = (long long)l->n, matches = 0;
    if (n == 0 && count == -1) {
        resp_add_null(&c->out);
        return;
    }
    /* Matches go to a scratch array first: the reply's length comes first. */
    long long *hits = NULL;
    size_t nhits = 0, caphits = 0;
    long long single = -1;
    for (long long idx = 0; idx < n && (maxlen == 0 || idx < maxlen); idx++) {
        long long pos = direction == LIST_TAIL ? idx : n - idx - 1;
        if (!elem_eq(rl_at(l, (size_t)pos), ele, elen)) continue;
        matches++;
        if (matches < rank) continue;
        if (count == -1) {
            single = pos;
            break;
        }
        if (nhits == caphits) {
            caphits = caphits ? caphits * 2 : 16;
            hits = realloc(hits, sizeof(long long) * caphits);
            if (!hits) abort();
        }
        hits[nhits++] = pos;
        if (count && matches - rank + 1 >= count) break;
    }
    if (count != -1) {
        resp_add_array(&c->out, (long long)nhits);
        for (size_t i = 0; i < nhits; i++) resp_add_int(&c->out, hits[i]);
    } else if (single >= 0) {
        resp_add_int(&c->out, single);
    } else {
        resp_add_null(&c->out);
    }
    free(hits);
}

/* ---------------- in-place writes ---------------- */

void lsetCommand(client *c) {
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_error(&c->out, ERR_NOKEY);
        return;
    }
    long long idx;
    if (arg_ll(c, 2, &idx) != 0) return;
    rlist *l = LST(&v);
    long long n = (long long)l->n;
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) {
        resp_add_error(&c->out, "ERR index out of range");
        return;
    }
    rbuf ops;
    list_ops_begin(&ops, l->n);
    list_op_u64_elem(&ops, LOP_SET, (uint64_t)idx, c->argv[3], c->argvlen[3]);
    if (list_write(c, 1, &ops) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_LIST, "lset", 1);
    resp_add_ok(&c->out);
}

void linsertCommand(client *c) {
    int after;
    if (arg_is(c, 2, "after")) after = 1;
    else if (arg_is(c, 2, "before")) after = 0;
    else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_int(&c->out, 0);
        return;
    }
    rlist *l = LST(&v);
    size_t i;
    for (i = 0; i < l->n; i++)
        if (elem_eq(rl_at(l, i), c->argv[3], c->argvlen[3])) break;
    if (i == l->n) {
        resp_add_int(&c->out, -1);
        return;
    }
    size_t n = l->n;
    rbuf ops;
    list_ops_begin(&ops, n);
    list_op_u64_elem(&ops, LOP_INSERT, after ? i + 1 : i, c->argv[4], c->argvlen[4]);
    if (list_write(c, 1, &ops) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    blocking_signal_key(c->db, c->argv[1], c->argvlen[1]);
    notify_key(c, NOTIFY_LIST, "linsert", 1);
    resp_add_int(&c->out, (long long)n + 1);
}

void lremCommand(client *c) {
    long long toremove;
    if (arg_ll(c, 2, &toremove) != 0) return;
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_int(&c->out, 0);
        return;
    }
    rlist *l = LST(&v);
    size_t n = l->n;
    rbuf idx;
    rbuf_init(&idx);
    long long removed = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = toremove < 0 ? n - 1 - j : j;
        if (!elem_eq(rl_at(l, i), c->argv[3], c->argvlen[3])) continue;
        char p[8];
        le_put_u64(p, i);
        rbuf_append(&idx, p, 8);
        removed++;
        if (toremove && (removed == toremove || removed == -toremove)) break;
    }
    if (removed == 0) {
        rbuf_free(&idx);
        resp_add_int(&c->out, 0);
        return;
    }
    /* From the tail the indexes were found descending: the op wants them
     * ascending. */
    if (toremove < 0) {
        for (size_t a = 0, b = (size_t)removed - 1; a < b; a++, b--) {
            char t[8];
            memcpy(t, idx.buf + 8 * a, 8);
            memcpy(idx.buf + 8 * a, idx.buf + 8 * b, 8);
            memcpy(idx.buf + 8 * b, t, 8);
        }
    }
    int r;
    if ((size_t)removed == n) {
        r = list_delete(c, 1);
    } else {
        rbuf ops;
        list_ops_begin(&ops, n);
        obj_op(&ops, LOP_REMOVE, idx.buf, idx.len);
        r = list_write(c, 1, &ops);
    }
    rbuf_free(&idx);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_LIST, "lrem", 1);
    if ((size_t)removed == n) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_int(&c->out, removed);
}

void ltrimCommand(client *c) {
    long long start, end;
    if (arg_ll(c, 2, &start) != 0 || arg_ll(c, 3, &end) != 0) return;
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_ok(&c->out);
        return;
    }
    rlist *l = LST(&v);
    long long n = (long long)l->n;
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    long long keep;
    if (start > end || start >= n) {
        keep = 0;
    } else {
        if (end >= n) end = n - 1;
        keep = end - start + 1;
    }
    int r = DB_OK;
    if (keep == 0) {
        r = list_delete(c, 1);
    } else if (keep != n) {
        rbuf ops;
        list_ops_begin(&ops, (size_t)n);
        char p[16];
        le_put_u64(p, (uint64_t)start);
        le_put_u64(p + 8, (uint64_t)keep);
        obj_op(&ops, LOP_TRIM, p, 16);
        r = list_write(c, 1, &ops);
    }
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_LIST, "ltrim", 1);
    if (keep == 0) notify_key(c, NOTIFY_GENERIC, "del", 1);
    resp_add_ok(&c->out);
}

/* ---------------- LMOVE and friends ---------------- */

static int same_key(client *c, int a, int b) {
    return c->argvlen[a] == c->argvlen[b] && memcmp(c->argv[a], c->argv[b], c->argvlen[a]) == 0;
}

/* Move one element from argv[1]'s list (found: *src, non-empty) to
 * argv[2]'s, replying with the element. Checks the destination's type.
 * Both keys change in one log entry (a batch), or in one effect entry when
 * they are the same key. */
static void move_elem(client *c, db_val *src, int wherefrom, int whereto) {
    db_val dv;
    int same = same_key(c, 1, 2);
    int dfound = 0;
    if (!same) {
        dfound = lookup_list(c, 2, &dv, 1);
        if (dfound < 0) return;
    }
    rlist *sl = LST(src);
    size_t n = sl->n;
    const lelem *e = rl_at(sl, wherefrom == LIST_HEAD ? 0 : n - 1);
    uint8_t popop = wherefrom == LIST_HEAD ? LOP_POP_HEAD : LOP_POP_TAIL;
    uint8_t pushop = whereto == LIST_HEAD ? LOP_PUSH_HEAD : LOP_PUSH_TAIL;
    size_t reply_start = c->out.b.len;
    /* The reply and the ops copy the element before anything frees it. */
    add_elem(c, e);
    rbuf dops;
    list_ops_begin(&dops, same ? n : (dfound ? LST(&dv)->n : 0));
    if (same) list_op_u64(&dops, popop, 1);
    obj_op(&dops, pushop, e->b, e->len);
    int r;
    if (same) {
        r = list_write(c, 2, &dops);
    } else {
        int own = !c->x.batching;
        if (own) db_batch_begin(&c->x);
        if (n == 1) {
            r = list_delete(c, 1);
        } else {
            rbuf sops;
            list_ops_begin(&sops, n);
            list_op_u64(&sops, popop, 1);
            r = list_write(c, 1, &sops);
        }
        int r2 = list_write(c, 2, &dops);
        if (r == DB_OK) r = r2;
        if (own) {
            int r3 = db_batch_end(&c->x);
            if (r == DB_OK) r = r3;
        }
    }
    if (r == DB_OOM) {
        reply_oom(c, reply_start);
        return;
    }
    blocking_signal_key(c->db, c->argv[2], c->argvlen[2]);
    notify_key(c, NOTIFY_LIST, whereto == LIST_HEAD ? "lpush" : "rpush", 2);
    notify_key(c, NOTIFY_LIST, wherefrom == LIST_HEAD ? "lpop" : "rpop", 1);
    if (n == 1 && !same) notify_key(c, NOTIFY_GENERIC, "del", 1);
}

static void lmove_generic(client *c, int wherefrom, int whereto) {
    db_val v;
    int found = lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (!found) {
        resp_add_null(&c->out);
        return;
    }
    move_elem(c, &v, wherefrom, whereto);
}

void lmoveCommand(client *c) {
    int from, to;
    if (arg_where(c, 3, &from) != 0 || arg_where(c, 4, &to) != 0) return;
    lmove_generic(c, from, to);
}

void rpoplpushCommand(client *c) { lmove_generic(c, LIST_TAIL, LIST_HEAD); }

/* ---------------- LMPOP ---------------- */

/* Parse "numkeys key... LEFT|RIGHT [COUNT count]" starting at argv[ni].
 * Fills the first key's index, numkeys, where and count. */
static int parse_mpop(client *c, int ni, long long *numkeys, int *where, long long *count) {
    if (arg_ll_range(c, ni, 1, LLONG_MAX, numkeys, "ERR numkeys should be greater than 0") != 0)
        return -1;
    if (*numkeys > c->argc - ni - 2) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return -1;
    }
    int wi = ni + (int)*numkeys + 1;
    if (arg_where(c, wi, where) != 0) return -1;
    return arg_mpop_count(c, wi + 1, count);
}

/* Reply [key, [elements]] from argv[ki]'s list. */
static void mpop_reply(client *c, int ki, db_val *v, int where, long long count) {
    size_t start = c->out.b.len;
    size_t n = LST(v)->n;
    resp_add_array(&c->out, 2);
    resp_add_bulk(&c->out, c->argv[ki], c->argvlen[ki]);
    resp_add_array(&c->out, (unsigned long long)count < n ? count : (long long)n);
    pop_and_reply(c, ki, v, where, count, start);
}

void lmpopCommand(client *c) {
    long long numkeys, count;
    int where;
    if (parse_mpop(c, 1, &numkeys, &where, &count) != 0) return;
    for (int j = 2; j < 2 + numkeys; j++) {
        db_val v;
        int found = lookup_list(c, j, &v, 1);
        if (found < 0) return;
        if (!found) continue;
        mpop_reply(c, j, &v, where, count);
        return;
    }
    resp_add_null_array(&c->out);
}

/* ---------------- blocking commands ----------------
 * First run: serve at once when a key has elements (and no earlier waiter
 * on it comes first), else block (blocking.c) and reply nothing. When a key
 * gets elements, blocking.c re-runs the same command through the
 * dispatcher: serving replies (and blocking.c then unblocks the client),
 * finding nothing leaves it blocked (blocking_block is a no-op then).
 * Where blocking is not allowed (inside a batch: EXEC), the command answers
 * as if timed out at once. */

/* BLPOP/BRPOP (count -1, keys 1..argc-2, timeout last) and BLMPOP. */
static void blocking_pop(client *c, int first, int nkeys, int where, long long count,
                         int64_t deadline) {
    for (int j = first; j < first + nkeys; j++) {
        db_val v;
        if (blocking_rerun_skips(c, j, OBJ_LIST)) continue;
        int found = lookup_list(c, j, &v, 1);
        if (found < 0) return;
        if (!found || !blocking_may_take(c, c->argv[j], c->argvlen[j])) continue;
        if (count != -1) {
            mpop_reply(c, j, &v, where, count);
        } else {
            size_t start = c->out.b.len;
            resp_add_array(&c->out, 2);
            resp_add_bulk(&c->out, c->argv[j], c->argvlen[j]);
            pop_and_reply(c, j, &v, where, 1, start);
        }
        return;
    }
    if (!blocking_allowed(c)) {
        resp_add_null_array(&c->out);
        return;
    }
    blocking_block(c, first, nkeys, deadline);
}

static void bpop_generic(client *c, int where) {
    int64_t deadline;
    if (arg_block_deadline(c, c->argc - 1, &deadline) != 0) return;
    blocking_pop(c, 1, c->argc - 2, where, -1, deadline);
}

void blpopCommand(client *c) { bpop_generic(c, LIST_HEAD); }
void brpopCommand(client *c) { bpop_generic(c, LIST_TAIL); }

void blmpopCommand(client *c) {
    long long numkeys, count;
    int where;
    int64_t deadline;
    if (parse_mpop(c, 2, &numkeys, &where, &count) != 0) return;
    if (arg_block_deadline(c, 1, &deadline) != 0) return;
    blocking_pop(c, 3, (int)numkeys, where, count, deadline);
}

static void blmove_generic(client *c, int wherefrom, int whereto, int64_t deadline) {
    db_val v;
    int found = blocking_rerun_skips(c, 1, OBJ_LIST) ? 0 : lookup_list(c, 1, &v, 1);
    if (found < 0) return;
    if (found && blocking_may_take(c, c->argv[1], c->argvlen[1])) {
        move_elem(c, &v, wherefrom, whereto);
        return;
    }
    if (!blocking_allowed(c)) {
        resp_add_null(&c->out);
        return;
    }
    blocking_block(c, 1, 1, deadline);
}

void blmoveCommand(client *c) {
    int from, to;
    int64_t deadline;
    if (arg_where(c, 3, &from) != 0 || arg_where(c, 4, &to) != 0) return;
    if (arg_block_deadline(c, 5, &deadline) != 0) return;
    blmove_generic(c, from, to, deadline);
}

void brpoplpushCommand(client *c) {
    int64_t deadline;
    if (arg_block_deadline(c, 3, &deadline) != 0) return;
    blmove_generic(c, LIST_TAIL, LIST_HEAD, deadline);
}
