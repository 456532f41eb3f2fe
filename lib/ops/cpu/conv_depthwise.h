/*
 * conv_depthwise.h - depthwise convolution (num_group == channels ==
 * num_filter: one KHxKW filter per channel, as in MobileNet) computed
 * directly, vectorised over output pixels, instead of one tiny im2col +
 * SGEMM per group (a 1-row product per channel, which is slow).
 *
 * Each (image, channel) plane is copied into `stride_w` column-phase
 * planes of the zero-padded input (phase b, row r, column j = padded pixel
 * (r, b + stride_w*j)), so that tap (kh, kw) of output pixels ow..ow+W-1
 * is one contiguous vector load whatever the stride and dilation. Forward
 * keeps several output rows' accumulators in registers; backward-data adds
 * dy * w into phase planes of dx (the transpose of the same loads) and
 * unpads them; the weight gradient sums dy * (the forward's loads) per tap.
 * Kernels in every SIMD width (ops/simd.h, chosen at run time); the pool
 * splits forward by (image, channel) and backward by channel (each
 * channel's dw summed over the images in order), so the results do not
 * depend on the thread count.
 */
#ifndef MX_OPS_CONV_DEPTHWISE_H
#define MX_OPS_CONV_DEPTHWISE_H

#include "ops/cpu/im2col.h"

#include <stdbool.h>

/* True when g is depthwise with channel multiplier 1 (groups == in_c ==
 * out_c > 1) and one plane's phase buffers fit the per-thread scratch cap. */
bool mx_depthwise_supported(const mx_conv_geom *g);

/* y = conv(x, w) (+ bias), per req (MX_REQ_ADD adds), then the folded
 * layer `fold` (NULL: none; not with MX_REQ_ADD) on each plane while it is
 * in cache. Errors: MX_ERR_NOMEM. */
mx_status mx_depthwise_forward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                               const float *bias, const mx_fold *fold, float *y, mx_req req);

/* dx (per req_dx; skipped when dx NULL or MX_REQ_NULL) and dw (per req_dw,
 * likewise) from dy. Errors: MX_ERR_NOMEM. */
mx_status mx_depthwise_backward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                                const float *dy, float *dx, mx_req req_dx, float *dw, mx_req req_dw);

#endif /* MX_OPS_CONV_DEPTHWISE_H */
