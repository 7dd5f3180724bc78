/* fuzz-resp.c -- fuzz target for the RESP codec (redis-compat/resp.c).
 *
 * LLVMFuzzerTestOneInput() checks properties, not just "does not crash":
 *
 *  1. Feeding-mode independence. The input is parsed as one query buffer
 *     four ways: whole; split at pseudo-random points (the buffer copied to
 *     a fresh exact-size allocation before every call, the old one scribbled
 *     on and freed); one byte at a time (the unused tail of the buffer
 *     poisoned under ASan); and in random pieces with every bulk of 4 bytes
 *     or more that is still arriving taken out of the buffer into one of
 *     its own, as networking.c receives large arguments (resp_bulk_waiting,
 *     resp_bulk_external). The transcripts -- every command's argv, then
 *     the final error or "incomplete" state with the bytes left and the
 *     `need` hint -- must be byte-identical. This is what catches a parser
 *     that keeps a pointer, or miscounts, across RESP_INCOMPLETE.
 *  2. Per-call contracts: used is 0 unless a command was returned (or a
 *     refused command's bytes were dropped: at least one), a command
 *     consumes at least one byte and no more than it was given, argv lies in
 *     the buffer (multibulk) or the arena (inline), errors carry one of the
 *     documented texts, and no result but RESP_INCOMPLETE appears before
 *     `need` more bytes have arrived.
 *  3. Oracles. A multibulk command is re-walked from its header lines and
 *     must match argv exactly (zero copy, right lengths, used ends at the
 *     last "\r\n"). An inline line is re-split by a reference splitter
 *     written the way Redis's sdssplitargs() walks a C string, and must give
 *     the same arguments or the same "unbalanced quotes" verdict.
 *  4. Four limit sets: Redis's defaults, tiny limits that put every
 *     "too big"/"invalid length" path within reach of short inputs,
 *     tiny limits with an arg_check that refuses commands whose name starts
 *     with an odd byte, so refused commands are dropped (RESP_REFUSED, then
 *     RESP_DROPPED handing back their bytes) in every feeding mode with the
 *     same transcript, and the defaults for a client that has not
 *     authenticated.
 *  5. Replies: a pseudo-random reply tree (all resp_add_* helpers, strings
 *     taken from the input) is encoded as RESP2 and as RESP3 and read back
 *     by a small independent reply reader that checks every element against
 *     what was added; doubles must read back exactly. A random argv encoded
 *     with resp_add_array/resp_add_bulk, and again as an inline line with
 *     quotes and escapes, must parse back to the same argv.
 *  6. ld2string() text reads back within its 17 decimals, trimmed,
 *     never "-0".
 *  7. A long-lived connection. The input drives a generator of many
 *     commands (multibulk with up to 5,000 arguments, and in one stream of
 *     16 up to 20,000 or a 270 KB argument; inline lines; empty requests),
 *     one byte stream of up to 1 MB fed
 *     through ONE parser the way networking.c does it: pieces appended at
 *     random sizes, every complete command taken at an advancing offset,
 *     the consumed prefix dropped once per round, room reserved for a bulk
 *     still arriving, and now and then (the cron) an empty buffer freed and
 *     the parser trimmed. Every command must come out exactly as generated,
 *     in order; the stream then ends with an invalid request that must get
 *     its exact error; and the parser must give back what the large
 *     commands made it allocate (resp_parser_mem). The same stream goes
 *     through a second parser whose arg_check refuses long arguments of
 *     odd-named commands: exactly those must come out refused (their bytes
 *     dropped), everything else as before.
 *     This is where state left between commands (counters, offsets after
 *     the buffer moved, a bulk length parsed across reads) would show.
 *
 * Any violation prints what went wrong and calls abort().
 *
 * Built with -DFUZZ_STANDALONE (gcc, no libFuzzer) the file also has a
 * main() that runs the shared mutation fuzzer (tests/fuzz/standalone.c):
 *     fuzz-resp [-seed=N] [-seconds=N] [-runs=N] [-max_len=N] corpus_dir|file...
 * with this file's seeds and mutations (bit flips, byte inserts/deletes,
 * range copies, splices, protocol tokens and interesting numbers); it
 * prints "fuzz-resp: N execs, 0 crashes". A failing input is written to
 * fuzz-resp-crash.bin (or $FUZZ_CRASH_FILE); pass that file as the only
 * argument to replay it. */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"
#include "strutil.h"
#include "standalone.h"

#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ---------------- failure reporting ---------------- */

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz-resp: invariant violated: %s%s%s\n", what,
            detail ? ": " : "", detail ? detail : "");
    FUZZ_SAVE_CRASH();
    abort();
}

#define ENSURE(cond, what) do { if (!(cond)) fail((what), #cond); } while (0)

/* ---------------- deterministic randomness ---------------- */

/* splitmix64: tiny, and seeded from the input so libFuzzer sees the same
 * behaviour every time it replays an input. */
static uint64_t rnd_state;
static uint64_t rnd(void) {
    uint64_t z = (rnd_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* ---------------- transcripts ---------------- */

static void log_str(rbuf *log, const char *s) { rbuf_append(log, s, strlen(s)); }

static void log_num(rbuf *log, const char *fmt, size_t v) {
    char tmp[48];
    int n = snprintf(tmp, sizeof(tmp), fmt, v);
    rbuf_append(log, tmp, (size_t)n);
}

static void log_argv(rbuf *log, int argc, const char *const *argv, const size_t *argvlen) {
    log_num(log, "%zu", (size_t)argc);
    for (int i = 0; i < argc; i++) {
        log_num(log, "[%zu:", argvlen[i]);
        rbuf_append(log, argv[i], argvlen[i]);
        log_str(log, "]");
    }
    log_str(log, ";");
}

/* ---------------- reference inline splitter ---------------- */

/* sdssplitargs()'s rules, walking a NUL-terminated copy of the line with a
 * pointer the way Redis does (a deliberately different shape from the
 * length-based splitter in resp.c). Appends the arguments in transcript
 * form; returns -1 for unbalanced quotes. */
static int ref_split(const char *line, rbuf *log) {
    const char *p = line;
    rbuf cur, all;
    int argc = 0, ret = 0;

    rbuf_init(&cur);
    rbuf_init(&all);
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        int inq = 0, insq = 0, done = 0;
        cur.len = 0;
        while (!done) {
            if (inq) {
                if (p[0] == '\\' && p[1] == 'x' && isxdigit((unsigned char)p[2]) &&
                    isxdigit((unsigned char)p[3])) {
                    char hex[3] = { p[2], p[3], 0 };
                    char c = (char)strtol(hex, NULL, 16);
                    rbuf_append(&cur, &c, 1);
                    p += 3;
                } else if (p[0] == '\\' && p[1]) {
                    char c;
                    p++;
                    switch (*p) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: c = *p; break;
                    }
                    rbuf_append(&cur, &c, 1);
                } else if (*p == '"') {
                    if (p[1] && !isspace((unsigned char)p[1])) { ret = -1; goto out; }
                    done = 1;
                } else if (!*p) {
                    ret = -1;
                    goto out;
                } else {
                    rbuf_append(&cur, p, 1);
                }
            } else if (insq) {
                if (p[0] == '\\' && p[1] == '\'') {
                    p++;
                    rbuf_append(&cur, "'", 1);
                } else if (*p == '\'') {
                    if (p[1] && !isspace((unsigned char)p[1])) { ret = -1; goto out; }
                    done = 1;
                } else if (!*p) {
                    ret = -1;
                    goto out;
                } else {
                    rbuf_append(&cur, p, 1);
                }
            } else {
                switch (*p) {
                case ' ': case '\n': case '\r': case '\t': case '\0': done = 1; break;
                case '"': inq = 1; break;
                case '\'': insq = 1; break;
                default: rbuf_append(&cur, p, 1); break;
                }
            }
            if (*p) p++;
        }
        log_num(&all, "[%zu:", cur.len);
        rbuf_append(&all, cur.buf, cur.len);
        log_str(&all, "]");
        argc++;
    }
    log_num(log, "%zu", (size_t)argc);
    rbuf_append(log, all.buf, all.len);
    log_str(log, ";");
out:
    rbuf_free(&cur);
    rbuf_free(&all);
    return ret;
}

