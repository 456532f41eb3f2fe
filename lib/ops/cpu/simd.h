/*
 * simd.h - the element-wise kernels' vector math, defined once for three
 * widths and picked at run time:
 *   mx4   4 floats, GCC/Clang vector extensions on any target (SSE2, NEON):
 *         the portable fallback, built without target options;
 *   mx8   8 floats, AVX2 + FMA   (x86 only, __attribute__((target)));
 *   mx16  16 floats, AVX-512F    (x86 only).
 * Each width gets the same helpers, named <width>_<name>: load / store,
 * masked partial load / store, select, max, fma, even / odd lanes and
 * their inverse, exp, expm1, tanh and the logistic function. An op file
 * writes its kernel once as a macro of (P, W, TARGET), instantiates it with
 * MX_SIMD_INSTANTIATE and calls the widest variant the CPU runs through
 * MX_SIMD_DISPATCH.
 *
 * Every lane is computed by the same instructions whatever its position in
 * a vector, and tails go through masked loads and stores instead of scalar
 * libm code, so a kernel's results do not depend on how its range is split
 * across threads (only on the width the CPU picked). The "portable" width
 * has no FMA, so the polynomials round slightly differently there.
 *
 * Accuracy (float): exp within 1 ulp of exp for -87 <= x <= 88.37 (Cephes'
 * expf; 0 below -87, saturating at 2.4e38 above 88.37, NaN stays NaN);
 * expm1 within 1.5 ulp (the same reduction, 2^n expm1(r) + 2^n - 1);
 * tanh within 2.5 ulp (2e-7 relative) through expm1; the logistic function
 * within 2.5 ulp. (Measured with FMA; the portable width rounds the
 * polynomials' products separately, a fraction of an ulp more.)
 *
 * MX_SIMD=portable|avx2|avx512 in the environment caps the width (tests run
 * every variant on one machine this way).
 */
#ifndef MX_OPS_SIMD_H
#define MX_OPS_SIMD_H

#include "parallel/parallel.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define MX_SIMD_X86 1
#include <immintrin.h>
#endif

#define MX_SIMD_INLINE static inline __attribute__((always_inline))
#define MX_SIMD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define MX_SIMD_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))

enum { MX_SIMD_PORTABLE = 0, MX_SIMD_AVX2 = 1, MX_SIMD_AVX512 = 2 };

/* The widest variant this CPU runs (MX_SIMD_*), capped by $MX_SIMD. Cheap
 * enough to call per kernel invocation; read-only. */
static inline int mx_simd_level(void)
{
    int level = MX_SIMD_PORTABLE;
#ifdef MX_SIMD_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) level = MX_SIMD_AVX2;
    if (level == MX_SIMD_AVX2 && __builtin_cpu_supports("avx512f")) level = MX_SIMD_AVX512;
#endif
    const char *cap = getenv("MX_SIMD");
    if (cap && *cap) {
        int c = !strcmp(cap, "portable") || !strcmp(cap, "sse") ? MX_SIMD_PORTABLE
                : !strcmp(cap, "avx2")                          ? MX_SIMD_AVX2
                                                                : MX_SIMD_AVX512;
        if (level > c) level = c;
    }
    return level;
}

