/*
 * batch_dot.c - batch_dot (MXNet's tensor/dot.cc): for every batch index,
 * out = op(lhs) op(rhs), op transposing the last two axes when transpose_a /
 * transpose_b. lhs (..., M, K) and rhs (..., K, N) have the same leading
 * (batch) axes, at least one; out is (..., M, N). The products are OpenBLAS
 * calls, one per batch entry; backward is two more per entry.
 */
#include "ops/op.h"
#include "ops/batch_dot.h"

#include "blas/blas.h"

#include <stddef.h>
#include <stdio.h>

static const char *const bd_stype_choices[] = {"None", "csr", "default", "row_sparse", NULL};

static const mx_param_desc bd_param_table[] = {
    {"transpose_a", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(batch_dot_params, transpose_a),
     "transpose the last two axes of lhs"},
    {"transpose_b", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(batch_dot_params, transpose_b),
     "transpose the last two axes of rhs"},
    {"forward_stype", MX_PARAM_ENUM, "None", 1, 0, bd_stype_choices, offsetof(batch_dot_params, forward_stype),
     "output storage type; only dense (None or default) is supported"},
};

static mx_status bd_check(const void *p)
{
    const batch_dot_params *bp = p;
    if (bp->forward_stype == 1 || bp->forward_stype == 3)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "batch_dot: parameter 'forward_stype' value '%s' is not supported "
                                            "(dense only)",
                        bd_stype_choices[bp->forward_stype]);
    return MX_OK;
}

static int bd_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "lhs";
    names[1] = "rhs";
    return 2;
}

static int bd_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

typedef struct bd_dims {
    int64_t batch, m, n, k;
} bd_dims;

static mx_status bd_dims_of(const batch_dot_params *bp, const mx_shape *a, const mx_shape *b, bd_dims *d)
{
    char x[128], y[128];
    x[0] = y[0] = '\0';
    bool ok = a->ndim >= 3 && a->ndim == b->ndim;
    for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->dims[i] == b->dims[i];
    int na = a->ndim;
    int64_t m = 0, ka = 0, kb = 0, n = 0;
    if (ok) {
        m = bp->transpose_a ? a->dims[na - 1] : a->dims[na - 2];
        ka = bp->transpose_a ? a->dims[na - 2] : a->dims[na - 1];
        kb = bp->transpose_b ? b->dims[na - 1] : b->dims[na - 2];
        n = bp->transpose_b ? b->dims[na - 2] : b->dims[na - 1];
        ok = ka == kb;
    }
    if (!ok)
        return MX_ERROR(MX_ERR_INVALID,
                        "batch_dot: lhs %s and rhs %s do not multiply (transpose_a=%d, transpose_b=%d): both need "
                        "the same batch axes and at least 3 dimensions, and lhs's K must equal rhs's",
                        mx_shape_str(a, x, sizeof(x)), mx_shape_str(b, y, sizeof(y)), bp->transpose_a,
                        bp->transpose_b);
    d->batch = 1;
    for (int i = 0; i < na - 2; i++) d->batch *= a->dims[i];
    d->m = m, d->n = n, d->k = ka;
    return MX_OK;
}

static mx_status bd_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0].ndim == 0 || in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "batch_dot: the shapes of lhs and rhs must be known");
    bd_dims d;
    MX_TRY(bd_dims_of(p, &in[0], &in[1], &d));
    mx_shape o = in[0];
    o.dims[o.ndim - 2] = d.m;
    o.dims[o.ndim - 1] = d.n;
    out[0] = o;
    return MX_OK;
}

static mx_status bd_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const batch_dot_params *bp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (in[0].dtype != MX_FLOAT32 || in[1].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "batch_dot: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype != MX_FLOAT32 ? in[0].dtype : in[1].dtype));
    bd_dims d;
    MX_TRY(bd_dims_of(bp, &in[0].shape, &in[1].shape, &d));
    const float *a = in[0].data, *b = in[1].data;
    float *c = out[0].data;
    int64_t lda = bp->transpose_a ? d.m : d.k, ldb = bp->transpose_b ? d.k : d.n;
    float beta = req[0] == MX_REQ_ADD ? 1.0f : 0.0f;
    for (int64_t i = 0; i < d.batch; i++)
        mx_sgemm(mx_op_pool(ctx), bp->transpose_a, bp->transpose_b, d.m, d.n, d.k, 1.0f, a + i * d.m * d.k, lda,
                 b + i * d.k * d.n, ldb, beta, c + i * d.m * d.n, d.n);
    return MX_OK;
}

static mx_status bd_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out, (void)aux;
    const batch_dot_params *bp = p;
    bd_dims d;
    MX_TRY(bd_dims_of(bp, &in[0].shape, &in[1].shape, &d));
    int64_t M = d.m, N = d.n, K = d.k;
    bool ta = bp->transpose_a, tb = bp->transpose_b;
    mx_threadpool *pool = mx_op_pool(ctx);
    for (int64_t i = 0; i < d.batch; i++) {
        const float *A = (const float *)in[0].data + i * M * K, *B = (const float *)in[1].data + i * K * N;
        const float *dC = (const float *)out_grad[0].data + i * M * N;
        if (req[0] != MX_REQ_NULL) {
            float *dA = (float *)in_grad[0].data + i * M * K, beta = req[0] == MX_REQ_ADD ? 1.0f : 0.0f;
            if (!ta && !tb) mx_sgemm(pool, false, true, M, K, N, 1.0f, dC, N, B, N, beta, dA, K);
            else if (!ta) mx_sgemm(pool, false, false, M, K, N, 1.0f, dC, N, B, K, beta, dA, K);
            else if (!tb) mx_sgemm(pool, false, true, K, M, N, 1.0f, B, N, dC, N, beta, dA, M);
            else mx_sgemm(pool, true, true, K, M, N, 1.0f, B, K, dC, N, beta, dA, M);
        }
        if (req[1] != MX_REQ_NULL) {
            float *dB = (float *)in_grad[1].data + i * K * N, beta = req[1] == MX_REQ_ADD ? 1.0f : 0.0f;
            if (!ta && !tb) mx_sgemm(pool, true, false, K, N, M, 1.0f, A, K, dC, N, beta, dB, N);
            else if (!ta) mx_sgemm(pool, true, false, N, K, M, 1.0f, dC, N, A, K, beta, dB, K);
            else if (!tb) mx_sgemm(pool, false, false, K, N, M, 1.0f, A, M, dC, N, beta, dB, N);
            else mx_sgemm(pool, true, true, N, K, M, 1.0f, dC, N, A, M, beta, dB, K);
        }
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(batch_dot);

const mx_op_def mx_op_batch_dot = {
    .name = "batch_dot",
    .doc = "Batched matrix product of lhs (..., M, K) and rhs (..., K, N), optionally transposed.",
    .params = bd_param_table,
    .n_params = (int)(sizeof(bd_param_table) / sizeof(bd_param_table[0])),
    .params_size = sizeof(batch_dot_params),
    .check = bd_check,
    .list_inputs = bd_list_inputs,
    .list_outputs = bd_list_outputs,
    .infer_shape = bd_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward = bd_forward,
    .backward = bd_backward,
    .gpu = MX_OP_GPU(batch_dot),
};
