/* test_op_convolution.c - Convolution against a naive float64 direct
 * convolution, its gradients against finite differences, shapes and
 * parameter errors. */
#include "support/opcheck.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const mx_op_def *conv_op(void) { return mx_op_find("Convolution"); }

static const void *field(const void *params, const char *name)
{
    return (const char *)params + mx_op_param(conv_op(), name)->offset;
}

/* Axis i (0 = h, 1 = w) of a spatial tuple; 1-D convolutions have h = hval. */
static int64_t tup(const void *params, const char *name, int i, int64_t dflt, int64_t hval)
{
    const mx_tuple *k = field(params, "kernel"), *t = field(params, name);
    if (k->ndim == 1 && i == 0) return hval;
    int j = k->ndim == 1 ? 0 : i;
    return t->ndim > 0 ? t->v[j] : dflt;
}

/* y[n,f,oh,ow] = b[f] + sum_{c,ki,kj} x[n, g*C/G + c, oh*s - p + ki*d, ...] * w[f, c, ki, kj] */
static void conv_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    int r = ((const mx_tuple *)field(params, "kernel"))->ndim;
    int64_t f_total = *(const int64_t *)field(params, "num_filter"), grp = *(const int64_t *)field(params, "num_group");
    bool bias = !*(const bool *)field(params, "no_bias");
    const mx_shape *d = &in_shapes[0];
    int64_t n_b = d->dims[0], c_total = d->dims[1], h = r == 1 ? 1 : d->dims[2], w = d->dims[r + 1];
    int64_t kh = tup(params, "kernel", 0, 1, 1), kw = tup(params, "kernel", 1, 1, 1);
    int64_t sh = tup(params, "stride", 0, 1, 1), sw = tup(params, "stride", 1, 1, 1);
    int64_t dh = tup(params, "dilate", 0, 1, 1), dw = tup(params, "dilate", 1, 1, 1);
    int64_t ph = tup(params, "pad", 0, 0, 0), pw = tup(params, "pad", 1, 0, 0);
    /* MXNet's output size, computed here independently of the op. */
    int64_t oh = (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1, ow = (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1;
    ck_assert_int_eq(out_shapes[0].dims[1], f_total);
    ck_assert_int_eq(out_shapes[0].dims[r + 1], ow);
    if (r == 2) ck_assert_int_eq(out_shapes[0].dims[2], oh);
    int64_t cg = c_total / grp, fg = f_total / grp;
    for (int64_t n = 0; n < n_b; n++)
        for (int64_t f = 0; f < f_total; f++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    double acc = bias ? in[2][f] : 0.0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t iy = y * sh - ph + i * dh, ix = x * sw - pw + j * dw;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                                int64_t ch = (f / fg) * cg + c;
                                acc += in[0][((n * c_total + ch) * h + iy) * w + ix] *
                                       in[1][((f * cg + c) * kh + i) * kw + j];
                            }
                    out[0][((n * f_total + f) * oh + y) * ow + x] = acc;
                }
}

typedef struct conv_case {
    mx_shape data;
    const char *kernel, *stride, *dilate, *pad, *num_filter, *num_group, *no_bias, *workspace;
    int max_points; /* finite-difference points per input; 0: the harness default */
    double atol;    /* forward and gradient absolute tolerance; 0: the harness default */
} conv_case;

static void run(conv_case cc)
{
    const char *keys[] = {"kernel", "stride", "dilate", "pad", "num_filter", "num_group", "no_bias", "workspace"};
    const char *values[] = {cc.kernel,
                            cc.stride ? cc.stride : "()",
                            cc.dilate ? cc.dilate : "()",
                            cc.pad ? cc.pad : "()",
                            cc.num_filter,
                            cc.num_group ? cc.num_group : "1",
                            cc.no_bias ? cc.no_bias : "False",
                            cc.workspace ? cc.workspace : "1024"};
    opcheck_case c = {.op = "Convolution", .keys = keys, .values = values, .n_params = 8, .ref = conv_ref,
                      .seed = (uint64_t)mx_shape_size(&cc.data) * 131 + (uint64_t)atoi(cc.num_filter),
                      .max_points = cc.max_points, .fwd_atol = cc.atol, .grad_atol = cc.atol};
    c.in_shapes[0] = cc.data;
    opcheck_run(&c);
}

