/* t_function.c -- Redis 7 functions: FUNCTION LOAD/DELETE/FLUSH/LIST/DUMP/
 * RESTORE/STATS/KILL/HELP, FCALL and FCALL_RO.
 *
 * Libraries are server metadata, not keys. The whole library set (each
 * library's code, nothing else: names and functions are what running the
 * code registers) is one LOG_FUNCS entry, written by db_set_funcs into the
 * lowest shard this node is primary of; that shard keeps its latest entry
 * live in the log (cleaner, re-sync) and its replicas receive it like any
 * write. So DBSIZE, KEYS, FLUSHALL and the key digests never see libraries,
 * a FUNCTION LOAD is acknowledged only once its entry is durable (the
 * client's db_ctx gates the reply), and recovery and replicas rebuild them.
 *
 * Every LOG_FUNCS entry applied anywhere (written here, replayed, received
 * from a primary) reaches funcs_applied, which keeps the payload with the
 * highest stamp: a Lamport-style counter in the payload (max of every stamp
 * seen + 1, at least the wall clock in microseconds), so the newest set
 * wins whichever shard holds it. The Lua side is rebuilt from that payload
 * lazily, at the next FUNCTION or FCALL (sync_libraries): one code path for
 * the local write, recovery and replication; a write never installs its
 * libraries itself, it only logs them and lets the hook deliver them.
 *
 * The interpreter is t_script.c's (sandbox, redis.call, reply conversion,
 * BUSY gate, KILL) but a separate state, so SCRIPT FLUSH keeps functions,
 * as in Redis. FCALL locks every shard then the run lock, like EVAL.
 *
 * Library code runs once at load, with a global environment of its own
 * that holds only `redis` with register_function, log and the constants
 * (Redis 7.0's load-time API: no other global, not even `string` or
 * `error`), under a 500 ms time limit. Registered functions keep that
 * environment; once the load ends it reads the sandbox's globals (the full
 * `redis` API) and still refuses writes.
 *
 * FUNCTION DUMP's payload is Redis 7.0's: per library the RDB opcode
 * FUNCTION2 (245) and its code as an RDB string, then the RDB version and
 * CRC64 (rdb.c); the code is not LZF-compressed, which Redis reads too.
 * RESTORE reads Redis's payloads, compressed or not. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <lua5.1/lua.h>
#include <lua5.1/lauxlib.h>
#include "commands.h"
#include "cluster.h"
#include "rdb.h"
#include "db.h"
#include "db_shard.h"
#include "script.h"
#include "server.h"
#include "shard.h"
#include "util.h"
#include "edge_state.h"

/* f->flags: bit i is flag_names[i], as SCRIPT_FLAG_* (script.h) */
#define LOAD_TIMEOUT_US 500000
#define RDB_OPCODE_FUNCTION 246     /* Redis 7.0 release candidates' format */
#define RDB_OPCODE_FUNCTION2 245
#define ERR_BAD_PAYLOAD "ERR DUMP payload version or checksum are wrong"

static const char *const flag_names[] = {"no-writes", "allow-oom", "allow-stale", "no-cluster",
                                         "allow-cross-slot-keys", NULL};

typedef struct fn_def {
    char *name;
    char *desc;      /* NULL: none */
    int flags;       /* bit i: flag_names[i] */
    int ref;         /* the Lua function, in the state's registry */
} fn_def;

typedef struct lib_def {
    char *name;
    char *code;
    size_t len;
    int nfn;
    fn_def *fn;
} lib_def;

/* The libraries as loaded in the interpreter (under the run lock). */
struct fn_libs {
    lua_State *L;
    lib_def *libs;
    int n;
    uint64_t stamp;  /* of the payload they were built from */
    uint64_t gen;    /* pend_gen when they were built */
};
/* This file's state, one per server (server.h). */
struct fn_cur_state {
    struct fn_libs cur;
};

void fn_cur_state_new(void) {
    struct fn_cur_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->fn_cur = st;
}

static void lib_free(lua_State *L, lib_def *l);

void fn_cur_state_free(void) {
    struct fn_cur_state *st = server.edge_state->fn_cur;
    for (int i = 0; i < st->cur.n; i++) lib_free(NULL, &st->cur.libs[i]);
    free(st->cur.libs);
    if (st->cur.L) lua_close(st->cur.L);
    free(st);
}

#define cur (server.edge_state->fn_cur->cur)

/* The newest payload any LOG_FUNCS entry delivered (under pend_lock, a leaf
 * lock: taken under shard locks by the hook, and under the run lock). */
/* This file's state, one per server (server.h). */
struct fn_state {
    pthread_mutex_t pend_lock;
    char *pend;
    size_t pend_len;
    uint64_t pend_stamp;
    uint64_t pend_gen;   /* bumped at each change of pend */
    int pend_sid;   /* the shard whose entry holds it */
    pthread_mutex_t stats_lock;
};

void fn_state_new(void) {
    struct fn_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->pend_lock, NULL);
    pthread_mutex_init(&st->stats_lock, NULL);
    server.edge_state->fn = st;
}

void fn_state_free(void) {
    struct fn_state *st = server.edge_state->fn;
    free(st->pend);
    pthread_mutex_destroy(&st->pend_lock);
    pthread_mutex_destroy(&st->stats_lock);
    free(st);
}

