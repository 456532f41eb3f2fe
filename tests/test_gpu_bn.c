/*
 * test_gpu_bn.c - the GPU kernels of Activation, BatchNorm, Dropout and
 * SoftmaxOutput against their CPU twins (support/gpucheck.h): every
 * parameter value the GPU supports, odd shapes, write/add/null requests.
 *
 * Dropout's GPU mask is drawn from Philox, not the CPU's generator, so
 * gpucheck compares only its deterministic cases (p = 0, in both modes);
 * the random mask is checked here on the host: the kept fraction within
 * 3 sigma of 1-p, kept elements scaled by exactly 1/(1-p), the mask output
 * equal to y / x, the same seed giving the same mask, and backward equal
 * to dy * mask.
 *
 * Without a GPU the kernels-present test still runs (CUDA builds) and the
 * rest return early.
 */
#include "device/device.h"
#include "support/gpucheck.h"
#ifdef MX_USE_CUDA
#include "device/cuda_worker.h"
#endif

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gpucheck_summary sum;

#define N_PARAMS(k) ((int)(sizeof(k) / sizeof((k)[0])))

/* ------------------------------------------------------------ present */

START_TEST(test_gpu_kernels_present)
{
    static const char *const ops[] = {"Activation", "BatchNorm", "Dropout", "SoftmaxOutput", NULL};
    for (int i = 0; ops[i]; i++) {
        const mx_op_def *op = mx_op_find(ops[i]);
        ck_assert_ptr_nonnull(op);
#ifdef MX_USE_CUDA
        ck_assert_msg(op->gpu && op->gpu->forward && op->gpu->backward, "%s has no GPU kernels", ops[i]);
#else
        ck_assert_ptr_null(op->gpu);
#endif
    }
}
END_TEST

/* ------------------------------------------------------------ Activation */

/* Data in [-25, 25) with NaN, +-inf-free edge values sprinkled in: relu of
 * NaN is 0 (MXNet), softrelu switches to x at 20. */
static void act_init(int index, float *d, int64_t n, uint64_t *rng)
{
    (void)index;
    static const float edges[] = {NAN, 20.0f, 20.000002f, 19.999998f, -20.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f};
    for (int64_t i = 0; i < n; i++) d[i] = (float)opcheck_uniform(rng, -25, 25);
    for (int64_t i = 0; i < n && i < 10; i++) d[i * 7 % n] = edges[i];
}

START_TEST(test_activation)
{
    if (!gpucheck_gpu_visible()) return;
    static const char *const types[] = {"relu", "sigmoid", "tanh", "softrelu", "softsign"};
    static const char *const keys[] = {"act_type"};
    const mx_shape shapes[] = {MX_SHAPE(3, 4, 7, 5), MX_SHAPE(1), MX_SHAPE(2, 3, 4, 5, 37)};
    for (int t = 0; t < 5; t++) {
        const char *values[] = {types[t]};
        for (int s = 0; s < 3; s++) {
            for (int wide = 0; wide < 2; wide++) {
                gpucheck_case c = {.op = "Activation", .keys = keys, .values = values, .n_params = 1,
                                   .in_shapes = {shapes[s]}, .init = wide ? act_init : NULL,
                                   .seed = 11 + (uint64_t)(t * 10 + s)};
                gpucheck_run(&c, &sum);
            }
        }
    }
}
END_TEST

/* ------------------------------------------------------------ BatchNorm */

/* data with a per-call offset and scale, gamma around 1, moving_var > 0. */
static void bn_init(int index, float *d, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        double u = opcheck_uniform(rng, -1, 1);
        switch (index) {
        case 0: d[i] = (float)(3.0 * u + 0.5); break;        /* data */
        case 1: d[i] = (float)(1.0 + 0.5 * u); break;        /* gamma */
        case 2: d[i] = (float)u; break;                      /* beta */
        case 3: d[i] = (float)(0.3 * u); break;              /* moving_mean */
        default: d[i] = (float)(1.0 + 0.5 * u); break;       /* moving_var */
        }
    }
}

