/* test_conv_direct.c - the direct strided convolution (lib/ops/cpu/conv_direct.c)
 * forward, backward-data and weight gradient against a float64 direct
 * convolution: random shapes (strides 1..4 per axis, kernels 1..7 and
 * non-square, pads 0..k-1, odd sizes, 1..40 channels, batches 1..3), the
 * target layers (ResNet-18/20 3x3/2 and 1x1/2, the 7x7/2 and 11x11/4
 * stems) at batch 1-2, bias, accumulate, one call for all images or one
 * per image, NULL scratch; and against im2col + SGEMM (mx_conv_forward /
 * mx_conv_backward) on the same data. Also: MX_DIRECT_ISA=none turns the
 * kernels off, unsupported geometries are refused, scratch never grows
 * for fewer images.
 *
 * Error measure, per output: |got - ref| / S, S the sum of |terms| of that
 * output (|x*w| products, |bias|, |previous value| when accumulating); an
 * output with S = 0 must be exactly 0. Bound ERR_BOUND = 1e-5 for every
 * direction (float32 sums of up to ~10^4 products, each rounded once by
 * FMA); the measured maxima are printed.
 */
#include "blas/blas.h"
#include "ops/activation.h"
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/im2col.h"
#include "ops/cpu/vector_rate.h"
#include "ops/cpu/winograd.h"
#include "parallel/parallel.h"
#include "support/conv_ref.h"
#include "support/testrand.h"

#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR_BOUND 1e-5

static double *doubles(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}

static mx_conv_geom geom(int64_t n, int64_t c, int64_t f, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh,
                         int64_t sw, int64_t ph, int64_t pw)
{
    mx_conv_geom g = {.batch = n,
                      .in_c = c,
                      .in_h = h,
                      .in_w = w,
                      .out_c = f,
                      .out_h = (h + 2 * ph - kh) / sh + 1,
                      .out_w = (w + 2 * pw - kw) / sw + 1,
                      .k_h = kh,
                      .k_w = kw,
                      .stride_h = sh,
                      .stride_w = sw,
                      .dil_h = 1,
                      .dil_w = 1,
                      .pad_h = ph,
                      .pad_w = pw,
                      .groups = 1};
    return g;
}

/* Largest |got - (prev + ref)| / (|prev| + S) over n outputs (prev NULL:
 * 0); an output whose scale is 0 must match exactly (else returns 1). */
static double rel_err(const float *got, const float *prev, const double *ref, const double *abs_sum, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = ref[i] + (prev ? prev[i] : 0.0), scale = abs_sum[i] + (prev ? fabs(prev[i]) : 0.0);
        double d = fabs((double)got[i] - want);
        double e = scale > 0 ? d / scale : d == 0 ? 0.0 : 1.0;
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    return worst;
}

static double worst_fwd, worst_bwd, worst_wgt;

static void note(double *worst, double e)
{
    if (!(e <= *worst)) *worst = e;
}

static void print_worst(const char *what)
{
    printf("%s: max error / sum of |terms|: forward %.2e, backward-data %.2e, weight gradient %.2e (bound %.0e)\n",
           what, worst_fwd, worst_bwd, worst_wgt, ERR_BOUND);
}

#define SHAPE_FMT "(%lld,%lld,%lld,%lld) k%lldx%lld s%lld,%lld p%lld,%lld -> %lld"
#define SHAPE_ARGS(g)                                                                                                  \
    (long long)(g).batch, (long long)(g).in_c, (long long)(g).in_h, (long long)(g).in_w, (long long)(g).k_h,          \
        (long long)(g).k_w, (long long)(g).stride_h, (long long)(g).stride_w, (long long)(g).pad_h,                   \
        (long long)(g).pad_w, (long long)(g).out_c

