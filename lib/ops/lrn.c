/*
 * lrn.c - LRN: local response normalization across channels (AlexNet,
 * Caffe, MXNet) on (N,C,H,W) data:
 *   tmp_norm[c] = knorm + alpha/nsize * sum_{|c'-c| <= nsize/2} x[c']^2
 *   y[c]        = x[c] * tmp_norm[c]^-beta
 * the channel window clipped at the ends. Outputs: output and tmp_norm
 * (internal, read by backward):
 *   dx[c] = dy[c] * tmp_norm[c]^-beta
 *           - 2*beta*alpha/nsize * x[c] * sum_{window of c} dy*x*tmp_norm^(-beta-1)
 * An even nsize is accepted as MXNet accepts it: the window is still
 * c-nsize/2 .. c+nsize/2 (nsize+1 channels) and the scale alpha/nsize.
 */
#include "ops/lrn.h"
#include "ops/op.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static const mx_param_desc lrn_param_table[] = {
    {"alpha", MX_PARAM_FLOAT, "0.0001", 1, 0, NULL, offsetof(lrn_params, alpha), "variance scaling"},
    {"beta", MX_PARAM_FLOAT, "0.75", 1, 0, NULL, offsetof(lrn_params, beta), "power"},
    {"knorm", MX_PARAM_FLOAT, "2", 1, 0, NULL, offsetof(lrn_params, knorm), "the constant k"},
    {"nsize", MX_PARAM_INT, NULL, 1, 1e6, NULL, offsetof(lrn_params, nsize),
     "channels in the normalization window (odd in practice)"},
};

static int lrn_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int lrn_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "tmp_norm";
    return 2;
}

static int lrn_num_visible_outputs(const void *p)
{
    (void)p;
    return 1;
}

static mx_status lrn_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p;
    (void)n_in;
    (void)n_out;
    char a[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "LRN: the shape of data is unknown");
    if (in[0].ndim != 4)
        return MX_ERROR(MX_ERR_INVALID, "LRN: data has shape %s; it must be 4-D (batch, channel, y, x)",
                        mx_shape_str(&in[0], a, sizeof(a)));
    out[0] = in[0];
    out[1] = in[0];
    return MX_OK;
}

static size_t lrn_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    (void)p;
    (void)out;
    int64_t plane = in[0].dims[2] * in[0].dims[3], c = in[0].dims[1];
    /* forward: one plane of sums; backward: the weighted gradient of every
     * channel of one sample, plus one plane of window sums. */
    return (size_t)((backward ? c + 1 : 1) * plane) * sizeof(float);
}

/* t^-beta; beta = 0.75 (the universal default) through two square roots,
 * several times faster than powf. */
static inline float pow_neg(float t, float beta)
{
    if (beta == 0.75f) {
        float r = sqrtf(t);
        return 1.0f / (r * sqrtf(r));
    }
    return powf(t, -beta);
}

static mx_status lrn_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const lrn_params *lp = p;
    const mx_shape *s = &in[0].shape;
    const int64_t N = s->dims[0], C = s->dims[1], plane = s->dims[2] * s->dims[3], half = lp->nsize / 2;
    if (ctx->workspace_bytes < (size_t)plane * sizeof(float))
        return MX_ERROR(MX_ERR_RUNTIME, "LRN: workspace of %zu bytes is too small", ctx->workspace_bytes);
    float *acc = ctx->workspace;
    const float salpha = (float)(lp->alpha / (double)lp->nsize), knorm = (float)lp->knorm, beta = (float)lp->beta;
    for (int64_t n = 0; n < N; n++) {
        const float *x = (const float *)in[0].data + n * C * plane;
        float *y = (float *)out[0].data + n * C * plane, *tn = (float *)out[1].data + n * C * plane;
        for (int64_t c = 0; c < C; c++) {
            int64_t c0 = c - half < 0 ? 0 : c - half, c1 = c + half + 1 > C ? C : c + half + 1;
            memset(acc, 0, (size_t)plane * sizeof(float));
            for (int64_t cc = c0; cc < c1; cc++) {
                const float *xc = x + cc * plane;
                for (int64_t i = 0; i < plane; i++) acc[i] += xc[i] * xc[i];
            }
            const float *xc = x + c * plane;
            float *yc = y + c * plane, *tc = tn + c * plane;
            for (int64_t i = 0; i < plane; i++) acc[i] = knorm + salpha * acc[i];
            if (req[1] == MX_REQ_ADD)
                for (int64_t i = 0; i < plane; i++) tc[i] += acc[i];
            else if (req[1] != MX_REQ_NULL)
                memcpy(tc, acc, (size_t)plane * sizeof(float));
            if (req[0] == MX_REQ_ADD)
                for (int64_t i = 0; i < plane; i++) yc[i] += xc[i] * pow_neg(acc[i], beta);
            else if (req[0] != MX_REQ_NULL)
                for (int64_t i = 0; i < plane; i++) yc[i] = xc[i] * pow_neg(acc[i], beta);
        }
    }
    return MX_OK;
}

