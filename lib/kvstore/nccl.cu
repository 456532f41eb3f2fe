/* nccl.cu - the GPUs of one process as one NCCL group (nccl.h): the
 * communicators from ncclCommInitAll, one non-blocking stream per GPU for
 * the collectives, and reduce / broadcast as one NCCL group call each,
 * issued from the calling thread (NCCL's single-thread, several-GPU use),
 * after the engine's compute streams of every member and complete on
 * return.
 *
 * libnccl.so.2 is loaded when a group is made (dlopen; each group holds
 * its own handle and function table), not linked: it is 200 MB that only
 * the device store on several GPUs needs, and a machine without it (the
 * lent GPU machines carry it in PyTorch's packages, found by
 * LD_LIBRARY_PATH) still runs everything else. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <nccl.h>
#include <stdlib.h>

extern "C" {
#include "device/device.h"
#include "kvstore/nccl.h"
}
#include "device/cuda_worker.h"

/* The NCCL entry points a group uses, from its own dlopen handle. */
typedef struct nccl_api {
    void *lib;
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    const char *(*error_string)(ncclResult_t);
} nccl_api;

struct mx_nccl_group {
    int refs; /* __atomic builtins: this file is C++ */
    /* One collective at a time: NCCL communicators are not thread-safe, and
     * the store's reduces and broadcasts run on the copy lanes of their
     * keys' home GPUs, several threads. */
    pthread_mutex_t mu;
    nccl_api api;
    int n;
    int devs[MX_NCCL_MAX_DEVICES];
    ncclComm_t comms[MX_NCCL_MAX_DEVICES];
    cudaStream_t streams[MX_NCCL_MAX_DEVICES];
};

#define NCCL_TRY(g, call)                                                                                       \
    do {                                                                                                        \
        ncclResult_t mx_nccl_err_ = (call);                                                                     \
        if (mx_nccl_err_ != ncclSuccess)                                                                        \
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s failed: %s", #call,                       \
                                (g)->api.error_string(mx_nccl_err_));                                          \
    } while (0)

static mx_status load_api(nccl_api *api)
{
    api->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib)
        return mx_error_set(MX_ERR_UNSUPPORTED, __FILE__, __LINE__,
                            "NCCL is needed to sum over GPUs and could not be loaded: %s (install NCCL 2 or put "
                            "the folder of libnccl.so.2 on LD_LIBRARY_PATH)", dlerror());
    struct {
        const char *name;
        void **slot;
    } fns[] = {{"ncclCommInitAll", (void **)&api->comm_init_all},
               {"ncclCommDestroy", (void **)&api->comm_destroy},
               {"ncclCommGetAsyncError", (void **)&api->comm_get_async_error},
               {"ncclGroupStart", (void **)&api->group_start},
               {"ncclGroupEnd", (void **)&api->group_end},
               {"ncclReduce", (void **)&api->reduce},
               {"ncclBroadcast", (void **)&api->broadcast},
               {"ncclGetErrorString", (void **)&api->error_string}};
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        *fns[i].slot = dlsym(api->lib, fns[i].name);
        if (!*fns[i].slot) {
            mx_status s = mx_error_set(MX_ERR_UNSUPPORTED, __FILE__, __LINE__,
                                       "libnccl.so.2 lacks %s (NCCL 2.12 or newer is needed)", fns[i].name);
            dlclose(api->lib);
            api->lib = NULL;
            return s;
        }
    }
    return MX_OK;
}

static void destroy(mx_nccl_group *g)
{
    for (int i = 0; i < g->n; i++) {
        if (cudaSetDevice(g->devs[i]) != cudaSuccess) continue;
        if (g->streams[i]) cudaStreamDestroy(g->streams[i]);
        if (g->comms[i]) g->api.comm_destroy(g->comms[i]);
    }
    if (g->api.lib) dlclose(g->api.lib);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

extern "C" mx_status mx_nccl_group_create(const int *devs, int n, mx_nccl_group **out)
{
    *out = NULL;
    MX_TRY(mx_nccl_check_devices(devs, n));
    for (int i = 0; i < n; i++) MX_TRY(mx_device_check(mx_gpu(devs[i])));
    mx_nccl_group *g = (mx_nccl_group *)calloc(1, sizeof(*g));
    if (!g) return MX_ERR_NOMEM;
    g->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
    mx_status s = load_api(&g->api);
    if (s != MX_OK) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        return s;
    }
    /* ncclCommInitAll and the streams below move the calling thread's
     * current device: give it back. */
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) current = devs[0];
    g->n = n;
    for (int i = 0; i < n; i++) g->devs[i] = devs[i];
    ncclResult_t r = g->api.comm_init_all(g->comms, n, g->devs);
    if (r != ncclSuccess) {
        s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "ncclCommInitAll over %d GPU(s) failed: %s", n,
                         g->api.error_string(r));
        for (int i = 0; i < n; i++) g->comms[i] = NULL;
        destroy(g);
        return s;
    }
    for (int i = 0; i < n; i++) {
        cudaError_t err = cudaSetDevice(devs[i]);
        if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&g->streams[i], cudaStreamNonBlocking);
        if (err != cudaSuccess) {
            destroy(g);
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "a stream for NCCL on gpu(%d): %s", devs[i],
                                cudaGetErrorString(err));
        }
    }
    cudaSetDevice(current);
    *out = g;
    return MX_OK;
}

