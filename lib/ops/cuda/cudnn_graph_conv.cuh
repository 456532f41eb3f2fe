/*
 * cudnn_graph_conv.cuh - a 2-d NCHW forward convolution (float32, float16
 * or bfloat16 tensors) on the cuDNN backend (graph) C API (cudnn_graph.h),
 * for Convolution's forward:
 *   one CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR in an
 *   operation graph (x, w, y packed NCHW of one data type, 16-byte aligned,
 *   uids 'x' 'w' 'y'; cross-correlation, float compute for every type,
 *   alpha 1, beta 0: write only);
 *   engine configs from CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR (mode A, then
 *   the fallback list), minus every engine whose numerical notes say
 *   DOWN_CONVERT_INPUTS or REDUCED_PRECISION_REDUCTION (float accumulation
 *   for every type), TENSOR_CORE unless the filter admits tensor cores
 *   (float32 never: TF32; it stays FMA, as CUDNN_FMA_MATH on the legacy
 *   path; PyTorch drops TENSOR_CORE and DOWN_CONVERT_INPUTS for float32
 *   without allow_tf32 and DOWN_CONVERT_INPUTS always; half tensors admit
 *   them), NONDETERMINISTIC when asked, and RUNTIME_COMPILATION (an NVRTC
 *   build per shape: seconds of set-up); an execution plan finalized for
 *   each survivor whose workspace fits a cap.
 * Everything here reports cuDNN's status instead of raising an error: the
 * caller treats any failure as "no backend plan" and keeps its legacy path.
 * Groups are not expressed (the caller uses this for num_group 1 only).
 * C++ (nvcc) only.
 */
#ifndef MX_OPS_CUDA_CUDNN_GRAPH_CONV_CUH
#define MX_OPS_CUDA_CUDNN_GRAPH_CONV_CUH

#include "ops/cuda/cuda_op.h"

#include <stdint.h>

/* The problem: x (n, c, h, w), w (k, c, kh, kw), y (n, k, oh, ow). */
struct mx_gconv_shape {
    int64_t n, c, h, w, k, oh, ow, kh, kw, ph, pw, sh, sw, dh, dw;
};

enum : int64_t { MX_GCONV_UID_X = 'x', MX_GCONV_UID_W = 'w', MX_GCONV_UID_Y = 'y' };

/* The operation graph and what it is made of (kept alive for as long as
 * any plan made from it). */
struct mx_gconv_graph {
    cudnnBackendDescriptor_t x, w, y, conv, op, graph;
};

/* One finalized execution plan and its engine config. */
struct mx_gconv_plan {
    cudnnBackendDescriptor_t cfg, plan;
    int64_t ws;     /* workspace bytes */
    int64_t engine; /* the engine's global index (logs) */
    float ms;       /* timing run (-1: not timed) */
};

#define MX_GCONV_TRY(call)                                                                        \
    do {                                                                                          \
        cudnnStatus_t mx_gconv_st_ = (call);                                                      \
        if (mx_gconv_st_ != CUDNN_STATUS_SUCCESS) return mx_gconv_st_;                            \
    } while (0)

static inline void mx_gconv_destroy(cudnnBackendDescriptor_t *d)
{
    if (*d) cudnnBackendDestroyDescriptor(*d);
    *d = nullptr;
}

/* cudnnBackendCreateDescriptor, leaving *d NULL when it fails. */
static inline cudnnStatus_t mx_gconv_create(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d)
{
    *d = nullptr;
    const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, d);
    if (st != CUDNN_STATUS_SUCCESS) *d = nullptr;
    return st;
}

static inline void mx_gconv_graph_destroy(mx_gconv_graph *g)
{
    mx_gconv_destroy(&g->graph);
    mx_gconv_destroy(&g->op);
    mx_gconv_destroy(&g->conv);
    mx_gconv_destroy(&g->y);
    mx_gconv_destroy(&g->w);
    mx_gconv_destroy(&g->x);
}

