/* member.c -- a managed cluster node (see member.h).
 *
 * ZooKeeper layout, under /rowan/<cluster-name>:
 *   config          the configuration (cluster.c's text form), written only
 *                   by the CM with compare-and-set on the znode's version;
 *   nodes/<name>    one persistent znode per node that ever registered:
 *                   "<host> <resp-port> <repl-port> <native-port>" (0:
 *                   none; rewritten at every start, so the CM carries a
 *                   changed native port into the configuration);
 *   cm/n-<seq>      ephemeral sequential: the CM election (cm.c); the
 *                   lowest is the CM, its data is the node's name.
 *
 * Threads. member_join runs on the main thread at start-up. The member
 * thread then renews the lease, follows the CM election and adopts new
 * configurations; a configuration pushed over the bus (BUS_CONFIG) is
 * handed to it and adopted there, so every adoption is serialised on one
 * thread. Lease grants arrive on the bus thread and only move lease_until
 * forward (an atomic). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bus.h"
#include "cluster.h"
#include "cm.h"
#include "control.h"
#include "digest.h"
#include "le.h"
#include "member.h"
#include "reconcile.h"
#include "repl.h"
#include "server.h"
#include "shard.h"
#include "zk.h"

/* The membership's whole state: one per server (server.member), allocated
 * by member_init; the member thread gets it as its argument. */
struct member_state {
    pthread_t thread;
    int running;
    _Atomic int stopping;
    char root[200];
    _Atomic int64_t lease_until;      /* monotonic us */
    _Atomic uint64_t lease_epoch;
    int lease_held;                   /* member thread: the lease was valid at the last tick */
    int64_t renew_sent_us;
    _Atomic int cm_node;
    pthread_mutex_t mu;
    cluster_config *pushed;           /* newest configuration pushed over the bus */
    _Atomic long long adoptions;
    int64_t joined_us;
};

void member_init(void) {
    struct member_state *mb = calloc(1, sizeof(*mb));
    pthread_mutex_init(&mb->mu, NULL);
    atomic_store(&mb->cm_node, -1);
    server.member = mb;
}

void member_free(void) {
    struct member_state *mb = server.member;   /* after member_stop */
    if (!mb) return;
    cluster_config_free(mb->pushed);
    pthread_mutex_destroy(&mb->mu);
    free(mb);
    server.member = NULL;
}

static int64_t lease_us(void) { return server.cfg.cluster_lease_ms * 1000; }

int member_lease_valid(void) {
    struct member_state *mb = server.member;
    return !cluster_managed() || monotonic_us() < atomic_load(&mb->lease_until);
}

uint64_t member_lease_epoch(void) { return atomic_load(&server.member->lease_epoch); }
int member_cm_node(void) { return atomic_load(&server.member->cm_node); }

static void path_of(char *out, size_t n, const char *rel) {
    struct member_state *mb = server.member;
    snprintf(out, n, "%s/%s", mb->root, rel);
}

/* ---------------- adopting a configuration ---------------- */

/* Our index in c (by name), -1 if absent. */
static int self_in(const cluster_config *c) {
    for (int i = 0; i < c->nnodes; i++)
        if (!strcmp(c->nodes[i].name, cluster_self_name())) return i;
    return -1;
}

typedef struct demote_job {
    int n;
    uint16_t ids[];
} demote_job;

/* Digest thread: shards we were primary of and now back up hold exactly
 * what we served, all of it committed here. */
static void demote_run(void *arg) {
    demote_job *j = arg;
    for (int i = 0; i < j->n; i++) digest_set_committed(j->ids[i]);
    free(j);
}

/* A learner's copy of shard s is suspect: writes did not wait for its
 * acks, so a CommitVer could overtake entries it covered, which its digest
 * then drops. It counts as damaged (never a source, fetched again if this
 * node is promoted) until it received a whole re-sync sent in a term in
 * which it is a backup: the primary sends one when the learner becomes a
 * backup (repl.c), and it may end before or after we adopt that term. */
