/*
 * slice_channel.h - SliceChannel's parameters, shared by the CPU kernels
 * (slice_channel.c) and the CUDA kernels (slice_channel.cu).
 */
#ifndef MX_OPS_SLICE_CHANNEL_H
#define MX_OPS_SLICE_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct slice_params {
    int64_t num_outputs;
    int64_t axis;
    bool squeeze_axis;
} slice_params;

#endif /* MX_OPS_SLICE_CHANNEL_H */
