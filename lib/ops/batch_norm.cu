/*
 * batch_norm.cu - BatchNorm on the GPU, the same arithmetic as
 * batch_norm.c: one block per channel; the channel's sums (mean, centred
 * sum of squares in forward; sum of dy and dot((x - mean), dy) in backward)
 * accumulate in double, each thread over a strided share of the channel's
 * elements and then a shared-memory tree, so only the summation order
 * differs from the CPU. Every thread of the block gets the same totals and
 * so the same mean and inverse std; thread 0 alone writes the per-channel
 * outputs (moving statistics, saved mean / inverse std, gamma and beta
 * gradients). Element-wise formulas round each product as the CPU does
 * (__fmul_rn / __dmul_rn: no fused multiply-add).
 *
 * Outputs as the CPU defines them: `mean` holds the batch mean (or the
 * moving mean), `var` the inverse standard deviation 1/sqrt(var + eps);
 * an output with request null is neither written nor read (it may have no
 * memory). The moving statistics move in training forward.
 *
 * Unless cudnn_off is set, the common cases run on cuDNN's spatial batch
 * normalisation instead (as MXNet's CuDNNBatchNormOp), with the tensor
 * described as (outer, C, inner, 1), so any axis fits: forward in training
 * and at inference, backward in training. cuDNN's running variance is the
 * unbiased estimate; MXNet's (and the CPU's) is the biased one, so cuDNN
 * gets no running statistics: one small kernel per call moves them from
 * the saved mean and inverse std (var = 1/invstd^2 - eps) and writes the
 * mean / var outputs per their requests. cuDNN accumulates in float, so
 * results differ from the CPU by float rounding, not by formula.
 * The own kernels remain for cudnn_off, backward with global statistics,
 * a channel of one element, and null data requests.
 *
 * float16 and bfloat16 data (mixed precision): x, y, dy and dx are of the
 * half type; gamma, beta, the moving statistics, the mean / var outputs
 * and the gamma / beta gradients stay float32 (bn_infer_type). cuDNN gets
 * x / y / dx / dy descriptors of the half type and the statistics
 * descriptor cudnnDeriveBNTensorDescriptor derives from them (float32 for
 * both half types), float compute; the moving-statistics kernels are the
 * float32 path's. Where cuDNN answers any NOT_SUPPORTED_* or a plain
 * BAD_PARAM for a half type (cuDNN builds whose legacy batch norm lacks
 * bfloat16), the own kernels run instead. The own kernels are templates on
 * the data's element type (half.cuh): every element widened to float on
 * load, the same double sums and formulas, outputs rounded once to the
 * type at the store, as the CPU's half nodes (float kernels between half
 * tensors). float32 keeps its code, its cuDNN calls and its bits.
 */
#include "ops/cuda/half.cuh"

extern "C" {
#include "ops/batch_norm.h"
}

#include <math.h>

enum { BN_THREADS = 256 }; /* a power of two: the tree halves it */

/* The block's total of v (every thread passes its partial sum and gets the
 * total); sh holds BN_THREADS doubles. */
__device__ double bn_block_sum(double v, double *sh)
{
    const unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned s = BN_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads(); /* sh is reused by the next sum */
    return r;
}

struct bn_geom {
    int64_t outer, C, inner;
};

/* The offset of the j-th element (of outer * inner) of channel c. */
__device__ __forceinline__ int64_t bn_at(const bn_geom g, int64_t c, int64_t j)
{
    return (j / g.inner * g.C + c) * g.inner + j % g.inner;
}

