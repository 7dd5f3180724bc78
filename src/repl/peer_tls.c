/* peer_tls.c -- TLS between nodes (peer_tls.h): the contexts, the
 * handshake step the event loops drive, and blocking-style I/O for the
 * replication manager's streams.
 *
 * Who does what with it:
 *   - control.c accepts on the replication port: over TLS it first drives a
 *     non-blocking server handshake from its epoll loop (a link still in
 *     the handshake after the peer-auth deadline is closed, like a silent
 *     peer), then sends the peer_auth challenge inside TLS;
 *   - transport_tcp.c (a worker's replication links) drives the client
 *     handshake from the worker's libevent loop;
 *   - repl.c's manager streams connect with peer_connect (blocking, with a
 *     timeout, on the manager's own thread);
 *   - bus.c wraps its connections in libevent's OpenSSL bufferevents, and
 *     takes over the accepted TLS object from control.c (bus_adopt).
 * Certificates: both ends present tls-cert-file and require the other's
 * to chain to tls-ca-cert-file/-dir (SSL_VERIFY_FAIL_IF_NO_PEER_CERT on
 * the server side). Host names are not checked, as Redis does not for its
 * replica and bus links: the CA is the cluster's, and what a certificate
 * holder may do is further bound by the peer handshake's secret and the
 * configuration checks of control.c.
 *
 * Not supported with TLS (refused at start with a clear message rather
 * than silently left in plaintext): replication-mode rpc (its links are
 * handed to workers as bare sockets) and replication-transport verbs (RDMA
 * has no TLS). The contexts are built at start: changing the certificate
 * files for node links needs a restart. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include "conn.h"
#include "peer_tls.h"
#include "server.h"
#include "tls.h"
#include "transport.h"

/* This file's state, one per server (server.h). */
struct peer_tls_state {
    SSL_CTX *server_ctx;
    SSL_CTX *client_ctx;
};

void peer_tls_state_new(void) {
    struct peer_tls_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.peer_tls_st = st;
}

void peer_tls_state_free(void) {
    struct peer_tls_state *st = server.peer_tls_st;
    if (!st) return;
    if (st->server_ctx) SSL_CTX_free(st->server_ctx);
    if (st->client_ctx) SSL_CTX_free(st->client_ctx);
    free(st);
    server.peer_tls_st = NULL;
}

#define server_ctx (server.peer_tls_st->server_ctx)
#define client_ctx (server.peer_tls_st->client_ctx)

int peer_tls_on(void) { return server_ctx != NULL; }

int peer_tls_configure(char *err, size_t errlen) {
    if (server_ctx || (!server.cfg.tls_replication && !server.cfg.tls_cluster)) return 0;
    if (server.cfg.replication_mode == REPL_MODE_RPC) {
        snprintf(err, errlen, "tls-replication/tls-cluster are not supported with "
                 "replication-mode rpc");
        return -1;
    }
    if (server.cfg.replication_transport == REPL_TRANSPORT_VERBS) {
        snprintf(err, errlen, "tls-replication/tls-cluster are not supported with "
                 "replication-transport verbs (RDMA carries no TLS)");
        return -1;
    }
    SSL_CTX *s = tls_new_peer_ctx(0, err, errlen);
    if (!s) return -1;
    SSL_CTX *c = tls_new_peer_ctx(1, err, errlen);
    if (!c) {
        SSL_CTX_free(s);
        return -1;
    }
    server_ctx = s;
    client_ctx = c;
    return 0;
}

SSL *peer_tls_new(int fd, int server_side) {
    SSL *ssl = SSL_new(server_side ? server_ctx : client_ctx);
    if (ssl && fd >= 0 && !SSL_set_fd(ssl, fd)) {
        SSL_free(ssl);
        ssl = NULL;
    }
    if (ssl && server_side) SSL_set_accept_state(ssl);
    else if (ssl) SSL_set_connect_state(ssl);
    ERR_clear_error();
    return ssl;
}

/* Why a TLS call failed, for the log: the certificate check's verdict if
 * that is what failed, else OpenSSL's first error, else the socket's. */
