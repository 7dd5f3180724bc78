/* t_cluster.c -- the Redis Cluster protocol: routing (-MOVED, -CROSSSLOT)
 * and the CLUSTER / ASKING commands, over the static cluster of
 * src/cluster/cluster.h.
 *
 * Routing (cluster_redirect, called by the dispatcher for every command
 * that passed its unknown/arity/auth checks, before MULTI queueing), as
 * Redis Cluster's getNodeByQuery:
 *  - the keys of one command (the command table's key positions, plus
 *    SORT's STORE destination) must hash to one slot, else
 *    -CROSSSLOT Keys in request don't hash to the same slot;
 *  - that slot's shard must have us as primary, else
 *    -MOVED <slot> <host>:<port> of its primary;
 *  - keyless commands run here (KEYS, SCAN, DBSIZE, FLUSHALL... then cover
 *    only the shards we are primary of: db.c);
 *  - inside MULTI each command is checked as it is queued; a refused one is
 *    not queued and makes EXEC answer EXECABORT. EXEC checks the queued
 *    commands together: keys of different slots -> -CROSSSLOT and the
 *    transaction is discarded.
 * Reads are redirected to the primary too: we never serve reads from a
 * backup copy, READONLY only answers +OK (a backup's copy may lag behind
 * what the primary acknowledged, and Rowan never shows what is not
 * durable everywhere). There is no resharding, hence no -ASK; ASKING is
 * accepted for clients that send it.
 *
 * Presentation. Every node is the primary of some shards and a backup of
 * others. CLUSTER NODES shows every node as a master with its slot ranges
 * (as Redis shows a cluster without replicas); CLUSTER SLOTS lists, per
 * range, the backups as replicas; CLUSTER SHARDS has one shard per primary
 * with its backups as replicas. Contiguous slot ranges with the same
 * primary are merged. Node ids are derived from the configured names
 * (cluster.c), config epochs are the cluster's term. */
#include <stdlib.h>
#include <string.h>
#include "t_cluster.h"
#include "cluster.h"
#include "commands.h"
#include "hash.h"
#include "member.h"
#include "reconcile.h"
#include "multi.h"
#include "server.h"
#include "shard.h"
#include "t_geo.h"
#include "util.h"

#define ERR_CLUSTER_DISABLED "ERR This instance has cluster support disabled"
#define ERR_CROSSSLOT "CROSSSLOT Keys in request don't hash to the same slot"
#define ERR_NO_CONFIG "CLUSTERDOWN The cluster is down: this node has no cluster configuration yet"

cmd_proc sortCommand, sortroCommand; /* rows in cmds_introspect.def */

/* ---------------- routing ---------------- */

typedef struct route { int slot; } route;   /* -1: no key yet */

/* 1 when key hashes to another slot than the keys before it. */
static int route_key(route *r, const char *key, size_t len) {
    int slot = (int)hash_slot(key, len);
    if (r->slot < 0) r->slot = slot;
    return slot != r->slot;
}

/* SORT ... STORE dst: a key the command table's row does not name. */
static int sort_store_pos(int argc, const char *const *argv, const size_t *argvlen) {
    for (int j = 2; j < argc; j++) {
        if (strcaseeqlen(argv[j], argvlen[j], "limit")) j += 2;
        else if (strcaseeqlen(argv[j], argvlen[j], "by") || strcaseeqlen(argv[j], argvlen[j], "get")) j++;
        else if (strcaseeqlen(argv[j], argvlen[j], "store") && j + 1 < argc) return j + 1;
    }
    return -1;
}

