/*
 * concat.h - Concat's parameters, shared by its CPU (concat.c) and GPU
 * (concat.cu) kernels.
 */
#ifndef MX_OPS_CONCAT_H
#define MX_OPS_CONCAT_H

#include "ops/op.h"

typedef struct concat_params {
    int64_t num_args;
    int64_t dim;
} concat_params;

extern const struct mx_op_def mx_op_concat;

#endif /* MX_OPS_CONCAT_H */
