/* vsize.c -- value-size distributions (see vsize.h).
 *
 * The GPD sample is min + floor(X) capped at VSIZE_CAP, with X drawn by
 * inverting the GPD's CDF: X = scale/shape * ((1-u)^-shape - 1). Its exact
 * mean is min + sum_{k=1..cap-min} P(X >= k) with P(X >= k) =
 * (1 + shape*k/scale)^(-1/shape); the scale is found by bisection on that
 * sum, which increases with the scale. */
#include "vsize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct preset {
    const char *name;
    double mean;
};

static const struct preset presets[] = {
    {"zippydb", 90.8},
    {"up2x", 57.25},
    {"udb", 153.8},
};

double vsize_gpd_mean(double scale, double shape, uint32_t min, uint32_t cap) {
    double s = min;
    for (uint32_t k = 1; k <= cap - min; k++)
        s += pow(1 + shape * k / scale, -1 / shape);
    return s;
}

static int gpd_setup(struct vsize *v, const char *name, double mean, double shape,
                     uint32_t min, char *err, size_t errlen) {
    if (!(shape > 0 && shape < 1) || !(mean > min) || mean >= VSIZE_CAP / 2) {
        snprintf(err, errlen, "gpd needs 0 < shape < 1 and min < mean < %u", VSIZE_CAP / 2);
        return -1;
    }
    double lo = 1e-6, hi = 2 * mean / (1 - shape) + 16;
    for (int i = 0; i < 60 && hi - lo > 1e-9 * hi; i++) {
        double mid = (lo + hi) / 2;
        if (vsize_gpd_mean(mid, shape, min, VSIZE_CAP) < mean)
            lo = mid;
        else
            hi = mid;
    }
    v->kind = VSIZE_GPD;
    snprintf(v->name, sizeof v->name, "%s", name);
    v->lo = min;
    v->hi = VSIZE_CAP;
    v->shape = shape;
    v->scale = (lo + hi) / 2;
    v->mean = vsize_gpd_mean(v->scale, shape, min, VSIZE_CAP);
    return 0;
}

static int parse_u32(const char *s, uint32_t *out) {
    char *end;
    unsigned long x = strtoul(s, &end, 10);
    if (end == s || *end || x > VSIZE_CAP * 64ul)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_uniform(struct vsize *v, const char *args, char *err, size_t errlen) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", args);
    char *colon = strchr(buf, ':');
    if (!colon)
        goto bad;
    *colon = 0;
    if (parse_u32(buf, &v->lo) || parse_u32(colon + 1, &v->hi) || v->lo > v->hi)
        goto bad;
    v->kind = VSIZE_UNIFORM;
    snprintf(v->name, sizeof v->name, "uniform");
    v->mean = ((double)v->lo + v->hi) / 2;
    return 0;
bad:
    snprintf(err, errlen, "uniform value size must be uniform:MIN:MAX");
    return -1;
}

static int parse_gpd(struct vsize *v, const char *args, char *err, size_t errlen) {
    double mean = 0, shape = VSIZE_DEFAULT_SHAPE;
    unsigned min = 1;
    int n = sscanf(args, "%lf:%lf:%u", &mean, &shape, &min);
    if (n < 1) {
        snprintf(err, errlen, "gpd value size must be gpd:MEAN[:SHAPE[:MIN]]");
        return -1;
    }
    return gpd_setup(v, "gpd", mean, shape, min, err, errlen);
}

int vsize_parse(struct vsize *v, const char *spec, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcasecmp(spec, presets[i].name))
            return gpd_setup(v, presets[i].name, presets[i].mean, VSIZE_DEFAULT_SHAPE, 1,
                             err, errlen);
    if (!strncasecmp(spec, "uniform:", 8))
        return parse_uniform(v, spec + 8, err, errlen);
    if (!strncasecmp(spec, "gpd:", 4))
        return parse_gpd(v, spec + 4, err, errlen);
    if (!parse_u32(spec, &v->lo)) {
        v->kind = VSIZE_FIXED;
        v->hi = v->lo;
        v->mean = v->lo;
        snprintf(v->name, sizeof v->name, "%u", v->lo);
        return 0;
    }
    snprintf(err, errlen, "unknown value size '%s' (a number, uniform:A:B, gpd:MEAN[:SHAPE], "
             "zippydb, up2x or udb)", spec);
    return -1;
}

uint32_t vsize_next(const struct vsize *v, struct rng *r) {
    switch (v->kind) {
    case VSIZE_FIXED:
        return v->lo;
    case VSIZE_UNIFORM:
        return v->lo + (uint32_t)rng_below(r, (uint64_t)(v->hi - v->lo) + 1);
    case VSIZE_GPD: {
        double u = rng_double(r);
        double x = v->scale / v->shape * (pow(1 - u, -v->shape) - 1);
        double s = v->lo + floor(x);
        return s >= v->hi ? v->hi : (uint32_t)s;
    }
    }
    return v->lo;
}
