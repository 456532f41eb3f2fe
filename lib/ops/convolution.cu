/*
 * convolution.cu - Convolution on cuDNN: 1-D (as H = 1) and 2-D grouped
 * (depthwise included) cross-correlation with stride, dilation and zero
 * padding, in fp32 with CUDNN_FMA_MATH (no TF32):
 *   forward   cudnnConvolutionForward (+ cudnnAddTensor for the bias),
 *   backward  cudnnConvolutionBackwardData / BackwardFilter / BackwardBias,
 * each output written per its request through cuDNN's beta.
 *
 * Algorithms, per MXNet's cudnn_tune, within the layer's `workspace` (MB):
 *   off                      cuDNN's heuristics (cudnnGet*_v7): the first
 *                            suggestion whose workspace fits;
 *   None / limited_workspace cudnnFind*Ex timing runs, the fastest that
 *                            fits `workspace` (None is MXNet's default,
 *                            autotune = limited_workspace);
 *   fastest                  cudnnFind*Ex, the fastest whatever its
 *                            workspace (up to 1 GiB).
 * The timing runs happen once per data shape and are cached in the node's
 * state slot; with no slot (ctx->state NULL) nothing can be cached and the
 * heuristics choose instead. Timing runs write into scratch, never into
 * the outputs; cuDNN waits for them (once per node and shape), and when
 * they fail the heuristics choose. Workspace comes from the worker's
 * scratch (ctx->workspace, sized for the CPU's im2col, is not used).
 * cudnn_off=True (MXNet's im2col on GPU) is refused with
 * MX_ERR_UNSUPPORTED. MX_CUDNN_LOG=1 prints what the timing runs found.
 * As in MXNet, cudnn_tune None follows MXNET_CUDNN_AUTOTUNE_DEFAULT (0,
 * 1, 2), and MXNET_ENFORCE_DETERMINISM=1 admits only algorithms cuDNN
 * reports deterministic (an error when none fits), chosen by cuDNN's
 * heuristics so that the choice is the same every run.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/cudnn_conv.cuh"

extern "C" {
#include "ops/convolution.h"
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 2-D problem (1-D: H = 1, KH = 1). */
struct conv_gpu_geom {
    int n, c, h, w, f, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, groups;
};

static int conv_axis(const mx_tuple *t, int rank, int i, int dflt)
{
    if (rank == 1 && i == 0) return dflt == 0 ? 0 : 1; /* the 1-D op's H axis: kernel 1, stride 1, dilate 1, pad 0 */
    const int k = rank == 1 ? 0 : i;
    return t->ndim > 0 ? (int)t->v[k] : dflt;
}

static conv_gpu_geom conv_gpu_geometry(const conv_params *p, const mx_shape *d)
{
    const int r = p->kernel.ndim;
    conv_gpu_geom g;
    g.n = (int)d->dims[0];
    g.c = (int)d->dims[1];
    g.h = r == 1 ? 1 : (int)d->dims[2];
    g.w = (int)d->dims[r + 1];
    g.f = (int)p->num_filter;
    g.kh = conv_axis(&p->kernel, r, 0, 1);
    g.kw = conv_axis(&p->kernel, r, 1, 1);
    g.sh = conv_axis(&p->stride, r, 0, 1);
    g.sw = conv_axis(&p->stride, r, 1, 1);
    g.dh = conv_axis(&p->dilate, r, 0, 1);
    g.dw = conv_axis(&p->dilate, r, 1, 1);
    g.ph = conv_axis(&p->pad, r, 0, 0);
    g.pw = conv_axis(&p->pad, r, 1, 0);
    g.groups = (int)p->num_group;
    g.oh = (g.h + 2 * g.ph - (g.dh * (g.kh - 1) + 1)) / g.sh + 1;
    g.ow = (g.w + 2 * g.pw - (g.dw * (g.kw - 1) + 1)) / g.sw + 1;
    return g;
}

using conv_descs = mx_cudnn_conv;

