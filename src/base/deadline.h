/* deadline.h -- absolute timeouts for pthread_cond_timedwait.
 *
 * One helper for every thread that waits with a timeout (ZooKeeper events,
 * the digest's poll, the bench driver): the clock must be the one the
 * condition variable uses (CLOCK_REALTIME unless set otherwise). */
#ifndef ROWAN_DEADLINE_H
#define ROWAN_DEADLINE_H
#include <time.h>

/* Now on clock clk, plus ms milliseconds. */
static inline struct timespec deadline_in_ms(clockid_t clk, long ms) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