/* Every direction and mode on one geometry. */
static void check_geom(const mx_conv_geom *gp, bool use_bias)
{
    const mx_conv_geom g = *gp;
    ck_assert_msg(mx_direct_supported(&g), "not supported: " SHAPE_FMT, SHAPE_ARGS(g));
    const int64_t n = g.batch, C = g.in_c, F = g.out_c;
    const int64_t in_img = C * g.in_h * g.in_w, out_img = F * g.out_h * g.out_w;
    const int64_t nx = n * in_img, ny = n * out_img, nw = F * C * g.k_h * g.k_w;
    float *x = test_rand_floats(nx), *w = test_rand_floats(nw), *bias = use_bias ? test_rand_floats(F) : NULL;
    float *dy = test_rand_floats(ny), *y0 = test_rand_floats(ny), *dx0 = test_rand_floats(nx), *dw0 = test_rand_floats(nw);
    /* y on 64-byte lines, as the executor places tensors: large outputs'
     * whole vectors are then stored past the caches */
    float *y = aligned_alloc(64, (size_t)(ny + 15) / 16 * 64), *dx = malloc((size_t)nx * sizeof(float));
    float *dw = malloc((size_t)nw * sizeof(float)), *packed = malloc(mx_direct_packed_bytes(&g));
    float *packed_b = malloc(mx_direct_packed_bytes(&g));
    double *ref_y = doubles(ny), *abs_y = doubles(ny), *ref_dx = doubles(nx), *abs_dx = doubles(nx);
    double *ref_w = doubles(nw), *abs_w = doubles(nw);
    ck_assert(y && dx && dw && packed && packed_b);
    conv_ref_forward(&g, x, w, bias, ref_y, abs_y);
    conv_ref_backward(&g, dy, w, ref_dx, abs_dx);
    conv_ref_weight(&g, x, dy, ref_w, abs_w);
    ck_assert_uint_eq(mx_direct_packed_bytes(&g), (size_t)nw * sizeof(float));
    mx_direct_pack_weights(&g, w, packed);
    mx_direct_pack_weights_backward(&g, w, packed_b);
    /* scratch for the whole batch, misaligned by 4 bytes; sized exactly
     * (ASan catches plain reads past it) */
    size_t sb = mx_direct_scratch_bytes(&g, n), wsb = mx_direct_wgrad_scratch_bytes(&g, n);
    char *scratch = malloc((sb > wsb ? sb : wsb) + 4);
    ck_assert_ptr_nonnull(scratch);
    double e;

    /* forward: write, whole batch */
    for (int64_t i = 0; i < ny; i++) y[i] = NAN;
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, n, bias, false, y, scratch + 4), MX_OK);
    e = rel_err(y, NULL, ref_y, abs_y, ny);
    note(&worst_fwd, e);
    ck_assert_msg(e <= ERR_BOUND, "forward " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);
    /* forward: accumulate, one image per call, NULL scratch */
    memcpy(y, y0, (size_t)ny * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_eq(mx_direct_forward(&g, packed, x + i * in_img, 1, bias, true, y + i * out_img, NULL), MX_OK);
    e = rel_err(y, y0, ref_y, abs_y, ny);
    note(&worst_fwd, e);
    ck_assert_msg(e <= ERR_BOUND, "forward accumulate " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);
    /* forward: accumulate, whole batch (several images' short tails share
     * vectors, then are added: 7x7 layers) */
    memcpy(y, y0, (size_t)ny * sizeof(float));
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, n, bias, true, y, scratch + 4), MX_OK);
    e = rel_err(y, y0, ref_y, abs_y, ny);
    note(&worst_fwd, e);
    ck_assert_msg(e <= ERR_BOUND, "forward accumulate, whole batch " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);

    /* backward-data: write, whole batch */
    for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
    ck_assert_int_eq(mx_direct_backward_data(&g, packed_b, dy, n, false, dx, scratch + 4), MX_OK);
    e = rel_err(dx, NULL, ref_dx, abs_dx, nx);
    note(&worst_bwd, e);
    ck_assert_msg(e <= ERR_BOUND, "backward-data " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);
    /* backward-data: accumulate, one image per call */
    memcpy(dx, dx0, (size_t)nx * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_eq(mx_direct_backward_data(&g, packed_b, dy + i * out_img, 1, true, dx + i * in_img, scratch),
                         MX_OK);
    e = rel_err(dx, dx0, ref_dx, abs_dx, nx);
    note(&worst_bwd, e);
    ck_assert_msg(e <= ERR_BOUND, "backward-data accumulate " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);
    memcpy(dx, dx0, (size_t)nx * sizeof(float));
    ck_assert_int_eq(mx_direct_backward_data(&g, packed_b, dy, n, true, dx, scratch + 4), MX_OK);
    e = rel_err(dx, dx0, ref_dx, abs_dx, nx);
    note(&worst_bwd, e);
    ck_assert_msg(e <= ERR_BOUND, "backward-data accumulate, whole batch " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);

    /* weight gradient: write, whole batch, NULL scratch */
    for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
    ck_assert_int_eq(mx_direct_backward_weight(&g, x, dy, n, false, dw, NULL), MX_OK);
    e = rel_err(dw, NULL, ref_w, abs_w, nw);
    note(&worst_wgt, e);
    ck_assert_msg(e <= ERR_BOUND, "weight gradient " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);
    /* weight gradient: accumulated one image at a time onto dw0 */
    memcpy(dw, dw0, (size_t)nw * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ck_assert_int_eq(
            mx_direct_backward_weight(&g, x + i * in_img, dy + i * out_img, 1, true, dw, scratch + 4), MX_OK);
    e = rel_err(dw, dw0, ref_w, abs_w, nw);
    note(&worst_wgt, e);
    ck_assert_msg(e <= ERR_BOUND, "weight gradient accumulate " SHAPE_FMT ": err %g", SHAPE_ARGS(g), e);

    /* im2col + SGEMM on the same data, and the direct results against it */
    float *yi = malloc((size_t)ny * sizeof(float)), *dxi = malloc((size_t)nx * sizeof(float));
    float *dwi = malloc((size_t)nw * sizeof(float));
    ck_assert(yi && dxi && dwi);
    setenv("MX_DIRECT_ISA", "none", 1); /* mx_conv_* would pick the direct kernels themselves */
    ck_assert_int_eq(mx_conv_forward(NULL, &g, x, w, bias, yi, MX_REQ_WRITE, NULL, 0), MX_OK);
    ck_assert_int_eq(mx_conv_backward(NULL, &g, x, w, dy, dxi, MX_REQ_WRITE, dwi, MX_REQ_WRITE, NULL, 0), MX_OK);
    unsetenv("MX_DIRECT_ISA");
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, n, bias, false, y, scratch), MX_OK);
    ck_assert_int_eq(mx_direct_backward_data(&g, packed_b, dy, n, false, dx, scratch), MX_OK);
    ck_assert_int_eq(mx_direct_backward_weight(&g, x, dy, n, false, dw, scratch), MX_OK);
    double ei = rel_err(yi, NULL, ref_y, abs_y, ny);
    ck_assert_msg(ei <= ERR_BOUND, "im2col forward: err %g", ei);
    ei = rel_err(dxi, NULL, ref_dx, abs_dx, nx);
    ck_assert_msg(ei <= ERR_BOUND, "im2col backward-data: err %g", ei);
    ei = rel_err(dwi, NULL, ref_w, abs_w, nw);
    ck_assert_msg(ei <= ERR_BOUND, "im2col weight gradient: err %g", ei);
    struct {
        const float *a, *b;
        const double *scale;
        int64_t n;
        const char *what;
    } pairs[] = {{y, yi, abs_y, ny, "forward"}, {dx, dxi, abs_dx, nx, "backward-data"}, {dw, dwi, abs_w, nw, "wgrad"}};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < pairs[k].n; i++) {
            double d = fabs((double)pairs[k].a[i] - pairs[k].b[i]);
            ck_assert_msg(d <= 2 * ERR_BOUND * pairs[k].scale[i], "direct vs im2col %s " SHAPE_FMT " at %lld: %g vs %g",
                          pairs[k].what, SHAPE_ARGS(g), (long long)i, pairs[k].a[i], pairs[k].b[i]);
        }
    free(yi);
    free(dxi);
    free(dwi);

    free(scratch);
    free(x);
    free(w);
    free(bias);
    free(dy);
    free(y0);
    free(dx0);
    free(dw0);
    free(y);
    free(dx);
    free(dw);
    free(packed);
    free(packed_b);
    free(ref_y);
    free(abs_y);
    free(ref_dx);
    free(abs_dx);
    free(ref_w);
    free(abs_w);
}

/* Random shapes: strides 1..4 per axis, kernels 1..7 (non-square too),
 * pads 0..k-1, sizes 1..31, channels 1..40, batches 1..3. */
START_TEST(random_shapes)
{
    test_rand_seed(0x1234567887654321ull);
    int done = 0;
    while (done < 150) {
        int64_t kh = test_irand(1, 7), kw = test_irand(1, 7);
        if (test_irand(0, 2) == 0) kw = kh;
        int64_t sh = test_irand(1, 4), sw = test_irand(1, 4);
        if (test_irand(0, 3) == 0) sw = sh;
        int64_t ph = test_irand(0, kh - 1), pw = test_irand(0, kw - 1);
        int64_t h = test_irand(1, 31), w = test_irand(1, 31);
        if (h + 2 * ph < kh || w + 2 * pw < kw) continue;
        int64_t n = test_irand(1, 3), c = test_irand(1, 40), f = test_irand(1, 40);
        mx_conv_geom g = geom(n, c, f, h, w, kh, kw, sh, sw, ph, pw);
        while (n * c * f * kh * kw * g.out_h * g.out_w > 3000000) {
            if (c > 1) c = (c + 1) / 2;
            else if (f > 1) f = (f + 1) / 2;
            else n = 1;
            g = geom(n, c, f, h, w, kh, kw, sh, sw, ph, pw);
        }
        check_geom(&g, done % 3 != 0);
        done++;
    }
    print_worst("random shapes");
}
END_TEST

