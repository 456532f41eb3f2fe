/*
 * reshape.c - Reshape: the same data seen with another shape of equal size.
 * `shape` takes MXNet's special codes, read left to right against the
 * input dimensions (right to left when reverse=True):
 *    d > 0  a new dimension d (consumes one input dimension)
 *    0      copy the input dimension
 *   -1      infer this dimension from the remaining size (at most one)
 *   -2      copy all remaining input dimensions
 *   -3      merge two consecutive input dimensions into their product
 *   -4 a b  split one input dimension into a and b (one of them may be -1)
 * e.g. (2,3,4) with (4,0,2) -> (4,3,2); (-3,-2) -> (6,4); (-4,1,2,-2) ->
 * (1,2,3,4); (10,5,4) with (-1,0) -> (40,5), reverse=True -> (50,4).
 * The legacy target_shape / keep_highest parameters are recognised and
 * rejected with a message pointing at `shape`.
 */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

MX_OP_GPU_DECLARE(reshape);

typedef struct reshape_params {
    mx_tuple shape;
    bool reverse;
    mx_tuple target_shape;
    bool keep_highest;
} reshape_params;

static const mx_param_desc reshape_param_table[] = {
    {"shape", MX_PARAM_TUPLE, "()", 1, 0, NULL, offsetof(reshape_params, shape),
     "the target shape, with codes 0 (copy), -1 (infer), -2 (copy rest), -3 (merge two), -4 (split)"},
    {"reverse", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(reshape_params, reverse),
     "match the codes against the input dimensions from the right"},
    {"target_shape", MX_PARAM_TUPLE, "()", 1, 0, NULL, offsetof(reshape_params, target_shape),
     "deprecated (MXNet's legacy form): rejected, use shape"},
    {"keep_highest", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(reshape_params, keep_highest),
     "deprecated (MXNet's legacy form): rejected, use shape with a leading 0"},
};

#define RS_MAX 32 /* codes and result dimensions while inferring */

static const char *tuple_text(const mx_tuple *t, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)t->v[i]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

/* The codes in walking order (reversed for reverse=True, as MXNet does). */
static int rs_codes(const reshape_params *rp, int64_t *codes)
{
    int n = rp->shape.ndim;
    for (int i = 0; i < n; i++) codes[i] = rp->reverse ? rp->shape.v[n - 1 - i] : rp->shape.v[i];
    return n;
}

/* Checks what does not depend on the input shape. */
static mx_status reshape_check(const void *p)
{
    const reshape_params *rp = p;
    char buf[160];
    if (rp->target_shape.ndim > 0)
        return MX_ERROR(MX_ERR_INVALID,
                        "Reshape: parameter 'target_shape' (value '%s') is MXNet's deprecated form and is not "
                        "supported; use 'shape' (0 copies a dimension, -1 infers one)",
                        tuple_text(&rp->target_shape, buf, sizeof(buf)));
    if (rp->keep_highest)
        return MX_ERROR(MX_ERR_INVALID, "Reshape: parameter 'keep_highest' is MXNet's deprecated form and is not "
                                        "supported; use 'shape' with a leading 0 to keep the first dimension");
    if (rp->shape.ndim <= 0)
        return MX_ERROR(MX_ERR_INVALID, "Reshape: parameter 'shape' has bad value '%s': give the target shape",
                        rp->shape.ndim < 0 ? "None" : "()");
    int64_t c[MX_MAX_NDIM];
    int n = rs_codes(rp, c), infer = 0;
    const char *text = tuple_text(&rp->shape, buf, sizeof(buf));
    for (int i = 0; i < n; i++) {
        if (c[i] < -4)
            return MX_ERROR(MX_ERR_INVALID,
                            "Reshape: parameter 'shape' has bad value '%s': %lld is neither a size nor a code "
                            "(0, -1, -2, -3, -4)",
                            text, (long long)c[i]);
        if (c[i] == -1 && ++infer > 1)
            return MX_ERROR(MX_ERR_INVALID, "Reshape: parameter 'shape' has bad value '%s': only one -1 is allowed",
                            text);
        if (c[i] == -4) {
            if (i + 2 >= n)
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: parameter 'shape' has bad value '%s': -4 must be followed by the two "
                                "sizes to split into%s",
                                text, rp->reverse ? " (codes are read from the right with reverse=True)" : "");
            int64_t a = c[i + 1], b = c[i + 2];
            if ((a <= 0 && a != -1) || (b <= 0 && b != -1) || (a == -1 && b == -1))
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: parameter 'shape' has bad value '%s': the sizes after -4 (%lld, %lld) must "
                                "be positive, one of them may be -1",
                                text, (long long)a, (long long)b);
            i += 2;
        }
    }
    return MX_OK;
}

