/* boot.c -- one server's life: configure, listen, load, serve, stop.
 *
 * rowan_server_start(argc, argv) starts a server from rowan-server's
 * arguments ([rowan.conf] [--option value ...]) and returns once it serves;
 * rowan_server_wait waits for its shutdown and tears it down. rowan-server
 * (src/main.c) runs the process's one server with them; a test may run
 * several in one process (tests/unit/test-twoservers.c), each its own
 * object (server.h) with its own ports and pool.
 *
 * Startup order matters:
 *   1. configuration, checked whole (cluster lines included);
 *   2. supervised / daemonize: fork() only works before any thread exists;
 *   3. the listening sockets (client port, replication port): a port in use
 *      or a bad `bind` address stops startup before the pool is touched,
 *      whatever the `dir`; then the pidfile;
 *   4. the pool, shards and workers; the workers start serving at once, in
 *      loading mode: every command that would read the data set is answered
 *      -LOADING (Redis's reply while it loads), INFO shows the progress;
 *   5. recovery rebuilds the data set; loading ends when it returns, so no
 *      client can observe a partial state; connections accepted meanwhile
 *      simply go on;
 *   6. the cleaner (it relies on the live byte counts recovery computes) and
 *      replication start; the server is ready (READY=1 under systemd).
 * Signals are handled by a dedicated thread with sigwait, since a signal
 * handler may not touch libevent; the signals, daemonizing, the pidfile and
 * the supervisor belong to the process, so only the process's server
 * (ROWAN_START_PROCESS) has them.
 *
 * Failure. A bad configuration or a failed step (a port in use, a pool that
 * cannot be created) ends the start, not the process: every step returns
 * -1 with its reason (logged, and copied to the caller's err), and start
 * tears down what the steps before it built (teardown: the same path as a
 * shutdown, each part released only if it was made), so the caller may
 * start another server in the same process. rowan-server (main.c) prints
 * the reason and exits 1, as redis-server does.
 *
 * Stopping. rowan_server_wait tears the server down the same way, then
 * (for an embedded server; rowan-server's process exits next) frees its
 * object and every state it owned (free_states), so a process may start
 * and stop servers in a loop (tests/unit/test-serverlife.c). */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "blog.h"
#include "bus.h"
#include "clean.h"
#include "coldread.h"
#include "cluster.h"
#include "cm.h"
#include "config.h"
#include "control.h"
#include "daemon.h"
#include "db.h"
#include "delta.h"
#include "digest.h"
#include "edge.h"
#include "member.h"
#include "pool.h"
#include "reconcile.h"
#include "recovery.h"
#include "repl.h"
#include "server.h"
#include "shard.h"
#include "syncer.h"
#include "tls.h"
#include "strutil.h"
#include "types.h"
#include "worker.h"
#include "native.h"
#include "boot.h"

/* A step failed: its reason (logged) into err; -1. No argument may point
 * into err (steps keep their details in buffers of their own). */
static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    serverLog(LL_WARNING, "%s", err);
    return -1;
}

