/*
 * elemwise_scalar.h - the parameters of the array-scalar family and of
 * smooth_l1, shared by their CPU (elemwise_scalar.c) and GPU
 * (elemwise_scalar.cu) kernels.
 */
#ifndef MX_OPS_ELEMWISE_SCALAR_H
#define MX_OPS_ELEMWISE_SCALAR_H

#include "ops/op.h"

typedef struct ews_params {
    double scalar;
    bool is_int;
} ews_params;

/* smooth_l1: sigma = scalar. */
typedef struct sl1_params {
    double scalar;
} sl1_params;

#endif /* MX_OPS_ELEMWISE_SCALAR_H */
