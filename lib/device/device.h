/*
 * device.h - the small interface every device implements (STYLE.md 11):
 * allocate, free, copy, zero and synchronise, plus worker-thread set-up so
 * the engine's GPU workers own a device and a stream. The CPU entry is
 * always present; the GPU entry exists when the build has CUDA.
 */
#ifndef MX_DEVICE_H
#define MX_DEVICE_H

#include "base/base.h"
#include "engine/engine.h"

typedef struct mx_device_ops {
    const char *name;
    /* Number of devices of this type (0 when none is usable). */
    int (*count)(void);
    mx_status (*alloc)(int dev_id, size_t bytes, void **out);
    void (*free)(int dev_id, void *ptr);
    /* Copies bytes between any two contexts of which one is this device's
     * type (or both host); `stream` is the calling worker's, may be NULL.
     * Returns once the copy is complete. */
    mx_status (*copy)(void *dst, mx_context dst_ctx, const void *src, mx_context src_ctx,
                      size_t bytes, void *stream);
    mx_status (*zero)(void *dst, int dev_id, size_t bytes, void *stream);
    mx_status (*sync)(int dev_id, void *stream);
    /* An operation of a compute worker has queued its kernels on `stream`:
     * what must happen before the engine counts it done. CUDA: nothing
     * while the device has one compute worker (its stream orders every
     * later operation there, and copies first wait for the device's
     * compute streams), a wait for the stream otherwise or with
     * MX_GPU_SYNC_OPS=1 (each error then names its layer). NULL: none. */
    mx_status (*op_done)(int dev_id, void *stream);
    /* Engine worker hooks (NULL on the CPU). */
    mx_engine_worker_init worker_init;
    mx_engine_worker_exit worker_exit;
} mx_device_ops;

/* The table for a device type, or NULL with MX_ERR_UNSUPPORTED recorded
 * (for example GPU in a build without CUDA). */
const mx_device_ops *mx_device_get(int dev_type);

/* Checks that ctx names a usable device; MX_ERR_INVALID / UNSUPPORTED. */
mx_status mx_device_check(mx_context ctx);

/* A list of contexts as configs and tools write it (MXNet's names):
 * "cpu", "cpu:0-3", "gpu", "gpu:0", "gpu(1)", "gpu:0-3", "gpu:0,2"; a
 * type carries over to bare numbers ("gpu:0,2" is gpu 0 and gpu 2). No
 * duplicates, no mixing of cpu and gpu. *out is malloc'ed (free()).
 * Checks the syntax only: whether this machine has the devices is
 * mx_device_check_list's question. Errors (MX_ERR_INVALID) read
 * "bad context list 'T': why (cpu, cpu:0-3, gpu:0, gpu:0-3 or gpu:0,2)". */
mx_status mx_device_parse_list(const char *text, mx_context **out, int *n);
/* mx_device_check on each: the first context this build or machine cannot
 * give is the error. */
mx_status mx_device_check_list(const mx_context *ctx, int n);

/* The device workers of one runtime (its engine's worker_user), so that a
 * copy can wait for the work queued on the compute streams of the devices
 * it touches. NULL (and MX_OK) in builds without CUDA. */
typedef struct mx_device_workers mx_device_workers;
mx_status mx_device_workers_create(mx_device_workers **out);
void mx_device_workers_free(mx_device_workers *workers);

/* Engine hooks that dispatch to the device of the worker's context; `user`
 * is the runtime's mx_device_workers. */
mx_status mx_device_worker_init(mx_context ctx, mx_engine_lane lane, void **stream, void *user);
void mx_device_worker_exit(mx_context ctx, mx_engine_lane lane, void *stream, void *user);

/* An operation running on `exec` has queued its device work: what its
 * device needs before the engine counts it done (op_done; nothing on the
 * CPU). Every engine operation that launches device kernels ends with it. */
mx_status mx_device_op_done(const mx_exec_ctx *exec);

/* Copies between arbitrary contexts (host<->device, device<->device). */
mx_status mx_device_copy(void *dst, mx_context dst_ctx, const void *src, mx_context src_ctx,
                         size_t bytes, void *stream);

/* Device graphs (CUDA graphs): the kernels an operation's body queues on
 * its worker's stream, captured once (nothing runs while capturing) and
 * launched again as one graph, one launch instead of one per kernel. A
 * captured graph holds the pointers its kernels were given, the worker's
 * scratch included: it is current while that worker's scratch has not
 * moved since (a kernel needing more reallocates it). Without CUDA,
 * capture answers MX_ERR_UNSUPPORTED. */
typedef struct mx_device_graph mx_device_graph;
typedef mx_status (*mx_device_graph_body)(void *arg, const mx_exec_ctx *exec);
/* Whether the worker running `exec` can capture: a GPU compute worker
 * alone on its device, whose stream orders every operation there (not
 * MX_GPU_SYNC_OPS=1, not several compute workers per GPU, where each
 * operation waits for its stream); false with why otherwise. */
bool mx_device_graph_possible(const mx_exec_ctx *exec, char *why, size_t size);
/* Captures what body queues on exec's stream into *out, running nothing.
 * On failure (body's error, or a call it made that capture does not
 * allow) *out is NULL and nothing of body ran: the caller runs it plainly.
 * Other threads that wait for this stream meanwhile wait for the capture
 * to end. */
mx_status mx_device_graph_capture(const mx_exec_ctx *exec, mx_device_graph_body body, void *arg,
                                  mx_device_graph **out);
bool mx_device_graph_current(const mx_exec_ctx *exec, const mx_device_graph *g);
/* Queues g on exec's stream (as the body's kernels would be). */
mx_status mx_device_graph_launch(const mx_exec_ctx *exec, mx_device_graph *g);
void mx_device_graph_free(mx_device_graph *g);

#ifdef MX_USE_CUDA
extern const mx_device_ops mx_device_cuda;
/* Page-locked host memory for cpu_pinned (device_cuda.cu): the GPU's DMA
 * reads and writes it at full speed, where pageable memory is staged
 * through the driver's buffers. Where no GPU is usable (no driver, no
 * device) the host allocator serves instead; mx_cuda_host_free tells the
 * two apart by asking the driver about the pointer. */
mx_status mx_cuda_host_alloc(size_t bytes, void **out);
bool mx_cuda_host_free(void *ptr); /* false: not page-locked, free() it */
#endif

#endif /* MX_DEVICE_H */
