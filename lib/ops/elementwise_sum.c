/*
 * elementwise_sum.c - ElementWiseSum (alias add_n): out = arg0 + arg1 +
 * ... of num_args inputs of one shape. Forward may run in place on arg0;
 * backward hands every input the output gradient (through a folded
 * layer's gradient first, a chunk at a time: mx_op_def.folds_backward).
 * Both run in vectors (simd.h), large tensors split across the kernel pool.
 */
#include "ops/elementwise_sum.h"
#include "ops/cpu/simd.h"

#include <stddef.h>
#include <string.h>

MX_OP_GPU_DECLARE(elementwise_sum);

static const mx_param_desc esum_param_table[] = {
    {"num_args", MX_PARAM_INT, NULL, 1, MX_OP_MAX_IO, NULL, offsetof(esum_params, num_args),
     "number of inputs to add"},
};

static const char *const esum_arg_names[MX_OP_MAX_IO] = {
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7", "arg8", "arg9",
    "arg10", "arg11", "arg12", "arg13", "arg14", "arg15", "arg16", "arg17", "arg18", "arg19",
    "arg20", "arg21", "arg22", "arg23", "arg24", "arg25", "arg26", "arg27", "arg28", "arg29",
    "arg30", "arg31", "arg32", "arg33", "arg34", "arg35", "arg36", "arg37", "arg38", "arg39",
    "arg40", "arg41", "arg42", "arg43", "arg44", "arg45", "arg46", "arg47", "arg48", "arg49",
    "arg50", "arg51", "arg52", "arg53", "arg54", "arg55", "arg56", "arg57", "arg58", "arg59",
    "arg60", "arg61", "arg62", "arg63",
};

static int esum_list_inputs(const void *p, const char **names)
{
    const esum_params *ep = p;
    for (int i = 0; i < ep->num_args; i++) names[i] = esum_arg_names[i];
    return (int)ep->num_args;
}

static int esum_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

/* All inputs share one shape; unknown ones take it from a known one. */
static mx_status esum_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_out;
    char a[128], b[128];
    int known = -1;
    for (int i = 0; i < n_in; i++) {
        if (in[i].ndim == 0) continue;
        if (known < 0) known = i;
        else if (!mx_shape_equal(&in[i], &in[known]))
            return MX_ERROR(MX_ERR_INVALID, "ElementWiseSum: %s has shape %s, but %s has %s", esum_arg_names[i],
                            mx_shape_str(&in[i], a, sizeof(a)), esum_arg_names[known],
                            mx_shape_str(&in[known], b, sizeof(b)));
    }
    if (known < 0) return MX_ERROR(MX_ERR_INVALID, "ElementWiseSum: the shapes of all %d inputs are unknown", n_in);
    for (int i = 0; i < n_in; i++) in[i] = in[known];
    out[0] = in[known];
    return MX_OK;
}

/* One kernel call over a range of elements: forward sums the inputs, in
 * chunks of ESUM_CHUNK (every input of a chunk read before its output is
 * written, so the output may be any of the inputs); backward copies or
 * adds dy into each input's gradient. */
#define ESUM_CHUNK 512
#define ESUM_PIECE 16384 /* elements per piece on the kernel pool */

typedef struct esum_job {
    int na, level;
    const float *const *x; /* forward inputs */
    const float *dy;
    float *const *dx;      /* backward: per input, NULL when not requested */
    const mx_req *req;
    float *y;
    const float *fy; /* backward with a fold: the forward output */
    bool add;
    mx_fold fold;    /* mx_op_ctx's: forward applies it to each chunk before storing it; backward takes its
                        gradient first */
} esum_job;

