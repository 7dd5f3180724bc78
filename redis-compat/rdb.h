/* rdb.h -- values in Redis 7.0's RDB object serialization (DUMP/RESTORE).
 *
 * A DUMP payload is: u8 RDB object type, the object's serialization, the
 * RDB version (u16 little endian, 10 for Redis 7.0), then the CRC64 (Jones
 * polynomial, reflected, as Redis computes it) of everything before it, as
 * u64 little endian. rdb.c writes and reads that format; t_dump.c holds
 * the commands. */
#ifndef ROWAN_RDB_H
#define ROWAN_RDB_H
#include <stddef.h>
#include <stdint.h>
#include "db.h"
#include "object.h"
#include "resp.h"

#define RDB_VERSION 10   /* what Redis 7.0 writes and the newest it reads */

/* Redis's CRC64 (crc64("123456789") = 0xe9c6d914c4b8d9ca). */
uint64_t rdb_crc64(uint64_t crc, const void *p, size_t len);

/* Append v's DUMP payload (type, object, version, CRC) to out. */
void rdb_dump_value(const db_val *v, rbuf *out);

/* 0 if the payload's version is one we read and its CRC matches, else -1
 * (Redis: "ERR DUMP payload version or checksum are wrong"). */
int rdb_verify_payload(const char *p, size_t len);

/* Decode a verified payload. A string: returns OBJ_STRING with its bytes in
 * *str (appended). A collection: returns its type with a new private object
 * in *obj (obj_free it). -1 if the object is malformed, empty, or of a type
 * we do not read (Redis: "ERR Bad data format"). */
int rdb_load_value(const char *p, size_t len, rbuf *str, robj **obj);

/* FUNCTION DUMP/RESTORE's pieces (t_function.c): an RDB string (length +
 * bytes, or an integer encoding; never LZF), the footer (version and CRC64
 * of out[start..]), and reading a string (LZF too) at p[*pos..len), *pos
 * advanced; -1 if malformed. */
void rdb_put_string(rbuf *out, const char *s, size_t len);
void rdb_put_footer(rbuf *out, size_t start);
int rdb_read_string(const char *p, size_t len, size_t *pos, rbuf *out);

/* Streams (RDB type 19): t_stream.c writes a stream's object (after the
 * type byte) with these pieces: an RDB length, and a listpack built by
 * lp_begin (returns its start in b), lp_add / lp_add_int per element (an
 * integer's text is stored as an integer, as Redis does) and lp_end. */
void stream_rdb_save(const void *stream, rbuf *out);
void rdb_put_len(rbuf *out, uint64_t n);
size_t rdb_lp_begin(rbuf *b);
void rdb_lp_add(rbuf *b, const char *s, size_t len);
void rdb_lp_add_int(rbuf *b, long long v);
void rdb_lp_end(rbuf *b, size_t start, size_t count);

/* t_dump.c: MIGRATE's key positions (argv[3], or those after KEYS). */
int migrate_keys(int argc, const char *const *argv, const size_t *argvlen, int *idx, int max);

#endif
