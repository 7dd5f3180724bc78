/* rowan.h -- librowan: the native client library of Rowan.
 *
 * It talks to rowan-server's native port (UDP datagrams, rdma/dgram.h) and
 * feels like hiredis: replies are hiredis's redisReply, freed with
 * freeReplyObject; commands are formatted like redisCommand's.
 *
 *   rowanContext *c = rowanConnect("127.0.0.1", 6380);   // a seed's native port
 *   if (c == NULL || c->err) { ...c->errstr... }
 *   redisReply *r = rowanCommand(c, "SET %s %b", key, val, vlen);
 *   if (r == NULL) { ...c->err, c->errstr... }   // the context stays usable
 *   freeReplyObject(r);
 *   rowanFree(c);
 *
 * rowanConnect asks the seed for the cluster configuration (its term and
 * CLUSTER SLOTS) and routes each command to the primary of its key's slot;
 * a standalone server takes everything. A refusal for a stale term or a
 * -MOVED reply (nothing ran in either case) refreshes the configuration
 * and sends the command again to the right node.
 *
 * Delivery. A request travels in one datagram; one that does not fit is
 * refused before sending (ROWAN_ERR_TOOBIG: use TCP). After a timeout it
 * is sent again with the same request id, and the server answers a
 * duplicate with the original reply instead of running it again, so a
 * retried INCR counts once. A request that gets no reply within the
 * context's timeout (default 5 s; rowanSetTimeout) fails with
 * ROWAN_ERR_TIMEOUT: it may or may not have been applied.
 *
 * Errors. Unlike hiredis, an error is about one call, not the context: the
 * call returns NULL / ROWAN_ERR with err and errstr set, and the next call
 * starts with err cleared. Error replies of the server (-ERR ...) are
 * replies (REDIS_REPLY_ERROR), not errors of the library.
 *
 * Order. Replies of pipelined commands come back in the order appended.
 * The commands themselves normally run in that order too, but a datagram
 * that is lost is sent again after the ones behind it may have run: when
 * the order of two writes matters, wait for the first reply (or use
 * MULTI). A node's requests in flight span at most 128 request ids (the
 * server keeps replies for 256 per client); more wait in the library, in
 * order.
 *
 * Pub/sub and MONITOR. The server pushes messages (and MONITOR lines) in
 * datagrams of their own that are never retransmitted: delivery is BEST
 * EFFORT. A message in a lost datagram is lost, one larger than a datagram
 * (about 4 KB) is dropped, and a server restart or failover ends the
 * subscriptions without notice. Use them for hints, not for data that must
 * arrive. As in hiredis:
 *   - blocking API: rowanCommand(c, "SUBSCRIBE a b") returns the first
 *     confirmation; rowanGetReply returns the next ones, then each message
 *     as it arrives (waiting up to the timeout; ROWAN_ERR_TIMEOUT when none
 *     came). rowanGetReply hands out appended commands' replies and
 *     messages in the order they arrived; rowanCommand returns its own
 *     command's reply and leaves messages queued. Messages arrive only
 *     while the library runs (inside rowanGetReply / rowanCommand).
 *   - async API: the callback given with SUBSCRIBE / PSUBSCRIBE /
 *     SSUBSCRIBE is called for each confirmation and each message of its
 *     channels (patterns); UNSUBSCRIBE's confirmation is a channel's last
 *     call. MONITOR's callback gets +OK and then every line.
 * The server forgets a client it has not heard from in native-client-
 * timeout (60 s by default): while subscribed or monitoring, the library
 * sends a PING every keepalive interval (rowanSetKeepalive, 10 s).
 *
 * Limits of this version: one context is for one thread; in a cluster,
 * commands without a key (SUBSCRIBE, PSUBSCRIBE, MONITOR among them) go to
 * the seed node (the next one once it stops answering) and MULTI/EXEC must
 * stay on one node.
 */
#ifndef ROWAN_H
#define ROWAN_H
#include <stdarg.h>
#include <stddef.h>
#include <sys/time.h>
#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The library is built with hidden visibility; these are its exports. */
#pragma GCC visibility push(default)

#define ROWAN_VERSION_MAJOR 0
#define ROWAN_VERSION_MINOR 1

#define ROWAN_OK 0
#define ROWAN_ERR -1

/* ctx->err (the first ones have hiredis's REDIS_ERR_* numbers). */
#define ROWAN_ERR_IO       1   /* a socket call failed: errstr has strerror */
#define ROWAN_ERR_OTHER    2   /* bad arguments, unresolvable host, ... */
#define ROWAN_ERR_PROTOCOL 4   /* a datagram or reply that does not decode */
#define ROWAN_ERR_OOM      5
#define ROWAN_ERR_TIMEOUT  6   /* no reply in time: the request may or may not have run */
#define ROWAN_ERR_DEAD     7   /* nothing listens at the server's port (connection refused) */
#define ROWAN_ERR_TOOBIG   8   /* request larger than one datagram: use TCP */
#define ROWAN_ERR_STALE    9   /* stale configuration that could not be refreshed */

typedef struct rowanEngine rowanEngine;   /* private */

typedef struct rowanContext {
    int err;             /* 0, or ROWAN_ERR_* of the last call */
    char errstr[128];
    rowanEngine *eng;
} rowanContext;

/* Connect to a seed node's native port and read the configuration. Returns
 * NULL only when out of memory; check c->err otherwise. */
