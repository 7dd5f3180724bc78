/* driver.c -- worker threads that generate the load (see driver.h).
 *
 * Shape of a worker: one libevent base, N "clients", each holding one
 * hiredis async connection per cluster node and a fixed pool of `pipeline`
 * operation slots. Closed loop: a client keeps all its slots busy, starting
 * a new operation the moment one completes, and an operation's latency runs
 * from its actual send. Open loop: a pacer computes the intended send time
 * of the k-th operation (t0 + k/rate) and starts operations on any client
 * with a free slot; latency runs from the intended time, so when the server
 * (or the slot supply) falls behind, the queueing delay is charged to the
 * operations that suffered it -- the correction for coordinated omission.
 * Waking from a timer costs ~50-100 us on a VM, which is charged to every
 * operation (and reported as the send lag); with --spin-us the pacer's timer
 * fires that much early and the loop polls (libevent non-blocking, replies
 * still processed) until the send, trading CPU for punctuality.
 *
 * An operation is one or more steps; a step is a batch of commands sent at
 * once, done when all their replies are in. READ/UPDATE/INSERT are one step,
 * RMW is a read step then a write step, SCAN is an index range step whose
 * reply issues the record reads. Each command has a context (struct cmdctx)
 * passed to hiredis as privdata; it remembers where the command's encoded
 * bytes are, so a -MOVED/-ASK reply can resend exactly the same bytes to the
 * right node, and with --wait it carries the command through a second phase,
 * "WAIT N 0" sent on the same connection once the write is acknowledged.
 *
 * Commands are encoded here, straight into the operation's buffer, and
 * handed to hiredis preformatted: that skips hiredis's printf-style
 * formatter and its per-argument allocations. */
#include "driver.h"
#include "deadline.h"
#include "native.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libevent.h>

#define RECONNECT_DELAY_NS 100000000ull  /* after a failed or lost connection */
#define TICK_MS 20                       /* deadline / stop / drain checks */
#define MAX_REDIRECTS 5
#define VALUES_LEN (1u << 20)            /* random bytes values are cut from */
#define KEY_MAX 512
#define INDEX_KEY "_indices"             /* YCSB's Redis client's index zset */

_Atomic int bench_stop_requested;

struct op;
struct client;
struct worker;

struct conn {
    redisAsyncContext *ac;      /* NULL: not connected */
    struct client *cl;
    int node;
    uint64_t retry_at;          /* no reconnect attempt before this (ns) */
};

struct cmdctx {
    struct op *op;
    uint8_t cmd;                /* enum cmd */
    uint8_t phase;              /* 0: the command; 1: its WAIT */
    uint8_t redirects;
    bool write;
    int node;                   /* node it was last sent to */
    uint32_t off, len;          /* encoded bytes in op->buf */
};

struct op {
    struct client *cl;
    struct op *next_free;
    enum op_type type;
    uint8_t step;
    bool failed;
    bool conn_failed;           /* the failure was the connection's */
    int pending;                /* replies outstanding in this step */
    int ncmds, maxcmds;
    uint64_t keynum;
    uint64_t t_start;           /* ns: actual (closed) or intended (open) */
    char key[KEY_MAX];
    size_t klen;
    char *buf;
    size_t blen, bcap;
    struct cmdctx *cmds;        /* maxcmds, never reallocated: hiredis holds
                                   pointers to them while replies are due */
};

struct client {
    struct worker *w;
    struct conn conns[SLOTS_MAX_NODES];
    void *native;               /* --transport native: its librowan context */
    struct op *ops;
    struct op *free_ops;
    int inflight;
    bool paused;                /* after a connection failure */
    struct event *retry_ev;
};

struct run;

struct worker {
    int id;
    struct run *run;
    const struct bench_cfg *cfg;
    struct event_base *base;
    struct rng rng;
    struct chooser chooser;
    struct slotmap map;         /* private copy, updated by -MOVED */
    struct stats *st;
    struct client *clients;
    int nclients;
    struct event *tick_ev, *pace_ev;
    int pending_connects;
    bool begun, stopping, finished, forced, warned;
    uint64_t t0, deadline, stop_at, t_last;
    int inflight;
    double interval_ns;         /* open loop: between intended sends */
    uint64_t pace_k;            /* open loop: next intended send's index */
    int rr;                     /* open loop: round-robin client cursor */
    bool spin;                  /* open loop: a send is due within spin_ns */
    uint64_t spin_ns;
    uint64_t ops_done, ops_err;
    _Atomic uint64_t prog_ops, prog_err;
    pthread_t thr;
};

struct run {
    const struct bench_cfg *cfg;
    struct slotmap map;
    struct keyspace ks;
    _Atomic uint64_t issued;    /* operations claimed against the budget */
    char *values;               /* VALUES_LEN + VSIZE_CAP random bytes */
    char (*fnames)[16];         /* "field0", "field1", ... */
    size_t *fnlen;
    char wait_cmd[64];
    size_t wait_len;
    int nworkers;
    struct worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int running;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "rowan-bench: out of memory\n");
        abort();
    }
    return p;
}

