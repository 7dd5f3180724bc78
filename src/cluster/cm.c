/* cm.c -- the configuration manager (see cm.h for what it decides).
 *
 * State. The CM thread owns the configuration it last committed (cfg, and
 * the znode version it has) and decides everything on it. Bus handlers
 * (lease requests, catch-up reports, failover requests) run on the bus
 * thread and only record facts in atomics the CM thread reads on its next
 * tick: when a node last got a lease, when a non-member last asked for
 * one, which learners their primaries report caught up, who asked for a
 * failover. A tick computes at most one new configuration from those
 * facts, writes it with compare-and-set, and pushes it.
 *
 * Timing. A tick every cluster-lease-ms / 16. A member that renewed with
 * this CM is failed once its last grant + the lease + a margin (a tenth of
 * a lease, for a worker preempted between its lease check and its write)
 * has passed; one that never renewed with this CM (it became CM
 * after a crash of the previous one, or the whole cluster is starting) is
 * given two leases and the margin from the moment this CM took over when
 * this node held a lease before (the previous CM died: its leases were
 * granted while its ZooKeeper session was fresh, so they ended before its
 * election znode vanished and this CM was elected), and CM_JOIN_GRACE
 * otherwise: the nodes of a cold start come up at different moments. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bus.h"
#include "cluster.h"
#include "cm.h"
#include "le.h"
#include "member.h"
#include "server.h"
#include "zk.h"

#define CM_JOIN_GRACE_US 3000000

/* The CM's whole state: one per server (server.cm), allocated by cm_init;
 * the CM thread gets it as its argument. */
struct cm_state {
    char root[200];
    pthread_t thread;
    int running;
    _Atomic int stopping;
    char my_path[400];             /* our election znode */
    uint64_t my_session;
    _Atomic int active;
    int64_t active_since;
    cluster_config *cfg;           /* CM thread: what we committed or read */
    int version;                   /* its znode version */
    _Atomic uint64_t term;         /* cfg's term, for the bus handlers */
    _Atomic uint64_t members;      /* cfg's members, for the bus handlers */
    _Atomic int64_t last_grant[CLUSTER_MAX_NODES];
    _Atomic int64_t last_seen[CLUSTER_MAX_NODES];   /* any lease request */
    /* caught[p] bit n: primary p reported learner n caught up, at term caught_term[p] */
    _Atomic uint64_t caught[CLUSTER_MAX_NODES];
    _Atomic uint64_t caught_term[CLUSTER_MAX_NODES];
    _Atomic uint64_t failover_wanted;  /* nodes that asked for CLUSTER FAILOVER */
    int warm;                      /* we held a lease before becoming CM (not a cold start) */
    int rebalance_due;             /* CM thread: learners became backups since the last rebalance */
    _Atomic uint64_t failing;      /* members being failed: granted nothing (tick) */
    _Atomic long long commits, failovers, joins, handovers;
    int64_t last_failover_us;      /* kill..commit, last failover: detect, write (INFO) */
    int64_t last_detect_us, last_write_us;
    int64_t native_checked_us;     /* CM thread: registrations last read for native ports */
};

void cm_init(void) { server.cm = calloc(1, sizeof(struct cm_state)); }

void cm_free(void) {
    if (!server.cm) return;   /* after cm_stop */
    cluster_config_free(server.cm->cfg);
    free(server.cm);
    server.cm = NULL;
}

static int64_t lease_us(void) { return server.cfg.cluster_lease_ms * 1000; }

int cm_active(void) { return atomic_load(&server.cm->active); }

/* Has ZooKeeper confirmed our session recently enough to grant leases? */
static int zk_fresh(void) { return monotonic_us() - zk_alive_us() < lease_us() / 2; }

/* ---------------- facts from the bus ---------------- */

