/* multi.h -- transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
 *
 * See multi.c for the design (one group log entry per EXEC, WATCH by
 * versions). The functions below are the hooks the dispatcher
 * (networking.c) calls; the command procs are declared by the command table
 * (cmds_multi.def). */
#ifndef ROWAN_MULTI_H
#define ROWAN_MULTI_H
#include "client.h"

/* client_call, after the command passed the unknown/arity/auth checks:
 * inside MULTI, queue it (reply +QUEUED) or refuse it (error, and the
 * transaction will abort). Returns 1 when the command was queued or refused
 * (do not run it now), 0 to run it normally (not in MULTI, or one of MULTI,
 * EXEC, DISCARD, WATCH, QUIT, RESET). */
int multi_intercept(client *c);
/* A command was rejected before running (unknown, arity, auth, pub/sub
 * context): inside MULTI the transaction is flagged so EXEC aborts. */
void multi_flag_error(client *c);
/* RESET, and the client is being freed: leave MULTI and forget watches. */
void multi_reset(client *c);
/* Is c between MULTI and EXEC/DISCARD? (CLIENT LIST flags) */
int multi_active(const client *c);
/* Commands queued in the open transaction, -1 outside MULTI (CLIENT LIST). */
int multi_queued(const client *c);

/* Cluster routing of EXEC (t_cluster.c): call fn on every queued command,
 * in order, until one returns nonzero; returns that value (0: all passed,
 * or not in MULTI). */
struct rcommand;
typedef int multi_queued_fn(void *arg, const struct rcommand *cmd, int argc,
                            const char *const *argv, const size_t *argvlen);
int multi_foreach_queued(const client *c, multi_queued_fn *fn, void *arg);

/* Command procs (rows in cmds_multi.def). */
void multiCommand(client *c);
void execCommand(client *c);
void discardCommand(client *c);
void watchCommand(client *c);
void unwatchCommand(client *c);

#endif
