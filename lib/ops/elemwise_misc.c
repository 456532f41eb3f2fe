/*
 * elemwise_misc.c - MXNet's small element-wise utilities that Gluon code
 * writes into symbol JSON:
 *   BlockGrad (stop_gradient)   y = x, dx = 0
 *   _copy (identity)            y = x, dx = dy
 *   _identity_with_attr_like_rhs (lhs, rhs of one shape)  y = lhs,
 *                               dlhs = dy, drhs = 0
 *   zeros_like, ones_like       y = 0 or 1 in data's shape, dx = 0
 *   amp_cast (dtype)            y = x converted to dtype (float32,
 *                               float16 and bfloat16 data; other data
 *                               passes through, as MXNet's AMPCastType),
 *                               dx = dy converted back (cast.h; in place
 *                               also between types of different sizes)
 *   where (condition, x, y)     out = condition != 0 ? x : y; dx and dy
 *                               take the gradient where their branch was
 *                               chosen, condition gets 0. condition has
 *                               x's shape, or is 1-D of length x.shape[0]
 *                               and picks whole rows (MXNet 1.9.1).
 * float32 (amp_cast: the dtypes of dtype_convert.h), any shape; everything
 * runs in place where an output can reuse an input's buffer.
 */
#include "ops/op.h"
#include "ops/cast.h"
#include "ndarray/dtype_convert.h"

#include <stddef.h>
#include <string.h>

static int one_input(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    return 1;
}

static int one_output(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    return 1;
}

static mx_status same_shape(const char *name, mx_shape *in, mx_shape *out)
{
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "%s: the shape of data is unknown", name);
    out[0] = in[0];
    return MX_OK;
}

/* dst = src (req write / in place) or dst += src (add), n floats. */
static void put_copy(float *dst, const float *src, int64_t n, mx_req req)
{
    if (req == MX_REQ_NULL) return;
    if (req == MX_REQ_ADD)
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    else if (dst != src)
        memmove(dst, src, sizeof(float) * (size_t)n);
}

/* dst = v everywhere (write) or += v (add). */
static void put_fill(float *dst, float v, int64_t n, mx_req req)
{
    if (req == MX_REQ_NULL) return;
    if (req == MX_REQ_ADD) {
        if (v != 0.0f)
            for (int64_t i = 0; i < n; i++) dst[i] += v;
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] = v;
    }
}

static const mx_inplace inplace00[] = {{0, 0}, {-1, -1}};

/* ------------------------------------------------------- copies and fills */

/* What an identity-like op does: its output value and whether the input
 * gets the gradient. */
enum { COPY_PASS, COPY_BLOCK, FILL_ZERO, FILL_ONE };

static mx_status fill_or_copy_forward(int kind, const mx_tensor *in, const mx_req *req, mx_tensor *out)
{
    int64_t n = mx_shape_size(&out[0].shape);
    if (kind == FILL_ZERO || kind == FILL_ONE) put_fill(out[0].data, kind == FILL_ONE ? 1.0f : 0.0f, n, req[0]);
    else put_copy(out[0].data, in[0].data, n, req[0]);
    return MX_OK;
}

static mx_status fill_or_copy_backward(int kind, const mx_tensor *out_grad, const mx_req *req, mx_tensor *in_grad)
{
    int64_t n = mx_shape_size(&in_grad[0].shape);
    if (kind == COPY_PASS) put_copy(in_grad[0].data, out_grad[0].data, n, req[0]);
    else put_fill(in_grad[0].data, 0.0f, n, req[0]);
    return MX_OK;
}

#define COPY_FUNCS(id, opname, KIND)                                                                                \
    static mx_status id##_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)             \
    {                                                                                                               \
        (void)p, (void)n_in, (void)n_out;                                                                           \
        return same_shape(opname, in, out);                                                                         \
    }                                                                                                               \
    static mx_status id##_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,    \
                                  mx_tensor *out, mx_tensor *aux)                                                   \
    {                                                                                                               \
        (void)ctx, (void)p, (void)aux;                                                                              \
        return fill_or_copy_forward(KIND, in, req, out);                                                            \
    }                                                                                                               \
    static mx_status id##_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,                \
                                   const mx_tensor *in, const mx_tensor *out, const mx_req *req,                    \
                                   mx_tensor *in_grad, mx_tensor *aux)                                              \
    {                                                                                                               \
        (void)ctx, (void)p, (void)in, (void)out, (void)aux;                                                         \
        return fill_or_copy_backward(KIND, out_grad, req, in_grad);                                                 \
    }

