/* bench-pingpong.c -- blocking round trips, RESP/TCP (hiredis) against the
 * native path (librowan's blocking API), on one rowan-server.
 *
 * rowan-bench drives many connections from one libevent loop, so its
 * client rarely sleeps per reply and its latency at pipeline 1 is mostly
 * queueing. This measures the other case: each of T threads owns one
 * connection and waits for every reply (redisCommand / rowanCommand: GET
 * of a loaded key, or SET), as an application thread does. Per transport
 * it reports ops/s, p50 and p99 of the round trip, and this process's CPU
 * per operation (getrusage); the server's CPU per operation when its pid
 * is given. Transports run interleaved, R rounds, medians; native runs
 * once with librowan's busy-poll off (its default) and once on
 * (rowanSetBusyPoll, -b microseconds, 50), so the two client waits compare
 * in one run.
 *
 * Build: `make` builds build/<variant>/bench-pingpong (librowan, hiredis).
 * Usage: bench-pingpong -p RESP_PORT -n NATIVE_PORT [-s SERVER_PID] [-t T]
 *        [-d SECONDS] [-r ROUNDS] [-k KEYS] [-w get|set] [-b BUSY_POLL_US] */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rowan.h"

enum { T_RESP, T_NATIVE_SLEEP, T_NATIVE_SPIN, T_N };
static const char *tname[T_N] = {"resp", "native (sleep)", "native (busy-poll)"};

static int resp_port, native_port, threads = 1, keys = 100000, do_set, spin_us = 50;
static double seconds = 3;
static long server_pid;

