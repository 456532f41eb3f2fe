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
 * Environment (MXNet's names), read by mx_engine_config_default():
 *   MXNET_ENGINE_TYPE=NaiveEngine   run every operation synchronously inside
 *                                   push, on the pushing thread (debugging)
 *   MXNET_CPU_WORKER_NTHREADS=N     CPU compute workers (default: cores;
 *                                   a worker that finds the kernel pool
 *                                   busy runs its kernel alone)
 *   OMP_NUM_THREADS=N               threads of the kernel pool, the
 *                                   calling worker included (default:
 *                                   cores; lib/parallel)
 *   MXNET_CPU_IO_NTHREADS=N         CPU I/O + communication workers (1)
 *   MXNET_GPU_WORKER_NTHREADS=N     compute workers per GPU (1)
 *   MXNET_GPU_COPY_NTHREADS=N       copy workers per GPU (1)
 */
#ifndef MX_ENGINE_H
#define MX_ENGINE_H

#include "base/base.h"
#include "parallel/parallel.h"

#include <stdbool.h>

typedef struct mx_engine mx_engine;
typedef struct mx_engine_var mx_engine_var;

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
    mx_threadpool *pool; /* the engine's kernel thread pool, for CPU kernels that split work */
} mx_exec_ctx;

/* An operation body. Returns MX_OK, or a failure status after recording
 * the message with MX_ERROR (it is carried to the variables written). */
typedef mx_status (*mx_engine_fn)(void *payload, const mx_exec_ctx *exec);

enum {
    /* Run even if a variable carries an error (frees and deletes). */
    MX_OP_IGNORE_ERRORS = 1u << 0,
};

typedef struct mx_engine_op {
    mx_engine_fn fn;
    void *payload;                /* passed to fn */
    void (*payload_free)(void *); /* called once after fn (or on a failed push) */
    mx_engine_var *const *reads;  /* variables read; duplicates are fine */
    int n_reads;
    mx_engine_var *const *writes; /* variables written; one in both lists is read-modify-write */
    int n_writes;
    mx_context ctx;               /* which device's pool runs it */
    mx_engine_lane lane;
    int priority;                 /* higher runs first among ready ops of a pool */
    unsigned flags;               /* MX_OP_* */
    const char *name;             /* for error messages; may be NULL */
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

/* The kernel thread pool (also in every op's mx_exec_ctx), for code that
 * runs kernels outside an op. */
mx_threadpool *mx_engine_kernel_pool(mx_engine *engine);

/* A new variable, or NULL (MX_ERR_NOMEM recorded). */
mx_engine_var *mx_engine_new_var(mx_engine *engine);

/* Deletes `var` once every operation pushed on it so far has finished. The
 * caller must not push on it afterwards. */
mx_status mx_engine_delete_var(mx_engine *engine, mx_engine_var *var);

/* Schedules an operation. Thread-safe; may be called from inside running
 * operations. Ownership of the payload passes to the engine even when the
 * push fails (payload_free is called). */
mx_status mx_engine_push(mx_engine *engine, const mx_engine_op *op);

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

/* Number of operations pushed and not yet finished (for tests and stats). */
long mx_engine_pending(mx_engine *engine);

#endif /* MX_ENGINE_H */
