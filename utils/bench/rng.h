/* rng.h -- the benchmark's pseudo-random numbers.
 *
 * Every generator in rowan-bench draws from an explicit rng state, never from
 * a global, so a run is reproducible for a seed and threads never share state
 * (no locks, no false sharing). The generator is xoshiro256** seeded through
 * splitmix64 (both public-domain algorithms by Vigna/Blackman, written here
 * from their published descriptions): fast, 256 bits of state, and good
 * enough statistically for workload generation. */
#ifndef ROWAN_BENCH_RNG_H
#define ROWAN_BENCH_RNG_H
#include <stdint.h>

struct rng {
    uint64_t s[4];
};

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Distinct streams for (seed, stream): threads use their id as the stream. */
static inline void rng_seed(struct rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rng_rotl(uint64_t v, int k) {
    return (v << k) | (v >> (64 - k));
}

static inline uint64_t rng_u64(struct rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return out;
}

/* Uniform double in [0, 1): the top 53 bits, so every value is exact. */
static inline double rng_double(struct rng *r) {
    return (double)(rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire's
 * multiply-and-reject: one multiplication in the common case). */
static inline uint64_t rng_below(struct rng *r, uint64_t n) {
    unsigned __int128 m = (unsigned __int128)rng_u64(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t thresh = -n % n;
        while (lo < thresh) {
            m = (unsigned __int128)rng_u64(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif
