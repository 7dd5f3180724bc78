/* t_keys.c -- commands on keys of any type: deletion, existence, expiry,
 * iteration, renaming and the logical databases.
 *
 * Replies, errors and the order of argument checks follow Redis 7.2.
 *
 * Effects, not commands (DESIGN.md §3): expiries go to the keyspace as
 * absolute unix milliseconds (EXPIRE 10 logs "expires at T", never "in 10
 * s"), and an expiry that is already due is logged as a deletion. Commands
 * that write several keys -- DEL/UNLINK with more than one key, RENAME,
 * RENAMENX, MOVE -- do it in one db batch, so a crash leaves all or none of
 * their writes.
 *
 * Locking: the dispatcher holds the shard locks of every key argument.
 * KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB, FLUSHALL, SWAPDB and SELECT name
 * no keys and use the db_* calls that lock shards themselves.
 *
 * Reads that Redis does with lookupKeyRead (counting keyspace hits and
 * misses: EXISTS, TYPE, TTL, TOUCH) use db_lookup; the lookups of write
 * commands use db_peek. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "notify.h"
#include "tracking.h"
#include "blocking.h"
#include "cluster.h"
#include "object.h"
#include "server.h"
#include "util.h"

static void reply_oom(client *c) {
    resp_add_error(&c->out, db_error_text(&c->x));
}

/* TYPE's answer: a collection's class names it (object.h); a type whose
 * class is not registered falls back to Redis's fixed names. */
static const char *type_name(int type) {
    if (type != OBJ_STRING && type != OBJ_NONE) {
        const obj_class *k = obj_class_of(type);
        if (k && k->name) return k->name;
    }
    switch (type) {
    case OBJ_STRING: return "string";
    case OBJ_LIST: return "list";
    case OBJ_SET: return "set";
    case OBJ_ZSET: return "zset";
    case OBJ_HASH: return "hash";
    default: return "none";
    }
}

/* ---------------- DEL, UNLINK, EXISTS, TOUCH, TYPE ---------------- */

/* UNLINK is DEL: freeing is never the slow part here, the log entry is the
 * same either way. */
static void del_generic(client *c) {
    int batch = c->argc > 2;
    long long deleted = 0;
    char *gone = calloc((size_t)c->argc, 1);   /* which keys to report "del" for */

    if (batch) db_batch_begin(&c->x);
    for (int j = 1; j < c->argc; j++) {
        int r = db_del(&c->x, c->db, c->argv[j], c->argvlen[j]);
        if (r == DB_OOM) {   /* only outside a batch: batches fail at the end */
            reply_oom(c);
            free(gone);
            return;
        }
        deleted += r;
        /* An XREADGROUP blocked on a deleted stream is told (t_stream.c). */
        if (r == 1) blocking_signal_key_all(c->db, c->argv[j], c->argvlen[j]);
        gone[j] = (char)r;
    }
    if (batch && db_batch_end(&c->x) == DB_OOM) {
        reply_oom(c);
        free(gone);
        return;
    }
    for (int j = 1; j < c->argc; j++)
        if (gone[j]) notify_key(c, NOTIFY_GENERIC, "del", j);
    free(gone);
    resp_add_int(&c->out, deleted);
}

void delCommand(client *c) { del_generic(c); }
void unlinkCommand(client *c) { del_generic(c); }

/* How many of the key arguments exist; a key named twice counts twice. */
static long long count_existing(client *c) {
    long long n = 0;
    for (int j = 1; j < c->argc; j++) {
        db_val v;
        n += db_lookup(&c->x, c->db, c->argv[j], c->argvlen[j], &v);
    }
    return n;
}

void existsCommand(client *c) { resp_add_int(&c->out, count_existing(c)); }
/* There is no LRU/LFU clock to update, so TOUCH only counts. */
void touchCommand(client *c) { resp_add_int(&c->out, count_existing(c)); }

void typeCommand(client *c) {
    db_val v;
    int found = db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v);
    resp_add_simple(&c->out, type_name(found ? v.type : OBJ_NONE));
}

