/*
 * copy_req.cuh - dst = src or dst += src over n elements on the op's
 * stream, per a write request: what the GPU kernels of the pure data-view
 * operators (Flatten, Reshape, expand_dims) do. Write/in-place with
 * dst == src is a no-op and any dtype is copied by its element size;
 * accumulation (req add) is float32, float64, float16 and bfloat16 (the
 * half types summed in float and rounded once, as the CPU's half nodes do
 * on their float32 copies), other dtypes refused naming op and dtype.
 */
#ifndef MX_OPS_CUDA_COPY_REQ_CUH
#define MX_OPS_CUDA_COPY_REQ_CUH

#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

template <typename T> __global__ void mx_cuda_add_into_k(int64_t n, const T *src, T *dst)
{
    MX_CUDA_FOR(i, n) dst[i] += src[i];
}

/* float16 / bfloat16: the sum in float, rounded once to T. */
template <typename T> __global__ void mx_cuda_add_into_half_k(int64_t n, const T *src, T *dst)
{
    MX_CUDA_FOR(i, n) mx_store(&dst[i], mx_load(&dst[i]) + mx_load(&src[i]));
}

static inline mx_status mx_cuda_copy_req(const mx_op_ctx *ctx, const char *op, void *dst, const void *src, int64_t n,
                                         mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_NULL || n <= 0) return MX_OK;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (req != MX_REQ_ADD) {
        if (dst != src)
            MX_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * mx_dtype_size(dtype), cudaMemcpyDeviceToDevice, stream));
        return MX_OK;
    }
    if (dtype == MX_FLOAT32) {
        mx_cuda_add_into_k<float><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(n, (const float *)src,
                                                                                      (float *)dst);
        MX_CUDA_LAUNCHED();
    } else if (dtype == MX_FLOAT64) {
        mx_cuda_add_into_k<double><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(n, (const double *)src,
                                                                                        (double *)dst);
        MX_CUDA_LAUNCHED();
    } else if (dtype == MX_FLOAT16) {
        mx_cuda_add_into_half_k<__half><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
            n, (const __half *)src, (__half *)dst);
        MX_CUDA_LAUNCHED();
    } else if (dtype == MX_BFLOAT16) {
        mx_cuda_add_into_half_k<__nv_bfloat16><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
            n, (const __nv_bfloat16 *)src, (__nv_bfloat16 *)dst);
        MX_CUDA_LAUNCHED();
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: accumulating (req add) into %s is not supported", op,
                        mx_dtype_name(dtype));
    }
    return MX_OK;
}

#endif /* MX_OPS_CUDA_COPY_REQ_CUH */
