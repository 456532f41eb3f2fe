/* test_winograd.c - Winograd F(2x2|4x4|6x6, 3x3) forward, backward-data
 * and weight gradient against a float64 direct convolution on many shapes
 * (odd and even sizes from 1x1 to 57x57, pads 0..2 per axis, 1..70
 * channels (and one 160),
 * batches 1..5, bias, accumulate, one call or one image per call), on
 * every vector path this CPU has (MX_WINOGRAD_ISA), for each tile size
 * (MX_WINOGRAD_TILE), and against im2col + SGEMM (mx_conv_forward /
 * mx_conv_backward) on the same data.
 *
 * Error measures, over one output tensor: max |y - ref| / max S, where S
 * is the sum of |terms| of an output (|x*w| products, |bias|, and |y| when
 * accumulating), and max |y - ref| / max |ref| (the brief's measure). The
 * rounding of a Winograd tile mixes every input of the alpha x alpha patch
 * into every output of the tile, so an output's own terms are the wrong
 * scale for its error (a corner output with one term carries the tile's
 * error); the tensor-wide scale is the right one. Both have bounds per tile
 * size (err_bound, err_bound_max); the measured maxima are printed.
 */
#include "ops/cpu/im2col.h"
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

/* The tiles tested: index k of kinds[] is F(m x m, r x r). The error
 * grows with alpha = m + r - 1 (the transforms' constants), so F(2, 5)
 * has F(4, 3)'s bounds and F(4, 5) F(6, 3)'s. */
typedef struct tile_kind {
    int m, r;
    double fwd, fwd_max;  /* per-output error / sum of |terms|; max |err| / max |ref| */
    double wgrad, wgrad_max;
} tile_kind;
static const tile_kind kinds[] = {
    {2, 3, 2e-6, 1e-5, 2e-6, 2e-5}, {4, 3, 2e-5, 1e-4, 2e-5, 1e-4}, {6, 3, 5e-5, 2e-4, 5e-5, 1e-4},
    {2, 5, 2e-5, 1e-4, 2e-5, 1e-4}, {4, 5, 5e-5, 2e-4, 5e-5, 2e-4},
};
#define KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))
/* im2col + SGEMM's own error, same measure (weight gradients of 5x5
 * kernels sum the longest runs: 2.7e-6 seen) */
#define IM2COL_BOUND 5e-6

static int kind_of(int m, int r)
{
    for (int k = 0; k < KINDS; k++)
        if (kinds[k].m == m && kinds[k].r == r) return k;
    ck_abort_msg("no tile kind F(%d, %d)", m, r);
    return 0;
}
static double err_bound(int m, int r) { return kinds[kind_of(m, r)].fwd; }
static double err_bound_max(int m, int r) { return kinds[kind_of(m, r)].fwd_max; }
static double wgrad_bound(int m, int r) { return kinds[kind_of(m, r)].wgrad; }
static double wgrad_bound_max(int m, int r) { return kinds[kind_of(m, r)].wgrad_max; }

static mx_conv_geom geom_r(int64_t n, int64_t c, int64_t f, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t r)
{
    mx_conv_geom g = {.batch = n,
                      .in_c = c,
                      .in_h = h,
                      .in_w = w,
                      .out_c = f,
                      .out_h = h + 2 * ph - (r - 1),
                      .out_w = w + 2 * pw - (r - 1),
                      .k_h = r,
                      .k_w = r,
                      .stride_h = 1,
                      .stride_w = 1,
                      .dil_h = 1,
                      .dil_w = 1,
                      .pad_h = ph,
                      .pad_w = pw,
                      .groups = 1};
    return g;
}

static mx_conv_geom geom(int64_t n, int64_t c, int64_t f, int64_t h, int64_t w, int64_t ph, int64_t pw)
{
    return geom_r(n, c, f, h, w, ph, pw, 3);
}

typedef struct errs {
    double rel_terms; /* max |err| / max sum|terms| */
    double rel_max;   /* max |err| / max |ref| */
} errs;

/* got vs base + ref (base: the accumulated-onto values, or NULL) */
static errs measure(const float *got, const float *base, const double *ref, const double *abs_sum, int64_t n)
{
    double max_err = 0, max_ref = 0, max_sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = ref[i] + (base ? base[i] : 0.0), s = abs_sum[i] + (base ? fabs(base[i]) : 0.0);
        double err = isfinite(got[i]) ? fabs((double)got[i] - want) : INFINITY; /* no ck_assert per element: */
        if (err > max_err) max_err = err;
        if (fabs(want) > max_ref) max_ref = fabs(want);
        if (s > max_sum) max_sum = s;
    }
    errs e = {max_err / (max_sum + 1e-30), max_err / (max_ref + 1e-30)};
    return e;
}

static errs worst[KINDS];   /* by tile kind: forward and backward-data */
static errs worst_w[KINDS]; /* weight gradient */

static void note_w(int m, int r, errs e)
{
    int k = kind_of(m, r);
    if (e.rel_terms > worst_w[k].rel_terms) worst_w[k].rel_terms = e.rel_terms;
    if (e.rel_max > worst_w[k].rel_max) worst_w[k].rel_max = e.rel_max;
}
static errs worst_im2col;

static void note(int m, int r, errs e)
{
    int k = kind_of(m, r);
    if (e.rel_terms > worst[k].rel_terms) worst[k].rel_terms = e.rel_terms;
    if (e.rel_max > worst[k].rel_max) worst[k].rel_max = e.rel_max;
}

/* Prints the worst errors seen by the calling test (tests run in their own
 * processes). */