/* The inline line at the start of buf (through its '\n'), split by
 * ref_split(). Returns what ref_split() returns. */
static int ref_inline(const char *buf, size_t nl, rbuf *log) {
    size_t n = nl;
    if (n > 0 && buf[n - 1] == '\r') n--;
    char *line = malloc(n + 1);
    if (n) memcpy(line, buf, n);
    line[n] = '\0';
    int r = ref_split(line, log);
    free(line);
    return r;
}

/* ---------------- per-call checks ---------------- */

static int in_range(const char *p, size_t n, const char *lo, const char *hi) {
    uintptr_t a = (uintptr_t)p, l = (uintptr_t)lo, h = (uintptr_t)hi;
    return a >= l && a <= h && n <= h - a;
}

/* Digits s[0..n) as a non-negative number, or -1. */
static long long digits_value(const char *s, size_t n) {
    long long v = 0;
    if (n == 0 || n > 18) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Walk a multibulk command from its header lines and check argv against
 * it: each argument is exactly the payload after its "$<len>\r?" line, in
 * the caller's buffer, and used ends after the last payload's 2 bytes. */
static void check_multibulk(const resp_parser *p, const char *buf, size_t used) {
    size_t off = 1, cr;
    const char *q = memchr(buf, '\r', used);
    ENSURE(q != NULL, "multibulk without count line");
    cr = (size_t)(q - buf);
    long long count = (buf[1] == '-') ? -1 : digits_value(buf + 1, cr - 1);
    if (buf[1] == '-' || count == 0) {
        ENSURE(p->argc == 0 && used == cr + 2, "empty multibulk");
        return;
    }
    ENSURE(memchr(buf, '\0', cr) == NULL, "NUL in an accepted count line");
    ENSURE(count == p->argc, "argc differs from the count line");
    off = cr + 2;
    for (int i = 0; i < p->argc; i++) {
        ENSURE(off < used && buf[off] == '$', "argument without '$' line");
        q = memchr(buf + off, '\r', used - off);
        ENSURE(q != NULL, "bulk line without \\r");
        cr = (size_t)(q - buf);
        ENSURE(memchr(buf + off, '\0', cr - off) == NULL, "NUL in an accepted bulk line");
        long long len = digits_value(buf + off + 1, cr - off - 1);
        ENSURE(len >= 0 && (size_t)len == p->argvlen[i], "argvlen differs from the '$' line");
        ENSURE(p->argv[i] == buf + cr + 2, "argv is not zero-copy at its payload");
        off = cr + 2 + (size_t)len + 2;
    }
    ENSURE(off == used, "used is not the end of the last argument");
}

static int known_error(const char *e) {
    static const char *const texts[] = {
        "Protocol error: invalid multibulk length",
        "Protocol error: invalid bulk length",
        "Protocol error: too big inline request",
        "Protocol error: too big mbulk count string",
        "Protocol error: too big bulk count string",
        "Protocol error: unbalanced quotes in request",
        "Protocol error: unauthenticated multibulk length",
        "Protocol error: unauthenticated bulk length",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (strcmp(e, texts[i]) == 0) return 1;
    return strncmp(e, "Protocol error: expected '$', got '", 35) == 0 &&
           e[35] != '\0' && strcmp(e + 36, "'") == 0;
}

/* Check one resp_parse() result on buf[0..len), append it to the
 * transcript. `oracle` turns on the re-walk/re-split checks (they need the
 * command's bytes, which the caller still has at buf). */
static void check_result(resp_parser *p, int r, const char *buf, size_t len, size_t used,
                         size_t need, const resp_limits *lim, rbuf *log, int oracle) {
    ENSURE(r == RESP_COMMAND || r == RESP_INCOMPLETE || r == RESP_ERROR || r == RESP_REFUSED ||
           r == RESP_DROPPED, "bad return value");
    if (r == RESP_DROPPED) {
        ENSURE(lim->arg_check && used >= 1 && used <= len, "bad RESP_DROPPED");
        return;
    }
    if (r == RESP_INCOMPLETE) {
        ENSURE(used == 0, "used != 0 on RESP_INCOMPLETE");
        ENSURE(need <= (size_t)lim->max_bulk_len + 2, "need beyond any bulk");
        return;
    }
    if (r == RESP_REFUSED) {
        ENSURE(lim->arg_check && used <= len && p->refusal && strcmp(p->refusal, "ERR refused") == 0,
               "bad refusal");
        log_str(log, "REFUSED;");
        return;
    }
    if (r == RESP_ERROR) {
        ENSURE(known_error(p->err), "unknown error text");
        log_str(log, "ERR(");
        log_str(log, p->err);
        log_str(log, ")");
        if (oracle && strcmp(p->err, "Protocol error: unbalanced quotes in request") == 0) {
            const char *nl = memchr(buf, '\n', len);
            rbuf tmp;
            rbuf_init(&tmp);
            ENSURE(nl != NULL && buf[0] != '*', "unbalanced quotes without a line");
            ENSURE(ref_inline(buf, (size_t)(nl - buf), &tmp) < 0,
                   "reference splitter accepts what the parser rejects");
            rbuf_free(&tmp);
        }
        return;
    }
    ENSURE(used >= 1 && used <= len, "used out of range");
    ENSURE(p->argc >= 0 && p->argc <= (int)used, "argc out of range");
    for (int i = 0; i < p->argc; i++) {
        if (buf[0] == '*')
            ENSURE(in_range(p->argv[i], p->argvlen[i], buf, buf + used), "argv outside the buffer");
        else
            ENSURE(in_range(p->argv[i], p->argvlen[i], p->arena.buf, p->arena.buf + p->arena.len),
                   "argv outside the arena");
    }
    size_t mark = log->len;
    log_argv(log, p->argc, p->argv, p->argvlen);
    if (!oracle) return;
    if (buf[0] == '*') {
        check_multibulk(p, buf, used);
    } else {
        rbuf ref;
        rbuf_init(&ref);
        ENSURE(buf[used - 1] == '\n', "inline command not ending at a newline");
        ENSURE(memchr(buf, '\n', used - 1) == NULL, "inline command spans lines");
        ENSURE(memchr(buf, '\0', used) == NULL, "inline command with a NUL (Redis uses strchr)");
        ENSURE(ref_inline(buf, used - 1, &ref) == 0, "reference splitter rejects the line");
        ENSURE(ref.len == log->len - mark && memcmp(ref.buf, log->buf + mark, ref.len) == 0,
               "inline split differs from the reference");
        rbuf_free(&ref);
    }
}

static void log_final(rbuf *log, int errored, size_t left, size_t need) {
    if (errored) return;
    log_num(log, "INCOMPLETE(%zu,", left);
    log_num(log, "%zu)", need);
}

/* ---------------- feeding modes ---------------- */

/* Whole: the input as one exact-size buffer; commands are taken from
 * advancing offsets, with no copying at all. */
static void feed_whole(const uint8_t *data, size_t size, const resp_limits *lim, rbuf *log) {
    resp_parser p;
    char *buf = malloc(size ? size : 1);
    size_t off = 0, used = 0, need = 0;
    int r, errored = 0;

    if (size) memcpy(buf, data, size);
    resp_parser_init(&p, lim);
    for (;;) {
        r = resp_parse(&p, buf + off, size - off, &used, &need);
        check_result(&p, r, buf + off, size - off, used, need, lim, log, 1);
        if (r == RESP_ERROR) break;
        off += used;
        if (r == RESP_INCOMPLETE) break;
    }
    errored = (r == RESP_ERROR);
    log_final(log, errored, size - off, need);
    resp_parser_free(&p);
    free(buf);
}

/* Chunked: append `chunk`-sized pieces (0 = random sizes) to a query
 * buffer like a connection would, parsing after each. With `move`, each
 * call sees a fresh exact-size copy and the previous copy is destroyed;
 * without it, the buffer's spare capacity is poisoned during the call. */
static void feed_chunks(const uint8_t *data, size_t size, const resp_limits *lim,
                        size_t chunk, int move, rbuf *log) {
    resp_parser p;
    rbuf q;
    size_t fed = 0, used = 0, need = 0;
    size_t floor = 0;   /* no verdict before the buffer reaches this size */
    int r = RESP_INCOMPLETE, errored = 0;

    resp_parser_init(&p, lim);
    rbuf_init(&q);
    while (!errored && fed < size) {
        size_t n = chunk ? chunk : 1 + rnd_below(rnd_below(4) ? 16 : 600);
        if (n > size - fed) n = size - fed;
        rbuf_append(&q, data + fed, n);
        fed += n;
        for (;;) {
            char *buf = q.buf;
            size_t len = q.len;
            if (move) {
                buf = malloc(len);
                memcpy(buf, q.buf, len);
            } else {
                POISON(q.buf + q.len, q.cap - q.len);
            }
            r = resp_parse(&p, buf, len, &used, &need);
            if (len < floor) ENSURE(r == RESP_INCOMPLETE, "verdict before `need` bytes arrived");
            check_result(&p, r, buf, len, used, need, lim, log, 0);
            if (move) {
                memset(buf, 0xA5, len);
                free(buf);
            } else {
                UNPOISON(q.buf + q.len, q.cap - q.len);
            }
            if (r == RESP_INCOMPLETE) {
                floor = need ? len + need : 0;
                break;
            }
            floor = 0;
            if (r == RESP_ERROR) {
                errored = 1;
                break;
            }
            rbuf_consume(&q, used);
        }
    }
    if (!errored && size == 0) {
        r = resp_parse(&p, "", 0, &used, &need);
        ENSURE(r == RESP_INCOMPLETE && need == 0, "empty buffer is not incomplete");
    }
    log_final(log, errored, q.len, need);
    rbuf_free(&q);
    resp_parser_free(&p);
}

/* External: random pieces as in feed_chunks, but a bulk of EXT_MIN bytes
 * or more that is still arriving is received the way networking.c does it
 * ("Large arguments"): its payload, with what the buffer holds of it, goes
 * into a buffer of its own, the query buffer ends at its start
 * (resp_bulk_waiting), the bytes that follow fill it, and then the parser
 * takes it by pointer (resp_bulk_external). The transcript must be the
 * whole buffer's; each argument is in the buffer or is one of those. */
#define EXT_MIN 4
static void feed_external(const uint8_t *data, size_t size, const resp_limits *lim, rbuf *log) {
    resp_parser p;
    rbuf q;
    char *ext = NULL, *held[64];
    size_t ext_len = 0, ext_got = 0, held_bytes = 0, fed = 0, used = 0, need = 0;
    int nheld = 0, r = RESP_INCOMPLETE, errored = 0;

    resp_parser_init(&p, lim);
    rbuf_init(&q);
    while (!errored && fed < size) {
        size_t n = 1 + rnd_below(rnd_below(4) ? 16 : 600);
        if (n > size - fed) n = size - fed;
        if (ext) {
            if (n > ext_len - ext_got) n = ext_len - ext_got;
            memcpy(ext + ext_got, data + fed, n);
            ext_got += n;
            fed += n;
            if (ext_got < ext_len) continue;
            ENSURE(nheld < 64, "too many external arguments");
            held[nheld++] = ext;
            held_bytes += ext_len;
            resp_bulk_external(&p, ext);
            ext = NULL;
            ext_got = 0;
        } else {
            rbuf_append(&q, data + fed, n);
            fed += n;
        }
        while (q.len || resp_parser_complete(&p)) {
            r = resp_parse(&p, q.buf, q.len, &used, &need);
            if (r == RESP_COMMAND && q.buf[0] == '*') {
                ENSURE(used >= 1 && used <= q.len, "used out of range");
                for (int i = 0; i < p.argc; i++) {
                    int ok = in_range(p.argv[i], p.argvlen[i], q.buf, q.buf + used);
                    for (int k = 0; k < nheld && !ok; k++) ok = p.argv[i] == held[k];
                    ENSURE(ok, "argv neither in the buffer nor an external argument");
                }
                log_argv(log, p.argc, p.argv, p.argvlen);
            } else {
                check_result(&p, r, q.buf, q.len, used, need, lim, log, 0);
            }
            if (r == RESP_INCOMPLETE) {
                size_t off;
                long long bl = resp_bulk_waiting(&p, &off);
                if (bl >= EXT_MIN) {
                    ENSURE(off <= q.len && q.len - off < (size_t)bl + 2, "bad waiting bulk");
                    ext_len = (size_t)bl + 2;
                    ext = malloc(ext_len);
                    ext_got = q.len - off;
                    memcpy(ext, q.buf + off, ext_got);
                    q.len = off;
                }
                break;
            }
            if (r != RESP_DROPPED) {   /* the command is over: its arguments go */
                for (int k = 0; k < nheld; k++) {
                    memset(held[k], 0xA5, 1);
                    free(held[k]);
                }
                nheld = 0;
                held_bytes = 0;
            }
            if (r == RESP_ERROR) {
                errored = 1;
                break;
            }
            rbuf_consume(&q, used);
        }
    }
    if (!errored && size == 0) {
        r = resp_parse(&p, "", 0, &used, &need);
        ENSURE(r == RESP_INCOMPLETE && need == 0, "empty buffer is not incomplete");
    }
    if (ext) need = ext_len - ext_got;
    log_final(log, errored, q.len + ext_got + held_bytes, need);
    free(ext);
    for (int k = 0; k < nheld; k++) free(held[k]);
    rbuf_free(&q);
    resp_parser_free(&p);
}

static void fail_mismatch(const char *mode, const rbuf *a, const rbuf *b) {
    fprintf(stderr, "fuzz-resp: whole:  %.*s\n", (int)(a->len > 2000 ? 2000 : a->len), a->buf);
    fprintf(stderr, "fuzz-resp: %s: %.*s\n", mode, (int)(b->len > 2000 ? 2000 : b->len), b->buf);
    fail("transcripts differ between feeding modes", mode);
}

/* arg_check for the third limit set: refuses names starting with an odd
 * byte, so inputs reach both outcomes. */
static const char *refuse_odd(void *ctx, const char *name, size_t nlen) {
    return nlen && ((unsigned char)name[0] & 1) ? "ERR refused" : NULL;
}

static void check_parser(const uint8_t *data, size_t size, const resp_limits *lim) {
    rbuf whole, other;
    rbuf_init(&whole);
    rbuf_init(&other);
    feed_whole(data, size, lim, &whole);

    feed_chunks(data, size, lim, 0, 1, &other);
    if (other.len != whole.len || memcmp(other.buf, whole.buf, whole.len) != 0)
        fail_mismatch("random", &whole, &other);
    other.len = 0;
    feed_chunks(data, size, lim, 1, 0, &other);
    if (other.len != whole.len || memcmp(other.buf, whole.buf, whole.len) != 0)
        fail_mismatch("bytes ", &whole, &other);
    other.len = 0;
    feed_external(data, size, lim, &other);
    if (other.len != whole.len || memcmp(other.buf, whole.buf, whole.len) != 0)
        fail_mismatch("extern", &whole, &other);
    rbuf_free(&whole);
    rbuf_free(&other);
}

/* ---------------- replies ---------------- */

/* What the generator added, in pre-order, for the reader to compare. */
typedef struct expect {
    char kind;          /* see gen_value() */
    long long ll;
    double d;
    size_t n;
    char s[700];
} expect;

#define MAX_EXPECT 256
static expect exps[MAX_EXPECT];
static int nexp;

/* Input bytes as string material. */
static const uint8_t *src;
static size_t srclen;

/* A random slice of the input (at most `max` bytes) into dst. With
 * `cstring`, stop at a NUL so it can be passed as a C string. */
static size_t take_slice(char *dst, size_t max, int cstring) {
    size_t n = rnd_below(max + 1), off;
    if (srclen == 0) n = 0;
    if (n > srclen) n = srclen;
    off = rnd_below(srclen - n + 1);
    if (n) memcpy(dst, src + off, n);
    if (cstring) {
        const char *z = memchr(dst, '\0', n);
        if (z) n = (size_t)(z - dst);
        dst[n] = '\0';
    }
    return n;
}

static void crlf_to_space(char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n') s[i] = ' ';
}

static double random_double(void) {
    static const double special[] = { 0.0, -0.0, 1.5, 0.1, 1e300, -1e-300, 5e-324,
                                      1e16, 1e17, 1e-5, 1e-4, 123456789.125, 0.3 };
    uint64_t bits = rnd();
    double d;
    switch (rnd_below(4)) {
    case 0: return special[rnd_below(sizeof(special) / sizeof(special[0]))];
    case 1: return (double)(int64_t)rnd() / (double)(1 + rnd_below(1000));
    case 2: return (double)(int)rnd_below(2000) / 8 - 100;
    default:
        memcpy(&d, &bits, sizeof(d));   /* any bit pattern: inf, nan, subnormals */
        return d;
    }
}

static void gen_value(resp_out *o2, resp_out *o3, int depth);

static void gen_children(resp_out *o2, resp_out *o3, int depth, long long n) {
    for (long long i = 0; i < n; i++) gen_value(o2, o3, depth + 1);
}

/* Add one random reply to both outputs, recording what to expect. */
static void gen_value(resp_out *o2, resp_out *o3, int depth) {
    if (nexp >= MAX_EXPECT - 1) depth = 99;   /* out of room: leaves only */
    expect *e = &exps[nexp++];
    int kinds = (depth < 3) ? 17 : 13;
    memset(e, 0, offsetof(expect, s) + 1);

    switch (rnd_below((size_t)kinds)) {
    case 0:
        e->kind = 'S';
        e->n = take_slice(e->s, 40, 1);
        resp_add_simple(o2, e->s);
        resp_add_simple(o3, e->s);
        crlf_to_space(e->s, e->n);
        break;
    case 1:
        e->kind = 'E';
        e->n = take_slice(e->s, 40, 1);
        resp_add_error(o2, e->s);
        resp_add_error(o3, e->s);
        crlf_to_space(e->s, e->n);
        break;
    case 2: {
        /* errorf, sometimes longer than its stack buffer */
        char part[300];
        const char *again = rnd_below(2) ? part : "";
        take_slice(part, sizeof(part) - 1, 1);
        e->kind = 'E';
        e->n = (size_t)snprintf(e->s, sizeof(e->s), "ERR %s|%s", part, again);
        resp_add_errorf(o2, "ERR %s|%s", part, again);
        resp_add_errorf(o3, "ERR %s|%s", part, again);
        crlf_to_space(e->s, e->n);
        break;
    }
    case 3:
        e->kind = 'K';
        resp_add_ok(o2);
        resp_add_ok(o3);
        break;
    case 4:
        e->kind = 'I';
        e->ll = (long long)rnd();
        if (rnd_below(2)) e->ll %= 1000;
        resp_add_int(o2, e->ll);
        resp_add_int(o3, e->ll);
        break;
    case 5:
        e->kind = 'B';
        e->n = take_slice(e->s, 100, 0);
        if (rnd_below(2)) {
            resp_add_bulk(o2, e->s, e->n);
            resp_add_bulk(o3, e->s, e->n);
        } else {
            e->n = take_slice(e->s, 100, 1);
            resp_add_bulkstr(o2, e->s);
            resp_add_bulkstr(o3, e->s);
        }
        break;
    case 6:
        e->kind = 'B';
        e->ll = (long long)rnd() >> rnd_below(64);
        e->n = (size_t)snprintf(e->s, sizeof(e->s), "%lld", e->ll);
        resp_add_bulkll(o2, e->ll);
        resp_add_bulkll(o3, e->ll);
        break;
    case 7:
        e->kind = 'V';
        e->n = take_slice(e->s, 100, 0);
        resp_add_verbatim(o2, e->s, e->n);
        resp_add_verbatim(o3, e->s, e->n);
        break;
    case 8:
        e->kind = 'N';
        resp_add_null(o2);
        resp_add_null(o3);
        break;
    case 9:
        e->kind = 'n';
        resp_add_null_array(o2);
        resp_add_null_array(o3);
        break;
    case 10:
    case 11:
        e->kind = 'D';
        e->d = random_double();
        resp_add_double(o2, e->d);
        resp_add_double(o3, e->d);
        break;
    case 12:
        e->kind = 'O';
        e->ll = (long long)rnd_below(3);
        resp_add_bool(o2, (int)e->ll);
        resp_add_bool(o3, (int)e->ll);
        break;
    default: {
        static const char agg[] = "AMTP";
        e->kind = agg[rnd_below(4)];
        e->ll = (long long)rnd_below(4);
        long long n = e->ll;
        switch (e->kind) {
        case 'A': resp_add_array(o2, n); resp_add_array(o3, n); break;
        case 'M': resp_add_map(o2, n); resp_add_map(o3, n); n *= 2; break;
        case 'T': resp_add_set(o2, n); resp_add_set(o3, n); break;
        default:  resp_add_push(o2, n); resp_add_push(o3, n); break;
        }
        gen_children(o2, o3, depth, n);
        break;
    }
    }
}

/* ---- the reply reader ---- */

typedef struct reader {
    const char *b;
    size_t len, pos;
    int proto, next;   /* next: index into exps */
} reader;

/* One "\r\n"-terminated line after the type byte; no CR/LF inside. */
static size_t read_line(reader *rd, const char **line) {
    size_t start = rd->pos;
    while (rd->pos < rd->len && rd->b[rd->pos] != '\r' && rd->b[rd->pos] != '\n') rd->pos++;
    ENSURE(rd->pos + 1 < rd->len && rd->b[rd->pos] == '\r' && rd->b[rd->pos + 1] == '\n',
           "reply line not ended by \\r\\n");
    *line = rd->b + start;
    rd->pos += 2;
    return rd->pos - 2 - start;
}

static long long read_number(reader *rd) {
    const char *line;
    size_t n = read_line(rd, &line);
    char tmp[32], *end;
    ENSURE(n > 0 && n < sizeof(tmp), "bad number line");
    memcpy(tmp, line, n);
    tmp[n] = '\0';
    long long v = strtoll(tmp, &end, 10);
    ENSURE(*end == '\0', "number line is not a number");
    return v;
}

static char read_type(reader *rd) {
    ENSURE(rd->pos < rd->len, "reply ends early");
    return rd->b[rd->pos++];
}

/* A "$<n>\r\n<n bytes>\r\n" payload (type byte already read). */
static size_t read_bulk(reader *rd, const char **payload) {
    long long n = read_number(rd);
    ENSURE(n >= 0 && (size_t)n <= rd->len - rd->pos && rd->len - rd->pos - (size_t)n >= 2,
           "bulk length beyond the reply");
    *payload = rd->b + rd->pos;
    rd->pos += (size_t)n;
    ENSURE(rd->b[rd->pos] == '\r' && rd->b[rd->pos + 1] == '\n', "bulk not ended by \\r\\n");
    rd->pos += 2;
    return (size_t)n;
}

static void check_double_text(const char *t, size_t n, double d) {
    char tmp[64], ref[64], *end;
    ENSURE(n > 0 && n < sizeof(tmp), "double text length");
    memcpy(tmp, t, n);
    tmp[n] = '\0';
    if (isnan(d)) {
        ENSURE(strcmp(tmp, "nan") == 0, "NaN not written as nan");
        return;
    }
    double back = strtod(tmp, &end);
    ENSURE(*end == '\0', "double text has junk");
    ENSURE(back == d && signbit(back) == signbit(d), "double does not read back");
    /* Never longer than the plain %.17g text. */
    ENSURE(n <= (size_t)snprintf(ref, sizeof(ref), "%.17g", d), "double text longer than %.17g");
}

static void read_value(reader *rd) {
    ENSURE(rd->next < nexp, "more replies than were added");
    const expect *e = &exps[rd->next++];
    const char *t;
    size_t n;
    char c = read_type(rd);
    int p3 = rd->proto == 3;

    switch (e->kind) {
    case 'S': case 'E': case 'K':
        ENSURE(c == (e->kind == 'E' ? '-' : '+'), "status/error type byte");
        n = read_line(rd, &t);
        if (e->kind == 'K') ENSURE(n == 2 && memcmp(t, "OK", 2) == 0, "+OK text");
        else ENSURE(n == e->n && memcmp(t, e->s, n) == 0, "status/error text");
        break;
    case 'I':
        ENSURE(c == ':', "integer type byte");
        ENSURE(read_number(rd) == e->ll, "integer value");
        break;
    case 'B':
        ENSURE(c == '$', "bulk type byte");
        n = read_bulk(rd, &t);
        ENSURE(n == e->n && memcmp(t, e->s, n) == 0, "bulk payload");
        break;
    case 'V':
        ENSURE(c == (p3 ? '=' : '$'), "verbatim type byte");
        n = read_bulk(rd, &t);
        if (p3) {
            ENSURE(n >= 4 && memcmp(t, "txt:", 4) == 0, "verbatim format prefix");
            t += 4;
            n -= 4;
        }
        ENSURE(n == e->n && memcmp(t, e->s, n) == 0, "verbatim payload");
        break;
    case 'N': case 'n':
        if (p3) {
            ENSURE(c == '_', "RESP3 null type byte");
            ENSURE(read_line(rd, &t) == 0, "RESP3 null has text");
        } else {
            ENSURE(c == (e->kind == 'N' ? '$' : '*'), "RESP2 null type byte");
            ENSURE(read_number(rd) == -1, "RESP2 null is not -1");
        }
        break;
    case 'D':
        if (p3) {
            ENSURE(c == ',', "RESP3 double type byte");
            n = read_line(rd, &t);
        } else {
            ENSURE(c == '$', "RESP2 double type byte");
            n = read_bulk(rd, &t);
        }
        check_double_text(t, n, e->d);
        break;
    case 'O':
        if (p3) {
            ENSURE(c == '#', "RESP3 bool type byte");
            n = read_line(rd, &t);
            ENSURE(n == 1 && t[0] == (e->ll ? 't' : 'f'), "RESP3 bool value");
        } else {
            ENSURE(c == ':', "RESP2 bool type byte");
            ENSURE(read_number(rd) == (e->ll ? 1 : 0), "RESP2 bool value");
        }
        break;
    default: {
        long long children = e->ll * (e->kind == 'M' ? 2 : 1);
        char want = '*';
        if (p3) want = e->kind == 'M' ? '%' : e->kind == 'T' ? '~' : e->kind == 'P' ? '>' : '*';
        ENSURE(c == want, "aggregate type byte");
        long long n2 = read_number(rd);
        ENSURE(n2 == (p3 ? e->ll : children), "aggregate count");
        for (long long i = 0; i < children; i++) read_value(rd);
        break;
    }
    }
}

static void check_replies(const uint8_t *data, size_t size) {
    resp_out o2, o3;
    int top = 1 + (int)rnd_below(8);

    src = data;
    srclen = size;
    nexp = 0;
    resp_out_init(&o2, 2);
    resp_out_init(&o3, 3);
    for (int i = 0; i < top && nexp < MAX_EXPECT - 1; i++) gen_value(&o2, &o3, 0);
    for (int proto = 2; proto <= 3; proto++) {
        reader rd = { proto == 2 ? o2.b.buf : o3.b.buf, proto == 2 ? o2.b.len : o3.b.len, 0, proto, 0 };
        while (rd.next < nexp) read_value(&rd);
        ENSURE(rd.pos == rd.len, "bytes left after the last reply");
    }
    rbuf_free(&o2.b);
    rbuf_free(&o3.b);
}

/* ---- encoder -> parser round trips ---- */

/* Write arg as an inline token: printable bytes as themselves where safe,
 * the rest with the escapes the parser understands, in "..." or '...'. */
static void inline_token(rbuf *line, const char *a, size_t n) {
    /* '...' can hold printable text only, and a trailing backslash would
     * escape the closing quote. */
    int single = !(n > 0 && a[n - 1] == '\\');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];
        if (c < 0x20 || c >= 0x7f) single = 0;
    }
    if (single && rnd_below(2)) {
        rbuf_append(line, "'", 1);
        for (size_t i = 0; i < n; i++) {
            if (a[i] == '\'') rbuf_append(line, "\\'", 2);
            else rbuf_append(line, &a[i], 1);
        }
        rbuf_append(line, "'", 1);
        return;
    }
    rbuf_append(line, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];
        char tmp[8];
        if (c == '\n') rbuf_append(line, "\\n", 2);
        else if (c == '"' || c == '\\') { tmp[0] = '\\'; tmp[1] = (char)c; rbuf_append(line, tmp, 2); }
        else if (c >= 0x20 && c < 0x7f && rnd_below(4)) rbuf_append(line, &a[i], 1);
        else { snprintf(tmp, sizeof(tmp), "\\x%02x", c); rbuf_append(line, tmp, 4); }
    }
    rbuf_append(line, "\"", 1);
}

