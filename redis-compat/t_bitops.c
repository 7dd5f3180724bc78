/* t_bitops.c -- the bitmap commands beyond SETBIT/GETBIT/BITCOUNT (those
 * live in t_string.c): BITPOS, BITOP, BITFIELD and BITFIELD_RO.
 *
 * A bitmap is a plain string; bit 0 is the most significant bit of byte 0.
 * Bits past the end of the string read as 0. As for every string write,
 * what is logged is the key's complete new value (db_set), built here in a
 * temporary buffer, so replay never re-executes a command.
 *
 * BITFIELD first parses every operation (so a bad argument anywhere changes
 * nothing), then, when one of them writes, pads the string with zeroes up to
 * the farthest bit written, as Redis does, even if OVERFLOW FAIL then skips
 * every write. Overflow is computed exactly in 128-bit arithmetic: a
 * result outside [min, max] of the field overflows; WRAP keeps its low
 * bits (sign-extended for signed fields), SAT clamps, FAIL skips the
 * operation and replies nil.
 *
 * Replies, errors and the order in which arguments are checked follow
 * Redis 7.0/7.2. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "notify.h"
#include "server.h"
#include "t_string.h"
#include "util.h"

/* ---------------- bit access ---------------- */

static int get_bit(const unsigned char *p, size_t len, unsigned long long off) {
    size_t byte = (size_t)(off >> 3);
    if (byte >= len) return 0;
    return (p[byte] >> (7 - (off & 7))) & 1;
}

static void put_bit(unsigned char *p, unsigned long long off, int on) {
    unsigned char mask = (unsigned char)(1u << (7 - (off & 7)));
    if (on) p[off >> 3] |= mask;
    else p[off >> 3] &= (unsigned char)~mask;
}

/* The bits [off, off+bits) as an unsigned number, first bit most significant. */
static uint64_t get_field(const unsigned char *p, size_t len, unsigned long long off, int bits) {
    uint64_t v = 0;
    for (int i = 0; i < bits; i++) v = (v << 1) | (uint64_t)get_bit(p, len, off + (unsigned)i);
    return v;
}

static void put_field(unsigned char *p, unsigned long long off, int bits, uint64_t v) {
    for (int i = 0; i < bits; i++) put_bit(p, off + (unsigned)i, (int)((v >> (bits - 1 - i)) & 1));
}

/* ---------------- BITPOS ---------------- */

/* The first bit equal to bit in [from, to] (bit positions), or -1. */
static long long find_bit(const unsigned char *p, size_t len, long long from, long long to, int bit) {
    unsigned char skip = bit ? 0x00 : 0xff;
    long long i = from;
    while (i <= to) {
        if ((i & 7) == 0 && i + 7 <= to && p[i >> 3] == skip) {
            i += 8;   /* a whole byte without the bit */
            continue;
        }
        if (get_bit(p, len, (unsigned long long)i) == bit) return i;
        i++;
    }
    return -1;
}

/* BITPOS key bit [start [end [BYTE|BIT]]]. A missing key is all zeroes:
 * the first 1 is nowhere (-1), the first 0 at 0. Without an end, a clear
 * bit is "found" just past the string (it reads as padded with zeroes). */
