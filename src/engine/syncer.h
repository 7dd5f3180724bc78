/* syncer.h -- the pipelined group commit for pools on block storage. */
#ifndef ROWAN_SYNCER_H
#define ROWAN_SYNCER_H
#include <stdatomic.h>

struct worker;

/* Start n flush threads; worker w's batches go to thread w->id % n. */
/* Allocate server.syncer (at startup, before any flush). */
void syncer_init(void);
/* Free the state syncer_init made (its threads stopped); boot.c's teardown. */
void syncer_free(void);
void syncer_start(int n);
void syncer_stop(void);
/* Make every pool write made before this call durable, in the background:
 * *done becomes 1 once it is, and w is woken. */
void syncer_submit(struct worker *w, _Atomic int *done);
/* The same on flush thread `queue` (mod the number of threads), calling
 * wake(arg) when done: for the control thread, whose b-log flushes then
 * share worker 0's device flushes instead of adding their own. */
void syncer_submit_to(int queue, _Atomic int *done, void (*wake)(void *), void *arg);

/* Flush the pool now, on the calling thread, timing it (pool_sync_all). */
void syncer_flush_now(void);
/* Did the latest device flush (on any thread) take less than the inline
 * limit? Unknown (none yet) counts as slow. */
int syncer_device_fast(void);

/* How long the last flush took (microseconds). */
int64_t syncer_last_flush_us(void);

#endif
