/* pubsub.h -- SUBSCRIBE, PSUBSCRIBE, PUBLISH and friends across workers.
 *
 * See pubsub.c for the design (one global registry under a mutex; messages
 * for a client of another worker wait in its inbox until that worker's
 * next round). The functions below are the hooks networking.c and worker.c
 * call; the command procs are declared by the command table
 * (cmds_multi.def). */
#ifndef ROWAN_PUBSUB_H
#define ROWAN_PUBSUB_H
#include "client.h"

struct worker;

/* client_call, after the command passed its checks: a RESP2 client with
 * subscriptions may only run (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING, QUIT and
 * RESET. Returns 1 when the command was answered here (refused, or PING's
 * subscribed-context reply), 0 to go on. */
int pubsub_intercept(client *c);
/* RESET, and the client is being freed: drop every subscription and any
 * undelivered message (owner worker thread). */
void pubsub_reset(client *c);
/* Worker's before_sleep: write the messages published to w's clients by
 * other workers since the last round. */
void pubsub_deliver(struct worker *w);
/* Channels, patterns and shard channels with subscribers (INFO pubsub_*). */
void pubsub_counts(long long *channels, long long *patterns, long long *shard_channels);
/* Subscriptions of c (CLIENT LIST sub= / psub=). */
int pubsub_channel_count(const client *c);
int pubsub_pattern_count(const client *c);

/* Publish msg on channel ch to every subscriber (PUBLISH, keyspace
 * notifications); returns how many received it. pub is the publishing
 * client, or NULL outside a command (active expiry). Shard locks may be
 * held. */
long long pubsub_publish(client *pub, const char *ch, size_t clen, const char *msg, size_t mlen);

/* Queue a client-side caching invalidation of key (NULL: every key) for
 * target, written by its worker's next round (tracking.c). The caller
 * guarantees target is not being freed (tracking.c's lock). */
void pubsub_push_invalidate(client *target, const char *key, size_t klen);
/* The same for a MONITOR line (sent as +line), monitor.c. */
void pubsub_push_line(client *target, const char *line, size_t len);
/* The same for "tracking-redir-broken" <id> (RESP3 targets only). */
void pubsub_push_redir_broken(client *target, uint64_t id);
/* Every subscription of every client, under the registry's lock (acl.c:
 * disconnect subscribers whose channels a changed user no longer allows). */
void pubsub_foreach_subscription(void (*fn)(void *arg, client *c, const char *name, size_t len,
                                            int is_pattern),
                                 void *arg);

/* Command procs (rows in cmds_multi.def). */
void subscribeCommand(client *c);
void unsubscribeCommand(client *c);
void psubscribeCommand(client *c);
void punsubscribeCommand(client *c);
void publishCommand(client *c);
/* pubsub_bus.c: a PUBLISH reaches every node of a cluster. Register the
 * BUS_PUBLISH handler (startup), and send a PUBLISH run here to the other
 * members (no-op standalone). */
void pubsub_bus_register(void);
void pubsub_broadcast(const char *ch, size_t clen, const char *msg, size_t mlen);
void pubsubCommand(client *c);
void ssubscribeCommand(client *c);
void sunsubscribeCommand(client *c);
void spublishCommand(client *c);

#endif
