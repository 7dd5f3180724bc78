/* worker.h -- worker threads: one libevent loop each, the connections
 * worker 0 accepted for it, its own t-log, and the group commit that gates
 * replies.
 *
 * A worker's loop runs in rounds, like redis-server's: wait for events, run
 * every ready command (appending effects to the t-log), then in before_sleep
 * hand the round's appends to the group commit, advance the shards' durable
 * watermarks for batches whose sync completed, and only then write out the
 * replies whose dependencies are durable. Replies still waiting on another
 * worker's versions stay held; that worker wakes this one when its batch
 * lands and moves a watermark. */
#ifndef ROWAN_WORKER_H
#define ROWAN_WORKER_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <event2/event.h>
#include "log.h"
#include "db.h"
#include "syncer.h"
#include "shard.h"

struct client;
struct rcommand;
struct evconnlistener;
struct handoff;

typedef struct worker {
    int id;
    pthread_t thread;
    int running;                  /* thread started, not joined yet */
    struct event_base *base;
    struct event *wake_ev;        /* activated from other threads */
    struct event *handoff_ev;     /* worker 0 accepted connections for us */
    pthread_mutex_t handoff_mu;
    struct handoff *handoffs;     /* those connections (fd, peer address) */
    int nhandoffs, caphandoffs;
    struct event *cron_ev;        /* server.cfg.hz timer */
    log_writer tlog;
    db_ctx x;                     /* for work the worker does on its own (expiry) */
    /* Group-commit batches (see shard.h): slot `acc` accumulates this
     * round's appends; up to SHARD_FLIGHTS others wait for their flush. */
    struct batch {
        uint16_t *shards;         /* shards that got versions in this batch */
        uint8_t *mark;
        int nshards;
        uint64_t gen;             /* batch number, increasing per worker */
        int syncing;              /* submitted to the syncer, not landed yet */
        _Atomic int done;         /* 1: its flush completed; 2: not yet, wake the worker when it has */
        log_flush flush;          /* what its flush covers of the t-log */
        /* replication (repl.h): what each backup must ack before it lands */
        uint64_t peers;           /* mask of peers the batch's entries go to */
        struct repl_need *need;   /* [CLUSTER_MAX_NODES], NULL when not replicating */
        uint64_t stamp;           /* taken when the batch closed */
        int64_t launch_us;
    } slots[SHARD_SLOTS];
    struct repl_wstate *repl;     /* this worker's replication links, or NULL */
    struct rpcb *rpcb;            /* replication-mode rpc: links it serves as a backup */
    int acc;
    int nsyncing;
    uint64_t next_gen;
    /* Every batch numbered <= landed_gen is durable. Atomic: DEP_BATCH
     * dependencies may be checked from other threads. */
    _Atomic uint64_t landed_gen;
    /* clients with output to send or replies held */
    struct client **pending;
    int npending, cappending;
    struct client *clients;       /* all clients of this worker (list head) */
    int nclients;
    /* statistics gathered during the round, added to the shared counters
     * once per round (shared atomics per command would bounce cache lines
     * between workers); folded before any reply of the round leaves. */
    struct rcommand **round_cmds;
    long long *round_calls, *round_usec, *round_failed;
    int nround_cmds;
    long long round_numcommands;
    long long round_hits, round_misses;
    long long round_held;         /* replies held for durability (gate.c) */
    int64_t round_held_us;        /* when the round held its first (gate.c), 0: none yet */
    _Atomic int waiting;          /* has replies held on other workers' versions */
    _Atomic int kill_pending;     /* some client was marked killed by another thread */
    uint64_t expire_cursor;       /* active expiry position (see db_active_expire) */
    uint64_t handover_seen;       /* last clean_handover_gen acted on */
    /* gather (worker.c): sockets of the clients whose replies the last
     * round released, whose next requests the next flush waits for */
    int *released;
    int nreleased, capreleased;
    /* called last in before_sleep, and once more at shutdown: an edge that
     * queues output during the round sends it here in one go (the native
     * edge's sendmmsg, rdma/native.c); NULL if none */
    void (*round_end)(void *arg);
    void *round_end_arg;
} worker;

/* Bind the client port, and the tls-port if set (after tls_configure), on
 * every `bind` address; port 0 means no plain TCP (before the pool is opened,
 * so a busy port or a bad address fails early). -1 with Redis's message:
 * "Could not create server TCP listening socket 127.0.0.1:6379: bind:
 * Address already in use". */
int workers_listen(char *err, size_t errlen);
/* Create the workers; worker 0 accepts on the sockets of workers_listen()
 * (fails with a message). */
int workers_create(int n, char *err, size_t errlen);
void workers_start(void);
void workers_join(void);
/* Free what workers_create made (after workers_join). */
void workers_free(void);
/* A version of shard sid was allocated by worker w in this round. */
void worker_touch_shard(worker *w, uint16_t sid);
/* Make client c part of w's next flush. */
void worker_add_pending(worker *w, struct client *c);
void worker_remove_pending(worker *w, struct client *c);
void worker_wake(worker *w);
/* Count one execution of cmd (dt microseconds) in this round's statistics. */
void worker_count_command(worker *w, struct rcommand *cmd, int64_t dt, int failed);

#endif
