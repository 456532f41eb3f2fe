/*
 * optimizer.c - the optimizer registry and the front end shared by every
 * kind: parameter parsing, per-index names and multipliers, update counts,
 * the schedule, states, the engine operation of one update, and saving /
 * restoring states. The kinds (sgd.c, nag.c, adam.c, rmsprop.c, adagrad.c)
 * provide tables and kernels only.
 */
#include "optimizer/optimizer_internal.h"
#include "device/device.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The table of optimizers: adding one is a file and a line. */
static const opt_kind_def *const registry[] = {
    &mx_opt_sgd, &mx_opt_nag, &mx_opt_adam, &mx_opt_rmsprop, &mx_opt_adagrad,
};
#define N_KINDS ((int)(sizeof(registry) / sizeof(registry[0])))

#define MAX_INDEX (1 << 20)
#define STATES_VERSION 1

typedef struct opt_slot {
    char *name;          /* param_idx2name; NULL if never named */
    bool lr_set, wd_set; /* explicit multipliers */
    double lr_mult, wd_mult;
    bool counted;        /* count holds begin_num_update + updates */
    int64_t count;
    mx_ndarray *states[OPT_MAX_STATES];
} opt_slot;

struct mx_optimizer {
    mx_runtime *rt;
    const opt_kind_def *kind;
    mx_optimizer_params p;
    mx_lr_scheduler *sched;
    int64_t num_update;
    opt_slot *slots;
    int n_slots;
};

/* ---------------------------------------------------------------- registry */

const char *mx_optimizer_name_at(int i) { return i >= 0 && i < N_KINDS ? registry[i]->name : NULL; }

static mx_status find_kind(const char *name, const opt_kind_def **out)
{
    *out = NULL;
    if (!name) return MX_ERROR(MX_ERR_INVALID, "optimizer: no name given");
    for (int i = 0; i < N_KINDS; i++)
        if (!strcasecmp(name, registry[i]->name)) {
            *out = registry[i];
            return MX_OK;
        }
    const char *names[N_KINDS];
    for (int i = 0; i < N_KINDS; i++) names[i] = registry[i]->name;
    const char *near = mx_suggest(name, names, N_KINDS);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown optimizer '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown optimizer '%s' (sgd, nag, adam, rmsprop or adagrad)", name);
}

mx_status mx_optimizer_param_table(const char *name, const mx_param_desc **table, int *n)
{
    const opt_kind_def *k;
    MX_TRY(find_kind(name, &k));
    *table = k->params;
    *n = k->n_params;
    return MX_OK;
}

mx_status mx_optimizer_defaults(const char *name, mx_optimizer_params *out)
{
    memset(out, 0, sizeof(*out));
    const opt_kind_def *k;
    MX_TRY(find_kind(name, &k));
    return mx_params_parse(k->name, k->params, k->n_params, sizeof(*out), NULL, NULL, 0, out);
}

/* The table's ranges, for the typed form. */
static mx_status check_params(const opt_kind_def *k, const mx_optimizer_params *p)
{
    for (int i = 0; i < k->n_params; i++) {
        const mx_param_desc *d = &k->params[i];
        if (d->min > d->max) continue;
        double v;
        if (d->type == MX_PARAM_FLOAT) v = *(const double *)((const char *)p + d->offset);
        else if (d->type == MX_PARAM_INT) v = (double)*(const int64_t *)((const char *)p + d->offset);
        else continue;
        if (!(v >= d->min && v <= d->max))
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value '%g': must be between %g and %g",
                            k->name, d->name, v, d->min, d->max);
    }
    return k->check ? k->check(p) : MX_OK;
}

mx_status mx_optimizer_check(const char *name, const mx_optimizer_params *params)
{
    const opt_kind_def *k;
    MX_TRY(find_kind(name, &k));
    return check_params(k, params);
}

mx_status mx_optimizer_create(mx_runtime *rt, const char *name, const mx_optimizer_params *params, mx_optimizer **out)
{
    *out = NULL;
    if (!rt) return MX_ERROR(MX_ERR_INVALID, "optimizer: runtime is NULL");
    const opt_kind_def *k;
    MX_TRY(find_kind(name, &k));
    MX_TRY(check_params(k, params));
    mx_optimizer *opt = mx_calloc(1, sizeof(*opt));
    if (!opt) return MX_ERR_NOMEM;
    opt->rt = rt;
    opt->kind = k;
    opt->p = *params;
    opt->num_update = params->begin_num_update;
    *out = opt;
    return MX_OK;
}

mx_status mx_optimizer_create_kv(mx_runtime *rt, const char *name, const char *const *keys,
                                 const char *const *values, int n, mx_optimizer **out)
{
    *out = NULL;
    const opt_kind_def *k;
    MX_TRY(find_kind(name, &k));
    if (n < 0 || (n > 0 && (!keys || !values))) return MX_ERROR(MX_ERR_INVALID, "%s: bad key/value list", k->name);
    /* "lr" is the config's name for MXNet's learning_rate. */
    const char **renamed = mx_malloc(sizeof(*renamed) * (size_t)(n ? n : 1));
    if (!renamed) return MX_ERR_NOMEM;
    for (int i = 0; i < n; i++) renamed[i] = !strcmp(keys[i], "lr") ? "learning_rate" : keys[i];
    mx_optimizer_params p;
    mx_status s = mx_params_parse(k->name, k->params, k->n_params, sizeof(p), renamed, values, n, &p);
    free(renamed);
    MX_TRY(s);
    return mx_optimizer_create(rt, k->name, &p, out);
}

