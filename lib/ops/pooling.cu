/*
 * pooling.cu - Pooling's CUDA kernels. Unless cudnn_off is set, the
 * common cases run on cuDNN (cudnnPoolingForward / cudnnPoolingBackward,
 * as MXNet's CuDNNPoolingOp), where cuDNN computes exactly what pooling.c
 * does (pool_cudnn_fits):
 *   - max or avg over 1 or 2 spatial axes (1-d as (N, C, 1, W); 3-d only
 *     where the depth axis is trivial), symmetric padding smaller than the
 *     window on every axis (so every window holds data), global_pool as a
 *     window of the whole plane;
 *   - the output size pooling.c inferred equals cudnnGetPooling2dForward-
 *     OutputDim's (always for 'valid'; 'full' only where its ceil equals
 *     the floor, so no window is clipped at the padded end);
 *   - avg: count_include_pad -> CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
 *     (divisor k, which is pooling.c's padded window under these sizes),
 *     else _EXCLUDE_PADDING (the clipped window); rounding may differ from
 *     the CPU's raster-order sum in the last bits;
 *   - max: CUDNN_POOLING_MAX_DETERMINISTIC (ResNet-50's pool1 backward,
 *     3x3/2 pad 1 on 64x64x112x112, H200: 1.04 ms; CUDNN_POOLING_MAX's
 *     atomics 0.38 ms; the own kernels 2.0 ms), CUDNN_NOT_PROPAGATE_NAN (the
 *     CPU ignores NaN inputs: v > acc is false). Differences left: a window
 *     whose every element is NaN or -inf gives -FLT_MAX on the CPU (its
 *     starting value) and whatever cuDNN gives (-inf or NaN) here; and on
 *     exact ties the CPU routes the gradient to the first maximum in raster
 *     order, cuDNN by its own rule (reportedly to one maximum, not all;
 *     which one is not documented). Random float inputs have no ties.
 *   - backward needs the forward output (kept: MX_BWD_OUT_DATA); dx per
 *     request through beta (0 overwrite, 1 accumulate).
 * cuDNN answering CUDNN_STATUS_NOT_SUPPORTED also falls back.
 *
 * The own kernels below serve everything else (sum, 'full' with clipped
 * windows, padding >= window, 3-d pooling, cudnn_off=True), written so that
 * every rule of pooling.c holds exactly:
 *   - the window along an axis starts at o*s - p, ends at
 *     min(start + k, in + p) and is clipped to [0, in) for the data;
 *   - max starts from -FLT_MAX and takes v when v > acc (raster order);
 *     avg divides by the clipped padded window (count_include_pad) or the
 *     clipped window, NaN for an empty one; sum does not divide;
 *   - max backward gives each output's gradient to the first element of
 *     its window (raster order) equal to the output.
 * Forward: one thread per output element. Backward: for max, one thread
 * per output finds that first element (its plane offset, into scratch);
 * then one thread per input element gathers, in output raster order, the
 * gradients of the windows covering it (no atomics, deterministic).
 * global_pool is the window = whole plane case of the same kernels.
 *
 * float16 and bfloat16 (mixed precision; x, y, dy and dx share the type):
 * cuDNN gets descriptors of that type (float compute, float alpha / beta);
 * for these types any NOT_SUPPORTED_* answer or a plain BAD_PARAM (a cuDNN
 * build whose pooling lacks the type) also falls back to the own kernels.
 * Those are templates on the element type (half.cuh): loads widened to
 * float, the window reduced in float, each stored element rounded once to
 * the type, as the CPU's half nodes compute (float kernels between half
 * tensors). Max backward in these types always runs the own kernels: at 11
 * (8) significant bits a window often holds its maximum twice (bfloat16: a
 * few percent of 3x3 windows of uniform data), and the gradient must go to
 * the first one in raster order as on the CPU, which cuDNN does not
 * promise. A max is one of the inputs, so its stored value is exact and the
 * first-equal search finds it as in float32. float32 keeps its code, its
 * cuDNN calls and its bits.
 */
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/pooling.h"
}

#include <float.h>
#include <math.h>

/* pooling.c's geometry (pool_geom, pooling.h) and what the kernels derive. */
struct pool_gpu_geom : pool_geom {
    int64_t in_plane, out_plane;
    int type;
    bool incl;
};

