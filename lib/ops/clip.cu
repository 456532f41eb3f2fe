/*
 * clip.cu - clip of clip.c on the GPU: y = min(max(x, a_min), a_max) and
 * dx = dy where a_min <= x <= a_max, 0 outside; one thread per element,
 * the CPU's expressions (NaN passes forward, its gradient passes too).
 */
#include "ops/clip.h"
#include "ops/cuda/cuda_op.h"

__global__ void clipg_fwd_k(int64_t n, const float *x, float *y, float lo, float hi, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = x[i];
        mx_cuda_assign(req, &y[i], v > hi ? hi : v < lo ? lo : v);
    }
}

__global__ void clipg_bwd_k(int64_t n, const float *dy, const float *x, float *dx, float lo, float hi, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = x[i];
        mx_cuda_assign(req, &dx[i], (v > hi || v < lo) ? 0.0f : dy[i]);
    }
}

static mx_status clipg_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const clip_params *cp = (const clip_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    clipg_fwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)in[0].data, (float *)out[0].data, (float)cp->a_min, (float)cp->a_max, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status clipg_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const clip_params *cp = (const clip_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    clipg_bwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)out_grad[0].data, (const float *)in[0].data, (float *)in_grad[0].data, (float)cp->a_min,
        (float)cp->a_max, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_clip = {clipg_forward, clipg_backward, NULL, 0};
