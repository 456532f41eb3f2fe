/*
 * test_gpu_half.c - mixed precision on the GPU (fit.dtype): the float16
 * and bfloat16 GPU kernels of every layer the shipped configs use, each in
 * a small graph made by mx_graph_compute_in (Casts around it, float32
 * weights and loss), trained for a step on gpu(0) and on the CPU (whose
 * half-precision nodes run the float32 kernels between half tensors: the
 * same storage rounding, float arithmetic), outputs, every gradient and
 * the moving statistics compared within the format's rounding; CUDA
 * graphs replaying a float16 step with a changing loss scale.
 * Everywhere (CUDA builds): every such operator declares float16 and
 * bfloat16 GPU kernels, so adding a layer to the configs without them
 * fails here, and a layer without them is refused at bind naming it.
 */
#include "device/device.h"
#include "executor/executor.h"
#include "support/gpucheck.h"
#include "support/gputwin.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MX_USE_CUDA
/* What the config nets run in half precision (SoftmaxOutput runs on the
 * float32 Cast of its input). */
static const char *const half_ops[] = {"Activation", "BatchNorm", "Cast", "Concat", "Convolution", "Deconvolution",
                                       "Dropout", "ElementWiseSum", "Flatten", "FullyConnected", "LRN", "Pooling",
                                       "Reshape", "clip", NULL};
#endif

START_TEST(test_config_ops_have_half_gpu_kernels)
{
#ifdef MX_USE_CUDA
    int missing = 0;
    for (int i = 0; half_ops[i]; i++) {
        const mx_op_def *op = mx_op_find(half_ops[i]);
        ck_assert_ptr_nonnull(op);
        ck_assert_ptr_nonnull(op->gpu);
        if ((op->gpu->dtypes & MX_HALF_DTYPES) != MX_HALF_DTYPES) {
            printf("no float16/bfloat16 GPU kernels: %s\n", half_ops[i]);
            missing++;
        }
    }
    ck_assert_msg(missing == 0, "%d operators of the config nets lack half-precision GPU kernels", missing);
#endif
}
END_TEST

/* ------------------------------------------------------------ on a GPU */

static uint64_t rng_state = 5;

/* g bound on both devices as mx_graph_compute_in(g, dtype) makes it. */
static void bind_twin(gputwin *t, mx_graph *g, mx_dtype dtype, mx_shape data_shape, int n_classes, bool gpu_graph)
{
    mx_graph *mixed = NULL;
    ck_assert_msg(mx_graph_compute_in(g, dtype, &mixed) == MX_OK, "%s", mx_last_error());
    rng_state = 5;
    gputwin_bind(t, g, mixed, data_shape, n_classes, gpu_graph, &rng_state);
}

static double worst_seen;

/* Within rtol of the tensor's largest value: both devices store every
 * layer's result in the half type, so they differ by a rounding of that
 * type wherever their float sums differ in the last bits (a value near a
 * tie rounds apart: one unit in the last place, 2^-11 of it for float16,
 * 2^-8 for bfloat16), carried through the layers after it. A wrong index or
 * a missed write errs by the tensor's own scale. */
static void expect_close(const char *case_name, const char *what, mx_ndarray *cpu, mx_ndarray *gpu, double rtol)
{
    int64_t n = mx_ndarray_size(cpu);
    ck_assert_int_eq(n, mx_ndarray_size(gpu));
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    ck_assert_msg(mx_ndarray_to_host(cpu, a, sizeof(float) * (size_t)n) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_ndarray_to_host(gpu, b, sizeof(float) * (size_t)n) == MX_OK, "%s", mx_last_error());
    double scale = 1e-6;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)a[i] - b[i]), tol = rtol * scale;
        ck_assert_msg(isfinite(b[i]) && err <= tol, "%s: %s[%lld]: gpu %.9g cpu %.9g (max |cpu| %.3g)", case_name, what,
                      (long long)i, b[i], a[i], scale);
        if (err / tol > worst_seen) worst_seen = err / tol;
    }
    free(a);
    free(b);
}

