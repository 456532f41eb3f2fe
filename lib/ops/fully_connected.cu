/*
 * fully_connected.cu - FullyConnected on the GPU with cuBLAS SGEMM, as
 * fully_connected.c does on the CPU. Tensors are row-major; cuBLAS is
 * column-major, where a row-major (r, c) matrix reads as its transpose
 * (c, r) with leading dimension c. So, with X (rows, k), W (h, k),
 * Y (rows, h):
 *   Y  = X W^T   is  Y^T (h, rows)  = op_T(W^T (k, h)) X^T (k, rows)
 *   dX = dY W    is  dX^T (k, rows) = W^T (k, h) dY^T (h, rows)
 *   dW = dY^T X  is  dW^T (k, h)    = X^T (k, rows) op_T(dY^T (h, rows))
 * The bias goes in first (written, or added for req add) and SGEMM
 * accumulates onto it (beta 1), as on the CPU; db is the column sums of
 * dY, summed over rows in order by one thread per column.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/fully_connected.h"
}

#include <limits.h>

/* y[r, j] = b[j] (or y[r, j] + b[j] for req add). */
__global__ void fc_bias_fill_k(int64_t n, int64_t h, const float *b, float *y, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_cuda_assign(req, &y[i], b[i % h]);
}

/* db[j] = (db[j] for req add, else 0) + sum over r of dy[r, j]. */
__global__ void fc_bias_grad_k(int64_t rows, int64_t h, const float *dy, float *db, mx_req req)
{
    MX_CUDA_FOR(j, h)
    {
        float acc = req == MX_REQ_ADD ? db[j] : 0.0f;
        for (int64_t r = 0; r < rows; r++) acc += dy[r * h + j];
        db[j] = acc;
    }
}

static mx_status fc_gpu_dims(const fc_params *fc, const mx_shape *data, int64_t *rows, int64_t *k)
{
    fc_rows_cols(fc, data, rows, k);
    if (*rows > INT_MAX || *k > INT_MAX || fc->num_hidden > INT_MAX)
        return MX_ERROR(MX_ERR_UNSUPPORTED,
                        "FullyConnected: on GPU, rows (%lld), input size (%lld) and num_hidden (%lld) must each fit "
                        "in an int for cuBLAS",
                        (long long)*rows, (long long)*k, (long long)fc->num_hidden);
    return MX_OK;
}

static mx_status fc_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const fc_params *fc = (const fc_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t rows, k;
    MX_TRY(fc_gpu_dims(fc, &in[0].shape, &rows, &k));
    int64_t h = fc->num_hidden;
    if (rows == 0 || h == 0) return MX_OK;
    float *y = (float *)out[0].data;
    float beta = mx_cuda_beta(req[0]);
    if (!fc->no_bias) {
        int64_t n = rows * h;
        fc_bias_fill_k<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            n, h, (const float *)in[2].data, y, req[0]);
        MX_CUDA_LAUNCHED();
        beta = 1.0f;
    }
    if (k == 0) {
        if (beta == 0.0f) MX_CUDA_TRY(cudaMemsetAsync(y, 0, (size_t)(rows * h) * sizeof(float), mx_cuda_op_stream(ctx)));
        return MX_OK;
    }
    cublasHandle_t blas;
    MX_TRY(mx_cuda_worker_cublas(mx_cuda_op_worker(ctx), &blas));
    const float alpha = 1.0f;
    MX_CUBLAS_TRY(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)h, (int)rows, (int)k, &alpha,
                              (const float *)in[1].data, (int)k, (const float *)in[0].data, (int)k, &beta, y, (int)h));
    return MX_OK;
}

static mx_status fc_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    const fc_params *fc = (const fc_params *)p;
    int64_t rows, k;
    MX_TRY(fc_gpu_dims(fc, &in[0].shape, &rows, &k));
    int64_t h = fc->num_hidden;
    const float *dy = (const float *)out_grad[0].data;
    const float alpha = 1.0f;
    bool gemm = (req[0] != MX_REQ_NULL || req[1] != MX_REQ_NULL) && rows > 0 && k > 0 && h > 0;
    cublasHandle_t blas = NULL;
    if (gemm) MX_TRY(mx_cuda_worker_cublas(mx_cuda_op_worker(ctx), &blas));
    if (gemm && req[0] != MX_REQ_NULL) { /* dX (rows, k) = dY (rows, h) * W (h, k) */
        float beta = mx_cuda_beta(req[0]);
        MX_CUBLAS_TRY(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)k, (int)rows, (int)h, &alpha,
                                  (const float *)in[1].data, (int)k, dy, (int)h, &beta, (float *)in_grad[0].data,
                                  (int)k));
    }
    if (gemm && req[1] != MX_REQ_NULL) { /* dW (h, k) = dY^T (h, rows) * X (rows, k) */
        float beta = mx_cuda_beta(req[1]);
        MX_CUBLAS_TRY(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)k, (int)h, (int)rows, &alpha,
                                  (const float *)in[0].data, (int)k, dy, (int)h, &beta, (float *)in_grad[1].data,
                                  (int)k));
    }
    if (!fc->no_bias && req[2] != MX_REQ_NULL && h > 0) { /* db = column sums of dY */
        fc_bias_grad_k<<<mx_cuda_blocks(h), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            rows, h, dy, (float *)in_grad[2].data, req[2]);
        MX_CUDA_LAUNCHED();
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_fully_connected = {fc_gpu_forward, fc_gpu_backward, NULL, 0};
