/* type_list.h -- the list type (type_list.c): its structure, the effects
 * commands encode to change one, and its class's registration.
 *
 * Commands (redis-compat/t_list.c) read the structure directly and change
 * it only through effects written with db_obj_write, which applies them
 * through the class's apply (object.h). */
#ifndef ROWAN_TYPE_LIST_H
#define ROWAN_TYPE_LIST_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rbuf.h"

/* The effects (their payloads in type_list.c's top comment); they are the
 * log's format, so fixed. */
enum {
    LOP_LEN = 1,
    LOP_PUSH_HEAD,
    LOP_PUSH_TAIL,
    LOP_POP_HEAD,
    LOP_POP_TAIL,
    LOP_SET,
    LOP_REMOVE,
    LOP_INSERT,
    LOP_TRIM,
};

typedef struct lelem {
    uint32_t len;
    char b[];
} lelem;

/* A ring buffer of element pointers. */
typedef struct rlist {
    lelem **a;
    size_t cap;      /* 0 or a power of two */
    size_t head, n;
    size_t bytes;    /* element bytes, for MEMORY USAGE */
} rlist;

static inline lelem **rl_slot(const rlist *l, size_t i) { return &l->a[(l->head + i) & (l->cap - 1)]; }
static inline lelem *rl_at(const rlist *l, size_t i) { return *rl_slot(l, i); }

static inline int elem_eq(const lelem *e, const char *p, size_t len) {
    return e->len == len && (len == 0 || memcmp(e->b, p, len) == 0);
}

/* Start an effect payload (rbuf_init's b): LOP_LEN, the precondition on
 * the list's current length n. */
void list_ops_begin(rbuf *b, size_t n);
/* Append an effect whose argument is one u64 (LOP_POP_*, LOP_LEN)... */
void list_op_u64(rbuf *b, uint8_t op, uint64_t v);
/* ...or a u64 then an element (LOP_SET, LOP_INSERT). */
void list_op_u64_elem(rbuf *b, uint8_t op, uint64_t v, const char *e, size_t elen);

/* Register the class for OBJ_LIST (types_init, types.h). */
void list_register(void);

#endif
