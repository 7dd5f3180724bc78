/* t_debug.h -- DEBUG subcommands implemented in t_debug.c. */
#ifndef ROWAN_T_DEBUG_H
#define ROWAN_T_DEBUG_H
#include "client.h"

/* Runs DEBUG DIGEST, DIGEST-VALUE, PROTOCOL, CHANGE-REPL-ID or RELOAD and
 * returns 1; 0 when c is none of those (the caller replies the error). */
int debug_extra(client *c);
/* DEBUG SESSION OPEN|RUN|READ|CLOSE: a test transport (t_debug_session.c). */
void debug_session(client *c);

#endif
