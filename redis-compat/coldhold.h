/* coldhold.h -- a connection waits, before running a command, for the
 * pages of its keys the readers bring in (src/store/coldread.h). */
#ifndef ROWAN_COLDHOLD_H
#define ROWAN_COLDHOLD_H
#include "client.h"
#include "resp.h"

/* Should c's parsed command wait for cold pages? 1: it must not run now
 * (it is parsed again when they are in); 0: run it. rest: the input after
 * it (pipelined commands, whose pages are read along), parsed with lim. */
int client_cold_holds(client *c, const resp_limits *lim, const char *rest, size_t restlen);
/* The same for a per-reply session (session.h): the command in c->argv
 * waits in c->inq; the queued commands behind it are read along. */
int session_cold_holds(client *c);
/* c is being freed: forget its reads. */
void client_cold_freed(client *c);
/* DEBUG COLDREAD FORCE 0|1 / DROP / STATS; 1 if it was one of those. */
int debug_coldread(client *c);

#endif
