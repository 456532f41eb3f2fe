/* test_op_tile.c - tile and repeat against float64 references and finite
 * differences, values written by MXNet 1.9.1, and errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Output element -> data element by coordinates (right-aligned, modulo). */
static void tile_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params;
    const mx_shape *d = &in_shapes[0], *o = &out_shapes[0];
    int64_t n = mx_shape_size(o);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, src = 0, st = 1;
        for (int k = o->ndim - 1, kd = d->ndim - 1; k >= 0; k--, kd--) {
            int64_t c = rem % o->dims[k];
            rem /= o->dims[k];
            if (kd >= 0) {
                src += (c % d->dims[kd]) * st;
                st *= d->dims[kd];
            }
        }
        out[0][i] = in[0][src];
    }
}

static int g_rep, g_axis; /* g_axis 99: None */

static void repeat_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    const mx_shape *d = &in_shapes[0];
    int64_t n = mx_shape_size(d), inner = 1, len = n;
    if (g_axis != 99) {
        int ax = g_axis < 0 ? g_axis + d->ndim : g_axis;
        len = d->dims[ax];
        for (int k = ax + 1; k < d->ndim; k++) inner *= d->dims[k];
    }
    for (int64_t e = 0; e < n; e++) { /* element e = (a, j, k) goes to (a, j*r + t, k) */
        int64_t a = e / (len * inner), j = (e / inner) % len, k = e % inner;
        for (int t = 0; t < g_rep; t++) out[0][(a * len * g_rep + j * g_rep + t) * inner + k] = in[0][e];
    }
}

static void run_tile(mx_shape d, const char *reps, uint64_t seed)
{
    const char *keys[] = {"reps"}, *values[] = {reps};
    opcheck_case c = {.op = "tile", .keys = keys, .values = values, .n_params = 1, .ref = tile_ref, .seed = seed};
    c.in_shapes[0] = d;
    opcheck_run(&c);
}

static void run_repeat(mx_shape d, int rep, int axis, uint64_t seed)
{
    char r[8], a[8];
    snprintf(r, sizeof(r), "%d", rep);
    snprintf(a, sizeof(a), "%d", axis);
    const char *keys[] = {"repeats", "axis"}, *values[] = {r, a};
    g_rep = rep, g_axis = axis;
    opcheck_case c = {.op = "repeat", .keys = keys, .values = values, .n_params = axis == 99 ? 1 : 2,
                      .ref = repeat_ref, .seed = seed};
    c.in_shapes[0] = d;
    opcheck_run(&c);
}

START_TEST(forward_backward)
{
    run_tile(MX_SHAPE(3, 4), "(2,)", 1);
    run_tile(MX_SHAPE(3, 4), "(2,1,2)", 2);
    run_tile(MX_SHAPE(2, 3), "(3,2)", 3);
    run_tile(MX_SHAPE(2, 1, 3), "()", 4);
    run_tile(MX_SHAPE(2, 1, 3), "(2, 3)", 5);
    run_repeat(MX_SHAPE(3, 4), 2, 99, 6);
    run_repeat(MX_SHAPE(3, 4), 2, -1, 7);
    run_repeat(MX_SHAPE(2, 3, 4), 3, 1, 8);
    run_repeat(MX_SHAPE(2, 3), 1, 0, 9);
}
END_TEST

/* From MXNet 1.9.1 on a = arange(12).reshape(3,4):
 *   tile(a, reps=(2,)) (3,8) [0,1,2,3,0,1,2,3]; tile(a, reps=(2,1,2)) (2,3,8)
 *   repeat(a, repeats=2) (24,) [0,0,1,1,2,2,3,3]; repeat(a, 2, axis=-1) (3,8)
 * repeat(a, repeats=0, axis=0): MXNet 1.9.1 prints an empty array of shape
 * (0,) (its legacy shapes treat 0 as unknown); here the result is (0,4). */
START_TEST(mxnet_values_and_errors)
{
    float a[12];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    mx_shape s = MX_SHAPE(3, 4);
    const float *in[] = {a};
    oprun r;
    ck_assert(oprun_forward(&r, "tile", (const char *[]){"reps"}, (const char *[]){"(2,1,2)"}, 1, 1, &s, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(2, 3, 8)));
    float w1[] = {0, 1, 2, 3, 0, 1, 2, 3};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w1[i]);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "repeat", (const char *[]){"repeats"}, (const char *[]){"2"}, 1, 1, &s, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(24)));
    float w2[] = {0, 0, 1, 1, 2, 2, 3, 3};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w2[i]);
    oprun_free(&r);

    int n_in, n_out;
    mx_shape d[1] = {MX_SHAPE(3, 4)}, out[1];
    ck_assert_int_eq(opcheck_infer("tile", (const char *[]){"reps"}, (const char *[]){"(0,2)"}, 1, d, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("tile", (const char *[]){"reps"}, (const char *[]){"(-1,2)"}, 1, d, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("tile", NULL, NULL, 0, d, &n_in, out, &n_out), MX_ERR_INVALID); /* required */
    ck_assert_int_eq(opcheck_infer("repeat", (const char *[]){"repeats"}, (const char *[]){"-1"}, 1, d, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("repeat", (const char *[]){"repeats", "axis"}, (const char *[]){"2", "2"}, 2, d,
                                   &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "repeat: parameter 'axis' has value 2, out of range"));
    ck_assert_int_eq(opcheck_infer("repeat", (const char *[]){"repeats", "axis"}, (const char *[]){"2", "x"}, 2, d,
                                   &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("repeat", (const char *[]){"repeats", "axis"}, (const char *[]){"0", "0"}, 2, d,
                                   &n_in, out, &n_out),
                     MX_OK);
    ck_assert(oprun_shape_is(&out[0], MX_SHAPE(0, 4)));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_tile");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forward_backward);
    tcase_add_test(tc, mxnet_values_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
