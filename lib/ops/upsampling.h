/*
 * upsampling.h - UpSampling's parameters, shared by the CPU kernels
 * (upsampling.c) and the CUDA kernels (upsampling.cu).
 */
#ifndef MX_OPS_UPSAMPLING_H
#define MX_OPS_UPSAMPLING_H

#include "ops/op.h"

#include <stdint.h>

enum { UP_BILINEAR, UP_NEAREST };
enum { UP_CONCAT, UP_SUM };

typedef struct up_params {
    int64_t scale, num_filter, num_args, workspace;
    int sample_type, multi_input_mode;
} up_params;

/* bilinear: the Deconvolution operator and its params for this UpSampling
 * (the caller frees *out). */
mx_status mx_upsampling_deconv(const up_params *up, const mx_op_def **op, void **out);

#endif /* MX_OPS_UPSAMPLING_H */
