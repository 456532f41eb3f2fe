/*
 * softmax.c - the plain differentiable softmax and log_softmax along one
 * axis (MXNet's nn/softmax-inl.h), with a temperature T:
 *   softmax(x)_j     = exp(x_j / T) / sum_k exp(x_k / T)
 *   log_softmax(x)_j = x_j / T - log sum_k exp(x_k / T)
 * Backward: dx = y (dy - sum dy*y) / T, and dx = (dy - exp(y) sum dy) / T.
 * softmax with use_length=True takes a second input `length` (data's shape
 * without the axis) and only the first length[...] entries along the axis
 * take part; the others output 0 (and so get no gradient).
 * Not to be confused with SoftmaxOutput (the loss layer, softmax_output.c).
 */
#include "ops/op.h"
#include "ops/softmax.h"
#include "ops/cpu/softmax_simd.h"
#include "parallel/parallel.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const sm_dtype_choices[] = {"None", "float16", "float32", "float64", NULL};

static const mx_param_desc sm_param_table[] = {
    {"axis", MX_PARAM_INT, "-1", 1, 0, NULL, offsetof(sm_params, axis), "the axis along which to compute"},
    {"temperature", MX_PARAM_STRING, "None", 1, 0, NULL, offsetof(sm_params, temperature),
     "temperature T dividing the input (None: 1)"},
    {"dtype", MX_PARAM_ENUM, "None", 1, 0, sm_dtype_choices, offsetof(sm_params, dtype),
     "output data type (None: data's type); only float32 is supported"},
    {"use_length", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(sm_params, use_length),
     "take a second input `length`: only the first length entries along the axis take part"},
};

/* The temperature as a number; check() has validated the text. */
static double sm_temperature(const sm_params *sm)
{
    if (!strcmp(sm->temperature, "None")) return 1.0;
    return strtod(sm->temperature, NULL);
}

static mx_status sm_check_common(const char *op, const sm_params *sm)
{
    if (strcmp(sm->temperature, "None") != 0) {
        char *end;
        double t = strtod(sm->temperature, &end);
        if (end == sm->temperature || *end || !isfinite(t) || t == 0.0)
            return MX_ERROR(MX_ERR_INVALID,
                            "%s: parameter 'temperature' has bad value '%s': expected None or a non-zero number", op,
                            sm->temperature);
    }
    if (sm->dtype != SM_DTYPE_NONE && sm->dtype != SM_DTYPE_F32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: parameter 'dtype' value '%s' is not supported (only float32)", op,
                        sm_dtype_choices[sm->dtype]);
    return MX_OK;
}

static mx_status softmax_check(const void *p) { return sm_check_common("softmax", p); }

static mx_status log_softmax_check(const void *p)
{
    const sm_params *sm = p;
    MX_TRY(sm_check_common("log_softmax", sm));
    if (sm->use_length)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "log_softmax: parameter 'use_length' value 'True' is not supported "
                                            "(only softmax takes a length input)");
    return MX_OK;
}

static int sm_list_inputs(const void *p, const char **names)
{
    const sm_params *sm = p;
    names[0] = "data";
    if (!sm->use_length) return 1;
    names[1] = "length";
    return 2;
}

static int sm_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

/* The axis in [0, ndim), or -1 when out of range. */
static int sm_axis(const sm_params *sm, int ndim)
{
    int64_t a = sm->axis < 0 ? sm->axis + ndim : sm->axis;
    return a >= 0 && a < ndim ? (int)a : -1;
}

static mx_status sm_infer(const char *op, const sm_params *sm, mx_shape *in, mx_shape *out)
{
    char a[128], b[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", op);
    int axis = sm_axis(sm, in[0].ndim);
    if (axis < 0)
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter 'axis' has value %lld, out of range for data of shape %s", op,
                        (long long)sm->axis, mx_shape_str(&in[0], a, sizeof(a)));
    if (sm->use_length) {
        if (in[0].ndim < 2)
            return MX_ERROR(MX_ERR_INVALID, "%s: use_length needs data with at least 2 dimensions, got %s", op,
                            mx_shape_str(&in[0], a, sizeof(a)));
        mx_shape want = in[0];
        for (int i = axis; i + 1 < want.ndim; i++) want.dims[i] = want.dims[i + 1];
        want.dims[--want.ndim] = 0;
        if (in[1].ndim == 0) in[1] = want;
        else if (!mx_shape_equal(&in[1], &want))
            return MX_ERROR(MX_ERR_INVALID, "%s: length has shape %s, expected %s", op,
                            mx_shape_str(&in[1], a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)));
    }
    out[0] = in[0];
    return MX_OK;
}