static void slot_clear_states(opt_slot *slot)
{
    for (int j = 0; j < OPT_MAX_STATES; j++) {
        mx_ndarray_free(slot->states[j]);
        slot->states[j] = NULL;
    }
}

void mx_optimizer_free(mx_optimizer *opt)
{
    if (!opt) return;
    for (int i = 0; i < opt->n_slots; i++) {
        free(opt->slots[i].name);
        slot_clear_states(&opt->slots[i]);
    }
    free(opt->slots);
    mx_lr_scheduler_free(opt->sched);
    free(opt);
}

const char *mx_optimizer_name(const mx_optimizer *opt) { return opt->kind->name; }
const mx_optimizer_params *mx_optimizer_get_params(const mx_optimizer *opt) { return &opt->p; }

/* ---------------------------------------------------------------- per index */

static mx_status check_index(const mx_optimizer *opt, int index)
{
    if (index < 0 || index >= MAX_INDEX)
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter index %d out of range (0 to %d)", opt->kind->name, index,
                        MAX_INDEX - 1);
    return MX_OK;
}

/* The slot of index, grown on demand. */
static mx_status get_slot(mx_optimizer *opt, int index, opt_slot **out)
{
    MX_TRY(check_index(opt, index));
    if (index >= opt->n_slots) {
        int n = opt->n_slots ? opt->n_slots : 16;
        while (n <= index) n *= 2;
        opt_slot *grown = mx_realloc(opt->slots, sizeof(*grown) * (size_t)n);
        if (!grown) return MX_ERR_NOMEM;
        memset(grown + opt->n_slots, 0, sizeof(*grown) * (size_t)(n - opt->n_slots));
        opt->slots = grown;
        opt->n_slots = n;
    }
    *out = &opt->slots[index];
    return MX_OK;
}

static const opt_slot *peek_slot(const mx_optimizer *opt, int index)
{
    return index >= 0 && index < opt->n_slots ? &opt->slots[index] : NULL;
}

mx_status mx_optimizer_set_param_name(mx_optimizer *opt, int index, const char *name)
{
    if (!name) return MX_ERROR(MX_ERR_INVALID, "%s: parameter name is NULL", opt->kind->name);
    opt_slot *slot;
    MX_TRY(get_slot(opt, index, &slot));
    char *copy = mx_strdup(name);
    if (!copy) return MX_ERR_NOMEM;
    free(slot->name);
    slot->name = copy;
    return MX_OK;
}

static mx_status set_mult(mx_optimizer *opt, int index, double mult, bool wd)
{
    if (!(mult >= 0 && mult < 1e30))
        return MX_ERROR(MX_ERR_INVALID, "%s: %s of parameter %d must be a non-negative number, got %g", opt->kind->name,
                        wd ? "wd_mult" : "lr_mult", index, mult);
    opt_slot *slot;
    MX_TRY(get_slot(opt, index, &slot));
    if (wd) slot->wd_set = true, slot->wd_mult = mult;
    else slot->lr_set = true, slot->lr_mult = mult;
    return MX_OK;
}

mx_status mx_optimizer_set_lr_mult(mx_optimizer *opt, int index, double mult) { return set_mult(opt, index, mult, false); }
mx_status mx_optimizer_set_wd_mult(mx_optimizer *opt, int index, double mult) { return set_mult(opt, index, mult, true); }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

double mx_optimizer_lr_mult(const mx_optimizer *opt, int index)
{
    const opt_slot *slot = peek_slot(opt, index);
    return slot && slot->lr_set ? slot->lr_mult : 1.0;
}

/* MXNet's set_wd_mult: named parameters that are not weights or gammas
 * get no weight decay unless told otherwise. */
double mx_optimizer_wd_mult(const mx_optimizer *opt, int index)
{
    const opt_slot *slot = peek_slot(opt, index);
    if (!slot) return 1.0;
    if (slot->wd_set) return slot->wd_mult;
    if (slot->name && !(ends_with(slot->name, "_weight") || ends_with(slot->name, "_gamma"))) return 0.0;
    return 1.0;
}

/* ---------------------------------------------------------------- schedule */

mx_status mx_optimizer_set_lr_scheduler(mx_optimizer *opt, mx_lr_scheduler *sched)
{
    if (sched) {
        mx_status s = mx_lr_scheduler_set_base_lr(sched, opt->p.learning_rate);
        if (s != MX_OK) {
            mx_lr_scheduler_free(sched);
            return s;
        }
    }
    mx_lr_scheduler_free(opt->sched);
    opt->sched = sched;
    return MX_OK;
}

