/* type_stream.h -- the stream type (type_stream.c): its structure, the
 * effects commands encode to change one, and its class's registration.
 *
 * Commands (redis-compat/t_stream.c) read the structure directly and change
 * it only through effects written with db_obj_write, which applies them
 * through the class's apply (object.h). */
#ifndef ROWAN_TYPE_STREAM_H
#define ROWAN_TYPE_STREAM_H
#include <stddef.h>
#include <stdint.h>
#include "rbuf.h"

/* The effects (their payloads in type_stream.c's top comment); they are
 * the log's format, so fixed. */
enum {
    SOP_ADD = 1, SOP_DEL, SOP_META, SOP_GCREATE, SOP_GSETID, SOP_GDESTROY,
    SOP_CCREATE, SOP_CDEL, SOP_PELSET, SOP_PELDEL
};

typedef struct sid { uint64_t ms, seq; } sid;

typedef struct sentry {
    sid id;
    uint64_t node;          /* seq of the node holding it */
    uint32_t nf;            /* fields (pairs) */
    uint32_t blen;
    char *blob;             /* (u32 len, bytes) x 2*nf; NULL = deleted */
} sentry;

typedef struct snode {
    uint64_t seq;
    uint32_t valid, total;  /* live entries; entries ever added */
    uint64_t bytes;         /* the listpack's master fields and entries */
    sid master;             /* the master entry's ID (the node's first) */
    char *mfields;          /* its fields: (u32 len, bytes)... */
    uint32_t mflen, nmf;
} snode;


typedef struct sconsumer {
    char *name; size_t nlen;
    int64_t seen;
    size_t npending;
} sconsumer;

typedef struct spel {
    sid id;
    sconsumer *owner;
    int64_t time;
    uint64_t count;
} spel;

typedef struct sgroup {
    char *name; size_t nlen;
    sid last_id;
    long long entries_read;
    spel *pel; size_t npel, cappel;        /* sorted by id */
    sconsumer **cons; size_t ncons, capcons; /* sorted by name */
} sgroup;

typedef struct stream {
    sentry *e; size_t n, cap;   /* sorted by id, with tombstones */
    size_t len, ndead;
    snode *nodes; size_t nnodes, capnodes;
    uint64_t next_node;
    sid last_id, max_deleted;
    uint64_t entries_added;
    sgroup **groups; size_t ngroups, capgroups; /* sorted by name */
    size_t bytes;               /* blobs, for MEMORY USAGE */
} stream;

/* ---- IDs ---- */
int sid_cmp(sid a, sid b);
int sid_qcmp(const void *a, const void *b);   /* qsort's form of sid_cmp */
int sid_zero(sid a);
/* The next / previous ID; -1 if there is none (a wraps around). */
int sid_incr(sid *a);
int sid_decr(sid *a);

/* ---- effect arguments (little endian, type_stream.c's top comment) ---- */
void stream_put_sid(rbuf *b, sid a);
sid stream_get_sid(const char *p);
void stream_put_u64(rbuf *b, uint64_t v);
/* (strings: obj_put_str, object.h) */

/* ---- reading the structure ---- */
/* First index of s->e whose id >= id (tombstones included). */
size_t stream_entry_lower(const stream *s, sid id);
/* The live entry with this id, or NULL. */
sentry *stream_entry_find(const stream *s, sid id);
const sentry *stream_first_live(const stream *s);
const sentry *stream_last_live(const stream *s);
/* The first live entry's id, 0-0 when empty. */
sid stream_first_id(const stream *s);
/* Does the next XADD (fields of flen bytes) start a new node? */
int stream_needs_new_node(const stream *s, uint64_t flen);
/* The order of group and consumer names (memcmp, then length). */
int stream_name_cmp(const char *a, size_t alen, const char *b, size_t blen);
sgroup *stream_group_find(const stream *s, const char *name, size_t len);
sconsumer *stream_cons_find(const sgroup *g, const char *name, size_t len);
/* First index of g->pel whose id >= id. */
size_t stream_pel_lower(const sgroup *g, sid id);
spel *stream_pel_find(const sgroup *g, sid id);

/* Register the class for OBJ_STREAM (types_init, types.h). */
void stream_register(void);

#endif
