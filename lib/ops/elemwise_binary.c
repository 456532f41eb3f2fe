/*
 * elemwise_binary.c - element-wise lhs OP rhs on equal shapes (no
 * broadcasting), one kernel behind four definitions with MXNet's names and
 * legacy aliases:
 *   elemwise_add (_add, _plus, _Plus)    dl = dy        dr = dy
 *   elemwise_sub (_sub, _minus, _Minus)  dl = dy        dr = -dy
 *   elemwise_mul (_mul, _Mul)            dl = dy*r      dr = dy*l
 *   elemwise_div (_div, _Div)            dl = dy/r      dr = -dy*l/r^2
 * Work runs in chunks that read before they write, so the output may share
 * a buffer with either input (forward) or out_grad (backward); the kernel
 * pool splits it, and an Activation or clip folded into one of these four
 * goes over each chunk of the output.
 *
 * Issue 17 adds MXNet's other equal-shape binaries on binary_math.h's
 * element math (shared with the scalar and broadcast families):
 *   _maximum (_Maximum), _minimum (_Minimum), _power (_Power), _mod (_Mod),
 *   _hypot (_Hypot), and with zero gradients the comparisons _equal,
 *   _not_equal, _greater, _greater_equal, _lesser, _lesser_equal and
 *   _logical_and, _logical_or, _logical_xor (CamelCase aliases _Equal,
 *   _Not_Equal, _Greater_Equal, _Logical_And, ...).
 * Each element is computed from lhs[i], rhs[i] (and dy[i]) before anything
 * at i is written, so the same in-place options hold.
 */
#include "ops/op.h"
#include "ops/binary_math.h"
#include "ops/cpu/simd.h"

#include <string.h>

typedef enum ewb_kind { EWB_ADD, EWB_SUB, EWB_MUL, EWB_DIV } ewb_kind;

static const char *const ewb_names[] = {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"};

static int ewb_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "lhs";
    names[1] = "rhs";
    return 2;
}

static int ewb_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status ewb_infer(ewb_kind kind, mx_shape *in, mx_shape *out)
{
    char a[128], b[128];
    if (in[0].ndim == 0 && in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "%s: the shapes of lhs and rhs are unknown", ewb_names[kind]);
    if (in[0].ndim == 0) in[0] = in[1];
    if (in[1].ndim == 0) in[1] = in[0];
    if (!mx_shape_equal(&in[0], &in[1]))
        return MX_ERROR(MX_ERR_INVALID, "%s: lhs has shape %s, rhs has shape %s (shapes must be equal)",
                        ewb_names[kind], mx_shape_str(&in[0], a, sizeof(a)), mx_shape_str(&in[1], b, sizeof(b)));
    out[0] = in[0];
    return MX_OK;
}

#define EWB_CHUNK 512

static inline void store(float *dst, const float *v, int64_t w, bool add)
{
    if (add)
        for (int64_t i = 0; i < w; i++) dst[i] += v[i];
    else
        memcpy(dst, v, (size_t)w * sizeof(float));
}

/* Forward and backward over a range of elements, in chunks; the pool
 * splits the range (each element is computed alone, so any split gives the
 * same bits). A folded activation or clip (mx_op_ctx.fold) goes over each
 * chunk of the output before it is stored. */
typedef struct ewb_job {
    ewb_kind kind;
    const float *l, *r, *dy;
    float *y, *dl, *dr;
    bool add, add_l, add_r;
    const mx_fold *fold;
} ewb_job;

#define EWB_PIECE 16384 /* elements per piece on the kernel pool */

