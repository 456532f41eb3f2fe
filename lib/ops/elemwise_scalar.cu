/*
 * elemwise_scalar.cu - elemwise_scalar.c's array-scalar family and
 * smooth_l1 on the GPU: one thread per element, one functor per op with
 * the .c's forward and backward formulas (s = (float)scalar):
 *   _plus/_minus/_rminus/_mul/_div/_rdiv_scalar as ews_forward/backward;
 *   the binary_math ops as f(x, s) (f(s, x) for the r- forms) with
 *   dx = dy df/da (df/db for r- forms), or dy df/da(0, s) where backward
 *   reads no data (mod_scalar); comparisons write zero gradients (leave an
 *   accumulated one as it is);
 *   smooth_l1 as sl1_fwd/sl1_bwd.
 * Each element is read before it is written, so data and output (dy and
 * dx) may share a buffer.
 */
#include "ops/cuda/binary_math.cuh"
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/elemwise_scalar.h"
}

/* An op: fwd(x, s), bwd(x, dy, s); READS_X: backward reads the data;
 * NO_GRAD: zero gradient. */
struct ews_plus_op {
    static constexpr bool READS_X = false, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return x + s; }
    static __device__ float bwd(float, float dy, float) { return dy; }
};
struct ews_minus_op {
    static constexpr bool READS_X = false, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return x - s; }
    static __device__ float bwd(float, float dy, float) { return dy; }
};
struct ews_rminus_op {
    static constexpr bool READS_X = false, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return s - x; }
    static __device__ float bwd(float, float dy, float) { return -dy; }
};
struct ews_mul_op {
    static constexpr bool READS_X = false, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return x * s; }
    static __device__ float bwd(float, float dy, float s) { return dy * s; }
};
struct ews_div_op {
    static constexpr bool READS_X = false, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return x / s; }
    static __device__ float bwd(float, float dy, float s) { return dy / s; }
};
struct ews_rdiv_op {
    static constexpr bool READS_X = true, NO_GRAD = false;
    static __device__ float fwd(float x, float s) { return s / x; }
    static __device__ float bwd(float x, float dy, float s) { return -s * dy / (x * x); }
};

/* EWSB_FUNCS of the .c: REV computes f(s, x); DEPS: backward reads x. */
template <mx_bin_kind K, bool REV, bool DEPS> struct ewsb_op {
    static constexpr bool READS_X = DEPS && !mx_bin_no_grad_dev<K>(), NO_GRAD = mx_bin_no_grad_dev<K>();
    static __device__ float fwd(float x, float s) { return REV ? mx_bin_f_dev<K>(s, x) : mx_bin_f_dev<K>(x, s); }
    static __device__ float bwd(float x, float dy, float s)
    {
        if constexpr (!DEPS) {
            (void)x;
            return dy * mx_bin_da_dev<K>(0.0f, s);
        } else {
            return dy * (REV ? mx_bin_db_dev<K>(s, x) : mx_bin_da_dev<K>(x, s));
        }
    }
};

struct sl1_op {
    static constexpr bool READS_X = true, NO_GRAD = false;
    static __device__ float fwd(float x, float s)
    {
        const float b2 = s * s, t = 1.0f / b2;
        return x > t ? x - 0.5f * t : x < -t ? -x - 0.5f * t : 0.5f * x * x * b2;
    }
    static __device__ float bwd(float x, float dy, float s)
    {
        const float b2 = s * s, t = 1.0f / b2;
        return dy * (x > t ? 1.0f : x < -t ? -1.0f : x * b2);
    }
};

template <class Op> __global__ void ews_fwd_k(int64_t n, const float *x, float s, float *y, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = Op::fwd(x[i], s);
        mx_cuda_assign(req, &y[i], v);
    }
}

template <class Op> __global__ void ews_bwd_k(int64_t n, const float *x, const float *dy, float s, float *dx, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float xi = 0.0f;
        if constexpr (Op::READS_X) xi = x[i];
        float v = Op::bwd(xi, dy[i], s);
        mx_cuda_assign(req, &dx[i], v);
    }
}

/* P: the params struct (ews_params or sl1_params), scalar first. */
template <class Op, class P>
static mx_status ews_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    float s = (float)((const P *)p)->scalar;
    ews_fwd_k<Op><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)in[0].data, s, (float *)out[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

template <class Op, class P>
static mx_status ews_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in_grad[0].shape);
    if (n <= 0) return MX_OK;
    if constexpr (Op::NO_GRAD) {
        /* Zeros; an accumulated gradient stays as it is (the CPU skips). */
        if (req[0] != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n * sizeof(float), mx_cuda_op_stream(ctx)));
        return MX_OK;
    }
    float s = (float)((const P *)p)->scalar;
    ews_bwd_k<Op><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, (const float *)in[0].data, (const float *)out_grad[0].data, s, (float *)in_grad[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

#define EWS_GPU(id, OP, P) \
    extern "C" const mx_op_kernels mx_op_gpu_##id = {ews_gpu_forward<OP, P>, ews_gpu_backward<OP, P>, NULL, 0};
#define EWSB_GPU(id, K, REV, DEPS)                \
    using id##_gpu_op = ewsb_op<K, REV, DEPS>; \
    EWS_GPU(id, id##_gpu_op, ews_params)

EWS_GPU(plus_scalar, ews_plus_op, ews_params)
EWS_GPU(minus_scalar, ews_minus_op, ews_params)
EWS_GPU(rminus_scalar, ews_rminus_op, ews_params)
EWS_GPU(mul_scalar, ews_mul_op, ews_params)
EWS_GPU(div_scalar, ews_div_op, ews_params)
EWS_GPU(rdiv_scalar, ews_rdiv_op, ews_params)
/* id, kind, reversed operands, backward reads data: as EWSB_OPS in the .c. */
EWSB_GPU(power_scalar, MX_BIN_POWER, false, true)
EWSB_GPU(rpower_scalar, MX_BIN_POWER, true, true)
EWSB_GPU(maximum_scalar, MX_BIN_MAXIMUM, false, true)
EWSB_GPU(minimum_scalar, MX_BIN_MINIMUM, false, true)
EWSB_GPU(mod_scalar, MX_BIN_MOD, false, false)
EWSB_GPU(rmod_scalar, MX_BIN_MOD, true, true)
EWSB_GPU(hypot_scalar, MX_BIN_HYPOT, false, true)
EWSB_GPU(equal_scalar, MX_BIN_EQUAL, false, false)
EWSB_GPU(not_equal_scalar, MX_BIN_NOT_EQUAL, false, false)
EWSB_GPU(greater_scalar, MX_BIN_GREATER, false, false)
EWSB_GPU(greater_equal_scalar, MX_BIN_GREATER_EQUAL, false, false)
EWSB_GPU(lesser_scalar, MX_BIN_LESSER, false, false)
EWSB_GPU(lesser_equal_scalar, MX_BIN_LESSER_EQUAL, false, false)
EWSB_GPU(logical_and_scalar, MX_BIN_LOGICAL_AND, false, false)
EWSB_GPU(logical_or_scalar, MX_BIN_LOGICAL_OR, false, false)
EWSB_GPU(logical_xor_scalar, MX_BIN_LOGICAL_XOR, false, false)
EWS_GPU(smooth_l1, sl1_op, sl1_params)
