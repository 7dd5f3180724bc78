/* test-db-shard.c -- unit tests of db_shard.h: digest, export, clear.
 *
 * Builds the globals the way main.c does (config defaults, a pool in /tmp,
 * shards, indexes, the collection classes) plus one worker without a thread
 * (its t-log is what db_set and db_obj_write append to), fills one shard
 * with strings (one written inside a batch, so indexed as a LOG_GROUP
 * sub-entry; one already expired), a hash, a set, a zset (with a big one
 * holding -0), lists, expiries, keys in several dbs and a SWAPDB, then:
 *
 *   1. changing one thing (a string value, an expiry, a hash value, a set
 *      member, a zset score, the order of a list) changes the digest, and
 *      changing it back gives the digest back (other versions, other log
 *      offsets, same contents); -0 and 0 as a score digest the same;
 *   2. the export's entries carry LOG_F_RESYNC, the shard, and the version
 *      the export was given; the db map is among them;
 *   3. db_shard_clear leaves no key (counts, index) and the shard's live
 *      bytes go away, leaving an empty shard's digest;
 *   4. the exported entries, written into a log and applied with
 *      db_apply_entry, give the same digest and counts, every key at the
 *      export's version; applied on top of OTHER contents followed by the
 *      re-sync's end record (a LOG_FLUSHDB flagged LOG_F_RESYNC at that
 *      version), in either order, they give the same digest too;
 *   5. the same contents written in another order (hash fields, set
 *      members, keys reversed, and straight into the logical dbs instead of
 *      through SWAPDB) give the same digest.
 *
 * The collection effects are encoded here with the types' opcodes
 * (src/types/type_*.h). */
#include "commands.h"
#include "config.h"
#include "db.h"
#include "db_shard.h"
#include "index.h"
#include "log.h"
#include "object.h"
#include "pool.h"
#include "server.h"
#include "shard.h"
#include "type_hash.h"
#include "hash.h"
#include "type_list.h"
#include "type_set.h"
#include "type_zset.h"
#include "types.h"
#include "unit.h"
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSHARDS   4
#define NDBS      16
#define POOL_SEGS 24
#define SID       2      /* the shard under test */

static char pool_path[256], log_path[256];
static worker *wk;
static db_ctx x;
static const int64_t FAR = 4102444800000LL;  /* 2100-01-01 */

/* ---------------- globals ---------------- */

static void setup(void) {
    char err[512];
    snprintf(pool_path, sizeof pool_path, "/tmp/rowan-test-db-shard-pool-XXXXXX");
    int fd = mkstemp(pool_path);
    close(fd);
    unlink(pool_path);
    snprintf(log_path, sizeof log_path, "/tmp/rowan-test-db-shard-log-XXXXXX");
    fd = mkstemp(log_path);
    close(fd);
    config_init_defaults();
    server.cfg.databases = NDBS;
    server.cfg.shards = NSHARDS;
    server.cfg.workers = 1;
    free(server.cfg.logfile);
    server.cfg.logfile = strdup(log_path);
    server.pool = pool_open(pool_path, (uint64_t)POOL_SEGS * POOL_SEG_SIZE, 0, err, sizeof err);
    if (!server.pool) {
        fprintf(stderr, "pool_open %s: %s\n", pool_path, err);
        exit(2);
    }
    server.nworkers = 1;
    shard_init_all(NSHARDS, 1, NDBS);
    db_init_indexes();
    types_init();
    wk = calloc(1, sizeof(*wk));
    log_writer_init(&wk->tlog, server.pool, OWNER_WORKER, 0);
    for (int i = 0; i < SHARD_SLOTS; i++) {
        wk->slots[i].shards = calloc(NSHARDS, sizeof(uint16_t));
        wk->slots[i].mark = calloc(NSHARDS, 1);
    }
    wk->slots[0].gen = wk->next_gen = 1;
    server.workers = &wk;
    db_ctx_init(&x, wk, 0);
}

static void teardown(void) {
    db_ctx_free(&x);
    db_free_all();
    for (int i = 0; i < server.nshards; i++) {
        free(server.shards[i].pend);
        pthread_mutex_destroy(&server.shards[i].lock);
    }
    free(server.shards);
    server.shards = NULL;
    for (int i = 0; i < SHARD_SLOTS; i++) {
        free(wk->slots[i].shards);
        free(wk->slots[i].mark);
    }
    log_writer_free(&wk->tlog);
    free(wk);
    server.workers = NULL;
    pool_close(server.pool);
    unlink(pool_path);
    unlink(log_path);
}

