/*
 * im2col.c - convolution as im2col + SGEMM (see im2col.h), shared by
 * Convolution and Deconvolution.
 *
 * Per group g of G, with K = C/G*KH*KW and P = OH*OW:
 *   forward          y_g (F/G, P)  = w_g (F/G, K) * col_g (K, P)
 *   backward-weight  dw_g (F/G, K) = dy_g (F/G, P) * col_g^T (P, K)
 *   backward-data    dcol_g (K, P) = w_g^T (K, F/G) * dy_g (F/G, P),
 *                    then col2im adds dcol back onto dx.
 * P grows to B*P when B images are lowered side by side.
 *
 * Layers where another method is faster take it instead, with the same
 * split of the batch across threads: Winograd (3x3 and 5x5, stride 1;
 * ops/winograd.h) and direct implicit-GEMM kernels (strided layers;
 * ops/conv_direct.h).
 */
#include "ops/cpu/im2col.h"

#include "blas/blas.h"
#include "ops/cpu/conv_depthwise.h"
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/winograd.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Images are lowered side by side until one product has CONV_MIN_COLS
 * columns (B*P; fewer leave OpenBLAS too little to split across cores) or
 * the column buffer reaches CONV_COL_BUFFER_BYTES (more spills it out of
 * cache before SGEMM reads it back), at most CONV_MAX_COLS. */
#define CONV_MIN_COLS 512
#define CONV_MAX_COLS 2048
#define CONV_COL_BUFFER_BYTES (3 << 19)

/* Lowering work (floats moved) below which one thread does it alone: the
 * hand-over to the pool (microseconds) must stay small next to the work
 * shared. */
#define CONV_PARALLEL_MIN_WORK (1 << 18)

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void mx_conv_transposed_geom(const mx_conv_geom *g, mx_conv_geom *gt)
{
    *gt = *g;
    gt->in_c = g->out_c;
    gt->in_h = g->out_h;
    gt->in_w = g->out_w;
    gt->out_c = g->in_c;
    gt->out_h = g->in_h;
    gt->out_w = g->in_w;
    gt->pad_h = g->k_h - 1 - g->pad_h;
    gt->pad_w = g->k_w - 1 - g->pad_w;
}

bool mx_conv_output_streams(const mx_conv_geom *g, int64_t images)
{
    const int64_t n = g->batch > images ? g->batch : images;
    return n * g->out_c * g->out_h * g->out_w * (int64_t)sizeof(float) >= MX_SIMD_STREAM_MIN_BYTES;
}

/* ---------------------------------------------------------------- loops */

/* SSE-width vectors: the build targets baseline x86-64, where -O2 leaves
 * loops of unknown trip count scalar. memcpy keeps loads unaligned-safe. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void store4(float *p, v4f v) { memcpy(p, &v, sizeof(v)); }

/* d[i] = s[i], inline: rows of a small image are a few floats long */
static inline void vec_copy(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, load4(s + i));
    for (; i < n; i++) d[i] = s[i];
}

/* d[i] += s[i] */
static void vec_add(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        store4(d + i, load4(d + i) + load4(s + i));
        store4(d + i + 4, load4(d + i + 4) + load4(s + i + 4));
    }
    for (; i < n; i++) d[i] += s[i];
}

/* d[i] = s[i] + b, or d[i] += s[i] + b when accumulating */
static void vec_copy_bias(float *d, const float *s, float b, int64_t n, bool accumulate)
{
    v4f bv = {b, b, b, b};
    int64_t i = 0;
    if (accumulate) {
        for (; i + 4 <= n; i += 4) store4(d + i, load4(d + i) + load4(s + i) + bv);
        for (; i < n; i++) d[i] += s[i] + b;
    } else {
        for (; i + 4 <= n; i += 4) store4(d + i, load4(s + i) + bv);
        for (; i < n; i++) d[i] = s[i] + b;
    }
}

/* d[i] += b */
static void vec_add_scalar(float *d, float b, int64_t n)
{
    v4f bv = {b, b, b, b};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, load4(d + i) + bv);
    for (; i < n; i++) d[i] += b;
}

/* sum of s[i], in double across 8 float lanes */
static double vec_sum(const float *s, int64_t n)
{
    v4f a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
    int64_t i = 0;
    double total = 0;
    for (; i + 8 <= n; i += 8) {
        a += load4(s + i);
        b += load4(s + i + 4);
        if ((i & 1023) == 1016) { /* flush now and then: float lanes stay short sums */
            for (int k = 0; k < 4; k++) total += (double)a[k] + (double)b[k];
            a = (v4f){0, 0, 0, 0};
            b = (v4f){0, 0, 0, 0};
        }
    }
    for (int k = 0; k < 4; k++) total += (double)a[k] + (double)b[k];
    for (; i < n; i++) total += s[i];
    return total;
}

static int64_t kernel_rows(const mx_conv_geom *g) { return g->in_c * g->k_h * g->k_w; }

static bool is_pointwise(const mx_conv_geom *g)
{
    return g->k_h == 1 && g->k_w == 1 && g->stride_h == 1 && g->stride_w == 1 && g->pad_h == 0 && g->pad_w == 0;
}

int64_t mx_conv_chunk(const mx_conv_geom *g, size_t limit_bytes)
{
    int64_t p = g->out_h * g->out_w;
    if (g->batch <= 1 || p <= 0) return 1;
    int64_t per_image = (kernel_rows(g) + g->out_c) * p * (int64_t)sizeof(float);
    /* Columns per product: enough for SGEMM to split across cores, few
     * enough that the column buffer stays in cache between im2col writing
     * it and SGEMM reading it. */
    int64_t cols = CONV_COL_BUFFER_BYTES / ((int64_t)sizeof(float) * kernel_rows(g));
    if (cols > CONV_MAX_COLS) cols = CONV_MAX_COLS;
    if (cols < CONV_MIN_COLS) cols = CONV_MIN_COLS;
    int64_t want = ceil_div(cols, p);
    if (want > g->batch) want = g->batch;
    int64_t fit = per_image > 0 ? (int64_t)(limit_bytes / (size_t)per_image) : want;
    if (fit < want) want = fit;
    if (want <= 1) return 1;
    /* Even chunks: 10 images with room for 8 go as 5 + 5, not 8 + 2. */
    int64_t chunks = ceil_div(g->batch, want);
    return ceil_div(g->batch, chunks);
}

size_t mx_conv_workspace_bytes(const mx_conv_geom *g, int64_t chunk)
{
    int64_t p = g->out_h * g->out_w;
    if (chunk <= 1) return is_pointwise(g) ? 0 : (size_t)(kernel_rows(g) * p) * sizeof(float);
    return (size_t)((kernel_rows(g) + g->out_c) * chunk * p) * sizeof(float);
}