/* multi_queued_fn: 1 on CROSSSLOT. */
static int route_command(void *arg, const struct rcommand *cmd, int argc,
                         const char *const *argv, const size_t *argvlen) {
    route *r = arg;
    int stack[64];
    int *pos = argc <= 64 ? stack : malloc(sizeof(int) * (size_t)argc);
    int nk = command_keys_argv(cmd, argc, argv, argvlen, pos, argc), cross = 0;
    for (int i = 0; i < nk && !cross; i++) cross = route_key(r, argv[pos[i]], argvlen[pos[i]]);
    if (pos != stack) free(pos);
    if (!cross && cmd->proc == sortCommand) {
        int j = sort_store_pos(argc, argv, argvlen);
        if (j > 0) cross = route_key(r, argv[j], argvlen[j]);
    }
    if (!cross) {
        int j = geo_store_pos(cmd, argc, argv, argvlen);
        if (j > 0) cross = route_key(r, argv[j], argvlen[j]);
    }
    return cross;
}

static int queued_write(void *arg, const struct rcommand *cmd, int argc,
                        const char *const *argv, const size_t *argvlen) {
    (void)argc, (void)argv, (void)argvlen;
    if (cmd->flags & CMD_WRITE) *(int *)arg = 1;
    return 0;
}

/* Does the command (EXEC: one of its queued commands) write? */
static int writes(client *c) {
    if (c->cmd->proc != execCommand) return (c->cmd->flags & CMD_WRITE) != 0;
    int w = 0;
    multi_foreach_queued(c, queued_write, &w);
    return w;
}

/* The slot the command addresses (EXEC: its queued commands), -1 when it
 * names no key, -2 when its keys are in several slots. */
static int command_slot(client *c) {
    route r = {-1};
    int cross = c->cmd->proc == execCommand ? multi_foreach_queued(c, route_command, &r)
                                            : route_command(&r, c->cmd, c->argc, c->argv, c->argvlen);
    return cross ? -2 : r.slot;
}

/* Reply the error for a slot this node does not serve, and return 1; 0 when
 * it serves it. Another node's primary slot: -MOVED. Ours, but not
 * servable yet (reconcile.h): -TRYAGAIN, which clients retry; or never
 * (no replica holds its history): -CLUSTERDOWN. */
static int refuse_slot(client *c, int slot) {
    shard *s = shard_of_slot((unsigned)slot);
    const cluster_config *cf = cluster_current();
    if (!cf) {
        resp_add_error(&c->out, ERR_NO_CONFIG);
        return 1;
    }
    int primary = cf->primary[s->id];
    if (cluster_managed()) {
        /* fencing (member.h): without a lease this node may already have
         * been replaced; it knows no better than the client where to go */
        if (!member_lease_valid()) {
            resp_add_error(&c->out, "CLUSTERDOWN The cluster is down: this node holds no lease "
                                    "from the configuration manager");
            return 1;
        }
        if (primary < 0 || !cluster_mask_has(cf->members, primary)) {
            resp_add_errorf(&c->out, "CLUSTERDOWN Hash slot %d is not served: no live replica "
                            "of shard %d", slot, s->id);
            return 1;
        }
    }
    if (primary != cluster_self()) {
        const cluster_node *n = &cf->nodes[primary];
        resp_add_errorf(&c->out, "MOVED %d %s:%d", slot, n->host, n->port);
        return 1;
    }
    /* min-replicas-to-write: a shard left with too few backups takes no
     * write (its data would live on fewer nodes than asked for) */
    if (writes(c) && __builtin_popcountll(cf->backups[s->id]) <
                         server.cfg.min_replicas_to_write &&
        cluster_replicas() > 1) {
        resp_add_error(&c->out, "NOREPLICAS Not enough good replicas to write.");
        return 1;
    }
    int avail = atomic_load(&s->avail);
    if (avail == SHARD_SERVING) return 0;
    if (avail == SHARD_RECONCILING)
        resp_add_errorf(&c->out, "TRYAGAIN Hash slot %d: shard %d is being checked against its "
                        "replicas after a restart; try again", slot, s->id);
    else
        resp_add_errorf(&c->out, "CLUSTERDOWN Hash slot %d is not served: no replica holds the "
                        "whole history of shard %d (see the server log)", slot, s->id);
    return 1;
}

