/* t_introspect.c -- commands that look at keys and the server from the
 * outside: COPY, SORT / SORT_RO, OBJECT, MEMORY and SLOWLOG.
 *
 * Replies, errors and the order of argument checks follow Redis 7.2.
 *
 * Locking: the dispatcher holds the shard locks of the command's keys (per
 * cmds_introspect.def). COPY names both of its keys; OBJECT and MEMORY USAGE
 * name theirs at argv[2]. SORT's row names only the sorted key, but SORT may
 * also read the keys its BY/GET patterns form and write its STORE
 * destination; sort_lock_keys() takes those shards itself (see there).
 *
 * Collections are read through their own commands (LRANGE, SMEMBERS,
 * ZRANGE, HGET) run on this client's context under the locks already held
 * (call_capture), so this file depends only on their Redis semantics, not on
 * the type modules' internals. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "evict.h"
#include "cluster.h"
#include "commands.h"
#include "notify.h"
#include "object.h"
#include "server.h"
#include "shard.h"
#include "t_string.h"
#include "util.h"
#include "edge_state.h"

#define ARGFMT "%.*s"
#define ARGP(c, i) (int)((c)->argvlen[i] > 128 ? 128 : (c)->argvlen[i]), (c)->argv[i]

static void reply_oom(client *c) { resp_add_error(&c->out, db_error_text(&c->x)); }

static int same_bytes(const char *a, size_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* ---------------- running another command's proc ----------------
 *
 * Reads the collection types' contents through their commands: the proc runs
 * on a copy of the client with its own argv and a RESP2 output buffer, under
 * the shard locks the caller holds, and its durability dependencies (the db
 * context) are taken back. Returns -1 when the command does not exist. */
static int call_capture(client *c, const char *name, int argc, const char **argv,
                        size_t *argvlen, rbuf *reply) {
    struct rcommand *cmd = command_lookup(name, strlen(name));
    if (!cmd || !cmd->proc) return -1;
    client tmp = *c;
    tmp.argc = argc;
    tmp.argv = argv;
    tmp.argvlen = argvlen;
    tmp.cmd = cmd;
    resp_out_init(&tmp.out, 2);
    cmd->proc(&tmp);
    c->x = tmp.x;
    *reply = tmp.out.b;
    return 0;
}

/* A tiny RESP2 reader for call_capture's replies. */
typedef struct rreader {
    const char *p, *end;
} rreader;

/* Reads a "<type><number>\r\n" line. */
static int rr_head(rreader *r, char *type, long long *n) {
    const char *nl = memchr(r->p, '\r', (size_t)(r->end - r->p));
    if (!nl || nl + 1 >= r->end || r->p >= nl) return -1;
    *type = r->p[0];
    if (*type == '+' || *type == '-') {
        *n = nl - r->p - 1;
    } else if (!string2ll(r->p + 1, (size_t)(nl - r->p - 1), n)) {
        return -1;
    }
    r->p = nl + 2;
    return 0;
}

/* A bulk string (or nil: *len = -1). */
static int rr_bulk(rreader *r, const char **s, long long *len) {
    char t;
    if (rr_head(r, &t, len) != 0 || t != '$') return -1;
    if (*len < 0) return 0;
    if (*len > r->end - r->p - 2) return -1;
    *s = r->p;
    r->p += *len + 2;
    return 0;
}

/* ---------------- COPY ---------------- */

/* COPY source destination [DB destination-db] [REPLACE]. Both keys are in
 * the same shard whatever the db (shards go by key name), so the
 * dispatcher's locks cover the destination db too. */
