/*
 * trainer.c - the training loop of mxtrain (MXNet's Module.fit):
 *   bind the network with the iterator's shapes; initialize parameters by
 *   MXNet's name rules; each batch: copy it in, forward, backward, push
 *   every gradient to the KVStore (whose updater is the optimizer) and
 *   pull the weight back; evaluate [val] each epoch; checkpoint every
 *   save_period epochs; resume exactly (weights, optimizer state, schedule
 *   position, RNG, data order).
 * Metrics are read one batch behind: the output is copied (through the
 * engine) right after backward, and read while the next batch runs, so the
 * host never stalls the pipeline on the newest batch.
 */
#include "train/trainer.h"

#include "initializer/initializer.h"
#include "io/io.h"
#include "kvstore/kvstore.h"
#include "metric/metric.h"
#include "optimizer/optimizer.h"
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 4096
#define MAX_METRICS MX_CONFIG_MAX_METRICS
#define STATES_FORMAT 1

typedef struct trainer {
    const mx_config *cfg;
    const mx_train_options *opt;
    mx_runtime *rt;
    mx_rng *rng;
    mx_data_iter *train_it, *val_it;
    int64_t batch_size;
    uint32_t arg_ids[MAX_ARGS], aux_ids[MAX_ARGS];
    int n_args, n_aux;
    int data_arg, label_arg;     /* argument indices of the data and label inputs */
    mx_ndarray *args[MAX_ARGS], *grads[MAX_ARGS], *aux[MAX_ARGS];
    const char *arg_names[MAX_ARGS], *aux_names[MAX_ARGS];
    int param_index[MAX_ARGS];   /* argument -> optimizer / kvstore key, -1 for inputs */
    int n_params;
    mx_executor *ex;
    mx_optimizer *optimizer;
    mx_kvstore *kv;
    mx_metric *metrics[MAX_METRICS];
    int n_metrics;
    mx_ndarray *out_copy, *label_copy; /* the newest batch's output and labels, for metrics */
    FILE *metrics_log;
    int64_t batches_per_epoch;
} trainer;

static void logf_(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const trainer *t, const char *fmt, ...)
{
    if (!t->opt->log) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    t->opt->log(t->opt->log_user, line);
}

/* ---------------------------------------------------------------- set-up */

static mx_status make_iter(trainer *t, const char *section, const mx_iter_settings *it, mx_data_iter **out)
{
    *out = NULL;
    if (it->kind == MX_ITER_NONE) return MX_OK;
    const char *keys[256], *values[256];
    int n = mx_config_section_entries(t->cfg, section, keys, values, 256);
    mx_status s = mx_data_iter_create(t->rt, mx_iter_kind_name(it->kind), keys, values, n, out);
    if (s != MX_OK) {
        char where[512];
        snprintf(where, sizeof(where), "%s: [%s]", t->cfg->path, section);
        return mx_error_prefix(s, "%s", where);
    }
    /* The iterator's warnings (skipped corrupt records, ...) are log lines. */
    mx_data_iter_set_log(*out, t->opt->log, t->opt->log_user);
    return MX_OK;
}

/* The label variable of the network: the label input of its loss layer. */
static mx_status find_label(const mx_graph *g, uint32_t *label)
{
    *label = MX_NO_NODE;
    for (int h = 0; h < mx_graph_num_heads(g); h++) {
        const mx_node *n = mx_graph_node(g, mx_graph_head(g, h).node);
        if (n->kind == MX_NODE_OP && (n->op->flags & MX_OP_LOSS) && n->n_inputs >= 2) {
            *label = n->inputs[1].node;
            return MX_OK;
        }
    }
    return MX_ERROR(MX_ERR_INVALID,
                    "the network has no loss layer to train (its output is not SoftmaxOutput or a regression "
                    "output; did you mean op = SoftmaxOutput?)");
}

