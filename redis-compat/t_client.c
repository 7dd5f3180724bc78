/* t_client.c -- what happens around every command of a connection:
 * CLIENT REPLY ON|OFF|SKIP, CLIENT PAUSE / UNPAUSE, and the hooks that feed
 * client-side caching (tracking.c) and MONITOR (monitor.c).
 *
 * networking.c calls client_command_begin just before a command runs,
 * client_command_end just after, client_reply_dropped once the call is
 * over (its reply is then cut off), and client_pause_holds before running
 * a parsed command at all.
 *
 * REPLY: OFF drops the reply of every command from now on, SKIP the reply
 * of the next command; ON replies +OK and sends replies again (Redis's
 * CLIENT_REPLY_OFF / SKIP / SKIP_NEXT). Messages (pub/sub, invalidations)
 * are not replies and still arrive, as in Redis.
 *
 * PAUSE: while a pause is on, a command it covers (ALL: every command;
 * WRITE: writes, PUBLISH, EXEC of a transaction with either) is not run:
 * it stays in the query buffer and the connection stops there, as Redis
 * postpones it. CLIENT PAUSE extends the pause (the later end and the
 * stricter mode win). A paused connection goes on at once when CLIENT
 * UNPAUSE runs, or when its worker's cron sees the pause over (within
 * 1/hz, as Redis checks it in its cron too). Unlike Redis, expiry is not
 * paused (active expiry goes on under a WRITE pause). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "t_client.h"
#include "commands.h"
#include "monitor.h"
#include "multi.h"
#include "pubsub.h"
#include "server.h"
#include "tracking.h"
#include "util.h"
#include "worker.h"
#include "edge_state.h"

/* ---------------- CLIENT REPLY ---------------- */

void client_reply(client *c) {
    if (arg_is(c, 2, "on")) {
        c->flags &= ~(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP_NEXT);
        resp_add_ok(&c->out);
    } else if (arg_is(c, 2, "off")) {
        c->flags |= CLIENT_REPLY_OFF;
    } else if (arg_is(c, 2, "skip")) {
        if (!(c->flags & CLIENT_REPLY_OFF)) c->flags |= CLIENT_REPLY_SKIP_NEXT;
    } else {
        resp_add_error(&c->out, ERR_SYNTAX);
    }
}

/* ---------------- CLIENT PAUSE ---------------- */

enum { PAUSE_WRITE = 1, PAUSE_ALL = 2 };
/* This file's state, one per server (server.h). */
struct pause_state {
    _Atomic long long pause_end_ms;   /* 0 = no pause */
    _Atomic int pause_mode;
    pthread_mutex_t paused_lock;
    client **paused;
    int npaused;
    int cappaused;
};

void pause_state_new(void) {
    struct pause_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->paused_lock, NULL);
    server.edge_state->pause = st;
}

void pause_state_free(void) {
    struct pause_state *st = server.edge_state->pause;
    free(st->paused);
    pthread_mutex_destroy(&st->paused_lock);
    free(st);
}

#define pause_end_ms (server.edge_state->pause->pause_end_ms)   /* 0 = no pause */
#define pause_mode (server.edge_state->pause->pause_mode)

/* Paused connections (owner threads add and remove themselves), so that
 * UNPAUSE can wake every one of them at once, on whatever worker. */
#define paused_lock (server.edge_state->pause->paused_lock)
#define paused (server.edge_state->pause->paused)
#define npaused (server.edge_state->pause->npaused)
#define cappaused (server.edge_state->pause->cappaused)

static void paused_set(client *c, int on) {
    if (!!(c->flags & CLIENT_PAUSED) == on) return;
    pthread_mutex_lock(&paused_lock);
    if (on) {
        if (npaused == cappaused) {
            cappaused = cappaused ? cappaused * 2 : 16;
            paused = realloc(paused, sizeof(client *) * (size_t)cappaused);
        }
        paused[npaused++] = c;
        c->flags |= CLIENT_PAUSED;
    } else {
        for (int i = 0; i < npaused; i++) {
            if (paused[i] == c) {
                paused[i] = paused[--npaused];
                break;
            }
        }
        c->flags &= ~CLIENT_PAUSED;
    }
    pthread_mutex_unlock(&paused_lock);
}

