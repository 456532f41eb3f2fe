/*
 * concat.c - Concat: joins num_args inputs (arg0, arg1, ...) along `dim`;
 * every other dimension must agree. Forward copies each input's slab into
 * place, backward copies the output gradient's slabs back out.
 */
#include "ops/concat.h"

#include <stddef.h>
#include <string.h>

MX_OP_GPU_DECLARE(concat);

static const mx_param_desc concat_param_table[] = {
    {"num_args", MX_PARAM_INT, NULL, 1, MX_OP_MAX_IO, NULL, offsetof(concat_params, num_args),
     "number of inputs to join"},
    {"dim", MX_PARAM_INT, "1", 1, 0, NULL, offsetof(concat_params, dim), "the dimension to join along"},
};

static const char *const concat_arg_names[MX_OP_MAX_IO] = {
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7", "arg8", "arg9",
    "arg10", "arg11", "arg12", "arg13", "arg14", "arg15", "arg16", "arg17", "arg18", "arg19",
    "arg20", "arg21", "arg22", "arg23", "arg24", "arg25", "arg26", "arg27", "arg28", "arg29",
    "arg30", "arg31", "arg32", "arg33", "arg34", "arg35", "arg36", "arg37", "arg38", "arg39",
    "arg40", "arg41", "arg42", "arg43", "arg44", "arg45", "arg46", "arg47", "arg48", "arg49",
    "arg50", "arg51", "arg52", "arg53", "arg54", "arg55", "arg56", "arg57", "arg58", "arg59",
    "arg60", "arg61", "arg62", "arg63",
};

static int concat_list_inputs(const void *p, const char **names)
{
    const concat_params *cp = p;
    for (int i = 0; i < cp->num_args; i++) names[i] = concat_arg_names[i];
    return (int)cp->num_args;
}

static int concat_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status concat_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_out;
    const concat_params *cp = p;
    char a[128], b[128];
    for (int i = 0; i < n_in; i++)
        if (in[i].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "Concat: the shape of %s is unknown", concat_arg_names[i]);
    int nd = in[0].ndim;
    int64_t axis = cp->dim < 0 ? cp->dim + nd : cp->dim;
    if (axis < 0 || axis >= nd)
        return MX_ERROR(MX_ERR_INVALID, "Concat: parameter 'dim' has value %lld, out of range for arg0 of shape %s",
                        (long long)cp->dim, mx_shape_str(&in[0], a, sizeof(a)));
    mx_shape o = in[0];
    for (int i = 1; i < n_in; i++) {
        bool ok = in[i].ndim == nd;
        for (int k = 0; ok && k < nd; k++) ok = k == axis || in[i].dims[k] == in[0].dims[k];
        if (!ok)
            return MX_ERROR(MX_ERR_INVALID,
                            "Concat: %s has shape %s, incompatible with arg0's %s (all dimensions but dim=%lld must "
                            "agree)",
                            concat_arg_names[i], mx_shape_str(&in[i], a, sizeof(a)),
                            mx_shape_str(&in[0], b, sizeof(b)), (long long)axis);
        o.dims[axis] += in[i].dims[axis];
    }
    out[0] = o;
    return MX_OK;
}

/* Rows before the axis and, per input, the elements of one slab. */
static int64_t concat_geometry(const concat_params *cp, const mx_shape *s0, int n, const mx_tensor *t, int64_t *slab)
{
    int nd = s0->ndim;
    int axis = (int)(cp->dim < 0 ? cp->dim + nd : cp->dim);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= s0->dims[k];
    for (int k = axis + 1; k < nd; k++) inner *= s0->dims[k];
    for (int i = 0; i < n; i++) slab[i] = t[i].shape.dims[axis] * inner;
    return outer;
}

/* One copy per (row before the axis, input): the slab of that input in
 * that row of the output, copied from it (forward) or to its gradient
 * (backward), written or added; units split across the kernel pool. */
typedef struct concat_job {
    int n;
    bool backward;
    mx_dtype dtype;
    size_t es;
    int64_t row, slab[MX_OP_MAX_IO], at[MX_OP_MAX_IO]; /* at: the slab's offset in a row */
    int64_t item[MX_OP_MAX_IO]; /* elements between a part's slabs: its batch_stride, else its slab */
    char *whole;                                        /* output / its gradient */
    char *part[MX_OP_MAX_IO];                           /* inputs / their gradients (NULL: skip) */
    bool add[MX_OP_MAX_IO];
} concat_job;

