/* t_set.c -- the set type and its commands (issue 3, in progress). */
#include "commands.h"

void set_register(void) {}
