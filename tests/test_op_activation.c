/* test_op_activation.c - Activation against a float64 reference. */
#include "parallel/parallel.h"
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int act_type_of(const void *params)
{
    const mx_op_def *op = mx_op_find("Activation");
    return *(const int *)((const char *)params + mx_op_param(op, "act_type")->offset);
}

static double ref_act(int type, double x)
{
    switch (type) {
    case 0: return x > 0 ? x : 0;
    case 1: return 1 / (1 + exp(-x));
    case 2: return tanh(x);
    case 3: return log1p(exp(x));
    default: return x / (1 + fabs(x));
    }
}

static void act_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)out_shapes;
    int type = act_type_of(params);
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) out[0][i] = ref_act(type, in[0][i]);
}

/* Values in [-3, 3) kept at least 0.01 away from 0, where relu has its kink
 * and a finite difference straddling it would be meaningless. */
static void away_from_zero(int index, float *data, int64_t n, uint64_t *rng)
{
    (void)index;
    for (int64_t i = 0; i < n; i++) {
        double v = opcheck_uniform(rng, 0.01, 3.0);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

static void run_case(const char *act, mx_shape data, uint64_t seed)
{
    const char *keys[] = {"act_type"};
    const char *values[] = {act};
    opcheck_case c = {.op = "Activation", .keys = keys, .values = values, .n_params = 1, .ref = act_ref,
                      .init = away_from_zero, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    const char *acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    for (int a = 0; a < 5; a++) {
        run_case(acts[a], MX_SHAPE(4, 7), 11 + (uint64_t)a);
        run_case(acts[a], MX_SHAPE(3, 2, 5, 3), 23 + (uint64_t)a);
        run_case(acts[a], MX_SHAPE(1), 31 + (uint64_t)a);
        run_case(acts[a], MX_SHAPE(17, 33), 41 + (uint64_t)a);
    }
}
END_TEST

/* Large inputs: softrelu takes its linear branch past 20, and sigmoid and
 * tanh saturate without overflow or NaN. */
START_TEST(extreme_inputs_stay_finite)
{
    const mx_op_def *op = mx_op_find("Activation");
    ck_assert_ptr_nonnull(op);
    const char *acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    float x[6] = {-100.0f, -30.0f, -1e-3f, 25.0f, 80.0f, 100.0f}, y[6], dy[6] = {1, 1, 1, 1, 1, 1}, dx[6];
    for (int a = 0; a < 5; a++) {
        _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
        const char *k[] = {"act_type"}, *v[] = {acts[a]};
        ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
        mx_tensor tx = {.data = x, .shape = MX_SHAPE(6), .ctx = mx_cpu()};
        mx_tensor ty = {.data = y, .shape = MX_SHAPE(6), .ctx = mx_cpu()};
        mx_tensor tdy = {.data = dy, .shape = MX_SHAPE(6), .ctx = mx_cpu()};
        mx_tensor tdx = {.data = dx, .shape = MX_SHAPE(6), .ctx = mx_cpu()};
        mx_req req[1] = {MX_REQ_WRITE};
        mx_exec_ctx exec = {.ctx = mx_cpu()};
        mx_op_ctx ctx = {.exec = &exec, .is_train = true};
        ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
        ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
        for (int i = 0; i < 6; i++) {
            ck_assert_msg(isfinite(y[i]) && isfinite(dx[i]), "%s at %g: y %g dx %g", acts[a], x[i], y[i], dx[i]);
            double want = ref_act(a, x[i]);
            ck_assert_msg(fabs(y[i] - want) <= 1e-6 + 1e-5 * fabs(want), "%s(%g) = %g, want %g", acts[a], x[i],
                          y[i], want);
        }
    }
}
END_TEST

/* tanh goes through its own expf-based formula: within 1e-6 relative of
 * the double tanh from 1e-8 to 30, both signs, across the series/ratio
 * switch at 0.125. */
START_TEST(tanh_is_accurate_everywhere)
{
    const mx_op_def *op = mx_op_find("Activation");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"act_type"}, *v[] = {"tanh"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    enum { N = 2000 };
    static float x[N], y[N];
    for (int i = 0; i < N / 2; i++) {
        x[2 * i] = (float)(1e-8 * pow(3e9, (double)i / (N / 2 - 1)));
        x[2 * i + 1] = -x[2 * i];
    }
    x[0] = 0.125f;
    x[1] = nextafterf(0.125f, 0.0f);
    mx_tensor tx = {.data = x, .shape = MX_SHAPE(N)}, ty = {.data = y, .shape = MX_SHAPE(N)};
    mx_req req[1] = {MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    for (int i = 0; i < N; i++) {
        double want = tanh((double)x[i]);
        ck_assert_msg(fabs(y[i] - want) <= 1e-6 * fabs(want), "tanh(%.9g) = %.9g, want %.9g", x[i], y[i], want);
    }
}
END_TEST

/* Forward in place (output buffer = data buffer) and backward in place
 * (in_grad buffer = out_grad buffer), as the in-place options allow. */
START_TEST(in_place_forward_and_backward)
{
    const mx_op_def *op = mx_op_find("Activation");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"act_type"}, *v[] = {"sigmoid"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    ck_assert_int_eq(op->forward_inplace[0].in, 0);
    ck_assert_int_eq(op->forward_inplace[0].out, 0);
    ck_assert_int_eq(op->backward_inplace[0].in, 0);
    ck_assert_int_eq(op->backward_inplace[0].out, 0);
    float buf[5] = {-2, -0.5f, 0.1f, 1, 3}, g[5] = {1, 2, 3, 4, 5};
    float x0[5], g0[5];
    memcpy(x0, buf, sizeof(buf));
    memcpy(g0, g, sizeof(g));
    mx_tensor t = {.data = buf, .shape = MX_SHAPE(5), .ctx = mx_cpu()};
    mx_tensor tg = {.data = g, .shape = MX_SHAPE(5), .ctx = mx_cpu()};
    mx_req req[1] = {MX_REQ_INPLACE};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, &t, req, &t, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &tg, &t, &t, req, &tg, NULL), MX_OK);
    for (int i = 0; i < 5; i++) {
        double s = 1 / (1 + exp(-x0[i]));
        ck_assert(fabs(buf[i] - s) < 1e-6);
        ck_assert(fabs(g[i] - g0[i] * s * (1 - s)) < 1e-5);
    }
}
END_TEST

/* The vector widths simd.h can pick, capped through $MX_SIMD (a CPU
 * without AVX-512 or AVX2 runs the widest it has for those). */
static const char *const widths[] = {"portable", "avx2", "avx512"};

/* Sizes split across the kernel pool (over 32K elements, an odd count so
 * the pieces end mid-vector) and small ones, on every width. */
START_TEST(large_and_odd_shapes_on_every_width)
{
    const char *acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        for (int a = 0; a < 5; a++) {
            const char *keys[] = {"act_type"};
            const char *values[] = {acts[a]};
            opcheck_case c = {.op = "Activation", .keys = keys, .values = values, .n_params = 1, .ref = act_ref,
                              .init = away_from_zero, .seed = 500 + (uint64_t)(10 * w + a), .max_points = 48};
            c.in_shapes[0] = MX_SHAPE(2, 7, 53, 47); /* 34874 = 16 * 2179 + 10 */
            opcheck_run(&c);
            run_case(acts[a], MX_SHAPE(3, 5), 600 + (uint64_t)(10 * w + a)); /* one partial vector */
            run_case(acts[a], MX_SHAPE(37), 700 + (uint64_t)(10 * w + a));   /* full vectors and a tail */
        }
    }
    unsetenv("MX_SIMD");
}
END_TEST

/* Forward then backward (write) on `pool`; returns y followed by dx. */
static float *run_on_pool(const char *act, int64_t n, const float *x, const float *dy, mx_threadpool *pool)
{
    const mx_op_def *op = mx_op_find("Activation");
    _Alignas(16) char params[16384];
    const char *k[] = {"act_type"}, *v[] = {act};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    float *r = malloc(sizeof(float) * (size_t)(2 * n));
    mx_tensor tx = {.data = (void *)x, .shape = MX_SHAPE(n)}, ty = {.data = r, .shape = MX_SHAPE(n)};
    mx_tensor tdy = {.data = (void *)dy, .shape = MX_SHAPE(n)}, tdx = {.data = r + n, .shape = MX_SHAPE(n)};
    mx_req req[1] = {MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
    return r;
}

/* Results do not depend on how the range is split: bit for bit the same on
 * the calling thread and on 2 or 3 threads, on every width; and an element
 * gets the same value in a vector's body as in a tail (all inputs equal,
 * a count that is not a multiple of 16). */
START_TEST(results_do_not_depend_on_the_split)
{
    const char *acts[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    enum { N = 100003 };
    float *x = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * N);
    uint64_t rng = 77;
    for (int i = 0; i < N; i++) {
        x[i] = (float)opcheck_uniform(&rng, -6, 6);
        dy[i] = (float)opcheck_uniform(&rng, -1, 1);
    }
    mx_threadpool *p2, *p3;
    ck_assert_int_eq(mx_threadpool_create(2, &p2), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(3, &p3), MX_OK);
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        for (int a = 0; a < 5; a++) {
            float *r1 = run_on_pool(acts[a], N, x, dy, NULL);
            float *r2 = run_on_pool(acts[a], N, x, dy, p2), *r3 = run_on_pool(acts[a], N, x, dy, p3);
            ck_assert_msg(!memcmp(r1, r2, sizeof(float) * 2 * N) && !memcmp(r1, r3, sizeof(float) * 2 * N),
                          "%s on %s: results differ with the thread count", acts[a], widths[w]);
            free(r1), free(r2), free(r3);
            for (int k = 0; k < 7; k++) {
                const int n = 37;
                float xs[37], ds[37];
                for (int i = 0; i < n; i++) xs[i] = -3.0f + 0.9f * (float)k, ds[i] = 0.75f;
                float *r = run_on_pool(acts[a], n, xs, ds, NULL);
                for (int i = 1; i < n; i++)
                    ck_assert_msg(r[i] == r[0] && r[n + i] == r[n], "%s on %s: element %d of f(%g) differs",
                                  acts[a], widths[w], i, (double)xs[0]);
                free(r);
            }
        }
    }
    unsetenv("MX_SIMD");
    mx_threadpool_free(p2);
    mx_threadpool_free(p3);
    free(x);
    free(dy);
}
END_TEST

/* tanh and sigmoid of every width against the double functions over a
 * dense grid, tighter than the op tests' tolerance: 3e-7 relative for tanh
 * (from 1e-30, across every branch), 2 ulp-ish for the logistic function. */
START_TEST(transcendentals_accurate_on_every_width)
{
    enum { N = 40000 };
    float *x = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        double m = 1e-30 * pow(1e31, (double)(i / 2) / (N / 2 - 1)); /* 1e-30 .. 10 */
        x[i] = (float)(i % 2 ? -m : m);
        dy[i] = 1.0f;
    }
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        float *t = run_on_pool("tanh", N, x, dy, NULL);
        float *sg = run_on_pool("sigmoid", N, x, dy, NULL);
        for (int i = 0; i < N; i++) {
            double want = tanh((double)x[i]), ws = 1 / (1 + exp(-(double)x[i]));
            ck_assert_msg(fabs(t[i] - want) <= 3e-7 * fabs(want), "%s: tanh(%.9g) = %.9g, want %.9g", widths[w], x[i],
                          t[i], want);
            ck_assert_msg(fabs(sg[i] - ws) <= 2.5e-7 * ws, "%s: sigmoid(%.9g) = %.9g, want %.9g", widths[w], x[i],
                          sg[i], ws);
        }
        free(t);
        free(sg);
    }
    unsetenv("MX_SIMD");
    free(x);
    free(dy);
}
END_TEST