START_TEST(test_batch_norm)
{
    if (!gpucheck_gpu_visible()) return;
    typedef struct {
        mx_shape shape;
        const char *axis, *fix_gamma, *use_global_stats, *eps, *momentum, *output_mean_var;
    } bn_case;
    const bn_case cases[] = {
        {MX_SHAPE(3, 4, 7, 5), "1", "True", "False", "0.001", "0.9", "False"},
        {MX_SHAPE(3, 4, 7, 5), "1", "False", "False", "0.001", "0.9", "False"},
        {MX_SHAPE(3, 4, 7, 5), "1", "False", "True", "0.001", "0.9", "False"},
        {MX_SHAPE(3, 4, 7, 5), "1", "True", "True", "1e-5", "0.5", "True"},
        {MX_SHAPE(3, 4, 7, 5), "1", "False", "False", "1e-5", "0.1", "True"},
        {MX_SHAPE(5, 6), "1", "False", "False", "0.001", "0.9", "False"},     /* (N, C) */
        {MX_SHAPE(3, 5, 7), "-1", "False", "False", "0.01", "0.9", "False"},  /* channels last */
        {MX_SHAPE(3, 5, 7), "0", "False", "False", "0.001", "0.9", "True"},   /* axis 0 */
        {MX_SHAPE(2, 3, 4, 5, 6), "1", "False", "False", "0.001", "0.9", "False"},
        {MX_SHAPE(2, 3, 4, 5, 6), "3", "False", "True", "0.001", "0.9", "False"},
        {MX_SHAPE(1, 3, 1, 1), "1", "False", "False", "0.001", "0.9", "False"}, /* one element per channel */
        {MX_SHAPE(2, 2, 40, 40), "1", "False", "False", "0.001", "0.9", "False"}, /* 3200 per channel */
        {MX_SHAPE(64, 3, 9, 9), "-3", "False", "False", "2e-5", "0.99", "False"},
    };
    static const char *const keys[] = {"axis", "fix_gamma", "use_global_stats", "eps", "momentum",
                                       "output_mean_var", "cudnn_off"};
    /* Each case twice: cuDNN's kernels (the default) and mxc's own. */
    for (int i = 0; i < N_PARAMS(cases); i++) {
        for (int own = 0; own < 2; own++) {
            const bn_case *b = &cases[i];
            const char *values[] = {b->axis,     b->fix_gamma,       b->use_global_stats,      b->eps,
                                    b->momentum, b->output_mean_var, own ? "True" : "False"};
            gpucheck_case c = {.op = "BatchNorm", .keys = keys, .values = values, .n_params = N_PARAMS(keys),
                               .in_shapes = {b->shape}, .init = bn_init, .seed = 100 + (uint64_t)i};
            gpucheck_run(&c, &sum);
        }
    }
}
END_TEST

/* ------------------------------------------------------------ Dropout */

/* gpucheck's cases: p = 0 (the identity in every pass, mask all 1s) in
 * both modes; the random cases are test_dropout_mask below. */
START_TEST(test_dropout_identity)
{
    if (!gpucheck_gpu_visible()) return;
    static const char *const keys[] = {"p", "mode"};
    static const char *const modes[] = {"training", "always"};
    const mx_shape shapes[] = {MX_SHAPE(3, 4, 7, 5), MX_SHAPE(1), MX_SHAPE(13, 257)};
    for (int m = 0; m < 2; m++)
        for (int s = 0; s < 3; s++) {
            const char *values[] = {"0", modes[m]};
            gpucheck_case c = {.op = "Dropout", .keys = keys, .values = values, .n_params = 2,
                               .in_shapes = {shapes[s]}, .seed = 200 + (uint64_t)(m * 3 + s)};
            gpucheck_run(&c, &sum);
        }
}
END_TEST

#ifdef MX_USE_CUDA
typedef struct drop_env {
    const mx_device_ops *dev;
    mx_cuda_worker *worker;
    mx_exec_ctx exec;
    mx_runtime *rt;
    mx_rng *rng;
    const mx_op_def *op;
    void *params;
} drop_env;

static void drop_env_open(drop_env *e, const char *p, const char *mode, uint64_t seed)
{
    e->dev = mx_device_get(MX_DEV_GPU);
    ck_assert_ptr_nonnull(e->dev);
    ck_assert_msg(mx_cuda_worker_create(0, &e->worker) == MX_OK, "%s", mx_last_error());
    e->exec = (mx_exec_ctx){.ctx = mx_gpu(0), .lane = MX_LANE_COMPUTE, .worker = 0, .stream = e->worker};
    ck_assert_int_eq(mx_runtime_create(NULL, &e->rt), MX_OK);
    ck_assert_int_eq(mx_rng_create(e->rt, seed, &e->rng), MX_OK);
    e->op = mx_op_find("Dropout");
    ck_assert_ptr_nonnull(e->op);
    e->params = calloc(1, e->op->params_size);
    const char *keys[] = {"p", "mode"}, *values[] = {p, mode};
    ck_assert_msg(mx_op_parse_params(e->op, keys, values, 2, e->params) == MX_OK, "%s", mx_last_error());
}

