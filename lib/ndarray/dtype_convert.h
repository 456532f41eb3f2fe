/*
 * dtype_convert.h - the one element-wise dtype conversion of the library:
 * NDArray copies and fills, Cast and amp_cast all convert through it, on
 * the host (dtype_convert.c) and on a GPU (dtype_convert.cu).
 *
 * Every pair of the dtypes of ndarray.h converts, through double:
 *   - float16 and bfloat16 go through float32 (base/half.h on the host,
 *     cuda_fp16.h / cuda_bf16.h on the GPU), rounding to nearest even:
 *     overflow gives inf, subnormals are kept, a NaN stays a quiet NaN of
 *     its sign. A float64 is rounded to float32 first, as MXNet's mshadow
 *     does (half_t(double) is half_t(float(double))).
 *   - float -> integer truncates toward zero like C's cast, but saturates at
 *     the type's range and maps NaN to 0 where C (and MXNet) leave it
 *     undefined.
 * The GPU gives the host's bits for every element, NaN payloads included
 * (it follows x86's float <-> double NaN rules explicitly), except the
 * payload of a NaN that an accumulation (add) makes.
 */
#ifndef MX_NDARRAY_DTYPE_CONVERT_H
#define MX_NDARRAY_DTYPE_CONVERT_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ndarray/ndarray.h"

/* dst (n elements of dt) = src (n elements of st), or dst += src when add
 * (the sum taken in double, then converted), host memory. dst == src is
 * fine (in place, whatever the sizes); other overlaps are not. `what` names the caller in errors: MX_ERR_INVALID for an invalid
 * dtype. */
mx_status mx_dtype_convert(const char *what, void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n,
                           bool add);

/* One element of dt holding `value` (converted as above) into *elem
 * (mx_dtype_size(dt) bytes). MX_ERR_INVALID for an invalid dtype. */
mx_status mx_dtype_from_double(const char *what, void *elem, mx_dtype dt, double value);

#ifdef MX_USE_CUDA
/* The same on device memory of the GPU of `worker` (an mx_cuda_worker, as
 * in mx_exec_ctx.stream): one kernel queued on its stream, not waited for
 * (the caller's op_done / sync does). dst == src is fine (types of
 * different sizes go through the worker's scratch); other overlaps are not. Errors: MX_ERR_INVALID (dtype),
 * MX_ERR_DEVICE (launch). */
mx_status mx_dtype_convert_gpu(const char *what, void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n,
                               bool add, void *worker);
/* dst (n elements of dt) = the element *elem everywhere (a bit pattern of
 * mx_dtype_size(dt) bytes, from mx_dtype_from_double), queued on worker's
 * stream. */
mx_status mx_dtype_fill_gpu(void *dst, mx_dtype dt, const void *elem, int64_t n, void *worker);
/* mx_dtype_convert_gpu's element code (cuda_fp16.h's and cuda_bf16.h's
 * host versions of the intrinsics) run on host memory: what tests compare
 * with mx_dtype_convert where no GPU is visible. */
mx_status mx_dtype_convert_gpu_emulate(void *dst, mx_dtype dt, const void *src, mx_dtype st, int64_t n, bool add);
#endif

#ifdef __cplusplus
}
#endif

#endif /* MX_NDARRAY_DTYPE_CONVERT_H */
