/*
 * elemwise_binary.cu - the equal-shape binaries of elemwise_binary.c on
 * the GPU: one thread per element, the kind a template argument.
 * elemwise_add/sub/mul/div backward use that file's own formulas
 * (dl = dy / r, dr = -(dy / r) * l / r for div); the others the
 * binary_math derivatives dl = dy df/da, dr = dy df/db, zeros for
 * comparisons. Each element reads lhs, rhs (and dy) before writing, so the
 * in-place options (output on an input, a gradient on dy) hold.
 * float32, float16 and bfloat16 (inputs, output and gradients of one
 * dtype, else refused naming them): elements are read as float, the same
 * float expressions computed, and results stored rounded to the tensor's
 * type (half.cuh), as the CPU's half nodes do on their float32 copies;
 * req add sums in float and rounds once. Comparisons write 0 or 1 in the
 * inputs' type, as on the CPU.
 */
#include "ops/cuda/binary_math.cuh"
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

/* The operator's name for errors (elemwise_binary.c's names). */
static const char *ewb_gpu_name(mx_bin_kind k)
{
    static const char *const names[] = {
        "elemwise_add", "elemwise_sub", "elemwise_mul",   "elemwise_div", "_maximum",      "_minimum",
        "_power",       "_mod",         "_hypot",         "_equal",       "_not_equal",    "_greater",
        "_greater_equal", "_lesser",    "_lesser_equal",  "_logical_and", "_logical_or",   "_logical_xor"};
    static_assert(sizeof(names) / sizeof(names[0]) == MX_BIN_LOGICAL_XOR + 1, "a name per kind");
    return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "elemwise binary";
}

template <mx_bin_kind K, typename T>
__global__ void ewb_fwd_k(int64_t n, const T *l, const T *r, T *y, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = mx_bin_f_dev<K>(mx_load(&l[i]), mx_load(&r[i]));
        mx_assign(req, &y[i], v);
    }
}

/* LEGACY: elemwise_add/sub/mul/div's formulas (ewb_backward in the .c). */
template <mx_bin_kind K, bool LEGACY, typename T>
__global__ void ewb_bwd_k(int64_t n, const T *dy, const T *l, const T *r, T *dl, T *dr, mx_req req_l, mx_req req_r)
{
    MX_CUDA_FOR(i, n)
    {
        float gl = 0.0f, gr = 0.0f;
        if constexpr (LEGACY) {
            float g = mx_load(&dy[i]);
            if constexpr (K == MX_BIN_ADD) {
                gl = g;
                gr = g;
            } else if constexpr (K == MX_BIN_SUB) {
                gl = g;
                gr = -g;
            } else if constexpr (K == MX_BIN_MUL) {
                gl = g * mx_load(&r[i]);
                gr = g * mx_load(&l[i]);
            } else {
                static_assert(K == MX_BIN_DIV, "legacy kinds are add, sub, mul, div");
                const float a = mx_load(&l[i]), b = mx_load(&r[i]);
                float q = g / b;
                gl = q;
                gr = -q * a / b;
            }
        } else if constexpr (!mx_bin_no_grad_dev<K>()) {
            float g = mx_load(&dy[i]), a = mx_load(&l[i]), b = mx_load(&r[i]);
            gl = g * mx_bin_da_dev<K>(a, b);
            gr = g * mx_bin_db_dev<K>(a, b);
        }
        if (dl) mx_assign(req_l, &dl[i], gl);
        if (dr) mx_assign(req_r, &dr[i], gr);
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
    const mx_dtype dt = out[0].dtype;
    if (in[0].dtype != dt || in[1].dtype != dt)
        return MX_ERROR(MX_ERR_INVALID, "%s: lhs is %s and rhs %s but the output is %s", ewb_gpu_name(K),
                        mx_dtype_name(in[0].dtype), mx_dtype_name(in[1].dtype), mx_dtype_name(dt));
    MX_DISPATCH_FLOAT_TYPES(dt, ewb_gpu_name(K), {
        ewb_fwd_k<K, T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, (const T *)in[0].data, (const T *)in[1].data, (T *)out[0].data, req[0]);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

template <mx_bin_kind K, bool LEGACY>
static mx_status ewb_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)p, (void)out, (void)aux;
    void *dl = req[0] == MX_REQ_NULL ? NULL : in_grad[0].data;
    void *dr = req[1] == MX_REQ_NULL ? NULL : in_grad[1].data;
    if (!dl && !dr) return MX_OK;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    if (n <= 0) return MX_OK;
    /* The inputs are read (and their dtypes meaningful) where the formulas use them. */
    const mx_dtype dt = out_grad[0].dtype;
    const bool reads_in = LEGACY ? (K == MX_BIN_MUL || K == MX_BIN_DIV) : !mx_bin_no_grad_dev<K>();
    if ((dl && in_grad[0].dtype != dt) || (dr && in_grad[1].dtype != dt) ||
        (reads_in && (in[0].dtype != dt || in[1].dtype != dt)))
        return MX_ERROR(MX_ERR_INVALID, "%s: backward tensors differ in dtype (output gradient %s, lhs %s, rhs %s)",
                        ewb_gpu_name(K), mx_dtype_name(dt), mx_dtype_name(in[0].dtype), mx_dtype_name(in[1].dtype));
    MX_DISPATCH_FLOAT_TYPES(dt, ewb_gpu_name(K), {
        ewb_bwd_k<K, LEGACY, T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, (const T *)out_grad[0].data, (const T *)in[0].data, (const T *)in[1].data, (T *)dl, (T *)dr, req[0],
            req[1]);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

#define EWB_GPU(id, K, LEGACY)                                                                        \
    extern "C" const mx_op_kernels mx_op_gpu_##id = {ewb_gpu_forward<K>, ewb_gpu_backward<K, LEGACY>, NULL, \
                                                     MX_HALF_DTYPES};

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
