/* peer_auth.h -- the handshake that opens every link between two nodes
 * (replication links today; any other link kind on the peer port later).
 * peer_auth.c explains the protocol and why it looks like this.
 *
 * One state machine, I/O free, used by every sender and receiver: the
 * caller moves bytes, pauth_feed() decides. A receiver ("server": the side
 * that accepted the connection) starts with pauth_server_begin() and sends
 * the challenge it returns; a sender ("client") starts with
 * pauth_client_begin(). Both then feed what they receive:
 *
 *   long pauth_feed(a, in, len, out, &outlen, why, whylen)
 *     > 0  the first n bytes of in were one handshake message, consumed;
 *          out[0..outlen) (possibly empty) must be sent to the peer now;
 *          pauth_done(a) says whether the handshake is complete
 *      0   in holds less than the next message: feed again with more
 *     -1   refused (why says why, for the log); out[0..outlen) may hold a
 *          refusal record to send, best effort, before closing
 *
 * The handshake is complete on the server once the client's response
 * verified (a->hello is then the client's authenticated hello), and on the
 * client once the server's proof verified. Nothing received on a link may
 * be acted upon before pauth_done(). No message is larger than
 * PAUTH_MSG_MAX, so a caller's buffer of that size always suffices. */
#ifndef ROWAN_PEER_AUTH_H
#define ROWAN_PEER_AUTH_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PAUTH_CHALLENGE_LEN 32   /* server -> client, first */
#define PAUTH_RESPONSE_HDR  64   /* client -> server: header, then the hello */
#define PAUTH_REPLY_LEN     48   /* server -> client: proof or refusal */
#define PAUTH_HELLO_MAX     192
#define PAUTH_MSG_MAX       (PAUTH_RESPONSE_HDR + PAUTH_HELLO_MAX)
#define PAUTH_NONCE_LEN     16
#define PAUTH_MAC_LEN       32

enum { PAUTH_SERVER_WAIT_RESPONSE = 1, PAUTH_CLIENT_WAIT_CHALLENGE, PAUTH_CLIENT_WAIT_REPLY,
       PAUTH_DONE, PAUTH_FAILED };

typedef struct pauth {
    int state;
    int keyed;                       /* a secret is in force for this handshake */
    const char *key;                 /* taken when the handshake began */
    uint8_t challenge[PAUTH_CHALLENGE_LEN];
    uint8_t response[PAUTH_RESPONSE_HDR]; /* client: what it sent; server: what it got */
    uint8_t hello[PAUTH_HELLO_MAX];  /* the client's hello */
    size_t hello_len;
} pauth;

/* Server side: begin a handshake on a new connection; challenge[] must be
 * sent first. -1 with why when the server takes no peers now (no secret in
 * force and the peer port is not restricted by bind, see
 * pauth_set_open_without_secret) or the system has no randomness. */
int pauth_server_begin(pauth *a, uint8_t challenge[PAUTH_CHALLENGE_LEN], char *why, size_t whylen);
/* Client side: begin a handshake that will present hello (len bytes, at
 * most PAUTH_HELLO_MAX). */
void pauth_client_begin(pauth *a, const void *hello, size_t len);
long pauth_feed(pauth *a, const uint8_t *in, size_t len, uint8_t *out, size_t *outlen, char *why,
                size_t whylen);
static inline int pauth_done(const pauth *a) { return a->state == PAUTH_DONE; }

/* pauth_feed over libevent buffers, for links driven by an event loop:
 * feeds what in holds (draining what the handshake consumed; bytes after
 * its end stay in in) and puts what must be sent IN FRONT of out (ahead of
 * anything queued meanwhile; the caller must not have written out before
 * the handshake's first message). 1 = done, 0 = more bytes needed, -1 =
 * failed with why. */
struct evbuffer;
int pauth_feed_evbuffer(pauth *a, struct evbuffer *in, struct evbuffer *out, char *why,
                        size_t whylen);

/* The whole client side on a blocking-style link (peer_recv_all /
 * peer_send_all, plaintext or TLS): 0, or -1 with err. */
struct conn;
int pauth_client_run(struct conn *c, const void *hello, size_t len, int timeout_ms, char *err,
                     size_t errlen);

/* Which secret peers authenticate with now: "cluster-secret",
 * "requirepass" or "none". */
const char *pauth_secret_source(void);
/* Whether a server may take peers when no secret is in force: set once at
 * start-up by whoever opens the peer port (only when bind allows its
 * address). Default: no. */
void pauth_set_open_without_secret(int yes);

/* A peer was refused: count it (INFO repl_auth_failures) and log why with
 * its address (that of the socket fd, or sa; NULL = unknown), rate-limited
 * so that a flood of bad peers cannot flood the log. */
void pauth_refused_fd(int fd, const char *why);
void pauth_refused_addr(const struct sockaddr *sa, const char *why);
long long pauth_failures(void);

#endif
