/* cmdclock.c -- the command timer's clock (see cmdclock.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cmdclock.h"
#include "server.h"
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#ifdef HAVE_TSC
#define CALIBRATE_NS 50000000LL

enum { UNKNOWN, CALIBRATING, READY, UNUSABLE };
static _Atomic int state;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* a TSC reading and CLOCK_MONOTONIC's at the same moment, and the rate */
static int64_t base_ns;
static uint64_t base_tsc;
static double base_us, us_per_tick;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int tsc_is_clocksource(void) {
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f) return 0;
    char name[32] = "";
    int ok = fgets(name, sizeof name, f) && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return ok;
}

/* Not calibrated yet: CLOCK_MONOTONIC, and the calibration's steps. */
static int64_t calibrate(void) {
    int64_t ns = mono_ns();
    uint64_t t = __rdtsc();
    pthread_mutex_lock(&mu);
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == UNKNOWN) {
        base_ns = ns;
        base_tsc = t;
        atomic_store_explicit(&state, tsc_is_clocksource() ? CALIBRATING : UNUSABLE,
                              memory_order_relaxed);
    } else if (s == CALIBRATING && ns - base_ns >= CALIBRATE_NS && t > base_tsc) {
        us_per_tick = (double)(ns - base_ns) / 1000.0 / (double)(t - base_tsc);
        base_us = (double)base_ns / 1000.0;
        atomic_store_explicit(&state, READY, memory_order_release);
    }
    pthread_mutex_unlock(&mu);
    return ns / 1000;
}

int64_t cmdclock_us(void) {
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s == READY) return (int64_t)(base_us + (double)(int64_t)(__rdtsc() - base_tsc) * us_per_tick);
    if (s != UNUSABLE) return calibrate();
    return monotonic_us();
}
#else
int64_t cmdclock_us(void) { return monotonic_us(); }
#endif
