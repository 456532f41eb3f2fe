/*
 * unary_math.c - MXNet's element-wise math on one array (NDArray names, as
 * Gluon's F.relu, F.exp, ... write them into symbol JSON): y = f(x), any
 * shape, float32, forward in place on data and backward in place on
 * out_grad. Each op is one row of a table below: its MXNet name and
 * aliases, f, and its derivative as a function of the input x (a) or the
 * output y (o), which decides what backward keeps alive. Rounding, sign
 * and comparison ops have a zero gradient as in MXNet (dx = 0, even where
 * dy is inf or NaN). Special values follow float libm as MXNet's CPU
 * kernels do: sqrt'(0) = inf, log(-1) = NaN, ...
 *
 * relu, sigmoid, tanh, softsign, exp and expm1, the ones networks spend
 * time in, run on simd.h's vector math (the same kernels and accuracy as
 * Activation); the rest are plain loops the compiler vectorises where it
 * can. Large tensors are split across the kernel pool either way.
 *
 * hard_sigmoid (alpha, beta) is here too: y = clip(alpha x + beta, 0, 1),
 * dx = alpha dy inside (0, 1), 0 at and beyond the clip.
 */
#include "ops/op.h"
#include "ops/cpu/simd.h"
#include "ops/unary_math.h"

#include <math.h>
#include <stddef.h>

/* ------------------------------------------------------- common plumbing */

static int un_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int un_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status un_infer(const char *name, mx_shape *in, mx_shape *out)
{
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", name);
    out[0] = in[0];
    return MX_OK;
}

/* One call over elements [lo, hi): forward reads x and writes dst (y);
 * backward reads dy, x and/or y and writes dst (dx). Written or added. */
typedef struct un_job {
    const float *x, *y, *dy;
    float *dst;
    bool add;
    int kind, level; /* the vector ops */
    float alpha, beta; /* hard_sigmoid */
} un_job;

/* Pieces of 8192 elements on the kernel pool: libm calls cost ~10x a load
 * and a store, so they split sooner. */
MX_SIMD_JOB_RUNNER(un, un_job, 8192)


/* A constant expression (an array element is not one for clang, which
 * builds the fuzzers). */
#define UN_DEPS(kind)                                                                                                  \
    ((kind) == UG_IN    ? (MX_BWD_OUT_GRAD | MX_BWD_IN_DATA)                                                           \
     : (kind) == UG_OUT ? (MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA)                                                          \
                        : MX_BWD_OUT_GRAD)

static const mx_inplace un_inplace[] = {{0, 0}, {-1, -1}};

#define A(...) ((const char *const[]){__VA_ARGS__ NULL})

#define UN_DEF(id, opname, aliases_, gkind, docstr)                                                                \
    MX_OP_GPU_DECLARE(id);                                                                                          \
    const mx_op_def mx_op_##id = {                                                                                 \
        .name = opname,                                                                                             \
        .aliases = aliases_,                                                                                        \
        .doc = docstr,                                                                                              \
        .params_size = 1,                                                                                           \
        .list_inputs = un_list_inputs,                                                                              \
        .list_outputs = un_list_outputs,                                                                            \
        .infer_shape = id##_infer_shape,                                                                            \
        .backward_deps = UN_DEPS(gkind),                                                                               \
        .forward_inplace = un_inplace,                                                                              \
        .backward_inplace = un_inplace,                                                                             \
        .forward = id##_forward,                                                                                    \
        .backward = id##_backward,                                                                                  \
        .gpu = MX_OP_GPU(id),                                                                                       \
    }

/* The op entry points around two kernels (forward, backward). */
#define UN_ENTRY(id, opname, fwd_kernel, bwd_kernel, KIND)                                                         \
    static mx_status id##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)             \
    {                                                                                                               \
        (void)p, (void)n_in, (void)n_out;                                                                           \
        return un_infer(opname, in, out);                                                                           \
    }                                                                                                               \
    static mx_status id##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,    \
                                  mx_tensor *out, mx_tensor *aux)                                                   \
    {                                                                                                               \
        (void)p, (void)aux;                                                                                         \
        if (req[0] == MX_REQ_NULL) return MX_OK;                                                                    \
        un_job j = {.x = in[0].data, .dst = out[0].data, .add = req[0] == MX_REQ_ADD, .kind = KIND,                 \
                    .level = mx_simd_level()};                                                                      \
        un_run(ctx, fwd_kernel, &j, mx_shape_size(&in[0].shape));                                                   \
        return MX_OK;                                                                                               \
    }                                                                                                               \
    static mx_status id##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,                \
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req,                    \
                                   mx_tensor *in_grad, mx_tensor *aux)                                              \
    {                                                                                                               \
        (void)p, (void)aux;                                                                                         \
        if (req[0] == MX_REQ_NULL) return MX_OK;                                                                    \
        un_job j = {.x = in[0].data, .y = out[0].data, .dy = out_grad[0].data, .dst = in_grad[0].data,              \
                    .add = req[0] == MX_REQ_ADD, .kind = KIND, .level = mx_simd_level()};                           \
        un_run(ctx, bwd_kernel, &j, mx_shape_size(&in_grad[0].shape));                                             \
        return MX_OK;                                                                                               \
    }

