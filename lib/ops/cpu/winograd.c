/*
 * winograd.c - Winograd F(m x m, r x r) convolution, r = 3 or 5 (see winograd.h).
 *
 * One call processes images [0, images) in groups of `gi` images (enough
 * that a group has a block's worth of tiles); per group:
 *   1. pack:   x (gi, C, H, W) -> xp (gi, Hp, Wp, Cp), zero-padded, channel
 *              last, so that every tile reads an alpha x alpha patch of
 *              16-channel vectors (Hp = th*m + r - 1, Wp = tw*m + r - 1);
 *   2. per block of up to BLOCK_TILES tiles:
 *        input transform  xp -> V: nb tiles x T positions x Cp
 *        T products       M_t (nb, Fp) = V_t (nb, C) * u_t (C, Fp)
 *        output transform M -> Y (gi, OHt, OWt, Fp) (+ bias)
 *   3. unpack: Y -> y (gi, F, OH, OW), written or accumulated.
 * The transforms run on 16 channels at a time (GCC vector extensions: one
 * zmm on AVX-512, two ymm on AVX2, four xmm on the baseline); the packs
 * move 16 x 16 (AVX-512) or 8 x 8 (AVX2) blocks through in-register
 * transposes. The products are register-blocked FMA kernels reading u in
 * panels of 32 output channels (AVX-512: 12 tiles x 32 channels, AVX2:
 * 6 x 16); the baseline calls cblas_sgemm per panel. Every variant uses
 * the same u layout, so the transforms and the products may come from
 * different variants.
 */
#include "ops/cpu/winograd.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/transpose16.h"

#include <cblas.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The variants' bodies are shared inline functions taking 64-byte vectors;
 * they are only ever inlined into functions compiled for each target. */
#pragma GCC diagnostic ignored "-Wpsabi"
/* Contract a*b+c into FMAs across statements (GCC's pragma; clang spells it
 * its own way). */
#if defined(__clang__)
#pragma clang fp contract(fast)
#else
#pragma GCC optimize("fp-contract=fast")
#endif

#define LANES 16          /* channels per vector; C and F are padded to it */
#define BLOCK_TILES 36    /* tiles per block (3 x GEMM_ROWS): V and M of a block stay in L2 */
#define ALIGN_FLOATS 16   /* 64-byte alignment of the scratch parts */
#define STREAM_BYTES (2 << 20) /* transformed filters this large bypass the caches */
#define PANEL 32          /* output channels per column panel of u_t */
#define TILE_MAJOR_MAX 128 /* channels up to which V and M are tile-major */
#define GEMM_ROWS 12      /* rows per AVX-512 product kernel call */

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define INLINE static inline __attribute__((always_inline))

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/* ------------------------------------------------------------ the plan */

typedef struct wplan {
    int m, r, a, t;                /* tile, kernel, alpha = m + r - 1, T = alpha^2 */
    int64_t c, f, cp, fp;          /* channels in and out, padded to LANES */
    int64_t h, w, oh, ow, ph, pw;
    int64_t th, tw, tpi;           /* tiles down, across, per image */
    int64_t hp, wp, oht, owt;      /* padded input, tiled output */
    int64_t gi;                    /* images per group */
    int64_t nbmax;                 /* tiles per block, at most */
    /* V element (tile j, position t, channel c) at j*vj + t*vt + c, M's
     * (j, t, f) at j*mj + t*mt + f: tile-major (nbmax, T, Cp) when the
     * channels are few (a tile's transform then reads and writes one run),
     * position-major (T, nbmax, Cp) otherwise (the products' rows are
     * closer together). */
    int64_t vj, vt, mj, mt;
    int64_t y_img;                 /* floats between images of y: F*OH*OW, or the whole layer's for a slice */
    int64_t c_lo, c_hi;            /* the input channels pack and the input transform make: [0, Cp), or a
                                      LANES-aligned block of them (the weight gradient's dU blocks) */
    bool stream_y;                 /* unpack writes y's whole 64-byte lines past the caches (a large layer's
                                      output, written: see conv_direct.c's STORE_STREAM) */
    /* scratch parts, in floats from the aligned base */
    int64_t off_v, off_m, off_y, off_b, total;
} wplan;

bool mx_winograd_supported(const mx_conv_geom *g)
{
    const int64_t r = g->k_h;
    return (r == 3 || r == 5) && g->k_w == r && g->stride_h == 1 && g->stride_w == 1 && g->dil_h == 1 &&
           g->dil_w == 1 && g->groups == 1 && g->pad_h >= 0 && g->pad_h < r && g->pad_w >= 0 && g->pad_w < r &&
           g->in_c > 0 && g->out_c > 0 && g->in_h > 0 && g->in_w > 0 && g->out_h == g->in_h + 2 * g->pad_h - (r - 1) &&
           g->out_w == g->in_w + 2 * g->pad_w - (r - 1) && g->out_h > 0 && g->out_w > 0;
}

/* Output positions computed per output position kept, for tile m. */
static double tile_waste(const mx_conv_geom *g, int m)
{
    return (double)(ceil_div(g->out_h, m) * m * ceil_div(g->out_w, m) * m) / (double)(g->out_h * g->out_w);
}

int mx_winograd_tile(const mx_conv_geom *g)
{
    const char *e = getenv("MX_WINOGRAD_TILE");
    if (g->k_h == 5) {
        if (e && (e[0] == '2' || e[0] == '4') && e[1] == '\0') return e[0] - '0';
        /* Multiplications per output kept: F(2): 9 * waste, F(4): 4 * waste.
         * F(4x4, 5x5) has alpha 8 like F(6x6, 3x3), but its forward error
         * stays below F(4x4, 3x3)'s (tests/test_winograd.c) and it runs
         * 1.6-1.8x faster than F(2x2, 5x5) on AlexNet conv2 and LeNet conv2. */
        return 4.0 * tile_waste(g, 4) <= 9.0 * tile_waste(g, 2) ? 4 : 2;
    }
    if (e && (e[0] == '2' || e[0] == '4' || e[0] == '6') && e[1] == '\0') return e[0] - '0';
    /* Multiplications per output kept: F(2): 4 * waste, F(4): 2.25 * waste.
     * F(6) (1.78 * waste) was never faster than F(4) on the benchmark
     * layers (its transforms cost more, its products get fewer tiles) and
     * has about twice F(4)'s rounding error: only on request. */
    double w2 = 4.0 * tile_waste(g, 2), w4 = 2.25 * tile_waste(g, 4);
    return w4 <= w2 ? 4 : 2;
}

/* Measured on one thread against im2col + SGEMM (tests/bench_winograd.c):
 * Winograd wins 2.4-4.6x once both channel counts reach 8 (and on C=4,
 * F=16 or C=16, F=4); it loses at C=F=1..4 (0.2-0.9x: the transforms work
 * on 16 channels at a time) and breaks even on the 3 -> 16 RGB stem. The
 * filter transforms (once per weight update, forward and backward) cost
 * about as much as the products when the whole batch has few tiles (a
 * 16-image batch of 3x3 maps at 256 -> 256: step speedup 1.2x), so a
 * known batch must give at least 8 tiles. */
bool mx_winograd_profitable(const mx_conv_geom *g)
{
    if (!mx_winograd_supported(g)) return false;
    int64_t lo = g->in_c < g->out_c ? g->in_c : g->out_c;
    if (lo < 4 || g->in_c * g->out_c < 64) return false;
    int m = mx_winograd_tile(g);
    int64_t tiles = ceil_div(g->out_h, m) * ceil_div(g->out_w, m);
    return g->batch <= 0 || g->batch * tiles >= 8;
}

static void plan_init(wplan *p, const mx_conv_geom *g, int64_t images)
{
    memset(p, 0, sizeof(*p));
    p->m = mx_winograd_tile(g);
    p->r = (int)g->k_h;
    p->a = p->m + p->r - 1;
    p->t = p->a * p->a;
    p->c = g->in_c;
    p->f = g->out_c;
    p->cp = round_up(p->c, LANES);
    p->fp = round_up(p->f, LANES);
    p->h = g->in_h;
    p->w = g->in_w;
    p->oh = g->out_h;
    p->ow = g->out_w;
    p->ph = g->pad_h;
    p->pw = g->pad_w;
    p->y_img = p->f * p->oh * p->ow;
    p->c_lo = 0;
    p->c_hi = p->cp;
    p->th = ceil_div(p->oh, p->m);
    p->tw = ceil_div(p->ow, p->m);
    p->tpi = p->th * p->tw;
    p->oht = p->th * p->m;
    p->owt = p->tw * p->m;
    p->hp = p->oht + p->r - 1;
    p->wp = p->owt + p->r - 1;
    if (images < 1) images = 1;
    p->gi = ceil_div(BLOCK_TILES, p->tpi);
    if (p->gi > images) p->gi = images;
    p->nbmax = p->gi * p->tpi < BLOCK_TILES ? p->gi * p->tpi : BLOCK_TILES;
    if (p->cp <= TILE_MAJOR_MAX) {
        p->vj = p->t * p->cp;
        p->vt = p->cp;
    } else {
        p->vj = p->cp;
        p->vt = p->nbmax * p->cp;
    }
    if (p->fp <= TILE_MAJOR_MAX) {
        p->mj = p->t * p->fp;
        p->mt = p->fp;
    } else {
        p->mj = p->fp;
        p->mt = p->nbmax * p->fp;
    }
    int64_t xp = round_up(p->gi * p->hp * p->wp * p->cp, ALIGN_FLOATS);
    int64_t v = round_up(p->t * p->nbmax * p->cp, ALIGN_FLOATS);
    int64_t mm = round_up(p->t * p->nbmax * p->fp, ALIGN_FLOATS);
    int64_t y = round_up(p->gi * p->oht * p->owt * p->fp, ALIGN_FLOATS);
    p->off_v = xp;
    p->off_m = p->off_v + v;
    p->off_y = p->off_m + mm;
    p->off_b = p->off_y + y;
    p->total = p->off_b + round_up(p->fp, ALIGN_FLOATS);
}

size_t mx_winograd_scratch_bytes(const mx_conv_geom *g, int64_t images)
{
    wplan p;
    plan_init(&p, g, images);
    return (size_t)p.total * sizeof(float) + 64;
}

/* ----------------------------------------------------- filter transform */

/* One filter transform: the 3x3 filter of output channel o and input
 * channel i is at w + o*so + i*si (rotated by 180 degrees when rot); input
 * channels [i0, i1) of cin are transformed into u (T, cin, coutp). */
