/* worker.c -- worker threads and the group commit that gates replies.
 *
 * Each worker runs its own libevent base. The client port has one listening
 * socket per `bind` address (listen.c: no SO_REUSEPORT, so a second server
 * on the port fails instead of taking half the connections); worker 0
 * accepts on all of them and hands each new connection to the next worker
 * in turn, before anything is read from it, so no request is ever handed
 * between threads.
 *
 * The loop is redis-server's: event_base_loop(EVLOOP_ONCE) runs every ready
 * event (reading and executing commands); a standalone worker about to
 * flush then runs what arrived meanwhile (worker_drain) and may wait briefly
 * for the clients its last replies released (worker_gather), then
 * before_sleep():
 *   1. lands every batch whose flush completed: the shards it
 *      touched learn that this worker's versions in it are durable, which
 *      may move their watermarks (and seals the segments it filled),
 *   2. commits the round's batch. Standalone on block storage the worker
 *      flushes it itself (fdatasync of the pool) and it lands now, as
 *      redis-server's `appendfsync always` writes and fsyncs in its loop:
 *      what arrives meanwhile waits in the sockets and joins the next
 *      round's flush. This replaced handing each batch to a flush thread
 *      per worker and serving on during the flush (pipelined group commit):
 *      on the 2-core VM, shared with other work, the server is CPU-bound and
 *      the two thread hand-offs per flush (wake the flush thread, wake the
 *      worker back) cost more than the overlap won: 3.6-4.1 against
 *      4.05-4.6 CPU-seconds per million SETs at -P 16, 1.37x against 1.15x
 *      redis always (medians of 5 rounds, BENCHMARKS.md, issue 14). With
 *      replicas the batch still goes to the syncer threads (syncer.c), with
 *      up to SHARD_FLIGHTS batches in flight while the backups ack, and so
 *      does it while the device is slow (a flush over 20 ms, syncer.c): a
 *      stuck flush then does not stop the worker serving; on pmem it was
 *      persisted as written and lands now,
 *   3. wakes the other workers if a watermark moved while they wait on it,
 *   4. writes out every reply whose dependencies are now durable.
 * A reply is only written in step 4 and only once its versions are at or
 * below the watermarks, so no reply ever leaves ahead of its data.
 *
 * Loading: the workers run (and accept) while recovery rebuilds the data
 * set, so the port answers at once; until server_loading() turns 0 the
 * dispatcher refuses what would read the data set (-LOADING) and the loop
 * skips everything that touches shards (expiry, blocking, replication,
 * group commit: nothing was written).
 *
 * Cross-thread signals (wakeups, handed connections, CLIENT KILL, SHUTDOWN)
 * use event_active on the worker's events; libevent's pthread support makes
 * that safe. */
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include "worker.h"
#include "clean.h"
#include "control.h"
#include "listen.h"
#include "server.h"
#include "shard.h"
#include "syncer.h"
#include "edge.h"         /* the client edge: sessions, commands (edge->...) */
#include "repl.h"
#include "rpc_backup.h"

static void worker_before_sleep(worker *w);

/* ---------------- per-round bookkeeping ---------------- */

void worker_touch_shard(worker *w, uint16_t sid) {
    struct batch *b = &w->slots[w->acc];
    if (b->mark[sid]) return;
    b->mark[sid] = 1;
    b->shards[b->nshards++] = sid;
}

void worker_add_pending(worker *w, struct client *c) {
    for (int i = 0; i < w->npending; i++)
        if (w->pending[i] == c) return;
    if (w->npending == w->cappending) {
        w->cappending = w->cappending ? w->cappending * 2 : 64;
        w->pending = realloc(w->pending, (size_t)w->cappending * sizeof(struct client *));
    }
    w->pending[w->npending++] = c;
}

void worker_remove_pending(worker *w, struct client *c) {
    for (int i = 0; i < w->npending; i++) {
        if (w->pending[i] == c) {
            w->pending[i] = w->pending[--w->npending];
            return;
        }
    }
}

void worker_wake(worker *w) { event_active(w->wake_ev, EV_READ, 0); }

