/* t_debug.c -- the DEBUG subcommands beyond t_server.c's basic ones:
 * DIGEST, DIGEST-VALUE, PROTOCOL, CHANGE-REPL-ID and RELOAD.
 *
 * DIGEST hashes the whole dataset with the core's shard digest
 * (db_shard.h): per-key hashes of (logical db, key, type, value, expiry)
 * summed over every shard this node serves, so equal data gives equal
 * digests on any Rowan server whatever its shard count or history. It is
 * not Redis's algorithm (Redis's digests are only compared with those of
 * the same server); like Redis an empty dataset gives forty zeros.
 * DIGEST-VALUE hashes each named value alone (forty zeros for a missing
 * key), as Redis does.
 *
 * RELOAD: Redis saves an RDB and loads it back. Rowan's data already lives
 * in its log, which is what a restart loads. RELOAD replays the whole log
 * as a restart would into scratch state and checks that it equals memory,
 * shard by shard (src/repl/verify.c), replying OK or an error naming the shard
 * that differs; the live indexes themselves are not rebuilt (that would
 * stop every worker). The reply waits until everything it saw is durable
 * (a read dependency on every shard). Standalone servers only: a cluster
 * node's log holds its backups' entries too.
 *
 * PROTOCOL answers Redis 7.0's sample replies in RESP2 and RESP3.
 *
 * REPL-BLOCK-FAULT CORRUPT|DROP|DUP|OFF (Rowan's own, for tests of the
 * multi-block entries of replication-msg-max, src/repl/tcp_blocks.c): the
 * next block this node sends on a replication link is damaged, left out or
 * sent twice, once; the receiver must close the link and land nothing of
 * that entry. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "coldhold.h"
#include "commands.h"
#include "db.h"
#include "db_shard.h"
#include "server.h"
#include "shard.h"
#include "t_debug.h"
#include "transport.h"
#include "util.h"
#include "verify.h"

#define ZERO_DIGEST "0000000000000000000000000000000000000000"

/* splitmix64's finalizer: widens a 64-bit digest to Redis's 40 hex digits. */
static uint64_t widen(uint64_t h)
{
    h += 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static void format_digest(char out[41], uint64_t h)
{
    uint64_t a = widen(h), b = widen(a), c = widen(b);
    snprintf(out, 41, "%016llx%016llx%08llx", (unsigned long long)a, (unsigned long long)b,
             (unsigned long long)(c >> 32));
}

/* The dataset's digest over the shards this node serves (all of them when
 * not in a cluster); *nkeys receives the key count. Each shard read is a
 * read dependency, so the reply waits until what it saw is durable. */
static uint64_t dataset_digest(client *c, long long *nkeys)
{
    uint64_t sum = 0;
    long long n = 0;
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        if (cluster_enabled() && !cluster_is_primary(i)) continue;
        int locked = !shard_held_by_me(s);
        if (locked) shard_lock(s);
        uint64_t ssum;
        long long sn;
        db_shard_digest_parts(s, &ssum, &sn);
        db_shard_read_dep(&c->x, s);
        if (locked) shard_unlock(s);
        sum += ssum;
        n += sn;
    }
    *nkeys = n;
    return sum ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
}

static void debug_digest(client *c)
{
    long long n;
    uint64_t h = dataset_digest(c, &n);
    char hex[41];
    if (n == 0) memcpy(hex, ZERO_DIGEST, 41);
    else format_digest(hex, h);
    resp_add_simple(&c->out, hex);
}

static void debug_digest_value(client *c)
{
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) {
        shard *s = shard_of_key(c->argv[j], c->argvlen[j]);
        int locked = !shard_held_by_me(s);
        if (locked) shard_lock(s);
        db_val v;
        char hex[41];
        memcpy(hex, ZERO_DIGEST, 41);
        if (db_peek(&c->x, c->db, c->argv[j], c->argvlen[j], &v))
            format_digest(hex, db_value_digest(v.type, v.ptr, v.len, v.obj));
        if (locked) shard_unlock(s);
        resp_add_simple(&c->out, hex);
    }
}

