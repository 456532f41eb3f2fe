/*
 * blas.c - products split across the pool (blas.h).
 */
#include "blas/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

/* At least OpenBLAS's work buffer (BUFFER_SIZE, 128 MiB on x86-64, plus
 * a page: the malloc seen failing under `ulimit -v` asked for 134221824
 * bytes). */
#define BLAS_BUFFER_PROBE ((size_t)136 << 20)
/* Big enough that OpenBLAS takes a buffer (not its small-matrix path) and
 * that the warm-up products, tens of milliseconds each, all run at once
 * (a shorter one could end before another starts and hand it its buffer). */
#define BLAS_WARMUP_N 768

/* OpenBLAS's buffers belong to the process and are kept for its life: so
 * is the count of those reserved (the one piece of state here that no
 * object owns, as OpenBLAS's own is global). */
static pthread_mutex_t reserve_mu = PTHREAD_MUTEX_INITIALIZER;
static int reserved;

typedef struct warmup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, total;
    int go; /* 0: wait, 1: multiply, -1: leave without multiplying */
} warmup;

/* One warm-up product, started when every warm-up thread is ready (its
 * stack and malloc arena already taken) and the buffers are known to fit,
 * so they run at once and OpenBLAS takes one buffer for each. */
static void *warmup_main(void *arg)
{
    warmup *w = arg;
    const int n = BLAS_WARMUP_N;
    float *m = calloc((size_t)3 * n * n, sizeof(float));
    pthread_mutex_lock(&w->mu);
    w->arrived++;
    pthread_cond_broadcast(&w->cv);
    while (w->go == 0) pthread_cond_wait(&w->cv, &w->mu);
    int go = w->go;
    pthread_mutex_unlock(&w->mu);
    if (go > 0 && m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, m, n, m + n * n, n, 0.0f,
                    m + 2 * n * n, n);
    free(m);
    return NULL;
}

/* How many of `want` buffers fit in the address space at once. */
static int buffers_that_fit(int want)
{
    void **probe = calloc((size_t)want, sizeof(void *));
    if (!probe) return 0;
    int got = 0;
    while (got < want && (probe[got] = malloc(BLAS_BUFFER_PROBE)) != NULL) got++;
    for (int i = 0; i < got; i++) free(probe[i]);
    free(probe);
    return got;
}

static mx_status reserve_locked(int threads);

mx_status mx_blas_reserve(int threads)
{
    /* Without an address-space limit the buffers' address space does not
     * run out (they are not touched until used): nothing to guard, and no
     * warm-up to pay at every start. */
    struct rlimit lim;
    if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur == RLIM_INFINITY) return MX_OK;
    pthread_mutex_lock(&reserve_mu);
    mx_status s = threads <= reserved ? MX_OK : reserve_locked(threads);
    if (s == MX_OK && threads > reserved) reserved = threads;
    pthread_mutex_unlock(&reserve_mu);
    return s;
}

static mx_status reserve_locked(int threads)
{
    warmup w = {.arrived = 0, .total = threads, .go = 0};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t *t = calloc((size_t)threads, sizeof(pthread_t));
    int started = 0;
    mx_status s = t ? MX_OK : MX_ERROR(MX_ERR_NOMEM, "out of memory reserving OpenBLAS's work buffers");
    for (; s == MX_OK && started < threads; started++) {
        int e = pthread_create(&t[started], NULL, warmup_main, &w);
        if (e != 0) {
            s = MX_ERROR(MX_ERR_RUNTIME, "reserving OpenBLAS's work buffers: cannot start a thread: %s", strerror(e));
            break;
        }
    }
    /* With every warm-up thread alive: room for all the buffers at once,
     * or a clear error (and no product, which would hang). */
    pthread_mutex_lock(&w.mu);
    while (w.arrived < started) pthread_cond_wait(&w.cv, &w.mu);
    int fit = s == MX_OK ? buffers_that_fit(threads) : 0;
    w.go = s == MX_OK && fit == threads ? 1 : -1;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    free(t);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    if (s == MX_OK && fit < threads) {
        struct rlimit lim;
        char limit[64] = "none";
        if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
            snprintf(limit, sizeof(limit), "%llu MiB", (unsigned long long)(lim.rlim_cur >> 20));
        s = MX_ERROR(MX_ERR_NOMEM,
                     "out of memory: OpenBLAS needs a %zu MiB work buffer for each of the %d threads that may "
                     "multiply at once and only %d fit (address-space limit, ulimit -v: %s); raise the limit or "
                     "use fewer threads (OMP_NUM_THREADS, MXNET_CPU_WORKER_NTHREADS)",
                     BLAS_BUFFER_PROBE >> 20, threads, fit, limit);
    }
    return s;
}

