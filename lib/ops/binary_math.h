/*
 * binary_math.h - the element math of MXNet's two-operand operators, shared
 * by the array-scalar (elemwise_scalar.c), equal-shape (elemwise_binary.c)
 * and broadcasting (broadcast_binary.c) families, so that
 * _maximum_scalar, _maximum and broadcast_maximum agree bit for bit.
 *
 * f(a, b) and its partial derivatives as MXNet 1.9.1 computes them in
 * float (checked against its CPU kernels):
 *   maximum, minimum  NaN in either operand gives NaN; d/da is 1 where
 *                     a >= b (maximum) or a <= b (minimum), d/db is 1 where
 *                     a < b (a > b): ties go to the left operand
 *   power             powf(a, b); d/da = b a^(b-1), d/db = a^b log(a)
 *   mod               Python's a % b (sign of b) computed in double, 0 for
 *                     b = 0; d/da = 1, d/db = -floor(a / b)
 *   hypot             sqrt(a^2 + b^2); d/da = a / f, d/db = b / f
 *   comparisons and logical and/or/xor give 1 or 0 and have no gradient
 *                     (MXNet writes zeros).
 * Kinds are compile-time constants in every kernel, so the switches fold
 * away and the loops stay simple.
 */
#ifndef MX_OPS_BINARY_MATH_H
#define MX_OPS_BINARY_MATH_H

#include <math.h>
#include <stdbool.h>

/* The element functions compile for the host and, under nvcc, for the
 * device too: the GPU kernels (cuda/binary_math.cuh) run these very
 * formulas. */
#ifdef __CUDACC__
#define MX_BIN_HD __host__ __device__
#else
#define MX_BIN_HD
#endif

typedef enum mx_bin_kind {
    MX_BIN_ADD,
    MX_BIN_SUB,
    MX_BIN_MUL,
    MX_BIN_DIV,
    MX_BIN_POWER,
    MX_BIN_MAXIMUM,
    MX_BIN_MINIMUM,
    MX_BIN_MOD,
    MX_BIN_HYPOT,
    MX_BIN_EQUAL,
    MX_BIN_NOT_EQUAL,
    MX_BIN_GREATER,
    MX_BIN_GREATER_EQUAL,
    MX_BIN_LESSER,
    MX_BIN_LESSER_EQUAL,
    MX_BIN_LOGICAL_AND,
    MX_BIN_LOGICAL_OR,
    MX_BIN_LOGICAL_XOR,
} mx_bin_kind;

/* Comparisons and logical ops: outputs 0/1, gradients zero. */
MX_BIN_HD static inline bool mx_bin_no_grad(mx_bin_kind k) { return k >= MX_BIN_EQUAL; }

/* Whether backward reads the operands (besides out_grad): add and sub
 * do not, nor ops without a gradient. A constant expression (op tables). */
#define MX_BIN_GRAD_READS_INPUTS(k) ((k) >= MX_BIN_MUL && (k) < MX_BIN_EQUAL)

/* Python's a % b, as MXNet's mshadow_op::mod (in double, then float). */
MX_BIN_HD static inline float mx_bin_mod(float a, float b)
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

MX_BIN_HD static inline float mx_bin_f(mx_bin_kind k, float a, float b)
{
    switch (k) {
    case MX_BIN_ADD: return a + b;
    case MX_BIN_SUB: return a - b;
    case MX_BIN_MUL: return a * b;
    case MX_BIN_DIV: return a / b;
    case MX_BIN_POWER: return powf(a, b);
    case MX_BIN_MAXIMUM: return a != a ? a : b != b ? b : a > b ? a : b;
    case MX_BIN_MINIMUM: return a != a ? a : b != b ? b : a < b ? a : b;
    case MX_BIN_MOD: return mx_bin_mod(a, b);
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
MX_BIN_HD static inline float mx_bin_da(mx_bin_kind k, float a, float b)
{
    switch (k) {
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
MX_BIN_HD static inline float mx_bin_db(mx_bin_kind k, float a, float b)
{
    switch (k) {
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

#endif /* MX_OPS_BINARY_MATH_H */
