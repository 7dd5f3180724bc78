/* test-dgram.c -- the native datagram codec (rdma/dgram.c).
 *
 * Round trips (headers, requests with empty, binary and maximal arguments,
 * replies of every size class joined from fragments in any order and with
 * duplicates, refusals), the exact wire layout of the header (so a second
 * implementation, such as the Python client of tests/integration/
 * test_native.py, can be checked against the same bytes), and every
 * malformed case the decoder must refuse: truncation anywhere, bad magic,
 * version and type, request id 0, nonzero unused fields, argc 0 or above
 * the limit, an argument length past the end, trailing bytes, and every
 * fragment bound (index, count, offset, length, total). Each malformed
 * input is decoded from an exact-size copy, so ASan builds see any read
 * past its end. */
#include "dgram.h"
#include "le.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static dgram_hdr req_hdr(uint64_t client, uint64_t req) {
    dgram_hdr h = {0};
    h.client = client;
    h.req = req;
    h.term = 7;
    h.acked = req > 1 ? req - 1 : 0;
    h.shard = 0xffff;
    return h;
}

/* dgram_get_hdr on an exact-size heap copy of buf[0..len). */
static int get_hdr_copy(const unsigned char *buf, size_t len, dgram_hdr *h, const char **why) {
    unsigned char *c = malloc(len ? len : 1);
    memcpy(c, buf, len);
    int r = dgram_get_hdr(c, len, h, why);
    free(c);
    return r;
}

/* dgram_get_args on an exact-size heap copy of a request datagram's payload. */
static int get_args_copy(const unsigned char *dg, size_t len, const char **why) {
    const char *argv[DGRAM_MAX_ARGS];
    size_t argvlen[DGRAM_MAX_ARGS];
    size_t plen = len - DGRAM_HDR_LEN;
    unsigned char *c = malloc(plen ? plen : 1);
    memcpy(c, dg + DGRAM_HDR_LEN, plen);
    int r = dgram_get_args(c, plen, argv, argvlen, DGRAM_MAX_ARGS, why);
    free(c);
    return r;
}

static void test_header_layout(void) {
    unsigned char b[DGRAM_HDR_LEN];
    dgram_hdr h = {DGRAM_MAGIC, DGRAM_VERSION_1, DGRAM_REPLY, 0x0102, 0x1112131415161718ull,
                   0x2122232425262728ull, 0x3132333435363738ull, 0x4142434445464748ull,
                   0x5152, 0x6162, 0x71727374, 0x81828384};
    dgram_put_hdr(b, &h);
    static const unsigned char want[DGRAM_HDR_LEN] = {
        'R', 'W', 'N', '1', 1, 2, 0x02, 0x01,
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
        0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
        0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,
        0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41,
        0x52, 0x51, 0x62, 0x61, 0x74, 0x73, 0x72, 0x71, 0x84, 0x83, 0x82, 0x81,
    };
    CHECK(memcmp(b, want, DGRAM_HDR_LEN) == 0);
}

