/*
 * pooling.c - Pooling: max, average or sum over sliding windows of the
 * spatial axes of (N,C,W), (N,C,H,W) or (N,C,D,H,W) data, as MXNet 1.9.1's
 * CPU kernels do it:
 *   - a window starts at o*stride - pad and is clipped to the data; padded
 *     positions are never compared (max) nor summed;
 *   - avg divides by the window clipped to the padded input when
 *     count_include_pad (the default), else by the clipped window; an
 *     empty window gives NaN, max over an empty window gives -FLT_MAX;
 *   - max backward routes each output's gradient to the first element of
 *     its window (raster order) that equals the output;
 *   - output size per axis is floor((x+2p-k)/s)+1 (valid) or
 *     ceil((x+2p-k)/s)+1 (full); global_pool pools each whole plane.
 * Lp pooling, the 'same' convention and channels-last layouts are refused
 * with MX_ERR_UNSUPPORTED.
 *
 * Kernels work a plane at a time (planes are split across the kernel
 * pool), an output row at a time: the columns whose windows lie inside the
 * row W outputs at a time in vectors (strides 1 and 2, see POOL_KERNELS),
 * the others one by one; global pooling reduces each plane contiguously.
 */
#include "ops/op.h"
#include "ops/pooling.h"
#include "ops/cpu/simd.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const pool_types[] = {"max", "avg", "sum", "lp", NULL};
static const char *const pool_conventions[] = {"valid", "full", "same", NULL};
static const char *const pool_layouts[] = {"None", "NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC", NULL};

static const mx_param_desc pool_param_table[] = {
    {"kernel", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(pool_params, kernel),
     "pooling window: (x,), (y, x) or (d, y, x); ignored with global_pool"},
    {"pool_type", MX_PARAM_ENUM, "max", 1, 0, pool_types, offsetof(pool_params, pool_type),
     "max, avg or sum (lp is not supported)"},
    {"global_pool", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(pool_params, global_pool),
     "pool over the whole spatial extent, ignoring kernel, stride and pad"},
    {"cudnn_off", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(pool_params, cudnn_off),
     "GPU: True uses mxc's own kernels instead of cuDNN's for max / avg (the CPU has one implementation)"},
    {"pooling_convention", MX_PARAM_ENUM, "valid", 1, 0, pool_conventions,
     offsetof(pool_params, pooling_convention), "output size rounding: valid (floor) or full (ceil)"},
    {"stride", MX_PARAM_TUPLE, "()", 1, 1e9, NULL, offsetof(pool_params, stride),
     "window step per spatial axis; default 1 each"},
    {"pad", MX_PARAM_TUPLE, "()", 0, 1e9, NULL, offsetof(pool_params, pad),
     "implicit padding on both sides per spatial axis; default 0 each"},
    {"count_include_pad", MX_PARAM_BOOL, "True", 1, 0, NULL, offsetof(pool_params, count_include_pad),
     "avg only: count padded positions in the divisor"},
    {"layout", MX_PARAM_ENUM, "None", 1, 0, pool_layouts, offsetof(pool_params, layout),
     "NCW, NCHW or NCDHW (None: from the data rank)"},
};

static const char *tuple_str(const mx_tuple *t, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)t->v[i]);
    if (t->ndim == 1 && used < size) used += (size_t)snprintf(buf + used, size - used, ",");
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

static mx_status pool_check(const void *p)
{
    const pool_params *pp = p;
    char a[96], b[96];
    if (pp->pool_type == POOL_LP)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pooling: parameter 'pool_type' value 'lp' is not supported "
                                            "(use max, avg or sum)");
    if (pp->pooling_convention == CONV_SAME)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pooling: parameter 'pooling_convention' value 'same' is not "
                                            "supported (use valid or full)");
    if (pp->layout >= LAYOUT_NWC)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Pooling: parameter 'layout' value '%s' is not supported "
                                            "(channels-first only: NCW, NCHW, NCDHW)",
                        pool_layouts[pp->layout]);
    int nk = pp->kernel.ndim;
    if (!pp->global_pool && nk <= 0)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: parameter 'kernel' is required unless global_pool is set");
    if (nk > 3)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: parameter 'kernel' has bad value '%s': %dD pooling is not "
                                        "supported (1, 2 or 3 spatial axes)",
                        tuple_str(&pp->kernel, a, sizeof(a)), nk);
    if (nk > 0 && pp->stride.ndim > 0 && pp->stride.ndim != nk)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: parameter 'stride' has bad value '%s': it must have as many "
                                        "axes as kernel %s",
                        tuple_str(&pp->stride, a, sizeof(a)), tuple_str(&pp->kernel, b, sizeof(b)));
    if (nk > 0 && pp->pad.ndim > 0 && pp->pad.ndim != nk)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: parameter 'pad' has bad value '%s': it must have as many "
                                        "axes as kernel %s",
                        tuple_str(&pp->pad, a, sizeof(a)), tuple_str(&pp->kernel, b, sizeof(b)));
    if (nk > 0 && pp->layout != LAYOUT_NONE && pp->layout - LAYOUT_NONE != nk)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: parameter 'layout' has bad value '%s' for kernel %s",
                        pool_layouts[pp->layout], tuple_str(&pp->kernel, a, sizeof(a)));
    return MX_OK;
}

static int pool_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int pool_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}


void mx_pool_geometry(const pool_params *pp, const mx_shape *data, const mx_shape *outp, pool_geom *g)
{
    int nsp = data->ndim - 2;
    g->planes = data->dims[0] * data->dims[1];
    for (int a = 0; a < 3; a++) {
        int i = a - (3 - nsp); /* index into the spatial axes, < 0 for padding axes */
        if (i < 0) {
            g->in[a] = g->out[a] = g->k[a] = g->s[a] = 1;
            g->p[a] = 0;
            continue;
        }
        g->in[a] = data->dims[2 + i];
        g->out[a] = outp->dims[2 + i];
        if (pp->global_pool) {
            g->k[a] = g->in[a];
            g->s[a] = 1;
            g->p[a] = 0;
        } else {
            g->k[a] = pp->kernel.v[i];
            g->s[a] = pp->stride.ndim > 0 ? pp->stride.v[i] : 1;
            g->p[a] = pp->pad.ndim > 0 ? pp->pad.v[i] : 0;
        }
    }
}

static mx_status pool_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const pool_params *pp = p;
    char a[128], b[96];
    const mx_shape *d = &in[0];
    if (d->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Pooling: the shape of data is unknown");
    if (d->ndim < 3 || d->ndim > 5)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: data has shape %s; it must be 3-D (batch, channel, x), "
                                        "4-D (batch, channel, y, x) or 5-D (batch, channel, d, y, x)",
                        mx_shape_str(d, a, sizeof(a)));
    int nsp = d->ndim - 2;
    if (pp->layout != LAYOUT_NONE && pp->layout - LAYOUT_NONE != nsp)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: layout %s does not match data shape %s",
                        pool_layouts[pp->layout], mx_shape_str(d, a, sizeof(a)));
    out[0] = *d;
    if (pp->global_pool) {
        for (int i = 0; i < nsp; i++) out[0].dims[2 + i] = 1;
        return MX_OK;
    }
    if (pp->kernel.ndim != nsp)
        return MX_ERROR(MX_ERR_INVALID, "Pooling: kernel %s needs %d-D data, got data shape %s",
                        tuple_str(&pp->kernel, b, sizeof(b)), pp->kernel.ndim + 2, mx_shape_str(d, a, sizeof(a)));
    for (int i = 0; i < nsp; i++) {
        int64_t x = d->dims[2 + i], k = pp->kernel.v[i];
        int64_t s = pp->stride.ndim > 0 ? pp->stride.v[i] : 1, pad = pp->pad.ndim > 0 ? pp->pad.v[i] : 0;
        if (k > x + 2 * pad)
            return MX_ERROR(MX_ERR_INVALID, "Pooling: kernel size (%lld) exceeds input (%lld padded to %lld) "
                                            "on spatial axis %d of data shape %s",
                            (long long)k, (long long)x, (long long)(x + 2 * pad), i, mx_shape_str(d, a, sizeof(a)));
        int64_t span = x + 2 * pad - k;
        out[0].dims[2 + i] = 1 + (pp->pooling_convention == CONV_FULL ? (span + s - 1) / s : span / s);
    }
    return MX_OK;
}

/* No workspace: the kernels keep their state in registers and small stack
 * buffers. (The function stays so that callers sizing every op's workspace
 * get 0.) */
static size_t pool_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p;
    (void)in;
    (void)out;
    (void)backward;
    return 0;
}

/* One kernel call, split across the kernel pool by planes (N*C): a plane's
 * outputs, and in backward its input gradient, belong to one piece, so
 * overlapping windows never race and every sum runs in one fixed order. */
typedef struct pool_job {
    pool_geom g;
    int type, level;
    bool incl, add;
    bool whole;  /* every window is its whole plane (global pooling) */
    bool direct; /* backward writes: windows tile the input, each element written once */
    bool fast;   /* 2-D, every window inside, rows of at most 2 vectors: pool_short */
    bool box;    /* 2-D avg / sum at stride 1 on rows of at most POOL_BOX_ROW: pool_box */
    bool padded; /* 2-D max with padding, short rows: pool_padded on -inf padded copies of the planes */
    bool s2max;  /* 2-D 3x3 max at stride 2, padding at most 1, longer rows: pool_s2max */
    int64_t pad_rows, pad_cols; /* pool_padded's planes: the rows and columns the windows span */
    int64_t in_plane, out_plane;
    int64_t c0, c1; /* output columns whose x window lies inside the row (vector path) */
    const float *x, *y, *dy, *xend;
    float *out; /* forward y, backward dx */
} pool_job;

