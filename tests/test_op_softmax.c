/* test_op_softmax.c - softmax and log_softmax against a float64 reference,
 * over every axis position, with temperature and (softmax) length masks. */
#include "parallel/parallel.h"
#include "support/opcheck.h"
#include "support/oprun.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_op;
static int64_t g_axis_len; /* length of the softmax axis, for the length init */

static const void *field(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find(g_op);
    return (const char *)params + mx_op_param(op, name)->offset;
}

static void sm_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                   const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_shape *d = &in_shapes[0];
    int64_t axis = *(const int64_t *)field(params, "axis");
    if (axis < 0) axis += d->ndim;
    const char *temp = field(params, "temperature");
    double t = strcmp(temp, "None") ? atof(temp) : 1.0;
    bool use_length = *(const bool *)field(params, "use_length");
    bool logsm = !strcmp(g_op, "log_softmax");
    int64_t outer = 1, inner = 1, n = d->dims[axis];
    for (int i = 0; i < axis; i++) outer *= d->dims[i];
    for (int i = (int)axis + 1; i < d->ndim; i++) inner *= d->dims[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < inner; s++) {
            int64_t len = n;
            if (use_length) len = (int64_t)in[1][o * inner + s];
            const double *x = in[0] + o * n * inner + s;
            double *y = out[0] + o * n * inner + s;
            double sum = 0;
            for (int64_t j = 0; j < len; j++) sum += exp(x[j * inner] / t);
            for (int64_t j = 0; j < n; j++)
                y[j * inner] = j >= len ? 0 : logsm ? x[j * inner] / t - log(sum) : exp(x[j * inner] / t) / sum;
        }
}

/* Data in [-2, 2); lengths are whole numbers 0 .. axis length. */
static void sm_init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++)
        data[i] = index == 0 ? (float)opcheck_uniform(rng, -2, 2)
                             : (float)(int64_t)opcheck_uniform(rng, 0, (double)g_axis_len + 1);
}

