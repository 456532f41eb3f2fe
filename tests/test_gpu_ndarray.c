/*
 * test_gpu_ndarray.c - NDArray math and random draws on a GPU array against
 * the same calls on CPU arrays: element-wise and scalar arithmetic (the
 * operators' GPU kernels), dot with each transpose (batch_dot's cuBLAS
 * path), uniform and normal draws (the same numbers for the same seed),
 * and arrays on two devices refused. Skips loudly without a GPU.
 */
#include "ndarray/ndarray.h"
#include "support/gpucheck.h"
#ifdef MX_USE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mx_runtime *rt;

static mx_ndarray *make(mx_context ctx, mx_shape shape, const float *values)
{
    mx_ndarray *a;
    ck_assert_msg(mx_ndarray_create(rt, shape, MX_FLOAT32, ctx, &a) == MX_OK, "%s", mx_last_error());
    if (values) ck_assert_int_eq(mx_ndarray_from_host(a, values, sizeof(float) * (size_t)mx_shape_size(&shape)), MX_OK);
    return a;
}

static void expect_equal(const char *what, mx_ndarray *cpu, mx_ndarray *gpu, double rtol)
{
    int64_t n = mx_ndarray_size(cpu);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    ck_assert_msg(mx_ndarray_to_host(cpu, a, sizeof(float) * (size_t)n) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_ndarray_to_host(gpu, b, sizeof(float) * (size_t)n) == MX_OK, "%s", mx_last_error());
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)a[i] - b[i]) <= rtol * fabs(a[i]) + 1e-6, "%s[%lld]: gpu %.9g cpu %.9g", what,
                      (long long)i, b[i], a[i]);
    free(a);
    free(b);
}

static float *values(int64_t n, float lo, unsigned seed)
{
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = lo + (float)(seed >> 8) / (float)(1u << 24) * 2.0f;
    }
    return v;
}

START_TEST(test_arithmetic_matches_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    const mx_shape s = MX_SHAPE(37, 41);
    float *va = values(37 * 41, -1.0f, 1), *vb = values(37 * 41, 0.5f, 2); /* vb in [0.5, 2.5): divisors */
    mx_ndarray *a[2], *b[2], *o[2];
    for (int d = 0; d < 2; d++) {
        mx_context ctx = d ? mx_gpu(0) : mx_cpu();
        a[d] = make(ctx, s, va), b[d] = make(ctx, s, vb), o[d] = make(ctx, s, NULL);
    }
    static const char *const names[] = {"add", "sub", "mul", "div"};
    for (int k = MX_OP_ADD; k <= MX_OP_DIV; k++) {
        for (int d = 0; d < 2; d++) ck_assert_msg(mx_nd_binary(k, o[d], a[d], b[d]) == MX_OK, "%s", mx_last_error());
        expect_equal(names[k], o[0], o[1], 1e-6);
        for (int first = 0; first < 2; first++) {
            for (int d = 0; d < 2; d++)
                ck_assert_msg(mx_nd_binary_scalar(k, o[d], b[d], 1.75, first) == MX_OK, "%s", mx_last_error());
            expect_equal(names[k], o[0], o[1], 1e-6);
        }
    }
    /* In place on the GPU, as on the CPU. */
    for (int d = 0; d < 2; d++) ck_assert_int_eq(mx_nd_binary(MX_OP_MUL, a[d], a[d], b[d]), MX_OK);
    expect_equal("mul in place", a[0], a[1], 1e-6);
    for (int d = 0; d < 2; d++) mx_ndarray_free(a[d]), mx_ndarray_free(b[d]), mx_ndarray_free(o[d]);
    free(va), free(vb);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_dot_matches_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    const int64_t m = 33, k = 70, n = 19;
    float *va = values(m * k, -1.0f, 3), *vb = values(k * n, -1.0f, 4);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mx_ndarray *a[2], *b[2], *o[2];
            for (int d = 0; d < 2; d++) {
                mx_context ctx = d ? mx_gpu(0) : mx_cpu();
                a[d] = make(ctx, ta ? MX_SHAPE(k, m) : MX_SHAPE(m, k), va);
                b[d] = make(ctx, tb ? MX_SHAPE(n, k) : MX_SHAPE(k, n), vb);
                o[d] = make(ctx, MX_SHAPE(m, n), NULL);
                ck_assert_msg(mx_nd_dot(o[d], a[d], b[d], ta, tb) == MX_OK, "%s", mx_last_error());
            }
            expect_equal("dot", o[0], o[1], 1e-5);
            for (int d = 0; d < 2; d++) mx_ndarray_free(a[d]), mx_ndarray_free(b[d]), mx_ndarray_free(o[d]);
        }
    free(va), free(vb);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_random_draws_equal_cpu_for_a_seed)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_rng *g[2];
    mx_ndarray *u[2], *z[2];
    for (int d = 0; d < 2; d++) {
        mx_context ctx = d ? mx_gpu(0) : mx_cpu();
        ck_assert_int_eq(mx_rng_create(rt, 2026, &g[d]), MX_OK);
        u[d] = make(ctx, MX_SHAPE(1001), NULL), z[d] = make(ctx, MX_SHAPE(3, 333), NULL);
        ck_assert_msg(mx_nd_random_uniform(g[d], u[d], -2.0, 3.0) == MX_OK, "%s", mx_last_error());
        ck_assert_msg(mx_nd_random_normal(g[d], z[d], 1.0, 0.5) == MX_OK, "%s", mx_last_error());
    }
    expect_equal("uniform", u[0], u[1], 0);
    expect_equal("normal", z[0], z[1], 0);
    for (int d = 0; d < 2; d++) mx_ndarray_free(u[d]), mx_ndarray_free(z[d]), mx_rng_free(g[d]);
    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(rt)), MX_OK);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_two_devices_refused)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray *c = make(mx_cpu(), MX_SHAPE(4), NULL), *g = make(mx_gpu(0), MX_SHAPE(4), NULL);
    ck_assert_int_eq(mx_nd_binary(MX_OP_ADD, g, g, c), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "arrays on gpu(0) and cpu(0)"), "%s", mx_last_error());
    mx_ndarray_free(c), mx_ndarray_free(g);
    mx_runtime_free(rt);
}
END_TEST

