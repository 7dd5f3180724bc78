/* cluster.c -- the cluster configuration: values, the current one, and
 * its text form (see cluster.h).
 *
 * Publication. The current configuration is an atomic pointer; a new one
 * replaces it whole (cluster_install) and the old one is parked in a ring
 * of CLUSTER_KEEP retired configurations before it is freed, so a reader
 * that loaded the pointer an instant before may finish with it.
 * Configurations change a handful of times per failover; a reader holds
 * one for the length of a command or a scan.
 *
 * Text form (ZooKeeper). Lines of words:
 *   rowan-config 1
 *   term <n>
 *   replicas <k>
 *   shards <n>
 *   node <index> <name> <host> <resp-port> <repl-port> [native=<port>] member|out
 *   shard <id> <primary or -> <backups, comma-separated, or -> <learners or ->
 * Every shard has a line. The decoder checks everything (indexes in range,
 * a node not both primary and backup of a shard...), so a damaged znode
 * is refused instead of routing requests by it. A node's native port (the
 * optional word, written only when the node registered one) sits before
 * the last word so that a decoder that predates it, which reads six words
 * and takes the status from the end, still accepts the line. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cluster.h"
#include "server.h"

/* This file's state, one per server (server.h). */
struct cluster_state {
    int enabled, managed;
    char self_name[CLUSTER_NAME_MAX + 1];
    cluster_node self_node;          /* our address (static and managed) */
    int has_self_node;
    _Atomic int self;                /* our index in the current table */
    int k, nshards;
    char zk[1024];
    char name[128];
    /* static mode: the cluster-node lines, in order */
    int nstaged;
    cluster_node staged[CLUSTER_MAX_NODES];
    _Atomic(cluster_config *) cur;
    cluster_config *retired[CLUSTER_KEEP];
    int next_retired;
};
#define cl (*server.cluster_st)

void cluster_state_new(void) {
    struct cluster_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    st->k = 1;
    server.cluster_st = st;
}

void cluster_state_free(void) {
    struct cluster_state *st = server.cluster_st;
    if (!st) return;
    cluster_config_free(atomic_load(&st->cur));
    for (int i = 0; i < CLUSTER_KEEP; i++) cluster_config_free(st->retired[i]);
    free(st);
    server.cluster_st = NULL;
}

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

static int node_fill(cluster_node *n, const char *name, const char *host, int port, int repl_port,
                     char *err, size_t errlen) {
    if (!name[0] || strlen(name) > CLUSTER_NAME_MAX || strlen(host) >= sizeof(n->host) ||
        strchr(name, ' ') || strchr(host, ' ')) {
        snprintf(err, errlen, "cluster-node name must be 1-%d characters, host under 256, "
                 "no spaces", CLUSTER_NAME_MAX);
        return -1;
    }
    if (port <= 0 || port > 65535 || repl_port <= 0 || repl_port > 65535) {
        snprintf(err, errlen, "cluster-node %s: ports must be 1-65535", name);
        return -1;
    }
    memset(n, 0, sizeof(*n));
    snprintf(n->name, sizeof(n->name), "%s", name);
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    n->repl_port = repl_port;
    node_id_from_name(name, n->id);
    return 0;
}

/* ---------------- configuration time ---------------- */

int cluster_add_node(const char *name, const char *host, int port, int repl_port,
                     char *err, size_t errlen) {
    if (cl.nstaged == CLUSTER_MAX_NODES) {
        snprintf(err, errlen, "too many cluster-node lines (at most %d)", CLUSTER_MAX_NODES);
        return -1;
    }
    cluster_node n;
    if (node_fill(&n, name, host, port, repl_port, err, errlen) != 0) return -1;
    for (int i = 0; i < cl.nstaged; i++) {
        if (!strcmp(cl.staged[i].name, name)) {
            snprintf(err, errlen, "cluster-node %s is listed twice", name);
            return -1;
        }
    }
    cl.staged[cl.nstaged++] = n;
    cl.enabled = 1;
    return 0;
}

