/*
 * cast.cu - Cast of cast.c on the GPU, for every dtype pair the CPU
 * converts: one kernel on the op's stream (ndarray/dtype_convert.cu, the
 * CPU's bits for every element), a copy when the types agree. Forward
 * checks the output tensor's dtype against the parameter as cast.c does;
 * backward converts the gradient back to the input's type. Every dtype
 * dtype_convert.cu converts is declared (MX_CAST_ALL_DTYPES, as amp_cast):
 * mixed precision's float32 <-> float16 / bfloat16 Casts among them, req
 * add summing in double and rounding once, as the CPU.
 */
#include "ndarray/dtype_convert.h"
#include "ops/cast.h"
#include "ops/cuda/cuda_op.h"

static mx_status castg_convert(const mx_op_ctx *ctx, const mx_tensor *dst, const mx_tensor *src, int64_t n,
                               mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    return mx_dtype_convert_gpu("Cast", dst->data, dst->dtype, src->data, src->dtype, n, req == MX_REQ_ADD,
                                ctx->exec->stream);
}

static mx_status castg_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const cast_params *cp = (const cast_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int nc = (int)(sizeof(mx_cast_dtypes) / sizeof(mx_cast_dtypes[0]));
    if (cp->dtype < 0 || cp->dtype >= nc || mx_cast_dtypes[cp->dtype] < 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Cast: parameter 'dtype' value '%s' is not supported",
                        cp->dtype >= 0 && cp->dtype < nc ? mx_cast_choices[cp->dtype] : "?");
    if ((int)out[0].dtype != mx_cast_dtypes[cp->dtype])
        return MX_ERROR(MX_ERR_INVALID, "Cast: output tensor is %s, expected %s (dtype parameter)",
                        mx_dtype_name(out[0].dtype), mx_cast_choices[cp->dtype]);
    return castg_convert(ctx, &out[0], &in[0], mx_shape_size(&in[0].shape), req[0]);
}

static mx_status castg_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)in, (void)out, (void)aux;
    return castg_convert(ctx, &in_grad[0], &out_grad[0], mx_shape_size(&in_grad[0].shape), req[0]);
}

extern "C" const mx_op_kernels mx_op_gpu_cast = {castg_forward, castg_backward, NULL, MX_CAST_ALL_DTYPES};