static mx_status conv_descs_init(conv_descs *d, const conv_gpu_geom &g)
{
    const mx_cudnn_conv_shape shape = {g.n,  g.c,  g.h,  g.w,  g.f,  g.oh, g.ow,      g.kh, g.kw,
                                       g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, g.groups, g.f};
    int dims[4];
    MX_TRY(mx_cudnn_conv_init(d, shape, dims));
    /* cuDNN's own output size must be the one Convolution inferred. */
    const int n = dims[0], c = dims[1], h = dims[2], w = dims[3];
    if (n != g.n || c != g.f || h != g.oh || w != g.ow)
        return MX_ERROR(MX_ERR_DEVICE,
                        "Convolution: cuDNN's output shape (%d, %d, %d, %d) differs from (%d, %d, %d, %d)", n, c, h,
                        w, g.n, g.f, g.oh, g.ow);
    return MX_OK;
}

/* ------------------------------------------------------------ algorithms */

/* One direction's choice. */
struct conv_choice {
    bool have;
    int algo;
    size_t ws;
};

/* What a node caches: the choices for one data shape. */
struct conv_gpu_state {
    mx_shape data;
    int tune;
    int64_t workspace;
    conv_choice fwd, bwd_data, bwd_filter;
};

static void conv_gpu_state_free(void *state) { free(state); }

static const size_t CONV_FASTEST_CAP = (size_t)1 << 30;

/* FMA (or default) math only: never a tensor-core (TF32) variant. */
static bool conv_math_ok(cudnnMathType_t m)
{
    return m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/* Rounds up to 256 bytes (the alignment of what follows in scratch). */
static size_t conv_align(size_t b) { return (b + 255) & ~(size_t)255; }

enum conv_dir { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER };
static const char *const conv_dir_names[] = {"forward", "backward data", "backward filter"};

/* Workspace of `algo` in direction `dir`; false when cuDNN cannot run it here. */
static bool conv_ws_of(cudnnHandle_t h, const conv_descs &d, conv_dir dir, int algo, size_t *ws)
{
    cudnnStatus_t st;
    if (dir == DIR_FWD)
        st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)algo, ws);
    else if (dir == DIR_BWD_DATA)
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x,
                                                          (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    else
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                            (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
    return st == CUDNN_STATUS_SUCCESS;
}

/* Common fields of cuDNN's three perf structs. */
struct conv_perf {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnMathType_t math;
    float time_ms; /* timing runs only */
    bool deterministic;
};

template <typename P> static conv_perf conv_perf_of(const P &p)
{
    return {(int)p.algo, p.status, p.memory, p.mathType, p.time, p.determinism == CUDNN_DETERMINISTIC};
}

/* The first usable entry of a ranked list (fastest / most promising first)
 * within `limit` bytes of workspace (deterministic ones only under
 * MXNET_ENFORCE_DETERMINISM). */
static bool conv_pick(cudnnHandle_t h, const conv_descs &d, conv_dir dir, const conv_perf *perf, int n, size_t limit,
                      conv_choice *out)
{
    const bool only_deterministic = mx_determinism_enforced();
    for (int i = 0; i < n; i++) {
        size_t ws = 0;
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !conv_math_ok(perf[i].math) || perf[i].memory > limit) continue;
        if (only_deterministic && !perf[i].deterministic) continue;
        if (!conv_ws_of(h, d, dir, perf[i].algo, &ws) || ws > limit) continue;
        out->have = true;
        out->algo = perf[i].algo;
        out->ws = ws;
        return true;
    }
    return false;
}

enum { CONV_MAX_ALGOS = 16 };

static mx_status conv_heuristic(cudnnHandle_t h, const conv_descs &d, conv_dir dir, conv_perf *perf, int *n)
{
    int got = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CONV_MAX_ALGOS, &got, r));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, CONV_MAX_ALGOS, &got, r));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, CONV_MAX_ALGOS, &got, r));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    }
    *n = got;
    return MX_OK;
}

/* Timing runs (cudnnFind*Ex) on the call's real inputs; what they write
 * goes to scratch: [output-sized buffer | workspace of `limit` bytes]. */
