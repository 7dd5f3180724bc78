/* rowan.c -- librowan's blocking API (rowan.h): connect, commands,
 * pipelining, on the engine of rowan_engine.c driven by poll().
 *
 * A context's appended commands form a queue; rowanGetReply waits for the
 * oldest (rw_wait runs the engine until it is done) and hands its reply
 * over. Errors are per call (rowan.h): err/errstr are cleared first.
 *
 * Pushed messages (rowan_push.c: pub/sub, MONITOR) wait in a second queue,
 * numbered with the replies in the order they arrived: rowanGetReply hands
 * out whichever of the oldest reply and the oldest message came first, and
 * with nothing appended, waits for the next message (subscribe mode, as in
 * hiredis). rowanCommand returns its own command's reply; messages that
 * arrive meanwhile stay queued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rowan_int.h"

typedef struct pushed {
    struct pushed *next;
    redisReply *r;
    uint64_t seq;
} pushed;

typedef struct sync_state {
    rw_req *head, *tail;    /* appended, not collected */
    pushed *phead, *ptail;  /* messages not collected */
    uint64_t seq;           /* arrivals: replies and messages */
} sync_state;

static sync_state *sync_of(rowanContext *c) { return (sync_state *)c->eng->owner; }

static void mark_done(rowanEngine *e, rw_req *q) { q->seq = ++((sync_state *)e->owner)->seq; }

static void on_push(rowanEngine *e, int node, redisReply *r) {
    sync_state *s = e->owner;
    pushed *p = malloc(sizeof *p);
    (void)node;
    if (!p) {
        freeReplyObject(r);
        return;
    }
    *p = (pushed){NULL, r, ++s->seq};
    if (s->ptail) s->ptail->next = p; else s->phead = p;
    s->ptail = p;
}

static redisReply *push_pop(sync_state *s) {
    pushed *p = s->phead;
    redisReply *r = p->r;
    s->phead = p->next;
    if (!s->phead) s->ptail = NULL;
    free(p);
    return r;
}

static void clear_err(rowanContext *c) {
    c->err = 0;
    c->errstr[0] = 0;
}

rowanContext *rowanConnectWithTimeout(const char *host, int port, const struct timeval tv) {
    rowanContext *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->eng = rw_engine_new(host, port, &tv);
    sync_state *s = calloc(1, sizeof *s);
    if (!c->eng || !s) {
        free(s);
        rw_engine_free(c->eng);
        free(c);
        return NULL;
    }
    c->eng->owner = s;
    c->eng->on_push = on_push;
    rw_bootstrap(c->eng, c->errstr, sizeof c->errstr, &c->err);
    return c;
}

rowanContext *rowanConnect(const char *host, int port) {
    struct timeval tv = {5, 0};
    return rowanConnectWithTimeout(host, port, tv);
}

int rowanSetTimeout(rowanContext *c, const struct timeval tv) {
    uint64_t ns = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
    if (!ns) return ROWAN_ERR;
    c->eng->timeout_ns = ns;
    return ROWAN_OK;
}

int rowanSetBusyPoll(rowanContext *c, unsigned usec) {
    c->eng->busy_poll_ns = (uint64_t)usec * 1000ull;
    return ROWAN_OK;
}

void rowanFree(rowanContext *c) {
    if (!c) return;
    if (c->eng) {
        sync_state *s = sync_of(c);
        rw_fail_all(c->eng, ROWAN_ERR_OTHER, "context freed");
        for (rw_req *q = s->head, *n; q; q = n) { n = q->qnext; rw_req_free(q); }
        while (s->phead) freeReplyObject(push_pop(s));
        free(s);
        rw_engine_free(c->eng);
    }
    free(c);
}

int rowanAppendCommandArgv(rowanContext *c, int argc, const char **argv, const size_t *argvlen) {
    clear_err(c);
    if (!c->eng) return ROWAN_ERR;
    rw_req *q = rw_req_new(c->eng, argc, argv, argvlen, &c->err, c->errstr, sizeof c->errstr);
    if (!q) return ROWAN_ERR;
    q->done = mark_done;
    q->push = rw_push_kind(argv[0], argvlen ? argvlen[0] : strlen(argv[0]));
    sync_state *s = sync_of(c);
    if (s->tail) s->tail->qnext = q; else s->head = q;
    s->tail = q;
    rw_submit(c->eng, q);
    return ROWAN_OK;
}

int rowanvAppendCommand(rowanContext *c, const char *format, va_list ap) {
    redisReply *holder;
    int argc;
    const char **argv;
    size_t *argvlen;
    clear_err(c);
    if (rw_format(format, ap, &holder, &argc, &argv, &argvlen) < 0) {
        c->err = ROWAN_ERR_OTHER;
        snprintf(c->errstr, sizeof c->errstr, "invalid format string");
        return ROWAN_ERR;
    }
    int rc = rowanAppendCommandArgv(c, argc, argv, argvlen);
    free(argv);
    free(argvlen);
    freeReplyObject(holder);
    return rc;
}

