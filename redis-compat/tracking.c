/* tracking.c -- client-side caching: CLIENT TRACKING, CACHING, GETREDIR,
 * TRACKINGINFO and the invalidation messages, as Redis's tracking.c.
 *
 * Default mode: after a read-only command of a tracking client, the keys it
 * named go into one global table (key -> ids of the clients that may cache
 * it). When a key changes, its entry is taken out of the table and every
 * client in it that still tracks gets one invalidation. OPTIN tracks a
 * command's keys only after CLIENT CACHING yes, OPTOUT unless after CLIENT
 * CACHING no (either applies to the next command only). BCAST keeps no
 * table: every change of a key under one of the client's prefixes (or any
 * key, without prefixes) is sent to it; Redis batches these per event loop
 * round, Rowan sends one message per change. NOLOOP: no message about a
 * change the client made itself.
 *
 * A key change is what raises a keyspace notification (notify.c calls
 * tracking_invalidate_key whatever notify-keyspace-events says), so every
 * command family, expiry and FLUSH* invalidate through one path.
 *
 * Messages go to the client itself (RESP3: a push "invalidate" [key]) or,
 * with REDIRECT id, to that client: RESP3 the same push, RESP2 (subscribed
 * to __redis__:invalidate, as Redis requires) a pub/sub message on that
 * channel. They travel through the target's pub/sub inbox
 * (pubsub_push_invalidate), written by its own worker after the current
 * command's reply, so a client's own invalidation follows the reply of the
 * command that caused it.
 *
 * Threads: one mutex (trk_lock) guards the table, the list of tracking
 * clients and every client's tracking state (c->trk, allocated under it).
 * Lock order: shard locks -> trk_lock -> ps_lock, and trk_lock -> the
 * client registry lock (REDIRECT looks the target up). A freed client first
 * leaves the list and marks itself gone (so a REDIRECT racing with its end
 * cannot pick it), and redirections to it become broken, as Redis's.
 *
 * Bounded: the table holds at most TRACKING_MAX_KEYS keys (Redis's
 * tracking-table-max-keys default); past that, an old key is invalidated to
 * make room. Reads inside EXEC are tracked as they run (multi.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "tracking.h"
#include "commands.h"
#include "dict.h"
#include "multi.h"
#include "pubsub.h"
#include "server.h"
#include "util.h"
#include "edge_state.h"

#define TRACKING_MAX_KEYS 1000000

enum {
    TRK_ON = 1 << 0, TRK_BCAST = 1 << 1, TRK_OPTIN = 1 << 2, TRK_OPTOUT = 1 << 3,
    TRK_NOLOOP = 1 << 4, TRK_CACHING = 1 << 5, TRK_BROKEN = 1 << 6, TRK_GONE = 1 << 7,
};

typedef struct tracking_client {
    int flags;
    uint64_t redirect;      /* client id, 0 = none */
    client *redir;          /* the redirect target while it lives */
    char **prefixes;
    size_t *plens;
    int nprefix;
} tracking_client;

/* This file's state, one per server (server.h). */
struct tracking_state {
    pthread_mutex_t trk_lock;
    dict *table;   /* key -> uint64 ids */
    client **tracking;   /* clients with tracking on */
    int ntracking;
    int captracking;
    _Atomic int active;   /* ntracking, read without the lock */
    long long table_items;   /* client ids in the table (INFO tracking_total_items) */
};

void tracking_state_new(void) {
    struct tracking_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->trk_lock, NULL);
    server.edge_state->trk = st;
}

void tracking_state_free(void) {
    struct tracking_state *st = server.edge_state->trk;
    if (st->table) dict_free(st->table);
    free(st->tracking);
    pthread_mutex_destroy(&st->trk_lock);
    free(st);
}

