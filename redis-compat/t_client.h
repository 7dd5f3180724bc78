/* t_client.h -- around every command: CLIENT REPLY, CLIENT PAUSE, and the
 * hooks of tracking.c and monitor.c. See t_client.c. */
#ifndef ROWAN_T_CLIENT_H
#define ROWAN_T_CLIENT_H
#include <stddef.h>
#include "client.h"

/* networking.c: just before / after a command's proc runs. */
void client_command_begin(client *c);
void client_command_end(client *c);
/* networking.c, after a whole call: 1 when its reply must be dropped
 * (CLIENT REPLY OFF / SKIP); advances the SKIP state. */
int client_reply_dropped(client *c);
/* networking.c, before running a parsed command: 1 when a CLIENT PAUSE
 * holds it (the command stays in the query buffer; c is marked paused). */
int client_pause_holds(client *c);
/* clients_cron: a paused client whose pause is over goes on. (UNPAUSE
 * wakes every paused client itself.) */
int client_pause_over(const client *c);
void client_pause_resume(client *c);
/* c is being freed: early (before its pub/sub side goes) and last. RESET:
 * tracking off, no monitor, replies on. */
void client_hooks_freed(client *c);
void client_hooks_release(client *c);
void client_hooks_reset(client *c);

/* CLIENT subcommands (t_server.c's table). */
void client_reply(client *c);
void client_pause(client *c);
void client_unpause(client *c);

#endif
