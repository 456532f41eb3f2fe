/*
 * engine.h - the dependency engine (MXNet paper, section 3.2).
 *
 * Every resource that operations touch (an array's storage, an RNG state, a
 * workspace, a communication buffer) is tagged by an mx_engine_var. An
 * operation is pushed with the variables it reads and those it writes; the
 * engine runs it on a worker thread of its context's pool once every earlier
 * conflicting operation has finished:
 *   - reads of a variable run in parallel with each other;
 *   - a write waits for every earlier read and write of that variable, and
 *     later reads and writes wait for it (RAW, WAR and WAW respected);
 *   - operations touching disjoint variables run concurrently.
 * Order between conflicting operations is push order.
 *
 * Errors: when an operation's function fails, its status and message are
 * recorded on every variable it writes. A later operation that reads such a
 * variable (lists it in `reads`, also when it writes it too: an in-place
 * update) does not run; it passes the error on to the variables it writes.
 * An operation that only writes a tainted variable replaces its contents
 * and clears the error. The next mx_engine_wait_var() on a tainted variable
 * returns the error (and clears it: it has been reported), and
 * mx_engine_wait_all() returns the first error since the last wait_all.
 * The engine itself keeps running.
 *
 * Asynchronous operations (MXNet's PushAsync): the body of an op pushed
 * with mx_engine_push_async starts the work (hands it to a communication
 * thread, say) and returns; the worker is free again at once, but the op
 * counts as running - its variables stay held, waits wait for it - until
 * someone calls mx_engine_async_complete() on its handle. Completion then
 * releases the variables and records errors exactly as a synchronous op's
 * return would.
 *
 * CPU contexts: with config.cpu_contexts = N > 1, cpu(0)..cpu(N-1) each get
 * their own compute workers and kernel thread pool, the configured totals
 * split between them, so that data-parallel replicas on the host run side
 * by side instead of queuing on one pool. With 0 or 1 every CPU context
 * shares one pool set. CPU_PINNED is cpu(0); the I/O lane stays shared.
 *
 * Environment (MXNet's names), read by mx_engine_config_default(); counts
 * are totals, split across CPU contexts as described at cpu_contexts:
 *   MXNET_ENGINE_TYPE=NaiveEngine   run every operation synchronously inside
 *                                   push, on the pushing thread (debugging)
 *   MXNET_CPU_WORKER_NTHREADS=N     CPU compute workers (default: cores;
 *                                   a worker that finds the kernel pool
 *                                   busy runs its kernel alone)
 *   OMP_NUM_THREADS=N               threads of the kernel pools, the
 *                                   calling worker included (default:
 *                                   cores; lib/parallel)
 *   MXNET_CPU_IO_NTHREADS=N         CPU I/O + communication workers (1,
 *                                   shared by all CPU contexts)
 *   MXNET_GPU_WORKER_NTHREADS=N     compute workers per GPU (1)
 *   MXNET_GPU_COPY_NTHREADS=N       copy workers per GPU (1)
 */
#ifndef MX_ENGINE_H
#define MX_ENGINE_H

#include "base/base.h"
#include "parallel/parallel.h"
#include "profile/profile.h"

#include <stdbool.h>

typedef struct mx_engine mx_engine;
typedef struct mx_engine_var mx_engine_var;
/* The completion handle of a running asynchronous operation. */
typedef struct mx_engine_async mx_engine_async;

/* Which pool of a context runs an operation, so that compute, copies and
 * communication overlap instead of queuing behind each other. */
typedef enum mx_engine_lane {
    MX_LANE_COMPUTE = 0, /* kernels */
    MX_LANE_COPY = 1,    /* host<->device and device<->device copies */
    MX_LANE_IO = 2,      /* data loading, communication (KVStore, MPI) */
    MX_LANE_COUNT
} mx_engine_lane;

