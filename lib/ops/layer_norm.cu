/*
 * layer_norm.cu - the normalisation kernel shared by LayerNorm, GroupNorm
 * and InstanceNorm on CUDA (norm_gpu.cuh), and LayerNorm's GPU kernels.
 * The CPU's layer_norm.c per set, one thread per set, in double:
 *   mean, var (biased), std = sqrt(var + eps); y = (x - mean) / std * gamma + beta
 *   dx = (dy gamma - mean(dy gamma) - xhat mean(dy gamma xhat)) / std
 *        + dmean / n + dstd xhat / n
 * and one thread per gamma entry for dgamma = sum dy xhat, dbeta = sum dy,
 * summed in the CPU's order (so results match it to float rounding).
 */
#include "ops/norm_gpu.cuh"

#include <math.h>

__device__ __forceinline__ int64_t norm_set_base(const mx_norm_layout &l, int64_t s)
{
    return (s / l.inner) * l.len * l.inner + s % l.inner;
}

__device__ __forceinline__ int64_t norm_gamma_index(const mx_norm_layout &l, int64_t s, int64_t k)
{
    return l.per_elem ? k : s % l.gamma_len;
}

/* Mean, std = sqrt(var + eps) and the biased variance of set s. */
__device__ void norm_set_moments(const mx_norm_layout &l, double eps, const float *x, int64_t s, double *mean,
                                 double *std, double *var)
{
    const float *p = x + norm_set_base(l, s);
    double m = 0, v = 0;
    for (int64_t k = 0; k < l.len; k++) m += p[k * l.inner];
    m = l.len ? m / (double)l.len : 0.0;
    for (int64_t k = 0; k < l.len; k++) {
        const double d = p[k * l.inner] - m;
        v += d * d;
    }
    v = l.len ? v / (double)l.len : 0.0;
    *mean = m;
    *std = sqrt(v + eps);
    *var = v;
}

__global__ void norm_forward_kernel(mx_norm_layout l, double eps, const float *x, const float *gamma,
                                    const float *beta, mx_req req_y, float *y, mx_req req_mean, float *mean,
                                    mx_req req_std, float *std, bool var_out)
{
    MX_CUDA_FOR(s, l.sets)
    {
        double m, sd, var;
        norm_set_moments(l, eps, x, s, &m, &sd, &var);
        if (mean) mx_cuda_assign(req_mean, &mean[s], (float)m);
        if (std) mx_cuda_assign(req_std, &std[s], (float)(var_out ? var : sd));
        if (req_y == MX_REQ_NULL) continue;
        const int64_t b = norm_set_base(l, s);
        for (int64_t k = 0; k < l.len; k++) {
            const int64_t i = b + k * l.inner, g = norm_gamma_index(l, s, k);
            mx_cuda_assign(req_y, &y[i], (float)((x[i] - m) / sd * gamma[g] + beta[g]));
        }
    }
}

__global__ void norm_backward_data_kernel(mx_norm_layout l, double eps, const float *x, const float *gamma,
                                          const float *dy, const float *dmean, const float *dstd, mx_req req_dx,
                                          float *dx, double *mom)
{
    const double n = (double)l.len;
    MX_CUDA_FOR(s, l.sets)
    {
        double m, sd, var;
        norm_set_moments(l, eps, x, s, &m, &sd, &var);
        mom[2 * s] = m;
        mom[2 * s + 1] = sd;
        if (req_dx == MX_REQ_NULL) continue;
        const int64_t b = norm_set_base(l, s);
        double sum_dxh = 0, sum_dxh_xh = 0;
        for (int64_t k = 0; k < l.len; k++) {
            const int64_t i = b + k * l.inner, g = norm_gamma_index(l, s, k);
            const double xh = (x[i] - m) / sd, d = dy[i];
            sum_dxh += d * gamma[g];
            sum_dxh_xh += d * gamma[g] * xh;
        }
        const double dm = dmean ? dmean[s] : 0.0, ds = dstd ? dstd[s] : 0.0;
        for (int64_t k = 0; k < l.len; k++) {
            const int64_t i = b + k * l.inner, g = norm_gamma_index(l, s, k);
            const double xh = (x[i] - m) / sd, d = dy[i];
            const double v = (d * gamma[g] - sum_dxh / n - xh * sum_dxh_xh / n) / sd + dm / n + ds * xh / n;
            mx_cuda_assign(req_dx, &dx[i], (float)v);
        }
    }
}