typedef struct filter_job {
    const float *w, *w_end; /* w_end: the end of the weight array (loads past a filter stop there) */
    int64_t cin, cout, so, si, i0, i1;
    bool rot;
    float *u;
} filter_job;

static void transform_filter(int m, int r, const filter_job *j);

static void part_range(int64_t n, int64_t part, int64_t parts, int64_t *lo, int64_t *hi)
{
    if (parts < 1) parts = 1;
    if (part < 0) part = 0;
    if (part > parts) part = parts;
    *lo = n * part / parts;
    *hi = n * (part + 1 > parts ? parts : part + 1) / parts;
}

size_t mx_winograd_filter_bytes(const mx_conv_geom *g)
{
    int64_t a = mx_winograd_tile(g) + g->k_h - 1;
    return (size_t)(a * a * g->in_c * round_up(g->out_c, LANES)) * sizeof(float);
}

void mx_winograd_slice_geom(const mx_conv_geom *g, int64_t o0, int64_t o1, mx_conv_geom *gs)
{
    *gs = *g;
    gs->out_c = o1 - o0;
}

void mx_winograd_transform_filter_slice_part(const mx_conv_geom *g, const float *w, bool backward, int64_t o0,
                                             int64_t o1, float *u, int64_t part, int64_t parts)
{
    const int64_t taps = g->k_h * g->k_w;
    const float *w_end = w + g->out_c * g->in_c * taps;
    if (!backward) {
        filter_job j = {.w = w + o0 * g->in_c * taps, .w_end = w_end, .cin = g->in_c, .cout = o1 - o0,
                        .so = g->in_c * taps, .si = taps, .u = u};
        part_range(g->in_c, part, parts, &j.i0, &j.i1);
        transform_filter(mx_winograd_tile(g), (int)g->k_h, &j);
        return;
    }
    mx_conv_geom gb;
    mx_winograd_backward_geom(g, &gb);
    /* gb's filter (C, F, r, r): output channel c, input channel f is w[f, c] rotated. */
    filter_job j = {.w = w + o0 * taps, .w_end = w_end, .cin = g->out_c, .cout = o1 - o0, .so = taps,
                    .si = g->in_c * taps, .rot = true, .u = u};
    part_range(g->out_c, part, parts, &j.i0, &j.i1);
    transform_filter(mx_winograd_tile(&gb), (int)g->k_h, &j);
}

void mx_winograd_transform_filter_part(const mx_conv_geom *g, const float *w, float *u, int64_t part, int64_t parts)
{
    mx_winograd_transform_filter_slice_part(g, w, false, 0, g->out_c, u, part, parts);
}

void mx_winograd_transform_filter(const mx_conv_geom *g, const float *w, float *u)
{
    mx_winograd_transform_filter_part(g, w, u, 0, 1);
}

void mx_winograd_backward_geom(const mx_conv_geom *g, mx_conv_geom *gb) { mx_conv_transposed_geom(g, gb); }

void mx_winograd_transform_filter_backward_part(const mx_conv_geom *g, const float *w, float *u_b, int64_t part,
                                                int64_t parts)
{
    mx_winograd_transform_filter_slice_part(g, w, true, 0, g->in_c, u_b, part, parts);
}

void mx_winograd_transform_filter_backward(const mx_conv_geom *g, const float *w, float *u_b)
{
    mx_winograd_transform_filter_backward_part(g, w, u_b, 0, 1);
}

/* ------------------------------------------------------ vector helpers */

