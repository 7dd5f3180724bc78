/* commands.h -- the command table and the helpers command families share.
 *
 * Data flows: networking.c parses a request, looks the command up here,
 * checks arity/auth, locks the shards of its keys, calls cmd->proc, and the
 * type files (t_string.c, t_keys.c, t_server.c, ...) do the work through
 * src/store/db.h, writing replies with the resp_add_* helpers into c->out.
 *
 * Arity follows Redis: positive = exact argc, negative = at least -arity.
 * Key positions follow Redis: firstkey (0 = no keys), lastkey (-1 = last
 * argument, -2 = second to last...), keystep. */
#ifndef ROWAN_COMMANDS_H
#define ROWAN_COMMANDS_H
#include <stdint.h>
#include <stdatomic.h>
#include "client.h"

typedef void cmd_proc(client *c);

#define CMD_WRITE      (1u << 0)
#define CMD_READONLY   (1u << 1)
#define CMD_DENYOOM    (1u << 2)  /* refused up front when the pool is full */
#define CMD_ADMIN      (1u << 3)
#define CMD_NOAUTH     (1u << 4)  /* allowed before AUTH (AUTH, HELLO, QUIT) */
#define CMD_FAST       (1u << 5)
#define CMD_PUBSUB     (1u << 6)
#define CMD_NOSCRIPT   (1u << 7)
#define CMD_LOADING    (1u << 8)
#define CMD_STALE      (1u << 9)
#define CMD_KEYSEARCH  (1u << 10) /* scans the keyspace (KEYS, SCAN...) */

struct rcommand {
    const char *name;      /* lower case */
    cmd_proc *proc;
    int arity;
    uint32_t flags;
    int firstkey, lastkey, keystep;
    const char *group;     /* "string", "generic", "server", "connection"... */
    const char *summary;   /* for COMMAND DOCS */
    const char *since;
    const struct rcommand *subcommands; /* NULL-name terminated, or NULL */
    const char *complexity; /* COMMAND DOCS; NULL: not given (subcommand rows have it) */
};

/* A row's statistics (INFO commandstats): each server's own (issue 15),
 * in its edge state, so two servers of one process count apart. */
struct cmd_stats {
    _Atomic long long calls, usec, failed_calls, rejected_calls;
};
/* The calling thread's server's statistics of row (a command's row or a
 * subcommand's, command_row). */
struct cmd_stats *command_stats(const struct rcommand *row);

/* Apply the configuration's rename-command lines (before serving). 0 ok,
 * -1 with err for an unknown command or a name already taken. */
int commands_rename(char *err, size_t errlen);
/* Look a command up by name (case-insensitive); NULL if unknown. */
struct rcommand *command_lookup(const char *name, size_t len);
/* Iterate the table. */
void command_foreach(void (*fn)(struct rcommand *cmd, void *arg), void *arg);
int command_count(void);   /* top-level commands (COMMAND COUNT) */
int command_rows(void);
/* 0 for a command rename-command disabled (renamed to ""): COMMAND leaves
 * it out, as Redis does. */
int command_enabled(const struct rcommand *cmd);    /* every row, subcommands too (statistics slots) */
/* The subcommand row of a container ("config|get" for CONFIG and "get"),
 * NULL when cmd has no such subcommand. */
const struct rcommand *command_subcommand(const struct rcommand *cmd, const char *name, size_t len);
/* The row an invocation runs as, for statistics, CLIENT LIST's cmd= and
 * latency: its subcommand's row for a container, else cmd itself. */
struct rcommand *command_row(const struct rcommand *cmd, int argc, const char *const *argv,
                             const size_t *argvlen);
/* Keys of a command invocation: fills idx[] with argv positions, returns how
 * many (at most max). */
int command_keys(const struct rcommand *cmd, int argc, int *idx, int max);

/* command_keys for a command whose keys depend on its arguments (XREAD,
 * XREADGROUP); the same as command_keys for every other command. */
int command_keys_argv(const struct rcommand *cmd, int argc, const char *const *argv,
                      const size_t *argvlen, int *idx, int max);
/* 1 when cmd takes a key count (ZUNIONSTORE, LMPOP...) and argv's is not a
 * valid one (COMMAND GETKEYS: "Invalid arguments"). */
int command_numkeys_bad(const struct rcommand *cmd, int argc, const char *const *argv,
                        const size_t *argvlen);
/* keyflags.c: the flags of the nth key (0 first) of this invocation, as
 * Redis's key specs say ("RW access delete", "OW update"...), words
 * separated by spaces. */
const char *command_key_flags(const struct rcommand *cmd, int nth, int argc,
                              const char *const *argv, const size_t *argvlen);
/* Does cmd's key list depend on its arguments (command_keys_argv)? */
int command_movable_keys(const struct rcommand *cmd);
/* t_stream.c: the keys of XREAD / XREADGROUP (after STREAMS). */
int stream_read_keys(int argc, const char *const *argv, const size_t *argvlen, int *idx, int max);
/* The command layer's start, before recovery: the edge's hooks into the
 * core (keyspace notifications, error statistics, the FUNCTION libraries'
 * log hook), then the ACL (users from the configuration and the aclfile).
 * -1 with err set when the ACL configuration is bad (the server must not
 * start). The collection types are the core's (src/types/types.h). */
