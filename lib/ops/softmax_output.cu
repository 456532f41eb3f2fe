/*
 * softmax_output.cu - SoftmaxOutput on the GPU, the contract of
 * softmax_output.c (see there for layouts, labels and every parameter).
 *
 * Forward: one thread per softmax (a row, or one position of an (outer,
 * k, inner) multi_output block): the max, the sum of exp(x - max), then
 * y = exp(x - max) * (1 / sum), written or added. A thread reads its
 * entries before writing them, so y may be x (in place).
 *
 * Backward: one thread per element of data. normalization=valid needs the
 * count of labels equal to ignore_label: a counting kernel adds it up in a
 * word of the worker's scratch and the gradient kernel reads it there and
 * forms the scale on the device (no host round trip).
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "ops/softmax_output.h"
}

#include <math.h>

/* A float label as MXNet's static_cast<int>; values no int can hold map to
 * a sentinel that matches no class (softmax_output.c's label_index). */
__host__ __device__ __forceinline__ int64_t so_label_index(double v)
{
    if (!(v > -2147483648.0 && v < 2147483648.0)) return INT64_MIN;
    return (int64_t)v;
}

__global__ void so_forward_kernel(const float *x, float *y, int64_t outer, int64_t k, int64_t inner, bool add)
{
    MX_CUDA_FOR(u, outer * inner)
    {
        const int64_t o = u / inner, t = u % inner;
        const int64_t base = o * k * inner + t;
        float m = -INFINITY;
        for (int64_t j = 0; j < k; j++) {
            float v = x[base + j * inner];
            m = m > v ? m : v;
        }
        float s = 0.0f;
        for (int64_t j = 0; j < k; j++) s += expf(x[base + j * inner] - m);
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < k; j++) {
            const int64_t i = base + j * inner;
            const float e = __fmul_rn(expf(x[i] - m), inv);
            y[i] = add ? y[i] + e : e;
        }
    }
}

/* Probabilities as labels: g = grad_scale * (y - label) [* og]. */
__global__ void so_backward_prob_kernel(const float *y, const float *label, const float *og, float *g, float sc,
                                        mx_req req, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        float v = __fmul_rn(sc, y[i] - label[i]);
        mx_cuda_assign(req, &g[i], og ? __fmul_rn(v, og[i]) : v);
    }
}

__global__ void so_count_ignored_kernel(const float *label, int64_t n, int64_t ignore, unsigned long long *count)
{
    MX_CUDA_FOR(i, n)
    {
        if (so_label_index((double)label[i]) == ignore) atomicAdd(count, 1ull);
    }
}

/* Class indices as labels. sc is the scale, unless `ignored` is given
 * (normalization=valid): then grad_scale / max(n_label - ignored, 1). */
__global__ void so_backward_kernel(const float *y, const float *label, const float *og, float *g, int64_t outer,
                                   int64_t k, int64_t inner, bool use_ignore, int64_t ignore, float sc,
                                   const unsigned long long *ignored, double grad_scale, int64_t n_label, float on,
                                   float off, bool add)
{
    float scale = sc;
    if (ignored) {
        const int64_t cnt = n_label - (int64_t)*ignored;
        const double valid = cnt == 0 ? 1.0 : (double)cnt;
        scale = (float)(grad_scale / valid);
    }
    MX_CUDA_FOR(i, outer * k * inner)
    {
        const int64_t o = i / (k * inner), r = i % (k * inner);
        const int64_t c = r / inner, t = r % inner;
        const int64_t li = so_label_index((double)label[o * inner + t]);
        if (use_ignore && li == ignore) {
            if (!add) g[i] = 0.0f;
            continue;
        }
        float v = __fmul_rn(scale, y[i] - (c == li ? on : off));
        if (og) v = __fmul_rn(v, og[i]);
        g[i] = add ? g[i] + v : v;
    }
}

/* The softmax's (outer, classes, inner) view of data (so_geometry). */
static void so_gpu_geometry(const so_params *so, const mx_shape *d, int64_t *outer, int64_t *k, int64_t *inner)
{
    int64_t rest = 1;
    if (so->multi_output) {
        for (int i = 2; i < d->ndim; i++) rest *= d->dims[i];
        *outer = d->dims[0];
        *k = d->dims[1];
        *inner = rest;
    } else if (so->preserve_shape) {
        for (int i = 0; i < d->ndim - 1; i++) rest *= d->dims[i];
        *outer = rest;
        *k = d->dims[d->ndim - 1];
        *inner = 1;
    } else {
        for (int i = 1; i < d->ndim; i++) rest *= d->dims[i];
        *outer = d->dims[0];
        *k = rest;
        *inner = 1;
    }
}

