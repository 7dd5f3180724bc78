/* script.h -- Lua scripting (EVAL, EVALSHA, SCRIPT): the dispatcher's hook.
 * See t_script.c for the design. The command procs are declared by the
 * command table (cmds_script.def). */
#ifndef ROWAN_SCRIPT_H
#define ROWAN_SCRIPT_H
#include "client.h"

/* client_call, before the command takes its shard locks: while a script
 * runs on another worker, wait for it without blocking on its locks, or,
 * once it has run longer than busy-reply-threshold, reply -BUSY (except to
 * the commands Redis allows then: SCRIPT KILL, SHUTDOWN, AUTH...). Returns
 * 1 when c got -BUSY (do not run the command), 0 to run it. */
int script_gate(client *c);

#endif