static void drop_env_close(drop_env *e)
{
    free(e->params);
    mx_rng_free(e->rng);
    mx_runtime_free(e->rt);
    mx_cuda_worker_destroy(e->worker);
}

static float *dev_alloc_copy(drop_env *e, const float *host, int64_t n)
{
    void *d = NULL;
    ck_assert_msg(e->dev->alloc(0, (size_t)n * sizeof(float), &d) == MX_OK, "%s", mx_last_error());
    if (host)
        ck_assert_msg(e->dev->copy(d, mx_gpu(0), host, mx_cpu(), (size_t)n * sizeof(float), e->worker) == MX_OK,
                      "%s", mx_last_error());
    return d;
}

static void dev_to_host(drop_env *e, float *host, const float *d, int64_t n)
{
    ck_assert_msg(e->dev->copy(host, mx_cpu(), d, mx_gpu(0), (size_t)n * sizeof(float), e->worker) == MX_OK, "%s",
                  mx_last_error());
}

/* One GPU forward (and backward with the given request) of Dropout on x;
 * y, mask, dx (host, n each) receive the results. dx_init: dx's contents
 * before backward (for add). */
static void drop_run(drop_env *e, bool train, const float *x, const float *dy, const float *dx_init, mx_req bwd_req,
                     float *y, float *mask, float *dx, int64_t n)
{
    mx_shape s = MX_SHAPE(n);
    float *x_d = dev_alloc_copy(e, x, n), *y_d = dev_alloc_copy(e, NULL, n), *m_d = dev_alloc_copy(e, NULL, n);
    float *dy_d = dev_alloc_copy(e, dy, n), *g_d = dev_alloc_copy(e, dx_init, n);
    mx_tensor in = {x_d, s, MX_FLOAT32, mx_gpu(0), 0};
    mx_tensor out[2] = {{y_d, s, MX_FLOAT32, mx_gpu(0), 0}, {m_d, s, MX_FLOAT32, mx_gpu(0), 0}};
    mx_tensor og[2] = {{dy_d, s, MX_FLOAT32, mx_gpu(0), 0}, {NULL, s, MX_FLOAT32, mx_gpu(0), 0}};
    mx_tensor ig = {g_d, s, MX_FLOAT32, mx_gpu(0), 0};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    mx_op_ctx ctx = {.exec = &e->exec, .is_train = train, .rng = e->rng};
    ck_assert_msg(e->op->gpu->forward(&ctx, e->params, &in, req, out, NULL) == MX_OK, "%s", mx_last_error());
    mx_req breq[1] = {bwd_req};
    ck_assert_msg(e->op->gpu->backward(&ctx, e->params, og, &in, out, breq, &ig, NULL) == MX_OK, "%s",
                  mx_last_error());
    ck_assert_msg(mx_cuda_worker_sync(e->worker) == MX_OK, "%s", mx_last_error());
    dev_to_host(e, y, y_d, n);
    dev_to_host(e, mask, m_d, n);
    dev_to_host(e, dx, g_d, n);
    e->dev->free(0, x_d);
    e->dev->free(0, y_d);
    e->dev->free(0, m_d);
    e->dev->free(0, dy_d);
    e->dev->free(0, g_d);
}

