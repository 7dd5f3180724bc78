/* vsize.h -- value-size distributions.
 *
 * A value size is fixed ("100"), uniform ("uniform:A:B", both inclusive), or
 * drawn from a discretised generalised Pareto distribution: "gpd:MEAN" or
 * "gpd:MEAN:SHAPE" or "gpd:MEAN:SHAPE:MIN", and the named presets zippydb
 * (mean 90.8 B), up2x (57.25 B) and udb (153.8 B), the Facebook object
 * sizes the Rowan paper evaluates with (Cao et al., FAST '20).
 *
 * Why a GPD: Cao et al. found Facebook's value sizes heavy-tailed and fitted
 * them with generalised Pareto distributions; only the means are quoted in
 * the Rowan paper, so the presets fix a shape (VSIZE_DEFAULT_SHAPE) and a
 * minimum of 1 byte, and solve for the scale so that the mean of the sizes
 * actually produced -- after rounding down to whole bytes and capping at
 * VSIZE_CAP -- equals the published mean (to 0.001 B). See README.md. */
#ifndef ROWAN_BENCH_VSIZE_H
#define ROWAN_BENCH_VSIZE_H
#include <stddef.h>
#include <stdint.h>
#include "rng.h"

#define VSIZE_CAP 16384u
#define VSIZE_DEFAULT_SHAPE 0.25

enum vsize_kind { VSIZE_FIXED, VSIZE_UNIFORM, VSIZE_GPD };

struct vsize {
    enum vsize_kind kind;
    char name[24];      /* "100", "uniform", "gpd", "zippydb", ... */
    uint32_t lo, hi;    /* fixed: lo == hi; uniform: bounds; gpd: min, cap */
    double mean;        /* expected size of what vsize_next returns */
    double shape, scale;
};

/* Parse a spec (see above). Returns 0, or -1 with a message in err. */
int vsize_parse(struct vsize *v, const char *spec, char *err, size_t errlen);
uint32_t vsize_next(const struct vsize *v, struct rng *r);
/* Exact expected size of the discretised, capped GPD with these parameters. */
double vsize_gpd_mean(double scale, double shape, uint32_t min, uint32_t cap);

#endif
