/* test-bench.c -- unit tests of rowan-bench's generators and histogram.
 *
 * What must hold for the benchmark's numbers to mean anything:
 *  - every generator is deterministic for a seed (a run can be repeated);
 *  - the zipfian choosers produce the frequencies they claim: checked
 *    against the exact distribution of Gray's algorithm (tight, statistical
 *    tolerance) and against the true Zipf law (within the approximation's
 *    known bias), including after YCSB's scrambling;
 *  - the histogram's percentiles are within its stated relative error of the
 *    exact nearest-rank percentiles;
 *  - the value-size presets have the published means;
 *  - the cluster plumbing parses CLUSTER SLOTS and redirects correctly.
 * Sample counts are fixed and seeds constant, so the test is deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/unit.h"
#include "../../utils/bench/hist.h"
#include "../../utils/bench/rng.h"
#include "../../utils/bench/slots.h"
#include "../../utils/bench/stats.h"
#include "../../utils/bench/vsize.h"
#include "../../utils/bench/workload.h"
#include "../../utils/bench/zipf.h"

#define SAMPLES 2000000

static bool near(double a, double b, double tol) {
    return fabs(a - b) <= tol;
}

/* ---- determinism ---- */

static void test_rng(void) {
    struct rng a, b, c;
    rng_seed(&a, 42, 1);
    rng_seed(&b, 42, 1);
    rng_seed(&c, 42, 2);
    int same = 1, differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_u64(&a), y = rng_u64(&b), z = rng_u64(&c);
        same &= x == y;
        differ |= x != z;
    }
    CHECK(same);
    CHECK(differ);
    /* rng_below stays in range and hits both ends. */
    int lo = 0, hi = 0, bad = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t v = rng_below(&a, 7);
        bad |= v >= 7;
        lo |= v == 0;
        hi |= v == 6;
    }
    CHECK(!bad && lo && hi);
    double d = rng_double(&a);
    CHECK(d >= 0 && d < 1);
}

/* One value per generator, drawn from a fresh seed each time. */
static void draw_all(uint64_t seed, uint64_t out[6]) {
    struct rng r;
    rng_seed(&r, seed, 3);
    struct scrambled s;
    struct zipf z;
    struct chooser latest;
    struct vsize v;
    char err[128];
    scrambled_init(&s, 100000, 0.99);
    zipf_init(&z, 5000, 0.8);
    chooser_init(&latest, DIST_LATEST, 0.99, 1000, 0);
    vsize_parse(&v, "zippydb", err, sizeof err);
    double mix[OP_NTYPES] = {0.5, 0.2, 0.1, 0.1, 0.1};
    memset(out, 0, 6 * sizeof *out);
    for (int i = 0; i < 10000; i++) {
        out[0] = out[0] * 31 + scrambled_next(&s, &r);
        out[1] = out[1] * 31 + zipf_next(&z, &r);
        out[2] = out[2] * 31 + chooser_next(&latest, &r, 1000 + (uint64_t)i);
        out[3] = out[3] * 31 + vsize_next(&v, &r);
        out[4] = out[4] * 31 + (uint64_t)workload_pick(mix, rng_double(&r));
        out[5] = out[5] * 31 + rng_below(&r, 1000);
    }
}

static void test_determinism(void) {
    uint64_t a[6], b[6], c[6];
    draw_all(7, a);
    draw_all(7, b);
    draw_all(8, c);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_LL(a[i], b[i]);
        CHECK(a[i] != c[i]);
    }
}

/* ---- zeta and zipfian frequencies ---- */

static double zeta_exact(uint64_t n, double theta) {
    double s = 0;
    for (uint64_t i = n; i >= 1; i--)
        s += pow((double)i, -theta);
    return s;
}

