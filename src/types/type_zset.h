/* type_zset.h -- the sorted set type (type_zset.c): its structure, the
 * effects commands encode to change one, and its class's registration.
 *
 * Commands (redis-compat/t_zset.c, t_geo.c through t_zset.h) read the
 * structure directly and change a stored set only through effects written
 * with db_obj_write, which applies them through the class's apply
 * (object.h). A private set (a *STORE command's result) is built with
 * zset_create_result and zset_set, then zset_finish_result. */
#ifndef ROWAN_TYPE_ZSET_H
#define ROWAN_TYPE_ZSET_H
#include <stddef.h>
#include "dict.h"
#include "rbuf.h"
#include "zskiplist.h"

/* The effects (their payloads in type_zset.c's top comment); they are the
 * log's format, so fixed. */
#define ZOP_SET 1
#define ZOP_DEL 2

typedef struct zset {
    dict *d;           /* member -> score (dict_entry.score) */
    zskiplist *zsl;    /* (score, member) order */
    int big;           /* Redis would have converted it to a skiplist */
} zset;

static inline size_t zset_len(const zset *z) { return z->zsl->length; }

zset *zset_create(void);
/* An empty private set for a computed result: built unconverted (big),
 * then zset_finish_result gives it the encoding its final size calls for,
 * as Redis converts it. */
zset *zset_create_result(void);
void zset_finish_result(zset *z);
void zset_destroy(void *data);
/* member := score (added or moved), following Redis's encoding rules. */
void zset_set(zset *z, const char *m, size_t mlen, double score);
/* 1 removed, 0 not a member. */
int zset_remove(zset *z, const char *m, size_t mlen);
/* member's score: 1 found, 0 not a member. */
int zset_score(const zset *z, const char *m, size_t mlen, double *score);

/* A score as the 8 little-endian bytes of its IEEE bits (effects,
 * snapshots, obj_class.elements), and back. */
void zset_put_score(char *p, double d);
double zset_get_score(const char *p);

/* Append a ZOP_SET / ZOP_DEL effect to ops. */
void zset_op_set(rbuf *ops, const char *m, size_t mlen, double score);
void zset_op_del(rbuf *ops, const char *m, size_t mlen);

/* Register the class for OBJ_ZSET (types_init, types.h). */
void zset_register(void);

#endif