/* Redis: a refused EXEC discards the transaction; a refused command inside
 * MULTI makes EXEC abort. */
static void refused(client *c) {
    if (c->cmd->proc == execCommand) multi_reset(c);
    else multi_flag_error(c);
}

int cluster_redirect(client *c) {
    if (!cluster_enabled()) return 0;
    int slot = command_slot(c);
    if (slot == -1) return 0;
    if (slot == -2) resp_add_error(&c->out, ERR_CROSSSLOT);
    else if (!refuse_slot(c, slot)) return 0;
    refused(c);
    return 1;
}

int cluster_recheck(client *c) {
    if (!cluster_enabled()) return 0;
    int slot = command_slot(c);
    if (slot < 0 || !refuse_slot(c, slot)) return 0;
    refused(c);
    return 1;
}

void askingCommand(client *c) {
    if (!cluster_enabled()) resp_add_error(&c->out, ERR_CLUSTER_DISABLED);
    else resp_add_ok(&c->out);
}

/* ---------------- the slot map as Redis presents it ---------------- */

/* Every presentation reads one configuration (cf), taken once per command:
 * a reply never mixes two terms. Managed mode has none before the node
 * joined (it is still loading), and shards may have no primary (no live
 * replica): their slots are unassigned, as Redis shows them. */
typedef struct slot_range {
    int start, end;      /* inclusive */
    int primary;
    uint64_t backups;
} slot_range;

/* Contiguous shards with the same primary (and backups), merged; shards
 * without a primary left out. Returns how many; *out is malloc'd. */
static int slot_ranges(const cluster_config *cf, slot_range **out) {
    slot_range *r = malloc(sizeof(slot_range) * (size_t)server.nshards);
    int n = 0;
    for (int s = 0; s < server.nshards; s++) {
        const shard *sh = &server.shards[s];
        int p = cf->primary[s];
        uint64_t b = cf->backups[s];
        if (p < 0) continue;
        if (n && r[n - 1].primary == p && r[n - 1].backups == b &&
            r[n - 1].end + 1 == (int)sh->first_slot) {
            r[n - 1].end = (int)sh->last_slot;
            continue;
        }
        r[n++] = (slot_range){(int)sh->first_slot, (int)sh->last_slot, p, b};
    }
    *out = r;
    return n;
}

/* The backups of a mask in ring order after primary p. */
static int ring_backups(const cluster_config *cf, int p, uint64_t mask, int *out) {
    int n = 0, nn = cf->nnodes;
    for (int j = 1; j < nn; j++) {
        int i = (p + j) % nn;
        if (cluster_mask_has(mask, i)) out[n++] = i;
    }
    return n;
}

static int popcount64(uint64_t m) { return __builtin_popcountll(m); }

/* Is node i part of the configuration's membership? Static mode: all are. */
static int is_member(const cluster_config *cf, int i) {
    return !cluster_managed() || cluster_mask_has(cf->members, i);
}

/* Node i's native datagram port, 0 if none is known: ours from native-port
 * (what this process listens on), another node's from the optional 5th
 * word of its cluster-node line. Managed mode does not carry it in the
 * configuration, so there only our own is known. librowan reads it from
 * the metadata below and otherwise assumes the seed's offset between RESP
 * and native ports holds on every node. */
static int native_port_of(const cluster_config *cf, int i) {
    if (i == cluster_self() && server.cfg.native_port > 0) return server.cfg.native_port;
    return cf->nodes[i].native_port;
}

/* CLUSTER SLOTS node entry: host, port, id, and a map of the other
 * endpoints (Redis 7: hostname; here "native-port" when known). */
static void add_slots_node(client *c, const cluster_config *cf, int i) {
    const cluster_node *n = &cf->nodes[i];
    int native = native_port_of(cf, i);
    resp_add_array(&c->out, 4);
    resp_add_bulkstr(&c->out, n->host);
    resp_add_int(&c->out, n->port);
    resp_add_bulkstr(&c->out, n->id);
    resp_add_map(&c->out, native ? 1 : 0);
    if (native) {
        resp_add_bulkstr(&c->out, "native-port");
        resp_add_int(&c->out, native);
    }
}

