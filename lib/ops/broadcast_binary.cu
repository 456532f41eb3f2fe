/*
 * broadcast_binary.cu - the broadcast_* operators of broadcast_binary.c on
 * the GPU, on binary_math.cuh's element math (the CPU's formulas).
 *
 * Forward: one thread per output element, its operands found by strides
 * (0 along the axes an operand is broadcast). Backward: one thread per
 * element of each operand that wants a gradient, looping over the output
 * positions that map to it (those along its broadcast axes, in C order as
 * the CPU visits them) and summing dy * df/d(operand) in double; an
 * operand that was not broadcast has one position per element. Ops with
 * no gradient (comparisons, logical) write zeros, or leave an add request
 * alone. add and sub do not read the operands in backward (they are not
 * kept for it).
 */
#include "ops/cuda/binary_math.cuh"
#include "ops/cuda/cuda_op.h"

#include <string.h>

/* Output axes (the operands aligned to them from the right) and strides. */
typedef struct bcg_geom {
    int nd;
    int64_t odims[MX_MAX_NDIM], ostr[MX_MAX_NDIM]; /* output dims and C strides */
    int64_t ls[MX_MAX_NDIM], rs[MX_MAX_NDIM];      /* operand strides, 0 where broadcast */
    /* Backward, for the operand being reduced: its kept axes (size equal
     * to the output's) and broadcast axes, outermost first. */
    int nk, nb;
    int kax[MX_MAX_NDIM], bax[MX_MAX_NDIM];
    int64_t nred; /* output positions per operand element */
} bcg_geom;

/* Strides of an operand of shape s aligned to the output's nd axes. */
static void bcg_strides(const mx_shape *s, const bcg_geom *g, int64_t *st)
{
    int64_t acc = 1;
    for (int k = g->nd - 1; k >= 0; k--) {
        int ks = k - (g->nd - s->ndim);
        int64_t d = ks >= 0 ? s->dims[ks] : 1;
        st[k] = d == g->odims[k] ? acc : 0; /* d == 1 < odims[k]: broadcast */
        acc *= d;
    }
}

static void bcg_make(const mx_shape *l, const mx_shape *r, const mx_shape *o, bcg_geom *g)
{
    memset(g, 0, sizeof(*g));
    g->nd = o->ndim;
    int64_t acc = 1;
    for (int k = o->ndim - 1; k >= 0; k--) {
        g->odims[k] = o->dims[k];
        g->ostr[k] = acc;
        acc *= o->dims[k];
    }
    bcg_strides(l, g, g->ls);
    bcg_strides(r, g, g->rs);
}

/* Fills the kept / broadcast axes of the operand with strides st. */
static void bcg_reduce_axes(bcg_geom *g, const int64_t *st)
{
    g->nk = g->nb = 0;
    g->nred = 1;
    for (int k = 0; k < g->nd; k++) {
        if (st[k] == 0 && g->odims[k] > 1) {
            g->bax[g->nb++] = k;
            g->nred *= g->odims[k];
        } else {
            g->kax[g->nk++] = k;
        }
    }
}

template <mx_bin_kind K>
__global__ void bcg_fwd_k(int64_t n, bcg_geom g, const float *a, const float *b, float *y, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        int64_t rem = i, ia = 0, ib = 0;
        for (int k = g.nd - 1; k >= 0; k--) {
            int64_t idx = rem % g.odims[k];
            rem /= g.odims[k];
            ia += idx * g.ls[k];
            ib += idx * g.rs[k];
        }
        mx_cuda_assign(req, &y[i], mx_bin_f_dev<K>(a[ia], b[ib]));
    }
}

/* The gradient of lhs (LHS) or rhs at each of its n elements. */
template <mx_bin_kind K, bool LHS>
__global__ void bcg_bwd_k(int64_t n, bcg_geom g, const float *dy, const float *a, const float *b, float *dx,
                          mx_req req)
{
    MX_CUDA_FOR(j, n)
    {
        int64_t idx[MX_MAX_NDIM];
        int64_t rem = j;
        for (int t = g.nk - 1; t >= 0; t--) {
            int k = g.kax[t];
            idx[k] = rem % g.odims[k];
            rem /= g.odims[k];
        }
        double acc = 0;
        for (int64_t r = 0; r < g.nred; r++) {
            int64_t rr = r;
            for (int t = g.nb - 1; t >= 0; t--) {
                int k = g.bax[t];
                idx[k] = rr % g.odims[k];
                rr /= g.odims[k];
            }
            int64_t o = 0, ia = 0, ib = 0;
            for (int k = 0; k < g.nd; k++) {
                o += idx[k] * g.ostr[k];
                ia += idx[k] * g.ls[k];
                ib += idx[k] * g.rs[k];
            }
            float va = 0.0f, vb = 0.0f;
            if constexpr (MX_BIN_GRAD_READS_INPUTS(K)) {
                va = a[ia];
                vb = b[ib];
            }
            float d = LHS ? mx_bin_da_dev<K>(va, vb) : mx_bin_db_dev<K>(va, vb);
            acc += dy[o] * d;
        }
        mx_cuda_assign(req, &dx[j], (float)acc);
    }
}

