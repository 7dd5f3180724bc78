/* reconcile.h -- a primary checks its shards against their replicas before
 * serving them (DESIGN.md §6: "a node never serves, nor pushes to its
 * backups, a shard whose history it lacks").
 *
 * A node that starts (after a crash, a restart, with a wiped or an older
 * pool, or with damage recovery found) does not know whether its copy of
 * a shard it is primary of holds every acknowledged write: the writes it
 * acknowledged are on every replica, so the replicas know better. Until
 * each backup of the shard has said what it holds, the shard is not served
 * (-TRYAGAIN) and not pushed to anyone. Then:
 *   - the best copy is the undamaged one holding the largest version
 *     (ours on a tie). Versions of a shard only grow (a re-sync takes a
 *     fresh one above every version any replica holds), and every
 *     acknowledged write is on every replica together with every version
 *     below it, so the largest version marks a copy holding all of them;
 *   - if it is ours, the shard is served;
 *   - else we fetch it: that replica applies everything it holds of the
 *     shard and sends it as a re-sync (log.h) at a version above all of
 *     them; our digest lands and applies it like a backup's;
 *   - either way the backups that do not hold exactly the settled copy
 *     are then re-synced from us before any write of ours reaches them;
 *   - if no replica holds an undamaged copy, the shard stays refused with
 *     -CLUSTERDOWN and the log says why; so does a managed node's copy of
 *     which its pool holds nothing (wiped) when no replica can confirm
 *     that the shard has no history (reconcile.c holds_nothing). Its
 *     learners are asked too and named in that log line; CLUSTER
 *     ACCEPTCOPY (reconcile_accept) takes the most recent learner's copy
 *     when an operator accepts that it may lack acknowledged writes.
 * Bus messages: BUS_SHARDINFO (shard ids -> per shard: flags, largest
 * version held) and BUS_FETCH (shard, version floor -> the re-sync's
 * version, answered once the re-sync has been acknowledged by us). */
#ifndef ROWAN_RECONCILE_H
#define ROWAN_RECONCILE_H
#include <stdint.h>

/* Allocate server.reconcile (at startup, before anything uses it). */
void reconcile_alloc(void);
/* Free the state reconcile_alloc made (its threads stopped); boot.c's teardown. */
void reconcile_free(void);
/* After recovery, before the workers: every shard we are primary of and
 * that has backups starts SHARD_RECONCILING. Registers the bus handlers. */
void reconcile_init(void);
/* Managed mode (member.c): this node became primary of these shards
 * (they are SHARD_RECONCILING already); check them against their
 * replicas -- the surviving ones, after a failover -- before serving. */
void reconcile_begin(const uint16_t *ids, int n);
/* Replication manager thread, every round: ask, decide, fetch. Calls
 * repl_resync_shard for the backups of a shard it settles that do not
 * hold exactly its copy, and serves the shard once they are re-synced. */
void reconcile_step(void);
/* Shards not settled yet (INFO). */
int reconcile_pending(void);
/* Shards refused because no replica holds their whole history (INFO). */
int reconcile_lost(void);
/* CLUSTER ACCEPTCOPY (any thread): the operator accepts a learner's copy
 * of refused shard sid (-1: of every refused shard this node is primary
 * of) as its history, though it may lack acknowledged writes; each is
 * checked again and the most recent learner's copy fetched. Returns how
 * many shards are checked again. */
int reconcile_accept(int sid);

#endif