/* cpu_pinned arrays are page-locked on a machine with a GPU, and copies
 * between them, the GPU and cpu arrays carry every value exactly. */
START_TEST(test_pinned_copies)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    const mx_shape s = MX_SHAPE(1024, 1031);
    const int64_t n = mx_shape_size(&s);
    float *v = values(n, -1.0f, 7), *back = malloc(sizeof(float) * (size_t)n);
    mx_ndarray *pinned = make(mx_cpu_pinned(), s, v), *gpu = make(mx_gpu(0), s, NULL);
    mx_ndarray *pinned_back = make(mx_cpu_pinned(), s, NULL), *cpu_back = make(mx_cpu(), s, NULL);
    ck_assert_int_eq(mx_ndarray_wait_to_read(pinned), MX_OK);
#ifdef MX_USE_CUDA
    struct cudaPointerAttributes attr;
    ck_assert_int_eq(cudaPointerGetAttributes(&attr, mx_ndarray_data(pinned)), cudaSuccess);
    ck_assert_msg(attr.type == cudaMemoryTypeHost, "cpu_pinned memory is not page-locked (type %d)", (int)attr.type);
#endif
    ck_assert_int_eq(mx_nd_copy(gpu, pinned), MX_OK);
    ck_assert_int_eq(mx_nd_copy(pinned_back, gpu), MX_OK);
    ck_assert_int_eq(mx_nd_copy(cpu_back, pinned_back), MX_OK);
    ck_assert_int_eq(mx_ndarray_to_host(cpu_back, back, sizeof(float) * (size_t)n), MX_OK);
    ck_assert_int_eq(memcmp(v, back, sizeof(float) * (size_t)n), 0);
    mx_ndarray_free(pinned), mx_ndarray_free(gpu), mx_ndarray_free(pinned_back), mx_ndarray_free(cpu_back);
    free(v), free(back);
    mx_runtime_free(rt);
}
END_TEST

static void tests_on_gpu(TCase *tc)
{
    tcase_add_test(tc, test_arithmetic_matches_cpu);
    tcase_add_test(tc, test_dot_matches_cpu);
    tcase_add_test(tc, test_random_draws_equal_cpu_for_a_seed);
    tcase_add_test(tc, test_two_devices_refused);
    tcase_add_test(tc, test_pinned_copies);
}

int main(void)
{
    return gpucheck_main("ndarray", NULL, tests_on_gpu, 120, NULL);
}
