/* clean.h -- the clean thread: reclaims sparse committed segments. */
#ifndef ROWAN_CLEAN_H
#define ROWAN_CLEAN_H
#include <stdint.h>
#include "log.h"

/* What the cleaner is doing (INFO rowan's clean_state). */
enum clean_state {
    CLEAN_IDLE,        /* enough free segments */
    CLEAN_CLEANING,    /* below its target: cleaning segments under clean-threshold */
    CLEAN_WAITING,     /* below its target, no segment under clean-threshold */
    CLEAN_RECLAIMING,  /* writes were refused: cleaning any segment with room to win */
    CLEAN_FULL,        /* writes were refused and nothing can be won: live data fills the pool */
};

/* Allocate server.cleaner (at startup, before anything uses it). */
void clean_init(void);
/* Free the state clean_init made (its threads stopped); boot.c's teardown. */
void clean_free(void);
void clean_start(void);
void clean_stop(void);
/* Clean one segment now (tests, and the thread's own step). 0 ok, -1 if the
 * pool had no room for the live entries (the segment is left as it was). */
int clean_segment(uint32_t seg);
/* Keep the cleaner from moving or freeing anything until clean_release
 * (verify.c reads the whole log). Take it before any shard lock: the
 * cleaner takes shard locks while it holds it. */
void clean_hold(void);
void clean_release(void);
/* Backpressure: while free segments are at the level where ordinary writes
 * are refused and the cleaner is copying, wait (at most timeout_ms) for it.
 * Call with no shard lock held: the cleaner needs them. */
void clean_wait_for_space(int timeout_ms);
/* A write was refused for lack of space: wake the cleaner now, lift its
 * threshold until space is no longer low, and ask log writers to hand over
 * their current segments (clean_handover_gen). Safe with shard locks held. */
void clean_note_refusal(void);
/* The same for a write that needs segs free segments at once (a large
 * value, a batch in pieces: db.c): clean until that many are free, even
 * when the pool is not low on space by the usual measure. */
void clean_want_free(uint32_t segs);
/* Changes whenever writers should hand over their current segment: a writer
 * remembers the last value it acted on. */
uint64_t clean_handover_gen(void);
/* Would the cleaner win enough from w's current segment to take it? */
int clean_should_take(const log_writer *w);
int clean_state_now(void);
const char *clean_state_name(int state);
/* Bytes the cleaner could reclaim from committed segments (INFO). */
int64_t clean_reclaimable_bytes(void);

#endif
