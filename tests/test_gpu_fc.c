/* test_gpu_fc.c - the GPU kernels of FullyConnected, Concat,
 * ElementWiseSum, Flatten, Reshape, the equal-shape element-wise binaries
 * and the array-scalar family (and smooth_l1) against their CPU kernels
 * (gpucheck: forward, backward with write/add/null requests). Runs where a
 * GPU is visible; elsewhere only checks that every one of these operators
 * names a GPU kernel in CUDA builds. */
#include "support/gpucheck.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

static gpucheck_summary g_sum;

#define NKV(k) ((int)(sizeof(k) / sizeof((k)[0])))

static const char *const binary_ops[] = {
    "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_maximum",      "_minimum",
    "_power",       "_mod",         "_hypot",       "_equal",       "_not_equal",    "_greater",
    "_greater_equal", "_lesser",    "_lesser_equal", "_logical_and", "_logical_or",  "_logical_xor",
};
static const char *const scalar_ops[] = {
    "_plus_scalar",       "_minus_scalar",        "_rminus_scalar",      "_mul_scalar",
    "_div_scalar",        "_rdiv_scalar",         "_power_scalar",       "_rpower_scalar",
    "_maximum_scalar",    "_minimum_scalar",      "_mod_scalar",         "_rmod_scalar",
    "_hypot_scalar",      "_equal_scalar",        "_not_equal_scalar",   "_greater_scalar",
    "_greater_equal_scalar", "_lesser_scalar",    "_lesser_equal_scalar", "_logical_and_scalar",
    "_logical_or_scalar", "_logical_xor_scalar",  "smooth_l1",
};
static const char *const other_ops[] = {"FullyConnected", "Concat", "ElementWiseSum", "Flatten", "Reshape"};

/* ------------------------------------------------------------ inits */

/* +-[0.5, 2): safe divisors, moduli and logs of |x|. */
static void init_away_from_zero(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

/* [0.5, 2): positive bases for power. */
static void init_positive(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, 0.5, 2);
}

/* Small integers -1..2 (ties, zeros, equal values for comparisons). */
static void init_small_ints(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = (float)((int)opcheck_uniform(rng, 0, 4) - 1);
}

/* Power: lhs positive, rhs in [-1, 1). */
static void init_power(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)(index == 0 ? opcheck_uniform(rng, 0.5, 2) : opcheck_uniform(rng, -1, 1));
}

/* Division and mod: lhs in [-3, 3), rhs away from zero. */
static void init_divisor(int index, float *data, int64_t n, uint64_t *rng)
{
    if (index == 1) {
        init_away_from_zero(index, data, n, rng);
        return;
    }
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, -3, 3);
}

/* smooth_l1: both branches for sigma 1 and 2. */
static void init_wide(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, -2.5, 2.5);
}

static void run(const char *op, const char *const *keys, const char *const *values, int n, mx_shape s0,
                opcheck_init_fn init, double atol, uint64_t seed)
{
    gpucheck_case c = {.op = op, .keys = keys, .values = values, .n_params = n, .init = init, .atol = atol,
                       .seed = seed};
    c.in_shapes[0] = s0;
    gpucheck_run(&c, &g_sum);
}

/* ------------------------------------------------------------ tests */

START_TEST(every_operator_names_a_gpu_kernel)
{
#ifdef MX_USE_CUDA
    for (int i = 0; i < NKV(binary_ops); i++) ck_assert_msg(mx_op_find(binary_ops[i])->gpu, "%s", binary_ops[i]);
    for (int i = 0; i < NKV(scalar_ops); i++) ck_assert_msg(mx_op_find(scalar_ops[i])->gpu, "%s", scalar_ops[i]);
    for (int i = 0; i < NKV(other_ops); i++) ck_assert_msg(mx_op_find(other_ops[i])->gpu, "%s", other_ops[i]);
    /* Legacy aliases resolve to the same definitions. */
    const char *alias[] = {"_Plus", "_Minus", "_Mul", "_Div", "_PlusScalar", "_MulScalar", "add_n", "fullc",
                           "concat", "flatten", "reshape"};
    for (int i = 0; i < NKV(alias); i++) ck_assert_msg(mx_op_find(alias[i])->gpu, "%s", alias[i]);
#else
    for (int i = 0; i < NKV(other_ops); i++) ck_assert_ptr_null(mx_op_find(other_ops[i])->gpu);
#endif
}
END_TEST