/* Instantiates DEF(P, W, TARGET) for every width this target can build. */
#ifdef MX_SIMD_X86
#define MX_SIMD_INSTANTIATE(DEF) DEF(mx4, 4, ) DEF(mx8, 8, MX_SIMD_TARGET_AVX2) DEF(mx16, 16, MX_SIMD_TARGET_AVX512)
/* Calls NAME_mx16/_mx8/_mx4(...) per level (from mx_simd_level). */
#define MX_SIMD_DISPATCH(level, NAME, ...)                                                                          \
    ((level) >= MX_SIMD_AVX512 ? NAME##_mx16(__VA_ARGS__)                                                           \
     : (level) == MX_SIMD_AVX2 ? NAME##_mx8(__VA_ARGS__)                                                            \
                               : NAME##_mx4(__VA_ARGS__))
#else
#define MX_SIMD_INSTANTIATE(DEF) DEF(mx4, 4, )
#define MX_SIMD_DISPATCH(level, NAME, ...) ((void)(level), NAME##_mx4(__VA_ARGS__))
#endif

/* Element-wise work over [0, n) on the kernel pool: pieces of at least
 * min_piece elements, multiples of 64; anything under two pieces runs on
 * the calling thread (a hand-over costs microseconds). */
static inline void mx_simd_parallel_for(mx_threadpool *pool, int64_t n, int64_t min_piece, mx_range_fn fn, void *arg)
{
    if (n < 2 * min_piece) pool = NULL;
    int64_t grain = mx_parallel_grain(pool, n, 4, min_piece);
    grain = (grain + 63) & ~(int64_t)63;
    mx_parallel_for(pool, n, grain, fn, arg);
}

/* A job's typed kernel over [0, n) on the operator's pool (in pieces of at
 * least PIECE elements): defines PREFIX_kernel, PREFIX_call, PREFIX_range
 * and PREFIX_run(ctx, kernel, job, n). The element-wise operators share it;
 * the file using it includes ops/op.h. */
#define MX_SIMD_JOB_RUNNER(PREFIX, JOB, PIECE)                                                                        \
    typedef void (*PREFIX##_kernel)(const JOB *j, int64_t lo, int64_t hi);                                           \
    typedef struct PREFIX##_call {                                                                                   \
        PREFIX##_kernel fn;                                                                                          \
        const JOB *job;                                                                                              \
    } PREFIX##_call;                                                                                                 \
    static void PREFIX##_range(void *arg, int64_t lo, int64_t hi, int worker)                                       \
    {                                                                                                                \
        (void)worker;                                                                                                \
        const PREFIX##_call *c = arg;                                                                                \
        c->fn(c->job, lo, hi);                                                                                       \
    }                                                                                                                \
    static void PREFIX##_run(const mx_op_ctx *ctx, PREFIX##_kernel fn, const JOB *j, int64_t n)                     \
    {                                                                                                                \
        PREFIX##_call c = {fn, j};                                                                                   \
        mx_simd_parallel_for(mx_op_pool(ctx), n, PIECE, PREFIX##_range, &c);                                         \
    }

/* dst[i] = EXPR or dst[i] += EXPR for i in [lo, hi); EXPR reads element i. */
#define MX_SIMD_MAP(dst, lo, hi, add, EXPR)                                                                           \
    do {                                                                                                             \
        if (add)                                                                                                     \
            for (int64_t i = (lo); i < (hi); i++) (dst)[i] += (EXPR);                                                \
        else                                                                                                         \
            for (int64_t i = (lo); i < (hi); i++) (dst)[i] = (EXPR);                                                 \
    } while (0)

/* ------------------------------------------------------ per-width basics */

/* Types, fma and masked partial load / store (n in [0, W]; the rest of the
 * lanes read as 0 and are not written). */
typedef float mx4_f __attribute__((vector_size(16)));
typedef int32_t mx4_i __attribute__((vector_size(16)));
typedef uint32_t mx4_u __attribute__((vector_size(16)));

MX_SIMD_INLINE mx4_f mx4_fma(mx4_f a, mx4_f b, mx4_f c) { return a * b + c; }

MX_SIMD_INLINE mx4_f mx4_load_part(const float *p, int64_t n)
{
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < n; i++) b[i] = p[i];
    mx4_f v;
    memcpy(&v, b, sizeof(v));
    return v;
}

MX_SIMD_INLINE void mx4_store_part(float *p, mx4_f v, int64_t n)
{
    float b[4];
    memcpy(b, &v, sizeof(v));
    for (int64_t i = 0; i < n; i++) p[i] = b[i];
}

/* P##_store_nt(p, v, nt): with nt, a vector filling whole cache lines
 * goes past the caches (non-temporal; P##_store else): for outputs far
 * larger than the caches, whose lines are then not first read for
 * ownership. A kernel that streamed calls mx_simd_store_fence() before
 * its output is handed on. The portable width stores plainly. */
MX_SIMD_INLINE void mx4_store_nt(float *p, mx4_f v, bool nt)
{
    (void)nt;
    memcpy(p, &v, sizeof(v));
}

/* Outputs this large stream (they leave the caches before the next layer
 * reads them). */
#define MX_SIMD_STREAM_MIN_BYTES ((int64_t)4 << 20)

static inline void mx_simd_store_fence(void)
{
#ifdef __SSE__
    _mm_sfence();
#endif
}

MX_SIMD_INLINE mx4_f mx4_even(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 0, 2, 4, 6); }
MX_SIMD_INLINE mx4_f mx4_odd(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 1, 3, 5, 7); }
MX_SIMD_INLINE mx4_f mx4_zip_lo(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 0, 4, 1, 5); }
MX_SIMD_INLINE mx4_f mx4_zip_hi(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 2, 6, 3, 7); }
MX_SIMD_INLINE mx4_f mx4_next(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 1, 2, 3, 4); }
MX_SIMD_INLINE mx4_f mx4_prev(mx4_f a, mx4_f b) { return __builtin_shufflevector(a, b, 3, 4, 5, 6); }
MX_SIMD_INLINE mx4_i mx4_iota(void) { return (mx4_i){0, 1, 2, 3}; }

