/* control.c -- the control thread: the receiving end of Rowan replication
 * over the sockets transport (DESIGN.md §5, Rowan-KV §4.3).
 *
 * It accepts links from peers' workers (and their catch-up streams) on the
 * replication port and does exactly what a NIC consuming a multi-packet SRQ
 * would do, plus the persist a NIC cannot: each message is an entry padded
 * to a multiple of 64 bytes; it is copied, in arrival order, to the next
 * slot of the one b-log (blog_land). After a round -- every readable link
 * drained -- one flush makes everything landed durable and each link that
 * landed messages then gets one cumulative ack: the count of its messages
 * now durable here. On block storage the control thread flushes inline
 * while the device is fast (flush_start); while it is slow the flush runs
 * on worker 0's flush thread (syncer.c), where it merges with the t-log's
 * flushes (one fdatasync of the pool file covers both), and the control
 * thread keeps landing meanwhile, with up to CTL_FLIGHTS flushes in
 * flight. It never
 * parses an entry beyond its header's lengths, never touches an index and
 * never takes a shard lock; the digest thread does all that afterwards.
 *
 * A link begins with the peer handshake (peer_auth.c): this side sends a
 * fresh challenge as soon as it accepts, and nothing the peer sends is
 * acted upon, let alone landed, until its response proved that it knows
 * the cluster's secret. Before that a link reads at most one handshake
 * message (PAUTH_MSG_MAX bytes), and a link still unauthenticated after
 * CTL_AUTH_TIMEOUT_MS is closed, so silent or slow peers cost neither
 * memory nor a slot for long; the thread never waits for any one peer.
 * Refused peers are logged (rate-limited) and counted (INFO
 * repl_auth_failures).
 *
 * The authenticated hello is a repl_hello (transport.h). A hello with another term,
 * another configuration digest, an unknown sender or the wrong mode is
 * refused (logged, closed): a node with a stale or different configuration
 * must not feed this b-log. A frame whose header is impossible (zero type,
 * lengths beyond one segment) closes the link: the stream can no longer be
 * trusted to be in step. A hello may declare a message cap (40-byte hello,
 * replication-msg-max): entries larger than it come as blocks, reassembled
 * by repl_rx_next (tcp_blocks.c) and landed whole, as one message; an
 * inconsistent block closes the link as any bad frame does. If the pool
 * has no room, the link is closed without acking: the sender's writes then
 * fail by timeout, nothing is acknowledged that was not persisted.
 *
 * Ack wire format: 8 bytes, little endian, the cumulative count. The count
 * 0 is sent right after an accepted hello, so a sender knows it is in.
 *
 * TLS (tls-replication / tls-cluster, peer_tls.h): an accepted link first
 * does the TLS handshake, one non-blocking step per readiness event (the
 * link waits for writability through EPOLLOUT when OpenSSL asks), under the
 * same deadline as the peer handshake; the challenge is sent once it is
 * done. A bus link is handed over with its TLS object, and the bytes
 * OpenSSL holds are read out first and passed along. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "blog.h"
#include "delta.h"
#include "bus.h"
#include "clean.h"
#include "cluster.h"
#include "control.h"
#include "listen.h"
#include "log.h"
#include "peer_auth.h"
#include "conn.h"
#include "peer_tls.h"
#include "le.h"
#include "rpc_backup.h"
#include "server.h"
#include "syncer.h"
#include "pool.h"
#include "transport.h"
#include "transport_verbs.h"

#define CTL_MAX_LINKS 1024
#define CTL_READ_BUDGET (4u << 20)   /* bytes read per link per round, for fairness */
#define CTL_FLIGHTS 4                /* b-log flushes in flight (block storage) */
#define CTL_AUTH_TIMEOUT_MS 5000     /* a peer's handshake must be done by then */

typedef struct ctl_link {
    conn c;                   /* the socket (and TLS, c.ssl) */
    int tls_wait;             /* TLS handshake not done yet */
    int ev_out;               /* EPOLLOUT is armed (TLS only) */
    int hello_ok;             /* authenticated, and its hello accepted */
    pauth auth;
    int64_t deadline_us;      /* of the handshake */
    int node, sender;
    uint8_t *buf;             /* unconsumed input */
    size_t len, cap;
    repl_rx rx;               /* the hello's cap, the entry in reassembly */
    uint64_t landed, acked;   /* messages landed / acked (persisted) */
    uint64_t upto[CTL_FLIGHTS]; /* per flush in flight: the landed count it covers */
    int dirty;                /* landed since the last flush began */
    int urgent;               /* ... and not only CommitVer markers */
} ctl_link;

/* A flush this node's worker asked for (control_submit_flush): its
 * batch's t-log writes were made before it was queued. */
typedef struct ctl_job {
    _Atomic int *done;
    void (*wake)(void *);
    void *arg;
} ctl_job;

