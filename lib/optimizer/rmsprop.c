/*
 * rmsprop.c - RMSProp (MXNet's RMSProp): Tieleman & Hinton's version
 * (rmsprop_update), or Graves's with centered=1 (rmspropalex_update):
 *     gr = clip(rescale_grad*g + wd*w)        (clip only when clip_gradient > 0)
 *     n  = (1 - gamma1)*gr^2 + gamma1*n
 *     plain:    w = w - lr*gr / sqrt(n + epsilon)
 *     centered: gm = (1 - gamma1)*gr + gamma1*gm
 *               delta = gamma2*delta - lr*gr / sqrt(n - gm^2 + epsilon)
 *               w = w + delta
 *     clip_weights > 0 clips the new weight to [-clip_weights, clip_weights].
 */
#include "optimizer/optimizer_internal.h"

#include <math.h>

static const mx_param_desc rmsprop_params[] = {
    MX_OPT_COMMON_PARAMS("0.001"),
    {"gamma1", MX_PARAM_FLOAT, "0.9", 0, 1, NULL, offsetof(mx_optimizer_params, gamma1),
     "decay of the moving average of squared gradients"},
    {"gamma2", MX_PARAM_FLOAT, "0.9", 0, 1, NULL, offsetof(mx_optimizer_params, gamma2),
     "momentum of the update (centered only)"},
    {"epsilon", MX_PARAM_FLOAT, "1e-8", 0, 1e30, NULL, offsetof(mx_optimizer_params, epsilon),
     "added inside the square root"},
    {"centered", MX_PARAM_BOOL, "False", 1, 0, NULL, offsetof(mx_optimizer_params, centered),
     "Graves's centered version"},
    {"clip_weights", MX_PARAM_FLOAT, "-1", 1, 0, NULL, offsetof(mx_optimizer_params, clip_weights),
     "clip weights to [-c, c] when c > 0"},
};

static const char *const rmsprop_states[] = {"n", "g", "delta", NULL};

static int rmsprop_num_states(const mx_optimizer_params *p) { return p->centered ? 3 : 1; }

#define RMSPROP_KERNEL(T, SUFFIX, CLIP, SQRT)                                                            \
    static void rmsprop_run_##SUFFIX(const opt_step *s, T *w, const T *g, T *const *st, int64_t n)      \
    {                                                                                                    \
        const T lr = OPT_F(T, s->lr), wd = OPT_F(T, s->wd), rescale = OPT_F(T, s->p.rescale_grad);      \
        const T clip = OPT_F(T, s->p.clip_gradient), eps = OPT_F(T, s->p.epsilon);                      \
        const T gamma1 = OPT_F(T, s->p.gamma1), gamma2 = OPT_F(T, s->p.gamma2);                          \
        const T clip_w = OPT_F(T, s->p.clip_weights);                                                    \
        const bool do_clip = s->p.clip_gradient > 0.0, do_clip_w = s->p.clip_weights > 0.0;             \
        T *state_n = st[0];                                                                              \
        if (!s->p.centered) {                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                            \
                T gr = rescale * g[i] + wd * w[i];                                                       \
                if (do_clip) gr = CLIP(gr, clip);                                                        \
                state_n[i] = ((T)1 - gamma1) * (gr * gr) + gamma1 * state_n[i];                          \
                T nw = w[i] - lr * (gr / SQRT(state_n[i] + eps));                                        \
                w[i] = do_clip_w ? CLIP(nw, clip_w) : nw;                                                \
            }                                                                                            \
            return;                                                                                      \
        }                                                                                                \
        T *state_g = st[1], *delta = st[2];                                                              \
        for (int64_t i = 0; i < n; i++) {                                                                \
            T gr = rescale * g[i] + wd * w[i];                                                           \
            if (do_clip) gr = CLIP(gr, clip);                                                            \
            state_n[i] = ((T)1 - gamma1) * gr * gr + gamma1 * state_n[i];                                \
            state_g[i] = ((T)1 - gamma1) * gr + gamma1 * state_g[i];                                     \
            delta[i] = gamma2 * delta[i] - (lr * gr / (SQRT(state_n[i] - state_g[i] * state_g[i] + eps))); \
            T nw = w[i] + delta[i];                                                                      \
            w[i] = do_clip_w ? CLIP(nw, clip_w) : nw;                                                    \
        }                                                                                                \
    }
RMSPROP_KERNEL(float, f32, opt_clipf, sqrtf)
RMSPROP_KERNEL(double, f64, opt_clipd, sqrt)

const opt_kind_def mx_opt_rmsprop = {
    .name = "rmsprop",
    .params = rmsprop_params,
    .n_params = (int)(sizeof(rmsprop_params) / sizeof(rmsprop_params[0])),
    .state_names = rmsprop_states,
    .num_states = rmsprop_num_states,
    .run_f32 = rmsprop_run_f32,
    .run_f64 = rmsprop_run_f64,
    .run_gpu = OPT_GPU(rmsprop),
};
