/* digest.h -- the digest thread: b-log entries -> backup indexes
 * (DESIGN.md §5; Rowan-KV §4.4).
 *
 * The control thread lands replication writes in the b-log and publishes a
 * persisted frontier (blog.c); the digest thread reads behind it, in b-log
 * order, and:
 *   - keeps each shard's entries pending until the primary's CommitVer for
 *     that shard covers them, then applies them in version order (entries of
 *     one shard arrive out of order over several workers' links; versions
 *     need not be dense). So a backup's indexes only ever hold data that is
 *     on every replica.
 *   - applies a catch-up stream (RESYNC begin, state entries, RESYNC end)
 *     as a replacement of the shard's whole contents.
 *   - marks a b-log segment committed once, for every shard, the largest
 *     version it holds (MaxVer) is at most that shard's CommitVer; the
 *     cleaner may then reclaim it.
 * The control thread itself never parses past entry lengths. */
#ifndef ROWAN_DIGEST_H
#define ROWAN_DIGEST_H
#include <stdint.h>

/* Allocate server.digest (before the control thread or replication uses
 * the digest). */
void digest_init(void);
/* Free the state digest_init made (its threads stopped); boot.c's teardown. */
void digest_free(void);
void digest_start(void);
void digest_stop(void);
/* Control thread: the b-log moved on to a fresh segment (in b-log order). */
void digest_segment_started(uint32_t seg);
/* Control thread: everything up to (seg, pos) is persisted. */
void digest_publish(uint32_t seg, uint32_t pos);

/* rpc mode (replication-mode rpc): a backup worker appended entry e at
 * pool offset off of its own backup log; track and apply it by the same
 * rules as b-log entries (thread safe). */
struct log_entry;
void digest_feed(const struct log_entry *e, uint64_t off);

/* Run fn(arg) on the digest thread once it has digested everything the
 * control thread published so far (any thread). */
void digest_run(void (*fn)(void *arg), void *arg);
/* Digest thread only (from a digest_run function): apply every pending
 * effect of shard sid now, CommitVer or not -- for a copy about to be sent
 * to a primary that lacks the shard's history (reconcile.c) -- and return
 * the largest version this copy then reflects or holds. */
uint64_t digest_apply_all(int sid);
/* Digest thread only: the largest version of shard sid this node holds,
 * applied or pending. */
uint64_t digest_max_version(int sid);
/* Digest thread only: the version up to which this copy of shard sid is
 * committed (every version <= it of the current primary is applied here),
 * 0 when unknown (nothing committed since this node started). */
uint64_t digest_committed(int sid);
/* Digest thread only: is a re-sync of shard sid half-way received (its
 * begin marker digested, its end record not yet)? */
int digest_receiving_resync(int sid);
/* Digest thread only: this node was the primary of shard sid and now
 * backs it up: its copy is everything it served, all committed. */
void digest_set_committed(int sid);

typedef struct digest_stats {
    uint64_t published_bytes, digested_bytes; /* lag = published - digested */
    uint64_t applied, dropped, pending, corrupt, resyncs;
    uint64_t segs_committed;   /* b-log segments the digest committed */
    uint64_t diverged;         /* CommitVer regressions seen (re-sync requested) */
    uint64_t stalled_shards;   /* shards whose entries wait too long for CommitVer */
} digest_stats;
void digest_get_stats(digest_stats *out);

#endif
