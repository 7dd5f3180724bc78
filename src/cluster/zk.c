/* zk.c -- the ZooKeeper session (see zk.h).
 *
 * One handle for the process, replaced when its session expires (a
 * ZooKeeper session cannot be revived: its ephemeral znodes are gone and
 * every watch with it). The session watcher runs on the client library's
 * completion thread; it only records state and wakes zk_wait callers, so
 * no Rowan lock is ever taken there.
 *
 * zk_alive_us exists for the configuration manager's own fencing: it
 * grants leases only while it has heard from ZooKeeper recently, so a CM
 * that was paused past its session's end (and replaced) grants nothing on
 * waking before it learns that it lost the election. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* the synchronous calls exist in the multithreaded client only */
#define THREADED 1
#include <zookeeper/zookeeper.h>
#include "server.h"
#include "zk.h"
#include "deadline.h"

/* This file's state, one per server (server.h). */
struct zk_state {
    /* The handle: every call holds hl shared while it uses zh; replacing
     * or closing it holds hl exclusive, so no call uses a closed handle.
     * Events have their own mutex (mu), which the ZooKeeper thread's
     * watcher takes: zookeeper_close joins that thread, so it must never
     * run under mu. */
    pthread_rwlock_t hl;
    zhandle_t *zh;
    pthread_mutex_t mu;          /* events */
    pthread_cond_t cv;           /* events for zk_wait */
    char hosts[1024];
    int session_ms;
    _Atomic uint64_t session_id;
    _Atomic int64_t alive_us;
    _Atomic int connected, expired;
    uint64_t events;             /* under mu */
};
#define zk (*server.zk_st)

void zk_state_new(void) {
    struct zk_state *st = calloc(1, sizeof(*st));
    if (!st) abort();
    pthread_rwlock_init(&st->hl, NULL);
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    server.zk_st = st;
}

void zk_state_free(void) {
    struct zk_state *st = server.zk_st;   /* zk_close ran (member_stop) */
    if (!st) return;
    pthread_rwlock_destroy(&st->hl);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
    server.zk_st = NULL;
}

static void wake(void) {
    pthread_mutex_lock(&zk.mu);
    zk.events++;
    pthread_cond_broadcast(&zk.cv);
    pthread_mutex_unlock(&zk.mu);
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh, (void)path;
    rowan_self = ctx;   /* the library's thread: the session's server (server.h) */
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE) {
            atomic_store(&zk.connected, 1);
            atomic_store(&zk.alive_us, monotonic_us());
        } else if (state == ZOO_EXPIRED_SESSION_STATE) {
            atomic_store(&zk.connected, 0);
            atomic_store(&zk.expired, 1);
        } else {
            atomic_store(&zk.connected, 0);
        }
    }
    wake();
}

static zhandle_t *handle_new(void) {
    atomic_store(&zk.connected, 0);
    atomic_store(&zk.expired, 0);
    zhandle_t *h = zookeeper_init(zk.hosts, watcher, zk.session_ms, NULL, rowan_self, 0);
    if (h) atomic_fetch_add(&zk.session_id, 1);
    return h;
}

/* The live handle, replaced first if its session expired, with hl held
 * shared (handle_done releases it); NULL (nothing held) when closed. */
static zhandle_t *handle(void) {
    if (atomic_load(&zk.expired)) {
        pthread_rwlock_wrlock(&zk.hl);
        if (zk.zh && atomic_load(&zk.expired)) {
            serverLog(LL_WARNING, "ZooKeeper: session expired; opening a new one");
            zookeeper_close(zk.zh);
            zk.zh = handle_new();
        }
        pthread_rwlock_unlock(&zk.hl);
    }
    pthread_rwlock_rdlock(&zk.hl);
    if (!zk.zh) {
        pthread_rwlock_unlock(&zk.hl);
        return NULL;
    }
    return zk.zh;
}

static void handle_done(void) { pthread_rwlock_unlock(&zk.hl); }

static int rc_of(int rc) {
    if (rc == ZOK) {
        atomic_store(&zk.alive_us, monotonic_us());
        return ZK_OK;
    }
    if (rc == ZNONODE) return ZK_NONODE;
    if (rc == ZNODEEXISTS) return ZK_EXISTS;
    if (rc == ZBADVERSION) return ZK_BADVERSION;
    if (rc == ZSESSIONEXPIRED) atomic_store(&zk.expired, 1);
    return ZK_FAIL;
}

const char *zk_errstr(int rc) {
    switch (rc) {
    case ZK_OK: return "ok";
    case ZK_NONODE: return "no such znode";
    case ZK_EXISTS: return "znode exists";
    case ZK_BADVERSION: return "znode changed meanwhile";
    default: return "ZooKeeper unreachable or session lost";
    }
}

int zk_open(const char *hosts, int session_ms, int timeout_ms, char *err, size_t errlen) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    zoo_set_log_stream(devnull);
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    snprintf(zk.hosts, sizeof(zk.hosts), "%s", hosts);
    zk.session_ms = session_ms;
    pthread_rwlock_wrlock(&zk.hl);
    zk.zh = handle_new();
    int ok = zk.zh != NULL;
    pthread_rwlock_unlock(&zk.hl);
    if (!ok) {
        snprintf(err, errlen, "zookeeper %s: %s", hosts, strerror(errno));
        return -1;
    }
    int64_t until = monotonic_us() + (int64_t)timeout_ms * 1000;
    while (!atomic_load(&zk.connected) && monotonic_us() < until) zk_wait(0, 50);
    if (!atomic_load(&zk.connected)) {
        snprintf(err, errlen, "cannot reach ZooKeeper at %s within %d ms", hosts, timeout_ms);
        return -1;
    }
    return 0;
}

