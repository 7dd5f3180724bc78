/* rpc_backup.c -- replication-mode rpc: backups replicate through their
 * workers, the paper's RPC-KV baseline (Rowan-KV §6). It exists so the
 * benchmark can show what the one b-log and the control thread buy; it
 * keeps the same guarantees, only the backup-side work moves:
 *
 *   rowan: the control thread copies each message into the ONE b-log,
 *          persists once per round and acks; a digest thread indexes later.
 *   rpc:   after the hello, the control thread hands the link to a worker
 *          (round robin). The worker parses and checks every message,
 *          appends it to its OWN backup log (one more write stream per
 *          worker), hands it to the index logic at once (digest_feed, on
 *          the worker's CPU, between client requests), and acks once its
 *          group-commit flush has made the messages durable.
 *
 * Same message format (blocks of a capped link reassembled as by the
 * control thread, tcp_blocks.c), same cumulative acks, same CommitVer ordering
 * before anything becomes visible on the backup. A backup log segment is
 * committed as soon as it is flushed (its entries are indexed already). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/event.h>
#include "digest.h"
#include "log.h"
#include "pool.h"
#include "rpc_backup.h"
#include "server.h"
#include "syncer.h"
#include "transport.h"
#include "worker.h"

typedef struct rpcb_conn {
    int fd, node, sender;
    struct event *ev;
    uint8_t *buf;
    size_t len, cap;
    repl_rx rx;            /* the hello's cap, the entry in reassembly */
    uint64_t landed;       /* messages appended to the backup log */
    uint64_t sync_upto;    /* ... covered by the flush in flight */
    int dead;
    struct rpcb_conn *next;
    struct worker *w;
} rpcb_conn;

typedef struct rpcb_inbox_item {
    int fd, node, sender;
    uint32_t msg_max;
    uint8_t *bytes;
    size_t n;
    struct rpcb_inbox_item *next;
} rpcb_inbox_item;

struct rpcb {
    log_writer log;        /* this worker's backup log */
    rpcb_conn *conns;
    int dirty;             /* appended since the last flush was launched */
    int syncing;
    _Atomic int done;
    log_flush flush;       /* what the running flush covers of the log */
    pthread_mutex_t mu;    /* guards inbox */
    rpcb_inbox_item *inbox;
};

static _Atomic unsigned next_worker;
/* Shutdown frees the workers' rpcb (workers_join) while the control thread
 * still runs and may hand over a link: adopt_mu orders the two, and a
 * worker without one closes the link instead. Process-wide: it only
 * serializes hand-overs, which are rare. */
static pthread_mutex_t adopt_mu = PTHREAD_MUTEX_INITIALIZER;

void rpcb_worker_init(worker *w) {
    if (server.cfg.replication_mode != REPL_MODE_RPC) return;
    struct rpcb *b = calloc(1, sizeof(*b));
    log_writer_init(&b->log, server.pool, OWNER_CONTROL, (uint16_t)(1 + w->id));
    b->log.on_sealed = log_writer_commit_sealed;
    pthread_mutex_init(&b->mu, NULL);
    w->rpcb = b;
}

static void conn_free(rpcb_conn *c) {
    if (c->ev) event_free(c->ev);
    close(c->fd);
    repl_rx_taken(&c->rx);
    free(c->buf);
    free(c);
}

void rpcb_worker_free(worker *w) {
    pthread_mutex_lock(&adopt_mu);
    struct rpcb *b = w->rpcb;
    w->rpcb = NULL;   /* no link is handed to it from now on */
    pthread_mutex_unlock(&adopt_mu);
    if (!b) return;
    while (b->conns) {
        rpcb_conn *c = b->conns;
        b->conns = c->next;
        conn_free(c);
    }
    /* links handed over after the worker's last round (at shutdown) */
    while (b->inbox) {
        rpcb_inbox_item *it = b->inbox;
        b->inbox = it->next;
        close(it->fd);
        free(it->bytes);
        free(it);
    }
    log_writer_seal(&b->log);
    log_writer_free(&b->log);
    free(b);
}

void rpcb_adopt(int fd, int node, int sender, uint32_t msg_max, const void *pending, size_t n) {
    worker *w = server.workers[atomic_fetch_add(&next_worker, 1) % (unsigned)server.nworkers];
    rpcb_inbox_item *it = calloc(1, sizeof(*it));
    it->fd = fd;
    it->node = node;
    it->sender = sender;
    it->msg_max = msg_max;
    it->bytes = malloc(n ? n : 1);
    memcpy(it->bytes, pending, n);
    it->n = n;
    pthread_mutex_lock(&adopt_mu);
    struct rpcb *b = w->rpcb;
    if (b) {
        pthread_mutex_lock(&b->mu);
        it->next = b->inbox;
        b->inbox = it;
        pthread_mutex_unlock(&b->mu);
        worker_wake(w);
    }
    pthread_mutex_unlock(&adopt_mu);
    if (!b) {   /* shutting down: nobody will serve it */
        close(fd);
        free(it->bytes);
        free(it);
    }
}

