/*
 * fully_connected.c - FullyConnected: out = data * weight^T + bias.
 * data (N, ...) is flattened to (N, K) when flatten=True, otherwise its
 * last axis is K; weight (num_hidden, K); bias (num_hidden). SGEMM does
 * the work in both directions.
 */
#include "ops/fully_connected.h"

#include "blas/blas.h"

#include <stddef.h>
#include <string.h>

MX_OP_GPU_DECLARE(fully_connected);

static const mx_param_desc fc_param_table[] = {
    {"num_hidden", MX_PARAM_INT, NULL, 1, 1e9, NULL, offsetof(fc_params, num_hidden), "number of outputs"},
    {"no_bias", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(fc_params, no_bias), "omit the bias"},
    {"flatten", MX_PARAM_BOOL, "True", 1, 0, NULL, offsetof(fc_params, flatten),
     "flatten data to 2-D (else apply to the last axis)"},
};

static int fc_list_inputs(const void *p, const char **names)
{
    const fc_params *fc = p;
    names[0] = "data";
    names[1] = "weight";
    if (fc->no_bias) return 2;
    names[2] = "bias";
    return 3;
}

static int fc_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status expect_shape(const char *what, mx_shape *have, mx_shape want)
{
    char a[128], b[128];
    if (have->ndim == 0) {
        *have = want;
        return MX_OK;
    }
    if (!mx_shape_equal(have, &want))
        return MX_ERROR(MX_ERR_INVALID, "FullyConnected: %s has shape %s, expected %s", what,
                        mx_shape_str(have, a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)));
    return MX_OK;
}

static mx_status fc_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const fc_params *fc = p;
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "FullyConnected: the shape of data is unknown");
    if (in[0].ndim < 2 && fc->flatten)
        return MX_ERROR(MX_ERR_INVALID, "FullyConnected: data must have at least 2 dimensions, got %d", in[0].ndim);
    int64_t rows, k;
    fc_rows_cols(fc, &in[0], &rows, &k);
    MX_TRY(expect_shape("weight", &in[1], MX_SHAPE(fc->num_hidden, k)));
    if (!fc->no_bias) MX_TRY(expect_shape("bias", &in[2], MX_SHAPE(fc->num_hidden)));
    if (fc->flatten) {
        out[0] = MX_SHAPE(in[0].dims[0], fc->num_hidden);
    } else {
        out[0] = in[0];
        out[0].dims[out[0].ndim - 1] = fc->num_hidden;
    }
    return MX_OK;
}

static mx_status fc_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const fc_params *fc = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    MX_TRY(mx_fold_check_req(&ctx->fold, req[0], "FullyConnected"));
    int64_t rows, k;
    fc_rows_cols(fc, &in[0].shape, &rows, &k);
    int64_t h = fc->num_hidden;
    float *y = out[0].data;
    float beta = req[0] == MX_REQ_ADD ? 1.0f : 0.0f;
    if (!fc->no_bias) {
        /* Put the bias in first, then let SGEMM accumulate onto it. */
        const float *b = in[2].data;
        for (int64_t r = 0; r < rows; r++) {
            float *row = y + r * h;
            if (beta == 0.0f) memcpy(row, b, (size_t)h * sizeof(float));
            else for (int64_t j = 0; j < h; j++) row[j] += b[j];
        }
        beta = 1.0f;
    }
    mx_sgemm(mx_op_pool(ctx), false, true, rows, h, k, 1.0f, in[0].data, k, in[1].data, k, beta, y, h);
    mx_fold_forward(mx_op_pool(ctx), &ctx->fold, y, rows * h);
    return MX_OK;
}

static mx_status fc_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out;
    (void)aux;
    const fc_params *fc = p;
    int64_t rows, k;
    fc_rows_cols(fc, &in[0].shape, &rows, &k);
    int64_t h = fc->num_hidden;
    const float *dy = out_grad[0].data;
    if (req[0] != MX_REQ_NULL) /* dX (rows, k) = dY (rows, h) * W (h, k) */
        mx_sgemm(mx_op_pool(ctx), false, false, rows, k, h, 1.0f, dy, h, in[1].data, k,
                 req[0] == MX_REQ_ADD ? 1.0f : 0.0f, in_grad[0].data, k);
    if (req[1] != MX_REQ_NULL) /* dW (h, k) = dY^T (h, rows) * X (rows, k) */
        mx_sgemm(mx_op_pool(ctx), true, false, h, k, rows, 1.0f, dy, h, in[0].data, k,
                 req[1] == MX_REQ_ADD ? 1.0f : 0.0f, in_grad[1].data, k);
    if (!fc->no_bias && req[2] != MX_REQ_NULL) { /* db = column sums of dY */
        float *db = in_grad[2].data;
        if (req[2] != MX_REQ_ADD) memset(db, 0, (size_t)h * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < h; j++) db[j] += dy[r * h + j];
    }
    return MX_OK;
}

static const char *const fc_aliases[] = {"fullc", NULL};

const mx_op_def mx_op_fully_connected = {
    .name = "FullyConnected",
    .aliases = fc_aliases,
    .doc = "Applies a linear transformation: Y = X W^T + b.",
    .params = fc_param_table,
    .n_params = (int)(sizeof(fc_param_table) / sizeof(fc_param_table[0])),
    .params_size = sizeof(fc_params),
    .list_inputs = fc_list_inputs,
    .list_outputs = fc_list_outputs,
    .infer_shape = fc_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = (1u << 0) | (1u << 1), /* data and weight, not the bias */
    .folds_elementwise = true,
    .forward = fc_forward,
    .backward = fc_backward,
    .gpu = MX_OP_GPU(fully_connected),
};
