/* zipf.c -- zipfian and scrambled-zipfian generators (see zipf.h).
 *
 * Gray et al.'s method: with zetan = zeta(n), eta = (1 - (2/n)^(1-theta)) /
 * (1 - zeta(2)/zetan) and alpha = 1/(1-theta), a uniform u gives
 *   rank 0               if u*zetan < 1,
 *   rank 1               if u*zetan < 1 + 0.5^theta,
 *   n * (eta*u - eta + 1)^alpha   otherwise.
 * That is the algorithm YCSB's ZipfianGenerator implements; it is rewritten
 * here from the paper's description. */
#include "zipf.h"

#include <math.h>

/* Below this many terms zeta is summed exactly; above, the first
 * ZETA_HEAD terms are summed and the tail comes from Euler-Maclaurin, whose
 * error at that point is far below double precision. */
#define ZETA_EXACT_LIMIT 100000ull
#define ZETA_HEAD 10000ull

static double zeta_range_exact(uint64_t from, uint64_t to, double theta) {
    /* Smallest terms first: adding them in that order loses less precision. */
    double s = 0;
    for (uint64_t i = to; i >= from; i--)
        s += pow((double)i, -theta);
    return s;
}

/* sum_{i=a..b} f(i), f(x) = x^-theta, by Euler-Maclaurin to the f''' term:
 * integral + (f(a)+f(b))/2 + (f'(b)-f'(a))/12 - (f'''(b)-f'''(a))/720. */
static double zeta_range_em(double a, double b, double theta) {
    double one = 1.0 - theta;
    double integral = (pow(b, one) - pow(a, one)) / one;
    double fa = pow(a, -theta), fb = pow(b, -theta);
    double d1a = -theta * fa / a, d1b = -theta * fb / b;
    double c3 = -theta * (theta + 1) * (theta + 2);
    double d3a = c3 * fa / (a * a * a), d3b = c3 * fb / (b * b * b);
    return integral + (fa + fb) / 2 + (d1b - d1a) / 12 - (d3b - d3a) / 720;
}

double zeta(uint64_t n, double theta) {
    if (n <= ZETA_EXACT_LIMIT)
        return n ? zeta_range_exact(1, n, theta) : 0.0;
    return zeta_range_exact(1, ZETA_HEAD - 1, theta) +
           zeta_range_em((double)ZETA_HEAD, (double)n, theta);
}

static void zipf_derive(struct zipf *z) {
    z->eta = (1 - pow(2.0 / (double)z->n, 1 - z->theta)) / (1 - z->zeta2 / z->zetan);
}

int zipf_init(struct zipf *z, uint64_t n, double theta) {
    if (n < 1 || !(theta > 0 && theta < 1))
        return -1;
    z->n = n;
    z->theta = theta;
    z->alpha = 1 / (1 - theta);
    z->zetan = zeta(n, theta);
    z->zeta2 = zeta(2, theta);
    z->half_pow = pow(0.5, theta);
    zipf_derive(z);
    return 0;
}

void zipf_grow(struct zipf *z, uint64_t n) {
    if (n <= z->n)
        return;
    /* A handful of new items (the usual case: one insert) is summed; a big
     * jump is recomputed, which is cheaper than summing it. */
    if (n - z->n <= 100000)
        z->zetan += zeta_range_exact(z->n + 1, n, z->theta);
    else
        z->zetan = zeta(n, z->theta);
    z->n = n;
    zipf_derive(z);
}

uint64_t zipf_next(const struct zipf *z, struct rng *r) {
    double u = rng_double(r);
    double uz = u * z->zetan;
    if (uz < 1.0)
        return 0;
    if (uz < 1.0 + z->half_pow)
        return z->n > 1 ? 1 : 0;
    uint64_t v = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1, z->alpha));
    /* Rounding can land exactly on n for u close to 1. */
    return v < z->n ? v : z->n - 1;
}

uint64_t fnv64(uint64_t v) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= 1099511628211ull;
        v >>= 8;
    }
    /* YCSB takes Math.abs of the signed result. */
    int64_t s = (int64_t)h;
    return s < 0 ? (uint64_t)0 - h : h;
}

int scrambled_init(struct scrambled *s, uint64_t items, double theta) {
    if (items < 1)
        return -1;
    s->items = items;
    return zipf_init(&s->z, SCRAMBLED_ITEMS, theta);
}

uint64_t scrambled_next(const struct scrambled *s, struct rng *r) {
    return fnv64(zipf_next(&s->z, r)) % s->items;
}
