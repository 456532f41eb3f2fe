/*
 * pooling.h - Pooling's parameters, shared by its CPU kernels (pooling.c)
 * and its CUDA kernels (pooling.cu).
 */
#ifndef MX_OPS_POOLING_H
#define MX_OPS_POOLING_H

#include "ops/op.h"

#include <stdbool.h>

enum { POOL_MAX, POOL_AVG, POOL_SUM, POOL_LP };
enum { CONV_VALID, CONV_FULL, CONV_SAME };
enum { LAYOUT_NONE, LAYOUT_NCW, LAYOUT_NCHW, LAYOUT_NCDHW, LAYOUT_NWC, LAYOUT_NHWC, LAYOUT_NDHWC };

typedef struct pool_params {
    mx_tuple kernel, stride, pad;
    int pool_type;
    int pooling_convention;
    bool global_pool;
    bool cudnn_off;
    bool count_include_pad;
    int layout;
} pool_params;

/* The problem in 3 spatial axes (leading ones padded with size 1). */
typedef struct pool_geom {
    int64_t planes;                          /* N*C */
    int64_t in[3], out[3], k[3], s[3], p[3]; /* (d, y, x) */
} pool_geom;

/* The geometry of data -> outp under pp (global_pool: the whole plane).
 * (pooling.c; pooling.cu too.) */
void mx_pool_geometry(const pool_params *pp, const mx_shape *data, const mx_shape *outp, pool_geom *g);

/* The window of output o along axis a, clipped to the input: [*lo, *hi);
 * returns the avg divisor's factor (the padded window's size with
 * include_pad, else the clipped one). Host and device (pooling.cu). */
#ifdef __CUDACC__
#define MX_POOL_HD __host__ __device__
#else
#define MX_POOL_HD
#endif
MX_POOL_HD static inline int64_t mx_pool_axis_window(const pool_geom *g, int a, int64_t o, bool include_pad,
                                                     int64_t *lo, int64_t *hi)
{
    int64_t start = o * g->s[a] - g->p[a];
    int64_t end = start + g->k[a];
    if (end > g->in[a] + g->p[a]) end = g->in[a] + g->p[a];
    int64_t padded = end - start;
    *lo = start > 0 ? start : 0;
    *hi = end < g->in[a] ? end : g->in[a];
    return include_pad ? padded : *hi - *lo;
}

#endif /* MX_OPS_POOLING_H */
