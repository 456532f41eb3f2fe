/*
 * group_norm.cu - GroupNorm's and InstanceNorm's GPU kernels: the sets of
 * group_norm.c's block layout (per sample, `groups` contiguous blocks)
 * through the shared CUDA normalisation kernel (norm_gpu.cuh).
 * InstanceNorm's hidden third output holds the variance, as on the CPU.
 */
#include "ops/norm_gpu.cuh"

extern "C" {
#include "ops/group_norm.h"
}

/* block_layout of the CPU. */
static mx_norm_layout gn_gpu_layout(const mx_shape *d, int64_t groups)
{
    const int64_t n = mx_shape_size(d);
    mx_norm_layout l;
    l.sets = d->dims[0] * groups;
    l.inner = 1;
    l.per_elem = false;
    l.gamma_len = groups;
    l.len = l.sets ? n / l.sets : 0;
    return l;
}

static mx_status gn_gpu_norm_forward(const mx_op_ctx *ctx, const char *op, double eps, int64_t groups,
                                     const mx_tensor *in, const mx_req *req, mx_tensor *out, bool var_out)
{
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    const mx_norm_layout l = gn_gpu_layout(&in[0].shape, groups);
    return mx_norm_gpu_forward(ctx, &l, eps, (const float *)in[0].data, (const float *)in[1].data,
                               (const float *)in[2].data, req[0], (float *)out[0].data, req[1],
                               (float *)out[1].data, req[2], (float *)out[2].data, var_out);
}

static mx_status gn_gpu_norm_backward(const mx_op_ctx *ctx, double eps, int64_t groups, bool stats,
                                      const mx_tensor *out_grad, const mx_tensor *in, const mx_req *req,
                                      mx_tensor *in_grad)
{
    const mx_norm_layout l = gn_gpu_layout(&in[0].shape, groups);
    return mx_norm_gpu_backward(ctx, &l, eps, (const float *)in[0].data, (const float *)in[1].data,
                                (const float *)out_grad[0].data, stats ? (const float *)out_grad[1].data : NULL,
                                stats ? (const float *)out_grad[2].data : NULL, req[0], (float *)in_grad[0].data,
                                req[1], (float *)in_grad[1].data, req[2], (float *)in_grad[2].data);
}

static mx_status gn_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const gn_params *gp = (const gn_params *)p;
    return gn_gpu_norm_forward(ctx, "GroupNorm", gp->eps, gp->num_groups, in, req, out, false);
}

static mx_status gn_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    const gn_params *gp = (const gn_params *)p;
    return gn_gpu_norm_backward(ctx, gp->eps, gp->num_groups, gp->output_mean_var, out_grad, in, req, in_grad);
}

static mx_status in_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return gn_gpu_norm_forward(ctx, "InstanceNorm", ((const gn_params *)p)->eps, in[0].shape.dims[1], in, req, out,
                               true);
}

static mx_status in_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    return gn_gpu_norm_backward(ctx, ((const gn_params *)p)->eps, in[0].shape.dims[1], false, out_grad, in, req,
                                in_grad);
}

extern "C" const mx_op_kernels mx_op_gpu_group_norm = {gn_gpu_forward, gn_gpu_backward, NULL, 0};
extern "C" const mx_op_kernels mx_op_gpu_instance_norm = {in_gpu_forward, in_gpu_backward, NULL, 0};