START_TEST(conv2d_against_reference)
{
    run((conv_case){.data = MX_SHAPE(2, 3, 7, 6), .kernel = "(3, 3)", .num_filter = "4"});
    /* odd sizes, stride 2, pad */
    run((conv_case){.data = MX_SHAPE(3, 3, 9, 7), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)", .num_filter = "5"});
    /* asymmetric kernel, stride and pad */
    run((conv_case){.data = MX_SHAPE(3, 2, 8, 9), .kernel = "(2,4)", .stride = "(1,3)", .pad = "(0,2)", .num_filter = "3"});
    /* dilation 2 */
    run((conv_case){.data = MX_SHAPE(1, 2, 9, 8), .kernel = "(3,3)", .dilate = "(2,2)", .pad = "(2,1)", .num_filter = "3"});
    run((conv_case){.data = MX_SHAPE(3, 2, 11, 10), .kernel = "(3,2)", .stride = "(2,1)", .dilate = "(2,3)", .pad = "(1,1)", .num_filter = "4"});
    /* no bias; batch 1 */
    run((conv_case){.data = MX_SHAPE(2, 3, 5, 5), .kernel = "(2,2)", .num_filter = "3", .no_bias = "True"});
    run((conv_case){.data = MX_SHAPE(1, 3, 7, 7), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)", .num_filter = "2"});
    /* kernel as large as the padded input: a 1x1 output */
    run((conv_case){.data = MX_SHAPE(2, 2, 3, 4), .kernel = "(5,4)", .pad = "(1,0)", .num_filter = "3"});
}
END_TEST

/* Strided 1x1 layers without padding (ResNet's projections): where the
 * direct kernels lead (on a pointwise lead, as these small layers are
 * there), their data gradient is made on the sampled pixels and scattered
 * onto the stride grid (im2col.c, strided_pointwise): odd
 * sizes whose last row or column is off the grid, unequal strides, more
 * channels than a vector, batches split in pieces, write and add. */
START_TEST(strided_pointwise)
{
    run((conv_case){.data = MX_SHAPE(4, 20, 9, 7), .kernel = "(1,1)", .stride = "(2,2)", .num_filter = "24"});
    run((conv_case){.data = MX_SHAPE(3, 17, 8, 11), .kernel = "(1,1)", .stride = "(3,2)", .num_filter = "5",
                    .no_bias = "True"});
    run((conv_case){.data = MX_SHAPE(1, 33, 14, 14), .kernel = "(1,1)", .stride = "(2,2)", .num_filter = "18"});
}
END_TEST

START_TEST(grouped_and_depthwise)
{
    run((conv_case){.data = MX_SHAPE(3, 4, 6, 5), .kernel = "(3,2)", .stride = "(1,2)", .num_filter = "6", .num_group = "2"});
    /* depthwise, and depthwise with a channel multiplier of 2 */
    run((conv_case){.data = MX_SHAPE(2, 4, 6, 6), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "4", .num_group = "4"});
    run((conv_case){.data = MX_SHAPE(3, 3, 5, 7), .kernel = "(3,3)", .stride = "(2,2)", .dilate = "(1,2)", .pad = "(1,1)", .num_filter = "6", .num_group = "3", .no_bias = "True"});
    /* grouped 1x1 (the direct SGEMM path for one image, lowered for three) */
    run((conv_case){.data = MX_SHAPE(1, 6, 4, 5), .kernel = "(1,1)", .num_filter = "4", .num_group = "2"});
    run((conv_case){.data = MX_SHAPE(3, 6, 4, 5), .kernel = "(1,1)", .num_filter = "4", .num_group = "2"});
}
END_TEST

/* Depthwise layers with channel multiplier 1 (MobileNet's) take the direct
 * kernels of lib/ops/cpu/conv_depthwise.c in both directions: rows wider than
 * one vector with a partial last one, more output rows than a block of 8,
 * stride 2, odd sizes, asymmetric kernels and dilation, 1-D, MobileNet's
 * 3x3 pad-1 layers read straight from x; in the
 * portable width (the fallback elsewhere), AVX2 and the CPU's widest. */
START_TEST(depthwise_direct_path)
{
    static const char *const widths[] = {"portable", "avx2", NULL}; /* NULL: the widest this CPU runs */
    for (int pass = 0; pass < 3; pass++) {
        if (widths[pass]) setenv("MX_SIMD", widths[pass], 1);
        else unsetenv("MX_SIMD");
        run((conv_case){.data = MX_SHAPE(2, 3, 10, 19), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "3",
                        .num_group = "3", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(3, 2, 11, 9), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)",
                        .num_filter = "2", .num_group = "2", .no_bias = "True", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(1, 2, 9, 12), .kernel = "(5,3)", .stride = "(2,3)", .dilate = "(1,2)",
                        .pad = "(2,2)", .num_filter = "2", .num_group = "2", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(2, 3, 21), .kernel = "3", .pad = "(1,)", .num_filter = "3", .num_group = "3",
                        .max_points = 24});
        /* stride 2 over rows of several vectors (split into even and odd
         * columns by shuffles, a partial vector last), with and without
         * padding, odd widths */
        run((conv_case){.data = MX_SHAPE(1, 2, 7, 75), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)",
                        .num_filter = "2", .num_group = "2", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(2, 2, 6, 70), .kernel = "(3,3)", .stride = "(2,2)", .num_filter = "2",
                        .num_group = "2", .no_bias = "True", .max_points = 24});
        /* 3x3, stride 1, pad 1 (read from x with masked loads at the AVX-512
         * width): one vector exactly and fewer rows than a block, MobileNet's
         * 7x7, rows of two vectors and one lane over two blocks and one row;
         * stride 2 with pad 1 split from x on rows of two vectors */
        run((conv_case){.data = MX_SHAPE(1, 2, 5, 16), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "2",
                        .num_group = "2", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(2, 2, 7, 7), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "2",
                        .num_group = "2", .no_bias = "True", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(1, 2, 17, 33), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "2",
                        .num_group = "2", .max_points = 24});
        run((conv_case){.data = MX_SHAPE(1, 2, 8, 32), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)",
                        .num_filter = "2", .num_group = "2", .max_points = 24});
        /* padding wider than the kernel's reach: outputs and dy rows that see only zeros */
        run((conv_case){.data = MX_SHAPE(1, 2, 5, 6), .kernel = "(3,3)", .stride = "(2,1)", .pad = "(3,4)",
                        .num_filter = "2", .num_group = "2", .max_points = 24});
    }
    unsetenv("MX_SIMD");
}
END_TEST