/* ---------------- EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT ---------------- */

#define EXPIRE_NX (1 << 0)
#define EXPIRE_XX (1 << 1)
#define EXPIRE_GT (1 << 2)
#define EXPIRE_LT (1 << 3)

static void reply_invalid_expire(client *c) {
    resp_add_errorf(&c->out, "ERR invalid expire time in '%s' command", c->cmd->name);
}

/* argv[3..]: NX | XX | GT | LT. Replies and returns -1 on error. */
static int parse_expire_flags(client *c, int *flags) {
    static const struct { const char *name; int flag; } opts[] = {
        {"nx", EXPIRE_NX}, {"xx", EXPIRE_XX}, {"gt", EXPIRE_GT}, {"lt", EXPIRE_LT},
    };
    *flags = 0;
    for (int j = 3; j < c->argc; j++) {
        int f = 0;
        for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]) && !f; k++)
            if (arg_is(c, j, opts[k].name)) f = opts[k].flag;
        if (!f) {
            resp_add_errorf(&c->out, "ERR Unsupported option %.*s", (int)c->argvlen[j], c->argv[j]);
            return -1;
        }
        *flags |= f;
    }
    if ((*flags & EXPIRE_NX) && (*flags & (EXPIRE_XX | EXPIRE_GT | EXPIRE_LT))) {
        resp_add_error(&c->out, "ERR NX and XX, GT or LT options at the same time are not compatible");
        return -1;
    }
    if ((*flags & EXPIRE_GT) && (*flags & EXPIRE_LT)) {
        resp_add_error(&c->out, "ERR GT and LT options at the same time are not compatible");
        return -1;
    }
    return 0;
}

/* Whether the NX/XX/GT/LT conditions allow replacing expiry `cur` (0 = the
 * key has none) by `when`. GT and LT treat "no expiry" as infinitely far:
 * GT never beats it, LT always does. */
static int expire_allowed(int flags, int64_t cur, long long when) {
    if ((flags & EXPIRE_NX) && cur) return 0;
    if ((flags & EXPIRE_XX) && !cur) return 0;
    if ((flags & EXPIRE_GT) && (!cur || when <= cur)) return 0;
    if ((flags & EXPIRE_LT) && cur && when >= cur) return 0;
    return 1;
}

/* The four EXPIRE commands: `relative` adds the current time, `seconds`
 * scales by 1000. Negative times are allowed (they delete the key), but the
 * scaling and the addition must not overflow. */