typedef struct ctl_flight {
    blog_flush st;
    _Atomic int done;
    ctl_job *jobs;            /* the workers' flushes it covers */
    int njobs, capjobs;
} ctl_flight;

/* The control thread's whole state: one per server (server.control),
 * allocated by control_init; the thread gets it as its argument. */
struct control_state {
    int listen_fd, ep;
    pthread_t thread;
    _Atomic int stopping;
    int running;
    int verbs_on;             /* replication-transport verbs */
    ctl_link *links[CTL_MAX_LINKS];
    int nslots;               /* links[nslots..] are all NULL: the loops of every round stop there */
    _Atomic long long st_msgs, st_refused, st_links;
    _Atomic long long st_flushes;   /* flushes begun: each covers every message landed before it */
    _Atomic uint64_t drop_mask;     /* nodes whose links control_drop_nodes asked to close */
    _Atomic uint64_t drop_asked, drop_done;   /* requests made / handled (control_drop_nodes) */
    /* Flushes in flight (block storage), oldest first (flush_start); the
     * flush thread wakes us through the eventfd wake_fd. */
    int wake_fd;
    ctl_flight flights[CTL_FLIGHTS];
    int fl_head, fl_count;
    /* Workers' t-log flushes (control_submit_flush), queued under jobs_mu;
     * sleeping: the thread is (about to be) blocked in epoll_wait, so a
     * submitter must write wake_fd. */
    pthread_mutex_t jobs_mu;
    ctl_job *jobs;
    int njobs, capjobs;
    _Atomic int njobs_pending;
    _Atomic int sleeping;
    _Atomic int jobs_open;    /* the thread runs and takes workers' flushes */
    int64_t next_expiry_us;   /* expire_handshakes' next check */
    int64_t lazy_since_us;    /* first CommitVer marker landed since the last flush (0: none) */
    int busy;                 /* ctl_wait: the last round had events */
};
typedef struct control_state control_state;

void control_init(void) {
    control_state *cs = calloc(1, sizeof(*cs));
    cs->listen_fd = cs->ep = cs->wake_fd = -1;
    pthread_mutex_init(&cs->jobs_mu, NULL);
    server.control = cs;
}

void control_free(void) {
    control_state *cs = server.control;   /* after control_stop */
    if (!cs) return;
    free(cs->jobs);
    for (int i = 0; i < CTL_FLIGHTS; i++) free(cs->flights[i].jobs);   /* swapped with jobs */
    pthread_mutex_destroy(&cs->jobs_mu);
    free(cs);
    server.control = NULL;
}

static void link_close(control_state *cs, ctl_link *l, const char *why) {
    if (why)
        serverLog(LL_WARNING, "Replication link from node %d sender %d closed: %s", l->node,
                  l->sender, why);
    if (l->c.fd >= 0) {
        epoll_ctl(cs->ep, EPOLL_CTL_DEL, l->c.fd, NULL);
        conn_close(&l->c);
    }
    for (int i = 0; i < cs->nslots; i++)
        if (cs->links[i] == l) cs->links[i] = NULL;
    while (cs->nslots > 0 && !cs->links[cs->nslots - 1]) cs->nslots--;
    repl_rx_taken(&l->rx);   /* a partial entry never lands */
    free(l->buf);
    free(l);
    atomic_fetch_sub(&cs->st_links, 1);
}

/* Ack the first `count` messages of l (they are persisted). */
static int send_ack(ctl_link *l, uint64_t count) {
    uint8_t a[8];
    le_put_u64(a, count);
    if (peer_send_all(&l->c, a, sizeof(a)) != 0) return -1;
    l->acked = count;
    return 0;
}

/* Check a hello; 0 ok, or -1 with the reason. */
static int hello_check(ctl_link *l, const repl_hello *h, char *why, size_t n) {
    if (h->magic == REPL_HELLO_MAGIC_V1) {
        snprintf(why, n, "the sender speaks replication protocol 1 (an older rowan-server), this "
                 "node protocol 2: run the same rowan-server version on every node");
        return -1;
    }
    if (h->magic != REPL_HELLO_MAGIC) {
        snprintf(why, n, "not a Rowan replication hello");
        return -1;
    }
    /* Static: one configuration, so term and digest must both match.
     * Managed: terms move on while links stay up; what matters is that
     * the sender belongs: a node outside the membership (one that was
     * failed over, perhaps only paused) must not feed this b-log. Bus
     * links are open to every node of the table (a returning node asks
     * for its lease over them). */
    int managed = cluster_managed();
    if ((!managed && h->term != cluster_term()) || h->config_digest != cluster_config_digest()) {
        snprintf(why, n, "stale or different configuration (term %llu, digest %016llx; ours "
                 "term %llu, digest %016llx): check that every node has the same cluster-node "
                 "lines, shards and replicas",
                 (unsigned long long)h->term, (unsigned long long)h->config_digest,
                 (unsigned long long)cluster_term(), (unsigned long long)cluster_config_digest());
        return -1;
    }
    if (h->node >= cluster_nnodes() || h->node == cluster_self()) {
        snprintf(why, n, "unknown sender node %u", h->node);
        return -1;
    }
    if (managed && h->sender != REPL_LINK_BUS && !cluster_is_member(h->node)) {
        snprintf(why, n, "node %u is not a member of configuration term %llu", h->node,
                 (unsigned long long)cluster_term());
        return -1;
    }
    if ((int)h->mode != server.cfg.replication_mode) {
        snprintf(why, n, "sender uses replication-mode %s, this node %s",
                 h->mode ? "rpc" : "rowan", server.cfg.replication_mode ? "rpc" : "rowan");
        return -1;
    }
    l->node = h->node;
    l->sender = h->sender;
    return 0;
}

