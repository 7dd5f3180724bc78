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
 * One socket per event base. The contexts attached to one event base (a
 * client thread's loop) form a group that shares one connected UDP socket
 * per server node (rw_sock): one read event for all of them, replies
 * handed to their context by the header's client id (each context keeps
 * its own client id, so the server still sees one client per context,
 * with its own ids, window, reply cache and steering to a worker), and
 * every context's datagrams of one turn leave in one sendmmsg when the
 * group's handler ends. At -P 1 a wake-up then costs one epoll event, one
 * recvmmsg and one sendmmsg for all the contexts that became ready,
 * instead of one of each per context (BENCHMARKS.md, "Native datagrams,
 * shared socket per event base"). A context freed while others share the
 * socket leaves it (its late datagrams find no owner and are dropped);
 * the socket closes with its last context, after the handler running.
 * ROWAN_ASYNC_SHARE=0 gives each context sockets of its own.
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
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/socket.h>
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

typedef struct async_state async_state;

/* The contexts attached to one event base, and their shared sockets. */
typedef struct rw_group {
    struct event_base *base;
    int share;                 /* share sockets (ROWAN_ASYNC_SHARE != 0) */
    rw_sock *socks;
    async_state *ctxs;         /* attached contexts */
    int nctx;
    struct event *flush;       /* one-shot: send what was issued outside our handlers */
    int flush_armed;
    int depth;                 /* inside one of the group's handlers */
    struct rw_group *next;
} rw_group;

static rw_group *groups;       /* all event bases' (attach and free look them up) */
static pthread_mutex_t groups_lock = PTHREAD_MUTEX_INITIALIZER;

struct async_state {
    rowanAsyncContext *ac;
    struct event_base *base;
    struct event *timer;
    uint64_t armed;            /* absolute ns the timer is set for; 0: not armed */
    int depth;                 /* inside an event handler of ours */
    int free_pending;
    sub_cb *subs;              /* pub/sub callbacks */
    rowanCallbackFn *mon_fn, *push_fn;
    void *mon_priv, *push_priv;
    rw_group *g;               /* NULL until attached */
    async_state *gprev, *gnext;
};

static async_state *state_of(rowanEngine *e) { return e->owner; }

static void free_now(rowanAsyncContext *ac);
static void group_end(rw_group *g);

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

/* Send every shared socket's batch. */
static void group_send(rw_group *g) {
    for (rw_sock *k = g->socks; k; k = k->next) rw_sock_send(k);
}

/* The end of one of our handlers: re-arm, or free if asked from a callback.
 * What the context sent goes into its shared sockets' batches, sent when
 * the group's handler ends (right away outside one). */
static void leave(async_state *s) {
    if (--s->depth > 0) return;
    if (s->free_pending) { free_now(s->ac); return; }
    rw_flush(s->ac->eng);     /* what this turn's callbacks sent, one sendmmsg per node */
    if (s->g && !s->g->depth) group_send(s->g);
    arm_timer(s);
}

static void on_read(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    rowanEngine *e = ((rowanAsyncContext *)arg)->eng;
    async_state *s = state_of(e);
    rw_group *g = s->g;
    g->depth++;
    s->depth++;
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].ev && e->nodes[i].fd == fd) { rw_on_readable(e, i); break; }
    leave(s);
    group_end(g);
}

static void on_flush(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    rw_group *g = arg;
    g->flush_armed = 0;
    g->depth++;
    for (async_state *s = g->ctxs; s; s = s->gnext) rw_flush(s->ac->eng);
    group_end(g);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    rowanEngine *e = ((rowanAsyncContext *)arg)->eng;
    async_state *s = state_of(e);
    rw_group *g = s->g;
    g->depth++;
    s->depth++;
    s->armed = 0;
    rw_on_timer(e, rw_now());
    leave(s);
    group_end(g);
}