void zk_close(void) {
    pthread_rwlock_wrlock(&zk.hl);
    if (zk.zh) zookeeper_close(zk.zh);
    zk.zh = NULL;
    pthread_rwlock_unlock(&zk.hl);
}

uint64_t zk_session_id(void) {
    if (handle()) handle_done();
    return atomic_load(&zk.session_id);
}

int64_t zk_alive_us(void) { return atomic_load(&zk.alive_us); }

int zk_ensure(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        int rc = zk_create(buf, NULL, 0, 0, NULL, 0);
        if (rc != ZK_OK && rc != ZK_EXISTS) return rc;
        *p = c;
        if (!c) return ZK_OK;
    }
}

int zk_create(const char *path, const void *data, size_t len, int flags, char *out, size_t outlen) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    int mode = 0;
    if ((flags & ZK_EPHEMERAL) && (flags & ZK_SEQUENTIAL)) mode = ZOO_EPHEMERAL_SEQUENTIAL;
    else if (flags & ZK_EPHEMERAL) mode = ZOO_EPHEMERAL;
    else if (flags & ZK_SEQUENTIAL) mode = ZOO_PERSISTENT_SEQUENTIAL;
    char tmp[1024];
    int rc = zoo_create(h, path, data, data ? (int)len : -1, &ZOO_OPEN_ACL_UNSAFE, mode,
                        out ? out : tmp, out ? (int)outlen : (int)sizeof(tmp));
    handle_done();
    return rc_of(rc);
}

int zk_get(const char *path, int watch, char **data, size_t *len, int *version) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    int cap = 1 << 16;
    for (;;) {
        char *buf = malloc((size_t)cap + 1);
        int n = cap;
        struct Stat st;
        int rc = zoo_get(h, path, watch, buf, &n, &st);
        if (rc != ZOK) {
            handle_done();
            free(buf);
            return rc_of(rc);
        }
        if (st.dataLength > cap) {   /* did not fit: read again, large enough */
            free(buf);
            cap = st.dataLength;
            continue;
        }
        handle_done();
        if (n < 0) n = 0;
        buf[n] = 0;
        *data = buf;
        if (len) *len = (size_t)n;
        if (version) *version = st.version;
        return rc_of(rc);
    }
}

int zk_set(const char *path, const void *data, size_t len, int version, int *new_version) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    struct Stat st;
    int rc = zoo_set2(h, path, data, (int)len, version, &st);
    handle_done();
    if (rc == ZOK && new_version) *new_version = st.version;
    return rc_of(rc);
}

int zk_set_guarded(const char *path, const void *data, size_t len, int version,
                   const char *guard, int *new_version) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    zoo_op_t ops[2];
    zoo_op_result_t res[2];
    struct Stat st;
    zoo_check_op_init(&ops[0], guard, -1);
    zoo_set_op_init(&ops[1], path, data, (int)len, version, &st);
    int rc = zoo_multi(h, 2, ops, res);
    handle_done();
    if (rc == ZOK && new_version) *new_version = st.version;
    return rc_of(rc);
}

int zk_delete(const char *path, int version) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    int rc = zoo_delete(h, path, version);
    handle_done();
    return rc_of(rc);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int zk_children(const char *path, int watch, char ***names, int *n) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    struct String_vector sv = {0, NULL};
    int rc = zoo_get_children(h, path, watch, &sv);
    handle_done();
    if (rc != ZOK) return rc_of(rc);
    char **out = calloc((size_t)(sv.count ? sv.count : 1), sizeof(char *));
    for (int i = 0; i < sv.count; i++) out[i] = strdup(sv.data[i]);
    qsort(out, (size_t)sv.count, sizeof(char *), cmp_names);
    *names = out;
    *n = sv.count;
    deallocate_String_vector(&sv);
    return rc_of(rc);
}

void zk_free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int zk_watch_exists(const char *path, int *exists) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    struct Stat st;
    int rc = zoo_wexists(h, path, watcher, NULL, &st);
    handle_done();
    if (rc == ZOK) *exists = 1;
    else if (rc == ZNONODE) *exists = 0;
    return rc == ZNONODE ? rc_of(ZOK) : rc_of(rc);
}

uint64_t zk_client_session(void) {
    zhandle_t *h = handle();
    if (!h) return 0;
    const clientid_t *id = zoo_client_id(h);
    uint64_t v = id ? (uint64_t)id->client_id : 0;
    handle_done();
    return v;
}

int zk_owner(const char *path, uint64_t *owner) {
    zhandle_t *h = handle();
    if (!h) return ZK_FAIL;
    struct Stat st;
    int rc = zoo_exists(h, path, 0, &st);
    handle_done();
    if (rc == ZOK) *owner = (uint64_t)st.ephemeralOwner;
    return rc_of(rc);
}

uint64_t zk_wait(uint64_t seen, int timeout_ms) {
    struct timespec ts = deadline_in_ms(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&zk.mu);
    while (zk.events == seen && pthread_cond_timedwait(&zk.cv, &zk.mu, &ts) != ETIMEDOUT) {}
    uint64_t now = zk.events;
    pthread_mutex_unlock(&zk.mu);
    return now;
}

void zk_poke(void) { wake(); }
