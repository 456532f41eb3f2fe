/*
 * transpose.c - transpose: permutes the axes of data; out.shape[i] =
 * data.shape[axes[i]]. axes=() reverses them; negative axes count from the
 * end. Backward applies the inverse permutation to the output gradient.
 * The kernel walks the output in blocks so that both the read and the
 * write side stay within cache lines when the innermost axis moves.
 */
#include "ops/op.h"
#include "ops/transpose.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const mx_param_desc transpose_param_table[] = {
    {"axes", MX_PARAM_TUPLE, "()", 1, 0, NULL, offsetof(transpose_params, axes),
     "the permutation of the axes; () reverses them"},
};

static int transpose_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int transpose_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static const char *tuple_text(const mx_tuple *t, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)t->v[i]);
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

/* perm[i] = the input axis that becomes output axis i. */
static mx_status transpose_perm(const transpose_params *tp, const mx_shape *d, int *perm)
{
    char a[128], b[128];
    int nd = d->ndim;
    if (tp->axes.ndim <= 0) {
        for (int i = 0; i < nd; i++) perm[i] = nd - 1 - i;
        return MX_OK;
    }
    if (tp->axes.ndim != nd)
        return MX_ERROR(MX_ERR_INVALID, "transpose: parameter 'axes' has value %s, %d axes for data of shape %s",
                        tuple_text(&tp->axes, a, sizeof(a)), tp->axes.ndim, mx_shape_str(d, b, sizeof(b)));
    bool seen[MX_MAX_NDIM] = {false};
    for (int i = 0; i < nd; i++) {
        int64_t ax = tp->axes.v[i] < 0 ? tp->axes.v[i] + nd : tp->axes.v[i];
        if (ax < 0 || ax >= nd || seen[ax])
            return MX_ERROR(MX_ERR_INVALID,
                            "transpose: parameter 'axes' has value %s, not a permutation of the %d axes of data %s",
                            tuple_text(&tp->axes, a, sizeof(a)), nd, mx_shape_str(d, b, sizeof(b)));
        seen[ax] = true;
        perm[i] = (int)ax;
    }
    return MX_OK;
}

static mx_status transpose_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "transpose: the shape of data is unknown");
    int perm[MX_MAX_NDIM];
    MX_TRY(transpose_perm(p, &in[0], perm));
    mx_shape o = in[0];
    for (int i = 0; i < in[0].ndim; i++) o.dims[i] = in[0].dims[perm[i]];
    out[0] = o;
    return MX_OK;
}

#define TP_BLOCK 32

/* dst (dims[perm[0]], ..., dims[perm[nd-1]]) = src (dims) permuted; write or
 * add. src and dst do not overlap. */
static void permute(const float *src, const int64_t *dims, int nd, const int *perm, float *dst, bool add)
{
    int64_t in_stride[MX_MAX_NDIM], od[MX_MAX_NDIM], st[MX_MAX_NDIM], ost[MX_MAX_NDIM];
    int64_t s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        in_stride[k] = s;
        s *= dims[k];
    }
    for (int i = 0; i < nd; i++) {
        od[i] = dims[perm[i]];
        st[i] = in_stride[perm[i]];
    }
    s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        ost[i] = s;
        s *= od[i];
    }
    int64_t total = s;
    if (total == 0) return;
    if (nd == 0) {
        dst[0] = add ? dst[0] + src[0] : src[0];
        return;
    }
    int last = nd - 1, q = last; /* q: the output axis that reads contiguously */
    for (int i = 0; i < nd; i++)
        if (perm[i] == nd - 1) q = i;
    /* Odometer over the output axes other than q and last. */
    int64_t idx[MX_MAX_NDIM] = {0};
    int64_t nq = q == last ? 1 : od[q], nl = od[last];
    for (;;) {
        int64_t ib = 0, ob = 0;
        for (int i = 0; i < nd; i++)
            if (i != q && i != last) {
                ib += idx[i] * st[i];
                ob += idx[i] * ost[i];
            }
        if (q == last) {
            const float *sp = src + ib;
            float *dp = dst + ob;
            if (add)
                for (int64_t j = 0; j < nl; j++) dp[j] += sp[j];
            else
                memcpy(dp, sp, (size_t)nl * sizeof(float));
        } else {
            int64_t sl = st[last], oq = ost[q];
            for (int64_t a0 = 0; a0 < nq; a0 += TP_BLOCK)
                for (int64_t b0 = 0; b0 < nl; b0 += TP_BLOCK) {
                    int64_t a1 = a0 + TP_BLOCK < nq ? a0 + TP_BLOCK : nq;
                    int64_t b1 = b0 + TP_BLOCK < nl ? b0 + TP_BLOCK : nl;
                    for (int64_t a = a0; a < a1; a++) {
                        const float *sp = src + ib + a; /* st[q] == 1 */
                        float *dp = dst + ob + a * oq;
                        if (add)
                            for (int64_t b = b0; b < b1; b++) dp[b] += sp[b * sl];
                        else
                            for (int64_t b = b0; b < b1; b++) dp[b] = sp[b * sl];
                    }
                }
        }
        int i = nd - 1;
        for (; i >= 0; i--) {
            if (i == q || i == last) continue;
            if (++idx[i] < od[i]) break;
            idx[i] = 0;
        }
        if (i < 0) break;
    }
}

static mx_status transpose_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                   mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "transpose: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype));
    int perm[MX_MAX_NDIM];
    MX_TRY(transpose_perm(p, &in[0].shape, perm));
    permute(in[0].data, in[0].shape.dims, in[0].shape.ndim, perm, out[0].data, req[0] == MX_REQ_ADD);
    return MX_OK;
}

static mx_status transpose_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                    mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int perm[MX_MAX_NDIM], inv[MX_MAX_NDIM];
    const mx_shape *ds = &in_grad[0].shape;
    MX_TRY(transpose_perm(p, ds, perm));
    for (int i = 0; i < ds->ndim; i++) inv[perm[i]] = i;
    /* out_grad has the output's dims; permuting them by inv gives data's. */
    permute(out_grad[0].data, out_grad[0].shape.dims, ds->ndim, inv, in_grad[0].data, req[0] == MX_REQ_ADD);
    return MX_OK;
}

MX_OP_GPU_DECLARE(transpose);

const mx_op_def mx_op_transpose = {
    .name = "transpose",
    .doc = "Permutes the axes of data (axes=() reverses them).",
    .params = transpose_param_table,
    .n_params = (int)(sizeof(transpose_param_table) / sizeof(transpose_param_table[0])),
    .params_size = sizeof(transpose_params),
    .list_inputs = transpose_list_inputs,
    .list_outputs = transpose_list_outputs,
    .infer_shape = transpose_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = transpose_forward,
    .backward = transpose_backward,
    .gpu = MX_OP_GPU(transpose),
};
