/* t_script.c -- Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT.
 *
 * One Lua 5.1 interpreter (Debian's liblua5.1) for the whole server, as in
 * Redis, guarded by run_lock. Scripts are kept compiled in a registry table
 * keyed by their SHA1; SCRIPT FLUSH throws the interpreter away.
 *
 * Atomicity reuses EXEC's mechanism (multi.c): a command whose keys cannot
 * be known up front locks every shard, in ascending order, and runs inside
 * ONE db batch. A script may touch any key (Redis allows undeclared keys
 * outside cluster mode), so EVAL takes every shard lock (skipping those its
 * thread holds already: EVAL inside EXEC), then run_lock; nothing else
 * takes shards after run_lock, so the order cannot deadlock. redis.call runs
 * the command's proc directly on the calling client with argv swapped and a
 * private reply buffer that is then converted to Lua values. Every write of
 * the script joins the batch (batches nest), so the script's effects are one
 * group entry in the log, all-or-nothing on recovery, and the reply is gated
 * on its durability like any reply (the client's db_ctx collects the deps).
 * As in Redis, an error in the middle does not undo earlier writes: the
 * batch is still applied.
 *
 * Busy scripts. Other workers keep running while a script holds every
 * shard; script_gate (called by the dispatcher before it locks shards) makes
 * their commands wait for the script without blocking on its locks, and
 * once the script has run longer than busy-reply-threshold answers -BUSY,
 * except for SCRIPT KILL, SHUTDOWN and the connection commands Redis allows.
 * A count hook in the interpreter sees SCRIPT KILL (refused with UNKILLABLE
 * once the script wrote) and shutdown. A client served by the script's own
 * worker waits for the script like every client of a busy Redis (it cannot
 * send SCRIPT KILL meanwhile; a client on another worker can). A command
 * that checked the gate just before a script started waits for the script
 * in its shard lock (documented in DECISIONS.md).
 *
 * Conversions follow Redis 7.0: a RESP reply becomes a Lua value (integer:
 * number, bulk: string, nil bulk/array: false, status: {ok=}, error: {err=},
 * RESP3 after redis.setresp(3): map, set, double, null, boolean...), and the
 * script's return value becomes a reply (numbers truncated to integers,
 * false: nil, tables with err/ok/double/map/set fields, arrays stopping at
 * the first nil). Error texts are Redis 7.0's. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lua5.1/lua.h>
#include <lua5.1/lauxlib.h>
#include <lua5.1/lualib.h>
#include <lua5.1/lua-cjson.h>
#include <lua5.1/lua-bitop.h>
#include <openssl/evp.h>
#include "script.h"
#include "networking.h"
#include "t_cluster.h"
#include "cluster.h"
#include "commands.h"
#include "server.h"
#include "shard.h"
#include "util.h"
#include "worker.h"
#include "edge_state.h"

#define ERR_BUSY "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
#define ERR_BUSY_FN "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
#define ERR_NOSCRIPT "NOSCRIPT No matching script. Please use EVAL."
#define ERR_KILLED "ERR Script killed by user with SCRIPT KILL..."
#define HOOK_EVERY 100000      /* interpreter instructions between busy checks */
#define MAX_NESTING 1000       /* reply conversion depth (self-referencing tables) */

/* script_struct.c and script_msgpack.c: Redis's struct and cmsgpack. */
int luaopen_struct(lua_State *L);
int luaopen_cmsgpack(lua_State *L);

/* The script running now (under run_lock, except the atomics, which other
 * workers read: script_gate, SCRIPT KILL). */
struct script_run {
    _Atomic int64_t since_us;   /* monotonic start, 0 = none running */
    _Atomic int kill;           /* SCRIPT KILL asked for it */
    _Atomic int wrote;          /* it called a write command: unkillable */
    _Atomic int function;       /* an FCALL (FUNCTION KILL, not SCRIPT KILL) */
    client *c;
    int ro;                     /* EVAL_RO, no-writes: writes refused */
    int allow_oom;              /* allow-oom, or OOM already checked (declared flags) */
    int pre_oom;                /* over maxmemory before the script started */
    int resp;                   /* redis.setresp */
    int slow_logged;
    int aborted;                /* cut short by shutdown: effects dropped */
};

/* This file's state, one per server (server.h). */
struct script_state {
    pthread_mutex_t run_lock;
    lua_State *lua;   /* under run_lock; NULL until first use */
    int scripts_ref;
    int flags_ref;
    int errh_ref;
    struct script_run run;
};

void script_state_new(void) {
    struct script_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->run_lock, NULL);
    server.edge_state->script = st;
}

void script_state_free(void) {
    struct script_state *st = server.edge_state->script;
    if (st->lua) lua_close(st->lua);
    pthread_mutex_destroy(&st->run_lock);
    free(st);
}

#define run_lock (server.edge_state->script->run_lock)
#define lua (server.edge_state->script->lua)   /* under run_lock; NULL until first use */
#define scripts_ref (server.edge_state->script->scripts_ref)
#define flags_ref (server.edge_state->script->flags_ref)
#define errh_ref (server.edge_state->script->errh_ref)

#define run (server.edge_state->script->run)

/* ---------------- deterministic PRNG (math.random) ----------------
 * Redis replaces math.random with a 48-bit linear congruential generator
 * (the lrand48 recurrence) whose state starts at the lrand48 default and is
 * never reseeded (Redis 7.0 no longer resets it per script): every server
 * produces the same sequence. */
/* This file's state, one per server (server.h). */
struct rand48_state_st {
    uint64_t rand48_state;
};

void rand48_state_st_new(void) {
    struct rand48_state_st *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->rand48_state = 0x1234ABCD330EULL;
    server.edge_state->rand48 = st;
}

void rand48_state_st_free(void) { free(server.edge_state->rand48); }

#define rand48_state (server.edge_state->rand48->rand48_state)

static void rand48_seed(int32_t seed) { rand48_state = ((uint64_t)(uint32_t)seed << 16) | 0x330E; }

static int32_t rand48_next(void) {
    rand48_state = (0x5DEECE66DULL * rand48_state + 0xB) & ((1ULL << 48) - 1);
    return (int32_t)(rand48_state >> 17);
}

