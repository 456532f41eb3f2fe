/*
 * softmax.cu - softmax and log_softmax's CUDA kernels: one thread per lane
 * (the n entries along the axis at one (outer, inner) position), the CPU's
 * formulas of softmax.c, max-subtracted:
 *   softmax      y = exp((x - m) / T) * (1 / sum exp((x - m) / T))
 *   log_softmax  y = (x - m) / T - log sum exp((x - m) / T)
 *   backward     dx = y (dy - sum dy*y) / T,  dx = (dy - exp(y) sum dy) / T
 * With use_length only the first length[lane] entries take part; the rest
 * are written 0 (left alone when adding), as on the CPU. Each thread reads
 * its whole lane before writing an entry it read, so in-place is safe.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/softmax.h"
}

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* length[i] of any numeric dtype, clamped to [0, n] (length_at of the CPU). */
__device__ __forceinline__ int64_t sm_length_at(const void *len, mx_dtype dt, int64_t i, int64_t n)
{
    double v;
    switch (dt) {
    case MX_FLOAT64: v = ((const double *)len)[i]; break;
    case MX_INT32: v = ((const int32_t *)len)[i]; break;
    case MX_INT64: v = (double)((const int64_t *)len)[i]; break;
    case MX_UINT8: v = ((const uint8_t *)len)[i]; break;
    case MX_INT8: v = ((const int8_t *)len)[i]; break;
    default: v = ((const float *)len)[i]; break;
    }
    if (!(v > 0)) return 0;
    return v >= (double)n ? n : (int64_t)v;
}

__global__ void sm_forward_kernel(const float *x, float *y, const void *len, mx_dtype len_dtype, int64_t lanes,
                                  int64_t n, int64_t inner, float it, bool logsm, mx_req req)
{
    MX_CUDA_FOR(lane, lanes)
    {
        const int64_t o = lane / inner, t = lane % inner, base = o * n * inner + t;
        const int64_t l = len ? sm_length_at(len, len_dtype, lane, n) : n;
        const float *xl = x + base;
        float *yl = y + base;
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = 0; j < l; j++) m = xl[j * inner] > m ? xl[j * inner] : m;
        for (int64_t j = 0; j < l; j++) s += expf((xl[j * inner] - m) * it);
        if (logsm) {
            const float ls = logf(s);
            for (int64_t j = 0; j < l; j++) mx_cuda_assign(req, &yl[j * inner], (xl[j * inner] - m) * it - ls);
        } else {
            const float inv = 1.0f / s;
            for (int64_t j = 0; j < l; j++) mx_cuda_assign(req, &yl[j * inner], expf((xl[j * inner] - m) * it) * inv);
        }
        if (req != MX_REQ_ADD)
            for (int64_t j = l; j < n; j++) yl[j * inner] = 0.0f;
    }
}

__global__ void sm_backward_kernel(const float *y, const float *dy, float *dx, int64_t lanes, int64_t n,
                                   int64_t inner, float it, bool logsm, mx_req req)
{
    MX_CUDA_FOR(lane, lanes)
    {
        const int64_t o = lane / inner, t = lane % inner, base = o * n * inner + t;
        const float *yl = y + base, *gl = dy + base;
        float *xl = dx + base, s = 0.0f;
        if (logsm) {
            for (int64_t j = 0; j < n; j++) s += gl[j * inner];
            for (int64_t j = 0; j < n; j++) {
                const int64_t k = j * inner;
                mx_cuda_assign(req, &xl[k], (gl[k] - expf(yl[k]) * s) * it);
            }
        } else {
            for (int64_t j = 0; j < n; j++) s += gl[j * inner] * yl[j * inner];
            for (int64_t j = 0; j < n; j++) {
                const int64_t k = j * inner;
                mx_cuda_assign(req, &xl[k], yl[k] * (gl[k] - s) * it);
            }
        }
    }
}

/* (outer, n, inner) around the axis; infer_shape has checked the axis. */
static void sm_gpu_geometry(const sm_params *sm, const mx_shape *s, int64_t *outer, int64_t *n, int64_t *inner)
{
    const int axis = (int)(sm->axis < 0 ? sm->axis + s->ndim : sm->axis);
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s->dims[i];
    for (int i = axis + 1; i < s->ndim; i++) *inner *= s->dims[i];
    *n = s->dims[axis];
}

/* 1 / T; check() has validated the text. */
static float sm_gpu_inv_temperature(const sm_params *sm)
{
    const double t = strcmp(sm->temperature, "None") ? strtod(sm->temperature, NULL) : 1.0;
    return (float)(1.0 / t);
}

static mx_status sm_gpu_forward(const mx_op_ctx *ctx, const sm_params *sm, bool logsm, const mx_tensor *in,
                                const mx_req *req, mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32 || out[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported on GPU (float32 only)",
                        logsm ? "log_softmax" : "softmax", mx_dtype_name(in[0].dtype));
    int64_t outer, n, inner;
    sm_gpu_geometry(sm, &in[0].shape, &outer, &n, &inner);
    const int64_t lanes = outer * inner;
    if (lanes == 0 || n == 0) return MX_OK;
    const void *len = sm->use_length ? in[1].data : NULL;
    const mx_dtype len_dtype = sm->use_length ? in[1].dtype : MX_FLOAT32;
    sm_forward_kernel<<<mx_cuda_blocks(lanes), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, len, len_dtype, lanes, n, inner, sm_gpu_inv_temperature(sm),
        logsm, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status sm_gpu_backward(const mx_op_ctx *ctx, const sm_params *sm, bool logsm, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad)
{
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (sm->use_length && req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD) { /* length gets no gradient */
        const size_t bytes = (size_t)mx_shape_size(&in[1].shape) * mx_dtype_size(in_grad[1].dtype);
        if (bytes) MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, bytes, stream));
    }
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, n, inner;
    sm_gpu_geometry(sm, &in[0].shape, &outer, &n, &inner);
    const int64_t lanes = outer * inner;
    if (lanes == 0 || n == 0) return MX_OK;
    /* Entries past a length have y = 0: softmax's formula gives them no
     * gradient, so the lengths are not needed here (as on the CPU). */
    sm_backward_kernel<<<mx_cuda_blocks(lanes), MX_CUDA_THREADS, 0, stream>>>(
        (const float *)out[0].data, (const float *)out_grad[0].data, (float *)in_grad[0].data, lanes, n, inner,
        sm_gpu_inv_temperature(sm), logsm, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status softmax_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                     mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return sm_gpu_forward(ctx, (const sm_params *)p, false, in, req, out);
}

static mx_status log_softmax_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,
                                         const mx_req *req, mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return sm_gpu_forward(ctx, (const sm_params *)p, true, in, req, out);
}

static mx_status softmax_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                      const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                      mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    return sm_gpu_backward(ctx, (const sm_params *)p, false, out_grad, in, out, req, in_grad);
}

static mx_status log_softmax_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                          const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                          mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    return sm_gpu_backward(ctx, (const sm_params *)p, true, out_grad, in, out, req, in_grad);
}

extern "C" const mx_op_kernels mx_op_gpu_softmax = {softmax_gpu_forward, softmax_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_log_softmax = {log_softmax_gpu_forward, log_softmax_gpu_backward, NULL, 0};
