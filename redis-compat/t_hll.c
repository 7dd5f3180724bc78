/* t_hll.c -- HyperLogLog: PFADD, PFCOUNT, PFMERGE (and PFDEBUG's read-only
 * subcommands).
 *
 * An HLL is a plain string in Redis's published "HYLL" layout, so that GET,
 * SET, DUMP/RESTORE-by-value and replication move HLLs between Rowan and
 * Redis unchanged, and both count the same inputs to the same number:
 *
 *   header (16 bytes): "HYLL", encoding (0 dense, 1 sparse), 3 zero bytes,
 *     the cached cardinality as 8 little-endian bytes; the top bit of the
 *     last byte set means the cache is stale.
 *   dense:  16384 registers of 6 bits, packed from the least significant
 *           bit of byte 0 upwards (12288 bytes).
 *   sparse: runs, each one opcode:
 *       00xxxxxx           ZERO:  x+1 (1..64) registers hold 0
 *       01xxxxxx yyyyyyyy  XZERO: (x<<8|y)+1 (1..16384) registers hold 0
 *       1vvvvvxx           VAL:   x+1 (1..4) registers hold v+1 (1..32)
 *
 * An element is hashed with MurmurHash64A (seed 0xadc83b19); the low 14
 * bits pick the register, the position of the lowest set bit of the other
 * 50 (1-based, 51 when they are all zero) is the candidate value, stored
 * when larger. The count is Ertl's improved estimator over the register
 * histogram (arXiv:1702.01284), computed in the same double arithmetic.
 *
 * A sparse set changes only the run that covers the register: it is split
 * into at most three runs (before, the register, after), then up to five
 * runs from the one before it are scanned and neighbouring VAL runs of the
 * same value merged. Growing past hll-sparse-max-bytes, or a value above
 * 32, converts to dense for good. Following this exact policy is what makes
 * the bytes equal to Redis's for the same sequence of adds.
 *
 * Writes are string writes: the complete new value (and the key's expiry)
 * goes through db_set, like SETRANGE. PFCOUNT of one key stores the count it
 * computed into the header, as Redis does, so a read may write. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "notify.h"
#include "server.h"
#include "t_string.h"
#include "util.h"

#define HLL_P          14
#define HLL_Q          (64 - HLL_P)
#define HLL_REGISTERS  (1 << HLL_P)
#define HLL_BITS       6
#define HLL_HDR        16
#define HLL_DENSE_SIZE (HLL_HDR + (HLL_REGISTERS * HLL_BITS + 7) / 8)
#define HLL_DENSE      0
#define HLL_SPARSE     1
#define VAL_MAX_VALUE  32
#define VAL_MAX_LEN    4
#define ZERO_MAX_LEN   64
#define XZERO_MAX_LEN  16384

static const char *ERR_NOT_HLL = "WRONGTYPE Key is not a valid HyperLogLog string value.";
static const char *ERR_CORRUPT = "INVALIDOBJ Corrupted HLL object detected";

/* A value being worked on: a private, growable copy of the string. */
typedef struct hll {
    unsigned char *p;
    size_t len, cap;
} hll;

/* ---------------- hashing ---------------- */

static uint64_t murmur64a(const unsigned char *data, size_t len, uint64_t seed) {
    const uint64_t m = 0xc6a4a7935bd1e995ULL;
    const int r = 47;
    uint64_t h = seed ^ (len * m);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t k = 0;
        for (int b = 7; b >= 0; b--) k = (k << 8) | data[i + (size_t)b];   /* little endian */
        k *= m;
        k ^= k >> r;
        k *= m;
        h ^= k;
        h *= m;
    }
    size_t rest = len & 7;
    if (rest) {
        for (size_t b = rest; b-- > 0;) h ^= (uint64_t)data[i + b] << (8 * b);
        h *= m;
    }
    h ^= h >> r;
    h *= m;
    h ^= h >> r;
    return h;
}

/* The register an element goes to and the value it offers. */
static int hll_pattern(const char *e, size_t len, int *reg) {
    uint64_t h = murmur64a((const unsigned char *)e, len, 0xadc83b19ULL);
    *reg = (int)(h & (HLL_REGISTERS - 1));
    h = (h >> HLL_P) | ((uint64_t)1 << HLL_Q);
    return __builtin_ctzll(h) + 1;
}