/* One training step (and an inference pass) on both devices, compared. */
static void compare_step(gputwin *t, const char *case_name, double rtol, bool train_outputs)
{
    for (int d = 0; d < 2; d++) {
        ck_assert_msg(mx_executor_forward(t->ex[d], true) == MX_OK, "%s: %s", case_name, mx_last_error());
        ck_assert_msg(mx_executor_backward(t->ex[d], NULL) == MX_OK, "%s: %s", case_name, mx_last_error());
    }
    if (train_outputs) expect_close(case_name, "output", mx_executor_output(t->ex[0], 0), mx_executor_output(t->ex[1], 0), rtol);
    for (int i = 0; i < t->n_args + t->n_aux && train_outputs; i++) {
        const char *name = mx_graph_node(t->g, t->ids[i])->name;
        if (i >= t->n_args) expect_close(case_name, name, t->arr[0][i], t->arr[1][i], rtol);
        else if (t->grad[0][i]) expect_close(case_name, name, t->grad[0][i], t->grad[1][i], rtol);
    }
    for (int d = 0; d < 2; d++)
        ck_assert_msg(mx_executor_forward(t->ex[d], false) == MX_OK, "%s: %s", case_name, mx_last_error());
    expect_close(case_name, "inference output", mx_executor_output(t->ex[0], 0), mx_executor_output(t->ex[1], 0), rtol);
}

/* data -> layer(s) -> Flatten -> SoftmaxOutput over the flattened values. */
static mx_graph *one_layer(const char *op, const char *params, int n_classes_unused)
{
    (void)n_classes_unused;
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry y = test_entry(test_graph_op(g, op, "layer", params, &x, 1));
    y = test_entry(test_graph_op(g, "Flatten", "flatten", NULL, &y, 1));
    y = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &y, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    return g;
}

typedef struct layer_case {
    const char *op, *params;
    mx_shape data;
    int classes;        /* the flattened output's width */
    bool train_outputs; /* false: training passes differ by design (Dropout's masks) */
} layer_case;

static const layer_case layer_cases[] = {
    {"Convolution", "kernel=(3,3);pad=(1,1);num_filter=8;cudnn_tune=off", {4, {4, 3, 8, 8}}, 512, true},
    {"Convolution", "kernel=(1,1);stride=(2,2);num_filter=6;no_bias=1", {4, {4, 8, 8, 8}}, 96, true},
    {"Convolution", "kernel=(3,3);pad=(1,1);num_filter=8;num_group=4", {4, {2, 8, 6, 6}}, 288, true},
    {"Convolution", "kernel=(3,3);pad=(1,1);num_filter=8", {4, {4, 16, 7, 7}}, 392, true}, /* timed choice */
    {"Deconvolution", "kernel=(3,3);stride=(2,2);num_filter=4", {4, {2, 3, 5, 5}}, 484, true},
    {"BatchNorm", "fix_gamma=0", {4, {4, 6, 5, 5}}, 150, true},
    {"BatchNorm", "fix_gamma=1;momentum=0.8", {4, {4, 6, 5, 5}}, 150, true},
    {"BatchNorm", "use_global_stats=1", {4, {4, 6, 5, 5}}, 150, true},
    {"Pooling", "pool_type=max;kernel=(3,3);stride=(2,2);pad=(1,1)", {4, {3, 4, 9, 9}}, 100, true},
    {"Pooling", "pool_type=avg;kernel=(2,2);stride=(2,2)", {4, {3, 4, 8, 8}}, 64, true},
    {"Pooling", "pool_type=avg;global_pool=1;kernel=(1,1)", {4, {3, 5, 6, 6}}, 5, true},
    {"Activation", "act_type=relu", {4, {3, 4, 5, 5}}, 100, true},
    {"Activation", "act_type=sigmoid", {4, {3, 4, 5, 5}}, 100, true},
    {"Activation", "act_type=tanh", {4, {3, 4, 5, 5}}, 100, true},
    {"Activation", "act_type=softrelu", {4, {3, 4, 5, 5}}, 100, true},
    {"clip", "a_min=-0.5;a_max=0.5", {4, {3, 4, 5, 5}}, 100, true},
    {"FullyConnected", "num_hidden=7", {2, {5, 12}}, 7, true},
    {"FullyConnected", "num_hidden=9;no_bias=1", {4, {5, 3, 2, 2}}, 9, true},
    {"LRN", "nsize=5", {4, {2, 7, 4, 4}}, 112, true},
    {"Dropout", "p=0.5", {4, {3, 4, 5, 5}}, 100, false},
};

START_TEST(test_layers_match_the_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    const mx_dtype dtypes[2] = {MX_FLOAT16, MX_BFLOAT16};
    const double rtol[2] = {1e-2, 6e-2};
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof(layer_cases) / sizeof(layer_cases[0]); c++) {
            const layer_case *lc = &layer_cases[c];
            char name[256];
            snprintf(name, sizeof(name), "%s %s(%s)", mx_dtype_name(dtypes[k]), lc->op, lc->params);
            gputwin t;
            bind_twin(&t, one_layer(lc->op, lc->params, lc->classes), dtypes[k], lc->data, lc->classes, false);
            compare_step(&t, name, rtol[k], lc->train_outputs);
            gputwin_unbind(&t);
        }
    printf("GPU half precision: %zu layers in float16 and bfloat16 match the CPU (worst %.3g of tolerance)\n",
           sizeof(layer_cases) / sizeof(layer_cases[0]), worst_seen);
    worst_seen = 0;
}
END_TEST

