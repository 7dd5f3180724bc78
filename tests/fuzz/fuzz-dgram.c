/* fuzz-dgram.c -- fuzz target for the native datagram codec (rdma/dgram.c).
 *
 * LLVMFuzzerTestOneInput() checks properties, not just "does not crash":
 *
 *  1. Decoding the input as a datagram (from an exact-size copy, so ASan
 *     sees any read past its end) either fails with a reason or succeeds,
 *     and what succeeds is canonical: re-encoding the decoded header and
 *     payload with the encoder gives back the input byte for byte (requests
 *     through dgram_put_request, reply fragments through dgram_put_reply,
 *     refusals through dgram_put_refuse, packed frames entry by entry
 *     through dgram_pack_add). A decoder that accepted
 *     something the encoder cannot produce (a slack length, a field it
 *     ignores) fails here. Every decoded argument lies inside the payload.
 *  2. Encoding round trip: the input also drives a generator of argument
 *     vectors (counts up to DGRAM_MAX_ARGS, empty and binary arguments,
 *     sizes up to the MTU); an encoded request must decode to the same
 *     vector, and encoding must fail exactly when the vector does not fit.
 *  2b. Packs: entries generated from the input (ids, shards, refusal
 *     codes, payload sizes up to what fits) are packed until the encoder
 *     says no room; the pack must decode to exactly those entries, and
 *     the encoder must stop exactly when the next entry would pass the MTU.
 *  3. Fragments: the input taken as a reply body is cut into fragments
 *     that are decoded and joined in an input-chosen order with
 *     duplicates; the join must complete exactly at the last new fragment
 *     and equal the body.
 *
 * Any violation prints what went wrong and calls abort().
 *
 * Built with -DFUZZ_STANDALONE (gcc, no libFuzzer), as fuzz-resp is, the
 * file also has a main() that runs the shared mutation fuzzer
 * (tests/fuzz/standalone.c):
 *     fuzz-dgram [-seed=N] [-seconds=N] [-runs=N] [file...]
 * It starts from built-in well-formed datagrams (a request, reply
 * fragments, a refusal), mutates them (bit flips, header fields set to
 * boundary values, length fields pointed past the end, truncation,
 * extension, splices) and prints "fuzz-dgram: N execs, 0 crashes".
 * Files given alone are replayed. A failing input is written to
 * fuzz-dgram-crash.bin (or $FUZZ_CRASH_FILE). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dgram.h"
#include "standalone.h"

#define ENSURE(cond, what) do { \
    if (!(cond)) { \
        fprintf(stderr, "fuzz-dgram: %s (%s:%d)\n", (what), __FILE__, __LINE__); \
        FUZZ_SAVE_CRASH(); \
        abort(); \
    } \
} while (0)

static uint64_t rnd_state;
static uint64_t rnd(void) {
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static uint64_t seed_of(const uint8_t *d, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
    return h | 1;
}

/* 1. decode, then re-encode and compare */
static void check_decode(const uint8_t *data, size_t size) {
    dgram_hdr h;
    const char *why = NULL;
    if (dgram_get_hdr(data, size, &h, &why) != 0) {
        ENSURE(why != NULL, "failure without a reason");
        return;
    }
    ENSURE(size >= DGRAM_HDR_LEN && size <= DGRAM_MTU, "accepted a bad length");
    const uint8_t *payload = data + DGRAM_HDR_LEN;
    size_t plen = size - DGRAM_HDR_LEN;
    unsigned char *out = malloc(DGRAM_MTU);
    long n = -1;
    if (h.type == DGRAM_REQUEST) {
        static const char *argv[DGRAM_MAX_ARGS];
        static size_t argvlen[DGRAM_MAX_ARGS];
        int argc = dgram_get_args(payload, plen, argv, argvlen, DGRAM_MAX_ARGS, &why);
        if (argc < 0) {
            ENSURE(why != NULL, "argument failure without a reason");
            free(out);
            return;
        }
        ENSURE(argc >= 1 && argc <= DGRAM_MAX_ARGS, "argc out of range");
        for (int i = 0; i < argc; i++)
            ENSURE((const uint8_t *)argv[i] >= payload &&
                   argvlen[i] <= plen - (size_t)((const uint8_t *)argv[i] - payload),
                   "argument outside the payload");
        n = dgram_put_request(out, &h, argc, argv, argvlen);
    } else if (h.type == DGRAM_REPLY) {
        char *body = calloc(1, h.total ? h.total : 1);
        ENSURE(h.off + plen <= h.total, "fragment past its total");
        if (plen) memcpy(body + h.off, payload, plen);
        dgram_hdr t = h;
        n = dgram_put_reply(out, &t, body, h.total, h.frag);
        free(body);
        /* the encoder writes acked 0 in replies; the decoder need not care */
        if (n == (long)size) memcpy(out + 32, data + 32, 8);
    } else if (h.type == DGRAM_PACKED_REQUESTS || h.type == DGRAM_PACKED_REPLIES) {
        ENSURE(h.version == DGRAM_VERSION, "pack accepted in version 1");
        dgram_pack p;
        dgram_pack_begin(&p, out, &h, h.type);
        size_t pos = 0;
        dgram_entry e;
        unsigned count = 0;
        while (dgram_pack_next(payload, plen, h.type, &pos, &e)) {
            ENSURE(e.payload >= payload && e.len <= plen - (size_t)(e.payload - payload),
                   "entry outside the payload");
            ENSURE(dgram_pack_add(&p, &e) == 0, "an accepted entry does not re-encode");
            count++;
        }
        ENSURE(count == h.nfrag && pos == plen, "entries do not span the payload");
        n = dgram_pack_end(&p);
    } else {
        ENSURE(h.type == DGRAM_REFUSE, "accepted an unknown type");
        if (memchr(payload, 0, plen) != NULL) {   /* the message is a C string */
            free(out);
            return;
        }
        char *msg = malloc(plen + 1);
        memcpy(msg, payload, plen);
        msg[plen] = '\0';
        n = dgram_put_refuse(out, &h, h.frag, msg);
        free(msg);
        if (n == (long)size) memcpy(out + 32, data + 32, 8);
    }
    ENSURE(n == (long)size, "re-encoding gives another length");
    ENSURE(memcmp(out, data, size) == 0, "re-encoding gives other bytes");
    free(out);
}

