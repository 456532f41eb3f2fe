/*
 * dtype_convert.cu - dtype_convert.h on a GPU: one kernel per (source,
 * destination) pair of the dtype table below, grid-stride over the
 * elements on the worker's stream, doing what dtype_convert.c does element
 * by element so that the bits agree: through double (float32 <-> float16 /
 * bfloat16 directly, as the host's direct loops), halves through
 * cuda_fp16.h / cuda_bf16.h (__float2half_rn, __float2bfloat16_rn: round
 * to nearest even like base/half.h). NaNs are handled by their bits where
 * the GPU's conversions would make a canonical NaN: as base/half.h does for
 * halves, and as x86 does for float <-> double (quiet bit set, payload
 * kept or truncated).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "ndarray/dtype_convert.h" /* first: C linkage for the C headers it includes */
#include "device/cuda_worker.h"

enum { CV_THREADS = 256 };
static unsigned cv_blocks(int64_t n)
{
    int64_t b = (n + CV_THREADS - 1) / CV_THREADS;
    if (b > 65536) b = 65536;
    return (unsigned)(b < 1 ? 1 : b);
}
#define CV_FOR(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---------------------------------------------------------------- scalars
 * __host__ __device__, so that mx_dtype_convert_gpu_emulate runs this very
 * code on the host (tests on machines without a GPU). */

#define CV_HD __host__ __device__ __forceinline__

CV_HD uint32_t cv_fbits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}
CV_HD float cv_bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}
CV_HD uint64_t cv_dbits(double d)
{
    uint64_t x;
    memcpy(&x, &d, sizeof(x));
    return x;
}
CV_HD double cv_bits_d(uint64_t x)
{
    double d;
    memcpy(&d, &x, sizeof(d));
    return d;
}

/* float -> double; a NaN as x86's cvtss2sd: quiet bit set, payload kept. */
CV_HD double cv_f2d(float f)
{
    if (f != f) {
        uint32_t x = cv_fbits(f);
        return cv_bits_d((uint64_t)(x >> 31) << 63 | 0x7ff8000000000000ull | (uint64_t)(x & 0x7fffffu) << 29);
    }
    return (double)f;
}

/* double -> float, nearest even; a NaN as x86's cvtsd2ss: quiet bit set,
 * the payload's upper bits kept. */
CV_HD float cv_d2f(double d)
{
    if (d != d) {
        uint64_t x = cv_dbits(d);
        return cv_bits_f((uint32_t)(x >> 63) << 31 | 0x7fc00000u | (uint32_t)((x >> 29) & 0x7fffffu));
    }
    return (float)d;
}

/* base/half.h's conversions through cuda_fp16.h / cuda_bf16.h, NaNs by
 * their bits (the intrinsics make canonical NaNs). */
CV_HD float cv_half_to_float(uint16_t h)
{
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
        return cv_bits_f((uint32_t)(h >> 15) << 31 | 0x7f800000u | (uint32_t)(h & 0x3ff) << 13);
    return __half2float(__ushort_as_half(h));
}

CV_HD uint16_t cv_float_to_half(float f)
{
    if (f != f) return (uint16_t)((cv_fbits(f) >> 16 & 0x8000) | 0x7e00);
    return __half_as_ushort(__float2half_rn(f));
}

CV_HD float cv_bfloat16_to_float(uint16_t b)
{
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) return cv_bits_f((uint32_t)b << 16);
    return __bfloat162float(__ushort_as_bfloat16(b));
}