static void check_roundtrip(const uint8_t *data, size_t size) {
    static char args[6][64];
    size_t lens[6];
    const char *ptrs[6];
    int argc = 1 + (int)rnd_below(6);
    resp_out o;
    rbuf line, want, got;
    resp_parser p;
    size_t used, need;

    src = data;
    srclen = size;
    for (int i = 0; i < argc; i++) {
        lens[i] = take_slice(args[i], sizeof(args[i]), 0);
        ptrs[i] = args[i];
    }
    rbuf_init(&want);
    rbuf_init(&got);
    log_argv(&want, argc, ptrs, lens);

    /* As a multibulk request built with the reply helpers. */
    resp_out_init(&o, 2);
    resp_add_array(&o, argc);
    for (int i = 0; i < argc; i++) resp_add_bulk(&o, args[i], lens[i]);
    resp_parser_init(&p, NULL);
    ENSURE(resp_parse(&p, o.b.buf, o.b.len, &used, &need) == RESP_COMMAND, "encoded multibulk parses");
    ENSURE(used == o.b.len, "encoded multibulk fully used");
    log_argv(&got, p.argc, p.argv, p.argvlen);
    ENSURE(got.len == want.len && memcmp(got.buf, want.buf, want.len) == 0, "multibulk round trip");

    /* As an inline line with quoting. */
    rbuf_init(&line);
    for (int i = 0; i < argc; i++) {
        rbuf_append(&line, i ? " " : "", i ? 1 : 0);
        inline_token(&line, args[i], lens[i]);
    }
    rbuf_append(&line, "\r\n", 2);
    got.len = 0;
    ENSURE(resp_parse(&p, line.buf, line.len, &used, &need) == RESP_COMMAND, "encoded inline parses");
    ENSURE(used == line.len, "encoded inline fully used");
    log_argv(&got, p.argc, p.argv, p.argvlen);
    ENSURE(got.len == want.len && memcmp(got.buf, want.buf, want.len) == 0, "inline round trip");

    resp_parser_free(&p);
    rbuf_free(&o.b);
    rbuf_free(&line);
    rbuf_free(&want);
    rbuf_free(&got);
}

