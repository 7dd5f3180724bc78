/* hist.c -- log-linear histogram (see hist.h for the error bound). */
#include "hist.h"

#include <math.h>
#include <string.h>

void hist_init(struct hist *h) {
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

unsigned hist_index(uint64_t v) {
    if (v < HIST_SUB)
        return (unsigned)v;
    unsigned m = 63 - (unsigned)__builtin_clzll(v);   /* 2^m <= v */
    if (m >= HIST_MAX_BITS)
        return HIST_BUCKETS - 1;
    unsigned shift = m - HIST_SUB_BITS;
    /* Group g = shift+1 holds [2^m, 2^(m+1)) in HIST_SUB steps of 2^shift;
     * (v >> shift) is in [HIST_SUB, 2*HIST_SUB). */
    return ((shift + 1) << HIST_SUB_BITS) + (unsigned)((v >> shift) - HIST_SUB);
}

void hist_bucket_range(unsigned idx, uint64_t *lo, uint64_t *hi) {
    if (idx < HIST_SUB) {
        *lo = *hi = idx;
        return;
    }
    unsigned shift = (idx >> HIST_SUB_BITS) - 1;
    uint64_t sub = (idx & (HIST_SUB - 1)) + HIST_SUB;
    *lo = sub << shift;
    *hi = *lo + ((uint64_t)1 << shift) - 1;
}

void hist_record(struct hist *h, uint64_t v) {
    h->b[hist_index(v)]++;
    h->count++;
    h->sum += (double)v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void hist_merge(struct hist *dst, const struct hist *src) {
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

double hist_mean(const struct hist *h) {
    return h->count ? h->sum / (double)h->count : 0.0;
}

uint64_t hist_percentile(const struct hist *h, double q) {
    if (!h->count)
        return 0;
    if (q >= 100)
        return h->max;
    /* Nearest rank: the smallest sample with at least q% of samples <= it. */
    /* The epsilon keeps 99.9% of 1000 at rank 999 despite 99.9's binary
     * representation. */
    uint64_t rank = (uint64_t)ceil(q * (double)h->count / 100.0 - 1e-9);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t lo, hi;
            hist_bucket_range(i, &lo, &hi);
            uint64_t mid = lo + (hi - lo) / 2;
            /* The true value also lies within [min, max]. */
            if (mid > h->max)
                mid = h->max;
            if (mid < h->min)
                mid = h->min;
            return mid;
        }
    }
    return h->max;
}