static void expire_generic(client *c, int relative, int seconds) {
    int64_t now = mstime();
    long long when;
    int flags, r;
    db_val v;

    if (parse_expire_flags(c, &flags) != 0) return;
    if (arg_ll(c, 2, &when) != 0) return;
    if (seconds) {
        if (when > LLONG_MAX / 1000 || when < LLONG_MIN / 1000) {
            reply_invalid_expire(c);
            return;
        }
        when *= 1000;
    }
    if (relative) {
        if (when > LLONG_MAX - now) {
            reply_invalid_expire(c);
            return;
        }
        when += now;
    }

    if (!db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (!expire_allowed(flags, v.expire_ms, when)) {
        resp_add_int(&c->out, 0);
        return;
    }
    /* A time already reached deletes the key (this also covers 0 and
     * negative times, which db_set_expire would read as "no expiry"). */
    if (when <= now) r = db_del(&c->x, c->db, c->argv[1], c->argvlen[1]);
    else r = db_set_expire(&c->x, c->db, c->argv[1], c->argvlen[1], when);
    if (r == DB_OOM) {
        reply_oom(c);
        return;
    }
    notify_key(c, NOTIFY_GENERIC, when <= now ? "del" : "expire", 1);
    resp_add_int(&c->out, 1);
}

void expireCommand(client *c) { expire_generic(c, 1, 1); }
void pexpireCommand(client *c) { expire_generic(c, 1, 0); }
void expireatCommand(client *c) { expire_generic(c, 0, 1); }
void pexpireatCommand(client *c) { expire_generic(c, 0, 0); }

/* ---------------- TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST ---------------- */

/* -2 for a missing key, -1 for no expiry; otherwise the remaining time
 * (never negative) or, with `absolute`, the expiry itself. Seconds are
 * rounded to the nearest. */
static void ttl_generic(client *c, int ms, int absolute) {
    long long ttl;
    db_val v;

    if (!db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_int(&c->out, -2);
        return;
    }
    if (!v.expire_ms) {
        resp_add_int(&c->out, -1);
        return;
    }
    ttl = absolute ? v.expire_ms : v.expire_ms - mstime();
    if (ttl < 0) ttl = 0;
    /* (ttl + 500) / 1000 without overflowing near LLONG_MAX. */
    resp_add_int(&c->out, ms ? ttl : ttl / 1000 + (ttl % 1000 >= 500));
}

void ttlCommand(client *c) { ttl_generic(c, 0, 0); }
void pttlCommand(client *c) { ttl_generic(c, 1, 0); }
void expiretimeCommand(client *c) { ttl_generic(c, 0, 1); }
void pexpiretimeCommand(client *c) { ttl_generic(c, 1, 1); }

void persistCommand(client *c) {
    db_val v;
    if (!db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &v) || !v.expire_ms) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (db_set_expire(&c->x, c->db, c->argv[1], c->argvlen[1], 0) == DB_OOM) {
        reply_oom(c);
        return;
    }
    notify_key(c, NOTIFY_GENERIC, "persist", 1);
    resp_add_int(&c->out, 1);
}

/* ---------------- KEYS, SCAN ---------------- */

/* What KEYS and SCAN keep of the keys db_scan visits. The callback runs
 * under a shard lock and must not call db_*, so it only filters and copies
 * the names (as length-prefixed records) for the reply built afterwards. */
typedef struct key_collector {
    const char *pat;
    size_t plen;
    int use_pattern;
    int type;            /* OBJ_* to keep, -1 any type */
    rbuf names;
    long long n;
} key_collector;

static void collect_key(void *arg, const char *key, size_t klen, const db_val *v) {
    key_collector *kc = arg;
    if (kc->type >= 0 && v->type != kc->type) return;
    if (kc->use_pattern && !stringmatchlen(kc->pat, kc->plen, key, klen, 0)) return;
    rbuf_append(&kc->names, &klen, sizeof(klen));
    rbuf_append(&kc->names, key, klen);
    kc->n++;
}

static void collector_pattern(key_collector *kc, const char *pat, size_t plen) {
    kc->pat = pat;
    kc->plen = plen;
    kc->use_pattern = !(plen == 1 && pat[0] == '*');   /* "*" needs no matching */
}

static void collector_init(key_collector *kc, const char *pat, size_t plen) {
    memset(kc, 0, sizeof(*kc));
    collector_pattern(kc, pat, plen);
    kc->type = -1;
    rbuf_init(&kc->names);
}

static void reply_collected(client *c, key_collector *kc) {
    size_t pos = 0;
    resp_add_array(&c->out, kc->n);
    while (pos < kc->names.len) {
        size_t klen;
        memcpy(&klen, kc->names.buf + pos, sizeof(klen));
        pos += sizeof(klen);
        resp_add_bulk(&c->out, kc->names.buf + pos, klen);
        pos += klen;
    }
    rbuf_free(&kc->names);
}

void keysCommand(client *c) {
    key_collector kc;
    uint64_t cursor = 0;

    collector_init(&kc, c->argv[1], c->argvlen[1]);
    do {
        cursor = db_scan(&c->x, c->db, cursor, 1000, collect_key, &kc);
    } while (cursor != 0);
    reply_collected(c, &kc);
}

/* An unknown TYPE name matches no key (Redis 7.2 does not reject it). */
static int type_by_name(const char *s, size_t len) {
    static const int types[] = {OBJ_STRING, OBJ_LIST, OBJ_SET, OBJ_ZSET, OBJ_HASH, OBJ_STREAM};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        if (strcaseeqlen(s, len, type_name(types[k]))) return types[k];
    return OBJ_NONE;
}

