/* t_geo.h -- what the cluster router needs of the GEO family. */
#ifndef ROWAN_T_GEO_H
#define ROWAN_T_GEO_H
#include <stddef.h>
#include "commands.h"

/* GEORADIUS[BYMEMBER] ... STORE|STOREDIST dst: dst's argv index, a key the
 * command table's row does not name; -1 for any other command or none. */
int geo_store_pos(const struct rcommand *cmd, int argc, const char *const *argv,
                  const size_t *argvlen);

#endif
