/*
 * elemwise_binary.cu - the equal-shape binaries of elemwise_binary.c on
 * the GPU: one thread per element, the kind a template argument.
 * elemwise_add/sub/mul/div backward use that file's own formulas
 * (dl = dy / r, dr = -(dy / r) * l / r for div); the others the
 * binary_math derivatives dl = dy df/da, dr = dy df/db, zeros for
 * comparisons. Each element reads lhs, rhs (and dy) before writing, so the
 * in-place options (output on an input, a gradient on dy) hold.
 */
#include "ops/cuda/binary_math.cuh"
#include "ops/cuda/cuda_op.h"

template <mx_bin_kind K>
__global__ void ewb_fwd_k(int64_t n, const float *l, const float *r, float *y, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = mx_bin_f_dev<K>(l[i], r[i]);
        mx_cuda_assign(req, &y[i], v);
    }
}

/* LEGACY: elemwise_add/sub/mul/div's formulas (ewb_backward in the .c). */
template <mx_bin_kind K, bool LEGACY>
__global__ void ewb_bwd_k(int64_t n, const float *dy, const float *l, const float *r, float *dl, float *dr,
                          mx_req req_l, mx_req req_r)
{
    MX_CUDA_FOR(i, n)
    {
        float gl = 0.0f, gr = 0.0f;
        if constexpr (LEGACY) {
            float g = dy[i];
            if constexpr (K == MX_BIN_ADD) {
                gl = g;
                gr = g;
            } else if constexpr (K == MX_BIN_SUB) {
                gl = g;
                gr = -g;
            } else if constexpr (K == MX_BIN_MUL) {
                gl = g * r[i];
                gr = g * l[i];
            } else {
                static_assert(K == MX_BIN_DIV, "legacy kinds are add, sub, mul, div");
                float q = g / r[i];
                gl = q;
                gr = -q * l[i] / r[i];
            }
        } else if constexpr (!mx_bin_no_grad_dev<K>()) {
            float g = dy[i], a = l[i], b = r[i];
            gl = g * mx_bin_da_dev<K>(a, b);
            gr = g * mx_bin_db_dev<K>(a, b);
        }
        if (dl) mx_cuda_assign(req_l, &dl[i], gl);
        if (dr) mx_cuda_assign(req_r, &dr[i], gr);
    }
}

template <mx_bin_kind K>
static mx_status ewb_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&out[0].shape);
    if (n <= 0) return MX_OK;
    ewb_fwd_k<K><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)in[0].data, (const float *)in[1].data, (float *)out[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

template <mx_bin_kind K, bool LEGACY>
static mx_status ewb_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)p, (void)out, (void)aux;
    float *dl = req[0] == MX_REQ_NULL ? NULL : (float *)in_grad[0].data;
    float *dr = req[1] == MX_REQ_NULL ? NULL : (float *)in_grad[1].data;
    if (!dl && !dr) return MX_OK;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    if (n <= 0) return MX_OK;
    ewb_bwd_k<K, LEGACY><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)out_grad[0].data, (const float *)in[0].data, (const float *)in[1].data, dl, dr, req[0],
        req[1]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

#define EWB_GPU(id, K, LEGACY) \
    extern "C" const mx_op_kernels mx_op_gpu_##id = {ewb_gpu_forward<K>, ewb_gpu_backward<K, LEGACY>, NULL, 0};

EWB_GPU(elemwise_add, MX_BIN_ADD, true)
EWB_GPU(elemwise_sub, MX_BIN_SUB, true)
EWB_GPU(elemwise_mul, MX_BIN_MUL, true)
EWB_GPU(elemwise_div, MX_BIN_DIV, true)
EWB_GPU(maximum, MX_BIN_MAXIMUM, false)
EWB_GPU(minimum, MX_BIN_MINIMUM, false)
EWB_GPU(power, MX_BIN_POWER, false)
EWB_GPU(mod, MX_BIN_MOD, false)
EWB_GPU(hypot, MX_BIN_HYPOT, false)
EWB_GPU(equal, MX_BIN_EQUAL, false)
EWB_GPU(not_equal, MX_BIN_NOT_EQUAL, false)
EWB_GPU(greater, MX_BIN_GREATER, false)
EWB_GPU(greater_equal, MX_BIN_GREATER_EQUAL, false)
EWB_GPU(lesser, MX_BIN_LESSER, false)
EWB_GPU(lesser_equal, MX_BIN_LESSER_EQUAL, false)
EWB_GPU(logical_and, MX_BIN_LOGICAL_AND, false)
EWB_GPU(logical_or, MX_BIN_LOGICAL_OR, false)
EWB_GPU(logical_xor, MX_BIN_LOGICAL_XOR, false)
