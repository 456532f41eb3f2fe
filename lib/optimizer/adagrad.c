/*
 * adagrad.c - AdaGrad (MXNet's AdaGrad, dense path), one NDArray operation
 * after the other as MXNet's Python does, each rounded to the weight's dtype:
 *     gr = clip(g*rescale_grad)      (clip only when clip_gradient > 0)
 *     h  = h + gr*gr
 *     w  = w + (gr / sqrt(h + eps) + w*wd) * -lr
 * The history starts at 0; eps (MXNet's float_stable_eps) keeps the square
 * root away from zero.
 */
#include "optimizer/optimizer_internal.h"

#include <math.h>

static const mx_param_desc adagrad_params[] = {
    MX_OPT_COMMON_PARAMS("0.01"),
    {"eps", MX_PARAM_FLOAT, "1e-7", 0, 1e30, NULL, offsetof(mx_optimizer_params, epsilon),
     "added to the history inside the square root"},
};

static const char *const adagrad_states[] = {"history", NULL};

static int adagrad_num_states(const mx_optimizer_params *p)
{
    (void)p;
    return 1;
}

#define ADAGRAD_KERNEL(T, SUFFIX, CLIP, SQRT)                                                            \
    static void adagrad_run_##SUFFIX(const opt_step *s, T *w, const T *g, T *const *st, int64_t n)      \
    {                                                                                                    \
        const T neg_lr = (T)(-s->lr), wd = (T)s->wd, rescale = (T)s->p.rescale_grad;                    \
        const T clip = (T)s->p.clip_gradient, eps = (T)s->p.epsilon;                                     \
        const bool do_clip = s->p.clip_gradient > 0.0;                                                   \
        T *hist = st[0];                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T gr = g[i] * rescale;                                                                       \
            if (do_clip) gr = CLIP(gr, clip);                                                            \
            hist[i] = hist[i] + gr * gr;                                                                 \
            T div = gr / SQRT(hist[i] + eps);                                                            \
            T step = (div + w[i] * wd) * neg_lr;                                                         \
            w[i] = w[i] + step;                                                                          \
        }                                                                                                \
    }
ADAGRAD_KERNEL(float, f32, opt_clipf, sqrtf)
ADAGRAD_KERNEL(double, f64, opt_clipd, sqrt)

const opt_kind_def mx_opt_adagrad = {
    .name = "adagrad",
    .params = adagrad_params,
    .n_params = (int)(sizeof(adagrad_params) / sizeof(adagrad_params[0])),
    .state_names = adagrad_states,
    .num_states = adagrad_num_states,
    .run_f32 = adagrad_run_f32,
    .run_f64 = adagrad_run_f64,
    .run_gpu = OPT_GPU(adagrad),
};
