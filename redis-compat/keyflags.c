/* keyflags.c -- the flags of each key a command names, as Redis 7.0's key
 * specs give them (COMMAND GETKEYSANDFLAGS).
 *
 * Rowan's command table has key positions (firstkey, lastkey, step), not
 * Redis's key specs. Most commands have one kind of key, described by
 * their write/read flag: "RW update" or "RO access". The commands below
 * differ: their first key has `first`, every other key `rest` (a
 * destination then sources, a source then a destination). SET, BITFIELD
 * and XGROUP depend on their arguments, as Redis computes them. */
#include <string.h>
#include <strings.h>
#include "commands.h"
#include "util.h"

static const struct { const char *name, *first, *rest; } key_flags[] = {
    /* containers whose key-taking subcommands all say so */
    { "object", "RO", "RO" },
    { "memory", "RO", "RO" },
    { "append", "RW insert", "RW insert" },
    { "bitop", "OW update", "RO access" },
    { "blmove", "RW access delete", "RW insert" },
    { "blmpop", "RW access delete", "RW access delete" },
    { "blpop", "RW access delete", "RW access delete" },
    { "brpop", "RW access delete", "RW access delete" },
    { "brpoplpush", "RW access delete", "RW insert" },
    { "bzmpop", "RW access delete", "RW access delete" },
    { "bzpopmax", "RW access delete", "RW access delete" },
    { "bzpopmin", "RW access delete", "RW access delete" },
    { "copy", "RO access", "OW update" },
    { "decr", "RW access update", "RW access update" },
    { "decrby", "RW access update", "RW access update" },
    { "del", "RM delete", "RM delete" },
    { "eval", "RW access update", "RW access update" },
    { "evalsha", "RW access update", "RW access update" },
    { "exists", "RO", "RO" },
    { "fcall", "RW access update", "RW access update" },
    { "georadius", "RO access", "OW update" },
    { "georadiusbymember", "RO access", "OW update" },
    { "geosearchstore", "OW update", "RO access" },
    { "getdel", "RW access delete", "RW access delete" },
    { "getex", "RW access update", "RW access update" },
    { "getset", "RW access update", "RW access update" },
    { "hdel", "RW delete", "RW delete" },
    { "hexists", "RO", "RO" },
    { "hincrby", "RW access update", "RW access update" },
    { "hincrbyfloat", "RW access update", "RW access update" },
    { "hlen", "RO", "RO" },
    { "hsetnx", "RW insert", "RW insert" },
    { "hstrlen", "RO", "RO" },
    { "incr", "RW access update", "RW access update" },
    { "incrby", "RW access update", "RW access update" },
    { "incrbyfloat", "RW access update", "RW access update" },
    { "linsert", "RW insert", "RW insert" },
    { "llen", "RO", "RO" },
    { "lmove", "RW access delete", "RW insert" },
    { "lmpop", "RW access delete", "RW access delete" },
    { "lpop", "RW access delete", "RW access delete" },
    { "lpush", "RW insert", "RW insert" },
    { "lpushx", "RW insert", "RW insert" },
    { "lrem", "RW delete", "RW delete" },
    { "ltrim", "RW delete", "RW delete" },
    { "migrate", "RW access delete", "RW access delete incomplete" },
    { "move", "RW access update", "RW access update" },
    { "mset", "OW update", "OW update" },
    { "msetnx", "OW insert", "OW insert" },
    { "pfadd", "RW insert", "RW insert" },
    { "pfcount", "RW access", "RW access" },
    { "pfdebug", "RW access", "RW access" },
    { "pfmerge", "RW access insert", "RO access" },
    { "psetex", "OW update", "OW update" },
    { "rename", "RW access delete", "OW update" },
    { "renamenx", "RW access delete", "OW insert" },
    { "restore", "OW update", "OW update" },
    { "restore-asking", "OW update", "OW update" },
    { "rpop", "RW access delete", "RW access delete" },
    { "rpoplpush", "RW access delete", "RW insert" },
    { "rpush", "RW insert", "RW insert" },
    { "rpushx", "RW insert", "RW insert" },
    { "sadd", "RW insert", "RW insert" },
    { "scard", "RO", "RO" },
    { "sdiffstore", "OW update", "RO access" },
    { "setbit", "RW access update", "RW access update" },
    { "setex", "OW update", "OW update" },
    { "setnx", "OW insert", "OW insert" },
    { "sinterstore", "RW update", "RO access" },
    { "sismember", "RO", "RO" },
    { "smove", "RW access delete", "RW insert" },
    { "sort", "RO access", "RO access" },
    { "spop", "RW access delete", "RW access delete" },
    { "spublish", "not_key", "not_key" },
    { "srem", "RW delete", "RW delete" },
    { "ssubscribe", "not_key", "not_key" },
    { "strlen", "RO", "RO" },
    { "sunionstore", "OW update", "RO access" },
    { "sunsubscribe", "not_key", "not_key" },
    { "touch", "RO", "RO" },
    { "type", "RO", "RO" },
    { "unlink", "RM delete", "RM delete" },
    { "watch", "RO", "RO" },
    { "xautoclaim", "RW delete", "RW delete" },
    { "xdel", "RW delete", "RW delete" },
    { "xlen", "RO", "RO" },
    { "xreadgroup", "RO access", "RO access" },
    { "xtrim", "RW delete", "RW delete" },
    { "zcard", "RO", "RO" },
    { "zdiffstore", "OW update", "RO access" },
    { "zincrby", "RW access update", "RW access update" },
    { "zinterstore", "OW update", "RO access" },
    { "zmpop", "RW access delete", "RW access delete" },
    { "zpopmax", "RW access delete", "RW access delete" },
    { "zpopmin", "RW access delete", "RW access delete" },
    { "zrangestore", "OW update", "RO access" },
    { "zrem", "RW delete", "RW delete" },
    { "zremrangebylex", "RW delete", "RW delete" },
    { "zremrangebyrank", "RW delete", "RW delete" },
    { "zremrangebyscore", "RW delete", "RW delete" },
    { "zunionstore", "OW update", "RO access" },
};

