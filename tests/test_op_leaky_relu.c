/* test_op_leaky_relu.c - LeakyReLU against a float64 reference. */
#include "parallel/parallel.h"
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const void *field(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("LeakyReLU");
    return (const char *)params + mx_op_param(op, name)->offset;
}

static void lrelu_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                      const mx_shape *out_shapes)
{
    (void)out_shapes;
    const char *type = mx_op_find("LeakyReLU")->params[0].choices[*(const int *)field(params, "act_type")];
    double slope = *(const double *)field(params, "slope");
    const double lambda = 1.0507009873554804934193349852946, alpha = 1.6732632423543772848170429916717;
    const mx_shape *d = &in_shapes[0];
    int64_t n = mx_shape_size(d), c = d->ndim > 1 ? d->dims[1] : 1, inner = 1;
    for (int i = 2; i < d->ndim; i++) inner *= d->dims[i];
    for (int64_t i = 0; i < n; i++) {
        double x = in[0][i], y;
        if (!strcmp(type, "leaky")) y = x > 0 ? x : slope * x;
        else if (!strcmp(type, "elu")) y = x > 0 ? x : slope * (exp(x) - 1);
        else if (!strcmp(type, "selu")) y = lambda * (x > 0 ? x : alpha * (exp(x) - 1));
        else if (!strcmp(type, "gelu")) y = 0.5 * x * (1 + erf(x / sqrt(2.0)));
        else { /* prelu: channel = axis 1, or one shared slope */
            double g = mx_shape_size(&in_shapes[1]) == 1 ? in[1][0] : in[1][(i / inner) % c];
            y = x > 0 ? x : g * x;
        }
        out[0][i] = y;
    }
}

/* data in [-3, 3) at least 0.01 from the kink at 0; gamma in [0.05, 0.5). */
static void init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        if (index == 1) {
            data[i] = (float)opcheck_uniform(rng, 0.05, 0.5);
            continue;
        }
        double v = opcheck_uniform(rng, 0.01, 3.0);
        data[i] = (float)(opcheck_uniform(rng, 0, 1) < 0.5 ? -v : v);
    }
}

static void run_case(mx_shape data, const char *act, const char *slope, mx_shape gamma, uint64_t seed)
{
    const char *keys[] = {"act_type", "slope"};
    const char *values[] = {act, slope};
    opcheck_case c = {.op = "LeakyReLU", .keys = keys, .values = values, .n_params = slope ? 2 : 1,
                      .ref = lrelu_ref, .init = init, .seed = seed};
    c.in_shapes[0] = data;
    c.in_shapes[1] = gamma;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    const mx_shape none = {0};
    mx_shape shapes[] = {MX_SHAPE(4, 7), MX_SHAPE(3, 2, 5, 3), MX_SHAPE(1), MX_SHAPE(17, 33), MX_SHAPE(2, 3, 5)};
    for (int s = 0; s < 5; s++) {
        uint64_t seed = 10 * (uint64_t)s;
        run_case(shapes[s], "leaky", NULL, none, seed + 1);
        run_case(shapes[s], "leaky", "0.1", none, seed + 2);
        run_case(shapes[s], "elu", NULL, none, seed + 3);
        run_case(shapes[s], "elu", "1.0", none, seed + 4);
        run_case(shapes[s], "selu", NULL, none, seed + 5);
        run_case(shapes[s], "gelu", NULL, none, seed + 6);
        run_case(shapes[s], "prelu", NULL, none, seed + 7); /* gamma inferred (C,) */
        run_case(shapes[s], "prelu", NULL, MX_SHAPE(1), seed + 8); /* one shared slope */
    }
}
END_TEST

