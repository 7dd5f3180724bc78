/* transport_tcp.c -- the sockets backend of the replication transport
 * (transport.h): one TCP connection per link, driven by the sending
 * worker's libevent loop.
 *
 * Sending never blocks: link_send appends the entry and its zero padding to
 * an output evbuffer; link_flush writes what the socket takes at the end of
 * the worker's round and leaves a write event armed for the rest. Acks
 * arrive as 8-byte cumulative counts on the same connection; only the
 * newest complete one matters. Connecting is asynchronous too (non-blocking
 * connect with a timer for connect-timeout), so a dead peer costs a worker
 * nothing but a failed link.
 *
 * A link opens with the peer handshake (peer_auth.c): the receiver's
 * challenge comes first; our response (which carries the hello) is put in
 * front of whatever was queued meanwhile, and nothing is written before it.
 * Acks count only after the receiver's proof verified, so a receiver that
 * does not know the cluster secret can never make a write look replicated.
 *
 * Over TLS (peer_tls.h) the link first does the TLS handshake, driven by
 * the same events (the receiver speaks first only inside TLS), then
 * everything above runs through SSL_read/SSL_write. The plaintext path is
 * untouched: l->c.ssl is NULL and the calls are the same recv/writev.
 *
 * With replication-msg-max the hello declares a message cap, and an entry
 * whose span exceeds it goes out as blocks (tcp_blocks.c). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include "le.h"
#include "log.h"
#include "peer_auth.h"
#include "conn.h"
#include "peer_tls.h"
#include "transport.h"

struct repl_link {
    int fd;
    conn c;                   /* TLS: c.ssl set (c.fd == fd); NULL: plaintext */
    int tls_ok;               /* TLS handshake done */
    int connected, dead;
    int can_write;            /* our handshake response is queued first */
    pauth auth;
    struct evbuffer *hs;      /* handshake bytes received, not consumed */
    struct event *rd, *wr, *timer;
    struct evbuffer *out;
    uint64_t sent;
    uint32_t msg_max;         /* the cap our hello declared (0: none) */
    uint8_t ackbuf[8];
    int acklen;
    repl_link_cbs cbs;
};

static const uint8_t zeros[LOG_ALIGN];

static void tcp_down(repl_link *l, const char *why) {
    if (l->dead) return;
    l->dead = 1;
    event_del(l->rd);
    event_del(l->wr);
    event_del(l->timer);
    if (l->cbs.on_down) l->cbs.on_down(l->cbs.ctx, why);
}

/* Write the head of the output through TLS: like evbuffer_write, up to
 * one full TLS record at a time (the buffer's chunks are small; a record
 * each would cost a header and a MAC per chunk). A retry after EAGAIN
 * offers the same bytes again, as OpenSSL requires. */
#define TLS_RECORD_MAX 16384
static int tls_write(repl_link *l) {
    size_t len = evbuffer_get_length(l->out);
    if (len > TLS_RECORD_MAX) len = TLS_RECORD_MAX;
    unsigned char *p = evbuffer_pullup(l->out, (ev_ssize_t)len);
    ssize_t n = conn_write(&l->c, p, len);
    if (n > 0) evbuffer_drain(l->out, (size_t)n);
    return (int)n;
}

static void tcp_write_some(repl_link *l) {
    if (l->c.ssl && !l->tls_ok) return;
    while (evbuffer_get_length(l->out)) {
        int n = l->c.ssl ? tls_write(l) : evbuffer_write(l->out, l->fd);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (n <= 0) {
            char why[128];
            snprintf(why, sizeof(why), "send failed: %s", n < 0 ? strerror(errno) : "closed");
            tcp_down(l, why);
            return;
        }
    }
    /* a TLS write that needs the socket readable is retried on reading */
    if (evbuffer_get_length(l->out) && !(l->c.want & CONN_WRITE_WANTS_READ))
        event_add(l->wr, NULL);
}

static void tcp_on_read(evutil_socket_t fd, short what, void *arg);

/* Drive the TLS handshake; 1 = done, 0 = waiting, -1 = the link went down. */
static int tls_step(repl_link *l) {
    int want_write = 0;
    char why[256];
    int rc = peer_tls_handshake(&l->c, &want_write, why, sizeof(why));
    if (rc < 0) {
        tcp_down(l, why);
        return -1;
    }
    if (rc == 0) {
        if (want_write) event_add(l->wr, NULL);
        return 0;
    }
    l->tls_ok = 1;
    return 1;
}

