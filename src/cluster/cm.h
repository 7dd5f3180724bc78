/* cm.h -- the configuration manager (CM) of a managed cluster
 * (DESIGN.md §6; Rowan-KV §4.5, FaRM's reconfiguration).
 *
 * Every node runs for CM: ZooKeeper's ephemeral sequential znode recipe
 * under /rowan/<name>/cm elects the one with the lowest sequence number.
 * The CM alone writes the configuration znode, always by compare-and-set
 * on the version it read, so a CM that lost the election (or a stale one
 * paused past its session) can never overwrite a newer term. It:
 *   - creates the first configuration once cluster-init-nodes nodes have
 *     registered (all of them members, the static spread);
 *   - grants leases (member.h) and fails a member whose last grant plus
 *     cluster-lease-ms has passed: new term without it, a surviving backup
 *     promoted for every shard it was primary of, learners added where a
 *     shard has fewer than `replicas` copies (re-replication);
 *   - makes a returning node a member again, as a learner of the shards
 *     that lack copies; a learner becomes a backup once its primaries say
 *     it is caught up;
 *   - hands primaries back when they are spread unevenly over the members
 *     (automatic rebalance), and hands a node the shards it is the first
 *     backup of on CLUSTER FAILOVER -- both planned handovers: the new
 *     configuration is committed first, the new primary reconciles with
 *     the old one (now its backup) before it serves;
 *   - pushes each configuration it commits to every node (BUS_CONFIG);
 *     nodes also watch the znode.
 * A CM grants leases only while it has heard from ZooKeeper within half a
 * lease, so a CM that was paused long enough to lose its session grants
 * nothing before it notices. A new CM waits out every lease the previous
 * one may have granted before it fails anyone. */
#ifndef ROWAN_CM_H
#define ROWAN_CM_H
#include <stddef.h>
#include <stdint.h>

/* Allocate server.cm (at startup, before anything uses it). */
void cm_init(void);
/* Free the state cm_init made (its threads stopped); boot.c's teardown. */
void cm_free(void);
/* Join the election (member_join). root: /rowan/<cluster-name>. */
void cm_start(const char *root);
void cm_stop(void);
/* Is this node the CM now? */
int cm_active(void);
/* A lease request from node (for this node's own requests, called
 * directly). Returns 1 if granted; *term gets the CM's term (0 if not the
 * CM). */
int cm_lease_request(int node, uint64_t term, uint64_t *term_out);
/* Primary `node` reports, under term, the learners of its shards that are
 * caught up (for this node's own reports, called directly). */
void cm_caughtup(int node, uint64_t term, uint64_t learners);
/* CLUSTER FAILOVER from node. 0, or -1 with err (a Redis error text). */
int cm_failover_request(int node, int force, char *err, size_t errlen);
/* What INFO shows of the CM (the RESP edge formats it). */
typedef struct cm_stats {
    int active;
    long long commits, failovers, joins, handovers, last_zk_write_usec;
} cm_stats;
void cm_stats_get(cm_stats *out);

#endif
