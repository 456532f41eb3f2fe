/*
 * test_parallel.c - the kernel thread pool, per-thread scratch, and the
 * products split across the pool (lib/parallel, lib/blas).
 */
#include "blas/blas.h"
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/im2col.h"
#include "ops/cpu/winograd.h"
#include "parallel/parallel.h"
#include "support/conv_ref.h"
#include "support/poolhold.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ coverage */

typedef struct cover_job {
    _Atomic int *hits;          /* per item */
    _Atomic int busy[16];       /* per worker: a piece is running */
    _Atomic int clash;          /* two pieces ran at once on one worker */
    _Atomic int bad_worker;
    _Atomic int bad_piece;
    int64_t grain, n;
    int size;
    mx_threadpool *nested;      /* when set, each piece runs a nested region */
    _Atomic int nested_sum;
} cover_job;

static void count_one(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    cover_job *j = arg;
    atomic_fetch_add(&j->nested_sum, (int)(hi - lo));
}

static void cover(void *arg, int64_t lo, int64_t hi, int worker)
{
    cover_job *j = arg;
    if (worker < 0 || worker >= j->size) {
        atomic_store(&j->bad_worker, 1);
        return;
    }
    if (atomic_exchange(&j->busy[worker], 1)) atomic_store(&j->clash, 1);
    /* A piece is whole pieces of `grain` items (or the whole range, serially). */
    if (!(lo == 0 && hi == j->n) && (lo % j->grain != 0 || (hi != j->n && (hi - lo) != j->grain)))
        atomic_store(&j->bad_piece, 1);
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
    if (j->nested) mx_parallel_for(j->nested, 7, 2, count_one, j);
    atomic_store(&j->busy[worker], 0);
}

static void check_cover(mx_threadpool *pool, int64_t n, int64_t grain, mx_threadpool *nested)
{
    cover_job *j = calloc(1, sizeof(*j));
    j->hits = calloc((size_t)(n ? n : 1), sizeof(*j->hits));
    j->grain = grain;
    j->n = n;
    j->size = mx_threadpool_size(pool);
    j->nested = nested;
    mx_parallel_for(pool, n, grain, cover, j);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(atomic_load(&j->hits[i]) == 1, "n %lld grain %lld: item %lld ran %d times", (long long)n,
                      (long long)grain, (long long)i, atomic_load(&j->hits[i]));
    ck_assert_int_eq(atomic_load(&j->clash), 0);
    ck_assert_int_eq(atomic_load(&j->bad_worker), 0);
    ck_assert_int_eq(atomic_load(&j->bad_piece), 0);
    if (nested) {
        /* every piece ran the nested region (7 items) in full */
        int pieces = 0;
        for (int64_t i = 0; i < n;) {
            pieces++;
            i += grain;
        }
        ck_assert_msg(atomic_load(&j->nested_sum) % 7 == 0 && atomic_load(&j->nested_sum) >= 7,
                      "nested sum %d", atomic_load(&j->nested_sum));
        ck_assert_int_le(atomic_load(&j->nested_sum), 7 * pieces);
    }
    free(j->hits);
    free(j);
}

START_TEST(every_item_once)
{
    static const int sizes[] = {1, 2, 3, 5};
    static const int64_t ns[] = {0, 1, 2, 7, 64, 1000, 4097};
    static const int64_t grains[] = {1, 3, 64, 5000};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        mx_threadpool *pool;
        ck_assert_msg(mx_threadpool_create(sizes[s], &pool) == MX_OK, "%s", mx_last_error());
        ck_assert_int_eq(mx_threadpool_size(pool), sizes[s]);
        for (int rep = 0; rep < 20; rep++)
            for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++)
                for (size_t b = 0; b < sizeof(grains) / sizeof(grains[0]); b++) check_cover(pool, ns[a], grains[b], NULL);
        mx_threadpool_free(pool);
    }
    check_cover(NULL, 100, 7, NULL); /* no pool: serial */
    ck_assert_int_eq(mx_threadpool_size(NULL), 1);
}
END_TEST

START_TEST(nested_regions_run_serially)
{
    mx_threadpool *pool;
    ck_assert(mx_threadpool_create(3, &pool) == MX_OK);
    for (int rep = 0; rep < 50; rep++) check_cover(pool, 40, 4, pool);
    mx_threadpool_free(pool);
}
END_TEST

typedef struct caller_arg {
    mx_threadpool *pool;
    int reps;
} caller_arg;

static void *caller_main(void *p)
{
    caller_arg *a = p;
    for (int r = 0; r < a->reps; r++) check_cover(a->pool, 300, 5, NULL);
    return NULL;
}