/* Below this many multiply-adds a product runs whole on the caller: the
 * hand-over to another thread (a few microseconds) would not pay. */
#define PARALLEL_MIN_MACS (1 << 20)
/* Blocks of C no thinner than this, so each call still packs panels that
 * OpenBLAS's kernels use at full speed. */
#define MIN_BLOCK_ROWS 32
#define MIN_BLOCK_COLS 64
/* C this small with a long inner dimension is summed from inner slices. */
#define INNER_SPLIT_MAX_C (64 * 1024)
#define INNER_SPLIT_MIN_K 2048

typedef enum { SPLIT_ROWS, SPLIT_COLS, SPLIT_INNER } split_kind;

typedef struct gemm_job {
    bool dbl, ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const void *a, *b;
    void *c;
    split_kind split;
    int64_t unit;      /* rows, columns or inner indices per piece item */
    float *partials;   /* SPLIT_INNER: one m x n sum per piece, added in piece
                        * order so results do not depend on thread timing */
} gemm_job;

/* One cblas call on the block rows [m0, m1) x columns [n0, n1) of C over
 * inner indices [k0, k1), into c_out with row stride ldc_out. */
static void gemm_call(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                      double beta, void *c_out, int64_t ldc_out)
{
    size_t es = j->dbl ? sizeof(double) : sizeof(float);
    const char *a = j->a, *b = j->b;
    a += (size_t)(j->ta ? k0 * j->lda + m0 : m0 * j->lda + k0) * es;
    b += (size_t)(j->tb ? n0 * j->ldb + k0 : k0 * j->ldb + n0) * es;
    CBLAS_TRANSPOSE ta = j->ta ? CblasTrans : CblasNoTrans, tb = j->tb ? CblasTrans : CblasNoTrans;
    int m = (int)(m1 - m0), n = (int)(n1 - n0), k = (int)(k1 - k0);
    if (j->dbl)
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, j->alpha, (const double *)a, (int)j->lda, (const double *)b,
                    (int)j->ldb, beta, c_out, (int)ldc_out);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, (float)j->alpha, (const float *)a, (int)j->lda,
                    (const float *)b, (int)j->ldb, (float)beta, c_out, (int)ldc_out);
}

/* Pieces [lo, hi), one cblas call each, also when one call gets several
 * (a busy pool runs the whole range on its caller): OpenBLAS may sum a
 * wider block in another order, and results must not depend on how the
 * pieces were handed out. */
static void gemm_piece(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const gemm_job *j = arg;
    size_t es = j->dbl ? sizeof(double) : sizeof(float);
    char *c = j->c;
    for (int64_t t = lo; t < hi; t++) {
        int64_t a0 = t * j->unit, a1 = a0 + j->unit;
        switch (j->split) {
        case SPLIT_ROWS:
            if (a1 > j->m) a1 = j->m;
            gemm_call(j, a0, a1, 0, j->n, 0, j->k, j->beta, c + (size_t)(a0 * j->ldc) * es, j->ldc);
            break;
        case SPLIT_COLS:
            if (a1 > j->n) a1 = j->n;
            gemm_call(j, 0, j->m, a0, a1, 0, j->k, j->beta, c + (size_t)a0 * es, j->ldc);
            break;
        case SPLIT_INNER: /* each piece its own partial sum */
            if (a1 > j->k) a1 = j->k;
            gemm_call(j, 0, j->m, 0, j->n, a0, a1, 0.0, j->partials + (size_t)t * (size_t)(j->m * j->n), j->n);
            break;
        }
    }
}