static void ewb_forward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const ewb_job *j = arg;
    float v[EWB_CHUNK];
    for (int64_t i0 = lo; i0 < hi; i0 += EWB_CHUNK) {
        int64_t w = hi - i0 < EWB_CHUNK ? hi - i0 : EWB_CHUNK;
        const float *a = j->l + i0, *b = j->r + i0;
        switch (j->kind) {
        case EWB_ADD: for (int64_t i = 0; i < w; i++) v[i] = a[i] + b[i]; break;
        case EWB_SUB: for (int64_t i = 0; i < w; i++) v[i] = a[i] - b[i]; break;
        case EWB_MUL: for (int64_t i = 0; i < w; i++) v[i] = a[i] * b[i]; break;
        case EWB_DIV: for (int64_t i = 0; i < w; i++) v[i] = a[i] / b[i]; break;
        }
        mx_fold_rows(j->fold, v, w);
        store(j->y + i0, v, w, j->add);
    }
}

static mx_status ewb_forward(const mx_op_ctx *ctx, ewb_kind kind, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    MX_TRY(mx_fold_check_req(&ctx->fold, req[0], ewb_names[kind]));
    ewb_job j = {.kind = kind, .l = in[0].data, .r = in[1].data, .y = out[0].data, .add = req[0] == MX_REQ_ADD,
                 .fold = &ctx->fold};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&out[0].shape), EWB_PIECE, ewb_forward_range, &j);
    return MX_OK;
}

static void ewb_backward_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const ewb_job *j = arg;
    float gl[EWB_CHUNK], gr[EWB_CHUNK];
    for (int64_t i0 = lo; i0 < hi; i0 += EWB_CHUNK) {
        int64_t w = hi - i0 < EWB_CHUNK ? hi - i0 : EWB_CHUNK;
        const float *g = j->dy + i0, *l = j->l, *r = j->r;
        switch (j->kind) {
        case EWB_ADD:
            for (int64_t i = 0; i < w; i++) gl[i] = gr[i] = g[i];
            break;
        case EWB_SUB:
            for (int64_t i = 0; i < w; i++) {
                gl[i] = g[i];
                gr[i] = -g[i];
            }
            break;
        case EWB_MUL:
            for (int64_t i = 0; i < w; i++) {
                gl[i] = g[i] * r[i0 + i];
                gr[i] = g[i] * l[i0 + i];
            }
            break;
        case EWB_DIV:
            for (int64_t i = 0; i < w; i++) {
                float q = g[i] / r[i0 + i];
                gl[i] = q;
                gr[i] = -q * l[i0 + i] / r[i0 + i];
            }
            break;
        }
        if (j->dl) store(j->dl + i0, gl, w, j->add_l);
        if (j->dr) store(j->dr + i0, gr, w, j->add_r);
    }
}

static mx_status ewb_backward(const mx_op_ctx *ctx, ewb_kind kind, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_req *req, mx_tensor *in_grad)
{
    ewb_job j = {.kind = kind, .dy = out_grad[0].data, .l = kind >= EWB_MUL ? in[0].data : NULL,
                 .r = kind >= EWB_MUL ? in[1].data : NULL,
                 .dl = req[0] != MX_REQ_NULL ? in_grad[0].data : NULL, .add_l = req[0] == MX_REQ_ADD,
                 .dr = req[1] != MX_REQ_NULL ? in_grad[1].data : NULL, .add_r = req[1] == MX_REQ_ADD};
    mx_simd_parallel_for(mx_op_pool(ctx), mx_shape_size(&out_grad[0].shape), EWB_PIECE, ewb_backward_range, &j);
    return MX_OK;
}

#define EWB_FUNCS(prefix, kind)                                                                              \
    static mx_status prefix##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)    \
    {                                                                                                        \
        (void)p, (void)n_in, (void)n_out;                                                                    \
        return ewb_infer(kind, in, out);                                                                     \
    }                                                                                                        \
    static mx_status prefix##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,              \
                                      const mx_req *req, mx_tensor *out, mx_tensor *aux)                     \
    {                                                                                                        \
        (void)p, (void)aux;                                                                                  \
        return ewb_forward(ctx, kind, in, req, out);                                                         \
    }                                                                                                        \
    static mx_status prefix##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,       \
                                       const mx_tensor *in, const mx_tensor *out, const mx_req *req,         \
                                       mx_tensor *in_grad, mx_tensor *aux)                                   \
    {                                                                                                        \
        (void)p, (void)out, (void)aux;                                                                       \
        return ewb_backward(ctx, kind, out_grad, in, req, in_grad);                                          \
    }

