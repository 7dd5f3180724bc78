/* t_bitops.c -- BITPOS, BITOP, BITFIELD, BITFIELD_RO: strings as bit
 * arrays (SETBIT, GETBIT and BITCOUNT are in t_string.c).
 *
 * Bits are numbered from the most significant bit of byte 0, as in Redis;
 * a missing key is an infinite run of zero bits. Writes build the whole
 * new value and store it with db_set (the string is one log entry), keeping
 * the key's TTL (BITFIELD) or clearing it (BITOP's destination, as SET
 * does). A write whose value would exceed what one entry holds is refused
 * before anything is allocated.
 *
 * BITFIELD computes in 128-bit arithmetic, so overflow detection is exact
 * for every width: WRAP keeps the low bits (sign-extended for iN), SAT
 * clamps to the type's range, FAIL answers nil and leaves the field as it
 * was. A SET checks its value the same way (as an increment of 0 from the
 * value). As in Redis, a write form creates (or zero-extends) the key to
 * the highest field it names even if every operation FAILs.
 *
 * Replies, error texts and the order of checks follow Redis 7.0. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "db.h"
#include "server.h"
#include "util.h"

#define ERR_BIT_OFFSET "ERR bit offset is not an integer or out of range"

/* argv[i] as a string: 1 found, 0 missing, -1 another type (replied). */
static int bits_lookup(client *c, int i, db_val *v, int for_write) {
    int found = for_write ? db_peek(&c->x, c->db, c->argv[i], c->argvlen[i], v)
                          : db_lookup(&c->x, c->db, c->argv[i], c->argvlen[i], v);
    if (!found) return 0;
    if (v->type != OBJ_STRING) {
        resp_add_error(&c->out, ERR_WRONGTYPE);
        return -1;
    }
    return 1;
}

/* ---------------- BITPOS ---------------- */

/* The first bit equal to `bit` in byte b, or -1. */
static int bit_in_byte(unsigned b, int bit) {
    if (!bit) b = ~b & 0xff;
    if (!b) return -1;
    return __builtin_clz(b) - (int)(sizeof(unsigned) * 8 - 8);
}

/* BITPOS key bit [start [end [BYTE|BIT]]] */
void bitposCommand(client *c) {
    long long bit, start = 0, end, total;
    int isbit = 0, end_given = 0;
    unsigned first_mask = 0, last_mask = 0;  /* bits outside the range */
    db_val v;
    if (arg_ll(c, 2, &bit)) return;
    if (bit != 0 && bit != 1) {
        resp_add_error(&c->out, "ERR The bit argument must be 1 or 0.");
        return;
    }
    int r = bits_lookup(c, 1, &v, 0);
    if (r < 0) return;
    if (r == 0) {
        resp_add_int(&c->out, bit ? -1 : 0);
        return;
    }
    const unsigned char *p = (const unsigned char *)v.ptr;
    total = (long long)v.len;
    if (c->argc >= 4 && c->argc <= 6) {
        if (arg_ll(c, 3, &start)) return;
        if (c->argc == 6) {
            if (arg_is(c, 5, "bit")) isbit = 1;
            else if (!arg_is(c, 5, "byte")) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return;
            }
        }
        if (c->argc >= 5) {
            if (arg_ll(c, 4, &end)) return;
            end_given = 1;
        } else {
            end = isbit ? total * 8 + 7 : total - 1;
        }
        if (isbit) total *= 8;
        if (start < 0) start += total;
        if (end < 0) end += total;
        if (start < 0) start = 0;
        if (end < 0) end = 0;
        if (end >= total) end = total - 1;
        if (isbit && start <= end) {
            first_mask = ~(0xffu >> (start & 7)) & 0xff;
            last_mask = (1u << (7 - (end & 7))) - 1;
            start >>= 3;
            end >>= 3;
        }
    } else if (c->argc == 3) {
        end = total - 1;
    } else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (start > end) {
        resp_add_int(&c->out, -1);
        return;
    }
    for (long long i = start; i <= end; i++) {
        unsigned b = p[i], outside = 0;
        if (i == start) outside |= first_mask;
        if (i == end) outside |= last_mask;
        /* bits outside the range never match */
        b = bit ? (b & ~outside) : (b | outside);
        int k = bit_in_byte(b & 0xff, (int)bit);
        if (k >= 0) {
            resp_add_int(&c->out, i * 8 + k);
            return;
        }
    }
    /* No 1 bit: -1. No 0 bit: past the end of the string (which is padded
     * with zeros), unless the client gave the end. */
    resp_add_int(&c->out, bit || end_given ? -1 : (end + 1) * 8);
}

