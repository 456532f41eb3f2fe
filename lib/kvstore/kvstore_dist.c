/*
 * kvstore_dist.c - the stores of an MPI job (MXNet's dist_sync and its
 * two-level dist_sync_device) on lib/comm.
 *
 * push(key, values): the devices' values are summed on the CPU (merge.c),
 * then summed over the ranks, then the updater runs on every rank with the
 * same sum, so every rank applies the same update to its own copy of the
 * weight and all copies stay bit-identical (init broadcasts rank 0's
 * value, so they start so).
 *
 * Order. MPI needs every rank to issue its collectives in the same order,
 * but the engine runs ready operations by priority and readiness, which
 * differ between ranks. Every collective here is one asynchronous engine
 * operation that also writes the store's `order` variable, so the engine
 * starts them in push order, one after the other, and push order is
 * program order, the same on every rank. The operation hands its request
 * to the communication thread (which runs requests FIFO) and completes when
 * the request does, so the workers never block on MPI, and the sum of one
 * bucket overlaps the backward pass of the layers still running.
 *
 * Buckets (Horovod's tensor fusion). Consecutive pushes are summed over the
 * ranks together, packed into one buffer, up to fusion_bytes; a bucket is
 * sent when the next push would overflow it or when every initialised key
 * has been pushed since the last round ended. So every step must push every
 * key once (the trainer does); buckets then come out the same on every
 * rank. A pull of a key whose bucket has not been sent yet is held and
 * pushed right after that bucket's update.
 *
 * Two levels (dist_sync_device): the bucket is summed over the ranks of
 * each host (the host-local communicator), then among one leader per host,
 * then broadcast from the leader within the host: one cross-host message
 * per host instead of one per rank.
 */
#include "kvstore/kvstore_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct dist_entry {
    mx_ndarray *stored; /* NULL: key not initialised */
    kv_merge merge;
    mx_ndarray *merged;     /* this round's sum (the merge buffer or the single value) */
    mx_ndarray **held;      /* pulls waiting for the bucket */
    int n_held, cap_held;
    bool in_bucket;         /* pushed this round, bucket not sent yet */
} dist_entry;

typedef struct kv_dist {
    mx_runtime *rt;
    mx_comm *comm;
    bool two_level;
    const char *name;
    size_t fusion_bytes;
    dist_entry *entries;
    int n_entries;
    int n_keys;          /* initialised */
    int pushed;          /* pushes in this round */
    int *bucket;         /* keys of the open bucket, in push order */
    int n_bucket;
    size_t bucket_bytes;
    mx_dtype bucket_dtype;
    mx_engine_var *order; /* written by every collective: they start in push order */
    uint64_t n_sent;      /* buckets sent, for names in messages */
} kv_dist;

static mx_status dist_create_kind(mx_runtime *rt, const mx_kvstore_options *opts, bool two_level, void **state)
{
    const char *name = two_level ? "dist_sync_device" : "dist_sync";
    if (!opts->comm)
        return MX_ERROR(MX_ERR_INVALID, "kvstore '%s' spans the ranks of an MPI job: start it with mpirun "
                                        "(mpirun -np N mxtrain ...)",
                        name);
    kv_dist *kv = mx_calloc(1, sizeof(*kv));
    if (!kv) return MX_ERR_NOMEM;
    kv->rt = rt;
    kv->comm = opts->comm;
    kv->two_level = two_level;
    kv->name = name;
    kv->fusion_bytes = mx_kvstore_bucket_limit(opts->fusion_bytes);
    kv->order = mx_engine_new_var(mx_runtime_engine(rt));
    if (!kv->order) {
        free(kv);
        return MX_ERR_NOMEM;
    }
    *state = kv;
    return MX_OK;
}

static mx_status dist_sync_create(mx_runtime *rt, const mx_kvstore_options *opts, void **state)
{
    return dist_create_kind(rt, opts, false, state);
}

static mx_status dist_sync_device_create(mx_runtime *rt, const mx_kvstore_options *opts, void **state)
{
    return dist_create_kind(rt, opts, true, state);
}

static void dist_free(void *state)
{
    kv_dist *kv = state;
    if (!kv) return;
    /* Collectives still running hold references to what they use. */
    mx_engine_wait_all(mx_runtime_engine(kv->rt));
    for (int i = 0; i < kv->n_entries; i++) {
        dist_entry *e = &kv->entries[i];
        mx_ndarray_free(e->stored);
        kv_merge_free(&e->merge);
        for (int j = 0; j < e->n_held; j++) mx_ndarray_free(e->held[j]);
        free(e->held);
    }
    mx_engine_delete_var(mx_runtime_engine(kv->rt), kv->order);
    free(kv->entries);
    free(kv->bucket);
    free(kv);
}

