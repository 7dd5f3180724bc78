/* session.h -- a client session, driven by any transport (issue 15).
 *
 * A session (the `client` of client.h) is what a command runs on: its db,
 * argv, MULTI/WATCH state, pub/sub subscriptions, output and held replies.
 * It knows nothing of sockets. A transport feeds it commands and takes its
 * replies:
 *   - RESP over TCP (networking.c) is a byte stream: it parses commands out
 *     of its socket, runs each with session_run(tag 0), and takes the output
 *     through `write`, as bytes, up to the first reply not yet releasable;
 *   - the native UD RPC edge (rdma/) is per reply: each request carries a
 *     tag, and `reply` gets each command's reply, whole, with its tag.
 * Both go through the same dispatch and the same durability gate: a reply
 * leaves only once every version it depends on is durable (or it failed),
 * and replies leave in command order.
 *
 * Threads: a session belongs to one worker. session_open, session_run,
 * session_close and every callback below run on that worker's thread only
 * (the transport's events must be on w->base). */
#ifndef ROWAN_SESSION_H
#define ROWAN_SESSION_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "client.h"

struct worker;

/* What CLIENT LIST and maxmemory-clients see of a transport's buffers. */
typedef struct session_conn_stats {
    int fd;                  /* -1: no socket of its own */
    size_t qbuf, qbuf_free;  /* query buffer used / free */
    size_t argv_mem;         /* parsed arguments kept */
    size_t mem;              /* everything it allocated for this session */
} session_conn_stats;

typedef struct session_transport {
    const char *kind;        /* "tcp", "native", "test" */
    /* Exactly one of write and reply is set.
     * write (byte stream): take up to len bytes of output that may leave
     * now; returns how many it took, 0 when it is full (it calls
     * session_flush again once it can take more), -1 when it is dead. */
    ssize_t (*write)(void *tctx, const char *buf, size_t len);
    /* reply (per reply): the reply of the command run with `tag`, whole
     * (len 0: it has none, CLIENT REPLY OFF/SKIP), in command order, once it
     * may leave (durable, or an error). Output that is no command's reply
     * (pub/sub messages, tracking invalidations, MONITOR lines) comes with
     * tag 0: one or more complete RESP values. The bytes are the session's:
     * copy what is kept after the call returns. */
    void (*reply)(void *tctx, uint64_t tag, const char *resp, size_t len);
    /* The session is being freed (session_close, CLIENT KILL, output limits,
     * a held reply broken by a handover, idle timeout, shutdown): called once,
     * last; the transport forgets the session and frees its own state. */
    void (*close)(void *tctx);
    /* Optional (NULL: the session queues commands itself). A transport with
     * its own input buffer (TCP) keeps the commands the session cannot run
     * yet (a blocked, paused or backlogged client) and runs them again when
     * asked: `input` at once (owner thread), `resume` soon (any thread:
     * schedule `input` on the owner's loop). */
    void (*input)(void *tctx);
    void (*resume)(void *tctx);
    /* Optional: its buffers for CLIENT LIST / maxmemory-clients, and giving
     * back what an idle connection no longer needs (clients_cron). */
    void (*stats)(void *tctx, session_conn_stats *st);
    void (*trim)(void *tctx);
} session_transport;

/* A new session on worker w, served by transport t (tctx is passed back to
 * its callbacks), for the peer `addr` (CLIENT LIST's addr=; laddr and
 * is_local may be set on the result). NULL when maxclients is reached. */
client *session_open(struct worker *w, const session_transport *t, void *tctx, const char *addr);
/* Run one command (argv[0] is its name). Its reply comes back through the
 * transport under `tag`. argv is used before this returns, or copied: the
 * caller keeps it. A command the session cannot run yet (a blocked BLPOP
 * before it, CLIENT PAUSE, too much output pending, its keys' pages being
 * read: coldhold.c) waits, in order. */
void session_run(client *c, uint64_t tag, int argc, const char *const *argv,
                 const size_t *argvlen);
/* Free the session now (its peer is gone): replies not sent are dropped; the
 * transport's close is called. */
void session_close(client *c);
/* Deliver what may leave now (the worker does it before sleeping; a stream
 * transport also calls it when its socket becomes writable). Returns 1 if
 * replies are still held, 0 otherwise; c may have been freed on 0. */
int session_flush(client *c);

#endif