/* ---- INCRBYFLOAT formatting ---- */

static void check_one_ldouble(long double v) {
    char buf[6000], *end;
    int n = ld2string(buf, sizeof(buf), v);

    ENSURE(n > 0 && (size_t)n == strlen(buf), "ldouble length");
    if (isnan(v)) {
        ENSURE(strcmp(buf, "nan") == 0, "ldouble nan");
        return;
    }
    if (isinf(v)) {
        ENSURE(strcmp(buf, v > 0 ? "inf" : "-inf") == 0, "ldouble inf");
        return;
    }
    ENSURE(strcmp(buf, "-0") != 0, "ldouble -0");
    ENSURE(strchr(buf, 'e') == NULL, "ldouble in exponent notation");
    if (strchr(buf, '.')) ENSURE(buf[n - 1] != '0' && buf[n - 1] != '.', "ldouble not trimmed");
    ENSURE(strlen(strchr(buf, '.') ? strchr(buf, '.') + 1 : "") <= 17, "ldouble over 17 decimals");
    long double back = strtold(buf, &end), diff = back - v;
    ENSURE(*end == '\0', "ldouble text has junk");
    if (diff < 0) diff = -diff;
    /* Rounded to 17 decimals, then read back to the nearest long double. */
    ENSURE(diff <= 1e-17L + (v < 0 ? -v : v) * 1e-18L, "ldouble does not read back");
}