static void cluster_slots(client *c, const cluster_config *cf) {
    slot_range *r;
    int n = slot_ranges(cf, &r);
    int b[CLUSTER_MAX_NODES];
    resp_add_array(&c->out, n);
    for (int i = 0; i < n; i++) {
        int nb = ring_backups(cf, r[i].primary, r[i].backups, b);
        resp_add_array(&c->out, 3 + nb);
        resp_add_int(&c->out, r[i].start);
        resp_add_int(&c->out, r[i].end);
        add_slots_node(c, cf, r[i].primary);
        for (int j = 0; j < nb; j++) add_slots_node(c, cf, b[j]);
    }
    free(r);
}

static void add_shards_node(client *c, const cluster_config *cf, int i, const char *role) {
    const cluster_node *n = &cf->nodes[i];
    int native = native_port_of(cf, i);
    resp_add_map(&c->out, native ? 8 : 7);
    resp_add_bulkstr(&c->out, "id");
    resp_add_bulkstr(&c->out, n->id);
    resp_add_bulkstr(&c->out, "port");
    resp_add_int(&c->out, n->port);
    if (native) {
        resp_add_bulkstr(&c->out, "native-port");
        resp_add_int(&c->out, native);
    }
    resp_add_bulkstr(&c->out, "ip");
    resp_add_bulkstr(&c->out, n->host);
    resp_add_bulkstr(&c->out, "endpoint");
    resp_add_bulkstr(&c->out, n->host);
    resp_add_bulkstr(&c->out, "role");
    resp_add_bulkstr(&c->out, role);
    resp_add_bulkstr(&c->out, "replication-offset");
    resp_add_int(&c->out, 0);
    resp_add_bulkstr(&c->out, "health");
    resp_add_bulkstr(&c->out, is_member(cf, i) ? "online" : "fail");
}

/* One shard per node that is primary of some slots: its slot ranges, then
 * the node (master) and its backups (replicas). */
static void cluster_shards(client *c, const cluster_config *cf) {
    slot_range *r;
    int n = slot_ranges(cf, &r), nn = cf->nnodes, nshards = 0;
    int b[CLUSTER_MAX_NODES];
    for (int p = 0; p < nn; p++)
        for (int i = 0; i < n; i++)
            if (r[i].primary == p) { nshards++; break; }
    resp_add_array(&c->out, nshards);
    for (int p = 0; p < nn; p++) {
        int nr = 0;
        uint64_t backups = 0;
        for (int i = 0; i < n; i++)
            if (r[i].primary == p) { nr++; backups |= r[i].backups; }
        if (!nr) continue;
        resp_add_map(&c->out, 2);
        resp_add_bulkstr(&c->out, "slots");
        resp_add_array(&c->out, 2 * nr);
        for (int i = 0; i < n; i++) {
            if (r[i].primary != p) continue;
            resp_add_int(&c->out, r[i].start);
            resp_add_int(&c->out, r[i].end);
        }
        resp_add_bulkstr(&c->out, "nodes");
        int nb = ring_backups(cf, p, backups, b);
        resp_add_array(&c->out, 1 + nb);
        add_shards_node(c, cf, p, "master");
        for (int j = 0; j < nb; j++) add_shards_node(c, cf, b[j], "replica");
    }
    free(r);
}

/* <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <config-epoch>
 * <link-state> <slot> ... per node, every node a master (see the header);
 * a node outside the membership (failed, or not yet joined) is flagged
 * fail and disconnected, as Redis shows a failed node. */
