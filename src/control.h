/* control.h -- the control thread: lands incoming replication messages in
 * the b-log, persists, acks (control.c). */
#ifndef ROWAN_CONTROL_H
#define ROWAN_CONTROL_H
#include <stddef.h>

/* Listen on our replication port and start the thread (cluster mode). */
int control_start(char *err, size_t errlen);
void control_stop(void);
void control_get_stats(long long *msgs, long long *refused, long long *nlinks);

#endif
