/*
 * conv_depthwise.c - direct depthwise convolution (see conv_depthwise.h).
 *
 * One correlation kernel serves forward and backward-data:
 *   out[o, p..p+W) = bias + sum over taps (kh, kw) of wt[kh, kw] *
 *                    src phase ((c0 + kw*dw) mod s), row r0 + o*sh + kh*dh,
 *                    columns p + (c0 + kw*dw) / s ...
 * Forward reads the input's stride_w phase planes (r0 = c0 = 0); backward-
 * data reads dy spread out to stride 1 ("zero-inserted", shifted by the
 * kernel's reach) with the filter flipped and r0, c0 = pad: the transpose
 * of the forward as a plain stride-1 correlation, so no read-modify-write
 * of overlapping vectors (store-forwarding stalls) and one kernel to tune.
 * The zero insertion wastes (stride_h*stride_w - 1)/(stride_h*stride_w) of
 * backward-data's work on strided layers (one or two per MobileNet stage).
 *
 * Eight output rows are computed at once (rows past the end recompute the
 * last row and are not stored): eight independent FMA chains hide the FMA
 * latency, and each weight is broadcast once per eight vectors.
 */
#include "ops/cpu/conv_depthwise.h"
#include "ops/cpu/simd.h"

#include <stdatomic.h>
#include <string.h>

/* Vector slack past a plane row's last used column: loads of a partial
 * vector read (and ignore) up to 15 floats more. */
#define DW_SLACK 16
#define DW_ROWS 8
/* One plane's buffers must fit this (16M-float inputs are not MobileNets). */
#define DW_MAX_SCRATCH ((size_t)64 << 20)

/* The layout of one plane's buffers. */
typedef struct dw_layout {
    int64_t s;           /* forward phases (stride_w) */
    int64_t ph, q;       /* forward: rows and row length of each phase plane */
    int64_t zh, zq;      /* backward-data: rows and row length of the spread dy */
} dw_layout;

static dw_layout layout(const mx_conv_geom *g)
{
    dw_layout l;
    l.s = g->stride_w;
    l.ph = g->in_h + 2 * g->pad_h;
    l.q = g->out_w + (g->k_w - 1) * g->dil_w / l.s + DW_SLACK;
    l.zh = g->in_h + g->pad_h + (g->k_h - 1) * g->dil_h;
    l.zq = g->in_w + g->pad_w + (g->k_w - 1) * g->dil_w + DW_SLACK;
    return l;
}

/* The phase planes, and for stride 2 one zero-padded input row to split. */
static size_t fwd_floats(const dw_layout *l)
{
    return (size_t)(l->s * l->ph * l->q) + (l->s == 2 ? (size_t)(2 * l->q) : 0);
}
static size_t bwd_floats(const mx_conv_geom *g, const dw_layout *l)
{
    /* phases (dw) + spread dy (dx) + flipped filter + tap sums */
    return fwd_floats(l) + (size_t)(l->zh * l->zq) + 2 * (size_t)(g->k_h * g->k_w);
}

bool mx_depthwise_supported(const mx_conv_geom *g)
{
    if (g->groups <= 1 || g->groups != g->in_c || g->out_c != g->in_c) return false;
    dw_layout l = layout(g);
    return bwd_floats(g, &l) * sizeof(float) <= DW_MAX_SCRATCH;
}

/* dy (OH, OW) spread to stride 1: z[oh*sh + (KH-1)*dh, ow*sw + (KW-1)*dw]. */
static void spread_dy(const mx_conv_geom *g, const dw_layout *l, const float *dy, float *z)
{
    memset(z, 0, (size_t)(l->zh * l->zq) * sizeof(float));
    const int64_t top = (g->k_h - 1) * g->dil_h, left = (g->k_w - 1) * g->dil_w, width = l->zq - DW_SLACK;
    for (int64_t oh = 0; oh < g->out_h; oh++) {
        int64_t r = top + oh * g->stride_h;
        if (r >= l->zh) break; /* reaches only padding rows of dx */
        float *zr = z + r * l->zq;
        const float *dr = dy + oh * g->out_w;
        if (g->stride_w == 1) {
            int64_t n = left + g->out_w <= width ? g->out_w : width - left;
            memcpy(zr + left, dr, (size_t)n * sizeof(float));
        } else {
            for (int64_t ow = 0; ow < g->out_w && left + ow * g->stride_w < width; ow++)
                zr[left + ow * g->stride_w] = dr[ow];
        }
    }
}

