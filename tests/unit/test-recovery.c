/* test-recovery.c -- unit tests of recovery (src/repl/recovery.c).
 *
 * Each case builds a fresh pool and fresh globals the way main.c does
 * (config defaults, pool, shards, indexes), writes log entries directly with
 * log writers -- choosing shard ids and versions itself, so it can put log
 * order against version order, damage bytes, or lie about the shard -- then
 * runs recovery_run() and inspects the rebuilt keyspace with db_peek and
 * db_size, the shards' versions and the pool's segment states.
 *
 * Cases:
 *   1. version order across writers (and inside one segment), next_ver and
 *      durable_ver, and a second recovery of the same pool;
 *   2. DEL vs SET by version;
 *   3. LOG_GROUP across shards: all applied; damaged (mid-log and as the
 *      last entry): refused, and once the loss is accepted none applied;
 *      well-formed CRC but malformed sub-entries: none;
 *   4. FLUSHDB of one physical db in one shard, and FLUSHALL as a group;
 *   5. torn tail: garbage / a half-written entry after the durable end of an
 *      open segment is dropped; stray bytes after a sealed segment's end too;
 *   6. damage at several places of an entry (mid-log, the last entry of an
 *      open or a sealed segment, zeroed entries): a standalone recovery
 *      refuses, naming it, and changes nothing; rowan-check-pool's scan
 *      finds the same regions; once their loss is accepted (LOG_LOSS) the
 *      start reports it and a damaged newer version falls back to the
 *      older valid one;
 *   7. USING / USED segments are COMMITTED afterwards with their log's end,
 *      free ones stay free;
 *   8. an entry in the wrong shard stops recovery with an error;
 *   9. LOG_DBMAP (SWAPDB) by version;
 *  10. bad bytes after an open segment's durable end with valid entries
 *      after them: in flight at the crash, dropped with everything after;
 *  11. a truncated pool: refused, salvaged by accepting the loss of the
 *      segments the cut reached; intact segments survive;
 *  12. (cluster mode, last: it cannot be undone) damage starts anyway and
 *      marks exactly the shards that lost entries, or all when unreadable.
 *
 * Everything runs twice: on /tmp (block storage: entries staged and
 * pwrite'n) and, in a forked child, on /dev/shm with PMEM_IS_PMEM_FORCE=1
 * (entries encoded in the pool itself). libpmem decides pmem-ness once per
 * process, so the child sets the variable before touching libpmem. */
#include "bigval.h"
#include "cluster.h"
#include "config.h"
#include "db.h"
#include "hash.h"
#include "index.h"
#include "log.h"
#include "pool.h"
#include "recovery.h"
#include "server.h"
#include "shard.h"
#include "unit.h"
#include "verify.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSHARDS   8
#define NWORKERS  2
#define NDBS      16
#define POOL_SEGS 10 /* 1 header segment + 9 data segments */

static const char *tmp_parent = "/tmp";
static const char *mode_name = "block storage";
static int mode_pmem;

static char pool_path[256];
static char log_path[256];
static db_ctx ctx;
static uint64_t vers[NSHARDS]; /* per-shard version allocator of a case */
static char rec_err[512];

/* ---------------- globals: setup / teardown ---------------- */

static void make_temp(char *out, size_t n, const char *what) {
    snprintf(out, n, "%s/rowan-test-recovery-%s-XXXXXX", tmp_parent, what);
    int fd = mkstemp(out);
    if (fd < 0) {
        fprintf(stderr, "mkstemp %s: %s\n", out, strerror(errno));
        exit(2);
    }
    close(fd);
}

/* Shards, indexes and the pool on pool_path (which must exist or not). */
static void globals_init(void) {
    char err[512];
    config_init_defaults();
    server.cfg.databases = NDBS;
    server.cfg.shards = NSHARDS;
    server.cfg.workers = NWORKERS;
    free(server.cfg.logfile);
    server.cfg.logfile = strdup(log_path);
    server.pool = pool_open(pool_path, (uint64_t)POOL_SEGS * POOL_SEG_SIZE, POOL_OPEN_SALVAGE,
                            err, sizeof err);
    if (!server.pool) {
        fprintf(stderr, "pool_open %s: %s\n", pool_path, err);
        exit(2);
    }
    CHECK_EQ_LL(pool_is_pmem(server.pool), mode_pmem);
    server.nworkers = NWORKERS;
    shard_init_all(NSHARDS, NWORKERS, NDBS);
    db_init_indexes();
    /* Poison the counters: recovery must set every one of them. */
    atomic_store(&server.stat.recovered_entries, -1);
    atomic_store(&server.stat.recovery_dropped_bytes, -1);
    atomic_store(&server.stat.recovery_corrupt_entries, -1);
    atomic_store(&server.stat.recovery_accepted_losses, -1);
    db_ctx_init(&ctx, NULL, 0);
    rec_err[0] = 0;
}

static void globals_free(void) {
    db_ctx_free(&ctx);
    db_free_all(); /* indexes, the objects they hold, pending chunks */
    for (int i = 0; i < server.nshards; i++) {
        shard *s = &server.shards[i];
        free(s->pend);
        pthread_mutex_destroy(&s->lock);
    }
    free(server.shards);
    server.shards = NULL;
    server.nshards = 0;
    pool_close(server.pool);
    server.pool = NULL;
}

/* A fresh pool (the mkstemp name, removed so pool_open creates it) and a
 * fresh, empty log file. */
static void setup(void) {
    make_temp(pool_path, sizeof pool_path, "pool");
    unlink(pool_path);
    make_temp(log_path, sizeof log_path, "log");
    memset(vers, 0, sizeof vers);
    globals_init();
}

static void teardown(void) {
    globals_free();
    unlink(pool_path);
    unlink(log_path);
}

/* Restart: drop every in-memory structure and recover the same pool again. */
static void reopen(void) {
    globals_free();
    globals_init();
}

static int run_recovery(void) { return recovery_run(rec_err, sizeof rec_err); }

/* ---------------- keys, versions, lookups ---------------- */

static int sid_of(const char *key) { return shard_of_key(key, strlen(key))->id; }
static shard *shard_n(int sid) { return &server.shards[sid]; }
static uint64_t next_ver_of(int sid) { return shard_n(sid)->next_ver; }
static uint64_t durable_of(int sid) { return atomic_load(&shard_n(sid)->durable_ver); }

/* The n-th (0-based) key "<prefix><i>" that maps to shard sid, into buf. */
static const char *key_in(char *buf, size_t cap, const char *prefix, int sid, int n) {
    for (int i = 0;; i++) {
        snprintf(buf, cap, "%s%d", prefix, i);
        if (sid_of(buf) == sid && n-- == 0) return buf;
    }
}

/* Next version of key's shard in this case. */
static uint64_t nv(const char *key) { return ++vers[sid_of(key)]; }

/* Look key up in logical db: 1 and value (NUL-terminated) / version when it
 * exists, 0 otherwise. */
static int get(int db, const char *key, char *val, size_t cap, uint64_t *ver) {
    shard *s = shard_of_key(key, strlen(key));
    db_val v;
    shard_lock(s);
    int found = db_peek(&ctx, db, key, strlen(key), &v);
    if (found) {
        size_t n = v.len < cap - 1 ? v.len : cap - 1;
        memcpy(val, v.ptr, n);
        val[n] = 0;
        if (ver) *ver = v.ver;
    }
    shard_unlock(s);
    return found;
}