/* Output columns [lo, hi) whose input column ow*stride + off lies in [0, w). */
static void valid_range(int64_t off, int64_t stride, int64_t w, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t a = off < 0 ? ceil_div(-off, stride) : 0;
    int64_t b = w - 1 - off < 0 ? 0 : (w - 1 - off) / stride + 1;
    if (a > ow) a = ow;
    if (b > ow) b = ow;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

/* Lowers kernel row ki of channel c of one image x (C, H, W): the KW rows
 * of col for (c, ki, 0..KW-1). */
static void im2col_rows(const mx_conv_geom *g, const float *x, int64_t c, int64_t ki, float *col, int64_t ldcol)
{
    const int64_t h = g->in_h, w = g->in_w, oh = g->out_h, ow = g->out_w, sw = g->stride_w, sh = g->stride_h;
    const float *xc = x + c * h * w;
    /* Output rows [r_lo, r_hi) read input rows inside the image; the rest
     * read padding. */
    int64_t r_lo, r_hi;
    valid_range(ki * g->dil_h - g->pad_h, sh, h, oh, &r_lo, &r_hi);
    const int64_t ih0 = r_lo * sh - g->pad_h + ki * g->dil_h;
    for (int64_t kj = 0; kj < g->k_w; kj++) {
        float *dst = col + ((c * g->k_h + ki) * g->k_w + kj) * ldcol;
        int64_t off = kj * g->dil_w - g->pad_w, lo, hi;
        valid_range(off, sw, w, ow, &lo, &hi);
        if (r_lo > 0) memset(dst, 0, (size_t)(r_lo * ow) * sizeof(float));
        if (r_hi < oh) memset(dst + r_hi * ow, 0, (size_t)((oh - r_hi) * ow) * sizeof(float));
        const float *row = xc + ih0 * w + off; /* output (r, q) reads row[(r - r_lo)*sh*w + q*sw] */
        float *d = dst + r_lo * ow;
        if (sw == 1 && lo == 0 && hi == ow && (ow & 3) == 0) {
            /* The common case (stride 1, the row inside the image): whole
             * vectors, no edge handling. */
            for (int64_t r = r_lo; r < r_hi; r++, d += ow, row += sh * w)
                for (int64_t q = 0; q < ow; q += 4) store4(d + q, load4(row + q));
            continue;
        }
        for (int64_t r = r_lo; r < r_hi; r++, d += ow, row += sh * w) {
            for (int64_t q = 0; q < lo; q++) d[q] = 0.0f;
            if (sw == 1) vec_copy(d + lo, row + lo, hi - lo);
            else
                for (int64_t q = lo; q < hi; q++) d[q] = row[q * sw];
            for (int64_t q = hi; q < ow; q++) d[q] = 0.0f;
        }
    }
}

/* Adds the rows of channels [c0, c1) of col back onto one image dx. */
static void col2im_channels(const mx_conv_geom *g, const float *col, int64_t ldcol, int64_t c0, int64_t c1,
                            float *dx)
{
    const int64_t h = g->in_h, w = g->in_w, oh = g->out_h, ow = g->out_w, sw = g->stride_w, sh = g->stride_h;
    for (int64_t c = c0; c < c1; c++) {
        float *xc = dx + c * h * w;
        for (int64_t ki = 0; ki < g->k_h; ki++) {
            int64_t r_lo, r_hi; /* output rows that touch input rows (see im2col_rows) */
            valid_range(ki * g->dil_h - g->pad_h, sh, h, oh, &r_lo, &r_hi);
            const int64_t ih0 = r_lo * sh - g->pad_h + ki * g->dil_h;
            for (int64_t kj = 0; kj < g->k_w; kj++) {
                const float *src = col + ((c * g->k_h + ki) * g->k_w + kj) * ldcol + r_lo * ow;
                int64_t off = kj * g->dil_w - g->pad_w, lo, hi;
                valid_range(off, sw, w, ow, &lo, &hi);
                float *row = xc + ih0 * w + off; /* output (r, q) adds onto row[(r - r_lo)*sh*w + q*sw] */
                if (sw == 1 && lo == 0 && hi == ow && (ow & 3) == 0) {
                    for (int64_t r = r_lo; r < r_hi; r++, src += ow, row += sh * w)
                        for (int64_t q = 0; q < ow; q += 4) store4(row + q, load4(row + q) + load4(src + q));
                    continue;
                }
                for (int64_t r = r_lo; r < r_hi; r++, src += ow, row += sh * w) {
                    if (sw == 1) vec_add(row + lo, src + lo, hi - lo);
                    else
                        for (int64_t q = lo; q < hi; q++) row[q * sw] += src[q];
                }
            }
        }
    }
}

void mx_im2col(const mx_conv_geom *g, const float *x, float *col, int64_t ldcol)
{
    for (int64_t c = 0; c < g->in_c; c++)
        for (int64_t ki = 0; ki < g->k_h; ki++) im2col_rows(g, x, c, ki, col, ldcol);
}

void mx_col2im(const mx_conv_geom *g, const float *col, int64_t ldcol, float *dx)
{
    col2im_channels(g, col, ldcol, 0, g->in_c, dx);
}

void mx_conv_add_bias(float *y, const float *bias, int64_t n, int64_t f, int64_t s)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < f; c++) vec_add_scalar(y + (i * f + c) * s, bias[c], s);
}



/* ------------------------------------------------------------ lowering */

/* One chunk of b images side by side: image i's columns start at i*P of
 * rows of length ldcol = b*P. Work units touch disjoint rows of col and
 * disjoint planes of x, so any split gives the same bytes. */
typedef struct chunk_job {
    const mx_conv_geom *g;
    const float *x;  /* im2col: the chunk's first image */
    float *dx;       /* col2im: the chunk's first image gradient */
    float *col;
    const float *ccol;
    int64_t ldcol, zero; /* col2im: zero dx planes first */
} chunk_job;

/* im2col units are (image, channel, kernel row): finer than col2im's, so
 * that a 3-channel input still splits evenly. */
static void im2col_units(void *p, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const chunk_job *j = p;
    const mx_conv_geom *g = j->g;
    const int64_t rows = g->in_c * g->k_h, img = g->in_c * g->in_h * g->in_w, ps = g->out_h * g->out_w;
    for (int64_t u = lo; u < hi; u++) {
        int64_t i = u / rows, c = u % rows / g->k_h, ki = u % g->k_h;
        im2col_rows(g, j->x + i * img, c, ki, j->col + i * ps, j->ldcol);
    }
}

static void col2im_units(void *p, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const chunk_job *j = p;
    const mx_conv_geom *g = j->g;
    const int64_t c = g->in_c, plane = g->in_h * g->in_w, img = c * plane, ps = g->out_h * g->out_w;
    for (int64_t u = lo; u < hi;) {
        int64_t i = u / c, c0 = u % c, c1 = c0 + (hi - u < c - c0 ? hi - u : c - c0);
        float *dxi = j->dx + i * img;
        if (j->zero) memset(dxi + c0 * plane, 0, (size_t)((c1 - c0) * plane) * sizeof(float));
        col2im_channels(g, j->ccol + i * ps, j->ldcol, c0, c1, dxi);
        u += c1 - c0;
    }
}

/* fn over n units on the pool when the work (floats moved) is worth a
 * hand-over, else on the caller; pool NULL inside a piece. */
static void run_units(mx_threadpool *pool, int64_t n, int64_t work, mx_range_fn fn, void *arg)
{
    if (!pool || work < CONV_PARALLEL_MIN_WORK) fn(arg, 0, n, 0);
    else mx_parallel_for(pool, n, mx_parallel_grain(pool, n, 4, 1), fn, arg);
}

static void lower_chunk(mx_threadpool *pool, const mx_conv_geom *g, const float *x, int64_t b, float *col)
{
    chunk_job j = {.g = g, .x = x, .col = col, .ldcol = b * g->out_h * g->out_w};
    run_units(pool, b * g->in_c * g->k_h, kernel_rows(g) * j.ldcol, im2col_units, &j);
}

static void unlower_chunk(mx_threadpool *pool, const mx_conv_geom *g, const float *col, int64_t b, float *dx,
                          bool zero)
{
    chunk_job j = {.g = g, .dx = dx, .ccol = col, .ldcol = b * g->out_h * g->out_w, .zero = zero};
    run_units(pool, b * g->in_c, kernel_rows(g) * j.ldcol, col2im_units, &j);
}

/* Staging (F, b*P) <-> images (b, F, P), by (image, channel) rows. */
typedef struct stage_job {
    const mx_conv_geom *g;
    const float *from;  /* gather: dy images; scatter: the staging buffer */
    float *to;          /* gather: the staging buffer; scatter: y images */
    const float *bias;  /* scatter only; NULL: none */
    int64_t b;
    bool accumulate, gather;
} stage_job;

static void stage_units(void *p, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const stage_job *j = p;
    const int64_t f = j->g->out_c, ps = j->g->out_h * j->g->out_w, cols = j->b * ps;
    for (int64_t u = lo; u < hi; u++) {
        int64_t i = u / f, c = u % f, image_at = (i * f + c) * ps, stage_at = c * cols + i * ps;
        if (j->gather) memcpy(j->to + stage_at, j->from + image_at, (size_t)ps * sizeof(float));
        else vec_copy_bias(j->to + image_at, j->from + stage_at, j->bias ? j->bias[c] : 0.0f, ps, j->accumulate);
    }
}

/* y images (b, F, P) (written, or accumulated) = stage (F, b*P) + bias */
static void scatter_chunk(mx_threadpool *pool, const mx_conv_geom *g, const float *stage, int64_t b,
                          const float *bias, bool accumulate, float *y)
{
    stage_job j = {.g = g, .from = stage, .to = y, .bias = bias, .b = b, .accumulate = accumulate};
    run_units(pool, b * g->out_c, b * g->out_c * g->out_h * g->out_w, stage_units, &j);
}

/* stage (F, b*P) = dy images (b, F, P) */
static void gather_chunk(mx_threadpool *pool, const mx_conv_geom *g, const float *dy, int64_t b, float *stage)
{
    stage_job j = {.g = g, .from = dy, .to = stage, .b = b, .gather = true};
    run_units(pool, b * g->out_c, b * g->out_c * g->out_h * g->out_w, stage_units, &j);
}

/* Bias gradient, channels [lo, hi): each channel summed the same way
 * whichever thread runs it. */
typedef struct bias_job {
    const float *dy;
    int64_t n, f, s;
    float *db;
    mx_req req;
} bias_job;

static void bias_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const bias_job *j = arg;
    for (int64_t c = lo; c < hi; c++) {
        double acc = 0;
        for (int64_t i = 0; i < j->n; i++) acc += vec_sum(j->dy + (i * j->f + c) * j->s, j->s);
        if (j->req == MX_REQ_ADD) j->db[c] += (float)acc;
        else j->db[c] = (float)acc;
    }
}

void mx_conv_bias_grad(mx_threadpool *pool, const float *dy, int64_t n, int64_t f, int64_t s, float *db, mx_req req)
{
    if (req == MX_REQ_NULL) return;
    bias_job j = {.dy = dy, .n = n, .f = f, .s = s, .db = db, .req = req};
    run_units(pool, f, n * f * s, bias_units, &j);
}

