/*
 * kvstore_device.c - the GPU half of the "device" store (MXNet's
 * KVStoreLocal with CommDevice; its bookkeeping and CPU half are the local
 * store's, kvstore_local.c): gradients summed on the GPUs that made them.
 *
 * The GPUs of the first push of GPU arrays form one NCCL group (nccl.h),
 * and every later push and pull of GPU arrays names exactly those GPUs, in
 * any order (an NCCL collective takes every member). Each key gets a home
 * GPU at its first push from GPUs: the member with the fewest bytes of
 * keys at home already, the first of the pushing order on a tie (MXNet's
 * CommDevice spreads its merge buffers over the GPUs the same way), and
 * the key's stored value moves there. A push is one NCCL reduce of every
 * GPU's array into the key's sum buffer on its home GPU (a copy for a
 * single GPU), after which the store runs the updater there (the
 * optimizer's GPU kernels); a pull is one NCCL broadcast from the home GPU
 * into every GPU's array.
 *
 * A reduce or broadcast is one engine operation on the home GPU's copy
 * lane that reads and writes the arrays it touches; like a copy it first
 * waits for the compute streams of every member and is complete when it
 * returns, so the update queued after it on the home GPU and the next
 * forward pass on every GPU see its result.
 */
#include "kvstore/kvstore_internal.h"
#include "kvstore/nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_gpus {
    mx_nccl_group *group; /* made at the first push of GPU arrays */
    size_t home_bytes[MX_NCCL_MAX_DEVICES];
};

/* ------------------------------------------------------------ the group */

mx_status mx_nccl_check_devices(const int *devs, int n)
{
    if (n < 1 || n > MX_NCCL_MAX_DEVICES)
        return MX_ERROR(MX_ERR_INVALID, "an NCCL group takes 1 to %d GPUs, not %d", MX_NCCL_MAX_DEVICES, n);
    for (int i = 0; i < n; i++) {
        if (devs[i] < 0) return MX_ERROR(MX_ERR_INVALID, "an NCCL group cannot take gpu(%d)", devs[i]);
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i])
                return MX_ERROR(MX_ERR_INVALID, "an NCCL group takes distinct GPUs: gpu(%d) is named twice",
                                devs[i]);
    }
    return MX_OK;
}

#ifndef MX_USE_CUDA
/* Without CUDA there are no GPU arrays to sum: a group is refused, and
 * nothing else is reached. */
mx_status mx_nccl_group_create(const int *devs, int n, mx_nccl_group **out)
{
    *out = NULL;
    MX_TRY(mx_nccl_check_devices(devs, n));
    return MX_ERROR(MX_ERR_UNSUPPORTED, "an NCCL group over gpu(%d)%s: this build has no GPU support (built without "
                                        "CUDA)", devs[0], n > 1 ? " and more" : "");
}
mx_nccl_group *mx_nccl_group_retain(mx_nccl_group *g) { return g; }
void mx_nccl_group_release(mx_nccl_group *g) { (void)g; }
int mx_nccl_group_size(const mx_nccl_group *g)
{
    (void)g;
    return 0;
}
int mx_nccl_group_device(const mx_nccl_group *g, int i)
{
    (void)g;
    (void)i;
    return -1;
}
mx_status mx_nccl_reduce(mx_nccl_group *g, void *worker, void *const *sends, void *recv, int root, size_t count,
                         mx_dtype dtype)
{
    (void)g, (void)worker, (void)sends, (void)recv, (void)root, (void)count, (void)dtype;
    return MX_ERROR(MX_ERR_UNSUPPORTED, "NCCL: this build has no GPU support (built without CUDA)");
}
mx_status mx_nccl_broadcast(mx_nccl_group *g, void *worker, const void *send, void *const *recvs, int root,
                            size_t count, mx_dtype dtype)
{
    (void)g, (void)worker, (void)send, (void)recvs, (void)root, (void)count, (void)dtype;
    return MX_ERROR(MX_ERR_UNSUPPORTED, "NCCL: this build has no GPU support (built without CUDA)");
}
#endif

int kv_device_pick_home(const size_t *home_bytes, const int *members, int n)
{
    int best = members[0];
    for (int i = 1; i < n; i++)
        if (home_bytes[members[i]] < home_bytes[best]) best = members[i];
    return best;
}

void mx_kvstore_device_homes(const size_t *bytes, int n, int n_gpus, int *home)
{
    size_t load[MX_NCCL_MAX_DEVICES] = {0};
    int members[MX_NCCL_MAX_DEVICES];
    if (n_gpus > MX_NCCL_MAX_DEVICES) n_gpus = MX_NCCL_MAX_DEVICES;
    for (int m = 0; m < n_gpus; m++) members[m] = m;
    for (int i = 0; i < n; i++) {
        home[i] = n_gpus > 0 ? kv_device_pick_home(load, members, n_gpus) : -1;
        if (home[i] >= 0) load[home[i]] += bytes[i];
    }
}

