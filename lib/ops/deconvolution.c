/*
 * deconvolution.c - Deconvolution: the transpose of Convolution (1-D and
 * 2-D, grouped, strided, dilated, padded). data (N, C, H, W), weight
 * (C, num_filter/num_group, KH, KW), bias (num_filter) unless no_bias
 * (which defaults to True, as in MXNet); out (N, num_filter, OH, OW) with
 *   OH = stride*(H-1) + dilate*(KH-1) + 1 - 2*pad + adj.
 * With target_shape set (any non-zero entry), pad and adj are derived from
 * it instead (MXNet's InferPad): total = stride*(H-1) + dilated kernel -
 * target, adj = total % 2, pad = (total + 1) / 2.
 *
 * The kernels are the matching convolution's, with data and output
 * swapped: forward is that convolution's backward-data, backward-data its
 * forward, backward-weight its backward-weight with the roles of data and
 * output-gradient exchanged.
 */
#include "ops/deconvolution.h"
#include "ops/cpu/im2col.h"
#include "ops/op.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const deconv_tune_choices[] = {"None", "off", "limited_workspace", "fastest", NULL};
static const char *const deconv_layout_choices[] = {"None", "NCW", "NCHW", "NCDHW", "NHWC", "NDHWC", NULL};

static const mx_param_desc deconv_param_table[] = {
    {"kernel", MX_PARAM_TUPLE, NULL, 1, 1e9, NULL, offsetof(deconv_params, kernel), "kernel size: (w,) or (h, w)"},
    {"stride", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(deconv_params, stride),
     "stride of the matching convolution; default 1 per axis"},
    {"dilate", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(deconv_params, dilate), "dilation; default 1 per axis"},
    {"pad", MX_PARAM_TUPLE, "()", 0, 1e9, NULL, offsetof(deconv_params, pad),
     "padding of the matching convolution; ignored when target_shape is set"},
    {"adj", MX_PARAM_TUPLE, "()", 0, 1e9, NULL, offsetof(deconv_params, adj),
     "extra output rows/columns (< stride); ignored when target_shape is set"},
    {"target_shape", MX_PARAM_TUPLE, "()", 0, 1e9, NULL, offsetof(deconv_params, target_shape),
     "output spatial shape; derives pad and adj"},
    {"num_filter", MX_PARAM_INT, NULL, 1, 100000, NULL, offsetof(deconv_params, num_filter), "output channels"},
    {"num_group", MX_PARAM_INT, "1", 1, 1e9, NULL, offsetof(deconv_params, num_group), "channel groups"},
    {"workspace", MX_PARAM_INT, "512", 0, 8192, NULL, offsetof(deconv_params, workspace),
     "temporary workspace cap in MB (bounds how many images are lowered at once)"},
    {"no_bias", MX_PARAM_BOOL, "True", 1, 0, NULL, offsetof(deconv_params, no_bias), "omit the bias"},
    {"cudnn_tune", MX_PARAM_ENUM, "None", 1, 0, deconv_tune_choices, offsetof(deconv_params, cudnn_tune),
     "cuDNN algorithm choice (accepted; no effect on CPU)"},
    {"cudnn_off", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(deconv_params, cudnn_off),
     "turn cuDNN off for this layer (accepted; no effect on CPU)"},
    {"layout", MX_PARAM_ENUM, "None", 1, 0, deconv_layout_choices, offsetof(deconv_params, layout),
     "None (NCW for 1-D, NCHW for 2-D), NCW or NCHW"},
};

#define N_DECONV_PARAMS ((int)(sizeof(deconv_param_table) / sizeof(deconv_param_table[0])))

static const char *fmt_param(const char *name, const deconv_params *p, char *buf, size_t size)
{
    for (int i = 0; i < N_DECONV_PARAMS; i++)
        if (!strcmp(deconv_param_table[i].name, name))
            return mx_op_format_param(&deconv_param_table[i], p, buf, size);
    return "?";
}

static mx_status deconv_check(const void *vp)
{
    const deconv_params *p = vp;
    char buf[96], kb[96];
    if (p->kernel.ndim == 3)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Deconvolution: parameter 'kernel' has value '%s': 3-D deconvolution is "
                        "not supported (1-D and 2-D only)", fmt_param("kernel", p, buf, sizeof(buf)));
    if (p->kernel.ndim != 1 && p->kernel.ndim != 2)
        return MX_ERROR(MX_ERR_INVALID,
                        "Deconvolution: parameter 'kernel' has bad value '%s': expected (w,) or (h, w)",
                        fmt_param("kernel", p, buf, sizeof(buf)));
    const char *axes[] = {"stride", "dilate", "pad", "adj", "target_shape"};
    const mx_tuple *t[] = {&p->stride, &p->dilate, &p->pad, &p->adj, &p->target_shape};
    for (int i = 0; i < 5; i++)
        if (t[i]->ndim > 0 && t[i]->ndim != p->kernel.ndim)
            return MX_ERROR(MX_ERR_INVALID,
                            "Deconvolution: parameter '%s' has bad value '%s': must have as many dimensions as kernel "
                            "%s", axes[i], fmt_param(axes[i], p, buf, sizeof(buf)),
                            fmt_param("kernel", p, kb, sizeof(kb)));
    if (p->layout != LAYOUT_NONE && p->layout != LAYOUT_NCW && p->layout != LAYOUT_NCHW)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Deconvolution: parameter 'layout' has value '%s': only NCW and NCHW are "
                        "supported", deconv_layout_choices[p->layout]);
    if ((p->layout == LAYOUT_NCW && p->kernel.ndim != 1) || (p->layout == LAYOUT_NCHW && p->kernel.ndim != 2))
        return MX_ERROR(MX_ERR_INVALID, "Deconvolution: parameter 'layout' has bad value '%s': kernel %s is %d-D",
                        deconv_layout_choices[p->layout], fmt_param("kernel", p, kb, sizeof(kb)), p->kernel.ndim);
    return MX_OK;
}