static void test_request_roundtrip(void) {
    unsigned char dg[DGRAM_MTU];
    const char *argv[] = {"SET", "key", "", "bin\0ary"};
    size_t argvlen[] = {3, 3, 0, 7};
    dgram_hdr h = req_hdr(42, 9);
    long n = dgram_put_request(dg, &h, 4, argv, argvlen);
    CHECK_EQ_LL(n, DGRAM_HDR_LEN + 2 + 4 * 4 + 3 + 3 + 0 + 7);
    dgram_hdr g;
    const char *why = NULL;
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, &why), 0);
    CHECK_EQ_LL(g.type, DGRAM_REQUEST);
    CHECK(g.client == 42 && g.req == 9 && g.term == 7 && g.acked == 8 && g.shard == 0xffff);
    CHECK_EQ_LL(g.frag, 0);
    const char *av[8];
    size_t al[8];
    int argc = dgram_get_args(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, av, al, 8, &why);
    CHECK_EQ_LL(argc, 4);
    for (int i = 0; i < 4 && argc == 4; i++) {
        CHECK(al[i] == argvlen[i]);
        CHECK(memcmp(av[i], argv[i], argvlen[i]) == 0);
        CHECK(av[i] >= (const char *)dg && av[i] + al[i] <= (const char *)dg + n);
    }
    /* a retransmission asking for the reply from fragment 5 on */
    h.frag = 5;
    long n5 = dgram_put_request(dg, &h, 4, argv, argvlen);
    CHECK_EQ_LL(n5, n);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n5, &g, &why), 0);
    CHECK_EQ_LL(g.frag, 5);
    h.frag = 0;
    n = dgram_put_request(dg, &h, 4, argv, argvlen);
    /* max below argc: refused, not overrun */
    CHECK_EQ_LL(dgram_get_args(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, av, al, 3, &why), -1);

    /* one argument filling the datagram exactly; one byte more does not fit */
    size_t big = DGRAM_MTU - DGRAM_HDR_LEN - 2 - 4;
    char *v = malloc(big + 1);
    memset(v, 'x', big + 1);
    const char *one[] = {v};
    size_t onelen[] = {big};
    n = dgram_put_request(dg, &h, 1, one, onelen);
    CHECK_EQ_LL(n, DGRAM_MTU);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, &why), 0);
    CHECK_EQ_LL(get_args_copy(dg, (size_t)n, &why), 1);
    onelen[0] = big + 1;
    CHECK_EQ_LL(dgram_put_request(dg, &h, 1, one, onelen), -1);
    onelen[0] = (size_t)1 << 40;   /* absurd lengths must not wrap the sum */
    CHECK_EQ_LL(dgram_put_request(dg, &h, 1, one, onelen), -1);
    free(v);

    /* argc 0 and above the limit are never encoded */
    CHECK_EQ_LL(dgram_put_request(dg, &h, 0, argv, argvlen), -1);
    static const char *many[DGRAM_MAX_ARGS + 1];
    static size_t manylen[DGRAM_MAX_ARGS + 1];
    for (int i = 0; i <= DGRAM_MAX_ARGS; i++) many[i] = "", manylen[i] = 0;
    /* the most empty arguments that fit one datagram (fewer than DGRAM_MAX_ARGS) */
    int fit = (DGRAM_MTU - DGRAM_HDR_LEN - 2) / 4;
    n = dgram_put_request(dg, &h, fit, many, manylen);
    CHECK_EQ_LL(n, DGRAM_HDR_LEN + 2 + 4 * fit);
    if (n > 0) CHECK_EQ_LL(get_args_copy(dg, (size_t)n, &why), fit);
    CHECK_EQ_LL(dgram_put_request(dg, &h, fit + 1, many, manylen), -1);
    CHECK_EQ_LL(dgram_put_request(dg, &h, DGRAM_MAX_ARGS + 1, many, manylen), -1);
}

/* A request datagram "GET k" into dg; returns its length. */
static size_t small_request(unsigned char *dg) {
    const char *argv[] = {"GET", "k"};
    size_t argvlen[] = {3, 1};
    dgram_hdr h = req_hdr(1, 1);
    return (size_t)dgram_put_request(dg, &h, 2, argv, argvlen);
}

static void expect_hdr_fail(const unsigned char *dg, size_t len, const char *reason) {
    dgram_hdr g;
    const char *why = NULL;
    CHECK_EQ_LL(get_hdr_copy(dg, len, &g, &why), -1);
    CHECK(why != NULL && strcmp(why, reason) == 0);
    if (why && strcmp(why, reason) != 0) fprintf(stderr, "  got '%s', want '%s'\n", why, reason);
}

static void expect_args_fail(const unsigned char *dg, size_t len, const char *reason) {
    const char *why = NULL;
    CHECK_EQ_LL(get_args_copy(dg, len, &why), -1);
    CHECK(why != NULL && strcmp(why, reason) == 0);
    if (why && strcmp(why, reason) != 0) fprintf(stderr, "  got '%s', want '%s'\n", why, reason);
}

