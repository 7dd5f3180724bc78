/* transport_verbs.h -- the receiver (control-thread) side of the verbs
 * replication transport. The sender side is transport_verbs (transport.h).
 * rdma/transport_verbs.c explains the design.
 *
 * One receiver per process, driven by one thread (the control thread, the
 * only writer of the b-log): start it, then call verbs_receiver_poll() in a
 * loop. Every call lands what arrived, persists it (blog_persist) and acks
 * it, so a poll loop is a complete control-thread round. */
#ifndef ROWAN_TRANSPORT_VERBS_H
#define ROWAN_TRANSPORT_VERBS_H
#include <stddef.h>
#include <stdint.h>

/* Largest message (an entry padded to its 64-byte span) one SEND carries:
 * the size of each receive buffer. A larger entry (up to LOG_MAX_ENTRY)
 * travels as blocks of Rowan-KV §4.2.2 (src/repl/vblock.c) and lands whole. */
#define VERBS_MSG_MAX 4096

/* Listen for senders on bind:port (bind NULL = every address; port 0 = an
 * ephemeral port, see verbs_receiver_port). Hellos whose term or config
 * digest differ from the given ones are refused. Fails with err (and
 * returns -1) when there is no RDMA device, no RDMA-capable address, or the
 * b-log is not set up (blog_init before this). 0 on success. */
int verbs_receiver_start(const char *bind, int port, uint64_t term,
                         uint64_t config_digest, char *err, size_t errlen);
/* Wait up to timeout_ms (0 = don't wait, <0 = forever) for connection events
 * and receive completions; land, persist and ack what arrived. Returns the
 * number of messages landed, or -1 when the receiver is not running. */
int verbs_receiver_poll(int timeout_ms);
/* A new configuration: later hellos are checked against it (links already
 * open stay open; repl.c closes what the new configuration drops). */
void verbs_receiver_set_config(uint64_t term, uint64_t config_digest);
/* The port the receiver listens on (useful after port 0), or -1. */
int verbs_receiver_port(void);
/* Disconnect every link and release everything. Safe when not started. */
void verbs_receiver_stop(void);

typedef struct verbs_receiver_stats {
    uint64_t links;          /* open links */
    uint64_t accepted, refused;
    uint64_t landed, landed_bytes; /* messages / span bytes copied into the b-log */
    uint64_t acks_sent;
    uint64_t pool_full_waits;      /* polls that found the b-log full */
    uint64_t blocks;               /* blocks of multi-block entries received */
    uint64_t block_entries;        /* ... entries they made, landed */
} verbs_receiver_stats;
void verbs_receiver_get_stats(verbs_receiver_stats *out);

#endif