static int reshape_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int reshape_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status reshape_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const reshape_params *rp = p;
    char sbuf[160], dbuf[128], obuf[128];
    const mx_shape *ds = &in[0];
    if (ds->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Reshape: the shape of data is unknown");
    const char *stext = tuple_text(&rp->shape, sbuf, sizeof(sbuf));
    const char *dtext = mx_shape_str(ds, dbuf, sizeof(dbuf));
    int64_t c[MX_MAX_NDIM], d[MX_MAX_NDIM], r[RS_MAX];
    int nc = rs_codes(rp, c), nd = ds->ndim, nr = 0, src = 0, inf = -1;
    for (int i = 0; i < nd; i++) d[i] = rp->reverse ? ds->dims[nd - 1 - i] : ds->dims[i];
    for (int i = 0; i < nc; i++) {
        int64_t code = c[i];
        if (nr + 2 > RS_MAX) break;
        if (code == 0) {
            if (src >= nd)
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: shape %s: code 0 has no input dimension left to copy (data shape %s)", stext,
                                dtext);
            r[nr++] = d[src++];
        } else if (code == -1) {
            inf = nr;
            r[nr++] = 1;
            src++;
        } else if (code == -2) {
            while (src < nd && nr < RS_MAX) r[nr++] = d[src++];
        } else if (code == -3) {
            if (src + 1 >= nd)
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: shape %s: code -3 needs two input dimensions to merge (data shape %s)",
                                stext, dtext);
            r[nr++] = d[src] * d[src + 1];
            src += 2;
        } else if (code == -4) {
            if (src >= nd)
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: shape %s: code -4 has no input dimension left to split (data shape %s)",
                                stext, dtext);
            int64_t d0 = d[src++], a = c[i + 1], b = c[i + 2];
            if (a == -1) a = d0 / b;
            if (b == -1) b = d0 / a;
            if (a * b != d0)
                return MX_ERROR(MX_ERR_INVALID,
                                "Reshape: shape %s: split sizes %lld, %lld do not multiply to the input dimension "
                                "%lld (data shape %s)",
                                stext, (long long)a, (long long)b, (long long)d0, dtext);
            r[nr++] = a;
            r[nr++] = b;
            i += 2;
        } else {
            r[nr++] = code;
            src++;
        }
    }
    if (nr > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "Reshape: shape %s on data %s gives %d dimensions, more than %d", stext,
                        dtext, nr, MX_MAX_NDIM);
    int64_t size = mx_shape_size(ds);
    if (inf >= 0) {
        int64_t known = 1;
        for (int i = 0; i < nr; i++) known *= r[i];
        if (known == 0 || size % known != 0)
            return MX_ERROR(MX_ERR_INVALID,
                            "Reshape: shape %s: cannot infer the -1 dimension, %lld elements of data %s are not a "
                            "multiple of %lld",
                            stext, (long long)size, dtext, (long long)known);
        r[inf] = size / known;
    }
    mx_shape o = {.ndim = nr};
    for (int i = 0; i < nr; i++) o.dims[i] = rp->reverse ? r[nr - 1 - i] : r[i];
    if (mx_shape_size(&o) != size)
        return MX_ERROR(MX_ERR_INVALID,
                        "Reshape: target shape %s (from shape %s) has %lld elements, data %s has %lld",
                        mx_shape_str(&o, obuf, sizeof(obuf)), stext, (long long)mx_shape_size(&o), dtext,
                        (long long)size);
    out[0] = o;
    return MX_OK;
}

/* dst = src (or dst += src) over n elements of dtype; dst may be src. */
static mx_status reshape_copy(void *dst, const void *src, int64_t n, mx_dtype dtype, mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    if (req != MX_REQ_ADD) {
        if (dst != src) memcpy(dst, src, (size_t)n * mx_dtype_size(dtype));
        return MX_OK;
    }
    if (dtype == MX_FLOAT32) {
        float *dd = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) dd[i] += s[i];
    } else if (dtype == MX_FLOAT64) {
        double *dd = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) dd[i] += s[i];
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Reshape: accumulating (req add) into %s is not supported",
                        mx_dtype_name(dtype));
    }
    return MX_OK;
}

static mx_status reshape_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    return reshape_copy(out[0].data, in[0].data, mx_shape_size(&in[0].shape), in[0].dtype, req[0]);
}

static mx_status reshape_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)ctx, (void)p, (void)in, (void)out, (void)aux;
    return reshape_copy(in_grad[0].data, out_grad[0].data, mx_shape_size(&out_grad[0].shape), out_grad[0].dtype,
                        req[0]);
}

static const mx_inplace reshape_inplace[] = {{0, 0}, {-1, -1}};
static const char *const reshape_aliases[] = {"reshape", NULL};

const mx_op_def mx_op_reshape = {
    .name = "Reshape",
    .aliases = reshape_aliases,
    .doc = "Reshapes data to `shape` (codes 0, -1, -2, -3, -4; reverse reads them from the right).",
    .params = reshape_param_table,
    .n_params = (int)(sizeof(reshape_param_table) / sizeof(reshape_param_table[0])),
    .params_size = sizeof(reshape_params),
    .check = reshape_check,
    .list_inputs = reshape_list_inputs,
    .list_outputs = reshape_list_outputs,
    .infer_shape = reshape_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = reshape_inplace,
    .backward_inplace = reshape_inplace,
    .forward = reshape_forward,
    .backward = reshape_backward,
    .gpu = MX_OP_GPU(reshape),
};
