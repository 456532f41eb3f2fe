/*
 * expand_dims.cu - expand_dims' and squeeze's CUDA kernels: the data does
 * not move, so forward and backward are copies (or accumulations) of the
 * whole buffer on the op's stream, a no-op when written in place.
 * Accumulating (req add) takes float32, as on the CPU, and float16 /
 * bfloat16 (mixed precision: the CPU's half nodes add on float32 copies;
 * copy_req.cuh sums in float and rounds once); float64 and integer
 * accumulation is refused naming op and dtype, as on the CPU.
 */
#include "ops/cuda/copy_req.cuh"

static mx_status ed_gpu_copy(const mx_op_ctx *ctx, const char *op, void *dst, const void *src, int64_t n,
                             mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_ADD && dtype != MX_FLOAT32 && dtype != MX_FLOAT16 && dtype != MX_BFLOAT16)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: accumulating (req add) into %s is not supported", op,
                        mx_dtype_name(dtype));
    return mx_cuda_copy_req(ctx, op, dst, src, n, dtype, req);
}

#define ED_GPU_KERNELS(sym, opname)                                                                              \
    static mx_status sym##_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,                 \
                                       const mx_req *req, mx_tensor *out, mx_tensor *aux)                        \
    {                                                                                                            \
        (void)p, (void)aux;                                                                                      \
        return ed_gpu_copy(ctx, opname, out[0].data, in[0].data, mx_shape_size(&in[0].shape), in[0].dtype,       \
                           req[0]);                                                                              \
    }                                                                                                            \
    static mx_status sym##_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,          \
                                        const mx_tensor *in, const mx_tensor *out, const mx_req *req,            \
                                        mx_tensor *in_grad, mx_tensor *aux)                                      \
    {                                                                                                            \
        (void)p, (void)in, (void)out, (void)aux;                                                                 \
        return ed_gpu_copy(ctx, opname, in_grad[0].data, out_grad[0].data, mx_shape_size(&out_grad[0].shape),   \
                           out_grad[0].dtype, req[0]);                                                           \
    }                                                                                                            \
    extern "C" const mx_op_kernels mx_op_gpu_##sym = {sym##_gpu_forward, sym##_gpu_backward, NULL, MX_HALF_DTYPES};

ED_GPU_KERNELS(expand_dims, "expand_dims")
ED_GPU_KERNELS(squeeze, "squeeze")
