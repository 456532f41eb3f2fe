/*
 * elemwise_scalar.c - an array and a scalar, element-wise: one kernel
 * behind six definitions with MXNet's names and legacy aliases:
 *   _plus_scalar   (_PlusScalar)    x + s   dx = dy
 *   _minus_scalar  (_MinusScalar)   x - s   dx = dy
 *   _rminus_scalar (_RMinusScalar)  s - x   dx = -dy
 *   _mul_scalar    (_MulScalar)     x * s   dx = s dy
 *   _div_scalar    (_DivScalar)     x / s   dx = dy / s
 *   _rdiv_scalar   (_RDivScalar)    s / x   dx = -s dy / x^2
 * All run in place (out on data, dx on dy).
 *
 * Issue 17 adds the rest of MXNet's scalar family on binary_math.h's
 * element math (f(x, s), or f(s, x) for the r- forms), same parameters:
 *   _power_scalar (_PowerScalar)        x^s        dx = s x^(s-1) dy
 *   _rpower_scalar (_RPowerScalar)      s^x        dx = s^x log(s) dy
 *   _maximum_scalar (_MaximumScalar, _npi_maximum_scalar)  dx = dy where x >= s
 *   _minimum_scalar (_MinimumScalar, _npi_minimum_scalar)  dx = dy where x <= s
 *   _mod_scalar (_ModScalar)            x mod s    dx = dy
 *   _rmod_scalar (_RModScalar)          s mod x    dx = -floor(s / x) dy
 *   _hypot_scalar (_HypotScalar, _npi_hypot_scalar)  sqrt(x^2 + s^2)
 *   _equal_scalar, _not_equal_scalar, _greater_scalar, _greater_equal_scalar,
 *   _lesser_scalar, _lesser_equal_scalar, _logical_and_scalar,
 *   _logical_or_scalar, _logical_xor_scalar (and their CamelCase aliases):
 *                                       1 or 0, zero gradient
 * (mod as Python's %, NaN handling of maximum/minimum: binary_math.h).
 */
#include "ops/elemwise_scalar.h"
#include "ops/binary_math.h"
#include "ops/cpu/simd.h"

#include <stddef.h>

typedef enum ews_kind { EWS_PLUS, EWS_MINUS, EWS_RMINUS, EWS_MUL, EWS_DIV, EWS_RDIV } ews_kind;

static const mx_param_desc ews_param_table[] = {
    {"scalar", MX_PARAM_FLOAT, "1", 1, 0, NULL, offsetof(ews_params, scalar), "the scalar operand"},
    {"is_int", MX_PARAM_BOOL, "True", 1, 0, NULL, offsetof(ews_params, is_int),
     "whether the scalar was written as an integer (type promotion in MXNet's numpy mode; float32 data "
     "ignores it)"},
};

static const char *const ews_names[] = {"_plus_scalar", "_minus_scalar", "_rminus_scalar",
                                        "_mul_scalar",  "_div_scalar",   "_rdiv_scalar"};

static int ews_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int ews_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status ews_infer(ews_kind kind, mx_shape *in, mx_shape *out)
{
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", ews_names[kind]);
    out[0] = in[0];
    return MX_OK;
}

static inline void put(float *dst, float v, bool add) { *dst = add ? *dst + v : v; }

static mx_status ews_forward(ews_kind kind, const ews_params *ep, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    const float *x = in[0].data;
    float *y = out[0].data, s = (float)ep->scalar;
    bool add = req[0] == MX_REQ_ADD;
    switch (kind) {
    case EWS_PLUS: for (int64_t i = 0; i < n; i++) put(&y[i], x[i] + s, add); break;
    case EWS_MINUS: for (int64_t i = 0; i < n; i++) put(&y[i], x[i] - s, add); break;
    case EWS_RMINUS: for (int64_t i = 0; i < n; i++) put(&y[i], s - x[i], add); break;
    case EWS_MUL: for (int64_t i = 0; i < n; i++) put(&y[i], x[i] * s, add); break;
    case EWS_DIV: for (int64_t i = 0; i < n; i++) put(&y[i], x[i] / s, add); break;
    case EWS_RDIV: for (int64_t i = 0; i < n; i++) put(&y[i], s / x[i], add); break;
    }
    return MX_OK;
}