int cm_lease_request(int node, uint64_t term, uint64_t *term_out) {
    struct cm_state *cm = server.cm;
    *term_out = 0;
    if (node < 0 || node >= CLUSTER_MAX_NODES || !atomic_load(&cm->active)) return 0;
    int64_t now = monotonic_us();
    atomic_store(&cm->last_seen[node], now);
    uint64_t t = atomic_load(&cm->term);
    *term_out = t;
    if (term != t || !cluster_mask_has(atomic_load(&cm->members), node) || !zk_fresh()) return 0;
    /* Record first, then look at `failing`; tick() sets `failing`, then
     * reads the record. So either tick sees this grant and does not fail
     * the node, or we see the node being failed and grant nothing: a node
     * is never failed while a lease it was granted runs. */
    atomic_store(&cm->last_grant[node], now);
    return !cluster_mask_has(atomic_load(&cm->failing), node);
}

static void on_lease(bus_req *r, int node, const uint8_t *p, size_t n) {
    uint64_t term = n >= 8 ? le_get_u64(p) : 0, t = 0;
    uint8_t out[9];
    out[8] = (uint8_t)cm_lease_request(node, term, &t);
    le_put_u64(out, t);
    bus_reply(r, out, sizeof(out));
}

void cm_caughtup(int node, uint64_t term, uint64_t learners) {
    struct cm_state *cm = server.cm;
    if (node < 0 || node >= CLUSTER_MAX_NODES) return;
    atomic_store(&cm->caught[node], learners);
    atomic_store(&cm->caught_term[node], term);
}

static void on_caughtup(bus_req *r, int node, const uint8_t *p, size_t n) {
    if (n >= 16) cm_caughtup(node, le_get_u64(p), le_get_u64(p + 8));
    bus_reply(r, NULL, 0);
}

int cm_failover_request(int node, int force, char *err, size_t errlen) {
    struct cm_state *cm = server.cm;
    (void)force;
    if (!atomic_load(&cm->active)) {
        snprintf(err, errlen, "ERR this node is not the configuration manager any more; retry");
        return -1;
    }
    atomic_fetch_or(&cm->failover_wanted, 1ULL << node);
    return 0;
}

static void on_failover(bus_req *r, int node, const uint8_t *p, size_t n) {
    char err[256];
    if (cm_failover_request(node, n >= 10 ? p[9] : 0, err, sizeof(err)) == 0) bus_reply(r, NULL, 0);
    else bus_reply_error(r, err);
}

/* ---------------- committing ---------------- */

static void path_of(char *out, size_t n, const char *rel) {
    snprintf(out, n, "%s/%s", server.cm->root, rel);
}

static void push(const cluster_config *c) {
    size_t len;
    char *text = cluster_config_encode(c, &len);
    for (int i = 0; i < c->nnodes; i++) {
        if (!strcmp(c->nodes[i].name, cluster_self_name())) continue;
        bus_call(i, BUS_CONFIG, text, len, 1000, NULL, NULL);
    }
    member_offer(cluster_config_copy(c));
    free(text);
}

static void adopt_read(cluster_config *c, int version) {
    struct cm_state *cm = server.cm;
    cluster_config_free(cm->cfg);
    cm->cfg = c;
    cm->version = version;
    atomic_store(&cm->term, c->term);
    atomic_store(&cm->members, c->members);
}

/* Read the configuration znode; 0 ok (cm->cfg set), 1 absent, -1 error. */
static int reread(void) {
    char path[256], *data = NULL, err[256];
    size_t len = 0;
    int version = 0;
    path_of(path, sizeof(path), "config");
    int rc = zk_get(path, 0, &data, &len, &version);
    if (rc == ZK_NONODE) return 1;
    if (rc != ZK_OK) return -1;
    cluster_config *c = cluster_config_decode(data, len, err, sizeof(err));
    free(data);
    if (!c) {
        serverLog(LL_WARNING, "CM: the configuration znode is unusable: %s", err);
        return -1;
    }
    adopt_read(c, version);
    return 0;
}

/* Write c as the next term (compare-and-set). 0 committed (c owned), -1
 * lost the race or failed (c freed; cm->cfg re-read). */
