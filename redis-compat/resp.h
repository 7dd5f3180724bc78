/* resp.h -- the RESP codec: request parsing and reply encoding.
 *
 * Requests: RESP2 multibulk (*<n>\r\n$<len>\r\n<bytes>\r\n...) and inline
 * commands (space separated, with Redis's quoting rules: "..." with \n \r \t
 * \b \a \\ \" \xHH escapes, '...' with \' only), pipelined back to back in one
 * buffer. The parser is incremental: it keeps its place inside a partially
 * received multibulk so a large value is never rescanned.
 *
 * Errors use Redis's exact texts (the caller sends "-ERR <text>" and then
 * closes the connection, as Redis does):
 *   "Protocol error: invalid multibulk length"
 *   "Protocol error: invalid bulk length"
 *   "Protocol error: expected '$', got 'X'"
 *   "Protocol error: too big inline request"
 *   "Protocol error: too big mbulk count string"
 *   "Protocol error: too big bulk count string"
 *   "Protocol error: unbalanced quotes in request"
 *   "Protocol error: unauthenticated multibulk length"
 *   "Protocol error: unauthenticated bulk length"
 *
 * Replies are appended to a resp_out buffer in RESP2 or RESP3 (HELLO 3); the
 * helpers pick the encoding so command code is written once. */
#ifndef ROWAN_RESP_H
#define ROWAN_RESP_H
#include <stddef.h>
#include <stdint.h>
#include "rbuf.h"

/* ---------------- request parser ---------------- */
enum { RESP_INCOMPLETE = 0, RESP_COMMAND = 1, RESP_REFUSED = 2, RESP_DROPPED = 3,
       RESP_ERROR = -1 };

/* Refuse a command at the header of an argument longer than
 * resp_limits.max_arg: name/nlen is the command's first argument (already
 * complete). Returns the error text (without '-') to refuse it, or NULL to
 * take the argument as usual. */
typedef const char *(*resp_arg_check_fn)(void *ctx, const char *name, size_t nlen);

typedef struct resp_limits {
    long long max_bulk_len;     /* proto-max-bulk-len, default 512 MiB */
    long long max_multibulk;    /* 1024*1024 (Redis 7 allows INT_MAX) */
    size_t max_inline;          /* PROTO_INLINE_MAX_SIZE, 64 KiB */
    /* Optional: a bulk header announcing more than max_arg bytes (for any
     * argument after the first) is shown to arg_check, which may refuse the
     * command before its bytes arrive. NULL: never. */
    long long max_arg;
    resp_arg_check_fn arg_check;
    void *arg_check_ctx;
    /* A password is required and the client has not given it: as Redis,
     * at most 10 arguments of at most 16384 bytes ("unauthenticated
     * multibulk length" / "unauthenticated bulk length"), so a stranger
     * cannot make the server buffer a large request. */
    int unauthenticated;
} resp_limits;

typedef struct resp_parser {
    resp_limits lim;
    /* parse state (private) */
    int in_multibulk;       /* inside a multibulk: remaining args below */
    long long mb_remaining;
    long long bulk_len;     /* -1 when expecting a '$' line */
    size_t pos;             /* bytes of the buffer already parsed for this command */
    int discarding;         /* the command was refused: its bytes are dropped */
    unsigned long long skip_left; /* discarding: bytes of the current bulk (+CRLF) to drop */
    const char *refusal;    /* discarding: arg_check's text */
    /* the command: argv[i] points into the caller's buffer (multibulk) or into
     * the parser's arena (inline); valid until the next resp_parse call */
    int argc, argv_cap;
    const char **argv;
    size_t *argvlen;
    rbuf arena;
    char err[128];
} resp_parser;

void resp_parser_init(resp_parser *p, const resp_limits *lim);
void resp_parser_free(resp_parser *p);
/* Heap bytes the parser holds (argv arrays and arena): CLIENT LIST's
 * argv-mem. A parser gives back what one large command made it allocate
 * when the next command starts (see resp.c), so a long-lived connection
 * does not keep it. */
size_t resp_parser_mem(const resp_parser *p);
/* Between commands: give back what one large command made the parser
 * allocate (resp_parse does it when the next command starts; an idle
 * connection's cron may do it sooner). A no-op while a command is partly
 * parsed. Invalidates the previous command's argv. */
void resp_parser_trim(resp_parser *p);
/* Parse one command from buf[0..len). Returns:
 *   RESP_COMMAND    p->argc/argv/argvlen describe it; *used bytes of buf were
 *                   consumed (the caller drops them after executing it).
 *                   argc may be 0 for an empty inline line; skip those.
 *   RESP_INCOMPLETE need more bytes; *used is 0 and buf must be passed again
 *                   (with more appended) next time: the parser remembers how
 *                   far it got. *need (if non-NULL) is a hint of how many
 *                   bytes are still missing for the current bulk, or 0.
 *   RESP_REFUSED    lim.arg_check refused the command at the header of a
 *                   long argument; p->refusal is its text (the whole error,
 *                   e.g. "ERR ..."). The caller drops the *used bytes parsed
 *                   so far and calls again: the connection goes on.
 *   RESP_DROPPED    *used more bytes of a refused command were parsed; the
 *                   caller drops them and calls again with the rest. (The
 *                   rest of the command is dropped as it arrives, never
 *                   kept; after its last byte, parsing goes on as usual.)
 *   RESP_ERROR      p->err holds Redis's message (without "-ERR ").
 */
