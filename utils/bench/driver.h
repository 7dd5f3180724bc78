/* driver.h -- the load generator: threads, connections, operations.
 *
 * bench_cfg is everything a run needs, filled in by main.c from the command
 * line. run_start() spawns the worker threads; each has its own libevent
 * loop, its own hiredis async connections (one per client per node) and its
 * own stats, so the hot path takes no locks (inserts' acknowledgement is the
 * one shared, mutex-guarded structure). run_wait() lets the caller print
 * progress; run_finish() joins and merges. */
#ifndef ROWAN_BENCH_DRIVER_H
#define ROWAN_BENCH_DRIVER_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "slots.h"
#include "stats.h"
#include "vsize.h"
#include "workload.h"

enum model { MODEL_KV, MODEL_YCSB };

struct bench_cfg {
    const char *host;
    int port;
    const char *password;
    bool native;                /* --transport native: librowan over UDP (native.h) */
    struct workload wl;         /* mix and load flag */
    enum key_dist dist;
    double theta;
    uint64_t records;
    uint64_t operations;        /* 0: no count limit */
    double duration;            /* seconds; 0: no time limit */
    int threads, connections, pipeline;   /* connections: per thread */
    double rate;                /* ops/s over all threads; 0: closed loop */
    int key_size;
    struct vsize vs;
    int fields;                 /* ycsb-redis: fields per record */
    bool read_all_fields, write_all_fields;
    enum model model;
    int scan_len;               /* scans read 1..scan_len records (uniform) */
    int wait_replicas;          /* -1: no WAIT */
    uint64_t seed;
    double drain_timeout;       /* seconds to wait for replies after the end */
    double spin_us;             /* open loop: busy-poll this long before a send */
    uint64_t expected_inserts;  /* run-phase inserts the zipfian spans */
};

/* Set (async-signal-safely) to make every worker stop issuing and drain. */
extern _Atomic int bench_stop_requested;

struct run;

struct run *run_start(const struct bench_cfg *cfg, const struct slotmap *map,
                      char *err, size_t errlen);
/* Waits up to timeout_ms; false once every worker has finished. */
bool run_wait(struct run *r, int timeout_ms);
/* Completed operations and failed ones so far (for progress lines). */
void run_progress(struct run *r, uint64_t *ops, uint64_t *errors);
/* Join, merge stats; elapsed is first start to last completion. */
void run_finish(struct run *r, struct stats *out, double *elapsed_s);

#endif
