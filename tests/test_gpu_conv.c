/*
 * test_gpu_conv.c - the GPU kernels of Convolution (cuDNN), Pooling and
 * LRN against their CPU twins (gpucheck): every parameter value the GPU
 * supports, odd sizes, forward and backward with write / add / null
 * requests. Without a visible GPU the comparisons are skipped; the
 * registration checks run in every CUDA build.
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

static void run(const char *op, kv p, mx_shape data, double rtol, double atol, opcheck_init_fn init, uint64_t seed)
{
    gpucheck_case c = {.op = op, .keys = p.keys, .values = p.values, .n_params = p.n, .init = init,
                       .rtol = rtol, .atol = atol, .seed = seed};
    c.in_shapes[0] = data;
    gpucheck_run(&c, &sum);
}

/* cuDNN may pick FFT or Winograd algorithms, whose fp32 rounding differs
 * from im2col + SGEMM by more than the default 1e-4 / 1e-5; an indexing
 * mistake is still far outside this. */
#define CONV_RTOL 1e-3
#define CONV_ATOL 1e-4

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

/* Each Convolution case twice: on cuDNN's legacy algorithms alone
 * (MX_CUDNN_GRAPH=0) and with the forward on the backend (graph) API
 * whenever it has a plan for the shape (MX_CUDNN_GRAPH=2; the default
 * picks one of the two per shape by timing). */
static void conv(kv p, mx_shape data, uint64_t seed)
{
    const char *was = getenv("MX_CUDNN_GRAPH");
    char *saved = was ? strdup(was) : NULL;
    static const char *const modes[] = {"0", "2"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(setenv("MX_CUDNN_GRAPH", modes[i], 1), 0);
        run("Convolution", p, data, CONV_RTOL, CONV_ATOL, NULL, seed);
    }
    if (saved) setenv("MX_CUDNN_GRAPH", saved, 1);
    else unsetenv("MX_CUDNN_GRAPH");
    free(saved);
}

START_TEST(test_convolution_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    /* heuristics (cudnn_tune=off) */
    conv(KV("kernel", "(3, 3)", "num_filter", "4", "cudnn_tune", "off"), MX_SHAPE(2, 3, 7, 5), 1);
    conv(KV("kernel", "(3, 3)", "num_filter", "5", "stride", "(2, 2)", "pad", "(1, 1)", "cudnn_tune", "off"),
         MX_SHAPE(3, 4, 9, 7), 2);
    /* default tuning (None = limited_workspace: timing runs, cached state) */
    conv(KV("kernel", "(3, 3)", "num_filter", "5", "stride", "(2, 2)", "pad", "(1, 1)"), MX_SHAPE(3, 4, 9, 7), 3);
    conv(KV("kernel", "(3, 2)", "num_filter", "3", "dilate", "(2, 2)", "pad", "(2, 1)", "no_bias", "True"),
         MX_SHAPE(2, 3, 11, 8), 4);
    conv(KV("kernel", "(2, 3)", "num_filter", "4", "stride", "(1, 3)", "dilate", "(3, 1)"), MX_SHAPE(2, 2, 10, 11),
         5);
    /* groups, depthwise, depthwise with a channel multiplier */
    conv(KV("kernel", "(3, 3)", "num_filter", "6", "num_group", "2", "pad", "(1, 1)"), MX_SHAPE(2, 4, 7, 5), 6);
    conv(KV("kernel", "(3, 3)", "num_filter", "6", "num_group", "6", "pad", "(1, 1)", "stride", "(2, 2)"),
         MX_SHAPE(3, 6, 8, 7), 7);
    conv(KV("kernel", "(3, 3)", "num_filter", "6", "num_group", "3", "no_bias", "True", "cudnn_tune", "off"),
         MX_SHAPE(2, 3, 6, 6), 8);
    /* 1-D */
    conv(KV("kernel", "(5,)", "num_filter", "6", "stride", "(2,)", "pad", "(2,)"), MX_SHAPE(3, 4, 17), 9);
    conv(KV("kernel", "(3,)", "num_filter", "4", "dilate", "(3,)", "num_group", "2", "no_bias", "True",
            "layout", "NCW", "cudnn_tune", "off"),
         MX_SHAPE(2, 4, 13), 10);
    /* 1x1, a big strided kernel, batch 1 */
    conv(KV("kernel", "(1, 1)", "num_filter", "4"), MX_SHAPE(2, 8, 5, 7), 11);
    conv(KV("kernel", "(7, 7)", "num_filter", "3", "stride", "(3, 3)", "pad", "(3, 3)", "layout", "NCHW"),
         MX_SHAPE(1, 3, 19, 17), 12);
    /* workspace limits and the tuning modes */
    conv(KV("kernel", "(3, 3)", "num_filter", "4", "pad", "(1, 1)", "workspace", "0", "cudnn_tune", "off"),
         MX_SHAPE(2, 3, 8, 8), 13);
    conv(KV("kernel", "(3, 3)", "num_filter", "4", "pad", "(1, 1)", "workspace", "1", "cudnn_tune",
            "limited_workspace"),
         MX_SHAPE(2, 3, 8, 8), 14);
    conv(KV("kernel", "(5, 5)", "num_filter", "4", "pad", "(2, 2)", "cudnn_tune", "fastest"), MX_SHAPE(2, 3, 12, 12),
         15);
    conv(KV("kernel", "(3, 3)", "num_filter", "8", "cudnn_tune", "fastest", "num_group", "4"), MX_SHAPE(2, 8, 9, 9),
         16);
    /* shapes of ResNet's classes for the backend path: a strided 1x1
     * (downsampling), a wider 1x1, a 3x3 on heuristics (untimed), a strided
     * dilated 3x3 */
    conv(KV("kernel", "(1, 1)", "num_filter", "16", "stride", "(2, 2)", "no_bias", "True"), MX_SHAPE(2, 12, 9, 11),
         17);
    conv(KV("kernel", "(1, 1)", "num_filter", "32"), MX_SHAPE(4, 32, 14, 14), 18);
    conv(KV("kernel", "(3, 3)", "num_filter", "24", "pad", "(1, 1)", "cudnn_tune", "off"), MX_SHAPE(2, 16, 12, 12),
         19);
    conv(KV("kernel", "(3, 3)", "num_filter", "8", "pad", "(2, 2)", "dilate", "(2, 2)", "stride", "(2, 2)"),
         MX_SHAPE(2, 8, 13, 11), 20);
}
END_TEST

