/* rowan_async.c -- librowan's asynchronous API on libevent.
 *
 * The same engine as the blocking API (rowan_int.h), driven by libevent:
 * one read event per node socket, and one timer armed for the earliest
 * retransmission or timeout. A command's callback runs once, with its reply
 * (freed after the callback returns, as hiredis does) or with NULL and
 * ac->err / ac->errstr set for the duration of the call.
 *
 * The configuration is read at connect time with the blocking loop (a few
 * round trips, bounded by the timeout); later refreshes (stale term,
 * -MOVED, a dead node) run inside the event loop, and the commands that
 * wait for them are sent when they end.
 *
 * Sending. Commands issued from the callbacks of one turn leave together
 * when our handler ends (rw_flush: packed per node). Commands issued from
 * outside our handlers (the caller's own code before the loop runs, or
 * its other events) leave at the next turn of the loop, from a one-shot
 * flush event, as hiredis's writes do: so a burst issued in one go is
 * packed too, instead of leaving as one datagram per command.
 *
 * rowanAsyncFree may be called from a callback: the context is then freed
 * when the engine has returned to the event handler.
 *
 * Pub/sub, as in hiredis: the callback given with SUBSCRIBE, PSUBSCRIBE or
 * SSUBSCRIBE is registered for each of its channels (patterns) and called
 * with every confirmation and message of that channel, pushed or replied;
 * the unsubscribe confirmation is its last call. MONITOR's callback gets
 * its +OK, then every line. Other pushed output goes to the callback of
 * rowanAsyncSetPushCallback, if any. Messages are best effort
 * (rowan_push.c). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <event2/event.h>
#include "rowan_int.h"

/* A channel's, pattern's or shard channel's callback. */
typedef struct sub_cb {
    struct sub_cb *next;
    int kind;                  /* SUB_CHANNEL, SUB_PATTERN, SUB_SHARD */
    char *name;
    size_t len;
    rowanCallbackFn *fn;
    void *priv;
} sub_cb;

enum { SUB_CHANNEL, SUB_PATTERN, SUB_SHARD };

typedef struct async_state {
    rowanAsyncContext *ac;
    struct event_base *base;
    struct event *timer;
    uint64_t armed;            /* absolute ns the timer is set for; 0: not armed */
    int depth;                 /* inside an event handler of ours */
    int free_pending;
    sub_cb *subs;              /* pub/sub callbacks */
    rowanCallbackFn *mon_fn, *push_fn;
    void *mon_priv, *push_priv;
    struct event *flush;       /* one-shot: send what was issued outside our handlers */
    int flush_armed;
} async_state;

static async_state *state_of(rowanEngine *e) { return e->owner; }

static void free_now(rowanAsyncContext *ac);

static void arm_timer(async_state *s) {
    if (!s->timer) return;
    uint64_t now = rw_now(), wait = rw_next_timer(s->ac->eng, now);
    if (wait == UINT64_MAX) {
        if (s->armed) event_del(s->timer);
        s->armed = 0;
        return;
    }
    uint64_t at = now + wait;
    if (s->armed && s->armed <= at && s->armed > now) return;   /* fires early enough */
    struct timeval tv = {(time_t)(wait / 1000000000ull), (suseconds_t)(wait % 1000000000ull / 1000)};
    event_add(s->timer, &tv);
    s->armed = at;
}

/* The end of one of our handlers: re-arm, or free if asked from a callback. */
static void leave(async_state *s) {
    if (--s->depth > 0) return;
    if (s->free_pending) { free_now(s->ac); return; }
    rw_flush(s->ac->eng);     /* what this turn's callbacks sent, one sendmmsg per node */
    arm_timer(s);
}

static void on_read(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    rowanEngine *e = ((rowanAsyncContext *)arg)->eng;
    async_state *s = state_of(e);
    s->depth++;
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].ev && e->nodes[i].fd == fd) { rw_on_readable(e, i); break; }
    leave(s);
}

