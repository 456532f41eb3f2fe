/*
 * concat.cu - Concat on the GPU: one thread per element of the joined
 * tensor. Element `at` of the output lies in outer row o = at / row, at
 * offset c = at % row within it; the input owning c is found by walking
 * the slab widths (at most MX_OP_MAX_IO). Forward copies that input's
 * element into the output, backward copies the gradient element back into
 * that input's gradient, each per its own request. Any dtype is copied
 * (by element size); accumulation (req add) is float32 and float64, as on
 * the CPU, and float16 / bfloat16 (mixed precision): the sum in float,
 * rounded once to the tensor's type (half.cuh), as the CPU's half nodes do
 * on their float32 copies. Accumulating other dtypes is refused naming the
 * dtype.
 */
#include "ops/cuda/cuda_op.h"
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/concat.h"
}

#include <stdint.h>
#include <string.h>

typedef struct concat_gpu_args {
    int n;
    int64_t row;                      /* elements of one outer row of the output */
    int64_t slab[MX_OP_MAX_IO];       /* per input: elements of one outer row */
    void *ptr[MX_OP_MAX_IO];          /* inputs (forward) or their gradients (backward) */
    mx_req req[MX_OP_MAX_IO];         /* backward: per input gradient */
} concat_gpu_args;

/* *dst += v: in T's own arithmetic (float, double; integer types are
 * never added: concat_launch refuses), or for the half types in float,
 * rounded once. */
template <typename T> __device__ __forceinline__ void concat_add(T *dst, T v) { *dst += v; }
__device__ __forceinline__ void concat_add(__half *dst, __half v) { mx_store(dst, mx_load(dst) + mx_load(&v)); }
__device__ __forceinline__ void concat_add(__nv_bfloat16 *dst, __nv_bfloat16 v)
{
    mx_store(dst, mx_load(dst) + mx_load(&v));
}

/* BACKWARD false: big[at] = small_i[...] per req0; true: small_i[...] =
 * big[at] per a.req[i]. */
template <typename T, bool BACKWARD>
__global__ void concat_k(int64_t total, concat_gpu_args a, T *big, mx_req req0)
{
    MX_CUDA_FOR(at, total)
    {
        int64_t o = at / a.row, c = at % a.row;
        int i = 0;
        while (i < a.n - 1 && c >= a.slab[i]) c -= a.slab[i++];
        mx_req req = BACKWARD ? a.req[i] : req0;
        if (req == MX_REQ_NULL) continue;
        T *small = (T *)a.ptr[i] + o * a.slab[i] + c;
        T *dst, v;
        if constexpr (BACKWARD) {
            dst = small;
            v = big[at];
        } else {
            dst = &big[at];
            v = *small;
        }
        if (req == MX_REQ_ADD) concat_add(dst, v);
        else *dst = v;
    }
}

template <bool BACKWARD>
static mx_status concat_launch(const mx_op_ctx *ctx, const concat_gpu_args *a, void *big, int64_t total,
                               mx_dtype dtype, mx_req req0, bool any_add)
{
    if (total <= 0) return MX_OK;
    cudaStream_t st = mx_cuda_op_stream(ctx);
    unsigned blocks = mx_cuda_blocks(total);
    if (dtype == MX_FLOAT32) {
        concat_k<float, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (float *)big, req0);
    } else if (dtype == MX_FLOAT64) {
        concat_k<double, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (double *)big, req0);
    } else if (dtype == MX_FLOAT16 && any_add) {
        concat_k<__half, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (__half *)big, req0);
    } else if (dtype == MX_BFLOAT16 && any_add) {
        concat_k<__nv_bfloat16, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (__nv_bfloat16 *)big, req0);
    } else if (any_add) {
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Concat: accumulating (req add) into %s is not supported",
                        mx_dtype_name(dtype));
    } else {
        /* Plain copies: any element type of the same size will do. */
        switch (mx_dtype_size(dtype)) {
        case 1: concat_k<uint8_t, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (uint8_t *)big, req0); break;
        case 2: concat_k<uint16_t, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (uint16_t *)big, req0); break;
        case 4: concat_k<uint32_t, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (uint32_t *)big, req0); break;
        case 8: concat_k<uint64_t, BACKWARD><<<blocks, MX_CUDA_THREADS, 0, st>>>(total, *a, (uint64_t *)big, req0); break;
        default:
            return MX_ERROR(MX_ERR_UNSUPPORTED, "Concat: dtype %s is not supported on GPU", mx_dtype_name(dtype));
        }
    }
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* Fills row, slab from the shapes of t[0..n) (as concat_geometry in the
 * .c); returns the outer row count. */
static int64_t concat_gpu_geometry(const concat_params *cp, const mx_tensor *t, int n, concat_gpu_args *a)
{
    int nd = t[0].shape.ndim;
    int axis = (int)(cp->dim < 0 ? cp->dim + nd : cp->dim);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= t[0].shape.dims[k];
    for (int k = axis + 1; k < nd; k++) inner *= t[0].shape.dims[k];
    a->n = n;
    a->row = 0;
    for (int i = 0; i < n; i++) {
        a->slab[i] = t[i].shape.dims[axis] * inner;
        a->row += a->slab[i];
    }
    return outer;
}

static mx_status concat_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                    mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const concat_params *cp = (const concat_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int n = (int)cp->num_args;
    concat_gpu_args a;
    memset(&a, 0, sizeof(a));
    int64_t outer = concat_gpu_geometry(cp, in, n, &a);
    for (int i = 0; i < n; i++) a.ptr[i] = in[i].data;
    if (a.row == 0) return MX_OK;
    return concat_launch<false>(ctx, &a, out[0].data, outer * a.row, out[0].dtype, req[0], req[0] == MX_REQ_ADD);
}

static mx_status concat_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                     const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                     mx_tensor *aux)
{
    (void)in, (void)out, (void)aux;
    const concat_params *cp = (const concat_params *)p;
    int n = (int)cp->num_args;
    concat_gpu_args a;
    memset(&a, 0, sizeof(a));
    /* Shapes from in_grad: data inputs are not backward dependencies. */
    int64_t outer = concat_gpu_geometry(cp, in_grad, n, &a);
    bool any = false, any_add = false;
    for (int i = 0; i < n; i++) {
        a.req[i] = req[i];
        a.ptr[i] = req[i] == MX_REQ_NULL ? NULL : in_grad[i].data;
        any |= req[i] != MX_REQ_NULL;
        any_add |= req[i] == MX_REQ_ADD;
    }
    if (!any || a.row == 0) return MX_OK;
    return concat_launch<true>(ctx, &a, out_grad[0].data, outer * a.row, out_grad[0].dtype, MX_REQ_NULL, any_add);
}

extern "C" const mx_op_kernels mx_op_gpu_concat = {concat_gpu_forward, concat_gpu_backward, NULL, MX_HALF_DTYPES};
