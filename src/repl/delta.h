/* delta.h -- incremental catch-up: a replica that comes back with its data
 * receives only the parts of a shard that differ from its primary's copy.
 *
 * It rides on the whole-shard re-sync (log.h, "Re-sync": begin marker,
 * every key at one fresh version V, end record that drops everything older
 * than V), so that the digest, recovery and the cleaner see exactly what
 * they see for a full re-sync. Only who writes the unchanged keys into the
 * replica's b-log differs:
 *
 *  1. Before a session's catch-up (repl.c), the primary asks the replica
 *     (BUS_DELTAINFO, answered on the digest thread) for each shard it will
 *     re-sync: can its copy serve as a base (it backs the shard up; it is
 *     not damaged, not a learner's copy, not half-way through a re-sync, has
 *     no db map in effect, and its control thread lands streams itself:
 *     replication-mode rowan), the largest version it holds or has pending,
 *     and the digest of each of the shard's DB_SHARD_BUCKETS buckets
 *     (db_shard.h).
 *  2. Under the shard lock the primary compares its own bucket digests,
 *     raises the shard's next version above the replica's largest (so that
 *     V, and every later write, is above anything the replica holds: its
 *     end record then drops all of the replica's older keys, including
 *     writes of an earlier term that never committed), and sends a re-sync
 *     whose begin marker carries the "kept" buckets (digests equal) with
 *     the digest each must still have; then only the other buckets' keys;
 *     then the end record.
 *  3. The replica's control thread, right after landing that begin marker
 *     and before anything later on the stream, checks each kept bucket's
 *     digest against its copy under the shard lock and lands its own keys
 *     of those buckets at version V, flagged as re-sync entries, as if the
 *     primary had sent them. If any kept bucket differs (its copy changed
 *     since step 1) it refuses the stream: the link closes, the primary's
 *     session fails, and the next session re-syncs the whole shard.
 *
 * Why the copy does not change between 1 and 3: a peer gets no CommitVer
 * while its session catches up (repl.c sends them to LIVE peers only), so
 * the digest applies nothing new to it; step 3's check makes that a
 * verified fact rather than an assumption.
 *
 * Digest equality stands for content equality: the bucket digest is a sum
 * of 64-bit per-key hashes of (logical db, key, type, value, expiry), so two
 * different bucket contents agree with probability about 2^-64. */
#ifndef ROWAN_DELTA_H
#define ROWAN_DELTA_H
#include <stddef.h>
#include <stdint.h>
#include "db_shard.h"

/* What the replica said of one shard. */
typedef struct delta_base {
    int usable;                        /* its copy can serve as a base */
    uint64_t maxver;                   /* the largest version it holds or has pending */
    uint64_t digests[DB_SHARD_BUCKETS];
} delta_base;

/* Register the BUS_DELTAINFO handler (every node, before the bus runs). */
void delta_init(void);

/* Primary (repl manager thread): ask node about shards sids[0..n); out[i]
 * is filled for each. 0 on success, -1 if the node could not be asked (then
 * nothing in out is usable). */
int delta_ask(int node, const int *sids, int n, delta_base *out);

/* Primary, shard lock held: the begin marker's payload for a re-sync of s
 * against base b, in *payload (malloc'd) / *len, and the bitmap of buckets
 * to send (those not kept) in send[DB_SHARD_BUCKETS / 8]. Returns the
 * number of buckets kept; 0 means no payload (send everything). */
int delta_plan(struct shard *s, const delta_base *b, uint8_t **payload, size_t *len,
               uint8_t *send);

/* Replica (control thread): a re-sync begin marker e was just landed; when
 * it carries kept buckets, land this node's own keys of those buckets at
 * e->ver. 0 = done (or nothing to do), -1 = refuse the stream (why says
 * why). */
struct log_entry;
int delta_land_kept(const struct log_entry *e, char *why, size_t whylen);

#endif