/* mkdir -p; 0, or -1 with errno set. */
static int mkdir_p(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(tmp, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int configure(int argc, char **argv, char *err, size_t errlen) {
    char why[512];
    config_init_defaults();
    int start = 1;
    if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
        char *abs = realpath(argv[1], NULL);
        if (!abs)
            return fail(err, errlen, "Can't open the config file '%s': %s", argv[1], strerror(errno));
        server.cfg.conf_file = abs;
        if (config_load_file(abs, why, sizeof(why)) != 0)
            return fail(err, errlen, "Bad config file: %s", why);
        start = 2;
    }
    if (config_parse_argv(argc, argv, start, why, sizeof(why)) != 0)
        return fail(err, errlen, "Bad arguments: %s", why);
    if (edge->configure(why, sizeof(why)) != 0) return fail(err, errlen, "Bad config file: %s", why);
    if (server.cfg.workers <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        server.cfg.workers = n > 0 ? (int)n : 1;
    }
    if (server.cfg.databases > SHARD_MAX_DBS)
        return fail(err, errlen, "databases must be at most %d", SHARD_MAX_DBS);
    shard_init_all(server.cfg.shards, server.cfg.workers, server.cfg.databases);
    if (cluster_set_zookeeper(server.cfg.zookeeper, why, sizeof(why)) != 0 ||
        cluster_set_name(server.cfg.cluster_name, why, sizeof(why)) != 0 ||
        cluster_setup(server.cfg.shards, server.cfg.replicas, why, sizeof(why)) != 0)
        return fail(err, errlen, "Bad cluster configuration: %s", why);
    return 0;
}

/* Bind every port this server listens on (see the file comment, step 3). */
static int open_listeners(char *err, size_t errlen) {
    char why[512];
    /* TLS first: a bad certificate or key stops the server with its reason. */
    if (server.cfg.tls_port > 0 && tls_configure(why, sizeof(why)) != 0)
        return fail(err, errlen, "Failed to configure TLS: %s", why);
    if (workers_listen(why, sizeof(why)) != 0) {
        /* redis-server's two lines: the reason, then the verdict */
        serverLog(LL_WARNING, "Warning: %s", why);
        return fail(err, errlen, "%s\nFailed listening on port %d (tcp), aborting.", why,
                    server.cfg.port);
    }
    if (cluster_enabled() && control_listen(why, sizeof(why)) != 0)
        return fail(err, errlen, "%s", why);
    if (native_listen(why, sizeof(why)) != 0)   /* native-port (rdma/native.c) */
        return fail(err, errlen, "%s", why);
    return 0;
}

static int open_pool(char *err, size_t errlen) {
    char why[512], path[4096];
    snprintf(path, sizeof(path), "%s/%s", server.cfg.dir, server.cfg.pool_file);
    /* The one rule for the pool's size (db_min_pool_size): checked on
     * pool-size before a new pool (or its dir) is created, on an existing
     * pool's own size once it is open (it may come from a run with fewer
     * workers). */
    uint64_t need = db_min_pool_size(server.cfg.workers);
    struct stat st;
    if (stat(path, &st) != 0 && (uint64_t)server.cfg.pool_size < need)
        return fail(err, errlen, "pool-size %lld is too small: with %d workers a pool needs at least %llu bytes "
            "(%llumb)", server.cfg.pool_size, server.cfg.workers, (unsigned long long)need,
            (unsigned long long)(need >> 20));
    if (mkdir_p(server.cfg.dir) != 0)
        return fail(err, errlen, "Can't create dir '%s': %s", server.cfg.dir, strerror(errno));
    /* A truncated pool is opened for salvage: recovery decides what to do. */
    server.pool = pool_open(path, (uint64_t)server.cfg.pool_size, POOL_OPEN_SALVAGE, why,
                            sizeof(why));
    if (!server.pool) return fail(err, errlen, "Can't open the pool: %s", why);
    if (pool_size(server.pool) < need)
        return fail(err, errlen, "The pool %s has %llu bytes: with %d workers a pool needs at least %llu bytes "
            "(%llumb); start with fewer workers", path,
            (unsigned long long)pool_size(server.pool), server.cfg.workers,
            (unsigned long long)need, (unsigned long long)(need >> 20));
    serverLog(LL_NOTICE, "Pool %s: %llu bytes, %u segments, %s", path,
              (unsigned long long)pool_size(server.pool), pool_nsegs(server.pool),
              pool_is_pmem(server.pool) ? "persistent memory (pmem_persist)"
                                        : "not pmem (fdatasync group commit)");
    return 0;
}

static void make_run_id(void) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 40; i++) server.run_id[i] = hex[rnd64() & 15];
    server.run_id[40] = 0;
}

static void *signal_main(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) != 0) continue;
        serverLog(LL_WARNING, "Received %s scheduling shutdown...", sig == SIGINT ? "SIGINT" : "SIGTERM");
        server_request_shutdown();
    }
    return NULL;
}

static void start_signal_thread(void) {
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t t;
    pthread_create(&t, NULL, signal_main, &set);
    pthread_detach(t);
}

/* Step 5, the loading phase: from loading_begin the workers serve, in
 * loading mode (-LOADING), until loading_end. Recovery runs in between. */
static void loading_begin(void) {
    server.loading_start_time = time(NULL);
    atomic_store(&server.loading, 1);
    workers_start();
}

static void loading_end(void) {
    /* Release: a worker that sees loading 0 sees the whole data set. */
    atomic_store_explicit(&server.loading, 0, memory_order_release);
}

/* A fresh server object: the process's first one for rowan-server (so the
 * threads libraries create see it, server.h), a new one for each other. */
static struct rowan_server *server_object(int flags) {
    static _Atomic int first_taken;
    if ((flags & ROWAN_START_PROCESS) && !atomic_exchange(&first_taken, 1)) return rowan_self;
    return calloc(1, sizeof(struct rowan_server));
}