int rowanAppendCommand(rowanContext *c, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    int rc = rowanvAppendCommand(c, format, ap);
    va_end(ap);
    return rc;
}

/* With nothing appended: the next message, waiting up to the timeout. */
static int next_message(rowanContext *c, void **reply) {
    sync_state *s = sync_of(c);
    rowanEngine *e = c->eng;
    if (!s->phead && !(e->sub_nodes | e->mon_nodes)) {
        c->err = ROWAN_ERR_OTHER;
        snprintf(c->errstr, sizeof c->errstr, "no command appended");
        return ROWAN_ERR;
    }
    uint64_t deadline = rw_now() + e->timeout_ns;
    while (!s->phead && rw_now() < deadline) rw_poll(e);
    rw_flush(e);
    if (!s->phead) {
        c->err = ROWAN_ERR_TIMEOUT;
        snprintf(c->errstr, sizeof c->errstr, "timeout: no message in %.1f s",
                 (double)e->timeout_ns / 1e9);
        return ROWAN_ERR;
    }
    *reply = push_pop(s);
    return ROWAN_OK;
}

/* The oldest appended command's reply; messages: whether a message that
 * arrived before it comes first (rowanGetReply) or stays queued. */
static int get_reply(rowanContext *c, void **reply, int messages) {
    clear_err(c);
    *reply = NULL;
    sync_state *s = c->eng ? sync_of(c) : NULL;
    if (!s) {
        c->err = ROWAN_ERR_OTHER;
        snprintf(c->errstr, sizeof c->errstr, "no command appended");
        return ROWAN_ERR;
    }
    if (!s->head) {
        if (messages) return next_message(c, reply);
        c->err = ROWAN_ERR_OTHER;
        snprintf(c->errstr, sizeof c->errstr, "no command appended");
        return ROWAN_ERR;
    }
    rw_req *q = s->head;
    if (messages) {
        while (q->state != RQ_DONE && !s->phead) rw_poll(c->eng);
        rw_flush(c->eng);
        if (s->phead && (q->state != RQ_DONE || s->phead->seq < q->seq)) {
            *reply = push_pop(s);
            return ROWAN_OK;
        }
    }
    rw_wait(c->eng, q);
    s->head = q->qnext;
    if (!s->head) s->tail = NULL;
    if (q->err) {
        c->err = q->err;
        snprintf(c->errstr, sizeof c->errstr, "%s", q->errstr);
        rw_req_free(q);
        return ROWAN_ERR;
    }
    *reply = q->reply;
    q->reply = NULL;
    rw_req_free(q);
    return ROWAN_OK;
}

int rowanGetReply(rowanContext *c, void **reply) { return get_reply(c, reply, 1); }

void *rowanCommandArgv(rowanContext *c, int argc, const char **argv, const size_t *argvlen) {
    void *r = NULL;
    if (rowanAppendCommandArgv(c, argc, argv, argvlen) != ROWAN_OK) return NULL;
    get_reply(c, &r, 0);
    return r;
}

void *rowanvCommand(rowanContext *c, const char *format, va_list ap) {
    void *r = NULL;
    if (rowanvAppendCommand(c, format, ap) != ROWAN_OK) return NULL;
    get_reply(c, &r, 0);
    return r;
}

void *rowanCommand(rowanContext *c, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    void *r = rowanvCommand(c, format, ap);
    va_end(ap);
    return r;
}

int rowanRefreshConfig(rowanContext *c) {
    clear_err(c);
    if (!c->eng) return ROWAN_ERR;
    if (rw_bootstrap(c->eng, c->errstr, sizeof c->errstr, &c->err) < 0) return ROWAN_ERR;
    return ROWAN_OK;
}

int rowanSetKeepalive(rowanContext *c, const struct timeval tv) {
    uint64_t ns = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
    if (!ns || !c->eng) return ROWAN_ERR;
    c->eng->keepalive_ns = ns;
    return ROWAN_OK;
}

unsigned long long rowanTerm(const rowanContext *c) {
    return c->eng ? c->eng->term : 0;
}

void rowanGetStats(const rowanContext *c, rowanStats *st) {
    if (c->eng) *st = c->eng->st;
    else memset(st, 0, sizeof *st);
}

void rowanSetFaults(rowanContext *c, double drop_send, double drop_recv, double dup_send,
                    unsigned long long seed) {
    if (c->eng) rw_set_faults(c->eng, drop_send, drop_recv, dup_send, seed);
}
