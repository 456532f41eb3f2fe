/*
 * convolution.c - Convolution (alias conv): 1-D (N, C, W) and 2-D
 * (N, C, H, W) grouped convolution with stride, dilation and zero padding.
 * weight (num_filter, C/num_group, KH, KW), bias (num_filter) unless
 * no_bias; out (N, num_filter, OH, OW) with
 *   OH = (H + 2*pad - (dilate*(KH-1) + 1)) / stride + 1   (likewise OW).
 * The work is im2col + SGEMM (im2col.c) in both directions (depthwise
 * layers: conv_depthwise.c, no column buffer); the column
 * buffer comes from the workspace, whose size `workspace` (MB) caps as in
 * MXNet. cudnn_tune and cudnn_off are accepted for compatibility and do
 * not change the CPU path.
 */
#include "ops/cpu/conv_depthwise.h"
#include "ops/convolution.h"
#include "ops/cpu/im2col.h"
#include "ops/op.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const conv_tune_choices[] = {"None", "off", "limited_workspace", "fastest", NULL};
static const char *const conv_layout_choices[] = {"None", "NCW", "NCHW", "NCDHW", "NHWC", "NDHWC", NULL};

static const mx_param_desc conv_param_table[] = {
    {"kernel", MX_PARAM_TUPLE, NULL, 1, 1e9, NULL, offsetof(conv_params, kernel), "kernel size: (w,) or (h, w)"},
    {"stride", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(conv_params, stride), "stride; default 1 per axis"},
    {"dilate", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(conv_params, dilate), "dilation; default 1 per axis"},
    {"pad", MX_PARAM_TUPLE, "()", 0, 1e9, NULL, offsetof(conv_params, pad), "zero padding; default 0 per axis"},
    {"num_filter", MX_PARAM_INT, NULL, 1, 1e9, NULL, offsetof(conv_params, num_filter), "output channels"},
    {"num_group", MX_PARAM_INT, "1", 1, 1e9, NULL, offsetof(conv_params, num_group), "channel groups"},
    {"workspace", MX_PARAM_INT, "1024", 0, 1e9, NULL, offsetof(conv_params, workspace),
     "temporary workspace cap in MB (bounds how many images are lowered at once)"},
    {"no_bias", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(conv_params, no_bias), "omit the bias"},
    {"cudnn_tune", MX_PARAM_ENUM, "None", 1, 0, conv_tune_choices, offsetof(conv_params, cudnn_tune),
     "cuDNN algorithm choice (accepted; no effect on CPU)"},
    {"cudnn_off", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(conv_params, cudnn_off),
     "turn cuDNN off for this layer (accepted; no effect on CPU)"},
    {"layout", MX_PARAM_ENUM, "None", 1, 0, conv_layout_choices, offsetof(conv_params, layout),
     "None (NCW for 1-D, NCHW for 2-D), NCW or NCHW"},
};

#define N_CONV_PARAMS ((int)(sizeof(conv_param_table) / sizeof(conv_param_table[0])))

static const char *fmt_param(const char *name, const conv_params *p, char *buf, size_t size)
{
    for (int i = 0; i < N_CONV_PARAMS; i++)
        if (!strcmp(conv_param_table[i].name, name)) return mx_op_format_param(&conv_param_table[i], p, buf, size);
    return "?";
}

static mx_status conv_check(const void *vp)
{
    const conv_params *p = vp;
    char buf[96], kb[96];
    if (p->kernel.ndim == 3)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Convolution: parameter 'kernel' has value '%s': 3-D convolution is not "
                        "supported (1-D and 2-D only)", fmt_param("kernel", p, buf, sizeof(buf)));
    if (p->kernel.ndim != 1 && p->kernel.ndim != 2)
        return MX_ERROR(MX_ERR_INVALID, "Convolution: parameter 'kernel' has bad value '%s': expected (w,) or (h, w)",
                        fmt_param("kernel", p, buf, sizeof(buf)));
    const char *axes[] = {"stride", "dilate", "pad"};
    const mx_tuple *t[] = {&p->stride, &p->dilate, &p->pad};
    for (int i = 0; i < 3; i++)
        if (t[i]->ndim > 0 && t[i]->ndim != p->kernel.ndim)
            return MX_ERROR(MX_ERR_INVALID,
                            "Convolution: parameter '%s' has bad value '%s': must have as many dimensions as kernel %s",
                            axes[i], fmt_param(axes[i], p, buf, sizeof(buf)), fmt_param("kernel", p, kb, sizeof(kb)));
    if (p->layout != LAYOUT_NONE && p->layout != LAYOUT_NCW && p->layout != LAYOUT_NCHW)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Convolution: parameter 'layout' has value '%s': only NCW and NCHW are "
                        "supported", conv_layout_choices[p->layout]);
    if ((p->layout == LAYOUT_NCW && p->kernel.ndim != 1) || (p->layout == LAYOUT_NCHW && p->kernel.ndim != 2))
        return MX_ERROR(MX_ERR_INVALID, "Convolution: parameter 'layout' has bad value '%s': kernel %s is %d-D",
                        conv_layout_choices[p->layout], fmt_param("kernel", p, kb, sizeof(kb)), p->kernel.ndim);
    return MX_OK;
}

