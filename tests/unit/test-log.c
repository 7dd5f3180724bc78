/* test-log.c -- unit tests for the storage layer below the index: CRC32C,
 * key hashing, log entry encode/check, group iteration, the pool and log
 * writers.
 *
 * The pool and writer tests run twice: on a file in /tmp (not pmem, so
 * msync) and, in a forked child, on a file in /dev/shm with
 * PMEM_IS_PMEM_FORCE=1. libpmem decides pmem-ness once per process, on first
 * use, so the child sets the variable before touching libpmem and reports its
 * pass/fail counts back through a pipe. */
#include "crc32c.h"
#include "hash.h"
#include "log.h"
#include "pool.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- deterministic PRNG (xorshift64*) ---- */
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static void rnd_fill(void *buf, size_t n) {
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* ================= CRC32C ================= */

static void test_crc_vectors(void) {
    const char *s = "123456789";
    CHECK_EQ_LL(crc32c(0, s, 9), 0xE3069283u);
    CHECK_EQ_LL(crc32c_sw(0, s, 9), 0xE3069283u);
    if (crc32c_hw_available())
        CHECK_EQ_LL(crc32c_hw(0, s, 9), 0xE3069283u);
    else
        printf("test-log: no SSE4.2, hardware CRC path not tested\n");
    CHECK_EQ_LL(crc32c(0, s, 0), 0);

    /* iSCSI (RFC 3720 B.4) vectors */
    uint8_t buf[32];
    memset(buf, 0, 32);
    CHECK_EQ_LL(crc32c(0, buf, 32), 0x8A9136AAu);
    CHECK_EQ_LL(crc32c_sw(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    CHECK_EQ_LL(crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CHECK_EQ_LL(crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CHECK_EQ_LL(crc32c(0, buf, 32), 0x113FDB5Cu);
}

static void test_crc_hw_vs_sw(void) {
    enum { MAX = 5000 };
    uint8_t *buf = malloc(MAX + 8);
    int hw = crc32c_hw_available();
    int bad_hw = 0, bad_chain = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t off = rnd() % 8, len = rnd() % MAX;
        uint32_t init = iter % 3 ? (uint32_t)rnd() : 0;
        rnd_fill(buf, MAX + 8);
        uint32_t sw = crc32c_sw(init, buf + off, len);
        if (hw && crc32c_hw(init, buf + off, len) != sw)
            bad_hw++;
        if (crc32c(init, buf + off, len) != sw)
            bad_hw++;
        size_t cut = len ? rnd() % len : 0;
        if (crc32c(crc32c(init, buf + off, cut), buf + off + cut, len - cut) != sw)
            bad_chain++;
    }
    CHECK_EQ_LL(bad_hw, 0);
    CHECK_EQ_LL(bad_chain, 0);
    free(buf);
}

/* ================= hashing ================= */

static unsigned slot_of(const char *s) { return hash_slot(s, strlen(s)); }

static void test_hash_slot(void) {
    CHECK_EQ_LL(crc16_xmodem("123456789", 9), 0x31C3);
    CHECK_EQ_LL(slot_of("123456789"), 0x31C3);
    CHECK_EQ_LL(slot_of("foo"), 12182);
    CHECK_EQ_LL(slot_of(""), 0);
    CHECK_EQ_LL(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    CHECK_EQ_LL(slot_of("{user1000}.following"), slot_of("user1000"));
    CHECK_EQ_LL(slot_of("foo{}{bar}"), crc16_xmodem("foo{}{bar}", 10) & 16383);
    CHECK_EQ_LL(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    CHECK_EQ_LL(slot_of("foo{bar}{zap}"), slot_of("bar"));
    CHECK_EQ_LL(slot_of("{"), crc16_xmodem("{", 1) & 16383);
    CHECK_EQ_LL(slot_of("abc{def"), crc16_xmodem("abc{def", 7) & 16383);
    CHECK_EQ_LL(slot_of("}{a}"), slot_of("a"));
    CHECK_EQ_LL(hash_slot("x{a}y", 3), crc16_xmodem("x{a", 3) & 16383); /* length bound */
    /* the table-driven CRC (8 bytes at a time) against the bit-by-bit
     * definition, over every length up to five 8-byte steps and a tail */
    unsigned char k[45];
    for (size_t n = 0; n <= sizeof k; n++) {
        uint16_t want = 0;
        for (size_t i = 0; i < n; i++) {
            k[i] = (unsigned char)(i * 37 + n * 11 + 0x5a);
            want ^= (uint16_t)(k[i] << 8);
            for (int b = 0; b < 8; b++)
                want = (want & 0x8000) ? (uint16_t)((want << 1) ^ 0x1021) : (uint16_t)(want << 1);
        }
        CHECK_EQ_LL(crc16_xmodem(k, n), want);
    }
}

/* Chi-square statistic of n samples over k cells. */
static double chi2(const unsigned *cells, unsigned k, unsigned n) {
    double e = (double)n / k, s = 0;
    for (unsigned i = 0; i < k; i++)
        s += (cells[i] - e) * (cells[i] - e) / e;
    return s;
}

static void test_hash_key(void) {
    /* Pinned values: recovery recomputes hashes, and a silent change of the
     * function would still be caught here. */
    uint64_t h1 = hash_key(0, "foo", 3);
    CHECK(h1 == hash_key(0, "foo", 3));
    CHECK(h1 == 0xca0d862e322ebaf1ULL);
    CHECK(hash_key(3, "hello world, rowan", 18) == 0xfa46da3160d7b6a2ULL);
    CHECK(hash_key(0, "foo", 3) != hash_key(1, "foo", 3));
    CHECK(hash_key(0, "a", 1) != hash_key(0, "a\0", 2));
    CHECK(hash_key(0, "", 0) != hash_key(0, "\0", 1));
    CHECK(hash_key(0, "", 0) != hash_key(1, "", 0));

    /* Avalanche: flipping any input bit flips each output bit about half of
     * the time. */
    enum { KEYLEN = 20, SAMPLES = 400 };
    static unsigned flips[64];
    memset(flips, 0, sizeof flips);
    unsigned trials = 0;
    char key[KEYLEN];
    for (int s = 0; s < SAMPLES; s++) {
        rnd_fill(key, KEYLEN);
        uint64_t base = hash_key(5, key, KEYLEN);
        for (int bit = 0; bit < KEYLEN * 8; bit++) {
            key[bit / 8] ^= (char)(1 << (bit % 8));
            uint64_t d = base ^ hash_key(5, key, KEYLEN);
            key[bit / 8] ^= (char)(1 << (bit % 8));
            for (int o = 0; o < 64; o++)
                flips[o] += (unsigned)(d >> o & 1);
            trials++;
        }
    }
    double worst = 0;
    for (int o = 0; o < 64; o++) {
        double r = (double)flips[o] / trials;
        double dev = r > 0.5 ? r - 0.5 : 0.5 - r;
        if (dev > worst)
            worst = dev;
    }
    CHECK(worst < 0.02);

    /* Sequential keys spread evenly over low bits (buckets) and top bits
     * (tags). 1023 degrees of freedom: mean 1023, sd ~45. */
    enum { N = 200000, K = 1024 };
    static unsigned lo[K], hi[K];
    memset(lo, 0, sizeof lo);
    memset(hi, 0, sizeof hi);
    for (int i = 0; i < N; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "key:%d", i);
        uint64_t h = hash_key(0, k, (size_t)n);
        lo[h & (K - 1)]++;
        hi[h >> 54]++;
    }
    double c_lo = chi2(lo, K, N), c_hi = chi2(hi, K, N);
    CHECK(c_lo < 1250);
    CHECK(c_hi < 1250);
    printf("test-log: hash_key avalanche worst bias %.4f, chi2 low %.0f high %.0f (dof 1023)\n",
           worst, c_lo, c_hi);
}

/* ================= entries ================= */

static log_entry mk_entry(uint8_t type, const char *key, size_t klen, const char *val, size_t vlen) {
    log_entry e;
    memset(&e, 0, sizeof e);
    e.type = type;
    e.flags = 0x5a;
    e.shard = 1234;
    e.db = 7;
    e.ver = 0x0000123456789abcULL;
    e.expire_ms = 1700000000123LL;
    e.aux = 0xfeedfacecafebeefULL;
    e.key = key;
    e.klen = (uint32_t)klen;
    e.val = val;
    e.vlen = (uint32_t)vlen;
    return e;
}

static int same_entry(const log_entry *a, const log_entry *b) {
    return a->type == b->type && a->flags == b->flags && a->shard == b->shard &&
           a->db == b->db && a->ver == b->ver && a->expire_ms == b->expire_ms &&
           a->aux == b->aux && a->klen == b->klen && a->vlen == b->vlen &&
           (!a->klen || memcmp(a->key, b->key, a->klen) == 0) &&
           (!a->vlen || memcmp(a->val, b->val, a->vlen) == 0);
}

static void test_entry_roundtrip(void) {
    size_t vlens[] = {0, 1, 7, 24, 63, 64, 1000, 100000};
    for (size_t i = 0; i < sizeof vlens / sizeof vlens[0]; i++) {
        char *val = malloc(vlens[i] + 1);
        rnd_fill(val, vlens[i]);
        log_entry e = mk_entry(LOG_SET, "some-key", 8, val, vlens[i]);
        size_t len = log_entry_len(e.klen, e.vlen);
        size_t span = log_entry_span(len);
        CHECK(span % LOG_ALIGN == 0 && span >= len && span < len + LOG_ALIGN);
        uint8_t *buf = calloc(1, span);
        CHECK_EQ_LL(log_entry_encode(buf, &e, 1), len);
        CHECK(memcmp(buf, "\0\0\0\0\0\0\0\0", 8) != 0);
        log_entry d;
        CHECK_EQ_LL(log_entry_check(buf, len, &d), len);
        CHECK(same_entry(&e, &d));
        CHECK_EQ_LL(log_entry_check(buf, span, &d), len);
        log_entry d2;
        log_entry_decode(buf, &d2);
        CHECK(same_entry(&e, &d2));
        free(buf);
        free(val);
    }
    /* version is masked to 48 bits, db is kept apart from it */
    log_entry e = mk_entry(LOG_DEL, "k", 1, NULL, 0);
    e.ver = ~0ULL;
    e.db = 0xffff;
    e.expire_ms = -5;
    uint8_t buf[64] = {0};
    log_entry_encode(buf, &e, 1);
    log_entry d;
    CHECK(log_entry_check(buf, sizeof buf, &d) > 0);
    CHECK(d.ver == LOG_VER_MASK && d.db == 0xffff && d.expire_ms == -5);
    /* without crc (sub-entries): crc field is zero and check rejects it */
    log_entry_encode(buf, &e, 0);
    CHECK(buf[0] == 0 && buf[1] == 0 && buf[2] == 0 && buf[3] == 0);
    CHECK_EQ_LL(log_entry_check(buf, sizeof buf, &d), 0);
}

static void test_entry_corruption(void) {
    char val[30];
    rnd_fill(val, sizeof val);
    log_entry e = mk_entry(LOG_SET, "hello", 5, val, sizeof val);
    size_t len = log_entry_len(5, sizeof val), span = log_entry_span(len);
    uint8_t good[128] = {0};
    log_entry_encode(good, &e, 1);
    log_entry d;

    /* every single-byte flip, checked with exact and padded availability */
    const uint8_t masks[] = {0x01, 0x10, 0x80, 0xff};
    int accepted = 0;
    for (size_t pos = 0; pos < len; pos++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            uint8_t bad[128];
            memcpy(bad, good, sizeof bad);
            bad[pos] ^= masks[m];
            uint8_t *exact = malloc(len);
            memcpy(exact, bad, len);
            if (log_entry_check(exact, len, &d))
                accepted++;
            if (log_entry_check(bad, span, &d))
                accepted++;
            free(exact);
        }
    }
    CHECK_EQ_LL(accepted, 0);

    /* every truncation, in exactly-sized heap buffers (ASan catches reads
     * past avail) */
    int trunc_ok = 0;
    for (size_t avail = 0; avail < len; avail++) {
        uint8_t *b = malloc(avail ? avail : 1);
        memcpy(b, good, avail);
        if (log_entry_check(b, avail, &d))
            trunc_ok++;
        free(b);
    }
    CHECK_EQ_LL(trunc_ok, 0);

    /* zeroed memory is never an entry */
    uint8_t zero[256] = {0};
    CHECK_EQ_LL(log_entry_check(zero, sizeof zero, &d), 0);

    /* bad types, even with a valid crc */
    for (int t = 0; t < 256; t++) {
        uint8_t b[128];
        memcpy(b, good, sizeof b);
        b[4] = (uint8_t)t;
        uint32_t c = crc32c(0, b + 4, len - 4);
        memcpy(b, &c, 4);
        size_t r = log_entry_check(b, sizeof b, &d);
        if (t == 0 || t >= LOG_TYPE_MAX)
            CHECK_EQ_LL(r, 0);
        else
            CHECK_EQ_LL(r, len);
    }

    /* lengths that overflow 32 bits or pass LOG_MAX_ENTRY: rejected from the
     * header alone (avail claims more than the buffer, which must not be
     * read) */
    uint8_t h[64];
    memcpy(h, good, sizeof h);
    memset(h + 16, 0xff, 8); /* klen = vlen = 0xffffffff */
    CHECK_EQ_LL(log_entry_check(h, SIZE_MAX, &d), 0);
    memcpy(h, good, sizeof h);
    uint32_t big = LOG_MAX_ENTRY - LOG_HDR_SIZE + 1;
    memcpy(h + 16, "\0\0\0\0", 4);
    memcpy(h + 20, &big, 4);
    CHECK_EQ_LL(log_entry_check(h, SIZE_MAX, &d), 0);

    /* the largest allowed entry is accepted */
    size_t maxv = LOG_MAX_ENTRY - LOG_HDR_SIZE;
    char *bigval = calloc(1, maxv);
    uint8_t *bb = malloc(LOG_MAX_ENTRY);
    log_entry be = mk_entry(LOG_SET, NULL, 0, bigval, maxv);
    CHECK_EQ_LL(log_entry_encode(bb, &be, 1), LOG_MAX_ENTRY);
    CHECK_EQ_LL(log_entry_check(bb, LOG_MAX_ENTRY, &d), LOG_MAX_ENTRY);
    CHECK_EQ_LL(log_entry_check(bb, LOG_MAX_ENTRY - 1, &d), 0);
    free(bb);
    free(bigval);
}

/* ================= groups ================= */

/* Build a group of n sub-entries into buf; returns the group's total len. */
static size_t build_group(uint8_t *buf, size_t cap, int n, uint64_t aux_override, size_t *payload_len) {
    uint8_t payload[8192];
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        char key[16], val[300];
        int kl = snprintf(key, sizeof key, "key-%d", i);
        size_t vl = (size_t)(i * 37) % 257;
        memset(val, 'a' + i, vl);
        log_entry s = mk_entry(i % 2 ? LOG_DEL : LOG_SET, key, (size_t)kl, val, i % 2 ? 0 : vl);
        s.shard = (uint16_t)(100 + i);
        s.ver = 1000 + (uint64_t)i;
        size_t l = log_entry_encode(payload + off, &s, 0);
        off += l;
        while (off % LOG_SUB_ALIGN)
            payload[off++] = 0;
    }
    log_entry g = mk_entry(LOG_GROUP, NULL, 0, (const char *)payload, off);
    g.shard = LOG_SHARD_NONE;
    g.ver = 0;
    g.aux = aux_override != UINT64_MAX ? aux_override : (uint64_t)n;
    size_t len = log_entry_len(0, off);
    CHECK(len <= cap);
    memset(buf, 0, cap);
    log_entry_encode(buf, &g, 1);
    if (payload_len)
        *payload_len = off;
    return len;
}

static int count_subs(const log_entry *g) {
    size_t pos = 0, so;
    log_entry sub;
    int n = 0;
    while (log_group_next(g, &pos, &sub, &so))
        n++;
    return n;
}

static void test_groups(void) {
    static uint8_t buf[16384];
    size_t len = build_group(buf, sizeof buf, 5, UINT64_MAX, NULL);
    log_entry g;
    CHECK_EQ_LL(log_entry_check(buf, len, &g), len);
    CHECK_EQ_LL(g.type, LOG_GROUP);
    size_t pos = 0, so;
    log_entry sub;
    int n = 0;
    while (log_group_next(&g, &pos, &sub, &so)) {
        char key[16];
        int kl = snprintf(key, sizeof key, "key-%d", n);
        CHECK_EQ_LL(sub.klen, kl);
        CHECK(memcmp(sub.key, key, (size_t)kl) == 0);
        CHECK_EQ_LL(sub.shard, 100 + n);
        CHECK_EQ_LL(sub.ver, 1000 + n);
        CHECK_EQ_LL(sub.type, n % 2 ? LOG_DEL : LOG_SET);
        CHECK_EQ_LL(so % LOG_SUB_ALIGN, 0);
        log_entry again;
        log_entry_decode(buf + so, &again);
        CHECK(same_entry(&sub, &again));
        n++;
    }
    CHECK_EQ_LL(n, 5);
    CHECK_EQ_LL(log_group_next(&g, &pos, &sub, &so), 0); /* stays at the end */

    /* empty group: valid, nothing to iterate */
    len = build_group(buf, sizeof buf, 0, UINT64_MAX, NULL);
    CHECK_EQ_LL(log_entry_check(buf, len, &g), len);
    CHECK_EQ_LL(count_subs(&g), 0);

    /* aux says more or fewer sub-entries than there are: malformed, nothing
     * at all is yielded */
    len = build_group(buf, sizeof buf, 3, 4, NULL);
    log_entry_check(buf, len, &g);
    CHECK_EQ_LL(count_subs(&g), 0);
    len = build_group(buf, sizeof buf, 3, 2, NULL);
    log_entry_check(buf, len, &g);
    CHECK_EQ_LL(count_subs(&g), 0);
    len = build_group(buf, sizeof buf, 3, 1ULL << 40, NULL);
    log_entry_check(buf, len, &g);
    CHECK_EQ_LL(count_subs(&g), 0);

    /* malformed sub-entries (checked on the decoded view: the group's own
     * crc is not what protects against writer bugs) */
    size_t plen;
    len = build_group(buf, sizeof buf, 3, UINT64_MAX, &plen);
    uint8_t *payload = buf + LOG_HDR_SIZE;
    struct { size_t at; uint8_t v; } bad[] = {
        {0, 1},      /* crc byte of sub 0 nonzero */
        {4, 0},      /* sub 0 type 0 */
        {4, LOG_GROUP}, /* nested group */
        {4, LOG_TYPE_MAX},
        {19, 0xff},  /* sub 0 klen huge */
        {23, 0x7f},  /* sub 0 vlen huge */
        {16, 0xff},  /* sub 0 klen grows: misaligns the next sub */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *copy = malloc(plen);
        memcpy(copy, payload, plen);
        copy[bad[i].at] = bad[i].v;
        log_entry_decode(buf, &g);
        g.val = (const char *)copy;
        CHECK_EQ_LL(count_subs(&g), 0);
        free(copy);
    }
    /* not a group at all */
    log_entry_decode(buf, &g);
    g.type = LOG_SET;
    CHECK_EQ_LL(count_subs(&g), 0);
    /* payload shorter than claimed by the sub-entries */
    log_entry_decode(buf, &g);
    g.vlen -= 9;
    uint8_t *shortp = malloc(g.vlen);
    memcpy(shortp, payload, g.vlen);
    g.val = (const char *)shortp;
    CHECK_EQ_LL(count_subs(&g), 0);
    free(shortp);

    /* fuzz: random damage to the payload never makes the iterator read out
     * of bounds, and what it yields lies inside the payload */
    int out_of_bounds = 0, partial = 0;
    for (int iter = 0; iter < 20000; iter++) {
        int nsubs = (int)(rnd() % 6);
        len = build_group(buf, sizeof buf, nsubs, UINT64_MAX, &plen);
        size_t cut = rnd() % 4 == 0 ? rnd() % (plen + 1) : plen;
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, payload, cut);
        int flips = (int)(rnd() % 4);
        for (int f = 0; f < flips && cut; f++)
            copy[rnd() % cut] ^= (uint8_t)(1u << (rnd() % 8));
        log_entry_decode(buf, &g);
        g.val = (const char *)copy;
        g.vlen = (uint32_t)cut;
        if (rnd() % 8 == 0)
            g.aux = rnd() % 8;
        pos = 0;
        int got = 0;
        while (log_group_next(&g, &pos, &sub, &so)) {
            got++;
            if (so < LOG_HDR_SIZE || so + LOG_HDR_SIZE + sub.klen + sub.vlen > LOG_HDR_SIZE + cut)
                out_of_bounds++;
        }
        if (got && (uint64_t)got != g.aux)
            partial++;
        free(copy);
    }
    CHECK_EQ_LL(out_of_bounds, 0);
    CHECK_EQ_LL(partial, 0);
}

/* ================= pool and writers ================= */

static const char *mode_name = "file";
static int mode_pmem;

static char *tmpdir_make(const char *parent) {
    char *d = malloc(256);
    snprintf(d, 256, "%s/rowan-test-log-XXXXXX", parent);
    if (!mkdtemp(d)) {
        fprintf(stderr, "mkdtemp %s: %s\n", d, strerror(errno));
        exit(2);
    }
    return d;
}

static void path_in(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

#define NDATA 12
#define POOL_BYTES ((uint64_t)(NDATA + 1) * POOL_SEG_SIZE)

static void test_pool_open_errors(const char *dir) {
    char path[512], err[256];
    /* too small: nothing created */
    path_in(path, sizeof path, dir, "small");
    err[0] = 0;
    CHECK(pool_open(path, 4ull * POOL_SEG_SIZE, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "at least"));
    struct stat st;
    CHECK(stat(path, &st) != 0);

    /* an empty file (mkstemp) is not a pool */
    snprintf(path, sizeof path, "%s/empty-XXXXXX", dir);
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(pool_open(path, POOL_BYTES, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "not a Rowan pool"));
    unlink(path);

    /* a big file of junk: bad magic */
    path_in(path, sizeof path, dir, "junk");
    fd = open(path, O_RDWR | O_CREAT, 0600);
    CHECK(ftruncate(fd, 6ll * POOL_SEG_SIZE) == 0);
    CHECK(pwrite(fd, "garbage!", 8, 0) == 8);
    close(fd);
    CHECK(pool_open(path, POOL_BYTES, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "bad magic"));
    unlink(path);

    /* a real pool, damaged in various ways */
    path_in(path, sizeof path, dir, "damaged");
    pool *p = pool_open(path, 6ull * POOL_SEG_SIZE, 0, err, sizeof err);
    CHECK(p != NULL);
    /* opened twice: refused */
    char err2[256];
    CHECK(pool_open(path, 0, 0, err2, sizeof err2) == NULL);
    CHECK(contains(err2, "in use"));
    pool_close(p);
    uint32_t v = 99;
    fd = open(path, O_RDWR);
    CHECK(pwrite(fd, &v, 4, 8) == 4); /* version */
    close(fd);
    CHECK(pool_open(path, 0, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "version"));
    v = POOL_VERSION;
    fd = open(path, O_RDWR);
    CHECK(pwrite(fd, &v, 4, 8) == 4);
    v = 77;
    CHECK(pwrite(fd, &v, 4, 32) == 4); /* nsegs */
    close(fd);
    CHECK(pool_open(path, 0, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "checksum"));
    unlink(path);

    /* a valid pool whose file was extended */
    p = pool_open(path, 6ull * POOL_SEG_SIZE, 0, err, sizeof err);
    CHECK(p != NULL);
    pool_close(p);
    CHECK(truncate(path, 7ll * POOL_SEG_SIZE) == 0);
    CHECK(pool_open(path, 0, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "size"));
    unlink(path);

    /* a segment meta entry with an impossible state */
    p = pool_open(path, 6ull * POOL_SEG_SIZE, 0, err, sizeof err);
    pool_close(p);
    uint8_t bogus = 9;
    fd = open(path, O_RDWR);
    CHECK(pwrite(fd, &bogus, 1, 4096 + 16 * 2) == 1);
    close(fd);
    CHECK(pool_open(path, 0, 0, err, sizeof err) == NULL);
    CHECK(contains(err, "segment 2"));
    unlink(path);
}

static void test_pool_basic(const char *dir) {
    char path[512], err[256];
    path_in(path, sizeof path, dir, "pool");
    pool *p = pool_open(path, POOL_BYTES + 12345, 0, err, sizeof err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "pool_open: %s\n", err);
        return;
    }
    CHECK_EQ_LL(pool_is_pmem(p), mode_pmem);
    CHECK_EQ_LL(pool_size(p), POOL_BYTES);
    CHECK_EQ_LL(pool_nsegs(p), NDATA);
    CHECK_EQ_LL(pool_free_count(p), NDATA);
    for (uint32_t s = 0; s < NDATA; s++) {
        uint64_t off = pool_seg_offset(p, s);
        CHECK(off > 0 && off % POOL_SEG_SIZE == 0);
        CHECK(off + POOL_SEG_SIZE <= pool_size(p));
        CHECK_EQ_LL(pool_seg_of(p, off), s);
        CHECK_EQ_LL(pool_seg_of(p, off + POOL_SEG_SIZE - 1), s);
        CHECK_EQ_LL(pool_seg_meta(p, s).state, SEG_FREE);
    }

    /* allocate a few; states and owners stick */
    uint64_t seq0 = pool_seq_now(p);
    CHECK(seq0 >= 1);
    int a = pool_seg_alloc(p, OWNER_WORKER, 3, 0);
    int b = pool_seg_alloc(p, OWNER_CONTROL, 0, 0);
    int c = pool_seg_alloc(p, OWNER_CLEAN, 7, 0);
    int d = pool_seg_alloc(p, OWNER_WORKER, 1, 0);
    CHECK(a >= 0 && b >= 0 && c >= 0 && d >= 0);
    CHECK(a != b && b != c && c != d && a != d);
    struct seg_meta ma = pool_seg_meta(p, (uint32_t)a), mb = pool_seg_meta(p, (uint32_t)b);
    struct seg_meta mc = pool_seg_meta(p, (uint32_t)c);
    CHECK(ma.state == SEG_USING && ma.owner == OWNER_WORKER && ma.owner_id == 3);
    CHECK(mb.owner == OWNER_CONTROL && mc.owner == OWNER_CLEAN && mc.owner_id == 7);
    CHECK(ma.seq >= seq0 && mb.seq > ma.seq && mc.seq > mb.seq);
    CHECK(pool_seq_now(p) > mc.seq);
    CHECK_EQ_LL(pool_free_count(p), NDATA - 4);
    pool_seg_set_state(p, (uint32_t)a, SEG_USED);
    pool_seg_set_state(p, (uint32_t)b, SEG_COMMITTED);
    CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)a).state, SEG_USED);
    CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)a).owner_id, 3);

    /* live bytes */
    pool_live_add(p, (uint32_t)a, 1000);
    pool_live_add(p, (uint32_t)a, -300);
    CHECK_EQ_LL(pool_live_get(p, (uint32_t)a), 700);
    pool_live_add(p, (uint32_t)d, 55);

    /* a freed segment reads back zero and is free again */
    uint8_t *dd = pool_ptr(p, pool_seg_offset(p, (uint32_t)d));
    memset(dd, 0xab, POOL_SEG_SIZE);
    pool_persist(p, dd, POOL_SEG_SIZE);
    pool_seg_free(p, (uint32_t)d);
    CHECK(all_zero(dd, POOL_SEG_SIZE));
    CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)d).state, SEG_FREE);
    CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)d).seq, 0);
    CHECK_EQ_LL(pool_live_get(p, (uint32_t)d), 0);
    CHECK_EQ_LL(pool_free_count(p), NDATA - 3);

    /* pool_write */
    uint8_t *da = pool_ptr(p, pool_seg_offset(p, (uint32_t)a));
    pool_write(p, da + 64, "durable bytes", 13);
    pool_persist(p, da + 64, 13);
    CHECK(memcmp(da + 64, "durable bytes", 13) == 0);

    /* keep_free */
    uint32_t nf = pool_free_count(p);
    CHECK_EQ_LL(pool_seg_alloc(p, OWNER_WORKER, 0, nf), -1);
    CHECK_EQ_LL(pool_free_count(p), nf);

    uint64_t max_seq = pool_seq_now(p);
    pool_close(p);

    /* reopen: meta kept, freed segment still zero, seq keeps rising */
    for (int round = 0; round < 3; round++) {
        p = pool_open(path, 0, 0, err, sizeof err);
        CHECK(p != NULL);
        if (!p)
            return;
        struct seg_meta ra = pool_seg_meta(p, (uint32_t)a);
        CHECK(ra.state == SEG_USED && ra.owner == OWNER_WORKER && ra.owner_id == 3 && ra.seq == ma.seq);
        CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)b).state, SEG_COMMITTED);
        CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)b).seq, mb.seq);
        CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)c).state, SEG_USING);
        CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)c).seq, mc.seq);
        CHECK_EQ_LL(pool_seg_meta(p, (uint32_t)d).state, SEG_FREE);
        CHECK(all_zero(pool_ptr(p, pool_seg_offset(p, (uint32_t)d)), POOL_SEG_SIZE));
        CHECK(memcmp((uint8_t *)pool_ptr(p, pool_seg_offset(p, (uint32_t)a)) + 64, "durable bytes", 13) == 0);
        CHECK(pool_seq_now(p) >= max_seq);
        int e = pool_seg_alloc(p, OWNER_WORKER, 9, 0);
        CHECK(e >= 0);
        uint64_t es = pool_seg_meta(p, (uint32_t)e).seq;
        CHECK(es >= max_seq);
        pool_seg_free(p, (uint32_t)e);
        max_seq = pool_seq_now(p);
        pool_close(p);
    }

    /* many alloc/free cycles cross several seq leases; seq stays strictly
     * increasing within and across opens. Freeing zeroes and syncs 4 MiB,
     * so on a disk-backed /tmp keep the count low. */
    int cycles = mode_pmem ? 2100 : 40;
    p = pool_open(path, 0, 0, err, sizeof err);
    uint64_t last = 0;
    int mono = 1;
    for (int i = 0; i < cycles; i++) {
        if (i == cycles / 2) {
            pool_close(p);
            p = pool_open(path, 0, 0, err, sizeof err);
        }
        int s = pool_seg_alloc(p, OWNER_CLEAN, 0, 0);
        uint64_t sq = pool_seg_meta(p, (uint32_t)s).seq;
        if (sq <= last || sq < max_seq)
            mono = 0;
        last = sq;
        pool_seg_free(p, (uint32_t)s);
    }
    CHECK(mono);
    pool_close(p);
    unlink(path);
}

