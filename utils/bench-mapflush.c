/* bench-mapflush.c -- CPU per group commit: stores through a shared mapping
 * of the file, or pwrite, each followed by fdatasync (issue 14, fourth pass).
 *
 * Rowan encodes log entries straight into its MAP_SHARED pool and flushes
 * with fdatasync of the file. Each flush writes the dirty pages back and
 * write-protects every page it wrote (the next store to it faults again),
 * and since the workers are threads of one process, write-protecting a
 * page flushes the TLB of every CPU running another of them (an IPI). The
 * alternative is to write the appended bytes with pwrite into the file
 * (the mapping then read-only). This measures what each costs per flush,
 * with no server around it: `threads` threads each append `bytes` in
 * 128-byte records to a region of their own (and read the mapping once per
 * record, as index lookups do), then flush, `flushes` times; the modes run
 * interleaved for `rounds` rounds on a fresh zero-filled file each time.
 *
 * Built by make (utils/bench-mapflush); run (the file goes where the pools
 * go, /tmp by default):
 *   utils/bench-mapflush [dir] [threads] [bytes per flush] [flushes] [rounds]
 *
 * Reported per mode, median over the rounds: process CPU-microseconds per
 * flush (utime+stime, all threads), page faults and context switches per
 * flush, and flushes per second (all threads). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define REGION (64u << 20)    /* bytes of file per thread */
#define RECORD 128
#define MAXROUNDS 64

enum { MAPPED, PWRITE, NMODES };
static const char *mode_name[NMODES] = {"mapped stores + fdatasync", "pwrite + fdatasync"};

struct run {
    int fd, mode;
    uint8_t *map;
    size_t bytes;
    int flushes;
};

struct arg {
    struct run *r;
    long id;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double tv(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

static void *appender(void *p) {
    struct arg *a = p;
    struct run *r = a->r;
    size_t base = (size_t)a->id * REGION, pos = 0;
    uint8_t *buf = malloc(r->bytes);
    volatile uint8_t sink = 0;
    for (int i = 0; i < r->flushes; i++) {
        for (size_t o = 0; o + RECORD <= r->bytes; o += RECORD) {
            uint8_t rec[RECORD];
            memset(rec, (int)(i + o), RECORD);
            if (r->mode == MAPPED)
                memcpy(r->map + base + pos + o, rec, RECORD);
            else
                memcpy(buf + o, rec, RECORD);
            sink += r->map[base + (pos + o) / 2];
        }
        if (r->mode == PWRITE && pwrite(r->fd, buf, r->bytes, (off_t)(base + pos)) != (ssize_t)r->bytes) {
            perror("pwrite");
            exit(1);
        }
        if (fdatasync(r->fd) != 0) {
            perror("fdatasync");
            exit(1);
        }
        pos += r->bytes;
        if (pos + r->bytes > REGION)
            pos = 0;
    }
    free(buf);
    return NULL;
}

struct result { double cpu_us, faults, ctx, rate; };

static struct result one(const char *dir, int mode, int threads, size_t bytes, int flushes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/bench-mapflush.%d", dir, (int)getpid());
    struct run r = {.mode = mode, .bytes = bytes, .flushes = flushes};
    r.fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (r.fd < 0) {
        perror(path);
        exit(1);
    }
    size_t size = (size_t)threads * REGION;
    /* real zeroes in 16 KiB writes, as the pool's zero-fill makes them */
    static uint8_t zero[16384];
    for (size_t o = 0; o < size; o += sizeof zero)
        if (pwrite(r.fd, zero, sizeof zero, (off_t)o) != (ssize_t)sizeof zero) {
            perror("pwrite");
            exit(1);
        }
    fdatasync(r.fd);
    r.map = mmap(NULL, size, mode == MAPPED ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, r.fd, 0);
    if (r.map == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    madvise(r.map, size, MADV_RANDOM);
    pthread_t t[64];
    struct arg a[64];
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        a[i] = (struct arg){&r, i};
        pthread_create(&t[i], NULL, appender, &a[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double el = now() - t0;
    getrusage(RUSAGE_SELF, &u1);
    munmap(r.map, size);
    close(r.fd);
    unlink(path);
    double n = (double)threads * flushes;
    struct result res;
    res.cpu_us = (tv(u1.ru_utime) - tv(u0.ru_utime) + tv(u1.ru_stime) - tv(u0.ru_stime)) / n * 1e6;
    res.faults = (double)(u1.ru_minflt + u1.ru_majflt - u0.ru_minflt - u0.ru_majflt) / n;
    res.ctx = (double)(u1.ru_nvcsw + u1.ru_nivcsw - u0.ru_nvcsw - u0.ru_nivcsw) / n;
    res.rate = n / el;
    return res;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    size_t bytes = argc > 3 ? (size_t)atol(argv[3]) : 40960;
    int flushes = argc > 4 ? atoi(argv[4]) : 1000;
    int rounds = argc > 5 ? atoi(argv[5]) : 3;
    if (threads < 1 || threads > 64 || bytes < RECORD || bytes > REGION / 4 || flushes < 1 ||
        rounds < 1 || rounds > MAXROUNDS) {
        fprintf(stderr, "usage: %s [dir] [threads 1-64] [bytes per flush] [flushes] [rounds]\n", argv[0]);
        return 2;
    }
    static struct result res[NMODES][MAXROUNDS];
    for (int k = 0; k < rounds; k++)
        for (int m = 0; m < NMODES; m++) {
            int mode = k % 2 ? NMODES - 1 - m : m;
            res[mode][k] = one(dir, mode, threads, bytes, flushes);
            fprintf(stderr, "  round %d: %-26s %6.1f CPU-us/flush  %.2f faults  %.2f ctx switches  %.0f flushes/s\n",
                    k + 1, mode_name[mode], res[mode][k].cpu_us, res[mode][k].faults, res[mode][k].ctx,
                    res[mode][k].rate);
        }
    printf("%d threads, %zu bytes appended per flush (%zu-byte records), %d flushes each, "
           "median of %d interleaved rounds\n\n", threads, bytes, (size_t)RECORD, flushes, rounds);
    printf("| mode | CPU us per flush | page faults per flush | context switches per flush | flushes/s |\n");
    printf("|---|---|---|---|---|\n");
    for (int m = 0; m < NMODES; m++) {
        double c[MAXROUNDS], f[MAXROUNDS], x[MAXROUNDS], r[MAXROUNDS];
        for (int k = 0; k < rounds; k++) {
            c[k] = res[m][k].cpu_us;
            f[k] = res[m][k].faults;
            x[k] = res[m][k].ctx;
            r[k] = res[m][k].rate;
        }
        printf("| %s | %.1f | %.2f | %.2f | %.0f |\n", mode_name[m], median(c, rounds), median(f, rounds),
               median(x, rounds), median(r, rounds));
    }
    return 0;
}
