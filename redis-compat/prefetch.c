/* prefetch.c -- cache hints for the keys of a pipelined batch (issue 14,
 * fifth pass).
 *
 * A read that brings several commands (redis-benchmark -P 16: sixteen
 * SETs in one read) lets the core start the cache misses of all their key
 * lookups before the first one runs (db_prefetch.c says which and why).
 * This side only finds the keys: it walks the complete multibulk commands
 * at the start of the input without parsing them for real (no copies, no
 * limits: the parser still checks everything when the commands run) and
 * takes each one's first argument, which is the key of nearly every
 * command that has one. A command whose first argument is no key, or a
 * batch of one, costs a few comparisons; inline commands and anything
 * malformed end the walk. */
#include <string.h>
#include "prefetch.h"
#include "db.h"

/* The decimal at [p, end) (a RESP count or length); -1 if it is not one. */
static long long parse_len(const char *p, const char *end) {
    if (p == end || end - p > 18) return -1;
    long long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* The length on the line starting at *p (after its type byte), moving *p
 * past the line's CRLF; -1 if the line is incomplete or not a length. */
static long long header(const char **p, const char *end) {
    const char *cr = memchr(*p, '\r', (size_t)(end - *p));
    if (!cr || cr + 1 >= end || cr[1] != '\n') return -1;
    long long v = parse_len(*p + 1, cr);
    *p = cr + 2;
    return v;
}

void prefetch_pipeline(int db, const char *buf, size_t len) {
    const char *keys[DB_PREFETCH_MAX];
    size_t klens[DB_PREFETCH_MAX];
    const char *p = buf, *end = buf + len;
    int n = 0;
    while (n < DB_PREFETCH_MAX && p < end && *p == '*') {
        long long argc = header(&p, end);
        if (argc < 1) break;
        const char *key = NULL;
        size_t klen = 0;
        for (long long a = 0; a < argc; a++) {
            if (p >= end || *p != '$') goto done;
            long long bl = header(&p, end);
            if (bl < 0 || (unsigned long long)(end - p) < (unsigned long long)bl + 2) goto done;
            if (a == 1) {
                key = p;
                klen = (size_t)bl;
            }
            p += bl + 2;
        }
        if (key) {
            keys[n] = key;
            klens[n] = klen;
            n++;
        }
    }
done:
    if (n >= 2) db_prefetch_keys(db, n, keys, klens);
}
