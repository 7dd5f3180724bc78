/* rowan_int.h -- librowan's engine (rowan_engine.c), shared by the blocking API (rowan.c)
 * and the libevent one (rowan_async.c). Private: not installed.
 *
 * The engine is event-driven and never blocks: requests are sent, datagrams
 * are fed in as their socket becomes readable, and timers fire
 * retransmissions and timeouts. The blocking API drives it with poll(); the
 * async API with libevent. A request ends by calling its `done` function
 * once (reply or error); internal requests (configuration reads) use the
 * same path. */
#ifndef ROWAN_INT_H
#define ROWAN_INT_H
#include <stdint.h>
#include "rowan.h"
#include "dgram.h"

#define RW_MAX_NODES 64
#define RW_BUCKETS   256           /* per-node hash of requests in flight, by id */
#define RW_NOSLOT    (-1)
/* Request ids per node from the oldest unanswered one to the newest: below
 * the server's window of unacknowledged ids per client (NATIVE_MAX_PENDING,
 * 256), so a long pipeline waits here instead of being refused BUSY --
 * which would also let later requests run before the refused ones. */
#define RW_WINDOW    128
#define RW_RXBATCH   16            /* datagrams per recvmmsg */
#define RW_OUTBATCH  64            /* requests queued per node before a flush */
#define RW_PACKBATCH 16            /* datagrams (packs) per sendmmsg */
#define RW_REQ_POOL  64            /* finished request records kept for reuse */
#define RW_REQ_DG    512           /* datagram room of a new request record, at least */

typedef struct rw_req rw_req;
typedef struct rw_sock rw_sock;
typedef void (*rw_done_fn)(rowanEngine *e, rw_req *q);

enum rw_state { RQ_NEW, RQ_QUEUED, RQ_FLIGHT, RQ_PARKED, RQ_DONE };

struct rw_req {
    rw_req *qnext;                 /* owner's queue (blocking API: replies in order) */
    rw_req *fprev, *fnext;         /* node's in-flight list, ascending ids */
    rw_req *hnext;                 /* node's id hash chain */
    rw_req *pprev, *pnext;         /* the engine's parked list, or the node's queue */
    enum rw_state state;
    int node;                      /* node it was sent to; -1 none yet */
    int slot;                      /* key's hash slot, RW_NOSLOT: keyless */
    uint64_t id;                   /* request id on that node's link */
    uint64_t term;                 /* term it was sent with */
    unsigned char *dg;             /* the datagram (after the record); header rewritten per send */
    size_t dlen;
    size_t dcap;                   /* room for it after the record */
    uint16_t shard, frag;          /* its header's, as put_hdr last wrote them (packing) */
    rowanEngine *eng;              /* whose pool the record returns to */
    uint64_t t_deadline;           /* ns: fail with a timeout after this */
    uint64_t t_next;               /* ns: next retransmission / parked resend (0: on refresh) */
    uint64_t t_sent;
    uint64_t rto;                  /* ns: current retransmission interval */
    int tries;                     /* sends of the current id */
    int reroutes;                  /* stale refusals, -MOVED, -TRYAGAIN followed */
    int internal;                  /* a configuration read (refresh step) */
    int outq;                      /* its datagram waits in the node's batch */
    int step;                      /* internal: which step */
    dgram_join join;               /* the reply being joined from fragments */
    /* the outcome */
    int err;
    char errstr[128];
    redisReply *reply;
    rw_done_fn done;
    void *fn, *priv;               /* async: callback and its privdata */
    int push;                      /* RW_PUSH_*: a pub/sub or MONITOR command (rowan_push.c) */
    uint64_t seq;                  /* blocking API: order of its reply among pushed messages */
};

typedef struct rw_node {
    char host[256];
    int port;                      /* native (UDP) */
    int resp_port;                 /* RESP, as CLUSTER SLOTS names it; 0 unknown */
    int fd;                        /* -1: not opened yet */
    rw_sock *sock;                 /* async: the socket shared with other contexts (fd is its) */
    int refused;                   /* a send met ECONNREFUSED: dead, handled by the loop */
    rw_req *out[RW_OUTBATCH];      /* datagrams to send at the next flush */
    int nout;
    uint64_t client;               /* this link's client id */
    uint64_t next_id;
    rw_req *head, *tail;           /* in flight, ascending ids */
    rw_req *qhead, *qtail;         /* waiting for room in the window (RW_WINDOW) */
    rw_req *bucket[RW_BUCKETS];
    void *ev;                      /* async: its read event */
    dgram_join push_join;          /* a fragmented pushed reply being joined (rowan_push.c) */
    uint64_t push_num;             /* its push number; 0: none */
} rw_node;