EWB_FUNCS(ewb_add, EWB_ADD)
EWB_FUNCS(ewb_sub, EWB_SUB)
EWB_FUNCS(ewb_mul, EWB_MUL)
EWB_FUNCS(ewb_div, EWB_DIV)

static const mx_inplace ewb_forward_inplace[] = {{0, 0}, {1, 0}, {-1, -1}};
static const mx_inplace ewb_backward_inplace[] = {{0, 0}, {1, 0}, {-1, -1}};

static const char *const ewb_add_aliases[] = {"_sparse_elemwise_add", "_add", "_plus", "_Plus", NULL};
static const char *const ewb_sub_aliases[] = {"_sparse_elemwise_sub", "_sub", "_minus", "_Minus", NULL};
static const char *const ewb_mul_aliases[] = {"_sparse_elemwise_mul", "_mul", "_Mul", NULL};
static const char *const ewb_div_aliases[] = {"_sparse_elemwise_div", "_div", "_Div", NULL};

#define EWB_DEF(id, opname, prefix, deps, docstr)                                                            \
    MX_OP_GPU_DECLARE(id);                                                                                  \
    const mx_op_def mx_op_##id = {                                                                          \
        .name = opname,                                                                                     \
        .aliases = prefix##_aliases,                                                                        \
        .doc = docstr,                                                                                      \
        .params = NULL,                                                                                     \
        .n_params = 0,                                                                                      \
        .params_size = 1,                                                                                   \
        .list_inputs = ewb_list_inputs,                                                                     \
        .list_outputs = ewb_list_outputs,                                                                   \
        .infer_shape = prefix##_infer_shape,                                                                \
        .backward_deps = deps,                                                                              \
        .forward_inplace = ewb_forward_inplace,                                                             \
        .backward_inplace = ewb_backward_inplace,                                                           \
        .folds_elementwise = true,                                                                          \
        .forward = prefix##_forward,                                                                        \
        .backward = prefix##_backward,                                                                      \
        .gpu = MX_OP_GPU(id),                                                                               \
    }

EWB_DEF(elemwise_add, "elemwise_add", ewb_add, MX_BWD_OUT_GRAD, "Adds two arrays of one shape.");
EWB_DEF(elemwise_sub, "elemwise_sub", ewb_sub, MX_BWD_OUT_GRAD, "Subtracts rhs from lhs (equal shapes).");
EWB_DEF(elemwise_mul, "elemwise_mul", ewb_mul, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
        "Multiplies two arrays of one shape.");
EWB_DEF(elemwise_div, "elemwise_div", ewb_div, MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
        "Divides lhs by rhs (equal shapes).");

/* ------------------------------------------------------- issue 17 */

typedef struct ewbx_job {
    const float *l, *r, *dy;
    float *y, *dl, *dr; /* forward output; backward gradients (NULL: not requested) */
    bool add, add_l, add_r;
} ewbx_job;

MX_SIMD_JOB_RUNNER(ewbx, ewbx_job, 8192)

/* Per kind: forward y = f(l, r); backward dl = dy df/dl, dr = dy df/dr
 * (zeros for comparisons), both from the element's inputs before either
 * is stored. */
