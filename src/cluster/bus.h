/* bus.h -- the cluster bus: request/response messages between nodes.
 *
 * Replication (transport.h) moves log entries one way, acknowledged by
 * counts. Everything else nodes say to each other -- what a replica holds
 * of a shard, "send me that shard", later leases and configurations -- is
 * a request with a response, carried by the bus.
 *
 * Links. The bus rides on the replication port: a node's bus connects to a
 * peer's replication port and opens with the peer handshake (peer_auth.h)
 * presenting a repl_hello whose sender is REPL_LINK_BUS; the peer's control
 * thread checks it like any link (same secret, same configuration) and,
 * only then, hands the socket to the peer's
 * bus thread (bus_adopt). Each node keeps one outgoing connection per peer
 * for its own requests (and their responses); the peer's requests arrive
 * on the peer's connection to us.
 *
 * Frame, little endian:  u32 payload length | u16 type | u16 flags |
 *                        u64 request id | u64 sender's term | payload
 * A response carries its request's id and BUS_F_RESPONSE (plus
 * BUS_F_ERROR when the payload is an error text). Payloads are at most
 * BUS_MAX_PAYLOAD bytes; a frame announcing more closes the connection.
 *
 * Threads. One bus thread (libevent) owns every connection. Handlers run
 * on it and must not block: a handler that needs another thread's work
 * keeps its bus_req and answers later with bus_reply from any thread.
 * bus_call may be called from any thread; its callback runs on the bus
 * thread. A call fails (status BUS_FAILED) when the peer cannot be
 * reached, the connection breaks, or no response came within its
 * timeout -- never silently retried. */
#ifndef ROWAN_BUS_H
#define ROWAN_BUS_H
#include <stddef.h>
#include <stdint.h>

#define BUS_HDR_SIZE     24
#define BUS_MAX_PAYLOAD  (16u << 20)
#define BUS_F_RESPONSE   0x1
#define BUS_F_ERROR      0x2

/* Message types. */
enum bus_type {
    BUS_PING = 1,         /* -> empty response */
    BUS_SHARDINFO = 2,    /* what do you hold of these shards? (reconcile.c) */
    BUS_FETCH = 3,        /* send me this shard as a re-sync (reconcile.c) */
    BUS_LEASE = 4,        /* renew my lease (member.c -> cm.c): u64 term -> u64 term, u8 granted */
    BUS_CONFIG = 5,       /* adopt this configuration (cm.c -> member.c): its text form */
    BUS_CAUGHTUP = 6,     /* these learners are caught up with my shards (repl.c -> cm.c):
                           * u64 term, u64 mask of learner nodes */
    BUS_FAILOVER = 7,     /* CLUSTER FAILOVER from me (member.c -> cm.c): u64 term, u8 node, u8 force */
    BUS_DELTAINFO = 8,    /* what is your copy of these shards, bucket by bucket? (delta.c) */
    BUS_PUBLISH = 9,      /* deliver this PUBLISH to your subscribers (redis-compat/pubsub_bus.c):
                           * u32 channel length, channel, message -> empty response */
    BUS_TYPE_MAX = 64
};

/* Call outcomes. */
enum { BUS_OK = 0, BUS_FAILED = -1, BUS_ERROR = 1 };

typedef struct bus_req bus_req;
/* A request of `type` from node `node`; answer with bus_reply or
 * bus_reply_error exactly once (which frees r), from any thread. */
typedef void (*bus_handler)(bus_req *r, int node, const uint8_t *p, size_t n);
/* Response (status BUS_OK: p/n the payload; BUS_ERROR: p/n the error text;
 * BUS_FAILED: p NULL). p is valid during the call only. */
typedef void (*bus_cb)(void *arg, int status, const uint8_t *p, size_t n);

void bus_register(int type, bus_handler h);
void bus_reply(bus_req *r, const void *p, size_t n);
void bus_reply_error(bus_req *r, const char *msg);

/* Send a request to node; cb(arg, ...) runs once on the bus thread (cb
 * may be NULL: nobody waits for the outcome). */
void bus_call(int node, int type, const void *p, size_t n, int timeout_ms, bus_cb cb, void *arg);
/* The same, waiting for the outcome (not on the bus thread). On BUS_OK and
 * BUS_ERROR, *resp (malloc'd, caller frees; NUL-terminated for
 * convenience) and *rlen get the payload. */
int bus_call_sync(int node, int type, const void *p, size_t n, int timeout_ms, uint8_t **resp,
                  size_t *rlen);

/* Control thread: a link whose hello named REPL_LINK_BUS was accepted; pre
 * holds bytes already read after the hello. The bus owns fd (and ssl, its
 * TLS object when the link is TLS, else NULL) from now on. */
void bus_adopt(int fd, void *ssl, int node, const uint8_t *pre, size_t n);

/* Allocate server.bus (at startup, before anything registers or calls). */
void bus_init(void);
/* Free the state bus_init made (its threads stopped); boot.c's teardown. */
void bus_free(void);
/* Start the bus thread (cluster mode, before the control thread accepts). */
int bus_start(char *err, size_t errlen);
void bus_stop(void);

#endif
