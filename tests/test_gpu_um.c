/* test_gpu_um.c - the GPU kernels of the element-wise math (unary_math:
 * relu ... radians, hard_sigmoid), the broadcast_* binaries, the
 * reductions (sum, mean, max, min, prod, norm), clip, Cast and the small
 * utilities of elemwise_misc (BlockGrad, _copy, amp_cast, zeros_like,
 * ones_like, _identity_with_attr_like_rhs, where) against their CPU
 * kernels (gpucheck: forward, backward with write/add/null requests).
 * Runs where a GPU is visible; elsewhere only checks that every one of
 * these operators names a GPU kernel in CUDA builds. */
#include "support/gpucheck.h"

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static gpucheck_summary g_sum;

#define NKV(k) ((int)(sizeof(k) / sizeof((k)[0])))

/* ------------------------------------------------------------ inits */

static void init_uniform(float *data, int64_t n, uint64_t *rng, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, lo, hi);
}

/* [0.5, 2): logs, roots, gamma. */
static void init_positive(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, 0.5, 2);
}

/* +-[0.5, 2): divisors. */
static void init_away_from_zero(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

/* [-0.9, 0.9): arcsin, arccos, arctanh (away from the poles of f'). */
static void init_inner(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, -0.9, 0.9);
}

/* [-0.99, 0.99): erfinv. */
static void init_erfinv(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, -0.99, 0.99);
}

/* [1.1, 3): arccosh. */
static void init_above_one(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, 1.1, 3);
}

/* (-2.9, -2.1): gamma between its poles. */
static void init_negative_gamma(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, -2.9, -2.1);
}

/* Halves and random values in [-3, 3): rounding ties. */
static void init_halves(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++)
        data[i] = i % 2 ? (float)((int)opcheck_uniform(rng, 0, 13) - 6) * 0.5f : (float)opcheck_uniform(rng, -3, 3);
}

/* Small integers -1..2 (ties, zeros, equal values). */
static void init_small_ints(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = (float)((int)opcheck_uniform(rng, 0, 4) - 1);
}

/* [-4, 4): hard_sigmoid both sides of the clip. */
static void init_wide(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    init_uniform(data, n, rng, -4, 4);
}

/* Power: lhs positive, rhs in [-1, 1). */
static void init_power(int index, float *data, int64_t n, uint64_t *rng)
{
    if (index == 0) init_uniform(data, n, rng, 0.5, 2);
    else init_uniform(data, n, rng, -1, 1);
}

/* Division and mod: lhs in [-3, 3), rhs away from zero. */
static void init_divisor(int index, float *data, int64_t n, uint64_t *rng)
{
    if (index == 1) init_away_from_zero(index, data, n, rng);
    else init_uniform(data, n, rng, -3, 3);
}

/* prod: +-[0.5, 1.5) with some exact zeros (the zero rules). */
static void init_prod(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 1.5), u = opcheck_uniform(rng, 0, 1);
        data[i] = u < 0.1 ? 0.0f : (float)(u < 0.55 ? -v : v);
    }
}

/* where: condition 0/1-ish (small ints), x and y uniform. */
static void init_where(int index, float *data, int64_t n, uint64_t *rng)
{
    if (index == 0) init_small_ints(index, data, n, rng);
    else init_uniform(data, n, rng, -1, 1);
}

static void run1(const char *op, const char *const *keys, const char *const *values, int n, mx_shape s0,
                 opcheck_init_fn init, uint64_t seed)
{
    gpucheck_case c = {.op = op, .keys = keys, .values = values, .n_params = n, .init = init, .seed = seed};
    c.in_shapes[0] = s0;
    gpucheck_run(&c, &g_sum);
}

static void run2(const char *op, mx_shape s0, mx_shape s1, opcheck_init_fn init, uint64_t seed)
{
    gpucheck_case c = {.op = op, .init = init, .seed = seed};
    c.in_shapes[0] = s0;
    c.in_shapes[1] = s1;
    gpucheck_run(&c, &g_sum);
}

/* ------------------------------------------------------------ operator lists */

/* Unary ops and the init each is checked with (NULL: uniform [-1, 1)). */
static const struct {
    const char *op;
    opcheck_init_fn init;
} unary_ops[] = {
    {"relu", NULL},          {"sigmoid", NULL},        {"tanh", NULL},          {"softsign", NULL},
    {"exp", NULL},           {"expm1", NULL},          {"log", init_positive},  {"log2", init_positive},
    {"log10", init_positive}, {"log1p", init_positive}, {"sqrt", init_positive}, {"rsqrt", init_positive},
    {"cbrt", NULL},          {"rcbrt", init_away_from_zero}, {"square", NULL},   {"abs", NULL},
    {"negative", NULL},      {"reciprocal", init_away_from_zero}, {"sign", init_small_ints}, {"floor", init_halves},
    {"ceil", init_halves},   {"round", init_halves},   {"rint", init_halves},   {"fix", init_halves},
    {"trunc", init_halves},  {"logical_not", init_small_ints}, {"erf", NULL},   {"erfinv", init_erfinv},
    {"gamma", init_positive}, {"gammaln", init_positive}, {"sin", NULL},        {"cos", NULL},
    {"tan", NULL},           {"arcsin", init_inner},   {"arccos", init_inner},  {"arctan", NULL},
    {"sinh", NULL},          {"cosh", NULL},           {"arcsinh", NULL},       {"arccosh", init_above_one},
    {"arctanh", init_inner}, {"degrees", NULL},        {"radians", NULL},
};