/* Hand-picked edges: 1x1 outputs, channels around 16 and the register
 * blocks (8, 6, 24), stride above the kernel, wide rows, tall kernels. */
START_TEST(edge_shapes)
{
    static const int64_t cases[][11] = {
        /* n, c, f, h, w, kh, kw, sh, sw, ph, pw */
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},     {2, 1, 1, 3, 3, 3, 3, 2, 2, 0, 0},
        {1, 3, 5, 2, 2, 1, 1, 2, 2, 0, 0},     {2, 16, 16, 7, 9, 3, 3, 2, 2, 1, 1},
        {3, 17, 33, 12, 10, 3, 3, 2, 2, 1, 1}, {1, 15, 24, 13, 13, 5, 5, 3, 3, 2, 2},
        {2, 8, 48, 9, 9, 1, 1, 4, 4, 0, 0},    {1, 5, 7, 40, 3, 7, 1, 2, 1, 3, 0},
        {1, 4, 9, 3, 40, 1, 7, 1, 2, 0, 3},    {2, 6, 18, 1, 33, 1, 3, 1, 2, 0, 1},
        {1, 9, 11, 30, 30, 2, 2, 2, 2, 1, 1},  {1, 2, 3, 50, 70, 3, 3, 2, 2, 1, 1},
        {3, 40, 40, 6, 6, 6, 6, 4, 4, 5, 5},   {1, 7, 64, 17, 5, 4, 2, 3, 1, 3, 1},
        /* backward-data reading dy in place (one tap per phase, whole rows) */
        {2, 5, 7, 10, 12, 2, 2, 2, 2, 0, 0},   {3, 9, 20, 31, 29, 1, 1, 3, 3, 0, 0},
        {2, 24, 9, 11, 13, 2, 2, 2, 2, 0, 0},
        /* forward reading x in place (1x1, stride 1, no padding): ragged
         * images, one row, one pixel */
        {3, 17, 20, 9, 11, 1, 1, 1, 1, 0, 0},  {2, 6, 10, 1, 37, 1, 1, 1, 1, 0, 0},
        {4, 3, 9, 1, 1, 1, 1, 1, 1, 0, 0},
        /* weight gradients over several blocks of output channels, the last
         * one narrower (80: 4 + 1 vectors; 100: 4 + 3, the last ragged; the
         * 1x1 one, and the in-place cases above with more filters than
         * channels, run with the roles of x and dy swapped: wgrad_geom) */
        {2, 12, 80, 7, 7, 1, 1, 1, 1, 0, 0},   {2, 9, 100, 9, 11, 3, 3, 2, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t *k = cases[i];
        mx_conv_geom g = geom(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10]);
        check_geom(&g, i % 2 == 0);
    }
    print_worst("edge shapes");
}
END_TEST

/* The layers the kernels are for, at batch 1-2 (bands split the large ones). */
START_TEST(target_layers)
{
    static const int64_t cases[][11] = {
        {2, 32, 64, 16, 16, 3, 3, 2, 2, 1, 1},   /* ResNet-20 stage3 3x3/2 */
        {2, 16, 32, 32, 32, 3, 3, 2, 2, 1, 1},   /* ResNet-20 stage2 3x3/2 */
        {1, 64, 128, 56, 56, 3, 3, 2, 2, 1, 1},  /* ResNet-18 layer2 3x3/2 */
        {1, 64, 128, 56, 56, 1, 1, 2, 2, 0, 0},  /* ResNet-18 layer2 1x1/2 projection */
        {2, 16, 32, 32, 32, 1, 1, 2, 2, 0, 0},   /* ResNet-20 stage2 1x1/2 projection */
        {1, 3, 64, 224, 224, 7, 7, 2, 2, 3, 3},  /* ResNet-18 conv1 7x7/2 */
        {1, 3, 64, 224, 224, 11, 11, 4, 4, 2, 2}, /* AlexNet conv1 11x11/4 */
        {2, 64, 256, 56, 56, 1, 1, 1, 1, 0, 0},   /* ResNet-50 res2 1x1 (x read in place, several bands; 6.4 MB
                                                     of output: the stores go past the caches) */
        {2, 24, 600, 30, 30, 1, 1, 1, 1, 0, 0},   /* 4.3 MB streamed, on and off the 64-byte lines (900 pixels) */
        {1, 256, 24, 56, 56, 1, 1, 1, 1, 0, 0},   /* ResNet-50 res2 256 -> 64, fewer filters (forward packs x) */
        {2, 256, 20, 14, 14, 1, 1, 1, 1, 0, 0},   /* the smallest planes forward packs */
        {1, 512, 48, 7, 7, 1, 1, 1, 1, 0, 0},     /* a ResNet-50 res5 1x1, fewer filters */
        {16, 40, 24, 7, 7, 1, 1, 1, 1, 0, 0},     /* MobileNet's 7x7 1x1 at batch 16 (16 partial vectors) */
        {5, 24, 20, 14, 14, 3, 3, 1, 1, 1, 1}     /* 14x14 3x3 at batch 5 (the partial vectors in groups) */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t *k = cases[i];
        mx_conv_geom g = geom(k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10]);
        check_geom(&g, true);
    }
    print_worst("target layers");
}
END_TEST

/* Split calls give what one call gives (bit for bit: the arithmetic per
 * output does not depend on the range), and zero images write nothing
 * (the weight gradient: zeros, or dw kept when accumulating). */
