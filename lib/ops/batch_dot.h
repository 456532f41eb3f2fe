/*
 * batch_dot.h - batch_dot's parameters, shared by the CPU kernels
 * (batch_dot.c) and the CUDA kernels (batch_dot.cu).
 */
#ifndef MX_OPS_BATCH_DOT_H
#define MX_OPS_BATCH_DOT_H

#include <stdbool.h>

typedef struct batch_dot_params {
    bool transpose_a, transpose_b;
    int forward_stype;
} batch_dot_params;

#endif /* MX_OPS_BATCH_DOT_H */
