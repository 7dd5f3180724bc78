/* edge_state.h -- the edge's state, one per server (issue 15).
 *
 * What the edge's files kept in file-level variables (the ACL users, the
 * blocking registry, the monitors, pub/sub, tracking, CLIENT PAUSE, the
 * FUNCTION libraries, latency and slowlog history, the native edge's
 * workers) belongs to one server: the server object holds it behind the
 * opaque server.edge_state (src/ never sees this header). Each file keeps
 * its own struct private and allocates it in its *_state_new; its former
 * variables are macros over it, so the code reads as before. What stays
 * process-wide (immutable tables, the command table) says so where it is. */
#ifndef ROWAN_EDGE_STATE_H
#define ROWAN_EDGE_STATE_H
#include "server.h"

struct native_state;
struct acl_state;
struct acl_log_state;
struct blocking_state;
struct monitor_state;
struct net_state;
struct pubsub_state;
struct pause_state;
struct fn_cur_state;
struct fn_state;
struct fn_run_state;
struct fn_load_state;
struct fn_count_state;
struct slowlog_state;
struct latency_state;
struct lat_events_state;
struct errcodes_state;
struct script_state;
struct rand48_state_st;
struct rates_state;
struct peak_state;
struct tracking_state;
struct cmdnames_state;

struct edge_state {
    struct native_state *native;          /* native.c */
    struct acl_state *acl;                /* acl.c */
    struct acl_log_state *acl_log;        /* acl.c */
    struct blocking_state *blocking;      /* blocking.c */
    struct monitor_state *monitor;        /* monitor.c */
    struct net_state *net;                /* networking.c */
    struct pubsub_state *pubsub;          /* pubsub.c */
    struct pause_state *pause;            /* t_client.c */
    struct fn_cur_state *fn_cur;          /* t_function.c */
    struct fn_state *fn;                  /* t_function.c */
    struct fn_run_state *fn_run;          /* t_function.c */
    struct fn_load_state *fn_load;        /* t_function.c */
    struct fn_count_state *fn_count;      /* t_function.c */
    struct slowlog_state *slowlog;        /* t_introspect.c */
    struct latency_state *latency;        /* t_latency.c */
    struct lat_events_state *lat_events;  /* t_latency.c */
    struct errcodes_state *errstats;      /* t_latency.c */
    struct script_state *script;          /* t_script.c */
    struct rand48_state_st *rand48;       /* t_script.c */
    struct rates_state *rates;            /* t_server.c */
    struct peak_state *peak;              /* t_server.c */
    struct tracking_state *trk;           /* tracking.c */
    struct cmdnames_state *cmdnames;      /* commands.c */
};

/* Each file's allocation (edge_state_new calls them all). */
void native_state_new(void);
void acl_state_new(void);
void acl_log_state_new(void);
void blocking_state_new(void);
void monitor_state_new(void);
void net_state_new(void);
void pubsub_state_new(void);
void pause_state_new(void);
void fn_cur_state_new(void);
void fn_state_new(void);
void fn_run_state_new(void);
void fn_load_state_new(void);
void fn_count_state_new(void);
void slowlog_state_new(void);
void latency_state_new(void);
void lat_events_state_new(void);
void errcodes_state_new(void);
void script_state_new(void);
void rand48_state_st_new(void);
void rates_state_new(void);
void peak_state_new(void);
void tracking_state_new(void);
void cmdnames_state_new(void);

/* A new server's edge state (edge_ops.state_new). */
struct edge_state *edge_state_new(void);

/* ... and their frees, once the server stopped (edge_state_free). */
void native_state_free(void);
void acl_state_free(void);
void acl_log_state_free(void);
void blocking_state_free(void);
void monitor_state_free(void);
void net_state_free(void);
void pubsub_state_free(void);
void pause_state_free(void);
void fn_cur_state_free(void);
void fn_state_free(void);
void fn_run_state_free(void);
void fn_load_state_free(void);
void fn_count_state_free(void);
void slowlog_state_free(void);
void latency_state_free(void);
void lat_events_state_free(void);
void errcodes_state_free(void);
void script_state_free(void);
void rand48_state_st_free(void);
void rates_state_free(void);
void peak_state_free(void);
void tracking_state_free(void);
void cmdnames_state_free(void);
/* The whole edge state of the calling thread's server. */
void edge_state_free(void);

#endif
