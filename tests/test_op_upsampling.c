/* test_op_upsampling.c - UpSampling nearest (one and several inputs,
 * concat and sum) and bilinear (a grouped Deconvolution with a learned
 * weight) against float64 references and finite differences, values
 * written by MXNet 1.9.1, and errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_n_in;
static bool g_sum;

static void nearest_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                        const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *o = &out_shapes[0];
    int64_t N = o->dims[0], OC = o->dims[1], OH = o->dims[2], OW = o->dims[3];
    memset(out[0], 0, sizeof(double) * (size_t)mx_shape_size(o));
    int64_t c0 = 0;
    for (int i = 0; i < g_n_in; i++) {
        const mx_shape *s = &in_shapes[i];
        int64_t C = s->dims[1], H = s->dims[2], W = s->dims[3];
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t h = 0; h < OH; h++)
                    for (int64_t w = 0; w < OW; w++) /* nearest source: floor(h * H / OH) */
                        out[0][((n * OC + c0 + c) * OH + h) * OW + w] +=
                            in[i][((n * C + c) * H + h * H / OH) * W + w * W / OW];
        if (!g_sum) c0 += C;
    }
}

static void run_nearest(int n_in, const mx_shape *shapes, const char *scale, bool sum, uint64_t seed)
{
    char na[8];
    snprintf(na, sizeof(na), "%d", n_in);
    const char *keys[] = {"scale", "sample_type", "num_args", "multi_input_mode"};
    const char *values[] = {scale, "nearest", na, sum ? "sum" : "concat"};
    g_n_in = n_in, g_sum = sum;
    opcheck_case c = {.op = "UpSampling", .keys = keys, .values = values, .n_params = 4, .ref = nearest_ref,
                      .seed = seed};
    for (int i = 0; i < n_in; i++) c.in_shapes[i] = shapes[i];
    opcheck_run(&c);
}

static int64_t g_scale;

/* Transposed, per-channel convolution: out[oh] += x[h] w[kh] at oh = h*s - pad + kh. */
static void bilinear_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                         const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *d = &in_shapes[0], *o = &out_shapes[0];
    int64_t N = d->dims[0], C = d->dims[1], H = d->dims[2], W = d->dims[3], OH = o->dims[2], OW = o->dims[3];
    int64_t s = g_scale, k = 2 * s - s % 2, pad = (s - 1 + 1) / 2;
    memset(out[0], 0, sizeof(double) * (size_t)mx_shape_size(o));
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++)
                    for (int64_t kh = 0; kh < k; kh++)
                        for (int64_t kw = 0; kw < k; kw++) {
                            int64_t oh = h * s - pad + kh, ow = w * s - pad + kw;
                            if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                            out[0][((n * C + c) * OH + oh) * OW + ow] +=
                                in[0][((n * C + c) * H + h) * W + w] * in[1][(c * k + kh) * k + kw];
                        }
}

START_TEST(forward_backward)
{
    mx_shape one[] = {MX_SHAPE(2, 2, 3, 2)};
    run_nearest(1, one, "2", false, 1);
    run_nearest(1, one, "3", false, 2);
    mx_shape two[] = {MX_SHAPE(1, 2, 2, 2), MX_SHAPE(1, 1, 4, 4)};
    run_nearest(2, two, "2", false, 3);
    mx_shape three[] = {MX_SHAPE(1, 2, 2, 3), MX_SHAPE(1, 2, 1, 3), MX_SHAPE(1, 2, 4, 6)};
    run_nearest(3, three, "2", true, 4);
    for (int s = 2; s <= 3; s++) {
        g_scale = s;
        const char *keys[] = {"scale", "sample_type", "num_filter"};
        const char *values[] = {s == 2 ? "2" : "3", "bilinear", "2"};
        opcheck_case c = {.op = "UpSampling", .keys = keys, .values = values, .n_params = 3, .ref = bilinear_ref,
                          .seed = 10 + (uint64_t)s};
        c.in_shapes[0] = MX_SHAPE(2, 2, 3, 3);
        opcheck_run(&c);
    }
}
END_TEST

