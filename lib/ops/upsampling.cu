/*
 * upsampling.cu - UpSampling's CUDA kernels (upsampling.c on the CPU).
 * nearest: per input, one thread per output element of its channels reads
 *   x[(h / fh) * W + w / fw] (sum mode: the first input per req, the others
 *   add); backward, one thread per input element sums its fh x fw block
 *   in double, in the CPU's order. bilinear: the Deconvolution operator's
 *   GPU kernels with the CPU's derived parameters.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/upsampling.h"
}

#include <stdlib.h>

__global__ void up_nearest_forward_kernel(const float *x, float *y, int64_t N, int64_t C, int64_t H, int64_t W,
                                          int64_t OC, int64_t c0, int64_t OH, int64_t OW, mx_req req)
{
    const int64_t fh = OH / H, fw = OW / W;
    MX_CUDA_FOR(i, N * C * OH * OW)
    {
        const int64_t w = i % OW, h = i / OW % OH, c = i / (OW * OH) % C, n = i / (OW * OH * C);
        mx_cuda_assign(req, &y[((n * OC + c0 + c) * OH + h) * OW + w], x[((n * C + c) * H + h / fh) * W + w / fw]);
    }
}

__global__ void up_nearest_backward_kernel(const float *dy, float *dx, int64_t N, int64_t C, int64_t H, int64_t W,
                                           int64_t OC, int64_t c0, int64_t OH, int64_t OW, mx_req req)
{
    const int64_t fh = OH / H, fw = OW / W;
    MX_CUDA_FOR(i, N * C * H * W)
    {
        const int64_t w = i % W, h = i / W % H, c = i / (W * H) % C, n = i / (W * H * C);
        const float *gp = dy + (n * OC + c0 + c) * OH * OW;
        double acc = 0;
        for (int64_t a = 0; a < fh; a++)
            for (int64_t b = 0; b < fw; b++) acc += gp[(h * fh + a) * OW + w * fw + b];
        mx_cuda_assign(req, &dx[i], (float)acc);
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
    for (int i = 0; i < up->num_args; i++)
        if (in[i].dtype != MX_FLOAT32)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "UpSampling: %s data is not supported (float32 only)",
                            mx_dtype_name(in[i].dtype));
    for (int i = 0; i < up->num_args; i++) {
        const mx_shape *s = &in[i].shape;
        const int64_t C = s->dims[1], H = s->dims[2], W = s->dims[3], n = N * C * OH * OW;
        /* sum mode: the first input writes (per req), the others add */
        const mx_req r = up->multi_input_mode == UP_SUM && i > 0 ? MX_REQ_ADD : req[0];
        if (n > 0) {
            up_nearest_forward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                (const float *)in[i].data, (float *)out[0].data, N, C, H, W, OC, c0, OH, OW, r);
            MX_CUDA_LAUNCHED();
        }
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
    int64_t c0 = 0;
    for (int i = 0; i < up->num_args; i++) {
        const mx_shape *s = &in_grad[i].shape;
        const int64_t N = s->dims[0], C = s->dims[1], H = s->dims[2], W = s->dims[3], n = N * C * H * W;
        if (req[i] != MX_REQ_NULL && n > 0) {
            up_nearest_backward_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                (const float *)out_grad[0].data, (float *)in_grad[i].data, N, C, H, W, OC, c0, OH, OW, req[i]);
            MX_CUDA_LAUNCHED();
        }
        if (up->multi_input_mode == UP_CONCAT) c0 += C;
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_upsampling = {up_gpu_forward, up_gpu_backward, NULL, 0};