void worker_count_command(worker *w, struct rcommand *cmd, int64_t dt, int failed) {
    int i;
    for (i = 0; i < w->nround_cmds && w->round_cmds[i] != cmd; i++) {}
    if (i == w->nround_cmds) {
        if (i == edge->stat_rows()) return; /* cannot happen: one slot per row */
        w->round_cmds[i] = cmd;
        w->round_calls[i] = w->round_usec[i] = w->round_failed[i] = 0;
        w->nround_cmds++;
    }
    w->round_calls[i]++;
    w->round_usec[i] += dt;
    w->round_failed[i] += failed;
    w->round_numcommands++;
}

static void worker_fold_stats(worker *w) {
    for (int i = 0; i < w->nround_cmds; i++) {
        edge->stat_fold(w->round_cmds[i], w->round_calls[i], w->round_usec[i], w->round_failed[i]);
    }
    w->nround_cmds = 0;
    if (w->round_numcommands) atomic_fetch_add(&server.stat.numcommands, w->round_numcommands);
    w->round_numcommands = 0;
    if (w->round_hits) atomic_fetch_add(&server.stat.keyspace_hits, w->round_hits);
    if (w->round_misses) atomic_fetch_add(&server.stat.keyspace_misses, w->round_misses);
    w->round_hits = w->round_misses = 0;
    if (w->round_held) atomic_fetch_add(&server.stat.held_replies, w->round_held);
    w->round_held = 0;
}

void server_wake_workers(void) {
    /* a start that failed may have made fewer workers than nworkers, or none */
    for (int i = 0; server.workers && i < server.nworkers; i++)
        if (server.workers[i]) worker_wake(server.workers[i]);
}

void server_request_shutdown(void) {
    atomic_store(&server.shutdown_asap, 1);
    server_wake_workers();
}

/* landed_gen: one below the oldest batch not yet durable (a syncing one, or
 * else the accumulating one). Batches may land in any order. */
static void publish_landed(worker *w) {
    uint64_t oldest = w->slots[w->acc].gen;
    for (int i = 0; i < SHARD_SLOTS; i++)
        if (w->slots[i].syncing && w->slots[i].gen < oldest) oldest = w->slots[i].gen;
    atomic_store(&w->landed_gen, oldest - 1);
}

/* Publish a durable batch: the shards it touched learn that this worker's
 * versions in it are durable, and the segments it filled are sealed.
 * Returns 1 if some shard's watermark moved. */
static int batch_land(worker *w, int slot) {
    struct batch *b = &w->slots[slot];
    int moved = 0;
    for (int i = 0; i < b->nshards; i++) {
        moved |= shard_worker_landed(&server.shards[b->shards[i]], w->id, slot);
        b->mark[b->shards[i]] = 0;
    }
    /* seal the segments its flush covered, record how far the t-log is durable */
    log_writer_flushed(&w->tlog, &b->flush);
    b->flush = (log_flush){.head = -1};
    repl_batch_reset(w, b);
    b->nshards = 0;
    if (b->syncing) w->nsyncing--;
    b->syncing = 0;
    publish_landed(w);
    return moved;
}

/* Land every batch whose flush completed and that every backup it went to
 * has acked (force: regardless of the local flush, after a sync of our own
 * at shutdown; never regardless of the replicas). Order does not matter:
 * see shard.h. */
/* Is b's local flush done? If not, ask its flusher to wake us when it is
 * (done 0 -> 2): a batch whose backups have acked waits only for that.
 * The control thread's flushes (control_submit_flush) wake a worker only
 * then: one that still waits for acks is woken by them, not by the flush
 * as well (issue 14: one wake-up fewer per batch). */
static int batch_flushed(struct batch *b) {
    int d = 0;
    if (atomic_compare_exchange_strong(&b->done, &d, 2)) return 0;
    return d == 1;
}

static int worker_land(worker *w, int force) {
    int moved = 0;
    for (int i = 0; i < SHARD_SLOTS; i++) {
        struct batch *b = &w->slots[i];
        if (b->syncing && repl_batch_replicated(w, b) && (force || batch_flushed(b)))
            moved |= batch_land(w, i);
    }
    return moved;
}

/* Close the accumulating batch. Standalone, it lands at once: on pmem it is
 * durable already, on a fast block device this worker flushes it here.
 * Otherwise (replicas, or a slow device) it goes to the syncer (or, on pmem,
 * only waits for the backups) and a free slot starts accumulating; with
 * every flight slot busy the batch keeps accumulating until one lands. */
