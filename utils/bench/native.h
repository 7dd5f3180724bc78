/* native.h -- rowan-bench's native transport (--transport native): the
 * driver's preformatted commands sent through librowan's async API
 * (rdma/client/rowan.h) instead of hiredis over TCP. One librowan context
 * per driver connection; the library routes keys to primaries itself and
 * follows stale terms and -MOVED, so the driver's slot map is not used. */
#ifndef ROWAN_BENCH_NATIVE_H
#define ROWAN_BENCH_NATIVE_H
#include <stddef.h>

struct event_base;
typedef void native_reply_fn(void *reply, void *priv);

/* Connect (reads the configuration; blocks briefly) and attach to base.
 * NULL with err filled on failure. */
void *native_connect(struct event_base *base, const char *host, int port,
                     native_reply_fn *fn, char *err, size_t errlen);
/* Send one RESP-encoded command (as the driver builds them: an array of
 * bulk strings); fn(reply or NULL, priv) runs once. 0, or -1 when the
 * command was refused (too large for a datagram, malformed). */
int native_send(void *ctx, const char *resp, size_t len, void *priv);
/* Free; outstanding commands get fn(NULL, priv). */
void native_close(void *ctx);

#endif
