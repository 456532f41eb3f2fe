/* test_op_deconvolution.c - Deconvolution against a naive float64
 * transposed convolution (each input pixel scatters weight * value into
 * the output), its gradients against finite differences, shapes (adj,
 * target_shape) and parameter errors. */
#include "support/opcheck.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const mx_op_def *deconv_op(void) { return mx_op_find("Deconvolution"); }

static const void *field(const void *params, const char *name)
{
    return (const char *)params + mx_op_param(deconv_op(), name)->offset;
}

/* Axis i (0 = h, 1 = w) of a spatial tuple; 1-D ops have h = hval. */
static int64_t tup(const void *params, const char *name, int i, int64_t dflt, int64_t hval)
{
    const mx_tuple *k = field(params, "kernel"), *t = field(params, name);
    if (k->ndim == 1 && i == 0) return hval;
    int j = k->ndim == 1 ? 0 : i;
    return t->ndim > 0 ? t->v[j] : dflt;
}

/* MXNet's output size along axis i, and the pad used (InferPad). */
static int64_t out_size(const void *params, int64_t in, int i, int64_t *pad)
{
    const mx_tuple *target = field(params, "target_shape"), *k = field(params, "kernel");
    bool use_target = false;
    for (int j = 0; j < target->ndim; j++) use_target |= target->v[j] != 0;
    int64_t s = tup(params, "stride", i, 1, 1), d = tup(params, "dilate", i, 1, 1), kk = tup(params, "kernel", i, 1, 1);
    int64_t full = s * (in - 1) + d * (kk - 1) + 1, adj;
    if (use_target && !(k->ndim == 1 && i == 0)) {
        int64_t total = full - target->v[k->ndim == 1 ? 0 : i];
        adj = total % 2;
        *pad = (total + 1) / 2;
    } else {
        *pad = tup(params, "pad", i, 0, 0);
        adj = tup(params, "adj", i, 0, 0);
    }
    return full - 2 * *pad + adj;
}

/* y[n, g*F/G + f, ih*s - p + ki*d, ...] += x[n, c, ih, iw] * w[c, f, ki, kj] */
static void deconv_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
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
    int64_t ph, pw, oh = out_size(params, h, 0, &ph), ow = out_size(params, w, 1, &pw);
    ck_assert_int_eq(out_shapes[0].dims[1], f_total);
    ck_assert_int_eq(out_shapes[0].dims[r + 1], ow);
    if (r == 2) ck_assert_int_eq(out_shapes[0].dims[2], oh);
    int64_t cg = c_total / grp, fg = f_total / grp;
    for (int64_t n = 0; n < n_b; n++)
        for (int64_t f = 0; f < f_total; f++)
            for (int64_t k = 0; k < oh * ow; k++) out[0][(n * f_total + f) * oh * ow + k] = bias ? in[2][f] : 0.0;
    for (int64_t n = 0; n < n_b; n++)
        for (int64_t c = 0; c < c_total; c++)
            for (int64_t iy = 0; iy < h; iy++)
                for (int64_t ix = 0; ix < w; ix++) {
                    double v = in[0][((n * c_total + c) * h + iy) * w + ix];
                    for (int64_t f = 0; f < fg; f++)
                        for (int64_t i = 0; i < kh; i++)
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t y = iy * sh - ph + i * dh, x = ix * sw - pw + j * dw;
                                if (y < 0 || y >= oh || x < 0 || x >= ow) continue;
                                int64_t fo = (c / cg) * fg + f;
                                out[0][((n * f_total + fo) * oh + y) * ow + x] +=
                                    v * in[1][((c * fg + f) * kh + i) * kw + j];
                            }
                }
}

typedef struct deconv_case {
    mx_shape data;
    const char *kernel, *stride, *dilate, *pad, *adj, *target_shape, *num_filter, *num_group, *no_bias, *workspace;
    int max_points; /* finite-difference points per input; 0: the harness default */
    double atol;    /* forward and gradient absolute tolerance; 0: the harness default */
} deconv_case;

