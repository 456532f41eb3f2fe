/*
 * transpose16.h - the 16 x 16 float transpose in registers shared by the
 * Winograd and direct convolution kernels (GCC vector extensions: inlined
 * into each caller's target, one zmm per row on AVX-512).
 */
#ifndef MX_OPS_TRANSPOSE16_H
#define MX_OPS_TRANSPOSE16_H

#include <stdint.h>

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* r[i][j] <- r[j][i]: four perfect shuffles of the rows. */
static inline __attribute__((always_inline)) void transpose16(v16f *r)
{
#pragma GCC unroll 4
    for (int stage = 0; stage < 4; stage++) {
        v16f t[16];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            t[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            t[2 * i + 1] = __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        }
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) r[i] = t[i];
    }
}

#endif /* MX_OPS_TRANSPOSE16_H */
