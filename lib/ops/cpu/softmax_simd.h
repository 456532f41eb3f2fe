/*
 * softmax_simd.h - vectorised building blocks shared by softmax.c
 * (softmax, log_softmax) and softmax_output.c (SoftmaxOutput): a float exp
 * and row/lane reductions, written with GCC/Clang vector extensions so they
 * run SM_W floats at a time at the project's -O2 (which does not vectorise
 * loops of unknown length by itself) on any target.
 *
 * sm_vexp is simd.h's portable exp (Cephes' expf: n = round(x log2 e),
 * r = x - n ln 2 in two parts, exp(r) by a degree-5 polynomial, times 2^n
 * through the exponent bits); within 1 ulp of exp for -87 <= x <= 88.37.
 * Below -87 it returns 0 (results under 1.7e-38 are flushed), above 88.37 it
 * saturates at exp(88.37) = 2.4e38 instead of overflowing; NaN stays NaN.
 */
#ifndef MX_OPS_SOFTMAX_SIMD_H
#define MX_OPS_SOFTMAX_SIMD_H

#include "ops/cpu/simd.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 4 floats: the SSE2 / NEON width every x86-64 and arm64 target has (wider
 * vectors would change the calling convention without -mavx). */
#define SM_W 4
typedef float sm_vf __attribute__((vector_size(16)));
typedef int32_t sm_vi __attribute__((vector_size(16)));
typedef uint32_t sm_vu __attribute__((vector_size(16)));

#define SM_V(s) ((sm_vf){(s), (s), (s), (s)})

