/*
 * clip.h - clip's parameters, shared by clip.c (CPU) and clip.cu (GPU).
 */
#ifndef MX_OPS_CLIP_H
#define MX_OPS_CLIP_H

typedef struct clip_params {
    double a_min;
    double a_max;
} clip_params;

#endif /* MX_OPS_CLIP_H */
