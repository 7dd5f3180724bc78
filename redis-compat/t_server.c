/* t_server.c -- the server and connection commands: PING, ECHO, TIME, INFO,
 * CONFIG, CLIENT, COMMAND, AUTH, HELLO, WAIT, SHUTDOWN, DEBUG, ROWAN...
 *
 * Design
 * ------
 * These commands touch no keys. They read the process-wide state (server.h),
 * the command table (commands.h), the client registry (client.h) and the
 * shards/pool for INFO, and write replies with the resp_add_* helpers, which
 * pick RESP2 or RESP3 encodings by themselves.
 *
 * Reply texts follow Redis 7 exactly where Redis has the command, because
 * clients and tools match on them (redis-py parses INFO lines, redis-cli
 * prints errors verbatim, test suites compare messages). Where Rowan differs
 * by design the reply says so honestly rather than pretending:
 *   - SAVE/BGSAVE/BGREWRITEAOF succeed at once: every acknowledged write is
 *     already persisted in the pool, there is nothing left to save;
 *   - WAIT answers 0 replicas at once (standalone) and WAITAOF answers
 *     "persisted locally" at once, for the same reason;
 *   - CLIENT REPLY / PAUSE / TRACKING and friends live in t_client.c and
 *     tracking.c; this file only has their rows in the CLIENT table.
 *
 * Threads: a command runs on its client's worker thread. Another worker may
 * be formatting this client's CLIENT LIST line at the same moment, under the
 * global client lock that client_foreach holds. So fields that CLIENT LIST
 * prints (name, lib-name, lib-ver) are changed from inside a client_foreach
 * callback, i.e. under that same lock, never directly.
 *
 * Subcommand arity: the dispatcher checks the container's arity (CONFIG is
 * -2...); the per-subcommand arities are checked here, with Redis's
 * "wrong number of arguments for 'config|get' command" text.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "clean.h"
#include "client.h"
#include "cluster.h"
#include "commands.h"
#include "acl.h"
#include "blocking.h"
#include "config.h"
#include "daemon.h"
#include "db.h"
#include "index.h"
#include "cm.h"
#include "member.h"
#include "pool.h"
#include "resp.h"
#include "server.h"
#include "evict.h"
#include "object.h"
#include "repl.h"
#include "t_client.h"   /* CLIENT REPLY, PAUSE, UNPAUSE */
#include "pubsub.h"     /* INFO pubsub counts, CLIENT LIST/KILL TYPE pubsub */
#include "tracking.h"   /* CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO */
#include "t_latency.h"  /* INFO modules, errorstats, latencystats */
#include "t_debug.h"    /* DEBUG DIGEST, PROTOCOL, RELOAD... */
#include "shard.h"
#include "util.h"
#include "native.h"    /* INFO native */
#include "edge_state.h"

/* ------------------------------------------------------------------------ */
/* Small shared helpers                                                       */
/* ------------------------------------------------------------------------ */

/* Arguments are not NUL-terminated (they point into the query buffer), and
 * error texts quote at most 128 bytes of them, as Redis does. */
#define ARGFMT "%.*s"
#define ARGP(c, i) (int)((c)->argvlen[i] > 128 ? 128 : (c)->argvlen[i]), (c)->argv[i]

static char *arg_dup(client *c, int i)
{
    char *s = malloc(c->argvlen[i] + 1);
    if (!s) abort();
    memcpy(s, c->argv[i], c->argvlen[i]);
    s[c->argvlen[i]] = '\0';
    return s;
}

/* Is argc acceptable for a Redis-style arity (n exact, -n at least n)? */
static int arity_ok(int argc, int arity)
{
    return arity >= 0 ? argc == arity : argc >= -arity;
}

static long long stat_get(_Atomic long long *v) { return atomic_load_explicit(v, memory_order_relaxed); }

/* Characters Redis allows in client names and library info: printable, no
 * space (they would break the CLIENT LIST line format). */
static int valid_client_attr(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] < '!' || s[i] > '~') return 0;
    return 1;
}

/* The password checks are the ACL's (acl.c): requirepass is the default
 * user's password there. */
static int client_is_authenticated(client *c)
{
    return c->authenticated || acl_default_nopass();
}

/* ------------------------------------------------------------------------ */
/* Changing fields that CLIENT LIST prints, under the client lock              */
/* ------------------------------------------------------------------------ */

enum attr_kind { ATTR_NAME, ATTR_LIBNAME, ATTR_LIBVER };

struct attr_change {
    client *target;
    enum attr_kind kind;
    const char *val;
    size_t len;
    char *name;        /* ATTR_NAME: new name in, replaced name out */
};

static void copy_attr(char *dst, size_t cap, const char *val, size_t len)
{
    if (len > cap - 1) len = cap - 1;
    memcpy(dst, val, len);
    dst[len] = '\0';
}

static void attr_change_cb(client *c, void *arg)
{
    struct attr_change *ch = arg;
    if (c != ch->target) return;
    switch (ch->kind) {
    case ATTR_NAME: {
        char *old = c->name;
        c->name = ch->name;
        ch->name = old;
        break;
    }
    case ATTR_LIBNAME: copy_attr(c->lib_name, sizeof(c->lib_name), ch->val, ch->len); break;
    case ATTR_LIBVER: copy_attr(c->lib_ver, sizeof(c->lib_ver), ch->val, ch->len); break;
    }
}

/* Set (len > 0) or clear (len == 0) one printed attribute of c. Allocation
 * and freeing happen outside the client lock. */
static void client_set_attr(client *c, enum attr_kind kind, const char *val, size_t len)
{
    struct attr_change ch = { c, kind, val, len, NULL };
    if (kind == ATTR_NAME && len) {
        ch.name = malloc(len + 1);
        if (!ch.name) abort();
        memcpy(ch.name, val, len);
        ch.name[len] = '\0';
    }
    client_foreach(attr_change_cb, &ch);
    free(ch.name);
}

/* ------------------------------------------------------------------------ */
/* PING ECHO TIME QUIT RESET and other one-liners                            */
/* ------------------------------------------------------------------------ */

void pingCommand(client *c)
{
    if (c->argc > 2) {
        resp_add_error(&c->out, "ERR wrong number of arguments for 'ping' command");
        return;
    }
    if (c->argc == 1) resp_add_simple(&c->out, "PONG");
    else resp_add_bulk(&c->out, c->argv[1], c->argvlen[1]);
}

void echoCommand(client *c)
{
    resp_add_bulk(&c->out, c->argv[1], c->argvlen[1]);
}

void timeCommand(client *c)
{
    int64_t us = ustime();
    resp_add_array(&c->out, 2);
    resp_add_bulkll(&c->out, us / 1000000);
    resp_add_bulkll(&c->out, us % 1000000);
}

void quitCommand(client *c)
{
    resp_add_ok(&c->out);
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
}

/* Back to the state of a fresh connection (Redis 6.2+). */
void resetCommand(client *c)
{
    c->db = 0;
    c->out.proto = 2;
    if (c->name) client_set_attr(c, ATTR_NAME, "", 0);
    acl_client_reset(c);
    resp_add_simple(&c->out, "RESET");
}

void lastsaveCommand(client *c)
{
    resp_add_int(&c->out, (long long)server.start_time);
}

/* Every acknowledged write is already in the pool: saving is a no-op. */
void saveCommand(client *c)
{
    resp_add_ok(&c->out);
}

void bgsaveCommand(client *c)
{
    if (c->argc > 2 || (c->argc == 2 && !arg_is(c, 1, "schedule"))) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    resp_add_simple(&c->out, "Background saving started");
}

void bgrewriteaofCommand(client *c)
{
    resp_add_simple(&c->out, "Background append only file rewriting started");
}

/* Cluster-mode commands that clients send blindly: harmless in standalone. */
void readonlyCommand(client *c) { resp_add_ok(&c->out); }
void readwriteCommand(client *c) { resp_add_ok(&c->out); }

/* SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. Saving options are accepted
 * and mean nothing: the data is durable already. No reply: the connection
 * closes as the server goes down. */
void shutdownCommand(client *c)
{
    int nosave = 0, save = 0, abort_req = 0, other = 0;
    for (int i = 1; i < c->argc; i++) {
        if (arg_is(c, i, "nosave")) nosave = 1;
        else if (arg_is(c, i, "save")) save = 1;
        else if (arg_is(c, i, "now") || arg_is(c, i, "force")) other = 1;
        else if (arg_is(c, i, "abort")) abort_req = 1;
        else { resp_add_error(&c->out, ERR_SYNTAX); return; }
    }
    if ((abort_req && (nosave || save || other)) || (nosave && save)) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (abort_req) {
        /* Shutdown is immediate in Rowan: there is never one to abort. */
        resp_add_error(&c->out, "ERR No shutdown in progress.");
        return;
    }
    serverLog(LL_WARNING, "User requested shutdown...");
    server_request_shutdown();
    c->flags |= CLIENT_CLOSE_ASAP;
}

/* ------------------------------------------------------------------------ */
/* WAIT / WAITAOF                                                             */
/* ------------------------------------------------------------------------ */

/* Redis's timeout argument: integer milliseconds, not negative. */
static int parse_timeout(client *c, int i, long long *ms)
{
    if (!string2ll(c->argv[i], c->argvlen[i], ms)) {
        resp_add_error(&c->out, "ERR timeout is not an integer or out of range");
        return -1;
    }
    if (*ms < 0) {
        resp_add_error(&c->out, "ERR timeout is negative");
        return -1;
    }
    return 0;
}

/* WAIT numreplicas timeout: standalone Rowan has no replicas, and the writes
 * before WAIT were durable before they were acknowledged. */
void waitCommand(client *c)
{
    long long ms, n;
    if (parse_timeout(c, 2, &ms) < 0) return;
    if (arg_ll(c, 1, &n) < 0) return;
    /* Every write this connection was acknowledged is on all k replicas,
     * and this reply leaves after the replies of earlier commands (which
     * are held until their data is on every replica): so its backups hold
     * them when the client reads this. */
    resp_add_int(&c->out, cluster_replicas() - 1);
}

static int parse_nonneg(client *c, int i, long long *v)
{
    if (!string2ll(c->argv[i], c->argvlen[i], v)) {
        resp_add_error(&c->out, ERR_NOTINT);
        return -1;
    }
    if (*v < 0) {
        resp_add_error(&c->out, "ERR value is out of range, must be positive");
        return -1;
    }
    return 0;
}

/* WAITAOF numlocal numreplicas timeout -> [local fsynced, replicas]. Every
 * acknowledged write was persisted locally before its reply. */
void waitaofCommand(client *c)
{
    long long numlocal, numreplicas, ms;
    if (parse_nonneg(c, 1, &numlocal) < 0 || parse_nonneg(c, 2, &numreplicas) < 0) return;
    if (parse_timeout(c, 3, &ms) < 0) return;
    resp_add_array(&c->out, 2);
    resp_add_int(&c->out, 1);
    resp_add_int(&c->out, cluster_replicas() - 1);
}

/* ------------------------------------------------------------------------ */
/* AUTH / HELLO                                                               */
/* ------------------------------------------------------------------------ */

void authCommand(client *c)
{
    if (c->argc > 3) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (c->argc == 2 && acl_default_nopass()) {
        resp_add_error(&c->out, "ERR AUTH <password> called without any password configured "
                                "for the default user. Are you sure your configuration is correct?");
        return;
    }
    int ok = c->argc == 2
        ? acl_authenticate(c, NULL, 0, c->argv[1], c->argvlen[1])
        : acl_authenticate(c, c->argv[1], c->argvlen[1], c->argv[2], c->argvlen[2]);
    if (!ok) {
        /* A failed AUTH leaves the connection's state as it was (Redis). */
        resp_add_error(&c->out, ERR_WRONGPASS);
        return;
    }
    resp_add_ok(&c->out);
}

