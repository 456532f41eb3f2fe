/*
 * dtype_convert.c - dtype_convert.h on the host: one load table (element
 * -> double) and one store table (double -> element), applied in chunks,
 * plus direct loops for float32 <-> float16 / bfloat16 (the same bits:
 * a float32 survives the trip through double unchanged).
 */
#include "ndarray/dtype_convert.h"

#include "base/half.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* float -> integer: toward zero, saturated, NaN -> 0. */
static double saturate(double v, double lo, double hi)
{
    if (v != v) return 0.0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void load(double *d, const void *src, mx_dtype t, int64_t n)
{
    switch (t) {
    case MX_FLOAT32: for (int64_t i = 0; i < n; i++) d[i] = ((const float *)src)[i]; break;
    case MX_FLOAT64: memcpy(d, src, sizeof(double) * (size_t)n); break;
    case MX_FLOAT16: for (int64_t i = 0; i < n; i++) d[i] = mx_half_to_float(((const uint16_t *)src)[i]); break;
    case MX_BFLOAT16: for (int64_t i = 0; i < n; i++) d[i] = mx_bfloat16_to_float(((const uint16_t *)src)[i]); break;
    case MX_UINT8: for (int64_t i = 0; i < n; i++) d[i] = ((const uint8_t *)src)[i]; break;
    case MX_INT32: for (int64_t i = 0; i < n; i++) d[i] = ((const int32_t *)src)[i]; break;
    case MX_INT8: for (int64_t i = 0; i < n; i++) d[i] = ((const int8_t *)src)[i]; break;
    case MX_INT64: for (int64_t i = 0; i < n; i++) d[i] = (double)((const int64_t *)src)[i]; break;
    default: break; /* checked by the callers */
    }
}

static void store(void *dst, mx_dtype t, const double *d, int64_t n)
{
    switch (t) {
    case MX_FLOAT32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)d[i]; break;
    case MX_FLOAT64: memcpy(dst, d, sizeof(double) * (size_t)n); break;
    case MX_FLOAT16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mx_float_to_half((float)d[i]); break;
    case MX_BFLOAT16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mx_float_to_bfloat16((float)d[i]);
        break;
    case MX_UINT8: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)saturate(d[i], 0, 255); break;
    case MX_INT32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)saturate(d[i], -2147483648.0, 2147483647.0);
        break;
    case MX_INT8: for (int64_t i = 0; i < n; i++) ((int8_t *)dst)[i] = (int8_t)saturate(d[i], -128, 127); break;
    case MX_INT64:
        for (int64_t i = 0; i < n; i++) {
            double v = saturate(d[i], -9223372036854775808.0, 9223372036854775807.0);
            ((int64_t *)dst)[i] = v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
        }
        break;
    default: break;
    }
}

/* Over i in [0, n): ascending, or descending when `back` (an in-place
 * conversion to a wider type, whose element i overwrites source elements
 * i and after). */
#define EACH(i, n, back, ...)                                                                                      \
    do {                                                                                                           \
        if (back)                                                                                                  \
            for (int64_t i = (n) - 1; i >= 0; i--) { __VA_ARGS__; }                                                \
        else                                                                                                       \
            for (int64_t i = 0; i < (n); i++) { __VA_ARGS__; }                                                     \
    } while (0)

#if defined(__x86_64__)
/* F16C converts 8 elements an instruction, rounding to nearest even as
 * half.h does (overflow to inf, subnormals kept); only NaNs differ (F16C
 * keeps their payload), so a block holding one is redone by half.h and
 * the bits stay one rule. The executor's half nodes on the CPU convert
 * every tensor both ways: scalar, that was 58% of a float16 LeNet step. */
__attribute__((target("avx,f16c"))) static void float_to_half_f16c(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(s + i);
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) d[i + k] = mx_float_to_half(s[i + k]);
    }
    for (; i < n; i++) d[i] = mx_float_to_half(s[i]);
}

__attribute__((target("avx,f16c"))) static void half_to_float_f16c(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_ps(d + i, x);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) d[i + k] = mx_half_to_float(s[i + k]);
    }
    for (; i < n; i++) d[i] = mx_half_to_float(s[i]);
}

/* CPUID's AVX, F16C and AVX2 bits, AVX only where the OS saves the ymm
 * registers (XCR0 bits 1-2): not every compiler's __builtin_cpu_supports
 * knows "f16c" (the fuzzing build's clang does not). */
enum { CPU_AVX = 1, CPU_F16C = 2, CPU_AVX2 = 4 };
static unsigned cpu_vector_features(void)
{
    unsigned a, b, c, d, lo, hi, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || !(c & (1u << 28))) return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 6) != 6) return 0;
    f = CPU_AVX | ((c & (1u << 29)) ? CPU_F16C : 0);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5))) f |= CPU_AVX2;
    return f;
}

