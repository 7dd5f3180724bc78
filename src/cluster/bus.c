/* bus.c -- the cluster bus (see bus.h for the protocol and its threads).
 *
 * All connection state lives on the bus thread; other threads talk to it
 * through one job queue (calls to send, responses to send, sockets to
 * adopt), guarded by a mutex and announced by activating the thread's wake
 * event. Connections are libevent bufferevents.
 *
 * Outgoing connections (one per peer, for our requests) are opened on
 * demand and dropped on any error; the calls waiting on one then fail at
 * once, and the next call opens a new one. A request is written only once:
 * whether the peer executed a request that failed is unknown to the
 * caller, so requests must be safe to repeat (every request here is a
 * question, or asks for something the asker checks for itself).
 *
 * Incoming connections live in a table of slots with generation numbers.
 * A bus_req names its connection by (slot, generation), so a response
 * computed on another thread after the connection closed is dropped
 * instead of written to whatever reused the slot.
 *
 * With TLS between nodes (peer_tls.h) the bufferevents are libevent's
 * OpenSSL ones: an outgoing connection shakes hands as it connects; an
 * incoming one arrives from the control thread with its handshake done and
 * its TLS object, which the bufferevent then owns. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/ssl.h>
#include <event2/event.h>
#include "bus.h"
#include "cluster.h"
#include "le.h"
#include "peer_auth.h"
#include "peer_tls.h"
#include "repl.h"
#include "server.h"
#include "transport.h"

#define BUS_MAX_IN      256
#define BUS_STALL_MS    2000

typedef struct bus_pending {
    uint64_t id;
    int64_t deadline_us;
    bus_cb cb;
    void *arg;
    struct bus_pending *next;
} bus_pending;

typedef struct bus_conn {
    struct bufferevent *bev;
    int node;
    int outgoing;
    int ready;             /* outgoing: the peer accepted our hello */
    pauth auth;            /* outgoing: the peer handshake (peer_auth.h) */
    int slot;              /* incoming: index in bus.in */
    uint64_t gen;
    /* Received bytes not yet parsed. Not the bufferevent's own input:
     * libevent freezes its end, and an adopted socket comes with bytes the
     * control thread already read. */
    struct evbuffer *in;
    bus_pending *pend;     /* outgoing: calls waiting for a response */
} bus_conn;

struct bus_req {
    int slot;
    uint64_t gen;
    uint64_t id;
    int type;
};

typedef enum { JOB_CALL, JOB_REPLY, JOB_ADOPT } job_kind;

typedef struct bus_job {
    job_kind kind;
    int node, type, timeout_ms;
    uint16_t flags;
    uint8_t *payload;
    size_t n;
    bus_cb cb;
    void *arg;
    bus_req *req;          /* JOB_REPLY */
    int fd;                /* JOB_ADOPT */
    void *ssl;             /* JOB_ADOPT: its TLS object, or NULL */
    struct bus_job *next;
} bus_job;

/* The bus's whole state: one per server (server.bus), allocated by
 * bus_init; the bus thread gets it as its argument. */
struct bus_state {
    struct event_base *base;
    pthread_t thread;
    int running;
    struct event *wake, *tick;
    int64_t tick_at;    /* when tick fires (monotonic us), 0: not armed */
    pthread_mutex_t mu;
    bus_job *jobs, **jobs_tail;
    bus_conn *out[CLUSTER_MAX_NODES];
    bus_conn *in[BUS_MAX_IN];
    uint64_t in_gen[BUS_MAX_IN];
    bus_handler handlers[BUS_TYPE_MAX];
    uint64_t next_id;
};

void bus_init(void) {
    struct bus_state *bus = calloc(1, sizeof(*bus));
    pthread_mutex_init(&bus->mu, NULL);
    bus->jobs_tail = &bus->jobs;
    server.bus = bus;
}

void bus_free(void) {
    struct bus_state *bus = server.bus;   /* after bus_stop */
    if (!bus) return;
    pthread_mutex_destroy(&bus->mu);
    free(bus);
    server.bus = NULL;
}

void bus_register(int type, bus_handler h) {
    struct bus_state *bus = server.bus;
    if (type > 0 && type < BUS_TYPE_MAX) bus->handlers[type] = h;
}

