/* util.h -- the edge's name for the core's string and number helpers
 * (src/base/strutil.h); the command argument parsers (arg_is, arg_ll...) are
 * declared in commands.h and defined in util.c. */
#ifndef ROWAN_UTIL_H
#define ROWAN_UTIL_H
#include "strutil.h"

#endif