static void add_read_event(rowanEngine *e, int node) {
    async_state *s = state_of(e);
    rw_node *n = &e->nodes[node];
    if (!s->g || n->fd < 0 || n->ev || n->sock) return;
    n->ev = event_new(s->g->base, n->fd, EV_READ | EV_PERSIST, on_read, s->ac);
    if (n->ev) event_add(n->ev, NULL);
}

/* ---------------- shared sockets ---------------- */

static rw_member *member_find(rw_sock *k, uint64_t client) {
    for (int i = 0; i < k->nmem; i++)
        if (k->mem[i].client == client) return &k->mem[i];
    return NULL;
}

/* The socket refused a datagram: every context on it learns the node is
 * gone. By client id, looked up again each time: a callback may free
 * another context. */
static void sock_refused(rw_sock *k) {
    int n = k->nmem;
    uint64_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
    if (!ids) return;
    for (int i = 0; i < n; i++) ids[i] = k->mem[i].client;
    for (int i = 0; i < n; i++) {
        rw_member *m = member_find(k, ids[i]);
        if (!m) continue;
        async_state *s = state_of(m->e);
        if (s->free_pending) continue;
        s->depth++;
        rw_on_refused(m->e, m->node);
        leave(s);
    }
    free(ids);
}

/* Everything queued on a shared socket, each datagram to its context. */
static void on_sock_read(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    rw_sock *k = arg;
    rw_group *g = k->group;
    struct mmsghdr msgs[RW_RXBATCH];
    g->depth++;
    for (int round = 0; round < 16; round++) {
        int got = rw_recv_batch(k->fd, k->rx, msgs);
        if (got < 0) {
            if (errno == ECONNREFUSED) { sock_refused(k); continue; }
            break;
        }
        uint64_t now = rw_now();   /* one clock read per batch */
        for (int i = 0; i < got; i++) {
            dgram_hdr h;
            const char *why;
            size_t len = msgs[i].msg_len;
            if ((msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ||
                dgram_get_hdr(k->rx[i], len, &h, &why) < 0)
                continue;
            rw_member *m = member_find(k, h.client);
            if (!m) continue;      /* a freed context's, or not ours */
            async_state *s = state_of(m->e);
            if (s->free_pending) continue;
            s->depth++;
            rw_on_datagram(m->e, m->node, k->rx[i], len, now);
            leave(s);
        }
        if (got < RW_RXBATCH) break;
    }
    group_end(g);
}

/* The engine's share hook: node's link on the group's socket to that
 * node, opened with the first context that needs it. */
static int share_node(rowanEngine *e, int node, char *why, size_t whylen) {
    rw_group *g = state_of(e)->g;
    rw_node *n = &e->nodes[node];
    if (!g || !g->share) return -1;
    rw_sock *k = g->socks;
    while (k && !(k->port == n->port && !strcmp(k->host, n->host))) k = k->next;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return -1;
        k->fd = rw_udp_open(n->host, n->port, why, whylen);
        if (k->fd < 0) { free(k); return -1; }
        snprintf(k->host, sizeof k->host, "%s", n->host);
        k->port = n->port;
        k->group = g;
        k->ev = event_new(g->base, k->fd, EV_READ | EV_PERSIST, on_sock_read, k);
        if (!k->ev || event_add(k->ev, NULL) != 0) {
            if (k->ev) event_free(k->ev);
            close(k->fd);
            free(k);
            return -1;
        }
        k->next = g->socks;
        g->socks = k;
    }
    if (k->nmem == k->capmem) {
        int cap = k->capmem ? 2 * k->capmem : 8;
        rw_member *m = realloc(k->mem, sizeof *m * (size_t)cap);
        if (!m) return -1;   /* an empty new socket closes at the group's end */
        k->mem = m;
        k->capmem = cap;
    }
    k->mem[k->nmem++] = (rw_member){e, node, n->client};
    n->sock = k;
    n->fd = k->fd;
    return 0;
}

static void sock_close(rw_sock *k) {
    event_free(k->ev);
    close(k->fd);
    free(k->mem);
    free(k);
}

