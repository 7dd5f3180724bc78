/* stats.h -- what a worker thread measures, merged at the end.
 *
 * Each worker owns one struct stats and updates it without locks; the main
 * thread merges them after the workers have joined. Latency histograms hold
 * successful operations only (YCSB reports failures apart too); failed
 * operations are counted per type and per error kind. Command counts are the
 * commands that got a non-error reply, per command name: these are what the
 * servers' INFO commandstats counts, so the two can be compared. */
#ifndef ROWAN_BENCH_STATS_H
#define ROWAN_BENCH_STATS_H
#include <stddef.h>
#include <stdint.h>
#include "hist.h"
#include "workload.h"

enum cmd {
    CMD_GET, CMD_SET, CMD_HGETALL, CMD_HMGET, CMD_HMSET, CMD_ZADD, CMD_ZRANGEBYSCORE,
    CMD_WAIT, CMD_NCMDS
};
extern const char *const cmd_names[CMD_NCMDS];

#define ERRKIND_MAX 32
#define ERRKIND_LEN 24

struct errkind {
    char kind[ERRKIND_LEN];
    uint64_t n;
};

struct stats {
    struct hist lat[OP_NTYPES];
    uint64_t ok[OP_NTYPES], failed[OP_NTYPES];
    uint64_t cmds[CMD_NCMDS];
    uint64_t moved, ask;
    uint64_t missed;            /* open loop: intended sends never made */
    struct hist send_lag;       /* open loop: actual minus intended send */
    int nkinds;
    struct errkind kinds[ERRKIND_MAX];
};

void stats_init(struct stats *s);
void stats_merge(struct stats *dst, const struct stats *src);
/* Count one error of a kind: the first word of an error reply ("ERR",
 * "WRONGTYPE", ...) or one of the driver's own ("NOT_FOUND", "CONNECTION",
 * "TIMEOUT", ...). Kinds beyond ERRKIND_MAX are counted as "OTHER". */
void stats_error(struct stats *s, const char *kind, size_t len);
uint64_t stats_total_ops(const struct stats *s);

#endif