static int has(int db, const char *key) {
    char tmp[8];
    return get(db, key, tmp, sizeof tmp, NULL);
}

/* Does key hold exactly val (at version ver, when ver != 0)? */
static int holds(int db, const char *key, const char *val, uint64_t ver) {
    char buf[1024];
    uint64_t v = 0;
    if (!get(db, key, buf, sizeof buf, &v)) return 0;
    return strcmp(buf, val) == 0 && (ver == 0 || v == ver);
}

static long long stat_dropped(void) { return atomic_load(&server.stat.recovery_dropped_bytes); }
static long long stat_corrupt(void) { return atomic_load(&server.stat.recovery_corrupt_entries); }
static long long stat_entries(void) { return atomic_load(&server.stat.recovered_entries); }

/* Does the server log of this case contain needle? */
static int log_has(const char *needle) {
    FILE *fp = fopen(log_path, "r");
    if (!fp) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* ---------------- damage: refusal, check, accepted loss ---------------- */

#define MAX_FOUND 16
typedef struct damage_list {
    seg_damage d[MAX_FOUND];
    int n;
} damage_list;

static void on_found(void *arg, const seg_damage *d) {
    damage_list *f = arg;
    if (f->n < MAX_FOUND) f->d[f->n++] = *d;
}

/* rowan-check-pool's scan: the damaged regions, changing nothing. */
static void check_pool(damage_list *f, recovery_totals *t) {
    recovery_hooks h = {.damage = on_found, .arg = f};
    char err[256];
    f->n = 0;
    CHECK_EQ_LL(recovery_check(&h, t, err, sizeof err), 0);
}

static int pool_same_as(const uint8_t *copy) {
    return memcmp(copy, pool_base(server.pool), pool_size(server.pool)) == 0;
}

static uint8_t *pool_copy(void) {
    uint8_t *c = malloc(pool_size(server.pool));
    memcpy(c, pool_base(server.pool), pool_size(server.pool));
    return c;
}

/* A standalone start on a damaged pool: refused with a message that names
 * the damage and the tool, nothing replayed, not a byte of the pool changed. */
static void expect_refusal(void) {
    uint8_t *before = pool_copy();
    CHECK_EQ_LL(run_recovery(), -1);
    CHECK(strstr(rec_err, "damaged") != NULL);
    CHECK(strstr(rec_err, "rowan-check-pool --fix") != NULL);
    CHECK(log_has("CORRUPTION"));
    CHECK_EQ_LL(db_size(0), 0);
    CHECK(pool_same_as(before));
    free(before);
}

/* rowan-check-pool --fix: the scan finds `regions` regions; accepting them
 * makes the next start succeed and report them. */
static void accept_and_restart(int regions) {
    damage_list f;
    recovery_totals t;
    check_pool(&f, &t);
    CHECK_EQ_LL(f.n, regions);
    CHECK_EQ_LL(t.damaged, regions);
    char err[256];
    CHECK_EQ_LL(recovery_fix(f.d, (size_t)f.n, 1700000000000LL, err, sizeof err), 0);
    check_pool(&f, &t);
    CHECK_EQ_LL(f.n, 0);
    CHECK_EQ_LL(t.losses, regions);
    reopen();
    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(atomic_load(&server.stat.recovery_accepted_losses), regions);
    CHECK(atomic_load(&server.stat.recovery_accepted_loss_bytes) >= 64 * regions);
    CHECK(log_has("accepted loss"));
    CHECK(log_has("rowan-check-pool --fix"));
}

/* ---------------- entries and writers ---------------- */

static log_entry mk_set(int db, const char *key, const char *val, uint64_t ver) {
    log_entry e = {.type = LOG_SET, .shard = (uint16_t)sid_of(key), .db = (uint16_t)db,
                   .ver = ver, .key = key, .klen = (uint32_t)strlen(key),
                   .val = val, .vlen = (uint32_t)strlen(val)};
    return e;
}

static log_entry mk_del(int db, const char *key, uint64_t ver) {
    log_entry e = {.type = LOG_DEL, .shard = (uint16_t)sid_of(key), .db = (uint16_t)db,
                   .ver = ver, .key = key, .klen = (uint32_t)strlen(key), .val = "",
                   .aux = pool_seq_now(server.pool)};
    return e;
}

static log_entry mk_flush(int sid, int pdb, uint64_t ver) {
    log_entry e = {.type = LOG_FLUSHDB, .shard = (uint16_t)sid, .db = (uint16_t)pdb,
                   .ver = ver, .key = "", .val = "", .aux = pool_seq_now(server.pool)};
    return e;
}

/* Append e the way db.c does (reserve, encode at log_writer_dst, wrote);
 * returns its pool offset. */
static uint64_t append(log_writer *w, const log_entry *e) {
    size_t len = log_entry_len(e->klen, e->vlen);
    uint64_t off = log_writer_reserve(w, len, 0);
    CHECK(off != 0);
    if (!off) return 0;
    log_entry_encode(log_writer_dst(w, off, len), e, 1);
    log_writer_wrote(w, off, len);
    return off;
}

/* Make everything durable. Segments stay USING, as a crash leaves a
 * writer's head segment. */
static void wdone(log_writer *w) {
    log_writer_sync(w);
    log_writer_free(w);
}

/* Overwrite pool bytes (the "crash" damage). */
static void poke(uint64_t off, const void *buf, size_t len) {
    pool_write(server.pool, pool_ptr(server.pool, off), buf, len);
    pool_persist(server.pool, pool_ptr(server.pool, off), len);
}

static void flip(uint64_t off) {
    uint8_t b = *(uint8_t *)pool_ptr(server.pool, off) ^ 0x40;
    poke(off, &b, 1);
}

/* A value of n printable bytes, never zero. */
static char *mk_val(char *buf, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) buf[i] = (char)('a' + (i * 7 + (size_t)seed) % 26);
    buf[n] = 0;
    return buf;
}

/* Group payload: sub-entries (crc 0) at 8-byte aligned offsets. */
typedef struct group {
    uint8_t buf[4096];
    size_t len;
    int n;
} group;

static void g_add(group *g, const log_entry *sub) {
    size_t start = (g->len + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1);
    memset(g->buf + g->len, 0, start - g->len);
    g->len = start + log_entry_encode(g->buf + start, sub, 0);
    g->n++;
}

static log_entry mk_group(const group *g, uint64_t nsubs) {
    log_entry e = {.type = LOG_GROUP, .shard = LOG_SHARD_NONE, .ver = 0, .key = "",
                   .val = (const char *)g->buf, .vlen = (uint32_t)g->len, .aux = nsubs};
    return e;
}

/* ================= 1. version order ================= */