typedef struct {
    int transport;
    unsigned seed;
    long ops;
    unsigned long long hits, misses;   /* librowan's busy-poll: waits it ended, ran out */
    double *lat;                /* us, per operation (ring of cap) */
    long cap;
    int err;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_self(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* utime + stime of the server, from /proc (-1: no pid). */
static double cpu_of(long pid) {
    if (pid <= 0) return -1;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long ut = 0, st = 0;
    /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void *run(void *arg) {
    job *j = arg;
    redisContext *rc = NULL;
    rowanContext *nc = NULL;
    if (j->transport == T_RESP) {
        rc = redisConnect("127.0.0.1", resp_port);
        if (!rc || rc->err) { j->err = 1; return NULL; }
    } else {
        nc = rowanConnect("127.0.0.1", native_port);
        if (!nc || nc->err) { j->err = 1; return NULL; }
        rowanSetBusyPoll(nc, j->transport == T_NATIVE_SPIN ? (unsigned)spin_us : 0);
    }
    char key[32], val[100];
    memset(val, 'v', sizeof val);
    double end = now_s() + seconds;
    for (long i = 0;; i++) {
        if ((i & 63) == 0 && now_s() >= end) break;
        snprintf(key, sizeof key, "user%d", (int)(rand_r(&j->seed) % (unsigned)keys));
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        redisReply *r;
        if (rc)
            r = do_set ? redisCommand(rc, "SET %s %b", key, val, sizeof val)
                       : redisCommand(rc, "GET %s", key);
        else
            r = do_set ? rowanCommand(nc, "SET %s %b", key, val, sizeof val)
                       : rowanCommand(nc, "GET %s", key);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (!r) { j->err = 1; break; }
        freeReplyObject(r);
        j->lat[j->ops % j->cap] = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
        j->ops++;
    }
    if (rc) redisFree(rc);
    if (nc) {
        rowanStats st;
        rowanGetStats(nc, &st);
        j->hits = st.spin_hits;
        j->misses = st.spin_misses;
        rowanFree(nc);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct { double ops_s, p50, p99, ccpu, scpu; } result;

static int one(int transport, int rnd, result *out) {
    job *js = calloc((size_t)threads, sizeof *js);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    for (int i = 0; i < threads; i++) {
        js[i].transport = transport;
        js[i].seed = (unsigned)(rnd * 1000 + i + 1);
        js[i].cap = 1 << 20;
        js[i].lat = malloc(sizeof(double) * (size_t)js[i].cap);
    }
    double c0 = cpu_self(), s0 = cpu_of(server_pid), t0 = now_s();
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, run, &js[i]);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double wall = now_s() - t0, ccpu = cpu_self() - c0, s1 = cpu_of(server_pid);
    long ops = 0, n = 0;
    unsigned long long hits = 0, misses = 0;
    int err = 0;
    for (int i = 0; i < threads; i++) {
        ops += js[i].ops;
        hits += js[i].hits;
        misses += js[i].misses;
        n += js[i].ops < js[i].cap ? js[i].ops : js[i].cap;
        err |= js[i].err;
    }
    double *all = malloc(sizeof(double) * (size_t)(n ? n : 1));
    long k = 0;
    for (int i = 0; i < threads; i++) {
        long m = js[i].ops < js[i].cap ? js[i].ops : js[i].cap;
        memcpy(all + k, js[i].lat, sizeof(double) * (size_t)m);
        k += m;
        free(js[i].lat);
    }
    qsort(all, (size_t)n, sizeof *all, cmp);
    out->ops_s = ops / wall;
    out->p50 = n ? all[n / 2] : 0;
    out->p99 = n ? all[n * 99 / 100] : 0;
    out->ccpu = ops ? ccpu / ops * 1e6 : 0;
    out->scpu = (s0 >= 0 && s1 >= 0 && ops) ? (s1 - s0) / ops * 1e6 : -1;
    fprintf(stderr, "bench-pingpong: round %d %-18s %8.0f ops/s p50 %7.1f us p99 %8.1f us "
            "client %.2f server %.2f CPU-s per M ops, busy-poll hits %llu misses %llu%s\n",
            rnd + 1, tname[transport], out->ops_s, out->p50, out->p99, out->ccpu, out->scpu,
            hits, misses, err ? " (ERRORS)" : "");
    free(all);
    free(js);
    free(th);
    return err ? -1 : 0;
}

static double median(double *xs, int n) {
    qsort(xs, (size_t)n, sizeof *xs, cmp);
    return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

int main(int argc, char **argv) {
    int rounds = 3, opt;
    while ((opt = getopt(argc, argv, "p:n:s:t:d:r:k:w:b:")) != -1) {
        switch (opt) {
        case 'p': resp_port = atoi(optarg); break;
        case 'n': native_port = atoi(optarg); break;
        case 's': server_pid = atol(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'k': keys = atoi(optarg); break;
        case 'w': do_set = !strcmp(optarg, "set"); break;
        case 'b': spin_us = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s -p RESP_PORT -n NATIVE_PORT [-s SERVER_PID] [-t THREADS] "
                    "[-d SECONDS] [-r ROUNDS] [-k KEYS] [-w get|set] [-b BUSY_POLL_US]\n", argv[0]);
            return 2;
        }
    }
    if (!resp_port || !native_port || threads < 1 || rounds < 1 || keys < 1) {
        fprintf(stderr, "bench-pingpong: -p and -n are required\n");
        return 2;
    }
    result (*res)[T_N] = calloc((size_t)rounds, sizeof *res);
    int failed = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < T_N; i++) {
            int t = r % 2 ? T_N - 1 - i : i;   /* the order alternates per round */
            failed |= one(t, r, &res[r][t]) != 0;
        }
    printf("blocking round trips (%s), %d thread%s with one connection each, %.0f s per run, "
           "%d interleaved rounds (medians)\n\n", do_set ? "SET of 100 bytes" : "GET", threads,
           threads > 1 ? "s" : "", seconds, rounds);
    printf("| transport | ops/s | p50 us | p99 us | client CPU-s per M ops | server CPU-s per M "
           "ops | p50 vs resp | server CPU per op vs resp |\n|---|---|---|---|---|---|---|---|\n");
    double m[T_N][5];
    for (int t = 0; t < T_N; t++) {
        double xs[5][rounds];
        for (int r = 0; r < rounds; r++) {
            xs[0][r] = res[r][t].ops_s;
            xs[1][r] = res[r][t].p50;
            xs[2][r] = res[r][t].p99;
            xs[3][r] = res[r][t].ccpu;
            xs[4][r] = res[r][t].scpu;
        }
        for (int k = 0; k < 5; k++) m[t][k] = median(xs[k], rounds);
        printf("| %s | %.0f | %.1f | %.1f | %.2f | %.2f | %.2fx | %.2fx |\n", tname[t], m[t][0],
               m[t][1], m[t][2], m[t][3], m[t][4], m[t][1] / m[T_RESP][1],
               m[t][4] / m[T_RESP][4]);
    }
    free(res);
    return failed;
}
