/* transport.h -- the Rowan replication transport: one interface, two
 * backends (DESIGN.md §2, §5).
 *
 *   sockets (src/repl/transport_tcp.c): TCP. What tests, CI and users without
 *           RDMA NICs run.
 *   verbs   (rdma/transport_verbs.c): RC QPs to the peer's control thread,
 *           one SRQ per receiver, SEND + 1-byte READ per message.
 *
 * Both keep the same message format, landing rule and flow control:
 *
 *   - A *link* is one ordered channel from one sender (a worker, or the
 *     replication manager's catch-up stream) to one peer's control thread.
 *   - A message is one log entry exactly as log.h lays it out, padded with
 *     zeroes to log_entry_span() bytes (a multiple of 64). The receiver lands
 *     it at the next 64-byte aligned offset of the current b-log segment,
 *     byte for byte, as a NIC consumes a multi-packet SRQ buffer; it never
 *     parses more than the header's lengths.
 *   - An entry larger than one message (a verbs SEND; on TCP, the cap a
 *     hello declares, replication-msg-max) travels as blocks (vblock.h)
 *     and lands whole, as one message, once all arrived (tcp_blocks.c).
 *   - Acks are cumulative: the receiver reports "the first n messages of this
 *     link are persisted in my b-log" (n counts from 1 per connection). A
 *     sender never waits for an ack: it keeps serving and is called back.
 *   - A connection starts with the peer handshake (peer_auth.h): the
 *     receiver's challenge, the sender's response carrying its repl_hello
 *     under a MAC keyed by the cluster secret, the receiver's proof. Nothing
 *     is landed before the response verified, and no ack counts before the
 *     proof did. The receiver then refuses a hello whose term or
 *     configuration digest differ from its own (a stale or mismatched
 *     configuration), closing the link; the sender reports that.
 *   - A broken link is reported once through on_down and is then dead; the
 *     replication layer (repl.c) decides when to reconnect and how the peer
 *     catches up. Messages queued on a dead link are lost, never retried
 *     silently: catch-up re-sends state instead.
 */
#ifndef ROWAN_TRANSPORT_H
#define ROWAN_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>
#include "vblock.h"

struct event_base;

/* The protocol's version is the magic's last character. 2: CommitVer
 * markers carry every shard that moved in one message (log.h); a node of
 * version 1 would read them as a marker of no shard and never apply. */
#define REPL_HELLO_MAGIC  0x324c50524e574f52ULL  /* "ROWNRPL2" */
#define REPL_HELLO_MAGIC_V1 0x314c50524e574f52ULL /* "ROWNRPL1": refused with a clear reason */
#define REPL_LINK_MANAGER 0xffff                 /* sender id of the catch-up stream */
#define REPL_LINK_BUS     0xfffe                 /* sender id of a cluster bus link (bus.h) */

/* The hello a sender presents in its handshake response (little endian):
 * 32 bytes, or 40 when it declares a message cap (repl_hello_len). */
typedef struct repl_hello {
    uint64_t magic;
    uint16_t node;        /* sender's node index in the configuration */
    uint16_t sender;      /* worker id, or REPL_LINK_MANAGER */
    uint32_t mode;        /* 0 = rowan (control thread), 1 = rpc (backup worker) */
    uint64_t term;
    uint64_t config_digest; /* hash of the node list, shard count and k */
    /* 40-byte hello only (TCP, replication-msg-max): no message on this
     * link is larger than msg_max; an entry whose span is comes as blocks
     * (vblock.h). A receiver without this field refuses the longer hello,
     * so a node that cannot reassemble blocks never gets any. */
    uint32_t msg_max;
    uint32_t reserved;    /* 0 */
} repl_hello;
#define REPL_HELLO_BASE_LEN 32
_Static_assert(sizeof(repl_hello) == REPL_HELLO_BASE_LEN + 8, "repl_hello is its wire layout");
/* The bytes of h that travel: without a cap, the 32 every version knows. */
static inline size_t repl_hello_len(const repl_hello *h) {
    return h->msg_max ? sizeof(*h) : REPL_HELLO_BASE_LEN;
}

typedef struct repl_link repl_link;

/* Receiver side: the span of the message at the head of avail bytes (its
 * header's lengths rounded up to 64), or 0 if fewer than a whole message
 * are there yet, or -1 with why filled if the header is impossible (the
 * stream is out of step and the link must close). */
