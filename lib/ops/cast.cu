/*
 * cast.cu - Cast of cast.c on the GPU, for float32 -> float32 (dtype
 * 'float32' on float32 data): a copy (or an add) forward and backward.
 * Other dtypes are refused with MX_ERR_UNSUPPORTED naming them.
 */
#include "ops/cast.h"
#include "ops/cuda/copy_req.cuh"
#include "ops/cuda/cuda_op.h"

/* cast.c's choice list, for messages. */
static const char *const castg_choices[] = {"float32", "float64", "float16", "uint8", "int32",
                                            "int8",    "int64",   "bfloat16", "bool"};

static mx_status castg_check(const char *what, mx_dtype src, mx_dtype dst)
{
    if (src != MX_FLOAT32 || dst != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Cast: %s from %s to %s is not supported on the GPU (float32 only)", what,
                        mx_dtype_name(src), mx_dtype_name(dst));
    return MX_OK;
}

static mx_status castg_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const cast_params *cp = (const cast_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (cp->dtype != 0) {
        int nc = (int)(sizeof(castg_choices) / sizeof(castg_choices[0]));
        return MX_ERROR(MX_ERR_UNSUPPORTED,
                        "Cast: parameter 'dtype' value '%s' is not supported on the GPU (only 'float32')",
                        cp->dtype >= 0 && cp->dtype < nc ? castg_choices[cp->dtype] : "?");
    }
    MX_TRY(castg_check("forward", in[0].dtype, out[0].dtype));
    return mx_cuda_copy_req(ctx, "Cast", out[0].data, in[0].data, mx_shape_size(&in[0].shape), MX_FLOAT32, req[0]);
}

static mx_status castg_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    MX_TRY(castg_check("backward", out_grad[0].dtype, in_grad[0].dtype));
    return mx_cuda_copy_req(ctx, "Cast", in_grad[0].data, out_grad[0].data, mx_shape_size(&in_grad[0].shape),
                            MX_FLOAT32, req[0]);
}

extern "C" const mx_op_kernels mx_op_gpu_cast = {castg_forward, castg_backward, NULL};
