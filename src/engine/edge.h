/* edge.h -- what the core calls the client edge for (issue 15).
 *
 * The core (workers, logs, replication) does not know RESP, commands or
 * client sessions: those are the edge's (redis-compat/). Where the core's
 * loop must hand work to it (a new connection, a worker round's flush of
 * replies, a command's statistics), it calls these function pointers,
 * installed by the edge at startup (edge_install), so no file of src/
 * includes an edge header. Sessions and command rows are opaque here. */
#ifndef ROWAN_EDGE_H
#define ROWAN_EDGE_H
#include <stddef.h>
#include <sys/socket.h>

struct worker;
struct client;      /* a session (the edge's) */
struct rcommand;    /* a command's statistics row (the edge's) */

typedef struct edge_ops {
    /* startup: after the configuration is read (rename-command), and once
     * the pool is open, before the workers (the command table); 0 or -1
     * with a message */
    int (*configure)(char *err, size_t errlen);
    int (*start)(char *err, size_t errlen);
    /* how many statistics rows commands have (a worker's per-round tables) */
    int (*stat_rows)(void);
    /* a worker's round of statistics for one row, added to the shared counters */
    void (*stat_fold)(struct rcommand *row, long long calls, long long usec, long long failed);
    /* a connection accepted on the client port, for worker w */
    void (*accept)(struct worker *w, int fd, int tls, struct sockaddr *sa, int salen);
    /* before_sleep, first: output other workers handed over (pub/sub) */
    void (*round_begin)(struct worker *w);
    /* before_sleep, before the group commit: sessions whose blocking
     * command may now be served (so what they pop joins this batch) */
    void (*round_ready)(struct worker *w);
    /* deliver what session c may send now: 1 if replies are still held,
     * 0 otherwise (c may have been freed) */
    int (*flush)(struct client *c);
    /* the socket session c is read from, or -1 (a worker's gather waits
     * on the sockets of the clients its last replies released) */
    int (*fd)(struct client *c);
    /* maxmemory-clients, before any output leaves (any worker thread) */
    void (*evict)(void);
    /* close the sessions other threads marked killed */
    void (*reap_killed)(struct worker *w);
    /* the worker's timer: idle timeouts, buffers */
    void (*cron)(struct worker *w);
    /* shutdown: free every session of w */
    void (*free_all)(struct worker *w);
    /* a new server's edge state (server.h's edge_state), before its
     * configuration is read */
    struct edge_state *(*state_new)(void);
    /* free server.edge_state once the server stopped (its sessions freed) */
    void (*state_free)(void);
} edge_ops;

/* The installed ops (every one set). */
extern const edge_ops *edge;
void edge_install(const edge_ops *ops);
/* The RESP edge's installer (redis-compat/edge.c): main calls it first. */
void resp_edge_install(void);

#endif
