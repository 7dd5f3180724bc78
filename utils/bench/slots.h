/* slots.h -- cluster awareness: which node owns a key's hash slot.
 *
 * At start-up the seed node is asked CLUSTER SLOTS (synchronously, before
 * any load is generated). An error reply means a standalone server: every
 * slot maps to the seed. Otherwise each slot range maps to the primary the
 * reply names. Every worker thread then keeps a private copy of the map and
 * updates it from -MOVED replies, like Redis Cluster clients do; -ASK
 * redirects one command (preceded by ASKING) without touching the map.
 *
 * Slots come from hash_slot() in src/base/hash.h, the server's own function, so
 * the driver and Rowan agree on {hash tags} and CRC16 by construction. */
#ifndef ROWAN_BENCH_SLOTS_H
#define ROWAN_BENCH_SLOTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#define SLOTS_COUNT 16384
#define SLOTS_MAX_NODES 64

enum cluster_mode { CLUSTER_AUTO, CLUSTER_ON, CLUSTER_OFF };

struct node {
    char host[64];
    int port;
};

struct slotmap {
    bool cluster;
    int nnodes;
    struct node nodes[SLOTS_MAX_NODES];
    uint8_t owner[SLOTS_COUNT];     /* node index per slot */
};

/* Connect to the seed (AUTH with password when given) and build the map. */
int slotmap_fetch(struct slotmap *m, const char *host, int port, const char *password,
                  enum cluster_mode mode, char *err, size_t errlen);
/* Fill the map from a CLUSTER SLOTS reply; empty hosts mean seed_host.
 * Returns 0, or -1 when the reply is malformed or assigns no slot. */
int slotmap_from_reply(struct slotmap *m, const redisReply *r, const char *seed_host);
/* Index of host:port, added when new; -1 when the table is full. */
int slotmap_node(struct slotmap *m, const char *host, int port);

enum redirect { REDIRECT_NONE, REDIRECT_MOVED, REDIRECT_ASK };

/* Parse "MOVED <slot> <host>:<port>" or "ASK ..." (an error reply's text).
 * An empty host ("MOVED 1 :7001") is returned as "". */
enum redirect redirect_parse(const char *msg, size_t len, unsigned *slot, char *host,
                             size_t hostcap, int *port);

unsigned key_slot(const char *key, size_t len);

#endif
