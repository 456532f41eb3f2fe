/*
 * test_op_elemwise_misc.c - BlockGrad, _copy, zeros_like, ones_like,
 * amp_cast, _identity_with_attr_like_rhs and where (elemwise_misc.c):
 * forward against a float64 reference, backward against finite
 * differences where the gradient is the function's, and the zero
 * gradients MXNet defines (BlockGrad, the *_like fills, where's
 * condition) checked as zeros.
 */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int g_op; /* 0 copy, 1 BlockGrad, 2 zeros_like, 3 ones_like, 4 amp_cast, 5 like_rhs */

static void copy_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = g_op == 2 ? 0 : g_op == 3 ? 1 : in[0][i];
}

/* Runs forward and a backward with dy = 3 and req; returns dx[0..n). */
static void backward_of(const char *name, const char *const *keys, const char *const *values, int np, float *dx,
                        mx_req req)
{
    const mx_op_def *op = mx_op_find(name);
    ck_assert_ptr_nonnull(op);
    _Alignas(16) char params[64];
    ck_assert_int_eq(mx_op_parse_params(op, keys, values, np, params), MX_OK);
    float x[4] = {1, -2, 3, 0.5f}, y[4], dy[4] = {3, 3, 3, 3}, rhs[4] = {9, 9, 9, 9}, drhs[4] = {7, 7, 7, 7};
    mx_tensor in[2] = {{x, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}, {rhs, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}, og = {dy, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor ig[2] = {{dx, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}, {drhs, MX_SHAPE(4), MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req r[2] = {req, req};
    ck_assert_int_eq(op->forward(&ctx, params, in, r, &out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, r, ig, NULL), MX_OK);
    if (!strcmp(name, "_identity_with_attr_like_rhs")) /* rhs gets nothing */
        for (int i = 0; i < 4; i++) ck_assert(drhs[i] == (req == MX_REQ_ADD ? 7 : 0));
}

START_TEST(copies_and_fills)
{
    const char *names[] = {"_copy", "BlockGrad", "zeros_like", "ones_like", "amp_cast", "_identity_with_attr_like_rhs"};
    const char *keys[] = {"dtype"}, *values[] = {"float32"};
    for (int k = 0; k < 6; k++) {
        g_op = k;
        opcheck_case c = {.op = names[k], .keys = keys, .values = values, .n_params = k == 4, .ref = copy_ref,
                          .seed = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1)};
        c.in_shapes[0] = MX_SHAPE(3, 5);
        if (k == 5) c.in_shapes[1] = MX_SHAPE(3, 5);
        /* BlockGrad and the fills: MXNet's gradient is zero, not the function's */
        c.skip_grad = (k == 1 || k == 2 || k == 3) ? 1 : k == 5 ? 2 : 0;
        opcheck_run(&c);
        float dx[4] = {5, 5, 5, 5};
        backward_of(names[k], keys, values, k == 4, dx, MX_REQ_WRITE);
        for (int i = 0; i < 4; i++) ck_assert_msg(dx[i] == (k == 0 || k >= 4 ? 3 : 0), "%s dx = %g", names[k], dx[i]);
        backward_of(names[k], keys, values, k == 4, dx, MX_REQ_ADD);
        for (int i = 0; i < 4; i++) ck_assert_msg(dx[i] == (k == 0 || k >= 4 ? 6 : 0), "%s dx = %g", names[k], dx[i]);
    }
    ck_assert_ptr_eq(mx_op_find("stop_gradient"), mx_op_find("BlockGrad"));
    ck_assert_ptr_eq(mx_op_find("identity"), mx_op_find("_copy"));
    ck_assert_ptr_eq(mx_op_find("_sparse_zeros_like"), mx_op_find("zeros_like"));
    /* add_n is MXNet's name for ElementWiseSum (lib/ops/elementwise_sum.c) */
    ck_assert_ptr_eq(mx_op_find("add_n"), mx_op_find("ElementWiseSum"));
    ck_assert_ptr_eq(mx_op_find("_sparse_add_n"), mx_op_find("ElementWiseSum"));
}
END_TEST

/* Its conversions are tested with Cast's (test_op_cast). */
START_TEST(amp_cast_parameters)
{
    const mx_op_def *op = mx_op_find("amp_cast");
    ck_assert_ptr_nonnull(op);
    _Alignas(16) char params[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_ERR_INVALID); /* dtype is required */
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "dtype"));
    const char *keys[] = {"dtype"}, *f16[] = {"float16"}, *bf16[] = {"bfloat16"}, *bad[] = {"float17"};
    ck_assert_int_eq(mx_op_parse_params(op, keys, f16, 1, params), MX_OK);
    ck_assert_int_eq(mx_op_parse_params(op, keys, bf16, 1, params), MX_OK);
    ck_assert_int_eq(mx_op_parse_params(op, keys, bad, 1, params), MX_ERR_INVALID);
}
END_TEST

static void where_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                      const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[1]), nc = mx_shape_size(&in_shapes[0]), blk = n / nc;
    for (int64_t i = 0; i < n; i++) out[0][i] = in[0][i / blk] != 0 ? in[1][i] : in[2][i];
}

