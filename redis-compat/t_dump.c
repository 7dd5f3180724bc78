/* t_dump.c -- DUMP and RESTORE (the serialization is rdb.c's).
 *
 * DUMP answers the key's value in Redis 7.0's format, so a payload moves
 * between Rowan and Redis either way. RESTORE decodes into a private value
 * first (a string's bytes, or a collection built as a private object) and
 * only then writes it: a string with db_set, a collection as one snapshot
 * entry with db_set_copy, each replacing what the key held, so the key is
 * logged and replicated like any other write. IDLETIME and FREQ are
 * checked as Redis checks them and otherwise ignored: Rowan keeps no LRU
 * or LFU state (there is no eviction; the pool refuses writes instead).
 *
 * Replies, error texts and the order of checks follow Redis 7.0. */
#include <limits.h>
#include <string.h>

#include "blocking.h"
#include "commands.h"
#include "db.h"
#include "object.h"
#include "rdb.h"
#include "server.h"

/* DUMP key */
void dumpCommand(client *c) {
    db_val v;
    if (!db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_null(&c->out);
        return;
    }
    rbuf out;
    rbuf_init(&out);
    rdb_dump_value(&v, &out);
    resp_add_bulk(&c->out, out.buf, out.len);
    rbuf_free(&out);
}

/* REPLACE, ABSTTL, IDLETIME s, FREQ f from argv[4]. 0, or -1 replied. */
static int restore_options(client *c, int *replace, int *absttl) {
    long long idle = -1, freq = -1;
    for (int j = 4; j < c->argc; j++) {
        int more = c->argc - j - 1;
        if (arg_is(c, j, "replace")) {
            *replace = 1;
        } else if (arg_is(c, j, "absttl")) {
            *absttl = 1;
        } else if (arg_is(c, j, "idletime") && more >= 1 && freq == -1) {
            if (arg_ll(c, j + 1, &idle)) return -1;
            if (idle < 0) {
                resp_add_error(&c->out, "ERR Invalid IDLETIME value, must be >= 0");
                return -1;
            }
            j++;
        } else if (arg_is(c, j, "freq") && more >= 1 && idle == -1) {
            if (arg_ll(c, j + 1, &freq)) return -1;
            if (freq < 0 || freq > 255) {
                resp_add_error(&c->out, "ERR Invalid FREQ value, must be >= 0 and <= 255");
                return -1;
            }
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    return 0;
}

/* RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f] */
void restoreCommand(client *c) {
    int replace = 0, absttl = 0, r;
    long long ttl;
    db_val v;
    const char *key = c->argv[1];
    size_t klen = c->argvlen[1];
    if (restore_options(c, &replace, &absttl)) return;
    if (!replace && db_peek(&c->x, c->db, key, klen, &v)) {
        resp_add_error(&c->out, "BUSYKEY Target key name already exists.");
        return;
    }
    if (arg_ll(c, 2, &ttl)) return;
    if (ttl < 0) {
        resp_add_error(&c->out, "ERR Invalid TTL value, must be >= 0");
        return;
    }
    if (rdb_verify_payload(c->argv[3], c->argvlen[3])) {
        resp_add_error(&c->out, "ERR DUMP payload version or checksum are wrong");
        return;
    }
    rbuf str;
    robj *o = NULL;
    rbuf_init(&str);
    int type = rdb_load_value(c->argv[3], c->argvlen[3], &str, &o);
    if (type < 0) {
        resp_add_error(&c->out, "ERR Bad data format");
        goto done;
    }
    if (ttl && !absttl) {
        int64_t now = mstime();
        ttl = ttl > LLONG_MAX - now ? LLONG_MAX : ttl + now;
    }
    if (ttl && ttl <= mstime()) {
        /* Already expired: the key is only removed (when replacing). */
        r = replace ? db_del(&c->x, c->db, key, klen) : DB_OK;
    } else if (type == OBJ_STRING) {
        r = db_set(&c->x, c->db, key, klen, str.buf ? str.buf : "", str.len, ttl);
    } else {
        r = db_set_copy(&c->x, c->db, key, klen, o, ttl);
        if (r == DB_OK && (type == OBJ_LIST || type == OBJ_ZSET))
            blocking_signal_key(c->db, key, klen);
    }
    if (r == DB_OOM) resp_add_error(&c->out, db_error_text(&c->x));
    else resp_add_ok(&c->out);
done:
    if (o) obj_free(o);
    rbuf_free(&str);
}
