/* tracking.h -- client-side caching (CLIENT TRACKING), as Redis 6+.
 *
 * See tracking.c for the design. The hooks below are called by t_client.c
 * (around every command), notify.c (every key change) and networking.c
 * (a client going away). */
#ifndef ROWAN_TRACKING_H
#define ROWAN_TRACKING_H
#include <stddef.h>
#include "client.h"

/* Around a command run by c (t_client.c's hooks). */
void tracking_command_begin(client *c);
void tracking_command_end(client *c);
/* A read-only command ran inside EXEC (multi.c): remember its keys. */
void tracking_remember_keys(client *c);
/* A key changed (any db): send its invalidations. */
void tracking_invalidate_key(const char *key, size_t klen);
/* FLUSHDB / FLUSHALL: every tracking client is told that every key changed. */
void tracking_invalidate_all(void);
/* c is being freed: first (before its pub/sub side goes) leave the tables
 * and break redirections to it; last (after it left the client registry)
 * free its state. RESET turns tracking off (tracking_reset). */
void tracking_client_freed(client *c);
void tracking_client_release(client *c);
void tracking_reset(client *c);
/* CLIENT LIST: flag letters (t tracking, R broken redirect, B bcast) added
 * at p (returns the new end) and the redir= field (-1 when not tracking). */
char *tracking_list_flags(const client *c, char *p);
long long tracking_list_redir(const client *c);
/* Clients with tracking on (INFO tracking_clients). */
int tracking_count(void);
/* INFO tracking_total_keys / _items / _prefixes. */
void tracking_stats(long long *keys, long long *items, long long *prefixes);

/* CLIENT subcommands (rows in t_server.c's table). */
void client_tracking(client *c);
void client_caching(client *c);
void client_getredir(client *c);
void client_trackinginfo(client *c);

#endif