void cluster_add_node_native_port(int native_port) {
    if (cl.nstaged > 0) cl.staged[cl.nstaged - 1].native_port = native_port;
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

int cluster_set_zookeeper(const char *hosts, char *err, size_t errlen) {
    if (strlen(hosts) >= sizeof(cl.zk)) {
        snprintf(err, errlen, "zookeeper: the host list is too long");
        return -1;
    }
    snprintf(cl.zk, sizeof(cl.zk), "%s", hosts);
    return 0;
}

int cluster_set_name(const char *name, char *err, size_t errlen) {
    if (strlen(name) >= sizeof(cl.name) || strchr(name, '/') || strchr(name, ' ')) {
        snprintf(err, errlen, "cluster-name: at most %zu characters, no '/' or spaces",
                 sizeof(cl.name) - 1);
        return -1;
    }
    snprintf(cl.name, sizeof(cl.name), "%s", name);
    return 0;
}

int cluster_setup(int nshards, int replicas, char *err, size_t errlen) {
    cl.nshards = nshards;
    cl.managed = cl.zk[0] != 0;
    if (cl.managed && !cl.name[0]) {
        snprintf(err, errlen, "zookeeper needs cluster-name NAME (the cluster's znodes live "
                 "under /rowan/NAME)");
        return -1;
    }
    if (!cl.enabled && !cl.managed) {
        if (cl.self_name[0]) {
            snprintf(err, errlen, "cluster-self is set but there is no cluster-node line");
            return -1;
        }
        cluster_config *c = cluster_config_new(nshards);
        c->term = 1;
        c->k = 1;
        c->nnodes = 0;
        for (int s = 0; s < nshards; s++) c->primary[s] = 0;
        atomic_store(&cl.self, 0);
        atomic_store(&cl.cur, c);
        return 0;
    }
    if (!cl.self_name[0]) {
        snprintf(err, errlen, "a cluster node needs cluster-self <name> (which cluster-node it is)");
        return -1;
    }
    int self = -1;
    for (int i = 0; i < cl.nstaged; i++)
        if (!strcmp(cl.staged[i].name, cl.self_name)) self = i;
    if (self < 0) {
        snprintf(err, errlen, "cluster-self %s is not one of the cluster-node lines", cl.self_name);
        return -1;
    }
    cl.self_node = cl.staged[self];
    cl.has_self_node = 1;
    cl.enabled = 1;
    if (cl.managed) {
        cl.k = replicas > 0 ? replicas : 3;
        atomic_store(&cl.self, -1);
        return 0;   /* the configuration comes from ZooKeeper (member.c) */
    }
    cl.k = replicas > 0 ? replicas : (cl.nstaged < 3 ? cl.nstaged : 3);
    if (cl.k > cl.nstaged) {
        snprintf(err, errlen, "replicas %d is more than the %d cluster nodes", cl.k, cl.nstaged);
        return -1;
    }
    cluster_config *c = cluster_config_new(nshards);
    c->term = 1;
    c->k = cl.k;
    for (int i = 0; i < cl.nstaged; i++) cluster_config_node(c, &cl.staged[i]);
    c->members = cl.nstaged == 64 ? ~0ULL : (1ULL << cl.nstaged) - 1;
    cluster_config_spread(c);
    atomic_store(&cl.self, self);
    atomic_store(&cl.cur, c);
    return 0;
}

/* ---------------- queries ---------------- */

const cluster_config *cluster_current(void) { return atomic_load(&cl.cur); }
int cluster_enabled(void) { return cl.enabled; }
int cluster_managed(void) { return cl.managed; }
int cluster_self(void) { return atomic_load(&cl.self); }
const char *cluster_self_name(void) { return cl.self_name; }
const cluster_node *cluster_self_node(void) { return cl.has_self_node ? &cl.self_node : NULL; }
int cluster_replicas(void) { return cl.enabled ? cl.k : 1; }
const char *cluster_zk_hosts(void) { return cl.zk; }
const char *cluster_name(void) { return cl.name; }

int cluster_nnodes(void) {
    const cluster_config *c = cluster_current();
    return cl.enabled && c ? c->nnodes : 1;
}

uint64_t cluster_term(void) {
    const cluster_config *c = cluster_current();
    return c ? c->term : 0;
}

uint64_t cluster_members(void) {
    const cluster_config *c = cluster_current();
    return c ? c->members : 0;
}

const cluster_node *cluster_node_at(int i) {
    const cluster_config *c = cluster_current();
    return c && i >= 0 && i < c->nnodes ? &c->nodes[i] : NULL;
}

int cluster_node_by_name(const char *name) {
    const cluster_config *c = cluster_current();
    for (int i = 0; c && i < c->nnodes; i++)
        if (!strcmp(c->nodes[i].name, name)) return i;
    return -1;
}

int cluster_primary_of(int shard) {
    const cluster_config *c = cluster_current();
    return c ? c->primary[shard] : -1;
}

uint64_t cluster_backups_of(int shard) {
    const cluster_config *c = cluster_current();
    return c ? c->backups[shard] : 0;
}

uint64_t cluster_learners_of(int shard) {
    const cluster_config *c = cluster_current();
    return c ? c->learners[shard] : 0;
}

int cluster_is_primary(int shard) {
    int self = cluster_self();
    return self >= 0 && cluster_primary_of(shard) == self;
}

int cluster_is_backup(int shard) {
    const cluster_config *c = cluster_current();
    int self = cluster_self();
    return c && cluster_mask_has(c->backups[shard] | c->learners[shard], self);
}

uint64_t cluster_peers_we_replicate_to(void) {
    const cluster_config *c = cluster_current();
    int self = cluster_self();
    uint64_t m = 0;
    for (int s = 0; c && self >= 0 && s < c->nshards; s++)
        if (c->primary[s] == self) m |= c->backups[s] | c->learners[s];
    return m;
}

int cluster_config_first_backup(const cluster_config *c, int s, uint64_t among) {
    int p = c->primary[s] < 0 ? 0 : c->primary[s];
    for (int j = 1; j <= c->nnodes; j++) {
        int i = (p + j) % c->nnodes;
        if (cluster_mask_has(c->backups[s] & among, i)) return i;
    }
    return -1;
}

uint64_t cluster_config_digest(void) {
    uint64_t h = 1469598103934665603ULL;
#define MIX(p, n) do { const uint8_t *q_ = (const uint8_t *)(p); \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) h = (h ^ q_[i_]) * 1099511628211ULL; } while (0)
    if (cl.managed) {
        MIX(cl.name, strlen(cl.name) + 1);
    } else {
        for (int i = 0; i < cl.nstaged; i++) {
            const cluster_node *n = &cl.staged[i];
            MIX(n->name, strlen(n->name) + 1);
            MIX(n->host, strlen(n->host) + 1);
            MIX(&n->port, sizeof(n->port));
            MIX(&n->repl_port, sizeof(n->repl_port));
        }
    }
    MIX(&cl.nshards, sizeof(cl.nshards));
    MIX(&cl.k, sizeof(cl.k));
#undef MIX
    return h;
}

/* ---------------- values ---------------- */

cluster_config *cluster_config_new(int nshards) {
    cluster_config *c = calloc(1, sizeof(*c));
    c->nshards = nshards;
    c->primary = malloc(sizeof(int16_t) * (size_t)nshards);
    for (int s = 0; s < nshards; s++) c->primary[s] = -1;
    c->backups = calloc((size_t)nshards, sizeof(uint64_t));
    c->learners = calloc((size_t)nshards, sizeof(uint64_t));
    return c;
}

cluster_config *cluster_config_copy(const cluster_config *src) {
    cluster_config *c = cluster_config_new(src->nshards);
    int16_t *p = c->primary;
    uint64_t *b = c->backups, *l = c->learners;
    *c = *src;
    c->primary = p;
    c->backups = b;
    c->learners = l;
    memcpy(p, src->primary, sizeof(int16_t) * (size_t)src->nshards);
    memcpy(b, src->backups, sizeof(uint64_t) * (size_t)src->nshards);
    memcpy(l, src->learners, sizeof(uint64_t) * (size_t)src->nshards);
    return c;
}

void cluster_config_free(cluster_config *c) {
    if (!c) return;
    free(c->primary);
    free(c->backups);
    free(c->learners);
    free(c);
}

void cluster_config_spread(cluster_config *c) {
    int m[CLUSTER_MAX_NODES], n = 0;
    for (int i = 0; i < c->nnodes; i++)
        if (cluster_mask_has(c->members, i)) m[n++] = i;
    int k = c->k < n ? c->k : n;
    for (int s = 0; s < c->nshards; s++) {
        c->primary[s] = (int16_t)(n ? m[s % n] : -1);
        c->backups[s] = c->learners[s] = 0;
        for (int j = 1; j < k; j++) c->backups[s] |= 1ULL << m[(s + j) % n];
    }
}

int cluster_config_node(cluster_config *c, const cluster_node *n) {
    for (int i = 0; i < c->nnodes; i++)
        if (!strcmp(c->nodes[i].name, n->name)) return i;
    if (c->nnodes == CLUSTER_MAX_NODES) return -1;
    c->nodes[c->nnodes] = *n;
    node_id_from_name(n->name, c->nodes[c->nnodes].id);
    return c->nnodes++;
}

/* ---------------- text form ---------------- */

static void put_mask(char **p, char *end, uint64_t m) {
    if (!m) {
        *p += snprintf(*p, (size_t)(end - *p), " -");
        return;
    }
    int first = 1;
    for (int i = 0; i < 64; i++) {
        if (!((m >> i) & 1)) continue;
        *p += snprintf(*p, (size_t)(end - *p), "%s%d", first ? " " : ",", i);
        first = 0;
    }
}

char *cluster_config_encode(const cluster_config *c, size_t *len) {
    size_t cap = 256 + (size_t)c->nnodes * 400 + (size_t)c->nshards * 420;
    char *out = malloc(cap), *p = out, *end = out + cap;
    p += snprintf(p, (size_t)(end - p), "rowan-config 1\nterm %llu\nreplicas %d\nshards %d\n",
                  (unsigned long long)c->term, c->k, c->nshards);
    for (int i = 0; i < c->nnodes; i++) {
        const cluster_node *n = &c->nodes[i];
        p += snprintf(p, (size_t)(end - p), "node %d %s %s %d %d", i, n->name, n->host,
                      n->port, n->repl_port);
        if (n->native_port > 0) p += snprintf(p, (size_t)(end - p), " native=%d", n->native_port);
        p += snprintf(p, (size_t)(end - p), " %s\n",
                      cluster_mask_has(c->members, i) ? "member" : "out");
    }
    for (int s = 0; s < c->nshards; s++) {
        if (c->primary[s] >= 0) p += snprintf(p, (size_t)(end - p), "shard %d %d", s, c->primary[s]);
        else p += snprintf(p, (size_t)(end - p), "shard %d -", s);
        put_mask(&p, end, c->backups[s]);
        put_mask(&p, end, c->learners[s]);
        p += snprintf(p, (size_t)(end - p), "\n");
    }
    if (len) *len = (size_t)(p - out);
    return out;
}

/* "-" or comma-separated node indexes below nnodes. */
static int parse_mask(const char *w, int nnodes, uint64_t *out) {
    *out = 0;
    if (!strcmp(w, "-")) return 0;
    for (const char *p = w; *p;) {
        char *e;
        long i = strtol(p, &e, 10);
        if (e == p || i < 0 || i >= nnodes) return -1;
        *out |= 1ULL << i;
        if (*e == ',') e++;
        else if (*e) return -1;
        p = e;
    }
    return 0;
}

cluster_config *cluster_config_decode(const char *text, size_t len, char *err, size_t errlen) {
    char *buf = malloc(len + 1);
    memcpy(buf, text, len);
    buf[len] = 0;
    cluster_config *c = NULL;
    int nshards = -1, seen_shards = 0, version = 0, lineno = 0;
    long long term = -1, k = -1;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char w[8][300];
        int n = sscanf(line, "%299s %299s %299s %299s %299s %299s %299s %299s", w[0], w[1], w[2],
                       w[3], w[4], w[5], w[6], w[7]);
        if (n < 2) goto bad;
        if (!strcmp(w[0], "rowan-config")) version = atoi(w[1]);
        else if (!strcmp(w[0], "term")) term = atoll(w[1]);
        else if (!strcmp(w[0], "replicas")) k = atoll(w[1]);
        else if (!strcmp(w[0], "shards")) {
            nshards = atoi(w[1]);
            if (nshards < 1 || nshards > 16384 || c) goto bad;
            c = cluster_config_new(nshards);
        } else if (!strcmp(w[0], "node")) {
            if (!c || (n != 7 && n != 8)) goto bad;
            int i = atoi(w[1]);
            if (i != c->nnodes || i >= CLUSTER_MAX_NODES) goto bad;
            char e2[128];
            if (node_fill(&c->nodes[i], w[2], w[3], atoi(w[4]), atoi(w[5]), e2, sizeof(e2)) != 0)
                goto bad;
            if (n == 8) {
                char *e;
                long np = strncmp(w[6], "native=", 7) ? -1 : strtol(w[6] + 7, &e, 10);
                if (np <= 0 || np > 65535 || *e) goto bad;
                c->nodes[i].native_port = (int)np;
            }
            c->nnodes++;
            const char *st = w[n - 1];
            if (!strcmp(st, "member")) c->members |= 1ULL << i;
            else if (strcmp(st, "out")) goto bad;
        } else if (!strcmp(w[0], "shard")) {
            if (!c || n != 5) goto bad;
            int s = atoi(w[1]);
            if (s < 0 || s >= nshards) goto bad;
            int p = -1;
            if (strcmp(w[2], "-")) {
                p = atoi(w[2]);
                if (p < 0 || p >= c->nnodes) goto bad;
            }
            if (parse_mask(w[3], c->nnodes, &c->backups[s]) || parse_mask(w[4], c->nnodes, &c->learners[s]))
                goto bad;
            if (p >= 0 && cluster_mask_has(c->backups[s] | c->learners[s], p)) goto bad;
            if (c->backups[s] & c->learners[s]) goto bad;
            c->primary[s] = (int16_t)p;
            seen_shards++;
        } else {
            goto bad;
        }
    }
    if (version != 1 || !c || term < 1 || k < 1 || k > CLUSTER_MAX_NODES || seen_shards != nshards) {
        snprintf(err, errlen, "incomplete configuration (version %d, term %lld, %d of %d shards)",
                 version, term, seen_shards, nshards);
        cluster_config_free(c);
        free(buf);
        return NULL;
    }
    c->term = (uint64_t)term;
    c->k = (int)k;
    free(buf);
    return c;
bad:
    snprintf(err, errlen, "malformed configuration at line %d", lineno);
    cluster_config_free(c);
    free(buf);
    return NULL;
}

void cluster_install(cluster_config *c) {
    int self = -1;
    for (int i = 0; i < c->nnodes; i++)
        if (!strcmp(c->nodes[i].name, cl.self_name)) self = i;
    cluster_config *old = atomic_exchange(&cl.cur, c);
    atomic_store(&cl.self, self);
    if (!old) return;
    int slot = cl.next_retired;
    cl.next_retired = (slot + 1) % CLUSTER_KEEP;
    cluster_config_free(cl.retired[slot]);
    cl.retired[slot] = old;
}