#define trk_lock (server.edge_state->trk->trk_lock)
#define table (server.edge_state->trk->table)   /* key -> uint64 ids */
#define tracking (server.edge_state->trk->tracking)   /* clients with tracking on */
#define ntracking (server.edge_state->trk->ntracking)
#define captracking (server.edge_state->trk->captracking)
#define active (server.edge_state->trk->active)   /* ntracking, read without the lock */
#define table_items (server.edge_state->trk->table_items)   /* client ids in the table (INFO tracking_total_items) */
static __thread client *current;    /* the client whose command runs (NOLOOP) */

/* ---------------- state (trk_lock held) ---------------- */

static tracking_client *trk_of(client *c) {
    if (!c->trk) c->trk = calloc(1, sizeof(tracking_client));
    return c->trk;
}

static void prefixes_free(tracking_client *t) {
    for (int i = 0; i < t->nprefix; i++) free(t->prefixes[i]);
    free(t->prefixes);
    free(t->plens);
    t->prefixes = NULL;
    t->plens = NULL;
    t->nprefix = 0;
}

static void list_remove(client *c) {
    for (int i = 0; i < ntracking; i++) {
        if (tracking[i] == c) {
            tracking[i] = tracking[--ntracking];
            atomic_store(&active, ntracking);
            return;
        }
    }
}

static void disable(client *c) {
    tracking_client *t = c->trk;
    if (!t || !(t->flags & TRK_ON)) return;
    list_remove(c);
    prefixes_free(t);
    t->flags = 0;
    t->redirect = 0;
    t->redir = NULL;
}

static client *find_tracking(uint64_t id) {
    for (int i = 0; i < ntracking; i++)
        if (tracking[i]->id == id) return tracking[i];
    return NULL;
}

/* One invalidation (key NULL: all keys) for tracking client c. */
static void send_invalidation(client *c, const char *key, size_t klen) {
    tracking_client *t = c->trk;
    client *target = c;
    if (t->redirect) {
        target = t->redir;
        if (!target) {
            /* The target is gone: as Redis, say so to a RESP3 client, on
             * every message it misses. */
            t->flags |= TRK_BROKEN;
            pubsub_push_redir_broken(c, t->redirect);
            return;
        }
    }
    pubsub_push_invalidate(target, key, klen);
}

static int has_prefix(const tracking_client *t, const char *key, size_t klen) {
    if (t->nprefix == 0) return 1;
    for (int i = 0; i < t->nprefix; i++)
        if (klen >= t->plens[i] && memcmp(key, t->prefixes[i], t->plens[i]) == 0) return 1;
    return 0;
}

/* Invalidate key: the clients in its table entry, then BCAST clients. */
static void invalidate_locked(const char *key, size_t klen) {
    if (table) {
        dict_entry *e = dict_find(table, key, klen);
        if (e) {
            size_t n = e->vlen / sizeof(uint64_t);
            uint64_t *ids = malloc(e->vlen ? e->vlen : 1);
            memcpy(ids, e->val, e->vlen);
            char *k = malloc(klen ? klen : 1);   /* the entry owns the key bytes */
            memcpy(k, key, klen);
            dict_del(table, key, klen);
            table_items -= (long long)n;
            for (size_t i = 0; i < n; i++) {
                client *c = find_tracking(ids[i]);
                if (!c || (c->trk->flags & TRK_BCAST)) continue;
                if ((c->trk->flags & TRK_NOLOOP) && c == current) continue;
                send_invalidation(c, k, klen);
            }
            free(k);
            free(ids);
        }
    }
    for (int i = 0; i < ntracking; i++) {
        client *c = tracking[i];
        tracking_client *t = c->trk;
        if (!(t->flags & TRK_BCAST) || !has_prefix(t, key, klen)) continue;
        if ((t->flags & TRK_NOLOOP) && c == current) continue;
        send_invalidation(c, key, klen);
    }
}

