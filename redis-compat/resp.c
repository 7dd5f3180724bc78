/* resp.c -- the RESP codec: an incremental request parser and the reply
 * encoders every command writes with.
 *
 * REQUEST PARSING
 *
 * A client's query buffer holds requests back to back. resp_parse() looks at
 * the start of the buffer and either returns one whole command, says it
 * needs more bytes, or reports a protocol error with Redis's exact text. As
 * in Redis's networking.c the first byte decides the kind of request: '*'
 * starts a multibulk, anything else is an inline command ending at '\n'.
 *
 * Multibulk:  *<count>\r\n  then <count> times  $<len>\r\n<len bytes>\r\n
 *
 * The parser is incremental for multibulk requests: between calls that
 * return RESP_INCOMPLETE it remembers how many arguments are still missing,
 * the length of the bulk it is waiting for and the offset it reached, so a
 * 500 MB value arriving in 16 KB reads is scanned once, not 30000 times.
 * Only *offsets* are remembered, never pointers: the caller is free to grow
 * (realloc) its buffer between calls. The offsets of the arguments seen so
 * far are kept in the arena; when the last argument arrives they become
 * argv pointers straight into the caller's buffer (no copy).
 *
 * A parser lives as long as its connection. Between commands it keeps argv
 * arrays for RESP_KEEP_ARGS arguments and RESP_KEEP_ARENA bytes of arena;
 * more, left by one large command (up to max_multibulk arguments), is freed
 * when the next command starts, so memory follows the current command, not
 * the largest one the connection ever sent.
 *
 * Large bulks outside the buffer: the caller may take the payload of a
 * bulk the parser is waiting for out of its buffer (resp_bulk_waiting,
 * resp_bulk_external: networking.c receives a large argument straight into
 * a buffer of its own). The argument is then remembered by pointer instead
 * of offset, and parsing resumes at the next header. So each argument's
 * record in the arena is an (offset, pointer) pair, pointer NULL for one in
 * the caller's buffer.
 *
 * Inline commands are rescanned from the start of the line on every call,
 * like Redis does; lines are short (at most lim.max_inline). The line is
 * split with Redis's sdssplitargs() rules into the arena, and argv points
 * there.
 *
 * Like Redis, the bytes after a bulk's payload and after a '\r' ending a
 * count line are skipped without being checked to be "\r\n", and a NUL
 * byte hides a line's end (see find_line_end()).
 *
 * Refusing at the header: a bulk header announcing more than lim.max_arg
 * bytes is shown to lim.arg_check with the command's name. If it refuses,
 * resp_parse returns RESP_REFUSED right there (the caller can answer before
 * the argument arrives) and the parser goes on through the rest of the
 * command in "discarding" mode: headers are still parsed and checked, but
 * every byte is handed back to the caller (RESP_DROPPED) as soon as it is
 * parsed. Nothing of it is ever held.
 *
 * The "line too long" errors (too big mbulk count string / bulk count string
 * / inline request) are decided from the position of the terminator rather
 * than from how many bytes happened to be buffered: a line whose terminator
 * lies more than lim.max_inline bytes from its start is an error even when
 * it arrived in one read. Redis gives the same answer whenever the data
 * arrives in reads of normal size; doing it this way makes the result
 * independent of how the stream was split into reads, which the fuzzer
 * checks, and bounds every scan to lim.max_inline bytes.
 *
 * REPLY ENCODING
 *
 * resp_add_* append one reply (or an aggregate header) to a resp_out in the
 * connection's protocol version. Each checks the whole piece against the
 * buffer's limit first: over it, the piece is dropped and `overflow` set
 * (see resp.h), so no command can push a buffer past its limit. RESP3-only types degrade to their RESP2
 * equivalents exactly as Redis does (map -> flat array, null -> $-1 or *-1,
 * double -> bulk string, bool -> integer). */
