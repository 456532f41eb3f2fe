/*
 * lr_scheduler.c - MXNet 1.9.1's learning-rate schedules (lr_scheduler.py),
 * one registry row each: factor, multifactor, poly, cosine, all with an
 * optional linear or constant warm-up over the first warmup_steps updates:
 *   warm-up   linear: warmup_begin_lr + (base_lr - warmup_begin_lr) * u / warmup_steps
 *             constant: warmup_begin_lr            (for u < warmup_steps)
 *   factor    while u > count + step: count += step, lr *= factor
 *             (never below stop_factor_lr)
 *   multifactor  lr *= factor each time u passes the next step[i]
 *   poly      final_lr + (base_lr - final_lr) * (1 - (u - W)/(max_update - W))^pwr
 *   cosine    final_lr + (base_lr - final_lr) * (1 + cos(pi * (u - W)/(max_update - W))) / 2
 *             (W = warmup_steps; past max_update the last rate stays)
 * Factor and multifactor keep state (the current rate, count, next step),
 * which the optimizer saves with its own states.
 */
#include "optimizer/optimizer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct sched_kind sched_kind;

struct mx_lr_scheduler {
    const sched_kind *kind;
    mx_lr_scheduler_params p;
    /* MXNet's mutable attributes. */
    double base_lr;         /* self.base_lr: the current rate after warm-up */
    double warmup_final_lr; /* the warm-up target */
    double base_lr_orig;    /* poly, cosine: where the decay starts */
    int64_t count;          /* factor, multifactor */
    int64_t cur_step_ind;   /* multifactor */
};

struct sched_kind {
    const char *name;
    const char *alias; /* MXNet's class name, lower case */
    const mx_param_desc *params;
    int n_params;
    const mx_param_desc *epoch_keys; /* the config's keys, in epochs */
    int n_epoch_keys;
    mx_status (*check)(const mx_lr_scheduler_params *p);
    double (*lr)(mx_lr_scheduler *s, int64_t num_update);
};

/* What the string form parses into: the typed struct plus the "step" list
 * of multifactor as a tuple. */
typedef struct sched_kv {
    mx_lr_scheduler_params p;
    mx_tuple step_list;
} sched_kv;

static const char *const warmup_modes[] = {"linear", "constant", NULL};

