/*
 * reduce.c - reductions over axes (MXNet's tensor/broadcast_reduce_op_value.cc):
 * sum (alias sum_axis), mean, max (max_axis), min (min_axis), prod and norm.
 *
 * axis=None or () reduces every axis into shape (1,) (keepdims: all ones),
 * whatever `exclude` says, as MXNet 1.9 does; otherwise the listed axes
 * (negative count from the end; duplicates are an error) are reduced, or
 * with exclude=True all the others. keepdims leaves them as size 1.
 * norm takes ord (1 or 2), axis and keepdims but no exclude.
 *
 * Backward broadcasts the output gradient back over the reduced axes:
 *   sum: dy; mean: dy / N; max, min: dy where x equals the result (every
 *   tie gets it, as in MXNet); prod: dy * (product of the other elements),
 *   computed without dividing by zero (MXNet's out/x gives NaN there);
 *   norm ord=2: dy * x / y (0 where y = 0; MXNet gives NaN); ord=1:
 *   dy * sign(x).
 * Accumulation is in double in the workspace; when axis 0 is kept its
 * slices (disjoint outputs) are split across the kernel pool.
 */
#include "ops/op.h"
#include "ops/reduce.h"
#include "parallel/parallel.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const mx_param_desc red_param_table[] = {
    {"axis", MX_PARAM_TUPLE, "None", 1, 0, NULL, offsetof(red_params, axis),
     "the axes to reduce; None or () reduces all of them into shape (1,)"},
    {"keepdims", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(red_params, keepdims),
     "leave the reduced axes in the result with size 1"},
    {"exclude", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(red_params, exclude),
     "reduce the axes NOT in axis instead"},
};

static const char *const norm_dtype_choices[] = {"None", "float16", "float32", "float64", "int32", "int64", "int8",
                                                 NULL};
enum { NORM_DTYPE_NONE = 0, NORM_DTYPE_F32 = 2 };

static const mx_param_desc norm_param_table[] = {
    {"ord", MX_PARAM_INT, "2", 1, 0, NULL, offsetof(red_params, ord), "the order of the norm: 1 or 2"},
    {"axis", MX_PARAM_TUPLE, "None", 1, 0, NULL, offsetof(red_params, axis),
     "the axes to compute the norm over; None or () means all"},
    {"out_dtype", MX_PARAM_ENUM, "None", 1, 0, norm_dtype_choices, offsetof(red_params, out_dtype),
     "output data type (None: data's type); only float32 is supported"},
    {"keepdims", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(red_params, keepdims),
     "leave the reduced axes in the result with size 1"},
};

static mx_status norm_check(const void *p)
{
    const red_params *rp = p;
    if (rp->ord != 1 && rp->ord != 2)
        return MX_ERROR(MX_ERR_INVALID, "norm: parameter 'ord' has value %lld: only ord=1 and ord=2 are supported",
                        (long long)rp->ord);
    if (rp->out_dtype != NORM_DTYPE_NONE && rp->out_dtype != NORM_DTYPE_F32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "norm: parameter 'out_dtype' value '%s' is not supported (only float32)",
                        norm_dtype_choices[rp->out_dtype]);
    return MX_OK;
}

static int red_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int red_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

mx_status mx_reduce_mask(const char *op, const red_params *rp, const mx_shape *d, bool *mask)
{
    char a[128];
    int nd = d->ndim;
    if (rp->axis.ndim <= 0) {
        for (int k = 0; k < nd; k++) mask[k] = true;
        return MX_OK;
    }
    bool in[MX_MAX_NDIM] = {false};
    for (int i = 0; i < rp->axis.ndim; i++) {
        int64_t ax = rp->axis.v[i] < 0 ? rp->axis.v[i] + nd : rp->axis.v[i];
        if (ax < 0 || ax >= nd)
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter 'axis' has axis %lld, out of range for data of shape %s",
                            op, (long long)rp->axis.v[i], mx_shape_str(d, a, sizeof(a)));
        if (in[ax])
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter 'axis' names axis %lld twice (data of shape %s)", op,
                            (long long)ax, mx_shape_str(d, a, sizeof(a)));
        in[ax] = true;
    }
    for (int k = 0; k < nd; k++) mask[k] = in[k] != rp->exclude;
    return MX_OK;
}

