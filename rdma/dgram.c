/* dgram.c -- the codec of the native datagram format (rdma/dgram.h).
 *
 * Pure functions over byte buffers: no sockets, no allocation except the
 * fragment joiner's buffer, no global state, so the server edge
 * (rdma/native.c), the client library and the fuzzer (tests/fuzz/fuzz-dgram.c)
 * share one implementation. Every field goes through le.h, so the wire is
 * little-endian whatever the host.
 *
 * The decoder is strict: a datagram either matches the format exactly
 * (header fields within their ranges, unused fields 0, a request's payload
 * consumed to its last byte, a reply fragment at its fixed place and of its
 * fixed length) or is refused with a short reason. Strictness costs nothing
 * here (both ends use this encoder) and means a damaged or foreign datagram
 * is never half-understood. Lengths are compared by subtraction against
 * what is left, never by adding to a pointer, so no length in a datagram
 * can overflow a bound check. */
#include "dgram.h"
#include "le.h"

#include <stdlib.h>
#include <string.h>

/* Header field offsets (the order of dgram_hdr). */
enum {
    O_MAGIC = 0, O_VERSION = 4, O_TYPE = 5, O_SHARD = 6, O_CLIENT = 8,
    O_REQ = 16, O_TERM = 24, O_ACKED = 32, O_FRAG = 40, O_NFRAG = 42,
    O_TOTAL = 44, O_OFF = 48,
};
_Static_assert(O_OFF + 4 == DGRAM_HDR_LEN, "dgram header layout");
_Static_assert(DGRAM_MAX_FRAGS <= 0xffff, "nfrag fits its u16");

void dgram_put_hdr(unsigned char *buf, const dgram_hdr *h) {
    le_put_u32(buf + O_MAGIC, h->magic);
    buf[O_VERSION] = h->version;
    buf[O_TYPE] = h->type;
    le_put_u16(buf + O_SHARD, h->shard);
    le_put_u64(buf + O_CLIENT, h->client);
    le_put_u64(buf + O_REQ, h->req);
    le_put_u64(buf + O_TERM, h->term);
    le_put_u64(buf + O_ACKED, h->acked);
    le_put_u16(buf + O_FRAG, h->frag);
    le_put_u16(buf + O_NFRAG, h->nfrag);
    le_put_u32(buf + O_TOTAL, h->total);
    le_put_u32(buf + O_OFF, h->off);
}

unsigned dgram_reply_nfrag(size_t total) {
    if (total > DGRAM_REPLY_MAX) return 0;
    if (total == 0) return 1;
    return (unsigned)((total + DGRAM_PAYLOAD_MAX - 1) / DGRAM_PAYLOAD_MAX);
}

/* The payload length of fragment frag of a reply of total bytes. */
static size_t frag_len(size_t total, unsigned frag) {
    size_t off = (size_t)frag * DGRAM_PAYLOAD_MAX;
    size_t left = total - off;
    return left < DGRAM_PAYLOAD_MAX ? left : DGRAM_PAYLOAD_MAX;
}

static int fail(const char **why, const char *reason) {
    if (why) *why = reason;
    return -1;
}

static int check_reply(const dgram_hdr *h, size_t plen, const char **why) {
    if (h->total > DGRAM_REPLY_MAX) return fail(why, "reply too large");
    if (h->nfrag != dgram_reply_nfrag(h->total)) return fail(why, "bad fragment count");
    if (h->frag >= h->nfrag) return fail(why, "fragment index out of range");
    if (h->off != (uint32_t)h->frag * DGRAM_PAYLOAD_MAX) return fail(why, "bad fragment offset");
    if (plen != frag_len(h->total, h->frag)) return fail(why, "bad fragment length");
    return 0;
}

/* Entry header offsets: u64 req, u16 x, u16 y, u32 len. */
enum { E_REQ = 0, E_X = 8, E_Y = 10, E_LEN = 12 };
_Static_assert(E_LEN + 4 == DGRAM_ENTRY_HDR_LEN, "dgram entry layout");