static void cluster_nodes(client *c, const cluster_config *cf) {
    slot_range *r;
    int n = slot_ranges(cf, &r), self = cluster_self();
    rbuf b;
    rbuf_init(&b);
    for (int i = 0; i < cf->nnodes; i++) {
        const cluster_node *nd = &cf->nodes[i];
        int up = is_member(cf, i);
        rbuf_appendf(&b, "%s %s:%d@%d %smaster%s - 0 0 %llu %s", nd->id, nd->host, nd->port,
                     nd->repl_port, i == self ? "myself," : "", up ? "" : ",fail",
                     (unsigned long long)cf->term, up ? "connected" : "disconnected");
        for (int j = 0; j < n; j++) {
            if (r[j].primary != i) continue;
            if (r[j].start == r[j].end) rbuf_appendf(&b, " %d", r[j].start);
            else rbuf_appendf(&b, " %d-%d", r[j].start, r[j].end);
        }
        rbuf_appendf(&b, "\n");
    }
    resp_add_verbatim(&c->out, b.buf, b.len);
    rbuf_free(&b);
    free(r);
}

/* cluster_state is ok when every slot has a primary in the membership and
 * (managed mode) this node holds a lease, as Redis says fail when a slot is
 * not served or the node cannot reach the majority. */
static void cluster_info(client *c, const cluster_config *cf) {
    int assigned = 0, ok = 0;
    uint64_t masters = 0;
    for (int s = 0; cf && s < server.nshards; s++) {
        int p = cf->primary[s];
        if (p < 0) continue;
        int nslots = (int)(server.shards[s].last_slot - server.shards[s].first_slot + 1);
        assigned += nslots;
        if (is_member(cf, p)) {
            ok += nslots;
            masters |= 1ULL << p;
        }
    }
    int state_ok = cf && ok == HASH_SLOTS && member_lease_valid();
    unsigned long long term = cf ? (unsigned long long)cf->term : 0;
    rbuf b;
    rbuf_init(&b);
    rbuf_appendf(&b, "cluster_state:%s\r\n", state_ok ? "ok" : "fail");
    rbuf_appendf(&b, "cluster_slots_assigned:%d\r\ncluster_slots_ok:%d\r\n", assigned, ok);
    rbuf_appendf(&b, "cluster_slots_pfail:0\r\ncluster_slots_fail:%d\r\n", assigned - ok);
    rbuf_appendf(&b, "cluster_known_nodes:%d\r\ncluster_size:%d\r\n", cf ? cf->nnodes : 1,
                 popcount64(masters));
    rbuf_appendf(&b, "cluster_current_epoch:%llu\r\ncluster_my_epoch:%llu\r\n", term, term);
    rbuf_appendf(&b, "cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n");
    rbuf_appendf(&b, "total_cluster_links_buffer_limit_exceeded:0\r\n");
    resp_add_verbatim(&c->out, b.buf, b.len);
    rbuf_free(&b);
}

/* ---------------- keys of one slot ---------------- */

typedef struct slot_keys {
    unsigned slot;
    long long count, max;     /* max < 0: only count */
    rbuf keys;                /* u32 length + bytes, per key */
} slot_keys;

static void slot_key_visit(void *arg, const char *key, size_t klen, const db_val *v) {
    slot_keys *sk = arg;
    if (hash_slot(key, klen) != sk->slot) return;
    if (sk->max >= 0 && sk->count >= sk->max) return;
    sk->count++;
    if (sk->max < 0) return;
    uint32_t l = (uint32_t)klen;
    rbuf_append(&sk->keys, &l, sizeof(l));
    rbuf_append(&sk->keys, key, klen);
}

/* Walk db 0 of the slot's shard (only when we are its primary: a backup
 * copy is not ours to show). db_scan's cursor is the shard id in its low 16
 * bits (db.h), so the walk starts at the shard and ends when it leaves it. */
