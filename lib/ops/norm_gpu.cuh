/*
 * norm_gpu.cuh - the CUDA twin of the normalisation kernel of layer_norm.h
 * (mx_norm_forward / mx_norm_backward), defined in layer_norm.cu and used
 * by LayerNorm, GroupNorm and InstanceNorm: same layout, same double
 * arithmetic in the same order, one thread per set (and per gamma entry
 * for the parameter gradients). C++ (nvcc) only.
 */
#ifndef MX_OPS_NORM_GPU_CUH
#define MX_OPS_NORM_GPU_CUH

#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/layer_norm.h"
}

/* As mx_norm_forward; mean / std may be NULL (not written). */
mx_status mx_norm_gpu_forward(const mx_op_ctx *ctx, const mx_norm_layout *l, double eps, const float *x,
                              const float *gamma, const float *beta, mx_req req_y, float *y, mx_req req_mean,
                              float *mean, mx_req req_std, float *std, bool var_out);

/* As mx_norm_backward; the moments go to the worker's scratch. */
mx_status mx_norm_gpu_backward(const mx_op_ctx *ctx, const mx_norm_layout *l, double eps, const float *x,
                               const float *gamma, const float *dy, const float *dmean, const float *dstd,
                               mx_req req_dx, float *dx, mx_req req_dgamma, float *dgamma, mx_req req_dbeta,
                               float *dbeta);

#endif /* MX_OPS_NORM_GPU_CUH */