static void test_version_order(void) {
    setup();
    char k2[32];
    const char *k = "k";
    int sid = sid_of(k);
    key_in(k2, sizeof k2, "k2-", (sid + 1) % NSHARDS, 0);
    int sid2 = sid_of(k2);
    log_writer w0, w1;
    log_writer_init(&w0, server.pool, OWNER_WORKER, 0);
    log_writer_init(&w1, server.pool, OWNER_WORKER, 1);
    /* Worker 0 writes the newer version first, worker 1 the older one in
     * its own segment, which scan order visits later. */
    log_entry e = mk_set(0, k, "v1", 2);
    uint64_t off_new = append(&w0, &e);
    e = mk_set(0, k, "v0", 1);
    uint64_t off_old = append(&w1, &e);
    CHECK(pool_seg_of(server.pool, off_new) < pool_seg_of(server.pool, off_old));
    /* Inside one segment too: version 5 before version 4. */
    e = mk_set(0, k2, "new", 5);
    uint64_t a = append(&w0, &e);
    e = mk_set(0, k2, "old", 4);
    uint64_t b = append(&w0, &e);
    CHECK(a < b && pool_seg_of(server.pool, a) == pool_seg_of(server.pool, b));
    wdone(&w0);
    wdone(&w1);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(holds(0, k, "v1", 2));
    CHECK(holds(0, k2, "new", 5));
    CHECK_EQ_LL(next_ver_of(sid), 3);
    CHECK_EQ_LL(durable_of(sid), 2);
    CHECK_EQ_LL(next_ver_of(sid2), 6);
    CHECK_EQ_LL(durable_of(sid2), 5);
    int others = 0;
    for (int i = 0; i < NSHARDS; i++) {
        if (i == sid || i == sid2) continue;
        others += next_ver_of(i) == 1 && durable_of(i) == 0;
    }
    CHECK_EQ_LL(others, NSHARDS - 2);
    CHECK_EQ_LL(db_size(0), 2);
    CHECK_EQ_LL(db_size(1), 0);
    CHECK_EQ_LL(stat_entries(), 4);
    CHECK_EQ_LL(stat_dropped(), 0);
    CHECK_EQ_LL(stat_corrupt(), 0);
    /* Live bytes: only the newest entry of each key counts. */
    CHECK_EQ_LL(pool_live_get(server.pool, pool_seg_of(server.pool, off_new)),
                log_entry_len(1, 2) + log_entry_len(strlen(k2), 3));
    CHECK_EQ_LL(pool_live_get(server.pool, pool_seg_of(server.pool, off_old)), 0);

    /* A second start over the same pool rebuilds the same state. */
    reopen();
    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(holds(0, k, "v1", 2));
    CHECK(holds(0, k2, "new", 5));
    CHECK_EQ_LL(next_ver_of(sid), 3);
    CHECK_EQ_LL(durable_of(sid), 2);
    CHECK_EQ_LL(stat_entries(), 4);
    teardown();
}

/* Replay follows the pool, not the versions (order_replay): random SETs,
 * DELs and FLUSHDBs of a few shards, and large values (bigval.h: runs of
 * LOG_CHUNK then a final LOG_SET flagged LOG_F_CHUNKED, here with pieces of
 * a few bytes), some of them cut short before their final entry, each
 * entry written by one of two writers in an order unrelated to its version
 * -- so runs of several keys of a shard interleave, and a run's pieces and
 * its final entry land anywhere -- some of them twice (the cleaner's copy
 * of an entry a crash left beside its original), must recover exactly the
 * state of applying them in version order, report the pieces no final
 * entry claims, and DEBUG RELOAD's replay (verify_log, the same order)
 * must agree with what recovery built. */
enum { RO_KEYS = 24, RO_OPS = 600, RO_PIECE = 5, RO_MAXPIECES = 4096, RO_WINDOW = 80 };
enum { RO_BIG = 100, RO_CUT }; /* op kinds besides the LOG_* ones */
typedef struct ro_op { int kind, key, db, n, cut; uint64_t ver; char val[40]; } ro_op;
typedef struct ro_state { int live; uint64_t ver; char val[40]; } ro_state;
typedef struct ro_piece { int op, i; } ro_piece; /* op's i-th chunk, or its final entry (i == n) */

static uint64_t ro_rng = 0x2545F4914F6CDD1DULL;
static uint64_t ro_rand(void) {
    ro_rng ^= ro_rng << 13;
    ro_rng ^= ro_rng >> 7;
    ro_rng ^= ro_rng << 17;
    return ro_rng;
}

/* Piece p of ops as a log entry (desc: room for a final entry's payload). */
static log_entry ro_entry(const ro_op *ops, char keys[][32], ro_piece p, char *desc) {
    const ro_op *o = &ops[p.op];
    const char *key = keys[o->key];
    if (o->kind == LOG_SET) return mk_set(o->db, key, o->val, o->ver);
    if (o->kind == LOG_DEL) return mk_del(o->db, key, o->ver);
    if (o->kind == LOG_FLUSHDB) return mk_flush(sid_of(key), o->db, o->ver);
    log_entry e = mk_set(o->db, key, o->val, o->ver + (uint64_t)p.i);
    if (p.i < o->n) {
        size_t off = (size_t)p.i * RO_PIECE, len = strlen(o->val) - off;
        e.type = LOG_CHUNK;
        e.val = o->val + off;
        e.vlen = (uint32_t)(len < RO_PIECE ? len : RO_PIECE);
        e.aux = off;
    } else {
        bigval_desc_encode(desc, strlen(o->val), (uint32_t)o->n, o->ver);
        e.flags = LOG_F_CHUNKED;
        e.val = desc;
        e.vlen = BIGVAL_DESC_LEN;
    }
    return e;
}

