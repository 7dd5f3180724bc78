/* prefetch.h -- cache hints for a pipelined batch's keys (prefetch.c). */
#ifndef ROWAN_PREFETCH_H
#define ROWAN_PREFETCH_H
#include <stddef.h>

/* buf holds the connection's unparsed input from a command's start: hint
 * the core about the first argument of each complete multibulk command in
 * it, when there are at least two (logical db `db`). Call with no shard
 * lock held. */
void prefetch_pipeline(int db, const char *buf, size_t len);

#endif
