/* test-core-tcp-blocks.c -- multi-block entries on a TCP byte stream
 * (src/repl/tcp_blocks.c, replication-msg-max), core objects only.
 *
 * A sender's stream (whole entries padded to their span, and entries over
 * the cap as vblock blocks, exactly as transport_tcp.c and the catch-up
 * stream write them) is fed to repl_rx_next in random slices, as recv
 * hands bytes over: every entry must come out once, in order, byte for
 * byte (zero padded to its span), and blocks never surface as entries.
 * Then each inconsistency must fail the stream before the damaged entry
 * comes out: a damaged, dropped or repeated block (the DEBUG
 * REPL-BLOCK-FAULT hooks), a block on a link that declared no cap, a block
 * or whole message over the cap, a whole entry while blocks are missing;
 * and a stream cut inside an entry's blocks hands over nothing of it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "log.h"
#include "transport.h"
#include "unit.h"
#include "vblock.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct stream {
    uint8_t *b;
    size_t len, cap;
} stream;

static void put(void *arg, const void *p, size_t n) {
    stream *s = arg;
    if (s->len + n > s->cap) {
        s->cap = (s->len + n) * 2;
        s->b = realloc(s->b, s->cap);
    }
    memcpy(s->b + s->len, p, n);
    s->len += n;
}

/* A valid LOG_SET entry with a value of vlen random bytes. */
static uint8_t *make_entry(size_t vlen, uint16_t shard, uint64_t ver, size_t *len) {
    char *val = malloc(vlen ? vlen : 1);
    for (size_t i = 0; i < vlen; i++) val[i] = (char)rnd();
    log_entry e = {.type = LOG_SET, .shard = shard, .ver = ver, .key = "key", .klen = 3,
                   .val = val, .vlen = (uint32_t)vlen};
    *len = log_entry_len(e.klen, e.vlen);
    uint8_t *out = malloc(*len);
    log_entry_encode(out, &e, 1);
    free(val);
    return out;
}

/* What a sender with cap msg_max writes for message msg. */
static void send_entry(stream *s, const uint8_t *entry, size_t len, uint64_t msg, uint32_t msg_max) {
    static const uint8_t zeros[LOG_ALIGN];
    size_t span = log_entry_span(len);
    if (msg_max && span > msg_max) {
        repl_send_blocks(entry, len, msg, msg_max, put, s);
    } else {
        put(s, entry, len);
        put(s, zeros, span - len);
    }
}

/* Feed s to a receiver in random slices. Returns the entries it handed
 * over before the stream ended or failed (*failed: it failed). Each must
 * equal want[i] padded with zeroes. */
static int receive(const stream *s, uint32_t msg_max, uint8_t **want, size_t *wlen, int nwant,
                   int *failed, char *why, size_t whylen) {
    repl_rx rx = {.msg_max = msg_max};
    uint8_t *buf = malloc(s->len + 1);
    size_t have = 0, pos = 0, fed = 0;
    int got = 0;
    *failed = 0;
    while (fed < s->len || pos < have) {
        if (fed < s->len) {   /* recv: 1 byte to 20 KB more */
            size_t n = 1 + rnd() % 20000;
            if (n > s->len - fed) n = s->len - fed;
            memcpy(buf + have, s->b + fed, n);
            have += n;
            fed += n;
        }
        for (;;) {
            const uint8_t *p;
            size_t span;
            long took = repl_rx_next(&rx, buf + pos, have - pos, (uint64_t)got + 1, &p, &span,
                                     why, whylen);
            if (took < 0) {
                *failed = 1;
                goto out;
            }
            if (took == 0) break;
            pos += (size_t)took;
            if (!p) continue;
            int ok = got < nwant && span == log_entry_span(wlen[got]) &&
                     !memcmp(p, want[got], wlen[got]);
            for (size_t i = got < nwant ? wlen[got] : span; ok && i < span; i++) ok = !p[i];
            CHECK(ok);
            repl_rx_taken(&rx);
            got++;
        }
        if (fed == s->len) break;
    }
out:
    repl_rx_taken(&rx);   /* a partial entry is dropped */
    free(buf);
    return got;
}