static void test_pool_order_random(int round) {
    setup();
    static char keys[RO_KEYS][32];
    for (int k = 0; k < RO_KEYS; k++) key_in(keys[k], sizeof keys[k], "ro", k % 3, k / 3);
    static ro_op ops[RO_OPS];
    static ro_piece pieces[RO_MAXPIECES];
    int np = 0;
    for (int i = 0; i < RO_OPS; i++) {
        ro_op *o = &ops[i];
        o->key = (int)(ro_rand() % RO_KEYS);
        o->db = (int)(ro_rand() % 2);
        unsigned r = (unsigned)(ro_rand() % 100);
        /* FLUSHDBs order everything of their shard: most rounds have few */
        unsigned flushes = round % 4 == 0 ? 5 : 1;
        o->kind = r < 55 ? LOG_SET : r < 70 ? RO_BIG : r < 75 ? RO_CUT
                : r < 100 - flushes ? LOG_DEL : LOG_FLUSHDB;
        if (o->kind == RO_BIG || o->kind == RO_CUT) {
            snprintf(o->val, sizeof o->val, "big%d-%d-%.*s", round, i,
                     (int)(ro_rand() % 20), "abcdefghijklmnopqrstuvwxyz");
            o->n = (int)((strlen(o->val) + RO_PIECE - 1) / RO_PIECE);
            /* a cut run wrote its first chunks, never its final entry */
            o->cut = o->kind == RO_CUT ? 1 + (int)(ro_rand() % (uint64_t)o->n) : o->n + 1;
            o->ver = nv(keys[o->key]); /* its chunks' and final's versions follow */
            for (int c = 1; c <= o->n; c++) nv(keys[o->key]);
        } else {
            o->n = 0;
            o->cut = 1;
            o->ver = nv(keys[o->key]); /* versions in generation order, per shard */
            snprintf(o->val, sizeof o->val, "v%d-%d", round, i);
        }
        for (int c = 0; c < o->cut; c++) {
            if (np + 2 > RO_MAXPIECES) abort();
            pieces[np++] = (ro_piece){i, c};
            if (ro_rand() % 10 == 0) pieces[np++] = (ro_piece){i, c}; /* the cleaner's copy */
        }
    }
    /* Write them in an order unrelated to their versions: each piece
     * moves up to RO_WINDOW places from where it was made (writers race),
     * and one in ten goes anywhere later (the cleaner moved it), each to one
     * of two writers. */
    static uint64_t at[RO_MAXPIECES];
    for (int i = 0; i < np; i++)
        at[i] = ro_rand() % 10 == 0 ? (uint64_t)i + ro_rand() % (uint64_t)(np - i)
                                    : (uint64_t)i + ro_rand() % RO_WINDOW;
    for (int i = 1; i < np; i++) /* insertion sort by at: stable */
        for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
            uint64_t ta = at[j];
            at[j] = at[j - 1];
            at[j - 1] = ta;
            ro_piece tp = pieces[j];
            pieces[j] = pieces[j - 1];
            pieces[j - 1] = tp;
        }
    log_writer w[2];
    log_writer_init(&w[0], server.pool, OWNER_WORKER, 0);
    log_writer_init(&w[1], server.pool, OWNER_WORKER, 1);
    for (int i = 0; i < np; i++) {
        char desc[BIGVAL_DESC_LEN];
        log_entry e = ro_entry(ops, keys, pieces[i], desc);
        append(&w[ro_rand() % 2], &e);
    }
    wdone(&w[0]);
    wdone(&w[1]);

    /* The model: apply in generation order (= version order per shard). A
     * cut run changes nothing; its pieces are reported unless a later
     * effect on its key or a FLUSHDB of its shard ends it. */
    static ro_state st[2][RO_KEYS];
    memset(st, 0, sizeof st);
    static int open_cut[2][RO_KEYS]; /* pieces of a cut run still unclaimed */
    memset(open_cut, 0, sizeof open_cut);
    for (int i = 0; i < RO_OPS; i++) {
        ro_op *o = &ops[i];
        int sid = sid_of(keys[o->key]);
        if (o->kind == LOG_FLUSHDB) {
            for (int k = 0; k < RO_KEYS; k++)
                if (sid_of(keys[k]) == sid) {
                    st[o->db][k].live = 0;
                    open_cut[0][k] = open_cut[1][k] = 0;
                }
            continue;
        }
        open_cut[o->db][o->key] = 0;
        if (o->kind == RO_CUT) {
            open_cut[o->db][o->key] = o->cut;
            continue;
        }
        ro_state *x = &st[o->db][o->key];
        x->live = o->kind != LOG_DEL;
        x->ver = o->ver + (uint64_t)o->n;
        snprintf(x->val, sizeof x->val, "%s", o->val);
    }
    CHECK_EQ_LL(run_recovery(), 0);
    long wrong = 0;
    for (int db = 0; db < 2; db++)
        for (int k = 0; k < RO_KEYS; k++)
            wrong += st[db][k].live ? !holds(db, keys[k], st[db][k].val, st[db][k].ver)
                                    : has(db, keys[k]);
    CHECK_EQ_LL(wrong, 0);
    for (int sid = 0; sid < 3; sid++) {
        size_t cut = 0;
        for (int db = 0; db < 2; db++)
            for (int k = 0; k < RO_KEYS; k++)
                if (sid_of(keys[k]) == sid) cut += (size_t)open_cut[db][k];
        char line[64];
        snprintf(line, sizeof line, "Recovery: shard %d: %zu pieces", sid_of(keys[sid]), cut);
        if (cut) CHECK(log_has(line));
        snprintf(line, sizeof line, "Recovery: shard %d: ", sid_of(keys[sid]));
        if (!cut) CHECK(!log_has(line));
    }
    char err[256] = "";
    CHECK_EQ_LL(verify_log(err, sizeof err), 0);
    if (err[0]) fprintf(stderr, "verify_log: %s\n", err);
    teardown();
}

/* ================= 2. DEL and SET ================= */

static void test_del_set(void) {
    setup();
    char a[32], b[32], c[32], never[32];
    key_in(a, sizeof a, "a", 0, 0);
    key_in(b, sizeof b, "b", 0, 0);
    key_in(c, sizeof c, "c", 3, 0);
    key_in(never, sizeof never, "never", 5, 0);
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    /* a: SET v1, DEL v2, written DEL first -> absent. */
    log_entry e = mk_del(0, a, 2);
    append(&w, &e);
    e = mk_set(0, a, "va", 1);
    append(&w, &e);
    /* b: DEL v3, SET v4, written SET first -> present. */
    e = mk_set(0, b, "vb", 4);
    append(&w, &e);
    e = mk_del(0, b, 3);
    append(&w, &e);
    /* c: present in db 0, a DEL of the same name in db 1 leaves it. */
    e = mk_set(0, c, "vc", 1);
    append(&w, &e);
    e = mk_del(1, c, 2);
    append(&w, &e);
    /* A DEL of a key that never existed is harmless. */
    e = mk_del(0, never, 9);
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(!has(0, a));
    CHECK(holds(0, b, "vb", 4));
    CHECK(holds(0, c, "vc", 1));
    CHECK(!has(1, c));
    CHECK(!has(0, never));
    CHECK_EQ_LL(db_size(0), 2);
    CHECK_EQ_LL(next_ver_of(0), 5);
    CHECK_EQ_LL(next_ver_of(3), 3);
    CHECK_EQ_LL(next_ver_of(5), 10);
    CHECK_EQ_LL(stat_entries(), 7);
    teardown();
}

/* ================= 3. groups ================= */

/* Two keys of two different shards, neither the shard of "before" nor of
 * "after" (the neighbours the group cases write). */
static void two_shard_keys(char *x, char *y, size_t cap, const char *px, const char *py) {
    int sx = -1, sy = -1;
    for (int i = 0; i < NSHARDS; i++) {
        if (i == sid_of("before") || i == sid_of("after")) continue;
        if (sx < 0) sx = i;
        else if (sy < 0) sy = i;
    }
    key_in(x, cap, px, sx, 0);
    key_in(y, cap, py, sy, 0);
}

static void test_group_ok(void) {
    setup();
    char ga[32], gb[32], gold[32];
    two_shard_keys(ga, gb, sizeof ga, "ga", "gb");
    key_in(gold, sizeof gold, "gold", sid_of(ga), 0);
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    log_entry e = mk_set(0, gold, "old", nv(gold));
    append(&w, &e);
    group g = {.len = 0};
    uint64_t va = nv(ga), vd = nv(gold), vb = nv(gb);
    e = mk_set(0, ga, "A", va);
    g_add(&g, &e);
    e = mk_del(0, gold, vd);
    g_add(&g, &e);
    e = mk_set(0, gb, "B", vb);
    g_add(&g, &e);
    e = mk_group(&g, (uint64_t)g.n);
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(holds(0, ga, "A", va));
    CHECK(holds(0, gb, "B", vb));
    CHECK(!has(0, gold));
    CHECK_EQ_LL(db_size(0), 2);
    CHECK_EQ_LL(next_ver_of(sid_of(ga)), vd + 1);
    CHECK_EQ_LL(next_ver_of(sid_of(gb)), vb + 1);
    CHECK_EQ_LL(stat_entries(), 4); /* one SET + three sub-entries */
    CHECK_EQ_LL(stat_corrupt(), 0);
    CHECK_EQ_LL(stat_dropped(), 0);
    teardown();
}