/* ---------------------------------------------------------------------
 * RESP encoding into the operation's buffer
 * --------------------------------------------------------------------- */

static void buf_need(struct op *op, size_t n) {
    if (op->blen + n <= op->bcap)
        return;
    size_t cap = op->bcap ? op->bcap : 512;
    while (cap < op->blen + n)
        cap *= 2;
    char *nb = realloc(op->buf, cap);
    if (!nb) {
        fprintf(stderr, "rowan-bench: out of memory\n");
        abort();
    }
    op->buf = nb;
    op->bcap = cap;
}

static size_t u64_to_str(char *out, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static void put_len(struct op *op, char type, size_t n) {
    buf_need(op, 24);
    char *p = op->buf + op->blen;
    *p++ = type;
    p += u64_to_str(p, n);
    *p++ = '\r';
    *p++ = '\n';
    op->blen = (size_t)(p - op->buf);
}

static void put_arg(struct op *op, const void *s, size_t n) {
    put_len(op, '$', n);
    buf_need(op, n + 2);
    memcpy(op->buf + op->blen, s, n);
    op->blen += n;
    op->buf[op->blen++] = '\r';
    op->buf[op->blen++] = '\n';
}

static void put_str(struct op *op, const char *s) {
    put_arg(op, s, strlen(s));
}

static void put_i64(struct op *op, int64_t v) {
    char tmp[24];
    size_t n = 0;
    if (v < 0) {
        tmp[n++] = '-';
        n += u64_to_str(tmp + n, (uint64_t)0 - (uint64_t)v);
    } else {
        n = u64_to_str(tmp, (uint64_t)v);
    }
    put_arg(op, tmp, n);
}

/* ---------------------------------------------------------------------
 * connections
 * --------------------------------------------------------------------- */

static void worker_begin(struct worker *w);

static void warn_conn(struct worker *w, const struct conn *cn, const char *why) {
    if (w->warned)
        return;
    w->warned = true;     /* once per thread: a dead server must not flood */
    const struct node *n = &w->map.nodes[cn->node];
    fprintf(stderr, "rowan-bench: connection to %s:%d: %s\n", n->host, n->port, why);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    struct conn *cn = ac->data;
    struct worker *w = cn->cl->w;
    if (status != REDIS_OK) {
        warn_conn(w, cn, ac->errstr);
        if (cn->ac == ac)
            cn->ac = NULL;  /* hiredis frees it after this callback */
        cn->retry_at = now_ns() + RECONNECT_DELAY_NS;
    }
    if (!w->begun && --w->pending_connects == 0)
        worker_begin(w);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    struct conn *cn = ac->data;
    if (cn->ac == ac)
        cn->ac = NULL;
    if (status != REDIS_OK) {
        warn_conn(cn->cl->w, cn, ac->errstr[0] ? ac->errstr : "closed by the server");
        cn->retry_at = now_ns() + RECONNECT_DELAY_NS;
    }
}

static bool conn_open(struct conn *cn) {
    struct worker *w = cn->cl->w;
    const struct node *n = &w->map.nodes[cn->node];
    redisAsyncContext *ac = redisAsyncConnect(n->host, n->port);
    if (!ac || ac->err) {
        warn_conn(w, cn, ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        cn->retry_at = now_ns() + RECONNECT_DELAY_NS;
        return false;
    }
    ac->data = cn;
    redisLibeventAttach(ac, w->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (w->cfg->password)
        redisAsyncCommand(ac, NULL, NULL, "AUTH %s", w->cfg->password);
    cn->ac = ac;
    return true;
}

/* A usable context for a node, connecting when needed; NULL when the node
 * is unreachable right now. */
static redisAsyncContext *conn_get(struct client *cl, int node) {
    struct conn *cn = &cl->conns[node];
    if (cn->ac)
        return (cn->ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) ? NULL : cn->ac;
    if (now_ns() < cn->retry_at || !conn_open(cn))
        return NULL;
    return cn->ac;
}

/* Drop a connection we no longer want; safe from inside its callbacks. */
static void conn_close(struct conn *cn, bool force) {
    redisAsyncContext *ac = cn->ac;
    if (!ac)
        return;
    cn->ac = NULL;
    if (force)
        redisAsyncFree(ac);         /* pending callbacks run with NULL */
    else
        redisAsyncDisconnect(ac);   /* after pending replies arrive */
}

/* ---------------------------------------------------------------------
 * sending
 * --------------------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *priv);

static bool send_to(struct op *op, struct cmdctx *c, int node, bool asking) {
    if (op->cl->w->cfg->native) {   /* the library routes and follows -MOVED */
        c->node = node;
        return op->cl->native && native_send(op->cl->native, op->buf + c->off, c->len, c) == 0;
    }
    redisAsyncContext *ac = conn_get(op->cl, node);
    if (!ac)
        return false;
    if (asking && redisAsyncFormattedCommand(ac, NULL, NULL, "*1\r\n$6\r\nASKING\r\n", 16))
        return false;
    if (redisAsyncFormattedCommand(ac, on_reply, c, op->buf + c->off, c->len) != REDIS_OK)
        return false;
    c->node = node;
    return true;
}

static void op_fail(struct op *op, const char *kind, size_t len, bool conn) {
    if (conn)
        op->conn_failed = true;
    if (op->failed)
        return;     /* one error per operation, its first */
    op->failed = true;
    stats_error(op->cl->w->st, kind, len);
}

static void op_fail_str(struct op *op, const char *kind, bool conn) {
    op_fail(op, kind, strlen(kind), conn);
}

static struct cmdctx *cmd_begin(struct op *op, enum cmd cmd, int argc, bool write) {
    if (op->ncmds == op->maxcmds)
        abort();    /* maxcmds is sized for the largest step; a bug if hit */
    struct cmdctx *c = &op->cmds[op->ncmds++];
    c->op = op;
    c->cmd = (uint8_t)cmd;
    c->phase = 0;
    c->redirects = 0;
    c->write = write;
    c->off = (uint32_t)op->blen;
    put_len(op, '*', (size_t)argc);
    return c;
}

/* Finish encoding and send to the node owning the key's slot. */
static void cmd_send(struct op *op, struct cmdctx *c, const char *key, size_t klen) {
    struct worker *w = op->cl->w;
    c->len = (uint32_t)(op->blen - c->off);
    int node = w->map.cluster ? w->map.owner[key_slot(key, klen)] : 0;
    if (send_to(op, c, node, false))
        op->pending++;
    else if (w->cfg->native && op->cl->native)
        op_fail_str(op, "REQUEST_TOO_LARGE", false);  /* over one datagram: librowan refuses it */
    else
        op_fail_str(op, "CONNECTION", true);
}

/* A value is a slice of the random table at a random offset; the table has
 * VSIZE_CAP spare bytes past VALUES_LEN, so any size fits. */
static const char *value_bytes(struct worker *w) {
    return w->run->values + rng_below(&w->rng, VALUES_LEN);
}

/* ---------------------------------------------------------------------
 * the two data models
 * --------------------------------------------------------------------- */

static void emit_kv_read(struct op *op) {
    struct cmdctx *c = cmd_begin(op, CMD_GET, 2, false);
    put_str(op, "GET");
    put_arg(op, op->key, op->klen);
    cmd_send(op, c, op->key, op->klen);
}

static void emit_kv_write(struct op *op) {
    struct worker *w = op->cl->w;
    uint32_t len = vsize_next(&w->cfg->vs, &w->rng);
    struct cmdctx *c = cmd_begin(op, CMD_SET, 3, true);
    put_str(op, "SET");
    put_arg(op, op->key, op->klen);
    put_arg(op, value_bytes(w), len);
    cmd_send(op, c, op->key, op->klen);
}

/* HGETALL key, or HMGET key <one random field> (YCSB's readallfields). */
static void emit_h_read(struct op *op, const char *key, size_t klen) {
    struct worker *w = op->cl->w;
    struct run *run = w->run;
    struct cmdctx *c;
    if (w->cfg->read_all_fields) {
        c = cmd_begin(op, CMD_HGETALL, 2, false);
        put_str(op, "HGETALL");
        put_arg(op, key, klen);
    } else {
        uint64_t f = rng_below(&w->rng, (uint64_t)w->cfg->fields);
        c = cmd_begin(op, CMD_HMGET, 3, false);
        put_str(op, "HMGET");
        put_arg(op, key, klen);
        put_arg(op, run->fnames[f], run->fnlen[f]);
    }
    cmd_send(op, c, key, klen);
}

/* HMSET of every field (inserts, writeallfields) or of one random field.
 * The record's drawn size is split evenly over its fields. */
static void emit_h_write(struct op *op, bool all) {
    struct worker *w = op->cl->w;
    struct run *run = w->run;
    int fields = w->cfg->fields;
    uint32_t total = vsize_next(&w->cfg->vs, &w->rng);
    uint32_t each = total / (uint32_t)fields;
    int n = all ? fields : 1;
    uint64_t first = all ? 0 : rng_below(&w->rng, (uint64_t)fields);
    struct cmdctx *c = cmd_begin(op, CMD_HMSET, 2 + 2 * n, true);
    put_str(op, "HMSET");
    put_arg(op, op->key, op->klen);
    for (int i = 0; i < n; i++) {
        uint64_t f = first + (uint64_t)i;
        /* The last field takes the remainder so the record sums to total;
         * no field is empty (an empty HMSET value is legal but atypical). */
        uint32_t len = (all && i == n - 1) ? total - each * (uint32_t)(n - 1) : each;
        if (len == 0)
            len = 1;
        put_arg(op, run->fnames[f], run->fnlen[f]);
        put_arg(op, value_bytes(w), len);
    }
    cmd_send(op, c, op->key, op->klen);
}

/* YCSB's Redis client scores index entries with Java's String.hashCode. */
static int32_t java_hash(const char *s, size_t len) {
    uint32_t h = 0;
    for (size_t i = 0; i < len; i++)
        h = 31 * h + (uint8_t)s[i];
    return (int32_t)h;
}

static void emit_zadd(struct op *op) {
    struct cmdctx *c = cmd_begin(op, CMD_ZADD, 4, true);
    put_str(op, "ZADD");
    put_str(op, INDEX_KEY);
    put_i64(op, java_hash(op->key, op->klen));
    put_arg(op, op->key, op->klen);
    cmd_send(op, c, INDEX_KEY, sizeof INDEX_KEY - 1);
}

static void emit_zrange(struct op *op) {
    struct worker *w = op->cl->w;
    uint64_t n = 1 + rng_below(&w->rng, (uint64_t)w->cfg->scan_len);
    struct cmdctx *c = cmd_begin(op, CMD_ZRANGEBYSCORE, 7, false);
    put_str(op, "ZRANGEBYSCORE");
    put_str(op, INDEX_KEY);
    put_i64(op, java_hash(op->key, op->klen));
    put_str(op, "+inf");
    put_str(op, "LIMIT");
    put_str(op, "0");
    put_i64(op, (int64_t)n);
    cmd_send(op, c, INDEX_KEY, sizeof INDEX_KEY - 1);
}

static void emit_read(struct op *op) {
    if (op->cl->w->cfg->model == MODEL_KV)
        emit_kv_read(op);
    else
        emit_h_read(op, op->key, op->klen);
}

static void emit_write(struct op *op, bool insert) {
    const struct bench_cfg *cfg = op->cl->w->cfg;
    if (cfg->model == MODEL_KV) {
        emit_kv_write(op);
        return;
    }
    emit_h_write(op, insert || cfg->write_all_fields);
    if (insert)
        emit_zadd(op);
}

/* ---------------------------------------------------------------------
 * operation lifecycle
 * --------------------------------------------------------------------- */

static void client_fill(struct client *cl);
static void pace_pump(struct worker *w, struct client *hint);
static void worker_stop(struct worker *w);
static void worker_finish(struct worker *w);

static void op_set_key(struct op *op, uint64_t keynum) {
    op->keynum = keynum;
    op->klen = key_format(op->key, keynum, op->cl->w->cfg->key_size);
}

static uint64_t choose_key(struct worker *w) {
    uint64_t limit = keyspace_limit(&w->run->ks);
    return chooser_next(&w->chooser, &w->rng, limit ? limit : 1);
}

static void op_step_done(struct op *op);

static void op_start(struct client *cl, uint64_t t_start) {
    struct worker *w = cl->w;
    struct op *op = cl->free_ops;
    cl->free_ops = op->next_free;
    op->type = w->cfg->wl.load ? OP_INSERT
                               : workload_pick(w->cfg->wl.mix, rng_double(&w->rng));
    op->t_start = t_start;
    op->step = 0;
    op->failed = op->conn_failed = false;
    op->pending = op->ncmds = 0;
    op->blen = 0;
    cl->inflight++;
    w->inflight++;
    if (op->type == OP_INSERT) {
        op_set_key(op, keyspace_claim(&w->run->ks));
        emit_write(op, true);
    } else {
        op_set_key(op, choose_key(w));
        if (op->type == OP_UPDATE)
            emit_write(op, false);
        else if (op->type == OP_SCAN)
            emit_zrange(op);
        else
            emit_read(op);      /* READ, and RMW's first step */
    }
    if (op->pending == 0)
        op_step_done(op);       /* nothing could be sent */
}

static void client_pause(struct client *cl) {
    if (cl->paused)
        return;
    cl->paused = true;
    struct timeval tv = {0, (long)(RECONNECT_DELAY_NS / 1000)};
    evtimer_add(cl->retry_ev, &tv);
}

static void op_finish(struct op *op) {
    struct client *cl = op->cl;
    struct worker *w = cl->w;
    uint64_t now = now_ns();
    if (op->failed) {
        w->st->failed[op->type]++;
        w->ops_err++;
        atomic_store_explicit(&w->prog_err, w->ops_err, memory_order_relaxed);
    } else {
        w->st->ok[op->type]++;
        hist_record(&w->st->lat[op->type], now > op->t_start ? now - op->t_start : 0);
    }
    if (op->type == OP_INSERT)
        keyspace_ack(&w->run->ks, op->keynum);
    w->ops_done++;
    atomic_store_explicit(&w->prog_ops, w->ops_done, memory_order_relaxed);
    w->t_last = now;
    bool conn_failed = op->conn_failed;
    op->next_free = cl->free_ops;
    cl->free_ops = op;
    cl->inflight--;
    w->inflight--;
    if (conn_failed)
        client_pause(cl);       /* retry later, not in a tight loop */
    else if (w->cfg->rate > 0)
        pace_pump(w, cl);
    else
        client_fill(cl);
    if (w->stopping && w->inflight == 0)
        worker_finish(w);
}

static void op_step_done(struct op *op) {
    if (!op->failed && op->type == OP_RMW && op->step == 0) {
        op->step = 1;
        op->blen = 0;
        op->ncmds = 0;
        emit_write(op, false);
        if (op->pending)
            return;
    }
    op_finish(op);
}

/* ---------------------------------------------------------------------
 * replies
 * --------------------------------------------------------------------- */

static bool reply_found(enum cmd cmd, const redisReply *r) {
    switch (cmd) {
    case CMD_GET:
        return r->type != REDIS_REPLY_NIL;
    case CMD_HGETALL:
        return r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    case CMD_HMGET:
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
            if (r->element[i]->type != REDIS_REPLY_NIL)
                return true;
        return false;
    default:
        return true;
    }
}

/* Follow -MOVED / -ASK. True when the command was resent (its reply is
 * still to come); false when the error is not a redirect or we give up. */
static bool follow_redirect(struct op *op, struct cmdctx *c, const redisReply *r) {
    struct worker *w = op->cl->w;
    unsigned slot;
    char host[64];
    int port;
    enum redirect kind = redirect_parse(r->str, r->len, &slot, host, sizeof host, &port);
    if (kind == REDIRECT_NONE || c->redirects >= MAX_REDIRECTS)
        return false;
    c->redirects++;
    if (!host[0])   /* "MOVED 1 :7001": same host as the node that said it */
        snprintf(host, sizeof host, "%s", w->map.nodes[c->node].host);
    int node = slotmap_node(&w->map, host, port);
    if (node < 0)
        return false;
    if (kind == REDIRECT_MOVED) {
        w->map.owner[slot] = (uint8_t)node;
        w->map.cluster = true;  /* a "standalone" seed that redirects */
        w->st->moved++;
    } else {
        w->st->ask++;
    }
    if (send_to(op, c, node, kind == REDIRECT_ASK))
        return true;
    op_fail_str(op, "CONNECTION", true);
    return false;
}

/* With --wait, a write's reply is followed by WAIT on the same connection,
 * with the same context in phase 1. False if it could not be sent. */
static bool send_wait(struct op *op, struct cmdctx *c) {
    struct worker *w = op->cl->w;
    c->phase = 1;
    if (w->cfg->native)
        return op->cl->native && native_send(op->cl->native, w->run->wait_cmd, w->run->wait_len, c) == 0;
    redisAsyncContext *ac = conn_get(op->cl, c->node);
    return ac && redisAsyncFormattedCommand(ac, on_reply, c, w->run->wait_cmd,
                                            w->run->wait_len) == REDIS_OK;
}

/* The scan's index reply names the records; read them all at once. */
static void scan_records(struct op *op, const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < r->elements && op->ncmds < op->maxcmds; i++) {
        const redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_STRING)
            emit_h_read(op, e->str, e->len);
    }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    redisReply *r = reply;
    struct cmdctx *c = priv;
    struct op *op = c->op;
    struct worker *w = op->cl->w;
    if (!r) {
        op_fail_str(op, w->forced ? "TIMEOUT" : "CONNECTION", true);
    } else if (r->type == REDIS_REPLY_ERROR) {
        if (c->phase == 0 && follow_redirect(op, c, r))
            return;
        op_fail(op, r->str, r->len, false);
    } else if (c->phase == 1) {
        w->st->cmds[CMD_WAIT]++;
        if (r->type != REDIS_REPLY_INTEGER || r->integer < w->cfg->wait_replicas)
            op_fail_str(op, "WAIT_SHORT", false);
    } else {
        w->st->cmds[c->cmd]++;
        if (!reply_found(c->cmd, r))
            op_fail_str(op, "NOT_FOUND", false);
        if (c->write && w->cfg->wait_replicas >= 0) {
            if (send_wait(op, c))
                return;
            op_fail_str(op, "CONNECTION", true);
        }
        if (c->cmd == CMD_ZRANGEBYSCORE && !op->failed)
            scan_records(op, r);
    }
    if (--op->pending == 0)
        op_step_done(op);
}