mx_lr_scheduler *mx_optimizer_lr_scheduler(mx_optimizer *opt) { return opt->sched; }

mx_status mx_optimizer_set_learning_rate(mx_optimizer *opt, double lr)
{
    if (opt->sched)
        return MX_ERROR(MX_ERR_INVALID, "%s: the learning rate follows the attached lr_scheduler; "
                                        "it cannot be set directly", opt->kind->name);
    if (!(lr >= 0 && lr < 1e30))
        return MX_ERROR(MX_ERR_INVALID, "%s: bad learning rate %g", opt->kind->name, lr);
    opt->p.learning_rate = lr;
    return MX_OK;
}

mx_status mx_optimizer_set_rescale_grad(mx_optimizer *opt, double rescale)
{
    if (!(rescale > 0 && rescale < 1e300))
        return MX_ERROR(MX_ERR_INVALID, "%s: bad rescale_grad %g", opt->kind->name, rescale);
    opt->p.rescale_grad = rescale;
    return MX_OK;
}

double mx_optimizer_learning_rate(mx_optimizer *opt)
{
    return opt->sched ? mx_lr_scheduler_lr(opt->sched, opt->num_update) : opt->p.learning_rate;
}

int64_t mx_optimizer_num_update(const mx_optimizer *opt) { return opt->num_update; }

int64_t mx_optimizer_update_count(const mx_optimizer *opt, int index)
{
    const opt_slot *slot = peek_slot(opt, index);
    return slot && slot->counted ? slot->count - opt->p.begin_num_update : 0;
}

int mx_optimizer_states(const mx_optimizer *opt, int index, mx_ndarray **states, const char **names)
{
    const opt_slot *slot = peek_slot(opt, index);
    int n = opt->kind->num_states(&opt->p);
    for (int j = 0; j < n; j++) {
        if (states) states[j] = slot ? slot->states[j] : NULL;
        if (names) names[j] = opt->kind->state_names[j];
    }
    return n;
}

/* ---------------------------------------------------------------- update */

/* One parameter's update, its scalars fixed at push time. */
typedef struct upd_item {
    opt_step step;
    mx_ndarray *weight, *grad; /* retained */
    mx_ndarray *states[OPT_MAX_STATES];
} upd_item;

/* One engine operation: one item, or (mx_optimizer_update_many on one
 * GPU) every item of a step, its kernels queued back to back. */
typedef struct upd_op {
    const opt_kind_def *kind;
    int n_states;
    int n_items;
    char label[64]; /* for the timeline: "sgd update of key 4" */
    upd_item items[];
} upd_op;

static void upd_free(void *payload)
{
    upd_op *op = payload;
    for (int i = 0; i < op->n_items; i++) {
        mx_ndarray_free(op->items[i].weight);
        mx_ndarray_free(op->items[i].grad);
        for (int j = 0; j < op->n_states; j++) mx_ndarray_free(op->items[i].states[j]);
    }
    free(op);
}

/* Elements [lo, hi) of a one-item update: every kernel is element-wise,
 * so any split gives the same bits. */
static void upd_range(void *payload, int64_t lo, int64_t hi, int worker)
{
    (void)worker;
    upd_op *op = payload;
    const upd_item *it = &op->items[0];
    if (mx_ndarray_dtype(it->weight) == MX_FLOAT32) {
        float *st[OPT_MAX_STATES] = {NULL};
        for (int j = 0; j < op->n_states; j++) st[j] = (float *)mx_ndarray_data(it->states[j]) + lo;
        op->kind->run_f32(&it->step, (float *)mx_ndarray_data(it->weight) + lo,
                          (const float *)mx_ndarray_data(it->grad) + lo, st, hi - lo);
    } else {
        double *st[OPT_MAX_STATES] = {NULL};
        for (int j = 0; j < op->n_states; j++) st[j] = (double *)mx_ndarray_data(it->states[j]) + lo;
        op->kind->run_f64(&it->step, (double *)mx_ndarray_data(it->weight) + lo,
                          (const double *)mx_ndarray_data(it->grad) + lo, st, hi - lo);
    }
}

/* Updates shorter than this run on the engine worker alone. */
#define UPD_PARALLEL_MIN 32768

static mx_status upd_run(void *payload, const mx_exec_ctx *exec)
{
    upd_op *op = payload;
    if (exec->ctx.dev_type == MX_DEV_GPU) {
        for (int i = 0; i < op->n_items; i++) {
            const upd_item *it = &op->items[i];
            float *st[OPT_MAX_STATES] = {NULL};
            for (int j = 0; j < op->n_states; j++) st[j] = mx_ndarray_data(it->states[j]);
            MX_TRY(op->kind->run_gpu(&it->step, mx_ndarray_data(it->weight), mx_ndarray_data(it->grad), st,
                                     mx_ndarray_size(it->weight), exec->stream));
        }
        return mx_device_op_done(exec); /* queued on the worker's stream */
    }
    int64_t n = mx_ndarray_size(op->items[0].weight);
    mx_threadpool *pool = n >= UPD_PARALLEL_MIN ? exec->pool : NULL;
    mx_parallel_for(pool, n, mx_parallel_grain(pool, n, 2, 4096), upd_range, op);
    return MX_OK;
}