int commands_start(char *err, size_t errlen);
void functions_register(void);   /* t_function.c */

/* t_introspect.c: record a command that ran duration_us microseconds in the
 * slow log when it is slower than slowlog-log-slower-than (client_call). */
void slowlog_maybe_add(client *c, long long duration_us);

/* ---- shared error texts (exactly Redis's) ---- */
#define ERR_SYNTAX     "ERR syntax error"
#define ERR_NOTINT     "ERR value is not an integer or out of range"
#define ERR_NOTFLOAT   "ERR value is not a valid float"
#define ERR_WRONGTYPE  "WRONGTYPE Operation against a key holding the wrong kind of value"
#define ERR_NOKEY      "ERR no such key"
#define ERR_OVERFLOW   "ERR increment or decrement would overflow"
#define ERR_DBINDEX    "ERR DB index is out of range"
#define ERR_NOAUTH     "NOAUTH Authentication required."
#define ERR_WRONGPASS  "WRONGPASS invalid username-password pair or user is disabled."
#define ERR_LOADING    "LOADING Redis is loading the dataset in memory"

/* ---- argument helpers (reply with the Redis error and return -1 on bad input) ---- */
int arg_is(client *c, int i, const char *lit);   /* case-insensitive equality */
int arg_ll(client *c, int i, long long *v);      /* ERR_NOTINT */
int arg_ll_range(client *c, int i, long long min, long long max, long long *v, const char *errmsg);
int arg_double(client *c, int i, double *v);     /* ERR_NOTFLOAT */
int arg_ldouble(client *c, int i, long double *v);
int arg_cursor(client *c, int i, uint64_t *cursor);  /* "ERR invalid cursor" */
/* HSCAN/SSCAN/ZSCAN options from argv[first]: COUNT n (>= 1), MATCH pattern
 * ("*" leaves *pat NULL), and NOVALUES when novalues is non-NULL. */
int arg_scan_options(client *c, int first, long long *count, const char **pat, size_t *plen,
                     int *novalues);
/* LMPOP's and ZMPOP's "[COUNT count]" from argv[first]: 1 when absent. */
int arg_mpop_count(client *c, int first, long long *count);

/* ---- SCAN-family replies ---- */
/* [cursor, [ ... then the caller's n elements */
void reply_scan_header(client *c, uint64_t cursor, long long n);
/* Elements written between begin and end are counted by the caller and
 * land after the header end writes. */
typedef struct scan_page {
    resp_out save;
} scan_page;
void scan_page_begin(client *c, scan_page *p);
void scan_page_end(client *c, scan_page *p, uint64_t cursor, long long n);

/* ---- replies of container commands (CONFIG, OBJECT, ROWAN...) ---- */
/* "ERR unknown subcommand 'foo'. Try CONFIG HELP." (argv[1] is the subcommand) */
void reply_unknown_sub(client *c, const char *container);
/* Redis's arity error for a subcommand: 'config|get'. */
void reply_sub_arity(client *c, const char *container);
/* HELP: an array of simple strings, one per line of the NULL-ended lines. */
void reply_help(client *c, const char *const *lines);
/* A container's subcommand (CLIENT, CLUSTER...) with its Redis arity (n
 * exact, -n at least n). */
typedef struct subcommand { const char *name; int arity; void (*fn)(client *c); } subcommand;
/* Run the row of the NULL-name-ended table that argv[1] names, or reply the
 * arity / unknown-subcommand error. container in lower case ("client"). */
void subcommand_dispatch(client *c, const subcommand *table, const char *container);
/* printf-append to an rbuf (INFO, CLUSTER NODES / INFO texts; t_server.c). */

/* ---- command procs, by family ---- */
/* t_string.c */
cmd_proc getCommand, setCommand, setnxCommand, setexCommand, psetexCommand,
    getsetCommand, getdelCommand, getexCommand, mgetCommand, msetCommand,
    msetnxCommand, appendCommand, strlenCommand, incrCommand, decrCommand,
    incrbyCommand, decrbyCommand, incrbyfloatCommand, getrangeCommand,
    setrangeCommand, setbitCommand, getbitCommand, bitcountCommand;
/* t_keys.c */
cmd_proc delCommand, unlinkCommand, existsCommand, typeCommand, expireCommand,
    pexpireCommand, expireatCommand, pexpireatCommand, expiretimeCommand,
    pexpiretimeCommand, ttlCommand, pttlCommand, persistCommand, keysCommand,
    scanCommand, renameCommand, renamenxCommand, randomkeyCommand,
    touchCommand, dbsizeCommand, flushdbCommand, flushallCommand,
    selectCommand, moveCommand, swapdbCommand;
/* t_server.c */
cmd_proc pingCommand, echoCommand, timeCommand, shutdownCommand, infoCommand,
    configCommand, clientCommand, commandCommand, waitCommand,
    waitaofCommand, authCommand, helloCommand, quitCommand, resetCommand,
    lastsaveCommand, saveCommand, bgsaveCommand, bgrewriteaofCommand,
    debugCommand, readonlyCommand, readwriteCommand;

#endif
