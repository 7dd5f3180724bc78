/* peer_auth.c -- mutual authentication of the nodes of a cluster, once per
 * link, before anything else crosses it (issue 10, item 5).
 *
 * Why: the peer port lands bytes in this node's backup log, and a backup
 * applies what lands there. Anyone who can connect and speak the format
 * could otherwise write any key at any version on any backup (a forged
 * entry at version 10^9 made a backup ignore every later legitimate write
 * to that shard). So every link first proves that both ends know the
 * cluster's secret:
 *
 *   server -> client  challenge  "ROWNAUC1" ver flags . . . . . .  nonce_s[16]
 *   client -> server  response   "ROWNAUR1" ver flags hello_len(2) . . . .
 *                                nonce_c[16]  mac_c[32]  hello[hello_len]
 *   server -> client  reply      "ROWNAUP1" ver flags . . . . . .  mac_s[32]
 *                             or "ROWNAUF1" ver flags reason . . . . . (zeros)
 *
 *   mac_c = HMAC-SHA256(secret, "rowan-peer-auth-1 client" || challenge ||
 *                               response[0..32) || hello)
 *   mac_s = HMAC-SHA256(secret, "rowan-peer-auth-1 server" || challenge ||
 *                               response || hello || reply[0..16))
 *
 * - The server speaks first with a fresh random challenge (getrandom), and
 *   mac_c covers it: a recorded response is worthless on any other
 *   connection (not replayable). mac_c also covers the hello, so what the
 *   receiver checks next (term, configuration, sender) is what the secret's
 *   holder sent.
 * - The client's nonce and mac_s make it mutual: a sender only trusts acks
 *   from a receiver that proved it knows the secret for THIS handshake, so a
 *   fake receiver cannot make a primary believe a write is replicated. The
 *   two MACs carry different labels, so one side's MAC is never valid as the
 *   other's (no reflection).
 * - MACs are compared with CRYPTO_memcmp (constant time).
 * - The secret is `cluster-secret`, else `requirepass`, else none. With no
 *   secret the same exchange runs with an empty key: it proves nothing, and
 *   the port is then protected only by `bind` (control.c refuses to open it
 *   on an address bind does not allow; see pauth_set_open_without_secret).
 *   The flags byte says whether a side has a secret, only to make a
 *   mismatch's log line clear; it is covered by the MACs like the rest.
 * - The secret is read when a handshake begins, so CONFIG SET of
 *   cluster-secret (or requirepass) applies to links opened afterwards;
 *   links already up stay up. Config strings are never freed while the
 *   server runs (config.c), so the pointer taken here stays valid.
 *
 * What it does not do: it authenticates the link's start, not each later
 * message (an attacker who can inject into an established TCP stream is out
 * of scope; that needs TLS or a private network), and it does not hide the
 * traffic. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <event2/buffer.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include "le.h"
#include "peer_auth.h"
#include "peer_tls.h"
#include "server.h"
#include "transport.h"

#define PAUTH_VERSION 1
#define FLAG_KEYED 1

static const char M_CHALLENGE[8] = {'R', 'O', 'W', 'N', 'A', 'U', 'C', '1'};
static const char M_RESPONSE[8] = {'R', 'O', 'W', 'N', 'A', 'U', 'R', '1'};
static const char M_PROOF[8] = {'R', 'O', 'W', 'N', 'A', 'U', 'P', '1'};
static const char M_REFUSAL[8] = {'R', 'O', 'W', 'N', 'A', 'U', 'F', '1'};
static const char M_OLD_HELLO[8] = {'R', 'O', 'W', 'N', 'R', 'P', 'L', '1'};

/* Reasons a server gives in a refusal (diagnostics for the client's log). */
enum { REFUSE_MALFORMED = 1, REFUSE_MAC, REFUSE_PEER_UNKEYED, REFUSE_PEER_KEYED };

/* This file's state, one per server (server.h). */
struct pauth_state {
    _Atomic int open_without_secret;
    _Atomic long long failures;
};

void pauth_state_new(void) {
    struct pauth_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    server.pauth_st = st;
}

void pauth_state_free(void) {
    free(server.pauth_st);
    server.pauth_st = NULL;
}

#define open_without_secret (server.pauth_st->open_without_secret)
#define failures (server.pauth_st->failures)

/* ---------------- the secret ---------------- */

static const char *secret_now(const char **source) {
    const char *s = __atomic_load_n(&server.cfg.cluster_secret, __ATOMIC_ACQUIRE);
    if (s && *s) {
        if (source) *source = "cluster-secret";
        return s;
    }
    s = __atomic_load_n(&server.cfg.requirepass, __ATOMIC_ACQUIRE);
    if (s && *s) {
        if (source) *source = "requirepass";
        return s;
    }
    if (source) *source = "none";
    return "";
}

