/* pubsub_bus.c -- PUBLISH across a cluster's nodes (Redis Cluster's rule).
 *
 * In Redis Cluster a PUBLISH reaches the subscribers of every node, not
 * only those of the node that ran it: the node sends it over the cluster
 * bus to all the others. Here the same: a PUBLISH (not SPUBLISH, whose
 * channel lives on its shard's nodes, and not keyspace notifications,
 * which Redis keeps node-local) run on a cluster node goes to every other
 * member of the current configuration as a BUS_PUBLISH request, and each
 * delivers it to its own subscribers -- RESP and native (librowan) alike,
 * since both are sessions of the same registry (pubsub.c). PUBLISH's reply
 * counts this node's receivers only, as in Redis Cluster.
 *
 * Delivery is best effort, as in Redis: a node that is down or
 * unreachable misses the message (bus_call fails after its timeout;
 * nobody waits for the outcome). Messages from one node reach another in
 * the order they were published there (one bus connection per peer, its
 * jobs queued in order).
 *
 * Payload: u32 channel length, the channel, the message (to the end). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "bus.h"
#include "cluster.h"
#include "le.h"
#include "pubsub.h"

#define PUBLISH_TIMEOUT_MS 5000

static void on_publish(bus_req *r, int node, const uint8_t *p, size_t n) {
    (void)node;
    if (n < 4 || le_get_u32(p) > n - 4) {
        bus_reply_error(r, "ERR malformed PUBLISH");
        return;
    }
    size_t clen = le_get_u32(p);
    pubsub_publish(NULL, (const char *)p + 4, clen, (const char *)p + 4 + clen, n - 4 - clen);
    bus_reply(r, NULL, 0);
}

void pubsub_bus_register(void) { bus_register(BUS_PUBLISH, on_publish); }

void pubsub_broadcast(const char *ch, size_t clen, const char *msg, size_t mlen) {
    if (!cluster_enabled() || clen > UINT32_MAX || 4 + clen + mlen > BUS_MAX_PAYLOAD) return;
    int self = cluster_self(), n = cluster_nnodes();
    uint8_t *buf = NULL;
    size_t len = 4 + clen + mlen;
    for (int i = 0; i < n; i++) {
        if (i == self || !cluster_is_member(i)) continue;
        if (!buf) {
            buf = malloc(len);
            if (!buf) return;
            le_put_u32(buf, (uint32_t)clen);
            memcpy(buf + 4, ch, clen);
            memcpy(buf + 4 + clen, msg, mlen);
        }
        bus_call(i, BUS_PUBLISH, buf, len, PUBLISH_TIMEOUT_MS, NULL, NULL);
    }
    free(buf);
}