static void on_native_reply(void *reply, void *priv) {
    on_reply(NULL, reply, priv);
}

/* ---------------------------------------------------------------------
 * issuing: closed and open loop
 * --------------------------------------------------------------------- */

/* Claim one operation from the run's budget; stops the worker when spent. */
static bool budget_claim(struct worker *w) {
    uint64_t max = w->cfg->operations;
    if (max && atomic_fetch_add_explicit(&w->run->issued, 1, memory_order_relaxed) >= max) {
        worker_stop(w);
        return false;
    }
    return true;
}

static bool past_deadline(struct worker *w, uint64_t now) {
    if ((w->deadline && now >= w->deadline) ||
        atomic_load_explicit(&bench_stop_requested, memory_order_relaxed)) {
        worker_stop(w);
        return true;
    }
    return false;
}

static void client_fill(struct client *cl) {
    struct worker *w = cl->w;
    int depth = w->cfg->pipeline;
    while (!w->stopping && !cl->paused && cl->inflight < depth) {
        uint64_t now = now_ns();
        if (past_deadline(w, now) || !budget_claim(w))
            break;
        op_start(cl, now);
    }
}

static struct client *free_client(struct worker *w, struct client *hint) {
    int depth = w->cfg->pipeline;
    if (hint && !hint->paused && hint->inflight < depth)
        return hint;
    for (int i = 0; i < w->nclients; i++) {
        struct client *cl = &w->clients[(w->rr + i) % w->nclients];
        if (!cl->paused && cl->inflight < depth) {
            w->rr = (w->rr + i + 1) % w->nclients;
            return cl;
        }
    }
    return NULL;
}