static shard *S(void) { return &server.shards[SID]; }

/* The n-th key "<prefix><i>" of the shard under test (static buffers, 8 in
 * rotation, so a few can be used at once). */
static const char *K(const char *prefix, int n) {
    static char bufs[8][64];
    static int next;
    char *b = bufs[next++ & 7];
    for (int i = 0;; i++) {
        snprintf(b, 64, "%s%d", prefix, i);
        if (shard_of_key(b, strlen(b))->id == SID && n-- == 0) return b;
    }
}

static uint64_t digest(long long *n) { return db_shard_digest(S(), n); }

static int64_t live_bytes(void) {
    int64_t t = 0;
    for (uint32_t g = 0; g < pool_nsegs(server.pool); g++) t += pool_live_get(server.pool, g);
    return t;
}

/* ---------------- writes (the shard's lock held by the caller) ---------- */

static void sset(int db, const char *k, const char *v, int64_t exp) {
    CHECK(db_set(&x, db, k, strlen(k), v, strlen(v), exp) == DB_OK);
}

/* Log one effect (op, argument a then b) on collection k of type. */
static void op(int db, const char *k, int type, uint8_t opcode, const void *a, size_t alen,
               const void *b, size_t blen) {
    rbuf ops;
    rbuf_init(&ops);
    obj_op2(&ops, opcode, a, alen, b, blen);
    CHECK(db_obj_write(&x, db, k, strlen(k), type, ops.buf, ops.len) == DB_OK);
    rbuf_free(&ops);
}

static void hset(int db, const char *k, const char *f, const char *v) {
    rbuf fl;
    rbuf_init(&fl);
    obj_put_u32(&fl, (uint32_t)strlen(f));
    rbuf_append(&fl, f, strlen(f));
    op(db, k, OBJ_HASH, HASH_OP_SET, fl.buf, fl.len, v, strlen(v));
    rbuf_free(&fl);
}

static void sadd(int db, const char *k, const char *m) {
    op(db, k, OBJ_SET, SET_OP_ADD, m, strlen(m), NULL, 0);
}

static void srem(int db, const char *k, const char *m) {
    op(db, k, OBJ_SET, SET_OP_REM, m, strlen(m), NULL, 0);
}

static void zadd(int db, const char *k, const char *m, double score) {
    unsigned char s[8];
    uint64_t u;
    memcpy(&u, &score, 8);
    for (int i = 0; i < 8; i++) s[i] = (unsigned char)(u >> (8 * i));
    op(db, k, OBJ_ZSET, ZOP_SET, s, 8, m, strlen(m));
}

static void rpush(int db, const char *k, const char *v) {
    op(db, k, OBJ_LIST, LOP_PUSH_TAIL, v, strlen(v), NULL, 0);
}

static void lpop(int db, const char *k) {
    unsigned char one[8] = {1};
    op(db, k, OBJ_LIST, LOP_POP_HEAD, one, 8, NULL, 0);
}

static void expire(int db, const char *k, int64_t ms) {
    CHECK(db_set_expire(&x, db, k, strlen(k), ms) == 1);
}

/* A zset member over 64 bytes makes the zset "big" (it then keeps -0). */
static const char *LONGM =
    "a-member-long-enough-to-make-the-sorted-set-a-skiplist-in-redis-terms-0123456789";

/* The contents, in two different orders. Final logical dbs: "moved" keys in
 * db 1, the rest in db 0 and db 3. Order 0 writes the moved keys into db 0
 * and swaps dbs 0 and 1 (SWAPDB locks every shard: called unlocked). */