COPY_FUNCS(block_grad, "BlockGrad", COPY_BLOCK)
COPY_FUNCS(copy, "_copy", COPY_PASS)
COPY_FUNCS(zeros_like, "zeros_like", FILL_ZERO)
COPY_FUNCS(ones_like, "ones_like", FILL_ONE)

#define A(...) ((const char *const[]){__VA_ARGS__ NULL})

#define COPY_DEF(id, opname, aliases_, docstr)                                                                      \
    MX_OP_GPU_DECLARE(id);                                                                                          \
    const mx_op_def mx_op_##id = {                                                                                  \
        .name = opname,                                                                                             \
        .aliases = aliases_,                                                                                        \
        .doc = docstr,                                                                                              \
        .params_size = 1,                                                                                           \
        .list_inputs = one_input,                                                                                   \
        .list_outputs = one_output,                                                                                 \
        .infer_shape = id##_infer_shape,                                                                            \
        .backward_deps = MX_BWD_OUT_GRAD,                                                                           \
        .forward_inplace = inplace00,                                                                               \
        .backward_inplace = inplace00,                                                                              \
        .forward = id##_forward,                                                                                    \
        .backward = id##_backward,                                                                                  \
        .gpu = MX_OP_GPU(id),                                                                                       \
    }

COPY_DEF(block_grad, "BlockGrad", A("stop_gradient", "_sparse_stop_gradient", ),
         "Passes data through; stops the gradient (data gets zeros).");
COPY_DEF(copy, "_copy", A("identity", ), "Returns a copy of data; the gradient passes through.");
COPY_DEF(zeros_like, "zeros_like", A("_sparse_zeros_like", ), "Zeros of data's shape.");
COPY_DEF(ones_like, "ones_like", A(), "Ones of data's shape.");

/* ------------------------------------------------------- amp_cast */

static const mx_param_desc amp_param_table[] = {
    {"dtype", MX_PARAM_ENUM, NULL, 1, 0, mx_amp_cast_choices, offsetof(amp_cast_params, dtype),
     "the output data type (float32, float16 and bfloat16 data only; other data passes through)"},
};

static mx_status amp_cast_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    return same_shape("amp_cast", in, out);
}

/* MXNet's AMPCastType (mx_amp_cast_out_dtype); unknown data is float32. */
static mx_status amp_cast_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)n_in, (void)n_out;
    if (in[0] < 0) in[0] = MX_FLOAT32;
    mx_dtype want = mx_amp_cast_out_dtype(p, (mx_dtype)in[0]);
    if (out[0] >= 0 && out[0] != (int)want)
        return MX_ERROR(MX_ERR_INVALID, "amp_cast: output is %s, but %s data casts to %s",
                        mx_dtype_name((mx_dtype)out[0]), mx_dtype_name((mx_dtype)in[0]), mx_dtype_name(want));
    out[0] = want;
    return MX_OK;
}

/* Like Cast's (cast.c): out = data converted (dtype_convert.h), the output
 * tensor of the type mx_amp_cast_out_dtype gives. */
static mx_status amp_cast_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    mx_dtype want = mx_amp_cast_out_dtype(p, in[0].dtype);
    if (out[0].dtype != want)
        return MX_ERROR(MX_ERR_INVALID, "amp_cast: output tensor is %s, expected %s for %s data",
                        mx_dtype_name(out[0].dtype), mx_dtype_name(want), mx_dtype_name(in[0].dtype));
    return mx_dtype_convert("amp_cast", out[0].data, out[0].dtype, in[0].data, in[0].dtype,
                            mx_shape_size(&in[0].shape), req[0] == MX_REQ_ADD);
}

