/*
 * engine.c - threaded dependency engine with per-variable request queues.
 *
 * Each variable keeps a FIFO of pending requests (read or write) and counts
 * of granted, still-running reads and writes. A request at the head of the
 * queue is granted when compatible with what runs: reads when no write runs,
 * a write when nothing runs. An operation holds a counter of its ungranted
 * requests; when it reaches zero the operation is handed to the pool of its
 * context and lane, where idle workers take the highest-priority ready op.
 * When it finishes, its requests are released and the queues advance.
 *
 * Pushes append to all their queues under one engine lock, so concurrent
 * pushes are atomic with respect to each other and cannot deadlock by
 * interleaving their appends.
 *
 * An asynchronous op is released by whichever comes last of its body's
 * return and its completion call (two holds on the op), so a completion
 * from inside the body cannot free the payload under it.
 */
#include "engine/engine.h"
#include "blas/blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct op_block op_block;

struct mx_engine_async {
    op_block *op;
};

/* What a NaiveEngine push of an asynchronous op blocks on. */
typedef struct naive_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} naive_wait;

/* Private op flag: the op is mx_engine_delete_var's; its completion frees
 * the variable. */
#define OP_DELETE_VAR (1u << 31)
/* Private op flag: engine bookkeeping (waits, deletes) that runs on the
 * thread that makes it ready instead of a worker, so a wait on cpu(1)'s
 * variable is never stuck behind cpu(0)'s busy workers. Its fn must be
 * quick, must not fail and must not touch the thread's error. */
#define OP_INLINE (1u << 30)

typedef struct var_request {
    op_block *op;
    bool write;
    struct var_request *next;
} var_request;

struct mx_engine_var {
    pthread_mutex_t mu;
    var_request *head, *tail; /* waiting, in push order */
    int running_reads;
    bool running_write;
    bool deleting;            /* the delete op has been pushed */
    mx_status error;          /* guarded by mu */
    char *error_message;      /* guarded by mu; heap */
    mx_engine_var *all_next, *all_prev; /* engine's list of live vars */
};

struct op_block {
    mx_engine_op desc;
    mx_engine *engine;
    mx_engine_var **vars;  /* reads first, then writes; deduplicated */
    int n_reads, n_writes;
    uint8_t *write_reads;  /* per write: also declared as a read */
    atomic_int waiting;    /* ungranted requests + 1 while pushing */
    uint64_t seq;
    bool deletes_var;      /* the delete op of its single write variable */
    op_block *ready_next;  /* intrusive list of ops made ready together */
    var_request requests_inline[4];
    var_request *requests;
    /* asynchronous ops only */
    mx_engine_async async;   /* the handle given to the body */
    atomic_int async_holds;  /* body return + completion still to come */
    atomic_bool async_completed;
    mx_status async_status;  /* written by the completion (or the failed body) */
    char *async_message;
    naive_wait *naive;       /* NaiveEngine: the blocked pusher */
    mx_profiler *prof;       /* profiling an asynchronous op: where, and since when */
    int64_t prof_start;
    mx_context prof_ctx;
};

typedef struct worker_pool worker_pool;

typedef struct worker_arg {
    mx_engine *engine;
    worker_pool *pool;
    int index;
} worker_arg;

struct worker_pool {
    mx_context ctx;
    mx_engine_lane lane;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    op_block **heap; /* max-heap by (priority, -seq) */
    int heap_size, heap_capacity;
    bool stopping;
    int n_threads;
    pthread_t *threads;
    worker_arg *args;
    worker_pool *next;
};

struct mx_engine {
    mx_engine_config config;
    pthread_mutex_t push_mu;    /* serialises queue appends across pushes */
    pthread_mutex_t state_mu;   /* pending count, first error, pools, var list */
    pthread_cond_t idle_cv;
    long pending;
    uint64_t next_seq;
    mx_status first_error;
    char *first_error_message;
    worker_pool *pools;
    mx_engine_var *vars;        /* live vars, freed at engine free */
    int n_cpu;                  /* CPU contexts with their own pools (>= 1) */
    mx_threadpool **kernel_pools; /* per CPU context, handed to ops through mx_exec_ctx */
    _Atomic(mx_profiler *) profiler; /* NULL: not profiling (one branch per op) */
};

/* ------------------------------------------------------------------ config */

static int env_count(const char *name, int fallback)
{
    long v = mx_env_long(name, fallback);
    return v < 1 ? 1 : (v > 256 ? 256 : (int)v);
}

mx_engine_config mx_engine_config_default(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    mx_engine_config c = {0};
    const char *type = getenv("MXNET_ENGINE_TYPE");
    c.naive = type && strcmp(type, "NaiveEngine") == 0;
    c.cpu_workers = env_count("MXNET_CPU_WORKER_NTHREADS", (int)cores);
    c.cpu_io_workers = env_count("MXNET_CPU_IO_NTHREADS", 1);
    c.gpu_workers = env_count("MXNET_GPU_WORKER_NTHREADS", 1);
    c.gpu_copy_workers = env_count("MXNET_GPU_COPY_NTHREADS", 1);
    return c;
}