static int commit(cluster_config *c, const char *why) {
    struct cm_state *cm = server.cm;
    c->term = cm->cfg->term + 1;
    size_t len;
    char *text = cluster_config_encode(c, &len), path[256];
    path_of(path, sizeof(path), "config");
    int version = 0;
    int64_t t0 = monotonic_us();
    /* Fenced by our election znode: it is ephemeral, so it is gone once
     * the session that won the election expired (this process was paused,
     * say, and another node is CM now). A tick that was under way across
     * the pause would otherwise commit what it decided from renewals it
     * slept through -- failing the live members -- on a fresh session,
     * before the loop notices the session changed (the chaos soak: a
     * configuration with no member, a lost acknowledged write). */
    int rc = cm->my_path[0] ? zk_set_guarded(path, text, len, cm->version, cm->my_path, &version)
                            : ZK_NONODE;
    free(text);
    cm->last_write_us = monotonic_us() - t0;
    if (rc != ZK_OK) {
        serverLog(LL_WARNING, "CM: committing term %llu (%s) failed: %s",
                  (unsigned long long)c->term, why, zk_errstr(rc));
        cluster_config_free(c);
        reread();
        return -1;
    }
    adopt_read(c, version);
    atomic_fetch_add(&cm->commits, 1);
    serverLog(LL_NOTICE, "CM: committed configuration term %llu: %s (ZooKeeper write %.1f ms)",
              (unsigned long long)c->term, why, (double)cm->last_write_us / 1000);
    push(c);
    return 0;
}

/* ---------------- decisions ---------------- */

static int replicas_of(const cluster_config *c, int s) {
    return (c->primary[s] >= 0 && cluster_mask_has(c->members, c->primary[s])) +
           __builtin_popcountll((c->backups[s] | c->learners[s]) & c->members);
}

static int primaries_of(const cluster_config *c, int node) {
    int n = 0;
    for (int s = 0; s < c->nshards; s++) n += c->primary[s] == node;
    return n;
}

static int copies_of(const cluster_config *c, int node) {
    int n = 0;
    for (int s = 0; s < c->nshards; s++)
        n += c->primary[s] == node || cluster_mask_has(c->backups[s] | c->learners[s], node);
    return n;
}

/* Shards with fewer than k copies get learners: members that hold no copy
 * of the shard, fewest copies first. Returns how many were added. */
static int add_learners(cluster_config *c) {
    int added = 0;
    for (int s = 0; s < c->nshards; s++) {
        if (c->primary[s] < 0 || !cluster_mask_has(c->members, c->primary[s])) continue;
        while (replicas_of(c, s) < c->k) {
            int best = -1, bestn = 0;
            for (int i = 0; i < c->nnodes; i++) {
                if (!cluster_mask_has(c->members, i) || c->primary[s] == i ||
                    cluster_mask_has(c->backups[s] | c->learners[s], i))
                    continue;
                int n = copies_of(c, i);
                if (best < 0 || n < bestn) best = i, bestn = n;
            }
            if (best < 0) break;
            c->learners[s] |= 1ULL << best;
            added++;
        }
    }
    return added;
}

/* Remove failed members: promote a surviving backup for the shards they
 * were primary of (fewest primaries first), drop them from backup and
 * learner sets. A shard none of whose replicas survives keeps its replica
 * set (all out of the membership): it is unavailable until one of them
 * returns (see joins). */