static dist_entry *find_entry(kv_dist *kv, int key)
{
    return key < kv->n_entries && kv->entries[key].stored ? &kv->entries[key] : NULL;
}

static mx_comm_dtype comm_dtype(mx_dtype t) { return t == MX_FLOAT64 ? MX_COMM_FLOAT64 : MX_COMM_FLOAT32; }

/* Every rank starts from rank 0's value. Blocking: init runs at set-up. */
static mx_status dist_init(void *state, int key, mx_ndarray *value)
{
    kv_dist *kv = state;
    mx_dtype t = mx_ndarray_dtype(value);
    if (t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "kvstore %s: key %d: %s values are not supported (float32, float64)",
                        kv->name, key, mx_dtype_name(t));
    if (find_entry(kv, key)) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d initialised twice", kv->name, key);
    if (key >= kv->n_entries) {
        int n = kv->n_entries ? kv->n_entries : 16;
        while (n <= key) n *= 2;
        dist_entry *grown = mx_realloc(kv->entries, sizeof(*grown) * (size_t)n);
        int *bucket = grown ? mx_realloc(kv->bucket, sizeof(int) * (size_t)n) : NULL;
        if (grown) kv->entries = grown;
        if (bucket) kv->bucket = bucket;
        if (!grown || !bucket) return MX_ERR_NOMEM;
        memset(grown + kv->n_entries, 0, sizeof(*grown) * (size_t)(n - kv->n_entries));
        kv->n_entries = n;
    }
    if (kv->pushed)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d initialised in the middle of a round of pushes", kv->name,
                        key);
    mx_ndarray *stored;
    MX_TRY(mx_ndarray_create(kv->rt, *mx_ndarray_shape(value), t, mx_cpu(), &stored));
    mx_status s = mx_nd_copy(stored, value);
    if (s == MX_OK) s = mx_ndarray_wait_to_write(stored);
    char name[64];
    snprintf(name, sizeof(name), "init of key %d", key);
    if (s == MX_OK)
        s = mx_comm_broadcast(kv->comm, MX_COMM_WORLD, comm_dtype(t), mx_ndarray_data(stored),
                              (size_t)mx_ndarray_size(stored), 0, name);
    if (s != MX_OK) {
        mx_ndarray_free(stored);
        return s;
    }
    kv->entries[key].stored = stored;
    kv->n_keys++;
    return MX_OK;
}

/* ---------------------------------------------------------------- a bucket */

typedef struct bucket_op {
    kv_dist *kv;
    int n;
    mx_ndarray **arrays;   /* the keys' sums, summed over the ranks in place */
    void *packed;          /* several keys: one buffer for the collective */
    size_t count;          /* elements in all */
    mx_comm_dtype dtype;
    char name[96];
    char label[128];       /* for the timeline */
    mx_engine_async *done;
    bool submitted;        /* a request went to the comm thread */
    bool failed;
} bucket_op;

static void bucket_free(void *payload)
{
    bucket_op *op = payload;
    for (int i = 0; i < op->n; i++) mx_ndarray_free(op->arrays[i]);
    free(op->arrays);
    /* After a failed collective MPI may still write the buffer (lib/comm,
     * "Stalls"): it is left allocated; the job is ending. */
    if (!(op->submitted && op->failed)) free(op->packed);
    free(op);
}

/* On the communication thread, when the last request of the bucket ends. */
static void bucket_done(void *user, mx_status status, const char *message)
{
    bucket_op *op = user;
    if (status == MX_OK && op->packed) {
        size_t at = 0, elem = mx_comm_dtype_size(op->dtype);
        for (int i = 0; i < op->n; i++) {
            size_t bytes = (size_t)mx_ndarray_size(op->arrays[i]) * elem;
            memcpy(mx_ndarray_data(op->arrays[i]), (char *)op->packed + at, bytes);
            at += bytes;
        }
    }
    if (status != MX_OK) {
        op->failed = true;
        mx_error_set_message(status, message);
    }
    mx_engine_async_complete(op->done, status);
}

/* The engine runs this when every key of the bucket has its sum over the
 * devices, and after the previous bucket's collectives have completed. */
