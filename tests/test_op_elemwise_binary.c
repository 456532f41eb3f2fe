/* test_op_elemwise_binary.c - elemwise_add/sub/mul/div (and their legacy
 * aliases) against a float64 reference. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int g_kind; /* 0 add, 1 sub, 2 mul, 3 div */

static void bin_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) {
        double l = in[0][i], r = in[1][i];
        out[0][i] = g_kind == 0 ? l + r : g_kind == 1 ? l - r : g_kind == 2 ? l * r : l / r;
    }
}

/* Operands in +-[0.5, 2): no division by anything near zero. */
static void init(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.5, 2);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

static void run(const char *name, int kind, mx_shape shape, uint64_t seed)
{
    g_kind = kind;
    opcheck_case c = {.op = name, .ref = bin_ref, .init = init, .seed = seed};
    c.in_shapes[0] = shape;
    c.in_shapes[1] = shape;
    opcheck_run(&c);
}

static const char *const names[4] = {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"};

START_TEST(forward_backward_against_reference)
{
    for (int k = 0; k < 4; k++) {
        uint64_t s = 10 * (uint64_t)k;
        run(names[k], k, MX_SHAPE(4, 7), s + 1);
        run(names[k], k, MX_SHAPE(3, 2, 5), s + 2);
        run(names[k], k, MX_SHAPE(1), s + 3);
        run(names[k], k, MX_SHAPE(1030), s + 4); /* several chunks */
        run(names[k], k, MX_SHAPE(3, 20000), s + 5); /* pieces on the kernel pool */
    }
}
END_TEST

START_TEST(legacy_names_resolve)
{
    const char *alias[4][3] = {{"_Plus", "_plus", "_add"}, {"_Minus", "_minus", "_sub"}, {"_Mul", "_mul", NULL},
                               {"_Div", "_div", NULL}};
    for (int k = 0; k < 4; k++) {
        const mx_op_def *op = mx_op_find(names[k]);
        ck_assert_ptr_nonnull(op);
        for (int a = 0; a < 3 && alias[k][a]; a++) ck_assert_ptr_eq(mx_op_find(alias[k][a]), op);
    }
    run("_Plus", 0, MX_SHAPE(2, 3), 99);
    run("_Div", 3, MX_SHAPE(2, 3), 98);
}
END_TEST

/* Output on an input (forward) and lhs gradient on out_grad (backward),
 * across chunk boundaries. */
START_TEST(in_place)
{
    enum { N = 1300 };
    static float l[N], r[N], y[N], dy[N], dl[N], dr[N], buf[N], buf2[N];
    uint64_t rng = 4;
    for (int k = 0; k < 4; k++) {
        const mx_op_def *op = mx_op_find(names[k]);
        char params[1];
        init(0, l, N, &rng);
        init(1, r, N, &rng);
        init(2, dy, N, &rng);
        mx_shape s = MX_SHAPE(N);
        mx_tensor in[2] = {{l, s, MX_FLOAT32, mx_cpu(), 0}, {r, s, MX_FLOAT32, mx_cpu(), 0}};
        mx_tensor out = {y, s, MX_FLOAT32, mx_cpu(), 0}, og = {dy, s, MX_FLOAT32, mx_cpu(), 0};
        mx_tensor g[2] = {{dl, s, MX_FLOAT32, mx_cpu(), 0}, {dr, s, MX_FLOAT32, mx_cpu(), 0}};
        mx_exec_ctx exec = {.ctx = mx_cpu()};
        mx_op_ctx ctx = {.exec = &exec};
        mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
        ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
        ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, req, g, NULL), MX_OK);
        memcpy(buf, r, sizeof(buf));
        mx_tensor in2[2] = {{l, s, MX_FLOAT32, mx_cpu(), 0}, {buf, s, MX_FLOAT32, mx_cpu(), 0}};
        mx_tensor out2 = {buf, s, MX_FLOAT32, mx_cpu(), 0};
        req[0] = MX_REQ_INPLACE;
        ck_assert_int_eq(op->forward(&ctx, params, in2, req, &out2, NULL), MX_OK);
        for (int i = 0; i < N; i++) ck_assert_float_eq(buf[i], y[i]);
        memcpy(buf, dy, sizeof(buf));
        mx_tensor og2 = {buf, s, MX_FLOAT32, mx_cpu(), 0};
        mx_tensor g2[2] = {{buf, s, MX_FLOAT32, mx_cpu(), 0}, {buf2, s, MX_FLOAT32, mx_cpu(), 0}};
        req[1] = MX_REQ_WRITE;
        ck_assert_int_eq(op->backward(&ctx, params, &og2, in, &out, req, g2, NULL), MX_OK);
        for (int i = 0; i < N; i++) {
            ck_assert_float_eq(buf[i], dl[i]);
            ck_assert_float_eq(buf2[i], dr[i]);
        }
    }
}
END_TEST

START_TEST(shapes_and_errors)
{
    for (int k = 0; k < 4; k++) {
        mx_shape in[2] = {MX_SHAPE(2, 3), {0}}, out[1];
        int n_in, n_out;
        ck_assert_int_eq(opcheck_infer(names[k], NULL, NULL, 0, in, &n_in, out, &n_out), MX_OK);
        ck_assert(mx_shape_equal(&in[1], &in[0]) && mx_shape_equal(&out[0], &in[0]));
        in[1] = MX_SHAPE(3, 2);
        ck_assert_int_eq(opcheck_infer(names[k], NULL, NULL, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), names[k]));
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "lhs has shape (2,3), rhs has shape (3,2)"));
        const char *kk[] = {"scalar"}, *vv[] = {"1"};
        ck_assert_int_eq(opcheck_infer(names[k], kk, vv, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "unknown parameter 'scalar'"));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_elemwise_binary");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, legacy_names_resolve);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
