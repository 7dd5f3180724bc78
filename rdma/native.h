/* native.h -- the native RPC edge: rdma/dgram.h requests over the UDP or
 * verbs UD backend into the workers' loops (rdma/native.c explains it). */
#ifndef ROWAN_NATIVE_H
#define ROWAN_NATIVE_H
#include <stddef.h>
#include "rbuf.h"

/* Open one endpoint per worker on native-bind:native-port (nothing when
 * native-port is 0). Called with the other listeners, before the pool is
 * opened, so a busy port fails early. 0, or -1 with a message. */
int native_listen(char *err, size_t errlen);
/* Register each endpoint in its worker's loop (after workers_create,
 * before the workers start). */
void native_attach(void);
/* After the workers stopped: release every native client and endpoint. */
void native_stop(void);
/* INFO's "# Native" section. */
void native_info(rbuf *b);

#endif