/* ---- writers ---- */

typedef struct sealed_log {
    uint32_t segs[64];
    int n;
    int bad_state;
    int commit;   /* mark sealed segments COMMITTED, like a single-node t-log */
} sealed_log;

static void on_sealed_cb(log_writer *w, uint32_t seg) {
    sealed_log *sl = w->ctx;
    if (pool_seg_meta(w->p, seg).state != SEG_USED)
        sl->bad_state++;
    if (sl->n < 64)
        sl->segs[sl->n++] = seg;
    if (sl->commit)
        pool_seg_set_state(w->p, seg, SEG_COMMITTED);
}

/* The i-th test entry: deterministic from i so it can be re-derived. */
static size_t test_vlen(int i) {
    static const size_t sizes[] = {0, 5, 100, 1000, 30000, 200000, 777, 64};
    return sizes[(unsigned)i * 7919u % 8] + (size_t)i % 13;
}

static void fill_val(char *v, size_t n, int i) {
    for (size_t k = 0; k < n; k++)
        v[k] = (char)(i * 31 + (int)k);
}

static uint64_t append_entry(log_writer *w, int i, char *scratch) {
    char key[32];
    int kl = snprintf(key, sizeof key, "k%d", i);
    size_t vl = test_vlen(i);
    fill_val(scratch, vl, i);
    log_entry e = mk_entry(LOG_SET, key, (size_t)kl, scratch, vl);
    e.ver = (uint64_t)i + 1;
    size_t len = log_entry_len(e.klen, e.vlen);
    uint64_t off = log_writer_reserve(w, len, -1);
    if (!off)
        return 0;
    log_entry_encode(log_writer_dst(w, off, len), &e, 1);
    log_writer_wrote(w, off, len);
    return off;
}

