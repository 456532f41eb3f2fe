/*
 * cast.h - the parameters of Cast (cast.c, cast.cu) and amp_cast
 * (elemwise_misc.c, elemwise_misc.cu), shared by their CPU and GPU
 * kernels, and the dtype each gives its output. Both convert through
 * ndarray/dtype_convert.h.
 */
#ifndef MX_OPS_CAST_H
#define MX_OPS_CAST_H

#ifdef __cplusplus
extern "C" {
#endif
#include "ndarray/ndarray.h"
#ifdef __cplusplus
}
#endif

/* dtype indexes mx_cast_choices. */
typedef struct cast_params {
    int dtype;
} cast_params;

/* MXNet's names and our dtypes (-1: recognised, not supported). */
static const char *const mx_cast_choices[] = {"float32", "float64", "float16",  "uint8", "int32",
                                              "int8",    "int64",   "bfloat16", "bool",  NULL};
static const int mx_cast_dtypes[] = {MX_FLOAT32, MX_FLOAT64, MX_FLOAT16,  MX_UINT8, MX_INT32,
                                     MX_INT8,    MX_INT64,   MX_BFLOAT16, -1};

/* dtype indexes mx_amp_cast_choices (MXNet's order). */
typedef struct amp_cast_params {
    int dtype;
} amp_cast_params;

static const char *const mx_amp_cast_choices[] = {"bfloat16", "float16", "float32", "float64", "int32",
                                                  "int64",    "int8",    "uint8",   NULL};
static const int mx_amp_cast_dtypes[] = {MX_BFLOAT16, MX_FLOAT16, MX_FLOAT32, MX_FLOAT64,
                                         MX_INT32,    MX_INT64,   MX_INT8,    MX_UINT8};

/* Every dtype Cast and amp_cast compute in, CPU and GPU (their
 * cpu_dtypes and GPU kernels' dtypes): all of ndarray.h's. */
#define MX_CAST_ALL_DTYPES                                                                                         \
    (MX_DTYPE_BIT(MX_FLOAT32) | MX_DTYPE_BIT(MX_FLOAT64) | MX_DTYPE_BIT(MX_FLOAT16) | MX_DTYPE_BIT(MX_BFLOAT16) |    \
     MX_DTYPE_BIT(MX_UINT8) | MX_DTYPE_BIT(MX_INT32) | MX_DTYPE_BIT(MX_INT8) | MX_DTYPE_BIT(MX_INT64))

/* amp_cast's output dtype (MXNet's AMPCastType): `dtype` for float32,
 * float16 and bfloat16 data; any other data passes through unchanged. */
static inline mx_dtype mx_amp_cast_out_dtype(const amp_cast_params *p, mx_dtype data)
{
    if (data == MX_FLOAT32 || data == MX_FLOAT16 || data == MX_BFLOAT16) return (mx_dtype)mx_amp_cast_dtypes[p->dtype];
    return data;
}

#endif /* MX_OPS_CAST_H */
