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

#endif /* MX_KVSTORE_INTERNAL_H */
