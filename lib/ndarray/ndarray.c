/* ndarray.c - the runtime, array lifetime, views, waits and host copies. */
#include "ndarray/ndarray_internal.h"

#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- dtypes */

static const struct {
    const char *name;
    size_t size;
} dtype_info[MX_DTYPE_COUNT] = {
    [MX_FLOAT32] = {"float32", 4}, [MX_FLOAT64] = {"float64", 8}, [MX_FLOAT16] = {"float16", 2},
    [MX_UINT8] = {"uint8", 1},     [MX_INT32] = {"int32", 4},     [MX_INT8] = {"int8", 1},
    [MX_INT64] = {"int64", 8},     [MX_BFLOAT16] = {"bfloat16", 2},
};

bool mx_dtype_valid(int dtype) { return dtype >= 0 && dtype < MX_DTYPE_COUNT && dtype_info[dtype].size != 0; }
size_t mx_dtype_size(mx_dtype dtype) { return mx_dtype_valid((int)dtype) ? dtype_info[dtype].size : 0; }
const char *mx_dtype_name(mx_dtype dtype)
{
    return mx_dtype_valid((int)dtype) ? dtype_info[dtype].name : "unknown dtype";
}

/* ---------------------------------------------------------------- shapes */

mx_shape mx_shape_make(int ndim, const int64_t *dims)
{
    mx_shape s;
    memset(&s, 0, sizeof(s));
    s.ndim = ndim;
    for (int i = 0; i < ndim && i < MX_MAX_NDIM; i++) s.dims[i] = dims[i];
    return s;
}

int64_t mx_shape_size(const mx_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

bool mx_shape_equal(const mx_shape *a, const mx_shape *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

const char *mx_shape_str(const mx_shape *s, char *buf, size_t size)
{
    size_t used = 0;
    int n = snprintf(buf, size, "(");
    used = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < s->ndim && used < size; i++) {
        n = snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)s->dims[i]);
        if (n > 0) used += (size_t)n;
    }
    if (used < size) snprintf(buf + used, size - used, ")");
    return buf;
}

/* Validates a shape and returns its byte size in *bytes. */
static mx_status shape_bytes(const mx_shape *s, mx_dtype dtype, size_t *bytes)
{
    char buf[160];
    if (s->ndim < 0 || s->ndim > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "ndim %d is outside 0..%d", s->ndim, MX_MAX_NDIM);
    if (!mx_dtype_valid((int)dtype)) return MX_ERROR(MX_ERR_INVALID, "unknown dtype %d", (int)dtype);
    size_t total = mx_dtype_size(dtype);
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] < 0)
            return MX_ERROR(MX_ERR_INVALID, "negative dimension in shape %s", mx_shape_str(s, buf, sizeof(buf)));
        if (!mx_size_mul(total, (size_t)s->dims[i], &total) || total > ((size_t)1 << 48))
            return MX_ERROR(MX_ERR_INVALID, "shape %s is too large", mx_shape_str(s, buf, sizeof(buf)));
    }
    *bytes = total;
    return MX_OK;
}

/* ---------------------------------------------------------------- runtime */

typedef struct pool_entry {
    mx_context ctx;
    mx_storage_pool *pool;
} pool_entry;

struct mx_runtime {
    mx_engine *engine;
    mx_device_workers *device_workers; /* the engine's GPU workers (NULL without CUDA) */
    pthread_mutex_t mu;
    pool_entry *pools;
    int n_pools;
    mx_context host_ctx; /* mx_runtime_host_context */
};

mx_status mx_runtime_create(const mx_engine_config *config, mx_runtime **out)
{
    *out = NULL;
    MX_TRY(mx_env_check());
    mx_engine_config c = config ? *config : mx_engine_config_default();
    mx_runtime *rt = mx_calloc(1, sizeof(*rt));
    if (!rt) return MX_ERR_NOMEM;
    if (!c.worker_init) {
        mx_status ws = mx_device_workers_create(&rt->device_workers);
        if (ws != MX_OK) {
            free(rt);
            return ws;
        }
        c.worker_init = mx_device_worker_init;
        c.worker_exit = mx_device_worker_exit;
        c.worker_user = rt->device_workers;
    }
    mx_status s = mx_engine_create(&c, &rt->engine);
    if (s != MX_OK) {
        mx_device_workers_free(rt->device_workers);
        free(rt);
        return s;
    }
    pthread_mutex_init(&rt->mu, NULL);
    *out = rt;
    return MX_OK;
}

