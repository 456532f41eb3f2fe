/*
 * sgd.c - SGD with momentum and weight decay (MXNet's SGD). MXNet 1.9.1's
 * updater runs it through multi_sgd_update / multi_sgd_mom_update, whose
 * kernel this follows operation for operation:
 *     mom = momentum*mom - lr*wd*w - lr*clip(rescale_grad*g)
 *     w   = w + mom
 * (clip only when clip_gradient > 0; without momentum there is no state
 * and mom starts from 0 each step).
 */
#include "optimizer/optimizer_internal.h"

static const mx_param_desc sgd_params[] = {
    MX_OPT_COMMON_PARAMS("0.01"),
    {"momentum", MX_PARAM_FLOAT, "0", 0, 1, NULL, offsetof(mx_optimizer_params, momentum),
     "momentum; 0 keeps no state"},
};

static const char *const sgd_states[] = {"mom", NULL};

static int sgd_num_states(const mx_optimizer_params *p) { return p->momentum != 0.0 ? 1 : 0; }

#define SGD_KERNEL(T, SUFFIX, CLIP)                                                                      \
    static void sgd_run_##SUFFIX(const opt_step *s, T *w, const T *g, T *const *st, int64_t n)          \
    {                                                                                                    \
        const T lr = OPT_F(T, s->lr), wd = OPT_F(T, s->wd), rescale = OPT_F(T, s->p.rescale_grad);      \
        const T clip = OPT_F(T, s->p.clip_gradient);                                                     \
        const bool has_mom = s->p.momentum > 0.0, do_clip = s->p.clip_gradient > 0.0;                  \
        const T momentum = has_mom ? OPT_F(T, s->p.momentum) : (T)0;                                     \
        T *mom_state = has_mom ? st[0] : NULL;                                                           \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T mom = has_mom ? mom_state[i] : (T)0;                                                       \
            if (do_clip)                                                                                 \
                mom = momentum * mom - lr * wd * w[i] - lr * CLIP(rescale * g[i], clip);                 \
            else                                                                                         \
                mom = momentum * mom - lr * wd * w[i] - lr * rescale * g[i];                             \
            if (has_mom) mom_state[i] = mom;                                                             \
            w[i] = w[i] + mom;                                                                           \
        }                                                                                                \
    }
SGD_KERNEL(float, f32, opt_clipf)
SGD_KERNEL(double, f64, opt_clipd)

const opt_kind_def mx_opt_sgd = {
    .name = "sgd",
    .params = sgd_params,
    .n_params = (int)(sizeof(sgd_params) / sizeof(sgd_params[0])),
    .state_names = sgd_states,
    .num_states = sgd_num_states,
    .run_f32 = sgd_run_f32,
    .run_f64 = sgd_run_f64,
    .run_gpu = OPT_GPU(sgd),
};
