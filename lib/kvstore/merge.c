/*
 * merge.c - the first step of every store's push: the values of one key,
 * one per device, summed into one CPU array. Values on other devices are
 * copied into per-key CPU buffers (engine copies), then one engine
 * operation sums them (read: the inputs; write: the key's merge buffer) in
 * list order: ((v0 + v1) + v2) + ...; a single CPU value is used as it is.
 * Buffers are reused from push to push: the engine orders the next sum
 * after whatever read the buffer last.
 */
#include "kvstore/kvstore_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the sum */

typedef struct sum_op {
    mx_ndarray *out;
    mx_ndarray **in;
    int n;
} sum_op;

static void sum_free(void *payload)
{
    sum_op *op = payload;
    mx_ndarray_free(op->out);
    for (int i = 0; i < op->n; i++) mx_ndarray_free(op->in[i]);
    free(op->in);
    free(op);
}

#define SUM_LOOP(T)                                                                                      \
    do {                                                                                                 \
        T *o = mx_ndarray_data(op->out);                                                                 \
        const T *a = mx_ndarray_data(op->in[0]), *b = mx_ndarray_data(op->in[1]);                        \
        for (int64_t j = 0; j < n; j++) o[j] = a[j] + b[j];                                              \
        for (int i = 2; i < op->n; i++) {                                                                \
            const T *c = mx_ndarray_data(op->in[i]);                                                     \
            for (int64_t j = 0; j < n; j++) o[j] += c[j];                                                \
        }                                                                                                \
    } while (0)

static mx_status sum_run(void *payload, const mx_exec_ctx *exec)
{
    (void)exec;
    sum_op *op = payload;
    int64_t n = mx_ndarray_size(op->out);
    if (mx_ndarray_dtype(op->out) == MX_FLOAT32) SUM_LOOP(float);
    else SUM_LOOP(double);
    return MX_OK;
}

static mx_status push_sum(mx_runtime *rt, mx_ndarray *out, mx_ndarray *const *in, int n, int priority)
{
    sum_op *op = mx_calloc(1, sizeof(*op));
    if (!op) return MX_ERR_NOMEM;
    op->in = mx_calloc((size_t)n, sizeof(*op->in));
    mx_engine_var **reads = mx_calloc((size_t)n, sizeof(*reads));
    if (!op->in || !reads) {
        free(op->in);
        free(op);
        free(reads);
        return MX_ERR_NOMEM;
    }
    op->out = mx_ndarray_retain(out);
    for (int i = 0; i < n; i++) {
        op->in[i] = mx_ndarray_retain(in[i]);
        reads[i] = mx_ndarray_var(in[i]);
    }
    op->n = n;
    mx_engine_var *writes[1] = {mx_ndarray_var(out)};
    mx_engine_op desc = {.fn = sum_run, .payload = op, .payload_free = sum_free, .reads = reads, .n_reads = n,
                         .writes = writes, .n_writes = 1, .ctx = mx_cpu(), .lane = MX_LANE_COMPUTE,
                         .priority = priority, .name = "kvstore sum",
                         .profile_bytes = (int64_t)mx_ndarray_nbytes(out) * n /* read */};
    mx_status s = mx_engine_push(mx_runtime_engine(rt), &desc);
    free(reads);
    return s;
}


/* A CPU array shaped like `like`, kept in *slot. */
static mx_status buffer(mx_runtime *rt, const mx_ndarray *like, mx_ndarray **slot)
{
    if (*slot) return MX_OK;
    return mx_ndarray_create(rt, *mx_ndarray_shape(like), mx_ndarray_dtype(like), mx_cpu(), slot);
}

mx_status kv_merge_values(mx_runtime *rt, const mx_ndarray *like, kv_merge *m, mx_ndarray *const *values, int n,
                          int priority, mx_ndarray **merged)
{
    *merged = NULL;
    mx_dtype t = mx_ndarray_dtype(like);
    if (n > 1 && t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "kvstore: summing %s arrays is not supported", mx_dtype_name(t));
    /* The CPU sources: the values, or staging copies of them. */
    if (n > m->n_staging) {
        mx_ndarray **grown = mx_realloc(m->staging, sizeof(*grown) * (size_t)n);
        if (!grown) return MX_ERR_NOMEM;
        memset(grown + m->n_staging, 0, sizeof(*grown) * (size_t)(n - m->n_staging));
        m->staging = grown;
        m->n_staging = n;
    }
    mx_ndarray **src = mx_calloc((size_t)n, sizeof(*src));
    if (!src) return MX_ERR_NOMEM;
    mx_status s = MX_OK;
    for (int i = 0; s == MX_OK && i < n; i++) {
        if (mx_ndarray_context(values[i]).dev_type == MX_DEV_CPU) {
            src[i] = values[i];
            continue;
        }
        s = buffer(rt, like, &m->staging[i]);
        if (s == MX_OK) s = mx_nd_copy(m->staging[i], values[i]);
        src[i] = m->staging[i];
    }
    *merged = src[0];
    if (s == MX_OK && n > 1) {
        s = buffer(rt, like, &m->merge);
        if (s == MX_OK) s = push_sum(rt, m->merge, src, n, priority);
        *merged = m->merge;
    }
    free(src);
    return s;
}

void kv_merge_free(kv_merge *m)
{
    mx_ndarray_free(m->merge);
    for (int j = 0; j < m->n_staging; j++) mx_ndarray_free(m->staging[j]);
    free(m->staging);
    memset(m, 0, sizeof(*m));
}