/* ---------------- frames ---------------- */

static void frame_write(bus_conn *c, int type, uint16_t flags, uint64_t id, const void *p,
                        size_t n) {
    uint8_t h[BUS_HDR_SIZE];
    le_put_u32(h, (uint32_t)n);
    le_put_u16(h + 4, (uint16_t)type);
    le_put_u16(h + 6, flags);
    le_put_u64(h + 8, id);
    le_put_u64(h + 16, cluster_term());
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evbuffer_add(out, h, sizeof(h));
    if (n) evbuffer_add(out, p, n);
}

/* ---------------- connections ---------------- */

static void fail_pending(bus_conn *c) {
    bus_pending *p = c->pend;
    c->pend = NULL;
    while (p) {
        bus_pending *next = p->next;
        if (p->cb) p->cb(p->arg, BUS_FAILED, NULL, 0);
        free(p);
        p = next;
    }
}

static void conn_close(bus_conn *c, const char *why) {
    struct bus_state *bus = server.bus;
    if (why)
        serverLog(LL_VERBOSE, "Bus: connection %s node %s closed: %s", c->outgoing ? "to" : "from",
                  cluster_node_at(c->node) ? cluster_node_at(c->node)->name : "?", why);
    if (c->outgoing) {
        if (bus->out[c->node] == c) bus->out[c->node] = NULL;
    } else if (c->slot >= 0 && bus->in[c->slot] == c) {
        bus->in[c->slot] = NULL;
        bus->in_gen[c->slot]++;
    }
    bufferevent_free(c->bev);
    evbuffer_free(c->in);
    fail_pending(c);
    free(c);
}

static void on_response(bus_conn *c, uint16_t flags, uint64_t id, const uint8_t *p, size_t n) {
    bus_pending **pp = &c->pend;
    while (*pp && (*pp)->id != id) pp = &(*pp)->next;
    bus_pending *pe = *pp;
    if (!pe) return;   /* timed out already */
    *pp = pe->next;
    if (pe->cb) pe->cb(pe->arg, (flags & BUS_F_ERROR) ? BUS_ERROR : BUS_OK, p, n);
    free(pe);
}

static void on_request(bus_conn *c, int type, uint64_t id, const uint8_t *p, size_t n) {
    struct bus_state *bus = server.bus;
    bus_req *r = calloc(1, sizeof(*r));
    r->slot = c->slot;
    r->gen = bus->in_gen[c->slot];
    r->id = id;
    r->type = type;
    bus_handler h = type > 0 && type < BUS_TYPE_MAX ? bus->handlers[type] : NULL;
    if (!h) {
        bus_reply_error(r, "unknown bus request type");
        return;
    }
    h(r, c->node, p, n);
}

/* Handle every complete frame in c's input. 0, or -1 if c was closed. */
static int read_frames(bus_conn *c) {
    struct evbuffer *in = c->in;
    evbuffer_add_buffer(in, bufferevent_get_input(c->bev));
    if (c->outgoing && !c->ready) {
        /* the peer handshake, then the control thread's acceptance: an
         * 8-byte ack count of 0 */
        char why[256];
        int rc = pauth_feed_evbuffer(&c->auth, in, bufferevent_get_output(c->bev), why,
                                     sizeof(why));
        if (rc < 0) {
            conn_close(c, why);
            return -1;
        }
        if (c->auth.state != PAUTH_CLIENT_WAIT_CHALLENGE) /* our response leads the output */
            bufferevent_enable(c->bev, EV_WRITE);
        if (rc == 0 || evbuffer_get_length(in) < 8) return 0;
        evbuffer_drain(in, 8);
        c->ready = 1;
        struct timeval stall = {BUS_STALL_MS / 1000, (BUS_STALL_MS % 1000) * 1000};
        bufferevent_set_timeouts(c->bev, NULL, &stall);
    }
    for (;;) {
        uint8_t h[BUS_HDR_SIZE];
        if (evbuffer_copyout(in, h, sizeof(h)) < (ev_ssize_t)sizeof(h)) return 0;
        uint32_t n = le_get_u32(h);
        if (n > BUS_MAX_PAYLOAD) {
            conn_close(c, "frame too large");
            return -1;
        }
        if (evbuffer_get_length(in) < sizeof(h) + n) return 0;
        evbuffer_drain(in, sizeof(h));
        uint8_t *p = n ? malloc(n + 1) : NULL;
        if (n) evbuffer_remove(in, p, n);
        uint16_t type = le_get_u16(h + 4), flags = le_get_u16(h + 6);
        uint64_t id = le_get_u64(h + 8);
        if (flags & BUS_F_RESPONSE) {
            if (c->outgoing) on_response(c, flags, id, p, n);
        } else if (!c->outgoing) {
            on_request(c, type, id, p, n);
        }
        free(p);
    }
}