static void print_worst(const char *what)
{
    for (int k = 0; k < KINDS; k++) {
        const tile_kind *t = &kinds[k];
        if (worst[k].rel_terms == 0 && worst_w[k].rel_terms == 0) continue; /* not run by this test */
        printf("%s: F(%dx%d,%dx%d): max |err|/max sum|terms| = %.3g, max |err|/max|ref| = %.3g (bounds %.0e, %.0e)\n",
               what, t->m, t->m, t->r, t->r, worst[k].rel_terms, worst[k].rel_max, t->fwd, t->fwd_max);
        printf("%s: weight gradient F(%dx%d,%dx%d): max |err|/max sum|terms| = %.3g, max |err|/max|ref| = %.3g "
               "(bounds %.0e, %.0e)\n",
               what, t->m, t->m, t->r, t->r, worst_w[k].rel_terms, worst_w[k].rel_max, t->wgrad, t->wgrad_max);
    }
    printf("%s: im2col+SGEMM:   max |err|/max sum|terms| = %.3g, max |err|/max|ref| = %.3g\n", what,
           worst_im2col.rel_terms, worst_im2col.rel_max);
}

static void set_tile(int m)
{
    char s[2] = {(char)('0' + m), 0};
    setenv("MX_WINOGRAD_TILE", s, 1);
}

static const char *const isas[] = {"avx512", "avx2", "sse"};

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* One shape: forward (with/without bias, write/accumulate) and backward-data
 * (write/accumulate) for each tile size and vector path, against float64;
 * im2col + SGEMM on the same data. */