mx_status mx_engine_create(const mx_engine_config *config, mx_engine **out)
{
    *out = NULL;
    mx_engine_config c = config ? *config : mx_engine_config_default();
    if (c.cpu_workers < 1 || c.cpu_io_workers < 1 || c.gpu_workers < 1 || c.gpu_copy_workers < 1)
        return MX_ERROR(MX_ERR_INVALID, "engine: worker counts must be >= 1 (cpu %d, io %d, gpu %d, gpu copy %d)",
                        c.cpu_workers, c.cpu_io_workers, c.gpu_workers, c.gpu_copy_workers);
    if (c.cpu_contexts < 0 || c.cpu_contexts > 256)
        return MX_ERROR(MX_ERR_INVALID, "engine: cpu_contexts must be in [0, 256], got %d", c.cpu_contexts);
    mx_engine *e = mx_calloc(1, sizeof(*e));
    if (!e) return MX_ERR_NOMEM;
    e->config = c;
    atomic_init(&e->profiler, NULL);
    e->n_cpu = c.cpu_contexts > 1 ? c.cpu_contexts : 1;
    e->kernel_pools = mx_calloc((size_t)e->n_cpu, sizeof(*e->kernel_pools));
    if (!e->kernel_pools) {
        free(e);
        return MX_ERR_NOMEM;
    }
    /* The cores are split, not multiplied: N pools of the full size would
     * oversubscribe them N times (see lib/parallel). */
    int kernel_total = c.kernel_threads > 0 ? c.kernel_threads : mx_threadpool_default_size();
    int kernel_each = kernel_total / e->n_cpu > 1 ? kernel_total / e->n_cpu : 1;
    for (int i = 0; i < e->n_cpu; i++) {
        mx_status ps = mx_threadpool_create(kernel_each, &e->kernel_pools[i]);
        if (ps != MX_OK) {
            for (int k = 0; k < i; k++) mx_threadpool_free(e->kernel_pools[k]);
            free(e->kernel_pools);
            free(e);
            return ps;
        }
    }
    /* OpenBLAS's buffers for every thread that may multiply at once: the
     * pools' helpers (a pool of N has N-1; its caller is the N-th) and
     * every CPU worker, each of which may be a pool's caller or multiply
     * on its own while the pool is taken. */
    int cpu_workers = c.cpu_workers / e->n_cpu > 1 ? c.cpu_workers / e->n_cpu : 1;
    mx_status bs = mx_blas_reserve(e->n_cpu * (kernel_each - 1) + e->n_cpu * cpu_workers);
    if (bs != MX_OK) {
        for (int k = 0; k < e->n_cpu; k++) mx_threadpool_free(e->kernel_pools[k]);
        free(e->kernel_pools);
        free(e);
        return bs;
    }
    pthread_mutex_init(&e->push_mu, NULL);
    pthread_mutex_init(&e->state_mu, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    *out = e;
    return MX_OK;
}

bool mx_engine_is_naive(const mx_engine *engine) { return engine->config.naive; }

int mx_engine_cpu_contexts(const mx_engine *engine) { return engine->n_cpu; }

/* Whether ctx is a context this engine runs ops for (device types are
 * checked separately). */
static bool context_known(const mx_engine *e, mx_context ctx)
{
    return ctx.dev_type != MX_DEV_CPU || e->n_cpu == 1 || (ctx.dev_id >= 0 && ctx.dev_id < e->n_cpu);
}

/* Index of the CPU context whose pools serve ctx: its own with several CPU
 * contexts, else 0 (also for CPU_PINNED and GPUs). ctx must be known. */
static int cpu_slot(const mx_engine *e, mx_context ctx)
{
    return ctx.dev_type == MX_DEV_CPU && e->n_cpu > 1 ? ctx.dev_id : 0;
}

/* ------------------------------------------------------------------ vars */

mx_engine_var *mx_engine_new_var(mx_engine *engine)
{
    mx_engine_var *v = mx_calloc(1, sizeof(*v));
    if (!v) return NULL;
    pthread_mutex_init(&v->mu, NULL);
    pthread_mutex_lock(&engine->state_mu);
    v->all_next = engine->vars;
    if (engine->vars) engine->vars->all_prev = v;
    engine->vars = v;
    pthread_mutex_unlock(&engine->state_mu);
    return v;
}

static void var_destroy(mx_engine_var *v)
{
    pthread_mutex_destroy(&v->mu);
    free(v->error_message);
    free(v);
}

static void var_unlink_and_destroy(mx_engine *engine, mx_engine_var *v)
{
    pthread_mutex_lock(&engine->state_mu);
    if (v->all_prev) v->all_prev->all_next = v->all_next;
    else engine->vars = v->all_next;
    if (v->all_next) v->all_next->all_prev = v->all_prev;
    pthread_mutex_unlock(&engine->state_mu);
    var_destroy(v);
}

/* Records (or, with MX_OK, clears) the error carried by a variable. */
static void var_set_error(mx_engine_var *v, mx_status status, const char *message)
{
    pthread_mutex_lock(&v->mu);
    free(v->error_message);
    v->error_message = NULL;
    v->error = status;
    if (status != MX_OK) v->error_message = strdup(message ? message : "");
    pthread_mutex_unlock(&v->mu);
}

/* ------------------------------------------------------------------ pools */

static bool heap_before(const op_block *a, const op_block *b)
{
    if (a->desc.priority != b->desc.priority) return a->desc.priority > b->desc.priority;
    return a->seq < b->seq;
}

static mx_status heap_push(worker_pool *p, op_block *op)
{
    if (p->heap_size == p->heap_capacity) {
        int cap = p->heap_capacity ? p->heap_capacity * 2 : 64;
        op_block **h = mx_realloc(p->heap, (size_t)cap * sizeof(*h));
        if (!h) return MX_ERR_NOMEM;
        p->heap = h;
        p->heap_capacity = cap;
    }
    int i = p->heap_size++;
    p->heap[i] = op;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!heap_before(p->heap[i], p->heap[parent])) break;
        op_block *t = p->heap[i];
        p->heap[i] = p->heap[parent];
        p->heap[parent] = t;
        i = parent;
    }
    return MX_OK;
}

