/* device_cuda.cu - the GPU entry of the device table, on the CUDA runtime.
 * Each engine worker of a GPU context owns that device and a non-blocking
 * stream (an mx_cuda_worker, cuda_worker.h); copies and zeroing run on the
 * worker's stream and are complete when the call returns, so engine
 * ordering stays the only ordering. */
#include <cuda_runtime.h>

extern "C" {
#include "device/device.h"
}
#include "device/cuda_worker.h"

#define CUDA_TRY(call)                                                                  \
    do {                                                                                \
        cudaError_t mx_cuda_err_ = (call);                                              \
        if (mx_cuda_err_ != cudaSuccess)                                                \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call, \
                                cudaGetErrorString(mx_cuda_err_));                      \
    } while (0)

#define CUBLAS_TRY(call)                                                                         \
    do {                                                                                         \
        cublasStatus_t mx_cublas_err_ = (call);                                                  \
        if (mx_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                             \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,        \
                                cublasGetStatusString(mx_cublas_err_));                          \
    } while (0)
#define CUDNN_TRY(call)                                                                          \
    do {                                                                                         \
        cudnnStatus_t mx_cudnn_err_ = (call);                                                    \
        if (mx_cudnn_err_ != CUDNN_STATUS_SUCCESS)                                               \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,        \
                                cudnnGetErrorString(mx_cudnn_err_));                             \
    } while (0)

struct mx_cuda_worker {
    int dev_id;
    cudaStream_t stream;
    cublasHandle_t cublas; /* NULL until first asked for */
    cudnnHandle_t cudnn;
    void *scratch;
    size_t scratch_bytes;
};

extern "C" mx_status mx_cuda_worker_create(int dev_id, mx_cuda_worker **out)
{
    *out = NULL;
    CUDA_TRY(cudaSetDevice(dev_id));
    mx_cuda_worker *w = (mx_cuda_worker *)calloc(1, sizeof(*w));
    if (!w) return MX_ERR_NOMEM;
    w->dev_id = dev_id;
    cudaError_t err = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        free(w);
        return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "creating a stream on gpu(%d): %s", dev_id,
                            cudaGetErrorString(err));
    }
    *out = w;
    return MX_OK;
}

extern "C" void mx_cuda_worker_destroy(mx_cuda_worker *w)
{
    if (!w) return;
    if (cudaSetDevice(w->dev_id) == cudaSuccess) {
        cudaStreamSynchronize(w->stream);
        if (w->cudnn) cudnnDestroy(w->cudnn);
        if (w->cublas) cublasDestroy(w->cublas);
        cudaFree(w->scratch);
        cudaStreamDestroy(w->stream);
    }
    free(w);
}

extern "C" mx_status mx_cuda_worker_sync(mx_cuda_worker *w)
{
    CUDA_TRY(cudaStreamSynchronize(w->stream));
    CUDA_TRY(cudaGetLastError());
    return MX_OK;
}

int mx_cuda_worker_device(const mx_cuda_worker *w) { return w->dev_id; }
cudaStream_t mx_cuda_worker_stream(const mx_cuda_worker *w) { return w ? w->stream : (cudaStream_t)0; }

mx_status mx_cuda_worker_cublas(mx_cuda_worker *w, cublasHandle_t *out)
{
    if (!w->cublas) {
        CUBLAS_TRY(cublasCreate(&w->cublas));
        CUBLAS_TRY(cublasSetStream(w->cublas, w->stream));
        /* float32 stays float32: no TF32 unless a caller asks for it. */
        CUBLAS_TRY(cublasSetMathMode(w->cublas, CUBLAS_PEDANTIC_MATH));
    }
    *out = w->cublas;
    return MX_OK;
}

mx_status mx_cuda_worker_cudnn(mx_cuda_worker *w, cudnnHandle_t *out)
{
    if (!w->cudnn) {
        CUDNN_TRY(cudnnCreate(&w->cudnn));
        CUDNN_TRY(cudnnSetStream(w->cudnn, w->stream));
    }
    *out = w->cudnn;
    return MX_OK;
}

