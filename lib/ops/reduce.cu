/*
 * reduce.cu - sum, mean, max, min, prod and norm of reduce.c on the GPU,
 * with the same axis / keepdims / exclude handling (axis None or () is
 * every axis).
 *
 * Forward: one thread per output element, looping over the elements it
 * reduces in C order (the CPU's order) and accumulating in double as the
 * CPU does; max/min keep the CPU's NaN rule (a NaN sticks). Backward: one
 * thread per data element, reading its output's dy (and x, y as the op's
 * backward_deps allow). prod first gathers, per output, the product of the
 * non-zero elements and the count of zeros (in the worker's scratch memory;
 * the CPU uses its workspace), so no division by zero happens.
 */
#include "ops/cuda/cuda_op.h"
extern "C" {
#include "ops/reduce.h"
}

#include <math.h>

/* Data axes split into kept (output) and reduced ones, outermost first. */
typedef struct redg_geom {
    int nd, nk, nr;
    int64_t dims[MX_MAX_NDIM], istr[MX_MAX_NDIM], ost[MX_MAX_NDIM]; /* ost: 0 on reduced axes */
    int kax[MX_MAX_NDIM], rax[MX_MAX_NDIM];
    int64_t n_red; /* data elements per output element */
} redg_geom;

/* Returns the output size. */
static int64_t redg_make(const mx_shape *d, const bool *mask, redg_geom *g)
{
    *g = redg_geom{};
    g->nd = d->ndim;
    g->n_red = 1;
    int64_t si = 1, so = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        g->dims[k] = d->dims[k];
        g->istr[k] = si;
        si *= d->dims[k];
        g->ost[k] = mask[k] ? 0 : so;
        if (!mask[k]) so *= d->dims[k];
    }
    for (int k = 0; k < d->ndim; k++) {
        if (mask[k]) {
            g->rax[g->nr++] = k;
            g->n_red *= d->dims[k];
        } else {
            g->kax[g->nk++] = k;
        }
    }
    return so;
}

/* The data offset of output element o's first element. */
__device__ __forceinline__ int64_t redg_base(const redg_geom &g, int64_t o)
{
    int64_t base = 0;
    for (int t = g.nk - 1; t >= 0; t--) {
        int k = g.kax[t];
        base += (o % g.dims[k]) * g.istr[k];
        o /= g.dims[k];
    }
    return base;
}

/* The offset of the r-th reduced element (C order) from its base. */
__device__ __forceinline__ int64_t redg_off(const redg_geom &g, int64_t r)
{
    int64_t off = 0;
    for (int t = g.nr - 1; t >= 0; t--) {
        int k = g.rax[t];
        off += (r % g.dims[k]) * g.istr[k];
        r /= g.dims[k];
    }
    return off;
}

template <red_kind K>
__global__ void redg_fwd_k(int64_t n_out, redg_geom g, const float *x, float *y, int64_t ord, double count,
                           mx_req req)
{
    MX_CUDA_FOR(o, n_out)
    {
        int64_t base = redg_base(g, o);
        double acc = K == RED_MAX ? -INFINITY : K == RED_MIN ? INFINITY : K == RED_PROD ? 1.0 : 0.0;
        for (int64_t r = 0; r < g.n_red; r++) {
            double v = x[base + redg_off(g, r)];
            if constexpr (K == RED_SUM || K == RED_MEAN) acc += v;
            else if constexpr (K == RED_MAX) {
                if (v > acc || isnan(v)) acc = v;
            } else if constexpr (K == RED_MIN) {
                if (v < acc || isnan(v)) acc = v;
            } else if constexpr (K == RED_PROD) acc *= v;
            else acc += ord == 1 ? fabs(v) : v * v;
        }
        if constexpr (K == RED_MEAN) acc /= count;
        if constexpr (K == RED_NORM) {
            if (ord == 2) acc = sqrt(acc);
        }
        mx_cuda_assign(req, &y[o], (float)acc);
    }
}

/* prod backward: per output, the product of the non-zero elements and how
 * many are zero. */
__global__ void redg_prod_stats_k(int64_t n_out, redg_geom g, const float *x, double *prod, double *zeros)
{
    MX_CUDA_FOR(o, n_out)
    {
        int64_t base = redg_base(g, o);
        double p = 1.0, z = 0.0;
        for (int64_t r = 0; r < g.n_red; r++) {
            double v = x[base + redg_off(g, r)];
            if (v == 0.0) z += 1.0;
            else p *= v;
        }
        prod[o] = p;
        zeros[o] = z;
    }
}