const char *pauth_secret_source(void) {
    const char *src;
    secret_now(&src);
    return src;
}

void pauth_set_open_without_secret(int yes) { atomic_store(&open_without_secret, yes); }

static void take_secret(pauth *a) {
    a->key = secret_now(NULL);
    a->keyed = a->key[0] != '\0';
}

/* ---------------- MACs ---------------- */

/* HMAC-SHA256 with a's secret over label || challenge || parts. */
static void mac_over(const pauth *a, const char *label, const void *p1, size_t n1,
                     const void *p2, size_t n2, uint8_t mac[PAUTH_MAC_LEN]) {
    uint8_t buf[32 + PAUTH_CHALLENGE_LEN + PAUTH_RESPONSE_HDR + PAUTH_HELLO_MAX + 16];
    size_t n = 0, ll = strlen(label);
    memcpy(buf + n, label, ll);
    n += ll;
    memcpy(buf + n, a->challenge, PAUTH_CHALLENGE_LEN);
    n += PAUTH_CHALLENGE_LEN;
    memcpy(buf + n, p1, n1);
    n += n1;
    memcpy(buf + n, a->hello, a->hello_len);
    n += a->hello_len;
    if (n2) memcpy(buf + n, p2, n2);
    n += n2;
    unsigned int len = PAUTH_MAC_LEN;
    HMAC(EVP_sha256(), a->key, (int)strlen(a->key), buf, n, mac, &len);
}

/* The client's MAC: over the response's first 32 bytes (magic, version,
 * flags, hello length, client nonce) and the hello. */
static void client_mac(const pauth *a, uint8_t mac[PAUTH_MAC_LEN]) {
    mac_over(a, "rowan-peer-auth-1 client", a->response, 32, NULL, 0, mac);
}

/* The server's MAC: over the whole response header, the hello and the
 * reply's first 16 bytes. */
static void server_mac(const pauth *a, const uint8_t reply_hdr[16], uint8_t mac[PAUTH_MAC_LEN]) {
    mac_over(a, "rowan-peer-auth-1 server", a->response, PAUTH_RESPONSE_HDR, reply_hdr, 16, mac);
}