static void test_request_malformed(void) {
    unsigned char dg[DGRAM_MTU + 8], bad[DGRAM_MTU + 8];
    size_t n = small_request(dg);

    /* truncated anywhere: inside the header, or inside the payload */
    for (size_t cut = 0; cut < DGRAM_HDR_LEN; cut++) expect_hdr_fail(dg, cut, "truncated header");
    for (size_t cut = DGRAM_HDR_LEN; cut < n; cut++) {
        dgram_hdr g;
        CHECK_EQ_LL(get_hdr_copy(dg, cut, &g, NULL), 0);
        const char *why = NULL;
        CHECK_EQ_LL(get_args_copy(dg, cut, &why), -1);
        CHECK(why != NULL);
    }
    expect_args_fail(dg, DGRAM_HDR_LEN, "truncated argument count");
    expect_args_fail(dg, DGRAM_HDR_LEN + 1, "truncated argument count");
    expect_args_fail(dg, DGRAM_HDR_LEN + 3, "truncated argument length");
    expect_args_fail(dg, n - 1, "argument past the end");

    memcpy(bad, dg, n);
    bad[0] ^= 1;
    expect_hdr_fail(bad, n, "bad magic");
    memcpy(bad, dg, n);
    bad[4] = 3;
    expect_hdr_fail(bad, n, "unsupported version");
    memcpy(bad, dg, n);
    bad[4] = DGRAM_VERSION;                   /* a single request reads the same in version 2 */
    {
        dgram_hdr v2;
        CHECK_EQ_LL(get_hdr_copy(bad, n, &v2, NULL), 0);
        CHECK_EQ_LL(v2.version, DGRAM_VERSION);
    }
    memcpy(bad, dg, n);
    bad[4] = 0;
    expect_hdr_fail(bad, n, "unsupported version");
    for (int t = 0; t < 256; t++) {
        if (t >= DGRAM_REQUEST && t <= DGRAM_REFUSE) continue;
        memcpy(bad, dg, n);
        bad[5] = (unsigned char)t;
        expect_hdr_fail(bad, n, "bad type");
    }
    memcpy(bad, dg, n);
    le_put_u64(bad + 16, 0);
    expect_hdr_fail(bad, n, "request id 0");
    /* frag of a request: the first fragment wanted, below DGRAM_MAX_FRAGS */
    memcpy(bad, dg, n);
    le_put_u16(bad + 40, DGRAM_MAX_FRAGS - 1);
    dgram_hdr g;
    CHECK_EQ_LL(get_hdr_copy(bad, n, &g, NULL), 0);
    CHECK_EQ_LL(g.frag, DGRAM_MAX_FRAGS - 1);
    le_put_u16(bad + 40, DGRAM_MAX_FRAGS);
    expect_hdr_fail(bad, n, "fragment index out of range");
    for (int off = 42; off < DGRAM_HDR_LEN; off++) {   /* nfrag, total, off */
        memcpy(bad, dg, n);
        bad[off] = 1;
        expect_hdr_fail(bad, n, "nonzero unused field");
    }
    memset(bad, 0, sizeof(bad));
    memcpy(bad, dg, n);
    expect_hdr_fail(bad, DGRAM_MTU + 1, "datagram too long");

    /* argc 0, argc above the limit */
    memcpy(bad, dg, n);
    le_put_u16(bad + DGRAM_HDR_LEN, 0);
    expect_args_fail(bad, n, "no arguments");
    memcpy(bad, dg, n);
    le_put_u16(bad + DGRAM_HDR_LEN, DGRAM_MAX_ARGS + 1);
    expect_args_fail(bad, n, "too many arguments");
    memcpy(bad, dg, n);
    le_put_u16(bad + DGRAM_HDR_LEN, 0xffff);
    expect_args_fail(bad, n, "too many arguments");
    /* argc larger than the arguments present */
    memcpy(bad, dg, n);
    le_put_u16(bad + DGRAM_HDR_LEN, 3);
    expect_args_fail(bad, n, "truncated argument length");
    /* argc smaller: the rest is trailing */
    memcpy(bad, dg, n);
    le_put_u16(bad + DGRAM_HDR_LEN, 1);
    expect_args_fail(bad, n, "trailing bytes");
    /* a trailing byte after a well-formed payload */
    memcpy(bad, dg, n);
    bad[n] = 0;
    expect_args_fail(bad, n + 1, "trailing bytes");
    /* argument lengths past the end, including ones that would wrap */
    static const uint32_t lens[] = {2, 100, 0x7fffffffu, 0x80000000u, 0xfffffffcu, 0xffffffffu};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        memcpy(bad, dg, n);
        le_put_u32(bad + DGRAM_HDR_LEN + 2 + 4 + 3, lens[i]);   /* the 2nd argument's length */
        expect_args_fail(bad, n, "argument past the end");
        memcpy(bad, dg, n);
        le_put_u32(bad + DGRAM_HDR_LEN + 2, lens[i] < 4 ? 4 : lens[i]);   /* the 1st's */
        const char *why = NULL;
        CHECK_EQ_LL(get_args_copy(bad, n, &why), -1);
    }
}

