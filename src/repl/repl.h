/* repl.h -- Rowan replication on the primary side (DESIGN.md §5).
 *
 * Every entry a worker appends to its t-log for a shard that has backups is
 * also sent, on that worker's own ordered link, to each backup's control
 * thread (transport.h). The worker never waits: the group-commit batch the
 * entry belongs to records, per peer, the link sequence number that must be
 * acked, and the batch lands (its versions become durable, its replies may
 * leave) only once the local flush is done AND every peer has acked it.
 *
 * A peer that is down, or reconnecting, or catching up, cannot ack. Entries
 * meant for it are not queued for later: when it comes back, the
 * replication manager thread re-sends the current state of every shard it
 * backs up (catch-up, a full re-sync per shard from the index: strings from
 * the log, collections as snapshots), and a batch whose entries the peer
 * missed counts as replicated there once a catch-up that began after those
 * entries were applied has been acked. Until then the batch waits, and
 * replies held on it fail with -NOREPLICAS after replication-timeout
 * (networking.c): durability is never quietly reduced.
 *
 * The manager thread also sends each backup <shard, CommitVer> markers
 * about every 15 ms (CommitVer = the shard's durable watermark, i.e. every
 * version <= it is on every replica), which lets the backup's digest apply
 * entries and commit b-log segments. */
#ifndef ROWAN_REPL_H
#define ROWAN_REPL_H
#include <stdint.h>
#include "rbuf.h"

struct worker;
struct batch;
struct log_writer;

/* What a batch needs from one peer. */
typedef struct repl_need {
    uint64_t gen;    /* link generation the entries went out on (0 = none sent) */
    uint64_t seq;    /* last message of the batch on that link */
    uint64_t miss;   /* stamp of the latest entry that could not be sent (0 = none) */
} repl_need;

/* Is replication on (cluster mode with k > 1)? Fixed after repl_init. */
int repl_active(void);
/* After cluster_setup, before the workers are created. */
void repl_init(void);
/* Free the state repl_init made (its threads stopped); boot.c's teardown. */
void repl_free(void);
/* After recovery and workers_create: control thread, digest, manager. */
int repl_start(char *err, size_t errlen);
void repl_stop(void);

/* Worker side (all on the worker's own thread). */
void repl_worker_init(struct worker *w);
void repl_worker_free(struct worker *w);
/* t-log hook: an entry of len bytes was appended at pool offset off. */
void repl_on_wrote(struct log_writer *lw, uint64_t off, size_t len);
/* The accumulating batch closes: stamp it, push the links. */
void repl_batch_close(struct worker *w, struct batch *b);
/* Have all of b's peers persisted it? */
int repl_batch_replicated(struct worker *w, struct batch *b);
/* The batch landed: forget its needs, count its replication latency. */
void repl_batch_reset(struct worker *w, struct batch *b);
/* Start of each round and on cron: drop dead links, open links for new
 * sessions. */
void repl_worker_round(struct worker *w);

/* The hello that opens every link of ours (transport.h), for sender
 * (a worker id, REPL_LINK_MANAGER or REPL_LINK_BUS). */
struct repl_hello;
void repl_hello_fill(struct repl_hello *h, uint16_t sender);

/* Peers `which` (a mask) must get a re-sync of shard sid, which is not served
 * meanwhile (reconcile.c): the manager sends it on each one's live
 * session. Any thread. */
void repl_resync_shard(int sid, uint64_t which);
/* Does some peer still wait for a re-sync of shard sid? */
int repl_resync_pending(int sid);
/* Send shard sid, as it is here, to node's control thread as a re-sync at
 * a version >= vmin (blocking; any thread but a worker). 0 with *vout =
 * that version once node acknowledged all of it, -1 with err. */
int repl_send_resync(int node, int sid, uint64_t vmin, uint64_t *vout, char *err, size_t errlen);

/* The configuration changed (member.c, after publishing it; old is the
 * previous one): peers follow it, and shards we keep serving re-sync the
 * peers they gained. */
struct cluster_config;
void repl_config_changed(const struct cluster_config *old);
/* Learners of the shards we serve whose sessions are live and caught up
 * (to be reported to the CM, which then makes them backups). */
uint64_t repl_live_learners(void);

/* INFO # Rowan replication fields. */
void repl_info(rbuf *out);

#endif
