/*
 * elementwise_sum.cu - ElementWiseSum (add_n) on the GPU: one thread per
 * element. Forward sums arg0 + arg1 + ... in order and then writes (or
 * adds) the output, so the output may be any of the inputs (in place on
 * arg0). Backward hands each requested input gradient dy (copied, or
 * added for req add); a written gradient that already is dy (in place) is
 * skipped, as on the CPU. float32, float16 and bfloat16 (all inputs,
 * output and gradients of one dtype, else refused naming them): the sum is
 * taken in float in the same order and rounded once to the tensor's type
 * (half.cuh), as the CPU's half nodes do on their float32 copies; req add
 * adds the sum to the output in float before that one rounding.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/elementwise_sum.h"
}

#include <string.h>

/* Element pointers of the tensors' type T (kernels cast them). */
typedef struct esum_gpu_args {
    int n;
    const void *x[MX_OP_MAX_IO]; /* forward inputs */
    void *dx[MX_OP_MAX_IO];      /* backward: per input, NULL when skipped */
    mx_req req[MX_OP_MAX_IO];
} esum_gpu_args;

template <typename T> __global__ void esum_fwd_k(int64_t total, esum_gpu_args a, T *y, mx_req req)
{
    MX_CUDA_FOR(i, total)
    {
        float acc = mx_load((const T *)a.x[0] + i);
        for (int k = 1; k < a.n; k++) acc = acc + mx_load((const T *)a.x[k] + i);
        mx_assign(req, &y[i], acc);
    }
}

template <typename T> __global__ void esum_bwd_k(int64_t total, esum_gpu_args a, const T *dy)
{
    MX_CUDA_FOR(i, total)
    {
        const float g = mx_load(&dy[i]);
        for (int k = 0; k < a.n; k++)
            if (a.dx[k]) mx_assign(a.req[k], (T *)a.dx[k] + i, g);
    }
}

static mx_status esum_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const esum_params *ep = (const esum_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t total = mx_shape_size(&out[0].shape);
    if (total <= 0) return MX_OK;
    esum_gpu_args a;
    memset(&a, 0, sizeof(a));
    a.n = (int)ep->num_args;
    const mx_dtype dt = out[0].dtype;
    for (int k = 0; k < a.n; k++) {
        if (in[k].dtype != dt)
            return MX_ERROR(MX_ERR_INVALID, "ElementWiseSum: arg%d is %s but the output is %s", k,
                            mx_dtype_name(in[k].dtype), mx_dtype_name(dt));
        a.x[k] = in[k].data;
    }
    MX_DISPATCH_FLOAT_TYPES(dt, "ElementWiseSum", {
        esum_fwd_k<T><<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(total, a,
                                                                                             (T *)out[0].data, req[0]);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

static mx_status esum_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const esum_params *ep = (const esum_params *)p;
    esum_gpu_args a;
    memset(&a, 0, sizeof(a));
    a.n = (int)ep->num_args;
    const mx_dtype dt = out_grad[0].dtype;
    bool any = false;
    for (int k = 0; k < a.n; k++) {
        a.req[k] = req[k];
        a.dx[k] = in_grad[k].data;
        if (req[k] == MX_REQ_NULL || (req[k] != MX_REQ_ADD && in_grad[k].data == out_grad[0].data)) a.dx[k] = NULL;
        if (a.dx[k] && in_grad[k].dtype != dt)
            return MX_ERROR(MX_ERR_INVALID, "ElementWiseSum: the gradient of arg%d is %s but the output's is %s", k,
                            mx_dtype_name(in_grad[k].dtype), mx_dtype_name(dt));
        any |= a.dx[k] != NULL;
    }
    int64_t total = mx_shape_size(&out_grad[0].shape);
    if (!any || total <= 0) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(dt, "ElementWiseSum", {
        esum_bwd_k<T><<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            total, a, (const T *)out_grad[0].data);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_elementwise_sum = {esum_gpu_forward, esum_gpu_backward, NULL, MX_HALF_DTYPES};
