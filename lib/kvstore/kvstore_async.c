/*
 * kvstore_async.c - dist_async: MXNet's asynchronous parameter server on
 * lib/comm's calls (kvstore.h says what it guarantees and why the server
 * is a thread of rank 0).
 *
 * Worker side, every rank: push(key) sums the devices' gradients on the
 * CPU (merge.c), then an asynchronous engine op sends the sum to the
 * server and completes on its answer (the update is applied). pull(key) is
 * an engine op that asks for the weight and writes the answer into the
 * key's `cache`, from which the devices' arrays are copied. The push op
 * also writes the cache's variable (without touching its bytes), so a
 * key's pull waits for this worker's push of it, as MXNet's comm buffer
 * orders them; keys do not wait for each other. Nothing is collective
 * after init, so no order between ranks is needed.
 *
 * Server side, rank 0: the comm thread hands each request to the server
 * thread's queue; the server applies them one at a time, in arrival order:
 * a push copies the gradient into the key's `grad` array and runs the
 * updater on `stored` (engine ops, as everywhere), a pull reads `stored`
 * (waiting for the updates pushed before it). mx_kvstore_lock_updater holds
 * the server between requests so that rank 0's trainer may read the
 * optimizer and the weights for a checkpoint, or restore them.
 */
#include "kvstore/kvstore_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_RANK 0
#define SERVICE 0 /* lib/comm's service number of the server */

/* A push is answered with the weight as its update left it, which the pull
 * that follows every push in training takes from the cache: one round trip
 * to the server per key and step instead of two. */
enum { OP_PUSH = 1, OP_PULL = 2 };

/* The head of every request. */
typedef struct ps_head {
    int32_t op;
    int32_t key;
    int64_t count; /* elements of the key, as the worker knows it */
    int32_t dtype;
    int32_t pad;
} ps_head;

typedef struct async_entry {
    mx_ndarray *cache;     /* NULL: key not initialised. Where pulls land. */
    bool pushed;           /* the cache holds the answer of a push not pulled yet */
    kv_merge merge;
    mx_ndarray *stored;    /* the server's weight (server rank only) */
    mx_ndarray *grad;      /* the server's copy of the gradient being applied */
} async_entry;

typedef struct ps_request {
    int source;
    uint64_t id;
    void *data;
    size_t bytes;
    struct ps_request *next;
} ps_request;

typedef struct kv_async {
    mx_runtime *rt;
    mx_comm *comm;
    bool is_server;
    async_entry *entries;
    int n_entries;

    /* Calls in flight from this worker (for wait_comm) and the first failure. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t in_flight;
    mx_status failed;
    char failed_message[1200];

    /* The server (is_server only). */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t smu;
    pthread_cond_t scv;   /* to the server: a request, a release, or stop */
    pthread_cond_t sidle; /* from the server: a request finished */
    ps_request *head, *tail;
    bool stopping, busy;
    int holds;            /* mx_kvstore_lock_updater nesting */
    mx_kvstore_updater updater;
    bool serving;         /* registered with the comm */
} kv_async;

static mx_comm_dtype comm_dtype(mx_dtype t) { return t == MX_FLOAT64 ? MX_COMM_FLOAT64 : MX_COMM_FLOAT32; }

static async_entry *find_entry(kv_async *kv, int key)
{
    return key >= 0 && key < kv->n_entries && kv->entries[key].cache ? &kv->entries[key] : NULL;
}

/* ---------------------------------------------------------------- server */

static mx_status serve_push(async_entry *e, int key, const void *grad, size_t bytes,
                            const mx_kvstore_updater *updater)
{
    MX_TRY(mx_ndarray_from_host(e->grad, grad, bytes));
    if (updater->fn) return updater->fn(key, e->grad, e->stored, updater->user);
    return mx_nd_copy(e->stored, e->grad);
}

static void server_track_name(void *user, char *buf, size_t size)
{
    (void)user;
    snprintf(buf, size, "kvstore dist_async server (rank %d)", SERVER_RANK);
}

/* Applies one request and answers it. With a profiler (the comm's, which
 * stays alive until the server thread has stopped: kvstore.h), the request
 * is one event on the server thread's track, from the server taking it to
 * just before its answer: category I/O, as the kvstore's operations of the workers (the
 * update it starts is the optimizer's own compute event). */
