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
#include "parallel/parallel.h"

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

/* One forward or backward call, shared by the pieces of a parallel region. */
typedef struct norm_job {
    const mx_norm_layout *l;
    double eps;
    const float *x, *gamma, *beta, *dy, *dmean, *dstd;
    mx_req req_y, req_mean, req_std, req_dx, req_dgamma, req_dbeta;
    float *y, *mean, *std, *dx, *dgamma, *dbeta;
    bool var_out;
    double *mom; /* backward: mean and std of each set */
} norm_job;

/* Pieces of at least ~8K elements: sets are independent. */
static int64_t norm_grain(mx_threadpool *pool, int64_t items, int64_t per_item)
{
    int64_t min = per_item > 0 ? 8192 / per_item : 1;
    return mx_parallel_grain(pool, items, 4, min > 0 ? min : 1);
}

static void norm_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const norm_job *j = arg;
    const mx_norm_layout *l = j->l;
    for (int64_t s = lo; s < hi; s++) {
        double m, sd, var;
        set_moments(l, j->eps, j->x, s, &m, &sd, &var);
        if (j->mean) mx_req_assign_f32(j->req_mean, &j->mean[s], (float)m);
        if (j->std) mx_req_assign_f32(j->req_std, &j->std[s], (float)(j->var_out ? var : sd));
        if (j->req_y == MX_REQ_NULL) continue;
        int64_t b = set_base(l, s);
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            mx_req_assign_f32(j->req_y, &j->y[i], (float)((j->x[i] - m) / sd * j->gamma[g] + j->beta[g]));
        }
    }
}

void mx_norm_forward(mx_threadpool *pool, const mx_norm_layout *l, double eps, const float *x, const float *gamma,
                     const float *beta, mx_req req_y, float *y, mx_req req_mean, float *mean, mx_req req_std,
                     float *std, bool var_out)
{
    norm_job j = {.l = l, .eps = eps, .x = x, .gamma = gamma, .beta = beta, .req_y = req_y, .y = y,
                  .req_mean = req_mean, .mean = mean, .req_std = req_std, .std = std, .var_out = var_out};
    mx_parallel_for(pool, l->sets, norm_grain(pool, l->sets, l->len), norm_forward_range, &j);
}

/* Pass 1, per set: its moments (kept for pass 2) and the data gradient
 *   dxhat = dy * gamma
 *   dx = (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) / std + dmean / n + dstd xhat / n. */
static void norm_backward_data_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const norm_job *j = arg;
    const mx_norm_layout *l = j->l;
    double n = (double)l->len;
    for (int64_t s = lo; s < hi; s++) {
        double m, sd;
        set_moments(l, j->eps, j->x, s, &m, &sd, NULL);
        j->mom[2 * s] = m;
        j->mom[2 * s + 1] = sd;
        if (j->req_dx == MX_REQ_NULL) continue;
        int64_t b = set_base(l, s);
        double sum_dxh = 0, sum_dxh_xh = 0;
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            double xh = (j->x[i] - m) / sd, d = j->dy ? j->dy[i] : 0.0;
            sum_dxh += d * j->gamma[g];
            sum_dxh_xh += d * j->gamma[g] * xh;
        }
        double dm = j->dmean ? j->dmean[s] : 0.0, ds = j->dstd ? j->dstd[s] : 0.0;
        for (int64_t k = 0; k < l->len; k++) {
            int64_t i = b + k * l->inner, g = gamma_index(l, s, k);
            double xh = (j->x[i] - m) / sd, d = j->dy ? j->dy[i] : 0.0;
            double v = (d * j->gamma[g] - sum_dxh / n - xh * sum_dxh_xh / n) / sd + dm / n + ds * xh / n;
            mx_req_assign_f32(j->req_dx, &j->dx[i], (float)v);
        }
    }
}

/* Pass 2, per gamma entry: dgamma = sum dy xhat, dbeta = sum dy over the
 * elements it scales (a fixed order, so results do not depend on the split). */
static void norm_backward_param_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const norm_job *j = arg;
    const mx_norm_layout *l = j->l;
    for (int64_t g = lo; g < hi; g++) {
        double sg = 0, sb = 0;
        int64_t s0 = l->per_elem ? 0 : g, ds = l->per_elem ? 1 : l->gamma_len;
        int64_t k0 = l->per_elem ? g : 0, k1 = l->per_elem ? g + 1 : l->len;
        for (int64_t s = s0; s < l->sets; s += ds) {
            int64_t b = set_base(l, s);
            double m = j->mom[2 * s], sd = j->mom[2 * s + 1];
            for (int64_t k = k0; k < k1; k++) {
                int64_t i = b + k * l->inner;
                double d = j->dy ? j->dy[i] : 0.0;
                sg += d * (j->x[i] - m) / sd;
                sb += d;
            }
        }
        mx_req_assign_f32(j->req_dgamma, &j->dgamma[g], (float)sg);
        mx_req_assign_f32(j->req_dbeta, &j->dbeta[g], (float)sb);
    }
}

