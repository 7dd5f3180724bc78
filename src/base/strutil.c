/* strutil.c -- string and number helpers with Redis's exact rules (the
 * core's; the command layer's argument parsers built on them are in
 * redis-compat/util.c).
 *
 * Clients compare what we print and what we accept with what Redis does, so
 * the rules here follow Redis's documented behaviour closely, quirks
 * included:
 *
 *  - Integers are strict: an optional '-', then digits without a leading
 *    zero ("0" alone is fine, "-0", "+1", " 1", "01" are not), at most 20
 *    characters, no overflow.
 *  - Floats go through strtod/strtold over the whole string: no spaces at
 *    either end, no empty string, no NaN, no overflow to infinity (an
 *    explicit "inf" is fine), no underflow to zero.
 *  - Doubles print as Redis 7.0's d2string: "%.17g" (noise digits and
 *    all); integral values below 2^52 in magnitude print as integers. Long doubles
 *    (INCRBYFLOAT) print in fixed notation with 17 decimals, trailing zeros
 *    trimmed.
 *  - Glob matching accepts the same pattern language as Redis's KEYS/SCAN,
 *    but matches without recursion, so no pattern can take exponential time
 *    or exhaust the stack.
 *
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strutil.h"

/* Longest integer text we accept: "-9223372036854775808" is 20 bytes. */
#define LL_MAX_TEXT 20
/* Float texts longer than this are refused (Redis's MAX_LONG_DOUBLE_CHARS).
 * It also bounds the stack copy we need to NUL-terminate for strtod. */
#define FLOAT_MAX_TEXT (5 * 1024)

/* ------------------------------------------------------------------ */
/* Integers                                                            */
/* ------------------------------------------------------------------ */

int string2ll(const char *s, size_t len, long long *value) {
    size_t i = 0;
    int negative = 0;
    unsigned long long v;

    if (len == 0 || len > LL_MAX_TEXT) return 0;
    if (len == 1 && s[0] == '0') {
        if (value) *value = 0;
        return 1;
    }
    if (s[0] == '-') {
        negative = 1;
        i++;
        if (i == len) return 0;
    }
    /* After the sign the first digit must be 1-9: this is what rejects
     * "-0", "00" and "01". */
    if (s[i] < '1' || s[i] > '9') return 0;
    v = (unsigned long long)(s[i] - '0');
    for (i++; i < len; i++) {
        unsigned d;
        if (s[i] < '0' || s[i] > '9') return 0;
        d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (negative) {
        /* |LLONG_MIN| is LLONG_MAX + 1. */
        if (v > (unsigned long long)LLONG_MAX + 1) return 0;
        if (value) *value = (long long)(0 - v);
    } else {
        if (v > (unsigned long long)LLONG_MAX) return 0;
        if (value) *value = (long long)v;
    }
    return 1;
}

int ull2string(char *buf, size_t len, unsigned long long v) {
    char tmp[24];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if ((size_t)n + 1 > len) {
        if (len) buf[0] = '\0';
        return 0;
    }
    for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return n;
}

int ll2string(char *buf, size_t len, long long v) {
    unsigned long long u;
    int n;

    if (v >= 0) return ull2string(buf, len, (unsigned long long)v);
    /* Negate in unsigned arithmetic so LLONG_MIN does not overflow. */
    u = 0 - (unsigned long long)v;
    if (len < 2) {
        if (len) buf[0] = '\0';
        return 0;
    }
    n = ull2string(buf + 1, len - 1, u);
    if (n == 0) {
        buf[0] = '\0';
        return 0;
    }
    buf[0] = '-';
    return n + 1;
}

/* ------------------------------------------------------------------ */
/* Floats                                                              */
/* ------------------------------------------------------------------ */

/* strtod needs a NUL-terminated string and our arguments are counted, so
 * the float parsers copy into a bounded buffer first. Returns 0 when the
 * text cannot be a valid float at all (empty, too long, leading space). */
static int float_text(const char *s, size_t len, char *buf) {
    if (len == 0 || len >= FLOAT_MAX_TEXT) return 0;
    if (isspace((unsigned char)s[0])) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 1;
}

int string2d(const char *s, size_t len, double *value) {
    char buf[FLOAT_MAX_TEXT];
    char *end;
    double d;

    if (!float_text(s, len, buf)) return 0;
    errno = 0;
    d = strtod(buf, &end);
    /* An embedded NUL or trailing garbage stops strtod early. */
    if ((size_t)(end - buf) != len) return 0;
    /* Out of range: overflow (a huge literal, not an explicit "inf") and
     * underflow to zero are both refused, as Redis does. */
    if (errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL || d == 0)) return 0;
    if (isnan(d)) return 0;
    if (value) *value = d;
    return 1;
}

