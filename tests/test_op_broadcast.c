/*
 * test_op_broadcast.c - the two-operand family on binary_math.h: the
 * broadcast_* ops (NumPy broadcasting, gradients reduced over broadcast
 * axes) and the equal-shape _maximum, _power, _equal, ... added beside
 * elemwise_add. Each against a float64 reference with its own index
 * arithmetic, backward against finite differences (opcheck), MXNet 1.9.1's
 * numbers, shape rules and errors, names and aliases.
 */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kinds in binary_math.h's order after add, sub, mul, div. */
static const char *const kinds[] = {"add",     "sub",     "mul",     "div",           "power",  "maximum",
                                    "minimum", "mod",     "hypot",   "equal",         "not_equal", "greater",
                                    "greater_equal", "lesser", "lesser_equal", "logical_and", "logical_or",
                                    "logical_xor"};
#define N_KINDS 18

static double py_mod(double a, double b)
{
    if (b == 0) return 0;
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

static double ref_f(int k, double a, double b)
{
    switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return pow(a, b);
    case 5: return a > b ? a : b;
    case 6: return a < b ? a : b;
    case 7: return py_mod(a, b);
    case 8: return hypot(a, b);
    case 9: return a == b;
    case 10: return a != b;
    case 11: return a > b;
    case 12: return a >= b;
    case 13: return a < b;
    case 14: return a <= b;
    case 15: return a != 0 && b != 0;
    case 16: return a != 0 || b != 0;
    default: return (a != 0) != (b != 0);
    }
}

static int g_kind;

/* Output element -> operand element, NumPy's way: align from the right,
 * size-1 axes repeat. */
static int64_t operand_index(const mx_shape *o, const mx_shape *s, int64_t flat)
{
    int64_t idx = 0, stride = 1;
    for (int k = o->ndim - 1, ks = s->ndim - 1; k >= 0; k--, ks--) {
        int64_t ik = flat % o->dims[k];
        flat /= o->dims[k];
        if (ks < 0) continue;
        if (s->dims[ks] != 1) idx += ik * stride;
        stride *= s->dims[ks];
    }
    return idx;
}

static void bc_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)params;
    int64_t n = mx_shape_size(&out_shapes[0]);
    for (int64_t i = 0; i < n; i++)
        out[0][i] = ref_f(g_kind, in[0][operand_index(&out_shapes[0], &in_shapes[0], i)],
                          in[1][operand_index(&out_shapes[0], &in_shapes[1], i)]);
}

/* +-[0.5, 2); power's base positive and its exponent in [-1.5, 1.5). */
static void bc_init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        if (g_kind == 4) data[i] = (float)(index == 0 ? v : opcheck_uniform(rng, -1.5, 1.5));
        else data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

static void run(const char *op, int kind, mx_shape l, mx_shape r, int max_points, uint64_t seed)
{
    g_kind = kind;
    opcheck_case c = {.op = op, .ref = bc_ref, .init = bc_init, .max_points = max_points,
                      .seed = 0x9E3779B97F4A7C15ull * seed + 0x5bd1e995ull};
    c.in_shapes[0] = l;
    c.in_shapes[1] = r;
    opcheck_run(&c);
}

START_TEST(broadcast_ops_against_reference)
{
    const struct {
        mx_shape l, r;
    } pairs[] = {
        {MX_SHAPE(2, 1, 3), MX_SHAPE(1, 4, 1)}, /* both broadcast */
        {MX_SHAPE(4, 3), MX_SHAPE(3)},          /* rank mismatch, aligned right */
        {MX_SHAPE(5), MX_SHAPE(2, 5)},
        {MX_SHAPE(2, 3), MX_SHAPE(2, 3)},       /* no broadcasting */
        {MX_SHAPE(1, 1), MX_SHAPE(3, 4)},       /* a single element */
        {MX_SHAPE(2, 3, 4, 5), MX_SHAPE(1, 3, 1, 5)},
        {MX_SHAPE(3, 1), MX_SHAPE(1)},
        {MX_SHAPE(1, 3, 1), MX_SHAPE(2, 3, 4)}, /* rows of several outer indices reduce into one element */
        {MX_SHAPE(2, 3, 4), MX_SHAPE(3, 1)},
    };
    char name[64];
    for (int k = 0; k < N_KINDS; k++) {
        snprintf(name, sizeof(name), "broadcast_%s", kinds[k]);
        /* comparisons share every code path but the element math: three pairs */
        size_t n_pairs = k < 9 ? sizeof(pairs) / sizeof(pairs[0]) : 3;
        for (size_t p = 0; p < n_pairs; p++) run(name, k, pairs[p].l, pairs[p].r, 32, 100 * (uint64_t)k + p + 1);
    }
}
END_TEST