static uint64_t intended(const struct worker *w, uint64_t k) {
    return w->t0 + (uint64_t)((double)k * w->interval_ns);
}

/* Start every operation whose intended time has come, as far as free
 * slots allow; otherwise sleep until the next one is due. A late operation
 * keeps its intended time, so its wait for a slot counts as latency. */
static void pace_pump(struct worker *w, struct client *hint) {
    uint64_t now = now_ns();
    while (!w->stopping && w->begun) {
        uint64_t due = intended(w, w->pace_k);
        if (due > now) {
            uint64_t d = due - now;
            w->spin = d <= w->spin_ns;     /* worker_main polls until due */
            if (!w->spin && !evtimer_pending(w->pace_ev, NULL)) {
                d -= w->spin_ns;
                struct timeval tv = {(time_t)(d / 1000000000ull),
                                     (suseconds_t)(d % 1000000000ull / 1000)};
                evtimer_add(w->pace_ev, &tv);
            }
            return;
        }
        if (past_deadline(w, now))
            return;
        struct client *cl = free_client(w, hint);
        if (!cl || !budget_claim(w))
            return;     /* saturated: the next completion pumps again */
        w->pace_k++;
        /* How late the driver itself is: if this grows, the numbers measure
         * the driver (or a starved CPU), not the server. */
        hist_record(&w->st->send_lag, now - due);
        op_start(cl, due);
        now = now_ns();
    }
}

