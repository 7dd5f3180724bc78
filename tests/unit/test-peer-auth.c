/* test-peer-auth.c -- the peer handshake (src/repl/peer_auth.c), both state
 * machines driven against each other in memory: a shared secret lets the
 * two ends in (and only the hello the client sent comes out); a wrong or
 * missing secret, a replayed or tampered response, a fake server's proof
 * and garbage are all refused; a response fed byte by byte is decided only
 * once complete; without any secret peers are taken only when allowed. */
#include <string.h>
#include "peer_auth.h"
#include "server.h"
#include "unit.h"

static void use_secret(const char *cluster_secret, const char *requirepass) {
    server.cfg.cluster_secret = (char *)cluster_secret;
    server.cfg.requirepass = (char *)requirepass;
}

/* One side's key is whatever is configured when it begins. */
typedef struct run {
    pauth srv, cli;
    uint8_t challenge[PAUTH_CHALLENGE_LEN];
    uint8_t response[PAUTH_MSG_MAX];
    size_t response_len;
    uint8_t reply[PAUTH_REPLY_LEN];
    size_t reply_len;
    long srv_rc, cli_rc;
    char srv_why[256], cli_why[256];
} run;

static const char HELLO[] = "a 32-byte hello, more or less...";

/* Challenge and response: the server's key from srv_key, the client's from
 * cli_key. Returns what the server's feed returned. */
static long start(run *r, const char *srv_key, const char *cli_key) {
    memset(r, 0, sizeof(*r));
    use_secret(srv_key, "");
    if (pauth_server_begin(&r->srv, r->challenge, r->srv_why, sizeof(r->srv_why)) != 0) return -2;
    use_secret(cli_key, "");
    pauth_client_begin(&r->cli, HELLO, sizeof(HELLO));
    r->cli_rc = pauth_feed(&r->cli, r->challenge, PAUTH_CHALLENGE_LEN, r->response,
                           &r->response_len, r->cli_why, sizeof(r->cli_why));
    if (r->cli_rc <= 0) return -3;
    r->srv_rc = pauth_feed(&r->srv, r->response, r->response_len, r->reply, &r->reply_len,
                           r->srv_why, sizeof(r->srv_why));
    return r->srv_rc;
}

/* The client's side of the reply. */
static long finish(run *r) {
    uint8_t none[PAUTH_MSG_MAX];
    size_t nonelen = 0;
    r->cli_rc = pauth_feed(&r->cli, r->reply, PAUTH_REPLY_LEN, none, &nonelen, r->cli_why,
                           sizeof(r->cli_why));
    return r->cli_rc;
}

static void test_shared_secret(void) {
    run r;
    CHECK_EQ_LL(start(&r, "s3cret", "s3cret"), PAUTH_RESPONSE_HDR + sizeof(HELLO));
    CHECK_EQ_LL(r.response_len, PAUTH_RESPONSE_HDR + sizeof(HELLO));
    CHECK(pauth_done(&r.srv));
    CHECK_EQ_LL(r.srv.hello_len, sizeof(HELLO));
    CHECK(memcmp(r.srv.hello, HELLO, sizeof(HELLO)) == 0);
    CHECK_EQ_LL(r.reply_len, PAUTH_REPLY_LEN);
    CHECK_EQ_LL(finish(&r), PAUTH_REPLY_LEN);
    CHECK(pauth_done(&r.cli));
    /* requirepass is the secret when cluster-secret is empty */
    use_secret("", "pw");
    CHECK(strcmp(pauth_secret_source(), "requirepass") == 0);
    use_secret("x", "pw");
    CHECK(strcmp(pauth_secret_source(), "cluster-secret") == 0);
    use_secret("", "");
    CHECK(strcmp(pauth_secret_source(), "none") == 0);
}

