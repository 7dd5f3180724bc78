/* edge_state.c -- allocate a server's edge state (edge_state.h). */
#include <stdlib.h>
#include "edge_state.h"

struct edge_state *edge_state_new(void) {
    struct edge_state *es = calloc(1, sizeof(*es));
    if (!es) abort();
    server.edge_state = es;
    native_state_new();
    acl_state_new();
    acl_log_state_new();
    blocking_state_new();
    monitor_state_new();
    net_state_new();
    pubsub_state_new();
    pause_state_new();
    fn_cur_state_new();
    fn_state_new();
    fn_run_state_new();
    fn_load_state_new();
    fn_count_state_new();
    slowlog_state_new();
    latency_state_new();
    lat_events_state_new();
    errcodes_state_new();
    script_state_new();
    rand48_state_st_new();
    rates_state_new();
    peak_state_new();
    tracking_state_new();
    cmdnames_state_new();
    return es;
}
