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

/* Once the server stopped: its sessions are freed (workers_join), no
 * thread of it runs. */
void edge_state_free(void) {
    native_state_free();
    acl_state_free();
    acl_log_state_free();
    blocking_state_free();
    monitor_state_free();
    net_state_free();
    pubsub_state_free();
    pause_state_free();
    fn_cur_state_free();
    fn_state_free();
    fn_run_state_free();
    fn_load_state_free();
    fn_count_state_free();
    slowlog_state_free();
    latency_state_free();
    lat_events_state_free();
    errcodes_state_free();
    script_state_free();
    rand48_state_st_free();
    rates_state_free();
    peak_state_free();
    tracking_state_free();
    cmdnames_state_free();
    free(server.edge_state);
    server.edge_state = NULL;
}