static void hello_reply(client *c)
{
    resp_add_map(&c->out, 7);
    resp_add_bulkstr(&c->out, "server");
    resp_add_bulkstr(&c->out, "redis");
    resp_add_bulkstr(&c->out, "version");
    resp_add_bulkstr(&c->out, ROWAN_REDIS_COMPAT_VERSION);
    resp_add_bulkstr(&c->out, "proto");
    resp_add_int(&c->out, c->out.proto);
    resp_add_bulkstr(&c->out, "id");
    resp_add_int(&c->out, (long long)c->id);
    resp_add_bulkstr(&c->out, "mode");
    resp_add_bulkstr(&c->out, "standalone");
    resp_add_bulkstr(&c->out, "role");
    resp_add_bulkstr(&c->out, "master");
    resp_add_bulkstr(&c->out, "modules");
    resp_add_array(&c->out, 0);
}

/* HELLO [protover [AUTH user pass] [SETNAME name]] */
void helloCommand(client *c)
{
    long long ver = c->out.proto;
    int auth_at = 0, name_at = 0;
    if (c->argc >= 2) {
        if (!string2ll(c->argv[1], c->argvlen[1], &ver)) {
            resp_add_error(&c->out, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (ver < 2 || ver > 3) {
            resp_add_error(&c->out, "NOPROTO unsupported protocol version");
            return;
        }
    }
    for (int j = 2; j < c->argc; j++) {
        int more = c->argc - j - 1;
        if (arg_is(c, j, "auth") && more >= 2) { auth_at = j + 1; j += 2; }
        else if (arg_is(c, j, "setname") && more >= 1) { name_at = j + 1; j += 1; }
        else {
            resp_add_errorf(&c->out, "ERR Syntax error in HELLO option '" ARGFMT "'", ARGP(c, j));
            return;
        }
    }
    if (auth_at) {
        if (!acl_authenticate(c, c->argv[auth_at], c->argvlen[auth_at],
                              c->argv[auth_at + 1], c->argvlen[auth_at + 1])) {
            resp_add_error(&c->out, ERR_WRONGPASS);
            return;
        }
    }
    if (!client_is_authenticated(c)) {
        resp_add_error(&c->out, "NOAUTH HELLO must be called with the client already authenticated, "
                                "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                                "authenticate the client and select the RESP protocol version at the same time");
        return;
    }
    if (name_at && !valid_client_attr(c->argv[name_at], c->argvlen[name_at])) {
        resp_add_error(&c->out, "ERR Client names cannot contain spaces, newlines or special characters.");
        return;
    }
    if (name_at) client_set_attr(c, ATTR_NAME, c->argv[name_at], c->argvlen[name_at]);
    c->out.proto = (int)ver;  /* the reply itself is already in the new protocol */
    hello_reply(c);
}

/* ------------------------------------------------------------------------ */
/* DEBUG (ROWAN is in t_rowan.c)                                              */
/* ------------------------------------------------------------------------ */

static const char *const debug_help[] = {
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "JMAP",
    "    Accepted for compatibility; does nothing.",
    "OBJECT <key>",
    "    Show low level info about the key and associated value.",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "CHANGE-REPL-ID",
    "    Accepted for compatibility; does nothing.",
    "RELOAD [MERGE] [NOFLUSH] [NOSAVE]",
    "    Replay the log as a restart would and check it gives the data in memory.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
    "    default.",
    "CHUNK-CRASH <n>",
    "    Rowan (tests): kill the server right after it writes the <n>th chunk of",
    "    a large value, before the rest of it; 0 turns it off.",
    "REPL-BLOCK-FAULT <CORRUPT|DROP|DUP|OFF>",
    "    Rowan (tests): damage, drop or duplicate the next replication block sent.",
    "SESSION <OPEN|RUN|READ|CLOSE> [<id> [<tag> <arg> ...]]",
    "    Rowan (tests): drive a per-reply session as the native edge does.",
    "COLDREAD <DROP|STATS|FORCE <0|1>>",
    "    Rowan (tests): evict the pool's cached pages, show cold-read counts, or",
    "    treat every pool reference as cold.",
    "HELP",
    "    Prints this help.",
    NULL
};

/* Redis 7's protected commands (DEBUG, MODULE): enable-debug-command no,
 * yes, or local (loopback clients only). */
static int protected_action_allowed(int setting, const client *c)
{
    return setting == PROTECTED_ACTION_YES || (setting == PROTECTED_ACTION_LOCAL && c->is_local);
}

/* DEBUG OBJECT: Redis's one-line summary (serializedlength approximated by
 * the value's size in the log). The caller holds the key's shard lock. */
static void debug_object_locked(client *c)
{
    db_val v;
    if (!db_peek(&c->x, c->db, c->argv[2], c->argvlen[2], &v)) {   /* no access */
        resp_add_error(&c->out, "ERR no such key");
        return;
    }
    int sid;
    uint64_t hash;
    db_key_clock(&c->x, c->db, c->argv[2], c->argvlen[2], &sid, &hash);
    const char *enc = "unknown";
    size_t len = v.len;
    if (v.type == OBJ_STRING) {
        long long n;
        enc = v.len <= 20 && string2ll(v.ptr, v.len, &n) ? "int" : v.len <= 44 ? "embstr" : "raw";
        if (evict_marked(sid, hash)) enc = "raw";   /* edited in place (string_edited) */
    } else {
        const obj_class *k = obj_class_of(v.type);
        if (k && k->encoding) enc = k->encoding(v.obj->data);
        len = (size_t)v.obj->snap_bytes;
    }
    long long idle = evict_idle_seconds(sid, hash);
    char line[256];
    snprintf(line, sizeof(line), "Value at:%p refcount:1 encoding:%s serializedlength:%zu lru:%lld "
             "lru_seconds_idle:%lld", v.obj ? (const void *)v.obj : (const void *)v.ptr,
             enc, len, (long long)((time(NULL) - idle) & ((1 << 24) - 1)), idle);
    resp_add_simple(&c->out, line);
}

/* DEBUG names no key in the command table (as in Redis), so the dispatcher
 * locks nothing: take the key's shard lock here (without it a concurrent
 * write could free the object being described). */
static void debug_object(client *c)
{
    shard *s = shard_of_key(c->argv[2], c->argvlen[2]);
    int locked = !shard_held_by_me(s);
    if (locked) shard_lock(s);
    debug_object_locked(c);
    if (locked) shard_unlock(s);
}

void debugCommand(client *c)
{
    if (!protected_action_allowed(server.cfg.enable_debug_command, c)) {
        resp_add_error(&c->out, "ERR DEBUG command not allowed. If the enable-debug-command option "
                       "is set to \"local\", you can run it from a local connection, otherwise you "
                       "need to set this option in the configuration file, and then restart the "
                       "server.");
        return;
    }
    if (c->argc == 3 && arg_is(c, 1, "object")) {
        debug_object(c);
    } else if (c->argc == 3 && arg_is(c, 1, "set-active-expire")) {
        long long on;
        if (!string2ll(c->argv[2], c->argvlen[2], &on)) on = 0;   /* Redis: atoi */
        atomic_store(&server.active_expire_off, on == 0);
        resp_add_ok(&c->out);
    } else if (c->argc == 2 && arg_is(c, 1, "help")) {
        reply_help(c, debug_help);
    } else if (c->argc == 3 && arg_is(c, 1, "sleep")) {
        /* Like Redis: strtod semantics, garbage means 0. Blocks this worker,
         * as DEBUG SLEEP blocks redis-server. Redis sleeps only durations
         * whose microseconds fit a long long and answers at once otherwise
         * (inf, 1e300); so do we, which also keeps the time_t cast below
         * defined. Only EINTR is retried: any other error would spin. */
        char *s = arg_dup(c, 2);
        double secs = strtod(s, NULL);
        free(s);
        if (secs > 0 && secs * 1e6 < 0x1p63) {
            struct timespec ts;
            ts.tv_sec = (time_t)secs;
            ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
        }
        resp_add_ok(&c->out);
    } else if (c->argc == 2 && arg_is(c, 1, "jmap")) {
        resp_add_ok(&c->out);
    } else if (!debug_extra(c)) {
        /* DEBUG has no subcommand table in Redis 7: its older error form. */
        resp_add_errorf(&c->out, "ERR unknown subcommand or wrong number of arguments for '"
                        ARGFMT "'. Try DEBUG HELP.", ARGP(c, 1));
    }
}

/* ------------------------------------------------------------------------ */
/* INFO                                                                       */
/* ------------------------------------------------------------------------ */

/* Redis's human-readable sizes: 1023B, 1.50K, 2.00M, 3.25G... */
static void bytes_human(char *buf, size_t len, unsigned long long n)
{
    static const char units[] = "KMGTPE";
    if (n < 1024) { snprintf(buf, len, "%lluB", n); return; }
    double d = (double)n / 1024;
    int u = 0;
    while (d >= 1024 && units[u + 1]) { d /= 1024; u++; }
    snprintf(buf, len, "%.2f%c", d, units[u]);
}

static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages_total = 0, pages_rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &pages_total, &pages_rss) != 2) pages_rss = 0;
    fclose(f);
    return pages_rss * sysconf(_SC_PAGESIZE);
}

/* Rates between INFO calls at least a second apart (Redis samples every
 * 100 ms in its cron; Rowan has no cron hook here, so it samples lazily). */
struct info_rates {
    pthread_mutex_t mu;
    int64_t t_us;
    long long ops, in, out;
    long long ops_rate;
    double in_kbps, out_kbps;
};
/* This file's state, one per server (server.h). */
struct rates_state {
    struct info_rates rates;
};

void rates_state_new(void) {
    struct rates_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->rates.mu, NULL);
    server.edge_state->rates = st;
}

void rates_state_free(void) { free(server.edge_state->rates); }

#define rates (server.edge_state->rates->rates)

static void rates_update(void)
{
    int64_t now = monotonic_us();
    long long ops = stat_get(&server.stat.numcommands);
    long long in = stat_get(&server.stat.net_input_bytes);
    long long out = stat_get(&server.stat.net_output_bytes);
    pthread_mutex_lock(&rates.mu);
    int64_t dt = now - rates.t_us;
    if (rates.t_us == 0 || dt >= 1000000 || ops < rates.ops) {
        if (rates.t_us != 0 && dt > 0 && ops >= rates.ops) {
            double secs = (double)dt / 1e6;
            rates.ops_rate = (long long)((double)(ops - rates.ops) / secs + 0.5);
            rates.in_kbps = (double)(in - rates.in) / secs / 1024;
            rates.out_kbps = (double)(out - rates.out) / secs / 1024;
        }
        rates.t_us = now;
        rates.ops = ops;
        rates.in = in;
        rates.out = out;
    }
    pthread_mutex_unlock(&rates.mu);
}

