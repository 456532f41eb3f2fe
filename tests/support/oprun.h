/*
 * oprun.h - runs one operator's forward (and backward) on given float32
 * values, for tests that compare against numbers written by real MXNet.
 * Errors are returned (mx_last_error() says why), so bad parameters and
 * shapes can be tested the same way.
 */
#ifndef MX_TEST_OPRUN_H
#define MX_TEST_OPRUN_H

#include "ops/op.h"

typedef struct oprun {
    int n_in, n_out;
    mx_shape in_shapes[MX_OP_MAX_IO], out_shapes[MX_OP_MAX_IO];
    float *out[MX_OP_MAX_IO];     /* forward outputs (owned) */
    float *in_grad[MX_OP_MAX_IO]; /* backward results (owned), NULL before */
} oprun;

/* Parses params, infers shapes from in_shapes (unknown ones ndim 0 filled
 * in) and runs forward (req write) on in[i] (n_given inputs; aux states
 * among them). */
mx_status oprun_forward(oprun *r, const char *op, const char *const *keys, const char *const *values, int n_params,
                        int n_given, const mx_shape *in_shapes, const float *const *in);
/* After oprun_forward: backward with output gradients head[k] (NULL: zeros)
 * into r->in_grad (req write). */
mx_status oprun_backward(oprun *r, const char *op, const char *const *keys, const char *const *values, int n_params,
                         const float *const *in, const float *const *head);
void oprun_free(oprun *r);

/* s equals want (for MX_SHAPE(...) literals). */
static inline bool oprun_shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

#endif