static void wake_worker_cb(void *w) { worker_wake(w); }

static int worker_launch(worker *w) {
    struct batch *b = &w->slots[w->acc];
    /* A batch without versions still carries a segment handed to the
     * cleaner (worker_handover): it is sealed when its flush lands. */
    if (b->nshards == 0 && w->tlog.nclosed == 0) return 0;
    int is_pmem = pool_is_pmem(server.pool);
    if (!repl_active() && (is_pmem || syncer_device_fast())) {
        if (is_pmem) {
            log_writer_sync(&w->tlog); /* seals filled segments; entries were persisted as written */
        } else {
            /* block storage, standalone, fast device: inline (file comment) */
            log_flush f;
            log_writer_detach(&w->tlog, &f);
            syncer_flush_now();
            log_writer_flushed(&w->tlog, &f);
        }
        int moved = batch_land(w, w->acc);
        w->slots[w->acc].gen = ++w->next_gen;
        publish_landed(w);
        return moved;
    }
    if (w->nsyncing == SHARD_FLIGHTS) return 0;
    repl_batch_close(w, b);
    b->syncing = 1;
    w->nsyncing++;
    if (is_pmem) {
        /* persisted as written; only the replicas are awaited */
        log_writer_sync(&w->tlog);
        atomic_store(&b->done, 1);
    } else {
        log_writer_detach(&w->tlog, &b->flush);
        atomic_store(&b->done, 0);
        /* with replicas, the control thread's b-log flush covers it too */
        if (control_submit_flush(&b->done, wake_worker_cb, w) != 0) syncer_submit(w, &b->done);
    }
    for (int i = 0; i < SHARD_SLOTS; i++) {
        if (!w->slots[i].syncing) {
            w->acc = i;
            break;
        }
    }
    w->slots[w->acc].gen = ++w->next_gen;
    return 0;
}

static void wake_waiting_workers(worker *self) {
    atomic_thread_fence(memory_order_seq_cst);
    for (int i = 0; i < server.nworkers; i++) {
        worker *o = server.workers[i];
        if (o != self && atomic_load(&o->waiting)) worker_wake(o);
    }
}

/* Remember the socket of a client whose replies all left (gather). */
static void note_released(worker *w, int fd) {
    if (w->nreleased == w->capreleased) {
        w->capreleased = w->capreleased ? w->capreleased * 2 : 64;
        w->released = realloc(w->released, (size_t)w->capreleased * sizeof(int));
    }
    w->released[w->nreleased++] = fd;
}

static void worker_flush_clients(worker *w) {
    int waiting = 0;
    w->nreleased = 0;
    /* Announce that we may wait BEFORE reading any watermark: a worker that
     * moves a watermark after our check then sees the flag and wakes us
     * (the fences make this store/load pair sequentially consistent). */
    if (w->npending) {
        atomic_store(&w->waiting, 1);
        atomic_thread_fence(memory_order_seq_cst);
    }
    /* client_flush may remove c from the pending list (done or closed), so
     * walk backwards. */
    for (int i = w->npending - 1; i >= 0; i--) {
        if (i >= w->npending) continue;
        struct client *c = w->pending[i];
        int fd = edge->fd(c);
        if (edge->flush(c) == 1) waiting = 1;
        else note_released(w, fd);
    }
    atomic_store(&w->waiting, waiting);
}

/* A refused write asked every log writer for its current segment (clean.h):
 * leave it if the cleaner would win enough from it. Its dead bytes (and
 * unused tail) are then reclaimable once the launch below seals it. */
static void worker_handover(worker *w) {
    uint64_t g = clean_handover_gen();
    if (g == w->handover_seen) return;
    w->handover_seen = g;
    if (clean_should_take(&w->tlog)) log_writer_leave(&w->tlog);
}