static int fill_random(uint8_t *p, size_t n) {
    while (n) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* ---------------- server ---------------- */

int pauth_server_begin(pauth *a, uint8_t challenge[PAUTH_CHALLENGE_LEN], char *why,
                       size_t whylen) {
    memset(a, 0, sizeof(*a));
    take_secret(a);
    a->state = PAUTH_FAILED;
    if (!a->keyed && !atomic_load(&open_without_secret)) {
        snprintf(why, whylen, "no cluster-secret or requirepass is set and bind does not cover "
                 "this node's replication address: peers are refused until a secret is set");
        return -1;
    }
    memcpy(a->challenge, M_CHALLENGE, 8);
    a->challenge[8] = PAUTH_VERSION;
    a->challenge[9] = a->keyed ? FLAG_KEYED : 0;
    if (fill_random(a->challenge + 16, PAUTH_NONCE_LEN) != 0) {
        snprintf(why, whylen, "getrandom failed: %s", strerror(errno));
        return -1;
    }
    memcpy(challenge, a->challenge, PAUTH_CHALLENGE_LEN);
    a->state = PAUTH_SERVER_WAIT_RESPONSE;
    return 0;
}

static long server_refuse(pauth *a, int reason, uint8_t *out, size_t *outlen) {
    memset(out, 0, PAUTH_REPLY_LEN);
    memcpy(out, M_REFUSAL, 8);
    out[8] = PAUTH_VERSION;
    out[9] = a->keyed ? FLAG_KEYED : 0;
    out[10] = (uint8_t)reason;
    *outlen = PAUTH_REPLY_LEN;
    a->state = PAUTH_FAILED;
    return -1;
}

static long server_feed(pauth *a, const uint8_t *in, size_t len, uint8_t *out, size_t *outlen,
                        char *why, size_t whylen) {
    if (len >= 8 && memcmp(in, M_RESPONSE, 8) != 0) {
        if (memcmp(in, M_OLD_HELLO, 7) == 0)   /* "ROWNRPL" and any protocol version */
            snprintf(why, whylen, "a hello without the authentication handshake (a forged "
                     "hello, or a peer running an older Rowan)");
        else
            snprintf(why, whylen, "not a Rowan peer handshake");
        return server_refuse(a, REFUSE_MALFORMED, out, outlen);
    }
    if (len < 16) return 0;
    size_t hlen = le_get_u16(in + 10);
    if (in[8] != PAUTH_VERSION || hlen > PAUTH_HELLO_MAX) {
        snprintf(why, whylen, "unsupported handshake (version %u, hello of %zu bytes)", in[8], hlen);
        return server_refuse(a, REFUSE_MALFORMED, out, outlen);
    }
    if (len < PAUTH_RESPONSE_HDR + hlen) return 0;
    int peer_keyed = in[9] & FLAG_KEYED;
    if (peer_keyed != a->keyed) {
        snprintf(why, whylen, "%s", a->keyed ? "the peer has no cluster secret (this node has one)"
                                             : "the peer uses a cluster secret and this node has none");
        return server_refuse(a, a->keyed ? REFUSE_PEER_UNKEYED : REFUSE_PEER_KEYED, out, outlen);
    }
    memcpy(a->response, in, PAUTH_RESPONSE_HDR);
    memcpy(a->hello, in + PAUTH_RESPONSE_HDR, hlen);
    a->hello_len = hlen;
    uint8_t mac[PAUTH_MAC_LEN];
    client_mac(a, mac);
    if (CRYPTO_memcmp(mac, in + 32, PAUTH_MAC_LEN) != 0) {
        snprintf(why, whylen, "authentication failed: the peer's handshake MAC is wrong (its "
                 "cluster secret differs from this node's, or it replays an old handshake)");
        a->hello_len = 0;
        return server_refuse(a, REFUSE_MAC, out, outlen);
    }
    memset(out, 0, PAUTH_REPLY_LEN);
    memcpy(out, M_PROOF, 8);
    out[8] = PAUTH_VERSION;
    out[9] = a->keyed ? FLAG_KEYED : 0;
    server_mac(a, out, out + 16);
    *outlen = PAUTH_REPLY_LEN;
    a->state = PAUTH_DONE;
    return (long)(PAUTH_RESPONSE_HDR + hlen);
}

/* ---------------- client ---------------- */

void pauth_client_begin(pauth *a, const void *hello, size_t len) {
    memset(a, 0, sizeof(*a));
    take_secret(a);
    if (len > PAUTH_HELLO_MAX) len = PAUTH_HELLO_MAX; /* callers' hellos are fixed and small */
    memcpy(a->hello, hello, len);
    a->hello_len = len;
    a->state = PAUTH_CLIENT_WAIT_CHALLENGE;
}

static long client_on_challenge(pauth *a, const uint8_t *in, uint8_t *out, size_t *outlen,
                                char *why, size_t whylen) {
    if (memcmp(in, M_CHALLENGE, 8) != 0 || in[8] != PAUTH_VERSION) {
        snprintf(why, whylen, "the peer did not open with a Rowan handshake challenge (not a "
                 "Rowan node, or another version)");
        return -1;
    }
    int peer_keyed = in[9] & FLAG_KEYED;
    if (peer_keyed != a->keyed) {
        snprintf(why, whylen, "%s", a->keyed ? "the peer has no cluster secret (this node has one)"
                                             : "the peer requires a cluster secret (cluster-secret "
                                               "or requirepass) and this node has none");
        return -1;
    }
    memcpy(a->challenge, in, PAUTH_CHALLENGE_LEN);
    uint8_t *r = a->response;
    memset(r, 0, PAUTH_RESPONSE_HDR);
    memcpy(r, M_RESPONSE, 8);
    r[8] = PAUTH_VERSION;
    r[9] = a->keyed ? FLAG_KEYED : 0;
    le_put_u16(r + 10, (uint16_t)a->hello_len);
    if (fill_random(r + 16, PAUTH_NONCE_LEN) != 0) {
        snprintf(why, whylen, "getrandom failed: %s", strerror(errno));
        return -1;
    }
    client_mac(a, r + 32);
    memcpy(out, r, PAUTH_RESPONSE_HDR);
    memcpy(out + PAUTH_RESPONSE_HDR, a->hello, a->hello_len);
    *outlen = PAUTH_RESPONSE_HDR + a->hello_len;
    a->state = PAUTH_CLIENT_WAIT_REPLY;
    return PAUTH_CHALLENGE_LEN;
}

static const char *refusal_text(int reason) {
    switch (reason) {
    case REFUSE_MAC: return "its cluster secret differs from this node's";
    case REFUSE_PEER_UNKEYED: return "it has a cluster secret and this node has none";
    case REFUSE_PEER_KEYED: return "it has no cluster secret and this node has one";
    default: return "it did not understand our handshake (another Rowan version?)";
    }
}

static long client_on_reply(pauth *a, const uint8_t *in, char *why, size_t whylen) {
    if (memcmp(in, M_REFUSAL, 8) == 0) {
        snprintf(why, whylen, "the peer refused our authentication: %s (see its log)",
                 refusal_text(in[10]));
        return -1;
    }
    uint8_t mac[PAUTH_MAC_LEN];
    if (memcmp(in, M_PROOF, 8) == 0) server_mac(a, in, mac);
    if (memcmp(in, M_PROOF, 8) != 0 || CRYPTO_memcmp(mac, in + 16, PAUTH_MAC_LEN) != 0) {
        snprintf(why, whylen, "the peer failed to prove it knows the cluster secret (its secret "
                 "differs from this node's, or it is not a Rowan node): its acks are not trusted");
        return -1;
    }
    a->state = PAUTH_DONE;
    return PAUTH_REPLY_LEN;
}

/* ---------------- both ---------------- */

long pauth_feed(pauth *a, const uint8_t *in, size_t len, uint8_t *out, size_t *outlen, char *why,
                size_t whylen) {
    *outlen = 0;
    long rc;
    switch (a->state) {
    case PAUTH_SERVER_WAIT_RESPONSE:
        return server_feed(a, in, len, out, outlen, why, whylen);
    case PAUTH_CLIENT_WAIT_CHALLENGE:
        if (len < PAUTH_CHALLENGE_LEN) return 0;
        rc = client_on_challenge(a, in, out, outlen, why, whylen);
        break;
    case PAUTH_CLIENT_WAIT_REPLY:
        if (len < PAUTH_REPLY_LEN) return 0;
        rc = client_on_reply(a, in, why, whylen);
        break;
    default:
        snprintf(why, whylen, "handshake already %s", a->state == PAUTH_DONE ? "done" : "failed");
        return -1;
    }
    if (rc < 0) a->state = PAUTH_FAILED;
    return rc;
}

int pauth_feed_evbuffer(pauth *a, struct evbuffer *in, struct evbuffer *out, char *why,
                        size_t whylen) {
    while (!pauth_done(a)) {
        size_t len = evbuffer_get_length(in);
        if (len > PAUTH_MSG_MAX) len = PAUTH_MSG_MAX;
        if (len == 0) return 0;
        uint8_t msg[PAUTH_MSG_MAX];
        size_t outlen = 0;
        long n = pauth_feed(a, evbuffer_pullup(in, (ev_ssize_t)len), len, msg, &outlen, why, whylen);
        if (n < 0) return -1;
        if (n == 0) return 0;
        evbuffer_drain(in, (size_t)n);
        if (outlen) evbuffer_prepend(out, msg, outlen);
    }
    return 1;
}

int pauth_client_run(struct conn *c, const void *hello, size_t len, int timeout_ms, char *err,
                     size_t errlen) {
    pauth a;
    pauth_client_begin(&a, hello, len);
    uint8_t in[PAUTH_REPLY_LEN], out[PAUTH_MSG_MAX];
    while (!pauth_done(&a)) {
        size_t need = a.state == PAUTH_CLIENT_WAIT_CHALLENGE ? PAUTH_CHALLENGE_LEN : PAUTH_REPLY_LEN;
        size_t outlen = 0;
        if (peer_recv_all(c, in, need, timeout_ms) != 0) {
            snprintf(err, errlen, "the peer closed the link during the handshake (see its log)");
            return -1;
        }
        if (pauth_feed(&a, in, need, out, &outlen, err, errlen) < 0) return -1;
        if (outlen && peer_send_all(c, out, outlen) != 0) {
            snprintf(err, errlen, "the peer went away during the handshake");
            return -1;
        }
    }
    return 0;
}

/* ---------------- refused peers ---------------- */

#define REFUSAL_LOG_INTERVAL_US 1000000

static void refused(const char *from, const char *why) {
    static _Atomic int64_t last_us;
    static _Atomic long long quiet;
    atomic_fetch_add(&failures, 1);
    int64_t now = monotonic_us(), last = atomic_load(&last_us);
    if (last && now - last < REFUSAL_LOG_INTERVAL_US) {
        atomic_fetch_add(&quiet, 1);
        return;
    }
    if (!atomic_compare_exchange_strong(&last_us, &last, now)) {
        atomic_fetch_add(&quiet, 1);
        return;
    }
    long long q = atomic_exchange(&quiet, 0);
    char more[64] = "";
    if (q) snprintf(more, sizeof(more), " (%lld more refused since the last report)", q);
    serverLog(LL_WARNING, "Peer port: refused %s: %s%s", from, why, more);
}

void pauth_refused_addr(const struct sockaddr *sa, const char *why) {
    char host[NI_MAXHOST], port[NI_MAXSERV], from[NI_MAXHOST + NI_MAXSERV + 2];
    socklen_t sl = sa && sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                    : sizeof(struct sockaddr_in);
    if (sa && getnameinfo(sa, sl, host, sizeof(host), port, sizeof(port),
                          NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        snprintf(from, sizeof(from), "%s:%s", host, port);
    else
        snprintf(from, sizeof(from), "a peer (address unknown)");
    refused(from, why);
}

void pauth_refused_fd(int fd, const char *why) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int ok = getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
    pauth_refused_addr(ok ? (struct sockaddr *)&ss : NULL, why);
}

long long pauth_failures(void) { return atomic_load(&failures); }