static void serve_one(kv_async *kv, ps_request *r, const mx_kvstore_updater *updater)
{
    mx_profiler *prof = mx_comm_profiler(kv->comm);
    int64_t t0 = prof && mx_profiler_active(prof) ? mx_profile_now_ns() : 0;
    ps_head h = {0};
    mx_status s = MX_OK;
    const void *answer = NULL;
    size_t answer_bytes = 0;
    async_entry *e = NULL;
    if (r->bytes < sizeof(h)) {
        s = MX_ERROR(MX_ERR_INVALID, "a request of %zu bytes is not one of this server's", r->bytes);
    } else {
        memcpy(&h, r->data, sizeof(h));
        e = find_entry(kv, h.key);
        if (!e)
            s = MX_ERROR(MX_ERR_INVALID, "key %d has not been initialised on the server", (int)h.key);
        else if (h.count != mx_ndarray_size(e->stored) || h.dtype != (int32_t)mx_ndarray_dtype(e->stored))
            s = MX_ERROR(MX_ERR_INVALID, "key %d: the worker has %lld elements of dtype %d, the server %lld of %s",
                         (int)h.key, (long long)h.count, (int)h.dtype, (long long)mx_ndarray_size(e->stored),
                         mx_dtype_name(mx_ndarray_dtype(e->stored)));
    }
    size_t nbytes = e ? mx_ndarray_nbytes(e->stored) : 0;
    if (s == MX_OK && h.op == OP_PUSH) {
        if (r->bytes != sizeof(h) + nbytes)
            s = MX_ERROR(MX_ERR_INVALID, "push of key %d: %zu bytes of gradient, the key has %zu", (int)h.key,
                         r->bytes - sizeof(h), nbytes);
        else
            s = serve_push(e, h.key, (const char *)r->data + sizeof(h), nbytes, updater);
    }
    if (s == MX_OK && (h.op == OP_PULL || h.op == OP_PUSH)) {
        /* The answer is the weight itself (host memory, made on the CPU at
         * init), once the update's writes are done: mx_comm_reply copies it
         * before it returns, and only this thread updates it. (An answer
         * buffer in between was a second copy of every weight per push.) */
        s = mx_ndarray_wait_to_read(e->stored);
        answer = mx_ndarray_data(e->stored);
        answer_bytes = nbytes;
    } else if (s == MX_OK) {
        s = MX_ERROR(MX_ERR_INVALID, "unknown request %d", (int)h.op);
    }
    char message[1024] = "";
    if (s != MX_OK) snprintf(message, sizeof(message), "%s", mx_last_error());
    /* Before the answer, so that a worker whose wait ends with it finds the
     * event recorded (and may stop the profiler). */
    if (t0 && s == MX_OK) {
        char name[96];
        snprintf(name, sizeof(name), "server %s of key %d %s rank %d", h.op == OP_PUSH ? "push" : "pull", (int)h.key,
                 h.op == OP_PUSH ? "from" : "for", r->source);
        mx_profile_event ev = {.name = name, .cat = MX_PROFILE_IO, .start_ns = t0, .end_ns = mx_profile_now_ns(),
                               .bytes = (int64_t)nbytes};
        mx_profiler_record(prof, &ev, server_track_name, NULL);
    }
    /* A failed answer fails the comm, which the caller sees as well. */
    (void)mx_comm_reply(kv->comm, r->source, r->id, s, message, answer, s == MX_OK ? answer_bytes : 0);
}

static void *server_main(void *arg)
{
    kv_async *kv = arg;
    pthread_mutex_lock(&kv->smu);
    for (;;) {
        while (!kv->stopping && (!kv->head || kv->holds > 0)) pthread_cond_wait(&kv->scv, &kv->smu);
        if (kv->stopping) break;
        ps_request *r = kv->head;
        kv->head = r->next;
        if (!kv->head) kv->tail = NULL;
        kv->busy = true;
        mx_kvstore_updater updater = kv->updater;
        pthread_mutex_unlock(&kv->smu);
        serve_one(kv, r, &updater);
        mx_error_clear();
        free(r->data);
        free(r);
        pthread_mutex_lock(&kv->smu);
        kv->busy = false;
        pthread_cond_broadcast(&kv->sidle);
    }
    pthread_mutex_unlock(&kv->smu);
    return NULL;
}

