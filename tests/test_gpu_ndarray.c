/*
 * test_gpu_ndarray.c - NDArray math and random draws on a GPU array against
 * the same calls on CPU arrays: element-wise and scalar arithmetic (the
 * operators' GPU kernels), dot with each transpose (batch_dot's cuBLAS
 * path), uniform and normal draws (the same numbers for the same seed),
 * arrays on two devices refused, and copies converting between every pair
 * of dtypes (float16, bfloat16 included) and fills, bit for bit with the
 * CPU's. Skips loudly without a GPU.
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

/* Values of every dtype for the conversion tests: floats random bit
 * patterns after hand-picked specials (ties, overflow, subnormals, -0,
 * inf, NaNs), float64 also beyond float32's range, the half types every
 * pattern (n >= 65536), integers random bits. */
static void *typed_values(mx_dtype t, int64_t n, uint64_t seed)
{
    static const uint32_t special[] = {0x3f800000, 0x477fef00, 0x477ff000, 0xc77ff000, 0x33000000, 0x33c00000,
                                       0x387fe000, 0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x80000000,
                                       0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0x7fa12345, 0x00018000,
                                       0x7f7fffff, 0x4f000000, 0xdf000000, 0x437f8000};
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    size_t size = mx_dtype_size(t);
    unsigned char *p = malloc(size * (size_t)n);
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        uint32_t fb = i < ns ? special[i] : (uint32_t)(r >> 20);
        float f;
        memcpy(&f, &fb, 4);
        if (t == MX_FLOAT32) memcpy(p + 4 * i, &f, 4);
        else if (t == MX_FLOAT64) {
            double d = i % 5 == 4 ? (double)f * 1e300 : i % 5 == 3 ? (double)f * (1.0 + 0x1p-40) : f;
            memcpy(p + 8 * i, &d, 8);
        } else if (t == MX_FLOAT16 || t == MX_BFLOAT16) {
            uint16_t h = (uint16_t)(i * 40503 + seed);
            memcpy(p + 2 * i, &h, 2);
        } else {
            memcpy(p + size * (size_t)i, &r, size);
        }
    }
    return p;
}

static mx_ndarray *make_typed(mx_context ctx, mx_shape s, mx_dtype t, const void *v)
{
    mx_ndarray *a;
    ck_assert_msg(mx_ndarray_create(rt, s, t, ctx, &a) == MX_OK, "%s", mx_last_error());
    if (v) ck_assert_int_eq(mx_ndarray_from_host(a, v, mx_ndarray_nbytes(a)), MX_OK);
    return a;
}

/* a and b (same shape and dtype) hold the same bytes. */
static void expect_same_bits(const char *what, mx_dtype st, mx_dtype dt, mx_ndarray *want, mx_ndarray *got)
{
    size_t bytes = mx_ndarray_nbytes(want), size = mx_dtype_size(dt);
    unsigned char *a = malloc(bytes), *b = malloc(bytes);
    ck_assert_msg(mx_ndarray_to_host(want, a, bytes) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_ndarray_to_host(got, b, bytes) == MX_OK, "%s", mx_last_error());
    for (size_t i = 0; i < bytes; i += size) {
        if (memcmp(a + i, b + i, size) == 0) continue;
        uint64_t x = 0, y = 0;
        memcpy(&x, a + i, size), memcpy(&y, b + i, size);
        ck_abort_msg("%s %s -> %s [%zu]: 0x%llx, CPU 0x%llx", what, mx_dtype_name(st), mx_dtype_name(dt), i / size,
                     (unsigned long long)y, (unsigned long long)x);
    }
    free(a), free(b);
}

/* Copies converting between every pair of dtypes, float16 and bfloat16
 * included, on one GPU (the conversion kernels) and across CPU <-> GPU,
 * give the CPU's bits; fills of half arrays too. */
START_TEST(test_dtype_copies_match_cpu)
{
    if (!gpucheck_gpu_visible()) return;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    const mx_dtype types[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16, MX_BFLOAT16, MX_UINT8, MX_INT32, MX_INT8, MX_INT64};
    const int nt = (int)(sizeof(types) / sizeof(types[0]));
    const mx_shape s = MX_SHAPE(257, 259); /* 66563 elements: every half pattern, odd sizes */
    for (int a = 0; a < nt; a++) {
        void *v = typed_values(types[a], mx_shape_size(&s), (uint64_t)a + 1);
        mx_ndarray *cs = make_typed(mx_cpu(), s, types[a], v), *gs = make_typed(mx_gpu(0), s, types[a], v);
        for (int b = 0; b < nt; b++) {
            mx_ndarray *cd = make_typed(mx_cpu(), s, types[b], NULL), *gd = make_typed(mx_gpu(0), s, types[b], NULL);
            mx_ndarray *up = make_typed(mx_gpu(0), s, types[b], NULL), *down = make_typed(mx_cpu(), s, types[b], NULL);
            ck_assert_msg(mx_nd_copy(cd, cs) == MX_OK, "%s", mx_last_error());
            ck_assert_msg(mx_nd_copy(gd, gs) == MX_OK, "%s", mx_last_error());
            ck_assert_msg(mx_nd_copy(up, cs) == MX_OK, "%s", mx_last_error());
            ck_assert_msg(mx_nd_copy(down, gs) == MX_OK, "%s", mx_last_error());
            expect_same_bits("gpu", types[a], types[b], cd, gd);
            expect_same_bits("cpu->gpu", types[a], types[b], cd, up);
            expect_same_bits("gpu->cpu", types[a], types[b], cd, down);
            mx_ndarray_free(cd), mx_ndarray_free(gd), mx_ndarray_free(up), mx_ndarray_free(down);
        }
        mx_ndarray_free(cs), mx_ndarray_free(gs);
        free(v);
    }
    const double fills[] = {1.5, 65520.0, 0x1p-25 * 3.0, -1e-9, 300.7, -0.0, 1e39};
    for (int t = 0; t < nt; t++)
        for (size_t k = 0; k < sizeof(fills) / sizeof(fills[0]); k++) {
            mx_ndarray *c = make_typed(mx_cpu(), MX_SHAPE(1000, 3), types[t], NULL);
            mx_ndarray *g = make_typed(mx_gpu(0), MX_SHAPE(1000, 3), types[t], NULL);
            ck_assert_msg(mx_nd_fill(c, fills[k]) == MX_OK && mx_nd_fill(g, fills[k]) == MX_OK, "%s", mx_last_error());
            expect_same_bits("fill", types[t], types[t], c, g);
            mx_ndarray_free(c), mx_ndarray_free(g);
        }
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
    tcase_add_test(tc, test_dtype_copies_match_cpu);
}

int main(void)
{
    return gpucheck_main("ndarray", NULL, tests_on_gpu, 120, NULL);
}