/* ---------------- header ---------------- */

static void cache_invalidate(hll *h) { h->p[15] |= 0x80; }
static int cache_valid(const unsigned char *p) { return !(p[15] & 0x80); }

static uint64_t cache_get(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[8 + i];
    return v;
}

static void cache_put(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[8 + i] = (unsigned char)(v >> (8 * i));
}

/* Redis's checks: a string, long enough, the magic, a known encoding, and
 * a dense one of the exact size. */
static int is_hll(const char *p, size_t len) {
    if (len < HLL_HDR || memcmp(p, "HYLL", 4) != 0) return 0;
    if (p[4] != HLL_DENSE && p[4] != HLL_SPARSE) return 0;
    return p[4] != HLL_DENSE || len == HLL_DENSE_SIZE;
}

/* ---------------- dense registers ---------------- */

static int dense_get(const unsigned char *regs, int i) {
    size_t bit = (size_t)i * HLL_BITS, byte = bit / 8;
    unsigned fb = bit & 7;
    unsigned v = regs[byte] >> fb;
    if (fb > 8 - HLL_BITS) v |= (unsigned)regs[byte + 1] << (8 - fb);
    return (int)(v & 63);
}

static void dense_put(unsigned char *regs, int i, int val) {
    size_t bit = (size_t)i * HLL_BITS, byte = bit / 8;
    unsigned fb = bit & 7;
    unsigned w = regs[byte] | (fb > 8 - HLL_BITS ? (unsigned)regs[byte + 1] << 8 : 0);
    w = (w & ~(63u << fb)) | ((unsigned)val << fb);
    regs[byte] = (unsigned char)w;
    if (fb > 8 - HLL_BITS) regs[byte + 1] = (unsigned char)(w >> 8);
}

static int dense_set(unsigned char *regs, int i, int val) {
    if (dense_get(regs, i) >= val) return 0;
    dense_put(regs, i, val);
    return 1;
}

/* ---------------- sparse runs ---------------- */

enum { RUN_ZERO, RUN_XZERO, RUN_VAL };

typedef struct run {
    int kind, oplen, span, val;
} run;

/* Decode the opcode at p[pos]; -1 if it is cut short. */
static int run_at(const unsigned char *p, size_t len, size_t pos, run *r) {
    unsigned char b = p[pos];
    if ((b & 0xc0) == 0x00) *r = (run){RUN_ZERO, 1, (b & 0x3f) + 1, 0};
    else if ((b & 0xc0) == 0x40) {
        if (pos + 1 >= len) return -1;
        *r = (run){RUN_XZERO, 2, (((b & 0x3f) << 8) | p[pos + 1]) + 1, 0};
    } else {
        *r = (run){RUN_VAL, 1, (b & 0x3) + 1, ((b >> 2) & 0x1f) + 1};
    }
    return 0;
}

static unsigned char val_op(int val, int n) {
    return (unsigned char)(0x80 | ((val - 1) << 2) | (n - 1));
}

/* A run of n zero registers; returns the opcode's length. */
static int zero_ops(unsigned char *out, int n) {
    if (n > ZERO_MAX_LEN) {
        out[0] = (unsigned char)(0x40 | ((n - 1) >> 8));
        out[1] = (unsigned char)((n - 1) & 0xff);
        return 2;
    }
    out[0] = (unsigned char)(n - 1);
    return 1;
}

/* Every register of a sparse value into regs (max with what is there);
 * -1 unless the runs cover exactly HLL_REGISTERS registers. */
static int sparse_merge_into(const unsigned char *p, size_t len, unsigned char *regs) {
    long idx = 0;
    for (size_t pos = HLL_HDR; pos < len;) {
        run r;
        if (run_at(p, len, pos, &r) < 0 || idx + r.span > HLL_REGISTERS) return -1;
        if (r.kind == RUN_VAL)
            for (int k = 0; k < r.span; k++)
                if (regs[idx + k] < r.val) regs[idx + k] = (unsigned char)r.val;
        idx += r.span;
        pos += (size_t)r.oplen;
    }
    return idx == HLL_REGISTERS ? 0 : -1;
}

