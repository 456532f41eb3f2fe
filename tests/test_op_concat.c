/* test_op_concat.c - Concat against a float64 reference. */
#include "support/opcheck.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t iparam(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("Concat");
    return *(const int64_t *)((const char *)params + mx_op_param(op, name)->offset);
}

static void concat_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    int n = (int)iparam(params, "num_args"), nd = in_shapes[0].ndim;
    int64_t axis = iparam(params, "dim");
    if (axis < 0) axis += nd;
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= in_shapes[0].dims[k];
    for (int k = (int)axis + 1; k < nd; k++) inner *= in_shapes[0].dims[k];
    int64_t total = out_shapes[0].dims[axis];
    for (int64_t o = 0; o < outer; o++) {
        int64_t at = 0;
        for (int i = 0; i < n; i++) {
            int64_t len = in_shapes[i].dims[axis];
            for (int64_t a = 0; a < len; a++)
                for (int64_t s = 0; s < inner; s++)
                    out[0][(o * total + at + a) * inner + s] = in[i][(o * len + a) * inner + s];
            at += len;
        }
    }
}

static void run(const char *dim, int n, const mx_shape *shapes, uint64_t seed)
{
    char num[16];
    snprintf(num, sizeof(num), "%d", n);
    const char *keys[] = {"num_args", "dim"}, *values[] = {num, dim};
    opcheck_case c = {.op = "Concat", .keys = keys, .values = values, .n_params = 2, .ref = concat_ref, .seed = seed};
    for (int i = 0; i < n; i++) c.in_shapes[i] = shapes[i];
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    mx_shape a[] = {MX_SHAPE(2, 3, 4), MX_SHAPE(2, 1, 4), MX_SHAPE(2, 5, 4)};
    run("1", 3, a, 1);
    mx_shape b[] = {MX_SHAPE(3, 7), MX_SHAPE(1, 7), MX_SHAPE(5, 7), MX_SHAPE(2, 7)};
    run("0", 4, b, 2);
    mx_shape c[] = {MX_SHAPE(2, 3, 2), MX_SHAPE(2, 3, 5)};
    run("-1", 2, c, 3);
    mx_shape d[] = {MX_SHAPE(4, 3)};
    run("1", 1, d, 4);
    mx_shape e[] = {MX_SHAPE(2, 3, 1, 5), MX_SHAPE(2, 3, 3, 5), MX_SHAPE(2, 3, 2, 5)};
    run("2", 3, e, 5);
    mx_shape f[] = {MX_SHAPE(5), MX_SHAPE(3)};
    run("0", 2, f, 6);
    mx_shape g[20];
    for (int i = 0; i < 20; i++) g[i] = MX_SHAPE(2, 1 + i % 3, 3);
    run("1", 20, g, 7);
    /* Above 256 KiB the copies are split across the kernel pool. */
    mx_shape h[] = {MX_SHAPE(3, 40, 24, 24), MX_SHAPE(3, 7, 24, 24), MX_SHAPE(3, 17, 24, 24)};
    run("1", 3, h, 8);
}
END_TEST

static bool shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

START_TEST(shapes_names_and_errors)
{
    const mx_op_def *op = mx_op_find("Concat");
    ck_assert_ptr_eq(mx_op_find("concat"), op);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"num_args"}, *v[] = {"64"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    const char *names[MX_OP_MAX_IO];
    ck_assert_int_eq(op->list_inputs(params, names), 64);
    ck_assert_str_eq(names[0], "arg0");
    ck_assert_str_eq(names[63], "arg63");

    mx_shape in[3] = {MX_SHAPE(8, 16, 5, 5), MX_SHAPE(8, 32, 5, 5), MX_SHAPE(8, 8, 5, 5)}, out[1];
    int n_in, n_out;
    const char *k3[] = {"num_args"}, *v3[] = {"3"};
    ck_assert_int_eq(opcheck_infer("Concat", k3, v3, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(shape_is(&out[0], MX_SHAPE(8, 56, 5, 5)));
    in[2] = MX_SHAPE(8, 8, 5, 4);
    ck_assert_int_eq(opcheck_infer("Concat", k3, v3, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Concat: arg2 has shape (8,8,5,4), incompatible with arg0's (8,16,5,5)"));
    in[2] = MX_SHAPE(8, 8, 5);
    ck_assert_int_eq(opcheck_infer("Concat", k3, v3, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    in[2] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("Concat", k3, v3, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Concat: the shape of arg2 is unknown"));
    in[2] = MX_SHAPE(8, 8, 5, 5);
    const char *k4[] = {"num_args", "dim"}, *v4[] = {"3", "4"};
    ck_assert_int_eq(opcheck_infer("Concat", k4, v4, 2, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Concat: parameter 'dim' has value 4, out of range"));
    const char *v5[] = {"3", "-5"};
    ck_assert_int_eq(opcheck_infer("Concat", k4, v5, 2, in, &n_in, out, &n_out), MX_ERR_INVALID);

    const char *v6[] = {"0"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v6, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Concat: parameter 'num_args' has bad value '0'"));
    const char *v7[] = {"65"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v7, 1, params), MX_ERR_INVALID);
    const char *k8[] = {"dim"}, *v8[] = {"1"};
    ck_assert_int_eq(mx_op_parse_params(op, k8, v8, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "required parameter 'num_args' is missing"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_concat");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, shapes_names_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