static int fail_nodes(cluster_config *c, uint64_t failed, char *why, size_t whylen) {
    int promoted = 0, lost = 0;
    c->members &= ~failed;
    for (int s = 0; s < c->nshards; s++) {
        uint64_t survivors = c->backups[s] & c->members;
        int p = c->primary[s];
        if (p >= 0 && cluster_mask_has(failed, p)) {
            if (!survivors) {
                lost++;
                continue;
            }
            int best = -1, bestn = 0;
            for (int j = 1; j <= c->nnodes; j++) {
                int i = (p + j) % c->nnodes;
                if (!cluster_mask_has(survivors, i)) continue;
                int n = primaries_of(c, i);
                if (best < 0 || n < bestn) best = i, bestn = n;
            }
            c->primary[s] = (int16_t)best;
            c->backups[s] &= ~(1ULL << best);
            promoted++;
        }
        if (c->primary[s] >= 0 && cluster_mask_has(c->members, c->primary[s])) {
            c->backups[s] &= c->members;
            c->learners[s] &= c->members;
        }
    }
    int learners = add_learners(c);
    int off = 0;
    for (int i = 0; i < c->nnodes; i++)
        if (cluster_mask_has(failed, i))
            off += snprintf(why + off, whylen - (size_t)off, "%s%s", off ? "," : "node ", c->nodes[i].name);
    snprintf(why + off, whylen - (size_t)off, " failed; %d shards promoted, %d learners added%s",
             promoted, learners, lost ? ", some shards lost every replica" : "");
    return promoted;
}

/* A returning node: a member again, primary of the shards only it can
 * bring back (it was a replica and no member is), a learner where copies
 * are missing. */
static void join_node(cluster_config *c, int n) {
    c->members |= 1ULL << n;
    for (int s = 0; s < c->nshards; s++) {
        int p = c->primary[s];
        if (p >= 0 && cluster_mask_has(c->members & ~(1ULL << n), p)) continue;
        uint64_t holders = (p >= 0 ? 1ULL << p : 0) | c->backups[s];
        if (!cluster_mask_has(holders, n)) continue;
        /* no member holds this shard; n was one of its replicas */
        c->primary[s] = (int16_t)n;
        c->backups[s] &= c->members & ~(1ULL << n);
        c->learners[s] &= c->members;
    }
    add_learners(c);
}

/* Learners whose primaries reported them caught up in this term. */
static int promote_learners(cluster_config *c) {
    struct cm_state *cm = server.cm;
    int moved = 0;
    for (int s = 0; s < c->nshards; s++) {
        int p = c->primary[s];
        if (p < 0 || !c->learners[s] || atomic_load(&cm->caught_term[p]) != c->term) continue;
        uint64_t ready = c->learners[s] & atomic_load(&cm->caught[p]);
        if (!ready) continue;
        c->learners[s] &= ~ready;
        c->backups[s] |= ready;
        moved++;
    }
    return moved;
}

/* CLUSTER FAILOVER: node n takes the shards it is the first backup of. */
static int handover_to(cluster_config *c, int n) {
    int moved = 0;
    for (int s = 0; s < c->nshards; s++) {
        int p = c->primary[s];
        if (p < 0 || !cluster_mask_has(c->members, p)) continue;
        if (cluster_config_first_backup(c, s, c->members) != n) continue;
        c->backups[s] &= ~(1ULL << n);
        c->backups[s] |= 1ULL << p;
        c->primary[s] = (int16_t)n;
        moved++;
    }
    return moved;
}

/* Spread primaries evenly over the members that hold copies: move shards
 * from the node with the most primaries to a backup of them with the
 * fewest, while the difference is two or more. Only when nothing is being
 * caught up. */
static int rebalance(cluster_config *c) {
    for (int s = 0; s < c->nshards; s++)
        if (c->learners[s] || c->primary[s] < 0 || !cluster_mask_has(c->members, c->primary[s]))
            return 0;
    int moved = 0;
    for (int round = 0; round < c->nshards; round++) {
        int hi = -1, lo = -1, hin = 0, lon = 0;
        for (int i = 0; i < c->nnodes; i++) {
            if (!cluster_mask_has(c->members, i)) continue;
            int n = primaries_of(c, i);
            if (hi < 0 || n > hin) hi = i, hin = n;
            if (lo < 0 || n < lon) lo = i, lon = n;
        }
        if (hi < 0 || hin - lon < 2) break;
        int done = 0;
        for (int s = 0; s < c->nshards && !done; s++) {
            if (c->primary[s] != hi || !cluster_mask_has(c->backups[s], lo)) continue;
            c->backups[s] &= ~(1ULL << lo);
            c->backups[s] |= 1ULL << hi;
            c->primary[s] = (int16_t)lo;
            moved++;
            done = 1;
        }
        if (!done) break;
    }
    return moved;
}

