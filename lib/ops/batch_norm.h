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

#endif /* MX_OPS_BATCH_NORM_H */
