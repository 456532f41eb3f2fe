/*
 * embedding.cu - Embedding's CUDA kernels (embedding.c on the CPU):
 * forward gathers weight rows, one thread per output element; backward
 * zeroes the weight gradient unless adding, then scatter-adds the output
 * gradient into it with atomicAdd (the order of the sums into a repeated
 * row varies: float rounding may differ from the CPU's in the last bits).
 * Index values are floats, truncated toward zero and clipped to
 * [0, input_dim - 1] exactly as the CPU's emb_row; data gets zeros.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/embedding.h"
}

/* The row an index value selects: truncated toward zero, clipped. */
__device__ __forceinline__ int64_t emb_gpu_row(float v, int64_t rows)
{
    if (!(v > 0.0f)) return 0; /* negative, zero or NaN */
    if ((double)v >= (double)rows) return rows - 1;
    return (int64_t)v;
}

__global__ void emb_forward_kernel(const float *idx, const float *w, float *y, int64_t n, int64_t d, int64_t rows,
                                   mx_req req)
{
    MX_CUDA_FOR(i, n * d)
    {
        const int64_t k = i / d, j = i % d;
        mx_cuda_assign(req, &y[i], w[emb_gpu_row(idx[k], rows) * d + j]);
    }
}

__global__ void emb_backward_kernel(const float *idx, const float *dy, float *dw, int64_t n, int64_t d,
                                    int64_t rows)
{
    MX_CUDA_FOR(i, n * d)
    {
        const int64_t k = i / d, j = i % d;
        atomicAdd(&dw[emb_gpu_row(idx[k], rows) * d + j], dy[i]);
    }
}

static mx_status emb_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                 mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    const emb_params *ep = (const emb_params *)p;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const int64_t n = mx_shape_size(&in[0].shape), d = ep->output_dim;
    if (n * d == 0) return MX_OK;
    emb_forward_kernel<<<mx_cuda_blocks(n * d), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (const float *)in[1].data, (float *)out[0].data, n, d, ep->input_dim, req[0]);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status emb_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                  const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                  mx_tensor *aux)
{
    (void)out, (void)aux;
    const emb_params *ep = (const emb_params *)p;
    if (req[1] != MX_REQ_NULL && mx_determinism_enforced())
        return MX_ERROR(MX_ERR_UNSUPPORTED, "Embedding backward on the GPU sums repeated indices with atomic adds, "
                                            "whose order varies: not deterministic (MXNET_ENFORCE_DETERMINISM is set)");
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    const int64_t n = mx_shape_size(&in[0].shape), d = ep->output_dim;
    if (req[0] != MX_REQ_NULL && req[0] != MX_REQ_ADD && n > 0) /* indices get no gradient */
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[0].data, 0, (size_t)n * sizeof(float), stream));
    if (req[1] == MX_REQ_NULL) return MX_OK;
    if (req[1] != MX_REQ_ADD && ep->input_dim * d > 0)
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, (size_t)(ep->input_dim * d) * sizeof(float), stream));
    if (n * d == 0) return MX_OK;
    emb_backward_kernel<<<mx_cuda_blocks(n * d), MX_CUDA_THREADS, 0, stream>>>(
        (const float *)in[0].data, (const float *)out_grad[0].data, (float *)in_grad[1].data, n, d, ep->input_dim);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_embedding = {emb_gpu_forward, emb_gpu_backward, NULL, 0};