static mx_status check_array(const mx_optimizer *opt, const char *what, mx_ndarray *a)
{
    char c[32];
    if (!a) return MX_ERROR(MX_ERR_INVALID, "%s: %s is NULL", opt->kind->name, what);
    if (mx_ndarray_runtime(a) != opt->rt)
        return MX_ERROR(MX_ERR_INVALID, "%s: %s belongs to another runtime", opt->kind->name, what);
    mx_context ctx = mx_ndarray_context(a);
    mx_dtype t = mx_ndarray_dtype(a);
    if (ctx.dev_type == MX_DEV_GPU && !opt->kind->run_gpu)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: no update kernel for arrays on %s in this build (%s)",
                        opt->kind->name, mx_context_str(ctx, c, sizeof(c)), what);
    if (ctx.dev_type == MX_DEV_GPU && t != MX_FLOAT32)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s on %s has dtype %s (float32 only on GPUs)", opt->kind->name,
                        what, mx_context_str(ctx, c, sizeof(c)), mx_dtype_name(t));
    if (t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: %s has dtype %s (float32 or float64 only)", opt->kind->name, what,
                        mx_dtype_name(t));
    return MX_OK;
}

/* Whether two arrays' bytes overlap. */
static bool overlaps(mx_ndarray *a, mx_ndarray *b)
{
    if (mx_ndarray_var(a) != mx_ndarray_var(b)) return false;
    const char *pa = mx_ndarray_data(a), *pb = mx_ndarray_data(b);
    return pa < pb + mx_ndarray_nbytes(b) && pb < pa + mx_ndarray_nbytes(a);
}

/* A zero-filled array like w. */
static mx_status new_zeros(mx_ndarray *w, mx_ndarray **out)
{
    MX_TRY(mx_ndarray_create(mx_ndarray_runtime(w), *mx_ndarray_shape(w), mx_ndarray_dtype(w),
                             mx_ndarray_context(w), out));
    mx_status s = mx_nd_fill(*out, 0.0);
    if (s != MX_OK) {
        mx_ndarray_free(*out);
        *out = NULL;
    }
    return s;
}

/* Makes the states of slot fit weight: creates them, or checks restored
 * ones and moves them to the weight's dtype and context. */
static mx_status prepare_states(mx_optimizer *opt, int index, opt_slot *slot, mx_ndarray *weight, int n_states)
{
    char bs[160], bw[160];
    for (int j = 0; j < n_states; j++) {
        mx_ndarray *st = slot->states[j];
        if (!st) {
            mx_status s = new_zeros(weight, &slot->states[j]);
            if (s != MX_OK)
                return slot->name ? mx_error_prefix(s, "%s: state '%s' of '%s'", opt->kind->name,
                                                    opt->kind->state_names[j], slot->name)
                                  : mx_error_prefix(s, "%s: state '%s' of parameter %d", opt->kind->name,
                                                    opt->kind->state_names[j], index);
            continue;
        }
        if (!mx_shape_equal(mx_ndarray_shape(st), mx_ndarray_shape(weight)))
            return MX_ERROR(MX_ERR_INVALID, "%s: restored state '%s' of parameter %d has shape %s, the weight %s",
                            opt->kind->name, opt->kind->state_names[j], index,
                            mx_shape_str(mx_ndarray_shape(st), bs, sizeof(bs)),
                            mx_shape_str(mx_ndarray_shape(weight), bw, sizeof(bw)));
        if (mx_ndarray_dtype(st) != mx_ndarray_dtype(weight) ||
            !mx_context_equal(mx_ndarray_context(st), mx_ndarray_context(weight))) {
            mx_ndarray *moved;
            MX_TRY(mx_ndarray_create(opt->rt, *mx_ndarray_shape(weight), mx_ndarray_dtype(weight),
                                     mx_ndarray_context(weight), &moved));
            mx_status s = mx_nd_copy(moved, st);
            if (s != MX_OK) {
                mx_ndarray_free(moved);
                return s;
            }
            mx_ndarray_free(st);
            slot->states[j] = moved;
        }
    }
    return MX_OK;
}

/* Checks one parameter's arrays, makes its states, counts the update and
 * fixes its scalars in *it (references taken). */