#include "resp.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESP_DEFAULT_MAX_BULK      (512LL * 1024 * 1024)
#define RESP_DEFAULT_MAX_MULTIBULK (1024LL * 1024)
#define RESP_DEFAULT_MAX_INLINE    ((size_t)64 * 1024)
/* Redis's limits before AUTH when a password is required. */
#define RESP_UNAUTH_MAX_MULTIBULK  10
#define RESP_UNAUTH_MAX_BULK       16384
/* What a parser keeps between commands: argv arrays for this many
 * arguments and this much arena. More, left by one large command, is given
 * back when the next one starts. */
#define RESP_KEEP_ARGS  1024
#define RESP_KEEP_ARENA ((size_t)128 * 1024)

/* ====================== request parser ====================== */

/* Internal result of parse_count(): the count line is done and arguments
 * follow. Never returned to the caller. */
#define RESP_CONTINUE 3

/* Where an argument of the multibulk being collected is: at off in the
 * caller's buffer, or at ext (outside it, resp_bulk_external). */
typedef struct arg_rec {
    size_t off;
    const char *ext;
} arg_rec;

static arg_rec arg_at(const resp_parser *p, int i) {
    arg_rec r;
    memcpy(&r, p->arena.buf + (size_t)i * sizeof(r), sizeof(r));
    return r;
}

/* Forget everything about the current command. The arrays stay allocated
 * for the next one. */
static void parser_reset(resp_parser *p) {
    p->in_multibulk = 0;
    p->mb_remaining = 0;
    p->bulk_len = -1;
    p->pos = 0;
    p->discarding = 0;
    p->skip_left = 0;
    p->refusal = NULL;
    p->argc = 0;
    p->arena.len = 0;
}

void resp_parser_init(resp_parser *p, const resp_limits *lim) {
    memset(p, 0, sizeof(*p));
    if (lim) p->lim = *lim;
    /* A zero (or negative) limit means "the Redis default": a parser that
     * rejects every request is never what the caller meant. */
    if (p->lim.max_bulk_len <= 0) p->lim.max_bulk_len = RESP_DEFAULT_MAX_BULK;
    if (p->lim.max_multibulk <= 0) p->lim.max_multibulk = RESP_DEFAULT_MAX_MULTIBULK;
    if (p->lim.max_inline == 0) p->lim.max_inline = RESP_DEFAULT_MAX_INLINE;
    rbuf_init(&p->arena);
    p->argv = NULL;
    p->argvlen = NULL;
    p->argv_cap = 0;
    parser_reset(p);
}

void resp_parser_free(resp_parser *p) {
    free(p->argv);
    free(p->argvlen);
    rbuf_free(&p->arena);
    p->argv = NULL;
    p->argvlen = NULL;
    p->argv_cap = 0;
    parser_reset(p);
}

size_t resp_parser_mem(const resp_parser *p) {
    return (size_t)p->argv_cap * (sizeof(*p->argv) + sizeof(*p->argvlen)) + p->arena.cap;
}

/* Between commands: give back what a large one left (the previous
 * command's argv is invalid from here on anyway). */
void resp_parser_trim(resp_parser *p) {
    if (p->in_multibulk) return;
    if (p->argv_cap > RESP_KEEP_ARGS) {
        free(p->argv);
        free(p->argvlen);
        p->argv = NULL;
        p->argvlen = NULL;
        p->argv_cap = 0;
    }
    if (p->arena.cap > RESP_KEEP_ARENA) rbuf_free(&p->arena);
}

static int proto_error(resp_parser *p, const char *what) {
    snprintf(p->err, sizeof(p->err), "Protocol error: %s", what);
    parser_reset(p);
    return RESP_ERROR;
}

