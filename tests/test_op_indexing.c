/* test_op_indexing.c - take (clip, wrap, raise; any axis) and one_hot
 * against float64 references and finite differences, values written by
 * MXNet 1.9.1, and errors. */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_axis;
static const char *g_mode;

static void take_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                     const mx_shape *out_shapes)
{
    (void)params, (void)out_shapes;
    const mx_shape *a = &in_shapes[0];
    int axis = g_axis < 0 ? g_axis + a->ndim : g_axis;
    int64_t outer = 1, inner = 1, size = a->dims[axis], ni = mx_shape_size(&in_shapes[1]);
    for (int k = 0; k < axis; k++) outer *= a->dims[k];
    for (int k = axis + 1; k < a->ndim; k++) inner *= a->dims[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < ni; i++) {
            int64_t j = (int64_t)trunc(in[1][i]);
            if (!strcmp(g_mode, "clip")) j = j < 0 ? 0 : j > size - 1 ? size - 1 : j;
            else if (!strcmp(g_mode, "wrap")) j = ((j % size) + size) % size;
            for (int64_t k = 0; k < inner; k++) out[0][(o * ni + i) * inner + k] = in[0][(o * size + j) * inner + k];
        }
}

static int64_t g_lo, g_hi; /* index range to draw from */

static void take_init(int index, float *x, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = index == 0 ? (float)opcheck_uniform(rng, -1, 1) : (float)opcheck_uniform(rng, (double)g_lo, (double)g_hi);
}

static void run_take(mx_shape a, mx_shape idx, int axis, const char *mode, int64_t lo, int64_t hi, uint64_t seed)
{
    char ax[16];
    snprintf(ax, sizeof(ax), "%d", axis);
    const char *keys[] = {"axis", "mode"}, *values[] = {ax, mode};
    g_axis = axis, g_mode = mode, g_lo = lo, g_hi = hi;
    opcheck_case c = {.op = "take", .keys = keys, .values = values, .n_params = 2, .ref = take_ref,
                      .init = take_init, .skip_grad = 2, .seed = seed};
    c.in_shapes[0] = a;
    c.in_shapes[1] = idx;
    opcheck_run(&c);
}

START_TEST(take_against_reference)
{
    run_take(MX_SHAPE(5, 3), MX_SHAPE(4), 0, "clip", -3, 8, 1);
    run_take(MX_SHAPE(5, 3), MX_SHAPE(2, 3), 0, "wrap", -12, 12, 2);
    run_take(MX_SHAPE(2, 5, 3), MX_SHAPE(7), 1, "raise", 0, 5, 3); /* repeats: gradients add up */
    run_take(MX_SHAPE(2, 5, 3), MX_SHAPE(2, 2), -1, "clip", -2, 5, 4);
    run_take(MX_SHAPE(4), MX_SHAPE(3, 2), 0, "wrap", -9, 9, 5);
}
END_TEST

/* From MXNet 1.9.1 (the venv), computed once with a = arange(12).reshape(3,4),
 * i = [[0, 2.7], [-1, 5]]:
 *   take(a, i, axis=-1, mode='clip') (3,2,2) [0,2,0,3, 4,6,4,7]
 *   take(a, i, axis=-1, mode='wrap') [0,2,3,1, 4,6,7,5]
 *   take(a, i, mode='raise') -> error "indices out of bound"
 *   one_hot([1,0,2.6,-1,3], 3, on_value=5, off_value=-1) (5,3)
 *     [-1,5,-1, 5,-1,-1, -1,-1,5, -1,-1,-1, -1,-1,-1] */
