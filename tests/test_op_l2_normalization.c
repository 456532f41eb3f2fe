/* test_op_l2_normalization.c - L2Normalization in its three modes against
 * a float64 reference and finite differences, values written by MXNet
 * 1.9.1, and shape errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_mode;

static void l2_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    double eps = *(const double *)((const char *)params + mx_op_param(mx_op_find("L2Normalization"), "eps")->offset);
    const mx_shape *d = &in_shapes[0];
    int64_t n = mx_shape_size(d), N = d->dims[0], C = d->ndim > 1 ? d->dims[1] : 1, S = n / (N * C);
    /* element (a, c, s) with a sample, c channel, s spatial: the set key per mode */
    double *ss = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        int64_t a = i / (C * S), c = (i / S) % C, s = i % S;
        int64_t key = !strcmp(g_mode, "instance") ? a : !strcmp(g_mode, "channel") ? a * S + s : a * C + c;
        ss[key] += in[0][i] * in[0][i];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t a = i / (C * S), c = (i / S) % C, s = i % S;
        int64_t key = !strcmp(g_mode, "instance") ? a : !strcmp(g_mode, "channel") ? a * S + s : a * C + c;
        out[0][i] = in[0][i] / sqrt(ss[key] + eps);
    }
    free(ss);
}

static void run(const char *mode, mx_shape data, uint64_t seed)
{
    const char *keys[] = {"mode", "eps"}, *values[] = {mode, "1e-4"};
    g_mode = mode;
    opcheck_case c = {.op = "L2Normalization", .keys = keys, .values = values, .n_params = 2, .ref = l2_ref,
                      .seed = seed, .grad_rtol = 1e-3, .grad_atol = 1e-4};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run("instance", MX_SHAPE(3, 5), 1);
    run("instance", MX_SHAPE(2, 3, 4), 2);
    run("channel", MX_SHAPE(2, 3, 4), 3);
    run("channel", MX_SHAPE(2, 3, 2, 2), 4);
    run("spatial", MX_SHAPE(2, 3, 4), 5);
    run("spatial", MX_SHAPE(2, 3, 2, 3), 6);
}
END_TEST

/* From MXNet 1.9.1 (the venv), computed once with
 *   x = mx.nd.array((np.arange(24).reshape(2,4,3)**1.5)/10)
 *   mx.nd.L2Normalization(x, mode=m)   (elements 1..4 for each m) */
START_TEST(mxnet_values)
{
    float x[24];
    for (int i = 0; i < 24; i++) x[i] = (float)(pow(i, 1.5) / 10);
    mx_shape s = MX_SHAPE(2, 4, 3);
    const float *in[] = {x};
    const char *modes[] = {"instance", "channel", "spatial"};
    const double want[3][4] = {
        {0.01515151560306549, 0.04285495728254318, 0.07872958481311798, 0.12121212482452393},
        {0.026650089770555496, 0.06362847238779068, 0.1666666567325592, 0.21320071816444397},
        {0.3333333134651184, 0.9428090453147888, 0.3535533845424652, 0.5443310141563416},
    };
    for (int m = 0; m < 3; m++) {
        oprun r;
        const char *k[] = {"mode"}, *v[] = {modes[m]};
        ck_assert_msg(oprun_forward(&r, "L2Normalization", k, v, 1, 1, &s, in) == MX_OK, "%s", mx_last_error());
        for (int i = 0; i < 4; i++)
            ck_assert_msg(fabs(r.out[0][i + 1] - want[m][i]) < 1e-6, "%s %d: %g vs %g", modes[m], i, r.out[0][i + 1],
                          want[m][i]);
        /* the hidden norm output: x / y wherever y != 0 */
        const mx_shape nshape[3] = {MX_SHAPE(2), MX_SHAPE(2, 3), MX_SHAPE(2, 4)};
        ck_assert(oprun_shape_is(&r.out_shapes[1], nshape[m]));
        for (int i = 1; i < 24; i++) { /* element (a, c, s) of (2,4,3) */
            int a = i / 12, c = (i / 3) % 4, sp = i % 3, key = m == 0 ? a : m == 1 ? a * 3 + sp : a * 4 + c;
            ck_assert(fabs(r.out[1][key] - x[i] / r.out[0][i]) < 1e-4 * fabs(r.out[1][key]));
        }
        oprun_free(&r);
    }
}
END_TEST

START_TEST(shapes_and_errors)
{
    int n_in, n_out;
    mx_shape out[2]; /* output and the hidden norm */
    const char *k[] = {"mode"}, *v[] = {"channel"}, *bad[] = {"chanel"};
    mx_shape a[1] = {MX_SHAPE(2, 3)};
    ck_assert_int_eq(opcheck_infer("L2Normalization", NULL, NULL, 0, a, &n_in, out, &n_out), MX_OK);
    ck_assert_int_eq(opcheck_infer("L2Normalization", k, v, 1, a, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "L2Normalization: mode 'channel' needs data of at least 3 dimensions"));
    ck_assert_int_eq(opcheck_infer("L2Normalization", k, bad, 1, a, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "chanel"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_l2_normalization");
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