void bitposCommand(client *c) {
    long long bit, start = 0, end, total;
    int isbit = 0, end_given = 0;
    const unsigned char *p;
    db_val v;
    int r;

    if (arg_ll(c, 2, &bit) != 0) return;
    if (bit != 0 && bit != 1) {
        resp_add_error(&c->out, "ERR The bit argument must be 1 or 0.");
        return;
    }
    r = lookup_string(c, 1, &v, 0);
    if (r < 0) return;
    if (r == 0) {
        resp_add_int(&c->out, bit ? -1 : 0);
        return;
    }
    p = (const unsigned char *)v.ptr;
    total = (long long)v.len;
    end = total - 1;
    if (c->argc >= 4 && c->argc <= 6) {
        if (arg_ll(c, 3, &start) != 0) return;
        if (c->argc == 6) {
            if (arg_is(c, 5, "bit")) isbit = 1;
            else if (!arg_is(c, 5, "byte")) {
                resp_add_error(&c->out, ERR_SYNTAX);
                return;
            }
        }
        if (c->argc >= 5) {
            if (arg_ll(c, 4, &end) != 0) return;
            end_given = 1;
        }
        if (isbit) total <<= 3;
        if (start < 0) start += total;
        if (end < 0) end += total;
        if (start < 0) start = 0;
        if (end < 0) end = 0;
        if (end >= total) end = total - 1;
    } else if (c->argc != 3) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (start > end) {
        resp_add_int(&c->out, -1);
        return;
    }
    if (!isbit) {
        start <<= 3;
        end = (end << 3) + 7;
    }
    long long pos = find_bit(p, v.len, start, end, (int)bit);
    if (pos < 0 && bit == 0 && !end_given) pos = end + 1;
    resp_add_int(&c->out, pos);
}

/* ---------------- BITOP ---------------- */

enum { BITOP_AND, BITOP_OR, BITOP_XOR, BITOP_NOT };

/* BITOP op destkey key [key ...]: missing sources are empty strings, and
 * every source is padded with zeroes to the longest. An empty result
 * deletes destkey; otherwise it is set, without TTL, like SET. */
void bitopCommand(client *c) {
    static const char *names[] = {"and", "or", "xor", "not"};
    int op = -1, nsrc = c->argc - 3, r;
    size_t maxlen = 0;
    db_val *src;
    unsigned char *out;

    for (int i = 0; i < 4; i++)
        if (arg_is(c, 1, names[i])) op = i;
    if (op < 0) {
        resp_add_error(&c->out, ERR_SYNTAX);
        return;
    }
    if (op == BITOP_NOT && nsrc != 1) {
        resp_add_error(&c->out, "ERR BITOP NOT must be called with a single source key.");
        return;
    }
    src = calloc((size_t)nsrc, sizeof(*src));
    for (int j = 0; j < nsrc; j++) {
        r = lookup_string(c, 3 + j, &src[j], 0);
        if (r < 0) {
            free(src);
            return;
        }
        if (r == 0) src[j].len = 0;
        if (src[j].len > maxlen) maxlen = src[j].len;
    }
    if (maxlen == 0) {
        free(src);
        r = db_del(&c->x, c->db, c->argv[2], c->argvlen[2]);
        if (r == DB_OOM) {
            resp_add_error(&c->out, db_error_text(&c->x));
            return;
        }
        if (r == 1) notify_key(c, NOTIFY_GENERIC, "del", 2);
        resp_add_int(&c->out, 0);
        return;
    }
    const char *why = db_check_string(&c->x, c->argvlen[2], maxlen);
    if (why) {
        free(src);
        resp_add_error(&c->out, why);
        return;
    }
    out = malloc(maxlen);
    for (size_t i = 0; i < maxlen; i++) {
        unsigned char acc = i < src[0].len ? (unsigned char)src[0].ptr[i] : 0;
        if (op == BITOP_NOT) acc = (unsigned char)~acc;
        for (int j = 1; j < nsrc; j++) {
            unsigned char b = i < src[j].len ? (unsigned char)src[j].ptr[i] : 0;
            if (op == BITOP_AND) acc &= b;
            else if (op == BITOP_OR) acc |= b;
            else acc ^= b;
        }
        out[i] = acc;
    }
    free(src);
    r = db_set(&c->x, c->db, c->argv[2], c->argvlen[2], (const char *)out, maxlen, 0);
    free(out);
    if (r == DB_OOM) {
        resp_add_error(&c->out, db_error_text(&c->x));
        return;
    }
    string_mark_edited(c, 2);   /* Redis builds BITOP's result as "raw" */
    notify_key(c, NOTIFY_STRING, "set", 2);
    resp_add_int(&c->out, (long long)maxlen);
}

/* ---------------- BITFIELD ---------------- */

enum { BF_GET, BF_SET, BF_INCRBY };
enum { BF_WRAP, BF_SAT, BF_FAIL };