long repl_frame_span(const uint8_t *p, size_t avail, char *why, size_t whylen);

/* Receiver side of a TCP link whose hello declared a cap (msg_max > 0):
 * its messages are whole entries (spans up to msg_max) and blocks
 * (vblock.h), one entry in reassembly at a time. */
typedef struct repl_rx {
    uint32_t msg_max;     /* from the hello; 0: whole entries only */
    vblk_asm as;
} repl_rx;
/* The next message at the head of avail bytes, for a link whose next
 * message number is expect. Returns the bytes it takes (then *entry is the
 * complete entry to land, *span bytes padded to its span, or NULL if it was
 * a block of an entry still incomplete), 0 if more bytes are needed, or -1
 * with why: the stream is out of step or a block is lost, duplicated,
 * foreign or damaged, and the link must close (the partial entry is
 * dropped). An entry reassembled from blocks lives in rx until
 * repl_rx_taken. */
long repl_rx_next(repl_rx *rx, const uint8_t *p, size_t avail, uint64_t expect,
                  const uint8_t **entry, size_t *span, char *why, size_t whylen);
/* The entry repl_rx_next returned was landed (or the link is going). */
void repl_rx_taken(repl_rx *rx);
/* Counters of the block path (INFO repl_blocks_*). */
typedef struct repl_block_stats {
    long long sent, received, entries_sent, entries_received, errors;
} repl_block_stats;
void repl_block_stats_get(repl_block_stats *st);
/* DEBUG REPL-BLOCK-FAULT: the next block this node sends (any link) is
 * damaged (a payload bit flipped after its crc), dropped, or sent twice. */
enum { REPL_BLOCK_FAULT_NONE = 0, REPL_BLOCK_FAULT_CORRUPT, REPL_BLOCK_FAULT_DROP,
       REPL_BLOCK_FAULT_DUP };
void repl_block_fault_arm(int kind);
/* A sender's blocks of one entry (len bytes, message msg on its link),
 * each written through put(arg, block, n); counts them and applies an
 * armed fault. Both senders of TCP links use it: transport_tcp.c's links
 * and repl.c's catch-up stream. */
void repl_send_blocks(const uint8_t *entry, size_t len, uint64_t msg, uint32_t msg_max,
                      void (*put)(void *arg, const void *p, size_t n), void *arg);

typedef struct repl_link_cbs {
    /* Messages 1..acked of this link are persisted at the peer. */
    void (*on_ack)(void *ctx, uint64_t acked);
    /* The link broke (or was refused); no more callbacks follow. */
    void (*on_down)(void *ctx, const char *why);
    void *ctx;
} repl_link_cbs;

typedef struct transport_ops {
    const char *name;     /* "tcp", "verbs" */
    /* Sender side. Open a link to host:port from the calling thread's event
     * loop; callbacks run on that loop. Connecting may block for at most
     * timeout_ms. NULL with err on failure. */
    repl_link *(*link_open)(struct event_base *base, const char *host, int port,
                            const repl_hello *hello, const repl_link_cbs *cbs,
                            int timeout_ms, char *err, size_t errlen);
    /* Queue one message (an entry of len bytes; the transport pads it to
     * its span). Returns its sequence number on the link (1, 2, ...), or 0
     * if the link is down. Does not block. */
    uint64_t (*link_send)(repl_link *l, const void *entry, size_t len);
    /* Push queued messages to the wire (end of an event-loop round). */
    void (*link_flush)(repl_link *l);
    /* Close and free; no callbacks after this returns. */
    void (*link_close)(repl_link *l);
} transport_ops;

extern const transport_ops transport_tcp;

/* Blocking TCP helpers (the replication manager's catch-up stream, which is
 * always TCP, and the control thread's acks). 0 / -1. tcp_send_all waits
 * up to 5 s for a full socket to drain. */
int tcp_send_all(int fd, const void *p, size_t n);
/* Send one cumulative ack (8 bytes, little endian: le_get_u64 reads it). */
int tcp_send_ack(int fd, uint64_t count);
int tcp_recv_all(int fd, void *p, size_t n, int timeout_ms);
/* Connected socket (non-blocking, TCP_NODELAY) or -1 with err. */
int tcp_connect_blocking(const char *host, int port, int timeout_ms, char *err, size_t errlen);
/* Verbs backend: always compiled; link_open fails cleanly without a device. */
extern const transport_ops transport_verbs;

#endif
