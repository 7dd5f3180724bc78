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
/* A script's flags (Redis 7's "#!lua flags=..." and register_function's
 * flags=): bit i is the i-th of no-writes, allow-oom, allow-stale,
 * no-cluster, allow-cross-slot-keys. SCRIPT_FLAG_DECLARED: the script
 * declares them (a shebang, every function), so they are checked before
 * it runs; an EVAL script without a shebang runs in Redis's compatibility
 * mode instead (checked command by command). */
#define SCRIPT_FLAG_NO_WRITES   (1 << 0)
#define SCRIPT_FLAG_ALLOW_OOM   (1 << 1)
#define SCRIPT_FLAG_ALLOW_STALE (1 << 2)
#define SCRIPT_FLAG_NO_CLUSTER  (1 << 3)
#define SCRIPT_FLAG_CROSS_SLOT  (1 << 4)
#define SCRIPT_FLAG_DECLARED    (1 << 8)
/* Redis's checks before a script with declared flags runs (no-cluster,
 * OOM, *_RO of a script that may write): 0 to run it, -1 with the error
 * replied. ro: called by EVAL_RO, EVALSHA_RO or FCALL_RO. */
int script_check_flags(client *c, int flags, int ro);
/* Run the function on top of L's stack (popped) as fn(keys, args) with the
 * run lock and shards held (script_check_flags passed); the reply goes to
 * c. flags: SCRIPT_FLAG_*. */
void script_run(client *c, struct lua_State *L, const char *name, int flags, int ro, int nkeys,
                const char **keys, const size_t *keylen, int nargs, const char **args,
                const size_t *arglen);

#endif