/* Walk segment seg from its start; check entries are first..first+n-1 in
 * order; return how many matched. Also checks that the tail is zero. */
static int verify_segment(pool *p, uint32_t seg, int first, char *scratch, int *tail_dirty) {
    uint8_t *base = pool_ptr(p, pool_seg_offset(p, seg));
    size_t off = 0;
    int i = first, n = 0;
    log_entry d;
    while (off < POOL_SEG_SIZE) {
        size_t len = log_entry_check(base + off, POOL_SEG_SIZE - off, &d);
        if (!len)
            break;
        char key[32];
        int kl = snprintf(key, sizeof key, "k%d", i);
        size_t vl = test_vlen(i);
        fill_val(scratch, vl, i);
        if (d.klen != (uint32_t)kl || memcmp(d.key, key, (size_t)kl) || d.vlen != vl ||
            memcmp(d.val, scratch, vl) || d.ver != (uint64_t)i + 1)
            break;
        off += log_entry_span(len);
        i++;
        n++;
    }
    if (!all_zero(base + off, POOL_SEG_SIZE - off))
        (*tail_dirty)++;
    return n;
}

static void test_writer_segments(const char *dir) {
    char path[512], err[256];
    path_in(path, sizeof path, dir, "wpool");
    pool *p = pool_open(path, POOL_BYTES, 0, err, sizeof err);
    CHECK(p != NULL);
    if (!p)
        return;
    char *scratch = malloc(LOG_MAX_ENTRY);

    log_writer w;
    sealed_log sl = {.n = 0, .commit = 1};
    log_writer_init(&w, p, OWNER_WORKER, 2);
    w.on_sealed = on_sealed_cb;
    w.ctx = &sl;
    log_writer_sync(&w); /* nothing to do */
    CHECK_EQ_LL(sl.n, 0);

    /* ~4 segments of entries, syncing every 10 appends */
    int n = 0, misaligned = 0;
    uint32_t order[NDATA];
    int norder = 0, seg_first[NDATA];
    int32_t prev_seg = -1;
    while (norder < 4 || w.pos < POOL_SEG_SIZE / 2) {
        uint64_t off = append_entry(&w, n, scratch);
        CHECK(off != 0);
        if (!off)
            break;
        if (off % LOG_ALIGN)
            misaligned++;
        if (w.seg != prev_seg) {
            order[norder] = (uint32_t)w.seg;
            seg_first[norder++] = n;
            prev_seg = w.seg;
        }
        CHECK_EQ_LL(pool_seg_of(p, off), w.seg);
        n++;
        if (n % 10 == 0)
            log_writer_sync(&w);
    }
    CHECK_EQ_LL(misaligned, 0);
    log_writer_sync(&w);
    /* every segment but the current one was sealed, in order, once synced */
    CHECK_EQ_LL(sl.n, norder - 1);
    CHECK_EQ_LL(sl.bad_state, 0);
    for (int i = 0; i + 1 < norder && i < sl.n; i++) {
        CHECK_EQ_LL(sl.segs[i], order[i]);
        CHECK_EQ_LL(pool_seg_meta(p, order[i]).state, SEG_COMMITTED);
        CHECK_EQ_LL(pool_seg_meta(p, order[i]).owner_id, 2);
    }
    CHECK_EQ_LL(pool_seg_meta(p, order[norder - 1]).state, SEG_USING);
    for (int i = 1; i < norder; i++)
        CHECK(pool_seg_meta(p, order[i]).seq > pool_seg_meta(p, order[i - 1]).seq);
    log_writer_seal(&w);
    CHECK_EQ_LL(sl.n, norder);
    CHECK_EQ_LL(w.seg, -1);

    /* read everything back, after a reopen */
    pool_close(p);
    p = pool_open(path, 0, 0, err, sizeof err);
    CHECK(p != NULL);
    if (!p)
        return;
    int total = 0, tail_dirty = 0;
    for (int i = 0; i < norder; i++) {
        int want = (i + 1 < norder ? seg_first[i + 1] : n) - seg_first[i];
        int got = verify_segment(p, order[i], seg_first[i], scratch, &tail_dirty);
        CHECK_EQ_LL(got, want);
        total += got;
    }
    CHECK_EQ_LL(total, n);
    CHECK_EQ_LL(tail_dirty, 0);
    for (int i = 0; i < norder; i++)
        pool_seg_free(p, order[i]);
    CHECK_EQ_LL(pool_free_count(p), NDATA);

    /* closed[] overflow: one ~3 MiB entry per segment, no sync for 10
     * segments. The writer must sync early rather than forget a segment. */
    log_writer_free(&w);
    log_writer_init(&w, p, OWNER_CONTROL, 0);
    sealed_log sl2 = {.n = 0, .commit = 0};
    w.on_sealed = on_sealed_cb;
    w.ctx = &sl2;
    size_t big = 3u << 20;
    uint64_t offs[10];
    for (int i = 0; i < 10; i++) {
        fill_val(scratch, big, 1000 + i);
        log_entry e = mk_entry(LOG_SET, "big", 3, scratch, big);
        e.ver = (uint64_t)i + 1;
        size_t len = log_entry_len(3, big);
        offs[i] = log_writer_reserve(&w, len, -1);
        CHECK(offs[i] != 0);
        if (!offs[i])
            break;
        log_entry_encode(log_writer_dst(&w, offs[i], len), &e, 1);
        log_writer_wrote(&w, offs[i], len);
    }
    CHECK(sl2.n >= 8);      /* the early sync happened */
    CHECK(w.nclosed < 8);
    log_writer_sync(&w);
    CHECK_EQ_LL(w.nclosed, 0);
    CHECK_EQ_LL(w.dirty_lo, 0);
    CHECK_EQ_LL(sl2.n, 9);
    CHECK_EQ_LL(sl2.bad_state, 0);
    pool_close(p);
    p = pool_open(path, 0, 0, err, sizeof err);
    int ok = 0;
    for (int i = 0; i < 10; i++) {
        log_entry d;
        if (log_entry_check(pool_ptr(p, offs[i]), POOL_SEG_SIZE, &d) == log_entry_len(3, big) &&
            d.ver == (uint64_t)i + 1)
            ok++;
        if (i < 9)
            CHECK_EQ_LL(pool_seg_meta(p, pool_seg_of(p, offs[i])).state, SEG_USED);
    }
    CHECK_EQ_LL(ok, 10);
    for (uint32_t s = 0; s < NDATA; s++)
        if (pool_seg_meta(p, s).state != SEG_FREE)
            pool_seg_free(p, s);

    /* pool full: reserve returns 0, the current segment stays usable */
    log_writer_free(&w);
    log_writer_init(&w, p, OWNER_WORKER, 0);
    size_t mib = (1u << 20) - 100;
    int got = 0;
    for (;;) {
        uint64_t off = log_writer_reserve(&w, mib, -1);
        if (!off)
            break;
        memset(log_writer_dst(&w, off, 8), 0x11, 8); /* stand-in content */
        log_writer_wrote(&w, off, 8);
        got++;
        if (got > 1000)
            break;
    }
    CHECK_EQ_LL(got, NDATA * 4);
    CHECK_EQ_LL(pool_free_count(p), 0);
    CHECK_EQ_LL(log_writer_reserve(&w, mib, -1), 0);
    CHECK(log_writer_reserve(&w, 200, -1) != 0); /* the tail still fits it */
    log_writer_seal(&w);
    for (uint32_t s = 0; s < NDATA; s++)
        pool_seg_free(p, s);

    /* keep_free holds segments back */
    log_writer_free(&w);
    log_writer_init(&w, p, OWNER_WORKER, 0);
    w.keep_free = NDATA - 2;
    got = 0;
    while (log_writer_reserve(&w, POOL_SEG_SIZE - 64, -1))
        got++;
    CHECK_EQ_LL(got, 2);
    CHECK(log_writer_reserve(&w, POOL_SEG_SIZE - 64, 0) != 0); /* override */
    CHECK_EQ_LL(log_writer_reserve(&w, 10, -1), 0);            /* shorter than a header */
    CHECK_EQ_LL(log_writer_reserve(&w, LOG_MAX_ENTRY + 1, 0), 0);
    log_writer_seal(&w);
    log_writer_free(&w);

    pool_close(p);
    unlink(path);
    free(scratch);
}

