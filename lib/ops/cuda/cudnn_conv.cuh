/*
 * cudnn_conv.cuh - the cuDNN descriptors of one 2-d convolution call,
 * shared by Convolution (forward = cuDNN's forward) and Deconvolution
 * (forward = cuDNN's backward data): NCHW, cross-correlation, groups on
 * the descriptor. Made per call and destroyed when the call returns.
 *   float32 tensors: FMA math (no TF32), exactly as before mixed precision.
 *   float16 / bfloat16 tensors (x, w, y and bias all of that type): compute
 *     type CUDNN_DATA_FLOAT (float accumulation: cuDNN's PSEUDO_HALF and
 *     BFLOAT16 configurations), math CUDNN_TENSOR_OP_MATH (tensor cores
 *     admitted) while algorithms are listed; each algorithm then runs (and
 *     has its workspace sized) under the math type its perf entry reported
 *     (mx_cudnn_conv_math), as MXNet and PyTorch do. Down-converting math
 *     (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) is refused for every dtype.
 * Half-precision bias: own kernels (mx_conv_bias_add, mx_conv_bias_grad:
 * float sums, rounded once when stored) rather than cudnnAddTensor /
 * cudnnConvolutionBackwardBias, whose bfloat16 support cuDNN does not
 * document; float32 keeps cuDNN's calls.
 */
#ifndef MX_OPS_CUDA_CUDNN_CONV_CUH
#define MX_OPS_CUDA_CUDNN_CONV_CUH

#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

struct mx_cudnn_conv {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr; /* conv input, conv output, bias */
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    mx_dtype dtype = MX_FLOAT32; /* of every tensor */
    mx_cudnn_conv() = default;
    mx_cudnn_conv(const mx_cudnn_conv &) = delete;
    mx_cudnn_conv &operator=(const mx_cudnn_conv &) = delete;
    ~mx_cudnn_conv()
    {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (b) cudnnDestroyTensorDescriptor(b);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
};

/* The shapes of the convolution cuDNN computes: input x (n, c, h, w),
 * output y (n, k, oh, ow), filter (k, c / groups, kh, kw), bias (1, bias_c,
 * 1, 1). *fwd gets cuDNN's own output dims for x and the filter, for the
 * caller to check against its inferred shapes. */
struct mx_cudnn_conv_shape {
    int n, c, h, w, k, oh, ow, kh, kw, ph, pw, sh, sw, dh, dw, groups, bias_c;
};

/* The math type algorithms are listed under: float32 FMA, half tensor ops. */
static inline cudnnMathType_t mx_cudnn_conv_list_math(mx_dtype dtype)
{
    return dtype == MX_FLOAT32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* Whether an algorithm's reported math type is admitted: float32 never a
 * tensor-core (TF32) variant; half tensor cores but no down-conversion. */
static inline bool mx_cudnn_conv_math_ok(mx_dtype dtype, cudnnMathType_t m)
{
    if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
    return dtype != MX_FLOAT32 || m != CUDNN_TENSOR_OP_MATH;
}

/* Half: puts math type m on the descriptor (an algorithm's own, before its
 * workspace query or run; or mx_cudnn_conv_list_math before listing).
 * float32: nothing (the descriptor keeps FMA math, as always). */
static inline mx_status mx_cudnn_conv_math(const mx_cudnn_conv &d, cudnnMathType_t m)
{
    if (d.dtype == MX_FLOAT32) return MX_OK;
    MX_CUDNN_TRY(cudnnSetConvolutionMathType(d.conv, m));
    return MX_OK;
}

/* The descriptors of `op` (named in errors) for tensors of dtype (float32,
 * float16 or bfloat16; others are refused). */
static inline mx_status mx_cudnn_conv_init(mx_cudnn_conv *d, const char *op, const mx_cudnn_conv_shape &s,
                                           mx_dtype dtype, int fwd[4])
{
    if (dtype != MX_FLOAT32 && dtype != MX_FLOAT16 && dtype != MX_BFLOAT16)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s tensors are not supported on gpu (float32, float16, bfloat16)",
                        op, mx_dtype_name(dtype));
    d->dtype = dtype;
    const cudnnDataType_t type = mx_cudnn_type(dtype);
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->b));
    MX_CUDNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    MX_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&d->conv));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, type, s.n, s.c, s.h, s.w));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, type, s.n, s.k, s.oh, s.ow));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->b, CUDNN_TENSOR_NCHW, type, 1, s.bias_c, 1, 1));
    MX_CUDNN_TRY(cudnnSetFilter4dDescriptor(d->w, type, CUDNN_TENSOR_NCHW, s.k, s.c / s.groups, s.kh, s.kw));
    /* Float compute for every dtype (half: float accumulation). */
    MX_CUDNN_TRY(cudnnSetConvolution2dDescriptor(d->conv, s.ph, s.pw, s.sh, s.sw, s.dh, s.dw, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT));
    MX_CUDNN_TRY(cudnnSetConvolutionMathType(d->conv, mx_cudnn_conv_list_math(dtype)));
    MX_CUDNN_TRY(cudnnSetConvolutionGroupCount(d->conv, s.groups));
    MX_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &fwd[0], &fwd[1], &fwd[2], &fwd[3]));
    return MX_OK;
}

