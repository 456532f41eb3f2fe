/*
 * convolution.cu - Convolution on cuDNN: 1-D (as H = 1) and 2-D grouped
 * (depthwise included) cross-correlation with stride, dilation and zero
 * padding, in fp32 with CUDNN_FMA_MATH (no TF32):
 *   forward   cudnnConvolutionForward (+ cudnnAddTensor for the bias),
 *   backward  cudnnConvolutionBackwardData / BackwardFilter / BackwardBias,
 * each output written per its request through cuDNN's beta.
 * float16 and bfloat16 (mixed precision; data, weight, bias, output and
 * their gradients all of one type): the same calls on half descriptors
 * with float compute (float accumulation, results rounded to the type),
 * tensor-core math admitted (CUDNN_TENSOR_OP_MATH while listing; each
 * algorithm run under the math type its perf entry reports; no
 * down-conversion; ops/cuda/cudnn_conv.cuh); the bias is added and its
 * gradient summed by own kernels in float (cudnn_conv.cuh), the bias added
 * to the output already rounded to the type (two roundings where the CPU's
 * half node rounds once). float32 keeps FMA math and today's bits. The
 * cached choices are keyed by dtype as well as shape. Every variant below
 * (heuristics, timing runs, determinism, the backend path) applies to the
 * half types alike; other dtypes are refused (MX_ERR_UNSUPPORTED).
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
 *
 * Forward also has a path on cuDNN's backend (graph) API
 * (ops/cuda/cudnn_graph_conv.cuh), the engines PyTorch's cuDNN v8/v9 path
 * runs: for num_group 1, write requests and a node with a state slot, the
 * graph's engine configs (heuristics mode A, then the fallback list; no
 * TF32 / tensor-core, down-converting or runtime-compiled engines;
 * deterministic ones only under MXNET_ENFORCE_DETERMINISM; workspace within
 * the same cap as above) each get an execution plan. With timing runs (as
 * above) every plan and the legacy choice run on the call's inputs into
 * scratch (a warm-up, then CONV_TIME_RUNS timed with cudaEvents on the
 * op's stream) and the backend's fastest is kept only when it beats the
 * legacy choice; without them (cudnn_tune off, determinism) the first
 * admitted heuristic plan is used. Any failure of the backend API (no
 * admitted config, a plan that does not finalize or run) leaves that node
 * and shape on the legacy path for good; add requests, other group counts
 * and pointers not 16-byte aligned take the legacy path per call.
 * MX_CUDNN_GRAPH: unset or 1 as described; 0 never uses the backend path
 * (the legacy path alone, as before); 2 uses the backend's fastest plan
 * whenever there is one, even when slower than the legacy choice (tests).
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/cudnn_conv.cuh"
#include "ops/cuda/cudnn_graph_conv.cuh"

extern "C" {
#include "ops/convolution.h"
}

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 2-D problem (1-D: H = 1, KH = 1) and its tensors' dtype. */
struct conv_gpu_geom {
    int n, c, h, w, f, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, groups;
    mx_dtype dtype;
};

static int conv_axis(const mx_tuple *t, int rank, int i, int dflt)
{
    if (rank == 1 && i == 0) return dflt == 0 ? 0 : 1; /* the 1-D op's H axis: kernel 1, stride 1, dilate 1, pad 0 */
    const int k = rank == 1 ? 0 : i;
    return t->ndim > 0 ? (int)t->v[k] : dflt;
}

static conv_gpu_geom conv_gpu_geometry(const conv_params *p, const mx_shape *d, mx_dtype dtype)
{
    const int r = p->kernel.ndim;
    conv_gpu_geom g;
    g.dtype = dtype;
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
    const mx_dtype dtype = g.dtype;
    const mx_cudnn_conv_shape shape = {g.n,  g.c,  g.h,  g.w,  g.f,  g.oh, g.ow,      g.kh, g.kw,
                                       g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, g.groups, g.f};
    int dims[4];
    MX_TRY(mx_cudnn_conv_init(d, "Convolution", shape, dtype, dims));
    /* cuDNN's own output size must be the one Convolution inferred. */
    const int n = dims[0], c = dims[1], h = dims[2], w = dims[3];
    if (n != g.n || c != g.f || h != g.oh || w != g.ow)
        return MX_ERROR(MX_ERR_DEVICE,
                        "Convolution: cuDNN's output shape (%d, %d, %d, %d) differs from (%d, %d, %d, %d)", n, c, h,
                        w, g.n, g.f, g.oh, g.ow);
    return MX_OK;
}