/* On the communication thread: queue the request for the server. */
static void server_receive(void *user, int source, uint64_t id, void *data, size_t bytes)
{
    kv_async *kv = user;
    ps_request *r = mx_calloc(1, sizeof(*r));
    if (!r) {
        (void)mx_comm_reply(kv->comm, source, id, MX_ERR_NOMEM, "the server is out of memory", NULL, 0);
        free(data);
        return;
    }
    *r = (ps_request){.source = source, .id = id, .data = data, .bytes = bytes};
    pthread_mutex_lock(&kv->smu);
    if (kv->tail) kv->tail->next = r;
    else kv->head = r;
    kv->tail = r;
    pthread_cond_signal(&kv->scv);
    pthread_mutex_unlock(&kv->smu);
}

static void async_set_updater(void *state, const mx_kvstore_updater *updater)
{
    kv_async *kv = state;
    pthread_mutex_lock(&kv->smu);
    kv->updater = *updater;
    pthread_mutex_unlock(&kv->smu);
}

static void async_hold_updater(void *state, bool hold)
{
    kv_async *kv = state;
    if (!kv->is_server) return;
    pthread_mutex_lock(&kv->smu);
    if (hold) {
        kv->holds++;
        while (kv->busy) pthread_cond_wait(&kv->sidle, &kv->smu);
    } else if (kv->holds > 0 && --kv->holds == 0) {
        pthread_cond_signal(&kv->scv);
    }
    pthread_mutex_unlock(&kv->smu);
}

/* ------------------------------------------------------- create and free */

static mx_status async_create(mx_runtime *rt, const mx_kvstore_options *opts, void **state)
{
    if (!opts->comm)
        return MX_ERROR(MX_ERR_INVALID, "kvstore 'dist_async' spans the ranks of an MPI job: start it with mpirun "
                                        "(mpirun -np N mxtrain ...)");
    kv_async *kv = mx_calloc(1, sizeof(*kv));
    if (!kv) return MX_ERR_NOMEM;
    kv->rt = rt;
    kv->comm = opts->comm;
    kv->is_server = mx_comm_rank(opts->comm) == SERVER_RANK;
    pthread_mutex_init(&kv->mu, NULL);
    pthread_cond_init(&kv->cv, NULL);
    pthread_mutex_init(&kv->smu, NULL);
    pthread_cond_init(&kv->scv, NULL);
    pthread_cond_init(&kv->sidle, NULL);
    *state = kv;
    if (!kv->is_server) return MX_OK;
    int e = pthread_create(&kv->thread, NULL, server_main, kv);
    if (e != 0) {
        *state = NULL;
        free(kv); /* the primitives hold nothing yet */
        return MX_ERROR(MX_ERR_RUNTIME, "kvstore dist_async: cannot start the server thread: %s", strerror(e));
    }
    kv->thread_started = true;
    mx_status s = mx_comm_serve(kv->comm, SERVICE, server_receive, kv);
    if (s != MX_OK) {
        pthread_mutex_lock(&kv->smu);
        kv->stopping = true;
        pthread_cond_signal(&kv->scv);
        pthread_mutex_unlock(&kv->smu);
        pthread_join(kv->thread, NULL);
        *state = NULL;
        free(kv);
        return s;
    }
    kv->serving = true;
    return MX_OK;
}

