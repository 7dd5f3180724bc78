/* tls.h -- the server's TLS context, built from the tls-* options.
 *
 * As in Redis 7.0: tls-cert-file/tls-key-file (tls-key-file-pass) are the
 * server's identity; tls-ca-cert-file/-dir verify client certificates,
 * which tls-auth-clients requires (yes), checks when offered (optional) or
 * ignores (no); tls-protocols, tls-ciphers, tls-ciphersuites,
 * tls-prefer-server-ciphers, tls-dh-params-file and tls-session-* tune it.
 * The context is built before the workers start; CONFIG SET of a tls-*
 * option builds a new one (tls_reconfigure) which replaces it for new
 * connections only. */
#ifndef ROWAN_TLS_H
#define ROWAN_TLS_H
#include <stddef.h>

/* Build the context from server.cfg; -1 with the reason in err. */
int tls_configure(char *err, size_t errlen);
/* CONFIG SET of tls-* options: rebuild the context if TLS is on (tls-port);
 * -1 with the reason, the current context kept. */
int tls_reconfigure(char *err, size_t errlen);
/* A new server-side connection object from the current context (NULL
 * before tls_configure succeeded, or out of memory). */
struct ssl_st *tls_new_server_ssl(void);

/* A context for the links between nodes (peer_tls.c), client or server
 * side: the same identity and settings, but the peer's certificate is
 * always required and verified against the CA. NULL with the reason. */
struct ssl_ctx_st *tls_new_peer_ctx(int client, char *err, size_t errlen);

#endif