/* Make room for one more argument in argv/argvlen. */
static void argv_grow(resp_parser *p) {
    if (p->argc < p->argv_cap) return;
    int cap = p->argv_cap ? p->argv_cap * 2 : 8;
    if (p->argv_cap > INT_MAX / 2) cap = INT_MAX;
    p->argv = rbuf_realloc_or_die((void *)p->argv, sizeof(*p->argv) * (size_t)cap);
    p->argvlen = rbuf_realloc_or_die(p->argvlen, sizeof(*p->argvlen) * (size_t)cap);
    p->argv_cap = cap;
}

/* Parse s[0..n) as a long long with Redis's string2ll() strictness: an
 * optional '-', then digits without leading zeros ("0" itself is fine), no
 * '+', no spaces, no overflow. Returns 1 on success, 0 otherwise. */
static int parse_ll(const char *s, size_t n, long long *out) {
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;

    if (n == 0 || n > 20) return 0;
    if (n == 1 && s[0] == '0') {
        *out = 0;
        return 1;
    }
    if (s[0] == '-') {
        neg = 1;
        i = 1;
        if (n == 1) return 0;
    }
    if (s[i] < '1' || s[i] > '9') return 0;
    for (; i < n; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9') return 0;
        d = (unsigned)(s[i] - '0');
        if (v > ULLONG_MAX / 10 || v * 10 > ULLONG_MAX - d) return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        *out = (v == (unsigned long long)LLONG_MAX + 1) ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX) return 0;
        *out = (long long)v;
    }
    return 1;
}

/* Look for the byte `term` ending the line that starts at buf[start], but
 * only within the first lim.max_inline+1 bytes: a line may be at most
 * max_inline bytes long before its terminator. Returns 1 with *at set to the
 * terminator's offset, 0 when it may still arrive, -1 when the line is too
 * long.
 *
 * Redis finds line ends with strchr() on its NUL-terminated query buffer,
 * so a NUL byte before the terminator hides it: the line never completes
 * and the connection ends with the "too big" error once enough bytes have
 * piled up. We do the same, which also means no line we accept contains a
 * NUL. */
static int find_line_end(const resp_parser *p, const char *buf, size_t len,
                         size_t start, char term, size_t *at) {
    size_t avail = len - start;
    size_t limit = p->lim.max_inline;
    size_t window = (limit < avail) ? limit + 1 : avail;
    const char *hit = memchr(buf + start, term, window);

    if (hit && memchr(buf + start, '\0', (size_t)(hit - (buf + start)))) hit = NULL;
    if (hit == NULL) return (avail > limit) ? -1 : 0;
    *at = (size_t)(hit - buf);
    return 1;
}

/* The multibulk count line "*<n>\r\n" at the start of buf. On success the
 * parser is positioned on the first "$" line and RESP_CONTINUE is returned;
 * a count <= 0 is an empty command, as in Redis. */
static int parse_count(resp_parser *p, const char *buf, size_t len, size_t *used) {
    size_t cr;
    long long n;
    int found = find_line_end(p, buf, len, 0, '\r', &cr);

    if (found < 0) return proto_error(p, "too big mbulk count string");
    /* We need the byte after '\r' too before the line counts as complete. */
    if (found == 0 || cr + 1 >= len) return RESP_INCOMPLETE;
    if (!parse_ll(buf + 1, cr - 1, &n) || n > p->lim.max_multibulk || n > INT_MAX)
        return proto_error(p, "invalid multibulk length");
    if (p->lim.unauthenticated && n > RESP_UNAUTH_MAX_MULTIBULK)
        return proto_error(p, "unauthenticated multibulk length");
    if (n <= 0) {
        parser_reset(p);
        *used = cr + 2;
        return RESP_COMMAND;
    }
    p->in_multibulk = 1;
    p->mb_remaining = n;
    p->bulk_len = -1;
    p->pos = cr + 2;
    p->argc = 0;
    p->arena.len = 0;
    return RESP_CONTINUE;
}

/* A bulk header announced an argument longer than lim.max_arg: let
 * lim.arg_check look at the command name (argument 0, complete by now).
 * If it refuses, the rest of the command is dropped as it arrives instead
 * of being buffered (see parse_args). Returns RESP_REFUSED or
 * RESP_CONTINUE. */
