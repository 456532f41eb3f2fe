/*
 * activation.cu - Activation on the GPU: one thread per element, the same
 * forms as activation.c:
 *   relu      x > 0 ? x : 0 (NaN gives 0)         dy * (y > 0)
 *   sigmoid   1 / (1 + exp(-x))                   dy * (y * (1 - y))
 *   tanh      tanh(x)                             dy * (1 - y*y)
 *   softrelu  x > 20 ? x : log1p(exp(x))          dy * -expm1(-y)
 *   softsign  x / (1 + |x|)                       dy * ((1 - |y|)^2)
 * Products are rounded before the subtraction that follows (__fmul_rn), as
 * the CPU does, rather than contracted into a fused multiply-add.
 * float32, float16 and bfloat16 tensors (one dtype for data, output and
 * gradients): elements are read as float, computed as above in float and
 * stored rounded to the tensor's type (half.cuh), as the CPU's half nodes
 * do on their float32 copies; req add sums in float and rounds once.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/activation.h"
}

__device__ __forceinline__ float act_f(int type, float x)
{
    switch (type) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case ACT_TANH: return tanhf(x);
    case ACT_SOFTRELU: return x > 20.0f ? x : log1pf(expf(x));
    default: return x / (1.0f + fabsf(x));
    }
}

/* The derivative as a function of the output y. */
__device__ __forceinline__ float act_df(int type, float y)
{
    switch (type) {
    case ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case ACT_SIGMOID: return __fmul_rn(y, 1.0f - y);
    case ACT_TANH: return 1.0f - __fmul_rn(y, y);
    case ACT_SOFTRELU: return -expm1f(-y);
    default: {
        float a = 1.0f - fabsf(y);
        return __fmul_rn(a, a);
    }
    }
}

template <typename T> __global__ void act_forward_kernel(int type, mx_req req, const T *x, T *y, int64_t n)
{
    MX_CUDA_FOR(i, n) mx_assign(req, &y[i], act_f(type, mx_load(&x[i])));
}

/* y may be dy's buffer (in-place backward): each thread reads its element
 * before writing it. */
template <typename T>
__global__ void act_backward_kernel(int type, mx_req req, const T *dy, const T *y, T *dx, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        float g = __fmul_rn(mx_load(&dy[i]), act_df(type, mx_load(&y[i])));
        mx_assign(req, &dx[i], g);
    }
}

static mx_status act_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const act_params *ap = (const act_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    int64_t n = mx_shape_size(&in[0].shape);
    if (n == 0) return MX_OK;
    if (out[0].dtype != in[0].dtype)
        return MX_ERROR(MX_ERR_INVALID, "Activation: output is %s but data is %s", mx_dtype_name(out[0].dtype),
                        mx_dtype_name(in[0].dtype));
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "Activation", {
        act_forward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            ap->act_type, req[0], (const T *)in[0].data, (T *)out[0].data, n);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

static mx_status act_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)in;
    (void)aux;
    const act_params *ap = (const act_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (ap->act_type < ACT_RELU || ap->act_type > ACT_SOFTSIGN)
        return MX_ERROR(MX_ERR_INVALID, "Activation: unknown act_type %d", ap->act_type);
    int64_t n = mx_shape_size(&out[0].shape);
    if (n == 0) return MX_OK;
    const mx_dtype dt = out_grad[0].dtype;
    if (out[0].dtype != dt || in_grad[0].dtype != dt)
        return MX_ERROR(MX_ERR_INVALID, "Activation: backward tensors differ in dtype (output %s, gradients %s, %s)",
                        mx_dtype_name(out[0].dtype), mx_dtype_name(dt), mx_dtype_name(in_grad[0].dtype));
    MX_DISPATCH_FLOAT_TYPES(dt, "Activation", {
        act_backward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            ap->act_type, req[0], (const T *)out_grad[0].data, (const T *)out[0].data, (T *)in_grad[0].data, n);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_activation = {act_gpu_forward, act_gpu_backward, NULL, MX_HALF_DTYPES};
