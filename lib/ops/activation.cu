/*
 * activation.cu - Activation on the GPU: one thread per element, the same
 * forms as activation.c:
 *   relu      x > 0 ? x : 0 (NaN gives 0)         dy * (y > 0)
 *   sigmoid   1 / (1 + exp(-x))                   dy * (y * (1 - y))
 *   tanh      tanh(x)                             dy * (1 - y*y)
 *   softrelu  x > 20 ? x : log1p(exp(x))          dy * -expm1(-y)
 *   softsign  x / (1 + |x|)                       dy * ((1 - |y|)^2)
 * Products are rounded before the subtraction that follows (__fmul_rn), as
 * the CPU does, rather than contracted into a fused multiply-add.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/activation.h"
}

__device__ __forceinline__ float act_f(int type, float x)
{
    switch (type) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case ACT_TANH: return tanhf(x);
    case ACT_SOFTRELU: return x > 20.0f ? x : log1pf(expf(x));
    default: return x / (1.0f + fabsf(x));
    }
}

/* The derivative as a function of the output y. */
__device__ __forceinline__ float act_df(int type, float y)
{
    switch (type) {
    case ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case ACT_SIGMOID: return __fmul_rn(y, 1.0f - y);
    case ACT_TANH: return 1.0f - __fmul_rn(y, y);
    case ACT_SOFTRELU: return -expm1f(-y);
    default: {
        float a = 1.0f - fabsf(y);
        return __fmul_rn(a, a);
    }
    }
}

__global__ void act_forward_kernel(int type, mx_req req, const float *x, float *y, int64_t n)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &y[i], act_f(type, x[i]));
}

/* y may be dy's buffer (in-place backward): each thread reads its element
 * before writing it. */
__global__ void act_backward_kernel(int type, mx_req req, const float *dy, const float *y, float *dx, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        float g = __fmul_rn(dy[i], act_df(type, y[i]));
        mx_cuda_assign(req, &dx[i], g);
    }
}

static mx_status act_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const act_params *ap = (const act_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    int64_t n = mx_shape_size(&in[0].shape);
    if (n == 0) return MX_OK;
    act_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        ap->act_type, req[0], (const float *)in[0].data, (float *)out[0].data, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status act_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)in;
    (void)aux;
    const act_params *ap = (const act_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    int64_t n = mx_shape_size(&out[0].shape);
    if (n == 0) return MX_OK;
    act_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        ap->act_type, req[0], (const float *)out_grad[0].data, (const float *)out[0].data,
        (float *)in_grad[0].data, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_activation = {act_gpu_forward, act_gpu_backward, NULL, 0};