/* Append, check and index every complete message; -1 if the link must go. */
static int conn_consume(rpcb_conn *c) {
    struct rpcb *b = c->w->rpcb;
    size_t pos = 0;
    char why[256];
    for (;;) {
        const uint8_t *p;
        size_t span;
        long took = repl_rx_next(&c->rx, c->buf + pos, c->len - pos, c->landed + 1, &p, &span,
                                 why, sizeof(why));
        if (took < 0) goto bad;
        if (took == 0) break;
        pos += (size_t)took;
        if (!p) continue;   /* a block of an entry still incomplete */
        log_entry e;
        size_t len = log_entry_check(p, span, &e);
        if (!len) {
            snprintf(why, sizeof(why), "a message fails its checksum");
            goto bad;
        }
        uint64_t off = log_writer_reserve(&b->log, len, -1);
        if (!off) {
            snprintf(why, sizeof(why), "the pool is full");
            goto bad;
        }
        memcpy(log_writer_dst(&b->log, off, len), p, len);
        log_writer_wrote(&b->log, off, len);
        repl_rx_taken(&c->rx);
        log_entry_decode(pool_ptr(server.pool, off), &e);
        digest_feed(&e, off);
        c->landed++;
        b->dirty = 1;
    }
    memmove(c->buf, c->buf + pos, c->len - pos);
    c->len -= pos;
    return 0;
bad:
    serverLog(LL_WARNING, "Replication (rpc) link from node %d closed: %s", c->node, why);
    return -1;
}

static void conn_read_cb(evutil_socket_t fd, short what, void *arg) {
    rpcb_conn *c = arg;
    for (int rounds = 0; rounds < 64; rounds++) {
        if (c->cap - c->len < 65536) {
            c->cap = c->cap ? c->cap * 2 : 262144;
            c->buf = realloc(c->buf, c->cap);
        }
        size_t want = c->cap - c->len;
        ssize_t n = recv(fd, c->buf + c->len, want, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0 || (c->len += (size_t)n, conn_consume(c) != 0)) {
            c->dead = 1;
            event_del(c->ev);
            return;
        }
        if ((size_t)n < want) return; /* drained (level-triggered event) */
    }
}

static void send_ack(rpcb_conn *c, uint64_t count) {
    if (tcp_send_ack(c->fd, count) != 0) {
        c->dead = 1;
        event_del(c->ev);
    }
}

static void adopt_inbox(worker *w) {
    struct rpcb *b = w->rpcb;
    pthread_mutex_lock(&b->mu);
    rpcb_inbox_item *it = b->inbox;
    b->inbox = NULL;
    pthread_mutex_unlock(&b->mu);
    while (it) {
        rpcb_inbox_item *next = it->next;
        rpcb_conn *c = calloc(1, sizeof(*c));
        c->fd = it->fd;
        c->node = it->node;
        c->sender = it->sender;
        c->rx.msg_max = it->msg_max;
        c->w = w;
        c->cap = it->n + 262144;
        c->buf = malloc(c->cap);
        memcpy(c->buf, it->bytes, it->n);
        c->len = it->n;
        c->ev = event_new(w->base, c->fd, EV_READ | EV_PERSIST, conn_read_cb, c);
        event_add(c->ev, NULL);
        c->next = b->conns;
        b->conns = c;
        if (conn_consume(c) != 0) c->dead = 1;
        free(it->bytes);
        free(it);
        it = next;
    }
}

void rpcb_worker_round(worker *w) {
    struct rpcb *b = w->rpcb;
    if (!b) return;
    adopt_inbox(w);
    if (b->syncing && atomic_load(&b->done)) {
        for (rpcb_conn *c = b->conns; c; c = c->next)
            if (!c->dead && c->sync_upto) send_ack(c, c->sync_upto);
        log_writer_flushed(&b->log, &b->flush);
        b->syncing = 0;
    }
    if (!b->syncing && b->dirty) {
        for (rpcb_conn *c = b->conns; c; c = c->next) c->sync_upto = c->landed;
        b->dirty = 0;
        if (pool_is_pmem(server.pool)) {
            log_writer_sync(&b->log);   /* persisted as written */
            for (rpcb_conn *c = b->conns; c; c = c->next)
                if (!c->dead && c->sync_upto) send_ack(c, c->sync_upto);
        } else {
            log_writer_detach(&b->log, &b->flush);
            atomic_store(&b->done, 0);
            b->syncing = 1;
            syncer_submit(w, &b->done);
        }
    }
    for (rpcb_conn **pp = &b->conns; *pp;) {
        rpcb_conn *c = *pp;
        if (c->dead && !b->syncing) {
            *pp = c->next;
            conn_free(c);
        } else {
            pp = &c->next;
        }
    }
}