static void test_zeta(void) {
    /* YCSB's precomputed zeta(10^10, 0.99) for its scrambled generator. */
    CHECK(fabs(zeta(10000000000ull, 0.99) / 26.46902820178302 - 1) < 1e-9);
    /* Euler-Maclaurin path against the plain sum, for two constants. */
    CHECK(fabs(zeta(3000000, 0.99) / zeta_exact(3000000, 0.99) - 1) < 1e-11);
    CHECK(fabs(zeta(3000000, 0.5) / zeta_exact(3000000, 0.5) - 1) < 1e-11);
    CHECK(near(zeta(1, 0.99), 1.0, 1e-15));
    /* Growing a generator gives the same constant as building it at size. */
    struct zipf a, b;
    zipf_init(&a, 1000, 0.99);
    zipf_grow(&a, 1500);
    zipf_grow(&a, 500000);
    zipf_init(&b, 500000, 0.99);
    CHECK(fabs(a.zetan / b.zetan - 1) < 1e-12);
    CHECK(fabs(a.eta / b.eta - 1) < 1e-9);
    CHECK(zipf_init(&a, 10, 1.0) < 0);
    CHECK(zipf_init(&a, 0, 0.5) < 0);
}

/* P(rank < k) under Gray's algorithm, exactly (see zipf.c). */
static double gray_cdf(const struct zipf *z, uint64_t k) {
    if (k == 0)
        return 0;
    if (k == 1)
        return 1 / z->zetan;
    double u_two = (1 + z->half_pow) / z->zetan;
    if (k == 2)
        return u_two;
    if (k >= z->n)
        return 1;
    double u = (pow((double)k / (double)z->n, 1 / z->alpha) - 1 + z->eta) / z->eta;
    return u > u_two ? u : u_two;
}

static void test_zipf_frequencies(void) {
    const uint64_t n = 1000;
    const double theta = 0.99;
    struct zipf z;
    struct rng r;
    zipf_init(&z, n, theta);
    rng_seed(&r, 1, 1);
    uint64_t *cnt = calloc(n, sizeof *cnt);
    int out_of_range = 0;
    for (int i = 0; i < SAMPLES; i++) {
        uint64_t v = zipf_next(&z, &r);
        if (v >= n)
            out_of_range = 1;
        else
            cnt[v]++;
    }
    CHECK(!out_of_range);
    /* Rank 0 and rank 1 are exact in Gray's method: 1/zeta and 0.5^t/zeta. */
    double p0 = 1 / zeta(n, theta), p1 = pow(0.5, theta) / zeta(n, theta);
    double sd0 = sqrt(p0 * (1 - p0) / SAMPLES), sd1 = sqrt(p1 * (1 - p1) / SAMPLES);
    CHECK(near((double)cnt[0] / SAMPLES, p0, 5 * sd0));
    CHECK(near((double)cnt[1] / SAMPLES, p1, 5 * sd1));
    /* The top-10 share: against the algorithm's own distribution, tightly. */
    uint64_t top = 0;
    for (int i = 0; i < 10; i++)
        top += cnt[i];
    double share = (double)top / SAMPLES, gray = gray_cdf(&z, 10);
    CHECK(near(share, gray, 5 * sqrt(gray * (1 - gray) / SAMPLES)));
    /* ... and against the true Zipf law: Gray's closed form over-weights
     * ranks 2..9 a little (about 4% of the top-10 share at this n). */
    double zipf_top = zeta(10, theta) / zeta(n, theta);
    CHECK(fabs(share / zipf_top - 1) < 0.06);
    /* The middle of the distribution, by deciles of the algorithm's CDF. */
    for (uint64_t k = 100; k < n; k += 100) {
        uint64_t below = 0;
        for (uint64_t i = 0; i < k; i++)
            below += cnt[i];
        double p = gray_cdf(&z, k);
        CHECK(near((double)below / SAMPLES, p, 5 * sqrt(p * (1 - p) / SAMPLES) + 1e-9));
    }
    free(cnt);
}

/* YCSB's scrambled zipfian: the theoretical share of a key set is the mass
 * of the underlying ranks that hash into it. Ranks below R are summed
 * exactly; the rest (small, spread over everything) counts as uniform. */
static double scrambled_share(const struct scrambled *s, const uint8_t *in_set,
                              uint64_t set_size) {
    const uint64_t R = 200000;
    double mass = 0, head = gray_cdf(&s->z, R);
    for (uint64_t rank = 0; rank < R; rank++)
        if (in_set[fnv64(rank) % s->items])
            mass += gray_cdf(&s->z, rank + 1) - gray_cdf(&s->z, rank);
    return mass + (1 - head) * (double)set_size / (double)s->items;
}