typedef struct rw_cmdinfo {        /* key position of a command (COMMAND) */
    char name[32];
    int first;                     /* 0: no key */
} rw_cmdinfo;

struct rowanEngine {
    int nnodes;
    rw_node nodes[RW_MAX_NODES];
    uint8_t slot_node[16384];      /* node per slot (cluster) */
    int cluster;
    int home;                      /* node of keyless commands (the seed while it answers) */
    int nshards;                   /* server's shards (header's shard); 0 unknown */
    uint64_t term;                 /* term of the configuration we route by */
    uint64_t term_seen;            /* newest term any server told us */
    int port_off;                  /* native port - RESP port; INT32_MIN unknown */
    rw_cmdinfo *cmds;              /* open addressing, ncmds_cap slots */
    int ncmds_cap;
    /* refresh */
    int refreshing, rf_node, rf_tries, rf_ok;
    int closing;                   /* being freed */
    uint8_t rf_slot_node[16384];
    int rf_cluster;
    uint64_t rf_term;
    char rf_err[128];
    rw_req *parked;                /* waiting for a refresh or a delayed resend */
    /* settings */
    uint64_t timeout_ns;
    uint64_t srtt;                 /* smoothed round trip, ns */
    uint64_t busy_poll_ns;         /* blocking API: poll this long before sleeping (0: never) */
    double drop_send, drop_recv, dup_send;
    uint64_t rng;
    rowanStats st;
    /* the owner's hooks (async) */
    void (*on_socket)(rowanEngine *e, int node);
    /* open node's link on a shared socket (sets its sock and fd); -1 with
     * why: the engine opens a socket of its own instead */
    int (*share)(rowanEngine *e, int node, char *why, size_t whylen);
    void *owner;
    int inflight;                  /* requests in flight or parked */
    /* pushed output (rowan_push.c): the owner's handler (takes the reply),
     * the nodes where this context is subscribed or monitoring, and their
     * keepalive */
    void (*on_push)(rowanEngine *e, int node, redisReply *r);
    uint64_t sub_nodes, mon_nodes;
    uint64_t keepalive_ns, t_keepalive;
    struct { redisReply *r; int node; } *later;   /* values pushed next (rw_push_flush) */
    int nlater, caplater;
    redisReader *reader;
    /* finished request records, reused (no malloc/free per request) */
    rw_req *pool;
    int npool;
    /* the clock read once per batch (a receive batch, a timer turn, a
     * submit): nonzero while one runs, and used for everything in it */
    uint64_t now;
    unsigned char rx[RW_RXBATCH][DGRAM_MTU + 64];   /* one recvmmsg's datagrams */
    unsigned char txpk[RW_PACKBATCH][DGRAM_MTU];    /* packed frames of one sendmmsg */
};

/* A connected UDP socket shared by the contexts attached to one event
 * base (rowan_async.c): each context keeps its own client id on it, and
 * replies find their context by the header's client id. Contexts' flushes
 * copy their datagrams into its batch, sent by one sendmmsg (rw_sock_send)
 * when the owner's handler ends. */
#define RW_TXMAX 32
typedef struct rw_member {
    rowanEngine *e;
    int node;
    uint64_t client;
} rw_member;

struct rw_sock {
    int fd;
    char host[256];
    int port;
    rw_member *mem;                /* the contexts' links on it */
    int nmem, capmem;
    int n;                         /* datagrams in the batch */
    size_t len[RW_TXMAX];
    unsigned char pk[RW_TXMAX][DGRAM_MTU];
    unsigned char rx[RW_RXBATCH][DGRAM_MTU + 64];
    void *ev, *group;              /* the owner's: its read event, its event base's group */
    rw_sock *next;
};