/* condition: 0, 1 or -2.5 (non-zero counts as true); x, y uniform. */
static void where_init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        double u = opcheck_uniform(rng, 0, 1);
        data[i] = index == 0 ? (u < 0.4 ? 0.0f : u < 0.7 ? 1.0f : -2.5f) : (float)opcheck_uniform(rng, -1, 1);
    }
}

START_TEST(where_against_reference)
{
    const mx_shape conds[] = {MX_SHAPE(4, 6), MX_SHAPE(4)};
    for (int k = 0; k < 2; k++) {
        opcheck_case c = {.op = "where", .ref = where_ref, .init = where_init, .skip_grad = 1,
                          .seed = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 3)};
        c.in_shapes[0] = conds[k];
        c.in_shapes[1] = MX_SHAPE(4, 6);
        c.in_shapes[2] = MX_SHAPE(4, 6);
        opcheck_run(&c);
    }
    /* MXNet 1.9.1: where([[1,0,2],[0,0,-1]], x, -x) with x = arange(6), dy = 3 */
    const mx_op_def *op = mx_op_find("where");
    char params[16];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    float c[6] = {1, 0, 2, 0, 0, -1}, x[6] = {0, 1, 2, 3, 4, 5}, y[6] = {0, -1, -2, -3, -4, -5}, o[6];
    float dy[6] = {3, 3, 3, 3, 3, 3}, dc[6] = {9, 9, 9, 9, 9, 9}, dx[6], dyy[6];
    mx_tensor in[3] = {{c, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}, {x, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0},
                       {y, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {o, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}, og = {dy, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor ig[3] = {{dc, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}, {dx, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0},
                       {dyy, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[3] = {MX_REQ_WRITE, MX_REQ_WRITE, MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, req, ig, NULL), MX_OK);
    const float wo[6] = {0, -1, 2, -3, -4, 5}, wdx[6] = {3, 0, 3, 0, 0, 3}, wdy[6] = {0, 3, 0, 3, 3, 0};
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(o[i] == wo[i] && dx[i] == wdx[i] && dyy[i] == wdy[i] && dc[i] == 0, "where [%d]", i);
    }
    /* in place: output over x, then both gradients' inputs over dy */
    float xi[6] = {0, 1, 2, 3, 4, 5};
    mx_tensor inp[3] = {in[0], {xi, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}, in[2]};
    ck_assert_int_eq(op->forward(&ctx, params, inp, req, &inp[1], NULL), MX_OK);
    for (int i = 0; i < 6; i++) ck_assert(xi[i] == wo[i]);
    mx_tensor igp[3] = {ig[0], og, ig[2]};
    ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, req, igp, NULL), MX_OK);
    for (int i = 0; i < 6; i++) ck_assert(dy[i] == wdx[i] && dyy[i] == wdy[i]);
}
END_TEST

START_TEST(where_shapes)
{
    int n_in, n_out;
    mx_shape out[1];
    mx_shape ok[3] = {MX_SHAPE(2), MX_SHAPE(2, 3), {0}};
    ck_assert_int_eq(opcheck_infer("where", NULL, NULL, 0, ok, &n_in, out, &n_out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &ok[1]) && mx_shape_equal(&ok[2], &ok[1]));
    mx_shape bad[3] = {MX_SHAPE(3), MX_SHAPE(2, 3), MX_SHAPE(2, 3)}; /* MXNet: Size() == tshape[0] fails */
    ck_assert_int_eq(opcheck_infer("where", NULL, NULL, 0, bad, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "condition has shape (3)"));
    mx_shape bad2[3] = {MX_SHAPE(2, 3), MX_SHAPE(2, 3), MX_SHAPE(3, 2)};
    ck_assert_int_eq(opcheck_infer("where", NULL, NULL, 0, bad2, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "y has shape (3,2)"));
    mx_shape unk[3] = {{0}, MX_SHAPE(2, 3), MX_SHAPE(2, 3)};
    ck_assert_int_eq(opcheck_infer("where", NULL, NULL, 0, unk, &n_in, out, &n_out), MX_ERR_INVALID);
    mx_shape like[2] = {MX_SHAPE(2, 3), MX_SHAPE(3)};
    ck_assert_int_eq(opcheck_infer("_identity_with_attr_like_rhs", NULL, NULL, 0, like, &n_in, out, &n_out),
                     MX_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_elemwise_misc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, copies_and_fills);
    tcase_add_test(tc, amp_cast_parameters);
    tcase_add_test(tc, where_against_reference);
    tcase_add_test(tc, where_shapes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
