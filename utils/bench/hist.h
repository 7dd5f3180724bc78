/* hist.h -- log-linear latency histogram with a bounded relative error.
 *
 * Values (nanoseconds) below 2^HIST_SUB_BITS are counted exactly. Above,
 * each power-of-two range [2^m, 2^(m+1)) is cut into 2^HIST_SUB_BITS equal
 * sub-buckets, so a bucket is never wider than 2^-HIST_SUB_BITS of its lower
 * bound. A percentile reports the midpoint of the bucket holding the
 * nearest-rank sample, hence |reported - true| / true <= HIST_REL_ERROR
 * (= 2^-(HIST_SUB_BITS+1), 0.39%). This is HdrHistogram's idea in its
 * simplest form: recording is a clz, a shift and an increment, and merging
 * per-thread histograms is an element-wise sum.
 *
 * Values of 2^HIST_MAX_BITS ns (about 18 minutes) or more land in the last
 * bucket; max is tracked exactly anyway. */
#ifndef ROWAN_BENCH_HIST_H
#define ROWAN_BENCH_HIST_H
#include <stdint.h>

#define HIST_SUB_BITS 7
#define HIST_MAX_BITS 40
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((HIST_MAX_BITS - HIST_SUB_BITS + 1) * HIST_SUB)
#define HIST_REL_ERROR (1.0 / (double)(2u << HIST_SUB_BITS))

struct hist {
    uint64_t count;
    uint64_t min, max;
    double sum;
    uint64_t b[HIST_BUCKETS];
};

void hist_init(struct hist *h);
void hist_record(struct hist *h, uint64_t v);
void hist_merge(struct hist *dst, const struct hist *src);
/* Nearest-rank percentile, q in [0, 100]; 0 when empty. q = 100 is max. */
uint64_t hist_percentile(const struct hist *h, double q);
double hist_mean(const struct hist *h);
/* Bucket index of a value and the [lo, hi] range a bucket stands for
 * (exposed for the unit test). */
unsigned hist_index(uint64_t v);
void hist_bucket_range(unsigned idx, uint64_t *lo, uint64_t *hi);

#endif