static inline void mx_gconv_plan_destroy(mx_gconv_plan *p)
{
    mx_gconv_destroy(&p->plan);
    mx_gconv_destroy(&p->cfg);
}

/* A packed NCHW tensor of `type`, 16-byte aligned. */
static inline cudnnStatus_t mx_gconv_tensor(cudnnBackendDescriptor_t *out, cudnnDataType_t type, int64_t uid,
                                            int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
    const int64_t dims[4] = {d0, d1, d2, d3};
    const int64_t strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    const int64_t alignment = 16;
    MX_GCONV_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    MX_GCONV_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    MX_GCONV_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    MX_GCONV_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    MX_GCONV_TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment));
    return cudnnBackendFinalize(*out);
}

/* The finalized operation graph of y = conv(x, w) (alpha 1, beta 0), x, w
 * and y of data type `type` (CUDNN_DATA_FLOAT, _HALF or _BFLOAT16), float
 * compute. On failure *g holds what was made so far (mx_gconv_graph_destroy
 * frees it). */
static inline cudnnStatus_t mx_gconv_graph_build(cudnnHandle_t handle, const mx_gconv_shape &s, cudnnDataType_t type,
                                                 mx_gconv_graph *g)
{
    *g = mx_gconv_graph{};
    MX_GCONV_TRY(mx_gconv_tensor(&g->x, type, MX_GCONV_UID_X, s.n, s.c, s.h, s.w));
    MX_GCONV_TRY(mx_gconv_tensor(&g->w, type, MX_GCONV_UID_W, s.k, s.c, s.kh, s.kw));
    MX_GCONV_TRY(mx_gconv_tensor(&g->y, type, MX_GCONV_UID_Y, s.n, s.k, s.oh, s.ow));

    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv));
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatial = 2;
    const int64_t pad[2] = {s.ph, s.pw}, stride[2] = {s.sh, s.sw}, dilation[2] = {s.dh, s.dw};
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    MX_GCONV_TRY(
        cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation));
    MX_GCONV_TRY(
        cudnnBackendSetAttribute(g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride));
    MX_GCONV_TRY(cudnnBackendFinalize(g->conv));

    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &g->op));
    const float alpha = 1.0f, beta = 0.0f;
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->x));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->w));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->y));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv));
    MX_GCONV_TRY(
        cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    MX_GCONV_TRY(
        cudnnBackendSetAttribute(g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    MX_GCONV_TRY(cudnnBackendFinalize(g->op));

    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph));
    MX_GCONV_TRY(cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                          &g->op));
    /* The handle: deprecated in cuDNN 9.x headers, still what the frontend
     * sets on the graph; set it, and carry on if this version refuses it
     * (finalize then says whether it was needed). */
    (void)cudnnBackendSetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    return cudnnBackendFinalize(g->graph);
}

/* Up to `cap` engine configs of the heuristics in `mode`, made in cfgs[]
 * (the caller destroys the *n made); false status: none. */
static inline cudnnStatus_t mx_gconv_heuristics(const mx_gconv_graph &g, cudnnBackendHeurMode_t mode,
                                                cudnnBackendDescriptor_t *cfgs, int cap, int *n)
{
    *n = 0;
    cudnnBackendDescriptor_t heur = nullptr;
    cudnnStatus_t st = mx_gconv_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    int64_t count = 0, got = 0;
    st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                  &g.graph);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(heur);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                      nullptr);
    if (st == CUDNN_STATUS_SUCCESS && count > 0) {
        const int want = count < cap ? (int)count : cap;
        int made = 0;
        for (; made < want && st == CUDNN_STATUS_SUCCESS; made++) {
            st = mx_gconv_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]);
        }
        if (st != CUDNN_STATUS_SUCCESS) made--; /* the failed one made nothing */
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want,
                                          &got, cfgs);
        if (st != CUDNN_STATUS_SUCCESS) got = 0;
        if (got > want) got = want;
        for (int i = (int)got; i < made; i++) mx_gconv_destroy(&cfgs[i]); /* made, not filled */
        *n = (int)got;
    }
    cudnnBackendDestroyDescriptor(heur);
    return st;
}

