/* types.c -- registering the collection types' classes (types.h). */
#include "type_hash.h"
#include "type_list.h"
#include "type_set.h"
#include "type_stream.h"
#include "type_zset.h"
#include "types.h"

void types_init(void) {
    hash_register();
    set_register();
    zset_register();
    list_register();
    stream_register();
}
