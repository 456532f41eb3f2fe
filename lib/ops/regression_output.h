/*
 * regression_output.h - the regression outputs' parameters, shared by the
 * CPU kernels (regression_output.c) and the CUDA kernels
 * (regression_output.cu).
 */
#ifndef MX_OPS_REGRESSION_OUTPUT_H
#define MX_OPS_REGRESSION_OUTPUT_H

typedef struct reg_params {
    double grad_scale;
} reg_params;

#endif /* MX_OPS_REGRESSION_OUTPUT_H */
