/*
 * blas.c - products split across the pool (blas.h).
 */
#include "blas/blas.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

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

static void gemm_piece(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const gemm_job *j = arg;
    size_t es = j->dbl ? sizeof(double) : sizeof(float);
    char *c = j->c;
    int64_t a0 = lo * j->unit, a1 = hi * j->unit;
    switch (j->split) {
    case SPLIT_ROWS:
        if (a1 > j->m) a1 = j->m;
        gemm_call(j, a0, a1, 0, j->n, 0, j->k, j->beta, c + (size_t)(a0 * j->ldc) * es, j->ldc);
        break;
    case SPLIT_COLS:
        if (a1 > j->n) a1 = j->n;
        gemm_call(j, 0, j->m, a0, a1, 0, j->k, j->beta, c + (size_t)a0 * es, j->ldc);
        break;
    case SPLIT_INNER: {
        if (a1 > j->k) a1 = j->k;
        gemm_call(j, 0, j->m, 0, j->n, a0, a1, 0.0, j->partials + (size_t)lo * (size_t)(j->m * j->n), j->n);
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
