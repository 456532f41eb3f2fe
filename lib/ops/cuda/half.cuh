/*
 * half.cuh - float16 and bfloat16 in the operators' GPU kernels (mixed
 * precision, fit.dtype): element types, float loads and round-to-nearest
 * stores, the cuBLAS type of a tensor (cuda_op.h: its cuDNN type and
 * descriptor), and a dispatch on a
 * tensor's dtype. Kernels compute in float and store in the tensor's type,
 * as cuDNN does with CUDNN_DATA_FLOAT compute (and as the CPU's half nodes
 * do: executor.c's run_shadowed), so a float32 tensor keeps float32's
 * kernels bit for bit.
 */
#ifndef MX_OPS_CUDA_HALF_CUH
#define MX_OPS_CUDA_HALF_CUH

#include "ops/cuda/cuda_op.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

/* Reads an element as float; writes a float rounded to nearest even. */
__device__ __forceinline__ float mx_load(const float *p) { return *p; }
__device__ __forceinline__ float mx_load(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float mx_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void mx_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void mx_store(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void mx_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* An output element per its request, in its own type (add: the sum in
 * float, rounded once). */
template <typename T> __device__ __forceinline__ void mx_assign(mx_req req, T *dst, float value)
{
    if (req == MX_REQ_ADD) mx_store(dst, mx_load(dst) + value);
    else if (req != MX_REQ_NULL) mx_store(dst, value);
}

/* A tensor's cuBLAS / CUDA library type (cuda_op.h has its cuDNN type). */
static inline cudaDataType_t mx_cuda_type(mx_dtype d)
{
    return d == MX_FLOAT16 ? CUDA_R_16F : d == MX_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Runs body with `T` the element type of dtype d (float, __half or
 * __nv_bfloat16), or returns MX_ERR_UNSUPPORTED naming `op` and d:
 *     MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "Activation", {
 *         kernel<T><<<...>>>((const T *)in[0].data, ...);
 *     });
 */
#define MX_DISPATCH_FLOAT_TYPES(d, op, ...)                                                                    \
    do {                                                                                                       \
        switch (d) {                                                                                           \
        case MX_FLOAT32: {                                                                                     \
            typedef float T;                                                                                   \
            __VA_ARGS__                                                                                        \
        } break;                                                                                               \
        case MX_FLOAT16: {                                                                                     \
            typedef __half T;                                                                                  \
            __VA_ARGS__                                                                                        \
        } break;                                                                                               \
        case MX_BFLOAT16: {                                                                                    \
            typedef __nv_bfloat16 T;                                                                           \
            __VA_ARGS__                                                                                        \
        } break;                                                                                               \
        default:                                                                                               \
            return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s tensors are not supported on the GPU", op,              \
                            mx_dtype_name(d));                                                                 \
        }                                                                                                      \
    } while (0)

#endif /* MX_OPS_CUDA_HALF_CUH */