/* ------------------------------------------------------------ algorithms */

/* One direction's choice (math: the type it runs under; half only). */
struct conv_choice {
    bool have;
    int algo;
    size_t ws;
    cudnnMathType_t math;
};

/* The backend (graph) forward of one node and shape. */
enum conv_graph_status { GRAPH_UNTRIED = 0, GRAPH_USE, GRAPH_LEGACY };
struct conv_graph_fwd {
    int status;          /* conv_graph_status */
    mx_gconv_graph graph; /* GRAPH_USE: the graph and its chosen plan */
    mx_gconv_plan plan;
};

static void conv_graph_fwd_release(conv_graph_fwd *f)
{
    mx_gconv_plan_destroy(&f->plan);
    mx_gconv_graph_destroy(&f->graph);
}

/* What a node caches: the choices for one data shape and dtype. */
struct conv_gpu_state {
    mx_shape data;
    mx_dtype dtype;
    int tune;
    int64_t workspace;
    conv_choice fwd, bwd_data, bwd_filter;
    conv_graph_fwd gfwd;
};

static void conv_gpu_state_free(void *state)
{
    if (!state) return;
    conv_graph_fwd_release(&((conv_gpu_state *)state)->gfwd);
    free(state);
}

static const size_t CONV_FASTEST_CAP = (size_t)1 << 30;

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
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !mx_cudnn_conv_math_ok(d.dtype, perf[i].math) ||
            perf[i].memory > limit)
            continue;
        if (only_deterministic && !perf[i].deterministic) continue;
        /* Half: the workspace under the algorithm's own math type. */
        if (mx_cudnn_conv_math(d, perf[i].math) != MX_OK) continue;
        if (!conv_ws_of(h, d, dir, perf[i].algo, &ws) || ws > limit) continue;
        out->have = true;
        out->algo = perf[i].algo;
        out->ws = ws;
        out->math = perf[i].math;
        return true;
    }
    return false;
}

enum { CONV_MAX_ALGOS = 16 };

static mx_status conv_heuristic(cudnnHandle_t h, const conv_descs &d, conv_dir dir, conv_perf *perf, int *n)
{
    int got = 0;
    MX_TRY(mx_cudnn_conv_math(d, mx_cudnn_conv_list_math(d.dtype))); /* half: tensor ops listed too */
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
    size_t out_bytes = conv_align(out_elems * mx_dtype_size(d.dtype));
    void *scratch = nullptr;
    MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), out_bytes + limit, &scratch));
    void *tmp = scratch, *ws = limit ? (char *)scratch + out_bytes : nullptr;
    int got = 0;
    MX_TRY(mx_cudnn_conv_math(d, mx_cudnn_conv_list_math(d.dtype))); /* half: tensor ops timed too */
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

static bool conv_log_on(void)
{
    const char *e = getenv("MX_CUDNN_LOG");
    return e && *e && strcmp(e, "0") != 0;
}

/* " float16" / " bfloat16" after a half layer's shape in the logs. */
static const char *conv_log_dtype(mx_dtype d)
{
    return d == MX_FLOAT16 ? " float16" : d == MX_BFLOAT16 ? " bfloat16" : "";
}

/* MX_CUDNN_LOG=1 (a diagnostic): each timing run's candidates and the
 * choice on stderr, one line per layer shape and direction:
 *   cudnn conv fwd n64 c256 56x56 f64 1x1/1 g1: chose 1 (0.412 ms, 0 MB) | 1:0.412 0:0.530 ...
 * (algorithm number: cuDNN's enum of that direction; time: its run here;
 * "*": a math type other than FMA, tensor ops for half layers). */