#define EWBX_KERNELS(id, KIND)                                                                                      \
    static void id##_fwd(const ewbx_job *j, int64_t lo, int64_t hi)                                                \
    {                                                                                                               \
        const float *l = j->l, *r = j->r;                                                                           \
        float *y = j->y;                                                                                            \
        if (j->add)                                                                                                 \
            for (int64_t i = lo; i < hi; i++) y[i] += mx_bin_f(KIND, l[i], r[i]);                                   \
        else                                                                                                        \
            for (int64_t i = lo; i < hi; i++) y[i] = mx_bin_f(KIND, l[i], r[i]);                                    \
    }                                                                                                               \
    static void id##_bwd(const ewbx_job *j, int64_t lo, int64_t hi)                                                \
    {                                                                                                               \
        const float *l = j->l, *r = j->r, *dy = j->dy;                                                              \
        float *dl = j->dl, *dr = j->dr;                                                                             \
        for (int64_t i = lo; i < hi; i++) {                                                                         \
            float g = mx_bin_no_grad(KIND) ? 0.0f : dy[i];                                                          \
            float a = mx_bin_no_grad(KIND) ? 0.0f : l[i], b = mx_bin_no_grad(KIND) ? 0.0f : r[i];                   \
            float gl = mx_bin_no_grad(KIND) ? 0.0f : g * mx_bin_da(KIND, a, b);                                     \
            float gr = mx_bin_no_grad(KIND) ? 0.0f : g * mx_bin_db(KIND, a, b);                                     \
            if (dl) dl[i] = j->add_l ? dl[i] + gl : gl;                                                             \
            if (dr) dr[i] = j->add_r ? dr[i] + gr : gr;                                                             \
        }                                                                                                           \
    }

static mx_status ewbx_forward(const mx_op_ctx *ctx, ewbx_kernel fn, const mx_tensor *in, const mx_req *req,
                              mx_tensor *out)
{
    if (req[0] == MX_REQ_NULL) return MX_OK;
    ewbx_job j = {.l = in[0].data, .r = in[1].data, .y = out[0].data, .add = req[0] == MX_REQ_ADD};
    ewbx_run(ctx, fn, &j, mx_shape_size(&out[0].shape));
    return MX_OK;
}

static mx_status ewbx_backward(const mx_op_ctx *ctx, ewbx_kernel fn, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_req *req, mx_tensor *in_grad)
{
    ewbx_job j = {.l = in[0].data, .r = in[1].data, .dy = out_grad[0].data,
                  .dl = req[0] == MX_REQ_NULL ? NULL : in_grad[0].data,
                  .dr = req[1] == MX_REQ_NULL ? NULL : in_grad[1].data,
                  .add_l = req[0] == MX_REQ_ADD, .add_r = req[1] == MX_REQ_ADD};
    if (!j.dl && !j.dr) return MX_OK;
    ewbx_run(ctx, fn, &j, mx_shape_size(&out_grad[0].shape));
    return MX_OK;
}

#define A(...) ((const char *const[]){__VA_ARGS__ NULL})
/* id, MXNet name, aliases, binary_math kind, doc. */
#define EWBX_OPS(X)                                                                                                 \
    X(maximum, "_maximum", A("_Maximum", ), MX_BIN_MAXIMUM, "max(lhs, rhs) element-wise (equal shapes).")          \
    X(minimum, "_minimum", A("_Minimum", ), MX_BIN_MINIMUM, "min(lhs, rhs) element-wise (equal shapes).")          \
    X(power, "_power", A("_Power", ), MX_BIN_POWER, "lhs ^ rhs element-wise (equal shapes).")                      \
    X(mod, "_mod", A("_Mod", ), MX_BIN_MOD, "lhs mod rhs (Python's %) element-wise (equal shapes).")               \
    X(hypot, "_hypot", A("_Hypot", ), MX_BIN_HYPOT, "sqrt(lhs^2 + rhs^2) element-wise (equal shapes).")            \
    X(equal, "_equal", A("_Equal", ), MX_BIN_EQUAL, "1 where lhs == rhs, else 0.")                                 \
    X(not_equal, "_not_equal", A("_Not_Equal", ), MX_BIN_NOT_EQUAL, "1 where lhs != rhs, else 0.")                 \
    X(greater, "_greater", A("_Greater", ), MX_BIN_GREATER, "1 where lhs > rhs, else 0.")                          \
    X(greater_equal, "_greater_equal", A("_Greater_Equal", ), MX_BIN_GREATER_EQUAL, "1 where lhs >= rhs, else 0.") \
    X(lesser, "_lesser", A("_Lesser", ), MX_BIN_LESSER, "1 where lhs < rhs, else 0.")                              \
    X(lesser_equal, "_lesser_equal", A("_Lesser_Equal", ), MX_BIN_LESSER_EQUAL, "1 where lhs <= rhs, else 0.")     \
    X(logical_and, "_logical_and", A("_Logical_And", ), MX_BIN_LOGICAL_AND, "1 where lhs and rhs are non-zero.")   \
    X(logical_or, "_logical_or", A("_Logical_Or", ), MX_BIN_LOGICAL_OR, "1 where lhs or rhs is non-zero.")         \
    X(logical_xor, "_logical_xor", A("_Logical_Xor", ), MX_BIN_LOGICAL_XOR,                                        \
      "1 where exactly one of lhs and rhs is non-zero.")