static void check_shape(int64_t n, int64_t c, int64_t f, int64_t h, int64_t w, int64_t ph, int64_t pw, int r,
                        bool bias_on, int isa_count)
{
    mx_conv_geom g = geom_r(n, c, f, h, w, ph, pw, r), gb;
    ck_assert(mx_winograd_supported(&g));
    mx_winograd_backward_geom(&g, &gb);
    ck_assert(mx_winograd_supported(&gb));
    ck_assert_int_eq(gb.out_h, h);
    ck_assert_int_eq(gb.out_w, w);
    const int64_t nx = n * c * h * w, ny = n * f * g.out_h * g.out_w;
    float *x = test_rand_floats(nx), *wt = test_rand_floats(f * c * r * r), *bias = bias_on ? test_rand_floats(f) : NULL;
    float *dy = test_rand_floats(ny), *y0 = test_rand_floats(ny), *dx0 = test_rand_floats(nx);
    /* on 64-byte lines, as the executor places tensors: a large output's
     * lines are then stored past the caches */
    float *y = aligned_alloc(64, round64((size_t)ny * sizeof(float)));
    float *dx = aligned_alloc(64, round64((size_t)nx * sizeof(float)));
    double *ref_y = malloc((size_t)ny * sizeof(double)), *abs_y = malloc((size_t)ny * sizeof(double));
    double *ref_dx = malloc((size_t)nx * sizeof(double)), *abs_dx = malloc((size_t)nx * sizeof(double));
    ck_assert(y && dx && ref_y && abs_y && ref_dx && abs_dx);
    conv_ref_forward(&g, x, wt, bias, ref_y, abs_y);
    conv_ref_backward(&g, dy, wt, ref_dx, abs_dx);
    const int64_t nw = f * c * r * r;
    float *dw = malloc((size_t)nw * sizeof(float)), *dw0 = test_rand_floats(nw);
    double *ref_w = malloc((size_t)nw * sizeof(double)), *abs_w = malloc((size_t)nw * sizeof(double));
    ck_assert(dw && ref_w && abs_w);
    conv_ref_weight(&g, x, dy, ref_w, abs_w);

    for (int kind = 0; kind < KINDS; kind++) {
        const int m = kinds[kind].m;
        if (kinds[kind].r != r) continue;
        set_tile(m);
        ck_assert_int_eq(mx_winograd_tile(&g), m);
        /* 64-byte aligned: large transforms take the streaming-store path */
        float *u = aligned_alloc(64, round64(mx_winograd_filter_bytes(&g)));
        float *ub = aligned_alloc(64, round64(mx_winograd_filter_bytes(&gb)));
        ck_assert(u && ub);
        /* scratch for the whole batch, deliberately misaligned by 4 bytes */
        size_t sb = mx_winograd_scratch_bytes(&g, n), sbb = mx_winograd_scratch_bytes(&gb, n);
        char *scratch = malloc((sb > sbb ? sb : sbb) + 4);
        ck_assert_ptr_nonnull(scratch);
        for (int k = 0; k < isa_count; k++) {
            setenv("MX_WINOGRAD_ISA", isas[k], 1);
            mx_winograd_transform_filter(&g, wt, u);
            mx_winograd_transform_filter_backward(&g, wt, ub);
            errs e;
            /* forward, write */
            for (int64_t i = 0; i < ny; i++) y[i] = NAN;
            ck_assert_int_eq(mx_winograd_forward(&g, u, x, n, bias, false, y, scratch + 4), MX_OK);
            e = measure(y, NULL, ref_y, abs_y, ny);
            note(m, r, e);
            ck_assert_msg(e.rel_terms <= err_bound(m, r) && e.rel_max <= err_bound_max(m, r),
                          "forward F(%d, r %d) %s (%lld,%lld,%lld,%lld,%lld) pad (%lld,%lld): err %g / %g", m, r, isas[k],
                          (long long)n, (long long)c, (long long)f, (long long)h, (long long)w, (long long)ph,
                          (long long)pw, e.rel_terms, e.rel_max);
            /* forward, accumulate, one image per call (pointers at the image) */
            memcpy(y, y0, (size_t)ny * sizeof(float));
            for (int64_t i = 0; i < n; i++)
                ck_assert_int_eq(mx_winograd_forward(&g, u, x + i * c * h * w, 1, bias, true,
                                                     y + i * f * g.out_h * g.out_w, scratch),
                                 MX_OK);
            e = measure(y, y0, ref_y, abs_y, ny);
            note(m, r, e);
            ck_assert_msg(e.rel_terms <= err_bound(m, r), "forward accumulate F(%d, r %d) %s: err %g", m, r, isas[k],
                          e.rel_terms);
            /* backward-data, write (scratch allocated by the call) */
            for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
            ck_assert_int_eq(mx_winograd_forward(&gb, ub, dy, n, NULL, false, dx, NULL), MX_OK);
            e = measure(dx, NULL, ref_dx, abs_dx, nx);
            note(m, r, e);
            ck_assert_msg(e.rel_terms <= err_bound(m, r) && e.rel_max <= err_bound_max(m, r),
                          "backward F(%d, r %d) %s (%lld,%lld,%lld,%lld,%lld) pad (%lld,%lld): err %g / %g", m, r, isas[k],
                          (long long)n, (long long)c, (long long)f, (long long)h, (long long)w, (long long)ph,
                          (long long)pw, e.rel_terms, e.rel_max);
            /* backward-data, accumulate */
            memcpy(dx, dx0, (size_t)nx * sizeof(float));
            ck_assert_int_eq(mx_winograd_forward(&gb, ub, dy, n, NULL, true, dx, scratch), MX_OK);
            e = measure(dx, dx0, ref_dx, abs_dx, nx);
            note(m, r, e);
            ck_assert_msg(e.rel_terms <= err_bound(m, r), "backward accumulate F(%d, r %d) %s: err %g", m, r, isas[k],
                          e.rel_terms);
            /* weight gradient, write (whole batch) */
            for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
            ck_assert_int_eq(mx_winograd_backward_weight(&g, x, dy, n, false, dw, NULL), MX_OK);
            e = measure(dw, NULL, ref_w, abs_w, nw);
            note_w(m, r, e);
            ck_assert_msg(e.rel_terms <= wgrad_bound(m, r) && e.rel_max <= wgrad_bound_max(m, r),
                          "weight gradient F(%d, r %d) %s (%lld,%lld,%lld,%lld,%lld) pad (%lld,%lld): err %g / %g", m,
                          r, isas[k], (long long)n, (long long)c, (long long)f, (long long)h, (long long)w,
                          (long long)ph, (long long)pw, e.rel_terms, e.rel_max);
            /* weight gradient, accumulated one image at a time onto dw0 */
            memcpy(dw, dw0, (size_t)nw * sizeof(float));
            void *ws = malloc(mx_winograd_wgrad_scratch_bytes(&g, 1) + 4);
            ck_assert_ptr_nonnull(ws);
            for (int64_t i = 0; i < n; i++)
                ck_assert_int_eq(mx_winograd_backward_weight(&g, x + i * c * h * w, dy + i * f * g.out_h * g.out_w,
                                                             1, true, dw, (char *)ws + 4),
                                 MX_OK);
            free(ws);
            e = measure(dw, dw0, ref_w, abs_w, nw);
            note_w(m, r, e);
            ck_assert_msg(e.rel_terms <= wgrad_bound(m, r), "weight gradient accumulate F(%d, r %d) %s: err %g", m, r,
                          isas[k], e.rel_terms);
        }
        unsetenv("MX_WINOGRAD_ISA");
        free(scratch);
        free(u);
        free(ub);
    }
    unsetenv("MX_WINOGRAD_TILE");

    /* im2col + SGEMM on the same data: same measure */
    ck_assert_int_eq(mx_conv_forward(NULL, &g, x, wt, bias, y, MX_REQ_WRITE, NULL, 0), MX_OK);
    errs e = measure(y, NULL, ref_y, abs_y, ny);
    if (e.rel_terms > worst_im2col.rel_terms) worst_im2col.rel_terms = e.rel_terms;
    if (e.rel_max > worst_im2col.rel_max) worst_im2col.rel_max = e.rel_max;
    ck_assert_msg(e.rel_terms <= IM2COL_BOUND, "im2col forward: err %g", e.rel_terms);
    ck_assert_int_eq(mx_conv_backward(NULL, &g, x, wt, dy, dx, MX_REQ_WRITE, dw, MX_REQ_WRITE, NULL, 0), MX_OK);
    e = measure(dx, NULL, ref_dx, abs_dx, nx);
    ck_assert_msg(e.rel_terms <= IM2COL_BOUND, "im2col backward: err %g", e.rel_terms);
    e = measure(dw, NULL, ref_w, abs_w, nw);
    ck_assert_msg(e.rel_terms <= IM2COL_BOUND, "im2col weight gradient: err %g", e.rel_terms);
    /* Winograd's weight gradient (the geometry's own tile) against im2col's directly */
    float *dww = malloc((size_t)nw * sizeof(float));
    ck_assert_ptr_nonnull(dww);
    ck_assert_int_eq(mx_winograd_backward_weight(&g, x, dy, n, false, dww, NULL), MX_OK);
    double max_abs_w = 0, max_diff_w = 0;
    for (int64_t i = 0; i < nw; i++) {
        if (abs_w[i] > max_abs_w) max_abs_w = abs_w[i];
        if (!(fabs((double)dww[i] - dw[i]) <= max_diff_w)) max_diff_w = fabs((double)dww[i] - dw[i]);
    }
    ck_assert_msg(max_diff_w <= 2 * wgrad_bound(mx_winograd_tile(&g), r) * max_abs_w,
                  "winograd vs im2col weight gradient: %g (scale %g)", max_diff_w, max_abs_w);
    free(dww);
    /* and Winograd with the geometry's own tile against im2col directly */
    float *u = malloc(mx_winograd_filter_bytes(&g)), *yw = malloc((size_t)ny * sizeof(float));
    ck_assert(u && yw);
    mx_winograd_transform_filter(&g, wt, u);
    ck_assert_int_eq(mx_winograd_forward(&g, u, x, n, bias, false, yw, NULL), MX_OK);
    ck_assert_int_eq(mx_conv_forward(NULL, &g, x, wt, bias, y, MX_REQ_WRITE, NULL, 0), MX_OK);
    double max_abs = 0;
    for (int64_t i = 0; i < ny; i++)
        if (abs_y[i] > max_abs) max_abs = abs_y[i];
    double max_diff = 0;
    for (int64_t i = 0; i < ny; i++)
        if (!(fabs((double)yw[i] - y[i]) <= max_diff)) max_diff = fabs((double)yw[i] - y[i]);
    ck_assert_msg(max_diff <= 2 * err_bound(mx_winograd_tile(&g), r) * max_abs, "winograd vs im2col: %g (scale %g)",
                  max_diff, max_abs);
    free(u);
    free(yw);

    free(x);
    free(wt);
    free(bias);
    free(dy);
    free(y0);
    free(dx0);
    free(y);
    free(dx);
    free(ref_y);
    free(abs_y);
    free(ref_dx);
    free(abs_dx);
    free(dw);
    free(dw0);
    free(ref_w);
    free(abs_w);
}

