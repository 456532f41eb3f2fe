/* test_op_slice.c - slice, slice_axis and slice_like: forward against a
 * float64 reference that enumerates the kept indices, backward against
 * finite differences, shapes and values written by MXNet 1.9.1 (None
 * entries, negative and clamped bounds, negative steps, empty results),
 * and errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kept indices of each axis, set by the case: keep[k][0..cnt[k]). */
static int64_t g_keep[MX_MAX_NDIM][64], g_cnt[MX_MAX_NDIM];

static void gather_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *d = &in_shapes[0], *o = &out_shapes[0];
    int64_t n = mx_shape_size(o);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, src = 0, stride = 1;
        for (int k = o->ndim - 1; k >= 0; k--) {
            src += g_keep[k][rem % o->dims[k]] * stride;
            rem /= o->dims[k];
            stride *= d->dims[k];
        }
        out[0][i] = in[0][src];
    }
}

/* Python's rule, written as a scan: index i of 0..n-1 (in step order) is
 * kept when it lies in the half-open range from the normalised begin
 * towards end. */
static void keep_axis(int k, int64_t n, const char *b, const char *e, int64_t s)
{
    bool bn = !strcmp(b, "None"), en = !strcmp(e, "None");
    double lo = bn ? (s > 0 ? 0 : n - 1) : atof(b), hi = en ? (s > 0 ? n : -1) : atof(e);
    if (!bn && lo < 0) lo += n;
    if (!en && hi < 0) hi += n;
    if (!en && s < 0 && hi < -1) hi = -1;
    g_cnt[k] = 0;
    if (s > 0) {
        if (lo < 0) lo = 0;
        for (int64_t i = (int64_t)lo; i < n && i < hi; i += s) g_keep[k][g_cnt[k]++] = i;
    } else {
        if (lo > n - 1) lo = n - 1;
        for (int64_t i = (int64_t)lo; i >= 0 && i > hi; i += s) g_keep[k][g_cnt[k]++] = i;
    }
}

static void full_axis(int k, int64_t n)
{
    g_cnt[k] = n;
    for (int64_t i = 0; i < n; i++) g_keep[k][i] = i;
}

/* begin/end/step given per axis as strings "None"/"int". */
static void run_slice(mx_shape d, int na, const char *const *b, const char *const *e, const char *const *s,
                      const char *bt, const char *et, const char *st, uint64_t seed)
{
    for (int k = 0; k < d.ndim; k++) {
        if (k < na) keep_axis(k, d.dims[k], b[k], e[k], s && strcmp(s[k], "None") ? atoi(s[k]) : 1);
        else full_axis(k, d.dims[k]);
    }
    const char *keys[] = {"begin", "end", "step"}, *values[] = {bt, et, st};
    opcheck_case c = {.op = "slice", .keys = keys, .values = values, .n_params = st ? 3 : 2, .ref = gather_ref,
                      .seed = seed};
    c.in_shapes[0] = d;
    opcheck_run(&c);
    mx_shape in[1] = {d}, out[1];
    int n_in, n_out;
    ck_assert(opcheck_infer("slice", keys, values, st ? 3 : 2, in, &n_in, out, &n_out) == MX_OK);
    for (int k = 0; k < d.ndim; k++) ck_assert_int_eq(out[0].dims[k], g_cnt[k]);
}

