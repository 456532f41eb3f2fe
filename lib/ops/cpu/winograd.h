/*
 * winograd.h - 3x3 and 5x5 stride-1 convolution by Winograd minimal
 * filtering (Lavin & Gray 2015, "Fast Algorithms for Convolutional Neural
 * Networks"), F(m x m, r x r) with output tiles of m = 2, 4 or 6 for r = 3
 * and m = 2 or 4 for r = 5 (alpha = m + r - 1 input points, T = alpha^2
 * tile positions; F(4, 3) and F(2, 5) share the alpha-6 input transform,
 * F(6, 3) and F(4, 5) the alpha-8 one):
 *
 *   filter transform   U = G g G^T           u (T, C, Fp)      once per w
 *   input transform    V = B^T d B           V (tiles, T, C)   per block
 *   T products         M_t = V_t U_t         M (tiles, T, F)   FMA kernels
 *   output transform   Y = A^T M A (+ bias)  -> y (N, F, OH, OW)
 *
 * Cp, Fp: C and F rounded up to 16 (the transforms work on 16 channels at
 * a time; the padding is zero). Inputs are first copied into a zero-padded
 * channel-last buffer per image, so edge tiles and `pad` need no special
 * cases; outputs come back through a channel-last staging buffer. Tiles of
 * an image range are processed in blocks of 36 so that a block's V and M
 * stay in cache between the transforms and the products; small images are
 * grouped so that a block spans several.
 *
 * The kernels are single-threaded functions over an image range: the
 * caller (data-parallel convolution) gives each thread its own images and
 * scratch. AVX-512 and AVX2+FMA variants are picked at run time, with a
 * baseline SSE2 fallback (products through cblas_sgemm there, so OpenBLAS
 * should be at one thread).
 *
 * The weight gradient runs the same way (dL/dU = sum over tiles of
 * (A dY A^T) . V as T products, then dw = G^T dL/dU G).
 *
 * Accuracy (float32, against a float64 direct convolution, as max |err|
 * over a tensor / the largest sum of |terms| of one output; inputs and
 * weights uniform in [-1, 1), up to 160 channels; tests/test_winograd.c):
 * forward and backward-data F(2x2) 2.3e-7 (im2col + SGEMM: 2.8e-7),
 * F(4x4) 3.5e-6, F(6x6) 6.4e-6; weight gradient F(2x2) 2.5e-7, F(4x4)
 * 1.8e-6, F(6x6) 3.0e-6. 5x5: forward and backward-data F(2x2, 5x5)
 * 1.7e-6, F(4x4, 5x5) 2.6e-6; weight gradient 4.2e-6 and 1.1e-5.
 *
 * Tile size: mx_winograd_tile() chooses m from the geometry (never from
 * the batch size, so transform_filter and forward agree; F(4) unless the
 * output is so small that F(2) computes fewer products, for both kernel
 * sizes). The environment variable MX_WINOGRAD_TILE=2|4|6 (2|4 for 5x5)
 * overrides it (tests and benchmarks; set
 * it before transforming the filters), and MX_WINOGRAD_ISA=sse|avx2|avx512
 * caps the vector code used.
 */
#ifndef MX_OPS_WINOGRAD_H
#define MX_OPS_WINOGRAD_H

#include "ops/cpu/im2col.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when g is a 3x3 or 5x5, stride-1, dilation-1, groups-1 convolution
 * with pads 0..r-1 (each axis) and a non-empty output, which Winograd
 * handles. */
bool mx_winograd_supported(const mx_conv_geom *g);

/* True when Winograd is expected to beat im2col + SGEMM on one thread for
 * g, forward and backward-data alike (the rule is symmetric in C and F),
 * filter transforms included; implies supported. The rule: min(C, F) >= 4,
 * C*F >= 64, and, when g->batch > 0, at least 8 tiles in the whole batch
 * (see winograd.c and the measurements in tests/bench_winograd.c). */
bool mx_winograd_profitable(const mx_conv_geom *g);

/* The output tile m (2, 4 or 6) used for g: from the geometry (never the
 * batch) and MX_WINOGRAD_TILE only. */
int mx_winograd_tile(const mx_conv_geom *g);

/* Bytes of the transformed filters for g, and the transform itself:
 * w (F, C, r, r) -> u (T, C, Fp), each u_t stored as column panels of 32
 * output channels. Any alignment, but allocate u 64-byte aligned: large
 * transforms (>= 2 MB) are then written with streaming stores, 2-3x
 * faster (they are bound by memory bandwidth). */
size_t mx_winograd_filter_bytes(const mx_conv_geom *g);
void mx_winograd_transform_filter(const mx_conv_geom *g, const float *w, float *u);
/* The same for part `part` of `parts` (input channels C*part/parts up to
 * C*(part+1)/parts): the parts write disjoint parts of u, so threads can
 * share the transform (it is bound by memory bandwidth on large layers). */
void mx_winograd_transform_filter_part(const mx_conv_geom *g, const float *w, float *u, int64_t part, int64_t parts);

/* Output-channel slices. A layer's transformed filters can be made and
 * used a slice of output channels at a time, so that only one slice's are
 * held (ResNet-50's 512 -> 512 layers: 36 MiB whole). gs = g with output
 * channels [o0, o1) only: mx_winograd_filter_bytes(gs) and
 * mx_winograd_scratch_bytes(gs, images) size a slice's filters and
 * scratch. The slice transform writes u for gs from the whole layer's w
 * (backward: u_b for gb's output channels [o0, o1), i.e. input channels of
 * g; parts of g's input channels, or of F when backward, as the _part
 * functions). The slice forward writes (or adds to) channels [o0, o1) of
 * the whole layer's y, with bias the whole layer's (NULL none); each
 * output has the bits the whole forward gives it. */
