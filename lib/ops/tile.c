/*
 * tile.c - tile and repeat (MXNet's tensor/matrix_op.cc).
 *   tile(reps): repeats the whole array reps[k] times along each axis;
 *     the shorter of reps and data's shape is padded with leading 1s, so
 *     the output has max(len(reps), ndim) axes. reps=() copies.
 *   repeat(repeats, axis=None): repeats each element `repeats` times along
 *     axis (negative from the end), or of the flattened array when None.
 * Backward sums the output gradient over the copies of each element.
 */
#include "ops/op.h"
#include "ops/tile.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int one_input(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int one_output(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static void zero_if_written(mx_req req, mx_tensor *g)
{
    if (req == MX_REQ_WRITE || req == MX_REQ_INPLACE)
        memset(g->data, 0, (size_t)mx_shape_size(&g->shape) * sizeof(float));
}

/* ------------------------------------------------------------ tile */

static const mx_param_desc tile_param_table[] = {
    {"reps", MX_PARAM_TUPLE, NULL, 1, 1e18, NULL, offsetof(tile_params, reps),
     "how many copies along each axis (aligned to the last axes)"},
};

static mx_status tile_check(const void *p)
{
    const tile_params *tp = p;
    if (tp->reps.ndim < 0)
        return MX_ERROR(MX_ERR_INVALID, "tile: parameter 'reps' has value None: expected a tuple of positive integers");
    return MX_OK;
}

/* The data shape and reps, both padded to the output's rank. */
static mx_status tile_dims(const tile_params *tp, const mx_shape *d, mx_shape *din, int64_t *reps, mx_shape *o)
{
    char a[128];
    int nd = d->ndim, nr = tp->reps.ndim, no = nd > nr ? nd : nr;
    if (no > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "tile: reps of %d axes on data %s gives more than %d dimensions", nr,
                        mx_shape_str(d, a, sizeof(a)), MX_MAX_NDIM);
    din->ndim = o->ndim = no;
    for (int k = 0; k < no; k++) {
        int kd = k - (no - nd), kr = k - (no - nr);
        din->dims[k] = kd >= 0 ? d->dims[kd] : 1;
        reps[k] = kr >= 0 ? tp->reps.v[kr] : 1;
        o->dims[k] = din->dims[k] * reps[k];
    }
    return MX_OK;
}

mx_status mx_tile_dims(const tile_params *tp, const mx_shape *d, mx_shape *din, int64_t *reps, mx_shape *o)
{
    return tile_dims(tp, d, din, reps, o);
}

static mx_status tile_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "tile: the shape of data is unknown");
    mx_shape din;
    int64_t reps[MX_MAX_NDIM];
    return tile_dims(p, &in[0], &din, reps, &out[0]);
}

/* Walks the output in C order; the data offset of each element is its
 * coordinates modulo data's dims. */
static void tile_walk(const mx_shape *din, const mx_shape *o, float *x, float *y, bool to_out, bool add)
{
    int nd = o->ndim;
    int64_t n = mx_shape_size(o), st[MX_MAX_NDIM], s = 1;
    if (n == 0) return;
    for (int k = nd - 1; k >= 0; k--) {
        st[k] = s;
        s *= din->dims[k];
    }
    int64_t idx[MX_MAX_NDIM] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!to_out) x[off] += y[i];
        else if (add) y[i] += x[off];
        else y[i] = x[off];
        for (int k = nd - 1; k >= 0; k--) { /* odometer; data coordinate = idx % din */
            if (++idx[k] < o->dims[k]) {
                off += idx[k] % din->dims[k] ? st[k] : -st[k] * (din->dims[k] - 1);
                break;
            }
            idx[k] = 0;
            off -= st[k] * (din->dims[k] - 1);
        }
    }
}

static mx_status tile_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "tile: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    mx_shape din, o;
    int64_t reps[MX_MAX_NDIM];
    MX_TRY(tile_dims(p, &in[0].shape, &din, reps, &o));
    tile_walk(&din, &o, in[0].data, out[0].data, true, req[0] == MX_REQ_ADD);
    return MX_OK;
}

static mx_status tile_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    mx_shape din, o;
    int64_t reps[MX_MAX_NDIM];
    MX_TRY(tile_dims(p, &in_grad[0].shape, &din, reps, &o));
    zero_if_written(req[0], &in_grad[0]);
    tile_walk(&din, &o, in_grad[0].data, out_grad[0].data, false, true);
    return MX_OK;
}

MX_OP_GPU_DECLARE(tile);
MX_OP_GPU_DECLARE(repeat);

const mx_op_def mx_op_tile = {
    .name = "tile",
    .doc = "Repeats the whole array reps[k] times along each axis.",
    .params = tile_param_table,
    .n_params = (int)(sizeof(tile_param_table) / sizeof(tile_param_table[0])),
    .params_size = sizeof(tile_params),
    .check = tile_check,
    .list_inputs = one_input,
    .list_outputs = one_output,
    .infer_shape = tile_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = tile_forward,
    .backward = tile_backward,
    .gpu = MX_OP_GPU(tile),
};