static void conv_log_find(const conv_gpu_geom &g, conv_dir dir, const conv_perf *perf, int n, const conv_choice *out)
{
    if (!conv_log_on()) return;
    static const char *const short_names[] = {"fwd", "bwd_data", "bwd_filter"};
    char line[1024];
    float chosen_ms = -1;
    for (int i = 0; i < n; i++)
        if (perf[i].algo == out->algo && perf[i].status == CUDNN_STATUS_SUCCESS) chosen_ms = perf[i].time_ms;
    int len = snprintf(line, sizeof(line), "cudnn conv %s n%d c%d %dx%d f%d %dx%d/%d g%d%s: chose %d (%.3f ms, %zu MB) |",
                       short_names[dir], g.n, g.c, g.h, g.w, g.f, g.kh, g.kw, g.sh, g.groups,
                       conv_log_dtype(g.dtype), out->algo, chosen_ms, out->ws >> 20);
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
        /* Half: the algorithms' workspaces under tensor-op and FMA math
         * (float32: the descriptor's FMA math alone). */
        const cudnnMathType_t maths[2] = {mx_cudnn_conv_list_math(d.dtype), CUDNN_FMA_MATH};
        for (int m = 0; m < (d.dtype == MX_FLOAT32 ? 1 : 2); m++) {
            MX_TRY(mx_cudnn_conv_math(d, maths[m]));
            for (int i = 0; i < count; i++) {
                size_t ws = 0;
                if (conv_ws_of(h, d, dir, i, &ws) && ws <= cap && ws > limit) limit = ws;
            }
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
static mx_status conv_state(const mx_op_ctx *ctx, const conv_params *p, const mx_shape *data, mx_dtype dtype,
                            conv_gpu_state **out)
{
    *out = nullptr;
    if (!ctx->state) return MX_OK;
    conv_gpu_state *s = (conv_gpu_state *)*ctx->state;
    if (!s) {
        s = (conv_gpu_state *)calloc(1, sizeof(*s));
        if (!s) return MX_ERROR(MX_ERR_NOMEM, "Convolution: out of memory for the cuDNN state");
        *ctx->state = s;
    } else if (mx_shape_equal(&s->data, data) && s->dtype == dtype && s->tune == p->cudnn_tune &&
               s->workspace == p->workspace) {
        *out = s;
        return MX_OK;
    }
    conv_graph_fwd_release(&s->gfwd);
    memset(s, 0, sizeof(*s));
    s->data = *data;
    s->dtype = dtype;
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

/* ------------------------------------------------------------ backend (graph) forward */

enum { CONV_TIME_RUNS = 3, CONV_GRAPH_MAX_CFGS = 24, CONV_GRAPH_MAX_PLANS = 16 };

/* MX_CUDNN_GRAPH: 0 off, 1 (unset) timed against the legacy choice, 2 the
 * backend's plan whenever there is one (other values are refused when the
 * runtime is made, mx_env_check). */
static int conv_graph_mode(void)
{
    const char *e = getenv("MX_CUDNN_GRAPH");
    if (!e || !*e) return 1;
    if (!strcmp(e, "0")) return 0;
    if (!strcmp(e, "2")) return 2;
    return 1;
}


static bool conv_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The candidates of one choice (all destroyed unless taken). */
struct conv_graph_cands {
    mx_gconv_graph graph{};
    mx_gconv_plan plans[CONV_GRAPH_MAX_PLANS]{};
    int n = 0;
    conv_graph_cands() = default;
    conv_graph_cands(const conv_graph_cands &) = delete;
    conv_graph_cands &operator=(const conv_graph_cands &) = delete;
    ~conv_graph_cands()
    {
        for (int i = 0; i < n; i++) mx_gconv_plan_destroy(&plans[i]);
        mx_gconv_graph_destroy(&graph);
    }
};

struct conv_events {
    cudaEvent_t start = nullptr, stop = nullptr;
    conv_events() = default;
    conv_events(const conv_events &) = delete;
    conv_events &operator=(const conv_events &) = delete;
    ~conv_events()
    {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
    }
};

/* Mean time in ms of CONV_TIME_RUNS runs of `run` (a cuDNN call queued on
 * `stream`) after a warm-up run; *ms = -1 when a run fails (a cuDNN
 * refusal). CUDA's own errors propagate. */
template <typename F> static mx_status conv_time(cudaStream_t stream, conv_events &ev, F run, float *ms)
{
    *ms = -1;
    if (run() != CUDNN_STATUS_SUCCESS) {
        (void)cudaGetLastError(); /* a refused launch leaves nothing for the next op to trip on */
        return MX_OK;
    }
    MX_CUDA_TRY(cudaEventRecord(ev.start, stream));
    for (int i = 0; i < CONV_TIME_RUNS; i++)
        if (run() != CUDNN_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            MX_CUDA_TRY(cudaStreamSynchronize(stream)); /* a fault of the runs before shows here */
            return MX_OK;
        }
    MX_CUDA_TRY(cudaEventRecord(ev.stop, stream));
    MX_CUDA_TRY(cudaEventSynchronize(ev.stop));
    float total = 0;
    MX_CUDA_TRY(cudaEventElapsedTime(&total, ev.start, ev.stop));
    *ms = total / CONV_TIME_RUNS;
    return MX_OK;
}

/* "cudnn conv fwd n64 c256 56x56 f64 1x1/1 g1" (as conv_log_find). */
static int conv_log_prefix(char *line, size_t size, const conv_gpu_geom &g)
{
    return snprintf(line, size, "cudnn conv fwd n%d c%d %dx%d f%d %dx%d/%d g%d%s: graph", g.n, g.c, g.h, g.w, g.f,
                    g.kh, g.kw, g.sh, g.groups, conv_log_dtype(g.dtype));
}

/* MX_CUDNN_LOG=1: why this shape stays on the legacy path. */
static void conv_log_graph_failed(const conv_gpu_geom &g, const char *step, cudnnStatus_t st, int seen, int notes,
                                  int unfinalized, int over_cap)
{
    if (!conv_log_on()) return;
    char line[1024], last[512] = "";
    int len = conv_log_prefix(line, sizeof(line), g);
    cudnnGetLastErrorString(last, sizeof(last));
    snprintf(line + len, sizeof(line) - (size_t)len,
             " unavailable, legacy kept: %s (%s) [configs %d: %d dropped by notes, %d not finalized, %d over the "
             "workspace cap] %s",
             step, st == CUDNN_STATUS_SUCCESS ? "no plan" : cudnnGetErrorString(st), seen, notes, unfinalized,
             over_cap, last);
    fprintf(stderr, "%s\n", line);
}

/* MX_CUDNN_LOG=1: the candidates' timings and the winner, one line. */
static void conv_log_graph_choice(const conv_gpu_geom &g, bool timed, bool use, const conv_graph_cands &c, int best,
                                  const conv_choice &legacy, float legacy_ms)
{
    if (!conv_log_on()) return;
    char line[2048];
    int len = conv_log_prefix(line, sizeof(line), g);
    const mx_gconv_plan &b = c.plans[best];
    if (!timed)
        len += snprintf(line + len, sizeof(line) - (size_t)len, " chose e%lld (heuristics, untimed, %lld MB) |",
                        (long long)b.engine, (long long)(b.ws >> 20));
    else if (use)
        len += snprintf(line + len, sizeof(line) - (size_t)len,
                        " chose e%lld (%.3f ms, %lld MB) over legacy %d (%.3f ms, %zu MB) |", (long long)b.engine,
                        b.ms, (long long)(b.ws >> 20), legacy.algo, legacy_ms, legacy.ws >> 20);
    else
        len += snprintf(line + len, sizeof(line) - (size_t)len,
                        " legacy %d kept (%.3f ms, %zu MB), graph's best e%lld (%.3f ms, %lld MB) |", legacy.algo,
                        legacy_ms, legacy.ws >> 20, (long long)b.engine, b.ms, (long long)(b.ws >> 20));
    for (int i = 0; i < c.n && len > 0 && (size_t)len < sizeof(line); i++)
        len += snprintf(line + len, sizeof(line) - (size_t)len, " e%lld:%.3f", (long long)c.plans[i].engine,
                        c.plans[i].ms);
    fprintf(stderr, "%s\n", line);
}

/* Decides this node and shape's backend forward: s->gfwd becomes GRAPH_USE
 * (holding its graph and plan) or GRAPH_LEGACY. `legacy`: the legacy
 * choice, timed beside the plans. Only CUDA's errors are returned. */
static mx_status conv_graph_choose(const mx_op_ctx *ctx, cudnnHandle_t h, const conv_params *p, const conv_descs &d,
                                   const conv_gpu_geom &g, conv_gpu_state *s, const conv_choice &legacy, int mode,
                                   const void *x, const void *w)
{
    conv_graph_fwd *f = &s->gfwd;
    f->status = GRAPH_LEGACY; /* until a plan wins */
    int tune;
    MX_TRY(conv_tune_of(p, &tune));
    const bool timed = tune != CONV_TUNE_OFF && !mx_determinism_enforced();
    const size_t ws_limit = (size_t)p->workspace << 20;
    const size_t cap = timed && tune == CONV_TUNE_FASTEST ? CONV_FASTEST_CAP : ws_limit;
    /* Tensor-core engines for half tensors only (float32's would be TF32). */
    const mx_gconv_filter filt = {mx_determinism_enforced(), (int64_t)cap, g.dtype != MX_FLOAT32};
    const mx_gconv_shape shape = {g.n, g.c, g.h, g.w, g.f, g.oh, g.ow, g.kh, g.kw, g.ph, g.pw, g.sh, g.sw, g.dh, g.dw};

    conv_graph_cands c;
    cudnnStatus_t st = mx_gconv_graph_build(h, shape, mx_cudnn_type(g.dtype), &c.graph);
    if (st != CUDNN_STATUS_SUCCESS) {
        conv_log_graph_failed(g, "operation graph", st, 0, 0, 0, 0);
        return MX_OK;
    }
    /* Heuristics mode A, then the fallback list (timed: plans from both;
     * untimed: the first admitted plan). */
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int seen = 0, notes = 0, unfinalized = 0, over_cap = 0;
    cudnnStatus_t heur_st = CUDNN_STATUS_SUCCESS;
    for (int m = 0; m < 2 && c.n < CONV_GRAPH_MAX_PLANS && (timed || c.n == 0); m++) {
        cudnnBackendDescriptor_t cfgs[CONV_GRAPH_MAX_CFGS];
        int nc = 0;
        st = mx_gconv_heuristics(c.graph, modes[m], cfgs, CONV_GRAPH_MAX_CFGS, &nc);
        if (st != CUDNN_STATUS_SUCCESS) heur_st = st;
        for (int i = 0; i < nc; i++) {
            if (c.n == CONV_GRAPH_MAX_PLANS || (!timed && c.n > 0)) {
                mx_gconv_destroy(&cfgs[i]);
                continue;
            }
            seen++;
            bool ok = false;
            int64_t engine = -1;
            if (mx_gconv_engine_ok(cfgs[i], filt, &ok, &engine) != CUDNN_STATUS_SUCCESS || !ok) {
                notes++;
                mx_gconv_destroy(&cfgs[i]);
                continue;
            }
            mx_gconv_plan pl;
            st = mx_gconv_plan_make(h, cfgs[i], filt, engine, &pl); /* pl owns cfgs[i] now */
            if (st != CUDNN_STATUS_SUCCESS || !pl.plan) {
                if (st != CUDNN_STATUS_SUCCESS) unfinalized++;
                else over_cap++;
                mx_gconv_plan_destroy(&pl);
                continue;
            }
            c.plans[c.n++] = pl;
        }
    }
    if (c.n == 0) {
        conv_log_graph_failed(g, seen ? "no admitted engine config" : "heuristics", seen ? CUDNN_STATUS_SUCCESS : heur_st,
                              seen, notes, unfinalized, over_cap);
        return MX_OK;
    }

    int best = 0;
    float legacy_ms = -1;
    bool use = true;
    if (timed) {
        /* Scratch as conv_find's: [output-sized buffer | workspace]. */
        size_t need = legacy.ws;
        for (int i = 0; i < c.n; i++)
            if ((size_t)c.plans[i].ws > need) need = (size_t)c.plans[i].ws;
        if (need < 256) need = 256;
        const size_t out_bytes = conv_align((size_t)g.n * g.f * g.oh * g.ow * mx_dtype_size(g.dtype));
        void *scratch = nullptr;
        MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), out_bytes + need, &scratch));
        void *tmp = scratch, *ws = (char *)scratch + out_bytes;
        cudaStream_t stream = mx_cuda_op_stream(ctx);
        conv_events ev;
        MX_CUDA_TRY(cudaEventCreate(&ev.start));
        MX_CUDA_TRY(cudaEventCreate(&ev.stop));
        const float one = 1.0f, zero = 0.0f;
        MX_TRY(mx_cudnn_conv_math(d, legacy.math));
        MX_TRY(conv_time(
            stream, ev,
            [&] {
                return cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv, (cudnnConvolutionFwdAlgo_t)legacy.algo,
                                               ws, legacy.ws, &zero, d.y, tmp);
            },
            &legacy_ms));
        best = -1;
        for (int i = 0; i < c.n; i++) {
            const cudnnBackendDescriptor_t plan = c.plans[i].plan;
            MX_TRY(conv_time(stream, ev, [&] { return mx_gconv_execute(h, plan, x, w, tmp, ws); }, &c.plans[i].ms));
            if (c.plans[i].ms >= 0 && (best < 0 || c.plans[i].ms < c.plans[best].ms)) best = i;
        }
        if (best < 0) {
            conv_log_graph_failed(g, "every plan failed its timing run", CUDNN_STATUS_SUCCESS, seen, notes,
                                  unfinalized, over_cap);
            return MX_OK;
        }
        use = mode == 2 || legacy_ms < 0 || c.plans[best].ms < legacy_ms;
    }
    conv_log_graph_choice(g, timed, use, c, best, legacy, legacy_ms);
    if (!use) return MX_OK;
    f->graph = c.graph;
    c.graph = mx_gconv_graph{};
    f->plan = c.plans[best];
    c.plans[best] = mx_gconv_plan{};
    f->status = GRAPH_USE;
    return MX_OK;
}

