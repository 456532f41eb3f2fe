/*
 * slice.h - the per-axis plan of slice, slice_axis and slice_like (first
 * index, step and count per axis), shared by the CPU kernels (slice.c) and
 * the CUDA kernels (slice.cu): the plan functions are slice.c's, so both
 * devices pick the same elements.
 */
#ifndef MX_OPS_SLICE_H
#define MX_OPS_SLICE_H

#include "base/base.h"
#include "ndarray/ndarray.h"

/* Per axis: first index, step and how many elements. */
typedef struct slice_plan {
    int ndim;
    int64_t begin[MX_MAX_NDIM], step[MX_MAX_NDIM], len[MX_MAX_NDIM];
} slice_plan;

/* The plans of data shape d for each operator's params (errors as in
 * their infer_shape). */
mx_status mx_slice_plan_slice(const void *params, const mx_shape *d, slice_plan *pl);
mx_status mx_slice_plan_axis(const void *params, const mx_shape *d, slice_plan *pl);
mx_status mx_slice_plan_like(const void *params, const mx_shape *d, const mx_shape *like, slice_plan *pl);

#endif /* MX_OPS_SLICE_H */