/* A group whose bytes were damaged (inside its second sub-entry's value):
 * neither key. at_tail: nothing follows it (a torn tail), otherwise a valid
 * entry does (corruption). */
static void test_group_damaged(int at_tail) {
    setup();
    char gc[32], gd[32], vbuf[200];
    two_shard_keys(gc, gd, sizeof gc, "gc", "gd");
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    log_entry e = mk_set(0, "before", "x", nv("before"));
    append(&w, &e);
    group g = {.len = 0};
    e = mk_set(0, gc, mk_val(vbuf, 150, 1), nv(gc));
    g_add(&g, &e);
    size_t sub2 = (g.len + LOG_SUB_ALIGN - 1) & ~(size_t)(LOG_SUB_ALIGN - 1);
    e = mk_set(0, gd, mk_val(vbuf, 150, 2), nv(gd));
    g_add(&g, &e);
    e = mk_group(&g, (uint64_t)g.n);
    uint64_t goff = append(&w, &e);
    size_t glen = log_entry_len(0, g.len);
    if (!at_tail) {
        e = mk_set(0, "after", "y", nv("after"));
        append(&w, &e);
    }
    wdone(&w);
    /* byte 20 of the second sub-entry's value */
    flip(goff + LOG_HDR_SIZE + sub2 + LOG_HDR_SIZE + strlen(gd) + 20);

    /* Acknowledged (the group lies before the log's durable end): damage,
     * also as the last entry, where it once passed for a torn tail. */
    expect_refusal();
    damage_list f;
    recovery_totals t;
    check_pool(&f, &t);
    CHECK_EQ_LL(f.n, 1);
    CHECK_EQ_LL(f.d[0].len, log_entry_span(glen));
    CHECK_EQ_LL(f.d[0].follows, !at_tail);
    uint8_t mark[NSHARDS] = {0};
    CHECK(seg_damage_shards(&f.d[0], mark)); /* the sub-entries' headers are intact */
    int marked = 0;
    for (int i = 0; i < NSHARDS; i++) marked += mark[i];
    CHECK_EQ_LL(marked, 2);
    CHECK(mark[sid_of(gc)] && mark[sid_of(gd)]);
    accept_and_restart(1);
    CHECK(!has(0, gc));
    CHECK(!has(0, gd));
    CHECK(holds(0, "before", "x", 0));
    CHECK_EQ_LL(stat_dropped(), 0);
    CHECK_EQ_LL(stat_corrupt(), 0);
    if (at_tail) {
        CHECK_EQ_LL(db_size(0), 1);
    } else {
        CHECK(holds(0, "after", "y", 0));
        CHECK_EQ_LL(db_size(0), 2);
    }
    /* The lost versions are not seen: those shards start over. */
    CHECK_EQ_LL(next_ver_of(sid_of(gc)), 1);
    CHECK_EQ_LL(next_ver_of(sid_of(gd)), 1);
    CHECK_EQ_LL(next_ver_of(sid_of("before")), vers[sid_of("before")] + 1);
    teardown();
}

/* A group with a valid CRC whose sub-entries do not match its count: it was
 * written that way, and none of it is applied. */
static void test_group_malformed(void) {
    setup();
    char gc[32], gd[32];
    two_shard_keys(gc, gd, sizeof gc, "gm", "gn");
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    group g = {.len = 0};
    log_entry e = mk_set(0, gc, "c", nv(gc));
    g_add(&g, &e);
    e = mk_set(0, gd, "d", nv(gd));
    g_add(&g, &e);
    e = mk_group(&g, 3); /* claims three */
    append(&w, &e);
    e = mk_set(0, "after", "y", nv("after"));
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(!has(0, gc));
    CHECK(!has(0, gd));
    CHECK(holds(0, "after", "y", 0));
    CHECK_EQ_LL(db_size(0), 1);
    teardown();
}

/* ================= 4. FLUSHDB / FLUSHALL ================= */

static void test_flushdb(void) {
    setup();
    const int S = 2;
    char a0[32], b1[32], c0[32], a2[32], t0[32];
    key_in(a0, sizeof a0, "f", S, 0);
    key_in(b1, sizeof b1, "f", S, 1);
    key_in(c0, sizeof c0, "f", S, 2);
    key_in(a2, sizeof a2, "f", S, 3);
    key_in(t0, sizeof t0, "f", S + 1, 0);
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    /* Log order: c0 (v12), a0 (v5), b1 in db 1 (v6), FLUSHDB db 0 (v10),
     * a2 (v8), and t0 in another shard (v3). */
    log_entry e = mk_set(0, c0, "after-flush", 12);
    append(&w, &e);
    e = mk_set(0, a0, "before", 5);
    append(&w, &e);
    e = mk_set(1, b1, "other-db", 6);
    append(&w, &e);
    e = mk_flush(S, 0, 10);
    append(&w, &e);
    e = mk_set(0, a2, "before-but-logged-after", 8);
    append(&w, &e);
    e = mk_set(0, t0, "other-shard", 3);
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(!has(0, a0));
    CHECK(!has(0, a2));
    CHECK(holds(1, b1, "other-db", 6));
    CHECK(holds(0, c0, "after-flush", 12));
    CHECK(holds(0, t0, "other-shard", 3));
    CHECK_EQ_LL(db_size(0), 2);
    CHECK_EQ_LL(db_size(1), 1);
    CHECK_EQ_LL(next_ver_of(S), 13);
    CHECK_EQ_LL(next_ver_of(S + 1), 4);
    teardown();
}

/* Re-syncs (log.h): the entries of a completed re-sync (flagged, at its
 * version V, with its end record) replace the shard's older contents; the
 * flagged entries of a later re-sync that a crash cut short (no end record)
 * are not applied, and the copy is marked damaged. A shard with only a
 * complete re-sync is not. */
static log_entry mk_resync(log_entry e) {
    e.flags = LOG_F_RESYNC;
    return e;
}

static void test_resync(int cut) {
    setup();
    const int S = 4;
    char a[32], b[32], c[32];
    key_in(a, sizeof a, "r", S, 0);
    key_in(b, sizeof b, "r", S, 1);
    key_in(c, sizeof c, "r", S, 2);
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_CONTROL, 0);
    /* history before the re-sync: a and c, versions 1-3 */
    log_entry e = mk_set(0, a, "old-a", 1);
    append(&w, &e);
    e = mk_set(0, c, "old-c", 2);
    append(&w, &e);
    e = mk_set(0, a, "old-a2", 3);
    append(&w, &e);
    /* a complete re-sync at 20: a and b; its end record drops c */
    e = mk_resync(mk_set(0, a, "sync-a", 20));
    append(&w, &e);
    e = mk_resync(mk_set(0, b, "sync-b", 20));
    append(&w, &e);
    log_entry end = mk_resync(mk_flush(S, 0xffff, 20));
    append(&w, &end);
    /* a write after it */
    e = mk_set(0, b, "after-b", 21);
    append(&w, &e);
    if (cut) {   /* a second re-sync at 30, cut short before its end */
        e = mk_resync(mk_set(0, a, "partial-a", 30));
        append(&w, &e);
    }
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(holds(0, a, "sync-a", 20));
    CHECK(holds(0, b, "after-b", 21));
    CHECK(!has(0, c));
    CHECK_EQ_LL(atomic_load(&shard_n(S)->damaged), cut);
    CHECK_EQ_LL(next_ver_of(S), cut ? 31 : 22);
    if (cut) CHECK(log_has("cut short"));
    teardown();
}