/* Hand-picked edge shapes: 1x1 images, outputs narrower than a tile, odd
 * and even sizes, asymmetric pads, channel counts around the 16-lane
 * padding, one large image. */
START_TEST(edge_shapes)
{
    static const int64_t cases[][7] = {
        /* n, c, f, h, w, ph, pw */
        {1, 1, 1, 1, 1, 1, 1},  {1, 1, 1, 3, 3, 0, 0},   {2, 3, 5, 1, 1, 2, 2},    {1, 2, 3, 2, 2, 1, 1},
        {3, 7, 9, 5, 8, 1, 1},  {2, 16, 16, 13, 13, 1, 1}, {5, 17, 33, 12, 10, 2, 0}, {4, 33, 17, 11, 15, 0, 2},
        {2, 64, 70, 7, 7, 1, 1}, {1, 1, 70, 57, 31, 0, 1}, {5, 70, 1, 9, 14, 2, 1},   {1, 15, 31, 4, 6, 1, 2},
        {2, 32, 16, 8, 8, 1, 1}, {1, 48, 48, 14, 14, 1, 1}, {3, 5, 6, 16, 17, 1, 1},  {1, 9, 11, 3, 40, 0, 0},
        {1, 20, 24, 57, 57, 1, 1}, {2, 70, 70, 6, 6, 2, 2},  {1, 160, 144, 6, 7, 1, 1}, /* > 2 MB: streamed u */
        {2, 20, 24, 100, 100, 1, 1}, /* 625 tiles an image: the weight gradient runs in pieces of tiles */
        {2, 6, 176, 56, 56, 1, 1},   /* 4.4 MB of output written: streamed y */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t *k = cases[i];
        check_shape(k[0], k[1], k[2], k[3], k[4], k[5], k[6], 3, i % 2 == 0, 3);
    }
    print_worst("edge shapes");
}
END_TEST

/* Random shapes within the brief's ranges, on the best vector path only. */
START_TEST(random_shapes)
{
    test_rand_seed(0x1234567887654321ull);
    for (int i = 0; i < 40; i++) {
        int64_t n = test_irand(1, 5), c = test_irand(1, 70), f = test_irand(1, 70), ph = test_irand(0, 2), pw = test_irand(0, 2);
        int64_t h = test_irand(1, 40), w = test_irand(1, 40);
        if (h + 2 * ph < 3 || w + 2 * pw < 3) continue;
        while (n * c * f * h * w > 4000000) {
            if (h > 4) h /= 2;
            else if (c > 1) c /= 2;
            else n = 1;
        }
        if (h + 2 * ph < 3) h = 3;
        check_shape(n, c, f, h, w, ph, pw, 3, i % 3 != 0, 1);
    }
    print_worst("random shapes");
}
END_TEST

/* 5x5 kernels (F(2x2, 5x5) and F(4x4, 5x5)): edge shapes on every vector
 * path, then random shapes on the best one; pads 0..4 per axis. */
START_TEST(shapes_5x5)
{
    static const int64_t cases[][7] = {
        /* n, c, f, h, w, ph, pw */
        {1, 1, 1, 1, 1, 2, 2},  {1, 1, 1, 5, 5, 0, 0},    {2, 3, 5, 1, 1, 4, 4},   {1, 2, 3, 2, 3, 2, 1},
        {3, 7, 9, 5, 8, 2, 2},  {2, 16, 16, 13, 13, 2, 2}, {5, 17, 33, 12, 10, 4, 0}, {4, 33, 17, 11, 15, 0, 3},
        {2, 64, 70, 7, 7, 2, 2}, {1, 20, 50, 12, 12, 0, 0}, {1, 64, 48, 27, 27, 2, 2}, {1, 160, 144, 6, 7, 2, 2},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t *k = cases[i];
        check_shape(k[0], k[1], k[2], k[3], k[4], k[5], k[6], 5, i % 2 == 0, 3);
    }
    test_rand_seed(0x5555aaaa12345678ull);
    for (int i = 0; i < 16; i++) {
        int64_t n = test_irand(1, 4), c = test_irand(1, 50), f = test_irand(1, 50), ph = test_irand(0, 4), pw = test_irand(0, 4);
        int64_t h = test_irand(1, 30), w = test_irand(1, 30);
        while (n * c * f * h * w > 2000000) {
            if (h > 6) h /= 2;
            else if (c > 1) c /= 2;
            else n = 1;
        }
        if (h + 2 * ph < 5) h = 5;
        if (w + 2 * pw < 5) w = 5;
        check_shape(n, c, f, h, w, ph, pw, 5, i % 3 != 0, 1);
    }
    print_worst("5x5 shapes");
}
END_TEST