int string2ld(const char *s, size_t len, long double *value) {
    char buf[FLOAT_MAX_TEXT];
    char *end;
    long double d;

    if (!float_text(s, len, buf)) return 0;
    errno = 0;
    d = strtold(buf, &end);
    if ((size_t)(end - buf) != len) return 0;
    if (errno == ERANGE && (d == HUGE_VALL || d == -HUGE_VALL || d == 0)) return 0;
    if (isnan(d)) return 0;
    if (value) *value = d;
    return 1;
}

/* Copy a short fixed text into buf; returns its length (0 if no room). */
static int put_text(char *buf, size_t len, const char *txt) {
    size_t n = strlen(txt);
    if (n + 1 > len) {
        if (len) buf[0] = '\0';
        return 0;
    }
    memcpy(buf, txt, n + 1);
    return (int)n;
}

int d2string(char *buf, size_t len, double v) {
    if (isnan(v)) return put_text(buf, len, "nan");
    if (isinf(v)) return put_text(buf, len, v > 0 ? "inf" : "-inf");
    if (v == 0) return put_text(buf, len, signbit(v) ? "-0" : "0");

    /* Redis 7.0's bounds: integral doubles of magnitude below 2^52 print
     * as integers ("3", not "3e+00"); converting them is exact. */
    if (v > -4503599627370495.0 && v < 4503599627370496.0) {
        long long ll = (long long)v;
        if ((double)ll == v) return ll2string(buf, len, ll);
    }
    int n = snprintf(buf, len, "%.17g", v);
    if (n < 0 || (size_t)n >= len) {
        if (len) buf[0] = '\0';
        return 0;
    }
    return n;
}

int ld2string(char *buf, size_t len, long double v) {
    int n;

    if (isnan(v)) return put_text(buf, len, "nan");
    if (isinf(v)) return put_text(buf, len, v > 0 ? "inf" : "-inf");

    /* 17 decimals: with 80/128-bit long doubles that is enough for the
     * small decimal numbers people increment by to print back as typed. */
    n = snprintf(buf, len, "%.17Lf", v);
    if (n < 0 || (size_t)n >= len) {
        if (len) buf[0] = '\0';
        return 0;
    }
    /* %f always prints a point here (precision 17); trim its zeros. */
    while (buf[n - 1] == '0') n--;
    if (buf[n - 1] == '.') n--;
    /* A tiny negative value rounds to "-0": print it as "0". */
    if (n == 2 && buf[0] == '-' && buf[1] == '0') {
        buf[0] = '0';
        n = 1;
    }
    buf[n] = '\0';
    return n;
}

/* ------------------------------------------------------------------ */
/* Glob matching                                                       */
/* ------------------------------------------------------------------ */

/* Does the single-character pattern element at pattern[p] ('?', a class,
 * an escape or a literal; never '*') match ch? Sets *next to the index just
 * past the element.
 *
 * Redis compares characters as plain (signed) chars, also inside ranges, so
 * "[a-\xff]" does not match 'b' (0xff sorts first). We do the same so KEYS
 * and SCAN select exactly the keys Redis would. */
static int match_one(const char *pattern, size_t plen, size_t p, char ch,
                     int nocase, size_t *next) {
    int match = 0, negate;

    switch (pattern[p]) {
    case '?':
        *next = p + 1;
        return 1;
    case '\\':
        /* An escape takes the next character literally; a lone trailing
         * backslash is itself a literal. */
        if (p + 1 < plen) p++;
        break;
    case '[':
        p++;
        negate = p < plen && pattern[p] == '^';
        if (negate) p++;
        for (;;) {
            if (p >= plen) {
                /* Unterminated class: the elements read so far decide,
                 * and the pattern ends here. */
                *next = plen;
                break;
            }
            if (pattern[p] == '\\' && plen - p >= 2) {
                /* Escaped member: compared exactly, even with nocase. */
                p++;
                if (pattern[p] == ch) match = 1;
            } else if (pattern[p] == ']') {
                *next = p + 1;
                break;
            } else if (plen - p >= 3 && pattern[p + 1] == '-') {
                int lo = (signed char)pattern[p], hi = (signed char)pattern[p + 2];
                int c = (signed char)ch;
                if (lo > hi) { int t = lo; lo = hi; hi = t; }
                if (nocase) { lo = tolower(lo); hi = tolower(hi); c = tolower(c); }
                if (c >= lo && c <= hi) match = 1;
                p += 2;
            } else if (nocase) {
                if (tolower((signed char)pattern[p]) == tolower((signed char)ch)) match = 1;
            } else if (pattern[p] == ch) {
                match = 1;
            }
            p++;
        }
        return negate ? !match : match;
    default:
        break;
    }
    *next = p + 1;
    if (nocase) return tolower((signed char)pattern[p]) == tolower((signed char)ch);
    return pattern[p] == ch;
}