static mx_status red_infer(const char *op, const red_params *rp, mx_shape *in, mx_shape *out)
{
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", op);
    bool mask[MX_MAX_NDIM];
    MX_TRY(mx_reduce_mask(op, rp, &in[0], mask));
    mx_shape o = {0};
    for (int k = 0; k < in[0].ndim; k++) {
        if (!mask[k]) o.dims[o.ndim++] = in[0].dims[k];
        else if (rp->keepdims) o.dims[o.ndim++] = 1;
    }
    if (o.ndim == 0) o.dims[o.ndim++] = 1; /* MXNet's scalar is (1,) */
    out[0] = o;
    return MX_OK;
}

/* The output offset step of each data axis: 0 on reduced axes. Returns the
 * output size. */
static int64_t red_ostrides(const mx_shape *d, const bool *mask, int64_t *ost)
{
    int64_t s = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        ost[k] = mask[k] ? 0 : s;
        if (!mask[k]) s *= d->dims[k];
    }
    return s;
}

/* Walks data in C order one innermost row at a time: calls row(ctx, i0, o0,
 * ostep, len) where i0 is the row's first data offset, o0 its first output
 * offset and ostep the output step along the row; base offsets i_base,
 * o_base are added to both. */
typedef void (*red_row_fn)(void *ctx, int64_t i0, int64_t o0, int64_t ostep, int64_t len);

static void red_walk(const mx_shape *d, const int64_t *ost, int64_t i_base, int64_t o_base, red_row_fn row, void *ctx)
{
    int nd = d->ndim;
    int64_t len = d->dims[nd - 1], n = mx_shape_size(d);
    if (n == 0) return;
    int64_t idx[MX_MAX_NDIM] = {0}, o = o_base;
    for (int64_t i0 = 0; i0 < n; i0 += len) {
        row(ctx, i_base + i0, o, ost[nd - 1], len);
        for (int k = nd - 2; k >= 0; k--) { /* odometer over the outer axes */
            o += ost[k];
            if (++idx[k] < d->dims[k]) break;
            o -= ost[k] * idx[k];
            idx[k] = 0;
        }
    }
}

/* Slices along a kept axis 0 touch disjoint outputs, so they can run on
 * different threads. */
typedef struct red_split {
    mx_shape sub; /* data without axis 0 */
    const int64_t *ost;
    int64_t in_step;
    red_row_fn row;
    void *ctx;
} red_split;

static void red_split_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const red_split *sp = arg;
    for (int64_t i = lo; i < hi; i++) red_walk(&sp->sub, sp->ost + 1, i * sp->in_step, i * sp->ost[0], sp->row, sp->ctx);
}

/* red_walk over all of data, split across pool when axis 0 is kept. */
static void red_walk_pool(mx_threadpool *pool, const mx_shape *d, const bool *mask, const int64_t *ost,
                          red_row_fn row, void *ctx)
{
    int64_t n = mx_shape_size(d);
    if (d->ndim < 2 || mask[0] || d->dims[0] < 2 || n < 16384 || mx_threadpool_size(pool) < 2) {
        red_walk(d, ost, 0, 0, row, ctx);
        return;
    }
    red_split sp = {.sub = {.ndim = d->ndim - 1}, .ost = ost, .in_step = n / d->dims[0], .row = row, .ctx = ctx};
    for (int k = 1; k < d->ndim; k++) sp.sub.dims[k - 1] = d->dims[k];
    int64_t min = sp.in_step ? 8192 / sp.in_step : 1;
    mx_parallel_for(pool, d->dims[0], mx_parallel_grain(pool, d->dims[0], 4, min > 0 ? min : 1), red_split_range, &sp);
}

typedef struct red_fwd_ctx {
    red_kind kind;
    int64_t ord;
    const float *x;
    double *acc;
} red_fwd_ctx;

static void red_fwd_row(void *c, int64_t i0, int64_t o0, int64_t ostep, int64_t len)
{
    red_fwd_ctx *f = c;
    const float *x = f->x + i0;
    double *acc = f->acc;
    for (int64_t j = 0; j < len; j++) {
        double v = x[j], *a = &acc[o0 + j * ostep];
        switch (f->kind) {
        case RED_SUM:
        case RED_MEAN: *a += v; break;
        case RED_MAX: if (v > *a || isnan(v)) *a = v; break;
        case RED_MIN: if (v < *a || isnan(v)) *a = v; break;
        case RED_PROD: *a *= v; break;
        case RED_NORM: *a += f->ord == 1 ? fabs(v) : v * v; break;
        }
    }
}

