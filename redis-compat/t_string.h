/* t_string.h -- string helpers shared with the families that store their
 * values as strings (bit operations in t_bitops.c, HyperLogLog in t_hll.c). */
#ifndef ROWAN_T_STRING_H
#define ROWAN_T_STRING_H
#include "client.h"
#include "db.h"

/* Look argv[i] up as a string: 1 found (*v filled), 0 missing, -1 another
 * type (WRONGTYPE replied). for_write uses db_peek (no hit/miss counting). */
int lookup_string(client *c, int i, db_val *v, int for_write);
/* A bit offset argument (argv[i]); with bits > 0 the "#n" form means n*bits.
 * Its byte must lie within proto-max-bulk-len. Replies and returns -1 if not. */
int parse_bit_offset_arg(client *c, int i, int bits, unsigned long long *off);
/* argv[i]'s string value was edited in place (APPEND, SETRANGE, SETBIT,
 * BITFIELD...): Redis's OBJECT ENCODING says "raw" for it from now until
 * it is replaced (string_edited). */
void string_mark_edited(client *c, int i);
int string_edited(client *c, int i);

#endif
