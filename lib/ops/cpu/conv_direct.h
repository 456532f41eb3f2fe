/*
 * conv_direct.h - direct ("implicit GEMM") convolution for strided layers
 * (3x3/2, 1x1/2, 7x7/2, 11x11/4, ...): the products of im2col + SGEMM
 * without a column matrix, in AVX-512 FMA kernels.
 *
 * Forward: each image's input is copied into "planes", one per (input
 * channel c, row phase a = kh mod stride_h, column tap kw), plane row i
 * holding the padded input row a + stride_h*i sampled at columns
 * kw + stride_w*j, j < OW (exactly OW wide: no wasted columns). Tap
 * (c, kh, kw) of output pixel p = oh*OW + ow is then element
 * p + (kh/stride_h)*OW of its plane: every row of the implicit column
 * matrix is a contiguous view, so a micro-kernel loads 16 output pixels at
 * once, broadcasts packed weights and keeps R output channels x V vectors
 * of 16 pixels in registers (8x3 or 6x4 of the 32 zmm); results go
 * straight to y (N, F, OH, OW). Images are processed in bands of output
 * pixels, several images' bands per chunk, so that a chunk's planes stay
 * in L2 while every panel of weights passes over them.
 *
 * Backward-data: at stride 1 a forward convolution of dy with w
 * transposed and flipped (the packing for backward-data is that forward
 * packing), written straight into dx. At other strides dx splits into
 * stride_h * stride_w phases (dx pixels with
 * (ih + pad_h) mod stride_h = a, (iw + pad_w) mod stride_w = b); phase
 * (a, b) is a stride-1 correlation of dy with taps kh = a + stride_h*t,
 * kw = b + stride_w*u of w, run by the same planes (of dy) and kernels,
 * staged per band and interleaved back into dx.
 *
 * Backward-weight: with the forward planes, dw[f, (c, kh, kw)] = sum over
 * output pixels p of dy[f, p] * view[p]: an outer-product kernel over
 * pixels, 16 output channels a vector (dy transposed to pixel-major per
 * chunk), view elements broadcast; no column matrix either.
 *
 * All three are single-threaded functions over an image range: the caller
 * gives each thread its own images and scratch (and, for the weight
 * gradient, its own dw). They need AVX-512F (picked at run time);
 * MX_DIRECT_ISA=none in the environment turns them off (supported() is
 * then false and the caller keeps im2col + SGEMM); any other value, or
 * none, uses AVX-512 where the CPU has it.
 *
 * Accuracy: the products of im2col + SGEMM, summed in float32 with FMA in
 * another order. Measured against a float64 direct convolution, as the
 * largest |error| / (sum of |terms|) of one output (inputs and weights
 * uniform in [-1, 1), up to 40 channels and 7x7 kernels, and the target
 * layers; tests/test_conv_direct.c, bound 1e-5): forward 2.9e-7,
 * backward-data 2.8e-7, weight gradient 3.0e-7.
 *
 * Speed (one Zen 4 core, against mx_conv_* on im2col + SGEMM at one
 * thread, tests/bench_conv_direct.c; forward / backward-data / weight
 * gradient): ResNet-20 3x3/2 stages 1.6-1.9x / 1.4-1.6x / 1.8-2.2x,
 * ResNet-18 layer2 3x3/2 1.15x / 1.07x / 1.13x, the 1x1/2 projections up
 * to 2x, the 7x7/2 and 11x11/4 RGB stems 1.3-1.5x / 1.0x / 1.3-1.6x;
 * see mx_direct_profitable for where it loses.
 */
#ifndef MX_OPS_CONV_DIRECT_H
#define MX_OPS_CONV_DIRECT_H

#include "ops/cpu/im2col.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when g is a groups-1, dilation-1 convolution with strides 1..64,
 * kernels of any height and up to 64 wide, pads 0..k-1 per axis and a
 * non-empty output consistent with the input, and this CPU runs AVX-512F
 * (not turned off by MX_DIRECT_ISA). */
bool mx_direct_supported(const mx_conv_geom *g);

/* True when the direct kernels are expected to beat im2col + SGEMM on one
 * thread for g in all three directions together (weight packing included);
 * implies supported. From the geometry only (never the batch): at least 2
 * input and output channels; not when the output pixels of an image leave
 * more than 10% of their last 16-lane vector empty on a large product
 * (F*C*KH*KW >= 65536: ResNet-18 layer4 on 7x7 outputs); stride-1 1x1
 * only for F*C <= 8192. See conv_direct.c for the measurements. The caller
 * should try Winograd first where it applies (3x3 and 5x5, stride 1).
 * That is the rule for a core whose 512-bit FMAs run at the 256-bit rate.
 * With a pointwise lead (mx_direct_vector_lead) stride-1 1x1 layers with
 * unragged outputs go direct too, whatever their product. With a vector
 * lead the rule is: at least 2 output channels, and not a ragged last
 * vector on a product of 2^21 or more. */
bool mx_direct_profitable(const mx_conv_geom *g);

/* How far the direct kernels lead OpenBLAS's SGEMM on this machine. */
typedef enum mx_direct_lead {
    MX_DIRECT_NO_LEAD,        /* 512-bit FMAs at the 256-bit rate (Zen 4) */
    MX_DIRECT_POINTWISE_LEAD, /* full-width 512-bit FMAs, and OpenBLAS multiplies with AVX-512 too (Xeon):
                                 the direct kernels lead on stride-1 1x1 layers, whose operands come from
                                 memory */
    MX_DIRECT_LEAD,           /* full-width 512-bit FMAs against OpenBLAS's AVX2 kernels (Zen 5): twice
                                 SGEMM's peak rate */
} mx_direct_lead;