void scanCommand(client *c) {
    key_collector kc;
    uint64_t cursor;
    long long count = 10;
    char buf[32];
    int len;

    if (arg_cursor(c, 1, &cursor) != 0) return;
    collector_init(&kc, "*", 1);
    for (int j = 2; j < c->argc; j += 2) {
        int has_value = j + 1 < c->argc;
        if (arg_is(c, j, "count") && has_value) {
            if (arg_ll(c, j + 1, &count) != 0) goto done;
            if (count < 1) {
                resp_add_error(&c->out, ERR_SYNTAX);
                goto done;
            }
        } else if (arg_is(c, j, "match") && has_value) {
            collector_pattern(&kc, c->argv[j + 1], c->argvlen[j + 1]);
        } else if (arg_is(c, j, "type") && has_value) {
            kc.type = type_by_name(c->argv[j + 1], c->argvlen[j + 1]);
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto done;
        }
    }
    cursor = db_scan(&c->x, c->db, cursor, count, collect_key, &kc);
    resp_add_array(&c->out, 2);
    len = ull2string(buf, sizeof(buf), cursor);
    resp_add_bulk(&c->out, buf, (size_t)len);
    reply_collected(c, &kc);
    return;
done:
    rbuf_free(&kc.names);
}

/* ---------------- RENAME, RENAMENX, MOVE ---------------- */

/* Write src's value and expiry under (dst_db, dst) and delete (src_db, src),
 * as one batch. A string is written again; a collection is copied as one
 * snapshot entry (db_set_copy), so after a crash either the old key or the
 * new one holds the whole collection. */
static int move_value(client *c, const db_val *v, int src_db, int src_i, int dst_db, int dst_i) {
    db_batch_begin(&c->x);
    if (v->type == OBJ_STRING)
        db_set(&c->x, dst_db, c->argv[dst_i], c->argvlen[dst_i], v->ptr, v->len, v->expire_ms);
    else
        db_set_copy(&c->x, dst_db, c->argv[dst_i], c->argvlen[dst_i], v->obj, v->expire_ms);
    db_del(&c->x, src_db, c->argv[src_i], c->argvlen[src_i]);
    int r = db_batch_end(&c->x);
    /* A list or zset arriving under a new name may serve a blocked pop. */
    if (r == DB_OK && (v->type == OBJ_LIST || v->type == OBJ_ZSET))
        blocking_signal_key(dst_db, c->argv[dst_i], c->argvlen[dst_i]);
    return r;
}

/* The destination is overwritten (RENAME) or left alone (RENAMENX, which
 * then answers 0); the TTL travels with the value. Renaming a key to itself
 * changes nothing but still needs the key to exist. */
static void rename_generic(client *c, int nx) {
    db_val v, dst;

    if (!db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_error(&c->out, ERR_NOKEY);
        return;
    }
    if (c->argvlen[1] == c->argvlen[2] && memcmp(c->argv[1], c->argv[2], c->argvlen[1]) == 0) {
        if (nx) resp_add_int(&c->out, 0);
        else resp_add_ok(&c->out);
        return;
    }
    if (nx && db_peek(&c->x, c->db, c->argv[2], c->argvlen[2], &dst)) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (move_value(c, &v, c->db, 1, c->db, 2) == DB_OOM) {
        reply_oom(c);
        return;
    }
    notify_key(c, NOTIFY_GENERIC, "rename_from", 1);
    notify_key(c, NOTIFY_GENERIC, "rename_to", 2);
    if (nx) resp_add_int(&c->out, 1);
    else resp_add_ok(&c->out);
}

void renameCommand(client *c) { rename_generic(c, 0); }
void renamenxCommand(client *c) { rename_generic(c, 1); }

/* A db index argument must be an int (errmsg, or NULL for Redis's default
 * texts, when it is not); whether that db exists is checked separately, so
 * that SWAPDB reports a malformed second index before a missing first db. */
