/*
 * kvstore_local.c - the "local" and "device" stores (MXNet's KVStoreLocal
 * with CommCPU and with CommDevice): one process.
 *
 * local: the stored values and the sums on the CPU. push(key, values):
 * values on other devices are copied into per-key CPU buffers (engine
 * copies), then one engine operation sums them into the key's merge buffer
 * (read: the inputs; write: the buffer) in list order: ((v0 + v1) + v2) +
 * ...; a single CPU value is used as it is. The updater then gets (merged,
 * stored); without one the stored value is replaced by a copy of the sum.
 * pull(key, outs) pushes copies of the stored value. Buffers are reused
 * from push to push: the engine orders the next sum after the previous
 * update has read the buffer.
 *
 * device: CPU arrays as local (the same bits); GPU arrays summed on the
 * GPUs, the key's stored value and update on its home GPU, pulls
 * broadcast from there (kvstore_device.c). A push mixing CPU and GPU
 * arrays is refused: local sums those on the CPU.
 */
#include "kvstore/kvstore_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_entry {
    mx_ndarray *stored;   /* NULL: key not initialised */
    kv_merge merge;       /* the devices' sum on the CPU */
    kv_gpu_home gpu;      /* device store: the key's home GPU and sum there */
} kv_entry;

typedef struct kv_local {
    mx_runtime *rt;
    const char *name;     /* the kind, for messages */
    kv_entry *entries;
    int n_entries;
    kv_gpus *gpus;        /* device store: the GPUs' sums; NULL for local */
} kv_local;

static mx_status create(mx_runtime *rt, bool on_gpus, void **state)
{
    kv_local *kv = mx_calloc(1, sizeof(*kv));
    if (!kv) return MX_ERR_NOMEM;
    kv->rt = rt;
    kv->name = on_gpus ? "device" : "local";
    if (on_gpus && kv_gpus_create(&kv->gpus) != MX_OK) {
        free(kv);
        return MX_ERR_NOMEM;
    }
    *state = kv;
    return MX_OK;
}

static mx_status local_create(mx_runtime *rt, const mx_kvstore_options *opts, void **state)
{
    (void)opts;
    return create(rt, false, state);
}

static mx_status device_create(mx_runtime *rt, const mx_kvstore_options *opts, void **state)
{
    (void)opts;
    return create(rt, true, state);
}

static void local_free(void *state)
{
    kv_local *kv = state;
    if (!kv) return;
    for (int i = 0; i < kv->n_entries; i++) {
        kv_entry *e = &kv->entries[i];
        mx_ndarray_free(e->stored);
        kv_merge_free(&e->merge);
        kv_gpu_home_free(&e->gpu);
    }
    free(kv->entries);
    kv_gpus_free(kv->gpus);
    free(kv);
}

static kv_entry *find_entry(kv_local *kv, int key)
{
    return key < kv->n_entries && kv->entries[key].stored ? &kv->entries[key] : NULL;
}

static mx_status not_inited(const kv_local *kv, int key)
{
    return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d has not been initialised (init it first)", kv->name, key);
}

static mx_status local_init(void *state, int key, mx_ndarray *value)
{
    kv_local *kv = state;
    if (mx_ndarray_runtime(value) != kv->rt)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: init of key %d: array belongs to another runtime", kv->name, key);
    if (find_entry(kv, key)) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d initialised twice", kv->name, key);
    if (key >= kv->n_entries) {
        int n = kv->n_entries ? kv->n_entries : 16;
        while (n <= key) n *= 2;
        kv_entry *grown = mx_realloc(kv->entries, sizeof(*grown) * (size_t)n);
        if (!grown) return MX_ERR_NOMEM;
        memset(grown + kv->n_entries, 0, sizeof(*grown) * (size_t)(n - kv->n_entries));
        kv->entries = grown;
        kv->n_entries = n;
    }
    mx_ndarray *stored;
    MX_TRY(mx_ndarray_create(kv->rt, *mx_ndarray_shape(value), mx_ndarray_dtype(value), mx_cpu(), &stored));
    mx_status s = mx_nd_copy(stored, value);
    if (s != MX_OK) {
        mx_ndarray_free(stored);
        return s;
    }
    kv->entries[key].stored = stored;
    kv->entries[key].gpu.home = -1;
    return MX_OK;
}

