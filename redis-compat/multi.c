/* multi.c -- transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
 *
 * Queueing. Between MULTI and EXEC the dispatcher (client_call) hands every
 * command that passed its checks to multi_intercept, which copies argv
 * (argv points into the query buffer, which moves on) and replies +QUEUED.
 * A large argument the connection received into a buffer of its own
 * (c->x.own, networking.c) is not copied: the queue takes a reference to
 * it and offers it to the store when EXEC runs the command, so a 100 MB
 * value in a transaction is held once (bigval.c, "DRAM").
 * A command rejected at queue time (unknown, wrong arity, NOAUTH, pub/sub
 * context, or Redis's no-multi SAVE, SHUTDOWN, SYNC, PSYNC) flags the transaction, and EXEC
 * then answers EXECABORT, as Redis does. MULTI, EXEC, DISCARD, WATCH, QUIT
 * and RESET are never queued.
 *
 * Keyspace-wide commands. Commands without key positions that walk the
 * keyspace (FLUSHALL, FLUSHDB, KEYS, SCAN, DBSIZE, RANDOMKEY, SWAPDB,
 * INFO...) lock shards themselves, skipping shards the thread already holds
 * (db.c). A transaction holding any of them makes EXEC lock every shard, in
 * ascending order, so they run inside its critical section and its group
 * entry. The transaction's own writes apply when the group is logged;
 * DBSIZE, KEYS, SCAN and RANDOMKEY read through the open batch to see them
 * (db.c), as in Redis.
 * Key-less commands that never touch the keyspace (PING, ECHO, SELECT,
 * PUBLISH, CLIENT, CONFIG...) need no locks.
 *
 * EXEC. One critical section: the shard locks of every key of every queued
 * command and of every watched key, taken in ascending shard order (the
 * dispatcher's own shard computation, command_key_shards), then the WATCH
 * check, then the queued procs inside ONE db batch, so the whole transaction
 * is one group entry in the log: after a crash all of it or none of it. The
 * reply (an array of the per-command replies, runtime errors included) is
 * gated like any reply on the union of what the commands depended on. If
 * the batch cannot get log space (DB_OOM at db_batch_end) nothing is
 * applied and EXEC answers that single error instead of the array
 * (documented difference: Redis would refuse each write separately).
 *
 * Nested batches. A queued command that opens a batch of its own (MSET,
 * RENAME, DEL k1 k2...) must not reset the transaction's batch. When db.h
 * defines DB_BATCH_NESTS, batches nest and every transaction is one group.
 * Until then, a transaction holding such a command (several keys, or MSET,
 * MSETNX, MOVE, COPY, SORT) runs each queued command as its own batch: still
 * isolated (every lock is held throughout) and each command atomic, but not
 * one group for the whole transaction.
 *
 * WATCH by versions. WATCH records, per (db, key), what db_peek saw: whether
 * the key existed and its entry's version (db_val.ver), or for a missing key
 * the version of its shard. EXEC looks again under the locks; any difference
 * (a write by anyone, a deletion, expiry, FLUSHALL, SWAPDB) makes EXEC
 * answer a null array. A missing key is judged by its whole shard's version,
 * so a write to another key of the same shard also aborts the transaction:
 * a spurious abort is allowed by optimistic locking, a missed one is not. */
#include <stdlib.h>
#include <string.h>
#include "multi.h"
#include "cmdclock.h"
#include "monitor.h"     /* MONITOR: the commands EXEC runs */
#include "tracking.h"    /* client-side caching: the reads EXEC runs */
#include "acl.h"
#include "t_cluster.h"
#include "clean.h"
#include "commands.h"
#include "server.h"
#include "shard.h"
#include "util.h"
#include "worker.h"
#include "bigval.h"

typedef struct queued_cmd {
    struct rcommand *cmd;
    int argc;
    const char **argv;      /* into mem */
    size_t *argvlen;        /* into mem */
    const char **own;       /* into mem: the argument buffers it holds */
    int nown;
    char *mem;
} queued_cmd;

typedef struct watched_key {
    int db;
    char *key;
    size_t klen;
    int existed;
    uint64_t ver;           /* the value's version, or the shard's when missing */
} watched_key;

typedef struct multi_state {
    int active;             /* between MULTI and EXEC/DISCARD */
    int dirty;              /* a command was refused: EXEC aborts */
    queued_cmd *cmds;
    int ncmds, capcmds;
    watched_key *watched;
    int nwatched, capwatched;
} multi_state;