static void learner_copy(const cluster_config *c, const cluster_config *old, int s, int self,
                         int oself) {
    shard *sh = &server.shards[s];
    if (self >= 0 && cluster_mask_has(c->learners[s], self)) {
        int clean = 0;   /* damage found by recovery stays what it is */
        atomic_compare_exchange_strong(&sh->damaged, &clean, SHARD_DAMAGED_LEARNER);
    } else if (old && oself >= 0 && cluster_mask_has(old->learners[s], oself) &&
               self >= 0 && cluster_mask_has(c->backups[s], self) &&
               atomic_load(&sh->resync_term) >= c->term) {
        atomic_store(&sh->damaged, 0);
    }
}

static void adopt(cluster_config *c) {
    struct member_state *mb = server.member;
    const cluster_config *old = cluster_current();
    if (old && c->term <= old->term) {
        cluster_config_free(c);
        return;
    }
    int self = self_in(c), oself = old ? cluster_self() : -1;
    /* 1. nothing from nodes that left lands after this point */
    uint64_t table = c->nnodes == 64 ? ~0ULL : (1ULL << c->nnodes) - 1;
    control_drop_nodes(table & ~c->members, 1);
    /* 2. shard roles */
    uint16_t *promote = malloc(sizeof(uint16_t) * (size_t)server.nshards);
    demote_job *dj = malloc(sizeof(*dj) + sizeof(uint16_t) * (size_t)server.nshards);
    int np = 0, nd = 0, nlost = 0;
    dj->n = 0;
    for (int s = 0; s < server.nshards; s++) {
        int was = old && oself >= 0 && old->primary[s] == oself;
        int is = self >= 0 && c->primary[s] == self;
        if (is && !was) {
            shard *sh = &server.shards[s];
            shard_lock(sh);
            atomic_store(&sh->avail, SHARD_RECONCILING);
            shard_unlock(sh);
            promote[np++] = (uint16_t)s;
        } else if (was && !is) {
            nd++;
            if (self >= 0 && cluster_mask_has(c->backups[s] | c->learners[s], self))
                dj->ids[dj->n++] = (uint16_t)s;
        }
        if (c->primary[s] < 0) nlost++;
    }
    /* 3. publish, with the shards we stop serving locked: no command of
     * theirs runs across the switch */
    for (int s = 0; s < server.nshards; s++)
        if (old && oself >= 0 && old->primary[s] == oself) {
            shard_lock(&server.shards[s]);
            if (self < 0 || c->primary[s] != self)   /* see shard.h serve_epoch */
                atomic_fetch_add(&server.shards[s].serve_epoch, 1);
        }
    uint64_t term = c->term;
    uint64_t members = c->members;
    cluster_install(c);
    for (int s = server.nshards - 1; s >= 0; s--)
        if (old && oself >= 0 && old->primary[s] == oself) shard_unlock(&server.shards[s]);
    /* after publishing: a re-sync ending meanwhile sees this configuration
     * or finds its term recorded here (learner_copy) */
    for (int s = 0; s < server.nshards; s++) learner_copy(c, old, s, self, oself);
    /* 4. replication follows; demoted copies become backup copies;
     * promoted shards are reconciled before they are served */
    repl_config_changed(old);
    if (dj->n) digest_run(demote_run, dj);
    else free(dj);
    if (np) reconcile_begin(promote, np);
    free(promote);
    atomic_fetch_add(&mb->adoptions, 1);
    serverLog(LL_NOTICE, "Cluster: configuration term %llu adopted (%d members%s; %d shards to "
              "take over, %d handed over%s)", (unsigned long long)term,
              __builtin_popcountll(members), self >= 0 && cluster_mask_has(members, self) ? "" :
              ", this node NOT among them", np, nd,
              nlost ? "; some shards have no live replica" : "");
    if (nlost)
        serverLog(LL_WARNING, "Cluster: %d shards have no live replica and are not served", nlost);
}

/* Read the configuration from ZooKeeper (watching it); NULL if absent or
 * unreadable. */
static cluster_config *read_config(int watch) {
    char path[256], *data = NULL, err[256];
    size_t len = 0;
    path_of(path, sizeof(path), "config");
    if (zk_get(path, watch, &data, &len, NULL) != ZK_OK) return NULL;
    cluster_config *c = cluster_config_decode(data, len, err, sizeof(err));
    if (!c) serverLog(LL_WARNING, "Cluster: the configuration in ZooKeeper is unusable: %s", err);
    else if (c->nshards != server.nshards) {
        serverLog(LL_WARNING, "Cluster: the configuration in ZooKeeper has %d shards, this node "
                  "%d: start it with 'shards %d'", c->nshards, server.nshards, c->nshards);
        cluster_config_free(c);
        c = NULL;
    }
    free(data);
    return c;
}