static void on_pace(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    pace_pump(arg, NULL);
}

static void on_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct client *cl = arg;
    cl->paused = false;
    if (cl->w->cfg->rate > 0)
        pace_pump(cl->w, cl);
    else
        client_fill(cl);
    if (cl->w->stopping && cl->w->inflight == 0)
        worker_finish(cl->w);
}

/* ---------------------------------------------------------------------
 * worker lifecycle
 * --------------------------------------------------------------------- */

static void worker_begin(struct worker *w) {
    w->begun = true;
    w->t0 = w->t_last = now_ns();
    if (w->cfg->duration > 0)
        w->deadline = w->t0 + (uint64_t)(w->cfg->duration * 1e9);
    if (w->nclients == 0) {
        worker_stop(w);
        return;
    }
    if (w->cfg->rate > 0) {
        pace_pump(w, NULL);
        return;
    }
    for (int i = 0; i < w->nclients && !w->stopping; i++)
        client_fill(&w->clients[i]);
}

/* Open loop: operations that were due before the end but never sent, i.e.
 * the backlog the target rate built up beyond the available slots. */
static void count_missed(struct worker *w, uint64_t end) {
    if (w->cfg->rate <= 0 || !w->begun || end <= w->t0)
        return;
    uint64_t due = (uint64_t)((double)(end - w->t0) / w->interval_ns) + 1;
    if (due > w->pace_k)
        w->st->missed += due - w->pace_k;
}

