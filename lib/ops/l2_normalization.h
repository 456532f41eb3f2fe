/*
 * l2_normalization.h - L2Normalization's parameters, shared by the CPU
 * kernels (l2_normalization.c) and the CUDA kernels (l2_normalization.cu).
 */
#ifndef MX_OPS_L2_NORMALIZATION_H
#define MX_OPS_L2_NORMALIZATION_H

typedef struct l2n_params {
    double eps;
    int mode;
} l2n_params;

enum { L2N_CHANNEL, L2N_INSTANCE, L2N_SPATIAL };

#endif /* MX_OPS_L2_NORMALIZATION_H */