void member_offer(cluster_config *c) {
    struct member_state *mb = server.member;
    pthread_mutex_lock(&mb->mu);
    if (!mb->pushed || mb->pushed->term < c->term) {
        cluster_config_free(mb->pushed);
        mb->pushed = c;
    } else {
        cluster_config_free(c);
    }
    pthread_mutex_unlock(&mb->mu);
    zk_poke();
}

/* A configuration pushed by the CM (bus thread). */
static void on_config_push(bus_req *r, int node, const uint8_t *p, size_t n) {
    (void)node;
    char err[256];
    cluster_config *c = cluster_config_decode((const char *)p, n, err, sizeof(err));
    if (!c || c->nshards != server.nshards) {
        cluster_config_free(c);
        bus_reply_error(r, "unusable configuration");
        return;
    }
    member_offer(c);
    bus_reply(r, NULL, 0);
}

/* ---------------- the lease ---------------- */

typedef struct renew_ctx {
    int64_t t_req;
} renew_ctx;

static void grant(int64_t t_req, uint64_t term) {
    struct member_state *mb = server.member;
    if (term != cluster_term()) {
        zk_poke();   /* the CM has another configuration: read it */
        return;
    }
    int64_t until = t_req + lease_us();
    int64_t cur = atomic_load(&mb->lease_until);
    while (until > cur && !atomic_compare_exchange_weak(&mb->lease_until, &cur, until)) {}
}

static void renew_cb(void *arg, int status, const uint8_t *p, size_t n) {
    renew_ctx *r = arg;
    if (status == BUS_OK && n >= 9 && p[8]) grant(r->t_req, le_get_u64(p));
    else if (status == BUS_OK && n >= 8 && le_get_u64(p) != cluster_term()) zk_poke();
    free(r);
}

/* A renewal goes out every lease/4 whether or not the previous one was
 * answered: each carries its own request time and a grant only moves
 * lease_until forward, so one slow reply (a CM or bus thread descheduled
 * under load) no longer holds back the next request for a whole lease and
 * turns into a false failover. At most about four are in flight, each
 * timing out after a lease. */
static void renew(void) {
    struct member_state *mb = server.member;
    int64_t now = monotonic_us();
    if (now - mb->renew_sent_us < lease_us() / 4) return;
    mb->renew_sent_us = now;
    int cm = atomic_load(&mb->cm_node);
    if (cm < 0) return;
    if (cm == cluster_self()) {
        uint64_t term = 0;
        if (cm_lease_request(cm, cluster_term(), &term)) grant(now, term);
        return;
    }
    uint8_t b[8];
    le_put_u64(b, cluster_term());
    renew_ctx *r = malloc(sizeof(*r));
    r->t_req = now;
    bus_call(cm, BUS_LEASE, b, sizeof(b), (int)server.cfg.cluster_lease_ms, renew_cb, r);
}

/* The lease ran out since the last tick: say so once, and let the workers
 * drop replies computed under it. */
static void watch_lease(void) {
    struct member_state *mb = server.member;
    int held = member_lease_valid();
    if (mb->lease_held && !held) {
        atomic_fetch_add(&mb->lease_epoch, 1);
        server_wake_workers();
        serverLog(LL_WARNING, "Cluster: this node's lease expired (no renewal from the CM for %lld "
                  "ms): it serves nothing until renewed", server.cfg.cluster_lease_ms);
    } else if (!mb->lease_held && held) {
        serverLog(LL_NOTICE, "Cluster: lease granted by the CM (node %s); serving",
                  cluster_node_at(member_cm_node()) ? cluster_node_at(member_cm_node())->name : "?");
    }
    mb->lease_held = held;
}

/* ---------------- the CM's location ---------------- */