/* Gather: before an inline flush, wait a little for the clients whose
 * replies the previous round released. With clients that send one request
 * per reply (redis-benchmark -P 1), a worker's clients otherwise split into
 * two cohorts that take turns: one flushes while the other's requests
 * arrive, so every request waits for two flushes and each flush carries
 * half the clients (measured: 13-15 SETs per flush with 25 clients per
 * worker; redis-server, one thread, carried 42 of 50). Waiting a fraction
 * of a flush for the requests the last replies are about to bring merges
 * the cohorts: one flush per round of the worker's clients, half the
 * flushes' CPU, and a request waits for one flush instead of two.
 * The wait blocks in ppoll on those sockets (no spinning: the CPU is
 * shared with the clients), ends as soon as each of them has a request
 * executed (it is pending again) or at GATHER_PCT of the last flush's
 * duration, at most GATHER_MAX_US. Only a standalone worker flushing
 * inline gathers, only when it has something to flush, and only for
 * request-reply clients (at most one command per client this round). */
#define GATHER_PCT 50
#define GATHER_MAX_US 400
#define GATHER_CLIENTS 64

static int pending_has_fd(worker *w, int fd) {
    for (int i = 0; i < w->npending; i++)
        if (edge->fd(w->pending[i]) == fd) return 1;
    return 0;
}

static void worker_gather(worker *w) {
    if (!w->nreleased || server_loading() || repl_active() || pool_is_pmem(server.pool) ||
        !syncer_device_fast() || w->slots[w->acc].nshards == 0)
        return;
    /* Pipelining clients (more commands this round than clients with
     * replies) fill a flush already, and so do more than GATHER_CLIENTS
     * released clients: waiting would only delay them. */
    if (w->round_numcommands > w->npending || w->nreleased > GATHER_CLIENTS) {
        w->nreleased = 0;
        return;
    }
    int64_t budget = syncer_last_flush_us() * GATHER_PCT / 100;
    if (budget > GATHER_MAX_US) budget = GATHER_MAX_US;
    int64_t end = monotonic_us() + budget;
    struct pollfd pfd[GATHER_CLIENTS];
    for (;;) {
        int n = 0;
        for (int i = 0; i < w->nreleased; i++) {
            int fd = w->released[i];
            if (fd >= 0 && !pending_has_fd(w, fd)) pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        }
        int64_t left = end - monotonic_us();
        if (n == 0 || left <= 0) break;
        struct timespec ts = {.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
        if (ppoll(pfd, (nfds_t)n, &ts, NULL) <= 0) break;
        event_base_loop(w->base, EVLOOP_NONBLOCK);
        /* A socket that was ready and still has no reply pending (closed,
         * or a request not complete yet) is not waited for again: ppoll
         * would return at once for it until the deadline. */
        for (int i = 0; i < n; i++)
            if (pfd[i].revents && !pending_has_fd(w, pfd[i].fd))
                for (int j = 0; j < w->nreleased; j++)
                    if (w->released[j] == pfd[i].fd) w->released[j] = -1;
    }
    w->nreleased = 0;
}

/* Drain: before an inline flush, run what arrived while the round ran,
 * without sleeping: one epoll_wait with no timeout per pass, repeated while
 * a pass executed commands (at most DRAIN_PASSES). The flush costs the same
 * CPU and device time however much it carries, and on the shared 2-core VM
 * the server is CPU-bound whenever the device is fast (BENCHMARKS.md, issue
 * 14, third pass): at redis-benchmark -P 16 a worker's round carried about
 * 14 of its 25 clients (230 SETs per flush); requests that landed during
 * the round then waited in the sockets for a whole flush. Unlike gather it
 * never waits for a client, so it cannot cost a scheduling delay. */
#define DRAIN_PASSES 4

static void worker_drain(worker *w) {
    if (server_loading() || repl_active() || pool_is_pmem(server.pool) || !syncer_device_fast())
        return;
    for (int i = 0; i < DRAIN_PASSES && w->slots[w->acc].nshards; i++) {
        long long before = w->round_numcommands;
        event_base_loop(w->base, EVLOOP_NONBLOCK);
        if (w->round_numcommands == before) break;
    }
}

static void worker_before_sleep(worker *w) {
    /* pubsub: write messages other workers published to our clients. */
    edge->round_begin(w);
    worker_fold_stats(w);
    if (!server_loading()) {
        /* blocking: serve clients blocked on keys that got elements
         * (BLPOP...); before the launch, so their pops join this round's
         * batch. */
        edge->round_ready(w);
        repl_worker_round(w);
        rpcb_worker_round(w);
        int moved = worker_land(w, 0);
        worker_handover(w);
        moved |= worker_launch(w);
        if (moved) wake_waiting_workers(w);
    }
    edge->evict();   /* maxmemory-clients: before output goes to evicted clients */
    worker_flush_clients(w);
    if (atomic_exchange(&w->kill_pending, 0)) edge->reap_killed(w);
    if (w->round_end) w->round_end(w->round_end_arg);
}

/* ---------------- events ---------------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    if (atomic_load(&server.shutdown_asap)) event_base_loopbreak(w->base);
}

static void cron_cb(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    /* before_sleep follows: held replies past replication-timeout fail there */
    if (!server_loading() && !atomic_load(&server.active_expire_off)) {
        db_ctx_reset(&w->x);
        db_active_expire(&w->x, 200);
    }
    edge->cron(w);
}

