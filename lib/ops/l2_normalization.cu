/*
 * l2_normalization.cu - L2Normalization's CUDA kernels (the CPU's
 * l2_normalization.c): one thread per set (outer x inner sets of `len`
 * elements `inner` apart), in double as there:
 *   norm = sqrt(sum x^2 + eps), y = x / norm
 *   dx = (dy - x / norm * sum(dy x / norm)) / norm, norm recomputed.
 * The hidden `norm` output is written when requested.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/l2_normalization.h"
}

#include <math.h>

__device__ __forceinline__ double l2n_set_norm(const float *p, int64_t len, int64_t inner, double eps)
{
    double s = 0;
    for (int64_t k = 0; k < len; k++) s += (double)p[k * inner] * p[k * inner];
    return sqrt(s + eps);
}

__global__ void l2n_forward_kernel(const float *x, float *y, float *nrm, int64_t outer, int64_t len, int64_t inner,
                                   double eps, mx_req req_y, mx_req req_n)
{
    MX_CUDA_FOR(s, outer * inner)
    {
        const int64_t o = s / inner, i = s % inner, b = o * len * inner + i;
        const double norm = l2n_set_norm(x + b, len, inner, eps);
        if (nrm) mx_cuda_assign(req_n, &nrm[s], (float)norm); /* set order = norm's layout */
        if (req_y == MX_REQ_NULL) continue;
        for (int64_t k = 0; k < len; k++) mx_cuda_assign(req_y, &y[b + k * inner], (float)(x[b + k * inner] / norm));
    }
}

__global__ void l2n_backward_kernel(const float *x, const float *dy, float *dx, int64_t outer, int64_t len,
                                    int64_t inner, double eps, mx_req req)
{
    MX_CUDA_FOR(s, outer * inner)
    {
        const int64_t o = s / inner, i = s % inner, b = o * len * inner + i;
        const double norm = l2n_set_norm(x + b, len, inner, eps);
        double dot = 0;
        for (int64_t k = 0; k < len; k++) dot += dy[b + k * inner] * (x[b + k * inner] / norm);
        for (int64_t k = 0; k < len; k++) {
            const int64_t j = b + k * inner;
            mx_cuda_assign(req, &dx[j], (float)((dy[j] - x[j] / norm * dot) / norm));
        }
    }
}

/* l2n_layout of the CPU: sets outer x inner, each `len` elements `inner` apart. */
static void l2n_gpu_layout(const l2n_params *lp, const mx_shape *d, int64_t *outer, int64_t *len, int64_t *inner)
{
    const int64_t n = mx_shape_size(d), N = d->dims[0], C = d->ndim > 1 ? d->dims[1] : 1;
    switch (lp->mode) {
    case L2N_INSTANCE: *outer = N, *len = N ? n / N : 0, *inner = 1; break;
    case L2N_CHANNEL: *outer = N, *len = C, *inner = N * C != 0 ? n / (N * C) : 0; break;
    default: *outer = N * C, *len = N * C != 0 ? n / (N * C) : 0, *inner = 1; break;
    }
}

static mx_status l2n_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const l2n_params *lp = (const l2n_params *)p;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "L2Normalization: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int64_t outer, len, inner;
    l2n_gpu_layout(lp, &in[0].shape, &outer, &len, &inner);
    float *nrm = req[1] != MX_REQ_NULL ? (float *)out[1].data : NULL;
    const int64_t sets = outer * inner;
    if (sets == 0 || (req[0] == MX_REQ_NULL && !nrm)) return MX_OK;
    l2n_forward_kernel<<<mx_cuda_blocks(sets), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, nrm, outer, len, inner, lp->eps, req[0], req[1]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status l2n_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)out, (void)aux;
    const l2n_params *lp = (const l2n_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, len, inner;
    l2n_gpu_layout(lp, &in[0].shape, &outer, &len, &inner);
    const int64_t sets = outer * inner;
    if (sets == 0) return MX_OK;
    l2n_backward_kernel<<<mx_cuda_blocks(sets), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (const float *)out_grad[0].data, (float *)in_grad[0].data, outer, len, inner,
        lp->eps, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_l2_normalization = {l2n_gpu_forward, l2n_gpu_backward, NULL, 0};