static void worker_stop(struct worker *w) {
    if (w->stopping)
        return;
    w->stopping = true;
    w->stop_at = now_ns();
    if (!w->cfg->operations || atomic_load(&w->run->issued) < w->cfg->operations)
        count_missed(w, w->deadline && w->deadline < w->stop_at ? w->deadline : w->stop_at);
    if (w->inflight == 0)
        worker_finish(w);
}

static void worker_finish(struct worker *w) {
    if (w->finished)
        return;
    w->finished = true;
    w->spin = false;
    for (int i = 0; i < w->nclients; i++) {
        struct client *cl = &w->clients[i];
        evtimer_del(cl->retry_ev);
        for (int n = 0; n < SLOTS_MAX_NODES; n++)
            conn_close(&cl->conns[n], w->forced);
        if (cl->native) {   /* outstanding commands (forced) fail as TIMEOUT */
            void *nc = cl->native;
            cl->native = NULL;
            native_close(nc);
        }
    }
    event_del(w->tick_ev);
    evtimer_del(w->pace_ev);
}

/* Replies overdue after the drain timeout: drop the connections, which
 * fails the outstanding operations as TIMEOUT. */
static void worker_force(struct worker *w) {
    w->forced = true;
    /* Freeing one connection can finish the worker from inside (its last
     * operation fails); the loop still visits every connection. */
    for (int i = 0; i < w->nclients; i++)
        for (int n = 0; n < SLOTS_MAX_NODES; n++)
            conn_close(&w->clients[i].conns[n], true);
    worker_finish(w);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct worker *w = arg;
    uint64_t now = now_ns();
    if (!w->stopping) {
        if (atomic_load(&bench_stop_requested) || (w->deadline && now >= w->deadline))
            worker_stop(w);
        return;
    }
    if (!w->finished && now >= w->stop_at + (uint64_t)(w->cfg->drain_timeout * 1e9))
        worker_force(w);
}