/* Encode resp[0..total) as fragments, decode each, join them in the given
 * order (with the first fragment sent twice), and compare. */
static void reply_roundtrip(size_t total, int reverse) {
    char *resp = malloc(total ? total : 1);
    for (size_t i = 0; i < total; i++) resp[i] = (char)(i * 31 + 7);
    dgram_hdr h = req_hdr(99, 1234);
    unsigned nfrag = dgram_reply_nfrag(total);
    CHECK(nfrag >= 1);
    dgram_join j;
    dgram_join_init(&j);
    int done = 0;
    for (unsigned k = 0; k <= nfrag; k++) {
        unsigned f = k == nfrag ? 0 : (reverse ? nfrag - 1 - k : k);   /* a duplicate at the end */
        unsigned char dg[DGRAM_MTU];
        long n = dgram_put_reply(dg, &h, resp, total, f);
        CHECK(n >= DGRAM_HDR_LEN && n <= DGRAM_MTU);
        dgram_hdr g;
        const char *why = NULL;
        int r = get_hdr_copy(dg, (size_t)n, &g, &why);
        CHECK_EQ_LL(r, 0);
        if (r) {
            fprintf(stderr, "  total %zu frag %u: %s\n", total, f, why);
            break;
        }
        CHECK(g.type == DGRAM_REPLY && g.client == 99 && g.req == 1234 && g.nfrag == nfrag);
        int a = dgram_join_add(&j, &g, dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN);
        CHECK_EQ_LL(a, k + 1 >= nfrag ? 1 : 0);
        done = a;
    }
    CHECK(done == 1 && j.total == total && (total == 0 || memcmp(j.buf, resp, total) == 0));
    dgram_join_free(&j);
    free(resp);
}

static void test_reply_roundtrip(void) {
    size_t sizes[] = {0, 1, 5, DGRAM_PAYLOAD_MAX - 1, DGRAM_PAYLOAD_MAX, DGRAM_PAYLOAD_MAX + 1,
                      3 * DGRAM_PAYLOAD_MAX, 100000, DGRAM_REPLY_MAX - 1, DGRAM_REPLY_MAX};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        reply_roundtrip(sizes[i], 0);
        reply_roundtrip(sizes[i], 1);
    }
    CHECK_EQ_LL(dgram_reply_nfrag(DGRAM_REPLY_MAX), DGRAM_MAX_FRAGS);
    CHECK_EQ_LL(dgram_reply_nfrag(DGRAM_REPLY_MAX + 1), 0);
    unsigned char dg[DGRAM_MTU];
    dgram_hdr h = req_hdr(1, 1);
    CHECK_EQ_LL(dgram_put_reply(dg, &h, "x", DGRAM_REPLY_MAX + 1, 0), -1);
    CHECK_EQ_LL(dgram_put_reply(dg, &h, "abc", 3, 1), -1);
}

