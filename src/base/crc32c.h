/* crc32c.h -- CRC32C (Castagnoli), the checksum of every log entry.
 *
 * Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise;
 * both give identical results. crc32c(0, buf, len) is the standard CRC32C
 * (crc32c(0, "123456789", 9) == 0xE3069283). */
#ifndef ROWAN_CRC32C_H
#define ROWAN_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: crc32c(crc32c(0, a, n), b, m) == crc32c(0, a||b, n+m). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The two implementations behind crc32c(), exposed so tests can check that
 * they agree. crc32c_hw needs crc32c_hw_available() (SSE4.2). */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);
int crc32c_hw_available(void);

#endif
