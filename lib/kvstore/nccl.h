/*
 * nccl.h - the GPUs of one process as one NCCL group, for the "device"
 * store (kvstore_device.c): one communicator per GPU, made together
 * (ncclCommInitAll), so a sum or a broadcast across them is one group of
 * NCCL calls moving data GPU to GPU (NVLink or PCIe peer copies), with no
 * staging through the host.
 *
 * Each collective runs on the group's own stream per GPU, after the
 * kernels the engine's compute workers have queued on those GPUs (the
 * copies' rule, device_cuda.cu), and is complete when the call returns,
 * so later work on any stream sees its result. The CUDA implementation is
 * nccl.cu; a build without CUDA refuses to make a group
 * (MX_ERR_UNSUPPORTED), so the collectives are never reached there.
 */
#ifndef MX_KVSTORE_NCCL_H
#define MX_KVSTORE_NCCL_H

#include "base/base.h"
#include "ndarray/ndarray.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPUs of one group at most (MXNet's device stores span a host's GPUs). */
#define MX_NCCL_MAX_DEVICES 64

typedef struct mx_nccl_group mx_nccl_group;

/* Whether devs[0..n) can form a group, before any GPU is asked:
 * MX_ERR_INVALID for n outside 1..MX_NCCL_MAX_DEVICES, a negative id or a
 * GPU named twice (NCCL refuses duplicate devices in one group). */
mx_status mx_nccl_check_devices(const int *devs, int n);

/* A group over gpu(devs[0]) .. gpu(devs[n-1]), in that order (member i is
 * devs[i]). MX_ERR_UNSUPPORTED without CUDA or where a GPU is not visible
 * (naming it), MX_ERR_DEVICE when NCCL fails (with its message). */
mx_status mx_nccl_group_create(const int *devs, int n, mx_nccl_group **out);
/* Groups are shared by the operations that use them: each holds a
 * reference; the last release destroys the communicators. */
mx_nccl_group *mx_nccl_group_retain(mx_nccl_group *g);
void mx_nccl_group_release(mx_nccl_group *g);
int mx_nccl_group_size(const mx_nccl_group *g);
int mx_nccl_group_device(const mx_nccl_group *g, int i);

/* Sums sends[i] (count elements of dtype on member i's GPU, for every
 * member) into recv on member root's GPU. `worker` is the calling engine
 * worker (mx_exec_ctx.stream; NULL outside an engine). float32 and
 * float64 only. */
mx_status mx_nccl_reduce(mx_nccl_group *g, void *worker, void *const *sends, void *recv, int root, size_t count,
                         mx_dtype dtype);
/* Copies send (on member root's GPU) into recvs[i] on every member's GPU. */
mx_status mx_nccl_broadcast(mx_nccl_group *g, void *worker, const void *send, void *const *recvs, int root,
                            size_t count, mx_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif /* MX_KVSTORE_NCCL_H */
