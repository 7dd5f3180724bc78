/* t_stream.c -- the stream commands.
 *
 * The stream type itself (its entries, nodes, consumer groups, effects,
 * snapshot and class) is src/types/type_stream.c. Commands encode effects
 * carrying absolute values (the ID an XADD chose, a delivery's time and
 * count), never "now" or "next", and db_obj_write logs them and applies
 * them through the class, the code recovery replays them with. DUMP's
 * Redis RDB form of a stream (stream_rdb_save, for rdb.c) is here too.
 *
 * Replies, error texts and checks follow Redis 7.0. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "blocking.h"
#include "commands.h"
#include "object.h"
#include "rdb.h"
#include "server.h"
#include "type_stream.h"
#include "util.h"

#define ERR_BADID "ERR Invalid stream ID specified as stream command argument"
/* XREAD BLOCK without COUNT: served at most this many entries (Redis). */
#define XREAD_BLOCKED_DEFAULT_COUNT 1000
#define SCG_INVALID_ENTRIES_READ (-1)
/* Entries one XREADGROUP call delivers at most (over all its streams,
 * whatever COUNT says): each becomes a 32-byte pending-entry effect, and a
 * command's effects must fit one log entry (4 MiB). The rest is left for
 * the next call. Redis has no such limit. */
#define STREAM_MAX_DELIVER 65536

static int sid_fmt(char *buf, sid a) {
    return snprintf(buf, 48, "%llu-%llu", (unsigned long long)a.ms, (unsigned long long)a.seq);
}

static void reply_sid(client *c, sid a) {
    char buf[48];
    int n = sid_fmt(buf, a);
    resp_add_bulk(&c->out, buf, (size_t)n);
}

/* Redis's string2ull: strtoull's leniency included (leading space, '+'). */
static int str2ull(const char *s, unsigned long long *v) {
    long long ll;
    if (string2ll(s, strlen(s), &ll)) {
        if (ll < 0) return 0;
        *v = (unsigned long long)ll;
        return 1;
    }
    char *end = NULL;
    errno = 0;
    *v = strtoull(s, &end, 10);
    if (errno == EINVAL || errno == ERANGE || !(*s != '\0' && *end == '\0')) return 0;
    return 1;
}

/* Redis's streamGenericParseIDOrReply. seq_given non-NULL allows "ms-*". */
static int parse_id(client *c, const char *p, size_t len, sid *id, uint64_t missing_seq,
                    int strict, int *seq_given) {
    char buf[128];
    unsigned long long ms, seq;
    if (len > sizeof(buf) - 1) goto invalid;
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (strict && (buf[0] == '-' || buf[0] == '+') && buf[1] == '\0') goto invalid;
    if (seq_given) *seq_given = 1;
    if (buf[0] == '-' && buf[1] == '\0') { id->ms = id->seq = 0; return 0; }
    if (buf[0] == '+' && buf[1] == '\0') { id->ms = id->seq = UINT64_MAX; return 0; }
    char *dot = strchr(buf, '-');
    if (dot) *dot = '\0';
    if (!str2ull(buf, &ms)) goto invalid;
    if (dot) {
        if (seq_given && strcmp(dot + 1, "*") == 0) {
            seq = 0;
            *seq_given = 0;
        } else if (!str2ull(dot + 1, &seq)) {
            goto invalid;
        }
    } else {
        seq = missing_seq;
    }
    id->ms = ms;
    id->seq = seq;
    return 0;
invalid:
    if (c) resp_add_error(&c->out, ERR_BADID);
    return -1;
}

static int arg_id(client *c, int i, sid *id, uint64_t missing_seq, int strict) {
    return parse_id(c, c->argv[i], c->argvlen[i], id, missing_seq, strict, NULL);
}


/* ---------------- DUMP (Redis's RDB stream, rdb.c) ---------------- */

/* An ID as Redis's raw 16 bytes: ms then seq, big endian. */
static void put_sid_be(rbuf *b, sid a) {
    unsigned char d[16];
    for (int i = 0; i < 8; i++) {
        d[i] = (unsigned char)(a.ms >> (56 - 8 * i));
        d[8 + i] = (unsigned char)(a.seq >> (56 - 8 * i));
    }
    rbuf_append(b, d, 16);
}

static void put_ms_time(rbuf *b, int64_t t) { stream_put_u64(b, (uint64_t)t); }

/* Do an entry's field names equal its node's master fields? */
static int same_fields(const snode *nd, const sentry *e) {
    if (e->nf != nd->nmf) return 0;
    size_t pos = 0, mpos = 0;
    for (uint32_t i = 0; i < e->nf; i++) {
        uint32_t l = obj_get_u32(e->blob + pos), ml = obj_get_u32(nd->mfields + mpos);
        if (l != ml || memcmp(e->blob + pos + 4, nd->mfields + mpos + 4, l)) return 0;
        pos += 4 + l;
        pos += 4 + obj_get_u32(e->blob + pos);
        mpos += 4 + ml;
    }
    return 1;
}

/* Node nd's listpack: entries e[*i..] of that node. Tombstones still in
 * the array are written as deleted entries without fields; those already
 * compacted away are gone (the node's deleted count is what is written). */
static void node_listpack(const stream *s, const snode *nd, size_t *i, rbuf *lp) {
    size_t start = rdb_lp_begin(lp), n = 0, live = 0, dead = 0;
    for (size_t j = *i; j < s->n && s->e[j].node == nd->seq; j++) {
        if (s->e[j].blob) live++;
        else dead++;
    }
    rdb_lp_add_int(lp, (long long)live);
    rdb_lp_add_int(lp, (long long)dead);
    rdb_lp_add_int(lp, nd->nmf);
    for (size_t pos = 0; pos < nd->mflen; pos += 4 + obj_get_u32(nd->mfields + pos))
        rdb_lp_add(lp, nd->mfields + pos + 4, obj_get_u32(nd->mfields + pos));
    rdb_lp_add_int(lp, 0);
    n = 4 + nd->nmf;
    for (; *i < s->n && s->e[*i].node == nd->seq; (*i)++) {
        const sentry *e = &s->e[*i];
        int same = e->blob && same_fields(nd, e);
        uint32_t nf = e->blob ? e->nf : 0;
        rdb_lp_add_int(lp, e->blob ? (same ? 2 : 0) : 1);
        rdb_lp_add_int(lp, (long long)(e->id.ms - nd->master.ms));
        rdb_lp_add_int(lp, (long long)(e->id.seq - nd->master.seq));
        n += 3;
        if (!same) {
            rdb_lp_add_int(lp, nf);
            n++;
        }
        size_t pos = 0;
        for (uint32_t f = 0; f < 2 * nf; f++) {
            uint32_t l = obj_get_u32(e->blob + pos);
            if (!same || f % 2) {
                rdb_lp_add(lp, e->blob + pos + 4, l);
                n++;
            }
            pos += 4 + l;
        }
        rdb_lp_add_int(lp, (long long)nf + 3 + (same ? 0 : nf + 1));
        n++;
    }
    rdb_lp_end(lp, start, n);
}

/* For the consumers' lists: pending entries by owner, then ID. */
static int pel_owner_cmp(const void *a, const void *b) {
    const spel *x = *(const spel *const *)a, *y = *(const spel *const *)b;
    int c = stream_name_cmp(x->owner->name, x->owner->nlen, y->owner->name, y->owner->nlen);
    return c ? c : sid_cmp(x->id, y->id);
}

/* The stream as Redis 7.0's RDB writes it (rdb.c has the layout), after
 * the type byte. */
void stream_rdb_save(const void *data, rbuf *out) {
    const stream *s = data;
    rbuf b;
    rbuf_init(&b);
    rdb_put_len(out, s->nnodes);
    size_t i = 0;
    for (size_t k = 0; k < s->nnodes; k++) {
        const snode *nd = &s->nodes[k];
        while (i < s->n && s->e[i].node < nd->seq) i++;  /* emptied nodes' tombstones */
        b.len = 0;
        put_sid_be(&b, nd->master);
        rdb_put_string(out, b.buf, b.len);
        b.len = 0;
        node_listpack(s, nd, &i, &b);
        rdb_put_string(out, b.buf, b.len);
    }
    sid first = stream_first_id(s);
    uint64_t ids[] = {s->len, s->last_id.ms, s->last_id.seq, first.ms, first.seq,
                      s->max_deleted.ms, s->max_deleted.seq, s->entries_added, s->ngroups};
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) rdb_put_len(out, ids[k]);
    for (size_t k = 0; k < s->ngroups; k++) {
        const sgroup *g = s->groups[k];
        rdb_put_string(out, g->name, g->nlen);
        rdb_put_len(out, g->last_id.ms);
        rdb_put_len(out, g->last_id.seq);
        rdb_put_len(out, (uint64_t)g->entries_read);
        rdb_put_len(out, g->npel);
        for (size_t j = 0; j < g->npel; j++) {
            put_sid_be(out, g->pel[j].id);
            put_ms_time(out, g->pel[j].time);
            rdb_put_len(out, g->pel[j].count);
        }
        const spel **by = malloc(sizeof(*by) * (g->npel ? g->npel : 1));
        if (!by) abort();
        for (size_t j = 0; j < g->npel; j++) by[j] = &g->pel[j];
        qsort(by, g->npel, sizeof(*by), pel_owner_cmp);
        rdb_put_len(out, g->ncons);
        size_t p = 0;
        for (size_t j = 0; j < g->ncons; j++) {
            const sconsumer *c = g->cons[j];
            rdb_put_string(out, c->name, c->nlen);
            put_ms_time(out, c->seen);
            rdb_put_len(out, c->npending);
            for (size_t q = 0; q < c->npending; q++) put_sid_be(out, by[p++]->id);
        }
        free(by);
    }
    rbuf_free(&b);
}