/* ---------------------------------------------------------- one chunk */

/* A convolution call: what every chunk of it needs. */
typedef struct conv_call {
    const mx_conv_geom *g;
    const float *x, *w, *bias, *dy;
    float *y, *dx;
    mx_req req;          /* forward: y's; backward: dx's */
    bool need_dx, need_dw;
    bool lower_dx, lower_dw; /* backward: what im2col + SGEMM computes (the rest: Winograd) */
    const float *u;      /* Winograd: transformed filters (forward), or of gb (backward-data); NULL: none */
    int64_t o0, o1;      /* Winograd: the output channels (of gb for backward-data) u holds (a slice:
                            winograd_sliced) */
    mx_conv_geom gb;     /* Winograd backward-data: the convolution of dy that gives dx */
    bool wino_dw;        /* Winograd weight gradient */
    const float *packed; /* direct kernels: packed weights (forward), or packed for backward-data; NULL: none */
    bool sampled_dx;     /* backward-data of a strided 1x1 layer on its sampled pixels (strided_pointwise,
                            scatter_sampled); packed is then sampled's packing */
    bool sampled_fwd;    /* forward of a strided 1x1 layer on its sampled pixels (gather_sampled) */
    mx_conv_geom sampled; /* with sampled_dx or sampled_fwd: the layer on its sampled pixels, stride 1 */
    bool direct_dw;      /* direct weight gradient */
    int64_t chunk;       /* images lowered side by side */
    int64_t piece;       /* images per piece when the batch is split */
    int64_t parts;       /* direct forward of a batch too small to split: output-channel parts */
    void *shared;        /* Winograd forward of such a batch: packed input and output tiles */
    float *dw_parts;     /* backward, split batch: one weight gradient per piece */
    float *dw_first;     /* when set (a write request), piece 0's goes straight here */
    float *dw_turns;     /* when set, every piece adds its own into this dw in piece order (no dw_parts) */
    bool dw_add;         /* the weight gradient's request is add */
    atomic_llong *dw_written; /* with dw_turns: how far each piece has written dw (mx_dw_turn's units) */
    const mx_fold *fold; /* forward: the element-wise layer applied to y, NULL none */
    atomic_int failed;   /* a piece could not get scratch memory */
    mx_threadpool *pool;
    mx_scratch_lease *lease; /* the caller's (NULL: its thread scratch) */
} conv_call;

/* A piece's scratch: the caller's (worker 0) from its lease, so engine
 * workers that run convolutions one after another share it; the pool's
 * helpers keep their own. */
static void *piece_scratch(const conv_call *c, int worker, int slot, size_t bytes)
{
    return worker == 0 ? mx_scratch_buffer(c->pool, c->lease, slot, bytes) : mx_thread_scratch(slot, bytes);
}

/* A piece's slot-0 scratch, or NULL with the call marked failed. */
static void *piece_scratch_or_fail(conv_call *c, int worker, size_t bytes)
{
    void *p = piece_scratch(c, worker, 0, bytes);
    if (!p) atomic_store(&c->failed, 1);
    return p;
}

static int64_t out_image(const mx_conv_geom *g) { return g->out_c * g->out_h * g->out_w; }
static int64_t in_image(const mx_conv_geom *g) { return g->in_c * g->in_h * g->in_w; }

/* A strided 1x1 layer without padding reads only the pixels on its stride
 * grid: it is the stride-1 1x1 layer `sampled` of those pixels (input
 * OH x OW), and its data gradient is sampled's, scattered onto the grid
 * with zeros between. The direct kernels make sampled's as the forward of
 * the transposed layer, their fastest case, where the strided layer's own
 * backward-data ran at half its speed (ResNet-50's 1x1/2 projections). */
static bool strided_pointwise(const mx_conv_geom *g, mx_conv_geom *sampled)
{
    if (g->k_h != 1 || g->k_w != 1 || g->pad_h != 0 || g->pad_w != 0 || g->dil_h != 1 || g->dil_w != 1 ||
        g->groups != 1 || (g->stride_h == 1 && g->stride_w == 1))
        return false;
    *sampled = *g;
    sampled->in_h = g->out_h;
    sampled->in_w = g->out_w;
    sampled->stride_h = sampled->stride_w = 1;
    return true;
}

/* Floats of sampled input or data gradient a piece holds at a time (1 MiB). */
#define SAMPLED_CHUNK_FLOATS ((int64_t)1 << 18)

/* Images of g's sampled input or data gradient made at a time: as many as
 * fit SAMPLED_CHUNK_FLOATS, at least one, at most a piece. */
static int64_t sampled_chunk_images(const mx_conv_geom *g, int64_t piece)
{
    int64_t n = SAMPLED_CHUNK_FLOATS / (g->in_c * g->out_h * g->out_w);
    if (n < 1) n = 1;
    return n < piece ? n : piece;
}

/* The pixels on a strided 1x1 layer g's stride grid of images [0, n) of x,
 * as the input of its stride-1 twin (n, C, OH, OW): the forward then runs
 * the direct kernels in place, their fastest case, where the strided layer
 * packed the same pixels band by band (ResNet-50 b16, ad-hoc harness: res5a
 * 1x1/2 1024 -> 2048 9.3 -> 7.5 ms, res3a's and res4a's about 1 ms less;
 * the same products in the same order, so the same bits). */
static void gather_sampled(const mx_conv_geom *g, const float *x, int64_t n, float *xs)
{
    const int64_t sh = g->stride_h, sw = g->stride_w, oh = g->out_h, ow = g->out_w, h = g->in_h, w = g->in_w;
    for (int64_t plane = 0; plane < n * g->in_c; plane++) {
        const float *src = x + plane * h * w;
        float *dst = xs + plane * oh * ow;
        for (int64_t y = 0; y < oh; y++) {
            const float *row = src + y * sh * w;
            for (int64_t i = 0; i < ow; i++) dst[y * ow + i] = row[i * sw];
        }
    }
}

/* Forward of images [n0, n0 + b) through col (and its staging area);
 * pool splits the chunk's own work, NULL when the chunk is one piece. */
static void forward_chunk_raw(const conv_call *c, mx_threadpool *pool, int64_t n0, int64_t b, float *col)
{
    const mx_conv_geom *g = c->g;
    const int64_t p = g->out_h * g->out_w, grp = g->groups, fg = g->out_c / grp, cg = g->in_c / grp;
    const int64_t kg = cg * g->k_h * g->k_w, cols = b * p;
    const float beta = c->req == MX_REQ_ADD ? 1.0f : 0.0f;
    const float *xn = c->x + n0 * in_image(g);
    float *yn = c->y + n0 * out_image(g);
    if (b == 1 && is_pointwise(g)) { /* x_n is already the column matrix */
        for (int64_t k = 0; k < grp; k++)
            mx_sgemm(pool, false, false, fg, p, cg, 1.0f, c->w + k * fg * cg, cg, xn + k * cg * p, p, beta,
                     yn + k * fg * p, p);
        if (c->bias) mx_conv_add_bias(yn, c->bias, 1, g->out_c, p);
        return;
    }
    lower_chunk(pool, g, xn, b, col);
    if (b == 1) { /* straight into y */
        for (int64_t k = 0; k < grp; k++)
            mx_sgemm(pool, false, false, fg, p, kg, 1.0f, c->w + k * fg * kg, kg, col + k * kg * cols, cols, beta,
                     yn + k * fg * p, p);
        if (c->bias) mx_conv_add_bias(yn, c->bias, 1, g->out_c, p);
        return;
    }
    float *stage = col + kernel_rows(g) * cols;
    for (int64_t k = 0; k < grp; k++)
        mx_sgemm(pool, false, false, fg, cols, kg, 1.0f, c->w + k * fg * kg, kg, col + k * kg * cols, cols, 0.0f,
                 stage + k * fg * cols, cols);
    /* (F, B*P) -> (B, F, P), with the bias on the way. */
    scatter_chunk(pool, g, stage, b, c->bias, c->req == MX_REQ_ADD, yn);
}

/* A folded Activation goes over images [n0, n0 + b) right after they are
 * written, while they are still in cache. */
static void fold_images(const conv_call *c, mx_threadpool *pool, int64_t n0, int64_t b)
{
    if (!c->fold) return;
    float *yn = c->y + n0 * out_image(c->g);
    if (pool) mx_fold_forward(pool, c->fold, yn, b * out_image(c->g));
    else mx_fold_rows(c->fold, yn, b * out_image(c->g));
}

static void forward_chunk(const conv_call *c, mx_threadpool *pool, int64_t n0, int64_t b, float *col)
{
    forward_chunk_raw(c, pool, n0, b, col);
    fold_images(c, pool, n0, b);
}

/* Backward of images [n0, n0 + b): dw (F, C/G*KH*KW) = beta_dw * dw + this
 * chunk's part (with_dw), and dx of these images per c->req (with_dx), of
 * what the call lowers. */
