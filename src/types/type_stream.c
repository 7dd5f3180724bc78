/* type_stream.c -- the stream type: its structure, effects and class
 * (object.h).
 *
 * A stream lives in DRAM like every collection (object.h): an array of
 * entries sorted by ID, plus its consumer groups. Its durable history is a
 * chain of effect entries; commands (redis-compat/t_stream.c) encode
 * effects and db_obj_write logs them and applies them through
 * stream_apply, the function recovery replays them with. Effects carry
 * absolute values (the ID an XADD chose, a delivery's time and count),
 * never "now" or "next", so a replay gives exactly the state the live path
 * had:
 *
 *   SOP_ADD      id(16) u8 new_node, then the fields: (u32 len, bytes)...
 *   SOP_DEL      id(16) u8 xdel (1: XDEL, which raises max-deleted-id;
 *                0: trimming, which does not)
 *   SOP_META     last_id(16) max_deleted(16) entries_added(8)   (XSETID)
 *   SOP_GCREATE  last_id(16) entries_read(8) group name
 *   SOP_GSETID   last_id(16) entries_read(8) group name
 *   SOP_GDESTROY group name
 *   SOP_CCREATE  seen(8) u32 glen group consumer   (creates if absent;
 *                sets seen-time)
 *   SOP_CDEL     u32 glen group consumer (its pending entries go too)
 *   SOP_PELSET   u32 glen group u32 clen consumer, then (id(16) time(8)
 *                count(8))...: each ID pending for that consumer with that
 *                delivery time and count
 *   SOP_PELDEL   u32 glen group, then ids(16)...
 * IDs are two little-endian u64 (ms, seq).
 *
 * Nodes. Redis stores entries in listpack nodes of at most
 * stream-node-max-entries entries (deleted ones count) and about
 * stream-node-max-bytes bytes; approximate trimming (~) removes only whole
 * nodes. The same node boundaries are kept here (each entry names its
 * node; SOP_ADD records whether it started one, so a replay does not
 * depend on the configuration at recovery time), so MAXLEN ~ / MINID ~
 * trim what Redis trims and XINFO's radix-tree-keys counts nodes.
 *
 * Deleted entries stay in the array as tombstones (blob NULL) until they
 * outnumber the live ones; the array is then compacted.
 *
 * The snapshot is: header (last_id, max_deleted, entries_added, next node
 * seq), nodes (seq, valid, total, bytes), live entries (id, node seq,
 * fields blob), groups (name, last_id, entries_read, consumers (name,
 * seen), pending entries (id, consumer index, time, count)). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "le.h"
#include "object.h"
#include "server.h"
#include "strutil.h"
#include "type_stream.h"

static void node_free(snode *nd) { free(nd->mfields); }

/* ---------------- IDs ---------------- */

int sid_cmp(sid a, sid b) {
    if (a.ms != b.ms) return a.ms < b.ms ? -1 : 1;
    if (a.seq != b.seq) return a.seq < b.seq ? -1 : 1;
    return 0;
}
int sid_qcmp(const void *a, const void *b) { return sid_cmp(*(const sid *)a, *(const sid *)b); }
int sid_zero(sid a) { return a.ms == 0 && a.seq == 0; }

/* The next ID; -1 if a is the last possible one. */
int sid_incr(sid *a) {
    if (a->seq == UINT64_MAX) {
        if (a->ms == UINT64_MAX) { a->ms = a->seq = 0; return -1; }
        a->ms++;
        a->seq = 0;
    } else {
        a->seq++;
    }
    return 0;
}

int sid_decr(sid *a) {
    if (a->seq == 0) {
        if (a->ms == 0) { a->ms = a->seq = UINT64_MAX; return -1; }
        a->ms--;
        a->seq = UINT64_MAX;
    } else {
        a->seq--;
    }
    return 0;
}

void stream_put_sid(rbuf *b, sid a) {
    unsigned char le[16];
    le_put_u64(le, a.ms);
    le_put_u64(le + 8, a.seq);
    rbuf_append(b, le, 16);
}
sid stream_get_sid(const char *p) { return (sid){le_get_u64(p), le_get_u64(p + 8)}; }
void stream_put_u64(rbuf *b, uint64_t v) {
    unsigned char le[8];
    le_put_u64(le, v);
    rbuf_append(b, le, 8);
}