/* ---------------- accepting ---------------- */

/* The client port's listening sockets, bound by workers_listen() before the
 * pool is opened; worker 0's loop accepts on them. */
/* This file's state, one per server (server.h). */
struct listen_state {
    int listen_fds[16];
    int listen_tls[16];   /* the socket is a tls-port one */
    int nlisten;
    struct evconnlistener *listeners[16];
    unsigned next_worker;   /* the worker the next accepted connection goes to */
};

void listen_state_new(void) {
    struct listen_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.listen_st = st;
}

void listen_state_free(void) {
    free(server.listen_st);   /* its sockets closed by workers_join */
    server.listen_st = NULL;
}

#define listen_fds (server.listen_st->listen_fds)
#define listen_tls (server.listen_st->listen_tls)   /* the socket is a tls-port one */
#define nlisten (server.listen_st->nlisten)
#define listeners (server.listen_st->listeners)

/* A connection accepted by worker 0 for another worker. */
struct handoff {
    int fd;
    int tls;
    int salen;
    struct sockaddr_storage sa;
};

static void handoff_cb(evutil_socket_t fd, short what, void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->handoff_mu);
    struct handoff *q = w->handoffs;
    int n = w->nhandoffs;
    w->handoffs = NULL;
    w->nhandoffs = w->caphandoffs = 0;
    pthread_mutex_unlock(&w->handoff_mu);
    for (int i = 0; i < n; i++) edge->accept(w, q[i].fd, q[i].tls, (struct sockaddr *)&q[i].sa, q[i].salen);
    free(q);
}

static void handoff_push(worker *w, int fd, int tls, const struct sockaddr *sa, int salen) {
    pthread_mutex_lock(&w->handoff_mu);
    if (w->nhandoffs == w->caphandoffs) {
        w->caphandoffs = w->caphandoffs ? w->caphandoffs * 2 : 16;
        w->handoffs = realloc(w->handoffs, (size_t)w->caphandoffs * sizeof(struct handoff));
    }
    struct handoff *h = &w->handoffs[w->nhandoffs++];
    h->fd = fd;
    h->tls = tls;
    h->salen = salen < (int)sizeof(h->sa) ? salen : (int)sizeof(h->sa);
    memcpy(&h->sa, sa, (size_t)h->salen);
    pthread_mutex_unlock(&w->handoff_mu);
    event_active(w->handoff_ev, EV_READ, 0);
}

/* Runs on worker 0: connections go to the workers in turn. arg is the
 * listener's index (which tells a tls-port socket). */
static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg) {
    int tls = listen_tls[(intptr_t)arg];
    worker *w = server.workers[server.listen_st->next_worker++ % (unsigned)server.nworkers];
    if (w == server.workers[0]) edge->accept(w, fd, tls, sa, salen);
    else handoff_push(w, fd, tls, sa, salen);
}

static void accept_error_cb(struct evconnlistener *l, void *arg) {
    int err = EVUTIL_SOCKET_ERROR();
    serverLog(LL_WARNING, "Accepting client connection: %s", evutil_socket_error_to_string(err));
}

/* ---------------- creation ---------------- */

/* The errors an optional ("-addr") bind address may fail with and be
 * skipped, as in redis-server: the address or protocol does not exist here. */