static mx_status init_params(trainer *t)
{
    char json[512];
    mx_init_to_json(&t->cfg->fit.initializer, json, sizeof(json));
    mx_initializer *init;
    MX_TRY(mx_initializer_create_json(json, &init));
    mx_status s = MX_OK;
    for (int pass = 0; pass < 2 && s == MX_OK; pass++) {
        int n = pass == 0 ? t->n_args : t->n_aux;
        for (int i = 0; i < n && s == MX_OK; i++) {
            if (pass == 0 && t->param_index[i] < 0) continue;
            uint32_t id = pass == 0 ? t->arg_ids[i] : t->aux_ids[i];
            const char *name = mx_graph_node(t->cfg->graph, id)->name;
            const char *attr = mx_graph_get_attr(t->cfg->graph, id, "__init__");
            mx_initializer *explicit_init = NULL;
            if (attr) s = mx_initializer_create_json(attr, &explicit_init);
            if (s == MX_OK)
                s = mx_initializer_init(init, t->rng, name, explicit_init, pass == 0 ? t->args[i] : t->aux[i]);
            mx_initializer_free(explicit_init);
        }
    }
    mx_initializer_free(init);
    return s;
}

static double attr_double(const mx_graph *g, uint32_t id, const char *key, double fallback)
{
    const char *v = mx_graph_get_attr(g, id, key);
    return v ? strtod(v, NULL) : fallback;
}

static mx_status make_optimizer(trainer *t)
{
    const mx_optimizer_settings *o = &t->cfg->optimizer;
    const char *name = mx_optimizer_kind_name(o->type);
    mx_optimizer_params p;
    MX_TRY(mx_optimizer_defaults(name, &p));
    p.learning_rate = o->lr;
    p.wd = o->wd;
    p.rescale_grad = o->rescale_grad > 0 ? o->rescale_grad : 1.0 / (double)t->batch_size; /* as MXNet's Module */
    p.clip_gradient = o->clip_gradient;
    p.momentum = o->momentum;
    p.beta1 = o->beta1;
    p.beta2 = o->beta2;
    p.epsilon = o->epsilon;
    p.gamma1 = o->gamma1;
    p.gamma2 = o->gamma2;
    p.centered = o->centered;
    MX_TRY(mx_optimizer_create(t->rt, name, &p, &t->optimizer));
    for (int i = 0; i < t->n_args; i++) {
        int k = t->param_index[i];
        if (k < 0) continue;
        uint32_t id = t->arg_ids[i];
        MX_TRY(mx_optimizer_set_param_name(t->optimizer, k, t->arg_names[i]));
        if (mx_graph_get_attr(t->cfg->graph, id, "__lr_mult__"))
            MX_TRY(mx_optimizer_set_lr_mult(t->optimizer, k, attr_double(t->cfg->graph, id, "__lr_mult__", 1)));
        if (mx_graph_get_attr(t->cfg->graph, id, "__wd_mult__"))
            MX_TRY(mx_optimizer_set_wd_mult(t->optimizer, k, attr_double(t->cfg->graph, id, "__wd_mult__", 1)));
    }
    if (o->lr_scheduler != MX_LR_NONE) {
        mx_lr_epoch_schedule e = {.kind = mx_lr_scheduler_name(o->lr_scheduler), .base_lr = o->lr,
                                  .factor = o->lr_factor, .step_epochs = o->lr_step_epochs,
                                  .n_step_epochs = o->n_lr_step_epochs, .num_epoch = t->cfg->fit.num_epoch,
                                  .final_lr = o->final_lr, .pwr = o->pwr, .warmup_epochs = o->warmup_epochs,
                                  .warmup_begin_lr = o->warmup_begin_lr,
                                  .updates_per_epoch = t->batches_per_epoch > 0 ? t->batches_per_epoch : 1};
        mx_lr_scheduler *sched;
        MX_TRY(mx_lr_scheduler_create_epochs(&e, &sched));
        MX_TRY(mx_optimizer_set_lr_scheduler(t->optimizer, sched));
    }
    MX_TRY(mx_kvstore_create(t->rt, mx_kvstore_name(t->cfg->fit.kvstore), &t->kv));
    MX_TRY(mx_kvstore_set_optimizer(t->kv, t->optimizer));
    return MX_OK;
}