static const char *const broadcast_ops[] = {
    "broadcast_add",          "broadcast_sub",        "broadcast_mul",          "broadcast_div",
    "broadcast_power",        "broadcast_maximum",    "broadcast_minimum",      "broadcast_mod",
    "broadcast_hypot",        "broadcast_equal",      "broadcast_not_equal",    "broadcast_greater",
    "broadcast_greater_equal", "broadcast_lesser",    "broadcast_lesser_equal", "broadcast_logical_and",
    "broadcast_logical_or",   "broadcast_logical_xor",
};

static const char *const reduce_ops[] = {"sum", "mean", "max", "min", "prod", "norm"};

static const char *const misc_ops[] = {"hard_sigmoid", "clip", "Cast", "BlockGrad", "_copy", "amp_cast",
                                       "zeros_like", "ones_like", "_identity_with_attr_like_rhs", "where"};

/* ------------------------------------------------------------ tests */

START_TEST(every_operator_names_a_gpu_kernel)
{
#ifdef MX_USE_CUDA
    for (int i = 0; i < NKV(unary_ops); i++) ck_assert_msg(mx_op_find(unary_ops[i].op)->gpu, "%s", unary_ops[i].op);
    for (int i = 0; i < NKV(broadcast_ops); i++)
        ck_assert_msg(mx_op_find(broadcast_ops[i])->gpu, "%s", broadcast_ops[i]);
    for (int i = 0; i < NKV(reduce_ops); i++) ck_assert_msg(mx_op_find(reduce_ops[i])->gpu, "%s", reduce_ops[i]);
    for (int i = 0; i < NKV(misc_ops); i++) ck_assert_msg(mx_op_find(misc_ops[i])->gpu, "%s", misc_ops[i]);
    const char *alias[] = {"_sparse_relu", "_npx_erfinv", "broadcast_plus", "_npi_maximum", "sum_axis", "max_axis",
                           "cast", "stop_gradient", "identity", "_sparse_where"};
    for (int i = 0; i < NKV(alias); i++) ck_assert_msg(mx_op_find(alias[i])->gpu, "%s", alias[i]);
#else
    for (int i = 0; i < NKV(misc_ops); i++) ck_assert_ptr_null(mx_op_find(misc_ops[i])->gpu);
    for (int i = 0; i < NKV(reduce_ops); i++) ck_assert_ptr_null(mx_op_find(reduce_ops[i])->gpu);
#endif
}
END_TEST

START_TEST(unary_math)
{
    if (!gpucheck_gpu_visible()) return;
    for (int i = 0; i < NKV(unary_ops); i++) {
        run1(unary_ops[i].op, NULL, NULL, 0, MX_SHAPE(3, 7, 5), unary_ops[i].init, 100 + (uint64_t)i);
        run1(unary_ops[i].op, NULL, NULL, 0, MX_SHAPE(7), unary_ops[i].init, 200 + (uint64_t)i);
    }
    /* Wider ranges where f is defined everywhere. */
    run1("relu", NULL, NULL, 0, MX_SHAPE(2, 3, 7, 5), init_wide, 300);
    run1("sigmoid", NULL, NULL, 0, MX_SHAPE(2, 3, 7, 5), init_wide, 301);
    run1("tanh", NULL, NULL, 0, MX_SHAPE(2, 3, 7, 5), init_wide, 302);
    run1("exp", NULL, NULL, 0, MX_SHAPE(2, 3, 7, 5), init_wide, 303);
    run1("gamma", NULL, NULL, 0, MX_SHAPE(3, 7, 5), init_negative_gamma, 304);
    run1("sin", NULL, NULL, 0, MX_SHAPE(3, 7, 5), init_wide, 305);
    /* A larger tensor: the grid-stride loops wrap. */
    run1("sqrt", NULL, NULL, 0, MX_SHAPE(41, 1031), init_positive, 306);
    /* hard_sigmoid: defaults and other slopes. */
    const char *keys[] = {"alpha", "beta"};
    const char *v1[] = {"0.2", "0.5"}, *v2[] = {"0.5", "0.25"}, *v3[] = {"1.5", "-0.5"};
    run1("hard_sigmoid", NULL, NULL, 0, MX_SHAPE(3, 7, 5), init_wide, 310);
    run1("hard_sigmoid", keys, v1, 2, MX_SHAPE(7), init_wide, 311);
    run1("hard_sigmoid", keys, v2, 2, MX_SHAPE(3, 7, 5), init_wide, 312);
    run1("hard_sigmoid", keys, v3, 2, MX_SHAPE(3, 7, 5), init_wide, 313);
}
END_TEST