/* ---------------- command helpers ---------------- */

/* Look argv[i] up as a stream: 1 found (*s set), 0 missing, -1 another type
 * (WRONGTYPE replied). */
static int lookup_stream(client *c, int i, int for_write, stream **s) {
    db_val v;
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], &v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], &v);
    *s = NULL;
    if (!found) return 0;
    if (v.type != OBJ_STREAM) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    *s = v.obj->data;
    return 1;
}

/* Log and apply ops on the stream at argv[i]; replies the error on a refusal. */
static int write_ops(client *c, int i, const rbuf *ops) {
    if (ops->len == 0) return DB_OK;
    int r = db_obj_write(&c->x, c->db, c->argv[i], c->argvlen[i], OBJ_STREAM, ops->buf, ops->len);
    if (r == DB_OOM) resp_add_error(&c->out, db_error_text(&c->x));
    return r;
}

static void reply_fields(client *c, const sentry *e) {
    resp_add_array(&c->out, 2LL * e->nf);
    size_t pos = 0;
    for (uint32_t i = 0; i < 2 * e->nf; i++) {
        uint32_t l = obj_get_u32(e->blob + pos);
        resp_add_bulk(&c->out, e->blob + pos + 4, l);
        pos += 4 + l;
    }
}

static void reply_entry(client *c, const sentry *e) {
    resp_add_array(&c->out, 2);
    reply_sid(c, e->id);
    reply_fields(c, e);
}

/* Indexes of the live entries in [start, end], in order (rev: backwards),
 * at most count (0 = all). Returns how many; *out malloc'd. */
static size_t range_collect(const stream *s, sid start, sid end, long long count, int rev,
                            size_t **out) {
    size_t lo = stream_entry_lower(s, start), n = 0, cap = 16;
    size_t *v = malloc(sizeof(size_t) * cap);
    if (!v) abort();
    if (sid_cmp(start, end) <= 0) {
        size_t hi = stream_entry_lower(s, end);
        if (hi < s->n && sid_cmp(s->e[hi].id, end) == 0) hi++;
        for (size_t k = 0; k < hi - lo; k++) {
            size_t i = rev ? hi - 1 - k : lo + k;
            if (!s->e[i].blob) continue;
            if (n == cap) {
                cap *= 2;
                v = realloc(v, sizeof(size_t) * cap);
                if (!v) abort();
            }
            v[n++] = i;
            if (count && (long long)n >= count) break;
        }
    }
    *out = v;
    return n;
}

static void reply_range(client *c, const stream *s, sid start, sid end, long long count, int rev) {
    size_t *idx;
    size_t n = range_collect(s, start, end, count, rev, &idx);
    resp_add_array(&c->out, (long long)n);
    for (size_t k = 0; k < n; k++) reply_entry(c, &s->e[idx[k]]);
    free(idx);
}

/* ---------------- XADD, XTRIM ---------------- */

enum { TRIM_NONE, TRIM_MAXLEN, TRIM_MINID };

typedef struct trim_args {
    int strategy, approx;
    long long maxlen, limit;
    sid minid;
    int nomkstream, id_given, seq_given;
    sid id;
} trim_args;

/* Redis's streamParseAddOrTrimArgsOrReply: returns the index of the ID
 * (XADD) or argc, -1 after replying an error. */