/* The gradient converted back to the input's type. */
static mx_status amp_cast_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                   const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    return mx_dtype_convert("amp_cast", in_grad[0].data, in_grad[0].dtype, out_grad[0].data, out_grad[0].dtype,
                            mx_shape_size(&in_grad[0].shape), req[0] == MX_REQ_ADD);
}

MX_OP_GPU_DECLARE(amp_cast);

const mx_op_def mx_op_amp_cast = {
    .name = "amp_cast",
    .doc = "Casts float32, float16 and bfloat16 data to dtype for mixed precision; other data passes through.",
    .params = amp_param_table,
    .n_params = (int)(sizeof(amp_param_table) / sizeof(amp_param_table[0])),
    .params_size = sizeof(amp_cast_params),
    .list_inputs = one_input,
    .list_outputs = one_output,
    .infer_shape = amp_cast_infer_shape,
    .infer_type = amp_cast_infer_type,
    .cpu_dtypes = MX_CAST_ALL_DTYPES,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = inplace00,
    .backward_inplace = inplace00,
    .forward = amp_cast_forward,
    .backward = amp_cast_backward,
    .gpu = MX_OP_GPU(amp_cast),
};

/* ------------------------------------------------------- _identity_with_attr_like_rhs */

static int lhs_rhs(const void *p, const char **names)
{
    (void)p;
    names[0] = "lhs";
    names[1] = "rhs";
    return 2;
}

static mx_status iwalr_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    char a[128], b[128];
    if (in[0].ndim == 0 && in[1].ndim == 0)
        return MX_ERROR(MX_ERR_INVALID, "_identity_with_attr_like_rhs: the shapes of lhs and rhs are unknown");
    if (in[0].ndim == 0) in[0] = in[1];
    if (in[1].ndim == 0) in[1] = in[0];
    if (!mx_shape_equal(&in[0], &in[1]))
        return MX_ERROR(MX_ERR_INVALID,
                        "_identity_with_attr_like_rhs: lhs has shape %s, rhs has shape %s (must be equal)",
                        mx_shape_str(&in[0], a, sizeof(a)), mx_shape_str(&in[1], b, sizeof(b)));
    out[0] = in[0];
    return MX_OK;
}

static mx_status iwalr_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    put_copy(out[0].data, in[0].data, mx_shape_size(&out[0].shape), req[0]);
    return MX_OK;
}

static mx_status iwalr_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)in, (void)out, (void)aux;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    put_copy(in_grad[0].data, out_grad[0].data, n, req[0]);
    put_fill(in_grad[1].data, 0.0f, n, req[1]);
    return MX_OK;
}

MX_OP_GPU_DECLARE(identity_with_attr_like_rhs);

const mx_op_def mx_op_identity_with_attr_like_rhs = {
    .name = "_identity_with_attr_like_rhs",
    .doc = "Returns lhs (rhs, of the same shape, only lends its attributes); rhs gets no gradient.",
    .params_size = 1,
    .list_inputs = lhs_rhs,
    .list_outputs = one_output,
    .infer_shape = iwalr_infer_shape,
    .backward_deps = MX_BWD_OUT_GRAD,
    .forward_inplace = inplace00,
    .backward_inplace = inplace00,
    .forward = iwalr_forward,
    .backward = iwalr_backward,
    .gpu = MX_OP_GPU(identity_with_attr_like_rhs),
};

/* ------------------------------------------------------- where */

static int where_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "condition";
    names[1] = "x";
    names[2] = "y";
    return 3;
}

static mx_status where_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)p, (void)n_in, (void)n_out;
    char a[128], b[128];
    if (in[1].ndim == 0 && in[2].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "where: the shapes of x and y are unknown");
    if (in[1].ndim == 0) in[1] = in[2];
    if (in[2].ndim == 0) in[2] = in[1];
    if (!mx_shape_equal(&in[1], &in[2]))
        return MX_ERROR(MX_ERR_INVALID, "where: x has shape %s, y has shape %s (must be equal)",
                        mx_shape_str(&in[1], a, sizeof(a)), mx_shape_str(&in[2], b, sizeof(b)));
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "where: the shape of condition is unknown");
    bool rows = in[0].ndim == 1 && in[1].ndim >= 1 && in[0].dims[0] == in[1].dims[0];
    if (!mx_shape_equal(&in[0], &in[1]) && !rows)
        return MX_ERROR(MX_ERR_INVALID,
                        "where: condition has shape %s, x has shape %s (condition must have x's shape, or be 1-D "
                        "with x.shape[0] elements)",
                        mx_shape_str(&in[0], a, sizeof(a)), mx_shape_str(&in[1], b, sizeof(b)));
    out[0] = in[1];
    return MX_OK;
}