static void drop_check(const char *p_text, double p, const char *mode, bool train, mx_req bwd_req)
{
    enum { N = 40000 };
    float *x = malloc(N * sizeof(float)), *dy = malloc(N * sizeof(float)), *dx0 = malloc(N * sizeof(float));
    float *y = malloc(N * sizeof(float)), *mask = malloc(N * sizeof(float)), *dx = malloc(N * sizeof(float));
    float *y2 = malloc(N * sizeof(float)), *mask2 = malloc(N * sizeof(float)), *dx2 = malloc(N * sizeof(float));
    uint64_t r = 99;
    for (int64_t i = 0; i < N; i++) {
        x[i] = (float)opcheck_uniform(&r, 0.5, 1.5); /* never 0: kept elements show */
        dy[i] = (float)opcheck_uniform(&r, -1, 1);
        dx0[i] = (float)opcheck_uniform(&r, -1, 1);
    }
    drop_env e;
    drop_env_open(&e, p_text, mode, 1234);
    drop_run(&e, train, x, dy, dx0, bwd_req, y, mask, dx, N);
    const bool active = p > 0 && (train || !strcmp(mode, "always"));
    const double keep = 1.0 - p;
    const float scale = keep > 0 ? (float)(1.0 / keep) : 0.0f;
    int64_t kept = 0;
    for (int64_t i = 0; i < N; i++) {
        const float m = active ? mask[i] : 1.0f;
        if (!active) {
            ck_assert_msg(mask[i] == 1.0f, "Dropout identity: mask[%lld] = %g", (long long)i, mask[i]);
            ck_assert_msg(y[i] == x[i], "Dropout identity: y[%lld] = %g, x %g", (long long)i, y[i], x[i]);
        } else {
            ck_assert_msg(mask[i] == 0.0f || mask[i] == scale, "Dropout p=%s: mask[%lld] = %.9g, not 0 or %.9g",
                          p_text, (long long)i, mask[i], scale);
            ck_assert_msg(y[i] == x[i] * mask[i], "Dropout p=%s: y[%lld] = %.9g, x * mask %.9g", p_text,
                          (long long)i, y[i], x[i] * mask[i]);
            kept += mask[i] != 0.0f;
        }
        const float want = bwd_req == MX_REQ_ADD ? dx0[i] + dy[i] * m : dy[i] * m;
        ck_assert_msg(dx[i] == want, "Dropout p=%s backward: dx[%lld] = %.9g, want %.9g", p_text, (long long)i, dx[i],
                      want);
    }
    if (active) {
        const double frac = (double)kept / N, sigma = sqrt(keep * p / N);
        ck_assert_msg(fabs(frac - keep) <= 3 * sigma + 1e-12, "Dropout p=%s: kept %.5f, expected %.5f +- %.5f",
                      p_text, frac, keep, 3 * sigma);
        printf("Dropout p=%s mode=%s: kept %.5f of %d (expected %.5f, 3 sigma %.5f)\n", p_text, mode, frac, N, keep,
               3 * sigma);
        /* The same seed gives the same mask; the next draw a different one. */
        drop_env e2;
        drop_env_open(&e2, p_text, mode, 1234);
        drop_run(&e2, train, x, dy, dx0, bwd_req, y2, mask2, dx2, N);
        ck_assert_msg(!memcmp(mask, mask2, N * sizeof(float)), "Dropout p=%s: same seed, different masks", p_text);
        drop_run(&e2, train, x, dy, dx0, bwd_req, y2, mask2, dx2, N);
        if (p > 0 && p < 1)
            ck_assert_msg(memcmp(mask, mask2, N * sizeof(float)), "Dropout p=%s: the second draw repeated the first",
                          p_text);
        drop_env_close(&e2);
    }
    drop_env_close(&e);
    float *bufs[] = {x, dy, dx0, y, mask, dx, y2, mask2, dx2};
    for (int i = 0; i < 9; i++) free(bufs[i]);
}
#endif

START_TEST(test_dropout_mask)
{
    if (!gpucheck_gpu_visible()) return;
#ifdef MX_USE_CUDA
    drop_check("0.5", 0.5, "training", true, MX_REQ_WRITE);
    drop_check("0.3", 0.3, "training", true, MX_REQ_ADD);
    drop_check("0.9", 0.9, "always", true, MX_REQ_WRITE);
    drop_check("0.25", 0.25, "always", false, MX_REQ_ADD); /* always: active in inference too */
    drop_check("0.5", 0.5, "training", false, MX_REQ_WRITE); /* inference: the identity */
    drop_check("0.5", 0.5, "training", false, MX_REQ_ADD);
    drop_check("1", 1.0, "training", true, MX_REQ_WRITE);     /* drops everything */
#endif
}
END_TEST

/* ------------------------------------------------------------ SoftmaxOutput */

/* Labels: classes in [0, so_k) (some fractional, truncated), some set to
 * so_ignore; or probabilities when so_prob. data in [-4, 4). */
static int64_t so_k;
static double so_ignore;
static bool so_prob;
static double so_ignore_frac = 0.2;

static void so_init(int index, float *d, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        double u = opcheck_uniform(rng, 0, 1);
        if (index == 0) d[i] = (float)(8 * u - 4);
        else if (so_prob) d[i] = (float)u;
        else if (u < so_ignore_frac) d[i] = (float)so_ignore;
        else
            d[i] = (float)((double)(int64_t)((u - so_ignore_frac) / (1 - so_ignore_frac) * (double)so_k) +
                           (i % 3 == 0 ? 0.5 : 0.0));
    }
}