/* The handshake, then the hello, from the head of l's buffer: 0 = more
 * bytes needed, n > 0 = accepted (n bytes consumed), -1 = refused with why
 * (why empty: already reported). */
static long link_greet(ctl_link *l, char *why, size_t whylen) {
    uint8_t out[PAUTH_REPLY_LEN];
    size_t outlen = 0;
    long n = pauth_feed(&l->auth, l->buf, l->len, out, &outlen, why, whylen);
    /* a refusal record is best effort: the link closes anyway */
    int sent = outlen == 0 || peer_send_all(&l->c, out, outlen) == 0;
    if (n < 0) {
        pauth_refused_fd(l->c.fd, why);
        why[0] = '\0';
        return -1;
    }
    if (n == 0) return 0;
    if (!sent) {
        snprintf(why, whylen, "peer went away");
        return -1;
    }
    repl_hello h;
    memset(&h, 0, sizeof(h));
    if (l->auth.hello_len != REPL_HELLO_BASE_LEN && l->auth.hello_len != sizeof(h)) {
        snprintf(why, whylen, "not a Rowan replication hello");
        return -1;
    }
    memcpy(&h, l->auth.hello, l->auth.hello_len);
    if (l->auth.hello_len == sizeof(h) &&
        (h.msg_max < REPL_MSG_MAX_MIN || h.msg_max > REPL_MSG_MAX_TOP || h.reserved)) {
        snprintf(why, whylen, "the sender's hello declares a message cap of %u bytes "
                 "(replication-msg-max is 0 or %d to %lld)", h.msg_max, REPL_MSG_MAX_MIN,
                 REPL_MSG_MAX_TOP);
        return -1;
    }
    if (hello_check(l, &h, why, whylen) != 0) return -1;
    l->rx.msg_max = h.msg_max;
    return n;
}

/* Before a TLS link is handed over: read what OpenSSL holds already
 * decrypted into l's buffer (its next owner only learns of bytes on the
 * socket). 0, or -1 if the link broke. */
static int tls_drain(ctl_link *l) {
    while (peer_tls_pending(&l->c)) {
        if (l->cap - l->len < 16384) {
            l->cap = l->cap * 2 + 16384;
            l->buf = realloc(l->buf, l->cap);
        }
        ssize_t n = conn_read(&l->c, l->buf + l->len, l->cap - l->len);
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0) return -1;
        l->len += (size_t)n;
    }
    return 0;
}

/* Land every complete message in l's buffer. -1 if the link must close
 * (why says why, or is empty when that was reported already), 1 if it was
 * handed to a worker (rpc mode). */