static multi_state *state_of(client *c) {
    if (!c->mstate) c->mstate = calloc(1, sizeof(multi_state));
    return c->mstate;
}

int multi_active(const client *c) { return c->mstate && c->mstate->active; }

int multi_queued(const client *c) { return multi_active(c) ? c->mstate->ncmds : -1; }

void multi_flag_error(client *c) {
    if (multi_active(c)) c->mstate->dirty = 1;
}

static void discard_queue(multi_state *m) {
    for (int i = 0; i < m->ncmds; i++) {
        for (int j = 0; j < m->cmds[i].nown; j++) bigval_buf_release(m->cmds[i].own[j]);
        free(m->cmds[i].mem);
    }
    free(m->cmds);
    m->cmds = NULL;
    m->ncmds = m->capcmds = 0;
    m->active = m->dirty = 0;
}

static void unwatch_all(multi_state *m) {
    for (int i = 0; i < m->nwatched; i++) free(m->watched[i].key);
    free(m->watched);
    m->watched = NULL;
    m->nwatched = m->capwatched = 0;
}

void multi_reset(client *c) {
    multi_state *m = c->mstate;
    if (!m) return;
    discard_queue(m);
    unwatch_all(m);
    free(m);
    c->mstate = NULL;
}

/* ---------------- queueing ---------------- */

/* Key-less commands that never take shard locks or touch the keyspace. */
static const char *const keyless_ok[] = {
    "ping", "echo", "time", "select", "lastsave", "command", "client", "config",
    "wait", "waitaof", "readonly", "readwrite", "unwatch",
    "publish", "pubsub", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", NULL,
};

/* Does running cmd inside EXEC need every shard locked (it walks the
 * keyspace)? */
static int needs_all_shards(const struct rcommand *cmd) {
    if (cmd->firstkey > 0) return 0;
    for (int i = 0; keyless_ok[i]; i++)
        if (strcmp(cmd->name, keyless_ok[i]) == 0) return 0;
    return 1;
}

/* Is argument i one of the connection's argument buffers? */
static int arg_own(const client *c, int i) {
    for (int j = 0; j < c->x.nown; j++)
        if (c->x.own[j] == c->argv[i]) return 1;
    return 0;
}

static void queue_command(multi_state *m, client *c) {
    size_t bytes = 0, nown = 0;
    for (int i = 0; i < c->argc; i++) {
        if (arg_own(c, i)) nown++;
        else bytes += c->argvlen[i];
    }
    size_t ptrs = sizeof(char *) * (size_t)c->argc, lens = sizeof(size_t) * (size_t)c->argc;
    char *mem = malloc(ptrs + lens + sizeof(char *) * nown + bytes + 1);
    queued_cmd q = {(struct rcommand *)c->cmd, c->argc, (const char **)(void *)mem,
                    (size_t *)(void *)(mem + ptrs), (const char **)(void *)(mem + ptrs + lens),
                    0, mem};
    char *p = mem + ptrs + lens + sizeof(char *) * nown;
    for (int i = 0; i < c->argc; i++) {
        q.argvlen[i] = c->argvlen[i];
        if (arg_own(c, i)) {
            bigval_buf_retain(c->argv[i]);
            q.argv[i] = q.own[q.nown++] = c->argv[i];
            continue;
        }
        memcpy(p, c->argv[i], c->argvlen[i]);
        q.argv[i] = p;
        p += c->argvlen[i];
    }
    if (m->ncmds == m->capcmds) {
        m->capcmds = m->capcmds ? m->capcmds * 2 : 8;
        m->cmds = realloc(m->cmds, sizeof(queued_cmd) * (size_t)m->capcmds);
    }
    m->cmds[m->ncmds++] = q;
}

/* Redis's CMD_NO_MULTI commands: refused at queue time (the transaction
 * is flagged, EXEC answers EXECABORT), never queued: EXEC must not shut the
 * server down or block it in SAVE. */
static int no_multi(const struct rcommand *cmd) {
    static const char *const names[] = {"save", "shutdown", "sync", "psync", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(cmd->name, names[i]) == 0) return 1;
    return 0;
}

int multi_intercept(client *c) {
    if (!multi_active(c)) return 0;
    cmd_proc *p = c->cmd->proc;
    if (p == execCommand || p == discardCommand || p == multiCommand || p == watchCommand ||
        p == quitCommand || p == resetCommand)
        return 0;
    multi_state *m = c->mstate;
    if (no_multi(c->cmd)) {
        resp_add_error(&c->out, "ERR Command not allowed inside a transaction");
        atomic_fetch_add(&command_stats(c->cmd)->rejected_calls, 1);
        m->dirty = 1;
        return 1;
    }
    queue_command(m, c);
    resp_add_simple(&c->out, "QUEUED");
    return 1;
}