static void run(deconv_case dc)
{
    const char *keys[] = {"kernel",     "stride",    "dilate",  "pad",      "adj",
                          "target_shape", "num_filter", "num_group", "no_bias", "workspace"};
    const char *values[] = {dc.kernel,
                            dc.stride ? dc.stride : "()",
                            dc.dilate ? dc.dilate : "()",
                            dc.pad ? dc.pad : "()",
                            dc.adj ? dc.adj : "()",
                            dc.target_shape ? dc.target_shape : "()",
                            dc.num_filter,
                            dc.num_group ? dc.num_group : "1",
                            dc.no_bias ? dc.no_bias : "False",
                            dc.workspace ? dc.workspace : "512"};
    opcheck_case c = {.op = "Deconvolution", .keys = keys, .values = values, .n_params = 10, .ref = deconv_ref,
                      .seed = (uint64_t)mx_shape_size(&dc.data) * 97 + (uint64_t)atoi(dc.num_filter),
                      .max_points = dc.max_points, .fwd_atol = dc.atol, .grad_atol = dc.atol};
    c.in_shapes[0] = dc.data;
    opcheck_run(&c);
}

START_TEST(deconv2d_against_reference)
{
    run((deconv_case){.data = MX_SHAPE(2, 3, 4, 5), .kernel = "(3,3)", .num_filter = "4"});
    /* stride 2, pad, adj, odd sizes */
    run((deconv_case){.data = MX_SHAPE(3, 2, 5, 4), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)",
                      .adj = "(1,0)", .num_filter = "3"});
    run((deconv_case){.data = MX_SHAPE(1, 3, 3, 4), .kernel = "(4,2)", .stride = "(3,2)", .pad = "(1,0)",
                      .adj = "(2,1)", .num_filter = "2", .no_bias = "True"});
    /* dilation 2 */
    run((deconv_case){.data = MX_SHAPE(1, 2, 4, 4), .kernel = "(3,2)", .dilate = "(2,2)", .num_filter = "2"});
    run((deconv_case){.data = MX_SHAPE(3, 2, 3, 5), .kernel = "(3,3)", .stride = "(2,1)", .dilate = "(2,3)",
                      .pad = "(2,1)", .num_filter = "3"});
    /* 1x1 kernels: the direct SGEMM path for one image, lowered for three */
    run((deconv_case){.data = MX_SHAPE(1, 5, 3, 3), .kernel = "(1,1)", .num_filter = "4"});
    run((deconv_case){.data = MX_SHAPE(3, 5, 3, 4), .kernel = "(1,1)", .num_filter = "4"});
    run((deconv_case){.data = MX_SHAPE(2, 3, 3, 3), .kernel = "(1,1)", .stride = "(2,2)", .num_filter = "2"});
    /* workspace 0: one image at a time */
    run((deconv_case){.data = MX_SHAPE(3, 2, 4, 4), .kernel = "(3,3)", .stride = "(2,2)", .num_filter = "2",
                      .workspace = "0"});
}
END_TEST

/* Big enough that col2im (forward) and im2col (backward) run threaded. */
START_TEST(threaded_lowering)
{
    /* the matching convolution (16 -> 4 channels, 3x3, stride 1) takes
     * Winograd F(4x4, 3x3): its error scales with the sum of |terms| (36 of
     * them here), hence the absolute bound (see test_op_convolution.c) */
    run((deconv_case){.data = MX_SHAPE(1, 4, 88, 88), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "16",
                      .max_points = 16, .atol = 2e-4});
    run((deconv_case){.data = MX_SHAPE(2, 4, 44, 44), .kernel = "(4,4)", .stride = "(2,2)", .pad = "(1,1)",
                      .num_filter = "16", .num_group = "2", .max_points = 16});
}
END_TEST

START_TEST(grouped_and_depthwise)
{
    run((deconv_case){.data = MX_SHAPE(2, 4, 3, 5), .kernel = "(3,3)", .stride = "(2,1)", .num_filter = "6",
                      .num_group = "2"});
    run((deconv_case){.data = MX_SHAPE(2, 3, 4, 4), .kernel = "(3,3)", .pad = "(1,1)", .num_filter = "3",
                      .num_group = "3"});
    /* strided depthwise: the direct depthwise kernels of the matching convolution */
    run((deconv_case){.data = MX_SHAPE(2, 3, 5, 4), .kernel = "(3,3)", .stride = "(2,2)", .pad = "(1,1)",
                      .num_filter = "3", .num_group = "3"});
    run((deconv_case){.data = MX_SHAPE(3, 4, 3, 3), .kernel = "(2,2)", .stride = "(2,2)", .num_filter = "8",
                      .num_group = "4", .no_bias = "True"});
}
END_TEST

