/* rdb.c -- Redis 7.0's RDB object serialization, for DUMP and RESTORE.
 *
 * Written here from the format's description (RDB version 10):
 *
 *  - lengths: 00xxxxxx (6 bits), 01xxxxxx xxxxxxxx (14 bits, big endian),
 *    0x80 + u32 BE, 0x81 + u64 BE; 11xxxxxx marks a specially encoded
 *    string: 0 int8, 1 int16, 2 int32 (little endian), 3 LZF (compressed
 *    length, plain length, data).
 *  - a string is a length then bytes (or one of the special encodings).
 *  - listpack: u32 total bytes, u16 count (65535 = unknown), entries, 0xFF;
 *    an entry is its encoding+data then a "backlen" (the entry's size in
 *    7-bit groups, readable from the right).
 *  - intset: u32 width (2, 4, 8), u32 count, sorted little-endian integers.
 *  - ziplist (what Redis before 7.0 wrote; 7.0 still reads it): u32 total
 *    bytes, u32 tail offset, u16 count, entries, 0xFF; an entry is the
 *    previous entry's length (1 byte, or 0xFE + u32), an encoding (00/01/10
 *    string lengths of 6 bits, 14 bits BE, u32 BE; 0xC0 int16, 0xD0 int32,
 *    0xE0 int64, 0xF0 int24, 0xFE int8, 0xF1..0xFD the values 0..12), data.
 *
 * Writing mirrors what Redis 7.0 writes for the encoding the value reports
 * (OBJECT ENCODING, which follows the *-max-listpack-* / intset limits):
 * strings that are int32 integers get the int encoding (others are written
 * plain, never LZF-compressed, which every reader accepts); lists are
 * quicklists of listpack nodes (<= 8 KB each, list-max-listpack-size -2);
 * "intset" sets are intsets, other sets plain (Redis 7.0 has no listpack
 * sets); "listpack" hashes and sorted sets are listpacks, the others the
 * plain hashtable / skiplist (binary scores) forms. Reading takes every form
 * Redis 7.0 writes, plus what it still reads from older versions (the plain
 * list, the string-score zset, ziplist hashes/zsets/lists and quicklists of
 * ziplists), and the listpack set (Redis 7.2).
 *
 * One place per type: the saver table (by Rowan type) and the loader table
 * (by RDB type) at the bottom. A restored collection is built through its
 * class's apply with the element effects its t_*.c documents (the same
 * effects the log holds), so its encoding flags follow the usual rules.
 *
 * Every read is bounds-checked; counts and lengths are checked against the
 * bytes left, so a bad payload cannot make us allocate without bound. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "rdb.h"
#include "type_hash.h"
#include "type_list.h"
#include "type_set.h"
#include "type_stream.h"
#include "type_zset.h"
#include "util.h"

/* RDB object types (the ones we read or write). */
enum {
    RDB_TYPE_STRING = 0, RDB_TYPE_LIST = 1, RDB_TYPE_SET = 2, RDB_TYPE_ZSET = 3,
    RDB_TYPE_HASH = 4, RDB_TYPE_ZSET_2 = 5, RDB_TYPE_LIST_ZIPLIST = 10, RDB_TYPE_SET_INTSET = 11,
    RDB_TYPE_ZSET_ZIPLIST = 12, RDB_TYPE_HASH_ZIPLIST = 13, RDB_TYPE_LIST_QUICKLIST = 14, RDB_TYPE_STREAM_LISTPACKS = 15,
    RDB_TYPE_HASH_LISTPACK = 16, RDB_TYPE_ZSET_LISTPACK = 17,
    RDB_TYPE_LIST_QUICKLIST_2 = 18, RDB_TYPE_STREAM_LISTPACKS_2 = 19, RDB_TYPE_SET_LISTPACK = 20,
};

#define LP_HDR 6
#define LP_EOF 0xFF
#define QL_NODE_PLAIN 1
#define QL_NODE_PACKED 2
#define QL_NODE_BYTES 8192      /* list-max-listpack-size -2 */

/* A restored value is built with its type's element effects (HASH_OP_SET,
 * SET_OP_ADD, ZOP_SET, LOP_PUSH_TAIL, SOP_*: src/types/type_*.h). */
/* A stream listpack entry's flags (Redis's STREAM_ITEM_FLAG_*). */
#define STREAM_DELETED 1
#define STREAM_SAMEFIELDS 2

/* ---------------- CRC64 (Jones, reflected) ---------------- */

static uint64_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    const uint64_t poly = 0x95ac9329ac4bc9b5ULL; /* 0xad93d23594c935a9 reflected */
    for (int i = 0; i < 256; i++) {
        uint64_t c = (uint64_t)i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        crc_table[i] = c;
    }
}

