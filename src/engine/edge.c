/* edge.c -- the installed client edge (edge.h). */
#include "edge.h"
#include "server.h"

const edge_ops *edge;

/* The ops are the process's; the calling thread's server gets its edge
 * state here if it has none yet (tools and unit tests that install the edge
 * without starting a server; boot.c gives each new server its own). */
void edge_install(const edge_ops *ops) {
    edge = ops;
    if (!server.edge_state) server.edge_state = ops->state_new();
}