/* The forward on the backend path when it applies (*done), else nothing
 * (the caller runs the legacy path). */
static mx_status conv_graph_forward(const mx_op_ctx *ctx, cudnnHandle_t h, const conv_params *p, const conv_descs &d,
                                    const conv_gpu_geom &g, conv_gpu_state *s, const conv_choice &legacy, mx_req req,
                                    const void *x, const void *w, void *y, bool *done)
{
    *done = false;
    const int mode = conv_graph_mode();
    if (!s || mode == 0 || g.groups != 1 || req == MX_REQ_ADD) return MX_OK;
    if (!conv_aligned16(x) || !conv_aligned16(w) || !conv_aligned16(y)) return MX_OK;
    conv_graph_fwd *f = &s->gfwd;
    if (f->status == GRAPH_UNTRIED) MX_TRY(conv_graph_choose(ctx, h, p, d, g, s, legacy, mode, x, w));
    if (f->status != GRAPH_USE) return MX_OK;
    void *ws = nullptr;
    MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), f->plan.ws > 256 ? (size_t)f->plan.ws : 256, &ws));
    const cudnnStatus_t st = mx_gconv_execute(h, f->plan.plan, x, w, y, ws);
    if (st != CUDNN_STATUS_SUCCESS) { /* ran in its timing run, refused now: the legacy path from here on */
        (void)cudaGetLastError();
        conv_log_graph_failed(g, "execute", st, 0, 0, 0, 0);
        conv_graph_fwd_release(f);
        f->status = GRAPH_LEGACY;
        return MX_OK;
    }
    *done = true;
    return MX_OK;
}