static mx_status upd_prepare(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad, upd_item *it)
{
    char bw[160], bg[160];
    MX_TRY(check_index(opt, index));
    MX_TRY(check_array(opt, "weight", weight));
    MX_TRY(check_array(opt, "gradient", grad));
    if (!mx_context_equal(mx_ndarray_context(weight), mx_ndarray_context(grad)))
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter %d: weight on %s, gradient on %s (copy it over first)",
                        opt->kind->name, index, mx_context_str(mx_ndarray_context(weight), bw, sizeof(bw)),
                        mx_context_str(mx_ndarray_context(grad), bg, sizeof(bg)));
    if (!mx_shape_equal(mx_ndarray_shape(weight), mx_ndarray_shape(grad)))
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter %d: weight shape %s and gradient shape %s differ",
                        opt->kind->name, index, mx_shape_str(mx_ndarray_shape(weight), bw, sizeof(bw)),
                        mx_shape_str(mx_ndarray_shape(grad), bg, sizeof(bg)));
    if (mx_ndarray_dtype(weight) != mx_ndarray_dtype(grad))
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter %d: weight dtype %s and gradient dtype %s differ",
                        opt->kind->name, index, mx_dtype_name(mx_ndarray_dtype(weight)),
                        mx_dtype_name(mx_ndarray_dtype(grad)));
    if (!mx_context_equal(mx_ndarray_context(weight), mx_ndarray_context(grad)))
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter %d: weight and gradient are on different devices",
                        opt->kind->name, index);
    if (overlaps(weight, grad))
        return MX_ERROR(MX_ERR_INVALID, "%s: parameter %d: weight and gradient share memory", opt->kind->name, index);

    opt_slot *slot;
    MX_TRY(get_slot(opt, index, &slot));
    const int n_states = opt->kind->num_states(&opt->p);
    MX_TRY(prepare_states(opt, index, slot, weight, n_states));

    /* MXNet's order: count, then rate and decay, then the kernel. */
    if (!slot->counted) {
        slot->counted = true;
        slot->count = opt->p.begin_num_update;
    }
    slot->count++;
    if (slot->count > opt->num_update) opt->num_update = slot->count;
    double lr = opt->sched ? mx_lr_scheduler_lr(opt->sched, opt->num_update) : opt->p.learning_rate;
    lr *= mx_optimizer_lr_mult(opt, index);
    double wd = opt->p.wd * mx_optimizer_wd_mult(opt, index);
    if (opt->kind->adjust_lr) lr = opt->kind->adjust_lr(&opt->p, lr, slot->count);

    *it = (upd_item){.step = (opt_step){.p = opt->p, .lr = lr, .wd = wd, .t = slot->count},
                     .weight = mx_ndarray_retain(weight),
                     .grad = mx_ndarray_retain(grad)};
    for (int j = 0; j < n_states; j++) it->states[j] = mx_ndarray_retain(slot->states[j]);
    return MX_OK;
}

static upd_op *upd_op_new(const mx_optimizer *opt, int n_items)
{
    upd_op *op = mx_calloc(1, sizeof(*op) + (size_t)n_items * sizeof(upd_item));
    if (!op) return NULL;
    op->kind = opt->kind;
    op->n_states = opt->kind->num_states(&opt->p);
    return op;
}

/* Pushes op (taking it): reads every item's gradient, weight and states,
 * writes its weight and states. */
static mx_status upd_push(mx_optimizer *opt, upd_op *op)
{
    const int per_item_reads = 2 + op->n_states, per_item_writes = 1 + op->n_states;
    mx_engine_var **vars =
        mx_calloc((size_t)op->n_items * (size_t)(per_item_reads + per_item_writes), sizeof(*vars));
    if (!vars) {
        upd_free(op);
        return MX_ERR_NOMEM;
    }
    mx_engine_var **reads = vars, **writes = vars + (size_t)op->n_items * (size_t)per_item_reads;
    int n_reads = 0, n_writes = 0;
    int64_t bytes = 0;
    for (int i = 0; i < op->n_items; i++) {
        const upd_item *it = &op->items[i];
        reads[n_reads++] = mx_ndarray_var(it->grad);
        reads[n_reads++] = mx_ndarray_var(it->weight);
        writes[n_writes++] = mx_ndarray_var(it->weight);
        for (int j = 0; j < op->n_states; j++) {
            reads[n_reads++] = mx_ndarray_var(it->states[j]);
            writes[n_writes++] = mx_ndarray_var(it->states[j]);
        }
        bytes += (int64_t)mx_ndarray_nbytes(it->weight);
    }
    mx_engine_op desc = {.fn = upd_run, .payload = op, .payload_free = upd_free, .reads = reads,
                         .n_reads = n_reads, .writes = writes, .n_writes = n_writes,
                         .ctx = mx_ndarray_context(op->items[0].weight), .lane = MX_LANE_COMPUTE,
                         .name = opt->kind->name, .profile_name = op->label, .profile_bytes = bytes};
    mx_status s = mx_engine_push(mx_runtime_engine(opt->rt), &desc);
    free(vars);
    return s;
}

/* One parameter's update, prepared (counted, states made) into *out. */
static mx_status upd_op_one(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad, upd_op **out)
{
    upd_op *op = upd_op_new(opt, 1);
    if (!op) return MX_ERR_NOMEM;
    mx_status s = upd_prepare(opt, index, weight, grad, &op->items[0]);
    if (s != MX_OK) {
        free(op);
        return s;
    }
    op->n_items = 1;
    *out = op;
    return MX_OK;
}

mx_status mx_optimizer_update(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad)
{
    upd_op *op;
    MX_TRY(upd_op_one(opt, index, weight, grad, &op));
    snprintf(op->label, sizeof(op->label), "%s update of key %d", opt->kind->name, index);
    return upd_push(opt, op);
}

