/* vblock.h -- multi-block entries of the replication transports
 * (Rowan-KV §4.2.2): splitting an entry larger than one message (a verbs
 * SEND, or a TCP link's replication-msg-max) into blocks, and reassembling
 * them on the receiver. Pure functions, no verbs calls, so the framing is
 * tested without a device (tests/unit/test-verbs.c) and carried by TCP
 * links (tcp_blocks.c). src/repl/vblock.c documents the wire format. */
#ifndef ROWAN_VBLOCK_H
#define ROWAN_VBLOCK_H
#include <stddef.h>
#include <stdint.h>

#define VBLK_HDR   64     /* block header bytes; the payload follows */
#define VBLK_KIND  0x42   /* 'B': byte 5 of a block (byte 4 is 0) */

/* A decoded block header. */
typedef struct vblk_hdr {
    uint16_t shard;       /* copied from the entry's header (0 if it has none) */
    uint64_t verdb;       /* ditto */
    uint64_t msg;         /* the entry's sequence number on its link (1, 2, ...) */
    uint32_t entry_len;   /* the whole entry's bytes (unpadded) */
    uint32_t cnt;         /* blocks of the entry */
    uint32_t seq;         /* this block's number, 0 .. cnt-1 */
    uint32_t plen;        /* payload bytes in this block */
} vblk_hdr;

/* Payload bytes per full block for a receive buffer of msg_max bytes. */
static inline size_t vblk_payload_max(uint32_t msg_max) { return msg_max - VBLK_HDR; }
/* Blocks an entry of len bytes needs (0 if len is 0 or msg_max too small). */
uint32_t vblk_count(size_t len, uint32_t msg_max);
/* Is this received message a block (rather than a whole entry)? A block's
 * byte 4 is 0, which never starts an entry (an entry's type is never 0). */
static inline int vblk_is_block(const uint8_t *p, size_t n) { return n > 4 && p[4] == 0; }

/* Write block seq of entry (len bytes, link sequence number msg) into out,
 * which has room for msg_max bytes. Returns the block's bytes (header +
 * payload), or 0 if seq is out of range. */
size_t vblk_encode(uint8_t *out, const uint8_t *entry, size_t len, uint64_t msg, uint32_t seq,
                   uint32_t msg_max);
/* Check one received block of n bytes (crc, fields, sizes consistent with
 * msg_max and max_entry) and decode its header. 0, or -1 with why. */
int vblk_parse(const uint8_t *p, size_t n, uint32_t msg_max, size_t max_entry, vblk_hdr *out,
               char *why, size_t whylen);

/* Reassembly of one entry (one per link). Blocks may come in any order;
 * the entry is handed over only once every block arrived exactly once.
 * Anything inconsistent (a duplicate, a block of another entry while one
 * is incomplete, a message number out of step, a bad crc) is an error: the
 * partial entry is discarded and the caller must close the link. */
typedef struct vblk_asm {
    uint8_t *buf;         /* entry bytes, padded with zeroes to its 64-byte span */
    uint8_t *have;        /* bitmap of blocks received */
    vblk_hdr h;           /* of the entry in progress (seq/plen: the last block fed) */
    uint32_t got;         /* blocks received */
    int active;           /* an entry is in progress (or complete, not yet taken) */
    size_t held;          /* buf's bytes, counted against the global limit (below) */
} vblk_asm;

/* All links' reassembly buffers together hold at most this many bytes of
 * entries (a link may hold up to LOG_MAX_ENTRY): 16 entries of 4 MiB at
 * once, of up to RX_MAX_LINKS = 256 verbs links. A block that would start
 * an entry beyond it is an error like any other: the link is closed, and
 * replication reconnects it as after any broken link (repl.c). */
#define VBLK_ASM_LIMIT_DEFAULT ((size_t)64 << 20)
/* Set the limit (0: the default); returns the previous one. */
size_t vblk_asm_set_limit(size_t bytes);
/* Entry bytes held by every assembler in the process now. */
size_t vblk_asm_bytes(void);

void vblk_asm_init(vblk_asm *a);
/* Feed one received block; expect_msg is the link sequence number the next
 * entry must carry. 0 = need more, 1 = complete (a->buf holds a->h.entry_len
 * bytes, zero padded to their span; vblk_asm_done() when taken), -1 = error
 * (why filled; the partial entry is discarded). */
int vblk_asm_feed(vblk_asm *a, const uint8_t *p, size_t n, uint32_t msg_max, size_t max_entry,
                  uint64_t expect_msg, char *why, size_t whylen);
static inline int vblk_asm_complete(const vblk_asm *a) { return a->active && a->got == a->h.cnt; }
/* The complete entry was taken (or the link went away): free the buffers. */
void vblk_asm_done(vblk_asm *a);

/* A completed entry must be a valid log entry (log.h: header, lengths and
 * crc over the whole entry) whose shard and version are the ones every
 * block carried. 0, or -1 with why. */
int vblk_check_entry(const vblk_asm *a, char *why, size_t whylen);

#endif
