/* gpucheck.c - GPU kernels against their CPU twins (see gpucheck.h). */
#include "gpucheck.h"

#include "device/device.h"
#ifdef MX_USE_CUDA
#include "device/cuda_worker.h"
#endif

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool gpucheck_gpu_visible(void)
{
#ifdef MX_USE_CUDA
    const mx_device_ops *gpu = mx_device_get(MX_DEV_GPU);
    bool visible = gpu && gpu->count() > 0;
    /* Asking initialised CUDA in this process, and a CUDA context does
     * not survive fork(): Check must run the tests in this process
     * (Check reads CK_FORK when the runner starts). */
    if (visible) setenv("CK_FORK", "no", 1);
    return visible;
#else
    return false;
#endif
}

void gpucheck_print_summary(const char *suite, const gpucheck_summary *sum)
{
    printf("GPU consistency (%s): %d cases, %d comparisons, worst %.3g of tolerance%s%s%s\n", suite, sum->cases,
           sum->comparisons, sum->worst_rel, sum->worst_op[0] ? " (" : "", sum->worst_op,
           sum->worst_op[0] ? ")" : "");
}

int gpucheck_main(const char *name, void (*everywhere)(TCase *tc), void (*on_gpu)(TCase *tc), int timeout_s,
                  const gpucheck_summary *sum)
{
    char suite_name[64];
    snprintf(suite_name, sizeof(suite_name), "gpu_%s", name);
    Suite *s = suite_create(suite_name);
    if (everywhere) {
        TCase *tc = tcase_create("everywhere");
        everywhere(tc);
        suite_add_tcase(s, tc);
    }
    /* Asking sets CK_FORK=no where a GPU is found: a CUDA context does not
     * survive fork, and the summary adds up across tests in one process. */
    const bool gpu = gpucheck_gpu_visible();
    if (gpu && on_gpu) {
        TCase *tc = tcase_create("gpu");
        tcase_set_timeout(tc, timeout_s);
        on_gpu(tc);
        suite_add_tcase(s, tc);
    }
    if (!gpu) printf("GPU tests: SKIPPED (no GPU visible)\n");
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (gpu && sum) gpucheck_print_summary(name, sum);
    return failed ? 1 : 0;
}

#ifdef MX_USE_CUDA

/* A float that no kernel computes: outputs start as this so an element a
 * kernel forgets shows; a NULL request must leave it. */
static const float POISON = -7.77e30f;

typedef struct gpu_env {
    const mx_device_ops *dev;
    mx_cuda_worker *worker;
    mx_exec_ctx exec;
} gpu_env;

static float *dev_upload(gpu_env *g, const float *host, int64_t n)
{
    void *d = NULL;
    ck_assert_msg(g->dev->alloc(0, (size_t)(n ? n : 1) * sizeof(float), &d) == MX_OK, "gpucheck: %s",
                  mx_last_error());
    if (n) ck_assert_msg(g->dev->copy(d, mx_gpu(0), host, mx_cpu(), (size_t)n * sizeof(float), g->worker) == MX_OK,
                         "gpucheck: upload: %s", mx_last_error());
    return d;
}

static void dev_download(gpu_env *g, float *host, const float *d, int64_t n)
{
    if (n) ck_assert_msg(g->dev->copy(host, mx_cpu(), d, mx_gpu(0), (size_t)n * sizeof(float), g->worker) == MX_OK,
                         "gpucheck: download: %s", mx_last_error());
}

static float *host_copy(const float *src, int64_t n)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    ck_assert(p != NULL);
    if (n) memcpy(p, src, (size_t)n * sizeof(float));
    return p;
}

static float *host_fill(float v, int64_t n)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    ck_assert(p != NULL);
    for (int64_t i = 0; i < n; i++) p[i] = v;
    return p;
}

/* Compares a GPU result with the CPU's; both NaN agree (an op may make
 * NaN on purpose, relu of NaN aside). */
