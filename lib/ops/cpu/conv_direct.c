/*
 * conv_direct.c - direct convolution for strided layers (see conv_direct.h).
 *
 * The common piece is a "core": an implicit GEMM
 *   out[r, p] = sum over taps k of wp[r, k] * view_k[p]
 * over an output grid (oh, ow) of pixels p, where view_k is a contiguous
 * run of a plane copied out of a source image (pack_band; see struct core
 * for the plane layout). Forward is one core per call (source x, rows F);
 * so is backward-data at stride 1 (the forward of the transposed
 * convolution); at other strides one per dx phase (source dy, rows C: the
 * planes of a column phase are shared by its row phases, and 1x1-like
 * phases read dy in place), staged and interleaved into dx (merge_rows);
 * the weight gradient packs the forward planes and runs its own
 * outer-product kernel against dy transposed to pixel-major.
 *
 * Work goes in chunks of bands: a band is one image's grid pixels
 * [p0, p1); a chunk packs the planes of up to nb bands (several small
 * images, or rows of a large one) into about half of L2 (CHUNK_FLOATS:
 * measured against a quarter and all of it), then runs the micro-kernels
 * over groups of V whole vectors of 16 pixels (any bands: each vector
 * carries its own pointers) times panels of R rows; a band's partial last
 * vector runs alone with masked loads. Planes are packed row-innermost
 * with per-block masks and permutes (sample_rows), since rows are often a
 * vector or less.
 *
 * Measured on the target layers (one Zen 4 core, tests/bench_conv_direct.c):
 * 90-105 GFLOP/s with warm caches, 75-95 in the benchmark's interleaved
 * runs; OpenBLAS SGEMM reaches about 97 on 1024^3.
 */
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/simd.h"
#include "blas/blas.h"
#include "ops/cpu/transpose16.h"
#include "ops/cpu/vector_rate.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Contract a*b+c into FMAs across statements (GCC's pragma; clang spells it
 * its own way). */
#if defined(__clang__)
#pragma clang fp contract(fast)
#else
#pragma GCC optimize("fp-contract=fast")
#endif

#define TARGET __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((target("avx512f"), always_inline)) /* only inside TARGET functions */

#define LANES 16
#define MAX_R 8            /* rows per forward register block */
#define MAX_V 6            /* vectors per forward register block */
#define WG_MAX_RK 8        /* taps per weight-gradient register block */
#define WG_MAX_VF 4        /* 16-channel vectors per weight-gradient block */
#define CHUNK_FLOATS (128 << 10)   /* planes (+ staging) of one chunk: half of L2 */
#define WG_CHUNK_FLOATS (128 << 10) /* planes + transposed dy of one weight-gradient chunk */
#define MAX_STRIDE 64      /* phases per axis (backward-data keeps per-phase arrays on the stack) */
/* With a vector lead, a ragged output still loses from this product
 * (F*C*KH*KW) up: ResNet-50 res5a 1x1/2. */
#define LEAD_RAGGED_PRODUCT ((int64_t)1 << 21)
#define MAX_TAPS 64        /* kernel width at most: wider kernels keep im2col (never measured) */


static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ---------------------------------------------------------------- cores */

typedef struct core {
    int64_t cin, hin, win;  /* source image (cin, hin, win) */
    int64_t rows;           /* GEMM rows: output channels */
    int64_t oh, ow;         /* output grid */
    /* Plane (c, a, e), band-local row i, column j holds source pixel
     * (oy + a + sh*(r0 + i), ox + e + sw*j) of channel c, r0 the band's
     * first grid row (zero outside the image). */
    int64_t sh, sw, oy, ox;
    int64_t na, ne, ext;    /* row phases, column taps; plane rows past a band's last grid row */
    int64_t k;              /* taps (GEMM depth) */
    int64_t ps;             /* floats per plane */
    int64_t band;           /* floats of one band's planes */
    int r, v;               /* register block: r rows x v vectors of 16 pixels */
    bool inplace;           /* the planes are the source itself (ps its channel stride): nothing to pack */
} core;

typedef struct dband {
    const float *src;       /* the source image */
    int64_t p0, p1;         /* grid pixels [p0, p1) */
    float *dst;             /* output of row 0, pixel p0 (row r, pixel p at dst + r*ldc + p - p0) */
} dband;

typedef struct dvec {
    const float *src;       /* plane element of pixel p (tap offsets added by the kernel) */
    float *dst;             /* output of row 0, pixel p */
    int64_t n;              /* lanes in use (16 but at a band's end) */
    int64_t skip;           /* leading lanes computed but not stored (a band's last vector, moved back) */
} dvec;

/* Register block for `rows` output rows: R x V accumulators (<= 24 of the
 * 32 zmm), R*V FMAs per V loads and R broadcasts. 8x3 and 6x4 do equally
 * many FMAs per load; prefer the one that divides rows. */
static const int vmax_for_r[MAX_R + 1] = {0, 6, 6, 6, 6, 4, 4, 3, 3};

static void pick_block(int64_t rows, int *r, int *v)
{
    if (rows <= MAX_R) *r = (int)rows;
    else if (rows % 8 == 0) *r = 8;
    else if (rows % 6 == 0) *r = 6;
    else *r = rows % 8 >= rows % 6 ? 8 : 6;
    *v = vmax_for_r[*r];
}

INLINE __mmask16 lane_mask(int64_t n)
{
    return n >= LANES ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

INLINE void zero_floats(float *d, int64_t n)
{
    for (int64_t j = 0; j < n; j += LANES) _mm512_mask_storeu_ps(d + j, lane_mask(n - j), _mm512_setzero_ps());
}

/* Output columns j in [lo, hi) of n whose source column x0 + s*j lies in [0, w). */
static void valid_cols(int64_t x0, int64_t s, int64_t w, int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t a = x0 < 0 ? ceil_div(-x0, s) : 0;
    int64_t b = x0 > w - 1 ? 0 : (w - 1 - x0) / s + 1;
    a = min64(a, n);
    b = min64(b, n);
    *lo = a;
    *hi = max64(a, b);
}

/* Plane rows d + ch*dcs + i*dstride, i < nrows, ch < nch, of n floats:
 * d[j] = row[x0 + s*j] for j in [lo, hi) (the columns inside the source
 * row of w), zero for the rest; the source row is src + ch*scs + i*sstride.
 * Vector block by block, channels and rows innermost: the masks and
 * permutes of a block are the same for every row of every channel (set up
 * once: narrow outputs have rows of a vector or less, where the set-up
 * would cost more than the row), so a row costs one or two masked loads, a
 * permute and a masked store. Loads never leave the source row. */
INLINE void sample_rows(const float *src, int64_t scs, int64_t sstride, int64_t nch, int64_t nrows, int64_t w,
                        int64_t x0, int64_t s, int64_t n, int64_t lo, int64_t hi, float *d, int64_t dcs,
                        int64_t dstride)
{
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t j0 = 0; j0 < n; j0 += LANES) {
        const __mmask16 keep = (__mmask16)(lane_mask(hi - j0) & ~lane_mask(lo - j0)), store = lane_mask(n - j0);
        if (!keep) {
            for (int64_t ch = 0; ch < nch; ch++) {
                float *dd = d + ch * dcs + j0;
                for (int64_t i = 0; i < nrows; i++, dd += dstride)
                    _mm512_mask_storeu_ps(dd, store, _mm512_setzero_ps());
            }
            continue;
        }
        /* lane l takes column xs + s*l; loads start at base >= 0 (a kept lane lies inside the row) */
        const int64_t xs = x0 + s * j0, base = xs > 0 ? xs : 0;
        const __m512i shift = _mm512_set1_epi32((int)(xs - base));
        const __mmask16 la = lane_mask(w - base), lb = lane_mask(w - base - LANES);
        if (s == 1) {
            const __m512i idx = _mm512_add_epi32(iota, shift);
            for (int64_t ch = 0; ch < nch; ch++) {
                const float *r = src + ch * scs + base;
                float *dd = d + ch * dcs + j0;
                for (int64_t i = 0; i < nrows; i++, r += sstride, dd += dstride)
                    _mm512_mask_storeu_ps(dd, store,
                                          _mm512_maskz_permutexvar_ps(keep, idx, _mm512_maskz_loadu_ps(la, r)));
            }
        } else if (s == 2 && lb) {
            const __m512i idx = _mm512_add_epi32(_mm512_add_epi32(iota, iota), shift);
            for (int64_t ch = 0; ch < nch; ch++) {
                const float *r = src + ch * scs + base;
                float *dd = d + ch * dcs + j0;
                for (int64_t i = 0; i < nrows; i++, r += sstride, dd += dstride) {
                    __m512 a = _mm512_maskz_loadu_ps(la, r), b = _mm512_maskz_loadu_ps(lb, r + LANES);
                    _mm512_mask_storeu_ps(dd, store, _mm512_maskz_permutex2var_ps(keep, a, idx, b));
                }
            }
        } else if (s == 2) {
            const __m512i idx = _mm512_add_epi32(_mm512_add_epi32(iota, iota), shift);
            for (int64_t ch = 0; ch < nch; ch++) {
                const float *r = src + ch * scs + base;
                float *dd = d + ch * dcs + j0;
                for (int64_t i = 0; i < nrows; i++, r += sstride, dd += dstride)
                    _mm512_mask_storeu_ps(dd, store,
                                          _mm512_maskz_permutexvar_ps(keep, idx, _mm512_maskz_loadu_ps(la, r)));
            }
        } else {
            const __m512i idx =
                _mm512_add_epi32(_mm512_set1_epi32((int)xs), _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)s)));
            for (int64_t ch = 0; ch < nch; ch++) {
                const float *g = src + ch * scs; /* indices relative to the row start: some are negative */
                float *dd = d + ch * dcs + j0;
                for (int64_t i = 0; i < nrows; i++, g += sstride, dd += dstride)
                    _mm512_mask_storeu_ps(dd, store, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), keep, idx, g, 4));
            }
        }
    }
}

