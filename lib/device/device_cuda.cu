/* device_cuda.cu - the GPU entry of the device table, on the CUDA runtime.
 * Each engine worker of a GPU context owns that device and a non-blocking
 * stream (an mx_cuda_worker, cuda_worker.h).
 *
 * Ordering: an operation of a compute worker queues its kernels and is
 * done for the engine at once (op_done), so a device's operations follow
 * each other on its compute stream without a host round trip each. What
 * runs elsewhere waits explicitly: a copy or zeroing from any other worker
 * (the copy lane, another device's, or none) first waits for the compute
 * streams of the devices it touches, found in the runtime's registry of
 * workers (mx_device_workers), and is complete when it returns, so host
 * memory and the host's reads are safe. Operations of a device with more
 * than one compute worker (streams that do not order each other), and all
 * of them under MX_GPU_SYNC_OPS=1, wait for their stream before they are
 * done. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "device/device.h"
}
#include "device/cuda_worker.h"

struct mx_device_workers {
    pthread_mutex_t mu;
    bool sync_ops;                /* MX_GPU_SYNC_OPS=1 */
    int n_compute;
    mx_cuda_worker **compute;     /* every device's compute workers */
};

struct mx_cuda_worker {
    int dev_id;
    bool compute;                 /* a compute-lane worker (registered) */
    mx_device_workers *registry;  /* NULL: made outside an engine */
    cudaStream_t stream;
    cublasHandle_t cublas; /* NULL until first asked for */
    cudnnHandle_t cudnn;
    void *scratch;
    size_t scratch_bytes;
    uint64_t scratch_moves;       /* reallocations of scratch: graphs captured before are stale */
    /* Held while the stream is being captured into a graph (nothing may
     * wait for a capturing stream); wait_compute takes it, after the
     * registry's lock, around its wait. */
    pthread_mutex_t capture_mu;
};

struct mx_device_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    const mx_cuda_worker *worker; /* captured on its stream (compared, never followed: it may be gone) */
    int dev_id;
    uint64_t scratch_moves;       /* the worker's at capture */
};

extern "C" mx_status mx_device_workers_create(mx_device_workers **out)
{
    mx_device_workers *r = (mx_device_workers *)calloc(1, sizeof(*r));
    if (!r) return MX_ERR_NOMEM;
    pthread_mutex_init(&r->mu, NULL);
    const char *e = getenv("MX_GPU_SYNC_OPS");
    r->sync_ops = e && *e && strcmp(e, "0") != 0;
    *out = r;
    return MX_OK;
}

extern "C" void mx_device_workers_free(mx_device_workers *r)
{
    if (!r) return;
    pthread_mutex_destroy(&r->mu);
    free(r->compute);
    free(r);
}

static mx_status registry_add(mx_device_workers *r, mx_cuda_worker *w)
{
    pthread_mutex_lock(&r->mu);
    mx_cuda_worker **grown = (mx_cuda_worker **)realloc(r->compute, sizeof(*grown) * (size_t)(r->n_compute + 1));
    if (grown) {
        r->compute = grown;
        r->compute[r->n_compute++] = w;
    }
    pthread_mutex_unlock(&r->mu);
    return grown ? MX_OK : MX_ERR_NOMEM;
}

static void registry_remove(mx_device_workers *r, mx_cuda_worker *w)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_compute; i++)
        if (r->compute[i] == w) {
            r->compute[i] = r->compute[--r->n_compute];
            break;
        }
    pthread_mutex_unlock(&r->mu);
}

/* Before `self` (a worker, or NULL) touches memory of gpu(dev_id): waits
 * for what the device's other compute workers have queued. Without a
 * registry (a worker made outside an engine, or none) the whole device. */
