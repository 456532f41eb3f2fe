/*
 * batch_norm.c - BatchNorm over the channel axis `axis` of data of any
 * rank: y = (x - mean) * invstd * gamma + beta, invstd = 1/sqrt(var + eps).
 *
 * Training (is_train and not use_global_stats): mean and the biased
 * variance of each channel over the batch and every other axis; forward
 * also moves the aux states, moving = moving*momentum + batch*(1-momentum).
 * Otherwise the moving statistics are used as they are.
 *
 * Outputs: output, mean, var. As MXNet's CPU kernel does, `var` holds the
 * inverse standard deviation actually used (1/sqrt(var + eps)); backward
 * reads mean and invstd back from them. Only `output` is visible unless
 * output_mean_var. fix_gamma: gamma is taken as 1 and its gradient is 0.
 * Backward ignores the gradients of the mean/var outputs, as MXNet does.
 *
 * BatchNorm+ElementWiseSum (mx_op_batch_norm_add) is the executor's fold of
 * a residual sum into the BatchNorm before it (symbol.h's
 * mx_graph_fold_residual_sums): out = BatchNorm(data) + addend, then the
 * sum's folded relu, in the normalize pass; backward hands the addend the
 * sum's gradient and goes on as BatchNorm's. Not in the registry: no
 * config or JSON names it.
 *
 * Differences from MXNet 1.9.1's CPU kernel: the moving statistics move
 * in forward (MXNet's CPU kernel moves them in backward), and fix_gamma
 * does not write 1 into the gamma array.
 */
#include "ops/op.h"
#include "ops/batch_norm.h"
#include "ops/cpu/simd.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

static const mx_param_desc bn_param_table[] = {
    {"eps", MX_PARAM_FLOAT, "0.001", 0, 1e30, NULL, offsetof(bn_params, eps), "added to the variance"},
    {"momentum", MX_PARAM_FLOAT, "0.9", 0, 1, NULL, offsetof(bn_params, momentum),
     "moving average momentum of the statistics"},
    {"fix_gamma", MX_PARAM_BOOL, "True", 1, 0, NULL, offsetof(bn_params, fix_gamma),
     "take gamma as 1 and leave it untrained"},
    {"use_global_stats", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(bn_params, use_global_stats),
     "normalise with the moving statistics in training too"},
    {"output_mean_var", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(bn_params, output_mean_var),
     "also show the mean and var (inverse std) outputs"},
    {"axis", MX_PARAM_INT, "1", -MX_MAX_NDIM, MX_MAX_NDIM - 1, NULL, offsetof(bn_params, axis),
     "the channel axis (negative counts from the end)"},
    {"cudnn_off", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(bn_params, cudnn_off), "GPU: True uses mxc's own kernels instead of cuDNN's (the CPU has one implementation)"},
};

static int bn_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "gamma";
    names[2] = "beta";
    names[3] = "moving_mean";
    names[4] = "moving_var";
    return 5;
}

static int bn_num_aux(const void *p)
{
    (void)p;
    return 2;
}

static int bn_list_outputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "output";
    names[1] = "mean";
    names[2] = "var";
    return 3;
}

static int bn_num_visible_outputs(const void *p)
{
    const bn_params *bp = p;
    return bp->output_mean_var ? 3 : 1;
}

static mx_status expect_shape(const char *what, mx_shape *have, mx_shape want)
{
    char a[128], b[128];
    if (have->ndim == 0) {
        *have = want;
        return MX_OK;
    }
    if (!mx_shape_equal(have, &want))
        return MX_ERROR(MX_ERR_INVALID, "BatchNorm: %s has shape %s, expected %s", what,
                        mx_shape_str(have, a, sizeof(a)), mx_shape_str(&want, b, sizeof(b)));
    return MX_OK;
}

/* (outer, channels, inner) around the channel axis; -1 if out of range. */
static int bn_axis(const bn_params *bp, const mx_shape *d)
{
    int64_t a = bp->axis < 0 ? bp->axis + d->ndim : bp->axis;
    return a >= 0 && a < d->ndim ? (int)a : -1;
}

void mx_bn_dims(const bn_params *bp, const mx_shape *d, int64_t *outer, int64_t *c, int64_t *inner)
{
    int a = bn_axis(bp, d);
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < a; i++) *outer *= d->dims[i];
    for (int i = a + 1; i < d->ndim; i++) *inner *= d->dims[i];
    *c = d->dims[a];
}