static void run(const char *op, mx_shape data, const char *axis, const char *temp, bool use_length, uint64_t seed)
{
    g_op = op;
    int64_t a = atoi(axis);
    g_axis_len = data.dims[a < 0 ? a + data.ndim : a];
    const char *keys[] = {"axis", "temperature", "use_length"};
    const char *values[] = {axis, temp, use_length ? "True" : "False"};
    opcheck_case c = {.op = op, .keys = keys, .values = values, .n_params = 3, .ref = sm_ref, .init = sm_init,
                      .skip_grad = 2, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(softmax_against_reference)
{
    const char *ops[] = {"softmax", "log_softmax"};
    for (int k = 0; k < 2; k++) {
        uint64_t s = 1000 * (uint64_t)k;
        run(ops[k], MX_SHAPE(4, 7), "-1", "None", false, s + 1);
        run(ops[k], MX_SHAPE(3, 5, 2), "1", "None", false, s + 2);     /* strided */
        run(ops[k], MX_SHAPE(2, 3, 300), "1", "2.5", false, s + 3);   /* more positions than one chunk */
        run(ops[k], MX_SHAPE(6, 4), "0", "0.5", false, s + 4);
        run(ops[k], MX_SHAPE(2, 3, 4, 5), "-2", "None", false, s + 5);
        run(ops[k], MX_SHAPE(9), "0", "-1.5", false, s + 6);          /* negative temperature is allowed */
        run(ops[k], MX_SHAPE(1, 1), "1", "None", false, s + 7);
        run(ops[k], MX_SHAPE(17, 33), "1", "1", false, s + 8);
    }
}
END_TEST

START_TEST(softmax_with_length)
{
    run("softmax", MX_SHAPE(5, 6), "-1", "None", true, 21);
    run("softmax", MX_SHAPE(2, 5, 3), "1", "2", true, 22);
    run("softmax", MX_SHAPE(4, 3, 2), "0", "None", true, 23);
    mx_shape in[2] = {MX_SHAPE(2, 5, 3)}, out[1];
    int n_in, n_out;
    const char *k[] = {"axis", "use_length"}, *v[] = {"1", "1"};
    ck_assert_int_eq(opcheck_infer("softmax", k, v, 2, in, &n_in, out, &n_out), MX_OK);
    ck_assert_int_eq(n_in, 2);
    ck_assert_int_eq(in[1].ndim, 2);
    ck_assert(in[1].dims[0] == 2 && in[1].dims[1] == 3);
    in[1] = MX_SHAPE(2, 5);
    ck_assert_int_eq(opcheck_infer("softmax", k, v, 2, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "softmax: length has shape (2,5), expected (2,3)"));

    /* Entries past the length are written as 0 over whatever was there;
     * an int32 length works too (MXNet's lengths are integers). */
    const mx_op_def *op = mx_op_find("softmax");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k2[] = {"use_length"}, *v2[] = {"True"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_OK);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    int32_t len[2] = {2, 0};
    mx_tensor tin[2] = {{x, MX_SHAPE(2, 4), MX_FLOAT32, mx_cpu(), 0}, {len, MX_SHAPE(2), MX_INT32, mx_cpu(), 0}};
    mx_tensor tout = {y, MX_SHAPE(2, 4), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, tin, req, &tout, NULL), MX_OK);
    ck_assert(fabsf(y[0] - 0.26894142f) < 1e-6f && fabsf(y[1] - 0.73105858f) < 1e-6f);
    for (int i = 2; i < 8; i++) ck_assert_msg(y[i] == 0.0f, "y[%d] = %g", i, y[i]);
}
END_TEST

/* Sizes split across the kernel pool (over 32K elements): rows, several
 * chunks of lanes per outer index, and lengths. */
START_TEST(large_shapes_split_across_threads)
{
    const char *ops[] = {"softmax", "log_softmax"};
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++) {
            mx_shape shapes[] = {MX_SHAPE(300, 130), MX_SHAPE(3, 7, 1700), MX_SHAPE(40, 30, 31)};
            const char *axes[] = {"-1", "1", "1"};
            bool len = c == 2 && k == 0;
            g_op = ops[k];
            g_axis_len = shapes[c].dims[1]; /* the lengths case: axis 1 */
            const char *keys[] = {"axis", "temperature", "use_length"};
            const char *values[] = {axes[c], "1.5", len ? "True" : "False"};
            opcheck_case oc = {.op = ops[k], .keys = keys, .values = values, .n_params = 3, .ref = sm_ref,
                               .init = sm_init, .skip_grad = 2, .seed = 3000 + (uint64_t)(10 * k + c),
                               .max_points = 24};
            oc.in_shapes[0] = shapes[c];
            opcheck_run(&oc);
        }
}
END_TEST

/* Forward then backward (write) on `pool`; y followed by dx. */
static float *run_on_pool(const char *op_name, mx_shape d, const char *axis, const float *x, const float *dy,
                          mx_threadpool *pool)
{
    const mx_op_def *op = mx_op_find(op_name);
    _Alignas(16) char params[16384];
    const char *k[] = {"axis"}, *v[] = {axis};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    int64_t n = mx_shape_size(&d);
    float *r = malloc(sizeof(float) * (size_t)(2 * n));
    mx_tensor tx = {.data = (void *)x, .shape = d}, ty = {.data = r, .shape = d};
    mx_tensor tdy = {.data = (void *)dy, .shape = d}, tdx = {.data = r + n, .shape = d};
    mx_req req[1] = {MX_REQ_WRITE};
    mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pool};
    mx_op_ctx ctx = {.exec = &exec, .is_train = true};
    ck_assert_int_eq(op->forward(&ctx, params, &tx, req, &ty, NULL), MX_OK);
    ck_assert_int_eq(op->backward(&ctx, params, &tdy, &tx, &ty, req, &tdx, NULL), MX_OK);
    return r;
}