static int pause_on(void) {
    long long end = atomic_load(&pause_end_ms);
    return end && mstime() < end;
}

static int writes_or_publishes(const struct rcommand *cmd) {
    return (cmd->flags & CMD_WRITE) || !strcmp(cmd->name, "publish");
}

static int queued_write(void *arg, const struct rcommand *cmd, int argc, const char *const *argv,
                        const size_t *argvlen) {
    (void)arg; (void)argc; (void)argv; (void)argvlen;
    return writes_or_publishes(cmd);
}

int client_pause_holds(client *c) {
    if (!pause_on()) {
        paused_set(c, 0);
        return 0;
    }
    int hold = 1;
    if (atomic_load(&pause_mode) != PAUSE_ALL) {
        const struct rcommand *cmd = command_lookup(c->argv[0], c->argvlen[0]);
        hold = cmd && (writes_or_publishes(cmd) ||
                       (cmd->proc == execCommand && multi_foreach_queued(c, queued_write, NULL)));
    }
    paused_set(c, hold);
    return hold;
}

void client_pause(client *c) {
    long long ms;
    int mode = PAUSE_ALL;
    if (!string2ll(c->argv[2], c->argvlen[2], &ms)) {
        resp_add_error(&c->out, "ERR timeout is not an integer or out of range");
        return;
    }
    if (ms < 0) {
        resp_add_error(&c->out, "ERR timeout is negative");
        return;
    }
    if (c->argc > 4) {   /* Redis's text for a CLIENT form it does not know */
        resp_add_errorf(&c->out, "ERR unknown subcommand or wrong number of arguments for '%.*s'. "
                        "Try CLIENT HELP.", (int)c->argvlen[1], c->argv[1]);
        return;
    }
    if (c->argc == 4) {
        if (arg_is(c, 3, "write")) mode = PAUSE_WRITE;
        else if (!arg_is(c, 3, "all")) {
            resp_add_error(&c->out, "ERR CLIENT PAUSE mode must be WRITE or ALL");
            return;
        }
    }
    long long end = mstime() + ms;
    if (!pause_on()) {
        atomic_store(&pause_mode, mode);
        atomic_store(&pause_end_ms, end);
    } else {
        if (mode > atomic_load(&pause_mode)) atomic_store(&pause_mode, mode);
        if (end > atomic_load(&pause_end_ms)) atomic_store(&pause_end_ms, end);
    }
    resp_add_ok(&c->out);
}

void client_unpause(client *c) {
    atomic_store(&pause_end_ms, 0);
    atomic_store(&pause_mode, 0);
    resp_add_ok(&c->out);
    /* Every paused connection goes on now: its read event runs what it
     * left (from its own worker; the list lock keeps it from being freed
     * meanwhile, as client_hooks_freed takes it first). */
    pthread_mutex_lock(&paused_lock);
    for (int i = 0; i < npaused; i++) session_wake_input(paused[i]);
    pthread_mutex_unlock(&paused_lock);
}

int client_pause_over(const client *c) {
    return (c->flags & CLIENT_PAUSED) && !pause_on();
}

void client_pause_resume(client *c) {
    paused_set(c, 0);
    session_wake_input(c);   /* its transport runs what was left */
}

/* ---------------- around each command ---------------- */

void client_command_begin(client *c) {
    tracking_command_begin(c);
}

void client_command_end(client *c) {
    tracking_command_end(c);
    monitor_feed(c);
}

int client_reply_dropped(client *c) {
    int drop = (c->flags & (CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP)) != 0;
    c->flags &= ~CLIENT_REPLY_SKIP;
    if (c->flags & CLIENT_REPLY_SKIP_NEXT) {
        c->flags |= CLIENT_REPLY_SKIP;
        c->flags &= ~CLIENT_REPLY_SKIP_NEXT;
    }
    return drop;
}

void client_hooks_freed(client *c) {
    paused_set(c, 0);
    tracking_client_freed(c);
    monitor_client_freed(c);
}

void client_hooks_release(client *c) { tracking_client_release(c); }

void client_hooks_reset(client *c) {
    tracking_reset(c);
    monitor_client_freed(c);
    c->flags &= ~(CLIENT_REPLY_OFF | CLIENT_REPLY_SKIP | CLIENT_REPLY_SKIP_NEXT);
}