void mx_norm_backward(mx_threadpool *pool, const mx_norm_layout *l, double eps, const float *x, const float *gamma,
                      const float *dy, const float *dmean, const float *dstd, mx_req req_dx, float *dx,
                      mx_req req_dgamma, float *dgamma, mx_req req_dbeta, float *dbeta, double *moments)
{
    norm_job j = {.l = l, .eps = eps, .x = x, .gamma = gamma, .dy = dy, .dmean = dmean, .dstd = dstd,
                  .req_dx = req_dx, .dx = dx, .req_dgamma = req_dgamma, .dgamma = dgamma, .req_dbeta = req_dbeta,
                  .dbeta = dbeta, .mom = moments};
    mx_parallel_for(pool, l->sets, norm_grain(pool, l->sets, l->len), norm_backward_data_range, &j);
    if (req_dgamma == MX_REQ_NULL && req_dbeta == MX_REQ_NULL) return;
    int64_t per = l->gamma_len ? l->sets * l->len / l->gamma_len : 0; /* elements per gamma entry */
    mx_parallel_for(pool, l->gamma_len, norm_grain(pool, l->gamma_len, per), norm_backward_param_range, &j);
}

/* ------------------------------------------------------------ LayerNorm */

static const mx_param_desc ln_param_table[] = {
    {"axis", MX_PARAM_INT, "-1", 1, 0, NULL, offsetof(ln_params, axis), "the axis to normalise over"},
    {"eps", MX_PARAM_FLOAT, "1e-5", 0, 1e300, NULL, offsetof(ln_params, eps),
     "added to the variance before the square root"},
    {"output_mean_var", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(ln_params, output_mean_var),
     "also show the mean and std outputs"},
};

int mx_norm_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "gamma";
    names[2] = "beta";
    return 3;
}

int mx_norm_list_outputs(const void *p, const char **names)
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

/* Backward keeps each set's mean and std: two doubles per entry of mean. */
static size_t ln_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p, (void)in;
    return backward ? 2 * (size_t)mx_shape_size(&out[1]) * sizeof(double) : 0;
}

static mx_status ln_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const ln_params *lp = p;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "LayerNorm: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int axis;
    MX_TRY(ln_axis(lp, &in[0].shape, &axis));
    mx_norm_layout l = ln_layout(&in[0].shape, axis);
    mx_norm_forward(mx_op_pool(ctx), &l, lp->eps, in[0].data, in[1].data, in[2].data, req[0], out[0].data, req[1],
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
    if (ctx->workspace_bytes < 2 * (size_t)l.sets * sizeof(double))
        return MX_ERROR(MX_ERR_RUNTIME, "LayerNorm: workspace of %zu bytes is too small", ctx->workspace_bytes);
    const float *dmean = lp->output_mean_var ? out_grad[1].data : NULL;
    const float *dstd = lp->output_mean_var ? out_grad[2].data : NULL;
    mx_norm_backward(mx_op_pool(ctx), &l, lp->eps, in[0].data, in[1].data, out_grad[0].data, dmean, dstd, req[0], in_grad[0].data,
                     req[1], in_grad[1].data, req[2], in_grad[2].data, ctx->workspace);
    return MX_OK;
}

MX_OP_GPU_DECLARE(layer_norm);

const mx_op_def mx_op_layer_norm = {
    .name = "LayerNorm",
    .doc = "Layer normalisation over one axis: (x - mean) / sqrt(var + eps) * gamma + beta.",
    .params = ln_param_table,
    .n_params = (int)(sizeof(ln_param_table) / sizeof(ln_param_table[0])),
    .params_size = sizeof(ln_params),
    .list_inputs = mx_norm_list_inputs,
    .list_outputs = mx_norm_list_outputs,
    .num_visible_outputs = ln_num_visible_outputs,
    .infer_shape = ln_infer_shape,
    .workspace = ln_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 0x3, /* data and gamma */
    .forward = ln_forward,
    .backward = ln_backward,
    .gpu = MX_OP_GPU(layer_norm),
};
