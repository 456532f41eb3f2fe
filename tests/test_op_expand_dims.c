/* test_op_expand_dims.c - expand_dims and squeeze: shapes as MXNet 1.9.1
 * gives them, data and gradient copied unchanged, errors. */
#include "support/opcheck.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = in[0][i];
}

static void run(const char *op, mx_shape data, const char *axis, uint64_t seed)
{
    const char *keys[] = {"axis"}, *values[] = {axis};
    opcheck_case c = {.op = op, .keys = keys, .values = values, .n_params = axis ? 1 : 0, .ref = copy_ref,
                      .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward)
{
    run("expand_dims", MX_SHAPE(2, 3), "0", 1);
    run("expand_dims", MX_SHAPE(2, 3), "-1", 2);
    run("squeeze", MX_SHAPE(2, 1, 3, 1), NULL, 3);
    run("squeeze", MX_SHAPE(2, 1, 3, 1), "-1", 4);
}
END_TEST

static mx_status infer(const char *op, const char *axis, mx_shape data, mx_shape *out)
{
    const char *keys[] = {"axis"}, *values[] = {axis};
    mx_shape in[1] = {data}, o[1];
    int n_in, n_out;
    mx_status s = opcheck_infer(op, keys, values, axis ? 1 : 0, in, &n_in, o, &n_out);
    *out = o[0];
    return s;
}

static void expect(const char *op, const char *axis, mx_shape data, mx_shape want)
{
    mx_shape o;
    ck_assert_msg(infer(op, axis, data, &o) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_shape_equal(&o, &want), "%s axis=%s", op, axis ? axis : "None");
}

/* Shapes from MXNet 1.9.1 on data (2,1,3,1):
 *   squeeze() (2,3); squeeze(axis=-1) (2,1,3); squeeze(axis=(1,3)) (2,3);
 *   squeeze of (1,1) -> (1,); expand_dims axis 0, 4, -1, -5 ->
 *   (1,2,1,3,1), (2,1,3,1,1), (2,1,3,1,1), (1,2,1,3,1). */
START_TEST(shapes_and_errors)
{
    mx_shape d = MX_SHAPE(2, 1, 3, 1), o;
    expect("squeeze", NULL, d, MX_SHAPE(2, 3));
    expect("squeeze", "-1", d, MX_SHAPE(2, 1, 3));
    expect("squeeze", "(1,3)", d, MX_SHAPE(2, 3));
    expect("squeeze", NULL, MX_SHAPE(1, 1), MX_SHAPE(1));
    expect("expand_dims", "0", d, MX_SHAPE(1, 2, 1, 3, 1));
    expect("expand_dims", "4", d, MX_SHAPE(2, 1, 3, 1, 1));
    expect("expand_dims", "-1", d, MX_SHAPE(2, 1, 3, 1, 1));
    expect("expand_dims", "-5", d, MX_SHAPE(1, 2, 1, 3, 1));
    ck_assert_int_eq(infer("expand_dims", "5", d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "expand_dims: parameter 'axis' has value 5, out of range [-5, 4]"));
    ck_assert_int_eq(infer("expand_dims", "-6", d, &o), MX_ERR_INVALID);
    ck_assert_int_eq(infer("expand_dims", NULL, d, &o), MX_ERR_INVALID); /* axis is required */
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "axis"));
    ck_assert_int_eq(infer("squeeze", "0", d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "squeeze: axis 0 of data (2,1,3,1) has size 2, not 1"));
    ck_assert_int_eq(infer("squeeze", "(1,1)", d, &o), MX_ERR_INVALID);
    ck_assert_int_eq(infer("squeeze", "(1,-3)", d, &o), MX_ERR_INVALID);
    ck_assert_int_eq(infer("squeeze", "4", d, &o), MX_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_expand_dims");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forward_backward);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
