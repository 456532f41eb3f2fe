/*
 * update_kernels.cu - the optimizers' update kernels on a GPU: one fused
 * kernel per update (MXNet's sgd_mom_update, nag_mom_update, adam_update,
 * rmsprop(alex)_update, adagrad), float32, element for element the
 * formulas of the kind's .c file (its comment gives them), with the
 * hyper-parameters rounded to float as MXNet's kernels see them. Launched
 * on the stream of the engine worker that runs the update.
 */
#include "ops/cuda/cuda_op.h"

extern "C" {
#include "optimizer/optimizer_internal.h"
}

namespace {

struct hyper {
    float lr, wd, rescale, clip, momentum, eps, beta1, beta2, gamma1, gamma2, clip_w;
    bool do_clip, do_clip_w, centered;
};

hyper hyper_of(const opt_step *s)
{
    hyper h;
    h.lr = (float)s->lr;
    h.wd = (float)s->wd;
    h.rescale = (float)s->p.rescale_grad;
    h.clip = (float)s->p.clip_gradient;
    h.momentum = (float)s->p.momentum;
    h.eps = (float)s->p.epsilon;
    h.beta1 = (float)s->p.beta1;
    h.beta2 = (float)s->p.beta2;
    h.gamma1 = (float)s->p.gamma1;
    h.gamma2 = (float)s->p.gamma2;
    h.clip_w = (float)s->p.clip_weights;
    h.do_clip = s->p.clip_gradient > 0.0;
    h.do_clip_w = s->p.clip_weights > 0.0;
    h.centered = s->p.centered != 0;
    return h;
}

__device__ __forceinline__ float clipf(float x, float c) { return x > c ? c : (x < -c ? -c : x); }

__global__ void sgd_kernel(hyper h, bool has_mom, float *w, const float *g, float *mom_state, int64_t n)
{
    const float momentum = has_mom ? h.momentum : 0.0f;
    MX_CUDA_FOR(i, n)
    {
        float mom = has_mom ? mom_state[i] : 0.0f;
        if (h.do_clip)
            mom = momentum * mom - h.lr * h.wd * w[i] - h.lr * clipf(h.rescale * g[i], h.clip);
        else
            mom = momentum * mom - h.lr * h.wd * w[i] - h.lr * h.rescale * g[i];
        if (has_mom) mom_state[i] = mom;
        w[i] = w[i] + mom;
    }
}

__global__ void nag_kernel(hyper h, bool has_mom, float *w, const float *g, float *mom, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        if (!has_mom) {
            if (h.do_clip)
                w[i] = (1.0f - h.lr * h.wd) * w[i] - h.lr * clipf(h.rescale * g[i], h.clip);
            else
                w[i] = (1.0f - h.lr * h.wd) * w[i] - (h.lr * h.rescale) * g[i];
            continue;
        }
        float gr = h.do_clip ? clipf(h.rescale * g[i], h.clip) : h.rescale * g[i];
        mom[i] = h.momentum * mom[i];
        w[i] = w[i] - mom[i] + (h.momentum + 1.0f) * (mom[i] - h.lr * (gr + h.wd * w[i]));
        mom[i] = mom[i] - h.lr * (gr + h.wd * w[i]);
    }
}

__global__ void adam_kernel(hyper h, float *w, const float *g, float *mean, float *var, int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        float gr = g[i] * h.rescale + w[i] * h.wd;
        if (h.do_clip) gr = clipf(gr, h.clip);
        mean[i] = h.beta1 * mean[i] + (1.0f - h.beta1) * gr;
        var[i] = h.beta2 * var[i] + (1.0f - h.beta2) * gr * gr;
        w[i] = w[i] - h.lr * mean[i] / (sqrtf(var[i]) + h.eps);
    }
}

__global__ void rmsprop_kernel(hyper h, float *w, const float *g, float *state_n, float *state_g, float *delta,
                               int64_t n)
{
    MX_CUDA_FOR(i, n)
    {
        float gr = h.rescale * g[i] + h.wd * w[i];
        if (h.do_clip) gr = clipf(gr, h.clip);
        float nw;
        if (!h.centered) {
            state_n[i] = (1.0f - h.gamma1) * (gr * gr) + h.gamma1 * state_n[i];
            nw = w[i] - h.lr * (gr / sqrtf(state_n[i] + h.eps));
        } else {
            state_n[i] = (1.0f - h.gamma1) * gr * gr + h.gamma1 * state_n[i];
            state_g[i] = (1.0f - h.gamma1) * gr + h.gamma1 * state_g[i];
            delta[i] = h.gamma2 * delta[i] - (h.lr * gr / (sqrtf(state_n[i] - state_g[i] * state_g[i] + h.eps)));
            nw = w[i] + delta[i];
        }
        w[i] = h.do_clip_w ? clipf(nw, h.clip_w) : nw;
    }
}

__global__ void adagrad_kernel(hyper h, float *w, const float *g, float *hist, int64_t n)
{
    const float neg_lr = -h.lr;
    MX_CUDA_FOR(i, n)
    {
        float gr = g[i] * h.rescale;
        if (h.do_clip) gr = clipf(gr, h.clip);
        hist[i] = hist[i] + gr * gr;
        float div = gr / sqrtf(hist[i] + h.eps);
        float step = (div + w[i] * h.wd) * neg_lr;
        w[i] = w[i] + step;
    }
}

cudaStream_t stream_of(void *worker) { return mx_cuda_worker_stream((const mx_cuda_worker *)worker); }

} // namespace

extern "C" mx_status mx_opt_gpu_sgd(const opt_step *s, float *w, const float *g, float *const *st, int64_t n,
                                    void *worker)
{
    bool has_mom = s->p.momentum > 0.0;
    sgd_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream_of(worker)>>>(hyper_of(s), has_mom, w, g,
                                                                              has_mom ? st[0] : nullptr, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" mx_status mx_opt_gpu_nag(const opt_step *s, float *w, const float *g, float *const *st, int64_t n,
                                    void *worker)
{
    bool has_mom = s->p.momentum > 0.0;
    nag_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream_of(worker)>>>(hyper_of(s), has_mom, w, g,
                                                                              has_mom ? st[0] : nullptr, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" mx_status mx_opt_gpu_adam(const opt_step *s, float *w, const float *g, float *const *st, int64_t n,
                                     void *worker)
{
    adam_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream_of(worker)>>>(hyper_of(s), w, g, st[0], st[1], n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" mx_status mx_opt_gpu_rmsprop(const opt_step *s, float *w, const float *g, float *const *st, int64_t n,
                                        void *worker)
{
    bool centered = s->p.centered != 0;
    rmsprop_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream_of(worker)>>>(
        hyper_of(s), w, g, st[0], centered ? st[1] : nullptr, centered ? st[2] : nullptr, n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}

extern "C" mx_status mx_opt_gpu_adagrad(const opt_step *s, float *w, const float *g, float *const *st, int64_t n,
                                        void *worker)
{
    adagrad_kernel<<<mx_cuda_blocks(n), MX_CUDA_THREADS, 0, stream_of(worker)>>>(hyper_of(s), w, g, st[0], n);
    MX_CUDA_LAUNCHED();
    return MX_OK;
}