static mx_status wait_compute(const mx_cuda_worker *self, int dev_id)
{
    mx_device_workers *r = self ? self->registry : NULL;
    if (!r) {
        if (self && self->dev_id == dev_id) return MX_OK; /* outside an engine: the caller orders */
        MX_CUDA_TRY(cudaSetDevice(dev_id));
        MX_CUDA_TRY(cudaDeviceSynchronize());
        return MX_OK;
    }
    mx_status s = MX_OK;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_compute && s == MX_OK; i++) {
        const mx_cuda_worker *c = r->compute[i];
        if (c == self || c->dev_id != dev_id) continue;
        pthread_mutex_lock(&((mx_cuda_worker *)c)->capture_mu);
        cudaError_t err = cudaStreamSynchronize(c->stream);
        pthread_mutex_unlock(&((mx_cuda_worker *)c)->capture_mu);
        if (err != cudaSuccess)
            s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "waiting for gpu(%d)'s kernels: %s", dev_id,
                             cudaGetErrorString(err));
    }
    pthread_mutex_unlock(&r->mu);
    return s;
}

extern "C" mx_status mx_cuda_wait_compute(const mx_cuda_worker *self, int dev_id) { return wait_compute(self, dev_id); }

extern "C" mx_status mx_cuda_worker_create(int dev_id, mx_cuda_worker **out)
{
    *out = NULL;
    MX_CUDA_TRY(cudaSetDevice(dev_id));
    mx_cuda_worker *w = (mx_cuda_worker *)calloc(1, sizeof(*w));
    if (!w) return MX_ERR_NOMEM;
    w->dev_id = dev_id;
    pthread_mutex_init(&w->capture_mu, NULL);
    cudaError_t err = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
        pthread_mutex_destroy(&w->capture_mu);
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
    pthread_mutex_destroy(&w->capture_mu);
    free(w);
}

extern "C" mx_status mx_cuda_worker_sync(mx_cuda_worker *w)
{
    MX_CUDA_TRY(cudaStreamSynchronize(w->stream));
    MX_CUDA_TRY(cudaGetLastError());
    return MX_OK;
}

int mx_cuda_worker_device(const mx_cuda_worker *w) { return w->dev_id; }
cudaStream_t mx_cuda_worker_stream(const mx_cuda_worker *w) { return w ? w->stream : (cudaStream_t)0; }

mx_status mx_cuda_worker_cublas(mx_cuda_worker *w, cublasHandle_t *out)
{
    if (!w->cublas) {
        MX_CUBLAS_TRY(cublasCreate(&w->cublas));
        MX_CUBLAS_TRY(cublasSetStream(w->cublas, w->stream));
        /* float32 stays float32: no TF32 unless a caller asks for it. */
        MX_CUBLAS_TRY(cublasSetMathMode(w->cublas, CUBLAS_PEDANTIC_MATH));
    }
    *out = w->cublas;
    return MX_OK;
}

mx_status mx_cuda_worker_cudnn(mx_cuda_worker *w, cudnnHandle_t *out)
{
    if (!w->cudnn) {
        MX_CUDNN_TRY(cudnnCreate(&w->cudnn));
        MX_CUDNN_TRY(cudnnSetStream(w->cudnn, w->stream));
    }
    *out = w->cudnn;
    return MX_OK;
}