START_TEST(mxnet_values)
{
    float a[12], idx[] = {0, 2.7f, -1, 5};
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    mx_shape s[2] = {MX_SHAPE(3, 4), MX_SHAPE(2, 2)};
    const float *in[] = {a, idx};
    const char *k[] = {"axis", "mode"};
    oprun r;
    ck_assert(oprun_forward(&r, "take", k, (const char *[]){"-1", "clip"}, 2, 2, s, in) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(3, 2, 2)));
    float w1[] = {0, 2, 0, 3, 4, 6, 4, 7};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w1[i]);
    oprun_free(&r);
    ck_assert(oprun_forward(&r, "take", k, (const char *[]){"-1", "wrap"}, 2, 2, s, in) == MX_OK);
    float w2[] = {0, 2, 3, 1, 4, 6, 7, 5};
    for (int i = 0; i < 8; i++) ck_assert_float_eq(r.out[0][i], w2[i]);
    oprun_free(&r);
    ck_assert_int_eq(oprun_forward(&r, "take", k, (const char *[]){"0", "raise"}, 2, 2, s, in), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "take: index -1 (position 2) is out of bounds for an axis of size 3"));
    oprun_free(&r);

    float oi[] = {1, 0, 2.6f, -1, 3};
    mx_shape os = MX_SHAPE(5);
    const float *oin[] = {oi};
    ck_assert(oprun_forward(&r, "one_hot", (const char *[]){"depth", "on_value", "off_value"},
                            (const char *[]){"3", "5", "-1"}, 3, 1, &os, oin) == MX_OK);
    ck_assert(oprun_shape_is(&r.out_shapes[0], MX_SHAPE(5, 3)));
    float w3[] = {-1, 5, -1, 5, -1, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1};
    for (int i = 0; i < 15; i++) ck_assert_float_eq(r.out[0][i], w3[i]);
    ck_assert(oprun_backward(&r, "one_hot", (const char *[]){"depth", "on_value", "off_value"},
                             (const char *[]){"3", "5", "-1"}, 3, oin, NULL) == MX_OK);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(r.in_grad[0][i], 0.0f);
    oprun_free(&r);
}
END_TEST

START_TEST(errors)
{
    int n_in, n_out;
    mx_shape out[1];
    mx_shape t[2] = {MX_SHAPE(3, 4), MX_SHAPE(2)};
    ck_assert_int_eq(opcheck_infer("take", (const char *[]){"axis"}, (const char *[]){"2"}, 1, t, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "take: parameter 'axis' has value 2, out of range"));
    ck_assert_int_eq(opcheck_infer("take", (const char *[]){"mode"}, (const char *[]){"nearest"}, 1, t, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID);
    mx_shape t2[2] = {MX_SHAPE(3, 0), MX_SHAPE(2)};
    ck_assert_int_eq(opcheck_infer("take", (const char *[]){"axis"}, (const char *[]){"1"}, 1, t2, &n_in, out, &n_out),
                     MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "take: cannot pick from axis 1 of a (3,0): it is empty"));
    mx_shape o[1] = {MX_SHAPE(2, 3)};
    ck_assert_int_eq(opcheck_infer("one_hot", NULL, NULL, 0, o, &n_in, out, &n_out), MX_ERR_INVALID); /* depth */
    ck_assert_int_eq(opcheck_infer("one_hot", (const char *[]){"depth"}, (const char *[]){"-2"}, 1, o, &n_in, out,
                                   &n_out),
                     MX_ERR_INVALID);
    ck_assert_int_eq(opcheck_infer("one_hot", (const char *[]){"depth", "dtype"}, (const char *[]){"4", "int32"}, 2, o,
                                   &n_in, out, &n_out),
                     MX_ERR_UNSUPPORTED);
    ck_assert_int_eq(opcheck_infer("one_hot", (const char *[]){"depth"}, (const char *[]){"4"}, 1, o, &n_in, out,
                                   &n_out),
                     MX_OK);
    ck_assert(oprun_shape_is(&out[0], MX_SHAPE(2, 3, 4)));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_indexing");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, take_against_reference);
    tcase_add_test(tc, mxnet_values);
    tcase_add_test(tc, errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
