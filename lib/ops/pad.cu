/*
 * pad.cu - Pad's CUDA kernels (pad.c on the CPU): one thread per output
 * element, each reading one data element (per axis: the index inside, the
 * nearest edge, or the mirror without the edge) or the constant. Backward
 * zeroes the data gradient (unless adding) and adds each output gradient
 * into the element it was read from with atomicAdd (edge and reflect read
 * some elements several times; the order of those sums varies, so the
 * rounding may differ from the CPU's in the last bits).
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/pad.h"
}

typedef struct pad_gpu_geom {
    int nd, mode;
    int64_t od[MX_MAX_NDIM], dd[MX_MAX_NDIM], before[MX_MAX_NDIM], st[MX_MAX_NDIM];
} pad_gpu_geom;

/* The data index that output index c of an axis reads, or -1 (constant):
 * pad_source of the CPU. */
__device__ __forceinline__ int64_t pad_gpu_source(int mode, int64_t c, int64_t before, int64_t dim)
{
    const int64_t i = c - before;
    if (i >= 0 && i < dim) return i;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) return i < 0 ? 0 : dim - 1;
    return i < 0 ? -i : 2 * (dim - 1) - i;
}

/* The data offset output element o reads, or -1. */
__device__ __forceinline__ int64_t pad_gpu_offset(const pad_gpu_geom &g, int64_t o)
{
    int64_t off = 0;
    bool constant = false;
    for (int k = g.nd - 1; k >= 0; k--) {
        const int64_t i = pad_gpu_source(g.mode, o % g.od[k], g.before[k], g.dd[k]);
        o /= g.od[k];
        if (i < 0) constant = true;
        else off += i * g.st[k];
    }
    return constant ? -1 : off;
}

__global__ void pad_forward_kernel(const float *x, float *y, int64_t n, pad_gpu_geom g, float cval, mx_req req)
{
    MX_CUDA_FOR(o, n)
    {
        const int64_t src = pad_gpu_offset(g, o);
        mx_cuda_assign(req, &y[o], src < 0 ? cval : x[src]);
    }
}

__global__ void pad_backward_kernel(const float *dy, float *dx, int64_t n, pad_gpu_geom g)
{
    MX_CUDA_FOR(o, n)
    {
        const int64_t src = pad_gpu_offset(g, o);
        if (src >= 0) atomicAdd(&dx[src], dy[o]);
    }
}

static mx_status pad_gpu_geom_of(const pad_params *pp, const mx_shape *d, pad_gpu_geom *g, int64_t *n_out)
{
    int64_t w[PAD_MAX_WIDTH];
    MX_TRY(mx_pad_widths(pp, d, w));
    g->nd = d->ndim;
    g->mode = pp->mode;
    int64_t s = 1;
    *n_out = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        g->dd[k] = d->dims[k];
        g->before[k] = w[2 * k];
        g->od[k] = d->dims[k] + w[2 * k] + w[2 * k + 1];
        g->st[k] = s;
        s *= d->dims[k];
        *n_out *= g->od[k];
    }
    return MX_OK;
}

static mx_status pad_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const pad_params *pp = (const pad_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pad: %s data is not supported (float32 only)", mx_dtype_name(in[0].dtype));
    pad_gpu_geom g;
    int64_t n;
    MX_TRY(pad_gpu_geom_of(pp, &in[0].shape, &g, &n));
    if (n == 0) return MX_OK;
    pad_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, n, g, (float)pp->constant_value, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status pad_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const pad_params *pp = (const pad_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (pp->mode != PAD_CONSTANT && mx_determinism_enforced())
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pad backward with mode edge or reflect on the GPU sums with atomic adds, "
                                            "whose order varies: not deterministic (MXNET_ENFORCE_DETERMINISM is set)");
    pad_gpu_geom g;
    int64_t n;
    MX_TRY(pad_gpu_geom_of(pp, &in_grad[0].shape, &g, &n));
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n_in = mx_shape_size(&in_grad[0].shape);
    if (req[0] != MX_REQ_ADD && n_in > 0)
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n_in * sizeof(float), stream));
    if (n == 0 || n_in == 0) return MX_OK;
    pad_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>((const float *)out_grad[0].data,
                                                                            (float *)in_grad[0].data, n, g);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_pad = {pad_gpu_forward, pad_gpu_backward, NULL, 0};
