/* edge_state.c -- allocate a server's edge state (edge_state.h). */
#include <stdlib.h>
#include "edge_state.h"

struct edge_state *edge_state_new(void) {
    struct edge_state *es = calloc(1, sizeof(*es));
    if (!es) abort();
    server.edge_state = es;
    return es;
}
