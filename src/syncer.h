/* syncer.h -- the pipelined group commit for pools on block storage. */
#ifndef ROWAN_SYNCER_H
#define ROWAN_SYNCER_H
#include <stdatomic.h>

struct worker;

/* Start n flush threads; worker w's batches go to thread w->id % n. */
void syncer_start(int n);
void syncer_stop(void);
/* Make every pool write made before this call durable, in the background:
 * *done becomes 1 once it is, and w is woken. */
void syncer_submit(struct worker *w, _Atomic int *done);

#endif