static void test_reply_malformed(void) {
    static char resp[3 * DGRAM_PAYLOAD_MAX + 10];
    unsigned char dg[DGRAM_MTU + 8], bad[DGRAM_MTU + 8];
    dgram_hdr h = req_hdr(5, 6), g;
    long n = dgram_put_reply(dg, &h, resp, sizeof(resp), 1);   /* a full middle fragment */
    CHECK_EQ_LL(n, DGRAM_MTU);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);

    expect_hdr_fail(dg, (size_t)n - 1, "bad fragment length");   /* truncated payload */
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 40, 4);                                      /* frag == nfrag */
    expect_hdr_fail(bad, (size_t)n, "fragment index out of range");
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 40, 0xffff);
    expect_hdr_fail(bad, (size_t)n, "fragment index out of range");
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 42, 5);                                      /* nfrag not what total implies */
    expect_hdr_fail(bad, (size_t)n, "bad fragment count");
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 42, 0);
    expect_hdr_fail(bad, (size_t)n, "bad fragment count");
    memcpy(bad, dg, (size_t)n);
    le_put_u32(bad + 48, DGRAM_PAYLOAD_MAX + 1);                  /* off not frag * payload */
    expect_hdr_fail(bad, (size_t)n, "bad fragment offset");
    memcpy(bad, dg, (size_t)n);
    le_put_u32(bad + 48, 0xffffffffu);
    expect_hdr_fail(bad, (size_t)n, "bad fragment offset");
    memcpy(bad, dg, (size_t)n);
    le_put_u32(bad + 44, DGRAM_REPLY_MAX + 1);                    /* total too large */
    expect_hdr_fail(bad, (size_t)n, "reply too large");
    memcpy(bad, dg, (size_t)n);
    le_put_u32(bad + 44, 0xffffffffu);
    expect_hdr_fail(bad, (size_t)n, "reply too large");

    /* the last (short) fragment: exactly its length, no more, no less */
    n = dgram_put_reply(dg, &h, resp, sizeof(resp), 3);
    CHECK_EQ_LL(n, DGRAM_HDR_LEN + 10);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);
    memcpy(bad, dg, (size_t)n);
    bad[n] = 0;
    expect_hdr_fail(bad, (size_t)n + 1, "bad fragment length");
    expect_hdr_fail(dg, (size_t)n - 1, "bad fragment length");

    /* the joiner refuses a fragment of another reply */
    dgram_join j;
    dgram_join_init(&j);
    n = dgram_put_reply(dg, &h, resp, sizeof(resp), 0);
    get_hdr_copy(dg, (size_t)n, &g, NULL);
    CHECK_EQ_LL(dgram_join_add(&j, &g, dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN), 0);
    dgram_hdr other = h;
    other.req = 7;
    n = dgram_put_reply(dg, &other, resp, sizeof(resp), 1);
    get_hdr_copy(dg, (size_t)n, &g, NULL);
    CHECK_EQ_LL(dgram_join_add(&j, &g, dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN), -1);
    n = dgram_put_reply(dg, &h, resp, sizeof(resp) - 1, 1);      /* other total */
    get_hdr_copy(dg, (size_t)n, &g, NULL);
    CHECK_EQ_LL(dgram_join_add(&j, &g, dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN), -1);
    CHECK_EQ_LL(j.got, 1);
    dgram_join_free(&j);
}

static void test_refuse(void) {
    unsigned char dg[DGRAM_MTU + 8], bad[DGRAM_MTU + 8];
    dgram_hdr h = req_hdr(3, 4), g;
    h.term = 12;
    long n = dgram_put_refuse(dg, &h, DGRAM_R_STALE, "STALE term");
    CHECK_EQ_LL(n, DGRAM_HDR_LEN + 10);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);
    CHECK(g.type == DGRAM_REFUSE && g.frag == DGRAM_R_STALE && g.term == 12 && g.req == 4);
    CHECK(memcmp(dg + DGRAM_HDR_LEN, "STALE term", 10) == 0);
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 40, 0);
    expect_hdr_fail(bad, (size_t)n, "unknown refusal code");
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 40, DGRAM_R_LOADING + 1);
    expect_hdr_fail(bad, (size_t)n, "unknown refusal code");
    memcpy(bad, dg, (size_t)n);
    le_put_u16(bad + 42, 1);
    expect_hdr_fail(bad, (size_t)n, "nonzero unused field");
    /* a message longer than a datagram is cut to fit */
    char *msg = malloc(DGRAM_MTU + 1);
    memset(msg, 'm', DGRAM_MTU);
    msg[DGRAM_MTU] = '\0';
    n = dgram_put_refuse(dg, &h, DGRAM_R_BUSY, msg);
    CHECK_EQ_LL(n, DGRAM_MTU);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);
    free(msg);
}

/* Packed frames (version 2): requests and replies round trip entry by
 * entry; the encoder keeps request ids increasing and stops at the MTU;
 * the decoder refuses every structural fault. */
