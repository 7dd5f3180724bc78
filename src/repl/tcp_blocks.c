/* tcp_blocks.c -- multi-block entries over TCP links (replication-msg-max;
 * Rowan-KV §4.2.2, the framing of vblock.h).
 *
 * The verbs transport must cut an entry larger than one SEND into blocks.
 * TCP needs no such thing (a message is a byte range of any length), but a
 * cap on its messages makes TCP links carry the very same blocks, so the
 * block path runs through real servers on machines without an RDMA device
 * (tests/integration/test_repl_blocks.py), and the same code reassembles
 * them as on verbs (vblock.c: vblk_asm_feed, vblk_check_entry).
 *
 * The cap is the sender's: its hello declares it (repl_hello.msg_max, the
 * 40-byte hello of transport.h), and with one every entry whose span is
 * larger goes out as vblk_encode blocks, each exactly VBLK_HDR + plen
 * bytes on the stream (no padding: the header says its length), message
 * number = the entry's number on its link. A receiver takes blocks only on
 * a link that declared a cap (the cap fixes the block geometry vblk_parse
 * checks), keeps one entry in reassembly per link, and lands it whole, as
 * one message, once all its blocks arrived exactly once and the entry's own
 * crc checks; anything else (a block lost, duplicated, of another entry,
 * damaged; a whole entry while blocks are missing; a message over the cap)
 * closes the link, and the partial entry is freed, never landed. The
 * sender's link then reports down and the normal recovery (a new session
 * with its catch-up, repl.c) brings the peer back in step.
 *
 * Both TCP senders use repl_send_blocks: worker links (transport_tcp.c)
 * and the manager's catch-up stream (repl.c); both receivers use
 * repl_rx_next: the control thread (control.c) and, in replication-mode
 * rpc, the backup workers (rpc_backup.c).
 *
 * DEBUG REPL-BLOCK-FAULT arms a one-shot fault on the next block sent
 * (block 1 of the next entry that goes as blocks: entries that need blocks
 * have at least two), for tests of the receiver's checks through real
 * links. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "log.h"
#include "transport.h"
#include "vblock.h"

static _Atomic long long st_sent, st_received, st_entries_sent, st_entries_received, st_errors;
static _Atomic int fault_armed;

void repl_block_stats_get(repl_block_stats *st) {
    st->sent = atomic_load(&st_sent);
    st->received = atomic_load(&st_received);
    st->entries_sent = atomic_load(&st_entries_sent);
    st->entries_received = atomic_load(&st_entries_received);
    st->errors = atomic_load(&st_errors);
}

void repl_block_fault_arm(int kind) { atomic_store(&fault_armed, kind); }

void repl_send_blocks(const uint8_t *entry, size_t len, uint64_t msg, uint32_t msg_max,
                      void (*put)(void *arg, const void *p, size_t n), void *arg) {
    uint32_t cnt = vblk_count(len, msg_max);
    uint8_t *blk = malloc(msg_max);
    if (!blk) abort();   /* at most 4 MiB: as any allocation of the server */
    for (uint32_t seq = 0; seq < cnt; seq++) {
        size_t n = vblk_encode(blk, entry, len, msg, seq, msg_max);
        int fault = seq == 1 && atomic_load(&fault_armed) ? atomic_exchange(&fault_armed, 0)
                                                          : REPL_BLOCK_FAULT_NONE;
        if (fault == REPL_BLOCK_FAULT_DROP) continue;
        if (fault == REPL_BLOCK_FAULT_CORRUPT) blk[n - 1] ^= 0x01;   /* after its crc */
        put(arg, blk, n);
        if (fault == REPL_BLOCK_FAULT_DUP) put(arg, blk, n);
        atomic_fetch_add(&st_sent, 1 + (fault == REPL_BLOCK_FAULT_DUP));
    }
    atomic_fetch_add(&st_entries_sent, 1);
    free(blk);
}

/* Fail the link: count it, drop the partial entry. */
#define RX_FAIL(...) do { snprintf(why, whylen, __VA_ARGS__); goto fail; } while (0)

long repl_rx_next(repl_rx *rx, const uint8_t *p, size_t avail, uint64_t expect,
                  const uint8_t **entry, size_t *span, char *why, size_t whylen) {
    *entry = NULL;
    if (avail <= 5) return 0;
    if (!vblk_is_block(p, avail)) {
        if (rx->as.active)
            RX_FAIL("a whole message where block(s) of message %llu were due (%u of %u came)",
                    (unsigned long long)rx->as.h.msg, rx->as.got, rx->as.h.cnt);
        long n = repl_frame_span(p, avail, why, whylen);
        if (n > 0 && rx->msg_max && (size_t)n > rx->msg_max)
            RX_FAIL("a whole message of %ld bytes on a link whose messages are at most %u", n,
                    rx->msg_max);
        if (n > 0) {
            *entry = p;
            *span = (size_t)n;
        }
        return n;
    }
    if (!rx->msg_max)
        RX_FAIL("a block on a link whose hello declared no message cap (replication-msg-max)");
    if (avail < VBLK_HDR) return 0;
    uint64_t n = VBLK_HDR + (uint64_t)le_get_u32(p + 36);   /* plen */
    if (n > rx->msg_max)
        RX_FAIL("a block of %llu bytes on a link whose messages are at most %u",
                (unsigned long long)n, rx->msg_max);
    if (avail < n) return 0;
    int rc = vblk_asm_feed(&rx->as, p, n, rx->msg_max, LOG_MAX_ENTRY, expect, why, whylen);
    if (rc == 1 && vblk_check_entry(&rx->as, why, whylen) != 0) rc = -1;
    if (rc < 0) goto fail;
    atomic_fetch_add(&st_received, 1);
    if (rc == 1) {
        atomic_fetch_add(&st_entries_received, 1);
        *entry = rx->as.buf;
        *span = log_entry_span(rx->as.h.entry_len);
    }
    return (long)n;
fail:
    atomic_fetch_add(&st_errors, 1);
    vblk_asm_done(&rx->as);
    return -1;
}

void repl_rx_taken(repl_rx *rx) { vblk_asm_done(&rx->as); }
