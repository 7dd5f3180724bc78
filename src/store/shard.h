/* shard.h -- shards: the unit of locking, versioning and durability.
 *
 * A shard owns a contiguous range of Redis Cluster hash slots. Each has a
 * mutex, a 48-bit version counter, its DRAM indexes and its durable
 * watermark.
 *
 * The durability rule (DESIGN.md §4): a reply leaves only when every version
 * it depends on is durable. durable_ver is the highest V such that every
 * version <= V of this shard is durable. Versions are allocated under the
 * lock, in increasing order, by several workers; each worker's versions of a
 * shard become durable in the order it allocated them (its log is synced in
 * order). So it suffices to remember, per worker, the oldest version it holds
 * that is not durable yet: the watermark is one below the smallest of those,
 * or the last allocated version when there is none.
 *
 * With the pipelined group commit a worker has several batches at a time:
 * up to SHARD_FLIGHTS whose syncs are in flight and one still accumulating.
 * Each batch occupies one of the worker's SHARD_SLOTS slots, and each shard
 * keeps, per worker and slot, the oldest version of that batch in this shard
 * (0 = none). A batch's slot is cleared when its sync completes; batches may
 * complete in any order, since the watermark is one below the oldest version
 * still in any slot.
 *
 * Lock order: shard locks are taken in ascending shard id, never while the
 * pool mutex is held. */
#ifndef ROWAN_SHARD_H
#define ROWAN_SHARD_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "index.h"

#define SHARD_MAX_DBS 256
#define SHARD_FLIGHTS 4                 /* batches a worker may have syncing */
#define SHARD_SLOTS (SHARD_FLIGHTS + 1)  /* ... plus the accumulating one */

typedef struct shard {
    pthread_mutex_t lock;
    uint16_t id;
    unsigned first_slot, last_slot;   /* inclusive */
    uint64_t next_ver;                /* next version to hand out (under lock) */
    _Atomic uint64_t durable_ver;     /* watermark, read without the lock */
    uint64_t *pend;                   /* [worker * SHARD_SLOTS + slot], under lock */
    rw_index *idx;                    /* every key of the shard */
    rw_index *vidx;                   /* keys that have an expiry */
    uint16_t dbmap[SHARD_MAX_DBS];    /* logical db -> physical db (SWAPDB) */
    uint64_t dbmap_ref;               /* pool offset of the live LOG_DBMAP entry, 0 if none */
    uint64_t dbmap_ver;
    uint64_t funcs_ref;               /* pool offset of the live LOG_FUNCS entry, 0 if none */
    uint64_t funcs_ver;
    long long dbkeys[SHARD_MAX_DBS];  /* keys per physical db, under lock */
    long long dbexpires[SHARD_MAX_DBS];
    /* The latest completed re-sync of this copy (a replica's catch-up, or a
     * primary's fetch from a replica): its end record is kept live so that
     * recovery can tell a complete re-sync from one a crash cut short. */
    uint64_t resync_ref;              /* pool offset of that end record, 0 if none */
    uint64_t resync_ver;              /* its version */
    /* This copy may lack effects: recovery found damage that may have
     * held some of them, or a re-sync was cut short. Such a copy is never
     * served nor used as the source of another replica; a complete
     * re-sync clears the flag. SHARD_DAMAGED_LEARNER: only because this
     * node is a learner of it (member.c), nothing found missing; such a
     * copy is a source only when an operator accepts it (reconcile.c,
     * CLUSTER ACCEPTCOPY). */
    _Atomic int damaged;
    /* The term of the latest re-sync this copy received completely (the
     * sender's, from its begin marker): a learner's copy stays damaged
     * until a re-sync of a term in which it is a backup (member.c). */
    _Atomic uint64_t resync_term;
    /* Whether a shard this node is primary of may be served (SHARD_*):
     * changed under the lock, read under it by the dispatcher. */
    _Atomic int avail;
    /* A re-sync of this PRIMARY shard from a replica is expected (its
     * digest applies it although we are not a backup of it): the
     * fetching version floor while set, 0 otherwise (reconcile.c). */
    _Atomic uint64_t fetching;
    /* Bumped (under the lock) whenever this node stops or starts being the
     * shard's primary (member.c adopt). A reply held for versions of the
     * shard records the epoch it was computed in (db_dep); if the epoch
     * moved before they became durable, the reply can no longer be trusted
     * as an acknowledgement: acks that arrive for our old entries after
     * the new primary took its copy say nothing about that copy (a backup
     * may land them after serving the new primary's fetch, and another
     * worker's link may still deliver older versions than the one it
     * reported). The reply's connection is closed instead (outcome
     * unknown to the client). */
    _Atomic uint32_t serve_epoch;
} shard;

/* shard.avail */
enum {
    SHARD_SERVING = 0,       /* served */
    SHARD_RECONCILING = 1,   /* being checked against its replicas, or fetched */
    SHARD_LOST = 2           /* no replica holds its whole history: refused */
};

/* shard.damaged: 1 = may lack effects (damage, a cut re-sync); this value:
 * suspect only as a learner's copy. */
#define SHARD_DAMAGED_LEARNER 2

void shard_init_all(int nshards, int nworkers, int databases);
/* Shard of a key (by its hash slot) / of a slot. */
shard *shard_of_key(const char *key, size_t len);
shard *shard_of_slot(unsigned slot);
void shard_lock(shard *s);
void shard_unlock(shard *s);
/* 0 if the lock was taken, nonzero if it is busy. */
int shard_trylock(shard *s);
/* Does the calling thread hold s's lock? (EXEC holds the shards of all its
 * commands' keys; SORT must not lock those again.) */
int shard_held_by_me(const shard *s);
/* Allocate the next version for worker wid's batch in slot; caller holds the
 * lock. */
uint64_t shard_next_version(shard *s, int wid, int slot);
/* A version for a re-sync of the shard's contents (log.h, "Re-sync"):
 * taken from the same counter, so no write ever has it. Caller holds the
 * lock. Nothing waits on it: it never enters the durable watermark. */
uint64_t shard_resync_version(shard *s);
/* Worker wid's batch in slot is durable. Takes the lock. Returns 1 if the
 * watermark moved. */
int shard_worker_landed(shard *s, int wid, int slot);
/* Versions handed out but not yet durable (INFO). Takes the lock unless the
 * calling thread holds it. */
uint64_t shard_durable_lag(shard *s);
/* Is version v durable? (lock free) */
static inline int shard_is_durable(shard *s, uint64_t v) {
    return atomic_load_explicit(&s->durable_ver, memory_order_acquire) >= v;
}

#endif