/* FLUSHALL as db.c writes it: one group with a FLUSHDB (db 0xffff) per
 * shard. Keys of every db before it go, a key set after it stays. */
static void test_flushall_group(void) {
    setup();
    char keys[NSHARDS][32];
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    for (int i = 0; i < NSHARDS; i++) {
        key_in(keys[i], sizeof keys[i], "fa", i, 0);
        log_entry e = mk_set(i % 3, keys[i], "gone", nv(keys[i]));
        append(&w, &e);
    }
    group g = {.len = 0};
    uint64_t fver[NSHARDS];
    for (int i = 0; i < NSHARDS; i++) {
        fver[i] = ++vers[i];
        log_entry e = mk_flush(i, 0xffff, fver[i]);
        g_add(&g, &e);
    }
    log_entry e = mk_group(&g, (uint64_t)g.n);
    append(&w, &e);
    char late[32];
    key_in(late, sizeof late, "late", 4, 0);
    uint64_t lv = nv(late);
    e = mk_set(2, late, "kept", lv);
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    int gone = 0;
    for (int i = 0; i < NSHARDS; i++) gone += !has(i % 3, keys[i]);
    CHECK_EQ_LL(gone, NSHARDS);
    CHECK(holds(2, late, "kept", lv));
    CHECK_EQ_LL(db_size(0) + db_size(1) + db_size(2), 1);
    int vok = 0;
    for (int i = 0; i < NSHARDS; i++) vok += next_ver_of(i) == (i == 4 ? lv : fver[i]) + 1;
    CHECK_EQ_LL(vok, NSHARDS);
    teardown();
}

/* ================= 5. torn tail ================= */

/* half: the tail is the first 100 bytes of a fourth entry (a write cut
 * short); otherwise 100 bytes of garbage at the next entry position.
 * sealed: the segment was sealed, the bytes are strays after its end. */
static void test_torn_tail(int half, int sealed) {
    setup();
    char vbuf[400];
    const char *k[4] = {"t1", "t2", "t3", "t4"};
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    for (int i = 0; i < 3; i++) {
        log_entry e = mk_set(0, k[i], mk_val(vbuf, 100, i), nv(k[i]));
        append(&w, &e);
    }
    uint64_t tail = pool_seg_offset(server.pool, (uint32_t)w.seg) + w.pos;
    if (sealed) log_writer_seal(&w);
    wdone(&w);
    uint8_t junk[400];
    if (half) {
        log_entry e = mk_set(0, k[3], mk_val(vbuf, 300, 3), nv(k[3]));
        log_entry_encode(junk, &e, 1);
    } else {
        memset(junk, 0xa5, sizeof junk);
    }
    poke(tail, junk, 100);

    CHECK_EQ_LL(run_recovery(), 0);
    int ok = 0;
    for (int i = 0; i < 3; i++) ok += holds(0, k[i], mk_val(vbuf, 100, i), 0);
    CHECK_EQ_LL(ok, 3);
    CHECK(!has(0, k[3]));
    CHECK_EQ_LL(db_size(0), 3);
    CHECK_EQ_LL(stat_entries(), 3);
    CHECK_EQ_LL(stat_dropped(), 100);
    CHECK_EQ_LL(stat_corrupt(), 0);
    CHECK(log_has(sealed ? "stray bytes" : "torn log tail"));
    CHECK(!log_has("CORRUPTION"));
    /* they were zeroed: the next start reads the same log, nothing to drop */
    reopen();
    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(stat_dropped(), 0);
    CHECK_EQ_LL(db_size(0), 3);
    teardown();
}

/* ================= 6. mid-segment corruption ================= */

enum { DMG_VALUE, DMG_CRC, DMG_KLEN, DMG_TYPE };

/* Five entries, entry 2 damaged at `where`. with_old: an older valid
 * version of entry 2's key was logged first; it must be what remains. */
static void test_mid_corruption(int where, int with_old) {
    setup();
    char vbuf[400];
    const char *k[5] = {"m1", "m2", "m3", "m4", "m5"};
    uint64_t kv[5];
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    uint64_t oldv = 0;
    if (with_old) {
        oldv = nv(k[1]);
        log_entry e = mk_set(0, k[1], "old", oldv);
        append(&w, &e);
    }
    uint64_t off[5];
    for (int i = 0; i < 5; i++) {
        kv[i] = nv(k[i]);
        log_entry e = mk_set(0, k[i], mk_val(vbuf, 300, i), kv[i]);
        off[i] = append(&w, &e);
    }
    wdone(&w);
    uint8_t b;
    switch (where) {
    case DMG_VALUE: flip(off[1] + LOG_HDR_SIZE + 2 + 150); break;
    case DMG_CRC: flip(off[1] + 1); break;
    case DMG_KLEN: flip(off[1] + 16); break;
    case DMG_TYPE:
        b = 0x7f;
        poke(off[1] + 4, &b, 1);
        break;
    }

    expect_refusal();
    accept_and_restart(1);
    int ok = 0;
    for (int i = 0; i < 5; i++)
        if (i != 1) ok += holds(0, k[i], mk_val(vbuf, 300, i), kv[i]);
    CHECK_EQ_LL(ok, 4);
    if (with_old) {
        CHECK(holds(0, k[1], "old", oldv)); /* the accepted loss */
    } else {
        CHECK(!has(0, k[1]));
    }
    CHECK_EQ_LL(db_size(0), with_old ? 5 : 4);
    CHECK_EQ_LL(stat_corrupt(), 0);
    CHECK_EQ_LL(stat_dropped(), 0);
    CHECK_EQ_LL(stat_entries(), with_old ? 5 : 4);
    teardown();
}

/* The newest entry of a key is the last entry of its segment (the case that
 * once passed for a torn tail and served the older value): damaged (a
 * flipped value byte) or zeroed whole, in an open segment (its durable end
 * covers it) or a sealed one. */
static void test_damaged_last_entry(int sealed, int zeroed) {
    setup();
    char vbuf[400];
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    uint64_t v1 = nv("last"), v2;
    log_entry e = mk_set(0, "last", "older", v1);
    append(&w, &e);
    e = mk_set(0, "other", "o", nv("other"));
    append(&w, &e);
    v2 = nv("last");
    e = mk_set(0, "last", mk_val(vbuf, 200, 9), v2);
    uint64_t off = append(&w, &e);
    if (sealed) log_writer_seal(&w);
    wdone(&w);
    uint32_t seg = pool_seg_of(server.pool, off);
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).state, sealed ? SEG_USED : SEG_USING);
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).end,
                off - pool_seg_offset(server.pool, seg) + log_entry_span(log_entry_len(4, 200)));
    if (zeroed) {
        uint8_t z[256] = {0};
        poke(off, z, log_entry_len(4, 200));
    } else {
        flip(off + LOG_HDR_SIZE + 4 + 100);
    }
    expect_refusal();
    CHECK(!has(0, "last"));
    /* the report names the key when its header is readable */
    CHECK(log_has(zeroed ? "unreadable" : "\"last\""));
    damage_list f;
    recovery_totals t;
    check_pool(&f, &t);
    CHECK_EQ_LL(f.n, 1);
    CHECK_EQ_LL(f.d[0].follows, 0);
    CHECK_EQ_LL(f.d[0].off, off - pool_seg_offset(server.pool, seg));
    uint8_t mark[NSHARDS] = {0};
    CHECK_EQ_LL(seg_damage_shards(&f.d[0], mark), !zeroed);
    if (!zeroed) CHECK(mark[sid_of("last")]);
    accept_and_restart(1);
    CHECK(holds(0, "last", "older", v1)); /* explicitly accepted */
    CHECK(holds(0, "other", "o", 0));
    teardown();
}