static mx_status make_metrics(trainer *t)
{
    for (int i = 0; i < t->cfg->fit.n_metrics; i++) {
        const mx_metric_spec *m = &t->cfg->fit.metrics[i];
        mx_metric_params p;
        MX_TRY(mx_metric_defaults(mx_metric_name(m->kind), &p));
        if (m->kind == MX_METRIC_TOP_K_ACC) p.top_k = m->top_k;
        MX_TRY(mx_metric_create(mx_metric_name(m->kind), &p, &t->metrics[t->n_metrics]));
        t->n_metrics++;
    }
    return MX_OK;
}

static mx_status setup(trainer *t)
{
    const mx_config *cfg = t->cfg;
    const mx_graph *g = cfg->graph;
    if (cfg->train.kind == MX_ITER_NONE) return MX_ERROR(MX_ERR_INVALID, "%s: there is no [train] section", cfg->path);
    uint32_t label_id;
    MX_TRY(find_label(g, &label_id));
    if (cfg->fit.model_prefix && *cfg->fit.model_prefix) MX_TRY(mx_checkpoint_prepare_dir(cfg->fit.model_prefix));

    mx_engine_config ec = mx_engine_config_default();
    MX_TRY(mx_runtime_create(&ec, &t->rt));
    MX_TRY(mx_rng_create(t->rt, (uint64_t)cfg->fit.seed, &t->rng));
    MX_TRY(make_iter(t, "train", &cfg->train, &t->train_it));
    MX_TRY(make_iter(t, "val", &cfg->val, &t->val_it));
    mx_shape data_shape = mx_data_iter_data_shape(t->train_it), label_shape = mx_data_iter_label_shape(t->train_it);
    t->batch_size = data_shape.dims[0];
    if (t->val_it) {
        mx_shape vd = mx_data_iter_data_shape(t->val_it);
        char a[160], b[160];
        if (!mx_shape_equal(&vd, &data_shape))
            return MX_ERROR(MX_ERR_INVALID, "%s: [val] batches are %s but [train] batches are %s: use the same batch_size",
                            cfg->path, mx_shape_str(&vd, a, sizeof(a)), mx_shape_str(&data_shape, b, sizeof(b)));
    }
    int64_t samples = mx_data_iter_num_samples(t->train_it);
    t->batches_per_epoch = samples > 0 ? samples / t->batch_size : -1;

    const char *names[2] = {cfg->inputs[0], mx_graph_node(g, label_id)->name};
    mx_shape shapes[2] = {data_shape, label_shape};
    mx_graph_shapes sh;
    MX_TRY(mx_config_infer_shapes(cfg, names, shapes, 2, &sh));
    t->n_args = mx_graph_list_arguments(g, t->arg_ids);
    t->n_aux = mx_graph_list_aux(g, t->aux_ids);
    mx_status s = MX_OK;
    if (t->n_args > MAX_ARGS || t->n_aux > MAX_ARGS) s = MX_ERROR(MX_ERR_UNSUPPORTED, "more than %d parameters", MAX_ARGS);
    t->data_arg = t->label_arg = -1;
    for (int i = 0; i < t->n_args && s == MX_OK; i++) {
        uint32_t id = t->arg_ids[i];
        const char *name = mx_graph_node(g, id)->name;
        t->arg_names[i] = name;
        const mx_shape *shape = mx_graph_entry_shape(&sh, (mx_entry){id, 0});
        s = mx_ndarray_create(t->rt, *shape, MX_FLOAT32, mx_cpu(), &t->args[i]);
        if (!strcmp(name, names[0])) t->data_arg = i;
        else if (id == label_id) t->label_arg = i;
        if (s != MX_OK || i == t->data_arg || i == t->label_arg) {
            t->param_index[i] = -1;
            continue;
        }
        /* Other data inputs ([net] inputs) are not supported by one iterator. */
        for (int k = 1; k < cfg->n_inputs && s == MX_OK; k++)
            if (!strcmp(name, cfg->inputs[k]))
                s = MX_ERROR(MX_ERR_UNSUPPORTED, "%s: input '%s': training feeds only one data input", cfg->path, name);
        t->param_index[i] = t->n_params++;
        if (s == MX_OK) s = mx_ndarray_create(t->rt, *shape, MX_FLOAT32, mx_cpu(), &t->grads[i]);
    }
    for (int i = 0; i < t->n_aux && s == MX_OK; i++) {
        t->aux_names[i] = mx_graph_node(g, t->aux_ids[i])->name;
        s = mx_ndarray_create(t->rt, *mx_graph_entry_shape(&sh, (mx_entry){t->aux_ids[i], 0}), MX_FLOAT32, mx_cpu(),
                              &t->aux[i]);
    }
    mx_graph_shapes_free(&sh);
    MX_TRY(s);
    if (t->data_arg < 0 || t->label_arg < 0)
        return MX_ERROR(MX_ERR_INVALID, "%s: the network does not read '%s'", cfg->path, names[t->data_arg < 0 ? 0 : 1]);
    MX_TRY(init_params(t));
    mx_bind_config bc = {.ctx = mx_cpu(), .args = t->args, .arg_grads = t->grads, .aux = t->aux,
                         .for_training = true, .rng = t->rng};
    MX_TRY(mx_executor_bind(t->rt, g, &bc, &t->ex));
    MX_TRY(make_optimizer(t));
    for (int i = 0; i < t->n_args; i++)
        if (t->param_index[i] >= 0) MX_TRY(mx_kvstore_init(t->kv, t->param_index[i], t->args[i]));
    MX_TRY(make_metrics(t));
    mx_ndarray *out = mx_executor_output(t->ex, 0);
    MX_TRY(mx_ndarray_create(t->rt, *mx_ndarray_shape(out), MX_FLOAT32, mx_cpu(), &t->out_copy));
    MX_TRY(mx_ndarray_create(t->rt, label_shape, MX_FLOAT32, mx_cpu(), &t->label_copy));
    return MX_OK;
}