template <typename T>
__global__ void __launch_bounds__(BN_THREADS)
    bn_forward_kernel(bn_geom g, bool train, bool fix_gamma, double eps, double momentum, mx_req req_y,
                      mx_req req_mean, mx_req req_invstd, const T *x, const float *gamma, const float *beta,
                      float *mm, float *mv, T *y, float *save_mean, float *save_invstd)
{
    __shared__ double sh[BN_THREADS];
    const int64_t c = blockIdx.x;
    const int64_t m = g.outer * g.inner;
    double mean, invstd;
    if (train) {
        double s = 0;
        for (int64_t j = threadIdx.x; j < m; j += BN_THREADS) s += (double)mx_load(&x[bn_at(g, c, j)]);
        s = bn_block_sum(s, sh);
        mean = m > 0 ? s / (double)m : 0;
        double ss = 0;
        for (int64_t j = threadIdx.x; j < m; j += BN_THREADS) {
            double d = (double)mx_load(&x[bn_at(g, c, j)]) - mean;
            ss = __dadd_rn(ss, __dmul_rn(d, d));
        }
        ss = bn_block_sum(ss, sh);
        double var = m > 0 ? ss / (double)m : 0;
        invstd = ss == 0 && eps == 0 ? 0 : 1 / sqrt(var + eps);
        if (threadIdx.x == 0) {
            mm[c] = (float)__dadd_rn(__dmul_rn((double)mm[c], momentum), __dmul_rn(mean, 1 - momentum));
            mv[c] = (float)__dadd_rn(__dmul_rn((double)mv[c], momentum), __dmul_rn(var, 1 - momentum));
        }
    } else {
        mean = mm[c];
        invstd = 1 / sqrt((double)mv[c] + eps);
    }
    if (threadIdx.x == 0) {
        if (req_mean != MX_REQ_NULL) mx_cuda_assign(req_mean, &save_mean[c], (float)mean);
        if (req_invstd != MX_REQ_NULL) mx_cuda_assign(req_invstd, &save_invstd[c], (float)invstd);
    }
    if (req_y == MX_REQ_NULL) return;
    const double w = fix_gamma ? 1.0 : (double)gamma[c];
    const float scale = (float)__dmul_rn(w, invstd);
    const float shift = (float)__dsub_rn((double)beta[c], __dmul_rn(__dmul_rn(mean, w), invstd));
    for (int64_t j = threadIdx.x; j < m; j += BN_THREADS) {
        const int64_t i = bn_at(g, c, j);
        mx_assign(req_y, &y[i], __fadd_rn(__fmul_rn(mx_load(&x[i]), scale), shift));
    }
}

template <typename T>
__global__ void __launch_bounds__(BN_THREADS)
    bn_backward_kernel(bn_geom g, bool train, bool fix_gamma, double eps, mx_req req_dx, mx_req req_dgamma,
                       mx_req req_dbeta, const T *x, const float *gamma, const T *dy, const float *mm,
                       const float *mv, const float *save_mean, const float *save_invstd, T *dx, float *dgamma,
                       float *dbeta)
{
    __shared__ double sh[BN_THREADS];
    const int64_t c = blockIdx.x;
    const int64_t m = g.outer * g.inner;
    double mean, invstd;
    if (train) {
        mean = save_mean[c];
        invstd = save_invstd[c];
    } else {
        mean = mm[c];
        invstd = 1 / sqrt((double)mv[c] + eps);
    }
    double sdy = 0, dot = 0;
    for (int64_t j = threadIdx.x; j < m; j += BN_THREADS) {
        const int64_t i = bn_at(g, c, j);
        const double dyi = (double)mx_load(&dy[i]);
        sdy += dyi;
        dot = __dadd_rn(dot, __dmul_rn((double)mx_load(&x[i]) - mean, dyi));
    }
    const double sum_dy = bn_block_sum(sdy, sh);
    const double dotp = bn_block_sum(dot, sh);
    const double w = fix_gamma ? 1.0 : (double)gamma[c];
    if (req_dx != MX_REQ_NULL) {
        /* train: dx = (dy - mean(dy) - (x-mean) * dot/m * invstd^2) * invstd * w;
         * global statistics: dx = dy * invstd * w. */
        const float k = train && m > 0 ? (float)(__dmul_rn(__dmul_rn(dotp, invstd), invstd) / (double)m) : 0.0f;
        const float gmean = train && m > 0 ? (float)(sum_dy / (double)m) : 0.0f;
        const float iw = (float)__dmul_rn(invstd, w), fmean = (float)mean;
        for (int64_t j = threadIdx.x; j < m; j += BN_THREADS) {
            const int64_t i = bn_at(g, c, j);
            const float xi = mx_load(&x[i]), dyi = mx_load(&dy[i]);
            const float v = __fmul_rn(__fsub_rn(__fsub_rn(dyi, gmean), __fmul_rn(__fsub_rn(xi, fmean), k)), iw);
            mx_assign(req_dx, &dx[i], v);
        }
    }
    if (threadIdx.x == 0) {
        if (fix_gamma) {
            if (req_dgamma == MX_REQ_WRITE || req_dgamma == MX_REQ_INPLACE) dgamma[c] = 0.0f;
        } else if (req_dgamma != MX_REQ_NULL) {
            mx_cuda_assign(req_dgamma, &dgamma[c], (float)__dmul_rn(dotp, invstd));
        }
        if (req_dbeta != MX_REQ_NULL) mx_cuda_assign(req_dbeta, &dbeta[c], (float)sum_dy);
    }
}