static void hll_reserve(hll *h, size_t need) {
    if (need <= h->cap) return;
    h->cap = need < 2 * h->cap ? 2 * h->cap : need;
    h->p = realloc(h->p, h->cap);
    if (!h->p) abort();
}

/* Sparse to dense, keeping the header (and its cached count). */
static int to_dense(hll *h) {
    unsigned char regs[HLL_REGISTERS];
    if (h->p[4] == HLL_DENSE) return 0;
    memset(regs, 0, sizeof(regs));
    if (sparse_merge_into(h->p, h->len, regs) < 0) return -1;
    hll_reserve(h, HLL_DENSE_SIZE);
    memset(h->p + HLL_HDR, 0, HLL_DENSE_SIZE - HLL_HDR);
    for (int i = 0; i < HLL_REGISTERS; i++)
        if (regs[i]) dense_put(h->p + HLL_HDR, i, regs[i]);
    h->p[4] = HLL_DENSE;
    h->len = HLL_DENSE_SIZE;
    return 0;
}

static int promote_and_set(hll *h, int reg, int val) {
    if (to_dense(h) < 0) return -1;
    dense_set(h->p + HLL_HDR, reg, val);
    return 1;
}

/* Merge neighbouring VAL runs of one value, scanning at most five opcodes
 * from pos; a merge stays put to try the merged run with its next one. */
static void sparse_merge_runs(hll *h, size_t pos) {
    for (int left = 5; pos < h->len && left-- > 0;) {
        run a, b;
        if (run_at(h->p, h->len, pos, &a) < 0) return;
        if (a.kind != RUN_VAL) {
            pos += (size_t)a.oplen;
            continue;
        }
        if (pos + 1 < h->len && run_at(h->p, h->len, pos + 1, &b) == 0 && b.kind == RUN_VAL &&
            a.val == b.val && a.span + b.span <= VAL_MAX_LEN) {
            h->p[pos + 1] = val_op(a.val, a.span + b.span);
            memmove(h->p + pos, h->p + pos + 1, h->len - pos - 1);
            h->len--;
            continue;
        }
        pos++;
    }
}

/* Register reg := max(reg, val) in a sparse value. 1 changed, 0 not,
 * -1 corrupt. May turn the value dense. */
static int sparse_set(hll *h, int reg, int val) {
    size_t pos = HLL_HDR, prev = 0;
    int first = 0, have_prev = 0;
    unsigned char seq[5];
    int n = 0;
    run r = {0, 0, 0, 0};

    if (val > VAL_MAX_VALUE) return promote_and_set(h, reg, val);
    while (pos < h->len) {
        if (run_at(h->p, h->len, pos, &r) < 0) return -1;
        if (reg < first + r.span) break;
        prev = pos;
        have_prev = 1;
        pos += (size_t)r.oplen;
        first += r.span;
    }
    if (pos >= h->len) return -1;
    int last = first + r.span - 1;
    if (r.kind == RUN_VAL && r.val >= val) return 0;

    if (r.span == 1 && r.kind != RUN_XZERO) {
        h->p[pos] = val_op(val, 1);   /* a run of one: rewrite it in place */
    } else {
        if (r.kind == RUN_VAL) {
            if (reg > first) seq[n++] = val_op(r.val, reg - first);
            seq[n++] = val_op(val, 1);
            if (reg < last) seq[n++] = val_op(r.val, last - reg);
        } else {
            if (reg > first) n += zero_ops(seq + n, reg - first);
            seq[n++] = val_op(val, 1);
            if (reg < last) n += zero_ops(seq + n, last - reg);
        }
        long delta = n - r.oplen;
        if (delta > 0 && (long long)(h->len + (size_t)delta) > server.cfg.hll_sparse_max_bytes)
            return promote_and_set(h, reg, val);
        hll_reserve(h, h->len + (size_t)(delta > 0 ? delta : 0));
        memmove(h->p + pos + n, h->p + pos + r.oplen, h->len - pos - (size_t)r.oplen);
        memcpy(h->p + pos, seq, (size_t)n);
        h->len = (size_t)((long)h->len + delta);
    }
    sparse_merge_runs(h, have_prev ? prev : HLL_HDR);
    return 1;
}