static mx_status bucket_start(void *payload, const mx_exec_ctx *exec, mx_engine_async *done)
{
    (void)exec;
    bucket_op *op = payload;
    kv_dist *kv = op->kv;
    op->done = done;
    void *buf = mx_ndarray_data(op->arrays[0]);
    if (op->packed) {
        size_t at = 0, elem = mx_comm_dtype_size(op->dtype);
        for (int i = 0; i < op->n; i++) {
            size_t bytes = (size_t)mx_ndarray_size(op->arrays[i]) * elem;
            memcpy((char *)op->packed + at, mx_ndarray_data(op->arrays[i]), bytes);
            at += bytes;
        }
        buf = op->packed;
    }
    mx_comm_request req = {.op = MX_COMM_ALLREDUCE_SUM, .group = MX_COMM_WORLD, .dtype = op->dtype, .buf = buf,
                           .count = op->count, .name = op->name};
    mx_status s = MX_OK;
    if (kv->two_level) {
        /* Host, then leaders, then back within the host: the requests run
         * one after the other in this order (FIFO); the last completes. */
        req.group = MX_COMM_LOCAL;
        s = mx_comm_submit(kv->comm, &req);
        op->submitted = s == MX_OK;
        if (s == MX_OK && mx_comm_is_leader(kv->comm)) {
            req.group = MX_COMM_LEADERS;
            s = mx_comm_submit(kv->comm, &req);
        }
        req.op = MX_COMM_BROADCAST;
        req.group = MX_COMM_LOCAL;
        req.root = 0;
    }
    req.done = bucket_done;
    req.user = op;
    if (s == MX_OK) s = mx_comm_submit(kv->comm, &req);
    if (s == MX_OK) op->submitted = true;
    else op->failed = true;
    return s;
}

/* Sends the open bucket, then runs each key's update and its held pulls. */
static mx_status flush(kv_dist *kv, const mx_kvstore_updater *updater, int priority)
{
    if (!kv->n_bucket) return MX_OK;
    bucket_op *op = mx_calloc(1, sizeof(*op));
    if (!op) return MX_ERR_NOMEM;
    op->kv = kv;
    op->arrays = mx_calloc((size_t)kv->n_bucket, sizeof(mx_ndarray *));
    mx_engine_var **vars = mx_calloc((size_t)kv->n_bucket + 1, sizeof(mx_engine_var *));
    if (!op->arrays || !vars) {
        free(op->arrays);
        free(op);
        free(vars);
        return MX_ERR_NOMEM;
    }
    op->dtype = comm_dtype(kv->bucket_dtype);
    for (int i = 0; i < kv->n_bucket; i++) {
        dist_entry *e = &kv->entries[kv->bucket[i]];
        op->arrays[op->n++] = mx_ndarray_retain(e->merged);
        op->count += (size_t)mx_ndarray_size(e->merged);
        vars[i] = mx_ndarray_var(e->merged);
    }
    vars[kv->n_bucket] = kv->order;
    mx_status s = MX_OK;
    if (kv->n_bucket > 1) {
        op->packed = mx_malloc(op->count * mx_comm_dtype_size(op->dtype));
        if (!op->packed) s = mx_last_status();
    }
    if (kv->n_bucket == 1) snprintf(op->name, sizeof(op->name), "key %d", kv->bucket[0]);
    else snprintf(op->name, sizeof(op->name), "keys %d..%d (bucket %llu, %d keys)", kv->bucket[0],
                  kv->bucket[kv->n_bucket - 1], (unsigned long long)kv->n_sent, kv->n_bucket);
    if (s != MX_OK) {
        bucket_free(op);
        free(vars);
        return s;
    }
    snprintf(op->label, sizeof(op->label), "kvstore allreduce %s", op->name);
    /* Reads and writes the sums (MPI writes them) and the order variable. */
    mx_engine_op desc = {.async_fn = bucket_start, .payload = op, .payload_free = bucket_free, .reads = vars,
                         .n_reads = kv->n_bucket + 1, .writes = vars, .n_writes = kv->n_bucket + 1,
                         .ctx = mx_cpu(), .lane = MX_LANE_IO, .priority = priority, .name = "kvstore allreduce",
                         .profile_name = op->label,
                         .profile_bytes = (int64_t)(op->count * mx_comm_dtype_size(op->dtype))};
    s = mx_engine_push_async(mx_runtime_engine(kv->rt), &desc);
    free(vars);
    kv->n_sent++;
    for (int i = 0; i < kv->n_bucket && s == MX_OK; i++) {
        int key = kv->bucket[i];
        dist_entry *e = &kv->entries[key];
        e->in_bucket = false;
        if (updater && updater->fn) s = updater->fn(key, e->merged, e->stored, updater->user);
        else s = mx_nd_copy(e->stored, e->merged);
        for (int j = 0; j < e->n_held && s == MX_OK; j++) s = mx_nd_copy(e->held[j], e->stored);
        for (int j = 0; j < e->n_held; j++) mx_ndarray_free(e->held[j]);
        e->n_held = 0;
    }
    kv->n_bucket = 0;
    kv->bucket_bytes = 0;
    return s;
}

