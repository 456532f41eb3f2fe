/*
 * ndarray_ops.c - imperative array operations, each pushed to the engine
 * with the arrays it reads and writes. Arguments are checked at push time;
 * the kernels run later on a worker. Pushed ops hold references to their
 * arrays, so callers may free their handles right after pushing.
 */
#include "ndarray/ndarray_internal.h"

#include "blas/blas.h"
#include "ndarray/dtype_convert.h"
#include "device/device.h"
#include "ops/op.h"
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

typedef enum nd_kind { ND_COPY, ND_FILL, ND_BINARY, ND_BINARY_SCALAR, ND_DOT } nd_kind;

typedef struct nd_op {
    nd_kind kind;
    mx_ndarray *out, *a, *b; /* retained; a and b may be NULL */
    mx_binary_op binary;
    double scalar;
    bool scalar_first;
    bool transpose_a, transpose_b;
} nd_op;

static void nd_op_free(void *payload)
{
    nd_op *op = payload;
    mx_ndarray_free(op->out);
    mx_ndarray_free(op->a);
    mx_ndarray_free(op->b);
    free(op);
}

/* ---------------------------------------------------------------- kernels */

/* A dtype conversion crossing devices (or between two GPUs): through host
 * memory, converted there (dtype_convert.c): src's bytes come over first
 * when it is on a GPU, dst's go over last when it is. Runs on the copy
 * lane, whose copies wait for the devices' compute streams. */
static mx_status copy_staged(mx_ndarray *dst, mx_ndarray *src, const mx_exec_ctx *exec)
{
    mx_context dc = mx_ndarray_context(dst), sc = mx_ndarray_context(src);
    bool dg = dc.dev_type == MX_DEV_GPU, sg = sc.dev_type == MX_DEV_GPU;
    int64_t n = mx_ndarray_size(dst);
    size_t sbytes = mx_ndarray_nbytes(src), dbytes = mx_ndarray_nbytes(dst);
    void *s = mx_ndarray_data(src), *d = mx_ndarray_data(dst), *hs = NULL, *hd = NULL;
    mx_status st = MX_OK;
    if (sg && !(hs = mx_malloc(sbytes ? sbytes : 1))) st = MX_ERR_NOMEM;
    if (st == MX_OK && dg && !(hd = mx_malloc(dbytes ? dbytes : 1))) st = MX_ERR_NOMEM;
    if (st == MX_OK && sg) st = mx_device_copy(hs, mx_cpu(), s, sc, sbytes, exec->stream);
    if (st == MX_OK) st = mx_dtype_convert("copy", dg ? hd : d, dst->dtype, sg ? hs : s, src->dtype, n, false);
    if (st == MX_OK && dg) st = mx_device_copy(d, dc, hd, mx_cpu(), dbytes, exec->stream);
    free(hs);
    free(hd);
    return st;
}

static mx_status run_copy(nd_op *op, const mx_exec_ctx *exec)
{
    mx_ndarray *dst = op->out, *src = op->a;
    mx_context dc = mx_ndarray_context(dst), sc = mx_ndarray_context(src);
    void *d = mx_ndarray_data(dst);
    const void *s = mx_ndarray_data(src);
    if (dst->dtype == src->dtype)
        return mx_device_copy(d, dc, s, sc, mx_ndarray_nbytes(dst), exec->stream);
    if (d == s) return MX_ERROR(MX_ERR_INVALID, "copy: dtype conversion onto the same memory");
    int64_t n = mx_ndarray_size(dst);
    bool dg = dc.dev_type == MX_DEV_GPU, sg = sc.dev_type == MX_DEV_GPU;
    if (!dg && !sg) return mx_dtype_convert("copy", d, dst->dtype, s, src->dtype, n, false); /* host memory */
#ifdef MX_USE_CUDA
    if (dg && mx_context_equal(dc, sc)) { /* on one GPU: a kernel on its compute stream (mx_nd_copy) */
        MX_TRY(mx_dtype_convert_gpu("copy", d, dst->dtype, s, src->dtype, n, false, exec->stream));
        return mx_device_op_done(exec);
    }
#endif
    return copy_staged(dst, src, exec);
}