/* "gpu(0), gpu(1)": the group's GPUs, for messages. */
static const char *group_str(const mx_nccl_group *g, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < mx_nccl_group_size(g) && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%sgpu(%d)", i ? ", " : "", mx_nccl_group_device(g, i));
    return buf;
}

/* The group member of each GPU array of arrays[0..n): makes the group at
 * the first call, then requires exactly its GPUs. */
static mx_status gpu_members(kv_gpus *kv, const char *what, int key, mx_ndarray *const *arrays, int n, int *members)
{
    if (n > MX_NCCL_MAX_DEVICES)
        return MX_ERROR(MX_ERR_INVALID, "kvstore device: %s of key %d over %d GPUs (at most %d)", what, key, n,
                        MX_NCCL_MAX_DEVICES);
    int devs[MX_NCCL_MAX_DEVICES];
    for (int i = 0; i < n; i++) devs[i] = mx_ndarray_context(arrays[i]).dev_id;
    if (mx_nccl_check_devices(devs, n) != MX_OK)
        return mx_error_prefix(mx_last_status(), "kvstore device: %s of key %d", what, key);
    if (!kv->group && mx_nccl_group_create(devs, n, &kv->group) != MX_OK)
        return mx_error_prefix(mx_last_status(), "kvstore device: %s of key %d", what, key);
    char names[512];
    const int size = mx_nccl_group_size(kv->group);
    for (int i = 0; i < n; i++) {
        members[i] = -1;
        for (int m = 0; m < size; m++)
            if (mx_nccl_group_device(kv->group, m) == devs[i]) members[i] = m;
        if (members[i] < 0)
            return MX_ERROR(MX_ERR_INVALID, "kvstore device: %s of key %d: gpu(%d) is not in the store's GPUs (%s)",
                            what, key, devs[i], group_str(kv->group, names, sizeof(names)));
    }
    if (n != size)
        return MX_ERROR(MX_ERR_INVALID, "kvstore device: %s of key %d names %d of the store's %d GPUs (%s): every "
                                        "push and pull of GPU arrays takes all of them",
                        what, key, n, size, group_str(kv->group, names, sizeof(names)));
    return MX_OK;
}

/* One reduce or broadcast: arrays[m] is member m's, `one` the home GPU's
 * sum (reduce: written) or stored value (broadcast: read). */
typedef struct nccl_op {
    mx_nccl_group *group;
    mx_ndarray *arrays[MX_NCCL_MAX_DEVICES];
    mx_ndarray *one;
    int root;
    bool reduce;
    char label[64]; /* the timeline's name */
} nccl_op;

static mx_status nccl_run(void *payload, const mx_exec_ctx *exec)
{
    nccl_op *op = payload;
    const int n = mx_nccl_group_size(op->group);
    void *ptrs[MX_NCCL_MAX_DEVICES];
    for (int m = 0; m < n; m++) ptrs[m] = mx_ndarray_data(op->arrays[m]);
    const size_t count = (size_t)mx_ndarray_size(op->one);
    const mx_dtype dtype = mx_ndarray_dtype(op->one);
    return op->reduce ? mx_nccl_reduce(op->group, exec->stream, ptrs, mx_ndarray_data(op->one), op->root, count, dtype)
                      : mx_nccl_broadcast(op->group, exec->stream, mx_ndarray_data(op->one), ptrs, op->root, count,
                                          dtype);
}

static void nccl_op_free(void *payload)
{
    nccl_op *op = payload;
    for (int m = 0; m < mx_nccl_group_size(op->group); m++) mx_ndarray_free(op->arrays[m]);
    mx_ndarray_free(op->one);
    mx_nccl_group_release(op->group);
    free(op);
}