__global__ void norm_backward_param_kernel(mx_norm_layout l, const float *x, const float *dy, const double *mom,
                                           mx_req req_dgamma, float *dgamma, mx_req req_dbeta, float *dbeta)
{
    MX_CUDA_FOR(g, l.gamma_len)
    {
        double sg = 0, sb = 0;
        const int64_t s0 = l.per_elem ? 0 : g, step = l.per_elem ? 1 : l.gamma_len;
        const int64_t k0 = l.per_elem ? g : 0, k1 = l.per_elem ? g + 1 : l.len;
        for (int64_t s = s0; s < l.sets; s += step) {
            const int64_t b = norm_set_base(l, s);
            const double m = mom[2 * s], sd = mom[2 * s + 1];
            for (int64_t k = k0; k < k1; k++) {
                const int64_t i = b + k * l.inner;
                const double d = dy[i];
                sg += d * (x[i] - m) / sd;
                sb += d;
            }
        }
        mx_cuda_assign(req_dgamma, &dgamma[g], (float)sg);
        mx_cuda_assign(req_dbeta, &dbeta[g], (float)sb);
    }
}

mx_status mx_norm_gpu_forward(const mx_op_ctx *ctx, const mx_norm_layout *l, double eps, const float *x,
                              const float *gamma, const float *beta, mx_req req_y, float *y, mx_req req_mean,
                              float *mean, mx_req req_std, float *std, bool var_out)
{
    if (l->sets == 0) return MX_OK;
    if (req_mean == MX_REQ_NULL) mean = NULL;
    if (req_std == MX_REQ_NULL) std = NULL;
    if (req_y == MX_REQ_NULL && !mean && !std) return MX_OK;
    norm_forward_kernel<<<mx_cuda_blocks(l->sets), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        *l, eps, x, gamma, beta, req_y, y, req_mean, mean, req_std, std, var_out);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

mx_status mx_norm_gpu_backward(const mx_op_ctx *ctx, const mx_norm_layout *l, double eps, const float *x,
                               const float *gamma, const float *dy, const float *dmean, const float *dstd,
                               mx_req req_dx, float *dx, mx_req req_dgamma, float *dgamma, mx_req req_dbeta,
                               float *dbeta)
{
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const bool params = req_dgamma != MX_REQ_NULL || req_dbeta != MX_REQ_NULL;
    if (req_dx == MX_REQ_NULL && !params) return MX_OK;
    double *mom = NULL;
    if (l->sets > 0) {
        void *scratch;
        MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), 2 * (size_t)l->sets * sizeof(double), &scratch));
        mom = (double *)scratch;
        norm_backward_data_kernel<<<mx_cuda_blocks(l->sets), MX_CUDA_THREADS, 0, stream>>>(
            *l, eps, x, gamma, dy, dmean, dstd, req_dx, dx, mom);
        MX_CUDA_LAUNCHED();
    }
    if (!params || l->gamma_len == 0) return MX_OK;
    norm_backward_param_kernel<<<mx_cuda_blocks(l->gamma_len), MX_CUDA_THREADS, 0, stream>>>(
        *l, x, dy, mom, req_dgamma, dgamma, req_dbeta, dbeta);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* ------------------------------------------------------------ LayerNorm */

/* ln_layout of the CPU; infer_shape has checked the axis. */
static mx_norm_layout ln_gpu_layout(const ln_params *lp, const mx_shape *d)
{
    const int axis = (int)(lp->axis < 0 ? lp->axis + d->ndim : lp->axis);
    mx_norm_layout l;
    l.len = d->dims[axis];
    l.inner = 1;
    l.per_elem = true;
    l.gamma_len = d->dims[axis];
    for (int k = axis + 1; k < d->ndim; k++) l.inner *= d->dims[k];
    l.sets = l.len ? mx_shape_size(d) / l.len : 0;
    return l;
}

static mx_status ln_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const ln_params *lp = (const ln_params *)p;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LayerNorm: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    const mx_norm_layout l = ln_gpu_layout(lp, &in[0].shape);
    return mx_norm_gpu_forward(ctx, &l, lp->eps, (const float *)in[0].data, (const float *)in[1].data,
                               (const float *)in[2].data, req[0], (float *)out[0].data, req[1],
                               (float *)out[1].data, req[2], (float *)out[2].data, false);
}

static mx_status ln_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    const ln_params *lp = (const ln_params *)p;
    const mx_norm_layout l = ln_gpu_layout(lp, &in[0].shape);
    const float *dmean = lp->output_mean_var ? (const float *)out_grad[1].data : NULL;
    const float *dstd = lp->output_mean_var ? (const float *)out_grad[2].data : NULL;
    return mx_norm_gpu_backward(ctx, &l, lp->eps, (const float *)in[0].data, (const float *)in[1].data,
                                (const float *)out_grad[0].data, dmean, dstd, req[0], (float *)in_grad[0].data,
                                req[1], (float *)in_grad[1].data, req[2], (float *)in_grad[2].data);
}

extern "C" const mx_op_kernels mx_op_gpu_layer_norm = {ln_gpu_forward, ln_gpu_backward, NULL, 0};