static void tls_why(conn *c, int e, char *why, size_t whylen) {
    long v = SSL_get_verify_result(c->ssl);
    unsigned long ec = ERR_get_error();
    if (v != X509_V_OK) {
        snprintf(why, whylen, "TLS: the peer's certificate is refused: %s",
                 X509_verify_cert_error_string(v));
    } else if (ec) {
        char buf[256];
        ERR_error_string_n(ec, buf, sizeof(buf));
        snprintf(why, whylen, "TLS: %s", buf);
    } else if (e == SSL_ERROR_SYSCALL && errno) {
        snprintf(why, whylen, "TLS: %s", strerror(errno));
    } else {
        snprintf(why, whylen, "TLS: the peer closed the connection during the handshake "
                 "(is it using TLS with a certificate of the same CA?)");
    }
    ERR_clear_error();
}

int peer_tls_handshake(conn *c, int *want_write, char *why, size_t whylen) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) return 1;
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want_write = e == SSL_ERROR_WANT_WRITE;
        return 0;
    }
    tls_why(c, e, why, whylen);
    return -1;
}

int peer_tls_pending(const conn *c) { return c->ssl ? SSL_has_pending(c->ssl) : 0; }

/* Wait for what the last TLS call that would block needs. */
static int wait_for(conn *c, int want_write, int timeout_ms) {
    for (;;) {
        struct pollfd pfd = {c->fd, want_write ? POLLOUT : POLLIN, 0};
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR) continue;
        return r > 0 ? 0 : -1;
    }
}

int peer_send_all(conn *c, const void *p, size_t n) {
    if (!c->ssl) return tcp_send_all(c->fd, p, n);
    const uint8_t *b = p;
    while (n) {
        ssize_t w = conn_write(c, b, n);
        if (w < 0 && errno == EAGAIN) {
            /* stuck for 5 s: give up, as tcp_send_all does */
            if (wait_for(c, !(c->want & CONN_WRITE_WANTS_READ), 5000) != 0) return -1;
            continue;
        }
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int peer_recv_all(conn *c, void *p, size_t n, int timeout_ms) {
    if (!c->ssl) return tcp_recv_all(c->fd, p, n, timeout_ms);
    uint8_t *b = p;
    while (n) {
        if (!SSL_has_pending(c->ssl) &&
            wait_for(c, (c->want & CONN_READ_WANTS_WRITE) != 0, timeout_ms) != 0)
            return -1;
        ssize_t got = conn_read(c, b, n);
        if (got < 0 && errno == EAGAIN) continue;
        if (got <= 0) return -1;
        b += got;
        n -= (size_t)got;
    }
    return 0;
}

int peer_readable_now(conn *c) {
    if (peer_tls_pending(c)) return 1;
    struct pollfd pfd = {c->fd, POLLIN, 0};
    int r = poll(&pfd, 1, 0);
    if (r < 0 || (r > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)))) return -1;
    return r > 0;
}

int peer_connect(conn *c, const char *host, int port, int timeout_ms, char *err, size_t errlen) {
    c->fd = tcp_connect_blocking(host, port, timeout_ms, err, errlen);
    c->ssl = NULL;
    c->want = 0;
    if (c->fd < 0) return -1;
    if (!peer_tls_on()) return 0;
    c->ssl = peer_tls_new(c->fd, 0);
    if (!c->ssl) {
        snprintf(err, errlen, "TLS: cannot create a connection object");
        conn_close(c);
        return -1;
    }
    int64_t deadline = monotonic_us() + (int64_t)timeout_ms * 1000;
    for (;;) {
        int want_write = 0;
        char why[256];
        int rc = peer_tls_handshake(c, &want_write, why, sizeof(why));
        if (rc == 1) return 0;
        int64_t left_ms = (deadline - monotonic_us()) / 1000;
        if (rc < 0 || left_ms <= 0 || wait_for(c, want_write, (int)left_ms) != 0) {
            if (rc >= 0) snprintf(why, sizeof(why), "TLS handshake timed out");
            snprintf(err, errlen, "%s:%d: %s", host, port, why);
            conn_close(c);
            return -1;
        }
    }
}