static int deconv_list_inputs(const void *vp, const char **names)
{
    const deconv_params *p = vp;
    names[0] = "data";
    names[1] = "weight";
    if (p->no_bias) return 2;
    names[2] = "bias";
    return 3;
}

static int deconv_list_outputs(const void *vp, const char **names)
{
    (void)vp;
    names[0] = "output";
    return 1;
}

/* The convolution this deconvolution transposes: its input is our output. */
static mx_conv_geom deconv_geom(const deconv_params *p, const mx_shape *d)
{
    deconv_dims z = deconv_resolve(p, d);
    return (mx_conv_geom){
        .batch = d->dims[0], .in_c = p->num_filter, .in_h = z.out[0], .in_w = z.out[1],
        .out_c = d->dims[1], .out_h = z.in[0], .out_w = z.in[1],
        .k_h = z.kernel[0], .k_w = z.kernel[1], .stride_h = z.stride[0], .stride_w = z.stride[1],
        .dil_h = z.dilate[0], .dil_w = z.dilate[1], .pad_h = z.pad[0], .pad_w = z.pad[1],
        .groups = p->num_group,
    };
}

static mx_status expect_shape(const char *what, mx_shape *have, mx_shape want)
{
    char a[128], b[128];
    if (have->ndim == 0) {
        *have = want;
        return MX_OK;
    }
    if (!mx_shape_equal(have, &want))
        return MX_ERROR(MX_ERR_INVALID, "Deconvolution: %s has shape %s, expected %s", what,
                        mx_shape_str(have, a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)));
    return MX_OK;
}

static mx_status deconv_infer_shape(const void *vp, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const deconv_params *p = vp;
    char ds[128], b1[96], b2[96];
    int r = p->kernel.ndim;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Deconvolution: the shape of data is unknown");
    mx_shape_str(&in[0], ds, sizeof(ds));
    if (in[0].ndim != r + 2)
        return MX_ERROR(MX_ERR_INVALID, "Deconvolution: data has shape %s, expected %d dimensions %s for kernel %s", ds,
                        r + 2, r == 1 ? "(N, C, W)" : "(N, C, H, W)", fmt_param("kernel", p, b1, sizeof(b1)));
    for (int i = 0; i < in[0].ndim; i++)
        if (in[0].dims[i] <= 0 && !(i == 0 && in[0].dims[0] == 0))
            return MX_ERROR(MX_ERR_INVALID, "Deconvolution: data has shape %s with an empty axis %d", ds, i);
    int64_t c = in[0].dims[1];
    if (c % p->num_group)
        return MX_ERROR(MX_ERR_INVALID,
                        "Deconvolution: parameter 'num_group' has bad value '%lld': it must divide the %lld input "
                        "channels of data %s", (long long)p->num_group, (long long)c, ds);
    if (p->num_filter % p->num_group)
        return MX_ERROR(MX_ERR_INVALID,
                        "Deconvolution: parameter 'num_group' has bad value '%lld': it must divide num_filter %lld",
                        (long long)p->num_group, (long long)p->num_filter);
    deconv_dims z = deconv_resolve(p, &in[0]);
    for (int i = 2 - r; i < 2; i++) {
        const char *name = i == 0 ? "y" : "x";
        if (z.from_target && z.adj[i] < 0)
            return MX_ERROR(MX_ERR_INVALID,
                            "Deconvolution: parameter 'target_shape' has bad value '%s': too big for data %s (at most "
                            "%lld along %s)", fmt_param("target_shape", p, b1, sizeof(b1)), ds, (long long)z.full[i],
                            name);
        if (z.adj[i] > z.stride[i] - 1)
            return MX_ERROR(MX_ERR_INVALID,
                            "Deconvolution: parameter '%s' has bad value '%s': adj(%s) = %lld must be smaller than "
                            "stride %s", z.from_target ? "target_shape" : "adj",
                            fmt_param(z.from_target ? "target_shape" : "adj", p, b1, sizeof(b1)), name,
                            (long long)z.adj[i], fmt_param("stride", p, b2, sizeof(b2)));
        if (z.out[i] <= 0)
            return MX_ERROR(MX_ERR_INVALID,
                            "Deconvolution: parameter '%s' has bad value '%s': the output of data %s would have size "
                            "%lld along %s", z.from_target ? "target_shape" : "pad",
                            fmt_param(z.from_target ? "target_shape" : "pad", p, b1, sizeof(b1)), ds,
                            (long long)z.out[i], name);
    }
    mx_conv_geom g = deconv_geom(p, &in[0]);
    int64_t rows = g.in_c * g.k_h * g.k_w, cols = g.out_h * g.out_w;
    if (rows > INT_MAX / 4 || cols > INT_MAX / 4 || rows * cols > INT_MAX / 4 || g.in_c * g.in_h * g.in_w > INT_MAX / 4)
        return MX_ERROR(MX_ERR_INVALID, "Deconvolution: data %s with kernel %s is too large for one image", ds,
                        fmt_param("kernel", p, b1, sizeof(b1)));
    mx_shape w = r == 1 ? MX_SHAPE(c, p->num_filter / p->num_group, g.k_w)
                        : MX_SHAPE(c, p->num_filter / p->num_group, g.k_h, g.k_w);
    MX_TRY(expect_shape("weight", &in[1], w));
    if (!p->no_bias) MX_TRY(expect_shape("bias", &in[2], MX_SHAPE(p->num_filter)));
    out[0] = r == 1 ? MX_SHAPE(g.batch, p->num_filter, g.in_w) : MX_SHAPE(g.batch, p->num_filter, g.in_h, g.in_w);
    return MX_OK;
}

