/*
 * gpucheck.h - every GPU kernel against its CPU twin (MXNet's
 * check_consistency): the same random float32 inputs go through the CPU
 * kernels and the GPU kernels of one operator, forward (inference and
 * training) and backward with each write request (write, add onto a
 * non-zero buffer, null), and the outputs must agree within
 * atol + rtol * |cpu|. Outputs are poisoned with NaN before each run so an
 * element a kernel forgets to write fails.
 *
 * Runs only where a GPU is visible: gpucheck_gpu_visible() says, and a
 * suite without one prints "GPU tests: SKIPPED (no GPU visible)".
 */
#ifndef MX_TEST_GPUCHECK_H
#define MX_TEST_GPUCHECK_H

#include "ops/op.h"
#include "support/opcheck.h"

#include <check.h>

typedef struct gpucheck_case {
    const char *op;
    const char *const *keys, *const *values;
    int n_params;
    mx_shape in_shapes[MX_OP_MAX_IO]; /* known input shapes; ndim 0 = infer */
    opcheck_init_fn init;              /* NULL: uniform in [-1, 1) */
    uint64_t skip_grad;                /* bit i: input i has no gradient to compare */
    double rtol, atol;                 /* 0: 1e-4, 1e-5 */
    bool no_backward;                  /* forward-only operator */
    uint64_t seed;
} gpucheck_case;

/* What all cases of a suite compared, for its summary line. */
typedef struct gpucheck_summary {
    int cases, comparisons;
    double worst_rel;  /* worst |gpu - cpu| / (atol + rtol * |cpu|): <= 1 passes */
    char worst_op[64];
} gpucheck_summary;

bool gpucheck_gpu_visible(void);
/* Runs one case; fails the current Check test on any mismatch, naming the
 * op, pass, request, tensor and index; adds to *sum (may be NULL). */
void gpucheck_run(const gpucheck_case *c, gpucheck_summary *sum);
/* A parameter value the GPU kernels refuse before touching a device: op's
 * GPU forward and backward, given those parameters and empty tensors,
 * return MX_ERR_UNSUPPORTED with `named` in the message (CUDA builds). */
void gpucheck_refused(const char *op, const char *const *keys, const char *const *values, int n_params,
                      const char *named);

/* "GPU consistency: N cases, M comparisons, worst X of tolerance (op)". */
void gpucheck_print_summary(const char *suite, const gpucheck_summary *sum);

/* A GPU suite's main: suite "gpu_NAME" with the tests `everywhere` adds
 * (no GPU needed; may be NULL) and, where a GPU is visible, those `on_gpu`
 * adds (timeout_s each); without one it prints the loud line
 * "GPU tests: SKIPPED (no GPU visible)". Prints sum's line after a GPU
 * run when sum is given. Returns the exit status. */
int gpucheck_main(const char *name, void (*everywhere)(TCase *tc), void (*on_gpu)(TCase *tc), int timeout_s,
                  const gpucheck_summary *sum);

#endif