/* ------------------------------------------------------------ cuDNN */

/* x as (outer, C, inner, 1) and the (1, C, 1, 1) statistics descriptor. */
struct bn_cudnn_desc {
    cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
    bn_cudnn_desc() = default;
    bn_cudnn_desc(const bn_cudnn_desc &) = delete;
    bn_cudnn_desc &operator=(const bn_cudnn_desc &) = delete;
    ~bn_cudnn_desc()
    {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (stats) cudnnDestroyTensorDescriptor(stats);
    }
};

/* x of dtype dt; the statistics descriptor as cuDNN derives it (float32
 * for float32, float16 and bfloat16 data). */
static mx_status bn_cudnn_init(bn_cudnn_desc *d, const bn_geom &g, mx_dtype dt)
{
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->x));
    MX_CUDNN_TRY(cudnnCreateTensorDescriptor(&d->stats));
    MX_CUDNN_TRY(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, mx_cudnn_type(dt), (int)g.outer, (int)g.C,
                                            (int)g.inner, 1));
    MX_CUDNN_TRY(cudnnDeriveBNTensorDescriptor(d->stats, d->x, CUDNN_BATCHNORM_SPATIAL));
    return MX_OK;
}

/* Whether cuDNN serves this call: not cudnn_off, dims within its int
 * descriptor, more than one element per channel (the statistics of one
 * element are exact zeros cuDNN need not reproduce), eps within its bound. */
static bool bn_use_cudnn(const bn_params *bp, const bn_geom &g)
{
    const int64_t lim = 2147483647;
    return !bp->cudnn_off && g.outer <= lim && g.C <= lim && g.inner <= lim && g.outer * g.inner > 1 &&
           bp->eps >= CUDNN_BN_MIN_EPSILON;
}

__global__ void bn_fill_kernel(float *d, int64_t n, float v)
{
    MX_CUDA_FOR(i, n) d[i] = v;
}

/* After cuDNN's forward: per channel, the moving statistics (training:
 * biased variance from the saved inverse std) and the mean / var outputs
 * per their requests (training: the batch's; inference: the moving ones). */
__global__ void bn_stats_kernel(int64_t C, bool train, double eps, double momentum, mx_req req_mean,
                                mx_req req_invstd, const float *batch_mean, const float *batch_invstd, float *mm,
                                float *mv, float *save_mean, float *save_invstd)
{
    MX_CUDA_FOR(c, C) {
        double mean, invstd;
        if (train) {
            mean = batch_mean[c];
            invstd = batch_invstd[c];
            const double var = invstd > 0 ? fmax(1 / (invstd * invstd) - eps, 0.0) : 0;
            mm[c] = (float)(mm[c] * momentum + mean * (1 - momentum));
            mv[c] = (float)(mv[c] * momentum + var * (1 - momentum));
        } else {
            mean = mm[c];
            invstd = 1 / sqrt((double)mv[c] + eps);
        }
        if (req_mean != MX_REQ_NULL) mx_cuda_assign(req_mean, &save_mean[c], (float)mean);
        if (req_invstd != MX_REQ_NULL) mx_cuda_assign(req_invstd, &save_invstd[c], (float)invstd);
    }
}

/* After cuDNN's backward: the gamma and beta gradients per their requests
 * (fix_gamma: gamma's is zero, written only when overwriting, as the CPU). */
__global__ void bn_param_grad_kernel(int64_t C, bool fix_gamma, mx_req req_dgamma, mx_req req_dbeta,
                                     const float *dgamma_sum, const float *dbeta_sum, float *dgamma, float *dbeta)
{
    MX_CUDA_FOR(c, C) {
        if (fix_gamma) {
            if (req_dgamma == MX_REQ_WRITE || req_dgamma == MX_REQ_INPLACE) dgamma[c] = 0.0f;
        } else if (req_dgamma != MX_REQ_NULL) {
            mx_cuda_assign(req_dgamma, &dgamma[c], dgamma_sum[c]);
        }
        if (req_dbeta != MX_REQ_NULL) mx_cuda_assign(req_dbeta, &dbeta[c], dbeta_sum[c]);
    }
}

/* gamma as cuDNN reads it: the parameter, or ones under fix_gamma (in
 * scratch at ones; the parameter itself is left as it is). */
