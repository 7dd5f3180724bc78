/* syncer.c -- threads that turn workers' batches into device flushes.
 *
 * Used with replicas (a worker's batch waits for its backups too, and the
 * worker serves on meanwhile), and by the control thread's b-log flushes
 * and a standalone server's workers while the device is slow (on a fast
 * device those flush inline, control.c and worker.c). A standalone server on a
 * fast device does not come here: each worker flushes its round inline
 * (worker.c, issue 14: fewer thread hand-offs won on a CPU-bound server).
 * Every flush is timed (syncer_device_fast): a flush slower than
 * INLINE_MAX_US sends the workers back here, where a slow or stuck device
 * does not stop them serving (PING, reads of durable data, and the
 * -TIMEOUT of a held write after replication-timeout), until a flush is
 * fast again.
 *
 * On block storage a sync costs a device flush (milliseconds) however little
 * it writes. If a worker synced inside its own loop it would stop reading
 * requests for the whole flush. Instead a worker submits each round's batch
 * here and goes on serving; the batch's replies are released when its flush
 * completes (see worker.c).
 *
 * Each worker has its own flush thread, and a thread that becomes free takes
 * every job queued for it at that moment and covers them all with one flush:
 * one flush at a time per worker, carrying everything that arrived while the
 * previous one ran. Threads of different workers flush concurrently, which
 * the device overlaps (measured on the development VM: 1, 2 and 4 threads
 * flushing one file gave about 250, 510 and 740 flushes per second). A shared
 * pool of threads was tried and was worse under load: an idle thread flushed
 * each round's small batch at once, so flushes were many and small and the
 * device saturated.
 *
 * A flush is fdatasync of the whole pool file (pool_sync_all): it covers
 * every write made before it started, whoever made it. A job is queued only
 * after its writes were made, and a thread starts its flush only after it
 * dequeued the job, so setting the job's done flag after the flush returns is
 * sound.
 *
 * Pools on real pmem never use this: their entries are persisted as they are
 * appended. */
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "syncer.h"
#include "pool.h"
#include "server.h"
#include "worker.h"

typedef struct sync_job {
    void (*wake)(void *);
    void *arg;
    _Atomic int *done;
} sync_job;

#define MAX_SYNC_THREADS 64

/* One queue and one thread per worker. */
typedef struct sync_queue {
    struct syncer_state *ss;   /* its owner, for the thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sync_job *jobs;            /* FIFO of jobs not yet taken */
    int len, cap;
    int stopping;
} sync_queue;

/* The syncer's whole state: one per server (server.syncer), allocated by
 * syncer_init; each flush thread gets its queue, which points back to it. */
struct syncer_state {
    sync_queue queues[MAX_SYNC_THREADS];
    int nqueues;
    _Atomic int64_t last_flush_us;   /* the last flush's duration */
};
typedef struct syncer_state syncer_state;

/* A flush slower than this stops the workers flushing inline (about ten
 * times a loaded VM's fdatasync p99, and far below replication-timeout). */
#define INLINE_MAX_US 20000

void syncer_init(void) {
    syncer_state *ss = calloc(1, sizeof(*ss));
    atomic_store(&ss->last_flush_us, INT64_MAX);   /* none yet: slow */
    server.syncer = ss;
}

void syncer_free(void) {
    free(server.syncer);   /* after syncer_stop */
    server.syncer = NULL;
}

static void flush_timed(syncer_state *ss) {
    int64_t t0 = monotonic_us();
    pool_sync_all(server.pool);
    atomic_store(&ss->last_flush_us, monotonic_us() - t0);
    atomic_fetch_add(&server.stat.syncs, 1);
}

void syncer_flush_now(void) { flush_timed(server.syncer); }

int syncer_device_fast(void) { return atomic_load(&server.syncer->last_flush_us) < INLINE_MAX_US; }

int64_t syncer_last_flush_us(void) { return atomic_load(&server.syncer->last_flush_us); }

static void wake_worker(void *w) { worker_wake(w); }

void syncer_submit(struct worker *w, _Atomic int *done) {
    syncer_submit_to(w->id, done, wake_worker, w);
}

void syncer_submit_to(int queue, _Atomic int *done, void (*wake)(void *), void *arg) {
    syncer_state *ss = server.syncer;
    sync_queue *q = &ss->queues[queue % ss->nqueues];
    pthread_mutex_lock(&q->mu);
    if (q->len == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 16;
        q->jobs = realloc(q->jobs, sizeof(sync_job) * (size_t)q->cap);
    }
    q->jobs[q->len++] = (sync_job){wake, arg, done};
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void *syncer_main(void *arg) {
    sync_queue *q = arg;
    pthread_setname_np(pthread_self(), "rowan-sync");
    sync_job *taken = NULL;
    int cap = 0;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->len == 0 && !q->stopping) pthread_cond_wait(&q->cv, &q->mu);
        if (q->len == 0) break; /* stopping, nothing owed */
        if (cap < q->len) {
            cap = q->len;
            taken = realloc(taken, sizeof(sync_job) * (size_t)cap);
        }
        int n = q->len;
        memcpy(taken, q->jobs, sizeof(sync_job) * (size_t)n);
        q->len = 0;
        pthread_mutex_unlock(&q->mu);
        flush_timed(q->ss);
        for (int i = 0; i < n; i++) {
            atomic_store(taken[i].done, 1);
            taken[i].wake(taken[i].arg);
        }
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    free(taken);
    return NULL;
}

void syncer_start(int n) {
    syncer_state *ss = server.syncer;
    ss->nqueues = n < 1 ? 1 : n > MAX_SYNC_THREADS ? MAX_SYNC_THREADS : n;
    for (int i = 0; i < ss->nqueues; i++) {
        sync_queue *q = &ss->queues[i];
        q->ss = ss;
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cv, NULL);
        rowan_thread_create(&q->thread, NULL, syncer_main, q);
    }
}

void syncer_stop(void) {
    syncer_state *ss = server.syncer;
    for (int i = 0; i < ss->nqueues; i++) {
        sync_queue *q = &ss->queues[i];
        pthread_mutex_lock(&q->mu);
        q->stopping = 1;
        pthread_cond_signal(&q->cv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->thread, NULL);
        free(q->jobs);
        memset(q, 0, sizeof(*q));
    }
}