int multi_foreach_queued(const client *c, multi_queued_fn *fn, void *arg) {
    if (!multi_active(c)) return 0;
    const multi_state *m = c->mstate;
    for (int i = 0; i < m->ncmds; i++) {
        const queued_cmd *q = &m->cmds[i];
        int r = fn(arg, q->cmd, q->argc, q->argv, q->argvlen);
        if (r) return r;
    }
    return 0;
}

/* ---------------- WATCH ---------------- */

/* What the key looks like now (caller holds its shard lock). */
static void observe(client *c, int db, const char *key, size_t klen, int *existed, uint64_t *ver) {
    db_val v;
    c->x.hint_key = NULL;
    *existed = db_peek(&c->x, db, key, klen, &v);
    *ver = *existed ? v.ver : shard_of_key(key, klen)->next_ver - 1;
}

void watchCommand(client *c) {
    if (multi_active(c)) {
        resp_add_error(&c->out, "ERR WATCH inside MULTI is not allowed");
        return;
    }
    multi_state *m = state_of(c);
    for (int j = 1; j < c->argc; j++) {
        int dup = 0;
        for (int i = 0; i < m->nwatched && !dup; i++) {
            watched_key *w = &m->watched[i];
            dup = w->db == c->db && w->klen == c->argvlen[j] &&
                  memcmp(w->key, c->argv[j], w->klen) == 0;
        }
        if (dup) continue;
        if (m->nwatched == m->capwatched) {
            m->capwatched = m->capwatched ? m->capwatched * 2 : 4;
            m->watched = realloc(m->watched, sizeof(watched_key) * (size_t)m->capwatched);
        }
        watched_key *w = &m->watched[m->nwatched++];
        w->db = c->db;
        w->klen = c->argvlen[j];
        w->key = malloc(w->klen ? w->klen : 1);
        memcpy(w->key, c->argv[j], w->klen);
        observe(c, w->db, w->key, w->klen, &w->existed, &w->ver);
    }
    resp_add_ok(&c->out);
}

void unwatchCommand(client *c) {
    if (c->mstate) unwatch_all(c->mstate);
    resp_add_ok(&c->out);
}

/* 1 if no watched key changed since WATCH (locks held). */
static int watches_intact(client *c, const multi_state *m) {
    for (int i = 0; i < m->nwatched; i++) {
        const watched_key *w = &m->watched[i];
        int existed;
        uint64_t ver;
        observe(c, w->db, w->key, w->klen, &existed, &ver);
        if (existed != w->existed || ver != w->ver) return 0;
    }
    return 1;
}

/* ---------------- MULTI, DISCARD, EXEC ---------------- */

void multiCommand(client *c) {
    if (multi_active(c)) {
        resp_add_error(&c->out, "ERR MULTI calls can not be nested");
        return;
    }
    state_of(c)->active = 1;
    resp_add_ok(&c->out);
}

void discardCommand(client *c) {
    if (!multi_active(c)) {
        resp_add_error(&c->out, "ERR DISCARD without MULTI");
        return;
    }
    multi_reset(c);
    resp_add_ok(&c->out);
}

/* Does this queued command open a db batch of its own? (See the header
 * comment: only matters while db batches do not nest.) */
static int opens_own_batch(const queued_cmd *q) {
#ifdef DB_BATCH_NESTS
    (void)q;
    return 0;
#else
    static const char *const names[] = {"mset", "msetnx", "move", "copy", "sort", NULL};
    int pos[2];
    if (command_keys(q->cmd, q->argc, pos, 2) > 1) return 1;
    for (int i = 0; names[i]; i++)
        if (strcmp(q->cmd->name, names[i]) == 0) return 1;
    return 0;
#endif
}

