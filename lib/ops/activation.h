/*
 * activation.h - Activation's parameters, shared by activation.c and activation.cu.
 */
#ifndef MX_OPS_ACTIVATION_H
#define MX_OPS_ACTIVATION_H

#include "base/base.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

enum { ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_SOFTRELU, ACT_SOFTSIGN };

typedef struct act_params {
    int act_type;
} act_params;

/* An Activation folded into the op that produces its input (the
 * executor's MXNET_EXEC_ENABLE_FOLDING), computed as the Activation op
 * computes it, so folded and unfolded graphs give the same bits:
 *   mx_activation_fold_rows: y = f(y) in place on the calling thread, for
 *     a producer's output pass (a row, a tile, a piece of images);
 *   mx_activation_fold_forward: the same over a whole tensor on `pool`;
 *   mx_activation_fold_backward: dy = dy * f'(y) in place on `pool`: the
 *     activation's input gradient, handed to the producer's backward;
 *   mx_activation_fold_backward_rows: out = dy * f'(y) on the calling
 *     thread (out may be dy or y), for a producer whose backward applies
 *     it a row at a time.
 * act_type is one of the enum above. */
typedef struct mx_threadpool mx_threadpool;
void mx_activation_fold_rows(int simd_level, int act_type, float *y, int64_t n);
void mx_activation_fold_forward(mx_threadpool *pool, int act_type, float *y, int64_t n);
void mx_activation_fold_backward(mx_threadpool *pool, int act_type, float *dy, const float *y, int64_t n);
void mx_activation_fold_backward_rows(int simd_level, int act_type, const float *dy, const float *y, float *out,
                                      int64_t n);

#endif /* MX_OPS_ACTIVATION_H */