/* ------------------------------------------------------------ kernels */

/* Every tensor of the call in `dtype` (the executor gives a node one
 * dtype; a mixed call is refused rather than misread). */
static mx_status conv_check_dtypes(const char *what, const mx_tensor *t, int n, mx_dtype dtype)
{
    for (int i = 0; i < n; i++)
        if (t[i].data && t[i].dtype != dtype)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "Convolution: %s %d is %s but data is %s (one dtype per node on gpu)",
                            what, i, mx_dtype_name(t[i].dtype), mx_dtype_name(dtype));
    return MX_OK;
}

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
    const mx_dtype dtype = in[0].dtype;
    MX_TRY(conv_check_dtypes("input", in, p->no_bias ? 2 : 3, dtype));
    MX_TRY(conv_check_dtypes("output", out, 1, dtype));
    const conv_gpu_geom g = conv_gpu_geometry(p, &in[0].shape, dtype);
    if (g.n == 0) return MX_OK; /* an empty batch: nothing to write */
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    conv_descs d;
    MX_TRY(conv_descs_init(&d, g));
    conv_gpu_state *s;
    MX_TRY(conv_state(ctx, p, &in[0].shape, dtype, &s));
    conv_choice c;
    MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_FWD, in[0].data, in[1].data, &c));
    bool done = false;
    MX_TRY(conv_graph_forward(ctx, h, p, d, g, s, c, req[0], in[0].data, in[1].data, out[0].data, &done));
    const float one = 1.0f, beta = mx_cuda_beta(req[0]);
    if (!done) {
        void *ws = nullptr;
        if (c.ws) MX_TRY(mx_cuda_worker_scratch(worker, c.ws, &ws));
        MX_TRY(mx_cudnn_conv_math(d, c.math));
        MX_CUDNN_TRY(cudnnConvolutionForward(h, &one, d.x, in[0].data, d.w, in[1].data, d.conv,
                                             (cudnnConvolutionFwdAlgo_t)c.algo, ws, c.ws, &beta, d.y, out[0].data));
    }
    if (p->no_bias) return MX_OK;
    if (dtype == MX_FLOAT32) MX_CUDNN_TRY(cudnnAddTensor(h, &one, d.b, in[2].data, &one, d.y, out[0].data));
    else
        MX_TRY(mx_conv_bias_add(mx_cuda_op_stream(ctx), "Convolution", dtype, out[0].data, in[2].data, g.n, g.f,
                                (int64_t)g.oh * g.ow));
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
    const mx_dtype dtype = in[0].dtype;
    MX_TRY(conv_check_dtypes("input", in, 2, dtype));
    MX_TRY(conv_check_dtypes("output gradient", out_grad, 1, dtype));
    MX_TRY(conv_check_dtypes("input gradient", in_grad, want_db ? 3 : 2, dtype));
    const conv_gpu_geom g = conv_gpu_geometry(p, &in[0].shape, dtype);
    const size_t esize = mx_dtype_size(dtype); /* 0 bits are 0.0 in all three types */
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (g.n == 0) { /* an empty batch: zero weight and bias gradients (written), nothing else */
        if (want_dw && req[1] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0,
                                        (size_t)g.f * (g.c / g.groups) * g.kh * g.kw * esize, stream));
        if (want_db && req[2] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[2].data, 0, (size_t)g.f * esize, stream));
        return MX_OK;
    }
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    conv_descs d;
    MX_TRY(conv_descs_init(&d, g));
    conv_gpu_state *s;
    MX_TRY(conv_state(ctx, p, &in[0].shape, dtype, &s));
    conv_choice cd{}, cf{};
    if (want_dx) MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_BWD_DATA, in[1].data, out_grad[0].data, &cd));
    if (want_dw) MX_TRY(conv_get_choice(ctx, h, p, d, g, s, DIR_BWD_FILTER, in[0].data, out_grad[0].data, &cf));
    const size_t ws_bytes = cd.ws > cf.ws ? cd.ws : cf.ws;
    void *ws = nullptr;
    if (ws_bytes) MX_TRY(mx_cuda_worker_scratch(worker, ws_bytes, &ws));
    const float one = 1.0f;
    if (want_dx) {
        const float beta = mx_cuda_beta(req[0]);
        MX_TRY(mx_cudnn_conv_math(d, cd.math));
        MX_CUDNN_TRY(cudnnConvolutionBackwardData(h, &one, d.w, in[1].data, d.y, out_grad[0].data, d.conv,
                                                  (cudnnConvolutionBwdDataAlgo_t)cd.algo, ws, cd.ws, &beta, d.x,
                                                  in_grad[0].data));
    }
    if (want_dw) {
        const float beta = mx_cuda_beta(req[1]);
        MX_TRY(mx_cudnn_conv_math(d, cf.math));
        MX_CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, d.x, in[0].data, d.y, out_grad[0].data, d.conv,
                                                    (cudnnConvolutionBwdFilterAlgo_t)cf.algo, ws, cf.ws, &beta, d.w,
                                                    in_grad[1].data));
    }
    if (want_db && dtype == MX_FLOAT32) {
        const float beta = mx_cuda_beta(req[2]);
        MX_CUDNN_TRY(cudnnConvolutionBackwardBias(h, &one, d.y, out_grad[0].data, &beta, d.b, in_grad[2].data));
    } else if (want_db) {
        MX_TRY(mx_conv_bias_grad(stream, "Convolution", dtype, out_grad[0].data, in_grad[2].data, g.n, g.f,
                                 (int64_t)g.oh * g.ow, req[2]));
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_convolution = {conv_gpu_forward, conv_gpu_backward, conv_gpu_state_free,
                                                        MX_HALF_DTYPES};
