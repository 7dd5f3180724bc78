/* recovery.h -- rebuild the in-memory state from the pool at startup, and
 * find damage in it (the same scan serves the server and rowan-check-pool).
 *
 * Damage vs torn tail. A torn tail, bytes of a write in flight at a crash,
 * can only be where a log was still being appended to: in an open (USING)
 * segment, after the end its meta entry records as durable (pool.h). Bad
 * bytes anywhere else are damage: before a recorded end, or in a sealed
 * segment with valid entries after them. Damage means acknowledged entries
 * are gone, so the state recovery would build could answer with older values
 * than the ones acknowledged. A standalone server refuses to start on it
 * (like redis-server on a damaged AOF) until rowan-check-pool --fix accepts
 * the loss; a cluster node starts and marks the shards that lost entries
 * (shard.h, `damaged`), so they can be fetched from their other replicas. */
#ifndef ROWAN_RECOVERY_H
#define ROWAN_RECOVERY_H
#include <stddef.h>
#include <stdint.h>

struct log_entry;

/* A damaged region of one segment: bytes that should be log but do not
 * parse. */
typedef struct seg_damage {
    uint32_t seg;
    uint32_t off, len;         /* within the segment; 64-byte aligned */
    uint8_t state;             /* the segment's state (enum seg_state) ... */
    uint32_t end;              /* ... and recorded end, when it was found */
    int follows;               /* valid entries follow it in the segment */
} seg_damage;

/* What a scan of one segment found (shared with the cleaner). */
typedef struct seg_scan_report {
    uint64_t entries;          /* valid top-level entries */
    uint64_t dropped_bytes;    /* torn tail: nonzero bytes after the log's end */
    uint32_t dropped_at;       /* where they begin (segment offset) */
    uint64_t stale_bytes;      /* leftovers of an interrupted free */
    uint64_t corrupt;          /* damaged regions */
    uint64_t corrupt_bytes;
    uint32_t log_end;          /* where the log ends (after its last entry or
                                * damaged region) */
    /* called for each damaged region; NULL: only counted */
    void (*on_damage)(void *arg, const seg_damage *d);
    void *damage_arg;
} seg_scan_report;

/* Visit every valid top-level entry of segment seg in log order and report
 * damage (see above). After damage the scan resynchronises at the next valid
 * 64-byte aligned entry; the log ends where only zeroes (or a torn tail)
 * follow. *rep must start zeroed except for the damage callback. */
typedef void (*seg_entry_fn)(void *arg, uint64_t off, const struct log_entry *e);
void seg_scan(uint32_t seg, seg_entry_fn fn, void *arg, seg_scan_report *rep);

/* The shards whose entries a damaged region held, read from the entry
 * headers in it: sets mark[shard] for each and returns 1 when the headers
 * chain through the whole region and each is consistent (a known type, its
 * key in its shard). Returns 0 when they cannot all be read: then any shard
 * may have lost entries. */
int seg_damage_shards(const seg_damage *d, uint8_t *mark);
/* Describe the region (where, how big, why) and its first entry when its
 * header is readable, in one line. */
void seg_damage_describe(const seg_damage *d, char *buf, size_t len);
/* "shards 3, 17-19 (slots 768-1023, 4352-5119)", or every shard when all. */
void recovery_describe_shards(const uint8_t *mark, int all, char *buf, size_t len);

/* An accepted loss (a LOG_LOSS entry, written by rowan-check-pool --fix). */
typedef struct loss_info {
    uint32_t bytes;            /* the damaged bytes it stands for */
    int64_t accepted_ms;       /* when the loss was accepted (unix ms) */
    int all_shards;            /* the shards could not be told */
    uint32_t nshards;
    const uint8_t *shards;     /* nshards little-endian u16 shard ids */
    char text[512];            /* the damage as it was described */
} loss_info;
/* Decode a LOG_LOSS entry; 0 ok, -1 if its payload is malformed. */
int loss_decode(const struct log_entry *e, loss_info *out);
/* Describe the accepted loss at pool offset off in one line and mark the
 * shards it names in mark; returns 1 when it names every shard. */
int loss_describe(uint64_t off, const struct log_entry *e, uint8_t *mark, char *buf, size_t len);
/* Accept the loss of a damaged region: overwrite it with a LOG_LOSS entry
 * spanning it exactly (durable on return), recording its description and
 * shards. 0 ok, -1 with err filled. */
int recovery_accept_loss(const seg_damage *d, int64_t now_ms, char *err, size_t errlen);

/* rowan-check-pool --fix: give a truncated pool its size back, then accept
 * the loss of each region (found by recovery_check). 0 ok, -1 with err. */
int recovery_fix(const seg_damage *regions, size_t n, int64_t now_ms, char *err, size_t errlen);

/* What a check of the whole pool reports (rowan-check-pool). */
typedef struct recovery_hooks {
    void (*damage)(void *arg, const seg_damage *d);
    /* a torn tail or stale bytes recovery will drop (r holds the segment's
     * findings) */
    void (*dropped)(void *arg, uint32_t seg, const seg_scan_report *r);
    /* an accepted loss found in the log */
    void (*loss)(void *arg, uint64_t off, const struct log_entry *e);
    void *arg;
} recovery_hooks;
typedef struct recovery_totals {
    uint32_t segments;         /* non-free segments scanned */
    uint64_t entries, damaged, damaged_bytes, dropped_bytes;
    uint64_t losses, loss_bytes;
} recovery_totals;
/* Scan every non-free segment the way recovery does, changing nothing.
 * 0, or -1 with err filled when the pool does not match the configuration
 * (shards). */
int recovery_check(const recovery_hooks *h, recovery_totals *t, char *err, size_t errlen);

/* Scan every non-free segment, replay entries in pool order (each key's
 * versions and each shard's barriers in version order, recovery.c),
 * rebuild indexes, live bytes and shard versions, publishing its progress
 * in server.loading_*. 0 ok; -1 with err filled when the pool does not
 * match this configuration, or is damaged and the server is standalone
 * (nothing in the pool is changed then); 1 when a shutdown request stopped
 * it (the data set is incomplete and must not be served). */
int recovery_run(char *err, size_t errlen);

/* The effects recovery_run would apply (copies and cut-short re-syncs left
 * out), in the order it would apply them but shard by shard, handed to fn
 * instead: nothing is changed. The order is pool order (each key's
 * versions and each shard's barriers in version order, others in between),
 * so a large value's runs come as recovery sees them (bigval_pool_order).
 * The caller keeps the log still meanwhile (every shard lock and the
 * cleaner held: verify.c). 0, or -1 with err (damage, a pool of another
 * shard count). */
typedef void (*recovery_effect_fn)(void *arg, int shard, uint64_t ref, const struct log_entry *e);
int recovery_replay_visit(recovery_effect_fn fn, void *arg, char *err, size_t errlen);

#endif
