/*
 * blas.h - matrix products on OpenBLAS, split across the kernel thread pool.
 *
 * OpenBLAS runs single-threaded under the pool (lib/parallel): a product
 * big enough to share is cut here into blocks of rows or columns of C (or,
 * when C is small and the inner dimension long, into slices of the inner
 * dimension summed afterwards), and each block is one single-threaded
 * cblas call on one pool thread. Small products run whole on the caller.
 */
#ifndef MX_BLAS_H
#define MX_BLAS_H

#include "parallel/parallel.h"

#include <stdbool.h>
#include <stdint.h>

/* Row-major C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C,
 * op transposing when trans_a / trans_b; lda, ldb, ldc are row strides of
 * the matrices as stored. pool may be NULL (one thread). */
void mx_sgemm(mx_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* The same in double precision (reference computations, float64 arrays). */
void mx_dgemm(mx_threadpool *pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
              const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

/* True when OpenBLAS multiplies with its AVX-512 kernels here: its core
 * type (its own pick, or OPENBLAS_CORETYPE's) is SkylakeX, Cooperlake or
 * SapphireRapids. The convolution rules weigh our AVX-512 kernels against
 * it (ops/cpu/conv_direct.c). */
bool mx_blas_sgemm_avx512(void);

/* Makes OpenBLAS take, now, the work buffers of `threads` threads that
 * multiply at once. OpenBLAS allocates a buffer (128 MiB of address space
 * in Debian's build) whenever more threads multiply at once than it has
 * buffers and, when that allocation fails (an address-space limit,
 * `ulimit -v`), retries forever. Under an address-space limit the engine
 * reserves what its kernel pools and CPU workers can use when it starts: a
 * limit too tight for them is a clear MX_ERR_NOMEM there, and the buffers,
 * which OpenBLAS keeps, need no allocation later when the arrays have taken
 * the rest. Without a limit this returns at once. */
mx_status mx_blas_reserve(int threads);

#endif /* MX_BLAS_H */