static op_block *heap_pop(worker_pool *p)
{
    op_block *top = p->heap[0];
    p->heap[0] = p->heap[--p->heap_size];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, best = i;
        if (l < p->heap_size && heap_before(p->heap[l], p->heap[best])) best = l;
        if (r < p->heap_size && heap_before(p->heap[r], p->heap[best])) best = r;
        if (best == i) break;
        op_block *t = p->heap[i];
        p->heap[i] = p->heap[best];
        p->heap[best] = t;
        i = best;
    }
    return top;
}

static void run_op(mx_engine *engine, op_block *op, const mx_exec_ctx *exec,
                   mx_status forced, const char *forced_message);
static void op_complete(mx_engine *e, op_block *op, mx_status status, char *message, bool ran);

static void *worker_main(void *arg_)
{
    worker_arg *arg = arg_;
    worker_pool *p = arg->pool;
    mx_engine *e = arg->engine;
    mx_exec_ctx exec = {.ctx = p->ctx, .lane = p->lane, .worker = arg->index, .stream = NULL,
                        .pool = e->kernel_pools[0]};
    mx_status init_status = MX_OK;
    char init_message[512] = "";
    if (e->config.worker_init) {
        init_status = e->config.worker_init(p->ctx, p->lane, &exec.stream, e->config.worker_user);
        if (init_status != MX_OK) snprintf(init_message, sizeof(init_message), "%s", mx_last_error());
    }
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->heap_size == 0 && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (p->heap_size == 0) break; /* stopping and drained */
        op_block *op = heap_pop(p);
        pthread_mutex_unlock(&p->mu);
        /* Per op: a shared pool (the I/O lane, or every CPU context's with
         * one) serves several contexts. */
        exec.ctx = op->desc.ctx;
        exec.pool = e->kernel_pools[cpu_slot(e, op->desc.ctx)];
        run_op(e, op, &exec, init_status, init_message);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    if (e->config.worker_exit && init_status == MX_OK)
        e->config.worker_exit(p->ctx, p->lane, exec.stream, e->config.worker_user);
    return NULL;
}

static int pool_size_for(const mx_engine *e, mx_context ctx, mx_engine_lane lane)
{
    const mx_engine_config *c = &e->config;
    if (ctx.dev_type == MX_DEV_GPU) return lane == MX_LANE_COMPUTE ? c->gpu_workers : c->gpu_copy_workers;
    if (lane == MX_LANE_IO) return c->cpu_io_workers;
    return c->cpu_workers / e->n_cpu > 1 ? c->cpu_workers / e->n_cpu : 1; /* a share of the total */
}

/* CPU copies run on the compute pool: on the host they are kernels too. */
static mx_engine_lane effective_lane(mx_context ctx, mx_engine_lane lane)
{
    if (ctx.dev_type != MX_DEV_GPU && lane == MX_LANE_COPY) return MX_LANE_COMPUTE;
    return lane;
}

/* The pool for (ctx, lane), started on first use. state_mu must be held. */
static worker_pool *pool_get_locked(mx_engine *e, mx_context ctx, mx_engine_lane lane)
{
    /* One host pool set per CPU context; the I/O lane is shared (it mostly
     * waits on files and the network, not on cores). */
    if (ctx.dev_type != MX_DEV_GPU)
        ctx = (mx_context){MX_DEV_CPU, lane == MX_LANE_IO ? 0 : cpu_slot(e, ctx)};
    for (worker_pool *p = e->pools; p; p = p->next)
        if (mx_context_equal(p->ctx, ctx) && p->lane == lane) return p;
    worker_pool *p = mx_calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->ctx = ctx;
    p->lane = lane;
    p->n_threads = pool_size_for(e, ctx, lane);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = mx_calloc((size_t)p->n_threads, sizeof(*p->threads));
    p->args = mx_calloc((size_t)p->n_threads, sizeof(*p->args));
    if (!p->threads || !p->args) goto fail;
    int started = 0;
    for (; started < p->n_threads; started++) {
        p->args[started] = (worker_arg){.engine = e, .pool = p, .index = started};
        if (pthread_create(&p->threads[started], NULL, worker_main, &p->args[started]) != 0) break;
    }
    if (started == 0) {
        MX_ERROR(MX_ERR_RUNTIME, "engine: cannot start a worker thread");
        goto fail;
    }
    p->n_threads = started; /* fewer threads still make progress */
    p->next = e->pools;
    e->pools = p;
    return p;
fail:
    free(p->threads);
    free(p->args);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    return NULL;
}

