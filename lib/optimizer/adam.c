/*
 * adam.c - Adam (MXNet's Adam and adam_update). MXNet corrects the bias
 * through the learning rate, in double precision before the kernel:
 *     lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)   (t: this parameter's count)
 * then per element, in the weight's dtype:
 *     gr = clip(g*rescale_grad + w*wd)        (clip only when clip_gradient > 0)
 *     m  = beta1*m + (1 - beta1)*gr
 *     v  = beta2*v + (1 - beta2)*gr*gr
 *     w  = w - lr_t*m / (sqrt(v) + epsilon)
 */
#include "optimizer/optimizer_internal.h"

#include <math.h>

static const mx_param_desc adam_params[] = {
    MX_OPT_COMMON_PARAMS("0.001"),
    {"beta1", MX_PARAM_FLOAT, "0.9", 0, 1, NULL, offsetof(mx_optimizer_params, beta1),
     "decay of the first moment, in [0, 1)"},
    {"beta2", MX_PARAM_FLOAT, "0.999", 0, 1, NULL, offsetof(mx_optimizer_params, beta2),
     "decay of the second moment, in [0, 1)"},
    {"epsilon", MX_PARAM_FLOAT, "1e-8", 0, 1e30, NULL, offsetof(mx_optimizer_params, epsilon),
     "added to sqrt(v)"},
};

static const char *const adam_states[] = {"mean", "var", NULL};

static int adam_num_states(const mx_optimizer_params *p)
{
    (void)p;
    return 2;
}

static mx_status adam_check(const mx_optimizer_params *p)
{
    if (p->beta1 >= 1.0)
        return MX_ERROR(MX_ERR_INVALID, "adam: parameter 'beta1' has bad value '%g': must be below 1", p->beta1);
    if (p->beta2 >= 1.0)
        return MX_ERROR(MX_ERR_INVALID, "adam: parameter 'beta2' has bad value '%g': must be below 1", p->beta2);
    return MX_OK;
}

static double adam_adjust_lr(const mx_optimizer_params *p, double lr, int64_t t)
{
    double coef1 = 1.0 - pow(p->beta1, (double)t);
    double coef2 = 1.0 - pow(p->beta2, (double)t);
    return lr * sqrt(coef2) / coef1;
}

#define ADAM_KERNEL(T, SUFFIX, CLIP, SQRT)                                                               \
    static void adam_run_##SUFFIX(const opt_step *s, T *w, const T *g, T *const *st, int64_t n)         \
    {                                                                                                    \
        const T lr = OPT_F(T, s->lr), wd = OPT_F(T, s->wd), rescale = OPT_F(T, s->p.rescale_grad);      \
        const T clip = OPT_F(T, s->p.clip_gradient), eps = OPT_F(T, s->p.epsilon);                      \
        const T beta1 = OPT_F(T, s->p.beta1), beta2 = OPT_F(T, s->p.beta2);                              \
        const bool do_clip = s->p.clip_gradient > 0.0;                                                   \
        T *mean = st[0], *var = st[1];                                                                   \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T gr = g[i] * rescale + w[i] * wd;                                                           \
            if (do_clip) gr = CLIP(gr, clip);                                                            \
            mean[i] = beta1 * mean[i] + ((T)1 - beta1) * gr;                                             \
            var[i] = beta2 * var[i] + ((T)1 - beta2) * gr * gr;                                          \
            w[i] = w[i] - lr * mean[i] / (SQRT(var[i]) + eps);                                           \
        }                                                                                                \
    }
ADAM_KERNEL(float, f32, opt_clipf, sqrtf)
ADAM_KERNEL(double, f64, opt_clipd, sqrt)

const opt_kind_def mx_opt_adam = {
    .name = "adam",
    .params = adam_params,
    .n_params = (int)(sizeof(adam_params) / sizeof(adam_params[0])),
    .state_names = adam_states,
    .num_states = adam_num_states,
    .check = adam_check,
    .adjust_lr = adam_adjust_lr,
    .run_f32 = adam_run_f32,
    .run_f64 = adam_run_f64,
    .run_gpu = OPT_GPU(adam),
};