/* The planes of band b (grid rows p0/ow .. (p1-1)/ow, plus ext). */
TARGET static void pack_band(const core *p, const dband *b, float *planes)
{
    const int64_t r0 = b->p0 / p->ow, nrows = (b->p1 - 1) / p->ow + 1 - r0 + p->ext;
    const int64_t pcs = p->na * p->ne * p->ps; /* plane (c, a, e) at ((c*na + a)*ne + e)*ps */
    for (int64_t a = 0; a < p->na; a++) {
        /* rows [i0, i1) lie inside the source: y = y0 + sh*i */
        const int64_t y0 = p->oy + a + p->sh * r0;
        int64_t i0, i1;
        valid_cols(y0, p->sh, p->hin, nrows, &i0, &i1);
        for (int64_t e = 0; e < p->ne; e++) {
            float *d = planes + (a * p->ne + e) * p->ps;
            if (i0 > 0 || i1 < nrows)
                for (int64_t c = 0; c < p->cin; c++) {
                    zero_floats(d + c * pcs, i0 * p->ow);
                    zero_floats(d + c * pcs + i1 * p->ow, (nrows - i1) * p->ow);
                }
            int64_t lo, hi; /* the tap's columns inside the source */
            valid_cols(p->ox + e, p->sw, p->win, p->ow, &lo, &hi);
            sample_rows(b->src + (y0 + p->sh * i0) * p->win, p->hin * p->win, p->sh * p->win, p->cin, i1 - i0,
                        p->win, p->ox + e, p->sw, p->ow, lo, hi, d + i0 * p->ow, pcs, p->ow);
        }
    }
}

/* ------------------------------------------------------ forward kernel */

/* How the forward kernels store a tile: written, added to what is there,
 * written through a relu (a folded Activation: max(t, 0) is Activation's
 * select(t > 0, t, 0) bit for bit, NaN and -0 included), or added to what
 * is there and then through a relu (a folded residual sum and its relu). */
typedef enum store_mode { STORE_WRITE = 0, STORE_ADD, STORE_RELU, STORE_ADD_RELU } store_mode;

/* Or'ed into STORE_WRITE or STORE_RELU: whole vectors on 64-byte lines
 * are stored past the caches (non-temporal), the rest as usual. For
 * outputs of MX_SIMD_STREAM_MIN_BYTES or more, which leave the caches before the
 * next layer reads them: a written line is then not first read from
 * memory for ownership. ResNet-50 training at batch 16 (mxtrain --time, 3
 * alternated pairs, Xeon): 1692/1666/1680 -> 1647/1621/1612 ms a batch. */
#define STORE_STREAM 8

/* Whether a tile's vector goes past the caches: a whole one (all 16
 * lanes stored) filling one 64-byte line. */
INLINE bool streams(bool stream, bool masked, const dvec *v, const float *d)
{
    return stream && !masked && v->skip == 0 && ((uintptr_t)d & 63) == 0;
}

/* R rows x V vectors: acc[r][v] = sum over k of w[k*R + r] * view_k(vector v),
 * then dst (+ bias), stored per `store`. */
INLINE void fwd_tile(const float *w, const int64_t *koff, int64_t kn, const dvec *vs, int64_t doff, int64_t ldc,
                     const float *bias, int store, const int R, const int V, const bool masked)
{
    __m512 acc[MAX_R][MAX_V];
    const float *s[MAX_V];
    __mmask16 m[MAX_V]; /* lanes in use: a band's last vector (masked) reads only its own pixels */
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 6
        for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int v = 0; v < V; v++) {
        s[v] = vs[v].src;
        m[v] = (__mmask16)(lane_mask(vs[v].n) & ~lane_mask(vs[v].skip));
    }
    /* The tile's destination, asked for (for writing) now so that it is
     * in cache when the sums are stored: a layer's output is tens of MB,
     * so its lines miss, an added-to tile's loads stall, and on a Xeon
     * (one core reads about 14 GB/s) a written tile's stores fill the store
     * buffer while their lines are fetched for ownership. ResNet-50's 56x56
     * 1x1 layers' data gradient added into the shortcut's: 7.4 -> 3.7 ms
     * (ad-hoc harness, batch 16, 2 threads, Zen 4); their 64->256 forward,
     * written: 6.1-8.9 -> 5.0-5.2 ms (one Xeon core, batch 8). A vector may
     * straddle two lines. */
    const bool stream = (store & STORE_STREAM) != 0;
    store &= ~STORE_STREAM;
#pragma GCC unroll 6
    for (int v = 0; v < V; v++) {
        const float *d = vs[v].dst + doff;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            if (streams(stream, masked, &vs[v], d + r * ldc)) continue;
            __builtin_prefetch(d + r * ldc, 1, 3);
            __builtin_prefetch(d + r * ldc + LANES - 1, 1, 3);
        }
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kn; k++, w += R) {
        const int64_t o = koff[k];
        __m512 b[MAX_V];
#pragma GCC unroll 6
        for (int v = 0; v < V; v++) b[v] = masked ? _mm512_maskz_loadu_ps(m[v], s[v] + o) : _mm512_loadu_ps(s[v] + o);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(w[r]);
#pragma GCC unroll 6
            for (int v = 0; v < V; v++) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int v = 0; v < V; v++) {
        float *d = vs[v].dst + doff;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 t = acc[r][v];
            if (bias) t = _mm512_add_ps(t, _mm512_set1_ps(bias[r]));
            if (store == STORE_ADD || store == STORE_ADD_RELU)
                t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m[v], d + r * ldc));
            if (store == STORE_RELU || store == STORE_ADD_RELU) t = _mm512_max_ps(t, _mm512_setzero_ps());
            if (streams(stream, masked, &vs[v], d + r * ldc)) _mm512_stream_ps(d + r * ldc, t);
            else
                _mm512_mask_storeu_ps(d + r * ldc, m[v], t);
        }
    }
}

typedef void (*fwd_fn)(const float *w, const int64_t *koff, int64_t kn, const dvec *vs, int64_t doff, int64_t ldc,
                       const float *bias, int store);

#define FWD_FN(R, V)                                                                                                   \
    TARGET static void fwd_##R##_##V(const float *w, const int64_t *koff, int64_t kn, const dvec *vs, int64_t doff,   \
                                     int64_t ldc, const float *bias, int store)                                        \
    {                                                                                                                  \
        fwd_tile(w, koff, kn, vs, doff, ldc, bias, store, R, V, false);                                                \
    }
#define FWD_FN6(R) FWD_FN(R, 1) FWD_FN(R, 2) FWD_FN(R, 3) FWD_FN(R, 4) FWD_FN(R, 5) FWD_FN(R, 6)
#define FWD_FN4(R) FWD_FN(R, 1) FWD_FN(R, 2) FWD_FN(R, 3) FWD_FN(R, 4)
#define FWD_FN3(R) FWD_FN(R, 1) FWD_FN(R, 2) FWD_FN(R, 3)
FWD_FN6(1) FWD_FN6(2) FWD_FN6(3) FWD_FN6(4) FWD_FN4(5) FWD_FN4(6) FWD_FN3(7) FWD_FN3(8)

#define FWD_ROW6(R) {fwd_##R##_1, fwd_##R##_2, fwd_##R##_3, fwd_##R##_4, fwd_##R##_5, fwd_##R##_6}
#define FWD_ROW4(R) {fwd_##R##_1, fwd_##R##_2, fwd_##R##_3, fwd_##R##_4, NULL, NULL}
#define FWD_ROW3(R) {fwd_##R##_1, fwd_##R##_2, fwd_##R##_3, NULL, NULL, NULL}
/* fwd_fns[R-1][V-1], V <= vmax_for_r[R]: whole vectors (masked view loads
 * cost 7-9% in the loop) */
static const fwd_fn fwd_fns[MAX_R][MAX_V] = {FWD_ROW6(1), FWD_ROW6(2), FWD_ROW6(3), FWD_ROW6(4),
                                             FWD_ROW4(5), FWD_ROW4(6), FWD_ROW3(7), FWD_ROW3(8)};

/* Partial vectors (bands' last ones), masked loads, up to PART_V at a time:
 * fwd_part_fns[R-1][V-1]. One at a time, each weight broadcast served one
 * vector, and the partial vectors of a batch of small images (MobileNet's
 * 7x7 and 14x14 layers: 16 images, 16 partial vectors) ran at about half
 * the rate of whole ones. */
#define PART_V 3
#define PART_FN(R, V)                                                                                                  \
    TARGET static void part_##R##_##V(const float *w, const int64_t *koff, int64_t kn, const dvec *vs, int64_t doff,   \
                                      int64_t ldc, const float *bias, int store)                                       \
    {                                                                                                                  \
        fwd_tile(w, koff, kn, vs, doff, ldc, bias, store, R, V, true);                                                 \
    }
#define PART_FN3(R) PART_FN(R, 1) PART_FN(R, 2) PART_FN(R, 3)
PART_FN3(1) PART_FN3(2) PART_FN3(3) PART_FN3(4) PART_FN3(5) PART_FN3(6) PART_FN3(7) PART_FN3(8)
#define PART_ROW(R) {part_##R##_1, part_##R##_2, part_##R##_3}
static const fwd_fn fwd_part_fns[MAX_R][PART_V] = {PART_ROW(1), PART_ROW(2), PART_ROW(3), PART_ROW(4),
                                                   PART_ROW(5), PART_ROW(6), PART_ROW(7), PART_ROW(8)};

/* A chunk's vectors: whole ones from the front of the list, partial ones
 * (one per band at most) from the back, so that whole ones group freely. */
typedef struct vlist {
    dvec *v;
    int64_t cap, full, part;
} vlist;

INLINE void vlist_add(vlist *l, const float *src, float *dst, int64_t n, int64_t skip)
{
    dvec d = {.src = src, .dst = dst, .n = n, .skip = skip};
    if (n >= LANES) l->v[l->full++] = d;
    else l->v[l->cap - 1 - l->part++] = d;
}

/* A band's np pixels (src, dst: its first) as vectors of 16. With 16 or
 * more, the last vector ends at the band's end: it starts up to 15 pixels
 * early, recomputes them and stores only its own, so it runs unmasked among
 * the whole vectors (a 7x7 image is 3 whole vectors and one of 1 pixel, which
 * ran alone at a fraction of the rate). The same arithmetic per pixel, so
 * the same bits. */
INLINE void vlist_add_band(vlist *l, const float *src, float *dst, int64_t np)
{
    int64_t q = 0;
    for (; q + LANES <= np; q += LANES) vlist_add(l, src + q, dst + q, LANES, 0);
    if (q == np) return;
    if (np >= LANES) vlist_add(l, src + np - LANES, dst + np - LANES, LANES, LANES - (np - q));
    else vlist_add(l, src + q, dst + q, np - q, 0);
}

/* Vectors per band of np pixels starting anywhere: the list's capacity. */
static int64_t band_vectors(int64_t np) { return ceil_div(np, LANES) + 1; }