void copyCommand(client *c) {
    int replace = 0, dst_db = c->db;
    db_val v, d;

    for (int j = 3; j < c->argc; j++) {
        if (arg_is(c, j, "replace")) {
            replace = 1;
        } else if (arg_is(c, j, "db") && j + 1 < c->argc) {
            long long id;
            if (arg_ll_range(c, j + 1, INT_MIN, INT_MAX, &id, NULL) != 0) return;
            if (id < 0 || id >= server.cfg.databases) {
                resp_add_error(&c->out, ERR_DBINDEX);
                return;
            }
            dst_db = (int)id;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (cluster_enabled() && dst_db != 0) {
        resp_add_error(&c->out, "ERR Copying to another database is not allowed in cluster mode");
        return;
    }
    if (dst_db == c->db && same_bytes(c->argv[1], c->argvlen[1], c->argv[2], c->argvlen[2])) {
        resp_add_error(&c->out, "ERR source and destination objects are the same");
        return;
    }
    if (!db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &v)) {
        resp_add_int(&c->out, 0);
        return;
    }
    if (db_peek(&c->x, dst_db, c->argv[2], c->argvlen[2], &d) && !replace) {
        resp_add_int(&c->out, 0);
        return;
    }
    /* One write replaces whatever the destination held (REPLACE). */
    int r = v.type == OBJ_STRING
                ? db_set(&c->x, dst_db, c->argv[2], c->argvlen[2], v.ptr, v.len, v.expire_ms)
                : db_set_copy(&c->x, dst_db, c->argv[2], c->argvlen[2], v.obj, v.expire_ms);
    if (r == DB_OOM) {
        reply_oom(c);
        return;
    }
    notify_event(NOTIFY_GENERIC, "copy_to", c->argv[2], c->argvlen[2], dst_db);
    resp_add_int(&c->out, 1);
}

/* ---------------- OBJECT ---------------- */

static const char *const object_help[] = {
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
    NULL,
};

/* Redis's encodings for a string value: "int" for a number that fits a
 * long, "embstr" up to 44 bytes, "raw" beyond; "raw" too for a value edited
 * in place (APPEND, SETRANGE, SETBIT...: string_edited). */
static const char *string_encoding(const char *p, size_t len) {
    long long n;
    if (len <= 20 && string2ll(p, len, &n)) return "int";
    return len <= 44 ? "embstr" : "raw";
}

static int is_shared_int(const db_val *v) {
    long long n;
    return v->type == OBJ_STRING && v->len <= 20 && string2ll(v->ptr, v->len, &n) && n >= 0 &&
           n < 10000;
}

void objectCommand(client *c) {
    static const char *const subs[] = {"encoding", "freq", "idletime", "refcount"};
    db_val v;
    int sub = -1;

    if (arg_is(c, 1, "help")) {
        if (c->argc != 2) reply_sub_arity(c, "object");
        else reply_help(c, object_help);
        return;
    }
    for (int k = 0; k < 4; k++)
        if (arg_is(c, 1, subs[k])) sub = k;
    if (sub < 0) {
        reply_unknown_sub(c, "OBJECT");
        return;
    }
    if (c->argc != 3) {
        reply_sub_arity(c, "object");
        return;
    }
    /* No subcommand counts as an access or raises "keymiss" (Redis looks
     * the key up with NOTOUCH | NONOTIFY for all of them). */
    int found = db_peek(&c->x, c->db, c->argv[2], c->argvlen[2], &v);
    if (!found) {
        resp_add_null(&c->out);
        return;
    }
    int lfu = server.cfg.maxmemory_policy == MAXMEMORY_ALLKEYS_LFU ||
              server.cfg.maxmemory_policy == MAXMEMORY_VOLATILE_LFU;
    int sid;
    uint64_t hash;
    db_key_clock(&c->x, c->db, c->argv[2], c->argvlen[2], &sid, &hash);
    switch (sub) {
    case 0: {
        const char *enc = "unknown";
        if (v.type == OBJ_STRING) {
            enc = string_edited(c, 2) ? "raw" : string_encoding(v.ptr, v.len);
        } else {
            const obj_class *k = obj_class_of(v.type);
            if (k && k->encoding) enc = k->encoding(v.obj->data);
        }
        resp_add_bulkstr(&c->out, enc);
        break;
    }
    case 1:
        /* evict.c's access clocks keep both; Redis answers by the policy. */
        if (!lfu)
            resp_add_error(&c->out, "ERR An LFU maxmemory policy is not selected, access frequency "
                                    "not tracked. Please note that when switching between policies "
                                    "at runtime LRU and LFU data will take some time to adjust.");
        else
            resp_add_int(&c->out, evict_lfu_freq(sid, hash));
        break;
    case 2:
        if (lfu)
            resp_add_error(&c->out, "ERR An LFU maxmemory policy is selected, idle time not "
                                    "tracked. Please note that when switching between policies at "
                                    "runtime LRU and LFU data will take some time to adjust.");
        else
            resp_add_int(&c->out, evict_idle_seconds(sid, hash));
        break;
    default:
        /* Redis shares the objects of small integers (refcount INT_MAX). */
        resp_add_int(&c->out, is_shared_int(&v) ? INT_MAX : 1);
        break;
    }
}

/* ---------------- MEMORY ---------------- */

static const char *const memory_help[] = {
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
    NULL,
};

/* What one key costs: its index item, plus a string's log entry (40-byte
 * header, key, value, 64-byte alignment) or a collection's DRAM object. */
#define INDEX_ITEM_BYTES 16
static long long key_memory(const db_val *v, size_t klen) {
    if (v->type == OBJ_STRING) {
        size_t e = 40 + klen + v->len;
        return (long long)(((e + 63) & ~(size_t)63) + INDEX_ITEM_BYTES);
    }
    const obj_class *k = obj_class_of(v->type);
    size_t m = sizeof(robj) + klen + INDEX_ITEM_BYTES;
    if (k && k->memory) m += k->memory(v->obj->data);
    return (long long)m;
}

static long long heap_bytes(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
#else
    return 0;
#endif
}

static void memory_usage(client *c) {
    db_val v;
    for (int j = 3; j < c->argc; j++) {
        if (arg_is(c, j, "samples") && j + 1 < c->argc) {
            long long samples;
            if (arg_ll(c, j + 1, &samples) != 0) return;
            if (samples < 0) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return;
            }
            j++;   /* every element is counted exactly: samples change nothing */
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return;
        }
    }
    if (!db_peek(&c->x, c->db, c->argv[2], c->argvlen[2], &v)) {
        resp_add_null(&c->out);
        return;
    }
    resp_add_int(&c->out, key_memory(&v, c->argvlen[2]));
}

