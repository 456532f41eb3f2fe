/* test_op_clip.c - clip against a float64 reference; the gradient passes
 * where a_min <= x <= a_max, boundaries included. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double fparam(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("clip");
    return *(const double *)((const char *)params + mx_op_param(op, name)->offset);
}

static void clip_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)out_shapes;
    double lo = fparam(params, "a_min"), hi = fparam(params, "a_max");
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = fmin(fmax(in[0][i], lo), hi);
}

/* Values in [-2, 2) at least 1e-3 away from the clip bounds used below,
 * where the finite difference would straddle a kink. */
static void away_from_bounds(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    const double bounds[] = {-0.5, 0.75, -1, 1, 0.25};
    for (int64_t i = 0; i < n; i++) {
        double v;
        bool near;
        do {
            v = opcheck_uniform(rng, -2, 2);
            near = false;
            for (int b = 0; b < 5; b++) near |= fabs(v - bounds[b]) < 1e-3;
        } while (near);
        data[i] = (float)v;
    }
}

static void run(mx_shape data, const char *lo, const char *hi, uint64_t seed)
{
    const char *keys[] = {"a_min", "a_max"}, *values[] = {lo, hi};
    opcheck_case c = {.op = "clip", .keys = keys, .values = values, .n_params = 2, .ref = clip_ref,
                      .init = away_from_bounds, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run(MX_SHAPE(4, 7), "-0.5", "0.75", 1);
    run(MX_SHAPE(3, 2, 5), "-1", "1", 2);
    run(MX_SHAPE(1), "0.25", "0.25", 3); /* a_min == a_max */
    run(MX_SHAPE(17, 33), "-5", "5", 4);  /* nothing clipped */
}
END_TEST

/* At the bounds themselves the gradient passes (MXNet's clip_grad tests
 * x > a_max and x < a_min strictly). */
START_TEST(gradient_at_the_bounds)
{
    const mx_op_def *op = mx_op_find("clip");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"a_min", "a_max"}, *v[] = {"-1", "2"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 2, params), MX_OK);
    float x[6] = {-3, -1, 0, 2, 2.5f, NAN}, y[6], dy[6] = {1, 2, 3, 4, 5, 6}, dx[6];
    mx_tensor tx = {x, MX_SHAPE(6), MX_FLOAT32, mx_cpu(), 0}, ty = {y, MX_SHAPE(6), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor tdy = {dy, MX_SHAPE(6), MX_FLOAT32, mx_cpu(), 0}, tdx = {dx, MX_SHAPE(6), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert(y[0] == -1 && y[1] == -1 && y[2] == 0 && y[3] == 2 && y[4] == 2 && isnan(y[5]));
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
    ck_assert(dx[0] == 0 && dx[1] == 2 && dx[2] == 3 && dx[3] == 4 && dx[4] == 0 && dx[5] == 6);
    /* in place: dx on dy */
    req[0] = MX_REQ_INPLACE;
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdy, NULL), MX_OK);
    ck_assert(dy[0] == 0 && dy[1] == 2 && dy[4] == 0);
}
END_TEST

START_TEST(bad_parameters)
{
    const mx_op_def *op = mx_op_find("clip");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"a_min", "a_max"}, *v1[] = {"1", "-1"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v1, 2, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "clip: parameter 'a_min' (1) is greater than 'a_max' (-1)"));
    ck_assert_int_eq(mx_op_parse_params(op, k, v1, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "clip: required parameter 'a_max' is missing"));
    const char *v2[] = {"low", "1"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v2, 2, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "clip: parameter 'a_min' has bad value 'low'"));
    const char *k3[] = {"amin", "a_max"}, *v3[] = {"0", "1"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 2, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'a_min'"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_clip");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, gradient_at_the_bounds);
    tcase_add_test(tc, bad_parameters);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
