/*
 * cast.c - Cast: converts data to `dtype`; backward converts the output
 * gradient back to the input's type. Shapes pass through; the dtypes come
 * from the tensors themselves (mx_tensor.dtype), so the executor must
 * allocate the output with this op's dtype parameter (the interface has no
 * type inference yet).
 * Conversions go through double in chunks: float -> integer truncates
 * toward zero like C's cast, but saturates at the type's range and maps
 * NaN to 0 where C (and MXNet) leave it undefined.
 */
#include "ops/op.h"
#include "ops/cast.h"
#include "base/half.h"

#include <math.h>
#include <stddef.h>
#include <string.h>


/* MXNet's names; bfloat16 and bool are recognised but not supported. */
static const char *const cast_choices[] = {"float32", "float64", "float16", "uint8", "int32",
                                           "int8",    "int64",   "bfloat16", "bool", NULL};
static const int cast_to_dtype[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_UINT8, MX_INT32, MX_INT8, MX_INT64, -1, -1};

static const mx_param_desc cast_param_table[] = {
    {"dtype", MX_PARAM_ENUM, NULL, 1, 0, cast_choices, offsetof(cast_params, dtype), "the output data type"},
};

static mx_status cast_check(const void *p)
{
    const cast_params *cp = p;
    if (cast_to_dtype[cp->dtype] < 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Cast: parameter 'dtype' value '%s' is not supported", cast_choices[cp->dtype]);
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
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Cast: the shape of data is unknown");
    out[0] = in[0];
    return MX_OK;
}

static double saturate(double v, double lo, double hi)
{
    if (v != v) return 0.0;
    v = trunc(v);
    return v < lo ? lo : v > hi ? hi : v;
}

#define CAST_CHUNK 256

static void load(double *d, const void *src, mx_dtype t, int64_t n)
{
    switch (t) {
    case MX_FLOAT32: for (int64_t i = 0; i < n; i++) d[i] = ((const float *)src)[i]; break;
    case MX_FLOAT64: for (int64_t i = 0; i < n; i++) d[i] = ((const double *)src)[i]; break;
    case MX_FLOAT16: for (int64_t i = 0; i < n; i++) d[i] = mx_half_to_float(((const uint16_t *)src)[i]); break;
    case MX_UINT8: for (int64_t i = 0; i < n; i++) d[i] = ((const uint8_t *)src)[i]; break;
    case MX_INT32: for (int64_t i = 0; i < n; i++) d[i] = ((const int32_t *)src)[i]; break;
    case MX_INT8: for (int64_t i = 0; i < n; i++) d[i] = ((const int8_t *)src)[i]; break;
    case MX_INT64: for (int64_t i = 0; i < n; i++) d[i] = (double)((const int64_t *)src)[i]; break;
    default: break;
    }
}

static void store(void *dst, mx_dtype t, const double *d, int64_t n)
{
    switch (t) {
    case MX_FLOAT32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)d[i]; break;
    case MX_FLOAT64: for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = d[i]; break;
    case MX_FLOAT16: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mx_float_to_half((float)d[i]); break;
    case MX_UINT8: for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)saturate(d[i], 0, 255); break;
    case MX_INT32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)saturate(d[i], -2147483648.0, 2147483647.0);
        break;
    case MX_INT8: for (int64_t i = 0; i < n; i++) ((int8_t *)dst)[i] = (int8_t)saturate(d[i], -128, 127); break;
    case MX_INT64:
        for (int64_t i = 0; i < n; i++) {
            double v = saturate(d[i], -9223372036854775808.0, 9223372036854775807.0);
            ((int64_t *)dst)[i] = v >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v;
        }
        break;
    default: break;
    }
}

/* dst (dtype dt) = or += src (dtype st) over n elements. */
static mx_status convert(void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n, mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    if (!mx_dtype_valid(dt) || !mx_dtype_valid(st))
        return MX_ERROR(MX_ERR_INVALID, "Cast: bad tensor dtype (%d -> %d)", (int)st, (int)dt);
    bool add = req == MX_REQ_ADD;
    if (dt == st && !add) {
        if (dst != src) memmove(dst, src, (size_t)n * mx_dtype_size(dt));
        return MX_OK;
    }
    if (dt == MX_FLOAT32 && st == MX_FLOAT32) { /* add, the common gradient case */
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
        return MX_OK;
    }
    double a[CAST_CHUNK], b[CAST_CHUNK];
    size_t ds = mx_dtype_size(dt), ss = mx_dtype_size(st);
    for (int64_t i0 = 0; i0 < n; i0 += CAST_CHUNK) {
        int64_t w = n - i0 < CAST_CHUNK ? n - i0 : CAST_CHUNK;
        load(a, (const char *)src + (size_t)i0 * ss, st, w);
        if (add) {
            load(b, (const char *)dst + (size_t)i0 * ds, dt, w);
            for (int64_t i = 0; i < w; i++) a[i] += b[i];
        }
        store((char *)dst + (size_t)i0 * ds, dt, a, w);
    }
    return MX_OK;
}

static mx_status cast_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const cast_params *cp = p;
    if (req[0] != MX_REQ_NULL && (int)out[0].dtype != cast_to_dtype[cp->dtype])
        return MX_ERROR(MX_ERR_INVALID, "Cast: output tensor is %s, expected %s (dtype parameter)",
                        mx_dtype_name(out[0].dtype), cast_choices[cp->dtype]);
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
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = cast_forward,
    .backward = cast_backward,
    .gpu = MX_OP_GPU(cast),
};
