/*
 * gputwin.h - one graph bound twice, on the CPU and on gpu(0), from the
 * same host values (the GPU suites that train whole networks and compare
 * the devices step by step: test_gpu_executor, test_gpu_half).
 */
#ifndef MX_TEST_GPUTWIN_H
#define MX_TEST_GPUTWIN_H

#include "executor/executor.h"

#include <stdint.h>

#define GPUTWIN_MAX_INPUTS 128

typedef struct gputwin {
    mx_runtime *rt;
    mx_graph *g;        /* argument order and names; freed by gputwin_unbind */
    mx_graph *bound;    /* what both devices bind: g, or a graph of the same arguments (also freed) */
    int n_args, n_aux;
    uint32_t ids[GPUTWIN_MAX_INPUTS];
    float *host[GPUTWIN_MAX_INPUTS]; /* argument and aux values, shared by both devices */
    int64_t size[GPUTWIN_MAX_INPUTS];
    mx_ndarray *arr[2][GPUTWIN_MAX_INPUTS], *grad[2][GPUTWIN_MAX_INPUTS];
    mx_executor *ex[2]; /* [0] cpu, [1] gpu(0) */
} gputwin;

/* Binds `bound` (NULL: g) for training on both devices, with float32
 * arguments of g's shapes for this data shape: labels k % n_classes,
 * moving_var 1, moving_mean 0, gamma in [0.5, 1.5), the rest uniform in
 * [-1, 1) scaled by 1/sqrt(fan-in) (Xavier's scale: activations and logits
 * stay near 1), drawn from *rng_state (xorshift). gpu_graph: the GPU
 * executor runs its passes as CUDA graphs. Takes g and bound. */
void gputwin_bind(gputwin *t, mx_graph *g, mx_graph *bound, mx_shape data_shape, int n_classes, bool gpu_graph,
                  uint64_t *rng_state);
/* Copies the host values into both devices' arrays. */
void gputwin_upload(gputwin *t);
void gputwin_unbind(gputwin *t);

#endif