static mx_status bn_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    (void)n_in;
    (void)n_out;
    const bn_params *bp = p;
    char a[128];
    if (in[0].ndim == 0) return MX_ERROR(MX_ERR_INVALID, "BatchNorm: the shape of data is unknown");
    int ax = bn_axis(bp, &in[0]);
    if (ax < 0)
        return MX_ERROR(MX_ERR_INVALID, "BatchNorm: parameter 'axis' has bad value '%lld' for data shape %s",
                        (long long)bp->axis, mx_shape_str(&in[0], a, sizeof(a)));
    mx_shape cs = MX_SHAPE(in[0].dims[ax]);
    MX_TRY(expect_shape("gamma", &in[1], cs));
    MX_TRY(expect_shape("beta", &in[2], cs));
    MX_TRY(expect_shape("moving_mean", &in[3], cs));
    MX_TRY(expect_shape("moving_var", &in[4], cs));
    out[0] = in[0];
    out[1] = cs;
    out[2] = cs;
    return MX_OK;
}

/* Reductions in double over 8 independent lanes (lane l adds elements l,
 * l + 8, l + 16, ...), then the tail, then the lanes in order. The lanes
 * run in one AVX-512 register (or two AVX2 ones) where the CPU has them
 * (MX_SIMD caps it): each lane adds in the same order, with no fused
 * multiply-add, so every width gives the same bits. (Left to the compiler
 * they were SSE2 with the lanes on the stack: the forward statistics alone
 * were 6.5% of ResNet-50's training time.) */
#define BN_LANES 8

/* Forward's statistics in one pass over x: sum(x - k) (lanes sl) and
 * sum((x - k)^2) (lanes ql), k a value of the channel (so that a constant
 * channel's variance is exactly 0 and the squares do not dwarf it). */
static void lanes_sq_portable(const float *x, int64_t n8, double k, double *sl, double *ql)
{
    for (int64_t i = 0; i < n8; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            double d = x[i + l] - k;
            sl[l] += d;
            ql[l] += d * d;
        }
}

#ifdef MX_SIMD_X86
MX_SIMD_TARGET_AVX512 static void lanes_sq_avx512(const float *x, int64_t n8, double k, double *sl, double *ql)
{
    __m512d s = _mm512_loadu_pd(sl), q = _mm512_loadu_pd(ql);
    const __m512d kk = _mm512_set1_pd(k);
    for (int64_t i = 0; i < n8; i += BN_LANES) {
        __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), kk);
        s = _mm512_add_pd(s, d);
        q = _mm512_add_pd(q, _mm512_mul_pd(d, d));
    }
    _mm512_storeu_pd(sl, s);
    _mm512_storeu_pd(ql, q);
}

MX_SIMD_TARGET_AVX2 static void lanes_sq_avx2(const float *x, int64_t n8, double k, double *sl, double *ql)
{
    __m256d s0 = _mm256_loadu_pd(sl), s1 = _mm256_loadu_pd(sl + 4), q0 = _mm256_loadu_pd(ql), q1 = _mm256_loadu_pd(ql + 4);
    const __m256d kk = _mm256_set1_pd(k);
    for (int64_t i = 0; i < n8; i += BN_LANES) {
        __m256d a = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), kk);
        __m256d b = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), kk);
        s0 = _mm256_add_pd(s0, a);
        s1 = _mm256_add_pd(s1, b);
        q0 = _mm256_add_pd(q0, _mm256_mul_pd(a, a));
        q1 = _mm256_add_pd(q1, _mm256_mul_pd(b, b));
    }
    _mm256_storeu_pd(sl, s0);
    _mm256_storeu_pd(sl + 4, s1);
    _mm256_storeu_pd(ql, q0);
    _mm256_storeu_pd(ql + 4, q1);
}
#endif

static void reduce_sum_sq(int level, const float *x, int64_t n, double k, double *sum, double *sq)
{
    double sl[BN_LANES] = {0}, ql[BN_LANES] = {0};
    const int64_t n8 = n / BN_LANES * BN_LANES;
#ifdef MX_SIMD_X86
    if (level >= MX_SIMD_AVX512) lanes_sq_avx512(x, n8, k, sl, ql);
    else if (level == MX_SIMD_AVX2) lanes_sq_avx2(x, n8, k, sl, ql);
    else lanes_sq_portable(x, n8, k, sl, ql);
#else
    (void)level;
    lanes_sq_portable(x, n8, k, sl, ql);
#endif
    double s = 0, q = 0;
    for (int64_t i = n8; i < n; i++) {
        double d = x[i] - k;
        s += d;
        q += d * d;
    }
    for (int l = 0; l < BN_LANES; l++) {
        s += sl[l];
        q += ql[l];
    }
    *sum = s;
    *sq = q;
}

/* Backward's pair in one pass over dy: sum(dy) (lanes sl) and
 * sum((x - mean) * dy) (lanes dl), lanes as reduce() runs them. */
static void lanes2_portable(const float *x, const float *dy, int64_t n8, double mean, double *sl, double *dl)
{
    for (int64_t i = 0; i < n8; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            sl[l] += (double)dy[i + l];
            dl[l] += (x[i + l] - mean) * dy[i + l];
        }
}

