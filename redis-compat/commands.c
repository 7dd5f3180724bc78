/* commands.c -- the command table: names, arity, flags and key positions.
 *
 * The values follow Redis 7.2's command table so that COMMAND INFO, arity
 * errors and cluster-aware key extraction behave the same. The dispatcher in
 * networking.c uses the key positions to take shard locks, so a command that
 * names keys outside these positions must not touch them.
 *
 * Lookup is a small open-addressing hash table over lower-cased names, built
 * once before the workers start and read-only afterwards. */
#include <ctype.h>
#include <pthread.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include "pubsub.h"
#include "commands.h"
#include "acl.h"
#include "rdb.h"
#include "config.h"
#include "notify.h"
#include "t_latency.h"
#include "util.h"
#include "edge_state.h"

#define W  CMD_WRITE
#define R  CMD_READONLY
#define D  CMD_DENYOOM
#define F  CMD_FAST
#define A  CMD_ADMIN
#define NA CMD_NOAUTH
#define L  CMD_LOADING
#define S  CMD_STALE
#define KS CMD_KEYSEARCH
#define PS CMD_PUBSUB
#define NS CMD_NOSCRIPT

#define CMD_ROW(name, proc, arity, flags, fk, lk, st, group, since, summary) \
    {name, proc, arity, flags, fk, lk, st, group, summary, since, NULL, NULL}
#define ROW(name, proc, arity, flags, fk, lk, st, group, since, summary) \
    {name, proc, arity, flags, fk, lk, st, group, summary, since, NULL, NULL}

/* Command families added after the foundation keep their rows in their own
 * cmds_*.def file, one CMD(...) per line (an X-macro): included once here to
 * declare the procs, and once at the end of the table to define the rows. */
#define CMD(name, proc, arity, flags, fk, lk, st, group, since, summary) cmd_proc proc;
#include "cmds_families.def"
#undef CMD