INLINE v16f vload(const float *p)
{
    v16f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* a macro: a v16f parameter of a non-AVX-512 function draws an ABI note */
#define vstore(p, v)                         \
    do {                                     \
        v16f vstore_ = (v);                  \
        memcpy((p), &vstore_, sizeof(v16f)); \
    } while (0)

/* A non-temporal store of 64 aligned bytes (AVX-512 variants only): the
 * transformed filters are larger than the caches, and streaming them out
 * saves the read-for-ownership of every line. */
__attribute__((target("avx512f"))) static void stream_avx512(float *p, const v16f *v)
{
    _mm512_stream_ps(p, (__m512)*v);
}

/* 1-D transforms. The points are {0, 1, -1, inf} (alpha 4), {0, +-1, +-2,
 * inf} (alpha 6) and {0, +-1, +-2, +-1/2, inf} (alpha 8). B^T depends on
 * the points only, so F(4, 3) and F(2, 5) share the alpha-6 input
 * transform, F(6, 3) and F(4, 5) the alpha-8 one; G = D V_r (row i: the
 * point's powers 0..r-1 times a scale d_i that B^T absorbed the inverse
 * of; the inf row picks the last tap), A^T row k = the points' k-th powers
 * (inf: 1 in the last row only). Lavin & Gray's derivation; the constants
 * are checked against a direct convolution in tests/test_winograd.c. */

/* B^T d: alpha input points -> alpha */
INLINE void bt_1d(const int a, const v16f *d, v16f *o)
{
    if (a == 4) {
        o[0] = d[0] - d[2];
        o[1] = d[1] + d[2];
        o[2] = d[2] - d[1];
        o[3] = d[1] - d[3];
    } else if (a == 6) {
        o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
        v16f t1 = d[4] - 4.0f * d[2], t2 = d[3] - 4.0f * d[1];
        o[1] = t1 + t2;
        o[2] = t1 - t2;
        v16f t3 = d[4] - d[2], t4 = 2.0f * (d[3] - d[1]);
        o[3] = t3 + t4;
        o[4] = t3 - t4;
        o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
    } else {
        o[0] = (d[0] - d[6]) + 5.25f * (d[4] - d[2]);
        v16f p = d[1] + d[5] - 4.25f * d[3], q = d[2] + d[6] - 4.25f * d[4];
        o[1] = q + p;
        o[2] = q - p;
        p = 0.5f * d[1] - 2.5f * d[3] + 2.0f * d[5];
        q = 0.25f * d[2] - 1.25f * d[4] + d[6];
        o[3] = q + p;
        o[4] = q - p;
        p = 2.0f * d[1] - 2.5f * d[3] + 0.5f * d[5];
        q = 4.0f * d[2] - 5.0f * d[4] + d[6];
        o[5] = q + p;
        o[6] = q - p;
        o[7] = (d[7] - d[1]) + 5.25f * (d[3] - d[5]);
    }
}

/* A^T s: alpha products -> m outputs */
INLINE void at_1d(const int m, const int a, const v16f *s, v16f *o)
{
    if (a == 4) {
        o[0] = s[0] + s[1] + s[2];
        o[1] = s[1] - s[2] - s[3];
    } else if (a == 6) {
        v16f e1 = s[1] + s[2], d1 = s[1] - s[2], e2 = s[3] + s[4], d2 = s[3] - s[4];
        if (m == 2) {
            o[0] = s[0] + e1 + e2;
            o[1] = d1 + 2.0f * d2 + s[5];
        } else {
            o[0] = s[0] + e1 + e2;
            o[1] = d1 + 2.0f * d2;
            o[2] = e1 + 4.0f * e2;
            o[3] = d1 + 8.0f * d2 + s[5];
        }
    } else {
        v16f e1 = s[1] + s[2], d1 = s[1] - s[2], e2 = s[3] + s[4], d2 = s[3] - s[4];
        v16f e3 = s[5] + s[6], d3 = s[5] - s[6];
        o[0] = s[0] + e1 + e2 + e3;
        o[1] = d1 + 2.0f * d2 + 0.5f * d3;
        o[2] = e1 + 4.0f * e2 + 0.25f * e3;
        o[3] = d1 + 8.0f * d2 + 0.125f * d3;
        if (m == 4) {
            o[3] += s[7];
        } else {
            o[4] = e1 + 16.0f * e2 + 0.0625f * e3;
            o[5] = d1 + 32.0f * d2 + 0.03125f * d3 + s[7];
        }
    }
}

/* G g: r filter taps -> alpha */
INLINE void g_1d(const int a, const int r, const v16f *g, v16f *o)
{
    if (a == 4) {
        o[0] = g[0];
        o[1] = 0.5f * (g[0] + g[1] + g[2]);
        o[2] = 0.5f * (g[0] - g[1] + g[2]);
        o[3] = g[2];
    } else if (a == 6 && r == 3) {
        v16f e = g[0] + g[2], q = 0.25f * g[0] + g[2];
        o[0] = 0.25f * g[0];
        o[1] = (-1.0f / 6) * (e + g[1]);
        o[2] = (-1.0f / 6) * (e - g[1]);
        o[3] = (1.0f / 6) * (q + 0.5f * g[1]);
        o[4] = (1.0f / 6) * (q - 0.5f * g[1]);
        o[5] = g[2];
    } else if (a == 6) {
        v16f e1 = g[0] + g[2] + g[4], d1 = g[1] + g[3];
        v16f e2 = g[0] + 4.0f * g[2] + 16.0f * g[4], d2 = 2.0f * g[1] + 8.0f * g[3];
        o[0] = 0.25f * g[0];
        o[1] = (-1.0f / 6) * (e1 + d1);
        o[2] = (-1.0f / 6) * (e1 - d1);
        o[3] = (1.0f / 24) * (e2 + d2);
        o[4] = (1.0f / 24) * (e2 - d2);
        o[5] = g[4];
    } else if (r == 3) {
        v16f e = g[0] + g[2], q = (1.0f / 90) * g[0] + (2.0f / 45) * g[2], t = (32.0f / 45) * g[0] + (8.0f / 45) * g[2];
        o[0] = g[0];
        o[1] = (-2.0f / 9) * (e + g[1]);
        o[2] = (-2.0f / 9) * (e - g[1]);
        o[3] = q + (1.0f / 45) * g[1];
        o[4] = q - (1.0f / 45) * g[1];
        o[5] = t + (16.0f / 45) * g[1];
        o[6] = t - (16.0f / 45) * g[1];
        o[7] = g[2];
    } else {
        v16f e1 = g[0] + g[2] + g[4], d1 = g[1] + g[3];
        v16f e2 = g[0] + 4.0f * g[2] + 16.0f * g[4], d2 = 2.0f * g[1] + 8.0f * g[3];
        v16f e3 = g[0] + 0.25f * g[2] + 0.0625f * g[4], d3 = 0.5f * g[1] + 0.125f * g[3];
        o[0] = g[0];
        o[1] = (-2.0f / 9) * (e1 + d1);
        o[2] = (-2.0f / 9) * (e1 - d1);
        o[3] = (1.0f / 90) * (e2 + d2);
        o[4] = (1.0f / 90) * (e2 - d2);
        o[5] = (32.0f / 45) * (e3 + d3);
        o[6] = (32.0f / 45) * (e3 - d3);
        o[7] = g[4];
    }
}

/* Weight gradient, 1-D: alpha values from m (A y: the adjoint of at_1d) */
INLINE void a_1d(const int m, const int a, const v16f *y, v16f *z)
{
    if (a == 4) {
        z[0] = y[0];
        z[1] = y[0] + y[1];
        z[2] = y[0] - y[1];
        z[3] = -y[1];
    } else if (a == 6 && m == 2) {
        v16f t = 2.0f * y[1];
        z[0] = y[0];
        z[1] = y[0] + y[1];
        z[2] = y[0] - y[1];
        z[3] = y[0] + t;
        z[4] = y[0] - t;
        z[5] = y[1];
    } else if (a == 6) {
        v16f e = y[0] + y[2], o = y[1] + y[3], e4 = y[0] + 4.0f * y[2], o8 = 2.0f * y[1] + 8.0f * y[3];
        z[0] = y[0];
        z[1] = e + o;
        z[2] = e - o;
        z[3] = e4 + o8;
        z[4] = e4 - o8;
        z[5] = y[3];
    } else if (m == 4) {
        v16f e = y[0] + y[2], o = y[1] + y[3];
        v16f e2 = y[0] + 4.0f * y[2], o2 = 2.0f * y[1] + 8.0f * y[3];
        v16f eh = y[0] + 0.25f * y[2], oh = 0.5f * y[1] + 0.125f * y[3];
        z[0] = y[0];
        z[1] = e + o;
        z[2] = e - o;
        z[3] = e2 + o2;
        z[4] = e2 - o2;
        z[5] = eh + oh;
        z[6] = eh - oh;
        z[7] = y[3];
    } else {
        v16f e = y[0] + y[2] + y[4], o = y[1] + y[3] + y[5];
        v16f e2 = y[0] + 4.0f * y[2] + 16.0f * y[4], o2 = 2.0f * y[1] + 8.0f * y[3] + 32.0f * y[5];
        v16f eh = y[0] + 0.25f * y[2] + 0.0625f * y[4], oh = 0.5f * y[1] + 0.125f * y[3] + 0.03125f * y[5];
        z[0] = y[0];
        z[1] = e + o;
        z[2] = e - o;
        z[3] = e2 + o2;
        z[4] = e2 - o2;
        z[5] = eh + oh;
        z[6] = eh - oh;
        z[7] = y[5];
    }
}

/* Weight gradient, 1-D: r taps from alpha (G^T u: the adjoint of g_1d) */
INLINE void gt_1d(const int a, const int r, const v16f *u, v16f *h)
{
    if (a == 4) {
        v16f e = 0.5f * (u[1] + u[2]);
        h[0] = u[0] + e;
        h[1] = 0.5f * (u[1] - u[2]);
        h[2] = e + u[3];
    } else if (a == 6 && r == 3) {
        v16f e1 = u[1] + u[2], e3 = u[3] + u[4];
        h[0] = 0.25f * u[0] - (1.0f / 6) * e1 + (1.0f / 24) * e3;
        h[1] = (-1.0f / 6) * (u[1] - u[2]) + (1.0f / 12) * (u[3] - u[4]);
        h[2] = (1.0f / 6) * (e3 - e1) + u[5];
    } else if (a == 6) {
        /* h_j = [j = 0] u0/4 - (u1 + (-1)^j u2)/6 + 2^j (u3 + (-1)^j u4)/24 + [j = 4] u5 */
        v16f e1 = (-1.0f / 6) * (u[1] + u[2]), d1 = (-1.0f / 6) * (u[1] - u[2]);
        v16f e2 = (1.0f / 24) * (u[3] + u[4]), d2 = (1.0f / 24) * (u[3] - u[4]);
        h[0] = 0.25f * u[0] + e1 + e2;
        h[1] = d1 + 2.0f * d2;
        h[2] = e1 + 4.0f * e2;
        h[3] = d1 + 8.0f * d2;
        h[4] = e1 + 16.0f * e2 + u[5];
    } else if (r == 3) {
        v16f e1 = u[1] + u[2], e3 = u[3] + u[4], e5 = u[5] + u[6];
        h[0] = u[0] - (2.0f / 9) * e1 + (1.0f / 90) * e3 + (32.0f / 45) * e5;
        h[1] = (-2.0f / 9) * (u[1] - u[2]) + (1.0f / 45) * (u[3] - u[4]) + (16.0f / 45) * (u[5] - u[6]);
        h[2] = (-2.0f / 9) * e1 + (2.0f / 45) * e3 + (8.0f / 45) * e5 + u[7];
    } else {
        /* as above with the points +-1/2 (scale 32/45) and the scales -2/9, 1/90 */
        v16f e1 = (-2.0f / 9) * (u[1] + u[2]), d1 = (-2.0f / 9) * (u[1] - u[2]);
        v16f e2 = (1.0f / 90) * (u[3] + u[4]), d2 = (1.0f / 90) * (u[3] - u[4]);
        v16f e3 = (32.0f / 45) * (u[5] + u[6]), d3 = (32.0f / 45) * (u[5] - u[6]);
        h[0] = u[0] + e1 + e2 + e3;
        h[1] = d1 + 2.0f * d2 + 0.5f * d3;
        h[2] = e1 + 4.0f * e2 + 0.25f * e3;
        h[3] = d1 + 8.0f * d2 + 0.125f * d3;
        h[4] = e1 + 16.0f * e2 + 0.0625f * e3 + u[7];
    }
}

INLINE v8f vload8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

#define vstore8(p, v)                        \
    do {                                     \
        v8f vstore8_ = (v);                  \
        memcpy((p), &vstore8_, sizeof(v8f)); \
    } while (0)

/* In-register 8 x 8 transpose with the shuffles AVX has single
 * instructions for (unpck, shufps, vperm2f128). */
INLINE void transpose8(v8f *r)
{
    /* __builtin_shufflevector (GCC 12 and clang) takes the lane indices as
     * constants: the masks are macros, not vectors. */
#define ULO 0, 8, 1, 9, 4, 12, 5, 13
#define UHI 2, 10, 3, 11, 6, 14, 7, 15
#define SLO 0, 1, 8, 9, 4, 5, 12, 13
#define SHI 2, 3, 10, 11, 6, 7, 14, 15
#define PLO 0, 1, 2, 3, 8, 9, 10, 11
#define PHI 4, 5, 6, 7, 12, 13, 14, 15
    v8f t[8], q[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], ULO);
        t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], UHI);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        q[4 * i] = __builtin_shufflevector(t[4 * i], t[4 * i + 2], SLO);
        q[4 * i + 1] = __builtin_shufflevector(t[4 * i], t[4 * i + 2], SHI);
        q[4 * i + 2] = __builtin_shufflevector(t[4 * i + 1], t[4 * i + 3], SLO);
        q[4 * i + 3] = __builtin_shufflevector(t[4 * i + 1], t[4 * i + 3], SHI);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = __builtin_shufflevector(q[i], q[i + 4], PLO);
        r[i + 4] = __builtin_shufflevector(q[i], q[i + 4], PHI);
    }
#undef ULO
#undef UHI
#undef SLO
#undef SHI
#undef PLO
#undef PHI
}

/* ------------------------------------------------------ kernel bodies */

/* The first n (<= 16) taps of a filter at k, in the first n lanes; the
 * other lanes hold whatever follows it (a whole-vector load), or zeros
 * where that would read past the weights' end. */
INLINE v16f filter_taps(const float *k, int n, const float *end)
{
    if (k + LANES <= end) return vload(k);
    v16f v = {0};
    memcpy(&v, k, (size_t)n * sizeof(float));
    return v;
}

/* u (T, cin, coutp) = G g G^T in panels (see gemm_block), 16 output
 * channels at a time; the 3x3
 * filter of output channel o, input channel i is at w + o*so + i*si,
 * rotated by 180 degrees when `rot`. Padding columns o >= cout are zero.
 * Large outputs are streamed past the caches when u is 64-byte aligned:
 * the products read them back once per block anyway. With 16-float
 * vectors (xpose) the 16 filters of a block load as one vector of taps
 * each and turn into one vector per tap by a transpose in registers,
 * instead of gathering the lanes a float at a time through memory (one
 * Xeon thread, 3x3 filters, forward and backward transform: 512 -> 512
 * 3.8-4.0 -> 3.0-3.1 ms each, 256 -> 256 0.90 -> 0.73, 128 -> 128 0.22 ->
 * 0.17; together with the loop order below). */