static void test_roundtrip(uint32_t msg_max) {
    enum { N = 60 };
    uint8_t *e[N];
    size_t len[N];
    stream s = {0};
    repl_block_stats before, after;
    repl_block_stats_get(&before);
    int blocked = 0;
    for (int i = 0; i < N; i++) {
        /* small entries, ones around the cap, and large ones (to 1 MB) */
        size_t v = i % 3 == 0 ? rnd() % 200 : i % 3 == 1 ? msg_max - 128 + rnd() % 256
                                                        : rnd() % (1u << 20);
        e[i] = make_entry(v, (uint16_t)(i % 7), 100 + (uint64_t)i, &len[i]);
        blocked += log_entry_span(len[i]) > msg_max;
        send_entry(&s, e[i], len[i], (uint64_t)i + 1, msg_max);
    }
    CHECK(blocked > N / 3);
    char why[256] = "";
    int failed;
    int got = receive(&s, msg_max, e, len, N, &failed, why, sizeof(why));
    CHECK_EQ_LL(got, N);
    CHECK(!failed);
    if (failed) fprintf(stderr, "stream failed: %s\n", why);
    repl_block_stats_get(&after);
    CHECK_EQ_LL(after.entries_sent - before.entries_sent, blocked);
    CHECK_EQ_LL(after.entries_received - before.entries_received, blocked);
    CHECK_EQ_LL(after.sent, after.received);
    CHECK_EQ_LL(after.errors, before.errors);
    /* the same stream on a link that declared no cap: its first block fails it */
    got = receive(&s, 0, e, len, N, &failed, why, sizeof(why));
    CHECK(failed && strstr(why, "no message cap"));
    /* ... and with a smaller cap than the sender's: a block too large */
    got = receive(&s, msg_max - 64, e, len, N, &failed, why, sizeof(why));
    CHECK(failed);
    for (int i = 0; i < N; i++) free(e[i]);
    free(s.b);
}

/* Entries 1 and 2 large (blocks), 3 small; a fault armed before entry 2
 * hits its block 1. Returns the entries handed over; why says the failure. */
static int faulted(int kind, int small_next, int *failed, char *why, size_t whylen) {
    const uint32_t mm = 1024;
    size_t len[3];
    uint8_t *e[3];
    e[0] = make_entry(5000, 1, 10, &len[0]);
    e[1] = make_entry(7000, 1, 11, &len[1]);
    e[2] = make_entry(small_next ? 10 : 3000, 1, 12, &len[2]);
    stream s = {0};
    send_entry(&s, e[0], len[0], 1, mm);
    repl_block_fault_arm(kind);
    send_entry(&s, e[1], len[1], 2, mm);
    send_entry(&s, e[2], len[2], 3, mm);
    repl_block_fault_arm(REPL_BLOCK_FAULT_NONE);
    int got = receive(&s, mm, e, len, 3, failed, why, whylen);
    for (int i = 0; i < 3; i++) free(e[i]);
    free(s.b);
    return got;
}

static void test_faults(void) {
    char why[256];
    int failed;
    repl_block_stats before, after;
    repl_block_stats_get(&before);
    /* a damaged block: its checksum */
    CHECK_EQ_LL(faulted(REPL_BLOCK_FAULT_CORRUPT, 0, &failed, why, sizeof(why)), 1);
    CHECK(failed && strstr(why, "checksum"));
    /* a repeated block */
    CHECK_EQ_LL(faulted(REPL_BLOCK_FAULT_DUP, 0, &failed, why, sizeof(why)), 1);
    CHECK(failed && strstr(why, "duplicate"));
    /* a lost block: found when the next entry's blocks come, or a whole
     * entry; entry 2 never comes out */
    CHECK_EQ_LL(faulted(REPL_BLOCK_FAULT_DROP, 0, &failed, why, sizeof(why)), 1);
    CHECK(failed && strstr(why, "message 3"));
    CHECK_EQ_LL(faulted(REPL_BLOCK_FAULT_DROP, 1, &failed, why, sizeof(why)), 1);
    CHECK(failed && strstr(why, "whole message"));
    /* a fault is used once */
    CHECK_EQ_LL(faulted(REPL_BLOCK_FAULT_NONE, 0, &failed, why, sizeof(why)), 3);
    CHECK(!failed);
    repl_block_stats_get(&after);
    CHECK_EQ_LL(after.errors - before.errors, 4);
}

static void test_limits(void) {
    char why[256];
    int failed;
    size_t len;
    /* a whole message over the link's cap */
    uint8_t *e = make_entry(3000, 1, 1, &len);
    stream s = {0};
    send_entry(&s, e, len, 1, 0);   /* an uncapped sender */
    CHECK_EQ_LL(receive(&s, 1024, &e, &len, 1, &failed, why, sizeof(why)), 0);
    CHECK(failed && strstr(why, "at most 1024"));
    /* cut inside an entry's blocks: nothing of it comes out, no failure
     * (the link simply ended; receive frees the partial entry) */
    s.len = 0;
    send_entry(&s, e, len, 1, 1024);
    s.len -= 100;
    CHECK_EQ_LL(receive(&s, 1024, &e, &len, 1, &failed, why, sizeof(why)), 0);
    CHECK(!failed);
    /* a block of a message out of step (the link's next is 1) */
    s.len = 0;
    send_entry(&s, e, len, 2, 1024);
    CHECK_EQ_LL(receive(&s, 1024, &e, &len, 1, &failed, why, sizeof(why)), 0);
    CHECK(failed && strstr(why, "message 1 was due"));
    free(e);
    free(s.b);
}

int main(void) {
    test_roundtrip(1024);
    test_roundtrip(4096);
    test_roundtrip(65536);
    test_faults();
    test_limits();
    return UNIT_DONE("test-core-tcp-blocks");
}