/* Iterative glob matching: every element but '*' consumes exactly one
 * character, so on a mismatch it is enough to retry from the most recent
 * '*', letting it swallow one more character (earlier stars never need to
 * grow: anything they could gain, the latest star can gain too). That is
 * O(plen * slen) at worst, with no recursion, so patterns like
 * "*a*a*a*a...b" that make a recursive matcher hang cannot hurt us. The
 * results are those of Redis's recursive matcher, including that a
 * non-empty pattern never matches the empty string. */
int stringmatchlen(const char *pattern, size_t plen, const char *s, size_t slen, int nocase) {
    size_t p = 0, i = 0;
    size_t star_p = 0, star_i = 0;
    int have_star = 0;

    if (slen == 0) return plen == 0;
    while (i < slen) {
        if (p < plen && pattern[p] == '*') {
            while (p < plen && pattern[p] == '*') p++;
            if (p == plen) return 1;   /* a trailing star takes the rest */
            have_star = 1;
            star_p = p;
            star_i = i;
            continue;
        }
        if (p < plen) {
            size_t next;
            if (match_one(pattern, plen, p, s[i], nocase, &next)) {
                p = next;
                i++;
                continue;
            }
        }
        if (!have_star) return 0;
        /* Let the last star swallow one more character and retry. */
        p = star_p;
        i = ++star_i;
    }
    while (p < plen && pattern[p] == '*') p++;
    return p == plen;
}

int strcaseeqlen(const char *s, size_t len, const char *lit) {
    size_t n = strlen(lit);
    return n == len && strncasecmp(s, lit, len) == 0;
}

/* ------------------------------------------------------------------ */
/* Memory sizes                                                        */
/* ------------------------------------------------------------------ */

int memtoll(const char *s, long long *out) {
    static const struct { const char *unit; long long mul; } units[] = {
        {"", 1}, {"b", 1},
        {"k", 1000}, {"kb", 1024},
        {"m", 1000LL * 1000}, {"mb", 1024LL * 1024},
        {"g", 1000LL * 1000 * 1000}, {"gb", 1024LL * 1024 * 1024},
    };
    const char *u = s;
    unsigned long long v = 0;
    long long mul = -1;

    /* Digits only: no sign, no spaces (a negative size is an error). */
    while (*u >= '0' && *u <= '9') {
        unsigned d = (unsigned)(*u - '0');
        if (v > ((unsigned long long)LLONG_MAX - d) / 10) return 0;
        v = v * 10 + d;
        u++;
    }
    if (u == s) return 0;
    for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
        if (strcasecmp(u, units[k].unit) == 0) {
            mul = units[k].mul;
            break;
        }
    }
    if (mul < 0) return 0;
    if (v > (unsigned long long)(LLONG_MAX / mul)) return 0;
    if (out) *out = (long long)v * mul;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Random numbers                                                      */
/* ------------------------------------------------------------------ */

/* splitmix64: one add and a few mixes per number, good enough for picking
 * random keys and ids. Each thread has its own state, seeded on first use
 * from the clock, the thread id and the state's address (distinct per
 * thread), so workers never share or contend on it. */
static __thread uint64_t rnd_state;
static __thread int rnd_seeded;

uint64_t rnd64(void) {
    uint64_t z;

    if (!rnd_seeded) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rnd_state = ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) ^
                    ((uint64_t)pthread_self() * 0x9E3779B97F4A7C15ULL) ^
                    (uint64_t)(uintptr_t)&rnd_state;
        rnd_seeded = 1;
    }
    z = (rnd_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
