/* delta.c -- incremental catch-up (see delta.h for the protocol and why it
 * is safe).
 *
 * Wire formats, little endian:
 *   question  u64 asker's term | u16 count | u16 shard ...
 *   answer    per shard asked: u16 shard | u8 usable | u64 maxver |
 *             u64 digest[DB_SHARD_BUCKETS]
 *             usable is DELTA_NO, DELTA_YES or DELTA_LATER: this node has
 *             not adopted the asker's term yet (it will be a backup of the
 *             shard there, but is not one here), so the asker asks again
 *   payload of a begin marker (LOG_RESYNC) that keeps buckets:
 *             u32 DELTA_MAGIC | u16 DB_SHARD_BUCKETS | u8 kept[BUCKETS/8] |
 *             u64 digest of each kept bucket, in bucket order */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "blog.h"
#include "bus.h"
#include "cluster.h"
#include "db_shard.h"
#include "delta.h"
#include "digest.h"
#include "le.h"
#include "log.h"
#include "server.h"
#include "shard.h"

#define DELTA_MAGIC 0x4c445752u   /* "RWDL" */
#define DELTA_ANSWER (2 + 1 + 8 + 8 * DB_SHARD_BUCKETS)
#define DELTA_MAP (DB_SHARD_BUCKETS / 8)
#define DELTA_HDR (4 + 2 + DELTA_MAP)
/* Shards per question: keeps an answer (~2 KB a shard) far below
 * BUS_MAX_PAYLOAD whatever `shards` is. */
#define DELTA_BATCH 256
/* The answer costs the peer a walk of its copy of the shards asked
 * (DELTA_BATCH of them); a peer slower than this gets whole shards. */
#define DELTA_TIMEOUT_MS 3000
/* How long the asker waits for a replica to adopt its term (DELTA_LATER):
 * under load a replica adopts a new configuration tens of ms after the CM
 * commits it, and the primary's catch-up starts at once. */
#define DELTA_LATER_MS 1000
#define DELTA_Q_HDR (8 + 2)

enum { DELTA_NO = 0, DELTA_YES = 1, DELTA_LATER = 2 };

static int bit(const uint8_t *map, unsigned b) { return (map[b / 8] >> (b % 8)) & 1; }

/* ---------------- answering (replica, digest thread) ---------------- */

typedef struct delta_job {
    bus_req *req;
    uint64_t term;                  /* the asker's */
    int n;
    uint16_t ids[];
} delta_job;

/* Can this node's copy of sid be the base of a delta? (see delta.h) */
static int copy_usable(int sid) {
    shard *s = &server.shards[sid];
    return (cluster_is_backup(sid) || atomic_load(&s->fetching)) &&
           server.cfg.replication_mode == REPL_MODE_ROWAN &&
           !digest_receiving_resync(sid) && db_shard_dbmap_identity(s);
}

static void answer_run(void *arg) {
    delta_job *j = arg;
    uint8_t *out = calloc((size_t)(j->n ? j->n : 1), DELTA_ANSWER), *p = out;
    for (int i = 0; i < j->n; i++, p += DELTA_ANSWER) {
        int sid = j->ids[i];
        shard *s = &server.shards[sid];
        uint64_t dg[DB_SHARD_BUCKETS];
        le_put_u16(p, (uint16_t)sid);
        shard_lock(s);
        int usable = copy_usable(sid);
        if (usable) db_shard_bucket_digests(s, dg, NULL);
        shard_unlock(s);
        p[2] = usable ? DELTA_YES : cluster_term() < j->term ? DELTA_LATER : DELTA_NO;
        le_put_u64(p + 3, digest_max_version(sid));
        if (usable)
            for (int b = 0; b < DB_SHARD_BUCKETS; b++) le_put_u64(p + 11 + 8 * b, dg[b]);
    }
    bus_reply(j->req, out, (size_t)j->n * DELTA_ANSWER);
    free(out);
    free(j);
}

