/* t_cluster.h -- the Redis Cluster protocol: routing and the CLUSTER command.
 *
 * See t_cluster.c. The dispatcher (networking.c) calls cluster_redirect
 * for every command that passed its unknown/arity/auth checks, before the
 * command is queued in MULTI or run; the command procs are declared by the
 * command table (cmds_cluster.def). */
#ifndef ROWAN_T_CLUSTER_H
#define ROWAN_T_CLUSTER_H
#include "client.h"

/* Cluster mode only (no-op in standalone, returns 0): if the command's keys
 * hash to several slots (-CROSSSLOT) or to a slot another node is primary
 * of (-MOVED slot host:port), reply that error, flag the open transaction
 * (or discard it, for EXEC) and return 1: the command must not run. */
int cluster_redirect(client *c);
/* The same check again once the command's shard locks are held (EXEC:
 * the shards of its queued commands), so that what is checked cannot
 * change before the command runs: the shard's role and state only change
 * under its lock. 1 with the error replied: the command must not run. */
int cluster_recheck(client *c);

void clusterCommand(client *c);
void askingCommand(client *c);

#endif
