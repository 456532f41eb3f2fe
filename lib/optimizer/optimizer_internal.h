/*
 * optimizer_internal.h - what one optimizer kind provides to the registry
 * in optimizer.c: its parameter table, its states and its kernels. Adding
 * an optimizer is a file defining one opt_kind_def and a line in the
 * registry.
 */
#ifndef MX_OPTIMIZER_INTERNAL_H
#define MX_OPTIMIZER_INTERNAL_H

#include "optimizer/optimizer.h"

#include <stddef.h>

#define OPT_MAX_STATES 3

/* The scalars of one update, fixed at push time. */
typedef struct opt_step {
    mx_optimizer_params p; /* the optimizer's parameters */
    double lr;             /* schedule * lr_mult (and Adam's bias correction) */
    double wd;             /* wd * wd_mult */
    int64_t t;             /* this parameter's update count */
} opt_step;

typedef struct opt_kind_def {
    const char *name;                 /* MXNet's registered name */
    const mx_param_desc *params;      /* over mx_optimizer_params */
    int n_params;
    const char *const *state_names;   /* the first num_states are in use */
    int (*num_states)(const mx_optimizer_params *p);
    /* Checks beyond the table's ranges; may be NULL. */
    mx_status (*check)(const mx_optimizer_params *p);
    /* What MXNet's Python does to lr before the kernel; may be NULL. */
    double (*adjust_lr)(const mx_optimizer_params *p, double lr, int64_t t);
    /* The kernel over n elements; states[i] are num_states arrays. */
    void (*run_f32)(const opt_step *s, float *w, const float *g, float *const *states, int64_t n);
    void (*run_f64)(const opt_step *s, double *w, const double *g, double *const *states, int64_t n);
    /* The float32 kernel on a GPU (update_kernels.cu), queued on the
     * stream of `worker` (the engine worker's mx_cuda_worker); NULL in
     * builds without CUDA (OPT_GPU). */
    mx_status (*run_gpu)(const opt_step *s, float *w, const float *g, float *const *states, int64_t n, void *worker);
} opt_kind_def;

#ifdef MX_USE_CUDA
#define OPT_GPU(x) mx_opt_gpu_##x
mx_status mx_opt_gpu_sgd(const opt_step *, float *, const float *, float *const *, int64_t, void *);
mx_status mx_opt_gpu_nag(const opt_step *, float *, const float *, float *const *, int64_t, void *);
mx_status mx_opt_gpu_adam(const opt_step *, float *, const float *, float *const *, int64_t, void *);
mx_status mx_opt_gpu_rmsprop(const opt_step *, float *, const float *, float *const *, int64_t, void *);
mx_status mx_opt_gpu_adagrad(const opt_step *, float *, const float *, float *const *, int64_t, void *);
#else
#define OPT_GPU(x) NULL
#endif

extern const opt_kind_def mx_opt_sgd;
extern const opt_kind_def mx_opt_nag;
extern const opt_kind_def mx_opt_adam;
extern const opt_kind_def mx_opt_rmsprop;
extern const opt_kind_def mx_opt_adagrad;

/* The rows every optimizer has (Optimizer.__init__), lr_default being the
 * kind's learning_rate default. */
#define MX_OPT_COMMON_PARAMS(lr_default)                                                                  \
    {"learning_rate", MX_PARAM_FLOAT, lr_default, 0, 1e30, NULL, offsetof(mx_optimizer_params, learning_rate), \
     "initial learning rate (also as 'lr')"},                                                             \
    {"wd", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, offsetof(mx_optimizer_params, wd),                         \
     "weight decay (L2) coefficient"},                                                                    \
    {"rescale_grad", MX_PARAM_FLOAT, "1", 0, 1e30, NULL, offsetof(mx_optimizer_params, rescale_grad),     \
     "gradients are multiplied by this (often 1/batch_size)"},                                            \
    {"clip_gradient", MX_PARAM_FLOAT, "-1", 1, 0, NULL, offsetof(mx_optimizer_params, clip_gradient),     \
     "clip gradients to [-c, c] when c > 0"},                                                             \
    {"begin_num_update", MX_PARAM_INT, "0", 0, 1e15, NULL, offsetof(mx_optimizer_params, begin_num_update), \
     "initial update count"}

/* The kind's checks of a typed parameter set (table ranges and its own). */
mx_status mx_optimizer_check(const char *name, const mx_optimizer_params *params);

/* The schedule's mutable position (base_lr, count, cur_step_ind), saved
 * with the optimizer's states (lr_scheduler.c). */
void mx_opt_sched_get_state(const mx_lr_scheduler *s, double state[3]);
mx_status mx_opt_sched_set_state(mx_lr_scheduler *s, const double state[3]);

/* Hyper-parameters reach MXNet's kernels as float32: x as the kernel sees it. */
#define OPT_F(T, x) ((T)(float)(x))

static inline float opt_clipf(float x, float c) { return x > c ? c : (x < -c ? -c : x); }
static inline double opt_clipd(double x, double c) { return x > c ? c : (x < -c ? -c : x); }

#endif /* MX_OPTIMIZER_INTERNAL_H */
