/* t_hash.c -- the hash type and its commands (issue 3, in progress). */
#include "commands.h"

void hash_register(void) {}