static int land_frames(control_state *cs, ctl_link *l, char *why, size_t whylen) {
    size_t pos = 0;
    if (!l->hello_ok) {
        long n = link_greet(l, why, whylen);
        if (n <= 0) return (int)n;
        l->hello_ok = 1;
        pos = (size_t)n;
        if (send_ack(l, 0) != 0) {
            snprintf(why, whylen, "peer went away");
            return -1;
        }
        serverLog(LL_VERBOSE, "Replication link from node %d sender %d accepted", l->node, l->sender);
        if (l->sender == REPL_LINK_BUS) {
            /* a cluster bus link: the bus thread serves it (bus.c) */
            epoll_ctl(cs->ep, EPOLL_CTL_DEL, l->c.fd, NULL);
            if (tls_drain(l) != 0) {
                snprintf(why, whylen, "peer went away");
                return -1;
            }
            bus_adopt(l->c.fd, l->c.ssl, l->node, l->buf + pos, l->len - pos);
            l->c.fd = -1;
            l->c.ssl = NULL;
            return 1;
        }
        if (server.cfg.replication_mode == REPL_MODE_RPC) {
            /* rpc mode: a worker serves the link from now on (rpc_backup.c) */
            epoll_ctl(cs->ep, EPOLL_CTL_DEL, l->c.fd, NULL);
            rpcb_adopt(l->c.fd, l->node, l->sender, l->rx.msg_max, l->buf + pos, l->len - pos);
            l->c.fd = -1;
            return 1;
        }
    }
    for (;;) {
        const uint8_t *p;
        size_t span;
        long took = repl_rx_next(&l->rx, l->buf + pos, l->len - pos, l->landed + 1, &p, &span,
                                 why, whylen);
        if (took < 0) return -1;
        if (took == 0) break;
        pos += (size_t)took;
        if (!p) continue;   /* a block of an entry still incomplete */
        if (!blog_land(p, span)) {
            atomic_fetch_add(&cs->st_refused, 1);
            /* as a refused client write does (db.c): the cleaner reclaims
             * now, whatever its threshold, so that the sender's retry (a
             * catch-up after false failovers re-sends whole copies) finds
             * room instead of a pool that stays full */
            clean_note_refusal();
            snprintf(why, whylen, "the pool is full: the b-log cannot take more writes "
                     "(nothing from this link was acknowledged past what was persisted)");
            return -1;
        }
        l->landed++;
        l->dirty = 1;
        if (p[4] != LOG_COMMITVER) l->urgent = 1;
        else if (!cs->lazy_since_us) cs->lazy_since_us = monotonic_us();
        atomic_fetch_add(&cs->st_msgs, 1);
        if (p[4] == LOG_RESYNC) {
            /* a partial catch-up: our own share of it lands right behind
             * its begin marker (delta.h) */
            log_entry e;
            log_entry_decode(p, &e);
            if (delta_land_kept(&e, why, whylen) != 0) return -1;
        }
        repl_rx_taken(&l->rx);   /* landed: a reassembled entry is freed */
    }
    memmove(l->buf, l->buf + pos, l->len - pos);
    l->len -= pos;
    return 0;
}

/* Make room for what the next recv may bring: before the handshake is
 * done at most one handshake message, so an unauthenticated peer never
 * makes us buffer more than that. Returns how many bytes to ask for. */
static size_t link_room(ctl_link *l) {
    if (!l->hello_ok) {
        if (!l->buf) {
            l->cap = PAUTH_MSG_MAX;
            l->buf = malloc(l->cap);
        }
        return PAUTH_MSG_MAX - l->len; /* > 0: a full message is always decided */
    }
    if (l->cap - l->len < 65536) {
        l->cap = l->cap < 262144 ? 262144 : l->cap * 2;
        l->buf = realloc(l->buf, l->cap);
    }
    return l->cap - l->len;
}

/* Close l after land_frames returned rc != 0: log why, unless it is empty
 * (reported already) or the link went to a worker (rc > 0). */
static void link_end(control_state *cs, ctl_link *l, int rc, const char *why) {
    link_close(cs, l, rc < 0 && why[0] ? why : NULL);
}

/* TLS: arm or disarm EPOLLOUT (OpenSSL needs the socket writable). */
static void link_want_out(control_state *cs, ctl_link *l, int out) {
    if (out == l->ev_out) return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = l};
    epoll_ctl(cs->ep, EPOLL_CTL_MOD, l->c.fd, &ev);
    l->ev_out = out;
}

/* TLS: one step of the handshake, then the challenge. 0 = go on reading,
 * -1 = not yet, or l was closed. */
static int link_tls(control_state *cs, ctl_link *l) {
    if (!l->tls_wait) return 0;
    int want_write = 0;
    char why[256];
    int rc = peer_tls_handshake(&l->c, &want_write, why, sizeof(why));
    if (rc < 0) {
        pauth_refused_fd(l->c.fd, why);
        link_close(cs, l, NULL);
        return -1;
    }
    link_want_out(cs, l, rc == 0 && want_write);
    if (rc == 0) return -1;
    l->tls_wait = 0;
    if (peer_send_all(&l->c, l->auth.challenge, PAUTH_CHALLENGE_LEN) != 0) {
        link_close(cs, l, NULL);
        return -1;
    }
    return 0;
}

/* Read what l has (up to the round's budget) and land it. */
static void link_readable(control_state *cs, ctl_link *l) {
    size_t got = 0;
    char why[512];
    if (l->c.ssl && link_tls(cs, l) != 0) return;
    while (got < CTL_READ_BUDGET) {
        size_t want = link_room(l);
        ssize_t n = l->c.ssl ? conn_read(&l->c, l->buf + l->len, want)
                             : recv(l->c.fd, l->buf + l->len, want, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (l->c.ssl) link_want_out(cs, l, (l->c.want & CONN_READ_WANTS_WRITE) != 0);
            break;
        }
        if (n <= 0) {
            /* land what arrived complete before the close, then go */
            int rc = land_frames(cs, l, why, sizeof(why));
            if (rc != 0) {
                link_end(cs, l, rc, why);
                return;
            }
            if (l->dirty) {
                blog_persist();
                send_ack(l, l->landed); /* best effort: the peer may be gone */
            }
            link_close(cs, l, NULL);
            return;
        }
        l->len += (size_t)n;
        got += (size_t)n;
        int rc = land_frames(cs, l, why, sizeof(why));
        if (rc != 0) {
            link_end(cs, l, rc, why);
            return;
        }
        /* A short read drained the socket (nearly always): skip the recv
         * that would only say EAGAIN; epoll is level-triggered anyway (but
         * bytes OpenSSL holds wake nobody). */
        if ((size_t)n < want && !peer_tls_pending(&l->c)) break;
    }
}