static void async_free(void *state)
{
    kv_async *kv = state;
    if (!kv) return;
    /* No request reaches the server once it is unregistered (a handler in
     * progress finishes first); then the thread stops. */
    if (kv->serving) mx_comm_serve(kv->comm, SERVICE, NULL, NULL);
    if (kv->thread_started) {
        pthread_mutex_lock(&kv->smu);
        kv->stopping = true;
        pthread_cond_signal(&kv->scv);
        pthread_mutex_unlock(&kv->smu);
        pthread_join(kv->thread, NULL);
    }
    for (ps_request *r = kv->head, *next; r; r = next) {
        next = r->next;
        free(r->data);
        free(r);
    }
    /* Calls still in flight hold references to what they use; after a
     * failure of the comm they have all completed (failed). */
    mx_engine_wait_all(mx_runtime_engine(kv->rt));
    for (int i = 0; i < kv->n_entries; i++) {
        async_entry *e = &kv->entries[i];
        mx_ndarray_free(e->cache);
        mx_ndarray_free(e->stored);
        mx_ndarray_free(e->grad);
        kv_merge_free(&e->merge);
    }
    free(kv->entries);
    pthread_mutex_destroy(&kv->mu);
    pthread_cond_destroy(&kv->cv);
    pthread_mutex_destroy(&kv->smu);
    pthread_cond_destroy(&kv->scv);
    pthread_cond_destroy(&kv->sidle);
    free(kv);
}

/* Every rank starts from rank 0's value; the server holds it. Blocking and
 * collective (a broadcast): init runs at set-up, on every rank. */
static mx_status async_init(void *state, int key, mx_ndarray *value)
{
    kv_async *kv = state;
    mx_dtype t = mx_ndarray_dtype(value);
    if (t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "kvstore dist_async: key %d: %s values are not supported (float32, float64)",
                        key, mx_dtype_name(t));
    if (find_entry(kv, key)) return MX_ERROR(MX_ERR_INVALID, "kvstore dist_async: key %d initialised twice", key);
    if (key >= kv->n_entries) {
        int n = kv->n_entries ? kv->n_entries : 16;
        while (n <= key) n *= 2;
        /* The server thread reads entries: grow them while it is held. */
        async_hold_updater(kv, true);
        async_entry *grown = mx_realloc(kv->entries, sizeof(*grown) * (size_t)n);
        if (grown) {
            memset(grown + kv->n_entries, 0, sizeof(*grown) * (size_t)(n - kv->n_entries));
            kv->entries = grown;
            kv->n_entries = n;
        }
        async_hold_updater(kv, false);
        if (!grown) return MX_ERR_NOMEM;
    }
    const mx_shape *shape = mx_ndarray_shape(value);
    mx_ndarray *cache = NULL, *stored = NULL, *grad = NULL;
    mx_status s = mx_ndarray_create(kv->rt, *shape, t, mx_cpu(), &cache);
    if (s == MX_OK) s = mx_nd_copy(cache, value);
    if (s == MX_OK) s = mx_ndarray_wait_to_write(cache);
    char name[64];
    snprintf(name, sizeof(name), "init of key %d", key);
    if (s == MX_OK)
        s = mx_comm_broadcast(kv->comm, MX_COMM_WORLD, comm_dtype(t), mx_ndarray_data(cache),
                              (size_t)mx_ndarray_size(cache), SERVER_RANK, name);
    if (s == MX_OK && kv->is_server) {
        s = mx_ndarray_create(kv->rt, *shape, t, mx_cpu(), &stored);
        if (s == MX_OK) s = mx_ndarray_create(kv->rt, *shape, t, mx_cpu(), &grad);
        if (s == MX_OK) s = mx_nd_copy(stored, cache);
        if (s == MX_OK) s = mx_ndarray_wait_to_read(stored);
    }
    if (s != MX_OK) {
        mx_ndarray_free(cache);
        mx_ndarray_free(stored);
        mx_ndarray_free(grad);
        return s;
    }
    async_hold_updater(kv, true);
    async_entry *e = &kv->entries[key];
    e->stored = stored;
    e->grad = grad;
    e->cache = cache;
    async_hold_updater(kv, false);
    return MX_OK;
}

/* ----------------------------------------------------------------- worker */

typedef struct call_op {
    kv_async *kv;
    int op, key;
    mx_ndarray *array;   /* push: the gradient sum; pull: the cache */
    mx_ndarray *cache;   /* where the answer (the weight) lands */
    char name[64];
    char label[96];      /* for the timeline: "kvstore dist_async push of key 3" */
    mx_engine_async *done;
} call_op;

static void call_op_free(void *payload)
{
    call_op *op = payload;
    kv_async *kv = op->kv;
    mx_ndarray_free(op->array);
    mx_ndarray_free(op->cache);
    free(op);
    pthread_mutex_lock(&kv->mu);
    if (--kv->in_flight == 0) pthread_cond_broadcast(&kv->cv);
    pthread_mutex_unlock(&kv->mu);
}