/* The micro-kernels over a vector list: out[r] (+)= sum_k wp[r, k] view_k
 * (+ bias[r]) for rows [0, rows) in panels of r (wp: the panels, each
 * k-major, the last one narrower) and groups of v vectors. koff[k]: tap
 * k's offset from a vector's src. */
TARGET static void run_vectors_from(int64_t first_row, int64_t rows, int64_t k, int r, int v, const float *wp,
                                    const int64_t *koff, const vlist *l, int64_t ldc, const float *bias, int store)
{
    for (int64_t g0 = 0; g0 < l->full; g0 += v) {
        const int nvv = (int)min64(v, l->full - g0);
        for (int64_t r0 = first_row; r0 < rows; r0 += r) {
            const int nr = (int)min64(r, rows - r0);
            fwd_fns[nr - 1][nvv - 1](wp + r0 * k, koff, k, l->v + g0, r0 * ldc, ldc, bias ? bias + r0 : NULL,
                                     store);
        }
    }
    const int pv = (int)min64(v, PART_V);
    for (int64_t i = l->cap - l->part; i < l->cap; i += pv) {
        const int nvv = (int)min64(pv, l->cap - i);
        for (int64_t r0 = first_row; r0 < rows; r0 += r) {
            const int nr = (int)min64(r, rows - r0);
            fwd_part_fns[nr - 1][nvv - 1](wp + r0 * k, koff, k, l->v + i, r0 * ldc, ldc, bias ? bias + r0 : NULL,
                                          store);
        }
    }
}

TARGET static void run_vectors(int64_t rows, int64_t k, int r, int v, const float *wp, const int64_t *koff,
                               const vlist *l, int64_t ldc, const float *bias, int store)
{
    run_vectors_from(0, rows, k, r, v, wp, koff, l, ldc, bias, store);
}

/* Short tails of in-place bands (TAIL_MAX pixels or fewer past their last
 * whole vector) share vectors: a 7x7 image's one pixel and a 14x14 image's
 * four, which otherwise cost a whole vector each (a quarter of a 7x7
 * layer's work, a thirteenth of a 14x14 one's). TAIL_BANDS bands at most in
 * one chunk bound the staging. */
#define TAIL_MAX 4
#define TAIL_BANDS 16
#define TAIL_VECS (TAIL_BANDS / (LANES / TAIL_MAX))

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct tail_rec {
    const float *src;
    float *dst;
    int64_t n, at; /* pixels; column in the staging (vector * 16 + lane) */
} tail_rec;

/* The staging of packed tails, carved from the scratch (see fplan_init). */
typedef struct tail_stage {
    float *x;       /* tap t's lanes at x[t * width ..] */
    float *y;       /* row r's lanes at y[r * width ..] */
    int64_t *koff;  /* t * width */
    tail_rec *recs;
    dvec *vl;
} tail_stage;

static size_t tail_stage_bytes(const core *c)
{
    const size_t w = TAIL_VECS * LANES;
    return align64((size_t)c->k * w * sizeof(float)) + align64((size_t)c->rows * w * sizeof(float)) +
           align64((size_t)c->k * sizeof(int64_t)) + align64(TAIL_BANDS * sizeof(tail_rec)) +
           align64(TAIL_VECS * sizeof(dvec));
}

static tail_stage tail_stage_at(const core *c, char *at)
{
    const size_t w = TAIL_VECS * LANES;
    tail_stage t;
    t.x = (float *)at;
    at += align64((size_t)c->k * w * sizeof(float));
    t.y = (float *)at;
    at += align64((size_t)c->rows * w * sizeof(float));
    t.koff = (int64_t *)at;
    at += align64((size_t)c->k * sizeof(int64_t));
    t.recs = (tail_rec *)at;
    at += align64(TAIL_BANDS * sizeof(tail_rec));
    t.vl = (dvec *)at;
    return t;
}

/* The tails recorded in ts->recs[0, n): gathered into vectors of 16 (each
 * tail whole in one), run as whole vectors on their own tap offsets, and
 * their rows [first_row, end_row) copied out, or added for STORE_ADD and
 * STORE_ADD_RELU (the staged t is added to what is there, as the kernel's
 * store adds: the same bits; then the relu). Unused lanes compute zeros
 * and are not copied. */
TARGET static void run_tails(const core *p, int64_t first_row, int64_t end_row, const float *wp, const tail_stage *ts,
                             int64_t n, int64_t ldc, const float *bias, int store)
{
    int64_t vecs = 0, lane = LANES;
    for (int64_t i = 0; i < n; i++) {
        if (lane + ts->recs[i].n > LANES) vecs++, lane = 0;
        ts->recs[i].at = (vecs - 1) * LANES + lane;
        lane += ts->recs[i].n;
    }
    const int64_t width = vecs * LANES;
    for (int64_t t = 0; t < p->k; t++) {
        float *xt = ts->x + t * width;
        zero_floats(xt, width);
        ts->koff[t] = t * width;
        for (int64_t i = 0; i < n; i++) /* in place: tap t is channel t, plane stride ps */
            memcpy(xt + ts->recs[i].at, ts->recs[i].src + t * p->ps, (size_t)ts->recs[i].n * sizeof(float));
    }
    vlist l = {.v = ts->vl, .cap = vecs};
    for (int64_t v = 0; v < vecs; v++) vlist_add(&l, ts->x + v * LANES, ts->y + v * LANES, LANES, 0);
    const bool add = store == STORE_ADD || store == STORE_ADD_RELU;
    run_vectors_from(first_row, end_row, p->k, p->r, p->v, wp, ts->koff, &l, width, bias,
                     add ? STORE_WRITE : store);
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = first_row; r < end_row; r++) {
            float *d = ts->recs[i].dst + r * ldc;
            const float *t = ts->y + r * width + ts->recs[i].at;
            if (store == STORE_ADD_RELU)
                for (int64_t j = 0; j < ts->recs[i].n; j++) {
                    const float v = d[j] + t[j];
                    d[j] = v > 0.0f ? v : 0.0f; /* Activation's relu: NaN and -0 give 0 */
                }
            else if (add)
                for (int64_t j = 0; j < ts->recs[i].n; j++) d[j] += t[j];
            else
                memcpy(d, t, (size_t)ts->recs[i].n * sizeof(float));
        }
}

/* Packs bands[0, nb) into planes and runs the core over all their pixels
 * (vl: room for nb * band_vectors(the widest band) vectors). ts: staging for
 * in-place short tails (NULL: none; nb <= TAIL_BANDS with it). */
TARGET static void core_chunk_rows(const core *p, int64_t first_row, int64_t end_row, const float *wp,
                                   const int64_t *koff, const dband *bands, int64_t nb, int64_t ldc, const float *bias,
                                   int store, float *planes, dvec *vl, int64_t vcap, const tail_stage *ts)
{
    vlist l = {.v = vl, .cap = vcap};
    int64_t tails = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t p0 = bands[b].p0, p1 = bands[b].p1, base = p0 / p->ow * p->ow;
        const float *pl = p->inplace ? bands[b].src + base : planes + b * p->band;
        if (!p->inplace) pack_band(p, &bands[b], planes + b * p->band);
        const int64_t np = p1 - p0, whole = np / LANES * LANES;
        if (ts && np > whole && np - whole <= TAIL_MAX) {
            vlist_add_band(&l, pl + (p0 - base), bands[b].dst, whole); /* whole vectors only */
            ts->recs[tails++] = (tail_rec){.src = pl + (p0 - base) + whole, .dst = bands[b].dst + whole,
                                           .n = np - whole};
        } else {
            vlist_add_band(&l, pl + (p0 - base), bands[b].dst, np);
        }
    }
    run_vectors_from(first_row, end_row, p->k, p->r, p->v, wp, koff, &l, ldc, bias, store);
    if (tails) run_tails(p, first_row, end_row, wp, ts, tails, ldc, bias, store);
}

/* ------------------------------------------------------------ geometry */

static bool isa_ok(void)
{
    const char *e = getenv("MX_DIRECT_ISA");
    if (e && strcmp(e, "none") == 0) return false;
    return __builtin_cpu_supports("avx512f");
}

/* The geometry part of mx_direct_supported (the size queries use it alone). */
static bool geom_ok(const mx_conv_geom *g)
{
    if (g->groups != 1 || g->dil_h != 1 || g->dil_w != 1) return false;
    if (g->stride_h < 1 || g->stride_w < 1 || g->k_h < 1 || g->k_w < 1 || g->pad_h < 0 || g->pad_w < 0) return false;
    if (g->pad_h >= g->k_h || g->pad_w >= g->k_w || g->stride_h > MAX_STRIDE || g->stride_w > MAX_STRIDE) return false;
    if (g->k_w > MAX_TAPS) return false;
    if (g->in_c < 1 || g->out_c < 1 || g->in_h < 1 || g->in_w < 1) return false;
    if (g->in_h + 2 * g->pad_h < g->k_h || g->in_w + 2 * g->pad_w < g->k_w) return false;
    return g->out_h == (g->in_h + 2 * g->pad_h - g->k_h) / g->stride_h + 1 &&
           g->out_w == (g->in_w + 2 * g->pad_w - g->k_w) / g->stride_w + 1;
}

bool mx_direct_supported(const mx_conv_geom *g) { return geom_ok(g) && isa_ok(); }

size_t mx_direct_packed_bytes(const mx_conv_geom *g)
{
    return (size_t)(g->out_c * g->in_c * g->k_h * g->k_w) * sizeof(float);
}

/* The forward core of g (without its band layout). */
static void fwd_core(const mx_conv_geom *g, core *c)
{
    memset(c, 0, sizeof(*c));
    c->cin = g->in_c;
    c->hin = g->in_h;
    c->win = g->in_w;
    c->rows = g->out_c;
    c->oh = g->out_h;
    c->ow = g->out_w;
    c->sh = g->stride_h;
    c->sw = g->stride_w;
    c->oy = -g->pad_h;
    c->ox = -g->pad_w;
    c->na = min64(g->stride_h, g->k_h);
    c->ne = g->k_w;
    c->ext = (g->k_h - 1) / g->stride_h;
    c->k = g->in_c * g->k_h * g->k_w;
    pick_block(c->rows, &c->r, &c->v);
}