/* ------------------------------------------------------------ half-precision bias */

/* y[n, c, i] += b[c] over y (n, C, HW): the sum in float, rounded once. */
template <typename T> __global__ void mx_conv_bias_add_kernel(T *y, const T *b, int64_t C, int64_t HW, int64_t total)
{
    MX_CUDA_FOR(i, total) mx_store(&y[i], mx_load(&y[i]) + mx_load(&b[i / HW % C]));
}

/* db[c] (per request) = the sum over n and i of dy[n, c, i]: one block of
 * MX_CUDA_THREADS (a power of two) per channel, float partial sums, a tree
 * in shared memory. */
template <typename T>
__global__ void mx_conv_bias_grad_kernel(const T *dy, T *db, int64_t N, int64_t C, int64_t HW, mx_req req)
{
    __shared__ float part[MX_CUDA_THREADS];
    const int64_t c = blockIdx.x;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) acc += mx_load(&dy[(i / HW * C + c) * HW + i % HW]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) mx_assign(req, &db[c], part[0]);
}

/* Adds bias b (C) to y (N, C, HW), both of dtype (half types; float32 uses
 * cudnnAddTensor). `op` names the caller in errors. */
static inline mx_status mx_conv_bias_add(cudaStream_t stream, const char *op, mx_dtype dtype, void *y, const void *b,
                                         int64_t N, int64_t C, int64_t HW)
{
    const int64_t total = N * C * HW;
    if (total == 0) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(dtype, op, {
        mx_conv_bias_add_kernel<T>
            <<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, stream>>>((T *)y, (const T *)b, C, HW, total);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

/* db (C) per req = dy (N, C, HW) summed over N and HW (half types; float32
 * uses cudnnConvolutionBackwardBias). */
static inline mx_status mx_conv_bias_grad(cudaStream_t stream, const char *op, mx_dtype dtype, const void *dy,
                                          void *db, int64_t N, int64_t C, int64_t HW, mx_req req)
{
    if (C == 0 || req == MX_REQ_NULL) return MX_OK;
    if (C > 0x7fffffff)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %lld bias channels exceed a grid", op, (long long)C);
    MX_DISPATCH_FLOAT_TYPES(dtype, op, {
        mx_conv_bias_grad_kernel<T>
            <<<(unsigned)C, MX_CUDA_THREADS, 0, stream>>>((const T *)dy, (T *)db, N, C, HW, req);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

#endif /* MX_OPS_CUDA_CUDNN_CONV_CUH */