START_TEST(pointwise_and_lowering_paths)
{
    /* 1x1 stride 1: SGEMM straight on the data for one image or when no
     * workspace is allowed; lowered in a batch otherwise */
    run((conv_case){.data = MX_SHAPE(1, 5, 4, 4), .kernel = "(1,1)", .num_filter = "7"});
    run((conv_case){.data = MX_SHAPE(3, 5, 4, 4), .kernel = "(1,1)", .num_filter = "7"});
    run((conv_case){.data = MX_SHAPE(3, 5, 4, 3), .kernel = "(1,1)", .num_filter = "2", .workspace = "0"});
    /* 1x1 with stride 2 or padding is lowered */
    run((conv_case){.data = MX_SHAPE(3, 4, 5, 5), .kernel = "(1,1)", .stride = "(2,2)", .num_filter = "3"});
    run((conv_case){.data = MX_SHAPE(2, 4, 3, 3), .kernel = "(1,1)", .pad = "(1,1)", .num_filter = "3"});
    /* workspace 0: one image at a time even for a batch */
    run((conv_case){.data = MX_SHAPE(3, 2, 6, 6), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "3", .workspace = "0"});
    /* 32x32 outputs: two images per chunk, the third alone */
    run((conv_case){.data = MX_SHAPE(3, 1, 34, 34), .kernel = "(3,3)", .num_filter = "2"});
    /* outputs of more than 2048 positions: one image per product */
    run((conv_case){.data = MX_SHAPE(2, 1, 48, 48), .kernel = "(3,3)", .num_filter = "2"});
}
END_TEST

