/*
 * binary_math.cuh - ops/binary_math.h's element math (f(a, b) and its
 * partial derivatives) for the elemwise_binary and elemwise_scalar GPU
 * kernels: the same host-and-device functions, with the kind a template
 * argument so each switch folds to one expression.
 */
#ifndef MX_OPS_CUDA_BINARY_MATH_CUH
#define MX_OPS_CUDA_BINARY_MATH_CUH

#include "ops/binary_math.h"

template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_f_dev(float a, float b) { return mx_bin_f(K, a, b); }
template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_da_dev(float a, float b) { return mx_bin_da(K, a, b); }
template <mx_bin_kind K> __device__ __forceinline__ float mx_bin_db_dev(float a, float b) { return mx_bin_db(K, a, b); }
template <mx_bin_kind K> __host__ __device__ constexpr bool mx_bin_no_grad_dev() { return K >= MX_BIN_EQUAL; }

#endif /* MX_OPS_CUDA_BINARY_MATH_CUH */