/* Read the entry at payload[*pos] (known to hold its header) and advance. */
static void entry_at(const unsigned char *payload, int type, size_t *pos, dgram_entry *e) {
    const unsigned char *p = payload + *pos;
    uint16_t x = le_get_u16(p + E_X);
    e->req = le_get_u64(p + E_REQ);
    e->len = le_get_u32(p + E_LEN);
    e->frag = le_get_u16(p + E_Y);
    if (type == DGRAM_PACKED_REQUESTS) {
        e->type = DGRAM_REQUEST;
        e->shard = x;
    } else {
        e->type = x <= 0xff ? (uint8_t)x : 0;
        e->shard = 0;
    }
    e->payload = p + DGRAM_ENTRY_HDR_LEN;
    *pos += DGRAM_ENTRY_HDR_LEN + e->len;
}

/* A packed frame: the shared fields, then every entry in bounds and
 * well-formed, nfrag of them, to the payload's last byte. */
static int check_pack(const dgram_hdr *h, const unsigned char *payload, size_t plen,
                      const char **why) {
    if (h->version < DGRAM_VERSION) return fail(why, "bad type");   /* no packs in version 1 */
    if (h->req || h->shard || h->frag || h->total || h->off)
        return fail(why, "nonzero unused field");
    if (h->type == DGRAM_PACKED_REPLIES && h->acked) return fail(why, "nonzero unused field");
    if (h->nfrag == 0) return fail(why, "empty packed frame");
    size_t pos = 0;
    uint64_t last = 0;
    for (unsigned i = 0; i < h->nfrag; i++) {
        if (plen - pos < DGRAM_ENTRY_HDR_LEN) return fail(why, "truncated entry header");
        uint32_t n = le_get_u32(payload + pos + E_LEN);
        if (n > plen - pos - DGRAM_ENTRY_HDR_LEN) return fail(why, "entry past the end");
        uint16_t x = le_get_u16(payload + pos + E_X);
        dgram_entry e;
        entry_at(payload, h->type, &pos, &e);
        if (e.req == 0) return fail(why, "request id 0");
        if (h->type == DGRAM_PACKED_REQUESTS) {
            if (e.req <= last) return fail(why, "request ids not increasing");
            if (e.frag >= DGRAM_MAX_FRAGS) return fail(why, "fragment index out of range");
            last = e.req;
        } else if (x == DGRAM_REPLY) {
            if (e.frag) return fail(why, "nonzero unused field");
        } else if (x == DGRAM_REFUSE) {
            if (e.frag < DGRAM_R_STALE || e.frag > DGRAM_R_LOADING)
                return fail(why, "unknown refusal code");
        } else {
            return fail(why, "bad entry type");
        }
    }
    if (pos != plen) return fail(why, "trailing bytes");
    return 0;
}

int dgram_get_hdr(const unsigned char *buf, size_t len, dgram_hdr *h, const char **why) {
    if (len < DGRAM_HDR_LEN) return fail(why, "truncated header");
    if (len > DGRAM_MTU) return fail(why, "datagram too long");
    h->magic = le_get_u32(buf + O_MAGIC);
    h->version = buf[O_VERSION];
    h->type = buf[O_TYPE];
    h->shard = le_get_u16(buf + O_SHARD);
    h->client = le_get_u64(buf + O_CLIENT);
    h->req = le_get_u64(buf + O_REQ);
    h->term = le_get_u64(buf + O_TERM);
    h->acked = le_get_u64(buf + O_ACKED);
    h->frag = le_get_u16(buf + O_FRAG);
    h->nfrag = le_get_u16(buf + O_NFRAG);
    h->total = le_get_u32(buf + O_TOTAL);
    h->off = le_get_u32(buf + O_OFF);
    if (h->magic != DGRAM_MAGIC) return fail(why, "bad magic");
    if (h->version != DGRAM_VERSION_1 && h->version != DGRAM_VERSION)
        return fail(why, "unsupported version");
    size_t plen = len - DGRAM_HDR_LEN;
    switch (h->type) {
    case DGRAM_REQUEST:
        if (h->req == 0) return fail(why, "request id 0");
        if (h->frag >= DGRAM_MAX_FRAGS) return fail(why, "fragment index out of range");
        if (h->nfrag || h->total || h->off) return fail(why, "nonzero unused field");
        return 0;
    case DGRAM_REPLY:
        return check_reply(h, plen, why);
    case DGRAM_REFUSE:
        if (h->frag < DGRAM_R_STALE || h->frag > DGRAM_R_LOADING)
            return fail(why, "unknown refusal code");
        if (h->nfrag || h->total || h->off) return fail(why, "nonzero unused field");
        return 0;
    case DGRAM_PACKED_REQUESTS:
    case DGRAM_PACKED_REPLIES:
        return check_pack(h, buf + DGRAM_HDR_LEN, plen, why);
    default:
        return fail(why, "bad type");
    }
}

