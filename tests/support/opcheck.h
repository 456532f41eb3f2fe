/*
 * opcheck.h - the test harness every operator goes through:
 *   1. parse parameters, infer shapes from the given input shapes;
 *   2. forward (float32 kernel) against a naive float64 reference forward;
 *   3. backward against central finite differences of the float64
 *      reference (computed in double), on the same float32-rounded inputs:
 *      the gradient of L = sum(out_k * head_k) over visible outputs, or of
 *      the case's own loss for loss layers;
 *   4. backward again with req = add onto a non-zero buffer.
 * All of it on the calling thread, on a 3-thread pool, and on that pool
 * while another region holds it (every piece on the caller): the last
 * must give the bits of the second, outputs and gradients.
 * Failures go through Check's ck_assert with the op, input and index.
 */
#ifndef MX_TEST_OPCHECK_H
#define MX_TEST_OPCHECK_H

#include "ops/op.h"

/* Naive reference forward in double. in/out are dense C-order arrays. */
typedef void (*opcheck_ref_fn)(const void *params, const double *const *in, const mx_shape *in_shapes,
                               double *const *out, const mx_shape *out_shapes);
/* A scalar loss of the inputs whose gradient a loss layer's backward
 * returns (e.g. cross-entropy for SoftmaxOutput). */
typedef double (*opcheck_loss_fn)(const void *params, const double *const *in, const mx_shape *in_shapes);
/* Fills input `index` (n floats); NULL: uniform in [-1, 1). */
typedef void (*opcheck_init_fn)(int index, float *data, int64_t n, uint64_t *rng_state);

typedef struct opcheck_case {
    const char *op;                    /* the registry's name (and in messages) */
    const mx_op_def *op_def;           /* an op outside the registry (the executor's folds); NULL: op's */
    const char *const *keys, *const *values;
    int n_params;
    mx_shape in_shapes[MX_OP_MAX_IO]; /* known input shapes; ndim 0 = infer */
    opcheck_ref_fn ref;
    opcheck_loss_fn loss;              /* loss layers only */
    opcheck_init_fn init;
    uint64_t skip_grad;                /* bit i: input i has no gradient to check */
    double fwd_rtol, fwd_atol;         /* 0: 1e-4, 1e-5 */
    double grad_rtol, grad_atol;       /* 0: 1e-4, 1e-5 */
    double eps;                        /* FD step; 0: 1e-6 */
    int max_points;                    /* FD points per input; 0: 256 */
    bool is_train;
    uint64_t seed;
} opcheck_case;

/* Runs the whole check three times, kernels on the calling thread, on a
 * 3-thread pool, and on that pool held busy by another region (the same
 * bits as the free pool's); fails the current Check test on any mismatch. */
void opcheck_run(const opcheck_case *c);

/* The same parse + infer, for tests of error paths: returns the status. */
mx_status opcheck_infer(const char *op, const char *const *keys, const char *const *values, int n_params,
                        mx_shape *in_shapes, int *n_in, mx_shape *out_shapes, int *n_out);

/* Uniform float in [lo, hi) from a xorshift state. */
double opcheck_uniform(uint64_t *state, double lo, double hi);

#endif