static void teardown(trainer *t)
{
    if (t->rt) mx_engine_wait_all(mx_runtime_engine(t->rt));
    mx_executor_free(t->ex);
    mx_kvstore_free(t->kv);
    mx_optimizer_free(t->optimizer);
    for (int i = 0; i < t->n_metrics; i++) mx_metric_free(t->metrics[i]);
    for (int i = 0; i < t->n_args; i++) {
        mx_ndarray_free(t->args[i]);
        mx_ndarray_free(t->grads[i]);
    }
    for (int i = 0; i < t->n_aux; i++) mx_ndarray_free(t->aux[i]);
    mx_ndarray_free(t->out_copy);
    mx_ndarray_free(t->label_copy);
    mx_data_iter_free(t->train_it);
    mx_data_iter_free(t->val_it);
    mx_rng_free(t->rng);
    if (t->metrics_log) fclose(t->metrics_log);
    mx_runtime_free(t->rt);
}

/* ---------------------------------------------------------------- metrics */

/* Reads the copied output and labels, checks for NaN, updates metrics. */
static mx_status update_metrics(trainer *t, int epoch, int64_t batch, int pad)
{
    size_t out_bytes = mx_ndarray_nbytes(t->out_copy), label_bytes = mx_ndarray_nbytes(t->label_copy);
    float *out = mx_malloc(out_bytes), *labels = mx_malloc(label_bytes);
    mx_status s = (out && labels) ? MX_OK : MX_ERR_NOMEM;
    if (s == MX_OK) s = mx_ndarray_to_host(t->out_copy, out, out_bytes);
    if (s == MX_OK) s = mx_ndarray_to_host(t->label_copy, labels, label_bytes);
    if (s == MX_OK)
        for (size_t i = 0; i < out_bytes / sizeof(float); i++)
            if (!isfinite(out[i])) {
                s = MX_ERROR(MX_ERR_RUNTIME,
                             "training diverged: the output became %s at epoch %d, batch %lld (lower the learning "
                             "rate?)",
                             isnan(out[i]) ? "NaN" : "infinite", epoch, (long long)batch);
                break;
            }
    mx_shape os = *mx_ndarray_shape(t->out_copy), ls = *mx_ndarray_shape(t->label_copy);
    os.dims[0] -= pad; /* padding rows are not samples */
    ls.dims[0] -= pad;
    for (int m = 0; m < t->n_metrics && s == MX_OK && os.dims[0] > 0; m++)
        s = mx_metric_update(t->metrics[m], labels, &ls, out, &os);
    free(out);
    free(labels);
    return s;
}