mx_status mx_cuda_worker_scratch(mx_cuda_worker *w, size_t bytes, void **out)
{
    if (bytes > w->scratch_bytes) {
        CUDA_TRY(cudaStreamSynchronize(w->stream)); /* queued kernels may still use the old one */
        cudaFree(w->scratch);
        w->scratch = NULL;
        w->scratch_bytes = 0;
        cudaError_t err = cudaMalloc(&w->scratch, bytes);
        if (err != cudaSuccess)
            return mx_error_set(MX_ERR_NOMEM, __FILE__, __LINE__, "cudaMalloc of %zu bytes of workspace on gpu(%d): %s",
                                bytes, w->dev_id, cudaGetErrorString(err));
        w->scratch_bytes = bytes;
    }
    *out = w->scratch;
    return MX_OK;
}

static int cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: clear the sticky error */
        return 0;
    }
    return n;
}

static mx_status cuda_alloc(int dev_id, size_t bytes, void **out)
{
    CUDA_TRY(cudaSetDevice(dev_id));
    cudaError_t err = cudaMalloc(out, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        *out = NULL;
        return mx_error_set(MX_ERR_NOMEM, __FILE__, __LINE__, "cudaMalloc of %zu bytes on gpu(%d): %s",
                            bytes, dev_id, cudaGetErrorString(err));
    }
    return MX_OK;
}

static void cuda_free(int dev_id, void *ptr)
{
    if (cudaSetDevice(dev_id) == cudaSuccess) cudaFree(ptr);
}

static mx_status cuda_copy(void *dst, mx_context dst_ctx, const void *src, mx_context src_ctx,
                           size_t bytes, void *stream)
{
    if (bytes == 0) return MX_OK;
    cudaStream_t s = mx_cuda_worker_stream((mx_cuda_worker *)stream);
    bool dst_gpu = dst_ctx.dev_type == MX_DEV_GPU, src_gpu = src_ctx.dev_type == MX_DEV_GPU;
    if (dst_gpu && src_gpu && dst_ctx.dev_id != src_ctx.dev_id) {
        CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_ctx.dev_id, src, src_ctx.dev_id, bytes, s));
    } else {
        CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    }
    CUDA_TRY(cudaStreamSynchronize(s));
    return MX_OK;
}

static mx_status cuda_zero(void *dst, int dev_id, size_t bytes, void *stream)
{
    CUDA_TRY(cudaSetDevice(dev_id));
    cudaStream_t s = mx_cuda_worker_stream((mx_cuda_worker *)stream);
    CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, s));
    CUDA_TRY(cudaStreamSynchronize(s));
    return MX_OK;
}

static mx_status cuda_sync(int dev_id, void *stream)
{
    CUDA_TRY(cudaSetDevice(dev_id));
    if (stream) CUDA_TRY(cudaStreamSynchronize(mx_cuda_worker_stream((mx_cuda_worker *)stream)));
    else CUDA_TRY(cudaDeviceSynchronize());
    return MX_OK;
}

static mx_status cuda_worker_init(mx_context ctx, mx_engine_lane lane, void **stream, void *user)
{
    (void)lane;
    (void)user;
    mx_cuda_worker *w;
    MX_TRY(mx_cuda_worker_create(ctx.dev_id, &w));
    *stream = w;
    return MX_OK;
}

static void cuda_worker_exit(mx_context ctx, mx_engine_lane lane, void *stream, void *user)
{
    (void)ctx;
    (void)lane;
    (void)user;
    mx_cuda_worker_destroy((mx_cuda_worker *)stream);
}

extern "C" const mx_device_ops mx_device_cuda = {
    "gpu", cuda_count, cuda_alloc, cuda_free, cuda_copy, cuda_zero, cuda_sync,
    cuda_worker_init, cuda_worker_exit,
};
