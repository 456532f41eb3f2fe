/*
 * all_finite.c - mx_all_finite (loss_scale.h): MXNet's multi_all_finite.
 *
 * The arrays are grouped by device; each group is one engine operation on
 * its device's compute lane that reads the group's arrays (so it runs
 * after every write pushed to them, and an error of such a write passes to
 * it) and writes a variable of its own, which the call waits for. The
 * groups run concurrently. On the CPU the operation scans the group's
 * elements as one range split across the kernel pool; on a GPU it hands
 * the group to all_finite.cu.
 *
 * The test is on the bits: a value is non-finite when its exponent field
 * is all ones. With the sign bit cleared, adding one unit of the exponent
 * field carries into the sign bit exactly then, so each element costs an
 * and, an add and an or into an accumulator (a loop compilers vectorise
 * with plain SSE2), checked every block.
 */
#include "optimizer/loss_scale.h"

#include "device/device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Elements scanned between two looks at the group's flag. */
#define AF_BLOCK 8192
/* Groups shorter than this run on the engine worker alone. */
#define AF_PARALLEL_MIN 65536

typedef struct af_group {
    mx_context ctx;
    int n;
    mx_ndarray **arrays; /* retained */
    int64_t *offset;     /* n + 1: element offsets of the arrays in the group's range */
    atomic_int bad;      /* a non-finite element was seen */
    int *result;         /* the caller's slot: 1 when non-finite, written at the end */
    mx_engine_var *done; /* written by the operation; the caller waits on it */
} af_group;

static bool dtype_ok(mx_dtype t) { return t == MX_FLOAT32 || t == MX_FLOAT64 || t == MX_FLOAT16 || t == MX_BFLOAT16; }

/* Whether p[0, n) holds a non-finite value; `abs` clears the sign bit,
 * `one` is the lowest exponent bit, `sign` the sign bit. */
#define AF_SCAN(T, abs, one, sign)                                                                 \
    static bool scan_##T(const T *p, int64_t n)                                                    \
    {                                                                                              \
        T acc = 0;                                                                                 \
        for (int64_t i = 0; i < n; i++) acc |= (T)((T)(p[i] & (abs)) + (one));                     \
        return (acc & (sign)) != 0;                                                                \
    }
AF_SCAN(uint16_t, 0x7fffu, 0x0400u, 0x8000u) /* float16: 5 exponent bits */
AF_SCAN(uint32_t, 0x7fffffffu, 0x00800000u, 0x80000000u)
AF_SCAN(uint64_t, 0x7fffffffffffffffull, 0x0010000000000000ull, 0x8000000000000000ull)

static bool scan_bf16(const uint16_t *p, int64_t n) /* bfloat16: float32's 8 exponent bits */
{
    uint16_t acc = 0;
    for (int64_t i = 0; i < n; i++) acc |= (uint16_t)((uint16_t)(p[i] & 0x7fffu) + 0x0080u);
    return (acc & 0x8000u) != 0;
}

/* Elements [lo, hi) of array a, in blocks, stopping once g->bad is set. */
static void scan_array(af_group *g, mx_ndarray *a, int64_t lo, int64_t hi)
{
    const mx_dtype t = mx_ndarray_dtype(a);
    const char *base = mx_ndarray_data(a);
    for (int64_t b = lo; b < hi; b += AF_BLOCK) {
        if (atomic_load_explicit(&g->bad, memory_order_relaxed)) return;
        const int64_t e = hi - b < AF_BLOCK ? hi - b : AF_BLOCK;
        bool bad;
        switch (t) {
        case MX_FLOAT32: bad = scan_uint32_t((const uint32_t *)base + b, e); break;
        case MX_FLOAT64: bad = scan_uint64_t((const uint64_t *)base + b, e); break;
        case MX_FLOAT16: bad = scan_uint16_t((const uint16_t *)base + b, e); break;
        default: bad = scan_bf16((const uint16_t *)base + b, e); break; /* MX_BFLOAT16 */
        }
        if (bad) {
            atomic_store_explicit(&g->bad, 1, memory_order_relaxed);
            return;
        }
    }
}

