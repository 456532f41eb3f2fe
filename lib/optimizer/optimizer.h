/*
 * optimizer.h - MXNet 1.9.1's optimizers (sgd, nag, adam, rmsprop, adagrad)
 * and learning-rate schedules (factor, multifactor, cosine, poly, each with
 * linear or constant warm-up), with MXNet's parameter names, defaults and
 * update formulas.
 *
 * Each optimizer and schedule is one row of a registry table and declares
 * its parameters as an mx_param_desc table (lib/params): unknown names and
 * parameters are MX_ERR_INVALID with a "did you mean" suggestion. Two ways
 * to create one: from key/value strings (MXNet's create(name, **kwargs)),
 * or from a typed struct (the trainer fills it from the config); both go
 * through the same range checks.
 *
 * An update is one engine operation that reads the gradient and writes the
 * weight and that parameter's state arrays, so updates of different
 * parameters run in parallel and overlap the next forward pass. What MXNet
 * computes in Python before calling its kernel (the update count, the
 * scheduled rate, lr_mult / wd_mult, Adam's bias correction) happens at push
 * time on the calling thread, in the same order as MXNet.
 *
 * Formulas (g = gradient, w = weight, clip(x) = max(min(x, c), -c), applied
 * only when clip_gradient > 0 as MXNet does; arithmetic in the weight's
 * dtype with float32 hyper-parameters, as MXNet's kernels):
 *   sgd      mom = momentum*mom - lr*wd*w - lr*clip(rescale_grad*g);
 *            w = w + mom                  (momentum 0: no state, mom from 0)
 *   nag      momentum 0: w = (1 - lr*wd)*w - lr*clip(rescale_grad*g);
 *            else: gr = clip(rescale_grad*g); mom = momentum*mom;
 *            w' = w - mom + (momentum+1)*(mom - lr*(gr + wd*w));
 *            mom = mom - lr*(gr + wd*w')   (MXNet's in-place kernel reads
 *            the already updated weight here; kept for identical results)
 *   adam     gr = clip(rescale_grad*g + wd*w); m = beta1*m + (1-beta1)*gr;
 *            v = beta2*v + (1-beta2)*gr*gr; lr_t = lr*sqrt(1-beta2^t)/(1-beta1^t);
 *            w = w - lr_t*m/(sqrt(v) + epsilon)   (t: this parameter's count)
 *   rmsprop  gr = clip(rescale_grad*g + wd*w); n = (1-gamma1)*gr^2 + gamma1*n;
 *            w = w - lr*gr/sqrt(n + epsilon); centered (Graves):
 *            also gm = (1-gamma1)*gr + gamma1*gm;
 *            delta = gamma2*delta - lr*gr/sqrt(n - gm^2 + epsilon); w = w + delta;
 *            clip_weights > 0 clips the new weight
 *   adagrad  gr = clip(rescale_grad*g); h = h + gr^2;
 *            w = w + (gr/sqrt(h + eps) + w*wd) * -lr
 *
 * Learning rate per parameter index (MXNet's Optimizer._get_lr/_get_wd):
 *   lr = (schedule ? schedule(num_update) : learning_rate) * lr_mult
 *   wd = wd * wd_mult, where wd_mult defaults to 0 for a parameter whose
 *   name (mx_optimizer_set_param_name) ends neither in "_weight" nor in
 *   "_gamma" (biases, beta...), else 1; an explicit wd_mult always wins.
 * num_update is the largest per-parameter update count (counts start at
 * begin_num_update); it drives the schedule, the per-parameter count is
 * Adam's t.
 *
 * Arrays: weights, gradients and states are float32 or float64 arrays on
 * the CPU (GPU arrays give MX_ERR_UNSUPPORTED until the CUDA kernels land).
 */
#ifndef MX_OPTIMIZER_H
#define MX_OPTIMIZER_H

#include "ndarray/ndarray.h"
#include "params/params.h"

#include <stdbool.h>

/* ================================================================ schedules */

#define MX_LR_MAX_STEPS 64

typedef enum mx_warmup_mode { MX_WARMUP_LINEAR = 0, MX_WARMUP_CONSTANT = 1 } mx_warmup_mode;

/* Parameters of every schedule (MXNet's lr_scheduler keyword arguments);
 * each kind reads its own. Counts are in updates. */
