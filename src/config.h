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
#include "resp.h"

/* Fill server.cfg with the embedded defaults (127.0.0.1:6379, dir ./data...). */
void config_init_defaults(void);
/* Apply a rowan.conf file. 0 ok, -1 with a message "line N: ..." in err. */
int config_load_file(const char *path, char *err, size_t errlen);
/* Apply argv[start..argc) of the form --name value [value...]. 0 / -1. */
int config_parse_argv(int argc, char **argv, int start, char *err, size_t errlen);
/* Set one option. runtime != 0 refuses options that cannot change while
 * running, with Redis's CONFIG SET error texts. 0 ok, -1 with err filled. */
int config_set(const char *name, const char *value, int runtime, char *err, size_t errlen);
/* Append the CONFIG GET reply for a glob pattern (map of name -> value). */
void config_get_reply(resp_out *o, const char *pattern, size_t plen);
/* CONFIG GET with several patterns (Redis 7): one map, each option once. */
void config_get_reply_multi(resp_out *o, int npatterns, const char *const *patterns,
                            const size_t *plens);
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
/* Options changed by CONFIG SET that the running server must apply (e.g.
 * loglevel) are read from server.cfg directly by their users. */

#endif