rowanContext *rowanConnect(const char *host, int port);
rowanContext *rowanConnectWithTimeout(const char *host, int port, const struct timeval tv);
/* Per-request timeout (retransmissions included); also bounds rowanConnect. */
int rowanSetTimeout(rowanContext *c, const struct timeval tv);
void rowanFree(rowanContext *c);

/* Run a command and wait for its reply (a redisReply *), or NULL on error. */
void *rowanCommand(rowanContext *c, const char *format, ...);
void *rowanvCommand(rowanContext *c, const char *format, va_list ap);
/* argvlen NULL: the arguments are NUL-terminated strings. */
void *rowanCommandArgv(rowanContext *c, int argc, const char **argv, const size_t *argvlen);

/* Pipelining: send now, collect the replies in order with rowanGetReply. */
int rowanAppendCommand(rowanContext *c, const char *format, ...);
int rowanvAppendCommand(rowanContext *c, const char *format, va_list ap);
int rowanAppendCommandArgv(rowanContext *c, int argc, const char **argv, const size_t *argvlen);
/* The reply of the oldest appended command not collected yet. ROWAN_ERR
 * with *reply NULL when that command failed (err tells why) or when
 * nothing was appended. */
int rowanGetReply(rowanContext *c, void **reply);

/* Busy-poll (off by default): while waiting for a reply, poll the socket
 * without sleeping for up to usec microseconds before sleeping in poll(2),
 * and only while the smoothed round trip is below usec. A fast reply then
 * costs no sleep and wake-up; the price is this thread's CPU for up to
 * usec per wait. Worth it only where the thread has a core of its own:
 * on a loaded 2-core machine it bought no latency and cost 50-60% more
 * client CPU per op (BENCHMARKS.md, "-P 1 latency pass"). 0 turns it off.
 * The environment variable ROWAN_BUSY_POLL_US sets it for every context
 * created afterwards. The async API never spins (its loop is the
 * caller's). */
int rowanSetBusyPoll(rowanContext *c, unsigned usec);

/* While subscribed or monitoring: a PING this often keeps the link known
 * to the server (below its native-client-timeout; default 10 s). */
int rowanSetKeepalive(rowanContext *c, const struct timeval tv);

/* Read the configuration again now (it is refreshed by itself on a stale
 * term or -MOVED). */
int rowanRefreshConfig(rowanContext *c);
/* The configuration term the context routes by (0: standalone/unknown). */
unsigned long long rowanTerm(const rowanContext *c);

/* ---- asynchronous API, on libevent ---- */
struct event_base;
typedef struct rowanAsyncContext rowanAsyncContext;
/* reply: a redisReply *, freed by the library after the callback returns;
 * NULL when the command failed (ac->err / ac->errstr say why while the
 * callback runs) or the context is being freed. */
typedef void (rowanCallbackFn)(rowanAsyncContext *ac, void *reply, void *privdata);

struct rowanAsyncContext {
    int err;
    char errstr[128];
    void *data;          /* for the caller */
    rowanEngine *eng;
};

/* Connect and read the configuration (this step blocks, bounded by the
 * timeout), then attach to an event base before sending. */
rowanAsyncContext *rowanAsyncConnect(const char *host, int port);
int rowanAsyncSetTimeout(rowanAsyncContext *ac, const struct timeval tv);
int rowanLibeventAttach(rowanAsyncContext *ac, struct event_base *base);
int rowanAsyncCommand(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                      const char *format, ...);
int rowanvAsyncCommand(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                       const char *format, va_list ap);
int rowanAsyncCommandArgv(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata,
                          int argc, const char **argv, const size_t *argvlen);
/* Pushed output no SUBSCRIBE or MONITOR callback takes (tracking
 * invalidations...), freed after the call; NULL: dropped. */
void rowanAsyncSetPushCallback(rowanAsyncContext *ac, rowanCallbackFn *fn, void *privdata);
int rowanAsyncSetKeepalive(rowanAsyncContext *ac, const struct timeval tv);
/* Commands still waiting get their callback with a NULL reply. */
void rowanAsyncFree(rowanAsyncContext *ac);

/* ---- testing and statistics ---- */
typedef struct rowanStats {
    unsigned long long sent;          /* datagrams sent, retransmissions included */
    unsigned long long retransmits;
    unsigned long long received;      /* datagrams received */
    unsigned long long dropped_send;  /* by the fault hook */
    unsigned long long dropped_recv;
    unsigned long long duplicated;
    unsigned long long refreshes;     /* configuration reads */
    unsigned long long redirects;     /* commands re-sent after a stale term or -MOVED */
    unsigned long long spin_hits;     /* blocking waits a busy-poll ended (no sleep) */
    unsigned long long spin_misses;   /* busy-polls that ran out and slept */
} rowanStats;
void rowanGetStats(const rowanContext *c, rowanStats *st);
void rowanAsyncGetStats(const rowanAsyncContext *ac, rowanStats *st);
/* Fault injection for tests: drop the given fractions of the datagrams the
 * context sends and receives, and send a fraction of them twice, from a
 * generator seeded with seed. The environment variable ROWAN_FAULTS
 * ("drop-send=0.2,drop-recv=0.2,dup-send=0.1,seed=7") sets it for every
 * context created afterwards. */
void rowanSetFaults(rowanContext *c, double drop_send, double drop_recv, double dup_send,
                    unsigned long long seed);
void rowanAsyncSetFaults(rowanAsyncContext *ac, double drop_send, double drop_recv,
                         double dup_send, unsigned long long seed);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