uint64_t rdb_crc64(uint64_t crc, const void *p, size_t len) {
    const unsigned char *s = p;
    pthread_once(&crc_once, crc_init);
    for (size_t i = 0; i < len; i++) crc = crc_table[(crc ^ s[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

/* ---------------- writing ---------------- */

static void put_byte(rbuf *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    rbuf_append(b, &c, 1);
}

static void put_len(rbuf *b, uint64_t n) {
    unsigned char buf[9];
    if (n < 64) {
        put_byte(b, (unsigned)n);
    } else if (n < 16384) {
        buf[0] = (unsigned char)(0x40 | (n >> 8));
        buf[1] = (unsigned char)n;
        rbuf_append(b, buf, 2);
    } else if (n <= UINT32_MAX) {
        buf[0] = 0x80;
        for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)(n >> (24 - 8 * i));
        rbuf_append(b, buf, 5);
    } else {
        buf[0] = 0x81;
        for (int i = 0; i < 8; i++) buf[1 + i] = (unsigned char)(n >> (56 - 8 * i));
        rbuf_append(b, buf, 9);
    }
}

/* A string: the int8/16/32 encoding when it is such an integer's exact
 * text, as Redis does, else length + bytes. */
static void put_string(rbuf *b, const char *s, size_t len) {
    long long v;
    unsigned char buf[5];
    if (len <= 11 && string2ll(s, len, &v)) {
        if (v >= INT8_MIN && v <= INT8_MAX) {
            buf[0] = 0xC0;
            buf[1] = (unsigned char)v;
            rbuf_append(b, buf, 2);
            return;
        }
        if (v >= INT16_MIN && v <= INT16_MAX) {
            buf[0] = 0xC1;
            buf[1] = (unsigned char)v;
            buf[2] = (unsigned char)((uint64_t)v >> 8);
            rbuf_append(b, buf, 3);
            return;
        }
        if (v >= INT32_MIN && v <= INT32_MAX) {
            buf[0] = 0xC2;
            for (int i = 0; i < 4; i++) buf[1 + i] = (unsigned char)((uint64_t)v >> (8 * i));
            rbuf_append(b, buf, 5);
            return;
        }
    }
    put_len(b, len);
    rbuf_append(b, s, len);
}

/* Listpack building: lp_begin, lp_add per element, lp_end. */
static size_t lp_begin(rbuf *b) {
    size_t start = b->len;
    rbuf_append(b, "\0\0\0\0\0\0", LP_HDR);
    return start;
}

static void lp_add(rbuf *b, const char *s, size_t len) {
    unsigned char enc[9];
    size_t elen;
    long long v;
    if (len <= 20 && string2ll(s, len, &v)) {
        uint64_t u = (uint64_t)v;
        if (v >= 0 && v <= 127) {
            enc[0] = (unsigned char)v;
            elen = 1;
        } else if (v >= -4096 && v <= 4095) {
            u &= 0x1FFF;
            enc[0] = (unsigned char)(0xC0 | (u >> 8));
            enc[1] = (unsigned char)u;
            elen = 2;
        } else {
            int n = v >= INT16_MIN && v <= INT16_MAX ? 2
                  : v >= -8388608 && v <= 8388607 ? 3
                  : v >= INT32_MIN && v <= INT32_MAX ? 4 : 8;
            enc[0] = n == 2 ? 0xF1 : n == 3 ? 0xF2 : n == 4 ? 0xF3 : 0xF4;
            for (int i = 0; i < n; i++) enc[1 + i] = (unsigned char)(u >> (8 * i));
            elen = 1 + (size_t)n;
        }
        rbuf_append(b, enc, elen);
    } else {
        if (len < 64) {
            enc[0] = (unsigned char)(0x80 | len);
            elen = 1;
        } else if (len < 4096) {
            enc[0] = (unsigned char)(0xE0 | (len >> 8));
            enc[1] = (unsigned char)len;
            elen = 2;
        } else {
            enc[0] = 0xF0;
            for (int i = 0; i < 4; i++) enc[1 + i] = (unsigned char)(len >> (8 * i));
            elen = 5;
        }
        rbuf_append(b, enc, elen);
        rbuf_append(b, s, len);
        elen += len;
    }
    /* backlen: the entry's size, 7 bits a byte, the low group last and
     * every byte but the first flagged 128 (read right to left). */
    unsigned char bl[5];
    int n = elen < 128 ? 1 : elen < 16384 ? 2 : elen < 2097152 ? 3 : elen < 268435456 ? 4 : 5;
    for (int i = 0; i < n; i++) {
        bl[n - 1 - i] = (unsigned char)((elen >> (7 * i)) & 127);
        if (i != n - 1) bl[n - 1 - i] |= 128;
    }
    rbuf_append(b, bl, (size_t)n);
}

static void lp_end(rbuf *b, size_t start, size_t count) {
    put_byte(b, LP_EOF);
    uint32_t total = (uint32_t)(b->len - start);
    unsigned char *h = (unsigned char *)b->buf + start;
    for (int i = 0; i < 4; i++) h[i] = (unsigned char)(total >> (8 * i));
    uint16_t n = count < 65535 ? (uint16_t)count : 65535;
    h[4] = (unsigned char)n;
    h[5] = (unsigned char)(n >> 8);
}

/* A collection's elements, gathered so the writer can pick an encoding. */
typedef struct elem { const char *a; size_t alen; const char *b; size_t blen; double score; } elem;
typedef struct elems {
    elem *v;
    size_t n, cap;
    int is_zset;
    const char *enc;    /* the value's OBJECT ENCODING */
} elems;

static void gather(void *arg, const char *a, size_t alen, const char *b, size_t blen) {
    elems *es = arg;
    if (es->n == es->cap) {
        es->cap = es->cap ? es->cap * 2 : 64;
        es->v = realloc(es->v, es->cap * sizeof(elem));
        if (!es->v) abort();
    }
    elem *e = &es->v[es->n++];
    e->a = a; e->alen = alen; e->b = b; e->blen = blen; e->score = 0;
    if (es->is_zset && blen == 8) {
        uint64_t u = le_get_u64(b);
        memcpy(&e->score, &u, 8);
        e->b = NULL;   /* the visitor's own buffer: only the score is kept */
    }
}

static int is_listpack(const elems *es) { return strcmp(es->enc, "listpack") == 0; }

static void save_list(elems *es, rbuf *out) {
    /* Count the nodes first: the quicklist's length precedes them. */
    size_t nodes = 0, bytes = 0;
    for (size_t i = 0; i < es->n; i++) {
        size_t sz = es->v[i].alen + 11;  /* an upper bound of the entry's size */
        if (bytes == 0 || bytes + sz > QL_NODE_BYTES) { nodes++; bytes = LP_HDR + 1; }
        bytes += sz;
    }
    put_byte(out, RDB_TYPE_LIST_QUICKLIST_2);
    put_len(out, nodes);
    rbuf lp;
    rbuf_init(&lp);
    size_t i = 0;
    while (i < es->n) {
        size_t start = lp_begin(&lp), cnt = 0;
        bytes = LP_HDR + 1;
        while (i < es->n && (cnt == 0 || bytes + es->v[i].alen + 11 <= QL_NODE_BYTES)) {
            bytes += es->v[i].alen + 11;
            lp_add(&lp, es->v[i].a, es->v[i].alen);
            i++, cnt++;
        }
        lp_end(&lp, start, cnt);
        put_len(out, QL_NODE_PACKED);
        put_len(out, lp.len);
        rbuf_append(out, lp.buf, lp.len);
        lp.len = 0;
    }
    rbuf_free(&lp);
}

static int cmp_i64(const void *x, const void *y) {
    long long a = *(const long long *)x, b = *(const long long *)y;
    return a < b ? -1 : a > b;
}

static void save_set(elems *es, rbuf *out) {
    long long *ints = NULL;
    int intset = strcmp(es->enc, "intset") == 0;
    if (intset) {
        ints = malloc((es->n ? es->n : 1) * sizeof(*ints));
        if (!ints) abort();
        for (size_t i = 0; i < es->n && intset; i++)
            intset = string2ll(es->v[i].a, es->v[i].alen, &ints[i]);
    }
    if (intset) {
        qsort(ints, es->n, sizeof(*ints), cmp_i64);
        uint32_t w = 2;
        for (size_t i = 0; i < es->n; i++) {
            if (ints[i] < INT32_MIN || ints[i] > INT32_MAX) w = 8;
            else if (w < 4 && (ints[i] < INT16_MIN || ints[i] > INT16_MAX)) w = 4;
        }
        rbuf is;
        rbuf_init(&is);
        unsigned char h[8];
        le_put_u32(h, w);
        le_put_u32(h + 4, (uint32_t)es->n);
        rbuf_append(&is, h, 8);
        for (size_t i = 0; i < es->n; i++) {
            le_put_u64(h, (uint64_t)ints[i]);
            rbuf_append(&is, h, w);
        }
        put_byte(out, RDB_TYPE_SET_INTSET);
        put_len(out, is.len);
        rbuf_append(out, is.buf, is.len);
        rbuf_free(&is);
    } else {
        put_byte(out, RDB_TYPE_SET);
        put_len(out, es->n);
        for (size_t i = 0; i < es->n; i++) put_string(out, es->v[i].a, es->v[i].alen);
    }
    free(ints);
}

static void save_hash(elems *es, rbuf *out) {
    if (is_listpack(es)) {
        rbuf lp;
        rbuf_init(&lp);
        size_t start = lp_begin(&lp);
        for (size_t i = 0; i < es->n; i++) {
            lp_add(&lp, es->v[i].a, es->v[i].alen);
            lp_add(&lp, es->v[i].b, es->v[i].blen);
        }
        lp_end(&lp, start, es->n * 2);
        put_byte(out, RDB_TYPE_HASH_LISTPACK);
        put_len(out, lp.len);
        rbuf_append(out, lp.buf, lp.len);
        rbuf_free(&lp);
        return;
    }
    put_byte(out, RDB_TYPE_HASH);
    put_len(out, es->n);
    for (size_t i = 0; i < es->n; i++) {
        put_string(out, es->v[i].a, es->v[i].alen);
        put_string(out, es->v[i].b, es->v[i].blen);
    }
}

/* Sorted-set order: score, then member bytes. */
static int cmp_zelem(const void *x, const void *y) {
    const elem *a = x, *b = y;
    if (a->score != b->score) return a->score < b->score ? -1 : 1;
    size_t n = a->alen < b->alen ? a->alen : b->alen;
    int c = memcmp(a->a, b->a, n);
    return c ? c : (a->alen < b->alen ? -1 : a->alen > b->alen);
}

static void save_zset(elems *es, rbuf *out) {
    qsort(es->v, es->n, sizeof(elem), cmp_zelem);
    if (is_listpack(es)) {
        rbuf lp;
        char sb[64];
        rbuf_init(&lp);
        size_t start = lp_begin(&lp);
        for (size_t i = 0; i < es->n; i++) {
            lp_add(&lp, es->v[i].a, es->v[i].alen);
            int sl = d2string(sb, sizeof(sb), es->v[i].score);
            lp_add(&lp, sb, (size_t)sl);
        }
        lp_end(&lp, start, es->n * 2);
        put_byte(out, RDB_TYPE_ZSET_LISTPACK);
        put_len(out, lp.len);
        rbuf_append(out, lp.buf, lp.len);
        rbuf_free(&lp);
        return;
    }
    put_byte(out, RDB_TYPE_ZSET_2);
    put_len(out, es->n);
    /* Redis writes the skiplist from its tail; any order loads the same. */
    for (size_t i = es->n; i-- > 0;) {
        unsigned char d[8];
        uint64_t u;
        memcpy(&u, &es->v[i].score, 8);
        le_put_u64(d, u);
        put_string(out, es->v[i].a, es->v[i].alen);
        rbuf_append(out, d, 8);
    }
}

/* ---------------- reading ---------------- */

typedef struct reader { const unsigned char *p; size_t len, pos; } reader;

static int rd_byte(reader *r, unsigned *v) {
    if (r->pos >= r->len) return -1;
    *v = r->p[r->pos++];
    return 0;
}

/* A length; *special set (and the 6-bit code returned) for 11xxxxxx. */
static int rd_len(reader *r, uint64_t *n, int *special) {
    unsigned b;
    *special = 0;
    if (rd_byte(r, &b)) return -1;
    switch (b >> 6) {
    case 0: *n = b & 63; return 0;
    case 1: {
        unsigned c;
        if (rd_byte(r, &c)) return -1;
        *n = ((uint64_t)(b & 63) << 8) | c;
        return 0;
    }
    case 2: {
        int bytes = b == 0x80 ? 4 : b == 0x81 ? 8 : 0;
        if (!bytes || r->len - r->pos < (size_t)bytes) return -1;
        uint64_t v = 0;
        for (int i = 0; i < bytes; i++) v = (v << 8) | r->p[r->pos++];
        *n = v;
        return 0;
    }
    default:
        *special = 1;
        *n = b & 63;
        return 0;
    }
}

/* A plain count of things still to read, each taking at least one byte. */
static int rd_count(reader *r, uint64_t *n) {
    int special;
    if (rd_len(r, n, &special) || special || *n > r->len - r->pos) return -1;
    return 0;
}

/* LZF: a control byte below 32 starts a run of ctrl+1 literal bytes;
 * otherwise it is a back reference: length (ctrl >> 5) + 2, or 7 + the
 * next byte + 2 when that field is 7, at distance ((ctrl & 31) << 8) +
 * next byte + 1 behind the output's end. */
static int lzf_decode(const unsigned char *in, size_t ilen, char *out, size_t olen) {
    size_t ip = 0, op = 0;
    while (ip < ilen) {
        unsigned ctrl = in[ip++];
        if (ctrl < 32) {
            size_t n = ctrl + 1;
            if (ilen - ip < n || olen - op < n) return -1;
            memcpy(out + op, in + ip, n);
            ip += n, op += n;
        } else {
            size_t n = ctrl >> 5;
            if (n == 7) {
                if (ip >= ilen) return -1;
                n += in[ip++];
            }
            if (ip >= ilen) return -1;
            size_t dist = ((size_t)(ctrl & 31) << 8) + in[ip++] + 1;
            n += 2;
            if (dist > op || olen - op < n) return -1;
            for (size_t i = 0; i < n; i++, op++) out[op] = out[op - dist];
        }
    }
    return op == olen ? 0 : -1;
}

/* A string into out (reset first). */
static int rd_string(reader *r, rbuf *out) {
    uint64_t n;
    int special;
    out->len = 0;
    if (rd_len(r, &n, &special)) return -1;
    if (!special) {
        if (n > r->len - r->pos) return -1;
        rbuf_append(out, r->p + r->pos, n);
        r->pos += n;
        return 0;
    }
    if (n <= 2) {
        size_t w = (size_t)1 << n;
        if (r->len - r->pos < w) return -1;
        uint64_t u = 0;
        for (size_t i = 0; i < w; i++) u |= (uint64_t)r->p[r->pos + i] << (8 * i);
        r->pos += w;
        long long v = w == 1 ? (int8_t)u : w == 2 ? (int16_t)u : (int32_t)u;
        char buf[24];
        rbuf_append(out, buf, (size_t)ll2string(buf, sizeof(buf), v));
        return 0;
    }
    if (n != 3) return -1;
    uint64_t clen, ulen;
    if (rd_count(r, &clen) || rd_len(r, &ulen, &special) || special) return -1;
    /* A back reference of 3 bytes yields at most 264: LZF never expands
     * more than 88x, so a larger claim is bad data, not an allocation. */
    if (clen > r->len - r->pos || ulen == 0 || ulen > clen * 90 + 64) return -1;
    rbuf_reserve(out, ulen);
    if (lzf_decode(r->p + r->pos, clen, out->buf, ulen)) return -1;
    out->len = ulen;
    r->pos += clen;
    return 0;
}

/* Listpack walking: calls fn for each entry (integers as their text).
 * Checks the header, every entry's bounds and backlen, the count and the
 * terminator. Returns the number of entries, or -1. */
typedef int (*lp_fn)(void *arg, const char *s, size_t len);

static int lp_walk(const unsigned char *lp, size_t size, lp_fn fn, void *arg) {
    if (size < LP_HDR + 1 || le_get_u32(lp) != size || lp[size - 1] != LP_EOF) return -1;
    unsigned hdr_count = (unsigned)lp[4] | ((unsigned)lp[5] << 8);
    size_t pos = LP_HDR, count = 0;
    char nb[24];
    while (pos < size - 1) {
        const unsigned char *e = lp + pos;
        size_t left = size - 1 - pos, hl, dl = 0;
        const char *s = NULL;
        size_t slen = 0;
        long long v = 0;
        int isint = 1;
        unsigned b = e[0];
        if (b < 0x80) { hl = 1; v = b; }
        else if ((b & 0xC0) == 0x80) { hl = 1; dl = b & 63; isint = 0; }
        else if ((b & 0xE0) == 0xC0) {
            if (left < 2) return -1;
            hl = 2;
            unsigned u = ((b & 0x1F) << 8) | e[1];
            v = u >= 4096 ? (long long)u - 8192 : (long long)u;
        } else if ((b & 0xF0) == 0xE0) {
            if (left < 2) return -1;
            hl = 2; dl = ((b & 0x0F) << 8) | e[1]; isint = 0;
        } else if (b == 0xF0) {
            if (left < 5) return -1;
            hl = 5; dl = le_get_u32(e + 1); isint = 0;
        } else if (b >= 0xF1 && b <= 0xF4) {
            size_t w = b == 0xF1 ? 2 : b == 0xF2 ? 3 : b == 0xF3 ? 4 : 8;
            if (left < 1 + w) return -1;
            uint64_t u = 0;
            for (size_t i = 0; i < w; i++) u |= (uint64_t)e[1 + i] << (8 * i);
            if (w < 8 && (u >> (8 * w - 1))) u |= ~0ULL << (8 * w); /* sign-extend */
            v = (long long)u;
            hl = 1 + w;
        } else {
            return -1;
        }
        if (dl > left - hl) return -1;
        size_t elen = hl + dl;
        size_t bl = elen < 128 ? 1 : elen < 16384 ? 2 : elen < 2097152 ? 3 : elen < 268435456 ? 4 : 5;
        if (bl > left - elen) return -1;
        /* decode the backlen right to left and compare */
        uint64_t back = 0;
        for (size_t i = 0; i < bl; i++) {
            unsigned c = e[elen + bl - 1 - i];
            back |= (uint64_t)(c & 127) << (7 * i);
            if (!(c & 128) != (i == bl - 1)) return -1;
        }
        if (back != elen) return -1;
        if (isint) { slen = (size_t)ll2string(nb, sizeof(nb), v); s = nb; }
        else { s = (const char *)e + hl; slen = dl; }
        if (fn && fn(arg, s, slen)) return -1;
        count++;
        pos += elen + bl;
        if (count > INT32_MAX) return -1;
    }
    if (hdr_count != 65535 && hdr_count != count) return -1;
    return (int)count;
}

/* Ziplist walking, like lp_walk: every entry through fn; the count, the
 * previous-length fields, the tail offset and the terminator are checked.
 * Returns the number of entries, or -1. */
static int zl_walk(const unsigned char *zl, size_t size, lp_fn fn, void *arg) {
    if (size < 11 || le_get_u32(zl) != size || zl[size - 1] != 0xFF) return -1;
    uint32_t tail = le_get_u32(zl + 4);
    unsigned hdr_count = (unsigned)zl[8] | ((unsigned)zl[9] << 8);
    size_t pos = 10, count = 0, prev = 0, last = 10;
    char nb[24];
    while (pos < size - 1) {
        const unsigned char *e = zl + pos;
        size_t left = size - 1 - pos, pl, hl, dl = 0;
        long long v = 0;
        int isint = 1;
        if (e[0] < 0xFE) { pl = 1; if (e[0] != prev) return -1; }
        else if (e[0] == 0xFE && left >= 5) { pl = 5; if (le_get_u32(e + 1) != prev) return -1; }
        else return -1;
        if (left <= pl) return -1;
        const unsigned char *h = e + pl;
        left -= pl;
        unsigned b = h[0];
        switch (b >> 6) {
        case 0: hl = 1; dl = b & 63; isint = 0; break;
        case 1:
            if (left < 2) return -1;
            hl = 2; dl = ((size_t)(b & 63) << 8) | h[1]; isint = 0;
            break;
        case 2:
            if (b != 0x80 || left < 5) return -1;
            hl = 5; isint = 0;
            dl = ((size_t)h[1] << 24) | ((size_t)h[2] << 16) | ((size_t)h[3] << 8) | h[4];
            break;
        default: {
            size_t w = b == 0xC0 ? 2 : b == 0xD0 ? 4 : b == 0xE0 ? 8 : b == 0xF0 ? 3 : b == 0xFE ? 1 : 0;
            if (w) {
                if (left < 1 + w) return -1;
                uint64_t u = 0;
                for (size_t i = 0; i < w; i++) u |= (uint64_t)h[1 + i] << (8 * i);
                if (w < 8 && (u >> (8 * w - 1))) u |= ~0ULL << (8 * w);
                v = (long long)u;
                hl = 1 + w;
            } else if (b >= 0xF1 && b <= 0xFD) {
                v = (long long)(b & 0x0F) - 1;
                hl = 1;
            } else {
                return -1;
            }
        }
        }
        if (hl > left || dl > left - hl) return -1;
        const char *s;
        size_t slen;
        if (isint) { slen = (size_t)ll2string(nb, sizeof(nb), v); s = nb; }
        else { s = (const char *)h + hl; slen = dl; }
        if (fn && fn(arg, s, slen)) return -1;
        last = pos;
        prev = pl + hl + dl;
        pos += prev;
        if (++count > INT32_MAX) return -1;
    }
    if ((hdr_count != 65535 && hdr_count != count) || (count && tail != last) ||
        (!count && tail != 10))
        return -1;
    return (int)count;
}

/* ---- building the restored object ---- */

typedef struct builder {
    robj *o;
    const obj_class *cls;
    rbuf arg;
    rbuf pend;      /* a hash field / zset member waiting for its pair */
    int have_pend;
    long long want; /* elements added so far must equal the size (no dups) */
} builder;

static int b_op(builder *bd, uint8_t op) {
    if (bd->cls->apply(bd->o->data, op, bd->arg.buf, bd->arg.len)) return -1;
    bd->want++;
    return bd->cls->size(bd->o->data) == bd->want ? 0 : -1;  /* a duplicate is bad data */
}

static int add_member(void *arg, const char *s, size_t len) {
    builder *bd = arg;
    bd->arg.len = 0;
    rbuf_append(&bd->arg, s, len);
    return b_op(bd, bd->o->type == OBJ_LIST ? LOP_PUSH_TAIL : SET_OP_ADD);
}

static int add_hash(builder *bd, const char *f, size_t flen, const char *v, size_t vlen) {
    bd->arg.len = 0;
    obj_put_u32(&bd->arg, (uint32_t)flen);
    rbuf_append(&bd->arg, f, flen);
    rbuf_append(&bd->arg, v, vlen);
    return b_op(bd, HASH_OP_SET);
}

static int add_zset(builder *bd, const char *m, size_t mlen, double score) {
    unsigned char d[8];
    uint64_t u;
    if (isnan(score)) return -1;
    if (score == 0) score = 0;  /* -0 is 0 */
    memcpy(&u, &score, 8);
    le_put_u64(d, u);
    bd->arg.len = 0;
    rbuf_append(&bd->arg, d, 8);
    rbuf_append(&bd->arg, m, mlen);
    return b_op(bd, ZOP_SET);
}

/* Listpack entries taken two at a time (hash field/value, zset member/score). */
static int add_pair(void *arg, const char *s, size_t len) {
    builder *bd = arg;
    if (!bd->have_pend) {
        bd->pend.len = 0;
        rbuf_append(&bd->pend, s, len);
        bd->have_pend = 1;
        return 0;
    }
    bd->have_pend = 0;
    if (bd->o->type == OBJ_HASH) return add_hash(bd, bd->pend.buf, bd->pend.len, s, len);
    double score;
    if (!string2d(s, len, &score)) return -1;
    return add_zset(bd, bd->pend.buf, bd->pend.len, score);
}

/* A listpack blob (a string in the payload) through fn. */
static int rd_listpack(reader *r, builder *bd, lp_fn fn, rbuf *tmp) {
    if (rd_string(r, tmp)) return -1;
    int n = lp_walk((const unsigned char *)tmp->buf, tmp->len, fn, bd);
    return n < 0 || bd->have_pend ? -1 : n;
}

/* The same for a ziplist blob. */
static int rd_ziplist(reader *r, builder *bd, lp_fn fn, rbuf *tmp) {
    if (rd_string(r, tmp)) return -1;
    int n = zl_walk((const unsigned char *)tmp->buf, tmp->len, fn, bd);
    return n < 0 || bd->have_pend ? -1 : n;
}

static int load_list_ziplist(reader *r, builder *bd, rbuf *tmp) {
    return rd_ziplist(r, bd, add_member, tmp) < 0 ? -1 : 0;
}

static int load_pairs_ziplist(reader *r, builder *bd, rbuf *tmp) {
    return rd_ziplist(r, bd, add_pair, tmp) < 0 ? -1 : 0;
}

/* RDB_TYPE_LIST_QUICKLIST: a count of ziplist nodes. */
static int load_list_quicklist_1(reader *r, builder *bd, rbuf *tmp) {
    uint64_t n;
    if (rd_count(r, &n)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (rd_ziplist(r, bd, add_member, tmp) < 0) return -1;
    return 0;
}

static int load_plain_members(reader *r, builder *bd, rbuf *tmp) {
    uint64_t n;
    if (rd_count(r, &n)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (rd_string(r, tmp) || add_member(bd, tmp->buf, tmp->len)) return -1;
    return 0;
}

static int load_list_quicklist(reader *r, builder *bd, rbuf *tmp) {
    uint64_t n, container;
    int special;
    if (rd_count(r, &n)) return -1;
    for (uint64_t i = 0; i < n; i++) {
        if (rd_len(r, &container, &special) || special) return -1;
        if (container == QL_NODE_PLAIN) {
            if (rd_string(r, tmp) || add_member(bd, tmp->buf, tmp->len)) return -1;
        } else if (container == QL_NODE_PACKED) {
            if (rd_listpack(r, bd, add_member, tmp) < 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

static int load_set_intset(reader *r, builder *bd, rbuf *tmp) {
    if (rd_string(r, tmp) || tmp->len < 8) return -1;
    const unsigned char *p = (const unsigned char *)tmp->buf;
    uint32_t w = le_get_u32(p), n = le_get_u32(p + 4);
    if ((w != 2 && w != 4 && w != 8) || (uint64_t)n * w != tmp->len - 8) return -1;
    long long prev = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t u = 0;
        for (uint32_t k = 0; k < w; k++) u |= (uint64_t)p[8 + i * w + k] << (8 * k);
        if (w < 8 && (u >> (8 * w - 1))) u |= ~0ULL << (8 * w);
        long long v = (long long)u;
        if (i && v <= prev) return -1;   /* sorted, unique */
        prev = v;
        char buf[24];
        if (add_member(bd, buf, (size_t)ll2string(buf, sizeof(buf), v))) return -1;
    }
    return 0;
}

static int load_set_listpack(reader *r, builder *bd, rbuf *tmp) {
    return rd_listpack(r, bd, add_member, tmp) < 0 ? -1 : 0;
}

static int load_pairs_listpack(reader *r, builder *bd, rbuf *tmp) {
    return rd_listpack(r, bd, add_pair, tmp) < 0 ? -1 : 0;
}

static int load_hash_plain(reader *r, builder *bd, rbuf *tmp) {
    uint64_t n;
    if (rd_count(r, &n)) return -1;
    for (uint64_t i = 0; i < n; i++) {
        if (rd_string(r, &bd->pend) || rd_string(r, tmp)) return -1;
        if (add_hash(bd, bd->pend.buf, bd->pend.len, tmp->buf, tmp->len)) return -1;
    }
    return 0;
}

/* RDB_TYPE_ZSET_2: binary little-endian doubles; RDB_TYPE_ZSET: a u8
 * length then text, 253 nan, 254 +inf, 255 -inf. */
static int rd_score(reader *r, int binary, double *d) {
    if (binary) {
        if (r->len - r->pos < 8) return -1;
        uint64_t u = le_get_u64(r->p + r->pos);
        r->pos += 8;
        memcpy(d, &u, 8);
        return 0;
    }
    unsigned n;
    if (rd_byte(r, &n)) return -1;
    if (n == 253) return -1;
    if (n == 254 || n == 255) { *d = n == 254 ? INFINITY : -INFINITY; return 0; }
    if (r->len - r->pos < n) return -1;
    int ok = string2d((const char *)r->p + r->pos, n, d);
    r->pos += n;
    return ok ? 0 : -1;
}

static int load_zset_plain(reader *r, builder *bd, rbuf *tmp, int binary) {
    uint64_t n;
    double d;
    if (rd_count(r, &n)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (rd_string(r, tmp) || rd_score(r, binary, &d) || add_zset(bd, tmp->buf, tmp->len, d))
            return -1;
    return 0;
}

static int load_zset_1(reader *r, builder *bd, rbuf *tmp) { return load_zset_plain(r, bd, tmp, 0); }
static int load_zset_2(reader *r, builder *bd, rbuf *tmp) { return load_zset_plain(r, bd, tmp, 1); }

/* ---- streams (RDB_TYPE_STREAM_LISTPACKS_2) ----
 *
 * The payload: the count of listpack nodes, each as (the master ID as a
 * 16-byte big-endian string, the listpack); the length, last ID, first ID,
 * max deleted ID and entries-added; then the groups: name, last ID,
 * entries-read, the group's pending entries (16-byte big-endian ID, u64 LE
 * delivery time, count), the consumers (name, u64 LE seen time, the IDs it
 * owns). A node's listpack holds the master entry (live count, deleted
 * count, the master fields, 0) then entries: flags, ms and seq relative to
 * the master ID, the values alone (SAMEFIELDS) or the field count and
 * pairs, then the entry's element count.
 *
 * Redis before 7.0 wrote type 15: no first ID, max deleted ID,
 * entries-added or entries-read; Redis 7.0 then takes entries-added to be
 * the length and estimates each group's entries-read (estimate_read).
 *
 * The stream is rebuilt through t_stream.c's effects: each entry an
 * SOP_ADD (the first of a node opening it), a deleted one also an SOP_DEL,
 * then SOP_META, then per group SOP_GCREATE, SOP_CCREATE and SOP_PELSET. */

/* A listpack's elements as strings (copies: lp_walk's integers live in a
 * buffer of its own). */
typedef struct lpelems { rbuf data; size_t *off, n, cap; } lpelems;

static int lp_collect(void *arg, const char *s, size_t len) {
    lpelems *le = arg;
    if (le->n + 1 >= le->cap) {
        le->cap = le->cap ? le->cap * 2 : 64;
        le->off = realloc(le->off, le->cap * sizeof(size_t));
        if (!le->off) abort();
    }
    rbuf_append(&le->data, s, len);
    le->off[++le->n] = le->data.len;
    return 0;
}

static const char *lpe_str(const lpelems *le, size_t i, size_t *len) {
    *len = le->off[i + 1] - le->off[i];
    return le->data.buf + le->off[i];
}

/* Element i as an integer; -1 if it is not one. */
static int lpe_int(const lpelems *le, size_t i, long long *v) {
    size_t len;
    if (i >= le->n) return -1;
    const char *s = lpe_str(le, i, &len);
    return string2ll(s, len, v) ? 0 : -1;
}

static int s_apply(builder *bd, uint8_t op) {
    return bd->cls->apply(bd->o->data, op, bd->arg.buf, bd->arg.len);
}

static void put_le_sid(rbuf *b, uint64_t ms, uint64_t seq) {
    unsigned char d[16];
    le_put_u64(d, ms);
    le_put_u64(d + 8, seq);
    rbuf_append(b, d, 16);
}

static uint64_t be_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

/* One node: the master ID (16 bytes BE) in key, its listpack in lp. */
/* What a stream payload says of the whole stream (IDs as the effects'
 * 16 little-endian bytes). */
typedef struct smeta {
    unsigned char last[16], first[16];
    int have_first;     /* first: the first live entry loaded */
    uint64_t len, added;
    int v2;             /* RDB_TYPE_STREAM_LISTPACKS_2 (else the older 15) */
} smeta;

static int load_stream_node(builder *bd, smeta *m, const rbuf *key, const rbuf *lp) {
    lpelems le = {0};
    long long count, deleted, nmf, v;
    int rc = -1;
    rbuf dels;
    rbuf_init(&dels);
    rbuf_init(&le.data);
    le.off = calloc(64, sizeof(size_t));
    if (!le.off) abort();
    le.cap = 64;
    if (key->len != 16 || lp_walk((const unsigned char *)lp->buf, lp->len, lp_collect, &le) < 0)
        goto done;
    uint64_t mms = be_u64((const unsigned char *)key->buf), mseq = be_u64((const unsigned char *)key->buf + 8);
    if (lpe_int(&le, 0, &count) || lpe_int(&le, 1, &deleted) || lpe_int(&le, 2, &nmf) ||
        count < 0 || deleted < 0 || nmf <= 0 || (size_t)nmf > le.n)
        goto done;
    size_t i = 3 + (size_t)nmf, mf = 3, seen = 0, dead = 0;
    if (lpe_int(&le, i++, &v) || v != 0) goto done;
    while (i < le.n) {
        long long flags, dms, dseq, nf;
        if (lpe_int(&le, i, &flags) || lpe_int(&le, i + 1, &dms) || lpe_int(&le, i + 2, &dseq) ||
            flags < 0 || flags > 3)
            goto done;
        i += 3;
        int same = flags & STREAM_SAMEFIELDS;
        if (same) nf = nmf;
        else if (lpe_int(&le, i++, &nf) || nf < 0 || (size_t)nf > le.n) goto done;
        size_t need = same ? (size_t)nf : 2 * (size_t)nf;
        if (need + 1 > le.n - i) goto done;
        bd->arg.len = 0;
        put_le_sid(&bd->arg, mms + (uint64_t)dms, mseq + (uint64_t)dseq);
        rbuf_append(&bd->arg, seen == 0 ? "\1" : "\0", 1);
        for (long long f = 0; f < nf; f++) {
            size_t fl, vl;
            const char *fs = same ? lpe_str(&le, mf + (size_t)f, &fl) : lpe_str(&le, i++, &fl);
            const char *vs = lpe_str(&le, i++, &vl);
            obj_put_u32(&bd->arg, (uint32_t)fl);
            rbuf_append(&bd->arg, fs, fl);
            obj_put_u32(&bd->arg, (uint32_t)vl);
            rbuf_append(&bd->arg, vs, vl);
        }
        /* A deleted entry's fields do not matter; Rowan writes none. */
        if (nf == 0 && (flags & STREAM_DELETED)) {
            obj_put_u32(&bd->arg, 0);
            obj_put_u32(&bd->arg, 0);
        }
        long long lpcount;
        if (lpe_int(&le, i++, &lpcount) || lpcount != nf + 3 + (same ? 0 : nf + 1)) goto done;
        if (s_apply(bd, SOP_ADD)) goto done;
        if (flags & STREAM_DELETED) {
            rbuf_append(&dels, bd->arg.buf, 16);
            dead++;
        } else if (!m->have_first) {
            memcpy(m->first, bd->arg.buf, 16);
            m->have_first = 1;
        }
        seen++;
    }
    /* The master's counts describe the entries; a node holds at least one. */
    if (seen == 0 || (size_t)count != seen - dead || (size_t)deleted != dead) goto done;
    /* Deletions last: a node emptied early would not take the rest. */
    for (size_t d = 0; d < dead; d++) {
        bd->arg.len = 0;
        rbuf_append(&bd->arg, dels.buf + 16 * d, 16);
        rbuf_append(&bd->arg, "\0", 1);
        if (s_apply(bd, SOP_DEL)) goto done;
    }
    rc = 0;
done:
    free(le.off);
    rbuf_free(&le.data);
    rbuf_free(&dels);
    return rc;
}

static int rd_ms_time(reader *r, int64_t *t) {
    if (r->len - r->pos < 8) return -1;
    *t = (int64_t)le_get_u64(r->p + r->pos);
    r->pos += 8;
    return 0;
}

static int rd_raw_sid(reader *r, unsigned char *le) {
    if (r->len - r->pos < 16) return -1;
    le_put_u64(le, be_u64(r->p + r->pos));
    le_put_u64(le + 8, be_u64(r->p + r->pos + 8));
    r->pos += 16;
    return 0;
}

static int rd_id(reader *r, rbuf *b) {
    uint64_t ms, seq;
    int sp1, sp2;
    if (rd_len(r, &ms, &sp1) || sp1 || rd_len(r, &seq, &sp2) || sp2) return -1;
    put_le_sid(b, ms, seq);
    return 0;
}

static int sid_le_cmp(const unsigned char *a, const unsigned char *b) {
    uint64_t x = le_get_u64(a), y = le_get_u64(b);
    if (x == y) x = le_get_u64(a + 8), y = le_get_u64(b + 8);
    return x < y ? -1 : x > y;
}

/* A group's pending entries: 32 bytes each, the effect's (id, time,
 * count), sorted by id; owned[] marks those a consumer claimed. */
/* A group's entries-read where the payload has none (type 15): Redis's
 * streamEstimateDistanceFromFirstEverEntry, on a stream that has no
 * deleted-ID record (entries added = length). -1: unknown. */
static long long estimate_read(const smeta *m, const unsigned char *id) {
    if (!m->added) return 0;
    int cmp_last = sid_le_cmp(id, m->last);
    if (!m->len && cmp_last <= 0) return (long long)m->added;
    if (cmp_last == 0) return (long long)m->added;
    if (cmp_last > 0 || !m->have_first) return -1;
    int cmp_first = sid_le_cmp(id, m->first);
    if (cmp_first < 0) return (long long)(m->added - m->len);
    if (cmp_first == 0) return (long long)(m->added - m->len + 1);
    return -1;
}

static int load_stream_group(reader *r, builder *bd, const smeta *m, rbuf *tmp) {
    uint64_t npel, ncons, er, cnt;
    int special, rc = -1;
    rbuf name, pel;
    rbuf_init(&name);
    rbuf_init(&pel);
    unsigned char *owned = NULL;
    bd->arg.len = 0;
    if (rd_string(r, &name) || rd_id(r, &bd->arg)) goto done;
    if (!m->v2) er = (uint64_t)estimate_read(m, (const unsigned char *)bd->arg.buf);
    else if (rd_len(r, &er, &special) || special) goto done;
    {
        unsigned char d[8];
        le_put_u64(d, er);
        rbuf_append(&bd->arg, d, 8);
    }
    rbuf_append(&bd->arg, name.buf, name.len);
    if (s_apply(bd, SOP_GCREATE) || rd_count(r, &npel)) goto done;
    for (uint64_t i = 0; i < npel; i++) {
        unsigned char e[32];
        int64_t t;
        if (rd_raw_sid(r, e) || rd_ms_time(r, &t) || rd_len(r, &cnt, &special) || special) goto done;
        le_put_u64(e + 16, (uint64_t)t);
        le_put_u64(e + 24, cnt);
        if (i && sid_le_cmp((const unsigned char *)pel.buf + pel.len - 32, e) >= 0) goto done;
        rbuf_append(&pel, e, 32);
    }
    owned = calloc(npel ? npel : 1, 1);
    if (!owned) abort();
    if (rd_count(r, &ncons)) goto done;
    for (uint64_t c = 0; c < ncons; c++) {
        int64_t seen;
        uint64_t n;
        if (rd_string(r, tmp) || rd_ms_time(r, &seen) || rd_count(r, &n)) goto done;
        /* SOP_CCREATE: seen, group, consumer; a name twice is bad data. */
        bd->arg.len = 0;
        unsigned char d[8];
        le_put_u64(d, (uint64_t)seen);
        rbuf_append(&bd->arg, d, 8);
        obj_put_u32(&bd->arg, (uint32_t)name.len);
        rbuf_append(&bd->arg, name.buf, name.len);
        rbuf_append(&bd->arg, tmp->buf, tmp->len);
        if (s_apply(bd, SOP_CCREATE)) goto done;
        /* SOP_PELSET: group, consumer, then its entries. */
        bd->arg.len = 0;
        obj_put_u32(&bd->arg, (uint32_t)name.len);
        rbuf_append(&bd->arg, name.buf, name.len);
        obj_put_u32(&bd->arg, (uint32_t)tmp->len);
        rbuf_append(&bd->arg, tmp->buf, tmp->len);
        for (uint64_t k = 0; k < n; k++) {
            unsigned char id[16];
            if (rd_raw_sid(r, id)) goto done;
            size_t lo = 0, hi = npel;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (sid_le_cmp((const unsigned char *)pel.buf + mid * 32, id) < 0) lo = mid + 1;
                else hi = mid;
            }
            if (lo == npel || sid_le_cmp((const unsigned char *)pel.buf + lo * 32, id) || owned[lo])
                goto done;
            owned[lo] = 1;
            rbuf_append(&bd->arg, pel.buf + lo * 32, 32);
        }
        if (n && s_apply(bd, SOP_PELSET)) goto done;
    }
    /* Every pending entry belongs to a consumer (Redis's deep check). */
    for (uint64_t i = 0; i < npel; i++)
        if (!owned[i]) goto done;
    rc = 0;
done:
    free(owned);
    rbuf_free(&name);
    rbuf_free(&pel);
    return rc;
}

static int load_stream_any(reader *r, builder *bd, rbuf *tmp, int v2) {
    uint64_t nodes, ngroups, maxdel_ms = 0, maxdel_seq = 0, ms, seq;
    int special, sp2;
    smeta m = {.v2 = v2};
    rbuf key;
    rbuf_init(&key);
    if (rd_count(r, &nodes)) goto bad;
    for (uint64_t i = 0; i < nodes; i++)
        if (rd_string(r, &key) || rd_string(r, tmp) || load_stream_node(bd, &m, &key, tmp)) goto bad;
    /* The length and last ID; then (v2) the first ID (skipped: it is the
     * first live entry's), the max deleted ID and entries-added. */
    if (rd_len(r, &m.len, &special) || special || rd_len(r, &ms, &special) || special ||
        rd_len(r, &seq, &sp2) || sp2)
        goto bad;
    le_put_u64(m.last, ms);
    le_put_u64(m.last + 8, seq);
    m.added = m.len;
    if (v2 && (rd_len(r, &ms, &special) || special || rd_len(r, &seq, &sp2) || sp2 ||
               rd_len(r, &maxdel_ms, &special) || special || rd_len(r, &maxdel_seq, &sp2) || sp2 ||
               rd_len(r, &m.added, &special) || special))
        goto bad;
    /* SOP_META: last ID, max deleted ID, entries added. */
    bd->arg.len = 0;
    rbuf_append(&bd->arg, m.last, 16);
    put_le_sid(&bd->arg, maxdel_ms, maxdel_seq);
    {
        unsigned char d[8];
        le_put_u64(d, m.added);
        rbuf_append(&bd->arg, d, 8);
    }
    if (s_apply(bd, SOP_META) || (uint64_t)bd->cls->size(bd->o->data) != m.len) goto bad;
    if (rd_count(r, &ngroups)) goto bad;
    for (uint64_t g = 0; g < ngroups; g++)
        if (load_stream_group(r, bd, &m, tmp)) goto bad;
    rbuf_free(&key);
    bd->want = 1;  /* an empty stream is a value too */
    return 0;
bad:
    rbuf_free(&key);
    return -1;
}

static int load_stream(reader *r, builder *bd, rbuf *tmp) { return load_stream_any(r, bd, tmp, 1); }
static int load_stream_1(reader *r, builder *bd, rbuf *tmp) { return load_stream_any(r, bd, tmp, 0); }

/* ---------------- the type tables ---------------- */

/* Savers, by Rowan type: v's elements (es) into out, type byte first. */
static const struct { int type; void (*save)(elems *es, rbuf *out); } savers[] = {
    {OBJ_LIST, save_list},
    {OBJ_SET, save_set},
    {OBJ_HASH, save_hash},
    {OBJ_ZSET, save_zset},
};

/* Loaders, by RDB type: which Rowan type they build. */
static const struct {
    int rdb_type, type;
    int (*load)(reader *r, builder *bd, rbuf *tmp);
} loaders[] = {
    {RDB_TYPE_LIST, OBJ_LIST, load_plain_members},
    {RDB_TYPE_LIST_QUICKLIST_2, OBJ_LIST, load_list_quicklist},
    {RDB_TYPE_LIST_QUICKLIST, OBJ_LIST, load_list_quicklist_1},
    {RDB_TYPE_LIST_ZIPLIST, OBJ_LIST, load_list_ziplist},
    {RDB_TYPE_HASH_ZIPLIST, OBJ_HASH, load_pairs_ziplist},
    {RDB_TYPE_ZSET_ZIPLIST, OBJ_ZSET, load_pairs_ziplist},
    {RDB_TYPE_SET, OBJ_SET, load_plain_members},
    {RDB_TYPE_SET_INTSET, OBJ_SET, load_set_intset},
    {RDB_TYPE_SET_LISTPACK, OBJ_SET, load_set_listpack},
    {RDB_TYPE_HASH, OBJ_HASH, load_hash_plain},
    {RDB_TYPE_HASH_LISTPACK, OBJ_HASH, load_pairs_listpack},
    {RDB_TYPE_ZSET, OBJ_ZSET, load_zset_1},
    {RDB_TYPE_ZSET_2, OBJ_ZSET, load_zset_2},
    {RDB_TYPE_ZSET_LISTPACK, OBJ_ZSET, load_pairs_listpack},
    {RDB_TYPE_STREAM_LISTPACKS_2, OBJ_STREAM, load_stream},
    {RDB_TYPE_STREAM_LISTPACKS, OBJ_STREAM, load_stream_1},
};

static void put_footer(rbuf *out, size_t start) {
    unsigned char f[8];
    f[0] = RDB_VERSION & 0xff;
    f[1] = RDB_VERSION >> 8;
    rbuf_append(out, f, 2);
    le_put_u64(f, rdb_crc64(0, out->buf + start, out->len - start));
    rbuf_append(out, f, 8);
}

void rdb_dump_value(const db_val *v, rbuf *out) {
    size_t start = out->len;
    if (v->type == OBJ_STRING) {
        put_byte(out, RDB_TYPE_STRING);
        put_string(out, v->ptr, v->len);
    } else if (v->type == OBJ_STREAM) {
        put_byte(out, RDB_TYPE_STREAM_LISTPACKS_2);
        stream_rdb_save(v->obj->data, out);
    } else {
        const obj_class *cls = obj_class_of(v->type);
        elems es = {.is_zset = v->type == OBJ_ZSET, .enc = cls->encoding(v->obj->data)};
        cls->elements(v->obj->data, gather, &es);
        for (size_t i = 0; i < sizeof(savers) / sizeof(savers[0]); i++)
            if (savers[i].type == v->type) savers[i].save(&es, out);
        free(es.v);
    }
    put_footer(out, start);
}

/* FUNCTION DUMP/RESTORE (t_function.c) build and read their payloads from
 * the same pieces: an RDB string, the footer. */
void rdb_put_string(rbuf *out, const char *s, size_t len) { put_string(out, s, len); }

void rdb_put_footer(rbuf *out, size_t start) { put_footer(out, start); }

/* The stream writer's pieces (t_stream.c). */
void rdb_put_len(rbuf *out, uint64_t n) { put_len(out, n); }
size_t rdb_lp_begin(rbuf *b) { return lp_begin(b); }
void rdb_lp_add(rbuf *b, const char *s, size_t len) { lp_add(b, s, len); }
void rdb_lp_add_int(rbuf *b, long long v) {
    char buf[24];
    lp_add(b, buf, (size_t)ll2string(buf, sizeof(buf), v));
}
void rdb_lp_end(rbuf *b, size_t start, size_t count) { lp_end(b, start, count); }

int rdb_read_string(const char *p, size_t len, size_t *pos, rbuf *out) {
    reader r = {(const unsigned char *)p, len, *pos};
    int rc = rd_string(&r, out);
    *pos = r.pos;
    return rc;
}

int rdb_verify_payload(const char *p, size_t len) {
    if (len < 10) return -1;
    const unsigned char *f = (const unsigned char *)p + len - 10;
    unsigned ver = f[0] | ((unsigned)f[1] << 8);
    if (ver > RDB_VERSION) return -1;
    return rdb_crc64(0, p, len - 8) == le_get_u64(f + 2) ? 0 : -1;
}

int rdb_load_value(const char *p, size_t len, rbuf *str, robj **obj) {
    unsigned t;
    *obj = NULL;
    if (len < 10) return -1;
    reader r = {(const unsigned char *)p, len - 10, 0};
    if (rd_byte(&r, &t)) return -1;
    if (t == RDB_TYPE_STRING) {
        rbuf tmp;
        rbuf_init(&tmp);
        int ok = rd_string(&r, &tmp) == 0 && r.pos == r.len;
        if (ok) rbuf_append(str, tmp.buf, tmp.len);
        rbuf_free(&tmp);
        return ok ? OBJ_STRING : -1;
    }
    for (size_t i = 0; i < sizeof(loaders) / sizeof(loaders[0]); i++) {
        if (loaders[i].rdb_type != (int)t) continue;
        builder bd = {0};
        rbuf tmp;
        rbuf_init(&tmp);
        rbuf_init(&bd.arg);
        rbuf_init(&bd.pend);
        bd.o = obj_new(loaders[i].type, 0, "", 0);
        bd.cls = obj_class_of(loaders[i].type);
        int ok = loaders[i].load(&r, &bd, &tmp) == 0 && r.pos == r.len && bd.want > 0;
        rbuf_free(&tmp);
        rbuf_free(&bd.arg);
        rbuf_free(&bd.pend);
        if (!ok) {
            obj_free(bd.o);
            return -1;
        }
        *obj = bd.o;
        return loaders[i].type;
    }
    return -1;
}
