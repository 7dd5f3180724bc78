/* gate.h -- the durability gate: a reply leaves only once every version it
 * depends on is durable (issue 15: a core rule, the same for every edge).
 *
 * A session's output is a byte buffer its edge appends replies to, in
 * command order, whatever their encoding (RESP for both edges today). The
 * gate knows nothing of that encoding: it keeps, in order, the byte ranges
 * [start, end) of the replies that depend on versions not yet durable, each
 * with those (shard, version) dependencies (db.h's db_dep). Bytes before
 * the first held range may leave; a held range holds every byte after it
 * too, so replies stay in order and only replies with dependencies of
 * their own need an entry.
 *
 * A held reply ends one of three ways (gate_release):
 *   - durable: its entry goes, and its bytes may leave;
 *   - broken: a shard it depends on changed hands meanwhile (db_dep_broken):
 *     whether its versions are durable is unknown, so it must never leave;
 *     the edge closes the session;
 *   - expired: it waited longer than the limit (replication-timeout); the
 *     edge replaces its bytes by an error of its own encoding
 *     (gate_replace_head), which the client gets instead.
 *
 * Offsets are the edge's (relative to its buffer's current start):
 * gate_shift follows it when it drops bytes already sent. Owner thread
 * only (the session's worker). */
#ifndef ROWAN_GATE_H
#define ROWAN_GATE_H
#include <stddef.h>
#include <stdint.h>
#include "db.h"

typedef struct gate_entry {
    size_t start, end;     /* the reply's bytes in the edge's buffer */
    int64_t since_us;      /* monotonic time the reply was held */
    int ndeps;
    db_dep *deps;          /* malloc'd when ndeps > 1, else NULL */
    db_dep dep1;           /* the dependency when ndeps == 1 */
} gate_entry;

typedef struct gate {
    gate_entry *q;         /* FIFO: q[head .. head+n) */
    int n, cap, head;
} gate;

enum { GATE_CLEAR, GATE_WAITING, GATE_BROKEN, GATE_EXPIRED };

/* After a command whose reply is [start, end): hold it if it depends on
 * versions (x->deps) not durable yet. Returns 1 if it was held. */
int gate_after_command(gate *g, db_ctx *x, size_t start, size_t end);
/* Where output must stop: the first held reply's start, else len. */
size_t gate_sendable_end(const gate *g, size_t len);
/* Release the held replies that became durable, in order, and say what
 * stops the rest: GATE_CLEAR (none held), GATE_WAITING, GATE_BROKEN (the
 * head must never leave), GATE_EXPIRED (the head waited over limit_us; 0:
 * no limit). */
int gate_release(gate *g, int64_t limit_us);
/* The head's bytes were replaced by newlen bytes (an expired reply's
 * error): later entries move by the difference, and the head goes. */
void gate_replace_head(gate *g, size_t newlen);
/* The edge dropped `by` bytes from its buffer's front (all sent). */
void gate_shift(gate *g, size_t by);
/* The edge cut its buffer back to `start` (a reply it will not send):
 * holds from there on go too. */
void gate_truncate(gate *g, size_t start);
/* Is anything held? */
static inline int gate_held(const gate *g) { return g->n > 0; }
/* Bytes it allocated (for client memory accounting). */
size_t gate_mem(const gate *g);
void gate_free(gate *g);

#endif