INLINE void filter_body(const filter_job *j, const bool can_stream, const int xpose, const int m, const int r)
{
    const int a = m + r - 1, taps = r * r;
    const float *w = j->w;
    const int64_t cin = j->cin, cout = j->cout, so = j->so, si = j->si, coutp = round_up(cout, LANES);
    const bool rot = j->rot;
    float *u = j->u;
    const bool stream =
        can_stream && ((uintptr_t)u & 63) == 0 && (size_t)(cin * a * a * coutp) * sizeof(float) >= STREAM_BYTES;
    /* The block's 16 filters are so apart: when that is the longer stride
     * (forward: a filter per output channel, each cin * taps floats), run
     * the input channels inside, so each lane reads its filters in order
     * (the other order touched hundreds of lines 18 KB apart, which share
     * a few L1 sets, for every input channel). */
    const bool lanes_outer = so > si;
    const int64_t n_i = j->i1 - j->i0, n_o = coutp / LANES;
    for (int64_t step = 0; step < n_i * n_o; step++) {
        const int64_t i = j->i0 + (lanes_outer ? step % n_i : step / n_o);
        const int64_t o0 = (lanes_outer ? step / n_i : step % n_o) * LANES;
        const int64_t no = cout - o0 < LANES ? cout - o0 : LANES;
        v16f tap[25]; /* [tap] lanes o - o0 */
        if (xpose == 16) {
            v16f lo[16], hi[16]; /* per lane: taps [0, 16), then [16, 25) for 5x5 */
#pragma GCC unroll 16
            for (int l = 0; l < LANES; l++) {
                const float *k = w + (o0 + l) * so + i * si;
                lo[l] = l < no ? filter_taps(k, taps < LANES ? taps : LANES, j->w_end) : (v16f){0};
                if (taps > LANES) hi[l] = l < no ? filter_taps(k + LANES, taps - LANES, j->w_end) : (v16f){0};
            }
            transpose16(lo);
            if (taps > LANES) transpose16(hi);
#pragma GCC unroll 25
            for (int t = 0; t < taps; t++) {
                const int src = rot ? taps - 1 - t : t;
                tap[t] = src < LANES ? lo[src] : hi[src - LANES];
            }
        } else {
            float lanes[25][LANES]; /* [tap][o - o0] */
            for (int64_t l = 0; l < LANES; l++) {
                const float *k = w + (o0 + l) * so + i * si;
                if (l >= no)
                    for (int t = 0; t < taps; t++) lanes[t][l] = 0.0f;
                else if (rot)
                    for (int t = 0; t < taps; t++) lanes[t][l] = k[taps - 1 - t];
                else
                    for (int t = 0; t < taps; t++) lanes[t][l] = k[t];
            }
#pragma GCC unroll 25
            for (int t = 0; t < taps; t++) tap[t] = vload(lanes[t]);
        }
        v16f col[5], out[8], tmp[8][5];
#pragma GCC unroll 8
        for (int s = 0; s < r; s++) {
#pragma GCC unroll 8
            for (int q = 0; q < r; q++) col[q] = tap[q * r + s];
            g_1d(a, r, col, out);
#pragma GCC unroll 8
            for (int q = 0; q < a; q++) tmp[q][s] = out[q];
        }
        const int64_t f0 = o0 / PANEL * PANEL, pw = coutp - f0 < PANEL ? coutp - f0 : PANEL;
        float *dst = u + f0 * cin + i * pw + (o0 - f0);
#pragma GCC unroll 8
        for (int q = 0; q < a; q++) {
            g_1d(a, r, tmp[q], out);
#pragma GCC unroll 8
            for (int s = 0; s < a; s++) {
                if (stream) stream_avx512(dst + (q * a + s) * cin * coutp, &out[s]);
                else vstore(dst + (q * a + s) * cin * coutp, out[s]);
            }
        }
    }
    if (stream) _mm_sfence();
}

/* x (n, C, H, W) -> xp (n, Hp, Wp, Cp): zero borders and padding channels.
 * Each channel plane is read as one run of H*W positions, 16 positions x
 * 16 channels transposed at a time, so narrow images still move whole
 * vectors. */
INLINE void pack_body(const wplan *p, const float *x, int64_t n, float *xp, const int xpose)
{
    const int64_t c = p->c, h = p->h, w = p->w, cp = p->cp, wp = p->wp, hw = h * w;
    for (int64_t img = 0; img < n; img++) {
        const float *xi = x + img * c * hw;
        float *xpi = xp + img * p->hp * wp * cp;
        memset(xpi, 0, (size_t)(p->ph * wp * cp) * sizeof(float));
        memset(xpi + (p->ph + h) * wp * cp, 0, (size_t)((p->hp - p->ph - h) * wp * cp) * sizeof(float));
        for (int64_t iy = 0; iy < h; iy++) {
            float *row = xpi + (iy + p->ph) * wp * cp;
            memset(row, 0, (size_t)(p->pw * cp) * sizeof(float));
            memset(row + (p->pw + w) * cp, 0, (size_t)((wp - p->pw - w) * cp) * sizeof(float));
        }
        float *origin = xpi + (p->ph * wp + p->pw) * cp; /* position (0, 0) */
        for (int64_t c0 = p->c_lo; c0 < p->c_hi; c0 += LANES) {
            const int64_t nc = c - c0 < LANES ? c - c0 : LANES;
            const float *src = xi + c0 * hw;
            int64_t p0 = 0, iy = 0, ix = 0; /* (iy, ix): position p0 */
            if (xpose == 16)
                for (; p0 + 16 <= hw; p0 += 16) {
                    v16f r[16];
#pragma GCC unroll 16
                    for (int l = 0; l < 16; l++) r[l] = l < nc ? vload(src + l * hw + p0) : (v16f){0};
                    transpose16(r);
#pragma GCC unroll 16
                    for (int q = 0; q < 16; q++) {
                        vstore(origin + (iy * wp + ix) * cp + c0, r[q]);
                        if (++ix == w) {
                            ix = 0;
                            iy++;
                        }
                    }
                }
            if (xpose == 8)
                for (; p0 + 8 <= hw; p0 += 8) {
                    float *d[8];
#pragma GCC unroll 8
                    for (int q = 0; q < 8; q++) {
                        d[q] = origin + (iy * wp + ix) * cp + c0;
                        if (++ix == w) {
                            ix = 0;
                            iy++;
                        }
                    }
#pragma GCC unroll 2
                    for (int half = 0; half < 16; half += 8) {
                        v8f r[8];
#pragma GCC unroll 8
                        for (int l = 0; l < 8; l++)
                            r[l] = half + l < nc ? vload8(src + (half + l) * hw + p0) : (v8f){0};
                        transpose8(r);
#pragma GCC unroll 8
                        for (int q = 0; q < 8; q++) vstore8(d[q] + half, r[q]);
                    }
                }
            for (; p0 < hw; p0++) {
                float *d = origin + (iy * wp + ix) * cp + c0;
                for (int64_t l = 0; l < nc; l++) d[l] = src[l * hw + p0];
                for (int64_t l = nc; l < LANES; l++) d[l] = 0.0f;
                if (++ix == w) {
                    ix = 0;
                    iy++;
                }
            }
        }
    }
}

/* V rows [0, nt) = B^T d B of tiles [tile0, tile0 + nt) */
INLINE void input_body(const wplan *p, const float *xp, int64_t tile0, int64_t nt, float *v, const int m, const int r)
{
    const int a = m + r - 1;
    const int64_t cp = p->cp, rs = p->wp * cp, img_size = p->hp * p->wp * cp;
    for (int64_t j = 0; j < nt; j++) {
        int64_t tile = tile0 + j, img = tile / p->tpi, r = tile % p->tpi, ty = r / p->tw, tx = r % p->tw;
        const float *src = xp + img * img_size + (ty * m * p->wp + tx * m) * cp;
        float *dst = v + j * p->vj;
        for (int64_t c0 = p->c_lo; c0 < p->c_hi; c0 += LANES) {
            v16f tmp[8][8], col[8], out[8];
#pragma GCC unroll 8
            for (int s = 0; s < a; s++) {
#pragma GCC unroll 8
                for (int i = 0; i < a; i++) col[i] = vload(src + i * rs + s * cp + c0);
                bt_1d(a, col, out);
#pragma GCC unroll 8
                for (int i = 0; i < a; i++) tmp[i][s] = out[i];
            }
#pragma GCC unroll 8
            for (int i = 0; i < a; i++) {
                bt_1d(a, tmp[i], out);
#pragma GCC unroll 8
                for (int k = 0; k < a; k++) vstore(dst + (i * a + k) * p->vt + c0, out[k]);
            }
        }
    }
}

/* Y tiles [tile0, tile0 + nt) = A^T M A (+ bias) */
INLINE void output_body(const wplan *p, const float *mm, int64_t tile0, int64_t nt, const float *bias, float *y,
                        const int m, const int r)
{
    const int a = m + r - 1;
    const int64_t fp = p->fp, rs = p->owt * fp, img_size = p->oht * p->owt * fp;
    for (int64_t j = 0; j < nt; j++) {
        int64_t tile = tile0 + j, img = tile / p->tpi, r = tile % p->tpi, ty = r / p->tw, tx = r % p->tw;
        float *dst = y + img * img_size + (ty * m * p->owt + tx * m) * fp;
        const float *src = mm + j * p->mj;
        for (int64_t f0 = 0; f0 < fp; f0 += LANES) {
            v16f tmp[6][8], col[8], out[8];
            v16f b = {0};
            if (bias) b = vload(bias + f0);
#pragma GCC unroll 8
            for (int k = 0; k < a; k++) {
#pragma GCC unroll 8
                for (int i = 0; i < a; i++) col[i] = vload(src + (i * a + k) * p->mt + f0);
                at_1d(m, a, col, out);
#pragma GCC unroll 8
                for (int i = 0; i < m; i++) tmp[i][k] = out[i];
            }
#pragma GCC unroll 8
            for (int i = 0; i < m; i++) {
                at_1d(m, a, tmp[i], out);
#pragma GCC unroll 8
                for (int k = 0; k < m; k++) vstore(dst + i * rs + k * fp + f0, out[k] + b);
            }
        }
    }
}

/* Y (n, OHt, OWt, Fp) -> y (n, F, OH, OW), written or accumulated; runs of
 * 16 output positions x 16 channels transposed at a time, as in pack. */
INLINE void unpack_body(const wplan *p, const float *yt, int64_t n, bool accumulate, float *y, const int xpose)
{
    const int64_t f = p->f, fp = p->fp, ow = p->ow, ohw = p->oh * ow, owt = p->owt;
    for (int64_t img = 0; img < n; img++) {
        const float *yti = yt + img * p->oht * owt * fp;
        float *yi = y + img * p->y_img;
        for (int64_t f0 = 0; f0 < fp; f0 += LANES) {
            const int64_t nf = f - f0 < LANES ? f - f0 : LANES;
            float *dst = yi + f0 * ohw;
            int64_t p0 = 0, oy = 0, ox = 0;
            if (xpose == 8)
                for (; p0 + 8 <= ohw; p0 += 8) {
                    const float *s8[8];
#pragma GCC unroll 8
                    for (int q = 0; q < 8; q++) {
                        s8[q] = yti + (oy * owt + ox) * fp + f0;
                        if (++ox == ow) {
                            ox = 0;
                            oy++;
                        }
                    }
#pragma GCC unroll 2
                    for (int half = 0; half < 16; half += 8) {
                        v8f r[8];
#pragma GCC unroll 8
                        for (int q = 0; q < 8; q++) r[q] = vload8(s8[q] + half);
                        transpose8(r);
#pragma GCC unroll 8
                        for (int l = 0; l < 8; l++)
                            if (half + l < nf) {
                                float *d = dst + (half + l) * ohw + p0;
                                vstore8(d, accumulate ? vload8(d) + r[l] : r[l]);
                            }
                    }
                }
            if (xpose == 16)
                for (; p0 + 16 <= ohw; p0 += 16) {
                    v16f r[16];
#pragma GCC unroll 16
                    for (int q = 0; q < 16; q++) {
                        r[q] = vload(yti + (oy * owt + ox) * fp + f0);
                        if (++ox == ow) {
                            ox = 0;
                            oy++;
                        }
                    }
                    transpose16(r);
#pragma GCC unroll 16
                    for (int l = 0; l < 16; l++)
                        if (l < nf) {
                            float *d = dst + l * ohw + p0;
                            if (p->stream_y && !accumulate && ((uintptr_t)d & 63) == 0)
                                stream_avx512(d, &r[l]); /* xpose 16: the AVX-512 variant */
                            else
                                vstore(d, accumulate ? vload(d) + r[l] : r[l]);
                        }
                }
            for (; p0 < ohw; p0++) {
                const float *s = yti + (oy * owt + ox) * fp + f0;
                if (accumulate)
                    for (int64_t l = 0; l < nf; l++) dst[l * ohw + p0] += s[l];
                else
                    for (int64_t l = 0; l < nf; l++) dst[l * ohw + p0] = s[l];
                if (++ox == ow) {
                    ox = 0;
                    oy++;
                }
            }
        }
    }
}