static inline sm_vf sm_load(const float *p)
{
    sm_vf v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline void sm_store(float *p, sm_vf v) { memcpy(p, &v, sizeof(v)); }

/* Loads n < SM_W floats, the rest filled with `fill`. */
static inline sm_vf sm_load_part(const float *p, int64_t n, float fill)
{
    float b[SM_W] = {fill, fill, fill, fill};
    memcpy(b, p, (size_t)n * sizeof(float));
    return sm_load(b);
}

static inline void sm_store_part(float *p, sm_vf v, int64_t n)
{
    float b[SM_W];
    sm_store(b, v);
    memcpy(p, b, (size_t)n * sizeof(float));
}

/* mask ? a : b, mask lanes all ones or all zeros. */
static inline sm_vf sm_select(sm_vi mask, sm_vf a, sm_vf b)
{
    return (sm_vf)((mask & (sm_vi)a) | (~mask & (sm_vi)b));
}

static inline sm_vf sm_vmax(sm_vf a, sm_vf b) { return sm_select(a > b, a, b); }

/* The portable-width exp of simd.h (mx4_exp, the same Cephes expf). */
static inline sm_vf sm_vexp(sm_vf x) { return mx4_exp(x); }

static inline float sm_hsum(sm_vf v)
{
    float b[SM_W];
    sm_store(b, v);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

static inline float sm_hmax(sm_vf v)
{
    float b[SM_W], m;
    sm_store(b, v);
    m = b[0];
    for (int i = 1; i < SM_W; i++) m = b[i] > m ? b[i] : m;
    return m;
}

/* max of x[0..n) (-inf for n == 0). */
static inline float sm_row_max(const float *x, int64_t n)
{
    sm_vf m = SM_V(-INFINITY);
    int64_t i = 0;
    for (; i + SM_W <= n; i += SM_W) m = sm_vmax(m, sm_load(x + i));
    if (i < n) m = sm_vmax(m, sm_load_part(x + i, n - i, -INFINITY));
    return sm_hmax(m);
}

/* y[i] = exp((x[i] - shift) * scale) (y may be x, or NULL to only sum);
 * returns the sum of the y. */
static inline float sm_row_exp(const float *x, float *y, int64_t n, float shift, float scale)
{
    sm_vf s = SM_V(0.0f);
    int64_t i = 0;
    for (; i + SM_W <= n; i += SM_W) {
        sm_vf e = sm_vexp((sm_load(x + i) - shift) * scale);
        if (y) sm_store(y + i, e);
        s += e;
    }
    if (i < n) {
        sm_vf e = sm_vexp((sm_load_part(x + i, n - i, 0.0f) - shift) * scale);
        sm_vi keep = {0, 1, 2, 3};
        keep = keep < (int32_t)(n - i);
        e = sm_select(keep, e, SM_V(0.0f));
        if (y) sm_store_part(y + i, e, n - i);
        s += e;
    }
    return sm_hsum(s);
}

/* y[i] *= a. */
static inline void sm_row_scale(float *y, int64_t n, float a)
{
    int64_t i = 0;
    for (; i + SM_W <= n; i += SM_W) sm_store(y + i, sm_load(y + i) * a);
    for (; i < n; i++) y[i] *= a;
}

/* y[i] += exp((x[i] - shift) * scale) * a. */
static inline void sm_row_exp_add(const float *x, float *y, int64_t n, float shift, float scale, float a)
{
    int64_t i = 0;
    for (; i + SM_W <= n; i += SM_W) sm_store(y + i, sm_load(y + i) + sm_vexp((sm_load(x + i) - shift) * scale) * a);
    if (i < n) {
        sm_vf e = sm_vexp((sm_load_part(x + i, n - i, 0.0f) - shift) * scale);
        sm_store_part(y + i, sm_load_part(y + i, n - i, 0.0f) + e * a, n - i);
    }
}

/* Per lane: m[t] = max(m[t], x[t]). */
static inline void sm_lanes_max(float *m, const float *x, int64_t w)
{
    int64_t t = 0;
    for (; t + SM_W <= w; t += SM_W) sm_store(m + t, sm_vmax(sm_load(m + t), sm_load(x + t)));
    for (; t < w; t++) m[t] = x[t] > m[t] ? x[t] : m[t];
}

/* Per lane: e = exp((x[t] - m[t]) * scale); y[t] = e (y may be x, or NULL);
 * s[t] += e. */
static inline void sm_lanes_exp(const float *x, float *y, const float *m, float *s, int64_t w, float scale)
{
    int64_t t = 0;
    for (; t + SM_W <= w; t += SM_W) {
        sm_vf e = sm_vexp((sm_load(x + t) - sm_load(m + t)) * scale);
        if (y) sm_store(y + t, e);
        sm_store(s + t, sm_load(s + t) + e);
    }
    if (t < w) {
        int64_t r = w - t;
        sm_vf e = sm_vexp((sm_load_part(x + t, r, 0.0f) - sm_load_part(m + t, r, 0.0f)) * scale);
        if (y) sm_store_part(y + t, e, r);
        sm_store_part(s + t, sm_load_part(s + t, r, 0.0f) + e, r);
    }
}

/* Per lane: y[t] += exp((x[t] - m[t]) * scale) * a[t]. */
static inline void sm_lanes_exp_add(const float *x, float *y, const float *m, const float *a, int64_t w, float scale)
{
    int64_t t = 0;
    for (; t + SM_W <= w; t += SM_W)
        sm_store(y + t, sm_load(y + t) + sm_vexp((sm_load(x + t) - sm_load(m + t)) * scale) * sm_load(a + t));
    if (t < w) {
        int64_t r = w - t;
        sm_vf e = sm_vexp((sm_load_part(x + t, r, 0.0f) - sm_load_part(m + t, r, 0.0f)) * scale);
        sm_store_part(y + t, sm_load_part(y + t, r, 0.0f) + e * sm_load_part(a + t, r, 0.0f), r);
    }
}

/* log_softmax backward over n entries: dx = (dy - exp(y) * s) * scale, s
 * one value (stride 0) or one per entry (stride 1); written or added. dx
 * may be dy. */
static inline void sm_logsm_bwd(const float *y, const float *dy, float *dx, int64_t n, const float *s, int s_stride,
                                float scale, int add)
{
    int64_t i = 0;
    for (; i + SM_W <= n; i += SM_W) {
        sm_vf sv = s_stride ? sm_load(s + i) : SM_V(s[0]);
        sm_vf v = (sm_load(dy + i) - sm_vexp(sm_load(y + i)) * sv) * scale;
        sm_store(dx + i, add ? sm_load(dx + i) + v : v);
    }
    if (i < n) {
        int64_t r = n - i;
        sm_vf sv = s_stride ? sm_load_part(s + i, r, 0.0f) : SM_V(s[0]);
        sm_vf v = (sm_load_part(dy + i, r, 0.0f) - sm_vexp(sm_load_part(y + i, r, 0.0f)) * sv) * scale;
        sm_store_part(dx + i, add ? sm_load_part(dx + i, r, 0.0f) + v : v, r);
    }
}

#endif /* MX_OPS_SOFTMAX_SIMD_H */