typedef struct bf_op {
    int opcode, owtype, sign, bits;
    unsigned long long offset;
    long long value;      /* SET's value or INCRBY's increment */
} bf_op;

/* "i1".."i64" or "u1".."u63". */
static int parse_bf_type(client *c, int i, int *sign, int *bits) {
    long long b;
    const char *s = c->argv[i];
    size_t len = c->argvlen[i];
    if (len >= 2 && (s[0] == 'i' || s[0] == 'u') && string2ll(s + 1, len - 1, &b)) {
        *sign = s[0] == 'i';
        if (b >= 1 && ((*sign && b <= 64) || (!*sign && b <= 63))) {
            *bits = (int)b;
            return 0;
        }
    }
    resp_add_error(&c->out, "ERR Invalid bitfield type. Use something like i16 u8. "
                            "Note that u64 is not supported but i64 is.");
    return -1;
}

/* Parse every operation of BITFIELD (argv[2..]); NULL after replying an
 * error. *writes: how many SET/INCRBY there are; *maxbit: the last bit they
 * touch. */
static bf_op *parse_bf_ops(client *c, int *nops, int *writes, unsigned long long *maxbit) {
    bf_op *ops = calloc((size_t)c->argc, sizeof(*ops));
    int owtype = BF_WRAP, n = 0;
    *writes = 0;
    *maxbit = 0;
    for (int j = 2; j < c->argc; j++) {
        int left = c->argc - j - 1;
        bf_op *o = &ops[n];
        if (arg_is(c, j, "get") && left >= 2) o->opcode = BF_GET;
        else if (arg_is(c, j, "set") && left >= 3) o->opcode = BF_SET;
        else if (arg_is(c, j, "incrby") && left >= 3) o->opcode = BF_INCRBY;
        else if (arg_is(c, j, "overflow") && left >= 1) {
            j++;
            if (arg_is(c, j, "wrap")) owtype = BF_WRAP;
            else if (arg_is(c, j, "sat")) owtype = BF_SAT;
            else if (arg_is(c, j, "fail")) owtype = BF_FAIL;
            else {
                resp_add_error(&c->out, "ERR Invalid OVERFLOW type specified");
                goto bad;
            }
            continue;
        } else {
            resp_add_error(&c->out, ERR_SYNTAX);
            goto bad;
        }
        if (parse_bf_type(c, j + 1, &o->sign, &o->bits) != 0) goto bad;
        if (parse_bit_offset_arg(c, j + 2, o->bits, &o->offset) != 0) goto bad;
        if (o->opcode != BF_GET) {
            if (arg_ll(c, j + 3, &o->value) != 0) goto bad;
            unsigned long long last = o->offset + (unsigned)o->bits - 1;
            if (last > *maxbit || *writes == 0) *maxbit = last;
            (*writes)++;
        }
        o->owtype = owtype;
        n++;
        j += o->opcode == BF_GET ? 2 : 3;
    }
    *nops = n;
    return ops;
bad:
    free(ops);
    return NULL;
}

/* The field's limits and how a raw value reads back from it. */
static void bf_limits(const bf_op *o, __int128 *min, __int128 *max) {
    if (o->sign) {
        *max = ((__int128)1 << (o->bits - 1)) - 1;
        *min = -*max - 1;
    } else {
        *min = 0;
        *max = ((__int128)1 << o->bits) - 1;
    }
}

static long long bf_read(const bf_op *o, const unsigned char *p, size_t len) {
    uint64_t u = get_field(p, len, o->offset, o->bits);
    if (o->sign && o->bits < 64 && (u >> (o->bits - 1)) & 1) u |= ~(uint64_t)0 << o->bits;
    return (long long)u;
}

/* want: the exact value an op asks the field to hold. 0 fits; 1 it does
 * not and *out is what the overflow policy stores; -1 FAIL. */