static mx_status bn_scale(const mx_op_ctx *ctx, const bn_params *bp, const bn_geom &g, const float *gamma,
                          float *ones, const float **out)
{
    if (!bp->fix_gamma) {
        *out = gamma;
        return MX_OK;
    }
    bn_fill_kernel<<<mx_cuda_blocks(g.C), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(ones, g.C, 1.0f);
    MX_CUDA_LAUNCHED();
    *out = ones;
    return MX_OK;
}

/* What both directions need: the worker's cuDNN handle, 2 * C floats of
 * scratch for per-channel results (*per_channel; a third C after them
 * holds the ones of fix_gamma), the descriptors, and gamma as cuDNN reads
 * it. */
static mx_status bn_cudnn_begin(const mx_op_ctx *ctx, const bn_params *bp, const bn_geom &g, mx_dtype dt,
                                const float *gamma, cudnnHandle_t *h, float **per_channel, bn_cudnn_desc *d,
                                const float **scale)
{
    mx_cuda_worker *worker = mx_cuda_op_worker(ctx);
    MX_TRY(mx_cuda_worker_cudnn(worker, h));
    void *scratch;
    MX_TRY(mx_cuda_worker_scratch(worker, 3 * (size_t)g.C * sizeof(float), &scratch));
    *per_channel = (float *)scratch;
    MX_TRY(bn_cudnn_init(d, g, dt));
    return bn_scale(ctx, bp, g, gamma, *per_channel + 2 * g.C, scale);
}

/* A cuDNN call's status: MX_OK with *used set on success; MX_OK with
 * *used false where cuDNN declines a float16 / bfloat16 call (any
 * NOT_SUPPORTED_* code or a plain BAD_PARAM: the own kernels run); else
 * the error, naming the call and dtype. */
static mx_status bn_cudnn_status(cudnnStatus_t st, const char *call, mx_dtype dt, bool *used)
{
    *used = st == CUDNN_STATUS_SUCCESS;
    if (st == CUDNN_STATUS_SUCCESS) return MX_OK;
    if (dt != MX_FLOAT32 && ((int)st / 1000 * 1000 == (int)CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM))
        return MX_OK;
    return mx_error_set(MX_ERR_DEVICE, __FILE__, __LINE__, "%s (BatchNorm, %s data) failed: %s", call,
                        mx_dtype_name(dt), cudnnGetErrorString(st));
}

/* *used: whether cuDNN computed the call (false: the own kernel's turn). */
static mx_status bn_cudnn_forward(const mx_op_ctx *ctx, const bn_params *bp, const bn_geom &g, bool train,
                                  const mx_tensor *in, const mx_req *req, mx_tensor *out, mx_tensor *aux, bool *used)
{
    *used = false;
    const mx_dtype dt = in[0].dtype;
    cudnnHandle_t h;
    float *stats;
    bn_cudnn_desc d;
    const float *scale;
    MX_TRY(bn_cudnn_begin(ctx, bp, g, dt, (const float *)in[1].data, &h, &stats, &d, &scale));
    float *batch_mean = stats, *batch_invstd = stats + g.C;
    const float alpha = 1.0f, beta = mx_cuda_beta(req[0]);
    if (train) {
        MX_TRY(bn_cudnn_status(cudnnBatchNormalizationForwardTraining(
                                   h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, d.x, in[0].data, d.x, out[0].data,
                                   d.stats, scale, in[2].data, 0.0, nullptr, nullptr, bp->eps, batch_mean,
                                   batch_invstd),
                               "cudnnBatchNormalizationForwardTraining", dt, used));
    } else {
        MX_TRY(bn_cudnn_status(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta,
                                                                       d.x, in[0].data, d.x, out[0].data, d.stats,
                                                                       scale, in[2].data, aux[0].data,
                                                                       aux[1].data, bp->eps),
                               "cudnnBatchNormalizationForwardInference", dt, used));
    }
    if (!*used) return MX_OK;
    if (!train && req[1] == MX_REQ_NULL && req[2] == MX_REQ_NULL) return MX_OK;
    bn_stats_kernel<<<mx_cuda_blocks(g.C), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        g.C, train, bp->eps, bp->momentum, req[1], req[2], batch_mean, batch_invstd, (float *)aux[0].data,
        (float *)aux[1].data, (float *)out[1].data, (float *)out[2].data);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status bn_cudnn_backward(const mx_op_ctx *ctx, const bn_params *bp, const bn_geom &g,
                                   const mx_tensor *out_grad, const mx_tensor *in, const mx_tensor *out,
                                   const mx_req *req, mx_tensor *in_grad, bool *used)
{
    *used = false;
    const mx_dtype dt = in[0].dtype;
    cudnnHandle_t h;
    float *sums;
    bn_cudnn_desc d;
    const float *scale;
    MX_TRY(bn_cudnn_begin(ctx, bp, g, dt, (const float *)in[1].data, &h, &sums, &d, &scale));
    float *dgamma_sum = sums, *dbeta_sum = sums + g.C;
    const float one = 1.0f, zero = 0.0f, beta_dx = mx_cuda_beta(req[0]);
    MX_TRY(bn_cudnn_status(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &beta_dx, &one, &zero,
                                                           d.x, in[0].data, d.x, out_grad[0].data, d.x,
                                                           in_grad[0].data, d.stats, scale, dgamma_sum, dbeta_sum,
                                                           bp->eps, out[1].data, out[2].data),
                           "cudnnBatchNormalizationBackward", dt, used));
    if (!*used) return MX_OK;
    if (req[1] == MX_REQ_NULL && req[2] == MX_REQ_NULL) return MX_OK;
    bn_param_grad_kernel<<<mx_cuda_blocks(g.C), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        g.C, bp->fix_gamma, req[1], req[2], dgamma_sum, dbeta_sum, (float *)in_grad[1].data,
        (float *)in_grad[2].data);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

