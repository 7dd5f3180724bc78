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

#endif
