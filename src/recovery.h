/* recovery.h -- rebuild the in-memory state from the pool at startup. */
#ifndef ROWAN_RECOVERY_H
#define ROWAN_RECOVERY_H
#include <stddef.h>
#include <stdint.h>

/* Where a scan of one segment stopped and why (shared with the cleaner). */
typedef struct seg_scan_report {
    uint64_t entries;          /* valid top-level entries */
    uint64_t dropped_bytes;    /* torn tail: nonzero bytes after the last entry */
    uint64_t corrupt;          /* damaged regions skipped before a valid entry */
} seg_scan_report;

struct log_entry;
/* Visit every valid top-level entry of segment seg in log order. Damage is
 * skipped (and counted) by resynchronising at the next valid 64-byte aligned
 * entry; the end of the log is where only zeroes follow. */
typedef void (*seg_entry_fn)(void *arg, uint64_t off, const struct log_entry *e);
void seg_scan(uint32_t seg, seg_entry_fn fn, void *arg, seg_scan_report *rep);

/* Scan every non-free segment, replay entries per shard in version order,
 * rebuild indexes, live bytes and shard versions, publishing its progress
 * in server.loading_*. 0 ok, -1 with err filled (the pool does not match
 * this configuration), 1 when a shutdown request stopped it (the data set
 * is incomplete and must not be served). */
int recovery_run(char *err, size_t errlen);

#endif