/* Several threads (engine workers) sharing one pool: the one that finds it
 * taken runs its range itself; every region still covers its items. */
START_TEST(concurrent_callers)
{
    mx_threadpool *pool;
    ck_assert(mx_threadpool_create(3, &pool) == MX_OK);
    pthread_t t[4];
    caller_arg a = {pool, 200};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, caller_main, &a), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    mx_threadpool_free(pool);
}
END_TEST

START_TEST(bad_sizes_rejected)
{
    mx_threadpool *pool = (mx_threadpool *)1;
    ck_assert_int_eq(mx_threadpool_create(0, &pool), MX_ERR_INVALID);
    ck_assert_ptr_null(pool);
    ck_assert_str_eq(mx_last_error(), "thread pool: size must be in [1, 1024], got 0");
    ck_assert_int_ge(mx_threadpool_default_size(), 1);
    ck_assert_int_eq(mx_parallel_grain(NULL, 100, 4, 1), 25);
    ck_assert_int_eq(mx_parallel_grain(NULL, 100, 4, 40), 40);
}
END_TEST

/* ------------------------------------------------------------- scratch */

static void *scratch_main(void *p)
{
    float **out = p;
    out[0] = mx_thread_scratch(0, 1000);
    out[1] = mx_thread_scratch(1, 1000);
    memset(out[0], 1, 1000);
    return NULL;
}

START_TEST(scratch_per_thread_and_slot)
{
    float *a = mx_thread_scratch(0, 100), *b = mx_thread_scratch(1, 100);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq((uintptr_t)a % 64, 0);
    ck_assert_ptr_eq(mx_thread_scratch(0, 50), a); /* big enough: the same buffer */
    float *big = mx_thread_scratch(0, 1 << 22);
    ck_assert_ptr_nonnull(big);
    memset(big, 0, 1 << 22);
    ck_assert_int_eq((uintptr_t)big % 64, 0);
    float *other[2];
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, scratch_main, other), 0);
    pthread_join(t, NULL);
    ck_assert_ptr_ne(other[0], big); /* another thread's own (freed at its exit) */
    ck_assert_ptr_null(mx_thread_scratch(MX_SCRATCH_SLOTS, 10));
    ck_assert_str_eq(mx_last_error(), "scratch: slot 4 out of range");
}
END_TEST

/* Leases: one caller after another shares one set of buffers, whichever
 * thread it runs on; callers at once get their own. */
typedef struct lease_arg {
    mx_threadpool *pool;
    void *got;
} lease_arg;

static void *lease_main(void *p)
{
    lease_arg *a = p;
    mx_scratch_lease *l;
    ck_assert_int_eq(mx_scratch_take(a->pool, &l), MX_OK);
    a->got = mx_scratch_buffer(a->pool, l, 1, 1 << 20);
    memset(a->got, 1, 1 << 20);
    mx_scratch_give(a->pool, l);
    return NULL;
}

START_TEST(scratch_leases_are_shared_by_callers)
{
    mx_threadpool *pool;
    ck_assert(mx_threadpool_create(2, &pool) == MX_OK);
    lease_arg a = {pool, NULL}, b = {pool, NULL};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, lease_main, &a), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(pthread_create(&t, NULL, lease_main, &b), 0);
    pthread_join(t, NULL);
    ck_assert_ptr_nonnull(a.got);
    ck_assert_ptr_eq(a.got, b.got); /* another thread, the same buffer */
    ck_assert_uint_eq(mx_scratch_held_bytes(pool), 1 << 20);
    mx_scratch_lease *l1, *l2;
    ck_assert_int_eq(mx_scratch_take(pool, &l1), MX_OK);
    ck_assert_int_eq(mx_scratch_take(pool, &l2), MX_OK);
    ck_assert_ptr_ne(l1, l2);
    ck_assert_ptr_eq(mx_scratch_buffer(pool, l1, 1, 100), a.got); /* the free lease with the most memory */
    void *other = mx_scratch_buffer(pool, l2, 1, 100);
    ck_assert_ptr_nonnull(other);
    ck_assert_ptr_ne(other, a.got);
    ck_assert_int_eq((uintptr_t)other % 64, 0);
    ck_assert_ptr_null(mx_scratch_buffer(pool, l2, MX_SCRATCH_SLOTS, 10));
    mx_scratch_give(pool, l1);
    mx_scratch_give(pool, l2);
    ck_assert_uint_eq(mx_scratch_held_bytes(pool), (1 << 20) + 4096);
    /* No pool: the thread's own scratch. */
    mx_scratch_lease *none = (mx_scratch_lease *)1;
    ck_assert_int_eq(mx_scratch_take(NULL, &none), MX_OK);
    ck_assert_ptr_null(none);
    ck_assert_ptr_eq(mx_scratch_buffer(NULL, NULL, 2, 100), mx_thread_scratch(2, 100));
    mx_threadpool_free(pool);
}
END_TEST