static int lua_math_random(lua_State *L) {
    lua_Number r = (lua_Number)(rand48_next() % INT32_MAX) / (lua_Number)INT32_MAX;
    switch (lua_gettop(L)) {
    case 0:
        lua_pushnumber(L, r);
        break;
    case 1: {
        int u = luaL_checkint(L, 1);
        luaL_argcheck(L, 1 <= u, 1, "interval is empty");
        lua_pushnumber(L, floor(r * u) + 1);
        break;
    }
    case 2: {
        int l = luaL_checkint(L, 1), u = luaL_checkint(L, 2);
        luaL_argcheck(L, l <= u, 2, "interval is empty");
        lua_pushnumber(L, floor(r * (u - l + 1)) + l);
        break;
    }
    default:
        return luaL_error(L, "wrong number of arguments");
    }
    return 1;
}

static int lua_math_randomseed(lua_State *L) {
    rand48_seed((int32_t)luaL_checkint(L, 1));
    return 0;
}

/* ---------------- helpers ---------------- */

static void sha1hex(char out[41], const char *s, size_t len) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(s, len, md, &mdlen, EVP_sha1(), NULL);
    for (unsigned i = 0; i < 20; i++) sprintf(out + 2 * i, "%02x", md[i]);
    out[40] = '\0';
}

/* An error or status line must not contain CR or LF (Redis replaces them). */
static char *one_line(const char *s, size_t len) {
    char *t = malloc(len + 1);
    for (size_t i = 0; i < len; i++) t[i] = (s[i] == '\r' || s[i] == '\n') ? ' ' : s[i];
    t[len] = '\0';
    return t;
}

/* Push {field = s} (the form of error and status replies in Lua). */
static void push_field_table(lua_State *L, const char *field, const char *s, size_t len) {
    lua_newtable(L);
    lua_pushstring(L, field);
    lua_pushlstring(L, s, len);
    lua_rawset(L, -3);
}

/* Return {err = msg} (not raised: Redis's error_reply/status_reply). */
static int push_err_table(lua_State *L, const char *msg) {
    push_field_table(L, "err", msg, strlen(msg));
    return 1;
}

/* Raise {err = msg}: the message handler adds where it happened. */
static int raise_err(lua_State *L, const char *msg) {
    push_field_table(L, "err", msg, strlen(msg));
    return lua_error(L);
}

/* ---------------- RESP reply -> Lua ---------------- */

static const char *line_end(const char *p, const char *end) {
    const char *q = memchr(p, '\r', (size_t)(end - p));
    return q && q + 1 < end ? q : NULL;
}

static long long line_ll(const char *p, const char *e) {
    long long v = 0;
    string2ll(p, (size_t)(e - p), &v);
    return v;
}

/* Push the Lua value of the reply at p; returns the byte after it, or NULL
 * on a malformed reply (never from our own commands). */
static const char *push_reply(lua_State *L, const char *p, const char *end, int depth) {
    const char *e = line_end(p, end);
    if (!e || depth > MAX_NESTING || !lua_checkstack(L, 8)) return NULL;
    char t = *p++;
    const char *next = e + 2;
    switch (t) {
    case '+':
        push_field_table(L, "ok", p, (size_t)(e - p));
        return next;
    case '-':
        push_field_table(L, "err", p, (size_t)(e - p));
        return next;
    case ':':
        lua_pushnumber(L, (lua_Number)line_ll(p, e));
        return next;
    case ',': {
        char buf[64];
        size_t n = (size_t)(e - p) < sizeof(buf) - 1 ? (size_t)(e - p) : sizeof(buf) - 1;
        memcpy(buf, p, n);
        buf[n] = '\0';
        lua_newtable(L);
        lua_pushstring(L, "double");
        lua_pushnumber(L, strtod(buf, NULL));
        lua_rawset(L, -3);
        return next;
    }
    case '(':
        push_field_table(L, "big_number", p, (size_t)(e - p));
        return next;
    case '#':
        lua_pushboolean(L, *p == 't');
        return next;
    case '_':
        lua_pushnil(L);
        return next;
    case '$':
    case '=': {
        long long n = line_ll(p, e);
        if (n < 0) {
            lua_pushboolean(L, 0);
            return next;
        }
        if (next + n + 2 > end) return NULL;
        if (t == '$') {
            lua_pushlstring(L, next, (size_t)n);
        } else { /* verbatim: "txt:" + text */
            lua_newtable(L);
            lua_pushstring(L, "verbatim_string");
            lua_newtable(L);
            lua_pushstring(L, "format");
            lua_pushlstring(L, next, n >= 3 ? 3 : (size_t)n);
            lua_rawset(L, -3);
            lua_pushstring(L, "string");
            lua_pushlstring(L, next + (n >= 4 ? 4 : n), (size_t)(n >= 4 ? n - 4 : 0));
            lua_rawset(L, -3);
            lua_rawset(L, -3);
        }
        return next + n + 2;
    }
    case '*':
    case '>':
    case '~':
    case '%': {
        long long n = line_ll(p, e);
        if (n < 0) {
            lua_pushboolean(L, 0);
            return next;
        }
        lua_newtable(L);
        if (t == '~' || t == '%') { /* {set={...}} / {map={...}} */
            lua_pushstring(L, t == '~' ? "set" : "map");
            lua_newtable(L);
        }
        p = next;
        for (long long i = 0; i < n && p; i++) {
            if (t == '%') {
                if (!(p = push_reply(L, p, end, depth + 1))) break;
                if (!(p = push_reply(L, p, end, depth + 1))) break;
                lua_rawset(L, -3);
            } else if (t == '~') {
                if (!(p = push_reply(L, p, end, depth + 1))) break;
                lua_pushboolean(L, 1);
                lua_rawset(L, -3);
            } else {
                if (!(p = push_reply(L, p, end, depth + 1))) break;
                lua_rawseti(L, -2, (int)i + 1);
            }
        }
        if (t == '~' || t == '%') lua_rawset(L, -3);
        return p;
    }
    default:
        return NULL;
    }
}

/* ---------------- Lua -> RESP reply ---------------- */

/* t[field] when it has type `type` (left on the stack, returns 1), else
 * nothing pushed and 0. Raw access: no user code may run here. */
