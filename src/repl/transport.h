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

struct event_base;

/* The protocol's version is the magic's last character. 2: CommitVer
 * markers carry every shard that moved in one message (log.h); a node of
 * version 1 would read them as a marker of no shard and never apply. */
#define REPL_HELLO_MAGIC  0x324c50524e574f52ULL  /* "ROWNRPL2" */
#define REPL_HELLO_MAGIC_V1 0x314c50524e574f52ULL /* "ROWNRPL1": refused with a clear reason */
#define REPL_LINK_MANAGER 0xffff                 /* sender id of the catch-up stream */
#define REPL_LINK_BUS     0xfffe                 /* sender id of a cluster bus link (bus.h) */

/* The hello a sender presents in its handshake response (32 bytes, little
 * endian). */
typedef struct repl_hello {
    uint64_t magic;
    uint16_t node;        /* sender's node index in the configuration */
    uint16_t sender;      /* worker id, or REPL_LINK_MANAGER */
    uint32_t mode;        /* 0 = rowan (control thread), 1 = rpc (backup worker) */
    uint64_t term;
    uint64_t config_digest; /* hash of the node list, shard count and k */
} repl_hello;

typedef struct repl_link repl_link;

/* Receiver side: the span of the message at the head of avail bytes (its
 * header's lengths rounded up to 64), or 0 if fewer than a whole message
 * are there yet, or -1 with why filled if the header is impossible (the
 * stream is out of step and the link must close). */
long repl_frame_span(const uint8_t *p, size_t avail, char *why, size_t whylen);

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
