/*
 * expand_dims.c - expand_dims and squeeze (MXNet's tensor/matrix_op.cc):
 * shape-only operators whose data is copied unchanged (in place when the
 * planner allows), and whose gradient is the output gradient copied back.
 *   expand_dims(axis): inserts a size-1 axis at `axis`, in [-ndim-1, ndim]
 *     (negative counts from the end of the output).
 *   squeeze(axis=None): removes the listed size-1 axes, or all of them;
 *     a result with no axes left is (1,).
 */
#include "ops/op.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct expand_dims_params {
    int64_t axis;
} expand_dims_params;

typedef struct squeeze_params {
    mx_tuple axis;
} squeeze_params;

static const mx_param_desc expand_dims_param_table[] = {
    {"axis", MX_PARAM_INT, NULL, 1, 0, NULL, offsetof(expand_dims_params, axis),
     "where the new axis goes, in [-ndim-1, ndim]"},
};

static const mx_param_desc squeeze_param_table[] = {
    {"axis", MX_PARAM_TUPLE, "None", 1, 0, NULL, offsetof(squeeze_params, axis),
     "the size-1 axes to remove; None removes every one"},
};

static int ed_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int ed_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status expand_dims_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const expand_dims_params *ep = p;
    char a[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "expand_dims: the shape of data is unknown");
    int nd = in[0].ndim;
    int64_t ax = ep->axis < 0 ? ep->axis + nd + 1 : ep->axis;
    if (ax < 0 || ax > nd)
        return MX_ERROR(MX_ERR_INVALID,
                        "expand_dims: parameter 'axis' has value %lld, out of range [%d, %d] for data of shape %s",
                        (long long)ep->axis, -nd - 1, nd, mx_shape_str(&in[0], a, sizeof(a)));
    if (nd == MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "expand_dims: data %s already has the most dimensions supported (%d)",
                        mx_shape_str(&in[0], a, sizeof(a)), MX_MAX_NDIM);
    mx_shape o = {.ndim = nd + 1};
    for (int k = 0, j = 0; k <= nd; k++) o.dims[k] = k == ax ? 1 : in[0].dims[j++];
    out[0] = o;
    return MX_OK;
}

static mx_status squeeze_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const squeeze_params *sp = p;
    char a[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "squeeze: the shape of data is unknown");
    int nd = in[0].ndim;
    bool drop[MX_MAX_NDIM] = {false};
    if (sp->axis.ndim < 0) {
        for (int k = 0; k < nd; k++) drop[k] = in[0].dims[k] == 1;
    } else {
        for (int i = 0; i < sp->axis.ndim; i++) {
            int64_t ax = sp->axis.v[i] < 0 ? sp->axis.v[i] + nd : sp->axis.v[i];
            if (ax < 0 || ax >= nd)
                return MX_ERROR(MX_ERR_INVALID, "squeeze: parameter 'axis' has axis %lld, out of range for data %s",
                                (long long)sp->axis.v[i], mx_shape_str(&in[0], a, sizeof(a)));
            if (drop[ax])
                return MX_ERROR(MX_ERR_INVALID, "squeeze: parameter 'axis' names axis %lld twice", (long long)ax);
            if (in[0].dims[ax] != 1)
                return MX_ERROR(MX_ERR_INVALID, "squeeze: axis %lld of data %s has size %lld, not 1", (long long)ax,
                                mx_shape_str(&in[0], a, sizeof(a)), (long long)in[0].dims[ax]);
            drop[ax] = true;
        }
    }
    mx_shape o = {0};
    for (int k = 0; k < nd; k++)
        if (!drop[k]) o.dims[o.ndim++] = in[0].dims[k];
    if (o.ndim == 0) o.dims[o.ndim++] = 1;
    out[0] = o;
    return MX_OK;
}

/* dst = src or dst += src over n floats; dst may be src (in place). */
static mx_status copy_req(const char *op, float *dst, const float *src, int64_t n, mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    if (dtype != MX_FLOAT32 && req == MX_REQ_ADD)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: accumulating (req add) into %s is not supported", op,
                        mx_dtype_name(dtype));
    if (req == MX_REQ_ADD)
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    else if (dst != src)
        memcpy(dst, src, (size_t)n * mx_dtype_size(dtype));
    return MX_OK;
}

#define SHAPE_ONLY_KERNELS(sym, opname)                                                                          \
    static mx_status sym##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,  \
                                   mx_tensor *out, mx_tensor *aux)                                               \
    {                                                                                                            \
        (void)ctx, (void)p, (void)aux;                                                                           \
        return copy_req(opname, out[0].data, in[0].data, mx_shape_size(&in[0].shape), in[0].dtype, req[0]);      \
    }                                                                                                            \
    static mx_status sym##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,              \
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req,                \
                                    mx_tensor *in_grad, mx_tensor *aux)                                          \
    {                                                                                                            \
        (void)ctx, (void)p, (void)in, (void)out, (void)aux;                                                      \
        return copy_req(opname, in_grad[0].data, out_grad[0].data, mx_shape_size(&out_grad[0].shape),            \
                        out_grad[0].dtype, req[0]);                                                              \
    }

SHAPE_ONLY_KERNELS(expand_dims, "expand_dims")
SHAPE_ONLY_KERNELS(squeeze, "squeeze")

MX_OP_GPU_DECLARE(expand_dims);
MX_OP_GPU_DECLARE(squeeze);

static const mx_inplace ed_inplace[] = {{0, 0}, {-1, -1}};

const mx_op_def mx_op_expand_dims = {
    .name = "expand_dims",
    .doc = "Inserts a size-1 axis at `axis`.",
    .params = expand_dims_param_table,
    .n_params = (int)(sizeof(expand_dims_param_table) / sizeof(expand_dims_param_table[0])),
    .params_size = sizeof(expand_dims_params),
    .list_inputs = ed_list_inputs,
    .list_outputs = ed_list_outputs,
    .infer_shape = expand_dims_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = ed_inplace,
    .backward_inplace = ed_inplace,
    .forward = expand_dims_forward,
    .backward = expand_dims_backward,
    .gpu = MX_OP_GPU(expand_dims),
};

const mx_op_def mx_op_squeeze = {
    .name = "squeeze",
    .doc = "Removes size-1 axes (the listed ones, or all).",
    .params = squeeze_param_table,
    .n_params = (int)(sizeof(squeeze_param_table) / sizeof(squeeze_param_table[0])),
    .params_size = sizeof(squeeze_params),
    .list_inputs = ed_list_inputs,
    .list_outputs = ed_list_outputs,
    .infer_shape = squeeze_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = ed_inplace,
    .backward_inplace = ed_inplace,
    .forward = squeeze_forward,
    .backward = squeeze_backward,
    .gpu = MX_OP_GPU(squeeze),
};
