/*
 * test_gpu_misc.c - the GPU kernels of softmax / log_softmax, LeakyReLU,
 * the regression outputs, SliceChannel, transpose, Embedding, batch_dot
 * and Deconvolution against their CPU twins (gpucheck): every parameter
 * value the GPU supports, odd sizes, forward and backward with write / add
 * / null requests. Without a visible GPU the comparisons are skipped; the
 * registration checks run in every build.
 */
#include "support/gpucheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gpucheck_summary sum;

/* Up to 8 params as "key=value" pairs. */
typedef struct kv {
    const char *keys[8], *values[8];
    int n;
} kv;

static kv params(int n, const char *const *pairs)
{
    kv p = {.n = n};
    for (int i = 0; i < n; i++) {
        p.keys[i] = pairs[2 * i];
        p.values[i] = pairs[2 * i + 1];
    }
    return p;
}

#define KV(...)                                                                                  \
    params((int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *) / 2),               \
           (const char *const[]){__VA_ARGS__})
#define KV0 ((kv){.n = 0})

/* One case: shapes of the first inputs (ndim 0: inferred). */
static void run2(const char *op, kv p, mx_shape s0, mx_shape s1, opcheck_init_fn init, uint64_t skip_grad,
                 double rtol, double atol, uint64_t seed)
{
    gpucheck_case c = {.op = op, .keys = p.keys, .values = p.values, .n_params = p.n, .init = init,
                       .skip_grad = skip_grad, .rtol = rtol, .atol = atol, .seed = seed};
    c.in_shapes[0] = s0;
    c.in_shapes[1] = s1;
    gpucheck_run(&c, &sum);
}

static void run(const char *op, kv p, mx_shape data, opcheck_init_fn init, uint64_t seed)
{
    run2(op, p, data, (mx_shape){0}, init, 0, 0, 0, seed);
}

/* ------------------------------------------------------------ inits */

/* Data in [-20, 20): softmax must subtract the max. */
static void init_wide(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, index == 0 ? -20 : -1, index == 0 ? 20 : 1);
}

/* Data in [-3, 3); lengths (input 1) whole numbers and fractions in
 * [-1, 9): some zero, some past the axis length. */
static void init_lengths(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = opcheck_uniform(rng, index == 0 ? -3 : -1, index == 0 ? 3 : 9);
        data[i] = (float)(index == 0 || i % 2 ? v : floor(v));
    }
}

/* Data in [-3, 3): gelu's and elu's curves. */
static void init_act(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) data[i] = (float)opcheck_uniform(rng, index == 0 ? -3 : -1, index == 0 ? 3 : 1);
}

/* Indices (input 0) in [-2, 12): negative, fractional, past the vocabulary
 * (clipped) and repeated; whole numbers for half of them. */
static void init_indices(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = opcheck_uniform(rng, index == 0 ? -2 : -1, index == 0 ? 12 : 1);
        data[i] = (float)(index == 0 && i % 2 ? floor(v) : v);
    }
}

/* Regression labels (input 1) equal to the data at some places (MAE's
 * sign is 0 there). */
static void init_labels(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) data[i] = (float)((int)opcheck_uniform(rng, 0, 5) - 2) * 0.5f;
    (void)index;
}

/* ------------------------------------------------------------ softmax */

static void sm_case(const char *op, kv p, mx_shape data, uint64_t seed)
{
    run(op, p, data, init_wide, seed);
}

START_TEST(test_softmax_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    static const char *const ops[] = {"softmax", "log_softmax"};
    for (int k = 0; k < 2; k++) {
        const char *op = ops[k];
        const uint64_t s = 100 * (uint64_t)k;
        sm_case(op, KV0, MX_SHAPE(7, 13), s + 1);
        sm_case(op, KV("axis", "1"), MX_SHAPE(3, 5, 4, 7), s + 2);
        sm_case(op, KV("axis", "0"), MX_SHAPE(6, 5, 3), s + 3);
        sm_case(op, KV("axis", "-2"), MX_SHAPE(2, 9, 7), s + 4);
        sm_case(op, KV("axis", "-1", "temperature", "2.5"), MX_SHAPE(5, 11), s + 5);
        sm_case(op, KV("axis", "2", "temperature", "0.5"), MX_SHAPE(2, 3, 6, 5), s + 6);
        sm_case(op, KV("temperature", "None", "dtype", "float32"), MX_SHAPE(4, 1), s + 7);
        sm_case(op, KV0, MX_SHAPE(1, 300), s + 8);
        sm_case(op, KV("axis", "0"), MX_SHAPE(17), s + 9);
    }
    /* softmax with lengths: the length input gets zeros */
    run("softmax", KV("use_length", "True"), MX_SHAPE(3, 5, 7), init_lengths, 11);
    run("softmax", KV("use_length", "True", "axis", "1"), MX_SHAPE(3, 7, 4), init_lengths, 12);
    run("softmax", KV("use_length", "True", "axis", "0", "temperature", "1.5"), MX_SHAPE(8, 3, 2), init_lengths,
        13);
}
END_TEST

