/* test_op_elemwise_scalar.c - the six array-scalar operators (and their
 * legacy aliases) against a float64 reference. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[6] = {"_plus_scalar", "_minus_scalar", "_rminus_scalar",
                                     "_mul_scalar",  "_div_scalar",   "_rdiv_scalar"};
static const char *const legacy[6] = {"_PlusScalar", "_MinusScalar", "_RMinusScalar",
                                      "_MulScalar",  "_DivScalar",   "_RDivScalar"};
static int g_kind;

static void scalar_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_op_def *op = mx_op_find(names[g_kind]);
    double s = *(const double *)((const char *)params + mx_op_param(op, "scalar")->offset);
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) {
        double x = in[0][i];
        switch (g_kind) {
        case 0: out[0][i] = x + s; break;
        case 1: out[0][i] = x - s; break;
        case 2: out[0][i] = s - x; break;
        case 3: out[0][i] = x * s; break;
        case 4: out[0][i] = x / s; break;
        default: out[0][i] = s / x; break;
        }
    }
}

/* Values in +-[0.5, 2): s / x stays tame. */
static void init(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

static void run(const char *name, int kind, const char *scalar, mx_shape shape, uint64_t seed)
{
    g_kind = kind;
    const char *keys[] = {"scalar"}, *values[] = {scalar};
    opcheck_case c = {.op = name, .keys = keys, .values = values, .n_params = scalar ? 1 : 0, .ref = scalar_ref,
                      .init = init, .seed = seed};
    c.in_shapes[0] = shape;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    for (int k = 0; k < 6; k++) {
        uint64_t s = 10 * (uint64_t)k;
        run(names[k], k, "2.5", MX_SHAPE(4, 7), s + 1);
        run(names[k], k, "-0.75", MX_SHAPE(3, 2, 5), s + 2);
        run(names[k], k, NULL, MX_SHAPE(1), s + 3); /* default scalar 1 */
        run(legacy[k], k, "3", MX_SHAPE(17, 3), s + 4);
    }
}
END_TEST

START_TEST(names_params_and_in_place)
{
    for (int k = 0; k < 6; k++) {
        const mx_op_def *op = mx_op_find(names[k]);
        ck_assert_ptr_nonnull(op);
        ck_assert_ptr_eq(mx_op_find(legacy[k]), op);
        _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
        const char *kk[] = {"scalar", "is_int"}, *vv[] = {"4", "False"};
        ck_assert_int_eq(mx_op_parse_params(op, kk, vv, 2, params), MX_OK);
        const char *k2[] = {"scalar"}, *v2[] = {"four"};
        ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), names[k]));
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "parameter 'scalar' has bad value 'four'"));
        const char *k3[] = {"scaler"}, *v3[] = {"4"};
        ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 1, params), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'scalar'"));
        /* in place forward and backward */
        ck_assert_int_eq(mx_op_parse_params(op, kk, vv, 2, params), MX_OK);
        float x[3] = {1, 2, 4}, keep[3] = {1, 2, 4}, dy[3] = {1, 1, 1};
        mx_tensor t = {x, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0}, tk = {keep, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
        mx_tensor g = {dy, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
        mx_exec_ctx exec = {.ctx = mx_cpu()};
        mx_op_ctx ctx = {.exec = &exec};
        mx_req req[1] = {MX_REQ_INPLACE};
        ck_assert_int_eq(op->forward(&ctx, params, &t, req, &t, NULL), MX_OK);
        const float want[6][3] = {{5, 6, 8}, {-3, -2, 0}, {3, 2, 0}, {4, 8, 16}, {0.25f, 0.5f, 1}, {4, 2, 1}};
        for (int i = 0; i < 3; i++) ck_assert_msg(x[i] == want[k][i], "%s: x[%d] = %g", names[k], i, x[i]);
        ck_assert_int_eq(op->backward(&ctx, params, &g, &tk, &t, req, &g, NULL), MX_OK);
        const float wg[6][3] = {{1, 1, 1}, {1, 1, 1}, {-1, -1, -1}, {4, 4, 4}, {0.25f, 0.25f, 0.25f},
                                {-4, -1, -0.25f}};
        for (int i = 0; i < 3; i++) ck_assert_msg(dy[i] == wg[k][i], "%s: dx[%d] = %g", names[k], i, dy[i]);
    }
}
END_TEST

/* ------------------------------------------------------- issue 17 */

