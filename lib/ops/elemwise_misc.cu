/*
 * elemwise_misc.cu - elemwise_misc.c's utilities on the GPU: BlockGrad,
 * _copy, amp_cast (every dtype pair, as on the CPU), zeros_like,
 * ones_like, _identity_with_attr_like_rhs and where (condition of x's
 * shape, or 1-D picking whole rows). Copies go through copy_req.cuh (a
 * write in place is a no-op); fills and where are one thread per element,
 * each element read before it is written (the in-place options hold).
 * BlockGrad, _copy, zeros_like, ones_like and _identity_with_attr_like_rhs
 * take float32, float16 and bfloat16 (copies by element size; fills and
 * req add in float, rounded once to the tensor's type: half.cuh, as the
 * CPU's half nodes); amp_cast every dtype pair; where float32 only.
 */
#include "ndarray/dtype_convert.h" /* first: C linkage for the C headers it includes */
#include "ops/cast.h"
#include "ops/cuda/copy_req.cuh"
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

template <typename T> __global__ void emg_fill_k(int64_t n, T *dst, float v, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_assign(req, &dst[i], v);
}

/* elemwise_misc.c's put_fill: write v, or add it (nothing to add for 0),
 * into a tensor t of float32, float16 or bfloat16. */
static mx_status emg_fill_as(const mx_op_ctx *ctx, const char *op, const mx_tensor *t, float v, int64_t n,
                             mx_req req)
{
    if (req == MX_REQ_NULL || n <= 0) return MX_OK;
    if (req == MX_REQ_ADD && v == 0.0f) return MX_OK;
    MX_DISPATCH_FLOAT_TYPES(t->dtype, op, {
        emg_fill_k<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(n, (T *)t->data, v, req);
        MX_CUDA_LAUNCHED();
    });
    return MX_OK;
}

/* where's float32 fill. */
static mx_status emg_fill(const mx_op_ctx *ctx, float *dst, float v, int64_t n, mx_req req)
{
    if (req == MX_REQ_NULL || n <= 0) return MX_OK;
    if (req == MX_REQ_ADD && v == 0.0f) return MX_OK;
    emg_fill_k<float><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(n, dst, v, req);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* dst = src (or +=) between tensors of one dtype (float32, float16 or
 * bfloat16: what the kernels declare). */
static mx_status emg_copy(const mx_op_ctx *ctx, const char *op, const mx_tensor *dst, const mx_tensor *src, int64_t n,
                          mx_req req)
{
    if (req == MX_REQ_NULL) return MX_OK;
    if (dst->dtype != src->dtype)
        return MX_ERROR(MX_ERR_INVALID, "%s: input is %s but output is %s", op, mx_dtype_name(src->dtype),
                        mx_dtype_name(dst->dtype));
    return mx_cuda_copy_req(ctx, op, dst->data, src->data, n, dst->dtype, req);
}

/* ------------------------------------------------------- copies and fills */

enum { EMG_PASS, EMG_BLOCK, EMG_ZERO, EMG_ONE };

#define EMG_COPY(id, opname, KIND)                                                                                 \
    static mx_status emg_##id##_fwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,  \
                                    mx_tensor *out, mx_tensor *aux)                                                \
    {                                                                                                              \
        (void)p, (void)aux;                                                                                        \
        int64_t n = mx_shape_size(&out[0].shape);                                                                  \
        if (KIND == EMG_ZERO || KIND == EMG_ONE)                                                                   \
            return emg_fill_as(ctx, opname, &out[0], KIND == EMG_ONE ? 1.0f : 0.0f, n, req[0]);                    \
        return emg_copy(ctx, opname, &out[0], &in[0], n, req[0]);                                                  \
    }                                                                                                              \
    static mx_status emg_##id##_bwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,                \
                                    const mx_tensor *in, const mx_tensor *out, const mx_req *req,                  \
                                    mx_tensor *in_grad, mx_tensor *aux)                                            \
    {                                                                                                              \
        (void)p, (void)in, (void)out, (void)aux;                                                                   \
        int64_t n = mx_shape_size(&in_grad[0].shape);                                                              \
        if (KIND == EMG_PASS) return emg_copy(ctx, opname, &in_grad[0], &out_grad[0], n, req[0]);                  \
        return emg_fill_as(ctx, opname, &in_grad[0], 0.0f, n, req[0]);                                            \
    }                                                                                                              \
    extern "C" const mx_op_kernels mx_op_gpu_##id = {emg_##id##_fwd, emg_##id##_bwd, NULL, MX_HALF_DTYPES};

EMG_COPY(block_grad, "BlockGrad", EMG_BLOCK)
EMG_COPY(copy, "_copy", EMG_PASS)
EMG_COPY(zeros_like, "zeros_like", EMG_ZERO)
EMG_COPY(ones_like, "ones_like", EMG_ONE)

/* ------------------------------------------------------- amp_cast */

