/* test_op_reduce.c - sum, mean, max, min, prod, norm against a float64
 * reference and finite differences, values written by MXNet 1.9.1, and the
 * shape rules (None/() reduce all into (1,), exclude, keepdims, negative
 * axes, duplicates). */
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const void *field(const char *op, const void *params, const char *key)
{
    const mx_param_desc *d = mx_op_param(mx_op_find(op), key);
    return d ? (const char *)params + d->offset : NULL;
}

static const char *g_op; /* the op the reference computes */

/* Reduced axes as MXNet defines them, then a plain loop per output cell. */
static void reduce_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                       const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_tuple *axis = field(g_op, params, "axis");
    const bool *keep_ex = field(g_op, params, "exclude");
    bool exclude = keep_ex ? *keep_ex : false;
    const int64_t *ordp = field(g_op, params, "ord");
    const mx_shape *d = &in_shapes[0];
    int nd = d->ndim;
    bool red[MX_MAX_NDIM];
    for (int k = 0; k < nd; k++) red[k] = true;
    if (axis->ndim > 0) {
        for (int k = 0; k < nd; k++) red[k] = exclude;
        for (int i = 0; i < axis->ndim; i++) red[(axis->v[i] + nd) % nd] = !exclude;
    }
    /* output index of each data element: row-major over the kept axes */
    int64_t n = mx_shape_size(d), n_out = 1;
    for (int k = 0; k < nd; k++)
        if (!red[k]) n_out *= d->dims[k];
    int kind = !strcmp(g_op, "sum") || !strcmp(g_op, "mean") ? 0
               : !strcmp(g_op, "max")                       ? 1
               : !strcmp(g_op, "min")                       ? 2
               : !strcmp(g_op, "prod")                      ? 3
                                                            : 4;
    double *acc = calloc((size_t)n_out, sizeof(double));
    int64_t *cnt = calloc((size_t)n_out, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, c[MX_MAX_NDIM];
        for (int k = nd - 1; k >= 0; k--) {
            c[k] = rem % d->dims[k];
            rem /= d->dims[k];
        }
        int64_t o = 0;
        for (int k = 0; k < nd; k++)
            if (!red[k]) o = o * d->dims[k] + c[k];
        double v = in[0][i];
        if (kind == 0) acc[o] += v;
        else if (kind == 1) acc[o] = cnt[o] && acc[o] > v ? acc[o] : v;
        else if (kind == 2) acc[o] = cnt[o] && acc[o] < v ? acc[o] : v;
        else if (kind == 3) acc[o] = (cnt[o] ? acc[o] : 1.0) * v;
        else acc[o] += *ordp == 1 ? fabs(v) : v * v;
        cnt[o]++;
    }
    for (int64_t o = 0; o < n_out; o++) {
        double v = acc[o];
        if (!strcmp(g_op, "mean")) v /= (double)cnt[o];
        if (!strcmp(g_op, "norm") && *ordp == 2) v = sqrt(v);
        out[0][o] = v;
    }
    free(acc);
    free(cnt);
}

static int g_zeros; /* prod: plant zeros in the data */

static void init_data(int index, float *x, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.3, 1.2); /* away from 0: |x| and ties stay smooth */
        x[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
    if (g_zeros >= 1) x[0] = 0; /* group of element 0: one zero */
    if (g_zeros >= 2) x[n - 1] = x[n - 2] = 0; /* last group (axis 1 of (…,3,4)): two zeros */
}

static bool g_big; /* few finite-difference points */