void mx_runtime_free(mx_runtime *rt)
{
    if (!rt) return;
    mx_engine_free(rt->engine); /* waits for everything, including frees */
    mx_device_workers_free(rt->device_workers); /* after the workers left */
    for (int i = 0; i < rt->n_pools; i++) mx_storage_pool_free(rt->pools[i].pool);
    free(rt->pools);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
}

mx_engine *mx_runtime_engine(mx_runtime *rt) { return rt->engine; }

mx_context mx_runtime_host_context(const mx_runtime *rt)
{
    return rt->host_ctx.dev_type ? rt->host_ctx : mx_cpu();
}

mx_status mx_runtime_set_host_context(mx_runtime *rt, mx_context ctx)
{
    char name[32];
    if (ctx.dev_type != MX_DEV_CPU && ctx.dev_type != MX_DEV_CPU_PINNED)
        return MX_ERROR(MX_ERR_INVALID, "host context %s: must be cpu or cpu_pinned",
                        mx_context_str(ctx, name, sizeof(name)));
    rt->host_ctx = ctx;
    return MX_OK;
}

mx_status nd_runtime_pool(mx_runtime *rt, mx_context ctx, mx_storage_pool **out)
{
#ifdef MX_USE_CUDA
    if (ctx.dev_type == MX_DEV_CPU_PINNED) ctx.dev_id = 0; /* one page-locked pool */
#else
    if (ctx.dev_type == MX_DEV_CPU_PINNED) ctx = mx_cpu(); /* nothing to pin for: host memory */
#endif
    if (ctx.dev_type == MX_DEV_CPU) {
        /* A pool per CPU context the engine runs on its own (their stats
         * are per replica), else one host pool. */
        int n = mx_engine_cpu_contexts(rt->engine);
        char name[32];
        if (n > 1 && (ctx.dev_id < 0 || ctx.dev_id >= n))
            return MX_ERROR(MX_ERR_INVALID, "%s requested, but the runtime has %d CPU contexts (cpu(0)..cpu(%d))",
                            mx_context_str(ctx, name, sizeof(name)), n, n - 1);
        if (n == 1) ctx.dev_id = 0;
    }
    mx_status s = MX_OK;
    pthread_mutex_lock(&rt->mu);
    *out = NULL;
    for (int i = 0; i < rt->n_pools; i++)
        if (mx_context_equal(rt->pools[i].ctx, ctx)) *out = rt->pools[i].pool;
    if (!*out) {
        pool_entry *grown = mx_realloc(rt->pools, (size_t)(rt->n_pools + 1) * sizeof(*grown));
        if (!grown) {
            s = MX_ERR_NOMEM;
        } else {
            rt->pools = grown;
            s = mx_storage_pool_create(ctx, out);
            if (s == MX_OK) rt->pools[rt->n_pools++] = (pool_entry){ctx, *out};
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return s;
}

mx_status mx_runtime_storage_stats(mx_runtime *rt, mx_context ctx, mx_storage_stats *out)
{
    mx_storage_pool *pool;
    MX_TRY(nd_runtime_pool(rt, ctx, &pool));
    mx_storage_get_stats(pool, out);
    return MX_OK;
}

void mx_runtime_release_cached(mx_runtime *rt)
{
    mx_engine_wait_all(rt->engine);
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n_pools; i++) mx_storage_release_cached(rt->pools[i].pool);
    pthread_mutex_unlock(&rt->mu);
}

/* ---------------------------------------------------------------- storage */

static mx_status storage_free_fn(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    nd_storage *st = payload;
    mx_storage_release(st->pool, st->data, st->bytes);
    st->data = NULL;
    return MX_OK;
}

static void storage_release(nd_storage *st)
{
    if (atomic_fetch_sub(&st->refs, 1) != 1) return;
    /* Give the memory back only after every op pushed on it has finished:
     * a write after them all, then the variable's deletion. */
    mx_engine *engine = st->rt->engine;
    mx_engine_var *writes[1] = {st->var};
    mx_engine_op op = {.fn = storage_free_fn, .payload = st, .payload_free = free,
                       .writes = writes, .n_writes = 1, .ctx = mx_cpu(), .lane = MX_LANE_COMPUTE,
                       .flags = MX_OP_IGNORE_ERRORS, .name = "free"};
    mx_engine_var *var = st->var;
    if (mx_engine_push(engine, &op) != MX_OK) {
        /* The push freed the payload; nothing else can reach the memory. */
        return;
    }
    mx_engine_delete_var(engine, var);
}

/* ---------------------------------------------------------------- arrays */

mx_status mx_ndarray_create(mx_runtime *rt, mx_shape shape, mx_dtype dtype, mx_context ctx,
                            mx_ndarray **out)
{
    *out = NULL;
    size_t bytes;
    MX_TRY(shape_bytes(&shape, dtype, &bytes));
    mx_storage_pool *pool;
    MX_TRY(nd_runtime_pool(rt, ctx, &pool));
    nd_storage *st = mx_calloc(1, sizeof(*st));
    mx_ndarray *a = mx_calloc(1, sizeof(*a));
    if (!st || !a) goto nomem;
    st->var = mx_engine_new_var(rt->engine);
    if (!st->var) goto nomem;
    mx_status s = mx_storage_alloc(pool, bytes, &st->data, NULL);
    if (s != MX_OK) {
        /* Say what: callers add whose array it is. */
        char shape_text[160];
        mx_error_prefix(s, "an array of shape %s %s", mx_shape_str(&shape, shape_text, sizeof(shape_text)),
                        mx_dtype_name(dtype));
        mx_engine_delete_var(rt->engine, st->var);
        free(st);
        free(a);
        return s;
    }
    atomic_init(&st->refs, 1);
    st->rt = rt;
    st->pool = pool;
    st->bytes = bytes;
    st->ctx = ctx;
    atomic_init(&a->refs, 1);
    a->storage = st;
    a->shape = shape;
    a->dtype = dtype;
    *out = a;
    return MX_OK;
nomem:
    if (st && st->var) mx_engine_delete_var(rt->engine, st->var);
    free(st);
    free(a);
    return MX_ERR_NOMEM;
}

mx_ndarray *mx_ndarray_retain(mx_ndarray *a)
{
    atomic_fetch_add(&a->refs, 1);
    return a;
}

void mx_ndarray_free(mx_ndarray *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    storage_release(a->storage);
    free(a);
}

const mx_shape *mx_ndarray_shape(const mx_ndarray *a) { return &a->shape; }
mx_dtype mx_ndarray_dtype(const mx_ndarray *a) { return a->dtype; }
mx_context mx_ndarray_context(const mx_ndarray *a) { return a->storage->ctx; }
int64_t mx_ndarray_size(const mx_ndarray *a) { return mx_shape_size(&a->shape); }
size_t mx_ndarray_nbytes(const mx_ndarray *a)
{
    return (size_t)mx_shape_size(&a->shape) * mx_dtype_size(a->dtype);
}
mx_runtime *mx_ndarray_runtime(const mx_ndarray *a) { return a->storage->rt; }
mx_engine_var *mx_ndarray_var(const mx_ndarray *a) { return a->storage->var; }
void *mx_ndarray_data(const mx_ndarray *a) { return (char *)a->storage->data + a->offset; }

static mx_ndarray *view_of(mx_ndarray *a, mx_shape shape, size_t offset)
{
    mx_ndarray *v = mx_calloc(1, sizeof(*v));
    if (!v) return NULL;
    atomic_init(&v->refs, 1);
    atomic_fetch_add(&a->storage->refs, 1);
    v->storage = a->storage;
    v->shape = shape;
    v->dtype = a->dtype;
    v->offset = offset;
    return v;
}

mx_status mx_ndarray_slice(mx_ndarray *a, int64_t begin, int64_t end, mx_ndarray **out)
{
    *out = NULL;
    char buf[160];
    if (a->shape.ndim < 1) return MX_ERROR(MX_ERR_INVALID, "cannot slice a 0-d array");
    if (begin < 0 || end < begin || end > a->shape.dims[0])
        return MX_ERROR(MX_ERR_INVALID, "slice [%lld, %lld) out of range for shape %s", (long long)begin,
                        (long long)end, mx_shape_str(&a->shape, buf, sizeof(buf)));
    mx_shape row = a->shape;
    row.dims[0] = 1;
    size_t row_bytes = (size_t)mx_shape_size(&row) * mx_dtype_size(a->dtype);
    mx_shape shape = a->shape;
    shape.dims[0] = end - begin;
    *out = view_of(a, shape, a->offset + row_bytes * (size_t)begin);
    return *out ? MX_OK : MX_ERR_NOMEM;
}

mx_status mx_ndarray_reshape(mx_ndarray *a, mx_shape shape, mx_ndarray **out)
{
    *out = NULL;
    size_t bytes;
    MX_TRY(shape_bytes(&shape, a->dtype, &bytes));
    char from[160], to[160];
    if (bytes != mx_ndarray_nbytes(a))
        return MX_ERROR(MX_ERR_INVALID, "cannot reshape %s to %s: sizes differ",
                        mx_shape_str(&a->shape, from, sizeof(from)), mx_shape_str(&shape, to, sizeof(to)));
    *out = view_of(a, shape, a->offset);
    return *out ? MX_OK : MX_ERR_NOMEM;
}

mx_status mx_ndarray_view(mx_ndarray *a, size_t offset, mx_shape shape, mx_dtype dtype, mx_ndarray **out)
{
    *out = NULL;
    size_t bytes;
    MX_TRY(shape_bytes(&shape, dtype, &bytes));
    char buf[160];
    if (offset > mx_ndarray_nbytes(a) || bytes > mx_ndarray_nbytes(a) - offset)
        return MX_ERROR(MX_ERR_INVALID, "a %s view of %s at byte %zu does not fit in %zu bytes",
                        mx_dtype_name(dtype), mx_shape_str(&shape, buf, sizeof(buf)), offset, mx_ndarray_nbytes(a));
    *out = view_of(a, shape, a->offset + offset);
    if (*out) (*out)->dtype = dtype;
    return *out ? MX_OK : MX_ERR_NOMEM;
}

mx_status mx_ndarray_wait_to_read(mx_ndarray *a)
{
    return mx_engine_wait_var(a->storage->rt->engine, a->storage->var);
}

mx_status mx_ndarray_wait_to_write(mx_ndarray *a)
{
    return mx_engine_wait_var_write(a->storage->rt->engine, a->storage->var);
}

mx_status mx_ndarray_to_host(mx_ndarray *a, void *dst, size_t bytes)
{
    if (bytes != mx_ndarray_nbytes(a))
        return MX_ERROR(MX_ERR_INVALID, "to_host: buffer of %zu bytes for an array of %zu bytes", bytes,
                        mx_ndarray_nbytes(a));
    MX_TRY(mx_ndarray_wait_to_read(a));
    return mx_device_copy(dst, mx_cpu(), mx_ndarray_data(a), a->storage->ctx, bytes, NULL);
}

mx_status mx_ndarray_from_host(mx_ndarray *a, const void *src, size_t bytes)
{
    if (bytes != mx_ndarray_nbytes(a))
        return MX_ERROR(MX_ERR_INVALID, "from_host: buffer of %zu bytes for an array of %zu bytes", bytes,
                        mx_ndarray_nbytes(a));
    /* An error pending on the old contents is reported, then overwritten. */
    mx_status pending = mx_ndarray_wait_to_write(a);
    MX_TRY(mx_device_copy(mx_ndarray_data(a), a->storage->ctx, src, mx_cpu(), bytes, NULL));
    return pending;
}
