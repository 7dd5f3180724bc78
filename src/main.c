/* main.c -- rowan-server's entry point: configure, recover, serve, stop.
 *
 *   rowan-server [rowan.conf] [--option value ...]
 *
 * Startup order matters: the pool is recovered completely (indexes, shard
 * versions) before any listener exists, so no client can observe a partial
 * state; the cleaner starts after recovery, because it relies on the live
 * byte counts recovery computes. Signals are handled by a dedicated thread
 * with sigwait, since a signal handler may not touch libevent. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clean.h"
#include "cluster.h"
#include "commands.h"
#include "config.h"
#include "db.h"
#include "member.h"
#include "pool.h"
#include "reconcile.h"
#include "recovery.h"
#include "repl.h"
#include "server.h"
#include "shard.h"
#include "syncer.h"
#include "util.h"
#include "worker.h"

static void die(const char *fmt, const char *msg) {
    serverLog(LL_WARNING, fmt, msg);
    fprintf(stderr, fmt, msg);
    fputc('\n', stderr);
    exit(1);
}

static int mkdir_p(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void configure(int argc, char **argv) {
    char err[512];
    config_init_defaults();
    int start = 1;
    if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
        char *abs = realpath(argv[1], NULL);
        if (!abs) die("Can't open the config file '%s'", argv[1]);
        server.cfg.conf_file = abs;
        if (config_load_file(abs, err, sizeof(err)) != 0) die("Bad config file: %s", err);
        start = 2;
    }
    if (config_parse_argv(argc, argv, start, err, sizeof(err)) != 0) die("Bad arguments: %s", err);
    if (server.cfg.workers <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        server.cfg.workers = n > 0 ? (int)n : 1;
    }
    if (server.cfg.databases > SHARD_MAX_DBS) die("databases must be at most %s", "256");
}

static void open_pool(void) {
    char err[512], path[4096];
    if (mkdir_p(server.cfg.dir) != 0) die("Can't create dir '%s'", server.cfg.dir);
    snprintf(path, sizeof(path), "%s/%s", server.cfg.dir, server.cfg.pool_file);
    server.pool = pool_open(path, (uint64_t)server.cfg.pool_size, err, sizeof(err));
    if (!server.pool) die("Can't open the pool: %s", err);
    serverLog(LL_NOTICE, "Pool %s: %llu bytes, %u segments, %s", path,
              (unsigned long long)pool_size(server.pool), pool_nsegs(server.pool),
              pool_is_pmem(server.pool) ? "persistent memory (pmem_persist)"
                                        : "not pmem (pmem_msync group commit)");
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

static void write_pidfile(void) {
    if (!server.cfg.pidfile || !server.cfg.pidfile[0]) return;
    FILE *fp = fopen(server.cfg.pidfile, "w");
    if (!fp) return;
    fprintf(fp, "%d\n", (int)getpid());
    fclose(fp);
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-v") || !strcmp(argv[1], "--version"))) {
        printf("Rowan server v=%s (Redis protocol %s)\n", ROWAN_VERSION, ROWAN_REDIS_COMPAT_VERSION);
        return 0;
    }
    configure(argc, argv);
    start_signal_thread();
    server.start_time = time(NULL);
    server.start_ms = mstime();
    if (!realpath("/proc/self/exe", server.executable)) server.executable[0] = 0;
    make_run_id();
    serverLog(LL_NOTICE, "Rowan %s starting, pid=%d, %d workers, %d shards", ROWAN_VERSION,
              (int)getpid(), server.cfg.workers, server.cfg.shards);
    open_pool();
    server.nworkers = server.cfg.workers;
    shard_init_all(server.cfg.shards, server.cfg.workers, server.cfg.databases);
    char cerr[512];
    if (cluster_set_zookeeper(server.cfg.zookeeper, cerr, sizeof(cerr)) != 0 ||
        cluster_set_name(server.cfg.cluster_name, cerr, sizeof(cerr)) != 0 ||
        cluster_setup(server.cfg.shards, server.cfg.replicas, cerr, sizeof(cerr)) != 0)
        die("Bad cluster configuration: %s", cerr);
    db_init_indexes();
    types_register();
    char err[512];
    if (recovery_run(err, sizeof(err)) != 0) die("Recovery failed: %s", err);
    if (cluster_managed() && member_join(err, sizeof(err)) != 0) die("Cluster: %s", err);
    reconcile_init();
    clean_start();
    repl_init();
    if (workers_create(server.cfg.workers, err, sizeof(err)) != 0) die("%s", err);
    if (repl_start(err, sizeof(err)) != 0) die("%s", err);
    member_start();
    write_pidfile();
    serverLog(LL_NOTICE, "Server initialized");
    serverLog(LL_NOTICE, "Ready to accept connections tcp on %s:%d", server.cfg.bind, server.cfg.port);
    workers_start();
    workers_join();
    member_stop();
    repl_stop();
    syncer_stop();
    clean_stop();
    db_free_all();
    pool_close(server.pool);
    if (server.cfg.pidfile && server.cfg.pidfile[0]) unlink(server.cfg.pidfile);
    serverLog(LL_WARNING, "Rowan is now ready to exit, bye bye...");
    return 0;
}
