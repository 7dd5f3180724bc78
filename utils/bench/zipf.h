/* zipf.h -- YCSB's key popularity generators.
 *
 * zipf_*: the ZipfianGenerator of Gray et al., "Quickly Generating
 * Billion-Record Synthetic Databases" (SIGMOD '94), as YCSB uses it: rank 0
 * is the most popular, P(rank i) ~ 1/(i+1)^theta over n items. The first two
 * ranks are exact; the rest come from Gray's closed-form approximation, so a
 * draw costs one pow() and no table, whatever n is.
 *
 * The normalising constant zeta(n, theta) = sum_{i=1..n} i^-theta is summed
 * exactly for small n and by Euler-Maclaurin beyond that, so any theta and
 * any n (YCSB's scrambled generator uses n = 10^10) is ready in microseconds.
 * A generator can grow (zipf_grow) as inserts add items: the "latest"
 * distribution needs that, and it costs one pow() per added item.
 *
 * scrambled_*: YCSB's ScrambledZipfianGenerator: a zipfian draw over 10^10
 * items, hashed with 64-bit FNV-1a over its bytes and reduced modulo the
 * record count. Popular keys are then spread over the key space instead of
 * clustered at its start, while the hot set keeps the zipfian shape. */
#ifndef ROWAN_BENCH_ZIPF_H
#define ROWAN_BENCH_ZIPF_H
#include <stdint.h>
#include "rng.h"

#define ZIPF_DEFAULT_THETA 0.99
/* Item count of the scrambled generator's underlying zipfian, as in YCSB. */
#define SCRAMBLED_ITEMS 10000000000ull

struct zipf {
    uint64_t n;          /* items: ranks 0..n-1 */
    double theta;
    double alpha;        /* 1 / (1 - theta) */
    double zetan;        /* zeta(n, theta) */
    double zeta2;        /* zeta(2, theta) */
    double half_pow;     /* 0.5^theta: P(rank 1)/P(rank 0) */
    double eta;
};

/* zeta(n, theta) = sum_{i=1..n} i^-theta, for 0 < theta < 1. */
double zeta(uint64_t n, double theta);
/* Initialise over n >= 1 items; 0 < theta < 1. Returns -1 on bad input. */
int zipf_init(struct zipf *z, uint64_t n, double theta);
/* Grow to n items (n >= current): incremental zeta, then recompute eta. */
void zipf_grow(struct zipf *z, uint64_t n);
/* One draw: a rank in [0, n). */
uint64_t zipf_next(const struct zipf *z, struct rng *r);

/* YCSB-style FNV hash of a 64-bit value (its 8 bytes, low first), made
 * non-negative as YCSB's Math.abs does. */
uint64_t fnv64(uint64_t v);

struct scrambled {
    struct zipf z;       /* over SCRAMBLED_ITEMS */
    uint64_t items;      /* keys: results in [0, items) */
};

int scrambled_init(struct scrambled *s, uint64_t items, double theta);
uint64_t scrambled_next(const struct scrambled *s, struct rng *r);

#endif