static int conv_list_inputs(const void *vp, const char **names)
{
    const conv_params *p = vp;
    names[0] = "data";
    names[1] = "weight";
    if (p->no_bias) return 2;
    names[2] = "bias";
    return 3;
}

static int conv_list_outputs(const void *vp, const char **names)
{
    (void)vp;
    names[0] = "output";
    return 1;
}

/* Axis i of a spatial tuple in (h, w) order; a 1-D op has h = `h_value`. */
static int64_t axis(const mx_tuple *t, int rank, int i, int64_t dflt, int64_t h_value)
{
    if (rank == 1 && i == 0) return h_value;
    int k = rank == 1 ? 0 : i;
    return t->ndim > 0 ? t->v[k] : dflt;
}

/* The convolution geometry of data shape d (ndim = rank + 2); outputs are
 * not checked here (conv_infer_shape does that). */
static mx_conv_geom conv_geom(const conv_params *p, const mx_shape *d)
{
    int r = p->kernel.ndim;
    mx_conv_geom g = {
        .batch = d->dims[0], .in_c = d->dims[1], .in_h = r == 1 ? 1 : d->dims[2], .in_w = d->dims[r + 1],
        .out_c = p->num_filter,
        .k_h = axis(&p->kernel, r, 0, 1, 1), .k_w = axis(&p->kernel, r, 1, 1, 1),
        .stride_h = axis(&p->stride, r, 0, 1, 1), .stride_w = axis(&p->stride, r, 1, 1, 1),
        .dil_h = axis(&p->dilate, r, 0, 1, 1), .dil_w = axis(&p->dilate, r, 1, 1, 1),
        .pad_h = axis(&p->pad, r, 0, 0, 0), .pad_w = axis(&p->pad, r, 1, 0, 0),
        .groups = p->num_group,
    };
    g.out_h = (g.in_h + 2 * g.pad_h - (g.dil_h * (g.k_h - 1) + 1)) / g.stride_h + 1;
    g.out_w = (g.in_w + 2 * g.pad_w - (g.dil_w * (g.k_w - 1) + 1)) / g.stride_w + 1;
    return g;
}

static mx_status expect_shape(const char *what, mx_shape *have, mx_shape want)
{
    char a[128], b[128];
    if (have->ndim == 0) {
        *have = want;
        return MX_OK;
    }
    if (!mx_shape_equal(have, &want))
        return MX_ERROR(MX_ERR_INVALID, "Convolution: %s has shape %s, expected %s", what,
                        mx_shape_str(have, a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)));
    return MX_OK;
}