static void pool_gpu_geometry(const pool_params *pp, const mx_shape *data, const mx_shape *outp, pool_gpu_geom *g)
{
    mx_pool_geometry(pp, data, outp, g);
    g->in_plane = g->in[0] * g->in[1] * g->in[2];
    g->out_plane = g->out[0] * g->out[1] * g->out[2];
    g->type = pp->pool_type;
    g->incl = pp->count_include_pad;
}

/* pooling.h's window of output o along axis a, under this geometry. */
__device__ __forceinline__ int64_t pool_axis_window(const pool_gpu_geom &g, int a, int64_t o, int64_t *lo,
                                                    int64_t *hi)
{
    return mx_pool_axis_window(&g, a, o, g.incl, lo, hi);
}

/* The avg divisor as pooling.c forms it: (float)(nd*nh) * (float)nw. */
__device__ __forceinline__ float pool_size(int64_t nd, int64_t nh, int64_t nw)
{
    return (float)(nd * nh) * (float)nw;
}

/* Splits output index i into plane and (od, oh, ow). */
__device__ __forceinline__ void pool_out_pos(const pool_gpu_geom &g, int64_t i, int64_t *pl, int64_t *od,
                                             int64_t *oh, int64_t *ow)
{
    *pl = i / g.out_plane;
    int64_t r = i - *pl * g.out_plane;
    *ow = r % g.out[2];
    r /= g.out[2];
    *oh = r % g.out[1];
    *od = r / g.out[1];
}

template <typename T>
__global__ void pool_forward_kernel(pool_gpu_geom g, const T *x, T *y, int64_t n_out, mx_req req)
{
    MX_CUDA_FOR(i, n_out)
    {
        int64_t pl, od, oh, ow, d0, d1, h0, h1, w0, w1;
        pool_out_pos(g, i, &pl, &od, &oh, &ow);
        const int64_t nd = pool_axis_window(g, 0, od, &d0, &d1);
        const int64_t nh = pool_axis_window(g, 1, oh, &h0, &h1);
        const int64_t nw = pool_axis_window(g, 2, ow, &w0, &w1);
        const T *xp = x + pl * g.in_plane;
        float acc = g.type == POOL_MAX ? -FLT_MAX : 0.0f;
        for (int64_t d = d0; d < d1; d++)
            for (int64_t h = h0; h < h1; h++) {
                const T *row = xp + (d * g.in[1] + h) * g.in[2];
                for (int64_t w = w0; w < w1; w++) {
                    const float v = mx_load(&row[w]);
                    if (g.type == POOL_MAX) acc = v > acc ? v : acc;
                    else acc += v;
                }
            }
        if (g.type == POOL_AVG) {
            const float size = pool_size(nd, nh, nw);
            acc = size == 0.0f ? NAN : acc / size;
        }
        mx_assign(req, &y[i], acc);
    }
}

/* Max backward, step 1: the plane offset of the first element of each
 * output's window (raster order) equal to the output, or -1. */
template <typename T>
__global__ void pool_argmax_kernel(pool_gpu_geom g, const T *x, const T *y, int64_t *arg, int64_t n_out)
{
    MX_CUDA_FOR(i, n_out)
    {
        int64_t pl, od, oh, ow, d0, d1, h0, h1, w0, w1;
        pool_out_pos(g, i, &pl, &od, &oh, &ow);
        pool_axis_window(g, 0, od, &d0, &d1);
        pool_axis_window(g, 1, oh, &h0, &h1);
        pool_axis_window(g, 2, ow, &w0, &w1);
        const T *xp = x + pl * g.in_plane;
        const float yv = mx_load(&y[i]);
        int64_t at = -1;
        for (int64_t d = d0; d < d1 && at < 0; d++)
            for (int64_t h = h0; h < h1 && at < 0; h++) {
                const int64_t base = (d * g.in[1] + h) * g.in[2];
                for (int64_t w = w0; w < w1; w++)
                    if (mx_load(&xp[base + w]) == yv) {
                        at = base + w;
                        break;
                    }
            }
        arg[i] = at;
    }
}

/* The outputs along axis a whose windows hold input position x: those o
 * with o*s - p <= x < o*s - p + k (the window's end clip at in + p never
 * excludes an x < in), clamped to [0, out). */