static int optional_ok(int e) {
    return e == EADDRNOTAVAIL || e == ENOPROTOOPT || e == EPROTONOSUPPORT ||
           e == ESOCKTNOSUPPORT || e == EPFNOSUPPORT || e == EAFNOSUPPORT;
}

/* Listen on port (tls: a tls-port) at every `bind` address. */
static int listen_port(int port, int tls, char *err, size_t errlen) {
    char *copy = strdup(server.cfg.bind), *save = NULL;
    int rc = 0;
    for (char *a = strtok_r(copy, " ", &save); a && rc == 0; a = strtok_r(NULL, " ", &save)) {
        int optional = a[0] == '-';
        if (optional) a++;
        if (nlisten == (int)(sizeof(listen_fds) / sizeof(listen_fds[0]))) {
            snprintf(err, errlen, "Too many bind addresses");
            rc = -1;
            break;
        }
        char why[256];
        int fd = listen_tcp(a, port, server.cfg.tcp_backlog, why, sizeof(why));
        if (fd >= 0) {
            listen_tls[nlisten] = tls;
            listen_fds[nlisten++] = fd;
            continue;
        }
        int e = errno;
        snprintf(err, errlen, "Could not create server %s listening socket %s:%d: %s",
                 tls ? "TLS" : "TCP", a, port, why);
        if (optional && optional_ok(e)) {
            serverLog(LL_WARNING, "Warning: %s", err);
            continue;
        }
        rc = -1;
    }
    free(copy);
    return rc;
}

/* port 0 opens no plain TCP listener, tls-port 0 no TLS one (Redis); a TLS
 * one needs tls_configure() done. */
int workers_listen(char *err, size_t errlen) {
    int rc = 0;
    if (server.cfg.port > 0) rc = listen_port(server.cfg.port, 0, err, errlen);
    if (rc == 0 && server.cfg.tls_port > 0) rc = listen_port(server.cfg.tls_port, 1, err, errlen);
    if (rc == 0 && nlisten == 0) {
        snprintf(err, errlen, "Configured to not listen anywhere");
        rc = -1;
    }
    if (rc != 0) {
        for (int i = 0; i < nlisten; i++) close(listen_fds[i]);
        nlisten = 0;
    }
    return rc;
}

/* Worker 0 accepts on every listening socket. */
static int worker_attach_listeners(worker *w, char *err, size_t errlen) {
    for (int i = 0; i < nlisten; i++) {
        /* backlog 0: the socket is listening already */
        listeners[i] = evconnlistener_new(w->base, accept_cb, (void *)(intptr_t)i,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
                                          listen_fds[i]);
        if (!listeners[i]) {
            snprintf(err, errlen, "Could not accept on the client port: %s", strerror(errno));
            return -1;
        }
        evconnlistener_set_error_cb(listeners[i], accept_error_cb);
    }
    return 0;
}

/* Everything worker_new made (its thread joined, its sessions freed). */
static void worker_free(worker *w) {
    if (w->wake_ev) event_free(w->wake_ev);
    if (w->handoff_ev) event_free(w->handoff_ev);
    if (w->cron_ev) event_free(w->cron_ev);
    if (w->base) event_base_free(w->base);
    pthread_mutex_destroy(&w->handoff_mu);
    db_ctx_free(&w->x);
    for (int i = 0; i < SHARD_SLOTS; i++) {
        free(w->slots[i].shards);
        free(w->slots[i].mark);
    }
    free(w->round_cmds);
    free(w->round_calls);
    free(w->round_usec);
    free(w->round_failed);
    free(w->pending);
    free(w->released);
    free(w);
}

void workers_free(void) {
    for (int i = 0; server.workers && i < server.nworkers; i++)
        if (server.workers[i]) worker_free(server.workers[i]);
    free(server.workers);
    server.workers = NULL;
}