#ifdef MX_SIMD_X86
MX_SIMD_TARGET_AVX512 static void lanes2_avx512(const float *x, const float *dy, int64_t n8, double mean, double *sl,
                                                double *dl)
{
    __m512d s = _mm512_loadu_pd(sl), d = _mm512_loadu_pd(dl);
    const __m512d mu = _mm512_set1_pd(mean);
    for (int64_t i = 0; i < n8; i += BN_LANES) {
        __m512d g = _mm512_cvtps_pd(_mm256_loadu_ps(dy + i));
        s = _mm512_add_pd(s, g);
        d = _mm512_add_pd(d, _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), mu), g));
    }
    _mm512_storeu_pd(sl, s);
    _mm512_storeu_pd(dl, d);
}

MX_SIMD_TARGET_AVX2 static void lanes2_avx2(const float *x, const float *dy, int64_t n8, double mean, double *sl,
                                            double *dl)
{
    __m256d s0 = _mm256_loadu_pd(sl), s1 = _mm256_loadu_pd(sl + 4), d0 = _mm256_loadu_pd(dl), d1 = _mm256_loadu_pd(dl + 4);
    const __m256d mu = _mm256_set1_pd(mean);
    for (int64_t i = 0; i < n8; i += BN_LANES) {
        __m256d g0 = _mm256_cvtps_pd(_mm_loadu_ps(dy + i)), g1 = _mm256_cvtps_pd(_mm_loadu_ps(dy + i + 4));
        s0 = _mm256_add_pd(s0, g0);
        s1 = _mm256_add_pd(s1, g1);
        d0 = _mm256_add_pd(d0, _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), mu), g0));
        d1 = _mm256_add_pd(d1, _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), mu), g1));
    }
    _mm256_storeu_pd(sl, s0);
    _mm256_storeu_pd(sl + 4, s1);
    _mm256_storeu_pd(dl, d0);
    _mm256_storeu_pd(dl + 4, d1);
}
#endif

static void reduce_sum_dot(int level, const float *x, const float *dy, int64_t n, double mean, double *sum,
                           double *dot)
{
    double sl[BN_LANES] = {0}, dl[BN_LANES] = {0};
    const int64_t n8 = n / BN_LANES * BN_LANES;
#ifdef MX_SIMD_X86
    if (level >= MX_SIMD_AVX512) lanes2_avx512(x, dy, n8, mean, sl, dl);
    else if (level == MX_SIMD_AVX2) lanes2_avx2(x, dy, n8, mean, sl, dl);
    else lanes2_portable(x, dy, n8, mean, sl, dl);
#else
    (void)level;
    lanes2_portable(x, dy, n8, mean, sl, dl);
#endif
    double s = 0, d = 0;
    for (int64_t i = n8; i < n; i++) {
        s += (double)dy[i];
        d += (x[i] - mean) * dy[i];
    }
    for (int l = 0; l < BN_LANES; l++) {
        s += sl[l];
        d += dl[l];
    }
    *sum = s;
    *dot = d;
}

/* Channels are independent in forward (statistics, moving states and the
 * output of channel c touch only channel c), so the pool splits them; each
 * channel's sums run in the same order whatever the split. */
typedef struct bn_fwd_job {
    const bn_params *bp;
    const mx_req *req;
    int64_t outer, C, inner;
    bool train;
    mx_fold fold; /* mx_op_ctx's */
    const float *x, *gamma, *beta;
    const float *addend; /* BatchNorm+ElementWiseSum: added to each output; else NULL */
    float *mm, *mv, *y, *save_mean, *save_invstd;
    int64_t y_item; /* elements from one item of y's axis 0 to the next (strided_output) */
} bn_fwd_job;

/* A folded relu or clip done in the normalize pass itself (one pass over
 * the row instead of two), with Activation's and clip's own expressions
 * (simd.h's P##_relu, P##_clip): the same bits. BN_CLAMP_NONE: the fold,
 * if any, runs after. */
enum { BN_CLAMP_NONE = 0, BN_CLAMP_RELU, BN_CLAMP_CLIP };

/* y = x * scale + shift (added to y with add) over one row, then the clamp:
 * a multiply and an add per element, no fused multiply-add, so every width
 * gives the bits of the scalar loop. */
