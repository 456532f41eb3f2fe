/*
 * upsampling.c - UpSampling (MXNet's nn/upsampling.cc) on (N, C, H, W).
 *
 * nearest: inputs arg0 .. arg{num_args-1}; the output is (H, W) of arg0
 *   times scale, and every input is repeated by the integer factor that
 *   brings it there (an error when it does not divide). multi_input_mode
 *   concat joins the results along C, sum adds them (same C). Backward sums
 *   the output gradient over each repeated block.
 * bilinear: inputs data and weight (num_filter, 1, k, k), k = 2*scale -
 *   scale%2; as in MXNet this is a Deconvolution with that kernel, stride
 *   scale, pad ceil((scale-1)/2), num_group = num_filter (= C), no bias,
 *   and the given workspace: the weight is learned (initialise it with the
 *   bilinear initializer). The Deconvolution operator does the work.
 */
#include "ops/op.h"
#include "ops/upsampling.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const up_type_choices[] = {"bilinear", "nearest", NULL};
static const char *const up_mode_choices[] = {"concat", "sum", NULL};

static const mx_param_desc up_param_table[] = {
    {"scale", MX_PARAM_INT, NULL, 1, 1e6, NULL, offsetof(up_params, scale), "the up-sampling factor"},
    {"num_filter", MX_PARAM_INT, "0", 0, 1e9, NULL, offsetof(up_params, num_filter),
     "bilinear: the number of channels"},
    {"sample_type", MX_PARAM_ENUM, NULL, 1, 0, up_type_choices, offsetof(up_params, sample_type),
     "nearest or bilinear"},
    {"multi_input_mode", MX_PARAM_ENUM, "concat", 1, 0, up_mode_choices, offsetof(up_params, multi_input_mode),
     "nearest with several inputs: concat along C or sum"},
    {"num_args", MX_PARAM_INT, "1", 1, MX_OP_MAX_IO, NULL, offsetof(up_params, num_args),
     "nearest: how many inputs (bilinear: data and weight)"},
    {"workspace", MX_PARAM_INT, "512", 0, 8192, NULL, offsetof(up_params, workspace),
     "bilinear: the Deconvolution's temporary memory limit in MB"},
};

static mx_status up_check(const void *p)
{
    const up_params *up = p;
    if (up->sample_type == UP_BILINEAR && up->num_filter < 1)
        return MX_ERROR(MX_ERR_INVALID, "UpSampling: bilinear needs num_filter (the number of channels), got %lld",
                        (long long)up->num_filter);
    return MX_OK;
}

static const char *const up_arg_names[MX_OP_MAX_IO] = {
    "arg0",  "arg1",  "arg2",  "arg3",  "arg4",  "arg5",  "arg6",  "arg7",  "arg8",  "arg9",  "arg10",
    "arg11", "arg12", "arg13", "arg14", "arg15", "arg16", "arg17", "arg18", "arg19", "arg20", "arg21",
    "arg22", "arg23", "arg24", "arg25", "arg26", "arg27", "arg28", "arg29", "arg30", "arg31", "arg32",
    "arg33", "arg34", "arg35", "arg36", "arg37", "arg38", "arg39", "arg40", "arg41", "arg42", "arg43",
    "arg44", "arg45", "arg46", "arg47", "arg48", "arg49", "arg50", "arg51", "arg52", "arg53", "arg54",
    "arg55", "arg56", "arg57", "arg58", "arg59", "arg60", "arg61", "arg62", "arg63"};

static int up_list_inputs(const void *p, const char **names)
{
    const up_params *up = p;
    if (up->sample_type == UP_BILINEAR) {
        names[0] = "data";
        names[1] = "weight";
        return 2;
    }
    for (int i = 0; i < up->num_args; i++) names[i] = up_arg_names[i];
    return (int)up->num_args;
}

static int up_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

/* ------------------------------------------------------------ bilinear */

