/*
 * batch_norm.h - BatchNorm's parameters, shared by batch_norm.c and batch_norm.cu.
 */
#ifndef MX_OPS_BATCH_NORM_H
#define MX_OPS_BATCH_NORM_H

#include "base/base.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct bn_params {
    double eps;
    double momentum;
    bool fix_gamma;
    bool use_global_stats;
    bool output_mean_var;
    bool cudnn_off;
    int64_t axis;
} bn_params;

/* (outer, channels, inner) around the channel axis of d, which infer_shape
 * has checked (batch_norm.c; batch_norm.cu too). */
void mx_bn_dims(const bn_params *bp, const mx_shape *d, int64_t *outer, int64_t *c, int64_t *inner);

/* BatchNorm with a residual sum folded in (batch_norm.c): inputs data,
 * gamma, beta, addend, then the aux states; BatchNorm's outputs. CPU
 * kernels only; the executor's folding makes it, no config names it. */
struct mx_op_def;
extern const struct mx_op_def mx_op_batch_norm_add;

#endif /* MX_OPS_BATCH_NORM_H */
