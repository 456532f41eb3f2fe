/*
 * tile.h - tile's and repeat's parameters and geometry, shared by the CPU
 * kernels (tile.c) and the CUDA kernels (tile.cu).
 */
#ifndef MX_OPS_TILE_H
#define MX_OPS_TILE_H

#include "base/base.h"
#include "ndarray/ndarray.h"
#include "params/params.h"

typedef struct tile_params {
    mx_tuple reps;
} tile_params;

typedef struct repeat_params {
    int64_t repeats;
    char axis[MX_PARAM_STRING_MAX]; /* "None" or an integer */
} repeat_params;

/* tile: the data shape and reps, both padded to the output's rank o. */
mx_status mx_tile_dims(const tile_params *tp, const mx_shape *d, mx_shape *din, int64_t *reps, mx_shape *o);
/* repeat: data viewed as (outer, len, inner), output as (outer, len * repeats, inner). */
mx_status mx_repeat_geom(const repeat_params *rp, const mx_shape *d, int64_t *outer, int64_t *len, int64_t *inner,
                         mx_shape *o);

#endif /* MX_OPS_TILE_H */