static void pool_stop(worker_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->heap);
    free(p->threads);
    free(p->args);
    free(p);
}

/* ------------------------------------------------------------------ ops */

static void op_free(op_block *op)
{
    if (op->requests != op->requests_inline) free(op->requests);
    free(op->write_reads);
    free(op->vars);
    free(op);
}

/* Hands a ready op to its pool (pool was resolved at push time). */
static void dispatch(mx_engine *e, op_block *op)
{
    mx_engine_lane lane = effective_lane(op->desc.ctx, op->desc.lane);
    if (op->desc.flags & OP_INLINE) {
        mx_exec_ctx exec = {.ctx = op->desc.ctx, .lane = lane, .worker = -1, .stream = NULL,
                            .pool = e->kernel_pools[0]};
        op->desc.fn(op->desc.payload, &exec);
        op_complete(e, op, MX_OK, NULL, true);
        return;
    }
    pthread_mutex_lock(&e->state_mu);
    worker_pool *p = pool_get_locked(e, op->desc.ctx, lane);
    pthread_mutex_unlock(&e->state_mu);
    /* The pool exists: push() created it before any request was queued. */
    pthread_mutex_lock(&p->mu);
    mx_status s = heap_push(p, op);
    if (s == MX_OK) pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (s != MX_OK) {
        /* Out of memory growing the ready heap: run it here rather than
         * lose it; dependencies are already satisfied. */
        mx_exec_ctx exec = {.ctx = op->desc.ctx, .lane = lane, .worker = -1, .stream = NULL,
                            .pool = e->kernel_pools[cpu_slot(e, op->desc.ctx)]};
        run_op(e, op, &exec, MX_OK, NULL);
    }
}

/* Grants whatever the head of v's queue allows; ops whose last request
 * was granted are prepended to *ready. v->mu must be held. */
static void var_advance_locked(mx_engine_var *v, op_block **ready)
{
    while (v->head) {
        var_request *r = v->head;
        if (r->write) {
            if (v->running_reads > 0 || v->running_write) return;
            v->running_write = true;
        } else {
            if (v->running_write) return;
            v->running_reads++;
        }
        v->head = r->next;
        if (!v->head) v->tail = NULL;
        if (atomic_fetch_sub(&r->op->waiting, 1) == 1) {
            r->op->ready_next = *ready;
            *ready = r->op;
        }
        if (r->write) return;
    }
}

static void dispatch_list(mx_engine *e, op_block *ready)
{
    while (ready) {
        op_block *next = ready->ready_next;
        dispatch(e, ready);
        ready = next;
    }
}

/* Releases an op's requests, starts what that unblocks, frees the op. */
static void finish_op(mx_engine *e, op_block *op)
{
    op_block *ready = NULL;
    for (int i = 0; i < op->n_reads + op->n_writes; i++) {
        mx_engine_var *v = op->vars[i];
        pthread_mutex_lock(&v->mu);
        if (i >= op->n_reads) v->running_write = false;
        else v->running_reads--;
        var_advance_locked(v, &ready);
        pthread_mutex_unlock(&v->mu);
    }
    /* The delete op was the last one pushed on its variable and ran alone;
     * a queue that is not empty means misuse: leak it to the engine's
     * list (freed with the engine) rather than free it under a user. */
    mx_engine_var *doomed = NULL;
    if (op->deletes_var && op->n_writes == 1) {
        mx_engine_var *v = op->vars[op->n_reads];
        pthread_mutex_lock(&v->mu);
        bool idle = !v->head && v->running_reads == 0 && !v->running_write;
        pthread_mutex_unlock(&v->mu);
        if (idle) doomed = v;
    }
    op_free(op);
    if (doomed) var_unlink_and_destroy(e, doomed);
    dispatch_list(e, ready);
    pthread_mutex_lock(&e->state_mu);
    if (--e->pending == 0) pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->state_mu);
}

static void record_first_error(mx_engine *e, mx_status s, const char *message)
{
    pthread_mutex_lock(&e->state_mu);
    if (e->first_error == MX_OK) {
        e->first_error = s;
        free(e->first_error_message);
        e->first_error_message = strdup(message ? message : "");
    }
    pthread_mutex_unlock(&e->state_mu);
}

/* The message of a failed body, from this thread's last error: "name:
 * text". Heap; NULL when out of memory (the status still travels). */
static char *failure_message(const op_block *op, mx_status status)
{
    const char *text = mx_last_error();
    char buf[1200];
    if (op->desc.name && *op->desc.name)
        snprintf(buf, sizeof(buf), "%s: %s", op->desc.name, *text ? text : mx_status_name(status));
    else
        snprintf(buf, sizeof(buf), "%s", *text ? text : mx_status_name(status));
    return strdup(buf);
}

/* Ends an op: records its outcome on the variables it writes, frees the
 * payload and releases the variables. `ran`: the body was called (a skip
 * passes an input's error on without reporting it again). Takes message. */
