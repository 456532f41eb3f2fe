/*
 * group_norm.c - GroupNorm (MXNet's nn/group_norm.cc) and InstanceNorm
 * (instance_norm.cc), both on data (N, C, ...) through the kernel in
 * layer_norm.c.
 *
 * GroupNorm splits the C channels into num_groups groups and normalises
 * each (sample, group) over its channels and spatial positions. As in
 * MXNet 1.9.1, gamma and beta have one entry per group, (num_groups,);
 * outputs output, mean and std (N, num_groups), the last two shown with
 * output_mean_var=True (their gradients then flow back too).
 * InstanceNorm normalises each (sample, channel) over the spatial positions
 * with gamma and beta of shape (C,); it shows `output` and keeps mean and
 * var (N, C) hidden, as MXNet counts them.
 * Backward recomputes the statistics from data.
 */
#include "ops/group_norm.h"
#include "ops/layer_norm.h"

#include <stddef.h>
#include <stdio.h>

static const mx_param_desc gn_param_table[] = {
    {"num_groups", MX_PARAM_INT, "1", 1, 1e18, NULL, offsetof(gn_params, num_groups),
     "how many groups the channels are split into"},
    {"eps", MX_PARAM_FLOAT, "1e-5", 0, 1e300, NULL, offsetof(gn_params, eps),
     "added to the variance before the square root"},
    {"output_mean_var", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(gn_params, output_mean_var),
     "also show the mean and std outputs"},
};

static const mx_param_desc in_param_table[] = {
    {"eps", MX_PARAM_FLOAT, "1e-3", 0, 1e300, NULL, offsetof(gn_params, eps),
     "added to the variance before the square root"},
};


static int gn_num_visible_outputs(const void *p) { return ((const gn_params *)p)->output_mean_var ? 3 : 1; }

static int in_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "mean";
    names[2] = "var";
    return 3;
}

static int in_num_visible_outputs(const void *p)
{
    (void)p;
    return 1;
}

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

static mx_status gn_check_data(const char *op, const gn_params *gp, const mx_shape *d, int min_ndim)
{
    char a[128];
    if (d->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", op);
    if (d->ndim < min_ndim)
        return MX_ERROR(MX_ERR_INVALID, "%s: data must have at least %d dimensions (N, C, ...), got %s", op, min_ndim,
                        mx_shape_str(d, a, sizeof(a)));
    if (gp && d->dims[1] % gp->num_groups != 0)
        return MX_ERROR(MX_ERR_INVALID, "GroupNorm: parameter 'num_groups' has value %lld, which does not divide the "
                                        "%lld channels of data %s",
                        (long long)gp->num_groups, (long long)d->dims[1], mx_shape_str(d, a, sizeof(a)));
    return MX_OK;
}

static mx_status gn_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const gn_params *gp = p;
    MX_TRY(gn_check_data("GroupNorm", gp, &in[0], 3));
    MX_TRY(vec_shape("GroupNorm", "gamma", &in[1], gp->num_groups));
    MX_TRY(vec_shape("GroupNorm", "beta", &in[2], gp->num_groups));
    out[0] = in[0];
    out[1] = (mx_shape){.ndim = 2, .dims = {in[0].dims[0], gp->num_groups}};
    out[2] = out[1];
    return MX_OK;
}

static mx_status in_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    MX_TRY(gn_check_data("InstanceNorm", NULL, &in[0], 3));
    MX_TRY(vec_shape("InstanceNorm", "gamma", &in[1], in[0].dims[1]));
    MX_TRY(vec_shape("InstanceNorm", "beta", &in[2], in[0].dims[1]));
    out[0] = in[0];
    out[1] = (mx_shape){.ndim = 2, .dims = {in[0].dims[0], in[0].dims[1]}};
    out[2] = out[1];
    return MX_OK;
}

/* Sets of `groups` per sample, each a contiguous block. */
static mx_norm_layout block_layout(const mx_shape *d, int64_t groups)
{
    int64_t n = mx_shape_size(d);
    mx_norm_layout l = {.sets = d->dims[0] * groups, .inner = 1, .per_elem = false, .gamma_len = groups};
    l.len = l.sets ? n / l.sets : 0;
    return l;
}