static void build(int order) {
    const char *fields[] = {"f1", "f2", "f3", "f4"};
    const char *vals[] = {"v1", "v2", "v3", "v4"};
    if (order == 0) {
        shard_lock(S());
        sset(0, K("moved", 0), "m0", 0);
        hset(0, K("movedh", 0), "a", "b");
        shard_unlock(S());
        CHECK(db_swap(&x, 0, 1) == DB_OK);
        shard_lock(S());
        sset(0, K("str", 0), "hello", 0);
        sset(0, K("str", 1), "world", FAR);
        sset(3, K("str", 0), "in-db-3", 0);
        sset(0, K("old", 0), "expired-not-deleted", 1000);
        db_batch_begin(&x);
        sset(0, K("grp", 0), "g0", 0);
        sset(0, K("grp", 1), "g1", FAR + 1);
        CHECK(db_batch_end(&x) == DB_OK);
        for (int i = 0; i < 4; i++) hset(0, K("hash", 0), fields[i], vals[i]);
        for (int i = 0; i < 4; i++) sadd(0, K("set", 0), fields[i]);
        expire(0, K("set", 0), FAR + 2);
        zadd(0, K("zset", 0), "one", 1.0);
        zadd(0, K("zset", 0), "two", 2.0);
        zadd(0, K("zset", 0), "zero", 0.0);
        zadd(0, K("bigz", 0), LONGM, -0.0);
        zadd(0, K("bigz", 0), "x", 5.5);
        rpush(0, K("list", 0), "a");
        rpush(0, K("list", 0), "b");
        rpush(0, K("list", 0), "c");
        rpush(3, K("list", 1), "only");
    } else {
        shard_lock(S());
        rpush(3, K("list", 1), "only");
        rpush(0, K("list", 0), "a");
        rpush(0, K("list", 0), "b");
        rpush(0, K("list", 0), "c");
        zadd(0, K("bigz", 0), "x", 5.5);
        zadd(0, K("bigz", 0), LONGM, 0.0);          /* 0 here, -0 there */
        zadd(0, K("zset", 0), "zero", 0.0);
        zadd(0, K("zset", 0), "two", 7.0);
        zadd(0, K("zset", 0), "one", 1.0);
        zadd(0, K("zset", 0), "two", 2.0);
        for (int i = 3; i >= 0; i--) sadd(0, K("set", 0), fields[i]);
        expire(0, K("set", 0), FAR + 2);
        for (int i = 3; i >= 0; i--) hset(0, K("hash", 0), fields[i], vals[i]);
        sset(0, K("grp", 1), "g1", FAR + 1);
        sset(0, K("grp", 0), "g0", 0);
        sset(0, K("old", 0), "expired-not-deleted", 1000);
        sset(3, K("str", 0), "in-db-3", 0);
        sset(0, K("str", 1), "world", 0);
        expire(0, K("str", 1), FAR);
        sset(0, K("str", 0), "hello", 0);
        hset(1, K("movedh", 0), "a", "b");
        sset(1, K("moved", 0), "m0", 0);
    }
    shard_unlock(S());
}

/* ---------------- 1. sensitivity ---------------- */

/* Apply a change: the digest must move; apply its undo: it must come back. */
#define CHANGE_UNDO(change, undo) do { \
    uint64_t _before = digest(NULL); \
    shard_lock(S()); change; shard_unlock(S()); \
    CHECK(digest(NULL) != _before); \
    shard_lock(S()); undo; shard_unlock(S()); \
    CHECK(digest(NULL) == _before); \
} while (0)

static void test_sensitivity(void) {
    CHANGE_UNDO(sset(0, K("str", 0), "hellO", 0), sset(0, K("str", 0), "hello", 0));
    CHANGE_UNDO(sset(0, K("str", 0), "hello", FAR), sset(0, K("str", 0), "hello", 0));
    CHANGE_UNDO(sset(3, K("str", 0), "in-db-3", FAR), sset(3, K("str", 0), "in-db-3", 0));
    CHANGE_UNDO(expire(0, K("set", 0), FAR + 3), expire(0, K("set", 0), FAR + 2));
    CHANGE_UNDO(hset(0, K("hash", 0), "f2", "V2"), hset(0, K("hash", 0), "f2", "v2"));
    CHANGE_UNDO(sadd(0, K("set", 0), "f5"), srem(0, K("set", 0), "f5"));
    CHANGE_UNDO(zadd(0, K("zset", 0), "two", 2.5), zadd(0, K("zset", 0), "two", 2.0));
    /* [a b c] -> [b c a] -> [c a b] -> [a b c] */
    CHANGE_UNDO({ lpop(0, K("list", 0)); rpush(0, K("list", 0), "a"); }, {
        lpop(0, K("list", 0)); rpush(0, K("list", 0), "b");
        lpop(0, K("list", 0)); rpush(0, K("list", 0), "c");
    });
    /* a new key in another db, then deleted */
    CHANGE_UNDO(sset(5, K("str", 0), "hello", 0), CHECK(db_del(&x, 5, K("str", 0), 4) == 1));
    /* a score's sign of zero is not content */
    uint64_t d0 = digest(NULL);
    shard_lock(S());
    zadd(0, K("bigz", 0), LONGM, 0.0);
    shard_unlock(S());
    CHECK(digest(NULL) == d0);
    shard_lock(S());
    zadd(0, K("bigz", 0), LONGM, -0.0);
    shard_unlock(S());
    CHECK(digest(NULL) == d0);
}