static void remember_key(uint64_t id, const char *key, size_t klen) {
    if (!table) table = dict_new();
    dict_entry *e = dict_find(table, key, klen);
    if (!e && dict_size(table) >= TRACKING_MAX_KEYS) {
        /* Full: evict an old key by invalidating it (Redis's
         * trackingLimitUsedSlots). */
        dict_entry *victim = dict_random(table, rnd64());
        if (victim) {
            char *vk = malloc(victim->klen ? victim->klen : 1);
            size_t vl = victim->klen;
            memcpy(vk, victim->key, vl);
            invalidate_locked(vk, vl);
            free(vk);
        }
        e = NULL;
    }
    size_t n = e ? e->vlen / sizeof(uint64_t) : 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t have;
        memcpy(&have, (char *)e->val + i * sizeof(uint64_t), sizeof(have));
        if (have == id) return;
    }
    uint64_t *ids = malloc((n + 1) * sizeof(uint64_t));
    if (n) memcpy(ids, e->val, n * sizeof(uint64_t));
    ids[n] = id;
    dict_set(table, key, klen, ids, (n + 1) * sizeof(uint64_t));
    table_items++;
    free(ids);
}

/* ---------------- hooks ---------------- */

void tracking_command_begin(client *c) { current = c; }


void tracking_remember_keys(client *c) {
    tracking_client *t = c->trk;
    if (!t || !(t->flags & TRK_ON) || !c->cmd) return;
    int caching = t->flags & TRK_CACHING;
    int track = !(t->flags & TRK_BCAST) && (c->cmd->flags & CMD_READONLY) && c->cmd->firstkey > 0;
    if (t->flags & TRK_OPTIN) track = track && caching;
    if (t->flags & TRK_OPTOUT) track = track && !caching;
    if (track) {
        int posstack[16];
        int *pos = c->argc <= 16 ? posstack : malloc(sizeof(int) * (size_t)c->argc);
        int nk = command_keys(c->cmd, c->argc, pos, c->argc);
        pthread_mutex_lock(&trk_lock);
        for (int i = 0; i < nk; i++) remember_key(c->id, c->argv[pos[i]], c->argvlen[pos[i]]);
        pthread_mutex_unlock(&trk_lock);
        if (pos != posstack) free(pos);
    }
}

void tracking_command_end(client *c) {
    current = NULL;
    tracking_client *t = c->trk;
    if (!t || !(t->flags & TRK_ON) || !c->cmd) return;
    /* CACHING applies to the next command that is not a CLIENT one, or to
     * a whole transaction (as Redis's resetClient keeps the flag after any
     * CLIENT subcommand and inside MULTI). */
    if (!strcmp(c->cmd->name, "client") || multi_active(c)) return;
    tracking_remember_keys(c);
    if (t->flags & TRK_CACHING) {
        pthread_mutex_lock(&trk_lock);
        t->flags &= ~TRK_CACHING;
        pthread_mutex_unlock(&trk_lock);
    }
}

void tracking_invalidate_key(const char *key, size_t klen) {
    if (!atomic_load(&active)) return;
    pthread_mutex_lock(&trk_lock);
    invalidate_locked(key, klen);
    pthread_mutex_unlock(&trk_lock);
}

void tracking_invalidate_all(void) {
    if (!atomic_load(&active)) return;
    pthread_mutex_lock(&trk_lock);
    for (int i = 0; i < ntracking; i++) send_invalidation(tracking[i], NULL, 0);
    if (table) dict_free(table);
    table = NULL;
    table_items = 0;
    pthread_mutex_unlock(&trk_lock);
}

void tracking_client_freed(client *c) {
    pthread_mutex_lock(&trk_lock);
    disable(c);
    trk_of(c)->flags = TRK_GONE;
    for (int i = 0; i < ntracking; i++) {
        tracking_client *t = tracking[i]->trk;
        if (t->redir == c) t->redir = NULL;   /* broken when next used */
    }
    pthread_mutex_unlock(&trk_lock);
}

void tracking_client_release(client *c) {
    free(c->trk);
    c->trk = NULL;
}