/* Backward keeps each set's mean and std: two doubles per (sample, group). */
static size_t gn_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p, (void)out;
    return backward ? 2 * (size_t)(in[0].dims[0] * mx_shape_size(&in[1])) * sizeof(double) : 0;
}

/* var_out: the third output holds the variance (InstanceNorm), not std. */
static mx_status norm_forward(const mx_op_ctx *ctx, const char *op, double eps, int64_t groups, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, bool var_out)
{
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    mx_norm_layout l = block_layout(&in[0].shape, groups);
    mx_norm_forward(mx_op_pool(ctx), &l, eps, in[0].data, in[1].data, in[2].data, req[0], out[0].data, req[1],
                    req[1] != MX_REQ_NULL ? out[1].data : NULL, req[2], req[2] != MX_REQ_NULL ? out[2].data : NULL,
                    var_out);
    return MX_OK;
}

static mx_status norm_backward(const char *op, const mx_op_ctx *ctx, double eps, int64_t groups, bool stats,
                               const mx_tensor *out_grad, const mx_tensor *in, const mx_req *req, mx_tensor *in_grad)
{
    mx_norm_layout l = block_layout(&in[0].shape, groups);
    if (ctx->workspace_bytes < 2 * (size_t)l.sets * sizeof(double))
        return MX_ERROR(MX_ERR_RUNTIME, "%s: workspace of %zu bytes is too small", op, ctx->workspace_bytes);
    mx_norm_backward(mx_op_pool(ctx), &l, eps, in[0].data, in[1].data, out_grad[0].data, stats ? out_grad[1].data : NULL,
                     stats ? out_grad[2].data : NULL, req[0], in_grad[0].data, req[1], in_grad[1].data, req[2],
                     in_grad[2].data, ctx->workspace);
    return MX_OK;
}

static mx_status gn_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const gn_params *gp = p;
    return norm_forward(ctx, "GroupNorm", gp->eps, gp->num_groups, in, req, out, false);
}

static mx_status gn_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const gn_params *gp = p;
    return norm_backward("GroupNorm", ctx, gp->eps, gp->num_groups, gp->output_mean_var, out_grad, in, req, in_grad);
}

static mx_status in_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return norm_forward(ctx, "InstanceNorm", ((const gn_params *)p)->eps, in[0].shape.dims[1], in, req, out, true);
}

static mx_status in_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    return norm_backward("InstanceNorm", ctx, ((const gn_params *)p)->eps, in[0].shape.dims[1], false, out_grad, in,
                         req, in_grad);
}

MX_OP_GPU_DECLARE(group_norm);
MX_OP_GPU_DECLARE(instance_norm);

const mx_op_def mx_op_group_norm = {
    .name = "GroupNorm",
    .doc = "Group normalisation of (N, C, ...) data over groups of channels; gamma, beta per group.",
    .params = gn_param_table,
    .n_params = (int)(sizeof(gn_param_table) / sizeof(gn_param_table[0])),
    .params_size = sizeof(gn_params),
    .list_inputs = mx_norm_list_inputs,
    .list_outputs = mx_norm_list_outputs,
    .num_visible_outputs = gn_num_visible_outputs,
    .infer_shape = gn_infer_shape,
    .workspace = gn_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 0x3,
    .forward = gn_forward,
    .backward = gn_backward,
    .gpu = MX_OP_GPU(group_norm),
};

const mx_op_def mx_op_instance_norm = {
    .name = "InstanceNorm",
    .doc = "Instance normalisation of (N, C, ...) data over the spatial positions; gamma, beta per channel.",
    .params = in_param_table,
    .n_params = (int)(sizeof(in_param_table) / sizeof(in_param_table[0])),
    .params_size = sizeof(gn_params),
    .list_inputs = mx_norm_list_inputs,
    .list_outputs = in_list_outputs,
    .num_visible_outputs = in_num_visible_outputs,
    .infer_shape = in_infer_shape,
    .workspace = gn_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 0x3,
    .forward = in_forward,
    .backward = in_backward,
    .gpu = MX_OP_GPU(instance_norm),
};
