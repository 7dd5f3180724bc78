/* tls.c -- the server's TLS context (tls.h), configured as Redis 7.0's
 * tlsConfigure does, with the same option names, defaults and checks:
 *   - tls-protocols empty means TLSv1.2 and TLSv1.3;
 *   - a CA (tls-ca-cert-file or -dir) is required when clients are
 *     authenticated (tls-auth-clients yes or optional);
 *   - tls-session-caching keeps a server-side session cache (and tickets)
 *     of tls-session-cache-size entries for tls-session-cache-timeout
 *     seconds; off, every connection does a full handshake.
 * Partial writes and a moving write buffer are allowed: networking.c writes
 * from an output buffer that grows and is compacted between retries. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include "server.h"
#include "tls.h"

/* CONFIG SET may replace the context while workers make connections from
 * it: the pointer is read and swapped under ctx_mu. A connection holds its
 * own reference (SSL_new), so the old context lives until its last
 * connection is freed. */
/* This file's state, one per server (server.h). */
struct tls_state {
    SSL_CTX *server_ctx;
    pthread_mutex_t ctx_mu;
};

void tls_state_new(void) {
    struct tls_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_mutex_init(&st->ctx_mu, NULL);
    server.tls_st = st;
}

void tls_state_free(void) {
    struct tls_state *st = server.tls_st;
    if (!st) return;
    if (st->server_ctx) SSL_CTX_free(st->server_ctx);
    pthread_mutex_destroy(&st->ctx_mu);
    free(st);
    server.tls_st = NULL;
}

#define server_ctx (server.tls_st->server_ctx)
#define ctx_mu (server.tls_st->ctx_mu)

SSL *tls_new_server_ssl(void) {
    pthread_mutex_lock(&ctx_mu);
    SSL *ssl = server_ctx ? SSL_new(server_ctx) : NULL;
    pthread_mutex_unlock(&ctx_mu);
    return ssl;
}

static int set(const char *s) { return s && s[0]; }

/* The first queued OpenSSL error, for a message. */
static const char *ssl_reason(char *buf, size_t len) {
    unsigned long e = ERR_peek_last_error();
    if (!e) return "unknown error";
    ERR_error_string_n(e, buf, len);
    return buf;
}

/* tls-protocols as Redis parses it: SSL_OP_NO_* for the versions left out,
 * -1 on an unknown name. */
static long protocol_options(const char *spec) {
    enum { V10 = 1, V11 = 2, V12 = 4, V13 = 8 };
    int want = 0;
    if (!set(spec)) want = V12 | V13;
    char *copy = strdup(spec ? spec : ""), *save = NULL;
    for (char *p = strtok_r(copy, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        if (!strcasecmp(p, "tlsv1")) want |= V10;
        else if (!strcasecmp(p, "tlsv1.1")) want |= V11;
        else if (!strcasecmp(p, "tlsv1.2")) want |= V12;
        else if (!strcasecmp(p, "tlsv1.3")) want |= V13;
        else want = -1;
        if (want < 0) break;
    }
    free(copy);
    if (want <= 0) return -1;
    long opts = 0;
    if (!(want & V10)) opts |= SSL_OP_NO_TLSv1;
    if (!(want & V11)) opts |= SSL_OP_NO_TLSv1_1;
    if (!(want & V12)) opts |= SSL_OP_NO_TLSv1_2;
    if (!(want & V13)) opts |= SSL_OP_NO_TLSv1_3;
    return opts;
}

/* tls-key-file-pass for an encrypted key file. */
static int key_password(char *buf, int size, int rwflag, void *u) {
    (void)rwflag;
    const char *pass = u;
    int n = (int)strlen(pass);
    if (n > size) n = size;
    memcpy(buf, pass, (size_t)n);
    return n;
}

static int load_dh_params(SSL_CTX *ctx, const char *path, char *err, size_t errlen) {
    char why[256];
    BIO *f = BIO_new_file(path, "r");
    EVP_PKEY *dh = f ? PEM_read_bio_Parameters(f, NULL) : NULL;
    BIO_free(f);
    if (!dh || !SSL_CTX_set0_tmp_dh_pkey(ctx, dh)) {
        snprintf(err, errlen, "Failed to load %s: %s", path, ssl_reason(why, sizeof(why)));
        EVP_PKEY_free(dh);
        return -1;
    }
    return 0;
}

static int load_identity(SSL_CTX *ctx, const struct rowan_config *cfg, char *err, size_t errlen) {
    char why[256];
    if (set(cfg->tls_key_file_pass)) {
        SSL_CTX_set_default_passwd_cb(ctx, key_password);
        SSL_CTX_set_default_passwd_cb_userdata(ctx, cfg->tls_key_file_pass);
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) <= 0) {
        snprintf(err, errlen, "Failed to load certificate: %s: %s", cfg->tls_cert_file,
                 ssl_reason(why, sizeof(why)));
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) <= 0) {
        snprintf(err, errlen, "Failed to load private key: %s: %s", cfg->tls_key_file,
                 ssl_reason(why, sizeof(why)));
        return -1;
    }
    if (!SSL_CTX_check_private_key(ctx)) {
        snprintf(err, errlen, "Private key %s does not match certificate %s: %s",
                 cfg->tls_key_file, cfg->tls_cert_file, ssl_reason(why, sizeof(why)));
        return -1;
    }
    return 0;
}