START_TEST(fully_connected)
{
    if (!gpucheck_gpu_visible()) return;
    const char *keys[] = {"num_hidden", "no_bias", "flatten"};
    struct {
        mx_shape data;
        const char *hidden, *no_bias, *flatten;
    } cases[] = {
        {MX_SHAPE(3, 7), "5", "False", "True"},
        {MX_SHAPE(3, 7), "5", "True", "True"},
        {MX_SHAPE(3, 2, 7, 5), "11", "False", "True"},  /* flattened 4-D data */
        {MX_SHAPE(3, 2, 7, 5), "11", "True", "True"},
        {MX_SHAPE(3, 5, 7), "4", "False", "False"},     /* applied to the last axis */
        {MX_SHAPE(2, 3, 5, 7), "9", "True", "False"},
        {MX_SHAPE(1, 1), "1", "False", "True"},
        {MX_SHAPE(17, 130), "33", "False", "True"},     /* longer dot products */
        {MX_SHAPE(64, 96), "100", "False", "True"},
    };
    for (int i = 0; i < NKV(cases); i++) {
        const char *values[] = {cases[i].hidden, cases[i].no_bias, cases[i].flatten};
        /* cuBLAS sums in another order than the CPU's SGEMM. */
        run("FullyConnected", keys, values, 3, cases[i].data, NULL, 1e-4, 100 + (uint64_t)i);
    }
}
END_TEST

START_TEST(concat)
{
    if (!gpucheck_gpu_visible()) return;
    const char *keys[] = {"num_args", "dim"};
    struct {
        const char *num_args, *dim;
        int nd;
        int64_t base[4];
    } cases[] = {
        {"2", "1", 4, {3, 2, 7, 5}}, {"3", "0", 2, {3, 5}}, {"3", "2", 4, {3, 2, 7, 5}}, {"5", "3", 4, {3, 2, 7, 5}},
        {"4", "-1", 3, {3, 5, 7}},   {"1", "1", 3, {3, 5, 7}}, {"2", "-3", 3, {3, 5, 7}},
    };
    for (int i = 0; i < NKV(cases); i++) {
        const char *values[] = {cases[i].num_args, cases[i].dim};
        gpucheck_case c = {.op = "Concat", .keys = keys, .values = values, .n_params = 2, .seed = 200 + (uint64_t)i};
        int n = cases[i].num_args[0] - '0', nd = cases[i].nd;
        int axis = cases[i].dim[0] == '-' ? nd - (cases[i].dim[1] - '0') : cases[i].dim[0] - '0';
        for (int k = 0; k < n; k++) {
            c.in_shapes[k].ndim = nd;
            for (int d = 0; d < nd; d++) c.in_shapes[k].dims[d] = cases[i].base[d];
            c.in_shapes[k].dims[axis] = 1 + (k * 2 + i) % 4; /* widths differ per input */
        }
        gpucheck_run(&c, &g_sum);
    }
    /* Many inputs. */
    const char *values[] = {"20", "1"};
    gpucheck_case c = {.op = "Concat", .keys = keys, .values = values, .n_params = 2, .seed = 299};
    for (int k = 0; k < 20; k++) c.in_shapes[k] = MX_SHAPE(3, 1 + k % 3, 5);
    gpucheck_run(&c, &g_sum);
}
END_TEST

START_TEST(elementwise_sum)
{
    if (!gpucheck_gpu_visible()) return;
    const char *keys[] = {"num_args"};
    const char *nums[] = {"1", "2", "3", "5", "17"};
    for (int i = 0; i < NKV(nums); i++) {
        const char *values[] = {nums[i]};
        for (int s = 0; s < 2; s++)
            run(i % 2 ? "add_n" : "ElementWiseSum", keys, values, 1, s ? MX_SHAPE(3, 2, 7, 5) : MX_SHAPE(7),
                NULL, 0, 300 + (uint64_t)(i * 2 + s));
    }
}
END_TEST

START_TEST(flatten_and_reshape)
{
    if (!gpucheck_gpu_visible()) return;
    run("Flatten", NULL, NULL, 0, MX_SHAPE(3, 2, 7, 5), NULL, 0, 400);
    run("Flatten", NULL, NULL, 0, MX_SHAPE(3, 7), NULL, 0, 401);
    run("flatten", NULL, NULL, 0, MX_SHAPE(3, 5, 7), NULL, 0, 402);
    const char *keys[] = {"shape", "reverse"};
    struct {
        const char *shape, *reverse;
        mx_shape data;
    } cases[] = {
        {"(0,-1)", "False", MX_SHAPE(3, 2, 7, 5)}, {"(-3,-2)", "False", MX_SHAPE(3, 2, 7, 5)},
        {"(-4,1,3,-2)", "False", MX_SHAPE(3, 5, 7)}, {"(-1,0)", "True", MX_SHAPE(10, 5, 4)},
        {"(35,3)", "False", MX_SHAPE(3, 5, 7)},
    };
    for (int i = 0; i < NKV(cases); i++) {
        const char *values[] = {cases[i].shape, cases[i].reverse};
        run("Reshape", keys, values, 2, cases[i].data, NULL, 0, 410 + (uint64_t)i);
    }
}
END_TEST

static opcheck_init_fn binary_init(const char *op)
{
    if (!strcmp(op, "elemwise_div") || !strcmp(op, "_mod")) return init_divisor;
    if (!strcmp(op, "_power")) return init_power;
    if (!strcmp(op, "_hypot")) return init_away_from_zero;
    if (!strncmp(op, "_equal", 6) || !strncmp(op, "_not_", 5) || !strncmp(op, "_greater", 8) ||
        !strncmp(op, "_lesser", 7) || !strncmp(op, "_logical", 8))
        return init_small_ints;
    return NULL;
}

