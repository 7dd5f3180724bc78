/* t_list.c -- the list type and its commands (issue 3, in progress). */
#include "commands.h"

void list_register(void) {}