/* Forward tap k = (c, kh, kw): plane (c, kh mod sh, kw), kh / sh rows down. */
static void fwd_taps(const mx_conv_geom *g, const core *c, int64_t *koff)
{
    int64_t k = 0;
    for (int64_t ci = 0; ci < g->in_c; ci++)
        for (int64_t kh = 0; kh < g->k_h; kh++)
            for (int64_t kw = 0; kw < g->k_w; kw++)
                koff[k++] = ((ci * c->na + kh % c->sh) * c->ne + kw) * c->ps + kh / c->sh * c->ow;
}

/* Band layout of a forward-grid core for `budget` floats of planes per
 * chunk: bp grid pixels per band (a multiple of lcm(ow, 16) when that
 * fits: bands then start on rows and vectors; else of 16), bpi bands per
 * image, nb bands per chunk; sets c->ps and c->band. */
static void grid_bands(core *c, int64_t images, int64_t budget, int64_t *bp, int64_t *bpi, int64_t *nb)
{
    const int64_t P = c->oh * c->ow, per_px = c->cin * c->na * c->ne;
    int64_t px = max64(LANES, budget / per_px);
    int64_t l = c->ow / gcd64(c->ow, LANES) * LANES;
    int64_t b = l <= px ? px / l * l : px / LANES * LANES;
    if (b >= P) b = P;
    *bp = b;
    *bpi = ceil_div(P, b);
    int64_t span = 0; /* grid rows of the widest band */
    for (int64_t p0 = 0; p0 < P; p0 += b) span = max64(span, (min64(p0 + b, P) - 1) / c->ow - p0 / c->ow + 1);
    c->ps = round_up((span + c->ext) * c->ow, LANES);
    c->band = c->cin * c->na * c->ne * c->ps;
    *nb = min64(max64(1, budget / c->band), max64(1, images) * *bpi);
}

/* ------------------------------------------------------------- forward */

typedef struct fplan {
    core c;
    int64_t bp, bpi, nb, nvmax;
    bool tails; /* in place: short tails share vectors (tail_stage at off_tail) */
    size_t off_koff, off_vl, off_bl, off_tail, total; /* bytes from the 64-byte aligned base */
} fplan;


/* A 1x1 stride-1 unpadded layer: grid pixel q is source pixel q of each
 * channel. */
static bool pointwise_in_place(const mx_conv_geom *g)
{
    return g->k_h == 1 && g->k_w == 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_h == 0 && g->pad_w == 0;
}

/* Such a layer's planes would be a copy of x: forward and weight gradient
 * read x itself, channel stride ps. The same taps, so the same bits. */
static void set_inplace(const mx_conv_geom *g, core *c)
{
    if (pointwise_in_place(g)) {
        c->inplace = true;
        c->ps = g->in_h * g->in_w;
    }
}

/* Whether a pointwise forward packs its planes after all: with 256 or
 * more input channels on planes of 14x14 or more, a group of vectors reads
 * a line from each of hundreds of planes kilobytes apart, which the
 * prefetchers do not follow, and on a Xeon (one core reads about 14 GB/s
 * from memory) the kernels wait on those lines; packing copies the planes
 * row by row, which they do follow. That pays where fewer output channels
 * than input ones (few panels of rows) share each group's lines: ResNet-50's
 * forward at batch 16, 2 threads (mxbench, best of 3 alternated): 256 -> 64
 * on 56x56 10.1 -> 6.9 ms, 512 -> 128 on 28x28 6.9 -> 5.2, 1024 -> 256 on
 * 14x14 5.3 -> 5.0; its prediction at batch 16 438-443 -> 422-426 ms a
 * batch. MobileNet v1's 256 -> 256 and 512 -> 512 layers lose (its
 * prediction 84.0-85.6 -> 85.8-86.7 ms), and so do fewer channels (64 ->
 * 256 on 56x56) and 7x7 planes (2048 -> 512, whose short tails share
 * vectors only in place). The weight gradient and the data gradient gain
 * nothing from it and stay in place. */
static bool forward_packs_pointwise(const mx_conv_geom *g)
{
    return g->in_c >= 256 && g->out_c < g->in_c && g->in_h * g->in_w >= 196;
}

static void fplan_init(fplan *p, const mx_conv_geom *g, int64_t images)
{
    fwd_core(g, &p->c);
    grid_bands(&p->c, images, CHUNK_FLOATS, &p->bp, &p->bpi, &p->nb);
    if (!forward_packs_pointwise(g)) set_inplace(g, &p->c);
    /* In place nothing is packed, so the chunk is not bounded by planes in
     * L2 (the weights stream once per group of vectors either way): up to
     * TAIL_BANDS bands, whose short tails then share vectors. */
    const int64_t bands = max64(1, images) * p->bpi;
    p->tails = p->c.inplace && p->bp % LANES != 0 && p->bp % LANES <= TAIL_MAX && bands > 1;
    if (p->tails) p->nb = min64(bands, TAIL_BANDS);
    p->nvmax = p->nb * band_vectors(p->bp);
    p->off_koff = p->c.inplace ? 0 : align64((size_t)(p->nb * p->c.band) * sizeof(float));
    p->off_vl = p->off_koff + align64((size_t)p->c.k * sizeof(int64_t));
    p->off_bl = p->off_vl + align64((size_t)p->nvmax * sizeof(dvec));
    p->off_tail = p->off_bl + align64((size_t)p->nb * sizeof(dband));
    p->total = p->off_tail + (p->tails ? tail_stage_bytes(&p->c) : 0);
}

/* Panels [lo, hi) of n panels of r rows each for part `part` of `parts`. */
static void part_panels(int64_t rows, int r, int64_t part, int64_t parts, int64_t *lo, int64_t *hi)
{
    const int64_t n = ceil_div(rows, r);
    if (parts < 1) parts = 1;
    part = min64(max64(part, 0), parts);
    *lo = n * part / parts;
    *hi = n * min64(part + 1, parts) / parts;
}

void mx_direct_pack_weights_part(const mx_conv_geom *g, const float *w, float *packed, int64_t part, int64_t parts)
{
    core c;
    fwd_core(g, &c);
    int64_t lo, hi;
    part_panels(c.rows, c.r, part, parts, &lo, &hi);
    /* panel of rows r0..: (K, nr) k-major, from w (F, K) */
    for (int64_t pn = lo; pn < hi; pn++) {
        const int64_t r0 = pn * c.r, nr = min64(c.r, c.rows - r0);
        float *d = packed + r0 * c.k;
        for (int64_t i = 0; i < nr; i++) {
            const float *s = w + (r0 + i) * c.k;
            for (int64_t k = 0; k < c.k; k++) d[k * nr + i] = s[k];
        }
    }
}

void mx_direct_pack_weights(const mx_conv_geom *g, const float *w, float *packed)
{
    mx_direct_pack_weights_part(g, w, packed, 0, 1);
}