START_TEST(image_ranges)
{
    mx_conv_geom g = geom(5, 24, 40, 19, 21, 3, 3, 2, 2, 1, 1);
    const int64_t in_img = 24 * 19 * 21, out_img = 40 * g.out_h * g.out_w, nw = 40 * 24 * 9;
    float *x = test_rand_floats(5 * in_img), *w = test_rand_floats(nw), *bias = test_rand_floats(40), *dy = test_rand_floats(5 * out_img);
    float *packed = malloc(mx_direct_packed_bytes(&g)), *y1 = malloc((size_t)(5 * out_img) * sizeof(float));
    float *y2 = malloc((size_t)(5 * out_img) * sizeof(float));
    ck_assert(packed && y1 && y2);
    mx_direct_pack_weights(&g, w, packed);
    for (int64_t k = 1; k < 5; k++) {
        ck_assert_uint_le(mx_direct_scratch_bytes(&g, k), mx_direct_scratch_bytes(&g, k + 1));
        ck_assert_uint_le(mx_direct_wgrad_scratch_bytes(&g, k), mx_direct_wgrad_scratch_bytes(&g, k + 1));
    }
    void *s = malloc(mx_direct_scratch_bytes(&g, 5));
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, 5, bias, false, y1, s), MX_OK);
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, 2, bias, false, y2, s), MX_OK);
    ck_assert_int_eq(mx_direct_forward(&g, packed, x + 2 * in_img, 3, bias, false, y2 + 2 * out_img, s), MX_OK);
    ck_assert_int_eq(memcmp(y1, y2, (size_t)(5 * out_img) * sizeof(float)), 0);
    ck_assert_int_eq(mx_direct_forward(&g, packed, x, 0, bias, false, NULL, s), MX_OK);
    ck_assert_int_eq(mx_direct_backward_data(&g, packed, dy, 0, false, NULL, s), MX_OK);
    float dw[40 * 24 * 9];
    for (int64_t i = 0; i < nw; i++) dw[i] = 1.0f;
    ck_assert_int_eq(mx_direct_backward_weight(&g, x, dy, 0, true, dw, NULL), MX_OK);
    ck_assert(dw[0] == 1.0f && dw[nw - 1] == 1.0f);
    ck_assert_int_eq(mx_direct_backward_weight(&g, x, dy, 0, false, dw, NULL), MX_OK);
    ck_assert(dw[0] == 0.0f && dw[nw - 1] == 0.0f);
    free(s);
    free(x);
    free(w);
    free(bias);
    free(dy);
    free(packed);
    free(y1);
    free(y2);
}
END_TEST

/* A direct forward's inputs: random x, weights and bias, the weights
 * packed, two output buffers of the whole batch and its scratch. */
typedef struct direct_fixture {
    int64_t n, out_n;
    float *x, *w, *bias, *packed, *y1, *y2;
    void *scratch;
} direct_fixture;

static void direct_fixture_make(direct_fixture *f, const mx_conv_geom *g)
{
    f->n = g->batch;
    f->out_n = f->n * g->out_c * g->out_h * g->out_w;
    f->x = test_rand_floats(f->n * g->in_c * g->in_h * g->in_w);
    f->w = test_rand_floats(g->out_c * g->in_c * g->k_h * g->k_w);
    f->bias = test_rand_floats(g->out_c);
    f->packed = malloc(mx_direct_packed_bytes(g));
    f->y1 = malloc((size_t)f->out_n * sizeof(float));
    f->y2 = malloc((size_t)f->out_n * sizeof(float));
    f->scratch = malloc(mx_direct_scratch_bytes(g, f->n));
    ck_assert(f->packed && f->y1 && f->y2 && f->scratch);
    mx_direct_pack_weights(g, f->w, f->packed);
}

static void direct_fixture_free(direct_fixture *f)
{
    free(f->x);
    free(f->w);
    free(f->bias);
    free(f->packed);
    free(f->y1);
    free(f->y2);
    free(f->scratch);
}

/* The forward in output-channel parts (batch 1 shared by threads) writes
 * the bytes of one call, whatever the number of parts (more than panels
 * too: some parts get none). */
START_TEST(forward_parts)
{
    mx_conv_geom gs[] = {geom(1, 24, 40, 19, 21, 3, 3, 2, 2, 1, 1), geom(2, 64, 100, 7, 7, 1, 1, 1, 1, 0, 0),
                         geom(1, 3, 17, 30, 30, 7, 7, 2, 2, 3, 3)};
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
        const mx_conv_geom *g = &gs[i];
        direct_fixture f;
        direct_fixture_make(&f, g);
        float *whole = f.y1, *parts = f.y2;
        ck_assert_int_eq(mx_direct_forward(g, f.packed, f.x, f.n, f.bias, false, whole, f.scratch), MX_OK);
        const int64_t panels = mx_direct_forward_panels(g);
        ck_assert_int_ge(panels, 2);
        const int64_t counts[] = {1, 2, 3, panels, panels + 3};
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            memset(parts, 0xff, (size_t)f.out_n * sizeof(float));
            for (int64_t part = 0; part < counts[k]; part++)
                ck_assert_int_eq(
                    mx_direct_forward_part(g, f.packed, f.x, f.n, part, counts[k], f.bias, false, parts, f.scratch),
                    MX_OK);
            ck_assert_msg(memcmp(whole, parts, (size_t)f.out_n * sizeof(float)) == 0, "geometry %zu, %lld parts", i,
                          (long long)counts[k]);
        }
        direct_fixture_free(&f);
    }
}
END_TEST

/* A folded Activation on the forward's output: relu in the kernels' stores
 * (the tails of in-place bands too: MobileNet's 7x7 and 14x14 1x1 layers at
 * batch 16), others on each chunk's rows; either way the bits of the
 * unfolded forward followed by the Activation, in parts and whole. */
START_TEST(folded_activation_forward)
{
    mx_conv_geom gs[] = {geom(16, 32, 48, 7, 7, 1, 1, 1, 1, 0, 0), geom(16, 24, 40, 14, 14, 1, 1, 1, 1, 0, 0),
                         geom(2, 24, 40, 19, 21, 3, 3, 2, 2, 1, 1), geom(1, 3, 17, 30, 30, 7, 7, 2, 2, 3, 3),
                         geom(2, 16, 180, 56, 56, 1, 1, 1, 1, 0, 0) /* 4.5 MB: the relu'd stores streamed */};
    const int acts[] = {ACT_RELU, ACT_SIGMOID};
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
        for (size_t a = 0; a < sizeof(acts) / sizeof(acts[0]); a++) {
            const mx_conv_geom *g = &gs[i];
            direct_fixture f;
            direct_fixture_make(&f, g);
            float *want = f.y1, *got = f.y2;
            const mx_fold fold = {.kind = MX_FOLD_ACTIVATION, .act_type = acts[a]};
            ck_assert_int_eq(mx_direct_forward(g, f.packed, f.x, f.n, f.bias, false, want, f.scratch), MX_OK);
            mx_fold_rows(&fold, want, f.out_n);
            int64_t zeros = 0;
            for (int64_t k = 0; k < f.out_n; k++) zeros += want[k] == 0.0f;
            if (acts[a] == ACT_RELU) ck_assert(zeros > 0 && zeros < f.out_n);
            for (int64_t parts = 1; parts <= 2; parts++) {
                memset(got, 0xff, (size_t)f.out_n * sizeof(float));
                for (int64_t part = 0; part < parts; part++)
                    ck_assert_int_eq(mx_direct_forward_part_fold(g, f.packed, f.x, f.n, part, parts, f.bias, false,
                                                                 &fold, got, f.scratch),
                                     MX_OK);
                ck_assert_msg(memcmp(want, got, (size_t)f.out_n * sizeof(float)) == 0, "geometry %zu, act %d, %lld parts",
                              i, acts[a], (long long)parts);
            }
            direct_fixture_free(&f);
        }
}
END_TEST

