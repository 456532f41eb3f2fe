/*
 * stack.h - stack's parameters, shared by the CPU kernels (stack.c) and
 * the CUDA kernels (stack.cu).
 */
#ifndef MX_OPS_STACK_H
#define MX_OPS_STACK_H

#include <stdint.h>

typedef struct stack_params {
    int64_t axis, num_args;
} stack_params;

#endif /* MX_OPS_STACK_H */
