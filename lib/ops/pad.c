/*
 * pad.c - Pad (alias pad; MXNet's pad.cc): pads 4-D or 5-D data on its
 * spatial axes. pad_width lists (before, after) per axis, 2 * ndim numbers,
 * the first four (N and C) zero as MXNet requires. Modes:
 *   constant: the new entries are constant_value;
 *   edge:     they repeat the nearest edge entry;
 *   reflect:  they mirror the data without repeating the edge (numpy's
 *             'reflect'), so each pad must be smaller than its axis.
 * Each output entry reads one data entry (or the constant), so backward
 * adds every output gradient into the entry it was read from.
 */
#include "ops/op.h"
#include "ops/pad.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const pad_mode_choices[] = {"constant", "edge", "reflect", NULL};

static const mx_param_desc pad_param_table[] = {
    {"mode", MX_PARAM_ENUM, NULL, 1, 0, pad_mode_choices, offsetof(pad_params, mode),
     "constant, edge or reflect"},
    {"pad_width", MX_PARAM_STRING, NULL, 1, 0, NULL, offsetof(pad_params, pad_width),
     "(before, after) per axis, e.g. (0,0,0,0,1,1,1,1)"},
    {"constant_value", MX_PARAM_FLOAT, "0", 1, 0, NULL, offsetof(pad_params, constant_value),
     "the value of new entries in constant mode"},
};

/* The numbers of pad_width, or -1 when the text is not a tuple of
 * non-negative integers. */
static int pad_parse(const char *text, int64_t *v)
{
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    char close = 0;
    if (*p == '(' || *p == '[') close = *p++ == '(' ? ')' : ']';
    int n = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p || (close && *p == close)) break;
        if (n == PAD_MAX_WIDTH) return -1;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0) return -1;
        v[n++] = x;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p && *p != close) return -1;
    }
    if (close) {
        if (*p != close) return -1;
        p++;
    }
    while (isspace((unsigned char)*p)) p++;
    return *p ? -1 : n;
}

static mx_status pad_check(const void *p)
{
    const pad_params *pp = p;
    int64_t v[PAD_MAX_WIDTH];
    int n = pad_parse(pp->pad_width, v);
    if (n < 0)
        return MX_ERROR(MX_ERR_INVALID, "Pad: parameter 'pad_width' has bad value '%s': expected a tuple of "
                                        "non-negative integers",
                        pp->pad_width);
    for (int i = 0; i < 4 && i < n; i++)
        if (v[i] != 0)
            return MX_ERROR(MX_ERR_INVALID, "Pad: parameter 'pad_width' has value %s: the N and C axes (its first four "
                                            "numbers) cannot be padded",
                            pp->pad_width);
    return MX_OK;
}

static int pad_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int pad_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

/* Before/after pads per axis, checked against data. */
static mx_status pad_widths(const pad_params *pp, const mx_shape *d, int64_t *w)
{
    char a[128];
    if (d->ndim != 4 && d->ndim != 5)
        return MX_ERROR(MX_ERR_INVALID, "Pad: data %s must have 4 or 5 dimensions", mx_shape_str(d, a, sizeof(a)));
    int n = pad_parse(pp->pad_width, w);
    if (n != 2 * d->ndim)
        return MX_ERROR(MX_ERR_INVALID, "Pad: pad_width %s has %d numbers, data %s needs %d (before, after per axis)",
                        pp->pad_width, n, mx_shape_str(d, a, sizeof(a)), 2 * d->ndim);
    if (pp->mode == PAD_REFLECT)
        for (int k = 2; k < d->ndim; k++)
            if (w[2 * k] >= d->dims[k] || w[2 * k + 1] >= d->dims[k])
                return MX_ERROR(MX_ERR_INVALID, "Pad: reflect padding of %s on data %s: each pad must be smaller than "
                                                "its axis",
                                pp->pad_width, mx_shape_str(d, a, sizeof(a)));
    if (pp->mode == PAD_EDGE)
        for (int k = 2; k < d->ndim; k++)
            if (d->dims[k] == 0 && (w[2 * k] || w[2 * k + 1]))
                return MX_ERROR(MX_ERR_INVALID, "Pad: edge padding of an empty axis (data %s)",
                                mx_shape_str(d, a, sizeof(a)));
    return MX_OK;
}

mx_status mx_pad_widths(const pad_params *pp, const mx_shape *d, int64_t *w) { return pad_widths(pp, d, w); }

static mx_status pad_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Pad: the shape of data is unknown");
    int64_t w[PAD_MAX_WIDTH];
    MX_TRY(pad_widths(p, &in[0], w));
    mx_shape o = in[0];
    for (int k = 0; k < o.ndim; k++) o.dims[k] += w[2 * k] + w[2 * k + 1];
    out[0] = o;
    return MX_OK;
}