/* ---------------- BITOP ---------------- */

/* BITOP AND|OR|XOR|NOT destkey key [key ...] */
void bitopCommand(client *c) {
    int op;
    if (arg_is(c, 1, "and")) op = '&';
    else if (arg_is(c, 1, "or")) op = '|';
    else if (arg_is(c, 1, "xor")) op = '^';
    else if (arg_is(c, 1, "not")) op = '~';
    else {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    int nsrc = c->argc - 3;
    if (op == '~' && nsrc != 1) {
        resp_add_error(&c->out, "ERR BITOP NOT must be called with a single source key.");
        return;
    }
    const unsigned char **src = calloc((size_t)nsrc, sizeof(*src));
    size_t *len = calloc((size_t)nsrc, sizeof(*len)), maxlen = 0;
    if (!src || !len) abort();
    for (int j = 0; j < nsrc; j++) {
        db_val v;
        int r = bits_lookup(c, 3 + j, &v, 0);
        if (r < 0) goto done;
        if (r) {
            src[j] = (const unsigned char *)v.ptr;
            len[j] = v.len;
            if (v.len > maxlen) maxlen = v.len;
        }
    }
    if (maxlen == 0) {
        /* Nothing to store: the destination goes away, as in Redis. */
        db_val old;
        int r = db_peek(&c->x, c->db, c->argv[2], c->argvlen[2], &old) ?
                db_del(&c->x, c->db, c->argv[2], c->argvlen[2]) : 0;
        if (r == DB_OOM) resp_add_error(&c->out, db_error_text(&c->x));
        else resp_add_int(&c->out, 0);
        goto done;
    }
    unsigned char *out = malloc(maxlen);
    if (!out) abort();
    for (size_t i = 0; i < maxlen; i++) {
        unsigned acc = i < len[0] ? src[0][i] : 0;
        if (op == '~') acc = ~acc & 0xff;
        for (int j = 1; j < nsrc; j++) {
            unsigned b = i < len[j] ? src[j][i] : 0;
            acc = op == '&' ? (acc & b) : op == '|' ? (acc | b) : (acc ^ b);
        }
        out[i] = (unsigned char)acc;
    }
    int r = db_set(&c->x, c->db, c->argv[2], c->argvlen[2], (const char *)out, maxlen, 0);
    free(out);
    if (r == DB_OOM) resp_add_error(&c->out, db_error_text(&c->x));
    else resp_add_int(&c->out, (long long)maxlen);
done:
    free(src);
    free(len);
}

/* ---------------- BITFIELD ---------------- */

enum { BF_GET, BF_SET, BF_INCRBY };
enum { OW_WRAP, OW_SAT, OW_FAIL };

typedef struct bf_op {
    int kind, sign, bits, overflow;
    unsigned long long offset;
    long long arg;
} bf_op;

/* "i8", "u16"...: iN for N in 1..64, uN for N in 1..63. */
static int bf_type(client *c, int i, int *sign, int *bits) {
    const char *s = c->argv[i];
    size_t n = c->argvlen[i];
    long long b;
    if (n >= 2 && (s[0] == 'i' || s[0] == 'u' || s[0] == 'I' || s[0] == 'U') &&
        string2ll(s + 1, n - 1, &b)) {
        *sign = s[0] == 'i' || s[0] == 'I';
        if (b >= 1 && ((*sign && b <= 64) || (!*sign && b <= 63))) {
            *bits = (int)b;
            return 0;
        }
    }
    resp_add_error(&c->out, "ERR Invalid bitfield type. Use something like i16 u8. "
                            "Note that u64 is not supported but i64 is.");
    return -1;
}

/* An offset, or "#n" for n fields of this width. */
static int bf_offset(client *c, int i, int bits, unsigned long long *off) {
    const char *s = c->argv[i];
    size_t n = c->argvlen[i];
    int hash = n && s[0] == '#';
    long long v;
    if (!string2ll(s + hash, n - (size_t)hash, &v) || v < 0 ||
        (hash && v > LLONG_MAX / bits) || ((hash ? v * bits : v) >> 3) >= server.cfg.proto_max_bulk_len) {
        resp_add_error(&c->out, ERR_BIT_OFFSET);
        return -1;
    }
    *off = (unsigned long long)(hash ? v * bits : v);
    return 0;
}

/* Parse the operations from argv[2]. Returns how many, or -1 (replied). */
static int bf_parse(client *c, int readonly, bf_op **out) {
    bf_op *ops = malloc(sizeof(*ops) * (size_t)(c->argc / 2 + 1));
    int n = 0, overflow = OW_WRAP;
    if (!ops) abort();
    for (int j = 2; j < c->argc; j++) {
        int more = c->argc - 1 - j;
        bf_op op = {0};
        if (arg_is(c, j, "get") && more >= 2) op.kind = BF_GET;
        else if (arg_is(c, j, "set") && more >= 3) op.kind = BF_SET;
        else if (arg_is(c, j, "incrby") && more >= 3) op.kind = BF_INCRBY;
        else if (arg_is(c, j, "overflow") && more >= 1) {
            j++;
            if (arg_is(c, j, "wrap")) overflow = OW_WRAP;
            else if (arg_is(c, j, "sat")) overflow = OW_SAT;
            else if (arg_is(c, j, "fail")) overflow = OW_FAIL;
            else {
                resp_add_error(&c->out, "ERR Invalid OVERFLOW type specified");
                goto bad;
            }
            continue;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto bad;
        }
        if (bf_type(c, j + 1, &op.sign, &op.bits) || bf_offset(c, j + 2, op.bits, &op.offset))
            goto bad;
        if (op.kind != BF_GET) {
            if (arg_ll(c, j + 3, &op.arg)) goto bad;
            j++;
        }
        j += 2;
        op.overflow = overflow;
        ops[n++] = op;
    }
    if (readonly) {
        for (int i = 0; i < n; i++) {
            if (ops[i].kind != BF_GET) {
                resp_add_error(&c->out, "ERR BITFIELD_RO only supports the GET subcommand");
                goto bad;
            }
        }
    }
    *out = ops;
    return n;
bad:
    free(ops);
    return -1;
}

static unsigned long long bf_get(const unsigned char *p, size_t len, unsigned long long off, int bits) {
    unsigned long long v = 0;
    for (int i = 0; i < bits; i++, off++) {
        size_t byte = (size_t)(off >> 3);
        unsigned b = byte < len ? (p[byte] >> (7 - (off & 7))) & 1 : 0;
        v = (v << 1) | b;
    }
    return v;
}

static void bf_put(unsigned char *p, unsigned long long off, int bits, unsigned long long v) {
    for (int i = bits - 1; i >= 0; i--, off++) {
        unsigned b = (unsigned)(v >> i) & 1;
        unsigned char m = (unsigned char)(1u << (7 - (off & 7)));
        if (b) p[off >> 3] |= m;
        else p[off >> 3] &= (unsigned char)~m;
    }
}

static long long sign_extend(unsigned long long v, int bits) {
    if (bits < 64 && (v >> (bits - 1)) & 1) v |= ~0ULL << bits;
    return (long long)v;
}

/* value + incr fitted to the field: 0 fits (or wrapped/saturated into
 * *res), -1 FAIL. */
static int bf_fit(const bf_op *op, __int128 sum, unsigned long long *res) {
    __int128 max, min;
    if (op->sign) {
        max = op->bits == 64 ? (__int128)LLONG_MAX : ((__int128)1 << (op->bits - 1)) - 1;
        min = -max - 1;
    } else {
        max = ((__int128)1 << op->bits) - 1;
        min = 0;
    }
    if (sum >= min && sum <= max) {
        *res = (unsigned long long)sum;
        return 0;
    }
    if (op->overflow == OW_FAIL) return -1;
    if (op->overflow == OW_SAT) *res = (unsigned long long)(sum > max ? max : min);
    else *res = (unsigned long long)sum;   /* the low bits: bf_put keeps `bits` of them */
    return 0;
}

static void bitfield_generic(client *c, int readonly) {
    bf_op *ops;
    int n = bf_parse(c, readonly, &ops);
    if (n < 0) return;
    int writes = 0;
    unsigned long long need = 0;   /* bytes the write forms reach */
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == BF_GET) continue;
        writes = 1;
        unsigned long long end = (ops[i].offset + (unsigned long long)ops[i].bits - 1) / 8 + 1;
        if (end > need) need = end;
    }
    db_val v;
    int r = bits_lookup(c, 1, &v, writes);
    if (r < 0) goto done;
    if (!r) {
        v.ptr = NULL;
        v.len = 0;
        v.expire_ms = 0;
    }
    size_t len = v.len;
    unsigned char *buf = NULL;
    if (writes) {
        if (need > v.len) len = (size_t)need;
        if (len > DB_MAX_ARG_LEN) {
            resp_add_error(&c->out, db_too_big_error);
            goto done;
        }
        buf = calloc(1, len ? len : 1);
        if (!buf) abort();
        if (v.len) memcpy(buf, v.ptr, v.len);
    }
    const unsigned char *p = buf ? buf : (const unsigned char *)v.ptr;
    size_t mark = c->out.b.len;   /* the replies are taken back if the write is refused */
    resp_add_array(&c->out, n);
    for (int i = 0; i < n; i++) {
        const bf_op *op = &ops[i];
        unsigned long long raw = bf_get(p, len, op->offset, op->bits), res;
        __int128 old = op->sign ? (__int128)sign_extend(raw, op->bits) : (__int128)raw;
        if (op->kind == BF_GET) {
            resp_add_int(&c->out, (long long)old);
            continue;
        }
        __int128 target = op->kind == BF_INCRBY ? old + op->arg
                        : op->sign ? (__int128)op->arg : (__int128)(unsigned long long)op->arg;
        if (bf_fit(op, target, &res)) {
            resp_add_null(&c->out);
            continue;
        }
        bf_put(buf, op->offset, op->bits, res);
        if (op->kind == BF_SET) {
            resp_add_int(&c->out, (long long)old);
        } else {
            unsigned long long now = bf_get(buf, len, op->offset, op->bits);
            resp_add_int(&c->out, op->sign ? sign_extend(now, op->bits) : (long long)now);
        }
    }
    if (writes && (!r || len != v.len || memcmp(buf, v.ptr, len))) {
        if (db_set(&c->x, c->db, c->argv[1], c->argvlen[1], (const char *)buf, len,
                   v.expire_ms) == DB_OOM) {
            c->out.b.len = mark;
            resp_add_error(&c->out, db_error_text(&c->x));
        }
    }
    free(buf);
done:
    free(ops);
}

/* BITFIELD key [GET type offset] [SET type offset value]
 *              [INCRBY type offset increment] [OVERFLOW WRAP|SAT|FAIL] ... */
void bitfieldCommand(client *c) { bitfield_generic(c, 0); }
/* BITFIELD_RO key [GET type offset] ... */
void bitfield_roCommand(client *c) { bitfield_generic(c, 1); }