/* Bit for bit the same on 1, 2 and 3 threads. */
START_TEST(results_do_not_depend_on_the_split)
{
    const char *ops[] = {"softmax", "log_softmax"};
    mx_shape shapes[] = {MX_SHAPE(300, 130), MX_SHAPE(3, 7, 1700)};
    const char *axes[] = {"-1", "1"};
    mx_threadpool *p2, *p3;
    ck_assert_int_eq(mx_threadpool_create(2, &p2), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(3, &p3), MX_OK);
    for (int c = 0; c < 2; c++) {
        int64_t n = mx_shape_size(&shapes[c]);
        float *x = malloc(sizeof(float) * (size_t)n), *dy = malloc(sizeof(float) * (size_t)n);
        uint64_t rng = 9 + (uint64_t)c;
        for (int64_t i = 0; i < n; i++) {
            x[i] = (float)opcheck_uniform(&rng, -3, 3);
            dy[i] = (float)opcheck_uniform(&rng, -1, 1);
        }
        for (int k = 0; k < 2; k++) {
            float *r1 = run_on_pool(ops[k], shapes[c], axes[c], x, dy, NULL);
            float *r2 = run_on_pool(ops[k], shapes[c], axes[c], x, dy, p2);
            float *r3 = run_on_pool(ops[k], shapes[c], axes[c], x, dy, p3);
            ck_assert_msg(!memcmp(r1, r2, sizeof(float) * (size_t)(2 * n)) &&
                              !memcmp(r1, r3, sizeof(float) * (size_t)(2 * n)),
                          "%s, case %d: results differ with the thread count", ops[k], c);
            free(r1), free(r2), free(r3);
        }
        free(x), free(dy);
    }
    mx_threadpool_free(p2);
    mx_threadpool_free(p3);
}
END_TEST

/* Forward and backward in place give what they give out of place. */
START_TEST(in_place_matches)
{
    const char *ops[] = {"softmax", "log_softmax"};
    enum { A = 3, B = 4, C = 270 };
    static float x[A * B * C], y[A * B * C], dy[A * B * C], dx[A * B * C], buf[A * B * C];
    for (int k = 0; k < 2; k++)
        for (int axis = 0; axis < 3; axis++) {
            const mx_op_def *op = mx_op_find(ops[k]);
            _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
            char ax[16];
            snprintf(ax, sizeof(ax), "%d", axis);
            const char *kk[] = {"axis", "temperature"}, *vv[] = {ax, "0.8"};
            ck_assert_int_eq(mx_op_parse_params(op, kk, vv, 2, params), MX_OK);
            uint64_t rng = 9 + (uint64_t)axis;
            for (int i = 0; i < A * B * C; i++) {
                x[i] = (float)opcheck_uniform(&rng, -3, 3);
                dy[i] = (float)opcheck_uniform(&rng, -1, 1);
            }
            mx_shape s = MX_SHAPE(A, B, C);
            mx_tensor tin = {x, s, MX_FLOAT32, mx_cpu(), 0}, tout = {y, s, MX_FLOAT32, mx_cpu(), 0};
            mx_tensor tg = {dy, s, MX_FLOAT32, mx_cpu(), 0}, tdx = {dx, s, MX_FLOAT32, mx_cpu(), 0};
            mx_exec_ctx exec = {.ctx = mx_cpu()};
            mx_op_ctx ctx = {.exec = &exec};
            mx_req req[1] = {MX_REQ_WRITE};
            ck_assert_int_eq(op->forward(&ctx, params, &tin, req, &tout, NULL), MX_OK);
            ck_assert_int_eq(op->backward(&ctx, params, &tg, &tin, &tout, req, &tdx, NULL), MX_OK);
            /* req add accumulates what write writes */
            for (int i = 0; i < A * B * C; i++) buf[i] = 1.0f;
            mx_tensor tacc = {buf, s, MX_FLOAT32, mx_cpu(), 0};
            req[0] = MX_REQ_ADD;
            ck_assert_int_eq(op->forward(&ctx, params, &tin, req, &tacc, NULL), MX_OK);
            for (int i = 0; i < A * B * C; i++) ck_assert(fabsf(buf[i] - 1.0f - y[i]) <= 2e-7f + 1e-6f * fabsf(y[i]));
            memcpy(buf, x, sizeof(buf));
            mx_tensor tb = {buf, s, MX_FLOAT32, mx_cpu(), 0};
            req[0] = MX_REQ_INPLACE;
            ck_assert_int_eq(op->forward(&ctx, params, &tb, req, &tb, NULL), MX_OK);
            for (int i = 0; i < A * B * C; i++) ck_assert_float_eq(buf[i], y[i]);
            memcpy(buf, dy, sizeof(buf));
            ck_assert_int_eq(op->backward(&ctx, params, &tb, &tin, &tout, req, &tb, NULL), MX_OK);
            for (int i = 0; i < A * B * C; i++) ck_assert_float_eq(buf[i], dx[i]);
        }
}
END_TEST