/* ---------------- the structure ---------------- */

static void *stream_create(void) {
    stream *s = calloc(1, sizeof(*s));
    if (!s) abort();
    s->next_node = 1;
    return s;
}

static void group_free(sgroup *g) {
    for (size_t i = 0; i < g->ncons; i++) {
        free(g->cons[i]->name);
        free(g->cons[i]);
    }
    free(g->cons);
    free(g->pel);
    free(g->name);
    free(g);
}

static void stream_destroy(void *data) {
    stream *s = data;
    for (size_t i = 0; i < s->n; i++) free(s->e[i].blob);
    free(s->e);
    for (size_t i = 0; i < s->nnodes; i++) node_free(&s->nodes[i]);
    free(s->nodes);
    for (size_t i = 0; i < s->ngroups; i++) group_free(s->groups[i]);
    free(s->groups);
    free(s);
}

/* First index of an array sorted by id whose id >= id: the array holds n
 * items of `size` bytes, each beginning with its sid (sentry, spel). */
static size_t sid_lower(const void *base, size_t n, size_t size, sid id) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        sid at;
        memcpy(&at, (const char *)base + mid * size, sizeof(at));
        if (sid_cmp(at, id) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* First index whose id >= id (tombstones included). */
size_t stream_entry_lower(const stream *s, sid id) {
    return sid_lower(s->e, s->n, sizeof(*s->e), id);
}

sentry *stream_entry_find(const stream *s, sid id) {
    size_t i = stream_entry_lower(s, id);
    if (i < s->n && sid_cmp(s->e[i].id, id) == 0 && s->e[i].blob) return &s->e[i];
    return NULL;
}

const sentry *stream_first_live(const stream *s) {
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].blob) return &s->e[i];
    return NULL;
}

const sentry *stream_last_live(const stream *s) {
    for (size_t i = s->n; i > 0; i--)
        if (s->e[i - 1].blob) return &s->e[i - 1];
    return NULL;
}

sid stream_first_id(const stream *s) {
    const sentry *e = stream_first_live(s);
    return e ? e->id : (sid){0, 0};
}

static snode *node_find(stream *s, uint64_t seq, size_t *at) {
    size_t lo = 0, hi = s->nnodes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->nodes[mid].seq < seq) lo = mid + 1;
        else hi = mid;
    }
    if (lo < s->nnodes && s->nodes[lo].seq == seq) {
        if (at) *at = lo;
        return &s->nodes[lo];
    }
    return NULL;
}

static void compact(stream *s) {
    size_t j = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].blob) s->e[j++] = s->e[i];
    s->n = j;
    s->ndead = 0;
}

/* Remove the live entry at index i (XDEL or trimming). */
static void entry_remove(stream *s, size_t i) {
    sentry *e = &s->e[i];
    size_t at;
    snode *nd = node_find(s, e->node, &at);
    if (nd && --nd->valid == 0) {
        node_free(nd);
        memmove(s->nodes + at, s->nodes + at + 1, sizeof(snode) * (s->nnodes - at - 1));
        s->nnodes--;
    }
    s->bytes -= e->blen;
    free(e->blob);
    e->blob = NULL;
    s->len--;
    s->ndead++;
    if (s->ndead > 16 && s->ndead > s->len) compact(s);
}

/* Estimated listpack bytes of an entry (Redis compares the node's bytes
 * plus the fields' lengths against stream-node-max-bytes). */
/* Sizes of listpack elements, as Redis 7.0 lays a node out: what decides
 * when a node reaches stream-node-max-bytes. */
static size_t lp_backlen(size_t l) {
    return l <= 127 ? 1 : l < 16383 ? 2 : l < 2097151 ? 3 : l < 268435455 ? 4 : 5;
}
static size_t lp_int_size(int64_t v) {
    size_t enc = (v >= 0 && v <= 127) ? 1 : (v >= -4096 && v <= 4095) ? 2
               : (v >= -32768 && v <= 32767) ? 3 : (v >= -8388608 && v <= 8388607) ? 4
               : (v >= INT32_MIN && v <= INT32_MAX) ? 5 : 9;
    return enc + lp_backlen(enc);
}
/* A string that reads as an integer is stored as one. */
static size_t lp_str_size(const char *p, size_t len) {
    long long v;
    if (len > 0 && len < 21 && string2ll(p, len, &v)) return lp_int_size(v);
    size_t enc = len <= 63 ? 1 + len : len <= 4095 ? 2 + len : 5 + len;
    return enc + lp_backlen(enc);
}

