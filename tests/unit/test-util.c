/* test-util.c -- src/base/strutil.c: Redis's number and glob rules.
 *
 * The vectors are the behaviours clients can observe through commands
 * (INCR's integer rule, INCRBYFLOAT's output, KEYS patterns, config sizes),
 * checked against what Redis 7 does. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "unit.h"
#include "util.h"

static int ll_ok(const char *s, long long want) {
    long long v = 12345;
    return string2ll(s, strlen(s), &v) == 1 && v == want;
}

static int ll_bad(const char *s) {
    return string2ll(s, strlen(s), NULL) == 0;
}

static void test_string2ll(void) {
    CHECK(ll_ok("0", 0));
    CHECK(ll_ok("1", 1));
    CHECK(ll_ok("-1", -1));
    CHECK(ll_ok("123456", 123456));
    CHECK(ll_ok("9223372036854775807", LLONG_MAX));
    CHECK(ll_ok("-9223372036854775808", LLONG_MIN));
    CHECK(ll_bad("9223372036854775808"));
    CHECK(ll_bad("-9223372036854775809"));
    CHECK(ll_bad("18446744073709551616"));
    CHECK(ll_bad("99999999999999999999"));
    CHECK(ll_bad("123456789012345678901"));   /* 21 chars */
    CHECK(ll_bad(""));
    CHECK(ll_bad("-"));
    CHECK(ll_bad("-0"));
    CHECK(ll_bad("00"));
    CHECK(ll_bad("01"));
    CHECK(ll_bad("+1"));
    CHECK(ll_bad(" 1"));
    CHECK(ll_bad("1 "));
    CHECK(ll_bad("1a"));
    CHECK(ll_bad("0x10"));
    CHECK(ll_bad("1.0"));
    /* counted: the bytes after len do not count, embedded NUL does */
    long long v = 0;
    CHECK(string2ll("12abc", 2, &v) == 1 && v == 12);
    CHECK(string2ll("1\0" "2", 3, &v) == 0);
}

static void test_ll2string(void) {
    char buf[32];
    CHECK_EQ_LL(ll2string(buf, sizeof buf, 0), 1);
    CHECK(strcmp(buf, "0") == 0);
    CHECK_EQ_LL(ll2string(buf, sizeof buf, -42), 3);
    CHECK(strcmp(buf, "-42") == 0);
    CHECK_EQ_LL(ll2string(buf, sizeof buf, LLONG_MIN), 20);
    CHECK(strcmp(buf, "-9223372036854775808") == 0);
    CHECK_EQ_LL(ll2string(buf, sizeof buf, LLONG_MAX), 19);
    CHECK(strcmp(buf, "9223372036854775807") == 0);
    CHECK_EQ_LL(ull2string(buf, sizeof buf, ULLONG_MAX), 20);
    CHECK(strcmp(buf, "18446744073709551615") == 0);
    CHECK_EQ_LL(ll2string(buf, 3, 123), 0);   /* no room */
    CHECK_EQ_LL(ll2string(buf, 4, 123), 3);
}

static int d_ok(const char *s, double want) {
    double d = -12345;
    return string2d(s, strlen(s), &d) == 1 && (d == want || (isinf(want) && d == want));
}

static int d_bad(const char *s) {
    double d;
    return string2d(s, strlen(s), &d) == 0;
}

static void test_string2d(void) {
    CHECK(d_ok("1", 1));
    CHECK(d_ok("-1.5", -1.5));
    CHECK(d_ok("+2.5", 2.5));
    CHECK(d_ok("1e3", 1000));
    CHECK(d_ok(".5", 0.5));
    CHECK(d_ok("inf", INFINITY));
    CHECK(d_ok("-inf", -INFINITY));
    CHECK(d_ok("+inf", INFINITY));
    CHECK(d_ok("0", 0));
    CHECK(d_bad(""));
    CHECK(d_bad(" 1"));
    CHECK(d_bad("1 "));
    CHECK(d_bad("1x"));
    CHECK(d_bad("nan"));
    CHECK(d_bad("-nan"));
    CHECK(d_bad("1e400"));     /* overflow */
    CHECK(d_bad("1e-400"));    /* underflow to zero */
    double d;
    CHECK(string2d("1.5", 3, &d) == 1 && d == 1.5);
    CHECK(string2d("1.5e", 3, &d) == 1 && d == 1.5);   /* counted */

    long double ld;
    CHECK(string2ld("10.5", 4, &ld) == 1 && ld == 10.5L);
    CHECK(string2ld("1e400", 5, &ld) == 1);          /* fits a long double */
    CHECK(string2ld("", 0, &ld) == 0);
    CHECK(string2ld(" 1", 2, &ld) == 0);
    CHECK(string2ld("nan", 3, &ld) == 0);
    CHECK(string2ld("inf", 3, &ld) == 1 && isinf(ld));
    CHECK(string2ld("1e99999", 7, &ld) == 0);
    char big[6000];
    memset(big, '1', sizeof big);
    CHECK(string2ld(big, sizeof big, &ld) == 0);       /* too long */
}