static void walk_slot(client *c, slot_keys *sk) {
    uint16_t sid = shard_of_slot(sk->slot)->id;
    if (!cluster_is_primary(sid)) return;
    uint64_t cur = sid;
    do {
        cur = db_scan(&c->x, 0, cur, 256, slot_key_visit, sk);
    } while (cur != 0 && (cur & 0xffff) == sid && (sk->max < 0 || sk->count < sk->max));
}

static void cluster_countkeysinslot(client *c) {
    long long slot;
    if (arg_ll(c, 2, &slot) != 0) return;  /* Redis: the integer first, then the range */
    if (slot < 0 || slot >= HASH_SLOTS) {
        resp_add_error(&c->out, "ERR Invalid slot");
        return;
    }
    slot_keys sk = {(unsigned)slot, 0, -1, {0}};
    walk_slot(c, &sk);
    resp_add_int(&c->out, sk.count);
}

static void cluster_getkeysinslot(client *c) {
    long long slot, max;
    if (arg_ll(c, 2, &slot) != 0 || arg_ll(c, 3, &max) != 0) return;
    if (slot < 0 || slot >= HASH_SLOTS || max < 0) {
        resp_add_error(&c->out, "ERR Invalid slot or number of keys");
        return;
    }
    slot_keys sk = {(unsigned)slot, 0, max, {0}};
    rbuf_init(&sk.keys);
    if (max > 0) walk_slot(c, &sk);
    resp_add_array(&c->out, sk.count);
    for (size_t at = 0; at < sk.keys.len;) {
        uint32_t l;
        memcpy(&l, sk.keys.buf + at, sizeof(l));
        resp_add_bulk(&c->out, sk.keys.buf + at + sizeof(l), l);
        at += sizeof(l) + l;
    }
    rbuf_free(&sk.keys);
}

/* ---------------- CLUSTER ---------------- */

static const char *const cluster_help[] = {
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ACCEPTCOPY <shard-id>|ALL",
    "    Serve refused shards (-CLUSTERDOWN) this node is primary of from the most",
    "    recent learner's copy, accepting that it may lack acknowledged writes.",
    "COUNTKEYSINSLOT <slot>",
    "    Return the number of keys in <slot>.",
    "FAILOVER [FORCE|TAKEOVER]",
    "    Take over the shards this node is the first backup of (managed cluster).",
    "GETKEYSINSLOT <slot> <count>",
    "    Return key names stored by current node in a slot.",
    "INFO",
    "    Return information about the cluster.",
    "KEYSLOT <key>",
    "    Return the hash slot for <key>.",
    "MYID",
    "    Return the node id.",
    "MYSHARDID",
    "    Return the node's shard id.",
    "NODES",
    "    Return cluster configuration seen by node. Output format:",
    "    <id> <ip:port@bus-port[,hostname]> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
    "SHARDS",
    "    Return information about slot range mappings and the nodes associated with them.",
    "SLOTS",
    "    Return information about slots range mappings. Each range is made of:",
    "    start, end, master and replicas IP addresses, ports and ids",
    "HELP",
    "    Print this help.",
    NULL,
};

static void cluster_help_cmd(client *c) { reply_help(c, cluster_help); }
static void cluster_myid(client *c) {
    const cluster_node *me = cluster_self_node();
    resp_add_bulkstr(&c->out, me ? me->id : cluster_node_at(cluster_self())->id);
}
/* Redis 7.2's shard id names a primary and its replicas. CLUSTER SHARDS
 * shows one shard per primary node here (see the header), and every node
 * is a primary: the shard's id is its node's id. */
static void cluster_myshardid(client *c) { cluster_myid(c); }
static void cluster_keyslot(client *c) {
    resp_add_int(&c->out, (long long)hash_slot(c->argv[2], c->argvlen[2]));
}

/* The presentations, on one configuration; none yet: an error a cluster
 * client takes as "ask another node". */