/* P##_max(a, b) = a > b ? a : b per lane, so a NaN in a is ignored
 * (MXNet's `if (v > max) max = v`): x86's maxps exactly. */
#ifdef __SSE__
MX_SIMD_INLINE mx4_f mx4_max(mx4_f a, mx4_f b) { return (mx4_f)_mm_max_ps((__m128)a, (__m128)b); }
#else
MX_SIMD_INLINE mx4_f mx4_max(mx4_f a, mx4_f b)
{
    mx4_i m = a > b;
    return (mx4_f)((m & (mx4_i)a) | (~m & (mx4_i)b));
}
#endif

#ifdef MX_SIMD_X86
typedef float mx8_f __attribute__((vector_size(32)));
typedef int32_t mx8_i __attribute__((vector_size(32)));
typedef uint32_t mx8_u __attribute__((vector_size(32)));

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_i mx8_iota(void) { return (mx8_i){0, 1, 2, 3, 4, 5, 6, 7}; }

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_fma(mx8_f a, mx8_f b, mx8_f c)
{
    return (mx8_f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_load_part(const float *p, int64_t n)
{
    mx8_i m = mx8_iota() < (int32_t)n;
    return (mx8_f)_mm256_maskload_ps(p, (__m256i)m);
}

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE void mx8_store_part(float *p, mx8_f v, int64_t n)
{
    mx8_i m = mx8_iota() < (int32_t)n;
    _mm256_maskstore_ps(p, (__m256i)m, (__m256)v);
}

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE void mx8_store_nt(float *p, mx8_f v, bool nt)
{
    if (nt && ((uintptr_t)p & 31) == 0) _mm256_stream_ps(p, (__m256)v);
    else _mm256_storeu_ps(p, (__m256)v);
}

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_max(mx8_f a, mx8_f b)
{
    return (mx8_f)_mm256_max_ps((__m256)a, (__m256)b);
}

MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_even(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
}
MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_odd(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}
MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_zip_lo(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
}
MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_zip_hi(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
}
MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_next(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8);
}
MX_SIMD_TARGET_AVX2 MX_SIMD_INLINE mx8_f mx8_prev(mx8_f a, mx8_f b)
{
    return __builtin_shufflevector(a, b, 7, 8, 9, 10, 11, 12, 13, 14);
}

typedef float mx16_f __attribute__((vector_size(64)));
typedef int32_t mx16_i __attribute__((vector_size(64)));
typedef uint32_t mx16_u __attribute__((vector_size(64)));

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_i mx16_iota(void)
{
    return (mx16_i){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_fma(mx16_f a, mx16_f b, mx16_f c)
{
    return (mx16_f)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_load_part(const float *p, int64_t n)
{
    return (mx16_f)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE void mx16_store_part(float *p, mx16_f v, int64_t n)
{
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)v);
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE void mx16_store_nt(float *p, mx16_f v, bool nt)
{
    if (nt && ((uintptr_t)p & 63) == 0) _mm512_stream_ps(p, (__m512)v);
    else _mm512_storeu_ps(p, (__m512)v);
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_max(mx16_f a, mx16_f b)
{
    return (mx16_f)_mm512_max_ps((__m512)a, (__m512)b);
}

MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_even(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_odd(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_zip_lo(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_zip_hi(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}
MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_next(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
}
MX_SIMD_TARGET_AVX512 MX_SIMD_INLINE mx16_f mx16_prev(mx16_f a, mx16_f b)
{
    return __builtin_shufflevector(a, b, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30);
}
#endif /* MX_SIMD_X86 */

/* ------------------------------------------------------- per-width math */

/* P##_even / _odd: lanes 0, 2, 4... / 1, 3, 5... of the 2W floats a:b;
 * P##_zip_lo / _hi: the inverse (a0 b0 a1 b1 ... of the low / high half);
 * P##_next / _prev: lanes 1..W / W-1..2W-2 of a:b (lane i holds element
 * i + 1 / i - 1 of the row a continues into b / b continues from a). */
#define MX_SIMD_MATH(P, W, TARGET)                                                                                  \
    TARGET MX_SIMD_INLINE P##_f P##_splat(float s) { return (P##_f){0} + s; }                                       \
    TARGET MX_SIMD_INLINE P##_f P##_load(const float *p)                                                            \
    {                                                                                                               \
        P##_f v;                                                                                                    \
        memcpy(&v, p, sizeof(v));                                                                                   \
        return v;                                                                                                   \
    }                                                                                                               \
    TARGET MX_SIMD_INLINE void P##_store(float *p, P##_f v) { memcpy(p, &v, sizeof(v)); }                           \
    /* Loads floats [p, end) (at most W; 0 past end): safe at the end of a buffer. */                               \
    TARGET MX_SIMD_INLINE P##_f P##_load_upto(const float *p, const float *end)                                     \
    {                                                                                                               \
        const int64_t n = end - p;                                                                                  \
        return n >= W ? P##_load(p) : P##_load_part(p, n > 0 ? n : 0);                                             \
    }                                                                                                               \
    /* mask ? a : b per lane (mask lanes all ones or all zeros). */                                                 \
    TARGET MX_SIMD_INLINE P##_f P##_select(P##_i m, P##_f a, P##_f b)                                               \
    {                                                                                                               \
        return (P##_f)((m & (P##_i)a) | (~m & (P##_i)b));                                                           \
    }                                                                                                               \
    TARGET MX_SIMD_INLINE P##_f P##_abs(P##_f v) { return (P##_f)((P##_u)v & 0x7FFFFFFFu); }                        \
    /* Activation's relu (v > 0 ? v : 0: NaN gives 0) and clip's clamp to     \
     * [l, h], the one expression of each wherever they are computed (the     \
     * ops, and the passes they fold into), so folded gives unfolded's bits. */ \
    TARGET MX_SIMD_INLINE P##_f P##_relu(P##_f v) { return P##_select(v > P##_splat(0.0f), v, P##_splat(0.0f)); }   \
    TARGET MX_SIMD_INLINE P##_f P##_clip(P##_f v, P##_f l, P##_f h)                                                 \
    {                                                                                                               \
        return P##_select(v > h, h, P##_select(v < l, l, v));                                                       \
    }                                                                                                               \
    /* Lanes [0, n) all ones. */                                                                                    \
    TARGET MX_SIMD_INLINE P##_i P##_first(int64_t n) { return P##_iota() < (int32_t)n; }                            \
    TARGET MX_SIMD_INLINE P##_f P##_exp(P##_f x)                                                                    \
    {                                                                                                               \
        const P##_f hi = P##_splat(88.3762626647949f), lo = P##_splat(-87.0f);                                      \
        P##_f xc = P##_select(x > hi, hi, x);                                                                       \
        xc = P##_select(xc < lo, lo, xc);                                                                           \
        /* n = round(x log2 e) by the 1.5 * 2^23 trick; its integer bits too. */                                    \
        P##_f t = P##_fma(xc, P##_splat(1.44269504088896341f), P##_splat(12582912.0f));                             \
        P##_u n_int = (P##_u)t - 0x4B400000u;                                                                       \
        P##_f n = t - 12582912.0f;                                                                                  \
        P##_f r = P##_fma(n, P##_splat(-0.693359375f), xc);                                                         \
        r = P##_fma(n, P##_splat(2.12194440e-4f), r);                                                               \
        P##_f z = r * r;                                                                                            \
        P##_f p = P##_fma(P##_splat(1.9875691500e-4f), r, P##_splat(1.3981999507e-3f));                             \
        p = P##_fma(p, r, P##_splat(8.3334519073e-3f));                                                             \
        p = P##_fma(p, r, P##_splat(4.1665795894e-2f));                                                             \
        p = P##_fma(p, r, P##_splat(1.6666665459e-1f));                                                             \
        p = P##_fma(p, r, P##_splat(5.0000001201e-1f));                                                             \
        P##_f y = P##_fma(p, z, r) + 1.0f;                                                                          \
        y = (P##_f)((P##_u)y + (n_int << 23));                                                                      \
        y = P##_select(x < lo, P##_splat(0.0f), y);                                                                 \
        return P##_select(x != x, x, y); /* NaN in, NaN out */                                                      \
    }                                                                                                               \
    /* exp(x) - 1 for x in [-87, 88]: 2^n expm1(r) + (2^n - 1), expm1(r) by                                        \
     * exp's polynomial without its 1 (exact for n = 0, so no cancellation                                          \
     * near 0). NaN propagates through the fmas. */                                                                 \
    TARGET MX_SIMD_INLINE P##_f P##_expm1_core(P##_f xc)                                                            \
    {                                                                                                               \
        P##_f t = P##_fma(xc, P##_splat(1.44269504088896341f), P##_splat(12582912.0f));                             \
        P##_u n_int = (P##_u)t - 0x4B400000u;                                                                       \
        P##_f n = t - 12582912.0f;                                                                                  \
        P##_f r = P##_fma(n, P##_splat(-0.693359375f), xc);                                                         \
        r = P##_fma(n, P##_splat(2.12194440e-4f), r);                                                               \
        P##_f z = r * r;                                                                                            \
        P##_f p = P##_fma(P##_splat(1.9875691500e-4f), r, P##_splat(1.3981999507e-3f));                             \
        p = P##_fma(p, r, P##_splat(8.3334519073e-3f));                                                             \
        p = P##_fma(p, r, P##_splat(4.1665795894e-2f));                                                             \
        p = P##_fma(p, r, P##_splat(1.6666665459e-1f));                                                             \
        p = P##_fma(p, r, P##_splat(5.0000001201e-1f));                                                             \
        P##_f q = P##_fma(p, z, r);                  /* expm1(r) */                                                 \
        P##_f two_n = (P##_f)((n_int + 127u) << 23); /* 2^n, n in [-126, 127] */                                    \
        return P##_fma(two_n, q, two_n - 1.0f);                                                                     \
    }                                                                                                               \
    /* expm1 everywhere: -1 below -87, saturating at expm1(88) = 1.65e38. */                                        \
    TARGET MX_SIMD_INLINE P##_f P##_expm1(P##_f x)                                                                  \
    {                                                                                                               \
        const P##_f hi = P##_splat(88.0f), lo = P##_splat(-87.0f);                                                  \
        P##_f xc = P##_select(x > hi, hi, x);                                                                       \
        return P##_expm1_core(P##_select(xc < lo, lo, xc));                                                         \
    }                                                                                                               \
    /* tanh(|x|) = -m / (2 + m) with m = expm1(-2|x|), |x| capped at 9                                              \
     * (tanh(9) rounds to 1); the sign copied from x. */                                                            \
    TARGET MX_SIMD_INLINE P##_f P##_tanh(P##_f x)                                                                   \
    {                                                                                                               \
        P##_f a = P##_abs(x);                                                                                       \
        a = P##_select(a > 9.0f, P##_splat(9.0f), a);                                                               \
        P##_f m = P##_expm1_core(a * -2.0f);                                                                        \
        P##_f r = -m / (2.0f + m);                                                                                  \
        return (P##_f)((P##_u)r | ((P##_u)x & 0x80000000u));                                                       \
    }                                                                                                               \
    /* 1 / (1 + exp(-x)). */                                                                                        \
    TARGET MX_SIMD_INLINE P##_f P##_sigmoid(P##_f x) { return 1.0f / (1.0f + P##_exp(-x)); }

MX_SIMD_INSTANTIATE(MX_SIMD_MATH)

/* ------------------------------------------------- element-wise loops */

/* Inside a kernel of width (P, W): y[i] = EXPR over i in [lo, hi), where
 * EXPR reads the vector `v` = x[i..]; added to y when `add`. y may be x.
 * The _NT forms store through P##_store_nt(.., nt). */
#define MX_SIMD_MAP1(P, W, x, y, lo, hi, add, EXPR) MX_SIMD_MAP1_NT(P, W, x, y, lo, hi, add, false, EXPR)
#define MX_SIMD_MAP1_NT(P, W, x, y, lo, hi, add, nt, EXPR)                                                          \
    do {                                                                                                            \
        int64_t i_ = (lo);                                                                                          \
        for (; i_ + (W) <= (hi); i_ += (W)) {                                                                       \
            P##_f v = P##_load((x) + i_);                                                                           \
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load((y) + i_);                                                                      \
            P##_store_nt((y) + i_, r_, nt);                                                                         \
        }                                                                                                           \
        if (i_ < (hi)) {                                                                                            \
            int64_t n_ = (hi) - i_;                                                                                 \
            P##_f v = P##_load_part((x) + i_, n_);                                                                  \
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load_part((y) + i_, n_);                                                             \
            P##_store_part((y) + i_, r_, n_);                                                                       \
        }                                                                                                           \
    } while (0)

/* The same with two inputs: `v` = a[i..], `u` = b[i..]. */
#define MX_SIMD_MAP2(P, W, a, b, y, lo, hi, add, EXPR) MX_SIMD_MAP2_NT(P, W, a, b, y, lo, hi, add, false, EXPR)
#define MX_SIMD_MAP2_NT(P, W, a, b, y, lo, hi, add, nt, EXPR)                                                       \
    do {                                                                                                            \
        int64_t i_ = (lo);                                                                                          \
        for (; i_ + (W) <= (hi); i_ += (W)) {                                                                       \
            P##_f v = P##_load((a) + i_), u = P##_load((b) + i_);                                                   \
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load((y) + i_);                                                                      \
            P##_store_nt((y) + i_, r_, nt);                                                                         \
        }                                                                                                           \
        if (i_ < (hi)) {                                                                                            \
            int64_t n_ = (hi) - i_;                                                                                 \
            P##_f v = P##_load_part((a) + i_, n_), u = P##_load_part((b) + i_, n_);                                 \
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load_part((y) + i_, n_);                                                             \
            P##_store_part((y) + i_, r_, n_);                                                                       \
        }                                                                                                           \
    } while (0)

/* The same with three inputs: `v` = a[i..], `u` = b[i..], `w` = c[i..]. */
#define MX_SIMD_MAP3(P, W, a, b, c, y, lo, hi, add, EXPR)                                                           \
    do {                                                                                                            \
        int64_t i_ = (lo);                                                                                          \
        for (; i_ + (W) <= (hi); i_ += (W)) {                                                                       \
            P##_f v = P##_load((a) + i_), u = P##_load((b) + i_), w = P##_load((c) + i_);                           \
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load((y) + i_);                                                                      \
            P##_store((y) + i_, r_);                                                                                \
        }                                                                                                           \
        if (i_ < (hi)) {                                                                                            \
            int64_t n_ = (hi) - i_;                                                                                 \
            P##_f v = P##_load_part((a) + i_, n_), u = P##_load_part((b) + i_, n_), w = P##_load_part((c) + i_, n_);\
            P##_f r_ = (EXPR);                                                                                      \
            if (add) r_ += P##_load_part((y) + i_, n_);                                                             \
            P##_store_part((y) + i_, r_, n_);                                                                       \
        }                                                                                                           \
    } while (0)

#endif /* MX_OPS_SIMD_H */
