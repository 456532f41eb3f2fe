/*
 * lrn.cu - LRN's CUDA kernels: the CPU formula of lrn.c, one thread per
 * element, the channel window summed in ascending channel order as there.
 *   tmp_norm = knorm + alpha/nsize * sum_{window} x^2,  y = x * tmp_norm^-beta
 *   dx = dy * tmp_norm^-beta
 *        - 2*beta*alpha/nsize * x * sum_{window} dy*x*tmp_norm^(-beta-1)
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/lrn.h"
}

#include <math.h>

/* t^-beta, with beta = 0.75 through two square roots as on the CPU. */
__device__ __forceinline__ float lrn_pow_neg(float t, float beta)
{
    if (beta == 0.75f) {
        float r = sqrtf(t);
        return 1.0f / (r * sqrtf(r));
    }
    return powf(t, -beta);
}

/* Element i of (N, C, plane): its channel c and the offset of channel 0
 * of its sample at the same position. */
__global__ void lrn_forward_kernel(const float *x, float *y, float *tn, int64_t n_all, int64_t C, int64_t plane,
                                   int64_t half, float salpha, float knorm, float beta, mx_req req_y, mx_req req_tn)
{
    MX_CUDA_FOR(i, n_all)
    {
        const int64_t c = (i / plane) % C, base = i - c * plane;
        const int64_t c0 = c - half < 0 ? 0 : c - half, c1 = c + half + 1 > C ? C : c + half + 1;
        float acc = 0.0f;
        for (int64_t cc = c0; cc < c1; cc++) {
            const float v = x[base + cc * plane];
            acc += v * v;
        }
        acc = knorm + salpha * acc;
        if (req_tn != MX_REQ_NULL) mx_cuda_assign(req_tn, &tn[i], acc);
        if (req_y != MX_REQ_NULL) mx_cuda_assign(req_y, &y[i], x[i] * lrn_pow_neg(acc, beta));
    }
}

__global__ void lrn_backward_kernel(const float *x, const float *tn, const float *dy, float *dx, int64_t n_all,
                                    int64_t C, int64_t plane, int64_t half, float beta, float coef, mx_req req)
{
    MX_CUDA_FOR(i, n_all)
    {
        const int64_t c = (i / plane) % C, base = i - c * plane;
        const int64_t c0 = c - half < 0 ? 0 : c - half, c1 = c + half + 1 > C ? C : c + half + 1;
        float acc = 0.0f;
        for (int64_t cc = c0; cc < c1; cc++) {
            const int64_t k = base + cc * plane;
            acc += dy[k] * x[k] * lrn_pow_neg(tn[k], beta) / tn[k];
        }
        mx_cuda_assign(req, &dx[i], dy[i] * lrn_pow_neg(tn[i], beta) + coef * x[i] * acc);
    }
}

static mx_status lrn_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const lrn_params *lp = (const lrn_params *)p;
    const mx_shape *s = &in[0].shape;
    const int64_t C = s->dims[1], plane = s->dims[2] * s->dims[3], n_all = s->dims[0] * C * plane;
    /* tmp_norm is internal: with req NULL it may have no memory. */
    const mx_req req_y = out[0].data ? req[0] : MX_REQ_NULL, req_tn = out[1].data ? req[1] : MX_REQ_NULL;
    if (n_all == 0 || (req_y == MX_REQ_NULL && req_tn == MX_REQ_NULL)) return MX_OK;
    const float salpha = (float)(lp->alpha / (double)lp->nsize), knorm = (float)lp->knorm, beta = (float)lp->beta;
    lrn_forward_kernel<<<mx_cuda_blocks(n_all), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, (float *)out[1].data, n_all, C, plane, lp->nsize / 2,
        salpha, knorm, beta, req_y, req_tn);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status lrn_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)aux;
    const lrn_params *lp = (const lrn_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_shape *s = &in[0].shape;
    const int64_t C = s->dims[1], plane = s->dims[2] * s->dims[3], n_all = s->dims[0] * C * plane;
    if (n_all == 0) return MX_OK;
    if (!out[1].data)
        return MX_ERROR(MX_ERR_INVALID, "LRN: backward needs tmp_norm (output 1), which has no memory");
    const float beta = (float)lp->beta, coef = (float)(-2.0 * lp->beta * lp->alpha / (double)lp->nsize);
    lrn_backward_kernel<<<mx_cuda_blocks(n_all), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (const float *)out[1].data, (const float *)out_grad[0].data,
        (float *)in_grad[0].data, n_all, C, plane, lp->nsize / 2, beta, coef, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_lrn = {lrn_gpu_forward, lrn_gpu_backward, NULL, 0};