/* A Winograd convolution's backward keeps its transformed filters,
 * per-piece weight gradients and its caller's piece buffers in the pool's
 * lease: run from two threads in turn (two engine workers), the pool holds
 * them once. */
typedef struct conv_arg {
    mx_threadpool *pool;
    const mx_conv_geom *g;
    float *x, *w, *dy, *dx, *dw;
} conv_arg;

static void *conv_main(void *p)
{
    conv_arg *a = p;
    ck_assert_int_eq(mx_conv_backward(a->pool, a->g, a->x, a->w, a->dy, a->dx, MX_REQ_WRITE, a->dw, MX_REQ_WRITE,
                                      NULL, 0),
                     MX_OK);
    return NULL;
}

START_TEST(conv_scratch_is_held_once_per_pool)
{
    mx_threadpool *pool;
    ck_assert(mx_threadpool_create(2, &pool) == MX_OK);
    mx_conv_geom g = {.batch = 4, .in_c = 64, .in_h = 8, .in_w = 8, .out_c = 64, .out_h = 8, .out_w = 8, .k_h = 3,
                      .k_w = 3, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .pad_h = 1, .pad_w = 1,
                      .groups = 1};
    ck_assert(mx_winograd_profitable(&g));
    size_t nx = 4 * 64 * 64, nw = 64 * 64 * 9;
    conv_arg a = {pool, &g, calloc(nx, 4), calloc(nw, 4), calloc(nx, 4), calloc(nx, 4), calloc(nw, 4)};
    ck_assert(a.x && a.w && a.dy && a.dx && a.dw);
    /* The pool busy meanwhile, so every piece runs on the calling thread
     * and its buffers come from the lease: on a free pool, which pieces the
     * caller gets depends on the scheduler (a loaded machine can hand both
     * to the helper), and so would what the lease holds. */
    pool_holder h;
    pool_hold(&h, pool);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, conv_main, &a), 0);
    pthread_join(t, NULL);
    size_t once = mx_scratch_held_bytes(pool);
    ck_assert_uint_ge(once, mx_winograd_filter_bytes(&g) + nw * sizeof(float)); /* filters + a piece's dw at least */
    ck_assert_int_eq(pthread_create(&t, NULL, conv_main, &a), 0);
    pthread_join(t, NULL);
    ck_assert_uint_eq(mx_scratch_held_bytes(pool), once);
    pool_release(&h);
    /* The caller's pieces take their buffers from the lease too (a pool of
     * one thread: every piece is the caller's). 8 images, 32 tiles: a
     * forward of fewer may take the direct kernels (im2col.c,
     * direct_beats_few_tiles). */
    mx_threadpool *one;
    ck_assert(mx_threadpool_create(1, &one) == MX_OK);
    mx_conv_geom g8 = g;
    g8.batch = 8;
    ck_assert(mx_winograd_profitable(&g8));
    float *x8 = calloc(2 * nx, 4), *y = calloc(2 * nx, 4);
    ck_assert(x8 && y);
    ck_assert_int_eq(mx_conv_forward(one, &g8, x8, a.w, NULL, y, MX_REQ_WRITE, NULL, 0), MX_OK);
    ck_assert_uint_ge(mx_scratch_held_bytes(one), mx_winograd_filter_bytes(&g8) + mx_winograd_scratch_bytes(&g8, 8));
    free(x8);
    free(y);
    mx_threadpool_free(one);
    /* A write request puts piece 0's weight gradient straight into dw: with
     * one piece (one thread), no part at all; adding needs one. */
    size_t held[2];
    for (int add = 0; add < 2; add++) {
        ck_assert(mx_threadpool_create(1, &one) == MX_OK);
        mx_req req = add ? MX_REQ_ADD : MX_REQ_WRITE;
        ck_assert_int_eq(mx_conv_backward(one, &g, a.x, a.w, a.dy, a.dx, req, a.dw, req, NULL, 0), MX_OK);
        held[add] = mx_scratch_held_bytes(one);
        mx_threadpool_free(one);
    }
    ck_assert_uint_ge(held[1], held[0] + nw * sizeof(float));
    free(a.x);
    free(a.w);
    free(a.dy);
    free(a.dx);
    free(a.dw);
    mx_threadpool_free(pool);
}
END_TEST