static size_t red_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p, (void)in;
    /* forward: the accumulators; backward (prod): nonzero products and zero counts */
    return (size_t)mx_shape_size(&out[0]) * sizeof(double) * (backward ? 2 : 1);
}

static mx_status red_forward_kind(red_kind kind, const char *op, const mx_op_ctx *ctx, const red_params *rp,
                                  const mx_tensor *in, const mx_req *req, mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    bool mask[MX_MAX_NDIM];
    int64_t ost[MX_MAX_NDIM];
    MX_TRY(mx_reduce_mask(op, rp, &in[0].shape, mask));
    int64_t n_out = red_ostrides(&in[0].shape, mask, ost);
    if (ctx->workspace_bytes < (size_t)n_out * sizeof(double))
        return MX_ERROR(MX_ERR_RUNTIME, "%s: workspace of %zu bytes is too small", op, ctx->workspace_bytes);
    double *acc = ctx->workspace;
    double init = kind == RED_MAX ? -INFINITY : kind == RED_MIN ? INFINITY : kind == RED_PROD ? 1.0 : 0.0;
    for (int64_t o = 0; o < n_out; o++) acc[o] = init;
    red_fwd_ctx f = {.kind = kind, .ord = rp->ord, .x = in[0].data, .acc = acc};
    red_walk_pool(mx_op_pool(ctx), &in[0].shape, mask, ost, red_fwd_row, &f);
    int64_t n_in = mx_shape_size(&in[0].shape);
    double count = n_out ? (double)(n_in / n_out) : 0.0;
    float *y = out[0].data;
    for (int64_t o = 0; o < n_out; o++) {
        double v = acc[o];
        if (kind == RED_MEAN) v /= count;
        else if (kind == RED_NORM && rp->ord == 2) v = sqrt(v);
        mx_req_assign_f32(req[0], &y[o], (float)v);
    }
    return MX_OK;
}

typedef struct red_bwd_ctx {
    red_kind kind;
    int64_t ord;
    double scale;        /* mean: 1/N */
    const float *x, *y, *dy;
    const double *prod;  /* prod: product of the nonzero elements */
    const double *zeros; /* prod: how many elements are zero */
    float *dx;
    bool add;
} red_bwd_ctx;

static void red_prod_stats_row(void *c, int64_t i0, int64_t o0, int64_t ostep, int64_t len)
{
    red_bwd_ctx *b = c;
    double *prod = (double *)b->prod, *zeros = (double *)b->zeros;
    for (int64_t j = 0; j < len; j++) {
        double v = b->x[i0 + j];
        int64_t o = o0 + j * ostep;
        if (v == 0.0) zeros[o] += 1.0;
        else prod[o] *= v;
    }
}

static void red_bwd_row(void *c, int64_t i0, int64_t o0, int64_t ostep, int64_t len)
{
    red_bwd_ctx *b = c;
    for (int64_t j = 0; j < len; j++) {
        int64_t i = i0 + j, o = o0 + j * ostep;
        double dy = b->dy[o], g = 0.0;
        switch (b->kind) {
        case RED_SUM: g = dy; break;
        case RED_MEAN: g = dy * b->scale; break;
        case RED_MAX:
        case RED_MIN: g = b->x[i] == b->y[o] ? dy : 0.0; break;
        case RED_PROD: {
            double v = b->x[i], z = b->zeros[o];
            if (v != 0.0) g = z == 0.0 ? dy * (b->prod[o] / v) : 0.0;
            else g = z == 1.0 ? dy * b->prod[o] : 0.0;
            break;
        }
        case RED_NORM:
            if (b->ord == 1) g = b->x[i] > 0 ? dy : b->x[i] < 0 ? -dy : 0.0;
            else g = b->y[o] != 0.0f ? dy * b->x[i] / b->y[o] : 0.0;
            break;
        }
        if (b->add) b->dx[i] += (float)g;
        else b->dx[i] = (float)g;
    }
}