static int hll_set(hll *h, int reg, int val) {
    if (h->p[4] == HLL_DENSE) return dense_set(h->p + HLL_HDR, reg, val);
    return sparse_set(h, reg, val);
}

/* ---------------- counting ---------------- */

static double ertl_sigma(double x) {
    if (x == 1.) return INFINITY;
    double y = 1, z = x, prev;
    do {
        x *= x;
        prev = z;
        z += x * y;
        y += y;
    } while (prev != z);
    return z;
}

static double ertl_tau(double x) {
    if (x == 0. || x == 1.) return 0.;
    double y = 1.0, z = 1 - x, prev;
    do {
        x = sqrt(x);
        prev = z;
        y *= 0.5;
        z -= pow(1 - x, 2) * y;
    } while (prev != z);
    return z / 3;
}

static uint64_t estimate(const int *histo) {
    double m = HLL_REGISTERS;
    double z = m * ertl_tau((m - histo[HLL_Q + 1]) / m);
    for (int j = HLL_Q; j >= 1; --j) {
        z += histo[j];
        z *= 0.5;
    }
    z += m * ertl_sigma(histo[0] / m);
    return (uint64_t)llroundl(0.721347520444481703680 * m * m / z);
}

/* The count of one HLL value into *n; -1 if it is corrupt. (Registers no
 * add produces can make the estimate infinite: llroundl's result then, as
 * in Redis.) */
static int hll_count(const unsigned char *p, size_t len, uint64_t *n) {
    int histo[64] = {0};
    if (p[4] == HLL_DENSE) {
        for (int i = 0; i < HLL_REGISTERS; i++) histo[dense_get(p + HLL_HDR, i)]++;
    } else {
        long idx = 0;
        for (size_t pos = HLL_HDR; pos < len;) {
            run r;
            if (run_at(p, len, pos, &r) < 0) return -1;
            histo[r.val] += r.span;
            idx += r.span;
            pos += (size_t)r.oplen;
        }
        if (idx != HLL_REGISTERS) return -1;
    }
    *n = estimate(histo);
    return 0;
}

/* Merge one HLL value into raw registers; -1 if it is corrupt. */
static int hll_merge_into(const unsigned char *p, size_t len, unsigned char *regs) {
    if (p[4] == HLL_SPARSE) return sparse_merge_into(p, len, regs);
    for (int i = 0; i < HLL_REGISTERS; i++) {
        int v = dense_get(p + HLL_HDR, i);
        if (v > regs[i]) regs[i] = (unsigned char)v;
    }
    return 0;
}

/* ---------------- commands ---------------- */

/* argv[i] as an HLL: 1 found, 0 missing, -1 error replied. */
static int lookup_hll(client *c, int i, db_val *v, int for_write) {
    int r = lookup_string(c, i, v, for_write);
    if (r == 1 && !is_hll(v->ptr, v->len)) {
        resp_add_error(&c->out, ERR_NOT_HLL);
        return -1;
    }
    return r;
}

/* An empty sparse HLL: one XZERO run over every register. */
static void hll_new(hll *h) {
    h->cap = 64;
    h->p = calloc(1, h->cap);
    memcpy(h->p, "HYLL", 4);
    h->p[4] = HLL_SPARSE;
    h->len = HLL_HDR + (size_t)zero_ops(h->p + HLL_HDR, XZERO_MAX_LEN);
}

static void hll_copy(hll *h, const db_val *v) {
    h->cap = v->len > 64 ? v->len : 64;
    h->p = malloc(h->cap);
    memcpy(h->p, v->ptr, v->len);
    h->len = v->len;
}

static int hll_store(client *c, int i, const hll *h, int64_t expire_ms) {
    int r = db_set(&c->x, c->db, c->argv[i], c->argvlen[i], (const char *)h->p, h->len, expire_ms);
    if (r != DB_OOM) string_mark_edited(c, i);   /* Redis's HLL strings are "raw" */
    return r;
}

