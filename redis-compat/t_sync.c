/* t_sync.c -- SYNC and PSYNC: refused with a clear error.
 *
 * Redis answers them with an RDB snapshot followed by its replication
 * stream (the commands it propagates). Rowan has neither: its replicas
 * follow its own log of effects (see docs/DECISIONS.md, "No Redis
 * replication stream"), a format no Redis replica or stream watcher
 * (redis-cli --replica, replication-based CDC tools) understands. Producing
 * a Redis-compatible stream would mean re-encoding every effect as a Redis
 * command plus an RDB of the whole keyspace, which is not trivial, so the
 * commands exist only to say so, instead of "unknown command". Like Redis,
 * they are refused inside MULTI (multi.c). */
#include "commands.h"
#include "resp.h"

static void refuse(client *c) {
    resp_add_error(&c->out,
                   "ERR SYNC and PSYNC are not supported: Rowan replicates its own log, "
                   "there is no Redis replication stream (see README)");
}

void syncCommand(client *c) { refuse(c); }
void psyncCommand(client *c) { refuse(c); }
