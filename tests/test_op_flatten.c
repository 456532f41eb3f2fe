/* test_op_flatten.c - Flatten against a float64 reference (a copy with a
 * new shape). */
#include "support/opcheck.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static void copy_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = in[0][i];
}

static void run(const char *name, mx_shape data, uint64_t seed)
{
    opcheck_case c = {.op = name, .ref = copy_ref, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run("Flatten", MX_SHAPE(2, 3, 4), 1);
    run("Flatten", MX_SHAPE(5), 2);
    run("flatten", MX_SHAPE(1, 1, 1, 1), 3);
    run("Flatten", MX_SHAPE(3, 7), 4);
    run("Flatten", MX_SHAPE(4, 3, 5, 7, 2), 5);
}
END_TEST

static bool shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

START_TEST(shapes_alias_and_errors)
{
    ck_assert_ptr_eq(mx_op_find("flatten"), mx_op_find("Flatten"));
    mx_shape in[1] = {MX_SHAPE(8, 1, 28, 28)}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Flatten", NULL, NULL, 0, in, &n_in, out, &n_out), MX_OK);
    ck_assert(n_in == 1 && n_out == 1);
    ck_assert(shape_is(&out[0], MX_SHAPE(8, 784)));
    in[0] = MX_SHAPE(6);
    ck_assert_int_eq(opcheck_infer("Flatten", NULL, NULL, 0, in, &n_in, out, &n_out), MX_OK);
    ck_assert(shape_is(&out[0], MX_SHAPE(6, 1)));
    in[0] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("Flatten", NULL, NULL, 0, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Flatten: the shape of data is unknown"));
    const char *k[] = {"axis"}, *v[] = {"1"};
    ck_assert_int_eq(opcheck_infer("Flatten", k, v, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Flatten: unknown parameter 'axis'"));
}
END_TEST

/* In place is a no-op; other dtypes copy; add works for float64 and is
 * refused for integers. */
START_TEST(in_place_and_dtypes)
{
    const mx_op_def *op = mx_op_find("Flatten");
    char params[1];
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    float x[6] = {1, 2, 3, 4, 5, 6};
    mx_tensor t = {x, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0}, o = {x, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), 0};
    mx_req req[1] = {MX_REQ_INPLACE};
    ck_assert_int_eq(op->forward(&ctx, params, &t, req, &o, NULL), MX_OK);
    ck_assert(x[5] == 6.0f);
    double a[3] = {1, 2, 3}, b[3] = {10, 10, 10};
    mx_tensor ta = {a, MX_SHAPE(3), MX_FLOAT64, mx_cpu(), 0}, tb = {b, MX_SHAPE(3, 1), MX_FLOAT64, mx_cpu(), 0};
    req[0] = MX_REQ_ADD;
    ck_assert_int_eq(op->forward(&ctx, params, &ta, req, &tb, NULL), MX_OK);
    ck_assert(b[0] == 11 && b[2] == 13);
    int32_t ia[2] = {1, 2}, ib[2] = {0, 0};
    mx_tensor tia = {ia, MX_SHAPE(2), MX_INT32, mx_cpu(), 0}, tib = {ib, MX_SHAPE(2, 1), MX_INT32, mx_cpu(), 0};
    req[0] = MX_REQ_WRITE;
    ck_assert_int_eq(op->forward(&ctx, params, &tia, req, &tib, NULL), MX_OK);
    ck_assert(ib[0] == 1 && ib[1] == 2);
    req[0] = MX_REQ_ADD;
    ck_assert_int_eq(op->forward(&ctx, params, &tia, req, &tib, NULL), MX_ERR_UNSUPPORTED);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_flatten");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, shapes_alias_and_errors);
    tcase_add_test(tc, in_place_and_dtypes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