static void on_read(struct bufferevent *bev, void *arg) {
    (void)bev;
    read_frames(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    bus_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) return;
    conn_close(c, (what & BEV_EVENT_EOF) ? "closed by the peer"
                  : (what & BEV_EVENT_TIMEOUT) ? "no progress in time" : "error");
}

/* ssl: a TLS connection, about to connect (outgoing) or with its handshake
 * done (incoming); the bufferevent owns it. NULL: plaintext. */
static bus_conn *conn_new(int fd, SSL *ssl, int node, int outgoing) {
    struct bus_state *bus = server.bus;
    bus_conn *c = calloc(1, sizeof(*c));
    c->node = node;
    c->outgoing = outgoing;
    c->slot = -1;
    if (ssl) {
        c->bev = bufferevent_openssl_socket_new(
            bus->base, fd, ssl, outgoing ? BUFFEREVENT_SSL_CONNECTING : BUFFEREVENT_SSL_OPEN,
            BEV_OPT_CLOSE_ON_FREE);
        /* a peer that goes away without close_notify is just closed */
        if (c->bev) bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    } else {
        c->bev = bufferevent_socket_new(bus->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->bev) {
        if (ssl) SSL_free(ssl);
        if (fd >= 0) close(fd);
        free(c);
        return NULL;
    }
    c->in = evbuffer_new();
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return c;
}

/* Our connection to node, opened if needed (NULL if it cannot be). The
 * connect does not block the bus thread: calls queue their frames behind
 * it, and a connect or a write that makes no progress for
 * BUS_STALL_MS closes the connection (failing those calls). */
static bus_conn *out_conn(int node) {
    struct bus_state *bus = server.bus;
    if (bus->out[node]) return bus->out[node];
    const cluster_node *n = cluster_node_at(node);
    if (!n || node == cluster_self()) return NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", n->repl_port);
    if (getaddrinfo(n->host, port, &hints, &res) != 0 || !res) {
        serverLog(LL_VERBOSE, "Bus: cannot resolve node %s's host %s", n->name, n->host);
        return NULL;
    }
    SSL *ssl = NULL;
    if (peer_tls_on() && !(ssl = peer_tls_new(-1, 0))) {
        freeaddrinfo(res);
        return NULL;
    }
    bus_conn *c = conn_new(-1, ssl, node, 1);
    if (!c) {
        freeaddrinfo(res);
        return NULL;
    }
    /* Until the handshake is done nothing may be written (frames queue
     * behind our response, which goes first), and a peer that does not
     * answer within BUS_STALL_MS is given up like a stalled write. */
    bufferevent_disable(c->bev, EV_WRITE);
    struct timeval stall = {BUS_STALL_MS / 1000, (BUS_STALL_MS % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, &stall, &stall);
    if (bufferevent_socket_connect(c->bev, res->ai_addr, (int)res->ai_addrlen) != 0) {
        freeaddrinfo(res);
        bufferevent_free(c->bev);
        evbuffer_free(c->in);
        free(c);
        return NULL;
    }
    freeaddrinfo(res);
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    repl_hello hello;
    repl_hello_fill(&hello, REPL_LINK_BUS);
    pauth_client_begin(&c->auth, &hello, repl_hello_len(&hello));
    bus->out[node] = c;
    return c;
}

/* ---------------- jobs from other threads ---------------- */

static void push_job(bus_job *j) {
    struct bus_state *bus = server.bus;
    pthread_mutex_lock(&bus->mu);
    j->next = NULL;
    *bus->jobs_tail = j;
    bus->jobs_tail = &j->next;
    pthread_mutex_unlock(&bus->mu);
    if (bus->wake) event_active(bus->wake, EV_READ, 0);
}

/* The tick fails calls whose deadline passed. It is armed only for the
 * earliest deadline of a call still pending (bus thread only), so an idle
 * bus does not wake up; a call answered in time leaves at most one spare
 * wake-up behind. */
static void arm_tick(int64_t deadline_us) {
    struct bus_state *bus = server.bus;
    if (bus->tick_at && bus->tick_at <= deadline_us) return;
    int64_t d = deadline_us - monotonic_us();
    if (d < 0) d = 0;
    struct timeval tv = {(time_t)(d / 1000000), (suseconds_t)(d % 1000000)};
    bus->tick_at = deadline_us;
    event_add(bus->tick, &tv);
}

static void run_call(bus_job *j) {
    struct bus_state *bus = server.bus;
    bus_conn *c = bus->running ? out_conn(j->node) : NULL;
    if (!c) {
        if (j->cb) j->cb(j->arg, BUS_FAILED, NULL, 0);
        return;
    }
    bus_pending *pe = calloc(1, sizeof(*pe));
    pe->id = ++bus->next_id;
    pe->deadline_us = monotonic_us() + (int64_t)j->timeout_ms * 1000;
    pe->cb = j->cb;
    pe->arg = j->arg;
    pe->next = c->pend;
    c->pend = pe;
    arm_tick(pe->deadline_us);
    frame_write(c, j->type, 0, pe->id, j->payload, j->n);
}

static void run_reply(bus_job *j) {
    struct bus_state *bus = server.bus;
    bus_req *r = j->req;
    bus_conn *c = r->slot >= 0 && r->slot < BUS_MAX_IN ? bus->in[r->slot] : NULL;
    if (c && bus->in_gen[r->slot] == r->gen)
        frame_write(c, r->type, (uint16_t)(BUS_F_RESPONSE | j->flags), r->id, j->payload, j->n);
    free(r);
}

static void run_adopt(bus_job *j) {
    struct bus_state *bus = server.bus;
    int slot = -1;
    for (int i = 0; i < BUS_MAX_IN && slot < 0; i++)
        if (!bus->in[i]) slot = i;
    if (slot < 0 || !bus->running) {
        serverLog(LL_WARNING, "Bus: too many incoming connections; refusing one from node %d", j->node);
        if (j->ssl) SSL_free(j->ssl);
        close(j->fd);
        return;
    }
    bus_conn *c = conn_new(j->fd, j->ssl, j->node, 0);
    if (!c) return;
    c->slot = slot;
    bus->in[slot] = c;
    if (j->n) evbuffer_add(c->in, j->payload, j->n);
    read_frames(c);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    struct bus_state *bus = server.bus;
    (void)fd, (void)what, (void)arg;
    pthread_mutex_lock(&bus->mu);
    bus_job *j = bus->jobs;
    bus->jobs = NULL;
    bus->jobs_tail = &bus->jobs;
    pthread_mutex_unlock(&bus->mu);
    while (j) {
        bus_job *next = j->next;
        if (j->kind == JOB_CALL) run_call(j);
        else if (j->kind == JOB_REPLY) run_reply(j);
        else run_adopt(j);
        free(j->payload);
        free(j);
        j = next;
    }
}

/* Fail the calls whose response is overdue. */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    struct bus_state *bus = server.bus;
    (void)fd, (void)what, (void)arg;
    bus->tick_at = 0;
    int64_t now = monotonic_us(), next = 0;
    for (int node = 0; node < CLUSTER_MAX_NODES; node++) {
        bus_conn *c = bus->out[node];
        if (!c) continue;
        bus_pending **pp = &c->pend;
        while (*pp) {
            bus_pending *pe = *pp;
            if (pe->deadline_us > now) {
                if (!next || pe->deadline_us < next) next = pe->deadline_us;
                pp = &pe->next;
                continue;
            }
            *pp = pe->next;
            if (pe->cb) pe->cb(pe->arg, BUS_FAILED, NULL, 0);
            free(pe);
        }
    }
    if (next) arm_tick(next);
}

static bus_job *job_with(job_kind kind, const void *p, size_t n) {
    bus_job *j = calloc(1, sizeof(*j));
    j->kind = kind;
    if (n) {
        j->payload = malloc(n);
        memcpy(j->payload, p, n);
    }
    j->n = n;
    return j;
}

void bus_call(int node, int type, const void *p, size_t n, int timeout_ms, bus_cb cb, void *arg) {
    bus_job *j = job_with(JOB_CALL, p, n);
    j->node = node;
    j->type = type;
    j->timeout_ms = timeout_ms;
    j->cb = cb;
    j->arg = arg;
    push_job(j);
}

void bus_reply(bus_req *r, const void *p, size_t n) {
    bus_job *j = job_with(JOB_REPLY, p, n);
    j->req = r;
    push_job(j);
}

void bus_reply_error(bus_req *r, const char *msg) {
    bus_job *j = job_with(JOB_REPLY, msg, strlen(msg));
    j->req = r;
    j->flags = BUS_F_ERROR;
    push_job(j);
}

void bus_adopt(int fd, void *ssl, int node, const uint8_t *pre, size_t n) {
    bus_job *j = job_with(JOB_ADOPT, pre, n);
    j->fd = fd;
    j->ssl = ssl;
    j->node = node;
    push_job(j);
}

/* ---------------- synchronous calls ---------------- */

typedef struct sync_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, status;
    uint8_t *resp;
    size_t rlen;
} sync_call;