static void locate_cm(int watch) {
    struct member_state *mb = server.member;
    char path[256], **names = NULL;
    int n = 0;
    path_of(path, sizeof(path), "cm");
    if (zk_children(path, watch, &names, &n) != ZK_OK) return;
    int cm = -1;
    if (n > 0) {
        char child[512], *data = NULL;
        snprintf(child, sizeof(child), "%s/%s", path, names[0]);
        if (zk_get(child, 0, &data, NULL, NULL) == ZK_OK) cm = cluster_node_by_name(data);
        free(data);
    }
    zk_free_names(names, n);
    int before = atomic_exchange(&mb->cm_node, cm);
    if (before != cm && cm >= 0) {
        serverLog(LL_NOTICE, "Cluster: the configuration manager is node %s",
                  cluster_node_at(cm)->name);
        mb->renew_sent_us = 0;   /* renew with it at once */
    }
}

/* ---------------- reports to the CM ---------------- */

/* Learners our sessions have caught up: the CM makes them backups. */
static void report_learners(void) {
    struct member_state *mb = server.member;
    static int64_t last;
    int64_t now = monotonic_us();
    if (now - last < 100000) return;
    last = now;
    uint64_t l = repl_live_learners();
    int cm = atomic_load(&mb->cm_node);
    if (!l || cm < 0) return;
    if (cm == cluster_self()) {
        cm_caughtup(cm, cluster_term(), l);
        return;
    }
    uint8_t b[16];
    le_put_u64(b, cluster_term());
    le_put_u64(b + 8, l);
    bus_call(cm, BUS_CAUGHTUP, b, sizeof(b), 1000, NULL, NULL);
}

/* ---------------- the thread ---------------- */

static void check_config(int from_zk) {
    struct member_state *mb = server.member;
    pthread_mutex_lock(&mb->mu);
    cluster_config *c = mb->pushed;
    mb->pushed = NULL;
    pthread_mutex_unlock(&mb->mu);
    if (c) adopt(c);
    if (from_zk) {
        c = read_config(1);
        if (c) adopt(c);
    }
}

static void *member_main(void *arg) {
    struct member_state *mb = arg;
    pthread_setname_np(pthread_self(), "rowan-member");
    int tick_ms = (int)(server.cfg.cluster_lease_ms / 8);
    if (tick_ms < 2) tick_ms = 2;
    uint64_t seen = 0;
    int64_t last_poll = 0;
    while (!atomic_load(&mb->stopping)) {
        uint64_t now_seen = zk_wait(seen, tick_ms);
        int fired = now_seen != seen;
        seen = now_seen;
        int64_t now = monotonic_us();
        /* watches are one-shot and a session can be replaced: read again
         * on every event and at least every second */
        int poll = fired || now - last_poll > 1000000;
        if (poll) {
            last_poll = now;
            locate_cm(1);
        }
        check_config(poll);
        renew();
        watch_lease();
        report_learners();
    }
    return NULL;
}

/* ---------------- start-up ---------------- */

static int register_node(char *err, size_t errlen) {
    struct member_state *mb = server.member;
    const cluster_node *me = cluster_self_node();
    char path[512], data[400];
    snprintf(path, sizeof(path), "%s/nodes/%s", mb->root, me->name);
    /* our native port, as CLUSTER SLOTS shows it for ourselves (t_cluster.c):
     * the one we listen on, else our cluster-node line's */
    int native = server.cfg.native_port > 0 ? server.cfg.native_port : me->native_port;
    int n = snprintf(data, sizeof(data), "%s %d %d %d", me->host, me->port, me->repl_port, native);
    int rc = zk_create(path, data, (size_t)n, 0, NULL, 0);
    if (rc == ZK_EXISTS) rc = zk_set(path, data, (size_t)n, -1, NULL);
    if (rc != ZK_OK) {
        snprintf(err, errlen, "cannot register %s in ZooKeeper: %s", path, zk_errstr(rc));
        return -1;
    }
    return 0;
}