static void test_packs(void) {
    unsigned char dg[DGRAM_MTU + 8], bad[DGRAM_MTU + 8], args[64];
    dgram_hdr h = req_hdr(0xabc, 0), g;
    h.acked = 10;
    dgram_pack p;
    /* requests: GET k<i> with ids 10.. */
    dgram_pack_begin(&p, dg, &h, DGRAM_PACKED_REQUESTS);
    CHECK_EQ_LL(dgram_pack_end(&p), -1);                     /* empty */
    int added = 0;
    for (uint64_t id = 10;; id++) {
        char key[16];
        int kl = snprintf(key, sizeof key, "k%llu", (unsigned long long)id);
        const char *argv[] = {"GET", key};
        size_t argvlen[] = {3, (size_t)kl};
        unsigned char tmp[DGRAM_MTU];
        long rn = dgram_put_request(tmp, &h, 2, argv, argvlen);
        dgram_entry e = {.req = id, .type = DGRAM_REQUEST, .shard = (uint16_t)id, .frag = 0,
                         .len = (uint32_t)(rn - DGRAM_HDR_LEN), .payload = tmp + DGRAM_HDR_LEN};
        if (!dgram_pack_room(&p, e.len)) {
            CHECK_EQ_LL(dgram_pack_add(&p, &e), -1);
            break;
        }
        CHECK_EQ_LL(dgram_pack_add(&p, &e), 0);
        CHECK_EQ_LL(dgram_pack_add(&p, &e), -1);             /* the same id again: out of order */
        added++;
    }
    long n = dgram_pack_end(&p);
    CHECK(n > DGRAM_MTU - 40 && n <= DGRAM_MTU);
    CHECK(added > 100);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);
    CHECK(g.type == DGRAM_PACKED_REQUESTS && g.version == DGRAM_VERSION && g.nfrag == added &&
          g.client == 0xabc && g.acked == 10 && g.term == 7 && g.req == 0);
    size_t pos = 0;
    dgram_entry e;
    int seen = 0;
    while (dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, g.type, &pos, &e)) {
        const char *av[4];
        size_t al[4];
        CHECK_EQ_LL(e.req, 10 + (uint64_t)seen);
        CHECK_EQ_LL(e.shard, 10 + seen);
        CHECK_EQ_LL(dgram_get_args(e.payload, e.len, av, al, 4, NULL), 2);
        CHECK(al[0] == 3 && memcmp(av[0], "GET", 3) == 0);
        seen++;
    }
    CHECK_EQ_LL(seen, added);
    for (size_t cut = DGRAM_HDR_LEN; cut < (size_t)n; cut += 7) {
        const char *why = NULL;
        CHECK_EQ_LL(get_hdr_copy(dg, cut, &g, &why), -1);
        CHECK(why != NULL);
    }

    /* replies: a reply, a refusal, an empty reply; ids in any order */
    dgram_hdr r = {0};
    r.client = 0xabc;
    r.term = 3;
    r.acked = 99;                                             /* not carried by reply packs */
    dgram_pack_begin(&p, dg, &r, DGRAM_PACKED_REPLIES);
    dgram_entry e1 = {.req = 12, .type = DGRAM_REPLY, .len = 5, .payload = (const unsigned char *)"+OK\r\n"};
    dgram_entry e2 = {.req = 11, .type = DGRAM_REFUSE, .frag = DGRAM_R_BUSY, .len = 4,
                      .payload = (const unsigned char *)"BUSY"};
    dgram_entry e3 = {.req = 13, .type = DGRAM_REPLY, .len = 0, .payload = NULL};
    dgram_entry ebad = {.req = 14, .type = DGRAM_REPLY, .frag = 1, .len = 0};
    CHECK_EQ_LL(dgram_pack_add(&p, &e1), 0);
    CHECK_EQ_LL(dgram_pack_add(&p, &e2), 0);
    CHECK_EQ_LL(dgram_pack_add(&p, &e3), 0);
    CHECK_EQ_LL(dgram_pack_add(&p, &ebad), -1);
    ebad.type = DGRAM_REQUEST;
    ebad.frag = 0;
    CHECK_EQ_LL(dgram_pack_add(&p, &ebad), -1);
    n = dgram_pack_end(&p);
    CHECK_EQ_LL(n, DGRAM_HDR_LEN + 3 * DGRAM_ENTRY_HDR_LEN + 9);
    CHECK_EQ_LL(get_hdr_copy(dg, (size_t)n, &g, NULL), 0);
    CHECK(g.type == DGRAM_PACKED_REPLIES && g.nfrag == 3 && g.acked == 0 && g.term == 3);
    pos = 0;
    CHECK_EQ_LL(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, g.type, &pos, &e), 1);
    CHECK(e.req == 12 && e.type == DGRAM_REPLY && e.len == 5 && memcmp(e.payload, "+OK\r\n", 5) == 0);
    CHECK_EQ_LL(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, g.type, &pos, &e), 1);
    CHECK(e.req == 11 && e.type == DGRAM_REFUSE && e.frag == DGRAM_R_BUSY && e.len == 4);
    CHECK_EQ_LL(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, g.type, &pos, &e), 1);
    CHECK(e.req == 13 && e.len == 0);
    CHECK_EQ_LL(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, g.type, &pos, &e), 0);

    /* structural faults */
    size_t en = (size_t)n;
    memcpy(bad, dg, en);
    bad[4] = DGRAM_VERSION_1;
    expect_hdr_fail(bad, en, "bad type");
    memcpy(bad, dg, en);
    le_put_u16(bad + 42, 0);
    expect_hdr_fail(bad, en, "empty packed frame");
    memcpy(bad, dg, en);
    le_put_u16(bad + 42, 2);
    expect_hdr_fail(bad, en, "trailing bytes");
    memcpy(bad, dg, en);
    le_put_u16(bad + 42, 4);
    expect_hdr_fail(bad, en, "truncated entry header");
    int unused[] = {6, 16, 32, 40, 44, 48};
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        memcpy(bad, dg, en);
        bad[unused[i]] = 1;
        expect_hdr_fail(bad, en, "nonzero unused field");
    }
    size_t e0 = DGRAM_HDR_LEN;                              /* the first entry's header */
    memcpy(bad, dg, en);
    le_put_u64(bad + e0, 0);
    expect_hdr_fail(bad, en, "request id 0");
    memcpy(bad, dg, en);
    le_put_u16(bad + e0 + 8, DGRAM_REQUEST);
    expect_hdr_fail(bad, en, "bad entry type");
    memcpy(bad, dg, en);
    le_put_u16(bad + e0 + 8, 0x102);                        /* type above a byte */
    expect_hdr_fail(bad, en, "bad entry type");
    memcpy(bad, dg, en);
    le_put_u16(bad + e0 + 10, 1);
    expect_hdr_fail(bad, en, "nonzero unused field");
    memcpy(bad, dg, en);
    le_put_u32(bad + e0 + 12, 6);
    expect_hdr_fail(bad, en, "entry past the end");         /* the next entry read shifted */
    memcpy(bad, dg, en);
    le_put_u32(bad + e0 + 12, 0xffffffffu);
    expect_hdr_fail(bad, en, "entry past the end");
    size_t e1at = e0 + DGRAM_ENTRY_HDR_LEN + 5;
    memcpy(bad, dg, en);
    le_put_u16(bad + e1at + 10, DGRAM_R_LOADING + 1);
    expect_hdr_fail(bad, en, "unknown refusal code");

    /* request packs: ids must increase, frag in range, acked is carried */
    dgram_pack_begin(&p, dg, &h, DGRAM_PACKED_REQUESTS);
    const char *argv[] = {"PING"};
    size_t argvlen[] = {4};
    long an = dgram_put_request(args, &h, 1, argv, argvlen);
    dgram_entry q = {.req = 5, .type = DGRAM_REQUEST, .len = (uint32_t)(an - DGRAM_HDR_LEN),
                     .payload = args + DGRAM_HDR_LEN};
    CHECK_EQ_LL(dgram_pack_add(&p, &q), 0);
    q.req = 6;
    q.frag = DGRAM_MAX_FRAGS;
    CHECK_EQ_LL(dgram_pack_add(&p, &q), -1);
    q.frag = 3;
    CHECK_EQ_LL(dgram_pack_add(&p, &q), 0);
    n = dgram_pack_end(&p);
    en = (size_t)n;
    CHECK_EQ_LL(get_hdr_copy(dg, en, &g, NULL), 0);
    size_t q1 = DGRAM_HDR_LEN + DGRAM_ENTRY_HDR_LEN + q.len;
    memcpy(bad, dg, en);
    le_put_u64(bad + q1, 5);
    expect_hdr_fail(bad, en, "request ids not increasing");
    memcpy(bad, dg, en);
    le_put_u16(bad + q1 + 10, DGRAM_MAX_FRAGS);
    expect_hdr_fail(bad, en, "fragment index out of range");
    memcpy(bad, dg, en);
    bad[en] = 0;
    expect_hdr_fail(bad, en + 1, "trailing bytes");
}

int main(void) {
    test_header_layout();
    test_request_roundtrip();
    test_request_malformed();
    test_reply_roundtrip();
    test_reply_malformed();
    test_refuse();
    test_packs();
    return UNIT_DONE("test-dgram");
}
