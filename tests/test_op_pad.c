/* test_op_pad.c - Pad (constant, edge, reflect; 4-D and 5-D) against a
 * float64 reference and finite differences, values and gradients written
 * by MXNet 1.9.1, and errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t g_w[10];
static int g_mode; /* 0 constant, 1 edge, 2 reflect */
static double g_cval;

static void pad_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *d = &in_shapes[0], *o = &out_shapes[0];
    int64_t n = mx_shape_size(o);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, src = 0, st = 1;
        bool outside = false;
        for (int k = o->ndim - 1; k >= 0; k--) {
            int64_t c = rem % o->dims[k] - g_w[2 * k], dim = d->dims[k];
            rem /= o->dims[k];
            if (c < 0 || c >= dim) {
                if (g_mode == 0) outside = true;
                else if (g_mode == 1) c = c < 0 ? 0 : dim - 1;
                else c = c < 0 ? -c : 2 * dim - 2 - c;
            }
            src += c * st;
            st *= dim;
        }
        out[0][i] = outside ? g_cval : in[0][src];
    }
}

static void run(mx_shape d, const char *mode, const char *width, const char *cval, uint64_t seed)
{
    g_mode = !strcmp(mode, "constant") ? 0 : !strcmp(mode, "edge") ? 1 : 2;
    g_cval = cval ? atof(cval) : 0;
    const char *p = width;
    for (int i = 0; i < 2 * d.ndim; i++) {
        while (*p && (*p < '0' || *p > '9')) p++;
        g_w[i] = strtoll(p, (char **)&p, 10);
    }
    const char *keys[] = {"mode", "pad_width", "constant_value"}, *values[] = {mode, width, cval};
    opcheck_case c = {.op = "Pad", .keys = keys, .values = values, .n_params = cval ? 3 : 2, .ref = pad_ref,
                      .seed = seed};
    c.in_shapes[0] = d;
    opcheck_run(&c);
}

START_TEST(forward_backward)
{
    run(MX_SHAPE(2, 2, 3, 4), "constant", "(0,0,0,0,1,2,2,1)", "-1.5", 1);
    run(MX_SHAPE(2, 2, 3, 4), "edge", "(0,0,0,0,1,2,2,1)", NULL, 2);
    run(MX_SHAPE(2, 2, 3, 4), "reflect", "(0,0,0,0,2,2,3,1)", NULL, 3);
    run(MX_SHAPE(1, 2, 2, 3, 4), "reflect", "(0,0,0,0,1,1,1,1,1,1)", NULL, 4);
    run(MX_SHAPE(1, 2, 2, 3, 2), "edge", "[0,0,0,0,0,3,2,0,1,1]", NULL, 5);
    run(MX_SHAPE(1, 1, 2, 2), "constant", "(0,0,0,0,0,0,0,0)", NULL, 6);
}
END_TEST

/* From MXNet 1.9.1 on x = arange(12).reshape(1,1,3,4), pad_width
 * (0,0,0,0,1,2,2,1), constant_value=-1 (first 12 of each output), and the
 * gradients of sum(Pad(x)) with autograd. */
START_TEST(mxnet_values)
{
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    mx_shape s = MX_SHAPE(1, 1, 3, 4);
    const float *in[] = {x};
    const char *modes[] = {"constant", "edge", "reflect"};
    const float want[3][12] = {{-1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2},
                               {0, 0, 0, 1, 2, 3, 3, 0, 0, 0, 1, 2},
                               {6, 5, 4, 5, 6, 7, 6, 2, 1, 0, 1, 2}};
    const float grad[3][12] = {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                               {6, 2, 2, 4, 3, 1, 1, 2, 9, 3, 3, 6},
                               {2, 4, 6, 2, 3, 6, 9, 3, 1, 2, 3, 1}};
    float ones[42];
    for (int i = 0; i < 42; i++) ones[i] = 1;
    const float *head[] = {ones};
    for (int m = 0; m < 3; m++) {
        const char *k[] = {"mode", "pad_width", "constant_value"}, *v[] = {modes[m], "(0,0,0,0,1,2,2,1)", "-1"};
        oprun r;
        ck_assert(oprun_forward(&r, "Pad", k, v, 3, 1, &s, in) == MX_OK);
        ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(1, 1, 6, 7)));
        for (int i = 0; i < 12; i++) ck_assert_float_eq(r.out[0][i], want[m][i]);
        ck_assert(oprun_backward(&r, "pad", k, v, 3, in, head) == MX_OK);
        for (int i = 0; i < 12; i++) ck_assert_float_eq(r.in_grad[0][i], grad[m][i]);
        oprun_free(&r);
    }
}
END_TEST

static mx_status infer(mx_shape d, const char *mode, const char *width)
{
    const char *k[] = {"mode", "pad_width"}, *v[] = {mode, width};
    mx_shape in[1] = {d}, out[1];
    int n_in, n_out;
    return opcheck_infer("Pad", k, v, 2, in, &n_in, out, &n_out);
}

START_TEST(errors)
{
    mx_shape d = MX_SHAPE(1, 1, 3, 4);
    ck_assert_int_eq(infer(d, "reflect", "(0,0,0,0,3,0,0,0)"), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "each pad must be smaller than its axis"));
    ck_assert_int_eq(infer(d, "reflect", "(0,0,0,0,2,0,0,3)"), MX_OK);
    ck_assert_int_eq(infer(d, "constant", "(0,1,0,0,1,1,1,1)"), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "the N and C axes"));
    ck_assert_int_eq(infer(MX_SHAPE(2, 3, 4), "constant", "(0,0,0,0,1,1)"), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "must have 4 or 5 dimensions"));
    ck_assert_int_eq(infer(d, "constant", "(0,0,0,0,1,1)"), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "has 6 numbers, data (1,1,3,4) needs 8"));
    ck_assert_int_eq(infer(d, "edge", "(0,0,0,0,-1,1,1,1)"), MX_ERR_INVALID);
    ck_assert_int_eq(infer(d, "edge", "(0,0,0,0,1 1,1,1)"), MX_ERR_INVALID);
    ck_assert_int_eq(infer(d, "wrap", "(0,0,0,0,1,1,1,1)"), MX_ERR_INVALID);
    mx_shape in[1] = {d}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Pad", (const char *[]){"pad_width"}, (const char *[]){"(0,0,0,0,1,1,1,1)"}, 1, in,
                                   &n_in, out, &n_out),
                     MX_ERR_INVALID); /* mode is required */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_pad");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forward_backward);
    tcase_add_test(tc, mxnet_values);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
