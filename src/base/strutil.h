/* strutil.h -- string and number helpers with Redis's exact rules.
 *
 * Redis is strict about what counts as an integer ("+1", " 1", "01" are not)
 * and prints doubles its own way; clients depend on both, so these mirror
 * Redis's util.c behaviour (written here from its documented behaviour). */
#ifndef ROWAN_STRUTIL_H
#define ROWAN_STRUTIL_H
#include <stddef.h>
#include <stdint.h>

/* Parse a signed 64-bit integer: optional '-', digits, no leading zeros
 * (except "0"), no spaces or '+', no overflow. 1 ok, 0 not an integer. */
int string2ll(const char *s, size_t len, long long *value);
/* Parse a double as Redis does for scores/INCRBYFLOAT: strtod over the whole
 * string, no leading/trailing space, not NaN. "inf"/"-inf"/"+inf" accepted.
 * 1 ok, 0 bad. */
int string2d(const char *s, size_t len, double *value);
int string2ld(const char *s, size_t len, long double *value);
/* Integer to decimal; returns length (buf needs 21 bytes). */
int ll2string(char *buf, size_t len, long long v);
int ull2string(char *buf, size_t len, unsigned long long v);
/* A double as Redis 7.0's d2string prints it: "%.17g", integers below
 * 2^52 as integers; "inf", "-inf". Returns length. */
int d2string(char *buf, size_t len, double v);
/* A long double as INCRBYFLOAT prints it (fixed notation, up to 17 digits
 * after the point, trailing zeros and a trailing point removed). */
int ld2string(char *buf, size_t len, long double v);
/* Glob-style match (*, ?, [abc], [^a-z], \x escapes), like Redis's
 * stringmatchlen. nocase != 0 compares case-insensitively. */
int stringmatchlen(const char *pattern, size_t plen, const char *s, size_t slen, int nocase);
/* Case-insensitive comparison of a counted string with a C string. */
int strcaseeqlen(const char *s, size_t len, const char *lit);
/* Parse a memory size like redis.conf: "1gb", "512mb", "100k", "4096". 1 ok. */
int memtoll(const char *s, long long *out);
/* Fast non-cryptographic PRNG (per thread). */
uint64_t rnd64(void);

#endif
