/* conn.c -- plain TCP and TLS behind one read/write interface (conn.h).
 *
 * TLS uses OpenSSL's non-blocking mode directly on the socket (no BIO
 * pairs): SSL_read/SSL_write report SSL_ERROR_WANT_READ/WRITE, which become
 * EAGAIN plus c->want for the caller's event loop. OpenSSL's error queue is
 * per thread and must be empty before each call for SSL_get_error to be
 * right, so every call clears it first. */
#include <errno.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include "conn.h"
#include "server.h"
#include "tls.h"

int conn_accept(conn *c, int fd, int tls) {
    c->fd = fd;
    c->ssl = NULL;
    c->want = 0;
    if (!tls) return 0;
    c->ssl = tls_new_server_ssl();
    if (!c->ssl || !SSL_set_fd(c->ssl, fd)) {
        SSL_free(c->ssl);
        c->ssl = NULL;
        ERR_clear_error();
        return -1;
    }
    SSL_set_accept_state(c->ssl);
    return 0;
}

/* Turn a failed SSL call into the conn.h convention. */
static ssize_t tls_fail(conn *c, int ret, int wants_other) {
    int e = SSL_get_error(c->ssl, ret);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        if (wants_other == CONN_WRITE_WANTS_READ) c->want |= CONN_WRITE_WANTS_READ;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        if (wants_other == CONN_READ_WANTS_WRITE) c->want |= CONN_READ_WANTS_WRITE;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;   /* close_notify (or EOF: SSL_OP_IGNORE_UNEXPECTED_EOF) */
    case SSL_ERROR_SYSCALL:
        if (errno == EAGAIN || errno == EINTR) return -1;
        if (errno == 0) errno = ECONNRESET;
        return -1;
    default: {
        char why[256];
        unsigned long ec = ERR_get_error();
        ERR_error_string_n(ec, why, sizeof(why));
        ERR_clear_error();
        serverLog(LL_VERBOSE, "TLS error on fd %d: %s", c->fd, ec ? why : "unknown");
        errno = EPROTO;
        return -1;
    }
    }
}

ssize_t conn_read(conn *c, void *buf, size_t len) {
    if (!c->ssl) return read(c->fd, buf, len);
    c->want &= ~CONN_READ_WANTS_WRITE;
    ERR_clear_error();
    errno = 0;
    int n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    return n > 0 ? n : tls_fail(c, n, CONN_READ_WANTS_WRITE);
}

ssize_t conn_write(conn *c, const void *buf, size_t len) {
    if (!c->ssl) return write(c->fd, buf, len);
    c->want &= ~CONN_WRITE_WANTS_READ;
    ERR_clear_error();
    errno = 0;
    int n = SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0) return n;
    ssize_t r = tls_fail(c, n, CONN_WRITE_WANTS_READ);
    if (r == 0) errno = EPIPE;   /* the peer closed: the write failed */
    return -1;
}

int conn_pending(const conn *c) { return c->ssl ? SSL_pending(c->ssl) : 0; }

void conn_close(conn *c) {
    if (c->ssl) {
        ERR_clear_error();
        /* Best effort, never waits: a peer gone or a full socket is fine. */
        if (SSL_is_init_finished(c->ssl)) SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
        ERR_clear_error();
        c->ssl = NULL;
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}
