/*
 * slice.c - slice (alias crop), slice_axis and slice_like (MXNet's
 * tensor/matrix_op.cc). Each picks, per axis, the elements begin,
 * begin + step, ... (out_len of them) and shares one strided kernel:
 * forward gathers them; backward writes the output gradient back to those
 * positions and zero elsewhere (or adds it, for req add).
 *
 *   slice(begin, end, step=()): tuples as long as each other and at most
 *     ndim, entries None or an integer, Python's slice rules per axis
 *     (negative from the end, clamped, possibly empty); step 0 is an error.
 *   slice_axis(axis, begin, end): one axis; end None means its size;
 *     after adding the size to negatives, 0 <= begin < end <= size.
 *   slice_like(data, shape_like, axes=()): data's first shape_like.shape[a]
 *     elements along each axis in `axes` (all when empty; then the ranks
 *     must agree). shape_like gets a zero gradient.
 */
#include "ops/op.h"
#include "ops/slice.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* out (len...) gathered from in (dims), or in_grad scattered from out_grad. */
static void slice_walk(const slice_plan *sp, const mx_shape *d, float *big, float *small, bool gather, bool add)
{
    int nd = sp->ndim;
    int64_t stride[MX_MAX_NDIM] = {0}, s = 1, n = 1;
    for (int k = nd - 1; k >= 0; k--) {
        stride[k] = s * sp->step[k];
        s *= d->dims[k];
        n *= sp->len[k];
    }
    if (n == 0) return;
    int64_t base = 0, s2 = 1;
    for (int k = nd - 1; k >= 0; k--) {
        base += sp->begin[k] * s2;
        s2 *= d->dims[k];
    }
    int64_t idx[MX_MAX_NDIM] = {0}, off = base, last = sp->len[nd - 1], ls = stride[nd - 1];
    for (int64_t o = 0; o < n; o += last) {
        float *dst = small + o;
        if (gather) {
            if (add)
                for (int64_t j = 0; j < last; j++) dst[j] += big[off + j * ls];
            else
                for (int64_t j = 0; j < last; j++) dst[j] = big[off + j * ls];
        } else {
            if (add)
                for (int64_t j = 0; j < last; j++) big[off + j * ls] += dst[j];
            else
                for (int64_t j = 0; j < last; j++) big[off + j * ls] = dst[j];
        }
        for (int k = nd - 2; k >= 0; k--) {
            off += stride[k];
            if (++idx[k] < sp->len[k]) break;
            off -= stride[k] * idx[k];
            idx[k] = 0;
        }
    }
}

static mx_status slice_fwd(const char *op, const slice_plan *sp, const mx_tensor *in, const mx_req *req,
                           mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s data is not supported (float32 only)", op,
                        mx_dtype_name(in[0].dtype));
    slice_walk(sp, &in[0].shape, in[0].data, out[0].data, true, req[0] == MX_REQ_ADD);
    return MX_OK;
}

static void slice_bwd(const slice_plan *sp, const mx_tensor *out_grad, const mx_req *req, mx_tensor *in_grad)
{
    if (req[0] == MX_REQ_NULL) return;
    if (req[0] != MX_REQ_ADD)
        memset(in_grad[0].data, 0, (size_t)mx_shape_size(&in_grad[0].shape) * sizeof(float));
    slice_walk(sp, &in_grad[0].shape, in_grad[0].data, out_grad[0].data, false, req[0] == MX_REQ_ADD);
}

static int slice_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int slice_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static void plan_shape(const slice_plan *sp, mx_shape *out)
{
    mx_shape o = {.ndim = sp->ndim};
    for (int k = 0; k < sp->ndim; k++) o.dims[k] = sp->len[k];
    *out = o;
}

/* ------------------------------------------------------------ slice */

#define SLICE_NONE INT64_MIN

typedef struct slice_params {
    char begin[MX_PARAM_STRING_MAX], end[MX_PARAM_STRING_MAX], step[MX_PARAM_STRING_MAX];
} slice_params;

static const mx_param_desc slice_param_table[] = {
    {"begin", MX_PARAM_STRING, NULL, 1, 0, NULL, offsetof(slice_params, begin),
     "first index per axis, e.g. (0, None, 2)"},
    {"end", MX_PARAM_STRING, NULL, 1, 0, NULL, offsetof(slice_params, end),
     "end index (exclusive) per axis; None: to the end"},
    {"step", MX_PARAM_STRING, "()", 1, 0, NULL, offsetof(slice_params, step), "step per axis; None or absent: 1"},
};

/* "(1, None, -2)", "[1,None]", "1", "()" into v (SLICE_NONE for None).
 * Returns the count, or -1 on bad text. */