/* A strided 1x1 layer's forward through mx_conv_forward runs its stride-1
 * twin on the gathered grid pixels (im2col.c's gather_sampled): the bits
 * of the strided kernel's own forward (the same products in the same
 * order), with the batch in pieces on 2 threads and in chunks of a piece,
 * written, added and through a folded relu; pixels off the grid (odd sizes,
 * unequal strides) are never read. */
START_TEST(strided_pointwise_forward_on_the_grid)
{
    mx_threadpool *pool;
    ck_assert_int_eq(mx_threadpool_create(2, &pool), MX_OK);
    mx_conv_geom gs[] = {geom(6, 40, 24, 15, 13, 1, 1, 2, 3, 0, 0), geom(16, 96, 48, 14, 14, 1, 1, 2, 2, 0, 0),
                         geom(4, 1024, 64, 9, 9, 1, 1, 2, 2, 0, 0)};
    const mx_fold relu = {.kind = MX_FOLD_ACTIVATION, .act_type = ACT_RELU};
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
        const mx_conv_geom *g = &gs[i];
        if (!mx_direct_forward_profitable(g)) {
            printf("strided 1x1 forward on the grid: geometry %zu takes another path on this CPU, not checked\n", i);
            continue;
        }
        direct_fixture f;
        direct_fixture_make(&f, g);
        for (int64_t plane = 0; plane < f.n * g->in_c; plane++) /* off the grid: never read */
            for (int64_t y = 0; y < g->in_h; y++)
                for (int64_t x = 0; x < g->in_w; x++)
                    if (y % g->stride_h || x % g->stride_w) f.x[(plane * g->in_h + y) * g->in_w + x] = NAN;
        float *want = f.y1, *got = f.y2;
        for (int mode = 0; mode < 3; mode++) { /* write, add, folded relu */
            const bool add = mode == 1;
            for (int64_t k = 0; k < f.out_n; k++) want[k] = got[k] = add ? (float)(k % 7) * 0.25f : NAN;
            ck_assert_int_eq(mx_direct_forward_part_fold(g, f.packed, f.x, f.n, 0, 1, f.bias, add,
                                                         mode == 2 ? &relu : NULL, want, f.scratch),
                             MX_OK);
            ck_assert_int_eq(mx_conv_forward_act(pool, g, f.x, f.w, f.bias, mode == 2 ? &relu : NULL, got,
                                                 add ? MX_REQ_ADD : MX_REQ_WRITE, NULL, 0),
                             MX_OK);
            ck_assert_msg(memcmp(want, got, (size_t)f.out_n * sizeof(float)) == 0, "geometry %zu, mode %d", i, mode);
            for (int64_t k = 0; k < f.out_n; k++) ck_assert_msg(isfinite(got[k]), "geometry %zu: off-grid pixel read", i);
        }
        direct_fixture_free(&f);
    }
    mx_threadpool_free(pool);
}
END_TEST

/* Weights derived once (mx_conv_prepare) give the bits of a forward that
 * derives them per call, on each path, at batch 1 on 1 and 2 threads; a
 * preparation for another batch is ignored (and larger batches keep none). */
START_TEST(prepared_forward)
{
    mx_threadpool *pools[2];
    ck_assert_int_eq(mx_threadpool_create(1, &pools[0]), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(2, &pools[1]), MX_OK);
    /* Winograd (64 tiles: 2 blocks shared by 2 threads), direct 1x1 and
     * 3x3/2, a ragged 7x7 3x3 (direct forward with a vector lead, else
     * im2col), grouped (im2col), depthwise */
    mx_conv_geom gs[] = {geom(1, 8, 16, 30, 30, 3, 3, 1, 1, 1, 1), geom(1, 32, 48, 14, 14, 1, 1, 1, 1, 0, 0),
                         geom(1, 16, 24, 15, 15, 3, 3, 2, 2, 1, 1), geom(1, 64, 64, 7, 7, 3, 3, 1, 1, 1, 1),
                         geom(1, 8, 8, 9, 9, 1, 1, 1, 1, 0, 0), geom(1, 16, 16, 10, 10, 3, 3, 1, 1, 1, 1)};
    gs[4].groups = 2;
    gs[5].groups = 16;
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
        for (int t = 0; t < 2; t++) {
            mx_conv_geom g = gs[i];
            const int64_t in_n = 2 * g.in_c * g.in_h * g.in_w, out_n = 2 * g.out_c * g.out_h * g.out_w;
            float *x = test_rand_floats(in_n), *w = test_rand_floats(g.out_c * (g.in_c / g.groups) * g.k_h * g.k_w);
            float *bias = test_rand_floats(g.out_c), *y1 = malloc((size_t)out_n * sizeof(float));
            float *y2 = malloc((size_t)out_n * sizeof(float));
            ck_assert(y1 && y2);
            mx_conv_prepared *prep;
            ck_assert_int_eq(mx_conv_prepare(pools[t], &g, w, &prep), MX_OK);
            for (int pass = 0; pass < 2; pass++) {
                ck_assert_int_eq(mx_conv_forward(pools[t], &g, x + pass, w, bias, y1, MX_REQ_WRITE, NULL, 0), MX_OK);
                ck_assert_int_eq(mx_conv_forward_prepared(pools[t], &g, prep, x + pass, w, bias, NULL, y2, MX_REQ_WRITE,
                                                          NULL, 0),
                                 MX_OK);
                ck_assert_msg(memcmp(y1, y2, (size_t)(out_n / 2) * sizeof(float)) == 0, "geometry %zu, %d threads", i,
                              t + 1);
            }
            /* the same preparation handed a batch of 2: derived afresh */
            g.batch = 2;
            ck_assert_int_eq(mx_conv_forward(pools[t], &g, x, w, bias, y1, MX_REQ_WRITE, NULL, 0), MX_OK);
            ck_assert_int_eq(mx_conv_forward_prepared(pools[t], &g, prep, x, w, bias, NULL, y2, MX_REQ_WRITE, NULL, 0),
                             MX_OK);
            ck_assert_msg(memcmp(y1, y2, (size_t)out_n * sizeof(float)) == 0, "geometry %zu batch 2", i);
            mx_conv_prepared_free(prep);
            /* prepared at batch 4: nothing kept, still the same bits */
            mx_conv_geom g4 = gs[i];
            g4.batch = 4;
            float *x4 = test_rand_floats(2 * in_n), *y4a = malloc((size_t)(2 * out_n) * sizeof(float));
            float *y4b = malloc((size_t)(2 * out_n) * sizeof(float));
            ck_assert(y4a && y4b);
            ck_assert_int_eq(mx_conv_prepare(pools[t], &g4, w, &prep), MX_OK);
            ck_assert_int_eq(mx_conv_forward(pools[t], &g4, x4, w, bias, y4a, MX_REQ_WRITE, NULL, 0), MX_OK);
            ck_assert_int_eq(mx_conv_forward_prepared(pools[t], &g4, prep, x4, w, bias, NULL, y4b, MX_REQ_WRITE, NULL, 0),
                             MX_OK);
            ck_assert(memcmp(y4a, y4b, (size_t)(2 * out_n) * sizeof(float)) == 0);
            mx_conv_prepared_free(prep);
            free(x4);
            free(y4a);
            free(y4b);
            free(x);
            free(w);
            free(bias);
            free(y1);
            free(y2);
        }
    mx_threadpool_free(pools[0]);
    mx_threadpool_free(pools[1]);
}
END_TEST

