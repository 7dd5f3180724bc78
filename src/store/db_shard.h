/* db_shard.h -- whole-shard operations for replication: a content digest,
 * an export of the live state as log entries, and clearing a shard.
 *
 * The replication layer (repl.c) compares a primary's and a backup's copy of
 * a shard with db_shard_digest, and re-syncs a backup that differs by
 * clearing its copy (db_shard_clear) and applying what the primary's
 * db_shard_export emitted (db_apply_entry on each entry, written into the
 * backup's own log first so the references are real pool offsets).
 *
 * Digest, export and read deps are in db_shard.c; db_shard_clear is in db.c
 * (it shares db.c's live-byte accounting). */
#ifndef ROWAN_DB_SHARD_H
#define ROWAN_DB_SHARD_H
#include <stddef.h>
#include <stdint.h>
#include "db.h"

struct shard;

/* A 64-bit hash of everything the shard holds: for every key of every db,
 * the logical db number (SWAPDB's map applied, so two servers that reached
 * the same contents through different swaps agree), the key, its type, its
 * value and its absolute expiry (ms). Independent of insertion order, index
 * layout, log offsets, versions and encodings (listpack/hashtable...): hash
 * fields, set members and zset (member, score) pairs are combined
 * commutatively; list elements in order; zset scores by value (-0 == 0).
 * Keys that have expired but are not deleted yet are included as they are
 * (nothing is deleted). *nkeys (if not NULL) receives the number of keys.
 * Takes the shard lock unless this thread already holds it. */
uint64_t db_shard_digest(struct shard *s, long long *nkeys);

/* The parts of db_shard_digest before they are combined: the sum of the
 * per-key hashes and the key count. Sums of several shards add up to the
 * same value however the keys are spread over shards (DEBUG DIGEST).
 * Takes the shard lock unless this thread already holds it. */
void db_shard_digest_parts(struct shard *s, uint64_t *sum, long long *nkeys);
/* One key's part of db_shard_digest_parts's sum: logical db ldb, its key,
 * expiry and value (a string's bytes p/len, or a collection o). */
struct robj;
uint64_t db_key_digest(unsigned ldb, const char *key, size_t klen, int64_t expire_ms,
                       const char *p, size_t len, const struct robj *o);
/* A hash of one value alone (its type and contents; not its key or
 * expiry), as db_shard_digest hashes it: a string's bytes p/len, or a
 * collection o. For DEBUG DIGEST-VALUE; the caller holds the shard lock. */
struct robj;
uint64_t db_value_digest(int type, const char *p, size_t len, const struct robj *o);

/* Buckets: a shard's keys split by a hash of the key bytes alone (not the
 * db), so that a catch-up can compare two copies bucket by bucket and send
 * only the buckets that differ (delta.h). */
#define DB_SHARD_BUCKETS 256
unsigned db_shard_bucket(const char *key, size_t klen);
/* db_shard_digest of each bucket's keys alone (out[b], count mixed in),
 * and the number of keys of each in counts[b] (counts may be NULL).
 * Takes the shard lock unless this thread already holds it. */
void db_shard_bucket_digests(struct shard *s, uint64_t out[DB_SHARD_BUCKETS],
                             uint64_t counts[DB_SHARD_BUCKETS]);
/* Is the shard's db map the identity (no SWAPDB in effect)? */
int db_shard_dbmap_identity(const struct shard *s);

/* Receives one encoded entry: len bytes, a standalone top-level entry with
 * its CRC (log_entry_check accepts it given len bytes). The bytes are only
 * valid during the call. fn must not touch the shard. */
typedef void (*db_export_fn)(void *arg, const void *entry, size_t len);

/* Emit the shard's current state, caller holding the shard lock: first its
 * LOG_DBMAP when the db map is not the identity, then one entry per key,
 * in index order: LOG_SET for a string (value, expiry), LOG_SNAPSHOT for a
 * collection (the compaction encoding, with the collection's expiry in the
 * header). Each carries flag LOG_F_RESYNC, the shard's id, the key's
 * physical db and version `ver`: a re-sync stamps its whole snapshot with
 * one version no write of the shard has (see log.h, "Re-sync"), so that
 * its end record at the same version can drop everything older. Applying
 * every entry with db_apply_entry, then that end record, gives the same
 * db_shard_digest whatever the shard held before. Expired-but-present keys
 * are exported too. A value (a large string, or a collection snapshot)
 * whose entry does not fit one log segment is exported as chunks and a
 * final entry (bigval.h), all at `ver`; only with a key over
 * BIGVAL_MAX_KEY does it still get its one entry: len is then >
 * LOG_MAX_ENTRY and the caller must notice (no log accepts such an
 * entry). */
void db_shard_export(struct shard *s, uint64_t ver, db_export_fn fn, void *arg);
/* The same for the keys of some buckets only (buckets: a bitmap of
 * DB_SHARD_BUCKETS bits), without the db map: a part of a re-sync whose
 * other keys the receiver provides itself (delta.h). */
void db_shard_export_buckets(struct shard *s, uint64_t ver, const uint8_t *buckets,
                             db_export_fn fn, void *arg);

/* Drop every key of the shard from memory, caller holding the lock: index
 * and volatile index, collection objects, per-db key and expiry counts, the
 * db map (back to the identity), and the live bytes of every entry that
 * was live (so the cleaner may reclaim them). Logs nothing and keeps the
 * shard's versions: after a restart recovery would replay the old entries
 * unless the caller logged something that shadows them. */
void db_shard_clear(struct shard *s);

/* The reply depends on everything the shard holds now (a read of the whole
 * shard, like DBSIZE's): records the shard's last version as a dependency,
 * so the reply leaves only once that is durable. Caller holds the lock. */
void db_shard_read_dep(db_ctx *x, struct shard *s);

#endif