void tracking_reset(client *c) {
    if (!c->trk) return;
    pthread_mutex_lock(&trk_lock);
    disable(c);
    pthread_mutex_unlock(&trk_lock);
}

char *tracking_list_flags(const client *c, char *p) {
    const tracking_client *t = c->trk;
    if (!t || !(t->flags & TRK_ON)) return p;
    *p++ = 't';
    if (t->flags & TRK_BROKEN) *p++ = 'R';
    if (t->flags & TRK_BCAST) *p++ = 'B';
    return p;
}

int tracking_count(void) { return atomic_load(&active); }

/* Distinct prefixes over BCAST clients, as Redis's global prefix table. */
static long long distinct_prefixes(void) {
    long long n = 0;
    for (int i = 0; i < ntracking; i++) {
        const tracking_client *t = tracking[i]->trk;
        for (int p = 0; p < t->nprefix; p++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++) {
                const tracking_client *u = tracking[j]->trk;
                for (int q = 0; q < u->nprefix && !seen; q++)
                    seen = u->plens[q] == t->plens[p] &&
                           !memcmp(u->prefixes[q], t->prefixes[p], t->plens[p]);
            }
            n += !seen;
        }
        if ((t->flags & TRK_BCAST) && t->nprefix == 0) {
            /* BCAST without prefixes is Redis's "" prefix */
            int seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = (tracking[j]->trk->flags & TRK_BCAST) && tracking[j]->trk->nprefix == 0;
            n += !seen;
        }
    }
    return n;
}

void tracking_stats(long long *keys, long long *items, long long *prefixes) {
    pthread_mutex_lock(&trk_lock);
    *keys = table ? (long long)dict_size(table) : 0;
    *items = table_items;
    *prefixes = distinct_prefixes();
    pthread_mutex_unlock(&trk_lock);
}

long long tracking_list_redir(const client *c) {
    const tracking_client *t = c->trk;
    return t && (t->flags & TRK_ON) ? (long long)t->redirect : -1;
}

/* ---------------- commands ---------------- */

struct find_ctx { uint64_t id; client *found; };

/* Under the registry lock, so cl cannot be freed meanwhile; a client that
 * already left tracking on its way out (TRK_GONE, set under trk_lock,
 * which our caller holds) does not count. */
static void find_cb(client *cl, void *arg) {
    struct find_ctx *f = arg;
    if (cl->id == f->id && !(cl->trk && (cl->trk->flags & TRK_GONE))) f->found = cl;
}

/* A live client by id (trk_lock held: one found stays alive until it is
 * released, since its way out passes tracking_client_freed). */
static client *lookup_client(uint64_t id) {
    struct find_ctx f = {id, NULL};
    client_foreach(find_cb, &f);
    return f.found;
}

static int prefixes_overlap(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    return memcmp(a, b, n) == 0;
}

/* Redis's checkPrefixCollisionsOrReply: no two prefixes of one client may
 * be a prefix of the other. */
static int check_prefixes(client *c, const tracking_client *t, int n, const int *pidx) {
    for (int i = 0; i < n; i++) {
        const char *p = c->argv[pidx[i]];
        size_t pl = c->argvlen[pidx[i]];
        for (int j = 0; j < t->nprefix; j++) {
            if (prefixes_overlap(p, pl, t->prefixes[j], t->plens[j])) {
                resp_add_errorf(&c->out, "ERR Prefix '%.*s' overlaps with an existing prefix '%.*s'. "
                                "Prefixes for a single client must not overlap.",
                                (int)pl, p, (int)t->plens[j], t->prefixes[j]);
                return -1;
            }
        }
        for (int j = i + 1; j < n; j++) {
            const char *q = c->argv[pidx[j]];
            size_t ql = c->argvlen[pidx[j]];
            if (prefixes_overlap(p, pl, q, ql)) {
                resp_add_errorf(&c->out, "ERR Prefix '%.*s' overlaps with another provided prefix "
                                "'%.*s'. Prefixes for a single client must not overlap.",
                                (int)pl, p, (int)ql, q);
                return -1;
            }
        }
    }
    return 0;
}