static void check_ldoubles(const uint8_t *data, size_t size) {
    char text[64];
    long double v;
    unsigned char raw[sizeof(long double)];

    src = data;
    srclen = size;
    check_one_ldouble((long double)random_double() / (long double)(1 + rnd_below(1000)));
    take_slice(text, sizeof(text) - 1, 1);
    check_one_ldouble(strtold(text, NULL));
    /* Any x87 extended value with its explicit integer bit set (a valid
     * encoding), exponent kept moderate so the text fits the buffer. */
    memset(raw, 0, sizeof(raw));
    uint64_t mant = rnd() | (1ULL << 63);
    unsigned exp = 16383 - 80 + (unsigned)rnd_below(220);
    if (rnd_below(2)) exp |= 0x8000;
    memcpy(raw, &mant, 8);
    raw[8] = (unsigned char)exp;
    raw[9] = (unsigned char)(exp >> 8);
    memcpy(&v, raw, sizeof(v));
    check_one_ldouble(v);
}

/* ---------------- a long-lived connection ---------------- */

/* The decisions of the stream generator: the input's bytes, then the
 * input-seeded generator once they run out. */
static const uint8_t *gsrc;
static size_t gsrclen, gpos;
static int gbig;            /* this stream may hold the huge commands */

static unsigned gbyte(void) {
    return gpos < gsrclen ? gsrc[gpos++] : (unsigned)(rnd() & 0xff);
}

