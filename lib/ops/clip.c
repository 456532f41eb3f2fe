/*
 * clip.c - clip: out = min(max(x, a_min), a_max) element-wise. The gradient
 * passes where a_min <= x <= a_max and is zero outside (MXNet's clip_grad).
 */
#include "ops/op.h"
#include "ops/clip.h"

#include <stddef.h>


static const mx_param_desc clip_param_table[] = {
    {"a_min", MX_PARAM_FLOAT, NULL, 1, 0, NULL, offsetof(clip_params, a_min), "minimum value"},
    {"a_max", MX_PARAM_FLOAT, NULL, 1, 0, NULL, offsetof(clip_params, a_max), "maximum value"},
};

/* MXNet accepts a_min > a_max (every value becomes a_max); here it is
 * reported as the mistake it almost surely is. */
static mx_status clip_check(const void *p)
{
    const clip_params *cp = p;
    if (cp->a_min > cp->a_max)
        return MX_ERROR(MX_ERR_INVALID, "clip: parameter 'a_min' (%g) is greater than 'a_max' (%g)", cp->a_min,
                        cp->a_max);
    return MX_OK;
}

static int clip_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int clip_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status clip_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "clip: the shape of data is unknown");
    out[0] = in[0];
    return MX_OK;
}

static mx_status clip_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const clip_params *cp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    const float *x = in[0].data;
    float *y = out[0].data, lo = (float)cp->a_min, hi = (float)cp->a_max;
    if (req[0] == MX_REQ_ADD)
        for (int64_t i = 0; i < n; i++) y[i] += x[i] > hi ? hi : x[i] < lo ? lo : x[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > hi ? hi : x[i] < lo ? lo : x[i];
    return MX_OK;
}

static mx_status clip_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)out, (void)aux;
    const clip_params *cp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    const float *x = in[0].data, *dy = out_grad[0].data;
    float *dx = in_grad[0].data, lo = (float)cp->a_min, hi = (float)cp->a_max;
    if (req[0] == MX_REQ_ADD)
        for (int64_t i = 0; i < n; i++) dx[i] += (x[i] > hi || x[i] < lo) ? 0.0f : dy[i];
    else
        for (int64_t i = 0; i < n; i++) dx[i] = (x[i] > hi || x[i] < lo) ? 0.0f : dy[i];
    return MX_OK;
}

static const mx_inplace clip_inplace[] = {{0, 0}, {-1, -1}};

MX_OP_GPU_DECLARE(clip);

const mx_op_def mx_op_clip = {
    .name = "clip",
    .doc = "Clips values to [a_min, a_max].",
    .params = clip_param_table,
    .n_params = (int)(sizeof(clip_param_table) / sizeof(clip_param_table[0])),
    .params_size = sizeof(clip_params),
    .check = clip_check,
    .list_inputs = clip_list_inputs,
    .list_outputs = clip_list_outputs,
    .infer_shape = clip_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward_inplace = clip_inplace,
    .backward_inplace = clip_inplace,
    .forward = clip_forward,
    .backward = clip_backward,
    .gpu = MX_OP_GPU(clip),
};