static void info_server(rbuf *b)
{
    struct utsname un;
    if (uname(&un) != 0) memset(&un, 0, sizeof(un));
    int64_t now_us = ustime();
    long long uptime = (long long)(time(NULL) - server.start_time);
    rbuf_appendf(b, "# Server\r\n");
    rbuf_appendf(b, "redis_version:%s\r\n", ROWAN_REDIS_COMPAT_VERSION);
    rbuf_appendf(b, "rowan_version:%s\r\n", ROWAN_VERSION);
    rbuf_appendf(b, "redis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\n");
    rbuf_appendf(b, "redis_mode:%s\r\n", cluster_enabled() ? "cluster" : "standalone");
    rbuf_appendf(b, "os:%s %s %s\r\n", un.sysname, un.release, un.machine);
    rbuf_appendf(b, "arch_bits:%d\r\n", (int)(sizeof(long) * 8));
    rbuf_appendf(b, "monotonic_clock:POSIX clock_gettime\r\n");
    rbuf_appendf(b, "multiplexing_api:epoll\r\natomicvar_api:c11-builtin\r\n");
#ifdef __GNUC__
    rbuf_appendf(b, "gcc_version:%d.%d.%d\r\n", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
    rbuf_appendf(b, "gcc_version:0.0.0\r\n");
#endif
    rbuf_appendf(b, "process_id:%ld\r\n", (long)getpid());
    rbuf_appendf(b, "process_supervised:%s\r\n", daemon_supervised_name());
    rbuf_appendf(b, "run_id:%s\r\n", server.run_id);
    rbuf_appendf(b, "tcp_port:%d\r\n", server.cfg.port);
    rbuf_appendf(b, "server_time_usec:%lld\r\n", (long long)now_us);
    rbuf_appendf(b, "uptime_in_seconds:%lld\r\n", uptime);
    rbuf_appendf(b, "uptime_in_days:%lld\r\n", uptime / 86400);
    rbuf_appendf(b, "hz:%d\r\nconfigured_hz:%d\r\n", server.cfg.hz, server.cfg.hz);
    rbuf_appendf(b, "lru_clock:%lld\r\n", (long long)((now_us / 1000000) & ((1 << 24) - 1)));
    rbuf_appendf(b, "executable:%s\r\n", server.executable);
    rbuf_appendf(b, "config_file:%s\r\n", server.cfg.conf_file ? server.cfg.conf_file : "");
    rbuf_appendf(b, "io_threads_active:0\r\n");
}

static void info_clients(rbuf *b)
{
    rbuf_appendf(b, "# Clients\r\n");
    rbuf_appendf(b, "connected_clients:%d\r\n", client_count());
    rbuf_appendf(b, "cluster_connections:0\r\n");
    rbuf_appendf(b, "maxclients:%d\r\n", server.cfg.maxclients);
    rbuf_appendf(b, "client_recent_max_input_buffer:0\r\nclient_recent_max_output_buffer:0\r\n");
    rbuf_appendf(b, "blocked_clients:%lld\r\ntracking_clients:%d\r\nclients_in_timeout_table:%lld\r\n",
                 blocking_count(), tracking_count(), blocking_count());
}

/* This file's state, one per server (server.h). */
struct peak_state {
    _Atomic long long peak_memory;
};

void peak_state_new(void) {
    struct peak_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->peak = st;
}

void peak_state_free(void) { free(server.edge_state->peak); }

#define peak_memory (server.edge_state->peak->peak_memory)

static void info_memory(rbuf *b)
{
    char h1[32], h2[32], h3[32], h4[32], h5[32];
    /* What maxmemory bounds (evict.c): the heap plus the data set as
     * stored in the pool. */
    long long dataset = evict_dataset_memory();
    long long used = evict_heap_memory() + dataset, rss = rss_bytes();
    long long maxmem = server.cfg.maxmemory;
    long long peak = atomic_load(&peak_memory);
    while (used > peak && !atomic_compare_exchange_weak(&peak_memory, &peak, used)) {}
    if (used > peak) peak = used;
    long long total = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    bytes_human(h1, sizeof(h1), (unsigned long long)used);
    bytes_human(h2, sizeof(h2), (unsigned long long)rss);
    bytes_human(h3, sizeof(h3), (unsigned long long)peak);
    bytes_human(h4, sizeof(h4), (unsigned long long)total);
    rbuf_appendf(b, "# Memory\r\n");
    rbuf_appendf(b, "used_memory:%lld\r\nused_memory_human:%s\r\n", used, h1);
    rbuf_appendf(b, "used_memory_rss:%lld\r\nused_memory_rss_human:%s\r\n", rss, h2);
    rbuf_appendf(b, "used_memory_peak:%lld\r\nused_memory_peak_human:%s\r\n", peak, h3);
    rbuf_appendf(b, "total_system_memory:%lld\r\ntotal_system_memory_human:%s\r\n", total, h4);
    bytes_human(h5, sizeof(h5), (unsigned long long)maxmem);
    rbuf_appendf(b, "used_memory_dataset:%lld\r\n", dataset);
    rbuf_appendf(b, "maxmemory:%lld\r\nmaxmemory_human:%s\r\nmaxmemory_policy:%s\r\n", maxmem, h5,
                 config_enum_name("maxmemory-policy"));
    /* What maxmemory-clients counts: every client's buffers. */
    rbuf_appendf(b, "mem_clients_slaves:0\r\nmem_clients_normal:%lld\r\n",
                 (long long)atomic_load(&server.clients_mem));
    rbuf_appendf(b, "mem_fragmentation_ratio:%.2f\r\n", used ? (double)rss / (double)used : 0.0);
    rbuf_appendf(b, "mem_allocator:libc\r\n");
}

/* Redis's loading_* fields (genRedisInfoString), from recovery's progress
 * in pool bytes (recovery.c). */
static void info_loading(rbuf *b)
{
    uint64_t total = atomic_load(&server.loading_total_bytes);
    uint64_t loaded = atomic_load(&server.loading_loaded_bytes);
    if (loaded > total) loaded = total;
    double perc = total ? 100.0 * (double)loaded / (double)total : 0.0;
    long long elapsed = (long long)(time(NULL) - server.loading_start_time);
    long long eta = elapsed <= 0 || !loaded ? 1 /* Redis's figure without enough info */
                    : (long long)((double)elapsed * (double)(total - loaded) / (double)loaded);
    rbuf_appendf(b, "loading_start_time:%lld\r\n", (long long)server.loading_start_time);
    rbuf_appendf(b, "loading_total_bytes:%llu\r\n", (unsigned long long)total);
    rbuf_appendf(b, "loading_loaded_bytes:%llu\r\n", (unsigned long long)loaded);
    rbuf_appendf(b, "loading_loaded_perc:%.2f\r\n", perc);
    rbuf_appendf(b, "loading_eta_seconds:%lld\r\n", eta);
}

static void info_persistence(rbuf *b)
{
    int loading = server_loading();
    rbuf_appendf(b, "# Persistence\r\n");
    rbuf_appendf(b, "loading:%d\r\nasync_loading:0\r\n", loading);
    rbuf_appendf(b, "rdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:0\r\n");
    rbuf_appendf(b, "rdb_last_save_time:%lld\r\n", (long long)server.start_time);
    rbuf_appendf(b, "rdb_last_bgsave_status:ok\r\nrdb_last_bgsave_time_sec:-1\r\n");
    rbuf_appendf(b, "aof_enabled:0\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\n");
    rbuf_appendf(b, "aof_last_bgrewrite_status:ok\r\naof_last_write_status:ok\r\n");
    if (loading) info_loading(b);
    /* Rowan persists every write in its pool before acknowledging it. */
    rbuf_appendf(b, "rowan_persistence:pool-log\r\n");
    rbuf_appendf(b, "rowan_persist_method:%s\r\n",
                 server.pool ? (pool_is_pmem(server.pool) ? "pmem" : "msync") : "none");
    rbuf_appendf(b, "rowan_syncs:%lld\r\n", stat_get(&server.stat.syncs));
}

struct cmd_totals { long long errors; };

static void sum_errors_cb(struct rcommand *cmd, void *arg)
{
    struct cmd_totals *t = arg;
    t->errors += stat_get(&command_stats(cmd)->failed_calls) +
                 stat_get(&command_stats(cmd)->rejected_calls);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++)
        t->errors += stat_get(&command_stats(s)->failed_calls) +
                     stat_get(&command_stats(s)->rejected_calls);
}

static void info_stats(rbuf *b)
{
    struct cmd_totals t = { 0 };
    command_foreach(sum_errors_cb, &t);
    rates_update();
    pthread_mutex_lock(&rates.mu);
    long long ops_rate = rates.ops_rate;
    double in_kbps = rates.in_kbps, out_kbps = rates.out_kbps;
    pthread_mutex_unlock(&rates.mu);
    rbuf_appendf(b, "# Stats\r\n");
    rbuf_appendf(b, "total_connections_received:%lld\r\n", stat_get(&server.stat.numconnections));
    rbuf_appendf(b, "total_commands_processed:%lld\r\n", stat_get(&server.stat.numcommands));
    rbuf_appendf(b, "instantaneous_ops_per_sec:%lld\r\n", ops_rate);
    rbuf_appendf(b, "total_net_input_bytes:%lld\r\n", stat_get(&server.stat.net_input_bytes));
    rbuf_appendf(b, "total_net_output_bytes:%lld\r\n", stat_get(&server.stat.net_output_bytes));
    rbuf_appendf(b, "instantaneous_input_kbps:%.2f\r\ninstantaneous_output_kbps:%.2f\r\n", in_kbps, out_kbps);
    rbuf_appendf(b, "rejected_connections:%lld\r\n", stat_get(&server.stat.rejected_conn));
    rbuf_appendf(b, "sync_full:0\r\nsync_partial_ok:0\r\nsync_partial_err:0\r\n");
    rbuf_appendf(b, "expired_keys:%lld\r\n", stat_get(&server.stat.expiredkeys));
    rbuf_appendf(b, "expired_stale_perc:0.00\r\nexpired_time_cap_reached_count:0\r\n");
    rbuf_appendf(b, "evicted_keys:%lld\r\nevicted_clients:%lld\r\n",
                 stat_get(&server.stat.evicted_keys), stat_get(&server.stat.evicted_clients));
    rbuf_appendf(b, "keyspace_hits:%lld\r\n", stat_get(&server.stat.keyspace_hits));
    rbuf_appendf(b, "keyspace_misses:%lld\r\n", stat_get(&server.stat.keyspace_misses));
    long long chans, pats, schans, tkeys, titems, tprefixes;
    pubsub_counts(&chans, &pats, &schans);
    rbuf_appendf(b, "pubsub_channels:%lld\r\npubsub_patterns:%lld\r\npubsubshard_channels:%lld\r\n",
                 chans, pats, schans);
    tracking_stats(&tkeys, &titems, &tprefixes);
    rbuf_appendf(b, "tracking_total_keys:%lld\r\ntracking_total_items:%lld\r\n"
                 "tracking_total_prefixes:%lld\r\n", tkeys, titems, tprefixes);
    rbuf_appendf(b, "latest_fork_usec:0\r\ntotal_forks:0\r\n");
    rbuf_appendf(b, "unexpected_error_replies:%lld\r\n", stat_get(&server.stat.unexpected_errors));
    rbuf_appendf(b, "total_error_replies:%lld\r\n", t.errors);
    rbuf_appendf(b, "client_query_buffer_limit_disconnections:%lld\r\n",
                 stat_get(&server.stat.qbuf_limit_disconnections));
    rbuf_appendf(b, "client_output_buffer_limit_disconnections:%lld\r\n",
                 stat_get(&server.stat.obuf_limit_disconnections));
    rbuf_appendf(b, "client_buffer_moved_bytes:%lld\r\n",
                 stat_get(&server.stat.client_buffer_moved));
}