static void op_complete(mx_engine *e, op_block *op, mx_status status, char *message, bool ran)
{
    for (int i = op->n_reads; i < op->n_reads + op->n_writes; i++) {
        /* A successful run leaves valid data behind; a failure or a skip
         * taints every output. */
        if (status != MX_OK || ran) var_set_error(op->vars[i], status, message);
    }
    if (status != MX_OK && ran) record_first_error(e, status, message);

    free(message);
    if (op->desc.payload_free) op->desc.payload_free(op->desc.payload);
    naive_wait *naive = op->naive;
    finish_op(e, op);
    if (naive) {
        pthread_mutex_lock(&naive->mu);
        naive->done = true;
        pthread_cond_signal(&naive->cv);
        pthread_mutex_unlock(&naive->mu);
    }
}

/* ---------------------------------------------------------------- profile */

static const char *const lane_names[MX_LANE_COUNT] = {"compute", "copy", "io"};
static const mx_profile_cat lane_cats[MX_LANE_COUNT] = {MX_PROFILE_COMPUTE, MX_PROFILE_COPY, MX_PROFILE_IO};

void mx_engine_set_profiler(mx_engine *e, mx_profiler *p) { atomic_store(&e->profiler, p); }

/* The track name of the thread running exec's op. */
static void worker_track_name(void *user, char *buf, size_t size)
{
    const mx_exec_ctx *exec = user;
    char ctx[32];
    mx_context pool_ctx = exec->ctx;
    if (pool_ctx.dev_type != MX_DEV_GPU && exec->lane == MX_LANE_IO) pool_ctx = mx_cpu(); /* shared I/O pool */
    mx_context_str(pool_ctx, ctx, sizeof(ctx));
    if (exec->worker < 0) snprintf(buf, size, "%s %s (calling thread)", ctx, lane_names[exec->lane]);
    else snprintf(buf, size, "%s %s worker %d", ctx, lane_names[exec->lane], exec->worker);
}

static const char *op_profile_name(const op_block *op)
{
    return op->desc.profile_name ? op->desc.profile_name : op->desc.name ? op->desc.name : "op";
}

/* A synchronous op that ran from start_ns to now on exec's worker. */
static void profile_sync(mx_profiler *p, const op_block *op, const mx_exec_ctx *exec, int64_t start_ns)
{
    mx_profile_event ev = {.name = op_profile_name(op), .cat = lane_cats[op->desc.lane], .start_ns = start_ns,
                           .end_ns = mx_profile_now_ns(), .bytes = op->desc.profile_bytes};
    mx_profiler_record(p, &ev, worker_track_name, (void *)exec);
}

/* An asynchronous op, at its completion. */
static void profile_async(const op_block *op)
{
    char track[64], ctx[32];
    mx_context c = op->prof_ctx;
    if (c.dev_type != MX_DEV_GPU && op->desc.lane == MX_LANE_IO) c = mx_cpu();
    snprintf(track, sizeof(track), "%s %s async ops", mx_context_str(c, ctx, sizeof(ctx)), lane_names[op->desc.lane]);
    mx_profile_event ev = {.name = op_profile_name(op), .cat = lane_cats[op->desc.lane], .start_ns = op->prof_start,
                           .end_ns = mx_profile_now_ns(), .bytes = op->desc.profile_bytes};
    mx_profiler_record_on(op->prof, mx_profiler_shared_track(op->prof, track), &ev);
}

/* Drops `n` holds of an asynchronous op; the last one ends it. The atomic
 * orders the other party's async_status write before the read here. */
static void async_release(op_block *op, int n)
{
    if (atomic_fetch_sub(&op->async_holds, n) == n) {
        if (op->prof) profile_async(op);
        op_complete(op->engine, op, op->async_status, op->async_message, true);
    }
}

void mx_engine_async_complete(mx_engine_async *done, mx_status status)
{
    if (!done) return;
    op_block *op = done->op;
    op->async_status = status;
    op->async_message = status != MX_OK ? failure_message(op, status) : NULL;
    atomic_store(&op->async_completed, true);
    async_release(op, 1);
}

/* Starts an asynchronous body; the op ends at the later of its return and
 * its completion. */
static void run_async(op_block *op, const mx_exec_ctx *exec)
{
    atomic_store(&op->async_holds, 2);
    atomic_store(&op->async_completed, false);
    op->async_status = MX_OK;
    op->async_message = NULL;
    op->async.op = op;
    op->prof = atomic_load_explicit(&op->engine->profiler, memory_order_acquire);
    if (op->prof) {
        op->prof_start = mx_profile_now_ns();
        op->prof_ctx = exec->ctx;
    }
    mx_error_clear();
    mx_status s = op->desc.async_fn(op->desc.payload, exec, &op->async);
    if (s == MX_OK) {
        async_release(op, 1);
        return;
    }
    char *message = failure_message(op, s);
    if (!atomic_load(&op->async_completed)) {
        /* Nothing was started: the failure is the completion too. */
        op->async_status = s;
        op->async_message = message;
        async_release(op, 2);
        return;
    }
    /* Misuse (completed, then failed): the op is still ours (our hold), so
     * keep a failure rather than lose it. */
    if (op->async_status == MX_OK) {
        op->async_status = s;
        free(op->async_message);
        op->async_message = message;
    } else {
        free(message);
    }
    async_release(op, 1);
}

