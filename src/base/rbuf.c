/* rbuf.c -- a growable byte buffer (rbuf.h). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rbuf.h"

/* Like Redis's zmalloc, running out of memory is fatal: there is no sane way
 * to keep serving with a half-built reply or request. */
static void rbuf_oom(size_t size) {
    fprintf(stderr, "rowan: out of memory allocating %zu bytes\n", size);
    abort();
}

void *rbuf_realloc_or_die(void *ptr, size_t size) {
    void *p = realloc(ptr, size ? size : 1);
    if (p == NULL) rbuf_oom(size);
    return p;
}

void rbuf_init(rbuf *b) {
    b->buf = NULL;
    b->len = b->cap = 0;
}

void rbuf_free(rbuf *b) {
    free(b->buf);
    rbuf_init(b);
}

/* Make room for `extra` more bytes. Capacity doubles so appending byte by
 * byte stays linear overall. */
void rbuf_reserve(rbuf *b, size_t extra) {
    if (b->cap - b->len >= extra) return;
    if (extra > SIZE_MAX - b->len) rbuf_oom(SIZE_MAX);
    size_t want = b->len + extra;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < want) cap = (cap > SIZE_MAX / 2) ? want : cap * 2;
    b->buf = rbuf_realloc_or_die(b->buf, cap);
    b->cap = cap;
}

void rbuf_append(rbuf *b, const void *p, size_t n) {
    if (n == 0) return;   /* p may be NULL then; memcpy must not see it */
    rbuf_reserve(b, n);
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

void rbuf_appendf(rbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    rbuf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void rbuf_consume(rbuf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->buf, b->buf + n, b->len - n);
    b->len -= n;
}