#define pend_lock (server.edge_state->fn->pend_lock)
#define pend (server.edge_state->fn->pend)
#define pend_len (server.edge_state->fn->pend_len)
#define pend_stamp (server.edge_state->fn->pend_stamp)
#define pend_gen (server.edge_state->fn->pend_gen)   /* bumped at each change of pend */
#define pend_sid (server.edge_state->fn->pend_sid)   /* the shard whose entry holds it */

/* The function FCALL runs now, for FUNCTION STATS (under stats_lock). */
#define stats_lock (server.edge_state->fn->stats_lock)
struct fn_running {
    char *name;
    int argc;
    char **argv;
    size_t *argvlen;
    int64_t since_us;
};
/* This file's state, one per server (server.h). */
struct fn_run_state {
    struct fn_running running;
};

void fn_run_state_new(void) {
    struct fn_run_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->fn_run = st;
}

void fn_run_state_free(void) { free(server.edge_state->fn_run); }

#define running (server.edge_state->fn_run->running)

/* ---------------- payloads ----------------
 * Log payload:  "RWFN" u8 1, u64 stamp, u32 n, n x (u32 len, code).
 * (FUNCTION DUMP's is Redis's: function_dump.) */

static void put_u32(rbuf *b, uint32_t v) { rbuf_append(b, (const char *)&v, 4); }

static void put_libs(rbuf *b, lib_def *const *libs, int n) {
    put_u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        put_u32(b, (uint32_t)libs[i]->len);
        rbuf_append(b, libs[i]->code, libs[i]->len);
    }
}

/* Walk n x (u32 len, code) at p..end: calls fn for each; -1 if malformed. */
typedef int (*code_fn)(void *arg, const char *code, size_t len);
static int walk_codes(const char *p, const char *end, code_fn fn, void *arg) {
    uint32_t n;
    if (end - p < 4) return -1;
    memcpy(&n, p, 4);
    p += 4;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        if (end - p < 4) return -1;
        memcpy(&len, p, 4);
        p += 4;
        if ((size_t)(end - p) < len) return -1;
        if (fn && fn(arg, p, len) != 0) return -1;
        p += len;
    }
    return p == end ? 0 : -1;
}

static uint64_t payload_stamp(const char *p, size_t len) {
    uint64_t st = 0;
    if (len >= 13 && memcmp(p, "RWFN\1", 5) == 0) memcpy(&st, p + 5, 8);
    return st;
}

/* db.c's hook (any thread, under the entry's shard lock): keep the newest. */
static void funcs_applied(int sid, const char *payload, size_t len) {
    uint64_t st = payload_stamp(payload, len);
    if (!st || walk_codes(payload + 13, payload + len, NULL, NULL) != 0) {
        serverLog(LL_WARNING, "Malformed FUNCTION libraries entry ignored");
        return;
    }
    pthread_mutex_lock(&pend_lock);
    /* Equal stamps (two nodes' loads in the same microsecond): the larger
     * payload wins, so every node keeps the same one. */
    int cmp = 0;
    if (st == pend_stamp && pend) {
        cmp = memcmp(payload, pend, len < pend_len ? len : pend_len);
        if (!cmp) cmp = (len > pend_len) - (len < pend_len);
    }
    if (st > pend_stamp || cmp > 0) {
        free(pend);
        pend = malloc(len);
        memcpy(pend, payload, len);
        pend_len = len;
        pend_stamp = st;
        pend_sid = sid;
        pend_gen++;
    }
    pthread_mutex_unlock(&pend_lock);
}

void functions_register(void) { db_funcs_hook(funcs_applied); }

/* ---------------- the library registry ---------------- */

static void lib_free(lua_State *L, lib_def *l) {
    for (int i = 0; i < l->nfn; i++) {
        if (L) luaL_unref(L, LUA_REGISTRYINDEX, l->fn[i].ref);
        free(l->fn[i].name);
        free(l->fn[i].desc);
    }
    free(l->fn);
    free(l->name);
    free(l->code);
    l->fn = NULL;
    l->nfn = 0;
}

static lib_def *lib_find(const char *name, size_t len) {
    for (int i = 0; i < cur.n; i++)
        if (strlen(cur.libs[i].name) == len && memcmp(cur.libs[i].name, name, len) == 0)
            return &cur.libs[i];
    return NULL;
}

static fn_def *fn_find(const char *name, size_t len, lib_def **lib) {
    for (int i = 0; i < cur.n; i++)
        for (int j = 0; j < cur.libs[i].nfn; j++)
            if (strlen(cur.libs[i].fn[j].name) == len && memcmp(cur.libs[i].fn[j].name, name, len) == 0) {
                if (lib) *lib = &cur.libs[i];
                return &cur.libs[i].fn[j];
            }
    return NULL;
}

static int valid_name(const char *s, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return 0;
    }
    return 1;
}

#define ERR_NAME "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"

/* "#!lua name=<lib>\n": the library name into *name (malloc'd) and the
 * bytes of the first line into *skip. -1 with Redis's error in err. */