/* Scratch: NULL allocates; returns the 64-byte aligned base or NULL. */
static char *take_scratch(void *scratch, size_t bytes, void **owned)
{
    *owned = NULL;
    if (!scratch) {
        scratch = *owned = mx_malloc(bytes + 64);
        if (!scratch) return NULL;
    }
    return (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
}

TARGET static void forward_run(const fplan *p, int64_t first_row, int64_t end_row, const float *packed,
                               const float *x, int64_t images, const float *bias, bool accumulate, const mx_fold *fold,
                               bool large_output, float *y, char *base)
{
    /* A folded relu goes into the kernels' stores; other folded layers run
     * on each chunk's rows while they are in cache. With accumulate, on
     * the sums (a residual sum's relu). */
    const bool relu = fold && mx_fold_is_relu(fold);
    const int store = accumulate ? (relu ? STORE_ADD_RELU : STORE_ADD) : relu ? STORE_RELU : STORE_WRITE;
    if (relu) fold = NULL;
    const int level = fold ? mx_simd_level() : 0;
    const core *c = &p->c;
    /* Streamed stores bypass what a folded layer would read back at once
     * and the tails' staging. */
    const bool stream = large_output && !accumulate && !fold && !p->tails;
    int64_t *koff = (int64_t *)(base + p->off_koff);
    dvec *vl = (dvec *)(base + p->off_vl);
    dband *bl = (dband *)(base + p->off_bl);
    const int64_t P = c->oh * c->ow, in_img = c->cin * c->hin * c->win, out_img = c->rows * P;
    const int64_t nbands = images * p->bpi;
    for (int64_t b0 = 0; b0 < nbands; b0 += p->nb) {
        const int64_t nb = min64(p->nb, nbands - b0);
        for (int64_t i = 0; i < nb; i++) {
            const int64_t n = (b0 + i) / p->bpi, p0 = (b0 + i) % p->bpi * p->bp;
            bl[i] = (dband){.src = x + n * in_img, .p0 = p0, .p1 = min64(P, p0 + p->bp), .dst = y + n * out_img + p0};
        }
        tail_stage ts;
        if (p->tails) ts = tail_stage_at(c, base + p->off_tail);
        core_chunk_rows(c, first_row, end_row, packed, koff, bl, nb, P, bias, store | (stream ? STORE_STREAM : 0),
                        (float *)base, vl, p->nvmax, p->tails ? &ts : NULL);
        /* The folded layer on the rows just written, while the chunk's
         * outputs are still in cache. */
        for (int64_t i = 0; fold && i < nb; i++) {
            const int64_t np = bl[i].p1 - bl[i].p0;
            if (np == P) /* a whole image: its rows are one run */
                mx_fold_rows_at(fold, level, bl[i].dst + first_row * P, (end_row - first_row) * P);
            else
                for (int64_t r = first_row; r < end_row; r++) mx_fold_rows_at(fold, level, bl[i].dst + r * P, np);
        }
    }
    if (stream) mx_simd_store_fence(); /* the streamed lines reach memory before the caller hands the output on */
}

int64_t mx_direct_forward_panels(const mx_conv_geom *g)
{
    core c;
    fwd_core(g, &c);
    return ceil_div(c.rows, c.r);
}

mx_status mx_direct_forward_part(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                                 int64_t part, int64_t parts, const float *bias, bool accumulate, float *y,
                                 void *scratch)
{
    return mx_direct_forward_part_fold(g, packed, x, images, part, parts, bias, accumulate, NULL, y, scratch);
}

mx_status mx_direct_forward_part_fold(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                                      int64_t part, int64_t parts, const float *bias, bool accumulate,
                                      const mx_fold *fold, float *y, void *scratch)
{
    if (fold && fold->kind == MX_FOLD_NONE) fold = NULL;
    if (!mx_direct_supported(g)) return MX_ERROR(MX_ERR_INVALID, "conv_direct: unsupported convolution geometry");
    if (images <= 0) return MX_OK;
    fplan p;
    fplan_init(&p, g, images);
    int64_t lo, hi;
    part_panels(p.c.rows, p.c.r, part, parts, &lo, &hi);
    if (lo >= hi) return MX_OK;
    void *owned;
    char *base = take_scratch(scratch, p.total, &owned);
    if (!base) return MX_ERR_NOMEM;
    fwd_taps(g, &p.c, (int64_t *)(base + p.off_koff));
    forward_run(&p, lo * p.c.r, min64(hi * p.c.r, p.c.rows), packed, x, images, bias, accumulate, fold,
                mx_conv_output_streams(g, images), y, base);
    free(owned);
    return MX_OK;
}

/* Every panel: part 0 of 1. */
mx_status mx_direct_forward(const mx_conv_geom *g, const float *packed, const float *x, int64_t images,
                            const float *bias, bool accumulate, float *y, void *scratch)
{
    return mx_direct_forward_part(g, packed, x, images, 0, 1, bias, accumulate, y, scratch);
}

/* ------------------------------------------------------- backward-data */

/* At stride 1 the data gradient is itself a forward convolution: of dy
 * (F channels, OH x OW) with w transposed (F <-> C) and flipped (kh ->
 * KH-1-kh, kw -> KW-1-kw), padded by KH-1-pad_h and KW-1-pad_w, giving
 * (C, H, W). It then runs on the forward kernels, which write dx directly
 * (no staging and merge): 1.07-1.45x faster on ResNet-50's and
 * Inception-BN's 1x1 layers, bit for bit the same sums on 1x1. False (gt
 * untouched) for other strides. */
static bool transposed_geom(const mx_conv_geom *g, mx_conv_geom *gt)
{
    if (g->stride_h != 1 || g->stride_w != 1) return false;
    mx_conv_transposed_geom(g, gt);
    return true;
}

/* dx phase rows: dx rows ih = a + sh*i - ph for i in [ilo, ihi) get taps
 * kh = a + sh*t, t < ta, from dy rows i - t. The same for columns. */
static void phase_range(int64_t a, int64_t s, int64_t pad, int64_t n, int64_t k, int64_t *lo, int64_t *hi, int64_t *t)
{
    *lo = pad - a > 0 ? ceil_div(pad - a, s) : 0;
    *hi = n - 1 + pad - a >= 0 ? (n - 1 + pad - a) / s + 1 : 0;
    if (*hi < *lo) *hi = *lo;
    *t = a < k ? ceil_div(k - a, s) : 0;
}

typedef struct bplan {
    int64_t imin, imax;     /* phase rows i over all phases */
    int64_t tmax;           /* taps per column of the tallest phase */
    int64_t bi, bpi, nb;    /* phase rows per band, bands per image, bands per chunk */
    int64_t jmax, ldc;      /* widest phase; stage floats per channel of a band's phase */
    int64_t band_max, k_max, nvmax;
    size_t off_stage, off_koff, off_vl, off_bl, off_zeros, total;
} bplan;

/* The planes of dx column phase b, shared by every row phase: plane
 * (f, tb-1-u) row i' of a band starting at phase row i0 holds dy row
 * i0 - (tmax-1) + i', columns jlo + j - u for the phase's columns j. False
 * when the phase has no columns or no taps (its dx pixels are zero). */
static bool col_core(const mx_conv_geom *g, const bplan *p, int64_t b, core *c)
{
    int64_t jlo, jhi, tb;
    phase_range(b, g->stride_w, g->pad_w, g->in_w, g->k_w, &jlo, &jhi, &tb);
    memset(c, 0, sizeof(*c));
    if (tb == 0 || jhi == jlo) return false;
    c->cin = g->out_c;
    c->hin = g->out_h;
    c->win = g->out_w;
    c->rows = g->in_c;
    c->oh = p->imax - p->imin;
    c->ow = jhi - jlo;
    c->sh = c->sw = 1;
    c->oy = p->imin - (p->tmax - 1);
    c->ox = jlo - (tb - 1);
    c->na = 1;
    c->ne = tb;
    c->ext = p->tmax - 1;
    pick_block(c->rows, &c->r, &c->v);
    c->ps = round_up((p->bi + c->ext) * c->ow, LANES);
    c->band = c->cin * c->ne * c->ps;
    /* One tap per column and row, whole dy rows, every row inside dy (1x1
     * kernels): the planes would be a copy of dy; read dy itself. */
    if (tb == 1 && jlo == 0 && c->ow == g->out_w && p->tmax == 1 && p->imin >= 0 && p->imax <= g->out_h) {
        c->inplace = true;
        c->ps = g->out_h * g->out_w;
    }
    return true;
}

/* Backward tap k = (f, t, u) of row phase a (ta taps) in column phase c:
 * w[f, ., a + sh*t, b + sw*u] reads plane (f, tb-1-u), tmax-1-t rows down. */
static void bwd_taps(const core *c, int64_t ta, int64_t tmax, int64_t *koff)
{
    const int64_t tb = c->ne;
    int64_t k = 0;
    for (int64_t f = 0; f < c->cin; f++)
        for (int64_t t = 0; t < ta; t++)
            for (int64_t u = 0; u < tb; u++) koff[k++] = (f * tb + tb - 1 - u) * c->ps + (tmax - 1 - t) * c->ow;
}

/* Panels [lo, hi) of r input channels, taps (f, t, u) of w at kh = a +
 * sh*t, kw = b + sw*u, or with flip at kh = KH-1-t, kw = KW-1-u (stride 1),
 * into d (this phase's part of the packing). */
static void pack_backward_panels(const mx_conv_geom *g, const float *w, int r, int64_t lo, int64_t hi, int64_t a,
                                 int64_t b, int64_t ta, int64_t tb, bool flip, float *d)
{
    const int64_t C = g->in_c, KH = g->k_h, KW = g->k_w, k = g->out_c * ta * tb;
    for (int64_t pn = lo; pn < hi; pn++) {
        const int64_t c0 = pn * r, nr = min64(r, C - c0);
        float *dp = d + c0 * k;
        for (int64_t f = 0; f < g->out_c; f++)
            for (int64_t t = 0; t < ta; t++)
                for (int64_t u = 0; u < tb; u++, dp += nr) {
                    const int64_t kh = flip ? KH - 1 - t : a + g->stride_h * t;
                    const int64_t kw = flip ? KW - 1 - u : b + g->stride_w * u;
                    const float *s = w + ((f * C + c0) * KH + kh) * KW + kw;
                    for (int64_t i = 0; i < nr; i++) dp[i] = s[i * KH * KW];
                }
    }
}

void mx_direct_pack_weights_backward_part(const mx_conv_geom *g, const float *w, float *packed_b, int64_t part,
                                          int64_t parts)
{
    const int64_t sh = g->stride_h, sw = g->stride_w, C = g->in_c, KH = g->k_h, KW = g->k_w;
    int r, v;
    pick_block(C, &r, &v);
    int64_t lo, hi;
    part_panels(C, r, part, parts, &lo, &hi);
    mx_conv_geom gt;
    if (transposed_geom(g, &gt)) { /* the forward packing of gt: taps (f, kh', kw') of w flipped */
        pack_backward_panels(g, w, r, lo, hi, 0, 0, KH, KW, true, packed_b);
        return;
    }
    float *d = packed_b;
    for (int64_t a = 0; a < sh; a++)
        for (int64_t b = 0; b < sw; b++) {
            const int64_t ta = a < KH ? ceil_div(KH - a, sh) : 0, tb = b < KW ? ceil_div(KW - b, sw) : 0;
            /* phase (a, b) after the earlier phases */
            pack_backward_panels(g, w, r, lo, hi, a, b, ta, tb, false, d);
            d += C * g->out_c * ta * tb;
        }
}

void mx_direct_pack_weights_backward(const mx_conv_geom *g, const float *w, float *packed_b)
{
    mx_direct_pack_weights_backward_part(g, w, packed_b, 0, 1);
}

static void bplan_init(bplan *p, const mx_conv_geom *g, int64_t images)
{
    const int64_t sh = g->stride_h, sw = g->stride_w;
    memset(p, 0, sizeof(*p));
    p->imin = INT64_MAX;
    int64_t tbmax = 0, tamax = 0;
    for (int64_t a = 0; a < sh; a++) {
        int64_t lo, hi, t;
        phase_range(a, sh, g->pad_h, g->in_h, g->k_h, &lo, &hi, &t);
        p->tmax = max64(p->tmax, t);
        tamax = max64(tamax, t);
        if (hi == lo) continue;
        p->imin = min64(p->imin, lo);
        p->imax = max64(p->imax, hi);
    }
    for (int64_t b = 0; b < sw; b++) {
        int64_t lo, hi, t;
        phase_range(b, sw, g->pad_w, g->in_w, g->k_w, &lo, &hi, &t);
        p->jmax = max64(p->jmax, hi - lo);
        tbmax = max64(tbmax, t);
    }
    /* Per phase row of a band: staging (sh*sw*C*jmax) and the largest
     * column phase's planes (F*tb*jmax); bands of whole vectors when jmax
     * allows. */
    const int64_t ni = p->imax - p->imin, per_row = sh * sw * g->in_c * p->jmax + g->out_c * tbmax * p->jmax;
    int64_t bi = max64(1, CHUNK_FLOATS / per_row), q = LANES / gcd64(p->jmax, LANES);
    if (bi >= q) bi = bi / q * q;
    p->bi = min64(bi, ni);
    p->bpi = ceil_div(ni, p->bi);
    p->ldc = p->bi * p->jmax;
    for (int64_t b = 0; b < sw; b++) {
        core c;
        if (col_core(g, p, b, &c)) p->band_max = max64(p->band_max, c.band);
    }
    p->k_max = g->out_c * tamax * tbmax;
    const int64_t stage = sh * sw * g->in_c * p->ldc;
    p->nb = min64(max64(1, CHUNK_FLOATS / (stage + p->band_max)), max64(1, images) * p->bpi);
    p->nvmax = p->nb * band_vectors(p->ldc);
    p->off_stage = align64((size_t)(p->nb * p->band_max) * sizeof(float));
    p->off_koff = p->off_stage + align64((size_t)(p->nb * stage) * sizeof(float));
    p->off_vl = p->off_koff + align64((size_t)p->k_max * sizeof(int64_t));
    p->off_bl = p->off_vl + align64((size_t)p->nvmax * sizeof(dvec));
    p->off_zeros = p->off_bl + align64((size_t)p->nb * sizeof(dband));
    p->total = p->off_zeros + align64(LANES * sizeof(float));
}

size_t mx_direct_scratch_bytes(const mx_conv_geom *g, int64_t images)
{
    if (!geom_ok(g)) return 0;
    fplan f;
    fplan_init(&f, g, images);
    size_t total = f.total;
    mx_conv_geom gt;
    if (transposed_geom(g, &gt)) {
        fplan ft;
        fplan_init(&ft, &gt, images);
        if (ft.total > total) total = ft.total;
    } else {
        bplan b;
        bplan_init(&b, g, images);
        if (b.total > total) total = b.total;
    }
    return total + 64;
}

/* dx rows d + r*dstride (r < nrows, w floats each) from their column
 * phases' staged rows src[b] + r*J[b] (src[b] NULL: zeros): dx column
 * b + sw*(jlo_b + j) - pw = src[b][j], written or added. Stride 2
 * interleaves two phases by permutes, 32 columns at a time, the masks set
 * up once per block for all rows (dx rows are often 16 or 32 floats);
 * wider strides go element by element (the 11x11/4-like stems, whose data
 * gradient is rarely needed). zeros: a vector of zeros that nothing writes,
 * read for a missing phase (read through dx, a masked load would wait for
 * the stores before it). */
TARGET static void merge_rows(const mx_conv_geom *g, const float *const *src, const int64_t *J, int64_t nrows, float *d,
                              int64_t dstride, bool accumulate, const float *zeros)
{
    const int64_t sw = g->stride_w, w = g->in_w, pw = g->pad_w;
    if (sw == 2) {
        const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
        /* column 0 belongs to phase pw mod 2: dx columns 2l, 2l+1 = A[l], B[l] */
        const int64_t first = pw & 1;
        const float *sa = src[first], *sb = src[1 - first];
        const int64_t na = sa ? J[first] : 0, nb = sb ? J[1 - first] : 0;
        for (int64_t q = 0; q < w; q += 2 * LANES) {
            const int64_t l = q / 2;
            const __mmask16 ma = lane_mask(na - l), mb = lane_mask(nb - l);
            const __mmask16 m0 = lane_mask(w - q), m1 = lane_mask(w - q - LANES);
            const float *pa = ma ? sa + l : zeros, *pb = mb ? sb + l : zeros;
            const int64_t sta = ma ? na : 0, stb = mb ? nb : 0;
            float *dd = d + q;
            for (int64_t r = 0; r < nrows; r++, pa += sta, pb += stb, dd += dstride) {
                __m512 va = _mm512_maskz_loadu_ps(ma, pa), vb = _mm512_maskz_loadu_ps(mb, pb);
                __m512 o0 = _mm512_permutex2var_ps(va, lo, vb), o1 = _mm512_permutex2var_ps(va, hi, vb);
                if (accumulate) o0 = _mm512_add_ps(o0, _mm512_maskz_loadu_ps(m0, dd));
                _mm512_mask_storeu_ps(dd, m0, o0);
                if (!m1) continue;
                if (accumulate) o1 = _mm512_add_ps(o1, _mm512_maskz_loadu_ps(m1, dd + LANES));
                _mm512_mask_storeu_ps(dd + LANES, m1, o1);
            }
        }
        return;
    }
    if (sw == 1) {
        for (int64_t i = 0; i < w; i += LANES) {
            const __mmask16 m = lane_mask(w - i), ms = src[0] ? m : 0;
            const float *ps = src[0] ? src[0] + i : zeros;
            const int64_t st = src[0] ? J[0] : 0;
            float *dd = d + i;
            for (int64_t r = 0; r < nrows; r++, ps += st, dd += dstride) {
                __m512 v = _mm512_maskz_loadu_ps(ms, ps);
                if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, dd));
                _mm512_mask_storeu_ps(dd, m, v);
            }
        }
        return;
    }
    for (int64_t r = 0; r < nrows; r++, d += dstride)
        for (int64_t b = 0; b < sw; b++) {
            const int64_t iw0 = ((b - pw) % sw + sw) % sw;
            const float *sr = src[b] ? src[b] + r * J[b] : NULL;
            for (int64_t j = 0; j < J[b]; j++) {
                const float v = sr ? sr[j] : 0.0f;
                d[iw0 + sw * j] = accumulate ? d[iw0 + sw * j] + v : v;
            }
        }
}