static int raw_field(lua_State *L, int idx, const char *field, int type) {
    lua_pushstring(L, field);
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
    if (lua_type(L, -1) == type) return 1;
    lua_pop(L, 1);
    return 0;
}

static void add_line(resp_out *o, int err, const char *s, size_t len) {
    char *t = one_line(s, len);
    if (err) resp_add_error(o, t);
    else resp_add_simple(o, t);
    free(t);
}

static void lua_to_reply(lua_State *L, resp_out *o, int depth);

/* Elements of a table in lua_next order (maps and sets). */
static long long table_count(lua_State *L) {
    long long n = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        n++;
        lua_pop(L, 1);
    }
    return n;
}

static void table_to_reply(lua_State *L, resp_out *o, int depth) {
    size_t len;
    if (raw_field(L, -1, "err", LUA_TSTRING)) {
        const char *s = lua_tolstring(L, -1, &len);
        add_line(o, 1, s, len);
        lua_pop(L, 1);
        return;
    }
    if (raw_field(L, -1, "ok", LUA_TSTRING)) {
        const char *s = lua_tolstring(L, -1, &len);
        add_line(o, 0, s, len);
        lua_pop(L, 1);
        return;
    }
    if (raw_field(L, -1, "double", LUA_TNUMBER)) {
        resp_add_double(o, lua_tonumber(L, -1));
        lua_pop(L, 1);
        return;
    }
    if (raw_field(L, -1, "big_number", LUA_TSTRING)) {
        const char *s = lua_tolstring(L, -1, &len);
        if (o->proto >= 3) {
            char *t = one_line(s, len);
            resp_add_raw(o, "(", 1);
            resp_add_raw(o, t, len);
            resp_add_raw(o, "\r\n", 2);
            free(t);
        } else {
            resp_add_bulk(o, s, len);
        }
        lua_pop(L, 1);
        return;
    }
    if (raw_field(L, -1, "map", LUA_TTABLE)) {
        resp_add_map(o, table_count(L));
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pushvalue(L, -2); /* the key, converted without changing it */
            lua_to_reply(L, o, depth + 1);
            lua_pop(L, 1);
            lua_to_reply(L, o, depth + 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        return;
    }
    if (raw_field(L, -1, "set", LUA_TTABLE)) {
        resp_add_set(o, table_count(L));
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            lua_pop(L, 1);
            lua_pushvalue(L, -1);
            lua_to_reply(L, o, depth + 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        return;
    }
    /* An array: elements 1, 2, ... up to the first nil. */
    long long n = 0;
    for (;; n++) {
        lua_rawgeti(L, -1, (int)n + 1);
        int nil = lua_isnil(L, -1);
        lua_pop(L, 1);
        if (nil) break;
    }
    resp_add_array(o, n);
    for (long long i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (int)i + 1);
        lua_to_reply(L, o, depth + 1);
        lua_pop(L, 1);
    }
}

/* Append the reply for the value on top of the stack (left there). */
static void lua_to_reply(lua_State *L, resp_out *o, int depth) {
    if (depth > MAX_NESTING || !lua_checkstack(L, 8)) {
        resp_add_error(o, "ERR reached lua stack limit");
        return;
    }
    size_t len;
    switch (lua_type(L, -1)) {
    case LUA_TSTRING: {
        const char *s = lua_tolstring(L, -1, &len);
        resp_add_bulk(o, s, len);
        break;
    }
    case LUA_TBOOLEAN:
        if (run.resp == 2) {
            if (lua_toboolean(L, -1)) resp_add_int(o, 1);
            else resp_add_null(o);
        } else {
            resp_add_bool(o, lua_toboolean(L, -1));
        }
        break;
    case LUA_TNUMBER:
        resp_add_int(o, (long long)lua_tonumber(L, -1));
        break;
    case LUA_TTABLE:
        table_to_reply(L, o, depth);
        break;
    default:
        resp_add_null(o);
    }
}

/* ---------------- the redis table ---------------- */

/* Is this command refused inside scripts? The table's NOSCRIPT flag, and
 * the commands Redis 7.0 marks noscript (blocking, connection, server). */
static int not_in_script(const struct rcommand *cmd) {
    static const char *const names[] = {
        "auth", "hello", "client", "shutdown", "config", "quit", "reset", "save", "bgsave",
        "bgrewriteaof", "wait", "waitaof", "debug", "latency", "module", "monitor", "role",
        "replicaof", "slaveof", "failover", "sync", "psync", "replconf", "blpop", "brpop",
        "brpoplpush", "blmove", "blmpop", "bzpopmin", "bzpopmax", "bzmpop", "fcall",
        "fcall_ro", "function", "ssubscribe", "sunsubscribe", NULL};
    if (cmd->flags & CMD_NOSCRIPT) return 1;
    for (int i = 0; names[i]; i++)
        if (strcmp(cmd->name, names[i]) == 0) return 1;
    return 0;
}

/* Run argv on the script's client into a private reply buffer. */
static void run_command(client *c, const struct rcommand *cmd, int argc, const char **argv,
                        size_t *argvlen, resp_out *reply) {
    const struct rcommand *scmd = c->cmd;
    int sargc = c->argc;
    const char **sargv = c->argv;
    size_t *sargvlen = c->argvlen;
    resp_out sout = c->out;
    resp_out_init(&c->out, run.resp);
    c->out.limit = sout.limit;
    c->cmd = cmd;
    c->argc = argc;
    c->argv = argv;
    c->argvlen = argvlen;
    c->x.hint_key = NULL;
    int64_t t0 = monotonic_us();
    if (cluster_redirect(c)) {
        /* cluster: a key of a slot this node is not primary of, or keys
         * of several slots (the routing error is replaced by Redis's) */
        c->out.b.len = 0;
        resp_add_error(&c->out, "ERR Script attempted to access a non local key in a cluster node");
    } else {
        ((struct rcommand *)cmd)->proc(c);
    }
    int64_t dt = monotonic_us() - t0;
    *reply = c->out;
    c->out = sout;
    c->cmd = scmd;
    c->argc = sargc;
    c->argv = sargv;
    c->argvlen = sargvlen;
    c->x.hint_key = NULL;
    int failed = reply->b.len > 0 && reply->b.buf[0] == '-';
    worker_count_command(c->w, command_row(cmd, argc, argv, argvlen), dt, failed);
}

/* redis.call raises the error, redis.pcall returns it. */
static int call_failed(lua_State *L, int raise, const char *err) {
    if (raise) return raise_err(L, err);
    push_field_table(L, "err", err, strlen(err));
    return 1;
}

/* redis.call (raise = 1) and redis.pcall (raise = 0). */
static int redis_call_generic(lua_State *L, int raise) {
    const char *err = NULL;
    int argc = lua_gettop(L);
    if (argc == 0) return call_failed(L, raise, "ERR Please specify at least one argument for this redis lib call");
    const char **argv = malloc(sizeof(char *) * (size_t)argc);
    size_t *argvlen = malloc(sizeof(size_t) * (size_t)argc);
    char (*nums)[40] = malloc(40 * (size_t)argc);
    for (int j = 0; j < argc && !err; j++) {
        int t = lua_type(L, j + 1);
        if (t == LUA_TNUMBER) {
            /* not lua_tolstring: Lua prints numbers with 14 digits */
            argvlen[j] = (size_t)d2string(nums[j], sizeof(nums[j]), (double)lua_tonumber(L, j + 1));
            argv[j] = nums[j];
        } else if (t == LUA_TSTRING) {
            argv[j] = lua_tolstring(L, j + 1, &argvlen[j]);
        } else {
            err = "ERR Lua redis lib command arguments must be strings or integers";
        }
    }
    const struct rcommand *cmd = err ? NULL : command_lookup(argv[0], argvlen[0]);
    if (err) {
    } else if (!cmd) {
        err = "ERR Unknown Redis command called from script";
    } else if ((cmd->arity > 0 && argc != cmd->arity) || argc < -cmd->arity) {
        err = "ERR Wrong number of args calling Redis command from script";
    } else if (not_in_script(cmd)) {
        err = "ERR This Redis command is not allowed from script";
    } else if ((cmd->flags & CMD_WRITE) && run.ro) {
        err = "ERR Write commands are not allowed from read-only scripts.";
    } else if ((cmd->flags & CMD_DENYOOM) && run.pre_oom && !run.allow_oom &&
               !atomic_load(&run.wrote)) {
        /* Redis's compatibility mode: a script over maxmemory may not start
         * growing memory; once it has written, it must go on (atomicity) */
        err = "OOM command not allowed when used memory > 'maxmemory'.";
    }
    resp_out reply;
    if (!err) {
        if (cmd->flags & CMD_WRITE) atomic_store(&run.wrote, 1);
        run_command(run.c, cmd, argc, argv, argvlen, &reply);
        if (reply.overflow) {
            err = "ERR reply of the command called from script is too large";
            rbuf_free(&reply.b);
        }
    }
    free(argv);
    free(argvlen);
    free(nums);
    if (err) return call_failed(L, raise, err);
    const char *end = reply.b.buf + reply.b.len;
    lua_settop(L, 0);
    const char *p = push_reply(L, reply.b.buf, end, 0);
    rbuf_free(&reply.b);
    if (!p || lua_gettop(L) != 1) {
        lua_settop(L, 0);
        return call_failed(L, raise, "ERR malformed reply from a command called from script");
    }
    if (raise && lua_istable(L, -1)) {
        lua_pushstring(L, "err");
        lua_rawget(L, -2);
        int is_err = lua_isstring(L, -1);
        lua_pop(L, 1);
        if (is_err) return lua_error(L);
    }
    return 1;
}

static int lua_redis_call(lua_State *L) { return redis_call_generic(L, 1); }
static int lua_redis_pcall(lua_State *L) { return redis_call_generic(L, 0); }

static int lua_redis_sha1hex(lua_State *L) {
    if (lua_gettop(L) != 1) return raise_err(L, "ERR wrong number of arguments");
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    char sha[41];
    sha1hex(sha, s ? s : "", s ? len : 0);
    lua_pushstring(L, sha);
    return 1;
}

/* redis.error_reply("msg"): {err="ERR msg"}; "-CODE msg" or "CODE msg"
 * keeps its own code, as Redis 7.0 does. */
static int lua_redis_error_reply(lua_State *L) {
    if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TSTRING)
        return push_err_table(L, "ERR wrong number or type of arguments");
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    if (s[0] == '-') {
        s++;
        len--;
    }
    if (memchr(s, ' ', len)) {
        push_field_table(L, "err", s, len);
    } else {
        lua_pushstring(L, "ERR ");
        lua_pushlstring(L, s, len);
        lua_concat(L, 2);
        size_t n;
        const char *t = lua_tolstring(L, -1, &n);
        push_field_table(L, "err", t, n);
    }
    return 1;
}