__device__ __forceinline__ void pool_covering(const pool_gpu_geom &g, int a, int64_t x, int64_t *o0, int64_t *o1)
{
    const int64_t s = g.s[a], t = x + g.p[a]; /* o*s <= t and o*s > t - k */
    int64_t lo = t - g.k[a] + 1;              /* o >= ceil(lo / s) */
    lo = lo <= 0 ? 0 : (lo + s - 1) / s;
    int64_t hi = t / s + 1; /* o <= floor(t / s) */
    if (hi > g.out[a]) hi = g.out[a];
    *o0 = lo;
    *o1 = hi;
}

/* Step 2 (every type): dx[i] (+)= sum over covering outputs, in output
 * raster order, of max: dy where the output's first maximum is i;
 * avg: dy / size (0 for an empty window); sum: dy. */
template <typename T>
__global__ void pool_backward_kernel(pool_gpu_geom g, const T *dy, const int64_t *arg, T *dx, int64_t n_in, mx_req req)
{
    MX_CUDA_FOR(i, n_in)
    {
        const int64_t pl = i / g.in_plane, r = i - pl * g.in_plane;
        const int64_t xw = r % g.in[2], xh = (r / g.in[2]) % g.in[1], xd = r / (g.in[2] * g.in[1]);
        int64_t od0, od1, oh0, oh1, ow0, ow1;
        pool_covering(g, 0, xd, &od0, &od1);
        pool_covering(g, 1, xh, &oh0, &oh1);
        pool_covering(g, 2, xw, &ow0, &ow1);
        const T *dyp = dy + pl * g.out_plane;
        const int64_t *argp = arg ? arg + pl * g.out_plane : nullptr;
        float acc = req == MX_REQ_ADD ? mx_load(&dx[i]) : 0.0f;
        for (int64_t od = od0; od < od1; od++) {
            int64_t lo, hi;
            const int64_t nd = pool_axis_window(g, 0, od, &lo, &hi);
            for (int64_t oh = oh0; oh < oh1; oh++) {
                const int64_t nh = pool_axis_window(g, 1, oh, &lo, &hi);
                for (int64_t ow = ow0; ow < ow1; ow++) {
                    const int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
                    if (g.type == POOL_MAX) {
                        if (argp[o] == r) acc += mx_load(&dyp[o]);
                    } else if (g.type == POOL_AVG) {
                        const int64_t nw = pool_axis_window(g, 2, ow, &lo, &hi);
                        const float size = pool_size(nd, nh, nw);
                        acc += size == 0.0f ? 0.0f : mx_load(&dyp[o]) / size;
                    } else {
                        acc += mx_load(&dyp[o]);
                    }
                }
            }
        }
        mx_store(&dx[i], acc);
    }
}

/* ------------------------------------------------------------ cuDNN */

struct pool_cudnn_desc {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnPoolingDescriptor_t pool = nullptr;
    pool_cudnn_desc() = default;
    pool_cudnn_desc(const pool_cudnn_desc &) = delete;
    pool_cudnn_desc &operator=(const pool_cudnn_desc &) = delete;
    ~pool_cudnn_desc()
    {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (pool) cudnnDestroyPoolingDescriptor(pool);
    }
};

/* Whether cuDNN can compute this call exactly as pooling.c (see the top
 * of this file); the output size is checked by pool_cudnn_init. */
static bool pool_cudnn_fits(const pool_params *pp, const pool_gpu_geom &g, const mx_shape *data)
{
    const int64_t lim = 2147483647;
    if (pp->cudnn_off) return false;
    if (g.type != POOL_MAX && g.type != POOL_AVG) return false;
    if (pp->pooling_convention != CONV_VALID && pp->pooling_convention != CONV_FULL) return false;
    if (data->ndim < 3 || data->ndim > 5) return false;
    /* 2-d problem: the depth axis (a padding axis below 5-d data) is trivial */
    if (g.in[0] != 1 || g.out[0] != 1 || g.k[0] != 1 || g.s[0] != 1 || g.p[0] != 0) return false;
    for (int a = 1; a < 3; a++) {
        if (g.k[a] < 1 || g.s[a] < 1 || g.p[a] < 0 || g.p[a] >= g.k[a]) return false; /* every window holds data */
        if (g.in[a] < 1 || g.out[a] < 1 || g.k[a] > lim || g.s[a] > lim) return false;
    }
    /* int dims and strides in the descriptors */
    if (data->dims[0] < 1 || data->dims[1] < 1 || data->dims[0] > lim || data->dims[1] > lim) return false;
    return g.planes * g.in_plane <= lim && g.planes * g.out_plane <= lim;
}