static int d2s_is(double v, const char *want) {
    char buf[64];
    int n = d2string(buf, sizeof buf, v);
    if (n != (int)strlen(want) || strcmp(buf, want) != 0) {
        fprintf(stderr, "d2string: got '%s' want '%s'\n", buf, want);
        return 0;
    }
    return 1;
}

static void test_d2string(void) {
    /* Redis 7.0's d2string: "%.17g", integers below 2^52 as integers. */
    CHECK(d2s_is(0, "0"));
    CHECK(d2s_is(-0.0, "-0"));
    CHECK(d2s_is(1, "1"));
    CHECK(d2s_is(-3, "-3"));
    CHECK(d2s_is(1.5, "1.5"));
    CHECK(d2s_is(0.1, "0.10000000000000001"));
    CHECK(d2s_is(3.14, "3.1400000000000001"));
    CHECK(d2s_is(1e15, "1000000000000000"));
    CHECK(d2s_is(1e300, "1.0000000000000001e+300"));
    CHECK(d2s_is(1.5e-7, "1.4999999999999999e-07"));
    CHECK(d2s_is(INFINITY, "inf"));
    CHECK(d2s_is(-INFINITY, "-inf"));
    CHECK(d2s_is(NAN, "nan"));
    CHECK(d2s_is(0.1 + 0.2, "0.30000000000000004"));

    /* Round trips over awkward values. */
    static const double vals[] = {
        0.1, 1.0 / 3, 2.0 / 3, 1e-300, 4.9e-324, DBL_MAX, -DBL_MAX, DBL_MIN,
        123456789.123456789, 9007199254740993.0, 1e22, 5e-5, 0.3, 100.25,
        4611686018427387904.0, 9223372036854775807.0,
    };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char buf[64];
        d2string(buf, sizeof buf, vals[i]);
        CHECK(strtod(buf, NULL) == vals[i]);
    }
    srand(7);
    for (int i = 0; i < 10000; i++) {
        double v = ((double)rand() / RAND_MAX - 0.5) * pow(10, rand() % 40 - 20);
        char buf[64];
        d2string(buf, sizeof buf, v);
        if (strtod(buf, NULL) != v) { CHECK(!"d2string round trip"); break; }
    }
    char small[3];
    CHECK_EQ_LL(d2string(small, sizeof small, 0.125), 0);
}

static int ld2s_is(long double v, const char *want) {
    char buf[5200];
    int n = ld2string(buf, sizeof buf, v);
    if (n != (int)strlen(want) || strcmp(buf, want) != 0) {
        fprintf(stderr, "ld2string: got '%s' want '%s'\n", buf, want);
        return 0;
    }
    return 1;
}

static void test_ld2string(void) {
    CHECK(ld2s_is(0, "0"));
    CHECK(ld2s_is(-0.0L, "0"));
    CHECK(ld2s_is(10.5L, "10.5"));
    CHECK(ld2s_is(3.0L, "3"));
    CHECK(ld2s_is(-3.0L, "-3"));
    /* INCRBYFLOAT examples from the Redis docs */
    CHECK(ld2s_is(10.50L + 0.1L, "10.6"));
    CHECK(ld2s_is(5.0e3L + 2.0e2L, "5200"));
    CHECK(ld2s_is(1e-20L, "0"));
    CHECK(ld2s_is(-1e-20L, "0"));
    CHECK(ld2s_is(0.00000000000000001L, "0.00000000000000001"));
    CHECK(ld2s_is(INFINITY, "inf"));
    CHECK(ld2s_is(-INFINITY, "-inf"));
    char buf[5200];
    int n = ld2string(buf, sizeof buf, 1e300L);
    CHECK(n == 301 && buf[0] == '1' && strspn(buf + 1, "0123456789") == 300);
    CHECK_EQ_LL(ld2string(buf, 10, 1e300L), 0);   /* no room */
}

static int gm(const char *p, const char *s) {
    return stringmatchlen(p, strlen(p), s, strlen(s), 0);
}

static int gmi(const char *p, const char *s) {
    return stringmatchlen(p, strlen(p), s, strlen(s), 1);
}