CV_HD uint16_t cv_float_to_bfloat16(float f)
{
    if (f != f) return (uint16_t)((cv_fbits(f) >> 16) | 0x40);
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* float -> integer: toward zero, saturated, NaN -> 0 (dtype_convert.c). */
CV_HD double cv_saturate(double v, double lo, double hi)
{
    if (v != v) return 0.0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---------------------------------------------------------------- the table
 * Each dtype: its storage type, element -> double, double -> element, and
 * its class: 0 float32, 1 a half type (with element <-> float), 2 other. */

struct cv_f32 {
    typedef float raw;
    enum { cls = 0 };
    static CV_HD double load(raw v) { return cv_f2d(v); }
    static CV_HD raw store(double d) { return cv_d2f(d); }
};
struct cv_f64 {
    typedef double raw;
    enum { cls = 2 };
    static CV_HD double load(raw v) { return v; }
    static CV_HD raw store(double d) { return d; }
};
struct cv_f16 {
    typedef uint16_t raw;
    enum { cls = 1 };
    static CV_HD float loadf(raw v) { return cv_half_to_float(v); }
    static CV_HD raw storef(float f) { return cv_float_to_half(f); }
    static CV_HD double load(raw v) { return cv_f2d(loadf(v)); }
    static CV_HD raw store(double d) { return storef(cv_d2f(d)); }
};
struct cv_bf16 {
    typedef uint16_t raw;
    enum { cls = 1 };
    static CV_HD float loadf(raw v) { return cv_bfloat16_to_float(v); }
    static CV_HD raw storef(float f) { return cv_float_to_bfloat16(f); }
    static CV_HD double load(raw v) { return cv_f2d(loadf(v)); }
    static CV_HD raw store(double d) { return storef(cv_d2f(d)); }
};
struct cv_u8 {
    typedef uint8_t raw;
    enum { cls = 2 };
    static CV_HD double load(raw v) { return v; }
    static CV_HD raw store(double d) { return (raw)cv_saturate(d, 0, 255); }
};
struct cv_i32 {
    typedef int32_t raw;
    enum { cls = 2 };
    static CV_HD double load(raw v) { return v; }
    static CV_HD raw store(double d) { return (raw)cv_saturate(d, -2147483648.0, 2147483647.0); }
};
struct cv_i8 {
    typedef int8_t raw;
    enum { cls = 2 };
    static CV_HD double load(raw v) { return v; }
    static CV_HD raw store(double d) { return (raw)cv_saturate(d, -128, 127); }
};
struct cv_i64 {
    typedef int64_t raw;
    enum { cls = 2 };
    static CV_HD double load(raw v) { return (double)v; }
    static CV_HD raw store(double d)
    {
        double v = cv_saturate(d, -9223372036854775808.0, 9223372036854775807.0);
        return v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
    }
};

#define CV_DTYPES(X)                                                                                               \
    X(MX_FLOAT32, cv_f32)                                                                                          \
    X(MX_FLOAT64, cv_f64)                                                                                          \
    X(MX_FLOAT16, cv_f16)                                                                                          \
    X(MX_BFLOAT16, cv_bf16)                                                                                        \
    X(MX_UINT8, cv_u8)                                                                                             \
    X(MX_INT32, cv_i32)                                                                                            \
    X(MX_INT8, cv_i8)                                                                                              \
    X(MX_INT64, cv_i64)

/* ---------------------------------------------------------------- kernels */

/* Element i: through double, or float32 <-> a half type directly, as
 * dtype_convert.c's direct loops (the bits are the same either way but for
 * a signalling NaN, which the trip through double quietens). */
template <typename S, typename D>
CV_HD void cv_one(int64_t i, const typename S::raw *src, typename D::raw *dst, bool add)
{
    if constexpr ((int)S::cls + (int)D::cls == 1) {
        if (!add) {
            if constexpr (S::cls == 0) dst[i] = D::storef(src[i]);
            else dst[i] = S::loadf(src[i]);
            return;
        }
    }
    double v = S::load(src[i]);
    if (add) v += D::load(dst[i]);
    dst[i] = D::store(v);
}

template <typename S, typename D>
__global__ void cv_convert_k(int64_t n, const typename S::raw *src, typename D::raw *dst, bool add)
{
    CV_FOR(i, n) cv_one<S, D>(i, src, dst, add);
}

/* stream NULL: on the host (emulation). */
template <typename S, typename D>
static void cv_launch(int64_t n, const void *src, void *dst, bool add, const cudaStream_t *stream)
{
    const typename S::raw *s = (const typename S::raw *)src;
    typename D::raw *d = (typename D::raw *)dst;
    if (stream) cv_convert_k<S, D><<<cv_blocks(n), CV_THREADS, 0, *stream>>>(n, s, d, add);
    else
        for (int64_t i = 0; i < n; i++) cv_one<S, D>(i, s, d, add);
}

template <typename S>
static bool cv_launch_to(mx_dtype dt, int64_t n, const void *src, void *dst, bool add, const cudaStream_t *stream)
{
    switch (dt) {
#define CV_CASE(e, T)                                                                                              \
    case e: cv_launch<S, T>(n, src, dst, add, stream); return true;
        CV_DTYPES(CV_CASE)
#undef CV_CASE
    default: return false;
    }
}

static mx_status cv_dispatch(const char *what, void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n,
                             bool add, const cudaStream_t *stream)
{
    bool known = false;
    switch (st) {
#define CV_CASE(e, T)                                                                                              \
    case e: known = cv_launch_to<T>(dt, n, src, dst, add, stream); break;
        CV_DTYPES(CV_CASE)
#undef CV_CASE
    default: break;
    }
    if (!known)
        return MX_ERROR(MX_ERR_INVALID, "%s: bad dtype (%d -> %d)", what, (int)st, (int)dt);
    return MX_OK;
}

template <typename T> __global__ void cv_fill_k(int64_t n, T *dst, T v)
{
    CV_FOR(i, n) dst[i] = v;
}

/* ---------------------------------------------------------------- API */

extern "C" mx_status mx_dtype_convert_gpu(const char *what, void *dst, mx_dtype dt, const void *src, mx_dtype st,
                                          int64_t n, bool add, void *worker)
{
    if (!mx_dtype_valid((int)dt) || !mx_dtype_valid((int)st))
        return MX_ERROR(MX_ERR_INVALID, "%s: bad dtype (%d -> %d)", what, (int)st, (int)dt);
    if (n <= 0) return MX_OK;
    cudaStream_t stream = mx_cuda_worker_stream((const mx_cuda_worker *)worker);
    if (dt == st && !add) {
        if (dst != src)
            MX_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * mx_dtype_size(dt), cudaMemcpyDeviceToDevice, stream));
        return MX_OK;
    }
    if (dst == src && mx_dtype_size(dt) != mx_dtype_size(st)) { /* in place: the source goes aside first */
        void *scratch;
        size_t bytes = (size_t)n * mx_dtype_size(st);
        MX_TRY(mx_cuda_worker_scratch((mx_cuda_worker *)worker, bytes, &scratch));
        MX_CUDA_TRY(cudaMemcpyAsync(scratch, src, bytes, cudaMemcpyDeviceToDevice, stream));
        src = scratch;
    }
    MX_TRY(cv_dispatch(what, dst, dt, src, st, n, add, &stream));
    MX_CUDA_TRY(cudaGetLastError());
    return MX_OK;
}

