/* conv_ref.c - float64 convolution references (see conv_ref.h). */
#include "conv_ref.h"

/* The float64 references: each output's value and sum of |terms|. */
void conv_ref_forward(const mx_conv_geom *g, const float *x, const float *w, const float *bias, double *ref,
                      double *abs_sum)
{
    const int64_t C = g->in_c, F = g->out_c, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    for (int64_t n = 0; n < g->batch; n++)
        for (int64_t f = 0; f < F; f++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = bias ? bias[f] : 0.0, a = bias ? fabs(bias[f]) : 0.0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < g->k_h; i++) {
                            int64_t iy = oy * g->stride_h - g->pad_h + i;
                            if (iy < 0 || iy >= H) continue;
                            for (int64_t j = 0; j < g->k_w; j++) {
                                int64_t ix = ox * g->stride_w - g->pad_w + j;
                                if (ix < 0 || ix >= W) continue;
                                double t = (double)x[((n * C + c) * H + iy) * W + ix] *
                                           (double)w[((f * C + c) * g->k_h + i) * g->k_w + j];
                                acc += t;
                                a += fabs(t);
                            }
                        }
                    int64_t at = ((n * F + f) * OH + oy) * OW + ox;
                    ref[at] = acc;
                    abs_sum[at] = a;
                }
}

/* dx[n,c,iy,ix] = sum over f, i, j with (iy + ph - i) = oy*sh, (ix + pw - j) = ox*sw */
void conv_ref_backward(const mx_conv_geom *g, const float *dy, const float *w, double *ref, double *abs_sum)
{
    const int64_t C = g->in_c, F = g->out_c, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    for (int64_t n = 0; n < g->batch; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t iy = 0; iy < H; iy++)
                for (int64_t ix = 0; ix < W; ix++) {
                    double acc = 0, a = 0;
                    for (int64_t f = 0; f < F; f++)
                        for (int64_t i = 0; i < g->k_h; i++) {
                            int64_t ty = iy + g->pad_h - i;
                            if (ty < 0 || ty % g->stride_h || ty / g->stride_h >= OH) continue;
                            for (int64_t j = 0; j < g->k_w; j++) {
                                int64_t tx = ix + g->pad_w - j;
                                if (tx < 0 || tx % g->stride_w || tx / g->stride_w >= OW) continue;
                                double t = (double)dy[((n * F + f) * OH + ty / g->stride_h) * OW + tx / g->stride_w] *
                                           (double)w[((f * C + c) * g->k_h + i) * g->k_w + j];
                                acc += t;
                                a += fabs(t);
                            }
                        }
                    int64_t at = ((n * C + c) * H + iy) * W + ix;
                    ref[at] = acc;
                    abs_sum[at] = a;
                }
}

void conv_ref_weight(const mx_conv_geom *g, const float *x, const float *dy, double *ref, double *abs_sum)
{
    const int64_t C = g->in_c, F = g->out_c, H = g->in_h, W = g->in_w, OH = g->out_h, OW = g->out_w;
    for (int64_t f = 0; f < F; f++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < g->k_h; i++)
                for (int64_t j = 0; j < g->k_w; j++) {
                    double acc = 0, a = 0;
                    for (int64_t n = 0; n < g->batch; n++)
                        for (int64_t oy = 0; oy < OH; oy++) {
                            int64_t iy = oy * g->stride_h - g->pad_h + i;
                            if (iy < 0 || iy >= H) continue;
                            for (int64_t ox = 0; ox < OW; ox++) {
                                int64_t ix = ox * g->stride_w - g->pad_w + j;
                                if (ix < 0 || ix >= W) continue;
                                double t = (double)dy[((n * F + f) * OH + oy) * OW + ox] *
                                           (double)x[((n * C + c) * H + iy) * W + ix];
                                acc += t;
                                a += fabs(t);
                            }
                        }
                    int64_t at = ((f * C + c) * g->k_h + i) * g->k_w + j;
                    ref[at] = acc;
                    abs_sum[at] = a;
                }
}