static void on_deltainfo(bus_req *r, int node, const uint8_t *p, size_t n) {
    (void)node;
    if (n < DELTA_Q_HDR || n != DELTA_Q_HDR + 2 * (size_t)le_get_u16(p + 8) ||
        le_get_u16(p + 8) > DELTA_BATCH) {
        bus_reply_error(r, "malformed delta info request");
        return;
    }
    int cnt = le_get_u16(p + 8);
    delta_job *j = malloc(sizeof(*j) + sizeof(uint16_t) * (size_t)(cnt ? cnt : 1));
    j->req = r;
    j->term = le_get_u64(p);
    j->n = 0;
    for (int i = 0; i < cnt; i++) {
        uint16_t sid = le_get_u16(p + DELTA_Q_HDR + 2 * i);
        if (sid < server.nshards) j->ids[j->n++] = sid;
    }
    digest_run(answer_run, j);
}

void delta_init(void) { bus_register(BUS_DELTAINFO, on_deltainfo); }

/* ---------------- asking (primary) ---------------- */

/* One question; 1 if the node has yet to adopt our term for some shard. */
static int ask_once(int node, const int *sids, int n, delta_base *out, int *later) {
    uint8_t q[DELTA_Q_HDR + 2 * DELTA_BATCH];
    le_put_u64(q, cluster_term());
    le_put_u16(q + 8, (uint16_t)n);
    for (int i = 0; i < n; i++) le_put_u16(q + DELTA_Q_HDR + 2 * i, (uint16_t)sids[i]);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    *later = 0;
    /* A node that just restarted: our bus connection to its previous
     * process fails the first call, the next one connects afresh. */
    int st = BUS_FAILED;
    for (int attempt = 0; attempt < 3 && st == BUS_FAILED; attempt++) {
        if (attempt) usleep(20000);
        int64_t t0 = monotonic_us();
        st = bus_call_sync(node, BUS_DELTAINFO, q, DELTA_Q_HDR + 2 * (size_t)n, DELTA_TIMEOUT_MS,
                           &resp, &rlen);
        /* a quick failure is the stale connection; a slow one, a node
         * that does not answer: not worth waiting for again (the catch-up
         * sends whole shards instead) */
        if (st == BUS_FAILED && monotonic_us() - t0 > 200000) break;
    }
    int rc = -1;
    if (st == BUS_OK && rlen == (size_t)n * DELTA_ANSWER) {
        rc = 0;
        for (int i = 0; i < n; i++) {
            const uint8_t *p = resp + (size_t)i * DELTA_ANSWER;
            if (le_get_u16(p) != sids[i]) rc = -1;
            out[i].usable = p[2] == DELTA_YES;
            *later |= p[2] == DELTA_LATER;
            out[i].maxver = le_get_u64(p + 3);
            for (int b = 0; b < DB_SHARD_BUCKETS; b++) out[i].digests[b] = le_get_u64(p + 11 + 8 * b);
        }
    }
    if (rc != 0)
        serverLog(LL_VERBOSE, "Delta: node %d did not describe its copies (bus status %d, %zu bytes); "
                  "whole shards then", node, st, rlen);
    free(resp);
    return rc;
}

static int ask_batch(int node, const int *sids, int n, delta_base *out) {
    int64_t until = monotonic_us() + DELTA_LATER_MS * 1000LL;
    int later;
    for (;;) {
        if (ask_once(node, sids, n, out, &later) != 0) return -1;
        if (!later || monotonic_us() >= until) return 0;
        usleep(10000);
    }
}

int delta_ask(int node, const int *sids, int n, delta_base *out) {
    for (int i = 0; i < n; i += DELTA_BATCH) {
        int k = n - i < DELTA_BATCH ? n - i : DELTA_BATCH;
        if (ask_batch(node, sids + i, k, out + i) != 0) return -1;
    }
    return 0;
}

/* ---------------- planning (primary, shard lock held) ---------------- */

