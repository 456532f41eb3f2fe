/*
 * vector_rate.h - whether this core multiplies 512-bit vectors at full rate.
 *
 * AVX-512 runs at two speeds: some cores issue a 512-bit FMA through two
 * 256-bit halves (AMD Zen 4: the same floats per cycle as AVX2), others at
 * full width (Intel's server cores, AMD Zen 5: twice AVX2's). Which one a
 * core is decides whether our AVX-512 convolution kernels beat OpenBLAS
 * when OpenBLAS runs AVX2 kernels (its core type pinned to Haswell, as on
 * the machines this project runs on), so the convolution rules ask.
 */
#ifndef MX_OPS_VECTOR_RATE_H
#define MX_OPS_VECTOR_RATE_H

#include <stdbool.h>

/* Floats per second of 512-bit FMAs over those of 256-bit FMAs on the
 * calling thread's core: about 2 on a full-width unit, about 1 on a
 * split one, 0 without AVX-512F (or AVX2 + FMA). Measured once per process
 * (about a millisecond: independent FMA chains, best of several rounds,
 * so a busy machine slows both widths alike) and kept. */
double mx_avx512_fma_rate(void);

/* mx_avx512_fma_rate() >= 1.5. */
bool mx_avx512_full_width(void);

#endif /* MX_OPS_VECTOR_RATE_H */
