/* crc32c.c -- CRC32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * Two implementations compute the same function:
 *  - crc32c_hw: the SSE4.2 `crc32` instruction, 8 bytes per step. Compiled
 *    with a per-function target attribute so the rest of the program does not
 *    need -msse4.2; it may only run on CPUs that report sse4.2.
 *  - crc32c_sw: a byte-at-a-time table, for CPUs without SSE4.2 (and as the
 *    reference the tests compare the instruction against).
 * crc32c() picks one on first use (cpuid via __builtin_cpu_supports) and
 * remembers the choice in a function pointer.
 *
 * Convention: the running CRC is kept inverted internally; callers pass and
 * receive the finished (non-inverted) value, so crc32c(0, ...) is the
 * standard CRC32C and calls can be chained over consecutive buffers. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

/* Table entry i is the CRC register after shifting byte i through 8 steps
 * of the bitwise algorithm. */
static void crc_table_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i;
        for (int bit = 0; bit < 8; bit++)
            r = (r & 1) ? (r >> 1) ^ CRC32C_POLY : r >> 1;
        crc_table[i] = r;
    }
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len) {
    pthread_once(&crc_table_once, crc_table_build);
    const uint8_t *p = buf;
    uint32_t r = ~crc;
    while (len--)
        r = (r >> 8) ^ crc_table[(r ^ *p++) & 0xff];
    return ~r;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Byte steps until p is 8-byte aligned, then whole words, then the tail.
 * Aligned loads are not required by the instruction but avoid split-line
 * loads on long buffers. */
__attribute__((target("sse4.2")))
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    const uint8_t *p = buf;
    uint64_t r = (uint32_t)~crc;
    while (len && ((uintptr_t)p & 7)) {
        r = _mm_crc32_u8((uint32_t)r, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        r = _mm_crc32_u64(r, w);
        p += 8;
        len -= 8;
    }
    while (len--)
        r = _mm_crc32_u8((uint32_t)r, *p++);
    return ~(uint32_t)r;
}

int crc32c_hw_available(void) {
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
#else
/* No instruction on this architecture: the "hardware" path is the table. */
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len) {
    return crc32c_sw(crc, buf, len);
}

int crc32c_hw_available(void) { return 0; }
#endif

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);
static crc_fn crc_impl; /* resolved on first call; atomics keep TSan quiet */

static crc_fn crc_pick(void) {
    return crc32c_hw_available() ? crc32c_hw : crc32c_sw;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len) {
    crc_fn f = __atomic_load_n(&crc_impl, __ATOMIC_RELAXED);
    if (!f) {
        f = crc_pick();
        __atomic_store_n(&crc_impl, f, __ATOMIC_RELAXED);
    }
    return f(crc, buf, len);
}