typedef struct mx_lr_scheduler_params {
    double base_lr;          /* all: 0.01 */
    int64_t step;            /* factor: period (required, >= 1) */
    int64_t steps[MX_LR_MAX_STEPS]; /* multifactor "step": increasing, >= 1 (required) */
    int n_steps;
    double factor;           /* factor, multifactor: 1 (<= 1) */
    double stop_factor_lr;   /* factor: 1e-8 */
    int64_t max_update;      /* cosine, poly: required, > warmup_steps */
    double pwr;              /* poly: 2 */
    double final_lr;         /* cosine, poly: 0 */
    int64_t warmup_steps;    /* all: 0 */
    double warmup_begin_lr;  /* all: 0 (<= base_lr) */
    int warmup_mode;         /* all: linear (mx_warmup_mode) */
} mx_lr_scheduler_params;

typedef struct mx_lr_scheduler mx_lr_scheduler;

/* Names: "factor", "multifactor", "cosine", "poly" (MXNet's class names,
 * lower case, with or without "scheduler", are accepted too). */
mx_status mx_lr_scheduler_defaults(const char *kind, mx_lr_scheduler_params *out);
/* Typed creation; checks every field the kind uses (MXNet's ValueErrors
 * become MX_ERR_INVALID). */
mx_status mx_lr_scheduler_create(const char *kind, const mx_lr_scheduler_params *params, mx_lr_scheduler **out);
/* From strings, e.g. ("multifactor", {"step", "factor"}, {"[30, 60]", "0.1"}).
 * The multifactor "step" list takes up to 8 entries this way (the typed
 * form takes MX_LR_MAX_STEPS). */
mx_status mx_lr_scheduler_create_kv(const char *kind, const char *const *keys, const char *const *values, int n,
                                    mx_lr_scheduler **out);
void mx_lr_scheduler_free(mx_lr_scheduler *s);
const char *mx_lr_scheduler_kind_name(const mx_lr_scheduler *s);
/* The parameter table of schedule `kind` (for --help output). */
mx_status mx_lr_scheduler_param_table(const char *kind, const mx_param_desc **table, int *n);
const mx_lr_scheduler_params *mx_lr_scheduler_get_params(const mx_lr_scheduler *s);

/* The rate for num_update, as MXNet's scheduler __call__: factor and
 * multifactor advance internal state (call with non-decreasing counts). */
double mx_lr_scheduler_lr(mx_lr_scheduler *s, int64_t num_update);
/* Sets the rate the schedule decays from (the warm-up target and the
 * cosine / poly starting point follow); the position (factor count, next
 * multifactor step) is kept. MX_ERR_INVALID if below warmup_begin_lr. */
mx_status mx_lr_scheduler_set_base_lr(mx_lr_scheduler *s, double base_lr);

/* A schedule given in epochs, as MXNet's example fit.py builds it from
 * lr_step_epochs / warmup_epochs: factor: step = step_epochs[0] * B;
 * multifactor: steps = step_epochs[i] * B; cosine, poly: max_update =
 * num_epoch * B; warmup_steps = floor(warmup_epochs * B); B =
 * updates_per_epoch (batches per epoch). To resume at an epoch without
 * saved optimizer states, create the optimizer with begin_num_update =
 * begin_epoch * B instead of shifting the steps. */
typedef struct mx_lr_epoch_schedule {
    const char *kind;
    double base_lr;
    double factor;                 /* factor, multifactor */
    const int64_t *step_epochs;    /* factor: one period; multifactor: increasing */
    int n_step_epochs;
    int64_t num_epoch;             /* cosine, poly */
    double final_lr;               /* cosine, poly */
    double pwr;                    /* poly */
    double warmup_epochs;
    double warmup_begin_lr;
    int warmup_mode;               /* mx_warmup_mode */
    double stop_factor_lr;         /* factor: the floor of the rate (MXNet's default 1e-8) */
    int64_t updates_per_epoch;     /* >= 1 */
} mx_lr_epoch_schedule;
mx_status mx_lr_scheduler_create_epochs(const mx_lr_epoch_schedule *e, mx_lr_scheduler **out);

/* The schedule names, "none" first, then the kinds in table order (NULL
 * past the end). */
const char *mx_lr_scheduler_name_at(int i);
/* The keys of schedule `kind` as a config's [optimizer] section writes them,
 * in epochs (lr_step_epochs, lr_factor, stop_factor_lr, final_lr, pwr,
 * warmup_epochs, warmup_begin_lr, warmup_mode): one table per kind; "none"
 * has none. The table's rows sit in an mx_lr_epoch_keys. */
typedef struct mx_lr_epoch_keys {
    double lr_factor;
    char lr_step_epochs[MX_PARAM_STRING_MAX]; /* "30,60": increasing epochs */
    double stop_factor_lr;
    double final_lr;
    double pwr;
    double warmup_epochs;
    double warmup_begin_lr;
    int warmup_mode;
} mx_lr_epoch_keys;
mx_status mx_lr_scheduler_epoch_table(const char *kind, const mx_param_desc **table, int *n);

/* ================================================================ optimizers */

