/*
 * reduce.h - the reductions' kinds and parameters, shared by reduce.c
 * (CPU) and reduce.cu (GPU).
 */
#ifndef MX_OPS_REDUCE_H
#define MX_OPS_REDUCE_H

#include "ops/op.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_NORM } red_kind;

typedef struct red_params {
    mx_tuple axis;
    bool keepdims;
    bool exclude;
    int64_t ord;   /* norm */
    int out_dtype; /* norm */
} red_params;

/* mask[k]: axis k of d is reduced, from axis (none: all), negative axes
 * and exclude. Errors name the op and the axes. (reduce.c; reduce.cu too.) */
mx_status mx_reduce_mask(const char *op, const red_params *rp, const mx_shape *d, bool *mask);

#endif /* MX_OPS_REDUCE_H */