START_TEST(default_is_leaky_with_slope_quarter)
{
    const mx_op_def *op = mx_op_find("LeakyReLU");
    ck_assert_ptr_nonnull(op);
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    char buf[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "act_type"), params, buf, sizeof(buf)), "leaky");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "slope"), params, buf, sizeof(buf)), "0.25");
    const char *names[4];
    ck_assert_int_eq(op->list_inputs(params, names), 1);
    const char *k[] = {"act_type"}, *v[] = {"prelu"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    ck_assert_int_eq(op->list_inputs(params, names), 2);
    ck_assert_str_eq(names[1], "gamma");

    mx_shape in[2] = {MX_SHAPE(8, 16, 5, 5)}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("LeakyReLU", k, v, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(in[1].ndim == 1 && in[1].dims[0] == 16);
    ck_assert(mx_shape_equal(&out[0], &in[0]));
}
END_TEST

/* in_grad(data) sharing out_grad's buffer, as the backward in-place option
 * allows: prelu must still see the original out_grad for gamma. */
START_TEST(backward_in_place_keeps_gamma_gradient)
{
    const mx_op_def *op = mx_op_find("LeakyReLU");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"act_type"}, *v[] = {"prelu"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    float x[4] = {-1, 2, -3, 4}, gamma[2] = {0.5f, 0.25f}, y[4], g[4] = {1, 1, 2, 2}, dg[2];
    mx_shape ds = MX_SHAPE(1, 2, 2);
    mx_tensor in[2] = {{.data = x, .shape = ds}, {.data = gamma, .shape = MX_SHAPE(2)}};
    mx_tensor out[1] = {{.data = y, .shape = ds}};
    mx_tensor og[1] = {{.data = g, .shape = ds}};
    mx_tensor ig[2] = {{.data = g, .shape = ds}, {.data = dg, .shape = MX_SHAPE(2)}};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, NULL), MX_OK);
    ck_assert(y[0] == -0.5f && y[1] == 2 && y[2] == -0.75f && y[3] == 4);
    req[0] = MX_REQ_INPLACE;
    ck_assert_int_eq(op->backward(&ctx, params, og, in, out, req, ig, NULL), MX_OK);
    ck_assert(dg[0] == -1 && dg[1] == -6);
    ck_assert(g[0] == 0.5f && g[1] == 1 && g[2] == 0.5f && g[3] == 2);
}
END_TEST

static const char *const widths[] = {"portable", "avx2", "avx512"};

/* Sizes split across the kernel pool (over 32K elements, an odd count),
 * prelu's gamma gradient split by channel, on every vector width. */
START_TEST(large_shapes_on_every_width)
{
    const mx_shape none = {0};
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        const char *acts[] = {"leaky", "elu", "selu", "gelu", "prelu", "prelu"};
        for (int a = 0; a < 6; a++) {
            const char *keys[] = {"act_type", "slope"};
            const char *values[] = {acts[a], "0.3"};
            opcheck_case c = {.op = "LeakyReLU", .keys = keys, .values = values, .n_params = 2, .ref = lrelu_ref,
                              .init = init, .seed = 900 + (uint64_t)(10 * w + a), .max_points = 48};
            c.in_shapes[0] = MX_SHAPE(3, 40, 17, 19); /* 38760 = 16 * 2422 + 8 */
            c.in_shapes[1] = a == 5 ? MX_SHAPE(1) : none;
            opcheck_run(&c);
            run_case(MX_SHAPE(5, 3), acts[a], "0.3", a == 5 ? MX_SHAPE(1) : none, 950 + (uint64_t)(10 * w + a));
        }
    }
    unsetenv("MX_SIMD");
}
END_TEST

/* Forward then backward (write) on `pool`: y, dx and dgamma one after the
 * other. */
static float *run_on_pool(const char *act, mx_shape d, int64_t c, const float *x, const float *gamma, const float *dy,
                          mx_threadpool *pool)
{
    const mx_op_def *op = mx_op_find("LeakyReLU");
    _Alignas(16) char params[16384];
    const char *k[] = {"act_type"}, *v[] = {act};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    int64_t n = mx_shape_size(&d);
    float *r = malloc(sizeof(float) * (size_t)(2 * n + c));
    mx_tensor in[2] = {{.data = (void *)x, .shape = d}, {.data = (void *)gamma, .shape = MX_SHAPE(c)}};
    mx_tensor out[1] = {{.data = r, .shape = d}}, og[1] = {{.data = (void *)dy, .shape = d}};
    mx_tensor ig[2] = {{.data = r + n, .shape = d}, {.data = r + 2 * n, .shape = MX_SHAPE(c)}};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, out, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, og, in, out, req, ig, NULL), MX_OK);
    return r;
}

/* Bit for bit the same results on 1, 2 and 3 threads, gamma's gradient
 * (a reduction) included, per channel and shared. */
