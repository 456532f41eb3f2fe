/*
 * batch_dot.cu - batch_dot's CUDA kernels: the CPU's products of
 * batch_dot.c, each a cublasSgemmStridedBatched over the batch. cuBLAS is
 * column-major: row-major C = op(A) op(B) is computed as column-major
 * C^T = op(B)^T op(A)^T, i.e. the operands swapped and m, n exchanged.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/batch_dot.h"
}

#include <limits.h>

/* One row-major strided-batched product: C_i (m x n, dense, stride m*n) =
 * op(A_i) (m x k) op(B_i) (k x n) (+ C_i when adding); lda and ldb are the
 * row strides as stored, sa and sb the batch strides. */
static mx_status bd_gemm(const mx_op_ctx *ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, int64_t sa, const float *b, int64_t ldb, int64_t sb, float *c, int64_t batch,
                         mx_req req)
{
    if (req == MX_REQ_NULL || batch == 0 || m == 0 || n == 0) return MX_OK;
    if (k == 0) { /* an empty sum: zeros, or nothing to add */
        if (req != MX_REQ_ADD)
            MX_CUDA_TRY(cudaMemsetAsync(c, 0, (size_t)(batch * m * n) * sizeof(float), mx_cuda_op_stream(ctx)));
        return MX_OK;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX || lda > INT_MAX || ldb > INT_MAX)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "batch_dot: dimensions (batch %lld, %lld x %lld x %lld) exceed cuBLAS's "
                                            "int range",
                        (long long)batch, (long long)m, (long long)n, (long long)k);
    cublasHandle_t blas;
    MX_TRY(mx_cuda_worker_cublas(mx_cuda_op_worker(ctx), &blas));
    const float alpha = 1.0f, beta = mx_cuda_beta(req);
    MX_CUBLAS_TRY(cublasSgemmStridedBatched(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            (int)n, (int)m, (int)k, &alpha, b, (int)ldb, (long long)sb, a, (int)lda,
                                            (long long)sa, &beta, c, (int)n, (long long)(m * n), (int)batch));
    return MX_OK;
}

/* batch, M, N, K of lhs and rhs; infer_shape has checked them. */
static void bd_gpu_dims(const batch_dot_params *bp, const mx_shape *a, const mx_shape *b, int64_t *batch,
                        int64_t *m, int64_t *n, int64_t *k)
{
    const int na = a->ndim;
    *m = bp->transpose_a ? a->dims[na - 1] : a->dims[na - 2];
    *k = bp->transpose_a ? a->dims[na - 2] : a->dims[na - 1];
    *n = bp->transpose_b ? b->dims[na - 2] : b->dims[na - 1];
    *batch = 1;
    for (int i = 0; i < na - 2; i++) *batch *= a->dims[i];
}

static mx_status bd_gpu_dtype(const mx_tensor *in)
{
    if (in[0].dtype != MX_FLOAT32 || in[1].dtype != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "batch_dot: %s data is not supported (float32 only)",
                        mx_dtype_name(in[0].dtype != MX_FLOAT32 ? in[0].dtype : in[1].dtype));
    return MX_OK;
}

static mx_status bd_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const batch_dot_params *bp = (const batch_dot_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    MX_TRY(bd_gpu_dtype(in));
    int64_t batch, M, N, K;
    bd_gpu_dims(bp, &in[0].shape, &in[1].shape, &batch, &M, &N, &K);
    const bool ta = bp->transpose_a, tb = bp->transpose_b;
    return bd_gemm(ctx, ta, tb, M, N, K, (const float *)in[0].data, ta ? M : K, M * K, (const float *)in[1].data,
                   tb ? K : N, K * N, (float *)out[0].data, batch, req[0]);
}

static mx_status bd_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    const batch_dot_params *bp = (const batch_dot_params *)p;
    MX_TRY(bd_gpu_dtype(in));
    int64_t batch, M, N, K;
    bd_gpu_dims(bp, &in[0].shape, &in[1].shape, &batch, &M, &N, &K);
    const bool ta = bp->transpose_a, tb = bp->transpose_b;
    const float *A = (const float *)in[0].data, *B = (const float *)in[1].data;
    const float *dC = (const float *)out_grad[0].data;
    const int64_t sA = M * K, sB = K * N, sC = M * N;
    if (req[0] != MX_REQ_NULL) { /* dA, (M, K) or (K, M) as stored */
        float *dA = (float *)in_grad[0].data;
        if (!ta && !tb) MX_TRY(bd_gemm(ctx, false, true, M, K, N, dC, N, sC, B, N, sB, dA, batch, req[0]));
        else if (!ta) MX_TRY(bd_gemm(ctx, false, false, M, K, N, dC, N, sC, B, K, sB, dA, batch, req[0]));
        else if (!tb) MX_TRY(bd_gemm(ctx, false, true, K, M, N, B, N, sB, dC, N, sC, dA, batch, req[0]));
        else MX_TRY(bd_gemm(ctx, true, true, K, M, N, B, K, sB, dC, N, sC, dA, batch, req[0]));
    }
    if (req[1] != MX_REQ_NULL) { /* dB, (K, N) or (N, K) as stored */
        float *dB = (float *)in_grad[1].data;
        if (!ta && !tb) MX_TRY(bd_gemm(ctx, true, false, K, N, M, A, K, sA, dC, N, sC, dB, batch, req[1]));
        else if (!ta) MX_TRY(bd_gemm(ctx, true, false, N, K, M, dC, N, sC, A, K, sA, dB, batch, req[1]));
        else if (!tb) MX_TRY(bd_gemm(ctx, false, false, K, N, M, A, M, sA, dC, N, sC, dB, batch, req[1]));
        else MX_TRY(bd_gemm(ctx, true, true, N, K, M, dC, N, sC, A, M, sA, dB, batch, req[1]));
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_batch_dot = {bd_gpu_forward, bd_gpu_backward, NULL, 0};
