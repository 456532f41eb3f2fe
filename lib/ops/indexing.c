/*
 * indexing.c - take and one_hot (MXNet's tensor/indexing_op.cc). Indices
 * arrive as float32 and are truncated toward zero, as MXNet casts them.
 *
 * take(a, indices, axis=0, mode=clip): out = a.shape[:axis] +
 *   indices.shape + a.shape[axis+1:], each index picking a slice of a along
 *   axis; out-of-range indices are clamped (clip), taken modulo the axis
 *   size (wrap) or an error (raise). Backward adds the output gradient into
 *   the picked slices of a; indices get a zero gradient.
 * one_hot(indices, depth, on_value=1, off_value=0): out = indices.shape +
 *   (depth,), on_value at the index and off_value elsewhere (an index
 *   outside [0, depth) gives a row of off_value). No gradient flows to the
 *   indices (zero).
 */
#include "ops/indexing.h"
#include "ops/op.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Zeroes a gradient that is written (not added to). */
static void zero_grad(mx_req req, mx_tensor *g)
{
    if (req == MX_REQ_WRITE || req == MX_REQ_INPLACE)
        memset(g->data, 0, (size_t)mx_shape_size(&g->shape) * sizeof(float));
}

/* An index truncated toward zero; NaN and values beyond int64 count as far
 * out of range (negative for NaN). */
static int64_t idx_trunc(float v)
{
    if (isfinite(v) && fabsf(v) < 4e18f) return (int64_t)v;
    return v > 0 ? INT64_MAX / 4 : -(INT64_MAX / 4);
}

/* ------------------------------------------------------------ take */

static const char *const take_mode_choices[] = {"clip", "raise", "wrap", NULL};

static const mx_param_desc take_param_table[] = {
    {"axis", MX_PARAM_INT, "0", 1, 0, NULL, offsetof(take_params, axis), "the axis of a to pick along"},
    {"mode", MX_PARAM_ENUM, "clip", 1, 0, take_mode_choices, offsetof(take_params, mode),
     "out-of-range indices: clip, raise or wrap"},
};

static int take_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "a";
    names[1] = "indices";
    return 2;
}

static int one_output(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status take_axis(const take_params *tp, const mx_shape *a, int *axis)
{
    char s[128];
    int64_t ax = tp->axis < 0 ? tp->axis + a->ndim : tp->axis;
    if (ax < 0 || ax >= a->ndim)
        return MX_ERROR(MX_ERR_INVALID, "take: parameter 'axis' has value %lld, out of range for a of shape %s",
                        (long long)tp->axis, mx_shape_str(a, s, sizeof(s)));
    *axis = (int)ax;
    return MX_OK;
}

static mx_status take_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    char s[128];
    if (in[0].ndim == 0 || in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "take: the shapes of a and indices must be known");
    int axis;
    MX_TRY(take_axis(p, &in[0], &axis));
    if (in[0].ndim - 1 + in[1].ndim > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "take: the output would have more than %d dimensions (a %s)", MX_MAX_NDIM,
                        mx_shape_str(&in[0], s, sizeof(s)));
    mx_shape o = {0};
    if (in[0].dims[axis] == 0 && mx_shape_size(&in[1]) > 0)
        return MX_ERROR(MX_ERR_INVALID, "take: cannot pick from axis %d of a %s: it is empty", axis,
                        mx_shape_str(&in[0], s, sizeof(s)));
    for (int k = 0; k < axis; k++) o.dims[o.ndim++] = in[0].dims[k];
    for (int k = 0; k < in[1].ndim; k++) o.dims[o.ndim++] = in[1].dims[k];
    for (int k = axis + 1; k < in[0].ndim; k++) o.dims[o.ndim++] = in[0].dims[k];
    out[0] = o;
    return MX_OK;
}

typedef struct take_geom {
    int64_t outer, size, inner, n_idx;
} take_geom;

static take_geom take_geometry(const mx_shape *a, const mx_shape *idx, int axis)
{
    take_geom g = {1, a->dims[axis], 1, mx_shape_size(idx)};
    for (int k = 0; k < axis; k++) g.outer *= a->dims[k];
    for (int k = axis + 1; k < a->ndim; k++) g.inner *= a->dims[k];
    return g;
}

/* The slice an index picks, or -1 (raise mode, out of range). */
static int64_t take_index(int mode, float v, int64_t size)
{
    int64_t j = idx_trunc(v);
    if (mode == TAKE_CLIP) return j < 0 ? 0 : j >= size ? size - 1 : j;
    if (mode == TAKE_WRAP) return ((j % size) + size) % size;
    return j >= 0 && j < size ? j : -1;
}

static mx_status take_resolve(const take_params *tp, const float *idx, const take_geom *g, int64_t i, int64_t *j)
{
    *j = take_index(tp->mode, idx[i], g->size);
    if (*j < 0)
        return MX_ERROR(MX_ERR_INVALID, "take: index %g (position %lld) is out of bounds for an axis of size %lld "
                                        "(mode raise)",
                        idx[i], (long long)i, (long long)g->size);
    return MX_OK;
}

