/*
 * regression_output.c - the regression loss layers (MXNet's
 * regression_output-inl.h), one shared kernel behind three definitions:
 *   LinearRegressionOutput    out = data          grad = out - label
 *   LogisticRegressionOutput  out = sigmoid(data) grad = out - label
 *   MAERegressionOutput       out = data          grad = sign(out - label)
 * Backward ignores out_grad and scales by grad_scale / num_output, where
 * num_output = label.size / label.shape[0] (the outputs per instance).
 * label has data's shape, or (N) when data is (N, 1); any label with N
 * rows and data's size is accepted, as in MXNet.
 */
#include "ops/op.h"
#include "ops/regression_output.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

typedef enum reg_kind { REG_LINEAR, REG_LOGISTIC, REG_MAE } reg_kind;

static const mx_param_desc reg_param_table[] = {
    {"grad_scale", MX_PARAM_FLOAT, "1", 1, 0, NULL, offsetof(reg_params, grad_scale),
     "scales the gradient by a float factor"},
};

static int reg_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "label";
    return 2;
}

static int reg_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status reg_infer(const char *op, mx_shape *in, mx_shape *out)
{
    char a[128], b[128];
    const mx_shape *d = &in[0];
    mx_shape *l = &in[1];
    if (d->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", op);
    if (l->ndim == 0) {
        /* A 1-D label for (N, 1) data, MXNet's convention for one output. */
        *l = (d->ndim == 2 && d->dims[1] == 1) ? MX_SHAPE(d->dims[0]) : *d;
    } else if (l->dims[0] != d->dims[0] || mx_shape_size(l) != mx_shape_size(d)) {
        return MX_ERROR(MX_ERR_INVALID, "%s: label has shape %s, expected %s (same rows and size as data)", op,
                        mx_shape_str(l, a, sizeof(a)), mx_shape_str(d, b, sizeof(b)));
    }
    out[0] = *d;
    return MX_OK;
}

static mx_status linear_infer(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    return reg_infer("LinearRegressionOutput", in, out);
}
static mx_status logistic_infer(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    return reg_infer("LogisticRegressionOutput", in, out);
}
static mx_status mae_infer(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    return reg_infer("MAERegressionOutput", in, out);
}

static mx_status reg_forward(reg_kind kind, const mx_tensor *in, const mx_req *req, mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[0].shape);
    const float *x = in[0].data;
    float *y = out[0].data;
    bool add = req[0] == MX_REQ_ADD;
    if (kind == REG_LOGISTIC) {
        if (add)
            for (int64_t i = 0; i < n; i++) y[i] += 1.0f / (1.0f + expf(-x[i]));
        else
            for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
    } else if (add) {
        for (int64_t i = 0; i < n; i++) y[i] += x[i];
    } else if (y != x) {
        memcpy(y, x, (size_t)n * sizeof(float));
    }
    return MX_OK;
}

static mx_status reg_backward(reg_kind kind, const mx_op_ctx *ctx, const void *p, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad)
{
    const reg_params *rp = p;
    int64_t n = mx_shape_size(&in[0].shape);
    if (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD) /* labels get no gradient */
        memset(in_grad[1].data, 0, (size_t)mx_shape_size(&in[1].shape) * sizeof(float));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_shape *ls = &in[1].shape;
    int64_t rows = ls->ndim > 0 ? ls->dims[0] : 1;
    int64_t num_output = rows > 0 ? mx_shape_size(ls) / rows : 1;
    float sc = (float)(rp->grad_scale * mx_op_loss_scale(ctx) / (double)(num_output > 0 ? num_output : 1));
    const float *y = out[0].data, *t = in[1].data;
    float *g = in_grad[0].data;
    bool add = req[0] == MX_REQ_ADD;
    if (kind == REG_MAE) {
        for (int64_t i = 0; i < n; i++) {
            float d = y[i] - t[i];
            float v = sc * (float)((d > 0.0f) - (d < 0.0f));
            g[i] = add ? g[i] + v : v;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float v = sc * (y[i] - t[i]);
            g[i] = add ? g[i] + v : v;
        }
    }
    return MX_OK;
}

static mx_status linear_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    return reg_forward(REG_LINEAR, in, req, out);
}
static mx_status logistic_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    return reg_forward(REG_LOGISTIC, in, req, out);
}
static mx_status mae_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    return reg_forward(REG_MAE, in, req, out);
}

static mx_status linear_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out_grad, (void)aux;
    return reg_backward(REG_LINEAR, ctx, p, in, out, req, in_grad);
}
static mx_status logistic_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                   mx_tensor *aux)
{
    (void)out_grad, (void)aux;
    return reg_backward(REG_LOGISTIC, ctx, p, in, out, req, in_grad);
}
static mx_status mae_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)out_grad, (void)aux;
    return reg_backward(REG_MAE, ctx, p, in, out, req, in_grad);
}

MX_OP_GPU_DECLARE(linear_regression_output);
MX_OP_GPU_DECLARE(logistic_regression_output);
MX_OP_GPU_DECLARE(mae_regression_output);

static const mx_inplace reg_forward_inplace[] = {{0, 0}, {-1, -1}};

#define REG_DEF(var, gpu_name, opname, prefix, docstr)                                                      \
    const mx_op_def var = {                                                                                 \
        .name = opname,                                                                                     \
        .doc = docstr,                                                                                      \
        .params = reg_param_table,                                                                          \
        .n_params = (int)(sizeof(reg_param_table) / sizeof(reg_param_table[0])),                            \
        .params_size = sizeof(reg_params),                                                                  \
        .flags = MX_OP_LOSS,                                                                                \
        .list_inputs = reg_list_inputs,                                                                     \
        .list_outputs = reg_list_outputs,                                                                   \
        .infer_shape = prefix##_infer,                                                                      \
        .backward_deps = MX_BWD_IN_DATA | MX_BWD_OUT_DATA,                                                  \
        .forward_inplace = reg_forward_inplace,                                                             \
        .forward = prefix##_forward,                                                                        \
        .backward = prefix##_backward,                                                                      \
        .gpu = MX_OP_GPU(gpu_name),                                                                         \
    }

REG_DEF(mx_op_linear_regression_output, linear_regression_output, "LinearRegressionOutput", linear,
        "Identity forward; backward returns (out - label) * grad_scale / num_output (squared loss).");
REG_DEF(mx_op_logistic_regression_output, logistic_regression_output, "LogisticRegressionOutput", logistic,
        "Sigmoid forward; backward returns (out - label) * grad_scale / num_output (logistic loss).");
REG_DEF(mx_op_mae_regression_output, mae_regression_output, "MAERegressionOutput", mae,
        "Identity forward; backward returns sign(out - label) * grad_scale / num_output (L1 loss).");