#define BN_NORM_KERNELS(P, W, TARGET)                                                                               \
    TARGET static void bn_normalize_##P(const float *x, float *y, int64_t n, float scale, float shift, bool add,   \
                                        bool nt, int clamp, float lo, float hi)                                     \
    {                                                                                                               \
        const P##_f s = P##_splat(scale), b = P##_splat(shift), l = P##_splat(lo), h = P##_splat(hi);               \
        if (clamp == BN_CLAMP_RELU) MX_SIMD_MAP1_NT(P, W, x, y, 0, n, add, nt, P##_relu(v * s + b));               \
        else if (clamp == BN_CLAMP_CLIP) MX_SIMD_MAP1_NT(P, W, x, y, 0, n, add, nt, P##_clip(v * s + b, l, h));    \
        else MX_SIMD_MAP1_NT(P, W, x, y, 0, n, add, nt, v * s + b);                                                \
    }
MX_SIMD_INSTANTIATE(BN_NORM_KERNELS)

/* The same plus the addend, then the clamp: (x * scale + shift) + a is the
 * unfolded graph's BatchNorm output plus the sum's other input (a float
 * sum of two terms is the same either way round), so the same bits. */
#define BN_NORM_ADD_KERNELS(P, W, TARGET)                                                                           \
    TARGET static void bn_normalize_add_##P(const float *x, const float *a, float *y, int64_t n, float scale,      \
                                            float shift, bool add, bool nt, int clamp, float lo, float hi)          \
    {                                                                                                               \
        const P##_f s = P##_splat(scale), b = P##_splat(shift), l = P##_splat(lo), h = P##_splat(hi);               \
        if (clamp == BN_CLAMP_RELU) MX_SIMD_MAP2_NT(P, W, x, a, y, 0, n, add, nt, P##_relu(v * s + b + u));        \
        else if (clamp == BN_CLAMP_CLIP) MX_SIMD_MAP2_NT(P, W, x, a, y, 0, n, add, nt, P##_clip(v * s + b + u, l, h)); \
        else MX_SIMD_MAP2_NT(P, W, x, a, y, 0, n, add, nt, v * s + b + u);                                         \
    }
MX_SIMD_INSTANTIATE(BN_NORM_ADD_KERNELS)

/* y = x * scale + shift for channel c, from the statistics as saved
 * (float): backward recomputes the same values from the saved outputs
 * (fold_mask_from_inputs). */
static void bn_affine(const bn_params *bp, const float *gamma, const float *beta, int64_t c, float mean, float invstd,
                      float *scale, float *shift)
{
    const double w = bp->fix_gamma ? 1.0 : gamma[c];
    *scale = (float)(w * invstd);
    *shift = (float)(beta[c] - (double)mean * w * invstd);
}

/* The clamp a fold is done as in the normalize pass. */
static int bn_clamp_of(const mx_fold *f)
{
    return mx_fold_is_relu(f) ? BN_CLAMP_RELU : f->kind == MX_FOLD_CLIP ? BN_CLAMP_CLIP : BN_CLAMP_NONE;
}

static void bn_forward_channels(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const bn_fwd_job *j = arg;
    const bn_params *bp = j->bp;
    const int64_t outer = j->outer, C = j->C, inner = j->inner;
    const double m = (double)(outer * inner);
    const float *x = j->x;
    float *mm = j->mm, *mv = j->mv, *y = j->y;
    const int level = mx_simd_level();
    const mx_fold *f = &j->fold;
    const int clamp = bn_clamp_of(f);
    /* A large output written (not added to, and not read back by a fold
     * pass) goes past the caches. */
    const bool stream = j->req[0] != MX_REQ_ADD && (clamp != BN_CLAMP_NONE || f->kind == MX_FOLD_NONE) &&
                        outer * C * inner * (int64_t)sizeof(float) >= MX_SIMD_STREAM_MIN_BYTES;
    for (int64_t c = lo; c < hi; c++) {
        double mean, invstd;
        if (j->train) {
            /* One pass over x (it streams from memory): sums of x - k and
             * its squares in double, k the channel's first value; then
             * sum((x - mean)^2) = sum((x - k)^2) - sum(x - k)^2 / m. */
            const double k = m > 0 ? x[c * inner] : 0;
            double s = 0, q = 0;
            for (int64_t o = 0; o < outer; o++) {
                double so, qo;
                reduce_sum_sq(level, x + (o * C + c) * inner, inner, k, &so, &qo);
                s += so;
                q += qo;
            }
            mean = m > 0 ? k + s / m : 0;
            double ss = m > 0 ? q - s * s / m : 0;
            if (ss < 0) ss = 0;
            double var = m > 0 ? ss / m : 0;
            invstd = ss == 0 && bp->eps == 0 ? 0 : 1 / sqrt(var + bp->eps);
            mm[c] = (float)(mm[c] * bp->momentum + mean * (1 - bp->momentum));
            mv[c] = (float)(mv[c] * bp->momentum + var * (1 - bp->momentum));
        } else {
            mean = mm[c];
            invstd = 1 / sqrt((double)mv[c] + bp->eps);
        }
        mx_req_assign_f32(j->req[1], &j->save_mean[c], (float)mean);
        mx_req_assign_f32(j->req[2], &j->save_invstd[c], (float)invstd);
        if (j->req[0] == MX_REQ_NULL) continue;
        float scale, shift;
        bn_affine(bp, j->gamma, j->beta, c, (float)mean, (float)invstd, &scale, &shift);
        for (int64_t o = 0; o < outer; o++) {
            const int64_t off = (o * C + c) * inner;
            float *yr = y + o * j->y_item + c * inner;
            if (j->addend)
                MX_SIMD_DISPATCH(level, bn_normalize_add, x + off, j->addend + off, yr, inner, scale, shift,
                                 j->req[0] == MX_REQ_ADD, stream, clamp, f->lo, f->hi);
            else
                MX_SIMD_DISPATCH(level, bn_normalize, x + off, yr, inner, scale, shift, j->req[0] == MX_REQ_ADD,
                                 stream, clamp, f->lo, f->hi);
            if (clamp == BN_CLAMP_NONE) mx_fold_rows_at(f, level, yr, inner);
        }
    }
    if (stream) mx_simd_store_fence();
}

/* Elements below which forward stays on the calling thread (a hand-over
 * costs microseconds). */
#define BN_PARALLEL_MIN 32768

static mx_status bn_forward_run(const mx_op_ctx *ctx, const bn_params *bp, const mx_tensor *in, const float *addend,
                                const mx_req *req, mx_tensor *out, mx_tensor *aux)
{
    MX_TRY(mx_fold_check_req(&ctx->fold, req[0], "BatchNorm"));
    bn_fwd_job j = {.bp = bp, .req = req, .train = ctx->is_train && !bp->use_global_stats,
                    .fold = ctx->fold, .x = in[0].data, .addend = addend,
                    .gamma = in[1].data, .beta = in[2].data, .mm = aux[0].data, .mv = aux[1].data,
                    .y = out[0].data, .save_mean = out[1].data, .save_invstd = out[2].data};
    mx_bn_dims(bp, &in[0].shape, &j.outer, &j.C, &j.inner);
    j.y_item = out[0].batch_stride ? out[0].batch_stride : j.C * j.inner;
    mx_threadpool *pool = j.outer * j.C * j.inner >= BN_PARALLEL_MIN ? mx_op_pool(ctx) : NULL;
    mx_parallel_for(pool, j.C, mx_parallel_grain(pool, j.C, 4, 1), bn_forward_channels, &j);
    return MX_OK;
}

static mx_status bn_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                            mx_tensor *out, mx_tensor *aux)
{
    return bn_forward_run(ctx, p, in, NULL, req, out, aux);
}

/* dx = (g - gmean - (x - mean) * k) * iw over one row (added to dx with
 * add): the scalar expression's operations in its order, no fused
 * multiply-add, so every width gives the scalar loop's bits. (Left to the
 * compiler it ran four lanes wide.) */
#define BN_DX_KERNELS(P, W, TARGET)                                                                                 \
    TARGET static void bn_dx_##P(const float *x, const float *g, float *dx, int64_t n, float gmean, float mean,    \
                                 float k, float iw, bool add)                                                       \
    {                                                                                                               \
        const P##_f gm = P##_splat(gmean), mn = P##_splat(mean), kk = P##_splat(k), w = P##_splat(iw);              \
        MX_SIMD_MAP2(P, W, x, g, dx, 0, n, add, (u - gm - (v - mn) * kk) * w);                                      \
    }
MX_SIMD_INSTANTIATE(BN_DX_KERNELS)

/* A folded relu's or clip's gradient from the input: out = dy where the
 * forward's z = x * scale + shift (its expression, so the same bits) let
 * the gradient through, else 0, as the fold's own backward gives from its
 * output (relu: dy * (y > 0); clip: a_min < y < a_max, which holds exactly
 * where a_min < z < a_max). */
#define BN_FOLD_GRAD_KERNELS(P, W, TARGET)                                                                          \
    TARGET static void bn_fold_grad_##P(const float *x, const float *dy, float *out, int64_t n, float scale,       \
                                        float shift, int clamp, float lo, float hi)                                 \
    {                                                                                                               \
        const P##_f s = P##_splat(scale), b = P##_splat(shift), l = P##_splat(lo), h = P##_splat(hi);               \
        const P##_f zero = P##_splat(0.0f), one = P##_splat(1.0f);                                                  \
        /* v = x, u = dy */                                                                                         \
        if (clamp == BN_CLAMP_RELU) MX_SIMD_MAP2(P, W, x, dy, out, 0, n, false, u * P##_select(v * s + b > zero, one, zero)); \
        else MX_SIMD_MAP2(P, W, x, dy, out, 0, n, false, P##_select((v * s + b > l) & (v * s + b < h), u, zero));  \
    }
MX_SIMD_INSTANTIATE(BN_FOLD_GRAD_KERNELS)

/* Backward splits the channels as forward does: channel c's sums, its
 * slice of dx and dgamma[c] / dbeta[c] touch nothing of another channel,
 * and each channel's sums run in the same order whatever the split. */
typedef struct bn_bwd_job {
    const bn_params *bp;
    const mx_req *req;
    int64_t outer, C, inner;
    bool train;
    mx_fold fold; /* mx_op_ctx's: the folded layer's gradient is taken here */
    const float *x, *gamma, *beta, *dy, *y, *mm, *mv, *save_mean, *save_invstd;
    int64_t y_item, dy_item; /* as bn_fwd_job's, for y and for dy */
    float *dx, *dgamma, *dbeta;
    /* BatchNorm+ElementWiseSum: the addend's gradient (the sum's, as the
     * unfolded sum hands it on) and its req */
    bool with_addend;
    float *daddend;
    mx_req req_addend;
} bn_bwd_job;

/* d += g over one row (the unfolded sum's g + d, the same bits). */
#define BN_ADD_ROWS_KERNELS(P, W, TARGET)                                                                           \
    TARGET static void bn_add_rows_##P(const float *g, float *d, int64_t n) { MX_SIMD_MAP1(P, W, g, d, 0, n, true, v); }
MX_SIMD_INSTANTIATE(BN_ADD_ROWS_KERNELS)

static bool req_writes(mx_req r) { return r == MX_REQ_WRITE || r == MX_REQ_INPLACE; }

/* BatchNorm+ElementWiseSum, channel c: the sum's gradient g (the fold's,
 * from the output, as the unfolded sum takes it, else dy itself) handed
 * to the addend per its req, rows held where the BatchNorm passes read
 * them: the addend's gradient when written, else dx when written, else
 * over dy (as the fold's own pass would). Returns g's rows. */
static const float *bn_addend_grad(const bn_bwd_job *j, int level, int64_t c)
{
    const int64_t outer = j->outer, C = j->C, inner = j->inner;
    const bool fold = j->fold.kind != MX_FOLD_NONE;
    float *g = (float *)j->dy;
    if (fold) g = req_writes(j->req_addend) ? j->daddend : req_writes(j->req[0]) ? j->dx : (float *)j->dy;
    for (int64_t o = 0; o < outer; o++) {
        const int64_t off = (o * C + c) * inner;
        if (fold)
            mx_fold_backward_rows_at(&j->fold, level, j->dy + off, j->y + o * j->y_item + c * inner, g + off, inner);
        if (j->req_addend == MX_REQ_ADD) MX_SIMD_DISPATCH(level, bn_add_rows, g + off, j->daddend + off, inner);
        else if (req_writes(j->req_addend) && g != j->daddend)
            memcpy(j->daddend + off, g + off, (size_t)inner * sizeof(float));
    }
    return g;
}

static void bn_backward_channels(void *arg, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    const bn_bwd_job *j = arg;
    const bn_params *bp = j->bp;
    const mx_req *req = j->req;
    const int64_t outer = j->outer, C = j->C, inner = j->inner;
    const bool train = j->train;
    const double m = (double)(outer * inner);
    const float *x = j->x, *dy = j->dy;
    const int level = mx_simd_level();
    for (int64_t c = lo; c < hi; c++) {
        double mean, invstd;
        if (train) {
            mean = j->save_mean[c];
            invstd = j->save_invstd[c];
        } else {
            mean = j->mm[c];
            invstd = 1 / sqrt((double)j->mv[c] + bp->eps);
        }
        /* A folded layer's gradient first, a channel's rows at a time, into
         * dx where it is written (else over dy, as the executor's pass
         * would): the rows are then in cache for both passes below. */
        /* The gradient's rows: dy's at its stride between items (a Concat's
         * output gradient, strided_output), else dense. */
        const float *g_rows = dy;
        int64_t g_item = j->dy_item;
        if (j->with_addend) {
            g_rows = bn_addend_grad(j, level, c);
            g_item = C * inner;
        } else if (j->fold.kind != MX_FOLD_NONE) {
            float *dst = req_writes(req[0]) ? j->dx : (float *)dy;
            const int64_t dst_item = dst == j->dx ? C * inner : j->dy_item;
            const int clamp = bn_clamp_of(&j->fold);
            float scale = 0.0f, shift = 0.0f;
            if (clamp != BN_CLAMP_NONE) bn_affine(bp, j->gamma, j->beta, c, (float)mean, (float)invstd, &scale, &shift);
            for (int64_t o = 0; o < outer; o++) {
                const int64_t off = (o * C + c) * inner, dyo = o * j->dy_item + c * inner;
                const int64_t dso = o * dst_item + c * inner;
                if (clamp != BN_CLAMP_NONE)
                    MX_SIMD_DISPATCH(level, bn_fold_grad, x + off, dy + dyo, dst + dso, inner, scale, shift, clamp,
                                     j->fold.lo, j->fold.hi);
                else mx_fold_backward_rows_at(&j->fold, level, dy + dyo, j->y + o * j->y_item + c * inner, dst + dso,
                                              inner);
            }
            g_rows = dst;
            g_item = dst_item;
        }
        double sum_dy = 0, dotp = 0;
        for (int64_t o = 0; o < outer; o++) {
            const int64_t off = (o * C + c) * inner;
            double s, d;
            reduce_sum_dot(level, x + off, g_rows + o * g_item + c * inner, inner, mean, &s, &d);
            sum_dy += s;
            dotp += d;
        }
        const double w = bp->fix_gamma ? 1.0 : j->gamma[c];
        if (req[0] != MX_REQ_NULL) {
            /* train: dx = (dy - mean(dy) - (x-mean) * dot/m * invstd^2) * invstd * w;
             * global statistics: dx = dy * invstd * w. */
            const float k = train && m > 0 ? (float)(dotp * invstd * invstd / m) : 0.0f;
            const float gmean = train && m > 0 ? (float)(sum_dy / m) : 0.0f;
            const float iw = (float)(invstd * w), fmean = (float)mean;
            for (int64_t o = 0; o < outer; o++) {
                const int64_t off = (o * C + c) * inner;
                MX_SIMD_DISPATCH(level, bn_dx, x + off, g_rows + o * g_item + c * inner, j->dx + off, inner, gmean,
                                 fmean, k, iw, req[0] == MX_REQ_ADD);
            }
        }
        if (bp->fix_gamma) {
            if (req[1] == MX_REQ_WRITE || req[1] == MX_REQ_INPLACE) j->dgamma[c] = 0.0f;
        } else {
            mx_req_assign_f32(req[1], &j->dgamma[c], (float)(dotp * invstd));
        }
        mx_req_assign_f32(req[2], &j->dbeta[c], (float)sum_dy);
    }
}

static mx_status bn_backward_run(const mx_op_ctx *ctx, const bn_params *bp, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux, bool with_addend)
{
    bn_bwd_job j = {.bp = bp, .req = req, .train = ctx->is_train && !bp->use_global_stats, .fold = ctx->fold,
                    .x = in[0].data, .gamma = in[1].data, .beta = in[2].data, .dy = out_grad[0].data, .y = out[0].data,
                    .mm = aux[0].data, .mv = aux[1].data,
                    .save_mean = out[1].data, .save_invstd = out[2].data, .dx = in_grad[0].data,
                    .dgamma = in_grad[1].data, .dbeta = in_grad[2].data};
    if (with_addend) {
        j.with_addend = true;
        j.daddend = in_grad[3].data;
        j.req_addend = req[3];
    }
    mx_bn_dims(bp, &in[0].shape, &j.outer, &j.C, &j.inner);
    j.y_item = out[0].batch_stride ? out[0].batch_stride : j.C * j.inner;
    j.dy_item = out_grad[0].batch_stride ? out_grad[0].batch_stride : j.C * j.inner;
    if (with_addend && j.dy_item != j.C * j.inner)
        return MX_ERROR(MX_ERR_INVALID, "BatchNorm+ElementWiseSum: a strided output gradient is not supported");
    mx_threadpool *pool = j.outer * j.C * j.inner >= BN_PARALLEL_MIN ? mx_op_pool(ctx) : NULL;
    mx_parallel_for(pool, j.C, mx_parallel_grain(pool, j.C, 4, 1), bn_backward_channels, &j);
    return MX_OK;
}

static mx_status bn_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                             const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    return bn_backward_run(ctx, p, out_grad, in, out, req, in_grad, aux, false);
}

/* Output 0 and its gradient item by item along axis 0 at any stride: the
 * channel axis is 1, so a row (item, channel) is contiguous (forward's
 * statistics come from x; backward reads the gradient's rows, and writes
 * a folded layer's gradient over them, at the stride). */
static bool bn_strided_output(const void *p, const mx_shape *out0)
{
    return out0->ndim >= 2 && bn_axis(p, out0) == 1;
}

MX_OP_GPU_DECLARE(batch_norm);

/* MXNet's BatchNorm types: output like data; for float16 and bfloat16
 * data, gamma, beta, the moving statistics and the mean/var outputs stay
 * float32 (as cuDNN takes them), else they share data's dtype. `param`:
 * bit i set for each input that is a parameter or statistic. */
static mx_status bn_types(int *in, int n_in, int *out, int n_out, uint32_t param, int data_like)
{
    int d = in[0] >= 0 ? in[0] : data_like >= 0 && in[data_like] >= 0 ? in[data_like] : MX_FLOAT32;
    int pd = (MX_HALF_DTYPES & MX_DTYPE_BIT(d)) ? MX_FLOAT32 : d;
    for (int j = 0; j < n_in; j++) {
        int want = (param >> j) & 1 ? pd : d;
        if (in[j] >= 0 && in[j] != want)
            return MX_ERROR(MX_ERR_INVALID, "BatchNorm: input %d is %s where %s data needs %s", j,
                            mx_dtype_name((mx_dtype)in[j]), mx_dtype_name((mx_dtype)d), mx_dtype_name((mx_dtype)want));
        in[j] = want;
    }
    for (int k = 0; k < n_out; k++) out[k] = k == 0 ? d : pd;
    return MX_OK;
}

static mx_status bn_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return bn_types(in, n_in, out, n_out, 0x1eu, -1); /* gamma, beta, moving_mean, moving_var */
}