/* A copy of h for an encoder to fill in: magic, version and type set
 * (dgram.h: the version asked for, version 1 by default, 2 for packs). */
static dgram_hdr stamped(const dgram_hdr *h, uint8_t type) {
    dgram_hdr r = *h;
    r.magic = DGRAM_MAGIC;
    if (type == DGRAM_PACKED_REQUESTS || type == DGRAM_PACKED_REPLIES)
        r.version = DGRAM_VERSION;
    else if (r.version != DGRAM_VERSION)
        r.version = DGRAM_VERSION_1;
    r.type = type;
    return r;
}

long dgram_put_request(unsigned char *buf, const dgram_hdr *h, int argc,
                       const char *const *argv, const size_t *argvlen) {
    if (argc <= 0 || argc > DGRAM_MAX_ARGS) return -1;
    size_t need = DGRAM_HDR_LEN + 2;
    for (int i = 0; i < argc; i++) {
        if (argvlen[i] > DGRAM_MTU) return -1;   /* also keeps the sum from overflowing */
        need += 4 + argvlen[i];
        if (need > DGRAM_MTU) return -1;
    }
    dgram_hdr r = stamped(h, DGRAM_REQUEST);
    if (r.frag >= DGRAM_MAX_FRAGS) r.frag = 0;
    r.nfrag = 0;
    r.total = r.off = 0;
    dgram_put_hdr(buf, &r);
    unsigned char *p = buf + DGRAM_HDR_LEN;
    le_put_u16(p, (uint16_t)argc);
    p += 2;
    for (int i = 0; i < argc; i++) {
        le_put_u32(p, (uint32_t)argvlen[i]);
        p += 4;
        if (argvlen[i]) memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
    }
    return (long)need;
}

int dgram_get_args(const unsigned char *payload, size_t len, const char **argv,
                   size_t *argvlen, int max, const char **why) {
    if (len < 2) return fail(why, "truncated argument count");
    int argc = le_get_u16(payload);
    if (argc == 0) return fail(why, "no arguments");
    if (argc > DGRAM_MAX_ARGS || argc > max) return fail(why, "too many arguments");
    size_t pos = 2;
    for (int i = 0; i < argc; i++) {
        if (len - pos < 4) return fail(why, "truncated argument length");
        uint32_t n = le_get_u32(payload + pos);
        pos += 4;
        if (n > len - pos) return fail(why, "argument past the end");
        argv[i] = (const char *)payload + pos;
        argvlen[i] = n;
        pos += n;
    }
    if (pos != len) return fail(why, "trailing bytes");
    return argc;
}

long dgram_put_reply(unsigned char *buf, const dgram_hdr *h, const char *resp,
                     size_t total, unsigned frag) {
    unsigned nfrag = dgram_reply_nfrag(total);
    if (nfrag == 0 || frag >= nfrag) return -1;
    dgram_hdr r = stamped(h, DGRAM_REPLY);
    r.acked = h->req == 0 ? h->acked : 0;   /* a pushed reply's number (dgram.h) */
    r.frag = (uint16_t)frag;
    r.nfrag = (uint16_t)nfrag;
    r.total = (uint32_t)total;
    r.off = (uint32_t)frag * DGRAM_PAYLOAD_MAX;
    size_t n = frag_len(total, frag);
    dgram_put_hdr(buf, &r);
    if (n) memcpy(buf + DGRAM_HDR_LEN, resp + r.off, n);
    return (long)(DGRAM_HDR_LEN + n);
}