/* Split calls: images [0, k) and [k, n) with their own pointers give what
 * one call gives, and scratch for fewer images is no larger. */
START_TEST(image_ranges)
{
    for (int kind = 0; kind < KINDS; kind++) {
        const int m = kinds[kind].m, r = kinds[kind].r;
        mx_conv_geom g = geom_r(5, 24, 40, 9 + r - 3, 11 + r - 3, 1, 1, r); /* output 9 x 11 */
        set_tile(m);
        float *x = test_rand_floats(5 * 24 * 99 * 2), *wt = test_rand_floats(40 * 24 * r * r), *bias = test_rand_floats(40);
        float *u = malloc(mx_winograd_filter_bytes(&g));
        float *y1 = malloc(5 * 40 * 99 * sizeof(float)), *y2 = malloc(5 * 40 * 99 * sizeof(float));
        ck_assert(u && y1 && y2);
        mx_winograd_transform_filter(&g, wt, u);
        ck_assert_uint_le(mx_winograd_scratch_bytes(&g, 2), mx_winograd_scratch_bytes(&g, 5));
        void *s = malloc(mx_winograd_scratch_bytes(&g, 5));
        ck_assert_int_eq(mx_winograd_forward(&g, u, x, 5, bias, false, y1, s), MX_OK);
        ck_assert_int_eq(mx_winograd_forward(&g, u, x, 2, bias, false, y2, s), MX_OK);
        ck_assert_int_eq(mx_winograd_forward(&g, u, x + 2 * 24 * g.in_h * g.in_w, 3, bias, false, y2 + 2 * 40 * 99, s),
                         MX_OK);
        int bad = 0;
        for (int i = 0; i < 5 * 40 * 99; i++) bad += !(fabsf(y1[i] - y2[i]) <= 1e-5f * (1 + fabsf(y1[i])));
        ck_assert_int_eq(bad, 0);
        /* zero images: nothing written */
        ck_assert_int_eq(mx_winograd_forward(&g, u, x, 0, bias, false, NULL, s), MX_OK);
        free(s);
        free(x);
        free(wt);
        free(bias);
        free(u);
        free(y1);
        free(y2);
    }
    unsetenv("MX_WINOGRAD_TILE");
}
END_TEST

/* One image (or two) shared by threads block by block writes the bits of
 * one call, whichever blocks run in what order, with and without bias and
 * accumulation; more images than a group are refused (0 blocks). */
START_TEST(shared_blocks)
{
    for (int kind = 0; kind < KINDS; kind++) {
        const int m = kinds[kind].m, r = kinds[kind].r;
        set_tile(m);
        /* output 30 x 26 (a few blocks of tiles), 16 and 150 channels (V and
         * M tile-major, then channel-major) */
        for (int big = 0; big < 2; big++) {
            const int64_t c = big ? 150 : 16, f = big ? 20 : 24;
            mx_conv_geom g = geom_r(1, c, f, 30 + r - 3, 26 + r - 3, 1, 1, r);
            const int64_t images = mx_winograd_shared_blocks(&g, 2) > 0 ? 2 : 1;
            const int64_t in_n = images * c * g.in_h * g.in_w, out_n = images * f * g.out_h * g.out_w;
            float *x = test_rand_floats(in_n), *wt = test_rand_floats(f * c * r * r), *bias = test_rand_floats(f);
            float *u = malloc(mx_winograd_filter_bytes(&g)), *y1 = malloc((size_t)out_n * sizeof(float));
            float *y2 = malloc((size_t)out_n * sizeof(float));
            void *shared = malloc(mx_winograd_shared_bytes(&g, images));
            void *s1 = malloc(mx_winograd_block_bytes(&g, images)), *s2 = malloc(mx_winograd_block_bytes(&g, images));
            ck_assert(u && y1 && y2 && shared && s1 && s2);
            mx_winograd_transform_filter(&g, wt, u);
            const int64_t blocks = mx_winograd_shared_blocks(&g, images);
            ck_assert_int_ge(blocks, 2);
            for (int variant = 0; variant < 3; variant++) {
                const bool accumulate = variant == 2;
                const float *b = variant == 1 ? NULL : bias;
                for (int64_t i = 0; i < out_n; i++) y1[i] = y2[i] = (float)(i % 7) - 3.0f;
                ck_assert_int_eq(mx_winograd_forward(&g, u, x, images, b, accumulate, y1, NULL), MX_OK);
                mx_winograd_shared_begin(&g, x, images, b, shared);
                /* the second half first, on its own scratch, then the first */
                mx_winograd_shared_blocks_run(&g, u, images, b, blocks / 2, blocks, shared, s2);
                mx_winograd_shared_blocks_run(&g, u, images, b, 0, blocks / 2, shared, s1);
                mx_winograd_shared_end(&g, images, accumulate, y2, shared);
                ck_assert_msg(memcmp(y1, y2, (size_t)out_n * sizeof(float)) == 0, "F(%d, %d), %lld channels, variant %d",
                              m, r, (long long)c, variant);
            }
            ck_assert_int_eq(mx_winograd_shared_blocks(&g, 1000), 0);
            ck_assert_uint_eq(mx_winograd_shared_bytes(&g, 1000), 0);
            free(x);
            free(wt);
            free(bias);
            free(u);
            free(y1);
            free(y2);
            free(shared);
            free(s1);
            free(s2);
        }
    }
    unsetenv("MX_WINOGRAD_TILE");
}
END_TEST

/* The filter transform in parts, and into a misaligned buffer (regular
 * stores instead of streaming ones), gives the same bits as one call. */