/* ------------------------------------------------------------ repeat */

static const mx_param_desc repeat_param_table[] = {
    {"repeats", MX_PARAM_INT, NULL, 0, 1e18, NULL, offsetof(repeat_params, repeats),
     "how many times each element is repeated"},
    {"axis", MX_PARAM_STRING, "None", 1, 0, NULL, offsetof(repeat_params, axis),
     "the axis to repeat along; None: the flattened array"},
};

static mx_status repeat_axis_value(const repeat_params *rp, bool *none, int64_t *v)
{
    *none = !strcmp(rp->axis, "None");
    if (*none) return MX_OK;
    char *e;
    long long x = strtoll(rp->axis, &e, 10);
    if (e == rp->axis || *e)
        return MX_ERROR(MX_ERR_INVALID, "repeat: parameter 'axis' has bad value '%s': expected an integer or None",
                        rp->axis);
    *v = x;
    return MX_OK;
}

static mx_status repeat_check(const void *p)
{
    bool none;
    int64_t v;
    return repeat_axis_value(p, &none, &v);
}

/* Data viewed as (outer, len, inner), output as (outer, len * repeats, inner). */
static mx_status repeat_geom(const repeat_params *rp, const mx_shape *d, int64_t *outer, int64_t *len, int64_t *inner,
                             mx_shape *o)
{
    char a[128];
    bool none;
    int64_t ax = 0;
    MX_TRY(repeat_axis_value(rp, &none, &ax));
    if (none) {
        *outer = 1, *inner = 1, *len = mx_shape_size(d);
        *o = (mx_shape){.ndim = 1, .dims = {*len * rp->repeats}};
        return MX_OK;
    }
    int64_t k = ax < 0 ? ax + d->ndim : ax;
    if (k < 0 || k >= d->ndim)
        return MX_ERROR(MX_ERR_INVALID, "repeat: parameter 'axis' has value %lld, out of range for data %s",
                        (long long)ax, mx_shape_str(d, a, sizeof(a)));
    *outer = 1, *inner = 1, *len = d->dims[k];
    for (int j = 0; j < k; j++) *outer *= d->dims[j];
    for (int j = (int)k + 1; j < d->ndim; j++) *inner *= d->dims[j];
    *o = *d;
    o->dims[k] *= rp->repeats;
    return MX_OK;
}

mx_status mx_repeat_geom(const repeat_params *rp, const mx_shape *d, int64_t *outer, int64_t *len, int64_t *inner,
                         mx_shape *o)
{
    return repeat_geom(rp, d, outer, len, inner, o);
}

static mx_status repeat_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "repeat: the shape of data is unknown");
    int64_t outer, len, inner;
    return repeat_geom(p, &in[0], &outer, &len, &inner, &out[0]);
}

static mx_status repeat_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const repeat_params *rp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "repeat: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int64_t outer, len, inner, r = rp->repeats;
    mx_shape o;
    MX_TRY(repeat_geom(rp, &in[0].shape, &outer, &len, &inner, &o));
    const float *x = in[0].data;
    float *y = out[0].data;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < len * r; j++) {
            const float *src = x + (a * len + j / r) * inner;
            float *dst = y + (a * len * r + j) * inner;
            for (int64_t k = 0; k < inner; k++) mx_req_assign_f32(req[0], &dst[k], src[k]);
        }
    return MX_OK;
}

static mx_status repeat_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                 const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    const repeat_params *rp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, len, inner, r = rp->repeats;
    mx_shape o;
    MX_TRY(repeat_geom(rp, &in_grad[0].shape, &outer, &len, &inner, &o));
    zero_if_written(req[0], &in_grad[0]);
    const float *dy = out_grad[0].data;
    float *dx = in_grad[0].data;
    for (int64_t a = 0; a < outer; a++)
        for (int64_t j = 0; j < len * r; j++) {
            float *dst = dx + (a * len + j / r) * inner;
            const float *src = dy + (a * len * r + j) * inner;
            for (int64_t k = 0; k < inner; k++) dst[k] += src[k];
        }
    return MX_OK;
}

const mx_op_def mx_op_repeat = {
    .name = "repeat",
    .doc = "Repeats each element `repeats` times along axis (or of the flattened array).",
    .params = repeat_param_table,
    .n_params = (int)(sizeof(repeat_param_table) / sizeof(repeat_param_table[0])),
    .params_size = sizeof(repeat_params),
    .check = repeat_check,
    .list_inputs = one_input,
    .list_outputs = one_output,
    .infer_shape = repeat_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = repeat_forward,
    .backward = repeat_backward,
    .gpu = MX_OP_GPU(repeat),
};