/* ---------------- 2..4. export, clear, apply ---------------- */

typedef struct exported {
    char **e;
    size_t *len;
    int n;
} exported;

static void collect(void *arg, const void *entry, size_t len) {
    exported *ex = arg;
    ex->e = realloc(ex->e, sizeof(char *) * (size_t)(ex->n + 1));
    ex->len = realloc(ex->len, sizeof(size_t) * (size_t)(ex->n + 1));
    ex->e[ex->n] = malloc(len);
    memcpy(ex->e[ex->n], entry, len);
    ex->len[ex->n++] = len;
}

static uint64_t ver_of(int db, const char *k) {
    db_val v;
    shard_lock(S());
    int found = db_peek(&x, db, k, strlen(k), &v);
    shard_unlock(S());
    return found ? v.ver : 0;
}

/* Write entry bytes into a real log, then apply them (as the digest does). */
static void apply_bytes(log_writer *lw, const void *bytes, size_t len) {
    uint64_t off = log_writer_reserve(lw, len, 0);
    CHECK(off != 0);
    memcpy(log_writer_dst(lw, off, len), bytes, len);
    log_writer_wrote(lw, off, len);
    log_entry e;
    CHECK(log_entry_check(pool_ptr(server.pool, off), len, &e) == len);
    db_apply_entry(S(), off, &e);
}

/* The entries of ex re-stamped with version v (a re-sync sent later). */
static void restamp(exported *ex, uint64_t v) {
    for (int i = 0; i < ex->n; i++) {
        log_entry e;
        CHECK(log_entry_check(ex->e[i], ex->len[i], &e) == ex->len[i]);
        e.ver = v;
        char *b = malloc(ex->len[i]);
        CHECK(log_entry_encode(b, &e, 1) == ex->len[i]);
        free(ex->e[i]);
        ex->e[i] = b;
    }
}

/* The re-sync end record at v (log.h). */
static void apply_end(log_writer *lw, uint64_t v) {
    char b[LOG_HDR_SIZE];
    log_entry end = {.type = LOG_FLUSHDB, .flags = LOG_F_RESYNC, .shard = SID, .db = 0xffff,
                     .ver = v, .key = "", .val = ""};
    apply_bytes(lw, b, log_entry_encode(b, &end, 1));
}