static int parse_opt_tuple(const char *text, int64_t *v)
{
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    char close = 0;
    if (*p == '(' || *p == '[') close = *p++ == '(' ? ')' : ']';
    int n = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (close && *p == close) {
            p++;
            break;
        }
        if (!*p) {
            if (close) return -1;
            break;
        }
        if (n == MX_MAX_NDIM) return -1;
        if (!strncmp(p, "None", 4)) {
            v[n++] = SLICE_NONE;
            p += 4;
        } else {
            char *end;
            errno = 0;
            long long x = strtoll(p, &end, 10);
            if (end == p || errno) return -1;
            v[n++] = x;
            p = end;
        }
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (close && *p != close) return -1;
        else if (!close && *p) return -1;
    }
    while (isspace((unsigned char)*p)) p++;
    return *p ? -1 : n;
}

static mx_status slice_check(const void *p)
{
    const slice_params *sp = p;
    int64_t b[MX_MAX_NDIM], e[MX_MAX_NDIM], s[MX_MAX_NDIM];
    int nb = parse_opt_tuple(sp->begin, b), ne = parse_opt_tuple(sp->end, e), ns = parse_opt_tuple(sp->step, s);
    const char *bad = nb < 0 ? "begin" : ne < 0 ? "end" : ns < 0 ? "step" : NULL;
    if (bad)
        return MX_ERROR(MX_ERR_INVALID, "slice: parameter '%s' has bad value '%s': expected a tuple of integers or None "
                                        "(at most %d)",
                        bad, nb < 0 ? sp->begin : ne < 0 ? sp->end : sp->step, MX_MAX_NDIM);
    if (nb != ne)
        return MX_ERROR(MX_ERR_INVALID, "slice: begin %s and end %s must have the same length", sp->begin, sp->end);
    if (ns != 0 && ns != nb)
        return MX_ERROR(MX_ERR_INVALID, "slice: step %s must be empty or as long as begin %s", sp->step, sp->begin);
    for (int i = 0; i < ns; i++)
        if (s[i] == 0) return MX_ERROR(MX_ERR_INVALID, "slice: parameter 'step' has value %s: step %d is 0", sp->step, i);
    return MX_OK;
}

/* Python's slice(b, e, s).indices(n): first index and count. */
static void py_slice(int64_t b, int64_t e, int64_t s, int64_t n, int64_t *first, int64_t *count)
{
    if (s > 0) {
        b = b == SLICE_NONE ? 0 : b < 0 ? (b + n < 0 ? 0 : b + n) : (b > n ? n : b);
        e = e == SLICE_NONE ? n : e < 0 ? (e + n < 0 ? 0 : e + n) : (e > n ? n : e);
        *count = e > b ? (e - b + s - 1) / s : 0;
    } else {
        b = b == SLICE_NONE ? n - 1 : b < 0 ? (b + n < 0 ? -1 : b + n) : (b >= n ? n - 1 : b);
        e = e == SLICE_NONE ? -1 : e < 0 ? (e + n < 0 ? -1 : e + n) : (e >= n ? n - 1 : e);
        *count = b > e ? (b - e - s - 1) / -s : 0;
    }
    *first = *count ? b : 0;
}

static mx_status slice_plan_of(const slice_params *sp, const mx_shape *d, slice_plan *pl)
{
    char a[128];
    int64_t b[MX_MAX_NDIM], e[MX_MAX_NDIM], s[MX_MAX_NDIM];
    int n = parse_opt_tuple(sp->begin, b), ns = parse_opt_tuple(sp->step, s);
    parse_opt_tuple(sp->end, e);
    if (n > d->ndim)
        return MX_ERROR(MX_ERR_INVALID, "slice: begin %s has %d axes, data %s only %d", sp->begin, n,
                        mx_shape_str(d, a, sizeof(a)), d->ndim);
    pl->ndim = d->ndim;
    for (int k = 0; k < d->ndim; k++) {
        if (k >= n) {
            pl->begin[k] = 0, pl->step[k] = 1, pl->len[k] = d->dims[k];
            continue;
        }
        int64_t st = ns && s[k] != SLICE_NONE ? s[k] : 1;
        pl->step[k] = st;
        py_slice(b[k], e[k], st, d->dims[k], &pl->begin[k], &pl->len[k]);
    }
    return MX_OK;
}

mx_status mx_slice_plan_slice(const void *params, const mx_shape *d, slice_plan *pl)
{
    return slice_plan_of(params, d, pl);
}

static mx_status slice_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "slice: the shape of data is unknown");
    slice_plan pl;
    MX_TRY(slice_plan_of(p, &in[0], &pl));
    plan_shape(&pl, &out[0]);
    return MX_OK;
}