static void concat_units(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const concat_job *j = arg;
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / j->n;
        int i = (int)(u % j->n);
        if (!j->part[i]) continue;
        char *w = j->whole + (size_t)(o * j->row + j->at[i]) * j->es;
        char *p = j->part[i] + (size_t)(o * j->item[i]) * j->es;
        char *dst = j->backward ? p : w;
        const char *src = j->backward ? w : p;
        int64_t m = j->slab[i];
        if (!j->add[i]) {
            /* An input the executor placed inside the output (strided_output),
             * or a gradient inside the output's gradient, is there already. */
            if (dst != src) memcpy(dst, src, (size_t)m * j->es);
        } else if (j->dtype == MX_FLOAT32) {
            float *d = (float *)dst;
            const float *sv = (const float *)src;
            for (int64_t k = 0; k < m; k++) d[k] += sv[k];
        } else {
            double *d = (double *)dst;
            const double *sv = (const double *)src;
            for (int64_t k = 0; k < m; k++) d[k] += sv[k];
        }
    }
}

#define CONCAT_PARALLEL_MIN_BYTES (256 << 10) /* smaller copies stay on the calling thread */
#define CONCAT_PIECE_BYTES (64 << 10)

static mx_status concat_run(const mx_op_ctx *ctx, concat_job *j, int64_t outer)
{
    for (int i = 0; i < j->n; i++)
        if (j->part[i] && j->add[i] && j->dtype != MX_FLOAT32 && j->dtype != MX_FLOAT64)
            return MX_ERROR(MX_ERR_UNSUPPORTED, "Concat: accumulating (req add) into %s is not supported",
                            mx_dtype_name(j->dtype));
    j->row = 0;
    for (int i = 0; i < j->n; i++) {
        j->at[i] = j->row;
        j->row += j->slab[i];
    }
    int64_t units = outer * j->n, bytes = outer * j->row * (int64_t)j->es;
    mx_threadpool *pool = bytes >= CONCAT_PARALLEL_MIN_BYTES ? mx_op_pool(ctx) : NULL;
    int64_t unit_bytes = units ? bytes / units : 1, min_units = CONCAT_PIECE_BYTES / (unit_bytes ? unit_bytes : 1);
    mx_parallel_for(pool, units, mx_parallel_grain(pool, units, 4, min_units > 1 ? min_units : 1), concat_units, j);
    return MX_OK;
}

static mx_status concat_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const concat_params *cp = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    concat_job j = {.n = (int)cp->num_args, .dtype = out[0].dtype, .es = mx_dtype_size(out[0].dtype),
                    .whole = out[0].data};
    int64_t outer = concat_geometry(cp, &in[0].shape, j.n, in, j.slab);
    for (int i = 0; i < j.n; i++) {
        j.part[i] = in[i].data;
        j.item[i] = in[i].batch_stride ? in[i].batch_stride : j.slab[i];
        j.add[i] = req[0] == MX_REQ_ADD;
    }
    return concat_run(ctx, &j, outer);
}

static mx_status concat_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const concat_params *cp = p;
    concat_job j = {.n = (int)cp->num_args, .backward = true, .dtype = out_grad[0].dtype,
                    .es = mx_dtype_size(out_grad[0].dtype), .whole = out_grad[0].data};
    /* Shapes from in_grad: data inputs are not backward dependencies. */
    int64_t outer = concat_geometry(cp, &in_grad[0].shape, j.n, in_grad, j.slab);
    for (int i = 0; i < j.n; i++) {
        j.part[i] = req[i] == MX_REQ_NULL ? NULL : in_grad[i].data;
        j.item[i] = in_grad[i].batch_stride ? in_grad[i].batch_stride : j.slab[i];
        j.add[i] = req[i] == MX_REQ_ADD;
    }
    return concat_run(ctx, &j, outer);
}

static const char *const concat_aliases[] = {"concat", NULL};

const mx_op_def mx_op_concat = {
    .name = "Concat",
    .aliases = concat_aliases,
    .doc = "Joins num_args inputs along dimension `dim`.",
    .params = concat_param_table,
    .n_params = (int)(sizeof(concat_param_table) / sizeof(concat_param_table[0])),
    .params_size = sizeof(concat_params),
    .list_inputs = concat_list_inputs,
    .list_outputs = concat_list_outputs,
    .infer_shape = concat_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward = concat_forward,
    .backward = concat_backward,
    .gpu = MX_OP_GPU(concat),
};