static mx_status run_fill(nd_op *op, const mx_exec_ctx *exec)
{
    mx_ndarray *dst = op->out;
    int64_t n = mx_ndarray_size(dst);
    size_t bytes = mx_ndarray_nbytes(dst), size = mx_dtype_size(dst->dtype);
    mx_context ctx = mx_ndarray_context(dst);
    void *d = mx_ndarray_data(dst);
    if (ctx.dev_type == MX_DEV_GPU) {
        const mx_device_ops *dev = mx_device_get(ctx.dev_type);
        if (!dev) return mx_last_status();
        if (op->scalar == 0.0) return dev->zero(d, ctx.dev_id, bytes, exec->stream);
#ifdef MX_USE_CUDA
        _Alignas(8) unsigned char elem[8];
        MX_TRY(mx_dtype_from_double("fill", elem, dst->dtype, op->scalar));
        MX_TRY(mx_dtype_fill_gpu(d, dst->dtype, elem, n, exec->stream));
        return mx_device_op_done(exec);
#else
        return MX_ERROR(MX_ERR_UNSUPPORTED, "fill: a GPU array in a build without CUDA");
#endif
    }
    if (op->scalar == 0.0) {
        memset(d, 0, bytes);
    } else if (dst->dtype == MX_FLOAT32) {
        float v = (float)op->scalar, *f = d;
        for (int64_t i = 0; i < n; i++) f[i] = v;
    } else if (n > 0) { /* one element converted, then repeated by doubling */
        MX_TRY(mx_dtype_from_double("fill", d, dst->dtype, op->scalar));
        for (size_t done = size; done < bytes;) {
            size_t w = done < bytes - done ? done : bytes - done;
            memcpy((char *)d + done, d, w);
            done += w;
        }
    }
    return MX_OK;
}

/* One loop per (type, operator) so the compiler vectorises each. */
#define BINARY_LOOPS(T)                                                                   \
    static void binary_##T(mx_binary_op k, T *o, const T *a, const T *b, int64_t n)       \
    {                                                                                     \
        switch (k) {                                                                      \
        case MX_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; break;        \
        case MX_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; break;        \
        case MX_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;        \
        case MX_OP_DIV: for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;        \
        }                                                                                 \
    }                                                                                     \
    static void scalar_##T(mx_binary_op k, T *o, const T *a, T s, bool first, int64_t n)  \
    {                                                                                     \
        switch (k) {                                                                      \
        case MX_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + s; break;           \
        case MX_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * s; break;           \
        case MX_OP_SUB:                                                                   \
            if (first) for (int64_t i = 0; i < n; i++) o[i] = s - a[i];                   \
            else for (int64_t i = 0; i < n; i++) o[i] = a[i] - s;                         \
            break;                                                                        \
        case MX_OP_DIV:                                                                   \
            if (first) for (int64_t i = 0; i < n; i++) o[i] = s / a[i];                   \
            else for (int64_t i = 0; i < n; i++) o[i] = a[i] / s;                         \
            break;                                                                        \
        }                                                                                 \
    }
BINARY_LOOPS(float)
BINARY_LOOPS(double)

static mx_status run_binary(nd_op *op)
{
    int64_t n = mx_ndarray_size(op->out);
    if (op->out->dtype == MX_FLOAT32)
        binary_float(op->binary, mx_ndarray_data(op->out), mx_ndarray_data(op->a), mx_ndarray_data(op->b), n);
    else
        binary_double(op->binary, mx_ndarray_data(op->out), mx_ndarray_data(op->a), mx_ndarray_data(op->b), n);
    return MX_OK;
}