static mx_status slice_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    slice_plan pl;
    MX_TRY(slice_plan_of(p, &in[0].shape, &pl));
    return slice_fwd("slice", &pl, in, req, out);
}

static mx_status slice_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(slice_plan_of(p, &in_grad[0].shape, &pl));
    slice_bwd(&pl, out_grad, req, in_grad);
    return MX_OK;
}

MX_OP_GPU_DECLARE(slice);
MX_OP_GPU_DECLARE(slice_axis);
MX_OP_GPU_DECLARE(slice_like);

static const char *const slice_aliases[] = {"crop", NULL};

const mx_op_def mx_op_slice = {
    .name = "slice",
    .aliases = slice_aliases,
    .doc = "Slices data per axis with Python's begin:end:step rules.",
    .params = slice_param_table,
    .n_params = (int)(sizeof(slice_param_table) / sizeof(slice_param_table[0])),
    .params_size = sizeof(slice_params),
    .check = slice_check,
    .list_inputs = slice_list_inputs,
    .list_outputs = slice_list_outputs,
    .infer_shape = slice_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = slice_forward,
    .backward = slice_backward,
    .gpu = MX_OP_GPU(slice),
};

/* ------------------------------------------------------------ slice_axis */

typedef struct slice_axis_params {
    int64_t axis, begin;
    char end[MX_PARAM_STRING_MAX];
} slice_axis_params;

static const mx_param_desc slice_axis_param_table[] = {
    {"axis", MX_PARAM_INT, NULL, 1, 0, NULL, offsetof(slice_axis_params, axis), "the axis to slice"},
    {"begin", MX_PARAM_INT, NULL, 1, 0, NULL, offsetof(slice_axis_params, begin), "first index (negative: from the end)"},
    {"end", MX_PARAM_STRING, NULL, 1, 0, NULL, offsetof(slice_axis_params, end),
     "end index, exclusive (negative: from the end; None: the axis size)"},
};

static mx_status slice_axis_end(const slice_axis_params *sp, int64_t *end, bool *none)
{
    *none = !strcmp(sp->end, "None");
    if (*none) return MX_OK;
    char *e;
    errno = 0;
    long long v = strtoll(sp->end, &e, 10);
    if (e == sp->end || *e || errno)
        return MX_ERROR(MX_ERR_INVALID, "slice_axis: parameter 'end' has bad value '%s': expected an integer or None",
                        sp->end);
    *end = v;
    return MX_OK;
}

static mx_status slice_axis_check(const void *p)
{
    int64_t e;
    bool none;
    return slice_axis_end(p, &e, &none);
}

static mx_status slice_axis_plan(const slice_axis_params *sp, const mx_shape *d, slice_plan *pl)
{
    char a[128];
    int nd = d->ndim;
    int64_t ax = sp->axis < 0 ? sp->axis + nd : sp->axis;
    if (ax < 0 || ax >= nd)
        return MX_ERROR(MX_ERR_INVALID, "slice_axis: parameter 'axis' has value %lld, out of range for data %s",
                        (long long)sp->axis, mx_shape_str(d, a, sizeof(a)));
    int64_t size = d->dims[ax], b = sp->begin, e = size;
    bool none;
    MX_TRY(slice_axis_end(sp, &e, &none));
    if (none) e = size;
    if (b < 0) b += size;
    if (e < 0) e += size;
    if (b < 0 || e > size || b >= e)
        return MX_ERROR(MX_ERR_INVALID,
                        "slice_axis: begin %lld, end %s do not give 0 <= begin < end <= %lld on axis %lld of data %s",
                        (long long)sp->begin, sp->end, (long long)size, (long long)ax, mx_shape_str(d, a, sizeof(a)));
    pl->ndim = nd;
    for (int k = 0; k < nd; k++) pl->begin[k] = 0, pl->step[k] = 1, pl->len[k] = d->dims[k];
    pl->begin[ax] = b;
    pl->len[ax] = e - b;
    return MX_OK;
}

mx_status mx_slice_plan_axis(const void *params, const mx_shape *d, slice_plan *pl)
{
    return slice_axis_plan(params, d, pl);
}

static mx_status slice_axis_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "slice_axis: the shape of data is unknown");
    slice_plan pl;
    MX_TRY(slice_axis_plan(p, &in[0], &pl));
    plan_shape(&pl, &out[0]);
    return MX_OK;
}

static mx_status slice_axis_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                    mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    slice_plan pl;
    MX_TRY(slice_axis_plan(p, &in[0].shape, &pl));
    return slice_fwd("slice_axis", &pl, in, req, out);
}

