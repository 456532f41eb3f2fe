/*
 * clip.h - clip's parameters, shared by clip.c (CPU) and clip.cu (GPU).
 */
#ifndef MX_OPS_CLIP_H
#define MX_OPS_CLIP_H

typedef struct clip_params {
    double a_min;
    double a_max;
} clip_params;

/* A clip folded into the op before it (op.h's mx_fold_*). */
#include <stdint.h>
typedef struct mx_threadpool mx_threadpool;
void mx_clip_fold_rows(int simd_level, float lo, float hi, float *y, int64_t n);
void mx_clip_fold_forward(mx_threadpool *pool, float lo, float hi, float *y, int64_t n);
void mx_clip_fold_backward(mx_threadpool *pool, float lo, float hi, float *dy, const float *y, int64_t n);
/* out = dy * clip'(y) on the calling thread (out may be dy or y). */
void mx_clip_fold_backward_rows(int simd_level, float lo, float hi, const float *dy, const float *y, float *out,
                                int64_t n);

#endif /* MX_OPS_CLIP_H */