/* The pieces of a batch add their weight gradients into dw in turn
 * (mx_dw_turn): on 2 and 3 threads, mx_conv_backward's dw has the bits of
 * the kernel run piece after piece on one thread, the first piece writing
 * (or adding onto dw for an add request) and each later one adding. Pieces
 * here are small (under 8,192 output pixels), so each thread gets one:
 * ceil(batch / threads) images. Paths: Winograd with a whole dU (28x28:
 * groups of 2 images, 98 tiles), Winograd writing dw a few input channels
 * at a time, each block in turn (7x7: at most 24 tiles a piece), the
 * direct kernels (3x3/2), whichever of them this CPU runs. */
START_TEST(weight_gradient_in_turn)
{
    const mx_conv_geom gs[] = {geom(12, 16, 24, 28, 28, 3, 3, 1, 1, 1, 1), geom(12, 40, 24, 7, 7, 3, 3, 1, 1, 1, 1),
                               geom(12, 24, 40, 16, 16, 3, 3, 2, 2, 1, 1)};
    int ran = 0;
    for (int threads = 2; threads <= 3; threads++) {
        mx_threadpool *pool;
        ck_assert_int_eq(mx_threadpool_create(threads, &pool), MX_OK);
        for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
            const mx_conv_geom *g = &gs[i];
            const bool wino = mx_winograd_profitable(g), direct = !wino && mx_direct_profitable(g);
            if (!wino && !direct) continue;
            const int64_t in_img = g->in_c * g->in_h * g->in_w, out_img = g->out_c * g->out_h * g->out_w;
            const int64_t wn = g->out_c * g->in_c * g->k_h * g->k_w, piece = (g->batch + threads - 1) / threads;
            ck_assert_int_lt(piece * g->out_h * g->out_w, 8192);
            float *x = test_rand_floats(g->batch * in_img), *dy = test_rand_floats(g->batch * out_img);
            float *w = test_rand_floats(wn), *start = test_rand_floats(wn);
            float *got = malloc((size_t)wn * sizeof(float)), *want = malloc((size_t)wn * sizeof(float));
            ck_assert(got && want);
            for (int add = 0; add < 2; add++) {
                memcpy(want, start, (size_t)wn * sizeof(float));
                for (int64_t p0 = 0; p0 < g->batch; p0 += piece) {
                    const int64_t b = g->batch - p0 < piece ? g->batch - p0 : piece;
                    const bool acc = p0 > 0 || add;
                    ck_assert_int_eq(wino ? mx_winograd_backward_weight(g, x + p0 * in_img, dy + p0 * out_img, b, acc,
                                                                        want, NULL)
                                          : mx_direct_backward_weight(g, x + p0 * in_img, dy + p0 * out_img, b, acc,
                                                                      want, NULL),
                                     MX_OK);
                }
                for (int rep = 0; rep < 3; rep++) { /* the turns are taken in order every time */
                    memcpy(got, start, (size_t)wn * sizeof(float));
                    ck_assert_int_eq(mx_conv_backward(pool, g, x, w, dy, NULL, MX_REQ_NULL, got,
                                                      add ? MX_REQ_ADD : MX_REQ_WRITE, NULL, 0),
                                     MX_OK);
                    ck_assert_msg(memcmp(got, want, (size_t)wn * sizeof(float)) == 0,
                                  "geometry %zu, %d threads, %s, repeat %d", i, threads, add ? "add" : "write", rep);
                }
            }
            ran++;
            printf("weight gradient in turn: geometry %zu on %d threads: %s\n", i, threads,
                   wino ? "Winograd" : "direct");
            free(x);
            free(dy);
            free(w);
            free(start);
            free(got);
            free(want);
        }
        mx_threadpool_free(pool);
    }
    ck_assert_int_gt(ran, 0);
}
END_TEST

/* Packing in parts (more parts than panels too) gives the bytes of one call. */
START_TEST(pack_parts)
{
    mx_conv_geom gs[] = {geom(1, 64, 128, 56, 56, 3, 3, 2, 2, 1, 1), geom(1, 3, 64, 224, 224, 7, 7, 2, 2, 3, 3),
                         geom(1, 17, 13, 9, 9, 3, 2, 2, 3, 1, 0),
                         /* stride 1: backward-data packs the transposed, flipped forward */
                         geom(1, 19, 13, 9, 8, 3, 2, 1, 1, 1, 0)};
    for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++) {
        const mx_conv_geom *g = &gs[i];
        size_t bytes = mx_direct_packed_bytes(g);
        float *w = test_rand_floats(g->out_c * g->in_c * g->k_h * g->k_w), *whole = malloc(bytes), *parts = malloc(bytes);
        ck_assert(whole && parts);
        for (int back = 0; back < 2; back++)
            for (int64_t n = 2; n <= 11; n += 9) {
                memset(parts, 0xff, bytes);
                if (back) mx_direct_pack_weights_backward(g, w, whole);
                else mx_direct_pack_weights(g, w, whole);
                for (int64_t k = 0; k < n; k++) {
                    if (back) mx_direct_pack_weights_backward_part(g, w, parts, k, n);
                    else mx_direct_pack_weights_part(g, w, parts, k, n);
                }
                ck_assert_msg(memcmp(whole, parts, bytes) == 0, "geometry %zu, %s, %lld parts", i,
                              back ? "backward" : "forward", (long long)n);
            }
        free(w);
        free(whole);
        free(parts);
    }
}
END_TEST