/* Listpack bytes of an entry appended to node nd (its fields in blob). */
static uint64_t lp_entry_size(const snode *nd, sid id, uint32_t nf, const char *blob, size_t blen) {
    int same = nf == nd->nmf;
    size_t pos = 0, mpos = 0;
    uint64_t fbytes = 0, vbytes = 0;
    for (uint32_t i = 0; i < 2 * nf && pos + 4 <= blen; i++) {
        uint32_t l = obj_get_u32(blob + pos);
        const char *p = blob + pos + 4;
        pos += 4 + l;
        if (i % 2) {
            vbytes += lp_str_size(p, l);
            continue;
        }
        fbytes += lp_str_size(p, l);
        if (same) {
            uint32_t ml = mpos + 4 <= nd->mflen ? obj_get_u32(nd->mfields + mpos) : UINT32_MAX;
            same = ml == l && mpos + 4 + l <= nd->mflen && memcmp(nd->mfields + mpos + 4, p, l) == 0;
            mpos += 4 + (size_t)l;
        }
    }
    uint64_t n = lp_int_size(same ? 2 : 0) + lp_int_size((int64_t)(id.ms - nd->master.ms)) +
                 lp_int_size((int64_t)(id.seq - nd->master.seq)) + vbytes;
    if (!same) n += lp_int_size(nf) + fbytes;
    return n + lp_int_size((int64_t)nf + 3 + (same ? 0 : nf + 1));
}

/* The node's listpack size: header, counts, master entry, entries, end. */
static uint64_t lp_node_bytes(const snode *nd) {
    return 6 + lp_int_size(nd->valid) + lp_int_size((int64_t)nd->total - nd->valid) +
           lp_int_size(nd->nmf) + nd->bytes + lp_int_size(0) + 1;
}


static void node_push(stream *s, uint64_t seq) {
    if (s->nnodes == s->capnodes) {
        s->capnodes = s->capnodes ? s->capnodes * 2 : 4;
        s->nodes = realloc(s->nodes, sizeof(snode) * s->capnodes);
        if (!s->nodes) abort();
    }
    s->nodes[s->nnodes++] = (snode){.seq = seq};
    if (seq >= s->next_node) s->next_node = seq + 1;
}

/* The master entry of a node opened by an entry: its ID and fields. */
static void node_set_master(snode *nd, sid id, uint32_t nf, const char *blob, size_t blen) {
    rbuf m;
    rbuf_init(&m);
    size_t pos = 0;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < 2 * nf && pos + 4 <= blen; i++) {
        uint32_t l = obj_get_u32(blob + pos);
        if (i % 2 == 0) {
            rbuf_append(&m, blob + pos, 4 + (size_t)l);
            bytes += lp_str_size(blob + pos + 4, l);
        }
        pos += 4 + l;
    }
    free(nd->mfields);
    nd->mfields = malloc(m.len ? m.len : 1);
    if (!nd->mfields) abort();
    if (m.len) memcpy(nd->mfields, m.buf, m.len);
    nd->mflen = (uint32_t)m.len;
    nd->nmf = nf;
    nd->master = id;
    nd->bytes = bytes;
    rbuf_free(&m);
}

/* How many strings a (u32 len, bytes)... blob holds; -1 if malformed. */
static long blob_fields_count(const char *b, size_t len) {
    size_t pos = 0, slen;
    const char *s;
    long n = 0;
    for (; pos < len; n++)
        if (obj_get_str(b, len, &pos, &s, &slen)) return -1;
    return n;
}

/* Validate a fields blob; returns the pair count or -1. */
static long blob_fields(const char *b, size_t len) {
    long n = blob_fields_count(b, len);
    return n <= 0 || n % 2 ? -1 : n / 2;
}