#define SCHED_COMMON_PARAMS                                                                               \
    {"base_lr", MX_PARAM_FLOAT, "0.01", 0, 1e30, NULL, offsetof(sched_kv, p.base_lr),                     \
     "the rate after warm-up"},                                                                           \
    {"warmup_steps", MX_PARAM_INT, "0", 0, 1e15, NULL, offsetof(sched_kv, p.warmup_steps),                \
     "updates of warm-up before the schedule starts"},                                                    \
    {"warmup_begin_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, offsetof(sched_kv, p.warmup_begin_lr),        \
     "the rate warm-up starts from"},                                                                     \
    {"warmup_mode", MX_PARAM_ENUM, "linear", 1, 0, warmup_modes, offsetof(sched_kv, p.warmup_mode),       \
     "linear: equal increments; constant: warmup_begin_lr throughout"}

static const mx_param_desc factor_params[] = {
    {"step", MX_PARAM_INT, NULL, 1, 1e15, NULL, offsetof(sched_kv, p.step), "updates between reductions"},
    {"factor", MX_PARAM_FLOAT, "1", 0, 1, NULL, offsetof(sched_kv, p.factor), "multiplier at each step"},
    {"stop_factor_lr", MX_PARAM_FLOAT, "1e-8", 0, 1e30, NULL, offsetof(sched_kv, p.stop_factor_lr),
     "the rate never goes below this"},
    SCHED_COMMON_PARAMS,
};

static const mx_param_desc multifactor_params[] = {
    {"step", MX_PARAM_TUPLE, NULL, 1, 1e15, NULL, offsetof(sched_kv, step_list),
     "increasing update counts at which the rate is reduced, e.g. [3000, 6000]"},
    {"factor", MX_PARAM_FLOAT, "1", 0, 1, NULL, offsetof(sched_kv, p.factor), "multiplier at each step"},
    SCHED_COMMON_PARAMS,
};

static const mx_param_desc poly_params[] = {
    {"max_update", MX_PARAM_INT, NULL, 1, 1e15, NULL, offsetof(sched_kv, p.max_update),
     "updates until the rate reaches final_lr"},
    {"pwr", MX_PARAM_FLOAT, "2", 0, 1e30, NULL, offsetof(sched_kv, p.pwr), "power of the decay"},
    {"final_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, offsetof(sched_kv, p.final_lr), "the last rate"},
    SCHED_COMMON_PARAMS,
};

static const mx_param_desc cosine_params[] = {
    {"max_update", MX_PARAM_INT, NULL, 1, 1e15, NULL, offsetof(sched_kv, p.max_update),
     "updates until the rate reaches final_lr"},
    {"final_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, offsetof(sched_kv, p.final_lr), "the last rate"},
    SCHED_COMMON_PARAMS,
};

/* The [optimizer] keys of each schedule, in epochs (mx_lr_epoch_keys). */
#define EK(f) offsetof(mx_lr_epoch_keys, f)
#define EPOCH_COMMON_KEYS                                                                                 \
    {"warmup_epochs", MX_PARAM_FLOAT, "0", 0, 1e9, NULL, EK(warmup_epochs),                               \
     "epochs of warm-up (fractions allowed) before the schedule starts"},                                 \
    {"warmup_begin_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, EK(warmup_begin_lr),                          \
     "the rate warm-up starts from (at most lr)"},                                                        \
    {"warmup_mode", MX_PARAM_ENUM, "linear", 1, 0, warmup_modes, EK(warmup_mode),                         \
     "linear: equal increments; constant: warmup_begin_lr throughout"}
#define EPOCH_STEP_KEYS                                                                                   \
    {"lr_factor", MX_PARAM_FLOAT, "0.1", 0, 1, NULL, EK(lr_factor), "multiplier at each step"},           \
    {"lr_step_epochs", MX_PARAM_STRING, NULL, 1, 0, NULL, EK(lr_step_epochs),                             \
     "epochs at which the rate is multiplied by lr_factor (factor: one period)"}

static const mx_param_desc factor_epoch_keys[] = {
    EPOCH_STEP_KEYS,
    {"stop_factor_lr", MX_PARAM_FLOAT, "1e-8", 0, 1e30, NULL, EK(stop_factor_lr), "the rate never goes below this"},
    EPOCH_COMMON_KEYS,
};
static const mx_param_desc multifactor_epoch_keys[] = {EPOCH_STEP_KEYS, EPOCH_COMMON_KEYS};
static const mx_param_desc poly_epoch_keys[] = {
    {"final_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, EK(final_lr), "the rate at the last epoch (at most lr)"},
    {"pwr", MX_PARAM_FLOAT, "2", 0, 1e30, NULL, EK(pwr), "power of the decay"},
    EPOCH_COMMON_KEYS,
};
static const mx_param_desc cosine_epoch_keys[] = {
    {"final_lr", MX_PARAM_FLOAT, "0", 0, 1e30, NULL, EK(final_lr), "the rate at the last epoch (at most lr)"},
    EPOCH_COMMON_KEYS,
};
#undef EK

/* ---------------------------------------------------------------- rates */

static double warmup_lr(const mx_lr_scheduler *s, int64_t u)
{
    if (s->p.warmup_mode == MX_WARMUP_CONSTANT) return s->p.warmup_begin_lr;
    double increase = (s->warmup_final_lr - s->p.warmup_begin_lr) * (double)u / (double)s->p.warmup_steps;
    return s->p.warmup_begin_lr + increase;
}

static double factor_lr(mx_lr_scheduler *s, int64_t u)
{
    if (u < s->p.warmup_steps) return warmup_lr(s, u);
    while (u > s->count + s->p.step) {
        s->count += s->p.step;
        s->base_lr *= s->p.factor;
        if (s->base_lr < s->p.stop_factor_lr) s->base_lr = s->p.stop_factor_lr;
    }
    return s->base_lr;
}

static double multifactor_lr(mx_lr_scheduler *s, int64_t u)
{
    if (u < s->p.warmup_steps) return warmup_lr(s, u);
    while (s->cur_step_ind < s->p.n_steps) {
        if (u <= s->p.steps[s->cur_step_ind]) break;
        s->count = s->p.steps[s->cur_step_ind];
        s->cur_step_ind++;
        s->base_lr *= s->p.factor;
    }
    return s->base_lr;
}

static double poly_lr(mx_lr_scheduler *s, int64_t u)
{
    if (u < s->p.warmup_steps) return warmup_lr(s, u);
    if (u <= s->p.max_update) {
        double max_steps = (double)(s->p.max_update - s->p.warmup_steps);
        s->base_lr = s->p.final_lr +
                     (s->base_lr_orig - s->p.final_lr) * pow(1.0 - (double)(u - s->p.warmup_steps) / max_steps, s->p.pwr);
    }
    return s->base_lr;
}

static double cosine_lr(mx_lr_scheduler *s, int64_t u)
{
    if (u < s->p.warmup_steps) return warmup_lr(s, u);
    if (u <= s->p.max_update) {
        double max_steps = (double)(s->p.max_update - s->p.warmup_steps);
        s->base_lr = s->p.final_lr +
                     (s->base_lr_orig - s->p.final_lr) * (1.0 + cos(M_PI * (double)(u - s->p.warmup_steps) / max_steps)) / 2.0;
    }
    return s->base_lr;
}

/* ---------------------------------------------------------------- checks */

static mx_status check_steps(const mx_lr_scheduler_params *p)
{
    if (p->n_steps < 1 || p->n_steps > MX_LR_MAX_STEPS)
        return MX_ERROR(MX_ERR_INVALID, "multifactor: parameter 'step' needs 1 to %d update counts, got %d",
                        MX_LR_MAX_STEPS, p->n_steps);
    for (int i = 0; i < p->n_steps; i++) {
        if (p->steps[i] < 1)
            return MX_ERROR(MX_ERR_INVALID, "multifactor: step %lld must be at least 1 update", (long long)p->steps[i]);
        if (i && p->steps[i] <= p->steps[i - 1])
            return MX_ERROR(MX_ERR_INVALID, "multifactor: steps must increase (%lld after %lld)",
                            (long long)p->steps[i], (long long)p->steps[i - 1]);
    }
    return MX_OK;
}

static mx_status check_decay(const mx_lr_scheduler_params *p)
{
    if (p->max_update <= p->warmup_steps)
        return MX_ERROR(MX_ERR_INVALID, "parameter 'max_update' (%lld) must exceed warmup_steps (%lld)",
                        (long long)p->max_update, (long long)p->warmup_steps);
    return MX_OK;
}

/* ---------------------------------------------------------------- registry */

#define N_ROWS(t) ((int)(sizeof(t) / sizeof((t)[0])))

static const sched_kind kinds[] = {
    {"factor", "factorscheduler", factor_params, N_ROWS(factor_params), factor_epoch_keys, N_ROWS(factor_epoch_keys),
     NULL, factor_lr},
    {"multifactor", "multifactorscheduler", multifactor_params, N_ROWS(multifactor_params), multifactor_epoch_keys,
     N_ROWS(multifactor_epoch_keys), check_steps, multifactor_lr},
    {"poly", "polyscheduler", poly_params, N_ROWS(poly_params), poly_epoch_keys, N_ROWS(poly_epoch_keys),
     check_decay, poly_lr},
    {"cosine", "cosinescheduler", cosine_params, N_ROWS(cosine_params), cosine_epoch_keys, N_ROWS(cosine_epoch_keys),
     check_decay, cosine_lr},
};
#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

static mx_status find_kind(const char *name, const sched_kind **out)
{
    *out = NULL;
    if (!name) return MX_ERROR(MX_ERR_INVALID, "lr_scheduler: no schedule named");
    for (int i = 0; i < N_KINDS; i++)
        if (!strcasecmp(name, kinds[i].name) || !strcasecmp(name, kinds[i].alias)) {
            *out = &kinds[i];
            return MX_OK;
        }
    const char *names[N_KINDS];
    for (int i = 0; i < N_KINDS; i++) names[i] = kinds[i].name;
    const char *near = mx_suggest(name, names, N_KINDS);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown lr_scheduler '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown lr_scheduler '%s' (factor, multifactor, poly or cosine)", name);
}

const char *mx_lr_scheduler_name_at(int i)
{
    if (i == 0) return "none";
    return i >= 1 && i <= N_KINDS ? kinds[i - 1].name : NULL;
}

mx_status mx_lr_scheduler_epoch_table(const char *kind, const mx_param_desc **table, int *n)
{
    *table = NULL;
    *n = 0;
    if (kind && !strcmp(kind, "none")) return MX_OK;
    const sched_kind *k;
    MX_TRY(find_kind(kind, &k));
    *table = k->epoch_keys;
    *n = k->n_epoch_keys;
    return MX_OK;
}

mx_status mx_lr_scheduler_param_table(const char *kind, const mx_param_desc **table, int *n)
{
    const sched_kind *k;
    MX_TRY(find_kind(kind, &k));
    *table = k->params;
    *n = k->n_params;
    return MX_OK;
}

/* Range checks of the table, for the typed form (the string form gets
 * them from the parser). The multifactor list is checked by its kind. */
static mx_status check_ranges(const sched_kind *k, const mx_lr_scheduler_params *p)
{
    sched_kv kv = {.p = *p};
    for (int i = 0; i < k->n_params; i++) {
        const mx_param_desc *d = &k->params[i];
        if (d->min > d->max) continue;
        double v;
        if (d->type == MX_PARAM_FLOAT) v = *(const double *)((const char *)&kv + d->offset);
        else if (d->type == MX_PARAM_INT) v = (double)*(const int64_t *)((const char *)&kv + d->offset);
        else continue;
        if (!(v >= d->min && v <= d->max))
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value '%g': must be between %g and %g",
                            k->name, d->name, v, d->min, d->max);
    }
    if (p->warmup_mode != MX_WARMUP_LINEAR && p->warmup_mode != MX_WARMUP_CONSTANT)
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter 'warmup_mode' has bad value %d (linear or constant)", k->name,
                        p->warmup_mode);
    return MX_OK;
}

static mx_status check_all(const sched_kind *k, const mx_lr_scheduler_params *p)
{
    MX_TRY(check_ranges(k, p));
    if (p->warmup_begin_lr > p->base_lr)
        return MX_ERROR(MX_ERR_INVALID, "%s: warmup_begin_lr (%g) must not exceed base_lr (%g)", k->name,
                        p->warmup_begin_lr, p->base_lr);
    if (k->check) {
        mx_status s = k->check(p);
        if (s != MX_OK) return s;
    }
    return MX_OK;
}

mx_status mx_lr_scheduler_defaults(const char *kind, mx_lr_scheduler_params *out)
{
    const sched_kind *k;
    memset(out, 0, sizeof(*out));
    MX_TRY(find_kind(kind, &k));
    sched_kv kv;
    memset(&kv, 0, sizeof(kv));
    for (int i = 0; i < k->n_params; i++)
        if (k->params[i].default_value) MX_TRY(mx_params_parse_one(k->name, &k->params[i], k->params[i].default_value, &kv));
    *out = kv.p;
    return MX_OK;
}

mx_status mx_lr_scheduler_create(const char *kind, const mx_lr_scheduler_params *params, mx_lr_scheduler **out)
{
    *out = NULL;
    const sched_kind *k;
    MX_TRY(find_kind(kind, &k));
    MX_TRY(check_all(k, params));
    mx_lr_scheduler *s = mx_calloc(1, sizeof(*s));
    if (!s) return MX_ERR_NOMEM;
    s->kind = k;
    s->p = *params;
    s->base_lr = s->warmup_final_lr = s->base_lr_orig = params->base_lr;
    *out = s;
    return MX_OK;
}

mx_status mx_lr_scheduler_create_kv(const char *kind, const char *const *keys, const char *const *values, int n,
                                    mx_lr_scheduler **out)
{
    *out = NULL;
    const sched_kind *k;
    MX_TRY(find_kind(kind, &k));
    sched_kv kv;
    MX_TRY(mx_params_parse(k->name, k->params, k->n_params, sizeof(kv), keys, values, n, &kv));
    if (k->lr == multifactor_lr) {
        kv.p.n_steps = kv.step_list.ndim < 0 ? 0 : kv.step_list.ndim;
        for (int i = 0; i < kv.p.n_steps; i++) kv.p.steps[i] = kv.step_list.v[i];
    }
    return mx_lr_scheduler_create(k->name, &kv.p, out);
}

mx_status mx_lr_scheduler_create_epochs(const mx_lr_epoch_schedule *e, mx_lr_scheduler **out)
{
    *out = NULL;
    const sched_kind *k;
    MX_TRY(find_kind(e->kind, &k));
    if (e->updates_per_epoch < 1)
        return MX_ERROR(MX_ERR_INVALID, "lr_scheduler %s: updates per epoch must be at least 1, got %lld", k->name,
                        (long long)e->updates_per_epoch);
    const double B = (double)e->updates_per_epoch;
    mx_lr_scheduler_params p;
    MX_TRY(mx_lr_scheduler_defaults(k->name, &p));
    p.base_lr = e->base_lr;
    p.warmup_begin_lr = e->warmup_begin_lr;
    p.warmup_mode = e->warmup_mode;
    if (!(e->warmup_epochs >= 0) || e->warmup_epochs * B > 1e15)
        return MX_ERROR(MX_ERR_INVALID, "lr_scheduler %s: bad warmup_epochs %g", k->name, e->warmup_epochs);
    p.warmup_steps = (int64_t)floor(e->warmup_epochs * B);
    if (k->lr == factor_lr || k->lr == multifactor_lr) {
        p.factor = e->factor;
        if (e->n_step_epochs < 1 || e->n_step_epochs > MX_LR_MAX_STEPS)
            return MX_ERROR(MX_ERR_INVALID, "lr_scheduler %s: needs 1 to %d step epochs, got %d", k->name,
                            MX_LR_MAX_STEPS, e->n_step_epochs);
        if (k->lr == factor_lr && e->n_step_epochs != 1)
            return MX_ERROR(MX_ERR_INVALID, "lr_scheduler factor: takes one period in epochs, got %d",
                            e->n_step_epochs);
        for (int i = 0; i < e->n_step_epochs; i++) {
            if (e->step_epochs[i] < 1 || (double)e->step_epochs[i] * B > 1e15)
                return MX_ERROR(MX_ERR_INVALID, "lr_scheduler %s: bad step epoch %lld", k->name,
                                (long long)e->step_epochs[i]);
            p.steps[i] = e->step_epochs[i] * e->updates_per_epoch;
        }
        p.n_steps = e->n_step_epochs;
        if (k->lr == factor_lr) p.step = p.steps[0], p.n_steps = 0, p.stop_factor_lr = e->stop_factor_lr;
    } else {
        if (e->num_epoch < 1 || (double)e->num_epoch * B > 1e15)
            return MX_ERROR(MX_ERR_INVALID, "lr_scheduler %s: bad num_epoch %lld", k->name, (long long)e->num_epoch);
        p.max_update = e->num_epoch * e->updates_per_epoch;
        p.final_lr = e->final_lr;
        if (k->lr == poly_lr) p.pwr = e->pwr;
    }
    return mx_lr_scheduler_create(k->name, &p, out);
}

void mx_lr_scheduler_free(mx_lr_scheduler *s) { free(s); }

const char *mx_lr_scheduler_kind_name(const mx_lr_scheduler *s) { return s->kind->name; }

const mx_lr_scheduler_params *mx_lr_scheduler_get_params(const mx_lr_scheduler *s) { return &s->p; }

double mx_lr_scheduler_lr(mx_lr_scheduler *s, int64_t num_update) { return s->kind->lr(s, num_update); }

mx_status mx_lr_scheduler_set_base_lr(mx_lr_scheduler *s, double base_lr)
{
    if (!(base_lr >= 0) || base_lr < s->p.warmup_begin_lr)
        return MX_ERROR(MX_ERR_INVALID, "%s: base_lr %g must be at least warmup_begin_lr (%g)", s->kind->name,
                        base_lr, s->p.warmup_begin_lr);
    s->p.base_lr = s->base_lr = s->warmup_final_lr = s->base_lr_orig = base_lr;
    return MX_OK;
}

void mx_opt_sched_get_state(const mx_lr_scheduler *s, double state[3])
{
    state[0] = s->base_lr;
    state[1] = (double)s->count;
    state[2] = (double)s->cur_step_ind;
}

mx_status mx_opt_sched_set_state(mx_lr_scheduler *s, const double state[3])
{
    if (!isfinite(state[0]) || state[0] < 0 || !(state[1] >= 0 && state[1] <= 1e15) ||
        !(state[2] >= 0 && state[2] <= s->p.n_steps) || state[1] != floor(state[1]) || state[2] != floor(state[2]))
        return MX_ERROR(MX_ERR_FORMAT, "%s: saved schedule position (%g, %g, %g) is not valid here", s->kind->name,
                        state[0], state[1], state[2]);
    s->base_lr = state[0];
    s->count = (int64_t)state[1];
    s->cur_step_ind = (int64_t)state[2];
    return MX_OK;
}
