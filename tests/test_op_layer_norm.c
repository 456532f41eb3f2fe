/* test_op_layer_norm.c - LayerNorm against a float64 reference and finite
 * differences (including the mean and std outputs when shown), values
 * written by MXNet 1.9.1, and shape errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const void *field(const void *params, const char *key)
{
    return (const char *)params + mx_op_param(mx_op_find("LayerNorm"), key)->offset;
}

static void ln_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_shape *d = &in_shapes[0];
    int64_t axis = *(const int64_t *)field(params, "axis");
    double eps = *(const double *)field(params, "eps");
    if (axis < 0) axis += d->ndim;
    int64_t outer = 1, inner = 1, n = d->dims[axis];
    for (int k = 0; k < axis; k++) outer *= d->dims[k];
    for (int k = (int)axis + 1; k < d->ndim; k++) inner *= d->dims[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = 0, v = 0;
            for (int64_t k = 0; k < n; k++) m += in[0][(o * n + k) * inner + i];
            m /= (double)n;
            for (int64_t k = 0; k < n; k++) v += pow(in[0][(o * n + k) * inner + i] - m, 2);
            double sd = sqrt(v / (double)n + eps);
            for (int64_t k = 0; k < n; k++) {
                int64_t j = (o * n + k) * inner + i;
                out[0][j] = (in[0][j] - m) / sd * in[1][k] + in[2][k];
            }
            out[1][o * inner + i] = m;
            out[2][o * inner + i] = sd;
        }
}

static void run_points(mx_shape data, const char *axis, const char *omv, uint64_t seed, int max_points)
{
    const char *keys[] = {"axis", "output_mean_var", "eps"}, *values[] = {axis, omv, "1e-3"};
    opcheck_case c = {.op = "LayerNorm", .keys = keys, .values = values, .n_params = 3, .ref = ln_ref,
                      .seed = seed, .grad_rtol = 1e-3, .grad_atol = 1e-4, .max_points = max_points};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

static void run(mx_shape data, const char *axis, const char *omv, uint64_t seed)
{
    run_points(data, axis, omv, seed, 0);
}

START_TEST(forward_backward_against_reference)
{
    run(MX_SHAPE(4, 6), "-1", "False", 1);
    run(MX_SHAPE(2, 3, 5), "1", "False", 2);
    run(MX_SHAPE(2, 3, 5), "0", "True", 3);
    run(MX_SHAPE(2, 3, 5), "-1", "True", 4);
    run(MX_SHAPE(3, 4, 2, 2), "-3", "False", 5);
    run(MX_SHAPE(7), "0", "True", 6);
    /* big enough that sets and gamma entries split across the pool */
    run_points(MX_SHAPE(64, 512), "-1", "False", 7, 24);
    run_points(MX_SHAPE(4, 256, 16), "1", "True", 8, 24);
}
END_TEST

/* From MXNet 1.9.1 (the venv), computed once with
 *   x = mx.nd.array((np.arange(24).reshape(2,4,3)**1.5)/10)
 *   mx.nd.LayerNorm(x, [1.5,-0.5,2], [0.1,0.2,0.3], axis=-1)          (first 6)
 *   mx.nd.LayerNorm(x, [1.5,-0.5,2,1], [.1,.2,.3,.4], axis=1, output_mean_var=True)[2]   (std) */
START_TEST(mxnet_values)
{
    float x[24], g3[] = {1.5f, -0.5f, 2.0f}, b3[] = {0.1f, 0.2f, 0.3f};
    float g4[] = {1.5f, -0.5f, 2.0f, 1.0f}, b4[] = {0.1f, 0.2f, 0.3f, 0.4f};
    for (int i = 0; i < 24; i++) x[i] = (float)(pow(i, 1.5) / 10);
    mx_shape s[3] = {MX_SHAPE(2, 4, 3)};
    const float *in3[] = {x, g3, b3}, *in4[] = {x, g4, b4};
    oprun r;
    ck_assert_msg(oprun_forward(&r, "LayerNorm", NULL, NULL, 0, 3, s, in3) == MX_OK, "%s", mx_last_error());
    const double want[] = {-1.5339561700820923, 0.31785640120506287, 2.9500339031219482,
                           -1.6972545385360718, 0.22566570341587067, 2.799001693725586};
    for (int i = 0; i < 6; i++) ck_assert_msg(fabs(r.out[0][i] - want[i]) < 1e-5, "%d: %g vs %g", i, r.out[0][i], want[i]);
    oprun_free(&r);
    const char *k[] = {"axis", "output_mean_var"}, *v[] = {"1", "True"};
    ck_assert(oprun_forward(&r, "LayerNorm", k, v, 2, 3, s, in4) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[2], MX_SHAPE(2, 1, 3)));
    const double want_std[] = {1.0274525880813599, 1.1549127101898193, 1.2643228769302368,
                               2.0395257472991943, 2.1008996963500977, 2.160505771636963};
    for (int i = 0; i < 6; i++) ck_assert(fabs(r.out[2][i] - want_std[i]) < 1e-5);
    oprun_free(&r);
}
END_TEST

START_TEST(shapes_and_errors)
{
    mx_shape in[3] = {MX_SHAPE(2, 3, 4)}, out[3];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("LayerNorm", NULL, NULL, 0, in, &n_in, out, &n_out), MX_OK);
    ck_assert(oprun_shape_is(&in[1], MX_SHAPE(4)) && oprun_shape_is(&out[1], MX_SHAPE(2, 3, 1)));
    const mx_op_def *op = mx_op_find("LayerNorm");
    _Alignas(16) char params[256] = {0};
    ck_assert(mx_op_parse_params(op, NULL, NULL, 0, params) == MX_OK);
    ck_assert_int_eq(op->num_visible_outputs(params), 1);
    const char *k[] = {"axis"}, *v[] = {"3"};
    mx_shape in2[3] = {MX_SHAPE(2, 3, 4)};
    ck_assert_int_eq(opcheck_infer("LayerNorm", k, v, 1, in2, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LayerNorm: parameter 'axis' has value 3, out of range"));
    mx_shape in3[3] = {MX_SHAPE(2, 3, 4), MX_SHAPE(3)};
    ck_assert_int_eq(opcheck_infer("LayerNorm", NULL, NULL, 0, in3, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LayerNorm: gamma has shape (3), expected (4,)"));
    const char *ke[] = {"eps"}, *ve[] = {"-1"};
    ck_assert_int_eq(opcheck_infer("LayerNorm", ke, ve, 1, in2, &n_in, out, &n_out), MX_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_layer_norm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, mxnet_values);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