extern "C" mx_nccl_group *mx_nccl_group_retain(mx_nccl_group *g)
{
    __atomic_fetch_add(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

extern "C" void mx_nccl_group_release(mx_nccl_group *g)
{
    if (g && __atomic_fetch_sub(&g->refs, 1, __ATOMIC_ACQ_REL) == 1) destroy(g);
}

extern "C" int mx_nccl_group_size(const mx_nccl_group *g) { return g->n; }
extern "C" int mx_nccl_group_device(const mx_nccl_group *g, int i) { return g->devs[i]; }

static mx_status nccl_type(mx_dtype dtype, ncclDataType_t *out)
{
    if (dtype == MX_FLOAT32) *out = ncclFloat32;
    else if (dtype == MX_FLOAT64) *out = ncclFloat64;
    else return MX_ERROR(MX_ERR_UNSUPPORTED, "NCCL sums of %s arrays are not supported", mx_dtype_name(dtype));
    return MX_OK;
}

/* Every member's compute streams first: the engine counts their kernels
 * done once queued. */
static mx_status wait_members(const mx_nccl_group *g, void *worker)
{
    for (int i = 0; i < g->n; i++) MX_TRY(mx_cuda_wait_compute((const mx_cuda_worker *)worker, g->devs[i]));
    return MX_OK;
}

/* The collectives' streams, then the caller's device again (its worker's
 * later operations assume it). An asynchronous NCCL failure shows here. */
static mx_status finish(const mx_nccl_group *g, void *worker, const char *what)
{
    for (int i = 0; i < g->n; i++) {
        MX_CUDA_TRY(cudaSetDevice(g->devs[i]));
        cudaError_t err = cudaStreamSynchronize(g->streams[i]);
        if (err != cudaSuccess)
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "NCCL %s on gpu(%d): %s", what, g->devs[i],
                                cudaGetErrorString(err));
        ncclResult_t async = ncclSuccess;
        NCCL_TRY(g, g->api.comm_get_async_error(g->comms[i], &async));
        if (async != ncclSuccess)
            return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "NCCL %s on gpu(%d): %s", what, g->devs[i],
                                g->api.error_string(async));
    }
    if (worker) MX_CUDA_TRY(cudaSetDevice(mx_cuda_worker_device((const mx_cuda_worker *)worker)));
    return MX_OK;
}

/* One collective over every member: the checks, the wait for the compute
 * streams, call(i, type) for each member inside one NCCL group, and the wait for
 * its end; one at a time per group (mu). */
template <typename F>
static mx_status collective(mx_nccl_group *g, void *worker, const char *what, int root, mx_dtype dtype, F call)
{
    ncclDataType_t type = ncclFloat32;
    MX_TRY(nccl_type(dtype, &type));
    if (root < 0 || root >= g->n) return MX_ERROR(MX_ERR_INVALID, "NCCL %s: root %d of %d GPUs", what, root, g->n);
    pthread_mutex_lock(&g->mu);
    mx_status s = wait_members(g, worker);
    ncclResult_t r = s == MX_OK ? g->api.group_start() : ncclSuccess;
    if (s == MX_OK && r != ncclSuccess)
        s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "NCCL %s: ncclGroupStart: %s", what,
                         g->api.error_string(r));
    for (int i = 0; i < g->n && s == MX_OK; i++) {
        r = call(i, type);
        if (r != ncclSuccess) {
            g->api.group_end();
            s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "NCCL %s on gpu(%d): %s", what, g->devs[i],
                             g->api.error_string(r));
        }
    }
    if (s == MX_OK && (r = g->api.group_end()) != ncclSuccess)
        s = mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "NCCL %s: ncclGroupEnd: %s", what, g->api.error_string(r));
    if (s == MX_OK) s = finish(g, worker, what);
    pthread_mutex_unlock(&g->mu);
    return s;
}

extern "C" mx_status mx_nccl_reduce(mx_nccl_group *g, void *worker, void *const *sends, void *recv, int root,
                                    size_t count, mx_dtype dtype)
{
    return collective(g, worker, "reduce", root, dtype, [&](int i, ncclDataType_t type) {
        return g->api.reduce(sends[i], i == root ? recv : NULL, count, type, ncclSum, root, g->comms[i], g->streams[i]);
    });
}

extern "C" mx_status mx_nccl_broadcast(mx_nccl_group *g, void *worker, const void *send, void *const *recvs, int root,
                                       size_t count, mx_dtype dtype)
{
    return collective(g, worker, "broadcast", root, dtype, [&](int i, ncclDataType_t type) {
        return g->api.broadcast(i == root ? send : NULL, recvs[i], count, type, root, g->comms[i], g->streams[i]);
    });
}