static int lua_redis_status_reply(lua_State *L) {
    if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TSTRING)
        return push_err_table(L, "ERR wrong number or type of arguments");
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    push_field_table(L, "ok", s, len);
    return 1;
}

static int lua_redis_log(lua_State *L) {
    int argc = lua_gettop(L);
    if (argc < 2) return raise_err(L, "ERR redis.log() requires two arguments or more.");
    if (!lua_isnumber(L, 1)) return raise_err(L, "ERR First argument must be a number (log level).");
    int level = (int)lua_tonumber(L, 1);
    if (level < LL_DEBUG || level > LL_WARNING) return raise_err(L, "ERR Invalid debug level.");
    rbuf msg;
    rbuf_init(&msg);
    for (int j = 2; j <= argc; j++) {
        size_t len;
        const char *s = lua_tolstring(L, j, &len);
        if (!s) continue;
        if (j > 2) rbuf_append(&msg, " ", 1);
        rbuf_append(&msg, s, len);
    }
    rbuf_append(&msg, "", 1);
    serverLog(level, "%s", msg.buf);
    rbuf_free(&msg);
    return 0;
}

static int lua_redis_setresp(lua_State *L) {
    if (lua_gettop(L) != 1) return raise_err(L, "ERR redis.setresp() requires one argument.");
    int resp = (int)lua_tonumber(L, 1);
    if (resp != 2 && resp != 3) return raise_err(L, "ERR RESP version must be 2 or 3.");
    run.resp = resp;
    return 0;
}