/* Several threads allocate and free at once: no segment is ever handed to
 * two owners, and the free count comes back whole. */
typedef struct alloc_arg {
    pool *p;
    int id, rounds;
    _Atomic int *owner;   /* per segment: 0 or the holder's id + 1 */
    _Atomic int *errors;
} alloc_arg;

static void *alloc_thread(void *arg) {
    alloc_arg *a = arg;
    for (int i = 0; i < a->rounds; i++) {
        int s = pool_seg_alloc(a->p, OWNER_WORKER, (uint16_t)a->id, 0);
        if (s < 0)
            continue; /* all taken right now */
        int expect = 0;
        if (!atomic_compare_exchange_strong(&a->owner[s], &expect, a->id + 1))
            atomic_fetch_add(a->errors, 1);
        uint8_t *d = pool_ptr(a->p, pool_seg_offset(a->p, (uint32_t)s));
        if (d[0] != 0 || d[POOL_SEG_SIZE - 1] != 0)
            atomic_fetch_add(a->errors, 1);
        d[0] = d[POOL_SEG_SIZE - 1] = 0x5a;
        pool_seg_set_state(a->p, (uint32_t)s, SEG_USED);
        atomic_store(&a->owner[s], 0);
        pool_seg_free(a->p, (uint32_t)s);
    }
    return NULL;
}