/* Layers big enough that lowering, staging and col2im are split across
 * the pool's threads (opcheck runs every case serially and on a 3-thread
 * pool). Forward is checked in full, gradients at fewer points to keep the
 * float64 reference affordable. */
START_TEST(threaded_lowering)
{
    /* batches split across 3 threads: 13 images as pieces of 5, 5, 3;
     * 25 as two pieces per thread (5 images each, the last 0); weight
     * gradients summed over pieces; grouped, strided and pointwise too */
    run((conv_case){.data = MX_SHAPE(13, 3, 6, 5), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "4",
                    .max_points = 48});
    run((conv_case){.data = MX_SHAPE(25, 4, 5, 6), .kernel = "(3,2)", .stride = "(2,1)", .num_filter = "6",
                    .num_group = "2", .max_points = 48});
    run((conv_case){.data = MX_SHAPE(13, 5, 4, 4), .kernel = "(1,1)", .num_filter = "3", .max_points = 48});
    /* one image per product, 16 channels x 9 rows x 7744 columns lowered in parallel */
    run((conv_case){.data = MX_SHAPE(2, 16, 88, 88), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "2",
                    .max_points = 24});
    /* two images per product and 512 filters: staging split too; grouped */
    run((conv_case){.data = MX_SHAPE(3, 2, 32, 32), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "512",
                    .num_group = "2", .max_points = 12});
}
END_TEST

/* 3x3 stride-1 layers with channels enough take Winograd F(4x4, 3x3)
 * (lib/ops/cpu/winograd.c) for the forward, the data gradient (as the
 * convolution of dy with the flipped filters) and the weight gradient.
 * Its rounding error scales with the sum of |terms| of an output, not with
 * the output: about 3.5e-6 of that sum (tests/test_winograd.c), so the
 * absolute bound here is 2e-4 for sums of up to ~90 terms of |x*w| <= 1. */
START_TEST(winograd_path)
{
    /* batch of 5: on 3 threads one piece (run by the caller) */
    run((conv_case){.data = MX_SHAPE(5, 8, 9, 11), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "8",
                    .max_points = 48, .atol = 2e-4});
    /* 12 images: pieces of 4 on 3 threads; no padding; no bias */
    run((conv_case){.data = MX_SHAPE(12, 6, 7, 6), .kernel = "(3,3)", .num_filter = "10", .no_bias = "True",
                    .max_points = 48, .atol = 2e-4});
    /* pad 2 (backward-data then has pad 0) and pad (0, 2) */
    run((conv_case){.data = MX_SHAPE(3, 5, 6, 8), .kernel = "(3,3)", .pad = "(2,2)", .num_filter = "7",
                    .max_points = 48, .atol = 2e-4});
    run((conv_case){.data = MX_SHAPE(4, 9, 5, 13), .kernel = "(3,3)", .pad = "(0,2)", .num_filter = "4",
                    .max_points = 48, .atol = 2e-4});
}
END_TEST

START_TEST(conv1d_against_reference)
{
    run((conv_case){.data = MX_SHAPE(3, 4, 11), .kernel = "(3,)", .stride = "(2,)", .pad = "(1,)", .num_filter = "5"});
    run((conv_case){.data = MX_SHAPE(2, 4, 13), .kernel = "3", .dilate = "(2,)", .pad = "(2,)", .num_filter = "6", .num_group = "2"});
    run((conv_case){.data = MX_SHAPE(1, 3, 8), .kernel = "(1,)", .num_filter = "4", .no_bias = "True"});
    run((conv_case){.data = MX_SHAPE(3, 2, 9), .kernel = "(4,)", .stride = "(3,)", .num_filter = "3"});
}
END_TEST