START_TEST(slice_against_reference)
{
    mx_shape d = MX_SHAPE(3, 4, 5);
    run_slice(d, 1, (const char *[]){"1"}, (const char *[]){"3"}, NULL, "(1,)", "(3,)", NULL, 1);
    run_slice(d, 2, (const char *[]){"None", "1"}, (const char *[]){"None", "-1"}, NULL, "(None, 1)", "(None, -1)",
              NULL, 2);
    run_slice(d, 3, (const char *[]){"0", "None", "4"}, (const char *[]){"3", "None", "0"},
              (const char *[]){"2", "None", "-2"}, "(0,None,4)", "(3,None,0)", "(2,None,-2)", 3);
    run_slice(d, 3, (const char *[]){"None", "None", "None"}, (const char *[]){"None", "None", "None"},
              (const char *[]){"-1", "-1", "-1"}, "(None,None,None)", "(None,None,None)", "(-1,-1,-1)", 4);
    run_slice(d, 1, (const char *[]){"-2"}, (const char *[]){"10"}, NULL, "[-2]", "[10]", NULL, 5);
    run_slice(d, 1, (const char *[]){"-10"}, (const char *[]){"2"}, NULL, "(-10,)", "(2,)", NULL, 6);
    run_slice(d, 2, (const char *[]){"None", "3"}, (const char *[]){"None", "1"}, (const char *[]){"1", "-1"},
              "(None,3)", "(None,1)", "(1,-1)", 7);
    run_slice(d, 3, (const char *[]){"None", "None", "-1"}, (const char *[]){"None", "None", "-6"},
              (const char *[]){"1", "1", "-1"}, "(None,None,-1)", "(None,None,-6)", "(1,1,-1)", 8);
    run_slice(MX_SHAPE(7, 6), 2, (const char *[]){"1", "5"}, (const char *[]){"7", "0"}, (const char *[]){"3", "-2"},
              "(1,5)", "(7,0)", "(3,-2)", 9);
}
END_TEST

/* Shapes and leading values from MXNet 1.9.1 on x = arange(60).reshape(3,4,5):
 *   slice(x, begin=(0,None,4), end=(3,None,0), step=(2,None,-2)) (2,4,2) [4,2,9,7,14,12]
 *   slice(x, begin=(None,None,-1), end=(None,None,-6), step=(1,1,-1)) (3,4,5) [4,3,2,1,0,9]
 *   slice(x, begin=(5,), end=(6,)) and begin=(2,), end=(1,): (0,4,5)
 *   slice_axis(x, axis=-1, begin=-3, end=None) (3,4,3) [2,3,4,7,8,9]
 *   slice_like(x, ones((2,2,2)), axes=(1,)) [0..9, 10.. ] -> (3,2,5) */
START_TEST(mxnet_values)
{
    float x[60];
    for (int i = 0; i < 60; i++) x[i] = (float)i;
    mx_shape d = MX_SHAPE(3, 4, 5);
    const float *in[] = {x};
    oprun r;
    const char *k[] = {"begin", "end", "step"};
    ck_assert(oprun_forward(&r, "slice", k, (const char *[]){"(0,None,4)", "(3,None,0)", "(2,None,-2)"}, 3, 1, &d, in) ==
              MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(2, 4, 2)));
    float w1[] = {4, 2, 9, 7, 14, 12};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r.out[0][i], w1[i]);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "crop", k, (const char *[]){"(None,None,-1)", "(None,None,-6)", "(1,1,-1)"}, 3, 1, &d,
                            in) == MX_OK);
    float w2[] = {4, 3, 2, 1, 0, 9};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r.out[0][i], w2[i]);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "slice", k, (const char *[]){"(5,)", "(6,)"}, 2, 1, &d, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(0, 4, 5)));
    float g0 = 1;
    const float *head[] = {&g0};
    ck_assert(oprun_backward(&r, "slice", k, (const char *[]){"(5,)", "(6,)"}, 2, in, head) == MX_OK);
    for (int i = 0; i < 60; i++) ck_assert_float_eq(r.in_grad[0][i], 0.0f);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "slice", k, (const char *[]){"(2,)", "(1,)"}, 2, 1, &d, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(0, 4, 5)));
    oprun_free(&r);
    const char *ka[] = {"axis", "begin", "end"};
    ck_assert(oprun_forward(&r, "slice_axis", ka, (const char *[]){"-1", "-3", "None"}, 3, 1, &d, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(3, 4, 3)));
    float w3[] = {2, 3, 4, 7, 8, 9};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r.out[0][i], w3[i]);
    oprun_free(&r);
    float like[8] = {0};
    mx_shape ls[2] = {MX_SHAPE(3, 4, 5), MX_SHAPE(2, 2, 2)};
    const float *in2[] = {x, like};
    ck_assert(oprun_forward(&r, "slice_like", (const char *[]){"axes"}, (const char *[]){"(1,)"}, 1, 2, ls, in2) ==
              MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(3, 2, 5)));
    for (int i = 0; i < 10; i++) ck_assert_float_eq(r.out[0][i], (float)i);
    ck_assert_float_eq(r.out[0][10], 20.0f);
    oprun_free(&r);
}
END_TEST

