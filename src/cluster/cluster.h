/* cluster.h -- the cluster configuration: who is primary and backup of
 * which shard, under which term (DESIGN.md §6).
 *
 * A configuration is <term, node table, membership, shard -> (primary,
 * backups, learners)>. Two modes:
 *
 *   static   `cluster-node <name> <host> <resp-port> <repl-port>` lines
 *            (one per node, the same list on every node), `cluster-self`,
 *            `replicas <k>`, `shards <n>`. One configuration, term 1,
 *            derived from the node order: shard s has primary nodes[s % N]
 *            and backups the next k-1 nodes in ring order.
 *   managed  `zookeeper host:port[,...]` and `cluster-name NAME`, plus this
 *            node's own `cluster-node` line and `cluster-self`. The
 *            configuration lives in ZooKeeper (zk.c), written by the elected
 *            configuration manager (cm.c) and adopted by every node
 *            (member.c); it changes at run time (failover, rejoin,
 *            rebalance), each change with a new term.
 *
 * Without cluster-node lines the server is standalone: it owns every shard
 * and replicates nowhere.
 *
 * The current configuration is published through one atomic pointer and is
 * immutable once published: a reader takes it with cluster_current() and
 * may use it for the duration of one operation (old ones are freed only
 * after CLUSTER_KEEP newer ones were published). The query functions below
 * each read the current one. What must not change between a check and an
 * action (is this shard served here?) is decided under the shard's lock
 * with the shard's own state (shard.h: avail), which member.c changes
 * under that lock when it adopts a configuration.
 *
 * Node indexes are positions in the node table, stable across terms (a
 * table only grows); masks are bit sets of node indexes (at most
 * CLUSTER_MAX_NODES). A learner of a shard receives its replication and
 * catch-up but does not count for acknowledgements until the configuration
 * manager makes it a backup. */
#ifndef ROWAN_CLUSTER_H
#define ROWAN_CLUSTER_H
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_MAX_NODES 64
#define CLUSTER_NAME_MAX  40   /* configured names; also the CLUSTER NODES id width */
#define CLUSTER_KEEP      64   /* published configurations kept before freeing */

typedef struct cluster_node {
    char name[CLUSTER_NAME_MAX + 1];  /* as configured */
    char id[41];                      /* 40 hex chars, derived from name (CLUSTER MYID) */
    char host[256];
    int port;                         /* RESP */
    int repl_port;                    /* replication (control thread), cluster bus */
    int native_port;                  /* native datagrams (static lines only), 0 = unknown */
} cluster_node;

typedef struct cluster_config {
    uint64_t term;
    int nnodes;
    cluster_node nodes[CLUSTER_MAX_NODES];
    uint64_t members;     /* nodes in the membership */
    int k;                /* replication factor the configuration manager aims at */
    int nshards;
    int16_t *primary;     /* [nshards]; -1: no live replica holds the shard */
    uint64_t *backups;    /* [nshards] */
    uint64_t *learners;   /* [nshards]: being caught up, not counted yet */
} cluster_config;

/* ---- configuration time (config.c, main.c) ---- */
/* One cluster-node line / cluster-self / the managed-mode options.
 * 0 ok, -1 with err filled. */
int cluster_add_node(const char *name, const char *host, int port, int repl_port,
                     char *err, size_t errlen);
int cluster_set_self(const char *name, char *err, size_t errlen);
/* The native port of the cluster-node line just added (its optional 5th
 * word), announced as "native-port" by CLUSTER SLOTS / SHARDS. */
void cluster_add_node_native_port(int native_port);
int cluster_set_zookeeper(const char *hosts, char *err, size_t errlen);
int cluster_set_name(const char *name, char *err, size_t errlen);
/* After the configuration is read and the shards exist: check it; static
 * mode publishes its one configuration. Managed mode publishes nothing yet
 * (member_join does). 0 / -1 with err. */
int cluster_setup(int nshards, int replicas, char *err, size_t errlen);

/* ---- the current configuration ---- */
int cluster_enabled(void);
int cluster_managed(void);
const cluster_config *cluster_current(void);   /* NULL before the first one (managed) */
int cluster_nnodes(void);
int cluster_self(void);                     /* our node index (0 standalone; -1 managed, not in the table yet) */
const char *cluster_self_name(void);
const cluster_node *cluster_self_node(void); /* our address as configured */
int cluster_replicas(void);                 /* k (1 when standalone) */
uint64_t cluster_term(void);
uint64_t cluster_members(void);
static inline int cluster_mask_has(uint64_t mask, int node) {
    return node >= 0 && node < 64 && (int)((mask >> node) & 1);
}
static inline int cluster_is_member(int node) { return cluster_mask_has(cluster_members(), node); }
const cluster_node *cluster_node_at(int i);
int cluster_node_by_name(const char *name); /* index or -1 */
/* Shard map. Standalone: we are primary of everything, no backups. */
int cluster_primary_of(int shard);          /* -1: none */
uint64_t cluster_backups_of(int shard);     /* mask of backup node indexes */
uint64_t cluster_learners_of(int shard);    /* mask of learners */
int cluster_is_primary(int shard);          /* primary == self */
int cluster_is_backup(int shard);           /* self among the backups or learners */
/* Every peer our workers replicate to: the backups and learners of the
 * shards we are primary of. */
uint64_t cluster_peers_we_replicate_to(void);
/* Hash of what two nodes must agree on to replicate to each other: static,
 * the node list, shards and k; managed, the cluster name, shards and k
 * (the term is checked separately). */
uint64_t cluster_config_digest(void);
const char *cluster_zk_hosts(void);
const char *cluster_name(void);

/* ---- configurations as values (member.c, cm.c) ---- */
cluster_config *cluster_config_new(int nshards);
cluster_config *cluster_config_copy(const cluster_config *c);
void cluster_config_free(cluster_config *c);
/* The static map over the members: shard s has primary member s % M and
 * backups the next k-1 members in ring order (M = members, k <= M). */
void cluster_config_spread(cluster_config *c);
/* The backup of shard s (among the nodes of mask among) that takes it over
 * first: the next one in ring order after its primary; -1 if none. */
int cluster_config_first_backup(const cluster_config *c, int s, uint64_t among);
/* Add a node to the table (or find it by name; its id is derived from the
 * name); its index, -1 if full. */
int cluster_config_node(cluster_config *c, const cluster_node *n);
/* Text form, as stored in ZooKeeper. encode: malloc'd, NUL-terminated.
 * decode: NULL with err on anything malformed or inconsistent. */
char *cluster_config_encode(const cluster_config *c, size_t *len);
cluster_config *cluster_config_decode(const char *text, size_t len, char *err, size_t errlen);
/* Publish c (ownership passes); it must keep nshards and have a term at
 * least the current one's. Also resolves our index in it. */
void cluster_install(cluster_config *c);

#endif
