/*
 * convolution.h - Convolution's parameters, shared by its CPU kernels
 * (convolution.c) and its cuDNN kernels (convolution.cu).
 */
#ifndef MX_OPS_CONVOLUTION_H
#define MX_OPS_CONVOLUTION_H

#include "ops/op.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct conv_params {
    mx_tuple kernel, stride, dilate, pad;
    int64_t num_filter, num_group, workspace;
    bool no_bias, cudnn_off;
    int cudnn_tune, layout;
} conv_params;

/* cudnn_tune values (indices into its choices: None, off, limited_workspace, fastest). */
enum { CONV_TUNE_NONE, CONV_TUNE_OFF, CONV_TUNE_LIMITED, CONV_TUNE_FASTEST };
enum { LAYOUT_NONE, LAYOUT_NCW, LAYOUT_NCHW };

#endif /* MX_OPS_CONVOLUTION_H */