/* A node's registration: "<host> <resp-port> <repl-port> [<native-port>]"
 * (nodes of older versions write no native port: 0). 0, or -1 if it does
 * not read. */
static int read_registration(const char *name, cluster_node *nd) {
    char path[256], child[512], *data = NULL, host[256];
    int port = 0, rport = 0, native = 0, rc = -1;
    path_of(path, sizeof(path), "nodes");
    snprintf(child, sizeof(child), "%s/%s", path, name);
    if (zk_get(child, 0, &data, NULL, NULL) == ZK_OK &&
        sscanf(data, "%255s %d %d %d", host, &port, &rport, &native) >= 3) {
        memset(nd, 0, sizeof(*nd));
        snprintf(nd->name, sizeof(nd->name), "%s", name);
        snprintf(nd->host, sizeof(nd->host), "%s", host);
        nd->port = port;
        nd->repl_port = rport;
        nd->native_port = native > 0 && native <= 65535 ? native : 0;
        rc = 0;
    }
    free(data);
    return rc;
}

/* Registered nodes missing from the table are added (out of the
 * membership: they join when they ask for a lease). */
static int add_registered(cluster_config *c) {
    char path[256], **names = NULL;
    int n = 0, added = 0;
    path_of(path, sizeof(path), "nodes");
    if (zk_children(path, 1, &names, &n) != ZK_OK) return 0;
    for (int i = 0; i < n; i++) {
        int known = 0;
        for (int j = 0; j < c->nnodes; j++) known |= !strcmp(c->nodes[j].name, names[i]);
        if (known) continue;
        cluster_node nd;
        if (read_registration(names[i], &nd) == 0 && cluster_config_node(c, &nd) >= 0) added++;
    }
    zk_free_names(names, n);
    return added;
}

/* Known nodes whose registration names another native port than the
 * table (a node restarted with a new native-port): the table follows, so
 * CLUSTER SLOTS on every node shows each node's own port. Read at most
 * once a second (a ZooKeeper read per node); the RESP and replication
 * addresses of a known node are not changed here. The number changed. */
static int update_native_ports(cluster_config *c, int64_t now) {
    struct cm_state *cm = server.cm;
    if (now - cm->native_checked_us < 1000000) return 0;
    cm->native_checked_us = now;
    int changed = 0;
    for (int i = 0; i < c->nnodes; i++) {
        cluster_node nd;
        if (read_registration(c->nodes[i].name, &nd) != 0 ||
            nd.native_port == c->nodes[i].native_port)
            continue;
        c->nodes[i].native_port = nd.native_port;
        changed++;
    }
    return changed;
}

/* The first configuration: every registered node a member. */
static int bootstrap(void) {
    char path[256], **names = NULL;
    int n = 0;
    path_of(path, sizeof(path), "nodes");
    if (zk_children(path, 1, &names, &n) != ZK_OK) return -1;
    zk_free_names(names, n);
    int want = server.cfg.cluster_init_nodes > 0 ? server.cfg.cluster_init_nodes : cluster_replicas();
    if (n < want) return -1;
    cluster_config *c = cluster_config_new(server.nshards);
    c->k = cluster_replicas();
    add_registered(c);
    c->members = c->nnodes == 64 ? ~0ULL : (1ULL << c->nnodes) - 1;
    if (c->k > c->nnodes) c->k = c->nnodes;
    cluster_config_spread(c);
    c->term = 1;
    size_t len;
    char *text = cluster_config_encode(c, &len);
    path_of(path, sizeof(path), "config");
    int rc = zk_create(path, text, len, 0, NULL, 0);
    free(text);
    cluster_config_free(c);
    if (rc != ZK_OK && rc != ZK_EXISTS) return -1;
    if (rc == ZK_OK)
        serverLog(LL_NOTICE, "CM: created the first configuration of cluster %s: %d nodes, %d "
                  "shards, %d replicas each", cluster_name(), n, server.nshards, cluster_replicas());
    return reread() == 0 ? 0 : -1;
}

