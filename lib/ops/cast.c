/*
 * cast.c - Cast: converts data to `dtype`; backward converts the output
 * gradient back to the input's type. Shapes pass through; the output's
 * dtype is the parameter (cast_infer_type), and the kernels convert
 * between the tensors' own dtypes (mx_tensor.dtype), every one of them.
 * Conversions are the library's one table (ndarray/dtype_convert.h):
 * through double, float16 and bfloat16 rounding to nearest even (through
 * float32); float -> integer truncates toward zero like C's cast, but
 * saturates at the type's range and maps NaN to 0 where C (and MXNet) leave
 * it undefined.
 */
#include "ops/op.h"
#include "ops/cast.h"
#include "ndarray/dtype_convert.h"

#include <stddef.h>

static const mx_param_desc cast_param_table[] = {
    {"dtype", MX_PARAM_ENUM, NULL, 1, 0, mx_cast_choices, offsetof(cast_params, dtype), "the output data type"},
};

static mx_status cast_check(const void *p)
{
    const cast_params *cp = p;
    if (mx_cast_dtypes[cp->dtype] < 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Cast: parameter 'dtype' value '%s' is not supported", mx_cast_choices[cp->dtype]);
    return MX_OK;
}

static int cast_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int cast_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status cast_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    /* Both unknown: a Cast of a weight, whose reader gives the output's
     * shape; mx_graph_infer_shapes then brings it back to the input. */
    if (in[0].ndim == 0) in[0] = out[0];
    else out[0] = in[0];
    return MX_OK;
}

/* MXNet's CastType: the output is `dtype`, the data any type (float32
 * when unknown). */
static mx_status cast_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)n_in, (void)n_out;
    const cast_params *cp = p;
    int want = mx_cast_dtypes[cp->dtype];
    if (in[0] < 0) in[0] = MX_FLOAT32;
    if (out[0] >= 0 && out[0] != want)
        return MX_ERROR(MX_ERR_INVALID, "Cast: output is %s, but dtype is %s", mx_dtype_name((mx_dtype)out[0]),
                        mx_cast_choices[cp->dtype]);
    out[0] = want;
    return MX_OK;
}

/* dst (dtype dt) = or += src (dtype st) over n elements. */
static mx_status convert(void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n, mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    return mx_dtype_convert("Cast", dst, dt, src, st, n, req == MX_REQ_ADD);
}

static mx_status cast_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const cast_params *cp = p;
    if (req[0] != MX_REQ_NULL && (int)out[0].dtype != mx_cast_dtypes[cp->dtype])
        return MX_ERROR(MX_ERR_INVALID, "Cast: output tensor is %s, expected %s (dtype parameter)",
                        mx_dtype_name(out[0].dtype), mx_cast_choices[cp->dtype]);
    return convert(out[0].data, out[0].dtype, in[0].data, in[0].dtype, mx_shape_size(&in[0].shape), req[0]);
}

static mx_status cast_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)in, (void)out, (void)aux;
    return convert(in_grad[0].data, in_grad[0].dtype, out_grad[0].data, out_grad[0].dtype,
                   mx_shape_size(&in_grad[0].shape), req[0]);
}

static const char *const cast_aliases[] = {"cast", NULL};

MX_OP_GPU_DECLARE(cast);

const mx_op_def mx_op_cast = {
    .name = "Cast",
    .aliases = cast_aliases,
    .doc = "Casts data to `dtype`; the gradient is cast back.",
    .params = cast_param_table,
    .n_params = (int)(sizeof(cast_param_table) / sizeof(cast_param_table[0])),
    .params_size = sizeof(cast_params),
    .check = cast_check,
    .list_inputs = cast_list_inputs,
    .list_outputs = cast_list_outputs,
    .infer_shape = cast_infer_shape,
    .infer_type = cast_infer_type,
    .cpu_dtypes = MX_CAST_ALL_DTYPES,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = cast_forward,
    .backward = cast_backward,
    .gpu = MX_OP_GPU(cast),
};