/* Append an entry (id above every existing one) to node `node`. */
static int entry_append(stream *s, sid id, uint64_t node, const char *blob, size_t blen) {
    long nf = blob_fields(blob, blen);
    if (nf < 0 || (s->n && sid_cmp(s->e[s->n - 1].id, id) >= 0)) return -1;
    if (s->nnodes == 0 || s->nodes[s->nnodes - 1].seq != node) {
        if (s->nnodes && s->nodes[s->nnodes - 1].seq > node) return -1;
        node_push(s, node);
        node_set_master(&s->nodes[s->nnodes - 1], id, (uint32_t)nf, blob, blen);
    }
    snode *nd = &s->nodes[s->nnodes - 1];
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->e = realloc(s->e, sizeof(sentry) * s->cap);
        if (!s->e) abort();
    }
    sentry *e = &s->e[s->n++];
    e->id = id;
    e->node = node;
    e->nf = (uint32_t)nf;
    e->blen = (uint32_t)blen;
    e->blob = malloc(blen ? blen : 1);
    if (!e->blob) abort();
    memcpy(e->blob, blob, blen);
    nd->valid++;
    nd->total++;
    nd->bytes += lp_entry_size(nd, id, e->nf, blob, blen);
    s->len++;
    s->bytes += blen;
    return 0;
}

/* Does the next XADD (fields of flen bytes) start a new node? */
int stream_needs_new_node(const stream *s, uint64_t flen) {
    if (s->nnodes == 0) return 1;
    const snode *nd = &s->nodes[s->nnodes - 1];
    /* The last node takes more, whichever it is (Redis appends to the last
     * node of its radix tree, even an older one once the newer ones were
     * emptied). */
    long long max_bytes = server.cfg.stream_node_max_bytes;
    long long max_entries = server.cfg.stream_node_max_entries;
    if (max_bytes <= 0 || max_bytes > (1LL << 30)) max_bytes = 1LL << 30;
    if (lp_node_bytes(nd) + flen >= (uint64_t)max_bytes) return 1;
    if (max_entries > 0 && nd->total >= (uint64_t)max_entries) return 1;
    return 0;
}

/* ---------------- groups ---------------- */

int stream_name_cmp(const char *a, size_t alen, const char *b, size_t blen) {
    size_t m = alen < blen ? alen : blen;
    int r = memcmp(a, b, m);
    if (r) return r;
    return alen < blen ? -1 : alen > blen;
}

/* Groups of a stream and consumers of a group are arrays of pointers kept
 * sorted by name; both structs begin with the same name fields (snamed),
 * so one binary search and one insertion serve both. */
typedef struct snamed { char *name; size_t nlen; } snamed;
_Static_assert(offsetof(sentry, id) == 0 && offsetof(spel, id) == 0, "sid_lower's items");
_Static_assert(offsetof(sgroup, name) == offsetof(snamed, name) &&
               offsetof(sgroup, nlen) == offsetof(snamed, nlen) &&
               offsetof(sconsumer, name) == offsetof(snamed, name) &&
               offsetof(sconsumer, nlen) == offsetof(snamed, nlen), "snamed is their head");

static size_t named_lower(void *const *v, size_t n, const char *name, size_t len) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const snamed *x = v[mid];
        if (stream_name_cmp(x->name, x->nlen, name, len) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The index of name in v, or -1 (*at: where it would go). */
static long named_index(void *const *v, size_t n, const char *name, size_t len, size_t *at) {
    size_t i = named_lower(v, n, name, len);
    if (at) *at = i;
    if (i < n) {
        const snamed *x = v[i];
        if (stream_name_cmp(x->name, x->nlen, name, len) == 0) return (long)i;
    }
    return -1;
}

/* Insert item at position i of the array *v (n items, room for *cap). */
static void named_insert(void ***v, size_t *n, size_t *cap, size_t i, void *item) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *v = realloc(*v, sizeof(void *) * *cap);
        if (!*v) abort();
    }
    memmove(*v + i + 1, *v + i, sizeof(void *) * (*n - i));
    (*v)[i] = item;
    (*n)++;
}

static char *dupmem(const char *p, size_t len) {
    char *d = malloc(len + 1);
    if (!d) abort();
    memcpy(d, p, len);
    d[len] = '\0';
    return d;
}

static size_t group_lower(const stream *s, const char *name, size_t len) {
    return named_lower((void *const *)s->groups, s->ngroups, name, len);
}

sgroup *stream_group_find(const stream *s, const char *name, size_t len) {
    long i = named_index((void *const *)s->groups, s->ngroups, name, len, NULL);
    return i < 0 ? NULL : s->groups[i];
}