/* Steps 1 to 6 (the file comment) for the calling thread's server. */
static int start_steps(int argc, char **argv, int flags, char *err, size_t errlen) {
    char why[2048];   /* recovery names each damaged region */
    server.owns_process = (flags & ROWAN_START_PROCESS) != 0;
    resp_edge_install();   /* the client edge the core calls (edge.h) */
    if (!server.cluster_st) server_state_new();   /* the first object has it (server.c) */
    if (!server.edge_state) server.edge_state = edge->state_new();
    /* The state the server object owns for the modules with threads
     * (server.h), before anything (the configuration too) can use it. */
    digest_init();
    control_init();
    syncer_init();
    clean_init();
    member_init();
    cm_init();
    bus_init();
    reconcile_alloc();
    if (configure(argc, argv, err, errlen) != 0) return -1;
    if (flags & ROWAN_START_PROCESS) {
        int supervised = daemon_supervise();
        if (server.cfg.daemonize && !supervised) daemon_detach();
        start_signal_thread();
    }
    server.start_time = time(NULL);
    server.start_ms = mstime();
    if (!realpath("/proc/self/exe", server.executable)) server.executable[0] = 0;
    make_run_id();
    serverLog(LL_NOTICE, "Rowan %s starting, pid=%d, %d workers, %d shards", ROWAN_VERSION,
              (int)getpid(), server.cfg.workers, server.cfg.shards);
    config_warn_no_effect();
    if (open_listeners(err, errlen) != 0) return -1;
    if (flags & ROWAN_START_PROCESS) daemon_pidfile_write();
    if (open_pool(err, errlen) != 0) return -1;
    server.nworkers = server.cfg.workers;
    db_init_indexes();
    repl_init();
    types_init();     /* the collection classes recovery applies effects with */
    if (edge->start(why, sizeof(why)) != 0) return fail(err, errlen, "%s", why);
    if (workers_create(server.cfg.workers, why, sizeof(why)) != 0)
        return fail(err, errlen, "%s", why);
    native_attach();
    if (flags & ROWAN_START_PROCESS) daemon_started();
    loading_begin();
    int rc = recovery_run(why, sizeof(why));
    if (rc < 0) return fail(err, errlen, "Recovery failed: %s", why);
    if (rc == 0) {
        /* Before anything is served: the cluster membership (managed mode),
         * the shards that must first be checked against their replicas
         * (they answer -TRYAGAIN, reconcile.h), the cleaner (it relies on
         * the live byte counts recovery computed). */
        if (cluster_managed() && member_join(why, sizeof(why)) != 0)
            return fail(err, errlen, "Cluster: %s", why);
        reconcile_init();
        delta_init();
        clean_start();
    }
    if (rc == 1) {
        loading_end();
        serverLog(LL_WARNING, "Recovery interrupted by the shutdown request; nothing was served");
        return 0;
    }
    /* Replication and the membership run before loading ends: a write
     * served earlier would be acknowledged by a node whose links to its
     * backups do not exist yet. */
    if (repl_start(why, sizeof(why)) != 0) return fail(err, errlen, "%s", why);
    member_start();
    loading_end();
    serverLog(LL_NOTICE, "Server initialized");
    if (server.cfg.port > 0)
        serverLog(LL_NOTICE, "Ready to accept connections tcp on %s:%d", server.cfg.bind,
                  server.cfg.port);
    if (server.cfg.tls_port > 0)
        serverLog(LL_NOTICE, "Ready to accept connections tls on %s:%d", server.cfg.bind,
                  server.cfg.tls_port);
    if (flags & ROWAN_START_PROCESS) {
        daemon_notify("STATUS=Ready to accept connections\n");
        daemon_notify("READY=1\n");
    }
    return 0;
}

/* Stop and release what the calling thread's server holds, whatever step
 * its start reached: each part checks whether it was made. The workers
 * must have been asked to stop (shutdown_asap). */
static void teardown(void) {
    workers_join();
    native_stop();
    if (server.owns_process) daemon_notify("STOPPING=1\n");
    member_stop();
    repl_stop();
    syncer_stop();
    clean_stop();
    coldread_stop();   /* no reader touches the mapping from now on */
    db_free_all();
    pool_close(server.pool);
    server.pool = NULL;
    if (server.owns_process) daemon_pidfile_remove();
}

/* Free every state the calling thread's server owns (after teardown).
 * The process's first object keeps its own state: rowan-server is about
 * to exit, and tools bound to it may still look. */
static void free_states(void) {
    if (server.edge_state) edge->state_free();
    server.edge_state = NULL;
    digest_free();
    control_free();
    syncer_free();
    clean_free();
    member_free();
    cm_free();
    bus_free();
    reconcile_free();
    repl_free();
    blog_free();
    server_state_free();
    workers_free();   /* last: coldread's events live on the workers' bases */
}

struct rowan_server *rowan_server_start(int argc, char **argv, int flags, char *err,
                                        size_t errlen) {
    struct rowan_server *caller = rowan_self;
    struct rowan_server *self = server_object(flags);
    if (!self) {
        snprintf(err, errlen, "Out of memory");
        return NULL;
    }
    rowan_self = self;
    if (start_steps(argc, argv, flags, err, errlen) != 0) {
        server_request_shutdown();   /* workers that run (a start failing late) stop */
        teardown();
        serverLog(LL_WARNING, "Rowan did not start");
        if (!server.owns_process) free_states();   /* rowan-server exits next */
        rowan_self = caller;
        if (self != rowan_self && !self->owns_process) free(self);
        return NULL;
    }
    rowan_self = caller;
    return self;
}

void rowan_server_wait(struct rowan_server *s) {
    struct rowan_server *caller = rowan_self;
    rowan_self = s;
    teardown();
    serverLog(LL_WARNING, "Rowan is now ready to exit, bye bye...");
    int embedded = !server.owns_process;   /* rowan-server's exits next: nothing to free */
    if (embedded) free_states();
    rowan_self = caller;
    if (embedded) free(s);
}

void rowan_server_stop(struct rowan_server *s) {
    struct rowan_server *caller = rowan_self;
    rowan_self = s;
    server_request_shutdown();
    rowan_self = caller;
    rowan_server_wait(s);
}
