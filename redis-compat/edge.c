/* edge.c -- the RESP edge's side of src/engine/edge.h: the functions the core's
 * workers and main call into this layer for, installed at startup. */
#include "edge.h"
#include "blocking.h"
#include "commands.h"
#include "networking.h"
#include "pubsub.h"
#include "edge_state.h"

static void stat_fold(struct rcommand *cmd, long long calls, long long usec, long long failed) {
    struct cmd_stats *st = command_stats(cmd);
    atomic_fetch_add(&st->calls, calls);
    atomic_fetch_add(&st->usec, usec);
    if (failed) atomic_fetch_add(&st->failed_calls, failed);
}

static const edge_ops resp_edge = {
    .configure = commands_rename,
    .start = commands_start,
    .stat_rows = command_rows,
    .stat_fold = stat_fold,
    .accept = client_accept,
    .round_begin = pubsub_deliver,
    .round_ready = blocking_run_ready,
    .flush = client_flush,
    .fd = client_fd,
    .evict = clients_evict,
    .reap_killed = clients_reap_killed,
    .cron = clients_cron,
    .free_all = clients_free_all,
    .state_new = edge_state_new,
    .state_free = edge_state_free,
};

void resp_edge_install(void) { edge_install(&resp_edge); }
