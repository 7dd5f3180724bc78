/* type_set.h -- the set type (type_set.c): its structure, the effects
 * commands encode to change one, and its class's registration.
 *
 * Commands (redis-compat/t_set.c) read the structure directly and change
 * a stored set only through effects written with db_obj_write, which
 * applies them through the class's apply (object.h). */
#ifndef ROWAN_TYPE_SET_H
#define ROWAN_TYPE_SET_H
#include <stddef.h>
#include "dict.h"
#include "rbuf.h"

/* The effects (their payloads in type_set.c's top comment); they are the
 * log's format, so fixed. */
#define SET_OP_ADD 1
#define SET_OP_REM 2
#define SET_OP_ENC 3

/* The encoding Redis would report (OBJECT ENCODING), in conversion order. */
enum { SET_ENC_INTSET = 0, SET_ENC_LISTPACK = 1, SET_ENC_HT = 2 };

typedef struct setobj {
    dict *d;
    int enc;
} setobj;

/* Add a member to a set that is not stored (a *STORE command's result),
 * following Redis's encoding conversions as apply does. */
void set_add(setobj *s, const char *m, size_t len);

/* Append a SET_OP_ADD / SET_OP_REM effect to ops. */
void set_op_add(rbuf *ops, const char *m, size_t len);
void set_op_rem(rbuf *ops, const char *m, size_t len);
/* Start the effects of a set created by adding n members, the first of
 * them first: Redis sizes the new set by n (SET_OP_ENC when that makes it
 * a hashtable from the start). */
void set_op_new(rbuf *ops, size_t n, const char *first, size_t flen);

/* Register the class for OBJ_SET (types_init, types.h). */
void set_register(void);

#endif