static const char *const more[16] = {"_power_scalar",     "_rpower_scalar",        "_maximum_scalar",
                                     "_minimum_scalar",   "_mod_scalar",           "_rmod_scalar",
                                     "_hypot_scalar",     "_equal_scalar",         "_not_equal_scalar",
                                     "_greater_scalar",   "_greater_equal_scalar", "_lesser_scalar",
                                     "_lesser_equal_scalar", "_logical_and_scalar", "_logical_or_scalar",
                                     "_logical_xor_scalar"};
static const char *const more_legacy[16] = {"_PowerScalar",      "_RPowerScalar",      "_MaximumScalar",
                                            "_MinimumScalar",    "_ModScalar",         "_RModScalar",
                                            "_HypotScalar",      "_EqualScalar",       "_NotEqualScalar",
                                            "_GreaterScalar",    "_GreaterEqualScalar", "_LesserScalar",
                                            "_LesserEqualScalar", "_LogicalAndScalar", "_LogicalOrScalar",
                                            "_LogicalXorScalar"};

/* Python's a % b. */
static double py_mod(double a, double b)
{
    if (b == 0) return 0;
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

static double more_f(int kind, double x, double s)
{
    switch (kind) {
    case 0: return pow(x, s);
    case 1: return pow(s, x);
    case 2: return x > s ? x : s;
    case 3: return x < s ? x : s;
    case 4: return py_mod(x, s);
    case 5: return py_mod(s, x);
    case 6: return hypot(x, s);
    case 7: return x == s;
    case 8: return x != s;
    case 9: return x > s;
    case 10: return x >= s;
    case 11: return x < s;
    case 12: return x <= s;
    case 13: return x != 0 && s != 0;
    case 14: return x != 0 || s != 0;
    default: return (x != 0) != (s != 0);
    }
}

static int g_more;

static void more_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_op_def *op = mx_op_find(more[g_more]);
    double s = (float)*(const double *)((const char *)params + mx_op_param(op, "scalar")->offset);
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = more_f(g_more, in[0][i], s);
}

/* Positive data for the powers (x^s with non-integer s, s^x's gradient
 * log(s)), else +-[0.5, 2): the kinks at x = s and mod's jumps are far
 * from every drawn point with these seeds. */