static sgroup *group_add(stream *s, const char *name, size_t len, sid last, long long er) {
    size_t i;
    if (named_index((void *const *)s->groups, s->ngroups, name, len, &i) >= 0) return NULL;
    sgroup *g = calloc(1, sizeof(*g));
    if (!g) abort();
    g->name = dupmem(name, len);
    g->nlen = len;
    g->last_id = last;
    g->entries_read = er;
    named_insert((void ***)&s->groups, &s->ngroups, &s->capgroups, i, g);
    return g;
}

static void group_del(stream *s, sgroup *g) {
    size_t i = group_lower(s, g->name, g->nlen);
    memmove(s->groups + i, s->groups + i + 1, sizeof(sgroup *) * (s->ngroups - i - 1));
    s->ngroups--;
    group_free(g);
}

static size_t cons_lower(const sgroup *g, const char *name, size_t len) {
    return named_lower((void *const *)g->cons, g->ncons, name, len);
}

sconsumer *stream_cons_find(const sgroup *g, const char *name, size_t len) {
    long i = named_index((void *const *)g->cons, g->ncons, name, len, NULL);
    return i < 0 ? NULL : g->cons[i];
}

static sconsumer *cons_get(sgroup *g, const char *name, size_t len, int64_t seen) {
    size_t i;
    long at = named_index((void *const *)g->cons, g->ncons, name, len, &i);
    if (at >= 0) return g->cons[at];
    sconsumer *c = calloc(1, sizeof(*c));
    if (!c) abort();
    c->name = dupmem(name, len);
    c->nlen = len;
    c->seen = seen;
    named_insert((void ***)&g->cons, &g->ncons, &g->capcons, i, c);
    return c;
}

size_t stream_pel_lower(const sgroup *g, sid id) {
    return sid_lower(g->pel, g->npel, sizeof(*g->pel), id);
}

spel *stream_pel_find(const sgroup *g, sid id) {
    size_t i = stream_pel_lower(g, id);
    return i < g->npel && sid_cmp(g->pel[i].id, id) == 0 ? &g->pel[i] : NULL;
}

static void pel_set(sgroup *g, sconsumer *c, sid id, int64_t time, uint64_t count) {
    size_t i = stream_pel_lower(g, id);
    if (i < g->npel && sid_cmp(g->pel[i].id, id) == 0) {
        g->pel[i].owner->npending--;
    } else {
        if (g->npel == g->cappel) {
            g->cappel = g->cappel ? g->cappel * 2 : 8;
            g->pel = realloc(g->pel, sizeof(spel) * g->cappel);
            if (!g->pel) abort();
        }
        memmove(g->pel + i + 1, g->pel + i, sizeof(spel) * (g->npel - i));
        g->npel++;
    }
    g->pel[i] = (spel){id, c, time, count};
    c->npending++;
}

static void pel_del(sgroup *g, sid id) {
    size_t i = stream_pel_lower(g, id);
    if (i >= g->npel || sid_cmp(g->pel[i].id, id) != 0) return;
    g->pel[i].owner->npending--;
    memmove(g->pel + i, g->pel + i + 1, sizeof(spel) * (g->npel - i - 1));
    g->npel--;
}

static void cons_del(sgroup *g, sconsumer *c) {
    size_t j = 0;
    for (size_t i = 0; i < g->npel; i++)
        if (g->pel[i].owner != c) g->pel[j++] = g->pel[i];
    g->npel = j;
    size_t i = cons_lower(g, c->name, c->nlen);
    memmove(g->cons + i, g->cons + i + 1, sizeof(sconsumer *) * (g->ncons - i - 1));
    g->ncons--;
    free(c->name);
    free(c);
}

/* ---------------- effects ---------------- */

static sgroup *arg_group(stream *s, const char *a, size_t len, size_t *pos) {
    const char *n;
    size_t nl;
    if (obj_get_str(a, len, pos, &n, &nl) != 0) return NULL;
    return stream_group_find(s, n, nl);
}

