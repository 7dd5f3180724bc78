/* t_latency.h -- LATENCY, ROLE, INFO errorstats / latencystats. See
 * t_latency.c. */
#ifndef ROWAN_T_LATENCY_H
#define ROWAN_T_LATENCY_H
#include "client.h"

/* After every command (networking.c): its histogram, and a latency
 * event when it took latency-monitor-threshold ms or more. */
void latency_command(client *c, long long duration_us);
/* INFO sections (t_server.c's table). */
void info_errorstats(rbuf *b);
void info_latencystats(rbuf *b);
void info_modules(rbuf *b);
/* CONFIG RESETSTAT. */
void latency_resetstat(void);
/* Install the error counter (resp_error_hook), before the workers start. */
void latency_init(void);

#endif
