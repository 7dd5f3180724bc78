/* rowan_engine.c -- librowan's engine (rowan_int.h), under both APIs.
 *
 * Links. The context keeps one UDP socket per node, connect()ed to the
 * node's native port, with its own random client id and its own request
 * ids (1, 2, ...). So each server sees one client with dense ids, and a
 * refused datagram (ICMP port unreachable) comes back as ECONNREFUSED on
 * the socket of the node that is gone.
 *
 * Exactly once. A request keeps its id on its node until it has a reply:
 * retransmissions after the retransmission interval (three smoothed round
 * trips, at least 20 ms, doubling up to 250 ms) reuse it, so the server answers
 * them from its reply cache. A request is sent under a NEW id, possibly to
 * another node, only when the server said that nothing ran: a refusal
 * (stale term), -MOVED or -TRYAGAIN. -TRYAGAIN, and -MOVED from a node
 * behind our term (it has not adopted the configuration we route by),
 * are asked again every 20 ms until the request's timeout; the others
 * are followed at most MAX_REROUTES times.
 * A request that timed out, or whose node refused the datagram, is an
 * error for the caller (it may have run); it is never sent elsewhere
 * behind the caller's back.
 *
 * Configuration. Read from one node with CLUSTER INFO (is it a cluster, and
 * its current epoch, which is Rowan's term), CONFIG GET port (once: the
 * offset between a node's RESP port, which CLUSTER SLOTS names, and its
 * native port), CLUSTER SLOTS, CONFIG GET shards (the header's shard
 * field), and COMMAND (once: which argument is a command's key). A stale
 * refusal parks the request and re-reads the configuration from the node
 * that refused (it knows the newer term); a timeout or a dead node re-reads
 * it from the next node, so the next command finds the new primary after a
 * failover. Slots are computed by the server's own hash_slot (src/base/hash.c,
 * compiled into the library; it needs nothing else of the server), the
 * datagrams by the server's own codec (rdma/dgram.c). */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "rowan_int.h"
#include "hash.h"

#define RTO_MIN   (20ull * 1000000)
#define RTO_MAX   (250ull * 1000000)   /* loss, not congestion: keep retrying briskly */
#define RTO_INIT  (100ull * 1000000)
#define MAX_REROUTES 8
#define TRYAGAIN_WAIT (20ull * 1000000)
#define RF_INFO 1
#define RF_PORT 2
#define RF_SLOTS 3
#define RF_SHARDS 4
#define RF_COMMAND 5

uint64_t rw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The batch's clock (e->now), or a fresh read outside a batch. A batch is
 * at most one receive batch's callbacks long, far below the 20 ms the
 * timers are precise to, and a round trip measured from it is off by the
 * batch's own time at most. */
static uint64_t eng_now(const rowanEngine *e) {
    return e->now ? e->now : rw_now();
}

/* Start a batch (returns the enclosing one's clock, for batch_end). */
static uint64_t batch_begin(rowanEngine *e, uint64_t now) {
    uint64_t outer = e->now;
    e->now = now;
    return outer;
}

static void batch_end(rowanEngine *e, uint64_t outer) { e->now = outer; }

static void seterr(int *err, char *errstr, size_t len, int code, const char *fmt, ...) {
    va_list ap;
    *err = code;
    va_start(ap, fmt);
    vsnprintf(errstr, len, fmt, ap);
    va_end(ap);
}

static uint64_t rand64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = rw_now() ^ ((uint64_t)getpid() << 32);
    return v ? v : 1;
}

/* xorshift64*: the fault hook's seeded generator. */
static double frand(rowanEngine *e) {
    e->rng ^= e->rng >> 12;
    e->rng ^= e->rng << 25;
    e->rng ^= e->rng >> 27;
    return (double)((e->rng * 2685821657736338717ull) >> 11) / (double)(1ull << 53);
}

/* ---------------- nodes and sockets ---------------- */

static void flush_node(rowanEngine *e, rw_node *n);

static int node_add(rowanEngine *e, const char *host, int port, int resp_port) {
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].port == port && strcmp(e->nodes[i].host, host) == 0) {
            if (resp_port) e->nodes[i].resp_port = resp_port;
            return i;
        }
    if (e->nnodes == RW_MAX_NODES) return -1;
    rw_node *n = &e->nodes[e->nnodes];
    memset(n, 0, sizeof *n);
    snprintf(n->host, sizeof n->host, "%s", host);
    n->port = port;
    n->resp_port = resp_port;
    n->fd = -1;
    n->client = rand64();
    n->next_id = 1;
    return e->nnodes++;
}

/* The node at host:resp_port (as CLUSTER SLOTS and -MOVED name it). */
static int node_by_resp(rowanEngine *e, const char *host, int resp_port, int native_port) {
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].resp_port == resp_port && strcmp(e->nodes[i].host, host) == 0)
            return i;
    if (native_port <= 0) {
        if (e->port_off == INT_MIN) return -1;
        native_port = resp_port + e->port_off;
    }
    return node_add(e, host, native_port, resp_port);
}

int rw_udp_open(const char *host, int port, char *why, size_t whylen) {
    struct addrinfo hints = {0}, *res = NULL;
    char portstr[16];
    hints.ai_socktype = SOCK_DGRAM;
    snprintf(portstr, sizeof portstr, "%d", port);
    /* IPv4 first: a UDP connect() always succeeds, so "localhost" must not
     * pick ::1 when the server listens on 127.0.0.1 */
    hints.ai_family = AF_INET;
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        hints.ai_family = AF_UNSPEC;
        rc = getaddrinfo(host, portstr, &hints, &res);
    }
    if (rc != 0) {
        snprintf(why, whylen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(why, whylen, "cannot open a socket to %s:%d: %s", host, port, strerror(errno));
        return -1;
    }
    /* a large reply arrives as a burst of fragments */
    int sz = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    return fd;
}

static int node_open(rowanEngine *e, int i, char *why, size_t whylen) {
    rw_node *n = &e->nodes[i];
    if (n->fd >= 0) return 0;
    if (e->share && e->share(e, i, why, whylen) == 0) return 0;
    int fd = rw_udp_open(n->host, n->port, why, whylen);
    if (fd < 0) return -1;
    n->fd = fd;
    if (e->on_socket) e->on_socket(e, i);
    return 0;
}

int rw_node_reopen(rowanEngine *e, int i, char *why, size_t whylen) {
    rw_node *n = &e->nodes[i];
    if (n->fd < 0 || n->sock) return 0;
    if (n->nout) flush_node(e, n);
    close(n->fd);
    n->fd = -1;
    return node_open(e, i, why, whylen);
}

/* ---------------- requests in flight ---------------- */

static void flight_add(rw_node *n, rw_req *q) {
    q->fprev = n->tail;
    q->fnext = NULL;
    if (n->tail) n->tail->fnext = q; else n->head = q;
    n->tail = q;
    rw_req **b = &n->bucket[q->id % RW_BUCKETS];
    q->hnext = *b;
    *b = q;
}