/* Keep the prefixes in byte order, as Redis's radix tree lists them. */
static void prefix_add(tracking_client *t, const char *p, size_t pl) {
    t->prefixes = realloc(t->prefixes, sizeof(char *) * (size_t)(t->nprefix + 1));
    t->plens = realloc(t->plens, sizeof(size_t) * (size_t)(t->nprefix + 1));
    int at = t->nprefix;
    while (at > 0) {
        size_t ql = t->plens[at - 1], n = pl < ql ? pl : ql;
        int cmp = memcmp(t->prefixes[at - 1], p, n);
        if (cmp < 0 || (cmp == 0 && ql <= pl)) break;
        t->prefixes[at] = t->prefixes[at - 1];
        t->plens[at] = t->plens[at - 1];
        at--;
    }
    t->prefixes[at] = malloc(pl ? pl : 1);
    memcpy(t->prefixes[at], p, pl);
    t->plens[at] = pl;
    t->nprefix++;
}

/* CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p]... [OPTIN]
 * [OPTOUT] [NOLOOP], with Redis 7.0's checks in its order. */
void client_tracking(client *c) {
    int opts = 0, nprefix = 0, ok = 0;
    long long redir = 0;
    client *target = NULL;
    int *pidx = malloc(sizeof(int) * (size_t)c->argc);
    pthread_mutex_lock(&trk_lock);   /* target stays valid while it is held */
    for (int j = 3; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        if (arg_is(c, j, "redirect") && more) {
            j++;
            if (redir != 0) {
                resp_add_error(&c->out, "ERR A client can only redirect to a single other client");
                goto out;
            }
            if (arg_ll(c, j, &redir) != 0) goto out;
            /* As Redis: the target must exist now (it may go later). */
            target = (uint64_t)redir == c->id ? c : lookup_client((uint64_t)redir);
            if (!target) {
                resp_add_error(&c->out, "ERR The client ID you want redirect to does not exist");
                goto out;
            }
        } else if (arg_is(c, j, "bcast")) {
            opts |= TRK_BCAST;
        } else if (arg_is(c, j, "optin")) {
            opts |= TRK_OPTIN;
        } else if (arg_is(c, j, "optout")) {
            opts |= TRK_OPTOUT;
        } else if (arg_is(c, j, "noloop")) {
            opts |= TRK_NOLOOP;
        } else if (arg_is(c, j, "prefix") && more) {
            pidx[nprefix++] = ++j;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto out;
        }
    }
    tracking_client *t = trk_of(c);
    if (arg_is(c, 2, "on")) {
        if (!(opts & TRK_BCAST) && nprefix) {
            resp_add_error(&c->out, "ERR PREFIX option requires BCAST mode to be enabled");
        } else if ((t->flags & TRK_ON) && !!(t->flags & TRK_BCAST) != !!(opts & TRK_BCAST)) {
            resp_add_error(&c->out, "ERR You can't switch BCAST mode on/off before disabling "
                           "tracking for this client, and then re-enabling it with a different mode.");
        } else if ((opts & TRK_BCAST) && (opts & (TRK_OPTIN | TRK_OPTOUT))) {
            resp_add_error(&c->out, "ERR OPTIN and OPTOUT are not compatible with BCAST");
        } else if ((opts & TRK_OPTIN) && (opts & TRK_OPTOUT)) {
            resp_add_error(&c->out, "ERR You can't specify both OPTIN mode and OPTOUT mode");
        } else if (((opts & TRK_OPTIN) && (t->flags & TRK_OPTOUT)) ||
                   ((opts & TRK_OPTOUT) && (t->flags & TRK_OPTIN))) {
            resp_add_error(&c->out, "ERR You can't switch OPTIN/OPTOUT mode before disabling "
                           "tracking for this client, and then re-enabling it with a different mode.");
        } else if ((opts & TRK_BCAST) && check_prefixes(c, t, nprefix, pidx) != 0) {
            /* replied */
        } else {
            {
                if (!(t->flags & TRK_ON)) {
                    if (ntracking == captracking) {
                        captracking = captracking ? captracking * 2 : 16;
                        tracking = realloc(tracking, sizeof(client *) * (size_t)captracking);
                    }
                    tracking[ntracking++] = c;
                    atomic_store(&active, ntracking);
                }
                t->flags = TRK_ON | opts | (t->flags & TRK_CACHING);
                t->redirect = (uint64_t)redir;
                t->redir = target;
                for (int i = 0; i < nprefix; i++) prefix_add(t, c->argv[pidx[i]], c->argvlen[pidx[i]]);
                ok = 1;
            }
        }
    } else if (arg_is(c, 2, "off")) {
        disable(c);
        ok = 1;
    } else {
        resp_add_error(&c->out, ERR_SYNTAX);
    }
    if (ok) resp_add_ok(&c->out);
out:
    pthread_mutex_unlock(&trk_lock);
    free(pidx);
}