static mx_status softmax_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    return sm_infer("softmax", p, in, out);
}

static mx_status log_softmax_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    return sm_infer("log_softmax", p, in, out);
}

/* (outer, n, inner) around the axis. */
static void sm_geometry(const sm_params *sm, const mx_shape *s, int64_t *outer, int64_t *n, int64_t *inner)
{
    int axis = sm_axis(sm, s->ndim);
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s->dims[i];
    for (int i = axis + 1; i < s->ndim; i++) *inner *= s->dims[i];
    *n = s->dims[axis];
}

static inline void put(float *dst, float v, bool add) { *dst = add ? *dst + v : v; }

/* One lane: n entries spaced `stride` apart, of which the first `len` take
 * part (the rest output 0). Write (x may be y) or add. */
static void sm_lane(const float *x, float *y, int64_t n, int64_t stride, int64_t len, float it, bool logsm, bool add)
{
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = 0; j < len; j++) m = x[j * stride] > m ? x[j * stride] : m;
    if (!logsm && !add) { /* one exp per entry: store, then scale */
        for (int64_t j = 0; j < len; j++) {
            float e = expf((x[j * stride] - m) * it);
            y[j * stride] = e;
            s += e;
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < len; j++) y[j * stride] *= inv;
        for (int64_t j = len; j < n; j++) y[j * stride] = 0.0f;
        return;
    }
    for (int64_t j = 0; j < len; j++) s += expf((x[j * stride] - m) * it);
    if (logsm) {
        float ls = logf(s);
        for (int64_t j = 0; j < len; j++) put(&y[j * stride], (x[j * stride] - m) * it - ls, add);
    } else {
        float inv = 1.0f / s;
        for (int64_t j = 0; j < len; j++) put(&y[j * stride], expf((x[j * stride] - m) * it) * inv, add);
    }
    if (!add)
        for (int64_t j = len; j < n; j++) y[j * stride] = 0.0f;
}

#define SM_CHUNK 256

/* The work is cut into units: a row (inner == 1), or SM_CHUNK lanes of one
 * outer index (inner > 1); each unit is computed whole by one piece, so
 * results do not depend on how units are spread over threads. */
static int64_t sm_units(int64_t outer, int64_t inner)
{
    return inner == 1 ? outer : outer * ((inner + SM_CHUNK - 1) / SM_CHUNK);
}

/* Units [u0, u1) at full length. Rows (inner == 1) run on contiguous
 * memory; the strided case runs SM_CHUNK lanes at once so the inner loops
 * are contiguous. y may be x when writing. */
static void sm_forward_full(const float *x, float *y, int64_t u0, int64_t u1, int64_t n, int64_t inner, float it,
                            bool logsm, bool add)
{
    if (inner == 1) {
        for (int64_t o = u0; o < u1; o++) {
            const float *xr = x + o * n;
            float *yr = y + o * n;
            float m = sm_row_max(xr, n);
            if (logsm) {
                float ls = logf(sm_row_exp(xr, NULL, n, m, it));
                for (int64_t j = 0; j < n; j++) put(&yr[j], (xr[j] - m) * it - ls, add);
            } else if (!add) {
                float s = sm_row_exp(xr, yr, n, m, it);
                sm_row_scale(yr, n, 1.0f / s);
            } else {
                float s = sm_row_exp(xr, NULL, n, m, it);
                sm_row_exp_add(xr, yr, n, m, it, 1.0f / s);
            }
        }
        return;
    }
    float m[SM_CHUNK], s[SM_CHUNK];
    const int64_t chunks = (inner + SM_CHUNK - 1) / SM_CHUNK;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t o = u / chunks, c0 = u % chunks * SM_CHUNK;
        const int64_t w = inner - c0 < SM_CHUNK ? inner - c0 : SM_CHUNK;
        const float *xb = x + o * n * inner + c0;
        float *yb = y + o * n * inner + c0;
        for (int64_t t = 0; t < w; t++) {
            m[t] = -INFINITY;
            s[t] = 0.0f;
        }
        for (int64_t j = 0; j < n; j++) sm_lanes_max(m, xb + j * inner, w);
        bool store = !logsm && !add; /* keep the exps, then scale them */
        for (int64_t j = 0; j < n; j++) sm_lanes_exp(xb + j * inner, store ? yb + j * inner : NULL, m, s, w, it);
        if (logsm) {
            for (int64_t t = 0; t < w; t++) s[t] = logf(s[t]);
            for (int64_t j = 0; j < n; j++)
                for (int64_t t = 0; t < w; t++) put(&yb[j * inner + t], (xb[j * inner + t] - m[t]) * it - s[t], add);
        } else {
            for (int64_t t = 0; t < w; t++) s[t] = 1.0f / s[t];
            for (int64_t j = 0; j < n; j++) {
                if (store)
                    for (int64_t t = 0; t < w; t++) yb[j * inner + t] *= s[t];
                else
                    sm_lanes_exp_add(xb + j * inner, yb + j * inner, m, s, w, it);
            }
        }
    }
}