/* 2. generated argument vectors */
static void check_encode(void) {
    static const char *argv[DGRAM_MAX_ARGS + 2];
    static size_t argvlen[DGRAM_MAX_ARGS + 2];
    static char pool[DGRAM_MTU + 64];
    for (size_t i = 0; i < sizeof(pool); i++) pool[i] = (char)rnd();
    int argc;
    switch (rnd_below(4)) {
    case 0: argc = (int)rnd_below(4); break;
    case 1: argc = (int)rnd_below(40); break;
    case 2: argc = DGRAM_MAX_ARGS - 1 + (int)rnd_below(3); break;
    default: argc = (int)rnd_below(DGRAM_MAX_ARGS + 2); break;
    }
    size_t need = DGRAM_HDR_LEN + 2;
    for (int i = 0; i < argc; i++) {
        size_t len;
        switch (rnd_below(5)) {
        case 0: len = 0; break;
        case 1: len = rnd_below(8); break;
        case 2: len = rnd_below(300); break;
        case 3: len = DGRAM_MTU - DGRAM_HDR_LEN - 6 - rnd_below(3); break;
        default: len = rnd_below(DGRAM_MTU + 2); break;
        }
        size_t at = rnd_below(sizeof(pool) - len + 1);
        argv[i] = pool + at;
        argvlen[i] = len;
        need += 4 + len;
    }
    dgram_hdr h = {0};
    h.client = rnd();
    h.req = rnd() | 1;
    h.term = rnd();
    h.acked = rnd();
    h.shard = (uint16_t)rnd();
    h.frag = (uint16_t)rnd_below(DGRAM_MAX_FRAGS);
    unsigned char *dg = malloc(DGRAM_MTU);
    long n = dgram_put_request(dg, &h, argc, argv, argvlen);
    int fits = argc >= 1 && argc <= DGRAM_MAX_ARGS && need <= DGRAM_MTU;
    ENSURE(fits == (n >= 0), "encoder fit decision wrong");
    if (n >= 0) {
        ENSURE((size_t)n == need, "encoded length");
        dgram_hdr g;
        const char *why;
        ENSURE(dgram_get_hdr(dg, (size_t)n, &g, &why) == 0, "own request header refused");
        ENSURE(g.client == h.client && g.req == h.req && g.term == h.term &&
               g.acked == h.acked && g.shard == h.shard && g.frag == h.frag &&
               g.type == DGRAM_REQUEST,
               "header round trip");
        static const char *av[DGRAM_MAX_ARGS];
        static size_t al[DGRAM_MAX_ARGS];
        int got = dgram_get_args(dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN, av, al,
                                 DGRAM_MAX_ARGS, &why);
        ENSURE(got == argc, "own request arguments refused");
        for (int i = 0; i < argc; i++)
            ENSURE(al[i] == argvlen[i] && (al[i] == 0 || memcmp(av[i], argv[i], al[i]) == 0),
                   "argument round trip");
    }
    free(dg);
}