static mx_status conv_infer_shape(const void *vp, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const conv_params *p = vp;
    char ds[128], kb[96], pb[96], db[96];
    int r = p->kernel.ndim;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Convolution: the shape of data is unknown");
    mx_shape_str(&in[0], ds, sizeof(ds));
    if (in[0].ndim != r + 2)
        return MX_ERROR(MX_ERR_INVALID, "Convolution: data has shape %s, expected %d dimensions %s for kernel %s", ds,
                        r + 2, r == 1 ? "(N, C, W)" : "(N, C, H, W)", fmt_param("kernel", p, kb, sizeof(kb)));
    for (int i = 0; i < in[0].ndim; i++)
        if (in[0].dims[i] <= 0 && !(i == 0 && in[0].dims[0] == 0))
            return MX_ERROR(MX_ERR_INVALID, "Convolution: data has shape %s with an empty axis %d", ds, i);
    mx_conv_geom g = conv_geom(p, &in[0]);
    if (g.in_c % p->num_group)
        return MX_ERROR(MX_ERR_INVALID,
                        "Convolution: parameter 'num_group' has bad value '%lld': it must divide the %lld input "
                        "channels of data %s", (long long)p->num_group, (long long)g.in_c, ds);
    if (p->num_filter % p->num_group)
        return MX_ERROR(MX_ERR_INVALID,
                        "Convolution: parameter 'num_group' has bad value '%lld': it must divide num_filter %lld",
                        (long long)p->num_group, (long long)p->num_filter);
    int64_t span_h = g.dil_h * (g.k_h - 1) + 1, span_w = g.dil_w * (g.k_w - 1) + 1;
    if (span_h > g.in_h + 2 * g.pad_h || span_w > g.in_w + 2 * g.pad_w)
        return MX_ERROR(MX_ERR_INVALID,
                        "Convolution: parameter 'kernel' has bad value '%s': with dilate %s it spans %lldx%lld, "
                        "larger than data %s padded by %s",
                        fmt_param("kernel", p, kb, sizeof(kb)), fmt_param("dilate", p, db, sizeof(db)),
                        (long long)span_h, (long long)span_w, ds, fmt_param("pad", p, pb, sizeof(pb)));
    /* SGEMM takes int sizes: keep one image's lowered matrix within them. */
    int64_t rows = g.in_c * g.k_h * g.k_w, cols = g.out_h * g.out_w;
    if (rows > INT_MAX / 4 || cols > INT_MAX / 4 || rows * cols > INT_MAX / 4 || g.in_c * g.in_h * g.in_w > INT_MAX / 4)
        return MX_ERROR(MX_ERR_INVALID, "Convolution: data %s with kernel %s is too large for one image", ds,
                        fmt_param("kernel", p, kb, sizeof(kb)));
    mx_shape w = r == 1 ? MX_SHAPE(p->num_filter, g.in_c / p->num_group, g.k_w)
                        : MX_SHAPE(p->num_filter, g.in_c / p->num_group, g.k_h, g.k_w);
    MX_TRY(expect_shape("weight", &in[1], w));
    if (!p->no_bias) MX_TRY(expect_shape("bias", &in[2], MX_SHAPE(p->num_filter)));
    out[0] = r == 1 ? MX_SHAPE(g.batch, p->num_filter, g.out_w) : MX_SHAPE(g.batch, p->num_filter, g.out_h, g.out_w);
    return MX_OK;
}

/* Bytes of workspace to lower with: as many images at once as `workspace`
 * (MB) allows, at least one. */
static size_t conv_ws_bytes(const conv_params *p, const mx_conv_geom *g)
{
    if (mx_depthwise_supported(g)) return 0; /* the direct kernels use per-thread plane buffers */
    return mx_conv_workspace_bytes(g, mx_conv_chunk(g, (size_t)p->workspace << 20));
}

static size_t conv_workspace(const void *vp, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)out;
    (void)backward; /* both directions lower the same column buffer */
    mx_conv_geom g = conv_geom(vp, &in[0]);
    return conv_ws_bytes(vp, &g);
}

/* The part of the executor's workspace (sized for its hungriest node) that
 * this layer's `workspace` cap lets it use. */
static size_t usable_ws(const mx_op_ctx *ctx, const conv_params *p, const mx_conv_geom *g)
{
    size_t want = conv_ws_bytes(p, g);
    return ctx->workspace_bytes < want ? ctx->workspace_bytes : want;
}

/* Fixed weights (a predictor's; input `slot`): derived for the forward
 * kernel once, kept in the node's state; else *prep NULL. */
static mx_status prepared_weights(const mx_op_ctx *ctx, const mx_conv_geom *g, int slot, const float *w,
                                  mx_conv_prepared **prep)
{
    *prep = NULL;
    if (!ctx->state || !(ctx->fixed_inputs & (1u << slot))) return MX_OK;
    if (!*ctx->state) MX_TRY(mx_conv_prepare(mx_op_pool(ctx), g, w, (mx_conv_prepared **)ctx->state));
    *prep = *ctx->state;
    return MX_OK;
}

