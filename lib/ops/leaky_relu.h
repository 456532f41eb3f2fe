/*
 * leaky_relu.h - LeakyReLU's parameters and act types, shared by the CPU
 * kernels (leaky_relu.c) and the CUDA kernels (leaky_relu.cu).
 */
#ifndef MX_OPS_LEAKY_RELU_H
#define MX_OPS_LEAKY_RELU_H

enum { LR_RRELU, LR_LEAKY, LR_PRELU, LR_ELU, LR_SELU, LR_GELU };

typedef struct lrelu_params {
    int act_type;
    double slope;
    double lower_bound;
    double upper_bound;
} lrelu_params;

#define SELU_LAMBDA 1.0507009873554804934193349852946f
#define SELU_ALPHA 1.6732632423543772848170429916717f

#endif /* MX_OPS_LEAKY_RELU_H */
