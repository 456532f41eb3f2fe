/*
 * nag.c - Nesterov accelerated SGD (MXNet's NAG). Without momentum MXNet
 * calls sgd_update:
 *     w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)
 * with momentum, nag_mom_update, in place on the weight:
 *     mom = momentum*mom
 *     w'  = w - mom + (momentum+1)*(mom - lr*(clip(rescale_grad*g) + wd*w))
 *     mom = mom - lr*(clip(rescale_grad*g) + wd*w')
 * The last line reads the weight the line before wrote: MXNet's kernel runs
 * with the output aliasing the weight, and we keep its numbers.
 */
#include "optimizer/optimizer_internal.h"

static const mx_param_desc nag_params[] = {
    MX_OPT_COMMON_PARAMS("0.01"),
    {"momentum", MX_PARAM_FLOAT, "0", 0, 1, NULL, offsetof(mx_optimizer_params, momentum),
     "momentum; 0 keeps no state"},
};

static const char *const nag_states[] = {"mom", NULL};

static int nag_num_states(const mx_optimizer_params *p) { return p->momentum != 0.0 ? 1 : 0; }

#define NAG_KERNEL(T, SUFFIX, CLIP)                                                                      \
    static void nag_run_##SUFFIX(const opt_step *s, T *w, const T *g, T *const *st, int64_t n)          \
    {                                                                                                    \
        const T lr = OPT_F(T, s->lr), wd = OPT_F(T, s->wd), rescale = OPT_F(T, s->p.rescale_grad);      \
        const T clip = OPT_F(T, s->p.clip_gradient);                                                     \
        const bool do_clip = s->p.clip_gradient > 0.0;                                                   \
        if (!(s->p.momentum > 0.0)) { /* sgd_update */                                                   \
            for (int64_t i = 0; i < n; i++) {                                                            \
                if (do_clip)                                                                             \
                    w[i] = ((T)1 - lr * wd) * w[i] - lr * CLIP(rescale * g[i], clip);                    \
                else                                                                                     \
                    w[i] = ((T)1 - lr * wd) * w[i] - (lr * rescale) * g[i];                              \
            }                                                                                            \
            return;                                                                                      \
        }                                                                                                \
        const T momentum = OPT_F(T, s->p.momentum);                                                      \
        T *mom = st[0];                                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T gr = do_clip ? CLIP(rescale * g[i], clip) : rescale * g[i];                                \
            mom[i] = momentum * mom[i];                                                                  \
            w[i] = w[i] - mom[i] + (momentum + (T)1) * (mom[i] - lr * (gr + wd * w[i]));                 \
            mom[i] = mom[i] - lr * (gr + wd * w[i]);                                                     \
        }                                                                                                \
    }
NAG_KERNEL(float, f32, opt_clipf)
NAG_KERNEL(double, f64, opt_clipd)

const opt_kind_def mx_opt_nag = {
    .name = "nag",
    .params = nag_params,
    .n_params = (int)(sizeof(nag_params) / sizeof(nag_params[0])),
    .state_names = nag_states,
    .num_states = nag_num_states,
    .run_f32 = nag_run_f32,
    .run_f64 = nag_run_f64,
    .run_gpu = OPT_GPU(nag),
};