static void test_export_clear_apply(uint64_t want, long long want_n) {
    shard *s = S();
    long long keys[SHARD_MAX_DBS], exps[SHARD_MAX_DBS];
    memcpy(keys, s->dbkeys, sizeof keys);
    memcpy(exps, s->dbexpires, sizeof exps);
    CHECK(ver_of(0, K("str", 1)) && ver_of(0, K("hash", 0)));

    exported ex = {0};
    shard_lock(s);
    uint64_t v = shard_resync_version(s);
    db_shard_export(s, v, collect, &ex);
    shard_unlock(s);
    CHECK(v > 0 && v == s->next_ver - 1);
    CHECK_EQ_LL(ex.n, want_n + 1);   /* + the db map */
    int dbmaps = 0;
    for (int i = 0; i < ex.n; i++) {
        log_entry e;
        CHECK(log_entry_check(ex.e[i], ex.len[i], &e) == ex.len[i]);
        CHECK(e.flags == LOG_F_RESYNC);
        CHECK(e.shard == SID);
        CHECK_EQ_LL(e.ver, v);
        CHECK(e.type == LOG_SET || e.type == LOG_SNAPSHOT || e.type == LOG_DBMAP);
        dbmaps += e.type == LOG_DBMAP;
    }
    CHECK_EQ_LL(dbmaps, 1);

    /* 3. clear */
    int64_t live0 = live_bytes();
    int64_t others = (int64_t)(NSHARDS - 1) * (int64_t)log_entry_len(0, 2 * NDBS);
    shard_lock(s);
    db_shard_clear(s);
    shard_unlock(s);
    long long n = -1;
    uint64_t empty = digest(&n);
    CHECK_EQ_LL(n, 0);
    CHECK_EQ_LL(index_count(s->idx), 0);
    CHECK_EQ_LL(index_count(s->vidx), 0);
    long long left = 0;
    for (int d = 0; d < SHARD_MAX_DBS; d++) left += s->dbkeys[d] + s->dbexpires[d];
    CHECK_EQ_LL(left, 0);
    CHECK(s->dbmap[0] == 0 && s->dbmap[1] == 1 && s->dbmap_ref == 0);
    CHECK(live0 > others);
    CHECK_EQ_LL(live_bytes(), others);   /* only the other shards' db maps */
    CHECK(empty == db_shard_digest(&server.shards[0], NULL));  /* shard 0 holds nothing */
    CHECK(empty != want);

    /* 4. apply, from a real log */
    log_writer lw;
    log_writer_init(&lw, server.pool, OWNER_CONTROL, 0);
    shard_lock(s);
    for (int i = 0; i < ex.n; i++) apply_bytes(&lw, ex.e[i], ex.len[i]);
    shard_unlock(s);
    CHECK(digest(&n) == want);
    CHECK_EQ_LL(n, want_n);
    CHECK(memcmp(keys, s->dbkeys, sizeof keys) == 0);
    CHECK(memcmp(exps, s->dbexpires, sizeof exps) == 0);
    CHECK(s->dbmap[0] == 1 && s->dbmap[1] == 0);
    CHECK_EQ_LL(ver_of(0, K("str", 1)), v);
    CHECK_EQ_LL(ver_of(0, K("hash", 0)), v);
    CHECK_EQ_LL(ver_of(1, K("moved", 0)), v);
    CHECK(live_bytes() > others);

    /* On top of other contents (changed values, an extra key in a third db,
     * the db map undone), a later re-sync of the same snapshot gives the
     * snapshot back, whether its end record comes before or after its
     * entries; the end record is the shard's live one. */
    for (int order = 0; order < 2; order++) {
        shard_lock(s);
        sset(0, K("str", 1), "changed", 0);
        sset(7, K("extra", 0), "x", 0);
        hset(0, K("hash", 0), "f9", "new");
        uint64_t v2 = shard_resync_version(s);
        restamp(&ex, v2);
        if (order == 0) apply_end(&lw, v2);
        for (int i = 0; i < ex.n; i++) apply_bytes(&lw, ex.e[i], ex.len[i]);
        if (order == 1) apply_end(&lw, v2);
        shard_unlock(s);
        CHECK(digest(&n) == want);
        CHECK_EQ_LL(n, want_n);
        CHECK_EQ_LL(s->resync_ver, v2);
        CHECK(s->resync_ref != 0);
        CHECK(memcmp(keys, s->dbkeys, sizeof keys) == 0);
    }
    for (int i = 0; i < ex.n; i++) free(ex.e[i]);
    free(ex.e);
    free(ex.len);
    log_writer_sync(&lw);
    log_writer_free(&lw);
}

/* shard_of_slot's arithmetic names the shard whose range holds the slot
 * (shard_init_one's ranges), for shard counts up to 1100 and the largest
 * ones (all 16384 counts were checked once; a second each). */
static void test_slot_ranges(void) {
    for (int n = 1; n <= HASH_SLOTS; n = n == 1100 ? HASH_SLOTS - 2 : n + 1) {
        long bad = 0;
        for (unsigned sl = 0; sl < HASH_SLOTS; sl++) {
            unsigned long id = ((unsigned long)(sl + 1) * (unsigned long)n - 1) / HASH_SLOTS;
            if (!((unsigned long)id * HASH_SLOTS / n <= sl && sl < (id + 1) * HASH_SLOTS / n)) bad++;
        }
        CHECK_EQ_LL(bad, 0);
    }
    for (unsigned sl = 0; sl < HASH_SLOTS; sl++) {
        shard *s = shard_of_slot(sl);
        CHECK(s->first_slot <= sl && sl <= s->last_slot);
    }
}

int main(void) {
    setup();
    test_slot_ranges();
    long long n0 = -1;
    uint64_t empty = digest(&n0);
    CHECK_EQ_LL(n0, 0);
    build(0);
    long long n;
    uint64_t d = digest(&n);
    CHECK_EQ_LL(n, 14);
    CHECK(d != empty);
    /* held lock: digest does not lock again */
    shard_lock(S());
    CHECK(db_shard_digest(S(), NULL) == d);
    shard_unlock(S());

    test_sensitivity();
    CHECK(digest(NULL) == d);
    test_export_clear_apply(d, n);

    /* 5. the same contents, another order, no SWAPDB */
    shard_lock(S());
    db_shard_clear(S());
    shard_unlock(S());
    build(1);
    long long n1;
    CHECK(digest(&n1) == d);
    CHECK_EQ_LL(n1, n);
    teardown();
    return UNIT_DONE("test-db-shard");
}