/* Weight gradient: DM (tile-major, like V) = A dY A^T of the m x m output
 * gradient tiles [tile0, tile0 + nt), dyp (n, OHt, OWt, Fp) zero-padded. */
INLINE void dm_body(const wplan *p, const float *dyp, int64_t tile0, int64_t nt, float *dm, const int m, const int r)
{
    const int a = m + r - 1;
    const int64_t fp = p->fp, rs = p->owt * fp, img_size = p->oht * p->owt * fp;
    for (int64_t j = 0; j < nt; j++) {
        int64_t tile = tile0 + j, img = tile / p->tpi, r = tile % p->tpi, ty = r / p->tw, tx = r % p->tw;
        const float *src = dyp + img * img_size + (ty * m * p->owt + tx * m) * fp;
        float *dst = dm + j * p->mj;
        for (int64_t f0 = 0; f0 < fp; f0 += LANES) {
            v16f tmp[8][6], col[6], out[8];
#pragma GCC unroll 8
            for (int q = 0; q < m; q++) {
#pragma GCC unroll 8
                for (int i = 0; i < m; i++) col[i] = vload(src + i * rs + q * fp + f0);
                a_1d(m, a, col, out);
#pragma GCC unroll 8
                for (int i = 0; i < a; i++) tmp[i][q] = out[i];
            }
#pragma GCC unroll 8
            for (int i = 0; i < a; i++) {
                a_1d(m, a, tmp[i], out);
#pragma GCC unroll 8
                for (int k = 0; k < a; k++) vstore(dst + (i * a + k) * p->mt + f0, out[k]);
            }
        }
    }
}

/* Weight gradient: dw[f, c] (+)= G^T dU G for channels c0..c0+nc and the
 * 16 output channels from f0, where dU row c (Fp floats) of position t is
 * at du + (c - c0)*Fp + t*ts. With 16-float vectors (xpose) the tap
 * vectors turn into one vector of taps per output channel by a transpose
 * in registers (as filter_body's loads), stored with one copy each. */
INLINE void wfinal_one(const wplan *p, const float *du, int64_t ts, int64_t c0, int64_t c, int64_t f0,
                       bool accumulate, float *dw, const int xpose, const int m, const int r)
{
    const int a = m + r - 1, taps = r * r;
    const int64_t nf = p->f - f0 < LANES ? p->f - f0 : LANES;
    const float *src = du + (c - c0) * p->fp + f0;
    v16f tmp[5][8], col[8], out[5], tap[32];
#pragma GCC unroll 8
    for (int k = 0; k < a; k++) {
#pragma GCC unroll 8
        for (int i = 0; i < a; i++) col[i] = vload(src + (i * a + k) * ts);
        gt_1d(a, r, col, out);
#pragma GCC unroll 5
        for (int q = 0; q < r; q++) tmp[q][k] = out[q];
    }
#pragma GCC unroll 5
    for (int q = 0; q < r; q++) {
        gt_1d(a, r, tmp[q], out);
#pragma GCC unroll 5
        for (int s = 0; s < r; s++) tap[q * r + s] = out[s];
    }
    if (xpose == 16) {
#pragma GCC unroll 32
        for (int t = taps; t < 32; t++) tap[t] = (v16f){0};
        transpose16(tap);
        if (taps > LANES) transpose16(tap + LANES);
        const int n0 = taps < LANES ? taps : LANES, n1 = taps - n0;
        for (int64_t l = 0; l < nf; l++) {
            float *d = dw + ((f0 + l) * p->c + c) * taps;
            v16f v0 = tap[l], v1 = tap[LANES + l];
            if (accumulate) {
                v16f d0 = {0}, d1 = {0};
                memcpy(&d0, d, (size_t)n0 * sizeof(float));
                if (n1) memcpy(&d1, d + LANES, (size_t)n1 * sizeof(float));
                v0 = d0 + v0;
                v1 = d1 + v1;
            }
            memcpy(d, &v0, (size_t)n0 * sizeof(float));
            if (n1) memcpy(d + LANES, &v1, (size_t)n1 * sizeof(float));
        }
        return;
    }
    float lanes[25][LANES];
#pragma GCC unroll 25
    for (int t = 0; t < taps; t++) vstore(lanes[t], tap[t]);
    for (int64_t l = 0; l < nf; l++) {
        float *d = dw + ((f0 + l) * p->c + c) * taps;
        if (accumulate)
            for (int k = 0; k < taps; k++) d[k] += lanes[k][l];
        else
            for (int k = 0; k < taps; k++) d[k] = lanes[k][l];
    }
}

/* dw[:, c0:c0+nc] (+)= G^T dU G. A few channels (the fused path): f
 * outer, so that each lane writes its run of dw in order; a whole dU: c
 * outer, reading dU in order. */
INLINE void wfinal_body(const wplan *p, const float *du, int64_t ts, int64_t c0, int64_t nc, bool accumulate,
                        float *dw, const int xpose, const int m, const int r)
{
    if (nc <= GEMM_ROWS) {
        for (int64_t f0 = 0; f0 < p->fp; f0 += LANES)
            for (int64_t c = c0; c < c0 + nc; c++)
                wfinal_one(p, du, ts, c0, c, f0, accumulate, dw, xpose, m, r);
    } else {
        /* Blocks of 16 channels, output channels outside: each lane writes
         * 16 filters in a row of dw (f by f, the lanes' filters lie C * taps
         * floats apart, and a line of dw was fetched again for every
         * channel). */
        for (int64_t cb = c0; cb < c0 + nc; cb += LANES) {
            const int64_t ce = cb + LANES < c0 + nc ? cb + LANES : c0 + nc;
            for (int64_t f0 = 0; f0 < p->fp; f0 += LANES)
                for (int64_t c = cb; c < ce; c++) wfinal_one(p, du, ts, c0, c, f0, accumulate, dw, xpose, m, r);
        }
    }
}

/* ------------------------------------------------------------ products */

/* u_t (C, Fp) is stored as column panels: panel j holds output channels
 * [32j, 32j + pw) (pw = 32, or 16 for the last when Fp is an odd multiple
 * of 16) as a (C, pw) row-major block at u_t + 32j*C, so that a product
 * streams each panel once, contiguously. M_t (nt, Fp) = V_t (nt, C) u_t. */

/* Baseline and AVX2: one cblas_sgemm per panel. */
static void gemm_block_blas(const wplan *p, const float *v, const float *u, int64_t nt, float *mm)
{
    for (int t = 0; t < p->t; t++) {
        const float *vt = v + t * p->vt, *ut = u + t * p->c * p->fp;
        float *mt = mm + t * p->mt;
        for (int64_t f0 = 0; f0 < p->fp; f0 += PANEL) {
            int64_t pw = p->fp - f0 < PANEL ? p->fp - f0 : PANEL;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nt, (int)pw, (int)p->c, 1.0f, vt, (int)p->vj,
                        ut + f0 * p->c, (int)pw, 0.0f, mt + f0, (int)p->mj);
        }
    }
}

/* AVX-512: rows [r0, r0 + R) of M_t, one panel of W zmm (W*16 channels):
 * R*W accumulators in registers, V broadcast from its rows, the panel read
 * in order. */