long dgram_put_refuse(unsigned char *buf, const dgram_hdr *h, int code, const char *msg) {
    dgram_hdr r = stamped(h, DGRAM_REFUSE);
    r.acked = 0;
    r.frag = (uint16_t)code;
    r.nfrag = 0;
    r.total = r.off = 0;
    dgram_put_hdr(buf, &r);
    size_t n = msg ? strlen(msg) : 0;
    if (n > DGRAM_PAYLOAD_MAX) n = DGRAM_PAYLOAD_MAX;
    if (n) memcpy(buf + DGRAM_HDR_LEN, msg, n);
    return (long)(DGRAM_HDR_LEN + n);
}

void dgram_join_init(dgram_join *j) {
    memset(j, 0, sizeof(*j));
}

void dgram_join_free(dgram_join *j) {
    free(j->buf);
    dgram_join_init(j);
}

int dgram_join_add(dgram_join *j, const dgram_hdr *h, const unsigned char *payload, size_t len) {
    if (h->type != DGRAM_REPLY || check_reply(h, len, NULL) != 0) return -1;
    if (j->nfrag == 0) {               /* the first fragment begins the reply */
        j->buf = malloc(h->total ? h->total : 1);
        if (j->buf == NULL) return -1;
        j->client = h->client;
        j->req = h->req;
        j->total = h->total;
        j->nfrag = h->nfrag;
    } else if (h->client != j->client || h->req != j->req || h->total != j->total ||
               h->nfrag != j->nfrag) {
        return -1;
    }
    uint64_t bit = 1ull << (h->frag % 64);
    if (!(j->have[h->frag / 64] & bit)) {
        j->have[h->frag / 64] |= bit;
        if (len) memcpy(j->buf + h->off, payload, len);
        j->got++;
    }
    return j->got == j->nfrag;
}

/* ---------------- packed frames ---------------- */

void dgram_pack_begin(dgram_pack *p, unsigned char *buf, const dgram_hdr *h, int type) {
    p->buf = buf;
    p->len = DGRAM_HDR_LEN;
    p->h = stamped(h, (uint8_t)type);
    p->h.req = 0;
    p->h.shard = 0;
    p->h.frag = 0;
    p->h.nfrag = 0;
    p->h.total = p->h.off = 0;
    if (type == DGRAM_PACKED_REPLIES) p->h.acked = 0;
    p->last = 0;
}

int dgram_pack_room(const dgram_pack *p, size_t len) {
    return p->h.nfrag < 0xffff && len <= DGRAM_ENTRY_MAX &&
           DGRAM_MTU - p->len >= DGRAM_ENTRY_HDR_LEN + len;
}

int dgram_pack_add(dgram_pack *p, const dgram_entry *e) {
    if (!dgram_pack_room(p, e->len) || e->req == 0) return -1;
    uint16_t x;
    if (p->h.type == DGRAM_PACKED_REQUESTS) {
        if (e->type != DGRAM_REQUEST || e->req <= p->last || e->frag >= DGRAM_MAX_FRAGS) return -1;
        x = e->shard;
        p->last = e->req;
    } else {
        if (e->type == DGRAM_REPLY ? e->frag != 0
            : e->type != DGRAM_REFUSE || e->frag < DGRAM_R_STALE || e->frag > DGRAM_R_LOADING)
            return -1;
        x = e->type;
    }
    unsigned char *q = p->buf + p->len;
    le_put_u64(q + E_REQ, e->req);
    le_put_u16(q + E_X, x);
    le_put_u16(q + E_Y, e->frag);
    le_put_u32(q + E_LEN, e->len);
    if (e->len) memcpy(q + DGRAM_ENTRY_HDR_LEN, e->payload, e->len);
    p->len += DGRAM_ENTRY_HDR_LEN + e->len;
    p->h.nfrag++;
    return 0;
}

long dgram_pack_end(dgram_pack *p) {
    if (p->h.nfrag == 0) return -1;
    dgram_put_hdr(p->buf, &p->h);
    return (long)p->len;
}

int dgram_pack_next(const unsigned char *payload, size_t len, int type, size_t *pos,
                    dgram_entry *e) {
    if (*pos >= len || len - *pos < DGRAM_ENTRY_HDR_LEN) return 0;
    entry_at(payload, type, pos, e);
    return 1;
}
