/* networking.h -- what the workers call into the RESP connection layer for. */
#ifndef ROWAN_NETWORKING_H
#define ROWAN_NETWORKING_H
#include <sys/socket.h>
#include "client.h"

struct worker;
/* A new connection accepted by worker w (tls: on a tls-port socket). */
/* Was memory over maxmemory, eviction notwithstanding, when the command
 * running on this thread started? (Redis's pre_command_oom_state: scripts
 * check it.) */
int client_pre_command_oom(void);
void client_accept(struct worker *w, int fd, int tls, struct sockaddr *sa, int salen);
/* Release held replies that became durable and write what may be sent.
 * Returns 1 if replies are still held, 0 otherwise (the client may have been
 * freed: do not touch it after a 0 from a closed client). */
int client_flush(client *c);
/* The socket c is read from (TCP), or -1 (a transport without one). */
int client_fd(client *c);
/* Close clients other threads marked with client_kill_async. */
void clients_reap_killed(struct worker *w);
/* Periodic work: idle timeouts, shrinking idle buffers. */
void clients_cron(struct worker *w);
/* maxmemory-clients: while the clients' buffers together exceed it, close
 * the biggest clients (any worker's; safe from any worker thread). */
void clients_evict(void);
void clients_free_all(struct worker *w);

#endif
