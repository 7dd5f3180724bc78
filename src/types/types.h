/* types.h -- the collection types (src/types/): hash, list, set, zset,
 * stream. Each type_*.c holds one type's structure, the effects that change
 * it (their op codes and encoders, for the commands of the edge), how they
 * apply, its snapshot and load, and its class (object.h).
 *
 * The core registers the classes (types_init) before recovery, so a pool's
 * collections can be rebuilt from their log entries with no client edge
 * (redis-compat/) present; the edge's commands only encode effects. */
#ifndef ROWAN_TYPES_H
#define ROWAN_TYPES_H

/* Register every collection type's class (obj_register); idempotent. */
void types_init(void);

#endif