/* ---------------- the tick ---------------- */

/* One line per failed member at the moment it is found failed: the
 * failover's first phase ends here (utils/bench-failover reads these
 * timestamps; the commit line that follows gives the ZooKeeper write). */
static void log_failures(const cluster_config *c, uint64_t failed, int64_t now) {
    struct cm_state *cm = server.cm;
    for (int i = 0; i < c->nnodes; i++) {
        if (!cluster_mask_has(failed, i)) continue;
        int64_t g = atomic_load(&cm->last_grant[i]);
        if (g)
            serverLog(LL_NOTICE, "CM: node %s failed: no lease renewal for %.1f ms (lease %lld ms)",
                      c->nodes[i].name, (double)(now - g) / 1000, server.cfg.cluster_lease_ms);
        else
            serverLog(LL_NOTICE, "CM: node %s failed: no lease renewal with this CM in the %.1f ms "
                      "since it became CM", c->nodes[i].name,
                      (double)(now - cm->active_since) / 1000);
    }
}

static void tick(void) {
    struct cm_state *cm = server.cm;
    int64_t now = monotonic_us();
    cluster_config *cur = cm->cfg;
    cluster_config *c = cluster_config_copy(cur);
    char why[512] = "";
    int changed = 0;
    /* 1. failures */
    uint64_t failed = 0;
    int64_t margin = lease_us() / 10 > 5000 ? lease_us() / 10 : 5000;
    for (int i = 0; i < c->nnodes; i++) {
        if (!cluster_mask_has(c->members, i) || !strcmp(c->nodes[i].name, cluster_self_name()))
            continue;
        int64_t g = atomic_load(&cm->last_grant[i]);
        int64_t deadline = g ? g + lease_us() + margin
                             : cm->active_since +
                                   (cm->warm ? 2 * lease_us() + margin : CM_JOIN_GRACE_US);
        if (now > deadline) failed |= 1ULL << i;
    }
    if (failed) {
        /* No lease for them from now until the commit removed them from
         * cm->members: the ZooKeeper write takes milliseconds, and a node
         * that was paused may ask just then; a lease granted during the
         * write would let it serve after the new primaries do. One that
         * asked since the check above (granted, or refused by `failing`;
         * see cm_lease_request) is left for the next tick. */
        atomic_store(&cm->failing, failed);
        for (int i = 0; i < c->nnodes; i++)
            if (cluster_mask_has(failed, i) &&
                atomic_load(&cm->last_grant[i]) + lease_us() + margin >= now)
                failed &= ~(1ULL << i);
        atomic_store(&cm->failing, failed);
    }
    if (failed) {
        int64_t t0 = now;
        log_failures(c, failed, now);
        fail_nodes(c, failed, why, sizeof(why));
        cm->last_detect_us = t0;
        if (commit(c, why) == 0) {
            atomic_fetch_add(&cm->failovers, 1);
            cm->last_failover_us = monotonic_us();
        }
        atomic_store(&cm->failing, 0);
        return;
    }
    /* 2. nodes that registered, and nodes that came back */
    if (add_registered(c)) {
        snprintf(why, sizeof(why), "new nodes registered");
        changed = 1;
    }
    if (update_native_ports(c, now)) {
        snprintf(why, sizeof(why), "nodes registered a new native port");
        changed = 1;
    }
    for (int i = 0; i < c->nnodes; i++) {
        if (cluster_mask_has(c->members, i)) continue;
        int64_t seen = atomic_load(&cm->last_seen[i]);
        if (!seen || now - seen > lease_us()) continue;
        join_node(c, i);
        /* its last grant is from before it left: count from now */
        atomic_store(&cm->last_grant[i], now);
        atomic_fetch_add(&cm->joins, 1);
        snprintf(why, sizeof(why), "node %s joins (learner of the shards that lack copies)",
                 c->nodes[i].name);
        changed = 1;
    }
    if (!changed && add_learners(c)) {
        snprintf(why, sizeof(why), "learners added where copies are missing");
        changed = 1;
    }
    /* 3. learners caught up */
    if (!changed && promote_learners(c)) {
        snprintf(why, sizeof(why), "caught-up learners become backups");
        changed = 1;
        cm->rebalance_due = 1;
    }
    /* 4. CLUSTER FAILOVER (kept for a later tick while something else
     * changes the configuration) */
    uint64_t want = changed ? 0 : atomic_exchange(&cm->failover_wanted, 0);
    for (int i = 0; i < c->nnodes && !changed; i++) {
        if (!cluster_mask_has(want, i)) continue;
        int moved = handover_to(c, i);
        if (moved) {
            atomic_fetch_add(&cm->handovers, 1);
            snprintf(why, sizeof(why), "manual failover: node %s takes over %d shards",
                     c->nodes[i].name, moved);
            changed = 1;
        }
    }
    /* 5. rebalance, once nodes that came back hold their copies again;
     * not at other times, so a manual failover's placement stays */
    if (!changed && cm->rebalance_due) {
        int moved = rebalance(c);
        cm->rebalance_due = moved > 0;
        if (moved) {
            atomic_fetch_add(&cm->handovers, 1);
            snprintf(why, sizeof(why), "rebalance: %d primaries handed over", moved);
            changed = 1;
        }
    }
    if (changed) commit(c, why);
    else cluster_config_free(c);
}