__attribute__((target("avx512f"), always_inline)) static inline void
gemm_tile_avx512(const float *v, int64_t ldv, const float *panel, int64_t c_n, float *m, int64_t ldm, const int rows,
                 const int wide)
{
    __m512 acc[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        acc[r][0] = _mm512_setzero_ps();
        acc[r][1] = _mm512_setzero_ps();
    }
    const int pw = 16 * wide;
#pragma GCC unroll 2
    for (int64_t c = 0; c < c_n; c++) {
        __m512 u0 = _mm512_loadu_ps(panel + c * pw), u1 = wide == 2 ? _mm512_loadu_ps(panel + c * pw + 16) : u0;
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            __m512 b = _mm512_set1_ps(v[r * ldv + c]);
            acc[r][0] = _mm512_fmadd_ps(b, u0, acc[r][0]);
            if (wide == 2) acc[r][1] = _mm512_fmadd_ps(b, u1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        _mm512_storeu_ps(m + r * ldm, acc[r][0]);
        if (wide == 2) _mm512_storeu_ps(m + r * ldm + 16, acc[r][1]);
    }
}


#define GEMM_CASE(R)                                                                                                   \
    case R:                                                                                                            \
        if (wide == 2) gemm_tile_avx512(v, ldv, panel, c_n, m, ldm, R, 2);                                             \
        else gemm_tile_avx512(v, ldv, panel, c_n, m, ldm, R, 1);                                                       \
        break;

__attribute__((target("avx512f"))) static void gemm_rows_avx512(const float *v, int64_t ldv, const float *panel,
                                                                int64_t c_n, float *m, int64_t ldm, int rows,
                                                                int wide)
{
    switch (rows) {
        GEMM_CASE(1)
        GEMM_CASE(2)
        GEMM_CASE(3)
        GEMM_CASE(4)
        GEMM_CASE(5)
        GEMM_CASE(6)
        GEMM_CASE(7)
        GEMM_CASE(8)
        GEMM_CASE(9)
        GEMM_CASE(10)
        GEMM_CASE(11)
        GEMM_CASE(12)
    }
}

__attribute__((target("avx512f"))) static void gemm_block_avx512(const wplan *p, const float *v, const float *u,
                                                                 int64_t nt, float *mm)
{
    for (int t = 0; t < p->t; t++) {
        const float *vt = v + t * p->vt, *ut = u + t * p->c * p->fp;
        float *mt = mm + t * p->mt;
        const int64_t ldv = p->vj, ldm = p->mj;
        for (int64_t f0 = 0; f0 < p->fp; f0 += PANEL) {
            int wide = p->fp - f0 < PANEL ? 1 : 2;
            for (int64_t r0 = 0; r0 < nt; r0 += GEMM_ROWS)
                gemm_rows_avx512(vt + r0 * ldv, ldv, ut + f0 * p->c, p->c, mt + r0 * ldm + f0, ldm,
                                 nt - r0 < GEMM_ROWS ? (int)(nt - r0) : GEMM_ROWS, wide);
        }
    }
}

/* AVX2: rows [r0, r0 + R) (R <= 6) of 16 columns (two ymm) of a panel
 * whose rows are pstride floats apart; 12 accumulators of 16 registers. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
gemm_tile_avx2(const float *v, int64_t ldv, const float *panel, int64_t pstride, int64_t c_n, float *m, int64_t ldm,
               const int rows)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++) {
        acc[r][0] = _mm256_setzero_ps();
        acc[r][1] = _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t c = 0; c < c_n; c++) {
        __m256 u0 = _mm256_loadu_ps(panel + c * pstride), u1 = _mm256_loadu_ps(panel + c * pstride + 8);
#pragma GCC unroll 6
        for (int r = 0; r < rows; r++) {
            __m256 b = _mm256_broadcast_ss(v + r * ldv + c);
            acc[r][0] = _mm256_fmadd_ps(b, u0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, u1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(m + r * ldm, acc[r][0]);
        _mm256_storeu_ps(m + r * ldm + 8, acc[r][1]);
    }
}

#define GEMM_ROWS_AVX2 6

__attribute__((target("avx2,fma"))) static void gemm_rows_avx2(const float *v, int64_t ldv, const float *panel,
                                                              int64_t pstride, int64_t c_n, float *m, int64_t ldm,
                                                              int rows)
{
    switch (rows) {
    case 1: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 1); break;
    case 2: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 2); break;
    case 3: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 3); break;
    case 4: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 4); break;
    case 5: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 5); break;
    default: gemm_tile_avx2(v, ldv, panel, pstride, c_n, m, ldm, 6); break;
    }
}

__attribute__((target("avx2,fma"))) static void gemm_block_avx2(const wplan *p, const float *v, const float *u,
                                                               int64_t nt, float *mm)
{
    for (int t = 0; t < p->t; t++) {
        const float *vt = v + t * p->vt, *ut = u + t * p->c * p->fp;
        float *mt = mm + t * p->mt;
        const int64_t ldv = p->vj, ldm = p->mj;
        for (int64_t f0 = 0; f0 < p->fp; f0 += PANEL) {
            int64_t pw = p->fp - f0 < PANEL ? p->fp - f0 : PANEL;
            for (int64_t r0 = 0; r0 < nt; r0 += GEMM_ROWS_AVX2) {
                int rows = nt - r0 < GEMM_ROWS_AVX2 ? (int)(nt - r0) : GEMM_ROWS_AVX2;
                for (int64_t h = 0; h < pw; h += 16)
                    gemm_rows_avx2(vt + r0 * ldv, ldv, ut + f0 * p->c + h, pw, p->c, mt + r0 * ldm + f0 + h, ldm,
                                   rows);
            }
        }
    }
}

/* Weight gradient products: rows c0..c0+nc of every dU_t (C, Fp) (+)=
 * V_t^T DM_t over the nt tiles of a group (V and DM rows j*vj + t*vt,
 * j*mj + t*mt); row c of position t goes to du + t*ts + (c - c0)*Fp. */
static void wgemm_blas(const wplan *p, const float *v, const float *dm, int64_t nt, int64_t c0, int64_t nc,
                       bool add, float *du, int64_t ts)
{
    for (int t = 0; t < p->t; t++)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)p->fp, (int)nt, 1.0f, v + t * p->vt + c0,
                    (int)p->vj, dm + t * p->mt, (int)p->mj, add ? 1.0f : 0.0f, du + t * ts, (int)p->fp);
}

/* AVX-512: rows c0..c0+R of dU_t, 32 (or 16) columns; the R values of V
 * broadcast per tile are adjacent. */
__attribute__((target("avx512f"), always_inline)) static inline void
wgemm_tile_avx512(const float *v, int64_t vs, const float *dm, int64_t ds, int64_t k_n, float *du, int64_t ldu,
                  bool add, const int rows, const int wide)
{
    __m512 acc[12][2];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        acc[r][0] = add ? _mm512_loadu_ps(du + r * ldu) : _mm512_setzero_ps();
        acc[r][1] = wide == 2 && add ? _mm512_loadu_ps(du + r * ldu + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < k_n; k++) {
        __m512 u0 = _mm512_loadu_ps(dm + k * ds), u1 = wide == 2 ? _mm512_loadu_ps(dm + k * ds + 16) : u0;
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            __m512 b = _mm512_set1_ps(v[k * vs + r]);
            acc[r][0] = _mm512_fmadd_ps(b, u0, acc[r][0]);
            if (wide == 2) acc[r][1] = _mm512_fmadd_ps(b, u1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        _mm512_storeu_ps(du + r * ldu, acc[r][0]);
        if (wide == 2) _mm512_storeu_ps(du + r * ldu + 16, acc[r][1]);
    }
}

#define WGEMM_CASE(R)                                                                                                  \
    case R:                                                                                                            \
        if (wide == 2) wgemm_tile_avx512(v, vs, dm, ds, k_n, du, ldu, add, R, 2);                                      \
        else wgemm_tile_avx512(v, vs, dm, ds, k_n, du, ldu, add, R, 1);                                                \
        break;

__attribute__((target("avx512f"))) static void wgemm_rows_avx512(const float *v, int64_t vs, const float *dm,
                                                                 int64_t ds, int64_t k_n, float *du, int64_t ldu,
                                                                 bool add, int rows, int wide)
{
    switch (rows) {
        WGEMM_CASE(1)
        WGEMM_CASE(2)
        WGEMM_CASE(3)
        WGEMM_CASE(4)
        WGEMM_CASE(5)
        WGEMM_CASE(6)
        WGEMM_CASE(7)
        WGEMM_CASE(8)
        WGEMM_CASE(9)
        WGEMM_CASE(10)
        WGEMM_CASE(11)
        WGEMM_CASE(12)
    }
}

__attribute__((target("avx512f"))) static void wgemm_avx512(const wplan *p, const float *v, const float *dm,
                                                            int64_t nt, int64_t c0, int64_t nc, bool add, float *du,
                                                            int64_t ts)
{
    for (int t = 0; t < p->t; t++)
        for (int64_t r0 = 0; r0 < nc; r0 += GEMM_ROWS)
            for (int64_t f0 = 0; f0 < p->fp; f0 += PANEL)
                wgemm_rows_avx512(v + t * p->vt + c0 + r0, p->vj, dm + t * p->mt + f0, p->mj, nt,
                                  du + t * ts + r0 * p->fp + f0, p->fp, add,
                                  nc - r0 < GEMM_ROWS ? (int)(nc - r0) : GEMM_ROWS, p->fp - f0 < PANEL ? 1 : 2);
}

/* AVX2: rows c0..c0+R (R <= 6) of dU_t, 16 columns. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wgemm_tile_avx2(const float *v, int64_t vs, const float *dm, int64_t ds, int64_t k_n, float *du, int64_t ldu,
                bool add, const int rows)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++) {
        acc[r][0] = add ? _mm256_loadu_ps(du + r * ldu) : _mm256_setzero_ps();
        acc[r][1] = add ? _mm256_loadu_ps(du + r * ldu + 8) : _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < k_n; k++) {
        __m256 u0 = _mm256_loadu_ps(dm + k * ds), u1 = _mm256_loadu_ps(dm + k * ds + 8);
#pragma GCC unroll 6
        for (int r = 0; r < rows; r++) {
            __m256 b = _mm256_broadcast_ss(v + k * vs + r);
            acc[r][0] = _mm256_fmadd_ps(b, u0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, u1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(du + r * ldu, acc[r][0]);
        _mm256_storeu_ps(du + r * ldu + 8, acc[r][1]);
    }
}

__attribute__((target("avx2,fma"))) static void wgemm_avx2(const wplan *p, const float *v, const float *dm,
                                                          int64_t nt, int64_t c0, int64_t nc, bool add, float *du,
                                                          int64_t ts)
{
    for (int t = 0; t < p->t; t++)
        for (int64_t f0 = 0; f0 < p->fp; f0 += 16)
            for (int64_t r0 = 0; r0 < nc; r0 += GEMM_ROWS_AVX2) {
                const float *vv = v + t * p->vt + c0 + r0, *dd = dm + t * p->mt + f0;
                float *uu = du + t * ts + r0 * p->fp + f0;
                switch (nc - r0 < GEMM_ROWS_AVX2 ? (int)(nc - r0) : GEMM_ROWS_AVX2) {
                case 1: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 1); break;
                case 2: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 2); break;
                case 3: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 3); break;
                case 4: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 4); break;
                case 5: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 5); break;
                default: wgemm_tile_avx2(vv, p->vj, dd, p->mj, nt, uu, p->fp, add, 6); break;
                }
            }
}

/* ------------------------------------------------ per-target variants */

typedef struct wkernels {
    void (*filter)(int m, int r, const filter_job *j);
    void (*pack)(const wplan *p, const float *x, int64_t n, float *xp);
    void (*input)(const wplan *p, const float *xp, int64_t tile0, int64_t nt, float *v);
    void (*output)(const wplan *p, const float *mm, int64_t tile0, int64_t nt, const float *bias, float *y);
    void (*unpack)(const wplan *p, const float *yt, int64_t n, bool accumulate, float *y);
    void (*gemm)(const wplan *p, const float *v, const float *u, int64_t nt, float *mm);
    void (*dm)(const wplan *p, const float *dyp, int64_t tile0, int64_t nt, float *dm);
    void (*wgemm)(const wplan *p, const float *v, const float *dm, int64_t nt, int64_t c0, int64_t nc, bool add,
                  float *du, int64_t ts);
    void (*wfinal)(const wplan *p, const float *du, int64_t ts, int64_t c0, int64_t nc, bool accumulate, float *dw);
} wkernels;

/* BODY(args..., m, r) with m and r as constants, for each supported pair:
 * every transform is then straight-line code. */
#define TILE_DISPATCH(M, R, BODY, ...)                                                                                 \
    do {                                                                                                               \
        if ((R) == 5) {                                                                                                \
            if ((M) == 2) BODY(__VA_ARGS__, 2, 5);                                                                     \
            else BODY(__VA_ARGS__, 4, 5);                                                                              \
        } else if ((M) == 2) BODY(__VA_ARGS__, 2, 3);                                                                  \
        else if ((M) == 4) BODY(__VA_ARGS__, 4, 3);                                                                    \
        else BODY(__VA_ARGS__, 6, 3);                                                                                  \
    } while (0)

#define DEFINE_KERNELS(NAME, TARGET, XPOSE, STREAM, GEMM, WGEMM)                                                       \
    TARGET static void filter_##NAME(int m, int r, const filter_job *j)                                                \
    {                                                                                                                  \
        TILE_DISPATCH(m, r, filter_body, j, STREAM, XPOSE);                                                                   \
    }                                                                                                                  \
    TARGET static void pack_##NAME(const wplan *p, const float *x, int64_t n, float *xp)                               \
    {                                                                                                                  \
        pack_body(p, x, n, xp, XPOSE);                                                                                 \
    }                                                                                                                  \
    TARGET static void input_##NAME(const wplan *p, const float *xp, int64_t tile0, int64_t nt, float *v)              \
    {                                                                                                                  \
        TILE_DISPATCH(p->m, p->r, input_body, p, xp, tile0, nt, v);                                                    \
    }                                                                                                                  \
    TARGET static void output_##NAME(const wplan *p, const float *mm, int64_t tile0, int64_t nt,                       \
                                     const float *bias, float *y)                                                      \
    {                                                                                                                  \
        TILE_DISPATCH(p->m, p->r, output_body, p, mm, tile0, nt, bias, y);                                             \
    }                                                                                                                  \
    TARGET static void unpack_##NAME(const wplan *p, const float *yt, int64_t n, bool accumulate, float *y)            \
    {                                                                                                                  \
        unpack_body(p, yt, n, accumulate, y, XPOSE);                                                                   \
    }                                                                                                                  \
    TARGET static void dm_##NAME(const wplan *p, const float *dyp, int64_t tile0, int64_t nt, float *dm)               \
    {                                                                                                                  \
        TILE_DISPATCH(p->m, p->r, dm_body, p, dyp, tile0, nt, dm);                                                     \
    }                                                                                                                  \
    TARGET static void wfinal_##NAME(const wplan *p, const float *du, int64_t ts, int64_t c0, int64_t nc,              \
                                     bool accumulate, float *dw)                                                       \
    {                                                                                                                  \
        TILE_DISPATCH(p->m, p->r, wfinal_body, p, du, ts, c0, nc, accumulate, dw, XPOSE);                                     \
    }                                                                                                                  \
    static const wkernels kernels_##NAME = {filter_##NAME, pack_##NAME, input_##NAME, output_##NAME,                   \
                                            unpack_##NAME, GEMM,        dm_##NAME,    WGEMM,                           \
                                            wfinal_##NAME};

