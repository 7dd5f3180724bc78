/* cluster.c -- the static cluster configuration and its shard map.
 *
 * See cluster.h. Everything here is written before the workers start and
 * only read afterwards, so no locking is needed. The map is a pure function
 * of (node list order, shard count, k): every node computes the same one,
 * which is what lets a static cluster agree without a configuration
 * service. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cluster.h"
#include "hash.h"

static struct {
    int enabled;
    int nnodes;
    cluster_node nodes[CLUSTER_MAX_NODES];
    int self;
    char self_name[CLUSTER_NAME_MAX + 1];   /* cluster-self, resolved at setup */
    int k;
    int nshards;
    int *primary;        /* [nshards] */
    uint64_t *backups;   /* [nshards] */
    uint64_t peers;
} cl = {.k = 1};

/* A 40-hex-digit node id from the name: stable across restarts and equal on
 * every node, like Redis's node ids are to its cluster. */
static void node_id_from_name(const char *name, char *out) {
    static const char hex[] = "0123456789abcdef";
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < 40; i++) {
        if (i % 16 == 0) {
            for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ULL;
            h ^= (uint64_t)i * 0x9e3779b97f4a7c15ULL;
        }
        out[i] = hex[(h >> ((i % 16) * 4)) & 15];
    }
    out[40] = 0;
}

int cluster_add_node(const char *name, const char *host, int port, int repl_port,
                     char *err, size_t errlen) {
    if (cl.nnodes == CLUSTER_MAX_NODES) {
        snprintf(err, errlen, "too many cluster-node lines (at most %d)", CLUSTER_MAX_NODES);
        return -1;
    }
    if (!name[0] || strlen(name) > CLUSTER_NAME_MAX || strlen(host) >= sizeof(cl.nodes[0].host)) {
        snprintf(err, errlen, "cluster-node name must be 1-%d characters, host under 256",
                 CLUSTER_NAME_MAX);
        return -1;
    }
    if (port <= 0 || port > 65535 || repl_port <= 0 || repl_port > 65535) {
        snprintf(err, errlen, "cluster-node %s: ports must be 1-65535", name);
        return -1;
    }
    for (int i = 0; i < cl.nnodes; i++) {
        if (!strcmp(cl.nodes[i].name, name)) {
            snprintf(err, errlen, "cluster-node %s is listed twice", name);
            return -1;
        }
    }
    cluster_node *n = &cl.nodes[cl.nnodes++];
    snprintf(n->name, sizeof(n->name), "%s", name);
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    n->repl_port = repl_port;
    node_id_from_name(name, n->id);
    cl.enabled = 1;
    return 0;
}

int cluster_set_self(const char *name, char *err, size_t errlen) {
    if (!name[0] || strlen(name) > CLUSTER_NAME_MAX) {
        snprintf(err, errlen, "cluster-self must name a cluster-node");
        return -1;
    }
    /* resolved in cluster_setup: cluster-node lines may come after it */
    snprintf(cl.self_name, sizeof(cl.self_name), "%s", name);
    return 0;
}

int cluster_setup(int nshards, int replicas, char *err, size_t errlen) {
    const char *self_name = cl.self_name[0] ? cl.self_name : NULL;
    cl.nshards = nshards;
    if (!cl.enabled) {
        if (self_name) {
            snprintf(err, errlen, "cluster-self is set but there is no cluster-node line");
            return -1;
        }
        cl.self = 0;
        cl.k = 1;
    } else {
        if (!self_name) {
            snprintf(err, errlen, "cluster-node lines need cluster-self <name> (which node this is)");
            return -1;
        }
        cl.self = cluster_node_by_name(self_name);
        if (cl.self < 0) {
            snprintf(err, errlen, "cluster-self %s is not one of the cluster-node lines", self_name);
            return -1;
        }
        cl.k = replicas > 0 ? replicas : (cl.nnodes < 3 ? cl.nnodes : 3);
        if (cl.k > cl.nnodes) {
            snprintf(err, errlen, "replicas %d is more than the %d cluster nodes", cl.k, cl.nnodes);
            return -1;
        }
    }
    cl.primary = calloc((size_t)nshards, sizeof(int));
    cl.backups = calloc((size_t)nshards, sizeof(uint64_t));
    int n = cl.enabled ? cl.nnodes : 1;
    for (int s = 0; s < nshards; s++) {
        cl.primary[s] = s % n;
        for (int j = 1; j < cl.k; j++) cl.backups[s] |= 1ULL << ((s + j) % n);
        if (cl.primary[s] == cl.self) cl.peers |= cl.backups[s];
    }
    return 0;
}

int cluster_enabled(void) { return cl.enabled; }
int cluster_nnodes(void) { return cl.enabled ? cl.nnodes : 1; }
int cluster_self(void) { return cl.self; }
int cluster_replicas(void) { return cl.k; }
uint64_t cluster_term(void) { return 1; }
const cluster_node *cluster_node_at(int i) { return i >= 0 && i < cl.nnodes ? &cl.nodes[i] : NULL; }

int cluster_node_by_name(const char *name) {
    for (int i = 0; i < cl.nnodes; i++)
        if (!strcmp(cl.nodes[i].name, name)) return i;
    return -1;
}

int cluster_primary_of(int shard) { return cl.primary ? cl.primary[shard] : 0; }
uint64_t cluster_backups_of(int shard) { return cl.backups ? cl.backups[shard] : 0; }
int cluster_is_primary(int shard) { return cluster_primary_of(shard) == cl.self; }
int cluster_is_backup(int shard) { return cluster_mask_has(cluster_backups_of(shard), cl.self); }
uint64_t cluster_peers_we_replicate_to(void) { return cl.peers; }

uint64_t cluster_config_digest(void) {
    uint64_t h = 1469598103934665603ULL;
#define MIX(p, n) do { const uint8_t *q_ = (const uint8_t *)(p); \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) h = (h ^ q_[i_]) * 1099511628211ULL; } while (0)
    for (int i = 0; i < cl.nnodes; i++) {
        const cluster_node *n = &cl.nodes[i];
        MIX(n->name, strlen(n->name) + 1);
        MIX(n->host, strlen(n->host) + 1);
        MIX(&n->port, sizeof(n->port));
        MIX(&n->repl_port, sizeof(n->repl_port));
    }
    MIX(&cl.nshards, sizeof(cl.nshards));
    MIX(&cl.k, sizeof(cl.k));
#undef MIX
    return h;
}