START_TEST(bad_parameters_name_op_key_and_value)
{
    const mx_op_def *op = mx_op_find("Activation");
    ck_assert_ptr_nonnull(op);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k1[] = {"act_type"}, *v1[] = {"rellu"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Activation: parameter 'act_type' has bad value 'rellu'"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'relu'"));
    const char *k2[] = {"act_type"}, *v2[] = {"swish"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'act_type' has bad value 'swish'"));
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Activation: required parameter 'act_type' is missing"));

    const char *keys[] = {"act_type"}, *values[] = {"relu"};
    mx_shape in[1] = {{0}}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("Activation", keys, values, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Activation: the shape of data is unknown"));
    in[0] = MX_SHAPE(2, 3, 4);
    ck_assert_int_eq(opcheck_infer("Activation", keys, values, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(mx_shape_equal(&out[0], &in[0]));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_activation");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, extreme_inputs_stay_finite);
    tcase_add_test(tc, tanh_is_accurate_everywhere);
    tcase_add_test(tc, in_place_forward_and_backward);
    tcase_add_test(tc, large_and_odd_shapes_on_every_width);
    tcase_add_test(tc, results_do_not_depend_on_the_split);
    tcase_add_test(tc, transcendentals_accurate_on_every_width);
    tcase_add_test(tc, bad_parameters_name_op_key_and_value);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