static int parse_header(const char *code, size_t len, char **name, size_t *skip, char *err, size_t errlen) {
    *name = NULL;
    if (len < 2 || code[0] != '#' || code[1] != '!') {
        snprintf(err, errlen, "ERR Missing library metadata");
        return -1;
    }
    const char *nl = memchr(code, '\n', len);
    if (!nl) {
        snprintf(err, errlen, "ERR Invalid library metadata");
        return -1;
    }
    *skip = (size_t)(nl - code);
    const char *p = code + 2, *end = nl;
    const char *eng = p;
    while (p < end && *p != ' ') p++;
    if (p - eng != 3 || memcmp(eng, "lua", 3) != 0) {
        snprintf(err, errlen, "ERR Engine '%.*s' not found", (int)(p - eng), eng);
        return -1;
    }
    while (p < end) {
        while (p < end && *p == ' ') p++;
        const char *t = p;
        while (p < end && *p != ' ') p++;
        if (p == t) break;
        if (p - t >= 5 && memcmp(t, "name=", 5) == 0) {
            if (*name) {
                free(*name);
                *name = NULL;
                snprintf(err, errlen, "ERR Invalid metadata value, name argument was given multiple times");
                return -1;
            }
            *name = strndup(t + 5, (size_t)(p - t - 5));
        } else {
            free(*name);
            *name = NULL;
            snprintf(err, errlen, "ERR Invalid metadata value given: %.*s", (int)(p - t), t);
            return -1;
        }
    }
    if (!*name) {
        snprintf(err, errlen, "ERR Library name was not given");
        return -1;
    }
    if (!valid_name(*name, strlen(*name))) {
        free(*name);
        *name = NULL;
        snprintf(err, errlen, ERR_NAME);
        return -1;
    }
    return 0;
}

/* ---------------- loading a library's code ---------------- */

/* This file's state, one per server (server.h). */
struct fn_load_state {
    lib_def *loading;   /* the library whose code runs now (run lock) */
    int64_t load_start;
};

void fn_load_state_new(void) {
    struct fn_load_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->fn_load = st;
}

void fn_load_state_free(void) { free(server.edge_state->fn_load); }

#define loading (server.edge_state->fn_load->loading)   /* the library whose code runs now (run lock) */
#define load_start (server.edge_state->fn_load->load_start)

static int raise(lua_State *L, const char *msg) {
    lua_newtable(L);
    lua_pushstring(L, "err");
    lua_pushstring(L, msg);
    lua_rawset(L, -3);
    return lua_error(L);
}

/* Add a function to `loading`; the callback is at stack index fi. */
static int add_function(lua_State *L, const char *name, size_t nlen, int fi, int flags, const char *desc) {
    if (!valid_name(name, nlen)) return raise(L, ERR_NAME);
    for (int i = 0; i < loading->nfn; i++)
        if (strlen(loading->fn[i].name) == nlen && memcmp(loading->fn[i].name, name, nlen) == 0)
            return raise(L, "ERR Function already exists in the library");
    lua_pushvalue(L, fi);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    loading->fn = realloc(loading->fn, sizeof(fn_def) * (size_t)(loading->nfn + 1));
    loading->fn[loading->nfn++] = (fn_def){strndup(name, nlen), desc ? strdup(desc) : NULL, flags, ref};
    return 0;
}

/* flags={'no-writes', ...} at index ti into *flags; raises on errors. */
static int read_flags(lua_State *L, int ti, int *flags) {
    *flags = 0;
    if (!lua_istable(L, ti))
        return raise(L, "ERR flags argument to redis.register_function must be a table representing function flags");
    for (int i = 1;; i++) {
        lua_rawgeti(L, ti, i);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            return 0;
        }
        const char *f = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int bit = -1;
        for (int k = 0; f && flag_names[k]; k++)
            if (!strcmp(f, flag_names[k])) bit = k;
        lua_pop(L, 1);
        if (bit < 0) return raise(L, "ERR unknown flag given");
        *flags |= 1 << bit;
    }
}

/* redis.register_function(name, fn) or redis.register_function{function_name=,
 * callback=, flags=, description=}: Redis 7.0's errors. */
static int lua_register_function(lua_State *L) {
    int argc = lua_gettop(L);
    if (!loading) return raise(L, "ERR redis.register_function can only be called on FUNCTION LOAD command");
    if (argc == 2) {
        if (lua_type(L, 1) != LUA_TSTRING)
            return raise(L, "ERR first argument to redis.register_function must be a string");
        if (!lua_isfunction(L, 2))
            return raise(L, "ERR second argument to redis.register_function must be a function");
        size_t nlen;
        const char *name = lua_tolstring(L, 1, &nlen);
        return add_function(L, name, nlen, 2, 0, NULL);
    }
    if (argc != 1) return raise(L, "ERR wrong number of arguments to redis.register_function");
    if (!lua_istable(L, 1))
        return raise(L, "ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
    const char *name = NULL, *desc = NULL;
    size_t nlen = 0;
    int fi = 0, flags = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (k && !strcmp(k, "function_name")) {
            if (lua_type(L, -1) != LUA_TSTRING) return raise(L, "ERR function_name argument given to redis.register_function must be a string");
            name = lua_tolstring(L, -1, &nlen);
        } else if (k && !strcmp(k, "description")) {
            if (lua_type(L, -1) != LUA_TSTRING) return raise(L, "ERR description argument given to redis.register_function must be a string");
            desc = lua_tostring(L, -1);
        } else if (k && !strcmp(k, "callback")) {
            if (!lua_isfunction(L, -1)) return raise(L, "ERR callback argument given to redis.register_function must be a function");
            fi = -1;
        } else if (k && !strcmp(k, "flags")) {
            read_flags(L, lua_gettop(L), &flags);
        } else {
            return raise(L, "ERR unknown argument given to redis.register_function");
        }
        lua_pop(L, 1);
    }
    if (!name) return raise(L, "ERR redis.register_function must get a function name argument");
    if (!fi) return raise(L, "ERR redis.register_function must get a callback argument");
    /* the strings stay referenced by the table at index 1 */
    lua_getfield(L, 1, "callback");
    return add_function(L, name, nlen, lua_gettop(L), flags, desc);
}

