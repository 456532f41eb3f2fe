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

/* A residual sum folded into the convolution before it (symbol.h's
 * mx_graph_fold_conv_sums; prediction only, no backward): inputs addend,
 * data, weight [, bias]; out = Convolution(data) + addend, then the sum's
 * folded activation. The output may take the addend's memory. */
extern const struct mx_op_def mx_op_convolution_add;

#endif /* MX_OPS_CONVOLUTION_H */
