/*
 * unary_math.h - what unary_math.c (CPU) and unary_math.cu (GPU) share:
 * the table of the plain element-wise ops (name, gradient kind, f(a) and
 * f'(a, o) as expressions), the helpers those expressions call (host and
 * device alike under nvcc), and hard_sigmoid's parameters.
 */
#ifndef MX_OPS_UNARY_MATH_H
#define MX_OPS_UNARY_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define UN_HD __host__ __device__
#else
#define UN_HD
#endif

/* What backward reads besides out_grad. */
enum { UG_IN, UG_OUT, UG_CONST, UG_ZERO };

typedef struct hsig_params {
    double alpha, beta;
} hsig_params;

UN_HD static inline float un_sign(float a) { return a > 0.0f ? 1.0f : a < 0.0f ? -1.0f : 0.0f; }

/* MXNet's rint: the nearer of floor and ceil, floor on a tie (so 2.5 -> 2
 * and -2.5 -> -3, unlike C's rint). */
UN_HD static inline float un_rint(float a)
{
    float f = floorf(a), c = ceilf(a);
    return a - f <= c - a ? f : c;
}

#define PI_F 3.14159265358979323846f

/* libm has neither digamma nor erfinv; both are computed in double. */

/* psi(x) = d/dx log gamma(x): recurrence up to x >= 6, then the asymptotic
 * series; reflection below 0. Poles (0, -1, ...) give +inf as MXNet's
 * (Cephes') psi does. */
UN_HD static inline double un_digamma(double x)
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
UN_HD static inline double un_erfinv(double y)
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

/* lgammaf without the global signgam (threads call it at once); CUDA's
 * lgammaf on the device. */
#ifdef __CUDACC__
__device__ static inline float un_lgamma(float a) { return lgammaf(a); }
#else
static inline float un_lgamma(float a)
{
    int sign;
    return lgammaf_r(a, &sign);
}
#endif

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

#endif /* MX_OPS_UNARY_MATH_H */
