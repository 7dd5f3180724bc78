/* edge.c -- the installed client edge (edge.h). */
#include "edge.h"

const edge_ops *edge;

void edge_install(const edge_ops *ops) { edge = ops; }