static void backward_chunk(const conv_call *c, mx_threadpool *pool, int64_t n0, int64_t b, float *col, float *dw,
                           float beta_dw, bool with_dw, bool with_dx)
{
    const mx_conv_geom *g = c->g;
    const bool lower_dw = c->lower_dw && with_dw, lower_dx = c->lower_dx && with_dx;
    const int64_t p = g->out_h * g->out_w, grp = g->groups, fg = g->out_c / grp, cg = g->in_c / grp;
    const int64_t kg = cg * g->k_h * g->k_w, cols = b * p;
    const float *xn = c->x ? c->x + n0 * in_image(g) : NULL, *dyn = c->dy + n0 * out_image(g);
    float *dxn = c->dx ? c->dx + n0 * in_image(g) : NULL;
    if (b == 1 && is_pointwise(g)) {
        const float beta_dx = c->req == MX_REQ_ADD ? 1.0f : 0.0f;
        for (int64_t k = 0; k < grp; k++) {
            const float *dyk = dyn + k * fg * p;
            if (lower_dw)
                mx_sgemm(pool, false, true, fg, cg, p, 1.0f, dyk, p, xn + k * cg * p, p, beta_dw, dw + k * fg * cg,
                         cg);
            if (lower_dx)
                mx_sgemm(pool, true, false, cg, p, fg, 1.0f, c->w + k * fg * cg, cg, dyk, p, beta_dx,
                         dxn + k * cg * p, p);
        }
        return;
    }
    const float *dyc = dyn; /* (F, cols): one image needs no regrouping */
    if (b > 1) {
        float *stage = col + kernel_rows(g) * cols;
        gather_chunk(pool, g, dyn, b, stage);
        dyc = stage;
    }
    if (lower_dw) {
        lower_chunk(pool, g, xn, b, col);
        for (int64_t k = 0; k < grp; k++)
            mx_sgemm(pool, false, true, fg, kg, cols, 1.0f, dyc + k * fg * cols, cols, col + k * kg * cols, cols,
                     beta_dw, dw + k * fg * kg, kg);
    }
    if (lower_dx) {
        for (int64_t k = 0; k < grp; k++)
            mx_sgemm(pool, true, false, kg, cols, fg, 1.0f, c->w + k * fg * kg, kg, dyc + k * fg * cols, cols, 0.0f,
                     col + k * kg * cols, cols);
        unlower_chunk(pool, g, col, b, dxn, c->req != MX_REQ_ADD);
    }
}

/* ------------------------------------------------------------- drivers */

/* Per-piece weight gradients larger than this make the batch split cost
 * more memory traffic than it saves: such layers share each chunk instead. */
#define MAX_DW_PARTS_BYTES (24u << 20)

/* Images per piece when the batch is split across the pool's threads
 * (each thread lowering and multiplying its own images, OpenBLAS on one
 * thread: no hand-overs inside a layer), or 0 to share each chunk across
 * the threads instead (batches too small to split evenly). */
static int64_t piece_images(const mx_conv_geom *g, int threads)
{
    if (threads <= 1 || g->batch < threads) return 0;
    if (g->batch % threads != 0 && g->batch < 4 * threads) return 0;
    /* Two pieces per thread when there are images enough, so a thread that
     * is held up costs half its share rather than all of it. */
    int64_t parts = g->batch >= 8 * threads ? 2 * (int64_t)threads : threads;
    return ceil_div(g->batch, parts);
}

/* Output pixels per piece below which a backward pass with a weight
 * gradient keeps one piece per thread: every piece makes, clears,
 * transposes and finally sums a whole gradient of the weights, memory
 * traffic of about 36 bytes per weight against 4 flops per weight per
 * pixel of the piece. ResNet-50 at batch 16 on 2 threads (mxtrain --time):
 * its 7x7 layers' backward 15 -> 11.5 ms, the 14x14 3x3 layers' 11 -> 9,
 * the 28x28 ones' 8.5 -> 7; all convolutions' backward 570 -> 507 ms. The
 * 56x56 layers (12,544 pixels a piece) gain nothing from it, and keep two
 * pieces per thread for a thread that is held up. */
#define BACKWARD_MIN_PIECE_PIXELS 8192

/* piece_images for a backward pass: with a weight gradient, and pieces of
 * too few pixels, one piece per thread (the same batch split otherwise). */
static int64_t backward_piece_images(const mx_conv_geom *g, int threads, bool need_dw)
{
    const int64_t piece = piece_images(g, threads);
    if (!need_dw || piece == 0 || piece * g->out_h * g->out_w >= BACKWARD_MIN_PIECE_PIXELS) return piece;
    return ceil_div(g->batch, threads);
}

/* Images per chunk inside a piece of `piece` images, chunks made even. */
static int64_t piece_chunk(const mx_conv_geom *g, int64_t piece)
{
    mx_conv_geom one = *g;
    one.batch = piece;
    int64_t want = mx_conv_chunk(&one, SIZE_MAX);
    return ceil_div(piece, ceil_div(piece, want));
}

/* Runs pieces [lo, hi) of images piece by piece, in chunks that never
 * cross a piece's end, so the arithmetic is the same whichever thread runs
 * a piece and whether the pool split the range or not (a busy pool runs
 * the whole batch on the caller). */
static void forward_piece(void *arg, int64_t lo, int64_t hi, int worker)
{
    conv_call *c = arg;
    if (c->u) {
        const mx_conv_geom *g = c->g;
        mx_conv_geom gs;
        mx_winograd_slice_geom(g, c->o0, c->o1, &gs);
        void *scratch = piece_scratch_or_fail(c, worker, mx_winograd_scratch_bytes(&gs, c->piece));
        if (!scratch) return;
        for (int64_t p0 = lo; p0 < hi; p0 += c->piece) {
            int64_t b = hi - p0 < c->piece ? hi - p0 : c->piece;
            mx_winograd_forward_slice(g, c->o0, c->o1, c->u, c->x + p0 * in_image(g), b, c->bias,
                                      c->req == MX_REQ_ADD, c->y + p0 * out_image(g), scratch);
            if (c->o1 == g->out_c) fold_images(c, NULL, p0, b); /* the last slice: every channel written */
        }
        return;
    }
    if (c->packed && c->sampled_fwd) {
        const mx_conv_geom *g = c->g;
        const int64_t chunk = sampled_chunk_images(g, c->piece);
        void *scratch = piece_scratch_or_fail(c, worker, mx_direct_scratch_bytes(&c->sampled, chunk));
        float *xs = scratch ? piece_scratch(c, worker, 3, (size_t)(chunk * in_image(&c->sampled)) * sizeof(float))
                            : NULL;
        if (!xs) {
            atomic_store(&c->failed, 1);
            return;
        }
        for (int64_t p0 = lo; p0 < hi; p0 += c->piece) {
            const int64_t p1 = hi - p0 < c->piece ? hi : p0 + c->piece;
            for (int64_t n0 = p0; n0 < p1; n0 += chunk) {
                const int64_t b = p1 - n0 < chunk ? p1 - n0 : chunk;
                gather_sampled(g, c->x + n0 * in_image(g), b, xs);
                mx_direct_forward_part_fold(&c->sampled, c->packed, xs, b, 0, 1, c->bias, c->req == MX_REQ_ADD,
                                            c->fold, c->y + n0 * out_image(g), scratch);
            }
        }
        return;
    }
    if (c->packed) {
        const mx_conv_geom *g = c->g;
        void *scratch = piece_scratch_or_fail(c, worker, mx_direct_scratch_bytes(g, c->piece));
        if (!scratch) return;
        for (int64_t p0 = lo; p0 < hi; p0 += c->piece) {
            int64_t b = hi - p0 < c->piece ? hi - p0 : c->piece;
            mx_direct_forward_part_fold(g, c->packed, c->x + p0 * in_image(g), b, 0, 1, c->bias,
                                        c->req == MX_REQ_ADD, c->fold, c->y + p0 * out_image(g), scratch);
        }
        return;
    }
    float *col = piece_scratch_or_fail(c, worker, mx_conv_workspace_bytes(c->g, c->chunk));
    if (!col) return;
    for (int64_t p0 = lo; p0 < hi; p0 += c->piece) {
        int64_t p1 = p0 + c->piece < hi ? p0 + c->piece : hi;
        for (int64_t n0 = p0; n0 < p1; n0 += c->chunk)
            forward_chunk(c, NULL, n0, p1 - n0 < c->chunk ? p1 - n0 : c->chunk, col);
    }
}

/* Blocks [lo, hi) of tiles of a batch shared by the threads (Winograd). */
static void winograd_blocks(void *arg, int64_t lo, int64_t hi, int worker)
{
    conv_call *c = arg;
    const mx_conv_geom *g = c->g;
    void *scratch = piece_scratch_or_fail(c, worker, mx_winograd_block_bytes(g, g->batch));
    if (!scratch) return;
    mx_winograd_shared_blocks_run(g, c->u, g->batch, c->bias, lo, hi, c->shared, scratch);
}