static void client_init(struct client *cl, struct worker *w) {
    const struct bench_cfg *cfg = w->cfg;
    cl->w = w;
    for (int n = 0; n < SLOTS_MAX_NODES; n++) {
        cl->conns[n].cl = cl;
        cl->conns[n].node = n;
    }
    cl->ops = xcalloc((size_t)cfg->pipeline, sizeof *cl->ops);
    /* Largest step: a scan's record reads; an insert is two commands. */
    int maxcmds = cfg->scan_len + 1 > 2 ? cfg->scan_len + 1 : 2;
    for (int i = 0; i < cfg->pipeline; i++) {
        struct op *op = &cl->ops[i];
        op->cl = cl;
        op->maxcmds = maxcmds;
        op->cmds = xcalloc((size_t)maxcmds, sizeof *op->cmds);
        op->next_free = cl->free_ops;
        cl->free_ops = op;
    }
    cl->retry_ev = evtimer_new(w->base, on_retry, cl);
}

static void client_free(struct client *cl) {
    for (int i = 0; i < cl->w->cfg->pipeline; i++) {
        free(cl->ops[i].cmds);
        free(cl->ops[i].buf);
    }
    free(cl->ops);
    event_free(cl->retry_ev);
}

static int worker_init(struct worker *w, struct run *run, int id, int nclients) {
    const struct bench_cfg *cfg = run->cfg;
    w->id = id;
    w->run = run;
    w->cfg = cfg;
    w->map = run->map;
    rng_seed(&w->rng, cfg->seed, (uint64_t)id + 1);
    if (chooser_init(&w->chooser, cfg->dist, cfg->theta, cfg->records, cfg->expected_inserts))
        return -1;
    w->st = xcalloc(1, sizeof *w->st);
    stats_init(w->st);
    struct event_config *ec = event_config_new();
    /* Open-loop send times need sub-millisecond timers (timerfd). */
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER | EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!w->base)
        return -1;
    w->nclients = nclients;
    w->clients = xcalloc((size_t)nclients, sizeof *w->clients);
    for (int i = 0; i < nclients; i++)
        client_init(&w->clients[i], w);
    w->tick_ev = event_new(w->base, -1, EV_PERSIST, on_tick, w);
    w->pace_ev = evtimer_new(w->base, on_pace, w);
    if (cfg->rate > 0)
        w->interval_ns = 1e9 * run->nworkers / cfg->rate;
    w->spin_ns = (uint64_t)(cfg->spin_us * 1000);
    return 0;
}

static void worker_free(struct worker *w) {
    for (int i = 0; i < w->nclients; i++)
        client_free(&w->clients[i]);
    free(w->clients);
    if (w->tick_ev)
        event_free(w->tick_ev);
    if (w->pace_ev)
        event_free(w->pace_ev);
    if (w->base)
        event_base_free(w->base);
    free(w->st);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct timeval tick = {0, TICK_MS * 1000};
    event_add(w->tick_ev, &tick);
    /* Connect every client to every node first; the clock starts when all
     * connections have answered, so connection setup is not measured. */
    for (int i = 0; i < w->nclients && !w->cfg->native; i++)
        for (int n = 0; n < w->map.nnodes; n++)
            if (conn_open(&w->clients[i].conns[n]))
                w->pending_connects++;
    for (int i = 0; i < w->nclients && w->cfg->native; i++) {
        char err[256];
        w->clients[i].native = native_connect(w->base, w->cfg->host, w->cfg->port,
                                              on_native_reply, err, sizeof err);
        if (!w->clients[i].native && !w->warned) {
            w->warned = true;
            fprintf(stderr, "rowan-bench: %s\n", err);
        }
    }
    if (w->pending_connects == 0)
        worker_begin(w);
    /* Like event_base_dispatch (returns 1 once no event is left), except
     * that a due open-loop send makes the loop poll instead of sleep. */
    while (event_base_loop(w->base, w->spin ? EVLOOP_NONBLOCK : EVLOOP_ONCE) == 0)
        if (w->spin)
            pace_pump(w, NULL);
    struct run *run = w->run;
    pthread_mutex_lock(&run->lock);
    run->running--;
    pthread_cond_broadcast(&run->cond);
    pthread_mutex_unlock(&run->lock);
    return NULL;
}

