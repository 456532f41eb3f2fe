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
#include "ops/simd.h"

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

/* What backward reads besides out_grad. */
enum { UG_IN, UG_OUT, UG_CONST, UG_ZERO };

/* A constant expression (an array element is not one for clang, which
 * builds the fuzzers). */
#define UN_DEPS(kind)                                                                                                  \
    ((kind) == UG_IN    ? (MX_BWD_OUT_GRAD | MX_BWD_IN_DATA)                                                           \
     : (kind) == UG_OUT ? (MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA)                                                          \
                        : MX_BWD_OUT_GRAD)

static const mx_inplace un_inplace[] = {{0, 0}, {-1, -1}};

#define A(...) ((const char *const[]){__VA_ARGS__ NULL})

#define UN_DEF(id, opname, aliases_, gkind, docstr)                                                                \
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

static inline float un_sign(float a) { return a > 0.0f ? 1.0f : a < 0.0f ? -1.0f : 0.0f; }

/* MXNet's rint: the nearer of floor and ceil, floor on a tie (so 2.5 -> 2
 * and -2.5 -> -3, unlike C's rint). */
static inline float un_rint(float a)
{
    float f = floorf(a), c = ceilf(a);
    return a - f <= c - a ? f : c;
}

#define PI_F 3.14159265358979323846f

/* libm has neither digamma nor erfinv; both are computed in double. */

/* psi(x) = d/dx log gamma(x): recurrence up to x >= 6, then the asymptotic
 * series; reflection below 0. Poles (0, -1, ...) give +inf as MXNet's
 * (Cephes') psi does. */
static double un_digamma(double x)
{
    if (x <= 0 && x == floor(x)) return INFINITY;
    double r = 0;
    if (x < 0) {
        r = -3.14159265358979323846 / tan(3.14159265358979323846 * x);
        x = 1 - x;
    }
    for (; x < 6; x += 1) r -= 1 / x;
    double f = 1 / (x * x);
    return r + log(x) - 0.5 / x - f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}

/* erf^-1(y): Giles' single-precision approximation ("Approximating the
 * erfinv function", 2010), then two Newton steps on erf in double. */