/* Forward with req = add accumulates; req = null leaves the output alone. */
START_TEST(forward_requests)
{
    const mx_op_def *op = conv_op();
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *keys[] = {"kernel", "num_filter", "pad"}, *values[] = {"(3,3)", "4", "(1,1)"};
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, 3, params), MX_OK);
    mx_shape in_shapes[3] = {MX_SHAPE(3, 2, 5, 5)}, out_shape[1];
    ck_assert_int_eq(op->infer_shape(params, in_shapes, 3, out_shape, 1), MX_OK);
    mx_tensor in[3], out[1];
    for (int i = 0; i < 3; i++) {
        int64_t n = mx_shape_size(&in_shapes[i]);
        in[i] = (mx_tensor){.data = malloc((size_t)n * sizeof(float)), .shape = in_shapes[i], .dtype = MX_FLOAT32};
        for (int64_t k = 0; k < n; k++) ((float *)in[i].data)[k] = (float)((k * 7 + i * 3) % 11) / 11.0f - 0.5f;
    }
    int64_t n_out = mx_shape_size(&out_shape[0]);
    out[0] = (mx_tensor){.data = malloc((size_t)n_out * sizeof(float)), .shape = out_shape[0], .dtype = MX_FLOAT32};
    float *once = malloc((size_t)n_out * sizeof(float));
    size_t ws_bytes = op->workspace(params, in_shapes, out_shape, false);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .workspace = ws, .workspace_bytes = ws_bytes};
    mx_req req = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, in, &req, out, NULL), MX_OK);
    memcpy(once, out[0].data, (size_t)n_out * sizeof(float));
    req = MX_REQ_ADD;
    ck_assert_int_eq(op->forward(&ctx, params, in, &req, out, NULL), MX_OK);
    for (int64_t k = 0; k < n_out; k++) ck_assert_float_eq_tol(((float *)out[0].data)[k], 2 * once[k], 1e-5);
    req = MX_REQ_NULL;
    ck_assert_int_eq(op->forward(&ctx, params, in, &req, out, NULL), MX_OK);
    for (int64_t k = 0; k < n_out; k++) ck_assert_float_eq_tol(((float *)out[0].data)[k], 2 * once[k], 1e-5);
    /* A larger shared workspace (the executor sizes it for its hungriest
     * node) gives the same result. */
    void *big = malloc(ws_bytes * 4 + 64);
    ctx.workspace = big;
    ctx.workspace_bytes = ws_bytes * 4 + 64;
    req = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, in, &req, out, NULL), MX_OK);
    for (int64_t k = 0; k < n_out; k++) ck_assert_float_eq_tol(((float *)out[0].data)[k], once[k], 1e-6);
    free(big);
    /* With no workspace the op allocates its own column buffer. */
    ctx.workspace = NULL;
    ctx.workspace_bytes = 0;
    req = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, in, &req, out, NULL), MX_OK);
    for (int64_t k = 0; k < n_out; k++) ck_assert_float_eq_tol(((float *)out[0].data)[k], once[k], 1e-6);
    for (int i = 0; i < 3; i++) free(in[i].data);
    free(out[0].data);
    free(once);
    free(ws);
}
END_TEST

static mx_status infer(const char *const *keys, const char *const *values, int n, mx_shape *in, mx_shape *out)
{
    int n_in, n_out;
    return opcheck_infer("Convolution", keys, values, n, in, &n_in, out, &n_out);
}

