/* t_lolwut.c -- LOLWUT [VERSION version]: the version line.
 *
 * Redis answers a verbatim string "Redis ver. <version>\n"; for VERSION 5
 * and 6 it first draws a piece of generative art (Schotter, skyscrapers)
 * whose arguments it parses. Rowan draws no art: every version answers the
 * line alone, and extra arguments are ignored as Redis ignores them for
 * the versions without art. VERSION's value must be an integer, as in
 * Redis. */
#include <stdio.h>

#include "commands.h"
#include "server.h"
#include "util.h"

void lolwutCommand(client *c)
{
    long long ver;
    if (c->argc >= 3 && arg_is(c, 1, "version") &&
        !string2ll(c->argv[2], c->argvlen[2], &ver)) {
        resp_add_error(&c->out, ERR_NOTINT);
        return;
    }
    char line[64];
    int n = snprintf(line, sizeof(line), "Redis ver. %s\n", ROWAN_REDIS_COMPAT_VERSION);
    resp_add_verbatim(&c->out, line, (size_t)n);
}