int member_join(char *err, size_t errlen) {
    struct member_state *mb = server.member;
    int64_t t0 = monotonic_us();
    snprintf(mb->root, sizeof(mb->root), "/rowan/%s", cluster_name());
    if (zk_open(cluster_zk_hosts(), (int)server.cfg.zookeeper_session_timeout, 10000, err,
                errlen) != 0)
        return -1;
    char p[256];
    /* A ZooKeeper just started, or one starved of CPU, can drop the first
     * session's requests (connection loss); zk.c reconnects, so retry for
     * a while before giving up on the cluster. */
    int rc = ZK_FAIL;
    for (int64_t until = monotonic_us() + 30000000; rc == ZK_FAIL && monotonic_us() < until;) {
        path_of(p, sizeof(p), "nodes");
        rc = zk_ensure(p);
        path_of(p, sizeof(p), "cm");
        if (rc == ZK_OK) rc = zk_ensure(p);
        if (rc == ZK_FAIL) usleep(200000);
    }
    if (rc != ZK_OK) {
        snprintf(err, errlen, "cannot create %s in ZooKeeper: %s", mb->root, zk_errstr(rc));
        return -1;
    }
    if (register_node(err, errlen) != 0) return -1;
    bus_register(BUS_CONFIG, on_config_push);
    cm_start(mb->root);
    int64_t t_reg = monotonic_us();
    /* wait for a configuration that has us in its table */
    uint64_t seen = 0;
    int64_t warned = t0;
    for (;;) {
        cluster_config *c = read_config(1);
        if (c && self_in(c) >= 0) {
            /* nothing runs yet: publish it as it is; shards we are primary
             * of are reconciled like after any restart (reconcile_init) */
            cluster_install(c);
            break;
        }
        cluster_config_free(c);
        if (monotonic_us() - warned > 5000000) {
            warned = monotonic_us();
            serverLog(LL_NOTICE, "Cluster: waiting for a configuration that includes this node "
                      "(%s; the CM creates the first one once %d nodes registered)",
                      cluster_self_name(), server.cfg.cluster_init_nodes > 0 ?
                      server.cfg.cluster_init_nodes : cluster_replicas());
        }
        seen = zk_wait(seen, 200);
    }
    mb->joined_us = monotonic_us();
    locate_cm(1);
    serverLog(LL_NOTICE, "Cluster: joined %s at term %llu (ZooKeeper %.3f s, configuration %.3f s)",
              cluster_name(), (unsigned long long)cluster_term(), (double)(t_reg - t0) / 1e6,
              (double)(mb->joined_us - t_reg) / 1e6);
    return 0;
}

void member_start(void) {
    struct member_state *mb = server.member;
    if (!cluster_managed()) return;
    mb->running = 1;
    rowan_thread_create(&mb->thread, NULL, member_main, mb);
}

void member_stop(void) {
    struct member_state *mb = server.member;
    if (!mb->running) {   /* never started: a session member_join may have opened */
        zk_close();
        return;
    }
    atomic_store(&mb->stopping, 1);
    zk_poke();
    pthread_join(mb->thread, NULL);
    mb->running = 0;
    cm_stop();
    zk_close();
}

int member_request_failover(int force, char *err, size_t errlen) {
    int cm = member_cm_node();
    if (cm < 0) {
        snprintf(err, errlen, "ERR no configuration manager is known yet");
        return -1;
    }
    uint8_t b[10];
    le_put_u64(b, cluster_term());
    b[8] = (uint8_t)cluster_self();
    b[9] = (uint8_t)force;
    if (cm == cluster_self()) return cm_failover_request(cluster_self(), force, err, errlen);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    int st = bus_call_sync(cm, BUS_FAILOVER, b, sizeof(b), 5000, &resp, &rlen);
    if (st == BUS_OK) {
        free(resp);
        return 0;
    }
    if (st == BUS_ERROR && resp) snprintf(err, errlen, "%.*s", (int)rlen, (const char *)resp);
    else snprintf(err, errlen, "ERR the configuration manager did not answer");
    free(resp);
    return -1;
}

int member_ever_leased(void) { return atomic_load(&server.member->lease_until) != 0; }

void member_stats_get(member_stats *o) {
    struct member_state *mb = server.member;
    *o = (member_stats){0};
    if (!cluster_managed()) return;
    int64_t left = atomic_load(&mb->lease_until) - monotonic_us();
    int cm = member_cm_node();
    const cluster_node *n = cm >= 0 ? cluster_node_at(cm) : NULL;
    *o = (member_stats){1, cluster_term(), n ? n->name : "?",
                        left > 0 ? (long long)(left / 1000) : 0LL,
                        cluster_is_member(cluster_self()), atomic_load(&mb->adoptions)};
}