/* 2b. generated packs */
static void check_pack(void) {
    static unsigned char pool[DGRAM_MTU];
    for (size_t i = 0; i < sizeof(pool); i++) pool[i] = (unsigned char)rnd();
    int type = rnd_below(2) ? DGRAM_PACKED_REQUESTS : DGRAM_PACKED_REPLIES;
    dgram_hdr h = {0};
    h.client = rnd();
    h.term = rnd();
    h.acked = type == DGRAM_PACKED_REQUESTS ? rnd() : 0;
    dgram_entry want[DGRAM_MTU / DGRAM_ENTRY_HDR_LEN];
    unsigned char *dg = malloc(DGRAM_MTU);
    dgram_pack p;
    dgram_pack_begin(&p, dg, &h, type);
    unsigned n = 0;
    uint64_t id = 1 + rnd_below(1000);
    for (;;) {
        dgram_entry e = {0};
        e.req = id;
        id += 1 + rnd_below(3);
        size_t big = rnd_below(4) == 0 ? DGRAM_ENTRY_MAX + 2 : 300;
        e.len = (uint32_t)rnd_below(big);
        e.payload = pool + rnd_below(sizeof(pool) - (e.len < sizeof(pool) ? e.len : 0) + 1);
        if (e.len > sizeof(pool)) e.payload = pool, e.len = sizeof(pool);
        if (type == DGRAM_PACKED_REQUESTS) {
            e.type = DGRAM_REQUEST;
            e.shard = (uint16_t)rnd();
            e.frag = (uint16_t)rnd_below(DGRAM_MAX_FRAGS);
        } else if (rnd_below(4) == 0) {
            e.type = DGRAM_REFUSE;
            e.frag = (uint16_t)(DGRAM_R_STALE + rnd_below(DGRAM_R_LOADING));
        } else {
            e.type = DGRAM_REPLY;
        }
        int fits = p.len + DGRAM_ENTRY_HDR_LEN + e.len <= DGRAM_MTU;
        ENSURE(dgram_pack_room(&p, e.len) == fits, "pack room decision");
        int r = dgram_pack_add(&p, &e);
        ENSURE((r == 0) == fits, "pack add decision");
        if (r != 0) break;
        want[n++] = e;
    }
    long len = dgram_pack_end(&p);
    ENSURE((len < 0) == (n == 0), "empty pack");
    if (len > 0) {
        dgram_hdr g;
        const char *why;
        ENSURE(dgram_get_hdr(dg, (size_t)len, &g, &why) == 0, "own pack refused");
        ENSURE(g.nfrag == n && g.client == h.client && g.term == h.term && g.acked == h.acked,
               "pack header round trip");
        size_t pos = 0;
        dgram_entry e;
        for (unsigned i = 0; i < n; i++) {
            ENSURE(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)len - DGRAM_HDR_LEN, g.type, &pos,
                                   &e) == 1, "entry missing");
            ENSURE(e.req == want[i].req && e.type == want[i].type && e.frag == want[i].frag &&
                   e.shard == want[i].shard && e.len == want[i].len &&
                   (e.len == 0 || memcmp(e.payload, want[i].payload, e.len) == 0),
                   "entry round trip");
        }
        ENSURE(dgram_pack_next(dg + DGRAM_HDR_LEN, (size_t)len - DGRAM_HDR_LEN, g.type, &pos,
                               &e) == 0, "extra entry");
    }
    free(dg);
}