typedef struct dw_corr {
    const float *src;
    int64_t q, plane, s;  /* row length, floats per phase plane, phases */
    int64_t sh, dh, dw;   /* output row step, tap dilations */
    int64_t r0, c0;       /* offsets of output (0, 0)'s first tap */
    const float *wt;      /* KH x KW */
    int64_t oh, ow;       /* output size */
} dw_corr;

#define DW_KERNELS(P, W, TARGET)                                                                                    \
    /* Rows [0, rows) of a block's outputs at column p (a partial vector at   \
     * the row's end), added to what is there when add. */                    \
    TARGET MX_SIMD_INLINE void dw_store_##P(const P##_f *acc, int64_t rows, float *y, int64_t ow, int64_t p, bool add) \
    {                                                                                                               \
        const int64_t n = ow - p < W ? ow - p : W;                                                                  \
        _Pragma("GCC unroll 8") for (int64_t i = 0; i < rows; i++) {                                               \
            float *yp = y + i * ow + p;                                                                             \
            P##_f v = acc[i];                                                                                       \
            if (add) v += P##_load_part(yp, n);                                                                     \
            if (n == W) P##_store(yp, v);                                                                           \
            else P##_store_part(yp, v, n);                                                                          \
        }                                                                                                           \
    }                                                                                                               \
    TARGET MX_SIMD_INLINE void dw_corr_body_##P(const dw_corr *c, int64_t KH, int64_t KW, float bias, bool add,    \
                                                float *y)                                                           \
    {                                                                                                               \
        for (int64_t o0 = 0; o0 < c->oh; o0 += DW_ROWS) {                                                          \
            int64_t roff[DW_ROWS];                                                                                  \
            for (int i = 0; i < DW_ROWS; i++)                                                                       \
                roff[i] = (c->r0 + (o0 + i < c->oh ? o0 + i : c->oh - 1) * c->sh) * c->q;                           \
            for (int64_t p = 0; p < c->ow; p += W) {                                                                \
                P##_f acc[DW_ROWS];                                                                                 \
                _Pragma("GCC unroll 8") for (int i = 0; i < DW_ROWS; i++) acc[i] = P##_splat(bias);                 \
                for (int64_t kh = 0; kh < KH; kh++)                                                                 \
                    for (int64_t kw = 0; kw < KW; kw++) {                                                           \
                        const int64_t col = c->c0 + kw * c->dw;                                                     \
                        const float *base = c->src + (col % c->s) * c->plane + kh * c->dh * c->q + p + col / c->s;  \
                        const P##_f wv = P##_splat(c->wt[kh * KW + kw]);                                            \
                        _Pragma("GCC unroll 8") for (int i = 0; i < DW_ROWS; i++) acc[i] =                         \
                            P##_fma(P##_load(base + roff[i]), wv, acc[i]);                                          \
                    }                                                                                               \
                dw_store_##P(acc, c->oh - o0 < DW_ROWS ? c->oh - o0 : DW_ROWS, y + o0 * c->ow, c->ow, p, add);      \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    /* 3x3, rows one apart (stride and dilation 1 down): each block of 8      \
     * output rows reads its 10 input rows once, every loaded vector feeding   \
     * the up to 3 output rows it serves, instead of loading each row again    \
     * for each of them (3 loads per output vector instead of 9). The taps     \
     * reach each output in the order the general body takes them: the same   \
     * bits. Whole blocks only; returns the rows it did. */                    \
    TARGET static int64_t dw_corr3_rows_##P(const dw_corr *c, float bias, bool add, float *y)                      \
    {                                                                                                               \
        P##_f wv[9];                                                                                                \
        _Pragma("GCC unroll 9") for (int t = 0; t < 9; t++) wv[t] = P##_splat(c->wt[t]);                            \
        const float *cb[3];                                                                                         \
        for (int kw = 0; kw < 3; kw++) {                                                                            \
            const int64_t col = c->c0 + kw * c->dw;                                                                 \
            cb[kw] = c->src + (col % c->s) * c->plane + col / c->s;                                                 \
        }                                                                                                           \
        const int64_t blocks = c->oh / DW_ROWS * DW_ROWS;                                                           \
        for (int64_t o0 = 0; o0 < blocks; o0 += DW_ROWS) {                                                          \
            const int64_t r0 = (c->r0 + o0) * c->q;                                                                 \
            for (int64_t p = 0; p < c->ow; p += W) {                                                                \
                P##_f acc[DW_ROWS];                                                                                 \
                _Pragma("GCC unroll 8") for (int i = 0; i < DW_ROWS; i++) acc[i] = P##_splat(bias);                 \
                _Pragma("GCC unroll 10") for (int ri = 0; ri < DW_ROWS + 2; ri++) {                                \
                    const int64_t at = r0 + ri * c->q + p;                                                          \
                    const P##_f v0 = P##_load(cb[0] + at), v1 = P##_load(cb[1] + at), v2 = P##_load(cb[2] + at);   \
                    _Pragma("GCC unroll 3") for (int kh = 0; kh < 3; kh++) {                                        \
                        const int o = ri - kh;                                                                      \
                        if (o < 0 || o >= DW_ROWS) continue;                                                        \
                        acc[o] = P##_fma(v0, wv[kh * 3], acc[o]);                                                   \
                        acc[o] = P##_fma(v1, wv[kh * 3 + 1], acc[o]);                                               \
                        acc[o] = P##_fma(v2, wv[kh * 3 + 2], acc[o]);                                               \
                    }                                                                                               \
                }                                                                                                   \
                dw_store_##P(acc, DW_ROWS, y + o0 * c->ow, c->ow, p, add);                                         \
            }                                                                                                       \
        }                                                                                                           \
        return blocks;                                                                                              \
    }                                                                                                               \
    TARGET static void dw_corr_##P(const dw_corr *c, int64_t KH, int64_t KW, float bias, bool add, float *y)       \
    {                                                                                                               \
        if (KH == 3 && KW == 3 && c->sh == 1 && c->dh == 1) {                                                       \
            const int64_t done = dw_corr3_rows_##P(c, bias, add, y);                                                \
            if (done == c->oh) return;                                                                              \
            dw_corr rest = *c; /* the last rows, fewer than a block */                                              \
            rest.r0 += done;                                                                                        \
            rest.oh -= done;                                                                                        \
            dw_corr_body_##P(&rest, 3, 3, bias, add, y + done * c->ow);                                             \
            return;                                                                                                 \
        }                                                                                                           \
        /* 3x3 with constant trip counts: the tap loops unroll. */                                                  \
        if (KH == 3 && KW == 3) dw_corr_body_##P(c, 3, 3, bias, add, y);                                            \
        else dw_corr_body_##P(c, KH, KW, bias, add, y);                                                             \
    }                                                                                                               \
    /* e[j] = r[2j] and o[j] = r[2j + 1] for j < n. */                                                            \
    TARGET static void dw_split2_##P(const float *r, float *e, float *o, int64_t n)                                 \
    {                                                                                                               \
        int64_t j = 0;                                                                                              \
        for (; j + W <= n; j += W) {                                                                                \
            const P##_f a = P##_load(r + 2 * j), b = P##_load(r + 2 * j + W);                                       \
            P##_store(e + j, P##_even(a, b));                                                                       \
            P##_store(o + j, P##_odd(a, b));                                                                        \
        }                                                                                                           \
        for (; j < n; j++) {                                                                                        \
            e[j] = r[2 * j];                                                                                        \
            o[j] = r[2 * j + 1];                                                                                    \
        }                                                                                                           \
    }                                                                                                               \
    /* sums[kh*KW + kw] += sum over (oh, ow) of dy[oh, ow] * the forward's tap (kh, kw) of (oh, ow). */            \
    TARGET static void dw_wgrad_##P(const dw_corr *c, int64_t KH, int64_t KW, const float *dy, float *sums)        \
    {                                                                                                               \
        for (int64_t kh = 0; kh < KH; kh++)                                                                         \
            for (int64_t kw = 0; kw < KW; kw++) {                                                                   \
                const int64_t col = kw * c->dw;                                                                     \
                const float *base = c->src + (col % c->s) * c->plane + kh * c->dh * c->q + col / c->s;              \
                P##_f acc[4] = {P##_splat(0.0f), P##_splat(0.0f), P##_splat(0.0f), P##_splat(0.0f)};                \
                for (int64_t o0 = 0; o0 < c->oh; o0 += 4)                                                           \
                    for (int64_t p = 0; p < c->ow; p += W) {                                                        \
                        const int64_t n = c->ow - p < W ? c->ow - p : W;                                            \
                        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                         \
                        {                                                                                           \
                            /* rows past the end: dy lanes of 0 (and a valid row of x) */                           \
                            const int64_t o = o0 + i < c->oh ? o0 + i : c->oh - 1;                                  \
                            const P##_f d = P##_load_part(dy + o * c->ow + p, o0 + i < c->oh ? n : 0);              \
                            acc[i] = P##_fma(d, P##_load(base + o * c->sh * c->q + p), acc[i]);                     \
                        }                                                                                           \
                    }                                                                                               \
                const P##_f t = (acc[0] + acc[1]) + (acc[2] + acc[3]);                                              \
                float lanes[W], s = 0.0f;                                                                           \
                memcpy(lanes, &t, sizeof(t));                                                                       \
                for (int i = 0; i < W; i++) s += lanes[i];                                                          \
                sums[kh * KW + kw] += s;                                                                            \
            }                                                                                                       \
    }

MX_SIMD_INSTANTIATE(DW_KERNELS)

#ifdef MX_SIMD_X86
/* The lanes of a vector whose lane 0 is row column c that lie inside the
 * row [0, w): what the masked loads below read (the others load zeros,
 * the padding). */
static __mmask16 lanes_in_row(int64_t c, int64_t w)
{
    const int64_t lo = c < 0 ? -c : 0, hi = w - c < 16 ? w - c : 16;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* Forward of a 3x3, stride-1, pad-1 layer (MobileNet's) straight from the
 * plane x (H, W) with masked loads, no padded copy: lanes outside the row
 * and rows outside the plane load zeros, which is what the padded plane
 * held, and the taps reach each output in dw_corr3_rows' order (and the
 * general body's for a last block of fewer than 8 rows): the same bits.
 * Rows of a block past the plane compute what they will not store. The
 * copies into padded planes were 7-8% of MobileNet v1's prediction at
 * batch 16 (one Xeon core: about 13 ms a sample in all). */
MX_SIMD_TARGET_AVX512 static void dw_pad1_3x3_mx16(const float *x, int64_t h, int64_t w, const float *wt, float bias,
                                                  bool add, float *y)
{
    mx16_f wv[9];
    for (int t = 0; t < 9; t++) wv[t] = mx16_splat(wt[t]);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t p = 0; p < w; p += 16) {
        /* tap column kw reads x columns p - 1 + kw + lane: those inside [0, w) */
        const __mmask16 m[3] = {lanes_in_row(p - 1, w), lanes_in_row(p, w), lanes_in_row(p + 1, w)};
        for (int64_t o0 = 0; o0 < h; o0 += DW_ROWS) {
            mx16_f acc[DW_ROWS];
            for (int i = 0; i < DW_ROWS; i++) acc[i] = mx16_splat(bias);
#pragma GCC unroll 10
            for (int ri = 0; ri < DW_ROWS + 2; ri++) {
                const int64_t r = o0 + ri - 1; /* the input row */
                mx16_f v0 = (mx16_f)zero, v1 = (mx16_f)zero, v2 = (mx16_f)zero;
                if (r >= 0 && r < h) {
                    const float *at = x + r * w + p - 1;
                    v0 = (mx16_f)_mm512_maskz_loadu_ps(m[0], at);
                    v1 = (mx16_f)_mm512_maskz_loadu_ps(m[1], at + 1);
                    v2 = (mx16_f)_mm512_maskz_loadu_ps(m[2], at + 2);
                }
#pragma GCC unroll 3
                for (int kh = 0; kh < 3; kh++) {
                    const int o = ri - kh;
                    if (o < 0 || o >= DW_ROWS) continue;
                    acc[o] = mx16_fma(v0, wv[kh * 3], acc[o]);
                    acc[o] = mx16_fma(v1, wv[kh * 3 + 1], acc[o]);
                    acc[o] = mx16_fma(v2, wv[kh * 3 + 2], acc[o]);
                }
            }
            dw_store_mx16(acc, h - o0 < DW_ROWS ? h - o0 : DW_ROWS, y + o0 * w, w, p, add);
        }
    }
}

/* Stride 2: e[j] = padded row column 2j, o[j] = column 2j + 1, j < q, the
 * padded row being the input row xr (w floats) at column pad, zeros around
 * it: read from xr with masked loads instead of padding a copy first
 * (pad_row + dw_split2). The same floats in the same places. */
MX_SIMD_TARGET_AVX512 static void dw_split2_row_mx16(const float *xr, int64_t w, int64_t pad, float *e, float *o,
                                                    int64_t q)
{
    for (int64_t j = 0; j < q; j += 16) {
        /* padded columns 2j .. 2j + 31 are xr columns c0 .. c0 + 31 */
        const int64_t c0 = 2 * j - pad;
        const mx16_f a = (mx16_f)_mm512_maskz_loadu_ps(lanes_in_row(c0, w), xr + c0);
        const mx16_f b = (mx16_f)_mm512_maskz_loadu_ps(lanes_in_row(c0 + 16, w), xr + c0 + 16);
        const int64_t n = q - j < 16 ? q - j : 16;
        mx16_store_part(e + j, mx16_even(a, b), n);
        mx16_store_part(o + j, mx16_odd(a, b), n);
    }
}
#endif

/* A layer dw_pad1_3x3 computes (at the AVX-512 width). */
static bool pad1_3x3(const mx_conv_geom *g, int level)
{
#ifdef MX_SIMD_X86
    return level >= MX_SIMD_AVX512 && g->k_h == 3 && g->k_w == 3 && g->stride_h == 1 && g->stride_w == 1 &&
           g->dil_h == 1 && g->dil_w == 1 && g->pad_h == 1 && g->pad_w == 1;
#else
    (void)g;
    (void)level;
    return false;
#endif
}

/* The zero-padded plane x (H, W) as l->s column phases: phase b's column j
 * is the padded row's column b + s*j. Stride 2 (MobileNet's downsampling
 * layers) pads each row once and splits it into even and odd columns with
 * vector shuffles; other strides gather. `clean`: the buffers hold the
 * padding of an earlier plane of this geometry (zeros where no input
 * lands), so only the input's own columns are written: on 7x7 and 14x14
 * planes the padding's memsets and their calls cost more than the copy. */
/* dst[0, len) = the input row xr (in_w floats) placed at column pad_w,
 * zeros around it unless `clean` (they are there already). */
static void pad_row(float *dst, int64_t len, const float *xr, int64_t pad_w, int64_t in_w, bool clean)
{
    const int64_t lo = pad_w < len ? pad_w : len, hi = pad_w + in_w < len ? pad_w + in_w : len;
    if (!clean) memset(dst, 0, (size_t)lo * sizeof(float));
    memcpy(dst + lo, xr, (size_t)(hi - lo) * sizeof(float));
    if (!clean) memset(dst + hi, 0, (size_t)(len - hi) * sizeof(float));
}

static void fill_phases(const mx_conv_geom *g, const dw_layout *l, int level, const float *x, float *ph, bool clean)
{
    float *padded = ph + l->s * l->ph * l->q; /* stride 2: 2q floats */
    for (int64_t r = 0; r < l->ph; r++) {
        int64_t ir = r - g->pad_h;
        if (ir < 0 || ir >= g->in_h) {
            for (int64_t b = 0; b < l->s && !clean; b++)
                memset(ph + (b * l->ph + r) * l->q, 0, (size_t)l->q * sizeof(float));
            continue;
        }
        const float *xr = x + ir * g->in_w;
        if (l->s == 1) {
            pad_row(ph + r * l->q, l->q, xr, g->pad_w, g->in_w, clean);
            continue;
        }
#ifdef MX_SIMD_X86
        if (l->s == 2 && level >= MX_SIMD_AVX512) {
            dw_split2_row_mx16(xr, g->in_w, g->pad_w, ph + r * l->q, ph + (l->ph + r) * l->q, l->q);
            continue;
        }
#endif
        if (l->s == 2) {
            pad_row(padded, 2 * l->q, xr, g->pad_w, g->in_w, clean);
            MX_SIMD_DISPATCH(level, dw_split2, padded, ph + r * l->q, ph + (l->ph + r) * l->q, l->q);
            continue;
        }
        for (int64_t b = 0; b < l->s; b++) {
            float *row = ph + (b * l->ph + r) * l->q;
            /* columns j in [lo, hi) read x: b + s*j - pad_w in [0, W) */
            int64_t lo = g->pad_w > b ? (g->pad_w - b + l->s - 1) / l->s : 0;
            int64_t hi = g->in_w + g->pad_w - b > 0 ? (g->in_w + g->pad_w - b + l->s - 1) / l->s : 0;
            if (lo > l->q) lo = l->q;
            if (hi > l->q) hi = l->q;
            if (hi < lo) hi = lo;
            memset(row, 0, (size_t)lo * sizeof(float));
            const float *xs = xr + b + l->s * lo - g->pad_w;
            for (int64_t j = lo; j < hi; j++) row[j] = xs[l->s * (j - lo)];
            memset(row + hi, 0, (size_t)(l->q - hi) * sizeof(float));
        }
    }
}

typedef struct dw_job {
    const mx_conv_geom *g;
    const mx_fold *fold; /* forward: applied to each plane after it is written */
    dw_layout l;
    int level;
    const float *x, *w, *bias, *dy;
    float *y, *dx, *dw;
    bool add_y, need_dx, add_dx, need_dw, add_dw;
    atomic_int failed;
} dw_job;

static int64_t plane_in(const mx_conv_geom *g) { return g->in_h * g->in_w; }
static int64_t plane_out(const mx_conv_geom *g) { return g->out_h * g->out_w; }

static dw_corr forward_corr(const mx_conv_geom *g, const dw_layout *l, const float *ph, const float *wt)
{
    return (dw_corr){.src = ph, .q = l->q, .plane = l->ph * l->q, .s = l->s, .sh = g->stride_h, .dh = g->dil_h,
                     .dw = g->dil_w, .wt = wt, .oh = g->out_h, .ow = g->out_w};
}

/* Units are (image, channel) planes. */
static void forward_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    dw_job *j = arg;
    const mx_conv_geom *g = j->g;
    const bool direct = pad1_3x3(g, j->level); /* reads x itself: no phase planes */
    float *ph = direct ? NULL : mx_thread_scratch(0, fwd_floats(&j->l) * sizeof(float));
    if (!direct && !ph) {
        atomic_store(&j->failed, 1);
        return;
    }
    const int64_t kk = g->k_h * g->k_w;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t c = u % g->in_c;
        float *yu = j->y + u * plane_out(g);
        const float bias = j->bias ? j->bias[c] : 0.0f;
        if (direct) {
#ifdef MX_SIMD_X86
            dw_pad1_3x3_mx16(j->x + u * plane_in(g), g->in_h, g->in_w, j->w + c * kk, bias, j->add_y, yu);
#endif
        } else {
            fill_phases(g, &j->l, j->level, j->x + u * plane_in(g), ph, u > lo);
            dw_corr k = forward_corr(g, &j->l, ph, j->w + c * kk);
            MX_SIMD_DISPATCH(j->level, dw_corr, &k, g->k_h, g->k_w, bias, j->add_y, yu);
        }
        if (j->fold) mx_fold_rows_at(j->fold, j->level, yu, plane_out(g));
    }
}

/* Units are channels: every image's dx plane, and dw summed over the images in order. */
static void backward_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    dw_job *j = arg;
    const mx_conv_geom *g = j->g;
    const dw_layout *l = &j->l;
    float *ph = mx_thread_scratch(0, bwd_floats(g, l) * sizeof(float));
    if (!ph) {
        atomic_store(&j->failed, 1);
        return;
    }
    const int64_t kk = g->k_h * g->k_w;
    float *z = ph + fwd_floats(l), *flip = z + l->zh * l->zq, *sums = flip + kk;
    for (int64_t c = lo; c < hi; c++) {
        if (j->need_dx) /* w is not given when only dw is wanted (Deconvolution's weight gradient) */
            for (int64_t t = 0; t < kk; t++) flip[t] = j->w[c * kk + kk - 1 - t];
        memset(sums, 0, (size_t)kk * sizeof(float));
        dw_corr bd = {.src = z, .q = l->zq, .plane = l->zh * l->zq, .s = 1, .sh = 1, .dh = g->dil_h, .dw = g->dil_w,
                      .r0 = g->pad_h, .c0 = g->pad_w, .wt = flip, .oh = g->in_h, .ow = g->in_w};
        for (int64_t n = 0; n < g->batch; n++) {
            const int64_t u = n * g->in_c + c;
            const float *dyu = j->dy + u * plane_out(g);
            if (j->need_dw) {
                fill_phases(g, l, j->level, j->x + u * plane_in(g), ph, c > lo || n > 0);
                dw_corr k = forward_corr(g, l, ph, NULL);
                MX_SIMD_DISPATCH(j->level, dw_wgrad, &k, g->k_h, g->k_w, dyu, sums);
            }
            if (j->need_dx) {
                spread_dy(g, l, dyu, z);
                MX_SIMD_DISPATCH(j->level, dw_corr, &bd, g->k_h, g->k_w, 0.0f, j->add_dx, j->dx + u * plane_in(g));
            }
        }
        if (j->need_dw) {
            float *dwc = j->dw + c * kk;
            for (int64_t t = 0; t < kk; t++) dwc[t] = j->add_dw ? dwc[t] + sums[t] : sums[t];
        }
    }
}

static mx_status scratch_failed(void)
{
    return MX_ERROR(MX_ERR_NOMEM, "convolution: cannot allocate a thread's depthwise plane buffers");
}

mx_status mx_depthwise_forward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                               const float *bias, const mx_fold *fold, float *y, mx_req req)
{
    if (req == MX_REQ_NULL || g->batch == 0) return MX_OK;
    if (fold && fold->kind == MX_FOLD_NONE) fold = NULL;
    MX_TRY(mx_fold_check_req(fold, req, "Convolution"));
    dw_job j = {.g = g, .fold = fold, .l = layout(g), .level = mx_simd_level(), .x = x, .w = w, .bias = bias,
                .y = y, .add_y = req == MX_REQ_ADD};
    atomic_init(&j.failed, 0);
    int64_t units = g->batch * g->in_c;
    mx_parallel_for(pool, units, mx_parallel_grain(pool, units, 4, 1), forward_units, &j);
    return atomic_load(&j.failed) ? scratch_failed() : MX_OK;
}

mx_status mx_depthwise_backward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                                const float *dy, float *dx, mx_req req_dx, float *dw, mx_req req_dw)
{
    dw_job j = {.g = g, .l = layout(g), .level = mx_simd_level(), .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw,
                .need_dx = dx && req_dx != MX_REQ_NULL, .add_dx = req_dx == MX_REQ_ADD,
                .need_dw = dw && req_dw != MX_REQ_NULL, .add_dw = req_dw == MX_REQ_ADD};
    atomic_init(&j.failed, 0);
    if (!j.need_dx && !j.need_dw) return MX_OK;
    /* zero images: dw = 0 (or kept), as the other paths do */
    mx_parallel_for(pool, g->in_c, mx_parallel_grain(pool, g->in_c, 4, 1), backward_units, &j);
    return atomic_load(&j.failed) ? scratch_failed() : MX_OK;
}
