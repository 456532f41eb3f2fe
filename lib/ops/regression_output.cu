/*
 * regression_output.cu - the regression outputs' CUDA kernels (the CPU's
 * regression_output.c), one thread per element:
 *   forward   Linear/MAE: y = x (a copy);  Logistic: y = 1 / (1 + exp(-x))
 *   backward  d = out - label; dx = sc * d (Linear, Logistic), sc * sign(d)
 *             (MAE), sc = grad_scale / num_output (label's size per row);
 *             the label gets zeros.
 */
#include "ops/cuda/copy_req.cuh"

extern "C" {
#include "ops/regression_output.h"
}

#include <math.h>

enum { REG_GPU_LINEAR, REG_GPU_LOGISTIC, REG_GPU_MAE };

__global__ void reg_logistic_kernel(const float *x, float *y, int64_t n, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &y[i], 1.0f / (1.0f + expf(-x[i])));
}

__global__ void reg_backward_kernel(const float *y, const float *t, float *g, int64_t n, float sc, bool mae,
                                    mx_req req)
{
    MX_CUDA_FOR(i, n)
    {
        const float d = y[i] - t[i];
        const float v = mae ? sc * (float)((d > 0.0f) - (d < 0.0f)) : sc * d;
        mx_cuda_assign(req, &g[i], v);
    }
}

static const char *reg_gpu_name(int kind)
{
    return kind == REG_GPU_LOGISTIC ? "LogisticRegressionOutput"
           : kind == REG_GPU_MAE    ? "MAERegressionOutput"
                                    : "LinearRegressionOutput";
}

static mx_status reg_gpu_forward(int kind, const mx_op_ctx *ctx, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const int64_t n = mx_shape_size(&in[0].shape);
    if (n == 0) return MX_OK;
    if (kind != REG_GPU_LOGISTIC)
        return mx_cuda_copy_req(ctx, reg_gpu_name(kind), out[0].data, in[0].data, n, MX_FLOAT32, req[0]);
    reg_logistic_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, n, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status reg_gpu_backward(int kind, const mx_op_ctx *ctx, const void *p, const mx_tensor *in,
                                  const mx_tensor *out, const mx_req *req, mx_tensor *in_grad)
{
    const reg_params *rp = (const reg_params *)p;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n = mx_shape_size(&in[0].shape);
    if (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD) { /* labels get no gradient */
        const size_t bytes = (size_t)mx_shape_size(&in[1].shape) * sizeof(float);
        if (bytes) MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, bytes, stream));
    }
    if (req[0] == MX_REQ_NULL || n == 0) return MX_OK;
    const mx_shape *ls = &in[1].shape;
    const int64_t rows = ls->ndim > 0 ? ls->dims[0] : 1;
    const int64_t num_output = rows > 0 ? mx_shape_size(ls) / rows : 1;
    const float sc = (float)(rp->grad_scale * mx_op_loss_scale(ctx) / (double)(num_output > 0 ? num_output : 1));
    reg_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream>>>(
        (const float *)out[0].data, (const float *)in[1].data, (float *)in_grad[0].data, n, sc, kind == REG_GPU_MAE,
        req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

#define REG_GPU_KERNELS(name, kind)                                                                              \
    static mx_status name##_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,                \
                                        const mx_req *req, mx_tensor *out, mx_tensor *aux)                       \
    {                                                                                                            \
        (void)p, (void)aux;                                                                                      \
        return reg_gpu_forward(kind, ctx, in, req, out);                                                         \
    }                                                                                                            \
    static mx_status name##_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,         \
                                         const mx_tensor *in, const mx_tensor *out, const mx_req *req,           \
                                         mx_tensor *in_grad, mx_tensor *aux)                                     \
    {                                                                                                            \
        (void)out_grad, (void)aux;                                                                               \
        return reg_gpu_backward(kind, ctx, p, in, out, req, in_grad);                                            \
    }                                                                                                            \
    extern "C" const mx_op_kernels mx_op_gpu_##name = {name##_gpu_forward, name##_gpu_backward, NULL, 0};

REG_GPU_KERNELS(linear_regression_output, REG_GPU_LINEAR)
REG_GPU_KERNELS(logistic_regression_output, REG_GPU_LOGISTIC)
REG_GPU_KERNELS(mae_regression_output, REG_GPU_MAE)
