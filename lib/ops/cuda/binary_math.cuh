/*
 * binary_math.cuh - device twins of ops/binary_math.h's element math
 * (f(a, b) and its partial derivatives), formula for formula, for the
 * elemwise_binary and elemwise_scalar GPU kernels. The kind is a template
 * argument, so each switch folds to one expression. Keep in step with
 * binary_math.h.
 */
#ifndef MX_OPS_CUDA_BINARY_MATH_CUH
#define MX_OPS_CUDA_BINARY_MATH_CUH

#include "ops/binary_math.h"

/* Python's a % b, as mx_bin_mod (in double, then float). */
__device__ __forceinline__ float mx_bin_mod_dev(float a, float b)
{
    double x = a, y = b;
    if (y == 0) return 0.0f;
    if (y < 0) {
        if (x < 0) return (float)-fmod(-x, -y);
        double r = fmod(x, -y);
        return (float)(r + (r != 0 ? y : 0));
    }
    if (x < 0) {
        double r = fmod(-x, y);
        return (float)(-r + (r != 0 ? y : 0));
    }
    return (float)fmod(x, y);
}

template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_f_dev(float a, float b)
{
    switch (K) {
    case MX_BIN_ADD: return a + b;
    case MX_BIN_SUB: return a - b;
    case MX_BIN_MUL: return a * b;
    case MX_BIN_DIV: return a / b;
    case MX_BIN_POWER: return powf(a, b);
    case MX_BIN_MAXIMUM: return a != a ? a : b != b ? b : a > b ? a : b;
    case MX_BIN_MINIMUM: return a != a ? a : b != b ? b : a < b ? a : b;
    case MX_BIN_MOD: return mx_bin_mod_dev(a, b);
    case MX_BIN_HYPOT: return hypotf(a, b);
    case MX_BIN_EQUAL: return a == b ? 1.0f : 0.0f;
    case MX_BIN_NOT_EQUAL: return a != b ? 1.0f : 0.0f;
    case MX_BIN_GREATER: return a > b ? 1.0f : 0.0f;
    case MX_BIN_GREATER_EQUAL: return a >= b ? 1.0f : 0.0f;
    case MX_BIN_LESSER: return a < b ? 1.0f : 0.0f;
    case MX_BIN_LESSER_EQUAL: return a <= b ? 1.0f : 0.0f;
    case MX_BIN_LOGICAL_AND: return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;
    case MX_BIN_LOGICAL_OR: return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;
    case MX_BIN_LOGICAL_XOR: return (a != 0.0f) != (b != 0.0f) ? 1.0f : 0.0f;
    }
    return 0.0f;
}

/* d f / d a at (a, b). */
template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_da_dev(float a, float b)
{
    switch (K) {
    case MX_BIN_ADD:
    case MX_BIN_SUB:
    case MX_BIN_MOD: return 1.0f;
    case MX_BIN_MUL: return b;
    case MX_BIN_DIV: return 1.0f / b;
    case MX_BIN_POWER: return b * powf(a, b - 1.0f);
    case MX_BIN_MAXIMUM: return a >= b ? 1.0f : 0.0f;
    case MX_BIN_MINIMUM: return a <= b ? 1.0f : 0.0f;
    case MX_BIN_HYPOT: return a / hypotf(a, b);
    default: return 0.0f;
    }
}

/* d f / d b at (a, b). */
template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_db_dev(float a, float b)
{
    switch (K) {
    case MX_BIN_ADD: return 1.0f;
    case MX_BIN_SUB: return -1.0f;
    case MX_BIN_MUL: return a;
    case MX_BIN_DIV: return -a / (b * b);
    case MX_BIN_POWER: return powf(a, b) * logf(a);
    case MX_BIN_MAXIMUM: return a < b ? 1.0f : 0.0f;
    case MX_BIN_MINIMUM: return a > b ? 1.0f : 0.0f;
    case MX_BIN_MOD: return -floorf(a / b);
    case MX_BIN_HYPOT: return b / hypotf(a, b);
    default: return 0.0f;
    }
}

/* Comparisons and logical ops: outputs 0/1, gradients zero. */
template <mx_bin_kind K> __host__ __device__ constexpr bool mx_bin_no_grad_dev() { return K >= MX_BIN_EQUAL; }

#endif /* MX_OPS_CUDA_BINARY_MATH_CUH */