static mx_status red_backward_kind(red_kind kind, const char *op, const mx_op_ctx *ctx, const red_params *rp,
                                   const mx_tensor *out_grad, const mx_tensor *in, const mx_tensor *out,
                                   const mx_req *req, mx_tensor *in_grad)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_shape *d = &in_grad[0].shape;
    bool mask[MX_MAX_NDIM];
    int64_t ost[MX_MAX_NDIM];
    MX_TRY(mx_reduce_mask(op, rp, d, mask));
    int64_t n_out = red_ostrides(d, mask, ost), n_in = mx_shape_size(d);
    red_bwd_ctx b = {.kind = kind, .ord = rp->ord, .scale = n_in ? (double)n_out / (double)n_in : 0.0,
                     .x = in[0].data, .y = out[0].data, .dy = out_grad[0].data, .dx = in_grad[0].data,
                     .add = req[0] == MX_REQ_ADD};
    if (kind == RED_PROD) {
        if (ctx->workspace_bytes < 2 * (size_t)n_out * sizeof(double))
            return MX_ERROR(MX_ERR_RUNTIME, "%s: workspace of %zu bytes is too small", op, ctx->workspace_bytes);
        double *prod = ctx->workspace, *zeros = prod + n_out;
        for (int64_t o = 0; o < n_out; o++) prod[o] = 1.0, zeros[o] = 0.0;
        b.prod = prod;
        b.zeros = zeros;
        red_walk_pool(mx_op_pool(ctx), d, mask, ost, red_prod_stats_row, &b);
    }
    red_walk_pool(mx_op_pool(ctx), d, mask, ost, red_bwd_row, &b);
    return MX_OK;
}

/* One op definition per reduction; the kernels differ only in `kind`. */
#define RED_OP(sym, mxname, KIND, alias_list, table, chk, deps, docstr)                                          \
    static mx_status sym##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)         \
    {                                                                                                            \
        (void)n_in, (void)n_out;                                                                                 \
        return red_infer(mxname, p, in, out);                                                                    \
    }                                                                                                            \
    static mx_status sym##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,  \
                                   mx_tensor *out, mx_tensor *aux)                                               \
    {                                                                                                            \
        (void)aux;                                                                                               \
        return red_forward_kind(KIND, mxname, ctx, p, in, req, out);                                             \
    }                                                                                                            \
    static mx_status sym##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,              \
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req,                \
                                    mx_tensor *in_grad, mx_tensor *aux)                                          \
    {                                                                                                            \
        (void)aux;                                                                                               \
        return red_backward_kind(KIND, mxname, ctx, p, out_grad, in, out, req, in_grad);                         \
    }                                                                                                            \
    MX_OP_GPU_DECLARE(sym);                                                                                      \
    const mx_op_def mx_op_##sym = {                                                                              \
        .name = mxname,                                                                                          \
        .aliases = alias_list,                                                                                   \
        .doc = docstr,                                                                                           \
        .params = table,                                                                                         \
        .n_params = (int)(sizeof(table) / sizeof(table[0])),                                                     \
        .params_size = sizeof(red_params),                                                                       \
        .check = chk,                                                                                            \
        .list_inputs = red_list_inputs,                                                                          \
        .list_outputs = red_list_outputs,                                                                        \
        .infer_shape = sym##_infer_shape,                                                                        \
        .workspace = red_workspace,                                                                              \
        .backward_deps = deps,                                                                                   \
        .forward = sym##_forward,                                                                                \
        .backward = sym##_backward,                                                                              \
        .gpu = MX_OP_GPU(sym),                                                                                   \
    }

static const char *const sum_aliases[] = {"sum_axis", NULL};
static const char *const max_aliases[] = {"max_axis", NULL};
static const char *const min_aliases[] = {"min_axis", NULL};

RED_OP(sum, "sum", RED_SUM, sum_aliases, red_param_table, NULL, MX_BWD_OUT_GRAD, "Sum over the given axes.");
RED_OP(mean, "mean", RED_MEAN, NULL, red_param_table, NULL, MX_BWD_OUT_GRAD, "Mean over the given axes.");
RED_OP(max, "max", RED_MAX, max_aliases, red_param_table, NULL, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
       "Maximum over the given axes.");
RED_OP(min, "min", RED_MIN, min_aliases, red_param_table, NULL, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
       "Minimum over the given axes.");
RED_OP(prod, "prod", RED_PROD, NULL, red_param_table, NULL, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
       "Product over the given axes.");
RED_OP(norm, "norm", RED_NORM, NULL, norm_param_table, norm_check,
       MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA, "L1 or L2 norm over the given axes (ord=1 or 2).");