static int check_big_arg(resp_parser *p, const char *buf) {
    arg_rec a0 = arg_at(p, 0);
    const char *why = p->lim.arg_check(p->lim.arg_check_ctx, a0.ext ? a0.ext : buf + a0.off,
                                       p->argvlen[0]);
    if (why == NULL) return RESP_CONTINUE;
    p->discarding = 1;
    p->refusal = why;
    p->skip_left = (unsigned long long)p->bulk_len + 2;
    return RESP_REFUSED;
}

/* The "$<len>\r\n" line at p->pos. Returns RESP_CONTINUE with p->bulk_len
 * set, or RESP_INCOMPLETE / RESP_ERROR. */
static int parse_bulk_header(resp_parser *p, const char *buf, size_t len) {
    size_t cr, start = p->pos;
    long long n;
    int found = find_line_end(p, buf, len, start, '\r', &cr);

    if (found < 0) return proto_error(p, "too big bulk count string");
    if (found == 0 || cr + 1 >= len) return RESP_INCOMPLETE;
    if (buf[start] != '$') {
        char what[32];
        snprintf(what, sizeof(what), "expected '$', got '%c'", buf[start]);
        return proto_error(p, what);
    }
    if (!parse_ll(buf + start + 1, cr - start - 1, &n) || n < 0 || n > p->lim.max_bulk_len)
        return proto_error(p, "invalid bulk length");
    if (p->lim.unauthenticated && n > RESP_UNAUTH_MAX_BULK)
        return proto_error(p, "unauthenticated bulk length");
    p->bulk_len = n;
    p->pos = cr + 2;
    if (p->discarding) p->skip_left = (unsigned long long)n + 2;
    else if (n > p->lim.max_arg && p->lim.arg_check && p->argc > 0) return check_big_arg(p, buf);
    return RESP_CONTINUE;
}

/* Remember argument (offset, length) of the multibulk being collected. The
 * offset goes into the arena, not argv: the caller's buffer may move before
 * the command is complete. */
static void push_bulk_arg(resp_parser *p, size_t off, const char *ext, size_t n) {
    arg_rec r = {off, ext};
    argv_grow(p);
    rbuf_append(&p->arena, &r, sizeof(r));
    p->argvlen[p->argc++] = n;
}

/* All arguments are here: turn the remembered offsets into pointers into
 * the caller's buffer, which cannot move any more before the caller has
 * executed the command. */
static int finish_multibulk(resp_parser *p, const char *buf, size_t *used) {
    int argc = p->argc;
    for (int i = 0; i < argc; i++) {
        arg_rec r = arg_at(p, i);
        p->argv[i] = r.ext ? r.ext : buf + r.off;
    }
    *used = p->pos;
    parser_reset(p);
    p->argc = argc;
    return RESP_COMMAND;
}

/* Hand every byte of a refused command parsed so far back to the caller:
 * RESP_DROPPED with *used, or RESP_INCOMPLETE if there were none. Offsets
 * restart at the caller's next buffer. */
static int drop_parsed(resp_parser *p, size_t *used) {
    *used = p->pos;
    p->pos = 0;
    return *used ? RESP_DROPPED : RESP_INCOMPLETE;
}

/* Drop the payload of the current bulk of a refused command: whatever of
 * it is in buf now. Returns 1 when the bulk is done, 0 when more is to
 * come: nothing of a refused command is ever kept, so a 400 MB argument
 * costs no memory. */
static int discard_bulk(resp_parser *p, size_t len) {
    size_t avail = len - p->pos;
    size_t take = (unsigned long long)avail < p->skip_left ? avail : (size_t)p->skip_left;
    p->pos += take;
    p->skip_left -= take;
    return p->skip_left == 0;
}

