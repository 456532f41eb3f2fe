/*
 * slice.cu - slice, slice_axis and slice_like's CUDA kernels, on the plan
 * slice.c computes (mx_slice_plan_*): one thread per output element, its
 * coordinates unravelled over the plan's counts and mapped to
 * begin + index * step per axis in the data. Forward gathers; backward
 * zeroes the data gradient (unless adding) and scatters the output
 * gradient back; the positions are distinct, so no atomics. slice_like's
 * shape_like gets zeros. float32, as on the CPU.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/slice.h"
}

/* The plan as the kernel walks it: output counts, data strides per step
 * along each axis, and the offset of the first element. */
typedef struct slice_gpu_walk {
    int nd;
    int64_t len[MX_MAX_NDIM], stride[MX_MAX_NDIM], base, n;
} slice_gpu_walk;

static slice_gpu_walk slice_gpu_walk_of(const slice_plan *pl, const mx_shape *d)
{
    slice_gpu_walk w;
    w.nd = pl->ndim;
    w.base = 0;
    w.n = 1;
    int64_t s = 1;
    for (int k = pl->ndim - 1; k >= 0; k--) {
        w.len[k] = pl->len[k];
        w.stride[k] = s * pl->step[k];
        w.base += pl->begin[k] * s;
        w.n *= pl->len[k];
        s *= d->dims[k];
    }
    return w;
}

__device__ __forceinline__ int64_t slice_gpu_offset(const slice_gpu_walk &w, int64_t o)
{
    int64_t off = w.base;
    for (int k = w.nd - 1; k >= 0; k--) {
        off += o % w.len[k] * w.stride[k];
        o /= w.len[k];
    }
    return off;
}

__global__ void slice_gather_kernel(const float *big, float *small, slice_gpu_walk w, mx_req req)
{
    MX_CUDA_FOR(o, w.n) mx_cuda_assign(req, &small[o], big[slice_gpu_offset(w, o)]);
}

/* After zeroing for write: big[pos] = small (write) or += small (add). */
__global__ void slice_scatter_kernel(float *big, const float *small, slice_gpu_walk w, mx_req req)
{
    MX_CUDA_FOR(o, w.n) mx_cuda_assign(req, &big[slice_gpu_offset(w, o)], small[o]);
}

static mx_status slice_gpu_fwd(const mx_op_ctx *ctx, const char *op, const slice_plan *pl, const mx_tensor *in,
                               const mx_req *req, mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    const slice_gpu_walk w = slice_gpu_walk_of(pl, &in[0].shape);
    if (w.n == 0) return MX_OK;
    slice_gather_kernel<<<mx_cuda_blocks(w.n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, w, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status slice_gpu_bwd(const mx_op_ctx *ctx, const slice_plan *pl, const mx_tensor *out_grad,
                               const mx_req *req, mx_tensor *in_grad)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n_big = mx_shape_size(&in_grad[0].shape);
    if (req[0] != MX_REQ_ADD && n_big > 0)
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n_big * sizeof(float), stream));
    const slice_gpu_walk w = slice_gpu_walk_of(pl, &in_grad[0].shape);
    if (w.n == 0) return MX_OK;
    slice_scatter_kernel<<<mx_cuda_blocks(w.n), MX_CUDA_THREADS, 0, stream>>>(
        (float *)in_grad[0].data, (const float *)out_grad[0].data, w, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status slice_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                   mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_slice(p, &in[0].shape, &pl));
    return slice_gpu_fwd(ctx, "slice", &pl, in, req, out);
}

static mx_status slice_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                    mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_slice(p, &in_grad[0].shape, &pl));
    return slice_gpu_bwd(ctx, &pl, out_grad, req, in_grad);
}

static mx_status slice_axis_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                        mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_axis(p, &in[0].shape, &pl));
    return slice_gpu_fwd(ctx, "slice_axis", &pl, in, req, out);
}

static mx_status slice_axis_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                         const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                         mx_tensor *in_grad, mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_axis(p, &in_grad[0].shape, &pl));
    return slice_gpu_bwd(ctx, &pl, out_grad, req, in_grad);
}

static mx_status slice_like_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                        mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_like(p, &in[0].shape, &in[1].shape, &pl));
    return slice_gpu_fwd(ctx, "slice_like", &pl, in, req, out);
}

static mx_status slice_like_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                         const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                         mx_tensor *in_grad, mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(mx_slice_plan_like(p, &in_grad[0].shape, &in_grad[1].shape, &pl));
    MX_TRY(slice_gpu_bwd(ctx, &pl, out_grad, req, in_grad));
    const int64_t n_like = mx_shape_size(&in_grad[1].shape);
    if ((req[1] == MX_REQ_WRITE || req[1] == MX_REQ_INPLACE) && n_like > 0) /* shape_like only lends its shape */
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, (size_t)n_like * sizeof(float), mx_cuda_op_stream(ctx)));
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_slice = {slice_gpu_forward, slice_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_slice_axis = {slice_axis_gpu_forward, slice_axis_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_slice_like = {slice_like_gpu_forward, slice_like_gpu_backward, NULL, 0};