static mx_status ews_backward(ews_kind kind, const ews_params *ep, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_req *req, mx_tensor *in_grad)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    const float *dy = out_grad[0].data, *x = kind == EWS_RDIV ? in[0].data : NULL;
    float *dx = in_grad[0].data, s = (float)ep->scalar;
    bool add = req[0] == MX_REQ_ADD;
    switch (kind) {
    case EWS_PLUS:
    case EWS_MINUS: for (int64_t i = 0; i < n; i++) put(&dx[i], dy[i], add); break;
    case EWS_RMINUS: for (int64_t i = 0; i < n; i++) put(&dx[i], -dy[i], add); break;
    case EWS_MUL: for (int64_t i = 0; i < n; i++) put(&dx[i], dy[i] * s, add); break;
    case EWS_DIV: for (int64_t i = 0; i < n; i++) put(&dx[i], dy[i] / s, add); break;
    case EWS_RDIV: for (int64_t i = 0; i < n; i++) put(&dx[i], -s * dy[i] / (x[i] * x[i]), add); break;
    }
    return MX_OK;
}

#define EWS_FUNCS(prefix, kind)                                                                              \
    static mx_status prefix##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)    \
    {                                                                                                        \
        (void)p, (void)n_in, (void)n_out;                                                                    \
        return ews_infer(kind, in, out);                                                                     \
    }                                                                                                        \
    static mx_status prefix##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,              \
                                      const mx_req *req, mx_tensor *out, mx_tensor *aux)                     \
    {                                                                                                        \
        (void)ctx, (void)aux;                                                                                \
        return ews_forward(kind, p, in, req, out);                                                           \
    }                                                                                                        \
    static mx_status prefix##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,       \
                                       const mx_tensor *in, const mx_tensor *out, const mx_req *req,         \
                                       mx_tensor *in_grad, mx_tensor *aux)                                   \
    {                                                                                                        \
        (void)ctx, (void)out, (void)aux;                                                                     \
        return ews_backward(kind, p, out_grad, in, req, in_grad);                                            \
    }

EWS_FUNCS(ews_plus, EWS_PLUS)
EWS_FUNCS(ews_minus, EWS_MINUS)
EWS_FUNCS(ews_rminus, EWS_RMINUS)
EWS_FUNCS(ews_mul, EWS_MUL)
EWS_FUNCS(ews_div, EWS_DIV)
EWS_FUNCS(ews_rdiv, EWS_RDIV)

static const mx_inplace ews_inplace[] = {{0, 0}, {-1, -1}};

static const char *const ews_plus_aliases[] = {"_PlusScalar", NULL};
static const char *const ews_minus_aliases[] = {"_MinusScalar", NULL};
static const char *const ews_rminus_aliases[] = {"_RMinusScalar", NULL};
static const char *const ews_mul_aliases[] = {"_MulScalar", NULL};
static const char *const ews_div_aliases[] = {"_DivScalar", NULL};
static const char *const ews_rdiv_aliases[] = {"_RDivScalar", NULL};

#define EWS_DEF(id, opname, prefix, deps, docstr)                                                            \
    MX_OP_GPU_DECLARE(id);                                                                                  \
    const mx_op_def mx_op_##id = {                                                                          \
        .name = opname,                                                                                     \
        .aliases = prefix##_aliases,                                                                        \
        .doc = docstr,                                                                                      \
        .params = ews_param_table,                                                                          \
        .n_params = (int)(sizeof(ews_param_table) / sizeof(ews_param_table[0])),                            \
        .params_size = sizeof(ews_params),                                                                  \
        .list_inputs = ews_list_inputs,                                                                     \
        .list_outputs = ews_list_outputs,                                                                   \
        .infer_shape = prefix##_infer_shape,                                                                \
        .backward_deps = deps,                                                                              \
        .forward_inplace = ews_inplace,                                                                     \
        .backward_inplace = ews_inplace,                                                                    \
        .forward = prefix##_forward,                                                                        \
        .backward = prefix##_backward,                                                                      \
        .gpu = MX_OP_GPU(id),                                                                               \
    }