static void flight_del(rw_node *n, rw_req *q) {
    if (q->fprev) q->fprev->fnext = q->fnext; else n->head = q->fnext;
    if (q->fnext) q->fnext->fprev = q->fprev; else n->tail = q->fprev;
    for (rw_req **p = &n->bucket[q->id % RW_BUCKETS]; *p; p = &(*p)->hnext)
        if (*p == q) { *p = q->hnext; break; }
    q->fprev = q->fnext = q->hnext = NULL;
}

static rw_req *flight_find(rw_node *n, uint64_t id) {
    for (rw_req *q = n->bucket[id % RW_BUCKETS]; q; q = q->hnext)
        if (q->id == id) return q;
    return NULL;
}

static void park(rowanEngine *e, rw_req *q, uint64_t t_next) {
    q->state = RQ_PARKED;
    q->t_next = t_next;
    q->pprev = NULL;
    q->pnext = e->parked;
    if (e->parked) e->parked->pprev = q;
    e->parked = q;
}

static void unpark(rowanEngine *e, rw_req *q) {
    if (q->pprev) q->pprev->pnext = q->pnext; else e->parked = q->pnext;
    if (q->pnext) q->pnext->pprev = q->pprev;
    q->pprev = q->pnext = NULL;
}

static void queue_del(rw_node *n, rw_req *q) {
    if (q->pprev) q->pprev->pnext = q->pnext; else n->qhead = q->pnext;
    if (q->pnext) q->pnext->pprev = q->pprev; else n->qtail = q->pprev;
    q->pprev = q->pnext = NULL;
}

/* Take q out of wherever it waits (not freed). */
static void detach(rowanEngine *e, rw_req *q) {
    if (q->outq) flush_node(e, &e->nodes[q->node]);   /* its datagram points into q */
    if (q->state == RQ_FLIGHT) flight_del(&e->nodes[q->node], q);
    else if (q->state == RQ_PARKED) unpark(e, q);
    else if (q->state == RQ_QUEUED) queue_del(&e->nodes[q->node], q);
    dgram_join_free(&q->join);
    q->state = RQ_NEW;
}

static void complete(rowanEngine *e, rw_req *q) {
    detach(e, q);
    q->state = RQ_DONE;
    e->inflight--;
    q->done(e, q);
}

static void fail(rowanEngine *e, rw_req *q, int err, const char *fmt, ...) {
    va_list ap;
    q->err = err;
    va_start(ap, fmt);
    vsnprintf(q->errstr, sizeof q->errstr, fmt, ap);
    va_end(ap);
    complete(e, q);
}

static uint64_t acked_of(const rw_node *n) {
    return n->head ? n->head->id : n->next_id;
}

/* Can q's request go into the pack p? (Same term, a higher id, room.) */
static int pack_fits(const dgram_pack *p, const rw_req *q, uint64_t term) {
    return q->term == term && q->id > p->last && dgram_pack_room(p, q->dlen - DGRAM_HDR_LEN);
}

static void pack_add(dgram_pack *p, const rw_req *q) {
    dgram_entry en = {.req = q->id, .type = DGRAM_REQUEST, .shard = q->shard, .frag = q->frag,
                      .len = (uint32_t)(q->dlen - DGRAM_HDR_LEN), .payload = q->dg + DGRAM_HDR_LEN};
    dgram_pack_add(p, &en);
}

/* The next datagram of the node's batch, from n->out[*i] on: consecutive
 * requests packed into pk as they fit (dgram.h, "Packed frames"); a
 * request alone goes as its own datagram, from its record (copied into pk
 * with `copy`: a shared socket's batch outlives the record). The fault
 * hook drops or doubles whole datagrams here, so a lost pack loses all its
 * requests at once. Returns the copies to send (0: dropped), with *v. */
static int next_datagram(rowanEngine *e, rw_node *n, int *i, unsigned char *pk, int copy,
                         struct iovec *v) {
    int k = n->nout;
    rw_req *q = n->out[(*i)++];
    dgram_pack p;
    dgram_hdr h = {0};
    h.client = n->client;
    h.term = q->term;
    h.acked = acked_of(n);
    dgram_pack_begin(&p, pk, &h, DGRAM_PACKED_REQUESTS);
    pack_add(&p, q);
    while (*i < k && pack_fits(&p, n->out[*i], q->term)) pack_add(&p, n->out[(*i)++]);
    if (p.h.nfrag > 1) {
        v->iov_base = pk;
        v->iov_len = (size_t)dgram_pack_end(&p);
    } else if (copy) {
        memcpy(pk, q->dg, q->dlen);
        v->iov_base = pk;
        v->iov_len = q->dlen;
    } else {
        v->iov_base = q->dg;
        v->iov_len = q->dlen;
    }
    if (e->drop_send > 0 && frand(e) < e->drop_send) {
        e->st.dropped_send++;
        return 0;
    }
    int copies = 1;
    if (e->dup_send > 0 && frand(e) < e->dup_send) {
        copies = 2;
        e->st.duplicated++;
    }
    e->st.sent += (uint64_t)copies;
    return copies;
}

/* sendmmsg until all m left; 1 if a send met ECONNREFUSED. That reports an
 * earlier datagram's ICMP (nothing listens): the node is handled as dead
 * at the next turn of the loop (not here, in the middle of a send). Other
 * errors (ENOBUFS) are loss that retransmission covers: skip that datagram. */
static int send_all(int fd, struct mmsghdr *msgs, struct iovec *iov, int m) {
    int refused = 0;
    for (int j = 0; j < m; j++) {
        memset(&msgs[j], 0, sizeof msgs[j]);
        msgs[j].msg_hdr.msg_iov = &iov[j];
        msgs[j].msg_hdr.msg_iovlen = 1;
    }
    for (int done = 0; done < m;) {
        int r = sendmmsg(fd, msgs + done, (unsigned)(m - done), MSG_NOSIGNAL);
        if (r > 0) { done += r; continue; }
        if (r < 0 && errno == ECONNREFUSED) refused = 1;
        done++;
    }
    return refused;
}

void rw_sock_send(rw_sock *s) {
    struct mmsghdr msgs[RW_TXMAX];
    struct iovec iov[RW_TXMAX];
    if (!s->n) return;
    for (int j = 0; j < s->n; j++) {
        iov[j].iov_base = s->pk[j];
        iov[j].iov_len = s->len[j];
    }
    int refused = send_all(s->fd, msgs, iov, s->n);
    s->n = 0;
    if (refused)   /* the peer is gone for every context on the socket */
        for (int j = 0; j < s->nmem; j++) s->mem[j].e->nodes[s->mem[j].node].refused = 1;
}

/* Send the node's batch: the requests queued since the last flush (the
 * loop flushes before it waits, so a batch is what one turn of the caller
 * produced: a pipeline, or the callbacks of one read), packed, then one
 * sendmmsg per RW_PACKBATCH datagrams -- or, on a shared socket, into its
 * batch, which its owner sends once for all its contexts. */