DEFINE_KERNELS(sse, , 0, false, gemm_block_blas, wgemm_blas)
DEFINE_KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, false, gemm_block_avx2, wgemm_avx2)
DEFINE_KERNELS(avx512, __attribute__((target("avx512f"))), 16, true, gemm_block_avx512, wgemm_avx512)

/* The widest variant this CPU runs, capped by MX_WINOGRAD_ISA. */
static const wkernels *pick_kernels(void)
{
    int level = 0; /* (libgcc fills in the CPU model before main: no __builtin_cpu_init) */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) level = 1;
    if (level == 1 && __builtin_cpu_supports("avx512f")) level = 2;
    const char *e = getenv("MX_WINOGRAD_ISA");
    if (e) {
        int cap = strcmp(e, "sse") == 0 ? 0 : strcmp(e, "avx2") == 0 ? 1 : 2;
        if (level > cap) level = cap;
    }
    return level == 2 ? &kernels_avx512 : level == 1 ? &kernels_avx2 : &kernels_sse;
}

static void transform_filter(int m, int r, const filter_job *j) { pick_kernels()->filter(m, r, j); }

/* ------------------------------------------------------------- driver */

static float *aligned_floats(void *buf) { return (float *)(((uintptr_t)buf + 63) & ~(uintptr_t)63); }

/* The bias padded with zeros to fp channels, as the output transforms read it. */
static void pad_bias(const wplan *p, const float *bias, float *bp)
{
    memcpy(bp, bias, (size_t)p->f * sizeof(float));
    for (int64_t f = p->f; f < p->fp; f++) bp[f] = 0.0f;
}

mx_status mx_winograd_forward_slice(const mx_conv_geom *g, int64_t o0, int64_t o1, const float *u, const float *x,
                                    int64_t images, const float *bias, bool accumulate, float *y, void *scratch)
{
    if (!mx_winograd_supported(g)) return MX_ERROR(MX_ERR_INVALID, "winograd: unsupported convolution geometry");
    if (o0 < 0 || o1 <= o0 || o1 > g->out_c)
        return MX_ERROR(MX_ERR_INVALID, "winograd: output channels [%lld, %lld) not in [0, %lld)", (long long)o0,
                        (long long)o1, (long long)g->out_c);
    if (images <= 0) return MX_OK;
    mx_conv_geom gs;
    mx_winograd_slice_geom(g, o0, o1, &gs);
    wplan p;
    plan_init(&p, &gs, images);
    p.y_img = g->out_c * p.oh * p.ow;
    p.stream_y = !accumulate && mx_conv_output_streams(g, images);
    y += o0 * p.oh * p.ow;
    void *owned = NULL;
    if (!scratch) {
        owned = mx_malloc(mx_winograd_scratch_bytes(&gs, images));
        if (!owned) return MX_ERR_NOMEM;
        scratch = owned;
    }
    float *base = aligned_floats(scratch);
    float *xp = base, *v = base + p.off_v, *mm = base + p.off_m, *yt = base + p.off_y, *bp = NULL;
    if (bias) {
        bp = base + p.off_b;
        pad_bias(&p, bias + o0, bp);
    }
    const wkernels *k = pick_kernels();
    const int64_t in_img = p.c * p.h * p.w;
    for (int64_t i0 = 0; i0 < images; i0 += p.gi) {
        int64_t ni = images - i0 < p.gi ? images - i0 : p.gi;
        k->pack(&p, x + i0 * in_img, ni, xp);
        int64_t tiles = ni * p.tpi, blocks = ceil_div(tiles, BLOCK_TILES), nb = ceil_div(tiles, blocks);
        for (int64_t t0 = 0; t0 < tiles; t0 += nb) {
            int64_t nt = tiles - t0 < nb ? tiles - t0 : nb;
            k->input(&p, xp, t0, nt, v);
            k->gemm(&p, v, u, nt, mm);
            k->output(&p, mm, t0, nt, bp, yt);
        }
        k->unpack(&p, yt, ni, accumulate, y + i0 * p.y_img);
    }
    if (p.stream_y) mx_simd_store_fence(); /* the streamed lines reach memory before y is handed on */
    free(owned);
    return MX_OK;
}

mx_status mx_winograd_forward(const mx_conv_geom *g, const float *u, const float *x, int64_t images, const float *bias,
                              bool accumulate, float *y, void *scratch)
{
    return mx_winograd_forward_slice(g, 0, g->out_c, u, x, images, bias, accumulate, y, scratch);
}

/* A group of images shared by threads: xp, the output tiles and the bias
 * in one buffer, V and M per thread; the blocks are mx_winograd_forward's,
 * so each tile is computed as there. */
typedef struct shared_plan {
    wplan p;
    int64_t tiles, blocks, nb;
    int64_t off_y, off_b, shared, block; /* floats */
} shared_plan;

/* False when g is not supported or the images are more than one group. */
static bool shared_init(shared_plan *s, const mx_conv_geom *g, int64_t images)
{
    if (!mx_winograd_supported(g)) return false;
    plan_init(&s->p, g, images);
    if (images < 1 || images > s->p.gi) return false;
    s->tiles = images * s->p.tpi;
    s->blocks = ceil_div(s->tiles, BLOCK_TILES);
    s->nb = ceil_div(s->tiles, s->blocks);
    s->off_y = s->p.off_v;                                     /* after xp */
    s->off_b = s->off_y + (s->p.off_b - s->p.off_y);           /* after the tiles */
    s->shared = s->off_b + (s->p.total - s->p.off_b);
    s->block = s->p.off_y - s->p.off_v;                         /* V, then M */
    return true;
}

int64_t mx_winograd_shared_blocks(const mx_conv_geom *g, int64_t images)
{
    shared_plan s;
    return shared_init(&s, g, images) ? s.blocks : 0;
}

size_t mx_winograd_shared_bytes(const mx_conv_geom *g, int64_t images)
{
    shared_plan s;
    return shared_init(&s, g, images) ? (size_t)s.shared * sizeof(float) + 64 : 0;
}

size_t mx_winograd_block_bytes(const mx_conv_geom *g, int64_t images)
{
    shared_plan s;
    return shared_init(&s, g, images) ? (size_t)s.block * sizeof(float) + 64 : 0;
}

void mx_winograd_shared_begin(const mx_conv_geom *g, const float *x, int64_t images, const float *bias, void *shared)
{
    shared_plan s;
    if (!shared_init(&s, g, images)) return;
    float *base = aligned_floats(shared);
    if (bias) pad_bias(&s.p, bias, base + s.off_b);
    pick_kernels()->pack(&s.p, x, images, base);
}

void mx_winograd_shared_blocks_run(const mx_conv_geom *g, const float *u, int64_t images, const float *bias,
                                   int64_t b0, int64_t b1, void *shared, void *scratch)
{
    shared_plan s;
    if (!shared_init(&s, g, images)) return;
    const wkernels *k = pick_kernels();
    float *base = aligned_floats(shared), *v = aligned_floats(scratch), *mm = v + (s.p.off_m - s.p.off_v);
    const float *bp = bias ? base + s.off_b : NULL;
    for (int64_t b = b0; b < b1 && b < s.blocks; b++) {
        int64_t t0 = b * s.nb, nt = s.tiles - t0 < s.nb ? s.tiles - t0 : s.nb;
        k->input(&s.p, base, t0, nt, v);
        k->gemm(&s.p, v, u, nt, mm);
        k->output(&s.p, mm, t0, nt, bp, base + s.off_y);
    }
}

