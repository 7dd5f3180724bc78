/* standalone.c -- a small self-contained mutation fuzzer, the main() of
 * every fuzz target built with -DFUZZ_STANDALONE (gcc has no libFuzzer):
 *     fuzz-xxx [-seed=N] [-seconds=N] [-runs=N] [-max_len=N] corpus_dir|file...
 *
 * Inputs from the corpus directories (in name order, so runs repeat) and
 * files, or the target's built-in seeds when there are none, form a pool.
 * Every seed is run once; then, until -seconds (or -runs) is reached, a
 * pool input is mutated one to a dozen times by the target's mutate
 * function and run. Without coverage feedback, keeping one mutant in
 * eight in the pool (the oldest mutants replaced once it is full, the
 * seeds never) is the random walk that reaches deeper states. The seed is
 * fixed by default so runs are reproducible; the last line is
 * "<name>: N execs, 0 crashes".
 *
 * Every input runs from an exact-size allocation, so ASan sees a read past
 * its end. A failing input is written to <name>-crash.bin (or
 * $FUZZ_CRASH_FILE): by ASan's death callback, or by the target calling
 * FUZZ_SAVE_CRASH() before it aborts. Files given alone (no directory)
 * are replayed, not fuzzed: that is how a crash is reproduced. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "standalone.h"

#ifdef FUZZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define POOL_MAX 1024

static const fuzz_target *target;
static const uint8_t *cur_input;
static size_t cur_len;

/* Every input in the pool, seeds first. */
static fuzz_input *pool;
static size_t npool, cappool, nseeds;

void fuzz_save_crash(void) {
    static int saved;
    const char *path = getenv("FUZZ_CRASH_FILE");
    char def[256];
    if (saved || cur_input == NULL) return;
    saved = 1;
    if (path == NULL) {
        snprintf(def, sizeof(def), "%s-crash.bin", target->name);
        path = def;
    }
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(cur_input, 1, cur_len, f);
        fclose(f);
        fprintf(stderr, "%s: failing input (%zu bytes) saved to %s\n", target->name, cur_len, path);
    }
}

void fuzz_pool_add(const uint8_t *p, size_t n) {
    if (npool == cappool) {
        cappool = cappool ? cappool * 2 : 64;
        pool = realloc(pool, cappool * sizeof(*pool));
        if (!pool) abort();
    }
    pool[npool].p = malloc(n ? n : 1);
    if (n) memcpy(pool[npool].p, p, n);
    pool[npool].n = n;
    npool++;
}

static const fuzz_input *pool_pick(void) {
    return &pool[target->rnd_below(npool)];
}

void fuzz_delete_range(uint8_t *buf, size_t *n) {
    size_t len = *n;
    if (len == 0) return;
    size_t pos = target->rnd_below(len);
    size_t k = 1 + target->rnd_below(len - pos < 16 ? len - pos : 16);
    memmove(buf + pos, buf + pos + k, len - pos - k);
    *n = len - k;
}

void fuzz_splice(uint8_t *buf, size_t *n, size_t cap) {
    const fuzz_input *o = pool_pick();
    size_t keep = target->rnd_below(*n + 1);
    size_t from = target->rnd_below(o->n + 1);
    size_t k = o->n - from;
    if (keep + k > cap) k = cap - keep;
    memcpy(buf + keep, o->p + from, k);
    *n = keep + k;
}

static void load_file(const char *path, size_t max_len) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc(max_len ? max_len : 1);
    if (f == NULL) {
        free(buf);
        return;
    }
    size_t n = fread(buf, 1, max_len, f);
    fclose(f);
    fuzz_pool_add(buf, n);
    free(buf);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Load every regular file in dir, in name order (for reproducibility). */
static void load_dir(const char *dir, size_t max_len) {
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;

    if (d == NULL) return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            names = realloc(names, cap * sizeof(*names));
            if (!names) abort();
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) load_file(path, max_len);
        free(names[i]);
    }
    free(names);
}

/* Run one input from an exact-size allocation, so ASan sees any read past
 * its end. */