static void flush_node(rowanEngine *e, rw_node *n) {
    struct mmsghdr msgs[RW_PACKBATCH];
    struct iovec iov[RW_PACKBATCH];
    rw_sock *s = n->sock;
    int k = n->nout, i = 0;
    while (i < k) {
        if (s) {
            if (s->n > RW_TXMAX - 2) rw_sock_send(s);   /* room for a doubled one */
            struct iovec v;
            int c = next_datagram(e, n, &i, s->pk[s->n], 1, &v);
            for (int j = 0; j < c; j++) {
                if (j) memcpy(s->pk[s->n], v.iov_base, v.iov_len);
                s->len[s->n++] = v.iov_len;
            }
            continue;
        }
        int m = 0;
        while (m < RW_PACKBATCH - 1 && i < k) {   /* room for a doubled one */
            int c = next_datagram(e, n, &i, e->txpk[m], 0, &iov[m]);
            if (c == 2) iov[m + 1] = iov[m];
            m += c;
        }
        if (send_all(n->fd, msgs, iov, m)) n->refused = 1;
    }
    for (int j = 0; j < k; j++) n->out[j]->outq = 0;
    n->nout = 0;
}

void rw_flush(rowanEngine *e) {
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].nout) flush_node(e, &e->nodes[i]);
}

/* Queue q for the node's next flush (which packs it; the fault hook
 * drops or doubles whole datagrams there). */
static void xmit(rowanEngine *e, rw_node *n, rw_req *q) {
    if (n->nout == RW_OUTBATCH) flush_node(e, n);
    n->out[n->nout++] = q;
    q->outq = 1;
}


static void put_hdr(rowanEngine *e, rw_req *q) {
    rw_node *n = &e->nodes[q->node];
    dgram_hdr h = {0};
    h.magic = DGRAM_MAGIC;
    h.version = DGRAM_VERSION;
    h.type = DGRAM_REQUEST;
    h.shard = 0xffff;
    if (q->slot != RW_NOSLOT && e->nshards > 0)
        h.shard = (uint16_t)(((unsigned)(q->slot + 1) * (unsigned)e->nshards - 1) / HASH_SLOTS);
    h.client = n->client;
    h.req = q->id;
    h.term = q->term;
    h.acked = acked_of(n);
    /* a retransmission asks for the reply from its first missing fragment
     * on (dgram.h: resuming a large reply) */
    for (unsigned i = 0; i < q->join.nfrag; i++)
        if (!(q->join.have[i / 64] >> (i % 64) & 1)) {
            h.frag = (uint16_t)i;
            break;
        }
    dgram_put_hdr(q->dg, &h);
    q->shard = h.shard;
    q->frag = h.frag;
}

static uint64_t rto_of(rowanEngine *e) {
    uint64_t r = e->srtt ? 3 * e->srtt : RTO_INIT;
    return r < RTO_MIN ? RTO_MIN : r > RTO_MAX ? RTO_MAX : r;
}

/* Send q to node under a new request id. */
static void send_new(rowanEngine *e, rw_req *q, int node) {
    char why[128];
    if (node_open(e, node, why, sizeof why) < 0) {
        fail(e, q, ROWAN_ERR_IO, "%s", why);
        return;
    }
    rw_node *n = &e->nodes[node];
    q->node = node;
    q->id = n->next_id++;
    q->term = q->internal ? e->term_seen : e->term;
    q->state = RQ_FLIGHT;
    flight_add(n, q);
    put_hdr(e, q);
    uint64_t now = eng_now(e);
    q->t_sent = now;
    q->tries = 1;
    q->rto = rto_of(e);
    q->t_next = now + q->rto;
    xmit(e, n, q);
}

/* The server keeps every reply from our acked id up to the newest id
 * (NATIVE_MAX_PENDING of them): so the window is a span of ids, not a
 * count in flight -- one slow request at the head holds it. */
static int window_open(const rw_node *n) {
    return n->next_id - acked_of(n) < RW_WINDOW;
}

/* A user request to node: sent now, or queued behind others for room in
 * the node's window (in order: nothing overtakes a queued request). */
static void send_user(rowanEngine *e, rw_req *q, int node) {
    rw_node *n = &e->nodes[node];
    if (!n->qhead && window_open(n)) {
        send_new(e, q, node);
        return;
    }
    q->state = RQ_QUEUED;
    q->node = node;
    q->pnext = NULL;
    q->pprev = n->qtail;
    if (n->qtail) n->qtail->pnext = q; else n->qhead = q;
    n->qtail = q;
}

/* Send what the windows have room for now. */
static void pump(rowanEngine *e) {
    for (int i = 0; i < e->nnodes; i++) {
        rw_node *n = &e->nodes[i];
        while (n->qhead && window_open(n)) {
            rw_req *q = n->qhead;
            queue_del(n, q);
            q->state = RQ_NEW;
            send_new(e, q, i);
        }
    }
}

static int route(rowanEngine *e, const rw_req *q) {
    if (!e->cluster) return 0;                          /* the seed */
    if (q->slot == RW_NOSLOT) return e->home;
    return e->slot_node[q->slot];
}

/* A node stopped answering: keyless commands move to the next one, and
 * the configuration is read again from there (the next command of a key
 * it was primary of then finds the new primary). */
static void node_gone(rowanEngine *e, int node) {
    if (!e->cluster || e->nnodes < 2) return;
    int next = (node + 1) % e->nnodes;
    if (e->home == node) e->home = next;
    rw_refresh(e, next);
}

/* Route and send, or wait for the configuration being read. */
static void dispatch(rowanEngine *e, rw_req *q) {
    if (e->refreshing && !q->internal && e->term_seen > e->term) {
        park(e, q, 0);
        return;
    }
    send_user(e, q, route(e, q));
}

void rw_submit(rowanEngine *e, rw_req *q) {
    uint64_t outer = batch_begin(e, eng_now(e));   /* one clock read for the deadline and the send */
    e->inflight++;
    q->t_deadline = e->now + e->timeout_ns;
    dispatch(e, q);
    batch_end(e, outer);
}

/* An internal request to one node, not routed (keepalives). */
void rw_submit_to(rowanEngine *e, rw_req *q, int node) {
    e->inflight++;
    q->internal = 1;
    q->t_deadline = eng_now(e) + e->timeout_ns;
    send_new(e, q, node);
}

static void timeout_fail(rowanEngine *e, rw_req *q);

/* Nothing ran: send q again (new id) after the configuration changed. */
static void reroute(rowanEngine *e, rw_req *q, int node, uint64_t delay) {
    detach(e, q);
    e->st.redirects++;
    if (++q->reroutes > MAX_REROUTES) {
        fail(e, q, ROWAN_ERR_STALE, "stale configuration: request redirected %d times "
             "(term %llu)", MAX_REROUTES, (unsigned long long)e->term);
        return;
    }
    if (delay) { park(e, q, eng_now(e) + delay); return; }
    if (node >= 0) send_user(e, q, node);
    else dispatch(e, q);
}