static mx_status check_value(kv_local *kv, kv_entry *e, const char *what, int key, int i, mx_ndarray *v)
{
    char a[160], b[160];
    if (mx_ndarray_runtime(v) != kv->rt)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: %s of key %d: array %d belongs to another runtime", kv->name, what,
                        key, i);
    if (!mx_shape_equal(mx_ndarray_shape(v), mx_ndarray_shape(e->stored)))
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: %s of key %d: array %d has shape %s, the stored value %s",
                        kv->name, what, key, i, mx_shape_str(mx_ndarray_shape(v), a, sizeof(a)),
                        mx_shape_str(mx_ndarray_shape(e->stored), b, sizeof(b)));
    return MX_OK;
}

static mx_status local_push(void *state, int key, mx_ndarray *const *values, int n, int priority,
                            const mx_kvstore_updater *updater)
{
    kv_local *kv = state;
    kv_entry *e = find_entry(kv, key);
    if (!e) return not_inited(kv, key);
    mx_dtype t = mx_ndarray_dtype(e->stored);
    int gpus = 0;
    for (int i = 0; i < n; i++) {
        MX_TRY(check_value(kv, e, "push", key, i, values[i]));
        if (mx_ndarray_dtype(values[i]) != t)
            return MX_ERROR(MX_ERR_INVALID, "kvstore %s: push of key %d: array %d has dtype %s, the stored value %s",
                            kv->name, key, i, mx_dtype_name(mx_ndarray_dtype(values[i])), mx_dtype_name(t));
        gpus += mx_ndarray_context(values[i]).dev_type == MX_DEV_GPU;
    }
    mx_ndarray *merged;
    if (kv->gpus && gpus) {
        if (gpus != n)
            return MX_ERROR(MX_ERR_INVALID, "kvstore device: push of key %d mixes %d GPU and %d CPU arrays (the "
                                            "'local' store sums such lists on the CPU)",
                            key, gpus, n - gpus);
        MX_TRY(kv_gpus_push(kv->rt, kv->gpus, key, &e->gpu, &e->stored, values, n, priority, &merged));
    } else {
        if (e->gpu.home >= 0)
            return MX_ERROR(MX_ERR_INVALID, "kvstore device: push of key %d from the CPU: the key lives on gpu(%d) "
                                            "since its first push, from GPUs",
                            key, kv_gpus_device(kv->gpus, e->gpu.home));
        MX_TRY(kv_merge_values(kv->rt, e->stored, &e->merge, values, n, priority, &merged));
    }
    if (updater && updater->fn) return updater->fn(key, merged, e->stored, updater->user);
    return mx_nd_copy(e->stored, merged);
}

static mx_status local_pull(void *state, int key, mx_ndarray *const *outs, int n, int priority)
{
    kv_local *kv = state;
    kv_entry *e = find_entry(kv, key);
    if (!e) return not_inited(kv, key);
    int gpus = 0;
    for (int i = 0; i < n; i++) {
        MX_TRY(check_value(kv, e, "pull", key, i, outs[i]));
        gpus += mx_ndarray_context(outs[i]).dev_type == MX_DEV_GPU;
    }
    /* Onto the GPUs from the key's home GPU; anywhere else (a host copy of
     * the weights, or before the first push), plain copies. */
    if (e->gpu.home >= 0 && gpus == n && n > 0)
        return kv_gpus_pull(kv->rt, kv->gpus, key, &e->gpu, e->stored, outs, n, priority);
    for (int i = 0; i < n; i++) MX_TRY(mx_nd_copy(outs[i], e->stored));
    return MX_OK;
}

static mx_ndarray *local_stored(void *state, int key)
{
    kv_entry *e = find_entry(state, key);
    return e ? e->stored : NULL;
}

static int local_rank(const void *state)
{
    (void)state;
    return 0;
}

static int local_num_workers(const void *state)
{
    (void)state;
    return 1;
}

static mx_status local_barrier(void *state)
{
    (void)state;
    return MX_OK;
}

const mx_kvstore_ops mx_kvstore_local_ops = {
    .name = "local",
    .create = local_create,
    .free = local_free,
    .init = local_init,
    .push = local_push,
    .pull = local_pull,
    .stored = local_stored,
    .rank = local_rank,
    .num_workers = local_num_workers,
    .barrier = local_barrier,
};

const mx_kvstore_ops mx_kvstore_device_ops = {
    .name = "device",
    .create = device_create,
    .free = local_free,
    .init = local_init,
    .push = local_push,
    .pull = local_pull,
    .stored = local_stored,
    .rank = local_rank,
    .num_workers = local_num_workers,
    .barrier = local_barrier,
};
