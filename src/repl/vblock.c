/* vblock.c -- multi-block entries of the replication transports
 * (Rowan-KV §4.2.2): the verbs transport (rdma/transport_verbs.c), and TCP
 * links with a message cap (replication-msg-max, src/repl/tcp_blocks.c).
 *
 * Where it runs. Written for verbs, where an entry larger than one SEND
 * must be cut. TCP needs no blocks, but with replication-msg-max set its
 * links carry these same blocks (worker links and the catch-up stream;
 * received by the control thread, or the rpc backups), so the framing and
 * reassembly here run through real servers on every machine
 * (tests/integration/test_repl_blocks.py: values to 20 MB, kill -9 under
 * load, damaged, dropped and repeated blocks). Still untested: the verbs
 * device path around them (SEND ring slots, SRQ buffers, the READ acks of
 * blocks), which needs an RDMA device this project has never had. On TCP
 * msg_max is the sender's cap, declared in its hello; on verbs it is the
 * receiver's buffer size.
 *
 * One SEND carries at most msg_max bytes (the receiver's buffer size,
 * VERBS_MSG_MAX = 4 KiB, the largest IB MTU). An entry whose 64-byte span
 * fits travels whole, exactly as today. A larger entry is cut into
 * cnt = ceil(len / (msg_max - 64)) blocks; block seq carries the entry's
 * bytes [seq * P, min((seq + 1) * P, len)) with P = msg_max - 64, after
 * this 64-byte header (little endian):
 *
 *   off size field
 *    0   4   crc        CRC32C over bytes [4, 64 + plen) of the block
 *    4   1   0          never 0 in an entry (its type): tells a block
 *    5   1   'B'        (0x42)
 *    6   2   shard      the entry's shard      } the entry's metadata, at
 *    8   8   verdb      the entry's version+db } its header's offsets
 *   16   8   msg        the entry's sequence number on the link (1, 2, ...)
 *   24   4   entry_len  the whole entry's bytes, unpadded
 *   28   4   cnt        blocks of the entry
 *   32   4   seq        this block, 0 .. cnt-1
 *   36   4   plen       payload bytes: P, or what is left for the last block
 *   40  24   zero
 *
 * As in the paper, every block repeats the entry's metadata and has its own
 * checksum, and <cnt, seq> let the receiver tell when it has the whole
 * entry. The paper identifies an entry by <shard, version>; here msg does
 * (markers and groups share version 0), and it must be the link's next
 * message number, so a stale block of an earlier entry cannot be mistaken
 * for one of the next.
 *
 * The receiver keeps one entry in reassembly per link, in a buffer of the
 * entry's span (at most LOG_MAX_ENTRY): blocks are copied to their offset
 * in any order; the entry lands in the b-log, contiguous and byte for byte
 * what the TCP transport lands, only when all cnt blocks arrived once and
 * the whole entry's own crc and metadata check. Until then nothing of it
 * is in the b-log; a link that breaks (or sends anything inconsistent)
 * drops its partial entry. On one RC QP blocks arrive in order and exactly
 * once, as on one TCP connection, so every deviation is a protocol error
 * that closes the link.
 *
 * Memory: one entry per link, but there may be many links (up to
 * RX_MAX_LINKS verbs links, and every TCP link with blocks), so the buffers
 * of all assemblers together are capped (VBLK_ASM_LIMIT_DEFAULT, 64 MiB,
 * vblk_asm_set_limit): an entry starts only if its buffers fit under the
 * cap; else its first block fails like a protocol error (the link closes;
 * replication reconnects it, as after any broken link). */
#include "vblock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "le.h"
#include "log.h"

uint32_t vblk_count(size_t len, uint32_t msg_max) {
    if (len == 0 || msg_max <= VBLK_HDR || len > UINT32_MAX) return 0;
    size_t p = vblk_payload_max(msg_max);
    return (uint32_t)((len + p - 1) / p);
}