/* ---------------- requests ---------------- */

static int cmd_first_key(rowanEngine *e, const char *name, size_t len);

/* A zeroed request record with room for a datagram of dlen bytes after
 * it: a finished one from the engine's pool if it has the room (no
 * malloc per request), else a new one. */
static rw_req *req_alloc(rowanEngine *e, size_t dlen) {
    rw_req *q = e->pool;
    if (q) {
        e->pool = q->qnext;
        e->npool--;
        if (q->dcap < dlen) { free(q); q = NULL; }
    }
    size_t cap = q ? q->dcap : dlen < RW_REQ_DG ? RW_REQ_DG : dlen;
    if (!q && !(q = malloc(sizeof *q + cap))) return NULL;
    memset(q, 0, sizeof *q);
    q->dcap = cap;
    q->dg = (unsigned char *)(q + 1);
    q->eng = e;
    return q;
}

rw_req *rw_req_new(rowanEngine *e, int argc, const char **argv, const size_t *argvlen,
                   int *err, char *errstr, size_t errlen) {
    size_t lens_stack[64], *lens = NULL;
    if (argc <= 0 || argc > DGRAM_MAX_ARGS) {
        seterr(err, errstr, errlen, ROWAN_ERR_OTHER, "bad argument count %d", argc);
        return NULL;
    }
    if (!argvlen) {
        lens = argc <= 64 ? lens_stack : malloc(sizeof(size_t) * (size_t)argc);
        if (!lens) goto oom;
        for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
        argvlen = lens;
    }
    size_t total = DGRAM_HDR_LEN + 2;
    for (int i = 0; i < argc; i++) total += 4 + argvlen[i];
    if (total > DGRAM_MTU) {
        seterr(err, errstr, errlen, ROWAN_ERR_TOOBIG, "request larger than one datagram "
               "(%zu > %d bytes): use TCP", total, DGRAM_MTU);
        goto out;
    }
    rw_req *q = req_alloc(e, total);
    if (!q) goto oom;
    dgram_hdr h = {0};
    h.magic = DGRAM_MAGIC;
    h.version = DGRAM_VERSION;
    h.type = DGRAM_REQUEST;
    long n = dgram_put_request(q->dg, &h, argc, (const char *const *)argv, argvlen);
    if (n < 0 || (size_t)n > total) {
        rw_req_free(q);
        seterr(err, errstr, errlen, ROWAN_ERR_TOOBIG, "request larger than one datagram: use TCP");
        goto out;
    }
    q->dlen = (size_t)n;
    q->node = -1;
    q->slot = RW_NOSLOT;
    if (e->cluster) {
        int k = cmd_first_key(e, argv[0], argvlen[0]);
        if (k > 0 && k < argc) q->slot = (int)hash_slot(argv[k], argvlen[k]);
    }
    if (lens != lens_stack) free(lens);
    return q;
oom:
    seterr(err, errstr, errlen, ROWAN_ERR_OOM, "out of memory");
out:
    if (lens != lens_stack) free(lens);
    return NULL;
}

/* Back to its engine's pool (not while the engine is being freed). */
void rw_req_free(rw_req *q) {
    if (!q) return;
    dgram_join_free(&q->join);
    if (q->reply) freeReplyObject(q->reply);
    rowanEngine *e = q->eng;
    if (e && !e->closing && e->npool < RW_REQ_POOL) {
        q->qnext = e->pool;
        e->pool = q;
        e->npool++;
        return;
    }
    free(q);
}

/* One RESP value, the whole buffer, through hiredis's reader (the
 * engine's, kept between replies; NULL: a reader just for this). */
static redisReply *parse_resp_with(redisReader **rp, const char *buf, size_t len) {
    redisReader *own = NULL, *r = rp ? *rp : NULL;
    if (!r) {
        r = redisReaderCreate();
        if (!r) return NULL;
        if (rp) *rp = r; else own = r;
    }
    void *reply = NULL;
    if (redisReaderFeed(r, buf, len) != REDIS_OK || redisReaderGetReply(r, &reply) != REDIS_OK ||
        !reply || r->pos != r->len) {
        if (reply) freeReplyObject(reply);
        reply = NULL;
        redisReaderFree(r);    /* its state is unknown now */
        own = NULL;
        if (rp) *rp = NULL;
    }
    if (own) redisReaderFree(own);
    return reply;
}

static redisReply *parse_resp(const char *buf, size_t len) { return parse_resp_with(NULL, buf, len); }

int rw_format(const char *format, va_list ap, redisReply **holder, int *argc,
              const char ***argv, size_t **argvlen) {
    char *cmd = NULL;
    int len = redisvFormatCommand(&cmd, format, ap);
    if (len < 0) return -1;
    redisReply *r = parse_resp(cmd, (size_t)len);
    free(cmd);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    const char **v = malloc(sizeof(char *) * r->elements);
    size_t *l = malloc(sizeof(size_t) * r->elements);
    if (!v || !l) { free(v); free(l); freeReplyObject(r); return -1; }
    for (size_t i = 0; i < r->elements; i++) {
        v[i] = r->element[i]->str;
        l[i] = (size_t)r->element[i]->len;
    }
    *holder = r;
    *argc = (int)r->elements;
    *argv = v;
    *argvlen = l;
    return 0;
}

/* ---------------- command key positions ---------------- */

static unsigned name_hash(const char *s, size_t len) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned)(s[i] | 0x20)) * 16777619u;
    return h;
}

static void cmd_put(rowanEngine *e, const char *name, size_t len, int first) {
    if (len >= sizeof e->cmds[0].name) return;
    unsigned i = name_hash(name, len) & (unsigned)(e->ncmds_cap - 1);
    while (e->cmds[i].name[0]) i = (i + 1) & (unsigned)(e->ncmds_cap - 1);
    for (size_t j = 0; j < len; j++) e->cmds[i].name[j] = (char)(name[j] | 0x20);
    e->cmds[i].name[len] = 0;
    e->cmds[i].first = first;
}

/* 0 when the command has no key or is unknown (it then goes to the seed,
 * and a -MOVED names the right node). */
static int cmd_first_key(rowanEngine *e, const char *name, size_t len) {
    if (!e->cmds || len >= sizeof e->cmds[0].name) return 0;
    unsigned i = name_hash(name, len) & (unsigned)(e->ncmds_cap - 1);
    while (e->cmds[i].name[0]) {
        if (strlen(e->cmds[i].name) == len && strncasecmp(e->cmds[i].name, name, len) == 0)
            return e->cmds[i].first;
        i = (i + 1) & (unsigned)(e->ncmds_cap - 1);
    }
    return 0;
}

static void cmds_from_reply(rowanEngine *e, const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return;
    int cap = 64;
    while ((size_t)cap < r->elements * 2) cap *= 2;
    rw_cmdinfo *t = calloc((size_t)cap, sizeof *t);
    if (!t) return;
    free(e->cmds);
    e->cmds = t;
    e->ncmds_cap = cap;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *c = r->element[i];
        if (c->type != REDIS_REPLY_ARRAY || c->elements < 6 ||
            c->element[0]->type != REDIS_REPLY_STRING || c->element[3]->type != REDIS_REPLY_INTEGER)
            continue;
        cmd_put(e, c->element[0]->str, (size_t)c->element[0]->len, (int)c->element[3]->integer);
    }
}

