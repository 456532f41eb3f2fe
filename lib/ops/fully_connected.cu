/*
 * fully_connected.cu - FullyConnected on the GPU with cuBLAS, as
 * fully_connected.c does on the CPU. Tensors are row-major; cuBLAS is
 * column-major, where a row-major (r, c) matrix reads as its transpose
 * (c, r) with leading dimension c. So, with X (rows, k), W (h, k),
 * Y (rows, h):
 *   Y  = X W^T   is  Y^T (h, rows)  = op_T(W^T (k, h)) X^T (k, rows)
 *   dX = dY W    is  dX^T (k, rows) = W^T (k, h) dY^T (h, rows)
 *   dW = dY^T X  is  dW^T (k, h)    = X^T (k, rows) op_T(dY^T (h, rows))
 * The bias goes in first (written, or added for req add) and the GEMM
 * accumulates onto it (beta 1), as on the CPU; db is the column sums of
 * dY, summed over rows in order by one thread per column.
 *
 * float32 tensors run cublasSgemm under the worker's handle settings
 * (CUBLAS_PEDANTIC_MATH: no TF32), as before. float16 / bfloat16 tensors
 * (mixed precision: data, weight, bias, output and every gradient share
 * the type) run cublasGemmEx with CUDA_R_16F / CUDA_R_16BF matrices,
 * CUBLAS_COMPUTE_32F, float alpha / beta and CUBLAS_GEMM_DEFAULT, under
 * CUBLAS_DEFAULT_MATH for the call (tensor cores with float accumulation;
 * the handle's mode is restored after it): products summed in float and
 * rounded once to the output type, as the CPU's half nodes (float kernels
 * between half tensors). The bias fill and the bias gradient compute in
 * float and round at the store (half.cuh). Differences from the CPU: a
 * forward with req add and a bias rounds twice (bias added into the output,
 * then the GEMM onto it); the CPU rounds once.
 */
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/fully_connected.h"
}

#include <limits.h>

/* y[r, j] = b[j] (or y[r, j] + b[j] for req add). */
template <typename T> __global__ void fc_bias_fill_k(int64_t n, int64_t h, const T *b, T *y, mx_req req)
{
    MX_CUDA_FOR(i, n) mx_assign(req, &y[i], mx_load(&b[i % h]));
}