static void tcp_on_write(evutil_socket_t fd, short what, void *arg) {
    repl_link *l = arg;
    if (!l->connected) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char why[160];
            snprintf(why, sizeof(why), "connect failed: %s", strerror(err));
            tcp_down(l, why);
            return;
        }
        l->connected = 1;
    }
    if (l->c.ssl) {
        if (!l->tls_ok) {
            if (tls_step(l) <= 0) return;
            tcp_on_read(fd, EV_READ, l);   /* the receiver may have spoken */
            return;
        }
        if (l->c.want & CONN_READ_WANTS_WRITE) {
            tcp_on_read(fd, EV_READ, l);
            if (l->dead) return;
        }
    }
    if (l->can_write) tcp_write_some(l);
}

/* Feed received bytes to the handshake; once it is done, what followed
 * them stays in l->hs. 1 = done, 0 = not yet, -1 = the link went down. */
static int tcp_handshake(repl_link *l, const uint8_t *p, size_t n) {
    char why[256];
    evbuffer_add(l->hs, p, n);
    int rc = pauth_feed_evbuffer(&l->auth, l->hs, l->out, why, sizeof(why));
    if (rc < 0) {
        tcp_down(l, why);
        return -1;
    }
    if (!l->can_write && l->auth.state != PAUTH_CLIENT_WAIT_CHALLENGE) {
        /* our response is at the front now: the peer spoke, we are connected */
        l->can_write = l->connected = 1;
        tcp_write_some(l);
        if (l->dead) return -1;
    }
    return rc;
}

/* Take ack bytes; returns 1 with *latest set if an ack completed. */
static int tcp_take_acks(repl_link *l, const uint8_t *p, size_t n, uint64_t *latest) {
    int have = 0;
    for (size_t i = 0; i < n; i++) {
        l->ackbuf[l->acklen++] = p[i];
        if (l->acklen == 8) {
            *latest = le_get_u64(l->ackbuf);
            l->acklen = 0;
            have = 1;
        }
    }
    return have;
}

static void tcp_on_read(evutil_socket_t fd, short what, void *arg) {
    repl_link *l = arg;
    uint8_t buf[4096];
    if (l->c.ssl) {
        if (!l->tls_ok) {
            /* before the connect completed: only its failure reads */
            if (!l->connected) tcp_on_write(fd, EV_WRITE, l);
            else tls_step(l);
            if (!l->tls_ok || l->dead) return;
        }
        if (l->c.want & CONN_WRITE_WANTS_READ) {
            l->c.want &= ~CONN_WRITE_WANTS_READ;
            tcp_write_some(l);
            if (l->dead) return;
        }
    }
    for (;;) {
        ssize_t n = l->c.ssl ? conn_read(&l->c, buf, sizeof(buf)) : recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            if (l->c.want & CONN_READ_WANTS_WRITE) event_add(l->wr, NULL);
            return;
        }
        if (n <= 0) {
            tcp_down(l, n == 0 ? "the peer closed the link (restarted, or refused our hello: "
                                 "see its log)" : strerror(errno));
            return;
        }
        uint64_t latest = 0;
        int have_ack = 0;
        if (pauth_done(&l->auth)) {
            have_ack = tcp_take_acks(l, buf, (size_t)n, &latest);
        } else {
            int rc = tcp_handshake(l, buf, (size_t)n);
            if (rc < 0) return;
            if (rc == 1) { /* acks may follow the handshake in the same read */
                size_t left = evbuffer_get_length(l->hs);
                have_ack = tcp_take_acks(l, evbuffer_pullup(l->hs, (ev_ssize_t)left), left, &latest);
                evbuffer_drain(l->hs, left);
            }
        }
        if (have_ack) {
            event_del(l->timer); /* the hello was accepted */
            if (l->cbs.on_ack) l->cbs.on_ack(l->cbs.ctx, latest);
            if (l->dead) return;
        }
        /* drained (level-triggered event); over TLS, bytes may wait inside
         * OpenSSL with none left on the socket */
        if ((size_t)n < sizeof(buf) && !peer_tls_pending(&l->c)) return;
    }
}

static void tcp_on_timeout(evutil_socket_t fd, short what, void *arg) {
    repl_link *l = arg;
    tcp_down(l, pauth_done(&l->auth) ? "the peer did not accept our hello in time"
             : l->connected ? "no handshake from the peer in time (is it a Rowan node?)"
                            : "connect timed out");
}

/* Resolve host:port and start a non-blocking connect (TCP_NODELAY). Returns
 * the socket with *connected set (0: in progress), or -1 with err. */
static int tcp_start_connect(const char *host, int port, int *connected, char *err,
                             size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s:%d: %s", host, port, gai_strerror(rc));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0 && errno != EINPROGRESS) {
        snprintf(err, errlen, "connect %s:%d: %s", host, port, strerror(errno));
        close(fd);
        return -1;
    }
    *connected = rc == 0;
    return fd;
}