static void metric_text(trainer *t, bool global, const char *prefix, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int m = 0; m < t->n_metrics && used < size; m++) {
        double v;
        const char *name = global ? mx_metric_get_global(t->metrics[m], &v) : mx_metric_get(t->metrics[m], &v);
        int n = snprintf(buf + used, size - used, "%s%s%s=%f", m ? " " : "", prefix, name, v);
        if (n > 0) used += (size_t)n;
    }
}

static void metric_json(trainer *t, bool global, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int m = 0; m < t->n_metrics && used < size; m++) {
        double v;
        const char *name = global ? mx_metric_get_global(t->metrics[m], &v) : mx_metric_get(t->metrics[m], &v);
        int n = snprintf(buf + used, size - used, ", \"%s\": %.9g", name, isfinite(v) ? v : -1.0);
        if (n > 0) used += (size_t)n;
    }
}

/* ---------------------------------------------------------------- checkpoints */

static mx_status save_states(trainer *t, int epoch)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s-%04d.states", t->cfg->fit.model_prefix, epoch);
    mx_ndarray_list states;
    MX_TRY(mx_optimizer_get_states(t->optimizer, &states));
    /* Ours: the generator state and the epoch, for exact resume. */
    mx_ndarray *extra;
    mx_status s = mx_ndarray_create(t->rt, MX_SHAPE(6), MX_INT64, mx_cpu(), &extra);
    if (s == MX_OK) s = mx_engine_wait_var(mx_runtime_engine(t->rt), mx_rng_var(t->rng));
    if (s == MX_OK) {
        uint64_t v[6] = {STATES_FORMAT, (uint64_t)epoch};
        mx_rng_get_state(t->rng, v + 2);
        s = mx_ndarray_from_host(extra, v, sizeof(v));
    }
    int n = states.count + 1;
    mx_ndarray **arrays = mx_malloc(sizeof(*arrays) * (size_t)n);
    const char **names = mx_malloc(sizeof(*names) * (size_t)n);
    if (s == MX_OK && (!arrays || !names)) s = MX_ERR_NOMEM;
    if (s == MX_OK) {
        for (int i = 0; i < states.count; i++) {
            arrays[i] = states.arrays[i];
            names[i] = states.names[i];
        }
        arrays[states.count] = extra;
        names[states.count] = "trainer:state";
        s = mx_ndarray_save(path, arrays, names, n);
    }
    free(arrays);
    free(names);
    mx_ndarray_free(extra);
    mx_ndarray_list_free(&states);
    return s;
}

static mx_status save_checkpoint(trainer *t, int epoch)
{
    const char *prefix = t->cfg->fit.model_prefix;
    const char *names[MAX_ARGS];
    mx_ndarray *arrays[MAX_ARGS];
    int n = 0;
    for (int i = 0; i < t->n_args; i++)
        if (t->param_index[i] >= 0) {
            names[n] = t->arg_names[i];
            arrays[n++] = t->args[i];
        }
    mx_named_arrays args = {n, names, arrays}, aux = {t->n_aux, t->aux_names, t->aux};
    MX_TRY(mx_checkpoint_save(prefix, epoch, t->cfg->graph, args, aux));
    MX_TRY(save_states(t, epoch));
    char path[4096];
    logf_(t, "Saved checkpoint to \"%s\"", mx_checkpoint_params_path(prefix, epoch, path, sizeof(path)));
    return MX_OK;
}