static void test_scrambled(void) {
    const uint64_t items = 1000;
    struct scrambled s;
    struct rng r;
    CHECK_EQ_LL(scrambled_init(&s, items, 0.99), 0);
    rng_seed(&r, 5, 1);
    uint64_t *cnt = calloc(items, sizeof *cnt);
    for (int i = 0; i < SAMPLES; i++)
        cnt[scrambled_next(&s, &r)]++;
    /* The keys that the ten most popular ranks land on. */
    uint8_t *in_set = calloc(items, 1);
    uint64_t set_size = 0, hits = 0;
    for (uint64_t rank = 0; rank < 10; rank++) {
        uint64_t k = fnv64(rank) % items;
        if (!in_set[k]) {
            in_set[k] = 1;
            set_size++;
            hits += cnt[k];
        }
    }
    double share = (double)hits / SAMPLES, want = scrambled_share(&s, in_set, set_size);
    CHECK(near(share, want, 5 * sqrt(want * (1 - want) / SAMPLES)));
    /* The hottest key is rank 0's image and holds about 1/zeta(10^10). */
    uint64_t best = 0;
    for (uint64_t k = 1; k < items; k++)
        if (cnt[k] > cnt[best])
            best = k;
    CHECK_EQ_LL(best, fnv64(0) % items);
    CHECK((double)cnt[best] / SAMPLES > 1 / 26.47);
    free(cnt);
    free(in_set);
}

static void test_latest_and_uniform(void) {
    struct chooser c;
    struct rng r;
    rng_seed(&r, 9, 1);
    const uint64_t limit = 1000;
    chooser_init(&c, DIST_LATEST, 0.99, limit, 0);
    uint64_t newest = 0, bad = 0;
    for (int i = 0; i < SAMPLES; i++) {
        uint64_t k = chooser_next(&c, &r, limit);
        bad += k >= limit;
        newest += k == limit - 1;
    }
    CHECK_EQ_LL(bad, 0);
    double p0 = 1 / zeta(limit, 0.99);
    CHECK(near((double)newest / SAMPLES, p0, 5 * sqrt(p0 * (1 - p0) / SAMPLES)));
    /* The chooser follows a growing limit: the newest key stays hottest. */
    uint64_t at_new = 0;
    for (int i = 0; i < 100000; i++)
        at_new += chooser_next(&c, &r, 2000) == 1999;
    CHECK(at_new > 100000 / 20);
    /* Uniform: every key near 1/n; zipfian below the limit only. */
    chooser_init(&c, DIST_UNIFORM, 0.99, 100, 0);
    uint64_t cnt[100] = {0};
    for (int i = 0; i < 1000000; i++)
        cnt[chooser_next(&c, &r, 100)]++;
    uint64_t mn = UINT64_MAX, mx = 0;
    for (int i = 0; i < 100; i++) {
        mn = cnt[i] < mn ? cnt[i] : mn;
        mx = cnt[i] > mx ? cnt[i] : mx;
    }
    CHECK(mn > 9400 && mx < 10600);
    chooser_init(&c, DIST_ZIPFIAN, 0.99, 1000, 1000);
    bad = 0;
    for (int i = 0; i < 100000; i++)
        bad += chooser_next(&c, &r, 1000) >= 1000;
    CHECK_EQ_LL(bad, 0);
}