/* The descriptors of data (N, C, H, W) -> output (N, C, OH, OW) in dtype
 * dt; *ok false where cuDNN's output size differs from the inferred one
 * (own kernels). */
static mx_status pool_cudnn_init(pool_cudnn_desc *d, const pool_params *pp, const pool_gpu_geom &g,
                                 const mx_shape *data, mx_dtype dt, bool *ok)
{
    *ok = false;
    const int n = (int)data->dims[0], c = (int)data->dims[1];
    const cudnnDataType_t type = mx_cudnn_type(dt);
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->y));
    MX_CUDNN_TRY(cudnnCreatePoolingDescriptor(&d->pool));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, type, n, c, (int)g.in[1], (int)g.in[2]));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, type, n, c, (int)g.out[1], (int)g.out[2]));
    const cudnnPoolingMode_t mode = g.type == POOL_MAX         ? CUDNN_POOLING_MAX_DETERMINISTIC
                                    : pp->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                            : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    MX_CUDNN_TRY(cudnnSetPooling2dDescriptor(d->pool, mode, CUDNN_NOT_PROPAGATE_NAN, (int)g.k[1], (int)g.k[2],
                                             (int)g.p[1], (int)g.p[2], (int)g.s[1], (int)g.s[2]));
    int on, oc, oh, ow;
    MX_CUDNN_TRY(cudnnGetPooling2dForwardOutputDim(d->pool, d->x, &on, &oc, &oh, &ow));
    *ok = on == n && oc == c && oh == (int)g.out[1] && ow == (int)g.out[2];
    return MX_OK;
}

/* A cuDNN call's status: *used false (own kernels) on NOT_SUPPORTED; for
 * float16 / bfloat16 tensors also on any NOT_SUPPORTED_* code (cuDNN 9's
 * finer codes: _DATA_TYPE, ...) and on plain BAD_PARAM (a build of cuDNN
 * whose pooling lacks the type). float32's answers are handled as before. */
static mx_status pool_cudnn_status(cudnnStatus_t st, const char *call, mx_dtype dt, bool *used)
{
    *used = st == CUDNN_STATUS_SUCCESS;
    if (st == CUDNN_STATUS_SUCCESS || st == CUDNN_STATUS_NOT_SUPPORTED) return MX_OK;
    if (dt != MX_FLOAT32 && ((int)st / 1000 * 1000 == (int)CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM))
        return MX_OK;
    return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s (%s) failed: %s", call, mx_dtype_name(dt),
                        cudnnGetErrorString(st));
}

/* What both directions need: *ok false when cuDNN does not compute this
 * pooling exactly (the own kernels then run), else its descriptors in *d
 * and the worker's cuDNN handle. */
static mx_status pool_cudnn_begin(const mx_op_ctx *ctx, const pool_params *pp, const pool_gpu_geom &g,
                                  const mx_shape *data, mx_dtype dt, pool_cudnn_desc *d, cudnnHandle_t *h, bool *ok)
{
    *ok = false;
    if (!pool_cudnn_fits(pp, g, data)) return MX_OK;
    MX_TRY(pool_cudnn_init(d, pp, g, data, dt, ok));
    if (!*ok) return MX_OK;
    return mx_cuda_worker_cudnn(mx_cuda_op_worker(ctx), h);
}

/* *used: whether cuDNN computed out[0]; false leaves it to the own kernel. */
static mx_status pool_cudnn_forward(const mx_op_ctx *ctx, const pool_params *pp, const pool_gpu_geom &g,
                                    const mx_tensor *in, mx_req req, mx_tensor *out, bool *used)
{
    *used = false;
    pool_cudnn_desc d;
    cudnnHandle_t h;
    bool ok;
    MX_TRY(pool_cudnn_begin(ctx, pp, g, &in[0].shape, in[0].dtype, &d, &h, &ok));
    if (!ok) return MX_OK;
    const float alpha = 1.0f, beta = mx_cuda_beta(req);
    return pool_cudnn_status(cudnnPoolingForward(h, d.pool, &alpha, d.x, in[0].data, &beta, d.y, out[0].data),
                             "cudnnPoolingForward", in[0].dtype, used);
}