/* The rate probe (ops/cpu/vector_rate.h): 0 without AVX-512F, else near 1
 * (split) or 2 (full width), the same answer every time in a process. */
START_TEST(avx512_rate_probe)
{
    double rate = mx_avx512_fma_rate();
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        ck_assert(rate == 0.0 && !mx_avx512_full_width());
        return;
    }
    ck_assert_msg(rate > 0.6 && rate < 2.6, "rate %g", rate);
    ck_assert(mx_avx512_fma_rate() == rate);
    ck_assert(mx_avx512_full_width() == (rate >= 1.5));
    printf("avx512 FMA rate over avx2: %.2f (%s), OpenBLAS core %s AVX-512\n", rate,
           mx_avx512_full_width() ? "full width" : "split", mx_blas_sgemm_avx512() ? "with" : "without");
}
END_TEST

START_TEST(supported_geometries)
{
    setenv("MX_DIRECT_ISA", "avx512", 1); /* whatever the environment says (each test runs in its own process) */
    mx_conv_geom g = geom(2, 8, 8, 10, 10, 3, 3, 2, 2, 1, 1);
    ck_assert(mx_direct_supported(&g) == (bool)__builtin_cpu_supports("avx512f"));
    /* the rule (conv_direct.c, from bench_conv_direct's measurements) */
    mx_conv_geom yes[] = {geom(64, 32, 64, 16, 16, 3, 3, 2, 2, 1, 1), geom(8, 64, 128, 56, 56, 1, 1, 2, 2, 0, 0),
                          geom(8, 3, 64, 224, 224, 7, 7, 2, 2, 3, 3), geom(64, 64, 64, 12, 12, 3, 3, 2, 2, 1, 1),
                          geom(64, 32, 64, 16, 16, 1, 1, 1, 1, 0, 0), geom(64, 3, 16, 32, 32, 3, 3, 1, 1, 1, 1)};
    mx_conv_geom no[] = {geom(8, 256, 512, 14, 14, 3, 3, 2, 2, 1, 1), geom(8, 256, 512, 14, 14, 1, 1, 2, 2, 0, 0),
                         geom(64, 1, 16, 28, 28, 3, 3, 2, 2, 1, 1), geom(8, 64, 256, 56, 56, 1, 1, 1, 1, 0, 0)};
    const mx_direct_lead leads[] = {MX_DIRECT_NO_LEAD, MX_DIRECT_POINTWISE_LEAD, MX_DIRECT_LEAD};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        ck_assert_msg(mx_direct_profitable(&yes[i]) == (bool)__builtin_cpu_supports("avx512f"), "yes[%zu]", i);
        for (size_t l = 0; l < 3; l++) {
            ck_assert_msg(mx_direct_profitable_rule(&yes[i], leads[l]), "yes[%zu] lead %zu", i, l);
            ck_assert_msg(mx_direct_forward_profitable_rule(&yes[i], leads[l]), "yes[%zu] lead %zu", i, l);
        }
    }
    /* Without a vector lead these lose; with one (a full-width AVX-512 core
     * against OpenBLAS's AVX2 kernels) they win; with a pointwise lead (a
     * full-width core against OpenBLAS's AVX-512 kernels) only the stride-1
     * 1x1 layer (the last). */
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        const bool pointwise = i == sizeof(no) / sizeof(no[0]) - 1;
        ck_assert_msg(!mx_direct_profitable_rule(&no[i], MX_DIRECT_NO_LEAD), "no[%zu]", i);
        ck_assert_msg(mx_direct_profitable_rule(&no[i], MX_DIRECT_POINTWISE_LEAD) == pointwise, "no[%zu]", i);
        ck_assert_msg(mx_direct_profitable_rule(&no[i], MX_DIRECT_LEAD), "no[%zu] with a lead", i);
        const mx_direct_lead here = mx_direct_vector_lead();
        ck_assert_msg(mx_direct_profitable(&no[i]) ==
                          (__builtin_cpu_supports("avx512f") &&
                           (here == MX_DIRECT_LEAD || (here == MX_DIRECT_POINTWISE_LEAD && pointwise))),
                      "no[%zu] on this machine", i);
    }
    /* ResNet-50's stride-1 1x1 layers win with a vector lead; with a
     * pointwise lead those on 14x14 and larger outputs (the first and the
     * last), not the ragged 7x7 ones, which win in forward only. res5a's
     * 1x1/2 (1024 -> 2048 on 7x7 outputs, ragged) loses either way, as does
     * one output channel. */
    mx_conv_geom lead_only[] = {geom(16, 256, 64, 56, 56, 1, 1, 1, 1, 0, 0), geom(16, 2048, 512, 7, 7, 1, 1, 1, 1, 0, 0),
                                geom(16, 512, 2048, 7, 7, 1, 1, 1, 1, 0, 0), geom(16, 1024, 256, 14, 14, 1, 1, 1, 1, 0, 0)};
    for (size_t i = 0; i < sizeof(lead_only) / sizeof(lead_only[0]); i++) {
        const bool unragged = i == 0 || i == 3;
        ck_assert_msg(!mx_direct_profitable_rule(&lead_only[i], MX_DIRECT_NO_LEAD) &&
                          mx_direct_profitable_rule(&lead_only[i], MX_DIRECT_LEAD),
                      "lead_only[%zu]", i);
        ck_assert_msg(mx_direct_profitable_rule(&lead_only[i], MX_DIRECT_POINTWISE_LEAD) == unragged,
                      "lead_only[%zu] with a pointwise lead", i);
        ck_assert_msg(!mx_direct_forward_profitable_rule(&lead_only[i], MX_DIRECT_NO_LEAD) &&
                          mx_direct_forward_profitable_rule(&lead_only[i], MX_DIRECT_POINTWISE_LEAD) &&
                          mx_direct_forward_profitable_rule(&lead_only[i], MX_DIRECT_LEAD),
                      "lead_only[%zu] forward", i);
    }
    mx_conv_geom never[] = {geom(16, 1024, 2048, 14, 14, 1, 1, 2, 2, 0, 0), geom(16, 8, 1, 16, 16, 3, 3, 2, 2, 1, 1),
                            geom(16, 1, 64, 56, 56, 1, 1, 1, 1, 0, 0)};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        for (size_t l = 0; l < 2; l++)
            ck_assert_msg(!mx_direct_profitable_rule(&never[i], leads[l]), "never[%zu] lead %zu", i, l);
    ck_assert(!mx_direct_profitable_rule(&never[0], MX_DIRECT_LEAD));
    ck_assert(!mx_direct_profitable_rule(&never[1], MX_DIRECT_LEAD));
    /* The forward alone: with a lead res5a's 1x1/2 wins too; never one
     * output channel, nor with a pointwise lead one input channel. */
    ck_assert(mx_direct_forward_profitable_rule(&never[0], MX_DIRECT_LEAD) &&
              !mx_direct_forward_profitable_rule(&never[0], MX_DIRECT_POINTWISE_LEAD) &&
              !mx_direct_forward_profitable_rule(&never[0], MX_DIRECT_NO_LEAD));
    for (size_t l = 0; l < 3; l++) ck_assert(!mx_direct_forward_profitable_rule(&never[1], leads[l]));
    ck_assert(!mx_direct_forward_profitable_rule(&never[2], MX_DIRECT_POINTWISE_LEAD));
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        const bool pointwise = i == sizeof(no) / sizeof(no[0]) - 1;
        ck_assert(mx_direct_forward_profitable_rule(&no[i], MX_DIRECT_LEAD) &&
                  !mx_direct_forward_profitable_rule(&no[i], MX_DIRECT_NO_LEAD));
        ck_assert(mx_direct_forward_profitable_rule(&no[i], MX_DIRECT_POINTWISE_LEAD) == pointwise);
    }
    mx_conv_geom b = g;
    b.groups = 2;
    ck_assert(!mx_direct_supported(&b));
    ck_assert(!mx_direct_profitable(&b));
    b = g;
    b.dil_w = 2;
    ck_assert(!mx_direct_supported(&b));
    b = g;
    b.out_h = 4; /* inconsistent with the input */
    ck_assert(!mx_direct_supported(&b));
    b = geom(2, 8, 8, 10, 10, 3, 3, 2, 2, 3, 1); /* pad >= kernel */
    ck_assert(!mx_direct_supported(&b));
    b = geom(2, 8, 8, 1, 10, 3, 3, 2, 2, 0, 1); /* empty output */
    ck_assert(!mx_direct_supported(&b));
    ck_assert_uint_eq(mx_direct_scratch_bytes(&b, 2), 0);
    ck_assert_uint_eq(mx_direct_wgrad_scratch_bytes(&b, 2), 0);
    ck_assert_int_eq(mx_direct_forward(&b, NULL, NULL, 1, NULL, false, NULL, NULL), MX_ERR_INVALID);
    ck_assert_int_eq(mx_direct_backward_data(&b, NULL, NULL, 1, false, NULL, NULL), MX_ERR_INVALID);
    ck_assert_int_eq(mx_direct_backward_weight(&b, NULL, NULL, 1, false, NULL, NULL), MX_ERR_INVALID);
    /* MX_DIRECT_ISA=none: off, calls refused */
    setenv("MX_DIRECT_ISA", "none", 1);
    ck_assert(!mx_direct_supported(&g));
    ck_assert(!mx_direct_profitable(&g));
    ck_assert_int_eq(mx_direct_forward(&g, NULL, NULL, 1, NULL, false, NULL, NULL), MX_ERR_INVALID);
    setenv("MX_DIRECT_ISA", "avx512", 1);
    ck_assert(mx_direct_supported(&g) == (bool)__builtin_cpu_supports("avx512f"));
}
END_TEST

