/*
 * layer_norm.h - the normalisation kernel LayerNorm, GroupNorm and
 * InstanceNorm share: data split into sets, each normalised by its own mean
 * and standard deviation sqrt(var + eps) (biased variance), then scaled and
 * shifted by gamma and beta.
 *
 * Set s holds the `len` elements base(s) + k * inner, k < len, with
 * base(s) = (s / inner) * len * inner + s % inner (inner = 1: contiguous
 * blocks). gamma/beta are indexed by k (per_elem: LayerNorm) or by
 * s % gamma_len (GroupNorm's groups, InstanceNorm's channels).
 */
#ifndef MX_OPS_LAYER_NORM_H
#define MX_OPS_LAYER_NORM_H

#include "ops/op.h"
#include "parallel/parallel.h"

/* LayerNorm's parameters (layer_norm.c, layer_norm.cu). */
typedef struct ln_params {
    int64_t axis;
    double eps;
    bool output_mean_var;
} ln_params;

/* The inputs and outputs LayerNorm and GroupNorm name: data, gamma, beta;
 * output, mean, std (layer_norm.c). */
int mx_norm_list_inputs(const void *params, const char **names);
int mx_norm_list_outputs(const void *params, const char **names);

typedef struct mx_norm_layout {
    int64_t sets, len, inner;
    bool per_elem;
    int64_t gamma_len;
} mx_norm_layout;

/* y = (x - mean) / std * gamma + beta per req[0]; mean and std (one per
 * set) per req[1], req[2] when those are non-NULL; var_out writes the
 * variance instead of std (InstanceNorm's hidden output). Sets are split
 * across pool (NULL: the calling thread). */
void mx_norm_forward(mx_threadpool *pool, const mx_norm_layout *l, double eps, const float *x, const float *gamma,
                     const float *beta, mx_req req_y, float *y, mx_req req_mean, float *mean, mx_req req_std,
                     float *std, bool var_out);

/* Gradients of data, gamma and beta from dy and, when non-NULL, the
 * gradients dmean, dstd of the mean and std outputs; gradient buffers per
 * their req. moments: 2 * sets doubles of scratch. */
void mx_norm_backward(mx_threadpool *pool, const mx_norm_layout *l, double eps, const float *x, const float *gamma,
                      const float *dy, const float *dmean, const float *dstd, mx_req req_dx, float *dx,
                      mx_req req_dgamma, float *dgamma, mx_req req_dbeta, float *dbeta, double *moments);

#endif
