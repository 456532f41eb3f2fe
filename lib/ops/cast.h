/*
 * cast.h - Cast's parameters, shared by cast.c (CPU) and cast.cu (GPU).
 * dtype indexes cast.c's choice list: "float32", "float64", "float16",
 * "uint8", "int32", "int8", "int64", "bfloat16", "bool".
 */
#ifndef MX_OPS_CAST_H
#define MX_OPS_CAST_H

typedef struct cast_params {
    int dtype;
} cast_params;

#endif /* MX_OPS_CAST_H */