/* Parts [lo, hi) of the output channels, every image (direct kernels). */
static void forward_parts(void *arg, int64_t lo, int64_t hi, int worker)
{
    conv_call *c = arg;
    const mx_conv_geom *g = c->g;
    void *scratch = piece_scratch_or_fail(c, worker, mx_direct_scratch_bytes(g, g->batch));
    if (!scratch) return;
    for (int64_t part = lo; part < hi; part++)
        mx_direct_forward_part_fold(g, c->packed, c->x, g->batch, part, c->parts, c->bias, c->req == MX_REQ_ADD,
                                    c->fold, c->y, scratch);
}

/* The weight-gradient turns of the pieces (mx_dw_turn): piece q waits for
 * piece q-1 to have written dw that far. No deadlock: the pool hands out
 * pieces in order, so the pieces before one that waits are running. */
typedef struct piece_turn {
    conv_call *c;
    int64_t q;
} piece_turn;

static bool piece_turn_wait(void *ctx, int64_t end)
{
    const piece_turn *t = ctx;
    if (t->q == 0) return true;
    while (atomic_load_explicit(&t->c->dw_written[t->q - 1], memory_order_acquire) < end) {
        if (atomic_load(&t->c->failed)) return false;
        sched_yield();
    }
    return true;
}

static void piece_turn_done(void *ctx, int64_t end)
{
    const piece_turn *t = ctx;
    atomic_store_explicit(&t->c->dw_written[t->q], end, memory_order_release);
}

/* Piece q's weight gradient (images [p0, p1)) added into dw in its turn
 * (written by piece 0 on a write request); false, with the call marked
 * failed, when an earlier piece failed. */
static bool weight_gradient_in_turn(conv_call *c, int64_t q, int64_t p0, int64_t p1, void *scratch)
{
    const mx_conv_geom *g = c->g;
    const float *x = c->x + p0 * in_image(g), *dy = c->dy + p0 * out_image(g);
    piece_turn t = {c, q};
    const mx_dw_turn turn = {piece_turn_wait, piece_turn_done, &t};
    const bool accumulate = q > 0 || c->dw_add;
    mx_status s = c->wino_dw ? mx_winograd_backward_weight_in_turn(g, x, dy, p1 - p0, accumulate, c->dw_turns,
                                                                   scratch, &turn)
                             : mx_direct_backward_weight_in_turn(g, x, dy, p1 - p0, accumulate, c->dw_turns,
                                                                 scratch, &turn);
    if (s != MX_OK) atomic_store(&c->failed, 1);
    return s == MX_OK;
}

/* dx of images [0, n) of a strided 1x1 layer g from its sampled data
 * gradient dxs (n, C, OH, OW): written (zeros off the stride grid) or
 * added on the grid. */
static void scatter_sampled(const mx_conv_geom *g, const float *dxs, int64_t n, bool add, float *dx)
{
    const int64_t sh = g->stride_h, sw = g->stride_w, oh = g->out_h, ow = g->out_w, h = g->in_h, w = g->in_w;
    for (int64_t plane = 0; plane < n * g->in_c; plane++) {
        const float *src = dxs + plane * oh * ow;
        float *dst = dx + plane * h * w;
        for (int64_t y = 0; y < h; y++) {
            float *row = dst + y * w;
            if (!add) memset(row, 0, (size_t)w * sizeof(float));
            if (y % sh != 0 || y / sh >= oh) continue; /* off the grid */
            const float *s = src + y / sh * ow;
            if (add)
                for (int64_t x = 0; x < ow; x++) row[x * sw] += s[x];
            else
                for (int64_t x = 0; x < ow; x++) row[x * sw] = s[x];
        }
    }
}

/* Lowered piece q's dx and its weight gradient added into dw in its turn:
 * piece 0 writes dw first (adds, on an add request), then makes its dx;
 * the next makes its dx meanwhile, then adds its dw. False, with the call
 * marked failed, when an earlier piece failed. */
static bool lowered_in_turn(conv_call *c, int64_t q, int64_t p0, int64_t p1, float *col)
{
    piece_turn t = {c, q};
    for (int pass = 0; pass < 2; pass++) {
        const bool dw_pass = (pass == 0) == (q == 0);
        if (dw_pass && !piece_turn_wait(&t, 1)) {
            atomic_store(&c->failed, 1);
            return false;
        }
        float beta_dw = q > 0 || c->dw_add ? 1.0f : 0.0f;
        for (int64_t n0 = p0; n0 < p1; n0 += c->chunk) {
            backward_chunk(c, NULL, n0, p1 - n0 < c->chunk ? p1 - n0 : c->chunk, col, c->dw_turns, beta_dw, dw_pass,
                           !dw_pass);
            beta_dw = 1.0f;
        }
        if (dw_pass) piece_turn_done(&t, 1);
    }
    return true;
}

static void backward_piece(void *arg, int64_t lo, int64_t hi, int worker)
{
    conv_call *c = arg;
    const mx_conv_geom *g = c->g;
    bool lowering = c->lower_dx || c->lower_dw;
    float *col = lowering ? piece_scratch(c, worker, 0, mx_conv_workspace_bytes(g, c->chunk)) : NULL;
    size_t wino_bytes = 0; /* Winograd's or the direct kernels' scratch */
    if (c->u) {
        mx_conv_geom gs; /* the slice of gb's output channels c->u holds */
        mx_winograd_slice_geom(&c->gb, c->o0, c->o1, &gs);
        wino_bytes = mx_winograd_scratch_bytes(&gs, c->piece);
    }
    if (c->wino_dw && mx_winograd_wgrad_scratch_bytes(g, c->piece) > wino_bytes)
        wino_bytes = mx_winograd_wgrad_scratch_bytes(g, c->piece);
    if (c->packed) wino_bytes = mx_direct_scratch_bytes(c->sampled_dx ? &c->sampled : g, c->piece);
    if (c->direct_dw && mx_direct_wgrad_scratch_bytes(g, c->piece) > wino_bytes)
        wino_bytes = mx_direct_wgrad_scratch_bytes(g, c->piece);
    /* The whole kernels never run beside the lowering (conv_backward turns
     * it off for them), so they take slot 0, as the forward pieces do: a
     * thread holds the larger of the two buffers, not both (VGG-16: 59 MB
     * of backward and 27 MB of forward scratch a thread). */
    void *wino = wino_bytes ? piece_scratch(c, worker, lowering ? 3 : 0, wino_bytes) : NULL;
    const int64_t sampled_chunk = c->sampled_dx ? sampled_chunk_images(g, c->piece) : 0;
    float *dxs = c->sampled_dx ? piece_scratch(c, worker, 3, (size_t)(sampled_chunk * in_image(&c->sampled)) *
                                                                 sizeof(float))
                               : NULL;
    if ((lowering && !col) || (wino_bytes && !wino) || (c->sampled_dx && !dxs)) {
        atomic_store(&c->failed, 1);
        return;
    }
    int64_t dw_size = g->out_c * (g->in_c / g->groups) * g->k_h * g->k_w;
    for (int64_t p0 = lo; p0 < hi; p0 += c->piece) {
        int64_t p1 = p0 + c->piece < hi ? p0 + c->piece : hi;
        /* Pieces start at multiples of c->piece: p0 names its own gradient. */
        int64_t q = p0 / c->piece;
        float *dw = !c->need_dw || c->dw_turns ? NULL
                    : c->dw_first ? (q == 0 ? c->dw_first : c->dw_parts + (q - 1) * dw_size)
                                  : c->dw_parts + q * dw_size;
        if (c->u)
            mx_winograd_forward_slice(&c->gb, c->o0, c->o1, c->u, c->dy + p0 * out_image(g), p1 - p0, NULL,
                                      c->req == MX_REQ_ADD, c->dx + p0 * in_image(g), wino);
        if (c->wino_dw && !c->dw_turns)
            mx_winograd_backward_weight(g, c->x + p0 * in_image(g), c->dy + p0 * out_image(g), p1 - p0, false, dw,
                                        wino);
        if (c->packed && c->sampled_dx)
            for (int64_t n0 = p0; n0 < p1; n0 += sampled_chunk) {
                const int64_t nb = p1 - n0 < sampled_chunk ? p1 - n0 : sampled_chunk;
                mx_direct_backward_data(&c->sampled, c->packed, c->dy + n0 * out_image(g), nb, false, dxs, wino);
                scatter_sampled(g, dxs, nb, c->req == MX_REQ_ADD, c->dx + n0 * in_image(g));
            }
        else if (c->packed)
            mx_direct_backward_data(g, c->packed, c->dy + p0 * out_image(g), p1 - p0, c->req == MX_REQ_ADD,
                                    c->dx + p0 * in_image(g), wino);
        if (c->direct_dw && !c->dw_turns)
            mx_direct_backward_weight(g, c->x + p0 * in_image(g), c->dy + p0 * out_image(g), p1 - p0, false, dw,
                                      wino);
        if (c->dw_turns && !lowering && !weight_gradient_in_turn(c, q, p0, p1, wino)) return;
        if (!lowering) continue;
        if (c->dw_turns) {
            if (!lowered_in_turn(c, q, p0, p1, col)) return;
            continue;
        }
        float beta_dw = 0.0f;
        for (int64_t n0 = p0; n0 < p1; n0 += c->chunk) {
            backward_chunk(c, NULL, n0, p1 - n0 < c->chunk ? p1 - n0 : c->chunk, col, dw, beta_dw, true, true);
            beta_dw = 1.0f;
        }
    }
}