int resp_parse(resp_parser *p, const char *buf, size_t len, size_t *used, size_t *need);

/* A large bulk received outside the buffer (networking.c). If the parser
 * is waiting for the payload of a bulk (its header parsed, RESP_INCOMPLETE
 * returned), resp_bulk_waiting returns its length and sets *off to where
 * its payload starts in the buffer; else -1. The caller may then take the
 * payload and its CRLF out of the buffer (which then ends at *off), and
 * once it has them all, call resp_bulk_external with where they are now:
 * that argument's argv is ptr (valid as long as the caller keeps it), and
 * parsing goes on at *off with the next header. */
long long resp_bulk_waiting(const resp_parser *p, size_t *off);
void resp_bulk_external(resp_parser *p, const char *ptr);
/* Every argument is in: the next resp_parse returns the command even with
 * no more bytes. */
int resp_parser_complete(const resp_parser *p);
/* The command resp_parse just returned (RESP_COMMAND, *used bytes) could
 * not run yet: the next call returns it again from the same buffer (the
 * caller keeps its first `used` bytes at the start), external arguments
 * included, without parsing it again. Multibulk commands only. */
void resp_parser_rewind(resp_parser *p, size_t used);

/* ---------------- reply encoding ---------------- */
/* A reply buffer. `limit` (0: none) is the length b may reach: an append
 * that would take it further is dropped whole and sets `overflow`, so a
 * reply can never grow memory past the limit, however many elements a
 * command tries to add. The owner decides what an overflow means (the
 * connection layer closes the client, as Redis does when a client passes
 * its output buffer limit). */
typedef struct resp_out {
    rbuf b;
    int proto;   /* 2 or 3 */
    int overflow;
    size_t limit;
} resp_out;

/* Would n more elements of at least `each` bytes fit under o->limit? If
 * not, sets o->overflow and returns 0: a command about to emit a reply
 * whose size it knows a lower bound of (SRANDMEMBER with a count) stops
 * before building any of it. */
int resp_out_fits(resp_out *o, unsigned long long n, size_t each);
/* No bulk string reply is shorter than "$0\r\n\r\n": a lower bound for
 * resp_out_fits. */
#define RESP_MIN_BULK 6

/* An empty reply buffer of protocol proto, without a limit. */
void resp_out_init(resp_out *o, int proto);
void resp_add_raw(resp_out *o, const void *p, size_t n);
void resp_add_simple(resp_out *o, const char *s);           /* +s */
void resp_add_ok(resp_out *o);                              /* +OK */
/* An error line. msg is the whole text after '-', e.g. "ERR syntax error" or
 * "WRONGTYPE Operation against a key holding the wrong kind of value". CR/LF
 * in msg are replaced by spaces, as Redis does. */
void resp_add_error(resp_out *o, const char *msg);
/* Called with every error resp_add_error(f) writes (INFO errorstats,
 * t_latency.c); NULL: none. */
extern void (*resp_error_hook)(const char *msg);
void resp_add_errorf(resp_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void resp_add_int(resp_out *o, long long v);                /* :v */
void resp_add_bulk(resp_out *o, const void *p, size_t n);   /* $n */
void resp_add_bulkstr(resp_out *o, const char *s);
void resp_add_bulkll(resp_out *o, long long v);             /* integer as bulk */
/* Verbatim-ish text for INFO etc.: RESP3 '=' verbatim "txt", RESP2 bulk. */
void resp_add_verbatim(resp_out *o, const char *p, size_t n);
void resp_add_null(resp_out *o);                            /* RESP2 $-1, RESP3 _ */
void resp_add_null_array(resp_out *o);                      /* RESP2 *-1, RESP3 _ */
void resp_add_array(resp_out *o, long long n);              /* *n */
void resp_add_map(resp_out *o, long long npairs);           /* RESP3 %n, RESP2 *2n */
void resp_add_set(resp_out *o, long long n);                /* RESP3 ~n, RESP2 *n */
void resp_add_push(resp_out *o, long long n);               /* RESP3 >n, RESP2 *n */
/* A double: RESP3 ',' type; RESP2 a bulk string in Redis's %.17g style
 * ("inf"/"-inf"). */
void resp_add_double(resp_out *o, double d);
void resp_add_bool(resp_out *o, int v);                     /* RESP3 #t/#f, RESP2 :1/:0 */


#endif