/* The Deconvolution params for this UpSampling (caller frees *out). */
static mx_status up_deconv(const up_params *up, const mx_op_def **op, void **out)
{
    *out = NULL;
    *op = mx_op_find("Deconvolution");
    if (!*op) return MX_ERROR(MX_ERR_RUNTIME, "UpSampling: bilinear needs the Deconvolution operator");
    int64_t s = up->scale, k = 2 * s - s % 2, pad = (int64_t)ceil((double)(s - 1) / 2.0);
    char kern[64], stride[64], padt[64], nf[32], ws[32];
    snprintf(kern, sizeof(kern), "(%lld,%lld)", (long long)k, (long long)k);
    snprintf(stride, sizeof(stride), "(%lld,%lld)", (long long)s, (long long)s);
    snprintf(padt, sizeof(padt), "(%lld,%lld)", (long long)pad, (long long)pad);
    snprintf(nf, sizeof(nf), "%lld", (long long)up->num_filter);
    snprintf(ws, sizeof(ws), "%lld", (long long)up->workspace);
    const char *keys[] = {"kernel", "stride", "pad", "num_filter", "num_group", "no_bias", "workspace"};
    const char *values[] = {kern, stride, padt, nf, nf, "True", ws};
    void *params = calloc(1, (*op)->params_size + 1);
    if (!params) return MX_ERROR(MX_ERR_NOMEM, "UpSampling: out of memory");
    mx_status st = mx_op_parse_params(*op, keys, values, 7, params);
    if (st != MX_OK) {
        free(params);
        return st;
    }
    *out = params;
    return MX_OK;
}

mx_status mx_upsampling_deconv(const up_params *up, const mx_op_def **op, void **out)
{
    return up_deconv(up, op, out);
}

/* ------------------------------------------------------------ shapes */

static mx_status up_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    const up_params *up = p;
    char a[128], b[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "UpSampling: the shape of the first input is unknown");
    if (in[0].ndim != 4)
        return MX_ERROR(MX_ERR_INVALID, "UpSampling: input %s must be (N, C, H, W)", mx_shape_str(&in[0], a, sizeof(a)));
    if (up->sample_type == UP_BILINEAR) {
        if (in[0].dims[1] != up->num_filter)
            return MX_ERROR(MX_ERR_INVALID, "UpSampling: bilinear data %s must have num_filter=%lld channels",
                            mx_shape_str(&in[0], a, sizeof(a)), (long long)up->num_filter);
        const mx_op_def *op;
        void *dp;
        MX_TRY(up_deconv(up, &op, &dp));
        mx_status s = op->infer_shape(dp, in, n_in, out, n_out);
        free(dp);
        return s;
    }
    int64_t oh = in[0].dims[2] * up->scale, ow = in[0].dims[3] * up->scale, c = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i].ndim == 0)
            return MX_ERROR(MX_ERR_INVALID, "UpSampling: the shape of input arg%d is unknown", i);
        if (in[i].ndim != 4 || in[i].dims[0] != in[0].dims[0] || in[i].dims[2] == 0 || in[i].dims[3] == 0 ||
            oh % in[i].dims[2] || ow % in[i].dims[3])
            return MX_ERROR(MX_ERR_INVALID, "UpSampling: input arg%d %s cannot be repeated to (%lld, %lld) like arg0 %s",
                            i, mx_shape_str(&in[i], a, sizeof(a)), (long long)oh, (long long)ow,
                            mx_shape_str(&in[0], b, sizeof(b)));
        if (up->multi_input_mode == UP_SUM && in[i].dims[1] != in[0].dims[1])
            return MX_ERROR(MX_ERR_INVALID, "UpSampling: multi_input_mode sum needs equal channels; arg%d is %s, arg0 %s",
                            i, mx_shape_str(&in[i], a, sizeof(a)), mx_shape_str(&in[0], b, sizeof(b)));
        c += in[i].dims[1];
    }
    out[0] = (mx_shape){.ndim = 4, .dims = {in[0].dims[0], up->multi_input_mode == UP_SUM ? in[0].dims[1] : c, oh, ow}};
    return MX_OK;
}