static void sync_cb(void *arg, int status, const uint8_t *p, size_t n) {
    sync_call *s = arg;
    pthread_mutex_lock(&s->mu);
    s->status = status;
    if (status != BUS_FAILED) {
        s->resp = malloc(n + 1);
        if (n) memcpy(s->resp, p, n);
        s->resp[n] = 0;
        s->rlen = n;
    }
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int bus_call_sync(int node, int type, const void *p, size_t n, int timeout_ms, uint8_t **resp,
                  size_t *rlen) {
    sync_call s = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    bus_call(node, type, p, n, timeout_ms, sync_cb, &s);
    pthread_mutex_lock(&s.mu);
    while (!s.done) pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    if (resp) *resp = s.resp;
    else free(s.resp);
    if (rlen) *rlen = s.rlen;
    return s.status;
}

/* ---------------- thread ---------------- */

static void *bus_main(void *arg) {
    struct bus_state *bus = arg;
    pthread_setname_np(pthread_self(), "rowan-bus");
    /* No timer is always armed (arm_tick): stay in the loop while idle. */
    event_base_loop(bus->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void ping_handler(bus_req *r, int node, const uint8_t *p, size_t n) {
    (void)node, (void)p, (void)n;
    bus_reply(r, NULL, 0);
}

int bus_start(char *err, size_t errlen) {
    struct bus_state *bus = server.bus;
    bus->base = event_base_new();
    if (!bus->base) {
        snprintf(err, errlen, "bus: cannot create an event base");
        return -1;
    }
    bus->wake = event_new(bus->base, -1, EV_PERSIST, on_wake, NULL);
    bus->tick = event_new(bus->base, -1, 0, on_tick, NULL);
    bus->tick_at = 0;
    bus_register(BUS_PING, ping_handler);
    bus->running = 1;
    event_active(bus->wake, EV_READ, 0);   /* calls queued before the start */
    rowan_thread_create(&bus->thread, NULL, bus_main, bus);
    return 0;
}

static void on_stop(evutil_socket_t fd, short what, void *arg) {
    struct bus_state *bus = server.bus;
    (void)fd, (void)what, (void)arg;
    bus->running = 0;
    on_wake(-1, 0, NULL);    /* fail what was queued */
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (bus->out[i]) conn_close(bus->out[i], NULL);
    for (int i = 0; i < BUS_MAX_IN; i++)
        if (bus->in[i]) conn_close(bus->in[i], NULL);
    event_base_loopbreak(bus->base);
}

void bus_stop(void) {
    struct bus_state *bus = server.bus;
    if (!bus->base) return;
    event_base_once(bus->base, -1, EV_TIMEOUT, on_stop, NULL, NULL);
    pthread_join(bus->thread, NULL);
    on_wake(-1, 0, NULL);
    event_free(bus->wake);
    event_free(bus->tick);
    bus->wake = bus->tick = NULL;
    event_base_free(bus->base);
    bus->base = NULL;
}