START_TEST(test_softmax_output)
{
    if (!gpucheck_gpu_visible()) return;
    typedef struct {
        mx_shape data, label; /* label ndim 0: inferred */
        int64_t k;            /* classes, for the labels */
        bool prob;
        const char *multi_output, *preserve_shape, *use_ignore, *ignore_label, *normalization, *grad_scale,
            *smooth_alpha, *out_grad;
    } so_case;
    const so_case cases[] = {
        {MX_SHAPE(3, 10), {0}, 10, false, "0", "0", "0", "-1", "null", "1", "0", "0"},
        {MX_SHAPE(3, 10), {0}, 10, false, "0", "0", "1", "-1", "null", "1", "0", "0"},
        {MX_SHAPE(7, 13), {0}, 13, false, "0", "0", "1", "2", "batch", "0.5", "0", "0"},
        {MX_SHAPE(7, 13), {0}, 13, false, "0", "0", "1", "-1", "valid", "2", "0.1", "0"},
        {MX_SHAPE(7, 13), {0}, 13, false, "0", "0", "0", "-1", "valid", "1", "0", "1"},
        {MX_SHAPE(3, 4, 5), {0}, 20, false, "0", "0", "0", "-1", "batch", "1", "0.2", "1"}, /* rows of 4*5 */
        {MX_SHAPE(3, 4, 7), {0}, 7, false, "0", "1", "1", "3", "valid", "1", "0", "0"},      /* preserve_shape */
        {MX_SHAPE(3, 4, 7), {0}, 7, false, "0", "1", "0", "-1", "batch", "1.5", "0.05", "1"},
        {MX_SHAPE(3, 5, 7, 5), {0}, 5, false, "1", "0", "0", "-1", "null", "1", "0", "0"},   /* label (3, 35) */
        {MX_SHAPE(3, 5, 7, 5), MX_SHAPE(3, 7, 5), 5, false, "1", "0", "1", "-1", "batch", "1", "0", "0"},
        {MX_SHAPE(3, 5, 7, 5), MX_SHAPE(3, 1, 7, 5), 5, false, "1", "0", "1", "0", "valid", "0.7", "0.3", "1"},
        {MX_SHAPE(2, 1, 3), {0}, 1, false, "1", "0", "0", "-1", "batch", "1", "0.5", "0"},  /* one class */
        {MX_SHAPE(4, 6), MX_SHAPE(4, 6), 6, true, "0", "0", "0", "-1", "null", "0.5", "0", "0"}, /* probabilities */
        {MX_SHAPE(4, 6), MX_SHAPE(4, 6), 6, true, "0", "0", "0", "-1", "valid", "1", "0", "1"},
        {MX_SHAPE(3, 1000), {0}, 1000, false, "0", "0", "1", "-1", "valid", "1", "0", "0"},
    };
    static const char *const keys[] = {"multi_output", "preserve_shape", "use_ignore", "ignore_label",
                                       "normalization", "grad_scale", "smooth_alpha", "out_grad"};
    for (int i = 0; i < N_PARAMS(cases); i++) {
        const so_case *s = &cases[i];
        const char *values[] = {s->multi_output, s->preserve_shape, s->use_ignore, s->ignore_label,
                                s->normalization, s->grad_scale, s->smooth_alpha, s->out_grad};
        so_k = s->k;
        so_ignore = atof(s->ignore_label);
        so_prob = s->prob;
        gpucheck_case c = {.op = "SoftmaxOutput", .keys = keys, .values = values, .n_params = N_PARAMS(keys),
                           .in_shapes = {s->data, s->label}, .init = so_init, .seed = 300 + (uint64_t)i};
        gpucheck_run(&c, &sum);
    }
    /* Every label ignored under valid: the count is 0 and the divisor 1
     * (with and without use_ignore). */
    so_k = 4;
    so_ignore = 1;
    so_prob = false;
    so_ignore_frac = 1.0;
    static const char *const vkeys[] = {"use_ignore", "ignore_label", "normalization"};
    for (int u = 0; u < 2; u++) {
        const char *vvalues[] = {u ? "1" : "0", "1", "valid"};
        gpucheck_case all = {.op = "SoftmaxOutput", .keys = vkeys, .values = vvalues, .n_params = 3,
                             .in_shapes = {MX_SHAPE(3, 4)}, .init = so_init, .seed = 399};
        gpucheck_run(&all, &sum);
    }
    so_ignore_frac = 0.2;
}
END_TEST

static void tests_everywhere(TCase *tc)
{
    tcase_add_test(tc, test_gpu_kernels_present);
}

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, test_activation);
    tcase_add_test(tc, test_batch_norm);
    tcase_add_test(tc, test_dropout_identity);
    tcase_add_test(tc, test_dropout_mask);
    tcase_add_test(tc, test_softmax_output);
}

int main(void)
{
    return gpucheck_main("bn", tests_everywhere, tests_on_gpu, 300, &sum);
}