__global__ void bcg_zero_k(int64_t n, float *p)
{
    MX_CUDA_FOR(i, n) p[i] = 0.0f;
}

template <mx_bin_kind K>
static mx_status bcg_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&out[0].shape);
    if (n <= 0) return MX_OK;
    bcg_geom g;
    bcg_make(&in[0].shape, &in[1].shape, &out[0].shape, &g);
    bcg_fwd_k<K><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, g, (const float *)in[0].data, (const float *)in[1].data, (float *)out[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

template <mx_bin_kind K>
static mx_status bcg_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)out, (void)aux;
    cudaStream_t st = mx_cuda_op_stream(ctx);
    if (mx_shape_size(&out_grad[0].shape) <= 0) {
        /* Nothing maps to any operand element: zeros (none when empty). */
        for (int k = 0; k < 2; k++) {
            int64_t n = mx_shape_size(&in_grad[k].shape);
            if (req[k] == MX_REQ_NULL || req[k] == MX_REQ_ADD || n <= 0) continue;
            bcg_zero_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(n, (float *)in_grad[k].data);
            MX_CUDA_LAUNCHED();
        }
        return MX_OK;
    }
    bcg_geom g;
    bcg_make(&in_grad[0].shape, &in_grad[1].shape, &out_grad[0].shape, &g);
    /* add and sub keep no operands for backward. */
    const float *a = MX_BIN_GRAD_READS_INPUTS(K) ? (const float *)in[0].data : NULL;
    const float *b = MX_BIN_GRAD_READS_INPUTS(K) ? (const float *)in[1].data : NULL;
    for (int k = 0; k < 2; k++) {
        if (req[k] == MX_REQ_NULL) continue;
        int64_t n = mx_shape_size(&in_grad[k].shape);
        if (n <= 0) continue;
        float *dx = (float *)in_grad[k].data;
        if constexpr (mx_bin_no_grad_dev<K>()) {
            if (req[k] == MX_REQ_ADD) continue;
            bcg_zero_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(n, dx);
        } else {
            bcg_reduce_axes(&g, k == 0 ? g.ls : g.rs);
            if (k == 0)
                bcg_bwd_k<K, true><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(
                    n, g, (const float *)out_grad[0].data, a, b, dx, req[k]);
            else
                bcg_bwd_k<K, false><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, st>>>(
                    n, g, (const float *)out_grad[0].data, a, b, dx, req[k]);
        }
        MX_CUDA_LAUNCHED();
    }
    return MX_OK;
}

#define BCG(id, K) extern "C" const mx_op_kernels mx_op_gpu_##id = {bcg_forward<K>, bcg_backward<K>, NULL, 0};

BCG(broadcast_add, MX_BIN_ADD)
BCG(broadcast_sub, MX_BIN_SUB)
BCG(broadcast_mul, MX_BIN_MUL)
BCG(broadcast_div, MX_BIN_DIV)
BCG(broadcast_power, MX_BIN_POWER)
BCG(broadcast_maximum, MX_BIN_MAXIMUM)
BCG(broadcast_minimum, MX_BIN_MINIMUM)
BCG(broadcast_mod, MX_BIN_MOD)
BCG(broadcast_hypot, MX_BIN_HYPOT)
BCG(broadcast_equal, MX_BIN_EQUAL)
BCG(broadcast_not_equal, MX_BIN_NOT_EQUAL)
BCG(broadcast_greater, MX_BIN_GREATER)
BCG(broadcast_greater_equal, MX_BIN_GREATER_EQUAL)
BCG(broadcast_lesser, MX_BIN_LESSER)
BCG(broadcast_lesser_equal, MX_BIN_LESSER_EQUAL)
BCG(broadcast_logical_and, MX_BIN_LOGICAL_AND)
BCG(broadcast_logical_or, MX_BIN_LOGICAL_OR)
BCG(broadcast_logical_xor, MX_BIN_LOGICAL_XOR)