/* Big enough to split across opcheck's pool: forward always, backward
 * where no gradient is reduced. */
START_TEST(large_broadcasts_split_across_threads)
{
    run("broadcast_mul", 2, MX_SHAPE(64, 300), MX_SHAPE(64, 300), 8, 1);
    run("broadcast_mul", 2, MX_SHAPE(64, 300), MX_SHAPE(1, 300), 8, 2);
    run("broadcast_add", 0, MX_SHAPE(300), MX_SHAPE(64, 1), 8, 3);
    run("broadcast_maximum", 5, MX_SHAPE(2, 40, 300), MX_SHAPE(40, 1), 8, 4);
}
END_TEST

START_TEST(equal_shape_ops_against_reference)
{
    char name[64];
    for (int k = 4; k < N_KINDS; k++) {
        snprintf(name, sizeof(name), "_%s", kinds[k]);
        run(name, k, MX_SHAPE(3, 7), MX_SHAPE(3, 7), 0, 7 + (uint64_t)k);
        /* one operand's shape unknown: taken from the other */
        run(name, k, MX_SHAPE(4, 5), (mx_shape){0}, 0, 70 + (uint64_t)k);
    }
    run("_power", 4, MX_SHAPE(5, 4001), MX_SHAPE(5, 4001), 8, 99); /* split across threads */
}
END_TEST

static bool same(float got, float want)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabsf(got - want) <= 1e-7f + 2e-6f * fabsf(want);
}

