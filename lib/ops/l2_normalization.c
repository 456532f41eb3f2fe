/*
 * l2_normalization.c - L2Normalization (MXNet's l2_normalization.cc):
 * y = x / sqrt(sum x^2 + eps), the sum taken per mode over
 *   instance: everything but axis 0 (data of 2 or more dimensions);
 *   channel:  axis 1, per sample and spatial position (3 or more);
 *   spatial:  the axes after 1, per sample and channel (3 or more).
 * The norms are a hidden second output `norm` as in MXNet: (N,) for
 * instance, (N, spatial...) for channel, (N, C) for spatial.
 * Backward: dx = (dy - y sum(dy y)) / norm, recomputing norm from data.
 */
#include "ops/l2_normalization.h"
#include "ops/op.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

static const char *const l2n_mode_choices[] = {"channel", "instance", "spatial", NULL};

static const mx_param_desc l2n_param_table[] = {
    {"eps", MX_PARAM_FLOAT, "1e-10", 0, 1e300, NULL, offsetof(l2n_params, eps),
     "added to the sum of squares before the square root"},
    {"mode", MX_PARAM_ENUM, "instance", 1, 0, l2n_mode_choices, offsetof(l2n_params, mode),
     "which axes the norm is taken over: instance, channel or spatial"},
};

static int l2n_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int l2n_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "norm";
    return 2;
}

static int l2n_num_visible_outputs(const void *p)
{
    (void)p;
    return 1;
}

static mx_status l2n_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const l2n_params *lp = p;
    char a[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "L2Normalization: the shape of data is unknown");
    int need = lp->mode == L2N_INSTANCE ? 2 : 3;
    if (in[0].ndim < need)
        return MX_ERROR(MX_ERR_INVALID, "L2Normalization: mode '%s' needs data of at least %d dimensions, got %s",
                        l2n_mode_choices[lp->mode], need, mx_shape_str(&in[0], a, sizeof(a)));
    out[0] = in[0];
    mx_shape n = {.ndim = 1, .dims = {in[0].dims[0]}};
    if (lp->mode == L2N_CHANNEL)
        for (int k = 2; k < in[0].ndim; k++) n.dims[n.ndim++] = in[0].dims[k];
    else if (lp->mode == L2N_SPATIAL)
        n.dims[n.ndim++] = in[0].dims[1];
    out[1] = n;
    return MX_OK;
}

/* Sets: outer x inner, each `len` elements `inner` apart. */
static void l2n_layout(const l2n_params *lp, const mx_shape *d, int64_t *outer, int64_t *len, int64_t *inner)
{
    int64_t n = mx_shape_size(d), N = d->dims[0], C = d->ndim > 1 ? d->dims[1] : 1;
    switch (lp->mode) {
    case L2N_INSTANCE: *outer = N, *len = N ? n / N : 0, *inner = 1; break;
    case L2N_CHANNEL: *outer = N, *len = C, *inner = N * C != 0 ? n / (N * C) : 0; break;
    default: *outer = N * C, *len = N * C != 0 ? n / (N * C) : 0, *inner = 1; break;
    }
}

static double set_norm(const float *p, int64_t len, int64_t inner, double eps)
{
    double s = 0;
    for (int64_t k = 0; k < len; k++) s += (double)p[k * inner] * p[k * inner];
    return sqrt(s + eps);
}

static mx_status l2n_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const l2n_params *lp = p;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "L2Normalization: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int64_t outer, len, inner;
    l2n_layout(lp, &in[0].shape, &outer, &len, &inner);
    const float *x = in[0].data;
    float *y = out[0].data, *nrm = req[1] != MX_REQ_NULL ? out[1].data : NULL;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t b = o * len * inner + i;
            double norm = set_norm(x + b, len, inner, lp->eps);
            if (nrm) mx_req_assign_f32(req[1], &nrm[o * inner + i], (float)norm); /* set order = norm's layout */
            if (req[0] == MX_REQ_NULL) continue;
            for (int64_t k = 0; k < len; k++) mx_req_assign_f32(req[0], &y[b + k * inner], (float)(x[b + k * inner] / norm));
        }
    return MX_OK;
}

static mx_status l2n_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)out, (void)aux;
    const l2n_params *lp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, len, inner;
    l2n_layout(lp, &in[0].shape, &outer, &len, &inner);
    const float *x = in[0].data, *dy = out_grad[0].data;
    float *dx = in_grad[0].data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t b = o * len * inner + i;
            double norm = set_norm(x + b, len, inner, lp->eps), dot = 0;
            for (int64_t k = 0; k < len; k++) dot += dy[b + k * inner] * (x[b + k * inner] / norm);
            for (int64_t k = 0; k < len; k++) {
                int64_t j = b + k * inner;
                mx_req_assign_f32(req[0], &dx[j], (float)((dy[j] - x[j] / norm * dot) / norm));
            }
        }
    return MX_OK;
}

MX_OP_GPU_DECLARE(l2_normalization);

const mx_op_def mx_op_l2_normalization = {
    .name = "L2Normalization",
    .doc = "Divides data by its L2 norm per instance, channel or spatial map.",
    .params = l2n_param_table,
    .n_params = (int)(sizeof(l2n_param_table) / sizeof(l2n_param_table[0])),
    .params_size = sizeof(l2n_params),
    .list_inputs = l2n_list_inputs,
    .list_outputs = l2n_list_outputs,
    .num_visible_outputs = l2n_num_visible_outputs,
    .infer_shape = l2n_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward = l2n_forward,
    .backward = l2n_backward,
    .gpu = MX_OP_GPU(l2_normalization),
};
