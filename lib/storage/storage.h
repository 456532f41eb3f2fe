/*
 * storage.h - a pooled allocator per device context. Freed blocks are kept
 * in per-size free lists and handed out again for requests of the same size
 * class, so steady-state training allocates nothing from the system (MXNet's
 * pooled storage manager). Sizes are rounded to a class: powers of two up to
 * 4 KiB, then multiples of 4 KiB. When the device is out of memory, the
 * cache is released and the allocation retried once.
 */
#ifndef MX_STORAGE_H
#define MX_STORAGE_H

#include "base/base.h"

/* Allocator statistics for one context. */
typedef struct mx_storage_stats {
    size_t bytes_in_use;     /* handed out and not yet returned */
    size_t bytes_cached;     /* returned, kept for reuse */
    size_t bytes_peak;       /* largest bytes_in_use seen */
    uint64_t allocations;    /* requests served */
    uint64_t reuses;         /* requests served from the cache */
} mx_storage_stats;

typedef struct mx_storage_pool mx_storage_pool;

/* A pool for one context. MX_ERR_UNSUPPORTED / INVALID for a bad context. */
mx_status mx_storage_pool_create(mx_context ctx, mx_storage_pool **out);
/* Frees cached blocks. Blocks still handed out are the caller's leak. */
void mx_storage_pool_free(mx_storage_pool *pool);

/* A block of at least `bytes`; *out_capacity (may be NULL) gets the class size. */
mx_status mx_storage_alloc(mx_storage_pool *pool, size_t bytes, void **out, size_t *out_capacity);
/* Returns a block obtained with size `bytes` from this pool. */
void mx_storage_release(mx_storage_pool *pool, void *ptr, size_t bytes);
/* Gives every cached block back to the device. */
void mx_storage_release_cached(mx_storage_pool *pool);
void mx_storage_get_stats(mx_storage_pool *pool, mx_storage_stats *out);
mx_context mx_storage_context(const mx_storage_pool *pool);
/* The size class a request of `bytes` is served from. */
size_t mx_storage_round(size_t bytes);

#endif /* MX_STORAGE_H */