/* Rows (d, h) of an output row's window and the avg divisor factor they
 * contribute. */
typedef struct pool_rows {
    int64_t d0, d1, h0, h1;
    float f;
} pool_rows;

static inline pool_rows pool_rows_at(const pool_job *j, int64_t od, int64_t oh)
{
    pool_rows r;
    int64_t nd = mx_pool_axis_window(&j->g, 0, od, j->incl, &r.d0, &r.d1);
    int64_t nh = mx_pool_axis_window(&j->g, 1, oh, j->incl, &r.h0, &r.h1);
    r.f = (float)(nd * nh);
    return r;
}

/* One output of a border column (its window clipped by the row's ends):
 * max, or the sum divided as avg asks, in raster order. */
static float pool_one(const pool_job *j, const float *x, const pool_rows *r, int64_t ow)
{
    const pool_geom *g = &j->g;
    int64_t lo, hi;
    float div = (float)mx_pool_axis_window(g, 2, ow, j->incl, &lo, &hi);
    float acc = j->type == POOL_MAX ? -FLT_MAX : 0.0f;
    for (int64_t d = r->d0; d < r->d1; d++)
        for (int64_t h = r->h0; h < r->h1; h++) {
            const float *row = x + (d * g->in[1] + h) * g->in[2];
            for (int64_t i = lo; i < hi; i++) {
                if (j->type == POOL_MAX) acc = row[i] > acc ? row[i] : acc;
                else acc += row[i];
            }
        }
    if (j->type == POOL_AVG) {
        float size = r->f * div;
        acc = size == 0.0f ? NAN : acc / size;
    }
    return acc;
}

/* Backward of one border output: max routes gy to the first element of
 * the window equal to yv; avg / sum spread it (divided) over the window. */
static void pool_one_back(const pool_job *j, const float *x, float *dx, const pool_rows *r, int64_t ow, float yv,
                          float gy)
{
    const pool_geom *g = &j->g;
    int64_t lo, hi;
    float div = (float)mx_pool_axis_window(g, 2, ow, j->incl, &lo, &hi);
    if (j->type != POOL_MAX) {
        float size = j->type == POOL_AVG ? r->f * div : 1.0f;
        gy = size == 0.0f ? 0.0f : gy / size; /* an empty window has nothing to feed */
    }
    for (int64_t d = r->d0; d < r->d1; d++)
        for (int64_t h = r->h0; h < r->h1; h++) {
            const int64_t base = (d * g->in[1] + h) * g->in[2];
            for (int64_t i = lo; i < hi; i++) {
                if (j->type != POOL_MAX) {
                    dx[base + i] += gy;
                } else if (x[base + i] == yv) {
                    dx[base + i] += gy;
                    return;
                }
            }
        }
}

/* Backward with direct writes leaves the elements no window covers
 * (past out*k on an axis) to be zeroed here. */
static void pool_zero_uncovered(const pool_job *j, float *dx)
{
    const pool_geom *g = &j->g;
    const int64_t H = g->in[1], IW = g->in[2];
    const int64_t cd = g->out[0] * g->k[0], ch = g->out[1] * g->k[1], cw = g->out[2] * g->k[2];
    for (int64_t d = 0; d < g->in[0]; d++) {
        float *slab = dx + d * H * IW;
        if (d >= cd) {
            memset(slab, 0, (size_t)(H * IW) * sizeof(float));
            continue;
        }
        if (cw < IW)
            for (int64_t h = 0; h < ch; h++) memset(slab + h * IW + cw, 0, (size_t)(IW - cw) * sizeof(float));
        if (ch < H) memset(slab + ch * IW, 0, (size_t)((H - ch) * IW) * sizeof(float));
    }
}

/* The box path's column divisor factors (pool_job.box): those of
 * output columns [0, OW), then 1 up to n. */
static void box_col_divisors(const pool_job *j, float *cdiv, int64_t n)
{
    for (int64_t ow = 0; ow < n; ow++) {
        int64_t lo, hi;
        cdiv[ow] = ow < j->g.out[2] ? (float)mx_pool_axis_window(&j->g, 2, ow, j->incl, &lo, &hi) : 1.0f;
    }
}

/*
 * The vector kernels, one per width (simd.h). An output row's interior
 * columns [c0, c1) go W at a time: per input row of the window and kernel
 * tap, a vector of inputs, contiguous for stride 1 or the even or odd
 * lanes of two loads for stride 2 (taps k and k+1 share them). Loads may
 * run past the row (never past the buffer): those lanes are not stored.
 * Border columns, and every column of other strides, go through the
 * scalar pool_one / pool_one_back.
 *
 * Three layouts of the loops:
 *   - planes whose windows all lie inside and whose output rows are at
 *     most 2 vectors (LeNet's 2x2/2, AlexNet's 3x3/2 on 13x13) run
 *     straight-line rows with the kernel width and stride as constants
 *     (pool_short);
 *   - other short rows keep their accumulators in registers;
 *   - long rows go in chunks of up to POOL_CHUNK outputs with the
 *     accumulators in a buffer, sweeping the window's input rows one after
 *     the other (one sequential stream: alternating rows per vector halves
 *     the bandwidth) and, in backward, the taps one after the other (so no
 *     load of dx waits for the overlapping store of the previous tap).
 *
 * Max backward keeps, per output lane, a mask of whether its maximum was
 * found already, so each output feeds only its first match in raster
 * order. Where windows tile the input (`direct`) the gradients of a tap
 * pair are interleaved back and written over exactly the elements the
 * valid lanes cover; where they overlap, the position of each lane's first
 * maximum is tracked and one scalar add per output follows. avg / sum at
 * stride 1 add a box filter of the gradients to each input row instead of
 * one pass per tap.
 */
#define POOL_CHUNK 256
#define POOL_BOX_MAX 32 /* widest kernel of the avg / sum stride-1 backward */
#define POOL_BOX_ROW 256 /* box path: rows (in and out) of at most this many columns */
#define POOL_BOX_KMAX 8  /* box path: kernels of at most this many rows and columns */
#define POOL_BOX_BUF (POOL_BOX_ROW + 2 * POOL_BOX_KMAX + 2 * 16)
#define POOL_BOX_REG 4 /* box path: rows of at most this many vectors sum 3 taps in registers */
#define POOL_PAD_MAX 4096 /* padded path: floats of a padded plane */
#define POOL_S2_MAX_OW 256                    /* s2max path: output rows of at most this many columns */
#define POOL_S2_ROW (2 * POOL_S2_MAX_OW + 64) /* its input row buffers (-inf borders) */
#define POOL_S2_OUT (POOL_S2_MAX_OW + 16)     /* its rows of three-tap maxima */
#define POOL_S2_C (POOL_S2_MAX_OW + 48)       /* its tap contributions: a leading 0, outputs, zeros */