/* Parameters of every optimizer (MXNet's keyword names); each kind reads
 * its own, fields other kinds use are ignored. */
typedef struct mx_optimizer_params {
    double learning_rate;    /* sgd, nag, adagrad 0.01; adam, rmsprop 0.001 ("lr" accepted) */
    double wd;               /* 0 */
    double rescale_grad;     /* 1 */
    double clip_gradient;    /* -1: off; clipping happens only when > 0 */
    int64_t begin_num_update; /* 0 */
    double momentum;         /* sgd, nag: 0 (no state) */
    double beta1, beta2;     /* adam: 0.9, 0.999 */
    double epsilon;          /* adam, rmsprop: 1e-8; adagrad (named "eps"): 1e-7 */
    double gamma1, gamma2;   /* rmsprop: 0.9, 0.9 (gamma2: centered only) */
    bool centered;           /* rmsprop: false */
    double clip_weights;     /* rmsprop: -1 (off; clips when > 0) */
} mx_optimizer_params;

/* An optimizer is used by one thread at a time (the trainer's); its
 * updates run on the engine's workers. */
typedef struct mx_optimizer mx_optimizer;

/* The registered optimizer names, in table order (NULL past the end). */
const char *mx_optimizer_name_at(int i);
/* Fills out with the defaults of optimizer `name`. */
mx_status mx_optimizer_defaults(const char *name, mx_optimizer_params *out);
/* Creates optimizer `name` (MX_ERR_INVALID "unknown optimizer 'adma' (did
 * you mean 'adam'?)", out-of-range parameters). */
mx_status mx_optimizer_create(mx_runtime *rt, const char *name, const mx_optimizer_params *params,
                              mx_optimizer **out);
mx_status mx_optimizer_create_kv(mx_runtime *rt, const char *name, const char *const *keys,
                                 const char *const *values, int n, mx_optimizer **out);
/* Frees the optimizer, its states and its schedule. Updates already pushed
 * still complete (they hold their own references). */
void mx_optimizer_free(mx_optimizer *opt);

const char *mx_optimizer_name(const mx_optimizer *opt);
const mx_optimizer_params *mx_optimizer_get_params(const mx_optimizer *opt);
/* Sets rescale_grad for the updates pushed from now on (those pushed
 * before keep theirs): dynamic loss scaling divides it by each step's
 * scale. MX_ERR_INVALID: not positive and finite. */
mx_status mx_optimizer_set_rescale_grad(mx_optimizer *opt, double rescale);
/* The parameter table of optimizer `name` (for --help output). */
mx_status mx_optimizer_param_table(const char *name, const mx_param_desc **table, int *n);

/* Per-parameter settings by index (MXNet's param_idx2name, lr_mult,
 * wd_mult). Indices are >= 0 and below 2^20. */
mx_status mx_optimizer_set_param_name(mx_optimizer *opt, int index, const char *name);
mx_status mx_optimizer_set_lr_mult(mx_optimizer *opt, int index, double mult);
mx_status mx_optimizer_set_wd_mult(mx_optimizer *opt, int index, double mult);
/* The multipliers in effect for index. */
double mx_optimizer_lr_mult(const mx_optimizer *opt, int index);
double mx_optimizer_wd_mult(const mx_optimizer *opt, int index);

/* Attaches a schedule (ownership passes to the optimizer, also on error;
 * NULL detaches). As MXNet's Optimizer, the schedule then starts from the
 * optimizer's learning_rate (mx_lr_scheduler_set_base_lr). */
mx_status mx_optimizer_set_lr_scheduler(mx_optimizer *opt, mx_lr_scheduler *sched);
mx_lr_scheduler *mx_optimizer_lr_scheduler(mx_optimizer *opt);
/* Changes learning_rate; MX_ERR_INVALID while a schedule is attached
 * (MXNet's set_learning_rate). */
mx_status mx_optimizer_set_learning_rate(mx_optimizer *opt, double lr);
/* The current rate: the schedule at num_update, or learning_rate. */
double mx_optimizer_learning_rate(mx_optimizer *opt);
int64_t mx_optimizer_num_update(const mx_optimizer *opt);
/* Updates counted for index so far (0 before its first update). */
int64_t mx_optimizer_update_count(const mx_optimizer *opt, int index);

/* Counts one update of parameter `index` and pushes it: reads grad,
 * writes weight and the index's states (created as zeros on the first
 * update, with weight's shape and dtype). Returns at once; an error inside
 * the kernel surfaces at the next wait on weight. Errors: MX_ERR_INVALID
 * (shapes or dtypes differ, weight and grad share storage, a restored
 * state does not match the weight), MX_ERR_UNSUPPORTED (GPU arrays,
 * dtypes other than float32/float64). */