/* Loads weights (and optimizer/RNG state when present) of `epoch`. */
static mx_status load_checkpoint(trainer *t, int epoch, bool need_states)
{
    const char *prefix = t->cfg->fit.model_prefix;
    mx_ndarray_list args, aux;
    MX_TRY(mx_checkpoint_load(t->rt, prefix, epoch, &args, &aux));
    mx_status s = MX_OK;
    for (int pass = 0; pass < 2 && s == MX_OK; pass++) {
        mx_ndarray_list *l = pass ? &aux : &args;
        int n = pass ? t->n_aux : t->n_args;
        for (int i = 0; i < n && s == MX_OK; i++) {
            if (!pass && t->param_index[i] < 0) continue;
            const char *name = pass ? t->aux_names[i] : t->arg_names[i];
            mx_ndarray *dst = pass ? t->aux[i] : t->args[i];
            int k = 0;
            while (k < l->count && strcmp(l->names[k], name)) k++;
            char path[4096], a[160], b[160];
            mx_checkpoint_params_path(prefix, epoch, path, sizeof(path));
            if (k == l->count) {
                s = MX_ERROR(MX_ERR_FORMAT, "%s: has no %s:%s", path, pass ? "aux" : "arg", name);
            } else if (!mx_shape_equal(mx_ndarray_shape(l->arrays[k]), mx_ndarray_shape(dst))) {
                s = MX_ERROR(MX_ERR_FORMAT, "%s: %s has shape %s, the network needs %s", path, name,
                             mx_shape_str(mx_ndarray_shape(l->arrays[k]), a, sizeof(a)),
                             mx_shape_str(mx_ndarray_shape(dst), b, sizeof(b)));
            } else {
                s = mx_nd_copy(dst, l->arrays[k]);
            }
        }
    }
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    for (int i = 0; i < t->n_args && s == MX_OK; i++) /* the store holds the weights */
        if (t->param_index[i] >= 0) s = mx_nd_copy(mx_kvstore_stored(t->kv, t->param_index[i]), t->args[i]);
    MX_TRY(s);

    char path[4096];
    snprintf(path, sizeof(path), "%s-%04d.states", prefix, epoch);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (need_states)
            return MX_ERROR(MX_ERR_IO, "%s: cannot open (%s): resuming needs the optimizer state", path, strerror(errno));
        return MX_OK;
    }
    fclose(f);
    mx_ndarray_list st;
    MX_TRY(mx_ndarray_load(t->rt, path, &st));
    int extra = -1;
    for (int i = 0; i < st.count && st.names; i++)
        if (!strcmp(st.names[i], "trainer:state")) extra = i;
    if (extra < 0 || mx_ndarray_size(st.arrays[extra]) != 6 || mx_ndarray_dtype(st.arrays[extra]) != MX_INT64) {
        mx_ndarray_list_free(&st);
        return MX_ERROR(MX_ERR_FORMAT, "%s: not a training state file of this tool", path);
    }
    uint64_t v[6];
    s = mx_ndarray_to_host(st.arrays[extra], v, sizeof(v));
    if (s == MX_OK && (v[0] != STATES_FORMAT || v[1] != (uint64_t)epoch))
        s = MX_ERROR(MX_ERR_FORMAT, "%s: state of epoch %llu in the file of epoch %d", path, (unsigned long long)v[1],
                     epoch);
    if (s == MX_OK) s = mx_rng_set_state(t->rng, v + 2);
    /* The optimizer gets the rest of the list. */
    mx_ndarray *last = st.arrays[extra];
    char *last_name = st.names[extra];
    st.arrays[extra] = st.arrays[st.count - 1];
    st.names[extra] = st.names[st.count - 1];
    st.arrays[st.count - 1] = last;
    st.names[st.count - 1] = last_name;
    st.count--;
    if (s == MX_OK) s = mx_optimizer_set_states(t->optimizer, &st);
    st.count++;
    mx_ndarray_list_free(&st);
    if (s != MX_OK) mx_error_prefix(s, "%s", path);
    return s;
}

/* ---------------------------------------------------------------- loop */