static void info_replication(rbuf *b)
{
    rbuf_appendf(b, "# Replication\r\n");
    rbuf_appendf(b, "role:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\n");
    rbuf_appendf(b, "master_replid:%s\r\n", server.run_id);
    rbuf_appendf(b, "master_replid2:0000000000000000000000000000000000000000\r\n");
    rbuf_appendf(b, "master_repl_offset:0\r\nsecond_repl_offset:-1\r\n");
    rbuf_appendf(b, "repl_backlog_active:0\r\nrepl_backlog_size:0\r\n");
    rbuf_appendf(b, "repl_backlog_first_byte_offset:0\r\nrepl_backlog_histlen:0\r\n");
}

static void info_cpu(rbuf *b)
{
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    rbuf_appendf(b, "# CPU\r\n");
    rbuf_appendf(b, "used_cpu_sys:%ld.%06ld\r\n", (long)self.ru_stime.tv_sec, (long)self.ru_stime.tv_usec);
    rbuf_appendf(b, "used_cpu_user:%ld.%06ld\r\n", (long)self.ru_utime.tv_sec, (long)self.ru_utime.tv_usec);
    rbuf_appendf(b, "used_cpu_sys_children:%ld.%06ld\r\n", (long)kids.ru_stime.tv_sec, (long)kids.ru_stime.tv_usec);
    rbuf_appendf(b, "used_cpu_user_children:%ld.%06ld\r\n", (long)kids.ru_utime.tv_sec, (long)kids.ru_utime.tv_usec);
}

static void info_cluster(rbuf *b)
{
    rbuf_appendf(b, "# Cluster\r\ncluster_enabled:%d\r\n", cluster_enabled());
}

/* Counted as the client sees the keyspace: inside EXEC or a script, with
 * the writes of its open batch (db_count), as Redis's. */
static void info_keyspace(client *c, rbuf *b)
{
    rbuf_appendf(b, "# Keyspace\r\n");
    /* Loading: recovery is building the keyspace; show none of it. */
    for (int db = 0; db < server.cfg.databases && !server_loading(); db++) {
        long long keys = db_count(&c->x, db);
        if (keys <= 0) continue;
        rbuf_appendf(b, "db%d:keys=%lld,expires=%lld,avg_ttl=0\r\n", db, keys,
                     db_count_expires(&c->x, db));
    }
}

static void cmdstat_line(rbuf *b, const char *parent, const struct rcommand *cmd)
{
    struct cmd_stats *st = command_stats(cmd);
    long long calls = stat_get(&st->calls);
    long long usec = stat_get(&st->usec);
    long long failed = stat_get(&st->failed_calls);
    long long rejected = stat_get(&st->rejected_calls);
    if (!calls && !failed && !rejected) return;
    int full = parent == NULL || strchr(cmd->name, '|') != NULL;
    rbuf_appendf(b, "cmdstat_%s%s%s:calls=%lld,usec=%lld,usec_per_call=%.2f,rejected_calls=%lld,failed_calls=%lld\r\n",
                 full ? "" : parent, full ? "" : "|", cmd->name, calls, usec,
                 calls ? (double)usec / (double)calls : 0.0, rejected, failed);
}

static void cmdstat_cb(struct rcommand *cmd, void *arg)
{
    rbuf *b = arg;
    cmdstat_line(b, NULL, cmd);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) cmdstat_line(b, cmd->name, s);
}

static void info_commandstats(rbuf *b)
{
    rbuf_appendf(b, "# Commandstats\r\n");
    command_foreach(cmdstat_cb, b);
}

/* Sum over shards of versions handed out but not yet durable. */
static long long durable_version_lag(void)
{
    long long lag = 0;
    for (int i = 0; i < server.nshards && server.shards; i++)
        lag += (long long)shard_durable_lag(&server.shards[i]);
    return lag;
}

static long long index_memory(void)
{
    long long total = 0;
    for (int i = 0; i < server.nshards && server.shards; i++) {
        shard *s = &server.shards[i];
        int locked = !shard_held_by_me(s);   /* INFO in EXEC or a script holds it */
        if (locked) shard_lock(s);
        if (s->idx) total += (long long)index_mem_bytes(s->idx);
        if (s->vidx) total += (long long)index_mem_bytes(s->vidx);
        if (locked) shard_unlock(s);
    }
    return total;
}

static void info_rowan_pool(rbuf *b)
{
    pool *p = server.pool;
    long long by_state[4] = { 0, 0, 0, 0 }, by_owner[4] = { 0, 0, 0, 0 };
    long long blog_by_state[4] = { 0, 0, 0, 0 };   /* b-log: control-thread owned */
    uint32_t n = p ? pool_nsegs(p) : 0;
    for (uint32_t i = 0; i < n; i++) {
        struct seg_meta m = pool_seg_meta(p, i);
        if (m.state < 4) by_state[m.state]++;
        if (m.state != SEG_FREE && m.owner < 4) by_owner[m.owner]++;
        if (m.owner == OWNER_CONTROL && m.state < 4) blog_by_state[m.state]++;
    }
    rbuf_appendf(b, "pool_file:%s/%s\r\n", server.cfg.dir ? server.cfg.dir : "",
                 server.cfg.pool_file ? server.cfg.pool_file : "");
    rbuf_appendf(b, "pool_size:%llu\r\n", p ? (unsigned long long)pool_size(p) : 0ULL);
    rbuf_appendf(b, "pool_is_pmem:%d\r\n", p ? pool_is_pmem(p) : 0);
    rbuf_appendf(b, "pool_segment_size:%u\r\n", (unsigned)POOL_SEG_SIZE);
    rbuf_appendf(b, "pool_segments:%u\r\n", (unsigned)n);
    rbuf_appendf(b, "pool_segments_free:%lld\r\npool_segments_using:%lld\r\n", by_state[SEG_FREE], by_state[SEG_USING]);
    rbuf_appendf(b, "pool_segments_used:%lld\r\npool_segments_committed:%lld\r\n", by_state[SEG_USED], by_state[SEG_COMMITTED]);
    /* Why a write is refused: ordinary writes leave the reserve to DEL and
     * the cleaner; clean_state says whether reclaimable space remains. */
    rbuf_appendf(b, "pool_reserve_segments:%u\r\n", p ? db_reserve_segments() : 0);
    rbuf_appendf(b, "pool_reclaimable_bytes:%lld\r\n", p ? (long long)clean_reclaimable_bytes() : 0LL);
    rbuf_appendf(b, "tlog_segments:%lld\r\nblog_segments:%lld\r\nclean_log_segments:%lld\r\n",
                 by_owner[OWNER_WORKER], by_owner[OWNER_CONTROL], by_owner[OWNER_CLEAN]);
    rbuf_appendf(b, "blog_segments_using:%lld\r\nblog_segments_used:%lld\r\n"
                 "blog_segments_committed:%lld\r\n", blog_by_state[SEG_USING],
                 blog_by_state[SEG_USED], blog_by_state[SEG_COMMITTED]);
}

/* A managed cluster's membership and, on the CM, its decisions. */
static void info_member(rbuf *b) {
    member_stats m;
    member_stats_get(&m);
    if (!m.managed) return;
    rbuf_appendf(b, "cluster_managed:1\r\ncluster_term:%llu\r\ncluster_cm:%s\r\n"
                 "cluster_lease_ms_left:%lld\r\ncluster_member:%d\r\ncluster_adoptions:%lld\r\n",
                 (unsigned long long)m.term, m.cm_name, m.lease_ms_left, m.member, m.adoptions);
    cm_stats c;
    cm_stats_get(&c);
    rbuf_appendf(b, "cm_active:%d\r\n", c.active);
    if (!c.active) return;
    rbuf_appendf(b, "cm_commits:%lld\r\ncm_failovers:%lld\r\ncm_joins:%lld\r\ncm_handovers:%lld\r\n"
                 "cm_last_zk_write_usec:%lld\r\n",
                 c.commits, c.failovers, c.joins, c.handovers, c.last_zk_write_usec);
}

static void info_rowan(rbuf *b)
{
    rbuf_appendf(b, "# Rowan\r\n");
    rbuf_appendf(b, "rowan_version:%s\r\n", ROWAN_VERSION);
    rbuf_appendf(b, "workers:%d\r\nshards:%d\r\n", server.nworkers, server.nshards);
    info_rowan_pool(b);
    /* Loading: the shards and indexes are being rebuilt without locks; the
     * figures read from them (and replication's, per shard) wait. */
    int loading = server_loading();
    if (!loading) rbuf_appendf(b, "durable_version_lag:%lld\r\n", durable_version_lag());
    rbuf_appendf(b, "held_replies:%lld\r\n", stat_get(&server.stat.held_replies));
    rbuf_appendf(b, "syncs:%lld\r\n", stat_get(&server.stat.syncs));
    rbuf_appendf(b, "oom_refused:%lld\r\n", stat_get(&server.stat.oom_refused));
    rbuf_appendf(b, "oom_last_reason:%s\r\n", db_refusal_name(db_last_refusal()));
    if (!loading) rbuf_appendf(b, "index_memory:%lld\r\n", index_memory());
    rbuf_appendf(b, "clean_threshold:%d\r\n", server.cfg.clean_threshold);
    rbuf_appendf(b, "clean_state:%s\r\n", clean_state_name(clean_state_now()));
    rbuf_appendf(b, "clean_segments:%lld\r\n", stat_get(&server.stat.clean_segments));
    rbuf_appendf(b, "clean_bytes_copied:%lld\r\n", stat_get(&server.stat.clean_bytes_copied));
    rbuf_appendf(b, "recovered_entries:%lld\r\n", stat_get(&server.stat.recovered_entries));
    rbuf_appendf(b, "recovery_dropped_bytes:%lld\r\n", stat_get(&server.stat.recovery_dropped_bytes));
    rbuf_appendf(b, "recovery_corrupt_entries:%lld\r\n", stat_get(&server.stat.recovery_corrupt_entries));
    rbuf_appendf(b, "recovery_accepted_losses:%lld\r\n", stat_get(&server.stat.recovery_accepted_losses));
    rbuf_appendf(b, "recovery_accepted_loss_bytes:%lld\r\n",
                 stat_get(&server.stat.recovery_accepted_loss_bytes));
    rbuf_appendf(b, "damaged_shards:%lld\r\n", stat_get(&server.stat.damaged_shards));
    if (!loading) {
        rbuf_appendf(b, "recovery_seconds:%.3f\r\n", server.recovery_seconds);
        info_member(b);
        repl_info(b);
    }
}

#define SEC_DEFAULT  1  /* in INFO / INFO default */
#define SEC_ALL      2  /* in INFO all (and everything) */

static const struct info_section {
    const char *name;
    void (*fn)(rbuf *b);   /* NULL: info_keyspace, which needs the client */
    int in;
} sections[] = {
    { "server", info_server, SEC_DEFAULT | SEC_ALL },
    { "clients", info_clients, SEC_DEFAULT | SEC_ALL },
    { "memory", info_memory, SEC_DEFAULT | SEC_ALL },
    { "persistence", info_persistence, SEC_DEFAULT | SEC_ALL },
    { "stats", info_stats, SEC_DEFAULT | SEC_ALL },
    { "replication", info_replication, SEC_DEFAULT | SEC_ALL },
    { "cpu", info_cpu, SEC_DEFAULT | SEC_ALL },
    { "modules", info_modules, SEC_DEFAULT | SEC_ALL },
    { "commandstats", info_commandstats, SEC_ALL },
    { "errorstats", info_errorstats, SEC_DEFAULT | SEC_ALL },
    { "latencystats", info_latencystats, SEC_ALL },
    { "cluster", info_cluster, SEC_DEFAULT | SEC_ALL },
    { "keyspace", NULL, SEC_DEFAULT | SEC_ALL },
    { "rowan", info_rowan, SEC_DEFAULT | SEC_ALL },
    /* the native datagram edge (rdma/native.c): INFO native only, so that
     * INFO everything keeps Redis's sections (plus Rowan) */
    { "native", native_info, 0 },
};
#define NSECTIONS ((int)(sizeof(sections) / sizeof(sections[0])))