START_TEST(alias_and_shapes)
{
    ck_assert_ptr_eq(mx_op_find("conv"), mx_op_find("Convolution"));
    /* AlexNet conv1: (224 + 2*2 - 11) / 4 + 1 = 55 */
    const char *k1[] = {"kernel", "stride", "pad", "num_filter"}, *v1[] = {"(11, 11)", "(4, 4)", "(2, 2)", "96"};
    mx_shape in[3] = {MX_SHAPE(8, 3, 224, 224)}, out[1];
    ck_assert_int_eq(infer(k1, v1, 4, in, out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){4, {8, 96, 55, 55}}));
    ck_assert(mx_shape_equal(&in[1], &(mx_shape){4, {96, 3, 11, 11}}));
    ck_assert(mx_shape_equal(&in[2], &(mx_shape){1, {96}}));
    /* dilation 2, groups 2, no bias: 2 inputs; (10 + 2 - 5) / 2 + 1 = 4 */
    const char *k2[] = {"kernel", "stride", "dilate", "pad", "num_filter", "num_group", "no_bias"};
    const char *v2[] = {"3,3", "2,2", "2,2", "1,1", "8", "2", "true"};
    mx_shape in2[3] = {MX_SHAPE(2, 4, 10, 10)};
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Convolution", k2, v2, 7, in2, &n_in, out, &n_out), MX_OK);
    ck_assert_int_eq(n_in, 2);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){4, {2, 8, 4, 4}}));
    ck_assert(mx_shape_equal(&in2[1], &(mx_shape){4, {8, 2, 3, 3}}));
    /* 1-D, layout NCW, cuDNN knobs and workspace accepted */
    const char *k3[] = {"kernel", "num_filter", "layout", "cudnn_tune", "cudnn_off", "workspace"};
    const char *v3[] = {"(5,)", "6", "NCW", "limited_workspace", "True", "256"};
    mx_shape in3[3] = {MX_SHAPE(4, 3, 20)};
    ck_assert_int_eq(infer(k3, v3, 6, in3, out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){3, {4, 6, 16}}));
    ck_assert(mx_shape_equal(&in3[1], &(mx_shape){3, {6, 3, 5}}));
    const char *v4[] = {"(3,3)", "2", "NCHW", "fastest", "0", "0"};
    mx_shape in4[3] = {MX_SHAPE(1, 1, 3, 3)};
    ck_assert_int_eq(infer(k3, v4, 6, in4, out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){4, {1, 2, 1, 1}}));
    /* The workspace request covers at least one image's columns. */
    const mx_op_def *op = mx_op_find("Convolution");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 4, params), MX_OK);
    ck_assert_uint_ge(op->workspace(params, in, out, false), (size_t)3 * 11 * 11 * 55 * 55 * sizeof(float));
}
END_TEST