uint64_t rw_now(void);
/* A UDP socket connect()ed to host:port; -1 with why. */
int rw_udp_open(const char *host, int port, char *why, size_t whylen);
/* One recvmmsg without waiting, up to RW_RXBATCH datagrams into rx. */
struct mmsghdr;
int rw_recv_batch(int fd, unsigned char (*rx)[DGRAM_MTU + 64], struct mmsghdr *msgs);
/* Send s's batch (one sendmmsg); a refusal marks every member's node. */
void rw_sock_send(rw_sock *s);
/* One datagram read from node's shared socket, for e (now: the receive
 * batch's clock). */
void rw_on_datagram(rowanEngine *e, int node, const unsigned char *buf, size_t len,
                    uint64_t now);
/* Node's socket reported a refusal (nothing listens there). */
void rw_on_refused(rowanEngine *e, int node);
/* Open node's link again (a socket of its own becomes a shared one). */
int rw_node_reopen(rowanEngine *e, int node, char *why, size_t whylen);
rowanEngine *rw_engine_new(const char *host, int port, const struct timeval *tv);
void rw_engine_free(rowanEngine *e);
/* Read the configuration synchronously (rowanConnect). 0 or -1 with errstr. */
int rw_bootstrap(rowanEngine *e, char *errstr, size_t errlen, int *err);
/* A request from an argument vector; NULL with *err/errstr on refusal
 * (too large, bad argc, no memory). */
rw_req *rw_req_new(rowanEngine *e, int argc, const char **argv, const size_t *argvlen,
                   int *err, char *errstr, size_t errlen);
/* Route and send it (or park it until the configuration is known). */
void rw_submit(rowanEngine *e, rw_req *q);
/* Send an internal request to node itself (not routed). */
void rw_submit_to(rowanEngine *e, rw_req *q, int node);
void rw_req_free(rw_req *q);
/* Feed everything readable on node's socket. */
void rw_on_readable(rowanEngine *e, int node);
/* Fire due retransmissions, resends and timeouts. */
void rw_on_timer(rowanEngine *e, uint64_t now);
/* ns until the next timer is due (UINT64_MAX: none). */
uint64_t rw_next_timer(rowanEngine *e, uint64_t now);
/* Send the datagrams batched since the last flush (before waiting). */
void rw_flush(rowanEngine *e);
/* Fail every outstanding request (context freed). */
void rw_fail_all(rowanEngine *e, int err, const char *why);
/* Block until q is done (poll), the blocking API's loop. */
void rw_wait(rowanEngine *e, rw_req *q);
/* Format with hiredis's formatter into an argument vector: argv points
 * into *holder (a redisReply to free). -1 on a bad format. */
int rw_format(const char *format, va_list ap, redisReply **holder, int *argc,
              const char ***argv, size_t **argvlen);
void rw_set_faults(rowanEngine *e, double ds, double dr, double dup, uint64_t seed);
void rw_refresh(rowanEngine *e, int node);
/* One round of the blocking loop (a datagram or the next timer). */
void rw_poll(rowanEngine *e);

/* ---- pushed output (rowan_push.c) ---- */
enum { RW_PUSH_NONE, RW_PUSH_SUB, RW_PUSH_UNSUB, RW_PUSH_MONITOR };
/* Is argv[0] a subscribe, unsubscribe or MONITOR command? */
int rw_push_kind(const char *name, size_t len);
/* A reply's bytes: its first RESP value (NULL if the bytes are not whole
 * values); the values after it (a SUBSCRIBE of several channels) are kept
 * for rw_push_flush; subscriptions are noted. */
redisReply *rw_push_reply(rowanEngine *e, rw_req *q, const char *buf, size_t len);
/* Hand the values rw_push_reply kept back to on_push (after the reply). */
void rw_push_flush(rowanEngine *e);
void rw_push_free(rowanEngine *e);
/* A datagram with request id 0: pushed output, best effort. */
void rw_push_datagram(rowanEngine *e, int node, const dgram_hdr *h, const unsigned char *pl,
                      size_t plen);
/* Keepalives of subscribed links: send the due ones; ns until the next. */
void rw_push_timer(rowanEngine *e, uint64_t now);
uint64_t rw_push_next(const rowanEngine *e, uint64_t now);

#endif
