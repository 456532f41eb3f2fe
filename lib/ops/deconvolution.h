/*
 * deconvolution.h - Deconvolution's parameters and the resolution of its
 * sizes, pad and adj (target_shape), shared by the CPU kernels
 * (deconvolution.c) and the cuDNN kernels (deconvolution.cu).
 */
#ifndef MX_OPS_DECONVOLUTION_H
#define MX_OPS_DECONVOLUTION_H

#include "ndarray/ndarray.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct deconv_params {
    mx_tuple kernel, stride, dilate, pad, adj, target_shape;
    int64_t num_filter, num_group, workspace;
    bool no_bias, cudnn_off;
    int cudnn_tune, layout;
} deconv_params;

enum { LAYOUT_NONE, LAYOUT_NCW, LAYOUT_NCHW };

/* Axis i of a spatial tuple in (h, w) order; a 1-D op has h = `h_value`. */
static inline int64_t deconv_axis(const mx_tuple *t, int rank, int i, int64_t dflt, int64_t h_value)
{
    if (rank == 1 && i == 0) return h_value;
    int k = rank == 1 ? 0 : i;
    return t->ndim > 0 ? t->v[k] : dflt;
}

/* The deconvolution's sizes, pad and adj resolved per axis (h, w). */
typedef struct deconv_dims {
    int64_t in[2], out[2], kernel[2], stride[2], dilate[2], pad[2], adj[2];
    int64_t full[2]; /* the output size with no pad and no adj */
    bool from_target;
} deconv_dims;

static inline deconv_dims deconv_resolve(const deconv_params *p, const mx_shape *d)
{
    int r = p->kernel.ndim;
    deconv_dims z;
    memset(&z, 0, sizeof(z));
    for (int i = 0; i < p->target_shape.ndim; i++)
        if (p->target_shape.v[i] != 0) z.from_target = true;
    for (int i = 0; i < 2; i++) {
        z.in[i] = r == 1 && i == 0 ? 1 : d->dims[2 + i - (r == 1)];
        z.kernel[i] = deconv_axis(&p->kernel, r, i, 1, 1);
        z.stride[i] = deconv_axis(&p->stride, r, i, 1, 1);
        z.dilate[i] = deconv_axis(&p->dilate, r, i, 1, 1);
        int64_t span = z.dilate[i] * (z.kernel[i] - 1) + 1, full = z.stride[i] * (z.in[i] - 1) + span;
        z.full[i] = full;
        if (z.from_target && !(r == 1 && i == 0)) {
            int64_t total = full - p->target_shape.v[r == 1 ? 0 : i];
            if (total < 0) total = -1; /* flagged by infer_shape */
            z.adj[i] = total % 2;
            z.pad[i] = (total + 1) / 2;
        } else {
            z.pad[i] = deconv_axis(&p->pad, r, i, 0, 0);
            z.adj[i] = deconv_axis(&p->adj, r, i, 0, 0);
        }
        z.out[i] = full - 2 * z.pad[i] + z.adj[i];
    }
    return z;
}

#endif /* MX_OPS_DECONVOLUTION_H */