/* Runs an op whose requests are all granted, records errors, releases
 * (an asynchronous op: starts it). A `forced` failure (its worker could
 * not initialise its device) fails the op without running it. */
static void run_op(mx_engine *e, op_block *op, const mx_exec_ctx *exec,
                   mx_status forced, const char *forced_message)
{
    mx_status status = forced;
    char *message = forced != MX_OK ? strdup(forced_message ? forced_message : "") : NULL;
    if (forced != MX_OK) record_first_error(e, forced, message);
    if (status == MX_OK && !(op->desc.flags & MX_OP_IGNORE_ERRORS)) {
        /* Only what the op reads can poison it; a pure write replaces. */
        for (int i = 0; i < op->n_reads + op->n_writes && status == MX_OK; i++) {
            if (i >= op->n_reads && !op->write_reads[i - op->n_reads]) continue;
            mx_engine_var *v = op->vars[i];
            pthread_mutex_lock(&v->mu);
            if (v->error != MX_OK) {
                status = v->error;
                message = strdup(v->error_message ? v->error_message : "");
            }
            pthread_mutex_unlock(&v->mu);
        }
    }
    if (status != MX_OK) {
        op_complete(e, op, status, message, false);
        return;
    }
    if (op->desc.async_fn) {
        run_async(op, exec);
        return;
    }
    mx_error_clear();
    mx_profiler *prof = atomic_load_explicit(&e->profiler, memory_order_acquire);
    int64_t start_ns = prof ? mx_profile_now_ns() : 0;
    status = op->desc.fn(op->desc.payload, exec);
    if (prof) profile_sync(prof, op, exec, start_ns);
    op_complete(e, op, status, status != MX_OK ? failure_message(op, status) : NULL, true);
}

static bool contains(mx_engine_var *const *list, int n, const mx_engine_var *v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v) return true;
    return false;
}

/* mx_engine_push and mx_engine_push_async: `async` says which body the op
 * must carry. */