START_TEST(target_shape_sets_pad_and_adj)
{
    /* total = 2*(4-1) + 4 - 8 = 2: pad 1, adj 0 */
    run((deconv_case){.data = MX_SHAPE(2, 2, 4, 4), .kernel = "(4,4)", .stride = "(2,2)", .target_shape = "(8,8)",
                      .num_filter = "2"});
    /* total = 1 and 2: pad (1, 1), adj (1, 0); pad and adj are ignored */
    run((deconv_case){.data = MX_SHAPE(1, 2, 4, 3), .kernel = "(4,3)", .stride = "(2,2)", .pad = "(5,5)",
                      .adj = "(0,1)", .target_shape = "(9,5)", .num_filter = "3"});
    run((deconv_case){.data = MX_SHAPE(2, 3, 5), .kernel = "(3,)", .stride = "(2,)", .target_shape = "(10,)",
                      .num_filter = "2"});
}
END_TEST

START_TEST(deconv1d_against_reference)
{
    run((deconv_case){.data = MX_SHAPE(3, 4, 6), .kernel = "(3,)", .stride = "(2,)", .pad = "(1,)", .adj = "(1,)",
                      .num_filter = "5"});
    run((deconv_case){.data = MX_SHAPE(2, 4, 7), .kernel = "3", .dilate = "(2,)", .num_filter = "6",
                      .num_group = "2"});
    run((deconv_case){.data = MX_SHAPE(1, 3, 5), .kernel = "(1,)", .num_filter = "2"});
}
END_TEST

static mx_status infer(const char *const *keys, const char *const *values, int n, mx_shape *in, mx_shape *out,
                       int *n_in)
{
    int n_out;
    return opcheck_infer("Deconvolution", keys, values, n, in, n_in, out, &n_out);
}

START_TEST(shapes_and_defaults)
{
    /* no_bias defaults to True: two inputs; (7-1)*2 + 4 - 2 = 14 */
    const char *k1[] = {"kernel", "stride", "pad", "num_filter"}, *v1[] = {"(4,4)", "(2,2)", "(1,1)", "3"};
    mx_shape in[3] = {MX_SHAPE(5, 8, 7, 7)}, out[1];
    int n_in;
    ck_assert_int_eq(infer(k1, v1, 4, in, out, &n_in), MX_OK);
    ck_assert_int_eq(n_in, 2);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){4, {5, 3, 14, 14}}));
    ck_assert(mx_shape_equal(&in[1], &(mx_shape){4, {8, 3, 4, 4}}));
    /* groups: weight (C, F/G, kh, kw); adj adds to the size */
    const char *k2[] = {"kernel", "stride", "adj", "num_filter", "num_group", "no_bias"};
    const char *v2[] = {"(3,3)", "(3,3)", "(2,1)", "6", "2", "False"};
    mx_shape in2[3] = {MX_SHAPE(1, 4, 2, 2)};
    ck_assert_int_eq(infer(k2, v2, 6, in2, out, &n_in), MX_OK);
    ck_assert_int_eq(n_in, 3);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){4, {1, 6, 8, 7}}));
    ck_assert(mx_shape_equal(&in2[1], &(mx_shape){4, {4, 3, 3, 3}}));
    ck_assert(mx_shape_equal(&in2[2], &(mx_shape){1, {6}}));
    /* 1-D with target_shape; layout and cuDNN knobs accepted */
    const char *k3[] = {"kernel", "stride", "target_shape", "num_filter", "layout", "cudnn_tune", "cudnn_off"};
    const char *v3[] = {"(4,)", "(2,)", "(12,)", "2", "NCW", "off", "1"};
    mx_shape in3[3] = {MX_SHAPE(2, 3, 6)};
    ck_assert_int_eq(infer(k3, v3, 7, in3, out, &n_in), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){3, {2, 2, 12}}));
    ck_assert(mx_shape_equal(&in3[1], &(mx_shape){3, {3, 2, 4}}));
    const mx_op_def *op = deconv_op();
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 4, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "no_bias"), params, buf, sizeof(buf)), "True");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "workspace"), params, buf, sizeof(buf)), "512");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "kernel"), params, buf, sizeof(buf)), "(4, 4)");
    ck_assert_ptr_null(mx_op_find("deconv"));
}
END_TEST

