/*
 * tile.cu - tile's and repeat's CUDA kernels, on tile.c's geometry
 * (mx_tile_dims, mx_repeat_geom). Forward: one thread per output element,
 * reading its source (tile: coordinates modulo data's dims; repeat: index
 * j / repeats along the axis). Backward: one thread per data element,
 * summing the output gradient over its copies in increasing output order
 * onto 0 (write) or the existing gradient (add) - the CPU's order, with
 * no atomics. float32, as on the CPU.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/tile.h"
}

/* Both shapes at the output's rank. */
typedef struct tile_gpu_geom {
    int nd;
    int64_t din[MX_MAX_NDIM], od[MX_MAX_NDIM], reps[MX_MAX_NDIM];
} tile_gpu_geom;

__global__ void tile_forward_kernel(const float *x, float *y, int64_t n, tile_gpu_geom g, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        int64_t rem = i, off = 0, st = 1;
        for (int k = g.nd - 1; k >= 0; k--) {
            off += rem % g.od[k] % g.din[k] * st;
            rem /= g.od[k];
            st *= g.din[k];
        }
        mx_cuda_assign(req, &y[i], x[off]);
    }
}

__global__ void tile_backward_kernel(const float *dy, float *dx, int64_t n, tile_gpu_geom g, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        int64_t c[MX_MAX_NDIM], r[MX_MAX_NDIM], ost[MX_MAX_NDIM];
        int64_t rem = i, s = 1;
        for (int k = g.nd - 1; k >= 0; k--) {
            c[k] = rem % g.din[k];
            rem /= g.din[k];
            r[k] = 0;
            ost[k] = s;
            s *= g.od[k];
        }
        float acc = req == MX_REQ_ADD ? dx[i] : 0.0f;
        for (;;) { /* the copies in increasing output order: odometer over reps */
            int64_t off = 0;
            for (int k = 0; k < g.nd; k++) off += (c[k] + r[k] * g.din[k]) * ost[k];
            acc += dy[off];
            int k = g.nd - 1;
            for (; k >= 0; k--) {
                if (++r[k] < g.reps[k]) break;
                r[k] = 0;
            }
            if (k < 0) break;
        }
        dx[i] = acc;
    }
}

static mx_status tile_gpu_geom_of(const void *p, const mx_shape *d, tile_gpu_geom *g, int64_t *n_in, int64_t *n_out)
{
    mx_shape din, o;
    int64_t reps[MX_MAX_NDIM];
    MX_TRY(mx_tile_dims((const tile_params *)p, d, &din, reps, &o));
    g->nd = o.ndim;
    *n_in = 1, *n_out = 1;
    for (int k = 0; k < o.ndim; k++) {
        g->din[k] = din.dims[k];
        g->od[k] = o.dims[k];
        g->reps[k] = reps[k];
        *n_in *= din.dims[k];
        *n_out *= o.dims[k];
    }
    return MX_OK;
}

static mx_status tile_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "tile: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    tile_gpu_geom g;
    int64_t n_in, n_out;
    MX_TRY(tile_gpu_geom_of(p, &in[0].shape, &g, &n_in, &n_out));
    if (n_out == 0) return MX_OK;
    tile_forward_kernel<<<mx_cuda_blocks(n_out), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, n_out, g, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status tile_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    tile_gpu_geom g;
    int64_t n_in, n_out;
    MX_TRY(tile_gpu_geom_of(p, &in_grad[0].shape, &g, &n_in, &n_out));
    if (n_in == 0) return MX_OK;
    if (n_out == 0) { /* no copies: a zero gradient, or nothing to add */
        if (req[0] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n_in * sizeof(float), mx_cuda_op_stream(ctx)));
        return MX_OK;
    }
    tile_backward_kernel<<<mx_cuda_blocks(n_in), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)out_grad[0].data, (float *)in_grad[0].data, n_in, g, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* ------------------------------------------------------------ repeat */

__global__ void repeat_forward_kernel(const float *x, float *y, int64_t n, int64_t len, int64_t inner, int64_t r,
                                      mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        const int64_t k = i % inner, j = i / inner % (len * r), a = i / inner / (len * r);
        mx_cuda_assign(req, &y[i], x[(a * len + j / r) * inner + k]);
    }
}

__global__ void repeat_backward_kernel(const float *dy, float *dx, int64_t n, int64_t len, int64_t inner, int64_t r,
                                       mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        const int64_t k = i % inner, l = i / inner % len, a = i / inner / len;
        float acc = req == MX_REQ_ADD ? dx[i] : 0.0f;
        for (int64_t t = 0; t < r; t++) acc += dy[(a * len * r + l * r + t) * inner + k];
        dx[i] = acc;
    }
}

static mx_status repeat_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                    mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const repeat_params *rp = (const repeat_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "repeat: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int64_t outer, len, inner;
    mx_shape o;
    MX_TRY(mx_repeat_geom(rp, &in[0].shape, &outer, &len, &inner, &o));
    const int64_t n = outer * len * rp->repeats * inner;
    if (n == 0) return MX_OK;
    repeat_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, n, len, inner, rp->repeats, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status repeat_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                     const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                     mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const repeat_params *rp = (const repeat_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, len, inner;
    mx_shape o;
    MX_TRY(mx_repeat_geom(rp, &in_grad[0].shape, &outer, &len, &inner, &o));
    const int64_t n = outer * len * inner;
    if (n == 0) return MX_OK;
    repeat_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)out_grad[0].data, (float *)in_grad[0].data, n, len, inner, rp->repeats, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_tile = {tile_gpu_forward, tile_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_repeat = {repeat_gpu_forward, repeat_gpu_backward, NULL, 0};