/* Elements per condition value: 1, or a whole row when condition is 1-D. */
static int64_t where_block(const mx_tensor *cond, const mx_shape *xs)
{
    int64_t n = mx_shape_size(xs), c = mx_shape_size(&cond->shape);
    return c == n ? 1 : n / (c ? c : 1);
}

static mx_status where_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const float *c = in[0].data, *x = in[1].data, *yv = in[2].data;
    float *o = out[0].data;
    int64_t blk = where_block(&in[0], &in[1].shape), nc = mx_shape_size(&in[0].shape);
    bool add = req[0] == MX_REQ_ADD;
    if (blk == 1) { /* a select the compiler vectorises */
        if (add)
            for (int64_t i = 0; i < nc; i++) o[i] += c[i] != 0.0f ? x[i] : yv[i];
        else
            for (int64_t i = 0; i < nc; i++) o[i] = c[i] != 0.0f ? x[i] : yv[i];
        return MX_OK;
    }
    for (int64_t r = 0; r < nc; r++) {
        const float *src = (c[r] != 0.0f ? x : yv) + r * blk;
        float *dst = o + r * blk;
        if (add) {
            for (int64_t i = 0; i < blk; i++) dst[i] += src[i];
        } else if (dst != src) {
            memmove(dst, src, sizeof(float) * (size_t)blk);
        }
    }
    return MX_OK;
}

static mx_status where_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)ctx, (void)p, (void)out, (void)aux;
    const float *c = in[0].data, *dy = out_grad[0].data;
    float *dx = req[1] == MX_REQ_NULL ? NULL : in_grad[1].data, *dyy = req[2] == MX_REQ_NULL ? NULL : in_grad[2].data;
    bool ax = req[1] == MX_REQ_ADD, ay = req[2] == MX_REQ_ADD;
    int64_t blk = where_block(&in[0], &out_grad[0].shape), nc = mx_shape_size(&in[0].shape);
    for (int64_t r = 0; r < nc; r++) {
        bool take_x = c[r] != 0.0f;
        for (int64_t i = r * blk; i < (r + 1) * blk; i++) {
            float g = dy[i]; /* read before either gradient (one may be dy's buffer) is written */
            if (dx) dx[i] = (ax ? dx[i] : 0.0f) + (take_x ? g : 0.0f);
            if (dyy) dyy[i] = (ay ? dyy[i] : 0.0f) + (take_x ? 0.0f : g);
        }
    }
    put_fill(in_grad[0].data, 0.0f, nc, req[0]);
    return MX_OK;
}

static const mx_inplace where_forward_inplace[] = {{1, 0}, {2, 0}, {-1, -1}};
static const mx_inplace where_backward_inplace[] = {{1, 0}, {2, 0}, {-1, -1}};

MX_OP_GPU_DECLARE(where);

static mx_status where_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return mx_op_infer_type_index("where", 0, in, n_in, out, n_out);
}

const mx_op_def mx_op_where = {
    .name = "where",
    .aliases = A("_sparse_where", ),
    .doc = "condition != 0 ? x : y element-wise (or per row of x for a 1-D condition).",
    .params_size = 1,
    .list_inputs = where_inputs,
    .list_outputs = one_output,
    .infer_shape = where_infer_shape,
    .infer_type = where_infer_type,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA,
    .backward_in_mask = 1u, /* condition only */
    .forward_inplace = where_forward_inplace,
    .backward_inplace = where_backward_inplace,
    .forward = where_forward,
    .backward = where_backward,
    .gpu = MX_OP_GPU(where),
};