/* 3. fragments joined in a shuffled order with duplicates */
static void check_join(const uint8_t *data, size_t size) {
    size_t total = size;
    char *body = malloc(total ? total : 1);
    if (total) memcpy(body, data, total);
    if (rnd_below(16) == 0) {                  /* grow it: multi-fragment bodies */
        size_t big = rnd_below(DGRAM_REPLY_MAX + 1);
        body = realloc(body, big ? big : 1);
        for (size_t i = total; i < big; i++) body[i] = (char)(i * 7);
        total = big;
    }
    unsigned nfrag = dgram_reply_nfrag(total);
    ENSURE(nfrag >= 1 && nfrag <= DGRAM_MAX_FRAGS, "fragment count");
    unsigned *order = malloc(sizeof(unsigned) * nfrag);
    for (unsigned i = 0; i < nfrag; i++) order[i] = i;
    for (unsigned i = nfrag; i > 1; i--) {
        unsigned k = (unsigned)rnd_below(i), t = order[i - 1];
        order[i - 1] = order[k];
        order[k] = t;
    }
    dgram_hdr h = {0};
    h.client = rnd();
    h.req = rnd() | 1;
    dgram_join j;
    dgram_join_init(&j);
    unsigned char *dg = malloc(DGRAM_MTU);
    unsigned seen = 0;
    for (unsigned i = 0; i < nfrag; i++) {
        int dup = rnd_below(5) == 0 && i > 0;
        unsigned f = dup ? order[rnd_below(i)] : order[i];
        long n = dgram_put_reply(dg, &h, body, total, f);
        ENSURE(n >= DGRAM_HDR_LEN && n <= DGRAM_MTU, "fragment length");
        dgram_hdr g;
        const char *why;
        ENSURE(dgram_get_hdr(dg, (size_t)n, &g, &why) == 0, "own fragment refused");
        int r = dgram_join_add(&j, &g, dg + DGRAM_HDR_LEN, (size_t)n - DGRAM_HDR_LEN);
        if (!dup) seen++;
        ENSURE(r == (seen == nfrag), "join completion");
        if (dup) i--;                          /* the duplicate did not take a slot */
    }
    ENSURE(j.total == total && (total == 0 || memcmp(j.buf, body, total) == 0), "joined body");
    dgram_join_free(&j);
    free(dg);
    free(order);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = calloc(1, size ? size : 1);   /* exact size: ASan sees overreads */
    if (size) memcpy(copy, data, size);
    check_decode(copy, size);
    free(copy);
    rnd_state = seed_of(data, size);
    check_encode();
    check_pack();
    check_join(data, size);
    return 0;
}

#ifdef FUZZ_STANDALONE
static void builtin_seeds(void) {
    unsigned char dg[DGRAM_MTU];
    const char *argv[] = {"SET", "key", "value", ""};
    size_t argvlen[] = {3, 3, 5, 0};
    dgram_hdr h = {0};
    h.client = 0x1234;
    h.req = 3;
    h.acked = 2;
    h.shard = 0xffff;
    fuzz_pool_add(dg, (size_t)dgram_put_request(dg, &h, 4, argv, argvlen));
    fuzz_pool_add(dg, (size_t)dgram_put_request(dg, &h, 1, argv, argvlen));
    static char body[2 * DGRAM_PAYLOAD_MAX + 100];
    memset(body, '+', sizeof(body));
    fuzz_pool_add(dg, (size_t)dgram_put_reply(dg, &h, "+OK\r\n", 5, 0));
    fuzz_pool_add(dg, (size_t)dgram_put_reply(dg, &h, body, sizeof(body), 1));
    fuzz_pool_add(dg, (size_t)dgram_put_reply(dg, &h, body, sizeof(body), 2));
    fuzz_pool_add(dg, (size_t)dgram_put_reply(dg, &h, body, 0, 0));
    fuzz_pool_add(dg, (size_t)dgram_put_refuse(dg, &h, DGRAM_R_STALE, "STALE term"));
    fuzz_pool_add(dg, (size_t)dgram_put_refuse(dg, &h, DGRAM_R_BUSY, ""));
    /* packed frames: three requests; a reply, a refusal and an empty reply */
    unsigned char one[DGRAM_MTU];
    long rn = dgram_put_request(one, &h, 3, argv, argvlen);
    dgram_pack p;
    dgram_pack_begin(&p, dg, &h, DGRAM_PACKED_REQUESTS);
    for (uint64_t id = 3; id <= 5; id++) {
        dgram_entry e = {.req = id, .type = DGRAM_REQUEST, .shard = (uint16_t)id,
                         .len = (uint32_t)(rn - DGRAM_HDR_LEN), .payload = one + DGRAM_HDR_LEN};
        dgram_pack_add(&p, &e);
    }
    fuzz_pool_add(dg, (size_t)dgram_pack_end(&p));
    dgram_pack_begin(&p, dg, &h, DGRAM_PACKED_REPLIES);
    dgram_entry r1 = {.req = 3, .type = DGRAM_REPLY, .len = 5, .payload = (const unsigned char *)"+OK\r\n"};
    dgram_entry r2 = {.req = 4, .type = DGRAM_REFUSE, .frag = DGRAM_R_STALE, .len = 5,
                      .payload = (const unsigned char *)"STALE"};
    dgram_entry r3 = {.req = 5, .type = DGRAM_REPLY, .len = 0};
    dgram_pack_add(&p, &r1);
    dgram_pack_add(&p, &r2);
    dgram_pack_add(&p, &r3);
    fuzz_pool_add(dg, (size_t)dgram_pack_end(&p));
}