/* On the communication thread: the server's answer. */
static void call_answered(void *user, mx_status status, const char *message, const void *data, size_t bytes)
{
    call_op *op = user;
    kv_async *kv = op->kv;
    char text[1200] = "";
    if (status == MX_OK) {
        size_t want = mx_ndarray_nbytes(op->cache);
        if (bytes == want) memcpy(mx_ndarray_data(op->cache), data, bytes);
        else {
            status = MX_ERR_RUNTIME;
            snprintf(text, sizeof(text), "kvstore dist_async: %s: the server answered %zu bytes, the key has %zu",
                     op->name, bytes, want);
        }
    } else {
        /* lib/comm's own failures already name the call. */
        if (!strncmp(message, op->name, strlen(op->name)))
            snprintf(text, sizeof(text), "kvstore dist_async (server on rank %d): %s", SERVER_RANK, message);
        else
            snprintf(text, sizeof(text), "kvstore dist_async: %s (server on rank %d): %s", op->name, SERVER_RANK,
                     message);
    }
    if (status != MX_OK) {
        pthread_mutex_lock(&kv->mu);
        if (kv->failed == MX_OK) {
            kv->failed = status;
            snprintf(kv->failed_message, sizeof(kv->failed_message), "%s", text);
        }
        pthread_mutex_unlock(&kv->mu);
        mx_error_set_message(status, text);
    }
    mx_engine_async_complete(op->done, status);
}

static mx_status call_start(void *payload, const mx_exec_ctx *exec, mx_engine_async *done)
{
    (void)exec;
    call_op *op = payload;
    op->done = done;
    ps_head h = {.op = op->op, .key = op->key, .count = mx_ndarray_size(op->array),
                 .dtype = (int32_t)mx_ndarray_dtype(op->array)};
    mx_comm_call call = {.dest = SERVER_RANK, .service = SERVICE, .head = &h, .head_bytes = sizeof(h),
                         .data = op->op == OP_PUSH ? mx_ndarray_data(op->array) : NULL,
                         .bytes = op->op == OP_PUSH ? mx_ndarray_nbytes(op->array) : 0, .name = op->name,
                         .done = call_answered, .user = op};
    return mx_comm_call_submit(op->kv->comm, &call);
}

/* Pushes one call to the engine: reads `array`, writes the key's cache (the
 * answer: the weight after a push's update, or as a pull found it). */
static mx_status push_call(kv_async *kv, int op_kind, int key, mx_ndarray *array, int priority)
{
    async_entry *e = &kv->entries[key];
    call_op *op = mx_calloc(1, sizeof(*op));
    if (!op) return MX_ERR_NOMEM;
    op->kv = kv;
    op->op = op_kind;
    op->key = key;
    op->array = mx_ndarray_retain(array);
    op->cache = mx_ndarray_retain(e->cache);
    snprintf(op->name, sizeof(op->name), "%s of key %d", op_kind == OP_PUSH ? "push" : "pull", key);
    snprintf(op->label, sizeof(op->label), "kvstore dist_async %s", op->name);
    mx_engine_var *cache = mx_ndarray_var(e->cache);
    mx_engine_var *reads[2] = {cache, mx_ndarray_var(array)};
    pthread_mutex_lock(&kv->mu);
    kv->in_flight++;
    pthread_mutex_unlock(&kv->mu);
    /* payload_free (call_op_free) counts it done, also when the push fails. */
    mx_engine_op desc = {.async_fn = call_start, .payload = op, .payload_free = call_op_free, .reads = reads,
                         .n_reads = 2, .writes = &cache, .n_writes = 1, .ctx = mx_cpu(), .lane = MX_LANE_IO,
                         .priority = priority, .name = op_kind == OP_PUSH ? "kvstore push" : "kvstore pull",
                         .profile_name = op->label, .profile_bytes = (int64_t)mx_ndarray_nbytes(array)};
    return mx_engine_push_async(mx_runtime_engine(kv->rt), &desc);
}