static int lua_load_log(lua_State *L) {
    /* redis.log at load time: the sandbox's, looked up in the full API */
    lua_getglobal(L, "redis");
    lua_getfield(L, -1, "log");
    lua_insert(L, 1);
    lua_pop(L, 1);
    lua_call(L, lua_gettop(L) - 1, 0);
    return 0;
}

static int env_newindex(lua_State *L) { return luaL_error(L, "Attempt to modify a readonly table"); }

/* A library's globals: while its code loads only `redis` (raw field) exists,
 * as in Redis 7.0; afterwards its functions read the sandbox's globals. */
static int env_index(lua_State *L) {
    if (!loading) {
        /* raw: the error below, not the sandbox's, names the script line */
        lua_pushvalue(L, 2);
        lua_rawget(L, LUA_GLOBALSINDEX);
        if (!lua_isnil(L, -1)) return 1;
    }
    return luaL_error(L, "Script attempted to access nonexistent global variable '%s'",
                      lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static int api_index(lua_State *L) {
    return luaL_error(L, "Script attempted to access nonexistent global variable '%s'",
                      lua_tostring(L, 2) ? lua_tostring(L, 2) : "?");
}

static void load_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    if (monotonic_us() - load_start > LOAD_TIMEOUT_US) {
        lua_sethook(L, load_hook, LUA_MASKLINE, 0);
        raise(L, "ERR FUNCTION LOAD timeout");
    }
}

/* The load-time `redis` table: register_function, log and the constants. */
static void push_load_api(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, lua_register_function);
    lua_setfield(L, -2, "register_function");
    lua_pushcfunction(L, lua_load_log);
    lua_setfield(L, -2, "log");
    lua_getglobal(L, "redis");
    static const char *const consts[] = {"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING",
                                         "REDIS_VERSION", "REDIS_VERSION_NUM", NULL};
    for (int i = 0; consts[i]; i++) {
        lua_getfield(L, -1, consts[i]);
        lua_setfield(L, -3, consts[i]);
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, api_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, env_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
}

/* Run a library's code in L: *out gets its name, code and functions (refs in
 * L). -1 with Redis's error in err (nothing left registered). */
static int lib_compile(lua_State *L, const char *code, size_t len, lib_def *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    size_t skip;
    if (parse_header(code, len, &out->name, &skip, err, errlen) != 0) return -1;
    int top = lua_gettop(L);
    if (luaL_loadbuffer(L, code + skip, len - skip, "@user_function")) {
        snprintf(err, errlen, "ERR Error compiling function: %s", lua_tostring(L, -1));
        lua_settop(L, top);
        lib_free(NULL, out);
        return -1;
    }
    /* the library's globals: only `redis`, the load-time API, until the
     * load ends; then the sandbox's globals (env_index); no writes */
    lua_newtable(L);
    lua_newtable(L);
    lua_pushcfunction(L, env_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, env_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_pushstring(L, "redis");
    push_load_api(L);
    lua_rawset(L, -3);             /* raw: __newindex refuses writes */
    lua_pushvalue(L, -1);
    lua_setfenv(L, -3);            /* the chunk's globals */
    lua_insert(L, -2);             /* the env stays below the chunk */
    int env = top + 1;
    loading = out;
    load_start = monotonic_us();
    lua_sethook(L, load_hook, LUA_MASKCOUNT, 10000);
    int rc = lua_pcall(L, 0, 0, 0);
    lua_sethook(L, NULL, 0, 0);
    loading = NULL;
    if (rc) {
        /* a raised {err=...} keeps its text; a Lua error gets "ERR " */
        const char *msg = NULL;
        if (lua_istable(L, -1)) {
            lua_getfield(L, -1, "err");
            msg = lua_tostring(L, -1);
            snprintf(err, errlen, "ERR Error registering functions: %s", msg ? msg : "ERR unknown error");
        } else {
            msg = lua_tostring(L, -1);
            snprintf(err, errlen, "ERR Error registering functions: ERR %s", msg ? msg : "unknown error");
        }
    } else if (out->nfn == 0) {
        snprintf(err, errlen, "ERR No functions registered");
        rc = 1;
    }
    /* from now on `redis` in the library's functions is the full API */
    lua_pushstring(L, "redis");
    lua_pushnil(L);
    lua_rawset(L, env);
    lua_settop(L, top);
    if (rc) {
        lib_free(L, out);
        return -1;
    }
    out->code = malloc(len ? len : 1);
    memcpy(out->code, code, len);
    out->len = len;
    return 0;
}

/* ---------------- the loaded set (run lock held) ---------------- */

/* This file's state, one per server (server.h). */
struct fn_count_state {
    _Atomic int nlibs_now;
    _Atomic int nfns_now;   /* FUNCTION STATS, read while busy */
};

void fn_count_state_new(void) {
    struct fn_count_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.edge_state->fn_count = st;
}

void fn_count_state_free(void) { free(server.edge_state->fn_count); }

#define nlibs_now (server.edge_state->fn_count->nlibs_now)
#define nfns_now (server.edge_state->fn_count->nfns_now)   /* FUNCTION STATS, read while busy */

static int build_one(void *arg, const char *code, size_t len) {
    lib_def l;
    char err[512];
    if (lib_compile(cur.L, code, len, &l, err, sizeof(err)) != 0) {
        /* it compiled when it was loaded: only a different Lua could fail */
        serverLog(LL_WARNING, "A FUNCTION library failed to load and is skipped: %s", err);
        return 0;
    }
    (void)arg;
    cur.libs = realloc(cur.libs, sizeof(lib_def) * (size_t)(cur.n + 1));
    cur.libs[cur.n++] = l;
    return 0;
}

/* Rebuild the interpreter's libraries from the newest logged set, if it is
 * not the one they were built from. */
static void sync_libraries(void) {
    pthread_mutex_lock(&pend_lock);
    if (cur.L && pend_gen == cur.gen) {
        pthread_mutex_unlock(&pend_lock);
        return;
    }
    size_t len = pend_len;
    char *copy = len ? malloc(len) : NULL;
    if (len) memcpy(copy, pend, len);
    uint64_t stamp = pend_stamp, gen = pend_gen;
    pthread_mutex_unlock(&pend_lock);
    for (int i = 0; i < cur.n; i++) lib_free(NULL, &cur.libs[i]);
    free(cur.libs);
    cur.libs = NULL;
    cur.n = 0;
    if (cur.L) lua_close(cur.L);
    cur.L = script_new_state();
    cur.stamp = stamp;
    cur.gen = gen;
    if (copy) walk_codes(copy + 13, copy + len, build_one, NULL);
    free(copy);
    int nf = 0;
    for (int i = 0; i < cur.n; i++) nf += cur.libs[i].nfn;
    atomic_store(&nlibs_now, cur.n);
    atomic_store(&nfns_now, nf);
}

/* Log the library set libs[0..n) (the codes only) and reply an error when
 * that failed. 0 when logged: the hook then holds it; sync_libraries runs. */
static int write_libs(client *c, lib_def *const *libs, int n) {
    pthread_mutex_lock(&pend_lock);
    uint64_t stamp = (pend_stamp > cur.stamp ? pend_stamp : cur.stamp) + 1;
    pthread_mutex_unlock(&pend_lock);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    uint64_t now = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
    if (now > stamp) stamp = now;
    rbuf b;
    rbuf_init(&b);
    rbuf_append(&b, "RWFN\1", 5);
    rbuf_append(&b, (const char *)&stamp, 8);
    put_libs(&b, libs, n);
    int r = db_set_funcs(&c->x, b.buf, b.len);
    rbuf_free(&b);
    if (r == DB_NOSHARD) {
        resp_add_error(&c->out, "CLUSTERDOWN this node serves no shard to keep the function libraries in");
        return -1;
    }
    if (r != DB_OK) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return -1;
    }
    sync_libraries();
    return 0;
}

/* The current libraries except `skip` (may be NULL), as pointers, with room
 * for `extra` more. */
static lib_def **libs_except(const lib_def *skip, int extra, int *n) {
    lib_def **v = malloc(sizeof(lib_def *) * (size_t)(cur.n + extra + 1));
    *n = 0;
    for (int i = 0; i < cur.n; i++)
        if (&cur.libs[i] != skip) v[(*n)++] = &cur.libs[i];
    return v;
}

/* Does a function of `l` exist in libs[0..n)? Replies Redis's error. */
static int fn_collision(client *c, lib_def *const *libs, int n, const lib_def *l) {
    for (int f = 0; f < l->nfn; f++)
        for (int i = 0; i < n; i++) {
            if (libs[i] == l) continue;
            for (int g = 0; g < libs[i]->nfn; g++)
                if (!strcmp(libs[i]->fn[g].name, l->fn[f].name)) {
                    resp_add_errorf(&c->out, "ERR Function %s already exists", l->fn[f].name);
                    return 1;
                }
        }
    return 0;
}

/* ---------------- FUNCTION ---------------- */

/* Writers lock every shard then the run lock (EVAL's order). */
static uint8_t *write_begin(void) {
    uint8_t *taken = script_lock_shards();
    script_run_lock();
    sync_libraries();
    return taken;
}

static void write_end(uint8_t *taken) {
    script_run_unlock();
    script_unlock_shards(taken);
}

static void function_load(client *c) {
    int replace = 0;
    if (c->argc == 4) {
        if (!arg_is(c, 2, "replace")) {
            resp_add_errorf(&c->out, "ERR Unknown option given: %.*s", (int)c->argvlen[2], c->argv[2]);
            return;
        }
        replace = 1;
    } else if (c->argc != 3) {
        resp_add_error(&c->out, "ERR wrong number of arguments for 'function|load' command");
        return;
    }
    const char *code = c->argv[c->argc - 1];
    size_t len = c->argvlen[c->argc - 1], skip;
    char err[512], *name;
    if (parse_header(code, len, &name, &skip, err, sizeof(err)) != 0) {
        resp_add_error(&c->out, err);
        return;
    }
    uint8_t *taken = write_begin();
    lib_def *old = lib_find(name, strlen(name)), l;
    if (old && !replace) {
        resp_add_errorf(&c->out, "ERR Library '%s' already exists", name);
    } else if (lib_compile(cur.L, code, len, &l, err, sizeof(err)) != 0) {
        resp_add_error(&c->out, err);
    } else {
        int n;
        lib_def **v = libs_except(old, 1, &n);
        v[n++] = &l;
        int logged = !fn_collision(c, v, n, &l) && write_libs(c, v, n) == 0;
        if (logged) resp_add_bulk(&c->out, name, strlen(name));
        /* once logged, the interpreter holding l's refs has been replaced */
        lib_free(logged ? NULL : cur.L, &l);
        free(v);
    }
    write_end(taken);
    free(name);
}

static void function_delete(client *c) {
    uint8_t *taken = write_begin();
    lib_def *l = lib_find(c->argv[2], c->argvlen[2]);
    if (!l) {
        resp_add_error(&c->out, "ERR Library not found");
    } else {
        int n;
        lib_def **v = libs_except(l, 0, &n);
        if (write_libs(c, v, n) == 0) resp_add_ok(&c->out);
        free(v);
    }
    write_end(taken);
}

static void function_flush(client *c) {
    if (c->argc > 3 || (c->argc == 3 && !arg_is(c, 2, "sync") && !arg_is(c, 2, "async"))) {
        resp_add_error(&c->out, "ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
        return;
    }
    uint8_t *taken = write_begin();
    if (write_libs(c, NULL, 0) == 0) resp_add_ok(&c->out);
    write_end(taken);
}

static void add_str(client *c, const char *s) { resp_add_bulk(&c->out, s, strlen(s)); }

static void function_list(client *c) {
    int withcode = 0;
    const char *pat = NULL;
    size_t patlen = 0;
    for (int i = 2; i < c->argc; i++) {
        if (arg_is(c, i, "withcode") && !withcode) {
            withcode = 1;
        } else if (arg_is(c, i, "libraryname") && !pat) {
            if (i + 1 >= c->argc) {
                resp_add_error(&c->out, "ERR library name argument was not given");
                return;
            }
            pat = c->argv[++i];
            patlen = c->argvlen[i];
        } else {
            resp_add_errorf(&c->out, "ERR Unknown argument %.*s", (int)c->argvlen[i], c->argv[i]);
            return;
        }
    }
    script_run_lock();
    sync_libraries();
    int n = 0;
    for (int i = 0; i < cur.n; i++)
        n += !pat || stringmatchlen(pat, patlen, cur.libs[i].name, strlen(cur.libs[i].name), 0);
    resp_add_array(&c->out, n);
    for (int i = 0; i < cur.n; i++) {
        lib_def *l = &cur.libs[i];
        if (pat && !stringmatchlen(pat, patlen, l->name, strlen(l->name), 0)) continue;
        resp_add_map(&c->out, withcode ? 4 : 3);
        add_str(c, "library_name");
        add_str(c, l->name);
        add_str(c, "engine");
        add_str(c, "LUA");
        add_str(c, "functions");
        resp_add_array(&c->out, l->nfn);
        for (int j = 0; j < l->nfn; j++) {
            fn_def *f = &l->fn[j];
            resp_add_map(&c->out, 3);
            add_str(c, "name");
            add_str(c, f->name);
            add_str(c, "description");
            if (f->desc) add_str(c, f->desc);
            else resp_add_null(&c->out);
            add_str(c, "flags");
            int nf = 0;
            for (int k = 0; flag_names[k]; k++) nf += (f->flags >> k) & 1;
            resp_add_set(&c->out, nf);
            for (int k = 0; flag_names[k]; k++)
                if ((f->flags >> k) & 1) resp_add_simple(&c->out, flag_names[k]); /* status, as Redis */
        }
        if (withcode) {
            add_str(c, "library_code");
            resp_add_bulk(&c->out, l->code, l->len);
        }
    }
    script_run_unlock();
}

static void function_dump(client *c) {
    script_run_lock();
    sync_libraries();
    rbuf b;
    rbuf_init(&b);
    for (int i = 0; i < cur.n; i++) {
        unsigned char op = RDB_OPCODE_FUNCTION2;
        rbuf_append(&b, &op, 1);
        rdb_put_string(&b, cur.libs[i].code, cur.libs[i].len);
    }
    rdb_put_footer(&b, 0);
    resp_add_bulk(&c->out, b.buf, b.len);
    rbuf_free(&b);
    script_run_unlock();
}

typedef struct restore_ctx {
    client *c;
    lib_def *libs;
    int n;
    int failed;
} restore_ctx;

static int restore_one(void *arg, const char *code, size_t len);

/* Compile each library of a verified payload (run lock held). */
static int restore_codes(restore_ctx *r, const char *p, size_t len) {
    size_t pos = 0, end = len - 10;
    rbuf code;
    rbuf_init(&code);
    while (pos < end && !r->failed) {
        unsigned char op = (unsigned char)p[pos++];
        if (op == RDB_OPCODE_FUNCTION) {
            resp_add_error(&r->c->out, "ERR Pre-GA function format not supported");
            r->failed = 1;
        } else if (op != RDB_OPCODE_FUNCTION2) {
            resp_add_error(&r->c->out, "ERR given type is not a function");
            r->failed = 1;
        } else if (rdb_read_string(p, end, &pos, &code) != 0) {
            resp_add_error(&r->c->out, ERR_BAD_PAYLOAD);
            r->failed = 1;
        } else {
            restore_one(r, code.buf ? code.buf : "", code.len);
        }
    }
    rbuf_free(&code);
    return r->failed ? -1 : 0;
}

static int restore_one(void *arg, const char *code, size_t len) {
    restore_ctx *r = arg;
    char err[512];
    r->libs = realloc(r->libs, sizeof(lib_def) * (size_t)(r->n + 1));
    if (lib_compile(cur.L, code, len, &r->libs[r->n], err, sizeof(err)) != 0) {
        resp_add_error(&r->c->out, err);
        r->failed = 1;
        return -1;
    }
    r->n++;
    return 0;
}

static void function_restore(client *c) {
    int policy = 0; /* 0 APPEND, 1 REPLACE, 2 FLUSH */
    if (c->argc == 4) {
        if (arg_is(c, 3, "append")) policy = 0;
        else if (arg_is(c, 3, "replace")) policy = 1;
        else if (arg_is(c, 3, "flush")) policy = 2;
        else {
            resp_add_error(&c->out, "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.");
            return;
        }
    } else if (c->argc != 3) {
        resp_add_error(&c->out, "ERR wrong number of arguments for 'function|restore' command");
        return;
    }
    const char *p = c->argv[2];
    size_t len = c->argvlen[2];
    if (rdb_verify_payload(p, len) != 0) {
        resp_add_error(&c->out, ERR_BAD_PAYLOAD);
        return;
    }
    uint8_t *taken = write_begin();
    restore_ctx r = {c, NULL, 0, 0};
    restore_codes(&r, p, len);
    lib_def **v = malloc(sizeof(lib_def *) * (size_t)(cur.n + r.n + 1));
    int n = 0;
    for (int i = 0; !r.failed && i < cur.n; i++) {
        if (policy == 2) break;
        int clash = -1;
        for (int j = 0; j < r.n; j++)
            if (!strcmp(r.libs[j].name, cur.libs[i].name)) clash = j;
        if (clash >= 0 && policy == 0) {
            resp_add_errorf(&c->out, "ERR Library %s already exists", cur.libs[i].name);
            r.failed = 1;
        } else if (clash < 0) {
            v[n++] = &cur.libs[i];
        }
    }
    for (int j = 0; j < r.n; j++) v[n++] = &r.libs[j];
    for (int j = 0; !r.failed && j < r.n; j++)
        if (fn_collision(c, v, n, &r.libs[j])) r.failed = 1;
    /* two restored libraries of one name: the payload itself clashes */
    for (int j = 0; !r.failed && j < r.n; j++)
        for (int k = j + 1; k < r.n && !r.failed; k++)
            if (!strcmp(r.libs[j].name, r.libs[k].name)) {
                resp_add_errorf(&c->out, "ERR Library %s already exists", r.libs[j].name);
                r.failed = 1;
            }
    int logged = !r.failed && write_libs(c, v, n) == 0;
    if (logged) resp_add_ok(&c->out);
    for (int j = 0; j < r.n; j++) lib_free(logged ? NULL : cur.L, &r.libs[j]);
    free(r.libs);
    free(v);
    write_end(taken);
}

/* Allowed while a script runs (script_gate): no run lock here. */
static void function_stats(client *c) {
    pthread_mutex_lock(&stats_lock);
    if (script_busy() && !running.name) {
        /* an EVAL script runs: Redis answers as to any other command */
        pthread_mutex_unlock(&stats_lock);
        resp_add_error(&c->out, "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.");
        return;
    }
    resp_add_map(&c->out, 2);
    add_str(c, "running_script");
    if (!running.name) {
        resp_add_null(&c->out);
    } else {
        resp_add_map(&c->out, 3);
        add_str(c, "name");
        add_str(c, running.name);
        add_str(c, "command");
        resp_add_array(&c->out, running.argc);
        for (int i = 0; i < running.argc; i++) resp_add_bulk(&c->out, running.argv[i], running.argvlen[i]);
        add_str(c, "duration_ms");
        resp_add_int(&c->out, (monotonic_us() - running.since_us) / 1000);
    }
    pthread_mutex_unlock(&stats_lock);
    add_str(c, "engines");
    resp_add_map(&c->out, 1);
    add_str(c, "LUA");
    resp_add_map(&c->out, 2);
    add_str(c, "libraries_count");
    resp_add_int(&c->out, atomic_load(&nlibs_now));
    add_str(c, "functions_count");
    resp_add_int(&c->out, atomic_load(&nfns_now));
}

static void function_kill(client *c) { script_kill_reply(c); }

static void function_help(client *c) {
    static const char *const lines[] = {
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Create a new library with the given library name and code.",
        "DELETE <LIBRARY NAME>",
        "    Delete the given library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Return general information on all the libraries:",
        "    * Library name",
        "    * The engine used to run the Library",
        "    * Library description",
        "    * Functions list",
        "    * Library code (if WITHCODE is given)",
        "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
        "STATS",
        "    Return information about the current function running:",
        "    * Function name",
        "    * Command used to run the function",
        "    * Duration in MS that the function is running",
        "    If no function is running, return nil",
        "    In addition, returns a list of available engines.",
        "KILL",
        "    Kill the current running function.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete all the libraries.",
        "    When called without the optional mode argument, the behavior is determined by the",
        "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
        "    * ASYNC: Asynchronously flush the libraries.",
        "    * SYNC: Synchronously flush the libraries.",
        "DUMP",
        "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
        "    control how to handle existing libraries (default APPEND):",
        "    * FLUSH: delete all existing libraries.",
        "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
        "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
        "      libraries with the new libraries (notice that even on this option there is a chance of failure",
        "      in case of functions name collision with another library).",
        "HELP",
        "    Prints this help.",
        NULL,
    };
    reply_help(c, lines);
}

void functionCommand(client *c) {
    static const subcommand subs[] = {
        {"load", -3, function_load},     {"delete", 3, function_delete},
        {"flush", -2, function_flush},   {"list", -2, function_list},
        {"dump", 2, function_dump},      {"restore", -3, function_restore},
        {"stats", 2, function_stats},    {"kill", 2, function_kill},
        {"help", 2, function_help},      {NULL, 0, NULL},
    };
    subcommand_dispatch(c, subs, "function");
}

/* ---------------- FCALL ---------------- */

static void set_running(client *c, const char *name) {
    pthread_mutex_lock(&stats_lock);
    if (name) {
        running.name = strdup(name);
        running.argc = c->argc;
        running.argv = malloc(sizeof(char *) * (size_t)c->argc);
        running.argvlen = malloc(sizeof(size_t) * (size_t)c->argc);
        for (int i = 0; i < c->argc; i++) {
            running.argv[i] = malloc(c->argvlen[i] ? c->argvlen[i] : 1);
            memcpy(running.argv[i], c->argv[i], c->argvlen[i]);
            running.argvlen[i] = c->argvlen[i];
        }
        running.since_us = monotonic_us();
    } else {
        for (int i = 0; i < running.argc; i++) free(running.argv[i]);
        free(running.argv);
        free(running.argvlen);
        free(running.name);
        memset(&running, 0, sizeof(running));
    }
    pthread_mutex_unlock(&stats_lock);
}

static int fn_exists(client *c) {
    script_run_lock();
    sync_libraries();
    int found = fn_find(c->argv[1], c->argvlen[1], NULL) != NULL;
    script_run_unlock();
    return found;
}

static void fcall_generic(client *c, int ro) {
    if (!fn_exists(c)) {
        resp_add_error(&c->out, "ERR Function not found");
        return;
    }
    long long numkeys;
    if (!string2ll(c->argv[2], c->argvlen[2], &numkeys)) {
        resp_add_error(&c->out, "ERR Bad number of keys provided");
        return;
    }
    if (numkeys < 0) {
        resp_add_error(&c->out, "ERR Number of keys can't be negative");
        return;
    }
    if (numkeys > c->argc - 3) {
        resp_add_error(&c->out, "ERR Number of keys can't be greater than number of args");
        return;
    }
    if (cluster_enabled() && script_route_keys(c, (int)numkeys)) return;
    uint8_t *taken = write_begin();
    /* The reply depends on the library: it leaves only once the entry that
     * loaded it is durable, as a read waits for the writes it saw (the
     * shard's lock is held: write_begin took every shard). */
    pthread_mutex_lock(&pend_lock);
    int sid = pend ? pend_sid : -1;
    pthread_mutex_unlock(&pend_lock);
    if (sid >= 0 && (!cluster_enabled() || cluster_is_primary(sid)))
        db_shard_read_dep(&c->x, &server.shards[sid]);
    fn_def *f = fn_find(c->argv[1], c->argvlen[1], NULL);
    if (!f) {
        resp_add_error(&c->out, "ERR Function not found");   /* deleted meanwhile */
    } else if (script_check_flags(c, f->flags | SCRIPT_FLAG_DECLARED, ro) == 0) {
        int nk = (int)numkeys;
        char *name = strdup(f->name);
        lua_rawgeti(cur.L, LUA_REGISTRYINDEX, f->ref);
        set_running(c, name);
        script_run(c, cur.L, name, f->flags | SCRIPT_FLAG_DECLARED, ro, nk, c->argv + 3, c->argvlen + 3,
                   c->argc - 3 - nk, c->argv + 3 + nk, c->argvlen + 3 + nk);
        set_running(c, NULL);
        free(name);
    }
    write_end(taken);
}

void fcallCommand(client *c) { fcall_generic(c, 0); }
void fcallRoCommand(client *c) { fcall_generic(c, 1); }
