/* cmdclock.h -- the command timer's clock (INFO commandstats, SLOWLOG,
 * LATENCY): microseconds on CLOCK_MONOTONIC's scale.
 *
 * Every command reads it twice, around its run. Where the kernel's own
 * clocksource is the TSC (so the kernel found it constant and in step
 * across CPUs) it is read with rdtsc, about 12 ns here against 46 for
 * clock_gettime (BENCHMARKS, the disk commit path, fifth pass); elsewhere,
 * and for the first 50 ms after the first reading (the TSC's rate is
 * measured against CLOCK_MONOTONIC over them), it is monotonic_us().
 * A reading is truncated to the microsecond as monotonic_us() is, and a
 * duration is the difference of two readings, as before: a command
 * shorter than a microsecond counts 1 as often as it crosses one, so the
 * sums stay unbiased. Thread-safe. */
#ifndef ROWAN_CMDCLOCK_H
#define ROWAN_CMDCLOCK_H
#include <stdint.h>

int64_t cmdclock_us(void);

#endif