mx_status mx_optimizer_update_now(mx_optimizer *opt, int index, mx_ndarray *weight, mx_ndarray *grad)
{
    if (weight && mx_ndarray_context(weight).dev_type == MX_DEV_GPU)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: parameter %d: an update on the calling thread takes host arrays",
                        opt->kind->name, index);
    upd_op *op;
    MX_TRY(upd_op_one(opt, index, weight, grad, &op));
    /* New states are zeroed by engine ops; the caller's own work on the
     * weight and gradient has been pushed too. */
    mx_status s = mx_ndarray_wait_to_read(grad);
    if (s == MX_OK) s = mx_ndarray_wait_to_write(weight);
    for (int j = 0; j < op->n_states && s == MX_OK; j++) s = mx_ndarray_wait_to_write(op->items[0].states[j]);
    if (s == MX_OK) upd_range(op, 0, mx_ndarray_size(weight), 0);
    upd_free(op);
    return s;
}

mx_status mx_optimizer_update_many(mx_optimizer *opt, int n, const int *index, mx_ndarray *const *weights,
                                   mx_ndarray *const *grads)
{
    if (n < 1) return MX_OK;
    bool one_gpu = true;
    for (int i = 0; i < n && one_gpu; i++) {
        if (!weights[i]) return MX_ERROR(MX_ERR_INVALID, "%s: weight is NULL", opt->kind->name);
        mx_context c = mx_ndarray_context(weights[i]);
        one_gpu = c.dev_type == MX_DEV_GPU && mx_context_equal(c, mx_ndarray_context(weights[0]));
    }
    if (!one_gpu) {
        for (int i = 0; i < n; i++) MX_TRY(mx_optimizer_update(opt, index[i], weights[i], grads[i]));
        return MX_OK;
    }
    upd_op *op = upd_op_new(opt, n);
    if (!op) return MX_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        mx_status s = upd_prepare(opt, index[i], weights[i], grads[i], &op->items[i]);
        if (s != MX_OK) {
            upd_free(op);
            return s;
        }
        op->n_items++;
    }
    snprintf(op->label, sizeof(op->label), "%s update of %d parameters", opt->kind->name, n);
    return upd_push(opt, op);
}

/* ---------------------------------------------------------------- states */

typedef struct list_builder {
    mx_ndarray_list *list;
    int cap;
} list_builder;

