/* member.h -- a node of a managed cluster: its ZooKeeper registration, its
 * lease, and the configurations it adopts (DESIGN.md §6; Rowan-KV §4.5).
 *
 * Leases. A node serves (reads and writes) only while it holds a lease
 * from the configuration manager (cm.h). It asks for a renewal every
 * quarter lease, noting the moment t it asked; a grant extends its lease
 * to t + cluster-lease-ms. The CM notes the moment it granted, which is
 * later than t, and treats the node as failed only once that grant plus
 * cluster-lease-ms (and a margin) has passed: so a node always stops
 * serving before the CM gives its shards to another node, whether it
 * crashed, paused (SIGSTOP) or lost the network. Once its lease has run
 * out a node answers data commands with -CLUSTERDOWN and sends no reply
 * it computed before (its clients' connections with unsent replies are
 * closed instead: their outcome is unknown).
 *
 * Adopting a configuration (a newer term, pushed by the CM over the bus
 * or read from ZooKeeper): links from nodes that left the membership are
 * closed first (nothing of theirs lands after this point), shards this
 * node becomes primary of stop being served until they are reconciled with
 * their surviving replicas (reconcile.h), shards it stops being primary of
 * stop being served at once (under their locks), then the configuration is
 * published and replication follows its peers. */
#ifndef ROWAN_MEMBER_H
#define ROWAN_MEMBER_H
#include <stddef.h>
#include <stdint.h>

/* Allocate server.member (at startup, before anything uses it). */
void member_init(void);
/* Free the state member_init made (its threads stopped); boot.c's teardown. */
void member_free(void);
/* Managed mode, after recovery and before the workers: open the ZooKeeper
 * session, register this node, join the CM election, and wait until a
 * configuration names this node. 0, or -1 with err. */
int member_join(char *err, size_t errlen);
/* After the workers and replication started: the member thread (leases,
 * configuration changes). */
void member_start(void);
void member_stop(void);

/* A configuration from this node's own CM (ownership passes): adopted
 * like one pushed over the bus. */
struct cluster_config;
void member_offer(struct cluster_config *c);

/* Does this node hold a valid lease (always true outside managed mode)? */
int member_lease_valid(void);
/* Bumped each time this node's lease runs out (workers close the clients
 * holding replies computed under the old lease). */
uint64_t member_lease_epoch(void);
/* Has this process held a lease (from any CM) since it started? */
int member_ever_leased(void);
/* The node the CM runs on (-1 unknown). */
int member_cm_node(void);
/* Ask the CM for a planned handover of the shards this node is the first
 * backup of (CLUSTER FAILOVER). 0 ok, -1 with err. */
int member_request_failover(int force, char *err, size_t errlen);

/* What INFO shows of this node's membership (the RESP edge formats it):
 * managed 0 outside managed mode, and nothing else is filled. */
typedef struct member_stats {
    int managed;
    uint64_t term;
    const char *cm_name;          /* "?" while unknown */
    long long lease_ms_left;
    int member;
    long long adoptions;
} member_stats;
void member_stats_get(member_stats *out);

#endif