static void test_wrong_or_missing_secret(void) {
    run r;
    long long before = pauth_failures();
    CHECK_EQ_LL(start(&r, "s3cret", "other"), -1);
    CHECK(strstr(r.srv_why, "MAC is wrong") != NULL);
    CHECK(!pauth_done(&r.srv));
    CHECK_EQ_LL(r.reply_len, PAUTH_REPLY_LEN); /* a refusal record */
    CHECK_EQ_LL(finish(&r), -1);
    CHECK(strstr(r.cli_why, "refused our authentication") != NULL);
    CHECK(strstr(r.cli_why, "differs") != NULL);
    pauth_refused_addr(NULL, r.srv_why);
    CHECK_EQ_LL(pauth_failures(), before + 1);

    /* a keyed server and a client without a secret: the client stops */
    CHECK_EQ_LL(start(&r, "s3cret", ""), -3);
    CHECK(strstr(r.cli_why, "requires a cluster secret") != NULL);
    /* a client that has one never talks to a server without one */
    pauth_set_open_without_secret(1);
    CHECK_EQ_LL(start(&r, "", "s3cret"), -3);
    CHECK(strstr(r.cli_why, "has no cluster secret") != NULL);
    pauth_set_open_without_secret(0);
}

static void test_no_secret(void) {
    run r;
    pauth_set_open_without_secret(0);
    CHECK_EQ_LL(start(&r, "", ""), -2);
    CHECK(strstr(r.srv_why, "bind") != NULL);
    pauth_set_open_without_secret(1);
    CHECK(start(&r, "", "") > 0);
    CHECK_EQ_LL(finish(&r), PAUTH_REPLY_LEN);
    pauth_set_open_without_secret(0);
}

static void test_replay_and_tampering(void) {
    run a, b;
    CHECK(start(&a, "k", "k") > 0);
    /* The same response on a new connection (a new challenge) is refused. */
    use_secret("k", "");
    uint8_t challenge[PAUTH_CHALLENGE_LEN], out[PAUTH_MSG_MAX];
    size_t outlen = 0;
    char why[256];
    CHECK_EQ_LL(pauth_server_begin(&b.srv, challenge, why, sizeof(why)), 0);
    CHECK(memcmp(challenge, a.challenge, PAUTH_CHALLENGE_LEN) != 0);
    CHECK_EQ_LL(pauth_feed(&b.srv, a.response, a.response_len, out, &outlen, why, sizeof(why)), -1);
    CHECK(strstr(why, "replays") != NULL);

    /* Any byte of the response changed (flags, nonce, MAC, hello): refused. */
    size_t positions[] = {9, 16, 31, 32, 63, PAUTH_RESPONSE_HDR, PAUTH_RESPONSE_HDR + 5};
    for (size_t i = 0; i < sizeof(positions) / sizeof(positions[0]); i++) {
        run r;
        memset(&r, 0, sizeof(r));
        use_secret("k", "");
        CHECK_EQ_LL(pauth_server_begin(&r.srv, r.challenge, why, sizeof(why)), 0);
        pauth_client_begin(&r.cli, HELLO, sizeof(HELLO));
        CHECK(pauth_feed(&r.cli, r.challenge, PAUTH_CHALLENGE_LEN, r.response, &r.response_len, why,
                         sizeof(why)) > 0);
        r.response[positions[i]] ^= 0x01;
        CHECK_EQ_LL(pauth_feed(&r.srv, r.response, r.response_len, r.reply, &r.reply_len, why,
                               sizeof(why)), -1);
        CHECK(!pauth_done(&r.srv));
    }

    /* A server that does not know the secret cannot forge the proof. */
    run f;
    CHECK(start(&f, "k", "k") > 0);
    f.reply[20] ^= 0x80;
    CHECK_EQ_LL(finish(&f), -1);
    CHECK(strstr(f.cli_why, "failed to prove") != NULL);
    CHECK(!pauth_done(&f.cli));
    /* Nor reuse the proof of another handshake. */
    run g, h;
    CHECK(start(&g, "k", "k") > 0);
    CHECK(start(&h, "k", "k") > 0);
    memcpy(h.reply, g.reply, PAUTH_REPLY_LEN);
    CHECK_EQ_LL(finish(&h), -1);
}