static void expect_error(const char *const *keys, const char *const *values, int n, mx_shape data, mx_shape weight,
                         mx_status want, const char *const *needles)
{
    mx_shape in[3] = {data, weight}, out[1];
    int n_in;
    mx_error_clear();
    mx_status s = infer(keys, values, n, in, out, &n_in);
    ck_assert_msg(s == want, "status %d, want %d: %s", s, want, mx_last_error());
    for (; *needles; needles++)
        ck_assert_msg(strstr(mx_last_error(), *needles), "'%s' not in: %s", *needles, mx_last_error());
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

START_TEST(bad_parameters_name_op_parameter_and_value)
{
    const char *k[] = {"kernel", "num_filter"};
    mx_shape d = MX_SHAPE(2, 4, 5, 5), none = {0};
    expect_error(k, (const char *[]){"(0,3)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'kernel'", "'(0,3)'"));
    expect_error(k, (const char *[]){"(3,-2)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'kernel'", "'(3,-2)'"));
    expect_error(k, (const char *[]){"(3,3)", "0"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'num_filter'", "'0'"));
    expect_error(k, (const char *[]){"(3,3)", "100001"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'num_filter'", "'100001'"));
    expect_error(k, (const char *[]){"(2,2,2)", "4"}, 2, MX_SHAPE(1, 1, 2, 2, 2), none, MX_ERR_UNSUPPORTED,
                 NEEDLES("Deconvolution", "'kernel'", "(2, 2, 2)"));
    const char *kg[] = {"kernel", "num_filter", "num_group"};
    expect_error(kg, (const char *[]){"(3,3)", "6", "3"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'num_group'", "'3'", "4 input channels"));
    expect_error(kg, (const char *[]){"(3,3)", "3", "2"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'num_group'", "'2'", "num_filter 3"));
    /* adj must stay below the stride */
    const char *ka[] = {"kernel", "num_filter", "stride", "adj"};
    expect_error(ka, (const char *[]){"(3,3)", "4", "(2,2)", "(0,2)"}, 4, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'adj'", "(0, 2)", "(2, 2)"));
    /* target_shape beyond what the kernel reaches: 2*(5-1) + 3 = 11 */
    const char *kt[] = {"kernel", "num_filter", "stride", "target_shape"};
    expect_error(kt, (const char *[]){"(3,3)", "4", "(2,2)", "(12,11)"}, 4, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'target_shape'", "(12, 11)", "at most 11"));
    /* stride 1 with an odd total: adj 1 is not below the stride */
    expect_error(kt, (const char *[]){"(3,3)", "4", "(1,1)", "(6,6)"}, 4, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'target_shape'", "(6, 6)"));
    /* padding eats the whole output: (1-1) + 1 - 2 = -1 */
    const char *kp[] = {"kernel", "num_filter", "pad"};
    expect_error(kp, (const char *[]){"(1,1)", "2", "(1,1)"}, 3, MX_SHAPE(1, 1, 1, 1), none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'pad'", "(1, 1)", "size -1"));
    /* mismatched shapes */
    expect_error(kg, (const char *[]){"(3,3)", "6", "2"}, 3, d, MX_SHAPE(4, 6, 3, 3), MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "weight", "(4,6,3,3)", "(4,3,3,3)"));
    expect_error(k, (const char *[]){"(3,)", "4"}, 2, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "data", "(2,4,5,5)", "3 dimensions"));
    const char *ks[] = {"kernel", "num_filter", "target_shape"};
    expect_error(ks, (const char *[]){"(3,3)", "4", "(7,)"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'target_shape'", "(7,)"));
    const char *kl[] = {"kernel", "num_filter", "layout"};
    expect_error(kl, (const char *[]){"(3,3)", "4", "NDHWC"}, 3, d, none, MX_ERR_UNSUPPORTED,
                 NEEDLES("Deconvolution", "'layout'", "'NDHWC'"));
    const char *kw[] = {"kernel", "num_filter", "workspace"};
    expect_error(kw, (const char *[]){"(3,3)", "4", "9000"}, 3, d, none, MX_ERR_INVALID,
                 NEEDLES("Deconvolution", "'workspace'", "'9000'"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_deconvolution");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, deconv2d_against_reference);
    tcase_add_test(tc, threaded_lowering);
    tcase_add_test(tc, grouped_and_depthwise);
    tcase_add_test(tc, target_shape_sets_pad_and_adj);
    tcase_add_test(tc, deconv1d_against_reference);
    tcase_add_test(tc, shapes_and_defaults);
    tcase_add_test(tc, bad_parameters_name_op_parameter_and_value);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