static void with_config(client *c, void (*fn)(client *, const cluster_config *)) {
    const cluster_config *cf = cluster_current();
    if (!cf) resp_add_error(&c->out, ERR_NO_CONFIG);
    else fn(c, cf);
}
static void cluster_slots_cmd(client *c) { with_config(c, cluster_slots); }
static void cluster_shards_cmd(client *c) { with_config(c, cluster_shards); }
static void cluster_nodes_cmd(client *c) { with_config(c, cluster_nodes); }
static void cluster_info_cmd(client *c) { cluster_info(c, cluster_current()); }

/* CLUSTER FAILOVER [FORCE|TAKEOVER]: a planned handover (managed mode) of
 * the shards this node is the first backup of; as in Redis the reply is
 * +OK once it is asked for, and the switch follows (CLUSTER NODES, INFO
 * cluster_term show it). FORCE and TAKEOVER are accepted: the CM does
 * the same either way, since it never needs the old primary's agreement. */
static void cluster_failover(client *c) {
    int force = 0;
    if (c->argc == 3) {
        if (arg_is(c, 2, "force")) force = 1;
        else if (arg_is(c, 2, "takeover")) force = 2;
        else {
            resp_add_error(&c->out, "ERR syntax error");
            return;
        }
    } else if (c->argc > 3) {
        resp_add_error(&c->out, "ERR syntax error");
        return;
    }
    if (!cluster_managed()) {
        resp_add_error(&c->out, "ERR CLUSTER FAILOVER needs a managed cluster (zookeeper and "
                                "cluster-name in rowan.conf): a static cluster has no "
                                "configuration manager to move shards");
        return;
    }
    const cluster_config *cf = cluster_current();
    int self = cluster_self(), mine = 0;
    for (int s = 0; cf && s < cf->nshards; s++)
        mine += cf->primary[s] >= 0 && cluster_mask_has(cf->members, cf->primary[s]) &&
                cluster_config_first_backup(cf, s, cf->members) == self;
    if (!mine) {
        resp_add_error(&c->out, "ERR You should send CLUSTER FAILOVER to a replica");
        return;
    }
    char err[256];
    if (member_request_failover(force, err, sizeof(err)) != 0) resp_add_error(&c->out, err);
    else resp_add_ok(&c->out);
}

/* CLUSTER ACCEPTCOPY <shard-id>|ALL: an operator's way out of a refusal
 * no replica can repair (reconcile.h): the shard's learners hold copies
 * that may lack acknowledged writes, and the operator accepts that, as
 * rowan-check-pool --fix accepts a damaged region's loss. Replies the
 * number of refused shards checked again (served once fetched). */
static void cluster_acceptcopy(client *c) {
    if (!cluster_enabled()) {
        resp_add_error(&c->out, "ERR This instance has cluster support disabled");
        return;
    }
    long long sid = -1;
    if (!arg_is(c, 2, "all") &&
        arg_ll_range(c, 2, 0, server.nshards - 1, &sid,
                     "ERR Invalid shard id (CLUSTER SHARDS lists them) or ALL") != 0)
        return;
    resp_add_int(&c->out, reconcile_accept((int)sid));
}

static const subcommand cluster_subs[] = {
    {"slots", 2, cluster_slots_cmd},
    {"shards", 2, cluster_shards_cmd},
    {"nodes", 2, cluster_nodes_cmd},
    {"myid", 2, cluster_myid},
    {"myshardid", 2, cluster_myshardid},
    {"info", 2, cluster_info_cmd},
    {"keyslot", 3, cluster_keyslot},
    {"countkeysinslot", 3, cluster_countkeysinslot},
    {"getkeysinslot", 4, cluster_getkeysinslot},
    {"failover", -2, cluster_failover},
    {"acceptcopy", 3, cluster_acceptcopy},
    {"help", 2, cluster_help_cmd},
    {NULL, 0, NULL},
};

void clusterCommand(client *c) {
    if (!cluster_enabled()) {
        resp_add_error(&c->out, ERR_CLUSTER_DISABLED);
        return;
    }
    subcommand_dispatch(c, cluster_subs, "cluster");
}