/* db[j] = (db[j] for req add, else 0) + sum over r of dy[r, j], in float. */
template <typename T> __global__ void fc_bias_grad_k(int64_t rows, int64_t h, const T *dy, T *db, mx_req req)
{
    MX_CUDA_FOR(j, h)
    {
        float acc = req == MX_REQ_ADD ? mx_load(&db[j]) : 0.0f;
        for (int64_t r = 0; r < rows; r++) acc += mx_load(&dy[r * h + j]);
        mx_store(&db[j], acc);
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

/* Whether the tensors are a type these kernels compute in (float32,
 * float16, bfloat16), else MX_ERR_UNSUPPORTED naming it. */
static mx_status fc_gpu_dtype(mx_dtype d)
{
    if (d == MX_FLOAT32 || d == MX_FLOAT16 || d == MX_BFLOAT16) return MX_OK;
    return MX_ERROR(MX_ERR_UNSUPPORTED, "FullyConnected: %s tensors are not supported on the GPU", mx_dtype_name(d));
}

/* C (m, n) = alpha op(A) op(B) + beta C, column-major, all three of dtype
 * d: cublasSgemm for float32 (unchanged), cublasGemmEx with float compute
 * for float16 / bfloat16 under the default math mode (tensor cores), the
 * handle's mode restored whatever the call returned. */
static mx_status fc_gemm(cublasHandle_t blas, mx_dtype d, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, float alpha, const void *a, int lda, const void *b, int ldb, float beta, void *c,
                         int ldc)
{
    if (d == MX_FLOAT32) {
        MX_CUBLAS_TRY(cublasSgemm(blas, ta, tb, m, n, k, &alpha, (const float *)a, lda, (const float *)b, ldb, &beta,
                                  (float *)c, ldc));
        return MX_OK;
    }
    const cudaDataType_t t = mx_cuda_type(d);
    cublasMath_t mode;
    MX_CUBLAS_TRY(cublasGetMathMode(blas, &mode));
    MX_CUBLAS_TRY(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
    const cublasStatus_t st = cublasGemmEx(blas, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta, c, t, ldc,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    MX_CUBLAS_TRY(cublasSetMathMode(blas, mode));
    if (st != CUBLAS_STATUS_SUCCESS)
        return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "cublasGemmEx (%s, CUBLAS_COMPUTE_32F) failed: %s",
                            mx_dtype_name(d), cublasGetStatusString(st));
    return MX_OK;
}

static mx_status fc_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const fc_params *fc = (const fc_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const mx_dtype dt = out[0].dtype;
    MX_TRY(fc_gpu_dtype(dt));
    int64_t rows, k;
    MX_TRY(fc_gpu_dims(fc, &in[0].shape, &rows, &k));
    int64_t h = fc->num_hidden;
    if (rows == 0 || h == 0) return MX_OK;
    void *y = out[0].data;
    float beta = mx_cuda_beta(req[0]);
    if (!fc->no_bias) {
        int64_t n = rows * h;
        MX_DISPATCH_FLOAT_TYPES(dt, "FullyConnected", {
            fc_bias_fill_k<T><<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                n, h, (const T *)in[2].data, (T *)y, req[0]);
        });
        MX_CUDA_LAUNCHED();
        beta = 1.0f;
    }
    if (k == 0) {
        if (beta == 0.0f)
            MX_CUDA_TRY(cudaMemsetAsync(y, 0, (size_t)(rows * h) * mx_dtype_size(dt), mx_cuda_op_stream(ctx)));
        return MX_OK;
    }
    cublasHandle_t blas;
    MX_TRY(mx_cuda_worker_cublas(mx_cuda_op_worker(ctx), &blas));
    return fc_gemm(blas, dt, CUBLAS_OP_T, CUBLAS_OP_N, (int)h, (int)rows, (int)k, 1.0f, in[1].data, (int)k,
                   in[0].data, (int)k, beta, y, (int)h);
}

static mx_status fc_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)out, (void)aux;
    const fc_params *fc = (const fc_params *)p;
    const mx_dtype dt = out_grad[0].dtype;
    MX_TRY(fc_gpu_dtype(dt));
    int64_t rows, k;
    MX_TRY(fc_gpu_dims(fc, &in[0].shape, &rows, &k));
    int64_t h = fc->num_hidden;
    const void *dy = out_grad[0].data;
    bool gemm = (req[0] != MX_REQ_NULL || req[1] != MX_REQ_NULL) && rows > 0 && k > 0 && h > 0;
    cublasHandle_t blas = NULL;
    if (gemm) MX_TRY(mx_cuda_worker_cublas(mx_cuda_op_worker(ctx), &blas));
    if (gemm && req[0] != MX_REQ_NULL) /* dX (rows, k) = dY (rows, h) * W (h, k) */
        MX_TRY(fc_gemm(blas, dt, CUBLAS_OP_N, CUBLAS_OP_N, (int)k, (int)rows, (int)h, 1.0f, in[1].data, (int)k, dy,
                       (int)h, mx_cuda_beta(req[0]), in_grad[0].data, (int)k));
    if (gemm && req[1] != MX_REQ_NULL) /* dW (h, k) = dY^T (h, rows) * X (rows, k) */
        MX_TRY(fc_gemm(blas, dt, CUBLAS_OP_N, CUBLAS_OP_T, (int)k, (int)h, (int)rows, 1.0f, in[0].data, (int)k, dy,
                       (int)h, mx_cuda_beta(req[1]), in_grad[1].data, (int)k));
    if (!fc->no_bias && req[2] != MX_REQ_NULL && h > 0) { /* db = column sums of dY */
        MX_DISPATCH_FLOAT_TYPES(dt, "FullyConnected", {
            fc_bias_grad_k<T><<<mx_cuda_blocks(h), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
                rows, h, (const T *)dy, (T *)in_grad[2].data, req[2]);
        });
        MX_CUDA_LAUNCHED();
    }
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_fully_connected = {fc_gpu_forward, fc_gpu_backward, NULL, MX_HALF_DTYPES};
