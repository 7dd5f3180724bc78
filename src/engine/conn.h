/* conn.h -- a client connection's byte stream: plain TCP or TLS.
 *
 * The RESP edge reads and writes every client through these calls, so one
 * code path (networking.c's read_cb/write_out) serves both kinds. A TLS
 * connection does its handshake inside the first conn_read (the server only
 * speaks after a request, so it never writes before the handshake is done).
 *
 * Non-blocking TLS has two twists the caller must follow:
 *   - a read may need the socket writable (handshake, session tickets) and
 *     a write may need it readable: conn_read/conn_write then fail with
 *     EAGAIN and set CONN_READ_WANTS_WRITE / CONN_WRITE_WANTS_READ in
 *     c->want, and the caller retries that call when the other event fires;
 *   - decrypted bytes can stay inside OpenSSL after a read with no more on
 *     the socket (a record larger than the caller's buffer): conn_pending()
 *     says so, and the caller reads again without waiting for the socket.
 * A write retried after EAGAIN must offer at least the bytes offered before
 * (the buffer may move: SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). */
#ifndef ROWAN_CONN_H
#define ROWAN_CONN_H
#include <stddef.h>
#include <sys/types.h>

struct ssl_st;

enum { CONN_READ_WANTS_WRITE = 1, CONN_WRITE_WANTS_READ = 2 };

typedef struct conn {
    int fd;
    struct ssl_st *ssl;   /* NULL: plain TCP */
    int want;             /* CONN_*_WANTS_* of the last call that would block */
} conn;

/* Wrap an accepted socket; tls: as the server side of a TLS connection
 * (tls_server_ready() must be true). -1 if OpenSSL could not set it up. */
int conn_accept(conn *c, int fd, int tls);
/* > 0 bytes, 0 at end of stream, -1 with errno (EAGAIN: try again later,
 * anything else: the connection is dead; TLS errors are logged verbose). */
ssize_t conn_read(conn *c, void *buf, size_t len);
ssize_t conn_write(conn *c, const void *buf, size_t len);
/* Bytes already received and decrypted, waiting for the next conn_read. */
int conn_pending(const conn *c);
/* Free the TLS state (a close_notify is sent if the socket takes it) and
 * close the socket. */
void conn_close(conn *c);

#endif
