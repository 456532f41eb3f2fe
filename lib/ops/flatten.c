/*
 * flatten.c - Flatten: (d0, d1, ..., dk) -> (d0, d1*...*dk). The data is
 * unchanged, so forward and backward are copies (none at all when the
 * planner runs them in place).
 */
#include "ops/op.h"

#include <string.h>

MX_OP_GPU_DECLARE(flatten);

static int flatten_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int flatten_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status flatten_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Flatten: the shape of data is unknown");
    int64_t rest = 1;
    for (int i = 1; i < in[0].ndim; i++) rest *= in[0].dims[i];
    out[0] = MX_SHAPE(in[0].dims[0], rest);
    return MX_OK;
}

/* dst = src (or dst += src) over n elements of dtype; dst may be src. */
static mx_status flatten_copy(void *dst, const void *src, int64_t n, mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    if (req != MX_REQ_ADD) {
        if (dst != src) memcpy(dst, src, (size_t)n * mx_dtype_size(dtype));
        return MX_OK;
    }
    if (dtype == MX_FLOAT32) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else if (dtype == MX_FLOAT64) {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Flatten: accumulating (req add) into %s is not supported",
                        mx_dtype_name(dtype));
    }
    return MX_OK;
}

static mx_status flatten_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    return flatten_copy(out[0].data, in[0].data, mx_shape_size(&in[0].shape), in[0].dtype, req[0]);
}

static mx_status flatten_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)ctx, (void)p, (void)in, (void)out, (void)aux;
    return flatten_copy(in_grad[0].data, out_grad[0].data, mx_shape_size(&out_grad[0].shape), out_grad[0].dtype,
                        req[0]);
}

static const mx_inplace flatten_inplace[] = {{0, 0}, {-1, -1}};
static const char *const flatten_aliases[] = {"flatten", NULL};

const mx_op_def mx_op_flatten = {
    .name = "Flatten",
    .aliases = flatten_aliases,
    .doc = "Flattens data to 2-D: (d0, d1, ..., dk) -> (d0, d1*...*dk).",
    .params = NULL,
    .n_params = 0,
    .params_size = 1,
    .list_inputs = flatten_list_inputs,
    .list_outputs = flatten_list_outputs,
    .infer_shape = flatten_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = flatten_inplace,
    .backward_inplace = flatten_inplace,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .gpu = MX_OP_GPU(flatten),
};