/* elemwise_misc.c's amp_cast: the output of mx_amp_cast_out_dtype's type,
 * converted on the op's stream (dtype_convert.cu: the CPU's bits). */
static mx_status emg_amp_cast_fwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                  mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    mx_dtype want = mx_amp_cast_out_dtype((const amp_cast_params *)p, in[0].dtype);
    if (out[0].dtype != want)
        return MX_ERROR(MX_ERR_INVALID, "amp_cast: output tensor is %s, expected %s for %s data",
                        mx_dtype_name(out[0].dtype), mx_dtype_name(want), mx_dtype_name(in[0].dtype));
    return mx_dtype_convert_gpu("amp_cast", out[0].data, out[0].dtype, in[0].data, in[0].dtype,
                                mx_shape_size(&in[0].shape), req[0] == MX_REQ_ADD, ctx->exec->stream);
}

static mx_status emg_amp_cast_bwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                                  const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)in, (void)out, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    return mx_dtype_convert_gpu("amp_cast", in_grad[0].data, in_grad[0].dtype, out_grad[0].data, out_grad[0].dtype,
                                mx_shape_size(&in_grad[0].shape), req[0] == MX_REQ_ADD, ctx->exec->stream);
}

extern "C" const mx_op_kernels mx_op_gpu_amp_cast = {emg_amp_cast_fwd, emg_amp_cast_bwd, NULL, MX_CAST_ALL_DTYPES};

/* ------------------------------------------------------- _identity_with_attr_like_rhs */

static mx_status emg_iwalr_fwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    return emg_copy(ctx, "_identity_with_attr_like_rhs", &out[0], &in[0], mx_shape_size(&out[0].shape), req[0]);
}

static mx_status emg_iwalr_bwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)in, (void)out, (void)aux;
    int64_t n = mx_shape_size(&out_grad[0].shape);
    MX_TRY(emg_copy(ctx, "_identity_with_attr_like_rhs", &in_grad[0], &out_grad[0], n, req[0]));
    return emg_fill_as(ctx, "_identity_with_attr_like_rhs", &in_grad[1], 0.0f, n, req[1]);
}

extern "C" const mx_op_kernels mx_op_gpu_identity_with_attr_like_rhs = {emg_iwalr_fwd, emg_iwalr_bwd, NULL,
                                                                        MX_HALF_DTYPES};

/* ------------------------------------------------------- where */

/* Elements per condition value: 1, or a whole row for a 1-D condition. */
static int64_t emg_where_block(const mx_tensor *cond, const mx_shape *xs)
{
    int64_t n = mx_shape_size(xs), c = mx_shape_size(&cond->shape);
    return c == n ? 1 : n / (c ? c : 1);
}

__global__ void emg_where_fwd_k(int64_t n, int64_t blk, const float *c, const float *x, const float *y, float *o,
                                mx_req req)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &o[i], c[i / blk] != 0.0f ? x[i] : y[i]);
}

/* dx / dy may be NULL (not wanted); either may be out_grad's buffer. */
__global__ void emg_where_bwd_k(int64_t n, int64_t blk, const float *c, const float *g, float *dx, float *dy,
                                bool ax, bool ay)
{
    MX_CUDA_FOR(i, n)
    {
        float v = g[i];
        bool take_x = c[i / blk] != 0.0f;
        if (dx) dx[i] = (ax ? dx[i] : 0.0f) + (take_x ? v : 0.0f);
        if (dy) dy[i] = (ay ? dy[i] : 0.0f) + (take_x ? 0.0f : v);
    }
}

static mx_status emg_where_fwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                               mx_tensor *out, mx_tensor *aux)
{
    (void)p, (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t n = mx_shape_size(&in[1].shape), blk = emg_where_block(&in[0], &in[1].shape);
    if (n <= 0) return MX_OK;
    emg_where_fwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        n, blk, (const float *)in[0].data, (const float *)in[1].data, (const float *)in[2].data,
        (float *)out[0].data, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status emg_where_bwd(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                               const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    (void)p, (void)out, (void)aux;
    float *dx = req[1] == MX_REQ_NULL ? NULL : (float *)in_grad[1].data;
    float *dy = req[2] == MX_REQ_NULL ? NULL : (float *)in_grad[2].data;
    int64_t n = mx_shape_size(&out_grad[0].shape), blk = emg_where_block(&in[0], &out_grad[0].shape);
    if ((dx || dy) && n > 0) {
        emg_where_bwd_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, blk, (const float *)in[0].data, (const float *)out_grad[0].data, dx, dy, req[1] == MX_REQ_ADD,
            req[2] == MX_REQ_ADD);
        MX_CUDA_LAUNCHED();
    }
    return emg_fill(ctx, (float *)in_grad[0].data, 0.0f, mx_shape_size(&in[0].shape), req[0]);
}

extern "C" const mx_op_kernels mx_op_gpu_where = {emg_where_fwd, emg_where_bwd, NULL, 0};