static int parse_trim_args(client *c, trim_args *a, int xadd) {
    int i = 2, limit_given = 0;
    memset(a, 0, sizeof(*a));
    for (; i < c->argc; i++) {
        int more = c->argc - 1 - i;
        const char *o = c->argv[i];
        if (xadd && c->argvlen[i] == 1 && o[0] == '*') {
            break;
        } else if ((arg_is(c, i, "maxlen") || arg_is(c, i, "minid")) && more) {
            int maxlen = arg_is(c, i, "maxlen");
            if (a->strategy != TRIM_NONE) {
                resp_add_error(&c->out, "ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
                return -1;
            }
            a->approx = 0;
            if (more >= 2 && c->argvlen[i + 1] == 1 && c->argv[i + 1][0] == '~') {
                a->approx = 1;
                i++;
            } else if (more >= 2 && c->argvlen[i + 1] == 1 && c->argv[i + 1][0] == '=') {
                i++;
            }
            if (maxlen) {
                if (arg_ll(c, i + 1, &a->maxlen) != 0) return -1;
                if (a->maxlen < 0) {
                    resp_add_error(&c->out, "ERR The MAXLEN argument must be >= 0.");
                    return -1;
                }
                a->strategy = TRIM_MAXLEN;
            } else {
                if (arg_id(c, i + 1, &a->minid, 0, 1) != 0) return -1;
                a->strategy = TRIM_MINID;
            }
            i++;
        } else if (arg_is(c, i, "limit") && more) {
            if (arg_ll(c, i + 1, &a->limit) != 0) return -1;
            if (a->limit < 0) {
                resp_add_error(&c->out, "ERR The LIMIT argument must be >= 0.");
                return -1;
            }
            limit_given = 1;
            i++;
        } else if (xadd && arg_is(c, i, "nomkstream")) {
            a->nomkstream = 1;
        } else if (xadd) {
            if (parse_id(c, c->argv[i], c->argvlen[i], &a->id, 0, 1, &a->seq_given) != 0) return -1;
            a->id_given = 1;
            break;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    if (a->limit && a->strategy == TRIM_NONE) {
        resp_add_error(&c->out, "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy");
        return -1;
    }
    if (!xadd && a->strategy == TRIM_NONE) {
        resp_add_error(&c->out, "ERR syntax error, XTRIM must be called with a trimming strategy");
        return -1;
    }
    if (limit_given) {
        if (!a->approx) {
            resp_add_error(&c->out, "ERR syntax error, LIMIT cannot be used without the special ~ option");
            return -1;
        }
    } else if (a->approx) {
        long long ne = server.cfg.stream_node_max_entries;
        a->limit = 100 * ne;
        if (a->limit <= 0 || a->limit > 10000 * 100) a->limit = 10000 * 100;
    } else {
        a->limit = 0;
    }
    return i;
}

/* Redis's streamTrim, as effects: SOP_DEL (not XDEL) for each entry it
 * removes, working on node boundaries. Returns how many. `extra` is an
 * entry being added by the same command (XADD): it counts in the length
 * and sits in a node of its own or in the tail node (extra_new_node). */
static long long trim_ops(const stream *s, const trim_args *a, rbuf *ops, int extra,
                          int extra_new_node, sid extra_id, int *extra_gone) {
    long long deleted = 0, length = (long long)s->len + extra;
    size_t i = 0;
    unsigned char zero = 0;
    rbuf arg;
    rbuf_init(&arg);
    for (size_t k = 0; k < s->nnodes + (extra && extra_new_node); k++) {
        if (a->strategy == TRIM_MAXLEN && length <= a->maxlen) break;
        int virtual_node = k == s->nnodes;
        const snode *nd = virtual_node ? NULL : &s->nodes[k];
        int tail = extra && !extra_new_node && k == s->nnodes - 1;
        long long entries = virtual_node ? 1 : (long long)nd->valid + tail;
        if (a->limit && deleted + entries > a->limit) break;
        /* The node's entries: from i while they belong to it. */
        /* Tombstones of nodes already gone come first. */
        while (!virtual_node && i < s->n && s->e[i].node < nd->seq) i++;
        size_t first = i;
        while (!virtual_node && i < s->n && s->e[i].node == nd->seq) i++;
        int remove;
        if (a->strategy == TRIM_MAXLEN) {
            remove = length - entries >= a->maxlen;
        } else {
            sid last = (virtual_node || tail) ? extra_id : s->e[i - 1].id;
            remove = sid_cmp(last, a->minid) < 0;
        }
        if (!remove && a->approx) break;
        for (size_t j = first; j < i; j++) {
            if (!s->e[j].blob) continue;
            if (!remove) {
                if (a->strategy == TRIM_MAXLEN && length <= a->maxlen) break;
                if (a->strategy == TRIM_MINID && sid_cmp(s->e[j].id, a->minid) >= 0) break;
            }
            arg.len = 0;
            stream_put_sid(&arg, s->e[j].id);
            rbuf_append(&arg, &zero, 1);
            obj_op(ops, SOP_DEL, arg.buf, arg.len);
            length--;
            deleted++;
        }
        /* The entry being added is never trimmed by its own XADD unless it
         * alone exceeds the limit (MAXLEN 0): Redis adds, then trims. */
        if ((virtual_node || tail) && (remove || (a->strategy == TRIM_MAXLEN && length > a->maxlen))) {
            deleted++;
            length--;
            *extra_gone = 1;
        }
        if (!remove) break;
    }
    rbuf_free(&arg);
    return deleted;
}

static void encode_add(rbuf *ops, sid id, int new_node, client *c, int first) {
    rbuf arg;
    rbuf_init(&arg);
    stream_put_sid(&arg, id);
    unsigned char nn = (unsigned char)new_node;
    rbuf_append(&arg, &nn, 1);
    for (int j = first; j < c->argc; j++) obj_put_str(&arg, c->argv[j], c->argvlen[j]);
    obj_op(ops, SOP_ADD, arg.buf, arg.len);
    rbuf_free(&arg);
}

void xaddCommand(client *c) {
    trim_args a;
    stream *s;
    int i = parse_trim_args(c, &a, 1);
    if (i < 0) return;
    int field_pos = i + 1;
    if (c->argc - field_pos < 2 || (c->argc - field_pos) % 2 == 1) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", "xadd");
        return;
    }
    if (a.id_given && a.seq_given && a.id.ms == 0 && a.id.seq == 0) {
        resp_add_error(&c->out, "ERR The ID specified in XADD must be greater than 0-0");
        return;
    }
    int found = lookup_stream(c, 1, 1, &s);
    if (found < 0) return;
    if (!found && a.nomkstream) {
        resp_add_null(&c->out);
        return;
    }
    stream empty = {0};
    const stream *cur = s ? s : &empty;
    if (cur->last_id.ms == UINT64_MAX && cur->last_id.seq == UINT64_MAX) {
        resp_add_error(&c->out, "ERR The stream has exhausted the last possible ID, unable to add more items");
        return;
    }
    sid id;
    if (a.id_given) {
        if (a.seq_given) {
            id = a.id;
        } else if (cur->last_id.ms == a.id.ms) {
            if (cur->last_id.seq == UINT64_MAX) {
                /* Redis 7.0 answers this one with its generic append error. */
                resp_add_error(&c->out, "ERR Elements are too large to be stored");
                return;
            }
            id = cur->last_id;
            id.seq++;
        } else {
            id = a.id;
        }
    } else {
        uint64_t now = (uint64_t)mstime();
        if (now > cur->last_id.ms) {
            id = (sid){now, 0};
        } else {
            id = cur->last_id;
            sid_incr(&id);
        }
    }
    if (sid_cmp(id, cur->last_id) <= 0) goto too_small;

    uint64_t flen = 0;
    for (int j = field_pos; j < c->argc; j++) flen += c->argvlen[j];
    int new_node = stream_needs_new_node(cur, flen);
    rbuf ops;
    rbuf_init(&ops);
    encode_add(&ops, id, new_node, c, field_pos);
    if (a.strategy != TRIM_NONE) {
        /* Trim after the add, as Redis does; an XADD that trims its own
         * entry away (MAXLEN 0) still adds it first. */
        int gone = 0;
        trim_ops(cur, &a, &ops, 1, new_node, id, &gone);
        if (gone) {
            unsigned char zero = 0;
            rbuf arg;
            rbuf_init(&arg);
            stream_put_sid(&arg, id);
            rbuf_append(&arg, &zero, 1);
            obj_op(&ops, SOP_DEL, arg.buf, arg.len);
            rbuf_free(&arg);
        }
    }
    int r = write_ops(c, 1, &ops);
    rbuf_free(&ops);
    if (r == DB_OOM) return;
    blocking_signal_key_all(c->db, c->argv[1], c->argvlen[1]);
    reply_sid(c, id);
    return;
too_small:
    resp_add_error(&c->out, "ERR The ID specified in XADD is equal or smaller than the target stream top item");
}

void xtrimCommand(client *c) {
    trim_args a;
    stream *s;
    if (parse_trim_args(c, &a, 0) < 0) return;
    int found = lookup_stream(c, 1, 1, &s);
    if (found <= 0) {
        if (found == 0) resp_add_int(&c->out, 0);
        return;
    }
    rbuf ops;
    rbuf_init(&ops);
    int gone = 0;
    long long d = trim_ops(s, &a, &ops, 0, 0, (sid){0, 0}, &gone);
    int r = write_ops(c, 1, &ops);
    rbuf_free(&ops);
    if (r == DB_OOM) return;
    resp_add_int(&c->out, d);
}

/* ---------------- XLEN, XRANGE, XREVRANGE, XDEL ---------------- */

void xlenCommand(client *c) {
    stream *s;
    int found = lookup_stream(c, 1, 0, &s);
    if (found < 0) return;
    resp_add_int(&c->out, s ? (long long)s->len : 0);
}

static void xrange_generic(client *c, int rev) {
    sid start, end;
    int startex, endex;
    long long count = -1;
    int si = rev ? 3 : 2, ei = rev ? 2 : 3;
    startex = c->argvlen[si] > 1 && c->argv[si][0] == '(';
    if (parse_id(c, c->argv[si] + startex, c->argvlen[si] - startex, &start, 0, startex, NULL) != 0) return;
    if (startex && sid_incr(&start) != 0) {
        resp_add_error(&c->out, "ERR invalid start ID for the interval");
        return;
    }
    endex = c->argvlen[ei] > 1 && c->argv[ei][0] == '(';
    if (parse_id(c, c->argv[ei] + endex, c->argvlen[ei] - endex, &end, UINT64_MAX, endex, NULL) != 0) return;
    if (endex && sid_decr(&end) != 0) {
        resp_add_error(&c->out, "ERR invalid end ID for the interval");
        return;
    }
    for (int j = 4; j < c->argc; j++) {
        if (arg_is(c, j, "count") && j + 1 < c->argc) {
            if (arg_ll(c, j + 1, &count) != 0) return;
            if (count < 0) count = 0;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    stream *s;
    int found = lookup_stream(c, 1, 0, &s);
    if (found < 0) return;
    if (!found) {
        resp_add_array(&c->out, 0);
        return;
    }
    if (count == 0) {
        resp_add_null_array(&c->out);
        return;
    }
    reply_range(c, s, start, end, count == -1 ? 0 : count, rev);
}

void xrangeCommand(client *c) { xrange_generic(c, 0); }
void xrevrangeCommand(client *c) { xrange_generic(c, 1); }

void xdelCommand(client *c) {
    stream *s;
    sid *ids = malloc(sizeof(sid) * (size_t)c->argc);
    if (!ids) abort();
    /* The key first (a missing one answers 0 whatever the IDs), then
     * every ID is checked before anything is deleted (Redis 7.0's order). */
    int found = lookup_stream(c, 1, 1, &s);
    if (found <= 0) {
        if (found == 0) resp_add_int(&c->out, 0);
        goto done;
    }
    for (int j = 2; j < c->argc; j++) {
        if (arg_id(c, j, &ids[j], 0, 1) != 0) goto done;
    }
    rbuf ops, arg;
    rbuf_init(&ops);
    rbuf_init(&arg);
    long long deleted = 0;
    unsigned char one = 1;
    qsort(ids + 2, (size_t)c->argc - 2, sizeof(sid), sid_qcmp);
    for (int j = 2; j < c->argc; j++) {
        if (j > 2 && sid_cmp(ids[j - 1], ids[j]) == 0) continue;
        if (!stream_entry_find(s, ids[j])) continue;
        arg.len = 0;
        stream_put_sid(&arg, ids[j]);
        rbuf_append(&arg, &one, 1);
        obj_op(&ops, SOP_DEL, arg.buf, arg.len);
        deleted++;
    }
    int r = write_ops(c, 1, &ops);
    rbuf_free(&ops);
    rbuf_free(&arg);
    if (r != DB_OOM) resp_add_int(&c->out, deleted);
done:
    free(ids);
}

/* ---------------- consumer-group counters (Redis 7.0's lag rules) ---------------- */

static int range_has_tombstones(const stream *s, sid start) {
    if (!s->len || sid_zero(s->max_deleted)) return 0;
    if (sid_cmp(stream_first_id(s), s->max_deleted) > 0) return 0;
    return sid_cmp(start, s->max_deleted) <= 0;
}

static long long estimate_distance(const stream *s, sid id) {
    if (!s->entries_added) return 0;
    if (!s->len && sid_cmp(id, s->last_id) < 1) return (long long)s->entries_added;
    int cmp_last = sid_cmp(id, s->last_id);
    if (cmp_last == 0) return (long long)s->entries_added;
    if (cmp_last > 0) return SCG_INVALID_ENTRIES_READ;
    sid first = stream_first_id(s);
    int cmp_first = sid_cmp(id, first);
    if (sid_zero(s->max_deleted) || sid_cmp(s->max_deleted, first) < 0) {
        if (cmp_first < 0) return (long long)(s->entries_added - s->len);
        if (cmp_first == 0) return (long long)(s->entries_added - s->len + 1);
    }
    return SCG_INVALID_ENTRIES_READ;
}

/* ---------------- effect encoders for groups ---------------- */

static void op_group_id(rbuf *ops, uint8_t op, sid last, long long er, const char *g, size_t gl) {
    rbuf arg;
    rbuf_init(&arg);
    stream_put_sid(&arg, last);
    stream_put_u64(&arg, (uint64_t)er);
    rbuf_append(&arg, g, gl);
    obj_op(ops, op, arg.buf, arg.len);
    rbuf_free(&arg);
}

static void op_consumer(rbuf *ops, uint8_t op, int64_t seen, const char *g, size_t gl,
                        const char *cn, size_t cl) {
    rbuf arg;
    rbuf_init(&arg);
    if (op == SOP_CCREATE) stream_put_u64(&arg, (uint64_t)seen);
    obj_put_str(&arg, g, gl);
    rbuf_append(&arg, cn, cl);
    obj_op(ops, op, arg.buf, arg.len);
    rbuf_free(&arg);
}

/* A SOP_PELSET being built: start, add (id, time, count)..., end. */
static void pelset_start(rbuf *arg, const char *g, size_t gl, const char *cn, size_t cl) {
    arg->len = 0;
    obj_put_str(arg, g, gl);
    obj_put_str(arg, cn, cl);
}
static void pelset_add(rbuf *arg, sid id, int64_t time, uint64_t count) {
    stream_put_sid(arg, id);
    stream_put_u64(arg, (uint64_t)time);
    stream_put_u64(arg, count);
}

/* ---------------- XREAD, XREADGROUP ---------------- */

/* Where the keys of XREAD / XREADGROUP are (Redis's xreadGetKeys): fills
 * idx with the key positions, returns how many (0 on a syntax error; the
 * command then replies it without touching any key). */
int stream_read_keys(int argc, const char *const *argv, const size_t *argvlen, int *idx, int max) {
    int pos = -1;
    for (int i = 1; i < argc; i++) {
        if (strcaseeqlen(argv[i], argvlen[i], "block") || strcaseeqlen(argv[i], argvlen[i], "count")) i++;
        else if (strcaseeqlen(argv[i], argvlen[i], "group")) i += 2;
        else if (strcaseeqlen(argv[i], argvlen[i], "noack")) continue;
        else if (strcaseeqlen(argv[i], argvlen[i], "streams")) { pos = i; break; }
        else break;
    }
    /* An odd count is an error the command replies; its keys are still the
     * first half, as Redis 7.0's COMMAND GETKEYS says. */
    int num = pos < 0 ? 0 : (argc - pos - 1) / 2;
    if (num == 0) return 0;
    int n = 0;
    for (int i = pos + 1; i < pos + 1 + num && n < max; i++) idx[n++] = i;
    return n;
}

typedef struct served {
    int key;            /* argv index */
    stream *s;
    size_t *idx; size_t n;   /* entries to reply (XREAD, XREADGROUP >) */
    sid *hist; size_t nhist; /* history: PEL ids of the consumer */
} served;

static void served_free(served *sv, int n) {
    for (int i = 0; i < n; i++) {
        free(sv[i].idx);
        free(sv[i].hist);
    }
    free(sv);
}

static void reply_served(client *c, served *sv, int nsv) {
    if (c->out.proto == 3) resp_add_map(&c->out, nsv);
    else resp_add_array(&c->out, nsv);
    for (int i = 0; i < nsv; i++) {
        if (c->out.proto != 3) resp_add_array(&c->out, 2);
        resp_add_bulk(&c->out, c->argv[sv[i].key], c->argvlen[sv[i].key]);
        if (sv[i].hist) {
            resp_add_array(&c->out, (long long)sv[i].nhist);
            for (size_t k = 0; k < sv[i].nhist; k++) {
                const sentry *e = stream_entry_find(sv[i].s, sv[i].hist[k]);
                if (e) {
                    reply_entry(c, e);
                } else {
                    resp_add_array(&c->out, 2);
                    reply_sid(c, sv[i].hist[k]);
                    resp_add_null_array(&c->out);
                }
            }
        } else {
            resp_add_array(&c->out, (long long)sv[i].n);
            for (size_t k = 0; k < sv[i].n; k++) reply_entry(c, &sv[i].s->e[sv[i].idx[k]]);
        }
    }
}

/* Is argv[ki] the same key as an argument in [from, ki)? */
static int earlier_arg(const client *c, int from, int ki) {
    for (int j = from; j < ki; j++)
        if (c->argvlen[j] == c->argvlen[ki] && memcmp(c->argv[j], c->argv[ki], c->argvlen[ki]) == 0)
            return 1;
    return 0;
}

/* Served entries of a batch's copy, kept by ID and replied from the real
 * object (real) once the batch has changed it. */
static void served_by_id(served *v, stream *real) {
    v->hist = malloc(sizeof(sid) * (v->n ? v->n : 1));
    if (!v->hist) abort();
    for (size_t k = 0; k < v->n; k++) v->hist[k] = v->s->e[v->idx[k]].id;
    v->nhist = v->n;
    v->n = 0;
    v->s = real;
}

static void xread_generic(client *c, int group_mode) {
    long long count = 0, t;
    int64_t deadline = -1;
    int streams_arg = 0, nstreams = 0, noack = 0, gi = 0;

    for (int i = 1; i < c->argc; i++) {
        int more = c->argc - i - 1;
        if (arg_is(c, i, "block") && more) {
            i++;
            if (!string2ll(c->argv[i], c->argvlen[i], &t)) {
                resp_add_error(&c->out, "ERR timeout is not an integer or out of range");
                return;
            }
            if (t < 0) {
                resp_add_error(&c->out, "ERR timeout is negative");
                return;
            }
            if (t > 0 && t > LLONG_MAX - mstime()) {
                resp_add_error(&c->out, "ERR timeout is out of range");
                return;
            }
            deadline = t > 0 ? mstime() + t : 0;
        } else if (arg_is(c, i, "count") && more) {
            i++;
            if (arg_ll(c, i, &count) != 0) return;
            if (count < 0) count = 0;
        } else if (arg_is(c, i, "streams") && more) {
            streams_arg = i + 1;
            nstreams = c->argc - streams_arg;
            if (nstreams % 2) {
                resp_add_errorf(&c->out, "ERR Unbalanced %s list of streams: for each stream key an ID or '%c' must be specified.",
                                group_mode ? "XREADGROUP" : "XREAD", group_mode ? '>' : '$');
                return;
            }
            nstreams /= 2;
            break;
        } else if (arg_is(c, i, "group") && more >= 2) {
            if (!group_mode) {
                resp_add_error(&c->out, "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.");
                return;
            }
            gi = i + 1;
            i += 2;
        } else if (arg_is(c, i, "noack")) {
            if (!group_mode) {
                resp_add_error(&c->out, "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.");
                return;
            }
            noack = 1;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (!streams_arg) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (group_mode && !gi) {
        resp_add_error(&c->out, "ERR Missing GROUP option for XREADGROUP");
        return;
    }
    /* A blocked client served later gets at most 1000 entries (Redis). */
    if (count == 0 && deadline >= 0 && blocking_is_blocked(c)) count = XREAD_BLOCKED_DEFAULT_COUNT;

    sid *ids = calloc((size_t)nstreams, sizeof(sid));
    stream **ss = calloc((size_t)nstreams, sizeof(stream *));
    sgroup **gs = calloc((size_t)nstreams, sizeof(sgroup *));
    served *sv = calloc((size_t)nstreams, sizeof(served));
    char (*dollar)[48] = calloc((size_t)nstreams, 48);
    int nsv = 0;
    if (!ids || !ss || !gs || !sv || !dollar) abort();
    for (int i = 0; i < nstreams; i++) {
        int ki = streams_arg + i, ii = streams_arg + nstreams + i;
        /* A blocked XREADGROUP whose stream or group went away (DEL,
         * XGROUP DESTROY wake it) gets Redis's errors for that. */
        int rerun = group_mode && blocking_is_blocked(c);
        db_val v;
        if (rerun && (!db_peek(&c->x, c->db, c->argv[ki], c->argvlen[ki], &v) || v.type != OBJ_STREAM)) {
            resp_add_error(&c->out, "UNBLOCKED the stream key no longer exists");
            goto done;
        }
        if (lookup_stream(c, ki, 0, &ss[i]) < 0) goto done;
        if (group_mode) {
            if (rerun && !stream_group_find(ss[i], c->argv[gi], c->argvlen[gi])) {
                resp_add_error(&c->out, "NOGROUP the consumer group this client was blocked on no longer exists");
                goto done;
            }
            if (!ss[i] || !(gs[i] = stream_group_find(ss[i], c->argv[gi], c->argvlen[gi]))) {
                resp_add_errorf(&c->out, "NOGROUP No such key '%.*s' or consumer group '%.*s' in XREADGROUP with GROUP option",
                                (int)c->argvlen[ki], c->argv[ki], (int)c->argvlen[gi], c->argv[gi]);
                goto done;
            }
        }
        if (c->argvlen[ii] == 1 && c->argv[ii][0] == '$') {
            if (group_mode) {
                resp_add_error(&c->out, "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
                goto done;
            }
            ids[i] = ss[i] ? ss[i]->last_id : (sid){0, 0};
            sid_fmt(dollar[i], ids[i]);
            continue;
        }
        if (c->argvlen[ii] == 1 && c->argv[ii][0] == '>') {
            if (!group_mode) {
                resp_add_error(&c->out, "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.");
                goto done;
            }
            ids[i] = (sid){UINT64_MAX, UINT64_MAX};
            continue;
        }
        if (arg_id(c, ii, &ids[i], 0, 1) != 0) goto done;
    }

    int64_t now = mstime();
    long long budget = STREAM_MAX_DELIVER;
    int batch = group_mode && nstreams > 1;
    if (batch) db_batch_begin(&c->x);
    int failed = 0;
    for (int i = 0; i < nstreams && !failed; i++) {
        stream *s = ss[i];
        sgroup *g = gs[i];
        int ki = streams_arg + i;
        if (!group_mode) {
            const sentry *last = s ? stream_last_live(s) : NULL;
            if (!last || sid_cmp(last->id, ids[i]) <= 0) continue;
            sid start = ids[i];
            sid_incr(&start);
            sv[nsv].key = ki;
            sv[nsv].s = s;
            sv[nsv].n = range_collect(s, start, (sid){UINT64_MAX, UINT64_MAX}, count, 0, &sv[nsv].idx);
            nsv++;
            continue;
        }
        /* A stream named again reads what the earlier reads of this
         * command left: the batch's copy (the real object changes only at
         * the batch's end, and the reply reads it then, by ID). */
        int again = batch && earlier_arg(c, streams_arg, ki);
        if (again) {
            lookup_stream(c, ki, 0, &s);
            g = stream_group_find(s, c->argv[gi], c->argvlen[gi]);
        }
        const char *cn = c->argv[gi + 1];
        size_t cl = c->argvlen[gi + 1];
        sconsumer *cons = stream_cons_find(g, cn, cl);
        int history = !(ids[i].ms == UINT64_MAX && ids[i].seq == UINT64_MAX);
        rbuf ops, arg;
        rbuf_init(&ops);
        rbuf_init(&arg);
        served *v = &sv[nsv];
        v->key = ki;
        v->s = s;
        if (history) {
            /* This consumer's pending entries after the ID. */
            sid start = ids[i];
            sid_incr(&start);
            size_t cap = 8;
            v->hist = malloc(sizeof(sid) * cap);
            if (!v->hist) abort();
            pelset_start(&arg, g->name, g->nlen, cn, cl);
            size_t base = arg.len;
            for (size_t k = stream_pel_lower(g, start); cons && k < g->npel; k++) {
                const spel *p = &g->pel[k];
                if (p->owner != cons) continue;
                if ((count && (long long)v->nhist >= count) || (long long)v->nhist >= budget) break;
                if (v->nhist == cap) {
                    cap *= 2;
                    v->hist = realloc(v->hist, sizeof(sid) * cap);
                    if (!v->hist) abort();
                }
                v->hist[v->nhist++] = p->id;
                if (stream_entry_find(s, p->id)) pelset_add(&arg, p->id, now, p->count + 1);
            }
            op_consumer(&ops, SOP_CCREATE, now, g->name, g->nlen, cn, cl);
            if (arg.len > base) obj_op(&ops, SOP_PELSET, arg.buf, arg.len);
            if (again) v->s = ss[i];    /* replied by ID after the batch */
            budget -= (long long)v->nhist;
            nsv++;
        } else {
            const sentry *last = stream_last_live(s);
            if (last && sid_cmp(last->id, g->last_id) > 0) {
                sid start = g->last_id;
                sid_incr(&start);
                long long want = count;
                if (!noack && (!want || want > budget)) want = budget;
                /* NOACK records no pending entries: no budget, and no
                 * COUNT (or COUNT 0) means every new entry. */
                v->n = noack || want > 0
                           ? range_collect(s, start, (sid){UINT64_MAX, UINT64_MAX}, want, 0, &v->idx)
                           : 0;
                if (!noack) budget -= (long long)v->n;
                sid gl = g->last_id;
                long long er = g->entries_read;
                pelset_start(&arg, g->name, g->nlen, cn, cl);
                for (size_t k = 0; k < v->n; k++) {
                    sid id = s->e[v->idx[k]].id;
                    if (sid_cmp(id, gl) > 0) {
                        if (er != SCG_INVALID_ENTRIES_READ && !range_has_tombstones(s, id)) er++;
                        else if (s->entries_added) er = estimate_distance(s, id);
                        gl = id;
                    }
                    if (!noack) pelset_add(&arg, id, now, 1);
                }
                op_consumer(&ops, SOP_CCREATE, now, g->name, g->nlen, cn, cl);
                op_group_id(&ops, SOP_GSETID, gl, er, g->name, g->nlen);
                if (!noack && v->n) obj_op(&ops, SOP_PELSET, arg.buf, arg.len);
                if (again) served_by_id(v, ss[i]);
                nsv++;
            }
            /* Nothing new: Redis 7.0 creates the consumer only once it is
             * served (also when it blocks). */
        }
        if (write_ops(c, ki, &ops) == DB_OOM) failed = 1;
        rbuf_free(&ops);
        rbuf_free(&arg);
    }
    if (batch && db_batch_end(&c->x) == DB_OOM && !failed) {
        resp_add_error(&c->out, db_error_text(&c->x));
        failed = 1;
    }
    if (failed) goto done;
    if (nsv) {
        reply_served(c, sv, nsv);
        goto done;
    }
    if (deadline < 0) {
        resp_add_null_array(&c->out);
        goto done;
    }
    if (!blocking_allowed(c)) {
        resp_add_null_array(&c->out);
        goto done;
    }
    /* '$' means "after what the stream holds now": the re-run after a
     * wake-up must use that ID, not the then-last one. */
    const char **saved = NULL;
    if (!group_mode) {
        saved = malloc(sizeof(char *) * (size_t)nstreams);
        size_t *savedlen = malloc(sizeof(size_t) * (size_t)nstreams);
        if (!saved || !savedlen) abort();
        for (int i = 0; i < nstreams; i++) {
            int ii = streams_arg + nstreams + i;
            saved[i] = c->argv[ii];
            savedlen[i] = c->argvlen[ii];
            if (dollar[i][0]) {
                c->argv[ii] = dollar[i];
                c->argvlen[ii] = strlen(dollar[i]);
            }
        }
        blocking_block(c, streams_arg, nstreams, deadline);
        for (int i = 0; i < nstreams; i++) {
            c->argv[streams_arg + nstreams + i] = saved[i];
            c->argvlen[streams_arg + nstreams + i] = savedlen[i];
        }
        free(savedlen);
        free(saved);
    } else {
        blocking_block(c, streams_arg, nstreams, deadline);
    }
done:
    served_free(sv, nstreams);
    free(ids);
    free(ss);
    free(gs);
    free(dollar);
}

void xreadCommand(client *c) { xread_generic(c, 0); }
void xreadgroupCommand(client *c) { xread_generic(c, 1); }

/* ---------------- XGROUP ---------------- */

/* The stream at argv[2] and the group argv[3] for XGROUP's subcommands:
 * -1 after replying an error. */
static int xgroup_target(client *c, int need_group, int mkstream, stream **s, sgroup **g) {
    if (lookup_stream(c, 2, 1, s) < 0) return -1;
    *g = NULL;
    if (!mkstream && !*s) {
        resp_add_error(&c->out, "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
        return -1;
    }
    if (*s) *g = stream_group_find(*s, c->argv[3], c->argvlen[3]);
    if (need_group && !*g) {
        resp_add_errorf(&c->out, "NOGROUP No such consumer group '%.*s' for key name '%.*s'",
                        (int)c->argvlen[3], c->argv[3], (int)c->argvlen[2], c->argv[2]);
        return -1;
    }
    return 0;
}

static void reply_xgroup_syntax(client *c) {
    resp_add_errorf(&c->out, "ERR unknown subcommand or wrong number of arguments for '%.*s'. Try XGROUP HELP.",
                    (int)c->argvlen[1], c->argv[1]);
}

/* CREATE / SETID: options from argv[5]. -1 after replying. */
static int xgroup_options(client *c, int create, int *mkstream, long long *er) {
    *mkstream = 0;
    *er = SCG_INVALID_ENTRIES_READ;
    for (int i = 5; i < c->argc;) {
        if (create && arg_is(c, i, "mkstream")) {
            *mkstream = 1;
            i++;
        } else if (arg_is(c, i, "entriesread") && i + 1 < c->argc) {
            if (arg_ll(c, i + 1, er) != 0) return -1;
            if (*er < 0 && *er != SCG_INVALID_ENTRIES_READ) {
                resp_add_error(&c->out, "ERR value for ENTRIESREAD must be positive or -1");
                return -1;
            }
            i += 2;
        } else {
            reply_xgroup_syntax(c);
            return -1;
        }
    }
    return 0;
}

static void xgroup_create(client *c) {
    int mkstream;
    long long er;
    stream *s;
    sgroup *g;
    sid id;
    if (xgroup_options(c, 1, &mkstream, &er) != 0) return;
    if (xgroup_target(c, 0, mkstream, &s, &g) != 0) return;
    if (c->argvlen[4] == 1 && c->argv[4][0] == '$') id = s ? s->last_id : (sid){0, 0};
    else if (arg_id(c, 4, &id, 0, 1) != 0) return;
    if (g) {
        resp_add_error(&c->out, "BUSYGROUP Consumer Group name already exists");
        return;
    }
    rbuf ops;
    rbuf_init(&ops);
    op_group_id(&ops, SOP_GCREATE, id, er, c->argv[3], c->argvlen[3]);
    int r = write_ops(c, 2, &ops);
    rbuf_free(&ops);
    if (r != DB_OOM) resp_add_ok(&c->out);
}

static void xgroup_setid(client *c) {
    int mkstream;
    long long er;
    stream *s;
    sgroup *g;
    sid id;
    if (c->argc != 5 && c->argc != 7) {
        reply_xgroup_syntax(c);
        return;
    }
    if (xgroup_options(c, 0, &mkstream, &er) != 0) return;
    if (xgroup_target(c, 1, 0, &s, &g) != 0) return;
    if (c->argvlen[4] == 1 && c->argv[4][0] == '$') id = s->last_id;
    else if (arg_id(c, 4, &id, 0, 0) != 0) return;
    rbuf ops;
    rbuf_init(&ops);
    op_group_id(&ops, SOP_GSETID, id, er, c->argv[3], c->argvlen[3]);
    int r = write_ops(c, 2, &ops);
    rbuf_free(&ops);
    if (r != DB_OOM) resp_add_ok(&c->out);
}

static void xgroup_destroy(client *c) {
    stream *s;
    sgroup *g;
    if (xgroup_target(c, 0, 0, &s, &g) != 0) return;
    if (!g) {
        resp_add_int(&c->out, 0);
        return;
    }
    rbuf ops;
    rbuf_init(&ops);
    obj_op(&ops, SOP_GDESTROY, c->argv[3], c->argvlen[3]);
    int r = write_ops(c, 2, &ops);
    rbuf_free(&ops);
    if (r == DB_OOM) return;
    blocking_signal_key_all(c->db, c->argv[2], c->argvlen[2]);
    resp_add_int(&c->out, 1);
}

static void xgroup_createconsumer(client *c) {
    stream *s;
    sgroup *g;
    if (xgroup_target(c, 1, 0, &s, &g) != 0) return;
    if (stream_cons_find(g, c->argv[4], c->argvlen[4])) {
        resp_add_int(&c->out, 0);
        return;
    }
    rbuf ops;
    rbuf_init(&ops);
    op_consumer(&ops, SOP_CCREATE, mstime(), g->name, g->nlen, c->argv[4], c->argvlen[4]);
    int r = write_ops(c, 2, &ops);
    rbuf_free(&ops);
    if (r != DB_OOM) resp_add_int(&c->out, 1);
}

static void xgroup_delconsumer(client *c) {
    stream *s;
    sgroup *g;
    if (xgroup_target(c, 1, 0, &s, &g) != 0) return;
    sconsumer *cn = stream_cons_find(g, c->argv[4], c->argvlen[4]);
    if (!cn) {
        resp_add_int(&c->out, 0);
        return;
    }
    long long pending = (long long)cn->npending;
    rbuf ops;
    rbuf_init(&ops);
    op_consumer(&ops, SOP_CDEL, 0, g->name, g->nlen, c->argv[4], c->argvlen[4]);
    int r = write_ops(c, 2, &ops);
    rbuf_free(&ops);
    if (r != DB_OOM) resp_add_int(&c->out, pending);
}

static void xgroup_help(client *c) {
    static const char *const lines[] = {
        "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CREATE <key> <groupname> <id|$> [option]",
        "    Create a new consumer group. Options are:",
        "    * MKSTREAM",
        "      Create the empty stream if it does not exist.",
        "    * ENTRIESREAD entries_read",
        "      Set the group's entries_read counter (internal use).",
        "CREATECONSUMER <key> <groupname> <consumer>",
        "    Create a new consumer in the specified group.",
        "DELCONSUMER <key> <groupname> <consumer>",
        "    Remove the specified consumer.",
        "DESTROY <key> <groupname>",
        "    Remove the specified group.",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        "    Set the current group ID and entries_read counter.",
        "HELP",
        "    Print this help.",
        NULL};
    reply_help(c, lines);
}

static const subcommand xgroup_subs[] = {
    {"create", -5, xgroup_create},
    {"setid", -5, xgroup_setid},
    {"destroy", 4, xgroup_destroy},
    {"createconsumer", 5, xgroup_createconsumer},
    {"delconsumer", 5, xgroup_delconsumer},
    {"help", 2, xgroup_help},
    {NULL, 0, NULL}};

void xgroupCommand(client *c) {
    if (arg_is(c, 1, "create") && c->argc > 8) {
        reply_xgroup_syntax(c);
        return;
    }
    subcommand_dispatch(c, xgroup_subs, "xgroup");
}

/* ---------------- XSETID ---------------- */

void xsetidCommand(client *c) {
    sid id, maxdel = {0, 0};
    long long added = -1;
    stream *s;
    if (arg_id(c, 2, &id, 0, 1) != 0) return;
    for (int i = 3; i < c->argc;) {
        int more = c->argc - 1 - i;
        if (arg_is(c, i, "entriesadded") && more) {
            if (arg_ll(c, i + 1, &added) != 0) return;
            if (added < 0) {
                resp_add_error(&c->out, "ERR entries_added must be positive");
                return;
            }
            i += 2;
        } else if (arg_is(c, i, "maxdeletedid") && more) {
            if (arg_id(c, i + 1, &maxdel, 0, 1) != 0) return;
            if (sid_cmp(id, maxdel) < 0) {
                resp_add_error(&c->out, "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id");
                return;
            }
            i += 2;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    int found = lookup_stream(c, 1, 1, &s);
    if (found <= 0) {
        if (found == 0) resp_add_error(&c->out, ERR_NOKEY);
        return;
    }
    if (sid_cmp(id, s->max_deleted) < 0) {
        resp_add_error(&c->out, "ERR The ID specified in XSETID is smaller than current max_deleted_entry_id");
        return;
    }
    if (s->len > 0) {
        if (sid_cmp(id, stream_last_live(s)->id) < 0) {
            resp_add_error(&c->out, "ERR The ID specified in XSETID is smaller than the target stream top item");
            return;
        }
        if (added != -1 && s->len > (uint64_t)added) {
            resp_add_error(&c->out, "ERR The entries_added specified in XSETID is smaller than the target stream length");
            return;
        }
    }
    rbuf ops, arg;
    rbuf_init(&ops);
    rbuf_init(&arg);
    stream_put_sid(&arg, id);
    stream_put_sid(&arg, sid_zero(maxdel) ? s->max_deleted : maxdel);
    stream_put_u64(&arg, added != -1 ? (uint64_t)added : s->entries_added);
    obj_op(&ops, SOP_META, arg.buf, arg.len);
    int r = write_ops(c, 1, &ops);
    rbuf_free(&ops);
    rbuf_free(&arg);
    if (r != DB_OOM) resp_add_ok(&c->out);
}

/* ---------------- XACK ---------------- */

void xackCommand(client *c) {
    stream *s;
    sgroup *g = NULL;
    if (lookup_stream(c, 1, 1, &s) < 0) return;
    if (s) g = stream_group_find(s, c->argv[2], c->argvlen[2]);
    if (!g) {
        resp_add_int(&c->out, 0);
        return;
    }
    sid *ids = malloc(sizeof(sid) * (size_t)c->argc);
    if (!ids) abort();
    int n = 0;
    for (int j = 3; j < c->argc; j++)
        if (arg_id(c, j, &ids[n++], 0, 1) != 0) goto done;
    qsort(ids, (size_t)n, sizeof(sid), sid_qcmp);
    rbuf ops, arg;
    rbuf_init(&ops);
    rbuf_init(&arg);
    obj_put_str(&arg, g->name, g->nlen);
    long long acked = 0;
    for (int j = 0; j < n; j++) {
        if (j && sid_cmp(ids[j - 1], ids[j]) == 0) continue;
        if (!stream_pel_find(g, ids[j])) continue;
        stream_put_sid(&arg, ids[j]);
        acked++;
    }
    if (acked) obj_op(&ops, SOP_PELDEL, arg.buf, arg.len);
    int r = write_ops(c, 1, &ops);
    rbuf_free(&ops);
    rbuf_free(&arg);
    if (r != DB_OOM) resp_add_int(&c->out, acked);
done:
    free(ids);
}

/* ---------------- XPENDING ---------------- */

static void reply_nogroup(client *c, int ki, int gi) {
    resp_add_errorf(&c->out, "NOGROUP No such key '%.*s' or consumer group '%.*s'",
                    (int)c->argvlen[ki], c->argv[ki], (int)c->argvlen[gi], c->argv[gi]);
}

/* Parse an interval bound like XRANGE ('(' excludes). -1 after replying. */
static int arg_interval(client *c, int i, sid *id, int end) {
    int ex = c->argvlen[i] > 1 && c->argv[i][0] == '(';
    if (parse_id(c, c->argv[i] + ex, c->argvlen[i] - ex, id, end ? UINT64_MAX : 0, ex, NULL) != 0)
        return -1;
    if (ex && (end ? sid_decr(id) : sid_incr(id)) != 0) {
        resp_add_error(&c->out, end ? "ERR invalid end ID for the interval" : "ERR invalid start ID for the interval");
        return -1;
    }
    return 0;
}

void xpendingCommand(client *c) {
    int justinfo = c->argc == 3, ci = 0;
    long long count = 0, minidle = 0;
    sid start = {0, 0}, end = {0, 0};
    stream *s;
    sgroup *g = NULL;
    if (c->argc != 3 && (c->argc < 6 || c->argc > 9)) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (c->argc >= 6) {
        int si = 3;
        if (arg_is(c, 3, "idle")) {
            if (arg_ll(c, 4, &minidle) != 0) return;
            if (c->argc < 8) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return;
            }
            si += 2;
        }
        if (arg_ll(c, si + 2, &count) != 0) return;
        if (count < 0) count = 0;
        if (arg_interval(c, si, &start, 0) != 0 || arg_interval(c, si + 1, &end, 1) != 0) return;
        if (si + 3 < c->argc) ci = si + 3;
    }
    if (lookup_stream(c, 1, 0, &s) < 0) return;
    if (s) g = stream_group_find(s, c->argv[2], c->argvlen[2]);
    if (!g) {
        reply_nogroup(c, 1, 2);
        return;
    }
    if (justinfo) {
        resp_add_array(&c->out, 4);
        resp_add_int(&c->out, (long long)g->npel);
        if (!g->npel) {
            resp_add_null(&c->out);
            resp_add_null(&c->out);
            resp_add_null_array(&c->out);
            return;
        }
        reply_sid(c, g->pel[0].id);
        reply_sid(c, g->pel[g->npel - 1].id);
        long long n = 0;
        for (size_t i = 0; i < g->ncons; i++) n += g->cons[i]->npending > 0;
        resp_add_array(&c->out, n);
        for (size_t i = 0; i < g->ncons; i++) {
            if (!g->cons[i]->npending) continue;
            resp_add_array(&c->out, 2);
            resp_add_bulk(&c->out, g->cons[i]->name, g->cons[i]->nlen);
            resp_add_bulkll(&c->out, (long long)g->cons[i]->npending);
        }
        return;
    }
    sconsumer *cons = NULL;
    if (ci && !(cons = stream_cons_find(g, c->argv[ci], c->argvlen[ci]))) {
        resp_add_array(&c->out, 0);
        return;
    }
    int64_t now = mstime();
    size_t first = stream_pel_lower(g, start), n = 0;
    size_t k;
    for (k = first; count && k < g->npel && sid_cmp(g->pel[k].id, end) <= 0; k++) {
        const spel *p = &g->pel[k];
        if (cons && p->owner != cons) continue;
        if (minidle && now - p->time < minidle) continue;
        n++;
        count--;
    }
    resp_add_array(&c->out, (long long)n);
    for (size_t j = first; n && j < k; j++) {
        const spel *p = &g->pel[j];
        if (cons && p->owner != cons) continue;
        if (minidle && now - p->time < minidle) continue;
        n--;
        resp_add_array(&c->out, 4);
        reply_sid(c, p->id);
        resp_add_bulk(&c->out, p->owner->name, p->owner->nlen);
        resp_add_int(&c->out, now - p->time < 0 ? 0 : now - p->time);
        resp_add_int(&c->out, (long long)p->count);
    }
}

/* ---------------- XCLAIM, XAUTOCLAIM ---------------- */

/* The last-delivered-id change XCLAIM LASTID makes (no-op if not above). */
static void op_lastid(rbuf *ops, const sgroup *g, sid last) {
    if (sid_cmp(last, g->last_id) > 0) op_group_id(ops, SOP_GSETID, last, g->entries_read, g->name, g->nlen);
}

/* qsort of positions into claim_ids by (id, position). */
static __thread const sid *claim_ids;
static int claim_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    int r = sid_cmp(claim_ids[i], claim_ids[j]);
    return r ? r : (i > j) - (i < j);
}

void xclaimCommand(client *c) {
    stream *s;
    sgroup *g = NULL;
    long long minidle, retrycount = -1, deliverytime = -1;
    int force = 0, justid = 0, j;
    sid last = {0, 0};
    if (lookup_stream(c, 1, 1, &s) < 0) return;
    if (s) g = stream_group_find(s, c->argv[2], c->argvlen[2]);
    if (!g) {
        reply_nogroup(c, 1, 2);
        return;
    }
    if (!string2ll(c->argv[4], c->argvlen[4], &minidle)) {
        resp_add_error(&c->out, "ERR Invalid min-idle-time argument for XCLAIM");
        return;
    }
    if (minidle < 0) minidle = 0;
    sid *ids = malloc(sizeof(sid) * (size_t)c->argc);
    if (!ids) abort();
    for (j = 5; j < c->argc; j++)
        if (parse_id(NULL, c->argv[j], c->argvlen[j], &ids[j - 5], 0, 1, NULL) != 0) break;
    int nids = j - 5;
    int64_t now = mstime();
    for (; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        const char *bad = NULL;
        if (arg_is(c, j, "force")) {
            force = 1;
        } else if (arg_is(c, j, "justid")) {
            justid = 1;
        } else if (arg_is(c, j, "idle") && more) {
            j++;
            if (!string2ll(c->argv[j], c->argvlen[j], &deliverytime)) bad = "ERR Invalid IDLE option argument for XCLAIM";
            else deliverytime = now - deliverytime;
        } else if (arg_is(c, j, "time") && more) {
            j++;
            if (!string2ll(c->argv[j], c->argvlen[j], &deliverytime)) bad = "ERR Invalid TIME option argument for XCLAIM";
        } else if (arg_is(c, j, "retrycount") && more) {
            j++;
            if (!string2ll(c->argv[j], c->argvlen[j], &retrycount)) bad = "ERR Invalid RETRYCOUNT option argument for XCLAIM";
        } else if (arg_is(c, j, "lastid") && more) {
            j++;
            if (arg_id(c, j, &last, 0, 1) != 0) goto done;
        } else {
            resp_add_errorf(&c->out, "ERR Unrecognized XCLAIM option '%.*s'", (int)c->argvlen[j], c->argv[j]);
            goto done;
        }
        if (bad) {
            resp_add_error(&c->out, bad);
            goto done;
        }
    }
    if (deliverytime != -1) {
        if (deliverytime < 0 || deliverytime > now) deliverytime = now;
    } else {
        deliverytime = now;
    }
    rbuf ops, del, set;
    rbuf_init(&ops);
    rbuf_init(&del);
    rbuf_init(&set);
    op_lastid(&ops, g, last);
    obj_put_str(&del, g->name, g->nlen);
    size_t delbase = del.len;
    pelset_start(&set, g->name, g->nlen, c->argv[3], c->argvlen[3]);
    size_t setbase = set.len;
    /* The IDs in their order; a repeated one is claimed again, from the
     * state its earlier mention left (as Redis does). Sorting (id, position)
     * puts the mentions of an ID together, in order. */
    int *order = malloc(sizeof(int) * (size_t)(nids ? nids : 1));
    char *claimed = calloc((size_t)(nids ? nids : 1), 1);
    if (!order || !claimed) abort();
    for (int i = 0; i < nids; i++) order[i] = i;
    claim_ids = ids;
    qsort(order, (size_t)nids, sizeof(int), claim_cmp);
    int nclaimed = 0;
    for (int i = 0; i < nids;) {
        sid id = ids[order[i]];
        int e = i;
        while (e < nids && sid_cmp(ids[order[e]], id) == 0) e++;
        const spel *p = stream_pel_find(g, id);
        if (!stream_entry_find(s, id)) {
            if (p) stream_put_sid(&del, id);
            i = e;
            continue;
        }
        int in_pel = p != NULL, owned = 0;
        int64_t t = p ? p->time : 0;
        uint64_t cnt = p ? p->count : 0;
        for (; i < e; i++) {
            if (!in_pel) {
                if (!force) continue;
                in_pel = 1;
                cnt = 1;
            } else if ((p || owned) && minidle && now - t < minidle) {
                continue;
            }
            t = deliverytime;
            if (retrycount >= 0) cnt = (uint64_t)retrycount;
            else if (!justid) cnt++;
            owned = 1;
            claimed[order[i]] = 1;
            nclaimed++;
        }
        if (owned) pelset_add(&set, id, t, cnt);
    }
    if (del.len > delbase) obj_op(&ops, SOP_PELDEL, del.buf, del.len);
    if (set.len > setbase) {
        op_consumer(&ops, SOP_CCREATE, now, g->name, g->nlen, c->argv[3], c->argvlen[3]);
        obj_op(&ops, SOP_PELSET, set.buf, set.len);
    }
    int r = write_ops(c, 1, &ops);
    if (r != DB_OOM) {
        resp_add_array(&c->out, nclaimed);
        for (int i = 0; i < nids; i++) {
            if (!claimed[i]) continue;
            if (justid) reply_sid(c, ids[i]);
            else reply_entry(c, stream_entry_find(s, ids[i]));
        }
    }
    free(order);
    free(claimed);
    rbuf_free(&ops);
    rbuf_free(&del);
    rbuf_free(&set);
done:
    free(ids);
}

void xautoclaimCommand(client *c) {
    stream *s;
    sgroup *g = NULL;
    long long minidle, count = 100;
    int justid = 0;
    sid start;
    if (!string2ll(c->argv[4], c->argvlen[4], &minidle)) {
        resp_add_error(&c->out, "ERR Invalid min-idle-time argument for XAUTOCLAIM");
        return;
    }
    if (minidle < 0) minidle = 0;
    if (arg_interval(c, 5, &start, 0) != 0) return;
    for (int j = 6; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        if (arg_is(c, j, "count") && more) {
            if (arg_ll_range(c, j + 1, 1, LONG_MAX / 16, &count, "ERR COUNT must be > 0") != 0) return;
            j++;
        } else if (arg_is(c, j, "justid")) {
            justid = 1;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (lookup_stream(c, 1, 1, &s) < 0) return;
    if (s) g = stream_group_find(s, c->argv[2], c->argvlen[2]);
    if (!g) {
        reply_nogroup(c, 1, 2);
        return;
    }
    long long attempts = count * 10;
    int64_t now = mstime();
    rbuf ops, del, set;
    rbuf_init(&ops);
    rbuf_init(&del);
    rbuf_init(&set);
    obj_put_str(&del, g->name, g->nlen);
    size_t delbase = del.len;
    pelset_start(&set, g->name, g->nlen, c->argv[3], c->argvlen[3]);
    size_t setbase = set.len;
    size_t k = stream_pel_lower(g, start);
    long long nclaimed = 0, ndeleted = 0;
    for (; attempts-- && count && k < g->npel; k++) {
        const spel *p = &g->pel[k];
        if (!stream_entry_find(s, p->id)) {
            stream_put_sid(&del, p->id);
            ndeleted++;
            count--;
            continue;
        }
        if (minidle && now - p->time < minidle) continue;
        pelset_add(&set, p->id, now, justid ? p->count : p->count + 1);
        nclaimed++;
        count--;
    }
    sid next = k < g->npel ? g->pel[k].id : (sid){0, 0};
    if (ndeleted) obj_op(&ops, SOP_PELDEL, del.buf, del.len);
    if (nclaimed) {
        op_consumer(&ops, SOP_CCREATE, now, g->name, g->nlen, c->argv[3], c->argvlen[3]);
        obj_op(&ops, SOP_PELSET, set.buf, set.len);
    }
    int r = write_ops(c, 1, &ops);
    if (r != DB_OOM) {
        resp_add_array(&c->out, 3);
        reply_sid(c, next);
        resp_add_array(&c->out, nclaimed);
        for (size_t off = setbase; off < set.len; off += 32) {
            sid id = stream_get_sid(set.buf + off);
            if (justid) reply_sid(c, id);
            else reply_entry(c, stream_entry_find(s, id));
        }
        resp_add_array(&c->out, ndeleted);
        for (size_t off = delbase; off < del.len; off += 16) reply_sid(c, stream_get_sid(del.buf + off));
    }
    rbuf_free(&ops);
    rbuf_free(&del);
    rbuf_free(&set);
}

/* ---------------- XINFO ---------------- */

static void reply_lag(client *c, const stream *s, const sgroup *g) {
    if (!s->entries_added) {
        resp_add_int(&c->out, 0);
    } else if (g->entries_read != SCG_INVALID_ENTRIES_READ && !range_has_tombstones(s, g->last_id)) {
        resp_add_int(&c->out, (long long)s->entries_added - g->entries_read);
    } else {
        long long er = estimate_distance(s, g->last_id);
        if (er != SCG_INVALID_ENTRIES_READ) resp_add_int(&c->out, (long long)s->entries_added - er);
        else resp_add_null(&c->out);
    }
}

static void reply_entries_read(client *c, const sgroup *g) {
    if (g->entries_read != SCG_INVALID_ENTRIES_READ) resp_add_int(&c->out, g->entries_read);
    else resp_add_null(&c->out);
}

static void reply_xinfo_syntax(client *c) {
    resp_add_errorf(&c->out, "ERR unknown subcommand or wrong number of arguments for '%.*s'. Try XINFO HELP.",
                    (int)c->argvlen[1], c->argv[1]);
}

/* XINFO's subcommands look the key up first: ERR no such key. */
static stream *xinfo_stream(client *c) {
    stream *s;
    int found = lookup_stream(c, 2, 0, &s);
    if (found == 0) resp_add_error(&c->out, ERR_NOKEY);
    return found > 0 ? s : NULL;
}

static void xinfo_stream_cmd(client *c) {
    stream *s = xinfo_stream(c);
    if (!s) return;
    int full = 0;
    long long count = 10;
    int argc = c->argc - 3;
    if (argc) {
        if ((argc != 1 && argc != 3) || !arg_is(c, 3, "full") || (argc == 3 && !arg_is(c, 4, "count"))) {
            reply_xinfo_syntax(c);
            return;
        }
        full = 1;
        if (argc == 3) {
            if (arg_ll(c, 5, &count) != 0) return;
            if (count < 0) count = 10;
        }
    }
    resp_add_map(&c->out, full ? 9 : 10);
    resp_add_bulkstr(&c->out, "length");
    resp_add_int(&c->out, (long long)s->len);
    resp_add_bulkstr(&c->out, "radix-tree-keys");
    resp_add_int(&c->out, (long long)s->nnodes);
    /* Redis's radix tree has at least one node more than keys; the exact
     * count depends on its layout, which Rowan does not have. */
    resp_add_bulkstr(&c->out, "radix-tree-nodes");
    resp_add_int(&c->out, (long long)s->nnodes + 1);
    resp_add_bulkstr(&c->out, "last-generated-id");
    reply_sid(c, s->last_id);
    resp_add_bulkstr(&c->out, "max-deleted-entry-id");
    reply_sid(c, s->max_deleted);
    resp_add_bulkstr(&c->out, "entries-added");
    resp_add_int(&c->out, (long long)s->entries_added);
    resp_add_bulkstr(&c->out, "recorded-first-entry-id");
    reply_sid(c, stream_first_id(s));
    if (!full) {
        resp_add_bulkstr(&c->out, "groups");
        resp_add_int(&c->out, (long long)s->ngroups);
        const sentry *f = stream_first_live(s), *l = stream_last_live(s);
        resp_add_bulkstr(&c->out, "first-entry");
        if (f) reply_entry(c, f);
        else resp_add_null(&c->out);
        resp_add_bulkstr(&c->out, "last-entry");
        if (l) reply_entry(c, l);
        else resp_add_null(&c->out);
        return;
    }
    resp_add_bulkstr(&c->out, "entries");
    reply_range(c, s, (sid){0, 0}, (sid){UINT64_MAX, UINT64_MAX}, count, 0);
    resp_add_bulkstr(&c->out, "groups");
    resp_add_array(&c->out, (long long)s->ngroups);
    for (size_t i = 0; i < s->ngroups; i++) {
        const sgroup *g = s->groups[i];
        resp_add_map(&c->out, 7);
        resp_add_bulkstr(&c->out, "name");
        resp_add_bulk(&c->out, g->name, g->nlen);
        resp_add_bulkstr(&c->out, "last-delivered-id");
        reply_sid(c, g->last_id);
        resp_add_bulkstr(&c->out, "entries-read");
        reply_entries_read(c, g);
        resp_add_bulkstr(&c->out, "lag");
        reply_lag(c, s, g);
        resp_add_bulkstr(&c->out, "pel-count");
        resp_add_int(&c->out, (long long)g->npel);
        resp_add_bulkstr(&c->out, "pending");
        size_t np = count && (size_t)count < g->npel ? (size_t)count : g->npel;
        resp_add_array(&c->out, (long long)np);
        for (size_t k = 0; k < np; k++) {
            resp_add_array(&c->out, 4);
            reply_sid(c, g->pel[k].id);
            resp_add_bulk(&c->out, g->pel[k].owner->name, g->pel[k].owner->nlen);
            resp_add_int(&c->out, g->pel[k].time);
            resp_add_int(&c->out, (long long)g->pel[k].count);
        }
        resp_add_bulkstr(&c->out, "consumers");
        resp_add_array(&c->out, (long long)g->ncons);
        for (size_t j = 0; j < g->ncons; j++) {
            const sconsumer *cn = g->cons[j];
            resp_add_map(&c->out, 4);
            resp_add_bulkstr(&c->out, "name");
            resp_add_bulk(&c->out, cn->name, cn->nlen);
            resp_add_bulkstr(&c->out, "seen-time");
            resp_add_int(&c->out, cn->seen);
            resp_add_bulkstr(&c->out, "pel-count");
            resp_add_int(&c->out, (long long)cn->npending);
            resp_add_bulkstr(&c->out, "pending");
            size_t cp = count && (size_t)count < cn->npending ? (size_t)count : cn->npending;
            resp_add_array(&c->out, (long long)cp);
            for (size_t k = 0, n = 0; n < cp && k < g->npel; k++) {
                if (g->pel[k].owner != cn) continue;
                resp_add_array(&c->out, 3);
                reply_sid(c, g->pel[k].id);
                resp_add_int(&c->out, g->pel[k].time);
                resp_add_int(&c->out, (long long)g->pel[k].count);
                n++;
            }
        }
    }
}

static void xinfo_groups(client *c) {
    stream *s = xinfo_stream(c);
    if (!s) return;
    resp_add_array(&c->out, (long long)s->ngroups);
    for (size_t i = 0; i < s->ngroups; i++) {
        const sgroup *g = s->groups[i];
        resp_add_map(&c->out, 6);
        resp_add_bulkstr(&c->out, "name");
        resp_add_bulk(&c->out, g->name, g->nlen);
        resp_add_bulkstr(&c->out, "consumers");
        resp_add_int(&c->out, (long long)g->ncons);
        resp_add_bulkstr(&c->out, "pending");
        resp_add_int(&c->out, (long long)g->npel);
        resp_add_bulkstr(&c->out, "last-delivered-id");
        reply_sid(c, g->last_id);
        resp_add_bulkstr(&c->out, "entries-read");
        reply_entries_read(c, g);
        resp_add_bulkstr(&c->out, "lag");
        reply_lag(c, s, g);
    }
}

static void xinfo_consumers(client *c) {
    stream *s = xinfo_stream(c);
    if (!s) return;
    sgroup *g = stream_group_find(s, c->argv[3], c->argvlen[3]);
    if (!g) {
        resp_add_errorf(&c->out, "NOGROUP No such consumer group '%.*s' for key name '%.*s'",
                        (int)c->argvlen[3], c->argv[3], (int)c->argvlen[2], c->argv[2]);
        return;
    }
    int64_t now = mstime();
    resp_add_array(&c->out, (long long)g->ncons);
    for (size_t j = 0; j < g->ncons; j++) {
        const sconsumer *cn = g->cons[j];
        int64_t idle = now - cn->seen;
        resp_add_map(&c->out, 3);
        resp_add_bulkstr(&c->out, "name");
        resp_add_bulk(&c->out, cn->name, cn->nlen);
        resp_add_bulkstr(&c->out, "pending");
        resp_add_int(&c->out, (long long)cn->npending);
        resp_add_bulkstr(&c->out, "idle");
        resp_add_int(&c->out, idle < 0 ? 0 : idle);
    }
}

static void xinfo_help(client *c) {
    static const char *const lines[] = {
        "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CONSUMERS <key> <groupname>",
        "    Show consumers of <groupname>.",
        "GROUPS <key>",
        "    Show the stream consumer groups.",
        "STREAM <key> [FULL [COUNT <count>]",
        "    Show information about the stream.",
        "HELP",
        "    Print this help.",
        NULL};
    reply_help(c, lines);
}

static const subcommand xinfo_subs[] = {
    {"stream", -3, xinfo_stream_cmd},
    {"groups", 3, xinfo_groups},
    {"consumers", 4, xinfo_consumers},
    {"help", 2, xinfo_help},
    {NULL, 0, NULL}};

void xinfoCommand(client *c) { subcommand_dispatch(c, xinfo_subs, "xinfo"); }