TARGET static void backward_run(const mx_conv_geom *g, const bplan *p, const float *packed_b, const float *dy,
                                int64_t images, bool accumulate, float *dx, char *base)
{
    const int64_t sh = g->stride_h, sw = g->stride_w, C = g->in_c, F = g->out_c;
    const int64_t in_img = C * g->in_h * g->in_w, out_img = F * g->out_h * g->out_w;
    float *planes = (float *)base, *stage = (float *)(base + p->off_stage);
    int64_t *koff = (int64_t *)(base + p->off_koff);
    dvec *vl = (dvec *)(base + p->off_vl);
    dband *bl = (dband *)(base + p->off_bl);
    float *zeros = (float *)(base + p->off_zeros);
    zero_floats(zeros, LANES);
    int64_t ilo[MAX_STRIDE], ihi[MAX_STRIDE], ta[MAX_STRIDE], jlo[MAX_STRIDE], jhi[MAX_STRIDE], tb[MAX_STRIDE];
    int64_t J[MAX_STRIDE], ta_before[MAX_STRIDE], tb_before[MAX_STRIDE];
    for (int64_t a = 0; a < sh; a++) {
        phase_range(a, sh, g->pad_h, g->in_h, g->k_h, &ilo[a], &ihi[a], &ta[a]);
        ta_before[a] = a == 0 ? 0 : ta_before[a - 1] + ta[a - 1];
    }
    for (int64_t b = 0; b < sw; b++) {
        phase_range(b, sw, g->pad_w, g->in_w, g->k_w, &jlo[b], &jhi[b], &tb[b]);
        J[b] = jhi[b] - jlo[b];
        tb_before[b] = b == 0 ? 0 : tb_before[b - 1] + tb[b - 1];
    }
    const int64_t stage_band = sh * sw * C * p->ldc, nbands = images * p->bpi;
    for (int64_t b0 = 0; b0 < nbands; b0 += p->nb) {
        const int64_t nb = min64(p->nb, nbands - b0);
        /* per column phase: its planes for the chunk's bands, then every row
         * phase's products into the stage */
        for (int64_t b = 0; b < sw; b++) {
            core c;
            if (!col_core(g, p, b, &c)) continue;
            for (int64_t i = 0; i < nb && !c.inplace; i++) {
                const int64_t n = (b0 + i) / p->bpi, i0 = p->imin + (b0 + i) % p->bpi * p->bi;
                bl[i] = (dband){.src = dy + n * out_img, .p0 = (i0 - p->imin) * c.ow,
                                .p1 = (min64(i0 + p->bi, p->imax) - p->imin) * c.ow};
                pack_band(&c, &bl[i], planes + i * c.band);
            }
            for (int64_t a = 0; a < sh; a++) {
                if (ta[a] == 0) continue;
                vlist l = {.v = vl, .cap = p->nvmax};
                for (int64_t i = 0; i < nb; i++) {
                    const int64_t n = (b0 + i) / p->bpi, i0 = p->imin + (b0 + i) % p->bpi * p->bi;
                    const int64_t ra0 = max64(i0, ilo[a]), ra1 = min64(i0 + p->bi, ihi[a]);
                    if (ra1 <= ra0) continue;
                    const int64_t q0 = (ra0 - i0) * c.ow, q1 = (ra1 - i0) * c.ow;
                    /* plane row 0 of the band: dy row i0 - (tmax - 1) */
                    const float *pl = c.inplace ? dy + n * out_img + i0 * c.ow : planes + i * c.band;
                    float *dst = stage + i * stage_band + (a * sw + b) * C * p->ldc;
                    vlist_add_band(&l, pl + q0, dst, q1 - q0);
                }
                if (l.full + l.part == 0) continue;
                /* packed_b holds phase (a, b) after every earlier one (a-major) */
                const int64_t k = F * ta[a] * tb[b], off = C * F * (ta_before[a] * g->k_w + ta[a] * tb_before[b]);
                bwd_taps(&c, ta[a], p->tmax, koff);
                run_vectors(C, k, c.r, c.v, packed_b + off, koff, &l, p->ldc, NULL, STORE_WRITE);
            }
        }
        /* interleave the phases into dx: per row phase and channel, all the
         * band's rows at once */
        for (int64_t i = 0; i < nb; i++) {
            const int64_t n = (b0 + i) / p->bpi, i0 = p->imin + (b0 + i) % p->bpi * p->bi;
            const float *st = stage + i * stage_band;
            for (int64_t a = 0; a < sh; a++) {
                const int64_t r0 = max64(i0, ilo[a]), r1 = min64(i0 + p->bi, ihi[a]);
                if (r1 <= r0) continue;
                float *d = dx + n * in_img + (a + sh * r0 - g->pad_h) * g->in_w;
                for (int64_t ci = 0; ci < C; ci++, d += g->in_h * g->in_w) {
                    const float *src[MAX_STRIDE];
                    for (int64_t b = 0; b < sw; b++)
                        src[b] = ta[a] && tb[b] && J[b] > 0 ? st + ((a * sw + b) * C + ci) * p->ldc : NULL;
                    merge_rows(g, src, J, r1 - r0, d, sh * g->in_w, accumulate, zeros);
                }
            }
        }
    }
}

mx_status mx_direct_backward_data(const mx_conv_geom *g, const float *packed_b, const float *dy, int64_t images,
                                  bool accumulate, float *dx, void *scratch)
{
    if (!mx_direct_supported(g)) return MX_ERROR(MX_ERR_INVALID, "conv_direct: unsupported convolution geometry");
    if (images <= 0) return MX_OK;
    mx_conv_geom gt;
    if (transposed_geom(g, &gt)) return mx_direct_forward(&gt, packed_b, dy, images, NULL, accumulate, dx, scratch);
    bplan p;
    bplan_init(&p, g, images);
    void *owned;
    char *base = take_scratch(scratch, p.total, &owned);
    if (!base) return MX_ERR_NOMEM;
    backward_run(g, &p, packed_b, dy, images, accumulate, dx, base);
    free(owned);
    return MX_OK;
}