/* length[i] of any numeric dtype, clamped to [0, n]. */
static int64_t length_at(const mx_tensor *len, int64_t i, int64_t n)
{
    double v;
    switch (len->dtype) {
    case MX_FLOAT64: v = ((const double *)len->data)[i]; break;
    case MX_INT32: v = ((const int32_t *)len->data)[i]; break;
    case MX_INT64: v = (double)((const int64_t *)len->data)[i]; break;
    case MX_UINT8: v = ((const uint8_t *)len->data)[i]; break;
    case MX_INT8: v = ((const int8_t *)len->data)[i]; break;
    default: v = ((const float *)len->data)[i]; break;
    }
    if (!(v > 0)) return 0;
    return v >= (double)n ? n : (int64_t)v;
}

/* One kernel call, split across the kernel pool by units (forward and
 * backward at full length) or by outer index (lengths). */
typedef struct sm_job {
    const float *x, *y, *dy; /* forward: x; backward: y and dy */
    float *out;              /* forward y, backward dx */
    const mx_tensor *length; /* use_length forward: the lengths */
    int64_t n, inner;
    float it;
    bool logsm, add;
} sm_job;

#define SM_PIECE 16384 /* elements per piece on the kernel pool */

static void sm_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const sm_job *j = arg;
    sm_forward_full(j->x, j->out, lo, hi, j->n, j->inner, j->it, j->logsm, j->add);
}

static void sm_length_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const sm_job *j = arg;
    for (int64_t o = lo; o < hi; o++)
        for (int64_t t = 0; t < j->inner; t++) {
            int64_t off = o * j->n * j->inner + t;
            sm_lane(j->x + off, j->out + off, j->n, j->inner, length_at(j->length, o * j->inner + t, j->n), j->it,
                    j->logsm, j->add);
        }
}

/* Runs fn over `units` units of `per_unit` elements each. */
static void sm_parallel(const mx_op_ctx *ctx, int64_t units, int64_t per_unit, mx_range_fn fn, void *arg)
{
    mx_threadpool *pool = units * per_unit >= 2 * SM_PIECE ? mx_op_pool(ctx) : NULL;
    int64_t min_units = (SM_PIECE + per_unit - 1) / (per_unit > 0 ? per_unit : 1);
    mx_parallel_for(pool, units, mx_parallel_grain(pool, units, 4, min_units), fn, arg);
}

static mx_status sm_forward(const mx_op_ctx *ctx, const sm_params *sm, bool logsm, const mx_tensor *in,
                            const mx_req *req, mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, n, inner;
    sm_geometry(sm, &in[0].shape, &outer, &n, &inner);
    sm_job j = {.x = in[0].data, .out = out[0].data, .n = n, .inner = inner,
                .it = (float)(1.0 / sm_temperature(sm)), .logsm = logsm, .add = req[0] == MX_REQ_ADD};
    if (!sm->use_length) {
        int64_t units = sm_units(outer, inner);
        sm_parallel(ctx, units, units ? outer * n * inner / units : 0, sm_forward_range, &j);
        return MX_OK;
    }
    j.length = &in[1];
    sm_parallel(ctx, outer, n * inner, sm_length_range, &j);
    return MX_OK;
}

/* dx from y and dy for units [u0, u1) (rows when inner == 1, else
 * SM_CHUNK lanes of one outer index); dx may be dy. */