/* Inputs far apart stay finite (the max is subtracted first). */
START_TEST(large_inputs_stay_finite)
{
    const mx_op_def *op = mx_op_find("log_softmax");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    float x[4] = {1000, -1000, 0, 999}, y[4];
    mx_tensor tin = {x, MX_SHAPE(1, 4), MX_FLOAT32, mx_cpu(), 0}, tout = {y, MX_SHAPE(1, 4), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, &tin, req, &tout, NULL), MX_OK);
    ck_assert(fabsf(y[0] + 0.3132617f) < 1e-5f && isfinite(y[1]) && fabsf(y[3] + 1.3132617f) < 1e-5f);
}
END_TEST

/* The vectorised exp over the whole useful range: softmax and log_softmax
 * of rows spanning [-86, 0] (and add-accumulation) against libm in double,
 * well inside the float rounding of the reference. */
START_TEST(exp_accuracy_over_range)
{
    enum { N = 4003 };
    static float x[N], y[N], z[N];
    for (int i = 0; i < N; i++) x[i] = -86.0f * (float)i / (N - 1) + (i % 7) * 1e-3f;
    x[17] = 0.5f; /* the max, not at the start */
    double sum = 0;
    for (int i = 0; i < N; i++) sum += exp((double)x[i] - 0.5);
    const char *ops[] = {"softmax", "log_softmax"};
    for (int k = 0; k < 2; k++) {
        const mx_op_def *op = mx_op_find(ops[k]);
        _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
        ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
        mx_tensor tin = {x, MX_SHAPE(1, N), MX_FLOAT32, mx_cpu(), 0}, tout = {y, MX_SHAPE(1, N), MX_FLOAT32, mx_cpu(), 0};
        mx_exec_ctx exec = {.ctx = mx_cpu()};
        mx_op_ctx ctx = {.exec = &exec};
        mx_req req[1] = {MX_REQ_WRITE};
        ck_assert_int_eq(op->forward(&ctx, params, &tin, req, &tout, NULL), MX_OK);
        for (int i = 0; i < N; i++) z[i] = 1.0f;
        tout.data = z;
        req[0] = MX_REQ_ADD;
        ck_assert_int_eq(op->forward(&ctx, params, &tin, req, &tout, NULL), MX_OK);
        for (int i = 0; i < N; i++) {
            double want = k == 0 ? exp((double)x[i] - 0.5) / sum : (double)x[i] - 0.5 - log(sum);
            /* x - max is rounded to float first: up to |x - max| * 2^-24 of
             * argument error, i.e. that much relative error in exp. */
            double arg_err = fabs((double)x[i] - 0.5) * 0x1p-24;
            double tol = k == 0 ? (1e-6 + arg_err) * want + 1e-44 : 1e-6 * fabs(want) + arg_err + 1e-6;
            ck_assert_msg(fabs(y[i] - want) <= tol, "%s(x[%d] = %g) = %.9g, want %.9g", ops[k], i, x[i], y[i], want);
            ck_assert_msg(fabs(z[i] - 1.0 - want) <= tol + 1.2e-7, "%s add [%d]", ops[k], i);
        }
    }
}
END_TEST

