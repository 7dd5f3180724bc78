/* test-resp.c -- unit tests for the RESP codec (redis-compat/resp.c).
 *
 * The parser tests run every stream through a small driver that plays the
 * part of a client connection: it appends bytes to a query buffer, calls
 * resp_parse() until it needs more, drops consumed bytes, and writes what
 * it saw into a transcript. Feeding the same stream whole, byte by byte and
 * in odd-sized chunks must give byte-identical transcripts; the byte-by-byte
 * driver also moves the buffer to a fresh allocation before every call, so
 * any pointer the parser kept across RESP_INCOMPLETE would be caught (under
 * ASan as a use-after-free, otherwise as a wrong transcript). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "strutil.h"
#include "unit.h"

#define LIT(s) s, sizeof(s) - 1

static resp_limits default_limits(void) {
    resp_limits lim = { .max_bulk_len = 512LL * 1024 * 1024, .max_multibulk = 1024 * 1024,
                        .max_inline = 64 * 1024 };
    return lim;
}

/* ---------------- transcript driver ---------------- */

/* Append "<argc>[len:bytes]...;" for one command. */
static void log_command(rbuf *log, const resp_parser *p) {
    char tmp[64];
    int n = snprintf(tmp, sizeof(tmp), "%d", p->argc);
    rbuf_append(log, tmp, (size_t)n);
    for (int i = 0; i < p->argc; i++) {
        n = snprintf(tmp, sizeof(tmp), "[%zu:", p->argvlen[i]);
        rbuf_append(log, tmp, (size_t)n);
        rbuf_append(log, p->argv[i], p->argvlen[i]);
        rbuf_append(log, "]", 1);
    }
    rbuf_append(log, ";", 1);
}

/* The largest query buffer the last run_stream held. */
static size_t run_peak;

/* Run stream through a parser fed in chunks of `chunk` bytes (0 = all at
 * once). When `move` is set the query buffer is copied to a new exact-size
 * allocation before each call and the old one is scribbled on and freed.
 * Returns the transcript (caller frees). */
static rbuf run_stream(const char *stream, size_t len, const resp_limits *lim,
                       size_t chunk, int move) {
    resp_parser p;
    rbuf q, log;
    size_t fed = 0;
    int done = 0;

    resp_parser_init(&p, lim);
    rbuf_init(&q);
    rbuf_init(&log);
    if (chunk == 0) chunk = len ? len : 1;
    run_peak = 0;
    while (!done && fed < len) {
        size_t n = (len - fed < chunk) ? len - fed : chunk;
        rbuf_append(&q, stream + fed, n);
        fed += n;
        if (q.len > run_peak) run_peak = q.len;
        for (;;) {
            size_t used = 12345, need = 0, buflen = q.len;
            char *buf = q.buf;
            if (move && buflen) {
                buf = malloc(buflen);
                memcpy(buf, q.buf, buflen);
            }
            int r = resp_parse(&p, buf, q.len, &used, &need);
            if (r == RESP_COMMAND) {
                log_command(&log, &p);
                rbuf_consume(&q, used);
            } else if (r == RESP_ERROR) {
                rbuf_append(&log, "ERR(", 4);
                rbuf_append(&log, p.err, strlen(p.err));
                rbuf_append(&log, ")", 1);
                done = 1;
            } else if (r == RESP_REFUSED) {
                rbuf_append(&log, "REFUSED(", 8);
                rbuf_append(&log, p.refusal, strlen(p.refusal));
                rbuf_append(&log, ");", 2);
                rbuf_consume(&q, used);
            } else if (r == RESP_DROPPED && lim->arg_check && used > 0) {
                rbuf_consume(&q, used);
            } else if (used != 0 || r == RESP_DROPPED) {
                rbuf_append(&log, "BADUSED", 7);
            }
            if (move && buflen) {
                memset(buf, 'Z', buflen);
                free(buf);
            }
            if (r == RESP_INCOMPLETE || r == RESP_ERROR) break;
        }
    }
    if (!done) {
        char tmp[64];
        int n = snprintf(tmp, sizeof(tmp), "INCOMPLETE(%zu)", q.len);
        rbuf_append(&log, tmp, (size_t)n);
    }
    rbuf_append(&log, "", 1);   /* NUL so failures can be printed */
    rbuf_free(&q);
    resp_parser_free(&p);
    return log;
}

/* Check that stream gives the transcript `want` in every feeding mode. */
static void check_stream_lim(const char *stream, size_t len, const char *want,
                             size_t wantlen, const resp_limits *lim, int line) {
    static const size_t chunks[] = { 0, 1, 2, 3, 7, 64, 1000 };
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        for (int move = 0; move < 2; move++) {
            /* Long streams fed in tiny moving pieces cost quadratic time
             * (count lines are rescanned, as in Redis); one mode is enough. */
            if (len > 4096 && chunks[c] != 0 && chunks[c] != 1000 && (move || chunks[c] != 1))
                continue;
            rbuf log = run_stream(stream, len, lim, chunks[c], move);
            int ok = (log.len == wantlen + 1 && memcmp(log.buf, want, wantlen) == 0);
            CHECK(ok);
            if (!ok) fprintf(stderr, "  line %d chunk %zu move %d: got \"%s\" want \"%.*s\"\n",
                             line, chunks[c], move, log.buf, (int)wantlen, want);
            rbuf_free(&log);
        }
    }
}

#define CHECK_STREAM(stream, want) do { \
    resp_limits _l = default_limits(); \
    check_stream_lim(LIT(stream), LIT(want), &_l, __LINE__); \
} while (0)
#define CHECK_STREAM_LIM(stream, want, lim) \
    check_stream_lim(LIT(stream), LIT(want), (lim), __LINE__)

/* One-shot parse of a NUL-free literal, for checks on a single result. */
static int parse_once(resp_parser *p, const char *s, size_t len, size_t *used, size_t *need) {
    return resp_parse(p, s, len, used, need);
}

/* ---------------- rbuf ---------------- */