/* Joins and sums: two branches (conv, and conv -> relu) into Concat and
 * ElementWiseSum, then BatchNorm, FullyConnected. */
static mx_graph *branches(void)
{
    mx_entry x;
    mx_graph *g = test_graph_new(&x);
    mx_entry a = test_entry(test_graph_op(g, "Convolution", "ca", "kernel=(3,3);pad=(1,1);num_filter=4", &x, 1));
    mx_entry b = test_entry(test_graph_op(g, "Convolution", "cb", "kernel=(1,1);num_filter=4", &x, 1));
    b = test_entry(test_graph_op(g, "Activation", "rb", "act_type=relu", &b, 1));
    mx_entry two[2] = {a, b};
    mx_entry cat = test_entry(test_graph_op(g, "Concat", "cat", "num_args=2;dim=1", two, 2));
    mx_entry sum = test_entry(test_graph_op(g, "ElementWiseSum", "sum", "num_args=2", two, 2));
    sum = test_entry(test_graph_op(g, "BatchNorm", "bn", "fix_gamma=0", &sum, 1));
    mx_entry both[2] = {cat, sum};
    mx_entry y = test_entry(test_graph_op(g, "Concat", "cat2", "num_args=2;dim=1", both, 2));
    y = test_entry(test_graph_op(g, "Reshape", "flat", "shape=(0,-1)", &y, 1));
    y = test_entry(test_graph_op(g, "FullyConnected", "fc", "num_hidden=5", &y, 1));
    y = test_entry(test_graph_op(g, "SoftmaxOutput", "softmax", NULL, &y, 1));
    ck_assert_int_eq(mx_graph_set_heads(g, &y, 1), MX_OK);
    return g;
}

START_TEST(test_joins_match_the_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    gputwin t;
    bind_twin(&t, branches(), MX_FLOAT16, MX_SHAPE(4, 3, 6, 6), 5, false);
    compare_step(&t, "float16 branches", 1e-2, true);
    gputwin_unbind(&t);
    bind_twin(&t, branches(), MX_BFLOAT16, MX_SHAPE(4, 3, 6, 6), 5, false);
    compare_step(&t, "bfloat16 branches", 6e-2, true);
    gputwin_unbind(&t);
}
END_TEST

/* CUDA graphs with float16 and a loss scale that changes between steps:
 * each step's gradients are the scale times the unscaled step's (a power
 * of two: exact), so a graph replayed with a stale scale fails. */
START_TEST(test_cuda_graphs_follow_the_loss_scale)
{
    if (!gpucheck_gpu_visible()) return;
    gputwin t;
    bind_twin(&t, branches(), MX_FLOAT16, MX_SHAPE(4, 3, 6, 6), 5, true);
    const float scales[4] = {1.0f, 1.0f, 8.0f, 8.0f};
    for (int step = 0; step < 4; step++) {
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(mx_executor_set_loss_scale(t.ex[d], scales[step]), MX_OK);
            ck_assert_msg(mx_executor_forward(t.ex[d], true) == MX_OK, "%s", mx_last_error());
            ck_assert_msg(mx_executor_backward(t.ex[d], NULL) == MX_OK, "%s", mx_last_error());
        }
        for (int i = 0; i < t.n_args; i++)
            if (t.grad[0][i]) expect_close("float16 graphs", mx_graph_node(t.g, t.ids[i])->name, t.grad[0][i], t.grad[1][i], 1e-2);
        gputwin_upload(&t); /* the same weights and statistics again: only the scale moves the gradients */
    }
    ck_assert_msg(!*mx_executor_graph_refusal(t.ex[1], true, true), "%s", mx_executor_graph_refusal(t.ex[1], true, true));
    ck_assert_int_ge(mx_executor_graph_launches(t.ex[1]), 4);
    gputwin_unbind(&t);
}
END_TEST

static void tests_everywhere(TCase *tc) { tcase_add_test(tc, test_config_ops_have_half_gpu_kernels); }

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, test_layers_match_the_cpu);
    tcase_add_test(tc, test_joins_match_the_cpu);
    tcase_add_test(tc, test_cuda_graphs_follow_the_loss_scale);
}

int main(void) { return gpucheck_main("half", tests_everywhere, tests_on_gpu, 600, NULL); }