/* Scripts always replicate their effects in Redis 7: accepted, no effect. */
static int lua_redis_set_repl(lua_State *L) {
    if (lua_gettop(L) != 1) return raise_err(L, "ERR redis.set_repl() requires one argument.");
    int flags = (int)lua_tonumber(L, 1);
    if (flags & ~3) return raise_err(L, "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.");
    return 0;
}

static int lua_redis_true(lua_State *L) {
    lua_pushboolean(L, 1);
    return 1;
}

static int lua_redis_noop(lua_State *L) {
    (void)L;
    return 0;
}

/* ---------------- the sandbox ---------------- */

static int global_newindex(lua_State *L) {
    return luaL_error(L, "Attempt to modify a readonly table");
}

static int global_index(lua_State *L) {
    return luaL_error(L, "Script attempted to access nonexistent global variable '%s'",
                      lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static void open_lib(lua_State *L, const char *name, lua_CFunction fn) {
    lua_pushcfunction(L, fn);
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
    if (name[0] && lua_istable(L, -1)) lua_setglobal(L, name);
    else lua_pop(L, 1);
}

static void set_fn(lua_State *L, const char *name, lua_CFunction fn) {
    lua_pushstring(L, name);
    lua_pushcfunction(L, fn);
    lua_settable(L, -3);
}

static void set_num(lua_State *L, const char *name, int v) {
    lua_pushstring(L, name);
    lua_pushnumber(L, v);
    lua_settable(L, -3);
}

/* Called with the error object: a table {err=, source=, line=} naming the
 * script line that failed (that of the redis.call when a C function raised). */
static const char err_handler_src[] =
    "local dbg = debug\n"
    "return function(e)\n"
    "  local i = dbg.getinfo(2, 'nSl')\n"
    "  if i and i.what == 'C' then i = dbg.getinfo(3, 'nSl') end\n"
    "  if type(e) ~= 'table' then e = {err = 'ERR ' .. tostring(e)} end\n"
    "  if i then e['source'] = i.source; e['line'] = i.currentline end\n"
    "  return e\n"
    "end\n";

/* "7.0.15" -> 0x07000f */
static int version_num(const char *v) {
    int a = 0, b = 0, c = 0;
    sscanf(v, "%d.%d.%d", &a, &b, &c);
    return (a << 16) | (b << 8) | c;
}

/* Replace the global table `name` by a read-only view of it (an empty
 * table whose metatable reads through and refuses writes), as Redis 7.0
 * makes its libraries read-only. */
static void readonly_global(lua_State *L, const char *name) {
    lua_getglobal(L, name);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_newtable(L);           /* the view */
    lua_newtable(L);           /* its metatable */
    lua_pushvalue(L, -3);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, global_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_setglobal(L, name);
    lua_pop(L, 1);
}

static lua_State *lua_create(void) {
    lua_State *L = luaL_newstate();
    open_lib(L, "", luaopen_base);
    open_lib(L, LUA_TABLIBNAME, luaopen_table);
    open_lib(L, LUA_STRLIBNAME, luaopen_string);
    open_lib(L, LUA_MATHLIBNAME, luaopen_math);
    open_lib(L, LUA_DBLIBNAME, luaopen_debug);
    open_lib(L, "cjson", luaopen_cjson);
    open_lib(L, "bit", luaopen_bit);
    open_lib(L, "struct", luaopen_struct);
    open_lib(L, "cmsgpack", luaopen_cmsgpack);
    /* No file access, no environments or modules: Redis 7.0's sandbox. */
    static const char *const removed[] = {"loadfile", "dofile", "print", "setfenv", "getfenv",
                                          "module", "require", "newproxy", NULL};
    for (int i = 0; removed[i]; i++) {
        lua_pushnil(L);
        lua_setglobal(L, removed[i]);
    }
    lua_getglobal(L, "math");
    set_fn(L, "random", lua_math_random);
    set_fn(L, "randomseed", lua_math_randomseed);
    lua_pop(L, 1);

    lua_newtable(L);
    set_fn(L, "call", lua_redis_call);
    set_fn(L, "pcall", lua_redis_pcall);
    set_fn(L, "sha1hex", lua_redis_sha1hex);
    set_fn(L, "error_reply", lua_redis_error_reply);
    set_fn(L, "status_reply", lua_redis_status_reply);
    set_fn(L, "log", lua_redis_log);
    set_fn(L, "setresp", lua_redis_setresp);
    set_fn(L, "set_repl", lua_redis_set_repl);
    set_fn(L, "replicate_commands", lua_redis_true);
    set_fn(L, "breakpoint", lua_redis_noop);
    set_fn(L, "debug", lua_redis_noop);
    set_num(L, "LOG_DEBUG", LL_DEBUG);
    set_num(L, "LOG_VERBOSE", LL_VERBOSE);
    set_num(L, "LOG_NOTICE", LL_NOTICE);
    set_num(L, "LOG_WARNING", LL_WARNING);
    set_num(L, "REPL_NONE", 0);
    set_num(L, "REPL_AOF", 1);
    set_num(L, "REPL_SLAVE", 2);
    set_num(L, "REPL_REPLICA", 2);
    set_num(L, "REPL_ALL", 3);
    lua_pushstring(L, "REDIS_VERSION");
    lua_pushstring(L, ROWAN_REDIS_COMPAT_VERSION);
    lua_settable(L, -3);
    set_num(L, "REDIS_VERSION_NUM", version_num(ROWAN_REDIS_COMPAT_VERSION));
    lua_setglobal(L, "redis");

    if (luaL_loadbuffer(L, err_handler_src, sizeof(err_handler_src) - 1, "=err_handler") ||
        lua_pcall(L, 0, 1, 0)) {
        serverLog(LL_WARNING, "Lua: %s", lua_tostring(L, -1));
        abort();
    }
    errh_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* The debug library served the handler only. */
    lua_pushnil(L);
    lua_setglobal(L, "debug");
    static const char *const libs[] = {"redis", "string", "table", "math", "coroutine", "cjson",
                                       "bit", "struct", "cmsgpack", NULL};
    for (int i = 0; libs[i]; i++) readonly_global(L, libs[i]);
    lua_newtable(L);
    scripts_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    flags_ref = luaL_ref(L, LUA_REGISTRYINDEX);

    /* Globals are read-only from here on: writes and reads of unknown
     * names fail, as in Redis (KEYS/ARGV are set with rawset). */
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    lua_newtable(L);
    lua_pushcfunction(L, global_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, global_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
    return L;
}

static lua_State *lua_get(void) {
    if (!lua) lua = lua_create();
    return lua;
}

/* ---------------- the script cache (run_lock held) ---------------- */

/* Push the compiled script sha (1), or nothing (0). */
static int script_find(lua_State *L, const char *sha) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, scripts_ref);
    lua_getfield(L, -1, sha);
    lua_remove(L, -2);
    if (lua_isfunction(L, -1)) return 1;
    lua_pop(L, 1);
    return 0;
}

/* Redis 7's "#!lua [flags=f1,f2]" first line: *flags gets SCRIPT_FLAG_DECLARED
 * and the SCRIPT_FLAG_* of the flags, *skip the bytes up to
 * the newline (which stays, so line numbers are unchanged). -1 with Redis's
 * error in err. */
static int parse_shebang(const char *body, size_t len, int *flags, size_t *skip, char *err,
                         size_t errlen) {
    static const char *const known[] = {"no-writes", "allow-oom", "allow-stale", "no-cluster",
                                        "allow-cross-slot-keys", NULL};
    *flags = 0;
    *skip = 0;
    if (len < 2 || body[0] != '#' || body[1] != '!') return 0;
    *flags = SCRIPT_FLAG_DECLARED;
    const char *nl = memchr(body, '\n', len);
    if (!nl) {
        snprintf(err, errlen, "ERR Invalid script shebang");
        return -1;
    }
    *skip = (size_t)(nl - body);
    const char *p = body, *end = nl;
    for (int first = 1; p < end; first = 0) {
        while (p < end && *p == ' ') p++;
        const char *t = p;
        while (p < end && *p != ' ') p++;
        int tl = (int)(p - t);
        if (tl == 0) break;
        if (first) {
            if (tl != 5 || memcmp(t, "#!lua", 5) != 0) {
                snprintf(err, errlen, "ERR Unexpected engine in script shebang: %.*s", tl, t);
                return -1;
            }
        } else if (tl >= 6 && memcmp(t, "flags=", 6) == 0) {
            for (const char *f = t + 6; f < p;) {
                const char *fe = memchr(f, ',', (size_t)(p - f));
                if (!fe) fe = p;
                int fl = (int)(fe - f), ok = -1;
                for (int i = 0; known[i] && ok < 0; i++)
                    if ((int)strlen(known[i]) == fl && memcmp(known[i], f, (size_t)fl) == 0) ok = i;
                if (fl && ok < 0) {
                    snprintf(err, errlen, "ERR Unexpected flag in script shebang: %.*s", fl, f);
                    return -1;
                }
                if (ok >= 0) *flags |= 1 << ok;   /* known[] in SCRIPT_FLAG_* order */
                f = fe + 1;
            }
        } else {
            snprintf(err, errlen, "ERR Unknown lua shebang option: %.*s", tl, t);
            return -1;
        }
    }
    return 0;
}

/* The shebang flags of the cached script sha. */
static int script_flags(lua_State *L, const char *sha) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, flags_ref);
    lua_getfield(L, -1, sha);
    int flags = (int)lua_tonumber(L, -1);
    lua_pop(L, 2);
    return flags;
}

