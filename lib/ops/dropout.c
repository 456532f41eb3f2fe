/*
 * dropout.c - Dropout: in training (or always, with mode=always) each
 * element is kept with probability 1-p and scaled by 1/(1-p), else zeroed;
 * otherwise the identity. Outputs: output and the mask (0 or 1/(1-p) per
 * element, internal), which backward multiplies into the gradient.
 *
 * Draws come from ctx->rng (one uniform double per element, kept when
 * below 1-p). p = 1 drops everything (no division by zero). axes
 * (variational dropout, one mask shared along some axes) is refused with
 * MX_ERR_UNSUPPORTED.
 */
#include "ops/op.h"
#include "ops/dropout.h"

#include <stddef.h>
#include <string.h>

static const char *const dropout_modes[] = {"training", "always", NULL};

static const mx_param_desc dropout_param_table[] = {
    {"p", MX_PARAM_FLOAT, "0.5", 0, 1, NULL, offsetof(dropout_params, p), "fraction of the input dropped"},
    {"mode", MX_PARAM_ENUM, "training", 1, 0, dropout_modes, offsetof(dropout_params, mode),
     "training: drop in training passes only; always: in every pass"},
    {"axes", MX_PARAM_TUPLE, "()", 1, 0, NULL, offsetof(dropout_params, axes),
     "axes sharing one mask (not supported: must be empty)"},
    {"cudnn_off", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(dropout_params, cudnn_off), "accepted; no effect"},
};

static mx_status dropout_check(const void *p)
{
    const dropout_params *dp = p;
    if (dp->axes.ndim > 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Dropout: parameter 'axes' (variational dropout) is not supported; "
                                            "leave it empty");
    return MX_OK;
}

static int dropout_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int dropout_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "mask";
    return 2;
}

static int dropout_num_visible_outputs(const void *p)
{
    (void)p;
    return 1;
}

static mx_status dropout_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p;
    (void)n_in;
    (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Dropout: the shape of data is unknown");
    out[0] = in[0];
    out[1] = in[0];
    return MX_OK;
}

/* MXNet's Dropout: the identity in inference passes unless mode=always. */
static bool dropout_uses_rng(const void *p, bool is_train)
{
    const dropout_params *dp = p;
    return dp->p > 0 && (is_train || dp->mode == DROP_ALWAYS);
}

static bool dropout_active(const dropout_params *dp, const mx_op_ctx *ctx)
{
    return dropout_uses_rng(dp, ctx->is_train);
}

static mx_status dropout_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const dropout_params *dp = p;
    int64_t n = mx_shape_size(&in[0].shape);
    const float *x = in[0].data;
    float *y = out[0].data, *mask = out[1].data;
    if (!dropout_active(dp, ctx)) {
        if (req[0] == MX_REQ_ADD)
            for (int64_t i = 0; i < n; i++) y[i] += x[i];
        else if (req[0] != MX_REQ_NULL && y != x)
            memcpy(y, x, (size_t)n * sizeof(float));
        if (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD)
            for (int64_t i = 0; i < n; i++) mask[i] = 1.0f;
        return MX_OK;
    }
    if (!ctx->rng) return MX_ERROR(MX_ERR_INVALID, "Dropout: no random generator in the operator context");
    if (req[1] == MX_REQ_ADD)
        return MX_ERROR(MX_ERR_INVALID, "Dropout: the mask output cannot be accumulated (request add)");
    const double keep = 1.0 - dp->p;
    const float scale = keep > 0 ? (float)(1.0 / keep) : 0.0f;
    /* No backward reads the mask (a prediction bind): draw it, don't keep it. */
    bool keep_mask = req[1] != MX_REQ_NULL;
    for (int64_t i = 0; i < n; i++) {
        float m = mx_rng_next_double(ctx->rng) < keep ? scale : 0.0f;
        if (keep_mask) mask[i] = m;
        if (req[0] == MX_REQ_ADD) y[i] += x[i] * m;
        else if (req[0] != MX_REQ_NULL) y[i] = x[i] * m;
    }
    return MX_OK;
}

static mx_status dropout_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)in;
    (void)aux;
    const dropout_params *dp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    const float *dy = out_grad[0].data, *mask = out[1].data;
    float *dx = in_grad[0].data;
    if (!dropout_active(dp, ctx)) {
        if (req[0] == MX_REQ_ADD)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
        else if (dx != dy)
            memcpy(dx, dy, (size_t)n * sizeof(float));
        return MX_OK;
    }
    if (req[0] == MX_REQ_ADD)
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * mask[i];
    else
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i];
    return MX_OK;
}

static const mx_inplace dropout_inplace[] = {{0, 0}, {-1, -1}};

MX_OP_GPU_DECLARE(dropout);

const mx_op_def mx_op_dropout = {
    .name = "Dropout",
    .doc = "Zeroes elements with probability p in training and scales the rest by 1/(1-p).",
    .params = dropout_param_table,
    .n_params = (int)(sizeof(dropout_param_table) / sizeof(dropout_param_table[0])),
    .params_size = sizeof(dropout_params),
    .flags = MX_OP_NEEDS_RNG,
    .check = dropout_check,
    .list_inputs = dropout_list_inputs,
    .list_outputs = dropout_list_outputs,
    .num_visible_outputs = dropout_num_visible_outputs,
    .infer_shape = dropout_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA,
    .backward_out_mask = 1u << 1, /* the mask, not the output */
    .forward_inplace = dropout_inplace,
    .backward_inplace = dropout_inplace,
    .uses_rng = dropout_uses_rng,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .gpu = MX_OP_GPU(dropout),
};