void pfaddCommand(client *c) {
    db_val v;
    hll h;
    int updated = 0, r = lookup_hll(c, 1, &v, 1);

    if (r < 0) return;
    if (r == 0) {
        hll_new(&h);
        v.expire_ms = 0;
        updated = 1;
    } else {
        hll_copy(&h, &v);
    }
    for (int j = 2; j < c->argc; j++) {
        int reg, val = hll_pattern(c->argv[j], c->argvlen[j], &reg);
        int s = hll_set(&h, reg, val);
        if (s < 0) {
            free(h.p);
            resp_add_error(&c->out, ERR_CORRUPT);
            return;
        }
        updated += s;
    }
    if (updated) {
        cache_invalidate(&h);
        if (hll_store(c, 1, &h, v.expire_ms) == DB_OOM) {
            free(h.p);
            resp_add_error(&c->out, db_error_text(&c->x));
            return;
        }
        notify_key(c, NOTIFY_STRING, "pfadd", 1);
    }
    free(h.p);
    resp_add_int(&c->out, updated ? 1 : 0);
}

/* One key: the cached count, or a fresh one stored back into the header.
 * Several: the count of their union, nothing stored. */
void pfcountCommand(client *c) {
    db_val v;
    if (c->argc == 2) {
        int r = lookup_hll(c, 1, &v, 0);
        if (r <= 0) {
            if (r == 0) resp_add_int(&c->out, 0);
            return;
        }
        const unsigned char *p = (const unsigned char *)v.ptr;
        if (cache_valid(p)) {
            resp_add_int(&c->out, (long long)cache_get(p));
            return;
        }
        uint64_t n;
        if (hll_count(p, v.len, &n) < 0) {
            resp_add_error(&c->out, ERR_CORRUPT);
            return;
        }
        /* The cache is only a shortcut: when the pool is full the count is
         * still answered, just not stored. */
        hll h;
        hll_copy(&h, &v);
        cache_put(h.p, (uint64_t)n);
        hll_store(c, 1, &h, v.expire_ms);
        free(h.p);
        resp_add_int(&c->out, (long long)n);
        return;
    }
    unsigned char *regs = calloc(1, HLL_REGISTERS);
    for (int j = 1; j < c->argc; j++) {
        int r = lookup_hll(c, j, &v, 0);
        if (r == 0) continue;
        if (r < 0 || hll_merge_into((const unsigned char *)v.ptr, v.len, regs) < 0) {
            if (r > 0) resp_add_error(&c->out, ERR_CORRUPT);
            free(regs);
            return;
        }
    }
    int histo[64] = {0};
    for (int i = 0; i < HLL_REGISTERS; i++) histo[regs[i]]++;
    free(regs);
    resp_add_int(&c->out, (long long)estimate(histo));
}

/* PFMERGE dest src...: the union of dest and the sources into dest, which
 * goes dense if any input was dense and otherwise takes the registers one
 * by one, in order, as sparse sets. dest keeps its TTL. */
void pfmergeCommand(client *c) {
    unsigned char *regs = calloc(1, HLL_REGISTERS);
    int use_dense = 0, r;
    db_val v;
    hll h;

    for (int j = 1; j < c->argc; j++) {
        r = lookup_hll(c, j, &v, 0);
        if (r == 0) continue;
        if (r < 0 || hll_merge_into((const unsigned char *)v.ptr, v.len, regs) < 0) {
            if (r > 0) resp_add_error(&c->out, ERR_CORRUPT);
            free(regs);
            return;
        }
        if (v.ptr[4] == HLL_DENSE) use_dense = 1;
    }
    r = lookup_hll(c, 1, &v, 1);
    if (r == 0) {
        hll_new(&h);
        v.expire_ms = 0;
    } else {
        hll_copy(&h, &v);
    }
    if (use_dense && to_dense(&h) < 0) goto corrupt;
    for (int i = 0; i < HLL_REGISTERS; i++)
        if (regs[i] && hll_set(&h, i, regs[i]) < 0) goto corrupt;
    free(regs);
    cache_invalidate(&h);
    r = hll_store(c, 1, &h, v.expire_ms);
    free(h.p);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    notify_key(c, NOTIFY_STRING, "pfadd", 1);   /* Redis's event for PFMERGE too */
    resp_add_ok(&c->out);
    return;
corrupt:
    free(regs);
    free(h.p);
    resp_add_error(&c->out, ERR_CORRUPT);
}

/* ---------------- PFDEBUG, PFSELFTEST ---------------- */

/* PFDEBUG GETREG|DECODE|ENCODING|TODENSE key. GETREG and TODENSE convert a
 * sparse value to dense and store it, as Redis does. */