START_TEST(results_do_not_depend_on_the_split)
{
    const mx_shape d = MX_SHAPE(3, 40, 17, 19);
    const int64_t n = mx_shape_size(&d);
    float *x = malloc(sizeof(float) * (size_t)n), *dy = malloc(sizeof(float) * (size_t)n), gamma[40];
    uint64_t rng = 5;
    init(0, x, n, &rng);
    init(1, gamma, 40, &rng);
    for (int64_t i = 0; i < n; i++) dy[i] = (float)opcheck_uniform(&rng, -1, 1);
    mx_threadpool *p2, *p3;
    ck_assert_int_eq(mx_threadpool_create(2, &p2), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(3, &p3), MX_OK);
    const char *acts[] = {"leaky", "elu", "selu", "gelu", "prelu", "prelu"};
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        for (int a = 0; a < 6; a++) {
            int64_t c = a == 5 ? 1 : 40, m = 2 * n + (a >= 4 ? c : 0);
            float *r1 = run_on_pool(acts[a], d, c, x, gamma, dy, NULL);
            float *r2 = run_on_pool(acts[a], d, c, x, gamma, dy, p2), *r3 = run_on_pool(acts[a], d, c, x, gamma, dy, p3);
            ck_assert_msg(!memcmp(r1, r2, sizeof(float) * (size_t)m) && !memcmp(r1, r3, sizeof(float) * (size_t)m),
                          "%s (%lld gamma) on %s: results differ with the thread count", acts[a], (long long)c,
                          widths[w]);
            free(r1), free(r2), free(r3);
        }
    }
    unsetenv("MX_SIMD");
    mx_threadpool_free(p2);
    mx_threadpool_free(p3);
    free(x);
    free(dy);
}
END_TEST

/* elu's expm1 on every width against the double function over a dense
 * grid of negative inputs, tighter than the op tests' tolerance. */
START_TEST(elu_is_accurate_on_every_width)
{
    enum { N = 30000 };
    const mx_shape d = MX_SHAPE(N);
    float *x = malloc(sizeof(float) * N), *dy = malloc(sizeof(float) * N), gamma[1] = {0};
    for (int i = 0; i < N; i++) {
        x[i] = (float)(-1e-6 * pow(3e7, (double)i / (N - 1))); /* -1e-6 .. -30 */
        dy[i] = 1.0f;
    }
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        float *r = run_on_pool("elu", d, 1, x, gamma, dy, NULL); /* slope 0.25 */
        for (int i = 0; i < N; i++) {
            double want = 0.25 * expm1((double)x[i]);
            ck_assert_msg(fabs(r[i] - want) <= 3e-7 * fabs(want), "%s: elu(%.9g) = %.9g, want %.9g", widths[w], x[i],
                          r[i], want);
        }
        free(r);
    }
    unsetenv("MX_SIMD");
    free(x);
    free(dy);
}
END_TEST

START_TEST(bad_parameters_name_op_key_and_value)
{
    const mx_op_def *op = mx_op_find("LeakyReLU");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k1[] = {"act_type"}, *v1[] = {"rrelu"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v1, 1, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LeakyReLU: parameter 'act_type' value 'rrelu' is not supported"));
    const char *v2[] = {"swish"};
    ck_assert_int_eq(mx_op_parse_params(op, k1, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LeakyReLU: parameter 'act_type' has bad value 'swish'"));
    const char *k3[] = {"slope"}, *v3[] = {"steep"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LeakyReLU: parameter 'slope' has bad value 'steep'"));
    const char *k4[] = {"slop"}, *v4[] = {"0.1"};
    ck_assert_int_eq(mx_op_parse_params(op, k4, v4, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'slope'"));

    const char *k[] = {"act_type"}, *v[] = {"prelu"};
    mx_shape in[2] = {MX_SHAPE(8, 16, 5, 5), MX_SHAPE(5)}, out[1];
    int n_in, n_out;
    ck_assert_int_eq(opcheck_infer("LeakyReLU", k, v, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LeakyReLU: gamma has shape (5), expected (16) or (1)"));
    mx_shape none[2] = {{0}};
    ck_assert_int_eq(opcheck_infer("LeakyReLU", k, v, 1, none, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "LeakyReLU: the shape of data is unknown"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_leaky_relu");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, default_is_leaky_with_slope_quarter);
    tcase_add_test(tc, backward_in_place_keeps_gamma_gradient);
    tcase_add_test(tc, large_shapes_on_every_width);
    tcase_add_test(tc, results_do_not_depend_on_the_split);
    tcase_add_test(tc, elu_is_accurate_on_every_width);
    tcase_add_test(tc, bad_parameters_name_op_key_and_value);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