EWS_DEF(plus_scalar, "_plus_scalar", ews_plus, MX_BWD_OUT_GRAD, "data + scalar");
EWS_DEF(minus_scalar, "_minus_scalar", ews_minus, MX_BWD_OUT_GRAD, "data - scalar");
EWS_DEF(rminus_scalar, "_rminus_scalar", ews_rminus, MX_BWD_OUT_GRAD, "scalar - data");
EWS_DEF(mul_scalar, "_mul_scalar", ews_mul, MX_BWD_OUT_GRAD, "data * scalar");
EWS_DEF(div_scalar, "_div_scalar", ews_div, MX_BWD_OUT_GRAD, "data / scalar");
EWS_DEF(rdiv_scalar, "_rdiv_scalar", ews_rdiv, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA, "scalar / data");

/* ------------------------------------------------------- issue 17 */

/* One kernel call over elements [lo, hi). */
typedef struct ewsb_job {
    const float *x, *dy;
    float *dst;
    float s;
    bool add;
} ewsb_job;

MX_SIMD_JOB_RUNNER(ewsb, ewsb_job, 8192)

/* id, MXNet name, aliases, binary_math kind, operands reversed (f(s, x)),
 * backward dependencies. */
#define A(...) ((const char *const[]){__VA_ARGS__ NULL})
#define EWSB_OPS(X)                                                                                                 \
    X(power_scalar, "_power_scalar", A("_PowerScalar", ), MX_BIN_POWER, 0, MX_BWD_IN_DATA, "data ^ scalar")        \
    X(rpower_scalar, "_rpower_scalar", A("_RPowerScalar", ), MX_BIN_POWER, 1, MX_BWD_IN_DATA, "scalar ^ data")     \
    X(maximum_scalar, "_maximum_scalar", A("_MaximumScalar", "_npi_maximum_scalar", ), MX_BIN_MAXIMUM, 0,           \
      MX_BWD_IN_DATA, "max(data, scalar)")                                                                          \
    X(minimum_scalar, "_minimum_scalar", A("_MinimumScalar", "_npi_minimum_scalar", ), MX_BIN_MINIMUM, 0,           \
      MX_BWD_IN_DATA, "min(data, scalar)")                                                                          \
    X(mod_scalar, "_mod_scalar", A("_ModScalar", ), MX_BIN_MOD, 0, 0, "data mod scalar (Python's %)")              \
    X(rmod_scalar, "_rmod_scalar", A("_RModScalar", ), MX_BIN_MOD, 1, MX_BWD_IN_DATA, "scalar mod data")           \
    X(hypot_scalar, "_hypot_scalar", A("_HypotScalar", "_npi_hypot_scalar", ), MX_BIN_HYPOT, 0, MX_BWD_IN_DATA,    \
      "sqrt(data^2 + scalar^2)")                                                                                    \
    X(equal_scalar, "_equal_scalar", A("_EqualScalar", ), MX_BIN_EQUAL, 0, 0, "1 where data == scalar, else 0")    \
    X(not_equal_scalar, "_not_equal_scalar", A("_NotEqualScalar", ), MX_BIN_NOT_EQUAL, 0, 0,                       \
      "1 where data != scalar, else 0")                                                                             \
    X(greater_scalar, "_greater_scalar", A("_GreaterScalar", ), MX_BIN_GREATER, 0, 0,                              \
      "1 where data > scalar, else 0")                                                                              \
    X(greater_equal_scalar, "_greater_equal_scalar", A("_GreaterEqualScalar", ), MX_BIN_GREATER_EQUAL, 0, 0,       \
      "1 where data >= scalar, else 0")                                                                             \
    X(lesser_scalar, "_lesser_scalar", A("_LesserScalar", ), MX_BIN_LESSER, 0, 0, "1 where data < scalar, else 0") \
    X(lesser_equal_scalar, "_lesser_equal_scalar", A("_LesserEqualScalar", ), MX_BIN_LESSER_EQUAL, 0, 0,           \
      "1 where data <= scalar, else 0")                                                                             \
    X(logical_and_scalar, "_logical_and_scalar", A("_LogicalAndScalar", ), MX_BIN_LOGICAL_AND, 0, 0,               \
      "1 where data and scalar are both non-zero, else 0")                                                          \
    X(logical_or_scalar, "_logical_or_scalar", A("_LogicalOrScalar", ), MX_BIN_LOGICAL_OR, 0, 0,                   \
      "1 where data or scalar is non-zero, else 0")                                                                 \
    X(logical_xor_scalar, "_logical_xor_scalar", A("_LogicalXorScalar", ), MX_BIN_LOGICAL_XOR, 0, 0,               \
      "1 where exactly one of data and scalar is non-zero, else 0")