static mx_status run_validation(trainer *t, int epoch)
{
    if (!t->val_it) return MX_OK;
    for (int m = 0; m < t->n_metrics; m++) mx_metric_reset(t->metrics[m]);
    MX_TRY(mx_data_iter_reset(t->val_it));
    mx_ndarray *out = mx_executor_output(t->ex, 0);
    for (int64_t b = 0;; b++) {
        mx_data_batch batch;
        bool has;
        MX_TRY(mx_data_iter_next(t->val_it, &batch, &has));
        if (!has) break;
        MX_TRY(mx_nd_copy(t->args[t->data_arg], batch.data));
        MX_TRY(mx_nd_copy(t->label_copy, batch.label));
        MX_TRY(mx_executor_forward(t->ex, false));
        MX_TRY(mx_nd_copy(t->out_copy, out));
        MX_TRY(update_metrics(t, epoch, b, batch.pad));
    }
    char text[1024], json[1024];
    metric_text(t, true, "Validation-", text, sizeof(text));
    for (int m = 0; m < t->n_metrics; m++) {
        double v;
        const char *name = mx_metric_get_global(t->metrics[m], &v);
        logf_(t, "Epoch[%d] Validation-%s=%f", epoch, name, v);
    }
    if (t->metrics_log) {
        metric_json(t, true, json, sizeof(json));
        fprintf(t->metrics_log, "{\"phase\": \"val\", \"epoch\": %d%s}\n", epoch, json);
        fflush(t->metrics_log);
    }
    (void)text;
    return MX_OK;
}

static mx_status train_epoch(trainer *t, int epoch)
{
    for (int m = 0; m < t->n_metrics; m++) mx_metric_reset(t->metrics[m]);
    mx_ndarray *out = mx_executor_output(t->ex, 0);
    double t_epoch = mx_time_seconds(), t_window = t_epoch;
    int64_t window_samples = 0, disp = t->cfg->fit.disp_batches > 0 ? t->cfg->fit.disp_batches : 20;
    int pending_pad = -1; /* pad of the batch whose output is in out_copy, -1 if none */
    int64_t b = 0;
    for (;; b++) {
        mx_data_batch batch;
        bool has;
        MX_TRY(mx_data_iter_next(t->train_it, &batch, &has));
        if (!has) break;
        MX_TRY(mx_nd_copy(t->args[t->data_arg], batch.data));
        MX_TRY(mx_nd_copy(t->args[t->label_arg], batch.label));
        MX_TRY(mx_executor_forward(t->ex, true));
        MX_TRY(mx_executor_backward(t->ex, NULL));
        for (int i = 0; i < t->n_args; i++) {
            int k = t->param_index[i];
            if (k < 0) continue;
            MX_TRY(mx_kvstore_push(t->kv, k, &t->grads[i], 1, -k));
            MX_TRY(mx_kvstore_pull(t->kv, k, &t->args[i], 1, -k));
        }
        /* Metrics of the previous batch, while this one runs. */
        if (pending_pad >= 0) MX_TRY(update_metrics(t, epoch, b - 1, pending_pad));
        MX_TRY(mx_nd_copy(t->out_copy, out));
        MX_TRY(mx_nd_copy(t->label_copy, t->args[t->label_arg]));
        pending_pad = batch.pad;
        window_samples += t->batch_size - batch.pad;
        if (t->opt->progress) t->opt->progress(t->opt->log_user, epoch, b + 1, t->batches_per_epoch);
        if ((b + 1) % disp == 0) {
            MX_TRY(update_metrics(t, epoch, b, pending_pad));
            pending_pad = -1;
            double now = mx_time_seconds();
            double speed = (double)window_samples / (now - t_window);
            char text[1024];
            metric_text(t, false, "", text, sizeof(text));
            logf_(t, "Epoch[%d] Batch[%lld] Speed: %.2f samples/sec %s", epoch, (long long)(b + 1), speed, text);
            if (t->metrics_log) {
                char json[1024];
                metric_json(t, false, json, sizeof(json));
                fprintf(t->metrics_log,
                        "{\"phase\": \"train\", \"epoch\": %d, \"batch\": %lld, \"samples_per_sec\": %.2f, \"lr\": "
                        "%.9g%s}\n",
                        epoch, (long long)(b + 1), speed, mx_optimizer_learning_rate(t->optimizer), json);
                fflush(t->metrics_log);
            }
            for (int m = 0; m < t->n_metrics; m++) mx_metric_reset_local(t->metrics[m]);
            t_window = now;
            window_samples = 0;
        }
    }
    if (pending_pad >= 0) MX_TRY(update_metrics(t, epoch, b - 1, pending_pad));
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt)));
    double cost = mx_time_seconds() - t_epoch;
    for (int m = 0; m < t->n_metrics; m++) {
        double v;
        const char *name = mx_metric_get_global(t->metrics[m], &v);
        logf_(t, "Epoch[%d] Train-%s=%f", epoch, name, v);
    }
    logf_(t, "Epoch[%d] Time cost=%.3f", epoch, cost);
    if (t->metrics_log) {
        char json[1024];
        metric_json(t, true, json, sizeof(json));
        fprintf(t->metrics_log, "{\"phase\": \"train_epoch\", \"epoch\": %d, \"time\": %.3f, \"batches\": %lld%s}\n",
                epoch, cost, (long long)b, json);
        fflush(t->metrics_log);
    }
    return MX_OK;
}