extern "C" mx_status mx_dtype_fill_gpu(void *dst, mx_dtype dt, const void *elem, int64_t n, void *worker)
{
    if (!mx_dtype_valid((int)dt)) return MX_ERROR(MX_ERR_INVALID, "fill: bad dtype %d", (int)dt);
    if (n <= 0) return MX_OK;
    cudaStream_t stream = mx_cuda_worker_stream((const mx_cuda_worker *)worker);
    switch (mx_dtype_size(dt)) {
    case 1: cv_fill_k<uint8_t><<<cv_blocks(n), CV_THREADS, 0, stream>>>(n, (uint8_t *)dst, *(const uint8_t *)elem); break;
    case 2: {
        uint16_t v;
        memcpy(&v, elem, sizeof(v));
        cv_fill_k<uint16_t><<<cv_blocks(n), CV_THREADS, 0, stream>>>(n, (uint16_t *)dst, v);
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, elem, sizeof(v));
        cv_fill_k<uint32_t><<<cv_blocks(n), CV_THREADS, 0, stream>>>(n, (uint32_t *)dst, v);
        break;
    }
    default: {
        uint64_t v;
        memcpy(&v, elem, sizeof(v));
        cv_fill_k<uint64_t><<<cv_blocks(n), CV_THREADS, 0, stream>>>(n, (uint64_t *)dst, v);
        break;
    }
    }
    MX_CUDA_TRY(cudaGetLastError());
    return MX_OK;
}

extern "C" mx_status mx_dtype_convert_gpu_emulate(void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n,
                                                  bool add)
{
    if (n <= 0) return MX_OK;
    if (dt == st && !add && mx_dtype_valid((int)dt)) { /* a copy on the GPU too */
        if (dst != src) memmove(dst, src, (size_t)n * mx_dtype_size(dt));
        return MX_OK;
    }
    return cv_dispatch("convert (GPU code on the host)", dst, dt, src, st, n, add, NULL);
}
