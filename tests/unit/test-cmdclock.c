/* test-cmdclock.c -- the command timer's clock (src/engine/cmdclock.c):
 * before and after its TSC calibration it never goes backwards and keeps
 * CLOCK_MONOTONIC's microseconds (within 1% over a 200 ms sleep, and its
 * readings within a millisecond of monotonic_us()). */
#include <time.h>
#include "cmdclock.h"
#include "server.h"
#include "unit.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static long long absll(long long v) { return v < 0 ? -v : v; }

int main(void) {
    int64_t prev = cmdclock_us();
    int backwards = 0;
    /* across the calibration (its first 50 ms) */
    for (int i = 0; i < 40; i++) {
        sleep_ms(3);
        for (int k = 0; k < 1000; k++) {
            int64_t now = cmdclock_us();
            if (now < prev) backwards++;
            prev = now;
        }
    }
    CHECK_EQ_LL(backwards, 0);
    CHECK(absll(cmdclock_us() - monotonic_us()) < 1000);
    int64_t c0 = cmdclock_us(), m0 = monotonic_us();
    sleep_ms(200);
    int64_t c1 = cmdclock_us(), m1 = monotonic_us();
    CHECK(absll((c1 - c0) - (m1 - m0)) < (m1 - m0) / 100 + 50);
    CHECK(absll(c1 - m1) < 1000);
    return UNIT_DONE("test-cmdclock");
}