static mx_status bna_infer_type(const void *p, int *in, int n_in, int *out, int n_out)
{
    (void)p;
    return bn_types(in, n_in, out, n_out, 0x36u, 3); /* gamma, beta, moving_mean, moving_var; addend like data */
}

const mx_op_def mx_op_batch_norm = {
    .name = "BatchNorm",
    .doc = "Batch normalization over the channel axis, with moving mean/variance as aux states.",
    .params = bn_param_table,
    .n_params = (int)(sizeof(bn_param_table) / sizeof(bn_param_table[0])),
    .params_size = sizeof(bn_params),
    .list_inputs = bn_list_inputs,
    .num_aux = bn_num_aux,
    .list_outputs = bn_list_outputs,
    .num_visible_outputs = bn_num_visible_outputs,
    .infer_shape = bn_infer_shape,
    .infer_type = bn_infer_type,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .backward_in_mask = (1u << 0) | (1u << 1) | (1u << 2), /* data, gamma, beta (a folded relu's z) */
    .backward_out_mask = (1u << 1) | (1u << 2), /* saved mean and inverse std, not the output */
    .folds_elementwise = true,
    .folds_backward = true,
    .fold_mask_from_inputs = true,
    .strided_output = bn_strided_output,
    .forward = bn_forward,
    .backward = bn_backward,
    .gpu = MX_OP_GPU(batch_norm),
};

