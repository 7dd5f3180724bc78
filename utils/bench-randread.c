/* bench-randread -- random 4 KiB reads the pool's device allows, by queue depth.
 *
 * A cold GET of a pool on disk costs one random read of about one page
 * (issue 14), so the GET rate of data larger than memory is bounded by the
 * device's random-read IOPS at the queue depth the server keeps in flight.
 * This measures that bound with no server in the way: QD threads each issue
 * O_DIRECT pread()s of BS bytes at random aligned offsets of one file, for a
 * fixed time; QD threads = QD reads in flight. Reported per QD: reads/s and
 * the latency p50/p99.
 *
 * Built by make (utils/bench-randread):
 *   utils/bench-randread [-f FILE] [-m FILE_MB] [-s SECONDS] [-b BS] [QD ...]
 *
 * FILE (default /tmp/bench-randread.dat, i.e. the disk the tests' pools are
 * on) is written once with random bytes if shorter than FILE_MB (2048) and
 * removed at the end unless -k. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXLAT 400000

static int fd;
static size_t bs = 4096;
static uint64_t nblocks;
static volatile int stop;

struct reader {
    pthread_t th;
    uint64_t seed, n;
    uint32_t *lat; /* microseconds */
    size_t nlat;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    void *buf;
    if (posix_memalign(&buf, 4096, bs))
        return NULL;
    while (!stop) {
        r->seed = r->seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t blk = (r->seed >> 17) % nblocks;
        double t = now();
        if (pread(fd, buf, bs, (off_t)(blk * bs)) != (ssize_t)bs) {
            perror("pread");
            break;
        }
        if (r->nlat < MAXLAT)
            r->lat[r->nlat++] = (uint32_t)((now() - t) * 1e6);
        r->n++;
    }
    free(buf);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *file = "/tmp/bench-randread.dat";
    size_t mb = 2048;
    double secs = 5;
    int keep = 0, opt;
    while ((opt = getopt(argc, argv, "f:m:s:b:k")) != -1) {
        if (opt == 'f') file = optarg;
        else if (opt == 'm') mb = strtoul(optarg, NULL, 10);
        else if (opt == 's') secs = atof(optarg);
        else if (opt == 'b') bs = strtoul(optarg, NULL, 10);
        else if (opt == 'k') keep = 1;
        else return 2;
    }
    struct stat st;
    if (stat(file, &st) != 0 || (size_t)st.st_size < mb << 20) {
        int w = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char *chunk = malloc(1 << 20);
        for (size_t i = 0; i < 1 << 20; i++) chunk[i] = (char)rand();
        for (size_t i = 0; w >= 0 && i < mb; i++)
            if (write(w, chunk, 1 << 20) != 1 << 20) { perror("write"); return 1; }
        fsync(w);
        close(w);
        free(chunk);
    }
    fd = open(file, O_RDONLY | O_DIRECT);
    if (fd < 0) { perror(file); return 1; }
    nblocks = ((uint64_t)mb << 20) / bs;
    printf("| QD | reads/s | p50 us | p99 us |\n|---|---|---|---|\n");
    int dflt[] = {1, 8, 32};
    int nqd = optind < argc ? argc - optind : 3;
    for (int q = 0; q < nqd; q++) {
        int qd = optind < argc ? atoi(argv[optind + q]) : dflt[q];
        struct reader *rs = calloc(qd, sizeof *rs);
        stop = 0;
        for (int i = 0; i < qd; i++) {
            rs[i].seed = 0x9e3779b97f4a7c15ULL * (i + 1) + (uint64_t)getpid();
            rs[i].lat = malloc(MAXLAT * sizeof(uint32_t));
            pthread_create(&rs[i].th, NULL, reader_main, &rs[i]);
        }
        double t0 = now();
        usleep((useconds_t)(secs * 1e6));
        stop = 1;
        uint64_t total = 0;
        size_t nl = 0;
        for (int i = 0; i < qd; i++) {
            pthread_join(rs[i].th, NULL);
            total += rs[i].n;
            nl += rs[i].nlat;
        }
        double el = now() - t0;
        uint32_t *all = malloc((nl + 1) * sizeof(uint32_t));
        size_t k = 0;
        for (int i = 0; i < qd; i++) {
            memcpy(all + k, rs[i].lat, rs[i].nlat * sizeof(uint32_t));
            k += rs[i].nlat;
            free(rs[i].lat);
        }
        qsort(all, nl, sizeof(uint32_t), cmp_u32);
        printf("| %d | %.0f | %u | %u |\n", qd, total / el, nl ? all[nl / 2] : 0,
               nl ? all[nl * 99 / 100] : 0);
        fflush(stdout);
        free(all);
        free(rs);
    }
    close(fd);
    if (!keep) unlink(file);
    return 0;
}