/* Values on a coarse grid, so windows hold several equal maxima: the
 * gradient must go to the first (raster order), as on the CPU. */
static void ties_init(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) data[i] = floorf((float)opcheck_uniform(rng, -1, 1) * 2.0f) / 2.0f;
}

/* Each case twice: with mxc's own kernels (cudnn_off=True), forward and
 * backward in full; and by default, where max / avg cases cuDNN can
 * express exactly run on cuDNN (pooling.cu) and the rest on the own
 * kernels again. With ties (ties_init) the default run compares the
 * forward only: cuDNN routes a tied maximum's gradient to a maximum of its
 * own choosing, not necessarily the CPU's first in raster order. */
static void pool(kv p, mx_shape data, opcheck_init_fn init, uint64_t seed)
{
    kv own = p;
    ck_assert_int_lt(own.n, 8);
    own.keys[own.n] = "cudnn_off";
    own.values[own.n++] = "True";
    run("Pooling", own, data, 0, 0, init, seed);
    gpucheck_case c = {.op = "Pooling", .keys = p.keys, .values = p.values, .n_params = p.n, .init = init,
                       .no_backward = init == ties_init, .seed = seed};
    c.in_shapes[0] = data;
    gpucheck_run(&c, &sum);
}

START_TEST(test_pooling_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    /* max */
    pool(KV("kernel", "(2, 2)", "stride", "(2, 2)"), MX_SHAPE(2, 3, 8, 8), NULL, 1);
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pooling_convention", "full"),
         MX_SHAPE(2, 3, 7, 5), NULL, 2);
    pool(KV("kernel", "(3, 3)", "stride", "(1, 1)"), MX_SHAPE(2, 2, 6, 7), ties_init, 3);
    pool(KV("kernel", "(3, 2)", "stride", "(2, 1)", "pad", "(1, 1)", "pooling_convention", "full"),
         MX_SHAPE(3, 2, 7, 6), ties_init, 4);
    pool(KV("kernel", "(2, 2)", "stride", "(2, 2)"), MX_SHAPE(2, 3, 7, 5), ties_init, 5); /* uncovered last row/col */
    /* avg, padding counted or not, both conventions */
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", "avg", "pooling_convention",
            "full"),
         MX_SHAPE(3, 2, 7, 5), NULL, 6);
    pool(KV("kernel", "(2, 3)", "stride", "(1, 2)", "pad", "(1, 1)", "pool_type", "avg", "count_include_pad",
            "False"),
         MX_SHAPE(2, 3, 7, 6), NULL, 7);
    pool(KV("kernel", "(3, 3)", "stride", "(3, 3)", "pad", "(1, 1)", "pool_type", "avg", "pooling_convention",
            "full", "count_include_pad", "False"),
         MX_SHAPE(2, 2, 8, 8), NULL, 8);
    pool(KV("kernel", "(3, 3)", "stride", "(3, 3)", "pad", "(1, 1)", "pool_type", "avg", "pooling_convention",
            "full"),
         MX_SHAPE(2, 2, 8, 8), NULL, 9);
    /* sum */
    pool(KV("kernel", "(2, 2)", "stride", "(1, 1)", "pool_type", "sum"), MX_SHAPE(2, 2, 5, 7), NULL, 10);
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", "sum", "pooling_convention",
            "full"),
         MX_SHAPE(2, 3, 6, 9), NULL, 11);
    /* windows lying wholly in the padding (full): max -FLT_MAX, avg 0 or NaN */
    pool(KV("kernel", "(3, 3)", "stride", "(4, 4)", "pad", "(2, 2)", "pooling_convention", "full"),
         MX_SHAPE(2, 2, 2, 3), NULL, 12);
    pool(KV("kernel", "(3, 3)", "stride", "(4, 4)", "pad", "(2, 2)", "pooling_convention", "full", "pool_type", "avg",
            "count_include_pad", "False"),
         MX_SHAPE(2, 2, 2, 3), NULL, 13);
    pool(KV("kernel", "(3, 3)", "stride", "(4, 4)", "pad", "(2, 2)", "pooling_convention", "full", "pool_type", "avg"),
         MX_SHAPE(2, 2, 2, 3), NULL, 14);
    /* global pooling (kernel ignored) */
    pool(KV("global_pool", "True"), MX_SHAPE(2, 3, 7, 5), NULL, 15);
    pool(KV("global_pool", "True"), MX_SHAPE(2, 3, 4, 5), ties_init, 16);
    pool(KV("global_pool", "True", "pool_type", "avg", "kernel", "(2, 2)"), MX_SHAPE(3, 4, 5, 5), NULL, 17);
    pool(KV("global_pool", "True", "pool_type", "sum"), MX_SHAPE(2, 3, 9), NULL, 18);
    pool(KV("global_pool", "True", "pool_type", "avg"), MX_SHAPE(2, 2, 3, 4, 5), NULL, 19);
    /* 1-D and 3-D */
    pool(KV("kernel", "(3,)", "stride", "(2,)", "pooling_convention", "full"), MX_SHAPE(3, 4, 11), NULL, 20);
    pool(KV("kernel", "(4,)", "stride", "(3,)", "pad", "(1,)", "pool_type", "avg", "layout", "NCW"),
         MX_SHAPE(2, 3, 13), NULL, 21);
    pool(KV("kernel", "(2, 2, 2)", "stride", "(1, 2, 2)", "pad", "(1, 0, 1)", "pool_type", "avg"),
         MX_SHAPE(2, 2, 5, 6, 7), NULL, 22);
    pool(KV("kernel", "(2, 3, 2)", "stride", "(2, 2, 2)", "pooling_convention", "full"), MX_SHAPE(2, 2, 5, 6, 7),
         ties_init, 23);
    pool(KV("kernel", "(3, 3, 3)", "stride", "(2, 2, 2)", "pad", "(1, 1, 1)", "pool_type", "sum", "layout", "NCDHW"),
         MX_SHAPE(1, 3, 5, 5, 6), NULL, 24);
    /* cases aimed at the cuDNN path (valid, or full whose ceil equals the floor) */
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)"), MX_SHAPE(3, 5, 13, 11), NULL, 25);
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)"), MX_SHAPE(2, 4, 16, 16), NULL, 26); /* pool1 */
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", "avg"), MX_SHAPE(3, 5, 13, 11),
         NULL, 27);
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", "avg", "count_include_pad",
            "False"),
         MX_SHAPE(3, 5, 13, 11), NULL, 28);
    pool(KV("kernel", "(2, 3)", "stride", "(1, 2)", "pad", "(1, 2)", "pool_type", "avg", "count_include_pad",
            "True"),
         MX_SHAPE(2, 3, 9, 10), NULL, 29);
    pool(KV("global_pool", "True", "pool_type", "avg"), MX_SHAPE(3, 5, 7, 7), NULL, 30);
    pool(KV("global_pool", "True", "pool_type", "max"), MX_SHAPE(3, 5, 13, 11), NULL, 31);
    pool(KV("global_pool", "True", "pool_type", "avg"), MX_SHAPE(2, 3, 11), NULL, 32); /* 1-d global */
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pooling_convention", "full"), MX_SHAPE(2, 3, 7, 9), NULL,
         33); /* full == valid here: cuDNN */
    pool(KV("kernel", "(3,)", "stride", "(2,)", "pad", "(1,)"), MX_SHAPE(3, 4, 11), NULL, 34); /* 1-d as 1 x W */
    pool(KV("kernel", "(1, 3, 3)", "stride", "(1, 2, 2)", "pad", "(0, 1, 1)", "pool_type", "avg"),
         MX_SHAPE(2, 3, 1, 7, 6), NULL, 35); /* 3-d with a trivial depth */
    pool(KV("kernel", "(5, 5)", "stride", "(1, 1)", "pad", "(2, 2)", "pool_type", "avg", "count_include_pad",
            "False"),
         MX_SHAPE(2, 2, 6, 5), NULL, 36);
    /* must fall back: full with a clipped last window, padding >= window */
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pooling_convention", "full"), MX_SHAPE(2, 3, 8, 8), NULL, 37);
    pool(KV("kernel", "(3, 3)", "stride", "(2, 2)", "pad", "(1, 1)", "pool_type", "avg", "pooling_convention",
            "full", "count_include_pad", "False"),
         MX_SHAPE(2, 3, 8, 8), NULL, 38);
    pool(KV("kernel", "(2, 2)", "stride", "(1, 1)", "pad", "(2, 2)"), MX_SHAPE(2, 2, 5, 4), NULL, 39);
}
END_TEST

