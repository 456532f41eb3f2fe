/*
 * copy_req.cuh - dst = src or dst += src over n elements on the op's
 * stream, per a write request: what the GPU kernels of the pure data-view
 * operators (Flatten, Reshape) do. Write/in-place with dst == src is a
 * no-op; accumulation (req add) is float32 and float64 only, as on the CPU.
 */
#ifndef MX_OPS_CUDA_COPY_REQ_CUH
#define MX_OPS_CUDA_COPY_REQ_CUH

#include "ops/cuda/cuda_op.h"

template <typename T> __global__ void mx_cuda_add_into_k(int64_t n, const T *src, T *dst)
{
    MX_CUDA_FOR(i, n) dst[i] += src[i];
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
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: accumulating (req add) into %s is not supported", op,
                        mx_dtype_name(dtype));
    }
    return MX_OK;
}

#endif /* MX_OPS_CUDA_COPY_REQ_CUH */
