/* client.h -- a client session (session.h): what commands run on.
 *
 * A client belongs to exactly one worker, whose thread alone runs its
 * commands and delivers its replies. It holds no socket: its transport (TCP
 * in networking.c, or the native edge) feeds it commands and takes its
 * output (session.h). Replies are appended to `out` in command order.
 * A reply that depends on versions not yet durable is "held": the bytes are
 * in `out` but `sendable` stops before them until the shard watermarks pass
 * (see src/store/shard.h). So replies on one connection always leave in order. */
#ifndef ROWAN_CLIENT_H
#define ROWAN_CLIENT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <event2/event.h>
#include "resp.h"
#include "db.h"
#include "gate.h"

struct worker;
struct rcommand;
struct session_transport;

#define CLIENT_CLOSE_AFTER_REPLY (1 << 0)  /* QUIT, protocol error */
#define CLIENT_CLOSE_ASAP        (1 << 1)  /* CLIENT KILL, output limit, etc. */
#define CLIENT_PROTECTED_DENY    (1 << 2)
#define CLIENT_INPUT_EOF         (1 << 3)  /* EOF read while commands were left */
#define CLIENT_INPUT_LEFT        (1 << 4)  /* back-pressure left commands in qbuf */
#define CLIENT_REPLY_OFF         (1 << 5)  /* CLIENT REPLY OFF (t_client.c) */
#define CLIENT_REPLY_SKIP        (1 << 6)  /* drop this command's reply */
#define CLIENT_REPLY_SKIP_NEXT   (1 << 7)  /* CLIENT REPLY SKIP: drop the next one */
#define CLIENT_PAUSED            (1 << 8)  /* CLIENT PAUSE holds its next command */
#define CLIENT_MONITOR           (1 << 9)  /* MONITOR (monitor.c) */

/* Per-reply transports (session.h): where each reply ends in `out`, and the
 * tag of the command it answers (0: output that is no command's reply). A
 * mark starts where the one before it ends (the first at `sent`). */
typedef struct reply_mark {
    size_t end;            /* offset in out.b, like the gate's */
    uint64_t tag;
} reply_mark;

/* A command a per-reply session could not run yet (session_run), copied. */
typedef struct session_qcmd {
    uint64_t tag;
    int argc;
    const char **argv;     /* one allocation: argv, argvlen, then the bytes */
    size_t *argvlen;
    size_t size;
} session_qcmd;

typedef struct client {
    uint64_t id;
    const struct session_transport *tr;  /* its transport (session.h) */
    void *tctx;             /* the transport's state for it */
    struct worker *w;
    char addr[64];          /* ip:port of the peer */
    char laddr[64];         /* ip:port of our end */
    char *name;             /* CLIENT SETNAME, NULL if none */
    char lib_name[64], lib_ver[32];
    int db;                 /* SELECTed logical db */
    int authenticated;
    int flags;
    int is_local;           /* connected over loopback or unix socket */
    _Atomic int killed;     /* set by client_kill_async from any thread */
    /* input: the command running (its argv belongs to the transport) */
    uint64_t tag;           /* the transport's tag of it (or of the blocked one) */
    int argc;
    const char **argv;
    size_t *argvlen;
    const struct rcommand *cmd, *lastcmd;
    /* output */
    resp_out out;
    size_t sent;            /* bytes of out.b already handed to the transport */
    time_t obuf_soft_since; /* output over its soft limit since (0: it is not) */
    gate held;              /* held replies: byte ranges of out.b (src/engine/gate.h) */
    /* per-reply transports only (tr->reply): reply boundaries, and the
     * commands waiting to run (FIFOs; see session.h) */
    reply_mark *marks;
    int nmarks, capmarks, headmarks;
    session_qcmd *inq;
    int ninq, capinq, headinq;
    size_t inq_bytes;
    struct event *ev_input; /* runs inq from the worker's loop (session_wake_input) */
    db_ctx x;
    /* cluster fencing (member.h): the lease epoch the last command ran
     * under, and whether the lease was valid then */
    uint64_t lease_epoch;
    int lease_valid_exec;
    /* bookkeeping */
    time_t ctime;           /* connection time (seconds) */
    time_t last_interaction;
    long long tot_cmds;
    _Atomic size_t mem;     /* buffer bytes counted in server.clients_mem */
    _Atomic int no_evict;   /* CLIENT NO-EVICT on: maxmemory-clients spares it */
    size_t evicting;        /* registry lock: mem counted as being evicted */
    struct client *prev, *next;   /* worker's client list */
    /* transactions and pub/sub: private to multi.c / pubsub.c, NULL when unused */
    struct multi_state *mstate;
    struct pubsub_client *ps;
    struct tracking_client *trk;  /* client-side caching: tracking.c, under its lock */
    struct acl_user *user;  /* acl.c: the user it runs as (never NULL while connected) */
    /* coldhold.c: pages of the next command's keys being read, NULL when
     * none; cold_ready: they were, run it without checking again */
    struct coldread_req *cold;
    int cold_ready;
} client;

/* Run the commands c could not run yet, soon, on its worker (any thread):
 * CLIENT UNPAUSE, the end of a pause. */
void session_wake_input(client *c);

/* Iterate over every client of every worker (takes the global client lock;
 * fn must not block or free clients). */
void client_foreach(void (*fn)(client *c, void *arg), void *arg);
/* Close client c soon, on its own worker (safe from any thread). */
void client_kill_async(client *c);
/* Append Redis's CLIENT LIST / CLIENT INFO line for c (no trailing newline). */
void client_info_line(client *c, rbuf *out);
/* CLIENT SETNAME: replace the name (NULL/0 clears it), safely against CLIENT LIST. */
void client_set_name(client *c, const char *name, size_t len);
/* Number of connected clients. */
int client_count(void);

/* Output limits (client-output-buffer-limit, client-output-buffer-max).
 * Output added to c outside its own command (pub/sub messages) is framed
 * by these two, as client_call frames a command: prepare sets the limit
 * resp.c enforces on c->out; check closes c, dropping its output, when it
 * overflowed or passed its class's hard or soft limit, as Redis does.
 * check returns 1 if c is being closed. Owner worker thread only. */
void client_out_prepare(client *c);
int client_out_check(client *c);
/* Write what c may send now, without waiting, once a good amount is
 * pending: pub/sub delivery writes a long inbox as it goes, as Redis's
 * replies would have left between its event loop rounds. */
void client_out_write_some(client *c);

/* The dispatcher's routing (networking.c), shared with EXEC (multi.c):
 * append to ids the shard id of each key cmd names in argv (at most argc
 * entries); *first_pos / *first_shard (if non-NULL) get the first key's
 * argv position (-1 if none) and shard. Returns how many ids were added. */
struct shard;
int command_key_shards(const struct rcommand *cmd, int argc, const char *const *argv,
                       const size_t *argvlen, uint16_t *ids, int *first_pos,
                       struct shard **first_shard);
/* Sort shard ids ascending (the locking order) and drop duplicates; returns
 * the new count. */
int shard_ids_normalize(uint16_t *ids, int n);

#endif