/* Arguments of the command being generated, as offsets into one arena. */
typedef struct gen_cmd {
    rbuf bytes;             /* argument bytes back to back */
    size_t *len;
    int argc, cap;
} gen_cmd;

static void gen_arg(gen_cmd *g, size_t n, int safe) {
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    if (g->argc == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 16;
        g->len = realloc(g->len, sizeof(size_t) * (size_t)g->cap);
    }
    rbuf_reserve(&g->bytes, n);
    char *d = g->bytes.buf + g->bytes.len;
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++, bits >>= 8) {
        if ((i & 7) == 0) bits = rnd();
        d[i] = safe ? alnum[(bits & 0xff) % (sizeof(alnum) - 1)] : (char)(bits & 0xff);
    }
    /* keep some protocol bytes in binary payloads */
    if (!safe && n >= 4 && (gbyte() & 1)) memcpy(d, "\r\n*$", 4);
    g->bytes.len += n;
    g->len[g->argc++] = n;
}

/* The stream's transcript is binary (the text one costs a printf per
 * argument, and streams have many): argc, then each length and its bytes;
 * an error is argc -1 and its text. */
static void blog_argv(rbuf *log, int argc, const char *const *argv, const size_t *argvlen) {
    rbuf_append(log, &argc, sizeof(argc));
    for (int i = 0; i < argc; i++) {
        rbuf_append(log, &argvlen[i], sizeof(size_t));
        rbuf_append(log, argv[i], argvlen[i]);
    }
}

static void blog_error(rbuf *log, const char *err) {
    int m = -1;
    rbuf_append(log, &m, sizeof(m));
    rbuf_append(log, err, strlen(err) + 1);
}

static void gen_log(const gen_cmd *g, rbuf *log) {
    int argc = g->argc;
    size_t off = 0;
    rbuf_append(log, &argc, sizeof(argc));
    for (int i = 0; i < argc; i++) {
        rbuf_append(log, &g->len[i], sizeof(size_t));
        rbuf_append(log, g->bytes.buf + off, g->len[i]);
        off += g->len[i];
    }
}

/* The refusing connection's arg_check: refuse_odd for arguments longer
 * than this. */
#define STREAM_MAX_ARG 100

static void blog_refused(rbuf *log) {
    int m = -2;
    rbuf_append(log, &m, sizeof(m));
}

/* Would a multibulk g be refused under refuse_odd and STREAM_MAX_ARG? At
 * its first argument after the name longer than that, if the name starts
 * with an odd byte. */
static int gen_refused(const gen_cmd *g) {
    if (g->argc < 2 || g->len[0] == 0 || !((unsigned char)g->bytes.buf[0] & 1)) return 0;
    for (int i = 1; i < g->argc; i++)
        if (g->len[i] > STREAM_MAX_ARG) return 1;
    return 0;
}

/* Append one generated command to stream, its transcript to want, and
 * its transcript for a connection refusing long arguments to want_ref. */