/* ----------------------------------------------------- weight gradient */

/* dwt[rk][f0 + 16v] += sum over the bands' pixels p of view_k[p] * dyt[p][16v..]:
 * RK taps x VF vectors of 16 output channels, pixel by pixel. */
typedef struct wgband {
    const float *view; /* plane element of the band's first pixel (tap offsets added) */
    const float *dyt;  /* transposed dy of that pixel in the first channel block */
    int64_t np;
} wgband;

/* dyt: pixel-major within each block of channels (ds floats a pixel), the
 * blocks one after another (foff: this block's); dwt rows of fp floats. */
INLINE void wg_tile(const wgband *bands, int64_t nb, const int64_t *koff, int64_t fp, int64_t ds, int64_t foff,
                    float *dwt, const int RK, const int VF)
{
    __m512 acc[WG_MAX_RK][WG_MAX_VF];
#pragma GCC unroll 8
    for (int r = 0; r < RK; r++)
#pragma GCC unroll 4
        for (int v = 0; v < VF; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const float *vp[WG_MAX_RK];
#pragma GCC unroll 8
        for (int r = 0; r < RK; r++) vp[r] = bands[b].view + koff[r];
        const float *d = bands[b].dyt + foff;
        const int64_t np = bands[b].np;
        for (int64_t q = 0; q < np; q++, d += ds) {
            __m512 dv[WG_MAX_VF];
#pragma GCC unroll 4
            for (int v = 0; v < VF; v++) dv[v] = _mm512_loadu_ps(d + LANES * v);
#pragma GCC unroll 8
            for (int r = 0; r < RK; r++) {
                __m512 a = _mm512_set1_ps(vp[r][q]);
#pragma GCC unroll 4
                for (int v = 0; v < VF; v++) acc[r][v] = _mm512_fmadd_ps(a, dv[v], acc[r][v]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RK; r++)
#pragma GCC unroll 4
        for (int v = 0; v < VF; v++) {
            float *o = dwt + r * fp + LANES * v;
            _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[r][v]));
        }
}

typedef void (*wg_fn)(const wgband *bands, int64_t nb, const int64_t *koff, int64_t fp, int64_t ds, int64_t foff,
                      float *dwt);

#define WG_FN(RK, VF)                                                                                                  \
    TARGET static void wg_##RK##_##VF(const wgband *bands, int64_t nb, const int64_t *koff, int64_t fp, int64_t ds,   \
                                      int64_t foff, float *dwt)                                                        \
    {                                                                                                                  \
        wg_tile(bands, nb, koff, fp, ds, foff, dwt, RK, VF);                                                           \
    }
#define WG_COL(VF) WG_FN(1, VF) WG_FN(2, VF) WG_FN(3, VF) WG_FN(4, VF) WG_FN(5, VF) WG_FN(6, VF)
WG_COL(1) WG_COL(2) WG_COL(3) WG_COL(4) WG_FN(7, 1) WG_FN(8, 1) WG_FN(7, 2) WG_FN(8, 2) WG_FN(7, 3) WG_FN(8, 3)

/* wg_fns[VF-1][RK-1], RK <= wg_rk_for_vf[VF] */
static const int wg_rk_for_vf[WG_MAX_VF + 1] = {0, 8, 8, 8, 6};
#define WG_ROW8(VF) {wg_1_##VF, wg_2_##VF, wg_3_##VF, wg_4_##VF, wg_5_##VF, wg_6_##VF, wg_7_##VF, wg_8_##VF}
static const wg_fn wg_fns[WG_MAX_VF][WG_MAX_RK] = {
    WG_ROW8(1), WG_ROW8(2), WG_ROW8(3), {wg_1_4, wg_2_4, wg_3_4, wg_4_4, wg_5_4, wg_6_4, NULL, NULL}};

/* 16-channel vectors per weight-gradient block for nf of them. */
static int wg_vf(int64_t nf)
{
    if (nf <= 4) return (int)nf;
    if (nf % 4 == 0) return 4;
    if (nf % 3 == 0) return 3;
    return 4;
}

typedef struct wplan {
    core c;
    int64_t bp, bpi, nb, fp;
    int64_t vf, ds; /* 16-channel vectors per block of dyt (the kernels' width), floats per pixel in a block */
    size_t off_dyt, off_dwt, off_koff, off_wb, off_bl, total;
} wplan;

static void wplan_init(wplan *p, const mx_conv_geom *g, int64_t images)
{
    fwd_core(g, &p->c);
    p->fp = round_up(g->out_c, LANES);
    p->vf = wg_vf(p->fp / LANES);
    p->ds = p->vf * LANES;
    /* the budget covers planes and the transposed dy (fp floats per pixel) */
    core probe = p->c;
    int64_t per_px = p->c.cin * p->c.na * p->c.ne;
    int64_t budget = WG_CHUNK_FLOATS * per_px / (per_px + p->fp);
    grid_bands(&probe, images, max64(budget, per_px * LANES), &p->bp, &p->bpi, &p->nb);
    p->c = probe;
    set_inplace(g, &p->c); /* the same chunks either way: the same sums in the same order */
    p->off_dyt = align64((size_t)(p->nb * p->c.band) * sizeof(float));
    p->off_dwt = p->off_dyt + align64((size_t)(p->nb * p->bp * round_up(p->fp, p->ds)) * sizeof(float));
    p->off_koff = p->off_dwt + align64((size_t)(p->c.k * p->fp) * sizeof(float));
    p->off_wb = p->off_koff + align64((size_t)p->c.k * sizeof(int64_t));
    p->off_bl = p->off_wb + align64((size_t)p->nb * sizeof(wgband));
    p->total = p->off_bl + align64((size_t)p->nb * sizeof(dband));
}

/* A 1x1 stride-1 unpadded layer's dw (F, C) is also the "weight gradient"
 * of the layer from dy to x: dw[f][c] = sum over p of dy[f][p] x[c][p] is
 * that layer's dwt, taps f (read in place from dy) by channels c (x
 * transposed to pixel-major). The kernels transpose their second operand
 * chunk by chunk, so with F > C this order transposes C channels a pixel
 * instead of F: ResNet-50's 64 -> 256 layers at 56x56 spent 37% of their
 * weight gradient transposing dy. Its dwt is dw's own layout (rows of fp
 * floats), so it is copied out, not transposed. Sets *gw to the geometry
 * to run; true when the roles are swapped. */
static bool wgrad_geom(const mx_conv_geom *g, mx_conv_geom *gw)
{
    *gw = *g;
    if (!pointwise_in_place(g) || g->out_c <= g->in_c) return false; /* (geom_ok: no groups, no dilation) */
    gw->in_c = g->out_c;
    gw->out_c = g->in_c;
    return true;
}

size_t mx_direct_wgrad_scratch_bytes(const mx_conv_geom *g, int64_t images)
{
    if (!geom_ok(g)) return 0;
    mx_conv_geom gw;
    wgrad_geom(g, &gw);
    wplan p;
    wplan_init(&p, &gw, images);
    return p.total + 64;
}

/* Channel f of pixel q, q < np: src[f][q] (row stride ld) for f < fn, zero
 * up to fp, into blocks of ds channels, each pixel-major (ds floats a
 * pixel) and bstride floats after the one before: the weight-gradient
 * kernel then reads its block's channels of consecutive pixels from one
 * stream (one row of all fp channels a pixel put pixels 4 KB apart at 1,024
 * channels, which L1 maps to the same sets). */
TARGET static void transpose_rows(const float *src, int64_t ld, int64_t fn, int64_t np, float *dst, int64_t fp,
                                  int64_t ds, int64_t bstride)
{
    for (int64_t f0 = 0; f0 < fp; f0 += LANES) {
        float *d = dst + f0 / ds * bstride + f0 % ds;
        for (int64_t q = 0; q < np; q += LANES) {
            const __mmask16 m = lane_mask(np - q);
            v16f r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = f0 + i < fn ? (v16f)_mm512_maskz_loadu_ps(m, src + (f0 + i) * ld + q) : (v16f){0};
            transpose16(r);
            for (int64_t i = 0; i < min64(LANES, np - q); i++) _mm512_storeu_ps(d + (q + i) * ds, (__m512)r[i]);
        }
    }
}

/* dw (F, K) (+)= dwt^T, dwt (K, fp): 16 x 16 blocks through registers
 * (element by element, the strided reads of dwt cost 8% of a ResNet-18
 * layer3 weight gradient). */
TARGET static void wgrad_finish(const float *dwt, int64_t K, int64_t fp, int64_t F, bool accumulate, float *dw)
{
    for (int64_t k0 = 0; k0 < K; k0 += LANES)
        for (int64_t f0 = 0; f0 < F; f0 += LANES) {
            const __mmask16 m = lane_mask(K - k0);
            v16f r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = k0 + i < K ? (v16f)_mm512_loadu_ps(dwt + (k0 + i) * fp + f0) : (v16f){0};
            transpose16(r); /* r[i]: f0 + i, taps k0.. */
            for (int64_t i = 0; i < min64(LANES, F - f0); i++) {
                float *d = dw + (f0 + i) * K + k0;
                __m512 v = (__m512)r[i];
                if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d));
                _mm512_mask_storeu_ps(d, m, v);
            }
        }
}

/* dw (F, C) (+)= dwt, dwt (F, fp): the swapped roles' dwt (wgrad_geom). */
TARGET static void wgrad_finish_rows(const float *dwt, int64_t F, int64_t fp, int64_t C, bool accumulate, float *dw)
{
    for (int64_t f = 0; f < F; f++)
        for (int64_t c0 = 0; c0 < C; c0 += LANES) {
            const __mmask16 m = lane_mask(C - c0);
            float *d = dw + f * C + c0;
            __m512 v = _mm512_maskz_loadu_ps(m, dwt + f * fp + c0);
            if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d));
            _mm512_mask_storeu_ps(d, m, v);
        }
}