static mx_status push(mx_engine *e, const mx_engine_op *desc, bool async)
{
    mx_status status = MX_OK;
    op_block *op = NULL;
    if (desc && (async ? !desc->async_fn || desc->fn : !desc->fn || desc->async_fn)) {
        status = MX_ERROR(MX_ERR_INVALID, "engine: %s%s%s needs %s and no %s", async ? "push_async" : "push",
                          desc->name ? " of " : "", desc->name ? desc->name : "", async ? "async_fn" : "fn",
                          async ? "fn" : "async_fn");
        goto fail;
    }
    if (!desc || desc->n_reads < 0 || desc->n_writes < 0 ||
        (desc->n_reads > 0 && !desc->reads) || (desc->n_writes > 0 && !desc->writes) ||
        (unsigned)desc->lane >= MX_LANE_COUNT) {
        status = MX_ERROR(MX_ERR_INVALID, "engine: push of a malformed operation%s%s",
                          desc && desc->name ? " " : "", desc && desc->name ? desc->name : "");
        goto fail;
    }
    if (desc->ctx.dev_type != MX_DEV_CPU && desc->ctx.dev_type != MX_DEV_GPU &&
        desc->ctx.dev_type != MX_DEV_CPU_PINNED) {
        status = MX_ERROR(MX_ERR_INVALID, "engine: push for unknown device type %d", (int)desc->ctx.dev_type);
        goto fail;
    }
    if (!context_known(e, desc->ctx)) {
        char name[32];
        status = MX_ERROR(MX_ERR_INVALID, "engine: %s%s%spush for %s, but the engine has %d CPU contexts (cpu(0)..cpu(%d))",
                          desc->name ? "op " : "", desc->name ? desc->name : "", desc->name ? ": " : "",
                          mx_context_str(desc->ctx, name, sizeof(name)), e->n_cpu, e->n_cpu - 1);
        goto fail;
    }
    op = mx_calloc(1, sizeof(*op));
    int total = desc->n_reads + desc->n_writes;
    if (!op || !(op->vars = mx_malloc((size_t)(total ? total : 1) * sizeof(*op->vars))) ||
        !(op->write_reads = mx_calloc((size_t)(total ? total : 1), 1))) {
        status = MX_ERR_NOMEM;
        goto fail;
    }
    op->desc = *desc;
    op->engine = e;
    op->deletes_var = (desc->flags & OP_DELETE_VAR) != 0;
    /* Deduplicate: reads that are also written become writes. */
    for (int i = 0; i < desc->n_reads; i++) {
        mx_engine_var *v = desc->reads[i];
        if (!v) { status = MX_ERROR(MX_ERR_INVALID, "engine: NULL read variable"); goto fail; }
        if (contains(desc->writes, desc->n_writes, v) || contains(op->vars, op->n_reads, v)) continue;
        op->vars[op->n_reads++] = v;
    }
    for (int i = 0; i < desc->n_writes; i++) {
        mx_engine_var *v = desc->writes[i];
        if (!v) { status = MX_ERROR(MX_ERR_INVALID, "engine: NULL write variable"); goto fail; }
        if (contains(op->vars + op->n_reads, op->n_writes, v)) continue;
        op->write_reads[op->n_writes] = contains(desc->reads, desc->n_reads, v);
        op->vars[op->n_reads + op->n_writes++] = v;
    }
    int n_vars = op->n_reads + op->n_writes;

    if (e->config.naive) {
        /* Everything pushed before has already run: execute right here. */
        pthread_mutex_lock(&e->state_mu);
        e->pending++;
        op->seq = e->next_seq++;
        pthread_mutex_unlock(&e->state_mu);
        for (int i = 0; i < n_vars; i++) {
            pthread_mutex_lock(&op->vars[i]->mu);
            if (i < op->n_reads) op->vars[i]->running_reads++;
            else op->vars[i]->running_write = true;
            pthread_mutex_unlock(&op->vars[i]->mu);
        }
        mx_exec_ctx exec = {.ctx = desc->ctx, .lane = desc->lane, .worker = 0, .stream = NULL,
                            .pool = e->kernel_pools[cpu_slot(e, desc->ctx)]};
        /* An asynchronous op blocks the pusher until it completes, so that
         * the synchronous engine stays synchronous. */
        naive_wait naive = {.done = false};
        if (async) {
            pthread_mutex_init(&naive.mu, NULL);
            pthread_cond_init(&naive.cv, NULL);
            op->naive = &naive;
        }
        /* The op runs on the caller's thread: keep the caller's error. */
        mx_error_state saved;
        mx_error_save(&saved);
        mx_status init = MX_OK;
        if (e->config.worker_init && desc->ctx.dev_type == MX_DEV_GPU)
            init = e->config.worker_init(desc->ctx, desc->lane, &exec.stream, e->config.worker_user);
        if (init != MX_OK) {
            /* Reported through the op's outputs, as a worker would. */
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", mx_last_error());
            run_op(e, op, &exec, init, msg);
        } else {
            run_op(e, op, &exec, MX_OK, NULL);
        }
        if (async) {
            pthread_mutex_lock(&naive.mu);
            while (!naive.done) pthread_cond_wait(&naive.cv, &naive.mu);
            pthread_mutex_unlock(&naive.mu);
            pthread_mutex_destroy(&naive.mu);
            pthread_cond_destroy(&naive.cv);
        }
        mx_error_restore(&saved);
        if (init == MX_OK && e->config.worker_exit && desc->ctx.dev_type == MX_DEV_GPU)
            e->config.worker_exit(desc->ctx, desc->lane, exec.stream, e->config.worker_user);
        return MX_OK;
    }

    op->requests = n_vars <= 4 ? op->requests_inline : mx_calloc((size_t)n_vars, sizeof(var_request));
    if (!op->requests) { status = MX_ERR_NOMEM; goto fail; }
    atomic_init(&op->waiting, n_vars + 1);

    /* Make sure the pool exists before the op can become ready, so that a
     * failure to start threads is reported here and not lost. */
    pthread_mutex_lock(&e->state_mu);
    worker_pool *pool = pool_get_locked(e, desc->ctx, effective_lane(desc->ctx, desc->lane));
    if (pool) {
        e->pending++;
        op->seq = e->next_seq++;
    }
    pthread_mutex_unlock(&e->state_mu);
    if (!pool) { status = mx_last_status() ? mx_last_status() : MX_ERR_RUNTIME; goto fail; }

    op_block *ready = NULL;
    pthread_mutex_lock(&e->push_mu);
    for (int i = 0; i < n_vars; i++) {
        mx_engine_var *v = op->vars[i];
        var_request *r = &op->requests[i];
        r->op = op;
        r->write = i >= op->n_reads;
        r->next = NULL;
        pthread_mutex_lock(&v->mu);
        if (v->tail) v->tail->next = r;
        else v->head = r;
        v->tail = r;
        var_advance_locked(v, &ready);
        pthread_mutex_unlock(&v->mu);
    }
    pthread_mutex_unlock(&e->push_mu);
    /* An append changes no running state, so it can grant only this op's
     * own request; the +1 held back above keeps the op from being made
     * ready in there. Release it now. */
    if (atomic_fetch_sub(&op->waiting, 1) == 1) dispatch(e, op);
    return MX_OK;

fail:
    if (op) {
        free(op->write_reads);
        free(op->vars);
        free(op);
    }
    if (desc && desc->payload_free) desc->payload_free(desc->payload);
    return status;
}

mx_status mx_engine_push(mx_engine *e, const mx_engine_op *op) { return push(e, op, false); }

mx_status mx_engine_push_async(mx_engine *e, const mx_engine_op *op) { return push(e, op, true); }

/* ------------------------------------------------------------------ waits */

typedef struct wait_signal {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    mx_engine_var *var;
    mx_status status;
    char message[1024];
} wait_signal;

