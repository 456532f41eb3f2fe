/*
 * dropout.cu - Dropout on the GPU, the contract of dropout.c: in an active
 * pass (training, or mode=always; p > 0) element i is kept with
 * probability 1-p and scaled by 1/(1-p), else zeroed, and the mask output
 * holds 0 or 1/(1-p) per element; otherwise the identity (mask all 1s).
 * Backward: dx = dy * mask (active) or dy.
 *
 * Random numbers: one 64-bit seed drawn per forward from ctx->rng on the
 * host, then counter-based Philox4x32-10 (cuRAND's device function, header
 * only) keyed by the seed with element i's index as the counter; two of its
 * four words make a 53-bit uniform double in [0, 1), kept when below 1-p as
 * the CPU does. So a seed gives the same mask whatever the launch geometry,
 * though not the CPU's mask (the CPU draws from xoshiro in sequence).
 *
 * float32, float16 and bfloat16: data, output, mask and gradients share
 * one dtype (the mask is an output of the data's type, as on the CPU,
 * whose half nodes store the float mask rounded). The keep test and the
 * scale are the same whatever the dtype (the same seed keeps the same
 * elements); y = x * scale is computed in float and rounded once, the mask
 * holds the scale rounded to the tensor's type, and backward multiplies dy
 * by that stored mask in float (so the CPU's half path exactly); req add
 * sums in float and rounds once (half.cuh). Tensors of differing dtypes
 * are refused naming them.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/dropout.h"
}

#include <curand_kernel.h>

/* Element i's uniform double in [0, 1) under key `seed`. */
__device__ __forceinline__ double drop_uniform(uint64_t seed, int64_t i)
{
    uint4 ctr = make_uint4((unsigned)((uint64_t)i & 0xffffffffu), (unsigned)((uint64_t)i >> 32), 0u, 0u);
    uint2 key = make_uint2((unsigned)(seed & 0xffffffffu), (unsigned)(seed >> 32));
    uint4 r = curand_Philox4x32_10(ctr, key);
    uint64_t bits = ((uint64_t)r.x << 32 | (uint64_t)r.y) >> 11; /* 53 bits */
    return (double)bits * (1.0 / 9007199254740992.0);            /* 2^-53 */
}

template <typename T>
__global__ void drop_forward_kernel(uint64_t seed, double keep, float scale, mx_req req_y, mx_req req_mask,
                                    const T *x, T *y, T *mask, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        const float m = drop_uniform(seed, i) < keep ? scale : 0.0f;
        const float v = mx_load(&x[i]); /* read before the mask or y (in place) is written */
        if (req_mask != MX_REQ_NULL) mx_store(&mask[i], m);
        if (req_y != MX_REQ_NULL) mx_assign(req_y, &y[i], __fmul_rn(v, m));
    }
}

/* The identity pass: y = x per request (add), mask = 1 where written. */
template <typename T>
__global__ void drop_identity_kernel(mx_req req_y, mx_req req_mask, const T *x, T *y, T *mask, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        if (req_y == MX_REQ_ADD) mx_store(&y[i], mx_load(&y[i]) + mx_load(&x[i]));
        if (req_mask != MX_REQ_NULL && req_mask != MX_REQ_ADD) mx_store(&mask[i], 1.0f);
    }
}

template <typename T> __global__ void drop_backward_kernel(mx_req req, const T *dy, const T *mask, T *dx, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        const float g = mx_load(&dy[i]);
        mx_assign(req, &dx[i], mask ? __fmul_rn(g, mx_load(&mask[i])) : g);
    }
}

static bool drop_gpu_active(const dropout_params *dp, const mx_op_ctx *ctx)
{
    return dp->p > 0 && (ctx->is_train || dp->mode == DROP_ALWAYS);
}

static mx_status drop_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const dropout_params *dp = (const dropout_params *)p;
    if (dp->axes.ndim > 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Dropout: parameter 'axes' (variational dropout) is not supported; "
                                            "leave it empty");
    const int64_t n = mx_shape_size(&in[0].shape);
    const mx_dtype dt = in[0].dtype;
    if ((req[0] != MX_REQ_NULL && out[0].dtype != dt) || (req[1] != MX_REQ_NULL && out[1].dtype != dt))
        return MX_ERROR(MX_ERR_INVALID, "Dropout: data is %s but output is %s and mask %s", mx_dtype_name(dt),
                        mx_dtype_name(out[0].dtype), mx_dtype_name(out[1].dtype));
    const void *x = in[0].data;
    void *y = out[0].data, *mask = out[1].data;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (!drop_gpu_active(dp, ctx)) {
        if (n == 0) return MX_OK;
        if ((req[0] == MX_REQ_WRITE || req[0] == MX_REQ_INPLACE) && y != x)
            MX_CUDA_TRY(cudaMemcpyAsync(y, x, (size_t)n * mx_dtype_size(dt), cudaMemcpyDeviceToDevice, stream));
        if (req[0] == MX_REQ_ADD || (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD)) {
            MX_DISPATCH_FLOAT_TYPES(dt, "Dropout", {
                drop_identity_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
                    req[0], req[1], (const T *)x, (T *)y, (T *)mask, n);
                MX_CUDA_LAUNCHED();
            });
        }
        return MX_OK;
    }
    if (!ctx->rng) return MX_ERROR(MX_ERR_INVALID, "Dropout: no random generator in the operator context");
    if (req[1] == MX_REQ_ADD)
        return MX_ERROR(MX_ERR_INVALID, "Dropout: the mask output cannot be accumulated (request add)");
    const double keep = 1.0 - dp->p;
    const float scale = keep > 0 ? (float)(1.0 / keep) : 0.0f;
    const uint64_t seed = mx_rng_next_u64(ctx->rng); /* one draw per active forward, even when n == 0 */
    if (n == 0 || (req[0] == MX_REQ_NULL && req[1] == MX_REQ_NULL)) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(dt, "Dropout", {
        drop_forward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
            seed, keep, scale, req[0], req[1], (const T *)x, (T *)y, (T *)mask, n);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

static mx_status drop_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)in;
    (void)aux;
    const dropout_params *dp = (const dropout_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const int64_t n = mx_shape_size(&out_grad[0].shape);
    if (n == 0) return MX_OK;
    const mx_dtype dt = out_grad[0].dtype;
    const void *dy = out_grad[0].data;
    void *dx = in_grad[0].data;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const bool active = drop_gpu_active(dp, ctx);
    if (in_grad[0].dtype != dt || (active && out[1].dtype != dt))
        return MX_ERROR(MX_ERR_INVALID, "Dropout: output gradient is %s but data gradient is %s and mask %s",
                        mx_dtype_name(dt), mx_dtype_name(in_grad[0].dtype), mx_dtype_name(out[1].dtype));
    if (!active && req[0] != MX_REQ_ADD) {
        if (dx != dy)
            MX_CUDA_TRY(cudaMemcpyAsync(dx, dy, (size_t)n * mx_dtype_size(dt), cudaMemcpyDeviceToDevice, stream));
        return MX_OK;
    }
    const void *mask = active ? out[1].data : NULL;
    if (active && !mask) return MX_ERROR(MX_ERR_INVALID, "Dropout: backward has no mask from the forward pass");
    MX_DISPATCH_FLOAT_TYPES(dt, "Dropout", {
        drop_backward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(req[0], (const T *)dy,
                                                                                   (const T *)mask, (T *)dx, n);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_dropout = {drop_gpu_forward, drop_gpu_backward, NULL, MX_HALF_DTYPES};