/* Collect the arguments of a multibulk whose count line is already parsed,
 * resuming wherever the previous call stopped. While discarding, every
 * return hands back all bytes parsed so far (a partial header stays: it is
 * not parsed yet). */
static int parse_args(resp_parser *p, const char *buf, size_t len, size_t *used, size_t *need) {
    while (p->mb_remaining > 0) {
        if (p->bulk_len < 0) {
            int r = parse_bulk_header(p, buf, len);
            if (r == RESP_REFUSED) {
                *used = p->pos;
                p->pos = 0;
                return r;
            }
            if (r == RESP_INCOMPLETE && p->discarding) return drop_parsed(p, used);
            if (r != RESP_CONTINUE) return r;
        }
        if (p->discarding) {
            if (!discard_bulk(p, len)) return drop_parsed(p, used);
            p->bulk_len = -1;
            p->mb_remaining--;
            continue;
        }
        /* Payload plus the two bytes that end it. Compared in unsigned
         * arithmetic: bulk_len may be near LLONG_MAX with a huge limit. */
        size_t avail = len - p->pos;
        unsigned long long want = (unsigned long long)p->bulk_len + 2;
        if ((unsigned long long)avail < want) {
            *need = (size_t)(want - avail);
            return RESP_INCOMPLETE;
        }
        push_bulk_arg(p, p->pos, NULL, (size_t)p->bulk_len);
        p->pos += (size_t)want;
        p->bulk_len = -1;
        p->mb_remaining--;
    }
    if (p->discarding) {
        int r = drop_parsed(p, used);
        parser_reset(p);
        return r;
    }
    return finish_multibulk(p, buf, used);
}

/* isspace() in the C locale, independent of the process locale. */
static int is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte a backslash escape inside "..." stands for. Unknown escapes
 * stand for the character itself, so "\q" is "q" and "\\" is "\". */
static char unescape(char c) {
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'b': return '\b';
    case 'a': return '\a';
    default:  return c;
    }
}

/* Read one token of an inline command starting at s[*ip] (not a space),
 * writing its bytes at out[*op]. The rules are sdssplitargs()'s:
 *   - unquoted text runs until ' ', '\t', '\r' or '\n';
 *   - "..." understands \n \r \t \b \a, \xHH and "\<any>" for <any>;
 *   - '...' only understands \' ;
 *   - quotes may start mid-token (a"b c" is one token "ab c"), but a closing
 *     quote must be followed by a space or the end of the line.
 * Returns 0, or -1 for unbalanced quotes. */
static int read_token(const char *s, size_t n, size_t *ip, char *out, size_t *op) {
    size_t i = *ip, o = *op;
    int dq = 0, sq = 0;

    for (;;) {
        if (dq) {
            if (i == n) return -1;
            if (s[i] == '\\' && i + 3 < n && s[i + 1] == 'x' &&
                hex_value((unsigned char)s[i + 2]) >= 0 &&
                hex_value((unsigned char)s[i + 3]) >= 0) {
                out[o++] = (char)(hex_value((unsigned char)s[i + 2]) * 16 +
                                  hex_value((unsigned char)s[i + 3]));
                i += 4;
            } else if (s[i] == '\\' && i + 1 < n) {
                out[o++] = unescape(s[i + 1]);
                i += 2;
            } else if (s[i] == '"') {
                if (i + 1 < n && !is_space((unsigned char)s[i + 1])) return -1;
                i++;
                break;
            } else {
                out[o++] = s[i++];
            }
        } else if (sq) {
            if (i == n) return -1;
            if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\'') {
                out[o++] = '\'';
                i += 2;
            } else if (s[i] == '\'') {
                if (i + 1 < n && !is_space((unsigned char)s[i + 1])) return -1;
                i++;
                break;
            } else {
                out[o++] = s[i++];
            }
        } else {
            if (i == n) break;
            char c = s[i];
            /* Only these end a bare token; \v and \f are skipped between
             * tokens but kept inside one, as sdssplitargs() does. */
            if (c == ' ' || c == '\t' || c == '\r' || c == '\n') break;
            if (c == '"') dq = 1;
            else if (c == '\'') sq = 1;
            else out[o++] = c;
            i++;
        }
    }
    *ip = i;
    *op = o;
    return 0;
}