/* ------------------------------------------------------------ LeakyReLU */

START_TEST(test_leaky_relu_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("LeakyReLU", KV0, MX_SHAPE(3, 5, 7), init_act, 1);
    run("LeakyReLU", KV("act_type", "leaky", "slope", "0.1"), MX_SHAPE(2, 3, 7, 5), init_act, 2);
    run("LeakyReLU", KV("act_type", "elu"), MX_SHAPE(3, 4, 5), init_act, 3);
    run("LeakyReLU", KV("act_type", "elu", "slope", "0.3"), MX_SHAPE(7, 9), init_act, 4);
    run("LeakyReLU", KV("act_type", "selu"), MX_SHAPE(2, 3, 7, 5), init_act, 5);
    run("LeakyReLU", KV("act_type", "gelu"), MX_SHAPE(3, 5, 7), init_act, 6);
    run("LeakyReLU", KV("act_type", "gelu"), MX_SHAPE(1000), init_act, 7);
    /* prelu: gamma per channel, shared (1,), 2-D and 1-D data */
    run("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(3, 5, 7, 4), init_act, 8);
    run2("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(3, 5, 7, 4), MX_SHAPE(1), init_act, 0, 0, 0, 9);
    run("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(7, 6), init_act, 10);
    run("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(11), init_act, 11);
    run("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(2, 3, 4, 5, 6), init_act, 12);
    run("LeakyReLU", KV("act_type", "prelu"), MX_SHAPE(16, 3, 33, 17), init_act, 13);
}
END_TEST

/* ------------------------------------------------------------ regression */

START_TEST(test_regression_output_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    static const char *const ops[] = {"LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"};
    for (int k = 0; k < 3; k++) {
        const uint64_t s = 10 * (uint64_t)k;
        run(ops[k], KV0, MX_SHAPE(7, 5), init_labels, s + 1);
        run(ops[k], KV("grad_scale", "0.5"), MX_SHAPE(7, 1), init_labels, s + 2); /* 1-D label */
        run(ops[k], KV("grad_scale", "3"), MX_SHAPE(3, 2, 4, 5), init_labels, s + 3);
        run2(ops[k], KV("grad_scale", "2"), MX_SHAPE(4, 6), MX_SHAPE(4, 2, 3), init_labels, 0, 0, 0, s + 4);
        run(ops[k], KV0, MX_SHAPE(9), NULL, s + 5);
    }
}
END_TEST

/* ------------------------------------------------------------ shapes */

START_TEST(test_slice_channel_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("SliceChannel", KV("num_outputs", "3"), MX_SHAPE(2, 6, 5), NULL, 1);
    run("SliceChannel", KV("num_outputs", "2", "axis", "0"), MX_SHAPE(4, 3, 5), NULL, 2);
    run("SliceChannel", KV("num_outputs", "5", "axis", "-1"), MX_SHAPE(3, 7, 10), NULL, 3);
    run("SliceChannel", KV("num_outputs", "4", "squeeze_axis", "True"), MX_SHAPE(3, 4, 5), NULL, 4);
    run("SliceChannel", KV("num_outputs", "3", "axis", "2", "squeeze_axis", "1"), MX_SHAPE(2, 5, 3, 7), NULL, 5);
    run("SliceChannel", KV("num_outputs", "4", "axis", "0", "squeeze_axis", "True"), MX_SHAPE(4), NULL, 6);
    run("split", KV("num_outputs", "1"), MX_SHAPE(3, 5), NULL, 7);
    run("split", KV("num_outputs", "7", "axis", "1"), MX_SHAPE(3, 7), NULL, 8);
}
END_TEST

START_TEST(test_transpose_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("transpose", KV0, MX_SHAPE(3, 5, 7), NULL, 1);
    run("transpose", KV("axes", "(0, 2, 1)"), MX_SHAPE(3, 5, 7), NULL, 2);
    run("transpose", KV("axes", "(1, 0)"), MX_SHAPE(13, 11), NULL, 3);
    run("transpose", KV("axes", "(3, 1, 0, 2)"), MX_SHAPE(2, 3, 5, 7), NULL, 4);
    run("transpose", KV("axes", "(-1, 0, 1)"), MX_SHAPE(4, 3, 6), NULL, 5);
    run("transpose", KV0, MX_SHAPE(9), NULL, 6);
    run("transpose", KV("axes", "(0, 1, 2)"), MX_SHAPE(2, 3, 4), NULL, 7);
    run("transpose", KV("axes", "(4, 2, 0, 3, 1)"), MX_SHAPE(2, 3, 1, 5, 4), NULL, 8);
}
END_TEST

/* ------------------------------------------------------------ Embedding */

START_TEST(test_embedding_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("Embedding", KV("input_dim", "10", "output_dim", "6"), MX_SHAPE(3, 7), init_indices, 1);
    run("Embedding", KV("input_dim", "5", "output_dim", "17"), MX_SHAPE(13), init_indices, 2);
    run("Embedding", KV("input_dim", "3", "output_dim", "1"), MX_SHAPE(2, 3, 4), init_indices, 3);
    run("Embedding", KV("input_dim", "12", "output_dim", "33", "sparse_grad", "True"), MX_SHAPE(50, 20),
        init_indices, 4);
}
END_TEST

/* ------------------------------------------------------------ batch_dot */

START_TEST(test_batch_dot_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run2("batch_dot", KV0, MX_SHAPE(3, 4, 5), MX_SHAPE(3, 5, 6), NULL, 0, 0, 0, 1);
    run2("batch_dot", KV("transpose_a", "True"), MX_SHAPE(3, 5, 4), MX_SHAPE(3, 5, 6), NULL, 0, 0, 0, 2);
    run2("batch_dot", KV("transpose_b", "True"), MX_SHAPE(3, 4, 5), MX_SHAPE(3, 6, 5), NULL, 0, 0, 0, 3);
    run2("batch_dot", KV("transpose_a", "True", "transpose_b", "True"), MX_SHAPE(3, 5, 4), MX_SHAPE(3, 6, 5), NULL,
         0, 0, 0, 4);
    run2("batch_dot", KV0, MX_SHAPE(2, 3, 7, 9), MX_SHAPE(2, 3, 9, 1), NULL, 0, 0, 0, 5);
    run2("batch_dot", KV("transpose_b", "True"), MX_SHAPE(5, 1, 8), MX_SHAPE(5, 3, 8), NULL, 0, 0, 0, 6);
    run2("batch_dot", KV("transpose_a", "True"), MX_SHAPE(1, 33, 17), MX_SHAPE(1, 33, 20), NULL, 0, 0, 0, 7);
}
END_TEST

/* ------------------------------------------------------------ registration */

static const char *const gpu_ops[] = {
    "softmax", "log_softmax", "LeakyReLU", "LinearRegressionOutput", "LogisticRegressionOutput",
    "MAERegressionOutput", "SliceChannel", "transpose", "Embedding", "batch_dot",
};
#define N_GPU_OPS ((int)(sizeof(gpu_ops) / sizeof(gpu_ops[0])))

/* Every CUDA build has the kernels (dropping one fails here, GPU or not). */
START_TEST(test_gpu_kernels_registered)
{
    for (int i = 0; i < N_GPU_OPS; i++) {
        const mx_op_def *op = mx_op_find(gpu_ops[i]);
        ck_assert_msg(op != NULL, "%s not registered", gpu_ops[i]);
#ifdef MX_USE_CUDA
        ck_assert_msg(op->gpu != NULL && op->gpu->forward && op->gpu->backward, "%s has no GPU kernels", gpu_ops[i]);
#else
        ck_assert_msg(op->gpu == NULL, "%s has GPU kernels in a build without CUDA", gpu_ops[i]);
#endif
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_misc");
    TCase *reg = tcase_create("registration");
    tcase_add_test(reg, test_gpu_kernels_registered);
    suite_add_tcase(s, reg);
    const bool gpu = gpucheck_gpu_visible();
    if (gpu) {
        TCase *tc = tcase_create("consistency");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_softmax_gpu_vs_cpu);
        tcase_add_test(tc, test_leaky_relu_gpu_vs_cpu);
        tcase_add_test(tc, test_regression_output_gpu_vs_cpu);
        tcase_add_test(tc, test_slice_channel_gpu_vs_cpu);
        tcase_add_test(tc, test_transpose_gpu_vs_cpu);
        tcase_add_test(tc, test_embedding_gpu_vs_cpu);
        tcase_add_test(tc, test_batch_dot_gpu_vs_cpu);
        suite_add_tcase(s, tc);
    }
    if (!gpu) printf("GPU tests: SKIPPED (no GPU visible)\n");
    SRunner *sr = srunner_create(s);
    /* One process: the summary accumulates across tests (and a CUDA
     * context does not survive fork). */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (gpu) gpucheck_print_summary("misc", &sum);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
