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

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

int mx_cuda_worker_device(const mx_cuda_worker *w);
cudaStream_t mx_cuda_worker_stream(const mx_cuda_worker *w);
mx_status mx_cuda_worker_cublas(mx_cuda_worker *w, cublasHandle_t *out);
mx_status mx_cuda_worker_cudnn(mx_cuda_worker *w, cudnnHandle_t *out);
/* At least `bytes` of device memory owned by the worker, valid until the
 * next call on the same worker (ops run one at a time per worker). */
mx_status mx_cuda_worker_scratch(mx_cuda_worker *w, size_t bytes, void **out);
#endif

#endif /* MX_CUDA_WORKER_H */