/* Split an inline line (never containing a NUL, see find_line_end(); so
 * the C-string based sdssplitargs() would see all of it) into arguments in
 * the arena. Every token is at most
 * as long as its source text, so reserving the line length up front keeps
 * the arena (and so the argv pointers into it) in place. */
static int split_inline(resp_parser *p, const char *s, size_t n) {
    size_t i = 0, o = 0;
    char *out;

    p->argc = 0;
    p->arena.len = 0;
    rbuf_reserve(&p->arena, n + 1);
    out = p->arena.buf;
    for (;;) {
        size_t start;
        while (i < n && is_space((unsigned char)s[i])) i++;
        if (i == n) break;
        start = o;
        if (read_token(s, n, &i, out, &o) < 0) return -1;
        argv_grow(p);
        p->argv[p->argc] = out + start;
        p->argvlen[p->argc] = o - start;
        p->argc++;
    }
    p->arena.len = o;
    return 0;
}

/* An inline command: one line ending in "\n" or "\r\n". */
static int parse_inline(resp_parser *p, const char *buf, size_t len, size_t *used) {
    size_t nl, linelen;
    int found = find_line_end(p, buf, len, 0, '\n', &nl);

    if (found < 0) return proto_error(p, "too big inline request");
    if (found == 0) return RESP_INCOMPLETE;
    linelen = nl;
    if (linelen > 0 && buf[linelen - 1] == '\r') linelen--;
    if (split_inline(p, buf, linelen) < 0) return proto_error(p, "unbalanced quotes in request");
    *used = nl + 1;
    return RESP_COMMAND;
}

int resp_parse(resp_parser *p, const char *buf, size_t len, size_t *used, size_t *need) {
    size_t used_dummy, need_dummy;

    if (used == NULL) used = &used_dummy;
    if (need == NULL) need = &need_dummy;
    *used = 0;
    *need = 0;
    /* The caller must pass at least the bytes we already parsed. If it did
     * not, start over rather than read past len. */
    if (p->in_multibulk && p->pos > len) parser_reset(p);

    if (!p->in_multibulk) {
        p->argc = 0;
        resp_parser_trim(p);
        if (len == 0) return RESP_INCOMPLETE;
        if (buf[0] != '*') return parse_inline(p, buf, len, used);
        int r = parse_count(p, buf, len, used);
        if (r != RESP_CONTINUE) return r;
    }
    return parse_args(p, buf, len, used, need);
}

long long resp_bulk_waiting(const resp_parser *p, size_t *off) {
    if (!p->in_multibulk || p->discarding || p->mb_remaining <= 0 || p->bulk_len < 0) return -1;
    *off = p->pos;
    return p->bulk_len;
}

void resp_bulk_external(resp_parser *p, const char *ptr) {
    push_bulk_arg(p, 0, ptr, (size_t)p->bulk_len);
    p->bulk_len = -1;
    p->mb_remaining--;
}

int resp_parser_complete(const resp_parser *p) {
    return p->in_multibulk && !p->discarding && p->mb_remaining == 0;
}

/* finish_multibulk reset the state but left the arena's records and argc:
 * put back what it needs to run again. */
void resp_parser_rewind(resp_parser *p, size_t used) {
    p->in_multibulk = 1;
    p->mb_remaining = 0;
    p->bulk_len = -1;
    p->pos = used;
    p->arena.len = (size_t)p->argc * sizeof(arg_rec);
}

/* ====================== reply encoding ====================== */