/* Which sections the arguments ask for (unknown names select nothing, as in
 * Redis). Sections always come out in the table's order. */
static void info_select(client *c, int *want)
{
    memset(want, 0, sizeof(int) * NSECTIONS);
    if (c->argc == 1) {
        for (int i = 0; i < NSECTIONS; i++) want[i] = sections[i].in & SEC_DEFAULT;
        return;
    }
    for (int a = 1; a < c->argc; a++) {
        int mask = 0;
        if (arg_is(c, a, "default")) mask = SEC_DEFAULT;
        else if (arg_is(c, a, "all") || arg_is(c, a, "everything")) mask = SEC_ALL;
        for (int i = 0; i < NSECTIONS; i++)
            if ((sections[i].in & mask) || arg_is(c, a, sections[i].name)) want[i] = 1;
    }
}

void infoCommand(client *c)
{
    int want[NSECTIONS];
    info_select(c, want);
    rbuf b;
    rbuf_init(&b);
    int first = 1;
    for (int i = 0; i < NSECTIONS; i++) {
        if (!want[i]) continue;
        if (!first) rbuf_appendf(&b, "\r\n");
        if (sections[i].fn) sections[i].fn(&b);
        else info_keyspace(c, &b);
        first = 0;
    }
    resp_add_verbatim(&c->out, b.buf ? b.buf : "", b.len);
    rbuf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* CONFIG                                                                     */
/* ------------------------------------------------------------------------ */

static const char *const config_help[] = {
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern> [<pattern> ...]",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value> [<directive> <value> ...]",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
    NULL
};

static void reset_cmd_stats(struct rcommand *cmd)
{
    struct cmd_stats *st = command_stats(cmd);
    atomic_store(&st->calls, 0);
    atomic_store(&st->usec, 0);
    atomic_store(&st->failed_calls, 0);
    atomic_store(&st->rejected_calls, 0);
}

static void resetstat_cb(struct rcommand *cmd, void *arg)
{
    reset_cmd_stats(cmd);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++)
        reset_cmd_stats((struct rcommand *)s);
}

/* CONFIG RESETSTAT: counters only; facts about startup (recovery) stay. */
static void reset_stats(void)
{
    struct rowan_stats *st = &server.stat;
    _Atomic long long *counters[] = {
        &st->numcommands, &st->numconnections, &st->rejected_conn, &st->expiredkeys,
        &st->keyspace_hits, &st->keyspace_misses, &st->net_input_bytes,
        &st->net_output_bytes, &st->oom_refused, &st->held_replies, &st->syncs,
        &st->clean_segments, &st->clean_bytes_copied, &st->unexpected_errors,
        &st->evicted_keys,
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) atomic_store(counters[i], 0);
    command_foreach(resetstat_cb, NULL);
    latency_resetstat();
    atomic_store(&peak_memory, 0);
    pthread_mutex_lock(&rates.mu);
    rates.t_us = 0;
    rates.ops_rate = 0;
    rates.in_kbps = rates.out_kbps = 0;
    pthread_mutex_unlock(&rates.mu);
}

static void config_get_pair(void *arg, const char *name, const char *value)
{
    resp_add_bulkstr(arg, name);
    resp_add_bulkstr(arg, value);
}

/* A map of name -> value; the count first (the set of names is fixed, so
 * the second pass sees as many). */
static void config_get(client *c)
{
    int n = c->argc - 2;
    const char **pats = malloc((size_t)n * sizeof(*pats));
    size_t *lens = malloc((size_t)n * sizeof(*lens));
    if (!pats || !lens) abort();
    for (int i = 0; i < n; i++) {
        pats[i] = c->argv[i + 2];
        lens[i] = c->argvlen[i + 2];
    }
    resp_add_map(&c->out, config_get_matching(n, pats, lens, NULL, NULL));
    config_get_matching(n, pats, lens, config_get_pair, &c->out);
    free(pats);
    free(lens);
}

static void config_set_cmd(client *c)
{
    if ((c->argc - 2) % 2) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    int n = (c->argc - 2) / 2;
    char **names = malloc((size_t)n * sizeof(*names));
    char **values = malloc((size_t)n * sizeof(*values));
    if (!names || !values) abort();
    for (int i = 0; i < n; i++) {
        names[i] = arg_dup(c, 2 + 2 * i);
        values[i] = arg_dup(c, 3 + 2 * i);
    }
    char err[512];
    if (config_set_many(n, (const char *const *)names, (const char *const *)values, err, sizeof(err)) < 0)
        resp_add_error(&c->out, err);
    else
        resp_add_ok(&c->out);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(values[i]);
    }
    free(names);
    free(values);
}

void configCommand(client *c)
{
    if (arg_is(c, 1, "get")) {
        if (c->argc < 3) reply_sub_arity(c, "config");
        else config_get(c);
    } else if (arg_is(c, 1, "set")) {
        if (c->argc < 4) reply_sub_arity(c, "config");
        else config_set_cmd(c);
    } else if (arg_is(c, 1, "resetstat")) {
        if (c->argc != 2) { reply_sub_arity(c, "config"); return; }
        reset_stats();
        resp_add_ok(&c->out);
    } else if (arg_is(c, 1, "rewrite")) {
        char err[512];
        if (c->argc != 2) reply_sub_arity(c, "config");
        else if (config_rewrite(err, sizeof(err)) < 0) resp_add_error(&c->out, err);
        else resp_add_ok(&c->out);
    } else if (arg_is(c, 1, "help")) {
        if (c->argc != 2) reply_sub_arity(c, "config");
        else reply_help(c, config_help);
    } else {
        reply_unknown_sub(c, "CONFIG");
    }
}

/* ------------------------------------------------------------------------ */
/* CLIENT                                                                     */
/* ------------------------------------------------------------------------ */

/* Redis 7.0's text, plus what Rowan also has (KILL ID and MAXAGE, LIST ID,
 * SETINFO, NO-TOUCH: Redis 7.2's). Every line must be true here. */
static const char *const client_help[] = {
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "    * ID <client-id> [<client-id> ...]",
    "      Return clients of specified IDs only.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "NO-TOUCH (ON|OFF)",
    "    Will not touch LRU/LFU stats when this mode is on.",
    "HELP",
    "    Prints this help.",
    NULL
};

/* Client types Redis knows (getClientType): a client with subscriptions
 * is "pubsub", any other RESP client (a MONITOR too) "normal"; Rowan has no
 * master or replica connections. CT_ANY when TYPE is not given; -1 after
 * the error for an unknown name. */
enum { CT_ANY = 0, CT_NORMAL, CT_PUBSUB, CT_NONE };

static int parse_client_type(client *c, int i)
{
    if (arg_is(c, i, "normal")) return CT_NORMAL;
    if (arg_is(c, i, "pubsub")) return CT_PUBSUB;
    if (arg_is(c, i, "master") || arg_is(c, i, "replica") || arg_is(c, i, "slave")) return CT_NONE;
    resp_add_errorf(&c->out, "ERR Unknown client type '" ARGFMT "'", ARGP(c, i));
    return -1;
}

static int type_matches(int type, const client *cl)
{
    int pubsub = pubsub_channel_count(cl) + pubsub_pattern_count(cl) > 0;
    return type == CT_ANY || (type == CT_NORMAL && !pubsub) || (type == CT_PUBSUB && pubsub);
}

struct list_filter {
    int type;               /* CT_* */
    long long *ids;
    int nids;
    rbuf *out;
};

static void list_cb(client *cl, void *arg)
{
    struct list_filter *f = arg;
    if (!type_matches(f->type, cl)) return;
    if (f->nids) {
        int hit = 0;
        for (int i = 0; i < f->nids && !hit; i++) hit = (uint64_t)f->ids[i] == cl->id;
        if (!hit) return;
    }
    client_info_line(cl, f->out);
    rbuf_append(f->out, "\n", 1);
}

static void client_list(client *c)
{
    struct list_filter f = { CT_ANY, NULL, 0, NULL };
    rbuf out;
    for (int i = 2; i < c->argc; i++) {
        if (arg_is(c, i, "type") && i + 1 < c->argc) {
            int t = parse_client_type(c, ++i);
            if (t < 0) goto done;
            f.type = t;
        } else if (arg_is(c, i, "id") && i + 1 < c->argc) {
            f.ids = realloc(f.ids, (size_t)(c->argc - i) * sizeof(*f.ids));
            if (!f.ids) abort();
            for (i++; i < c->argc; i++) {
                long long id;
                if (!string2ll(c->argv[i], c->argvlen[i], &id) || id <= 0) {
                    resp_add_error(&c->out, "ERR Invalid client ID");
                    goto done;
                }
                f.ids[f.nids++] = id;
            }
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto done;
        }
    }
    rbuf_init(&out);
    f.out = &out;
    client_foreach(list_cb, &f);
    resp_add_verbatim(&c->out, out.buf ? out.buf : "", out.len);
    rbuf_free(&out);
done:
    free(f.ids);
}

static void client_info(client *c)
{
    rbuf out;
    rbuf_init(&out);
    client_info_line(c, &out);
    rbuf_append(&out, "\n", 1);
    resp_add_verbatim(&c->out, out.buf, out.len);
    rbuf_free(&out);
}

struct kill_filter {
    client *self;
    long long id;                   /* 0 = any */
    const char *addr, *laddr, *user; /* NULL = any */
    size_t addrlen, laddrlen, userlen;
    int type, skipme;               /* type: CT_* */
    long long maxage;               /* 0 = any */
    time_t now;
    long long killed;
};

static int addr_eq(const char *have, const char *want, size_t wlen)
{
    return strlen(have) == wlen && memcmp(have, want, wlen) == 0;
}

static int kill_matches(const struct kill_filter *f, client *cl)
{
    if (!type_matches(f->type, cl)) return 0;
    if (f->id && (uint64_t)f->id != cl->id) return 0;
    if (f->addr && !addr_eq(cl->addr, f->addr, f->addrlen)) return 0;
    if (f->laddr && !addr_eq(cl->laddr, f->laddr, f->laddrlen)) return 0;
    if (f->user && !acl_client_is_user(cl, f->user, f->userlen)) return 0;
    if (f->maxage && (long long)(f->now - cl->ctime) < f->maxage) return 0;
    if (f->skipme && cl == f->self) return 0;
    return 1;
}

static void kill_cb(client *cl, void *arg)
{
    struct kill_filter *f = arg;
    if (!kill_matches(f, cl)) return;
    f->killed++;
    /* Our own connection gets its reply first, then closes (as in Redis). */
    if (cl == f->self) cl->flags |= CLIENT_CLOSE_AFTER_REPLY;
    else client_kill_async(cl);
}