/* dw (per req) = sum of the pieces' gradients, in piece order; with
 * first_in_dw, dw already holds piece 0's and parts the others' (the same
 * additions in the same order). */
typedef struct dw_sum_job {
    const float *parts;
    int64_t n_parts, size;
    float *dw;
    bool accumulate, first_in_dw;
} dw_sum_job;

static void dw_sum_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const dw_sum_job *j = arg;
    const int64_t q0 = j->first_in_dw ? 0 : 1;
    for (int64_t i = lo; i < hi; i++) {
        float s = j->first_in_dw ? j->dw[i] : j->parts[i];
        for (int64_t q = q0; q < j->n_parts; q++) s += j->parts[q * j->size + i];
        j->dw[i] = j->accumulate ? j->dw[i] + s : s;
    }
}

/* The workspace, or a buffer of `need` bytes allocated for this call
 * (*owned set) when the given one is too small. */
static mx_status take_workspace(void *ws, size_t ws_bytes, size_t need, float **out, void **owned)
{
    *owned = NULL;
    if (need == 0 || (ws && ws_bytes >= need)) {
        *out = ws;
        return MX_OK;
    }
    *owned = mx_malloc(need);
    if (!*owned) return MX_ERR_NOMEM;
    *out = *owned;
    return MX_OK;
}

/* Winograd filter transforms, split by output-channel parts across the
 * pool (each part writes its own share: the same bytes as one call). */
typedef struct filter_job {
    const mx_conv_geom *g;
    const float *w;
    float *u;
    bool backward;
    int64_t o0, o1; /* the slice of output channels (of gb when backward) */
    int64_t parts;
} filter_job;

static void filter_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const filter_job *j = arg;
    for (int64_t part = lo; part < hi; part++)
        mx_winograd_transform_filter_slice_part(j->g, j->w, j->backward, j->o0, j->o1, j->u, part, j->parts);
}

/* Output channels [o0, o1) of g's filters w transformed (backward: of gb's). */
static void transform_filters_into(mx_threadpool *pool, const mx_conv_geom *g, const float *w, bool backward,
                                   int64_t o0, int64_t o1, float *u)
{
    filter_job j = {.g = g, .w = w, .u = u, .backward = backward, .o0 = o0, .o1 = o1,
                    .parts = 4 * (int64_t)mx_threadpool_size(pool)};
    mx_parallel_for(pool, j.parts, 1, filter_units, &j);
}

/* The transformed filters, output channels [o0, o1), in the caller's
 * lease, slot 2 (64-byte aligned, which lets big transforms stream), or
 * NULL when out of memory. */
static float *transform_filters(mx_threadpool *pool, mx_scratch_lease *lease, const mx_conv_geom *g, const float *w,
                                bool backward, int64_t o0, int64_t o1)
{
    mx_conv_geom gb, gs;
    mx_winograd_backward_geom(g, &gb);
    mx_winograd_slice_geom(backward ? &gb : g, o0, o1, &gs);
    float *u = mx_scratch_buffer(pool, lease, 2, mx_winograd_filter_bytes(&gs));
    if (u) transform_filters_into(pool, g, w, backward, o0, o1, u);
    return u;
}

/* Transformed filters larger than this are made and used a slice of
 * output channels at a time (winograd_sliced): only one slice's are held.
 * ResNet-50's and VGG-16's 512 -> 512 layers (36 MiB whole) run in 4
 * slices. The input transform is then made once a slice, yet the forward
 * is faster, a slice's filters staying in cache (batch 16, 2 threads:
 * 512 -> 512 on 28x28 54.6 -> 49.3 ms, on 14x14 18.9 -> 16.8, on 7x7
 * 6.6 -> 6.4). */
#define WINOGRAD_SLICE_BYTES (12u << 20)

/* Output channels per slice of g's transformed filters (PANEL-wide
 * multiples, the slices even), or g->out_c when they are held whole. */
static int64_t winograd_slice_width(const mx_conv_geom *g)
{
    if (mx_winograd_filter_bytes(g) <= WINOGRAD_SLICE_BYTES) return g->out_c;
    const int64_t panel = 32;
    mx_conv_geom one;
    mx_winograd_slice_geom(g, 0, panel, &one);
    int64_t width = (int64_t)(WINOGRAD_SLICE_BYTES / mx_winograd_filter_bytes(&one)) * panel;
    if (width < panel) width = panel;
    const int64_t slices = ceil_div(g->out_c, width);
    return ceil_div(ceil_div(g->out_c, slices), panel) * panel;
}

/* The direct kernels' weight packing, split like the filter transforms. */
typedef struct pack_job {
    const mx_conv_geom *g;
    const float *w;
    float *packed;
    bool backward;
    int64_t parts;
} pack_job;

static void pack_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const pack_job *j = arg;
    for (int64_t part = lo; part < hi; part++) {
        if (j->backward) mx_direct_pack_weights_backward_part(j->g, j->w, j->packed, part, j->parts);
        else mx_direct_pack_weights_part(j->g, j->w, j->packed, part, j->parts);
    }
}

static void pack_direct_into(mx_threadpool *pool, const mx_conv_geom *g, const float *w, bool backward, float *packed)
{
    pack_job j = {.g = g, .w = w, .packed = packed, .backward = backward,
                  .parts = 4 * (int64_t)mx_threadpool_size(pool)};
    run_units(pool, j.parts, (int64_t)(mx_direct_packed_bytes(g) / sizeof(float)), pack_units, &j);
}

/* The direct kernels' packed weights in the caller's lease, slot 2, or
 * NULL when out of memory. */
static float *pack_direct(mx_threadpool *pool, mx_scratch_lease *lease, const mx_conv_geom *g, const float *w,
                          bool backward)
{
    float *packed = mx_scratch_buffer(pool, lease, 2, mx_direct_packed_bytes(g));
    if (packed) pack_direct_into(pool, g, w, backward, packed);
    return packed;
}

/* Which forward kernel a layer runs on: the one place that decides, for
 * forward passes and for what mx_conv_prepare derives. */
typedef enum forward_path { PATH_DEPTHWISE, PATH_WINOGRAD, PATH_DIRECT, PATH_IM2COL } forward_path;

/* Tiles in a known batch below which the direct kernels, where they run
 * at full width (mx_direct_vector_lead: not MX_DIRECT_NO_LEAD), beat
 * Winograd's products on a layer they take: those are then a few rows per
 * transform point against every transformed filter. ResNet-50's 256 -> 256
 * 3x3 layers on 14x14 in batch-1 prediction (16 tiles; mxpredict, 2 Xeon
 * cores, prepared weights either way) 1.6 -> 1.1 ms each, the network
 * 41-43 -> 38.4-38.7 ms; its 128 -> 128 on 28x28 (49 tiles) keep Winograd
 * (2.5 against 3.2 ms for the four). */
#define DIRECT_BEFORE_TILES 32

static bool direct_beats_few_tiles(const mx_conv_geom *g)
{
    if (g->batch <= 0 || mx_direct_vector_lead() == MX_DIRECT_NO_LEAD) return false;
    const int64_t m = mx_winograd_tile(g);
    const int64_t tiles = g->batch * ceil_div(g->out_h, m) * ceil_div(g->out_w, m);
    return tiles < DIRECT_BEFORE_TILES && mx_direct_forward_profitable(g);
}

static forward_path pick_forward_path(const mx_conv_geom *g)
{
    if (mx_depthwise_supported(g)) return PATH_DEPTHWISE;
    if (mx_winograd_profitable(g) && !direct_beats_few_tiles(g)) return PATH_WINOGRAD;
    if (mx_direct_forward_profitable(g)) return PATH_DIRECT;
    return PATH_IM2COL;
}

struct mx_conv_prepared {
    forward_path path;
    mx_conv_geom g;   /* as prepared: another geometry derives afresh */
    float *weights;   /* Winograd's transformed filters or the direct packing (64-byte aligned, in raw);
                         NULL for the other paths */
    void *raw;
};

/* Batches from this size up derive their weights per pass: the work is
 * then a small share of the layer's (ResNet-50 at batch 16: 60.5 against
 * 58.2 images/s kept, for 173 MiB more memory; at batch 1 24 against 39
 * ms per image, for 128 MiB). */
#define PREPARE_MAX_BATCH 4

