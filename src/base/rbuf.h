/* rbuf.h -- a growable byte buffer: replies, INFO text, snapshots, log
 * entries being built. Used by the core and by the edges alike, so it lives
 * in the core (the RESP codec, resp.h, builds on it).
 *
 * Like Redis's zmalloc, running out of memory is fatal: there is no sane
 * way to keep serving with a half-built reply or entry. */
#ifndef ROWAN_RBUF_H
#define ROWAN_RBUF_H
#include <stddef.h>

typedef struct rbuf {
    char *buf;
    size_t len, cap;
} rbuf;

void rbuf_init(rbuf *b);
void rbuf_free(rbuf *b);
void rbuf_reserve(rbuf *b, size_t extra);  /* aborts on OOM like Redis */
void rbuf_append(rbuf *b, const void *p, size_t n);
/* Append printf-formatted text (INFO sections, CLIENT LIST lines...). */
void rbuf_appendf(rbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drop the first n bytes. */
void rbuf_consume(rbuf *b, size_t n);
/* realloc that aborts when memory runs out (size 0 allocates 1 byte). */
void *rbuf_realloc_or_die(void *ptr, size_t size);

#endif
