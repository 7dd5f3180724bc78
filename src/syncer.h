/* syncer.h -- the pipelined group commit for pools on block storage. */
#ifndef ROWAN_SYNCER_H
#define ROWAN_SYNCER_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct worker;

typedef struct syncer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t requested;
    _Atomic uint64_t done;
    int stopping;
    struct worker *w;          /* woken when a sync completes */
} syncer;

void syncer_start(syncer *s, struct worker *w);
void syncer_stop(syncer *s);
/* Ask for a sync covering every pool write made before this call. Returns a
 * ticket: those writes are durable once syncer_done() >= ticket. The owning
 * worker is woken when a sync completes. */
uint64_t syncer_request(syncer *s);
static inline uint64_t syncer_done(syncer *s) { return atomic_load(&s->done); }

#endif
