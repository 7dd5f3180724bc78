/* control.h -- the control thread: lands incoming replication messages in
 * the b-log, persists, acks (control.c). */
#ifndef ROWAN_CONTROL_H
#define ROWAN_CONTROL_H
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

/* Allocate server.control (at startup, before anything else uses the
 * control thread's state). */
void control_init(void);
/* Free the state control_init made (its threads stopped); boot.c's teardown. */
void control_free(void);
/* Bind our replication port (cluster mode), before the pool is opened: a
 * port another server listens on fails here. -1 with "Could not create
 * replication TCP listening socket host:port: bind: Address already in use".
 * The socket listens from control_start on. */
int control_listen(char *err, size_t errlen);
/* Start the thread on that socket (binding it first if control_listen was
 * not called). */
int control_start(char *err, size_t errlen);
void control_stop(void);
/* Close every link from the nodes in mask `nodes` (any thread): nothing
 * more of theirs lands (a node that left the configuration), or its
 * sender starts a new session whose catch-up re-syncs what it sends us.
 * wait: return once the control thread has done it. */
void control_drop_nodes(uint64_t nodes, int wait);
/* Have the control thread's next b-log flush cover a batch of this node's
 * t-log (its writes made before the call): *done becomes 1 once it is
 * durable, and wake(arg) is called then only if *done was 2 (the waiter
 * asked for it: worker.c). -1 (nothing queued) when the thread does
 * not take flushes (not running, pmem, or the device is slow): use the
 * syncer then. */
int control_submit_flush(_Atomic int *done, void (*wake)(void *), void *arg);
/* flushes: b-log flushes begun; blog_messages / blog_flushes is the writes per flush */
void control_get_stats(long long *msgs, long long *refused, long long *nlinks, long long *flushes);

#endif