static void compare(const gpucheck_case *c, gpucheck_summary *sum, const char *what, const float *cpu,
                    const float *gpu, int64_t n)
{
    double rtol = c->rtol > 0 ? c->rtol : 1e-4, atol = c->atol > 0 ? c->atol : 1e-5;
    for (int64_t i = 0; i < n; i++) {
        double a = cpu[i], b = gpu[i];
        if (isnan(a) && isnan(b)) continue;
        ck_assert_msg(gpu[i] != POISON, "%s %s[%lld]: the GPU kernel did not write it (CPU %.9g)", c->op, what,
                      (long long)i, a);
        double tol = atol + rtol * fabs(a), err = fabs(a - b);
        ck_assert_msg(err <= tol, "%s %s[%lld]: GPU %.9g, CPU %.9g (|diff| %.3g > %.3g)", c->op, what, (long long)i,
                      b, a, err, tol);
        if (!(err <= tol)) return;
        double rel = err / tol;
        if (sum && rel > sum->worst_rel) {
            sum->worst_rel = rel;
            snprintf(sum->worst_op, sizeof(sum->worst_op), "%s %s", c->op, what);
        }
    }
    if (sum) sum->comparisons++;
}

static size_t workspace_bytes(const mx_op_def *op, const void *params, const mx_shape *in, const mx_shape *out)
{
    if (!op->workspace) return 0;
    size_t f = op->workspace(params, in, out, false), b = op->workspace(params, in, out, true);
    return f > b ? f : b;
}

