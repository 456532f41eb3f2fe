/*
 * upsampling.cu - UpSampling's CUDA kernels (upsampling.c on the CPU).
 * nearest: per input, one thread per output element of its channels reads
 *   x[(h / fh) * W + w / fw] (sum mode: the first input per req, the others
 *   add); backward, one thread per input element sums its fh x fw block
 *   in double, in the CPU's order. bilinear: the Deconvolution operator's
 *   GPU kernels with the CPU's derived parameters.
 * float32, float16 and bfloat16 (inputs, output and gradients of one
 * type): nearest reads elements as float and stores them rounded to the
 * type (a copy is exact; the backward's double sum is rounded once, req
 * add in float then rounded, half.cuh); bilinear is Deconvolution's half
 * path. float32 keeps its bits.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/upsampling.h"
}

#include <stdlib.h>

template <typename T>
__global__ void up_nearest_forward_kernel(const T *x, T *y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC,
                                          int64_t c0, int64_t OH, int64_t OW, mx_req req)
{
    const int64_t fh = OH / H, fw = OW / W;
    MX_CUDA_FOR(i, N * C * OH * OW)
    {
        const int64_t w = i % OW, h = i / OW % OH, c = i / (OW * OH) % C, n = i / (OW * OH * C);
        mx_assign(req, &y[((n * OC + c0 + c) * OH + h) * OW + w], mx_load(&x[((n * C + c) * H + h / fh) * W + w / fw]));
    }
}

template <typename T>
__global__ void up_nearest_backward_kernel(const T *dy, T *dx, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC,
                                           int64_t c0, int64_t OH, int64_t OW, mx_req req)
{
    const int64_t fh = OH / H, fw = OW / W;
    MX_CUDA_FOR(i, N * C * H * W)
    {
        const int64_t w = i % W, h = i / W % H, c = i / (W * H) % C, n = i / (W * H * C);
        const T *gp = dy + (n * OC + c0 + c) * OH * OW;
        double acc = 0;
        for (int64_t a = 0; a < fh; a++)
            for (int64_t b = 0; b < fw; b++) acc += mx_load(&gp[(h * fh + a) * OW + w * fw + b]);
        mx_assign(req, &dx[i], (float)acc);
    }
}

/* The bilinear Deconvolution's GPU kernels and params (freed by the caller). */
static mx_status up_gpu_deconv(const up_params *up, const mx_op_kernels **k, void **dp)
{
    const mx_op_def *op;
    MX_TRY(mx_upsampling_deconv(up, &op, dp));
    if (!op->gpu) {
        free(*dp);
        *dp = NULL;
        return MX_ERROR(MX_ERR_UNSUPPORTED, "UpSampling: bilinear needs Deconvolution's GPU kernels");
    }
    *k = op->gpu;
    return MX_OK;
}

static mx_status up_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    const up_params *up = (const up_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (up->sample_type == UP_BILINEAR) {
        const mx_op_kernels *k;
        void *dp;
        MX_TRY(up_gpu_deconv(up, &k, &dp));
        const mx_status s = k->forward(ctx, dp, in, req, out, aux);
        free(dp);
        return s;
    }
    const mx_shape *o = &out[0].shape;
    const int64_t N = o->dims[0], OC = o->dims[1], OH = o->dims[2], OW = o->dims[3];
    int64_t c0 = 0;
    const mx_dtype dtype = out[0].dtype;
    for (int i = 0; i < up->num_args; i++)
        if (in[i].dtype != dtype)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "UpSampling: input %d is %s but the output is %s (one dtype on gpu)",
                            i, mx_dtype_name(in[i].dtype), mx_dtype_name(dtype));
    for (int i = 0; i < up->num_args; i++) {
        const mx_shape *s = &in[i].shape;
        const int64_t C = s->dims[1], H = s->dims[2], W = s->dims[3], n = N * C * OH * OW;
        /* sum mode: the first input writes (per req), the others add */
        const mx_req r = up->multi_input_mode == UP_SUM && i > 0 ? MX_REQ_ADD : req[0];
        if (n > 0)
            MX_DISPATCH_FLOAT_TYPES(dtype, "UpSampling", {
                up_nearest_forward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                    (const T *)in[i].data, (T *)out[0].data, N, C, H, W, OC, c0, OH, OW, r);
                MX_CUDA_LAUNCHED();
            });
        if (up->multi_input_mode == UP_CONCAT) c0 += C;
    }
    return MX_OK;
}

static mx_status up_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    const up_params *up = (const up_params *)p;
    if (up->sample_type == UP_BILINEAR) {
        const mx_op_kernels *k;
        void *dp;
        MX_TRY(up_gpu_deconv(up, &k, &dp));
        const mx_status s = k->backward(ctx, dp, out_grad, in, out, req, in_grad, aux);
        free(dp);
        return s;
    }
    const mx_shape *o = &out_grad[0].shape;
    const int64_t OC = o->dims[1], OH = o->dims[2], OW = o->dims[3];
    const mx_dtype dtype = out_grad[0].dtype;
    int64_t c0 = 0;
    for (int i = 0; i < up->num_args; i++)
        if (req[i] != MX_REQ_NULL && in_grad[i].dtype != dtype)
            return MX_ERROR(MX_ERR_UNSUPPORTED,
                            "UpSampling: gradient %d is %s but the output gradient is %s (one dtype on gpu)", i,
                            mx_dtype_name(in_grad[i].dtype), mx_dtype_name(dtype));
    for (int i = 0; i < up->num_args; i++) {
        const mx_shape *s = &in_grad[i].shape;
        const int64_t N = s->dims[0], C = s->dims[1], H = s->dims[2], W = s->dims[3], n = N * C * H * W;
        if (req[i] != MX_REQ_NULL && n > 0)
            MX_DISPATCH_FLOAT_TYPES(dtype, "UpSampling", {
                up_nearest_backward_kernel<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                    (const T *)out_grad[0].data, (T *)in_grad[i].data, N, C, H, W, OC, c0, OH, OW, req[i]);
                MX_CUDA_LAUNCHED();
            });
        if (up->multi_input_mode == UP_CONCAT) c0 += C;
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_upsampling = {up_gpu_forward, up_gpu_backward, NULL, MX_HALF_DTYPES};