void pfdebugCommand(client *c) {
    db_val v;
    hll h;
    int r = lookup_string(c, 2, &v, 1);

    if (r == 0) {
        resp_add_error(&c->out, "ERR The specified key does not exist");
        return;
    }
    if (r < 0) return;
    if (!is_hll(v.ptr, v.len)) {
        resp_add_error(&c->out, ERR_NOT_HLL);
        return;
    }
    int sparse = v.ptr[4] == HLL_SPARSE;
    if (arg_is(c, 1, "encoding")) {
        resp_add_simple(&c->out, sparse ? "sparse" : "dense");
    } else if (arg_is(c, 1, "decode")) {
        if (!sparse) {
            resp_add_error(&c->out, "ERR HLL encoding is not sparse");
            return;
        }
        rbuf out = {0};
        const unsigned char *p = (const unsigned char *)v.ptr;
        for (size_t pos = HLL_HDR; pos < v.len;) {
            run rn;
            char item[32];
            if (run_at(p, v.len, pos, &rn) < 0) break;
            int n = rn.kind == RUN_VAL ? snprintf(item, sizeof(item), "v:%d,%d ", rn.val, rn.span)
                                       : snprintf(item, sizeof(item), "%s:%d ",
                                                  rn.kind == RUN_ZERO ? "z" : "Z", rn.span);
            rbuf_append(&out, item, (size_t)n);
            pos += (size_t)rn.oplen;
        }
        if (out.len) out.len--;   /* the trailing space */
        resp_add_bulk(&c->out, out.len ? out.buf : "", out.len);
        rbuf_free(&out);
    } else if (arg_is(c, 1, "getreg") || arg_is(c, 1, "todense")) {
        hll_copy(&h, &v);
        if (to_dense(&h) < 0) {
            free(h.p);
            resp_add_error(&c->out, ERR_CORRUPT);
            return;
        }
        if (sparse && hll_store(c, 2, &h, v.expire_ms) == DB_OOM) {
            free(h.p);
            resp_add_error(&c->out, db_error_text(&c->x));
            return;
        }
        if (arg_is(c, 1, "todense")) {
            resp_add_int(&c->out, sparse);
        } else {
            resp_add_array(&c->out, HLL_REGISTERS);
            for (int i = 0; i < HLL_REGISTERS; i++) resp_add_int(&c->out, dense_get(h.p + HLL_HDR, i));
        }
        free(h.p);
    } else {
        resp_add_errorf(&c->out, "ERR Unknown PFDEBUG subcommand '%.*s'", (int)c->argvlen[1],
                        c->argv[1]);
    }
}

/* Checks of this file's own machinery: every register value packs and
 * unpacks without touching its neighbours, and a sparse and a dense HLL fed
 * the same elements keep the same registers and count. */
void pfselftestCommand(client *c) {
    unsigned char *regs = calloc(1, HLL_DENSE_SIZE - HLL_HDR);
    hll sparse, dense;
    const char *err = NULL;

    for (int i = 0; i < HLL_REGISTERS && !err; i++) {
        dense_put(regs, i, i & 63);
        if (dense_get(regs, i) != (i & 63) || (i > 0 && dense_get(regs, i - 1) != ((i - 1) & 63)))
            err = "TESTFAILED Register error";
    }
    free(regs);
    hll_new(&sparse);
    hll_new(&dense);
    to_dense(&dense);
    for (int n = 0; n < 2000 && !err; n++) {
        char e[32];
        int reg, len = snprintf(e, sizeof(e), "selftest-%d", n);
        int val = hll_pattern(e, (size_t)len, &reg);
        if (hll_set(&sparse, reg, val) < 0) err = "TESTFAILED sparse set failed";
        dense_set(dense.p + HLL_HDR, reg, val);
        if (!err && n % 100 == 99) {
            uint64_t a, b;
            if (hll_count(sparse.p, sparse.len, &a) < 0 || hll_count(dense.p, dense.len, &b) < 0 ||
                a != b)
                err = "TESTFAILED sparse and dense counts differ";
        }
    }
    free(sparse.p);
    free(dense.p);
    if (err) resp_add_error(&c->out, err);
    else resp_add_ok(&c->out);
}
