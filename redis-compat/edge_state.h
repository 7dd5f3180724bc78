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

struct edge_state {
    int unused;
};

/* A new server's edge state (edge_ops.state_new). */
struct edge_state *edge_state_new(void);

#endif
