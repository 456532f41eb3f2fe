/*
 * deconvolution.cu - Deconvolution on cuDNN, in fp32 with CUDNN_FMA_MATH
 * (no TF32). A deconvolution is the transpose of the convolution whose
 * input has the deconvolution's output shape (N, F, OH, OW) and whose
 * output has its data shape (N, C, H, W), with the same (C, F/g, KH, KW)
 * weight, pad, stride, dilation and groups (1-D as H = 1). So:
 *   forward        y  = cudnnConvolutionBackwardData(w, x) (+ bias, cudnnAddTensor)
 *   backward data  dx = cudnnConvolutionForward(dy, w)
 *   weight grad    dw = cudnnConvolutionBackwardFilter(dy as the data, x as the output gradient)
 *   bias grad      db = cudnnConvolutionBackwardBias(dy)
 * each written per its request through cuDNN's beta. pad and adj come from
 * target_shape as on the CPU (deconv_resolve); the adj extra rows are the
 * ones that convolution never reaches. Algorithms: cuDNN's heuristics
 * (cudnnGet*_v7), the first FMA-math suggestion whose workspace fits the
 * layer's `workspace` (MB), from the worker's scratch (deterministic ones
 * only under MXNET_ENFORCE_DETERMINISM); cudnn_tune is accepted and has no
 * further effect. cudnn_off=True is refused with
 * MX_ERR_UNSUPPORTED (no non-cuDNN GPU path).
 * float16 and bfloat16 (mixed precision; data, weight, bias, output and
 * their gradients all of one type): the same calls on half descriptors
 * with float compute (float accumulation, results rounded to the type);
 * the heuristics list tensor-op algorithms too (CUDNN_TENSOR_OP_MATH) and
 * the first admitted one runs under the math type its entry reports (no
 * down-conversion; ops/cuda/cudnn_conv.cuh); determinism and the
 * workspace cap as for float32. The bias is added and its gradient summed
 * by own kernels in float (cudnn_conv.cuh), the bias added to the output
 * already rounded to the type. float32 keeps FMA math and today's bits;
 * other dtypes are refused (MX_ERR_UNSUPPORTED).
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/cudnn_conv.cuh"

extern "C" {
#include "ops/deconvolution.h"
}

#include <limits.h>

/* The matching convolution's 2-D problem: input (n, f, oh, ow) is the
 * deconvolution's output, output (n, c, h, w) its data. */
struct deconv_gpu_geom {
    int n, c, h, w, f, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, groups;
};

static mx_status deconv_gpu_geometry(const deconv_params *p, const mx_shape *d, deconv_gpu_geom *g)
{
    const deconv_dims z = deconv_resolve(p, d);
    const int64_t v[] = {d->dims[0], d->dims[1], z.in[0], z.in[1], p->num_filter, z.out[0], z.out[1],
                         z.kernel[0], z.kernel[1], z.stride[0], z.stride[1], z.dilate[0], z.dilate[1], z.pad[0],
                         z.pad[1], p->num_group};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (v[i] < 0 || v[i] > INT_MAX)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "Deconvolution: a size (%lld) exceeds cuDNN's int range on gpu",
                            (long long)v[i]);
    *g = {(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5], (int)v[6], (int)v[7],
          (int)v[8], (int)v[9], (int)v[10], (int)v[11], (int)v[12], (int)v[13], (int)v[14], (int)v[15]};
    return MX_OK;
}

using deconv_descs = mx_cudnn_conv;

static mx_status deconv_descs_init(deconv_descs *d, const deconv_gpu_geom &g, mx_dtype dtype)
{
    /* The convolution whose backward data is this forward: input (n, f, oh,
     * ow), output the data shape (n, c, h, w), cuDNN's filter (K, C/groups,
     * kh, kw) with K = c, C = f; the bias is over f. */
    const mx_cudnn_conv_shape shape = {g.n,  g.f,  g.oh, g.ow, g.c,  g.h,  g.w,      g.kh, g.kw,
                                       g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, g.groups, g.f};
    int dims[4];
    MX_TRY(mx_cudnn_conv_init(d, "Deconvolution", shape, dtype, dims));
    /* The convolution of the output shape must give back the data shape. */
    const int n = dims[0], c = dims[1], h = dims[2], w = dims[3];
    if (n != g.n || c != g.c || h != g.h || w != g.w)
        return MX_ERROR(MX_ERR_DEVICE,
                        "Deconvolution: cuDNN's convolution of the output (%d, %d, %d, %d) gives (%d, %d, %d, %d), "
                        "not the data shape (%d, %d, %d, %d)",
                        g.n, g.f, g.oh, g.ow, n, c, h, w, g.n, g.c, g.h, g.w);
    return MX_OK;
}

enum deconv_dir { DC_FWD, DC_BWD_DATA, DC_BWD_FILTER }; /* directions of the matching convolution */
static const char *const deconv_dir_names[] = {"convolution forward (backward data)",
                                               "convolution backward data (forward)",
                                               "convolution backward filter (weight gradient)"};
enum { DC_MAX_ALGOS = 16 };

