/* rowan-check-pool -- check a Rowan pool file for damage, and accept the
 * loss with --fix (in the spirit of redis-check-aof).
 *
 *   rowan-check-pool [--fix] [--shards N] <pool-file>
 *
 * The check is recovery's own scan (recovery_check in src/repl/recovery.c), so
 * it finds exactly what would stop a standalone rowan-server from starting:
 * regions of the log that held acknowledged entries and no longer parse.
 * For each it prints the segment, offset and length, the first damaged
 * entry when its header is readable (type, key, shard, version) and the
 * shards that lost entries. Torn tails (writes in flight at a crash, never
 * acknowledged) and losses accepted earlier are listed too; they do not
 * count as damage.
 *
 * --fix asks for confirmation ("Continue? [y/N]", read from stdin, as
 * redis-check-aof does: no answer is no), then gives a truncated file its
 * size back and overwrites each damaged region with a record of the loss
 * (a LOG_LOSS entry spanning it exactly). The pool then parses; the server
 * starts and reports every accepted loss in its log and in INFO
 * (recovery_accepted_losses). Nothing is ever dropped silently.
 *
 * The pool's shard count is not stored in it; --shards must match the
 * server's `shards` setting when that is not the default (64). A mismatch is
 * detected (an entry's key in the wrong shard) and reported.
 *
 * Exit status: 0 when the pool has no damage (or --fix accepted it), 1 when
 * damage was found and not fixed, or on any error. The pool file is locked
 * while checked: a running server keeps it from being checked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "config.h"
#include "log.h"
#include "pool.h"
#include "recovery.h"
#include "server.h"
#include "shard.h"

typedef struct check {
    seg_damage *regions;
    size_t n, cap;
} check;

static void usage(void) {
    fprintf(stderr, "Usage: rowan-check-pool [--fix] [--shards N] <pool-file>\n");
    exit(1);
}

static void on_damage(void *arg, const seg_damage *d) {
    check *c = arg;
    char desc[768], shards[512];
    uint8_t *mark = calloc((size_t)server.nshards, 1);
    int known = seg_damage_shards(d, mark);
    recovery_describe_shards(mark, !known, shards, sizeof(shards));
    free(mark);
    seg_damage_describe(d, desc, sizeof(desc));
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->regions = realloc(c->regions, c->cap * sizeof(*c->regions));
    }
    c->regions[c->n++] = *d;
    printf("Damage %zu: %s\n  lost: acknowledged entries of %s\n", c->n, desc, shards);
}

static void on_dropped(void *arg, uint32_t seg, const seg_scan_report *r) {
    if (r->stale_bytes)
        printf("Stale: segment %u starts with zeroes but holds %llu more bytes (a free that a "
               "crash interrupted): ignored\n", seg, (unsigned long long)r->stale_bytes);
    else
        printf("Torn tail: segment %u offset %u: %llu bytes after the end of its durable log "
               "(a write in flight at a crash, never acknowledged): dropped at the next start\n",
               seg, r->dropped_at, (unsigned long long)r->dropped_bytes);
}

static void on_loss(void *arg, uint64_t off, const log_entry *e) {
    char desc[1024];
    uint8_t *mark = calloc((size_t)server.nshards, 1);
    loss_describe(off, e, mark, desc, sizeof(desc));
    free(mark);
    printf("Accepted loss: %s\n", desc);
}

/* The exit status, once the regions are freed (so that LeakSanitizer stays quiet). */
static int done(check *c, int rc) {
    free(c->regions);
    return rc;
}

/* redis-check-aof's question: anything but an answer starting with y is no. */
static int confirmed(void) {
    char buf[64];
    printf("Continue? [y/N]: ");
    fflush(stdout);
    if (!fgets(buf, sizeof(buf), stdin) || strncasecmp(buf, "y", 1) != 0) {
        printf("Aborting...\n");
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int fix = 0, nshards = 64;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fix")) fix = 1;
        else if (!strcmp(argv[i], "--shards") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 16384) usage();
            nshards = (int)v;
        } else if (argv[i][0] == '-' || path) usage();
        else path = argv[i];
    }
    if (!path) usage();

    char err[2048];
    config_init_defaults();
    server.pool = pool_open(path, 0, POOL_OPEN_EXISTING | POOL_OPEN_SALVAGE, err, sizeof(err));
    if (!server.pool) {
        fprintf(stderr, "Cannot check %s: %s\n", path, err);
        return 1;
    }
    shard_init_all(nshards, 1, server.cfg.databases);
    uint64_t missing = pool_missing_from(server.pool);
    printf("Start checking pool %s: %llu bytes, %u segments, %d shards\n", path,
           (unsigned long long)pool_size(server.pool), pool_nsegs(server.pool), nshards);
    if (missing)
        printf("The file is truncated: %llu of its %llu bytes are there; the rest reads as "
               "zeroes\n", (unsigned long long)missing, (unsigned long long)pool_size(server.pool));

    check c = {0};
    recovery_totals t;
    recovery_hooks h = {on_damage, on_dropped, on_loss, &c};
    if (recovery_check(&h, &t, err, sizeof(err)) != 0) {
        fprintf(stderr, "Cannot check %s: %s (pass that setting with --shards)\n", path, err);
        return done(&c, 1);
    }
    printf("Pool analyzed: %u segments in use, %llu entries, %llu damaged region%s (%llu bytes), "
           "%llu accepted loss%s, %llu bytes of torn tail\n", t.segments,
           (unsigned long long)t.entries, (unsigned long long)t.damaged, t.damaged == 1 ? "" : "s",
           (unsigned long long)t.damaged_bytes, (unsigned long long)t.losses,
           t.losses == 1 ? "" : "es", (unsigned long long)t.dropped_bytes);
    if (!c.n && !missing) {
        printf("Pool %s is valid\n", path);
        return done(&c, 0);
    }
    if (!fix) {
        if (!c.n) {
            printf("Pool %s is valid (no acknowledged entry lies past the cut); the server "
                   "restores its size when it starts\n", path);
            return done(&c, 0);
        }
        printf("Pool %s is damaged. Use the --fix option to accept the loss.\n", path);
        return done(&c, 1);
    }
    if (missing)
        printf("This will restore the size of %s with zeroes.\n", path);
    if (c.n)
        printf("This will accept the loss of %zu damaged region%s (%llu bytes) in %s: the "
               "entries in them are gone for good, and the keys they wrote go back to earlier "
               "values or disappear. Every start of the server reports the accepted loss.\n",
               c.n, c.n == 1 ? "" : "s", (unsigned long long)t.damaged_bytes, path);
    if (!confirmed()) return done(&c, 1);
    if (recovery_fix(c.regions, c.n, mstime(), err, sizeof(err)) != 0) {
        fprintf(stderr, "Fixing %s failed: %s\n", path, err);
        return done(&c, 1);
    }
    pool_close(server.pool);
    printf("Successfully accepted the loss in %s: %zu region%s, %llu bytes\n", path, c.n,
           c.n == 1 ? "" : "s", (unsigned long long)t.damaged_bytes);
    return done(&c, 0);
}
