/*
 * im2col.h - convolution lowered to SGEMM (Caffe's im2col scheme), shared
 * by Convolution and Deconvolution (a deconvolution is the transpose of a
 * convolution: its forward is a convolution's backward-data and its
 * backward-data a convolution's forward).
 *
 * Everything is described in terms of one plain 2-D grouped convolution
 *   y (N, F, OH, OW) = conv(x (N, C, H, W), w (F, C/G, KH, KW))
 * with stride, dilation and zero padding; a 1-D convolution is the H = 1,
 * KH = 1 case. Images are lowered in chunks of B: the column buffer holds
 * (C*KH*KW, B*OH*OW) so that one SGEMM per group covers B images (small
 * layers then give OpenBLAS matrices big enough to use every core); the
 * product lands in a staging buffer (F, B*OH*OW) and is scattered to
 * (B, F, OH*OW). A 1x1, stride-1, unpadded convolution of one image needs
 * no lowering at all and goes straight to SGEMM.
 */
#ifndef MX_OPS_IM2COL_H
#define MX_OPS_IM2COL_H

#include "ops/op.h"
#include "parallel/parallel.h"

typedef struct mx_conv_geom {
    int64_t batch, in_c, in_h, in_w; /* x: (N, C, H, W) */
    int64_t out_c, out_h, out_w;     /* y: (N, F, OH, OW) */
    int64_t k_h, k_w;
    int64_t stride_h, stride_w;
    int64_t dil_h, dil_w;
    int64_t pad_h, pad_w;
    int64_t groups;
} mx_conv_geom;

/* Pieces of a batch adding their weight gradients into one dw in piece
 * order, a block at a time, instead of each into a buffer of its own that
 * is summed afterwards (for a write request the same additions in the same
 * order; an add request adds each piece onto dw in turn): before a
 * piece writes dw up to `end` (in the kernel's units: input channels for
 * Winograd, C * KH * KW for the direct kernels, which write it all at
 * once), it calls wait, which returns once the piece before has written
 * that far (false: an earlier piece failed, stop); after, done. */
typedef struct mx_dw_turn {
    bool (*wait)(void *ctx, int64_t end);
    void (*done)(void *ctx, int64_t end);
    void *ctx;
} mx_dw_turn;

/* The data gradient of a stride-1 g as a forward convolution: of dy
 * (in_c = F, OH x OW) with w transposed and flipped, padded by
 * k_h-1-pad_h and k_w-1-pad_w, giving (C, H, W); same batch. */
void mx_conv_transposed_geom(const mx_conv_geom *g, mx_conv_geom *gt);

/* Whether a forward call on `images` of g's images that writes y (not adds)
 * stores y past the caches: the whole layer's output (g's batch, or the
 * call's images) is MX_SIMD_STREAM_MIN_BYTES or more (simd.h). */
bool mx_conv_output_streams(const mx_conv_geom *g, int64_t images);

/* Images lowered per chunk when `limit_bytes` of workspace may be used
 * (at least 1, at most the batch). */
int64_t mx_conv_chunk(const mx_conv_geom *g, size_t limit_bytes);
/* Workspace bytes the kernels below want for chunks of `chunk` images
 * (0 when nothing needs lowering). */
size_t mx_conv_workspace_bytes(const mx_conv_geom *g, int64_t chunk);

/* y = conv(x, w) (+ bias per output channel when bias != NULL), written
 * per req. ws/ws_bytes: the workspace; when it is smaller than one image
 * needs, a buffer is allocated for the call. Errors: MX_ERR_NOMEM. */
mx_status mx_conv_forward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w, const float *bias, float *y,
                          mx_req req, void *ws, size_t ws_bytes);
/* The same with a folded element-wise layer (NULL or kind none: none)
 * applied to each piece of images right after it is written; req must not
 * be add. */
mx_status mx_conv_forward_act(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                              const float *bias, const mx_fold *fold, float *y, mx_req req, void *ws, size_t ws_bytes);

/* A layer's weights in the form its forward kernel reads them: Winograd's
 * transformed filters (4x the weights' size for F(4x4, 3x3)) or the direct
 * kernels' packing (the same size); nothing for layers on im2col + SGEMM
 * or the depthwise kernels, which read w itself; nothing either for
 * batches of 4 or more, where that work is a small share of the layer's.
 * Derived once for weights that never change (a predictor's), it spares
 * each forward pass that work (ResNet-50 at batch 1: a quarter of its CPU
 * time). */
typedef struct mx_conv_prepared mx_conv_prepared;
mx_status mx_conv_prepare(mx_threadpool *pool, const mx_conv_geom *g, const float *w, mx_conv_prepared **out);
void mx_conv_prepared_free(mx_conv_prepared *p);
/* mx_conv_forward_act with prep's weights, derived from this w: the same
 * bits. A prep made for another geometry (or NULL) is ignored: the weights
 * are derived for the call, as mx_conv_forward_act does. */
mx_status mx_conv_forward_prepared(mx_threadpool *pool, const mx_conv_geom *g, const mx_conv_prepared *prep,
                                   const float *x, const float *w, const float *bias, const mx_fold *fold, float *y,
                                   mx_req req, void *ws, size_t ws_bytes);
/* A residual sum folded into the convolution: y = fold(conv(x) + addend),
 * conv(x) with its bias; addend has y's shape and may be y itself (then
 * nothing is copied). The direct kernels add and apply a relu as they
 * store (the unfolded layers' bits); the other paths add into y, then run
 * the fold over it. */
mx_status mx_conv_forward_residual(mx_threadpool *pool, const mx_conv_geom *g, const mx_conv_prepared *prep,
                                   const float *x, const float *w, const float *bias, const float *addend,
                                   const mx_fold *fold, float *y, void *ws, size_t ws_bytes);

/* From dy (N, F, OH, OW): dx (per req_dx, skipped when MX_REQ_NULL or dx
 * NULL) and dw (per req_dw, likewise). x is read only for dw, w only for
 * dx. Errors: MX_ERR_NOMEM. */
mx_status mx_conv_backward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w, const float *dy, float *dx,
                           mx_req req_dx, float *dw, mx_req req_dw, void *ws, size_t ws_bytes);

/* db[f] (per req) = sum of dy over batch and space; dy is (N, F, S).
 * Channels are split across pool (NULL: the caller alone). */
void mx_conv_bias_grad(mx_threadpool *pool, const float *dy, int64_t n, int64_t f, int64_t s, float *db, mx_req req);
/* y[n, f, :] += bias[f] for y (N, F, S). */
void mx_conv_add_bias(float *y, const float *bias, int64_t n, int64_t f, int64_t s);

/* The lowering itself for one image x (C, H, W): col rows are (c, kh, kw),
 * columns the output positions, row stride ldcol. col2im adds col back
 * into dx (C, H, W), which the caller has zeroed or wants accumulated. */
void mx_im2col(const mx_conv_geom *g, const float *x, float *col, int64_t ldcol);
void mx_col2im(const mx_conv_geom *g, const float *col, int64_t ldcol, float *dx);

#endif /* MX_OPS_IM2COL_H */