/* ================= 10. in flight after the durable end ================= */

/* A synced entry, then two more never synced (in flight at the "crash"):
 * bad bytes in the first of them, the second intact. Both were unacked:
 * dropped with all that follows, no damage reported. */
static void test_inflight_gap(void) {
    setup();
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    log_entry e = mk_set(0, "durable", "d", nv("durable"));
    append(&w, &e);
    log_writer_sync(&w);
    uint32_t seg = (uint32_t)w.seg;
    uint32_t durable_end = w.pos;
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).end, durable_end);
    e = mk_set(0, "inflight1", "a", nv("inflight1"));
    uint64_t a = append(&w, &e);
    e = mk_set(0, "inflight2", "b", nv("inflight2"));
    append(&w, &e);
    uint32_t stop = w.pos;
    log_writer_free(&w); /* the crash: never synced, end not raised */
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).end, durable_end);
    flip(a + LOG_HDR_SIZE + 3);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK(holds(0, "durable", "d", 0));
    CHECK(!has(0, "inflight1"));
    CHECK(!has(0, "inflight2"));
    CHECK_EQ_LL(stat_corrupt(), 0);
    CHECK(stat_dropped() > 0 && stat_dropped() <= stop - durable_end);
    CHECK(!log_has("CORRUPTION"));
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).state, SEG_COMMITTED);
    CHECK_EQ_LL(pool_seg_meta(server.pool, seg).end, durable_end);
    reopen();
    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(stat_dropped(), 0);
    CHECK_EQ_LL(db_size(0), 1);
    teardown();
}

/* ================= 11. truncated pool ================= */

/* Three writers, one segment each; the file is cut inside the second, so
 * the third is gone entirely. */
static void test_truncated(void) {
    setup();
    log_writer w[3];
    uint64_t off[3][2];
    char key[32];
    for (int i = 0; i < 3; i++) {
        log_writer_init(&w[i], server.pool, OWNER_WORKER, (uint16_t)i);
        for (int j = 0; j < 2; j++) {
            snprintf(key, sizeof key, "tr%d-%d", i, j);
            log_entry e = mk_set(0, key, "v", nv(key));
            off[i][j] = append(&w[i], &e);
        }
        wdone(&w[i]);
    }
    CHECK(pool_seg_of(server.pool, off[1][0]) < pool_seg_of(server.pool, off[2][0]));
    uint64_t cut = off[1][1] + 20, size = pool_size(server.pool);
    CHECK(pool_seg_of(server.pool, off[0][0]) < pool_seg_of(server.pool, cut));
    globals_free();
    CHECK_EQ_LL(truncate(pool_path, (off_t)cut), 0);
    globals_init();
    CHECK_EQ_LL(pool_missing_from(server.pool), cut);
    expect_refusal();
    CHECK(log_has("truncated"));
    struct stat st;
    CHECK(stat(pool_path, &st) == 0 && (uint64_t)st.st_size == cut); /* untouched */
    accept_and_restart(2);
    CHECK(stat(pool_path, &st) == 0 && (uint64_t)st.st_size == size);
    CHECK_EQ_LL(pool_missing_from(server.pool), 0);
    int ok = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            snprintf(key, sizeof key, "tr%d-%d", i, j);
            ok += has(0, key) == (i == 0 || (i == 1 && j == 0));
        }
    CHECK_EQ_LL(ok, 6);
    teardown();
}

/* ================= 12. cluster mode ================= */

/* Damage in a cluster node's pool: it starts, marks the shards that lost
 * entries (and keeps marking them on later starts), and all shards when
 * the damaged header is unreadable. */
static void test_cluster_marks(int unreadable) {
    setup();
    char a[32], b[32];
    key_in(a, sizeof a, "ca", 2, 0);
    key_in(b, sizeof b, "cb", 5, 0);
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    log_entry e = mk_set(0, a, "va", nv(a));
    uint64_t off = append(&w, &e);
    e = mk_set(0, b, "vb", nv(b));
    append(&w, &e);
    wdone(&w);
    if (unreadable) {
        uint8_t z[64] = {0};
        poke(off, z, 64);
    } else {
        flip(off + LOG_HDR_SIZE + strlen(a));
    }
    for (int round = 0; round < 2; round++) {
        if (round) reopen();
        CHECK_EQ_LL(run_recovery(), 0);
        CHECK(!has(0, a));
        CHECK(holds(0, b, "vb", 0));
        CHECK_EQ_LL(stat_corrupt(), 1);
        int marked = 0;
        for (int i = 0; i < NSHARDS; i++) marked += shard_n(i)->damaged;
        CHECK_EQ_LL(marked, unreadable ? NSHARDS : 1);
        CHECK(shard_n(2)->damaged);
        CHECK_EQ_LL(atomic_load(&server.stat.damaged_shards), marked);
    }
    CHECK(log_has("CORRUPTION"));
    CHECK(log_has("fetched again"));
    /* an accepted loss marks its shards too: the replicas have the data */
    damage_list f;
    recovery_totals t;
    check_pool(&f, &t);
    char err[256];
    CHECK_EQ_LL(recovery_fix(f.d, (size_t)f.n, 1700000000000LL, err, sizeof err), 0);
    reopen();
    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(stat_corrupt(), 0);
    CHECK_EQ_LL(atomic_load(&server.stat.recovery_accepted_losses), 1);
    CHECK(shard_n(2)->damaged);
    CHECK(!shard_n(5)->damaged || unreadable);
    teardown();
}

static void cluster_mode(void) {
    char err[256];
    CHECK_EQ_LL(cluster_add_node("n1", "127.0.0.1", 7000, 17000, err, sizeof err), 0);
    CHECK_EQ_LL(cluster_set_self("n1", err, sizeof err), 0);
    CHECK_EQ_LL(cluster_setup(NSHARDS, 1, err, sizeof err), 0);
    CHECK(cluster_enabled());
}

/* ================= 7. segment states ================= */