/* Elements [lo, hi) of the group's range, which may span several arrays. */
static void scan_range(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    af_group *g = arg;
    /* The last array starting at or before lo (offset is non-decreasing). */
    int l = 0, r = g->n - 1;
    while (l < r) {
        int m = l + (r - l + 1) / 2;
        if (g->offset[m] <= lo) l = m;
        else r = m - 1;
    }
    for (int i = l; i < g->n && g->offset[i] < hi; i++) {
        const int64_t a_lo = lo > g->offset[i] ? lo - g->offset[i] : 0;
        const int64_t a_hi = (hi < g->offset[i + 1] ? hi : g->offset[i + 1]) - g->offset[i];
        if (a_lo < a_hi) scan_array(g, g->arrays[i], a_lo, a_hi);
    }
}

static mx_status af_run(void *payload, const mx_exec_ctx *exec)
{
    af_group *g = payload;
    if (exec->ctx.dev_type == MX_DEV_GPU) {
#ifdef MX_USE_CUDA
        const void **data = mx_calloc((size_t)g->n, sizeof(*data));
        int64_t *sizes = mx_calloc((size_t)g->n, sizeof(*sizes));
        mx_dtype *dtypes = mx_calloc((size_t)g->n, sizeof(*dtypes));
        mx_status s = data && sizes && dtypes ? MX_OK : MX_ERR_NOMEM;
        int m = 0;
        for (int i = 0; i < g->n && s == MX_OK; i++) {
            if (mx_ndarray_size(g->arrays[i]) == 0) continue;
            data[m] = mx_ndarray_data(g->arrays[i]);
            sizes[m] = mx_ndarray_size(g->arrays[i]);
            dtypes[m] = mx_ndarray_dtype(g->arrays[i]);
            m++;
        }
        bool bad = false;
        if (s == MX_OK && m > 0) s = mx_all_finite_gpu(data, sizes, dtypes, m, exec->stream, &bad);
        free(data), free(sizes), free(dtypes);
        MX_TRY(s);
        *g->result = bad;
        return mx_device_op_done(exec);
#else
        return MX_ERROR(MX_ERR_UNSUPPORTED, "all_finite: this build has no GPU support (built without CUDA)");
#endif
    }
    const int64_t total = g->offset[g->n];
    mx_threadpool *pool = total >= AF_PARALLEL_MIN ? exec->pool : NULL;
    mx_parallel_for(pool, total, mx_parallel_grain(pool, total, 4, AF_PARALLEL_MIN / 2), scan_range, g);
    *g->result = atomic_load(&g->bad);
    return MX_OK;
}

static void af_group_free(void *payload)
{
    af_group *g = payload;
    for (int i = 0; i < g->n; i++) mx_ndarray_free(g->arrays[i]);
    free(g->arrays);
    free(g->offset);
    free(g);
}

/* Pushes the scan of the arrays of `list` that are on ctx; on success
 * *done is the variable to wait for (the caller deletes it). */
