/*
 * test_gpu_all_finite.c - mx_all_finite on GPU arrays against the CPU
 * scan of the same bytes: every dtype, random finite data with inf, -inf
 * or NaN planted at the first, middle or last element or nowhere, array
 * lengths around the kernel's block and grid sizes (the grid is capped,
 * so the longest arrays take several grid strides), more arrays than one
 * launch takes (128), CPU and GPU arrays in one call, empty arrays, and
 * writes still queued on the GPU when the check is pushed. Skips loudly
 * without a GPU.
 */
#include "optimizer/loss_scale.h"
#include "support/gpucheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mx_dtype dtypes[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_BFLOAT16};

static uint64_t state = 777;
static uint64_t next_u64(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* A random finite value's bits in dtype t (any exponent but all ones). */
static uint64_t random_finite(mx_dtype t)
{
    for (;;) {
        uint64_t r = next_u64();
        switch (t) {
        case MX_FLOAT32:
            r &= 0xffffffffu;
            if ((r & 0x7f800000u) != 0x7f800000u) return r;
            break;
        case MX_FLOAT64:
            if ((r & 0x7ff0000000000000ull) != 0x7ff0000000000000ull) return r;
            break;
        case MX_FLOAT16:
            r &= 0xffff;
            if ((r & 0x7c00) != 0x7c00) return r;
            break;
        default:
            r &= 0xffff;
            if ((r & 0x7f80) != 0x7f80) return r;
            break;
        }
    }
}

/* inf, -inf, NaN (k = 0, 1, 2) in dtype t. */
static uint64_t nonfinite(mx_dtype t, int k)
{
    static const uint64_t bits[4][3] = {{0x7f800000u, 0xff800000u, 0x7fc00001u},
                                        {0x7ff0000000000000ull, 0xfff0000000000000ull, 0xfff8000000000001ull},
                                        {0x7c00, 0xfc00, 0x7e01},
                                        {0x7f80, 0xff80, 0xffc1}};
    const int row = t == MX_FLOAT32 ? 0 : t == MX_FLOAT64 ? 1 : t == MX_FLOAT16 ? 2 : 3;
    return bits[row][k];
}

static void put(void *buf, mx_dtype t, int64_t i, uint64_t v)
{
    switch (mx_dtype_size(t)) {
    case 2: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

/* The same bytes on the CPU and on gpu(0). */
typedef struct twin {
    mx_ndarray *cpu, *gpu;
    void *host;
    int64_t n;
    mx_dtype t;
} twin;

static twin twin_make(mx_runtime *rt, mx_dtype t, int64_t n)
{
    twin w = {.n = n, .t = t};
    w.host = malloc((size_t)(n ? n : 1) * mx_dtype_size(t));
    for (int64_t i = 0; i < n; i++) put(w.host, t, i, random_finite(t));
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), t, mx_cpu(), &w.cpu), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(n), t, mx_gpu(0), &w.gpu), MX_OK);
    return w;
}

static void twin_upload(twin *w)
{
    const size_t bytes = (size_t)w->n * mx_dtype_size(w->t);
    if (!bytes) return;
    ck_assert_int_eq(mx_ndarray_from_host(w->cpu, w->host, bytes), MX_OK);
    ck_assert_int_eq(mx_ndarray_from_host(w->gpu, w->host, bytes), MX_OK);
}

static void twin_free(twin *w)
{
    mx_ndarray_free(w->cpu);
    mx_ndarray_free(w->gpu);
    free(w->host);
}

static bool check(mx_ndarray *const *a, int n)
{
    bool finite = false;
    ck_assert_msg(mx_all_finite(a, n, &finite) == MX_OK, "%s", mx_last_error());
    return finite;
}

/* GPU and CPU agree, and both match what was planted. */
static void compare(twin *w, int n, bool want_finite, const char *what)
{
    mx_ndarray **c = malloc(sizeof(*c) * (size_t)n), **g = malloc(sizeof(*g) * (size_t)n);
    for (int i = 0; i < n; i++) c[i] = w[i].cpu, g[i] = w[i].gpu;
    const bool on_cpu = check(c, n), on_gpu = check(g, n);
    ck_assert_msg(on_cpu == want_finite, "%s: cpu says %d, planted %d", what, on_cpu, want_finite);
    ck_assert_msg(on_gpu == on_cpu, "%s: gpu says %d, cpu %d", what, on_gpu, on_cpu);
    free(c), free(g);
}