/* ------------------------------------------------------------ entry points */

/* (outer, channels, inner) around the channel axis (batch_norm.c), within
 * the kernels' grid; data of a type these kernels compute in (float32,
 * float16, bfloat16: the parameters and statistics then float32). */
static mx_status bn_gpu_geom(const bn_params *bp, const mx_tensor *data, bn_geom *g)
{
    const mx_dtype dt = data->dtype;
    if (dt != MX_FLOAT32 && dt != MX_FLOAT16 && dt != MX_BFLOAT16)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "BatchNorm: %s data is not supported on the GPU", mx_dtype_name(dt));
    mx_bn_dims(bp, &data->shape, &g->outer, &g->C, &g->inner);
    if (g->C > 2147483647)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "BatchNorm: %lld channels exceed the GPU kernel's grid",
                        (long long)g->C);
    return MX_OK;
}

static mx_status bn_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    const bn_params *bp = (const bn_params *)p;
    bn_geom g;
    MX_TRY(bn_gpu_geom(bp, &in[0], &g));
    if (g.C == 0) return MX_OK;
    const bool train = ctx->is_train && !bp->use_global_stats;
    if (req[0] != MX_REQ_NULL && bn_use_cudnn(bp, g)) {
        bool used;
        MX_TRY(bn_cudnn_forward(ctx, bp, g, train, in, req, out, aux, &used));
        if (used) return MX_OK;
    }
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "BatchNorm", {
        bn_forward_kernel<T><<<(unsigned)g.C, BN_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            g, train, bp->fix_gamma, bp->eps, bp->momentum, req[0], req[1], req[2], (const T *)in[0].data,
            (const float *)in[1].data, (const float *)in[2].data, (float *)aux[0].data, (float *)aux[1].data,
            (T *)out[0].data, (float *)out[1].data, (float *)out[2].data);
    });
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status bn_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    const bn_params *bp = (const bn_params *)p;
    bn_geom g;
    MX_TRY(bn_gpu_geom(bp, &in[0], &g));
    if (g.C == 0) return MX_OK;
    if (req[0] == MX_REQ_NULL && req[1] == MX_REQ_NULL && req[2] == MX_REQ_NULL) return MX_OK;
    const bool train = ctx->is_train && !bp->use_global_stats;
    if (train && req[0] != MX_REQ_NULL && bn_use_cudnn(bp, g)) {
        bool used;
        MX_TRY(bn_cudnn_backward(ctx, bp, g, out_grad, in, out, req, in_grad, &used));
        if (used) return MX_OK;
    }
    MX_DISPATCH_FLOAT_TYPES(in[0].dtype, "BatchNorm", {
        bn_backward_kernel<T><<<(unsigned)g.C, BN_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
            g, train, bp->fix_gamma, bp->eps, req[0], req[1], req[2], (const T *)in[0].data,
            (const float *)in[1].data, (const T *)out_grad[0].data, (const float *)aux[0].data,
            (const float *)aux[1].data, (const float *)out[1].data, (const float *)out[2].data,
            (T *)in_grad[0].data, (float *)in_grad[1].data, (float *)in_grad[2].data);
    });
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_batch_norm = {bn_gpu_forward, bn_gpu_backward, NULL, MX_HALF_DTYPES};