/* ---- histogram ---- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t exact_percentile(const uint64_t *sorted, size_t n, double q) {
    if (q >= 100)
        return sorted[n - 1];
    uint64_t rank = (uint64_t)ceil(q * (double)n / 100.0 - 1e-9);
    return sorted[rank ? rank - 1 : 0];
}

static int within_bound(uint64_t got, uint64_t want) {
    return fabs((double)got - (double)want) <= HIST_REL_ERROR * (double)want + 0.5;
}

static void check_percentiles(const uint64_t *vals, size_t n) {
    struct hist *h = malloc(sizeof *h);
    hist_init(h);
    uint64_t *sorted = malloc(n * sizeof *sorted);
    for (size_t i = 0; i < n; i++) {
        hist_record(h, vals[i]);
        sorted[i] = vals[i];
    }
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    static const double qs[] = {0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100};
    int ok = 1;
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        uint64_t got = hist_percentile(h, qs[i]), want = exact_percentile(sorted, n, qs[i]);
        if (!within_bound(got, want)) {
            ok = 0;
            fprintf(stderr, "p%g: got %llu want %llu\n", qs[i], (unsigned long long)got,
                    (unsigned long long)want);
        }
    }
    CHECK(ok);
    CHECK_EQ_LL(h->max, sorted[n - 1]);
    CHECK_EQ_LL(h->min, sorted[0]);
    CHECK_EQ_LL(h->count, n);
    free(sorted);
    free(h);
}

static void test_hist(void) {
    /* The bucket geometry: each value inside its bucket, buckets narrow. */
    struct rng r;
    rng_seed(&r, 11, 1);
    int geometry = 1;
    for (int i = 0; i < 200000; i++) {
        uint64_t v = rng_u64(&r) >> (rng_below(&r, 40) + 24);
        uint64_t lo, hi;
        hist_bucket_range(hist_index(v), &lo, &hi);
        geometry &= lo <= v && v <= hi;
        geometry &= (double)(hi - lo) / (double)(lo ? lo : 1) <= 2 * HIST_REL_ERROR;
    }
    CHECK(geometry);
    CHECK(hist_index(127) == 127);      /* exact below 2^SUB_BITS */
    CHECK(hist_index((uint64_t)1 << 50) == HIST_BUCKETS - 1);

    size_t n = 100000;
    uint64_t *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)       /* 1..n, each once */
        v[i] = i + 1;
    check_percentiles(v, n);
    for (size_t i = 0; i < n; i++)       /* heavy-tailed latencies, ns */
        v[i] = (uint64_t)(20000 * exp(1.5 * (rng_double(&r) + rng_double(&r) - 1)) +
                          (rng_below(&r, 1000) == 0 ? 5e7 : 0));
    check_percentiles(v, n);
    for (size_t i = 0; i < n; i++)       /* tiny values are exact */
        v[i] = rng_below(&r, 100);
    check_percentiles(v, n);
    free(v);

    /* Merging equals recording everything into one. */
    struct hist *a = malloc(sizeof *a), *b = malloc(sizeof *b), *c = malloc(sizeof *c);
    hist_init(a);
    hist_init(b);
    hist_init(c);
    for (int i = 0; i < 10000; i++) {
        uint64_t x = rng_below(&r, 1000000);
        hist_record(i % 2 ? a : b, x);
        hist_record(c, x);
    }
    hist_merge(a, b);
    CHECK(!memcmp(a->b, c->b, sizeof a->b) && a->count == c->count && a->max == c->max);
    CHECK_EQ_LL(hist_percentile(b, 99), hist_percentile(b, 99));
    hist_init(b);
    CHECK_EQ_LL(hist_percentile(b, 50), 0);
    free(a);
    free(b);
    free(c);
}

/* ---- value sizes ---- */

static void check_vsize_mean(const char *spec, double published) {
    struct vsize v;
    char err[128];
    CHECK_EQ_LL(vsize_parse(&v, spec, err, sizeof err), 0);
    CHECK(near(v.mean, published, 0.001));
    struct rng r;
    rng_seed(&r, 3, 1);
    double sum = 0;
    uint32_t mn = UINT32_MAX, mx = 0;
    for (int i = 0; i < SAMPLES; i++) {
        uint32_t s = vsize_next(&v, &r);
        sum += s;
        mn = s < mn ? s : mn;
        mx = s > mx ? s : mx;
    }
    /* Heavy tail: allow 1% for sampling noise on 2M draws. */
    CHECK(fabs(sum / SAMPLES / published - 1) < 0.01);
    CHECK(mn >= 1 && mx <= VSIZE_CAP);
}

static void test_vsize(void) {
    check_vsize_mean("zippydb", 90.8);
    check_vsize_mean("up2x", 57.25);
    check_vsize_mean("udb", 153.8);
    check_vsize_mean("gpd:500:0.1:10", 500);
    struct vsize v;
    char err[128];
    struct rng r;
    rng_seed(&r, 1, 1);
    CHECK_EQ_LL(vsize_parse(&v, "100", err, sizeof err), 0);
    CHECK_EQ_LL(vsize_next(&v, &r), 100);
    CHECK_EQ_LL(vsize_parse(&v, "uniform:10:20", err, sizeof err), 0);
    int in = 1;
    for (int i = 0; i < 1000; i++) {
        uint32_t s = vsize_next(&v, &r);
        in &= s >= 10 && s <= 20;
    }
    CHECK(in);
    CHECK(vsize_parse(&v, "uniform:20:10", err, sizeof err) < 0);
    CHECK(vsize_parse(&v, "huge", err, sizeof err) < 0);
    CHECK(vsize_parse(&v, "gpd:50:1.5", err, sizeof err) < 0);
}