static void test_seal(void) {
    setup();
    log_writer w0, w1;
    log_writer_init(&w0, server.pool, OWNER_WORKER, 0);
    log_writer_init(&w1, server.pool, OWNER_WORKER, 1);
    log_entry e = mk_set(0, "s0", "a", nv("s0"));
    append(&w0, &e);
    wdone(&w0); /* head segment: left USING */
    e = mk_set(0, "s1", "b", nv("s1"));
    uint32_t s1 = pool_seg_of(server.pool, append(&w1, &e));
    log_writer_seal(&w1); /* USED */
    log_writer_free(&w1);
    int empty = pool_seg_alloc(server.pool, OWNER_CLEAN, 0, 0); /* USING, nothing in it */
    uint32_t s0 = (uint32_t)w0.seg;
    CHECK(empty >= 0);
    CHECK_EQ_LL(pool_seg_meta(server.pool, s0).state, SEG_USING);
    CHECK_EQ_LL(pool_seg_meta(server.pool, s1).state, SEG_USED);
    CHECK_EQ_LL(pool_seg_meta(server.pool, (uint32_t)empty).state, SEG_USING);
    uint32_t nfree = pool_free_count(server.pool);
    CHECK_EQ_LL(nfree, pool_nsegs(server.pool) - 3);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(pool_seg_meta(server.pool, s0).state, SEG_COMMITTED);
    CHECK_EQ_LL(pool_seg_meta(server.pool, s1).state, SEG_COMMITTED);
    CHECK_EQ_LL(pool_seg_meta(server.pool, (uint32_t)empty).state, SEG_COMMITTED);
    CHECK_EQ_LL(pool_free_count(server.pool), nfree);
    int still_free = 0;
    for (uint32_t i = 0; i < pool_nsegs(server.pool); i++)
        still_free += pool_seg_meta(server.pool, i).state == SEG_FREE;
    CHECK_EQ_LL(still_free, nfree);
    CHECK(holds(0, "s0", "a", 0));
    CHECK(holds(0, "s1", "b", 0));
    /* The states were persisted: a restart sees them too. */
    reopen();
    CHECK_EQ_LL(pool_seg_meta(server.pool, s0).state, SEG_COMMITTED);
    CHECK_EQ_LL(pool_seg_meta(server.pool, (uint32_t)empty).state, SEG_COMMITTED);
    teardown();
}

/* ================= 8. shard mismatch ================= */

enum { BAD_OTHER_SHARD, BAD_OUT_OF_RANGE, BAD_IN_GROUP };

static void test_shard_mismatch(int how) {
    setup();
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    log_entry e = mk_set(0, "good", "g", nv("good"));
    append(&w, &e);
    log_entry bad = mk_set(0, "bad", "b", 1);
    bad.shard = (uint16_t)(how == BAD_OUT_OF_RANGE ? NSHARDS : (sid_of("bad") + 1) % NSHARDS);
    if (how == BAD_IN_GROUP) {
        group g = {.len = 0};
        e = mk_set(0, "fine", "f", nv("fine"));
        g_add(&g, &e);
        g_add(&g, &bad);
        e = mk_group(&g, (uint64_t)g.n);
        append(&w, &e);
    } else {
        append(&w, &bad);
    }
    e = mk_set(0, "good2", "g", nv("good2"));
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), -1);
    CHECK(strstr(rec_err, "shards") != NULL);
    /* Nothing was replayed. */
    CHECK_EQ_LL(db_size(0), 0);
    CHECK(!has(0, "good"));
    CHECK_EQ_LL(next_ver_of(sid_of("good")), 1);
    teardown();
}

/* ================= 9. DBMAP (SWAPDB) ================= */

static void test_dbmap(void) {
    setup();
    const int S = 5;
    char k[32], k2[32], t[32];
    key_in(k, sizeof k, "d", S, 0);
    key_in(k2, sizeof k2, "d", S, 1);
    key_in(t, sizeof t, "d", S + 1, 0);
    uint16_t swap[NDBS], ident[NDBS];
    for (int i = 0; i < NDBS; i++) swap[i] = ident[i] = (uint16_t)i;
    swap[0] = 1;
    swap[1] = 0;
    log_writer w;
    log_writer_init(&w, server.pool, OWNER_WORKER, 0);
    /* Versions in S: k in pdb 0 (v1), identity map (v4), swap map (v6),
     * k2 in pdb 1 (v7); the swap is logged before the identity map. */
    log_entry e = mk_set(0, k, "in-pdb0", 1);
    append(&w, &e);
    log_entry m = {.type = LOG_DBMAP, .shard = S, .ver = 6, .key = "",
                   .val = (const char *)swap, .vlen = sizeof swap};
    append(&w, &m);
    m.ver = 4;
    m.val = (const char *)ident;
    append(&w, &m);
    e = mk_set(1, k2, "in-pdb1", 7);
    append(&w, &e);
    e = mk_set(0, t, "other-shard", 1);
    append(&w, &e);
    wdone(&w);

    CHECK_EQ_LL(run_recovery(), 0);
    CHECK_EQ_LL(shard_n(S)->dbmap[0], 1);
    CHECK_EQ_LL(shard_n(S)->dbmap[1], 0);
    CHECK_EQ_LL(shard_n(S)->dbmap_ver, 6);
    CHECK(!has(0, k));
    CHECK(holds(1, k, "in-pdb0", 1));
    CHECK(holds(0, k2, "in-pdb1", 7));
    CHECK(!has(1, k2));
    CHECK(holds(0, t, "other-shard", 1));
    CHECK_EQ_LL(next_ver_of(S), 8);
    teardown();
}

/* ================= driver ================= */

static void run_all(void) {
    printf("test-recovery: pools in %s (%s)\n", tmp_parent, mode_name);
    fflush(stdout);
    test_version_order();
    for (int round = 0; round < 20; round++) test_pool_order_random(round);
    test_del_set();
    test_group_ok();
    test_group_damaged(0);
    test_group_damaged(1);
    test_group_malformed();
    test_flushdb();
    test_flushall_group();
    test_resync(0);
    test_resync(1);
    test_torn_tail(0, 0);
    test_torn_tail(1, 0);
    test_torn_tail(0, 1);
    for (int where = DMG_VALUE; where <= DMG_TYPE; where++) test_mid_corruption(where, 0);
    test_mid_corruption(DMG_VALUE, 1);
    test_mid_corruption(DMG_KLEN, 1);
    for (int sealed = 0; sealed < 2; sealed++)
        for (int zeroed = 0; zeroed < 2; zeroed++) test_damaged_last_entry(sealed, zeroed);
    test_seal();
    test_shard_mismatch(BAD_OTHER_SHARD);
    test_shard_mismatch(BAD_OUT_OF_RANGE);
    test_shard_mismatch(BAD_IN_GROUP);
    test_dbmap();
    test_inflight_gap();
    test_truncated();
    cluster_mode(); /* for good: last */
    test_cluster_marks(0);
    test_cluster_marks(1);
}

/* Run every case in a child with PMEM_IS_PMEM_FORCE=1 on /dev/shm and fold
 * its counts into ours. */
static void run_pmem_child(void) {
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        unit_fail++;
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setenv("PMEM_IS_PMEM_FORCE", "1", 1);
        tmp_parent = "/dev/shm";
        mode_name = "pmem forced";
        mode_pmem = 1;
        unit_pass = unit_fail = 0;
        run_all();
        int counts[2] = {unit_pass, unit_fail};
        if (write(fds[1], counts, sizeof counts) != (ssize_t)sizeof counts) _exit(3);
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    int counts[2] = {0, 0}, status = 0;
    ssize_t r = read(fds[0], counts, sizeof counts);
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (r != (ssize_t)sizeof counts || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "test-recovery: pmem child failed (status %d)\n", status);
        unit_fail++;
        return;
    }
    unit_pass += counts[0];
    unit_fail += counts[1];
}

int main(void) {
    /* The child must start before this process touches libpmem. */
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    if (!force) run_pmem_child();
    else if (strcmp(force, "1") == 0) {
        mode_name = "pmem forced";
        mode_pmem = 1;
    }
    run_all();
    return UNIT_DONE("test-recovery");
}