/* A 3x3 layer with few Winograd tiles in its batch (batch-1 prediction of
 * 14x14 maps: 16) runs on the direct kernels where they run at full width
 * (any lead), else on Winograd; 32 tiles (batch 2) keep Winograd anywhere.
 * Checked bit for bit against each kernel called alone. */
START_TEST(few_tiles_forward_path)
{
    mx_threadpool *pool;
    ck_assert_int_eq(mx_threadpool_create(2, &pool), MX_OK);
    for (int64_t batch = 1; batch <= 2; batch++) {
        mx_conv_geom g = geom(batch, 32, 48, 14, 14, 3, 3, 1, 1, 1, 1);
        const int64_t in_n = batch * 32 * 196, out_n = batch * 48 * 196, wn = 48 * 32 * 9;
        float *x = test_rand_floats(in_n), *w = test_rand_floats(wn), *bias = test_rand_floats(48);
        float *y = malloc((size_t)out_n * sizeof(float)), *want = malloc((size_t)out_n * sizeof(float));
        float *packed = malloc(mx_direct_packed_bytes(&g)), *u = malloc(mx_winograd_filter_bytes(&g));
        ck_assert(y && want && packed && u);
        ck_assert_int_eq(mx_conv_forward(pool, &g, x, w, bias, y, MX_REQ_WRITE, NULL, 0), MX_OK);
        const bool direct = batch == 1 && mx_direct_vector_lead() != MX_DIRECT_NO_LEAD && mx_direct_supported(&g);
        if (direct) {
            mx_direct_pack_weights(&g, w, packed);
            ck_assert_int_eq(mx_direct_forward(&g, packed, x, batch, bias, false, want, NULL), MX_OK);
        } else {
            mx_winograd_transform_filter(&g, w, u);
            ck_assert_int_eq(mx_winograd_forward(&g, u, x, batch, bias, false, want, NULL), MX_OK);
        }
        ck_assert_msg(memcmp(y, want, (size_t)out_n * sizeof(float)) == 0, "batch %lld: not the %s kernel's bits",
                      (long long)batch, direct ? "direct" : "Winograd");
        free(x), free(w), free(bias), free(y), free(want), free(packed), free(u);
    }
    mx_threadpool_free(pool);
}
END_TEST

int main(void)
{
    openblas_set_num_threads(1); /* the kernels run on one thread each, as under the pool */
    Suite *s = suite_create("conv_direct");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, supported_geometries);
    tcase_add_test(tc, avx512_rate_probe);
    tcase_add_test(tc, pack_parts);
    tcase_add_test(tc, prepared_forward); /* every path: whichever this CPU runs */
    tcase_add_test(tc, weight_gradient_in_turn); /* likewise */
    tcase_add_test(tc, few_tiles_forward_path);   /* likewise */
    const char *isa = getenv("MX_DIRECT_ISA");
    if (__builtin_cpu_supports("avx512f") && !(isa && strcmp(isa, "none") == 0)) {
        tcase_add_test(tc, image_ranges);
        tcase_add_test(tc, forward_parts);
        tcase_add_test(tc, folded_activation_forward);
        tcase_add_test(tc, strided_pointwise_forward_on_the_grid);
        tcase_add_test(tc, edge_shapes);
        tcase_add_test(tc, target_layers);
        tcase_add_test(tc, random_shapes);
    } else {
        printf("conv_direct: no AVX-512F (or MX_DIRECT_ISA=none): only the refusal paths are tested\n");
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