static int configure(SSL_CTX *ctx, const struct rowan_config *cfg, char *err, size_t errlen) {
    char why[256];
    if (!set(cfg->tls_cert_file)) {
        snprintf(err, errlen, "No tls-cert-file configured!");
        return -1;
    }
    if (!set(cfg->tls_key_file)) {
        snprintf(err, errlen, "No tls-key-file configured!");
        return -1;
    }
    if (cfg->tls_auth_clients != TLS_AUTH_CLIENTS_NO && !set(cfg->tls_ca_cert_file) &&
        !set(cfg->tls_ca_cert_dir)) {
        snprintf(err, errlen, "Either tls-ca-cert-file or tls-ca-cert-dir must be specified "
                 "when tls-auth-clients is enabled!");
        return -1;
    }
    long protos = protocol_options(cfg->tls_protocols);
    if (protos < 0) {
        snprintf(err, errlen, "Invalid tls-protocols specified. Use a combination of 'TLSv1', "
                 "'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.");
        return -1;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_SSLv2 | SSL_OP_NO_SSLv3 | SSL_OP_NO_COMPRESSION |
                        SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | protos);
    if (cfg->tls_prefer_server_ciphers) SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (cfg->tls_session_caching) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, cfg->tls_session_cache_size);
        SSL_CTX_set_timeout(ctx, cfg->tls_session_cache_timeout);
        static const unsigned char sid_ctx[] = "rowan";
        SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    }
    if (load_identity(ctx, cfg, err, errlen) < 0) return -1;
    if ((set(cfg->tls_ca_cert_file) || set(cfg->tls_ca_cert_dir)) &&
        SSL_CTX_load_verify_locations(ctx, set(cfg->tls_ca_cert_file) ? cfg->tls_ca_cert_file : NULL,
                                      set(cfg->tls_ca_cert_dir) ? cfg->tls_ca_cert_dir : NULL) <= 0) {
        snprintf(err, errlen, "Failed to configure CA certificate(s) file/directory: %s",
                 ssl_reason(why, sizeof(why)));
        return -1;
    }
    int verify = cfg->tls_auth_clients == TLS_AUTH_CLIENTS_YES
                     ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                 : cfg->tls_auth_clients == TLS_AUTH_CLIENTS_OPTIONAL ? SSL_VERIFY_PEER
                                                                      : SSL_VERIFY_NONE;
    SSL_CTX_set_verify(ctx, verify, NULL);
    if (set(cfg->tls_dh_params_file) && load_dh_params(ctx, cfg->tls_dh_params_file, err, errlen) < 0)
        return -1;
    if (set(cfg->tls_ciphers) && !SSL_CTX_set_cipher_list(ctx, cfg->tls_ciphers)) {
        snprintf(err, errlen, "Failed to configure ciphers: %s", cfg->tls_ciphers);
        return -1;
    }
    if (set(cfg->tls_ciphersuites) && !SSL_CTX_set_ciphersuites(ctx, cfg->tls_ciphersuites)) {
        snprintf(err, errlen, "Failed to configure ciphersuites: %s", cfg->tls_ciphersuites);
        return -1;
    }
    return 0;
}

int tls_configure(char *err, size_t errlen) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    char why[256];
    if (!ctx) {
        snprintf(err, errlen, "Failed to create TLS context: %s", ssl_reason(why, sizeof(why)));
        return -1;
    }
    ERR_clear_error();
    if (configure(ctx, &server.cfg, err, errlen) < 0) {
        SSL_CTX_free(ctx);
        ERR_clear_error();
        return -1;
    }
    pthread_mutex_lock(&ctx_mu);
    SSL_CTX *old = server_ctx;
    server_ctx = ctx;
    pthread_mutex_unlock(&ctx_mu);
    SSL_CTX_free(old);
    return 0;
}

SSL_CTX *tls_new_peer_ctx(int client, char *err, size_t errlen) {
    char why[256];
    if (!set(server.cfg.tls_ca_cert_file) && !set(server.cfg.tls_ca_cert_dir)) {
        snprintf(err, errlen, "tls-replication and tls-cluster need tls-ca-cert-file or "
                 "tls-ca-cert-dir: nodes verify each other's certificates against it");
        return NULL;
    }
    SSL_CTX *ctx = SSL_CTX_new(client ? TLS_client_method() : TLS_server_method());
    if (!ctx) {
        snprintf(err, errlen, "Failed to create TLS context: %s", ssl_reason(why, sizeof(why)));
        return NULL;
    }
    /* nodes always authenticate each other, whatever tls-auth-clients says
     * of clients */
    struct rowan_config cfg = server.cfg;
    cfg.tls_auth_clients = TLS_AUTH_CLIENTS_YES;
    ERR_clear_error();
    if (configure(ctx, &cfg, err, errlen) < 0) {
        SSL_CTX_free(ctx);
        ERR_clear_error();
        return NULL;
    }
    /* links are long-lived and nodes keep no sessions: no tickets */
    if (!client) SSL_CTX_set_num_tickets(ctx, 0);
    return ctx;
}

int tls_reconfigure(char *err, size_t errlen) {
    if (server.cfg.tls_port <= 0) return 0;   /* no TLS listener: only stored, as in Redis */
    return tls_configure(err, errlen);
}