static void lrn(const char *nsize, const char *alpha, const char *beta, const char *knorm, mx_shape data,
                uint64_t seed)
{
    run("LRN", KV("nsize", nsize, "alpha", alpha, "beta", beta, "knorm", knorm), data, 0, 0, NULL, seed);
}

START_TEST(test_lrn_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    lrn("5", "0.0001", "0.75", "2", MX_SHAPE(2, 5, 3, 4), 1);
    lrn("3", "0.5", "0.75", "1", MX_SHAPE(2, 5, 3, 4), 2);
    lrn("5", "2", "0.75", "2", MX_SHAPE(2, 7, 5, 5), 3);
    lrn("5", "1.5", "0.5", "1", MX_SHAPE(1, 3, 2, 2), 4);  /* window wider than the channels */
    lrn("1", "0.9", "1.25", "0.5", MX_SHAPE(3, 4, 1, 3), 5); /* each channel alone */
    lrn("4", "1", "0.75", "1", MX_SHAPE(2, 6, 3, 3), 6);     /* even nsize */
    lrn("7", "0.3", "0.6", "2", MX_SHAPE(1, 9, 7, 5), 7);
    lrn("5", "0.0001", "0.75", "2", MX_SHAPE(3, 16, 13, 11), 8);
}
END_TEST