void execCommand(client *c) {
    multi_state *m = c->mstate;
    if (!multi_active(c)) {
        resp_add_error(&c->out, "ERR EXEC without MULTI");
        return;
    }
    if (m->dirty) {
        resp_add_error(&c->out, "EXECABORT Transaction discarded because of previous errors.");
        multi_reset(c);
        return;
    }

    /* Every shard the transaction touches, locked in ascending order. */
    int total = m->nwatched, denyoom = 0, split = 0, all = 0;
    for (int i = 0; i < m->ncmds; i++) {
        total += m->cmds[i].argc;
        if (m->cmds[i].cmd->flags & CMD_DENYOOM) denyoom = 1;
        if (opens_own_batch(&m->cmds[i])) split = 1;
        if (needs_all_shards(m->cmds[i].cmd)) all = 1;
    }
    if (all && total < server.nshards) total = server.nshards;
    if (denyoom && db_space_low()) clean_wait_for_space(1000);
    uint16_t *ids = malloc(sizeof(uint16_t) * (size_t)(total + 1));
    int nids = 0;
    for (int i = 0; i < m->ncmds; i++) {
        queued_cmd *q = &m->cmds[i];
        nids += command_key_shards(q->cmd, q->argc, q->argv, q->argvlen, ids + nids, NULL, NULL);
    }
    for (int i = 0; i < m->nwatched; i++)
        ids[nids++] = shard_of_key(m->watched[i].key, m->watched[i].klen)->id;
    if (all)
        for (nids = 0; nids < server.nshards; nids++) ids[nids] = (uint16_t)nids;
    nids = shard_ids_normalize(ids, nids);
    for (int i = 0; i < nids; i++) shard_lock(&server.shards[ids[i]]);

    if (cluster_recheck(c)) {
        /* cluster: the slot stopped being ours (or servable) since MULTI */
    } else if (!watches_intact(c, m)) {
        resp_add_null_array(&c->out);
    } else {
        const struct rcommand *exec_cmd = c->cmd;
        int argc = c->argc;
        const char **argv = c->argv;
        size_t *argvlen = c->argvlen;
        const char *const *own = c->x.own;
        int nown = c->x.nown;
        size_t start = c->out.b.len;
        resp_add_array(&c->out, m->ncmds);
        const char *unnested = NULL;
        if (!split) db_batch_begin(&c->x);
        for (int i = 0; i < m->ncmds; i++) {
            queued_cmd *q = &m->cmds[i];
            size_t cstart = c->out.b.len;
            c->cmd = q->cmd;
            c->argc = q->argc;
            c->argv = q->argv;
            c->argvlen = q->argvlen;
            c->x.own = q->own;
            c->x.nown = q->nown;
            c->x.hint_key = NULL;
            if (split) db_batch_begin(&c->x);
            int64_t t0 = cmdclock_us();
            if (acl_check_queued(c) == 0) q->cmd->proc(c); /* acl: rules may have changed */
            int64_t dt = cmdclock_us() - t0;
            if (split && db_batch_end(&c->x) == DB_OOM) {
                c->out.b.len = cstart;
                resp_add_error(&c->out, db_error_text(&c->x));
            }
            if (!split && !c->x.batching) {
                /* The command ended a batch of its own, which reset ours:
                 * the writes queued before it are lost. opens_own_batch
                 * must list it (or db batches must nest). Say so loudly
                 * rather than acknowledge them. */
                if (!unnested) unnested = q->cmd->name;
                serverLog(LL_WARNING, "BUG: '%s' opened its own db batch inside EXEC; the "
                          "transaction was partially applied", q->cmd->name);
                db_batch_begin(&c->x);
            }
            int failed = c->out.b.len > cstart && c->out.b.buf[cstart] == '-';
            worker_count_command(c->w, command_row(q->cmd, q->argc, q->argv, q->argvlen), dt, failed);
            monitor_feed(c);   /* MONITOR shows each command EXEC runs, as Redis */
            tracking_remember_keys(c);   /* client-side caching: reads in EXEC */
        }
        if (!split && db_batch_end(&c->x) == DB_OOM) {
            /* Nothing of the transaction was applied: one error instead of
             * the replies of commands that did not happen. */
            c->out.b.len = start;
            resp_add_error(&c->out, db_error_text(&c->x));
        } else if (unnested) {
            c->out.b.len = start;
            resp_add_errorf(&c->out, "ERR transaction partially applied: '%s' cannot run "
                            "inside MULTI yet (Rowan bug, see the server log)", unnested);
        }
        c->cmd = exec_cmd;
        c->argc = argc;
        c->argv = argv;
        c->argvlen = argvlen;
        c->x.own = own;
        c->x.nown = nown;
        c->x.hint_key = NULL;
    }
    for (int i = nids - 1; i >= 0; i--) shard_unlock(&server.shards[ids[i]]);
    free(ids);
    multi_reset(c);
}