static void accept_all(control_state *cs) {
    for (;;) {
        int fd = accept4(cs->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        int slot = -1;
        for (int i = 0; i < CTL_MAX_LINKS && slot < 0; i++)
            if (!cs->links[i]) slot = i;
        if (slot < 0) {
            serverLog(LL_WARNING, "Replication: too many links (%d), refusing one", CTL_MAX_LINKS);
            close(fd);
            continue;
        }
        ctl_link *l = calloc(1, sizeof(*l));
        l->c.fd = fd;
        if (peer_tls_on()) {
            /* the challenge goes out inside TLS, after its handshake */
            l->c.ssl = peer_tls_new(fd, 1);
            l->tls_wait = 1;
        }
        l->node = l->sender = -1;
        l->deadline_us = monotonic_us() + CTL_AUTH_TIMEOUT_MS * 1000LL;
        uint8_t challenge[PAUTH_CHALLENGE_LEN];
        char why[256];
        if (pauth_server_begin(&l->auth, challenge, why, sizeof(why)) != 0 ||
            (peer_tls_on() ? !l->c.ssl : tcp_send_all(fd, challenge, sizeof(challenge)) != 0)) {
            if (l->auth.state == PAUTH_FAILED) pauth_refused_fd(fd, why);
            conn_close(&l->c);
            free(l);
            continue;
        }
        cs->links[slot] = l;
        if (slot >= cs->nslots) cs->nslots = slot + 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        epoll_ctl(cs->ep, EPOLL_CTL_ADD, fd, &ev);
        atomic_fetch_add(&cs->st_links, 1);
    }
}

/* Flushes in flight (block storage), oldest first: up to CTL_FLIGHTS, each
 * a job on worker 0's flush thread so that b-log flushes share device
 * flushes with the t-log's instead of adding their own. The thread wakes us
 * through an eventfd; jobs of one flush thread complete in submission
 * order. While one flush runs, the next round's landings get a flush of
 * their own instead of waiting for the running one to finish first
 * (control_state's flights). The flush thread wakes us with ctl_wake. */
static void ctl_wake(void *arg) {
    control_state *cs = arg;
    uint64_t one = 1;
    if (write(cs->wake_fd, &one, sizeof(one)) < 0) { /* a wakeup is pending anyway */ }
}

/* Ack what each finished flush covered, oldest first, and tell the
 * workers whose batches it covered. */
static void flush_complete(control_state *cs) {
    while (cs->fl_count && atomic_load(&cs->flights[cs->fl_head].done)) {
        ctl_flight *f = &cs->flights[cs->fl_head];
        blog_flush_end(&f->st);
        for (int i = 0; i < cs->nslots; i++) {
            ctl_link *l = cs->links[i];
            if (l && l->upto[cs->fl_head] > l->acked && send_ack(l, l->upto[cs->fl_head]) != 0)
                link_close(cs, l, "peer went away");
        }
        /* a worker still waiting for acks is woken by them (worker.c) */
        for (int j = 0; j < f->njobs; j++)
            if (atomic_exchange(f->jobs[j].done, 1) == 2) f->jobs[j].wake(f->jobs[j].arg);
        f->njobs = 0;
        cs->fl_head = (cs->fl_head + 1) % CTL_FLIGHTS;
        cs->fl_count--;
    }
}

/* Start making what landed durable: at once on pmem (each landing was
 * persisted: just publish and ack). On block storage the control thread
 * flushes inline (fdatasync here, then ack) while the device is fast:
 * what arrives meanwhile waits in the sockets and joins the next round's
 * flush, as a worker's round does standalone (worker.c). Handing each
 * flush to worker 0's flush thread cost two thread wake-ups per flush and
 * flushed smaller batches (measured, k=3, 100% SET, issue 14: 5.8-7.5
 * against 9.5-11.9 b-log writes per flush, and 82-102 against 67-85
 * CPU-seconds per million SETs over the three nodes, at the same or a
 * higher rate). While the device is slow (syncer.c, a flush over 20 ms)
 * the flush goes to the syncer again, so that a stuck device does not
 * stop the thread reading its links. */
static void flush_start(control_state *cs) {
    int slot = (cs->fl_head + cs->fl_count) % CTL_FLIGHTS;
    ctl_flight *f = &cs->flights[slot];
    /* the workers' flushes queued so far: their writes were made before */
    pthread_mutex_lock(&cs->jobs_mu);
    ctl_job *jobs = f->jobs;
    int cap = f->capjobs;
    f->jobs = cs->jobs;
    f->capjobs = cs->capjobs;
    f->njobs = cs->njobs;
    cs->jobs = jobs;
    cs->capjobs = cap;
    cs->njobs = 0;
    atomic_store(&cs->njobs_pending, 0);
    pthread_mutex_unlock(&cs->jobs_mu);
    for (int i = 0; i < cs->nslots; i++) {
        ctl_link *l = cs->links[i];
        if (!l) continue;
        l->upto[slot] = l->dirty ? l->landed : 0;
        l->dirty = l->urgent = 0;
    }
    cs->lazy_since_us = 0;
    blog_flush_begin(&cs->flights[slot].st);
    cs->fl_count++;
    atomic_fetch_add(&cs->st_flushes, 1);
    int pmem = pool_is_pmem(server.pool);
    if (pmem || syncer_device_fast()) {
        if (!pmem) syncer_flush_now();   /* inline: see the comment above */
        atomic_store(&cs->flights[slot].done, 1);
        flush_complete(cs);
        return;
    }
    atomic_store(&cs->flights[slot].done, 0);
    syncer_submit_to(0, &cs->flights[slot].done, ctl_wake, cs);
}

/* Close links whose handshake is overdue (checked at most every 100 ms). */
static void expire_handshakes(control_state *cs) {
    int64_t now = monotonic_us();
    if (now < cs->next_expiry_us) return;
    cs->next_expiry_us = now + 100000;
    for (int i = 0; i < cs->nslots; i++) {
        ctl_link *l = cs->links[i];
        if (!l || l->hello_ok || now < l->deadline_us) continue;
        char why[64];
        snprintf(why, sizeof(why), "no handshake within %d ms", CTL_AUTH_TIMEOUT_MS);
        pauth_refused_fd(l->c.fd, why);
        link_close(cs, l, NULL);
    }
}

/* Wait for the next round's events. Under load messages arrive every few
 * tens of microseconds, and putting the thread to sleep and waking it again
 * costs more than that (measured: most of the control thread's CPU was
 * context switching). So after a busy round poll for up to CTL_SPIN_US
 * before blocking -- on pmem only: on block storage a round's acks wait for
 * a device flush of milliseconds, the senders' next messages come after
 * that, and polling only takes CPU from the workers (measured: disk pools
 * lost ~15% with it). */
#define CTL_SPIN_US 50
static int ctl_wait(control_state *cs, struct epoll_event *evs, int max, int timeout_ms) {
    if (cs->busy && pool_is_pmem(server.pool)) {
        int64_t until = monotonic_us() + CTL_SPIN_US;
        do {
            int n = epoll_wait(cs->ep, evs, max, 0);
            if (n) return n;
        } while (monotonic_us() < until);
    }
    /* Announce the sleep BEFORE looking for queued worker flushes: a
     * worker that queues one after our check sees the flag and writes
     * wake_fd (control_submit_flush; seq_cst store/load pairs). */
    atomic_store(&cs->sleeping, 1);
    if (atomic_load(&cs->njobs_pending)) timeout_ms = 0;
    int n = epoll_wait(cs->ep, evs, max, timeout_ms);
    atomic_store(&cs->sleeping, 0);
    cs->busy = n > 0;
    return n;
}

/* A worker's batch (its t-log writes made) needs a device flush: the next
 * b-log flush of this thread covers it, so that a node does one fdatasync
 * for both its logs instead of one each (issue 14: with k=3 every node is
 * a primary and a backup at once). */
int control_submit_flush(_Atomic int *done, void (*wake)(void *), void *arg) {
    control_state *cs = server.control;
    if (!cs || pool_is_pmem(server.pool) || !syncer_device_fast()) return -1;
    pthread_mutex_lock(&cs->jobs_mu);
    if (!atomic_load(&cs->jobs_open)) {
        pthread_mutex_unlock(&cs->jobs_mu);
        return -1;
    }
    if (cs->njobs == cs->capjobs) {
        cs->capjobs = cs->capjobs ? cs->capjobs * 2 : 16;
        cs->jobs = realloc(cs->jobs, sizeof(ctl_job) * (size_t)cs->capjobs);
    }
    cs->jobs[cs->njobs++] = (ctl_job){done, wake, arg};
    atomic_store(&cs->njobs_pending, cs->njobs);
    pthread_mutex_unlock(&cs->jobs_mu);
    if (atomic_load(&cs->sleeping)) ctl_wake(cs);
    return 0;
}

void control_drop_nodes(uint64_t nodes, int wait) {
    control_state *cs = server.control;
    if (!nodes) return;
    atomic_fetch_or(&cs->drop_mask, nodes);
    uint64_t ticket = atomic_fetch_add(&cs->drop_asked, 1) + 1;
    if (cs->wake_fd >= 0) ctl_wake(cs);
    /* the control thread handles requests at least every 100 ms */
    while (wait && cs->running && atomic_load(&cs->drop_done) < ticket) usleep(200);
}

static void drop_requested(control_state *cs) {
    uint64_t asked = atomic_load(&cs->drop_asked);
    uint64_t m = atomic_exchange(&cs->drop_mask, 0);
    for (int i = 0; i < cs->nslots && m; i++) {
        ctl_link *l = cs->links[i];
        if (l && l->node >= 0 && ((m >> l->node) & 1)) link_close(cs, l, "dropped: its node left the "
                                                                      "configuration, or a re-sync "
                                                                      "was requested");
    }
    atomic_store(&cs->drop_done, asked);
}

/* Does what landed need a flush now? Writes do, and so do the workers'
 * batches (control_submit_flush). A round that landed only CommitVer
 * markers (the replication manager's, every 15 ms from each primary) does
 * not: nothing waits for their ack, the digest applies them once a flush
 * published them, and recovery skips them. They ride on the next flush,
 * or get one of their own after CTL_LAZY_US (issue 14: on block storage
 * they otherwise cost a device flush, an ack and two wake-ups each). */
#define CTL_LAZY_US 15000
static int flush_wanted(control_state *cs) {
    if (atomic_load(&cs->njobs_pending)) return 1;
    if (atomic_load(&cs->stopping)) return 0;
    int lazy = pool_is_pmem(server.pool) || (cs->lazy_since_us && monotonic_us() - cs->lazy_since_us >= CTL_LAZY_US);
    for (int i = 0; i < cs->nslots; i++) {
        ctl_link *l = cs->links[i];
        if (l && l->dirty && (l->urgent || lazy)) return 1;
    }
    return 0;
}

static void *control_main(void *arg) {
    control_state *cs = arg;
    pthread_setname_np(pthread_self(), "rowan-control");
    struct epoll_event evs[64];
    while (!atomic_load(&cs->stopping) || cs->fl_count || atomic_load(&cs->njobs_pending)) {
        /* With the verbs transport the same thread also drives the SRQ
         * (landing, persisting and acking what the NIC delivered); the TCP
         * side then only carries the managers' catch-up streams. */
        if (cs->verbs_on) verbs_receiver_poll(0);
        int timeout = cs->verbs_on ? 1 : 100;
        if (cs->lazy_since_us) {   /* markers waiting for a flush: at most CTL_LAZY_US */
            int64_t left = cs->lazy_since_us + CTL_LAZY_US - monotonic_us();
            int ms = left <= 0 ? 0 : (int)((left + 999) / 1000);
            if (ms < timeout) timeout = ms;
        }
        int n = ctl_wait(cs, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) accept_all(cs);
            else if (evs[i].data.ptr == &cs->wake_fd) {
                uint64_t v;
                if (read(cs->wake_fd, &v, sizeof(v)) < 0) { /* nothing pending */ }
            } else link_readable(cs, evs[i].data.ptr);   /* EPOLLOUT too: TLS wants it */
        }
        flush_complete(cs);
        drop_requested(cs);
        expire_handshakes(cs);
        if (cs->fl_count == CTL_FLIGHTS) continue;
        if (flush_wanted(cs)) flush_start(cs);
    }
    return NULL;
}