static void run(const char *op, mx_shape data, const char *axis, const char *keepdims, const char *exclude,
                const char *ord, uint64_t seed)
{
    const char *keys[4], *values[4];
    int n = 0;
    if (axis) keys[n] = "axis", values[n++] = axis;
    if (keepdims) keys[n] = "keepdims", values[n++] = keepdims;
    if (exclude) keys[n] = "exclude", values[n++] = exclude;
    if (ord) keys[n] = "ord", values[n++] = ord;
    g_op = mx_op_find(op)->name; /* aliases compute as their op */
    opcheck_case c = {.op = op, .keys = keys, .values = values, .n_params = n, .ref = reduce_ref,
                      .init = init_data, .seed = seed, .max_points = g_big ? 6 : 0};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    const char *ops[] = {"sum", "mean", "max", "min", "prod"};
    for (int k = 0; k < 5; k++) {
        uint64_t s = 100 * (uint64_t)k;
        run(ops[k], MX_SHAPE(2, 3, 4), NULL, NULL, NULL, NULL, s + 1);
        run(ops[k], MX_SHAPE(2, 3, 4), "()", "True", NULL, NULL, s + 2);
        run(ops[k], MX_SHAPE(2, 3, 4), "1", NULL, NULL, NULL, s + 3);
        run(ops[k], MX_SHAPE(2, 3, 4), "(-1,0)", "True", NULL, NULL, s + 4);
        run(ops[k], MX_SHAPE(2, 3, 4), "(2,0)", NULL, NULL, NULL, s + 5);
        run(ops[k], MX_SHAPE(2, 3, 4, 5), "1", NULL, "True", NULL, s + 6);
        run(ops[k], MX_SHAPE(2, 3, 4, 5), "(0,3)", "True", "True", NULL, s + 7);
        run(ops[k], MX_SHAPE(3, 5), "(0,1)", NULL, "True", NULL, s + 8); /* exclude everything: identity */
        run(ops[k], MX_SHAPE(7), "0", NULL, NULL, NULL, s + 9);
    }
    run("sum_axis", MX_SHAPE(2, 3), "1", NULL, NULL, NULL, 50);
    /* big enough that slices along a kept axis 0 split across the pool */
    g_big = true;
    run("mean", MX_SHAPE(9, 8, 16, 16), "(2,3)", NULL, NULL, NULL, 52);
    run("max", MX_SHAPE(9, 8, 256), "1", "True", NULL, NULL, 53);
    run("norm", MX_SHAPE(17, 1024), "-1", NULL, NULL, "2", 55);
    g_big = false;
    run("max_axis", MX_SHAPE(2, 3), "0", NULL, NULL, NULL, 51);
    for (int ord = 1; ord <= 2; ord++) {
        const char *o = ord == 1 ? "1" : "2";
        run("norm", MX_SHAPE(2, 3, 4), NULL, NULL, NULL, o, 60 + (uint64_t)ord);
        run("norm", MX_SHAPE(2, 3, 4), "(1,2)", NULL, NULL, o, 62 + (uint64_t)ord);
        run("norm", MX_SHAPE(2, 3, 4), "-1", "True", NULL, o, 64 + (uint64_t)ord);
        run("norm", MX_SHAPE(2, 3, 4, 2), "(0,2)", NULL, NULL, o, 66 + (uint64_t)ord);
    }
    /* prod with zeros: the gradient is the product of the others, finite */
    g_zeros = 1;
    run("prod", MX_SHAPE(2, 3, 4), "2", NULL, NULL, NULL, 70);
    g_zeros = 2;
    run("prod", MX_SHAPE(2, 3, 4), "2", NULL, NULL, NULL, 71);
    run("prod", MX_SHAPE(2, 3, 4), NULL, NULL, NULL, NULL, 72);
    g_zeros = 0;
}
END_TEST