/* Decimal digits of v into dst (at least 20 bytes); returns the length. */
static size_t fmt_ll(char *dst, long long v) {
    char tmp[24];
    size_t n = 0, k = 0;
    unsigned long long u = (v < 0) ? 0ULL - (unsigned long long)v : (unsigned long long)v;

    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) dst[k++] = '-';
    while (n) dst[k++] = tmp[--n];
    return k;
}

void resp_out_init(resp_out *o, int proto) {
    rbuf_init(&o->b);
    o->proto = proto;
    o->overflow = 0;
    o->limit = 0;
}

/* Do n more bytes fit under o->limit? Once a reply overflowed, nothing
 * more is appended at all: the stream already lacks part of a reply, and
 * the owner closes the connection. */
static int out_room(resp_out *o, size_t n) {
    if (o->overflow) return 0;
    if (o->limit && (n > o->limit || o->b.len > o->limit - n)) {
        o->overflow = 1;
        return 0;
    }
    return 1;
}

/* Append bytes the caller already checked with out_room. */
static void out_put(resp_out *o, const void *p, size_t n) {
    rbuf_append(&o->b, p, n);
}

int resp_out_fits(resp_out *o, unsigned long long n, size_t each) {
    if (o->overflow) return 0;
    if (o->limit == 0 || each == 0) return 1;
    size_t room = o->limit > o->b.len ? o->limit - o->b.len : 0;
    if (n <= room / each) return 1;
    o->overflow = 1;
    return 0;
}

/* "<type><v>\r\n" into line (32 bytes): integers and every length/count
 * header. Returns its length. */
static size_t fmt_prefixed_ll(char *line, char type, long long v) {
    size_t n;

    line[0] = type;
    n = 1 + fmt_ll(line + 1, v);
    line[n++] = '\r';
    line[n++] = '\n';
    return n;
}

static void add_prefixed_ll(resp_out *o, char type, long long v) {
    char line[32];
    size_t n = fmt_prefixed_ll(line, type, v);
    if (out_room(o, n)) out_put(o, line, n);
}

/* "<lead>s\r\n" with CR and LF in s turned into spaces, so a message can
 * never end the line early and inject protocol. */
static void add_line(resp_out *o, char lead, const char *s) {
    size_t n = strlen(s);
    char *dst;

    if (!out_room(o, n + 3)) return;
    rbuf_reserve(&o->b, n + 3);
    dst = o->b.buf + o->b.len;
    dst[0] = lead;
    for (size_t i = 0; i < n; i++) dst[i + 1] = (s[i] == '\r' || s[i] == '\n') ? ' ' : s[i];
    dst[n + 1] = '\r';
    dst[n + 2] = '\n';
    o->b.len += n + 3;
}

/* A constant piece of protocol ("+OK\r\n", "$-1\r\n"...). */
static void add_const(resp_out *o, const char *s, size_t n) {
    if (out_room(o, n)) out_put(o, s, n);
}

void resp_add_raw(resp_out *o, const void *p, size_t n) {
    if (out_room(o, n)) out_put(o, p, n);
}

/* Status text is normally a constant, but sanitising it costs nothing and
 * means a status built from user data cannot break the stream either. */
void resp_add_simple(resp_out *o, const char *s) {
    add_line(o, '+', s);
}

void resp_add_ok(resp_out *o) {
    add_const(o, "+OK\r\n", 5);
}

void (*resp_error_hook)(const char *msg);

void resp_add_error(resp_out *o, const char *msg) {
    if (resp_error_hook) resp_error_hook(msg);
    add_line(o, '-', msg);
}