static mx_status so_gpu_forward(const mx_op_ctx *ctx, const void *p, const mx_tensor *in, const mx_req *req,
                                mx_tensor *out, mx_tensor *aux)
{
    (void)aux;
    if (req[0] == MX_REQ_NULL) return MX_OK;
    int64_t outer, k, inner;
    so_gpu_geometry((const so_params *)p, &in[0].shape, &outer, &k, &inner);
    const int64_t units = outer * inner;
    if (units == 0 || k == 0) return MX_OK;
    so_forward_kernel<<<mx_cuda_blocks(units), MX_CUDA_THREADS, 0, mx_cuda_op_stream(ctx)>>>(
        (const float *)in[0].data, (float *)out[0].data, outer, k, inner, req[0] == MX_REQ_ADD);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

static mx_status so_gpu_backward(const mx_op_ctx *ctx, const void *p, const mx_tensor *out_grad,
                                 const mx_tensor *in, const mx_tensor *out, const mx_req *req, mx_tensor *in_grad,
                                 mx_tensor *aux)
{
    (void)aux;
    const so_params *so = (const so_params *)p;
    const mx_shape *ds = &in[0].shape;
    const int64_t total = mx_shape_size(ds);
    const int64_t n_label = mx_shape_size(&in[1].shape);
    cudaStream_t stream = mx_cuda_op_stream(ctx);
    if (req[1] != MX_REQ_NULL && req[1] != MX_REQ_ADD && n_label > 0) /* labels get no gradient */
        MX_CUDA_TRY(cudaMemsetAsync(in_grad[1].data, 0, (size_t)n_label * sizeof(float), stream));
    if (req[0] == MX_REQ_NULL) return MX_OK;
    const float *y = (const float *)out[0].data, *label = (const float *)in[1].data;
    const float *og = NULL;
    if (so->out_grad) {
        og = (const float *)out_grad[0].data;
        if (!og) return MX_ERROR(MX_ERR_RUNTIME, "SoftmaxOutput: out_grad=True but no output gradient was given");
    }
    float *g = (float *)in_grad[0].data;
    const bool add = req[0] == MX_REQ_ADD;
    if (total == 0) return MX_OK;

    if (mx_shape_equal(&in[1].shape, ds)) { /* probabilities as labels: no normalization */
        so_backward_prob_kernel<<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, stream>>>(
            y, label, og, g, (float)(so->grad_scale * mx_op_loss_scale(ctx)), req[0], total);
        MX_CUDA_LAUNCHED();
        return MX_OK;
    }

    int64_t outer, k, inner;
    so_gpu_geometry(so, ds, &outer, &k, &inner);
    const int64_t ignore = so_label_index(so->ignore_label);
    unsigned long long *ignored = NULL;
    const double grad_scale = so->grad_scale * mx_op_loss_scale(ctx); /* with dynamic loss scaling's factor */
    double scale = grad_scale;
    if (so->normalization == SO_NORM_BATCH) {
        scale = grad_scale / (so->multi_output ? (double)outer : (double)n_label);
    } else if (so->normalization == SO_NORM_VALID) {
        void *scratch;
        MX_TRY(mx_cuda_worker_scratch(mx_cuda_op_worker(ctx), sizeof(unsigned long long), &scratch));
        ignored = (unsigned long long *)scratch;
        MX_CUDA_TRY(cudaMemsetAsync(ignored, 0, sizeof(unsigned long long), stream));
        if (n_label > 0) {
            so_count_ignored_kernel<<<mx_cuda_blocks(n_label), MX_CUDA_THREADS, 0, stream>>>(label, n_label, ignore,
                                                                                            ignored);
            MX_CUDA_LAUNCHED();
        }
    }
    if (so->multi_output && so->normalization != SO_NORM_VALID) scale /= (double)inner;
    const float alpha = (float)so->smooth_alpha;
    const float off = k > 1 ? alpha / (float)(k - 1) : 0.0f; /* what every other class gets */
    const float on = 1.0f - alpha;                          /* what the labelled class gets */
    so_backward_kernel<<<mx_cuda_blocks(total), MX_CUDA_THREADS, 0, stream>>>(
        y, label, og, g, outer, k, inner, so->use_ignore, ignore, (float)scale, ignored, grad_scale, n_label, on,
        off, add);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" const mx_op_kernels mx_op_gpu_softmax_output = {so_gpu_forward, so_gpu_backward, NULL, 0};