static void test_partial_and_garbage(void) {
    run r;
    char why[256];
    uint8_t out[PAUTH_MSG_MAX];
    size_t outlen = 0;
    CHECK(start(&r, "k", "k") > 0);
    /* byte by byte: undecided until the last byte */
    pauth s;
    use_secret("k", "");
    uint8_t challenge[PAUTH_CHALLENGE_LEN];
    CHECK_EQ_LL(pauth_server_begin(&s, challenge, why, sizeof(why)), 0);
    pauth c;
    pauth_client_begin(&c, HELLO, sizeof(HELLO));
    uint8_t resp[PAUTH_MSG_MAX];
    size_t rlen = 0;
    for (size_t n = 0; n < PAUTH_CHALLENGE_LEN; n++)
        CHECK_EQ_LL(pauth_feed(&c, challenge, n, resp, &rlen, why, sizeof(why)), 0);
    CHECK_EQ_LL(pauth_feed(&c, challenge, PAUTH_CHALLENGE_LEN, resp, &rlen, why, sizeof(why)),
                PAUTH_CHALLENGE_LEN);
    int undecided = 1;
    for (size_t n = 0; n < rlen; n++)
        undecided &= pauth_feed(&s, resp, n, out, &outlen, why, sizeof(why)) == 0;
    CHECK(undecided);
    CHECK_EQ_LL(pauth_feed(&s, resp, rlen + 10, out, &outlen, why, sizeof(why)), (long long)rlen);

    /* garbage is refused as soon as its first 8 bytes are in */
    use_secret("k", "");
    CHECK_EQ_LL(pauth_server_begin(&s, challenge, why, sizeof(why)), 0);
    CHECK_EQ_LL(pauth_feed(&s, (const uint8_t *)"GET / HTTP/1.1", 8, out, &outlen, why, sizeof(why)), -1);
    CHECK(strstr(why, "not a Rowan peer") != NULL);
    /* a bare hello of the old protocol says what it is */
    CHECK_EQ_LL(pauth_server_begin(&s, challenge, why, sizeof(why)), 0);
    CHECK_EQ_LL(pauth_feed(&s, (const uint8_t *)"ROWNRPL1", 8, out, &outlen, why, sizeof(why)), -1);
    CHECK(strstr(why, "without the authentication handshake") != NULL);
    /* a response announcing a hello longer than any is refused, not awaited */
    CHECK_EQ_LL(pauth_server_begin(&s, challenge, why, sizeof(why)), 0);
    uint8_t big[16] = {'R', 'O', 'W', 'N', 'A', 'U', 'R', '1', 1, 1, 0xff, 0x7f};
    CHECK_EQ_LL(pauth_feed(&s, big, sizeof(big), out, &outlen, why, sizeof(why)), -1);
    /* a client facing something that is not a challenge */
    pauth_client_begin(&c, HELLO, sizeof(HELLO));
    uint8_t junk[PAUTH_CHALLENGE_LEN] = "HTTP/1.1 400 Bad Request\r\n";
    CHECK_EQ_LL(pauth_feed(&c, junk, sizeof(junk), out, &outlen, why, sizeof(why)), -1);
    /* a finished or failed handshake takes nothing more */
    CHECK_EQ_LL(pauth_feed(&c, challenge, PAUTH_CHALLENGE_LEN, out, &outlen, why, sizeof(why)), -1);
}

int main(void) {
    server.cfg.loglevel = LL_WARNING + 1; /* the refusal logged below is expected */
    test_shared_secret();
    test_wrong_or_missing_secret();
    test_no_secret();
    test_replay_and_tampering();
    test_partial_and_garbage();
    use_secret("", "");
    return UNIT_DONE("test-peer-auth");
}
