/*
 * lrn.h - LRN's parameters, shared by its CPU kernels (lrn.c) and its
 * CUDA kernels (lrn.cu).
 */
#ifndef MX_OPS_LRN_H
#define MX_OPS_LRN_H

#include <stdint.h>

typedef struct lrn_params {
    double alpha;
    double beta;
    double knorm;
    int64_t nsize;
} lrn_params;

#endif /* MX_OPS_LRN_H */