/* ---- workloads, keys, key space ---- */

static void test_workload(void) {
    struct workload w;
    char err[128];
    const char *names[] = {"load", "a", "b", "c", "d", "e", "f"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK_EQ_LL(workload_preset(&w, names[i], err, sizeof err), 0);
        double sum = 0;
        for (int k = 0; k < OP_NTYPES; k++)
            sum += w.mix[k];
        CHECK(near(sum, 1, 1e-12));
    }
    CHECK_EQ_LL(workload_preset(&w, "d", err, sizeof err), 0);
    CHECK(w.dist == DIST_LATEST && near(w.mix[OP_INSERT], 0.05, 1e-12));
    CHECK(workload_preset(&w, "z", err, sizeof err) < 0);
    double mix[OP_NTYPES];
    CHECK_EQ_LL(workload_parse_mix(mix, "read=2,update=1,rmw=1", err, sizeof err), 0);
    CHECK(near(mix[OP_READ], 0.5, 1e-12) && near(mix[OP_RMW], 0.25, 1e-12));
    CHECK(workload_parse_mix(mix, "read=x", err, sizeof err) < 0);
    CHECK(workload_parse_mix(mix, "jump=1", err, sizeof err) < 0);
    CHECK(workload_parse_mix(mix, "read=0", err, sizeof err) < 0);
    /* Picks follow the mix. */
    struct rng r;
    rng_seed(&r, 2, 1);
    uint64_t cnt[OP_NTYPES] = {0};
    for (int i = 0; i < 1000000; i++)
        cnt[workload_pick(mix, rng_double(&r))]++;
    CHECK(near((double)cnt[OP_READ] / 1e6, 0.5, 0.003));
    CHECK(near((double)cnt[OP_UPDATE] / 1e6, 0.25, 0.003));
    CHECK_EQ_LL(cnt[OP_SCAN] + cnt[OP_INSERT], 0);
    CHECK(workload_pick(mix, 0.9999999999) == OP_RMW);
}

static void test_keys(void) {
    char k[600];
    size_t n = key_format(k, 0, 0);
    CHECK(n > 4 && n <= 23 && !memcmp(k, "user", 4));
    n = key_format(k, 12345, 30);
    CHECK_EQ_LL(n, 30);
    n = key_format(k, 42, 10);
    k[n] = 0;
    CHECK(!strcmp(k, "user000042"));
    CHECK(key_size_fits(10, 999999) && !key_size_fits(10, 1000000));
    CHECK(!key_size_fits(4, 1));
    /* Distinct numbers, distinct keys. */
    char a[32], b[32];
    size_t la = key_format(a, 1, 0), lb = key_format(b, 2, 0);
    CHECK(la != lb || memcmp(a, b, la));
}

static void test_keyspace(void) {
    struct keyspace ks;
    CHECK_EQ_LL(keyspace_init(&ks, 100), 0);
    CHECK_EQ_LL(keyspace_limit(&ks), 100);
    uint64_t k0 = keyspace_claim(&ks), k1 = keyspace_claim(&ks), k2 = keyspace_claim(&ks);
    CHECK(k0 == 100 && k1 == 101 && k2 == 102);
    keyspace_ack(&ks, k2);              /* out of order: limit waits */
    CHECK_EQ_LL(keyspace_limit(&ks), 100);
    keyspace_ack(&ks, k0);
    CHECK_EQ_LL(keyspace_limit(&ks), 101);
    keyspace_ack(&ks, k1);
    CHECK_EQ_LL(keyspace_limit(&ks), 103);
    keyspace_free(&ks);
}

/* ---- cluster plumbing ---- */

static redisReply *mk(int type) {
    redisReply *r = calloc(1, sizeof *r);
    r->type = type;
    return r;
}

static redisReply *mk_int(long long v) {
    redisReply *r = mk(REDIS_REPLY_INTEGER);
    r->integer = v;
    return r;
}