TARGET static void wgrad_run(const wplan *p, const float *x, const float *dy, int64_t images, char *base)
{
    const core *c = &p->c;
    float *planes = (float *)base, *dyt = (float *)(base + p->off_dyt), *dwt = (float *)(base + p->off_dwt);
    const int64_t *koff = (const int64_t *)(base + p->off_koff);
    wgband *wb = (wgband *)(base + p->off_wb);
    dband *bl = (dband *)(base + p->off_bl);
    const int64_t P = c->oh * c->ow, in_img = c->cin * c->hin * c->win, out_img = c->rows * P;
    const int64_t nbands = images * p->bpi, fp = p->fp, nf = fp / LANES, ds = p->ds;
    const int64_t bstride = p->nb * p->bp * ds; /* floats of one channel block of dyt: a chunk's pixels at most */
    const int vf = (int)p->vf, rk = wg_rk_for_vf[vf];
    memset(dwt, 0, (size_t)(c->k * fp) * sizeof(float));
    for (int64_t b0 = 0; b0 < nbands; b0 += p->nb) {
        const int64_t nb = min64(p->nb, nbands - b0);
        int64_t at = 0; /* pixels of the chunk so far */
        for (int64_t i = 0; i < nb; i++) {
            int64_t n = (b0 + i) / p->bpi, p0 = (b0 + i) % p->bpi * p->bp, p1 = min64(P, p0 + p->bp);
            bl[i] = (dband){.src = x + n * in_img, .p0 = p0, .p1 = p1};
            const float *pl = c->inplace ? x + n * in_img + p0 / c->ow * c->ow : planes + i * c->band;
            if (!c->inplace) pack_band(c, &bl[i], planes + i * c->band);
            transpose_rows(dy + n * out_img + p0, P, c->rows, p1 - p0, dyt + at * ds, fp, ds, bstride);
            wb[i] = (wgband){.view = pl + (p0 - p0 / c->ow * c->ow), .dyt = dyt + at * ds, .np = p1 - p0};
            at += p1 - p0;
        }
        for (int64_t f0 = 0; f0 < nf; f0 += vf) {
            const int v = (int)min64(vf, nf - f0);
            for (int64_t k0 = 0; k0 < c->k; k0 += rk) {
                const int r = (int)min64(rk, c->k - k0);
                wg_fns[v - 1][r - 1](wb, nb, koff + k0, fp, ds, f0 / vf * bstride, dwt + k0 * fp + f0 * LANES);
            }
        }
    }
}

/* dw over images [0, images), taking its turn (when given) for the whole
 * of dw: the sum is made in scratch, so only the final write waits. */
static mx_status wgrad(const mx_conv_geom *g, const float *x, const float *dy, int64_t images, bool accumulate,
                       float *dw, void *scratch, const mx_dw_turn *turn)
{
    if (!mx_direct_supported(g)) return MX_ERROR(MX_ERR_INVALID, "conv_direct: unsupported convolution geometry");
    const int64_t K = g->in_c * g->k_h * g->k_w, F = g->out_c;
    mx_conv_geom gw;
    const bool swapped = wgrad_geom(g, &gw);
    char *base = NULL;
    void *owned = NULL;
    wplan p;
    if (images > 0) {
        wplan_init(&p, &gw, images);
        base = take_scratch(scratch, p.total, &owned);
        if (!base) return MX_ERR_NOMEM;
        fwd_taps(&gw, &p.c, (int64_t *)(base + p.off_koff));
        if (swapped) wgrad_run(&p, dy, x, images, base);
        else wgrad_run(&p, x, dy, images, base);
    }
    if (turn && !turn->wait(turn->ctx, K)) {
        free(owned);
        return MX_ERR_RUNTIME;
    }
    if (images > 0 && swapped) wgrad_finish_rows((const float *)(base + p.off_dwt), F, p.fp, K, accumulate, dw);
    else if (images > 0) wgrad_finish((const float *)(base + p.off_dwt), K, p.fp, F, accumulate, dw);
    else if (!accumulate) memset(dw, 0, (size_t)(F * K) * sizeof(float));
    if (turn) turn->done(turn->ctx, K);
    free(owned);
    return MX_OK;
}

mx_status mx_direct_backward_weight(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                    bool accumulate, float *dw, void *scratch)
{
    return wgrad(g, x, dy, images, accumulate, dw, scratch, NULL);
}

mx_status mx_direct_backward_weight_in_turn(const mx_conv_geom *g, const float *x, const float *dy, int64_t images,
                                            bool accumulate, float *dw, void *scratch, const mx_dw_turn *turn)
{
    return wgrad(g, x, dy, images, accumulate, dw, scratch, turn);
}

/* ---------------------------------------------------------- the rule */

/* Measured on one thread against im2col + SGEMM, all three directions
 * together (tests/bench_conv_direct.c): the direct kernels run at 85-105
 * GFLOP/s wherever the output pixels fill whole vectors, while im2col +
 * SGEMM reaches 85-92 only on large products and 25-70 on small ones
 * (strided lowering, packing, the col2im scatter). So:
 *  - one input or output channel: no (backward-data then runs one row per
 *    register block: 0.5x, e.g. a 3x3/2 on one channel: 0.99x overall);
 *  - a ragged last vector per image (OH*OW pixels fill < 90% of their
 *    16-lane vectors) on a large product (F*C*KH*KW >= 65536): no (ResNet-18
 *    layer4 3x3/2 and 1x1/2 on 7x7 outputs: 0.76-0.78x; small products
 *    still win: 64 -> 64 3x3/2 on 6x6 outputs 1.19x);
 *  - stride-1 pointwise (1x1, stride 1: im2col needs no lowering for
 *    large images): only small products, F*C <= 8192 (16 -> 32, 32 -> 64,
 *    64 -> 64: 1.2-1.5x; 64 -> 256 on 56x56: 0.97x);
 *  - everything else: yes (the strided target layers 1.0-2.2x, the 7x7/2
 *    and 11x11/4 RGB stems 1.2-1.3x, small-channel 3x3/1 and 7x7/1 stems
 *    1.5-2.5x; ResNet-18 layer3 3x3/2 (128 -> 256, 14x14) about 1.04x).
 * That core (Zen 4) splits each 512-bit FMA into two 256-bit halves. On a
 * core that runs them at full width (Zen 5; mx_avx512_full_width) while
 * OpenBLAS keeps its AVX2 kernels (its core type pinned to Haswell), the
 * direct kernels run at 120-230 GFLOP/s against SGEMM's 90-115, and win
 * nearly everywhere (same benchmark, one Zen 5 core): every ResNet-50 1x1
 * layer at batch 16, stride 1 and 2, 1.14-1.78x (56x56 256 -> 64 the
 * least); the ResNet-18 layer4 layers on 7x7 outputs 1.27-1.38x; one input
 * channel (LeNet conv1 1.14x, 3x3/2 on 1 -> 16 1.63x). Only a ragged
 * output on the very largest products still loses (ResNet-50 res5a 1x1/2,
 * 1024 -> 2048 on 7x7 outputs: 0.98x, its backward-data 0.72x).
 * On a Xeon (full width, and OpenBLAS with its AVX-512 kernels: 240
 * GFLOP/s a core, the direct kernels' peak) SGEMM keeps pace wherever its
 * operands sit in cache, but the stride-1 1x1 layers of a training step
 * read and write activations from memory (one core reads about 14 GB/s
 * there), where the direct kernels, whose stores ask for their lines
 * ahead, win: ResNet-50 at batch 16, 2 threads (mxbench, best of 3
 * alternated), forward + backward, 64 -> 256 on 56x56 30.5 -> 22.9 ms,
 * 256 -> 64 28.3 -> 21.8, 128 -> 512 on 28x28 23.0 -> 16.8, 512 -> 128
 * 18.8 -> 16.9, 256 -> 1024 and 1024 -> 256 on 14x14 18.8 -> 15.2 and
 * 19.4 -> 15.4. Their 7x7 ones (ragged) lose in backward (11.6 -> 14.3 and
 * 11.8 -> 16.0 ms) and draw in forward; so there the pointwise layers
 * with unragged outputs go direct, and forward all of them.
 * The caller tries Winograd first where it applies (3x3 and 5x5, stride 1;
 * still 1.5-2.5x ahead of the direct kernels there on that core). */
mx_direct_lead mx_direct_vector_lead(void)
{
    if (!mx_avx512_full_width()) return MX_DIRECT_NO_LEAD;
    return mx_blas_sgemm_avx512() ? MX_DIRECT_POINTWISE_LEAD : MX_DIRECT_LEAD;
}

static bool stride1_pointwise(const mx_conv_geom *g)
{
    return g->k_h == 1 && g->k_w == 1 && g->stride_h == 1 && g->stride_w == 1;
}

/* The output pixels of an image leave more than 10% of their last 16-lane
 * vector empty. */
static bool ragged_output(const mx_conv_geom *g)
{
    const int64_t P = g->out_h * g->out_w;
    return (double)P < 0.9 * (double)(ceil_div(P, LANES) * LANES);
}

bool mx_direct_profitable_rule(const mx_conv_geom *g, mx_direct_lead lead)
{
    if (!geom_ok(g)) return false;
    const int64_t product = g->out_c * g->in_c * g->k_h * g->k_w;
    const bool ragged = ragged_output(g);
    if (lead == MX_DIRECT_LEAD) return g->out_c >= 2 && !(ragged && product >= LEAD_RAGGED_PRODUCT);
    if (g->in_c < 2 || g->out_c < 2) return false;
    if (ragged && product >= 65536) return false;
    if (stride1_pointwise(g)) return g->out_c * g->in_c <= 8192 || (lead == MX_DIRECT_POINTWISE_LEAD && !ragged);
    return true;
}

bool mx_direct_profitable(const mx_conv_geom *g)
{
    return mx_direct_supported(g) && mx_direct_profitable_rule(g, mx_direct_vector_lead());
}

/* Forward alone, with a lead, the direct kernels win on the ragged large
 * products too (the backward-data pass is what loses there): ResNet-50
 * res5a 1x1/2 at batch 16 10.7 against 15.5 ms, and at batch 1 1.0 against
 * 1.3 ms; its 3x3 512 -> 512 on 7x7 at batch 1 (too few tiles for
 * Winograd) 1.2-1.4 against 1.7 ms (2 threads, mx_conv_forward). */
bool mx_direct_forward_profitable_rule(const mx_conv_geom *g, mx_direct_lead lead)
{
    if (lead == MX_DIRECT_LEAD) return geom_ok(g) && g->out_c >= 2;
    if (lead == MX_DIRECT_POINTWISE_LEAD && geom_ok(g) && stride1_pointwise(g) && g->in_c >= 2 && g->out_c >= 2)
        return true;
    return mx_direct_profitable_rule(g, MX_DIRECT_NO_LEAD);
}

bool mx_direct_forward_profitable(const mx_conv_geom *g)
{
    return mx_direct_supported(g) && mx_direct_forward_profitable_rule(g, mx_direct_vector_lead());
}
