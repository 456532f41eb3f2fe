/*
 * stack.c - stack (MXNet's tensor/matrix_op.cc): joins num_args arrays of
 * one shape along a new axis (in [-ndim-1, ndim], negative from the end of
 * the output). Inputs are arg0, arg1, ...; backward hands each its slice of
 * the output gradient.
 */
#include "ops/op.h"
#include "ops/stack.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const mx_param_desc stack_param_table[] = {
    {"axis", MX_PARAM_INT, "0", 1, 0, NULL, offsetof(stack_params, axis), "where the new axis goes"},
    {"num_args", MX_PARAM_INT, NULL, 1, MX_OP_MAX_IO, NULL, offsetof(stack_params, num_args),
     "how many arrays are stacked"},
};

static const char *const stack_arg_names[MX_OP_MAX_IO] = {
    "arg0",  "arg1",  "arg2",  "arg3",  "arg4",  "arg5",  "arg6",  "arg7",  "arg8",  "arg9",  "arg10",
    "arg11", "arg12", "arg13", "arg14", "arg15", "arg16", "arg17", "arg18", "arg19", "arg20", "arg21",
    "arg22", "arg23", "arg24", "arg25", "arg26", "arg27", "arg28", "arg29", "arg30", "arg31", "arg32",
    "arg33", "arg34", "arg35", "arg36", "arg37", "arg38", "arg39", "arg40", "arg41", "arg42", "arg43",
    "arg44", "arg45", "arg46", "arg47", "arg48", "arg49", "arg50", "arg51", "arg52", "arg53", "arg54",
    "arg55", "arg56", "arg57", "arg58", "arg59", "arg60", "arg61", "arg62", "arg63"};

static int stack_list_inputs(const void *p, const char **names)
{
    const stack_params *sp = p;
    for (int i = 0; i < sp->num_args; i++) names[i] = stack_arg_names[i];
    return (int)sp->num_args;
}

static int stack_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status stack_axis(const stack_params *sp, const mx_shape *d, int *axis)
{
    char a[128];
    int nd = d->ndim;
    int64_t ax = sp->axis < 0 ? sp->axis + nd + 1 : sp->axis;
    if (ax < 0 || ax > nd)
        return MX_ERROR(MX_ERR_INVALID, "stack: parameter 'axis' has value %lld, out of range [%d, %d] for inputs %s",
                        (long long)sp->axis, -nd - 1, nd, mx_shape_str(d, a, sizeof(a)));
    *axis = (int)ax;
    return MX_OK;
}

static mx_status stack_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_out;
    char a[128], b[128];
    const mx_shape *known = NULL;
    for (int i = 0; i < n_in && !known; i++)
        if (in[i].ndim) known = &in[i];
    if (!known) return MX_ERROR(MX_ERR_INVALID, "stack: the shapes of the inputs are unknown");
    mx_shape s = *known;
    for (int i = 0; i < n_in; i++) {
        if (in[i].ndim == 0) in[i] = s;
        else if (!mx_shape_equal(&in[i], &s))
            return MX_ERROR(MX_ERR_INVALID, "stack: input arg%d has shape %s, arg0.. have %s", i,
                            mx_shape_str(&in[i], a, sizeof(a)), mx_shape_str(&s, b, sizeof(b)));
    }
    if (s.ndim == MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "stack: inputs %s already have the most dimensions supported (%d)",
                        mx_shape_str(&s, a, sizeof(a)), MX_MAX_NDIM);
    int axis;
    MX_TRY(stack_axis(p, &s, &axis));
    mx_shape o = {.ndim = s.ndim + 1};
    for (int k = 0, j = 0; k < o.ndim; k++) o.dims[k] = k == axis ? n_in : s.dims[j++];
    out[0] = o;
    return MX_OK;
}

/* out viewed as (outer, n, inner): input i fills out[:, i, :]. */
static void stack_geom(const mx_shape *s, int axis, int64_t *outer, int64_t *inner)
{
    *outer = 1, *inner = 1;
    for (int k = 0; k < axis; k++) *outer *= s->dims[k];
    for (int k = axis; k < s->ndim; k++) *inner *= s->dims[k];
}

static mx_status stack_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    const stack_params *sp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int n = (int)sp->num_args, axis;
    for (int i = 0; i < n; i++)
        if (in[i].dtype != MX_FLOAT32)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "stack: %s data is not supported (float32 only)",
                            mx_dtype_name(in[i].dtype));
    MX_TRY(stack_axis(sp, &in[0].shape, &axis));
    int64_t outer, inner;
    stack_geom(&in[0].shape, axis, &outer, &inner);
    float *y = out[0].data;
    for (int i = 0; i < n; i++) {
        const float *x = in[i].data;
        for (int64_t o = 0; o < outer; o++) {
            float *dst = y + (o * n + i) * inner;
            if (req[0] == MX_REQ_ADD)
                for (int64_t k = 0; k < inner; k++) dst[k] += x[o * inner + k];
            else
                memcpy(dst, x + o * inner, (size_t)inner * sizeof(float));
        }
    }
    return MX_OK;
}

static mx_status stack_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)in, (void)out, (void)aux;
    const stack_params *sp = p;
    int n = (int)sp->num_args, axis;
    MX_TRY(stack_axis(sp, &in_grad[0].shape, &axis));
    int64_t outer, inner;
    stack_geom(&in_grad[0].shape, axis, &outer, &inner);
    const float *dy = out_grad[0].data;
    for (int i = 0; i < n; i++) {
        if (req[i] == MX_REQ_NULL) continue;
        float *dx = in_grad[i].data;
        for (int64_t o = 0; o < outer; o++) {
            const float *src = dy + (o * n + i) * inner;
            if (req[i] == MX_REQ_ADD)
                for (int64_t k = 0; k < inner; k++) dx[o * inner + k] += src[k];
            else
                memcpy(dx + o * inner, src, (size_t)inner * sizeof(float));
        }
    }
    return MX_OK;
}

MX_OP_GPU_DECLARE(stack);

const mx_op_def mx_op_stack = {
    .name = "stack",
    .doc = "Joins num_args arrays of one shape along a new axis.",
    .params = stack_param_table,
    .n_params = (int)(sizeof(stack_param_table) / sizeof(stack_param_table[0])),
    .params_size = sizeof(stack_params),
    .list_inputs = stack_list_inputs,
    .list_outputs = stack_list_outputs,
    .infer_shape = stack_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = stack_forward,
    .backward = stack_backward,
    .gpu = MX_OP_GPU(stack),
};