static int stream_apply(void *data, uint8_t op, const char *a, size_t len) {
    stream *s = data;
    size_t pos = 0;
    sgroup *g;
    switch (op) {
    case SOP_ADD: {
        if (len < 17) return -1;
        sid id = stream_get_sid(a);
        uint64_t node = (a[16] || s->nnodes == 0) ? s->next_node : s->nodes[s->nnodes - 1].seq;
        if (sid_cmp(id, s->last_id) <= 0) return -1;
        if (entry_append(s, id, node, a + 17, len - 17) != 0) return -1;
        s->last_id = id;
        s->entries_added++;
        return 0;
    }
    case SOP_DEL: {
        if (len != 17) return -1;
        sid id = stream_get_sid(a);
        size_t i = stream_entry_lower(s, id);
        if (i >= s->n || sid_cmp(s->e[i].id, id) != 0 || !s->e[i].blob) return -1;
        entry_remove(s, i);
        if (a[16] && sid_cmp(id, s->max_deleted) > 0) s->max_deleted = id;
        return 0;
    }
    case SOP_META:
        if (len != 40) return -1;
        s->last_id = stream_get_sid(a);
        s->max_deleted = stream_get_sid(a + 16);
        s->entries_added = le_get_u64(a + 32);
        return 0;
    case SOP_GCREATE:
    case SOP_GSETID: {
        if (len < 24) return -1;
        sid last = stream_get_sid(a);
        long long er = (long long)le_get_u64(a + 16);
        const char *n = a + 24;
        size_t nl = len - 24;
        if (op == SOP_GCREATE) return group_add(s, n, nl, last, er) ? 0 : -1;
        if (!(g = stream_group_find(s, n, nl))) return -1;
        g->last_id = last;
        g->entries_read = er;
        return 0;
    }
    case SOP_GDESTROY:
        if (!(g = stream_group_find(s, a, len))) return -1;
        group_del(s, g);
        return 0;
    case SOP_CCREATE: {
        if (len < 8) return -1;
        int64_t seen = (int64_t)le_get_u64(a);
        pos = 8;
        if (!(g = arg_group(s, a, len, &pos))) return -1;
        sconsumer *c = cons_get(g, a + pos, len - pos, seen);
        c->seen = seen;
        return 0;
    }
    case SOP_CDEL: {
        if (!(g = arg_group(s, a, len, &pos))) return -1;
        sconsumer *c = stream_cons_find(g, a + pos, len - pos);
        if (!c) return -1;
        cons_del(g, c);
        return 0;
    }
    case SOP_PELSET: {
        const char *cn;
        size_t cl;
        if (!(g = arg_group(s, a, len, &pos))) return -1;
        if (obj_get_str(a, len, &pos, &cn, &cl) != 0 || (len - pos) % 32) return -1;
        sconsumer *c = stream_cons_find(g, cn, cl);
        if (!c) return -1;
        for (; pos < len; pos += 32)
            pel_set(g, c, stream_get_sid(a + pos), (int64_t)le_get_u64(a + pos + 16), le_get_u64(a + pos + 24));
        return 0;
    }
    case SOP_PELDEL:
        if (!(g = arg_group(s, a, len, &pos)) || (len - pos) % 16) return -1;
        for (; pos < len; pos += 16) pel_del(g, stream_get_sid(a + pos));
        return 0;
    default:
        return -1;
    }
}

/* ---------------- snapshot ---------------- */

static void stream_snapshot(const void *data, rbuf *out) {
    const stream *s = data;
    stream_put_sid(out, s->last_id);
    stream_put_sid(out, s->max_deleted);
    stream_put_u64(out, s->entries_added);
    stream_put_u64(out, s->next_node);
    obj_put_u32(out, (uint32_t)s->nnodes);
    for (size_t i = 0; i < s->nnodes; i++) {
        stream_put_u64(out, s->nodes[i].seq);
        obj_put_u32(out, s->nodes[i].valid);
        obj_put_u32(out, s->nodes[i].total);
        stream_put_u64(out, s->nodes[i].bytes);
        stream_put_sid(out, s->nodes[i].master);
        obj_put_u32(out, s->nodes[i].nmf);
        obj_put_str(out, s->nodes[i].mfields, s->nodes[i].mflen);
    }
    stream_put_u64(out, s->len);
    for (size_t i = 0; i < s->n; i++) {
        const sentry *e = &s->e[i];
        if (!e->blob) continue;
        stream_put_sid(out, e->id);
        stream_put_u64(out, e->node);
        obj_put_str(out, e->blob, e->blen);
    }
    obj_put_u32(out, (uint32_t)s->ngroups);
    for (size_t i = 0; i < s->ngroups; i++) {
        const sgroup *g = s->groups[i];
        obj_put_str(out, g->name, g->nlen);
        stream_put_sid(out, g->last_id);
        stream_put_u64(out, (uint64_t)g->entries_read);
        obj_put_u32(out, (uint32_t)g->ncons);
        for (size_t j = 0; j < g->ncons; j++) {
            obj_put_str(out, g->cons[j]->name, g->cons[j]->nlen);
            stream_put_u64(out, (uint64_t)g->cons[j]->seen);
        }
        stream_put_u64(out, g->npel);
        for (size_t j = 0; j < g->npel; j++) {
            const spel *p = &g->pel[j];
            stream_put_sid(out, p->id);
            obj_put_u32(out, (uint32_t)cons_lower(g, p->owner->name, p->owner->nlen));
            stream_put_u64(out, (uint64_t)p->time);
            stream_put_u64(out, p->count);
        }
    }
}

