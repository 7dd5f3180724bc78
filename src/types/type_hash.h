/* type_hash.h -- the hash type (type_hash.c): its structure, the effects
 * commands encode to change one, and its class's registration.
 *
 * Commands (redis-compat/t_hash.c) read the structure directly and change
 * it only through effects written with db_obj_write, which applies them
 * through the class's apply (object.h). */
#ifndef ROWAN_TYPE_HASH_H
#define ROWAN_TYPE_HASH_H
#include <stddef.h>
#include <stdint.h>
#include "dict.h"
#include "rbuf.h"

/* The effects (their payloads in type_hash.c's top comment); they are the
 * log's format, so fixed. */
#define HASH_OP_SET 1
#define HASH_OP_DEL 2

typedef struct hashobj {
    dict *d;
    int big;    /* would be a hashtable in Redis (sticky) */
    /* field names in insertion order while !big (type_hash.c's top comment) */
    char **order;
    uint32_t *ordlen;   /* !big: every field is at most hash-max-listpack-value bytes */
    size_t nord, capord;
} hashobj;

/* Visit every field: insertion order while small, else the dict's. */
void hash_foreach(const hashobj *h, dict_iter_fn fn, void *arg);

/* Append a HASH_OP_SET effect to ops (scratch is a work buffer). */
void hash_op_set(rbuf *ops, rbuf *scratch, const char *f, size_t flen, const char *v, size_t vlen);
/* hash_op_set without the value's vlen bytes, which the caller appends
 * (db_obj_write_ops_tail). */
void hash_op_set_head(rbuf *ops, const char *f, size_t flen, size_t vlen);
/* Append a HASH_OP_DEL effect to ops. */
void hash_op_del(rbuf *ops, const char *f, size_t flen);

/* Register the class for OBJ_HASH (types_init, types.h). */
void hash_register(void);

#endif