/* Parse CLIENT KILL's <filter> <value> pairs. 0 ok, -1 error sent. */
static int parse_kill_filters(client *c, struct kill_filter *f)
{
    if ((c->argc - 2) % 2) { resp_add_error(&c->out, ERR_SYNTAX); return -1; }
    for (int i = 2; i < c->argc; i += 2) {
        int v = i + 1;
        if (arg_is(c, i, "id")) {
            if (!string2ll(c->argv[v], c->argvlen[v], &f->id) || f->id <= 0) {
                resp_add_error(&c->out, "ERR client-id should be greater than 0");
                return -1;
            }
        } else if (arg_is(c, i, "type")) {
            int t = parse_client_type(c, v);
            if (t < 0) return -1;
            f->type = t;
        } else if (arg_is(c, i, "user")) {
            if (!acl_user_exists(c->argv[v], c->argvlen[v])) {
                resp_add_errorf(&c->out, "ERR No such user '" ARGFMT "'", ARGP(c, v));
                return -1;
            }
            f->user = c->argv[v];
            f->userlen = c->argvlen[v];
        } else if (arg_is(c, i, "addr")) {
            f->addr = c->argv[v];
            f->addrlen = c->argvlen[v];
        } else if (arg_is(c, i, "laddr")) {
            f->laddr = c->argv[v];
            f->laddrlen = c->argvlen[v];
        } else if (arg_is(c, i, "skipme")) {
            if (arg_is(c, v, "yes")) f->skipme = 1;
            else if (arg_is(c, v, "no")) f->skipme = 0;
            else { resp_add_error(&c->out, ERR_SYNTAX); return -1; }
        } else if (arg_is(c, i, "maxage")) {
            if (!string2ll(c->argv[v], c->argvlen[v], &f->maxage) || f->maxage < 0) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return -1;
            }
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    return 0;
}

static void client_kill(client *c)
{
    struct kill_filter f;
    memset(&f, 0, sizeof(f));
    f.self = c;
    f.type = CT_ANY;
    f.now = time(NULL);
    if (c->argc == 3) {
        /* Old form: CLIENT KILL ip:port, which may name ourselves. */
        f.addr = c->argv[2];
        f.addrlen = c->argvlen[2];
        client_foreach(kill_cb, &f);
        if (f.killed) resp_add_ok(&c->out);
        else resp_add_error(&c->out, "ERR No such client");
        return;
    }
    f.skipme = 1;
    if (parse_kill_filters(c, &f) < 0) return;
    client_foreach(kill_cb, &f);
    resp_add_int(&c->out, f.killed);
}

static void client_setname(client *c)
{
    if (!valid_client_attr(c->argv[2], c->argvlen[2])) {
        resp_add_error(&c->out, "ERR Client names cannot contain spaces, newlines or special characters.");
        return;
    }
    client_set_attr(c, ATTR_NAME, c->argv[2], c->argvlen[2]);
    resp_add_ok(&c->out);
}

static void client_setinfo(client *c)
{
    enum attr_kind kind;
    const char *attr;
    if (arg_is(c, 2, "lib-name")) { kind = ATTR_LIBNAME; attr = "lib-name"; }
    else if (arg_is(c, 2, "lib-ver")) { kind = ATTR_LIBVER; attr = "lib-ver"; }
    else {
        resp_add_errorf(&c->out, "ERR Unrecognized option '" ARGFMT "'", ARGP(c, 2));
        return;
    }
    if (!valid_client_attr(c->argv[3], c->argvlen[3])) {
        resp_add_errorf(&c->out, "ERR %s cannot contain spaces, newlines or special characters.", attr);
        return;
    }
    client_set_attr(c, kind, c->argv[3], c->argvlen[3]);
    resp_add_ok(&c->out);
}

/* ON|OFF switches that have nothing to switch in Rowan (no eviction, no LRU). */
static void client_onoff(client *c)
{
    if (arg_is(c, 2, "on") || arg_is(c, 2, "off")) resp_add_ok(&c->out);
    else resp_add_error(&c->out, ERR_SYNTAX);
}

/* CLIENT NO-EVICT on|off: maxmemory-clients never evicts this client. */
static void client_no_evict(client *c)
{
    client_onoff(c);
    if (arg_is(c, 2, "on")) atomic_store(&c->no_evict, 1);
    else if (arg_is(c, 2, "off")) atomic_store(&c->no_evict, 0);
}

static void client_unblock(client *c)
{
    long long id;
    if (c->argc > 4) { resp_add_error(&c->out, ERR_SYNTAX); return; }
    if (arg_ll(c, 2, &id) < 0) return;
    if (c->argc == 4 && !arg_is(c, 3, "timeout") && !arg_is(c, 3, "error")) {
        resp_add_error(&c->out, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
        return;
    }
    resp_add_int(&c->out, blocking_unblock_id((uint64_t)id, c->argc == 4 && arg_is(c, 3, "error")));
}

static void client_id(client *c) { resp_add_int(&c->out, (long long)c->id); }
static void client_getname(client *c)
{
    if (c->name) resp_add_bulkstr(&c->out, c->name);
    else resp_add_null(&c->out);
}
static void client_help_cmd(client *c) { reply_help(c, client_help); }

/* CLIENT's subcommands with their Redis arities. */
static const subcommand client_subs[] = {
    { "id", 2, client_id },
    { "getname", 2, client_getname },
    { "setname", 3, client_setname },
    { "setinfo", 4, client_setinfo },
    { "list", -2, client_list },
    { "info", 2, client_info },
    { "kill", -3, client_kill },
    { "no-evict", 3, client_no_evict },
    { "no-touch", 3, client_onoff },
    { "reply", 3, client_reply },
    { "pause", -3, client_pause },
    { "unpause", 2, client_unpause },
    { "unblock", -3, client_unblock },
    { "tracking", -3, client_tracking },
    { "caching", 3, client_caching },
    { "getredir", 2, client_getredir },
    { "trackinginfo", 2, client_trackinginfo },
    { "help", 2, client_help_cmd },
    { NULL, 0, NULL }
};

void clientCommand(client *c)
{
    subcommand_dispatch(c, client_subs, "client");
}

/* ------------------------------------------------------------------------ */
/* COMMAND                                                                    */
/* ------------------------------------------------------------------------ */

static const char *const command_help[] = {
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help.",
    NULL
};

/* Full name as Redis shows it: "get", or "config|get" for a subcommand. */
static void full_name(char *buf, size_t len, const struct rcommand *parent, const struct rcommand *cmd)
{
    if (parent && !strchr(cmd->name, '|')) snprintf(buf, len, "%s|%s", parent->name, cmd->name);
    else snprintf(buf, len, "%s", cmd->name);
}

static const struct { uint32_t flag; const char *name; } flag_names[] = {
    { CMD_WRITE, "write" }, { CMD_READONLY, "readonly" }, { CMD_DENYOOM, "denyoom" },
    { CMD_ADMIN, "admin" }, { CMD_PUBSUB, "pubsub" }, { CMD_NOSCRIPT, "noscript" },
    { CMD_LOADING, "loading" }, { CMD_STALE, "stale" }, { CMD_FAST, "fast" },
    { CMD_NOAUTH, "no_auth" },
};

static void reply_key_specs(client *c, const struct rcommand *cmd)
{
    if (cmd->firstkey <= 0) { resp_add_array(&c->out, 0); return; }
    int write = (cmd->flags & CMD_WRITE) != 0;
    resp_add_array(&c->out, 1);
    resp_add_map(&c->out, 3);
    resp_add_bulkstr(&c->out, "flags");
    resp_add_array(&c->out, 2);
    resp_add_simple(&c->out, write ? "RW" : "RO");
    resp_add_simple(&c->out, write ? "update" : "access");
    resp_add_bulkstr(&c->out, "begin_search");
    resp_add_map(&c->out, 2);
    resp_add_bulkstr(&c->out, "type");
    resp_add_bulkstr(&c->out, "index");
    resp_add_bulkstr(&c->out, "spec");
    resp_add_map(&c->out, 1);
    resp_add_bulkstr(&c->out, "index");
    resp_add_int(&c->out, cmd->firstkey);
    resp_add_bulkstr(&c->out, "find_keys");
    resp_add_map(&c->out, 2);
    resp_add_bulkstr(&c->out, "type");
    resp_add_bulkstr(&c->out, "range");
    resp_add_bulkstr(&c->out, "spec");
    resp_add_map(&c->out, 3);
    resp_add_bulkstr(&c->out, "lastkey");
    /* Key specs count lastkey from firstkey; negative counts from the end. */
    resp_add_int(&c->out, cmd->lastkey < 0 ? cmd->lastkey : cmd->lastkey - cmd->firstkey);
    resp_add_bulkstr(&c->out, "keystep");
    resp_add_int(&c->out, cmd->keystep);
    resp_add_bulkstr(&c->out, "limit");
    resp_add_int(&c->out, 0);
}

static int count_subcommands(const struct rcommand *cmd)
{
    int n = 0;
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) n++;
    return n;
}

/* A container (CONFIG, CLIENT, OBJECT...) as Redis shows it: no flags,
 * keys nor categories of its own beyond @slow, the subcommands have them.
 * (The row keeps flags and a key range for the dispatcher.) */
static void reply_container_info(client *c, const struct rcommand *cmd)
{
    resp_add_array(&c->out, 10);
    resp_add_bulkstr(&c->out, cmd->name);
    resp_add_int(&c->out, cmd->arity);
    resp_add_set(&c->out, 0);
    for (int i = 0; i < 3; i++) resp_add_int(&c->out, 0);
    resp_add_set(&c->out, 1);
    resp_add_simple(&c->out, "@slow");
    resp_add_array(&c->out, 0);     /* tips */
    resp_add_array(&c->out, 0);     /* key specs */
    resp_add_array(&c->out, count_subcommands(cmd));
}

/* One COMMAND INFO entry: the 10-element array of Redis 7; a container's
 * 10th element holds its subcommands' entries. */
static void reply_command_info(client *c, const struct rcommand *parent, const struct rcommand *cmd)
{
    char name[128];
    const char *cats[8];
    if (cmd->subcommands && cmd->proc != commandCommand) {
        reply_container_info(c, cmd);
        for (const struct rcommand *s = cmd->subcommands; s->name; s++) reply_command_info(c, cmd, s);
        return;
    }
    full_name(name, sizeof(name), parent, cmd);
    resp_add_array(&c->out, 10);
    resp_add_bulkstr(&c->out, name);
    resp_add_int(&c->out, cmd->arity);
    int nflags = 0, movable = command_movable_keys(cmd);
    for (size_t i = 0; i < sizeof(flag_names) / sizeof(flag_names[0]); i++)
        if (cmd->flags & flag_names[i].flag) nflags++;
    resp_add_set(&c->out, nflags + movable);
    for (size_t i = 0; i < sizeof(flag_names) / sizeof(flag_names[0]); i++)
        if (cmd->flags & flag_names[i].flag) resp_add_simple(&c->out, flag_names[i].name);
    if (movable) resp_add_simple(&c->out, "movablekeys");
    /* Redis's legacy range for movable keys covers only the fixed leading
     * key: ZUNIONSTORE's destination (1 1 1); none when a count comes
     * first (ZUNION, LMPOP: 0 0 0). */
    if (movable && cmd->firstkey > 1 && cmd->lastkey < 0) {
        resp_add_int(&c->out, 0);
        resp_add_int(&c->out, 0);
        resp_add_int(&c->out, 0);
    } else if (movable && cmd->firstkey == 1 && cmd->lastkey < 0) {
        resp_add_int(&c->out, 1);
        resp_add_int(&c->out, 1);
        resp_add_int(&c->out, 1);
    } else {
        resp_add_int(&c->out, cmd->firstkey);
        resp_add_int(&c->out, cmd->lastkey);
        resp_add_int(&c->out, cmd->keystep);
    }
    int ncats = acl_command_categories(cmd, cats);
    resp_add_set(&c->out, ncats);
    for (int i = 0; i < ncats; i++) resp_add_simple(&c->out, cats[i]);
    resp_add_array(&c->out, 0);     /* tips */
    reply_key_specs(c, cmd);
    resp_add_array(&c->out, count_subcommands(cmd));
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) reply_command_info(c, cmd, s);
}