/* This machine's lead: from its core (ops/cpu/vector_rate.h) and the core
 * type OpenBLAS runs. */
mx_direct_lead mx_direct_vector_lead(void);

/* The geometry part of mx_direct_profitable for any answer of
 * mx_direct_vector_lead (tests check every rule on any machine). Ignores
 * MX_DIRECT_ISA and the CPU's ISA. */
bool mx_direct_profitable_rule(const mx_conv_geom *g, mx_direct_lead lead);

/* The same for the forward pass alone (prediction, and the forward of a
 * training step): with a vector lead every supported layer with at least
 * 2 output channels; with a pointwise lead every stride-1 1x1 layer with
 * at least 2 input and output channels, and what mx_direct_profitable's
 * rule takes; without one, mx_direct_profitable's rule. */
bool mx_direct_forward_profitable(const mx_conv_geom *g);
bool mx_direct_forward_profitable_rule(const mx_conv_geom *g, mx_direct_lead lead);

/* Bytes of packed weights, forward and backward-data alike (F*C*KH*KW
 * floats), and the packings: w (F, C, KH, KW) -> panels of output channels
 * (forward) or, per dx phase, panels of input channels (backward-data).
 * Any alignment. Cheap (a reordering copy of w): once per call. */
size_t mx_direct_packed_bytes(const mx_conv_geom *g);
void mx_direct_pack_weights(const mx_conv_geom *g, const float *w, float *packed);
void mx_direct_pack_weights_backward(const mx_conv_geom *g, const float *w, float *packed_b);
/* The same for part `part` of `parts` (register-block panels of output
 * channels, forward, or of input channels, backward): the parts write
 * disjoint parts of the result, so threads can share a packing (ResNet-18
 * layer3's 295k weights: 0.14 ms forward, 0.22 ms backward on one thread). */
void mx_direct_pack_weights_part(const mx_conv_geom *g, const float *w, float *packed, int64_t part, int64_t parts);
void mx_direct_pack_weights_backward_part(const mx_conv_geom *g, const float *w, float *packed_b, int64_t part,
                                          int64_t parts);

/* Scratch bytes one thread needs for forward or backward-data calls of up
 * to `images` images (the larger of the two; any alignment: 64 bytes of
 * slack are included): a chunk's planes (and staging) fill about half of
 * L2, so 0.5-1 MB on the benchmark layers (more only when one band of a
 * few rows is larger). Never more for fewer images; 0 for an unsupported
 * geometry. */
size_t mx_direct_scratch_bytes(const mx_conv_geom *g, int64_t images);

/* y (images, F, OH, OW) = conv(x (images, C, H, W), w) (+ bias[f] when bias
 * != NULL); with accumulate, y += that instead. packed from
 * mx_direct_pack_weights. Pointers at the first image of the range;
 * g->batch is not read. Single-threaded. scratch: at least
 * mx_direct_scratch_bytes(g, images) bytes; NULL allocates them for the
 * call. Errors: MX_ERR_INVALID (g not supported), MX_ERR_NOMEM (only when
 * scratch is NULL). */
mx_status mx_direct_forward(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                            const float *bias, bool accumulate, float *y, void *scratch);

/* The same for part `part` of `parts` of the output channels, split into
 * whole register panels as the packing parts are (mx_direct_forward_panels
 * of them; a part may get none): the parts together write exactly what
 * mx_direct_forward writes, bit for bit, so threads can share one image
 * (batch 1). Each part packs the input planes itself. */
int64_t mx_direct_forward_panels(const mx_conv_geom *g);
mx_status mx_direct_forward_part(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                                 int64_t part, int64_t parts, const float *bias, bool accumulate, float *y,
                                 void *scratch);
/* mx_direct_forward_part, then the folded layer `fold` (NULL: none) on
 * each chunk's output rows right after they are written, while they are
 * in cache: what mx_fold_rows over the whole output would give. With
 * accumulate the fold applies to the sums, y = fold(y + conv) (a residual
 * sum folded into the convolution, and its relu). */
mx_status mx_direct_forward_part_fold(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                                      int64_t part, int64_t parts, const float *bias, bool accumulate,
                                      const mx_fold *fold, float *y, void *scratch);

/* dx (images, C, H, W) = the data gradient of dy (images, F, OH, OW) (with
 * accumulate, dx += it). packed_b from mx_direct_pack_weights_backward.
 * Scratch and errors as forward. */
mx_status mx_direct_backward_data(const mx_conv_geom *g, const float *packed_b, const float *dy, int64_t images,
                                  bool accumulate, float *dx, void *scratch);

/* dw (F, C, KH, KW) = the weight gradient over images [0, images) of x and
 * dy (pointers at the first image); with accumulate, dw += it (zero
 * images: dw = 0, or kept). No packed weights needed. Single-threaded: for
 * data parallelism give each thread its own dw (then sum them). scratch:
 * at least mx_direct_wgrad_scratch_bytes(g, images) bytes: a chunk's
 * planes and transposed dy (about half of L2) plus a float accumulator of
 * (C*KH*KW) x (F rounded up to 16) (0.4-0.8 MB on the target layers, 1.7
 * MB on ResNet-18 layer3); NULL allocates them. Errors as forward. */
size_t mx_direct_wgrad_scratch_bytes(const mx_conv_geom *g, int64_t images);
mx_status mx_direct_backward_weight(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                    bool accumulate, float *dw, void *scratch);
/* The same, taking its turn (im2col.h) once, for the whole of dw (the sum
 * is made in scratch first); MX_ERR_RUNTIME (no message) when turn->wait
 * says stop. */
mx_status mx_direct_backward_weight_in_turn(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                            bool accumulate, float *dw, void *scratch, const mx_dw_turn *turn);

#endif /* MX_OPS_CONV_DIRECT_H */