START_TEST(filter_parts_and_alignment)
{
    float *w = test_rand_floats(170 * 150 * 25);
    for (int kind = 0; kind < KINDS; kind++) {
        const int m = kinds[kind].m, r = kinds[kind].r;
        mx_conv_geom g = geom_r(1, 150, 170, 5, 5, r / 2, r / 2, r), gb;
        mx_winograd_backward_geom(&g, &gb);
        set_tile(m);
        for (int back = 0; back < 2; back++) {
            size_t bytes = mx_winograd_filter_bytes(back ? &gb : &g);
            float *whole = aligned_alloc(64, round64(bytes)), *parts = aligned_alloc(64, round64(bytes));
            char *odd = malloc(bytes + 4);
            ck_assert(whole && parts && odd);
            memset(parts, 0xff, bytes);
            if (back) {
                mx_winograd_transform_filter_backward(&g, w, whole);
                for (int k = 0; k < 3; k++) mx_winograd_transform_filter_backward_part(&g, w, parts, k, 3);
                mx_winograd_transform_filter_backward(&g, w, (float *)(odd + 4));
            } else {
                mx_winograd_transform_filter(&g, w, whole);
                for (int k = 0; k < 3; k++) mx_winograd_transform_filter_part(&g, w, parts, k, 3);
                mx_winograd_transform_filter(&g, w, (float *)(odd + 4));
            }
            ck_assert_int_eq(memcmp(whole, parts, bytes), 0);
            ck_assert_int_eq(memcmp(whole, odd + 4, bytes), 0);
            free(whole);
            free(parts);
            free(odd);
        }
    }
    unsetenv("MX_WINOGRAD_TILE");
    free(w);
}
END_TEST

/* A slice of output channels at a time (its own filter transform, the
 * whole layer's y and bias) writes each output's bits of the whole
 * forward, for the forward and the backward-data convolution, with and
 * without bias and accumulation; an empty or outside slice is refused. */
START_TEST(output_slices)
{
    for (int kind = 0; kind < KINDS; kind++) {
        const int m = kinds[kind].m, r = kinds[kind].r;
        set_tile(m);
        /* 150 channels out: V and M channel-major whole, tile-major in slices */
        mx_conv_geom g = geom_r(3, 40, 150, 9 + r - 3, 8 + r - 3, 1, 1, r), gb;
        mx_winograd_backward_geom(&g, &gb);
        float *wt = test_rand_floats(150 * 40 * r * r), *bias = test_rand_floats(150);
        for (int back = 0; back < 2; back++) {
            const mx_conv_geom *gw = back ? &gb : &g;
            const int64_t in_n = 3 * gw->in_c * gw->in_h * gw->in_w, out_n = 3 * gw->out_c * gw->out_h * gw->out_w;
            const int64_t cuts[] = {0, 16, 32, gw->out_c - 5, gw->out_c};
            float *x = test_rand_floats(in_n), *u = malloc(mx_winograd_filter_bytes(gw));
            float *us = malloc(mx_winograd_filter_bytes(gw)), *y1 = malloc((size_t)out_n * sizeof(float));
            float *y2 = malloc((size_t)out_n * sizeof(float));
            ck_assert(x && u && us && y1 && y2);
            if (back) mx_winograd_transform_filter_backward(&g, wt, u);
            else mx_winograd_transform_filter(&g, wt, u);
            for (int variant = 0; variant < 3; variant++) {
                const bool accumulate = variant == 2;
                const float *b = variant == 1 || back ? NULL : bias;
                for (int64_t i = 0; i < out_n; i++) y1[i] = y2[i] = (float)(i % 5) - 2.0f;
                ck_assert_int_eq(mx_winograd_forward(gw, u, x, 3, b, accumulate, y1, NULL), MX_OK);
                for (int k = 0; k + 1 < 5; k++) {
                    mx_conv_geom gs;
                    mx_winograd_slice_geom(gw, cuts[k], cuts[k + 1], &gs);
                    void *scratch = malloc(mx_winograd_scratch_bytes(&gs, 3));
                    ck_assert_ptr_nonnull(scratch);
                    memset(us, 0xff, mx_winograd_filter_bytes(&gs));
                    for (int part = 0; part < 2; part++)
                        mx_winograd_transform_filter_slice_part(&g, wt, back, cuts[k], cuts[k + 1], us, part, 2);
                    ck_assert_int_eq(mx_winograd_forward_slice(gw, cuts[k], cuts[k + 1], us, x, 3, b, accumulate, y2,
                                                               scratch),
                                     MX_OK);
                    free(scratch);
                }
                ck_assert_msg(memcmp(y1, y2, (size_t)out_n * sizeof(float)) == 0, "F(%d, %d) %s, variant %d", m, r,
                              back ? "backward" : "forward", variant);
            }
            ck_assert_int_eq(mx_winograd_forward_slice(gw, 10, 10, us, x, 3, NULL, false, y2, NULL), MX_ERR_INVALID);
            ck_assert_int_eq(mx_winograd_forward_slice(gw, 0, gw->out_c + 1, us, x, 3, NULL, false, y2, NULL),
                             MX_ERR_INVALID);
            free(x);
            free(u);
            free(us);
            free(y1);
            free(y2);
        }
        free(wt);
        free(bias);
    }
    unsetenv("MX_WINOGRAD_TILE");
}
END_TEST

/* A layer whose transformed filters would take 14.7 MB runs on a pool in
 * slices: what the pool keeps for the call stays under them, and the
 * forward and backward-data outputs are the whole kernels' bits (the
 * weight gradient within its bound of them), for write and add requests. */