START_TEST(slice_axis_and_like_against_reference)
{
    mx_shape d = MX_SHAPE(3, 4, 5);
    const char *ka[] = {"axis", "begin", "end"};
    full_axis(0, 3), full_axis(1, 4), full_axis(2, 5);
    g_cnt[1] = 2, g_keep[1][0] = 1, g_keep[1][1] = 2;
    opcheck_case c = {.op = "slice_axis", .keys = ka, .values = (const char *[]){"1", "1", "3"}, .n_params = 3,
                      .ref = gather_ref, .seed = 11};
    c.in_shapes[0] = d;
    opcheck_run(&c);
    full_axis(1, 4);
    g_cnt[0] = 2, g_keep[0][0] = 1, g_keep[0][1] = 2;
    c.values = (const char *[]){"-3", "-2", "None"};
    opcheck_run(&c);
    /* slice_like over axes (0, -1) with shape_like (2, 9, 3): data[:2, :, :3] */
    full_axis(0, 2), full_axis(1, 4), full_axis(2, 3);
    opcheck_case l = {.op = "slice_like", .keys = (const char *[]){"axes"}, .values = (const char *[]){"(0,-1)"},
                      .n_params = 1, .ref = gather_ref, .seed = 12, .skip_grad = 2};
    l.in_shapes[0] = d;
    l.in_shapes[1] = MX_SHAPE(2, 9, 3);
    opcheck_run(&l);
    full_axis(0, 2), full_axis(1, 3), full_axis(2, 4);
    l.n_params = 0;
    l.in_shapes[1] = MX_SHAPE(2, 3, 4);
    opcheck_run(&l);
}
END_TEST

static mx_status infer(const char *op, const char *const *k, const char *const *v, int n, mx_shape a, mx_shape b)
{
    mx_shape in[2] = {a, b}, out[1];
    int n_in, n_out;
    return opcheck_infer(op, k, v, n, in, &n_in, out, &n_out);
}

START_TEST(errors)
{
    mx_shape d = MX_SHAPE(3, 4, 5), none = {0};
    const char *k[] = {"begin", "end", "step"}, *ka[] = {"axis", "begin", "end"};
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,0)", "(2,4)", "(0,1)"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "step 0 is 0"));
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,0,0,0)", "(2,4,4,4)"}, 2, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "slice: begin (1,0,0,0) has 4 axes, data (3,4,5) only 3"));
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,0)", "(2,)"}, 2, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "must have the same length"));
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,x)", "(2,3)"}, 2, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "slice: parameter 'begin' has bad value '(1,x)'"));
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,", "(2,3)"}, 2, d, none), MX_ERR_INVALID);
    ck_assert_int_eq(infer("slice", k, (const char *[]){"(1,)"}, 1, d, none), MX_ERR_INVALID); /* end required */
    /* slice_axis is strict, as in MXNet */
    ck_assert_int_eq(infer("slice_axis", ka, (const char *[]){"0", "2", "1"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "0 <= begin < end <= 3"));
    ck_assert_int_eq(infer("slice_axis", ka, (const char *[]){"0", "0", "5"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_int_eq(infer("slice_axis", ka, (const char *[]){"3", "0", "1"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_int_eq(infer("slice_axis", ka, (const char *[]){"1", "-5", "2"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_int_eq(infer("slice_axis", ka, (const char *[]){"1", "0", "two"}, 3, d, none), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "expected an integer or None"));
    ck_assert_int_eq(infer("slice_like", NULL, NULL, 0, d, MX_SHAPE(2, 3)), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "differ in rank"));
    ck_assert_int_eq(infer("slice_like", NULL, NULL, 0, d, MX_SHAPE(4, 2, 2)), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "is longer than data's"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_slice");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, slice_against_reference);
    tcase_add_test(tc, mxnet_values);
    tcase_add_test(tc, slice_axis_and_like_against_reference);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