/* One direction's algorithm, its workspace and (half) its math type. */
struct deconv_algo {
    int algo;
    size_t ws;
    cudnnMathType_t math;
};

/* The heuristics' first usable algorithm within `limit` bytes (float32:
 * FMA math; half: tensor ops too, never down-conversion). Half: the
 * descriptor is left under its math type, for the workspace query. */
template <typename P>
static bool deconv_pick(const deconv_descs &d, const P *r, int got, size_t limit, deconv_algo *out)
{
    const bool only_deterministic = mx_determinism_enforced();
    for (int i = 0; i < got; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || !mx_cudnn_conv_math_ok(d.dtype, r[i].mathType) ||
            r[i].memory > limit)
            continue;
        if (only_deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (mx_cudnn_conv_math(d, r[i].mathType) != MX_OK) continue;
        out->algo = (int)r[i].algo;
        out->ws = r[i].memory;
        out->math = r[i].mathType;
        return true;
    }
    return false;
}

static mx_status deconv_choose(cudnnHandle_t h, const deconv_descs &d, deconv_dir dir, size_t limit, deconv_algo *a)
{
    int got = 0;
    bool ok;
    int *algo = &a->algo;
    size_t *ws = &a->ws;
    MX_TRY(mx_cudnn_conv_math(d, mx_cudnn_conv_list_math(d.dtype))); /* half: tensor ops listed too */
    if (dir == DC_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[DC_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, DC_MAX_ALGOS, &got, r));
        ok = deconv_pick(d, r, got, limit, a);
        if (ok)
            MX_CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                                 (cudnnConvolutionFwdAlgo_t)*algo, ws));
    } else if (dir == DC_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[DC_MAX_ALGOS];
        MX_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, DC_MAX_ALGOS, &got, r));
        ok = deconv_pick(d, r, got, limit, a);
        if (ok)
            MX_CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x,
                                                                      (cudnnConvolutionBwdDataAlgo_t)*algo, ws));
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[DC_MAX_ALGOS];
        MX_CUDNN_TRY(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, DC_MAX_ALGOS, &got, r));
        ok = deconv_pick(d, r, got, limit, a);
        if (ok)
            MX_CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                                        (cudnnConvolutionBwdFilterAlgo_t)*algo, ws));
    }
    if (!ok)
        return MX_ERROR(MX_ERR_UNSUPPORTED,
                        "Deconvolution: cuDNN has no %s%s algorithm for the %s within workspace %zu bytes%s",
                        mx_determinism_enforced() ? "deterministic " : "",
                        d.dtype == MX_FLOAT32 ? "FMA-math" : mx_dtype_name(d.dtype), deconv_dir_names[dir], limit,
                        mx_determinism_enforced() ? " (MXNET_ENFORCE_DETERMINISM is set)" : "");
    return MX_OK;
}

/* Every tensor of the call in `dtype` (the executor gives a node one
 * dtype; a mixed call is refused rather than misread). */
static mx_status deconv_check_dtypes(const char *what, const mx_tensor *t, int n, mx_dtype dtype)
{
    for (int i = 0; i < n; i++)
        if (t[i].data && t[i].dtype != dtype)
            return MX_ERROR(MX_ERR_UNSUPPORTED,
                            "Deconvolution: %s %d is %s but data is %s (one dtype per node on gpu)", what, i,
                            mx_dtype_name(t[i].dtype), mx_dtype_name(dtype));
    return MX_OK;
}

static mx_status deconv_gpu_refuse(const deconv_params *p)
{
    if (p->cudnn_off)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Deconvolution: parameter 'cudnn_off' value 'True' is not supported on "
                                            "gpu (there is no non-cuDNN GPU path); use cudnn_off=False");
    if (p->kernel.ndim != 1 && p->kernel.ndim != 2)
        return MX_ERROR(MX_ERR_UNSUPPORTED,
                        "Deconvolution: a %d-D kernel is not supported on gpu (1-D and 2-D only)", p->kernel.ndim);
    return MX_OK;
}

/* The layer's workspace cap (MB) in bytes; heuristics' zero-workspace
 * algorithms exist for every direction, so workspace=0 still runs. */
static size_t deconv_limit(const deconv_params *p) { return (size_t)p->workspace << 20; }