/* Does one of bind's addresses (redis.conf syntax: "-" marks an optional
 * one; "*" and 0.0.0.0 are every IPv4 address, "::" every IPv6 one) cover
 * the address sa? */
static int bind_allows(const struct sockaddr *sa) {
    char *copy = strdup(server.cfg.bind ? server.cfg.bind : ""), *save = NULL;
    int ok = 0;
    for (char *a = strtok_r(copy, " ", &save); a && !ok; a = strtok_r(NULL, " ", &save)) {
        if (a[0] == '-') a++;
        if (sa->sa_family == AF_INET) {
            struct in_addr in;
            const struct in_addr *want = &((const struct sockaddr_in *)sa)->sin_addr;
            ok = !strcmp(a, "*") || !strcmp(a, "0.0.0.0") ||
                 (inet_pton(AF_INET, a, &in) == 1 && in.s_addr == want->s_addr);
        } else if (sa->sa_family == AF_INET6) {
            struct in6_addr in6;
            const struct in6_addr *want = &((const struct sockaddr_in6 *)sa)->sin6_addr;
            ok = !strcmp(a, "::") || !strcmp(a, "::*") ||
                 (inet_pton(AF_INET6, a, &in6) == 1 && !memcmp(&in6, want, sizeof(in6)));
        }
    }
    free(copy);
    return ok;
}

