/* server.c -- the global server state, logging and clocks.
 *
 * Log lines look like redis-server's ("pid:M 22 Nov 2026 09:00:00.123 * msg")
 * so operators' habits and log scrapers carry over. The role character is
 * 'M' (master) for the main thread and workers. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include "server.h"

struct rowan_server server;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

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