static repl_link *tcp_open(struct event_base *base, const char *host, int port,
                           const repl_hello *hello, const repl_link_cbs *cbs, int timeout_ms,
                           char *err, size_t errlen) {
    int connected = 0;
    int fd = tcp_start_connect(host, port, &connected, err, errlen);
    if (fd < 0) return NULL;
    repl_link *l = calloc(1, sizeof(*l));
    l->fd = l->c.fd = fd;
    l->connected = connected;
    if (peer_tls_on() && !(l->c.ssl = peer_tls_new(fd, 0))) {
        snprintf(err, errlen, "TLS: cannot create a connection object");
        close(fd);
        free(l);
        return NULL;
    }
    l->cbs = *cbs;
    l->out = evbuffer_new();
    l->hs = evbuffer_new();
    l->rd = event_new(base, fd, EV_READ | EV_PERSIST, tcp_on_read, l);
    l->wr = event_new(base, fd, EV_WRITE, tcp_on_write, l);
    l->timer = evtimer_new(base, tcp_on_timeout, l);
    pauth_client_begin(&l->auth, hello, repl_hello_len(hello));
    l->msg_max = hello->msg_max;
    event_add(l->rd, NULL);
    event_add(l->wr, NULL);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(l->timer, &tv);
    return l;
}

static void tcp_put(void *arg, const void *p, size_t n) { evbuffer_add(arg, p, n); }

static uint64_t tcp_send(repl_link *l, const void *entry, size_t len) {
    if (l->dead) return 0;
    size_t span = log_entry_span(len);
    if (l->msg_max && span > l->msg_max) {
        repl_send_blocks(entry, len, l->sent + 1, l->msg_max, tcp_put, l->out);
        return ++l->sent;
    }
    evbuffer_add(l->out, entry, len);
    if (span > len) evbuffer_add(l->out, zeros, span - len);
    return ++l->sent;
}

static void tcp_flush(repl_link *l) {
    if (!l->dead && l->connected && l->can_write) tcp_write_some(l);
}

static void tcp_close(repl_link *l) {
    event_free(l->rd);
    event_free(l->wr);
    event_free(l->timer);
    evbuffer_free(l->out);
    evbuffer_free(l->hs);
    conn_close(&l->c);   /* closes l->fd (a TLS close_notify first) */
    free(l);
}

const transport_ops transport_tcp = {
    .name = "tcp",
    .link_open = tcp_open,
    .link_send = tcp_send,
    .link_flush = tcp_flush,
    .link_close = tcp_close,
};

/* ---------------- blocking helpers (manager stream, control acks) ------- */

int tcp_send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            if (poll(&pfd, 1, 5000) <= 0) return -1; /* stuck for 5 s: give up */
            continue;
        }
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int tcp_send_ack(int fd, uint64_t count) {
    uint8_t a[8];
    le_put_u64(a, count);
    return tcp_send_all(fd, a, 8);
}

int tcp_recv_all(int fd, void *p, size_t n, int timeout_ms) {
    uint8_t *b = p;
    while (n) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        ssize_t got = recv(fd, b, n, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return -1;
        b += got;
        n -= (size_t)got;
    }
    return 0;
}

int tcp_connect_blocking(const char *host, int port, int timeout_ms, char *err, size_t errlen) {
    int connected = 0;
    int fd = tcp_start_connect(host, port, &connected, err, errlen);
    if (fd < 0 || connected) return fd;
    struct pollfd pfd = {fd, POLLOUT, 0};
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (poll(&pfd, 1, timeout_ms) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr == 0)
        return fd;
    snprintf(err, errlen, "connect %s:%d: %s", host, port, strerror(soerr ? soerr : ETIMEDOUT));
    close(fd);
    return -1;
}

long repl_frame_span(const uint8_t *p, size_t avail, char *why, size_t whylen) {
    if (avail < LOG_HDR_SIZE) return 0;
    uint32_t klen, vlen;
    memcpy(&klen, p + 16, 4);
    memcpy(&vlen, p + 20, 4);
    uint64_t len = (uint64_t)LOG_HDR_SIZE + klen + vlen;
    /* LOG_LOSS never travels: only rowan-check-pool writes one, in place */
    if (p[4] == 0 || p[4] >= LOG_TYPE_MAX || p[4] == LOG_LOSS || len > LOG_MAX_ENTRY) {
        snprintf(why, whylen, "malformed message header (type %u, length %llu)", p[4],
                 (unsigned long long)len);
        return -1;
    }
    size_t span = log_entry_span((size_t)len);
    return avail < span ? 0 : (long)span;
}