template <red_kind K>
__global__ void redg_bwd_k(int64_t n_in, redg_geom g, const float *dyp, const float *x, const float *y,
                           const double *prod, const double *zeros, int64_t ord, double scale, float *dx, mx_req req)
{
    MX_CUDA_FOR(i, n_in)
    {
        int64_t rem = i, o = 0;
        for (int k = g.nd - 1; k >= 0; k--) {
            o += (rem % g.dims[k]) * g.ost[k];
            rem /= g.dims[k];
        }
        double dy = dyp[o], gr = 0.0;
        if constexpr (K == RED_SUM) gr = dy;
        else if constexpr (K == RED_MEAN) gr = dy * scale;
        else if constexpr (K == RED_MAX || K == RED_MIN) gr = x[i] == y[o] ? dy : 0.0;
        else if constexpr (K == RED_PROD) {
            double v = x[i], z = zeros[o];
            if (v != 0.0) gr = z == 0.0 ? dy * (prod[o] / v) : 0.0;
            else gr = z == 1.0 ? dy * prod[o] : 0.0;
        } else {
            if (ord == 1) gr = x[i] > 0 ? dy : x[i] < 0 ? -dy : 0.0;
            else gr = y[o] != 0.0f ? dy * x[i] / y[o] : 0.0;
        }
        mx_cuda_assign(req, &dx[i], (float)gr);
    }
}

template <red_kind K>
static mx_status redg_forward(const char *op, const mx_op_ctx *ctx, const void *p, const mx_tensor *in,
                              const mx_req *req, mx_tensor *out)
{
    const red_params *rp = (const red_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    bool mask[MX_MAX_NDIM];
    MX_TRY(mx_reduce_mask(op, rp, &in[0].shape, mask));
    redg_geom g;
    int64_t n_out = redg_make(&in[0].shape, mask, &g), n_in = mx_shape_size(&in[0].shape);
    if (n_out <= 0) return MX_OK;
    double count = n_out ? (double)(n_in / n_out) : 0.0;
    redg_fwd_k<K><<<mx_cuda_blocks(n_out), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n_out, g, (const float *)in[0].data, (float *)out[0].data, rp->ord, count, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

template <red_kind K>
static mx_status redg_backward(const char *op, const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                               const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad)
{
    const red_params *rp = (const red_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_shape *d = &in_grad[0].shape;
    bool mask[MX_MAX_NDIM];
    MX_TRY(mx_reduce_mask(op, rp, d, mask));
    redg_geom g;
    int64_t n_out = redg_make(d, mask, &g), n_in = mx_shape_size(d);
    if (n_in <= 0) return MX_OK;
    cudaStream_t st = mx_cuda_op_stream(ctx);
    /* Only what backward_deps keeps: x for max, min, prod, norm; y for
     * max, min, norm. */
    const float *x = K == RED_SUM || K == RED_MEAN ? NULL : (const float *)in[0].data;
    const float *y = K == RED_MAX || K == RED_MIN || K == RED_NORM ? (const float *)out[0].data : NULL;
    double *prod = NULL, *zeros = NULL;
    if constexpr (K == RED_PROD) {
        /* Device kernels get no shared workspace: the worker's scratch. */
        void *ws = NULL;
        MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), 2 * (size_t)n_out * sizeof(double), &ws));
        prod = (double *)ws;
        zeros = prod + n_out;
        redg_prod_stats_k<<<mx_cuda_blocks(n_out), MX_CUDA_THREADS, 0, st>>>(n_out, g, x, prod, zeros);
        MX_CUDA_LAUNCHED();
    }
    double scale = (double)n_out / (double)n_in;
    redg_bwd_k<K><<<mx_cuda_blocks(n_in), MX_CUDA_THREADS, 0, st>>>(n_in, g, (const float *)out_grad[0].data, x, y,
                                                                    prod, zeros, rp->ord, scale,
                                                                    (float *)in_grad[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

#define REDG(sym, mxname, K)                                                                                       \
    static mx_status redg_##sym##_fwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req, \
                                      mx_tensor *out, mx_tensor *aux)                                              \
    {                                                                                                              \
        (void)aux;                                                                                                 \
        return redg_forward<K>(mxname, ctx, p, in, req, out);                                                      \
    }                                                                                                              \
    static mx_status redg_##sym##_bwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,              \
                                      const mx_tensor *in, const mx_tensor *out, const mx_req *req,                \
                                      mx_tensor *in_grad, mx_tensor *aux)                                          \
    {                                                                                                              \
        (void)aux;                                                                                                 \
        return redg_backward<K>(mxname, ctx, p, out_grad, in, out, req, in_grad);                                  \
    }                                                                                                              \
    extern "C" const mx_op_kernels mx_op_gpu_##sym = {redg_##sym##_fwd, redg_##sym##_bwd, NULL, 0};

REDG(sum, "sum", RED_SUM)
REDG(mean, "mean", RED_MEAN)
REDG(max, "max", RED_MAX)
REDG(min, "min", RED_MIN)
REDG(prod, "prod", RED_PROD)
REDG(norm, "norm", RED_NORM)