/* Appends arr (taking the reference) under a printf-formatted name. */
static mx_status list_add(list_builder *b, mx_ndarray *arr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mx_status list_add(list_builder *b, mx_ndarray *arr, const char *fmt, ...)
{
    mx_ndarray_list *l = b->list;
    if (l->count == b->cap) {
        int cap = b->cap ? b->cap * 2 : 8;
        mx_ndarray **arrays = mx_realloc(l->arrays, sizeof(*arrays) * (size_t)cap);
        if (!arrays) {
            mx_ndarray_free(arr);
            return MX_ERR_NOMEM;
        }
        l->arrays = arrays;
        char **names = mx_realloc(l->names, sizeof(*names) * (size_t)cap);
        if (!names) {
            mx_ndarray_free(arr);
            return MX_ERR_NOMEM;
        }
        l->names = names;
        b->cap = cap;
    }
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    char *copy = mx_strdup(name);
    if (!copy) {
        mx_ndarray_free(arr);
        return MX_ERR_NOMEM;
    }
    l->arrays[l->count] = arr;
    l->names[l->count] = copy;
    l->count++;
    return MX_OK;
}

/* A new CPU array holding bytes of host data. */
static mx_status host_array(mx_runtime *rt, mx_shape shape, mx_dtype dtype, const void *data, mx_ndarray **out)
{
    MX_TRY(mx_ndarray_create(rt, shape, dtype, mx_cpu(), out));
    mx_status s = mx_ndarray_from_host(*out, data, mx_ndarray_nbytes(*out));
    if (s != MX_OK) {
        mx_ndarray_free(*out);
        *out = NULL;
    }
    return s;
}

/* copy: each state array is a snapshot (a new CPU array); otherwise the
 * list holds the live arrays themselves. */
static mx_status build_states(mx_optimizer *opt, list_builder *b, bool copy)
{
    int64_t meta[3] = {STATES_VERSION, opt->num_update, opt->p.begin_num_update};
    mx_ndarray *arr;
    MX_TRY(host_array(opt->rt, MX_SHAPE(3), MX_INT64, meta, &arr));
    MX_TRY(list_add(b, arr, "optimizer:%s", opt->kind->name));

    int64_t k = 0;
    for (int i = 0; i < opt->n_slots; i++) k += opt->slots[i].counted;
    if (k > 0) {
        int64_t *counts = mx_malloc(sizeof(*counts) * 2 * (size_t)k);
        if (!counts) return MX_ERR_NOMEM;
        int64_t at = 0;
        for (int i = 0; i < opt->n_slots; i++)
            if (opt->slots[i].counted) {
                counts[2 * at] = i;
                counts[2 * at + 1] = opt->slots[i].count;
                at++;
            }
        mx_status s = host_array(opt->rt, MX_SHAPE(k, 2), MX_INT64, counts, &arr);
        free(counts);
        MX_TRY(s);
        MX_TRY(list_add(b, arr, "counts"));
    }
    if (opt->sched) {
        double st[3];
        mx_opt_sched_get_state(opt->sched, st);
        MX_TRY(host_array(opt->rt, MX_SHAPE(3), MX_FLOAT64, st, &arr));
        MX_TRY(list_add(b, arr, "lr_scheduler:%s", mx_lr_scheduler_kind_name(opt->sched)));
    }
    const int n_states = opt->kind->num_states(&opt->p);
    for (int i = 0; i < opt->n_slots; i++)
        for (int j = 0; j < n_states; j++) {
            mx_ndarray *st = opt->slots[i].states[j];
            if (!st) continue;
            if (!copy) {
                MX_TRY(list_add(b, mx_ndarray_retain(st), "%d:%s", i, opt->kind->state_names[j]));
                continue;
            }
            /* A snapshot ordered after the updates pushed so far. */
            MX_TRY(mx_ndarray_create(opt->rt, *mx_ndarray_shape(st), mx_ndarray_dtype(st), mx_cpu(), &arr));
            mx_status s = mx_nd_copy(arr, st);
            if (s != MX_OK) {
                mx_ndarray_free(arr);
                return s;
            }
            MX_TRY(list_add(b, arr, "%d:%s", i, opt->kind->state_names[j]));
        }
    return MX_OK;
}

mx_status mx_optimizer_get_states(mx_optimizer *opt, mx_ndarray_list *out)
{
    memset(out, 0, sizeof(*out));
    list_builder b = {.list = out};
    mx_status s = build_states(opt, &b, true);
    if (s != MX_OK) mx_ndarray_list_free(out);
    return s;
}

mx_status mx_optimizer_view_states(mx_optimizer *opt, mx_ndarray_list *out)
{
    memset(out, 0, sizeof(*out));
    list_builder b = {.list = out};
    mx_status s = build_states(opt, &b, false);
    if (s != MX_OK) mx_ndarray_list_free(out);
    return s;
}

/* Reads a small CPU int64/float64 array entirely. */
static mx_status read_host(mx_ndarray *a, void *dst, size_t bytes) { return mx_ndarray_to_host(a, dst, bytes); }

static bool parse_state_name(const char *name, int *index, const char **state)
{
    const char *colon = strchr(name, ':');
    if (!colon || colon == name || colon - name > 9) return false;
    int v = 0;
    for (const char *p = name; p < colon; p++) {
        if (!isdigit((unsigned char)*p)) return false;
        v = v * 10 + (*p - '0');
    }
    *index = v;
    *state = colon + 1;
    return true;
}

mx_status mx_optimizer_set_states(mx_optimizer *opt, const mx_ndarray_list *states)
{
    const char *me = opt->kind->name;
    if (!states || states->count < 0 || (states->count > 0 && (!states->arrays || !states->names)))
        return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states need a list of named arrays", me);
    const int n_states = opt->kind->num_states(&opt->p);
    int meta_at = -1, counts_at = -1, sched_at = -1;

    /* Pass 1: check everything before changing anything. */
    for (int i = 0; i < states->count; i++) {
        const char *name = states->names[i];
        mx_ndarray *a = states->arrays[i];
        if (!name || !a) return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: entry %d has no name or array", me, i);
        const mx_shape *sh = mx_ndarray_shape(a);
        char buf[64];
        if (!strncmp(name, "optimizer:", 10)) {
            if (strcmp(name + 10, me))
                return MX_ERROR(MX_ERR_FORMAT, "optimizer states were saved by '%s', this optimizer is '%s'",
                                name + 10, me);
            if (mx_ndarray_dtype(a) != MX_INT64 || sh->ndim != 1 || sh->dims[0] != 3)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: bad '%s' entry (%s %s)", me, name,
                                mx_dtype_name(mx_ndarray_dtype(a)), mx_shape_str(sh, buf, sizeof(buf)));
            meta_at = i;
        } else if (!strcmp(name, "counts")) {
            if (mx_ndarray_dtype(a) != MX_INT64 || sh->ndim != 2 || sh->dims[1] != 2 || sh->dims[0] > MAX_INDEX)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: bad 'counts' entry (%s %s)", me,
                                mx_dtype_name(mx_ndarray_dtype(a)), mx_shape_str(sh, buf, sizeof(buf)));
            counts_at = i;
        } else if (!strncmp(name, "lr_scheduler:", 13)) {
            if (!opt->sched)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states hold a '%s' schedule's position but no "
                                               "lr_scheduler is attached (attach it before restoring)", me, name + 13);
            if (strcmp(name + 13, mx_lr_scheduler_kind_name(opt->sched)))
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states were saved with lr_scheduler '%s', this one is '%s'",
                                me, name + 13, mx_lr_scheduler_kind_name(opt->sched));
            if (mx_ndarray_dtype(a) != MX_FLOAT64 || sh->ndim != 1 || sh->dims[0] != 3)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: bad '%s' entry", me, name);
            sched_at = i;
        } else {
            int index;
            const char *state;
            if (!parse_state_name(name, &index, &state) || index >= MAX_INDEX)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: unknown entry '%s'", me, name);
            int j = 0;
            while (j < n_states && strcmp(opt->kind->state_names[j], state)) j++;
            if (j == n_states)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: '%s' is not a state of this optimizer "
                                               "(with these parameters it keeps %d state array%s)",
                                me, name, n_states, n_states == 1 ? "" : "s");
            mx_dtype t = mx_ndarray_dtype(a);
            if (t != MX_FLOAT32 && t != MX_FLOAT64)
                return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: '%s' has dtype %s", me, name, mx_dtype_name(t));
        }
    }
    if (meta_at < 0)
        return MX_ERROR(MX_ERR_FORMAT, "%s: not optimizer states (no 'optimizer:<name>' entry)", me);
    int64_t meta[3];
    MX_TRY(read_host(states->arrays[meta_at], meta, sizeof(meta)));
    if (meta[0] != STATES_VERSION)
        return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states have format version %lld, expected %d", me,
                        (long long)meta[0], STATES_VERSION);
    if (meta[1] < 0 || meta[2] < 0 || meta[1] > (int64_t)1e15)
        return MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: bad update count %lld", me, (long long)meta[1]);
    int64_t *counts = NULL, n_counts = 0;
    if (counts_at >= 0) {
        n_counts = mx_ndarray_shape(states->arrays[counts_at])->dims[0];
        counts = mx_malloc(sizeof(*counts) * 2 * (size_t)(n_counts ? n_counts : 1));
        if (!counts) return MX_ERR_NOMEM;
        mx_status s = read_host(states->arrays[counts_at], counts, mx_ndarray_nbytes(states->arrays[counts_at]));
        for (int64_t i = 0; s == MX_OK && i < n_counts; i++)
            if (counts[2 * i] < 0 || counts[2 * i] >= MAX_INDEX || counts[2 * i + 1] < 0 ||
                counts[2 * i + 1] > meta[1])
                s = MX_ERROR(MX_ERR_FORMAT, "%s: optimizer states: bad count entry (%lld, %lld)", me,
                             (long long)counts[2 * i], (long long)counts[2 * i + 1]);
        if (s != MX_OK) {
            free(counts);
            return s;
        }
    }
    double sched_state[3] = {0};
    mx_status s = MX_OK;
    if (sched_at >= 0) s = read_host(states->arrays[sched_at], sched_state, sizeof(sched_state));
    /* Copies of the state arrays, made before anything changes. */
    mx_ndarray **copies = mx_calloc((size_t)(states->count ? states->count : 1), sizeof(*copies));
    if (!copies) s = MX_ERR_NOMEM;
    for (int i = 0; s == MX_OK && i < states->count; i++) {
        int index;
        const char *state;
        const char *name = states->names[i];
        if (i == meta_at || i == counts_at || i == sched_at || !parse_state_name(name, &index, &state)) continue;
        mx_ndarray *src = states->arrays[i];
        s = mx_ndarray_create(opt->rt, *mx_ndarray_shape(src), mx_ndarray_dtype(src), mx_cpu(), &copies[i]);
        if (s == MX_OK) s = mx_nd_copy(copies[i], src);
        /* Grow the slot table now so pass 2 cannot fail. */
        opt_slot *slot;
        if (s == MX_OK) s = get_slot(opt, index, &slot);
    }
    for (int64_t i = 0; s == MX_OK && i < n_counts; i++) {
        opt_slot *slot;
        s = get_slot(opt, (int)counts[2 * i], &slot);
    }
    /* Checks the position before taking it; nothing below can fail. */
    if (s == MX_OK && sched_at >= 0) s = mx_opt_sched_set_state(opt->sched, sched_state);
    if (s != MX_OK) {
        for (int i = 0; copies && i < states->count; i++) mx_ndarray_free(copies[i]);
        free(copies);
        free(counts);
        return s;
    }

    /* Pass 2: replace counts and states. */
    for (int i = 0; i < opt->n_slots; i++) {
        opt->slots[i].counted = false;
        opt->slots[i].count = 0;
        slot_clear_states(&opt->slots[i]);
    }
    opt->p.begin_num_update = meta[2];
    opt->num_update = meta[1];
    for (int64_t i = 0; i < n_counts; i++) {
        opt_slot *slot = &opt->slots[counts[2 * i]];
        slot->counted = true;
        slot->count = counts[2 * i + 1];
    }
    for (int i = 0; i < states->count; i++) {
        if (!copies[i]) continue;
        int index;
        const char *state;
        parse_state_name(states->names[i], &index, &state);
        int j = 0;
        while (strcmp(opt->kind->state_names[j], state)) j++;
        opt_slot *slot = &opt->slots[index];
        mx_ndarray_free(slot->states[j]);
        slot->states[j] = copies[i];
    }
    free(copies);
    free(counts);
    return MX_OK;
}