/* The init of a broadcast op's operands. */
static opcheck_init_fn broadcast_init(const char *op, int variant)
{
    if (!strcmp(op, "broadcast_div") || !strcmp(op, "broadcast_mod")) return init_divisor;
    if (!strcmp(op, "broadcast_power")) return init_power;
    /* comparisons, logical ops and max/min ties */
    if (variant && strcmp(op, "broadcast_hypot") && strcmp(op, "broadcast_mul") && strcmp(op, "broadcast_add") &&
        strcmp(op, "broadcast_sub"))
        return init_small_ints;
    return NULL;
}

START_TEST(broadcast_binary)
{
    if (!gpucheck_gpu_visible()) return;
    struct {
        mx_shape l, r;
    } cases[] = {
        {MX_SHAPE(2, 1, 3), MX_SHAPE(1, 4, 1)},      /* both broadcast */
        {MX_SHAPE(3, 7, 5), MX_SHAPE(3, 7, 5)},      /* same shape */
        {MX_SHAPE(3), MX_SHAPE(2, 3)},               /* ranks differ */
        {MX_SHAPE(3, 4, 5, 7), MX_SHAPE(1, 4, 1, 1)}, /* a bias over channels */
        {MX_SHAPE(1, 4, 1, 1), MX_SHAPE(3, 4, 5, 7)}, /* the other side */
        {MX_SHAPE(7, 5), MX_SHAPE(1)},               /* scalar rhs */
        {MX_SHAPE(1), MX_SHAPE(3, 5)},               /* scalar lhs */
        {MX_SHAPE(3, 1, 5), MX_SHAPE(3, 4, 5)},      /* middle axis */
        {MX_SHAPE(1, 1), MX_SHAPE(1)},               /* one element */
    };
    for (int o = 0; o < NKV(broadcast_ops); o++) {
        /* Comparisons and logical ops (zero gradients) on fewer shapes,
         * to stay quick under compute-sanitizer. */
        bool no_grad = o >= 9;
        for (int i = 0; i < NKV(cases); i++) {
            if (no_grad && i % 2 == 0 && i != 0) continue;
            run2(broadcast_ops[o], cases[i].l, cases[i].r, broadcast_init(broadcast_ops[o], i % 2),
                 1000 + (uint64_t)(o * 16 + i));
        }
    }
}
END_TEST

START_TEST(reduce)
{
    if (!gpucheck_gpu_visible()) return;
    const char *keys[] = {"axis", "keepdims", "exclude"};
    struct {
        const char *axis, *keepdims, *exclude;
        mx_shape data;
    } cases[] = {
        {"()", "False", "False", MX_SHAPE(3, 4, 5)},     {"()", "True", "False", MX_SHAPE(3, 4, 5)},
        {"1", "False", "False", MX_SHAPE(3, 4, 5)},      {"(0, 2)", "False", "False", MX_SHAPE(3, 4, 5)},
        {"-1", "True", "False", MX_SHAPE(3, 4, 5)},      {"1", "False", "True", MX_SHAPE(3, 4, 5)},
        {"(0,)", "True", "True", MX_SHAPE(3, 4, 5)},     {"0", "False", "False", MX_SHAPE(7)},
        {"(1, 3)", "False", "False", MX_SHAPE(2, 3, 7, 5)}, {"(-4, -2)", "True", "False", MX_SHAPE(2, 3, 7, 5)},
        {"(0, 1, 2)", "False", "True", MX_SHAPE(2, 3, 7, 5)}, {"0", "False", "False", MX_SHAPE(1, 6)},
    };
    for (int o = 0; o < NKV(reduce_ops) - 1; o++) {
        const char *op = reduce_ops[o];
        opcheck_init_fn init = !strcmp(op, "prod") ? init_prod : NULL;
        for (int i = 0; i < NKV(cases); i++) {
            const char *values[] = {cases[i].axis, cases[i].keepdims, cases[i].exclude};
            run1(op, keys, values, 3, cases[i].data, init, 2000 + (uint64_t)(o * 32 + i));
        }
        /* Ties (max, min) and zeros (prod). */
        const char *values[] = {"1", "False", "False"};
        run1(op, keys, values, 3, MX_SHAPE(3, 4, 5), init_small_ints, 2000 + (uint64_t)(o * 32 + 31));
        /* No parameters at all: every axis. */
        run1(op, NULL, NULL, 0, MX_SHAPE(3, 4, 5), init, 2000 + (uint64_t)(o * 32 + 30));
    }
    /* A longer reduction. */
    const char *lv[] = {"1", "False", "False"};
    run1("sum", keys, lv, 3, MX_SHAPE(5, 2000), NULL, 2300);
    run1("mean", keys, lv, 3, MX_SHAPE(5, 2000), NULL, 2301);
    run1("max", keys, lv, 3, MX_SHAPE(5, 2000), NULL, 2302);

    const char *nkeys[] = {"ord", "axis", "keepdims"};
    struct {
        const char *ord, *axis, *keepdims;
        mx_shape data;
    } ncases[] = {
        {"2", "()", "False", MX_SHAPE(3, 4, 5)},  {"1", "()", "False", MX_SHAPE(3, 4, 5)},
        {"2", "1", "False", MX_SHAPE(3, 4, 5)},   {"1", "1", "True", MX_SHAPE(3, 4, 5)},
        {"2", "(0, 2)", "True", MX_SHAPE(3, 4, 5)}, {"1", "-1", "False", MX_SHAPE(2, 3, 7, 5)},
        {"2", "0", "False", MX_SHAPE(7)},
    };
    for (int i = 0; i < NKV(ncases); i++) {
        const char *values[] = {ncases[i].ord, ncases[i].axis, ncases[i].keepdims};
        run1("norm", nkeys, values, 3, ncases[i].data, NULL, 2400 + (uint64_t)i);
    }
    run1("norm", NULL, NULL, 0, MX_SHAPE(3, 7, 5), NULL, 2420);
}
END_TEST