static mx_status conv_find(const mx_op_ctx *ctx, cudnnHandle_t h, const conv_descs &d, const conv_gpu_geom &g,
                           conv_dir dir, size_t limit, const void *a, const void *b, conv_perf *perf, int *n)
{
    size_t out_elems = dir == DIR_FWD        ? (size_t)g.n * g.f * g.oh * g.ow
                       : dir == DIR_BWD_DATA ? (size_t)g.n * g.c * g.h * g.w
                                             : (size_t)g.f * (g.c / g.groups) * g.kh * g.kw;
    size_t out_bytes = conv_align(out_elems * sizeof(float));
    void *scratch = nullptr;
    MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), out_bytes + limit, &scratch));
    void *tmp = scratch, *ws = limit ? (char *)scratch + out_bytes : nullptr;
    int got = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, a, d.w, b, d.conv, d.y, tmp, CONV_MAX_ALGOS, &got,
                                                            r, ws, limit));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, a, d.y, b, d.conv, d.x, tmp, CONV_MAX_ALGOS,
                                                                 &got, r, ws, limit));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CONV_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, a, d.y, b, d.conv, d.w, tmp,
                                                                   CONV_MAX_ALGOS, &got, r, ws, limit));
        for (int i = 0; i < got; i++) perf[i] = conv_perf_of(r[i]);
    }
    *n = got;
    return MX_OK;
}

/* MX_CUDNN_LOG=1 (a diagnostic): each timing run's candidates and the
 * choice on stderr, one line per layer shape and direction:
 *   cudnn conv fwd n64 c256 56x56 f64 1x1/1 g1: chose 1 (0.412 ms, 0 MB) | 1:0.412 0:0.530 ...
 * (algorithm number: cuDNN's enum of that direction; time: its run here). */
static void conv_log_find(const conv_gpu_geom &g, conv_dir dir, const conv_perf *perf, int n, const conv_choice *out)
{
    const char *e = getenv("MX_CUDNN_LOG");
    if (!e || !*e || !strcmp(e, "0")) return;
    static const char *const short_names[] = {"fwd", "bwd_data", "bwd_filter"};
    char line[1024];
    float chosen_ms = -1;
    for (int i = 0; i < n; i++)
        if (perf[i].algo == out->algo && perf[i].status == CUDNN_STATUS_SUCCESS) chosen_ms = perf[i].time_ms;
    int len = snprintf(line, sizeof(line), "cudnn conv %s n%d c%d %dx%d f%d %dx%d/%d g%d: chose %d (%.3f ms, %zu MB) |",
                       short_names[dir], g.n, g.c, g.h, g.w, g.f, g.kh, g.kw, g.sh, g.groups, out->algo, chosen_ms,
                       out->ws >> 20);
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof(line); i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS)
            len += snprintf(line + len, sizeof(line) - (size_t)len, " %d:%.3f%s", perf[i].algo, perf[i].time_ms,
                            perf[i].math == CUDNN_FMA_MATH ? "" : "*");
    fprintf(stderr, "%s\n", line);
}

/* The layer's cudnn_tune; None (the default) follows MXNet's
 * MXNET_CUDNN_AUTOTUNE_DEFAULT: 0 off, 1 limited_workspace (unset), 2
 * fastest. */
static mx_status conv_tune_of(const conv_params *p, int *tune)
{
    *tune = p->cudnn_tune;
    if (p->cudnn_tune != CONV_TUNE_NONE) return MX_OK;
    long v = mx_env_long("MXNET_CUDNN_AUTOTUNE_DEFAULT", 1);
    if (v < 0 || v > 2)
        return MX_ERROR(MX_ERR_INVALID, "MXNET_CUDNN_AUTOTUNE_DEFAULT=%s: expected 0 (off), 1 (limited_workspace) "
                        "or 2 (fastest)", getenv("MXNET_CUDNN_AUTOTUNE_DEFAULT"));
    *tune = v == 0 ? CONV_TUNE_OFF : v == 2 ? CONV_TUNE_FASTEST : CONV_TUNE_LIMITED;
    return MX_OK;
}

/* Chooses the algorithm of direction `dir` (a, b: its two inputs, for the
 * timing runs: forward x, w; backward data w, dy; backward filter x, dy). */