/* ------------------------------------------ BatchNorm+ElementWiseSum */

static int bna_list_inputs(const void *p, const char **names)
{
    (void)p;
    names[0] = "data";
    names[1] = "gamma";
    names[2] = "beta";
    names[3] = "addend";
    names[4] = "moving_mean";
    names[5] = "moving_var";
    return 6;
}

/* BatchNorm's shapes over (data, gamma, beta, moving_mean, moving_var);
 * the addend has data's. */
static mx_status bna_infer_shape(const void *p, mx_shape *in, int n_in, mx_shape *out, int n_out)
{
    mx_shape bn_in[5] = {in[0], in[1], in[2], in[4], in[5]};
    if (in[0].ndim == 0 && in[3].ndim != 0) bn_in[0] = in[3];
    MX_TRY(bn_infer_shape(p, bn_in, n_in - 1, out, n_out));
    MX_TRY(expect_shape("addend", &in[3], bn_in[0]));
    in[0] = bn_in[0];
    in[1] = bn_in[1];
    in[2] = bn_in[2];
    in[4] = bn_in[3];
    in[5] = bn_in[4];
    return MX_OK;
}

static mx_status bna_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                             mx_tensor *out, mx_tensor *aux)
{
    return bn_forward_run(ctx, p, in, in[3].data, req, out, aux);
}