#define EWBX_DEF(id, opname, aliases_, KIND, docstr)                                                                \
    EWBX_KERNELS(ewbx_##id, KIND)                                                                                   \
    static mx_status ewbx_##id##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)      \
    {                                                                                                               \
        (void)p, (void)n_in, (void)n_out;                                                                           \
        char a[128], b[128];                                                                                        \
        if (in[0].ndim == 0 && in[1].ndim == 0)                                                                     \
            return MX_ERROR(MX_ERR_INVALID, "%s: the shapes of lhs and rhs are unknown", opname);                   \
        if (in[0].ndim == 0) in[0] = in[1];                                                                         \
        if (in[1].ndim == 0) in[1] = in[0];                                                                         \
        if (!mx_shape_equal(&in[0], &in[1]))                                                                        \
            return MX_ERROR(MX_ERR_INVALID,                                                                         \
                            "%s: lhs has shape %s, rhs has shape %s (shapes must be equal; broadcast_* ops "        \
                            "broadcast)",                                                                           \
                            opname, mx_shape_str(&in[0], a, sizeof(a)), mx_shape_str(&in[1], b, sizeof(b)));        \
        out[0] = in[0];                                                                                             \
        return MX_OK;                                                                                               \
    }                                                                                                               \
    static mx_status ewbx_##id##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in,                 \
                                         const mx_req *req, mx_tensor *out, mx_tensor *aux)                         \
    {                                                                                                               \
        (void)p, (void)aux;                                                                                         \
        return ewbx_forward(ctx, ewbx_##id##_fwd, in, req, out);                                                    \
    }                                                                                                               \
    static mx_status ewbx_##id##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,          \
                                          const mx_tensor *in, const mx_tensor *out, const mx_req *req,             \
                                          mx_tensor *in_grad, mx_tensor *aux)                                       \
    {                                                                                                               \
        (void)p, (void)out, (void)aux;                                                                              \
        return ewbx_backward(ctx, ewbx_##id##_bwd, out_grad, in, req, in_grad);                                     \
    }                                                                                                               \
    MX_OP_GPU_DECLARE(id);                                                                                          \
    const mx_op_def mx_op_##id = {                                                                                  \
        .name = opname,                                                                                             \
        .aliases = aliases_,                                                                                        \
        .doc = docstr,                                                                                              \
        .params_size = 1,                                                                                           \
        .list_inputs = ewb_list_inputs,                                                                             \
        .list_outputs = ewb_list_outputs,                                                                           \
        .infer_shape = ewbx_##id##_infer_shape,                                                                     \
        .backward_deps = MX_BWD_OUT_GRAD | (MX_BIN_GRAD_READS_INPUTS(KIND) ? MX_BWD_IN_DATA : 0),                   \
        .forward_inplace = ewb_forward_inplace,                                                                     \
        .backward_inplace = ewb_backward_inplace,                                                                   \
        .forward = ewbx_##id##_forward,                                                                             \
        .backward = ewbx_##id##_backward,                                                                           \
        .gpu = MX_OP_GPU(id),                                                                                       \
    };

EWBX_OPS(EWBX_DEF)