static int bf_fit(const bf_op *o, __int128 want, long long *out) {
    __int128 min, max;
    bf_limits(o, &min, &max);
    if (want >= min && want <= max) {
        *out = (long long)want;
        return 0;
    }
    if (o->owtype == BF_FAIL) return -1;
    if (o->owtype == BF_SAT) {
        *out = (long long)(want > max ? max : min);
        return 1;
    }
    uint64_t u = (uint64_t)want;   /* low 64 bits, then the field's width */
    if (o->bits < 64) {
        u &= ~(~(uint64_t)0 << o->bits);
        if (o->sign && (u >> (o->bits - 1)) & 1) u |= ~(uint64_t)0 << o->bits;
    }
    *out = (long long)u;
    return 1;
}

/* Run the ops on buf (len bytes, already long enough for the writes),
 * replying with one element each. Returns how many fields were written. */
static int run_bf_ops(client *c, const bf_op *ops, int nops, unsigned char *buf, size_t len) {
    int changes = 0;
    resp_add_array(&c->out, nops);
    for (int i = 0; i < nops; i++) {
        const bf_op *o = &ops[i];
        long long old = bf_read(o, buf, len), stored;
        __int128 want;
        if (o->opcode == BF_GET) {
            resp_add_int(&c->out, old);
            continue;
        }
        if (o->opcode == BF_SET)
            want = o->sign ? (__int128)o->value : (__int128)(uint64_t)o->value;
        else
            want = (o->sign ? (__int128)old : (__int128)(uint64_t)old) + o->value;
        if (bf_fit(o, want, &stored) < 0) {
            resp_add_null(&c->out);
            continue;
        }
        put_field(buf, o->offset, o->bits, (uint64_t)stored);
        changes++;
        if (o->opcode == BF_SET) resp_add_int(&c->out, old);
        else resp_add_int(&c->out, stored);
    }
    return changes;
}

static void bitfield_generic(client *c, int readonly_cmd) {
    unsigned long long maxbit;
    int nops, writes, r;
    size_t reply_start = c->out.b.len, len;
    unsigned char *buf;
    db_val v;
    bf_op *ops = parse_bf_ops(c, &nops, &writes, &maxbit);

    if (!ops) return;
    if (writes == 0) {
        r = lookup_string(c, 1, &v, 0);
        if (r >= 0) {
            if (r == 0) v.len = 0;
            run_bf_ops(c, ops, nops, (unsigned char *)(r ? v.ptr : ""), v.len);
        }
        free(ops);
        return;
    }
    if (readonly_cmd) {
        resp_add_error(&c->out, "ERR BITFIELD_RO only supports the GET subcommand");
        free(ops);
        return;
    }
    r = lookup_string(c, 1, &v, 1);
    if (r < 0) {
        free(ops);
        return;
    }
    /* Offsets are within proto-max-bulk-len already; the pool must also
     * have room for the value (db_check_string). */
    const char *why = db_check_string(&c->x, c->argvlen[1], (maxbit >> 3) + 1);
    if (why) {
        resp_add_error(&c->out, why);
        free(ops);
        return;
    }
    if (r == 0) {
        v.len = 0;
        v.ptr = NULL;
        v.expire_ms = 0;
    }
    len = v.len > (maxbit >> 3) + 1 ? v.len : (size_t)(maxbit >> 3) + 1;
    buf = calloc(1, len);
    if (v.len) memcpy(buf, v.ptr, v.len);
    run_bf_ops(c, ops, nops, buf, len);
    /* Redis pads (or creates) the string even when every write failed. */
    if (r == 0 || len != v.len || memcmp(buf, v.ptr, len) != 0) {
        if (db_set(&c->x, c->db, c->argv[1], c->argvlen[1], (const char *)buf, len, v.expire_ms) ==
            DB_OOM) {
            c->out.b.len = reply_start;
            resp_add_error(&c->out, db_error_text(&c->x));
        } else {
            string_mark_edited(c, 1);   /* edited in place: "raw" */
            notify_key(c, NOTIFY_STRING, "setbit", 1);
        }
    }
    free(buf);
    free(ops);
}

void bitfieldCommand(client *c) { bitfield_generic(c, 0); }
void bitfieldroCommand(client *c) { bitfield_generic(c, 1); }