/* A few of Redis's MEMORY STATS fields, from the allocator and the keyspace. */
static void memory_stats(client *c) {
    long long used = heap_bytes(), keys = 0;
    for (int db = 0; db < server.cfg.databases; db++) keys += db_size(db);
    resp_add_map(&c->out, 6);
    resp_add_bulkstr(&c->out, "peak.allocated");
    resp_add_int(&c->out, used);
    resp_add_bulkstr(&c->out, "total.allocated");
    resp_add_int(&c->out, used);
    resp_add_bulkstr(&c->out, "startup.allocated");
    resp_add_int(&c->out, 0);
    resp_add_bulkstr(&c->out, "keys.count");
    resp_add_int(&c->out, keys);
    resp_add_bulkstr(&c->out, "keys.bytes-per-key");
    resp_add_int(&c->out, keys ? used / keys : 0);
    resp_add_bulkstr(&c->out, "dataset.bytes");
    resp_add_int(&c->out, used);
}

void memoryCommand(client *c) {
    if (arg_is(c, 1, "help") && c->argc == 2) {
        reply_help(c, memory_help);
    } else if (arg_is(c, 1, "usage") && c->argc >= 3) {
        memory_usage(c);
    } else if (arg_is(c, 1, "stats") && c->argc == 2) {
        memory_stats(c);
    } else if (arg_is(c, 1, "doctor") && c->argc == 2) {
        static const char doctor[] = "Hi Sam, I can't find any memory issue in your instance. "
                                     "I can only account for what occurs on this base.";
        resp_add_verbatim(&c->out, doctor, sizeof(doctor) - 1);
    } else if (arg_is(c, 1, "malloc-stats") && c->argc == 2) {
        static const char stats[] = "Stats not supported for the current allocator";
        resp_add_verbatim(&c->out, stats, sizeof(stats) - 1);
    } else if (arg_is(c, 1, "purge") && c->argc == 2) {
        malloc_trim(0);
        resp_add_ok(&c->out);
    } else if (arg_is(c, 1, "help") || arg_is(c, 1, "usage") || arg_is(c, 1, "stats") ||
               arg_is(c, 1, "doctor") || arg_is(c, 1, "malloc-stats") || arg_is(c, 1, "purge")) {
        reply_sub_arity(c, "memory");
    } else {
        reply_unknown_sub(c, "MEMORY");
    }
}

/* ---------------- SLOWLOG ----------------
 *
 * One global log (newest first) guarded by a mutex; workers add to it from
 * client_call (networking.c) after a command ran longer than
 * slowlog-log-slower-than microseconds. */

#define SLOWLOG_MAX_ARGC 32
#define SLOWLOG_MAX_STRING 128

typedef struct slowlog_entry {
    struct slowlog_entry *next;     /* older */
    long long id, time, duration;
    int argc;
    char **argv;
    size_t *argvlen;
    char *peer, *name;
} slowlog_entry;

struct slowlog_list {
    pthread_mutex_t mu;
    slowlog_entry *head, *tail;     /* newest, oldest (singly linked newest -> oldest) */
    long long len, next_id;
};
/* This file's state, one per server (server.h). */
struct slowlog_state {
    struct slowlog_list slowlog;
};

void slowlog_state_new(void) {
    struct slowlog_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->slowlog.mu, NULL);
    server.edge_state->slowlog = st;
}

static void slowlog_entry_free(slowlog_entry *e);

void slowlog_state_free(void) {
    struct slowlog_state *st = server.edge_state->slowlog;
    for (slowlog_entry *e = st->slowlog.head, *next; e; e = next) {
        next = e->next;
        slowlog_entry_free(e);
    }
    pthread_mutex_destroy(&st->slowlog.mu);
    free(st);
}

#define slowlog (server.edge_state->slowlog->slowlog)

static void slowlog_entry_free(slowlog_entry *e) {
    for (int i = 0; i < e->argc; i++) free(e->argv[i]);
    free(e->argv);
    free(e->argvlen);
    free(e->peer);
    free(e->name);
    free(e);
}