static void run_one(const uint8_t *p, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, p, n);
    cur_input = copy;
    cur_len = n;
    LLVMFuzzerTestOneInput(copy, n);
    cur_input = NULL;
    free(copy);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Keep a mutant as a new starting point: appended while there is room,
 * then in place of the oldest mutant. */
static void keep_mutant(const uint8_t *buf, size_t n) {
    static size_t next_slot;
    if (nseeds >= POOL_MAX) return;
    if (npool < POOL_MAX) {
        fuzz_pool_add(buf, n);
        return;
    }
    fuzz_input *slot = &pool[nseeds + next_slot];
    next_slot = (next_slot + 1) % (POOL_MAX - nseeds);
    free(slot->p);
    slot->p = malloc(n ? n : 1);
    if (n) memcpy(slot->p, buf, n);
    slot->n = n;
}

int fuzz_main(const fuzz_target *t, int argc, char **argv) {
    unsigned long long seed = 12345, runs = 0, execs = 0;
    double seconds = 10;
    size_t max_len = t->max_len;
    int nfiles = 0;

    target = t;
#ifdef FUZZ_ASAN
    __sanitizer_set_death_callback(fuzz_save_crash);
#endif
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-seed=", 6) == 0) seed = strtoull(argv[i] + 6, NULL, 10);
        else if (strncmp(argv[i], "-seconds=", 9) == 0) seconds = atof(argv[i] + 9);
        else if (strncmp(argv[i], "-max_total_time=", 16) == 0) seconds = atof(argv[i] + 16);
        else if (strncmp(argv[i], "-runs=", 6) == 0) runs = strtoull(argv[i] + 6, NULL, 10);
        else if (strncmp(argv[i], "-max_len=", 9) == 0) max_len = strtoull(argv[i] + 9, NULL, 10);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [-seed=N] [-seconds=N] [-runs=N] [-max_len=N] corpus_dir|file...\n",
                    argv[0]);
            return 2;
        } else {
            struct stat st;
            if (stat(argv[i], &st) != 0) {
                fprintf(stderr, "%s: cannot read %s\n", t->name, argv[i]);
                return 2;
            }
            if (S_ISDIR(st.st_mode)) {
                load_dir(argv[i], max_len);
            } else {
                load_file(argv[i], 1 << 24);
                nfiles++;
            }
        }
    }
    if (max_len < 16) max_len = 16;

    /* Only files given: replay them, no fuzzing (reproducing a crash). */
    if (nfiles > 0 && (size_t)nfiles == npool) {
        for (size_t i = 0; i < npool; i++) run_one(pool[i].p, pool[i].n);
        printf("%s: replayed %zu input(s), 0 crashes\n", t->name, npool);
        return 0;
    }
    if (npool == 0) t->seed();
    nseeds = npool;
    printf("%s: seed=%llu seconds=%g seeds=%zu max_len=%zu\n", t->name, seed, seconds, nseeds,
           max_len);
    fflush(stdout);

    for (size_t i = 0; i < nseeds; i++, execs++) run_one(pool[i].p, pool[i].n);

    uint8_t *buf = malloc(max_len);
    double deadline = now_seconds() + seconds;
    for (;;) {
        if (runs ? execs >= runs : ((execs & 63) == 0 && now_seconds() >= deadline)) break;
        /* The fuzz loop's generator state is kept here, apart from the
         * per-input one LLVMFuzzerTestOneInput reseeds. */
        *t->rnd_state = seed;
        const fuzz_input *in = pool_pick();
        size_t n = in->n < max_len ? in->n : max_len;
        memcpy(buf, in->p, n);
        int steps = 1 + (int)t->rnd_below(t->rnd_below(2) ? 4 : 12);
        for (int s = 0; s < steps; s++) t->mutate(buf, &n, max_len);
        if (t->rnd_below(8) == 0) keep_mutant(buf, n);
        seed = *t->rnd_state;
        run_one(buf, n);
        execs++;
    }
    free(buf);
    for (size_t i = 0; i < npool; i++) free(pool[i].p);
    free(pool);
    printf("%s: %llu execs, 0 crashes\n", t->name, execs);
    return 0;
}
