/* object.c -- collection objects: allocation, effects, snapshots, history.
 *
 * See object.h for the model. This file knows nothing about any particular
 * collection: it frames ops ("u8 opcode, u32 length, bytes"), dispatches them
 * to the type module registered for the object's type, and keeps the list of
 * log entries that make up the object's durable history.
 *
 * Every payload read here may come from a recovered (possibly damaged but
 * checksummed) log, so framing is bounds-checked and a malformed op is
 * reported, never trusted. */
#include <stdlib.h>
#include <string.h>
#include "bigval.h"
#include "le.h"
#include "object.h"
#include "pool.h"

#define OBJ_TYPES 8

static const obj_class *types[OBJ_TYPES];

void obj_register(int type, const obj_class *t) {
    if (type > 0 && type < OBJ_TYPES) types[type] = t;
}

const obj_class *obj_class_of(int type) {
    return type > 0 && type < OBJ_TYPES ? types[type] : NULL;
}

robj *obj_new(int type, unsigned pdb, const char *key, size_t klen) {
    const obj_class *t = obj_class_of(type);
    if (!t) return NULL;
    robj *o = calloc(1, sizeof(robj) + klen);
    if (!o) abort();
    o->type = (uint8_t)type;
    o->db = (uint16_t)pdb;
    o->klen = (uint32_t)klen;
    memcpy(o->key, key, klen);
    o->data = t->create();
    return o;
}

void obj_free(robj *o) {
    if (!o) return;
    const obj_class *t = obj_class_of(o->type);
    if (t && o->data) t->destroy(o->data);
    else if (o->data) bigval_free_data(o->data);   /* a large string's bytes (bigval.c) */
    free(o->hist);
    free(o);
}

/* ---------------- op framing ---------------- */

void obj_put_u32(rbuf *b, uint32_t v) {
    unsigned char le[4];
    le_put_u32(le, v);
    rbuf_append(b, le, 4);
}

void obj_op_head(rbuf *b, uint8_t op, size_t len) {
    rbuf_append(b, &op, 1);
    obj_put_u32(b, (uint32_t)len);
}

void obj_op(rbuf *b, uint8_t op, const void *arg, size_t len) {
    obj_op_head(b, op, len);
    if (len) rbuf_append(b, arg, len);
}

void obj_op2(rbuf *b, uint8_t op, const void *a, size_t alen, const void *c, size_t clen) {
    obj_op_head(b, op, alen + clen);
    if (alen) rbuf_append(b, a, alen);
    if (clen) rbuf_append(b, c, clen);
}

uint32_t obj_get_u32(const char *p) { return le_get_u32(p); }

void obj_put_str(rbuf *b, const char *s, size_t len) {
    obj_put_u32(b, (uint32_t)len);
    rbuf_append(b, s, len);
}

int obj_get_str(const char *buf, size_t len, size_t *pos, const char **s, size_t *slen) {
    if (len - *pos < 4) return -1;
    uint32_t l = obj_get_u32(buf + *pos);
    *pos += 4;
    if (l > len - *pos) return -1;
    *s = buf + *pos;
    *slen = l;
    *pos += l;
    return 0;
}

int obj_apply_payload(robj *o, const char *payload, size_t len) {
    const obj_class *t = obj_class_of(o->type);
    if (!t || len < 1 || (uint8_t)payload[0] != o->type) return -1;
    size_t pos = 1;
    while (pos < len) {
        if (len - pos < 5) return -1;
        uint8_t op = (uint8_t)payload[pos];
        uint32_t n = obj_get_u32(payload + pos + 1);
        pos += 5;
        if (n > len - pos) return -1;
        if (t->apply(o->data, op, payload + pos, n) != 0) return -1;
        pos += n;
    }
    return 0;
}

int obj_load_snapshot(robj *o, const char *payload, size_t len) {
    const obj_class *t = obj_class_of(o->type);
    if (!t || len < 1 || (uint8_t)payload[0] != o->type) return -1;
    void *d = t->load(payload + 1, len - 1);
    if (!d) return -1;
    if (o->data) t->destroy(o->data);
    o->data = d;
    return 0;
}

void obj_encode_snapshot(const robj *o, rbuf *out) {
    rbuf_append(out, &o->type, 1);
    obj_class_of(o->type)->snapshot(o->data, out);
}

/* ---------------- history ---------------- */

void obj_hist_add(robj *o, uint64_t ref, uint64_t bytes, int chunk) {
    if (o->nhist == o->caphist) {
        o->caphist = o->caphist ? o->caphist * 2 : 4;
        o->hist = realloc(o->hist, sizeof(uint64_t) * o->caphist);
        if (!o->hist) abort();
    }
    o->hist[o->nhist++] = ref;
    o->hist_bytes += bytes;
    if (!chunk) o->nwrites++;
}

void obj_hist_clear(robj *o) {
    o->nhist = 0;
    o->nwrites = 0;
    o->hist_bytes = 0;
    o->snap_bytes = 0;
}

int obj_hist_find(const robj *o, uint64_t ref) {
    for (uint32_t i = 0; i < o->nhist; i++)
        if (o->hist[i] == ref) return (int)i;
    return -1;
}

/* Compact when the effects logged since the last snapshot (at least 64
 * entries) add up to more than twice that snapshot's size, or, before the
 * first snapshot, twice an estimate of it (64 bytes per element, cheap
 * enough to check after every write). Rewriting the collection then costs
 * at most about half a byte per byte of effects: amortised O(1) per write.
 * (Counting the snapshot entry itself in the history, or a fixed "every N
 * entries" rule, made large collections compact almost continuously.) */
int obj_wants_snapshot(const robj *o) {
    if (!obj_class_of(o->type)) return 0;   /* large strings (bigval.h): no ops */
    /* The collection's one write so far (with its chunks, if large) holds
     * no dead copy: a snapshot would log the same bytes again (a hash
     * created with one 20 MB field was written twice). */
    if (o->nwrites == 1 && !o->snap_bytes) return 0;
    /* Fewer than 64 entries wait, unless they hold more than a segment:
     * overwriting a large element (bigval.h) would otherwise keep every old
     * copy live for 64 writes. */
    if (o->nhist < 64 && o->hist_bytes - o->snap_bytes < POOL_SEG_SIZE) return 0;
    /* A snapshot that could not be written (no room) is retried only once
     * the history has doubled since, not re-encoded on every write. */
    if (o->compact_failed_at && o->nhist < 2 * o->compact_failed_at) return 0;
    uint64_t base = o->snap_bytes;
    if (!base) base = (uint64_t)obj_class_of(o->type)->size(o->data) * 64 + 4096;
    uint64_t tail = o->hist_bytes - o->snap_bytes;
    /* Past a segment of effects the log holds at most one dead copy's
     * worth: the rewrite still costs at most a byte per byte of effects. */
    if (tail >= POOL_SEG_SIZE) return tail > base;
    return tail > 2 * base;
}