typedef struct rd { const char *b; size_t len, pos; int bad; } rd;
static int rd_need(rd *r, size_t n) {
    if (r->bad || r->len - r->pos < n) { r->bad = 1; return 0; }
    return 1;
}
static uint64_t rd_u64(rd *r) {
    if (!rd_need(r, 8)) return 0;
    uint64_t v = le_get_u64(r->b + r->pos);
    r->pos += 8;
    return v;
}
static uint32_t rd_u32(rd *r) {
    if (!rd_need(r, 4)) return 0;
    uint32_t v = obj_get_u32(r->b + r->pos);
    r->pos += 4;
    return v;
}
static sid rd_sid(rd *r) {
    sid a;
    a.ms = rd_u64(r);
    a.seq = rd_u64(r);
    return a;
}
static const char *rd_str(rd *r, size_t *len) {
    *len = rd_u32(r);
    if (!rd_need(r, *len)) return NULL;
    const char *p = r->b + r->pos;
    r->pos += *len;
    return p;
}

static void *stream_load(const char *buf, size_t len) {
    rd r = {buf, len, 0, 0};
    stream *s = stream_create();
    s->last_id = rd_sid(&r);
    s->max_deleted = rd_sid(&r);
    s->entries_added = rd_u64(&r);
    uint64_t next_node = rd_u64(&r);
    uint32_t nn = rd_u32(&r);
    if (r.bad || nn > len) goto bad;
    snode *saved = calloc(nn ? nn : 1, sizeof(snode));
    if (!saved) abort();
    for (uint32_t i = 0; i < nn; i++) {
        saved[i].seq = rd_u64(&r);
        saved[i].valid = rd_u32(&r);
        saved[i].total = rd_u32(&r);
        saved[i].bytes = rd_u64(&r);
        saved[i].master = rd_sid(&r);
        saved[i].nmf = rd_u32(&r);
        size_t ml;
        const char *mf = rd_str(&r, &ml);
        if (!mf || (long)saved[i].nmf != blob_fields_count(mf, ml)) {
            r.bad = 1;
            nn = i;
            break;
        }
        saved[i].mfields = dupmem(mf, ml);
        saved[i].mflen = (uint32_t)ml;
    }
    uint64_t ne = rd_u64(&r);
    for (uint64_t i = 0; i < ne && !r.bad; i++) {
        sid id = rd_sid(&r);
        uint64_t node = rd_u64(&r);
        size_t bl;
        const char *b = rd_str(&r, &bl);
        if (!b || entry_append(s, id, node, b, bl) != 0) r.bad = 1;
    }
    /* The nodes as they were (deleted entries counted). */
    if (!r.bad && s->nnodes == nn) {
        for (uint32_t i = 0; i < nn; i++) {
            if (s->nodes[i].seq != saved[i].seq || s->nodes[i].valid != saved[i].valid) r.bad = 1;
            s->nodes[i].total = saved[i].total;
            s->nodes[i].bytes = saved[i].bytes;
            s->nodes[i].master = saved[i].master;
            s->nodes[i].nmf = saved[i].nmf;
            s->nodes[i].mflen = saved[i].mflen;
            free(s->nodes[i].mfields);
            s->nodes[i].mfields = saved[i].mfields;
            saved[i].mfields = NULL;
        }
    } else {
        r.bad = 1;
    }
    for (uint32_t i = 0; i < nn; i++) free(saved[i].mfields);
    free(saved);
    if (next_node > s->next_node) s->next_node = next_node;
    uint32_t ng = rd_u32(&r);
    for (uint32_t i = 0; i < ng && !r.bad; i++) {
        size_t nl;
        const char *n = rd_str(&r, &nl);
        sid last = rd_sid(&r);
        long long er = (long long)rd_u64(&r);
        sgroup *g = r.bad ? NULL : group_add(s, n, nl, last, er);
        if (!g) { r.bad = 1; break; }
        uint32_t nc = rd_u32(&r);
        for (uint32_t j = 0; j < nc && !r.bad; j++) {
            size_t cl;
            const char *cn = rd_str(&r, &cl);
            int64_t seen = (int64_t)rd_u64(&r);
            if (!r.bad) cons_get(g, cn, cl, seen);
        }
        if (r.bad || g->ncons != nc) { r.bad = 1; break; }
        uint64_t np = rd_u64(&r);
        for (uint64_t j = 0; j < np && !r.bad; j++) {
            sid id = rd_sid(&r);
            uint32_t ci = rd_u32(&r);
            int64_t t = (int64_t)rd_u64(&r);
            uint64_t cnt = rd_u64(&r);
            if (r.bad || ci >= g->ncons) { r.bad = 1; break; }
            pel_set(g, g->cons[ci], id, t, cnt);
        }
    }
    if (r.bad || r.pos != len) goto bad;
    return s;
bad:
    stream_destroy(s);
    return NULL;
}