size_t vblk_encode(uint8_t *out, const uint8_t *entry, size_t len, uint64_t msg, uint32_t seq,
                   uint32_t msg_max) {
    uint32_t cnt = vblk_count(len, msg_max);
    if (seq >= cnt) return 0;
    size_t p = vblk_payload_max(msg_max);
    size_t off = (size_t)seq * p;
    size_t plen = len - off < p ? len - off : p;
    memset(out, 0, VBLK_HDR);
    out[5] = VBLK_KIND;
    if (len >= 16) memcpy(out + 6, entry + 6, 10); /* shard, verdb */
    le_put_u64(out + 16, msg);
    le_put_u32(out + 24, (uint32_t)len);
    le_put_u32(out + 28, cnt);
    le_put_u32(out + 32, seq);
    le_put_u32(out + 36, (uint32_t)plen);
    memcpy(out + VBLK_HDR, entry + off, plen);
    le_put_u32(out, crc32c(0, out + 4, VBLK_HDR - 4 + plen));
    return VBLK_HDR + plen;
}

#define WHY(...) do { snprintf(why, whylen, __VA_ARGS__); return -1; } while (0)

int vblk_parse(const uint8_t *p, size_t n, uint32_t msg_max, size_t max_entry, vblk_hdr *out,
               char *why, size_t whylen) {
    if (msg_max <= VBLK_HDR) WHY("block size %u too small", msg_max);
    if (n < VBLK_HDR) WHY("block of %zu bytes is shorter than its header", n);
    if (p[4] != 0 || p[5] != VBLK_KIND) WHY("not a block header");
    for (int i = 40; i < VBLK_HDR; i++)
        if (p[i]) WHY("block header has nonzero reserved bytes");
    vblk_hdr h;
    h.shard = le_get_u16(p + 6);
    h.verdb = le_get_u64(p + 8);
    h.msg = le_get_u64(p + 16);
    h.entry_len = le_get_u32(p + 24);
    h.cnt = le_get_u32(p + 28);
    h.seq = le_get_u32(p + 32);
    h.plen = le_get_u32(p + 36);
    if (n != VBLK_HDR + (size_t)h.plen)
        WHY("block of %zu bytes says it carries %u payload bytes", n, h.plen);
    if (h.entry_len == 0 || h.entry_len > max_entry)
        WHY("block of an entry of %u bytes (limit %zu)", h.entry_len, max_entry);
    if (h.cnt != vblk_count(h.entry_len, msg_max))
        WHY("block count %u does not fit an entry of %u bytes", h.cnt, h.entry_len);
    if (h.seq >= h.cnt) WHY("block %u of %u", h.seq, h.cnt);
    size_t pmax = vblk_payload_max(msg_max);
    size_t want = h.seq + 1 < h.cnt ? pmax : h.entry_len - (size_t)h.seq * pmax;
    if (h.plen != want) WHY("block %u of %u carries %u bytes, not %zu", h.seq, h.cnt, h.plen, want);
    if (h.msg == 0) WHY("block of message 0");
    uint32_t crc = crc32c(0, p + 4, n - 4);
    if (crc != le_get_u32(p)) WHY("block %u of message %llu: checksum mismatch", h.seq,
                                  (unsigned long long)h.msg);
    *out = h;
    return 0;
}

void vblk_asm_init(vblk_asm *a) { memset(a, 0, sizeof(*a)); }

/* Reassembly memory of every link (the receivers may run on several
 * threads) and its cap. */
static _Atomic size_t asm_bytes;
static _Atomic size_t asm_limit = VBLK_ASM_LIMIT_DEFAULT;

size_t vblk_asm_set_limit(size_t bytes) {
    return atomic_exchange(&asm_limit, bytes ? bytes : VBLK_ASM_LIMIT_DEFAULT);
}

size_t vblk_asm_bytes(void) { return atomic_load(&asm_bytes); }