static void test_stringmatch(void) {
    CHECK(gm("*", "anything"));
    CHECK(gm("h?llo", "hello"));
    CHECK(gm("h?llo", "hallo"));
    CHECK(!gm("h?llo", "hllo"));
    CHECK(gm("h*llo", "hllo"));
    CHECK(gm("h*llo", "heeeello"));
    CHECK(gm("h[ae]llo", "hello"));
    CHECK(gm("h[ae]llo", "hallo"));
    CHECK(!gm("h[ae]llo", "hillo"));
    CHECK(gm("h[^e]llo", "hallo"));
    CHECK(!gm("h[^e]llo", "hello"));
    CHECK(gm("h[a-b]llo", "hbllo"));
    CHECK(!gm("h[a-b]llo", "hcllo"));
    CHECK(gm("h[b-a]llo", "hallo"));          /* reversed range */
    CHECK(gm("h\\*llo", "h*llo"));
    CHECK(!gm("h\\*llo", "hello"));
    CHECK(gm("a\\", "a\\"));                  /* trailing backslash is literal */
    CHECK(gm("[\\]]", "]"));                  /* escaped ']' in a class */
    CHECK(gm("[]", "") == 0);
    CHECK(!gm("[]a", "a"));                   /* empty class matches nothing */
    CHECK(gm("[^]a", "xa"));
    CHECK(gm("[abc", "b"));                   /* unterminated class */
    CHECK(!gm("[abc", "bx"));
    CHECK(gm("[^", "z"));
    CHECK(!gm("[", "["));
    CHECK(gm("[a-]", "]"));                   /* Redis reads "a-]" as a range */
    CHECK(gm("*.txt", "a.txt"));
    CHECK(!gm("*.txt", "a.txt.bak"));
    CHECK(gm("a*b*c", "aXXbYYc"));
    CHECK(gm("a*b*c", "abc"));
    CHECK(!gm("a*b*c", "acb"));
    CHECK(gm("a**", "a"));
    CHECK(gm("a*", "a"));
    CHECK(gm("", "") == 1);
    CHECK(!gm("", "a"));
    CHECK(!gm("*", ""));                      /* Redis: a pattern never matches "" */
    CHECK(!gm("?", ""));
    CHECK(gm("*?", "a"));
    CHECK(!gm("*??", "a"));
    CHECK(gm("*a*a*a*a*a*b", "aaaaaaaaaab"));
    CHECK(gmi("HELLO", "hello"));
    CHECK(gmi("h[A-Z]llo", "hello"));
    CHECK(!gm("h[A-Z]llo", "hello"));
    CHECK(!gm("HELLO", "hello"));
    /* signed char ranges, like Redis: 0xff sorts below 'a' */
    CHECK(!gm("[a-\xff]", "b"));
    CHECK(gm("[\xff-a]", "0"));
    /* counted strings with NULs */
    CHECK(stringmatchlen("a?c", 3, "a\0c", 3, 0));
    CHECK(stringmatchlen("a*", 1, "ab", 2, 0) == 0);

    /* Pathological pattern: a recursive matcher takes ages here. */
    char pat[4096], str[4096];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) { pat[n++] = 'a'; pat[n++] = '*'; }
    pat[n++] = 'b';
    memset(str, 'a', 3000);
    CHECK(stringmatchlen(pat, n, str, 3000, 0) == 0);
    str[2999] = 'b';
    CHECK(stringmatchlen(pat, n, str, 3000, 0) == 1);
}

static int mem_is(const char *s, long long want) {
    long long v = -1;
    return memtoll(s, &v) == 1 && v == want;
}

static void test_memtoll(void) {
    CHECK(mem_is("0", 0));
    CHECK(mem_is("4096", 4096));
    CHECK(mem_is("12b", 12));
    CHECK(mem_is("1k", 1000));
    CHECK(mem_is("1kb", 1024));
    CHECK(mem_is("1K", 1000));
    CHECK(mem_is("1KB", 1024));
    CHECK(mem_is("2m", 2000000));
    CHECK(mem_is("64mb", 64LL * 1024 * 1024));
    CHECK(mem_is("1g", 1000000000));
    CHECK(mem_is("1gb", 1024LL * 1024 * 1024));
    CHECK(mem_is("1Gb", 1024LL * 1024 * 1024));
    CHECK(mem_is("9223372036854775807", LLONG_MAX));
    long long v;
    CHECK(memtoll("", &v) == 0);
    CHECK(memtoll("mb", &v) == 0);
    CHECK(memtoll("-1", &v) == 0);
    CHECK(memtoll("1tb", &v) == 0);
    CHECK(memtoll("1 mb", &v) == 0);
    CHECK(memtoll("9223372036854775808", &v) == 0);
    CHECK(memtoll("9000000000gb", &v) == 0);  /* overflow after the unit */
}

static void test_misc(void) {
    CHECK(strcaseeqlen("GeT", 3, "get"));
    CHECK(!strcaseeqlen("GeTx", 3, "getx"));
    CHECK(!strcaseeqlen("get", 3, "gets"));
    CHECK(strcaseeqlen("", 0, ""));

    uint64_t a = rnd64(), b = rnd64(), c = rnd64();
    CHECK(a != b && b != c);
    int bits[64] = {0};
    for (int i = 0; i < 4096; i++) {
        uint64_t r = rnd64();
        for (int j = 0; j < 64; j++) bits[j] += (int)((r >> j) & 1);
    }
    int balanced = 1;
    for (int j = 0; j < 64; j++) if (bits[j] < 1700 || bits[j] > 2400) balanced = 0;
    CHECK(balanced);
}

int main(void) {
    test_string2ll();
    test_ll2string();
    test_string2d();
    test_d2string();
    test_ld2string();
    test_stringmatch();
    test_memtoll();
    test_misc();
    return UNIT_DONE("test-util");
}