void mx_winograd_shared_end(const mx_conv_geom *g, int64_t images, bool accumulate, float *y, void *shared)
{
    shared_plan s;
    if (!shared_init(&s, g, images)) return;
    float *base = aligned_floats(shared);
    pick_kernels()->unpack(&s.p, base + s.off_y, images, accumulate, y);
}

/* ------------------------------------------------------ weight gradient */

/* Tiles per group: each product runs over this many. 64 runs ResNet's 3x3
 * weight gradients at 8 images a thread as fast as 144 did (256 channels
 * at 14x14: 4.0-4.1 ms on one thread either way) with about half the V, DM
 * and packed images: ResNet-18's peak RSS 606 -> 594 MB. */
#define WGRAD_TILES 64
#define WGRAD_FUSED_TILES 32 /* groups of at most this many tiles never hold a whole dU */
/* A larger dU (T, C, Fp) is made in two blocks of input channels, each
 * packing and transforming its own channels of x, and all of dy again
 * (batch 16, 2 threads: ResNet-50's 256 -> 256 layers on 14x14, 9.4 MB of
 * dU, every thread holds 4.7 MB less, their weight gradient 5.5 -> 4.9 ms;
 * VGG's 512 -> 512 on 28x28 51 -> 57 ms; in 7 blocks of 6 MiB, each packing
 * and transforming all of x, they took 84 ms, hence two at most). */
#define WGRAD_DU_BYTES ((int64_t)6 << 20)
#define WGRAD_DU_BLOCKS 2
/* V and DM hold at most this many tiles: a 224x224 image has 3136, whose
 * V and DM at 64 channels took 58 MiB of every thread's scratch (VGG-16's
 * first layers); longer runs gain nothing (tests/bench_winograd.c). */
#define WGRAD_MAX_TILES (4 * WGRAD_TILES)

/* The weight-gradient plan: p as for forward, tile-major V and DM over a
 * whole group of images; pd describes dy (F, OH, OW) packed unpadded into
 * (OHt, OWt, Fp) for pack_body. Scratch: xp, dyp, V, DM, dU (T, C, Fp). */
typedef struct wgplan {
    wplan p, pd;
    int64_t off_dyp, off_v, off_dm, off_du, total;
    /* Few tiles per group: dU is never whole. 12 input channels at a time,
     * their dU rows for every position go to a (T, 12, Fp) buffer and
     * straight on through G^T . G into dw, instead of a whole dU (T, C, Fp)
     * being written out and read back (on large layers that round trip
     * through memory costs more than the products, and it saves memory). */
    bool fused;
    /* Not fused: dU is made for this many input channels at a time (all
     * of them, or fewer when a whole dU would pass WGRAD_DU_BYTES), each
     * block over every group of images, then turned into its rows of dw. */
    int64_t cb;
} wgplan;

static void wgplan_init(wgplan *q, const mx_conv_geom *g, int64_t images)
{
    wplan *p = &q->p;
    plan_init(p, g, 1);
    if (images < 1) images = 1;
    p->gi = ceil_div(WGRAD_TILES, p->tpi);
    if (p->gi > images) p->gi = images;
    p->nbmax = p->gi * p->tpi < WGRAD_MAX_TILES ? p->gi * p->tpi : WGRAD_MAX_TILES;
    /* layouts as in plan_init, for this nbmax */
    if (p->cp <= TILE_MAJOR_MAX) {
        p->vj = p->t * p->cp;
        p->vt = p->cp;
    } else {
        p->vj = p->cp;
        p->vt = p->nbmax * p->cp;
    }
    if (p->fp <= TILE_MAJOR_MAX) {
        p->mj = p->t * p->fp;
        p->mt = p->fp;
    } else {
        p->mj = p->fp;
        p->mt = p->nbmax * p->fp;
    }
    q->pd = *p;
    q->pd.c = p->f;
    q->pd.cp = p->fp;
    q->pd.c_lo = 0;
    q->pd.c_hi = p->fp;
    q->pd.h = p->oh;
    q->pd.w = p->ow;
    q->pd.ph = q->pd.pw = 0;
    q->pd.hp = p->oht;
    q->pd.wp = p->owt;
    q->off_dyp = round_up(p->gi * p->hp * p->wp * p->cp, ALIGN_FLOATS);
    q->off_v = q->off_dyp + round_up(p->gi * p->oht * p->owt * p->fp, ALIGN_FLOATS);
    q->off_dm = q->off_v + round_up(p->nbmax * p->t * p->cp, ALIGN_FLOATS);
    q->off_du = q->off_dm + round_up(p->nbmax * p->t * p->fp, ALIGN_FLOATS);
    q->fused = p->nbmax <= WGRAD_FUSED_TILES;
    int64_t du_blocks = ceil_div(p->t * p->c * p->fp * (int64_t)sizeof(float), WGRAD_DU_BYTES);
    if (du_blocks > WGRAD_DU_BLOCKS) du_blocks = WGRAD_DU_BLOCKS;
    q->cb = round_up(ceil_div(p->c, du_blocks), LANES);
    q->total = q->off_du + round_up(p->t * (q->fused ? GEMM_ROWS : q->cb) * p->fp, ALIGN_FLOATS);
}

size_t mx_winograd_wgrad_scratch_bytes(const mx_conv_geom *g, int64_t images)
{
    wgplan q;
    wgplan_init(&q, g, images);
    return (size_t)q.total * sizeof(float) + 64;
}

/* dw over images [0, images) as mx_winograd_backward_weight, taking its
 * turn (when given) for every block of dw it writes: the first group
 * waits before writing a block, the last reports it written. */
static mx_status wgrad(const mx_conv_geom *g, const float *x, const float *dy, int64_t images, bool accumulate,
                       float *dw, void *scratch, const mx_dw_turn *turn)
{
    if (!mx_winograd_supported(g)) return MX_ERROR(MX_ERR_INVALID, "winograd: unsupported convolution geometry");
    if (images <= 0) {
        if (turn && !turn->wait(turn->ctx, g->in_c)) return MX_ERR_RUNTIME;
        if (!accumulate) memset(dw, 0, (size_t)(g->out_c * g->in_c * g->k_h * g->k_w) * sizeof(float));
        if (turn) turn->done(turn->ctx, g->in_c);
        return MX_OK;
    }
    wgplan q;
    wgplan_init(&q, g, images);
    const wplan *p = &q.p;
    void *owned = NULL;
    if (!scratch) {
        owned = mx_malloc(mx_winograd_wgrad_scratch_bytes(g, images));
        if (!owned) return MX_ERR_NOMEM;
        scratch = owned;
    }
    float *base = aligned_floats(scratch);
    float *xp = base, *dyp = base + q.off_dyp, *v = base + q.off_v, *dm = base + q.off_dm, *du = base + q.off_du;
    const wkernels *k = pick_kernels();
    const int64_t in_img = p->c * p->h * p->w, out_img = p->f * p->oh * p->ow;
    mx_status s = MX_OK;
    if (!q.fused) {
        for (int64_t c0 = 0; c0 < p->c; c0 += q.cb) {
            const int64_t nc = p->c - c0 < q.cb ? p->c - c0 : q.cb;
            /* x: only this block's channels, packed and transformed */
            wplan pc = *p;
            pc.c_lo = c0;
            pc.c_hi = c0 + q.cb < p->cp ? c0 + q.cb : p->cp;
            for (int64_t i0 = 0; i0 < images; i0 += p->gi) {
                int64_t ni = images - i0 < p->gi ? images - i0 : p->gi, tiles = ni * p->tpi;
                k->pack(&pc, x + i0 * in_img, ni, xp);
                k->pack(&q.pd, dy + i0 * out_img, ni, dyp);
                /* The AVX2 and AVX-512 kernels add tile after tile onto dU:
                 * runs of nbmax tiles give the bits of one run over the group. */
                for (int64_t t0 = 0; t0 < tiles; t0 += p->nbmax) {
                    int64_t nt = tiles - t0 < p->nbmax ? tiles - t0 : p->nbmax;
                    k->input(&pc, xp, t0, nt, v);
                    k->dm(p, dyp, t0, nt, dm);
                    k->wgemm(p, v, dm, nt, c0, nc, i0 > 0 || t0 > 0, du, nc * p->fp);
                }
            }
            if (turn && !turn->wait(turn->ctx, c0 + nc)) {
                s = MX_ERR_RUNTIME;
                break;
            }
            k->wfinal(p, du, nc * p->fp, c0, nc, accumulate, dw);
            if (turn) turn->done(turn->ctx, c0 + nc);
        }
    }
    for (int64_t i0 = 0; q.fused && i0 < images && s == MX_OK; i0 += p->gi) {
        int64_t ni = images - i0 < p->gi ? images - i0 : p->gi, tiles = ni * p->tpi;
        k->pack(p, x + i0 * in_img, ni, xp);
        k->pack(&q.pd, dy + i0 * out_img, ni, dyp);
        /* fused: nbmax <= WGRAD_FUSED_TILES, the group's tiles are one run */
        k->input(p, xp, 0, tiles, v);
        k->dm(p, dyp, 0, tiles, dm);
        for (int64_t c0 = 0; c0 < p->c; c0 += GEMM_ROWS) {
            int64_t nc = p->c - c0 < GEMM_ROWS ? p->c - c0 : GEMM_ROWS;
            k->wgemm(p, v, dm, tiles, c0, nc, false, du, GEMM_ROWS * p->fp);
            if (turn && i0 == 0 && !turn->wait(turn->ctx, c0 + nc)) {
                s = MX_ERR_RUNTIME;
                break;
            }
            k->wfinal(p, du, GEMM_ROWS * p->fp, c0, nc, accumulate || i0 > 0, dw);
            if (turn && i0 + p->gi >= images) turn->done(turn->ctx, c0 + nc);
        }
    }
    free(owned);
    return s;
}

mx_status mx_winograd_backward_weight(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                      bool accumulate, float *dw, void *scratch)
{
    return wgrad(g, x, dy, images, accumulate, dw, scratch, NULL);
}

mx_status mx_winograd_backward_weight_in_turn(const mx_conv_geom *g, const float *x, const float *dy,
                                              int64_t images, bool accumulate, float *dw, void *scratch,
                                              const mx_dw_turn *turn)
{
    return wgrad(g, x, dy, images, accumulate, dw, scratch, turn);
}
