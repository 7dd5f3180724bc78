/* t_rowan.c -- the ROWAN command: Rowan's own admin subcommands.
 *
 *   ROWAN DIGEST <shard>   the shard's content digest (db_shard.h) as 16
 *                          lowercase hex digits
 *   ROWAN DIGEST           [shard id, digest, key count] for every shard this
 *                          node is primary or backup of (standalone: all)
 *   ROWAN SHARD <shard>    the shard's slots, replicas, role, keys, versions
 *   ROWAN VERSION          the server version
 *   ROWAN HELP
 *
 * No key arguments: nothing is routed and the dispatcher locks no shard, so
 * each subcommand locks the shards it reads itself (unless EXEC already
 * holds them). A digest or key count of a shard we are primary of depends
 * on the shard's current version, like any read: the reply waits until it
 * is durable, so it never reveals a write a crash could take back. A backup
 * shard's content was applied from already-durable data: no dependency. */
#include <stdio.h>
#include "cluster.h"
#include "commands.h"
#include "db_shard.h"
#include "server.h"
#include "shard.h"
#include "util.h"

static const char *const rowan_help[] = {
    "ROWAN <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DIGEST [<shard>]",
    "    Return the shard's content digest (16 hex digits). Without a shard: an",
    "    array of [shard, digest, keys] for every shard this node holds.",
    "SHARD <shard>",
    "    Return the shard's first_slot, last_slot, primary (null when",
    "    standalone), backups, role (primary|backup|none), keys, next_version",
    "    and durable_version.",
    "VERSION",
    "    Return the Rowan server version.",
    "HELP",
    "    Prints this help.",
    NULL
};

/* argv[i] as a shard number; replies the error and returns NULL if bad. */
static shard *arg_shard(client *c, int i) {
    long long n;
    if (!string2ll(c->argv[i], c->argvlen[i], &n) || n < 0 || n >= server.nshards) {
        resp_add_errorf(&c->out, "ERR invalid shard '%.*s': shards are 0-%d",
                        (int)(c->argvlen[i] > 128 ? 128 : c->argvlen[i]), c->argv[i],
                        server.nshards - 1);
        return NULL;
    }
    return &server.shards[n];
}

static int lock_unless_held(shard *s) {
    if (shard_held_by_me(s)) return 0;
    shard_lock(s);
    return 1;
}

/* Digest of s under its lock; records the read dependency when we are its
 * primary. */
static uint64_t shard_digest(client *c, shard *s, long long *nkeys) {
    int locked = lock_unless_held(s);
    uint64_t d = db_shard_digest(s, nkeys);
    if (cluster_is_primary(s->id)) db_shard_read_dep(&c->x, s);
    if (locked) shard_unlock(s);
    return d;
}

static void add_hex(client *c, uint64_t d) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)d);
    resp_add_bulk(&c->out, hex, 16);
}

static void digest_one(client *c, shard *s) {
    long long n;
    add_hex(c, shard_digest(c, s, &n));
}

static int held_here(int sid) {
    return !cluster_enabled() || cluster_is_primary(sid) || cluster_is_backup(sid);
}

static void digest_all(client *c) {
    long long count = 0;
    for (int i = 0; i < server.nshards; i++) count += held_here(i);
    resp_add_array(&c->out, count);
    for (int i = 0; i < server.nshards; i++) {
        if (!held_here(i)) continue;
        long long n;
        uint64_t d = shard_digest(c, &server.shards[i], &n);
        resp_add_array(&c->out, 3);
        resp_add_int(&c->out, i);
        add_hex(c, d);
        resp_add_int(&c->out, n);
    }
}

static void add_node_name(client *c, int node) {
    const cluster_node *n = cluster_node_at(node);
    if (n) resp_add_bulkstr(&c->out, n->name);
    else resp_add_null(&c->out);
}

static void shard_info(client *c, shard *s) {
    int sid = s->id;
    int locked = lock_unless_held(s);
    long long keys = 0;
    for (int d = 0; d < SHARD_MAX_DBS; d++) keys += s->dbkeys[d];
    long long next_ver = (long long)s->next_ver;
    if (cluster_is_primary(sid)) db_shard_read_dep(&c->x, s);
    if (locked) shard_unlock(s);
    long long durable = (long long)atomic_load(&s->durable_ver);
    const char *role = cluster_is_primary(sid) ? "primary" : cluster_is_backup(sid) ? "backup" : "none";
    uint64_t backups = cluster_backups_of(sid);

    resp_add_map(&c->out, 8);
    resp_add_bulkstr(&c->out, "first_slot");
    resp_add_int(&c->out, s->first_slot);
    resp_add_bulkstr(&c->out, "last_slot");
    resp_add_int(&c->out, s->last_slot);
    resp_add_bulkstr(&c->out, "primary");
    if (cluster_enabled()) add_node_name(c, cluster_primary_of(sid));
    else resp_add_null(&c->out);
    resp_add_bulkstr(&c->out, "backups");
    int nb = 0;
    for (int i = 0; i < cluster_nnodes(); i++) nb += cluster_mask_has(backups, i);
    resp_add_array(&c->out, cluster_enabled() ? nb : 0);
    for (int i = 0; cluster_enabled() && i < cluster_nnodes(); i++)
        if (cluster_mask_has(backups, i)) add_node_name(c, i);
    resp_add_bulkstr(&c->out, "role");
    resp_add_bulkstr(&c->out, role);
    resp_add_bulkstr(&c->out, "keys");
    resp_add_int(&c->out, keys);
    resp_add_bulkstr(&c->out, "next_version");
    resp_add_int(&c->out, next_ver);
    resp_add_bulkstr(&c->out, "durable_version");
    resp_add_int(&c->out, durable);
}

void rowanAdminCommand(client *c) {
    shard *s;
    if (arg_is(c, 1, "digest") && c->argc <= 3) {
        if (c->argc == 2) digest_all(c);
        else if ((s = arg_shard(c, 2))) digest_one(c, s);
    } else if (arg_is(c, 1, "shard") && c->argc == 3) {
        if ((s = arg_shard(c, 2))) shard_info(c, s);
    } else if (c->argc == 2 && arg_is(c, 1, "help")) {
        reply_help(c, rowan_help);
    } else if (c->argc == 2 && arg_is(c, 1, "version")) {
        resp_add_bulkstr(&c->out, ROWAN_VERSION);
    } else if (arg_is(c, 1, "help") || arg_is(c, 1, "version") || arg_is(c, 1, "digest") ||
               arg_is(c, 1, "shard")) {
        reply_sub_arity(c, "rowan");
    } else {
        reply_unknown_sub(c, "ROWAN");
    }
}