mx_status mx_cuda_worker_scratch(mx_cuda_worker *w, size_t bytes, void **out)
{
    if (bytes > w->scratch_bytes) {
        MX_CUDA_TRY(cudaStreamSynchronize(w->stream)); /* queued kernels may still use the old one */
        cudaFree(w->scratch);
        w->scratch = NULL;
        w->scratch_bytes = 0;
        cudaError_t err = cudaMalloc(&w->scratch, bytes);
        if (err != cudaSuccess)
            return mx_error_set(MX_ERR_NOMEM, __FILE__, __LINE__, "cudaMalloc of %zu bytes of workspace on gpu(%d): %s",
                                bytes, w->dev_id, cudaGetErrorString(err));
        w->scratch_bytes = bytes;
        w->scratch_moves++;
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

extern "C" mx_status mx_cuda_host_alloc(size_t bytes, void **out)
{
    *out = NULL;
    /* Portable: page-locked for every device, not only the current one. */
    cudaError_t err = cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocPortable);
    if (err == cudaSuccess) return MX_OK;
    cudaGetLastError();
    *out = NULL;
    if (err == cudaErrorMemoryAllocation)
        return mx_error_set(MX_ERR_NOMEM, __FILE__, __LINE__, "cudaHostAlloc of %zu bytes of pinned host memory: %s",
                            bytes, cudaGetErrorString(err));
    return mx_error_set(MX_ERR_UNSUPPORTED, __FILE__, __LINE__, "no pinned host memory without a usable GPU: %s",
                        cudaGetErrorString(err));
}

extern "C" bool mx_cuda_host_free(void *ptr)
{
    cudaPointerAttributes attr;
    if (!ptr || cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    if (attr.type != cudaMemoryTypeHost) return false;
    cudaFreeHost(ptr);
    return true;
}

static mx_status cuda_alloc(int dev_id, size_t bytes, void **out)
{
    MX_CUDA_TRY(cudaSetDevice(dev_id));
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
    const mx_cuda_worker *w = (const mx_cuda_worker *)stream;
    cudaStream_t s = mx_cuda_worker_stream(w);
    bool dst_gpu = dst_ctx.dev_type == MX_DEV_GPU, src_gpu = src_ctx.dev_type == MX_DEV_GPU;
    if (src_gpu) MX_TRY(wait_compute(w, src_ctx.dev_id));
    if (dst_gpu && !(src_gpu && src_ctx.dev_id == dst_ctx.dev_id)) MX_TRY(wait_compute(w, dst_ctx.dev_id));
    if (w) MX_CUDA_TRY(cudaSetDevice(w->dev_id));
    if (dst_gpu && src_gpu && dst_ctx.dev_id != src_ctx.dev_id) {
        MX_CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_ctx.dev_id, src, src_ctx.dev_id, bytes, s));
    } else {
        MX_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    }
    MX_CUDA_TRY(cudaStreamSynchronize(s));
    return MX_OK;
}

static mx_status cuda_zero(void *dst, int dev_id, size_t bytes, void *stream)
{
    const mx_cuda_worker *w = (const mx_cuda_worker *)stream;
    MX_TRY(wait_compute(w, dev_id));
    MX_CUDA_TRY(cudaSetDevice(dev_id));
    cudaStream_t s = mx_cuda_worker_stream(w);
    MX_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, s));
    MX_CUDA_TRY(cudaStreamSynchronize(s));
    return MX_OK;
}

static mx_status cuda_sync(int dev_id, void *stream)
{
    MX_CUDA_TRY(cudaSetDevice(dev_id));
    if (stream) MX_CUDA_TRY(cudaStreamSynchronize(mx_cuda_worker_stream((mx_cuda_worker *)stream)));
    else MX_CUDA_TRY(cudaDeviceSynchronize());
    return MX_OK;
}

/* Whether w's stream alone orders the operations on its device: the
 * device's only compute worker, in an engine, without MX_GPU_SYNC_OPS. */
static bool stream_orders_device(const mx_cuda_worker *w)
{
    if (!w || !w->registry || !w->compute || w->registry->sync_ops) return false;
    mx_device_workers *r = w->registry;
    int on_device = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n_compute; i++) on_device += r->compute[i]->dev_id == w->dev_id;
    pthread_mutex_unlock(&r->mu);
    return on_device == 1;
}

static mx_status cuda_op_done(int dev_id, void *stream)
{
    const mx_cuda_worker *w = (const mx_cuda_worker *)stream;
    if (stream_orders_device(w)) {
        MX_CUDA_TRY(cudaPeekAtLastError()); /* a launch that failed; faults show at the next wait */
        return MX_OK;
    }
    return cuda_sync(dev_id, stream);
}

static mx_status cuda_worker_init(mx_context ctx, mx_engine_lane lane, void **stream, void *user)
{
    mx_cuda_worker *w;
    MX_TRY(mx_cuda_worker_create(ctx.dev_id, &w));
    w->registry = (mx_device_workers *)user;
    w->compute = lane == MX_LANE_COMPUTE;
    if (w->registry && w->compute) {
        mx_status s = registry_add(w->registry, w);
        if (s != MX_OK) {
            mx_cuda_worker_destroy(w);
            return s;
        }
    }
    *stream = w;
    return MX_OK;
}

