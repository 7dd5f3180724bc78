/* le.h -- little-endian fields in byte buffers: log entry headers, the
 * replication wire format (acks), collection effect payloads. Every
 * persisted or transmitted integer in Rowan is little endian, whatever the
 * host, so these are the only way such fields are read or written. */
#ifndef ROWAN_LE_H
#define ROWAN_LE_H
#include <stdint.h>

static inline void le_put_u16(void *dst, uint16_t v) {
    uint8_t *p = dst;
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void le_put_u32(void *dst, uint32_t v) {
    uint8_t *p = dst;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void le_put_u64(void *dst, uint64_t v) {
    uint8_t *p = dst;
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t le_get_u16(const void *src) {
    const uint8_t *p = src;
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t le_get_u32(const void *src) {
    const uint8_t *p = src;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t le_get_u64(const void *src) {
    const uint8_t *p = src;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