static bool has_f16c(void) { return (cpu_vector_features() & (CPU_AVX | CPU_F16C)) == (CPU_AVX | CPU_F16C); }

/* bfloat16 with AVX2 integer lanes, half.h's rule 8 elements at a time:
 * round to nearest even by adding 0x7fff plus the kept part's lowest bit,
 * a NaN keeps its top bits and is made quiet. */
__attribute__((target("avx2"))) static void float_to_bfloat16_avx2(uint16_t *d, const float *s, int64_t n)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), abs = _mm256_set1_epi32(0x7fffffff),
                  inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, quiet), nan);
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* lanes 0-3, 4-7 */
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(packed));
    }
    for (; i < n; i++) d[i] = mx_float_to_bfloat16(s[i]);
}

__attribute__((target("avx2"))) static void bfloat16_to_float_avx2(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_slli_epi32(x, 16));
    }
    for (; i < n; i++) d[i] = mx_bfloat16_to_float(s[i]);
}

static bool has_avx2(void) { return (cpu_vector_features() & CPU_AVX2) != 0; }
#endif

/* float32 <-> a half type without the trip through double (which would
 * quieten a signalling NaN, nothing else); false when the pair is another. */
static bool convert_direct(void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n, bool back)
{
    const float *sf = src;
    const uint16_t *sh = src;
    float *df = dst;
    uint16_t *dh = dst;
#if defined(__x86_64__)
    /* Forward in blocks of 8: not for a conversion widening in place. */
    if (!back && st == MX_FLOAT32 && dt == MX_FLOAT16 && has_f16c()) {
        float_to_half_f16c(dh, sf, n);
        return true;
    }
    const bool apart = (const char *)src + n * 2 <= (const char *)dst || (const char *)dst + n * 4 <= (const char *)src;
    if (!back && st == MX_FLOAT16 && dt == MX_FLOAT32 && has_f16c() && apart) {
        half_to_float_f16c(df, sh, n);
        return true;
    }
    if (!back && st == MX_FLOAT32 && dt == MX_BFLOAT16 && has_avx2()) {
        float_to_bfloat16_avx2(dh, sf, n);
        return true;
    }
    if (!back && st == MX_BFLOAT16 && dt == MX_FLOAT32 && has_avx2() && apart) {
        bfloat16_to_float_avx2(df, sh, n);
        return true;
    }
#endif
    if (st == MX_FLOAT32 && dt == MX_FLOAT16) EACH(i, n, back, dh[i] = mx_float_to_half(sf[i]));
    else if (st == MX_FLOAT32 && dt == MX_BFLOAT16) EACH(i, n, back, dh[i] = mx_float_to_bfloat16(sf[i]));
    else if (st == MX_FLOAT16 && dt == MX_FLOAT32) EACH(i, n, back, df[i] = mx_half_to_float(sh[i]));
    else if (st == MX_BFLOAT16 && dt == MX_FLOAT32) EACH(i, n, back, df[i] = mx_bfloat16_to_float(sh[i]));
    else return false;
    return true;
}

#define CONVERT_CHUNK 256

mx_status mx_dtype_convert(const char *what, void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n,
                           bool add)
{
    if (!mx_dtype_valid((int)dt) || !mx_dtype_valid((int)st))
        return MX_ERROR(MX_ERR_INVALID, "%s: bad dtype (%d -> %d)", what, (int)st, (int)dt);
    if (n <= 0) return MX_OK;
    if (dt == st && !add) {
        if (dst != src) memmove(dst, src, (size_t)n * mx_dtype_size(dt));
        return MX_OK;
    }
    if (dt == MX_FLOAT32 && st == MX_FLOAT32) { /* add, the common gradient case */
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        return MX_OK;
    }
    size_t ds = mx_dtype_size(dt), ss = mx_dtype_size(st);
    bool back = dst == src && ds > ss;
    if (!add && convert_direct(dst, dt, src, st, n, back)) return MX_OK;
    double a[CONVERT_CHUNK], b[CONVERT_CHUNK];
    int64_t chunks = (n + CONVERT_CHUNK - 1) / CONVERT_CHUNK;
    EACH(c, chunks, back, {
        int64_t i0 = c * CONVERT_CHUNK, w = n - i0 < CONVERT_CHUNK ? n - i0 : CONVERT_CHUNK;
        load(a, (const char *)src + (size_t)i0 * ss, st, w);
        if (add) {
            load(b, (const char *)dst + (size_t)i0 * ds, dt, w);
            for (int64_t i = 0; i < w; i++) a[i] += b[i];
        }
        store((char *)dst + (size_t)i0 * ds, dt, a, w);
    });
    return MX_OK;
}

mx_status mx_dtype_from_double(const char *what, void *elem, mx_dtype dt, double value)
{
    if (!mx_dtype_valid((int)dt)) return MX_ERROR(MX_ERR_INVALID, "%s: bad dtype %d", what, (int)dt);
    store(elem, dt, &value, 1);
    return MX_OK;
}