/* ---------------- configuration ---------------- */

static void refresh_send(rowanEngine *e, int step);

static void refresh_finish(rowanEngine *e, int ok) {
    e->refreshing = 0;
    e->rf_ok = ok;
    if (ok) {
        e->cluster = e->rf_cluster;
        e->term = e->rf_term;
        if (e->term_seen < e->term) e->term_seen = e->term;
        memcpy(e->slot_node, e->rf_slot_node, sizeof e->slot_node);
    }
    /* resend what waited for it (or fail it) */
    rw_req *q = e->parked;
    while (q) {
        rw_req *next = q->pnext;
        if (q->t_next == 0) {
            if (ok) {
                unpark(e, q);
                q->state = RQ_NEW;
                send_user(e, q, route(e, q));
            } else {
                fail(e, q, ROWAN_ERR_STALE, "stale configuration (term %llu, servers have "
                     "%llu) and reading it again failed: %s", (unsigned long long)e->term,
                     (unsigned long long)e->term_seen, e->rf_err);
            }
        }
        q = next;
    }
}

/* This node could not give us the configuration: ask the next one. */
static void refresh_next_node(rowanEngine *e, const char *why) {
    if (strstr(why, e->nodes[e->rf_node].host))   /* names the node already */
        snprintf(e->rf_err, sizeof e->rf_err, "%s", why);
    else
        snprintf(e->rf_err, sizeof e->rf_err, "%s:%d: %s", e->nodes[e->rf_node].host,
                 e->nodes[e->rf_node].port, why);
    if (e->closing || ++e->rf_tries >= e->nnodes || e->rf_tries >= 8) {
        refresh_finish(e, 0);
        return;
    }
    e->rf_node = (e->rf_node + 1) % e->nnodes;
    refresh_send(e, RF_INFO);
}

static long long info_field(const char *text, const char *field) {
    const char *p = strstr(text, field);
    if (!p) return -1;
    return strtoll(p + strlen(field), NULL, 10);
}

/* CONFIG GET name -> [name, value]: the value as a number, -1 if none. */
static long long config_value(const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[1]->type != REDIS_REPLY_STRING)
        return -1;
    return strtoll(r->element[1]->str, NULL, 10);
}

/* A node entry of CLUSTER SLOTS: [host, port, id, {metadata}]; the
 * metadata may name the native port ("native-port"). */
static int slots_node(rowanEngine *e, const redisReply *n, const char *self_host) {
    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || n->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    const char *host = n->element[0]->type == REDIS_REPLY_STRING && n->element[0]->len > 0
                           ? n->element[0]->str : self_host;
    int native = 0;
    if (n->elements >= 4 && n->element[3]->type == REDIS_REPLY_ARRAY) {
        const redisReply *m = n->element[3];
        for (size_t i = 0; i + 1 < m->elements; i += 2)
            if (m->element[i]->type == REDIS_REPLY_STRING &&
                strcmp(m->element[i]->str, "native-port") == 0)
                native = m->element[i + 1]->type == REDIS_REPLY_INTEGER
                             ? (int)m->element[i + 1]->integer
                             : atoi(m->element[i + 1]->str ? m->element[i + 1]->str : "0");
    }
    return node_by_resp(e, host, (int)n->element[1]->integer, native);
}

static int slots_from_reply(rowanEngine *e, const redisReply *r) {
    if (r->type != REDIS_REPLY_ARRAY) return -1;
    memset(e->rf_slot_node, 0, sizeof e->rf_slot_node);
    size_t assigned = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *g = r->element[i];
        if (g->type != REDIS_REPLY_ARRAY || g->elements < 3 ||
            g->element[0]->type != REDIS_REPLY_INTEGER || g->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        long long a = g->element[0]->integer, b = g->element[1]->integer;
        if (a < 0 || b >= HASH_SLOTS || a > b) return -1;
        int node = slots_node(e, g->element[2], e->nodes[e->rf_node].host);
        if (node < 0) return -1;
        for (long long s = a; s <= b; s++) e->rf_slot_node[s] = (uint8_t)node;
        assigned += (size_t)(b - a + 1);
    }
    return assigned ? 0 : -1;
}

static void refresh_done(rowanEngine *e, rw_req *q) {
    int step = q->step;
    redisReply *r = q->reply;
    if (q->err || !r) {
        char why[160];
        snprintf(why, sizeof why, "%s", q->errstr);
        rw_req_free(q);
        refresh_next_node(e, why);
        return;
    }
    int next = 0;
    switch (step) {
    case RF_INFO:
        if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "disabled")) {
            e->rf_cluster = 0;
        } else if (r->type == REDIS_REPLY_STRING) {   /* answered: a cluster */
            e->rf_cluster = 1;
            long long t = info_field(r->str, "cluster_current_epoch:");
            e->rf_term = t > 0 ? (uint64_t)t : 0;
        } else {
            rw_req_free(q);
            refresh_next_node(e, "CLUSTER INFO failed");
            return;
        }
        if (!e->rf_cluster) e->rf_term = e->term_seen;
        if (e->rf_cluster && e->rf_term < e->term_seen) {
            rw_req_free(q);   /* this node is behind the one that refused us */
            refresh_next_node(e, "node is behind the newest term");
            return;
        }
        next = e->port_off == INT_MIN && e->rf_cluster ? RF_PORT : e->rf_cluster ? RF_SLOTS : 0;
        if (!e->rf_cluster) memset(e->rf_slot_node, e->rf_node, sizeof e->rf_slot_node);
        break;
    case RF_PORT: {
        long long p = config_value(r);
        if (p <= 0) { rw_req_free(q); refresh_next_node(e, "CONFIG GET port failed"); return; }
        e->nodes[e->rf_node].resp_port = (int)p;
        e->port_off = e->nodes[e->rf_node].port - (int)p;
        next = RF_SLOTS;
        break;
    }
    case RF_SLOTS:
        if (slots_from_reply(e, r) < 0) {
            rw_req_free(q);
            refresh_next_node(e, "CLUSTER SLOTS: no usable slot map");
            return;
        }
        next = RF_SHARDS;
        break;
    case RF_SHARDS: {
        long long s = config_value(r);
        e->nshards = s > 0 && s <= HASH_SLOTS ? (int)s : 0;
        next = e->cmds ? 0 : RF_COMMAND;
        break;
    }
    case RF_COMMAND:
        cmds_from_reply(e, r);
        break;
    }
    rw_req_free(q);
    if (next) refresh_send(e, next);
    else refresh_finish(e, 1);
}