mx_status mx_optimizer_update(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad);
/* mx_optimizer_update run on the calling thread, which returns with the
 * weight and states written: no engine op, so no hand-off to a worker that
 * may be busy with a long layer. For host arrays that the caller owns,
 * their earlier engine work waited for (dist_async's server thread, beside
 * rank 0's training). The same kernel on one thread, so the same bits.
 * MX_ERR_UNSUPPORTED for GPU arrays; otherwise as mx_optimizer_update. */
mx_status mx_optimizer_update_now(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad);
/* mx_optimizer_update of n parameters in list order. When every weight is
 * on one GPU they are one engine operation whose kernels go back to back
 * on its stream (one dependency wait and one hand-off per step instead of
 * one per parameter; the same kernels, so the same bits); otherwise one
 * operation each. */
mx_status mx_optimizer_update_many(mx_optimizer *opt, int n, const int *index, mx_ndarray *const *weights,
                                   mx_ndarray *const *grads);

/* The state arrays of index (count set to 0..3; NULL entries before the
 * first update). Borrowed references, live: reads must go through the
 * engine (mx_ndarray_to_host waits). */
int mx_optimizer_states(const mx_optimizer *opt, int index, mx_ndarray **states, const char **names);

/* ================================================================ config */

/* A config's [optimizer] section, parsed once by the tables of the chosen
 * optimizer and schedule: `type` picks the optimizer (default sgd),
 * `lr_scheduler` the schedule (default none: a constant rate); every other
 * key belongs to one of their tables ("lr" is learning_rate), and a key of
 * another optimizer or schedule is an error that says which have it. */
typedef struct mx_optimizer_spec {
    const char *name;              /* the optimizer's registry name */
    mx_optimizer_params params;    /* as its table parsed them */
    bool rescale_grad_given;       /* else 1 / samples per update, as MXNet's Module */
    const char *lr_scheduler;      /* the schedule's name; NULL: none */
    mx_lr_epoch_keys schedule;     /* as the schedule's table parsed them */
    int64_t step_epochs[MX_LR_MAX_STEPS]; /* lr_step_epochs as numbers */
    int n_step_epochs;
} mx_optimizer_spec;

/* Parses a section (messages located by the input when it is). */
mx_status mx_optimizer_spec_parse(const mx_param_input *in, mx_optimizer_spec *out);

/* What the run knows when it creates the optimizer. */
typedef struct mx_optimizer_run {
    int64_t samples_per_update; /* the default rescale_grad is its inverse */
    int64_t updates_per_epoch;  /* epochs of the schedule -> update counts */
    int64_t num_epoch;          /* cosine, poly: the end of the decay */
} mx_optimizer_run;

/* The optimizer of a spec, with its schedule attached. */
mx_status mx_optimizer_create_spec(mx_runtime *rt, const mx_optimizer_spec *spec, const mx_optimizer_run *run,
                                   mx_optimizer **out);

/* Saving and restoring: everything needed to continue exactly (state
 * arrays, update counts, the schedule's position) as a named list of CPU
 * arrays, for mx_ndarray_save / mx_ndarray_load:
 *   "optimizer:<name>"   int64 (3): format version 1, num_update, begin_num_update
 *   "counts"             int64 (k, 2): index, update count (absent if k = 0)
 *   "lr_scheduler:<kind>" float64 (3): base_lr, count, cur_step_ind (if attached)
 *   "<index>:<state>"    each state array ("mom", "mean", "var", "n", "g",
 *                        "delta", "history"), a snapshot taken through the
 *                        engine after the updates pushed so far.
 * The list belongs to the caller (mx_ndarray_list_free). The format is
 * ours, not MXNet's pickled .states; it round-trips exactly. */
mx_status mx_optimizer_get_states(mx_optimizer *opt, mx_ndarray_list *out);
/* The same list with the live state arrays (retained, on the optimizer's
 * device) instead of copies: no second copy of the state in memory, which
 * for SGD with momentum is one more copy of the weights (VGG-16: 528 MiB).
 * Reading it gives the state after the updates pushed so far only while no
 * further update is pushed (a checkpoint save under the updater lock). */
mx_status mx_optimizer_view_states(mx_optimizer *opt, mx_ndarray_list *out);
/* Restores a list made by mx_optimizer_get_states (arrays are copied).
 * MX_ERR_FORMAT when the list is not optimizer state or was saved by
 * another optimizer, state kind or schedule ("states were saved by 'sgd',
 * this optimizer is 'adam'"). Restored states are checked against the
 * weight at the next update. */
mx_status mx_optimizer_set_states(mx_optimizer *opt, const mx_ndarray_list *states);

#endif /* MX_OPTIMIZER_H */
