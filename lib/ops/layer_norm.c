/*
 * layer_norm.c - LayerNorm (MXNet's nn/layer_norm.cc) and the normalisation
 * kernel it shares with GroupNorm and InstanceNorm (layer_norm.h).
 *
 * LayerNorm normalises data over one axis (default -1): inputs data, gamma,
 * beta (gamma and beta of shape (data.shape[axis],)); outputs output, mean
 * and std (data's shape with the axis set to 1), the last two shown only
 * with output_mean_var=True. Backward recomputes the statistics from data.
 * When mean and std are visible their gradients flow back too (MXNet
 * drops them; with them unused the results agree).
 */
#include "ops/layer_norm.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int64_t set_base(const mx_norm_layout *l, int64_t s)
{
    return (s / l->inner) * l->len * l->inner + s % l->inner;
}

static inline int64_t gamma_index(const mx_norm_layout *l, int64_t s, int64_t k)
{
    return l->per_elem ? k : s % l->gamma_len;
}

/* Mean, std = sqrt(var + eps) and the (biased) variance of set s, in double. */
static void set_moments(const mx_norm_layout *l, double eps, const float *x, int64_t s, double *mean, double *std,
                        double *var)
{
    const float *p = x + set_base(l, s);
    double m = 0, v = 0;
    for (int64_t k = 0; k < l->len; k++) m += p[k * l->inner];
    m = l->len ? m / (double)l->len : 0.0;
    for (int64_t k = 0; k < l->len; k++) {
        double d = p[k * l->inner] - m;
        v += d * d;
    }
    v = l->len ? v / (double)l->len : 0.0;
    *mean = m;
    *std = sqrt(v + eps);
    if (var) *var = v;
}

void mx_norm_forward(const mx_norm_layout *l, double eps, const float *x, const float *gamma, const float *beta,
                     mx_req req_y, float *y, mx_req req_mean, float *mean, mx_req req_std, float *std, bool var_out)
{
    for (int64_t s = 0; s < l->sets; s++) {
        double m, sd, var;
        set_moments(l, eps, x, s, &m, &sd, &var);
        if (mean) mx_req_assign_f32(req_mean, &mean[s], (float)m);
        if (std) mx_req_assign_f32(req_std, &std[s], (float)(var_out ? var : sd));
        if (req_y == MX_REQ_NULL) continue;
        int64_t b = set_base(l, s);
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            mx_req_assign_f32(req_y, &y[i], (float)((x[i] - m) / sd * gamma[g] + beta[g]));
        }
    }
}

void mx_norm_backward(const mx_norm_layout *l, double eps, const float *x, const float *gamma, const float *dy,
                      const float *dmean, const float *dstd, mx_req req_dx, float *dx, mx_req req_dgamma,
                      float *dgamma, mx_req req_dbeta, float *dbeta, double *acc)
{
    double *sg = acc, *sb = acc + l->gamma_len; /* sums for dgamma, dbeta */
    for (int64_t g = 0; g < 2 * l->gamma_len; g++) acc[g] = 0.0;
    double n = (double)l->len;
    for (int64_t s = 0; s < l->sets; s++) {
        double m, sd;
        set_moments(l, eps, x, s, &m, &sd, NULL);
        int64_t b = set_base(l, s);
        /* dxhat = dy * gamma; dx = (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) / std
         *                        + dmean / n + dstd xhat / n */
        double sum_dxh = 0, sum_dxh_xh = 0;
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            double xh = (x[i] - m) / sd, d = dy ? dy[i] : 0.0;
            sum_dxh += d * gamma[g];
            sum_dxh_xh += d * gamma[g] * xh;
            sg[g] += d * xh;
            sb[g] += d;
        }
        if (req_dx == MX_REQ_NULL) continue;
        double dm = dmean ? dmean[s] : 0.0, ds = dstd ? dstd[s] : 0.0;
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            double xh = (x[i] - m) / sd, d = dy ? dy[i] : 0.0;
            double v = (d * gamma[g] - sum_dxh / n - xh * sum_dxh_xh / n) / sd + dm / n + ds * xh / n;
            mx_req_assign_f32(req_dx, &dx[i], (float)v);
        }
    }
    for (int64_t g = 0; g < l->gamma_len; g++) {
        mx_req_assign_f32(req_dgamma, &dgamma[g], (float)sg[g]);
        mx_req_assign_f32(req_dbeta, &dbeta[g], (float)sb[g]);
    }
}

/* ------------------------------------------------------------ LayerNorm */

typedef struct ln_params {
    int64_t axis;
    double eps;
    bool output_mean_var;
} ln_params;