static worker *worker_new(int id, char *err, size_t errlen) {
    worker *w = calloc(1, sizeof(*w));
    w->id = id;
    struct event_config *cfg = event_config_new();
    w->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    w->wake_ev = event_new(w->base, -1, EV_PERSIST, wake_cb, w);
    w->handoff_ev = event_new(w->base, -1, EV_PERSIST, handoff_cb, w);
    pthread_mutex_init(&w->handoff_mu, NULL);
    w->cron_ev = event_new(w->base, -1, EV_PERSIST, cron_cb, w);
    int hz = server.cfg.hz > 0 ? server.cfg.hz : 10;
    struct timeval tv = {0, 1000000 / hz};
    event_add(w->cron_ev, &tv);
    log_writer_init(&w->tlog, server.pool, OWNER_WORKER, (uint16_t)id);
    w->tlog.on_sealed = log_writer_commit_sealed;
    db_ctx_init(&w->x, w, id);
    for (int i = 0; i < SHARD_SLOTS; i++) {
        w->slots[i].shards = calloc((size_t)server.nshards, sizeof(uint16_t));
        w->slots[i].mark = calloc((size_t)server.nshards, 1);
        w->slots[i].flush.head = -1;
    }
    repl_worker_init(w);
    rpcb_worker_init(w);
    w->slots[0].gen = w->next_gen = 1;
    int nc = edge->stat_rows();
    w->round_cmds = calloc((size_t)nc, sizeof(*w->round_cmds));
    w->round_calls = calloc((size_t)nc, sizeof(long long));
    w->round_usec = calloc((size_t)nc, sizeof(long long));
    w->round_failed = calloc((size_t)nc, sizeof(long long));
    if (id == 0 && worker_attach_listeners(w, err, errlen) != 0) {
        worker_free(w);
        return NULL;
    }
    return w;
}

int workers_create(int n, char *err, size_t errlen) {
    evthread_use_pthreads();
    server.nworkers = n;
    server.workers = calloc((size_t)n, sizeof(worker *));
    for (int i = 0; i < n; i++) {
        server.workers[i] = worker_new(i, err, errlen);
        if (!server.workers[i]) return -1;
    }
    return 0;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    char name[16];
    snprintf(name, sizeof(name), "rowan-w%d", w->id);
    pthread_setname_np(pthread_self(), name);
    while (!atomic_load(&server.shutdown_asap)) {
        w->round_held_us = 0;   /* gate.c: this round's held replies are stamped anew */
        event_base_loop(w->base, EVLOOP_ONCE);
        worker_drain(w);
        worker_gather(w);
        worker_before_sleep(w);
    }
    /* Shutting down: what was appended is synced, replies that can still go
     * out do, then every connection closes. */
    log_writer_sync(&w->tlog);
    pool_sync_all(server.pool);
    worker_land(w, 1);
    if (!repl_active()) {
        /* single node: the final sync made everything durable */
        struct batch *b = &w->slots[w->acc];
        b->syncing = 1;
        w->nsyncing++;
        batch_land(w, w->acc);
        atomic_store(&w->landed_gen, UINT64_MAX);
    }
    /* with replicas, what they have not acked stays held: those clients
     * lose their connection without an acknowledgement */
    worker_flush_clients(w);
    if (w->round_end) w->round_end(w->round_end_arg);
    return NULL;
}

void workers_start(void) {
    syncer_start(server.nworkers);
    for (int i = 0; i < server.nworkers; i++)
        server.workers[i]->running =
            rowan_thread_create(&server.workers[i]->thread, NULL, worker_main, server.workers[i]) == 0;
}

void workers_join(void) {
    /* the syncer outlives the workers: the control thread may still flush
     * (main stops it after replication); a start that failed may have made
     * fewer workers, or started none */
    for (int i = 0; server.workers && i < server.nworkers; i++)
        if (server.workers[i] && server.workers[i]->running) {
            pthread_join(server.workers[i]->thread, NULL);
            server.workers[i]->running = 0;
        }
    for (int l = 0; l < nlisten; l++) {
        if (listeners[l]) evconnlistener_free(listeners[l]);   /* closes the socket */
        else close(listen_fds[l]);
        listeners[l] = NULL;
    }
    nlisten = 0;
    for (int i = 0; server.workers && i < server.nworkers; i++) {
        worker *w = server.workers[i];
        if (!w) continue;
        for (int h = 0; h < w->nhandoffs; h++) close(w->handoffs[h].fd); /* never served */
        free(w->handoffs);
        w->handoffs = NULL;
        w->nhandoffs = 0;
        edge->free_all(w);
        repl_worker_free(w);
        rpcb_worker_free(w);
        log_writer_seal(&w->tlog);
    }
}
