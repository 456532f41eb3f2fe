/*
 * softmax_output.h - SoftmaxOutput's parameters, shared by softmax_output.c and softmax_output.cu.
 */
#ifndef MX_OPS_SOFTMAX_OUTPUT_H
#define MX_OPS_SOFTMAX_OUTPUT_H

#include "base/base.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

enum { SO_NORM_NULL, SO_NORM_BATCH, SO_NORM_VALID };

typedef struct so_params {
    double grad_scale;
    double ignore_label;
    bool multi_output;
    bool use_ignore;
    bool preserve_shape;
    int normalization;
    bool out_grad;
    double smooth_alpha;
} so_params;

#endif /* MX_OPS_SOFTMAX_OUTPUT_H */