static char *memdup0(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Drop the oldest entries beyond max (lock held). The list is singly linked
 * newest -> oldest, so the cut walks from the head. */
static void slowlog_trim(long long max) {
    if (slowlog.len <= max) return;
    slowlog_entry *keep = NULL, *e = slowlog.head;
    for (long long i = 0; i < max && e; i++) {
        keep = e;
        e = e->next;
    }
    if (keep) keep->next = NULL;
    else slowlog.head = NULL;
    slowlog.tail = keep;
    while (e) {
        slowlog_entry *n = e->next;
        slowlog_entry_free(e);
        slowlog.len--;
        e = n;
    }
}

static slowlog_entry *slowlog_entry_new(client *c, long long duration) {
    slowlog_entry *e = calloc(1, sizeof(*e));
    if (!e) abort();
    int argc = c->argc > SLOWLOG_MAX_ARGC ? SLOWLOG_MAX_ARGC : c->argc;
    /* AUTH and HELLO carry passwords: keep only the command name. */
    int redact = c->argc > 0 && (strcaseeqlen(c->argv[0], c->argvlen[0], "auth") ||
                                 strcaseeqlen(c->argv[0], c->argvlen[0], "hello"));
    e->argc = argc;
    e->argv = malloc(sizeof(char *) * (size_t)(argc ? argc : 1));
    e->argvlen = malloc(sizeof(size_t) * (size_t)(argc ? argc : 1));
    if (!e->argv || !e->argvlen) abort();
    for (int j = 0; j < argc; j++) {
        char buf[160];
        if (argc != c->argc && j == argc - 1) {
            int n = snprintf(buf, sizeof(buf), "... (%d more arguments)", c->argc - argc + 1);
            e->argv[j] = memdup0(buf, (size_t)n);
            e->argvlen[j] = (size_t)n;
        } else if (redact && j > 0) {
            e->argv[j] = memdup0("(redacted)", 10);
            e->argvlen[j] = 10;
        } else if (c->argvlen[j] > SLOWLOG_MAX_STRING) {
            int n = snprintf(buf, sizeof(buf), "... (%zu more bytes)",
                             c->argvlen[j] - SLOWLOG_MAX_STRING);
            char *s = malloc(SLOWLOG_MAX_STRING + (size_t)n + 1);
            if (!s) abort();
            memcpy(s, c->argv[j], SLOWLOG_MAX_STRING);
            memcpy(s + SLOWLOG_MAX_STRING, buf, (size_t)n + 1);
            e->argv[j] = s;
            e->argvlen[j] = SLOWLOG_MAX_STRING + (size_t)n;
        } else {
            e->argv[j] = memdup0(c->argv[j], c->argvlen[j]);
            e->argvlen[j] = c->argvlen[j];
        }
    }
    e->time = (long long)time(NULL);
    e->duration = duration;
    e->peer = memdup0(c->addr, strlen(c->addr));
    e->name = c->name ? memdup0(c->name, strlen(c->name)) : memdup0("", 0);
    return e;
}

void slowlog_maybe_add(client *c, long long duration_us) {
    long long slower = server.cfg.slowlog_log_slower_than;
    long long max = server.cfg.slowlog_max_len;
    if (slower < 0 || max <= 0 || duration_us < slower || c->argc <= 0) return;
    slowlog_entry *e = slowlog_entry_new(c, duration_us);
    pthread_mutex_lock(&slowlog.mu);
    e->id = slowlog.next_id++;
    e->next = slowlog.head;
    slowlog.head = e;
    if (!slowlog.tail) slowlog.tail = e;
    slowlog.len++;
    slowlog_trim(max);
    pthread_mutex_unlock(&slowlog.mu);
}

static const char *const slowlog_help[] = {
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
    NULL,
};

void slowlogCommand(client *c) {
    if (arg_is(c, 1, "help") && c->argc == 2) {
        reply_help(c, slowlog_help);
    } else if (arg_is(c, 1, "reset") && c->argc == 2) {
        pthread_mutex_lock(&slowlog.mu);
        slowlog_trim(0);
        pthread_mutex_unlock(&slowlog.mu);
        resp_add_ok(&c->out);
    } else if (arg_is(c, 1, "len") && c->argc == 2) {
        pthread_mutex_lock(&slowlog.mu);
        long long n = slowlog.len;
        pthread_mutex_unlock(&slowlog.mu);
        resp_add_int(&c->out, n);
    } else if (arg_is(c, 1, "get") && (c->argc == 2 || c->argc == 3)) {
        long long count = 10;
        if (c->argc == 3 &&
            arg_ll_range(c, 2, -1, LONG_MAX, &count,
                         "ERR count should be greater than or equal to -1") != 0)
            return;
        pthread_mutex_lock(&slowlog.mu);
        if (count < 0 || count > slowlog.len) count = slowlog.len;
        resp_add_array(&c->out, count);
        slowlog_entry *e = slowlog.head;
        for (long long i = 0; i < count && e; i++, e = e->next) {
            resp_add_array(&c->out, 6);
            resp_add_int(&c->out, e->id);
            resp_add_int(&c->out, e->time);
            resp_add_int(&c->out, e->duration);
            resp_add_array(&c->out, e->argc);
            for (int j = 0; j < e->argc; j++) resp_add_bulk(&c->out, e->argv[j], e->argvlen[j]);
            resp_add_bulkstr(&c->out, e->peer);
            resp_add_bulkstr(&c->out, e->name);
        }
        pthread_mutex_unlock(&slowlog.mu);
    } else if (arg_is(c, 1, "help") || arg_is(c, 1, "reset") || arg_is(c, 1, "len") ||
               arg_is(c, 1, "get")) {
        reply_sub_arity(c, "slowlog");
    } else {
        reply_unknown_sub(c, "SLOWLOG");
    }
}

/* ---------------- SORT, SORT_RO ---------------- */

typedef struct sort_item {
    size_t off, len;       /* the element, in the vector's arena */
    double score;          /* numeric sort key */
    long long cmp_off;     /* ALPHA BY value in the arena, -1 = none */
    size_t cmp_len;
} sort_item;

typedef struct sort_vec {
    sort_item *it;
    long long n, cap;
    rbuf arena;
} sort_vec;

static void vec_push(sort_vec *v, const char *p, size_t len) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 16;
        v->it = realloc(v->it, sizeof(sort_item) * (size_t)v->cap);
        if (!v->it) abort();
    }
    sort_item *e = &v->it[v->n++];
    e->off = v->arena.len;
    e->len = len;
    e->score = 0;
    e->cmp_off = -1;
    e->cmp_len = 0;
    rbuf_append(&v->arena, p, len);
}

