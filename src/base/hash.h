/* hash.h -- key hashing: Redis Cluster slots and the index hash.
 *
 * A key's slot is CRC16-XMODEM(key) mod 16384, hashing only the part inside
 * the first non-empty {...} when there is one, exactly as Redis Cluster does,
 * so cluster-aware clients compute the same slot we do. The index hash is a
 * separate 64-bit hash of (db, key): its low bits choose a bucket, and some
 * of its bits are stored in the index item (index.h). */
#ifndef ROWAN_HASH_H
#define ROWAN_HASH_H
#include <stddef.h>
#include <stdint.h>

#define HASH_SLOTS 16384

uint16_t crc16_xmodem(const void *buf, size_t len);
/* Redis Cluster hash slot of a key, honouring {hash tags}. */
unsigned hash_slot(const char *key, size_t len);
/* 64-bit hash of a key within a (physical) database number. Well mixed in all
 * bits; deterministic across runs and machines (recovery recomputes it). */
uint64_t hash_key(unsigned db, const char *key, size_t len);

#endif