/* What a running operation is told about where it runs. */
typedef struct mx_exec_ctx {
    mx_context ctx;      /* the context the op was pushed for */
    mx_engine_lane lane;
    int worker;          /* index of the worker thread inside its pool */
    void *stream;        /* device stream of the worker (NULL on CPU) */
    mx_threadpool *pool; /* the kernel thread pool of the op's CPU context
                          * (cpu(0)'s for GPU ops), for CPU kernels that split work */
} mx_exec_ctx;

/* An operation body. Returns MX_OK, or a failure status after recording
 * the message with MX_ERROR (it is carried to the variables written). */
typedef mx_status (*mx_engine_fn)(void *payload, const mx_exec_ctx *exec);

/* An asynchronous operation body: starts the work and returns at once.
 * `exec` is valid only during the call; `done` until completion. Returns
 * MX_OK when the work was started, and then mx_engine_async_complete(done)
 * must follow exactly once (it may already have happened, on this thread,
 * before the body returns). A failure status (message recorded with
 * MX_ERROR) means nothing was started: the op completes with that error
 * and complete must not be called. */
typedef mx_status (*mx_engine_async_fn)(void *payload, const mx_exec_ctx *exec, mx_engine_async *done);

enum {
    /* Run even if a variable carries an error (frees and deletes). */
    MX_OP_IGNORE_ERRORS = 1u << 0,
};

typedef struct mx_engine_op {
    mx_engine_fn fn;              /* mx_engine_push: the body */
    mx_engine_async_fn async_fn;  /* mx_engine_push_async: the body (fn NULL) */
    void *payload;                /* passed to the body */
    void (*payload_free)(void *); /* called once after the op completed (or on a failed push) */
    mx_engine_var *const *reads;  /* variables read; duplicates are fine */
    int n_reads;
    mx_engine_var *const *writes; /* variables written; one in both lists is read-modify-write */
    int n_writes;
    mx_context ctx;               /* which device's pool runs it */
    mx_engine_lane lane;
    int priority;                 /* higher runs first among ready ops of a pool */
    unsigned flags;               /* MX_OP_* */
    const char *name;             /* for error messages; may be NULL */
    /* For the timeline (lib/profile): what the op is, e.g. "conv1
     * (Convolution) fwd" (NULL: name), read while the op runs, so it must
     * live as long as the payload; and the bytes it moves (0: none). */
    const char *profile_name;
    int64_t profile_bytes;
} mx_engine_op;

/* Called once on each worker thread before it runs anything (for example to
 * select a GPU and create its stream, stored in *stream). */
typedef mx_status (*mx_engine_worker_init)(mx_context ctx, mx_engine_lane lane,
                                           void **stream, void *user);
typedef void (*mx_engine_worker_exit)(mx_context ctx, mx_engine_lane lane,
                                      void *stream, void *user);

typedef struct mx_engine_config {
    bool naive;                 /* synchronous mode */
    int cpu_workers;
    int cpu_io_workers;
    int kernel_threads;         /* kernel pool size; 0: mx_threadpool_default_size() */
    /* CPU contexts with pools of their own: 0 or 1, one pool set for every
     * CPU context; N > 1, cpu(0)..cpu(N-1) each get max(1, cpu_workers / N)
     * compute workers and a kernel pool of max(1, kernel_threads / N)
     * threads (rounded down: replicas stepping in lock-step go at the pace
     * of the slowest, so a spare core given to one would buy nothing), and
     * a push for cpu(i >= N) fails. */
    int cpu_contexts;
    int gpu_workers;            /* per GPU */
    int gpu_copy_workers;       /* per GPU */
    mx_engine_worker_init worker_init; /* optional */
    mx_engine_worker_exit worker_exit; /* optional */
    void *worker_user;
} mx_engine_config;

/* Defaults, with the environment variables above applied. */
mx_engine_config mx_engine_config_default(void);

/* Creates an engine. Worker threads start lazily, per context and lane, on
 * the first push there. Returns MX_ERR_INVALID for bad counts. */
mx_status mx_engine_create(const mx_engine_config *config, mx_engine **out);

/* Waits for every pushed operation, stops the workers and frees the engine.
 * Variables not deleted yet are freed too. */
void mx_engine_free(mx_engine *engine);

bool mx_engine_is_naive(const mx_engine *engine);