/* ------------------------------------------------------------ products */

static uint64_t rng_state = 88172645463325252ull;
static float urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* C (m x n) of row stride ldc: alpha * op(A) op(B) + beta * C in double. */
static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, double beta, const float *c0, double *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p], y = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            (void)mag;
            c[i * ldc + j] = alpha * s + beta * c0[i * ldc + j];
        }
}

static void check_gemm(mx_threadpool *pool, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       float beta)
{
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    int64_t rows_a = ta ? k : m, rows_b = tb ? n : k;
    float *a = malloc(sizeof(float) * (size_t)(rows_a * lda + 1)), *b = malloc(sizeof(float) * (size_t)(rows_b * ldb + 1));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc + 1)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    float *again = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    double *want = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    for (int64_t i = 0; i < rows_a * lda; i++) a[i] = urand();
    for (int64_t i = 0; i < rows_b * ldb; i++) b[i] = urand();
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = urand();
    memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
    memcpy(again, c0, sizeof(float) * (size_t)(m * ldc));
    mx_sgemm(pool, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, want, ldc);
    double tol = 1e-5 * (double)k + 1e-5;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++)
            ck_assert_msg(fabs(c[i * ldc + j] - want[i * ldc + j]) <= tol,
                          "%lldx%lldx%lld ta %d tb %d pool %d: C[%lld,%lld] = %g, want %g", (long long)m,
                          (long long)n, (long long)k, ta, tb, mx_threadpool_size(pool), (long long)i, (long long)j,
                          c[i * ldc + j], want[i * ldc + j]);
        for (int64_t j = n; j < ldc; j++) ck_assert(c[i * ldc + j] == c0[i * ldc + j]); /* padding untouched */
    }
    /* The same call again gives the same bits (splits do not depend on
     * timing), and so does one while another region holds the pool, which
     * runs every piece on the caller (a cblas call per piece as before:
     * OpenBLAS sums a wider block in another order). */
    mx_sgemm(pool, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, again, ldc);
    ck_assert(memcmp(again, c, sizeof(float) * (size_t)(m * ldc)) == 0);
    pool_holder h;
    pool_hold(&h, pool);
    memcpy(again, c0, sizeof(float) * (size_t)(m * ldc));
    mx_sgemm(pool, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, again, ldc);
    pool_release(&h);
    ck_assert_msg(memcmp(again, c, sizeof(float) * (size_t)(m * ldc)) == 0,
                  "%lldx%lldx%lld ta %d tb %d pool %d: other bits while the pool was busy", (long long)m, (long long)n,
                  (long long)k, ta, tb, mx_threadpool_size(pool));
    free(a), free(b), free(c), free(c0), free(again), free(want);
}

/* A lowered convolution whose batch is split in two pieces adds the second
 * piece's weight gradient into dw after the first's, while the first
 * makes its dx, and holds no per-piece gradient: the pool holds the same
 * after an add request as after a write (with parts, an add held two, a
 * write one). dx and dw match float64 on both requests. */
