/*
 * lrn.cu - LRN's CUDA kernels: the CPU formula of lrn.c, one thread per
 * element, the channel window summed in ascending channel order as there.
 *   tmp_norm = knorm + alpha/nsize * sum_{window} x^2,  y = x * tmp_norm^-beta
 *   dx = dy * tmp_norm^-beta
 *        - 2*beta*alpha/nsize * x * sum_{window} dy*x*tmp_norm^(-beta-1)
 * float32, float16 and bfloat16 tensors (half.cuh): x, y, tmp_norm, dy
 * and dx all share one type (mixed precision); the kernels compute in
 * float and round each stored element to that type, as the CPU's half
 * nodes do (so tmp_norm, stored in the half type, is read back rounded by
 * backward on both devices). float32 keeps the same arithmetic bit for
 * bit.
 */
#include "ops/cuda/half.cuh"

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
template <typename T>
__global__ void lrn_forward_kernel(const T *x, T *y, T *tn, int64_t n_all, int64_t C, int64_t plane,
                                   int64_t radius, float salpha, float knorm, float beta, mx_req req_y, mx_req req_tn)
{
    MX_CUDA_FOR(i, n_all)
    {
        const int64_t c = (i / plane) % C, base = i - c * plane;
        const int64_t c0 = c - radius < 0 ? 0 : c - radius, c1 = c + radius + 1 > C ? C : c + radius + 1;
        float acc = 0.0f;
        for (int64_t cc = c0; cc < c1; cc++) {
            const float v = mx_load(&x[base + cc * plane]);
            acc += v * v;
        }
        acc = knorm + salpha * acc;
        if (req_tn != MX_REQ_NULL) mx_assign(req_tn, &tn[i], acc);
        if (req_y != MX_REQ_NULL) mx_assign(req_y, &y[i], mx_load(&x[i]) * lrn_pow_neg(acc, beta));
    }
}

template <typename T>
__global__ void lrn_backward_kernel(const T *x, const T *tn, const T *dy, T *dx, int64_t n_all,
                                    int64_t C, int64_t plane, int64_t radius, float beta, float coef, mx_req req)
{
    MX_CUDA_FOR(i, n_all)
    {
        const int64_t c = (i / plane) % C, base = i - c * plane;
        const int64_t c0 = c - radius < 0 ? 0 : c - radius, c1 = c + radius + 1 > C ? C : c + radius + 1;
        float acc = 0.0f;
        for (int64_t cc = c0; cc < c1; cc++) {
            const int64_t k = base + cc * plane;
            const float t = mx_load(&tn[k]);
            acc += mx_load(&dy[k]) * mx_load(&x[k]) * lrn_pow_neg(t, beta) / t;
        }
        mx_assign(req, &dx[i], mx_load(&dy[i]) * lrn_pow_neg(mx_load(&tn[i]), beta) + coef * mx_load(&x[i]) * acc);
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
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "LRN", {
        lrn_forward_kernel<T><<<mx_cuda_blocks(n_all), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            (const T *)in[0].data, (T *)out[0].data, (T *)out[1].data, n_all, C, plane, lp->nsize / 2, salpha,
            knorm, beta, req_y, req_tn);
    });
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
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "LRN", {
        lrn_backward_kernel<T><<<mx_cuda_blocks(n_all), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            (const T *)in[0].data, (const T *)out[1].data, (const T *)out_grad[0].data, (T *)in_grad[0].data,
            n_all, C, plane, lp->nsize / 2, beta, coef, req[0]);
    });
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_lrn = {lrn_gpu_forward, lrn_gpu_backward, NULL, MX_HALF_DTYPES};
