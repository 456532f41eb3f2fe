/* test_op_batch_dot.c - batch_dot in its four transpose settings against a
 * float64 reference and finite differences, values written by MXNet 1.9.1,
 * and shape errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool g_ta, g_tb;

static void bd_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *a = &in_shapes[0], *o = &out_shapes[0];
    int nd = a->ndim;
    int64_t M = o->dims[nd - 2], N = o->dims[nd - 1], K = g_ta ? a->dims[nd - 2] : a->dims[nd - 1];
    int64_t B = mx_shape_size(o) / (M * N);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double x = g_ta ? in[0][b * M * K + k * M + i] : in[0][b * M * K + i * K + k];
                    double y = g_tb ? in[1][b * K * N + j * K + k] : in[1][b * K * N + k * N + j];
                    s += x * y;
                }
                out[0][b * M * N + i * N + j] = s;
            }
}

static void run(mx_shape a, mx_shape b, bool ta, bool tb, uint64_t seed)
{
    const char *keys[] = {"transpose_a", "transpose_b"}, *values[] = {ta ? "True" : "False", tb ? "1" : "0"};
    g_ta = ta, g_tb = tb;
    opcheck_case c = {.op = "batch_dot", .keys = keys, .values = values, .n_params = 2, .ref = bd_ref, .seed = seed};
    c.in_shapes[0] = a;
    c.in_shapes[1] = b;
    opcheck_run(&c);
}

START_TEST(forward_backward)
{
    run(MX_SHAPE(2, 3, 4), MX_SHAPE(2, 4, 5), false, false, 1);
    run(MX_SHAPE(2, 3, 4), MX_SHAPE(2, 5, 4), false, true, 2);
    run(MX_SHAPE(2, 4, 3), MX_SHAPE(2, 4, 5), true, false, 3);
    run(MX_SHAPE(2, 4, 3), MX_SHAPE(2, 5, 4), true, true, 4);
    run(MX_SHAPE(2, 2, 3, 4), MX_SHAPE(2, 2, 4, 2), false, false, 5);
}
END_TEST

/* From MXNet 1.9.1: A = arange(24).reshape(2,3,4), B = arange(24).reshape(2,4,3)
 *   batch_dot(A, B) (2,3,3) [42,48,54,114,136,158,186,224]
 *   batch_dot(A, A, transpose_b=True) [14,38,62,38,126,214,62,214]
 *   batch_dot(A, A) -> shape error. */
START_TEST(mxnet_values_and_errors)
{
    float A[24];
    for (int i = 0; i < 24; i++) A[i] = (float)i;
    mx_shape s[2] = {MX_SHAPE(2, 3, 4), MX_SHAPE(2, 4, 3)};
    const float *in[] = {A, A};
    oprun r;
    ck_assert(oprun_forward(&r, "batch_dot", NULL, NULL, 0, 2, s, in) == MX_OK);
    float w1[] = {42, 48, 54, 114, 136, 158, 186, 224};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w1[i]);
    oprun_free(&r);
    mx_shape s2[2] = {MX_SHAPE(2, 3, 4), MX_SHAPE(2, 3, 4)};
    ck_assert(oprun_forward(&r, "batch_dot", (const char *[]){"transpose_b"}, (const char *[]){"True"}, 1, 2, s2, in) ==
              MX_OK);
    float w2[] = {14, 38, 62, 38, 126, 214, 62, 214};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w2[i]);
    oprun_free(&r);
    int n_in, n_out;
    mx_shape out[1];
    mx_shape e1[2] = {MX_SHAPE(2, 3, 4), MX_SHAPE(2, 3, 4)};
    ck_assert_int_eq(opcheck_infer("batch_dot", NULL, NULL, 0, e1, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "batch_dot: lhs (2,3,4) and rhs (2,3,4) do not multiply"));
    mx_shape e2[2] = {MX_SHAPE(3, 4), MX_SHAPE(4, 3)};
    ck_assert_int_eq(opcheck_infer("batch_dot", NULL, NULL, 0, e2, &n_in, out, &n_out), MX_ERR_INVALID);
    mx_shape e3[2] = {MX_SHAPE(2, 3, 4), MX_SHAPE(3, 4, 3)};
    ck_assert_int_eq(opcheck_infer("batch_dot", NULL, NULL, 0, e3, &n_in, out, &n_out), MX_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_batch_dot");
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