/* ------------------------------------------------------- the vector ops */

enum { UV_RELU, UV_SIGMOID, UV_TANH, UV_SOFTSIGN, UV_EXP, UV_EXPM1 };

/* Forward v = x; backward v = dy, u = y. relu keeps MXNet's forms (which
 * differ from Activation's): NaN stays NaN, else x > 0 ? x : 0, and the
 * gradient dy * (y > 0), NaN where y is. */
/* simd.h's exp saturates at 2.4e38 past x = 88.37, where expf goes on to
 * FLT_MAX and then inf (as MXNet's exp does): there, e^x = e^(x - c) e^c
 * with c = 0.693359375 (x - c is exact), within 2 ulp, inf past the range.
 * expm1 is e^x there too. */
#define UV_EXP_C 0.693359375f
#define UV_EXP_EC 2.00042443f /* e^c rounded to float */
#define UV_BIG(P, v, EXPR) P##_select(v > 88.0f, P##_exp(v - UV_EXP_C) * UV_EXP_EC, EXPR)

#define UV_KERNELS(P, W, TARGET)                                                                                    \
    TARGET static void uv_forward_##P(const un_job *j, int64_t lo, int64_t hi)                                     \
    {                                                                                                               \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        switch (j->kind) {                                                                                          \
        case UV_RELU:                                                                                               \
            MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, P##_select(v != v, v, P##_select(v > zero, v, zero)));  \
            break;                                                                                                  \
        case UV_SIGMOID: MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, P##_sigmoid(v)); break;                  \
        case UV_TANH: MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, P##_tanh(v)); break;                        \
        case UV_SOFTSIGN: MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, v / (1.0f + P##_abs(v))); break;        \
        case UV_EXP: MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, UV_BIG(P, v, P##_exp(v))); break;            \
        default: MX_SIMD_MAP1(P, W, j->x, j->dst, lo, hi, j->add, UV_BIG(P, v, P##_expm1(v))); break;              \
        }                                                                                                           \
        (void)zero;                                                                                                 \
    }                                                                                                               \
    TARGET static void uv_backward_##P(const un_job *j, int64_t lo, int64_t hi)                                    \
    {                                                                                                               \
        const P##_f zero = P##_splat(0.0f), one = P##_splat(1.0f);                                                  \
        const float *dy = j->dy, *y = j->y;                                                                         \
        switch (j->kind) {                                                                                          \
        case UV_RELU:                                                                                               \
            MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add,                                                       \
                         v * P##_select(u != u, u, P##_select(u > zero, one, zero)));                               \
            break;                                                                                                  \
        case UV_SIGMOID: MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add, v * (u * (1.0f - u))); break;           \
        case UV_TANH: MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add, v * (1.0f - u * u)); break;                \
        case UV_SOFTSIGN:                                                                                           \
            MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add, v * ((1.0f - P##_abs(u)) * (1.0f - P##_abs(u))));     \
            break;                                                                                                  \
        case UV_EXP: MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add, v * u); break;                              \
        default: MX_SIMD_MAP2(P, W, dy, y, j->dst, lo, hi, j->add, v * (u + 1.0f)); break;                         \
        }                                                                                                           \
    }

MX_SIMD_INSTANTIATE(UV_KERNELS)

static void uv_forward(const un_job *j, int64_t lo, int64_t hi) { MX_SIMD_DISPATCH(j->level, uv_forward, j, lo, hi); }
static void uv_backward(const un_job *j, int64_t lo, int64_t hi)
{
    MX_SIMD_DISPATCH(j->level, uv_backward, j, lo, hi);
}

/* softsign's derivative 1/(1+|x|)^2 is (1-|y|)^2, so all six read y. */
UN_ENTRY(relu, "relu", uv_forward, uv_backward, UV_RELU)
UN_ENTRY(sigmoid, "sigmoid", uv_forward, uv_backward, UV_SIGMOID)
UN_ENTRY(tanh, "tanh", uv_forward, uv_backward, UV_TANH)
UN_ENTRY(softsign, "softsign", uv_forward, uv_backward, UV_SOFTSIGN)
UN_ENTRY(exp, "exp", uv_forward, uv_backward, UV_EXP)
UN_ENTRY(expm1, "expm1", uv_forward, uv_backward, UV_EXPM1)

UN_DEF(relu, "relu", A("_sparse_relu", ), UG_OUT, "max(x, 0) element-wise.");
UN_DEF(sigmoid, "sigmoid", A("_sparse_sigmoid", ), UG_OUT, "1 / (1 + exp(-x)) element-wise.");
UN_DEF(tanh, "tanh", A("_sparse_tanh", ), UG_OUT, "Hyperbolic tangent element-wise.");
UN_DEF(softsign, "softsign", A(), UG_OUT, "x / (1 + |x|) element-wise.");
UN_DEF(exp, "exp", A("_sparse_exp", ), UG_OUT, "e^x element-wise.");
UN_DEF(expm1, "expm1", A("_sparse_expm1", ), UG_OUT, "e^x - 1 element-wise (accurate near 0).");

/* ------------------------------------------------------- the plain ops */

/* Per op: forward y = f(x); backward dx = dy * f'(x, y), or 0. */
#define UN_PLAIN_KERNELS(id, opname, aliases_, gkind, FWD, GRAD, docstr)                                           \
    static inline float id##_f(float a) { return FWD; }                                                            \
    static inline float id##_g(float a, float o)                                                                   \
    {                                                                                                               \
        (void)a, (void)o;                                                                                           \
        return GRAD;                                                                                                \
    }                                                                                                               \
    static void id##_fwd(const un_job *j, int64_t lo, int64_t hi)                                                  \
    {                                                                                                               \
        const float *x = j->x;                                                                                      \
        MX_SIMD_MAP(j->dst, lo, hi, j->add, id##_f(x[i]));                                                               \
    }                                                                                                               \
    static void id##_bwd(const un_job *j, int64_t lo, int64_t hi)                                                  \
    {                                                                                                               \
        const float *dy = j->dy, *x = j->x, *y = j->y;                                                              \
        float *dx = j->dst;                                                                                         \
        switch (gkind) {                                                                                            \
        case UG_IN: MX_SIMD_MAP(dx, lo, hi, j->add, dy[i] * id##_g(x[i], 0.0f)); break;                                  \
        case UG_OUT: MX_SIMD_MAP(dx, lo, hi, j->add, dy[i] * id##_g(0.0f, y[i])); break;                                 \
        case UG_CONST: MX_SIMD_MAP(dx, lo, hi, j->add, dy[i] * id##_g(0.0f, 0.0f)); break;                               \
        default:                                                                                                    \
            if (!j->add)                                                                                            \
                for (int64_t i = lo; i < hi; i++) dx[i] = 0.0f;                                                     \
            break;                                                                                                  \
        }                                                                                                           \
    }                                                                                                               \
    UN_ENTRY(id, opname, id##_fwd, id##_bwd, 0)                                                                     \
    UN_DEF(id, opname, aliases_, gkind, docstr);

UNARY_PLAIN(UN_PLAIN_KERNELS)

/* ------------------------------------------------------- hard_sigmoid */


static const mx_param_desc hsig_param_table[] = {
    {"alpha", MX_PARAM_FLOAT, "0.2", 1, 0, NULL, offsetof(hsig_params, alpha), "slope"},
    {"beta", MX_PARAM_FLOAT, "0.5", 1, 0, NULL, offsetof(hsig_params, beta), "intercept"},
};

static void hsig_fwd(const un_job *j, int64_t lo, int64_t hi)
{
    const float *x = j->x, al = j->alpha, be = j->beta;
    MX_SIMD_MAP(j->dst, lo, hi, j->add, fminf(fmaxf(al * x[i] + be, 0.0f), 1.0f));
}

static void hsig_bwd(const un_job *j, int64_t lo, int64_t hi)
{
    const float *x = j->x, *dy = j->dy, al = j->alpha, be = j->beta;
    MX_SIMD_MAP(j->dst, lo, hi, j->add, al * x[i] + be > 0.0f && al * x[i] + be < 1.0f ? dy[i] * al : 0.0f);
}

static mx_status hard_sigmoid_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    return un_infer("hard_sigmoid", in, out);
}

static mx_status hard_sigmoid_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                      mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const hsig_params *hp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    un_job j = {.x = in[0].data, .dst = out[0].data, .add = req[0] == MX_REQ_ADD, .alpha = (float)hp->alpha,
                .beta = (float)hp->beta};
    un_run(ctx, hsig_fwd, &j, mx_shape_size(&in[0].shape));
    return MX_OK;
}

static mx_status hard_sigmoid_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                       const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                       mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const hsig_params *hp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    un_job j = {.x = in[0].data, .dy = out_grad[0].data, .dst = in_grad[0].data, .add = req[0] == MX_REQ_ADD,
                .alpha = (float)hp->alpha, .beta = (float)hp->beta};
    un_run(ctx, hsig_bwd, &j, mx_shape_size(&in_grad[0].shape));
    return MX_OK;
}

MX_OP_GPU_DECLARE(hard_sigmoid);

const mx_op_def mx_op_hard_sigmoid = {
    .name = "hard_sigmoid",
    .doc = "clip(alpha * x + beta, 0, 1) element-wise.",
    .params = hsig_param_table,
    .n_params = (int)(sizeof(hsig_param_table) / sizeof(hsig_param_table[0])),
    .params_size = sizeof(hsig_params),
    .list_inputs = un_list_inputs,
    .list_outputs = un_list_outputs,
    .infer_shape = hard_sigmoid_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward_inplace = un_inplace,
    .backward_inplace = un_inplace,
    .forward = hard_sigmoid_forward,
    .backward = hard_sigmoid_backward,
    .gpu = MX_OP_GPU(hard_sigmoid),
};
