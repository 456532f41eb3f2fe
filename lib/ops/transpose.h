/*
 * transpose.h - transpose's parameters, shared by the CPU kernels
 * (transpose.c) and the CUDA kernels (transpose.cu).
 */
#ifndef MX_OPS_TRANSPOSE_H
#define MX_OPS_TRANSPOSE_H

#include "params/params.h"

typedef struct transpose_params {
    mx_tuple axes;
} transpose_params;

#endif /* MX_OPS_TRANSPOSE_H */