/* DEBUG PROTOCOL <type>: Redis 7.0's samples, byte for byte. */
static void debug_protocol(client *c)
{
    resp_out *o = &c->out;
    int resp3 = o->proto >= 3;
    if (arg_is(c, 2, "string")) {
        resp_add_bulkstr(o, "Hello World");
    } else if (arg_is(c, 2, "integer")) {
        resp_add_int(o, 12345);
    } else if (arg_is(c, 2, "double")) {
        resp_add_double(o, 3.141);
    } else if (arg_is(c, 2, "bignum")) {
        static const char big[] = "1234567999999999999999999999999999999";
        if (resp3) resp_add_raw(o, "(1234567999999999999999999999999999999\r\n", sizeof(big) + 2);
        else resp_add_bulk(o, big, sizeof(big) - 1);
    } else if (arg_is(c, 2, "null")) {
        resp_add_null(o);
    } else if (arg_is(c, 2, "array") || arg_is(c, 2, "set")) {
        if (arg_is(c, 2, "set")) resp_add_set(o, 3);
        else resp_add_array(o, 3);
        for (int j = 0; j < 3; j++) resp_add_int(o, j);
    } else if (arg_is(c, 2, "map")) {
        resp_add_map(o, 3);
        for (int j = 0; j < 3; j++) {
            resp_add_int(o, j);
            resp_add_bool(o, j == 1);
        }
    } else if (arg_is(c, 2, "attrib")) {
        if (resp3) {
            static const char attr[] = "|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n";
            resp_add_raw(o, attr, sizeof(attr) - 1);
        }
        resp_add_bulkstr(o, "Some real reply following the attribute");
    } else if (arg_is(c, 2, "push")) {
        if (!resp3) {
            resp_add_error(o, "ERR RESP2 is not supported by this command");
            return;
        }
        resp_add_push(o, 2);
        resp_add_bulkstr(o, "server-cpu-usage");
        resp_add_int(o, 42);
        resp_add_bulkstr(o, "Some real reply following the push reply");
    } else if (arg_is(c, 2, "true")) {
        resp_add_bool(o, 1);
    } else if (arg_is(c, 2, "false")) {
        resp_add_bool(o, 0);
    } else if (arg_is(c, 2, "verbatim")) {
        resp_add_verbatim(o, "This is a verbatim\nstring", 25);
    } else {
        resp_add_error(o, "ERR Wrong protocol type name. Please use one of the following: "
                       "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false");
    }
}

/* See the file comment. Options Redis takes (MERGE, NOFLUSH, NOSAVE) are
 * accepted: there is nothing to save or merge. */
static void debug_reload(client *c)
{
    for (int j = 2; j < c->argc; j++) {
        if (!arg_is(c, j, "merge") && !arg_is(c, j, "noflush") && !arg_is(c, j, "nosave")) {
            resp_add_error(&c->out, "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE "
                           "options.");
            return;
        }
    }
    if (cluster_enabled()) {
        resp_add_error(&c->out, "ERR DEBUG RELOAD verifies a standalone server's log; in a "
                       "cluster, restart the node (recovery checks its log)");
        return;
    }
    for (int i = 0; i < server.nshards; i++) {
        if (shard_held_by_me(&server.shards[i])) {   /* EXEC: verify_log takes them all */
            resp_add_error(&c->out, "ERR DEBUG RELOAD is not allowed inside MULTI or a script");
            return;
        }
    }
    char err[256];
    int rc = verify_log(err, sizeof(err));
    if (rc < 0) {
        resp_add_errorf(&c->out, "ERR DEBUG RELOAD: the log cannot be replayed: %s", err);
    } else if (rc > 0) {
        resp_add_errorf(&c->out, "ERR DEBUG RELOAD: the log does not replay to the data in "
                        "memory: %s", err);
    } else {
        long long n;
        dataset_digest(c, &n);   /* the reply waits until all it saw is durable */
        resp_add_ok(&c->out);
    }
}

/* DEBUG CHUNK-CRASH n: Rowan's own, for tests of large values (server.h) */
static void debug_chunk_crash(client *c)
{
    long long n;
    if (!string2ll(c->argv[2], c->argvlen[2], &n) || n < 0 || n > INT_MAX) {
        resp_add_error(&c->out, "ERR value is not an integer or out of range");
        return;
    }
    atomic_store(&server.debug_chunk_crash, (int)n);
    resp_add_ok(&c->out);
}

/* DEBUG REPL-BLOCK-FAULT CORRUPT|DROP|DUP|OFF */
static void debug_repl_block_fault(client *c)
{
    static const struct { const char *name; int kind; } faults[] = {
        {"off", REPL_BLOCK_FAULT_NONE}, {"corrupt", REPL_BLOCK_FAULT_CORRUPT},
        {"drop", REPL_BLOCK_FAULT_DROP}, {"dup", REPL_BLOCK_FAULT_DUP}};
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        if (arg_is(c, 2, faults[i].name)) {
            repl_block_fault_arm(faults[i].kind);
            resp_add_ok(&c->out);
            return;
        }
    }
    resp_add_error(&c->out, "ERR DEBUG REPL-BLOCK-FAULT takes CORRUPT, DROP, DUP or OFF");
}

int debug_extra(client *c)
{
    if (c->argc == 2 && arg_is(c, 1, "digest")) debug_digest(c);
    else if (c->argc >= 2 && arg_is(c, 1, "digest-value")) debug_digest_value(c);
    else if (c->argc == 3 && arg_is(c, 1, "protocol")) debug_protocol(c);
    else if (c->argc == 2 && arg_is(c, 1, "change-repl-id")) resp_add_ok(&c->out);
    else if (c->argc >= 2 && arg_is(c, 1, "reload")) debug_reload(c);
    else if (c->argc == 3 && arg_is(c, 1, "chunk-crash")) debug_chunk_crash(c);
    else if (c->argc == 3 && arg_is(c, 1, "repl-block-fault")) debug_repl_block_fault(c);
    else if (c->argc >= 3 && arg_is(c, 1, "session")) debug_session(c);
    else if (c->argc >= 3 && arg_is(c, 1, "coldread")) return debug_coldread(c);
    else return 0;
    return 1;
}