static mx_status bna_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad, const mx_tensor *in,
                              const mx_tensor *out, const mx_req *req, mx_tensor *in_grad, mx_tensor *aux)
{
    return bn_backward_run(ctx, p, out_grad, in, out, req, in_grad, aux, true);
}

const mx_op_def mx_op_batch_norm_add = {
    .name = "BatchNorm+ElementWiseSum",
    .doc = "A residual sum folded into the BatchNorm before it: BatchNorm(data) + addend (executor folding only).",
    .params = bn_param_table,
    .n_params = (int)(sizeof(bn_param_table) / sizeof(bn_param_table[0])),
    .params_size = sizeof(bn_params),
    .list_inputs = bna_list_inputs,
    .num_aux = bn_num_aux,
    .list_outputs = bn_list_outputs,
    .num_visible_outputs = bn_num_visible_outputs,
    .infer_shape = bna_infer_shape,
    .infer_type = bna_infer_type,
    .backward_deps = MX_BWD_OUT_GRAD | MX_BWD_IN_DATA | MX_BWD_OUT_DATA,
    .backward_in_mask = (1u << 0) | (1u << 1) | (1u << 2), /* data, gamma, beta: not the addend */
    /* The saved mean and inverse std. Output 0 only for a folded layer's
     * gradient (the sum's relu: its mask depends on the addend too, so it
     * comes from the output, not the inputs); read element by element
     * before the same element of either gradient is written, so either
     * may take its memory (plan.c's folded_output_slot), as the unfolded
     * sum's gradient could. */
    .backward_out_mask = (1u << 1) | (1u << 2),
    .folds_elementwise = true,
    .folds_backward = true,
    .forward = bna_forward,
    .backward = bna_backward,
};