void mx_winograd_slice_geom(const mx_conv_geom *g, int64_t o0, int64_t o1, mx_conv_geom *gs);
void mx_winograd_transform_filter_slice_part(const mx_conv_geom *g, const float *w, bool backward, int64_t o0,
                                             int64_t o1, float *u, int64_t part, int64_t parts);
mx_status mx_winograd_forward_slice(const mx_conv_geom *g, int64_t o0, int64_t o1, const float *u, const float *x,
                                    int64_t images, const float *bias, bool accumulate, float *y, void *scratch);

/* Scratch bytes one thread needs to process up to `images` images per
 * call (any alignment: 64 bytes of slack are included). */
size_t mx_winograd_scratch_bytes(const mx_conv_geom *g, int64_t images);

/* y for images [0, images) of x (pointers already at the first image):
 * y = conv(x, w) (+ bias[f] when bias != NULL); with accumulate, y += that
 * instead. u from mx_winograd_transform_filter(g, ...). Single-threaded.
 * scratch: at least mx_winograd_scratch_bytes(g, images) bytes; NULL
 * allocates them for the call. g->batch is not read. Errors: MX_ERR_NOMEM
 * (only when scratch is NULL), MX_ERR_INVALID (g not supported). */
/* The forward of one group of images shared by threads (a batch smaller
 * than the pool: prediction at batch 1), in three steps: begin packs x
 * and the bias into `shared` (mx_winograd_shared_bytes); the tile blocks,
 * [b0, b1) of mx_winograd_shared_blocks, then run on any threads at once,
 * each with its own scratch (mx_winograd_block_bytes); end writes y (with
 * accumulate, adds to it). The same bits as mx_winograd_forward. The
 * counts and sizes are 0 when the images are more than one group (the
 * images of one block of tiles) or g is not supported. */
int64_t mx_winograd_shared_blocks(const mx_conv_geom *g, int64_t images);
size_t mx_winograd_shared_bytes(const mx_conv_geom *g, int64_t images);
size_t mx_winograd_block_bytes(const mx_conv_geom *g, int64_t images);
void mx_winograd_shared_begin(const mx_conv_geom *g, const float *x, int64_t images, const float *bias, void *shared);
void mx_winograd_shared_blocks_run(const mx_conv_geom *g, const float *u, int64_t images, const float *bias,
                                   int64_t b0, int64_t b1, void *shared, void *scratch);
void mx_winograd_shared_end(const mx_conv_geom *g, int64_t images, bool accumulate, float *y, void *shared);

mx_status mx_winograd_forward(const mx_conv_geom *g, const float *u, const float *x, int64_t images, const float *bias,
                              bool accumulate, float *y, void *scratch);

/* Backward-data as a Winograd convolution too: dx is the full correlation
 * of dy with w rotated by 180 degrees and its channel axes swapped, i.e. a
 * r x r stride-1 convolution of dy (F, OH, OW) with pad r - 1 - pad giving
 * (C, H, W). gb gets that geometry (in_c = F, out_c = C, in = OH x OW,
 * out = H x W, pad r - 1 - pad, same batch); u_b (filter_bytes(gb) bytes) its
 * transformed filter. Then
 *   mx_winograd_forward(&gb, u_b, dy, images, NULL, accumulate, dx, scratch)
 * with scratch of mx_winograd_scratch_bytes(&gb, images) bytes. */
void mx_winograd_backward_geom(const mx_conv_geom *g, mx_conv_geom *gb);
void mx_winograd_transform_filter_backward(const mx_conv_geom *g, const float *w, float *u_b);
void mx_winograd_transform_filter_backward_part(const mx_conv_geom *g, const float *w, float *u_b, int64_t part,
                                                int64_t parts); /* parts of F, as above */

/* Weight gradient as Winograd products too: with U = G g G^T and
 * Y = A^T (U . V) A per tile, dL/dU = sum over tiles of (A dY A^T) . V,
 * and dw = G^T (dL/dU) G. dw (F, C, r, r) = the weight gradient over
 * images [0, images) of x (N, C, H, W) and dy (N, F, OH, OW) (pointers at
 * the first image); with accumulate, dw += it. Single-threaded; for data
 * parallelism give each thread its own dw (then sum them) or run the
 * threads' ranges one after another with accumulate. scratch: at least
 * mx_winograd_wgrad_scratch_bytes(g, images) bytes (it holds a dL/dU of
 * filter_bytes(g)); NULL allocates them for the call. Errors as forward. */
size_t mx_winograd_wgrad_scratch_bytes(const mx_conv_geom *g, int64_t images);
mx_status mx_winograd_backward_weight(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                      bool accumulate, float *dw, void *scratch);
/* The same, taking its turn (im2col.h) for each block of input channels
 * of dw it writes; MX_ERR_RUNTIME (no message) when turn->wait says stop. */
mx_status mx_winograd_backward_weight_in_turn(const mx_conv_geom *g, const float *x, const float *dy,
                                              int64_t images, bool accumulate, float *dw, void *scratch,
                                              const mx_dw_turn *turn);

#endif /* MX_OPS_WINOGRAD_H */