static void expect_error(const char *const *keys, const char *const *values, int n, mx_shape data, mx_shape weight,
                         mx_status want, const char *const *needles)
{
    mx_shape in[3] = {data, weight}, out[1];
    mx_error_clear();
    mx_status s = infer(keys, values, n, in, out);
    ck_assert_msg(s == want, "status %d, want %d: %s", s, want, mx_last_error());
    for (; *needles; needles++)
        ck_assert_msg(strstr(mx_last_error(), *needles), "'%s' not in: %s", *needles, mx_last_error());
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

START_TEST(bad_parameters_name_op_parameter_and_value)
{
    const char *k[] = {"kernel", "num_filter"};
    mx_shape d = MX_SHAPE(2, 4, 8, 8), none = {0};
    expect_error(k, (const char *[]){"(0,3)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'kernel'", "'(0,3)'"));
    expect_error(k, (const char *[]){"(-1, 3)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'kernel'", "'(-1, 3)'"));
    expect_error(k, (const char *[]){"()", "4"}, 2, d, none, MX_ERR_INVALID, NEEDLES("Convolution", "'kernel'"));
    expect_error(k, (const char *[]){"(3,3)", "0"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'num_filter'", "'0'"));
    expect_error(k, (const char *[]){"(3,3,3)", "4"}, 2, MX_SHAPE(1, 1, 4, 4, 4), none, MX_ERR_UNSUPPORTED,
                 NEEDLES("Convolution", "'kernel'", "(3, 3, 3)", "3-D"));
    /* kernel larger than the padded input, dilation included */
    expect_error(k, (const char *[]){"(9,3)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'kernel'", "(9, 3)", "(2,4,8,8)"));
    const char *kd[] = {"kernel", "num_filter", "dilate", "pad"};
    expect_error(kd, (const char *[]){"(3,3)", "4", "(5,5)", "(1,1)"}, 4, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'kernel'", "11x11", "(2,4,8,8)", "(1, 1)"));
    /* groups must divide both channel counts */
    const char *kg[] = {"kernel", "num_filter", "num_group"};
    expect_error(kg, (const char *[]){"(3,3)", "6", "3"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'num_group'", "'3'", "4 input channels", "(2,4,8,8)"));
    expect_error(kg, (const char *[]){"(3,3)", "5", "2"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'num_group'", "'2'", "num_filter 5"));
    expect_error(kg, (const char *[]){"(3,3)", "4", "0"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'num_group'", "'0'"));
    /* mismatched weight, bias and data shapes */
    expect_error(kg, (const char *[]){"(3,3)", "4", "2"}, 3, d, MX_SHAPE(4, 4, 3, 3), MX_ERR_INVALID,
                 NEEDLES("Convolution", "weight", "(4,4,3,3)", "(4,2,3,3)"));
    expect_error(k, (const char *[]){"(3,3)", "4"}, 2, MX_SHAPE(2, 4, 8), none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "data", "(2,4,8)", "4 dimensions"));
    mx_shape in[3] = {d, none, MX_SHAPE(5)}, out[1];
    ck_assert_int_eq(infer(k, (const char *[]){"(3,3)", "4"}, 2, in, out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "bias has shape (5), expected (4)"));
    /* tuple ranks, strides, layouts, cuDNN knobs */
    const char *ks[] = {"kernel", "num_filter", "stride"};
    expect_error(ks, (const char *[]){"(3,3)", "4", "(2,)"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'stride'", "(2,)", "(3, 3)"));
    expect_error(ks, (const char *[]){"(3,3)", "4", "(0,1)"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'stride'", "'(0,1)'"));
    const char *kp[] = {"kernel", "num_filter", "pad"};
    expect_error(kp, (const char *[]){"(3,3)", "4", "(-1,0)"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'pad'", "'(-1,0)'"));
    const char *kl[] = {"kernel", "num_filter", "layout"};
    expect_error(kl, (const char *[]){"(3,3)", "4", "NHWC"}, 3, d, none, MX_ERR_UNSUPPORTED,
                 NEEDLES("Convolution", "'layout'", "'NHWC'"));
    expect_error(kl, (const char *[]){"(3,3)", "4", "NCW"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'layout'", "'NCW'", "2-D"));
    expect_error(kl, (const char *[]){"(3,3)", "4", "NWC"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'layout'", "'NWC'"));
    const char *kt[] = {"kernel", "num_filter", "cudnn_tune"};
    expect_error(kt, (const char *[]){"(3,3)", "4", "fastes"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'cudnn_tune'", "'fastes'", "did you mean 'fastest'"));
    const char *kw[] = {"kernel", "num_filter", "workspace"};
    expect_error(kw, (const char *[]){"(3,3)", "4", "-1"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'workspace'", "'-1'"));
    const char *kn[] = {"kernel", "num_filters"};
    expect_error(kn, (const char *[]){"(3,3)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Convolution", "'num_filters'", "did you mean 'num_filter'"));
}
END_TEST

START_TEST(param_formatting_is_mxnet_style)
{
    const mx_op_def *op = conv_op();
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    const char *k[] = {"kernel", "num_filter", "stride"}, *v[] = {"[3,3]", "8", "2, 2"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 3, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "kernel"), params, buf, sizeof(buf)), "(3, 3)");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "stride"), params, buf, sizeof(buf)), "(2, 2)");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "no_bias"), params, buf, sizeof(buf)), "False");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "workspace"), params, buf, sizeof(buf)), "1024");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "cudnn_tune"), params, buf, sizeof(buf)), "None");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "layout"), params, buf, sizeof(buf)), "None");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "num_group"), params, buf, sizeof(buf)), "1");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_convolution");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, conv2d_against_reference);
    tcase_add_test(tc, strided_pointwise);
    tcase_add_test(tc, grouped_and_depthwise);
    tcase_add_test(tc, depthwise_direct_path);
    tcase_add_test(tc, pointwise_and_lowering_paths);
    tcase_add_test(tc, threaded_lowering);
    tcase_add_test(tc, winograd_path);
    tcase_add_test(tc, conv1d_against_reference);
    tcase_add_test(tc, forward_requests);
    tcase_add_test(tc, alias_and_shapes);
    tcase_add_test(tc, bad_parameters_name_op_parameter_and_value);
    tcase_add_test(tc, param_formatting_is_mxnet_style);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