static double un_erfinv(double y)
{
    if (!(y > -1 && y < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
    double w = -log((1 - y) * (1 + y)), p;
    if (w < 5) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double x = p * y;
    for (int i = 0; i < 2; i++) x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
    return x;
}

/* lgammaf without the global signgam (threads call it at once). */
static inline float un_lgamma(float a)
{
    int sign;
    return lgammaf_r(a, &sign);
}

/* id, MXNet name, aliases, gradient kind, f(a), f'(a, o) (a = x, o = y). */
#define UNARY_PLAIN(X)                                                                                              \
    X(log, "log", A("_sparse_log", ), UG_IN, logf(a), 1.0f / a, "Natural logarithm element-wise.")                 \
    X(log2, "log2", A("_sparse_log2", ), UG_IN, log2f(a), 1.0f / (a * 0.693147180559945309f),                      \
      "Base-2 logarithm element-wise.")                                                                             \
    X(log10, "log10", A("_sparse_log10", ), UG_IN, log10f(a), 1.0f / (a * 2.30258509299404568f),                   \
      "Base-10 logarithm element-wise.")                                                                            \
    X(log1p, "log1p", A("_sparse_log1p", ), UG_IN, log1pf(a), 1.0f / (1.0f + a),                                   \
      "log(1 + x) element-wise (accurate near 0).")                                                                 \
    X(sqrt, "sqrt", A("_sparse_sqrt", ), UG_OUT, sqrtf(a), 0.5f / o, "Square root element-wise.")                  \
    X(rsqrt, "rsqrt", A("_sparse_rsqrt", ), UG_IN, 1.0f / sqrtf(a), -0.5f / (a * sqrtf(a)),                        \
      "1 / sqrt(x) element-wise.")                                                                                  \
    X(cbrt, "cbrt", A("_sparse_cbrt", ), UG_OUT, cbrtf(a), 1.0f / (3.0f * o * o), "Cube root element-wise.")       \
    X(rcbrt, "rcbrt", A(), UG_IN, 1.0f / cbrtf(a), -1.0f / (3.0f * a * cbrtf(a)), "1 / cbrt(x) element-wise.")      \
    X(square, "square", A("_sparse_square", ), UG_IN, a * a, 2.0f * a, "x^2 element-wise.")                        \
    X(abs, "abs", A("_sparse_abs", ), UG_IN, fabsf(a), un_sign(a), "|x| element-wise.")                            \
    X(negative, "negative", A("_sparse_negative", ), UG_CONST, -a, -1.0f, "-x element-wise.")                      \
    X(reciprocal, "reciprocal", A(), UG_IN, 1.0f / a, -1.0f / (a * a), "1 / x element-wise.")                      \
    X(sign, "sign", A("_sparse_sign", ), UG_ZERO, un_sign(a), 0.0f, "-1, 0 or 1 by the sign of x.")                \
    X(floor, "floor", A("_sparse_floor", ), UG_ZERO, floorf(a), 0.0f, "Largest integer <= x.")                     \
    X(ceil, "ceil", A("_sparse_ceil", ), UG_ZERO, ceilf(a), 0.0f, "Smallest integer >= x.")                        \
    X(round, "round", A("_sparse_round", ), UG_ZERO, roundf(a), 0.0f, "Nearest integer, ties away from zero.")     \
    X(rint, "rint", A("_sparse_rint", ), UG_ZERO, un_rint(a), 0.0f, "Nearest integer, ties toward -inf (MXNet).")  \
    X(fix, "fix", A("_sparse_fix", ), UG_ZERO, truncf(a), 0.0f, "Rounds toward zero.")                              \
    X(trunc, "trunc", A("_sparse_trunc", ), UG_ZERO, truncf(a), 0.0f, "Integer part (rounds toward zero).")        \
    X(logical_not, "logical_not", A(), UG_ZERO, a == 0.0f ? 1.0f : 0.0f, 0.0f, "1 where x is 0, else 0.")          \
    X(erf, "erf", A("_npx_erf", ), UG_IN, erff(a), 1.12837916709551257f * expf(-a * a), "Gauss error function.")   \
    X(erfinv, "erfinv", A("_npx_erfinv", ), UG_OUT, (float)un_erfinv(a), 0.886226925452758014f * expf(o * o),        \
      "Inverse error function.")                                                                                    \
    X(gamma, "gamma", A("_npx_gamma", "_sparse_gamma", ), UG_IN, tgammaf(a), (float)(tgamma(a) * un_digamma(a)),    \
      "Gamma function.")                                                                                            \
    X(gammaln, "gammaln", A("_npx_gammaln", "_sparse_gammaln", ), UG_IN, un_lgamma(a), (float)un_digamma(a),        \
      "log |gamma(x)|.")                                                                                            \
    X(sin, "sin", A("_sparse_sin", ), UG_IN, sinf(a), cosf(a), "Sine element-wise.")                                \
    X(cos, "cos", A("_sparse_cos", ), UG_IN, cosf(a), -sinf(a), "Cosine element-wise.")                            \
    X(tan, "tan", A("_sparse_tan", ), UG_OUT, tanf(a), 1.0f + o * o, "Tangent element-wise.")                       \
    X(arcsin, "arcsin", A("_sparse_arcsin", ), UG_IN, asinf(a), 1.0f / sqrtf(1.0f - a * a), "Inverse sine.")       \
    X(arccos, "arccos", A("_sparse_arccos", ), UG_IN, acosf(a), -1.0f / sqrtf(1.0f - a * a), "Inverse cosine.")    \
    X(arctan, "arctan", A("_sparse_arctan", ), UG_IN, atanf(a), 1.0f / (1.0f + a * a), "Inverse tangent.")         \
    X(sinh, "sinh", A("_sparse_sinh", ), UG_IN, sinhf(a), coshf(a), "Hyperbolic sine.")                             \
    X(cosh, "cosh", A("_sparse_cosh", ), UG_IN, coshf(a), sinhf(a), "Hyperbolic cosine.")                           \
    X(arcsinh, "arcsinh", A("_sparse_arcsinh", ), UG_IN, asinhf(a), 1.0f / sqrtf(a * a + 1.0f),                    \
      "Inverse hyperbolic sine.")                                                                                   \
    X(arccosh, "arccosh", A("_sparse_arccosh", ), UG_IN, acoshf(a), 1.0f / sqrtf(a * a - 1.0f),                    \
      "Inverse hyperbolic cosine.")                                                                                 \
    X(arctanh, "arctanh", A("_sparse_arctanh", ), UG_IN, atanhf(a), 1.0f / (1.0f - a * a),                         \
      "Inverse hyperbolic tangent.")                                                                                \
    X(degrees, "degrees", A("_sparse_degrees", ), UG_CONST, a * (180.0f / PI_F), 180.0f / PI_F,                    \
      "Radians to degrees.")                                                                                        \
    X(radians, "radians", A("_sparse_radians", ), UG_CONST, a * (PI_F / 180.0f), PI_F / 180.0f,                    \
      "Degrees to radians.")

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

typedef struct hsig_params {
    double alpha, beta;
} hsig_params;

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
};
