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
 */
#include "ops/cuda/cuda_op.h"

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

__global__ void drop_forward_kernel(uint64_t seed, double keep, float scale, mx_req req_y, mx_req req_mask,
                                    const float *x, float *y, float *mask, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        const float m = drop_uniform(seed, i) < keep ? scale : 0.0f;
        if (req_mask != MX_REQ_NULL) mask[i] = m;
        if (req_y != MX_REQ_NULL) mx_cuda_assign(req_y, &y[i], __fmul_rn(x[i], m));
    }
}

/* The identity pass: y = x per request (add), mask = 1 where written. */
__global__ void drop_identity_kernel(mx_req req_y, mx_req req_mask, const float *x, float *y, float *mask, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        if (req_y == MX_REQ_ADD) y[i] += x[i];
        if (req_mask != MX_REQ_NULL && req_mask != MX_REQ_ADD) mask[i] = 1.0f;
    }
}

__global__ void drop_backward_kernel(mx_req req, const float *dy, const float *mask, float *dx, int64_t n)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &dx[i], mask ? __fmul_rn(dy[i], mask[i]) : dy[i]);
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
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data, *mask = (float *)out[1].data;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (!drop_gpu_active(dp, ctx)) {
        if (n == 0) return MX_OK;
        if ((req[0] == MX_REQ_WRITE || req[0] == MX_REQ_INPLACE) && y != x)
            MX_CUDA_TRY(cudaMemcpyAsync(y, x, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        if (req[0] == MX_REQ_ADD || (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD)) {
            drop_identity_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(req[0], req[1], x, y, mask, n);
            MX_CUDA_LAUNCHED();
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
    drop_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(seed, keep, scale, req[0], req[1], x, y,
                                                                           mask, n);
    MX_CUDA_LAUNCHED();
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
    const float *dy = (const float *)out_grad[0].data;
    float *dx = (float *)in_grad[0].data;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const bool active = drop_gpu_active(dp, ctx);
    if (!active && req[0] != MX_REQ_ADD) {
        if (dx != dy) MX_CUDA_TRY(cudaMemcpyAsync(dx, dy, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        return MX_OK;
    }
    const float *mask = active ? (const float *)out[1].data : NULL;
    if (active && !mask) return MX_ERROR(MX_ERR_INVALID, "Dropout: backward has no mask from the forward pass");
    drop_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(req[0], dy, mask, dx, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_dropout = {drop_gpu_forward, drop_gpu_backward, NULL, 0};
