/* peer_tls.h -- TLS on the links between nodes: `tls-replication yes` and
 * `tls-cluster yes` (Redis's names). peer_tls.c explains the design.
 *
 * Rowan's replication streams and its cluster bus share one port per node
 * (the replication port, bus.h), so the port speaks TLS when either option
 * is on, and then every link to and from it does; a plaintext peer gets
 * nothing but a closed connection. Both ends present tls-cert-file /
 * tls-key-file and require the other's certificate to verify against
 * tls-ca-cert-file (or -dir): mutual authentication, whatever
 * tls-auth-clients says of clients. The peer handshake (peer_auth.h) still
 * runs inside TLS, so cluster-secret keeps working as before.
 *
 * Links are byte streams of conn.h (fd + SSL, NULL when plaintext; not
 * included here: bus.c has a conn of its own). The
 * plaintext paths call the TCP helpers directly: a node without these
 * options runs exactly the code it ran before. */
#ifndef ROWAN_PEER_TLS_H
#define ROWAN_PEER_TLS_H
#include <stddef.h>

struct conn;
struct ssl_st;

/* At start-up (control_listen): build the node contexts if either option is
 * on. 0, or -1 with the reason (bad files, no CA, an unsupported mode). */
int peer_tls_configure(char *err, size_t errlen);
/* Does the replication port speak TLS? */
int peer_tls_on(void);
/* A TLS object for a link on fd (-1: libevent sets it), as the accepting
 * (server) or connecting (client) side. NULL if OpenSSL failed. */
struct ssl_st *peer_tls_new(int fd, int server_side);

/* One non-blocking step of c's TLS handshake: 1 done, 0 in progress
 * (*want_write: wait for the socket to be writable, else readable), -1
 * failed with why. */
int peer_tls_handshake(struct conn *c, int *want_write, char *why, size_t whylen);
/* Bytes received and not yet handed out by conn_read (decrypted or not):
 * the socket may be drained while these wait. 0 for plaintext. */
int peer_tls_pending(const struct conn *c);

/* Blocking-style I/O on a link, as tcp_send_all / tcp_recv_all (which they
 * are for plaintext): 0 or -1. */
int peer_send_all(struct conn *c, const void *p, size_t n);
int peer_recv_all(struct conn *c, void *p, size_t n, int timeout_ms);
/* 1 if a read would find bytes now, 0 if not, -1 if the link broke. */
int peer_readable_now(struct conn *c);
/* Connect to a node's replication port (and shake hands over TLS when the
 * port speaks it), within timeout_ms each. 0 with *c set, or -1 with err. */
int peer_connect(struct conn *c, const char *host, int port, int timeout_ms, char *err, size_t errlen);

#endif
