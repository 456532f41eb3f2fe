/*
 * indexing.cu - take's and one_hot's CUDA kernels (indexing.c on the
 * CPU). Index values are floats truncated toward zero as idx_trunc does.
 * take: one thread per output element gathers (clip or wrap); backward
 * zeroes a's gradient (unless adding) and scatters with atomicAdd
 * (repeated indices: the order of the sums varies, so rounding may differ
 * from the CPU's in the last bits); indices get zeros. mode=raise would
 * need the indices on the host (a device sync) and is refused on GPU.
 * one_hot: one thread per output element; its indices get zeros.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/indexing.h"
}

#include <math.h>

/* An index truncated toward zero; NaN and values beyond int64 count as
 * far out of range (negative for NaN). */
__device__ __forceinline__ int64_t idx_gpu_trunc(float v)
{
    if (isfinite(v) && fabsf(v) < 4e18f) return (int64_t)v;
    return v > 0 ? INT64_MAX / 4 : -(INT64_MAX / 4);
}

/* The slice an index picks (clip or wrap). */
__device__ __forceinline__ int64_t take_gpu_index(int mode, float v, int64_t size)
{
    const int64_t j = idx_gpu_trunc(v);
    if (mode == TAKE_CLIP) return j < 0 ? 0 : j >= size ? size - 1 : j;
    return ((j % size) + size) % size;
}

__global__ void take_forward_kernel(const float *a, const float *idx, float *y, int64_t outer, int64_t size,
                                    int64_t inner, int64_t n_idx, int mode, mx_req req)
{
    MX_CUDA_FOR(e, outer * n_idx * inner)
    {
        const int64_t k = e % inner, i = e / inner % n_idx, o = e / inner / n_idx;
        const int64_t j = take_gpu_index(mode, idx[i], size);
        mx_cuda_assign(req, &y[e], a[(o * size + j) * inner + k]);
    }
}

__global__ void take_backward_kernel(const float *dy, const float *idx, float *da, int64_t outer, int64_t size,
                                     int64_t inner, int64_t n_idx, int mode)
{
    MX_CUDA_FOR(e, outer * n_idx * inner)
    {
        const int64_t k = e % inner, i = e / inner % n_idx, o = e / inner / n_idx;
        const int64_t j = take_gpu_index(mode, idx[i], size);
        atomicAdd(&da[(o * size + j) * inner + k], dy[e]);
    }
}

/* (outer, size, inner) of a around the axis; infer_shape has checked it. */
static void take_gpu_geom(const take_params *tp, const mx_shape *a, int64_t *outer, int64_t *size, int64_t *inner)
{
    const int axis = (int)(tp->axis < 0 ? tp->axis + a->ndim : tp->axis);
    *outer = 1, *inner = 1, *size = a->dims[axis];
    for (int k = 0; k < axis; k++) *outer *= a->dims[k];
    for (int k = axis + 1; k < a->ndim; k++) *inner *= a->dims[k];
}

static mx_status take_gpu_refuse(const take_params *tp)
{
    if (tp->mode == TAKE_RAISE)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "take: parameter 'mode' value 'raise' is not supported on gpu (checking "
                                            "the indices would wait for the device); use clip or wrap");
    return MX_OK;
}

static mx_status take_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const take_params *tp = (const take_params *)p;
    MX_TRY(take_gpu_refuse(tp));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32 || in[1].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "take: %s input is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype != MX_FLOAT32 ? in[0].dtype : in[1].dtype));
    int64_t outer, size, inner;
    take_gpu_geom(tp, &in[0].shape, &outer, &size, &inner);
    const int64_t n_idx = mx_shape_size(&in[1].shape), n = outer * n_idx * inner;
    if (size == 0 && n_idx) return MX_ERROR(MX_ERR_INVALID, "take: cannot pick from an empty axis");
    if (n == 0) return MX_OK;
    take_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (const float *)in[1].data, (float *)out[0].data, outer, size, inner, n_idx,
        tp->mode, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status take_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)out, (void)aux;
    const take_params *tp = (const take_params *)p;
    MX_TRY(take_gpu_refuse(tp));
    if (req[0] != MX_REQ_NULL && mx_determinism_enforced())
        return MX_ERROR(MX_ERR_UNSUPPORTED, "take backward on the GPU sums repeated indices with atomic adds, whose "
                                            "order varies: not deterministic (MXNET_ENFORCE_DETERMINISM is set)");
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n_idx = mx_shape_size(&in[1].shape);
    if ((req[1] == MX_REQ_WRITE || req[1] == MX_REQ_INPLACE) && n_idx > 0) /* indices get no gradient */
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, (size_t)n_idx * sizeof(float), stream));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, size, inner;
    take_gpu_geom(tp, &in_grad[0].shape, &outer, &size, &inner);
    if (size == 0 && n_idx) return MX_ERROR(MX_ERR_INVALID, "take: cannot pick from an empty axis");
    const int64_t n_a = mx_shape_size(&in_grad[0].shape), n = outer * n_idx * inner;
    if ((req[0] == MX_REQ_WRITE || req[0] == MX_REQ_INPLACE) && n_a > 0)
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n_a * sizeof(float), stream));
    if (n == 0) return MX_OK;
    take_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
        (const float *)out_grad[0].data, (const float *)in[1].data, (float *)in_grad[0].data, outer, size, inner,
        n_idx, tp->mode);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* ------------------------------------------------------------ one_hot */

__global__ void one_hot_kernel(const float *idx, float *y, int64_t n, int64_t depth, float on, float off, mx_req req)
{
    MX_CUDA_FOR(e, n * depth)
    {
        const int64_t i = e / depth, k = e % depth;
        mx_cuda_assign(req, &y[e], k == idx_gpu_trunc(idx[i]) ? on : off);
    }
}

static mx_status one_hot_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                     mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const one_hot_params *op = (const one_hot_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "one_hot: %s indices are not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    const int64_t n = mx_shape_size(&in[0].shape);
    if (n * op->depth == 0) return MX_OK;
    one_hot_kernel<<<mx_cuda_blocks(n * op->depth), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, n, op->depth, (float)op->on_value, (float)op->off_value,
        req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status one_hot_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                      const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                      mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)out_grad, (void)in, (void)out, (void)aux;
    const int64_t n = mx_shape_size(&in_grad[0].shape);
    if ((req[0] == MX_REQ_WRITE || req[0] == MX_REQ_INPLACE) && n > 0)
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n * sizeof(float), mx_cuda_op_stream(ctx)));
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_take = {take_gpu_forward, take_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_one_hot = {one_hot_gpu_forward, one_hot_gpu_backward, NULL, 0};