static void test_pool_threads(const char *dir) {
    char path[512], err[256];
    path_in(path, sizeof path, dir, "tpool");
    pool *p = pool_open(path, POOL_BYTES, 0, err, sizeof err);
    CHECK(p != NULL);
    if (!p)
        return;
    enum { T = 6 };
    pthread_t th[T];
    alloc_arg args[T];
    _Atomic int owner[NDATA];
    _Atomic int errors = 0;
    for (int i = 0; i < NDATA; i++)
        atomic_init(&owner[i], 0);
    uint64_t seq_before = pool_seq_now(p);
    for (int i = 0; i < T; i++) {
        args[i] = (alloc_arg){p, i, mode_pmem ? 50 : 4, owner, &errors};
        pthread_create(&th[i], NULL, alloc_thread, &args[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_LL(atomic_load(&errors), 0);
    CHECK_EQ_LL(pool_free_count(p), NDATA);
    CHECK(pool_seq_now(p) > seq_before);
    pool_close(p);
    unlink(path);
}

static void run_pool_tests(const char *parent) {
    char *dir = tmpdir_make(parent);
    printf("test-log: pool tests on %s (%s)\n", dir, mode_name);
    test_pool_open_errors(dir);
    test_pool_basic(dir);
    test_writer_segments(dir);
    test_pool_threads(dir);
    if (rmdir(dir) != 0)
        fprintf(stderr, "test-log: %s left non-empty: %s\n", dir, strerror(errno));
    free(dir);
}

/* Run the pool tests in a child with PMEM_IS_PMEM_FORCE=1 on /dev/shm and
 * fold its counts into ours. */
static void run_pmem_child(void) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        unit_fail++;
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setenv("PMEM_IS_PMEM_FORCE", "1", 1);
        mode_name = "pmem forced";
        mode_pmem = 1;
        unit_pass = unit_fail = 0;
        run_pool_tests("/dev/shm");
        int counts[2] = {unit_pass, unit_fail};
        if (write(fds[1], counts, sizeof counts) != (ssize_t)sizeof counts)
            _exit(3);
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    int counts[2] = {0, 0}, status = 0;
    ssize_t r = read(fds[0], counts, sizeof counts);
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (r != (ssize_t)sizeof counts || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "test-log: pmem child failed (status %d)\n", status);
        unit_fail++;
        return;
    }
    unit_pass += counts[0];
    unit_fail += counts[1];
}

int main(void) {
    test_crc_vectors();
    test_crc_hw_vs_sw();
    test_hash_slot();
    test_hash_key();
    test_entry_roundtrip();
    test_entry_corruption();
    test_groups();
    /* The child must start before this process touches libpmem. */
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    if (!force) {
        run_pmem_child();
    } else if (strcmp(force, "1") == 0) {
        mode_name = "pmem forced";
        mode_pmem = 1;
    }
    run_pool_tests("/tmp");
    return UNIT_DONE("test-log");
}
