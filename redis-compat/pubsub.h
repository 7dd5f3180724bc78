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
/* Subscriptions of c (CLIENT LIST sub= / psub=). */
int pubsub_channel_count(const client *c);
int pubsub_pattern_count(const client *c);

/* Command procs (rows in cmds_multi.def). */
void subscribeCommand(client *c);
void unsubscribeCommand(client *c);
void psubscribeCommand(client *c);
void punsubscribeCommand(client *c);
void publishCommand(client *c);
void pubsubCommand(client *c);
void ssubscribeCommand(client *c);
void sunsubscribeCommand(client *c);
void spublishCommand(client *c);

#endif