static mx_status wait_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    wait_signal *w = payload;
    mx_engine_var *v = w->var;
    pthread_mutex_lock(&v->mu);
    w->status = v->error;
    if (v->error != MX_OK) {
        snprintf(w->message, sizeof(w->message), "%s", v->error_message ? v->error_message : "");
        free(v->error_message);
        v->error_message = NULL;
        v->error = MX_OK; /* reported once */
    }
    pthread_mutex_unlock(&v->mu);
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return MX_OK;
}

/* Pushes a signalling op reading (or writing) var and blocks until it ran. */
static mx_status wait_var(mx_engine *e, mx_engine_var *var, bool for_write)
{
    if (!var) return MX_ERROR(MX_ERR_INVALID, "engine: wait on a NULL variable");
    /* Fast path: nothing queued and no conflicting op running (no write;
     * for a write-wait no read either) means every op pushed so far that
     * matters has finished: report and clear the error as wait_fn would,
     * without a round trip through a worker. Taking v->mu orders this
     * thread after the finished ops (finish_op released it). */
    pthread_mutex_lock(&var->mu);
    if (!var->head && !var->running_write && (!for_write || var->running_reads == 0)) {
        mx_status s = var->error;
        char *message = var->error_message;
        var->error = MX_OK; /* reported once */
        var->error_message = NULL;
        pthread_mutex_unlock(&var->mu);
        if (s != MX_OK) mx_error_set_message(s, message ? message : "");
        free(message);
        return s;
    }
    pthread_mutex_unlock(&var->mu);
    wait_signal w = {.var = var, .status = MX_OK};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    mx_engine_var *vars[1] = {var};
    mx_engine_op op = {.fn = wait_fn, .payload = &w, .ctx = mx_cpu(), .lane = MX_LANE_COMPUTE,
                       .flags = MX_OP_IGNORE_ERRORS | OP_INLINE, .name = "wait"};
    if (for_write) {
        op.writes = vars;
        op.n_writes = 1;
    } else {
        op.reads = vars;
        op.n_reads = 1;
    }
    mx_status s = mx_engine_push(e, &op);
    if (s == MX_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        s = w.status;
        if (s != MX_OK) mx_error_set_message(s, w.message);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return s;
}

mx_status mx_engine_wait_var(mx_engine *e, mx_engine_var *var) { return wait_var(e, var, false); }

mx_status mx_engine_wait_var_write(mx_engine *e, mx_engine_var *var) { return wait_var(e, var, true); }

mx_status mx_engine_wait_all(mx_engine *e)
{
    pthread_mutex_lock(&e->state_mu);
    while (e->pending > 0) pthread_cond_wait(&e->idle_cv, &e->state_mu);
    mx_status s = e->first_error;
    if (s != MX_OK) {
        mx_error_set_message(s, e->first_error_message);
        free(e->first_error_message);
        e->first_error_message = NULL;
        e->first_error = MX_OK;
    }
    pthread_mutex_unlock(&e->state_mu);
    return s;
}

long mx_engine_pending(mx_engine *e)
{
    pthread_mutex_lock(&e->state_mu);
    long n = e->pending;
    pthread_mutex_unlock(&e->state_mu);
    return n;
}

static mx_status noop_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)payload;
    (void)exec;
    return MX_OK;
}

mx_status mx_engine_delete_var(mx_engine *e, mx_engine_var *var)
{
    if (!var) return MX_OK;
    pthread_mutex_lock(&var->mu);
    bool twice = var->deleting;
    var->deleting = true;
    pthread_mutex_unlock(&var->mu);
    if (twice) return MX_ERROR(MX_ERR_INVALID, "engine: variable deleted twice");
    /* A write after everything pushed so far; its completion frees var. */
    mx_engine_var *writes[1] = {var};
    mx_engine_op op = {.fn = noop_fn, .writes = writes, .n_writes = 1, .ctx = mx_cpu(),
                       .lane = MX_LANE_COMPUTE, .flags = MX_OP_IGNORE_ERRORS | OP_DELETE_VAR | OP_INLINE,
                       .name = "delete"};
    return mx_engine_push(e, &op);
}

void mx_engine_free(mx_engine *e)
{
    if (!e) return;
    mx_engine_wait_all(e);
    pthread_mutex_lock(&e->state_mu);
    worker_pool *pools = e->pools;
    e->pools = NULL;
    mx_engine_var *vars = e->vars;
    e->vars = NULL;
    pthread_mutex_unlock(&e->state_mu);
    while (pools) {
        worker_pool *next = pools->next;
        pool_stop(pools);
        pools = next;
    }
    while (vars) {
        mx_engine_var *next = vars->all_next;
        var_destroy(vars);
        vars = next;
    }
    free(e->first_error_message);
    pthread_mutex_destroy(&e->push_mu);
    pthread_mutex_destroy(&e->state_mu);
    pthread_cond_destroy(&e->idle_cv);
    for (int i = 0; i < e->n_cpu; i++) mx_threadpool_free(e->kernel_pools[i]);
    free(e->kernel_pools);
    free(e);
}

mx_threadpool *mx_engine_kernel_pool(mx_engine *e) { return e->kernel_pools[0]; }

mx_threadpool *mx_engine_context_kernel_pool(mx_engine *e, mx_context ctx)
{
    if (!context_known(e, ctx)) return NULL;
    return e->kernel_pools[cpu_slot(e, ctx)];
}