/* A handler of the group ends: send the batches; then close the sockets
 * nobody uses any more, and the group with its last context. */
static void group_end(rw_group *g) {
    if (--g->depth > 0) return;
    group_send(g);
    for (rw_sock **pp = &g->socks; *pp;) {
        rw_sock *k = *pp;
        if (k->nmem) { pp = &k->next; continue; }
        *pp = k->next;
        sock_close(k);
    }
    if (g->nctx) return;
    pthread_mutex_lock(&groups_lock);
    for (rw_group **pp = &groups; *pp; pp = &(*pp)->next)
        if (*pp == g) { *pp = g->next; break; }
    pthread_mutex_unlock(&groups_lock);
    if (g->flush) event_free(g->flush);
    free(g);
}

/* The group of base, made with its first context. */
static rw_group *group_get(struct event_base *base) {
    pthread_mutex_lock(&groups_lock);
    rw_group *g = groups;
    while (g && g->base != base) g = g->next;
    if (!g && (g = calloc(1, sizeof *g))) {
        const char *env = getenv("ROWAN_ASYNC_SHARE");
        g->base = base;
        g->share = !(env && !strcmp(env, "0"));
        g->flush = event_new(base, -1, 0, on_flush, g);
        if (!g->flush) {
            free(g);
            g = NULL;
        } else {
            g->next = groups;
            groups = g;
        }
    }
    pthread_mutex_unlock(&groups_lock);
    return g;
}

/* The context leaves its group (being freed): off its shared sockets,
 * whose batches keep copies of what it sent. */
static void group_leave(async_state *s) {
    rw_group *g = s->g;
    rowanEngine *e = s->ac->eng;
    if (!g) return;
    for (int i = 0; i < e->nnodes; i++) {
        rw_node *n = &e->nodes[i];
        rw_sock *k = n->sock;
        if (!k) continue;
        for (int j = 0; j < k->nmem; j++)
            if (k->mem[j].e == e && k->mem[j].node == i) { k->mem[j] = k->mem[--k->nmem]; break; }
        n->sock = NULL;
        n->fd = -1;
    }
    if (s->gprev) s->gprev->gnext = s->gnext; else g->ctxs = s->gnext;
    if (s->gnext) s->gnext->gprev = s->gprev;
    g->nctx--;
    s->g = NULL;
    g->depth++;
    group_end(g);
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
    ac->eng->share = share_node;
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
    rowanEngine *e = ac->eng;
    if (s->g) return ROWAN_ERR;
    s->timer = evtimer_new(base, on_timer, ac);
    rw_group *g = s->timer ? group_get(base) : NULL;
    if (!g) return ROWAN_ERR;
    s->g = g;
    s->gnext = g->ctxs;
    if (g->ctxs) g->ctxs->gprev = s;
    g->ctxs = s;
    g->nctx++;
    /* the sockets the configuration was read on become the group's */
    g->depth++;
    for (int i = 0; i < e->nnodes; i++) {
        char why[128];
        if (g->share && rw_node_reopen(e, i, why, sizeof why) == 0 && e->nodes[i].sock) continue;
        add_read_event(e, i);
    }
    group_end(g);
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
    rw_group *g = s->g;
    int outside = s->depth == 0 && g && !g->depth;
    s->depth++;                        /* a callback run by the submit must not free us */
    rw_submit(ac->eng, q);
    if (outside && !s->free_pending) { /* send at the loop's next turn, with the others */
        s->depth--;
        if (!g->flush_armed) {
            event_active(g->flush, EV_TIMEOUT, 0);
            g->flush_armed = 1;
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
    rw_flush(e);           /* into the shared batches, before leaving them */
    group_leave(s);
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].ev) event_free(e->nodes[i].ev);
    if (s->timer) event_free(s->timer);
    while (s->subs) sub_remove(s, s->subs->kind, s->subs->name, s->subs->len);
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
