/* workload.h -- what operations a run issues, and on which keys.
 *
 * A workload is a mix of operation types (YCSB's core workloads A-F, the
 * load phase, or a custom mix) plus a key chooser. Key numbers 0..records-1
 * exist after the load phase; inserts during a run take the next numbers
 * from a counter shared by all threads (keyspace_claim). Reads must not
 * target keys whose insert has not been acknowledged yet, so the keyspace
 * also tracks the acknowledged limit L: every key number below L has been
 * inserted. Choosers draw in [0, L). This is YCSB's
 * AcknowledgedCounterGenerator, with a ring of flags as its window.
 *
 * Key names: "user" + digits, like YCSB's; see key_format. */
#ifndef ROWAN_BENCH_WORKLOAD_H
#define ROWAN_BENCH_WORKLOAD_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "rng.h"
#include "zipf.h"

enum op_type { OP_READ, OP_UPDATE, OP_INSERT, OP_SCAN, OP_RMW, OP_NTYPES };
extern const char *const op_names[OP_NTYPES];

enum key_dist { DIST_UNIFORM, DIST_ZIPFIAN, DIST_LATEST };
extern const char *const dist_names[3];

struct workload {
    char name[16];
    double mix[OP_NTYPES];      /* proportions, normalised to sum 1 */
    enum key_dist dist;         /* the preset's default chooser */
    bool load;                  /* load phase: insert keys 0..records-1 */
};

/* load, a, b, c, d, e, f or custom (custom needs a mix). 0 or -1 + err. */
int workload_preset(struct workload *w, const char *name, char *err, size_t errlen);
/* "read=0.5,update=0.3,insert=0.1,scan=0.05,rmw=0.05" (any subset). */
int workload_parse_mix(double mix[OP_NTYPES], const char *spec, char *err, size_t errlen);
/* Operation type for a uniform u in [0, 1). */
enum op_type workload_pick(const double mix[OP_NTYPES], double u);
int dist_parse(const char *s, enum key_dist *d);

#define KEYSPACE_WINDOW (1u << 20)

struct keyspace {
    _Atomic uint64_t next;      /* next key number to insert */
    _Atomic uint64_t limit;     /* every key number below it is inserted */
    pthread_mutex_t lock;       /* guards the window and advancing limit */
    uint8_t *acked;             /* ring: acked[k % WINDOW] for k >= limit */
};

int keyspace_init(struct keyspace *ks, uint64_t first);
void keyspace_free(struct keyspace *ks);
/* Claim the next key number to insert. */
static inline uint64_t keyspace_claim(struct keyspace *ks) {
    return atomic_fetch_add_explicit(&ks->next, 1, memory_order_relaxed);
}
/* Mark key k's insert finished (successfully or not: a failed insert must
 * not hold the limit back forever). */
void keyspace_ack(struct keyspace *ks, uint64_t k);
static inline uint64_t keyspace_limit(struct keyspace *ks) {
    return atomic_load_explicit(&ks->limit, memory_order_acquire);
}

/* A per-thread key chooser. */
struct chooser {
    enum key_dist dist;
    uint64_t items;             /* zipfian: the key space it spreads over */
    struct scrambled sz;        /* zipfian */
    struct zipf latest;         /* latest: ranks counted back from limit-1 */
};

/* records: keys loaded; expected_inserts: how far the key space may grow
 * during the run (sizes the zipfian's range, as YCSB does). */
int chooser_init(struct chooser *c, enum key_dist d, double theta, uint64_t records,
                 uint64_t expected_inserts);
/* A key number in [0, limit); limit >= 1. */
uint64_t chooser_next(struct chooser *c, struct rng *r, uint64_t limit);

/* Key name for a key number. key_size 0: "user" + the decimal FNV hash of
 * the number (YCSB's default, 5..23 bytes). key_size >= 23: the same,
 * zero-padded to exactly key_size bytes. 5 <= key_size < 23: "user" + the
 * number itself zero-padded to key_size bytes (unique, but ordered).
 * Returns the length; buf needs max(key_size, 24) bytes. */
size_t key_format(char *buf, uint64_t keynum, int key_size);
/* Whether key_size can name max_keynum; used to refuse bad options early. */
bool key_size_fits(int key_size, uint64_t max_keynum);

#endif
