/* test_op_group_norm.c - GroupNorm and InstanceNorm against a float64
 * reference and finite differences, values written by MXNet 1.9.1, and
 * shape errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t g_groups; /* 0: InstanceNorm (one group per channel, gamma per channel) */

static void gn_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    const char *op = g_groups ? "GroupNorm" : "InstanceNorm";
    double eps = *(const double *)((const char *)params + mx_op_param(mx_op_find(op), "eps")->offset);
    const mx_shape *d = &in_shapes[0];
    int64_t N = d->dims[0], C = d->dims[1], S = mx_shape_size(d) / (N * C);
    int64_t G = g_groups ? g_groups : C, cg = C / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const double *x = in[0] + (n * C + g * cg) * S;
            double m = 0, v = 0;
            for (int64_t i = 0; i < cg * S; i++) m += x[i];
            m /= (double)(cg * S);
            for (int64_t i = 0; i < cg * S; i++) v += (x[i] - m) * (x[i] - m);
            double sd = sqrt(v / (double)(cg * S) + eps);
            for (int64_t i = 0; i < cg * S; i++)
                out[0][(n * C + g * cg) * S + i] = (x[i] - m) / sd * in[1][g] + in[2][g];
            if (g_groups) {
                out[1][n * G + g] = m;
                out[2][n * G + g] = sd;
            }
        }
}

static void run(const char *op, int64_t groups, mx_shape data, const char *omv, uint64_t seed)
{
    char gs[32];
    snprintf(gs, sizeof(gs), "%lld", (long long)groups);
    const char *keys[] = {"eps", "num_groups", "output_mean_var"}, *values[] = {"1e-3", gs, omv};
    g_groups = groups;
    opcheck_case c = {.op = op, .keys = keys, .values = values, .n_params = groups ? 3 : 1, .ref = gn_ref,
                      .seed = seed, .grad_rtol = 1e-3, .grad_atol = 1e-4,
                      .max_points = mx_shape_size(&data) > 4096 ? 24 : 0};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run("GroupNorm", 1, MX_SHAPE(2, 3, 4), "False", 1);
    run("GroupNorm", 2, MX_SHAPE(2, 4, 3), "True", 2);
    run("GroupNorm", 3, MX_SHAPE(2, 6, 2, 2), "False", 3);
    run("GroupNorm", 4, MX_SHAPE(1, 4, 5), "True", 4);
    run("InstanceNorm", 0, MX_SHAPE(2, 3, 5), NULL, 5);
    run("InstanceNorm", 0, MX_SHAPE(2, 2, 3, 3), NULL, 6);
    /* big enough that sets and groups split across the pool */
    run("GroupNorm", 8, MX_SHAPE(16, 32, 8, 8), "True", 7);
    run("InstanceNorm", 0, MX_SHAPE(8, 16, 16, 16), NULL, 8);
}
END_TEST

/* From MXNet 1.9.1 (the venv), computed once with
 *   x = mx.nd.array((np.arange(24).reshape(2,4,3)**1.5)/10)
 *   mx.nd.GroupNorm(x, [1.5,-0.5], [0.1,0.2], num_groups=2)
 *   mx.nd.InstanceNorm(x, [1.5,-0.5,2,1], [.1,.2,.3,.4])   (first 8 of each) */
START_TEST(mxnet_values)
{
    float x[24], g2[] = {1.5f, -0.5f}, b2[] = {0.1f, 0.2f};
    float g4[] = {1.5f, -0.5f, 2.0f, 1.0f}, b4[] = {0.1f, 0.2f, 0.3f, 0.4f};
    for (int i = 0; i < 24; i++) x[i] = (float)(pow(i, 1.5) / 10);
    mx_shape s[3] = {MX_SHAPE(2, 4, 3)};
    const float *in2[] = {x, g2, b2}, *in4[] = {x, g4, b4};
    oprun r;
    const char *k[] = {"num_groups"}, *v[] = {"2"};
    ck_assert_msg(oprun_forward(&r, "GroupNorm", k, v, 1, 3, s, in2) == MX_OK, "%s", mx_last_error());
    const double want[] = {-1.6966277360916138, -1.3144333362579346, -0.6156183481216431, 0.28931325674057007,
                           1.3609286546707153, 2.576436996459961, 0.9017652869224548, 0.6452926397323608};
    for (int i = 0; i < 8; i++) ck_assert_msg(fabs(r.out[0][i] - want[i]) < 1e-5, "%d: %g vs %g", i, r.out[0][i], want[i]);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "InstanceNorm", NULL, NULL, 0, 3, s, in4) == MX_OK);
    const double want_in[] = {-1.4780328273773193, -0.24146804213523865, 2.019500732421875, 0.7941844463348389,
                              0.22545576095581055, -0.41964006423950195, -2.1082940101623535, 0.24184292554855347};
    for (int i = 0; i < 8; i++) ck_assert(fabs(r.out[0][i] - want_in[i]) < 1e-5);
    /* the hidden mean and var (N, C), as MXNet keeps them */
    ck_assert(oprun_shape_is(&r.out_shapes[1], MX_SHAPE(2, 4)) && oprun_shape_is(&r.out_shapes[2], MX_SHAPE(2, 4)));
    for (int nc = 0; nc < 8; nc++) {
        double m = 0, v = 0;
        for (int k = 0; k < 3; k++) m += x[nc * 3 + k] / 3.0;
        for (int k = 0; k < 3; k++) v += (x[nc * 3 + k] - m) * (x[nc * 3 + k] - m) / 3.0;
        ck_assert(fabs(r.out[1][nc] - m) < 1e-5 && fabs(r.out[2][nc] - v) < 1e-5);
    }
    oprun_free(&r);
}
END_TEST

START_TEST(shapes_and_errors)
{
    int n_in, n_out;
    mx_shape out[3];
    const char *k[] = {"num_groups"}, *v[] = {"2"}, *v3[] = {"3"};
    mx_shape a[3] = {MX_SHAPE(2, 4, 3)};
    ck_assert_int_eq(opcheck_infer("GroupNorm", k, v, 1, a, &n_in, out, &n_out), MX_OK);
    ck_assert(oprun_shape_is(&a[1], MX_SHAPE(2)) && oprun_shape_is(&out[1], MX_SHAPE(2, 2)));
    mx_shape b[3] = {MX_SHAPE(2, 4, 3)};
    ck_assert_int_eq(opcheck_infer("GroupNorm", k, v3, 1, b, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "GroupNorm: parameter 'num_groups' has value 3, which does not divide"));
    mx_shape c[3] = {MX_SHAPE(2, 4)};
    ck_assert_int_eq(opcheck_infer("GroupNorm", k, v, 1, c, &n_in, out, &n_out), MX_ERR_INVALID);
    mx_shape d[3] = {MX_SHAPE(2, 4)};
    ck_assert_int_eq(opcheck_infer("InstanceNorm", NULL, NULL, 0, d, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "InstanceNorm: data must have at least 3 dimensions"));
    mx_shape e[3] = {MX_SHAPE(2, 4, 3), MX_SHAPE(2)};
    ck_assert_int_eq(opcheck_infer("InstanceNorm", NULL, NULL, 0, e, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "InstanceNorm: gamma has shape (2), expected (4,)"));
    const char *kz[] = {"num_groups"}, *vz[] = {"0"};
    mx_shape f[3] = {MX_SHAPE(2, 4, 3)};
    ck_assert_int_eq(opcheck_infer("GroupNorm", kz, vz, 1, f, &n_in, out, &n_out), MX_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_group_norm");
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