static void gen_command(rbuf *stream, rbuf *want, rbuf *want_ref) {
    gen_cmd g = {.argc = 0};
    rbuf_init(&g.bytes);
    unsigned kind = gbyte() % 10;
    if (kind <= 5) {                                 /* multibulk */
        unsigned a = gbyte();
        int argc = (a & 15) != 15 ? 1 + (int)(a % 5) : (a & 64) ? 2000 + (int)rnd_below(3000)
                 : (gbig && gbyte() % 4 == 0) ? 20000 : 300;
        unsigned sz = gbyte();
        for (int i = 0; i < argc; i++) {
            size_t n = argc > 100 ? rnd_below(4)
                     : (gbig && sz % 4 == 0 && i == argc - 1) ? 70000 + rnd_below(200000)
                     : rnd_below(sz % 4 == 0 ? 2000 : 24);
            gen_arg(&g, n, 0);
        }
        char hdr[32];
        rbuf_append(stream, hdr, (size_t)snprintf(hdr, sizeof(hdr), "*%d\r\n", argc));
        size_t off = 0;
        for (int i = 0; i < argc; i++) {
            if (g.len[i] < 10) {          /* most of them: no printf */
                memcpy(hdr, "$0\r\n", 4);
                hdr[1] = (char)('0' + g.len[i]);
                rbuf_append(stream, hdr, 4);
            } else {
                rbuf_append(stream, hdr, (size_t)snprintf(hdr, sizeof(hdr), "$%zu\r\n", g.len[i]));
            }
            rbuf_append(stream, g.bytes.buf + off, g.len[i]);
            rbuf_append(stream, "\r\n", 2);
            off += g.len[i];
        }
    } else if (kind <= 7) {                          /* inline, plain tokens */
        int argc = 1 + (int)(gbyte() % 6);
        size_t off = 0;
        for (int i = 0; i < argc; i++) gen_arg(&g, 1 + rnd_below(12), 1);
        for (int i = 0; i < argc; i++) {
            const char *sep = i == 0 ? "" : (gbyte() & 1) ? " " : " \t ";
            rbuf_append(stream, sep, strlen(sep));
            rbuf_append(stream, g.bytes.buf + off, g.len[i]);
            off += g.len[i];
        }
        const char *end = (gbyte() & 1) ? "\r\n" : "\n";
        rbuf_append(stream, end, strlen(end));
    } else {                                         /* empty requests */
        static const char *const empty[] = {"*0\r\n", "*-1\r\n", "\r\n", "\n", "  \t\r\n"};
        const char *e = empty[gbyte() % 5];
        rbuf_append(stream, e, strlen(e));
    }
    gen_log(&g, want);
    if (kind <= 5 && gen_refused(&g)) blog_refused(want_ref);
    else gen_log(&g, want_ref);
    rbuf_free(&g.bytes);
    free(g.len);
}
/* The invalid requests a stream may end with, and their errors. */
static const char *const stream_bad[][2] = {
    {"*1048577\r\n", "Protocol error: invalid multibulk length"},
    {"*3000000000\r\n", "Protocol error: invalid multibulk length"},
    {"*99999999999999999999\r\n", "Protocol error: invalid multibulk length"},
    {"*2\r\n$4\r\nECHO\r\n$-1\r\n", "Protocol error: invalid bulk length"},
    {"*2\r\n$4\r\nECHO\r\n$536870913\r\n", "Protocol error: invalid bulk length"},
    {"*2\r\n$4\r\nECHO\r\n:5\r\n", "Protocol error: expected '$', got ':'"},
    {"ECHO \"abc\r\n", "Protocol error: unbalanced quotes in request"},
};

/* Feed stream to one parser as networking.c's client_process_input does,
 * logging every command and refusal, and as its cron does now and then
 * between reads, give back an empty query buffer and let the parser trim
 * (a no-op mid-command); returns 1 if it ended in an error. */
static int feed_connection(resp_parser *p, const rbuf *stream, rbuf *log) {
    rbuf q;
    size_t fed = 0;
    int errored = 0;
    rbuf_init(&q);
    while (!errored && fed < stream->len) {
        unsigned r = gbyte();
        size_t n = r < 64 ? 1 + r % 7 : r < 200 ? 1 + rnd_below(16384) : 1 + rnd_below(300000);
        if (!gbig && r < 64 && stream->len - fed > 4096) n = 1 + rnd_below(4096);
        if (n > stream->len - fed) n = stream->len - fed;
        rbuf_reserve(&q, n);
        memcpy(q.buf + q.len, stream->buf + fed, n);
        q.len += n;
        fed += n;
        size_t pos = 0, used, need = 0;
        while (pos < q.len) {
            int rc = resp_parse(p, q.buf + pos, q.len - pos, &used, &need);
            ENSURE(used <= q.len - pos, "used out of range");
            pos += used;
            if (rc == RESP_INCOMPLETE) break;
            need = 0;
            if (rc == RESP_DROPPED) continue;
            if (rc == RESP_REFUSED) {
                blog_refused(log);
                continue;
            }
            if (rc == RESP_ERROR) {
                ENSURE(known_error(p->err), "unknown error text");
                blog_error(log, p->err);
                errored = 1;
                break;
            }
            ENSURE(used >= 1, "a command of no bytes");
            blog_argv(log, p->argc, p->argv, p->argvlen);
        }
        if (pos) rbuf_consume(&q, pos);
        if (need) rbuf_reserve(&q, need);
        if ((gbyte() & 7) == 0) {            /* the cron */
            if (q.len == 0 && q.cap > 32 * 1024) rbuf_free(&q);
            resp_parser_trim(p);
        }
    }
    rbuf_free(&q);
    return errored;
}

/* One generated stream through one parser; fails unless the transcript
 * is want. */
static void run_stream(const rbuf *stream, const resp_limits *lim, const rbuf *want, int bad,
                       const char *mode) {
    resp_parser p;
    rbuf got;
    rbuf_init(&got);
    resp_parser_init(&p, lim);
    int errored = feed_connection(&p, stream, &got);
    if (got.len != want->len || memcmp(got.buf, want->buf, want->len) != 0) {
        size_t at = 0;
        while (at < want->len && at < got.len && want->buf[at] == got.buf[at]) at++;
        fprintf(stderr, "fuzz-resp: stream of %zu bytes: transcripts (%zu and %zu bytes) "
                "differ from byte %zu\n", stream->len, want->len, got.len, at);
        fail("a long-lived parser returned other commands than were sent", mode);
    }
    ENSURE(errored == bad, "stream verdict");
    /* The next command starts: what the large ones needed is given back. */
    size_t used, need;
    ENSURE(resp_parse(&p, "", 0, &used, &need) == RESP_INCOMPLETE, "empty buffer");
    ENSURE(resp_parser_mem(&p) <= 1024 * 2 * sizeof(size_t) + 128 * 1024,
           "parser keeps what its largest command needed");
    resp_parser_free(&p);
    rbuf_free(&got);
}

static void check_stream(const uint8_t *data, size_t size) {
    static const resp_limits plain = { .max_bulk_len = 512LL * 1024 * 1024,
                                       .max_multibulk = 1024 * 1024, .max_inline = 64 * 1024 };
    static const resp_limits refusing = { .max_bulk_len = 512LL * 1024 * 1024,
                                          .max_multibulk = 1024 * 1024, .max_inline = 64 * 1024,
                                          .max_arg = STREAM_MAX_ARG, .arg_check = refuse_odd };
    rbuf stream, want, want_ref;
    gsrc = data;
    gsrclen = size;
    gpos = 0;
    rbuf_init(&stream);
    rbuf_init(&want);
    rbuf_init(&want_ref);
    /* Huge commands (70,000 arguments, a 1 MB one) in one stream of 16:
     * they cost most of the time. */
    gbig = rnd_below(16) == 0;
    int ncmds = 1 + (int)(size / 8 < 64 ? size / 8 : 64);
    for (int i = 0; i < ncmds && stream.len < (gbig ? 1u << 20 : 64u << 10); i++)
        gen_command(&stream, &want, &want_ref);
    unsigned b = gbyte() % (sizeof(stream_bad) / sizeof(stream_bad[0]) + 1);
    if (b > 0) {    /* 0: the stream ends cleanly */
        rbuf_append(&stream, stream_bad[b - 1][0], strlen(stream_bad[b - 1][0]));
        blog_error(&want, stream_bad[b - 1][1]);
        blog_error(&want_ref, stream_bad[b - 1][1]);
    }
    run_stream(&stream, &plain, &want, b > 0, "stream");
    run_stream(&stream, &refusing, &want_ref, b > 0, "stream refusing long arguments");
    rbuf_free(&stream);
    rbuf_free(&want);
    rbuf_free(&want_ref);
}