static mx_status run_binary_scalar(nd_op *op)
{
    int64_t n = mx_ndarray_size(op->out);
    if (op->out->dtype == MX_FLOAT32)
        scalar_float(op->binary, mx_ndarray_data(op->out), mx_ndarray_data(op->a), (float)op->scalar,
                     op->scalar_first, n);
    else
        scalar_double(op->binary, mx_ndarray_data(op->out), mx_ndarray_data(op->a), op->scalar,
                      op->scalar_first, n);
    return MX_OK;
}

static mx_status run_dot(nd_op *op, const mx_exec_ctx *exec)
{
    const mx_shape *sa = mx_ndarray_shape(op->a), *sb = mx_ndarray_shape(op->b);
    int64_t m = op->transpose_a ? sa->dims[1] : sa->dims[0];
    int64_t k = op->transpose_a ? sa->dims[0] : sa->dims[1];
    int64_t n = op->transpose_b ? sb->dims[0] : sb->dims[1];
    int64_t lda = sa->dims[1], ldb = sb->dims[1];
    if (op->out->dtype == MX_FLOAT32)
        mx_sgemm(exec->pool, op->transpose_a, op->transpose_b, m, n, k, 1.0f, mx_ndarray_data(op->a), lda,
                 mx_ndarray_data(op->b), ldb, 0.0f, mx_ndarray_data(op->out), n);
    else
        mx_dgemm(exec->pool, op->transpose_a, op->transpose_b, m, n, k, 1.0, mx_ndarray_data(op->a), lda,
                 mx_ndarray_data(op->b), ldb, 0.0, mx_ndarray_data(op->out), n);
    return MX_OK;
}

/* NDArray math on a GPU runs the operators' own device kernels (one
 * kernel path: elemwise_*, _*_scalar, batch_dot), on the op's worker. */
static mx_status run_device_op(const char *name, const char *const *keys, const char *const *values, int n_params,
                               mx_tensor *in, mx_tensor *out, const mx_exec_ctx *exec)
{
    const mx_op_def *def;
    mx_op_kernels k;
    MX_TRY(mx_op_lookup(name, &def));
    MX_TRY(mx_op_kernels_for(def, exec->ctx, &k));
    void *params = mx_calloc(1, def->params_size + 1);
    if (!params) return MX_ERR_NOMEM;
    mx_status s = mx_op_parse_params(def, keys, values, n_params, params);
    mx_req req = MX_REQ_WRITE;
    mx_op_ctx ctx = {.exec = exec};
    if (s == MX_OK) s = k.forward(&ctx, params, in, &req, out, NULL);
    free(params);
    return s == MX_OK ? mx_device_op_done(exec) : s;
}

static mx_tensor nd_tensor(mx_ndarray *a, mx_shape shape)
{
    return (mx_tensor){.data = mx_ndarray_data(a), .shape = shape, .dtype = a->dtype, .ctx = mx_ndarray_context(a)};
}