static const char *vec_str(const sort_vec *v, size_t off) { return v->arena.buf + off; }

/* Byte-wise comparison, shorter first on a common prefix (Redis's
 * compareStringObjects; ALPHA is byte order here, i.e. the C locale). */
static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen) {
    int r = memcmp(a, b, alen < blen ? alen : blen);
    if (r) return r;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

typedef struct sort_opts {
    int desc, alpha, bypattern;
    const sort_vec *v;
} sort_opts;

static int sort_compare(const void *pa, const void *pb, void *arg) {
    const sort_item *a = pa, *b = pb;
    const sort_opts *o = arg;
    int cmp;
    if (!o->alpha) {
        if (a->score > b->score) cmp = 1;
        else if (a->score < b->score) cmp = -1;
        else cmp = cmp_bytes(vec_str(o->v, a->off), a->len, vec_str(o->v, b->off), b->len);
    } else if (o->bypattern) {
        if (a->cmp_off < 0 || b->cmp_off < 0)
            cmp = a->cmp_off < 0 && b->cmp_off < 0 ? 0 : a->cmp_off < 0 ? -1 : 1;
        else
            cmp = cmp_bytes(vec_str(o->v, (size_t)a->cmp_off), a->cmp_len,
                            vec_str(o->v, (size_t)b->cmp_off), b->cmp_len);
    } else {
        cmp = cmp_bytes(vec_str(o->v, a->off), a->len, vec_str(o->v, b->off), b->len);
    }
    return o->desc ? -cmp : cmp;
}

/* The key a BY/GET pattern forms for element elem, Redis's way: "#" is the
 * element itself (returns 2); the first '*' is replaced by the element; a
 * "->field" after the '*' names a hash field. No '*' means no key
 * (returns 0). Returns 1 with the key in *key and the field (if any). */
static int pattern_key(const char *pat, size_t plen, const char *elem, size_t elen, rbuf *key,
                       const char **field, size_t *flen) {
    if (plen == 1 && pat[0] == '#') return 2;
    const char *star = memchr(pat, '*', plen);
    if (!star) return 0;
    const char *rest = star + 1, *end = pat + plen;
    const char *arrow = memmem(rest, (size_t)(end - rest), "->", 2);
    *field = NULL;
    *flen = 0;
    if (arrow && arrow + 2 < end) {
        *field = arrow + 2;
        *flen = (size_t)(end - arrow - 2);
        end = arrow;
    }
    key->len = 0;
    rbuf_append(key, pat, (size_t)(star - pat));
    rbuf_append(key, elem, elen);
    rbuf_append(key, rest, (size_t)(end - rest));
    return 1;
}

/* The value a pattern names for an element, appended to out. 1 found, 0 not
 * (missing key, wrong type, missing field, no '*'). */
static int pattern_lookup(client *c, const char *pat, size_t plen, const char *elem, size_t elen,
                          rbuf *out) {
    rbuf key;
    const char *field;
    size_t flen;
    db_val v;
    int found = 0;

    rbuf_init(&key);
    int k = pattern_key(pat, plen, elem, elen, &key, &field, &flen);
    if (k == 2) {
        rbuf_append(out, elem, elen);
        found = 1;
    } else if (k == 1 && db_lookup(&c->x, c->db, key.buf ? key.buf : "", key.len, &v)) {
        if (!field && v.type == OBJ_STRING) {
            rbuf_append(out, v.ptr, v.len);
            found = 1;
        } else if (field && v.type == OBJ_HASH) {
            const char *av[3] = {"hget", key.buf, field};
            size_t al[3] = {4, key.len, flen};
            rbuf rep;
            if (call_capture(c, "hget", 3, av, al, &rep) == 0) {
                rreader r = {rep.buf, rep.buf + rep.len};
                const char *s;
                long long n;
                if (rep.len && rr_bulk(&r, &s, &n) == 0 && n >= 0) {
                    rbuf_append(out, s, (size_t)n);
                    found = 1;
                }
                rbuf_free(&rep);
            }
        }
    }
    rbuf_free(&key);
    return found;
}

/* Load the elements of a list, set or zset in its own order (list order,
 * set iteration order, zset by score). -1 (error replied) on failure. */
static int sort_load(client *c, int type, sort_vec *v) {
    const char *av[4] = {NULL, c->argv[1], "0", "-1"};
    size_t al[4] = {0, c->argvlen[1], 1, 2};
    const char *name = type == OBJ_LIST ? "lrange" : type == OBJ_SET ? "smembers" : "zrange";
    int argc = type == OBJ_SET ? 2 : 4;
    rbuf rep;
    av[0] = name;
    al[0] = strlen(name);
    if (call_capture(c, name, argc, av, al, &rep) != 0) {
        resp_add_errorf(&c->out, "ERR SORT cannot read a %s here (%s is not available)",
                        type == OBJ_LIST ? "list" : type == OBJ_SET ? "set" : "zset", name);
        return -1;
    }
    rreader r = {rep.buf, rep.buf + rep.len};
    char t;
    long long n;
    int ok = rep.len > 0 && rr_head(&r, &t, &n) == 0 && t == '*';
    for (long long i = 0; ok && i < n; i++) {
        const char *s;
        long long len;
        ok = rr_bulk(&r, &s, &len) == 0 && len >= 0;
        if (ok) vec_push(v, s, (size_t)len);
    }
    if (!ok) {
        const char *cr = rep.len ? memchr(rep.buf, '\r', rep.len) : NULL;
        if (cr && rep.buf[0] == '-') {
            /* the type command's own error, without its CRLF */
            char *msg = memdup0(rep.buf + 1, (size_t)(cr - rep.buf - 1));
            resp_add_error(&c->out, msg);
            free(msg);
        } else {
            resp_add_error(&c->out, "ERR SORT could not read the collection");
        }
    }
    rbuf_free(&rep);
    return ok ? 0 : -1;
}

/* The shard locks SORT takes beyond the dispatcher's (the sorted key's
 * shard, "base"): those of the keys its BY/GET patterns form and of the
 * STORE destination. Which keys those are depends on the elements, so they
 * are only known once the sorted key was read under its lock.
 *
 * Shard locks go in ascending id order (shard.h). A SORT called from the
 * dispatcher (no batch open) holds exactly base, so:
 *  - missing shards all above every lock held: lock them in order;
 *  - otherwise try-lock them; if one is busy, release everything, base too,
 *    lock the whole set in order and start SORT over (the sorted key may
 *    have changed meanwhile). The set only grows, so this ends.
 * Inside a batch (EXEC runs its commands in one) the thread may hold other
 * shards too, in an order SORT cannot know: shards the transaction holds
 * are used as they are (shard_held_here), others are only try-locked, a
 * bounded number of times, after which SORT answers TRYAGAIN. */
typedef struct sort_locks {
    shard *base;
    unsigned char *held;  /* per shard: an extra lock SORT holds */
    uint16_t *ids;        /* the extra locks held, ascending */
    int n;
    uint16_t *miss;       /* wanted and not held this round */
    int nmiss;
} sort_locks;

static void locks_init(sort_locks *l, shard *base) {
    l->base = base;
    l->held = calloc((size_t)server.nshards, 1);
    l->ids = malloc(sizeof(uint16_t) * (size_t)server.nshards);
    l->miss = malloc(sizeof(uint16_t) * (size_t)server.nshards);
    if (!l->held || !l->ids || !l->miss) abort();
    l->n = l->nmiss = 0;
}

static void locks_want(sort_locks *l, const char *key, size_t klen) {
    shard *s = shard_of_key(key, klen);
    if (s == l->base || l->held[s->id]) return;   /* held, or wanted already */
    l->held[s->id] = 2;   /* wanted this round */
    l->miss[l->nmiss++] = s->id;
}

static int cmp_u16(const void *a, const void *b) {
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

static void locks_take(sort_locks *l, uint16_t id) {
    l->held[id] = 1;
    l->ids[l->n++] = id;
    qsort(l->ids, (size_t)l->n, sizeof(uint16_t), cmp_u16);
}

static void locks_release_all(sort_locks *l) {
    for (int i = l->n - 1; i >= 0; i--) {
        shard_unlock(&server.shards[l->ids[i]]);
        l->held[l->ids[i]] = 0;
    }
    l->n = 0;
}

/* Take the shards locks_want() listed. 0: all held, go on; 1: base was
 * released and retaken, read the sorted key again; -1: gave up. */
static int locks_get(sort_locks *l, int plain) {
    int nm = 0;
    for (int i = 0; i < l->nmiss; i++) {
        if (!plain && shard_held_by_me(&server.shards[l->miss[i]]))
            l->held[l->miss[i]] = 3;   /* the transaction's: never released here */
        else
            l->miss[nm++] = l->miss[i];
    }
    l->nmiss = 0;
    if (nm == 0) return 0;
    qsort(l->miss, (size_t)nm, sizeof(uint16_t), cmp_u16);
    int top = l->n ? l->ids[l->n - 1] : -1;
    if (top < l->base->id) top = l->base->id;
    if (plain && l->miss[0] > top) {
        for (int i = 0; i < nm; i++) {
            shard_lock(&server.shards[l->miss[i]]);
            locks_take(l, l->miss[i]);
        }
        return 0;
    }
    for (int round = 0; round < (plain ? 1 : 2000); round++) {
        int i;
        for (i = 0; i < nm; i++)
            if (shard_trylock(&server.shards[l->miss[i]]) != 0) break;
        if (i == nm) {
            for (i = 0; i < nm; i++) locks_take(l, l->miss[i]);
            return 0;
        }
        while (i > 0) shard_unlock(&server.shards[l->miss[--i]]);
        if (round < 100) sched_yield();
        else nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    if (!plain) {
        for (int i = 0; i < nm; i++) l->held[l->miss[i]] = 0;
        return -1;
    }
    /* Start over with everything locked in order. */
    uint16_t *all = malloc(sizeof(uint16_t) * (size_t)(l->n + nm + 1));
    if (!all) abort();
    int na = 0;
    for (int i = 0; i < l->n; i++) all[na++] = l->ids[i];
    for (int i = 0; i < nm; i++) all[na++] = l->miss[i];
    locks_release_all(l);
    shard_unlock(l->base);
    all[na++] = l->base->id;
    qsort(all, (size_t)na, sizeof(uint16_t), cmp_u16);
    for (int i = 0; i < na; i++) {
        shard_lock(&server.shards[all[i]]);
        if (all[i] != l->base->id) locks_take(l, all[i]);
    }
    free(all);
    return 1;
}

static void locks_free(sort_locks *l) {
    locks_release_all(l);
    free(l->held);
    free(l->ids);
    free(l->miss);
}


static void sort_generic(client *c, int readonly) {
    int desc = 0, alpha = 0, dontsort = 0, store_i = -1, by_i = -1;
    long long limit_start = 0, limit_count = -1;
    int *gets = NULL, ngets = 0;
    db_val sv;
    sort_vec v = {0};
    sort_locks locks = {0};
    int have_locks = 0;
    rbuf tmp;

    rbuf_init(&v.arena);
    rbuf_init(&tmp);
    gets = malloc(sizeof(int) * (size_t)c->argc);
    if (!gets) abort();
    for (int j = 2; j < c->argc; j++) {
        int left = c->argc - j - 1;
        if (arg_is(c, j, "asc")) {
            desc = 0;
        } else if (arg_is(c, j, "desc")) {
            desc = 1;
        } else if (arg_is(c, j, "alpha")) {
            alpha = 1;
        } else if (arg_is(c, j, "limit") && left >= 2) {
            if (arg_ll(c, j + 1, &limit_start) != 0 || arg_ll(c, j + 2, &limit_count) != 0)
                goto out;
            j += 2;
        } else if (!readonly && arg_is(c, j, "store") && left >= 1) {
            store_i = j + 1;
            j++;
        } else if (arg_is(c, j, "by") && left >= 1) {
            by_i = j + 1;
            dontsort = memchr(c->argv[j + 1], '*', c->argvlen[j + 1]) == NULL;
            j++;
        } else if (arg_is(c, j, "get") && left >= 1) {
            gets[ngets++] = j + 1;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto out;
        }
    }

    const int p_dontsort = dontsort, p_alpha = alpha, p_by_i = by_i;
    long long start, end;
    locks_init(&locks, shard_of_key(c->argv[1], c->argvlen[1]));
    have_locks = 1;
    for (;;) {
        v.n = 0;
        v.arena.len = 0;
        dontsort = p_dontsort;
        alpha = p_alpha;
        by_i = p_by_i;
        int found = db_lookup(&c->x, c->db, c->argv[1], c->argvlen[1], &sv);
        int type = found ? sv.type : OBJ_LIST;
        if (found && type != OBJ_LIST && type != OBJ_SET && type != OBJ_ZSET) {
            resp_add_error(&c->out, ERR_WRONGTYPE);
            goto out;
        }
        if (found && sort_load(c, type, &v) != 0) goto out;

        /* A set has no order of its own: sorted anyway (ALPHA) when stored,
         * so the stored list does not depend on hash order. */
        if (dontsort && type == OBJ_SET && store_i >= 0) {
            dontsort = 0;
            alpha = 1;
            by_i = -1;
        }
        /* Lists and zsets keep their order under BY nosort; DESC walks it
         * from the end. */
        if (dontsort && desc && type != OBJ_SET) {
            for (long long a = 0, b = v.n - 1; a < b; a++, b--) {
                sort_item t = v.it[a];
                v.it[a] = v.it[b];
                v.it[b] = t;
            }
        }

        long long n = v.n, count;
        start = limit_start < 0 ? 0 : limit_start > n ? n : limit_start;
        count = limit_count < -1 ? -1 : limit_count > n ? n : limit_count;
        end = count < 0 ? n - 1 : start + count - 1;
        if (start >= n) {
            start = n - 1;
            end = n - 2;
        }
        if (end >= n) end = n - 1;

        /* Every other key SORT will touch, locked before any is read. */
        for (long long j = 0; j < v.n; j++) {
            const char *e = vec_str(&v, v.it[j].off);
            size_t elen = v.it[j].len;
            const char *f;
            size_t fl;
            if (!dontsort && by_i >= 0 &&
                pattern_key(c->argv[by_i], c->argvlen[by_i], e, elen, &tmp, &f, &fl) == 1)
                locks_want(&locks, tmp.buf, tmp.len);
            for (int g = 0; g < ngets; g++)
                if (pattern_key(c->argv[gets[g]], c->argvlen[gets[g]], e, elen, &tmp, &f,
                                &fl) == 1)
                    locks_want(&locks, tmp.buf, tmp.len);
        }
        if (store_i >= 0) locks_want(&locks, c->argv[store_i], c->argvlen[store_i]);
        int r = locks_get(&locks, !c->x.batching);
        if (r == 0) break;
        if (r < 0) {
            resp_add_error(&c->out, "TRYAGAIN SORT could not lock the keys its patterns or "
                                    "STORE name; try again");
            goto out;
        }
    }

    int int_conversion_error = 0;
    if (!dontsort) {
        for (long long j = 0; j < v.n; j++) {
            sort_item *it = &v.it[j];
            const char *byp;
            size_t bylen;
            if (by_i >= 0) {
                tmp.len = 0;
                if (!pattern_lookup(c, c->argv[by_i], c->argvlen[by_i], vec_str(&v, it->off),
                                    it->len, &tmp))
                    continue;
                byp = tmp.buf ? tmp.buf : "";
                bylen = tmp.len;
            } else {
                byp = vec_str(&v, it->off);
                bylen = it->len;
            }
            if (alpha) {
                if (by_i >= 0) {
                    it->cmp_off = (long long)v.arena.len;
                    it->cmp_len = bylen;
                    rbuf_append(&v.arena, byp, bylen);
                }
            } else {
                /* strtod over the whole value, as Redis does */
                char *s = memdup0(byp, bylen), *eptr;
                errno = 0;
                it->score = strtod(s, &eptr);
                if (eptr[0] != '\0' || errno == ERANGE || isnan(it->score))
                    int_conversion_error = 1;
                free(s);
            }
        }
        sort_opts o = {desc, alpha, by_i >= 0, &v};
        if (v.n > 1) qsort_r(v.it, (size_t)v.n, sizeof(sort_item), sort_compare, &o);
    }

    long long outlen = (ngets ? ngets : 1) * (end - start + 1);
    if (int_conversion_error) {
        resp_add_error(&c->out, "ERR One or more scores can't be converted into double");
    } else if (store_i >= 0 && outlen && !command_lookup("rpush", 5)) {
        resp_add_error(&c->out, "ERR SORT STORE needs lists (RPUSH is not available)");
    } else if (store_i < 0) {
        resp_add_array(&c->out, outlen);
        for (long long j = start; j <= end; j++) {
            const char *e = vec_str(&v, v.it[j].off);
            size_t elen = v.it[j].len;
            if (!ngets) resp_add_bulk(&c->out, e, elen);
            for (int g = 0; g < ngets; g++) {
                tmp.len = 0;
                if (pattern_lookup(c, c->argv[gets[g]], c->argvlen[gets[g]], e, elen, &tmp))
                    resp_add_bulk(&c->out, tmp.buf ? tmp.buf : "", tmp.len);
                else
                    resp_add_null(&c->out);
            }
        }
    } else {
        /* The result replaces the destination as a list: one batch (a
         * deletion and one RPUSH of every element), so a crash leaves the
         * old value or the whole new list. An empty result deletes it. */
        const char *dst = c->argv[store_i];
        size_t dstlen = c->argvlen[store_i];
        long long argc = 2 + outlen;
        const char **av = malloc(sizeof(char *) * (size_t)argc);
        size_t *al = malloc(sizeof(size_t) * (size_t)argc);
        rbuf vals;
        size_t *offs = malloc(sizeof(size_t) * (size_t)(outlen ? outlen : 1));
        if (!av || !al || !offs) abort();
        rbuf_init(&vals);
        long long k = 0;
        for (long long j = start; j <= end; j++) {
            const char *e = vec_str(&v, v.it[j].off);
            size_t elen = v.it[j].len;
            if (!ngets) {
                offs[k] = vals.len;
                al[2 + k++] = elen;
                rbuf_append(&vals, e, elen);
            }
            for (int g = 0; g < ngets; g++) {
                offs[k] = vals.len;
                tmp.len = 0;
                if (!pattern_lookup(c, c->argv[gets[g]], c->argvlen[gets[g]], e, elen, &tmp))
                    tmp.len = 0;   /* a missing value is stored as "" */
                al[2 + k++] = tmp.len;
                if (tmp.len) rbuf_append(&vals, tmp.buf, tmp.len);
            }
        }
        for (long long i = 0; i < k; i++) av[2 + i] = vals.buf ? vals.buf + offs[i] : "";
        av[0] = "rpush";
        al[0] = 5;
        av[1] = dst;
        al[1] = dstlen;
        db_batch_begin(&c->x);
        int existed = db_del(&c->x, c->db, dst, dstlen) == 1;  /* queued: cannot fail before the end */
        if (outlen) {
            rbuf rep;
            notify_mute(1);   /* the store is one "sortstore", not an "rpush" */
            if (call_capture(c, "rpush", (int)argc, av, al, &rep) == 0) rbuf_free(&rep);
            notify_mute(0);
        }
        if (db_batch_end(&c->x) == DB_OOM) {
            reply_oom(c);
        } else {
            if (outlen) notify_key(c, NOTIFY_LIST, "sortstore", store_i);
            else if (existed) notify_key(c, NOTIFY_GENERIC, "del", store_i);
            resp_add_int(&c->out, outlen);
        }
        rbuf_free(&vals);
        free(offs);
        free(av);
        free(al);
    }

out:
    if (have_locks) locks_free(&locks);
    free(gets);
    free(v.it);
    rbuf_free(&v.arena);
    rbuf_free(&tmp);
}

void sortCommand(client *c) { sort_generic(c, 0); }
void sortroCommand(client *c) { sort_generic(c, 1); }