/* Bound early, before the pool is opened (control_listen), so that a port
 * a running server listens on stops startup before anything else; listening
 * starts with the thread, after recovery: until then peers are refused and
 * retry (as before), rather than having their connections and hellos
 * queued unanswered until they give up. */
#define CTL_BACKLOG 128

/* Without a secret the port is only as private as bind makes the RESP
 * port: an address bind does not allow is refused, rather than silently
 * opening a port through which anyone could write to this node's backups
 * (peer_auth.c). */
int control_listen(char *err, size_t errlen) {
    control_state *cs = server.control;
    const cluster_node *me = cluster_self_node();   /* known in static and managed mode */
    char why[256];
    if (peer_tls_configure(err, errlen) != 0) return -1;
    cs->listen_fd = bind_tcp(me->host, me->repl_port, why, sizeof(why));
    if (cs->listen_fd < 0) {
        snprintf(err, errlen, "Could not create replication TCP listening socket %s:%d: %s",
                 me->host, me->repl_port, why);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    int allowed = getsockname(cs->listen_fd, (struct sockaddr *)&ss, &sslen) == 0 &&
                  bind_allows((struct sockaddr *)&ss);
    /* over TLS a peer must hold a certificate of the cluster's CA: that
     * authenticates it even without a secret */
    pauth_set_open_without_secret(allowed || peer_tls_on());
    if (!allowed && !peer_tls_on() && !strcmp(pauth_secret_source(), "none")) {
        snprintf(err, errlen, "The replication port %s:%d is on an address that bind (%s) does "
                 "not allow, and no cluster-secret or requirepass is set: anyone reaching it could "
                 "write to this node's backups. Set cluster-secret (the same on every node), or "
                 "add %s to bind", me->host, me->repl_port, server.cfg.bind, me->host);
        close(cs->listen_fd);
        cs->listen_fd = -1;
        return -1;
    }
    return 0;
}

int control_start(char *err, size_t errlen) {
    control_state *cs = server.control;
    const cluster_node *me = cluster_self_node();
    if (cs->listen_fd < 0 && control_listen(err, errlen) != 0) return -1;
    if (listen(cs->listen_fd, CTL_BACKLOG) != 0) {
        snprintf(err, errlen, "replication port %s:%d: listen: %s", me->host, me->repl_port,
                 strerror(errno));
        return -1;
    }
    cs->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(cs->ep, EPOLL_CTL_ADD, cs->listen_fd, &ev);
    cs->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &cs->wake_fd};
    epoll_ctl(cs->ep, EPOLL_CTL_ADD, cs->wake_fd, &wev);
    blog_init();
    if (server.cfg.replication_transport == REPL_TRANSPORT_VERBS) {
        /* rdma_cm listens on the same port number as the TCP listener (the
         * RDMA CM port space of RoCE/InfiniBand; an iWARP device would need
         * another port) */
        char verr[256];
        if (verbs_receiver_start(me->host, me->repl_port, cluster_term(), cluster_config_digest(),
                                 verr, sizeof(verr)) != 0) {
            snprintf(err, errlen, "replication-transport verbs: %s", verr);
            return -1;
        }
        cs->verbs_on = 1;
    }
    cs->running = 1;
    atomic_store(&cs->jobs_open, 1);
    rowan_thread_create(&cs->thread, NULL, control_main, cs);
    serverLog(LL_NOTICE, "Replication: control thread listening on %s:%d (b-log, mode %s, peers "
              "authenticate with: %s%s)", me->host, me->repl_port,
              server.cfg.replication_mode ? "rpc" : "rowan", pauth_secret_source(),
              peer_tls_on() ? ", over TLS with certificates of tls-ca-cert-file" : "");
    return 0;
}