/* dx from y (the forward output), dy and x. */
static mx_status pool_cudnn_backward(const mx_op_ctx *ctx, const pool_params *pp, const pool_gpu_geom &g,
                                     const mx_tensor *out_grad, const mx_tensor *in, const mx_tensor *out,
                                     mx_req req, mx_tensor *in_grad, bool *used)
{
    *used = false;
    if (out == nullptr || out[0].data == nullptr) return MX_OK; /* no forward output: own kernel */
    if (g.type == POOL_MAX && in[0].dtype != MX_FLOAT32) return MX_OK; /* ties: the first maximum (top) */
    pool_cudnn_desc d;
    cudnnHandle_t h;
    bool ok;
    MX_TRY(pool_cudnn_begin(ctx, pp, g, &in[0].shape, in[0].dtype, &d, &h, &ok));
    if (!ok) return MX_OK;
    const float alpha = 1.0f, beta = mx_cuda_beta(req);
    return pool_cudnn_status(cudnnPoolingBackward(h, d.pool, &alpha, d.y, out[0].data, d.y, out_grad[0].data, d.x,
                                                  in[0].data, &beta, d.x, in_grad[0].data),
                             "cudnnPoolingBackward", in[0].dtype, used);
}

/* ------------------------------------------------------------ entry points */

static mx_status pool_gpu_unsupported(const pool_params *pp)
{
    /* pool_check refuses these at parse time already; kept for safety. */
    if (pp->pool_type != POOL_MAX && pp->pool_type != POOL_AVG && pp->pool_type != POOL_SUM)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pooling: parameter 'pool_type' value %d is not supported on gpu",
                        pp->pool_type);
    if (pp->pooling_convention == CONV_SAME)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pooling: parameter 'pooling_convention' value 'same' is not "
                                            "supported on gpu");
    return MX_OK;
}

static mx_status pool_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const pool_params *pp = (const pool_params *)p;
    MX_TRY(pool_gpu_unsupported(pp));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    pool_gpu_geom g;
    pool_gpu_geometry(pp, &in[0].shape, &out[0].shape, &g);
    const int64_t n_out = g.planes * g.out_plane;
    if (n_out == 0) return MX_OK;
    bool used;
    MX_TRY(pool_cudnn_forward(ctx, pp, g, in, req[0], out, &used));
    if (used) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "Pooling", {
        pool_forward_kernel<T><<<mx_cuda_blocks(n_out), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            g, (const T *)in[0].data, (T *)out[0].data, n_out, req[0]);
    });
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status pool_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)aux;
    const pool_params *pp = (const pool_params *)p;
    MX_TRY(pool_gpu_unsupported(pp));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    pool_gpu_geom g;
    pool_gpu_geometry(pp, &in[0].shape, &out_grad[0].shape, &g);
    const int64_t n_out = g.planes * g.out_plane, n_in = g.planes * g.in_plane;
    if (n_in == 0) return MX_OK;
    if (n_out > 0) {
        bool used;
        MX_TRY(pool_cudnn_backward(ctx, pp, g, out_grad, in, out, req[0], in_grad, &used));
        if (used) return MX_OK;
    }
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    int64_t *arg = nullptr;
    if (g.type == POOL_MAX && n_out > 0) {
        void *scratch = nullptr;
        MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), (size_t)n_out * sizeof(int64_t), &scratch));
        arg = (int64_t *)scratch;
        MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "Pooling", {
            pool_argmax_kernel<T><<<mx_cuda_blocks(n_out), MX_CUDA_THREADS, 0, stream>>>(
                g, (const T *)in[0].data, (const T *)out[0].data, arg, n_out);
        });
        MX_CUDA_LAUNCHED();
    }
    if (n_out == 0 && req[0] == MX_REQ_ADD) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "Pooling", {
        pool_backward_kernel<T><<<mx_cuda_blocks(n_in), MX_CUDA_THREADS, 0, stream>>>(
            g, (const T *)out_grad[0].data, arg, (T *)in_grad[0].data, n_in, req[0]);
    });
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_pooling = {pool_gpu_forward, pool_gpu_backward, NULL, MX_HALF_DTYPES};
