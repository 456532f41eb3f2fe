/*
 * parallel.h - the kernels' own thread pool (what OpenMP is to MXNet's
 * operators) and per-thread scratch memory.
 *
 * Two cores shared by engine workers, OpenBLAS's helper threads and a
 * kernel's own threads lose a third of their time to oversubscription and
 * spin-yielding. So the engine owns one pool of as many threads as cores
 * (the calling thread counts as one), every CPU kernel that splits work does
 * it through mx_parallel_for on that pool, and OpenBLAS runs single-threaded
 * inside the pieces (lib/blas splits large products itself).
 *
 * A parallel region: the caller publishes the job, the helpers that are
 * awake join it, and everyone takes pieces of `grain` items from a shared
 * counter until none are left, so a helper that is descheduled costs only
 * the piece it holds. Helpers spin briefly after a region (the next one
 * usually follows within microseconds) and then sleep. One region runs at a
 * time: a second caller (another engine worker, or a kernel nested inside a
 * piece) finds the pool taken and runs its whole range itself, which keeps
 * the number of busy threads at the number of cores.
 */
#ifndef MX_PARALLEL_H
#define MX_PARALLEL_H

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mx_threadpool mx_threadpool;

/* Runs items [lo, hi); `worker` is in [0, mx_threadpool_size(pool)) and no
 * two pieces running at once share it, so it can index per-worker buffers
 * (0 is the calling thread, also when the range runs serially). */
typedef void (*mx_range_fn)(void *arg, int64_t lo, int64_t hi, int worker);

/* The thread count a pool gets by default: OMP_NUM_THREADS when set (as
 * MXNet's operators honour it), else the online cores. */
int mx_threadpool_default_size(void);

/* A pool of `size` threads in all, the caller included (size - 1 helpers
 * are started). size 1 makes every region serial. Also sets OpenBLAS to
 * one thread (see above). Errors: MX_ERR_INVALID, MX_ERR_NOMEM,
 * MX_ERR_RUNTIME (a thread could not start). */
mx_status mx_threadpool_create(int size, mx_threadpool **out);
void mx_threadpool_free(mx_threadpool *pool);

/* Threads a region may use: 1 for a NULL pool. */
int mx_threadpool_size(const mx_threadpool *pool);

/* fn over [0, n) in pieces of `grain` items (>= 1), on the pool's threads;
 * returns when every piece has run. Serial (one call, worker 0) when pool
 * is NULL or busy, or n <= grain. */
void mx_parallel_for(mx_threadpool *pool, int64_t n, int64_t grain, mx_range_fn fn, void *arg);

/* Pieces for n items split across the pool: n / (size * pieces_per_thread)
 * rounded up, at least min_grain. */
int64_t mx_parallel_grain(const mx_threadpool *pool, int64_t n, int pieces_per_thread, int64_t min_grain);

/* A buffer of at least `bytes` owned by the calling thread, 64-byte
 * aligned, valid until this thread's next call (grown, never shrunk; freed
 * when the thread exits). `slot` (0..MX_SCRATCH_SLOTS-1) picks one of a few
 * independent buffers for code that needs two at once. NULL with
 * MX_ERR_NOMEM recorded when it cannot grow. */
#define MX_SCRATCH_SLOTS 4
void *mx_thread_scratch(int slot, size_t bytes);

/* Scratch held for a whole kernel call (transformed filters, per-piece
 * weight gradients, the caller's own pieces' buffers), shared by every
 * thread that calls into one pool: a
 * caller takes a lease, uses its buffers until the call ends and gives it
 * back. Engine workers seldom run such kernels at once, yet per-thread
 * buffers kept one copy of the largest per worker (ResNet-50: 2 x 75 MB).
 * A free lease with the most memory is handed out, so a second one only
 * grows when two calls overlap. A NULL pool gives a NULL lease, whose
 * buffers are the thread's own scratch slots (mx_thread_scratch). */
typedef struct mx_scratch_lease mx_scratch_lease;
/* MX_ERR_NOMEM when a new lease cannot be allocated. */
mx_status mx_scratch_take(mx_threadpool *pool, mx_scratch_lease **out);
/* The lease's buffer `slot` (0..MX_SCRATCH_SLOTS-1), at least `bytes`,
 * 64-byte aligned, grown, never shrunk; NULL with MX_ERR_NOMEM recorded
 * when it cannot grow. */
void *mx_scratch_buffer(mx_threadpool *pool, mx_scratch_lease *lease, int slot, size_t bytes);
void mx_scratch_give(mx_threadpool *pool, mx_scratch_lease *lease);
/* Bytes held by the pool's leases, in use or not. */
size_t mx_scratch_held_bytes(mx_threadpool *pool);

#endif /* MX_PARALLEL_H */
