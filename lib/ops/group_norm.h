/*
 * group_norm.h - GroupNorm's and InstanceNorm's parameters, shared by the
 * CPU kernels (group_norm.c) and the CUDA kernels (group_norm.cu).
 */
#ifndef MX_OPS_GROUP_NORM_H
#define MX_OPS_GROUP_NORM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct gn_params {
    int64_t num_groups;
    double eps;
    bool output_mean_var;
} gn_params;

#endif /* MX_OPS_GROUP_NORM_H */