/* Count n more bytes against the cap; 0, or -1 (nothing counted) when they
 * do not fit. */
static int asm_reserve(size_t n) {
    size_t now = atomic_fetch_add(&asm_bytes, n) + n;
    if (now <= atomic_load(&asm_limit)) return 0;
    atomic_fetch_sub(&asm_bytes, n);
    return -1;
}

void vblk_asm_done(vblk_asm *a) {
    free(a->buf);
    free(a->have);
    if (a->held) atomic_fetch_sub(&asm_bytes, a->held);
    vblk_asm_init(a);
}

/* Discard the partial entry and report why. */
#define AFAIL(...) do { snprintf(why, whylen, __VA_ARGS__); vblk_asm_done(a); return -1; } while (0)

int vblk_asm_feed(vblk_asm *a, const uint8_t *p, size_t n, uint32_t msg_max, size_t max_entry,
                  uint64_t expect_msg, char *why, size_t whylen) {
    vblk_hdr h;
    if (vblk_asm_complete(a)) AFAIL("a block after a complete entry that was not taken");
    if (vblk_parse(p, n, msg_max, max_entry, &h, why, whylen) != 0) {
        vblk_asm_done(a);
        return -1;
    }
    if (!a->active) {
        if (h.msg != expect_msg)
            AFAIL("block of message %llu where message %llu was due", (unsigned long long)h.msg,
                  (unsigned long long)expect_msg);
        size_t need = log_entry_span(h.entry_len); /* (its bitmap: 1 bit per block) */
        if (asm_reserve(need) != 0)
            AFAIL("block of message %llu: an entry of %u bytes does not fit the reassembly "
                  "memory limit (%zu bytes held by all links, limit %zu)",
                  (unsigned long long)h.msg, h.entry_len, vblk_asm_bytes(),
                  (size_t)atomic_load(&asm_limit));
        a->held = need;
        a->buf = calloc(1, log_entry_span(h.entry_len));
        a->have = calloc(1, h.cnt / 8 + 1);
        if (!a->buf || !a->have) AFAIL("out of memory for an entry of %u bytes", h.entry_len);
        a->h = h;
        a->got = 0;
        a->active = 1;
    } else if (h.msg != a->h.msg || h.entry_len != a->h.entry_len || h.cnt != a->h.cnt ||
               h.shard != a->h.shard || h.verdb != a->h.verdb) {
        AFAIL("block %u/%u of message %llu while message %llu has %u of %u blocks", h.seq, h.cnt,
              (unsigned long long)h.msg, (unsigned long long)a->h.msg, a->got, a->h.cnt);
    }
    if (a->have[h.seq / 8] & (1u << (h.seq % 8)))
        AFAIL("duplicate block %u of message %llu", h.seq, (unsigned long long)h.msg);
    a->have[h.seq / 8] |= (uint8_t)(1u << (h.seq % 8));
    memcpy(a->buf + (size_t)h.seq * vblk_payload_max(msg_max), p + VBLK_HDR, h.plen);
    a->h.seq = h.seq;
    a->h.plen = h.plen;
    a->got++;
    return a->got == a->h.cnt ? 1 : 0;
}

int vblk_check_entry(const vblk_asm *a, char *why, size_t whylen) {
    if (!vblk_asm_complete(a)) WHY("the entry is incomplete");
    log_entry e;
    size_t len = log_entry_check(a->buf, a->h.entry_len, &e);
    if (len != a->h.entry_len)
        WHY("the reassembled %u bytes of message %llu are not one valid log entry", a->h.entry_len,
            (unsigned long long)a->h.msg);
    if (le_get_u16(a->buf + 6) != a->h.shard || le_get_u64(a->buf + 8) != a->h.verdb)
        WHY("message %llu: its blocks' shard/version differ from the entry's",
            (unsigned long long)a->h.msg);
    return 0;
}
