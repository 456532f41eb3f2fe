/*
 * reshape.cu - Reshape on the GPU: the data is unchanged, so forward and
 * backward are device copies per request (none when run in place), in any
 * dtype; req add in float32, float64, float16 and bfloat16 (copy_req.cuh:
 * the half types summed in float, rounded once).
 */
#include "ops/cuda/copy_req.cuh"

static mx_status reshape_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                     mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    return mx_cuda_copy_req(ctx, "Reshape", out[0].data, in[0].data, mx_shape_size(&in[0].shape), in[0].dtype,
                            req[0]);
}

static mx_status reshape_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                      const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                      mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)in, (void)out, (void)aux;
    return mx_cuda_copy_req(ctx, "Reshape", in_grad[0].data, out_grad[0].data, mx_shape_size(&out_grad[0].shape),
                            out_grad[0].dtype, req[0]);
}

extern "C" const mx_op_kernels mx_op_gpu_reshape = {reshape_gpu_forward, reshape_gpu_backward, NULL, MX_HALF_DTYPES};