static mx_status conv_choose(const mx_op_ctx *ctx, cudnnHandle_t h, const conv_params *p, const conv_descs &d,
                             const conv_gpu_geom &g, conv_dir dir, const void *a, const void *b, conv_choice *out)
{
    const size_t ws_limit = (size_t)p->workspace << 20;
    conv_perf perf[CONV_MAX_ALGOS];
    int n = 0;
    int tune;
    MX_TRY(conv_tune_of(p, &tune));
    /* Under MXNET_ENFORCE_DETERMINISM the choice itself must not vary from
     * run to run either: cuDNN's heuristics, not timings. */
    const bool timed = ctx->state != nullptr && tune != CONV_TUNE_OFF && !mx_determinism_enforced();
    if (timed) {
        /* The timing runs get the largest workspace any algorithm wants
         * within the cap (the layer's `workspace`, or 1 GiB for fastest),
         * not the cap itself: the scratch grows to what they get, and a
         * 1 GiB cap would hold 1 GiB for the whole run (ResNet-50's
         * largest want is a few hundred MB). */
        const size_t cap = tune == CONV_TUNE_FASTEST ? CONV_FASTEST_CAP : ws_limit;
        const int count = dir == DIR_FWD        ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                          : dir == DIR_BWD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                                : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
        size_t limit = 0;
        for (int i = 0; i < count; i++) {
            size_t ws = 0;
            if (conv_ws_of(h, d, dir, i, &ws) && ws <= cap && ws > limit) limit = ws;
        }
        /* A failed timing run (say, no scratch of that size) leaves the
         * choice to the heuristics below. */
        if (conv_find(ctx, h, d, g, dir, limit, a, b, perf, &n) == MX_OK && conv_pick(h, d, dir, perf, n, limit, out)) {
            conv_log_find(g, dir, perf, n, out);
            return MX_OK;
        }
    }
    MX_TRY(conv_heuristic(h, d, dir, perf, &n));
    if (conv_pick(h, d, dir, perf, n, ws_limit, out)) return MX_OK;
    return MX_ERROR(MX_ERR_UNSUPPORTED,
                    "Convolution: no %scuDNN %s algorithm fits parameter 'workspace' value '%lld' (MB) for data "
                    "(%d, %d, %d, %d), num_filter %d, num_group %d%s",
                    mx_determinism_enforced() ? "deterministic " : "", conv_dir_names[dir], (long long)p->workspace,
                    g.n, g.c, g.h, g.w, g.f, g.groups,
                    mx_determinism_enforced() ? " (MXNET_ENFORCE_DETERMINISM is set)" : "");
}

/* The node's cached choices for this data shape (a fresh record when the
 * shape changed), or NULL when the node has no state slot. */
static mx_status conv_state(const mx_op_ctx *ctx, const conv_params *p, const mx_shape *data, conv_gpu_state **out)
{
    *out = nullptr;
    if (!ctx->state) return MX_OK;
    conv_gpu_state *s = (conv_gpu_state *)*ctx->state;
    if (!s) {
        s = (conv_gpu_state *)calloc(1, sizeof(*s));
        if (!s) return MX_ERROR(MX_ERR_NOMEM, "Convolution: out of memory for the cuDNN state");
        *ctx->state = s;
    } else if (mx_shape_equal(&s->data, data) && s->tune == p->cudnn_tune && s->workspace == p->workspace) {
        *out = s;
        return MX_OK;
    }
    memset(s, 0, sizeof(*s));
    s->data = *data;
    s->tune = p->cudnn_tune;
    s->workspace = p->workspace;
    *out = s;
    return MX_OK;
}

/* The choice of `dir`, from the cache or made now (and cached). */
static mx_status conv_get_choice(const mx_op_ctx *ctx, cudnnHandle_t h, const conv_params *p, const conv_descs &d,
                                 const conv_gpu_geom &g, conv_gpu_state *s, conv_dir dir, const void *a,
                                 const void *b, conv_choice *out)
{
    conv_choice *slot = !s ? nullptr : dir == DIR_FWD ? &s->fwd : dir == DIR_BWD_DATA ? &s->bwd_data : &s->bwd_filter;
    if (slot && slot->have) {
        *out = *slot;
        return MX_OK;
    }
    *out = conv_choice{};
    MX_TRY(conv_choose(ctx, h, p, d, g, dir, a, b, out));
    if (slot) *slot = *out;
    return MX_OK;
}

/* ------------------------------------------------------------ kernels */

static mx_status conv_gpu_refuse(const conv_params *p)
{
    if (p->cudnn_off)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Convolution: parameter 'cudnn_off' value 'True' is not supported on gpu "
                                            "(there is no non-cuDNN GPU path); use cudnn_off=False");
    if (p->kernel.ndim != 1 && p->kernel.ndim != 2)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Convolution: a %d-D kernel is not supported on gpu (1-D and 2-D only)",
                        p->kernel.ndim);
    return MX_OK;
}