static int parse_db_arg(client *c, int i, const char *errmsg, int *db) {
    long long id;
    if (arg_ll_range(c, i, INT_MIN, INT_MAX, &id, errmsg) != 0) return -1;
    *db = (int)id;
    return 0;
}

static int db_exists(int db) {
    return db >= 0 && db < server.cfg.databases;
}

/* 1 when moved; 0 when the key is missing or the target db already has it. */
void moveCommand(client *c) {
    db_val v, dst;
    int db;

    if (cluster_enabled()) {
        resp_add_error(&c->out, "ERR MOVE is not allowed in cluster mode");
        return;
    }
    if (parse_db_arg(c, 2, NULL, &db) != 0) return;
    if (!db_exists(db)) {
        resp_add_error(&c->out, ERR_DBINDEX);
        return;
    }
    if (db == c->db) {
        resp_add_error(&c->out, "ERR source and destination objects are the same");
        return;
    }
    if (!db_peek(&c->x, c->db, c->argv[1], c->argvlen[1], &v) ||
        db_peek(&c->x, db, c->argv[1], c->argvlen[1], &dst)) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (move_value(c, &v, c->db, 1, db, 1) == DB_OOM) {
        reply_oom(c);
        return;
    }
    notify_key(c, NOTIFY_GENERIC, "move_from", 1);
    notify_event(NOTIFY_GENERIC, "move_to", c->argv[1], c->argvlen[1], db);
    resp_add_int(&c->out, 1);
}

/* ---------------- whole databases ---------------- */

void randomkeyCommand(client *c) {
    rbuf key;
    rbuf_init(&key);
    if (db_random_key(&c->x, c->db, &key)) resp_add_bulk(&c->out, key.buf, key.len);
    else resp_add_null(&c->out);
    rbuf_free(&key);
}

void dbsizeCommand(client *c) {
    resp_add_int(&c->out, db_count(&c->x, c->db));
}

/* FLUSHDB/FLUSHALL [ASYNC|SYNC]: both modes do the same here, since a flush
 * is one log entry per shard and never a long free. */
static void flush_generic(client *c, int db) {
    if (c->argc > 2 || (c->argc == 2 && !arg_is(c, 1, "sync") && !arg_is(c, 1, "async"))) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (db_flush(&c->x, db) == DB_OOM) {
        reply_oom(c);
        return;
    }
    tracking_invalidate_all();   /* client-side caching: every key is gone */
    resp_add_ok(&c->out);
}

void flushdbCommand(client *c) { flush_generic(c, c->db); }
void flushallCommand(client *c) { flush_generic(c, -1); }

void selectCommand(client *c) {
    int db;
    if (parse_db_arg(c, 1, NULL, &db) != 0) return;
    if (cluster_enabled() && db != 0) {
        resp_add_error(&c->out, "ERR SELECT is not allowed in cluster mode");
        return;
    }
    if (!db_exists(db)) {
        resp_add_error(&c->out, ERR_DBINDEX);
        return;
    }
    c->db = db;
    resp_add_ok(&c->out);
}

void swapdbCommand(client *c) {
    int a, b;
    /* Redis: not allowed in cluster mode, there is only db 0. */
    if (cluster_enabled()) {
        resp_add_error(&c->out, "ERR SWAPDB is not allowed in cluster mode");
        return;
    }
    if (parse_db_arg(c, 1, "ERR invalid first DB index", &a) != 0) return;
    if (parse_db_arg(c, 2, "ERR invalid second DB index", &b) != 0) return;
    if (!db_exists(a) || !db_exists(b)) {
        resp_add_error(&c->out, ERR_DBINDEX);
        return;
    }
    if (a == b) {
        resp_add_ok(&c->out);
        return;
    }
    if (db_swap(&c->x, a, b) == DB_OOM) {
        reply_oom(c);
        return;
    }
    blocking_signal_db(a);   /* blocking: keys the swap made ready */
    blocking_signal_db(b);
    resp_add_ok(&c->out);
}
