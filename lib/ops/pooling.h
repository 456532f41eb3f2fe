/*
 * pooling.h - Pooling's parameters, shared by its CPU kernels (pooling.c)
 * and its CUDA kernels (pooling.cu).
 */
#ifndef MX_OPS_POOLING_H
#define MX_OPS_POOLING_H

#include "ops/op.h"

#include <stdbool.h>

enum { POOL_MAX, POOL_AVG, POOL_SUM, POOL_LP };
enum { CONV_VALID, CONV_FULL, CONV_SAME };
enum { LAYOUT_NONE, LAYOUT_NCW, LAYOUT_NCHW, LAYOUT_NCDHW, LAYOUT_NWC, LAYOUT_NHWC, LAYOUT_NDHWC };

typedef struct pool_params {
    mx_tuple kernel, stride, pad;
    int pool_type;
    int pooling_convention;
    bool global_pool;
    bool cudnn_off;
    bool count_include_pad;
    int layout;
} pool_params;

#endif /* MX_OPS_POOLING_H */