/* ---------------------------------------------------------------------
 * the run
 * --------------------------------------------------------------------- */

static void run_tables(struct run *run) {
    const struct bench_cfg *cfg = run->cfg;
    struct rng r;
    rng_seed(&r, cfg->seed, 0);
    /* Printable bytes, so values are readable in redis-cli and never look
     * like anything special to a server. */
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    run->values = xcalloc(VALUES_LEN + VSIZE_CAP, 1);
    for (size_t i = 0; i < VALUES_LEN + VSIZE_CAP; i++)
        run->values[i] = alphabet[rng_below(&r, sizeof alphabet - 1)];
    int f = cfg->fields > 0 ? cfg->fields : 1;
    run->fnames = xcalloc((size_t)f, sizeof *run->fnames);
    run->fnlen = xcalloc((size_t)f, sizeof *run->fnlen);
    for (int i = 0; i < f; i++)
        run->fnlen[i] = (size_t)snprintf(run->fnames[i], sizeof run->fnames[i], "field%d", i);
    char n[16];
    int nl = snprintf(n, sizeof n, "%d", cfg->wait_replicas < 0 ? 0 : cfg->wait_replicas);
    run->wait_len = (size_t)snprintf(run->wait_cmd, sizeof run->wait_cmd,
                                     "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$1\r\n0\r\n", nl, n);
}

struct run *run_start(const struct bench_cfg *cfg, const struct slotmap *map,
                      char *err, size_t errlen) {
    struct run *run = xcalloc(1, sizeof *run);
    run->cfg = cfg;
    run->map = *map;
    run->nworkers = cfg->threads;
    if (keyspace_init(&run->ks, cfg->wl.load ? 0 : cfg->records)) {
        snprintf(err, errlen, "out of memory");
        free(run);
        return NULL;
    }
    run_tables(run);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&run->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&run->lock, NULL);
    run->workers = xcalloc((size_t)run->nworkers, sizeof *run->workers);
    for (int i = 0; i < run->nworkers; i++) {
        /* Connections are a total; spread the remainder over the first. */
        int n = cfg->connections / run->nworkers + (i < cfg->connections % run->nworkers);
        if (worker_init(&run->workers[i], run, i, n)) {
            snprintf(err, errlen, "cannot set up worker %d (bad chooser or event base)", i);
            return NULL;
        }
    }
    run->running = run->nworkers;
    for (int i = 0; i < run->nworkers; i++)
        pthread_create(&run->workers[i].thr, NULL, worker_main, &run->workers[i]);
    return run;
}

bool run_wait(struct run *r, int timeout_ms) {
    struct timespec ts = deadline_in_ms(CLOCK_MONOTONIC, timeout_ms);
    pthread_mutex_lock(&r->lock);
    if (r->running > 0)
        pthread_cond_timedwait(&r->cond, &r->lock, &ts);
    bool running = r->running > 0;
    pthread_mutex_unlock(&r->lock);
    return running;
}

void run_progress(struct run *r, uint64_t *ops, uint64_t *errors) {
    *ops = *errors = 0;
    for (int i = 0; i < r->nworkers; i++) {
        *ops += atomic_load_explicit(&r->workers[i].prog_ops, memory_order_relaxed);
        *errors += atomic_load_explicit(&r->workers[i].prog_err, memory_order_relaxed);
    }
}

void run_finish(struct run *r, struct stats *out, double *elapsed_s) {
    uint64_t first = UINT64_MAX, last = 0;
    stats_init(out);
    for (int i = 0; i < r->nworkers; i++) {
        struct worker *w = &r->workers[i];
        pthread_join(w->thr, NULL);
        stats_merge(out, w->st);
        if (w->begun && w->t0 < first)
            first = w->t0;
        if (w->t_last > last)
            last = w->t_last;
        worker_free(w);
    }
    *elapsed_s = first == UINT64_MAX || last < first ? 0 : (double)(last - first) / 1e9;
    keyspace_free(&r->ks);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r->workers);
    free(r->values);
    free(r->fnames);
    free(r->fnlen);
    free(r);
}
