/* server.c -- the global server state, logging and clocks.
 *
 * Log lines look like redis-server's ("pid:M 22 Nov 2026 09:00:00.123 * msg")
 * so operators' habits and log scrapers carry over. The role character is
 * 'M' (master) for the main thread and workers. */
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include "server.h"

/* The process's first server object: rowan-server's (main.c) and the one
 * every thread no server created sees (see server.h). */
static struct rowan_server first_server;
__thread struct rowan_server *rowan_self = &first_server;
/* Process-wide: every server of the process appends to its log file under
 * this one lock. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* The state of the modules without threads (server.h), before anything
 * (the configuration first) can use it. */
void server_state_new(void) {
    cluster_state_new();
    zk_state_new();
    coldread_state_new();
    listen_state_new();
    shard_state_new();
    bigval_state_new();
    evict_state_new();
    db_state_new();
    pauth_state_new();
    tls_state_new();
    config_state_new();
    peer_tls_state_new();
}

void server_state_free(void) {
    cluster_state_free();
    zk_state_free();
    coldread_state_free();
    listen_state_free();
    evict_state_free();   /* its rings are per shard */
    shard_state_free();
    bigval_state_free();
    db_state_free();
    pauth_state_free();
    tls_state_free();
    config_state_free();
    peer_tls_state_free();
}

/* The first object has its state before main, so the tools and unit tests
 * that use the core without starting a server (rowan-check-pool) find it. */
__attribute__((constructor)) static void first_server_state(void) { server_state_new(); }

struct thread_start { struct rowan_server *self; void *(*fn)(void *); void *arg; };

static void *thread_trampoline(void *p) {
    struct thread_start ts = *(struct thread_start *)p;
    free(p);
    rowan_self = ts.self;
    return ts.fn(ts.arg);
}

int rowan_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    struct thread_start *ts = malloc(sizeof(*ts));
    if (!ts) return -1;
    ts->self = rowan_self;
    ts->fn = fn;
    ts->arg = arg;
    int rc = pthread_create(t, attr, thread_trampoline, ts);
    if (rc != 0) free(ts);
    return rc;
}

int64_t ustime(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

int64_t mstime(void) { return ustime() / 1000; }

int64_t monotonic_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void serverLog(int level, const char *fmt, ...) {
    if (level < server.cfg.loglevel) return;
    static const char marks[] = ".-*#";
    char msg[2048], tbuf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    size_t off = strftime(tbuf, sizeof(tbuf), "%d %b %Y %H:%M:%S.", &tm);
    snprintf(tbuf + off, sizeof(tbuf) - off, "%03d", (int)(tv.tv_usec / 1000));
    const char *path = server.cfg.logfile;
    pthread_mutex_lock(&log_lock);
    FILE *fp = (path && path[0]) ? fopen(path, "a") : stdout;
    if (fp) {
        fprintf(fp, "%d:M %s %c %s\n", (int)getpid(), tbuf, marks[level & 3], msg);
        fflush(fp);
        if (fp != stdout) fclose(fp);
    }
    pthread_mutex_unlock(&log_lock);
}
