/* report.h -- the run's results as a table or as JSON.
 *
 * Both carry the same facts: the configuration that produced them,
 * throughput, per-operation-type counts and latency percentiles (p50, p90,
 * p99, p99.9, max, in microseconds, from the histograms of hist.h), command
 * counts, redirects, and errors by kind. The JSON is what bench-compare and
 * the tests read; its keys are documented in utils/bench/README.md. */
#ifndef ROWAN_BENCH_REPORT_H
#define ROWAN_BENCH_REPORT_H
#include <stdio.h>
#include "driver.h"
#include "slots.h"
#include "stats.h"

void report_table(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map,
                  const struct stats *st, double elapsed_s);
void report_json(FILE *f, const struct bench_cfg *cfg, const struct slotmap *map,
                 const struct stats *st, double elapsed_s);

#endif