static mx_status push_group(mx_engine *engine, mx_ndarray *const *list, int n, mx_context ctx, int *result,
                            mx_engine_var **done)
{
    *done = NULL;
    int count = 0;
    for (int i = 0; i < n; i++) count += mx_context_equal(mx_ndarray_context(list[i]), ctx);
    af_group *g = mx_calloc(1, sizeof(*g));
    mx_engine_var **reads = mx_calloc((size_t)count, sizeof(*reads));
    if (g) {
        g->arrays = mx_calloc((size_t)count, sizeof(*g->arrays));
        g->offset = mx_calloc((size_t)count + 1, sizeof(*g->offset));
    }
    if (!g || !reads || !g->arrays || !g->offset) {
        if (g) af_group_free(g);
        free(reads);
        return MX_ERR_NOMEM;
    }
    g->ctx = ctx;
    g->result = result;
    atomic_init(&g->bad, 0);
    for (int i = 0; i < n; i++) {
        if (!mx_context_equal(mx_ndarray_context(list[i]), ctx)) continue;
        reads[g->n] = mx_ndarray_var(list[i]);
        g->arrays[g->n] = mx_ndarray_retain(list[i]);
        g->offset[g->n + 1] = g->offset[g->n] + mx_ndarray_size(list[i]);
        g->n++;
    }
    g->done = mx_engine_new_var(engine);
    if (!g->done) {
        af_group_free(g);
        free(reads);
        return MX_ERR_NOMEM;
    }
    mx_engine_var *var = g->done;
    mx_engine_op op = {.fn = af_run, .payload = g, .payload_free = af_group_free, .reads = reads,
                       .n_reads = g->n, .writes = &var, .n_writes = 1, .ctx = ctx, .lane = MX_LANE_COMPUTE,
                       .name = "all_finite", .profile_name = "all_finite",
                       .profile_bytes = 0};
    mx_status s = mx_engine_push(engine, &op); /* g belongs to the engine now */
    free(reads);
    if (s != MX_OK) {
        mx_engine_delete_var(engine, var);
        return s;
    }
    *done = var;
    return MX_OK;
}

mx_status mx_all_finite(mx_ndarray *const *arrays, int n, bool *finite)
{
    if (!finite) return MX_ERROR(MX_ERR_INVALID, "all_finite: the result pointer is NULL");
    *finite = false;
    if (n < 0) return MX_ERROR(MX_ERR_INVALID, "all_finite: %d arrays", n);
    if (n > 0 && !arrays) return MX_ERROR(MX_ERR_INVALID, "all_finite: the array list is NULL (%d arrays)", n);
    for (int i = 0; i < n; i++) {
        if (!arrays[i]) return MX_ERROR(MX_ERR_INVALID, "all_finite: array %d of %d is NULL", i, n);
        mx_dtype t = mx_ndarray_dtype(arrays[i]);
        if (!dtype_ok(t))
            return MX_ERROR(MX_ERR_INVALID,
                            "all_finite: array %d has dtype %s (float32, float64, float16 or bfloat16 only)", i,
                            mx_dtype_name(t));
        if (mx_ndarray_runtime(arrays[i]) != mx_ndarray_runtime(arrays[0]))
            return MX_ERROR(MX_ERR_INVALID, "all_finite: array %d belongs to another runtime than array 0", i);
    }
    if (n == 0) {
        *finite = true;
        return MX_OK;
    }
    mx_engine *engine = mx_runtime_engine(mx_ndarray_runtime(arrays[0]));

    /* One group per distinct context, in order of first appearance. */
    mx_context *ctxs = mx_calloc((size_t)n, sizeof(*ctxs));
    int *results = mx_calloc((size_t)n, sizeof(*results));
    mx_engine_var **done = mx_calloc((size_t)n, sizeof(*done));
    if (!ctxs || !results || !done) {
        free(ctxs), free(results), free(done);
        return MX_ERR_NOMEM;
    }
    int groups = 0;
    for (int i = 0; i < n; i++) {
        mx_context c = mx_ndarray_context(arrays[i]);
        int k = 0;
        while (k < groups && !mx_context_equal(ctxs[k], c)) k++;
        if (k == groups) ctxs[groups++] = c;
    }
    mx_status s = MX_OK;
    int pushed = 0;
    for (; pushed < groups && s == MX_OK; pushed++) {
        s = push_group(engine, arrays, n, ctxs[pushed], &results[pushed], &done[pushed]);
        if (s != MX_OK) break;
    }
    /* Every pushed operation writes into results: wait for all of them,
     * also after a failure, keeping the first error. */
    bool bad = false;
    for (int k = 0; k < pushed; k++) {
        mx_status w = mx_engine_wait_var(engine, done[k]);
        if (w == MX_OK && results[k]) bad = true;
        if (s == MX_OK) s = w;
        mx_engine_delete_var(engine, done[k]);
    }
    free(ctxs), free(results), free(done);
    if (s == MX_OK) *finite = !bad;
    return s;
}