/* Compile body under its sha; on error reply Redis's message and return -1. */
static int script_compile(client *c, lua_State *L, const char *sha, const char *body, size_t len) {
    if (script_find(L, sha)) {
        lua_pop(L, 1);
        return 0;
    }
    int flags;
    size_t skip;
    char err[256];
    if (parse_shebang(body, len, &flags, &skip, err, sizeof(err)) != 0) {
        add_line(&c->out, 1, err, strlen(err));
        return -1;
    }
    if (luaL_loadbuffer(L, body + skip, len - skip, "@user_script")) {
        resp_add_errorf(&c->out, "ERR Error compiling script (new function): %s",
                        lua_tostring(L, -1));
        lua_pop(L, 1);
        return -1;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, scripts_ref);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, sha);
    lua_pop(L, 2);
    if (flags) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, flags_ref);
        lua_pushnumber(L, flags);
        lua_setfield(L, -2, sha);
        lua_pop(L, 1);
    }
    return 0;
}

/* ---------------- running ---------------- */

static void busy_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    int64_t elapsed_ms = (monotonic_us() - atomic_load(&run.since_us)) / 1000;
    if (!run.slow_logged && elapsed_ms >= server.cfg.busy_reply_threshold) {
        run.slow_logged = 1;
        serverLog(LL_WARNING, "Slow script detected: still in execution after %lld milliseconds. "
                  "You can try killing the script using the SCRIPT KILL command.",
                  (long long)elapsed_ms);
    }
    if (atomic_load(&server.shutdown_asap)) run.aborted = 1;
    if (atomic_load(&run.kill) || run.aborted) {
        lua_sethook(L, busy_hook, LUA_MASKLINE, 0); /* fire again if caught by pcall */
        raise_err(L, ERR_KILLED);
    }
}