START_TEST(elemwise_binary)
{
    if (!gpucheck_gpu_visible()) return;
    for (int i = 0; i < NKV(binary_ops); i++) {
        opcheck_init_fn init = binary_init(binary_ops[i]);
        run(binary_ops[i], NULL, NULL, 0, MX_SHAPE(3, 2, 7, 5), init, 0, 500 + (uint64_t)i);
        run(binary_ops[i], NULL, NULL, 0, MX_SHAPE(7), init, 0, 550 + (uint64_t)i);
        if (init == init_small_ints) /* and on continuous values */
            run(binary_ops[i], NULL, NULL, 0, MX_SHAPE(3, 5, 7), NULL, 0, 600 + (uint64_t)i);
    }
    /* maximum/minimum ties go to the left operand. */
    run("_maximum", NULL, NULL, 0, MX_SHAPE(3, 5, 7), init_small_ints, 0, 650);
    run("_minimum", NULL, NULL, 0, MX_SHAPE(3, 5, 7), init_small_ints, 0, 651);
    /* Legacy aliases. */
    const char *legacy[] = {"_Plus", "_Minus", "_Mul", "_Div"};
    for (int i = 0; i < NKV(legacy); i++)
        run(legacy[i], NULL, NULL, 0, MX_SHAPE(3, 7), init_divisor, 0, 660 + (uint64_t)i);
}
END_TEST

START_TEST(elemwise_scalar)
{
    if (!gpucheck_gpu_visible()) return;
    const char *keys[] = {"scalar"};
    struct {
        const char *op, *scalar;
        opcheck_init_fn init;
    } cases[] = {
        {"_plus_scalar", "1.5", NULL},          {"_minus_scalar", "-0.25", NULL},
        {"_rminus_scalar", "3", NULL},          {"_mul_scalar", "-1.75", NULL},
        {"_div_scalar", "0.3", NULL},           {"_rdiv_scalar", "2.5", init_away_from_zero},
        {"_rdiv_scalar", "-1", init_away_from_zero},
        {"_power_scalar", "2", init_positive},  {"_power_scalar", "-0.5", init_positive},
        {"_power_scalar", "3", NULL},           /* integer power of negatives */
        {"_rpower_scalar", "1.7", NULL},        {"_rpower_scalar", "0.4", NULL},
        {"_maximum_scalar", "0.1", NULL},       {"_maximum_scalar", "1", init_small_ints},
        {"_minimum_scalar", "-0.2", NULL},      {"_minimum_scalar", "0", init_small_ints},
        {"_mod_scalar", "0.7", init_wide},      {"_mod_scalar", "-1.3", init_wide},
        {"_rmod_scalar", "2.5", init_away_from_zero}, {"_rmod_scalar", "-1.5", init_away_from_zero},
        {"_hypot_scalar", "0.5", NULL},         {"_hypot_scalar", "-2", NULL},
        {"_equal_scalar", "1", init_small_ints}, {"_not_equal_scalar", "0", init_small_ints},
        {"_greater_scalar", "0", init_small_ints}, {"_greater_equal_scalar", "1", init_small_ints},
        {"_lesser_scalar", "0.5", NULL},        {"_lesser_equal_scalar", "-1", init_small_ints},
        {"_logical_and_scalar", "1", init_small_ints}, {"_logical_and_scalar", "0", init_small_ints},
        {"_logical_or_scalar", "0", init_small_ints}, {"_logical_xor_scalar", "2", init_small_ints},
        {"smooth_l1", "1", init_wide},          {"smooth_l1", "2", init_wide},
        {"smooth_l1", "0.5", init_wide},
        {"_PlusScalar", "2", NULL},             {"_MulScalar", "0.5", NULL},
        {"_RDivScalar", "1", init_away_from_zero}, {"_RMinusScalar", "1", NULL},
    };
    for (int i = 0; i < NKV(cases); i++) {
        const char *values[] = {cases[i].scalar};
        run(cases[i].op, keys, values, 1, i % 2 ? MX_SHAPE(3, 2, 7, 5) : MX_SHAPE(3, 5, 7), cases[i].init, 0,
            700 + (uint64_t)i);
    }
    /* The default scalar (1). */
    for (int i = 0; i < NKV(scalar_ops); i++)
        run(scalar_ops[i], NULL, NULL, 0, MX_SHAPE(7), init_away_from_zero, 0, 800 + (uint64_t)i);
}
END_TEST

static void tests_everywhere(TCase *tc)
{
    tcase_add_test(tc, every_operator_names_a_gpu_kernel);
}

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, fully_connected);
    tcase_add_test(tc, concat);
    tcase_add_test(tc, elementwise_sum);
    tcase_add_test(tc, flatten_and_reshape);
    tcase_add_test(tc, elemwise_binary);
    tcase_add_test(tc, elemwise_scalar);
}

int main(void)
{
    return gpucheck_main("fc", tests_everywhere, tests_on_gpu, 300, &g_sum);
}