static void more_init(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        data[i] = (float)(g_more > 1 && opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

START_TEST(more_scalar_ops_against_reference)
{
    const char *scalars[] = {"2.5", "0.75", "-1.25", "3"};
    for (int k = 0; k < 16; k++) {
        for (int j = 0; j < 4; j++) {
            if (k == 1 && scalars[j][0] == '-') continue; /* s^x needs s > 0 */
            g_more = k;
            const char *keys[] = {"scalar", "is_int"}, *values[] = {scalars[j], j == 3 ? "True" : "False"};
            opcheck_case c = {.op = j == 1 ? more_legacy[k] : more[k], .keys = keys, .values = values, .n_params = 2,
                              .ref = more_ref, .init = more_init,
                              .seed = 0x9E3779B97F4A7C15ull * (uint64_t)(16 * j + k + 1)};
            bool big = j == 2 && k % 4 == 0; /* split across opcheck's threads */
            c.in_shapes[0] = big ? MX_SHAPE(5, 4001) : MX_SHAPE(3, 7);
            c.max_points = big ? 24 : 0;
            opcheck_run(&c);
        }
    }
}
END_TEST

/* y and dx (dy = 1) from MXNet 1.9.1 (CPU) over
 * x = [1, 2, 3, -3, 0, -2.5, 0.5, -1.5], made with
 * `y = getattr(mx.nd._internal, op)(x, scalar=s); y.backward()` under
 * mx.autograd.record(), printed with %.9g. */
static const struct {
    const char *name;
    float s, y[8], dx[8];
} mxnet_ref[] = {
    {"_power_scalar", 2, {1, 4, 9, 9, 0, 6.25, 0.25, 2.25}, {2, 4, 6, -6, 0, -5, 1, -3}},
    {"_rpower_scalar", 2, {2, 4, 8, 0.125, 1, 0.176776692, 1.41421354, 0.353553385}, {1.38629436, 2.77258873, 5.54517746, 0.0866433978, 0.693147182, 0.122532263, 0.980258107, 0.245064527}},
    {"_maximum_scalar", 2, {2, 2, 3, 2, 2, 2, 2, 2}, {0, 1, 1, 0, 0, 0, 0, 0}},
    {"_minimum_scalar", 2, {1, 2, 2, -3, 0, -2.5, 0.5, -1.5}, {1, 1, 0, 1, 1, 1, 1, 1}},
    {"_mod_scalar", 2, {1, 0, 1, 1, 0, 1.5, 0.5, 0.5}, {1, 1, 1, 1, 1, 1, 1, 1}},
    {"_rmod_scalar", 2, {0, 0, 2, -1, 0, -0.5, 0, -1}, {-2, -1, -0, 1, -INFINITY, 1, -4, 2}},
    {"_hypot_scalar", 2, {2.23606801, 2.82842708, 3.60555124, 3.60555124, 2, 3.20156217, 2.06155276, 2.5}, {0.44721359, 0.707106769, 0.832050323, -0.832050323, 0, -0.780868769, 0.242535636, -0.600000024}},
    {"_equal_scalar", 2, {0, 1, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_not_equal_scalar", 2, {1, 0, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_greater_scalar", 2, {0, 0, 1, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_greater_equal_scalar", 2, {0, 1, 1, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_lesser_scalar", 2, {1, 0, 0, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_lesser_equal_scalar", 2, {1, 1, 0, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_and_scalar", 2, {1, 1, 1, 1, 0, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_or_scalar", 2, {1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_xor_scalar", 2, {0, 0, 0, 0, 1, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_power_scalar", -1.5, {1, 0.353553385, 0.192450091, NAN, INFINITY, NAN, 2.82842708, NAN}, {-1.5, -0.265165031, -0.0962250382, NAN, -INFINITY, NAN, -8.48528099, NAN}},
    {"_maximum_scalar", -1.5, {1, 2, 3, -1.5, 0, -1.5, 0.5, -1.5}, {1, 1, 1, 0, 1, 0, 1, 1}},
    {"_minimum_scalar", -1.5, {-1.5, -1.5, -1.5, -3, -1.5, -2.5, -1.5, -1.5}, {0, 0, 0, 1, 0, 1, 0, 1}},
    {"_mod_scalar", -1.5, {-0.5, -1, 0, -0, 0, -1, -1, -0}, {1, 1, 1, 1, 1, 1, 1, 1}},
    {"_rmod_scalar", -1.5, {0.5, 0.5, 1.5, -1.5, 0, -1.5, 0, -0}, {2, 1, 1, -0, INFINITY, -0, 3, -1}},
    {"_hypot_scalar", -1.5, {1.80277562, 2.5, 3.3541019, 3.3541019, 1.5, 2.91547585, 1.58113885, 2.12132025}, {0.554700196, 0.800000012, 0.89442718, -0.89442718, 0, -0.857492983, 0.316227764, -0.707106829}},
    {"_equal_scalar", -1.5, {0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_not_equal_scalar", -1.5, {1, 1, 1, 1, 1, 1, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_greater_scalar", -1.5, {1, 1, 1, 0, 1, 0, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_greater_equal_scalar", -1.5, {1, 1, 1, 0, 1, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_lesser_scalar", -1.5, {0, 0, 0, 1, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_lesser_equal_scalar", -1.5, {0, 0, 0, 1, 0, 1, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_and_scalar", -1.5, {1, 1, 1, 1, 0, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_or_scalar", -1.5, {1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},
    {"_logical_xor_scalar", -1.5, {0, 0, 0, 0, 1, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}},
};

static bool same(float got, float want)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabsf(got - want) <= 1e-7f + 1e-6f * fabsf(want);
}

START_TEST(more_scalar_ops_match_mxnet)
{
    for (size_t k = 0; k < sizeof(mxnet_ref) / sizeof(mxnet_ref[0]); k++) {
        const mx_op_def *op = mx_op_find(mxnet_ref[k].name);
        ck_assert_ptr_nonnull(op);
        _Alignas(16) char params[64];
        char sv[32];
        snprintf(sv, sizeof(sv), "%g", mxnet_ref[k].s);
        const char *keys[] = {"scalar"}, *values[] = {sv};
        ck_assert_int_eq(mx_op_parse_params(op, keys, values, 1, params), MX_OK);
        float x[8] = {1, 2, 3, -3, 0, -2.5f, 0.5f, -1.5f}, y[8], dy[8] = {1, 1, 1, 1, 1, 1, 1, 1}, dx[8];
        mx_tensor tx = {x, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0}, ty = {y, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0};
        mx_tensor tdy = {dy, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0}, tdx = {dx, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0};
        mx_exec_ctx exec = {.ctx = mx_cpu()};
        mx_op_ctx ctx = {.exec = &exec};
        mx_req req[1] = {MX_REQ_WRITE};
        ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
        ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(same(y[i], mxnet_ref[k].y[i]) && same(dx[i], mxnet_ref[k].dx[i]),
                          "%s(%g, scalar=%g) = %.9g, d = %.9g; MXNet %.9g, %.9g", mxnet_ref[k].name, x[i],
                          mxnet_ref[k].s, y[i], dx[i], mxnet_ref[k].y[i], mxnet_ref[k].dx[i]);
    }
    /* NaN in data: maximum and minimum keep it (MXNet 1.9.1). */
    const mx_op_def *op = mx_op_find("_maximum_scalar");
    _Alignas(16) char params[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    float x[1] = {NAN}, y[1];
    mx_tensor tx = {x, MX_SHAPE(1), MX_FLOAT32, mx_cpu(), 0}, ty = {y, MX_SHAPE(1), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert(isnan(y[0]));
}
END_TEST

START_TEST(more_scalar_names_and_params)
{
    const char *extra[][2] = {{"_npi_maximum_scalar", "_maximum_scalar"},
                              {"_npi_minimum_scalar", "_minimum_scalar"},
                              {"_npi_hypot_scalar", "_hypot_scalar"}};
    for (int k = 0; k < 3; k++) ck_assert_ptr_eq(mx_op_find(extra[k][0]), mx_op_find(extra[k][1]));
    for (int k = 0; k < 16; k++) {
        const mx_op_def *op = mx_op_find(more[k]);
        ck_assert_ptr_nonnull(op);
        ck_assert_str_eq(op->name, more[k]);
        ck_assert_ptr_eq(mx_op_find(more_legacy[k]), op);
        /* MXNet 1.9.1's parameters: scalar (default 1) and is_int (default True). */
        ck_assert_int_eq(op->n_params, 2);
        ck_assert_str_eq(mx_op_param(op, "scalar")->default_value, "1");
        ck_assert_str_eq(mx_op_param(op, "is_int")->default_value, "True");
        _Alignas(16) char params[64];
        const char *k1[] = {"scalar"}, *v1[] = {"two"};
        ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), more[k]));
        mx_shape in[1] = {{0}}, out[1];
        ck_assert_int_eq(op->infer_shape(params, in, 1, out, 1), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "unknown"));
    }
}
END_TEST

static double g_sigma;

static void sl1_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    double b2 = g_sigma * g_sigma, t = 1 / b2;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) {
        double x = in[0][i];
        out[0][i] = fabs(x) <= t ? 0.5 * x * x * b2 : fabs(x) - 0.5 * t;
    }
}

START_TEST(smooth_l1_against_reference_and_mxnet)
{
    const char *sig[] = {"2", "0.8"};
    for (int k = 0; k < 2; k++) {
        g_sigma = atof(sig[k]);
        const char *keys[] = {"scalar"}, *values[] = {sig[k]};
        opcheck_case c = {.op = k ? "_npx_smooth_l1" : "smooth_l1", .keys = keys, .values = values, .n_params = 1,
                          .ref = sl1_ref, .seed = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 5)};
        c.in_shapes[0] = MX_SHAPE(6, 7);
        opcheck_run(&c);
    }
    /* MXNet 1.9.1: smooth_l1(x, scalar=2) and its gradient for dy = 1 (the
     * boundary |x| = 1/4 takes the quadratic branch). */
    const mx_op_def *op = mx_op_find("smooth_l1");
    _Alignas(16) char params[64];
    const char *keys[] = {"scalar"}, *values[] = {"2"};
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, 1, params), MX_OK);
    float x[8] = {-2, -0.5f, -0.25f, 0, 0.1f, 0.25f, 1, 3}, y[8], dy[8] = {1, 1, 1, 1, 1, 1, 1, 1}, dx[8];
    const float wy[8] = {1.875f, 0.375f, 0.125f, 0, 0.0200000014f, 0.125f, 0.875f, 2.875f};
    const float wdx[8] = {-1, -1, -1, 0, 0.400000006f, 1, 1, 1};
    mx_tensor tx = {x, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0}, ty = {y, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor tdy = {dy, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0}, tdx = {dx, MX_SHAPE(8), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(same(y[i], wy[i]) && same(dx[i], wdx[i]), "smooth_l1(%g) = %g, d = %g", x[i], y[i], dx[i]);
    ck_assert_ptr_eq(mx_op_param(op, "is_int"), NULL); /* MXNet's smooth_l1 has only scalar */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_elemwise_scalar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, names_params_and_in_place);
    tcase_add_test(tc, more_scalar_ops_against_reference);
    tcase_add_test(tc, more_scalar_ops_match_mxnet);
    tcase_add_test(tc, more_scalar_names_and_params);
    tcase_add_test(tc, smooth_l1_against_reference_and_mxnet);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
