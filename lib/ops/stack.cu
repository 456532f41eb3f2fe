/*
 * stack.cu - stack's CUDA kernels: the output viewed as (outer, n, inner),
 * input i fills out[:, i, :]: a 2-D copy per input for writes, one thread
 * per element for adds; backward hands each input its slice back the same
 * way. float32, as on the CPU.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/stack.h"
}

/* dst[o * dst_pitch + k] += src[o * src_pitch + k], o < rows, k < width. */
__global__ void stack_add_kernel(const float *src, int64_t src_pitch, float *dst, int64_t dst_pitch, int64_t rows,
                                 int64_t width)
{
    MX_CUDA_FOR(i, rows * width)
    {
        const int64_t o = i / width, k = i % width;
        dst[o * dst_pitch + k] += src[o * src_pitch + k];
    }
}

/* rows x width floats from src to dst (pitches in elements), per req. */
static mx_status stack_copy(const mx_op_ctx *ctx, float *dst, int64_t dst_pitch, const float *src, int64_t src_pitch,
                            int64_t rows, int64_t width, mx_req req)
{
    if (req == MX_REQ_NULL || rows == 0 || width == 0) return MX_OK;
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (req != MX_REQ_ADD) {
        MX_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)dst_pitch * sizeof(float), src, (size_t)src_pitch * sizeof(float),
                                      (size_t)width * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice,
                                      stream));
        return MX_OK;
    }
    stack_add_kernel<<<mx_cuda_blocks(rows * width), MX_CUDA_THREADS, 0, stream>>>(src, src_pitch, dst, dst_pitch,
                                                                                    rows, width);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* (outer, inner) around the new axis of inputs of shape s; infer_shape has
 * checked the axis. */
static void stack_gpu_geom(const stack_params *sp, const mx_shape *s, int64_t *outer, int64_t *inner)
{
    const int nd = s->ndim, axis = (int)(sp->axis < 0 ? sp->axis + nd + 1 : sp->axis);
    *outer = 1, *inner = 1;
    for (int k = 0; k < axis; k++) *outer *= s->dims[k];
    for (int k = axis; k < nd; k++) *inner *= s->dims[k];
}

static mx_status stack_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                   mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const stack_params *sp = (const stack_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const int n = (int)sp->num_args;
    for (int i = 0; i < n; i++)
        if (in[i].dtype != MX_FLOAT32)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "stack: %s data is not supported (float32 only)",
                            mx_dtype_name(in[i].dtype));
    int64_t outer, inner;
    stack_gpu_geom(sp, &in[0].shape, &outer, &inner);
    float *y = (float *)out[0].data;
    for (int i = 0; i < n; i++)
        MX_TRY(stack_copy(ctx, y + i * inner, n * inner, (const float *)in[i].data, inner, outer, inner, req[0]));
    return MX_OK;
}

static mx_status stack_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                    mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const stack_params *sp = (const stack_params *)p;
    const int n = (int)sp->num_args;
    int64_t outer, inner;
    stack_gpu_geom(sp, &in_grad[0].shape, &outer, &inner);
    const float *dy = (const float *)out_grad[0].data;
    for (int i = 0; i < n; i++)
        MX_TRY(stack_copy(ctx, (float *)in_grad[i].data, inner, dy + i * inner, n * inner, outer, inner, req[i]));
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_stack = {stack_gpu_forward, stack_gpu_backward, NULL, 0};