void gpucheck_run(const gpucheck_case *c, gpucheck_summary *sum)
{
    const mx_op_def *op;
    ck_assert_msg(mx_op_lookup(c->op, &op) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(op->gpu && op->gpu->forward, "gpucheck: %s has no GPU kernel", c->op);
    void *params = calloc(1, op->params_size + 1);
    ck_assert(params != NULL);
    ck_assert_msg(mx_op_parse_params(op, c->keys, c->values, c->n_params, params) == MX_OK, "%s", mx_last_error());
    const char *names[MX_OP_MAX_IO];
    const int n_in = op->list_inputs(params, names);
    const char *in_names[MX_OP_MAX_IO];
    memcpy(in_names, names, sizeof(char *) * (size_t)n_in);
    const char *out_names[MX_OP_MAX_IO];
    const int n_out = op->list_outputs(params, out_names);
    const int n_aux = op->num_aux ? op->num_aux(params) : 0;
    mx_shape in_s[MX_OP_MAX_IO], out_s[MX_OP_MAX_IO];
    memcpy(in_s, c->in_shapes, sizeof(in_s));
    ck_assert_msg(op->infer_shape(params, in_s, n_in, out_s, n_out) == MX_OK, "%s", mx_last_error());
    int64_t in_n[MX_OP_MAX_IO], out_n[MX_OP_MAX_IO];
    for (int i = 0; i < n_in; i++) in_n[i] = mx_shape_size(&in_s[i]);
    for (int k = 0; k < n_out; k++) out_n[k] = mx_shape_size(&out_s[k]);

    /* Same random inputs for both devices. */
    uint64_t rng = c->seed ? c->seed : 20261127;
    float *in_host[MX_OP_MAX_IO];
    for (int i = 0; i < n_in; i++) {
        in_host[i] = host_fill(0, in_n[i]);
        if (c->init) c->init(i, in_host[i], in_n[i], &rng);
        else for (int64_t k = 0; k < in_n[i]; k++) in_host[i][k] = (float)opcheck_uniform(&rng, -1, 1);
    }

    gpu_env g = {.dev = mx_device_get(MX_DEV_GPU)};
    ck_assert_msg(mx_cuda_worker_create(0, &g.worker) == MX_OK, "%s", mx_last_error());
    g.exec = (mx_exec_ctx){.ctx = mx_gpu(0), .lane = MX_LANE_COMPUTE, .worker = 0, .stream = g.worker};
    mx_exec_ctx cpu_exec = {.ctx = mx_cpu()};
    size_t ws = workspace_bytes(op, params, in_s, out_s);
    void *ws_cpu = malloc(ws ? ws : 1); /* device kernels use their worker's scratch, as in the executor */
    mx_runtime *rt = NULL;
    mx_rng *rng_cpu = NULL, *rng_gpu = NULL;
    if (op->flags & MX_OP_NEEDS_RNG) {
        ck_assert(mx_runtime_create(NULL, &rt) == MX_OK);
        ck_assert(mx_rng_create(rt, 7, &rng_cpu) == MX_OK && mx_rng_create(rt, 7, &rng_gpu) == MX_OK);
    }
    void *state = NULL;
    mx_op_ctx cctx = {.exec = &cpu_exec, .workspace = ws_cpu, .workspace_bytes = ws, .rng = rng_cpu};
    mx_op_ctx gctx = {.exec = &g.exec, .rng = rng_gpu, .state = &state};

    /* Forward, inference then training; the training pass's results feed
     * backward (each device its own). */
    float *cpu_in[MX_OP_MAX_IO], *gpu_in[MX_OP_MAX_IO], *cpu_out[MX_OP_MAX_IO], *gpu_out[MX_OP_MAX_IO];
    float *gpu_out_host[MX_OP_MAX_IO];
    mx_tensor tci[MX_OP_MAX_IO], tgi[MX_OP_MAX_IO], tco[MX_OP_MAX_IO], tgo[MX_OP_MAX_IO];
    mx_req req[MX_OP_MAX_IO];
    for (int pass = 0; pass < 2; pass++) {
        bool train = pass == 1;
        cctx.is_train = gctx.is_train = train;
        if (pass == 1)
            for (int i = 0; i < n_in; i++) {
                free(cpu_in[i]);
                g.dev->free(0, gpu_in[i]);
            }
        for (int i = 0; i < n_in; i++) {
            cpu_in[i] = host_copy(in_host[i], in_n[i]);
            gpu_in[i] = dev_upload(&g, in_host[i], in_n[i]);
            tci[i] = (mx_tensor){cpu_in[i], in_s[i], MX_FLOAT32, mx_cpu(), 0};
            tgi[i] = (mx_tensor){gpu_in[i], in_s[i], MX_FLOAT32, mx_gpu(0), 0};
        }
        for (int k = 0; k < n_out; k++) {
            if (pass == 1) {
                free(cpu_out[k]);
                g.dev->free(0, gpu_out[k]);
                free(gpu_out_host[k]);
            }
            cpu_out[k] = host_fill(POISON, out_n[k]);
            gpu_out_host[k] = host_fill(POISON, out_n[k]);
            gpu_out[k] = dev_upload(&g, gpu_out_host[k], out_n[k]);
            tco[k] = (mx_tensor){cpu_out[k], out_s[k], MX_FLOAT32, mx_cpu(), 0};
            tgo[k] = (mx_tensor){gpu_out[k], out_s[k], MX_FLOAT32, mx_gpu(0), 0};
            req[k] = MX_REQ_WRITE;
        }
        mx_status s = op->forward(&cctx, params, tci, req, tco, n_aux ? &tci[n_in - n_aux] : NULL);
        ck_assert_msg(s == MX_OK, "%s CPU forward: %s", c->op, mx_last_error());
        s = op->gpu->forward(&gctx, params, tgi, req, tgo, n_aux ? &tgi[n_in - n_aux] : NULL);
        ck_assert_msg(s == MX_OK, "%s GPU forward: %s", c->op, mx_last_error());
        ck_assert_msg(mx_cuda_worker_sync(g.worker) == MX_OK, "%s GPU forward: %s", c->op, mx_last_error());
        char what[160];
        for (int k = 0; k < n_out; k++) {
            dev_download(&g, gpu_out_host[k], gpu_out[k], out_n[k]);
            snprintf(what, sizeof(what), "%s forward output '%s'", train ? "training" : "inference", out_names[k]);
            compare(c, sum, what, cpu_out[k], gpu_out_host[k], out_n[k]);
        }
        for (int i = n_in - n_aux; i < n_in; i++) {
            float *h = host_fill(0, in_n[i]);
            dev_download(&g, h, gpu_in[i], in_n[i]);
            snprintf(what, sizeof(what), "%s forward aux '%s'", train ? "training" : "inference", in_names[i]);
            compare(c, sum, what, cpu_in[i], h, in_n[i]);
            free(h);
        }
    }

    if (!c->no_backward && op->gpu->backward) {
        float *og_host[MX_OP_MAX_IO], *cpu_og[MX_OP_MAX_IO], *gpu_og[MX_OP_MAX_IO];
        mx_tensor tcog[MX_OP_MAX_IO], tgog[MX_OP_MAX_IO];
        for (int k = 0; k < n_out; k++) {
            og_host[k] = host_fill(0, out_n[k]);
            for (int64_t j = 0; j < out_n[k]; j++) og_host[k][j] = (float)opcheck_uniform(&rng, -1, 1);
            cpu_og[k] = host_copy(og_host[k], out_n[k]);
            gpu_og[k] = dev_upload(&g, og_host[k], out_n[k]);
            tcog[k] = (mx_tensor){cpu_og[k], out_s[k], MX_FLOAT32, mx_cpu(), 0};
            tgog[k] = (mx_tensor){gpu_og[k], out_s[k], MX_FLOAT32, mx_gpu(0), 0};
        }
        const int n_args = n_in - n_aux;
        /* Requests: all write; all add onto the same non-zero values; and
         * every other gradient not needed (null), the rest written. */
        static const char *const mode_names[] = {"write", "add", "null/write"};
        for (int mode = 0; mode < 3; mode++) {
            mx_req greq[MX_OP_MAX_IO];
            float *cpu_g[MX_OP_MAX_IO], *gpu_g[MX_OP_MAX_IO], *gpu_g_host[MX_OP_MAX_IO];
            mx_tensor tcg[MX_OP_MAX_IO], tgg[MX_OP_MAX_IO];
            for (int i = 0; i < n_args; i++) {
                bool skip = (c->skip_grad >> i) & 1;
                greq[i] = skip ? MX_REQ_NULL
                          : mode == 0 ? MX_REQ_WRITE
                          : mode == 1 ? MX_REQ_ADD
                                      : (i % 2 == 0 ? MX_REQ_NULL : MX_REQ_WRITE);
                cpu_g[i] = host_fill(POISON, in_n[i]);
                if (greq[i] == MX_REQ_ADD)
                    for (int64_t j = 0; j < in_n[i]; j++) cpu_g[i][j] = (float)opcheck_uniform(&rng, -1, 1);
                gpu_g_host[i] = host_copy(cpu_g[i], in_n[i]);
                gpu_g[i] = dev_upload(&g, cpu_g[i], in_n[i]);
                tcg[i] = (mx_tensor){cpu_g[i], in_s[i], MX_FLOAT32, mx_cpu(), 0};
                tgg[i] = (mx_tensor){gpu_g[i], in_s[i], MX_FLOAT32, mx_gpu(0), 0};
            }
            mx_tensor *caux = n_aux ? &tci[n_args] : NULL, *gaux = n_aux ? &tgi[n_args] : NULL;
            mx_status s = op->backward(&cctx, params, tcog, tci, tco, greq, tcg, caux);
            ck_assert_msg(s == MX_OK, "%s CPU backward: %s", c->op, mx_last_error());
            s = op->gpu->backward(&gctx, params, tgog, tgi, tgo, greq, tgg, gaux);
            ck_assert_msg(s == MX_OK, "%s GPU backward (%s): %s", c->op, mode_names[mode], mx_last_error());
            ck_assert_msg(mx_cuda_worker_sync(g.worker) == MX_OK, "%s GPU backward: %s", c->op, mx_last_error());
            for (int i = 0; i < n_args; i++) {
                dev_download(&g, gpu_g_host[i], gpu_g[i], in_n[i]);
                char what[160];
                snprintf(what, sizeof(what), "backward (%s) gradient of '%s'", mode_names[mode], in_names[i]);
                if (greq[i] == MX_REQ_NULL) {
                    for (int64_t j = 0; j < in_n[i]; j++)
                        ck_assert_msg(gpu_g_host[i][j] == POISON, "%s %s[%lld]: written under a null request",
                                      c->op, what, (long long)j);
                } else {
                    compare(c, sum, what, cpu_g[i], gpu_g_host[i], in_n[i]);
                }
                free(cpu_g[i]);
                free(gpu_g_host[i]);
                g.dev->free(0, gpu_g[i]);
            }
        }
        for (int k = 0; k < n_out; k++) {
            free(og_host[k]);
            free(cpu_og[k]);
            g.dev->free(0, gpu_og[k]);
        }
    }
    if (sum) sum->cases++;

    if (state && op->gpu->state_free) op->gpu->state_free(state);
    for (int i = 0; i < n_in; i++) {
        free(in_host[i]);
        free(cpu_in[i]);
        g.dev->free(0, gpu_in[i]);
    }
    for (int k = 0; k < n_out; k++) {
        free(cpu_out[k]);
        free(gpu_out_host[k]);
        g.dev->free(0, gpu_out[k]);
    }
    free(ws_cpu);
    mx_rng_free(rng_cpu);
    mx_rng_free(rng_gpu);
    if (rt) mx_runtime_free(rt);
    mx_cuda_worker_destroy(g.worker);
    free(params);
}

void gpucheck_refused(const char *op_name, const char *const *keys, const char *const *values, int n_params,
                      const char *named)
{
    const mx_op_def *op = mx_op_find(op_name);
    ck_assert_msg(op && op->gpu, "gpucheck: %s has no GPU kernels", op_name);
    void *p = calloc(1, op->params_size + 1);
    ck_assert(p != NULL);
    ck_assert_msg(mx_op_parse_params(op, keys, values, n_params, p) == MX_OK, "%s", mx_last_error());
    mx_req req[MX_OP_MAX_IO];
    for (int i = 0; i < MX_OP_MAX_IO; i++) req[i] = MX_REQ_WRITE;
    mx_tensor in[MX_OP_MAX_IO], out[MX_OP_MAX_IO], og[MX_OP_MAX_IO], g[MX_OP_MAX_IO];
    memset(in, 0, sizeof(in));
    memset(out, 0, sizeof(out));
    memset(og, 0, sizeof(og));
    memset(g, 0, sizeof(g));
    mx_op_ctx ctx = {0};
    ck_assert_int_eq(op->gpu->forward(&ctx, p, in, req, out, NULL), MX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mx_last_error(), named), "%s forward: %s", op_name, mx_last_error());
    ck_assert_int_eq(op->gpu->backward(&ctx, p, og, in, out, req, g, NULL), MX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mx_last_error(), named), "%s backward: %s", op_name, mx_last_error());
    free(p);
}

#else /* !MX_USE_CUDA */

void gpucheck_run(const gpucheck_case *c, gpucheck_summary *sum)
{
    (void)sum;
    ck_abort_msg("gpucheck: %s: this build has no CUDA", c->op);
}

void gpucheck_refused(const char *op, const char *const *keys, const char *const *values, int n_params,
                      const char *named)
{
    (void)keys, (void)values, (void)n_params, (void)named;
    ck_abort_msg("gpucheck: %s: this build has no CUDA", op);
}

#endif