START_TEST(gpu_matches_cpu_each_dtype)
{
    const mx_dtype t = dtypes[_i];
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    /* 2048 blocks x 256 threads = 524288 elements per grid stride. */
    const int64_t lengths[] = {1, 255, 256, 257, 70001, 524288, 524289, 3000001};
    int compared = 0;
    for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
        const int64_t n = lengths[l];
        twin w = twin_make(rt, t, n);
        twin_upload(&w);
        char what[96];
        snprintf(what, sizeof(what), "%s[%lld] random finite", mx_dtype_name(t), (long long)n);
        compare(&w, 1, true, what);
        const int64_t where[3] = {0, n / 2, n - 1};
        for (int p = 0; p < 3; p++)
            for (int k = 0; k < 3; k++) {
                uint64_t keep = 0;
                memcpy(&keep, (char *)w.host + where[p] * (int64_t)mx_dtype_size(t), mx_dtype_size(t));
                put(w.host, t, where[p], nonfinite(t, k));
                twin_upload(&w);
                snprintf(what, sizeof(what), "%s[%lld] bad %d at %lld", mx_dtype_name(t), (long long)n, k,
                         (long long)where[p]);
                compare(&w, 1, false, what);
                memcpy((char *)w.host + where[p] * (int64_t)mx_dtype_size(t), &keep, mx_dtype_size(t));
                compared++;
            }
        twin_upload(&w);
        compare(&w, 1, true, "restored");
        twin_free(&w);
    }
    printf("GPU all_finite %s: %d planted values, GPU equals CPU\n", mx_dtype_name(t), compared);
    mx_runtime_free(rt);
}
END_TEST

/* 300 arrays of mixed dtypes and sizes (three launches, the longest array
 * in a launch setting its grid), some empty; one bad value in one array. */
START_TEST(gpu_many_arrays)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    enum { N = 300 };
    twin *w = calloc(N, sizeof(*w));
    for (int i = 0; i < N; i++) {
        const int64_t n = i % 17 == 3 ? 0 : (int64_t)(next_u64() % 5000) + (i == 140 ? 600000 : 0);
        w[i] = twin_make(rt, dtypes[i % 4], n);
        twin_upload(&w[i]);
    }
    compare(w, N, true, "300 arrays finite");
    const int victims[] = {0, 127, 128, 140, 255, 256, 299};
    for (size_t v = 0; v < sizeof(victims) / sizeof(victims[0]); v++) {
        twin *x = &w[victims[v]];
        if (x->n == 0) continue;
        const int64_t at = x->n - 1;
        uint64_t keep = 0;
        memcpy(&keep, (char *)x->host + at * (int64_t)mx_dtype_size(x->t), mx_dtype_size(x->t));
        put(x->host, x->t, at, nonfinite(x->t, (int)v % 3));
        twin_upload(x);
        char what[64];
        snprintf(what, sizeof(what), "300 arrays, bad last element of array %d", victims[v]);
        compare(w, N, false, what);
        memcpy((char *)x->host + at * (int64_t)mx_dtype_size(x->t), &keep, mx_dtype_size(x->t));
        twin_upload(x);
    }
    compare(w, N, true, "300 arrays restored");
    for (int i = 0; i < N; i++) twin_free(&w[i]);
    free(w);
    mx_runtime_free(rt);
}
END_TEST

/* CPU and GPU arrays in one call (two operations); GPU writes still
 * queued (fills) when the check is pushed; an empty GPU array. */
START_TEST(gpu_mixed_devices_and_pending_writes)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    for (int i = 0; i < 4; i++) {
        const mx_dtype t = dtypes[i];
        mx_ndarray *g, *c, *e;
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2000003), t, mx_gpu(0), &g), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(1000), t, mx_cpu(), &c), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(0), t, mx_gpu(0), &e), MX_OK);
        mx_ndarray *all[3] = {c, g, e};
        for (int r = 0; r < 3; r++) {
            ck_assert_int_eq(mx_nd_fill(c, 1.0), MX_OK);
            ck_assert_int_eq(mx_nd_fill(g, 0.25), MX_OK);
            ck_assert_msg(check(all, 3), "%s round %d", mx_dtype_name(t), r);
            ck_assert_int_eq(mx_nd_fill(g, r == 0 ? INFINITY : r == 1 ? -INFINITY : NAN), MX_OK);
            ck_assert_msg(!check(all, 3), "%s round %d: the queued fill was not seen", mx_dtype_name(t), r);
            ck_assert_msg(!check(&g, 1), "%s round %d", mx_dtype_name(t), r);
            ck_assert(check(&c, 1));
            ck_assert_int_eq(mx_nd_fill(g, -3.0), MX_OK);
            ck_assert_int_eq(mx_nd_fill(c, NAN), MX_OK);
            ck_assert_msg(!check(all, 3), "%s round %d: NaN on the CPU side", mx_dtype_name(t), r);
            ck_assert(check(&g, 1));
        }
        ck_assert(check(&e, 1));
        mx_ndarray_free(g), mx_ndarray_free(c), mx_ndarray_free(e);
    }
    mx_runtime_free(rt);
}
END_TEST

static void tests_on_gpu(TCase *tc)
{
    tcase_add_loop_test(tc, gpu_matches_cpu_each_dtype, 0, 4);
    tcase_add_test(tc, gpu_many_arrays);
    tcase_add_test(tc, gpu_mixed_devices_and_pending_writes);
}

int main(void)
{
    return gpucheck_main("all_finite", NULL, tests_on_gpu, 300, NULL);
}
