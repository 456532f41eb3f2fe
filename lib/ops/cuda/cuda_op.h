/*
 * cuda_op.h - what every operator's .cu shares: error checks that record
 * the failing call, the worker of the running op (stream, cuBLAS, cuDNN,
 * scratch), launch geometry, per-request writes and cuDNN tensor
 * descriptors. C++ (nvcc) only.
 */
#ifndef MX_CUDA_OP_H
#define MX_CUDA_OP_H

extern "C" {
#include "ops/op.h"
}
#include "device/cuda_worker.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

/* After a kernel launch: a bad configuration shows here, a fault later at
 * the worker's sync. */
#define MX_CUDA_LAUNCHED() MX_CUDA_TRY(cudaGetLastError())

static inline mx_cuda_worker *mx_cuda_op_worker(const mx_op_ctx *ctx) { return (mx_cuda_worker *)ctx->exec->stream; }
static inline cudaStream_t mx_cuda_op_stream(const mx_op_ctx *ctx) { return mx_cuda_worker_stream(mx_cuda_op_worker(ctx)); }

/* Grid-stride launches: enough blocks to fill the chip, no more. */
enum { MX_CUDA_THREADS = 256 };
static inline unsigned mx_cuda_blocks(int64_t n)
{
    int64_t b = (n + MX_CUDA_THREADS - 1) / MX_CUDA_THREADS;
    if (b > 65536) b = 65536;
    return (unsigned)(b < 1 ? 1 : b);
}
#define MX_CUDA_FOR(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Writes an output element per its request (write/in-place or add). */
__device__ __forceinline__ void mx_cuda_assign(mx_req req, float *dst, float value)
{
    if (req == MX_REQ_ADD) *dst += value;
    else if (req != MX_REQ_NULL) *dst = value;
}

/* The cuBLAS / cuDNN "beta" of a request: 0 overwrites, 1 accumulates. */
static inline float mx_cuda_beta(mx_req req) { return req == MX_REQ_ADD ? 1.0f : 0.0f; }

/* A tensor's cuDNN type: float32, float16, bfloat16 (anything else is
 * float32's: the kernels' dtype dispatch never passes it). */
static inline cudnnDataType_t mx_cudnn_type(mx_dtype d)
{
    return d == MX_FLOAT16 ? CUDNN_DATA_HALF : d == MX_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* A 4-d NCHW descriptor of a shape in dtype d, lower ranks padded with 1s
 * at the end ((N, C) -> (N, C, 1, 1)); 5-d shapes get an Nd descriptor. */
static inline mx_status mx_cudnn_tensor_of(cudnnTensorDescriptor_t desc, const mx_shape *s, mx_dtype d)
{
    const cudnnDataType_t type = mx_cudnn_type(d);
    if (s->ndim <= 4) {
        int dim[4] = {1, 1, 1, 1};
        for (int i = 0; i < s->ndim; i++) dim[i] = (int)s->dims[i];
        MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, type, dim[0], dim[1], dim[2], dim[3]));
        return MX_OK;
    }
    int dim[8], st[8];
    for (int i = 0; i < s->ndim; i++) dim[i] = (int)s->dims[i];
    st[s->ndim - 1] = 1;
    for (int i = s->ndim - 2; i >= 0; i--) st[i] = st[i + 1] * dim[i + 1];
    MX_CUDNN_TRY(cudnnSetTensorNdDescriptor(desc, type, s->ndim, dim, st));
    return MX_OK;
}

/* The same in float32. */
static inline mx_status mx_cudnn_tensor(cudnnTensorDescriptor_t desc, const mx_shape *s)
{
    return mx_cudnn_tensor_of(desc, s, MX_FLOAT32);
}

#endif /* MX_CUDA_OP_H */
