/*
 * indexing.h - take's and one_hot's parameters, shared by the CPU kernels
 * (indexing.c) and the CUDA kernels (indexing.cu).
 */
#ifndef MX_OPS_INDEXING_H
#define MX_OPS_INDEXING_H

#include <stdint.h>

enum { TAKE_CLIP, TAKE_RAISE, TAKE_WRAP };

typedef struct take_params {
    int64_t axis;
    int mode;
} take_params;

typedef struct one_hot_params {
    int64_t depth;
    double on_value, off_value;
    int dtype;
} one_hot_params;

#endif /* MX_OPS_INDEXING_H */