#define POOL_KERNELS(P, W, TARGET)                                                                                  \
    /* acc combined with the taps of one input row; s = the row at lane 0's                                         \
     * window start. */                                                                                             \
    TARGET MX_SIMD_INLINE P##_f P##_pool_taps(P##_f acc, const float *s, int64_t sx, int64_t kx, bool is_max,       \
                                              const float *xend)                                                    \
    {                                                                                                               \
        for (int64_t k = 0; k < kx; k += sx) {                                                                      \
            P##_f a = P##_load_upto(s + k, xend);                                                                   \
            if (sx == 1) {                                                                                          \
                acc = is_max ? P##_max(a, acc) : acc + a;                                                           \
                continue;                                                                                           \
            }                                                                                                       \
            P##_f b = P##_load_upto(s + k + W, xend), t = P##_even(a, b);                                           \
            acc = is_max ? P##_max(t, acc) : acc + t;                                                               \
            if (k + 1 < kx) {                                                                                       \
                t = P##_odd(a, b);                                                                                  \
                acc = is_max ? P##_max(t, acc) : acc + t;                                                           \
            }                                                                                                       \
        }                                                                                                           \
        return acc;                                                                                                 \
    }                                                                                                               \
    /* Writes (or adds) lanes [0, cnt) of a finished output vector. */                                              \
    TARGET MX_SIMD_INLINE void P##_pool_put(float *dst, P##_f acc, int64_t cnt, bool avg, float size, bool add)     \
    {                                                                                                               \
        if (avg) acc = size == 0.0f ? P##_splat(NAN) : acc / size;                                                  \
        if (cnt == W) {                                                                                             \
            P##_store(dst, add ? P##_load(dst) + acc : acc);                                                        \
            return;                                                                                                 \
        }                                                                                                           \
        if (add) acc += P##_load_part(dst, cnt);                                                                    \
        P##_store_part(dst, acc, cnt);                                                                              \
    }                                                                                                               \
    /* Backward through the taps [k, k + sx) of one input row (xs, dxs: the                                         \
     * row at lane 0's window start) for lanes `valid` = [0, cnt): max gives                                        \
     * gy to each lane's first match (`found`: lanes done), avg / sum give it                                       \
     * to every tap. Adds into dx, or writes it when `direct`. */                                                   \
    TARGET MX_SIMD_INLINE P##_i P##_pool_tap_back(P##_i found, const float *xs, float *dxs, int64_t k, P##_f gy,     \
                                                  P##_f yv, int64_t cnt, int64_t sx, int64_t kx, bool is_max,       \
                                                  bool direct, const float *xend)                                   \
    {                                                                                                               \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        const P##_i valid = P##_first(cnt);                                                                         \
        const bool pair = sx == 2 && k + 1 < kx;                                                                    \
        P##_f ge = gy, go = zero;                                                                                   \
        if (is_max) {                                                                                               \
            P##_f a = P##_load_upto(xs + k, xend), b = zero;                                                        \
            if (sx == 2) b = P##_load_upto(xs + k + W, xend);                                                       \
            P##_i m = ((sx == 1 ? a : P##_even(a, b)) == yv) & valid & ~found;                                      \
            found |= m;                                                                                             \
            ge = P##_select(m, gy, zero);                                                                           \
            if (pair) {                                                                                             \
                m = (P##_odd(a, b) == yv) & valid & ~found;                                                         \
                found |= m;                                                                                         \
                go = P##_select(m, gy, zero);                                                                       \
            }                                                                                                       \
        } else if (pair) {                                                                                          \
            go = gy;                                                                                                \
        }                                                                                                           \
        float *dst = dxs + k;                                                                                       \
        if (sx == 1) {                                                                                              \
            if (!direct) ge += P##_load_part(dst, cnt);                                                             \
            if (cnt == W) P##_store(dst, ge);                                                                       \
            else P##_store_part(dst, ge, cnt);                                                                      \
            return found;                                                                                           \
        }                                                                                                           \
        /* the elements of lanes [0, cnt): 2 cnt, the last odd one only for a pair */                               \
        const int64_t span = 2 * cnt - (pair ? 0 : 1);                                                              \
        const int64_t n0 = span < W ? span : W, n1 = span - n0;                                                     \
        if (!direct) {                                                                                              \
            P##_f da = P##_load_part(dst, n0), db = P##_load_part(dst + W, n1);                                     \
            ge += P##_even(da, db);                                                                                 \
            go += P##_odd(da, db);                                                                                  \
        }                                                                                                           \
        if (n0 == W) P##_store(dst, P##_zip_lo(ge, go));                                                            \
        else P##_store_part(dst, P##_zip_lo(ge, go), n0);                                                           \
        if (n1 == W) P##_store(dst + W, P##_zip_hi(ge, go));                                                        \
        else if (n1 > 0) P##_store_part(dst + W, P##_zip_hi(ge, go), n1);                                           \
        return found;                                                                                               \
    }                                                                                                               \
    /* Max backward where windows overlap: tracks in `at` the position (in the                                      \
     * plane) of each lane's first maximum through the taps [k, k + sx) of one                                      \
     * input row (xs: the row at lane 0's window start, position pos0). */                                          \
    TARGET MX_SIMD_INLINE void P##_pool_tap_argmax(P##_i *found, P##_i *at, const float *xs, int64_t pos0,          \
                                                   int64_t k, P##_f yv, int64_t cnt, int64_t sx, int64_t kx,        \
                                                   const float *xend)                                               \
    {                                                                                                               \
        const P##_i valid = P##_first(cnt), pos = P##_iota() * (int32_t)sx + (int32_t)(pos0 + k);                  \
        P##_f a = P##_load_upto(xs + k, xend), b = a;                                                               \
        if (sx == 2) b = P##_load_upto(xs + k + W, xend);                                                           \
        P##_i m = ((sx == 1 ? a : P##_even(a, b)) == yv) & valid & ~*found;                                         \
        *found |= m;                                                                                                \
        *at = (m & pos) | (~m & *at);                                                                               \
        if (sx == 2 && k + 1 < kx) {                                                                                \
            m = (P##_odd(a, b) == yv) & valid & ~*found;                                                            \
            *found |= m;                                                                                            \
            *at = (m & (pos + 1)) | (~m & *at);                                                                     \
        }                                                                                                           \
    }                                                                                                               \
    /* dx[at] += gy for the lanes [0, cnt) that found their maximum, in order. */                                   \
    TARGET MX_SIMD_INLINE void P##_pool_scatter(float *dx, P##_i found, P##_i at, P##_f gy, int64_t cnt)            \
    {                                                                                                               \
        int32_t f[W], a[W];                                                                                         \
        float g[W];                                                                                                 \
        memcpy(f, &found, sizeof(f));                                                                               \
        memcpy(a, &at, sizeof(a));                                                                                  \
        P##_store(g, gy);                                                                                           \
        for (int64_t l = 0; l < cnt; l++)                                                                           \
            if (f[l]) dx[a[l]] += g[l];                                                                             \
    }                                                                                                               \
    /* Planes whose windows all lie inside (no padding, nothing clipped) and                                        \
     * whose output rows are at most 2 vectors: straight-line rows, the tap                                         \
     * loops unrolled for the kernel and stride passed as constants. */                                             \
    TARGET MX_SIMD_INLINE void P##_pool_fwd_short(const pool_job *j, const float *x, float *y, const int64_t kx,    \
                                                  const int64_t sx, const bool is_max)                              \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IW = g->in[2], OW = g->out[2], sy = g->s[1], ky = g->k[1];                                    \
        const bool avg = j->type == POOL_AVG, add = j->add;                                                         \
        const float init = is_max ? -FLT_MAX : 0.0f, size = (float)ky * (float)kx;                                  \
        const int64_t n0 = OW < W ? OW : W, n1 = OW - n0;                                                           \
        for (int64_t oh = 0; oh < g->out[1]; oh++, y += OW) {                                                       \
            const float *row = x + oh * sy * IW;                                                                    \
            P##_f acc0 = P##_splat(init), acc1 = acc0;                                                              \
            for (int64_t h = 0; h < ky; h++, row += IW) {                                                           \
                acc0 = P##_pool_taps(acc0, row, sx, kx, is_max, j->xend);                                           \
                if (n1 > 0) acc1 = P##_pool_taps(acc1, row + W * sx, sx, kx, is_max, j->xend);                     \
            }                                                                                                       \
            P##_pool_put(y, acc0, n0, avg, size, add);                                                              \
            if (n1 > 0) P##_pool_put(y + W, acc1, n1, avg, size, add);                                              \
        }                                                                                                           \
    }                                                                                                               \
    TARGET MX_SIMD_INLINE void P##_pool_bwd_short(const pool_job *j, const float *x, const float *y,                \
                                                  const float *dy, float *dx, const int64_t kx, const int64_t sx,   \
                                                  const bool is_max)                                                \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IW = g->in[2], OW = g->out[2], sy = g->s[1], ky = g->k[1];                                    \
        const bool direct = j->direct;                                                                              \
        const float size = j->type == POOL_AVG ? (float)ky * (float)kx : 1.0f;                                      \
        const int64_t n0 = OW < W ? OW : W, n1 = OW - n0;                                                           \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        for (int64_t oh = 0; oh < g->out[1]; oh++, y += OW, dy += OW) {                                             \
            P##_f gy0 = P##_load_part(dy, n0), gy1 = P##_load_part(dy + W, n1), yv0 = zero, yv1 = zero;             \
            P##_i f0 = P##_first(0), f1 = f0;                                                                       \
            if (is_max) {                                                                                           \
                yv0 = P##_load_part(y, n0);                                                                         \
                yv1 = P##_load_part(y + W, n1);                                                                     \
            } else if (size != 1.0f) {                                                                              \
                gy0 = gy0 / size;                                                                                   \
                gy1 = gy1 / size;                                                                                   \
            }                                                                                                       \
            int64_t o = oh * sy * IW;                                                                               \
            if (is_max && !direct) { /* overlapping windows: first maxima, then one add each */                     \
                P##_i at0 = f0, at1 = f0;                                                                           \
                for (int64_t h = 0; h < ky; h++, o += IW)                                                           \
                    for (int64_t k = 0; k < kx; k += sx) {                                                          \
                        P##_pool_tap_argmax(&f0, &at0, x + o, o, k, yv0, n0, sx, kx, j->xend);                      \
                        if (n1 > 0)                                                                                 \
                            P##_pool_tap_argmax(&f1, &at1, x + o + W * sx, o + W * sx, k, yv1, n1, sx, kx, j->xend); \
                    }                                                                                               \
                P##_pool_scatter(dx, f0, at0, gy0, n0);                                                             \
                if (n1 > 0) P##_pool_scatter(dx, f1, at1, gy1, n1);                                                 \
                continue;                                                                                           \
            }                                                                                                       \
            for (int64_t h = 0; h < ky; h++, o += IW)                                                               \
                for (int64_t k = 0; k < kx; k += sx) {                                                              \
                    f0 = P##_pool_tap_back(f0, x + o, dx + o, k, gy0, yv0, n0, sx, kx, is_max, direct, j->xend);    \
                    if (n1 > 0)                                                                                     \
                        f1 = P##_pool_tap_back(f1, x + o + W * sx, dx + o + W * sx, k, gy1, yv1, n1, sx, kx,        \
                                               is_max, direct, j->xend);                                            \
                }                                                                                                   \
        }                                                                                                           \
    }                                                                                                               \
    /* Average and sum pooling at stride 1 on small 2-D planes (`box`): the                                         \
     * window sums as a separable box filter, a row at a time: forward sums                                         \
     * the window's input rows into one zero-padded row, then kx taps along                                         \
     * it; backward divides each output row once into a ring of the last ky,                                        \
     * sums the ones that cover an input row and runs the transposed box                                            \
     * along it, writing dx directly (no zeroing pass, no scalar border                                             \
     * columns: Inception-BN's 3x3/1 pad-1 average pools, 14x14 and 7x7 rows,                                       \
     * spent a third of their time on borders). Planes [p0, p1). */                                                 \
    /* One output vector of a box row: acc divided by rowf * div[0..W) (NaN                                         \
     * for an empty window) with div, added to out with add, lanes [0, cnt). */                                     \
    TARGET MX_SIMD_INLINE void P##_box_put(P##_f acc, float *out, int64_t cnt, bool add, const float *div, float rowf) \
    {                                                                                                               \
        if (div) {                                                                                                  \
            const P##_f size = P##_splat(rowf) * P##_load(div);                                                     \
            acc = P##_select(size == P##_splat(0.0f), P##_splat(NAN), acc / size);                                  \
        }                                                                                                           \
        if (add) acc += P##_load_part(out, cnt);                                                                    \
        if (cnt == W) P##_store(out, acc);                                                                          \
        else P##_store_part(out, acc, cnt);                                                                         \
    }                                                                                                               \
    /* out[i] = the sum of buf[i + t] over t < k, for i < n, finished by                                            \
     * P##_box_put. */                                                                                              \
    TARGET MX_SIMD_INLINE void P##_box_row(const float *buf, int64_t k, float *out, int64_t n, bool add,            \
                                           const float *div, float rowf)                                            \
    {                                                                                                               \
        for (int64_t i = 0; i < n; i += W) {                                                                        \
            P##_f acc = P##_load(buf + i);                                                                          \
            for (int64_t t = 1; t < k; t++) acc += P##_load(buf + i + t);                                           \
            P##_box_put(acc, out + i, n - i < W ? n - i : W, add, div ? div + i : NULL, rowf);                      \
        }                                                                                                           \
    }                                                                                                               \
    /* The same for 3 taps and one column of padding each side (Inception's                                         \
     * 3x3/1 pad-1 pools) on a row of n <= POOL_BOX_REG * W elements held in                                        \
     * registers s[1..nv] (s[0], s[nv + 1] and the lanes past the row zero):                                        \
     * out[i] = (s[i - 1] + s[i]) + s[i + 1], P##_box_row's sums, with lanes                                        \
     * shifted in registers: a row stored and reloaded one float either side                                        \
     * stalls each load until the store completes (one Xeon thread, batch 16:                                       \
     * Inception-BN's 576-channel pool on 14x14 forward 2.2 -> 1.2 ms, 1056                                         \
     * channels on 7x7 2.0 -> 1.1). */                                                                              \
    TARGET MX_SIMD_INLINE void P##_box3_regs(const P##_f *s, int64_t nv, int64_t n, float *out, bool add,           \
                                             const float *div, float rowf)                                          \
    {                                                                                                               \
        for (int64_t k = 0; k < nv; k++) {                                                                          \
            const P##_f acc = (P##_prev(s[k], s[k + 1]) + s[k + 1]) + P##_next(s[k + 1], s[k + 2]);                 \
            P##_box_put(acc, out + k * W, n - k * W < W ? n - k * W : W, add, div ? div + k * W : NULL, rowf);      \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void pool_box_fwd_##P(const pool_job *j, int64_t p0, int64_t p1)                                  \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IW = g->in[2], OH = g->out[1], OW = g->out[2], px = g->p[2], kx = g->k[2];                    \
        const bool regs = kx == 3 && px == 1 && OW == IW && IW <= POOL_BOX_REG * W;                                 \
        const int64_t nv = (IW + W - 1) / W;                                                                        \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        _Alignas(64) float vb[POOL_BOX_BUF], cdiv[POOL_BOX_ROW + W];                                                \
        box_col_divisors(j, cdiv, OW + W);                                                                          \
        memset(vb, 0, sizeof(vb));                                                                                  \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane;                                                               \
            float *y = j->out + pl * j->out_plane;                                                                  \
            for (int64_t oh = 0; oh < OH; oh++, y += OW) {                                                          \
                const pool_rows r = pool_rows_at(j, 0, oh);                                                         \
                if (regs) {                                                                                         \
                    P##_f sum[POOL_BOX_REG + 2];                                                                    \
                    sum[0] = sum[nv + 1] = zero;                                                                    \
                    for (int64_t k = 0; k < nv; k++) {                                                              \
                        const int64_t cnt = IW - k * W < W ? IW - k * W : W;                                        \
                        P##_f acc = zero;                                                                           \
                        for (int64_t h = r.h0; h < r.h1; h++) acc += P##_load_part(x + h * IW + k * W, cnt);        \
                        sum[k + 1] = acc;                                                                           \
                    }                                                                                               \
                    P##_box3_regs(sum, nv, OW, y, j->add, j->type == POOL_AVG ? cdiv : NULL, r.f);                  \
                    continue;                                                                                       \
                }                                                                                                   \
                for (int64_t w = 0; w < IW; w += W) {                                                               \
                    const int64_t cnt = IW - w < W ? IW - w : W;                                                    \
                    P##_f acc = zero;                                                                               \
                    for (int64_t h = r.h0; h < r.h1; h++) acc += P##_load_part(x + h * IW + w, cnt);                \
                    P##_store(vb + px + w, acc); /* lanes past IW are 0: the padding stays */                       \
                }                                                                                                   \
                P##_box_row(vb, kx, y, OW, j->add, j->type == POOL_AVG ? cdiv : NULL, r.f);                         \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void pool_box_bwd_##P(const pool_job *j, int64_t p0, int64_t p1)                                  \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2];                                 \
        const int64_t py = g->p[1], px = g->p[2], ky = g->k[1], kx = g->k[2];                                       \
        const bool avg = j->type == POOL_AVG;                                                                       \
        const bool regs = kx == 3 && px == 1 && OW == IW && IW <= POOL_BOX_REG * W;                                 \
        const int64_t nv = (IW + W - 1) / W;                                                                        \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        _Alignas(64) float ring[POOL_BOX_KMAX][POOL_BOX_ROW + W], ub[POOL_BOX_BUF], cdiv[POOL_BOX_ROW + W];         \
        float rdiv[POOL_BOX_ROW];                                                                                   \
        box_col_divisors(j, cdiv, OW + W);                                                                          \
        for (int64_t oh = 0; oh < OH; oh++) rdiv[oh] = pool_rows_at(j, 0, oh).f;                                    \
        memset(ub, 0, sizeof(ub));                                                                                  \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *dy = j->dy + pl * j->out_plane;                                                            \
            float *dx = j->out + pl * j->in_plane;                                                                  \
            int64_t next = 0; /* the next output row to divide into the ring */                                     \
            for (int64_t h = 0; h < IH; h++, dx += IW) {                                                            \
                /* output rows whose window holds row h: [h + py - ky + 1, h + py] */                               \
                const int64_t o1 = h + py < OH - 1 ? h + py : OH - 1, o0 = h + py - ky + 1 > 0 ? h + py - ky + 1 : 0; \
                for (; next <= o1; next++) {                                                                        \
                    float *dst = ring[next % ky];                                                                   \
                    for (int64_t ow = 0; ow < OW; ow += W) {                                                        \
                        const int64_t cnt = OW - ow < W ? OW - ow : W;                                              \
                        P##_f v = P##_load_part(dy + next * OW + ow, cnt);                                          \
                        if (avg) {                                                                                  \
                            const P##_f size = P##_splat(rdiv[next]) * P##_load(cdiv + ow);                         \
                            v = P##_select(size == zero, zero, v / size); /* an empty window feeds nothing */       \
                        }                                                                                           \
                        P##_store(dst + ow, v); /* lanes past OW are 0 */                                           \
                    }                                                                                               \
                }                                                                                                   \
                if (regs) {                                                                                         \
                    P##_f sum[POOL_BOX_REG + 2];                                                                    \
                    sum[0] = sum[nv + 1] = zero;                                                                    \
                    for (int64_t k = 0; k < nv; k++) {                                                              \
                        P##_f acc = zero;                                                                           \
                        for (int64_t oh = o0, at = o0 % ky; oh <= o1; oh++, at = at + 1 == ky ? 0 : at + 1)         \
                            acc += P##_load(ring[at] + k * W); /* (no division a row: oh % ky cost an idiv) */      \
                        sum[k + 1] = acc;                                                                           \
                    }                                                                                               \
                    P##_box3_regs(sum, nv, IW, dx, j->add, NULL, 0.0f);                                             \
                    continue;                                                                                       \
                }                                                                                                   \
                for (int64_t ow = 0; ow < OW; ow += W) {                                                            \
                    P##_f acc = zero;                                                                               \
                    for (int64_t oh = o0, at = o0 % ky; oh <= o1; oh++, at = at + 1 == ky ? 0 : at + 1)             \
                        acc += P##_load(ring[at] + ow);                                                             \
                    P##_store(ub + kx - 1 + ow, acc);                                                               \
                }                                                                                                   \
                /* dx[w] = sum over outputs ow in [w + px - kx + 1, w + px]: ub[w + px .. w + px + kx) */           \
                P##_box_row(ub + px, kx, dx, IW, j->add, NULL, 0.0f);                                               \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    /* The common kernels with constant kernel width and stride. */                                                 \
    TARGET static void pool_short_##P(const pool_job *j, const float *x, const float *y, const float *dy,          \
                                      float *out, bool backward)                                                    \
    {                                                                                                               \
        const int64_t kx = j->g.k[2], sx = j->g.s[2];                                                               \
        const bool is_max = j->type == POOL_MAX;                                                                    \
        if (backward) {                                                                                             \
            if (kx == 2 && sx == 2 && is_max) P##_pool_bwd_short(j, x, y, dy, out, 2, 2, true);                     \
            else if (kx == 3 && sx == 2 && is_max) P##_pool_bwd_short(j, x, y, dy, out, 3, 2, true);                \
            else if (kx == 2 && sx == 2) P##_pool_bwd_short(j, x, y, dy, out, 2, 2, false);                         \
            else if (kx == 3 && sx == 1) P##_pool_bwd_short(j, x, y, dy, out, 3, 1, is_max);                        \
            else P##_pool_bwd_short(j, x, y, dy, out, kx, sx, is_max);                                              \
            return;                                                                                                 \
        }                                                                                                           \
        if (kx == 2 && sx == 2 && is_max) P##_pool_fwd_short(j, x, out, 2, 2, true);                                \
        else if (kx == 3 && sx == 2 && is_max) P##_pool_fwd_short(j, x, out, 3, 2, true);                           \
        else if (kx == 2 && sx == 2) P##_pool_fwd_short(j, x, out, 2, 2, false);                                    \
        else if (kx == 3 && sx == 1) P##_pool_fwd_short(j, x, out, 3, 1, is_max);                                   \
        else P##_pool_fwd_short(j, x, out, kx, sx, is_max);                                                         \
    }                                                                                                               \
    /* Max pooling with padding on short rows (`padded`): each plane is       \
     * copied into a buffer whose padding holds -inf, where every window lies  \
     * inside, and runs pool_short there (Inception-BN's 3x3/1 pad-1 max pool  \
     * on 7x7 maps and 3x3/2 pad-1 ones spent most of their time in the       \
     * scalar border outputs). -inf never wins a max whose accumulator starts  \
     * at -FLT_MAX, nor equals an output in backward, so the outputs and the   \
     * positions of the first maxima are those of the generic path: the same  \
     * bits. Backward (write requests only) scatters into a zeroed padded     \
     * buffer whose inside becomes dx. */                                       \
    TARGET static void pool_padded_##P(const pool_job *j, int64_t p0, int64_t p1, bool backward)                   \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IH = g->in[1], IW = g->in[2], py = g->p[1], px = g->p[2];                                    \
        const int64_t R = j->pad_rows, C = j->pad_cols;                                                             \
        const int64_t rows = IH < R - py ? IH : R - py, cols = IW < C - px ? IW : C - px;                         \
        _Alignas(64) float xb[POOL_PAD_MAX], db[POOL_PAD_MAX];                                                      \
        pool_job jp = *j;                                                                                           \
        jp.g.in[1] = R;                                                                                             \
        jp.g.in[2] = C;                                                                                             \
        jp.g.p[1] = jp.g.p[2] = 0;                                                                                  \
        jp.xend = xb + R * C;                                                                                       \
        jp.direct = false;                                                                                          \
        for (int64_t i = 0; i < R * C; i++) xb[i] = -INFINITY; /* the inside is overwritten per plane */           \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane;                                                               \
            for (int64_t r = 0; r < rows; r++)                                                                      \
                memcpy(xb + (r + py) * C + px, x + r * IW, (size_t)cols * sizeof(float));                           \
            if (!backward) {                                                                                        \
                pool_short_##P(&jp, xb, NULL, NULL, j->out + pl * j->out_plane, false);                             \
                continue;                                                                                           \
            }                                                                                                       \
            memset(db, 0, (size_t)(R * C) * sizeof(float));                                                         \
            pool_short_##P(&jp, xb, j->y + pl * j->out_plane, j->dy + pl * j->out_plane, db, true);                \
            float *dx = j->out + pl * j->in_plane;                                                                  \
            memset(dx, 0, (size_t)j->in_plane * sizeof(float));                                                     \
            for (int64_t r = 0; r < rows; r++)                                                                      \
                memcpy(dx + r * IW, db + (r + py) * C + px, (size_t)cols * sizeof(float));                          \
        }                                                                                                           \
    }                                                                                                               \
    /* 3x3 max pooling at stride 2 on rows of more than two vectors (`s2max`:                                       \
     * the stem pools of ResNet, pad 1, and Inception-BN, none, on 112x112;                                         \
     * shorter rows keep pool_short and pool_padded, faster there). Forward:                                        \
     * each input row's three-tap maxima (an h-row: the even, odd and next                                          \
     * even lanes of the row copied between -inf borders) made once and shared                                      \
     * by the two output rows whose windows hold the row, then the window's                                         \
     * rows folded in order. A fold in raster order keeps the first of equal                                        \
     * maxima; folding each row and then the rows keeps the same one: the bits                                      \
     * of the generic path. Backward: per output row, each tap's contribution                                       \
     * (gy where it holds the lane's first maximum in raster order, else 0),                                        \
     * kept for two output rows; each dx row is then summed from the output                                         \
     * rows that cover it, in the outputs' raster order (an even column takes                                       \
     * the right tap of output j - 1, then the left one of output j), onto 0                                        \
     * or onto dx for an add request, and interleaved back: no scalar scatter                                       \
     * and no zeroing pass. ResNet-18's pool1 at batch 16, 2 Xeon threads                                           \
     * (mxtrain --time): 8.4 + 12.9 -> 3.3 + 7.4 ms. */                                                             \
    TARGET static void pool_s2max_fwd_##P(const pool_job *j, int64_t p0, int64_t p1)                                \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], py = g->p[1], px = g->p[2];     \
        const int64_t nv = (OW + W - 1) / W;                                                                        \
        const bool add = j->add;                                                                                    \
        const P##_f lo = P##_splat(-FLT_MAX);                                                                       \
        _Alignas(64) float rb[POOL_S2_ROW], hb[3][POOL_S2_OUT];                                                     \
        for (int64_t i = 0; i < POOL_S2_ROW; i++) rb[i] = -INFINITY; /* the inside is overwritten per row */        \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane;                                                               \
            float *y = j->out + pl * j->out_plane;                                                                  \
            int64_t held = -1; /* the last input row made an h-row (hb[ih % 3]) */                                  \
            for (int64_t oh = 0; oh < OH; oh++, y += OW) {                                                          \
                const float *h[3];                                                                                  \
                int nh = 0;                                                                                         \
                for (int64_t ky = 0; ky < 3; ky++) {                                                                \
                    const int64_t ih = 2 * oh - py + ky;                                                            \
                    if (ih < 0 || ih >= IH) continue;                                                               \
                    float *hr = hb[ih % 3];                                                                         \
                    if (ih != held) {                                                                               \
                        memcpy(rb + px, x + ih * IW, (size_t)IW * sizeof(float));                                   \
                        for (int64_t v = 0; v < nv; v++) {                                                          \
                            const float *s = rb + 2 * v * W;                                                        \
                            const P##_f a = P##_load(s), b = P##_load(s + W);                                       \
                            P##_f m = P##_max(P##_even(a, b), lo);                                                  \
                            m = P##_max(P##_odd(a, b), m);                                                          \
                            m = P##_max(P##_even(P##_load(s + 2), P##_load(s + 2 + W)), m);                         \
                            P##_store(hr + v * W, m);                                                               \
                        }                                                                                           \
                        held = ih;                                                                                  \
                    }                                                                                               \
                    h[nh++] = hr;                                                                                   \
                }                                                                                                   \
                for (int64_t v = 0; v < nv; v++) {                                                                  \
                    P##_f acc = lo;                                                                                 \
                    for (int r = 0; r < nh; r++) acc = P##_max(P##_load(h[r] + v * W), acc);                        \
                    P##_pool_put(y + v * W, acc, OW - v * W < W ? OW - v * W : W, false, 0.0f, add);                \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
    /* dx row ih from the contributions of the output rows [o0, o1] that cover                                      \
     * it (cb: per output row slot, tap row and column, a leading 0 then one                                        \
     * float per output), onto dx's own values for an add request. */                                               \
    TARGET MX_SIMD_INLINE void P##_s2max_row(const pool_job *j, float (*cb)[3][3][POOL_S2_C], int64_t ih, float *dx, \
                                             float *ab, int64_t na)                                                 \
    {                                                                                                               \
        const int64_t IW = j->g.in[2], OH = j->g.out[1], py = j->g.p[1], px = j->g.p[2];                            \
        int64_t o0 = (ih + py - 1) / 2, o1 = (ih + py) / 2; /* ceil((ih + py - 2) / 2), floor((ih + py) / 2) */     \
        if (o0 < 0) o0 = 0;                                                                                         \
        if (o1 > OH - 1) o1 = OH - 1;                                                                               \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        if (j->add) {                                                                                               \
            memset(ab, 0, (size_t)(2 * na * W) * sizeof(float));                                                    \
            memcpy(ab + px, dx, (size_t)IW * sizeof(float));                                                        \
        }                                                                                                           \
        for (int64_t u = 0; u < na; u++) {                                                                          \
            P##_f e = zero, o = zero;                                                                               \
            if (j->add) {                                                                                           \
                const P##_f a = P##_load(ab + 2 * u * W), b = P##_load(ab + 2 * u * W + W);                         \
                e = P##_even(a, b);                                                                                 \
                o = P##_odd(a, b);                                                                                  \
            }                                                                                                       \
            for (int64_t oh = o0; oh <= o1; oh++) {                                                                 \
                const float(*c)[POOL_S2_C] = cb[oh & 1][ih + py - 2 * oh];                                          \
                e += P##_load(c[2] + u * W);     /* the right tap of output j - 1 */                                \
                e += P##_load(c[0] + 1 + u * W); /* the left tap of output j */                                     \
                o += P##_load(c[1] + 1 + u * W);                                                                    \
            }                                                                                                       \
            P##_store(ab + 2 * u * W, P##_zip_lo(e, o));                                                            \
            P##_store(ab + 2 * u * W + W, P##_zip_hi(e, o));                                                        \
        }                                                                                                           \
        memcpy(dx, ab + px, (size_t)IW * sizeof(float));                                                            \
    }                                                                                                               \
    TARGET static void pool_s2max_bwd_##P(const pool_job *j, int64_t p0, int64_t p1)                                \
    {                                                                                                               \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], py = g->p[1], px = g->p[2];     \
        const int64_t nv = (OW + W - 1) / W, na = (px + IW + 2 * W - 1) / (2 * W);                                  \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        _Alignas(64) float rb[3][POOL_S2_ROW], cb[2][3][3][POOL_S2_C], ab[2 * POOL_S2_C];                           \
        for (int r = 0; r < 3; r++)                                                                                 \
            for (int64_t i = 0; i < POOL_S2_ROW; i++) rb[r][i] = -INFINITY;                                         \
        memset(cb, 0, sizeof(cb)); /* the leading 0 and the lanes past the outputs stay 0 */                        \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane, *y = j->y + pl * j->out_plane;                                \
            const float *dy = j->dy + pl * j->out_plane;                                                            \
            float *dx = j->out + pl * j->in_plane;                                                                  \
            int64_t next = 0; /* the next dx row to make */                                                         \
            for (int64_t oh = 0; oh < OH; oh++) {                                                                   \
                bool inside[3];                                                                                     \
                for (int64_t ky = 0; ky < 3; ky++) {                                                                \
                    const int64_t ih = 2 * oh - py + ky;                                                            \
                    inside[ky] = ih >= 0 && ih < IH;                                                                \
                    if (inside[ky]) memcpy(rb[ky] + px, x + ih * IW, (size_t)IW * sizeof(float));                   \
                }                                                                                                   \
                float(*c)[3][POOL_S2_C] = cb[oh & 1];                                                               \
                for (int64_t v = 0; v < nv; v++) {                                                                  \
                    const int64_t cnt = OW - v * W < W ? OW - v * W : W;                                            \
                    const P##_f yv = P##_load_part(y + oh * OW + v * W, cnt);                                       \
                    const P##_f gy = P##_load_part(dy + oh * OW + v * W, cnt);                                      \
                    P##_i found = P##_first(0);                                                                     \
                    for (int64_t ky = 0; ky < 3; ky++) {                                                            \
                        if (!inside[ky]) {                                                                          \
                            for (int kx = 0; kx < 3; kx++) P##_store(c[ky][kx] + 1 + v * W, zero);                  \
                            continue;                                                                               \
                        }                                                                                           \
                        const float *s = rb[ky] + 2 * v * W;                                                        \
                        const P##_f a = P##_load(s), b = P##_load(s + W);                                           \
                        const P##_f t[3] = {P##_even(a, b), P##_odd(a, b), P##_even(P##_load(s + 2), P##_load(s + 2 + W))}; \
                        for (int kx = 0; kx < 3; kx++) {                                                            \
                            const P##_i m = (t[kx] == yv) & ~found;                                                 \
                            found |= m;                                                                             \
                            P##_store(c[ky][kx] + 1 + v * W, P##_select(m, gy, zero));                              \
                        }                                                                                           \
                    }                                                                                               \
                }                                                                                                   \
                /* rows no later output row covers: up to 2 oh - py + 1, all the rest after the last */             \
                const int64_t last = oh == OH - 1 ? IH - 1 : 2 * oh - py + 1;                                       \
                for (; next <= last && next < IH; next++) P##_s2max_row(j, cb, next, dx + next * IW, ab, na);       \
            }                                                                                                       \
            for (; next < IH; next++) P##_s2max_row(j, cb, next, dx + next * IW, ab, na);                           \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void pool_forward_##P(const pool_job *j, int64_t p0, int64_t p1)                                 \
    {                                                                                                               \
        if (j->box) {                                                                                               \
            pool_box_fwd_##P(j, p0, p1);                                                                            \
            return;                                                                                                 \
        }                                                                                                           \
        if (j->padded) {                                                                                            \
            pool_padded_##P(j, p0, p1, false);                                                                      \
            return;                                                                                                 \
        }                                                                                                           \
        if (j->s2max) {                                                                                             \
            pool_s2max_fwd_##P(j, p0, p1);                                                                          \
            return;                                                                                                 \
        }                                                                                                           \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t H = g->in[1], IW = g->in[2], OW = g->out[2], sx = g->s[2], px = g->p[2], kx = g->k[2];        \
        const bool is_max = j->type == POOL_MAX, avg = j->type == POOL_AVG, add = j->add;                           \
        const float init = is_max ? -FLT_MAX : 0.0f;                                                                \
        _Alignas(64) float accb[POOL_CHUNK];                                                                        \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane;                                                               \
            float *y = j->out + pl * j->out_plane;                                                                  \
            if (j->whole) { /* one contiguous reduction per plane */                                                \
                const int64_t n = j->in_plane;                                                                      \
                P##_f acc = P##_splat(init);                                                                        \
                int64_t i = 0;                                                                                      \
                for (; i + W <= n; i += W) {                                                                        \
                    P##_f v = P##_load(x + i);                                                                      \
                    acc = is_max ? P##_max(v, acc) : acc + v;                                                       \
                }                                                                                                   \
                if (i < n) {                                                                                        \
                    P##_f v = P##_select(P##_first(n - i), P##_load_part(x + i, n - i), P##_splat(init));            \
                    acc = is_max ? P##_max(v, acc) : acc + v;                                                       \
                }                                                                                                   \
                float lanes[W], r = init;                                                                           \
                P##_store(lanes, acc);                                                                              \
                for (int l = 0; l < W; l++) r = is_max ? (lanes[l] > r ? lanes[l] : r) : r + lanes[l];              \
                if (avg) {                                                                                          \
                    float size = (float)(g->in[0] * g->in[1]) * (float)g->in[2];                                    \
                    r = size == 0.0f ? NAN : r / size;                                                              \
                }                                                                                                   \
                y[0] = add ? y[0] + r : r;                                                                          \
                continue;                                                                                           \
            }                                                                                                       \
            if (j->fast) {                                                                                          \
                pool_short_##P(j, x, NULL, NULL, y, false);                                                         \
                continue;                                                                                           \
            }                                                                                                       \
            for (int64_t od = 0; od < g->out[0]; od++)                                                              \
                for (int64_t oh = 0; oh < g->out[1]; oh++, y += OW) {                                               \
                    const pool_rows r = pool_rows_at(j, od, oh);                                                    \
                    const float size = r.f * (float)kx;                                                             \
                    for (int64_t ow0 = j->c0; ow0 < j->c1; ow0 += POOL_CHUNK) {                                     \
                        const int64_t n = j->c1 - ow0 < POOL_CHUNK ? j->c1 - ow0 : POOL_CHUNK;                      \
                        const float *x0 = x + ow0 * sx - px;                                                        \
                        if (n <= 2 * W) {                                                                           \
                            P##_f acc0 = P##_splat(init), acc1 = acc0;                                              \
                            for (int64_t d = r.d0; d < r.d1; d++)                                                   \
                                for (int64_t h = r.h0; h < r.h1; h++) {                                             \
                                    const float *src = x0 + (d * H + h) * IW;                                       \
                                    acc0 = P##_pool_taps(acc0, src, sx, kx, is_max, j->xend);                       \
                                    if (n > W) acc1 = P##_pool_taps(acc1, src + W * sx, sx, kx, is_max, j->xend);   \
                                }                                                                                   \
                            P##_pool_put(y + ow0, acc0, n < W ? n : W, avg, size, add);                             \
                            if (n > W) P##_pool_put(y + ow0 + W, acc1, n - W, avg, size, add);                      \
                            continue;                                                                               \
                        }                                                                                           \
                        for (int64_t v = 0; v < n; v += W) P##_store(accb + v, P##_splat(init));                    \
                        for (int64_t d = r.d0; d < r.d1; d++)                                                       \
                            for (int64_t h = r.h0; h < r.h1; h++) {                                                 \
                                const float *src = x0 + (d * H + h) * IW;                                           \
                                for (int64_t v = 0; v < n; v += W)                                                  \
                                    P##_store(accb + v,                                                             \
                                              P##_pool_taps(P##_load(accb + v), src + v * sx, sx, kx, is_max,      \
                                                            j->xend));                                              \
                            }                                                                                       \
                        for (int64_t v = 0; v < n; v += W)                                                          \
                            P##_pool_put(y + ow0 + v, P##_load(accb + v), n - v < W ? n - v : W, avg, size, add);   \
                    }                                                                                               \
                    for (int64_t ow = 0; ow < OW; ow++) {                                                           \
                        if (ow == j->c0) ow = j->c1;                                                                \
                        if (ow >= OW) break;                                                                        \
                        float v = pool_one(j, x, &r, ow);                                                           \
                        y[ow] = add ? y[ow] + v : v;                                                                \
                    }                                                                                               \
                }                                                                                                   \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void pool_backward_##P(const pool_job *j, int64_t p0, int64_t p1)                                \
    {                                                                                                               \
        if (j->box) {                                                                                               \
            pool_box_bwd_##P(j, p0, p1);                                                                            \
            return;                                                                                                 \
        }                                                                                                           \
        if (j->padded && !j->add) { /* an add would sum in another order */                                       \
            pool_padded_##P(j, p0, p1, true);                                                                       \
            return;                                                                                                 \
        }                                                                                                           \
        if (j->s2max) {                                                                                             \
            pool_s2max_bwd_##P(j, p0, p1);                                                                          \
            return;                                                                                                 \
        }                                                                                                           \
        const pool_geom *g = &j->g;                                                                                 \
        const int64_t H = g->in[1], IW = g->in[2], OW = g->out[2], sx = g->s[2], px = g->p[2], kx = g->k[2];        \
        const bool is_max = j->type == POOL_MAX, direct = j->direct, add = j->add;                                  \
        const P##_f zero = P##_splat(0.0f);                                                                         \
        _Alignas(64) float gyb[POOL_CHUNK];                                                                         \
        _Alignas(64) int32_t foundb[POOL_CHUNK], atb[POOL_CHUNK];                                                   \
        _Alignas(64) float boxb[POOL_CHUNK + 2 * POOL_BOX_MAX + 2 * W], tb[POOL_CHUNK + POOL_BOX_MAX + W];          \
        for (int64_t pl = p0; pl < p1; pl++) {                                                                      \
            const float *x = j->x + pl * j->in_plane, *y = j->y + pl * j->out_plane;                                \
            const float *dy = j->dy + pl * j->out_plane;                                                            \
            float *dx = j->out + pl * j->in_plane;                                                                  \
            if (j->whole) {                                                                                         \
                const int64_t n = j->in_plane;                                                                      \
                const pool_rows r = {0, g->in[0], 0, g->in[1], (float)(g->in[0] * g->in[1])};                      \
                if (is_max) {                                                                                       \
                    if (!add) memset(dx, 0, (size_t)n * sizeof(float));                                             \
                    pool_one_back(j, x, dx, &r, 0, y[0], dy[0]);                                                    \
                    continue;                                                                                       \
                }                                                                                                   \
                float size = j->type == POOL_AVG ? r.f * (float)g->in[2] : 1.0f;                                    \
                const P##_f gs = P##_splat(size == 0.0f ? 0.0f : dy[0] / size);                                     \
                MX_SIMD_MAP1(P, W, x, dx, 0, n, add, gs + 0.0f * v);                                                \
                continue;                                                                                           \
            }                                                                                                       \
            if (direct) pool_zero_uncovered(j, dx);                                                                 \
            else if (!add) memset(dx, 0, (size_t)j->in_plane * sizeof(float));                                     \
            if (j->fast) {                                                                                          \
                pool_short_##P(j, x, y, dy, dx, true);                                                              \
                continue;                                                                                           \
            }                                                                                                       \
            for (int64_t od = 0; od < g->out[0]; od++)                                                              \
                for (int64_t oh = 0; oh < g->out[1]; oh++, y += OW, dy += OW) {                                     \
                    const pool_rows r = pool_rows_at(j, od, oh);                                                    \
                    const float size = j->type == POOL_AVG ? r.f * (float)kx : 1.0f;                                \
                    for (int64_t ow0 = j->c0; ow0 < j->c1; ow0 += POOL_CHUNK) {                                     \
                        const int64_t n = j->c1 - ow0 < POOL_CHUNK ? j->c1 - ow0 : POOL_CHUNK, o0 = ow0 * sx - px;  \
                        if (!is_max && sx == 1 && kx <= POOL_BOX_MAX && !direct) {                                  \
                            /* avg / sum at stride 1 (not 1x1 windows that tile: they write),                       \
                             * the contributions to an input row,                                                   \
                             * t[i] = sum over taps k of gs[i - k], once (a box filter of                           \
                             * the chunk's gradients, zero-padded), then added to each                              \
                             * input row of the window. */                                                          \
                            const int64_t span = n + kx - 1;                                                        \
                            float *gs = boxb + kx - 1;                                                              \
                            memset(boxb, 0, sizeof(float) * (size_t)(kx - 1));                                      \
                            for (int64_t v = 0; v < n; v += W) {                                                    \
                                P##_f gv = P##_load_part(dy + ow0 + v, n - v < W ? n - v : W);                      \
                                P##_store(gs + v, size == 0.0f ? zero : gv / size);                                 \
                            }                                                                                       \
                            memset(gs + n, 0, sizeof(float) * (size_t)(kx + W));                                    \
                            for (int64_t i = 0; i < span; i += W) {                                                 \
                                P##_f t = P##_load(gs + i);                                                         \
                                for (int64_t k = 1; k < kx; k++) t += P##_load(gs + i - k);                         \
                                P##_store(tb + i, t);                                                               \
                            }                                                                                       \
                            for (int64_t d = r.d0; d < r.d1; d++)                                                   \
                                for (int64_t h = r.h0; h < r.h1; h++) {                                             \
                                    float *dst = dx + o0 + (d * H + h) * IW;                                        \
                                    for (int64_t i = 0; i < span; i += W) {                                         \
                                        const int64_t cnt = span - i < W ? span - i : W;                            \
                                        if (cnt == W) P##_store(dst + i, P##_load(dst + i) + P##_load(tb + i));     \
                                        else P##_store_part(dst + i, P##_load_part(dst + i, cnt) + P##_load(tb + i), cnt); \
                                    }                                                                               \
                                }                                                                                   \
                            continue;                                                                               \
                        }                                                                                           \
                        if (n <= 2 * W) {                                                                           \
                            const int64_t n0 = n < W ? n : W, n1 = n - n0;                                          \
                            P##_f gy0 = P##_load_part(dy + ow0, n0), gy1 = P##_load_part(dy + ow0 + W, n1);         \
                            P##_f yv0 = zero, yv1 = zero;                                                           \
                            P##_i f0 = P##_first(0), f1 = f0;                                                       \
                            if (is_max) {                                                                           \
                                yv0 = P##_load_part(y + ow0, n0);                                                   \
                                yv1 = P##_load_part(y + ow0 + W, n1);                                               \
                            } else {                                                                                \
                                gy0 = size == 0.0f ? zero : gy0 / size;                                             \
                                gy1 = size == 0.0f ? zero : gy1 / size;                                             \
                            }                                                                                       \
                            if (is_max && !direct) { /* first maxima, then one add each */                          \
                                P##_i at0 = f0, at1 = f0;                                                           \
                                for (int64_t d = r.d0; d < r.d1; d++)                                               \
                                    for (int64_t h = r.h0; h < r.h1; h++) {                                         \
                                        const int64_t o = o0 + (d * H + h) * IW;                                    \
                                        for (int64_t k = 0; k < kx; k += sx) {                                      \
                                            P##_pool_tap_argmax(&f0, &at0, x + o, o, k, yv0, n0, sx, kx, j->xend);  \
                                            if (n1 > 0)                                                             \
                                                P##_pool_tap_argmax(&f1, &at1, x + o + W * sx, o + W * sx, k, yv1,  \
                                                                    n1, sx, kx, j->xend);                           \
                                        }                                                                           \
                                    }                                                                               \
                                P##_pool_scatter(dx, f0, at0, gy0, n0);                                             \
                                if (n1 > 0) P##_pool_scatter(dx, f1, at1, gy1, n1);                                 \
                                continue;                                                                           \
                            }                                                                                       \
                            for (int64_t d = r.d0; d < r.d1; d++)                                                   \
                                for (int64_t h = r.h0; h < r.h1; h++) {                                             \
                                    const int64_t o = o0 + (d * H + h) * IW;                                        \
                                    for (int64_t k = 0; k < kx; k += sx) {                                          \
                                        f0 = P##_pool_tap_back(f0, x + o, dx + o, k, gy0, yv0, n0, sx, kx, is_max,  \
                                                               direct, j->xend);                                    \
                                        if (n1 > 0)                                                                 \
                                            f1 = P##_pool_tap_back(f1, x + o + W * sx, dx + o + W * sx, k, gy1,     \
                                                                   yv1, n1, sx, kx, is_max, direct, j->xend);       \
                                    }                                                                               \
                                }                                                                                   \
                            continue;                                                                               \
                        }                                                                                           \
                        for (int64_t v = 0; v < n; v += W) {                                                        \
                            P##_f gy = P##_load_part(dy + ow0 + v, n - v < W ? n - v : W);                          \
                            if (!is_max) gy = size == 0.0f ? zero : gy / size;                                      \
                            P##_store(gyb + v, gy);                                                                 \
                            memset(foundb + v, 0, sizeof(int32_t) * W);                                             \
                        }                                                                                           \
                        if (is_max && !direct) { /* first maxima, then one add each */                              \
                            for (int64_t d = r.d0; d < r.d1; d++)                                                   \
                                for (int64_t h = r.h0; h < r.h1; h++) {                                             \
                                    const int64_t o = o0 + (d * H + h) * IW;                                        \
                                    for (int64_t v = 0; v < n; v += W) {                                            \
                                        P##_i found, at;                                                            \
                                        memcpy(&found, foundb + v, sizeof(found));                                  \
                                        memcpy(&at, atb + v, sizeof(at));                                           \
                                        const int64_t cnt = n - v < W ? n - v : W;                                  \
                                        const P##_f yv = P##_load_part(y + ow0 + v, cnt);                           \
                                        for (int64_t k = 0; k < kx; k += sx)                                        \
                                            P##_pool_tap_argmax(&found, &at, x + o + v * sx, o + v * sx, k, yv,     \
                                                                cnt, sx, kx, j->xend);                              \
                                        memcpy(foundb + v, &found, sizeof(found));                                  \
                                        memcpy(atb + v, &at, sizeof(at));                                           \
                                    }                                                                               \
                                }                                                                                   \
                            for (int64_t v = 0; v < n; v += W) {                                                    \
                                P##_i found, at;                                                                    \
                                memcpy(&found, foundb + v, sizeof(found));                                          \
                                memcpy(&at, atb + v, sizeof(at));                                                   \
                                P##_pool_scatter(dx, found, at, P##_load(gyb + v), n - v < W ? n - v : W);          \
                            }                                                                                       \
                            continue;                                                                               \
                        }                                                                                           \
                        for (int64_t d = r.d0; d < r.d1; d++)                                                       \
                            for (int64_t h = r.h0; h < r.h1; h++) {                                                 \
                                const int64_t o = o0 + (d * H + h) * IW;                                            \
                                for (int64_t k = 0; k < kx; k += sx)                                                \
                                    for (int64_t v = 0; v < n; v += W) {                                            \
                                        const int64_t cnt = n - v < W ? n - v : W;                                  \
                                        P##_i found;                                                                \
                                        memcpy(&found, foundb + v, sizeof(found));                                  \
                                        P##_f yv = is_max ? P##_load_part(y + ow0 + v, cnt) : zero;                 \
                                        found = P##_pool_tap_back(found, x + o + v * sx, dx + o + v * sx, k,        \
                                                                  P##_load(gyb + v), yv, cnt, sx, kx, is_max,       \
                                                                  direct, j->xend);                                 \
                                        memcpy(foundb + v, &found, sizeof(found));                                  \
                                    }                                                                               \
                            }                                                                                       \
                    }                                                                                               \
                    for (int64_t ow = 0; ow < OW; ow++) {                                                           \
                        if (ow == j->c0) ow = j->c1;                                                                \
                        if (ow >= OW) break;                                                                        \
                        pool_one_back(j, x, dx, &r, ow, y[ow], dy[ow]);                                             \
                    }                                                                                               \
                }                                                                                                   \
        }                                                                                                           \
    }

