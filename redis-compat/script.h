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

/* The interpreter machinery FUNCTION and FCALL (t_function.c) share with
 * EVAL: one run at a time under the run lock (taken after every shard lock,
 * script_lock_shards), the sandbox, the BUSY gate and KILL. */
struct lua_State;
void script_run_lock(void);
void script_run_unlock(void);
struct lua_State *script_new_state(void);   /* a fresh sandboxed interpreter */
uint8_t *script_lock_shards(void);
void script_unlock_shards(uint8_t *taken);
/* cluster: route argv[3 .. 3+numkeys) like a command's keys; 1 = refused */
int script_route_keys(client *c, int numkeys);
void script_kill_reply(client *c);          /* SCRIPT KILL and FUNCTION KILL */
int script_busy(void);
/* Run the function on top of L's stack (popped) as fn(keys, args) with the
 * run lock and shards held; the reply goes to c. */
void script_run(client *c, struct lua_State *L, const char *name, int ro, int nkeys,
                const char **keys, const size_t *keylen, int nargs, const char **args,
                const size_t *arglen);

#endif
