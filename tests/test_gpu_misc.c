/*
 * test_gpu_misc.c - the GPU kernels of softmax / log_softmax, LeakyReLU,
 * the regression outputs, SliceChannel, transpose, Embedding, batch_dot,
 * Deconvolution, expand_dims / squeeze, the slice family, stack, tile /
 * repeat, Pad, UpSampling, take / one_hot and the normalisations
 * (LayerNorm, GroupNorm, InstanceNorm, L2Normalization) against their CPU
 * twins (gpucheck): every parameter value the GPU supports, odd sizes,
 * forward and backward with write / add / null requests; Cast and amp_cast
 * for every dtype pair (float16, bfloat16 included), bit for bit. Without a visible
 * GPU the comparisons are skipped; the registration checks run in every
 * build.
 */
#include "support/gpucheck.h"
#ifdef MX_USE_CUDA
#include "device/cuda_worker.h"
#include "device/device.h"
#endif

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

/* take: indices (input 1) in [-5, 12): negative, fractional, past the
 * axis (clipped or wrapped) and repeated. */
static void init_take(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = opcheck_uniform(rng, index == 1 ? -5 : -1, index == 1 ? 12 : 1);
        data[i] = (float)(index == 1 && i % 2 ? floor(v) : v);
    }
}

/* one_hot: indices in [-2, 9), whole numbers mostly. */
static void init_one_hot(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        const double v = opcheck_uniform(rng, -2, 9);
        data[i] = (float)(i % 3 ? floor(v) : v);
    }
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

/* Embedding, take and Pad add their gradients with atomicAdd (repeated
 * indices, edge and reflect padding): the order of those float sums
 * varies, so near-zero sums need an absolute tolerance above float
 * rounding; an indexing mistake is O(1). */
#define SCATTER_ATOL 1e-4

static void emb(kv p, mx_shape data, uint64_t seed)
{
    run2("Embedding", p, data, (mx_shape){0}, init_indices, 0, 0, SCATTER_ATOL, seed);
}