static void refresh_send(rowanEngine *e, int step) {
    static const char *const cmds[][3] = {
        [RF_INFO] = {"CLUSTER", "INFO", NULL},  [RF_PORT] = {"CONFIG", "GET", "port"},
        [RF_SLOTS] = {"CLUSTER", "SLOTS", NULL}, [RF_SHARDS] = {"CONFIG", "GET", "shards"},
        [RF_COMMAND] = {"COMMAND", NULL, NULL},
    };
    int argc = cmds[step][2] ? 3 : cmds[step][1] ? 2 : 1, err;
    char why[128];
    rw_req *q = rw_req_new(e, argc, (const char **)cmds[step], NULL, &err, why, sizeof why);
    if (!q) {
        snprintf(e->rf_err, sizeof e->rf_err, "%s", why);
        refresh_finish(e, 0);
        return;
    }
    q->internal = 1;
    q->step = step;
    q->done = refresh_done;
    e->st.refreshes += step == RF_INFO;
    e->inflight++;
    q->t_deadline = eng_now(e) + e->timeout_ns;
    send_new(e, q, e->rf_node);
}

/* Read the configuration again, starting at node (-1: the seed). Requests
 * parked with t_next 0 wait for it. */
void rw_refresh(rowanEngine *e, int node) {
    if (e->refreshing || e->closing) return;
    e->refreshing = 1;
    e->rf_node = node >= 0 ? node : 0;
    e->rf_tries = 0;
    e->rf_err[0] = 0;
    refresh_send(e, RF_INFO);
}

/* ---------------- replies ---------------- */

/* "MOVED <slot> <host>:<port>": the node it names (added if new), -1. */
static int moved_target(rowanEngine *e, const redisReply *r, int from, int *slot) {
    const char *s = r->str + 6, *colon = strrchr(r->str, ':');
    char *end;
    long sl = strtol(s, &end, 10);
    if (!colon || end == s || sl < 0 || sl >= HASH_SLOTS) return -1;
    while (*end == ' ') end++;
    char host[256];
    size_t hl = (size_t)(colon - end);
    if (hl >= sizeof host) return -1;
    memcpy(host, end, hl);
    host[hl] = 0;
    *slot = (int)sl;
    return node_by_resp(e, hl ? host : e->nodes[from].host, atoi(colon + 1), 0);
}

/* q waits `wait` and is then sent again by the map: nothing ran, and the
 * answer will change by itself (a shard being checked, a node adopting
 * the term). Until the request's deadline, not counted as a reroute: such
 * a wait can outlast MAX_REROUTES quick tries. 0 if the deadline is too
 * near (the caller gets the reply). */
static int wait_and_retry(rowanEngine *e, rw_req *q, uint64_t wait) {
    uint64_t at = eng_now(e) + wait;
    if (at >= q->t_deadline) return 0;
    detach(e, q);
    e->st.redirects++;
    park(e, q, at);
    return 1;
}

/* The whole reply of q is here; term: the replying node's (its header). */
static void reply_ready(rowanEngine *e, rw_req *q, const char *buf, size_t len, uint64_t term) {
    redisReply *r = rw_push_reply(e, q, buf, len);   /* values after the first: pushed */
    if (!r) {
        fail(e, q, ROWAN_ERR_PROTOCOL, "reply from %s:%d is not one RESP value",
             e->nodes[q->node].host, e->nodes[q->node].port);
        return;
    }
    if (q->tries == 1) {   /* Karn: only unambiguous samples */
        uint64_t rtt = eng_now(e) - q->t_sent;
        e->srtt = e->srtt ? (7 * e->srtt + rtt) / 8 : rtt;
    }
    if (!q->internal && r->type == REDIS_REPLY_ERROR) {
        int slot;
        if (strncmp(r->str, "MOVED ", 6) == 0 && term && term < e->term &&
            wait_and_retry(e, q, TRYAGAIN_WAIT)) {
            /* from a node that has not adopted our term yet (a planned
             * handover's new primary, a moment behind the old one): its
             * map is older than ours. Following it would bounce between
             * the two nodes until the reroutes ran out; ask our map's
             * node again shortly instead. */
            freeReplyObject(r);
            return;
        }
        if (strncmp(r->str, "MOVED ", 6) == 0 && q->reroutes < MAX_REROUTES) {
            int to = moved_target(e, r, q->node, &slot);
            if (to >= 0) {
                freeReplyObject(r);
                e->slot_node[slot] = (uint8_t)to;
                int from = q->node;
                reroute(e, q, to, 0);
                rw_refresh(e, from);
                return;
            }
        } else if (strncmp(r->str, "TRYAGAIN", 8) == 0 && wait_and_retry(e, q, TRYAGAIN_WAIT)) {
            freeReplyObject(r);   /* the shard is being checked after a failover (reconcile.h) */
            return;
        }
    }
    q->reply = r;
    complete(e, q);
    rw_push_flush(e);         /* the reply's other values (SUBSCRIBE a b), after it */
}

/* One reply fragment or refusal (alone, or an entry of a packed frame). */
static void on_message(rowanEngine *e, int node, const dgram_hdr *hp, const unsigned char *pl,
                       size_t plen) {
    rw_node *n = &e->nodes[node];
    dgram_hdr h = *hp;
    if (h.req == 0) {         /* pushed: pub/sub messages, MONITOR lines (never packed) */
        rw_push_datagram(e, node, &h, pl, plen);
        return;
    }
    rw_req *q = flight_find(n, h.req);
    if (!q) return;           /* a late duplicate of something finished */
    if (h.type == DGRAM_REFUSE) {
        if (h.term > e->term_seen) e->term_seen = h.term;
        switch (h.frag) {
        case DGRAM_R_STALE:
            if (q->internal) {      /* ask again under the term it told us */
                detach(e, q);
                if (++q->reroutes > MAX_REROUTES) {
                    fail(e, q, ROWAN_ERR_STALE, "refused for a stale term %d times", MAX_REROUTES);
                    return;
                }
                send_new(e, q, node);
            } else if (h.term > e->term) {
                detach(e, q);
                e->st.redirects++;
                if (++q->reroutes > MAX_REROUTES) {
                    fail(e, q, ROWAN_ERR_STALE, "stale configuration: term %llu refused %d "
                         "times (servers have %llu)", (unsigned long long)e->term,
                         MAX_REROUTES, (unsigned long long)e->term_seen);
                    return;
                }
                park(e, q, 0);
                rw_refresh(e, node);
            } else {
                reroute(e, q, -1, 0);   /* refreshed since it was sent */
            }
            return;
        case DGRAM_R_BUSY:
        case DGRAM_R_LOADING:      /* nothing ran: the same id again later */
            q->rto = q->rto * 2 > RTO_MAX ? RTO_MAX : q->rto * 2;
            q->t_next = eng_now(e) + q->rto;
            return;
        default:
            fail(e, q, ROWAN_ERR_PROTOCOL, "%s:%d refused the request: %.*s", n->host, n->port,
                 (int)(plen > 80 ? 80 : plen), (const char *)pl);
            return;
        }
    }
    if (h.type != DGRAM_REPLY) return;
    if (h.nfrag == 1 && h.off == 0 && plen == h.total) {
        reply_ready(e, q, (const char *)pl, plen, h.term);
        return;
    }
    /* fragments may come in any order, and again after a retransmission */
    if (dgram_join_add(&q->join, &h, pl, plen) != 1) return;
    unsigned char *b = q->join.buf;
    size_t total = q->join.total;
    q->join.buf = NULL;
    dgram_join_free(&q->join);
    reply_ready(e, q, (const char *)b, total, h.term);
    free(b);
}