MX_SIMD_INSTANTIATE(POOL_KERNELS)

static void pool_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const pool_job *j = arg;
    MX_SIMD_DISPATCH(j->level, pool_forward, j, lo, hi);
}

static void pool_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const pool_job *j = arg;
    MX_SIMD_DISPATCH(j->level, pool_backward, j, lo, hi);
}

/* Input elements per piece on the kernel pool (whole planes). */
#define POOL_PIECE 16384

static void pool_job_init(const pool_params *pp, const mx_shape *data, const mx_shape *outp, pool_job *j)
{
    memset(j, 0, sizeof(*j));
    mx_pool_geometry(pp, data, outp, &j->g);
    const pool_geom *g = &j->g;
    j->type = pp->pool_type;
    j->level = mx_simd_level();
    j->incl = pp->count_include_pad;
    j->in_plane = g->in[0] * g->in[1] * g->in[2];
    j->out_plane = g->out[0] * g->out[1] * g->out[2];
    j->whole = true;
    for (int a = 0; a < 3; a++) j->whole &= g->k[a] == g->in[a] && g->p[a] == 0 && g->out[a] == 1;
    /* Interior columns: ow*s - p >= 0 and ow*s - p + k <= W; strides 1 and
     * 2 only (others take the scalar path). */
    const int64_t sx = g->s[2], px = g->p[2], kx = g->k[2], IW = g->in[2], OW = g->out[2];
    int64_t c0 = (px + sx - 1) / sx, c1 = IW + px - kx >= 0 ? (IW + px - kx) / sx + 1 : 0;
    if (c0 > OW) c0 = OW;
    if (c1 > OW) c1 = OW;
    if (c1 < c0 || sx > 2) c1 = c0;
    j->c0 = c0;
    j->c1 = c1;
    /* Windows that tile the input (stride = kernel, no padding, all inside)
     * are backward-written directly by the vector path. */
    bool tile = sx <= 2 && c0 == 0 && c1 == OW;
    for (int a = 0; a < 3; a++) tile &= g->s[a] == g->k[a] && g->p[a] == 0 && g->out[a] * g->k[a] <= g->in[a];
    j->direct = tile && !j->whole;
    /* Short rows of windows that all lie inside (valid, no padding). */
    const int64_t lanes = j->level >= MX_SIMD_AVX512 ? 16 : j->level == MX_SIMD_AVX2 ? 8 : 4;
    j->fast = !j->whole && g->in[0] == 1 && g->k[0] == 1 && g->p[1] == 0 && c0 == 0 && c1 == OW && OW > 0 &&
              OW <= 2 * lanes && (g->out[1] - 1) * g->s[1] + g->k[1] <= g->in[1];
    /* The paths below run on 2-D planes: one depth slice in and out. */
    const bool planar = g->in[0] == 1 && g->k[0] == 1 && g->out[0] == 1;
    /* Max with padding on short rows: padded copies of the planes (the
     * windows' span fits POOL_PAD_MAX floats). */
    j->pad_rows = g->out[1] > 0 ? (g->out[1] - 1) * g->s[1] + g->k[1] : 0;
    j->pad_cols = OW > 0 ? (OW - 1) * sx + kx : 0;
    j->padded = !j->whole && !j->fast && j->type == POOL_MAX && planar && (g->p[1] > 0 || px > 0) && sx <= 2 &&
                OW > 0 && OW <= 2 * lanes && g->out[1] > 0 && j->pad_rows * j->pad_cols <= POOL_PAD_MAX;
    /* 3x3 max at stride 2 on longer rows (ResNet's and Inception-BN's stem
     * pools); its buffers take rows of up to POOL_S2_MAX_OW outputs. */
    j->s2max = !j->whole && !j->fast && !j->padded && j->type == POOL_MAX && planar && g->k[1] == 3 && kx == 3 &&
               g->s[1] == 2 && sx == 2 && g->p[1] <= 1 && px <= 1 && OW > 0 && OW <= POOL_S2_MAX_OW &&
               IW <= 2 * OW + 2 && g->out[1] > 0;
    /* The box path's buffers: rows and output rows up to POOL_BOX_ROW,
     * kernels up to POOL_BOX_KMAX (pads below them), outputs no wider than
     * the padded input. */
    j->box = !j->whole && !j->fast && (j->type == POOL_AVG || j->type == POOL_SUM) && planar && g->s[1] == 1 &&
             sx == 1 && g->k[1] <= POOL_BOX_KMAX && kx <= POOL_BOX_KMAX && g->p[1] < g->k[1] && px < kx &&
             IW <= POOL_BOX_ROW && OW <= POOL_BOX_ROW && OW <= IW + 2 * px && OW > 0 && g->out[1] > 0 &&
             g->out[1] <= POOL_BOX_ROW;
}

