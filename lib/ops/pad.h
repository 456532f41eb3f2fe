/*
 * pad.h - Pad's parameters and pad widths, shared by the CPU kernels
 * (pad.c) and the CUDA kernels (pad.cu).
 */
#ifndef MX_OPS_PAD_H
#define MX_OPS_PAD_H

#include "base/base.h"
#include "ndarray/ndarray.h"
#include "params/params.h"

enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT };

#define PAD_MAX_WIDTH (2 * MX_MAX_NDIM)

typedef struct pad_params {
    int mode;
    char pad_width[MX_PARAM_STRING_MAX];
    double constant_value;
} pad_params;

/* Before/after pads per axis of data d into w (2 * ndim), checked as by
 * infer_shape. */
mx_status mx_pad_widths(const pad_params *pp, const mx_shape *d, int64_t *w);

#endif /* MX_OPS_PAD_H */
