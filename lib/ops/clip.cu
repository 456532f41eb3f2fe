/*
 * clip.cu - clip of clip.c on the GPU: y = min(max(x, a_min), a_max) and
 * dx = dy where a_min <= x <= a_max, 0 outside; one thread per element,
 * the CPU's expressions (NaN passes forward, its gradient passes too).
 * float32, float16 and bfloat16 tensors (one dtype for data, output and
 * gradients): read as float, compared against the float bounds, stored
 * rounded to the tensor's type (half.cuh), as the CPU's half nodes do on
 * their float32 copies; req add sums in float and rounds once.
 */
#include "ops/clip.h"
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

template <typename T> __global__ void clipg_fwd_k(int64_t n, const T *x, T *y, float lo, float hi, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = mx_load(&x[i]);
        mx_assign(req, &y[i], v > hi ? hi : v < lo ? lo : v);
    }
}

template <typename T>
__global__ void clipg_bwd_k(int64_t n, const T *dy, const T *x, T *dx, float lo, float hi, mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        float v = mx_load(&x[i]);
        mx_assign(req, &dx[i], (v > hi || v < lo) ? 0.0f : mx_load(&dy[i]));
    }
}

static mx_status clipg_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const clip_params *cp = (const clip_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    if (out[0].dtype != in[0].dtype)
        return MX_ERROR(MX_ERR_INVALID, "clip: output is %s but data is %s", mx_dtype_name(out[0].dtype),
                        mx_dtype_name(in[0].dtype));
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "clip", {
        clipg_fwd_k<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, (const T *)in[0].data, (T *)out[0].data, (float)cp->a_min, (float)cp->a_max, req[0]);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

static mx_status clipg_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const clip_params *cp = (const clip_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    if (n <= 0) return MX_OK;
    const mx_dtype dt = out_grad[0].dtype;
    if (in[0].dtype != dt || in_grad[0].dtype != dt)
        return MX_ERROR(MX_ERR_INVALID, "clip: backward tensors differ in dtype (data %s, gradients %s, %s)",
                        mx_dtype_name(in[0].dtype), mx_dtype_name(dt), mx_dtype_name(in_grad[0].dtype));
    MX_DISPATCH_FLOAT_TYPES(dt, "clip", {
        clipg_bwd_k<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, (const T *)out_grad[0].data, (const T *)in[0].data, (T *)in_grad[0].data, (float)cp->a_min,
            (float)cp->a_max, req[0]);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_clip = {clipg_forward, clipg_backward, NULL, MX_HALF_DTYPES};