static mx_status lrn_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)aux;
    const lrn_params *lp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_shape *s = &in[0].shape;
    const int64_t N = s->dims[0], C = s->dims[1], plane = s->dims[2] * s->dims[3], half = lp->nsize / 2;
    if (ctx->workspace_bytes < (size_t)((C + 1) * plane) * sizeof(float))
        return MX_ERROR(MX_ERR_RUNTIME, "LRN: workspace of %zu bytes is too small", ctx->workspace_bytes);
    float *t = ctx->workspace, *acc = t + C * plane;
    const float beta = (float)lp->beta;
    const float coef = (float)(-2.0 * lp->beta * lp->alpha / (double)lp->nsize);
    for (int64_t n = 0; n < N; n++) {
        const int64_t off = n * C * plane;
        const float *x = (const float *)in[0].data + off, *tn = (const float *)out[1].data + off;
        const float *dy = (const float *)out_grad[0].data + off;
        float *dx = (float *)in_grad[0].data + off;
        /* t = dy * x * tmp_norm^(-beta-1) for every channel of the sample. */
        for (int64_t i = 0; i < C * plane; i++) t[i] = dy[i] * x[i] * pow_neg(tn[i], beta) / tn[i];
        for (int64_t c = 0; c < C; c++) {
            int64_t c0 = c - half < 0 ? 0 : c - half, c1 = c + half + 1 > C ? C : c + half + 1;
            memset(acc, 0, (size_t)plane * sizeof(float));
            for (int64_t cc = c0; cc < c1; cc++) {
                const float *tc = t + cc * plane;
                for (int64_t i = 0; i < plane; i++) acc[i] += tc[i];
            }
            const float *xc = x + c * plane, *tnc = tn + c * plane, *dyc = dy + c * plane;
            float *dxc = dx + c * plane;
            if (req[0] == MX_REQ_ADD)
                for (int64_t i = 0; i < plane; i++) dxc[i] += dyc[i] * pow_neg(tnc[i], beta) + coef * xc[i] * acc[i];
            else
                for (int64_t i = 0; i < plane; i++) dxc[i] = dyc[i] * pow_neg(tnc[i], beta) + coef * xc[i] * acc[i];
        }
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(lrn);

const mx_op_def mx_op_lrn = {
    .name = "LRN",
    .doc = "Local response normalization across channels.",
    .params = lrn_param_table,
    .n_params = (int)(sizeof(lrn_param_table) / sizeof(lrn_param_table[0])),
    .params_size = sizeof(lrn_params),
    .list_inputs = lrn_list_inputs,
    .list_outputs = lrn_list_outputs,
    .num_visible_outputs = lrn_num_visible_outputs,
    .infer_shape = lrn_infer_shape,
    .workspace = lrn_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .backward_out_mask = 1u << 1, /* tmp_norm, not the output */
    .forward = lrn_forward,
    .backward = lrn_backward,
    .gpu = MX_OP_GPU(lrn),
};