/* ---------------- election ---------------- */

/* Our candidacy under path, into out: the one our current ZooKeeper
 * session owns if there is one (a create whose reply was lost), after
 * deleting any other that carries our name (a session of ours that was
 * replaced but is not gone yet, or our previous process's). Left alone,
 * such a znode stays the lowest while we wait behind a newer one: every
 * node then takes us for the CM (member.c reads the lowest) and nobody
 * acts as one. 0 if one of ours exists now (adopted), -1 otherwise. */
static int find_own_candidacy(const char *path, char *out, size_t outlen) {
    char **names = NULL;
    int n = 0, found = -1;
    uint64_t real = zk_client_session();
    if (!real || zk_children(path, 0, &names, &n) != ZK_OK) return -1;
    const char *me = cluster_self_name();
    for (int i = 0; i < n; i++) {
        char child[300], *data = NULL;
        uint64_t owner = 0;
        snprintf(child, sizeof(child), "%s/%s", path, names[i]);
        if (zk_owner(child, &owner) != ZK_OK) continue;
        if (owner == real && found < 0) {
            snprintf(out, outlen, "%s", child);
            found = 0;
            continue;
        }
        if (zk_get(child, 0, &data, NULL, NULL) == ZK_OK && !strcmp(data, me)) {
            serverLog(LL_NOTICE, "CM: removing a stale candidacy of this node (%s)", names[i]);
            zk_delete(child, -1);
        }
        free(data);
    }
    zk_free_names(names, n);
    return found;
}

/* Are we the lowest candidate? Also (re)creates our candidacy when the
 * session changed (an expired session took the ephemeral znode). */
static int elected(void) {
    struct cm_state *cm = server.cm;
    char path[256], **names = NULL;
    int n = 0;
    path_of(path, sizeof(path), "cm");
    uint64_t sess = zk_session_id();
    if ((sess != cm->my_session || !cm->my_path[0]) &&
        find_own_candidacy(path, cm->my_path, sizeof(cm->my_path)) == 0) {
        cm->my_session = sess;
    } else if (sess != cm->my_session || !cm->my_path[0]) {
        char prefix[300];
        snprintf(prefix, sizeof(prefix), "%s/n-", path);
        const char *name = cluster_self_name();
        if (zk_create(prefix, name, strlen(name), ZK_EPHEMERAL | ZK_SEQUENTIAL, cm->my_path,
                      sizeof(cm->my_path)) != ZK_OK) {
            cm->my_path[0] = 0;
            return 0;
        }
        cm->my_session = sess;
    }
    if (zk_children(path, 1, &names, &n) != ZK_OK) return atomic_load(&cm->active);
    const char *mine = strrchr(cm->my_path, '/') + 1;
    int lowest = n > 0 && !strcmp(names[0], mine), present = 0;
    for (int i = 0; i < n; i++) present |= !strcmp(names[i], mine);
    zk_free_names(names, n);
    if (!present) cm->my_path[0] = 0;   /* lost with a session: run again */
    return lowest;
}