/* Look up "get" or "config|get". */
static const struct rcommand *lookup_full(const char *name, size_t len, const struct rcommand **parent)
{
    const char *bar = memchr(name, '|', len);
    *parent = NULL;
    if (!bar) return command_lookup(name, len);
    const struct rcommand *p = command_lookup(name, (size_t)(bar - name));
    if (!p) return NULL;
    const struct rcommand *s = command_subcommand(p, bar + 1, len - (size_t)(bar + 1 - name));
    if (s) *parent = p;
    return s;
}

struct all_cmds { client *c; int count; };

static void count_cb(struct rcommand *cmd, void *arg)
{
    if (command_enabled(cmd)) ((struct all_cmds *)arg)->count++;
}

static void info_cb(struct rcommand *cmd, void *arg)
{
    if (command_enabled(cmd)) reply_command_info(((struct all_cmds *)arg)->c, NULL, cmd);
}

static void command_info_all(client *c)
{
    struct all_cmds a = { c, 0 };
    command_foreach(count_cb, &a);
    resp_add_array(&c->out, a.count);
    command_foreach(info_cb, &a);
}

static void command_info(client *c)
{
    if (c->argc == 2) { command_info_all(c); return; }
    resp_add_array(&c->out, c->argc - 2);
    for (int i = 2; i < c->argc; i++) {
        const struct rcommand *parent;
        const struct rcommand *cmd = lookup_full(c->argv[i], c->argvlen[i], &parent);
        if (cmd) reply_command_info(c, parent, cmd);
        else resp_add_null(&c->out);
    }
}

/* ---- COMMAND DOCS "arguments" ----
 * redis-cli builds its `help` text and its as-you-type hints from the
 * "arguments" of COMMAND DOCS. The command table has no argument specs, so
 * they are written here in a compact notation and parsed on demand:
 *
 *   word          an argument named word ("key..." = one or more)
 *   word:type     with an explicit type (default: guessed from the name)
 *   TOKEN         a pure token; "TOKEN word" is a token with a value
 *   [a b|c]       optional group; '|' separates alternatives (oneof)
 *   (a|b)         required group; "(...)..." repeats it
 *   label=[...]   names a group (Redis names them: "condition", "expiration")
 *
 * A command missing here just has no "arguments" (summary etc. still work). */
static const struct { const char *cmd, *syntax; } arg_syntax[] = {
    { "get", "key" },
    { "set", "key value [condition=[NX|XX]] [GET] [expiration=[EX seconds|PX milliseconds|"
             "EXAT unix-time-seconds|PXAT unix-time-milliseconds|KEEPTTL]]" },
    { "setnx", "key value" },
    { "setex", "key seconds value" },
    { "psetex", "key milliseconds value" },
    { "getset", "key value" },
    { "getdel", "key" },
    { "getex", "key [expiration=[EX seconds|PX milliseconds|EXAT unix-time-seconds|"
               "PXAT unix-time-milliseconds|PERSIST]]" },
    { "mget", "key..." },
    { "mset", "data=(key value)..." },
    { "msetnx", "data=(key value)..." },
    { "append", "key value" },
    { "strlen", "key" },
    { "incr", "key" },
    { "decr", "key" },
    { "incrby", "key increment" },
    { "decrby", "key decrement" },
    { "incrbyfloat", "key increment:double" },
    { "getrange", "key start end" },
    { "setrange", "key offset value" },
    { "setbit", "key offset value:integer" },
    { "getbit", "key offset" },
    { "bitcount", "key [range=(start end [unit=[BYTE|BIT]])]" },
    { "del", "key..." },
    { "unlink", "key..." },
    { "exists", "key..." },
    { "touch", "key..." },
    { "type", "key" },
    { "expire", "key seconds [condition=[NX|XX|GT|LT]]" },
    { "pexpire", "key milliseconds [condition=[NX|XX|GT|LT]]" },
    { "expireat", "key unix-time-seconds [condition=[NX|XX|GT|LT]]" },
    { "pexpireat", "key unix-time-milliseconds [condition=[NX|XX|GT|LT]]" },
    { "expiretime", "key" },
    { "pexpiretime", "key" },
    { "ttl", "key" },
    { "pttl", "key" },
    { "persist", "key" },
    { "keys", "pattern" },
    { "scan", "cursor [MATCH pattern] [COUNT count] [TYPE type]" },
    { "rename", "key newkey" },
    { "renamenx", "key newkey" },
    { "flushdb", "[flush-type=[ASYNC|SYNC]]" },
    { "flushall", "[flush-type=[ASYNC|SYNC]]" },
    { "select", "index" },
    { "move", "key db" },
    { "swapdb", "index1 index2" },
    { "ping", "[message]" },
    { "echo", "message" },
    { "shutdown", "[save-selector=[NOSAVE|SAVE]] [NOW] [FORCE] [ABORT]" },
    { "info", "[section...]" },
    { "wait", "numreplicas timeout" },
    { "waitaof", "numlocal numreplicas timeout" },
    { "auth", "[username] password" },
    { "hello", "[arguments=(protover [AUTH username password] [SETNAME clientname])]" },
    { "bgsave", "[SCHEDULE]" },
    { "debug", "subcommand=(SLEEP seconds:double|JMAP|HELP)" },
    { "rowan", "subcommand=(VERSION|HELP)" },
};

struct argnode {
    char name[48];
    char token[32];
    const char *type;
    int optional, multiple;
    struct argnode *kids;
    int nkids;
};

static const char *guess_arg_type(const char *name)
{
    static const char *const ints[] = {
        "seconds", "milliseconds", "offset", "start", "end", "count", "index", "index1",
        "index2", "db", "numreplicas", "numlocal", "timeout", "cursor", "increment",
        "decrement", "client-id", "protover", NULL
    };
    if (!strcmp(name, "key") || !strcmp(name, "newkey")) return "key";
    if (!strcmp(name, "pattern")) return "pattern";
    if (!strncmp(name, "unix-time", 9)) return "unix-time";
    for (int i = 0; ints[i]; i++)
        if (!strcmp(name, ints[i])) return "integer";
    return "string";
}

/* An explicit ":type" as a static string (the parse buffer is temporary). */
static const char *static_arg_type(const char *t)
{
    static const char *const types[] = { "string", "integer", "double", "key", "pattern",
                                         "unix-time", NULL };
    for (int i = 0; types[i]; i++)
        if (!strcmp(t, types[i])) return types[i];
    return "string";
}

static void argnode_free(struct argnode *n)
{
    for (int i = 0; i < n->nkids; i++) argnode_free(&n->kids[i]);
    free(n->kids);
    n->kids = NULL;
    n->nkids = 0;
}

static struct argnode *argnode_push(struct argnode *parent)
{
    struct argnode *k = realloc(parent->kids, (size_t)(parent->nkids + 1) * sizeof(*k));
    if (!k) abort();
    parent->kids = k;
    memset(&k[parent->nkids], 0, sizeof(*k));
    return &k[parent->nkids++];
}

static void skip_spaces(const char **p) { while (**p == ' ') (*p)++; }

/* Read one bare word (letters, digits, '-', ':', '_') into buf. */
static size_t read_word(const char **p, char *buf, size_t cap)
{
    size_t n = 0;
    while (**p && (isalnum((unsigned char)**p) || **p == '-' || **p == ':' || **p == '_')) {
        if (n + 1 < cap) buf[n++] = **p;
        (*p)++;
    }
    buf[n] = '\0';
    return n;
}

static int read_ellipsis(const char **p)
{
    if (strncmp(*p, "...", 3) != 0) return 0;
    *p += 3;
    return 1;
}

static int word_is_token(const char *w)
{
    for (; *w; w++)
        if (isupper((unsigned char)*w)) return 1;
    return 0;
}

static void parse_seq(const char **p, struct argnode *into);

/* A plain lowercase word, "name" or "name:type". */
static void fill_value(struct argnode *n, const char *word)
{
    const char *colon = strchr(word, ':');
    size_t len = colon ? (size_t)(colon - word) : strlen(word);
    snprintf(n->name, sizeof(n->name), "%.*s", (int)len, word);
    n->type = colon ? static_arg_type(colon + 1) : guess_arg_type(n->name);
}

/* One alternative of a group becomes a single node: the item itself when
 * it is one item, else a block holding the items. */
static void collapse_alt(struct argnode *alt, struct argnode *out)
{
    if (alt->nkids == 1) {
        *out = alt->kids[0];
        free(alt->kids);
    } else {
        *out = *alt;
        out->type = "block";
        if (!out->name[0] && alt->nkids) snprintf(out->name, sizeof(out->name), "%s", alt->kids[0].name);
    }
    alt->kids = NULL;
    alt->nkids = 0;
}

static void parse_group(const char **p, struct argnode *n, const char *label)
{
    char close = **p == '[' ? ']' : ')';
    int optional = **p == '[';
    struct argnode alts;
    memset(&alts, 0, sizeof(alts));
    (*p)++;
    for (;;) {
        struct argnode *alt = argnode_push(&alts);
        parse_seq(p, alt);
        if (**p == '|') { (*p)++; continue; }
        if (**p == close) (*p)++;
        break;
    }
    if (alts.nkids == 1) {
        collapse_alt(&alts.kids[0], n);
    } else {
        memset(n, 0, sizeof(*n));
        n->type = "oneof";
        n->kids = calloc((size_t)alts.nkids, sizeof(*n->kids));
        if (!n->kids) abort();
        n->nkids = alts.nkids;
        for (int i = 0; i < alts.nkids; i++) collapse_alt(&alts.kids[i], &n->kids[i]);
        snprintf(n->name, sizeof(n->name), "%s", n->kids[0].name);
    }
    free(alts.kids);
    if (label[0]) snprintf(n->name, sizeof(n->name), "%s", label);
    n->optional |= optional;
    n->multiple |= read_ellipsis(p);
}

static void parse_item(const char **p, struct argnode *n)
{
    char word[32], label[48] = "";
    skip_spaces(p);
    if (**p != '[' && **p != '(') {
        read_word(p, word, sizeof(word));
        if (**p == '=') {               /* label=[...] */
            (*p)++;
            snprintf(label, sizeof(label), "%s", word);
        } else if (word_is_token(word)) {
            snprintf(n->token, sizeof(n->token), "%s", word);
            const char *q = *p, *e;
            skip_spaces(&q);
            for (e = q; isalnum((unsigned char)*e) || *e == '-' || *e == ':' || *e == '_'; e++) {}
            if (islower((unsigned char)*q) && *e != '=') {   /* TOKEN value, not TOKEN label=(...) */
                *p = q;
                read_word(p, word, sizeof(word));
                fill_value(n, word);
                n->multiple = read_ellipsis(p);
            } else {
                for (size_t i = 0; n->token[i] && i < sizeof(n->name) - 1; i++)
                    n->name[i] = (char)tolower((unsigned char)n->token[i]);
                n->type = "pure-token";
            }
            return;
        } else {
            fill_value(n, word);
            n->multiple = read_ellipsis(p);
            return;
        }
    }
    parse_group(p, n, label);
}

