/* gate.c -- the durability gate (gate.h): a FIFO of held replies, as byte
 * ranges with their dependencies. Moved out of redis-compat/networking.c
 * (issue 15) so that every edge holds replies by the same rule. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gate.h"
#include "server.h"
#include "worker.h"

/* The common single dependency lives inline; never store a pointer to it,
 * since the FIFO array moves when it grows. */
static const db_dep *entry_deps(const gate_entry *h) { return h->ndeps > 1 ? h->deps : &h->dep1; }

/* When a reply was held: only compared with replication-timeout (seconds),
 * so the coarse clock (the last tick, a read of the vDSO page without the
 * TSC) does; it lags monotonic_us() by at most a tick, which makes a held
 * reply look at most that much older. Read once per round of a worker
 * (gate_after_command): the replies a round holds are stamped with when it
 * held its first, at most the round's few milliseconds earlier. */
static int64_t held_since_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void gate_push(gate *g, size_t start, size_t end, const db_dep *deps, int n,
                      int64_t since_us) {
    if (g->n + g->head == g->cap) {
        if (g->head) {
            memmove(g->q, g->q + g->head, sizeof(gate_entry) * (size_t)g->n);
            g->head = 0;
        } else {
            g->cap = g->cap ? g->cap * 2 : 16;
            g->q = realloc(g->q, sizeof(gate_entry) * (size_t)g->cap);
        }
    }
    gate_entry *h = &g->q[g->head + g->n++];
    h->start = start;
    h->end = end;
    h->since_us = since_us;
    h->ndeps = n;
    h->dep1 = deps[0];
    h->deps = NULL;
    if (n > 1) {
        h->deps = malloc(sizeof(db_dep) * (size_t)n);
        memcpy(h->deps, deps, sizeof(db_dep) * (size_t)n);
    }
}

static void gate_pop(gate *g) {
    free(g->q[g->head].deps);
    g->head++;
    if (--g->n == 0) g->head = 0;
}

/* A held reply also holds every later one (order), so later replies need
 * no entry of their own unless they have their own dependencies. */
int gate_after_command(gate *g, db_ctx *x, size_t start, size_t end) {
    int n = 0;
    for (int i = 0; i < x->ndeps; i++)
        if (!db_dep_durable(&x->deps[i])) {
            if (n != i) x->deps[n] = x->deps[i];
            n++;
        }
    if (n == 0) return 0;
    if (x->w && !x->w->round_held_us) x->w->round_held_us = held_since_us();
    gate_push(g, start, end, x->deps, n, x->w ? x->w->round_held_us : held_since_us());
    /* counted per worker and folded once per round (worker.c): a shared
     * counter bumped by every held reply, i.e. nearly every write, moved
     * its cache line between the workers once per command */
    if (x->w) x->w->round_held++;
    else atomic_fetch_add(&server.stat.held_replies, 1);
    return 1;
}

size_t gate_sendable_end(const gate *g, size_t len) { return g->n ? g->q[g->head].start : len; }

/* Where a held reply stands: BROKEN when a shard it depends on changed
 * hands meanwhile (db_dep_broken: it must never be sent), else CLEAR
 * (durable) once every dependency is, else WAITING. One walk. */
static int entry_state(const gate_entry *h) {
    const db_dep *d = entry_deps(h);
    int durable = 1;
    for (int i = 0; i < h->ndeps; i++) {
        if (db_dep_broken(&d[i])) return GATE_BROKEN;
        if (durable && !db_dep_durable(&d[i])) durable = 0;
    }
    return durable ? GATE_CLEAR : GATE_WAITING;
}

int gate_release(gate *g, int64_t limit_us) {
    while (g->n) {
        gate_entry *h = &g->q[g->head];
        int st = entry_state(h);
        if (st == GATE_BROKEN) return GATE_BROKEN;
        if (st == GATE_CLEAR) {
            gate_pop(g);
            continue;
        }
        if (limit_us > 0 && monotonic_us() - h->since_us > limit_us) return GATE_EXPIRED;
        return GATE_WAITING;
    }
    return GATE_CLEAR;
}

void gate_replace_head(gate *g, size_t newlen) {
    gate_entry *h = &g->q[g->head];
    size_t oldlen = h->end - h->start;
    for (int i = 1; i < g->n; i++) {
        g->q[g->head + i].start = g->q[g->head + i].start - oldlen + newlen;
        g->q[g->head + i].end = g->q[g->head + i].end - oldlen + newlen;
    }
    gate_pop(g);
}

void gate_shift(gate *g, size_t by) {
    for (int i = 0; i < g->n; i++) {
        g->q[g->head + i].start -= by;
        g->q[g->head + i].end -= by;
    }
}

void gate_truncate(gate *g, size_t start) {
    while (g->n && g->q[g->head + g->n - 1].start >= start) {
        free(g->q[g->head + g->n - 1].deps);
        if (--g->n == 0) g->head = 0;
    }
}

size_t gate_mem(const gate *g) { return (size_t)g->cap * sizeof(gate_entry); }

void gate_free(gate *g) {
    while (g->n) gate_pop(g);
    free(g->q);
    g->q = NULL;
    g->cap = g->head = 0;
}