/* From MXNet 1.9.1 on u = arange(8).reshape(1,2,2,2) (first 12 values):
 *   UpSampling(u, scale=2, sample_type='nearest') (1,2,4,4) [0,0,1,1,0,0,1,1,2,2,3,3]
 *   UpSampling(u, ones((1,2,4,4)), scale=2, 'nearest', num_args=2, multi_input_mode='sum')
 *     [1,1,2,2,1,1,2,2,3,3,4,4]
 *   UpSampling(u, ones((2,1,4,4)), scale=2, 'bilinear', num_filter=2) (1,2,4,4)
 *     [0,1,1,1,2,6,6,4,2,6,6,4]
 *   a second input of (1,1,3,3) -> "input height of 3 does not divide output height of 4" */
START_TEST(mxnet_values_and_errors)
{
    float u[8], ones[32];
    for (int i = 0; i < 8; i++) u[i] = (float)i;
    for (int i = 0; i < 32; i++) ones[i] = 1;
    oprun r;
    mx_shape s1[] = {MX_SHAPE(1, 2, 2, 2)};
    const float *in1[] = {u};
    ck_assert(oprun_forward(&r, "UpSampling", (const char *[]){"scale", "sample_type"},
                            (const char *[]){"2", "nearest"}, 2, 1, s1, in1) == MX_OK);
    float w1[] = {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3};
    for (int i = 0; i < 12; i++) ck_assert_float_eq(r.out[0][i], w1[i]);
    oprun_free(&r);
    mx_shape s2[] = {MX_SHAPE(1, 2, 2, 2), MX_SHAPE(1, 2, 4, 4)};
    const float *in2[] = {u, ones};
    ck_assert(oprun_forward(&r, "UpSampling", (const char *[]){"scale", "sample_type", "num_args", "multi_input_mode"},
                            (const char *[]){"2", "nearest", "2", "sum"}, 4, 2, s2, in2) == MX_OK);
    float w2[] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4};
    for (int i = 0; i < 12; i++) ck_assert_float_eq(r.out[0][i], w2[i]);
    oprun_free(&r);
    mx_shape s3[] = {MX_SHAPE(1, 2, 2, 2), MX_SHAPE(2, 1, 4, 4)};
    ck_assert(oprun_forward(&r, "UpSampling", (const char *[]){"scale", "sample_type", "num_filter"},
                            (const char *[]){"2", "bilinear", "2"}, 3, 2, s3, in2) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(1, 2, 4, 4)));
    float w3[] = {0, 1, 1, 1, 2, 6, 6, 4, 2, 6, 6, 4};
    for (int i = 0; i < 12; i++) ck_assert_float_eq(r.out[0][i], w3[i]);
    oprun_free(&r);

    int n_in, n_out;
    mx_shape out[1];
    mx_shape e1[] = {MX_SHAPE(1, 2, 2, 2), MX_SHAPE(1, 1, 3, 3)};
    const char *k[] = {"scale", "sample_type", "num_args"};
    ck_assert_int_eq(opcheck_infer("UpSampling", k, (const char *[]){"2", "nearest", "2"}, 3, e1, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "input arg1 (1,1,3,3) cannot be repeated to (4, 4)"));
    mx_shape e2[] = {MX_SHAPE(2, 2, 2)};
    ck_assert_int_eq(opcheck_infer("UpSampling", k, (const char *[]){"2", "nearest", "1"}, 3, e2, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    mx_shape e3[] = {MX_SHAPE(1, 2, 2, 2)};
    ck_assert_int_eq(opcheck_infer("UpSampling", (const char *[]){"scale", "sample_type"},
                                   (const char *[]){"2", "bilinear"}, 2, e3, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "bilinear needs num_filter"));
    mx_shape e4[] = {MX_SHAPE(1, 2, 2, 2)};
    ck_assert_int_eq(opcheck_infer("UpSampling", (const char *[]){"scale", "sample_type", "num_filter"},
                                   (const char *[]){"2", "bilinear", "3"}, 3, e4, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    mx_shape e5[] = {MX_SHAPE(1, 2, 2, 2)};
    ck_assert_int_eq(opcheck_infer("UpSampling", (const char *[]){"scale"}, (const char *[]){"2"}, 1, e5, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID); /* sample_type is required */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_upsampling");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forward_backward);
    tcase_add_test(tc, mxnet_values_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
