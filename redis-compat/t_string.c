/* t_string.c -- the string commands: GET/SET and friends, counters, ranges
 * and bits.
 *
 * Replies, errors and the order in which arguments are checked follow Redis
 * 7.2, because clients and test suites see all three.
 *
 * Every write is an effect (DESIGN.md §3): whatever the command, what goes to
 * the keyspace is the key's complete new value and its absolute expiry,
 * written with db_set. INCR computes the new number and stores its text;
 * APPEND, SETRANGE and SETBIT build the new value in a temporary buffer.
 * Replaying the log therefore never re-executes a command, it only installs
 * values. A command that keeps the TTL (INCR, APPEND, SETRANGE, SETBIT...)
 * passes the old absolute expiry on; SET and friends clear it unless told
 * to keep it (KEEPTTL). An absolute expiry already in the past is stored as
 * a deletion, which is what it amounts to.
 *
 * Reads that Redis does with lookupKeyRead (they count keyspace hits and
 * misses) use db_lookup; those Redis does with lookupKeyWrite use db_peek.
 *
 * Any write may fail with DB_OOM when the storage pool is full. Nothing has
 * changed then, and the command replies with the OOM error only: commands
 * that reply before writing (GETDEL, GETEX, SET ... GET) take back what they
 * had already appended.
 *
 * The dispatcher holds the shard locks of every key argument, so a db_val
 * read here stays valid for the whole command. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "evict.h"
#include "notify.h"
#include "server.h"
#include "t_string.h"
#include "util.h"

/* Room for any INCRBYFLOAT result: the largest long double printed with 17
 * decimals is under 5000 characters. Also the input limit of string2ld. */
#define LDOUBLE_TEXT_MAX (5 * 1024)

/* ---------------- shared helpers ---------------- */

/* Look argv[i] up as a string. 1 found (*v filled), 0 missing, -1 the key
 * holds another type (WRONGTYPE replied). for_write picks db_peek, which
 * does not count a keyspace hit or miss. */
int lookup_string(client *c, int i, db_val *v, int for_write) {
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], v);
    if (!found) return 0;
    if (v->type != OBJ_STRING) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    return 1;
}

/* Write argv[i] := val with an absolute expiry; an expiry already reached
 * means the key is gone, so that is logged as a deletion instead. */
static int store_string(client *c, int i, const char *val, size_t len, int64_t expire_ms) {
    if (expire_ms && expire_ms <= mstime()) {
        int r = db_del(&c->x, c->db, c->argv[i], c->argvlen[i]);
        return r == DB_OOM ? DB_OOM : DB_OK;
    }
    return db_set(&c->x, c->db, c->argv[i], c->argvlen[i], val, len, expire_ms);
}

/* Replace whatever this command has replied so far with the OOM error. */
static void reply_oom(client *c, size_t reply_start) {
    c->out.b.len = reply_start;
    resp_add_error(&c->out, db_error_text(&c->x));
}

static void reply_invalid_expire(client *c) {
    resp_add_errorf(&c->out, "ERR invalid expire time in '%s' command", c->cmd->name);
}

/* Redis refuses to build strings longer than proto-max-bulk-len. A string
 * that db_set would refuse (no room in the pool for it, or over one log
 * entry inside a transaction) is refused here too, before the new value is
 * built, not after SETRANGE had filled hundreds of megabytes with zeroes. */
static int check_string_length(client *c, unsigned long long size, unsigned long long append) {
    unsigned long long max = (unsigned long long)server.cfg.proto_max_bulk_len;
    if (append > max || size > max - append) {
        resp_add_error(&c->out, "ERR string exceeds maximum allowed size (proto-max-bulk-len)");
        return -1;
    }
    const char *why = db_check_string(&c->x, c->argvlen[1], size + append);
    if (why) {
        resp_add_error(&c->out, why);
        return -1;
    }
    return 0;
}


/* ---------------- SET options (SET, SETEX, PSETEX, SETNX, GETSET, GETEX) ---------------- */

#define SET_NX      (1 << 0)
#define SET_XX      (1 << 1)
#define SET_GET     (1 << 2)
#define SET_KEEPTTL (1 << 3)
#define SET_PERSIST (1 << 4)   /* GETEX only */
#define SET_EX      (1 << 5)
#define SET_PX      (1 << 6)
#define SET_EXAT    (1 << 7)
#define SET_PXAT    (1 << 8)
#define SET_EXPIRE  (SET_EX | SET_PX | SET_EXAT | SET_PXAT)