mx_status mx_conv_prepare(mx_threadpool *pool, const mx_conv_geom *g, const float *w, mx_conv_prepared **out)
{
    *out = NULL;
    mx_conv_prepared *p = mx_calloc(1, sizeof(*p));
    if (!p) return MX_ERR_NOMEM;
    p->g = *g;
    p->path = pick_forward_path(g);
    size_t bytes = g->batch >= PREPARE_MAX_BATCH ? 0
                   : p->path == PATH_WINOGRAD    ? mx_winograd_filter_bytes(g)
                   : p->path == PATH_DIRECT      ? mx_direct_packed_bytes(g)
                                                 : 0;
    if (bytes) {
        p->raw = mx_malloc(bytes + 64);
        if (!p->raw) {
            free(p);
            return MX_ERR_NOMEM;
        }
        p->weights = (float *)(((uintptr_t)p->raw + 63) & ~(uintptr_t)63);
        if (p->path == PATH_WINOGRAD) transform_filters_into(pool, g, w, false, 0, g->out_c, p->weights);
        else pack_direct_into(pool, g, w, false, p->weights);
    }
    *out = p;
    return MX_OK;
}

void mx_conv_prepared_free(mx_conv_prepared *p)
{
    if (!p) return;
    free(p->raw);
    free(p);
}

/* prep's weights for path on g, or NULL (none prepared, or for another
 * layer or batch). */
static const float *prepared_weights(const mx_conv_prepared *prep, const mx_conv_geom *g, forward_path path)
{
    return prep && prep->path == path && memcmp(&prep->g, g, sizeof(*g)) == 0 ? prep->weights : NULL;
}

static mx_status scratch_failed(void)
{
    return MX_ERROR(MX_ERR_NOMEM, "convolution: cannot allocate a thread's column buffer");
}

mx_status mx_conv_forward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                          const float *bias, float *y, mx_req req, void *ws, size_t ws_bytes)
{
    return mx_conv_forward_act(pool, g, x, w, bias, NULL, y, req, ws, ws_bytes);
}

/* c's Winograd forward (g = c->g: a layer, or the gb of a layer's
 * backward-data pass) a slice of `width` output channels at a time, each
 * slice's filters transformed from the layer's w and then used by every
 * piece of images; the activation is folded in with the last slice. */
static mx_status winograd_sliced(conv_call *c, const mx_conv_geom *layer, const float *w, bool backward, int64_t width,
                                 bool run_last)
{
    const mx_conv_geom *g = c->g;
    for (int64_t o0 = 0; o0 < g->out_c; o0 += width) {
        c->o0 = o0;
        c->o1 = g->out_c - o0 < width ? g->out_c : o0 + width;
        c->u = transform_filters(c->pool, c->lease, layer, w, backward, c->o0, c->o1);
        if (!c->u) return MX_ERR_NOMEM;
        if (c->o1 == g->out_c && !run_last) break;
        mx_parallel_for(c->pool, g->batch, c->piece, forward_piece, c);
        if (atomic_load(&c->failed)) return scratch_failed();
    }
    return MX_OK;
}

static mx_status conv_forward_act(mx_threadpool *pool, mx_scratch_lease *lease, const mx_conv_geom *g,
                                  const mx_conv_prepared *prep, const float *x, const float *w, const float *bias,
                                  const mx_fold *fold, float *y, mx_req req, void *ws, size_t ws_bytes)
{
    if (req == MX_REQ_NULL || g->batch == 0) return MX_OK;
    if (fold && fold->kind == MX_FOLD_NONE) fold = NULL;
    const forward_path path = pick_forward_path(g);
    /* A fold with an add request is a residual sum's (y = fold(y + conv),
     * mx_conv_forward_residual): the direct kernels apply it as they store;
     * the other paths add, then run it over y. */
    if (fold && req == MX_REQ_ADD && path != PATH_DIRECT) {
        MX_TRY(conv_forward_act(pool, lease, g, prep, x, w, bias, NULL, y, req, ws, ws_bytes));
        mx_fold_forward(pool, fold, y, g->batch * out_image(g));
        return MX_OK;
    }
    if (path == PATH_DEPTHWISE) {
        return mx_depthwise_forward(pool, g, x, w, bias, fold, y, req);
    }
    conv_call c = {.g = g, .x = x, .w = w, .bias = bias, .y = y, .req = req, .fold = fold, .pool = pool,
                   .lease = lease};
    atomic_init(&c.failed, 0);
    const int threads = mx_threadpool_size(pool);
    c.piece = piece_images(g, threads);
    if (path == PATH_WINOGRAD) {
        /* Fewer multiplications than SGEMM can do: per thread, whole images.
         * A batch too small to split shares its blocks of tiles across the
         * threads where it has several (batch 1 in prediction), else runs
         * on the caller (still faster than lowering on every thread). */
        const int64_t blocks = c.piece == 0 && threads > 1 ? mx_winograd_shared_blocks(g, g->batch) : 0;
        if (c.piece == 0) c.piece = g->batch;
        c.o1 = g->out_c;
        c.u = prepared_weights(prep, g, path);
        const int64_t width = c.u || blocks > 1 ? g->out_c : winograd_slice_width(g);
        if (width < g->out_c) return winograd_sliced(&c, g, w, false, width, true);
        if (!c.u) c.u = transform_filters(pool, lease, g, w, false, 0, g->out_c);
        if (!c.u) return MX_ERR_NOMEM;
        if (blocks > 1) {
            /* The caller's lease, slot 1 (slot 0 is its blocks' scratch). */
            c.shared = mx_scratch_buffer(pool, lease, 1, mx_winograd_shared_bytes(g, g->batch));
            if (!c.shared) return MX_ERR_NOMEM;
            mx_winograd_shared_begin(g, x, g->batch, bias, c.shared);
            mx_parallel_for(pool, blocks, ceil_div(blocks, threads), winograd_blocks, &c);
            if (atomic_load(&c.failed)) return scratch_failed();
            mx_winograd_shared_end(g, g->batch, req == MX_REQ_ADD, y, c.shared);
            if (fold) mx_fold_forward(pool, fold, y, g->batch * out_image(g));
            return MX_OK;
        }
        mx_parallel_for(pool, g->batch, c.piece, forward_piece, &c);
        return atomic_load(&c.failed) ? scratch_failed() : MX_OK;
    }
    if (path == PATH_DIRECT) {
        c.packed = prepared_weights(prep, g, path);
        if (!c.packed) c.packed = pack_direct(pool, lease, g, w, false);
        if (!c.packed) return MX_ERR_NOMEM;
        const int64_t panels = mx_direct_forward_panels(g);
        if (c.piece == 0 && threads > 1 && panels > 1) {
            /* Too few images to give each thread its own (batch 1 in
             * prediction): the threads share them, each its output
             * channels, the same bits as one thread. */
            c.parts = panels < threads ? panels : threads;
            mx_parallel_for(pool, c.parts, 1, forward_parts, &c);
            return atomic_load(&c.failed) ? scratch_failed() : MX_OK;
        }
        if (c.piece == 0) c.piece = g->batch;
        /* Its packing is the strided layer's (the same rows and taps). */
        c.sampled_fwd = strided_pointwise(g, &c.sampled) && mx_direct_supported(&c.sampled);
        mx_parallel_for(pool, g->batch, c.piece, forward_piece, &c);
        return atomic_load(&c.failed) ? scratch_failed() : MX_OK;
    }
    if (c.piece > 0) {
        c.chunk = piece_chunk(g, c.piece);
        mx_parallel_for(pool, g->batch, c.piece, forward_piece, &c);
        return atomic_load(&c.failed) ? scratch_failed() : MX_OK;
    }
    /* One chunk at a time, each shared across the threads. */
    c.chunk = mx_conv_chunk(g, ws_bytes);
    float *col;
    void *owned;
    MX_TRY(take_workspace(ws, ws_bytes, mx_conv_workspace_bytes(g, c.chunk), &col, &owned));
    for (int64_t n0 = 0; n0 < g->batch; n0 += c.chunk)
        forward_chunk(&c, pool, n0, g->batch - n0 < c.chunk ? g->batch - n0 : c.chunk, col);
    free(owned);
    return MX_OK;
}

