/* test_op_stack.c - stack against a float64 reference and finite
 * differences, MXNet 1.9.1's shapes and errors. */
#include "support/opcheck.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_n, g_axis;

static void stack_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                      const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    const mx_shape *s = &in_shapes[0];
    int axis = g_axis < 0 ? g_axis + s->ndim + 1 : g_axis;
    int64_t n = mx_shape_size(s), inner = 1;
    for (int k = axis; k < s->ndim; k++) inner *= s->dims[k];
    for (int i = 0; i < g_n; i++)
        for (int64_t e = 0; e < n; e++) /* element e of input i: (outer, inner) = (e / inner, e % inner) */
            out[0][((e / inner) * g_n + i) * inner + e % inner] = in[i][e];
}

static void run(int n, mx_shape s, int axis, uint64_t seed)
{
    char na[8], ax[8];
    snprintf(na, sizeof(na), "%d", n);
    snprintf(ax, sizeof(ax), "%d", axis);
    const char *keys[] = {"num_args", "axis"}, *values[] = {na, ax};
    g_n = n, g_axis = axis;
    opcheck_case c = {.op = "stack", .keys = keys, .values = values, .n_params = 2, .ref = stack_ref, .seed = seed};
    for (int i = 0; i < n; i++) c.in_shapes[i] = i == 1 ? (mx_shape){0} : s; /* arg1 inferred from the others */
    opcheck_run(&c);
}

START_TEST(forward_backward)
{
    run(2, MX_SHAPE(2, 3), 0, 1);
    run(3, MX_SHAPE(2, 3), 1, 2);
    run(2, MX_SHAPE(2, 3), -1, 3); /* MXNet: (2,3,2) */
    run(4, MX_SHAPE(2, 1, 3), -2, 4);
    run(1, MX_SHAPE(5), 0, 5);
}
END_TEST

START_TEST(shapes_and_errors)
{
    int n_in, n_out;
    mx_shape out[1];
    const char *k[] = {"num_args", "axis"};
    mx_shape a[2] = {MX_SHAPE(2, 3), MX_SHAPE(2, 3)};
    ck_assert_int_eq(opcheck_infer("stack", k, (const char *[]){"2", "-1"}, 2, a, &n_in, out, &n_out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &(mx_shape){.ndim = 3, .dims = {2, 3, 2}}));
    ck_assert_int_eq(opcheck_infer("stack", k, (const char *[]){"2", "3"}, 2, a, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "stack: parameter 'axis' has value 3, out of range [-3, 2]"));
    mx_shape b[2] = {MX_SHAPE(2, 3), MX_SHAPE(2, 4)};
    ck_assert_int_eq(opcheck_infer("stack", k, (const char *[]){"2", "0"}, 2, b, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "stack: input arg1 has shape (2,4)"));
    mx_shape c[2] = {MX_SHAPE(2, 3)};
    ck_assert_int_eq(opcheck_infer("stack", k, (const char *[]){"0", "0"}, 2, c, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("stack", NULL, NULL, 0, c, &n_in, out, &n_out), MX_ERR_INVALID); /* num_args */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_stack");
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