/* Forward + backward with dy = 1 on given operands. */
static void run_ones(const char *name, const float *a, mx_shape sa, const float *b, mx_shape sb, float *y,
                     float *ga, float *gb)
{
    const mx_op_def *op = mx_op_find(name);
    ck_assert_msg(op != NULL, "%s", name);
    char params[16];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    mx_shape in_s[2] = {sa, sb}, out_s[1];
    ck_assert_int_eq(op->infer_shape(params, in_s, 2, out_s, 1), MX_OK);
    int64_t n = mx_shape_size(&out_s[0]);
    float dy[64];
    ck_assert_int_le(n, 64);
    for (int64_t i = 0; i < n; i++) dy[i] = 1;
    mx_tensor in[2] = {{(void *)a, sa, MX_FLOAT32, mx_cpu(), 0}, {(void *)b, sb, MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, out_s[0], MX_FLOAT32, mx_cpu(), 0}, og = {dy, out_s[0], MX_FLOAT32, mx_cpu(), 0};
    mx_tensor ig[2] = {{ga, sa, MX_FLOAT32, mx_cpu(), 0}, {gb, sb, MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, req, ig, NULL), MX_OK);
}

/* From MXNet 1.9.1 (CPU): op(lhs, rhs), dlhs, drhs for dy = 1, made with
 * mx.autograd (`o = op(x, y); o.backward()`), printed with %.9g. */
static const struct {
    const char *name;
    float y[7], ga[7], gb[7];
} mxnet_elem[] = {
    {"_maximum", {2, 2, 3, 2, 0, 1.5, -0.5}, {0, 1, 1, 0, 1, 0, 0}, {1, 0, 0, 1, 0, 1, 1}},
    {"_minimum", {1, 2, -2, -3, 0, 0.5, -1.5}, {1, 1, 0, 1, 1, 1, 1}, {0, 0, 1, 0, 0, 0, 0}},
    {"_power", {1, 4, 0.111111112, 9, 1, 0.353553385, NAN}, {2, 4, -0.0740740746, -6, NAN, 1.06066012, NAN}, {0, 2.77258873, 0.122068033, NAN, -INFINITY, -0.245064527, NAN}},
    {"_mod", {1, 0, -1, 1, 0, 0.5, -0}, {1, 1, 1, 1, 1, 1, 1}, {-0, -1, 2, 2, NAN, -0, -3}},
    {"_hypot", {2.23606801, 2.82842708, 3.60555124, 3.60555124, 0, 1.58113885, 1.58113885}, {0.44721359, 0.707106769, 0.832050323, -0.832050323, NAN, 0.316227764, -0.948683262}, {0.89442718, 0.707106769, -0.554700196, 0.554700196, NAN, 0.948683262, -0.316227764}},
    {"_equal", {0, 1, 0, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_not_equal", {1, 0, 1, 1, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_greater", {0, 0, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_greater_equal", {0, 1, 1, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_lesser", {1, 0, 0, 1, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_lesser_equal", {1, 1, 0, 1, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_logical_and", {1, 1, 1, 1, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_logical_or", {1, 1, 1, 1, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
    {"_logical_xor", {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0}},
};

static const struct {
    const char *name;
    float y[24], ga[6], gb[4];
} mxnet_bc[] = {
    /* lhs 0.200000003, 0.569999993, 0.939999998, 1.30999994, 1.67999995, 2.04999995 rhs 0.300000012, 0.850000024, 1.39999998, 1.95000005 */
    {"broadcast_add", {0.5, 0.870000005, 1.24000001, 1.05000007, 1.42000008, 1.78999996, 1.60000002, 1.97000003, 2.33999991, 2.1500001, 2.51999998, 2.8900001, 1.6099999, 1.98000002, 2.3499999, 2.15999985, 2.52999997, 2.9000001, 2.71000004, 3.07999992, 3.44999981, 3.25999999, 3.63000011, 4}, {4, 4, 4, 4, 4, 4}, {6, 6, 6, 6}},
    {"broadcast_sub", {-0.100000009, 0.269999981, 0.639999986, -0.650000036, -0.280000031, 0.0899999738, -1.19999993, -0.829999983, -0.459999979, -1.75, -1.38000011, -1.00999999, 1.00999999, 1.37999988, 1.75, 0.459999919, 0.829999924, 1.19999993, -0.0900000334, 0.279999971, 0.649999976, -0.640000105, -0.2700001, 0.0999999046}, {4, 4, 4, 4, 4, 4}, {-6, -6, -6, -6}},
    {"broadcast_mul", {0.0600000024, 0.171000004, 0.282000005, 0.170000002, 0.484500021, 0.799000025, 0.280000001, 0.797999978, 1.31599998, 0.390000015, 1.11150002, 1.83300006, 0.393000007, 0.504000008, 0.61500001, 1.1135, 1.42799997, 1.74250007, 1.83399987, 2.352, 2.86999989, 2.55449986, 3.27600002, 3.99749994}, {4.5, 4.5, 4.5, 4.5, 4.5, 4.5}, {6.75, 6.75, 6.75, 6.75}},
    {"broadcast_div", {0.666666627, 1.89999986, 3.13333321, 0.235294119, 0.670588195, 1.10588229, 0.142857149, 0.407142848, 0.671428561, 0.102564104, 0.292307675, 0.482051283, 4.36666632, 5.59999943, 6.83333302, 1.54117632, 1.97647047, 2.41176462, 0.935714245, 1.19999993, 1.46428573, 0.671794832, 0.86153841, 1.05128205}, {5.73690987, 5.73690987, 5.73690987, 5.73690987, 5.73690987, 5.73690987}, {-75, -9.34255981, -3.44387746, -1.7751478}},
    {"broadcast_power", {0.617033839, 0.844816625, 0.981608629, 0.254610002, 0.6201455, 0.948765039, 0.105061121, 0.45522362, 0.91702038, 0.0433519334, 0.334161133, 0.886337876, 1.08437967, 1.16840327, 1.24029827, 1.2579999, 1.55422139, 1.84073293, 1.4594183, 2.06744027, 2.73184085, 1.69308591, 2.75012922, 4.05433846}, {3.16575265, 3.63069487, 4.37565994, 5.14451694, 5.9099865, 6.66695118}, {0.260605097, 1.65028596, 2.94596148, 4.48184109}},
    {"broadcast_maximum", {0.300000012, 0.569999993, 0.939999998, 0.850000024, 0.850000024, 0.939999998, 1.39999998, 1.39999998, 1.39999998, 1.95000005, 1.95000005, 1.95000005, 1.30999994, 1.67999995, 2.04999995, 1.30999994, 1.67999995, 2.04999995, 1.39999998, 1.67999995, 2.04999995, 1.95000005, 1.95000005, 2.04999995}, {0, 1, 2, 2, 3, 4}, {1, 2, 4, 5}},
    {"broadcast_minimum", {0.200000003, 0.300000012, 0.300000012, 0.200000003, 0.569999993, 0.850000024, 0.200000003, 0.569999993, 0.939999998, 0.200000003, 0.569999993, 0.939999998, 0.300000012, 0.300000012, 0.300000012, 0.850000024, 0.850000024, 0.850000024, 1.30999994, 1.39999998, 1.39999998, 1.30999994, 1.67999995, 1.95000005}, {4, 3, 2, 2, 1, 0}, {5, 4, 2, 1}},
    {"broadcast_mod", {0.200000003, 0.269999981, 0.0399999619, 0.200000003, 0.569999993, 0.0899999738, 0.200000003, 0.569999993, 0.939999998, 0.200000003, 0.569999993, 0.939999998, 0.109999895, 0.179999888, 0.249999881, 0.459999919, 0.829999924, 0.349999905, 1.30999994, 0.279999971, 0.649999976, 1.30999994, 1.67999995, 0.0999999046}, {4, 4, 4, 4, 4, 4}, {-19, -5, -2, -1}},
    {"broadcast_hypot", {0.360555142, 0.644127309, 0.98671174, 0.873212457, 1.02342558, 1.26732004, 1.41421354, 1.51158857, 1.68629766, 1.96022964, 2.03160048, 2.16474032, 1.34391212, 1.70657551, 2.0718348, 1.56160176, 1.88279045, 2.21923399, 1.91731572, 2.18686986, 2.48243833, 2.34916997, 2.57388806, 2.82931089}, {1.02718973, 2.09952497, 2.68604827, 3.05453897, 3.29765034, 3.46356225}, {2.14565563, 3.85345364, 4.68068218, 5.13231945}},
    {"broadcast_greater", {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1}, {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0}},
};

START_TEST(matches_mxnet_numbers)
{
    const float a[7] = {1, 2, 3, -3, 0, 0.5f, -1.5f}, b[7] = {2, 2, -2, 2, 0, 1.5f, -0.5f};
    for (size_t k = 0; k < sizeof(mxnet_elem) / sizeof(mxnet_elem[0]); k++) {
        float y[7], ga[7], gb[7];
        run_ones(mxnet_elem[k].name, a, MX_SHAPE(7), b, MX_SHAPE(7), y, ga, gb);
        for (int i = 0; i < 7; i++)
            ck_assert_msg(same(y[i], mxnet_elem[k].y[i]) && same(ga[i], mxnet_elem[k].ga[i]) &&
                              same(gb[i], mxnet_elem[k].gb[i]),
                          "%s(%g, %g) = %.9g, d = %.9g, %.9g; MXNet %.9g, %.9g, %.9g", mxnet_elem[k].name, a[i], b[i],
                          y[i], ga[i], gb[i], mxnet_elem[k].y[i], mxnet_elem[k].ga[i], mxnet_elem[k].gb[i]);
    }
    /* (2,1,3) with (1,4,1): lhs 0.2 + 0.37 i, rhs 0.3 + 0.55 j. */
    float l[6], r[4];
    for (int i = 0; i < 6; i++) l[i] = (float)(i * 0.37 + 0.2);
    for (int j = 0; j < 4; j++) r[j] = (float)(j * 0.55 + 0.3);
    for (size_t k = 0; k < sizeof(mxnet_bc) / sizeof(mxnet_bc[0]); k++) {
        float y[24], ga[6], gb[4];
        run_ones(mxnet_bc[k].name, l, MX_SHAPE(2, 1, 3), r, MX_SHAPE(1, 4, 1), y, ga, gb);
        for (int i = 0; i < 24; i++)
            ck_assert_msg(same(y[i], mxnet_bc[k].y[i]), "%s: y[%d] = %.9g, MXNet %.9g", mxnet_bc[k].name, i, y[i],
                          mxnet_bc[k].y[i]);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(same(ga[i], mxnet_bc[k].ga[i]), "%s: dlhs[%d] = %.9g, MXNet %.9g", mxnet_bc[k].name, i,
                          ga[i], mxnet_bc[k].ga[i]);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(same(gb[i], mxnet_bc[k].gb[i]), "%s: drhs[%d] = %.9g, MXNet %.9g", mxnet_bc[k].name, i,
                          gb[i], mxnet_bc[k].gb[i]);
    }
    /* NaN in either operand: maximum and minimum give NaN, and no gradient. */
    const float na[2] = {NAN, 1}, nb[2] = {1, NAN};
    float y[2], ga[2], gb[2];
    run_ones("broadcast_maximum", na, MX_SHAPE(2), nb, MX_SHAPE(2), y, ga, gb);
    ck_assert(isnan(y[0]) && isnan(y[1]) && ga[0] == 0 && ga[1] == 0 && gb[0] == 0 && gb[1] == 0);
}
END_TEST

START_TEST(shapes_and_errors)
{
    const struct {
        mx_shape l, r, want;
    } ok[] = {
        {MX_SHAPE(2, 1, 3), MX_SHAPE(1, 4, 1), MX_SHAPE(2, 4, 3)},
        {MX_SHAPE(3), MX_SHAPE(2, 3), MX_SHAPE(2, 3)},
        {MX_SHAPE(4, 1), MX_SHAPE(3), MX_SHAPE(4, 3)},
        {MX_SHAPE(2, 3), MX_SHAPE(1), MX_SHAPE(2, 3)},
        {MX_SHAPE(0, 3), MX_SHAPE(1, 3), MX_SHAPE(0, 3)},
    };
    int n_in, n_out;
    for (size_t k = 0; k < sizeof(ok) / sizeof(ok[0]); k++) {
        mx_shape in[2] = {ok[k].l, ok[k].r}, out[1];
        ck_assert_int_eq(opcheck_infer("broadcast_add", NULL, NULL, 0, in, &n_in, out, &n_out), MX_OK);
        ck_assert(mx_shape_equal(&out[0], &ok[k].want));
    }
    mx_shape in[2] = {MX_SHAPE(2, 3), MX_SHAPE(2, 4)}, out[1];
    ck_assert_int_eq(opcheck_infer("broadcast_mul", NULL, NULL, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
    const char *msg = mx_last_error();
    ck_assert_msg(strstr(msg, "broadcast_mul") && strstr(msg, "could not be broadcast") && strstr(msg, "(2,3)") &&
                      strstr(msg, "(2,4)"),
                  "%s", msg);
    mx_shape unk[2] = {MX_SHAPE(2, 3), {0}};
    ck_assert_int_eq(opcheck_infer("broadcast_sub", NULL, NULL, 0, unk, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "rhs is unknown"));
    /* equal-shape ops refuse what broadcast_* would take */
    mx_shape bad[2] = {MX_SHAPE(2, 3), MX_SHAPE(3)};
    ck_assert_int_eq(opcheck_infer("_maximum", NULL, NULL, 0, bad, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "shapes must be equal"));
    /* zero-size tensors run and touch nothing */
    float dummy = 5;
    const mx_op_def *op = mx_op_find("broadcast_add");
    char params[16];
    mx_tensor t0[2] = {{&dummy, MX_SHAPE(0, 3), MX_FLOAT32, mx_cpu(), 0}, {&dummy, MX_SHAPE(1, 3), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor o0 = {&dummy, MX_SHAPE(0, 3), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_NULL};
    ck_assert_int_eq(op->forward(&ctx, params, t0, req, &o0, NULL), MX_OK);
    ck_assert(dummy == 5);
}
END_TEST

START_TEST(names_and_aliases)
{
    const char *pairs[][2] = {
        {"broadcast_plus", "broadcast_add"},   {"broadcast_minus", "broadcast_sub"},
        {"_sparse_broadcast_mul", "broadcast_mul"}, {"_sparse_broadcast_div", "broadcast_div"},
        {"_npi_maximum", "broadcast_maximum"}, {"_npi_minimum", "broadcast_minimum"},
        {"_Maximum", "_maximum"},              {"_Minimum", "_minimum"},
        {"_Power", "_power"},                  {"_Mod", "_mod"},
        {"_Hypot", "_hypot"},                  {"_Equal", "_equal"},
        {"_Not_Equal", "_not_equal"},          {"_Greater", "_greater"},
        {"_Greater_Equal", "_greater_equal"},  {"_Lesser", "_lesser"},
        {"_Lesser_Equal", "_lesser_equal"},    {"_Logical_And", "_logical_and"},
        {"_Logical_Or", "_logical_or"},        {"_Logical_Xor", "_logical_xor"},
        {"_sparse_elemwise_add", "elemwise_add"}, {"_sparse_elemwise_div", "elemwise_div"},
    };
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        const mx_op_def *op = mx_op_find(pairs[k][0]);
        ck_assert_msg(op && !strcmp(op->name, pairs[k][1]), "%s", pairs[k][0]);
    }
    char name[64];
    for (int k = 0; k < N_KINDS; k++) {
        snprintf(name, sizeof(name), "broadcast_%s", kinds[k]);
        const mx_op_def *op = mx_op_find(name);
        ck_assert_msg(op != NULL, "%s", name);
        ck_assert_int_eq(op->n_params, 0);
        const char *names[2];
        ck_assert_int_eq(op->list_inputs(NULL, names), 2);
        ck_assert_str_eq(names[0], "lhs");
        ck_assert_str_eq(names[1], "rhs");
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_broadcast");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, broadcast_ops_against_reference);
    tcase_add_test(tc, large_broadcasts_split_across_threads);
    tcase_add_test(tc, equal_shape_ops_against_reference);
    tcase_add_test(tc, matches_mxnet_numbers);
    tcase_add_test(tc, shapes_and_errors);
    tcase_add_test(tc, names_and_aliases);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