static struct rcommand command_table[] = {
    /* strings */
    ROW("get", getCommand, 2, R | F, 1, 1, 1, "string", "1.0.0", "Returns the string value of a key."),
    ROW("set", setCommand, -3, W | D, 1, 1, 1, "string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist."),
    ROW("setnx", setnxCommand, 3, W | D | F, 1, 1, 1, "string", "1.0.0", "Set the string value of a key only when the key doesn't exist."),
    ROW("setex", setexCommand, 4, W | D, 1, 1, 1, "string", "2.0.0", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist."),
    ROW("psetex", psetexCommand, 4, W | D, 1, 1, 1, "string", "2.6.0", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist."),
    ROW("getset", getsetCommand, 3, W | D | F, 1, 1, 1, "string", "1.0.0", "Returns the previous string value of a key after setting it to a new value."),
    ROW("getdel", getdelCommand, 2, W | F, 1, 1, 1, "string", "6.2.0", "Returns the string value of a key after deleting the key."),
    ROW("getex", getexCommand, -2, W | F, 1, 1, 1, "string", "6.2.0", "Returns the string value of a key after setting its expiration time."),
    ROW("mget", mgetCommand, -2, R | F, 1, -1, 1, "string", "1.0.0", "Atomically returns the string values of one or more keys."),
    ROW("mset", msetCommand, -3, W | D, 1, -1, 2, "string", "1.0.1", "Atomically creates or modifies the string values of one or more keys."),
    ROW("msetnx", msetnxCommand, -3, W | D, 1, -1, 2, "string", "1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist."),
    ROW("append", appendCommand, 3, W | D | F, 1, 1, 1, "string", "2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist."),
    ROW("strlen", strlenCommand, 2, R | F, 1, 1, 1, "string", "2.2.0", "Returns the length of a string value."),
    ROW("incr", incrCommand, 2, W | D | F, 1, 1, 1, "string", "1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    ROW("decr", decrCommand, 2, W | D | F, 1, 1, 1, "string", "1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist."),
    ROW("incrby", incrbyCommand, 3, W | D | F, 1, 1, 1, "string", "1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    ROW("decrby", decrbyCommand, 3, W | D | F, 1, 1, 1, "string", "1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist."),
    ROW("incrbyfloat", incrbyfloatCommand, 3, W | D | F, 1, 1, 1, "string", "2.6.0", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist."),
    ROW("getrange", getrangeCommand, 4, R, 1, 1, 1, "string", "2.4.0", "Returns a substring of the string stored at a key."),
    ROW("setrange", setrangeCommand, 4, W | D, 1, 1, 1, "string", "2.2.0", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist."),
    ROW("setbit", setbitCommand, 4, W | D, 1, 1, 1, "bitmap", "2.2.0", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist."),
    ROW("getbit", getbitCommand, 3, R | F, 1, 1, 1, "bitmap", "2.2.0", "Returns a bit value by offset."),
    ROW("bitcount", bitcountCommand, -2, R, 1, 1, 1, "bitmap", "2.6.0", "Counts the number of set bits (population counting) in a string."),
    /* keys */
    ROW("del", delCommand, -2, W, 1, -1, 1, "generic", "1.0.0", "Deletes one or more keys."),
    ROW("unlink", unlinkCommand, -2, W | F, 1, -1, 1, "generic", "4.0.0", "Asynchronously deletes one or more keys."),
    ROW("exists", existsCommand, -2, R | F, 1, -1, 1, "generic", "1.0.0", "Determines whether one or more keys exist."),
    ROW("type", typeCommand, 2, R | F, 1, 1, 1, "generic", "1.0.0", "Determines the type of value stored at a key."),
    ROW("expire", expireCommand, -3, W | F, 1, 1, 1, "generic", "1.0.0", "Sets the expiration time of a key in seconds."),
    ROW("pexpire", pexpireCommand, -3, W | F, 1, 1, 1, "generic", "2.6.0", "Sets the expiration time of a key in milliseconds."),
    ROW("expireat", expireatCommand, -3, W | F, 1, 1, 1, "generic", "1.2.0", "Sets the expiration time of a key to a Unix timestamp."),
    ROW("pexpireat", pexpireatCommand, -3, W | F, 1, 1, 1, "generic", "2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp."),
    ROW("expiretime", expiretimeCommand, 2, R | F, 1, 1, 1, "generic", "7.0.0", "Returns the expiration time of a key as a Unix timestamp."),
    ROW("pexpiretime", pexpiretimeCommand, 2, R | F, 1, 1, 1, "generic", "7.0.0", "Returns the expiration time of a key as a Unix milliseconds timestamp."),
    ROW("ttl", ttlCommand, 2, R | F, 1, 1, 1, "generic", "1.0.0", "Returns the expiration time in seconds of a key."),
    ROW("pttl", pttlCommand, 2, R | F, 1, 1, 1, "generic", "2.6.0", "Returns the expiration time in milliseconds of a key."),
    ROW("persist", persistCommand, 2, W | F, 1, 1, 1, "generic", "2.2.0", "Removes the expiration time of a key."),
    ROW("keys", keysCommand, 2, R | KS, 0, 0, 0, "generic", "1.0.0", "Returns all key names that match a pattern."),
    ROW("scan", scanCommand, -2, R, 0, 0, 0, "generic", "2.8.0", "Iterates over the key names in the database."),
    ROW("rename", renameCommand, 3, W, 1, 2, 1, "generic", "1.0.0", "Renames a key and overwrites the destination."),
    ROW("renamenx", renamenxCommand, 3, W | F, 1, 2, 1, "generic", "1.0.0", "Renames a key only when the target key name doesn't exist."),
    ROW("randomkey", randomkeyCommand, 1, R, 0, 0, 0, "generic", "1.0.0", "Returns a random key name from the database."),
    ROW("touch", touchCommand, -2, R | F, 1, -1, 1, "generic", "3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed."),
    ROW("dbsize", dbsizeCommand, 1, R | F, 0, 0, 0, "server", "1.0.0", "Returns the number of keys in the database."),
    ROW("flushdb", flushdbCommand, -1, W, 0, 0, 0, "server", "1.0.0", "Remove all keys from the current database."),
    ROW("flushall", flushallCommand, -1, W, 0, 0, 0, "server", "1.0.0", "Removes all keys from all databases."),
    ROW("select", selectCommand, 2, L | S | F, 0, 0, 0, "connection", "1.0.0", "Changes the selected database."),
    ROW("move", moveCommand, 3, W | F, 1, 1, 1, "generic", "1.0.0", "Moves a key to another database."),
    ROW("swapdb", swapdbCommand, 3, W | F, 0, 0, 0, "server", "4.0.0", "Swaps two Redis databases."),
    /* server and connection */
    ROW("ping", pingCommand, -1, F | S, 0, 0, 0, "connection", "1.0.0", "Returns the server's liveliness response."),
    ROW("echo", echoCommand, 2, F | L | S, 0, 0, 0, "connection", "1.0.0", "Returns the given string."),
    ROW("time", timeCommand, 1, F | L | S, 0, 0, 0, "server", "2.6.0", "Returns the server time."),
    ROW("shutdown", shutdownCommand, -1, A | L | S, 0, 0, 0, "server", "1.0.0", "Synchronously saves the database(s) to disk and shuts down the Redis server."),
    ROW("info", infoCommand, -1, L | S, 0, 0, 0, "server", "1.0.0", "Returns information and statistics about the server."),
    ROW("config", configCommand, -2, A | L | S, 0, 0, 0, "server", "2.0.0", "A container for server configuration commands."),
    ROW("client", clientCommand, -2, L | S, 0, 0, 0, "connection", "2.4.0", "A container for client connection commands."),
    ROW("command", commandCommand, -1, L | S, 0, 0, 0, "server", "2.8.13", "Returns detailed information about all commands."),
    ROW("wait", waitCommand, 3, 0, 0, 0, 0, "generic", "3.0.0", "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed."),
    ROW("waitaof", waitaofCommand, 4, 0, 0, 0, 0, "generic", "7.2.0", "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the master and/or replicas."),
    ROW("auth", authCommand, -2, NA | F | L | S, 0, 0, 0, "connection", "1.0.0", "Authenticates the connection."),
    ROW("hello", helloCommand, -1, NA | F | L | S, 0, 0, 0, "connection", "6.0.0", "Handshakes with the Redis server."),
    ROW("quit", quitCommand, -1, NA | F | L | S, 0, 0, 0, "connection", "1.0.0", "Closes the connection."),
    ROW("reset", resetCommand, 1, NA | F | L | S, 0, 0, 0, "connection", "6.2.0", "Resets the connection."),
    ROW("lastsave", lastsaveCommand, 1, F | L | S, 0, 0, 0, "server", "1.0.0", "Returns the Unix timestamp of the last successful save to disk."),
    ROW("save", saveCommand, 1, A, 0, 0, 0, "server", "1.0.0", "Synchronously saves the database(s) to disk."),
    ROW("bgsave", bgsaveCommand, -1, A, 0, 0, 0, "server", "1.0.0", "Asynchronously saves the database(s) to disk."),
    ROW("bgrewriteaof", bgrewriteaofCommand, 1, A, 0, 0, 0, "server", "1.0.0", "Asynchronously rewrites the append-only file to disk."),
    ROW("debug", debugCommand, -2, A, 0, 0, 0, "server", "1.0.0", "A container for debugging commands."),
    ROW("readonly", readonlyCommand, 1, F | L | S, 0, 0, 0, "cluster", "3.0.0", "Enables read-only queries for a connection to a Redis Cluster replica node."),
    ROW("readwrite", readwriteCommand, 1, F | L | S, 0, 0, 0, "cluster", "3.0.0", "Enables read-write queries for a connection to a Redis Cluster replica node."),
#define CMD(name, proc, arity, flags, fk, lk, st, group, since, summary) \
    ROW(name, proc, arity, flags, fk, lk, st, group, since, summary),
#include "cmds_families.def"
#undef CMD
};

/* The containers' subcommand rows (cmds_subcommands.def), one run per
 * container ended by a NULL-name row; subs_link points each container's
 * row at its run. */
#define SUB(name, arity, flags, fk, lk, st, group, since, summary, complexity) \
    {name, NULL, arity, flags, fk, lk, st, group, summary, since, NULL, complexity},
#define SUBS_END() {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL},
static struct rcommand sub_table[] = {
#include "cmds_subcommands.def"
};
#undef SUB
#undef SUBS_END

#define NCOMMANDS ((int)(sizeof(command_table) / sizeof(command_table[0])))
#define NSUBROWS ((int)(sizeof(sub_table) / sizeof(sub_table[0])))
#define LOOKUP_SLOTS 1024 /* power of two, > 2 * NCOMMANDS */
_Static_assert(LOOKUP_SLOTS > 2 * NCOMMANDS, "grow LOOKUP_SLOTS");

/* This file's state, one per server (server.h). */
struct cmdnames_state {
    struct rcommand *lookup_slots[LOOKUP_SLOTS];
    pthread_once_t lookup_once;
    const char *renamed[NCOMMANDS];
    /* INFO commandstats: command rows, then subcommand rows */
    struct cmd_stats stats[NCOMMANDS + NSUBROWS];
};

void cmdnames_state_new(void) {
    struct cmdnames_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->lookup_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    server.edge_state->cmdnames = st;
}

void cmdnames_state_free(void) { free(server.edge_state->cmdnames); }

#define lookup_slots (server.edge_state->cmdnames->lookup_slots)
#define lookup_once (server.edge_state->cmdnames->lookup_once)

/* rename-command: the name a command is called by, when renamed; a
 * command renamed to "" is not found at all. Set once, before serving. */
#define renamed (server.edge_state->cmdnames->renamed)

static const char *called_name(const struct rcommand *c) {
    const char *r = renamed[c - command_table];
    return r ? r : c->name;
}

int commands_rename(char *err, size_t errlen) {
    const char *const *from, *const *to;
    int n = config_renames(&from, &to);
    for (int i = 0; i < n; i++) {
        int found = -1;
        for (int k = 0; k < NCOMMANDS && found < 0; k++)
            if (!strcasecmp(called_name(&command_table[k]), from[i])) found = k;
        if (found < 0) {
            snprintf(err, errlen, "rename-command %s: No such command in rename-command", from[i]);
            return -1;
        }
        for (int k = 0; k < NCOMMANDS && *to[i]; k++) {
            if (k != found && !strcasecmp(called_name(&command_table[k]), to[i])) {
                snprintf(err, errlen, "rename-command %s %s: Target command name already exists",
                         from[i], to[i]);
                return -1;
            }
        }
        renamed[found] = to[i];
    }
    return 0;
}

static unsigned name_hash(const char *s, size_t len) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)tolower((unsigned char)s[i])) * 16777619u;
    return h;
}

static void subs_link(void) {
    for (int i = 0; i < NSUBROWS; i++) {
        size_t plen = strcspn(sub_table[i].name, "|");
        for (int k = 0; k < NCOMMANDS; k++)
            if (strlen(command_table[k].name) == plen &&
                !strncmp(command_table[k].name, sub_table[i].name, plen))
                command_table[k].subcommands = &sub_table[i];
        while (sub_table[i].name) i++;   /* to the run's end */
    }
}

/* The table and its subcommand links are the process's (every server's);
 * the names commands are called by (rename-command) are each server's. */
static pthread_once_t subs_once = PTHREAD_ONCE_INIT;

static void lookup_build(void) {
    pthread_once(&subs_once, subs_link);
    for (int i = 0; i < NCOMMANDS; i++) {
        const char *name = called_name(&command_table[i]);
        if (!*name) continue;   /* renamed to "": disabled */
        unsigned h = name_hash(name, strlen(name));
        while (lookup_slots[h & (LOOKUP_SLOTS - 1)]) h++;
        lookup_slots[h & (LOOKUP_SLOTS - 1)] = &command_table[i];
    }
}

struct rcommand *command_lookup(const char *name, size_t len) {
    pthread_once(&lookup_once, lookup_build);
    if (len == 0 || len > 64) return NULL;
    for (unsigned h = name_hash(name, len);; h++) {
        struct rcommand *c = lookup_slots[h & (LOOKUP_SLOTS - 1)];
        if (!c) return NULL;
        if (strlen(called_name(c)) == len && strncasecmp(called_name(c), name, len) == 0) return c;
    }
}

void command_foreach(void (*fn)(struct rcommand *cmd, void *arg), void *arg) {
    pthread_once(&lookup_once, lookup_build);
    for (int i = 0; i < NCOMMANDS; i++) fn(&command_table[i], arg);
}

int command_count(void) { return NCOMMANDS; }

int command_enabled(const struct rcommand *cmd) {
    if (cmd < command_table || cmd >= command_table + NCOMMANDS) return 1;   /* a subcommand row */
    return *called_name(cmd) != '\0';
}

int command_rows(void) { return NCOMMANDS + NSUBROWS; }

struct cmd_stats *command_stats(const struct rcommand *row) {
    struct cmd_stats *st = server.edge_state->cmdnames->stats;
    if (row >= command_table && row < command_table + NCOMMANDS) return &st[row - command_table];
    return &st[NCOMMANDS + (row - sub_table)];
}

const struct rcommand *command_subcommand(const struct rcommand *cmd, const char *name, size_t len) {
    for (const struct rcommand *s = cmd->subcommands; s && s->name; s++) {
        const char *sn = strchr(s->name, '|') + 1;
        if (strlen(sn) == len && !strncasecmp(sn, name, len)) return s;
    }
    return NULL;
}

struct rcommand *command_row(const struct rcommand *cmd, int argc, const char *const *argv,
                             const size_t *argvlen) {
    const struct rcommand *s = argc > 1 ? command_subcommand(cmd, argv[1], argvlen[1]) : NULL;
    return (struct rcommand *)(s ? s : cmd);
}

int command_keys(const struct rcommand *cmd, int argc, int *idx, int max) {
    if (cmd->firstkey <= 0) return 0;
    int last = cmd->lastkey >= 0 ? cmd->lastkey : argc + cmd->lastkey;
    int n = 0;
    for (int i = cmd->firstkey; i <= last && i < argc && n < max; i += cmd->keystep) idx[n++] = i;
    return n;
}

/* Commands that give their key count (numkeys) at argv[pos], the keys
 * following it, after a destination key at argv[1] for the STORE forms. */
static const struct { const char *name; int pos, dest; } numkeys_cmds[] = {
    { "zunionstore", 2, 1 }, { "zinterstore", 2, 1 }, { "zdiffstore", 2, 1 },
    { "zunion", 1, 0 }, { "zinter", 1, 0 }, { "zdiff", 1, 0 }, { "zintercard", 1, 0 },
    { "sintercard", 1, 0 }, { "lmpop", 1, 0 }, { "zmpop", 1, 0 }, { "blmpop", 2, 0 },
    { "bzmpop", 2, 0 },
};
/* Movable in Redis too, keys found here as if fixed: optional STORE keys
 * (the cluster check adds SORT's), scripts' keys (declared to the script
 * engine, which locks them itself). */
static const char *const other_movable[] = {
    "georadius", "georadiusbymember", "sort", "sort_ro", "eval", "evalsha", "eval_ro",
    "evalsha_ro", "fcall", "fcall_ro", NULL,
};

static int numkeys_find(const char *name) {
    for (size_t i = 0; i < sizeof numkeys_cmds / sizeof numkeys_cmds[0]; i++)
        if (strcmp(name, numkeys_cmds[i].name) == 0) return (int)i;
    return -1;
}

/* Every command's numkeys entry, found once: the dispatcher asks for every
 * command it runs (command_keys_argv), and twelve name compares per GET
 * were 1-2% of the server's CPU at pipeline 16 (perf). */
static signed char numkeys_of[NCOMMANDS];
static pthread_once_t numkeys_once = PTHREAD_ONCE_INIT;

static void numkeys_build(void) {
    for (int k = 0; k < NCOMMANDS; k++) numkeys_of[k] = (signed char)numkeys_find(command_table[k].name);
}

static int numkeys_entry(const struct rcommand *cmd) {
    if (cmd < command_table || cmd >= command_table + NCOMMANDS) return numkeys_find(cmd->name);
    pthread_once(&numkeys_once, numkeys_build);
    return numkeys_of[cmd - command_table];
}

/* The keys of a numkeys command; -1 when numkeys is not a valid count (the
 * caller falls back to every argument from firstkey: the command itself
 * will refuse, and locking more is safe). */
static int numkeys_keys(int e, int argc, const char *const *argv, const size_t *argvlen,
                        int *idx, int max) {
    int pos = numkeys_cmds[e].pos, n = 0;
    long long nk;
    if (pos >= argc || !string2ll(argv[pos], argvlen[pos], &nk) || nk < 1 || nk > argc - pos - 1)
        return -1;
    if (numkeys_cmds[e].dest && n < max) idx[n++] = numkeys_cmds[e].dest;
    for (int i = pos + 1; i <= pos + nk && n < max; i++) idx[n++] = i;
    return n;
}

/* Redis's movablekeys: keys that no fixed (firstkey, lastkey, step)
 * describes: XREAD and XREADGROUP (after STREAMS), MIGRATE (KEYS), the
 * numkeys commands, and other_movable. */
int command_movable_keys(const struct rcommand *cmd) {
    if (cmd->proc == xreadCommand || cmd->proc == xreadgroupCommand ||
        cmd->proc == migrateCommand || numkeys_entry(cmd) >= 0)
        return 1;
    for (int i = 0; other_movable[i]; i++)
        if (strcmp(cmd->name, other_movable[i]) == 0) return 1;
    return 0;
}

int command_numkeys_bad(const struct rcommand *cmd, int argc, const char *const *argv,
                        const size_t *argvlen) {
    int e = numkeys_entry(cmd), idx[1];
    return e >= 0 && numkeys_keys(e, argc, argv, argvlen, idx, 1) < 0;
}

int command_keys_argv(const struct rcommand *cmd, int argc, const char *const *argv,
                      const size_t *argvlen, int *idx, int max) {
    if (cmd->proc == migrateCommand) return migrate_keys(argc, argv, argvlen, idx, max);
    if (cmd->proc == xreadCommand || cmd->proc == xreadgroupCommand)
        return stream_read_keys(argc, argv, argvlen, idx, max);
    int e = numkeys_entry(cmd), n = -1;
    if (e >= 0) n = numkeys_keys(e, argc, argv, argvlen, idx, max);
    return n >= 0 ? n : command_keys(cmd, argc, idx, max);
}

/* The edge's hooks into the core, before recovery. (The collection types'
 * classes are the core's: boot.c registers them, types_init.) */
static void hooks_register(void) {
    notify_init();   /* the edge's keyspace notifications for expired keys */
    latency_init();  /* INFO errorstats counts every error reply */
    functions_register();   /* the FUNCTION libraries' log hook */
    pubsub_bus_register();  /* PUBLISH from the cluster's other nodes */
}

int commands_start(char *err, size_t errlen) {
    hooks_register();
    return acl_init(err, errlen);
}
