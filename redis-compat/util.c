/* util.c -- the command layer's argument parsers, on the core's string and
 * number rules (src/base/strutil.h): they reply with Redis's error text
 * themselves so command code stays short. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "commands.h"

/* ------------------------------------------------------------------ */
/* Command argument helpers                                            */
/* ------------------------------------------------------------------ */

int arg_is(client *c, int i, const char *lit) {
    if (i < 0 || i >= c->argc) return 0;
    return strcaseeqlen(c->argv[i], c->argvlen[i], lit);
}

int arg_ll(client *c, int i, long long *v) {
    if (!string2ll(c->argv[i], c->argvlen[i], v)) {
        resp_add_error(&c->out, ERR_NOTINT);
        return -1;
    }
    return 0;
}

/* errmsg, when given, replaces both the "not an integer" and the "out of
 * range" texts, as Redis's range getters do. */
int arg_ll_range(client *c, int i, long long min, long long max, long long *v,
                 const char *errmsg) {
    long long n;

    if (!string2ll(c->argv[i], c->argvlen[i], &n)) {
        resp_add_error(&c->out, errmsg ? errmsg : ERR_NOTINT);
        return -1;
    }
    if (n < min || n > max) {
        if (errmsg)
            resp_add_error(&c->out, errmsg);
        else  /* sic: Redis's wording */
            resp_add_errorf(&c->out, "ERR value is out of range, value must between %lld and %lld",
                            min, max);
        return -1;
    }
    *v = n;
    return 0;
}

int arg_double(client *c, int i, double *v) {
    if (!string2d(c->argv[i], c->argvlen[i], v)) {
        resp_add_error(&c->out, ERR_NOTFLOAT);
        return -1;
    }
    return 0;
}

int arg_ldouble(client *c, int i, long double *v) {
    if (!string2ld(c->argv[i], c->argvlen[i], v)) {
        resp_add_error(&c->out, ERR_NOTFLOAT);
        return -1;
    }
    return 0;
}

/* A SCAN-family cursor: an unsigned 64-bit decimal (Redis accepts "" as 0
 * and rejects spaces and overflow with "ERR invalid cursor"). */
int arg_cursor(client *c, int i, uint64_t *cursor) {
    char stackbuf[64], *buf = stackbuf, *end;
    size_t len = c->argvlen[i];
    unsigned long long v;
    int ok;

    if (len >= sizeof(stackbuf)) buf = malloc(len + 1);
    memcpy(buf, c->argv[i], len);
    buf[len] = '\0';
    errno = 0;
    v = strtoull(buf, &end, 10);
    ok = !(len && isspace((unsigned char)buf[0])) && *end == '\0' && errno != ERANGE;
    if (buf != stackbuf) free(buf);
    if (!ok) {
        resp_add_error(&c->out, "ERR invalid cursor");
        return -1;
    }
    *cursor = v;
    return 0;
}

int arg_scan_options(client *c, int first, long long *count, const char **pat, size_t *plen,
                     int *novalues) {
    for (int j = first; j < c->argc;) {
        int has_value = j + 1 < c->argc;
        if (arg_is(c, j, "count") && has_value) {
            if (arg_ll(c, j + 1, count) != 0) return -1;
            if (*count < 1) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return -1;
            }
            j += 2;
        } else if (arg_is(c, j, "match") && has_value) {
            *pat = c->argv[j + 1];
            *plen = c->argvlen[j + 1];
            /* "*" matches everything: skip matching altogether. */
            if (*plen == 1 && (*pat)[0] == '*') *pat = NULL;
            j += 2;
        } else if (novalues && arg_is(c, j, "novalues")) {
            *novalues = 1;
            j++;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    return 0;
}

/* The "[COUNT count]" tail of LMPOP, BLMPOP, ZMPOP and BZMPOP from
 * argv[first]: count >= 1, 1 when absent; anything else is a syntax error. */
int arg_mpop_count(client *c, int first, long long *count) {
    *count = -1;
    for (int j = first; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        if (*count == -1 && arg_is(c, j, "count") && more) {
            j++;
            if (arg_ll_range(c, j, 1, LLONG_MAX, count, "ERR count should be greater than 0") != 0)
                return -1;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            return -1;
        }
    }
    if (*count == -1) *count = 1;
    return 0;
}

/* A page of HSCAN, SSCAN (and any SCAN whose element count is known only
 * after the walk): the elements go to a side buffer, then scan_page_end
 * writes [cursor, [n elements]] with the real count in front of them. */
void scan_page_begin(client *c, scan_page *p) {
    p->save = c->out;
    rbuf_init(&c->out.b);
}

void scan_page_end(client *c, scan_page *p, uint64_t cursor, long long n) {
    rbuf items = c->out.b;
    c->out = p->save;
    reply_scan_header(c, cursor, n);
    resp_add_raw(&c->out, items.buf, items.len);
    rbuf_free(&items);
}

/* [cursor, [ followed by n elements the caller adds */
void reply_scan_header(client *c, uint64_t cursor, long long n) {
    char buf[32];
    int len = ull2string(buf, sizeof(buf), cursor);
    resp_add_array(&c->out, 2);
    resp_add_bulk(&c->out, buf, (size_t)len);
    resp_add_array(&c->out, n);
}

/* ------------------------------------------------------------------ */
/* Replies of container commands (CONFIG, OBJECT, ROWAN...)            */
/* ------------------------------------------------------------------ */

void reply_unknown_sub(client *c, const char *container) {
    /* Redis names the command as it was called (rename-command): its
     * argv[0] in upper case; container when that is not at hand. */
    char called[65];
    size_t len = c->argvlen[0] < sizeof(called) - 1 ? c->argvlen[0] : sizeof(called) - 1;
    for (size_t i = 0; i < len; i++) called[i] = (char)toupper((unsigned char)c->argv[0][i]);
    called[len] = '\0';
    int n = (int)(c->argvlen[1] > 128 ? 128 : c->argvlen[1]);
    resp_add_errorf(&c->out, "ERR unknown subcommand '%.*s'. Try %s HELP.", n, c->argv[1],
                    len ? called : container);
}

void reply_sub_arity(client *c, const char *container) {
    char sub[64];
    size_t n = c->argvlen[1] < sizeof(sub) - 1 ? c->argvlen[1] : sizeof(sub) - 1;
    for (size_t i = 0; i < n; i++) sub[i] = (char)tolower((unsigned char)c->argv[1][i]);
    sub[n] = '\0';
    resp_add_errorf(&c->out, "ERR wrong number of arguments for '%s|%s' command", container, sub);
}

void subcommand_dispatch(client *c, const subcommand *table, const char *container) {
    for (const subcommand *s = table; s->name; s++) {
        if (!arg_is(c, 1, s->name)) continue;
        if (s->arity >= 0 ? c->argc != s->arity : c->argc < -s->arity) reply_sub_arity(c, container);
        else s->fn(c);
        return;
    }
    char upper[32];
    size_t n = strlen(container) < sizeof(upper) - 1 ? strlen(container) : sizeof(upper) - 1;
    for (size_t i = 0; i < n; i++) upper[i] = (char)toupper((unsigned char)container[i]);
    upper[n] = '\0';
    reply_unknown_sub(c, upper);
}

void reply_help(client *c, const char *const *lines) {
    long long n = 0;
    while (lines[n]) n++;
    resp_add_array(&c->out, n);
    for (long long i = 0; i < n; i++) resp_add_simple(&c->out, lines[i]);
}