START_TEST(large_layers_run_in_slices)
{
    mx_threadpool *pool;
    ck_assert_int_eq(mx_threadpool_create(2, &pool), MX_OK);
    mx_conv_geom g = geom(4, 320, 320, 7, 7, 1, 1), gb;
    mx_winograd_backward_geom(&g, &gb);
    const size_t whole = mx_winograd_filter_bytes(&g);
    ck_assert_uint_gt(whole, (size_t)14 << 20);
    const int64_t nx = 4 * 320 * 49, nw = 320 * 320 * 9;
    float *x = test_rand_floats(nx), *wt = test_rand_floats(nw), *bias = test_rand_floats(320);
    float *dy = test_rand_floats(nx), *u = malloc(whole), *ub = malloc(mx_winograd_filter_bytes(&gb));
    float *y1 = malloc(nx * sizeof(float)), *y2 = malloc(nx * sizeof(float));
    float *dw1 = malloc(nw * sizeof(float)), *dw2 = malloc(nw * sizeof(float));
    ck_assert(u && ub && y1 && y2 && dw1 && dw2);
    mx_winograd_transform_filter(&g, wt, u);
    mx_winograd_transform_filter_backward(&g, wt, ub);
    ck_assert_int_eq(mx_winograd_backward_weight(&g, x, dy, 4, false, dw1, NULL), MX_OK);
    double scale = 0;
    for (int64_t i = 0; i < nw; i++)
        if (fabs((double)dw1[i]) > scale) scale = fabs((double)dw1[i]);
    for (int add = 0; add < 2; add++) {
        const mx_req req = add ? MX_REQ_ADD : MX_REQ_WRITE;
        for (int64_t i = 0; i < nx; i++) y1[i] = y2[i] = (float)(i % 3);
        ck_assert_int_eq(mx_winograd_forward(&g, u, x, 4, bias, add, y1, NULL), MX_OK);
        ck_assert_int_eq(mx_conv_forward(pool, &g, x, wt, bias, y2, req, NULL, 0), MX_OK);
        ck_assert_msg(memcmp(y1, y2, nx * sizeof(float)) == 0, "forward, %s", add ? "add" : "write");
        for (int64_t i = 0; i < nx; i++) y1[i] = y2[i] = (float)(i % 3);
        ck_assert_int_eq(mx_winograd_forward(&gb, ub, dy, 4, NULL, add, y1, NULL), MX_OK);
        ck_assert_int_eq(mx_conv_backward(pool, &g, x, wt, dy, y2, req, dw2, MX_REQ_WRITE, NULL, 0), MX_OK);
        ck_assert_msg(memcmp(y1, y2, nx * sizeof(float)) == 0, "backward-data, %s", add ? "add" : "write");
        double diff = 0;
        for (int64_t i = 0; i < nw; i++)
            if (!(fabs((double)dw1[i] - dw2[i]) <= diff)) diff = fabs((double)dw1[i] - dw2[i]);
        ck_assert_msg(diff <= 1e-5 * scale, "weight gradient: %g (scale %g)", diff, scale);
        /* backward-data alone */
        ck_assert_int_eq(mx_conv_backward(pool, &g, x, wt, dy, y2, MX_REQ_WRITE, NULL, MX_REQ_NULL, NULL, 0), MX_OK);
        ck_assert_int_eq(mx_winograd_forward(&gb, ub, dy, 4, NULL, false, y1, NULL), MX_OK);
        ck_assert_int_eq(memcmp(y1, y2, nx * sizeof(float)), 0);
    }
    size_t held = mx_scratch_held_bytes(pool);
    ck_assert_msg(held < whole, "%zu bytes held by the pool for a layer whose filters transform to %zu", held, whole);
    mx_threadpool_free(pool);
    free(x);
    free(wt);
    free(bias);
    free(dy);
    free(u);
    free(ub);
    free(y1);
    free(y2);
    free(dw1);
    free(dw2);
}
END_TEST

/* A weight gradient whose whole dU (36 x C x Fp) would pass 6 MiB makes
 * it in two blocks of input channels (the second block ending in the
 * channel padding here): its scratch holds half a dU, and dw, written and
 * accumulated, stays within the bounds against float64 on every vector
 * path. */
START_TEST(wgrad_du_in_blocks)
{
    set_tile(4);
    const int64_t n = 4, c = 280, f = 264, nx = n * c * 196, ny = n * f * 196, nw = f * c * 9;
    mx_conv_geom g = geom(n, c, f, 14, 14, 1, 1);
    const size_t whole_du = (size_t)36 * c * 272 * sizeof(float);
    ck_assert_uint_gt(whole_du, (size_t)6 << 20);
    ck_assert_msg(mx_winograd_wgrad_scratch_bytes(&g, n) < whole_du + ((size_t)13 << 19),
                  "%zu bytes of scratch (a whole dU: %zu)", mx_winograd_wgrad_scratch_bytes(&g, n), whole_du);
    float *x = test_rand_floats(nx), *dy = test_rand_floats(ny), *dw0 = test_rand_floats(nw);
    float *dw = malloc((size_t)nw * sizeof(float));
    double *ref = malloc((size_t)nw * sizeof(double)), *abs_sum = malloc((size_t)nw * sizeof(double));
    ck_assert(dw && ref && abs_sum);
    conv_ref_weight(&g, x, dy, ref, abs_sum);
    for (int k = 0; k < 3; k++) {
        setenv("MX_WINOGRAD_ISA", isas[k], 1);
        for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
        ck_assert_int_eq(mx_winograd_backward_weight(&g, x, dy, n, false, dw, NULL), MX_OK);
        errs e = measure(dw, NULL, ref, abs_sum, nw);
        ck_assert_msg(e.rel_terms <= wgrad_bound(4, 3) && e.rel_max <= wgrad_bound_max(4, 3), "%s: %g / %g", isas[k],
                      e.rel_terms, e.rel_max);
        memcpy(dw, dw0, (size_t)nw * sizeof(float));
        ck_assert_int_eq(mx_winograd_backward_weight(&g, x, dy, n, true, dw, NULL), MX_OK);
        e = measure(dw, dw0, ref, abs_sum, nw);
        ck_assert_msg(e.rel_terms <= wgrad_bound(4, 3), "%s, accumulate: %g", isas[k], e.rel_terms);
    }
    unsetenv("MX_WINOGRAD_ISA");
    unsetenv("MX_WINOGRAD_TILE");
    free(x);
    free(dy);
    free(dw0);
    free(dw);
    free(ref);
    free(abs_sum);
}
END_TEST

