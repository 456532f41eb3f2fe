/*
 * softmax_output.c - SoftmaxOutput: softmax forward, the gradient of the
 * cross-entropy loss backward (a loss layer: out_grad is ignored unless
 * out_grad=True).
 *
 * Where the softmax runs:
 *   default         data (N, d1, ...) is seen as (N, d1*...) rows;
 *   preserve_shape  over the last axis: (d0*...*d(n-2), d(n-1)) rows;
 *   multi_output    over axis 1 of (N, C, d2, ...): (N, C, d2*...).
 * Labels are class indices stored as floats (truncated to int as MXNet
 * does): (N) or data's shape minus the last axis; (N, d2*...), (N, d2, ...)
 * or (N, 1, d2, ...) for multi_output; or data's own shape, a probability
 * per class ("use probability as label": grad = out - label).
 * Gradient per class j of an instance with label l:
 *   out_j - 1 + alpha (j == l)   out_j - alpha/(C-1) (j != l)
 * (alpha = smooth_alpha), zero for ignored instances (use_ignore), scaled
 * by grad_scale and the normalization (null / batch / valid).
 */
#include "ops/op.h"
#include "ops/softmax_output.h"
#include "ops/cpu/softmax_simd.h"
#include "parallel/parallel.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static const char *const so_norm_choices[] = {"null", "batch", "valid", NULL};

static const mx_param_desc so_param_table[] = {
    {"grad_scale", MX_PARAM_FLOAT, "1", 1, 0, NULL, offsetof(so_params, grad_scale),
     "scales the gradient by a float factor"},
    {"ignore_label", MX_PARAM_FLOAT, "-1", 1, 0, NULL, offsetof(so_params, ignore_label),
     "instances whose label equals this are ignored in backward when use_ignore is set"},
    {"multi_output", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(so_params, multi_output),
     "compute the softmax along axis 1 (one label per position of (N, C, ...))"},
    {"use_ignore", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(so_params, use_ignore),
     "instances labelled ignore_label get no gradient"},
    {"preserve_shape", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(so_params, preserve_shape),
     "compute the softmax along the last axis"},
    {"normalization", MX_PARAM_ENUM, "null", 1, 0, so_norm_choices, offsetof(so_params, normalization),
     "normalizes the gradient: null, batch (by the label count) or valid (by the non-ignored labels)"},
    {"out_grad", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(so_params, out_grad),
     "multiply the gradient with the output gradient element-wise"},
    {"smooth_alpha", MX_PARAM_FLOAT, "0", 0, 1, NULL, offsetof(so_params, smooth_alpha),
     "label smoothing: the true class gets 1-alpha, the others alpha/(C-1)"},
};

static int so_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "label";
    return 2;
}

static int so_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static int64_t dims_product(const mx_shape *s, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= s->dims[i];
    return n;
}

/* The softmax's (outer, classes, inner) view of data. */
static void so_geometry(const so_params *so, const mx_shape *d, int64_t *outer, int64_t *k, int64_t *inner)
{
    if (so->multi_output) {
        *outer = d->dims[0];
        *k = d->dims[1];
        *inner = dims_product(d, 2, d->ndim);
    } else if (so->preserve_shape) {
        *outer = dims_product(d, 0, d->ndim - 1);
        *k = d->dims[d->ndim - 1];
        *inner = 1;
    } else {
        *outer = d->dims[0];
        *k = dims_product(d, 1, d->ndim);
        *inner = 1;
    }
}

static mx_status so_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const so_params *so = p;
    char a[128], b[128], c[128], e[128];
    const mx_shape *d = &in[0];
    if (d->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "SoftmaxOutput: the shape of data is unknown");
    if (d->ndim < 2)
        return MX_ERROR(MX_ERR_INVALID, "SoftmaxOutput: data must have at least 2 dimensions, got %s",
                        mx_shape_str(d, a, sizeof(a)));
    mx_shape *l = &in[1];
    if (!(l->ndim != 0 && mx_shape_equal(l, d))) { /* equal shapes: probabilities as labels */
        if (so->multi_output) {
            mx_shape l1 = MX_SHAPE(d->dims[0], dims_product(d, 2, d->ndim));
            mx_shape l2 = *d, l3 = *d;
            for (int i = 1; i + 1 < d->ndim; i++) l2.dims[i] = d->dims[i + 1];
            l2.dims[--l2.ndim] = 0;
            l3.dims[1] = 1;
            if (l->ndim == 0) {
                *l = l1;
            } else if (!mx_shape_equal(l, &l1) && !mx_shape_equal(l, &l2) && !mx_shape_equal(l, &l3)) {
                return MX_ERROR(MX_ERR_INVALID,
                                "SoftmaxOutput: label has shape %s, expected %s or %s (multi_output, data %s)",
                                mx_shape_str(l, a, sizeof(a)), mx_shape_str(&l1, b, sizeof(b)),
                                mx_shape_str(&l2, c, sizeof(c)), mx_shape_str(d, e, sizeof(e)));
            }
        } else {
            mx_shape want = *d;
            want.dims[--want.ndim] = 0;
            if (l->ndim == 0) {
                *l = want;
            } else if (!mx_shape_equal(l, &want)) {
                return MX_ERROR(MX_ERR_INVALID, "SoftmaxOutput: label has shape %s, expected %s (or data's shape %s)",
                                mx_shape_str(l, a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)),
                                mx_shape_str(d, c, sizeof(c)));
            }
        }
    }
    out[0] = *d;
    return MX_OK;
}