mx_status mx_train_fit(const mx_config *cfg, const mx_train_options *opt)
{
    trainer *t = mx_calloc(1, sizeof(*t));
    if (!t) return MX_ERR_NOMEM;
    t->cfg = cfg;
    t->opt = opt;
    mx_status s = setup(t);
    if (s == MX_OK && opt->metrics_log) {
        t->metrics_log = fopen(opt->metrics_log, "a");
        if (!t->metrics_log) s = MX_ERROR(MX_ERR_IO, "%s: cannot open for writing: %s", opt->metrics_log, strerror(errno));
    }
    int begin = 0;
    const char *prefix = cfg->fit.model_prefix;
    bool has_prefix = prefix && *prefix;
    if (s == MX_OK && (opt->resume || cfg->fit.load_epoch >= 0)) {
        if (!has_prefix) {
            s = MX_ERROR(MX_ERR_INVALID, "%s: resuming needs fit.model_prefix", cfg->path);
        } else {
            begin = cfg->fit.load_epoch >= 0 ? (int)cfg->fit.load_epoch : mx_checkpoint_latest_epoch(prefix);
            if (begin < 0) {
                if (opt->resume) logf_(t, "no checkpoint %s-NNNN.params yet: starting from scratch", prefix);
                begin = 0;
            } else {
                s = load_checkpoint(t, begin, opt->resume);
                if (s == MX_OK) logf_(t, "Resumed from epoch %d", begin);
                /* Replay the data order of the epochs already done. */
                for (int e = 0; e < begin && s == MX_OK; e++) s = mx_data_iter_reset(t->train_it);
            }
        }
    }
    if (s == MX_OK && opt->time_batches > 0) {
        mx_layer_time *lt;
        int n;
        s = mx_executor_time_layers(t->ex, opt->time_batches, &lt, &n);
        if (s == MX_OK) {
            double fwd = 0, bwd = 0;
            logf_(t, "%-24s %-22s %12s %12s", "layer", "op", "forward ms", "backward ms");
            for (int i = 0; i < n; i++) {
                logf_(t, "%-24s %-22s %12.3f %12.3f", lt[i].name, lt[i].op, lt[i].forward_ms, lt[i].backward_ms);
                fwd += lt[i].forward_ms;
                bwd += lt[i].backward_ms;
            }
            logf_(t, "total: forward %.3f ms, backward %.3f ms per batch of %lld (mean of %d)", fwd, bwd,
                  (long long)t->batch_size, opt->time_batches);
            free(lt);
        }
        teardown(t);
        free(t);
        return s;
    }
    for (int epoch = begin; epoch < cfg->fit.num_epoch && s == MX_OK; epoch++) {
        s = train_epoch(t, epoch);
        if (s == MX_OK) s = run_validation(t, epoch);
        if (s == MX_OK && has_prefix && (epoch + 1) % cfg->fit.save_period == 0) s = save_checkpoint(t, epoch + 1);
        if (s == MX_OK && epoch + 1 < cfg->fit.num_epoch) s = mx_data_iter_reset(t->train_it);
    }
    if (s == MX_OK) s = mx_engine_wait_all(mx_runtime_engine(t->rt));
    teardown(t);
    free(t);
    return s;
}