static void gemm_run(mx_threadpool *pool, gemm_job *j)
{
    int threads = mx_threadpool_size(pool);
    double macs = (double)j->m * (double)j->n * (double)j->k;
    if (threads <= 1 || macs < PARALLEL_MIN_MACS || j->m == 0 || j->n == 0) {
        gemm_call(j, 0, j->m, 0, j->n, 0, j->k, j->beta, j->c, j->ldc);
        return;
    }
    if (!j->dbl && j->m * j->n <= INNER_SPLIT_MAX_C && j->k >= INNER_SPLIT_MIN_K * threads &&
        j->m < MIN_BLOCK_ROWS * threads && j->n < MIN_BLOCK_COLS * threads) {
        size_t mn = (size_t)(j->m * j->n);
        int64_t unit = (j->k + 2 * threads - 1) / (2 * threads), pieces = (j->k + unit - 1) / unit;
        j->partials = malloc((size_t)pieces * mn * sizeof(float));
        if (j->partials) {
            j->split = SPLIT_INNER;
            j->unit = unit;
            mx_parallel_for(pool, pieces, 1, gemm_piece, j);
            float *c = j->c, beta = (float)j->beta;
            for (int64_t r = 0; r < j->m; r++) {
                float *cr = c + r * j->ldc;
                for (int64_t q = 0; q < j->n; q++) {
                    float s = 0.0f;
                    for (int64_t t = 0; t < pieces; t++) s += j->partials[(size_t)t * mn + (size_t)(r * j->n + q)];
                    cr[q] = beta == 0.0f ? s : s + beta * cr[q];
                }
            }
            free(j->partials);
            return;
        } /* no memory for partials: split C below instead */
    }
    /* Cut the longer side of C, in at most two pieces per thread. */
    if (j->n >= j->m && j->n >= 2 * MIN_BLOCK_COLS) {
        j->split = SPLIT_COLS;
        int64_t pieces = j->n / MIN_BLOCK_COLS < 2 * threads ? j->n / MIN_BLOCK_COLS : 2 * threads;
        j->unit = (j->n + pieces - 1) / pieces;
        j->unit = (j->unit + 15) / 16 * 16;
        mx_parallel_for(pool, (j->n + j->unit - 1) / j->unit, 1, gemm_piece, j);
    } else if (j->m >= 2 * MIN_BLOCK_ROWS) {
        j->split = SPLIT_ROWS;
        int64_t pieces = j->m / MIN_BLOCK_ROWS < 2 * threads ? j->m / MIN_BLOCK_ROWS : 2 * threads;
        j->unit = (j->m + pieces - 1) / pieces;
        j->unit = (j->unit + 7) / 8 * 8;
        mx_parallel_for(pool, (j->m + j->unit - 1) / j->unit, 1, gemm_piece, j);
    } else {
        gemm_call(j, 0, j->m, 0, j->n, 0, j->k, j->beta, j->c, j->ldc);
    }
}

void mx_sgemm(mx_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    gemm_job j = {.dbl = false, .ta = trans_a, .tb = trans_b, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                  .ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
    gemm_run(pool, &j);
}

void mx_dgemm(mx_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
              const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc)
{
    gemm_job j = {.dbl = true, .ta = trans_a, .tb = trans_b, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb,
                  .ldc = ldc, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
    gemm_run(pool, &j);
}

bool mx_blas_sgemm_avx512(void)
{
    const char *core = openblas_get_corename();
    if (!core) return false;
    static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
        if (strcasecmp(core, avx512_cores[i]) == 0) return true;
    return false;
}