/* The weight gradient's scratch does not grow with the image: VGG-16's
 * 224x224 layers at 64 channels needed 84 MiB on every thread (V and DM
 * for the image's 3136 tiles); pieces of tiles keep it to the padded image,
 * dy and a bounded V and DM. */
START_TEST(wgrad_scratch_is_bounded)
{
    mx_conv_geom g = geom(1, 64, 64, 224, 224, 1, 1);
    size_t image = (size_t)(226 * 226 + 224 * 224) * 64 * sizeof(float); /* padded x and dy */
    size_t bytes = mx_winograd_wgrad_scratch_bytes(&g, 1);
    ck_assert_msg(bytes < image + ((size_t)12 << 20), "%zu bytes of scratch for a 224x224 image (x and dy: %zu)", bytes,
                  image);
}
END_TEST

START_TEST(supported_geometries)
{
    mx_conv_geom g = geom(2, 8, 8, 10, 10, 1, 1);
    ck_assert(mx_winograd_supported(&g));
    mx_conv_geom b = g;
    b.stride_h = 2;
    b.out_h = 5;
    ck_assert(!mx_winograd_supported(&b));
    b = g;
    b.groups = 2;
    ck_assert(!mx_winograd_supported(&b));
    b = g;
    b.dil_w = 2;
    b.out_w = 8;
    ck_assert(!mx_winograd_supported(&b));
    b = geom(2, 8, 8, 10, 10, 3, 1);
    ck_assert(!mx_winograd_supported(&b));
    b = geom(2, 8, 8, 2, 10, 0, 1); /* empty output */
    ck_assert(!mx_winograd_supported(&b));
    b = g;
    b.k_h = b.k_w = 5;
    b.out_h = b.out_w = 8;
    ck_assert(mx_winograd_supported(&b)); /* 5x5: F(2x2, 5x5) */
    b.k_w = 3;
    b.out_w = 10;
    ck_assert(!mx_winograd_supported(&b)); /* not square */
    b = g;
    b.k_h = b.k_w = 7;
    b.out_h = b.out_w = 6;
    ck_assert(!mx_winograd_supported(&b));
    ck_assert(!mx_winograd_profitable(&b));
    ck_assert_int_eq(mx_winograd_forward(&b, NULL, NULL, 1, NULL, false, NULL, NULL), MX_ERR_INVALID);
    b = geom_r(2, 8, 8, 10, 10, 5, 0, 5); /* pad beyond r - 1 */
    ck_assert(!mx_winograd_supported(&b));
    for (int p = 0; p <= 4; p++) {
        mx_conv_geom f = geom_r(1, 3, 4, 9, 6, p, 4 - p, 5), gb;
        mx_winograd_backward_geom(&f, &gb);
        ck_assert_int_eq(gb.pad_h, 4 - p);
        ck_assert_int_eq(gb.pad_w, p);
        ck_assert_int_eq(gb.out_h, 9);
        ck_assert_int_eq(gb.out_w, 6);
        ck_assert(mx_winograd_supported(&gb));
    }
    /* the backward geometry of a pad-p conv has pad 2-p and gives back H x W */
    for (int p = 0; p <= 2; p++) {
        mx_conv_geom f = geom(1, 3, 4, 9, 6, p, 2 - p), gb;
        mx_winograd_backward_geom(&f, &gb);
        ck_assert_int_eq(gb.pad_h, 2 - p);
        ck_assert_int_eq(gb.pad_w, p);
        ck_assert_int_eq(gb.in_c, 4);
        ck_assert_int_eq(gb.out_c, 3);
        ck_assert_int_eq(gb.out_h, 9);
        ck_assert_int_eq(gb.out_w, 6);
        ck_assert(mx_winograd_supported(&gb));
    }
    /* profitability (bench_winograd's crossover): from 8 channels a side up,
     * not at 4 -> 4 nor on the RGB stem, nor with too few tiles in a batch */
    mx_conv_geom big = geom(8, 256, 256, 14, 14, 1, 1), small = geom(64, 16, 16, 32, 32, 1, 1);
    ck_assert(mx_winograd_profitable(&big));
    ck_assert(mx_winograd_profitable(&small));
    mx_conv_geom tiny = geom(64, 4, 4, 32, 32, 1, 1), stem = geom(64, 3, 16, 32, 32, 1, 1);
    ck_assert(!mx_winograd_profitable(&tiny));
    ck_assert(!mx_winograd_profitable(&stem));
    mx_conv_geom few = geom(4, 256, 256, 3, 3, 1, 1), many = geom(8, 256, 256, 3, 3, 1, 1);
    ck_assert(!mx_winograd_profitable(&few));
    ck_assert(mx_winograd_profitable(&many));
}
END_TEST

int main(void)
{
    openblas_set_num_threads(1); /* the kernels run on one thread each, as under the pool */
    Suite *s = suite_create("winograd");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, supported_geometries);
    tcase_add_test(tc, wgrad_scratch_is_bounded);
    tcase_add_test(tc, image_ranges);
    tcase_add_test(tc, shared_blocks);
    tcase_add_test(tc, filter_parts_and_alignment);
    tcase_add_test(tc, output_slices);
    tcase_add_test(tc, large_layers_run_in_slices);
    tcase_add_test(tc, wgrad_du_in_blocks);
    tcase_add_test(tc, edge_shapes);
    tcase_add_test(tc, random_shapes);
    tcase_add_test(tc, shapes_5x5);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