static void on_datagram(rowanEngine *e, int node, const unsigned char *buf, size_t len) {
    dgram_hdr h;
    const char *why;
    if (dgram_get_hdr(buf, len, &h, &why) < 0 || h.client != e->nodes[node].client) return;
    const unsigned char *pl = buf + DGRAM_HDR_LEN;
    size_t plen = len - DGRAM_HDR_LEN;
    if (h.type != DGRAM_PACKED_REPLIES) {
        on_message(e, node, &h, pl, plen);
        return;
    }
    /* a packed frame: each entry is a whole reply, or a refusal (dgram.h) */
    dgram_entry en;
    size_t pos = 0;
    while (dgram_pack_next(pl, plen, h.type, &pos, &en)) {
        dgram_hdr eh = h;
        eh.type = en.type;
        eh.req = en.req;
        eh.frag = en.frag;
        eh.nfrag = en.type == DGRAM_REPLY ? 1 : 0;
        eh.total = en.type == DGRAM_REPLY ? en.len : 0;
        eh.off = 0;
        on_message(e, node, &eh, en.payload, en.len);
    }
}

/* The node refused our datagrams (nothing listens there): fail what is in
 * flight on it, and read the configuration from another node. */
static void node_dead(rowanEngine *e, int node) {
    rw_node *n = &e->nodes[node];
    int refresh = 0;
    while (n->head) {
        rw_req *q = n->head;
        refresh |= !q->internal;
        fail(e, q, ROWAN_ERR_DEAD, "server %s:%d is not reachable: connection refused "
             "(the request may or may not have run)", n->host, n->port);
    }
    if (refresh) node_gone(e, node);
}

static void check_refused(rowanEngine *e) {
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].refused) {
            e->nodes[i].refused = 0;
            node_dead(e, i);
        }
}

/* A datagram received (the fault hook may drop it). */
static void receive(rowanEngine *e, int node, const unsigned char *buf, size_t len) {
    e->st.received++;
    if (e->drop_recv > 0 && frand(e) < e->drop_recv) {
        e->st.dropped_recv++;
        return;
    }
    if (len <= DGRAM_MTU) on_datagram(e, node, buf, len);
}

void rw_on_datagram(rowanEngine *e, int node, const unsigned char *buf, size_t len,
                    uint64_t now) {
    uint64_t outer = batch_begin(e, now);
    receive(e, node, buf, len);
    check_refused(e);
    pump(e);
    batch_end(e, outer);
}

void rw_on_refused(rowanEngine *e, int node) {
    uint64_t outer = batch_begin(e, rw_now());
    e->nodes[node].refused = 1;
    check_refused(e);
    pump(e);
    batch_end(e, outer);
}

/* One recvmmsg, without waiting, of up to RW_RXBATCH datagrams from fd
 * into rx[0..]: each one's length is in msgs[i].msg_len (and MSG_TRUNC in
 * its msg_flags when it did not fit). */
int rw_recv_batch(int fd, unsigned char (*rx)[DGRAM_MTU + 64], struct mmsghdr *msgs) {
    struct iovec iov[RW_RXBATCH];
    for (int i = 0; i < RW_RXBATCH; i++) {
        iov[i].iov_base = rx[i];
        iov[i].iov_len = sizeof rx[i];
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    return recvmmsg(fd, msgs, RW_RXBATCH, MSG_DONTWAIT, NULL);
}

/* Everything queued on node's socket, RW_RXBATCH datagrams per call; a
 * short batch means the queue is empty (no extra call to hear EAGAIN). */
void rw_on_readable(rowanEngine *e, int node) {
    rw_node *n = &e->nodes[node];
    struct mmsghdr msgs[RW_RXBATCH];
    uint64_t outer = e->now;
    for (int round = 0; round < 16 && n->fd >= 0; round++) {
        int got = rw_recv_batch(n->fd, e->rx, msgs);
        if (got < 0) {
            if (errno == ECONNREFUSED) { node_dead(e, node); continue; }
            break;    /* EAGAIN, or an error the next send will meet again */
        }
        if (got > 0) batch_begin(e, rw_now());   /* one clock read per batch */
        for (int i = 0; i < got; i++)
            if (!(msgs[i].msg_hdr.msg_flags & MSG_TRUNC))
                receive(e, node, e->rx[i], msgs[i].msg_len);
        if (got < RW_RXBATCH) break;
    }
    check_refused(e);
    pump(e);
    batch_end(e, outer);
}

/* ---------------- timers ---------------- */

static void timeout_fail(rowanEngine *e, rw_req *q) {
    int node = q->node, internal = q->internal;
    if (q->state == RQ_FLIGHT || q->state == RQ_QUEUED)
        fail(e, q, ROWAN_ERR_TIMEOUT, "timeout: no reply from %s:%d in %.1f s (the request "
             "may or may not have run)", e->nodes[node].host, e->nodes[node].port,
             (double)e->timeout_ns / 1e9);
    else
        fail(e, q, ROWAN_ERR_TIMEOUT, "timeout: no usable configuration in %.1f s (%s)",
             (double)e->timeout_ns / 1e9, e->rf_err[0] ? e->rf_err : "waiting for a refresh");
    /* the node may be gone: the next command should find the new primary */
    if (!internal && node >= 0) node_gone(e, node);
}

void rw_on_timer(rowanEngine *e, uint64_t now) {
    uint64_t outer = batch_begin(e, now);
    check_refused(e);
    for (int i = 0; i < e->nnodes; i++) {
        rw_node *n = &e->nodes[i];
        for (rw_req *q = n->head, *next; q; q = next) {
            next = q->fnext;
            if (now >= q->t_deadline) {
                timeout_fail(e, q);
                next = n->head;     /* the list may have changed under us */
                continue;
            }
            if (now >= q->t_next) {
                e->st.retransmits++;
                q->tries++;
                q->rto = q->rto * 2 > RTO_MAX ? RTO_MAX : q->rto * 2;
                q->t_next = now + q->rto;
                put_hdr(e, q);      /* same id and term; acked may have moved */
                xmit(e, n, q);
            }
        }
    }
    for (int i = 0; i < e->nnodes; i++)
        while (e->nodes[i].qhead && now >= e->nodes[i].qhead->t_deadline)
            timeout_fail(e, e->nodes[i].qhead);   /* queued in order: the oldest first */
    for (rw_req *q = e->parked, *next; q; q = next) {
        next = q->pnext;
        if (now >= q->t_deadline) {
            timeout_fail(e, q);
            next = e->parked;
        } else if (q->t_next && now >= q->t_next) {
            unpark(e, q);
            q->state = RQ_NEW;
            dispatch(e, q);
            next = e->parked;
        }
    }
    rw_push_timer(e, now);
    pump(e);
    batch_end(e, outer);
}

uint64_t rw_next_timer(rowanEngine *e, uint64_t now) {
    uint64_t t = UINT64_MAX;
    for (int i = 0; i < e->nnodes; i++)
        for (rw_req *q = e->nodes[i].head; q; q = q->fnext) {
            if (q->t_next < t) t = q->t_next;
            if (q->t_deadline < t) t = q->t_deadline;
        }
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].qhead && e->nodes[i].qhead->t_deadline < t) t = e->nodes[i].qhead->t_deadline;
    for (rw_req *q = e->parked; q; q = q->pnext) {
        if (q->t_next && q->t_next < t) t = q->t_next;
        if (q->t_deadline < t) t = q->t_deadline;
    }
    t = t == UINT64_MAX ? t : t > now ? t - now : 0;
    uint64_t k = rw_push_next(e, now);
    return k < t ? k : t;
}