/* Every CUDA build has the kernels (dropping one fails here, GPU or not),
 * and cudnn_off=True is refused by name before anything touches a device. */
START_TEST(test_gpu_kernels_registered)
{
#ifdef MX_USE_CUDA
    static const char *const ops[] = {"Convolution", "Pooling", "LRN"};
    for (int i = 0; i < 3; i++) {
        const mx_op_def *op = mx_op_find(ops[i]);
        ck_assert_ptr_nonnull(op);
        ck_assert_msg(op->gpu != NULL && op->gpu->forward && op->gpu->backward, "%s has no GPU kernels", ops[i]);
    }
    const char *k[] = {"kernel", "num_filter", "cudnn_off"}, *v[] = {"(3, 3)", "4", "True"};
    gpucheck_refused("Convolution", k, v, 3, "cudnn_off");
#else
    ck_assert_ptr_null(mx_op_find("Convolution")->gpu);
    ck_assert_ptr_null(mx_op_find("Pooling")->gpu);
    ck_assert_ptr_null(mx_op_find("LRN")->gpu);
#endif
}
END_TEST

static void tests_everywhere(TCase *tc)
{
    tcase_add_test(tc, test_gpu_kernels_registered);
}

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, test_convolution_gpu_vs_cpu);
    tcase_add_test(tc, test_pooling_gpu_vs_cpu);
    tcase_add_test(tc, test_lrn_gpu_vs_cpu);
}

int main(void)
{
    return gpucheck_main("conv", tests_everywhere, tests_on_gpu, 300, &sum);
}
