/* config.h -- configuration: defaults, rowan.conf, --options, CONFIG GET/SET.
 *
 * One table describes every option (name, type, where it lives in
 * server.cfg, bounds, whether CONFIG SET may change it at run time). The file
 * format and the option names follow redis.conf: "name value" per line, '#'
 * comments, quoted values allowed; the command line takes the same options as
 * "--name value". Sizes accept redis.conf units (1gb, 64mb, 100k). */
#ifndef ROWAN_CONFIG_H
#define ROWAN_CONFIG_H
#include <stddef.h>
#include "rbuf.h"

/* Fill server.cfg with the embedded defaults (127.0.0.1:6379, dir ./data...). */
void config_init_defaults(void);
/* Apply a rowan.conf file. 0 ok, -1 with a message "line N: ..." in err. */
int config_load_file(const char *path, char *err, size_t errlen);
/* Apply argv[start..argc) of the form --name value [value...]. 0 / -1. */
int config_parse_argv(int argc, char **argv, int start, char *err, size_t errlen);
/* Set one option. runtime != 0 refuses options that cannot change while
 * running, with Redis's CONFIG SET error texts. 0 ok, -1 with err filled. */
int config_set(const char *name, const char *value, int runtime, char *err, size_t errlen);
/* CONFIG GET with glob patterns (Redis 7 takes several): call fn(arg,
 * name, value) for each option (or alias) one of them matches, each once,
 * in a fixed order; returns how many (fn NULL: only counts). The edge
 * formats the reply (t_server.c). */
int config_get_matching(int npatterns, const char *const *patterns, const size_t *plens,
                        void (*fn)(void *arg, const char *name, const char *value), void *arg);
/* CONFIG SET name value [name value ...] with run-time rules: every name and
 * value is checked before any is stored, so a failure changes nothing.
 * 0 ok, -1 with err = the whole Redis error text ("ERR CONFIG SET failed..."). */
int config_set_many(int n, const char *const *names, const char *const *values,
                    char *err, size_t errlen);
/* CONFIG REWRITE: rewrite server.cfg.conf_file in place (comments and unknown
 * lines kept, atomically replaced). 0 ok, -1 with err = the whole Redis error
 * text ("ERR The server is running without a config file"...). */
int config_rewrite(char *err, size_t errlen);
/* rename-command pairs from the configuration (to "" disables the
 * command); returns how many. */
int config_renames(const char *const **from, const char *const **to);
/* Log a warning for each accepted directive whose absence of effect could
 * surprise (replicaof, tls-port, unixsocket set away from their defaults). */
void config_warn_no_effect(void);
/* The current value name of an enum option (INFO's maxmemory_policy). */
const char *config_enum_name(const char *option);
/* notify-keyspace-events: Redis 7.0's event classes and flag letters
 * (K E g $ l s h z x e t m d n; A = g$lshzxetd). */
enum {
    NOTIFY_KEYSPACE = 1 << 0, NOTIFY_KEYEVENT = 1 << 1, NOTIFY_GENERIC = 1 << 2,
    NOTIFY_STRING = 1 << 3, NOTIFY_LIST = 1 << 4, NOTIFY_SET = 1 << 5, NOTIFY_HASH = 1 << 6,
    NOTIFY_ZSET = 1 << 7, NOTIFY_EXPIRED = 1 << 8, NOTIFY_EVICTED = 1 << 9,
    NOTIFY_STREAM = 1 << 10, NOTIFY_KEY_MISS = 1 << 11, NOTIFY_MODULE = 1 << 13,
    NOTIFY_NEW = 1 << 14,
    NOTIFY_ALL = NOTIFY_GENERIC | NOTIFY_STRING | NOTIFY_LIST | NOTIFY_SET | NOTIFY_HASH |
                 NOTIFY_ZSET | NOTIFY_EXPIRED | NOTIFY_EVICTED | NOTIFY_STREAM | NOTIFY_MODULE,
};
/* "KEA" -> flags; -1 on a character that names no class. */
int keyspace_events_parse(const char *s);
/* flags -> Redis's canonical text (CONFIG GET); buf of at least 20 bytes. */
void keyspace_events_string(int flags, char *buf);

/* CONFIG REWRITE's `user` lines: the ACL (redis-compat/acl.c) registers a
 * function that appends its "user ...\n" lines, which replace the file's
 * (Redis writes every user, or none when an aclfile holds them). Without
 * one the file's user lines are kept as they are. */
void config_set_user_lines(void (*fn)(rbuf *out));
/* Options changed by CONFIG SET that the running server must apply (e.g.
 * loglevel) are read from server.cfg directly by their users. */

#endif