/* ---------------- entry point ---------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const resp_limits defaults = { .max_bulk_len = 512LL * 1024 * 1024,
                                          .max_multibulk = 1024 * 1024, .max_inline = 64 * 1024 };
    static const resp_limits tiny = { .max_bulk_len = 40, .max_multibulk = 6, .max_inline = 24 };
    static const resp_limits refusing = { .max_bulk_len = 40, .max_multibulk = 6, .max_inline = 24,
                                          .max_arg = 3, .arg_check = refuse_odd };
    static const resp_limits unauth = { .max_bulk_len = 512LL * 1024 * 1024,
                                        .max_multibulk = 1024 * 1024, .max_inline = 64 * 1024,
                                        .unauthenticated = 1 };

    rnd_state = hash_bytes(data, size);
    check_parser(data, size, &defaults);
    check_parser(data, size, &tiny);
    check_parser(data, size, &refusing);
    check_parser(data, size, &unauth);
    check_stream(data, size);
    check_replies(data, size);
    check_roundtrip(data, size);
    if (sizeof(long double) >= 10 && LDBL_MANT_DIG == 64) check_ldoubles(data, size);
    return 0;
}

/* ====================== standalone mutation fuzzer ====================== */
#ifdef FUZZ_STANDALONE
static const char *const dict[] = {
    "\r\n", "\r", "\n", "*", "$", "-1", "0", "1", "-", "\"", "'", "\\", "\\x", "\\x4",
    "\\xff", "\\'", "\\\"", " ", "\t", "\v", "\0", "2147483647", "2147483648",
    "536870912", "536870913", "1048576", "1048577", "65536", "65537",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "18446744073709551616", "00", "-0", "+1", "*0\r\n", "*-1\r\n", "$0\r\n\r\n",
    "*1\r\n$4\r\nPING\r\n", "PING\r\n", "SET \"a b\" 'c'\n", "$-1\r\n", "*3\r\n",
};

static const char *const numbers[] = {
    "0", "1", "-1", "2", "6", "7", "24", "25", "40", "41", "127", "128", "255", "256",
    "65535", "65536", "65537", "1048576", "1048577", "2147483647", "2147483648",
    "4294967296", "536870912", "536870913", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "99999999999999999999",
};

/* Apply one random mutation to buf[0..*n) (capacity max_len). */
static void mutate_once(uint8_t *buf, size_t *n, size_t max_len) {
    size_t len = *n, pos, k;
    switch (rnd_below(10)) {
    case 0:   /* flip a bit */
        if (len) buf[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
        break;
    case 1:   /* set a byte, often to a protocol character */
        if (len) {
            static const char chars[] = "\r\n*$-0123456789 \"'\\x\t";
            buf[rnd_below(len)] = rnd_below(2) ? (uint8_t)rnd()
                                               : (uint8_t)chars[rnd_below(sizeof(chars) - 1)];
        }
        break;
    case 2:   /* insert random bytes */
        k = 1 + rnd_below(4);
        if (len + k > max_len) break;
        pos = rnd_below(len + 1);
        memmove(buf + pos + k, buf + pos, len - pos);
        for (size_t i = 0; i < k; i++) buf[pos + i] = (uint8_t)rnd();
        *n = len + k;
        break;
    case 3:   /* delete a range */
        fuzz_delete_range(buf, n);
        break;
    case 4: { /* copy a range elsewhere (grows pipelines) */
        if (len == 0) break;
        size_t from = rnd_below(len);
        k = 1 + rnd_below(len - from);
        if (len + k > max_len) break;
        uint8_t *tmp = malloc(k);
        memcpy(tmp, buf + from, k);
        pos = rnd_below(len + 1);
        memmove(buf + pos + k, buf + pos, len - pos);
        memcpy(buf + pos, tmp, k);
        free(tmp);
        *n = len + k;
        break;
    }
    case 5: { /* insert a dictionary token */
        const char *t = dict[rnd_below(sizeof(dict) / sizeof(dict[0]))];
        k = t[0] ? strlen(t) : 1;
        if (len + k > max_len) break;
        pos = rnd_below(len + 1);
        memmove(buf + pos + k, buf + pos, len - pos);
        memcpy(buf + pos, t, k);
        *n = len + k;
        break;
    }
    case 6: { /* replace a run of digits by an interesting number */
        if (len == 0) break;
        size_t start = rnd_below(len), end;
        while (start < len && !(buf[start] >= '0' && buf[start] <= '9')) start++;
        if (start == len) break;
        end = start;
        while (end < len && ((buf[end] >= '0' && buf[end] <= '9') || buf[end] == '-')) end++;
        const char *num = numbers[rnd_below(sizeof(numbers) / sizeof(numbers[0]))];
        k = strlen(num);
        if (len - (end - start) + k > max_len) break;
        memmove(buf + start + k, buf + end, len - end);
        memcpy(buf + start, num, k);
        *n = len - (end - start) + k;
        break;
    }
    case 7:   /* splice: our prefix, another input's suffix */
        fuzz_splice(buf, n, max_len);
        break;
    case 8:   /* truncate */
        *n = rnd_below(len + 1);
        break;
    default: { /* append a well-formed multibulk command */
        char cmd[128];
        int argc = (int)rnd_below(4), m;
        m = snprintf(cmd, sizeof(cmd), "*%d\r\n", argc);
        for (int i = 0; i < argc && m < 100; i++) {
            int alen = (int)rnd_below(8);
            m += snprintf(cmd + m, sizeof(cmd) - (size_t)m, "$%d\r\n", alen);
            for (int j = 0; j < alen; j++) cmd[m++] = (char)('a' + rnd_below(26));
            cmd[m++] = '\r';
            cmd[m++] = '\n';
        }
        if (len + (size_t)m > max_len) break;
        memcpy(buf + len, cmd, (size_t)m);
        *n = len + (size_t)m;
        break;
    }
    }
}

static const char *const builtin_seeds[] = {
    "*1\r\n$4\r\nPING\r\n",
    "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
    "SET \"a b\" 'c\\'d' \"\\x41\\n\"\r\nPING\n",
    "*0\r\n*-1\r\n\r\n",
};

static void add_seeds(void) {
    for (size_t i = 0; i < sizeof(builtin_seeds) / sizeof(builtin_seeds[0]); i++)
        fuzz_pool_add((const uint8_t *)builtin_seeds[i], strlen(builtin_seeds[i]));
}

int main(int argc, char **argv) {
    static const fuzz_target t = { .name = "fuzz-resp", .max_len = 4096, .seed = add_seeds,
                                   .mutate = mutate_once, .rnd_state = &rnd_state,
                                   .rnd_below = rnd_below };
    return fuzz_main(&t, argc, argv);
}

#endif