static mx_status conv_forward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const conv_params *p = vp;
    mx_conv_geom g = conv_geom(p, &in[0].shape);
    mx_conv_prepared *prep;
    MX_TRY(prepared_weights(ctx, &g, 1, in[1].data, &prep));
    return mx_conv_forward_prepared(mx_op_pool(ctx), &g, prep, in[0].data, in[1].data, p->no_bias ? NULL : in[2].data,
                                    &ctx->fold, out[0].data, req[0], ctx->workspace, usable_ws(ctx, p, &g));
}

static void conv_state_free(void *state) { mx_conv_prepared_free(state); }

static mx_status conv_backward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out;
    (void)aux;
    const conv_params *p = vp;
    mx_conv_geom g = conv_geom(p, &in[0].shape);
    MX_TRY(mx_conv_backward(mx_op_pool(ctx), &g, in[0].data, in[1].data, out_grad[0].data, in_grad[0].data, req[0], in_grad[1].data,
                            req[1], ctx->workspace, usable_ws(ctx, p, &g)));
    if (!p->no_bias)
        mx_conv_bias_grad(mx_op_pool(ctx), out_grad[0].data, g.batch, g.out_c, g.out_h * g.out_w, in_grad[2].data, req[2]);
    return MX_OK;
}

static const char *const conv_aliases[] = {"conv", NULL};

/* ------------------------------------------- Convolution + residual sum */

static int conva_list_inputs(const void *vp, const char **names)
{
    names[0] = "addend";
    return 1 + conv_list_inputs(vp, names + 1);
}

static mx_status conva_infer_shape(const void *vp, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    MX_TRY(conv_infer_shape(vp, in + 1, n_in - 1, out, n_out));
    return expect_shape("addend", &in[0], out[0]);
}

static size_t conva_workspace(const void *vp, const mx_shape *in, const mx_shape *out, bool backward)
{
    return conv_workspace(vp, in + 1, out, backward);
}

static mx_status conva_forward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const conv_params *p = vp;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (req[0] == MX_REQ_ADD)
        return MX_ERROR(MX_ERR_INVALID, "Convolution+elemwise_add: the folded sum writes its output (req %d)", req[0]);
    mx_conv_geom g = conv_geom(p, &in[1].shape);
    mx_conv_prepared *prep;
    MX_TRY(prepared_weights(ctx, &g, 2, in[2].data, &prep));
    return mx_conv_forward_residual(mx_op_pool(ctx), &g, prep, in[1].data, in[2].data, p->no_bias ? NULL : in[3].data,
                                    in[0].data, &ctx->fold, out[0].data, ctx->workspace, usable_ws(ctx, p, &g));
}

/* The output may take the addend's memory: then the kernels add onto it. */
static const mx_inplace conva_forward_inplace[] = {{0, 0}, {-1, -1}};

const mx_op_def mx_op_convolution_add = {
    .name = "Convolution+elemwise_add",
    .doc = "A residual sum folded into the Convolution before it: Convolution(data) + addend (prediction folding "
           "only; no backward).",
    .params = conv_param_table,
    .n_params = N_CONV_PARAMS,
    .params_size = sizeof(conv_params),
    .check = conv_check,
    .list_inputs = conva_list_inputs,
    .list_outputs = conv_list_outputs,
    .infer_shape = conva_infer_shape,
    .workspace = conva_workspace,
    .forward_inplace = conva_forward_inplace,
    .folds_elementwise = true,
    .forward = conva_forward,
    .state_free = conv_state_free,
};

MX_OP_GPU_DECLARE(convolution);

const mx_op_def mx_op_convolution = {
    .name = "Convolution",
    .aliases = conv_aliases,
    .doc = "Computes 1-D or 2-D convolution over (N, C, W) or (N, C, H, W) data, with optional groups.",
    .params = conv_param_table,
    .n_params = N_CONV_PARAMS,
    .params_size = sizeof(conv_params),
    .check = conv_check,
    .list_inputs = conv_list_inputs,
    .list_outputs = conv_list_outputs,
    .infer_shape = conv_infer_shape,
    .workspace = conv_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = (1u << 0) | (1u << 1), /* data and weight, not the bias */
    .folds_elementwise = true,
    .forward = conv_forward,
    .backward = conv_backward,
    .state_free = conv_state_free,
    .gpu = MX_OP_GPU(convolution),
};
