/* t_zset.c -- the zset type and its commands (issue 3, in progress). */
#include "commands.h"

void zset_register(void) {}
