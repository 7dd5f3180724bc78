/* native_session.h -- how the native edge runs commands: a session per
 * native client, driven by tagged commands, answering by tagged replies.
 *
 * This is the shape of the session API of issue 15's boundary work
 * (/work/notes/native-contract.md: session_open / session_run /
 * session_close with a per-reply delivery callback). rdma/native.c is
 * written against this header only; native_shim.c implements it on the
 * existing RESP client (see its comment) until the core's session API
 * replaces the shim, which then becomes a thin adapter.
 *
 * Rules the edge relies on (the contract's):
 *   - reply() is called on the session's worker thread, in command order,
 *     once the reply of the command tagged `tag` may leave: under the same
 *     durability gate as a RESP reply (durable, or an error). Output nobody
 *     asked for (pub/sub messages, MONITOR) comes with tag 0;
 *   - closed() says the session ended on its own (QUIT, CLIENT KILL, output
 *     limits): its memory is released after the callback returns and the
 *     edge must not use it again; commands still running got no reply;
 *   - nsess_close() ends a session from the edge; no closed() follows. */
#ifndef ROWAN_NATIVE_SESSION_H
#define ROWAN_NATIVE_SESSION_H
#include <stddef.h>
#include <stdint.h>

struct worker;
typedef struct nsess nsess;

typedef struct nsess_cb {
    void (*reply)(void *tctx, uint64_t tag, const char *resp, size_t len);
    void (*closed)(void *tctx);
} nsess_cb;

/* Open a session on worker w (called on w's thread); addr names the peer
 * (CLIENT LIST). NULL when it cannot be made (out of descriptors). */
nsess *nsess_open(struct worker *w, const nsess_cb *cb, void *tctx, const char *addr);
/* Run one command tagged `tag` (argv is used before returning). */
void nsess_run(nsess *s, uint64_t tag, int argc, const char *const *argv, const size_t *argvlen);
void nsess_close(nsess *s);
/* At shutdown, after the workers stopped and freed their clients: release
 * what the edge side of s still holds, touching nothing of the core. */
void nsess_release(nsess *s);

#endif
