/* object.h -- collection values (hash, list, set, zset) as DRAM objects.
 *
 * A string lives in the log and the index points at its entry. A collection
 * lives in DRAM as an robj, and the index item holds (pointer | 1); the
 * object's durable history is a chain of log entries:
 *
 *   [LOG_SNAPSHOT]  the whole collection at some version (optional), then
 *   LOG_COLL_OP...  element effects, in version order.
 *
 * An effect entry's payload is: u8 object type, then ops, each
 *   u8 opcode, u32 length (little endian), <length bytes of arguments>,
 * whose meaning the type module defines (src/types/type_hash.c etc.). Its
 * header carries the object's expiry after the entry (so EXPIRE/PERSIST on
 * a collection is an effect entry with no ops). A snapshot's payload is u8
 * type then the type module's serialization.
 *
 * One rule keeps recovery exact: the live path and recovery apply effects
 * through the same function (obj_apply). A command first encodes the
 * effects of what it wants to do, db_obj_write logs them and then applies
 * them, so the DRAM object is always what replaying its history yields.
 *
 * The object remembers the pool references of its history entries (hist), so
 * the cleaner can tell a live effect entry (its reference is in hist) from a
 * dead one, and so that a snapshot can retire the entries it replaces
 * (subtracting their live bytes). History is compacted by writing a snapshot
 * when it grows past max(64 entries, 2x the snapshot's size in bytes).
 *
 * A collection never stays empty: a command whose effects would empty it
 * deletes the key instead (db_del), which logs a deletion record like DEL. */
#ifndef ROWAN_OBJECT_H
#define ROWAN_OBJECT_H
#include <stddef.h>
#include <stdint.h>
#include "rbuf.h"

typedef struct robj {
    uint8_t type;           /* enum obj_type (db.h); OBJ_STRING only for a
                             * string too large for one entry (bigval.h) */
    uint16_t db;            /* physical db */
    uint32_t klen;
    int64_t expire_ms;      /* 0 = none */
    uint64_t ver;           /* version of the newest entry applied */
    uint64_t *hist;         /* pool refs of the history entries, in version order */
    uint32_t nhist, caphist;
    uint64_t hist_bytes;    /* log_entry_len summed over hist */
    uint64_t snap_bytes;    /* size of the snapshot entry heading hist, 0 if none */
    uint32_t compact_failed_at; /* nhist when a snapshot last did not fit, 0 = never */
    uint32_t nwrites;       /* entries in hist other than large values' chunks */
    void *data;             /* the type module's structure */
    char key[];             /* klen bytes */
} robj;

/* Visitor of a collection's elements (obj_class.elements), each as one or
 * two byte strings: hash (field, value); set (member, NULL 0); zset
 * (member, score as the 8 little-endian bytes of the double, -0 given as
 * 0); list (element, NULL 0). */
typedef void (*obj_elem_fn)(void *arg, const char *a, size_t alen, const char *b, size_t blen);

/* What each collection type provides (src/types/type_*.c; the core
 * registers them, types_init in types.h). */
typedef struct obj_class {
    const char *name;       /* TYPE's answer: "hash", "list", "set", "zset" */
    void *(*create)(void);
    void (*destroy)(void *data);
    /* Apply one op to data. Returns 0, or -1 on a malformed op (recovery
     * reports it; the live path never produces one). */
    int (*apply)(void *data, uint8_t op, const char *arg, size_t len);
    /* Serialize data (appended to out) / rebuild it (returns NULL if bad). */
    void (*snapshot)(const void *data, rbuf *out);
    void *(*load)(const char *buf, size_t len);
    /* Number of elements (0 = empty). */
    long long (*size)(const void *data);
    /* OBJECT ENCODING's answer for this value. */
    const char *(*encoding)(const void *data);
    /* DRAM bytes used, for MEMORY USAGE. */
    size_t (*memory)(const void *data);
    /* Visit every element: lists in order, the others in any order (the
     * contents, not the layout: db_shard_digest hashes them). */
    void (*elements)(const void *data, obj_elem_fn fn, void *arg);
} obj_class;

void obj_register(int type, const obj_class *t);
const obj_class *obj_class_of(int type);

/* Index references: collections are (robj pointer | 1). */
static inline int ref_is_obj(uint64_t ref) { return (int)(ref & 1); }
static inline robj *ref_obj(uint64_t ref) { return (robj *)(uintptr_t)(ref & ~1ULL); }
static inline uint64_t obj_ref(const robj *o) { return (uint64_t)(uintptr_t)o | 1; }

robj *obj_new(int type, unsigned pdb, const char *key, size_t klen);
void obj_free(robj *o);

/* ---- encoding ops (for command code) ----
 * ops are appended to an rbuf: obj_op(&b, op, arg, len) or with two parts. */
void obj_op(rbuf *b, uint8_t op, const void *arg, size_t len);
/* Only an op's header (op, argument length len): its len bytes follow. */
void obj_op_head(rbuf *b, uint8_t op, size_t len);
void obj_op2(rbuf *b, uint8_t op, const void *a, size_t alen, const void *c, size_t clen);

/* The little-endian u32 that frames ops, and that the type modules use for
 * lengths in their snapshots and op arguments. */
void obj_put_u32(rbuf *b, uint32_t v);
uint32_t obj_get_u32(const char *p);
/* A string as the type modules write one: u32 length, then the bytes. */
void obj_put_str(rbuf *b, const char *s, size_t len);
/* Read such a string at *pos of buf (len bytes): 0 with *s, *slen set and
 * *pos past it, or -1 if it overruns buf (the bytes may come from a
 * damaged log). */
int obj_get_str(const char *buf, size_t len, size_t *pos, const char **s, size_t *slen);

/* Apply an effect payload (u8 type + ops) to o. -1 if malformed. */
int obj_apply_payload(robj *o, const char *payload, size_t len);
/* Replace o's data with a snapshot payload (u8 type + serialization). */
int obj_load_snapshot(robj *o, const char *payload, size_t len);
/* Encode o's snapshot payload into out (u8 type + serialization). */
void obj_encode_snapshot(const robj *o, rbuf *out);

/* History bookkeeping (db.c and the cleaner). */
void obj_hist_add(robj *o, uint64_t ref, uint64_t bytes, int chunk);
/* Forget every history entry (returns nothing; the caller subtracts live
 * bytes first with obj_hist_foreach). */
void obj_hist_clear(robj *o);
int obj_hist_find(const robj *o, uint64_t ref);
/* Should a snapshot replace the history? */
int obj_wants_snapshot(const robj *o);

#endif
