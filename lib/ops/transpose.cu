/*
 * transpose.cu - transpose's CUDA kernels: one thread per output element,
 * its coordinates unravelled from the output's dims and mapped through
 * the permutation to the input offset. Backward permutes the output
 * gradient by the inverse permutation. float32, as on the CPU.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/transpose.h"
}

/* Output dims and, per output axis, the input stride it walks. */
typedef struct tp_geom {
    int nd;
    int64_t od[MX_MAX_NDIM], st[MX_MAX_NDIM];
} tp_geom;

__global__ void tp_kernel(const float *src, float *dst, int64_t total, tp_geom g, mx_req req)
{
    MX_CUDA_FOR(i, total)
    {
        int64_t rem = i, off = 0;
        for (int k = g.nd - 1; k >= 0; k--) {
            off += rem % g.od[k] * g.st[k];
            rem /= g.od[k];
        }
        mx_cuda_assign(req, &dst[i], src[off]);
    }
}

/* perm[i] = the input axis that becomes output axis i; infer_shape has
 * checked that axes is a permutation. */
static void tp_perm(const transpose_params *tp, int nd, int *perm)
{
    for (int i = 0; i < nd; i++)
        perm[i] = tp->axes.ndim <= 0 ? nd - 1 - i : (int)(tp->axes.v[i] < 0 ? tp->axes.v[i] + nd : tp->axes.v[i]);
}

/* dst (dims[perm[0]], ..., dims[perm[nd-1]]) = src (dims) permuted. */
static mx_status tp_permute(const mx_op_ctx *ctx, const float *src, const int64_t *dims, int nd, const int *perm,
                            float *dst, mx_req req)
{
    tp_geom g;
    g.nd = nd;
    int64_t in_stride[MX_MAX_NDIM], s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        in_stride[k] = s;
        s *= dims[k];
    }
    int64_t total = 1;
    for (int i = 0; i < nd; i++) {
        g.od[i] = dims[perm[i]];
        g.st[i] = in_stride[perm[i]];
        total *= g.od[i];
    }
    if (total == 0) return MX_OK;
    tp_kernel<<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(src, dst, total, g, req);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status tp_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "transpose: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int perm[MX_MAX_NDIM];
    tp_perm((const transpose_params *)p, in[0].shape.ndim, perm);
    return tp_permute(ctx, (const float *)in[0].data, in[0].shape.dims, in[0].shape.ndim, perm,
                      (float *)out[0].data, req[0]);
}

static mx_status tp_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in_grad[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "transpose: %s data is not supported (float32 only)",
                        mx_dtype_name(in_grad[0].dtype));
    const mx_shape *ds = &in_grad[0].shape;
    int perm[MX_MAX_NDIM], inv[MX_MAX_NDIM];
    tp_perm((const transpose_params *)p, ds->ndim, perm);
    for (int i = 0; i < ds->ndim; i++) inv[perm[i]] = i;
    /* out_grad has the output's dims; permuting them by inv gives data's. */
    return tp_permute(ctx, (const float *)out_grad[0].data, out_grad[0].shape.dims, ds->ndim, inv,
                      (float *)in_grad[0].data, req[0]);
}

extern "C" const mx_op_kernels mx_op_gpu_transpose = {tp_gpu_forward, tp_gpu_backward, NULL, 0};
