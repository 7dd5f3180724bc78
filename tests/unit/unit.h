/* unit.h -- the minimal check harness every C unit test uses.
 *
 * CHECK(cond) counts and reports failures without stopping, so one run shows
 * every broken check; UNIT_DONE() prints "<name>: N passed, M failed" and
 * returns the exit status (nonzero when anything failed). */
#ifndef ROWAN_UNIT_H
#define ROWAN_UNIT_H
#include <stdio.h>

static int unit_pass, unit_fail;

#define CHECK(cond) do { \
    if (cond) unit_pass++; \
    else { unit_fail++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

#define CHECK_EQ_LL(a, b) do { \
    long long _a = (long long)(a), _b = (long long)(b); \
    if (_a == _b) unit_pass++; \
    else { unit_fail++; fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", \
                                __FILE__, __LINE__, #a, #b, _a, _b); } \
} while (0)

#define UNIT_DONE(name) \
    (printf("%s: %d passed, %d failed\n", (name), unit_pass, unit_fail), unit_fail ? 1 : 0)

#endif