static long long stream_size(const void *data) { return (long long)((const stream *)data)->len; }

static const char *stream_encoding(const void *data) {
    (void)data;
    return "stream";
}

static size_t stream_memory(const void *data) {
    const stream *s = data;
    size_t m = sizeof(*s) + s->cap * sizeof(sentry) + s->capnodes * sizeof(snode) + s->bytes;
    for (size_t i = 0; i < s->ngroups; i++) {
        const sgroup *g = s->groups[i];
        m += sizeof(*g) + g->nlen + g->cappel * sizeof(spel) + g->capcons * sizeof(void *);
        for (size_t j = 0; j < g->ncons; j++) m += sizeof(sconsumer) + g->cons[j]->nlen;
    }
    return m;
}

/* Digest: each entry as (id, fields blob); the metadata and every group
 * as one element each (a tag byte keeps them apart from entry IDs). */
static void stream_elements(const void *data, obj_elem_fn fn, void *arg) {
    const stream *s = data;
    rbuf b;
    rbuf_init(&b);
    for (size_t i = 0; i < s->n; i++) {
        if (!s->e[i].blob) continue;
        b.len = 0;
        stream_put_sid(&b, s->e[i].id);
        fn(arg, b.buf, b.len, s->e[i].blob, s->e[i].blen);
    }
    b.len = 0;
    stream_put_sid(&b, s->last_id);
    stream_put_sid(&b, s->max_deleted);
    stream_put_u64(&b, s->entries_added);
    fn(arg, "\xff" "meta", 5, b.buf, b.len);
    for (size_t i = 0; i < s->ngroups; i++) {
        const sgroup *g = s->groups[i];
        b.len = 0;
        stream_put_sid(&b, g->last_id);
        stream_put_u64(&b, (uint64_t)g->entries_read);
        for (size_t j = 0; j < g->ncons; j++) {
            obj_put_str(&b, g->cons[j]->name, g->cons[j]->nlen);
            stream_put_u64(&b, (uint64_t)g->cons[j]->seen);
        }
        for (size_t j = 0; j < g->npel; j++) {
            stream_put_sid(&b, g->pel[j].id);
            obj_put_str(&b, g->pel[j].owner->name, g->pel[j].owner->nlen);
            stream_put_u64(&b, (uint64_t)g->pel[j].time);
            stream_put_u64(&b, g->pel[j].count);
        }
        fn(arg, g->name, g->nlen, b.buf, b.len);
    }
    rbuf_free(&b);
}

static const obj_class stream_class = {
    .name = "stream",
    .create = stream_create,
    .destroy = stream_destroy,
    .apply = stream_apply,
    .snapshot = stream_snapshot,
    .load = stream_load,
    .size = stream_size,
    .encoding = stream_encoding,
    .memory = stream_memory,
    .elements = stream_elements,
};

void stream_register(void) { obj_register(OBJ_STREAM, &stream_class); }