void client_caching(client *c) {
    tracking_client *t = c->trk;
    int flags = t ? t->flags : 0;
    if (!(flags & TRK_ON)) {
        resp_add_error(&c->out, "ERR CLIENT CACHING can be called only when the client is in "
                                "tracking mode with OPTIN or OPTOUT mode enabled");
        return;
    }
    if (arg_is(c, 2, "yes")) {
        if (!(flags & TRK_OPTIN)) {
            resp_add_error(&c->out, "ERR CLIENT CACHING YES is only valid when tracking is "
                                    "enabled in OPTIN mode.");
            return;
        }
    } else if (arg_is(c, 2, "no")) {
        if (!(flags & TRK_OPTOUT)) {
            resp_add_error(&c->out, "ERR CLIENT CACHING NO is only valid when tracking is "
                                    "enabled in OPTOUT mode.");
            return;
        }
    } else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    pthread_mutex_lock(&trk_lock);
    t->flags |= TRK_CACHING;
    pthread_mutex_unlock(&trk_lock);
    resp_add_ok(&c->out);
}

void client_getredir(client *c) {
    const tracking_client *t = c->trk;
    resp_add_int(&c->out, t && (t->flags & TRK_ON) ? (long long)t->redirect : -1);
}

void client_trackinginfo(client *c) {
    pthread_mutex_lock(&trk_lock);
    const tracking_client *t = c->trk;
    int flags = t ? t->flags : 0;
    const char *names[8];
    int n = 0;
    if (!(flags & TRK_ON)) {
        names[n++] = "off";
    } else {
        names[n++] = "on";
        if (flags & TRK_BCAST) names[n++] = "bcast";
        if (flags & TRK_OPTIN) {
            names[n++] = "optin";
            if (flags & TRK_CACHING) names[n++] = "caching-yes";
        }
        if (flags & TRK_OPTOUT) {
            names[n++] = "optout";
            if (flags & TRK_CACHING) names[n++] = "caching-no";
        }
        if (flags & TRK_NOLOOP) names[n++] = "noloop";
        if (flags & TRK_BROKEN) names[n++] = "broken_redirect";
    }
    resp_add_map(&c->out, 3);
    resp_add_bulkstr(&c->out, "flags");
    resp_add_set(&c->out, n);
    for (int i = 0; i < n; i++) resp_add_bulkstr(&c->out, names[i]);
    resp_add_bulkstr(&c->out, "redirect");
    resp_add_int(&c->out, (flags & TRK_ON) ? (long long)t->redirect : -1);
    resp_add_bulkstr(&c->out, "prefixes");
    int np = (flags & TRK_ON) ? t->nprefix : 0;
    resp_add_array(&c->out, np);
    for (int i = 0; i < np; i++) resp_add_bulk(&c->out, t->prefixes[i], t->plens[i]);
    pthread_mutex_unlock(&trk_lock);
}