#define ESUM_KERNELS(P, W, TARGET)                                                                                  \
    TARGET static void esum_forward_##P(const esum_job *j, int64_t lo, int64_t hi)                                 \
    {                                                                                                               \
        _Alignas(64) float acc[ESUM_CHUNK];                                                                         \
        for (int64_t i0 = lo; i0 < hi; i0 += ESUM_CHUNK) {                                                          \
            const int64_t w = hi - i0 < ESUM_CHUNK ? hi - i0 : ESUM_CHUNK;                                          \
            memcpy(acc, j->x[0] + i0, (size_t)w * sizeof(float));                                                  \
            for (int k = 1; k < j->na; k++) {                                                                       \
                const float *xk = j->x[k] + i0;                                                                     \
                MX_SIMD_MAP2(P, W, acc, xk, acc, 0, w, false, v + u);                                               \
            }                                                                                                       \
            mx_fold_rows_at(&j->fold, j->level, acc, w);                                                            \
            if (j->add) MX_SIMD_MAP2(P, W, acc, j->y + i0, j->y + i0, 0, w, false, v + u);                          \
            else memcpy(j->y + i0, acc, (size_t)w * sizeof(float));                                                 \
        }                                                                                                           \
    }                                                                                                               \
    TARGET static void esum_backward_##P(const esum_job *j, int64_t lo, int64_t hi)                                \
    {                                                                                                               \
        if (j->fold.kind != MX_FOLD_NONE) { /* the fold's gradient a chunk at a time, then every input's */        \
            _Alignas(64) float g[ESUM_CHUNK];                                                                       \
            for (int64_t i0 = lo; i0 < hi; i0 += ESUM_CHUNK) {                                                      \
                const int64_t w = hi - i0 < ESUM_CHUNK ? hi - i0 : ESUM_CHUNK;                                      \
                mx_fold_backward_rows_at(&j->fold, j->level, j->dy + i0, j->fy + i0, g, w);                         \
                for (int k = 0; k < j->na; k++) {                                                                   \
                    float *dx = j->dx[k];                                                                           \
                    if (!dx) continue;                                                                              \
                    if (j->req[k] == MX_REQ_ADD) MX_SIMD_MAP2(P, W, g, dx + i0, dx + i0, 0, w, false, v + u);       \
                    else memcpy(dx + i0, g, (size_t)w * sizeof(float));                                            \
                }                                                                                                   \
            }                                                                                                       \
            return;                                                                                                 \
        }                                                                                                           \
        for (int k = 0; k < j->na; k++) {                                                                           \
            float *dx = j->dx[k];                                                                                   \
            if (!dx) continue;                                                                                      \
            if (j->req[k] == MX_REQ_ADD) MX_SIMD_MAP2(P, W, j->dy, dx, dx, lo, hi, false, v + u);                   \
            else memcpy(dx + lo, j->dy + lo, (size_t)(hi - lo) * sizeof(float));                                   \
        }                                                                                                           \
    }

MX_SIMD_INSTANTIATE(ESUM_KERNELS)

static void esum_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const esum_job *j = arg;
    MX_SIMD_DISPATCH(j->level, esum_forward, j, lo, hi);
}

static void esum_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const esum_job *j = arg;
    MX_SIMD_DISPATCH(j->level, esum_backward, j, lo, hi);
}

static mx_status esum_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const esum_params *ep = p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const float *x[MX_OP_MAX_IO];
    for (int k = 0; k < ep->num_args; k++) x[k] = in[k].data;
    MX_TRY(mx_fold_check_req(&ctx->fold, req[0], "ElementWiseSum"));
    esum_job j = {.na = (int)ep->num_args, .level = mx_simd_level(), .x = x, .y = out[0].data,
                  .add = req[0] == MX_REQ_ADD, .fold = ctx->fold};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&out[0].shape), ESUM_PIECE, esum_forward_range, &j);
    return MX_OK;
}

static mx_status esum_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)in, (void)aux;
    const esum_params *ep = p;
    const bool folded = ctx->fold.kind != MX_FOLD_NONE;
    float *dx[MX_OP_MAX_IO];
    bool any = false;
    for (int k = 0; k < ep->num_args; k++) {
        dx[k] = in_grad[k].data;
        /* A gradient written over dy already holds it, unless a fold's
         * gradient must be taken first. */
        if (req[k] == MX_REQ_NULL || (!folded && req[k] != MX_REQ_ADD && dx[k] == out_grad[0].data)) dx[k] = NULL;
        any |= dx[k] != NULL;
    }
    if (!any) return MX_OK;
    esum_job j = {.na = (int)ep->num_args, .level = mx_simd_level(), .dy = out_grad[0].data, .dx = dx, .req = req,
                  .fy = out[0].data, .fold = ctx->fold};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&out_grad[0].shape), ESUM_PIECE, esum_backward_range, &j);
    return MX_OK;
}

static const mx_inplace esum_inplace[] = {{0, 0}, {-1, -1}};
static const char *const esum_aliases[] = {"add_n", "_sparse_add_n", "_sparse_ElementWiseSum", NULL};

const mx_op_def mx_op_elementwise_sum = {
    .name = "ElementWiseSum",
    .aliases = esum_aliases,
    .doc = "Adds num_args arrays of one shape element-wise.",
    .params = esum_param_table,
    .n_params = (int)(sizeof(esum_param_table) / sizeof(esum_param_table[0])),
    .params_size = sizeof(esum_params),
    .list_inputs = esum_list_inputs,
    .list_outputs = esum_list_outputs,
    .infer_shape = esum_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = esum_inplace,
    .backward_inplace = esum_inplace,
    .folds_elementwise = true,
    .folds_backward = true,
    .forward = esum_forward,
    .backward = esum_backward,
    .gpu = MX_OP_GPU(elementwise_sum),
};
