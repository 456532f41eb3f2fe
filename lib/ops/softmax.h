/*
 * softmax.h - softmax / log_softmax parameters, shared by the CPU kernels
 * (softmax.c) and the CUDA kernels (softmax.cu).
 */
#ifndef MX_OPS_SOFTMAX_H
#define MX_OPS_SOFTMAX_H

#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sm_params {
    int64_t axis;
    char temperature[MX_PARAM_STRING_MAX]; /* "None" or a number */
    int dtype;
    bool use_length;
} sm_params;

enum { SM_DTYPE_NONE, SM_DTYPE_F16, SM_DTYPE_F32, SM_DTYPE_F64 };

#endif /* MX_OPS_SOFTMAX_H */
