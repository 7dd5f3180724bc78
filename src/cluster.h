/* cluster.h -- the static cluster configuration (term 1, no ZooKeeper yet).
 *
 * A cluster is the list of `cluster-node` lines in rowan.conf:
 *
 *   cluster-node <name> <host> <resp-port> <repl-port>    (one per node)
 *   cluster-self <name>                                   (which one we are)
 *   replicas <k>          0 = default: min(3, number of nodes)
 *   shards <n>            shards are contiguous hash-slot ranges (shard.h)
 *
 * Without cluster-node lines the server is standalone: it owns every shard
 * and replicates nowhere. With them, the shard -> (primary, backups) map is
 * derived deterministically from the node order, so every node computes the
 * same map: shard s has primary nodes[s % N] and backups the next k-1 nodes
 * in ring order. The map never changes while running (term 1); failover and
 * resharding come with ZooKeeper.
 *
 * Node indexes are positions in the configured list; masks are bit sets of
 * node indexes (at most CLUSTER_MAX_NODES nodes). */
#ifndef ROWAN_CLUSTER_H
#define ROWAN_CLUSTER_H
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_MAX_NODES 64
#define CLUSTER_NAME_MAX  40   /* configured names; also the CLUSTER NODES id width */

typedef struct cluster_node {
    char name[CLUSTER_NAME_MAX + 1];  /* as configured */
    char id[41];                      /* 40 hex chars, derived from name (CLUSTER MYID) */
    char host[256];
    int port;                         /* RESP */
    int repl_port;                    /* replication (control thread) */
} cluster_node;

/* Configuration time (config.c): add one cluster-node line / set
 * cluster-self. 0 ok, -1 with err filled (duplicate name, bad port...). */
int cluster_add_node(const char *name, const char *host, int port, int repl_port,
                     char *err, size_t errlen);
int cluster_set_self(const char *name, char *err, size_t errlen);
/* After the configuration is read and the shards exist: check the cluster
 * (self named and listed, k <= N), derive the shard map. 0 / -1 with err. */
int cluster_setup(int nshards, int replicas, char *err, size_t errlen);

int cluster_enabled(void);
int cluster_nnodes(void);
int cluster_self(void);                     /* our node index, 0 when standalone */
int cluster_replicas(void);                 /* k (1 when standalone) */
uint64_t cluster_term(void);
const cluster_node *cluster_node_at(int i);
int cluster_node_by_name(const char *name); /* index or -1 */
/* Shard map. Standalone: we are primary of everything, no backups. */
int cluster_primary_of(int shard);
uint64_t cluster_backups_of(int shard);     /* mask of backup node indexes */
static inline int cluster_mask_has(uint64_t mask, int node) { return (int)((mask >> node) & 1); }
int cluster_is_primary(int shard);          /* primary == self */
int cluster_is_backup(int shard);           /* self among the backups */
/* Union of backup masks of the shards we are primary of: the peers our
 * workers replicate to. */
uint64_t cluster_peers_we_replicate_to(void);
/* Hash of everything the shard map depends on (node list, shards, k): two
 * nodes replicate to each other only if theirs are equal. */
uint64_t cluster_config_digest(void);

#endif