static void test_rbuf(void) {
    rbuf b;
    rbuf_init(&b);
    CHECK(b.buf == NULL && b.len == 0 && b.cap == 0);
    rbuf_append(&b, NULL, 0);
    CHECK_EQ_LL(b.len, 0);
    rbuf_append(&b, "hello", 5);
    rbuf_append(&b, " world", 6);
    CHECK_EQ_LL(b.len, 11);
    CHECK(memcmp(b.buf, "hello world", 11) == 0);
    rbuf_consume(&b, 6);
    CHECK_EQ_LL(b.len, 5);
    CHECK(memcmp(b.buf, "world", 5) == 0);
    rbuf_reserve(&b, 100000);
    CHECK(b.cap - b.len >= 100000);
    CHECK(memcmp(b.buf, "world", 5) == 0);
    for (int i = 0; i < 100000; i++) rbuf_append(&b, "x", 1);
    CHECK_EQ_LL(b.len, 100005);
    rbuf_consume(&b, 1000000);
    CHECK_EQ_LL(b.len, 0);
    rbuf_free(&b);
    CHECK(b.buf == NULL && b.len == 0);
}

/* ---------------- multibulk ---------------- */

static void test_multibulk_pipeline(void) {
    static const char s[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n"
                            "*1\r\n$4\r\nPING\r\n";
    resp_parser p;
    size_t used, need;
    resp_limits lim = default_limits();

    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(parse_once(&p, s, sizeof(s) - 1, &used, &need), RESP_COMMAND);
    CHECK_EQ_LL(used, 31);
    CHECK_EQ_LL(p.argc, 3);
    /* Zero copy: arguments point straight into the caller's buffer. */
    CHECK(p.argv[0] == s + 8);
    CHECK(p.argv[1] == s + 17);
    CHECK(p.argv[2] == s + 24);
    CHECK_EQ_LL(p.argvlen[0], 3);
    CHECK_EQ_LL(p.argvlen[2], 5);
    CHECK(memcmp(p.argv[2], "value", 5) == 0);
    CHECK_EQ_LL(parse_once(&p, s + used, sizeof(s) - 1 - used, &used, &need), RESP_COMMAND);
    CHECK_EQ_LL(used, 14);
    CHECK_EQ_LL(p.argc, 1);
    CHECK(memcmp(p.argv[0], "PING", 4) == 0);
    CHECK_EQ_LL(parse_once(&p, "", 0, &used, &need), RESP_INCOMPLETE);
    CHECK_EQ_LL(used, 0);
    resp_parser_free(&p);

    CHECK_STREAM("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n*1\r\n$4\r\nPING\r\n",
                 "3[3:SET][1:k][5:value];1[4:PING];INCOMPLETE(0)");
    /* A pipeline mixing multibulk and inline requests. */
    CHECK_STREAM("PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nGET k\n*1\r\n$4\r\nQUIT\r\n*2\r\n$1",
                 "1[4:PING];2[4:ECHO][2:hi];2[3:GET][1:k];1[4:QUIT];INCOMPLETE(6)");
}

static void test_multibulk_binary(void) {
    /* \r\n and NUL inside values are just bytes. */
    static const char s[] = "*3\r\n$4\r\na\r\nb\r\n$0\r\n\r\n$3\r\n\0*\n\r\n";
    resp_parser p;
    size_t used;
    resp_limits lim = default_limits();

    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(resp_parse(&p, s, sizeof(s) - 1, &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(used, sizeof(s) - 1);
    CHECK_EQ_LL(p.argc, 3);
    CHECK_EQ_LL(p.argvlen[0], 4);
    CHECK(memcmp(p.argv[0], "a\r\nb", 4) == 0);
    CHECK_EQ_LL(p.argvlen[1], 0);          /* empty bulk */
    CHECK_EQ_LL(p.argvlen[2], 3);
    CHECK(memcmp(p.argv[2], "\0*\n", 3) == 0);
    resp_parser_free(&p);

    check_stream_lim(s, sizeof(s) - 1, LIT("3[4:a\r\nb][0:][3:\0*\n];INCOMPLETE(0)"),
                     &lim, __LINE__);
    CHECK_STREAM("*1\r\n$0\r\n\r\n", "1[0:];INCOMPLETE(0)");
}

static void test_multibulk_empty(void) {
    /* *0 and *-1 (and any count <= 0) are empty commands the caller skips. */
    CHECK_STREAM("*0\r\n", "0;INCOMPLETE(0)");
    CHECK_STREAM("*-1\r\n", "0;INCOMPLETE(0)");
    CHECK_STREAM("*-7\r\n*0\r\n*1\r\n$1\r\nx\r\n", "0;0;1[1:x];INCOMPLETE(0)");

    resp_parser p;
    size_t used;
    resp_limits lim = default_limits();
    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(resp_parse(&p, LIT("*-1\r\nPING\r\n"), &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(p.argc, 0);
    CHECK_EQ_LL(used, 5);
    resp_parser_free(&p);
}

static void test_multibulk_incremental(void) {
    resp_limits lim = default_limits();
    resp_parser p;
    size_t used, need;
    static const char full[] = "*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
    size_t cut = 21;   /* through "$10\r\n012" */

    resp_parser_init(&p, &lim);
    /* Partial: the parser keeps its place; need says how much is missing. */
    char *a = malloc(cut);
    memcpy(a, full, cut);
    CHECK_EQ_LL(resp_parse(&p, a, cut, &used, &need), RESP_INCOMPLETE);
    CHECK_EQ_LL(used, 0);
    CHECK_EQ_LL(need, 10 + 2 - 3);
    /* The caller reallocates (here: moves) its buffer, then more arrives. */
    char *b = malloc(sizeof(full) - 1);
    memcpy(b, a, cut);
    memset(a, '#', cut);
    free(a);
    memcpy(b + cut, full + cut, 5);
    CHECK_EQ_LL(resp_parse(&p, b, cut + 5, &used, &need), RESP_INCOMPLETE);
    CHECK_EQ_LL(need, 4);
    memcpy(b + cut + 5, full + cut + 5, sizeof(full) - 1 - cut - 5);
    CHECK_EQ_LL(resp_parse(&p, b, sizeof(full) - 1, &used, &need), RESP_COMMAND);
    CHECK_EQ_LL(used, sizeof(full) - 1);
    CHECK_EQ_LL(need, 0);
    CHECK_EQ_LL(p.argc, 2);
    CHECK(p.argv[0] == b + 8 && p.argv[1] == b + 18);
    CHECK(memcmp(p.argv[0], "GET", 3) == 0);
    CHECK(memcmp(p.argv[1], "0123456789", 10) == 0);
    free(b);

    /* need is 0 when not inside a bulk payload. */
    CHECK_EQ_LL(resp_parse(&p, LIT("*2\r\n$3"), &used, &need), RESP_INCOMPLETE);
    CHECK_EQ_LL(need, 0);
    resp_parser_free(&p);

    /* Byte by byte, in many chunk sizes, with the buffer moving: the same
     * transcript as one shot (check_stream does all of that). */
    CHECK_STREAM("*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n*1\r\n$4\r\nPING\r\n",
                 "2[3:GET][10:0123456789];1[4:PING];INCOMPLETE(0)");
    /* Cut right after "\r" of a count line, and after a payload. */
    CHECK_STREAM("*1\r", "INCOMPLETE(3)");
    CHECK_STREAM("*1\r\n$1\r", "INCOMPLETE(7)");
    CHECK_STREAM("*1\r\n$1\r\nx", "INCOMPLETE(9)");
    CHECK_STREAM("*1\r\n$1\r\nx\r", "INCOMPLETE(10)");

    /* A big argument (1 MiB) arriving in pieces. */
    size_t big = 1 << 20;
    rbuf s, want;
    rbuf_init(&s);
    rbuf_init(&want);
    char hdr[64];
    int n = snprintf(hdr, sizeof(hdr), "*2\r\n$3\r\nSET\r\n$%zu\r\n", big);
    rbuf_append(&s, hdr, (size_t)n);
    rbuf_reserve(&s, big + 2);
    for (size_t i = 0; i < big; i++) s.buf[s.len + i] = (char)('a' + i % 26);
    s.len += big;
    rbuf_append(&s, "\r\n", 2);
    n = snprintf(hdr, sizeof(hdr), "2[3:SET][%zu:", big);
    rbuf_append(&want, hdr, (size_t)n);
    rbuf_append(&want, s.buf + s.len - 2 - big, big);
    rbuf_append(&want, "];INCOMPLETE(0)", 15);
    for (size_t chunk = 4096; chunk <= 65536; chunk *= 4) {
        rbuf log = run_stream(s.buf, s.len, &lim, chunk, 0);
        CHECK(log.len == want.len + 1 && memcmp(log.buf, want.buf, want.len) == 0);
        rbuf_free(&log);
    }
    rbuf_free(&s);
    rbuf_free(&want);
}

/* A bulk taken out of the buffer (networking.c's large arguments): the
 * parser says where its payload starts, the caller truncates the buffer
 * there and hands the argument over by pointer; parsing goes on with the
 * next header. A rewound command comes back whole from the same bytes. */
static void test_external_bulk(void) {
    resp_parser p;
    resp_limits lim = {0};
    resp_parser_init(&p, &lim);
    char buf[256];
    size_t used, need, off;
    int n = snprintf(buf, sizeof(buf), "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123");
    CHECK(resp_parse(&p, buf, (size_t)n, &used, &need) == RESP_INCOMPLETE);
    CHECK_EQ_LL(resp_bulk_waiting(&p, &off), 10);
    CHECK(memcmp(buf + off, "0123", 4) == 0);
    CHECK(!resp_parser_complete(&p));
    static const char value[] = "0123456789\r\n";
    resp_bulk_external(&p, value);
    CHECK_EQ_LL(resp_bulk_waiting(&p, &off), -1);
    n = (int)off + snprintf(buf + off, sizeof(buf) - off, "$2\r\nEX\r\n");
    CHECK(resp_parse(&p, buf, (size_t)n, &used, &need) == RESP_COMMAND);
    CHECK_EQ_LL(used, (size_t)n);
    CHECK_EQ_LL(p.argc, 4);
    CHECK(p.argv[2] == value && p.argvlen[2] == 10);
    CHECK(memcmp(p.argv[3], "EX", 2) == 0 && p.argv[3] == buf + n - 4);
    /* held: the same command again, from a buffer that moved */
    resp_parser_rewind(&p, used);
    CHECK(resp_parser_complete(&p));
    char moved[256];
    memcpy(moved, buf, (size_t)n);
    size_t used2;
    CHECK(resp_parse(&p, moved, (size_t)n, &used2, &need) == RESP_COMMAND);
    CHECK_EQ_LL(used2, used);
    CHECK_EQ_LL(p.argc, 4);
    CHECK(p.argv[2] == value && p.argv[0] == moved + 8 && memcmp(p.argv[1], "k", 1) == 0);
    /* the last argument external: complete without another byte */
    n = snprintf(buf, sizeof(buf), "*2\r\n$4\r\nECHO\r\n$10\r\n");
    CHECK(resp_parse(&p, buf, (size_t)n, &used, &need) == RESP_INCOMPLETE);
    CHECK_EQ_LL(resp_bulk_waiting(&p, &off), 10);
    CHECK_EQ_LL(off, (size_t)n);
    resp_bulk_external(&p, value);
    CHECK(resp_parser_complete(&p));
    CHECK(resp_parse(&p, buf, (size_t)n, &used, &need) == RESP_COMMAND);
    CHECK(p.argc == 2 && p.argv[1] == value && used == (size_t)n);
    resp_parser_free(&p);
}

/* ---------------- inline ---------------- */

static void test_inline(void) {
    CHECK_STREAM("PING\r\n", "1[4:PING];INCOMPLETE(0)");
    CHECK_STREAM("PING\n", "1[4:PING];INCOMPLETE(0)");
    CHECK_STREAM("  SET   k \t v  \r\n", "3[3:SET][1:k][1:v];INCOMPLETE(0)");
    CHECK_STREAM("PING", "INCOMPLETE(4)");
    CHECK_STREAM("PING\r", "INCOMPLETE(5)");
    /* Empty lines are commands with argc 0. */
    CHECK_STREAM("\r\n\n   \r\nPING\n", "0;0;0;1[4:PING];INCOMPLETE(0)");
    /* Quotes. */
    CHECK_STREAM("SET \"a b\" 'c d'\r\n", "3[3:SET][3:a b][3:c d];INCOMPLETE(0)");
    CHECK_STREAM("SET \"\" ''\n", "3[3:SET][0:][0:];INCOMPLETE(0)");
    /* Double-quote escapes. */
    CHECK_STREAM("ECHO \"\\n\\r\\t\\b\\a\\\\\\\"\"\n", "2[4:ECHO][7:\n\r\t\b\a\\\"];INCOMPLETE(0)");
    CHECK_STREAM("ECHO \"\\x41\\x4a\\x4B\\x00z\"\n", "2[4:ECHO][5:AJK\0z];INCOMPLETE(0)");
    CHECK_STREAM("ECHO \"\\xzz\\q\\x4\"\n", "2[4:ECHO][6:xzzqx4];INCOMPLETE(0)");
    /* The line ends at the first \n, even inside quotes. */
    CHECK_STREAM("ECHO \"a\r\nb\"\n", "ERR(Protocol error: unbalanced quotes in request)");
    /* Single quotes: only \' is an escape. */
    CHECK_STREAM("ECHO 'it\\'s' 'a\\nb'\n", "3[4:ECHO][4:it's][4:a\\nb];INCOMPLETE(0)");
    /* Quotes can start mid-token; text runs on until a space. */
    CHECK_STREAM("a\"b c\" d'e f'\n", "2[4:ab c][4:de f];INCOMPLETE(0)");
    CHECK_STREAM("x\"y\"\n", "1[2:xy];INCOMPLETE(0)");
    /* \v and \f separate tokens only at their start (sdssplitargs quirk). */
    CHECK_STREAM("\va\vb c\n", "2[3:a\vb][1:c];INCOMPLETE(0)");
    CHECK_STREAM("\"a\"\vb\n", "2[1:a][1:b];INCOMPLETE(0)");
    /* Redis looks for line ends with strchr(): a NUL hides the newline, so
     * the request waits until it is "too big". */
    static const char nul[] = "ab\0cd ef\nPING\n";
    static const char nul2[] = "PING\nab\0cd ef\nPING\naaaaaaaaaaaaaaaaaaaaaaaaaaa";
    resp_limits lim = default_limits(), small = { .max_bulk_len = 5, .max_multibulk = 3, .max_inline = 16 };
    check_stream_lim(nul, sizeof(nul) - 1, LIT("INCOMPLETE(14)"), &lim, __LINE__);
    check_stream_lim(nul2, sizeof(nul2) - 1,
                     LIT("1[4:PING];ERR(Protocol error: too big inline request)"), &small, __LINE__);
    CHECK_STREAM("*1\0\r\n", "INCOMPLETE(5)");
    CHECK_STREAM("*1\r\n$1\0\r\n", "INCOMPLETE(9)");
    CHECK_STREAM_LIM("*1\r\n$1\0\r\n$1\r\na\r\n$1\r\nb\r\n", "ERR(Protocol error: too big bulk count string)", &small);
    CHECK_STREAM("*1\r\n$1\r\n\0\r\n", "1[1:\0];INCOMPLETE(0)");
    /* Inline arguments live in the parser's arena. */
    resp_parser p;
    size_t used;
    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(resp_parse(&p, LIT("GET \"k\\x21\"\r\nNEXT"), &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(used, 13);
    CHECK_EQ_LL(p.argc, 2);
    CHECK(p.argv[1] >= p.arena.buf && p.argv[1] + p.argvlen[1] <= p.arena.buf + p.arena.len);
    CHECK(p.argvlen[1] == 2 && memcmp(p.argv[1], "k!", 2) == 0);
    resp_parser_free(&p);
}

static void test_inline_unbalanced(void) {
    CHECK_STREAM("SET \"abc\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("SET 'abc\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("SET \"abc\"def\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("SET 'abc'def\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("SET \"abc\\\"\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("SET \"ab\\\n", "ERR(Protocol error: unbalanced quotes in request)");
    CHECK_STREAM("PING\nSET \"x\n", "1[4:PING];ERR(Protocol error: unbalanced quotes in request)");
    /* A closing quote followed by any whitespace is fine. */
    CHECK_STREAM("ECHO \"a\"\t'b'\r\n", "3[4:ECHO][1:a][1:b];INCOMPLETE(0)");
}

/* ---------------- errors and limits ---------------- */

static void test_errors(void) {
    CHECK_STREAM("*abc\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*01\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*+1\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("* 1\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*-0\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*1x\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*99999999999999999999\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*1048577\r\n", "ERR(Protocol error: invalid multibulk length)");
    CHECK_STREAM("*2147483648\r\n", "ERR(Protocol error: invalid multibulk length)");

    CHECK_STREAM("*1\r\n$-1\r\n", "ERR(Protocol error: invalid bulk length)");
    CHECK_STREAM("*1\r\n$\r\n", "ERR(Protocol error: invalid bulk length)");
    CHECK_STREAM("*1\r\n$abc\r\n", "ERR(Protocol error: invalid bulk length)");
    CHECK_STREAM("*1\r\n$01\r\n", "ERR(Protocol error: invalid bulk length)");
    CHECK_STREAM("*1\r\n$536870913\r\n", "ERR(Protocol error: invalid bulk length)");
    CHECK_STREAM("*1\r\n$9223372036854775808\r\n", "ERR(Protocol error: invalid bulk length)");

    CHECK_STREAM("*1\r\nX\r\n", "ERR(Protocol error: expected '$', got 'X')");
    CHECK_STREAM("*2\r\n$1\r\na\r\n:5\r\n", "ERR(Protocol error: expected '$', got ':')");
    CHECK_STREAM("*2\r\n$1\r\na\r\n*1\r\n", "ERR(Protocol error: expected '$', got '*')");
    /* Like Redis, the verdict waits for the end of the line. */
    CHECK_STREAM("*1\r\nX", "INCOMPLETE(5)");

    /* Count lines and inline requests over 64 KiB without a terminator. */
    size_t big = 64 * 1024 + 10;
    char *s = malloc(big + 8);
    resp_limits lim = default_limits();
    s[0] = '*';
    memset(s + 1, '1', big);
    check_stream_lim(s, big, LIT("ERR(Protocol error: too big mbulk count string)"), &lim, __LINE__);
    memcpy(s, "*1\r\n$", 5);
    check_stream_lim(s, big, LIT("ERR(Protocol error: too big bulk count string)"), &lim, __LINE__);
    memset(s, 'a', big);
    check_stream_lim(s, big, LIT("ERR(Protocol error: too big inline request)"), &lim, __LINE__);
    /* Up to 64 KiB it is only incomplete. */
    resp_parser p;
    size_t used;
    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(resp_parse(&p, s, 64 * 1024, &used, NULL), RESP_INCOMPLETE);
    CHECK_EQ_LL(resp_parse(&p, s, 64 * 1024 + 1, &used, NULL), RESP_ERROR);
    CHECK(strcmp(p.err, "Protocol error: too big inline request") == 0);
    /* After an error the parser starts afresh. */
    CHECK_EQ_LL(resp_parse(&p, LIT("*1\r\n$4\r\nPING\r\n"), &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(p.argc, 1);
    resp_parser_free(&p);
    free(s);
}

static void test_limits(void) {
    resp_limits lim = { .max_bulk_len = 5, .max_multibulk = 3, .max_inline = 16 };

    /* max_multibulk: 3 is fine, 4 is not. */
    CHECK_STREAM_LIM("*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n", "3[1:a][1:b][1:c];INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("*4\r\n", "ERR(Protocol error: invalid multibulk length)", &lim);
    /* max_bulk_len: 5 is fine, 6 is not. */
    CHECK_STREAM_LIM("*1\r\n$5\r\nhello\r\n", "1[5:hello];INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("*1\r\n$6\r\n", "ERR(Protocol error: invalid bulk length)", &lim);
    /* max_inline: a 16-byte line (terminator excluded) is fine, 17 is not,
     * and the answer does not depend on how the bytes arrived. */
    CHECK_STREAM_LIM("aaaaaaaaaaaaaaa\r\n", "1[15:aaaaaaaaaaaaaaa];INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("aaaaaaaaaaaaaaaa\n", "1[16:aaaaaaaaaaaaaaaa];INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("aaaaaaaaaaaaaaaaa\n", "ERR(Protocol error: too big inline request)", &lim);
    CHECK_STREAM_LIM("aaaaaaaaaaaaaaaa", "INCOMPLETE(16)", &lim);
    CHECK_STREAM_LIM("aaaaaaaaaaaaaaaaa", "ERR(Protocol error: too big inline request)", &lim);
    CHECK_STREAM_LIM("*000000000000001\r\n", "ERR(Protocol error: invalid multibulk length)", &lim);
    CHECK_STREAM_LIM("*0000000000000001\r\n", "ERR(Protocol error: too big mbulk count string)", &lim);
    CHECK_STREAM_LIM("*1\r\n$00000000000001\r\n", "ERR(Protocol error: invalid bulk length)", &lim);
    CHECK_STREAM_LIM("*1\r\n$000000000000001\r\n", "ERR(Protocol error: invalid bulk length)", &lim);
    CHECK_STREAM_LIM("*1\r\n$0000000000000001\r\n", "ERR(Protocol error: too big bulk count string)", &lim);
    /* A large count is not preallocated: only arguments present cost memory. */
    resp_limits huge = { .max_bulk_len = 512LL * 1024 * 1024, .max_multibulk = 2147483647LL,
                         .max_inline = 64 * 1024 };
    CHECK_STREAM_LIM("*2147483647\r\n$1\r\na\r\n", "INCOMPLETE(20)", &huge);
    CHECK_STREAM_LIM("*2147483648\r\n", "ERR(Protocol error: invalid multibulk length)", &huge);
    /* Before AUTH (a password is required): Redis's 10 arguments of at
     * most 16384 bytes, each with its own text, after the general checks. */
    resp_limits unauth = default_limits();
    unauth.unauthenticated = 1;
    CHECK_STREAM_LIM("*10\r\n$16384\r\n", "INCOMPLETE(13)", &unauth);
    CHECK_STREAM_LIM("*11\r\n", "ERR(Protocol error: unauthenticated multibulk length)", &unauth);
    CHECK_STREAM_LIM("*2147483648\r\n", "ERR(Protocol error: invalid multibulk length)", &unauth);
    CHECK_STREAM_LIM("*1\r\n$16385\r\n", "ERR(Protocol error: unauthenticated bulk length)", &unauth);
    CHECK_STREAM_LIM("*1\r\n$-1\r\n", "ERR(Protocol error: invalid bulk length)", &unauth);
    CHECK_STREAM_LIM("GET a b c d e f g h i j k l\r\n",
                     "13[3:GET][1:a][1:b][1:c][1:d][1:e][1:f][1:g][1:h][1:i][1:j][1:k][1:l];"
                     "INCOMPLETE(0)", &unauth);    /* inline lines are bounded anyway */
    /* NULL or zero limits mean Redis's defaults. */
    resp_parser p;
    resp_parser_init(&p, NULL);
    CHECK_EQ_LL(p.lim.max_bulk_len, 512LL * 1024 * 1024);
    CHECK_EQ_LL(p.lim.max_multibulk, 1024 * 1024);
    CHECK_EQ_LL(p.lim.max_inline, 64 * 1024);
    resp_parser_free(&p);
}

/* ---------------- reply encoding ---------------- */

/* Run `stmt` on a fresh resp_out of protocol `proto` and compare bytes. */
#define CHECK_REPLY(proto_, stmt, want) do { \
    resp_out o; \
    resp_out_init(&o, proto_); \
    stmt; \
    int _ok = (o.b.len == sizeof(want) - 1 && memcmp(o.b.buf, want, o.b.len) == 0); \
    CHECK(_ok); \
    if (!_ok) fprintf(stderr, "  line %d: got \"%.*s\"\n", __LINE__, (int)o.b.len, o.b.buf); \
    rbuf_free(&o.b); \
} while (0)

static void test_replies(void) {
    for (int proto = 2; proto <= 3; proto++) {
        CHECK_REPLY(proto, resp_add_raw(&o, "+X\r\n", 4), "+X\r\n");
        CHECK_REPLY(proto, resp_add_simple(&o, "PONG"), "+PONG\r\n");
        CHECK_REPLY(proto, resp_add_simple(&o, "a\r\nb"), "+a  b\r\n");
        CHECK_REPLY(proto, resp_add_ok(&o), "+OK\r\n");
        CHECK_REPLY(proto, resp_add_error(&o, "ERR syntax error"), "-ERR syntax error\r\n");
        CHECK_REPLY(proto, resp_add_error(&o, "ERR bad\r\nline\r"), "-ERR bad  line \r\n");
        CHECK_REPLY(proto, resp_add_errorf(&o, "ERR unknown command '%s'", "FOO\n"),
                    "-ERR unknown command 'FOO '\r\n");
        CHECK_REPLY(proto, resp_add_int(&o, 0), ":0\r\n");
        CHECK_REPLY(proto, resp_add_int(&o, -42), ":-42\r\n");
        CHECK_REPLY(proto, resp_add_int(&o, 9223372036854775807LL), ":9223372036854775807\r\n");
        CHECK_REPLY(proto, resp_add_int(&o, -9223372036854775807LL - 1), ":-9223372036854775808\r\n");
        CHECK_REPLY(proto, resp_add_bulk(&o, "a\r\n\0", 4), "$4\r\na\r\n\0\r\n");
        CHECK_REPLY(proto, resp_add_bulk(&o, NULL, 0), "$0\r\n\r\n");
        CHECK_REPLY(proto, resp_add_bulkstr(&o, "hello"), "$5\r\nhello\r\n");
        CHECK_REPLY(proto, resp_add_bulkll(&o, -123), "$4\r\n-123\r\n");
        CHECK_REPLY(proto, resp_add_array(&o, 3), "*3\r\n");
        CHECK_REPLY(proto, resp_add_array(&o, 0), "*0\r\n");
    }
    /* A long formatted error takes the heap path. */
    {
        resp_out o;
        resp_out_init(&o, 2);
        char big[1000];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        resp_add_errorf(&o, "ERR %s!", big);
        CHECK_EQ_LL(o.b.len, 1 + 4 + 999 + 1 + 2);
        CHECK(memcmp(o.b.buf, "-ERR xxx", 8) == 0);
        CHECK(memcmp(o.b.buf + o.b.len - 4, "x!\r\n", 4) == 0);
        rbuf_free(&o.b);
    }
    /* Types that differ between RESP2 and RESP3. */
    CHECK_REPLY(2, resp_add_verbatim(&o, "a:b", 3), "$3\r\na:b\r\n");
    CHECK_REPLY(3, resp_add_verbatim(&o, "a:b", 3), "=7\r\ntxt:a:b\r\n");
    CHECK_REPLY(2, resp_add_null(&o), "$-1\r\n");
    CHECK_REPLY(3, resp_add_null(&o), "_\r\n");
    CHECK_REPLY(2, resp_add_null_array(&o), "*-1\r\n");
    CHECK_REPLY(3, resp_add_null_array(&o), "_\r\n");
    CHECK_REPLY(2, resp_add_map(&o, 2), "*4\r\n");
    CHECK_REPLY(3, resp_add_map(&o, 2), "%2\r\n");
    CHECK_REPLY(2, resp_add_set(&o, 5), "*5\r\n");
    CHECK_REPLY(3, resp_add_set(&o, 5), "~5\r\n");
    CHECK_REPLY(2, resp_add_push(&o, 3), "*3\r\n");
    CHECK_REPLY(3, resp_add_push(&o, 3), ">3\r\n");
    CHECK_REPLY(2, resp_add_bool(&o, 1), ":1\r\n");
    CHECK_REPLY(2, resp_add_bool(&o, 0), ":0\r\n");
    CHECK_REPLY(3, resp_add_bool(&o, 7), "#t\r\n");
    CHECK_REPLY(3, resp_add_bool(&o, 0), "#f\r\n");
    CHECK_REPLY(2, resp_add_double(&o, 1.5), "$3\r\n1.5\r\n");
    CHECK_REPLY(3, resp_add_double(&o, 1.5), ",1.5\r\n");
    CHECK_REPLY(2, resp_add_double(&o, INFINITY), "$3\r\ninf\r\n");
    CHECK_REPLY(3, resp_add_double(&o, INFINITY), ",inf\r\n");
    CHECK_REPLY(2, resp_add_double(&o, -INFINITY), "$4\r\n-inf\r\n");
    CHECK_REPLY(3, resp_add_double(&o, -INFINITY), ",-inf\r\n");
    CHECK_REPLY(2, resp_add_double(&o, NAN), "$3\r\nnan\r\n");
    CHECK_REPLY(3, resp_add_double(&o, NAN), ",nan\r\n");
    /* A whole nested reply, as HGETALL would write it. */
    CHECK_REPLY(3, (resp_add_map(&o, 1), resp_add_bulkstr(&o, "f"), resp_add_double(&o, 0.1)),
                "%1\r\n$1\r\nf\r\n,0.10000000000000001\r\n");
    CHECK_REPLY(2, (resp_add_map(&o, 1), resp_add_bulkstr(&o, "f"), resp_add_double(&o, 0.1)),
                "*2\r\n$1\r\nf\r\n$19\r\n0.10000000000000001\r\n");
}

/* ---------------- number formatting ---------------- */

static void check_double(double d, const char *want, int line) {
    resp_out o;
    resp_out_init(&o, 3);
    resp_add_double(&o, d);
    size_t wl = strlen(want);
    int ok = o.b.len == wl + 3 && o.b.buf[0] == ',' && memcmp(o.b.buf + 1, want, wl) == 0 &&
             memcmp(o.b.buf + 1 + wl, "\r\n", 2) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  line %d: got \"%.*s\" want \",%s\"\n", line, (int)o.b.len, o.b.buf, want);
    rbuf_free(&o.b);
}
#define CHECK_DOUBLE(d, want) check_double((d), (want), __LINE__)

static void test_double_format(void) {
    CHECK_DOUBLE(1.5, "1.5");
    CHECK_DOUBLE(0.1, "0.10000000000000001")   /* Redis 7.0: %.17g */;
    CHECK_DOUBLE(1e300, "1.0000000000000001e+300");
    CHECK_DOUBLE(-1e300, "-1.0000000000000001e+300");
    CHECK_DOUBLE(INFINITY, "inf");
    CHECK_DOUBLE(-INFINITY, "-inf");
    CHECK_DOUBLE(0.0, "0");
    CHECK_DOUBLE(-0.0, "-0");
    CHECK_DOUBLE(3.0, "3");
    CHECK_DOUBLE(-17.0, "-17");
    CHECK_DOUBLE(1000000.0, "1000000");            /* %.17g layout, not 1e+06 */
    CHECK_DOUBLE(1e16, "10000000000000000");
    CHECK_DOUBLE(1e17, "1e+17");
    CHECK_DOUBLE(123456789012345678.0, "1.2345678901234568e+17");
    CHECK_DOUBLE(0.0001, "0.0001");
    CHECK_DOUBLE(0.00001, "1.0000000000000001e-05");
    CHECK_DOUBLE(0.1 + 0.2, "0.30000000000000004");
    CHECK_DOUBLE(1.0 / 3.0, "0.33333333333333331");
    CHECK_DOUBLE(2.5e-5, "2.5000000000000001e-05");
    CHECK_DOUBLE(3.14159, "3.1415899999999999");
    CHECK_DOUBLE(5e-324, "4.9406564584124654e-324");
    CHECK_DOUBLE(DBL_MAX, "1.7976931348623157e+308");
    CHECK_DOUBLE(9007199254740993.0, "9007199254740992");

    /* Round trip over a spread of values. */
    unsigned long long x = 88172645463325252ULL;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof(d));
        if (isnan(d)) continue;
        resp_out o;
        resp_out_init(&o, 3);
        resp_add_double(&o, d);
        rbuf_append(&o.b, "", 1);
        char *end;
        double back = strtod(o.b.buf + 1, &end);
        if (back != d || strcmp(end, "\r\n") != 0) bad++;
        rbuf_free(&o.b);
    }
    CHECK_EQ_LL(bad, 0);
}

static void check_ld(long double v, const char *want, int line) {
    char buf[5 * 1024];
    int n = ld2string(buf, sizeof(buf), v);
    int ok = n == (int)strlen(want) && strcmp(buf, want) == 0;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  line %d: got \"%s\" (%d) want \"%s\"\n", line, buf, n, want);
}
#define CHECK_LD(v, want) check_ld((v), (want), __LINE__)

static void test_ldouble_format(void) {
    CHECK_LD(10.5L, "10.5");
    CHECK_LD(strtold("5.0e3", NULL), "5000");
    CHECK_LD(strtold("0.1", NULL), "0.1");
    CHECK_LD(strtold("10.5", NULL) + strtold("0.1", NULL), "10.6");
    CHECK_LD(3.0L, "3");
    CHECK_LD(0.0L, "0");
    CHECK_LD(-0.0L, "0");
    CHECK_LD(-1e-20L, "0");
    CHECK_LD(-2.5L, "-2.5");
    CHECK_LD(1.0L / 3.0L, "0.33333333333333333");
    CHECK_LD(1e20L, "100000000000000000000");
    CHECK_LD((long double)INFINITY, "inf");
    CHECK_LD(-(long double)INFINITY, "-inf");
    CHECK_LD((long double)NAN, "nan");
    /* Too small a buffer gives 0 and an empty string. */
    char small[4];
    CHECK_EQ_LL(ld2string(small, sizeof(small), 12345.0L), 0);
    CHECK(small[0] == '\0');
    CHECK_EQ_LL(ld2string(small, sizeof(small), -(long double)INFINITY), 0);
    CHECK_EQ_LL(ld2string(small, sizeof(small), (long double)INFINITY), 3);
    char exact[21];   /* "%.17Lf" of 1 needs 19 bytes + NUL */
    CHECK_EQ_LL(ld2string(exact, sizeof(exact), 1.0L), 1);
    CHECK(strcmp(exact, "1") == 0);
}

/* A parser outlives its commands: what a huge one needed goes back when
 * the next starts; a small one keeps its arrays (no realloc per command). */
static void test_parser_memory(void) {
    resp_parser p;
    resp_limits lim = default_limits();
    size_t used;
    rbuf big;
    rbuf_init(&big);
    rbuf_append(&big, LIT("*100000\r\n"));
    for (int i = 0; i < 100000; i++) rbuf_append(&big, LIT("$1\r\nx\r\n"));
    resp_parser_init(&p, &lim);
    CHECK_EQ_LL(resp_parse(&p, big.buf, big.len, &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(p.argc, 100000);
    CHECK(resp_parser_mem(&p) >= 100000 * 2 * sizeof(size_t));
    CHECK_EQ_LL(resp_parse(&p, LIT("*2\r\n$4\r\nECHO\r\n$1\r\ny\r\n"), &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(p.argc, 2);
    size_t small = resp_parser_mem(&p);
    CHECK(small <= 1024 * 2 * sizeof(size_t) + 128 * 1024);
    CHECK_EQ_LL(resp_parse(&p, LIT("*1\r\n$4\r\nPING\r\n"), &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(resp_parser_mem(&p), small);
    /* a large command still arriving keeps its arrays while it arrives */
    CHECK_EQ_LL(resp_parse(&p, big.buf, big.len - 3, &used, NULL), RESP_INCOMPLETE);
    size_t partial = resp_parser_mem(&p);
    CHECK(partial >= 99999 * sizeof(size_t));
    resp_parser_trim(&p);                    /* the cron, mid-command: nothing */
    CHECK_EQ_LL(resp_parser_mem(&p), partial);
    CHECK_EQ_LL(resp_parse(&p, big.buf, big.len, &used, NULL), RESP_COMMAND);
    CHECK_EQ_LL(p.argc, 100000);
    CHECK_EQ_LL(used, big.len);
    CHECK(p.argv[99999] == big.buf + big.len - 3 && p.argvlen[99999] == 1);
    resp_parser_trim(&p);                    /* the cron, between commands */
    CHECK(resp_parser_mem(&p) <= small);
    resp_parser_free(&p);
    rbuf_free(&big);
}

/* arg_check for the tests: refuses SET, takes anything else. */
static int arg_checks;
static const char *refuse_set(void *ctx, const char *name, size_t nlen) {
    arg_checks++;
    return nlen == 3 && memcmp(name, "SET", 3) == 0 ? "ERR too big" : NULL;
}

static void test_refused(void) {
    resp_limits lim = default_limits();
    lim.max_arg = 4;
    lim.arg_check = refuse_set;

    /* Up to max_arg bytes nothing is asked. */
    arg_checks = 0;
    CHECK_STREAM_LIM("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nabcd\r\n",
                     "3[3:SET][1:k][4:abcd];INCOMPLETE(0)", &lim);
    CHECK_EQ_LL(arg_checks, 0);
    /* Longer: the whole command goes (the arguments after the long one
     * too), one refusal, and the next command parses as usual. */
    CHECK_STREAM_LIM("*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nabcde\r\n$6\r\nabcdef\r\n"
                     "*1\r\n$4\r\nPING\r\n",
                     "REFUSED(ERR too big);1[4:PING];INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("*2\r\n$3\r\nSET\r\n$5\r\nabcde\r\n*2\r\n$3\r\nSET\r\n$5\r\nvwxyz\r\n",
                     "REFUSED(ERR too big);REFUSED(ERR too big);INCOMPLETE(0)", &lim);
    /* arg_check lets other commands keep long arguments. */
    CHECK_STREAM_LIM("*2\r\n$4\r\nECHO\r\n$5\r\nabcde\r\n", "2[4:ECHO][5:abcde];INCOMPLETE(0)",
                     &lim);
    /* The first argument (the name) is not offered. */
    arg_checks = 0;
    CHECK_STREAM_LIM("*1\r\n$5\r\nabcde\r\n", "1[5:abcde];INCOMPLETE(0)", &lim);
    CHECK_EQ_LL(arg_checks, 0);
    /* The headers of a refused command are still checked: a bad one is a
     * protocol error, as it would be otherwise. */
    CHECK_STREAM_LIM("*3\r\n$3\r\nSET\r\n$5\r\nabcde\r\n$x\r\n",
                     "REFUSED(ERR too big);ERR(Protocol error: invalid bulk length)", &lim);
    CHECK_STREAM_LIM("*3\r\n$3\r\nSET\r\n$5\r\nabcde\r\n*\r\n",
                     "REFUSED(ERR too big);ERR(Protocol error: expected '$', got '*')", &lim);
    /* The refusal comes with the header, before the argument; the refused
     * bytes are gone, only a partial header stays. */
    CHECK_STREAM_LIM("*3\r\n$3\r\nSET\r\n$5\r\n", "REFUSED(ERR too big);INCOMPLETE(0)", &lim);
    CHECK_STREAM_LIM("*3\r\n$3\r\nSET\r\n$5\r\nabcde\r\n$1",
                     "REFUSED(ERR too big);INCOMPLETE(2)", &lim);

    /* A refused 100000-byte argument fed 1000 bytes at a time is never
     * held: the buffer stays at one piece (without arg_check, it takes all
     * of it). */
    static const char head[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n";
    static const char tail[] = "\r\n*1\r\n$4\r\nPING\r\n";
    size_t n = sizeof(head) - 1 + 100000 + sizeof(tail) - 1;
    char *stream = malloc(n);
    memcpy(stream, head, sizeof(head) - 1);
    memset(stream + sizeof(head) - 1, 'x', 100000);
    memcpy(stream + sizeof(head) - 1 + 100000, tail, sizeof(tail) - 1);
    rbuf log = run_stream(stream, n, &lim, 1000, 0);
    CHECK(strcmp(log.buf, "REFUSED(ERR too big);1[4:PING];INCOMPLETE(0)") == 0);
    CHECK(run_peak <= 1000 + sizeof(head));
    rbuf_free(&log);
    resp_limits plain = default_limits();
    log = run_stream(stream, n, &plain, 1000, 0);
    CHECK(run_peak >= 100000);
    rbuf_free(&log);
    free(stream);
}

/* resp_out's limit: an append past it is dropped whole and sets overflow;
 * nothing is appended after an overflow. */
static void test_out_limit(void) {
    resp_out o;
    resp_out_init(&o, 2);
    o.limit = 20;
    resp_add_bulk(&o, "0123456789", 10);           /* 17 bytes */
    CHECK_EQ_LL(o.b.len, 17);
    CHECK(!o.overflow);
    resp_add_bulk(&o, "ab", 2);                     /* 8 more: over */
    CHECK_EQ_LL(o.b.len, 17);
    CHECK(o.overflow);
    resp_add_int(&o, 1);                            /* 4 would fit, but no */
    CHECK_EQ_LL(o.b.len, 17);
    rbuf_free(&o.b);

    resp_out_init(&o, 3);
    o.limit = 17;
    resp_add_bulk(&o, "0123456789", 10);           /* exactly up to the limit */
    CHECK_EQ_LL(o.b.len, 17);
    CHECK(!o.overflow);
    rbuf_free(&o.b);

    /* resp_out_fits: a lower bound on what is coming. */
    resp_out_init(&o, 2);
    CHECK(resp_out_fits(&o, 1ULL << 62, RESP_MIN_BULK));   /* no limit */
    o.limit = 600;
    CHECK(resp_out_fits(&o, 100, RESP_MIN_BULK));
    CHECK(!o.overflow);
    CHECK(!resp_out_fits(&o, 101, RESP_MIN_BULK));
    CHECK(o.overflow);
    CHECK(!resp_out_fits(&o, 1, 1));                         /* stays overflowed */
    rbuf_free(&o.b);
}

int main(void) {
    test_rbuf();
    test_parser_memory();
    test_multibulk_pipeline();
    test_multibulk_binary();
    test_multibulk_empty();
    test_multibulk_incremental();
    test_external_bulk();
    test_inline();
    test_inline_unbalanced();
    test_errors();
    test_limits();
    test_refused();
    test_replies();
    test_out_limit();
    test_double_format();
    test_ldouble_format();
    return UNIT_DONE("test-resp");
}
