/*
 * leaky_relu.cu - LeakyReLU's CUDA kernels: the CPU formulas of
 * leaky_relu.c, one thread per element:
 *   leaky  y = x > 0 ? x : slope*x            dx = dy * (x > 0 ? 1 : slope)
 *   prelu  y = x > 0 ? x : gamma[c]*x         dx = dy * (x > 0 ? 1 : gamma[c])
 *   elu    y = x > 0 ? x : slope*expm1(x)     dx = dy * (x > 0 ? 1 : y + slope)
 *   selu   y = l*(x > 0 ? x : a*expm1(x))     dx = dy * (x > 0 ? l : y + l*a)
 *   gelu   y = x/2 (1 + erf(x/sqrt2))         dx = dy * gelu'(x)
 * prelu's gamma gradient, sum over x <= 0 of x*dy per channel (all
 * channels for a shared gamma), is one block per channel reducing in
 * double; it runs before dx on the stream, since dx may share dy's buffer.
 * rrelu never gets here (check() refuses it).
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/leaky_relu.h"
}

#include <math.h>

#define LR_SQRT1_2 0.70710678118654752440f
#define LR_INV_SQRT_2PI 0.39894228040143267794f /* (float)(0.5 * M_2_SQRTPI * M_SQRT1_2) */

__device__ __forceinline__ float lr_gelu(float x) { return 0.5f * x * (1.0f + erff(x * LR_SQRT1_2)); }

__device__ __forceinline__ float lr_gelu_grad(float x)
{
    return 0.5f * (1.0f + erff(x * LR_SQRT1_2)) + x * expf(-0.5f * x * x) * LR_INV_SQRT_2PI;
}

/* prelu's slope for element i of (outer, c, inner). */
__device__ __forceinline__ float lr_gamma(const float *gamma, bool shared, int64_t i, int64_t c, int64_t inner)
{
    return gamma[shared ? 0 : (i / inner) % c];
}

__global__ void lr_forward_kernel(int type, const float *x, float *y, int64_t n, float slope, const float *gamma,
                                  bool shared, int64_t c, int64_t inner, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        const float v = x[i];
        float r;
        switch (type) {
        case LR_LEAKY: r = v > 0.0f ? v : slope * v; break;
        case LR_PRELU: r = v > 0.0f ? v : lr_gamma(gamma, shared, i, c, inner) * v; break;
        case LR_ELU: r = v > 0.0f ? v : slope * expm1f(v); break;
        case LR_SELU: r = SELU_LAMBDA * (v > 0.0f ? v : SELU_ALPHA * expm1f(v)); break;
        default: r = lr_gelu(v); break;
        }
        mx_cuda_assign(req, &y[i], r);
    }
}

__global__ void lr_backward_kernel(int type, const float *x, const float *y, const float *dy, float *dx, int64_t n,
                                   float slope, const float *gamma, bool shared, int64_t c, int64_t inner, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        const float v = x[i];
        float d;
        switch (type) {
        case LR_LEAKY: d = v > 0.0f ? 1.0f : slope; break;
        case LR_PRELU: d = v > 0.0f ? 1.0f : lr_gamma(gamma, shared, i, c, inner); break;
        case LR_ELU: d = v > 0.0f ? 1.0f : y[i] + slope; break;
        case LR_SELU: d = v > 0.0f ? SELU_LAMBDA : y[i] + SELU_LAMBDA * SELU_ALPHA; break;
        default: d = lr_gelu_grad(v); break;
        }
        mx_cuda_assign(req, &dx[i], dy[i] * d);
    }
}

/* Block b sums x*dy over x <= 0 (or NaN, as the CPU's select) for channel
 * b of (outer, c, inner); with `all`, one block sums every element. */
__global__ void lr_dgamma_kernel(const float *x, const float *dy, float *dgamma, int64_t outer, int64_t c,
                                 int64_t inner, bool all, mx_req req)
{
    __shared__ double part[MX_CUDA_THREADS];
    const int64_t ch = blockIdx.x, per = all ? outer * c * inner : outer * inner;
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < per; k += blockDim.x) {
        const int64_t off = all ? k : ((k / inner) * c + ch) * inner + k % inner;
        const float v = x[off];
        if (!(v > 0.0f)) acc += (double)(v * dy[off]);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = MX_CUDA_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) mx_cuda_assign(req, &dgamma[ch], (float)part[0]);
}

/* (outer, channels, inner) of data around axis 1 (prelu_dims of the CPU). */
static void lr_gpu_dims(const mx_shape *s, int64_t *outer, int64_t *c, int64_t *inner)
{
    *outer = s->dims[0];
    *c = s->ndim > 1 ? s->dims[1] : 1;
    *inner = 1;
    for (int i = 2; i < s->ndim; i++) *inner *= s->dims[i];
}

static mx_status lr_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const lrelu_params *lp = (const lrelu_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (lp->act_type < LR_LEAKY || lp->act_type > LR_GELU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LeakyReLU: act_type %d is not supported on GPU", lp->act_type);
    const int64_t n = mx_shape_size(&in[0].shape);
    int64_t outer = 0, c = 1, inner = 1;
    const float *gamma = NULL;
    bool shared = false;
    if (lp->act_type == LR_PRELU) {
        lr_gpu_dims(&in[0].shape, &outer, &c, &inner);
        if (inner == 0) return MX_OK;
        gamma = (const float *)in[1].data;
        shared = mx_shape_size(&in[1].shape) == 1;
    }
    if (n == 0) return MX_OK;
    lr_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        lp->act_type, (const float *)in[0].data, (float *)out[0].data, n, (float)lp->slope, gamma, shared, c, inner,
        req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status lr_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)aux;
    const lrelu_params *lp = (const lrelu_params *)p;
    if (lp->act_type < LR_LEAKY || lp->act_type > LR_GELU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LeakyReLU: act_type %d is not supported on GPU", lp->act_type);
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n = mx_shape_size(&in[0].shape);
    int64_t outer = 0, c = 1, inner = 1;
    const float *gamma = NULL;
    bool shared = false;
    if (lp->act_type == LR_PRELU) {
        lr_gpu_dims(&in[0].shape, &outer, &c, &inner);
        gamma = (const float *)in[1].data;
        shared = mx_shape_size(&in[1].shape) == 1;
        if (req[1] != MX_REQ_NULL) { /* before dx: dx may be dy's buffer */
            const unsigned blocks = shared ? 1u : (unsigned)c;
            if (blocks > 0) {
                lr_dgamma_kernel<<<blocks, MX_CUDA_THREADS, 0, stream>>>(
                    (const float *)in[0].data, (const float *)out_grad[0].data, (float *)in_grad[1].data, outer, c,
                    inner, shared, req[1]);
                MX_CUDA_LAUNCHED();
            }
        }
    }
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (lp->act_type == LR_PRELU && inner == 0) return MX_OK;
    if (n == 0) return MX_OK;
    lr_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
        lp->act_type, (const float *)in[0].data, (const float *)out[0].data, (const float *)out_grad[0].data,
        (float *)in_grad[0].data, n, (float)lp->slope, gamma, shared, c, inner, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_leaky_relu = {lr_gpu_forward, lr_gpu_backward, NULL, 0};