static mx_status check_arrays(kv_async *kv, const char *what, int key, mx_ndarray *const *arrays, int n,
                              async_entry **out)
{
    (void)kv;
    async_entry *e = find_entry(kv, key);
    *out = e;
    if (!e) return MX_ERROR(MX_ERR_INVALID, "kvstore dist_async: key %d has not been initialised (init it first)", key);
    mx_dtype t = mx_ndarray_dtype(e->cache);
    for (int i = 0; i < n; i++) {
        char a[160], b[160];
        bool dtype_ok = !strcmp(what, "pull") || mx_ndarray_dtype(arrays[i]) == t;
        if (!mx_shape_equal(mx_ndarray_shape(arrays[i]), mx_ndarray_shape(e->cache)) || !dtype_ok)
            return MX_ERROR(MX_ERR_INVALID, "kvstore dist_async: %s of key %d: array %d is %s %s, the stored value %s %s",
                            what, key, i, mx_dtype_name(mx_ndarray_dtype(arrays[i])),
                            mx_shape_str(mx_ndarray_shape(arrays[i]), a, sizeof(a)), mx_dtype_name(t),
                            mx_shape_str(mx_ndarray_shape(e->cache), b, sizeof(b)));
    }
    return MX_OK;
}

static mx_status async_push(void *state, int key, mx_ndarray *const *values, int n, int priority,
                            const mx_kvstore_updater *updater)
{
    (void)updater; /* the server's (async_set_updater) applies it */
    kv_async *kv = state;
    async_entry *e;
    MX_TRY(check_arrays(kv, "push", key, values, n, &e));
    mx_ndarray *merged;
    MX_TRY(kv_merge_values(kv->rt, e->cache, &e->merge, values, n, priority, &merged));
    MX_TRY(push_call(kv, OP_PUSH, key, merged, priority));
    e->pushed = true;
    return MX_OK;
}

static mx_status async_pull(void *state, int key, mx_ndarray *const *outs, int n, int priority)
{
    kv_async *kv = state;
    async_entry *e;
    MX_TRY(check_arrays(kv, "pull", key, outs, n, &e));
    /* After a push the cache gets the weight its update left (the copies
     * below wait for that push); otherwise ask the server. */
    if (!e->pushed) MX_TRY(push_call(kv, OP_PULL, key, e->cache, priority));
    e->pushed = false;
    for (int i = 0; i < n; i++) MX_TRY(mx_nd_copy(outs[i], e->cache));
    return MX_OK;
}

static mx_ndarray *async_stored(void *state, int key)
{
    kv_async *kv = state;
    async_entry *e = find_entry(kv, key);
    return !e ? NULL : kv->is_server ? e->stored : e->cache;
}

static int async_rank(const void *state) { return mx_comm_rank(((const kv_async *)state)->comm); }
static int async_num_workers(const void *state) { return mx_comm_size(((const kv_async *)state)->comm); }

/* Until every call made so far has its answer: every push applied. */
static mx_status async_wait_comm(void *state)
{
    kv_async *kv = state;
    pthread_mutex_lock(&kv->mu);
    while (kv->in_flight > 0) pthread_cond_wait(&kv->cv, &kv->mu);
    mx_status s = kv->failed;
    char message[sizeof(kv->failed_message)];
    snprintf(message, sizeof(message), "%s", kv->failed_message);
    kv->failed = MX_OK; /* reported once, as the engine's errors */
    pthread_mutex_unlock(&kv->mu);
    if (s != MX_OK) return mx_error_set_message(s, message);
    return MX_OK;
}

static mx_status async_barrier(void *state)
{
    kv_async *kv = state;
    MX_TRY(async_wait_comm(kv));
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(kv->rt)));
    return mx_comm_barrier(kv->comm, MX_COMM_WORLD, "kvstore barrier");
}

const mx_kvstore_ops mx_kvstore_dist_async_ops = {
    .name = "dist_async",
    .create = async_create,
    .free = async_free,
    .init = async_init,
    .push = async_push,
    .pull = async_pull,
    .stored = async_stored,
    .rank = async_rank,
    .num_workers = async_num_workers,
    .barrier = async_barrier,
    .wait_comm = async_wait_comm,
    .set_updater = async_set_updater,
    .hold_updater = async_hold_updater,
    .has_server = true,
};
