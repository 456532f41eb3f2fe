/*
 * cuda_worker.h - what one GPU engine worker owns: its device, a
 * non-blocking stream, and (made on first use, since cuDNN's set-up takes
 * hundreds of milliseconds and copy workers never need it) its cuBLAS and
 * cuDNN handles and a grow-only scratch buffer for kernels' workspace.
 * The engine hands a worker to operations as mx_exec_ctx.stream; tests
 * that call kernels outside an engine make their own.
 */
#ifndef MX_CUDA_WORKER_H
#define MX_CUDA_WORKER_H

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mx_cuda_worker mx_cuda_worker;

mx_status mx_cuda_worker_create(int dev_id, mx_cuda_worker **out);
void mx_cuda_worker_destroy(mx_cuda_worker *w);
/* Waits for everything queued on the worker's stream; a kernel's
 * asynchronous failure surfaces here as MX_ERR_DEVICE. */
mx_status mx_cuda_worker_sync(mx_cuda_worker *w);
/* Before `self` (the calling worker, or NULL) touches memory of
 * gpu(dev_id) from another stream: waits for what that device's compute
 * workers have queued (the copies' rule; device_cuda.cu). */
mx_status mx_cuda_wait_compute(const mx_cuda_worker *self, int dev_id);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

/* Return MX_ERR_DEVICE from the calling function, naming the failed call
 * and CUDA's, cuBLAS's or cuDNN's own message. */
#define MX_CUDA_TRY(call)                                                                         \
    do {                                                                                          \
        cudaError_t mx_cuda_err_ = (call);                                                        \
        if (mx_cuda_err_ != cudaSuccess)                                                          \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,         \
                                cudaGetErrorString(mx_cuda_err_));                                \
    } while (0)
#define MX_CUBLAS_TRY(call)                                                                       \
    do {                                                                                          \
        cublasStatus_t mx_cublas_err_ = (call);                                                   \
        if (mx_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                              \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,         \
                                cublasGetStatusString(mx_cublas_err_));                           \
    } while (0)
#define MX_CUDNN_TRY(call)                                                                        \
    do {                                                                                          \
        cudnnStatus_t mx_cudnn_err_ = (call);                                                     \
        if (mx_cudnn_err_ != CUDNN_STATUS_SUCCESS)                                                \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,         \
                                cudnnGetErrorString(mx_cudnn_err_));                              \
    } while (0)
int mx_cuda_worker_device(const mx_cuda_worker *w);
cudaStream_t mx_cuda_worker_stream(const mx_cuda_worker *w);
mx_status mx_cuda_worker_cublas(mx_cuda_worker *w, cublasHandle_t *out);
mx_status mx_cuda_worker_cudnn(mx_cuda_worker *w, cudnnHandle_t *out);
/* At least `bytes` of device memory owned by the worker, valid until the
 * next call on the same worker (ops run one at a time per worker). */
mx_status mx_cuda_worker_scratch(mx_cuda_worker *w, size_t bytes, void **out);
#endif

#endif /* MX_CUDA_WORKER_H */