void resp_add_errorf(resp_out *o, const char *fmt, ...) {
    char small[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        resp_add_error(o, "ERR");
        return;
    }
    if ((size_t)n < sizeof(small)) {
        resp_add_error(o, small);
        return;
    }
    char *big = rbuf_realloc_or_die(NULL, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    resp_add_error(o, big);
    free(big);
}

void resp_add_int(resp_out *o, long long v) {
    add_prefixed_ll(o, ':', v);
}

/* "<type><len>\r\n<lead><p>\r\n": a bulk string (lead "") or a RESP3
 * verbatim string (lead "txt:"), all of it or nothing. */
static void add_blob(resp_out *o, char type, const char *lead, size_t leadlen, const void *p,
                     size_t n) {
    char line[32];
    size_t hn = fmt_prefixed_ll(line, type, (long long)(n + leadlen));

    if (n > SIZE_MAX - hn - leadlen - 2 || !out_room(o, hn + leadlen + n + 2)) {
        o->overflow = 1;
        return;
    }
    rbuf_reserve(&o->b, hn + leadlen + n + 2);
    out_put(o, line, hn);
    out_put(o, lead, leadlen);
    out_put(o, p, n);
    out_put(o, "\r\n", 2);
}

void resp_add_bulk(resp_out *o, const void *p, size_t n) {
    add_blob(o, '$', "", 0, p, n);
}

void resp_add_bulkstr(resp_out *o, const char *s) {
    resp_add_bulk(o, s, strlen(s));
}

void resp_add_bulkll(resp_out *o, long long v) {
    char digits[24];
    resp_add_bulk(o, digits, fmt_ll(digits, v));
}

void resp_add_verbatim(resp_out *o, const char *p, size_t n) {
    /* RESP3 verbatim: the payload starts with a 3-letter format and ':'. */
    if (o->proto < 3) add_blob(o, '$', "", 0, p, n);
    else add_blob(o, '=', "txt:", 4, p, n);
}

void resp_add_null(resp_out *o) {
    if (o->proto >= 3) add_const(o, "_\r\n", 3);
    else add_const(o, "$-1\r\n", 5);
}

void resp_add_null_array(resp_out *o) {
    if (o->proto >= 3) add_const(o, "_\r\n", 3);
    else add_const(o, "*-1\r\n", 5);
}

void resp_add_array(resp_out *o, long long n) {
    add_prefixed_ll(o, '*', n);
}

void resp_add_map(resp_out *o, long long npairs) {
    if (o->proto >= 3) add_prefixed_ll(o, '%', npairs);
    else add_prefixed_ll(o, '*', npairs * 2);
}

void resp_add_set(resp_out *o, long long n) {
    add_prefixed_ll(o, o->proto >= 3 ? '~' : '*', n);
}

void resp_add_push(resp_out *o, long long n) {
    add_prefixed_ll(o, o->proto >= 3 ? '>' : '*', n);
}

/* A double as Redis 7.0's addReplyDouble prints it: "%.17g", noise
 * digits included (0.1 is "0.10000000000000001"), "inf"/"-inf" spelled out.
 * (Redis 7.2 prints the shortest round-trip form; the version Rowan reports
 * is 7.0, and clients compare these texts.) buf needs 32 bytes. */
static int fmt_double(char *buf, size_t size, double d) {
    if (isinf(d)) return snprintf(buf, size, d > 0 ? "inf" : "-inf");
    /* printf writes a NaN whose sign bit is set as "-nan"; Redis's RESP3
     * double is "nan" whatever the sign */
    if (isnan(d)) return snprintf(buf, size, "nan");
    return snprintf(buf, size, "%.17g", d);
}

void resp_add_double(resp_out *o, double d) {
    char num[64];
    int n = fmt_double(num, sizeof(num), d);

    if (o->proto >= 3) {
        char line[72];
        line[0] = ',';
        memcpy(line + 1, num, (size_t)n);
        memcpy(line + 1 + n, "\r\n", 2);
        add_const(o, line, (size_t)n + 3);
    } else {
        resp_add_bulk(o, num, (size_t)n);
    }
}

void resp_add_bool(resp_out *o, int v) {
    if (o->proto >= 3) add_const(o, v ? "#t\r\n" : "#f\r\n", 4);
    else add_const(o, v ? ":1\r\n" : ":0\r\n", 4);
}