#define EWSB_FUNCS(id, opname, aliases_, KIND, REV, DEPS, docstr)                                                   \
    static void id##_fwd(const ewsb_job *j, int64_t lo, int64_t hi)                                                \
    {                                                                                                               \
        const float *x = j->x, s = j->s;                                                                            \
        MX_SIMD_MAP(j->dst, lo, hi, j->add, REV ? mx_bin_f(KIND, s, x[i]) : mx_bin_f(KIND, x[i], s));                  \
    }                                                                                                               \
    static void id##_bwd(const ewsb_job *j, int64_t lo, int64_t hi)                                                \
    {                                                                                                               \
        const float *x = j->x, *dy = j->dy, s = j->s;                                                               \
        if (mx_bin_no_grad(KIND)) {                                                                                 \
            if (!j->add)                                                                                            \
                for (int64_t i = lo; i < hi; i++) j->dst[i] = 0.0f;                                                 \
        } else if (!(DEPS)) {                                                                                       \
            MX_SIMD_MAP(j->dst, lo, hi, j->add, dy[i] * mx_bin_da(KIND, 0.0f, s));                                     \
        } else {                                                                                                    \
            MX_SIMD_MAP(j->dst, lo, hi, j->add, dy[i] * (REV ? mx_bin_db(KIND, s, x[i]) : mx_bin_da(KIND, x[i], s)));  \
        }                                                                                                           \
    }                                                                                                               \
    static mx_status id##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)             \
    {                                                                                                               \
        (void)p, (void)n_in, (void)n_out;                                                                           \
        if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", opname);           \
        out[0] = in[0];                                                                                             \
        return MX_OK;                                                                                               \
    }                                                                                                               \
    static mx_status id##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,    \
                                  mx_tensor *out, mx_tensor *aux)                                                   \
    {                                                                                                               \
        (void)aux;                                                                                                  \
        if (req[0] == MX_REQ_NULL) return MX_OK;                                                                    \
        ewsb_job j = {.x = in[0].data, .dst = out[0].data, .s = (float)((const ews_params *)p)->scalar,             \
                      .add = req[0] == MX_REQ_ADD};                                                                 \
        ewsb_run(ctx, id##_fwd, &j, mx_shape_size(&in[0].shape));                                                   \
        return MX_OK;                                                                                               \
    }                                                                                                               \
    static mx_status id##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,                \
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req,                    \
                                   mx_tensor *in_grad, mx_tensor *aux)                                              \
    {                                                                                                               \
        (void)out, (void)aux;                                                                                       \
        if (req[0] == MX_REQ_NULL) return MX_OK;                                                                    \
        ewsb_job j = {.x = in[0].data, .dy = out_grad[0].data, .dst = in_grad[0].data,                              \
                      .s = (float)((const ews_params *)p)->scalar, .add = req[0] == MX_REQ_ADD};                    \
        ewsb_run(ctx, id##_bwd, &j, mx_shape_size(&in_grad[0].shape));                                              \
        return MX_OK;                                                                                               \
    }                                                                                                               \
    MX_OP_GPU_DECLARE(id);                                                                                          \
    const mx_op_def mx_op_##id = {                                                                                  \
        .name = opname,                                                                                             \
        .aliases = aliases_,                                                                                        \
        .doc = docstr,                                                                                              \
        .params = ews_param_table,                                                                                  \
        .n_params = (int)(sizeof(ews_param_table) / sizeof(ews_param_table[0])),                                    \
        .params_size = sizeof(ews_params),                                                                          \
        .list_inputs = ews_list_inputs,                                                                             \
        .list_outputs = ews_list_outputs,                                                                           \
        .infer_shape = id##_infer_shape,                                                                            \
        .backward_deps = MX_BWD_OUT_GRAD | (DEPS),                                                                  \
        .forward_inplace = ews_inplace,                                                                             \
        .backward_inplace = ews_inplace,                                                                            \
        .forward = id##_forward,                                                                                    \
        .backward = id##_backward,                                                                                  \
        .gpu = MX_OP_GPU(id),                                                                                       \
    };

EWSB_OPS(EWSB_FUNCS)

/* smooth_l1 (_npx_smooth_l1), MXNet's Huber-like loss term with sigma =
 * scalar (default 1), t = 1 / sigma^2:
 *   f(x) = 0.5 (sigma x)^2 for |x| <= t, |x| - 0.5 t beyond;
 *   f'(x) = sigma^2 x inside, sign(x) beyond (MXNet's boundaries: |x| = t
 *   takes the quadratic branch). Only `scalar`, no is_int, as in MXNet. */

static const mx_param_desc sl1_param_table[] = {
    {"scalar", MX_PARAM_FLOAT, "1", 1, 0, NULL, offsetof(sl1_params, scalar),
     "sigma: the quadratic part is |x| <= 1/sigma^2"},
};

static void sl1_fwd(const ewsb_job *j, int64_t lo, int64_t hi)
{
    const float *x = j->x, b2 = j->s * j->s, t = 1.0f / b2;
    MX_SIMD_MAP(j->dst, lo, hi, j->add,
             x[i] > t ? x[i] - 0.5f * t : x[i] < -t ? -x[i] - 0.5f * t : 0.5f * x[i] * x[i] * b2);
}

static void sl1_bwd(const ewsb_job *j, int64_t lo, int64_t hi)
{
    const float *x = j->x, *dy = j->dy, b2 = j->s * j->s, t = 1.0f / b2;
    MX_SIMD_MAP(j->dst, lo, hi, j->add, dy[i] * (x[i] > t ? 1.0f : x[i] < -t ? -1.0f : x[i] * b2));
}

static mx_status sl1_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "smooth_l1: the shape of data is unknown");
    out[0] = in[0];
    return MX_OK;
}

