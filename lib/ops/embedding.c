/*
 * embedding.c - Embedding: out[..., :] = weight[index, :] for every index
 * in data, which holds integer indices stored as floats (MXNet's
 * convention). Indices are truncated toward zero and clipped to
 * [0, input_dim - 1] as MXNet's take does. data (d0, ..., dk), weight
 * (input_dim, output_dim), output (d0, ..., dk, output_dim). Backward
 * scatter-adds the output gradient's rows into the weight gradient; data
 * gets no gradient (zeros).
 */
#include "ops/op.h"
#include "ops/embedding.h"

#include <stddef.h>
#include <string.h>

static const char *const emb_dtype_choices[] = {"float32", "float64", "float16", "uint8", "int32",
                                               "int8",    "int64",   "bfloat16", NULL};

static const mx_param_desc emb_param_table[] = {
    {"input_dim", MX_PARAM_INT, NULL, 1, 1e15, NULL, offsetof(emb_params, input_dim),
     "vocabulary size: indices are 0 .. input_dim-1"},
    {"output_dim", MX_PARAM_INT, NULL, 1, 1e15, NULL, offsetof(emb_params, output_dim),
     "dimension of the embedding vectors"},
    {"dtype", MX_PARAM_ENUM, "float32", 1, 0, emb_dtype_choices, offsetof(emb_params, dtype),
     "data type of weight and output (float32 only)"},
    {"sparse_grad", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(emb_params, sparse_grad),
     "row-sparse weight gradient in MXNet; accepted, the gradient here is always dense"},
};

static mx_status emb_check(const void *p)
{
    const emb_params *ep = p;
    if (ep->dtype != 0)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Embedding: parameter 'dtype' value '%s' is not supported (float32 only)",
                        emb_dtype_choices[ep->dtype]);
    return MX_OK;
}

static int emb_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "weight";
    return 2;
}

static int emb_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status emb_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in, (void)n_out;
    const emb_params *ep = p;
    char a[128], b[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Embedding: the shape of data is unknown");
    if (in[0].ndim >= MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "Embedding: data of shape %s has too many dimensions (at most %d)",
                        mx_shape_str(&in[0], a, sizeof(a)), MX_MAX_NDIM - 1);
    mx_shape w = MX_SHAPE(ep->input_dim, ep->output_dim);
    if (in[1].ndim == 0) in[1] = w;
    else if (!mx_shape_equal(&in[1], &w))
        return MX_ERROR(MX_ERR_INVALID, "Embedding: weight has shape %s, expected %s", mx_shape_str(&in[1], a, sizeof(a)),
                        mx_shape_str(&w, b, sizeof(b)));
    out[0] = in[0];
    out[0].dims[out[0].ndim++] = ep->output_dim;
    return MX_OK;
}

/* The row an index value selects: truncated toward zero, clipped. */
static int64_t emb_row(float v, int64_t rows)
{
    if (!(v > 0.0f)) return 0; /* negative, zero or NaN */
    if ((double)v >= (double)rows) return rows - 1;
    return (int64_t)v;
}

static mx_status emb_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const emb_params *ep = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape), d = ep->output_dim;
    const float *idx = in[0].data, *w = in[1].data;
    float *y = out[0].data;
    for (int64_t i = 0; i < n; i++) {
        const float *row = w + emb_row(idx[i], ep->input_dim) * d;
        float *dst = y + i * d;
        if (req[0] == MX_REQ_ADD)
            for (int64_t j = 0; j < d; j++) dst[j] += row[j];
        else
            memcpy(dst, row, (size_t)d * sizeof(float));
    }
    return MX_OK;
}

static mx_status emb_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)out, (void)aux;
    const emb_params *ep = p;
    int64_t n = mx_shape_size(&in[0].shape), d = ep->output_dim;
    if (req[0] != MX_REQ_NULL && req[0] != MX_REQ_ADD) /* indices get no gradient */
        memset(in_grad[0].data, 0, (size_t)n * sizeof(float));
    if (req[1] == MX_REQ_NULL) return MX_OK;
    float *dw = in_grad[1].data;
    if (req[1] != MX_REQ_ADD) memset(dw, 0, (size_t)(ep->input_dim * d) * sizeof(float));
    const float *idx = in[0].data, *dy = out_grad[0].data;
    for (int64_t i = 0; i < n; i++) {
        float *row = dw + emb_row(idx[i], ep->input_dim) * d;
        const float *src = dy + i * d;
        for (int64_t j = 0; j < d; j++) row[j] += src[j];
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(embedding);

static mx_status emb_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return mx_op_infer_type_index("Embedding", 0, in, n_in, out, n_out);
}

const mx_op_def mx_op_embedding = {
    .name = "Embedding",
    .doc = "Maps integer indices to rows of a learned weight matrix.",
    .params = emb_param_table,
    .n_params = (int)(sizeof(emb_param_table) / sizeof(emb_param_table[0])),
    .params_size = sizeof(emb_params),
    .check = emb_check,
    .list_inputs = emb_list_inputs,
    .list_outputs = emb_list_outputs,
    .infer_shape = emb_infer_shape,
    .infer_type = emb_infer_type,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward = emb_forward,
    .backward = emb_backward,
    .gpu = MX_OP_GPU(embedding),
};
