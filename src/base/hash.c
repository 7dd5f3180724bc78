/* hash.c -- Redis Cluster hash slots and the 64-bit index hash.
 *
 * Slots: CRC16 with the XMODEM parameters (polynomial 0x1021, initial value
 * 0, no reflection, no final xor) of the key, or of the part between the
 * first '{' and the first '}' after it when that part is non-empty; then
 * mod 16384. These are Redis Cluster's rules, so cluster-aware clients agree
 * with us about where a key lives.
 *
 * Index hash: a multiply/xor-shift construction of our own. Each 8-byte
 * little-endian word of the key is xored into the state, which is then
 * multiplied by an odd constant and folded (the multiply spreads low bits
 * upwards, the shift brings high bits back down). The tail is loaded as a
 * zero-padded word and the length is mixed in at the end, so keys that
 * differ only by trailing zero bytes still differ. A final avalanche step
 * makes every output bit depend on every input bit: the index uses the low
 * bits for the bucket and the top 16 bits for the tag, so both ends must be
 * good. Words are assembled little-endian explicitly, making the value the
 * same on every machine and every run (recovery recomputes it). There is no
 * secret seed, so the hash does not resist deliberate collision flooding. */
#include "hash.h"

#include <pthread.h>

/* crc16_table[k][i]: what byte i followed by k zero bytes does to a zero
 * CRC. Eight bytes at a time (slicing-by-8) are then eight independent
 * table loads xored together, instead of a chain of eight dependent
 * steps: the slot of every command's key is computed on the request path
 * (hash_slot was 4% of the server's CPU at GET -P 16, perf). */
static uint16_t crc16_table[8][256];
static pthread_once_t crc16_once = PTHREAD_ONCE_INIT;

static void crc16_table_build(void) {
    for (unsigned i = 0; i < 256; i++) {
        uint16_t r = (uint16_t)(i << 8);
        for (int bit = 0; bit < 8; bit++)
            r = (r & 0x8000) ? (uint16_t)((r << 1) ^ 0x1021) : (uint16_t)(r << 1);
        crc16_table[0][i] = r;
    }
    for (int k = 1; k < 8; k++)
        for (unsigned i = 0; i < 256; i++) {
            uint16_t r = crc16_table[k - 1][i];
            crc16_table[k][i] = (uint16_t)(r << 8) ^ crc16_table[0][r >> 8];
        }
}

uint16_t crc16_xmodem(const void *buf, size_t len) {
    pthread_once(&crc16_once, crc16_table_build);
    const uint8_t *p = buf;
    uint16_t r = 0;
    for (; len >= 8; len -= 8, p += 8)
        r = crc16_table[7][(r >> 8) ^ p[0]] ^ crc16_table[6][(r & 0xff) ^ p[1]] ^
            crc16_table[5][p[2]] ^ crc16_table[4][p[3]] ^ crc16_table[3][p[4]] ^
            crc16_table[2][p[5]] ^ crc16_table[1][p[6]] ^ crc16_table[0][p[7]];
    while (len--)
        r = (uint16_t)((r << 8) ^ crc16_table[0][((r >> 8) ^ *p++) & 0xff]);
    return r;
}

/* The hashed part of a key: the first non-empty {tag}, else the whole key. */
static void slot_part(const char *key, size_t len, const char **part, size_t *plen) {
    *part = key;
    *plen = len;
    size_t open = 0;
    while (open < len && key[open] != '{')
        open++;
    if (open == len)
        return;
    size_t close = open + 1;
    while (close < len && key[close] != '}')
        close++;
    if (close == len || close == open + 1)
        return; /* no '}' after the '{', or "{}": hash the whole key */
    *part = key + open + 1;
    *plen = close - open - 1;
}

unsigned hash_slot(const char *key, size_t len) {
    const char *part;
    size_t plen;
    slot_part(key, len, &part, &plen);
    return crc16_xmodem(part, plen) & (HASH_SLOTS - 1);
}

#define HK_SEED 0x24bc313940b88365ULL
#define HK_MUL1 0xa4875fcedb5d8765ULL
#define HK_MUL2 0x54485cdd832ea9abULL
#define HK_MUL3 0x9528893636a2a075ULL

static inline uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    return w;
}

static inline uint64_t hk_step(uint64_t h, uint64_t w) {
    h ^= w;
    h *= HK_MUL1;
    h ^= h >> 29;
    return h;
}

static inline uint64_t hk_final(uint64_t h) {
    h ^= h >> 32;
    h *= HK_MUL2;
    h ^= h >> 29;
    h *= HK_MUL3;
    h ^= h >> 32;
    return h;
}

uint64_t hash_key(unsigned db, const char *key, size_t len) {
    const uint8_t *p = (const uint8_t *)key;
    uint64_t h = hk_step(HK_SEED, (uint64_t)db);
    while (len >= 8) {
        h = hk_step(h, load_le(p, 8));
        p += 8;
        len -= 8;
    }
    /* The tail is zero padded, so the total length follows as one more
     * word: that keeps "a" and "a\0" apart. */
    h = hk_step(h, load_le(p, len));
    h = hk_step(h, (uint64_t)(p - (const uint8_t *)key) + len);
    return hk_final(h);
}
