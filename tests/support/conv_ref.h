/*
 * conv_ref.h - the float64 convolution references the CPU engines' tests
 * share (direct kernels, Winograd): forward, data gradient and weight
 * gradient of a 2-d convolution with one group, from the engine's own
 * geometry (mx_conv_geom: strides and padding, any kernel), each value
 * with the sum of the magnitudes of its terms (a scale for error bounds).
 */
#ifndef MX_TEST_CONV_REF_H
#define MX_TEST_CONV_REF_H

#include "ops/cpu/im2col.h"

/* ref[n,f,oy,ox] = bias[f] + sum x * w (bias may be NULL). */
void conv_ref_forward(const mx_conv_geom *g, const float *x, const float *w, const float *bias, double *ref,
                      double *abs_sum);
/* dx[n,c,iy,ix] = the sum of dy * w over the outputs that read (iy, ix). */
void conv_ref_backward(const mx_conv_geom *g, const float *dy, const float *w, double *ref, double *abs_sum);
/* dw[f,c,i,j] = the sum of x * dy over batch and output positions. */
void conv_ref_weight(const mx_conv_geom *g, const float *x, const float *dy, double *ref, double *abs_sum);

#endif