/* What the caller admits. */
struct mx_gconv_filter {
    bool deterministic_only;
    int64_t ws_cap;
    bool tensor_cores; /* engines noted TENSOR_CORE (half tensors; never float32: that is TF32) */
};

/* Whether the engine of `cfg` is admitted (notes), and its global index. */
static inline cudnnStatus_t mx_gconv_engine_ok(cudnnBackendDescriptor_t cfg, const mx_gconv_filter &f, bool *ok,
                                               int64_t *engine)
{
    *ok = false;
    *engine = -1;
    cudnnBackendDescriptor_t eng = nullptr;
    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    int64_t cnt = 0, n_num = 0, n_beh = 0;
    cudnnBackendNumericalNote_t num[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    cudnnStatus_t st =
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                      CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_num, num);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                      CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n_beh, beh);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, engine);
    cudnnBackendDestroyDescriptor(eng);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (n_num > CUDNN_NUMERICAL_NOTE_TYPE_COUNT) n_num = CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
    if (n_beh > CUDNN_BEHAVIOR_NOTE_TYPE_COUNT) n_beh = CUDNN_BEHAVIOR_NOTE_TYPE_COUNT;
    for (int64_t i = 0; i < n_num; i++) {
        if (num[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
            num[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
            return CUDNN_STATUS_SUCCESS;
        if (!f.tensor_cores && num[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return CUDNN_STATUS_SUCCESS;
        if (f.deterministic_only && num[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return CUDNN_STATUS_SUCCESS;
    }
    for (int64_t i = 0; i < n_beh; i++)
        if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return CUDNN_STATUS_SUCCESS;
    *ok = true;
    return CUDNN_STATUS_SUCCESS;
}

/* The finalized execution plan of `cfg` in *p (which takes `cfg` over
 * whatever happens); p->plan stays NULL when the workspace exceeds the cap. */
static inline cudnnStatus_t mx_gconv_plan_make(cudnnHandle_t handle, cudnnBackendDescriptor_t cfg,
                                               const mx_gconv_filter &f, int64_t engine, mx_gconv_plan *p)
{
    *p = mx_gconv_plan{};
    p->cfg = cfg;
    p->engine = engine;
    p->ms = -1;
    MX_GCONV_TRY(mx_gconv_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan));
    MX_GCONV_TRY(cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->cfg));
    /* Deprecated as on the graph; the frontend no longer sets it on a plan
     * it builds. Set it when accepted. */
    (void)cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    MX_GCONV_TRY(cudnnBackendFinalize(p->plan));
    int64_t cnt = 0;
    MX_GCONV_TRY(
        cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &p->ws));
    if (p->ws < 0 || p->ws > f.ws_cap) mx_gconv_destroy(&p->plan);
    return CUDNN_STATUS_SUCCESS;
}

/* Runs `plan` on the handle's stream: y = conv(x, w), workspace `ws` (not
 * NULL, at least the plan's workspace). */
static inline cudnnStatus_t mx_gconv_execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, const void *x,
                                             const void *w, void *y, void *ws)
{
    cudnnBackendDescriptor_t pack = nullptr;
    cudnnStatus_t st = mx_gconv_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    const int64_t uids[3] = {MX_GCONV_UID_X, MX_GCONV_UID_W, MX_GCONV_UID_Y};
    void *ptrs[3] = {const_cast<void *>(x), const_cast<void *>(w), y};
    st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(pack);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(handle, plan, pack);
    cudnnBackendDestroyDescriptor(pack);
    return st;
}

#endif /* MX_OPS_CUDA_CUDNN_GRAPH_CONV_CUH */