static mx_status push_nccl(mx_runtime *rt, kv_gpus *kv, bool reduce, mx_ndarray *const *arrays, const int *members,
                           mx_ndarray *one, int root, int priority, int key)
{
    const int n = mx_nccl_group_size(kv->group);
    nccl_op *op = mx_calloc(1, sizeof(*op));
    if (!op) return MX_ERR_NOMEM;
    op->group = mx_nccl_group_retain(kv->group);
    op->one = mx_ndarray_retain(one);
    op->root = root;
    op->reduce = reduce;
    mx_engine_var *many[MX_NCCL_MAX_DEVICES], *single[1] = {mx_ndarray_var(one)};
    for (int i = 0; i < n; i++) {
        op->arrays[members[i]] = mx_ndarray_retain(arrays[i]);
        many[i] = mx_ndarray_var(arrays[i]);
    }
    snprintf(op->label, sizeof(op->label), "kvstore device %s of key %d", reduce ? "reduce" : "broadcast", key);
    mx_engine_op desc = {.fn = nccl_run, .payload = op, .payload_free = nccl_op_free,
                         .reads = reduce ? many : single, .n_reads = reduce ? n : 1,
                         .writes = reduce ? single : many, .n_writes = reduce ? 1 : n,
                         .ctx = mx_ndarray_context(one), .lane = MX_LANE_COPY, .priority = priority,
                         .name = reduce ? "kvstore device reduce" : "kvstore device broadcast",
                         .profile_name = op->label, .profile_bytes = (int64_t)mx_ndarray_nbytes(one) * n};
    return mx_engine_push(mx_runtime_engine(rt), &desc);
}

/* ------------------------------------------------------------ the store's GPU half */

mx_status kv_gpus_create(kv_gpus **out)
{
    *out = mx_calloc(1, sizeof(**out));
    return *out ? MX_OK : MX_ERR_NOMEM;
}

void kv_gpus_free(kv_gpus *g)
{
    if (!g) return;
    mx_nccl_group_release(g->group); /* operations in flight hold their own references */
    free(g);
}

void kv_gpu_home_free(kv_gpu_home *h)
{
    mx_ndarray_free(h->sum);
    h->sum = NULL;
    h->home = -1;
}

/* The key's first push from GPUs: its home, its sum buffer there, and its
 * stored value moved there. */
static mx_status settle_home(mx_runtime *rt, kv_gpus *g, kv_gpu_home *h, mx_ndarray **stored, const int *members,
                             int n)
{
    const int home = kv_device_pick_home(g->home_bytes, members, n);
    const mx_context ctx = mx_gpu(mx_nccl_group_device(g->group, home));
    const mx_shape shape = *mx_ndarray_shape(*stored);
    const mx_dtype dtype = mx_ndarray_dtype(*stored);
    mx_ndarray *sum = NULL, *moved = NULL;
    mx_status s = mx_ndarray_create(rt, shape, dtype, ctx, &sum);
    if (s == MX_OK) s = mx_ndarray_create(rt, shape, dtype, ctx, &moved);
    if (s == MX_OK) s = mx_nd_copy(moved, *stored);
    if (s != MX_OK) {
        mx_ndarray_free(sum);
        mx_ndarray_free(moved);
        return s;
    }
    mx_ndarray_free(*stored);
    *stored = moved;
    h->sum = sum;
    h->home = home;
    g->home_bytes[home] += mx_ndarray_nbytes(moved);
    return MX_OK;
}

mx_status kv_gpus_push(mx_runtime *rt, kv_gpus *g, int key, kv_gpu_home *h, mx_ndarray **stored,
                       mx_ndarray *const *values, int n, int priority, mx_ndarray **merged)
{
    const mx_dtype t = mx_ndarray_dtype(*stored);
    if (t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "kvstore device: push of key %d: summing %s arrays is not supported", key,
                        mx_dtype_name(t));
    int members[MX_NCCL_MAX_DEVICES] = {0};
    MX_TRY(gpu_members(g, "push", key, values, n, members));
    if (h->home < 0) MX_TRY(settle_home(rt, g, h, stored, members, n));
    MX_TRY(push_nccl(rt, g, true, values, members, h->sum, h->home, priority, key));
    *merged = h->sum;
    return MX_OK;
}

mx_status kv_gpus_pull(mx_runtime *rt, kv_gpus *g, int key, const kv_gpu_home *h, mx_ndarray *stored,
                       mx_ndarray *const *outs, int n, int priority)
{
    for (int i = 0; i < n; i++)
        if (mx_ndarray_dtype(outs[i]) != mx_ndarray_dtype(stored))
            return MX_ERROR(MX_ERR_INVALID, "kvstore device: pull of key %d: array %d has dtype %s, the stored value %s",
                            key, i, mx_dtype_name(mx_ndarray_dtype(outs[i])), mx_dtype_name(mx_ndarray_dtype(stored)));
    int members[MX_NCCL_MAX_DEVICES] = {0};
    MX_TRY(gpu_members(g, "pull", key, outs, n, members));
    return push_nccl(rt, g, false, outs, members, stored, h->home, priority, key);
}

int kv_gpus_device(const kv_gpus *g, int member) { return mx_nccl_group_device(g->group, member); }