static void become_cm(void) {
    struct cm_state *cm = server.cm;
    for (int i = 0; i < CLUSTER_MAX_NODES; i++) {
        atomic_store(&cm->last_grant[i], 0);
        atomic_store(&cm->caught_term[i], 0);
    }
    int rc;
    while ((rc = reread()) == 1 && !atomic_load(&cm->stopping)) {
        if (bootstrap() == 0) break;
        zk_wait(0, 100);
    }
    if (!cm->cfg) return;
    cm->active_since = monotonic_us();
    cm->warm = member_ever_leased();
    atomic_store(&cm->active, 1);
    serverLog(LL_NOTICE, "CM: this node is the configuration manager (term %llu, %d members)",
              (unsigned long long)cm->cfg->term, __builtin_popcountll(cm->cfg->members));
    push(cm->cfg);
}

static void *cm_main(void *arg) {
    struct cm_state *cm = arg;
    pthread_setname_np(pthread_self(), "rowan-cm");
    int tick_ms = (int)(server.cfg.cluster_lease_ms / 16);
    if (tick_ms < 2) tick_ms = 2;
    uint64_t seen = 0;
    int64_t last_check = 0;
    while (!atomic_load(&cm->stopping)) {
        seen = zk_wait(seen, tick_ms);
        int64_t now = monotonic_us();
        /* The election was won by one ZooKeeper session: once it was
         * replaced (it expired, say while this process was paused), this
         * node is no CM until it wins again. Deciding anything before
         * that (failing the nodes whose renewals it slept through) is
         * what a stale CM must never do. */
        if (atomic_load(&cm->active) && zk_session_id() != cm->my_session) {
            atomic_store(&cm->active, 0);
            serverLog(LL_WARNING, "CM: this node's ZooKeeper session was replaced; "
                      "no longer the CM until it is elected again");
        }
        if (now - last_check > 100000 || !atomic_load(&cm->active)) {
            last_check = now;
            int e = elected();
            if (!e && atomic_load(&cm->active)) {
                atomic_store(&cm->active, 0);
                serverLog(LL_WARNING, "CM: this node lost the election; no longer the CM");
            }
            if (e && !atomic_load(&cm->active)) become_cm();
        }
        if (!atomic_load(&cm->active)) continue;
        /* stay in touch with ZooKeeper (zk_fresh), and follow a change
         * made by anyone else (there should be none) */
        if (reread() < 0 && !zk_fresh()) continue;
        tick();
    }
    return NULL;
}

void cm_start(const char *root) {
    struct cm_state *cm = server.cm;
    snprintf(cm->root, sizeof(cm->root), "%s", root);
    bus_register(BUS_LEASE, on_lease);
    bus_register(BUS_CAUGHTUP, on_caughtup);
    bus_register(BUS_FAILOVER, on_failover);
    cm->running = 1;
    rowan_thread_create(&cm->thread, NULL, cm_main, cm);
}

void cm_stop(void) {
    struct cm_state *cm = server.cm;
    if (!cm->running) return;
    atomic_store(&cm->stopping, 1);
    zk_poke();
    pthread_join(cm->thread, NULL);
    cm->running = 0;
    if (cm->my_path[0]) zk_delete(cm->my_path, -1);
    cluster_config_free(cm->cfg);
    cm->cfg = NULL;
}

void cm_stats_get(cm_stats *o) {
    struct cm_state *cm = server.cm;
    *o = (cm_stats){atomic_load(&cm->active), atomic_load(&cm->commits),
                    atomic_load(&cm->failovers), atomic_load(&cm->joins), atomic_load(&cm->handovers),
                    (long long)cm->last_write_us};
}