START_TEST(clip_cast_misc)
{
    if (!gpucheck_gpu_visible()) return;
    const char *ckeys[] = {"a_min", "a_max"};
    const char *c1[] = {"-0.5", "0.5"}, *c2[] = {"0", "1"}, *c3[] = {"-2", "-0.25"};
    run1("clip", ckeys, c1, 2, MX_SHAPE(3, 7, 5), NULL, 3000);
    run1("clip", ckeys, c2, 2, MX_SHAPE(3, 7, 5), init_small_ints, 3001); /* values on the bounds */
    run1("clip", ckeys, c3, 2, MX_SHAPE(7), init_wide, 3002);

    const char *tkeys[] = {"dtype"};
    const char *f32[] = {"float32"};
    run1("Cast", tkeys, f32, 1, MX_SHAPE(3, 7, 5), NULL, 3010);
    run1("cast", tkeys, f32, 1, MX_SHAPE(7), NULL, 3011);
    run1("amp_cast", tkeys, f32, 1, MX_SHAPE(3, 7, 5), NULL, 3012);

    const char *plain[] = {"BlockGrad", "_copy", "identity", "stop_gradient", "zeros_like", "ones_like"};
    for (int i = 0; i < NKV(plain); i++) {
        run1(plain[i], NULL, NULL, 0, MX_SHAPE(3, 7, 5), NULL, 3020 + (uint64_t)i);
        run1(plain[i], NULL, NULL, 0, MX_SHAPE(7), NULL, 3040 + (uint64_t)i);
    }
    run2("_identity_with_attr_like_rhs", MX_SHAPE(3, 7, 5), MX_SHAPE(3, 7, 5), NULL, 3060);
    run2("_identity_with_attr_like_rhs", MX_SHAPE(7), MX_SHAPE(7), NULL, 3061);

    /* where: condition of x's shape, or 1-D over rows. */
    struct {
        mx_shape c, x;
    } wcases[] = {
        {MX_SHAPE(3, 7, 5), MX_SHAPE(3, 7, 5)},
        {MX_SHAPE(3), MX_SHAPE(3, 7, 5)},
        {MX_SHAPE(7), MX_SHAPE(7)},
        {MX_SHAPE(5), MX_SHAPE(5, 9)},
    };
    for (int i = 0; i < NKV(wcases); i++) {
        gpucheck_case c = {.op = "where", .init = init_where, .seed = 3070 + (uint64_t)i};
        c.in_shapes[0] = wcases[i].c;
        c.in_shapes[1] = wcases[i].x;
        c.in_shapes[2] = wcases[i].x;
        gpucheck_run(&c, &g_sum);
    }
}
END_TEST

static void tests_everywhere(TCase *tc)
{
    tcase_add_test(tc, every_operator_names_a_gpu_kernel);
}

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, unary_math);
    tcase_add_test(tc, broadcast_binary);
    tcase_add_test(tc, reduce);
    tcase_add_test(tc, clip_cast_misc);
}

int main(void)
{
    return gpucheck_main("um", tests_everywhere, tests_on_gpu, 300, &g_sum);
}