static mx_status sl1_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    ewsb_job j = {.x = in[0].data, .dst = out[0].data, .s = (float)((const sl1_params *)p)->scalar,
                  .add = req[0] == MX_REQ_ADD};
    ewsb_run(ctx, sl1_fwd, &j, mx_shape_size(&in[0].shape));
    return MX_OK;
}

static mx_status sl1_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    ewsb_job j = {.x = in[0].data, .dy = out_grad[0].data, .dst = in_grad[0].data,
                  .s = (float)((const sl1_params *)p)->scalar, .add = req[0] == MX_REQ_ADD};
    ewsb_run(ctx, sl1_bwd, &j, mx_shape_size(&in_grad[0].shape));
    return MX_OK;
}

MX_OP_GPU_DECLARE(smooth_l1);

const mx_op_def mx_op_smooth_l1 = {
    .name = "smooth_l1",
    .aliases = A("_npx_smooth_l1", ),
    .doc = "Smooth L1 (Huber-like) of data with sigma = scalar.",
    .params = sl1_param_table,
    .n_params = (int)(sizeof(sl1_param_table) / sizeof(sl1_param_table[0])),
    .params_size = sizeof(sl1_params),
    .list_inputs = ews_list_inputs,
    .list_outputs = ews_list_outputs,
    .infer_shape = sl1_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward_inplace = ews_inplace,
    .backward_inplace = ews_inplace,
    .forward = sl1_forward,
    .backward = sl1_backward,
    .gpu = MX_OP_GPU(smooth_l1),
};