static void pool_run(const mx_op_ctx *ctx, pool_job *j, mx_range_fn fn)
{
    const int64_t total = j->g.planes * j->in_plane;
    mx_threadpool *pool = total >= 2 * POOL_PIECE ? mx_op_pool(ctx) : NULL;
    int64_t per_piece = (POOL_PIECE + j->in_plane - 1) / (j->in_plane > 0 ? j->in_plane : 1);
    mx_parallel_for(pool, j->g.planes, mx_parallel_grain(pool, j->g.planes, 4, per_piece), fn, j);
}

static mx_status pool_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const pool_params *pp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    pool_job j;
    pool_job_init(pp, &in[0].shape, &out[0].shape, &j);
    j.add = req[0] == MX_REQ_ADD;
    j.x = in[0].data;
    j.xend = j.x + j.g.planes * j.in_plane;
    j.out = out[0].data;
    pool_run(ctx, &j, pool_forward_range);
    return MX_OK;
}

static mx_status pool_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    const pool_params *pp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    pool_job j;
    pool_job_init(pp, &in[0].shape, &out_grad[0].shape, &j);
    j.add = req[0] == MX_REQ_ADD;
    j.direct &= !j.add;
    j.x = in[0].data;
    j.xend = j.x + j.g.planes * j.in_plane;
    j.y = out[0].data;
    j.dy = out_grad[0].data;
    j.out = in_grad[0].data;
    pool_run(ctx, &j, pool_backward_range);
    return MX_OK;
}

MX_OP_GPU_DECLARE(pooling);

const mx_op_def mx_op_pooling = {
    .name = "Pooling",
    .doc = "Max, average or sum pooling over 1, 2 or 3 spatial axes (NCW, NCHW, NCDHW).",
    .params = pool_param_table,
    .n_params = (int)(sizeof(pool_param_table) / sizeof(pool_param_table[0])),
    .params_size = sizeof(pool_params),
    .check = pool_check,
    .list_inputs = pool_list_inputs,
    .list_outputs = pool_list_outputs,
    .infer_shape = pool_infer_shape,
    .workspace = pool_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .forward = pool_forward,
    .backward = pool_backward,
    .gpu = MX_OP_GPU(pooling),
};