static mx_status conv_backward(mx_threadpool *pool, mx_scratch_lease *lease, const mx_conv_geom *g, const float *x,
                               const float *w, const float *dy, float *dx, mx_req req_dx, float *dw, mx_req req_dw,
                               void *ws, size_t ws_bytes)
{
    bool need_dx = dx && req_dx != MX_REQ_NULL, need_dw = dw && req_dw != MX_REQ_NULL;
    const int64_t dw_size = g->out_c * (g->in_c / g->groups) * g->k_h * g->k_w;
    if (need_dw && req_dw != MX_REQ_ADD && g->batch == 0) memset(dw, 0, (size_t)dw_size * sizeof(float));
    if ((!need_dx && !need_dw) || g->batch == 0) return MX_OK;
    if (mx_depthwise_supported(g)) return mx_depthwise_backward(pool, g, x, w, dy, dx, req_dx, dw, req_dw);
    conv_call c = {.g = g, .x = x, .w = w, .dy = dy, .dx = dx, .req = req_dx, .need_dx = need_dx,
                   .need_dw = need_dw, .lower_dx = need_dx, .lower_dw = need_dw, .pool = pool, .lease = lease};
    atomic_init(&c.failed, 0);
    c.piece = backward_piece_images(g, mx_threadpool_size(pool), need_dw);
    bool wino = mx_winograd_profitable(g), direct = !wino && mx_direct_profitable(g);
    /* A strided 1x1 layer's data gradient runs on its sampled pixels
     * (strided_pointwise), where the direct kernels win: its weight
     * gradient goes with them. With a full lead, ragged or not: ResNet-50
     * at batch 16, 2 threads (mxtrain --time): res5a's 1x1/2 projection,
     * lowered before, backward 28.4 -> 21.6 ms; the six strided 1x1
     * layers' 90.9 -> 70.6 ms. With a pointwise lead (Xeon), where the
     * sampled layer is one the direct kernels win on (not ragged), instead
     * of their strided backward-data by phases: res3a's and res4a's four
     * 1x1/2 layers' backward 88.9 -> 76.5 ms, the six 113.6-117.3 ->
     * 105.6-109.2 (3 alternated runs); res5a's (7x7, ragged) would lose
     * (24.6 + 8.0 -> 41.0 + 10.2 ms). */
    const mx_direct_lead lead = mx_direct_vector_lead();
    c.sampled_dx = need_dx && !wino && strided_pointwise(g, &c.sampled) && mx_direct_supported(&c.sampled) &&
                   mx_direct_supported(g) &&
                   (lead == MX_DIRECT_LEAD || (lead == MX_DIRECT_POINTWISE_LEAD && mx_direct_profitable(&c.sampled)));
    if (c.sampled_dx) direct = true;
    if (wino || direct) { /* whole images per thread, never lowered */
        c.wino_dw = wino && need_dw;
        c.direct_dw = direct && need_dw;
        c.lower_dw = c.lower_dx = false;
        if (c.piece == 0) c.piece = g->batch;
    }
    int64_t n_pieces = c.piece > 0 ? ceil_div(g->batch, c.piece) : 0;
    if (!wino && !direct && c.piece > 0 && need_dw &&
        (size_t)(n_pieces * dw_size) * sizeof(float) > MAX_DW_PARTS_BYTES)
        c.piece = 0;
    /* Where the whole kernels write the weight gradient, the pieces add
     * theirs into dw in turn (mx_dw_turn); lowered, two pieces with a dx to
     * make do too, the second making its dx while the first makes its dw
     * (lowered_in_turn: no part to hold, 8 MiB for ResNet-50's res5a 1x1/2,
     * and no slower; without a dx, or with more pieces, their dw would wait
     * in a chain). */
    if (need_dw && n_pieces > 1 && (wino || direct || (n_pieces == 2 && c.piece > 0 && need_dx))) {
        c.dw_turns = dw;
        c.dw_add = req_dw == MX_REQ_ADD;
    }
    /* Otherwise a write request takes piece 0's gradient in dw itself: one
     * part less. */
    const bool first_in_dw = req_dw != MX_REQ_ADD;
    const int64_t n_parts = c.dw_turns ? 0 : n_pieces - (first_in_dw ? 1 : 0);
    if (c.piece > 0 && need_dw && !c.dw_turns) {
        if (first_in_dw) c.dw_first = dw;
        /* The caller's lease, slot 1: pieces (the caller's included) lower into slot 0. */
        if (n_parts > 0) c.dw_parts = mx_scratch_buffer(pool, lease, 1, (size_t)(n_parts * dw_size) * sizeof(float));
        if (n_parts > 0 && !c.dw_parts) {
            if (wino || direct) return MX_ERR_NOMEM;
            c.piece = 0;
        }
    }
    if (wino && need_dx) {
        mx_winograd_backward_geom(g, &c.gb);
        const int64_t width = winograd_slice_width(&c.gb);
        c.o0 = 0;
        c.o1 = c.gb.out_c;
        if (width < c.gb.out_c) {
            /* dx slice by slice, as the forward of gb, but for the last
             * slice, which the pieces below make beside dw. The split
             * costs ResNet-50's res5 3x3 layers about 1.2 ms of their
             * backward's 10.5 (batch 16, 2 threads), for 27 MiB less. */
            conv_call d = {.g = &c.gb, .x = dy, .y = dx, .req = req_dx, .piece = c.piece, .pool = pool,
                           .lease = lease};
            atomic_init(&d.failed, 0);
            MX_TRY(winograd_sliced(&d, g, w, true, width, false));
            c.u = d.u;
            c.o0 = d.o0;
        } else {
            c.u = transform_filters(pool, lease, g, w, true, 0, g->in_c);
            if (!c.u) return MX_ERR_NOMEM;
        }
    }
    if (direct && need_dx) {
        c.packed = pack_direct(pool, lease, c.sampled_dx ? &c.sampled : g, w, true);
        if (!c.packed) return MX_ERR_NOMEM;
    }
    if (c.piece > 0) {
        c.chunk = piece_chunk(g, c.piece);
        if (c.dw_turns) {
            c.dw_written = mx_calloc((size_t)n_pieces, sizeof(*c.dw_written));
            if (!c.dw_written) return MX_ERR_NOMEM;
            for (int64_t q = 0; q < n_pieces; q++) atomic_init(&c.dw_written[q], 0);
        }
        mx_parallel_for(pool, g->batch, c.piece, backward_piece, &c);
        free(c.dw_written);
        if (atomic_load(&c.failed)) return scratch_failed();
        if (need_dw && n_parts > 0) {
            dw_sum_job j = {.parts = c.dw_parts, .n_parts = n_parts, .size = dw_size, .dw = dw,
                            .accumulate = req_dw == MX_REQ_ADD, .first_in_dw = first_in_dw};
            run_units(pool, dw_size, dw_size * (n_parts + 1), dw_sum_units, &j);
        }
        return MX_OK;
    }
    c.chunk = mx_conv_chunk(g, ws_bytes);
    float *col;
    void *owned;
    MX_TRY(take_workspace(ws, ws_bytes, mx_conv_workspace_bytes(g, c.chunk), &col, &owned));
    float beta_dw = req_dw == MX_REQ_ADD ? 1.0f : 0.0f; /* 1 after the first product */
    for (int64_t n0 = 0; n0 < g->batch; n0 += c.chunk) {
        backward_chunk(&c, pool, n0, g->batch - n0 < c.chunk ? g->batch - n0 : c.chunk, col, dw, beta_dw, true,
                       true);
        beta_dw = 1.0f;
    }
    free(owned);
    return MX_OK;
}

/* The public calls hold one lease of the pool's shared scratch (slots 1
 * and 2) for the whole call. */
mx_status mx_conv_forward_act(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                              const float *bias, const mx_fold *fold, float *y, mx_req req, void *ws, size_t ws_bytes)
{
    return mx_conv_forward_prepared(pool, g, NULL, x, w, bias, fold, y, req, ws, ws_bytes);
}

/* conv_forward_act under a lease of its own. */
static mx_status conv_forward_leased(mx_threadpool *pool, const mx_conv_geom *g, const mx_conv_prepared *prep,
                                     const float *x, const float *w, const float *bias, const mx_fold *fold,
                                     float *y, mx_req req, void *ws, size_t ws_bytes)
{
    mx_scratch_lease *lease;
    MX_TRY(mx_scratch_take(pool, &lease));
    mx_status s = conv_forward_act(pool, lease, g, prep, x, w, bias, fold, y, req, ws, ws_bytes);
    mx_scratch_give(pool, lease);
    return s;
}

mx_status mx_conv_forward_prepared(mx_threadpool *pool, const mx_conv_geom *g, const mx_conv_prepared *prep,
                                   const float *x, const float *w, const float *bias, const mx_fold *fold, float *y,
                                   mx_req req, void *ws, size_t ws_bytes)
{
    MX_TRY(mx_fold_check_req(fold, req, "Convolution"));
    return conv_forward_leased(pool, g, prep, x, w, bias, fold, y, req, ws, ws_bytes);
}

mx_status mx_conv_forward_residual(mx_threadpool *pool, const mx_conv_geom *g, const mx_conv_prepared *prep,
                                   const float *x, const float *w, const float *bias, const float *addend,
                                   const mx_fold *fold, float *y, void *ws, size_t ws_bytes)
{
    if (g->batch == 0) return MX_OK;
    /* Only where the shortcut is read again later (the planner gives the
     * output the shortcut's memory otherwise). */
    if (addend != y) memcpy(y, addend, (size_t)(g->batch * out_image(g)) * sizeof(float));
    return conv_forward_leased(pool, g, prep, x, w, bias, fold, y, MX_REQ_ADD, ws, ws_bytes);
}

mx_status mx_conv_backward(mx_threadpool *pool, const mx_conv_geom *g, const float *x, const float *w,
                           const float *dy, float *dx, mx_req req_dx, float *dw, mx_req req_dw, void *ws,
                           size_t ws_bytes)
{
    mx_scratch_lease *lease;
    MX_TRY(mx_scratch_take(pool, &lease));
    mx_status s = conv_backward(pool, lease, g, x, w, dy, dx, req_dx, dw, req_dw, ws, ws_bytes);
    mx_scratch_give(pool, lease);
    return s;
}