/* The blocking loop's busy-poll: when the replies of late have come back
 * within the window (the smoothed round trip is below it), poll without
 * sleeping until one is readable or the window ends, so a fast reply is
 * taken without the thread's sleep and wake-up (a few microseconds of
 * scheduler latency on each round trip, and the server's send is cheaper
 * when it has no sleeper to wake). Bounded by the window and by the next
 * timer, so retransmissions and timeouts fire as before; a slow server
 * (srtt above the window: a loaded machine, WAIT, a blocking command)
 * turns it off until the round trips are short again. Returns poll's. */
static int busy_poll(rowanEngine *e, struct pollfd *pf, int nf, uint64_t wait) {
    if (!e->busy_poll_ns || !nf || !e->srtt || e->srtt > e->busy_poll_ns) return 0;
    uint64_t t0 = rw_now(), span = wait < e->busy_poll_ns ? wait : e->busy_poll_ns;
    do {
        int r = poll(pf, (nfds_t)nf, 0);
        if (r != 0) {
            if (r > 0) e->st.spin_hits++;
            return r;
        }
    } while (rw_now() - t0 < span);
    e->st.spin_misses++;
    return 0;
}

/* One round of the blocking loop: wait for a datagram or the next timer. */
static void poll_once(rowanEngine *e) {
    struct pollfd pf[RW_MAX_NODES];
    int map[RW_MAX_NODES];
    rw_flush(e);
    uint64_t wait = rw_next_timer(e, rw_now());
    int ms = wait == UINT64_MAX ? 1000 : (int)((wait + 999999) / 1000000);
    int nf = 0;
    for (int i = 0; i < e->nnodes; i++)
        if (e->nodes[i].fd >= 0) {
            pf[nf].fd = e->nodes[i].fd;
            pf[nf].events = POLLIN;
            map[nf++] = i;
        }
    if (busy_poll(e, pf, nf, wait) > 0 || poll(pf, (nfds_t)nf, ms) > 0)
        for (int i = 0; i < nf; i++)
            if (pf[i].revents) rw_on_readable(e, map[i]);
    rw_on_timer(e, rw_now());
}

void rw_poll(rowanEngine *e) { poll_once(e); }

void rw_wait(rowanEngine *e, rw_req *q) {
    while (q->state != RQ_DONE) poll_once(e);
    rw_flush(e);    /* what the last turn sent (window, retransmissions) leaves now */
}

void rw_fail_all(rowanEngine *e, int err, const char *why) {
    e->closing = 1;     /* no configuration read starts while we empty the lists */
    for (int i = 0; i < e->nnodes; i++) {
        while (e->nodes[i].qhead) fail(e, e->nodes[i].qhead, err, "%s", why);
        while (e->nodes[i].head) fail(e, e->nodes[i].head, err, "%s", why);
    }
    while (e->parked) fail(e, e->parked, err, "%s", why);
}

/* ---------------- engine ---------------- */

void rw_set_faults(rowanEngine *e, double ds, double dr, double dup, uint64_t seed) {
    e->drop_send = ds;
    e->drop_recv = dr;
    e->dup_send = dup;
    e->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
}

static void faults_from_env(rowanEngine *e) {
    const char *s = getenv("ROWAN_FAULTS");
    if (!s || !*s) return;
    double ds = 0, dr = 0, dup = 0;
    unsigned long long seed = 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq++ = 0;
        if (!strcmp(tok, "drop-send")) ds = atof(eq);
        else if (!strcmp(tok, "drop-recv")) dr = atof(eq);
        else if (!strcmp(tok, "dup-send")) dup = atof(eq);
        else if (!strcmp(tok, "seed")) seed = strtoull(eq, NULL, 10);
    }
    rw_set_faults(e, ds, dr, dup, seed);
}

rowanEngine *rw_engine_new(const char *host, int port, const struct timeval *tv) {
    rowanEngine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->port_off = INT_MIN;
    const char *bp = getenv("ROWAN_BUSY_POLL_US");
    if (bp && *bp) e->busy_poll_ns = strtoull(bp, NULL, 10) * 1000ull;
    e->timeout_ns = tv ? (uint64_t)tv->tv_sec * 1000000000ull + (uint64_t)tv->tv_usec * 1000ull
                       : 5000000000ull;
    if (e->timeout_ns == 0) e->timeout_ns = 5000000000ull;
    node_add(e, host ? host : "127.0.0.1", port, 0);
    faults_from_env(e);
    return e;
}

void rw_engine_free(rowanEngine *e) {
    if (!e) return;
    for (int i = 0; i < e->nnodes; i++)   /* a shared socket is its owner's to close */
        if (e->nodes[i].fd >= 0 && !e->nodes[i].sock) close(e->nodes[i].fd);
    free(e->cmds);
    for (rw_req *q = e->pool, *next; q; q = next) { next = q->qnext; free(q); }
    rw_push_free(e);
    if (e->reader) redisReaderFree(e->reader);
    free(e);
}

int rw_bootstrap(rowanEngine *e, char *errstr, size_t errlen, int *err) {
    char why[128];
    if (node_open(e, 0, why, sizeof why) < 0) {
        seterr(err, errstr, errlen, ROWAN_ERR_IO, "%s", why);
        return -1;
    }
    while (e->refreshing) poll_once(e);   /* one already running: let it end */
    rw_refresh(e, 0);
    while (e->refreshing) poll_once(e);
    if (!e->rf_ok) {
        int code = strstr(e->rf_err, "connection refused") ? ROWAN_ERR_DEAD
                   : strstr(e->rf_err, "timeout") ? ROWAN_ERR_TIMEOUT : ROWAN_ERR_OTHER;
        seterr(err, errstr, errlen, code, "cannot read the configuration from %s:%d: %s",
               e->nodes[0].host, e->nodes[0].port, e->rf_err);
        return -1;
    }
    return 0;
}
