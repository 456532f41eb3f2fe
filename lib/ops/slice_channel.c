/*
 * slice_channel.c - SliceChannel (alias split): cuts data into num_outputs
 * equal parts along `axis`, outputs output0, output1, ...; squeeze_axis
 * drops the axis, which must then have length num_outputs. Backward joins
 * the output gradients back.
 */
#include "ops/op.h"
#include "ops/slice_channel.h"

#include <stddef.h>
#include <string.h>

static const mx_param_desc slice_param_table[] = {
    {"num_outputs", MX_PARAM_INT, NULL, 1, MX_OP_MAX_IO, NULL, offsetof(slice_params, num_outputs),
     "number of equal parts to split into"},
    {"axis", MX_PARAM_INT, "1", 1, 0, NULL, offsetof(slice_params, axis), "the axis to split along"},
    {"squeeze_axis", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(slice_params, squeeze_axis),
     "remove the split axis from the outputs (its length must equal num_outputs)"},
};

static const char *const slice_out_names[MX_OP_MAX_IO] = {
    "output0", "output1", "output2", "output3", "output4", "output5", "output6", "output7",
    "output8", "output9", "output10", "output11", "output12", "output13", "output14", "output15",
    "output16", "output17", "output18", "output19", "output20", "output21", "output22", "output23",
    "output24", "output25", "output26", "output27", "output28", "output29", "output30", "output31",
    "output32", "output33", "output34", "output35", "output36", "output37", "output38", "output39",
    "output40", "output41", "output42", "output43", "output44", "output45", "output46", "output47",
    "output48", "output49", "output50", "output51", "output52", "output53", "output54", "output55",
    "output56", "output57", "output58", "output59", "output60", "output61", "output62", "output63",
};

static int slice_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int slice_list_outputs(const void *p, const char **names)
{
    const slice_params *sp = p;
    for (int i = 0; i < sp->num_outputs; i++) names[i] = slice_out_names[i];
    return (int)sp->num_outputs;
}

static mx_status slice_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    const slice_params *sp = p;
    char a[128];
    const mx_shape *d = &in[0];
    if (d->ndim == 0) return MX_ERROR(MX_ERR_INVALID, "SliceChannel: the shape of data is unknown");
    int64_t axis = sp->axis < 0 ? sp->axis + d->ndim : sp->axis;
    if (axis < 0 || axis >= d->ndim)
        return MX_ERROR(MX_ERR_INVALID, "SliceChannel: parameter 'axis' has value %lld, out of range for data of shape %s",
                        (long long)sp->axis, mx_shape_str(d, a, sizeof(a)));
    int64_t len = d->dims[axis];
    if (len % sp->num_outputs != 0)
        return MX_ERROR(MX_ERR_INVALID,
                        "SliceChannel: data of shape %s has %lld entries on axis %lld, not divisible by num_outputs=%lld",
                        mx_shape_str(d, a, sizeof(a)), (long long)len, (long long)axis, (long long)sp->num_outputs);
    if (sp->squeeze_axis && len != sp->num_outputs)
        return MX_ERROR(MX_ERR_INVALID,
                        "SliceChannel: squeeze_axis needs axis %lld of data %s to have length num_outputs=%lld, got %lld",
                        (long long)axis, mx_shape_str(d, a, sizeof(a)), (long long)sp->num_outputs, (long long)len);
    mx_shape o = *d;
    o.dims[axis] = len / sp->num_outputs;
    if (sp->squeeze_axis) {
        for (int k = (int)axis; k + 1 < o.ndim; k++) o.dims[k] = o.dims[k + 1];
        o.dims[--o.ndim] = 0;
        if (o.ndim == 0) o = MX_SHAPE(1); /* a 1-D input splits into (1,) parts */
    }
    for (int i = 0; i < n_out; i++) out[i] = o;
    return MX_OK;
}

/* dst = src or dst += src over n elements; dst and src do not overlap. */
static mx_status seg_copy(void *dst, const void *src, int64_t n, mx_dtype dtype, bool add)
{
    if (!add) {
        memcpy(dst, src, (size_t)n * mx_dtype_size(dtype));
    } else if (dtype == MX_FLOAT32) {
        float *d = dst;
        const float *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else if (dtype == MX_FLOAT64) {
        double *d = dst;
        const double *s = src;
        for (int64_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "SliceChannel: accumulating (req add) into %s is not supported",
                        mx_dtype_name(dtype));
    }
    return MX_OK;
}

/* Rows before the axis and the elements of one part's slab in a row. */
static int64_t slice_geometry(const slice_params *sp, const mx_shape *d, int64_t *slab)
{
    int axis = (int)(sp->axis < 0 ? sp->axis + d->ndim : sp->axis);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= d->dims[k];
    for (int k = axis + 1; k < d->ndim; k++) inner *= d->dims[k];
    *slab = d->dims[axis] / sp->num_outputs * inner;
    return outer;
}

static mx_status slice_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const slice_params *sp = p;
    int n = (int)sp->num_outputs;
    int64_t slab, outer = slice_geometry(sp, &in[0].shape, &slab);
    size_t es = mx_dtype_size(in[0].dtype);
    const char *x = in[0].data;
    for (int i = 0; i < n; i++) {
        if (req[i] == MX_REQ_NULL) continue;
        for (int64_t o = 0; o < outer; o++)
            MX_TRY(seg_copy((char *)out[i].data + (size_t)(o * slab) * es, x + (size_t)((o * n + i) * slab) * es,
                            slab, in[0].dtype, req[i] == MX_REQ_ADD));
    }
    return MX_OK;
}

static mx_status slice_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    const slice_params *sp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int n = (int)sp->num_outputs;
    int64_t slab, outer = slice_geometry(sp, &in_grad[0].shape, &slab);
    size_t es = mx_dtype_size(in_grad[0].dtype);
    char *dx = in_grad[0].data;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n; i++)
            MX_TRY(seg_copy(dx + (size_t)((o * n + i) * slab) * es, (const char *)out_grad[i].data + (size_t)(o * slab) * es,
                            slab, in_grad[0].dtype, req[0] == MX_REQ_ADD));
    return MX_OK;
}

MX_OP_GPU_DECLARE(slice_channel);

static const char *const slice_aliases[] = {"split", NULL};

const mx_op_def mx_op_slice_channel = {
    .name = "SliceChannel",
    .aliases = slice_aliases,
    .doc = "Splits data into num_outputs equal parts along an axis.",
    .params = slice_param_table,
    .n_params = (int)(sizeof(slice_param_table) / sizeof(slice_param_table[0])),
    .params_size = sizeof(slice_params),
    .list_inputs = slice_list_inputs,
    .list_outputs = slice_list_outputs,
    .infer_shape = slice_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = slice_forward,
    .backward = slice_backward,
    .gpu = MX_OP_GPU(slice_channel),
};