START_TEST(test_embedding_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    emb(KV("input_dim", "10", "output_dim", "6"), MX_SHAPE(3, 7), 1);
    emb(KV("input_dim", "5", "output_dim", "17"), MX_SHAPE(13), 2);
    emb(KV("input_dim", "3", "output_dim", "1"), MX_SHAPE(2, 3, 4), 3);
    emb(KV("input_dim", "12", "output_dim", "33", "sparse_grad", "True"), MX_SHAPE(50, 20), 4);
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

/* ------------------------------------------------------------ Deconvolution */

/* cuDNN may pick FFT or Winograd algorithms, whose fp32 rounding differs
 * from im2col + SGEMM by more than the default 1e-4 / 1e-5; an indexing
 * mistake is still far outside this. */
#define DECONV_RTOL 1e-3
#define DECONV_ATOL 1e-4

static void deconv(kv p, mx_shape data, uint64_t seed)
{
    run2("Deconvolution", p, data, (mx_shape){0}, NULL, 0, DECONV_RTOL, DECONV_ATOL, seed);
}

START_TEST(test_deconvolution_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    deconv(KV("kernel", "(3, 3)", "num_filter", "4"), MX_SHAPE(2, 3, 7, 5), 1);
    deconv(KV("kernel", "(3, 3)", "num_filter", "5", "stride", "(2, 2)", "pad", "(1, 1)", "adj", "(1, 1)",
              "no_bias", "False"),
           MX_SHAPE(2, 3, 5, 4), 2);
    deconv(KV("kernel", "(3, 2)", "num_filter", "3", "stride", "(2, 3)", "pad", "(1, 0)", "adj", "(0, 2)",
              "no_bias", "False"),
           MX_SHAPE(3, 2, 4, 5), 3);
    /* target_shape: even and odd totals (pad and adj derived) */
    deconv(KV("kernel", "(4, 4)", "num_filter", "3", "stride", "(2, 2)", "target_shape", "(12, 10)"),
           MX_SHAPE(2, 3, 6, 5), 4);
    deconv(KV("kernel", "(4, 4)", "num_filter", "3", "stride", "(2, 2)", "target_shape", "(13, 9)", "no_bias",
              "False"),
           MX_SHAPE(2, 3, 6, 5), 5);
    /* dilation, groups, depthwise */
    deconv(KV("kernel", "(3, 3)", "num_filter", "6", "num_group", "2", "dilate", "(2, 2)", "no_bias", "False"),
           MX_SHAPE(2, 4, 6, 5), 6);
    deconv(KV("kernel", "(3, 3)", "num_filter", "4", "num_group", "4", "stride", "(2, 2)", "pad", "(1, 1)"),
           MX_SHAPE(2, 4, 5, 5), 7);
    deconv(KV("kernel", "(3, 3)", "num_filter", "8", "num_group", "4", "no_bias", "False"), MX_SHAPE(1, 4, 5, 6),
           8);
    /* 1-D */
    deconv(KV("kernel", "(5,)", "num_filter", "4", "stride", "(2,)", "pad", "(1,)", "no_bias", "False"),
           MX_SHAPE(3, 4, 9), 9);
    deconv(KV("kernel", "(3,)", "num_filter", "2", "stride", "(3,)", "dilate", "(2,)", "adj", "(1,)", "layout",
              "NCW"),
           MX_SHAPE(2, 3, 7), 10);
    deconv(KV("kernel", "(4,)", "num_filter", "3", "stride", "(2,)", "target_shape", "(15,)"), MX_SHAPE(2, 2, 7), 11);
    /* workspace caps and tuning values (heuristics either way) */
    deconv(KV("kernel", "(3, 3)", "num_filter", "4", "workspace", "0", "cudnn_tune", "off", "no_bias", "False"),
           MX_SHAPE(2, 3, 8, 8), 12);
    deconv(KV("kernel", "(5, 5)", "num_filter", "4", "pad", "(2, 2)", "cudnn_tune", "fastest", "layout", "NCHW"),
           MX_SHAPE(2, 3, 9, 9), 13);
    deconv(KV("kernel", "(1, 1)", "num_filter", "5", "cudnn_tune", "limited_workspace"), MX_SHAPE(2, 8, 5, 7), 14);
}
END_TEST

/* ------------------------------------------------------------ views, slices, copies */

START_TEST(test_expand_squeeze_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("expand_dims", KV("axis", "1"), MX_SHAPE(3, 5, 7), NULL, 1);
    run("expand_dims", KV("axis", "-1"), MX_SHAPE(4, 3), NULL, 2);
    run("expand_dims", KV("axis", "0"), MX_SHAPE(13), NULL, 3);
    run("squeeze", KV0, MX_SHAPE(3, 1, 5, 1), NULL, 4);
    run("squeeze", KV("axis", "(1,)"), MX_SHAPE(3, 1, 5, 1), NULL, 5);
    run("squeeze", KV("axis", "(-1, 0)"), MX_SHAPE(1, 7, 1), NULL, 6);
    run("squeeze", KV0, MX_SHAPE(1, 1), NULL, 7);
}
END_TEST

START_TEST(test_slice_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("slice", KV("begin", "(1, 2)", "end", "(3, 5)"), MX_SHAPE(4, 7, 5), NULL, 1);
    run("slice", KV("begin", "(None, 1, 0)", "end", "(None, 6, 5)", "step", "(1, 2, 3)"), MX_SHAPE(3, 7, 5), NULL,
        2);
    run("slice", KV("begin", "(-1, None)", "end", "(None, None)", "step", "(-1, -2)"), MX_SHAPE(5, 7), NULL, 3);
    run("slice", KV("begin", "(0, -3)", "end", "(2, -1)"), MX_SHAPE(3, 6, 2, 4), NULL, 4);
    run("crop", KV("begin", "(1,)", "end", "(100,)"), MX_SHAPE(6, 3), NULL, 5);
    run("slice", KV("begin", "(4, 6)", "end", "(0, 1)", "step", "(-2, -3)"), MX_SHAPE(5, 7, 3), NULL, 6);
    run("slice_axis", KV("axis", "1", "begin", "1", "end", "4"), MX_SHAPE(3, 5, 7), NULL, 7);
    run("slice_axis", KV("axis", "-1", "begin", "-3", "end", "None"), MX_SHAPE(3, 5, 7), NULL, 8);
    run("slice_axis", KV("axis", "0", "begin", "0", "end", "-1"), MX_SHAPE(6, 4), NULL, 9);
    run2("slice_like", KV0, MX_SHAPE(5, 7, 4), MX_SHAPE(3, 6, 2), NULL, 0, 0, 0, 10);
    run2("slice_like", KV("axes", "(1,)"), MX_SHAPE(5, 7, 4), MX_SHAPE(2, 3), NULL, 0, 0, 0, 11);
    run2("slice_like", KV("axes", "(0, -1)"), MX_SHAPE(5, 7, 4), MX_SHAPE(4, 1, 3), NULL, 0, 0, 0, 12);
}
END_TEST

START_TEST(test_stack_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("stack", KV("num_args", "3"), MX_SHAPE(4, 5), NULL, 1);
    run("stack", KV("num_args", "2", "axis", "1"), MX_SHAPE(3, 5, 7), NULL, 2);
    run("stack", KV("num_args", "4", "axis", "-1"), MX_SHAPE(3, 5), NULL, 3);
    run("stack", KV("num_args", "5", "axis", "2"), MX_SHAPE(2, 3, 7), NULL, 4);
    run("stack", KV("num_args", "1"), MX_SHAPE(9), NULL, 5);
}
END_TEST

START_TEST(test_tile_repeat_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("tile", KV("reps", "(2, 3)"), MX_SHAPE(3, 5), NULL, 1);
    run("tile", KV("reps", "(3,)"), MX_SHAPE(2, 3, 5), NULL, 2);
    run("tile", KV("reps", "(2, 1, 3)"), MX_SHAPE(4, 7), NULL, 3);
    run("tile", KV("reps", "()"), MX_SHAPE(3, 4), NULL, 4);
    run("tile", KV("reps", "(1, 4, 1, 2)"), MX_SHAPE(2, 3, 1, 5), NULL, 5);
    run("repeat", KV("repeats", "3"), MX_SHAPE(4, 5), NULL, 6);
    run("repeat", KV("repeats", "2", "axis", "1"), MX_SHAPE(3, 5, 7), NULL, 7);
    run("repeat", KV("repeats", "4", "axis", "-1"), MX_SHAPE(3, 5), NULL, 8);
    run("repeat", KV("repeats", "1", "axis", "0"), MX_SHAPE(6, 2), NULL, 9);
    run("repeat", KV("repeats", "5", "axis", "0"), MX_SHAPE(3, 2, 4), NULL, 10);
}
END_TEST

/* ------------------------------------------------------------ Pad, UpSampling, take, one_hot */

static void pad(const char *mode, const char *width, const char *cval, mx_shape data, uint64_t seed)
{
    run2("Pad", KV("mode", mode, "pad_width", width, "constant_value", cval), data, (mx_shape){0}, NULL, 0, 0,
         SCATTER_ATOL, seed);
}

START_TEST(test_pad_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    static const char *const modes[] = {"constant", "edge", "reflect"};
    for (int m = 0; m < 3; m++) {
        const uint64_t s = 10 * (uint64_t)m;
        pad(modes[m], "(0,0,0,0,1,2,2,1)", "0", MX_SHAPE(2, 3, 7, 5), s + 1);
        pad(modes[m], "(0,0,0,0,0,3,1,0)", "-1.5", MX_SHAPE(3, 2, 5, 4), s + 2);
        pad(modes[m], "(0,0,0,0,1,1,2,0,0,2)", "2", MX_SHAPE(2, 2, 3, 4, 5), s + 3);
        pad(modes[m], "(0,0,0,0,0,0,0,0)", "0", MX_SHAPE(2, 3, 4, 3), s + 4);
    }
    pad("edge", "(0,0,0,0,5,4,6,7)", "0", MX_SHAPE(1, 2, 3, 2), 40); /* pads wider than the axes */
    pad("reflect", "(0,0,0,0,4,4,3,3)", "0", MX_SHAPE(2, 1, 5, 4), 41);
}
END_TEST

static void upsample_multi(kv p, int n, const mx_shape *shapes, uint64_t seed)
{
    gpucheck_case c = {.op = "UpSampling", .keys = p.keys, .values = p.values, .n_params = p.n, .seed = seed};
    for (int i = 0; i < n; i++) c.in_shapes[i] = shapes[i];
    gpucheck_run(&c, &sum);
}

START_TEST(test_upsampling_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("UpSampling", KV("scale", "2", "sample_type", "nearest"), MX_SHAPE(2, 3, 4, 5), NULL, 1);
    run("UpSampling", KV("scale", "3", "sample_type", "nearest"), MX_SHAPE(1, 2, 7, 5), NULL, 2);
    run("UpSampling", KV("scale", "1", "sample_type", "nearest"), MX_SHAPE(2, 2, 3, 3), NULL, 3);
    const mx_shape two[] = {MX_SHAPE(2, 3, 4, 5), MX_SHAPE(2, 2, 2, 5)};
    upsample_multi(KV("scale", "2", "sample_type", "nearest", "num_args", "2"), 2, two, 4);
    const mx_shape three[] = {MX_SHAPE(2, 3, 4, 6), MX_SHAPE(2, 3, 2, 3), MX_SHAPE(2, 3, 8, 12)};
    upsample_multi(KV("scale", "2", "sample_type", "nearest", "num_args", "3", "multi_input_mode", "sum"), 3, three,
                   5);
    upsample_multi(KV("scale", "2", "sample_type", "nearest", "num_args", "3", "multi_input_mode", "concat"), 3,
                   three, 6);
    /* bilinear: a learned depthwise Deconvolution */
    run2("UpSampling", KV("scale", "2", "sample_type", "bilinear", "num_filter", "3"), MX_SHAPE(2, 3, 5, 4),
         (mx_shape){0}, NULL, 0, DECONV_RTOL, DECONV_ATOL, 7);
    run2("UpSampling", KV("scale", "3", "sample_type", "bilinear", "num_filter", "2"), MX_SHAPE(1, 2, 4, 3),
         (mx_shape){0}, NULL, 0, DECONV_RTOL, DECONV_ATOL, 8);
}
END_TEST

START_TEST(test_take_one_hot_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run2("take", KV0, MX_SHAPE(7, 5), MX_SHAPE(3, 4), init_take, 0, 0, SCATTER_ATOL, 1);
    run2("take", KV("axis", "1"), MX_SHAPE(3, 6, 4), MX_SHAPE(9), init_take, 0, 0, SCATTER_ATOL, 2);
    run2("take", KV("axis", "-1", "mode", "wrap"), MX_SHAPE(3, 4, 5), MX_SHAPE(2, 7), init_take, 0, 0, SCATTER_ATOL,
         3);
    run2("take", KV("mode", "wrap"), MX_SHAPE(4), MX_SHAPE(30), init_take, 0, 0, SCATTER_ATOL, 4);
    run2("take", KV("mode", "clip", "axis", "2"), MX_SHAPE(2, 3, 11), MX_SHAPE(5, 2), init_take, 0, 0,
         SCATTER_ATOL, 5);
    run("one_hot", KV("depth", "7"), MX_SHAPE(3, 5), init_one_hot, 6);
    run("one_hot", KV("depth", "4", "on_value", "2.5", "off_value", "-1"), MX_SHAPE(13), init_one_hot, 7);
    run("one_hot", KV("depth", "1"), MX_SHAPE(2, 3, 4), init_one_hot, 8);
}
END_TEST

/* ------------------------------------------------------------ normalisations */

START_TEST(test_norms_gpu_vs_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    run("LayerNorm", KV0, MX_SHAPE(3, 7), NULL, 1);
    run("LayerNorm", KV("axis", "1"), MX_SHAPE(2, 5, 4), NULL, 2);
    run("LayerNorm", KV("axis", "0", "eps", "1e-3"), MX_SHAPE(6, 3), NULL, 3);
    run("LayerNorm", KV("output_mean_var", "True"), MX_SHAPE(4, 3, 9), NULL, 4);
    run("LayerNorm", KV("axis", "-2", "output_mean_var", "True"), MX_SHAPE(2, 7, 5), NULL, 5);
    run("LayerNorm", KV0, MX_SHAPE(2, 300), NULL, 6);
    run("GroupNorm", KV("num_groups", "3"), MX_SHAPE(2, 6, 4, 3), NULL, 7);
    run("GroupNorm", KV0, MX_SHAPE(3, 4, 5), NULL, 8);
    run("GroupNorm", KV("num_groups", "4", "output_mean_var", "True", "eps", "1e-3"), MX_SHAPE(2, 4, 3, 3), NULL, 9);
    run("GroupNorm", KV("num_groups", "2"), MX_SHAPE(3, 6, 2, 2, 3), NULL, 10);
    run("InstanceNorm", KV0, MX_SHAPE(2, 3, 4, 5), NULL, 11);
    run("InstanceNorm", KV("eps", "1e-5"), MX_SHAPE(3, 2, 7), NULL, 12);
    run("InstanceNorm", KV0, MX_SHAPE(1, 5, 3, 3), NULL, 13);
    static const char *const modes[] = {"instance", "channel", "spatial"};
    for (int m = 0; m < 3; m++) {
        const uint64_t s = 20 + 10 * (uint64_t)m;
        run("L2Normalization", KV("mode", modes[m]), MX_SHAPE(2, 3, 4, 5), NULL, s + 1);
        run("L2Normalization", KV("mode", modes[m], "eps", "1e-4"), MX_SHAPE(3, 4, 7), NULL, s + 2);
    }
    run("L2Normalization", KV0, MX_SHAPE(5, 9), NULL, 60);
}
END_TEST

/* ------------------------------------------------------------ registration */

static const char *const gpu_ops[] = {
    "softmax", "log_softmax", "LeakyReLU", "LinearRegressionOutput", "LogisticRegressionOutput",
    "MAERegressionOutput", "SliceChannel", "transpose", "Embedding", "batch_dot", "Deconvolution",
    "expand_dims", "squeeze", "slice", "slice_axis", "slice_like", "stack", "tile", "repeat",
    "Pad", "UpSampling", "take", "one_hot", "LayerNorm", "GroupNorm", "InstanceNorm", "L2Normalization",
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
#ifdef MX_USE_CUDA
    /* Deconvolution's cudnn_off=True is refused by name before anything
     * touches a device. */
    const char *k[] = {"kernel", "num_filter", "cudnn_off"}, *v[] = {"(3, 3)", "4", "True"};
    gpucheck_refused("Deconvolution", k, v, 3, "cudnn_off");
#endif
}
END_TEST

/* ------------------------------------------------------------ Cast, amp_cast */

#ifdef MX_USE_CUDA
/* Random bit patterns of a dtype (halves: every pattern, n >= 65536),
 * floats after hand-picked specials (ties, overflow, subnormals, NaNs). */
static void *cast_values(mx_dtype t, int64_t n, uint64_t seed)
{
    static const uint32_t special[] = {0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x477ff000, 0x477fef00,
                                       0x33000000, 0x387fe000, 0x80000000, 0x7f800000, 0x7fc00000, 0x7f800001,
                                       0x7fa12345, 0x00018000, 0x7f7fffff, 0x4f000000, 0xdf000000};
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    size_t size = mx_dtype_size(t);
    unsigned char *p = malloc(size * (size_t)n);
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 7;
    for (int64_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint32_t fb = i < ns ? special[i] : (uint32_t)(r >> 20);
        float f;
        memcpy(&f, &fb, 4);
        double d = i % 3 == 2 ? (double)f * (1.0 + 0x1p-40) : f;
        uint16_t h = (uint16_t)(i * 40503 + seed);
        if (t == MX_FLOAT32) memcpy(p + 4 * i, &f, 4);
        else if (t == MX_FLOAT64) memcpy(p + 8 * i, &d, 8);
        else if (t == MX_FLOAT16 || t == MX_BFLOAT16) memcpy(p + 2 * i, &h, 2);
        else memcpy(p + size * (size_t)i, &r, size);
    }
    return p;
}

static bool cast_nan(const unsigned char *p, mx_dtype t)
{
    uint16_t h;
    memcpy(&h, p, 2);
    if (t == MX_FLOAT32) return isnan(*(const float *)(const void *)p);
    if (t == MX_FLOAT64) return isnan(*(const double *)(const void *)p);
    if (t == MX_FLOAT16) return (h & 0x7fff) > 0x7c00;
    if (t == MX_BFLOAT16) return (h & 0x7fff) > 0x7f80;
    return false;
}

/* Runs op (forward, or backward from `from` into `to`) on the CPU and the
 * GPU on the same bytes; the results agree bit for bit (accumulating: a
 * NaN's payload aside). */
static void cast_compare(const mx_op_def *op, const void *params, bool backward, mx_dtype from, mx_dtype to,
                         int64_t n, mx_req req, const mx_device_ops *dev, mx_cuda_worker *w)
{
    size_t fb = mx_dtype_size(from) * (size_t)n, tb = mx_dtype_size(to) * (size_t)n;
    void *src = cast_values(from, n, (uint64_t)from * 31 + to), *dst0 = cast_values(to, n, 99);
    void *cpu = malloc(tb), *gpu = malloc(tb), *dsrc, *ddst;
    memcpy(cpu, dst0, tb);
    ck_assert_int_eq(dev->alloc(0, fb, &dsrc), MX_OK);
    ck_assert_int_eq(dev->alloc(0, tb, &ddst), MX_OK);
    ck_assert_int_eq(dev->copy(dsrc, mx_gpu(0), src, mx_cpu(), fb, w), MX_OK);
    ck_assert_int_eq(dev->copy(ddst, mx_gpu(0), dst0, mx_cpu(), tb, w), MX_OK);
    mx_exec_ctx cexec = {.ctx = mx_cpu()}, gexec = {.ctx = mx_gpu(0), .lane = MX_LANE_COMPUTE, .stream = w};
    mx_op_ctx cctx = {.exec = &cexec}, gctx = {.exec = &gexec};
    mx_op_kernels gk;
    ck_assert_int_eq(mx_op_kernels_for(op, mx_gpu(0), &gk), MX_OK);
    mx_req r[1] = {req};
    for (int d = 0; d < 2; d++) {
        mx_context ctx = d ? mx_gpu(0) : mx_cpu();
        mx_tensor a = {d ? dsrc : src, MX_SHAPE(n), from, ctx, 0}, b = {d ? ddst : cpu, MX_SHAPE(n), to, ctx, 0};
        mx_status st = backward ? (d ? gk.backward : op->backward)(d ? &gctx : &cctx, params, &a, &b, NULL, r, &b, NULL)
                                : (d ? gk.forward : op->forward)(d ? &gctx : &cctx, params, &a, r, &b, NULL);
        ck_assert_msg(st == MX_OK, "%s %s -> %s on %s: %s", op->name, mx_dtype_name(from), mx_dtype_name(to),
                      d ? "GPU" : "CPU", mx_last_error());
    }
    ck_assert_msg(mx_cuda_worker_sync(w) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(dev->copy(gpu, mx_cpu(), ddst, mx_gpu(0), tb, w), MX_OK);
    size_t size = mx_dtype_size(to);
    for (size_t i = 0; i < tb; i += size) {
        const unsigned char *c = (unsigned char *)cpu + i, *g = (unsigned char *)gpu + i;
        if (memcmp(c, g, size) == 0 || (req == MX_REQ_ADD && cast_nan(c, to) && cast_nan(g, to))) continue;
        uint64_t x = 0, y = 0;
        memcpy(&x, c, size), memcpy(&y, g, size);
        ck_abort_msg("%s%s %s -> %s req %d [%zu]: GPU 0x%llx, CPU 0x%llx", op->name, backward ? " backward" : "",
                     mx_dtype_name(from), mx_dtype_name(to), (int)req, i / size, (unsigned long long)y,
                     (unsigned long long)x);
    }
    dev->free(0, dsrc), dev->free(0, ddst);
    free(src), free(dst0), free(cpu), free(gpu);
}
#endif

/* Cast and amp_cast on the GPU: every dtype pair, forward (write, add)
 * and backward, the CPU's bits. */
START_TEST(test_cast_gpu_vs_cpu)
{
#ifdef MX_USE_CUDA
    static const char *const names[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bfloat16"};
    static const mx_dtype types[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_UINT8, MX_INT32, MX_INT8, MX_INT64, MX_BFLOAT16};
    const int nt = 8;
    const int64_t n = 66001;
    const mx_device_ops *dev = mx_device_get(MX_DEV_GPU);
    ck_assert_ptr_nonnull(dev);
    mx_cuda_worker *w;
    ck_assert_msg(mx_cuda_worker_create(0, &w) == MX_OK, "%s", mx_last_error());
    const mx_op_def *cast = mx_op_find("Cast"), *amp = mx_op_find("amp_cast");
    _Alignas(16) char params[64];
    const char *k[] = {"dtype"};
    for (int b = 0; b < nt; b++) {
        const char *v[] = {names[b]};
        ck_assert_int_eq(mx_op_parse_params(cast, k, v, 1, params), MX_OK);
        for (int a = 0; a < nt; a++) {
            cast_compare(cast, params, false, types[a], types[b], n, MX_REQ_WRITE, dev, w);
            cast_compare(cast, params, false, types[a], types[b], n, MX_REQ_ADD, dev, w);
            cast_compare(cast, params, true, types[b], types[a], n, MX_REQ_ADD, dev, w);
        }
    }
    const mx_dtype amp_types[] = {MX_FLOAT32, MX_FLOAT16, MX_BFLOAT16};
    const char *amp_names[] = {"float32", "float16", "bfloat16"};
    for (int b = 0; b < 3; b++) {
        const char *v[] = {amp_names[b]};
        ck_assert_int_eq(mx_op_parse_params(amp, k, v, 1, params), MX_OK);
        for (int a = 0; a < 3; a++) {
            cast_compare(amp, params, false, amp_types[a], amp_types[b], n, MX_REQ_WRITE, dev, w);
            cast_compare(amp, params, true, amp_types[b], amp_types[a], n, MX_REQ_WRITE, dev, w);
            cast_compare(amp, params, true, amp_types[b], amp_types[a], n, MX_REQ_ADD, dev, w);
        }
    }
    mx_cuda_worker_destroy(w);
#endif
}
END_TEST

static void tests_everywhere(TCase *tc)
{
    tcase_add_test(tc, test_gpu_kernels_registered);
}

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, test_softmax_gpu_vs_cpu);
    tcase_add_test(tc, test_leaky_relu_gpu_vs_cpu);
    tcase_add_test(tc, test_regression_output_gpu_vs_cpu);
    tcase_add_test(tc, test_slice_channel_gpu_vs_cpu);
    tcase_add_test(tc, test_transpose_gpu_vs_cpu);
    tcase_add_test(tc, test_embedding_gpu_vs_cpu);
    tcase_add_test(tc, test_batch_dot_gpu_vs_cpu);
    tcase_add_test(tc, test_deconvolution_gpu_vs_cpu);
    tcase_add_test(tc, test_expand_squeeze_gpu_vs_cpu);
    tcase_add_test(tc, test_slice_gpu_vs_cpu);
    tcase_add_test(tc, test_stack_gpu_vs_cpu);
    tcase_add_test(tc, test_tile_repeat_gpu_vs_cpu);
    tcase_add_test(tc, test_pad_gpu_vs_cpu);
    tcase_add_test(tc, test_upsampling_gpu_vs_cpu);
    tcase_add_test(tc, test_take_one_hot_gpu_vs_cpu);
    tcase_add_test(tc, test_norms_gpu_vs_cpu);
    tcase_add_test(tc, test_cast_gpu_vs_cpu);
}

int main(void)
{
    return gpucheck_main("misc", tests_everywhere, tests_on_gpu, 300, &sum);
}