/* The work is cut into units: a row (inner == 1) or SO_CHUNK positions of
 * one outer index; each unit is computed whole by one piece of the kernel
 * pool, so results do not depend on the thread count. */
#define SO_CHUNK 256
#define SO_PIECE 16384 /* elements per piece */

static int64_t so_units(int64_t outer, int64_t inner)
{
    return inner == 1 ? outer : outer * ((inner + SO_CHUNK - 1) / SO_CHUNK);
}

/* y = softmax of x over k entries spaced `inner` apart, for units [u0, u1);
 * req write (x may be y) or add. */
static void softmax_strided(const float *x, float *y, int64_t u0, int64_t u1, int64_t k, int64_t inner, bool add)
{
    if (inner == 1) {
        for (int64_t o = u0; o < u1; o++) {
            const float *xr = x + o * k;
            float *yr = y + o * k;
            float m = sm_row_max(xr, k);
            if (!add) {
                float s = sm_row_exp(xr, yr, k, m, 1.0f);
                sm_row_scale(yr, k, 1.0f / s);
            } else {
                float s = sm_row_exp(xr, NULL, k, m, 1.0f);
                sm_row_exp_add(xr, yr, k, m, 1.0f, 1.0f / s);
            }
        }
        return;
    }
    float m[SO_CHUNK], s[SO_CHUNK];
    const int64_t chunks = (inner + SO_CHUNK - 1) / SO_CHUNK;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t o = u / chunks, c0 = u % chunks * SO_CHUNK;
        const int64_t w = inner - c0 < SO_CHUNK ? inner - c0 : SO_CHUNK;
        const float *xb = x + o * k * inner + c0;
        float *yb = y + o * k * inner + c0;
        for (int64_t t = 0; t < w; t++) {
            m[t] = -INFINITY;
            s[t] = 0.0f;
        }
        for (int64_t j = 0; j < k; j++) sm_lanes_max(m, xb + j * inner, w);
        for (int64_t j = 0; j < k; j++) sm_lanes_exp(xb + j * inner, add ? NULL : yb + j * inner, m, s, w, 1.0f);
        for (int64_t t = 0; t < w; t++) s[t] = 1.0f / s[t];
        for (int64_t j = 0; j < k; j++) {
            if (!add)
                for (int64_t t = 0; t < w; t++) yb[j * inner + t] *= s[t];
            else
                sm_lanes_exp_add(xb + j * inner, yb + j * inner, m, s, w, 1.0f);
        }
    }
}

typedef struct so_fwd_job {
    const float *x;
    float *y;
    int64_t k, inner;
    bool add;
} so_fwd_job;

static void so_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const so_fwd_job *j = arg;
    softmax_strided(j->x, j->y, lo, hi, j->k, j->inner, j->add);
}

/* Runs fn over `units` units of `per_unit` elements on the kernel pool
 * when there is enough work. */
static void so_parallel(const mx_op_ctx *ctx, int64_t units, int64_t per_unit, mx_range_fn fn, void *arg)
{
    mx_threadpool *pool = units * per_unit >= 2 * SO_PIECE ? mx_op_pool(ctx) : NULL;
    int64_t min_units = (SO_PIECE + per_unit - 1) / (per_unit > 0 ? per_unit : 1);
    mx_parallel_for(pool, units, mx_parallel_grain(pool, units, 4, min_units), fn, arg);
}

static mx_status so_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, k, inner;
    so_geometry(p, &in[0].shape, &outer, &k, &inner);
    so_fwd_job j = {.x = in[0].data, .y = out[0].data, .k = k, .inner = inner, .add = req[0] == MX_REQ_ADD};
    int64_t units = so_units(outer, inner);
    so_parallel(ctx, units, units ? outer * k * inner / units : 0, so_forward_range, &j);
    return MX_OK;
}

/* A float label as MXNet's static_cast<int>; values no int can hold map to
 * a sentinel that matches no class (and no ignore_label). */
static int64_t label_index(double v)
{
    if (!(v > -2147483648.0 && v < 2147483648.0)) return INT64_MIN;
    return (int64_t)v;
}

static inline void put(float *dst, float v, bool add)
{
    if (add) *dst += v;
    else *dst = v;
}