/* Bytes of workspace to lower with: as many images at once as `workspace`
 * (MB) allows, at least one. */
static size_t deconv_ws_bytes(const deconv_params *p, const mx_conv_geom *g)
{
    return mx_conv_workspace_bytes(g, mx_conv_chunk(g, (size_t)p->workspace << 20));
}

static size_t deconv_workspace(const void *vp, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)out;
    (void)backward; /* both directions lower the same column buffer */
    mx_conv_geom g = deconv_geom(vp, &in[0]);
    return deconv_ws_bytes(vp, &g);
}

/* The part of the executor's workspace (sized for its hungriest node) that
 * this layer's `workspace` cap lets it use. */
static size_t usable_ws(const mx_op_ctx *ctx, const deconv_params *p, const mx_conv_geom *g)
{
    size_t want = deconv_ws_bytes(p, g);
    return ctx->workspace_bytes < want ? ctx->workspace_bytes : want;
}

static mx_status deconv_forward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const deconv_params *p = vp;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    mx_conv_geom g = deconv_geom(p, &in[0].shape);
    /* y = the convolution's data gradient for "output gradient" x. */
    MX_TRY(mx_conv_backward(mx_op_pool(ctx), &g, NULL, in[1].data, in[0].data, out[0].data, req[0], NULL, MX_REQ_NULL,
                            ctx->workspace, usable_ws(ctx, p, &g)));
    if (!p->no_bias) mx_conv_add_bias(out[0].data, in[2].data, g.batch, g.in_c, g.in_h * g.in_w);
    return MX_OK;
}

static mx_status deconv_backward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out;
    (void)aux;
    const deconv_params *p = vp;
    mx_conv_geom g = deconv_geom(p, &in[0].shape);
    /* dx = conv(dy, w); dw = the convolution's weight gradient with dy as
     * its data and x as its output gradient. */
    size_t ws_bytes = usable_ws(ctx, p, &g);
    MX_TRY(mx_conv_forward(mx_op_pool(ctx), &g, out_grad[0].data, in[1].data, NULL, in_grad[0].data, req[0], ctx->workspace,
                           ws_bytes));
    MX_TRY(mx_conv_backward(mx_op_pool(ctx), &g, out_grad[0].data, NULL, in[0].data, NULL, MX_REQ_NULL, in_grad[1].data, req[1],
                            ctx->workspace, ws_bytes));
    if (!p->no_bias)
        mx_conv_bias_grad(mx_op_pool(ctx), out_grad[0].data, g.batch, g.in_c, g.in_h * g.in_w, in_grad[2].data, req[2]);
    return MX_OK;
}

MX_OP_GPU_DECLARE(deconvolution);

const mx_op_def mx_op_deconvolution = {
    .name = "Deconvolution",
    .doc = "Computes 1-D or 2-D transposed convolution (the gradient of Convolution with respect to its data).",
    .params = deconv_param_table,
    .n_params = N_DECONV_PARAMS,
    .params_size = sizeof(deconv_params),
    .check = deconv_check,
    .list_inputs = deconv_list_inputs,
    .list_outputs = deconv_list_outputs,
    .infer_shape = deconv_infer_shape,
    .workspace = deconv_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = (1u << 0) | (1u << 1), /* data and weight, not the bias */
    .forward = deconv_forward,
    .backward = deconv_backward,
    .gpu = MX_OP_GPU(deconvolution),
};