static const mx_param_desc ln_param_table[] = {
    {"axis", MX_PARAM_INT, "-1", 1, 0, NULL, offsetof(ln_params, axis), "the axis to normalise over"},
    {"eps", MX_PARAM_FLOAT, "1e-5", 0, 1e300, NULL, offsetof(ln_params, eps),
     "added to the variance before the square root"},
    {"output_mean_var", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(ln_params, output_mean_var),
     "also show the mean and std outputs"},
};

static int ln_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "gamma";
    names[2] = "beta";
    return 3;
}

static int ln_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "mean";
    names[2] = "std";
    return 3;
}

static int ln_num_visible_outputs(const void *p) { return ((const ln_params *)p)->output_mean_var ? 3 : 1; }

static mx_status ln_axis(const ln_params *lp, const mx_shape *d, int *axis)
{
    char a[128];
    int64_t ax = lp->axis < 0 ? lp->axis + d->ndim : lp->axis;
    if (ax < 0 || ax >= d->ndim)
        return MX_ERROR(MX_ERR_INVALID, "LayerNorm: parameter 'axis' has value %lld, out of range for data of shape %s",
                        (long long)lp->axis, mx_shape_str(d, a, sizeof(a)));
    *axis = (int)ax;
    return MX_OK;
}

/* Fills an unknown per-channel parameter shape, or checks a known one. */
static mx_status vec_shape(const char *op, const char *name, mx_shape *s, int64_t n)
{
    char a[128];
    mx_shape want = {.ndim = 1, .dims = {n}};
    if (s->ndim == 0) *s = want;
    else if (!mx_shape_equal(s, &want))
        return MX_ERROR(MX_ERR_INVALID, "%s: %s has shape %s, expected (%lld,)", op, name,
                        mx_shape_str(s, a, sizeof(a)), (long long)n);
    return MX_OK;
}

static mx_status ln_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "LayerNorm: the shape of data is unknown");
    int axis;
    MX_TRY(ln_axis(p, &in[0], &axis));
    MX_TRY(vec_shape("LayerNorm", "gamma", &in[1], in[0].dims[axis]));
    MX_TRY(vec_shape("LayerNorm", "beta", &in[2], in[0].dims[axis]));
    out[0] = in[0];
    out[1] = in[0];
    out[1].dims[axis] = 1;
    out[2] = out[1];
    return MX_OK;
}

static mx_norm_layout ln_layout(const mx_shape *d, int axis)
{
    mx_norm_layout l = {.len = d->dims[axis], .inner = 1, .per_elem = true, .gamma_len = d->dims[axis]};
    for (int k = axis + 1; k < d->ndim; k++) l.inner *= d->dims[k];
    l.sets = l.len ? mx_shape_size(d) / l.len : 0;
    return l;
}

static size_t ln_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p, (void)out;
    return backward ? 2 * (size_t)mx_shape_size(&in[1]) * sizeof(double) : 0;
}

static mx_status ln_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const ln_params *lp = p;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LayerNorm: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int axis;
    MX_TRY(ln_axis(lp, &in[0].shape, &axis));
    mx_norm_layout l = ln_layout(&in[0].shape, axis);
    mx_norm_forward(&l, lp->eps, in[0].data, in[1].data, in[2].data, req[0], out[0].data, req[1],
                    req[1] != MX_REQ_NULL ? out[1].data : NULL, req[2], req[2] != MX_REQ_NULL ? out[2].data : NULL, false);
    return MX_OK;
}

static mx_status ln_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const ln_params *lp = p;
    int axis;
    MX_TRY(ln_axis(lp, &in[0].shape, &axis));
    mx_norm_layout l = ln_layout(&in[0].shape, axis);
    if (ctx->workspace_bytes < 2 * (size_t)l.gamma_len * sizeof(double))
        return MX_ERROR(MX_ERR_RUNTIME, "LayerNorm: workspace of %zu bytes is too small", ctx->workspace_bytes);
    const float *dmean = lp->output_mean_var ? out_grad[1].data : NULL;
    const float *dstd = lp->output_mean_var ? out_grad[2].data : NULL;
    mx_norm_backward(&l, lp->eps, in[0].data, in[1].data, out_grad[0].data, dmean, dstd, req[0], in_grad[0].data,
                     req[1], in_grad[1].data, req[2], in_grad[2].data, ctx->workspace);
    return MX_OK;
}

const mx_op_def mx_op_layer_norm = {
    .name = "LayerNorm",
    .doc = "Layer normalisation over one axis: (x - mean) / sqrt(var + eps) * gamma + beta.",
    .params = ln_param_table,
    .n_params = (int)(sizeof(ln_param_table) / sizeof(ln_param_table[0])),
    .params_size = sizeof(ln_params),
    .list_inputs = ln_list_inputs,
    .list_outputs = ln_list_outputs,
    .num_visible_outputs = ln_num_visible_outputs,
    .infer_shape = ln_infer_shape,
    .workspace = ln_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 0x3, /* data and gamma */
    .forward = ln_forward,
    .backward = ln_backward,
};
