/*
 * kvstore_internal.h - what the store kinds share (merge.c).
 */
#ifndef MX_KVSTORE_INTERNAL_H
#define MX_KVSTORE_INTERNAL_H

#include "kvstore/kvstore.h"

/* The per-key buffers of the devices' sum. */
typedef struct kv_merge {
    mx_ndarray *merge;    /* sum buffer, created on the first push of several values */
    mx_ndarray **staging; /* CPU copies of values[i] living on other devices */
    int n_staging;
} kv_merge;

/* Sums values[0..n) (one per device, shaped and typed like `like`) into
 * one CPU array, pushed to the engine: *merged is values[0] when that is a
 * single CPU value, else m's buffer. */
mx_status kv_merge_values(mx_runtime *rt, const mx_ndarray *like, kv_merge *m, mx_ndarray *const *values, int n,
                          int priority, mx_ndarray **merged);
void kv_merge_free(kv_merge *m);

/* The device store's GPU half (kvstore_device.c): its GPUs' NCCL group,
 * and per key the home GPU that holds the stored value and the sum. */
typedef struct kv_gpus kv_gpus;
typedef struct kv_gpu_home {
    int home;        /* group member; -1 until the key's first push from GPUs */
    mx_ndarray *sum; /* the sum on the home GPU */
} kv_gpu_home;
mx_status kv_gpus_create(kv_gpus **out);
void kv_gpus_free(kv_gpus *g);
void kv_gpu_home_free(kv_gpu_home *h);
/* Sums values[0..n) (all on GPUs, shaped and typed like *stored) on the
 * key's home GPU, settling the home at the key's first push (*stored moves
 * there); *merged is the sum, for the updater. */
mx_status kv_gpus_push(mx_runtime *rt, kv_gpus *g, int key, kv_gpu_home *h, mx_ndarray **stored,
                       mx_ndarray *const *values, int n, int priority, mx_ndarray **merged);
/* Broadcasts stored (on the key's home GPU) into outs[0..n), all on the
 * group's GPUs. */
mx_status kv_gpus_pull(mx_runtime *rt, kv_gpus *g, int key, const kv_gpu_home *h, mx_ndarray *stored,
                       mx_ndarray *const *outs, int n, int priority);
/* The GPU id of a group member. */
int kv_gpus_device(const kv_gpus *g, int member);
/* The home for a new key: of the group members members[0..n) (in pushing
 * order), the one with the fewest bytes at home (home_bytes, per member),
 * the first of them on a tie. */
int kv_device_pick_home(const size_t *home_bytes, const int *members, int n);

#endif /* MX_KVSTORE_INTERNAL_H */