static mx_status run_on_device(nd_op *op, const mx_exec_ctx *exec)
{
    static const char *const binary_names[] = {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"};
    static const char *const scalar_names[] = {"_plus_scalar", "_minus_scalar", "_mul_scalar", "_div_scalar"};
    static const char *const scalar_first_names[] = {"_plus_scalar", "_rminus_scalar", "_mul_scalar",
                                                     "_rdiv_scalar"};
    const mx_shape flat = MX_SHAPE(mx_ndarray_size(op->out));
    mx_tensor out = nd_tensor(op->out, flat);
    if (op->kind == ND_BINARY) {
        mx_tensor in[2] = {nd_tensor(op->a, flat), nd_tensor(op->b, flat)};
        return run_device_op(binary_names[op->binary], NULL, NULL, 0, in, &out, exec);
    }
    if (op->kind == ND_BINARY_SCALAR) {
        char value[32];
        snprintf(value, sizeof(value), "%.9g", (double)(float)op->scalar);
        const char *key = "scalar", *val = value;
        mx_tensor in = nd_tensor(op->a, flat);
        return run_device_op((op->scalar_first ? scalar_first_names : scalar_names)[op->binary], &key, &val, 1, &in,
                             &out, exec);
    }
    /* dot: one batch of batch_dot, (1, M, K) x (1, K, N) -> (1, M, N). */
    const mx_shape *sa = mx_ndarray_shape(op->a), *sb = mx_ndarray_shape(op->b), *so = mx_ndarray_shape(op->out);
    mx_tensor in[2] = {nd_tensor(op->a, MX_SHAPE(1, sa->dims[0], sa->dims[1])),
                       nd_tensor(op->b, MX_SHAPE(1, sb->dims[0], sb->dims[1]))};
    out = nd_tensor(op->out, MX_SHAPE(1, so->dims[0], so->dims[1]));
    const char *keys[] = {"transpose_a", "transpose_b"};
    const char *values[] = {op->transpose_a ? "True" : "False", op->transpose_b ? "True" : "False"};
    return run_device_op("batch_dot", keys, values, 2, in, &out, exec);
}

static mx_status nd_op_run(void *payload, const mx_exec_ctx *exec)
{
    nd_op *op = payload;
    if (exec->ctx.dev_type == MX_DEV_GPU && (op->kind == ND_BINARY || op->kind == ND_BINARY_SCALAR || op->kind == ND_DOT))
        return run_on_device(op, exec);
    switch (op->kind) {
    case ND_COPY: return run_copy(op, exec);
    case ND_FILL: return run_fill(op, exec);
    case ND_BINARY: return run_binary(op);
    case ND_BINARY_SCALAR: return run_binary_scalar(op);
    case ND_DOT: return run_dot(op, exec);
    }
    return MX_ERROR(MX_ERR_INVALID, "unknown ndarray op %d", (int)op->kind);
}

static const char *const nd_op_names[] = {
    [ND_COPY] = "copy", [ND_FILL] = "fill", [ND_BINARY] = "elemwise", [ND_BINARY_SCALAR] = "scalar",
    [ND_DOT] = "dot",
};

/* Takes references on the arrays and pushes the op on `ctx`. */
static mx_status nd_push(nd_op proto, mx_context ctx, mx_engine_lane lane)
{
    nd_op *op = mx_malloc(sizeof(*op));
    if (!op) return MX_ERR_NOMEM;
    *op = proto;
    mx_engine_var *reads[3];
    int n_reads = 0;
    mx_ndarray_retain(op->out);
    if (op->a) reads[n_reads++] = mx_ndarray_var(mx_ndarray_retain(op->a));
    if (op->b) reads[n_reads++] = mx_ndarray_var(mx_ndarray_retain(op->b));
    /* Writing part of a storage block keeps the rest: that is a read too,
     * so an error on the block is carried, not cleared. */
    if (!nd_covers_storage(op->out)) reads[n_reads++] = mx_ndarray_var(op->out);
    mx_engine_var *writes[1] = {mx_ndarray_var(op->out)};
    mx_engine_op desc = {.fn = nd_op_run, .payload = op, .payload_free = nd_op_free, .reads = reads,
                         .n_reads = n_reads, .writes = writes, .n_writes = 1, .ctx = ctx, .lane = lane,
                         .name = nd_op_names[op->kind],
                         .profile_bytes = op->kind == ND_COPY ? (int64_t)mx_ndarray_nbytes(op->out) : 0};
    return mx_engine_push(mx_runtime_engine(mx_ndarray_runtime(op->out)), &desc);
}

/* ---------------------------------------------------------------- checks */

static mx_status require_same_runtime(const char *what, mx_ndarray *x, mx_ndarray *y)
{
    if (mx_ndarray_runtime(x) != mx_ndarray_runtime(y))
        return MX_ERROR(MX_ERR_INVALID, "%s: arrays belong to different runtimes", what);
    return MX_OK;
}

/* Arithmetic reads and writes on one device (copy first otherwise). */
static mx_status require_same_context(const char *what, mx_ndarray *x, mx_ndarray *y)
{
    char cx[32], cy[32];
    if (!mx_context_equal(mx_ndarray_context(x), mx_ndarray_context(y)))
        return MX_ERROR(MX_ERR_INVALID, "%s: arrays on %s and %s (copy one over first)", what,
                        mx_context_str(mx_ndarray_context(x), cx, sizeof(cx)),
                        mx_context_str(mx_ndarray_context(y), cy, sizeof(cy)));
    return MX_OK;
}

static mx_status require_same_shape(const char *what, mx_ndarray *x, mx_ndarray *y)
{
    char bx[160], by[160];
    if (!mx_shape_equal(mx_ndarray_shape(x), mx_ndarray_shape(y)))
        return MX_ERROR(MX_ERR_INVALID, "%s: shapes %s and %s differ", what,
                        mx_shape_str(mx_ndarray_shape(x), bx, sizeof(bx)),
                        mx_shape_str(mx_ndarray_shape(y), by, sizeof(by)));
    return MX_OK;
}

/* Arithmetic runs on float32/float64 on the host, and on float32 on a GPU
 * (through the operators' kernels). */
static mx_status require_float(const char *what, mx_ndarray *x)
{
    char c[32];
    if (mx_ndarray_context(x).dev_type == MX_DEV_GPU && x->dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: dtype %s on %s is not supported (float32)", what,
                        mx_dtype_name(x->dtype), mx_context_str(mx_ndarray_context(x), c, sizeof(c)));
    if (x->dtype != MX_FLOAT32 && x->dtype != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: dtype %s is not supported (float32, float64)", what,
                        mx_dtype_name(x->dtype));
    return MX_OK;
}

static mx_status require_same_dtype(const char *what, mx_ndarray *x, mx_ndarray *y)
{
    if (x->dtype != y->dtype)
        return MX_ERROR(MX_ERR_INVALID, "%s: dtypes %s and %s differ", what, mx_dtype_name(x->dtype),
                        mx_dtype_name(y->dtype));
    return MX_OK;
}

/* ---------------------------------------------------------------- API */

mx_status mx_nd_copy(mx_ndarray *dst, mx_ndarray *src)
{
    MX_TRY(require_same_runtime("copy", dst, src));
    if (mx_ndarray_size(dst) != mx_ndarray_size(src)) MX_TRY(require_same_shape("copy", dst, src));
    mx_context dc = mx_ndarray_context(dst), sc = mx_ndarray_context(src);
    bool gpu = dc.dev_type == MX_DEV_GPU || sc.dev_type == MX_DEV_GPU;
    bool convert = dst->dtype != src->dtype;
    if (convert && mx_ndarray_var(dst) == mx_ndarray_var(src))
        return MX_ERROR(MX_ERR_INVALID, "copy: dtype conversion between views of one array");
    if (mx_ndarray_var(dst) == mx_ndarray_var(src) && dst->offset == src->offset) return MX_OK;
    mx_context ctx = dc.dev_type == MX_DEV_GPU ? dc : sc;
    /* A conversion on one GPU is a kernel, queued on the device's compute
     * stream like the operators'; other GPU copies run on the copy lane. */
    bool on_device = convert && gpu && mx_context_equal(dc, sc);
    return nd_push((nd_op){.kind = ND_COPY, .out = dst, .a = src}, ctx,
                   gpu && !on_device ? MX_LANE_COPY : MX_LANE_COMPUTE);
}

mx_status mx_nd_fill(mx_ndarray *dst, double value)
{
    return nd_push((nd_op){.kind = ND_FILL, .out = dst, .scalar = value}, mx_ndarray_context(dst),
                   MX_LANE_COMPUTE);
}

mx_status mx_nd_binary(mx_binary_op k, mx_ndarray *out, mx_ndarray *a, mx_ndarray *b)
{
    if ((unsigned)k > MX_OP_DIV) return MX_ERROR(MX_ERR_INVALID, "elemwise: unknown operator %d", (int)k);
    MX_TRY(require_same_runtime("elemwise", out, a));
    MX_TRY(require_same_runtime("elemwise", out, b));
    MX_TRY(require_same_shape("elemwise", a, b));
    MX_TRY(require_same_shape("elemwise", out, a));
    MX_TRY(require_same_dtype("elemwise", a, b));
    MX_TRY(require_same_dtype("elemwise", out, a));
    MX_TRY(require_float("elemwise", out));
    MX_TRY(require_float("elemwise", a));
    MX_TRY(require_float("elemwise", b));
    MX_TRY(require_same_context("elemwise", out, a));
    MX_TRY(require_same_context("elemwise", out, b));
    return nd_push((nd_op){.kind = ND_BINARY, .binary = k, .out = out, .a = a, .b = b},
                   mx_ndarray_context(out), MX_LANE_COMPUTE);
}

mx_status mx_nd_binary_scalar(mx_binary_op k, mx_ndarray *out, mx_ndarray *a, double s, bool scalar_first)
{
    if ((unsigned)k > MX_OP_DIV) return MX_ERROR(MX_ERR_INVALID, "scalar: unknown operator %d", (int)k);
    MX_TRY(require_same_runtime("scalar", out, a));
    MX_TRY(require_same_shape("scalar", out, a));
    MX_TRY(require_same_dtype("scalar", out, a));
    MX_TRY(require_float("scalar", out));
    MX_TRY(require_float("scalar", a));
    MX_TRY(require_same_context("scalar", out, a));
    return nd_push((nd_op){.kind = ND_BINARY_SCALAR, .binary = k, .out = out, .a = a, .scalar = s,
                           .scalar_first = scalar_first},
                   mx_ndarray_context(out), MX_LANE_COMPUTE);
}

mx_status mx_nd_dot(mx_ndarray *out, mx_ndarray *a, mx_ndarray *b, bool transpose_a, bool transpose_b)
{
    MX_TRY(require_same_runtime("dot", out, a));
    MX_TRY(require_same_runtime("dot", out, b));
    MX_TRY(require_same_dtype("dot", a, b));
    MX_TRY(require_same_dtype("dot", out, a));
    MX_TRY(require_float("dot", out));
    MX_TRY(require_same_context("dot", out, a));
    MX_TRY(require_same_context("dot", out, b));
    const mx_shape *sa = mx_ndarray_shape(a), *sb = mx_ndarray_shape(b), *so = mx_ndarray_shape(out);
    char ba[160], bb[160], bo[160];
    if (sa->ndim != 2 || sb->ndim != 2 || so->ndim != 2)
        return MX_ERROR(MX_ERR_INVALID, "dot: needs 2-D arrays, got %s x %s -> %s", mx_shape_str(sa, ba, sizeof(ba)),
                        mx_shape_str(sb, bb, sizeof(bb)), mx_shape_str(so, bo, sizeof(bo)));
    int64_t m = transpose_a ? sa->dims[1] : sa->dims[0], k = transpose_a ? sa->dims[0] : sa->dims[1];
    int64_t k2 = transpose_b ? sb->dims[1] : sb->dims[0], n = transpose_b ? sb->dims[0] : sb->dims[1];
    if (k != k2 || so->dims[0] != m || so->dims[1] != n)
        return MX_ERROR(MX_ERR_INVALID, "dot: shapes %s%s x %s%s -> %s do not match",
                        mx_shape_str(sa, ba, sizeof(ba)), transpose_a ? "^T" : "", mx_shape_str(sb, bb, sizeof(bb)),
                        transpose_b ? "^T" : "", mx_shape_str(so, bo, sizeof(bo)));
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "dot: dimensions beyond 2^31 are not supported by BLAS");
    if (mx_ndarray_var(out) == mx_ndarray_var(a) || mx_ndarray_var(out) == mx_ndarray_var(b))
        return MX_ERROR(MX_ERR_INVALID, "dot: the output must not share memory with an input");
    return nd_push((nd_op){.kind = ND_DOT, .out = out, .a = a, .b = b, .transpose_a = transpose_a,
                           .transpose_b = transpose_b},
                   mx_ndarray_context(out), MX_LANE_COMPUTE);
}