static mx_status deconv_gpu_forward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *in, const mx_req *req,
                                    mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const deconv_params *p = (const deconv_params *)vp;
    MX_TRY(deconv_gpu_refuse(p));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_dtype dtype = in[0].dtype;
    MX_TRY(deconv_check_dtypes("input", in, p->no_bias ? 2 : 3, dtype));
    MX_TRY(deconv_check_dtypes("output", out, 1, dtype));
    deconv_gpu_geom g;
    MX_TRY(deconv_gpu_geometry(p, &in[0].shape, &g));
    if (g.n == 0) return MX_OK; /* an empty batch: nothing to write */
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    deconv_descs d;
    MX_TRY(deconv_descs_init(&d, g, dtype));
    deconv_algo a;
    MX_TRY(deconv_choose(h, d, DC_BWD_DATA, deconv_limit(p), &a));
    void *ws = nullptr;
    if (a.ws) MX_TRY(mx_cuda_worker_scratch(worker, a.ws, &ws));
    const float one = 1.0f, beta = mx_cuda_beta(req[0]);
    /* y = the convolution's data gradient for "output gradient" x. */
    MX_TRY(mx_cudnn_conv_math(d, a.math));
    MX_CUDNN_TRY(cudnnConvolutionBackwardData(h, &one, d.w, in[1].data, d.y, in[0].data, d.conv,
                                              (cudnnConvolutionBwdDataAlgo_t)a.algo, ws, a.ws, &beta, d.x,
                                              out[0].data));
    if (p->no_bias) return MX_OK;
    if (dtype == MX_FLOAT32) MX_CUDNN_TRY(cudnnAddTensor(h, &one, d.b, in[2].data, &one, d.x, out[0].data));
    else
        MX_TRY(mx_conv_bias_add(mx_cuda_op_stream(ctx), "Deconvolution", dtype, out[0].data, in[2].data, g.n, g.f,
                                (int64_t)g.oh * g.ow));
    return MX_OK;
}

static mx_status deconv_gpu_backward(const mx_op_ctx *ctx, const void *vp, const mx_tensor *out_grad,
                                     const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                     mx_tensor *aux)
{
    (void)out;
    (void)aux;
    const deconv_params *p = (const deconv_params *)vp;
    MX_TRY(deconv_gpu_refuse(p));
    const bool want_dx = req[0] != MX_REQ_NULL && in_grad[0].data;
    const bool want_dw = req[1] != MX_REQ_NULL && in_grad[1].data;
    const bool want_db = !p->no_bias && req[2] != MX_REQ_NULL && in_grad[2].data;
    if (!want_dx && !want_dw && !want_db) return MX_OK;
    const mx_dtype dtype = in[0].dtype;
    MX_TRY(deconv_check_dtypes("input", in, 2, dtype));
    MX_TRY(deconv_check_dtypes("output gradient", out_grad, 1, dtype));
    MX_TRY(deconv_check_dtypes("input gradient", in_grad, want_db ? 3 : 2, dtype));
    deconv_gpu_geom g;
    MX_TRY(deconv_gpu_geometry(p, &in[0].shape, &g));
    const size_t esize = mx_dtype_size(dtype); /* 0 bits are 0.0 in all three types */
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (g.n == 0) { /* an empty batch: zero weight and bias gradients (written), nothing else */
        if (want_dw && req[1] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0,
                                        (size_t)g.c * (g.f / g.groups) * g.kh * g.kw * esize, stream));
        if (want_db && req[2] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[2].data, 0, (size_t)g.f * esize, stream));
        return MX_OK;
    }
    cudnnHandle_t h;
    MX_TRY(mx_cuda_worker_cudnn(worker, &h));
    deconv_descs d;
    MX_TRY(deconv_descs_init(&d, g, dtype));
    deconv_algo ax{}, aw{};
    if (want_dx) MX_TRY(deconv_choose(h, d, DC_FWD, deconv_limit(p), &ax));
    if (want_dw) MX_TRY(deconv_choose(h, d, DC_BWD_FILTER, deconv_limit(p), &aw));
    const size_t ws_bytes = ax.ws > aw.ws ? ax.ws : aw.ws;
    void *ws = nullptr;
    if (ws_bytes) MX_TRY(mx_cuda_worker_scratch(worker, ws_bytes, &ws));
    const float one = 1.0f;
    if (want_dx) { /* dx = conv(dy, w) */
        const float beta = mx_cuda_beta(req[0]);
        MX_TRY(mx_cudnn_conv_math(d, ax.math));
        MX_CUDNN_TRY(cudnnConvolutionForward(h, &one, d.x, out_grad[0].data, d.w, in[1].data, d.conv,
                                             (cudnnConvolutionFwdAlgo_t)ax.algo, ws, ax.ws, &beta, d.y,
                                             in_grad[0].data));
    }
    if (want_dw) { /* the convolution's weight gradient: dy is its data, x its output gradient */
        const float beta = mx_cuda_beta(req[1]);
        MX_TRY(mx_cudnn_conv_math(d, aw.math));
        MX_CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, d.x, out_grad[0].data, d.y, in[0].data, d.conv,
                                                    (cudnnConvolutionBwdFilterAlgo_t)aw.algo, ws, aw.ws, &beta, d.w,
                                                    in_grad[1].data));
    }
    if (want_db && dtype == MX_FLOAT32) {
        const float beta = mx_cuda_beta(req[2]);
        MX_CUDNN_TRY(cudnnConvolutionBackwardBias(h, &one, d.x, out_grad[0].data, &beta, d.b, in_grad[2].data));
    } else if (want_db) {
        MX_TRY(mx_conv_bias_grad(stream, "Deconvolution", dtype, out_grad[0].data, in_grad[2].data, g.n, g.f,
                                 (int64_t)g.oh * g.ow, req[2]));
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_deconvolution = {deconv_gpu_forward, deconv_gpu_backward, NULL,
                                                          MX_HALF_DTYPES};