static int is_word(const char *a, size_t len, const char *w) {
    return len == strlen(w) && strncasecmp(a, w, len) == 0;
}

/* SET: OW update, or RW access update with GET. BITFIELD: RO access when
 * it only has GET operations. (Redis's setGetKeys, bitfieldGetKeys.) */
static const char *variable_flags(const struct rcommand *cmd, int argc,
                                  const char *const *argv, const size_t *argvlen) {
    if (strcmp(cmd->name, "set") == 0) {
        for (int i = 3; i < argc; i++)
            if (is_word(argv[i], argvlen[i], "get")) return "RW access update";
        return "OW update";
    }
    if (strcmp(cmd->name, "bitfield") == 0) {
        for (int i = 2; i < argc; i++) {
            int rem = argc - i - 1;
            if (is_word(argv[i], argvlen[i], "get") && rem >= 2) i += 2;
            else if (is_word(argv[i], argvlen[i], "overflow") && rem >= 1) i += 1;
            else return "RW access update";   /* SET, INCRBY, or malformed */
        }
        return "RO access";
    }
    if (strcmp(cmd->name, "xgroup") == 0 && argc > 1) {   /* by subcommand */
        if (is_word(argv[1], argvlen[1], "create") || is_word(argv[1], argvlen[1], "createconsumer"))
            return "RW insert";
        if (is_word(argv[1], argvlen[1], "destroy") || is_word(argv[1], argvlen[1], "delconsumer"))
            return "RW delete";
    }
    return NULL;
}

const char *command_key_flags(const struct rcommand *cmd, int nth, int argc,
                              const char *const *argv, const size_t *argvlen) {
    const char *v = variable_flags(cmd, argc, argv, argvlen);
    if (v) return v;
    for (size_t i = 0; i < sizeof key_flags / sizeof key_flags[0]; i++)
        if (strcmp(cmd->name, key_flags[i].name) == 0) return nth ? key_flags[i].rest : key_flags[i].first;
    return (cmd->flags & CMD_WRITE) ? "RW update" : "RO access";
}