START_TEST(bad_parameters)
{
    mx_shape in[2] = {MX_SHAPE(2, 3)}, out[1];
    int n_in, n_out;
    const char *k1[] = {"axis"}, *v1[] = {"2"};
    ck_assert_int_eq(opcheck_infer("softmax", k1, v1, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "softmax: parameter 'axis' has value 2, out of range for data of shape (2,3)"));
    const char *v1b[] = {"-3"};
    ck_assert_int_eq(opcheck_infer("log_softmax", k1, v1b, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "log_softmax: parameter 'axis' has value -3"));

    const mx_op_def *op = mx_op_find("softmax");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k2[] = {"temperature"}, *v2[] = {"warm"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "softmax: parameter 'temperature' has bad value 'warm'"));
    const char *v3[] = {"0"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v3, 1, params), MX_ERR_INVALID);
    const char *k4[] = {"dtype"}, *v4[] = {"float64"};
    ck_assert_int_eq(mx_op_parse_params(op, k4, v4, 1, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'dtype' value 'float64' is not supported"));
    const char *v5[] = {"float32"};
    ck_assert_int_eq(mx_op_parse_params(op, k4, v5, 1, params), MX_OK);
    const char *k6[] = {"use_length"}, *v6[] = {"True"};
    ck_assert_int_eq(mx_op_parse_params(mx_op_find("log_softmax"), k6, v6, 1, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "log_softmax: parameter 'use_length'"));
    const char *k7[] = {"axes"}, *v7[] = {"1"};
    ck_assert_int_eq(mx_op_parse_params(op, k7, v7, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'axis'"));
    char buf[64];
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_OK);
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "temperature"), params, buf, sizeof(buf)), "None");
    ck_assert_str_eq(mx_op_format_param(mx_op_param(op, "axis"), params, buf, sizeof(buf)), "-1");
    /* softmax here is MXNet's plain op, never the SoftmaxOutput loss layer. */
    ck_assert_int_eq(op->flags & MX_OP_LOSS, 0);
}
END_TEST

/* Issue 17: axis and temperature as MXNet 1.9.1 applies them, forward and
 * backward. Computed once in the venv with
 *   x = arange(12).reshape(2,3,2)/4 - 1; h = (arange(12).reshape(2,3,2) % 5)/3 - 0.5
 *   y = mx.nd.<op>(x, axis=-2, temperature=2.5); y.backward(h) -> y, x.grad */
START_TEST(mxnet_axis_and_temperature)
{
    float x[12], h[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i / 4.0f - 1.0f, h[i] = (float)(i % 5) / 3.0f - 0.5f;
    const double want[2][2][12] = {
        {{0.2693075, 0.2693075, 0.3289329, 0.3289329, 0.40175956, 0.40175956, 0.2693075, 0.2693075, 0.3289329,
          0.3289329, 0.40175956, 0.40175956},
         {-0.08132742, -0.009196179, -0.011618087, 0.076483205, 0.09294552, -0.06728703, -0.009196179, -0.009196179,
          0.076483205, 0.076483205, -0.06728703, -0.067287035}},
        {{-1.3119015, -1.3119015, -1.1119015, -1.1119015, -0.9119015, -0.9119015, -1.3119015, -1.3119015, -1.1119015,
          -1.1119015, -0.9119015, -0.9119015},
         {-0.2538615, -0.04871283, 0.000880092, 0.22192886, 0.25298142, -0.17321603, -0.04871283, -0.023102492,
          0.22192886, 0.22368903, -0.17321603, -0.20058651}}};
    const char *ops[] = {"softmax", "log_softmax"}, *k[] = {"axis", "temperature"}, *v[] = {"-2", "2.5"};
    mx_shape s = MX_SHAPE(2, 3, 2);
    const float *in[] = {x}, *head[] = {h};
    for (int o = 0; o < 2; o++) {
        oprun r;
        ck_assert_msg(oprun_forward(&r, ops[o], k, v, 2, 1, &s, in) == MX_OK, "%s", mx_last_error());
        ck_assert_msg(oprun_backward(&r, ops[o], k, v, 2, in, head) == MX_OK, "%s", mx_last_error());
        for (int i = 0; i < 12; i++) {
            ck_assert_msg(fabs(r.out[0][i] - want[o][0][i]) < 1e-6, "%s y[%d] %g vs %g", ops[o], i, r.out[0][i],
                          want[o][0][i]);
            ck_assert_msg(fabs(r.in_grad[0][i] - want[o][1][i]) < 1e-6, "%s dx[%d] %g vs %g", ops[o], i,
                          r.in_grad[0][i], want[o][1][i]);
        }
        oprun_free(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_softmax");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, softmax_against_reference);
    tcase_add_test(tc, softmax_with_length);
    tcase_add_test(tc, large_shapes_split_across_threads);
    tcase_add_test(tc, results_do_not_depend_on_the_split);
    tcase_add_test(tc, in_place_matches);
    tcase_add_test(tc, large_inputs_stay_finite);
    tcase_add_test(tc, exp_accuracy_over_range);
    tcase_add_test(tc, bad_parameters);
    tcase_add_test(tc, mxnet_axis_and_temperature);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