/* The kernel thread pool of cpu(0) (also in the mx_exec_ctx of its ops),
 * for code that runs kernels outside an op. */
mx_threadpool *mx_engine_kernel_pool(mx_engine *engine);

/* The kernel thread pool that ops pushed for `ctx` get: cpu(i)'s for a CPU
 * context, cpu(0)'s for CPU_PINNED and GPUs. NULL for a CPU context the
 * engine does not have (cpu(i >= cpu_contexts) when cpu_contexts > 1). */
mx_threadpool *mx_engine_context_kernel_pool(mx_engine *engine, mx_context ctx);

/* CPU contexts with pools of their own: max(1, config.cpu_contexts). */
int mx_engine_cpu_contexts(const mx_engine *engine);

/* A new variable, or NULL (MX_ERR_NOMEM recorded). */
mx_engine_var *mx_engine_new_var(mx_engine *engine);

/* Deletes `var` once every operation pushed on it so far has finished. The
 * caller must not push on it afterwards. */
mx_status mx_engine_delete_var(mx_engine *engine, mx_engine_var *var);

/* Schedules an operation (op->fn set, op->async_fn NULL). Thread-safe; may
 * be called from inside running operations. Ownership of the payload
 * passes to the engine even when the push fails (payload_free is called).
 * Errors: MX_ERR_INVALID for a malformed op or a context the engine does
 * not have, MX_ERR_NOMEM, MX_ERR_RUNTIME (no worker thread could start). */
mx_status mx_engine_push(mx_engine *engine, const mx_engine_op *op);

/* Schedules an asynchronous operation (op->async_fn set, op->fn NULL);
 * otherwise as mx_engine_push. Once its dependencies are met the body runs
 * on a worker, which is free again when the body returns; the op finishes
 * at mx_engine_async_complete(). In NaiveEngine mode the body runs on the
 * pushing thread and push_async returns only after completion, so the
 * completion must not depend on the pusher doing anything more. An op that
 * is skipped (it reads a variable carrying an error) never runs its body.
 * mx_engine_free and the waits block until every pushed op completed. */
mx_status mx_engine_push_async(mx_engine *engine, const mx_engine_op *op);

/* Completes a running asynchronous operation: call exactly once per body
 * that returned MX_OK, from any thread (including inside the body, before
 * it returns). With a failure status, first record the message with
 * MX_ERROR on the calling thread; it is carried to the variables the op
 * writes, prefixed with the op's name, as a synchronous op's error is.
 * Releases the op's variables, runs payload_free (once the body has also
 * returned) and may start dependent ops. `done` is invalid afterwards. */
void mx_engine_async_complete(mx_engine_async *done, mx_status status);

/* Blocks until every operation pushed so far that writes `var` has finished
 * (reads may still be running). Returns the error recorded on the variable,
 * if any, and clears it. Never call from inside an operation. */
mx_status mx_engine_wait_var(mx_engine *engine, mx_engine_var *var);

/* Blocks until every operation pushed so far that reads or writes `var`
 * has finished, so the caller may overwrite it. Errors as wait_var. */
mx_status mx_engine_wait_var_write(mx_engine *engine, mx_engine_var *var);

/* Blocks until every operation pushed so far has finished. Returns the
 * first error raised since the previous wait_all, then forgets it. */
mx_status mx_engine_wait_all(mx_engine *engine);

/* Records every operation that runs from now on into p (NULL: stop), while
 * p is active: on the track of the worker that runs it ("cpu(0) compute
 * worker 1"), with its profile_name, category by lane, start and end; an
 * asynchronous op from its body's start to its completion on a shared
 * track per context and lane ("cpu(0) io async ops"). Engine bookkeeping
 * (waits, deletes) is not recorded. p must outlive its use: detach it
 * (NULL) after a wait_all before freeing it. */
void mx_engine_set_profiler(mx_engine *engine, mx_profiler *p);

/* Number of operations pushed and not yet finished (for tests and stats). */
long mx_engine_pending(mx_engine *engine);

#endif /* MX_ENGINE_H */