static mx_status dist_push(void *state, int key, mx_ndarray *const *values, int n, int priority,
                           const mx_kvstore_updater *updater)
{
    kv_dist *kv = state;
    dist_entry *e = find_entry(kv, key);
    if (!e) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d has not been initialised (init it first)", kv->name, key);
    if (e->in_bucket)
        return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d pushed twice in one round (every key once per step)",
                        kv->name, key);
    mx_dtype t = mx_ndarray_dtype(e->stored);
    for (int i = 0; i < n; i++) {
        char a[160], b[160];
        if (!mx_shape_equal(mx_ndarray_shape(values[i]), mx_ndarray_shape(e->stored)) || mx_ndarray_dtype(values[i]) != t)
            return MX_ERROR(MX_ERR_INVALID, "kvstore %s: push of key %d: array %d is %s %s, the stored value %s %s",
                            kv->name, key, i, mx_dtype_name(mx_ndarray_dtype(values[i])),
                            mx_shape_str(mx_ndarray_shape(values[i]), a, sizeof(a)), mx_dtype_name(t),
                            mx_shape_str(mx_ndarray_shape(e->stored), b, sizeof(b)));
    }
    size_t bytes = mx_ndarray_nbytes(e->stored);
    /* A bucket holds one dtype and at most fusion_bytes (one key may exceed it alone). */
    if (mx_kvstore_bucket_full(kv->bucket_bytes, bytes, kv->fusion_bytes) || (kv->n_bucket && kv->bucket_dtype != t))
        MX_TRY(flush(kv, updater, priority));
    MX_TRY(kv_merge_values(kv->rt, e->stored, &e->merge, values, n, priority, &e->merged));
    e->in_bucket = true;
    kv->bucket[kv->n_bucket++] = key;
    kv->bucket_bytes += bytes;
    kv->bucket_dtype = t;
    if (++kv->pushed == kv->n_keys) { /* the round is complete */
        kv->pushed = 0;
        return flush(kv, updater, priority);
    }
    return MX_OK;
}

static mx_status dist_pull(void *state, int key, mx_ndarray *const *outs, int n, int priority)
{
    kv_dist *kv = state;
    dist_entry *e = find_entry(kv, key);
    if (!e) return MX_ERROR(MX_ERR_INVALID, "kvstore %s: key %d has not been initialised (init it first)", kv->name, key);
    for (int i = 0; i < n; i++) {
        char a[160], b[160];
        if (!mx_shape_equal(mx_ndarray_shape(outs[i]), mx_ndarray_shape(e->stored)))
            return MX_ERROR(MX_ERR_INVALID, "kvstore %s: pull of key %d: array %d has shape %s, the stored value %s",
                            kv->name, key, i, mx_shape_str(mx_ndarray_shape(outs[i]), a, sizeof(a)),
                            mx_shape_str(mx_ndarray_shape(e->stored), b, sizeof(b)));
    }
    if (!e->in_bucket) {
        for (int i = 0; i < n; i++) MX_TRY(mx_nd_copy(outs[i], e->stored));
        return MX_OK;
    }
    /* Its sum over the ranks has not been sent: the copy follows the update. */
    if (e->n_held + n > e->cap_held) {
        int cap = (e->n_held + n) * 2;
        mx_ndarray **grown = mx_realloc(e->held, sizeof(*grown) * (size_t)cap);
        if (!grown) return MX_ERR_NOMEM;
        e->held = grown;
        e->cap_held = cap;
    }
    (void)priority; /* the held copies run at the bucket's priority */
    for (int i = 0; i < n; i++) e->held[e->n_held++] = mx_ndarray_retain(outs[i]);
    return MX_OK;
}

static mx_ndarray *dist_stored(void *state, int key)
{
    dist_entry *e = find_entry(state, key);
    return e ? e->stored : NULL;
}

static int dist_rank(const void *state) { return mx_comm_rank(((const kv_dist *)state)->comm); }
static int dist_num_workers(const void *state) { return mx_comm_size(((const kv_dist *)state)->comm); }

static mx_status dist_barrier(void *state)
{
    kv_dist *kv = state;
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(kv->rt)));
    return mx_comm_barrier(kv->comm, MX_COMM_WORLD, "kvstore barrier");
}

static mx_status dist_wait_comm(void *state)
{
    kv_dist *kv = state;
    return mx_engine_wait_var(mx_runtime_engine(kv->rt), kv->order);
}

const mx_kvstore_ops mx_kvstore_dist_sync_ops = {
    .name = "dist_sync",
    .create = dist_sync_create,
    .free = dist_free,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .stored = dist_stored,
    .rank = dist_rank,
    .num_workers = dist_num_workers,
    .barrier = dist_barrier,
    .wait_comm = dist_wait_comm,
    .fuses = true,
};

const mx_kvstore_ops mx_kvstore_dist_sync_device_ops = {
    .name = "dist_sync_device",
    .create = dist_sync_device_create,
    .free = dist_free,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .stored = dist_stored,
    .rank = dist_rank,
    .num_workers = dist_num_workers,
    .barrier = dist_barrier,
    .wait_comm = dist_wait_comm,
    .fuses = true,
};