static void sm_backward_full(const float *y, const float *dy, float *dx, int64_t u0, int64_t u1, int64_t n,
                             int64_t inner, float it, bool logsm, bool add)
{
    if (inner == 1) {
        for (int64_t o = u0; o < u1; o++) {
            const float *yr = y + o * n, *gr = dy + o * n;
            float *xr = dx + o * n, s = 0.0f;
            if (logsm) {
                for (int64_t j = 0; j < n; j++) s += gr[j];
                sm_logsm_bwd(yr, gr, xr, n, &s, 0, it, add);
            } else {
                for (int64_t j = 0; j < n; j++) s += gr[j] * yr[j];
                for (int64_t j = 0; j < n; j++) put(&xr[j], yr[j] * (gr[j] - s) * it, add);
            }
        }
        return;
    }
    float s[SM_CHUNK];
    const int64_t chunks = (inner + SM_CHUNK - 1) / SM_CHUNK;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t o = u / chunks, c0 = u % chunks * SM_CHUNK;
        const int64_t w = inner - c0 < SM_CHUNK ? inner - c0 : SM_CHUNK, base = o * n * inner + c0;
        const float *yb = y + base, *gb = dy + base;
        float *xb = dx + base;
        for (int64_t t = 0; t < w; t++) s[t] = 0.0f;
        if (logsm) {
            for (int64_t j = 0; j < n; j++)
                for (int64_t t = 0; t < w; t++) s[t] += gb[j * inner + t];
            for (int64_t j = 0; j < n; j++) sm_logsm_bwd(yb + j * inner, gb + j * inner, xb + j * inner, w, s, 1, it, add);
        } else {
            for (int64_t j = 0; j < n; j++)
                for (int64_t t = 0; t < w; t++) s[t] += gb[j * inner + t] * yb[j * inner + t];
            for (int64_t j = 0; j < n; j++)
                for (int64_t t = 0; t < w; t++) {
                    int64_t i = j * inner + t;
                    put(&xb[i], yb[i] * (gb[i] - s[t]) * it, add);
                }
        }
    }
}

static void sm_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const sm_job *j = arg;
    sm_backward_full(j->y, j->dy, j->out, lo, hi, j->n, j->inner, j->it, j->logsm, j->add);
}

static mx_status sm_backward(const mx_op_ctx *ctx, const sm_params *sm, bool logsm, const mx_tensor *out_grad,
                             const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad)
{
    if (sm->use_length && req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD) /* length gets no gradient */
        memset(in_grad[1].data, 0, (size_t)mx_shape_size(&in[1].shape) * mx_dtype_size(in_grad[1].dtype));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, n, inner;
    sm_geometry(sm, &in[0].shape, &outer, &n, &inner);
    /* Entries past a length have y = 0, so softmax's formula already gives
     * them no gradient: the length input is not needed here. */
    sm_job j = {.y = out[0].data, .dy = out_grad[0].data, .out = in_grad[0].data, .n = n, .inner = inner,
                .it = (float)(1.0 / sm_temperature(sm)), .logsm = logsm, .add = req[0] == MX_REQ_ADD};
    int64_t units = sm_units(outer, inner);
    sm_parallel(ctx, units, units ? outer * n * inner / units : 0, sm_backward_range, &j);
    return MX_OK;
}

static mx_status softmax_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return sm_forward(ctx, p, false, in, req, out);
}

static mx_status log_softmax_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                     mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    return sm_forward(ctx, p, true, in, req, out);
}

static mx_status softmax_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)aux;
    return sm_backward(ctx, p, false, out_grad, in, out, req, in_grad);
}

static mx_status log_softmax_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                      const mx_tensor *in, const mx_tensor *out, const mx_req *req,
                                      mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    return sm_backward(ctx, p, true, out_grad, in, out, req, in_grad);
}

MX_OP_GPU_DECLARE(softmax);
MX_OP_GPU_DECLARE(log_softmax);

static const mx_inplace sm_inplace[] = {{0, 0}, {-1, -1}};

const mx_op_def mx_op_softmax = {
    .name = "softmax",
    .doc = "Softmax along an axis: exp(x/T) / sum exp(x/T).",
    .params = sm_param_table,
    .n_params = (int)(sizeof(sm_param_table) / sizeof(sm_param_table[0])),
    .params_size = sizeof(sm_params),
    .check = softmax_check,
    .list_inputs = sm_list_inputs,
    .list_outputs = sm_list_outputs,
    .infer_shape = softmax_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA,
    .forward_inplace = sm_inplace,
    .backward_inplace = sm_inplace,
    .forward = softmax_forward,
    .backward = softmax_backward,
    .gpu = MX_OP_GPU(softmax),
};

const mx_op_def mx_op_log_softmax = {
    .name = "log_softmax",
    .doc = "Log of the softmax along an axis: x/T - log sum exp(x/T).",
    .params = sm_param_table,
    .n_params = (int)(sizeof(sm_param_table) / sizeof(sm_param_table[0])),
    .params_size = sizeof(sm_params),
    .check = log_softmax_check,
    .list_inputs = sm_list_inputs,
    .list_outputs = sm_list_outputs,
    .infer_shape = log_softmax_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_OUT_DATA,
    .forward_inplace = sm_inplace,
    .backward_inplace = sm_inplace,
    .forward = log_softmax_forward,
    .backward = log_softmax_backward,
    .gpu = MX_OP_GPU(log_softmax),
};
