/*
 * fuzz.h - helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c,
 * docs/fuzzing.md). A harness feeds one input to a library entry point
 * through the public API, in memory where the API offers it, and checks
 * the properties the API promises (round trips give back what went in).
 * A broken promise aborts, which libFuzzer reports as a crash and saves.
 */
#ifndef MX_FUZZ_H
#define MX_FUZZ_H

#include "base/base.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A violated property: print what and where, then abort (a libFuzzer crash). */
#define FUZZ_CHECK(cond, ...)                                                         \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, " [last error: %s]\n", mx_last_error());                  \
            abort();                                                                  \
        }                                                                             \
    } while (0)

/* A call that must succeed (the input it gets was made by the library). */
#define FUZZ_OK(expr) FUZZ_CHECK((expr) == MX_OK, "%s", "call failed")

/* An anonymous in-memory file holding data, for entry points that only take
 * a path: *path becomes "/proc/self/fd/N". Returns the fd (close it), or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t path_size)
{
    int fd = memfd_create("mx-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

/* Little-endian readers for the harnesses that carve inputs into fields. */
typedef struct fuzz_input {
    const uint8_t *data;
    size_t size;
} fuzz_input;

static inline uint32_t fuzz_take_u8(fuzz_input *in)
{
    if (!in->size) return 0;
    uint32_t v = in->data[0];
    in->data++;
    in->size--;
    return v;
}

static inline uint32_t fuzz_take_u16(fuzz_input *in)
{
    uint32_t lo = fuzz_take_u8(in);
    return lo | fuzz_take_u8(in) << 8;
}

#endif /* MX_FUZZ_H */
