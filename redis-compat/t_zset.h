/* t_zset.h -- what other families (GEO, t_geo.c) use of the sorted set:
 * reading a zset value, and storing a computed one. Writes of elements go
 * through the ZADD command itself (zaddCommand), so they are logged as
 * zset effects like any ZADD. */
#ifndef ROWAN_T_ZSET_H
#define ROWAN_T_ZSET_H
#include "client.h"
#include "db.h"
#include "zskiplist.h"

/* argv[i] as a zset: 1 found, 0 missing, -1 another type (WRONGTYPE
 * replied). for_write uses db_peek (no hit/miss counting). */
int lookup_zset(client *c, int i, db_val *v, int for_write);
/* The (score, member) order of a zset value lookup_zset found. */
const zskiplist *zset_skiplist(const db_val *v);
/* member's score: 1 found, 0 not a member. */
int zset_member_score(const db_val *v, const char *m, size_t mlen, double *score);

/* ZADD itself (GEOADD runs it on rewritten arguments). */
void zaddCommand(client *c);

/* A private zset to fill and then store as argv[dsti] (as ZUNIONSTORE
 * does: replaces the key, clears its TTL, an empty one deletes the key);
 * zset_store_result replies with the size and frees it. */
void *zset_result_new(void);
void zset_result_add(void *z, const char *m, size_t mlen, double score);
void zset_store_result(client *c, int dsti, void *z);

#endif
