/* clean.h -- the clean thread: reclaims sparse committed segments. */
#ifndef ROWAN_CLEAN_H
#define ROWAN_CLEAN_H
#include <stdint.h>

void clean_start(void);
void clean_stop(void);
/* Clean one segment now (tests, and the thread's own step). 0 ok, -1 if the
 * pool had no room for the live entries (the segment is left as it was). */
int clean_segment(uint32_t seg);
/* Backpressure: while free segments are at the level where ordinary writes
 * are refused and the cleaner can still reclaim something, wait (at most
 * timeout_ms) for it. Call with no shard lock held: the cleaner needs them. */
void clean_wait_for_space(int timeout_ms);

#endif