/* Items up to the end, a '|' or a closing bracket. */
static void parse_seq(const char **p, struct argnode *into)
{
    for (;;) {
        skip_spaces(p);
        if (!**p || **p == '|' || **p == ']' || **p == ')') return;
        parse_item(p, argnode_push(into));
    }
}

/* key_spec: the next key argument's key spec index (Redis numbers a
 * command's key arguments' specs in order: RENAME key 0, newkey 1). */
static void reply_argnode(client *c, const struct argnode *n, int *key_spec)
{
    int nflags = n->optional + n->multiple;
    int is_key = n->type && !strcmp(n->type, "key");
    resp_add_map(&c->out, 2 + is_key + (n->token[0] != 0) + (nflags > 0) + (n->nkids > 0));
    resp_add_bulkstr(&c->out, "name");
    resp_add_bulkstr(&c->out, n->name);
    resp_add_bulkstr(&c->out, "type");
    resp_add_bulkstr(&c->out, n->type ? n->type : "string");
    if (is_key) {
        resp_add_bulkstr(&c->out, "key_spec_index");
        resp_add_int(&c->out, (*key_spec)++);
    }
    if (n->token[0]) {
        resp_add_bulkstr(&c->out, "token");
        resp_add_bulkstr(&c->out, n->token);
    }
    if (nflags) {
        resp_add_bulkstr(&c->out, "flags");
        resp_add_array(&c->out, nflags);
        if (n->optional) resp_add_simple(&c->out, "optional");
        if (n->multiple) resp_add_simple(&c->out, "multiple");
    }
    if (n->nkids) {
        resp_add_bulkstr(&c->out, "arguments");
        resp_add_array(&c->out, n->nkids);
        for (int i = 0; i < n->nkids; i++) reply_argnode(c, &n->kids[i], key_spec);
    }
}

static const char *syntax_of(const char *cmd)
{
    for (size_t i = 0; i < sizeof(arg_syntax) / sizeof(arg_syntax[0]); i++)
        if (!strcmp(arg_syntax[i].cmd, cmd)) return arg_syntax[i].syntax;
    return NULL;
}

/* Parse a command's syntax into root->kids; 0 when there is none. */
static int command_args(const char *cmd, struct argnode *root)
{
    memset(root, 0, sizeof(*root));
    const char *p = syntax_of(cmd);
    if (!p) return 0;
    parse_seq(&p, root);
    return root->nkids;
}

/* One COMMAND DOCS value: summary, since, group (+ subcommands). */
static void reply_command_docs(client *c, const struct rcommand *parent, const struct rcommand *cmd)
{
    int nsub = count_subcommands(cmd);
    struct argnode args;
    int nargs = parent ? 0 : command_args(cmd->name, &args);
    /* a container's complexity, as Redis words it */
    const char *complexity = nsub && cmd->proc != commandCommand ? "Depends on subcommand." : cmd->complexity;
    resp_add_map(&c->out, 3 + (complexity != NULL) + (nsub > 0) + (nargs > 0));
    resp_add_bulkstr(&c->out, "summary");
    resp_add_bulkstr(&c->out, cmd->summary ? cmd->summary : "");
    resp_add_bulkstr(&c->out, "since");
    resp_add_bulkstr(&c->out, cmd->since ? cmd->since : "1.0.0");
    resp_add_bulkstr(&c->out, "group");
    resp_add_bulkstr(&c->out, cmd->group ? cmd->group : (parent && parent->group ? parent->group : "generic"));
    if (complexity) {
        resp_add_bulkstr(&c->out, "complexity");
        resp_add_bulkstr(&c->out, complexity);
    }
    if (nargs) {
        int key_spec = 0;
        resp_add_bulkstr(&c->out, "arguments");
        resp_add_array(&c->out, nargs);
        for (int i = 0; i < nargs; i++) reply_argnode(c, &args.kids[i], &key_spec);
        argnode_free(&args);
    }
    if (nsub) {
        resp_add_bulkstr(&c->out, "subcommands");
        resp_add_map(&c->out, nsub);
        for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) {
            char name[128];
            full_name(name, sizeof(name), cmd, s);
            resp_add_bulkstr(&c->out, name);
            reply_command_docs(c, cmd, s);
        }
    }
}

static void docs_cb(struct rcommand *cmd, void *arg)
{
    client *c = ((struct all_cmds *)arg)->c;
    if (!command_enabled(cmd)) return;
    resp_add_bulkstr(&c->out, cmd->name);
    reply_command_docs(c, NULL, cmd);
}

static void command_docs(client *c)
{
    if (c->argc == 2) {
        struct all_cmds a = { c, 0 };
        command_foreach(count_cb, &a);
        resp_add_map(&c->out, a.count);
        command_foreach(docs_cb, &a);
        return;
    }
    /* Unknown names are left out of the map, so resolve them first. */
    int n = c->argc - 2, found = 0;
    const struct rcommand **cmds = calloc((size_t)n, sizeof(*cmds));
    const struct rcommand **parents = calloc((size_t)n, sizeof(*parents));
    if (!cmds || !parents) abort();
    for (int i = 0; i < n; i++) {
        cmds[i] = lookup_full(c->argv[i + 2], c->argvlen[i + 2], &parents[i]);
        if (cmds[i]) found++;
    }
    resp_add_map(&c->out, found);
    for (int i = 0; i < n; i++) {
        if (!cmds[i]) continue;
        char name[128];
        full_name(name, sizeof(name), parents[i], cmds[i]);
        resp_add_bulkstr(&c->out, name);
        reply_command_docs(c, parents[i], cmds[i]);
    }
    free(cmds);
    free(parents);
}

struct list_args {
    client *c;
    int mode;               /* 0 all, 1 module (none), 2 aclcat, 3 pattern */
    const char *arg;
    size_t arglen;
    long long n;
    int emit;
};

static int list_match(struct list_args *l, const struct rcommand *cmd, const char *name)
{
    const char *cats[8];
    switch (l->mode) {
    case 0: return 1;
    case 1: return 0;
    case 2: {
        if (cmd->subcommands && cmd->proc != commandCommand)   /* a container: @slow only */
            return strcaseeqlen(l->arg, l->arglen, "slow");
        int n = acl_command_categories(cmd, cats);
        for (int i = 0; i < n; i++)
            if (strcaseeqlen(l->arg, l->arglen, cats[i] + 1)) return 1;
        return 0;
    }
    default:
        return stringmatchlen(l->arg, l->arglen, name, strlen(name), 1);
    }
}

static void list_one(struct list_args *l, const struct rcommand *parent, const struct rcommand *cmd)
{
    char name[128];
    full_name(name, sizeof(name), parent, cmd);
    if (!list_match(l, cmd, name)) return;
    l->n++;
    if (l->emit) resp_add_bulkstr(&l->c->out, name);
}

static void list_cmds_cb(struct rcommand *cmd, void *arg)
{
    struct list_args *l = arg;
    if (!command_enabled(cmd)) return;
    list_one(l, NULL, cmd);
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) list_one(l, cmd, s);
}

static void command_list(client *c)
{
    struct list_args l = { c, 0, NULL, 0, 0, 0 };
    if (c->argc == 5 && arg_is(c, 2, "filterby")) {
        if (arg_is(c, 3, "module")) l.mode = 1;
        else if (arg_is(c, 3, "aclcat")) l.mode = 2;
        else if (arg_is(c, 3, "pattern")) l.mode = 3;
        else { resp_add_error(&c->out, ERR_SYNTAX); return; }
        l.arg = c->argv[4];
        l.arglen = c->argvlen[4];
    } else if (c->argc != 2) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    command_foreach(list_cmds_cb, &l);
    resp_add_array(&c->out, l.n);
    l.emit = 1;
    l.n = 0;
    command_foreach(list_cmds_cb, &l);
}

/* A set of the space-separated words of s, as simple strings. */
static void reply_words(client *c, const char *s)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        if (*p != ' ' && (p == s || p[-1] == ' ')) n++;
    resp_add_set(&c->out, n);
    while (*s) {
        size_t len = strcspn(s, " ");
        char w[32];
        snprintf(w, sizeof(w), "%.*s", (int)len, s);
        resp_add_simple(&c->out, w);
        s += len + (s[len] == ' ');
    }
}

/* COMMAND GETKEYS / GETKEYSANDFLAGS <full command>. */
static void command_getkeys(client *c, int with_flags)
{
    int sargc = c->argc - 2;
    const struct rcommand *cmd = command_lookup(c->argv[2], c->argvlen[2]);
    if (!cmd) { resp_add_error(&c->out, "ERR Invalid command specified"); return; }
    const struct rcommand *top = cmd;   /* keyflags.c names containers */
    if (cmd->subcommands && sargc >= 2) cmd = command_row(cmd, sargc, c->argv + 2, c->argvlen + 2);
    /* Redis 7.2's order: a command without keys is refused before arity. */
    if (cmd->firstkey <= 0 && !command_movable_keys(cmd)) {
        resp_add_error(&c->out, "ERR The command has no key arguments");
        return;
    }
    if (!arity_ok(sargc, cmd->arity)) {
        resp_add_error(&c->out, "ERR Invalid number of arguments specified for command");
        return;
    }
    if (command_numkeys_bad(cmd, sargc, c->argv + 2, c->argvlen + 2)) {
        resp_add_error(&c->out, "ERR Invalid arguments specified for command");
        return;
    }
    int max = sargc > 0 ? sargc : 1;
    int *idx = malloc((size_t)max * sizeof(*idx));
    if (!idx) abort();
    int n = command_keys_argv(cmd, sargc, c->argv + 2, c->argvlen + 2, idx, max);
    if (n <= 0) {
        resp_add_error(&c->out, "ERR The command has no key arguments");
    } else {
        resp_add_array(&c->out, n);
        for (int i = 0; i < n; i++) {
            int pos = idx[i] + 2;
            if (with_flags) {
                resp_add_array(&c->out, 2);
                resp_add_bulk(&c->out, c->argv[pos], c->argvlen[pos]);
                reply_words(c, command_key_flags(top, i, sargc, c->argv + 2, c->argvlen + 2));
            } else {
                resp_add_bulk(&c->out, c->argv[pos], c->argvlen[pos]);
            }
        }
    }
    free(idx);
}

void commandCommand(client *c)
{
    if (c->argc == 1) { command_info_all(c); return; }
    if (arg_is(c, 1, "count")) {
        if (c->argc != 2) reply_sub_arity(c, "command");
        else {
            struct all_cmds a = { c, 0 };
            command_foreach(count_cb, &a);
            resp_add_int(&c->out, a.count);
        }
    } else if (arg_is(c, 1, "info")) {
        command_info(c);
    } else if (arg_is(c, 1, "docs")) {
        command_docs(c);
    } else if (arg_is(c, 1, "list")) {
        command_list(c);
    } else if (arg_is(c, 1, "getkeys") || arg_is(c, 1, "getkeysandflags")) {
        if (c->argc < 3) reply_sub_arity(c, "command");
        else command_getkeys(c, arg_is(c, 1, "getkeysandflags"));
    } else if (arg_is(c, 1, "help")) {
        if (c->argc != 2) reply_sub_arity(c, "command");
        else reply_help(c, command_help);
    } else {
        reply_unknown_sub(c, "COMMAND");
    }
}
