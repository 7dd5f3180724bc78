/* verify.h -- does the log replay to what memory holds? (DEBUG RELOAD; see
 * verify.c). */
#ifndef ROWAN_VERIFY_H
#define ROWAN_VERIFY_H
#include <stddef.h>

/* Replay the whole log into scratch state as a restart would and compare it
 * with the live indexes, shard by shard. Stalls every client meanwhile.
 * Standalone servers only. 0: equal; 1: they differ (err says where); -1:
 * the log cannot be replayed (err says why). Call with no shard lock held. */
int verify_log(char *err, size_t errlen);

#endif