int delta_plan(shard *s, const delta_base *b, uint8_t **payload, size_t *len, uint8_t *send) {
    memset(send, 0xff, DELTA_MAP);
    *payload = NULL;
    *len = 0;
    /* A shard holding FUNCTION libraries (LOG_FUNCS) is sent whole: the
     * bucket digests cover keys only, a delta would miss the libraries. */
    if (!b->usable || !db_shard_dbmap_identity(s) || s->funcs_ref) return 0;
    uint64_t mine[DB_SHARD_BUCKETS], count[DB_SHARD_BUCKETS];
    db_shard_bucket_digests(s, mine, count);
    int kept = 0;
    /* An empty bucket is never "kept": there is nothing to keep, and an
     * empty copy must not count as a partial catch-up. */
    for (int i = 0; i < DB_SHARD_BUCKETS; i++)
        if (count[i] && mine[i] == b->digests[i]) {
            send[i / 8] &= (uint8_t)~(1u << (i % 8));
            kept++;
        }
    if (!kept) return 0;
    uint8_t *p = malloc(DELTA_HDR + 8 * (size_t)kept);
    le_put_u32(p, DELTA_MAGIC);
    le_put_u16(p + 4, DB_SHARD_BUCKETS);
    for (int i = 0; i < DELTA_MAP; i++) p[6 + i] = (uint8_t)~send[i];
    uint8_t *d = p + DELTA_HDR;
    for (int i = 0; i < DB_SHARD_BUCKETS; i++)
        if (!bit(send, (unsigned)i)) {
            le_put_u64(d, mine[i]);
            d += 8;
        }
    *payload = p;
    *len = DELTA_HDR + 8 * (size_t)kept;
    return kept;
}

/* ---------------- landing the kept buckets (replica, control thread) ---------------- */

typedef struct land_ctx {
    int failed;
    uint8_t *pad;
    size_t cap;
} land_ctx;

static void land_fn(void *arg, const void *entry, size_t len) {
    land_ctx *c = arg;
    if (c->failed) return;
    if (len > LOG_MAX_ENTRY) {
        c->failed = 1;
        return;
    }
    size_t span = log_entry_span(len);
    if (span > c->cap) {
        c->cap = span * 2;
        c->pad = realloc(c->pad, c->cap);
    }
    memcpy(c->pad, entry, len);
    memset(c->pad + len, 0, span - len);
    if (!blog_land(c->pad, span)) c->failed = 2;
}

int delta_land_kept(const log_entry *e, char *why, size_t whylen) {
    if (e->type != LOG_RESYNC || e->vlen == 0) return 0;
    const uint8_t *v = (const uint8_t *)e->val;
    if (e->shard >= server.nshards || e->vlen < DELTA_HDR || le_get_u32(v) != DELTA_MAGIC ||
        le_get_u16(v + 4) != DB_SHARD_BUCKETS) {
        snprintf(why, whylen, "malformed catch-up marker for shard %u", e->shard);
        return -1;
    }
    const uint8_t *kept = v + 6;
    int nkept = 0;
    for (unsigned b = 0; b < DB_SHARD_BUCKETS; b++) nkept += bit(kept, b);
    if (e->vlen != DELTA_HDR + 8 * (size_t)nkept) {
        snprintf(why, whylen, "malformed catch-up marker for shard %u", e->shard);
        return -1;
    }
    shard *s = &server.shards[e->shard];
    shard_lock(s);
    uint64_t have[DB_SHARD_BUCKETS];
    db_shard_bucket_digests(s, have, NULL);
    const uint8_t *d = v + DELTA_HDR;
    int same = db_shard_dbmap_identity(s);
    for (unsigned b = 0; b < DB_SHARD_BUCKETS && same; b++)
        if (bit(kept, b)) {
            same = have[b] == le_get_u64(d);
            d += 8;
        }
    land_ctx c = {0, NULL, 0};
    if (same) db_shard_export_buckets(s, e->ver, kept, land_fn, &c);
    shard_unlock(s);
    free(c.pad);
    if (!same) {
        snprintf(why, whylen, "this copy of shard %u changed since its primary compared it; "
                 "refusing the partial catch-up (the next one sends the whole shard)", e->shard);
        return -1;
    }
    if (c.failed == 2) {
        snprintf(why, whylen, "the pool is full: the b-log cannot take a catch-up");
        return -1;
    }
    if (c.failed) {
        snprintf(why, whylen, "a key of shard %u is too large to re-log; the next catch-up "
                 "sends the whole shard", e->shard);
        return -1;
    }
    return 0;
}