static redisReply *mk_str(const char *s) {
    redisReply *r = mk(REDIS_REPLY_STRING);
    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

static redisReply *mk_arr(size_t n) {
    redisReply *r = mk(REDIS_REPLY_ARRAY);
    r->elements = n;
    r->element = calloc(n, sizeof *r->element);
    return r;
}

static redisReply *mk_range(long long lo, long long hi, const char *host, int port) {
    redisReply *e = mk_arr(3), *n = mk_arr(3);
    n->element[0] = mk_str(host);
    n->element[1] = mk_int(port);
    n->element[2] = mk_str("0123456789abcdef");
    e->element[0] = mk_int(lo);
    e->element[1] = mk_int(hi);
    e->element[2] = n;
    return e;
}

static void test_slots(void) {
    /* Redis Cluster's documented examples. */
    CHECK_EQ_LL(key_slot("foo", 3), 12182);
    CHECK_EQ_LL(key_slot("123456789", 9), 0x31C3 % 16384);
    CHECK_EQ_LL(key_slot("{user1000}.following", 20), key_slot("user1000", 8));

    redisReply *r = mk_arr(3);
    r->element[0] = mk_range(0, 5460, "10.0.0.1", 7000);
    r->element[1] = mk_range(5461, 10922, "", 7001);
    r->element[2] = mk_range(10923, 16383, "10.0.0.3", 7002);
    static struct slotmap m;
    CHECK_EQ_LL(slotmap_from_reply(&m, r, "seed.example"), 0);
    CHECK(m.cluster);
    CHECK_EQ_LL(m.nnodes, 3);
    CHECK_EQ_LL(m.owner[0], 0);
    CHECK_EQ_LL(m.owner[5461], 1);
    CHECK(!strcmp(m.nodes[1].host, "seed.example"));
    CHECK_EQ_LL(m.nodes[m.owner[16383]].port, 7002);
    CHECK_EQ_LL(slotmap_node(&m, "10.0.0.3", 7002), 2);
    CHECK_EQ_LL(slotmap_node(&m, "10.0.0.4", 7003), 3);
    freeReplyObject(r);
    r = mk_arr(0);
    CHECK(slotmap_from_reply(&m, r, "x") < 0);
    freeReplyObject(r);

    unsigned slot;
    char host[64];
    int port;
    const char *mv = "MOVED 3999 127.0.0.1:6381";
    CHECK(redirect_parse(mv, strlen(mv), &slot, host, sizeof host, &port) == REDIRECT_MOVED);
    CHECK(slot == 3999 && port == 6381 && !strcmp(host, "127.0.0.1"));
    const char *ask = "ASK 12 ::1:7000";
    CHECK(redirect_parse(ask, strlen(ask), &slot, host, sizeof host, &port) == REDIRECT_ASK);
    CHECK(slot == 12 && port == 7000 && !strcmp(host, "::1"));
    const char *empty = "MOVED 1 :7001";
    CHECK(redirect_parse(empty, strlen(empty), &slot, host, sizeof host, &port) ==
          REDIRECT_MOVED);
    CHECK(!host[0] && port == 7001);
    const char *bad[] = {"ERR wrong", "MOVED x 1.2.3.4:5", "MOVED 99999 h:1", "MOVED 5 h",
                         "ASK 5 h:0", "MOVED 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(redirect_parse(bad[i], strlen(bad[i]), &slot, host, sizeof host, &port) ==
              REDIRECT_NONE);
}

static void test_stats(void) {
    static struct stats a, b;
    stats_init(&a);
    stats_init(&b);
    const char *e = "ERR unknown command 'X'";
    stats_error(&a, e, strlen(e));
    stats_error(&a, "ERR other", 9);
    stats_error(&b, "NOT_FOUND", 9);
    for (int i = 0; i < 40; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "K%d", i);
        stats_error(&b, k, (size_t)n);
    }
    CHECK_EQ_LL(b.nkinds, ERRKIND_MAX);
    stats_merge(&a, &b);
    CHECK(!strcmp(a.kinds[0].kind, "ERR") && a.kinds[0].n == 2);
    uint64_t total = 0;
    for (int i = 0; i < a.nkinds; i++)
        total += a.kinds[i].n;
    CHECK_EQ_LL(total, 43);
}

int main(void) {
    test_rng();
    test_determinism();
    test_zeta();
    test_zipf_frequencies();
    test_scrambled();
    test_latest_and_uniform();
    test_hist();
    test_vsize();
    test_workload();
    test_keys();
    test_keyspace();
    test_slots();
    test_stats();
    return UNIT_DONE("test-bench");
}
