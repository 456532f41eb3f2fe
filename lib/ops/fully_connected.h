/*
 * fully_connected.h - FullyConnected's parameters and data geometry,
 * shared by its CPU (fully_connected.c) and GPU (fully_connected.cu)
 * kernels.
 */
#ifndef MX_OPS_FULLY_CONNECTED_H
#define MX_OPS_FULLY_CONNECTED_H

#include "ops/op.h"

typedef struct fc_params {
    int64_t num_hidden;
    bool no_bias;
    bool flatten;
} fc_params;

/* Rows (batch) and K of data as the layer sees it. */
static inline void fc_rows_cols(const fc_params *fc, const mx_shape *data, int64_t *rows, int64_t *k)
{
    if (fc->flatten) {
        *rows = data->dims[0];
        *k = 1;
        for (int i = 1; i < data->ndim; i++) *k *= data->dims[i];
    } else {
        *k = data->dims[data->ndim - 1];
        *rows = 1;
        for (int i = 0; i < data->ndim - 1; i++) *rows *= data->dims[i];
    }
}

#endif /* MX_OPS_FULLY_CONNECTED_H */