static mx_status conv_gpu_forward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const conv_params *p = (const conv_params *)vp;
    MX_TRY(conv_gpu_refuse(p));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const conv_gpu_geom g = conv_gpu_geometry(p, &in[0].shape);
    if (g.n == 0) return MX_OK; /* an empty batch: nothing to write */
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    conv_descs d;
    MX_TRY(conv_descs_init(&d, g));
    conv_gpu_state *s;
    MX_TRY(conv_state(ctx, p, &in[0].shape, &s));
    conv_choice c;
    MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_FWD, in[0].data, in[1].data, &c));
    void *ws = nullptr;
    if (c.ws) MX_TRY(mx_cuda_worker_scratch(worker, c.ws, &ws));
    const float one = 1.0f, beta = mx_cuda_beta(req[0]);
    MX_CUDNN_TRY(cudnnConvolutionForward(h, &one, d.x, in[0].data, d.w, in[1].data, d.conv,
                                         (cudnnConvolutionFwdAlgo_t)c.algo, ws, c.ws, &beta, d.y, out[0].data));
    if (!p->no_bias) MX_CUDNN_TRY(cudnnAddTensor(h, &one, d.b, in[2].data, &one, d.y, out[0].data));
    return MX_OK;
}

static mx_status conv_gpu_backward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)out;
    (void)aux;
    const conv_params *p = (const conv_params *)vp;
    MX_TRY(conv_gpu_refuse(p));
    const bool want_dx = req[0] != MX_REQ_NULL && in_grad[0].data;
    const bool want_dw = req[1] != MX_REQ_NULL && in_grad[1].data;
    const bool want_db = !p->no_bias && req[2] != MX_REQ_NULL && in_grad[2].data;
    if (!want_dx && !want_dw && !want_db) return MX_OK;
    const conv_gpu_geom g = conv_gpu_geometry(p, &in[0].shape);
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (g.n == 0) { /* an empty batch: zero weight and bias gradients (written), nothing else */
        if (want_dw && req[1] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0,
                                        (size_t)g.f * (g.c / g.groups) * g.kh * g.kw * sizeof(float), stream));
        if (want_db && req[2] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[2].data, 0, (size_t)g.f * sizeof(float), stream));
        return MX_OK;
    }
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    conv_descs d;
    MX_TRY(conv_descs_init(&d, g));
    conv_gpu_state *s;
    MX_TRY(conv_state(ctx, p, &in[0].shape, &s));
    conv_choice cd{}, cf{};
    if (want_dx) MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_BWD_DATA, in[1].data, out_grad[0].data, &cd));
    if (want_dw) MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_BWD_FILTER, in[0].data, out_grad[0].data, &cf));
    const size_t ws_bytes = cd.ws > cf.ws ? cd.ws : cf.ws;
    void *ws = nullptr;
    if (ws_bytes) MX_TRY(mx_cuda_worker_scratch(worker, ws_bytes, &ws));
    const float one = 1.0f;
    if (want_dx) {
        const float beta = mx_cuda_beta(req[0]);
        MX_CUDNN_TRY(cudnnConvolutionBackwardData(h, &one, d.w, in[1].data, d.y, out_grad[0].data, d.conv,
                                                  (cudnnConvolutionBwdDataAlgo_t)cd.algo, ws, cd.ws, &beta, d.x,
                                                  in_grad[0].data));
    }
    if (want_dw) {
        const float beta = mx_cuda_beta(req[1]);
        MX_CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, d.x, in[0].data, d.y, out_grad[0].data, d.conv,
                                                    (cudnnConvolutionBwdFilterAlgo_t)cf.algo, ws, cf.ws, &beta, d.w,
                                                    in_grad[1].data));
    }
    if (want_db) {
        const float beta = mx_cuda_beta(req[2]);
        MX_CUDNN_TRY(cudnnConvolutionBackwardBias(h, &one, d.y, out_grad[0].data, &beta, d.b, in_grad[2].data));
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_convolution = {conv_gpu_forward, conv_gpu_backward, conv_gpu_state_free};
