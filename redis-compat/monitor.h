/* monitor.h -- MONITOR: every command, as Redis prints it, to the
 * connections that asked. See monitor.c. */
#ifndef ROWAN_MONITOR_H
#define ROWAN_MONITOR_H
#include "client.h"

/* After c's command ran (t_client.c): one line to every monitor. */
void monitor_feed(client *c);
/* c goes away or runs RESET: it stops monitoring. */
void monitor_client_freed(client *c);
/* Is c a monitor (CLIENT LIST flag O)? */
int monitor_is(const client *c);
void monitorCommand(client *c);

#endif
