/* test_op_regression_output.c - Linear/Logistic/MAERegressionOutput against
 * a float64 reference: forward, and backward against finite differences of
 * the loss each one is the gradient of (squared, logistic, absolute), scaled
 * by grad_scale / num_output. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *g_op; /* the op being run: the callbacks read its params */

static double grad_scale_of(const void *params)
{
    const mx_op_def *op = mx_op_find(g_op);
    return *(const double *)((const char *)params + mx_op_param(op, "grad_scale")->offset);
}

static void reg_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    bool logistic = !strcmp(g_op, "LogisticRegressionOutput");
    for (int64_t i = 0; i < n; i++) out[0][i] = logistic ? 1 / (1 + exp(-in[0][i])) : in[0][i];
}

static double reg_loss(const void *params, const double *const *in, const mx_shape *in_shapes)
{
    int64_t n = mx_shape_size(&in_shapes[0]);
    double num_output = (double)mx_shape_size(&in_shapes[1]) / (double)in_shapes[1].dims[0];
    double scale = grad_scale_of(params) / num_output, l = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = in[0][i], y = in[1][i];
        if (!strcmp(g_op, "LinearRegressionOutput")) {
            l += 0.5 * (x - y) * (x - y);
        } else if (!strcmp(g_op, "LogisticRegressionOutput")) {
            double p = 1 / (1 + exp(-x));
            l -= y * log(p) + (1 - y) * log(1 - p);
        } else {
            l += fabs(x - y);
        }
    }
    return scale * l;
}

/* Data in [-2, 2); labels in [0, 1] for the logistic loss (probabilities). */
static void reg_init(int index, float *data, int64_t n, uint64_t *rng)
{
    bool logistic = !strcmp(g_op, "LogisticRegressionOutput");
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)(index == 1 && logistic ? opcheck_uniform(rng, 0, 1) : opcheck_uniform(rng, -2, 2));
}

static void run(const char *op, mx_shape data, mx_shape label, const char *scale, uint64_t seed)
{
    g_op = op;
    const char *keys[] = {"grad_scale"}, *values[] = {scale};
    opcheck_case c = {.op = op, .keys = keys, .values = values, .n_params = scale ? 1 : 0, .ref = reg_ref,
                      .loss = reg_loss, .init = reg_init, .skip_grad = 2, .seed = seed};
    c.in_shapes[0] = data;
    c.in_shapes[1] = label;
    opcheck_run(&c);
}

static const char *const ops[] = {"LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"};

START_TEST(forward_backward_against_reference)
{
    for (int k = 0; k < 3; k++) {
        uint64_t s = 100 * (uint64_t)k;
        run(ops[k], MX_SHAPE(4, 3), (mx_shape){0}, NULL, s + 1);         /* num_output 3 */
        run(ops[k], MX_SHAPE(5, 1), (mx_shape){0}, "2.5", s + 2);        /* (N) label, num_output 1 */
        run(ops[k], MX_SHAPE(2, 3, 4), MX_SHAPE(2, 12), "0.3", s + 3);   /* any label of N rows, same size */
        run(ops[k], MX_SHAPE(7), (mx_shape){0}, NULL, s + 4);
        run(ops[k], MX_SHAPE(17, 33), (mx_shape){0}, "1", s + 5);
    }
}
END_TEST

static bool shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

START_TEST(shapes_and_errors)
{
    for (int k = 0; k < 3; k++) {
        const mx_op_def *op = mx_op_find(ops[k]);
        ck_assert_ptr_nonnull(op);
        ck_assert_int_eq(op->flags & MX_OP_LOSS, MX_OP_LOSS);
        mx_shape in[2] = {MX_SHAPE(8, 1)}, out[1];
        int n_in, n_out;
        const char *none[] = {NULL};
        ck_assert_int_eq(opcheck_infer(ops[k], none, none, 0, in, &n_in, out, &n_out), MX_OK);
        ck_assert(shape_is(&in[1], MX_SHAPE(8)));
        ck_assert(shape_is(&out[0], MX_SHAPE(8, 1)));
        in[0] = MX_SHAPE(4, 3);
        in[1] = MX_SHAPE(3, 4);
        ck_assert_int_eq(opcheck_infer(ops[k], none, none, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), ops[k]));
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "label has shape (3,4), expected (4,3)"));
        in[1] = MX_SHAPE(4, 2);
        ck_assert_int_eq(opcheck_infer(ops[k], none, none, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
        _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
        const char *kk[] = {"grad_scale"}, *vv[] = {"big"};
        ck_assert_int_eq(mx_op_parse_params(op, kk, vv, 1, params), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "parameter 'grad_scale' has bad value 'big'"));
    }
}
END_TEST

/* The label gradient is written as zeros; MAE's gradient is a sign; the
 * logistic forward stays finite for large inputs. */
START_TEST(label_grad_zero_and_saturation)
{
    const mx_op_def *op = mx_op_find("LogisticRegressionOutput");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    float x[4] = {-200, -20, 20, 200}, lab[4] = {0, 1, 0, 1}, y[4], dx[4], dl[4] = {5, 5, 5, 5};
    mx_tensor in[2] = {{x, MX_SHAPE(4, 1), MX_FLOAT32, mx_cpu(), 0}, {lab, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, MX_SHAPE(4, 1), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor grads[2] = {{dx, MX_SHAPE(4, 1), MX_FLOAT32, mx_cpu(), 0}, {dl, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, NULL, in, &out, req, grads, NULL), MX_OK);
    for (int i = 0; i < 4; i++) {
        ck_assert(isfinite(y[i]) && y[i] >= 0 && y[i] <= 1);
        ck_assert(dl[i] == 0.0f);
    }
    ck_assert(fabsf(dx[0]) < 1e-6f && fabsf(dx[1] + 1) < 1e-6f && fabsf(dx[2] - 1) < 1e-6f && fabsf(dx[3]) < 1e-6f);
    const mx_op_def *mae = mx_op_find("MAERegressionOutput");
    const char *k[] = {"grad_scale"}, *v[] = {"2"};
    ck_assert_int_eq(mx_op_parse_params(mae, k, v, 1, params), MX_OK);
    float a[3] = {1, -1, 0.5f}, b[3] = {0, 0, 0.5f};
    in[0] = (mx_tensor){a, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    in[1] = (mx_tensor){b, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    out = (mx_tensor){y, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    grads[0] = (mx_tensor){dx, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), 0};
    req[1] = MX_REQ_NULL;
    ck_assert_int_eq(mae->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    ck_assert_int_eq(mae->backward(&ctx, params, NULL, in, &out, req, grads, NULL), MX_OK);
    ck_assert(dx[0] == 2.0f && dx[1] == -2.0f && dx[2] == 0.0f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_regression_output");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, shapes_and_errors);
    tcase_add_test(tc, label_grad_zero_and_saturation);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