/* The data index that output index c of an axis reads, or -1 (constant). */
static int64_t pad_source(int mode, int64_t c, int64_t before, int64_t dim)
{
    int64_t i = c - before;
    if (i >= 0 && i < dim) return i;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) return i < 0 ? 0 : dim - 1;
    return i < 0 ? -i : 2 * (dim - 1) - i;
}

static size_t pad_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p, (void)in, (void)backward;
    size_t n = 0;
    for (int k = 0; k < out[0].ndim; k++) n += (size_t)out[0].dims[k];
    return n * sizeof(int64_t);
}

/* For each output entry in C order calls visit with its data offset (-1:
 * constant). The per-axis maps live in the workspace. */
typedef void (*pad_visit_fn)(void *ctx, int64_t o, int64_t src);

static mx_status pad_walk(const mx_op_ctx *ctx, const pad_params *pp, const mx_shape *d, pad_visit_fn visit,
                          void *vctx)
{
    int64_t w[PAD_MAX_WIDTH];
    MX_TRY(pad_widths(pp, d, w));
    int nd = d->ndim;
    mx_shape o = *d;
    size_t need = 0;
    for (int k = 0; k < nd; k++) {
        o.dims[k] += w[2 * k] + w[2 * k + 1];
        need += (size_t)o.dims[k];
    }
    if (ctx->workspace_bytes < need * sizeof(int64_t))
        return MX_ERROR(MX_ERR_RUNTIME, "Pad: workspace of %zu bytes is too small", ctx->workspace_bytes);
    int64_t *map[MX_MAX_NDIM], *m = ctx->workspace, st[MX_MAX_NDIM], s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        st[k] = s;
        s *= d->dims[k];
    }
    for (int k = 0; k < nd; k++) {
        map[k] = m;
        for (int64_t c = 0; c < o.dims[k]; c++) {
            int64_t i = pad_source(pp->mode, c, w[2 * k], d->dims[k]);
            map[k][c] = i < 0 ? -1 : i * st[k];
        }
        m += o.dims[k];
    }
    int64_t n = mx_shape_size(&o), idx[MX_MAX_NDIM] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t src = 0;
        for (int k = 0; k < nd && src >= 0; k++) src = map[k][idx[k]] < 0 ? -1 : src + map[k][idx[k]];
        visit(vctx, i, src);
        for (int k = nd - 1; k >= 0; k--) {
            if (++idx[k] < o.dims[k]) break;
            idx[k] = 0;
        }
    }
    return MX_OK;
}

typedef struct pad_fwd {
    const float *x;
    float *y, cval;
    mx_req req;
} pad_fwd;

static void pad_fwd_visit(void *c, int64_t o, int64_t src)
{
    pad_fwd *f = c;
    mx_req_assign_f32(f->req, &f->y[o], src < 0 ? f->cval : f->x[src]);
}

typedef struct pad_bwd {
    const float *dy;
    float *dx;
} pad_bwd;

static void pad_bwd_visit(void *c, int64_t o, int64_t src)
{
    pad_bwd *b = c;
    if (src >= 0) b->dx[src] += b->dy[o];
}

static mx_status pad_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const pad_params *pp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pad: %s data is not supported (float32 only)", mx_dtype_name(in[0].dtype));
    pad_fwd f = {.x = in[0].data, .y = out[0].data, .cval = (float)pp->constant_value, .req = req[0]};
    return pad_walk(ctx, pp, &in[0].shape, pad_fwd_visit, &f);
}

static mx_status pad_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (req[0] != MX_REQ_ADD)
        memset(in_grad[0].data, 0, (size_t)mx_shape_size(&in_grad[0].shape) * sizeof(float));
    pad_bwd b = {.dy = out_grad[0].data, .dx = in_grad[0].data};
    return pad_walk(ctx, p, &in_grad[0].shape, pad_bwd_visit, &b);
}

MX_OP_GPU_DECLARE(pad);

static const char *const pad_aliases[] = {"pad", NULL};

const mx_op_def mx_op_pad = {
    .name = "Pad",
    .aliases = pad_aliases,
    .doc = "Pads the spatial axes of 4-D/5-D data (constant, edge or reflect).",
    .params = pad_param_table,
    .n_params = (int)(sizeof(pad_param_table) / sizeof(pad_param_table[0])),
    .params_size = sizeof(pad_params),
    .check = pad_check,
    .list_inputs = pad_list_inputs,
    .list_outputs = pad_list_outputs,
    .infer_shape = pad_infer_shape,
    .workspace = pad_workspace,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = pad_forward,
    .backward = pad_backward,
    .gpu = MX_OP_GPU(pad),
};
