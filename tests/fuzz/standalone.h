/* standalone.h -- the mutation-fuzzer driver shared by the fuzz targets
 * (fuzz-resp.c, fuzz-dgram.c) when they are built with -DFUZZ_STANDALONE
 * (gcc, no libFuzzer). tests/fuzz/standalone.c has the design.
 *
 * A target keeps what is its own -- LLVMFuzzerTestOneInput, its built-in
 * seeds, its dictionary and mutations -- and hands them to fuzz_main() in a
 * fuzz_target. Under libFuzzer standalone.c is not linked and
 * FUZZ_SAVE_CRASH() does nothing. */
#ifndef ROWAN_FUZZ_STANDALONE_H
#define ROWAN_FUZZ_STANDALONE_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* FUZZ_ASAN: built with AddressSanitizer (gcc or clang). */
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif

typedef struct fuzz_input {
    uint8_t *p;
    size_t n;
} fuzz_input;

typedef struct fuzz_target {
    const char *name;       /* "fuzz-resp": starts every line printed */
    size_t max_len;         /* the default -max_len: mutants never grow past it */
    /* Adds the built-in seeds with fuzz_pool_add(); called when no corpus
     * input was given (or the corpus directories were empty). */
    void (*seed)(void);
    /* One random mutation of buf[0..*n), capacity cap. */
    void (*mutate)(uint8_t *buf, size_t *n, size_t cap);
    /* The target's random generator. The driver draws from it too, and
     * keeps its own state across inputs: LLVMFuzzerTestOneInput reseeds
     * the generator from every input it runs. */
    uint64_t *rnd_state;
    size_t (*rnd_below)(size_t n);
} fuzz_target;

void fuzz_pool_add(const uint8_t *p, size_t n);
/* Mutations of buf[0..*n) that every target has, drawing from its
 * generator. */
void fuzz_delete_range(uint8_t *buf, size_t *n);   /* up to 16 bytes */
void fuzz_splice(uint8_t *buf, size_t *n, size_t cap);   /* our prefix, a pool input's suffix */
void fuzz_save_crash(void);               /* write the running input to a file */
int fuzz_main(const fuzz_target *t, int argc, char **argv);

#ifdef FUZZ_STANDALONE
#define FUZZ_SAVE_CRASH() fuzz_save_crash()
#else
#define FUZZ_SAVE_CRASH() ((void)0)
#endif

#endif