static mx_status take_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const take_params *tp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32 || in[1].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "take: %s input is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype != MX_FLOAT32 ? in[0].dtype : in[1].dtype));
    int axis;
    MX_TRY(take_axis(tp, &in[0].shape, &axis));
    take_geom g = take_geometry(&in[0].shape, &in[1].shape, axis);
    if (g.size == 0 && g.n_idx) return MX_ERROR(MX_ERR_INVALID, "take: cannot pick from an empty axis");
    const float *a = in[0].data, *idx = in[1].data;
    float *y = out[0].data;
    for (int64_t i = 0; i < g.n_idx; i++) {
        int64_t j;
        MX_TRY(take_resolve(tp, idx, &g, i, &j));
        for (int64_t o = 0; o < g.outer; o++) {
            const float *src = a + (o * g.size + j) * g.inner;
            float *dst = y + (o * g.n_idx + i) * g.inner;
            for (int64_t k = 0; k < g.inner; k++) mx_req_assign_f32(req[0], &dst[k], src[k]);
        }
    }
    return MX_OK;
}

static mx_status take_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)out, (void)aux;
    const take_params *tp = p;
    zero_grad(req[1], &in_grad[1]);
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int axis;
    MX_TRY(take_axis(tp, &in_grad[0].shape, &axis));
    take_geom g = take_geometry(&in_grad[0].shape, &in[1].shape, axis);
    if (g.size == 0 && g.n_idx) return MX_ERROR(MX_ERR_INVALID, "take: cannot pick from an empty axis");
    zero_grad(req[0], &in_grad[0]);
    const float *idx = in[1].data, *dy = out_grad[0].data;
    float *da = in_grad[0].data;
    for (int64_t i = 0; i < g.n_idx; i++) {
        int64_t j;
        MX_TRY(take_resolve(tp, idx, &g, i, &j));
        for (int64_t o = 0; o < g.outer; o++) {
            float *dst = da + (o * g.size + j) * g.inner;
            const float *src = dy + (o * g.n_idx + i) * g.inner;
            for (int64_t k = 0; k < g.inner; k++) dst[k] += src[k];
        }
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(take);

static mx_status take_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return mx_op_infer_type_index("take", 1, in, n_in, out, n_out);
}

const mx_op_def mx_op_take = {
    .name = "take",
    .doc = "Picks slices of a along an axis at the given indices.",
    .params = take_param_table,
    .n_params = (int)(sizeof(take_param_table) / sizeof(take_param_table[0])),
    .params_size = sizeof(take_params),
    .list_inputs = take_list_inputs,
    .list_outputs = one_output,
    .infer_shape = take_infer_shape,
    .infer_type = take_infer_type,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 0x2, /* indices */
    .forward = take_forward,
    .backward = take_backward,
    .gpu = MX_OP_GPU(take),
};

/* ------------------------------------------------------------ one_hot */

static const char *const oh_dtype_choices[] = {"bfloat16", "float16", "float32", "float64", "int32",
                                               "int64",    "int8",    "uint8",   NULL};
enum { OH_F32 = 2 };

static const mx_param_desc one_hot_param_table[] = {
    {"depth", MX_PARAM_INT, NULL, 0, 1e18, NULL, offsetof(one_hot_params, depth), "the length of each one-hot row"},
    {"on_value", MX_PARAM_FLOAT, "1", 1, 0, NULL, offsetof(one_hot_params, on_value), "the value at the index"},
    {"off_value", MX_PARAM_FLOAT, "0", 1, 0, NULL, offsetof(one_hot_params, off_value), "the value elsewhere"},
    {"dtype", MX_PARAM_ENUM, "float32", 1, 0, oh_dtype_choices, offsetof(one_hot_params, dtype),
     "output type; only float32 is supported"},
};

static mx_status one_hot_check(const void *p)
{
    const one_hot_params *op = p;
    if (op->dtype != OH_F32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "one_hot: parameter 'dtype' value '%s' is not supported (only float32)",
                        oh_dtype_choices[op->dtype]);
    return MX_OK;
}

static int one_hot_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "indices";
    return 1;
}

static mx_status one_hot_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const one_hot_params *op = p;
    char s[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "one_hot: the shape of indices is unknown");
    if (in[0].ndim == MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "one_hot: indices %s already have the most dimensions supported (%d)",
                        mx_shape_str(&in[0], s, sizeof(s)), MX_MAX_NDIM);
    out[0] = in[0];
    out[0].dims[out[0].ndim++] = op->depth;
    return MX_OK;
}

static mx_status one_hot_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const one_hot_params *op = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "one_hot: %s indices are not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    const float *idx = in[0].data;
    float *y = out[0].data;
    int64_t n = mx_shape_size(&in[0].shape), depth = op->depth;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = idx_trunc(idx[i]);
        for (int64_t k = 0; k < depth; k++)
            mx_req_assign_f32(req[0], &y[i * depth + k], (float)(k == j ? op->on_value : op->off_value));
    }
    return MX_OK;
}

static mx_status one_hot_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)ctx, (void)p, (void)out_grad, (void)in, (void)out, (void)aux;
    zero_grad(req[0], &in_grad[0]);
    return MX_OK;
}

MX_OP_GPU_DECLARE(one_hot);

static mx_status one_hot_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return mx_op_infer_type_index("one_hot", 0, in, n_in, out, n_out);
}

const mx_op_def mx_op_one_hot = {
    .name = "one_hot",
    .doc = "One-hot rows of length depth for each index.",
    .params = one_hot_param_table,
    .n_params = (int)(sizeof(one_hot_param_table) / sizeof(one_hot_param_table[0])),
    .params_size = sizeof(one_hot_params),
    .check = one_hot_check,
    .list_inputs = one_hot_list_inputs,
    .list_outputs = one_output,
    .infer_shape = one_hot_infer_shape,
    .infer_type = one_hot_infer_type,
    .backward_deps = 0,
    .forward = one_hot_forward,
    .backward = one_hot_backward,
    .gpu = MX_OP_GPU(one_hot),
};