/* Field offsets and widths of the header, for field-aware mutations. */
static const struct { int off, width; } fields[] = {
    {0, 4}, {4, 1}, {5, 1}, {6, 2}, {8, 8}, {16, 8}, {24, 8}, {32, 8},
    {40, 2}, {42, 2}, {44, 4}, {48, 4},
};
static const uint64_t boundary[] = {
    0, 1, 2, 3, 4, 5, 0xff, 0x100, 0xffff, 0x10000, DGRAM_MAX_ARGS, DGRAM_MAX_ARGS + 1,
    DGRAM_PAYLOAD_MAX - 1, DGRAM_PAYLOAD_MAX, DGRAM_PAYLOAD_MAX + 1, DGRAM_MTU,
    DGRAM_REPLY_MAX, DGRAM_REPLY_MAX + 1, DGRAM_MAX_FRAGS, 0x7fffffff, 0x80000000u,
    0xffffffffu, 0xfffffffcu, UINT64_MAX,
};

static void put_n(uint8_t *p, int width, uint64_t v) {
    for (int i = 0; i < width; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void mutate_once(uint8_t *buf, size_t *n, size_t cap) {
    size_t len = *n, pos, k;
    switch (rnd_below(8)) {
    case 0:   /* flip a bit */
        if (len) buf[rnd_below(len)] ^= (uint8_t)(1u << rnd_below(8));
        break;
    case 1: { /* a header field to a boundary value */
        int f = (int)rnd_below(sizeof(fields) / sizeof(fields[0]));
        if ((size_t)(fields[f].off + fields[f].width) <= len)
            put_n(buf + fields[f].off, fields[f].width,
                  boundary[rnd_below(sizeof(boundary) / sizeof(boundary[0]))] + rnd_below(2));
        break;
    }
    case 2:   /* a u16 or u32 in the payload (argc, lengths) to a boundary value */
        if (len >= DGRAM_HDR_LEN + 4) {
            pos = DGRAM_HDR_LEN + rnd_below(len - DGRAM_HDR_LEN - 3);
            put_n(buf + pos, rnd_below(2) ? 2 : 4, boundary[rnd_below(sizeof(boundary) / sizeof(boundary[0]))]);
        }
        break;
    case 3:   /* truncate */
        *n = rnd_below(len + 1);
        break;
    case 4:   /* extend with random bytes */
        k = 1 + rnd_below(rnd_below(2) ? 4 : 300);
        if (len + k > cap) break;
        for (size_t i = 0; i < k; i++) buf[len + i] = (uint8_t)rnd();
        *n = len + k;
        break;
    case 5:   /* delete a range */
        fuzz_delete_range(buf, n);
        break;
    case 6:   /* splice: our prefix, another input's suffix */
        fuzz_splice(buf, n, cap);
        break;
    default:  /* set a random byte */
        if (len) buf[rnd_below(len)] = (uint8_t)rnd();
        break;
    }
}

int main(int argc, char **argv) {
    static const fuzz_target t = { .name = "fuzz-dgram", .max_len = DGRAM_MTU + 512,
                                   .seed = builtin_seeds, .mutate = mutate_once,
                                   .rnd_state = &rnd_state, .rnd_below = rnd_below };
    return fuzz_main(&t, argc, argv);
}
#endif