static void on_flush(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    async_state *s = state_of(((rowanAsyncContext *)arg)->eng);
    s->flush_armed = 0;
    s->depth++;
    leave(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    rowanEngine *e = ((rowanAsyncContext *)arg)->eng;
    async_state *s = state_of(e);
    s->depth++;
    s->armed = 0;
    rw_on_timer(e, rw_now());
    leave(s);
}

static void add_read_event(rowanEngine *e, int node) {
    async_state *s = state_of(e);
    rw_node *n = &e->nodes[node];
    if (!s->base || n->fd < 0 || n->ev) return;
    n->ev = event_new(s->base, n->fd, EV_READ | EV_PERSIST, on_read, s->ac);
    if (n->ev) event_add(n->ev, NULL);
}

/* ---------------- pub/sub callbacks ---------------- */

/* "subscribe", "pmessage", "sunsubscribe"...: which registry it names. */
static int sub_kind(const char *name) {
    if ((name[0] | 0x20) == 'p') return SUB_PATTERN;
    if (!strcasecmp(name, "ssubscribe") || !strcasecmp(name, "sunsubscribe") ||
        !strcasecmp(name, "smessage"))
        return SUB_SHARD;
    return SUB_CHANNEL;
}

static sub_cb **sub_find(async_state *s, int kind, const char *name, size_t len) {
    sub_cb **pp = &s->subs;
    while (*pp && !((*pp)->kind == kind && (*pp)->len == len && !memcmp((*pp)->name, name, len)))
        pp = &(*pp)->next;
    return pp;
}

static void sub_register(async_state *s, int kind, const char *name, size_t len,
                         rowanCallbackFn *fn, void *priv) {
    sub_cb **pp = sub_find(s, kind, name, len), *cb = *pp;
    if (!cb) {
        cb = calloc(1, sizeof *cb);
        char *copy = malloc(len + 1);
        if (!cb || !copy) { free(cb); free(copy); return; }
        memcpy(copy, name, len);
        copy[len] = 0;
        cb->kind = kind;
        cb->name = copy;
        cb->len = len;
        *pp = cb;
    }
    cb->fn = fn;
    cb->priv = priv;
}

static void sub_remove(async_state *s, int kind, const char *name, size_t len) {
    sub_cb **pp = sub_find(s, kind, name, len), *cb = *pp;
    if (!cb) return;
    *pp = cb->next;
    free(cb->name);
    free(cb);
}

static void call_user(async_state *s, rowanCallbackFn *fn, void *reply, void *priv) {
    s->depth++;
    fn(s->ac, reply, priv);
    s->depth--;
}

/* A confirmation or message to its channel's callback (an unsubscribe
 * confirmation is its last), a MONITOR line to MONITOR's. 0 if nobody
 * registered for it. */
static int sub_dispatch(async_state *s, redisReply *r) {
    if (r->type == REDIS_REPLY_STATUS && s->mon_fn) {
        call_user(s, s->mon_fn, r, s->mon_priv);
        return 1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return 0;
    const char *what = r->element[0]->str;
    const redisReply *name = r->element[1];
    size_t wl = strlen(what);
    int kind = sub_kind(what);
    int msg = !strcasecmp(what, "message") || !strcasecmp(what, "smessage") ||
              !strcasecmp(what, "pmessage");
    int last = !msg && wl >= 11 && !strcasecmp(what + wl - 11, "unsubscribe");
    if (!msg && (wl < 9 || strcasecmp(what + wl - 9, "subscribe"))) return 0;
    sub_cb *cb = *sub_find(s, kind, name->str, name->len);
    if (!cb) return 0;
    call_user(s, cb->fn, r, cb->priv);
    if (last) sub_remove(s, kind, name->str, name->len);   /* found again: the callback may have changed the list */
    return 1;
}

static void on_push(rowanEngine *e, int node, redisReply *r) {
    async_state *s = state_of(e);
    (void)node;
    if (!s->free_pending && !sub_dispatch(s, r) && s->push_fn)
        call_user(s, s->push_fn, r, s->push_priv);
    freeReplyObject(r);
}

/* Register the callbacks a (P|S)SUBSCRIBE or MONITOR is sent with. */
static void sub_sent(async_state *s, rw_req *q, int argc, const char **argv,
                     const size_t *argvlen, rowanCallbackFn *fn, void *priv) {
    q->push = rw_push_kind(argv[0], argvlen ? argvlen[0] : strlen(argv[0]));
    if (!fn) return;
    if (q->push == RW_PUSH_MONITOR) {
        s->mon_fn = fn;
        s->mon_priv = priv;
    } else if (q->push == RW_PUSH_SUB) {
        char cmd[16];   /* its name, NUL-terminated (rw_push_kind knows it is short) */
        size_t l = argvlen ? argvlen[0] : strlen(argv[0]);
        memcpy(cmd, argv[0], l);
        cmd[l] = 0;
        for (int i = 1; i < argc; i++)
            sub_register(s, sub_kind(cmd), argv[i], argvlen ? argvlen[i] : strlen(argv[i]), fn,
                         priv);
    }
}

static void done_async(rowanEngine *e, rw_req *q) {
    async_state *s = state_of(e);
    rowanAsyncContext *ac = s->ac;
    rowanCallbackFn *fn = (rowanCallbackFn *)q->fn;
    /* a (un)subscribe confirmation goes to its channel's callback */
    if (!q->err && q->reply && (q->push == RW_PUSH_SUB || q->push == RW_PUSH_UNSUB) &&
        !s->free_pending && sub_dispatch(s, q->reply)) {
        rw_req_free(q);
        return;
    }
    if (fn) {
        if (q->err) {
            ac->err = q->err;
            memcpy(ac->errstr, q->errstr, sizeof ac->errstr);
        }
        s->depth++;
        fn(ac, q->err ? NULL : q->reply, q->priv);
        s->depth--;
        ac->err = 0;
        ac->errstr[0] = 0;
    }
    rw_req_free(q);
}

rowanAsyncContext *rowanAsyncConnect(const char *host, int port) {
    rowanAsyncContext *ac = calloc(1, sizeof *ac);
    async_state *s = calloc(1, sizeof *s);
    if (!ac || !s) { free(ac); free(s); return NULL; }
    struct timeval tv = {5, 0};
    ac->eng = rw_engine_new(host, port, &tv);
    if (!ac->eng) { free(ac); free(s); return NULL; }
    s->ac = ac;
    ac->eng->owner = s;
    ac->eng->on_socket = add_read_event;
    ac->eng->on_push = on_push;
    rw_bootstrap(ac->eng, ac->errstr, sizeof ac->errstr, &ac->err);
    return ac;
}

int rowanAsyncSetTimeout(rowanAsyncContext *ac, const struct timeval tv) {
    uint64_t ns = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
    if (!ns) return ROWAN_ERR;
    ac->eng->timeout_ns = ns;
    return ROWAN_OK;
}

int rowanLibeventAttach(rowanAsyncContext *ac, struct event_base *base) {
    async_state *s = state_of(ac->eng);
    if (s->base) return ROWAN_ERR;
    s->base = base;
    s->timer = evtimer_new(base, on_timer, ac);
    s->flush = event_new(base, -1, 0, on_flush, ac);
    if (!s->timer || !s->flush) return ROWAN_ERR;
    for (int i = 0; i < ac->eng->nnodes; i++) add_read_event(ac->eng, i);
    arm_timer(s);
    return ROWAN_OK;
}

int rowanAsyncCommandArgv(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                          int argc, const char **argv, const size_t *argvlen) {
    async_state *s = state_of(ac->eng);
    if (s->free_pending) return ROWAN_ERR;
    ac->err = 0;
    ac->errstr[0] = 0;
    rw_req *q = rw_req_new(ac->eng, argc, argv, argvlen, &ac->err, ac->errstr, sizeof ac->errstr);
    if (!q) return ROWAN_ERR;
    q->done = done_async;
    q->fn = (void *)fn;
    q->priv = privdata;
    sub_sent(s, q, argc, argv, argvlen, fn, privdata);
    int outside = s->depth == 0 && s->flush;
    s->depth++;                        /* a callback run by the submit must not free us */
    rw_submit(ac->eng, q);
    if (outside && !s->free_pending) { /* send at the loop's next turn, with the others */
        s->depth--;
        if (!s->flush_armed) {
            event_active(s->flush, EV_TIMEOUT, 0);
            s->flush_armed = 1;
        }
        arm_timer(s);
        return ROWAN_OK;
    }
    leave(s);
    return ROWAN_OK;
}

int rowanvAsyncCommand(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                       const char *format, va_list ap) {
    redisReply *holder;
    int argc;
    const char **argv;
    size_t *argvlen;
    if (rw_format(format, ap, &holder, &argc, &argv, &argvlen) < 0) {
        ac->err = ROWAN_ERR_OTHER;
        strcpy(ac->errstr, "invalid format string");
        return ROWAN_ERR;
    }
    int rc = rowanAsyncCommandArgv(ac, fn, privdata, argc, argv, argvlen);
    free(argv);
    free(argvlen);
    freeReplyObject(holder);
    return rc;
}

int rowanAsyncCommand(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                      const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    int rc = rowanvAsyncCommand(ac, fn, privdata, format, ap);
    va_end(ap);
    return rc;
}

static void free_now(rowanAsyncContext *ac) {
    rowanEngine *e = ac->eng;
    async_state *s = state_of(e);
    s->depth = 1;          /* callbacks below must not free us again */
    s->free_pending = 1;
    rw_fail_all(e, ROWAN_ERR_OTHER, "context freed");
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].ev) event_free(e->nodes[i].ev);
    if (s->timer) event_free(s->timer);
    while (s->subs) sub_remove(s, s->subs->kind, s->subs->name, s->subs->len);
    if (s->flush) event_free(s->flush);
    free(s);
    rw_engine_free(e);
    free(ac);
}

void rowanAsyncFree(rowanAsyncContext *ac) {
    if (!ac) return;
    async_state *s = state_of(ac->eng);
    if (s->depth > 0) { s->free_pending = 1; return; }
    free_now(ac);
}

void rowanAsyncGetStats(const rowanAsyncContext *ac, rowanStats *st) { *st = ac->eng->st; }

void rowanAsyncSetFaults(rowanAsyncContext *ac, double drop_send, double drop_recv,
                         double dup_send, unsigned long long seed) {
    rw_set_faults(ac->eng, drop_send, drop_recv, dup_send, seed);
}

void rowanAsyncSetPushCallback(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata) {
    async_state *s = state_of(ac->eng);
    s->push_fn = fn;
    s->push_priv = privdata;
}

int rowanAsyncSetKeepalive(rowanAsyncContext *ac, const struct timeval tv) {
    uint64_t ns = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
    if (!ns) return ROWAN_ERR;
    ac->eng->keepalive_ns = ns;
    return ROWAN_OK;
}