START_TEST(lowered_pieces_take_turns)
{
    mx_conv_geom g = {.batch = 4, .in_c = 512, .in_h = 10, .in_w = 10, .out_c = 1, .out_h = 10, .out_w = 10,
                      .k_h = 3, .k_w = 3, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .pad_h = 1,
                      .pad_w = 1, .groups = 1};
    ck_assert(!mx_winograd_profitable(&g) && !mx_direct_profitable(&g));
    const int64_t nx = 4 * 512 * 100, ny = 4 * 100, nw = 512 * 9;
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float)), *dy = malloc(ny * sizeof(float));
    float *dx0 = malloc(nx * sizeof(float)), *dw0 = malloc(nw * sizeof(float)), *dx = malloc(nx * sizeof(float));
    float *dw = malloc(nw * sizeof(float));
    double *ref_dx = malloc(nx * sizeof(double)), *abs_dx = malloc(nx * sizeof(double));
    double *ref_dw = malloc(nw * sizeof(double)), *abs_dw = malloc(nw * sizeof(double));
    ck_assert(x && w && dy && dx0 && dw0 && dx && dw && ref_dx && abs_dx && ref_dw && abs_dw);
    for (int64_t i = 0; i < nx; i++) x[i] = urand(), dx0[i] = urand();
    for (int64_t i = 0; i < nw; i++) w[i] = urand(), dw0[i] = urand();
    for (int64_t i = 0; i < ny; i++) dy[i] = urand();
    conv_ref_backward(&g, dy, w, ref_dx, abs_dx);
    conv_ref_weight(&g, x, dy, ref_dw, abs_dw);
    /* Each request on a free pool (the pieces on both threads, in turn),
     * then on a busy one, where every piece runs on the caller and the
     * lease's contents do not depend on the scheduler (on a free pool the
     * helper may take both pieces, and the lease then holds none). */
    size_t held[2];
    for (int run = 0; run < 4; run++) {
        const int add = run / 2, busy = run % 2;
        mx_threadpool *pool;
        ck_assert(mx_threadpool_create(2, &pool) == MX_OK);
        pool_holder h;
        if (busy) pool_hold(&h, pool);
        const mx_req req = add ? MX_REQ_ADD : MX_REQ_WRITE;
        memcpy(dx, dx0, nx * sizeof(float));
        memcpy(dw, dw0, nw * sizeof(float));
        ck_assert_int_eq(mx_conv_backward(pool, &g, x, w, dy, dx, req, dw, req, NULL, 0), MX_OK);
        if (busy) {
            held[add] = mx_scratch_held_bytes(pool);
            pool_release(&h);
        }
        mx_threadpool_free(pool);
        for (int64_t i = 0; i < nx; i++) {
            const double want = ref_dx[i] + (add ? dx0[i] : 0.0);
            ck_assert_msg(fabs(dx[i] - want) <= 1e-5 * (abs_dx[i] + 1.0), "dx[%lld] = %g, want %g (add %d)",
                          (long long)i, dx[i], want, add);
        }
        for (int64_t i = 0; i < nw; i++) {
            const double want = ref_dw[i] + (add ? dw0[i] : 0.0);
            ck_assert_msg(fabs(dw[i] - want) <= 1e-5 * (abs_dw[i] + 1.0), "dw[%lld] = %g, want %g (add %d)",
                          (long long)i, dw[i], want, add);
        }
    }
    ck_assert_uint_eq(held[0], held[1]);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(dx), free(dw);
    free(ref_dx), free(abs_dx), free(ref_dw), free(abs_dw);
}
END_TEST

START_TEST(sgemm_matches_reference)
{
    static const int sizes[] = {1, 2, 3};
    /* small (whole), split by columns, by rows, and by the inner dimension */
    static const int64_t shapes[][3] = {{3, 5, 7}, {40, 700, 90}, {700, 40, 90}, {300, 300, 40}, {20, 25, 9000},
                                        {64, 65, 8193}, {1, 1, 1}, {129, 257, 33}};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        mx_threadpool *pool;
        ck_assert(mx_threadpool_create(sizes[s], &pool) == MX_OK);
        for (size_t q = 0; q < sizeof(shapes) / sizeof(shapes[0]); q++)
            for (int t = 0; t < 4; t++)
                check_gemm(pool, t & 1, t & 2, shapes[q][0], shapes[q][1], shapes[q][2], t == 3 ? 0.5f : 1.0f,
                           t == 1 ? 0.0f : 0.75f);
        mx_threadpool_free(pool);
    }
}
END_TEST

START_TEST(dgemm_matches_reference)
{
    mx_threadpool *pool;
    ck_assert(mx_threadpool_create(2, &pool) == MX_OK);
    int64_t m = 150, n = 260, k = 70;
    double *a = malloc(sizeof(double) * (size_t)(m * k)), *b = malloc(sizeof(double) * (size_t)(k * n));
    double *c = calloc((size_t)(m * n), sizeof(double));
    for (int64_t i = 0; i < m * k; i++) a[i] = urand();
    for (int64_t i = 0; i < k * n; i++) b[i] = urand();
    mx_dgemm(pool, false, false, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) s += a[i * k + p] * b[p * n + j];
            ck_assert_msg(fabs(c[i * n + j] - s) <= 1e-12, "C[%lld,%lld] = %.17g, want %.17g", (long long)i,
                          (long long)j, c[i * n + j], s);
        }
    free(a), free(b), free(c);
    mx_threadpool_free(pool);
}
END_TEST

static Suite *parallel_suite(void)
{
    Suite *s = suite_create("parallel");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_item_once);
    tcase_add_test(tc, nested_regions_run_serially);
    tcase_add_test(tc, concurrent_callers);
    tcase_add_test(tc, bad_sizes_rejected);
    tcase_add_test(tc, scratch_per_thread_and_slot);
    tcase_add_test(tc, scratch_leases_are_shared_by_callers);
    tcase_add_test(tc, conv_scratch_is_held_once_per_pool);
    tcase_add_test(tc, lowered_pieces_take_turns);
    tcase_add_test(tc, sgemm_matches_reference);
    tcase_add_test(tc, dgemm_matches_reference);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(parallel_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