void control_stop(void) {
    control_state *cs = server.control;
    if (!cs->running) {   /* never started: only the socket control_listen bound */
        if (cs->listen_fd >= 0) close(cs->listen_fd);
        cs->listen_fd = -1;
        return;
    }
    /* no worker flush is taken from now on; the thread covers those queued */
    pthread_mutex_lock(&cs->jobs_mu);
    atomic_store(&cs->jobs_open, 0);
    pthread_mutex_unlock(&cs->jobs_mu);
    atomic_store(&cs->stopping, 1);
    pthread_join(cs->thread, NULL);
    if (cs->verbs_on) verbs_receiver_stop();
    for (int i = 0; i < cs->nslots; i++)
        if (cs->links[i]) link_close(cs, cs->links[i], NULL);
    close(cs->listen_fd);
    cs->listen_fd = -1;
    close(cs->wake_fd);
    close(cs->ep);
    cs->running = 0;
}

void control_get_stats(long long *msgs, long long *refused, long long *nlinks, long long *flushes) {
    control_state *cs = server.control;
    *msgs = atomic_load(&cs->st_msgs);
    *flushes = atomic_load(&cs->st_flushes);
    *refused = atomic_load(&cs->st_refused);
    *nlinks = atomic_load(&cs->st_links);
}
