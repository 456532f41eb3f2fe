/*
 * elementwise_sum.h - ElementWiseSum's parameters, shared by its CPU
 * (elementwise_sum.c) and GPU (elementwise_sum.cu) kernels.
 */
#ifndef MX_OPS_ELEMENTWISE_SUM_H
#define MX_OPS_ELEMENTWISE_SUM_H

#include "ops/op.h"

typedef struct esum_params {
    int64_t num_args;
} esum_params;

#endif /* MX_OPS_ELEMENTWISE_SUM_H */