static void push_array(lua_State *L, const char **v, const size_t *len, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushlstring(L, v[i], len[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static void set_array_global(lua_State *L, const char *name, const char **v, const size_t *len, int n) {
    lua_pushstring(L, name);
    push_array(L, v, len, n);
    lua_rawset(L, LUA_GLOBALSINDEX);
}

/* The reply for the error object on top of the stack. */
static void reply_script_error(client *c, lua_State *L, const char *name) {
    if (!lua_istable(L, -1)) {
        resp_add_errorf(&c->out, "ERR Error running script (call to %s): @%s", name,
                        lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
        return;
    }
    const char *msg = "ERR unknown error", *source = NULL;
    char line[24] = "";
    if (raw_field(L, -1, "err", LUA_TSTRING)) {
        msg = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    if (raw_field(L, -1, "source", LUA_TSTRING)) {
        source = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    if (raw_field(L, -1, "line", LUA_TNUMBER)) {
        snprintf(line, sizeof(line), "%lld", (long long)lua_tonumber(L, -1));
        lua_pop(L, 1);
    }
    rbuf b;
    rbuf_init(&b);
    rbuf_append(&b, msg, strlen(msg)); /* strings stay referenced by the table */
    if (source && line[0]) {
        char tail[256];
        int n = snprintf(tail, sizeof(tail), " script: %s, on %s:%s.", name, source, line);
        rbuf_append(&b, tail, (size_t)n < sizeof(tail) ? (size_t)n : sizeof(tail) - 1);
    }
    add_line(&c->out, 1, b.buf, b.len);
    rbuf_free(&b);
}

/* Take every shard lock this thread does not hold yet, ascending; returns
 * the array of those taken (for unlock_shards). */
static uint8_t *lock_all_shards(void) {
    uint8_t *taken = calloc((size_t)server.nshards + 1, 1);
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        if (shard_held_by_me(s)) continue;
        shard_lock(s);
        taken[i] = 1;
    }
    return taken;
}

static void unlock_shards(uint8_t *taken) {
    for (int i = server.nshards - 1; i >= 0; i--)
        if (taken[i]) shard_unlock(&server.shards[i]);
    free(taken);
}

/* Run the function on top of the stack (popped) with keys and args, reply. */
/* as_function (FCALL): keys and args are the function's two arguments
 * instead of the KEYS and ARGV globals. */
static void script_call(client *c, lua_State *L, const char *name, int flags, int ro, int nkeys,
                        const char **keys, const size_t *keylen, int nargs, const char **args,
                        const size_t *arglen, int as_function) {
    int base = lua_gettop(L); /* the function */
    lua_rawgeti(L, LUA_REGISTRYINDEX, errh_ref);
    lua_insert(L, base);
    if (as_function) {
        push_array(L, keys, keylen, nkeys);
        push_array(L, args, arglen, nargs);
    } else {
        set_array_global(L, "KEYS", keys, keylen, nkeys);
        set_array_global(L, "ARGV", args, arglen, nargs);
    }
    int db = c->db;
    run.c = c;
    run.ro = ro || (flags & SCRIPT_FLAG_NO_WRITES);
    /* declared flags were checked before the run (script_check_flags) */
    run.allow_oom = (flags & (SCRIPT_FLAG_ALLOW_OOM | SCRIPT_FLAG_DECLARED)) != 0;
    run.pre_oom = client_pre_command_oom();
    run.resp = 2;
    run.slow_logged = 0;
    run.aborted = 0;
    atomic_store(&run.kill, 0);
    atomic_store(&run.wrote, 0);
    atomic_store(&run.function, as_function);
    size_t start = c->out.b.len;
    db_batch_begin(&c->x);
    lua_sethook(L, busy_hook, LUA_MASKCOUNT, HOOK_EVERY);
    atomic_store(&run.since_us, monotonic_us());
    int rc = lua_pcall(L, as_function ? 2 : 0, 1, base);
    atomic_store(&run.since_us, 0);
    lua_sethook(L, NULL, 0, 0);
    if (rc) reply_script_error(c, L, name);
    else lua_to_reply(L, &c->out, 0);
    lua_settop(L, base - 1);
    c->db = db;
    if (run.aborted) {
        /* SHUTDOWN while it ran (it may have written: SHUTDOWN NOSAVE is
         * the way out of an unkillable script): nothing of it is logged. */
        db_batch_abort(&c->x);
    } else if (db_batch_end(&c->x) == DB_OOM) {
        c->out.b.len = start;
        resp_add_error(&c->out, db_error_text(&c->x));
    }
    run.c = NULL;
    lua_gc(L, LUA_GCSTEP, 1);
}

/* cluster: the declared keys (argv[3 .. 3+numkeys)) must be in one slot
 * this node is primary of, as for any command (-MOVED, -CROSSSLOT...).
 * Returns 1 with the error replied. */
static int route_declared_keys(client *c, int numkeys) {
    if (numkeys == 0) return 0;
    struct rcommand routed = {.name = c->cmd->name, .proc = c->cmd->proc, .arity = c->cmd->arity,
                              .flags = c->cmd->flags, .firstkey = 3, .lastkey = 2 + numkeys,
                              .keystep = 1};
    const struct rcommand *cmd = c->cmd;
    c->cmd = &routed;
    int refused = cluster_redirect(c);
    c->cmd = cmd;
    return refused;
}

static void eval_generic(client *c, int evalsha, int ro) {
    long long numkeys;
    if (arg_ll(c, 2, &numkeys)) return;
    if (numkeys < 0) {
        resp_add_error(&c->out, "ERR Number of keys can't be negative");
        return;
    }
    if (numkeys > c->argc - 3) {
        resp_add_error(&c->out, "ERR Number of keys can't be greater than number of args");
        return;
    }
    if (cluster_enabled() && route_declared_keys(c, (int)numkeys)) return;
    char sha[41];
    if (evalsha) {
        if (c->argvlen[1] != 40) {
            resp_add_error(&c->out, ERR_NOSCRIPT);
            return;
        }
        for (int i = 0; i < 40; i++) sha[i] = (char)tolower((unsigned char)c->argv[1][i]);
        sha[40] = '\0';
    } else {
        sha1hex(sha, c->argv[1], c->argvlen[1]);
    }
    uint8_t *taken = lock_all_shards();
    pthread_mutex_lock(&run_lock);
    lua_State *L = lua_get();
    if (!evalsha && script_compile(c, L, sha, c->argv[1], c->argvlen[1]) != 0) {
    } else if (!script_find(L, sha)) {
        resp_add_error(&c->out, ERR_NOSCRIPT);
    } else {
        int nk = (int)numkeys, flags = script_flags(L, sha);
        if (script_check_flags(c, flags, ro) == 0)
            script_call(c, L, sha, flags, ro, nk, c->argv + 3, c->argvlen + 3, c->argc - 3 - nk,
                        c->argv + 3 + nk, c->argvlen + 3 + nk, 0);
    }
    pthread_mutex_unlock(&run_lock);
    unlock_shards(taken);
}

void evalCommand(client *c) { eval_generic(c, 0, 0); }
void evalshaCommand(client *c) { eval_generic(c, 1, 0); }
void evalRoCommand(client *c) { eval_generic(c, 0, 1); }
void evalshaRoCommand(client *c) { eval_generic(c, 1, 1); }

/* ---------------- SCRIPT ---------------- */

static void script_load(client *c) {
    char sha[41];
    sha1hex(sha, c->argv[2], c->argvlen[2]);
    pthread_mutex_lock(&run_lock);
    if (script_compile(c, lua_get(), sha, c->argv[2], c->argvlen[2]) == 0)
        resp_add_bulk(&c->out, sha, 40);
    pthread_mutex_unlock(&run_lock);
}

static void script_exists(client *c) {
    pthread_mutex_lock(&run_lock);
    lua_State *L = lua_get();
    resp_add_array(&c->out, c->argc - 2);
    for (int j = 2; j < c->argc; j++) {
        char sha[41];
        int found = 0;
        if (c->argvlen[j] == 40) {
            for (int i = 0; i < 40; i++) sha[i] = (char)tolower((unsigned char)c->argv[j][i]);
            sha[40] = '\0';
            found = script_find(L, sha);
            if (found) lua_pop(L, 1);
        }
        resp_add_int(&c->out, found);
    }
    pthread_mutex_unlock(&run_lock);
}

static void script_flush(client *c) {
    if (c->argc == 3 && !arg_is(c, 2, "sync") && !arg_is(c, 2, "async")) {
        resp_add_error(&c->out, "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
        return;
    }
    if (c->argc > 3) {
        resp_add_error(&c->out, "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
        return;
    }
    pthread_mutex_lock(&run_lock);
    if (lua) lua_close(lua);
    lua = NULL;
    pthread_mutex_unlock(&run_lock);
    resp_add_ok(&c->out);
}

static void script_kill(client *c) {
    int by_function = !strcmp(c->cmd->name, "function");
    if (atomic_load(&run.since_us) && atomic_load(&run.function) != by_function) {
        /* Redis: SCRIPT KILL does not stop a function, nor FUNCTION KILL a script */
        resp_add_error(&c->out, by_function ? ERR_BUSY : ERR_BUSY_FN);
    } else if (!atomic_load(&run.since_us)) {
        resp_add_error(&c->out, "NOTBUSY No scripts in execution right now.");
    } else if (atomic_load(&run.wrote)) {
        resp_add_error(&c->out, "UNKILLABLE Sorry the script already executed write commands "
                       "against the dataset. You can either wait the script termination or "
                       "kill the server in a hard way using the SHUTDOWN NOSAVE command.");
    } else {
        atomic_store(&run.kill, 1);
        resp_add_ok(&c->out);
    }
}

static void script_help(client *c) {
    static const char *const lines[] = {
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache. Very dangerous on replicas.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the scripts cache.",
        "    * SYNC: Synchronously flush the scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Prints this help.",
        NULL,
    };
    reply_help(c, lines);
}

void scriptCommand(client *c) {
    static const subcommand subs[] = {
        {"load", 3, script_load},   {"exists", -3, script_exists}, {"flush", -2, script_flush},
        {"kill", 2, script_kill},   {"help", 2, script_help},      {NULL, 0, NULL},
    };
    subcommand_dispatch(c, subs, "script");
}

/* ---------------- for t_function.c (script.h) ---------------- */

void script_run_lock(void) { pthread_mutex_lock(&run_lock); }
void script_run_unlock(void) { pthread_mutex_unlock(&run_lock); }
lua_State *script_new_state(void) { return lua_create(); }
uint8_t *script_lock_shards(void) { return lock_all_shards(); }
void script_unlock_shards(uint8_t *taken) { unlock_shards(taken); }
int script_route_keys(client *c, int numkeys) { return route_declared_keys(c, numkeys); }
void script_kill_reply(client *c) { script_kill(c); }
int script_busy(void) { return atomic_load(&run.since_us) != 0; }

void script_run(client *c, lua_State *L, const char *name, int flags, int ro, int nkeys,
                const char **keys, const size_t *keylen, int nargs, const char **args,
                const size_t *arglen) {
    script_call(c, L, name, flags, ro, nkeys, keys, keylen, nargs, args, arglen, 1);
}

/* Redis's scriptPrepareForRun, for declared flags, in its order. (A Rowan
 * node serves no stale data, so allow-stale changes nothing; a script
 * whose keys span slots is refused by the cluster routing of its declared
 * keys whatever allow-cross-slot-keys says.) */
int script_check_flags(client *c, int flags, int ro) {
    if (!(flags & SCRIPT_FLAG_DECLARED)) return 0;   /* compatibility mode */
    if ((flags & SCRIPT_FLAG_NO_CLUSTER) && cluster_enabled()) {
        resp_add_error(&c->out, "ERR Can not run script on cluster, 'no-cluster' flag is set.");
        return -1;
    }
    if (!(flags & (SCRIPT_FLAG_ALLOW_OOM | SCRIPT_FLAG_NO_WRITES)) && client_pre_command_oom()) {
        resp_add_error(&c->out, "OOM command not allowed when used memory > 'maxmemory'.");
        return -1;
    }
    if (ro && !(flags & SCRIPT_FLAG_NO_WRITES)) {
        resp_add_error(&c->out, "ERR Can not execute a script with write flag using *_ro command.");
        return -1;
    }
    return 0;
}

/* ---------------- the dispatcher's gate ---------------- */

/* The commands Redis answers while a script is busy. */
static int allowed_while_busy(client *c) {
    const char *n = c->cmd->name;
    if (!strcmp(n, "auth") || !strcmp(n, "hello") || !strcmp(n, "quit") || !strcmp(n, "shutdown"))
        return 1;
    if (c->argc < 2) return 0;
    if (!strcmp(n, "script")) return arg_is(c, 1, "kill");
    if (!strcmp(n, "function")) return arg_is(c, 1, "kill") || arg_is(c, 1, "stats");
    return 0;
}

int script_gate(client *c) {
    if (!atomic_load(&run.since_us) || allowed_while_busy(c)) return 0;
    for (;;) {
        int64_t since = atomic_load(&run.since_us);
        if (!since) return 0;
        if (monotonic_us() - since >= server.cfg.busy_reply_threshold * 1000) {
            resp_add_error(&c->out, atomic_load(&run.function) ? ERR_BUSY_FN : ERR_BUSY);
            return 1;
        }
        usleep(200);
    }
}