static void cuda_worker_exit(mx_context ctx, mx_engine_lane lane, void *stream, void *user)
{
    (void)ctx;
    (void)lane;
    (void)user;
    mx_cuda_worker *w = (mx_cuda_worker *)stream;
    if (w && w->registry && w->compute) registry_remove(w->registry, w);
    mx_cuda_worker_destroy(w);
}

extern "C" const mx_device_ops mx_device_cuda = {
    "gpu", cuda_count, cuda_alloc, cuda_free, cuda_copy, cuda_zero, cuda_sync, cuda_op_done,
    cuda_worker_init, cuda_worker_exit,
};

/* ---------------------------------------------------------------- graphs */

extern "C" bool mx_device_graph_possible(const mx_exec_ctx *exec, char *why, size_t size)
{
    const mx_cuda_worker *w = (const mx_cuda_worker *)exec->stream;
    if (exec->ctx.dev_type != MX_DEV_GPU || !w) {
        snprintf(why, size, "not a GPU operation");
        return false;
    }
    if (!stream_orders_device(w)) {
        snprintf(why, size, "every operation on gpu(%d) waits for its stream (MX_GPU_SYNC_OPS=1, or several compute "
                            "workers per GPU: MXNET_GPU_WORKER_NTHREADS)", w->dev_id);
        return false;
    }
    return true;
}

extern "C" mx_status mx_device_graph_capture(const mx_exec_ctx *exec, mx_device_graph_body body, void *arg,
                                             mx_device_graph **out)
{
    *out = NULL;
    mx_cuda_worker *w = (mx_cuda_worker *)exec->stream;
    if (!w) return MX_ERROR(MX_ERR_INVALID, "CUDA graphs: no worker stream to capture");
    MX_CUDA_TRY(cudaSetDevice(w->dev_id));
    mx_device_graph *g = (mx_device_graph *)calloc(1, sizeof(*g));
    if (!g) return MX_ERR_NOMEM;
    pthread_mutex_lock(&w->capture_mu);
    /* Thread-local: this thread may not make calls that would wait or
     * allocate while capturing; other threads (the copy lane) may. */
    cudaError_t err = cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
        pthread_mutex_unlock(&w->capture_mu);
        free(g);
        cudaGetLastError();
        return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "CUDA graphs: cudaStreamBeginCapture: %s",
                            cudaGetErrorString(err));
    }
    mx_status s = body(arg, exec);
    err = cudaStreamEndCapture(w->stream, &g->graph);
    pthread_mutex_unlock(&w->capture_mu);
    if (s == MX_OK && err != cudaSuccess)
        s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "CUDA graphs: the capture failed: %s",
                         cudaGetErrorString(err));
    if (s == MX_OK) {
        err = cudaGraphInstantiate(&g->exec, g->graph, 0);
        if (err != cudaSuccess)
            s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "CUDA graphs: cudaGraphInstantiate: %s",
                             cudaGetErrorString(err));
    }
    if (s != MX_OK) {
        cudaGetLastError(); /* capture errors are not sticky: nothing is left for the next call */
        if (g->graph) cudaGraphDestroy(g->graph);
        free(g);
        return s;
    }
    g->worker = w;
    g->dev_id = w->dev_id;
    g->scratch_moves = w->scratch_moves;
    *out = g;
    return MX_OK;
}

extern "C" bool mx_device_graph_current(const mx_exec_ctx *exec, const mx_device_graph *g)
{
    const mx_cuda_worker *w = (const mx_cuda_worker *)exec->stream;
    return g && w && g->worker == w && g->scratch_moves == w->scratch_moves;
}

extern "C" mx_status mx_device_graph_launch(const mx_exec_ctx *exec, mx_device_graph *g)
{
    const mx_cuda_worker *w = (const mx_cuda_worker *)exec->stream;
    MX_CUDA_TRY(cudaSetDevice(w->dev_id));
    MX_CUDA_TRY(cudaGraphLaunch(g->exec, w->stream));
    return MX_OK;
}

extern "C" void mx_device_graph_free(mx_device_graph *g)
{
    if (!g) return;
    if (cudaSetDevice(g->dev_id) == cudaSuccess) {
        if (g->exec) cudaGraphExecDestroy(g->exec);
        if (g->graph) cudaGraphDestroy(g->graph);
    }
    free(g);
}