/* Backward over outer indices [lo, hi) (the label-index form). */
typedef struct so_bwd_job {
    const so_params *so;
    const float *y, *label, *og;
    float *g;
    int64_t k, inner, ignore;
    float sc, on, off;
    bool add;
} so_bwd_job;

static void so_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const so_bwd_job *j = arg;
    const int64_t k = j->k, inner = j->inner;
    for (int64_t o = lo; o < hi; o++) {
        for (int64_t t = 0; t < inner; t++) {
            int64_t li = label_index(j->label[o * inner + t]);
            int64_t base = o * k * inner + t;
            if (j->so->use_ignore && li == j->ignore) {
                if (!j->add)
                    for (int64_t c = 0; c < k; c++) j->g[base + c * inner] = 0.0f;
                continue;
            }
            for (int64_t c = 0; c < k; c++) {
                int64_t i = base + c * inner;
                float v = j->sc * (j->y[i] - (c == li ? j->on : j->off));
                put(&j->g[i], j->og ? v * j->og[i] : v, j->add);
            }
        }
    }
}

static mx_status so_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    const so_params *so = p;
    const mx_shape *ds = &in[0].shape;
    int64_t total = mx_shape_size(ds);
    if (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD) /* labels get no gradient */
        memset(in_grad[1].data, 0, (size_t)mx_shape_size(&in[1].shape) * sizeof(float));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const float *y = out[0].data, *label = in[1].data;
    const float *og = NULL;
    if (so->out_grad) {
        og = out_grad[0].data;
        if (!og) return MX_ERROR(MX_ERR_RUNTIME, "SoftmaxOutput: out_grad=True but no output gradient was given");
    }
    float *g = in_grad[0].data;
    bool add = req[0] == MX_REQ_ADD;

    if (mx_shape_equal(&in[1].shape, ds)) { /* probabilities as labels: no normalization */
        float sc = (float)(so->grad_scale * mx_op_loss_scale(ctx));
        for (int64_t i = 0; i < total; i++) {
            float v = sc * (y[i] - label[i]);
            put(&g[i], og ? v * og[i] : v, add);
        }
        return MX_OK;
    }

    int64_t outer, k, inner;
    so_geometry(so, ds, &outer, &k, &inner);
    /* For the row layouts MXNet reads one label per row, the first `outer`
     * of a label array that may hold more; counts use the whole array. */
    int64_t n_label = mx_shape_size(&in[1].shape);
    int64_t ignore = label_index(so->ignore_label);
    double valid;
    if (so->normalization == SO_NORM_BATCH) {
        valid = so->multi_output ? (double)outer : (double)n_label;
    } else if (so->normalization == SO_NORM_VALID) {
        int64_t cnt = n_label;
        for (int64_t i = 0; i < n_label; i++)
            if (label_index(label[i]) == ignore) cnt--;
        valid = cnt == 0 ? 1.0 : (double)cnt;
    } else {
        valid = 1.0;
    }
    double scale = so->grad_scale * mx_op_loss_scale(ctx) / valid;
    if (so->multi_output && so->normalization != SO_NORM_VALID) scale /= (double)inner;
    float sc = (float)scale;
    float alpha = (float)so->smooth_alpha;
    float off = k > 1 ? alpha / (float)(k - 1) : 0.0f; /* what every other class gets */
    float on = 1.0f - alpha;                          /* what the labelled class gets */

    so_bwd_job j = {.so = so, .y = y, .label = label, .og = og, .g = g, .k = k, .inner = inner, .ignore = ignore,
                    .sc = sc, .on = on, .off = off, .add = add};
    so_parallel(ctx, outer, k * inner, so_backward_range, &j);
    return MX_OK;
}

static const mx_inplace so_forward_inplace[] = {{0, 0}, {-1, -1}};
/* "Softmax" is MXNet's deprecated name for this layer (old model files use
 * it); lower-case "softmax" is the plain differentiable op (softmax.c). */
static const char *const so_aliases[] = {"Softmax", NULL};

MX_OP_GPU_DECLARE(softmax_output);

const mx_op_def mx_op_softmax_output = {
    .name = "SoftmaxOutput",
    .aliases = so_aliases,
    .doc = "Softmax forward; backward returns the gradient of cross-entropy against the label.",
    .params = so_param_table,
    .n_params = (int)(sizeof(so_param_table) / sizeof(so_param_table[0])),
    .params_size = sizeof(so_params),
    .flags = MX_OP_LOSS,
    .list_inputs = so_list_inputs,
    .list_outputs = so_list_outputs,
    .infer_shape = so_infer_shape,
    /* out_grad only matters with out_grad=True; deps cannot depend on params. */
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .forward_inplace = so_forward_inplace,
    .forward = so_forward,
    .backward = so_backward,
    .gpu = MX_OP_GPU(softmax_output),
};