static mx_status slice_axis_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                     const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                     mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(slice_axis_plan(p, &in_grad[0].shape, &pl));
    slice_bwd(&pl, out_grad, req, in_grad);
    return MX_OK;
}

const mx_op_def mx_op_slice_axis = {
    .name = "slice_axis",
    .doc = "Slices data along one axis: begin <= i < end.",
    .params = slice_axis_param_table,
    .n_params = (int)(sizeof(slice_axis_param_table) / sizeof(slice_axis_param_table[0])),
    .params_size = sizeof(slice_axis_params),
    .check = slice_axis_check,
    .list_inputs = slice_list_inputs,
    .list_outputs = slice_list_outputs,
    .infer_shape = slice_axis_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = slice_axis_forward,
    .backward = slice_axis_backward,
    .gpu = MX_OP_GPU(slice_axis),
};

/* ------------------------------------------------------------ slice_like */

typedef struct slice_like_params {
    mx_tuple axes;
} slice_like_params;

static const mx_param_desc slice_like_param_table[] = {
    {"axes", MX_PARAM_TUPLE, "()", 1, 0, NULL, offsetof(slice_like_params, axes),
     "the axes to slice like shape_like; () means all"},
};

static int slice_like_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "shape_like";
    return 2;
}

static mx_status slice_like_plan(const slice_like_params *sp, const mx_shape *d, const mx_shape *like,
                                 slice_plan *pl)
{
    char a[128], b[128];
    int nd = d->ndim;
    pl->ndim = nd;
    for (int k = 0; k < nd; k++) pl->begin[k] = 0, pl->step[k] = 1, pl->len[k] = d->dims[k];
    bool all = sp->axes.ndim <= 0;
    if (all && like->ndim != nd)
        return MX_ERROR(MX_ERR_INVALID, "slice_like: data %s and shape_like %s differ in rank (axes=() slices all)",
                        mx_shape_str(d, a, sizeof(a)), mx_shape_str(like, b, sizeof(b)));
    int n = all ? nd : sp->axes.ndim;
    for (int i = 0; i < n; i++) {
        int64_t v = all ? i : sp->axes.v[i];
        int64_t ax = v < 0 ? v + nd : v;
        if (ax < 0 || ax >= nd || ax >= like->ndim)
            return MX_ERROR(MX_ERR_INVALID, "slice_like: axis %lld is out of range for data %s and shape_like %s",
                            (long long)v, mx_shape_str(d, a, sizeof(a)), mx_shape_str(like, b, sizeof(b)));
        if (like->dims[ax] > d->dims[ax])
            return MX_ERROR(MX_ERR_INVALID, "slice_like: axis %lld of shape_like %s is longer than data's %s",
                            (long long)ax, mx_shape_str(like, b, sizeof(b)), mx_shape_str(d, a, sizeof(a)));
        pl->len[ax] = like->dims[ax];
    }
    return MX_OK;
}

mx_status mx_slice_plan_like(const void *params, const mx_shape *d, const mx_shape *like, slice_plan *pl)
{
    return slice_like_plan(params, d, like, pl);
}

static mx_status slice_like_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0 || in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "slice_like: the shapes of data and shape_like must be known");
    slice_plan pl;
    MX_TRY(slice_like_plan(p, &in[0], &in[1], &pl));
    plan_shape(&pl, &out[0]);
    return MX_OK;
}

static mx_status slice_like_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                    mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    slice_plan pl;
    MX_TRY(slice_like_plan(p, &in[0].shape, &in[1].shape, &pl));
    return slice_fwd("slice_like", &pl, in, req, out);
}

static mx_status slice_like_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                     const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                     mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    slice_plan pl;
    MX_TRY(slice_like_plan(p, &in_grad[0].shape, &in_grad[1].shape, &pl));
    slice_bwd(&pl, out_grad, req, in_grad);
    if (req[1] == MX_REQ_WRITE || req[1] == MX_REQ_INPLACE) /* shape_like only lends its shape */
        memset(in_grad[1].data, 0, (size_t)mx_shape_size(&in_grad[1].shape) * sizeof(float));
    return MX_OK;
}

const mx_op_def mx_op_slice_like = {
    .name = "slice_like",
    .doc = "Slices data to the shape of shape_like along `axes` (all when empty).",
    .params = slice_like_param_table,
    .n_params = (int)(sizeof(slice_like_param_table) / sizeof(slice_like_param_table[0])),
    .params_size = sizeof(slice_like_params),
    .list_inputs = slice_like_list_inputs,
    .list_outputs = slice_list_outputs,
    .infer_shape = slice_like_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = slice_like_forward,
    .backward = slice_like_backward,
    .gpu = MX_OP_GPU(slice_like),
};