enum { OPTS_SET, OPTS_GETEX };

typedef struct set_opts {
    int flags;
    int expire_arg;    /* argv index of the EX/PX/EXAT/PXAT value */
} set_opts;

/* Parse argv[first..] as SET's (or GETEX's) options. Any option that
 * conflicts with one already given, or does not belong to the command, is a
 * syntax error; repeating the same option is accepted, the last value wins,
 * as in Redis. Replies and returns -1 on error. */
static int parse_set_options(client *c, int first, int which, set_opts *o) {
    static const struct { const char *name; int flag; } expires[] = {
        {"ex", SET_EX}, {"px", SET_PX}, {"exat", SET_EXAT}, {"pxat", SET_PXAT},
    };
    o->flags = 0;
    o->expire_arg = 0;
    for (int j = first; j < c->argc; j++) {
        int f = o->flags, has_next = j + 1 < c->argc, matched = 0;

        if (which == OPTS_SET && arg_is(c, j, "nx") && !(f & SET_XX)) {
            o->flags |= SET_NX;
            matched = 1;
        } else if (which == OPTS_SET && arg_is(c, j, "xx") && !(f & SET_NX)) {
            o->flags |= SET_XX;
            matched = 1;
        } else if (which == OPTS_SET && arg_is(c, j, "get")) {
            o->flags |= SET_GET;
            matched = 1;
        } else if (which == OPTS_SET && arg_is(c, j, "keepttl") && !(f & SET_EXPIRE)) {
            o->flags |= SET_KEEPTTL;
            matched = 1;
        } else if (which == OPTS_GETEX && arg_is(c, j, "persist") && !(f & SET_EXPIRE)) {
            o->flags |= SET_PERSIST;
            matched = 1;
        } else {
            for (size_t k = 0; k < sizeof(expires) / sizeof(expires[0]); k++) {
                int others = SET_KEEPTTL | SET_PERSIST | (SET_EXPIRE & ~expires[k].flag);
                if (arg_is(c, j, expires[k].name) && !(f & others) && has_next) {
                    o->flags |= expires[k].flag;
                    o->expire_arg = ++j;
                    matched = 1;
                    break;
                }
            }
        }
        if (!matched) {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    return 0;
}

/* The absolute expiry (unix ms) the options ask for. The value must be a
 * positive integer, and neither the unit conversion nor adding the current
 * time may overflow. Replies and returns -1 on error. */
static int set_expire_ms(client *c, const set_opts *o, int64_t *out) {
    long long v;
    int seconds = o->flags & (SET_EX | SET_EXAT);
    int relative = o->flags & (SET_EX | SET_PX);

    if (arg_ll(c, o->expire_arg, &v) != 0) return -1;
    if (v <= 0 || (seconds && v > LLONG_MAX / 1000)) {
        reply_invalid_expire(c);
        return -1;
    }
    if (seconds) v *= 1000;
    if (relative) {
        int64_t now = mstime();
        if (v > LLONG_MAX - now) {
            reply_invalid_expire(c);
            return -1;
        }
        v += now;
    }
    *out = v;
    return 0;
}

enum { REPLY_OK_NULL, REPLY_ONE_ZERO };

/* SET key(argv[1]) := argv[val_arg] under the options. SET and GETSET reply
 * +OK (or nil when NX/XX stopped it); SETNX replies 1/0. With GET the reply
 * is the old value instead, whether or not the write happened. */
static void set_generic(client *c, const set_opts *o, int val_arg, int reply_style) {
    int64_t expire = 0;
    size_t reply_start = c->out.b.len;
    db_val old;
    int found;

    if ((o->flags & SET_EXPIRE) && set_expire_ms(c, o, &expire) != 0) return;

    if (o->flags & SET_GET) {
        found = lookup_string(c, 1, &old, 0);
        if (found < 0) return;
        if (found) resp_add_bulk(&c->out, old.ptr, old.len);
        else resp_add_null(&c->out);
    } else {
        found = db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &old);
    }

    if (((o->flags & SET_NX) && found) || ((o->flags & SET_XX) && !found)) {
        if (o->flags & SET_GET) return;
        if (reply_style == REPLY_ONE_ZERO) resp_add_int(&c->out, 0);
        else resp_add_null(&c->out);
        return;
    }

    if ((o->flags & SET_KEEPTTL) && found) expire = old.expire_ms;
    if (store_string(c, 1, c->argv[val_arg], c->argvlen[val_arg], expire) == DB_OOM) {
        reply_oom(c, reply_start);
        return;
    }
    notify_key(c, NOTIFY_STRING, "set", 1);
    if (o->flags & SET_EXPIRE) notify_key(c, NOTIFY_GENERIC, "expire", 1);
    if (o->flags & SET_GET) return;
    if (reply_style == REPLY_ONE_ZERO) resp_add_int(&c->out, 1);
    else resp_add_ok(&c->out);
}

void setCommand(client *c) {
    set_opts o;
    if (parse_set_options(c, 3, OPTS_SET, &o) != 0) return;
    set_generic(c, &o, 2, REPLY_OK_NULL);
}

void setnxCommand(client *c) {
    set_opts o = {SET_NX, 0};
    set_generic(c, &o, 2, REPLY_ONE_ZERO);
}

void setexCommand(client *c) {
    set_opts o = {SET_EX, 2};
    set_generic(c, &o, 3, REPLY_OK_NULL);
}

void psetexCommand(client *c) {
    set_opts o = {SET_PX, 2};
    set_generic(c, &o, 3, REPLY_OK_NULL);
}

/* GETSET is SET key value GET. */
void getsetCommand(client *c) {
    set_opts o = {SET_GET, 0};
    set_generic(c, &o, 2, REPLY_OK_NULL);
}

/* ---------------- reading ---------------- */

void getCommand(client *c) {
    db_val v;
    int r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    if (r == 0) resp_add_null(&c->out);
    else resp_add_bulk(&c->out, v.ptr, v.len);
}

/* GETEX checks its options, then the key, and only then the expiry value:
 * a missing key answers nil even when the value is bad. */
void getexCommand(client *c) {
    set_opts o;
    int64_t expire = 0;
    db_val v;
    size_t reply_start;
    int found, w = DB_OK;

    if (parse_set_options(c, 2, OPTS_GETEX, &o) != 0) return;
    found = lookup_string(c, 1, &v, 0);
    if (found < 0) return;
    if (!found) {
        resp_add_null(&c->out);
        return;
    }
    if ((o.flags & SET_EXPIRE) && set_expire_ms(c, &o, &expire) != 0) return;

    reply_start = c->out.b.len;
    resp_add_bulk(&c->out, v.ptr, v.len);
    if (o.flags & SET_EXPIRE) {
        /* db_set_expire deletes the key when EXAT/PXAT is already past. */
        w = db_set_expire(&c->x, c->db, c->argv[1], c->argvlen[1], expire);
    } else if ((o.flags & SET_PERSIST) && v.expire_ms) {
        w = db_set_expire(&c->x, c->db, c->argv[1], c->argvlen[1], 0);
    }
    if (w == DB_OOM) reply_oom(c, reply_start);
    else if (o.flags & SET_EXPIRE) notify_key(c, NOTIFY_GENERIC, expire <= mstime() ? "del" : "expire", 1);
    else if ((o.flags & SET_PERSIST) && v.expire_ms) notify_key(c, NOTIFY_GENERIC, "persist", 1);
}

void getdelCommand(client *c) {
    db_val v;
    size_t reply_start = c->out.b.len;
    int r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    if (r == 0) {
        resp_add_null(&c->out);
        return;
    }
    resp_add_bulk(&c->out, v.ptr, v.len);
    if (db_del(&c->x, c->db, c->argv[1], c->argvlen[1]) == DB_OOM) reply_oom(c, reply_start);
    else notify_key(c, NOTIFY_GENERIC, "del", 1);
}

/* A key holding another type is a nil in MGET's reply, not an error. */
void mgetCommand(client *c) {
    resp_add_array(&c->out, c->argc - 1);
    for (int j = 1; j < c->argc; j++) {
        db_val v;
        if (db_lookup(&c->x, c->db, c->argv[j], c->argvlen[j], &v) && v.type == OBJ_STRING)
            resp_add_bulk(&c->out, v.ptr, v.len);
        else
            resp_add_null(&c->out);
    }
}

void strlenCommand(client *c) {
    db_val v;
    int r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    resp_add_int(&c->out, r ? (long long)v.len : 0);
}

/* Redis's index rules: negative indexes count from the end, both ends are
 * clamped to the string, and an empty range gives "". */
void getrangeCommand(client *c) {
    long long start, end, len;
    db_val v;
    int r;

    if (arg_ll(c, 2, &start) != 0 || arg_ll(c, 3, &end) != 0) return;
    r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    if (r == 0 || (start < 0 && end < 0 && start > end)) {
        resp_add_bulk(&c->out, "", 0);
        return;
    }
    len = (long long)v.len;
    if (start < 0) start += len;
    if (end < 0) end += len;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    if (end >= len) end = len - 1;
    if (len == 0 || start > end) resp_add_bulk(&c->out, "", 0);
    else resp_add_bulk(&c->out, v.ptr + start, (size_t)(end - start + 1));
}

/* ---------------- multi-key writes ---------------- */

/* MSET and MSETNX: all keys are written in one batch, so after a crash
 * either every key has its new value or none has. Both clear TTLs. */
static void mset_generic(client *c, int nx) {
    if (c->argc % 2 == 0) {
        resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s' command", c->cmd->name);
        return;
    }
    if (nx) {
        for (int j = 1; j < c->argc; j += 2) {
            db_val v;
            if (db_peek(&c->x, c->db, c->argv[j], c->argvlen[j], &v)) {
                resp_add_int(&c->out, 0);
                return;
            }
        }
    }
    db_batch_begin(&c->x);
    for (int j = 1; j < c->argc; j += 2)
        db_set(&c->x, c->db, c->argv[j], c->argvlen[j], c->argv[j + 1], c->argvlen[j + 1], 0);
    if (db_batch_end(&c->x) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    for (int j = 1; j < c->argc; j += 2) notify_key(c, NOTIFY_STRING, "set", j);
    if (nx) resp_add_int(&c->out, 1);
    else resp_add_ok(&c->out);
}

void msetCommand(client *c) { mset_generic(c, 0); }
void msetnxCommand(client *c) { mset_generic(c, 1); }

/* ---------------- building new values ---------------- */

void appendCommand(client *c) {
    const char *add = c->argv[2];
    size_t addlen = c->argvlen[2];
    db_val v;
    char *buf;
    int r = lookup_string(c, 1, &v, 1);

    if (r < 0) return;
    if (r == 0) {
        if (db_set(&c->x, c->db, c->argv[1], c->argvlen[1], add, addlen, 0) == DB_OOM) {
            resp_add_error(&c->out, db_error_text(&c->x));
            return;
        }
        notify_key(c, NOTIFY_STRING, "append", 1);
        resp_add_int(&c->out, (long long)addlen);
        return;
    }
    if (check_string_length(c, v.len, addlen) != 0) return;
    buf = malloc(v.len + addlen + 1);
    memcpy(buf, v.ptr, v.len);
    memcpy(buf + v.len, add, addlen);
    r = db_set(&c->x, c->db, c->argv[1], c->argvlen[1], buf, v.len + addlen, v.expire_ms);
    free(buf);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    string_mark_edited(c, 1);   /* Redis appends in place: "raw" */
    notify_key(c, NOTIFY_STRING, "append", 1);
    resp_add_int(&c->out, (long long)(v.len + addlen));
}

void string_mark_edited(client *c, int i) {
    int sid;
    uint64_t hash;
    db_key_clock(&c->x, c->db, c->argv[i], c->argvlen[i], &sid, &hash);
    evict_mark(sid, hash);
}

int string_edited(client *c, int i) {
    int sid;
    uint64_t hash;
    db_key_clock(&c->x, c->db, c->argv[i], c->argvlen[i], &sid, &hash);
    return evict_marked(sid, hash);
}

/* Writing nothing never creates or changes the key: it only reports the
 * current length. Otherwise the string grows, zero padded, as needed. */
void setrangeCommand(client *c) {
    const char *val = c->argv[3];
    size_t vlen = c->argvlen[3], newlen;
    long long offset;
    db_val v;
    char *buf;
    int r;

    if (arg_ll(c, 2, &offset) != 0) return;
    if (offset < 0) {
        resp_add_error(&c->out, "ERR offset is out of range");
        return;
    }
    r = lookup_string(c, 1, &v, 1);
    if (r < 0) return;
    if (r == 0) {
        v.len = 0;
        v.ptr = NULL;
        v.expire_ms = 0;
    }
    if (vlen == 0) {
        resp_add_int(&c->out, (long long)v.len);
        return;
    }
    if (check_string_length(c, (unsigned long long)offset, vlen) != 0) return;

    newlen = (size_t)offset + vlen;
    if (newlen < v.len) newlen = v.len;
    buf = malloc(newlen ? newlen : 1);
    if (v.len) memcpy(buf, v.ptr, v.len);
    if ((size_t)offset > v.len) memset(buf + v.len, 0, (size_t)offset - v.len);
    memcpy(buf + offset, val, vlen);
    r = db_set(&c->x, c->db, c->argv[1], c->argvlen[1], buf, newlen, v.expire_ms);
    free(buf);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    string_mark_edited(c, 1);   /* as Redis's: "raw" */
    notify_key(c, NOTIFY_STRING, "setrange", 1);
    resp_add_int(&c->out, (long long)newlen);
}

/* ---------------- counters ---------------- */

/* INCR, DECR, INCRBY, DECRBY: a missing key counts as 0; the value must be
 * a strict integer (see string2ll); the result is stored as its decimal
 * text, keeping the key's TTL. */
static void incr_generic(client *c, long long incr) {
    long long value = 0;
    char buf[32];
    db_val v;
    int len, r = lookup_string(c, 1, &v, 1);

    if (r < 0) return;
    if (r == 0) v.expire_ms = 0;
    else if (!string2ll(v.ptr, v.len, &value)) {
        resp_add_error(&c->out, ERR_NOTINT);
        return;
    }
    if ((incr < 0 && value < 0 && incr < LLONG_MIN - value) ||
        (incr > 0 && value > 0 && incr > LLONG_MAX - value)) {
        resp_add_error(&c->out, ERR_OVERFLOW);
        return;
    }
    value += incr;
    len = ll2string(buf, sizeof(buf), value);
    if (db_set(&c->x, c->db, c->argv[1], c->argvlen[1], buf, (size_t)len, v.expire_ms) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_STRING, "incrby", 1);
    resp_add_int(&c->out, value);
}

void incrCommand(client *c) { incr_generic(c, 1); }
void decrCommand(client *c) { incr_generic(c, -1); }

void incrbyCommand(client *c) {
    long long incr;
    if (arg_ll(c, 2, &incr) != 0) return;
    incr_generic(c, incr);
}

void decrbyCommand(client *c) {
    long long decr;
    if (arg_ll(c, 2, &decr) != 0) return;
    /* -LLONG_MIN does not exist. */
    if (decr == LLONG_MIN) {
        resp_add_error(&c->out, "ERR decrement would overflow");
        return;
    }
    incr_generic(c, -decr);
}

/* Long double arithmetic, printed in fixed notation (ld2string), so that
 * 10.5 + 0.1 reads back as "10.6". Unlike INCRBY, Redis checks the key
 * before the increment argument. */
void incrbyfloatCommand(client *c) {
    long double value = 0, incr;
    char buf[LDOUBLE_TEXT_MAX + 64];
    db_val v;
    int len, r = lookup_string(c, 1, &v, 1);

    if (r < 0) return;
    if (r == 0) v.expire_ms = 0;
    else if (!string2ld(v.ptr, v.len, &value)) {
        resp_add_error(&c->out, ERR_NOTFLOAT);
        return;
    }
    if (arg_ldouble(c, 2, &incr) != 0) return;
    value += incr;
    if (isnan(value) || isinf(value)) {
        resp_add_error(&c->out, "ERR increment would produce NaN or Infinity");
        return;
    }
    len = ld2string(buf, sizeof(buf), value);
    if (db_set(&c->x, c->db, c->argv[1], c->argvlen[1], buf, (size_t)len, v.expire_ms) == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_STRING, "incrbyfloat", 1);
    resp_add_bulk(&c->out, buf, (size_t)len);
}

/* ---------------- bits ---------------- */

/* A bit offset: a non-negative integer whose byte lies within
 * proto-max-bulk-len ("#n" = n * bits for BITFIELD). Replies and returns -1
 * otherwise. */
int parse_bit_offset_arg(client *c, int i, int bits, unsigned long long *off) {
    int hash = bits > 0 && c->argvlen[i] > 0 && c->argv[i][0] == '#';
    long long v;
    if (!string2ll(c->argv[i] + hash, c->argvlen[i] - hash, &v) ||
        (hash && (v < 0 || v > LLONG_MAX / bits)) || v < 0 ||
        ((v *= hash ? bits : 1) >> 3) >= server.cfg.proto_max_bulk_len) {
        resp_add_error(&c->out, "ERR bit offset is not an integer or out of range");
        return -1;
    }
    *off = (unsigned long long)v;
    return 0;
}

static int parse_bit_offset(client *c, int i, unsigned long long *off) {
    return parse_bit_offset_arg(c, i, 0, off);
}

/* Bits are numbered from the most significant bit of byte 0. */
static int bit_at(const char *p, size_t len, unsigned long long off) {
    size_t byte = (size_t)(off >> 3);
    if (byte >= len) return 0;
    return ((unsigned char)p[byte] >> (7 - (off & 7))) & 1;
}

void setbitCommand(client *c) {
    const char *err = "ERR bit is not an integer or out of range";
    unsigned long long off;
    long long on;
    size_t byte, newlen;
    db_val v;
    char *buf;
    int r, old;

    if (parse_bit_offset(c, 2, &off) != 0) return;
    if (!string2ll(c->argv[3], c->argvlen[3], &on) || (on & ~1LL)) {
        resp_add_error(&c->out, err);
        return;
    }
    r = lookup_string(c, 1, &v, 1);
    if (r < 0) return;
    if (r == 0) {
        v.len = 0;
        v.ptr = NULL;
        v.expire_ms = 0;
    }
    old = bit_at(v.ptr, v.len, off);
    byte = (size_t)(off >> 3);
    newlen = byte + 1 > v.len ? byte + 1 : v.len;

    /* An existing key whose bit already has the value needs no new entry.
     * (A missing key is still created, zero filled, as Redis does.) */
    if (r == 1 && newlen == v.len && old == on) {
        string_mark_edited(c, 1);   /* Redis unshares the value all the same */
        resp_add_int(&c->out, old);
        return;
    }
    buf = calloc(1, newlen);
    if (v.len) memcpy(buf, v.ptr, v.len);
    if (on) buf[byte] = (char)((unsigned char)buf[byte] | (1u << (7 - (off & 7))));
    else buf[byte] = (char)((unsigned char)buf[byte] & ~(1u << (7 - (off & 7))));
    r = db_set(&c->x, c->db, c->argv[1], c->argvlen[1], buf, newlen, v.expire_ms);
    free(buf);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    string_mark_edited(c, 1);
    notify_key(c, NOTIFY_STRING, "setbit", 1);
    resp_add_int(&c->out, old);
}

void getbitCommand(client *c) {
    unsigned long long off;
    db_val v;
    int r;

    if (parse_bit_offset(c, 2, &off) != 0) return;
    r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    resp_add_int(&c->out, r ? bit_at(v.ptr, v.len, off) : 0);
}

static long long popcount(const unsigned char *p, size_t n) {
    long long count = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        count += __builtin_popcountll(w);
    }
    for (; i < n; i++) count += __builtin_popcount(p[i]);
    return count;
}

/* BITCOUNT key [start end [BYTE|BIT]]. As in Redis 7.2 the key is looked up
 * first: a missing key answers 0 whatever the other arguments are (Redis 8
 * changed that). With BIT, start and end are bit positions and the partial
 * edge bytes are masked. */
void bitcountCommand(client *c) {
    const unsigned char *p;
    long long start, end, total, count;
    unsigned char first_mask = 0xff, last_mask = 0xff;
    int isbit = 0;
    db_val v;
    int r = lookup_string(c, 1, &v, 0);

    if (r < 0) return;
    if (r == 0) {
        resp_add_int(&c->out, 0);
        return;
    }
    p = (const unsigned char *)v.ptr;
    total = (long long)v.len;

    if (c->argc == 2) {
        resp_add_int(&c->out, popcount(p, v.len));
        return;
    }
    if (c->argc != 4 && c->argc != 5) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (arg_ll(c, 2, &start) != 0 || arg_ll(c, 3, &end) != 0) return;
    if (start < 0 && end < 0 && start > end) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (c->argc == 5) {
        if (arg_is(c, 4, "bit")) isbit = 1;
        else if (!arg_is(c, 4, "byte")) {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (isbit) total <<= 3;
    if (start < 0) start += total;
    if (end < 0) end += total;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    if (end >= total) end = total - 1;
    if (start > end) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (isbit) {
        /* Keep only the bits from start's position on in the first byte and
         * up to end's position in the last one. */
        first_mask = (unsigned char)(0xff >> (start & 7));
        last_mask = (unsigned char)(0xff << (7 - (end & 7)));
        start >>= 3;
        end >>= 3;
    }
    count = popcount(p + start, (size_t)(end - start + 1));
    count -= popcount(&(unsigned char){(unsigned char)(p[start] & ~first_mask)}, 1);
    count -= popcount(&(unsigned char){(unsigned char)(p[end] & ~last_mask)}, 1);
    resp_add_int(&c->out, count);
}