static void expect(const char *op, const char *const *k, const char *const *v, int n, const float *x, mx_shape xs,
                   mx_shape want_shape, const double *want, int n_want)
{
    oprun r;
    ck_assert_msg(oprun_forward(&r, op, k, v, n, 1, &xs, &x) == MX_OK, "%s", mx_last_error());
    ck_assert(mx_shape_equal(&r.out_shapes[0], &want_shape));
    for (int i = 0; i < n_want; i++)
        ck_assert_msg(fabs(r.out[0][i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-5, "%s[%d] = %g, MXNet %g", op, i,
                      r.out[0][i], want[i]);
    oprun_free(&r);
}

/* Reference values from MXNet 1.9.1 (the venv), computed once with
 *   x = mx.nd.array(np.arange(24).reshape(2,3,4))
 *   mx.nd.norm(x, axis=(1,2)); mx.nd.mean(x, axis=(0,2));
 *   mx.nd.prod(x+1, axis=0, exclude=True);
 *   mx.nd.norm(x, ord=1, axis=-1, keepdims=True);
 *   mx.nd.max(x-10, axis=(0,2), keepdims=True); mx.nd.min(x, axis=1, exclude=True)
 * and the max gradient with autograd on [[1,2,2],[0,-3,4]], axis=1. */
START_TEST(mxnet_values)
{
    float x[24], x1[24], xm[24];
    for (int i = 0; i < 24; i++) x[i] = (float)i, x1[i] = (float)(i + 1), xm[i] = (float)(i - 10);
    mx_shape s = MX_SHAPE(2, 3, 4);
    const char *ka[] = {"axis"}, *kak[] = {"axis", "keepdims"}, *kae[] = {"axis", "exclude"};
    const char *kok[] = {"ord", "axis", "keepdims"};
    expect("norm", ka, (const char *[]){"(1,2)"}, 1, x, s, MX_SHAPE(2), (double[]){22.494441986083984, 61.78996658325195}, 2);
    expect("mean", ka, (const char *[]){"(0,2)"}, 1, x, s, MX_SHAPE(3), (double[]){7.5, 11.5, 15.5}, 3);
    expect("prod", kae, (const char *[]){"0", "True"}, 2, x1, s, MX_SHAPE(2),
           (double[]){479001600.0, 1295295027609600.0}, 2);
    expect("norm", kok, (const char *[]){"1", "-1", "True"}, 3, x, s, MX_SHAPE(2, 3, 1),
           (double[]){6, 22, 38, 54, 70, 86}, 6);
    expect("max", kak, (const char *[]){"(0,2)", "True"}, 2, xm, s, MX_SHAPE(1, 3, 1), (double[]){5, 9, 13}, 3);
    expect("min_axis", kae, (const char *[]){"1", "True"}, 2, x, s, MX_SHAPE(3), (double[]){0, 4, 8}, 3);
    expect("sum", NULL, NULL, 0, x, s, MX_SHAPE(1), (double[]){276}, 1);

    /* max: every tie gets the gradient, as in MXNet */
    float y[] = {1, 2, 2, 0, -3, 4}, ones[] = {1, 1};
    mx_shape ys = MX_SHAPE(2, 3);
    oprun r;
    const float *yin[] = {y}, *head[] = {ones};
    ck_assert(oprun_forward(&r, "max", ka, (const char *[]){"1"}, 1, 1, &ys, yin) == MX_OK);
    ck_assert(oprun_backward(&r, "max", ka, (const char *[]){"1"}, 1, yin, head) == MX_OK);
    float want[] = {0, 1, 1, 0, 0, 1};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(r.in_grad[0][i], want[i]);
    oprun_free(&r);
    /* norm at zero: gradient 0 (MXNet gives NaN) */
    float z[4] = {0};
    const float *zin[] = {z};
    mx_shape zs = MX_SHAPE(2, 2);
    ck_assert(oprun_forward(&r, "norm", ka, (const char *[]){"1"}, 1, 1, &zs, zin) == MX_OK);
    ck_assert(oprun_backward(&r, "norm", ka, (const char *[]){"1"}, 1, zin, head) == MX_OK);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(r.in_grad[0][i], 0.0f);
    oprun_free(&r);
}
END_TEST

static mx_status infer1(const char *op, const char *const *k, const char *const *v, int n, mx_shape data,
                        mx_shape *out)
{
    mx_shape in[1] = {data}, o[1];
    int n_in, n_out;
    mx_status s = opcheck_infer(op, k, v, n, in, &n_in, o, &n_out);
    *out = o[0];
    return s;
}

START_TEST(shapes_and_errors)
{
    mx_shape d = MX_SHAPE(2, 3, 4), o;
    const char *kak[] = {"axis", "keepdims"}, *kae[] = {"axis", "exclude"}, *ka[] = {"axis"};
    ck_assert_int_eq(infer1("sum", NULL, NULL, 0, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(1)));
    ck_assert_int_eq(infer1("sum", kak, (const char *[]){"()", "True"}, 2, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(1, 1, 1)));
    ck_assert_int_eq(infer1("sum", kae, (const char *[]){"()", "True"}, 2, d, &o), MX_OK); /* MXNet: all */
    ck_assert(oprun_shape_is(&o, MX_SHAPE(1)));
    ck_assert_int_eq(infer1("mean", kae, (const char *[]){"1", "True"}, 2, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(3)));
    ck_assert_int_eq(infer1("max", kak, (const char *[]){"-1", "True"}, 2, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(2, 3, 1)));
    ck_assert_int_eq(infer1("prod", ka, (const char *[]){"(0,1,2)"}, 1, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(1)));
    ck_assert_int_eq(infer1("norm", ka, (const char *[]){"1"}, 1, d, &o), MX_OK);
    ck_assert(oprun_shape_is(&o, MX_SHAPE(2, 4)));

    ck_assert_int_eq(infer1("sum", ka, (const char *[]){"(0,-3)"}, 1, d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "sum: parameter 'axis' names axis 0 twice"));
    ck_assert_int_eq(infer1("min", ka, (const char *[]){"3"}, 1, d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "min: parameter 'axis' has axis 3, out of range for data of shape (2,3,4)"));
    ck_assert_int_eq(infer1("norm", (const char *[]){"ord"}, (const char *[]){"3"}, 1, d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "norm: parameter 'ord' has value 3"));
    ck_assert_int_eq(infer1("norm", (const char *[]){"exclude"}, (const char *[]){"True"}, 1, d, &o),
                     MX_ERR_INVALID); /* MXNet's norm has no exclude */
    ck_assert_int_eq(infer1("mean", (const char *[]){"axes"}, (const char *[]){"1"}, 1, d, &o), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'axis'"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_reduce");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, mxnet_values);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