static size_t up_workspace(const void *p, const mx_shape *in, const mx_shape *out, bool backward)
{
    const up_params *up = p;
    if (up->sample_type != UP_BILINEAR) return 0;
    const mx_op_def *op;
    void *dp;
    if (up_deconv(up, &op, &dp) != MX_OK) return 0;
    size_t n = op->workspace ? op->workspace(dp, in, out, backward) : 0;
    free(dp);
    return n;
}

/* ------------------------------------------------------------ kernels */

static mx_status up_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    const up_params *up = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    if (up->sample_type == UP_BILINEAR) {
        const mx_op_def *op;
        void *dp;
        MX_TRY(up_deconv(up, &op, &dp));
        mx_status s = op->forward(ctx, dp, in, req, out, aux);
        free(dp);
        return s;
    }
    const mx_shape *o = &out[0].shape;
    int64_t N = o->dims[0], OC = o->dims[1], OH = o->dims[2], OW = o->dims[3], c0 = 0;
    float *y = out[0].data;
    for (int i = 0; i < up->num_args; i++) {
        if (in[i].dtype != MX_FLOAT32)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "UpSampling: %s data is not supported (float32 only)",
                            mx_dtype_name(in[i].dtype));
        const mx_shape *s = &in[i].shape;
        int64_t C = s->dims[1], H = s->dims[2], W = s->dims[3], fh = OH / H, fw = OW / W;
        /* sum mode: the first input writes (per req), the others add */
        mx_req r = up->multi_input_mode == UP_SUM && i > 0 ? MX_REQ_ADD : req[0];
        const float *x = in[i].data;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++) {
                const float *xp = x + (n * C + c) * H * W;
                float *yp = y + (n * OC + c0 + c) * OH * OW;
                for (int64_t h = 0; h < OH; h++)
                    for (int64_t w = 0; w < OW; w++) mx_req_assign_f32(r, &yp[h * OW + w], xp[(h / fh) * W + w / fw]);
            }
        if (up->multi_input_mode == UP_CONCAT) c0 += C;
    }
    return MX_OK;
}

static mx_status up_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    const up_params *up = p;
    if (up->sample_type == UP_BILINEAR) {
        const mx_op_def *op;
        void *dp;
        MX_TRY(up_deconv(up, &op, &dp));
        mx_status s = op->backward(ctx, dp, out_grad, in, out, req, in_grad, aux);
        free(dp);
        return s;
    }
    const mx_shape *o = &out_grad[0].shape;
    int64_t OC = o->dims[1], OH = o->dims[2], OW = o->dims[3], c0 = 0;
    const float *dy = out_grad[0].data;
    for (int i = 0; i < up->num_args; i++) {
        const mx_shape *s = &in_grad[i].shape;
        int64_t N = s->dims[0], C = s->dims[1], H = s->dims[2], W = s->dims[3], fh = OH / H, fw = OW / W;
        if (req[i] != MX_REQ_NULL) {
            float *dx = in_grad[i].data;
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) {
                    const float *gp = dy + (n * OC + c0 + c) * OH * OW;
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t w = 0; w < W; w++) {
                            double acc = 0;
                            for (int64_t a = 0; a < fh; a++)
                                for (int64_t b = 0; b < fw; b++) acc += gp[(h * fh + a) * OW + w * fw + b];
                            mx_req_assign_f32(req[i], &dx[((n * C + c) * H + h) * W + w], (float)acc);
                        }
                }
        }
        if (up->multi_input_mode == UP_CONCAT) c0 += C;
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(upsampling);

const mx_op_def mx_op_upsampling = {
    .name = "UpSampling",
    .doc = "Up-samples (N, C, H, W) inputs by an integer scale (nearest, or bilinear as a Deconvolution).",
    .params = up_param_table,
    .n_params = (int)(sizeof(up_param_table) / sizeof(up_param_table[0])),
    .params_size = sizeof(up_params),
    .check = up_check,
    .list_inputs = up_list_inputs,
    .list_outputs = up_list_outputs,
    .infer_shape = up_infer_shape,
    .workspace = up_workspace,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .forward = up_forward,
    .backward = up_backward,
    .gpu = MX_OP_GPU(upsampling),
};
