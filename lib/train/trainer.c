/*
 * trainer.c - the training loop of mxtrain (MXNet's Module.fit):
 *   bind the network with the iterator's shapes; initialize parameters by
 *   MXNet's name rules, then fine-tune from a file when asked; each batch:
 *   copy it in, forward, backward; every grad_accum batches push every
 *   learnable gradient to the KVStore (whose updater is the optimizer) and
 *   pull the weight back; evaluate [val] each epoch (at its own batch
 *   size); checkpoint every save_period epochs; resume exactly (weights,
 *   optimizer state, schedule position, RNG, data order), also from a
 *   checkpoint written when a stop was requested mid-epoch.
 * Metrics are read one batch behind: the output is copied (through the
 * engine) right after backward, and read while the next batch runs, so the
 * host never stalls the pipeline on the newest batch. When that read finds
 * a NaN or Inf, the batch in flight is run again with every layer checked,
 * to name the first layer that produced it; fit.check_numerics checks every
 * batch that way.
 */
#include "train/trainer.h"

#include "train/group.h"

#include "checkpoint/checkpoint.h"
#include "device/device.h"
#include "kvstore/kvstore.h"
#include "optimizer/loss_scale.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATES_FORMAT 2 /* trainer:state = {format, epoch, batches done in it, rng[4]} */
#define STATE_PREFIX "state:"
#define PATH_BUF (MX_PARAM_STRING_MAX + 64) /* a prefix and a file suffix */

typedef enum arg_role { ARG_DATA, ARG_LABEL, ARG_PARAM, ARG_FROZEN, ARG_OTHER } arg_role;

typedef struct trainer {
    const mx_train_settings *s;
    const mx_config *cfg;
    const mx_train_options *opt;
    mx_runtime *rt;
    mx_rng *rng;
    mx_data_iter *train_it, *val_it;
    int64_t batch_size, grad_accum;
    /* Arguments in mx_graph_list_arguments order, aux states likewise. */
    int n_args, n_aux;
    uint32_t *arg_ids, *aux_ids;
    const char **arg_names, **aux_names;
    arg_role *role;
    int *key;                /* kvstore / optimizer key of a learnable argument, else -1 */
    train_group group;       /* one executor per context */
    mx_context *contexts;    /* fit.ctx as the engine numbers them */
    mx_ndarray **args, **aux;  /* device 0's (borrowed from the group): the weights saved */
    mx_grad_req *reqs;
    int data_arg, label_arg;
    mx_executor *ex;         /* device 0's */
    /* [val] at another batch size: a prediction executor sharing the
     * parameters and aux states (NULL: the training executor serves). */
    mx_executor *val_ex;
    mx_ndarray **val_args;
    mx_optimizer *optimizer;
    mx_kvstore *kv;
    bool graphs_logged;      /* the CUDA graphs line (after the first epoch on GPUs) */
    /* One context and no dist store: the optimizer updates the context's
     * weights with its gradients where they are (MXNet's Module creates no
     * kvstore then, update_on_kvstore false), so a GPU's weights and
     * gradients never travel to the host. Otherwise the store sums the
     * contexts' gradients and holds the weights. */
    bool update_in_place;
    /* Per argument: updated inside the backward pass (update_in_backward);
     * NULL: none. */
    bool *in_backward;
    mx_metric **metrics;
    int n_metrics;
    double *values;          /* per metric, for the log lines */
    /* Under mpirun: this rank's part of [train]/[val], the steps every rank
     * runs per epoch (the most any rank has: the others pad with steps that
     * contribute no gradient), and whether a stop request is to be agreed
     * at the next update. */
    mx_data_iter_spec *train_spec, *val_spec;
    int64_t steps_per_epoch;
    bool agree_stop;
    mx_ndarray *out_copy, *label_copy;         /* the newest training batch's output and labels */
    mx_ndarray *val_out_copy, *val_label_copy; /* validation's */
    FILE *metrics_log;
    int64_t batches_per_epoch, updates_per_epoch;
    int64_t accumulated;     /* batches summed in the gradients since the last update */
    mx_ndarray **push_list, **pull_list; /* one per device, for the store */
    int64_t skip_batches;    /* resuming mid-epoch: batches of the first epoch already done */
    /* Where the training output first went non-finite (epoch -1: not yet). */
    int diverged_epoch;
    int64_t diverged_batch;
    /* A re-run that traces a divergence: every layer checked from batch
     * check_from of epoch `until_epoch`, stopping after batch until_batch;
     * no validation, checkpoints or logs. */
    bool tracing;
    int until_epoch;
    int64_t check_from, until_batch;
    /* fit.profile: the timeline, the file this rank writes, batches trained
     * so far in this run, and whether the window is recording / written. */
    mx_profiler *prof;
    char prof_path[PATH_BUF];
    int64_t prof_batch;
    bool prof_open, prof_done;
    /* fit.dtype float16/bfloat16: the graph the executors bind (the
     * config's with Casts: mx_graph_compute_in; NULL for float32). */
    mx_graph *mixed_graph;
    /* float16: dynamic loss scaling. The scale of the update window under
     * way (set on every executor at its first batch) and the optimizer's
     * own rescale_grad, which each applied update divides by it. */
    bool loss_scaling;
    mx_loss_scaler scaler;
    double window_scale, base_rescale;
} trainer;

/* The graph the executors run. */
static const mx_graph *bound_graph(const trainer *t) { return t->mixed_graph ? t->mixed_graph : t->cfg->graph; }

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

const char *mx_train_interrupted_path(const char *prefix, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s-interrupted.params", prefix);
    if (n < 0 || (size_t)n >= size) buf[0] = '\0'; /* never a truncated name */
    return buf;
}

static bool has_prefix(const trainer *t) { return t->s->fit.model_prefix[0] != '\0'; }

/* Checkpoints are written once per job: by rank 0 under mpirun. */
static bool writes_files(const trainer *t) { return has_prefix(t) && (!t->opt->comm || mx_comm_rank(t->opt->comm) == 0); }

/* A setup problem with a [fit] key: the key's location first. */
static mx_status fit_error(const trainer *t, const char *key, mx_status code)
{
    char where[1024], msg[1024];
    snprintf(msg, sizeof(msg), "%s", mx_last_error());
    mx_config_where(t->cfg, "fit", key, where, sizeof(where));
    return MX_ERROR(code, "%s: %s", where, msg);
}

/* ---------------------------------------------------------------- set-up */

static mx_status profile_setup(trainer *t);
static mx_status update_from_backward(void *ctx, int arg, mx_ndarray *weight, mx_ndarray *grad);

static mx_status make_iter(trainer *t, const char *section, const mx_data_iter_spec *spec, mx_data_iter_spec **mine,
                           mx_data_iter **out)
{
    *out = NULL;
    if (!spec) return MX_OK;
    mx_comm *comm = t->opt->comm;
    if (comm && !mx_data_iter_spec_given(spec, "num_parts") && !mx_data_iter_spec_given(spec, "part_index")) {
        /* Under mpirun each rank reads its own part (the config may choose). */
        char parts[32], index[32];
        snprintf(parts, sizeof(parts), "%d", mx_comm_size(comm));
        snprintf(index, sizeof(index), "%d", mx_comm_rank(comm));
        MX_TRY(mx_data_iter_spec_clone(spec, mine));
        MX_TRY(mx_data_iter_spec_set(*mine, "num_parts", parts));
        MX_TRY(mx_data_iter_spec_set(*mine, "part_index", index));
        spec = *mine;
    }
    mx_status s = mx_data_iter_create_spec(t->rt, spec, out);
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

/* fit.ctx: every context must exist here (GPUs: a CUDA build and a
 * visible device); operators without a kernel for it fail at bind. */
static mx_status check_contexts(const trainer *t)
{
    const mx_train_settings *s = t->s;
    if (mx_device_check_list(s->ctx, s->n_ctx) != MX_OK) return fit_error(t, "ctx", mx_last_status());
    return MX_OK;
}

static mx_status init_params(trainer *t)
{
    mx_status s = MX_OK;
    for (int pass = 0; pass < 2 && s == MX_OK; pass++) {
        int n = pass == 0 ? t->n_args : t->n_aux;
        for (int i = 0; i < n && s == MX_OK; i++) {
            if (pass == 0 && t->role[i] != ARG_PARAM && t->role[i] != ARG_FROZEN) continue;
            uint32_t id = pass == 0 ? t->arg_ids[i] : t->aux_ids[i];
            const char *name = mx_graph_node(t->cfg->graph, id)->name;
            const char *attr = mx_graph_get_attr(t->cfg->graph, id, "__init__");
            mx_initializer *explicit_init = NULL;
            if (attr) s = mx_initializer_create_json(attr, &explicit_init);
            if (s == MX_OK)
                s = mx_initializer_init(t->s->initializer, t->rng, name, explicit_init,
                                        pass == 0 ? t->args[i] : t->aux[i]);
            mx_initializer_free(explicit_init);
        }
    }
    return s;
}

/* Under mpirun: every rank runs as many steps per epoch as the rank with
 * the most batches (parts differ by up to one batch). */
static mx_status agree_steps(trainer *t)
{
    mx_comm *comm = t->opt->comm;
    int n = mx_comm_size(comm);
    int64_t mine = t->batches_per_epoch, *all = mx_calloc((size_t)n + 1, sizeof(int64_t));
    if (!all) return mx_last_status();
    mx_status s = mx_comm_allgather(comm, MX_COMM_WORLD, MX_COMM_INT64, &mine, all, 1, "the batches per epoch");
    for (int r = 0; r < n && s == MX_OK; r++) {
        if (all[r] < 1) {
            char who[256];
            s = MX_ERROR(MX_ERR_INVALID, "%s: [train] has no batch in its part (num_parts %d): fewer samples than ranks x "
                                         "batch_size",
                         mx_comm_rank_str(comm, r, who, sizeof(who)), n);
        }
        if (all[r] > t->steps_per_epoch) t->steps_per_epoch = all[r];
    }
    free(all);
    return s;
}

/* Every device's parameters and aux states as device 0's. */
static mx_status broadcast_weights(trainer *t)
{
    for (int i = 0; i < t->n_args; i++)
        if (t->role[i] == ARG_PARAM || t->role[i] == ARG_FROZEN) MX_TRY(train_group_broadcast(&t->group, i, false));
    for (int i = 0; i < t->n_aux; i++) MX_TRY(train_group_broadcast(&t->group, i, true));
    return MX_OK;
}

/* The layer that takes variable `id` as an input ("?" if none does). */
static const char *layer_of(const trainer *t, uint32_t id)
{
    for (int li = 0; li < t->cfg->n_layers; li++) {
        const mx_node *ln = mx_graph_node(t->cfg->graph, t->cfg->layers[li].node);
        for (int j = 0; j < ln->n_inputs; j++)
            if (ln->inputs[j].node == id) return t->cfg->layers[li].name;
    }
    return "?";
}

static const char *list_name_of(const void *l, uint32_t i) { return ((const mx_ndarray_list *)l)->names[i]; }

/* Copies the arrays of a .params file's lists into the learnable arguments
 * and aux states of the same names. Missing names are an error when
 * require_all (a checkpoint of this network), else counted and named in
 * `missing` (fine-tuning); another shape is always an error naming the
 * layer and both shapes. */
static mx_status copy_weights(trainer *t, const char *path, const mx_ndarray_list *args, const mx_ndarray_list *aux,
                              bool require_all, int *copied, int *n_missing, char *missing, size_t missing_size)
{
    *copied = *n_missing = 0;
    if (missing_size) missing[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const mx_ndarray_list *l = pass ? aux : args;
        int n = pass ? t->n_aux : t->n_args;
        /* By name through an index: a scan of the file per parameter is
         * quadratic in a deep net's 100,000 parameters. */
        mx_name_index in_file;
        mx_name_index_init(&in_file, list_name_of, l);
        MX_TRY(mx_name_index_reserve(&in_file, (uint32_t)l->count, (uint32_t)l->count));
        mx_status s = MX_OK;
        for (int i = 0; i < n && s == MX_OK; i++) {
            if (!pass && t->role[i] != ARG_PARAM && t->role[i] != ARG_FROZEN) continue;
            const char *name = pass ? t->aux_names[i] : t->arg_names[i];
            mx_ndarray *dst = pass ? t->aux[i] : t->args[i];
            uint32_t found = mx_name_index_find(&in_file, name);
            int k = found == MX_NAME_NONE ? l->count : (int)found;
            if (k == l->count) {
                if (require_all) {
                    s = MX_ERROR(MX_ERR_FORMAT, "%s: has no %s:%s", path, pass ? "aux" : "arg", name);
                    break;
                }
                size_t used = strlen(missing);
                if (used + 1 < missing_size)
                    snprintf(missing + used, missing_size - used, "%s%s", *n_missing ? ", " : "", name);
                (*n_missing)++;
                continue;
            }
            if (!mx_shape_equal(mx_ndarray_shape(l->arrays[k]), mx_ndarray_shape(dst))) {
                char a[160], b[160];
                s = MX_ERROR(MX_ERR_INVALID, "%s: %s of layer '%s' has shape %s in the file, the network needs %s", path,
                             name, layer_of(t, pass ? t->aux_ids[i] : t->arg_ids[i]),
                             mx_shape_str(mx_ndarray_shape(l->arrays[k]), a, sizeof(a)),
                             mx_shape_str(mx_ndarray_shape(dst), b, sizeof(b)));
                break;
            }
            s = mx_nd_copy(dst, l->arrays[k]);
            if (s == MX_OK) (*copied)++;
        }
        mx_name_index_free(&in_file);
        MX_TRY(s);
    }
    return MX_OK;
}

/* fit.finetune_from: every parameter and aux state whose name is in the
 * file starts from it; the others keep their initialization. */
static mx_status finetune(trainer *t)
{
    const char *path = t->s->fit.finetune_from;
    mx_ndarray_list args, aux;
    mx_status s = mx_checkpoint_load_file(t->rt, path, &args, &aux, NULL);
    if (s != MX_OK) return fit_error(t, "finetune_from", s);
    int loaded, fresh;
    char fresh_names[512];
    s = copy_weights(t, path, &args, &aux, false, &loaded, &fresh, fresh_names, sizeof(fresh_names));
    if (s == MX_OK) s = broadcast_weights(t);
    int unused = args.count + aux.count - loaded;
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    if (s != MX_OK) return fit_error(t, "finetune_from", s);
    logf_(t, "Fine-tuning from %s: %d arrays loaded, %d initialized%s%s%s, %d in the file not used", path, loaded,
          fresh, fresh ? " (" : "", fresh_names, fresh ? ")" : "", unused);
    return MX_OK;
}

static double attr_double(const mx_graph *g, uint32_t id, const char *key, double fallback)
{
    const char *v = mx_graph_get_attr(g, id, key);
    return v ? strtod(v, NULL) : fallback;
}

static mx_status make_optimizer(trainer *t)
{
    /* dist_sync sums the gradients of every rank's batch (MXNet's Module
     * rescales by batch_size * num_workers); a parameter server (dist_async)
     * applies one rank's gradient per update, so every rank's updates count
     * (MXNet's server steps its schedule at every push, too). */
    int64_t workers = mx_kvstore_num_workers(t->kv);
    bool server = mx_kvstore_has_server(t->kv);
    int64_t per_epoch = t->updates_per_epoch > 0 ? t->updates_per_epoch : 1;
    mx_optimizer_run run = {.samples_per_update = t->batch_size * t->grad_accum * (server ? 1 : workers),
                            .updates_per_epoch = per_epoch * (server ? workers : 1),
                            .num_epoch = t->s->fit.num_epoch};
    MX_TRY(mx_optimizer_create_spec(t->rt, &t->s->optimizer, &run, &t->optimizer));
    for (int i = 0; i < t->n_args; i++) {
        int k = t->key[i];
        if (k < 0) continue;
        uint32_t id = t->arg_ids[i];
        MX_TRY(mx_optimizer_set_param_name(t->optimizer, k, t->arg_names[i]));
        if (mx_graph_get_attr(t->cfg->graph, id, "__lr_mult__"))
            MX_TRY(mx_optimizer_set_lr_mult(t->optimizer, k, attr_double(t->cfg->graph, id, "__lr_mult__", 1)));
        if (mx_graph_get_attr(t->cfg->graph, id, "__wd_mult__"))
            MX_TRY(mx_optimizer_set_wd_mult(t->optimizer, k, attr_double(t->cfg->graph, id, "__wd_mult__", 1)));
    }
    MX_TRY(mx_kvstore_set_optimizer(t->kv, t->optimizer));
    return MX_OK;
}

/* fit.cuda_graph, unless fit.profile asks for every layer's own event on
 * the timeline (a graph is one operation there). */
static bool uses_cuda_graphs(const mx_train_settings *s) { return s->fit.cuda_graph && !s->fit.profile[0]; }

/* After the first epoch on GPUs: which passes ran as CUDA graphs
 * (fit.cuda_graph), and why the others did not. */
static void log_cuda_graphs(const trainer *t)
{
    const mx_executor *ex = t->group.dev[0].ex;
    const char *fwd = mx_executor_graph_refusal(ex, false, true), *bwd = mx_executor_graph_refusal(ex, true, true);
    const char *val = t->val_ex ? mx_executor_graph_refusal(t->val_ex, false, false) : "no validation";
    const int64_t launches = mx_executor_graph_launches(ex) + (t->val_ex ? mx_executor_graph_launches(t->val_ex) : 0);
    logf_(t, "CUDA graphs: %lld passes launched as graphs; forward: %s; backward: %s; validation: %s",
          (long long)launches, *fwd ? fwd : "as a graph", *bwd ? bwd : "as a graph", *val ? val : "as a graph");
}

static mx_status make_metrics(trainer *t)
{
    t->metrics = mx_calloc((size_t)t->s->n_metrics + 1, sizeof(mx_metric *));
    t->values = mx_calloc((size_t)t->s->n_metrics + 1, sizeof(double));
    if (!t->metrics || !t->values) return mx_last_status();
    for (int i = 0; i < t->s->n_metrics; i++) {
        MX_TRY(mx_metric_create(t->s->metrics[i].name, &t->s->metrics[i].params, &t->metrics[i]));
        t->n_metrics++;
    }
    return MX_OK;
}

/* [val] at its own batch size: a prediction executor over the same
 * parameter and aux arrays (MXNet's Module shares them when it reshapes). */
static mx_status bind_validation(trainer *t, const mx_shape *vd, const mx_shape *vl)
{
    t->val_args = mx_calloc((size_t)t->n_args + 1, sizeof(mx_ndarray *));
    if (!t->val_args) return mx_last_status();
    for (int i = 0; i < t->n_args; i++) {
        if (i == t->data_arg || i == t->label_arg) {
            MX_TRY(mx_ndarray_create(t->rt, i == t->data_arg ? *vd : *vl, MX_FLOAT32, t->group.dev[0].ctx,
                                     &t->val_args[i]));
            MX_TRY(mx_nd_fill(t->val_args[i], 0.0)); /* prediction never reads the label; keep it defined */
        } else
            t->val_args[i] = mx_ndarray_retain(t->args[i]);
    }
    mx_bind_config bc = {.ctx = t->group.dev[0].ctx, .args = t->val_args, .aux = t->aux, .for_training = false,
                         .rng = t->rng, .cuda_graph = uses_cuda_graphs(t->s)};
    return mx_executor_bind(t->rt, bound_graph(t), &bc, &t->val_ex);
}

static mx_status setup(trainer *t)
{
    const mx_train_settings *st = t->s;
    const mx_config *cfg = t->cfg;
    const mx_graph *g = cfg->graph;
    if (!st->train) return MX_ERROR(MX_ERR_INVALID, "%s: there is no [train] section", cfg->path);
    uint32_t label_id;
    MX_TRY(find_label(g, &label_id));
    MX_TRY(check_contexts(t));
    if (has_prefix(t)) MX_TRY(mx_checkpoint_prepare_dir(st->fit.model_prefix));
    t->grad_accum = st->fit.grad_accum;
    const mx_dtype dtype = mx_train_settings_dtype(st);
    if (dtype != MX_FLOAT32) {
        if (mx_graph_compute_in(g, dtype, &t->mixed_graph) != MX_OK) return fit_error(t, "dtype", mx_last_status());
        t->loss_scaling = dtype == MX_FLOAT16;
        logf_(t, "Mixed precision: layers compute in %s, with float32 weights, BatchNorm statistics and loss%s%s",
              mx_dtype_name(dtype), t->loss_scaling ? "; dynamic loss scaling" : "",
              st->ctx[0].dev_type == MX_DEV_CPU ? " (on the CPU each layer runs in float32 between half-precision "
                                                  "tensors: slower than float32)"
                                                : "");
    }

    mx_engine_config ec = mx_engine_config_default();
    /* Several CPU contexts: each gets its share of the cores, so the
     * replicas really run side by side. */
    if (st->n_ctx > 1 && st->ctx[0].dev_type == MX_DEV_CPU) ec.cpu_contexts = st->n_ctx;
    /* Under mpirun the ranks of a host share its cores (unless the user set
     * the counts): each takes its share, so N ranks do not run N x cores
     * threads. */
    if (t->opt->comm && mx_comm_local_size(t->opt->comm) > 1) {
        int share = mx_threadpool_default_size() / mx_comm_local_size(t->opt->comm);
        if (share < 1) share = 1;
        if (!getenv("OMP_NUM_THREADS")) ec.kernel_threads = share;
        if (!getenv("MXNET_CPU_WORKER_NTHREADS")) ec.cpu_workers = share;
    }
    MX_TRY(mx_runtime_create(&ec, &t->rt));
    /* Batches bound for GPUs are filled in page-locked memory (MXNet's
     * cpu_pinned), so their copies run at the DMA's speed. */
    if (st->ctx[0].dev_type == MX_DEV_GPU) MX_TRY(mx_runtime_set_host_context(t->rt, mx_cpu_pinned()));
    MX_TRY(mx_rng_create(t->rt, (uint64_t)st->fit.seed, &t->rng));
    /* Before any data is read: a store this build lacks is a config problem. */
    if (t->opt->comm && !mx_kvstore_type_is_dist(st->fit.kvstore)) {
        MX_ERROR(MX_ERR_INVALID, "'%s' under mpirun would train %d independent copies: use dist_sync, "
                                 "dist_sync_device or dist_async",
                 st->fit.kvstore, mx_comm_size(t->opt->comm));
        return fit_error(t, "kvstore", MX_ERR_INVALID);
    }
    mx_kvstore_options ko = {.comm = t->opt->comm, .fusion_bytes = (size_t)st->fit.fusion_bytes};
    /* One context and no dist store: MXNet's Module makes no kvstore at all
     * and the weights are updated in place (update_in_place), so a
     * 'device' store (the shipped GPU configs' choice) needs nothing a
     * 'local' one lacks; the local store then only answers the trainer's
     * questions (one worker, no server). */
    t->update_in_place = st->n_ctx == 1 && !mx_kvstore_type_is_dist(st->fit.kvstore);
    if (mx_kvstore_create_opts(t->rt, t->update_in_place ? "local" : st->fit.kvstore, &ko, &t->kv) != MX_OK)
        return fit_error(t, "kvstore", mx_last_status());
    MX_TRY(profile_setup(t));
    MX_TRY(make_iter(t, "train", st->train, &t->train_spec, &t->train_it));
    MX_TRY(make_iter(t, "val", st->val, &t->val_spec, &t->val_it));
    mx_shape data_shape = mx_data_iter_data_shape(t->train_it), label_shape = mx_data_iter_label_shape(t->train_it);
    t->batch_size = data_shape.dims[0];
    t->batches_per_epoch = mx_data_iter_num_batches(t->train_it);
    t->steps_per_epoch = t->batches_per_epoch;
    if (t->opt->comm) MX_TRY(agree_steps(t));
    t->updates_per_epoch = t->steps_per_epoch > 0 ? (t->steps_per_epoch + t->grad_accum - 1) / t->grad_accum : -1;

    const char *names[2] = {cfg->inputs[0], mx_graph_node(g, label_id)->name};
    mx_shape shapes[2] = {data_shape, label_shape};
    mx_graph_shapes sh; /* the whole batch's shapes: errors located at the config's layer */
    MX_TRY(mx_config_infer_shapes(cfg, names, shapes, 2, &sh));
    mx_graph_shapes_free(&sh);
    size_t cap = (size_t)mx_graph_num_nodes(g) + 1;
    t->arg_ids = mx_malloc(cap * sizeof(uint32_t));
    t->aux_ids = mx_malloc(cap * sizeof(uint32_t));
    mx_status s = t->arg_ids && t->aux_ids ? MX_OK : mx_last_status();
    if (s == MX_OK) {
        t->n_args = mx_graph_list_arguments(g, t->arg_ids);
        t->n_aux = mx_graph_list_aux(g, t->aux_ids);
        size_t na = (size_t)t->n_args + 1, nx = (size_t)t->n_aux + 1;
        t->arg_names = mx_calloc(na, sizeof(char *));
        t->aux_names = mx_calloc(nx, sizeof(char *));
        t->role = mx_calloc(na, sizeof(arg_role));
        t->key = mx_calloc(na, sizeof(int));
        t->reqs = mx_calloc(na, sizeof(mx_grad_req));
        if (!t->arg_names || !t->aux_names || !t->role || !t->key || !t->reqs) s = mx_last_status();
    }
    t->data_arg = t->label_arg = -1;
    int n_keys = 0;
    for (int i = 0; i < t->n_args && s == MX_OK; i++) {
        uint32_t id = t->arg_ids[i];
        const char *name = mx_graph_node(g, id)->name;
        t->arg_names[i] = name;
        t->key[i] = -1;
        if (!strcmp(name, names[0])) {
            t->data_arg = i, t->role[i] = ARG_DATA;
            continue;
        }
        if (id == label_id) {
            t->label_arg = i, t->role[i] = ARG_LABEL;
            continue;
        }
        /* Other data inputs ([net] inputs) are not supported by one iterator. */
        for (int k = 1; k < cfg->n_inputs && s == MX_OK; k++)
            if (!strcmp(name, cfg->inputs[k]))
                s = MX_ERROR(MX_ERR_UNSUPPORTED, "%s: input '%s': training feeds only one data input", cfg->path, name);
        if (mx_train_settings_fixed(st, name)) {
            t->role[i] = ARG_FROZEN; /* no gradient: the executor prunes what only it needed */
            continue;
        }
        t->role[i] = ARG_PARAM;
        t->key[i] = n_keys++;
        t->reqs[i] = t->grad_accum > 1 ? MX_GRAD_ADD : MX_GRAD_WRITE;
    }
    /* Updates in place on the CPU, one batch per update: each parameter's
     * update runs inside the backward pass as soon as its gradient is
     * final, and the gradient lives in the executor's plan, sharing memory
     * with tensors dead by then, instead of in an array of its own for the
     * whole step (ResNet-50: 98 MiB). Same arithmetic, so the same bits.
     * MXC_UPDATE_IN_BACKWARD=0 keeps the gradients and updates after the
     * pass. */
    if (s == MX_OK && mx_train_settings_update_in_backward(st, NULL)) {
        t->in_backward = mx_calloc((size_t)t->n_args + 1, sizeof(bool));
        if (!t->in_backward) s = mx_last_status();
        for (int i = 0; i < t->n_args && s == MX_OK; i++) t->in_backward[i] = t->role[i] == ARG_PARAM;
    }
    for (int i = 0; i < t->n_aux && s == MX_OK; i++) t->aux_names[i] = mx_graph_node(g, t->aux_ids[i])->name;
    MX_TRY(s);
    if (t->data_arg < 0 || t->label_arg < 0)
        return MX_ERROR(MX_ERR_INVALID, "%s: the network does not read '%s'", cfg->path, names[t->data_arg < 0 ? 0 : 1]);
    /* One executor per context, each on its rows of the batch. */
    /* CPU ids are logical: cpu:2-3 runs as cpu(0), cpu(1) of the engine. */
    t->contexts = mx_calloc((size_t)st->n_ctx, sizeof(mx_context));
    if (!t->contexts) return mx_last_status();
    for (int i = 0; i < st->n_ctx; i++) t->contexts[i] = st->ctx[i].dev_type == MX_DEV_CPU ? (mx_context){MX_DEV_CPU, i} : st->ctx[i];
    train_group_config gc = {.rt = t->rt, .g = bound_graph(t), .ctx = t->contexts, .n_ctx = st->n_ctx,
                             .work_load = st->work_load, .data_name = names[0], .label_name = names[1],
                             .data_shape = data_shape, .label_shape = label_shape, .reqs = t->reqs, .rng = t->rng,
                             /* checked runs see every layer's output */
                             .no_folding = t->tracing || st->fit.check_numerics, .cuda_graph = uses_cuda_graphs(st),
                             .update_in_backward = t->in_backward, .update = update_from_backward, .update_ctx = t};
    s = train_group_bind(&gc, &t->group);
    if (s != MX_OK) return st->n_ctx > 1 ? fit_error(t, "ctx", s) : s;
    t->args = t->group.dev[0].args;
    t->aux = t->group.dev[0].aux;
    t->ex = t->group.dev[0].ex;
    t->push_list = mx_calloc((size_t)t->group.n, sizeof(mx_ndarray *));
    t->pull_list = mx_calloc((size_t)t->group.n, sizeof(mx_ndarray *));
    if (!t->push_list || !t->pull_list) return mx_last_status();
    for (int k = 0; k < t->group.n && t->grad_accum > 1; k++)
        for (int i = 0; i < t->n_args; i++)
            if (t->group.dev[k].grads[i]) MX_TRY(mx_nd_fill(t->group.dev[k].grads[i], 0.0));
    /* Device 0 is initialized; the others start from its values. */
    MX_TRY(init_params(t));
    MX_TRY(broadcast_weights(t));
    if (st->fit.check_numerics) MX_TRY(train_group_set_check_numerics(&t->group, true));
    if (t->val_it) {
        mx_shape vd = mx_data_iter_data_shape(t->val_it), vl = mx_data_iter_label_shape(t->val_it);
        if (t->group.n > 1 || !mx_shape_equal(&vd, &data_shape) || !mx_shape_equal(&vl, &label_shape))
            MX_TRY(bind_validation(t, &vd, &vl));
        mx_executor *vex = t->val_ex ? t->val_ex : t->ex;
        MX_TRY(mx_ndarray_create(t->rt, *mx_ndarray_shape(mx_executor_output(vex, 0)), MX_FLOAT32, mx_cpu(),
                                 &t->val_out_copy));
        MX_TRY(mx_ndarray_create(t->rt, vl, MX_FLOAT32, mx_cpu(), &t->val_label_copy));
    }
    MX_TRY(make_optimizer(t));
    if (t->loss_scaling) {
        mx_loss_scaler_init(&t->scaler);
        t->base_rescale = mx_optimizer_get_params(t->optimizer)->rescale_grad;
    }
    for (int i = 0; i < t->n_args && !t->update_in_place; i++)
        if (t->key[i] >= 0) MX_TRY(mx_kvstore_init(t->kv, t->key[i], t->args[i]));
    MX_TRY(make_metrics(t));
    /* The whole batch's output, gathered from the devices' rows. */
    mx_shape os = *mx_ndarray_shape(mx_executor_output(t->ex, 0));
    os.dims[0] = t->batch_size;
    MX_TRY(mx_ndarray_create(t->rt, os, MX_FLOAT32, mx_cpu(), &t->out_copy));
    MX_TRY(mx_ndarray_create(t->rt, label_shape, MX_FLOAT32, mx_cpu(), &t->label_copy));
    return MX_OK;
}

/* ---------------------------------------------------------------- profile */

/* fit.profile: the file (under mpirun FILE.rankR.json), a profiler tagged
 * with the rank, attached to the engine and the communication thread. The
 * file's directory is checked now, not after the run. */
static mx_status profile_setup(trainer *t)
{
    const char *file = t->s->fit.profile;
    if (!file[0] || t->tracing) return MX_OK;
    mx_comm *comm = t->opt->comm;
    int rank = comm ? mx_comm_rank(comm) : 0;
    if (comm) {
        const char *slash = strrchr(file, '/'), *dot = strrchr(file, '.');
        size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - file) : strlen(file);
        snprintf(t->prof_path, sizeof(t->prof_path), "%.*s.rank%d%s", (int)stem, file, rank, file + stem);
    } else {
        snprintf(t->prof_path, sizeof(t->prof_path), "%s", file);
    }
    char probe[PATH_BUF + 16];
    snprintf(probe, sizeof(probe), "%s.tmp", t->prof_path);
    FILE *f = fopen(probe, "w");
    if (!f) {
        MX_ERROR(MX_ERR_INVALID, "cannot write %s: %s", t->prof_path, strerror(errno));
        return fit_error(t, "profile", MX_ERR_INVALID);
    }
    fclose(f);
    remove(probe);
    char name[128], who[96];
    if (comm) snprintf(name, sizeof(name), "mxtrain %s", mx_comm_rank_str(comm, rank, who, sizeof(who)));
    else snprintf(name, sizeof(name), "mxtrain");
    MX_TRY(mx_profiler_create(rank, name, &t->prof));
    mx_engine_set_profiler(mx_runtime_engine(t->rt), t->prof);
    if (comm) mx_comm_set_profiler(comm, t->prof);
    return MX_OK;
}

/* Before a training batch: opens the window at its first batch, once
 * everything before has finished (so only its batches are recorded). */
static mx_status profile_batch_begin(trainer *t)
{
    if (!t->prof || t->prof_open || t->prof_done || t->prof_batch != t->s->profile_first) return MX_OK;
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt)));
    mx_profiler_set_active(t->prof, true);
    t->prof_open = true;
    return MX_OK;
}

/* Closes the window: waits for what was pushed, writes the file and logs
 * the overlap of communication and computation (every rank's, gathered:
 * a collective that every rank reaches at the same batch). */
static mx_status profile_finish(trainer *t)
{
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt)));
    mx_profiler_set_active(t->prof, false);
    t->prof_open = false;
    t->prof_done = true;
    mx_profile_summary sum;
    MX_TRY(mx_profiler_summary(t->prof, &sum));
    mx_status ws = mx_profiler_write(t->prof, t->prof_path);
    if (ws != MX_OK) return mx_error_prefix(ws, "fit.profile");
    mx_comm *comm = t->opt->comm;
    int n = comm ? mx_comm_size(comm) : 1;
    int64_t mine[2] = {sum.comm_ns, sum.overlap_ns};
    int64_t *all = mx_calloc((size_t)n * 2, sizeof(int64_t));
    if (!all) return mx_last_status();
    mx_status s = MX_OK;
    if (comm) s = mx_comm_allgather(comm, MX_COMM_WORLD, MX_COMM_INT64, mine, all, 2, "the profile summaries");
    else memcpy(all, mine, sizeof(mine));
    if (s == MX_OK) {
        int64_t comm_ns = 0, overlap_ns = 0;
        char per_rank[1024] = "";
        size_t used = 0;
        for (int r = 0; r < n; r++) {
            comm_ns += all[2 * r];
            overlap_ns += all[2 * r + 1];
            if (n > 1 && used < sizeof(per_rank))
                used += (size_t)snprintf(per_rank + used, sizeof(per_rank) - used, "%srank %d %.3f", r ? ", " : " (",
                                         r, all[2 * r] > 0 ? (double)all[2 * r + 1] / (double)all[2 * r] : 0.0);
        }
        if (n > 1 && used < sizeof(per_rank)) snprintf(per_rank + used, sizeof(per_rank) - used, ")");
        const char *file = comm ? "one file per rank, e.g. " : "";
        logf_(t, "Profile: %lld events (%lld dropped) in %s%s", (long long)sum.events, (long long)sum.dropped, file,
              t->prof_path);
        if (comm_ns > 0)
            logf_(t, "Profile: communication hidden behind computation: %.3f of %.3f ms%s",
                  (double)overlap_ns / (double)comm_ns, (double)comm_ns / 1e6, per_rank);
        else
            logf_(t, "Profile: no communication in the profiled batches");
    }
    free(all);
    return s;
}

/* After a training batch: closes the window at its last batch. */
static mx_status profile_batch_end(trainer *t)
{
    if (!t->prof) return MX_OK;
    bool close = t->prof_open && t->s->profile_last >= 0 && t->prof_batch >= t->s->profile_last;
    t->prof_batch++;
    return close ? profile_finish(t) : MX_OK;
}

static void teardown(trainer *t)
{
    if (t->rt) mx_engine_wait_all(mx_runtime_engine(t->rt));
    if (t->prof) {
        mx_engine_set_profiler(mx_runtime_engine(t->rt), NULL);
        if (t->opt->comm) mx_comm_set_profiler(t->opt->comm, NULL);
    }
    train_group_free(&t->group);
    mx_executor_free(t->val_ex);
    /* dist_async's server thread may still hold the profiler (kvstore.h):
     * it is freed once the store has stopped it. */
    mx_kvstore_free(t->kv);
    mx_profiler_free(t->prof);
    t->prof = NULL;
    mx_optimizer_free(t->optimizer);
    for (int i = 0; i < t->n_metrics; i++) mx_metric_free(t->metrics[i]);
    free(t->metrics);
    free(t->values);
    mx_data_iter_spec_free(t->train_spec);
    mx_data_iter_spec_free(t->val_spec);
    for (int i = 0; i < t->n_args && t->val_args; i++) mx_ndarray_free(t->val_args[i]);
    mx_ndarray_free(t->out_copy);
    mx_ndarray_free(t->label_copy);
    mx_ndarray_free(t->val_out_copy);
    mx_ndarray_free(t->val_label_copy);
    mx_data_iter_free(t->train_it);
    mx_data_iter_free(t->val_it);
    mx_rng_free(t->rng);
    if (t->metrics_log) fclose(t->metrics_log);
    mx_runtime_free(t->rt);
    free(t->arg_ids);
    free(t->aux_ids);
    free(t->arg_names);
    free(t->aux_names);
    free(t->role);
    free(t->key);
    free(t->reqs);
    free(t->in_backward);
    free(t->val_args);
    free(t->push_list);
    free(t->pull_list);
    free(t->contexts);
    mx_graph_free(t->mixed_graph);
}

/* ---------------------------------------------------------------- metrics */

/* Reads the copied output and labels, checks for NaN, updates metrics. */
static mx_status update_metrics(trainer *t, mx_ndarray *out_copy, mx_ndarray *label_copy, int epoch, int64_t batch,
                                int pad, bool training)
{
    size_t out_bytes = mx_ndarray_nbytes(out_copy), label_bytes = mx_ndarray_nbytes(label_copy);
    float *out = mx_malloc(out_bytes), *labels = mx_malloc(label_bytes);
    mx_status s = (out && labels) ? MX_OK : MX_ERR_NOMEM;
    if (s == MX_OK) s = mx_ndarray_to_host(out_copy, out, out_bytes);
    if (s == MX_OK) s = mx_ndarray_to_host(label_copy, labels, label_bytes);
    for (size_t i = 0; s == MX_OK && i < out_bytes / sizeof(float); i++)
        if (!isfinite(out[i])) {
            char what[256];
            snprintf(what, sizeof(what), "training diverged: the %s output became %s at epoch %d, batch %lld",
                     training ? "training" : "validation", isnan(out[i]) ? "NaN" : "infinite", epoch, (long long)batch);
            if (training && t->diverged_epoch < 0) {
                t->diverged_epoch = epoch;
                t->diverged_batch = batch;
            }
            s = MX_ERROR(MX_ERR_RUNTIME, "%s", what);
        }
    mx_shape os = *mx_ndarray_shape(out_copy), ls = *mx_ndarray_shape(label_copy);
    os.dims[0] -= pad; /* padding rows are not samples */
    ls.dims[0] -= pad;
    for (int m = 0; m < t->n_metrics && s == MX_OK && os.dims[0] > 0; m++)
        s = mx_metric_update(t->metrics[m], labels, &ls, out, &os);
    free(out);
    free(labels);
    return s;
}

/* Each metric's value since the last local (or global) reset; under
 * mpirun summed over all ranks first (a collective: every rank calls it at
 * the same point), so rank 0 logs the metric of the global batch. */
static mx_status metric_values(trainer *t, bool global, double *values)
{
    double *sums = mx_calloc(2 * (size_t)t->n_metrics + 1, sizeof(double));
    if (!sums) return mx_last_status();
    for (int m = 0; m < t->n_metrics; m++) {
        double ls, lc, gs, gc;
        mx_metric_sums(t->metrics[m], &ls, &lc, &gs, &gc);
        sums[2 * m] = global ? gs : ls;
        sums[2 * m + 1] = global ? gc : lc;
    }
    mx_status s = MX_OK;
    if (t->opt->comm) s = mx_kvstore_wait_comm(t->kv); /* the store's collectives come first on every rank */
    if (s == MX_OK && t->opt->comm)
        s = mx_comm_allreduce(t->opt->comm, MX_COMM_WORLD, MX_COMM_FLOAT64, sums, 2 * (size_t)t->n_metrics,
                              "the metrics");
    for (int m = 0; m < t->n_metrics && s == MX_OK; m++) values[m] = sums[2 * m + 1] > 0 ? sums[2 * m] / sums[2 * m + 1] : NAN;
    free(sums);
    return s;
}

static void metric_json(trainer *t, const double *values, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int m = 0; m < t->n_metrics && used < size; m++) {
        int n = snprintf(buf + used, size - used, ", \"%s\": %.9g", mx_metric_get_name(t->metrics[m]),
                         isfinite(values[m]) ? values[m] : -1.0);
        if (n > 0) used += (size_t)n;
    }
}

static void metric_text(trainer *t, const double *values, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int m = 0; m < t->n_metrics && used < size; m++) {
        int n = snprintf(buf + used, size - used, "%s%s=%f", m ? " " : "", mx_metric_get_name(t->metrics[m]), values[m]);
        if (n > 0) used += (size_t)n;
    }
}

/* ---------------------------------------------------------------- checkpoints */

/* What a checkpoint holds: the learnable and frozen arguments (every
 * device has the same) and the aux states, averaged over the devices as
 * MXNet's Module.get_params does (each device keeps its own moving
 * statistics). The lists are the caller's: free with free_weight_lists. */
typedef struct weight_lists {
    mx_named_arrays args, aux;
    const char **names;
    mx_ndarray **arrays;
    mx_ndarray **averaged; /* NULL with one device: aux is device 0's */
} weight_lists;

static void free_weight_lists(trainer *t, weight_lists *w)
{
    for (int i = 0; w->averaged && i < t->n_aux; i++) mx_ndarray_free(w->averaged[i]);
    free(w->averaged);
    free(w->names);
    free(w->arrays);
    memset(w, 0, sizeof(*w));
}

static mx_status make_weight_lists(trainer *t, weight_lists *w)
{
    memset(w, 0, sizeof(*w));
    w->names = mx_calloc((size_t)t->n_args + 1, sizeof(char *));
    w->arrays = mx_calloc((size_t)t->n_args + 1, sizeof(mx_ndarray *));
    if (!w->names || !w->arrays) return mx_last_status();
    int n = 0;
    /* A parameter server holds the authoritative weights (rank 0, which
     * writes the files, is its rank); the workers' copies lag behind. */
    bool server = mx_kvstore_has_server(t->kv);
    for (int i = 0; i < t->n_args; i++)
        if (t->role[i] == ARG_PARAM || t->role[i] == ARG_FROZEN) {
            w->names[n] = t->arg_names[i];
            w->arrays[n++] = server && t->key[i] >= 0 ? mx_kvstore_stored(t->kv, t->key[i]) : t->args[i];
        }
    w->args = (mx_named_arrays){n, w->names, w->arrays};
    w->aux = (mx_named_arrays){t->n_aux, t->aux_names, t->aux};
    if (t->group.n == 1) return MX_OK;
    w->averaged = mx_calloc((size_t)t->n_aux + 1, sizeof(mx_ndarray *));
    if (!w->averaged) return mx_last_status();
    for (int i = 0; i < t->n_aux; i++) {
        MX_TRY(mx_ndarray_create(t->rt, *mx_ndarray_shape(t->aux[i]), MX_FLOAT32, mx_cpu(), &w->averaged[i]));
        MX_TRY(mx_nd_copy(w->averaged[i], t->aux[i]));
        for (int d = 1; d < t->group.n; d++)
            MX_TRY(mx_nd_add(w->averaged[i], w->averaged[i], t->group.dev[d].aux[i]));
        MX_TRY(mx_nd_binary_scalar(MX_OP_MUL, w->averaged[i], w->averaged[i], 1.0 / t->group.n, false));
    }
    w->aux.arrays = w->averaged;
    return MX_OK;
}

/* The optimizer's state plus ours ("trainer:state": where we are and the
 * generator), names prefixed by `prefix`. The list and its names are the
 * caller's (free with mx_ndarray_list_free). */
static mx_status training_state(trainer *t, int epoch, int64_t batch, const char *prefix, mx_ndarray_list *out)
{
    memset(out, 0, sizeof(*out));
    mx_ndarray_list states;
    /* The live arrays, not copies: both callers write the list out at once
     * under the updater lock, so no update moves them meanwhile. */
    MX_TRY(mx_optimizer_view_states(t->optimizer, &states));
    mx_ndarray *extra = NULL;
    mx_status s = mx_ndarray_create(t->rt, MX_SHAPE(7), MX_INT64, mx_cpu(), &extra);
    if (s == MX_OK) s = mx_engine_wait_var(mx_runtime_engine(t->rt), mx_rng_var(t->rng));
    if (s == MX_OK) {
        uint64_t v[7] = {STATES_FORMAT, (uint64_t)epoch, (uint64_t)batch};
        mx_rng_get_state(t->rng, v + 3);
        s = mx_ndarray_from_host(extra, v, sizeof(v));
    }
    /* float16: the loss scaler, so a resumed run scales as this one. */
    mx_ndarray *scaler = NULL;
    if (s == MX_OK && t->loss_scaling)
        s = mx_ndarray_create(t->rt, MX_SHAPE(MX_LOSS_SCALER_STATE), MX_FLOAT64, mx_cpu(), &scaler);
    if (s == MX_OK && scaler) {
        double v[MX_LOSS_SCALER_STATE];
        mx_loss_scaler_save(&t->scaler, v);
        s = mx_ndarray_from_host(scaler, v, sizeof(v));
    }
    int n = states.count + 1 + (scaler != NULL);
    out->arrays = mx_calloc((size_t)n, sizeof(mx_ndarray *));
    out->names = mx_calloc((size_t)n, sizeof(char *));
    if (s == MX_OK && (!out->arrays || !out->names)) s = mx_last_status();
    for (int i = 0; i < n && s == MX_OK; i++) {
        const char *name = i < states.count ? states.names[i] : i == states.count ? "trainer:state" : "trainer:loss_scale";
        size_t len = strlen(prefix) + strlen(name) + 1;
        if (!(out->names[i] = mx_malloc(len))) {
            s = mx_last_status();
            break;
        }
        snprintf(out->names[i], len, "%s%s", prefix, name);
        out->arrays[i] = mx_ndarray_retain(i < states.count ? states.arrays[i] : i == states.count ? extra : scaler);
        out->count++;
    }
    mx_ndarray_free(extra);
    mx_ndarray_free(scaler);
    mx_ndarray_list_free(&states);
    if (s != MX_OK) mx_ndarray_list_free(out);
    return s;
}

static mx_status save_checkpoint_held(trainer *t, int epoch);

/* Saving reads the store's weights and the optimizer's state: a server
 * (dist_async) is held between requests meanwhile, so they are one
 * consistent snapshot. */
static mx_status save_checkpoint(trainer *t, int epoch)
{
    mx_kvstore_lock_updater(t->kv);
    mx_status s = save_checkpoint_held(t, epoch);
    mx_kvstore_unlock_updater(t->kv);
    return s;
}

static mx_status save_checkpoint_held(trainer *t, int epoch)
{
    const char *prefix = t->s->fit.model_prefix;
    weight_lists w;
    mx_status s = make_weight_lists(t, &w);
    if (s == MX_OK) s = mx_checkpoint_save(prefix, epoch, t->cfg->graph, w.args, w.aux);
    mx_ndarray_list st = {0};
    if (s == MX_OK) s = training_state(t, epoch, 0, "", &st);
    char path[PATH_BUF];
    if (s == MX_OK) {
        snprintf(path, sizeof(path), "%s-%04d.states", prefix, epoch);
        s = mx_ndarray_save(path, st.arrays, (const char *const *)st.names, st.count);
    }
    mx_ndarray_list_free(&st);
    free_weight_lists(t, &w);
    MX_TRY(s);
    /* An interrupted run's file is older than this checkpoint now. */
    remove(mx_train_interrupted_path(prefix, path, sizeof(path)));
    logf_(t, "Saved checkpoint to \"%s\"", mx_checkpoint_params_path(prefix, epoch, path, sizeof(path)));
    return MX_OK;
}

/* A stop mid-epoch: weights and state in one file, written atomically. */
static mx_status save_interrupted(trainer *t, int epoch, int64_t batch, char *path, size_t size)
{
    const char *prefix = t->s->fit.model_prefix;
    weight_lists w;
    mx_kvstore_lock_updater(t->kv); /* as save_checkpoint */
    mx_status s = make_weight_lists(t, &w);
    mx_ndarray_list st = {0};
    if (s == MX_OK) s = training_state(t, epoch, batch, STATE_PREFIX, &st);
    if (s == MX_OK) {
        char json[PATH_BUF];
        snprintf(json, sizeof(json), "%s-symbol.json", prefix);
        s = mx_graph_save_json(t->cfg->graph, json);
    }
    mx_named_arrays extra = {st.count, (const char *const *)st.names, st.arrays};
    if (s == MX_OK) s = mx_checkpoint_save_file(mx_train_interrupted_path(prefix, path, size), w.args, w.aux, extra);
    mx_kvstore_unlock_updater(t->kv);
    mx_ndarray_list_free(&st);
    free_weight_lists(t, &w);
    return s;
}

/* Copies a checkpoint's weights into the network and the store. */
static mx_status restore_weights(trainer *t, const char *path, mx_ndarray_list *args, mx_ndarray_list *aux)
{
    int copied, missing;
    mx_status s = copy_weights(t, path, args, aux, true, &copied, &missing, NULL, 0);
    if (s == MX_ERR_INVALID) s = MX_ERR_FORMAT; /* a checkpoint of another network */
    if (s == MX_OK) s = broadcast_weights(t);
    mx_kvstore_lock_updater(t->kv);
    for (int i = 0; i < t->n_args && s == MX_OK && !t->update_in_place; i++) /* the store holds the weights */
        if (t->key[i] >= 0) s = mx_nd_copy(mx_kvstore_stored(t->kv, t->key[i]), t->args[i]);
    mx_kvstore_unlock_updater(t->kv);
    return s;
}

/* Restores optimizer and trainer state from a list (names without prefix);
 * *epoch / *batch get the position it records. */
/* "trainer:loss_scale" (float16 runs' scaler) out of a state list: into
 * the scaler when this run scales its loss (a state without it, from a
 * float32 or bfloat16 run, starts the scaler afresh), else dropped. */
static mx_status restore_loss_scaler(trainer *t, const char *path, mx_ndarray_list *st)
{
    int at = -1;
    for (int i = 0; i < st->count && st->names; i++)
        if (!strcmp(st->names[i], "trainer:loss_scale")) at = i;
    if (at < 0) return MX_OK;
    mx_ndarray *a = st->arrays[at];
    double v[MX_LOSS_SCALER_STATE];
    if (mx_ndarray_size(a) != MX_LOSS_SCALER_STATE || mx_ndarray_dtype(a) != MX_FLOAT64)
        return MX_ERROR(MX_ERR_FORMAT, "%s: 'trainer:loss_scale' is not %d float64 values", path, MX_LOSS_SCALER_STATE);
    MX_TRY(mx_ndarray_to_host(a, v, sizeof(v)));
    if (t->loss_scaling && mx_loss_scaler_restore(&t->scaler, v) != MX_OK)
        return MX_ERROR(MX_ERR_FORMAT, "%s: 'trainer:loss_scale' holds impossible values (scale %g)", path, v[0]);
    mx_ndarray_free(a);
    free(st->names[at]);
    for (int i = at; i + 1 < st->count; i++) {
        st->arrays[i] = st->arrays[i + 1];
        st->names[i] = st->names[i + 1];
    }
    st->count--;
    return MX_OK;
}

static mx_status restore_state(trainer *t, const char *path, mx_ndarray_list *st, int64_t *epoch, int64_t *batch)
{
    MX_TRY(restore_loss_scaler(t, path, st));
    int extra = -1;
    for (int i = 0; i < st->count && st->names; i++)
        if (!strcmp(st->names[i], "trainer:state")) extra = i;
    int64_t n = extra >= 0 ? mx_ndarray_size(st->arrays[extra]) : 0;
    if (extra < 0 || (n != 6 && n != 7) || mx_ndarray_dtype(st->arrays[extra]) != MX_INT64)
        return MX_ERROR(MX_ERR_FORMAT, "%s: not a training state file of this tool", path);
    uint64_t v[7] = {0};
    MX_TRY(mx_ndarray_to_host(st->arrays[extra], v, (size_t)n * sizeof(uint64_t)));
    if (!(v[0] == 1 && n == 6) && !(v[0] == STATES_FORMAT && n == 7))
        return MX_ERROR(MX_ERR_FORMAT, "%s: training state format %llu is not known to this tool", path,
                        (unsigned long long)v[0]);
    *epoch = (int64_t)v[1];
    *batch = v[0] == 1 ? 0 : (int64_t)v[2];
    MX_TRY(mx_rng_set_state(t->rng, v + (v[0] == 1 ? 2 : 3)));
    /* The optimizer gets the rest of the list. */
    mx_ndarray *last = st->arrays[extra];
    char *last_name = st->names[extra];
    st->arrays[extra] = st->arrays[st->count - 1];
    st->names[extra] = st->names[st->count - 1];
    st->arrays[st->count - 1] = last;
    st->names[st->count - 1] = last_name;
    st->count--;
    mx_kvstore_lock_updater(t->kv); /* a server's optimizer */
    mx_status s = mx_optimizer_set_states(t->optimizer, st);
    mx_kvstore_unlock_updater(t->kv);
    st->count++;
    if (s != MX_OK) mx_error_prefix(s, "%s", path);
    return s;
}

/* Loads weights (and optimizer/RNG state when present) of `epoch`. */
static mx_status load_checkpoint(trainer *t, int epoch, bool need_states)
{
    const char *prefix = t->s->fit.model_prefix;
    char path[PATH_BUF];
    mx_checkpoint_params_path(prefix, epoch, path, sizeof(path));
    mx_ndarray_list args, aux;
    MX_TRY(mx_checkpoint_load(t->rt, prefix, epoch, &args, &aux));
    mx_status s = restore_weights(t, path, &args, &aux);
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    MX_TRY(s);

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
    int64_t e = -1, b = 0;
    s = restore_state(t, path, &st, &e, &b);
    mx_ndarray_list_free(&st);
    MX_TRY(s);
    if (e != epoch || b != 0)
        return MX_ERROR(MX_ERR_FORMAT, "%s: state of epoch %lld in the file of epoch %d", path, (long long)e, epoch);
    return MX_OK;
}

/* PREFIX-interrupted.params when it is newer than epoch checkpoint `latest`:
 * loads it and sets *epoch, *batch. *found false when there is none. */
static mx_status load_interrupted(trainer *t, int latest, bool *found, int64_t *epoch, int64_t *batch)
{
    *found = false;
    char path[PATH_BUF];
    mx_train_interrupted_path(t->s->fit.model_prefix, path, sizeof(path));
    if (access(path, F_OK) != 0) return MX_OK;
    mx_ndarray_list args, aux, extra;
    MX_TRY(mx_checkpoint_load_file(t->rt, path, &args, &aux, &extra));
    /* The state entries without their "state:" prefix. */
    size_t plen = strlen(STATE_PREFIX);
    mx_status s = MX_OK;
    for (int i = 0; i < extra.count && s == MX_OK; i++) {
        if (strncmp(extra.names[i], STATE_PREFIX, plen)) {
            s = MX_ERROR(MX_ERR_FORMAT, "%s: unexpected array '%s'", path, extra.names[i]);
            break;
        }
        memmove(extra.names[i], extra.names[i] + plen, strlen(extra.names[i]) - plen + 1);
    }
    /* Its position first: an older stop than the newest epoch is stale. */
    int64_t e = -1, b = 0;
    for (int i = 0; i < extra.count && s == MX_OK; i++)
        if (!strcmp(extra.names[i], "trainer:state") && mx_ndarray_size(extra.arrays[i]) == 7) {
            uint64_t v[7];
            s = mx_ndarray_to_host(extra.arrays[i], v, sizeof(v));
            e = (int64_t)v[1];
        }
    if (s == MX_OK && e >= latest) {
        s = restore_weights(t, path, &args, &aux);
        if (s == MX_OK) s = restore_state(t, path, &extra, epoch, &b);
        if (s == MX_OK) *batch = b, *found = true;
    }
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    mx_ndarray_list_free(&extra);
    return s;
}

/* Under mpirun every rank applies the same updates to the same weights:
 * after each epoch the ranks compare a hash of them, so a rank that drifted
 * (a bug, a flipped bit) stops the job instead of training on silently. */
static mx_status check_weights_agree(trainer *t, int epoch)
{
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt))); /* the store's collectives included */
    uint64_t hash = 1469598103934665603ull; /* FNV-1a over every learnable array */
    mx_status s = MX_OK;
    for (int i = 0; i < t->n_args && s == MX_OK; i++) {
        if (t->key[i] < 0) continue;
        size_t bytes = mx_ndarray_nbytes(t->args[i]);
        unsigned char *v = mx_malloc(bytes ? bytes : 1);
        if (!v) return mx_last_status();
        s = mx_ndarray_to_host(t->args[i], v, bytes);
        for (size_t k = 0; k < bytes && s == MX_OK; k++) hash = (hash ^ v[k]) * 1099511628211ull;
        free(v);
    }
    char what[64];
    snprintf(what, sizeof(what), "the weights after epoch %d", epoch);
    if (s == MX_OK) s = mx_comm_check_same(t->opt->comm, &hash, sizeof(hash), what);
    return s;
}

/* ---------------------------------------------------------------- loop */

static mx_status run_validation(trainer *t, int epoch)
{
    if (!t->val_it) return MX_OK;
    for (int m = 0; m < t->n_metrics; m++) mx_metric_reset(t->metrics[m]);
    MX_TRY(mx_data_iter_reset(t->val_it));
    mx_executor *ex = t->val_ex ? t->val_ex : t->ex;
    mx_ndarray **args = t->val_ex ? t->val_args : t->args;
    mx_ndarray *out = mx_executor_output(ex, 0);
    for (int64_t b = 0;; b++) {
        mx_data_batch batch;
        bool has;
        MX_TRY(mx_data_iter_next(t->val_it, &batch, &has));
        if (!has) break;
        MX_TRY(mx_nd_copy(args[t->data_arg], batch.data));
        MX_TRY(mx_nd_copy(t->val_label_copy, batch.label));
        MX_TRY(mx_executor_forward(ex, false));
        MX_TRY(mx_nd_copy(t->val_out_copy, out));
        MX_TRY(update_metrics(t, t->val_out_copy, t->val_label_copy, epoch, b, batch.pad, false));
    }
    MX_TRY(metric_values(t, true, t->values));
    for (int m = 0; m < t->n_metrics; m++)
        logf_(t, "Epoch[%d] Validation-%s=%f", epoch, mx_metric_get_name(t->metrics[m]), t->values[m]);
    if (t->metrics_log) {
        char json[1024];
        metric_json(t, t->values, json, sizeof(json));
        fprintf(t->metrics_log, "{\"phase\": \"val\", \"epoch\": %d%s}\n", epoch, json);
        fflush(t->metrics_log);
    }
    return MX_OK;
}

/* mx_bind_config.update: the optimizer's update of one parameter, pushed
 * from inside the backward pass (update_in_backward). */
static mx_status update_from_backward(void *ctx, int arg, mx_ndarray *weight, mx_ndarray *grad)
{
    trainer *t = ctx;
    return mx_optimizer_update(t->optimizer, t->key[arg], weight, grad);
}

/* apply_update with one context and no store: the optimizer updates the
 * weights where they are, every parameter in one call (on a GPU one engine
 * operation), later layers first as the store would see them. */
static mx_status update_in_place(trainer *t, int64_t batches)
{
    const train_device *d = &t->group.dev[0];
    int *index = mx_calloc((size_t)t->n_args + 1, sizeof(int));
    mx_ndarray **weights = mx_calloc((size_t)t->n_args + 1, sizeof(mx_ndarray *));
    mx_ndarray **grads = mx_calloc((size_t)t->n_args + 1, sizeof(mx_ndarray *));
    mx_status s = index && weights && grads ? MX_OK : MX_ERR_NOMEM;
    int n = 0;
    for (int i = t->n_args - 1; i >= 0 && s == MX_OK; i--) {
        if (t->key[i] < 0 || (t->in_backward && t->in_backward[i])) continue; /* done in the backward pass */
        if (batches != t->grad_accum)
            s = mx_nd_binary_scalar(MX_OP_MUL, d->grads[i], d->grads[i], (double)t->grad_accum / (double)batches,
                                    false);
        index[n] = t->key[i], weights[n] = d->args[i], grads[n] = d->grads[i];
        n++;
    }
    if (s == MX_OK) s = mx_optimizer_update_many(t->optimizer, n, index, weights, grads);
    for (int i = 0; i < n && s == MX_OK && t->grad_accum > 1; i++) s = mx_nd_fill(grads[i], 0.0);
    free(index);
    free(weights);
    free(grads);
    t->accumulated = 0;
    return s;
}

/* One update from the gradients of `batches` batches: push and pull every
 * learnable parameter (later layers first). With accumulation the
 * optimizer's rescale_grad counts grad_accum batches, so a shorter run at
 * the end of an epoch is scaled up to match, and the sums start again. */
/* *any = whether `flag` is true on any rank (every rank calls this at the
 * same step): one allgather after the store's own collectives. */
static mx_status any_rank(trainer *t, bool flag, const char *what, bool *any)
{
    *any = flag;
    if (!t->opt->comm) return MX_OK;
    int64_t mine = flag, *all = mx_calloc((size_t)mx_comm_size(t->opt->comm) + 1, sizeof(int64_t));
    mx_status s = all ? mx_kvstore_wait_comm(t->kv) : mx_last_status();
    if (s == MX_OK) s = mx_comm_allgather(t->opt->comm, MX_COMM_WORLD, MX_COMM_INT64, &mine, all, 1, what);
    for (int r = 0; s == MX_OK && r < mx_comm_size(t->opt->comm); r++) *any = *any || all[r];
    free(all);
    return s;
}

/* float16's loss scaling at an update boundary: whether the window's
 * gradients are all finite (*apply). If so, the optimizer's rescale_grad
 * takes the window's scale out; if not, the update is skipped (the sums
 * start again), as MXNet's AMP does, and a run whose every step
 * overflows stops (mx_loss_scaler_check). */
static mx_status scaled_update_applies(trainer *t, bool *apply)
{
    int n = 0;
    mx_ndarray **grads = mx_calloc((size_t)(t->group.n * t->n_args) + 1, sizeof(mx_ndarray *));
    if (!grads) return mx_last_status();
    for (int d = 0; d < t->group.n; d++)
        for (int i = 0; i < t->n_args; i++)
            if (t->key[i] >= 0 && t->group.dev[d].grads[i]) grads[n++] = t->group.dev[d].grads[i];
    bool finite = false, overflow = false;
    mx_status s = mx_all_finite(grads, n, &finite);
    /* Under mpirun (dist_sync kinds) every rank skips the same steps, so
     * the sums line up and the scalers move together. */
    if (s == MX_OK) s = any_rank(t, !finite, "the gradients' overflow checks", &overflow);
    if (s == MX_OK) *apply = mx_loss_scaler_update(&t->scaler, !overflow);
    if (s == MX_OK && *apply) {
        mx_kvstore_lock_updater(t->kv);
        s = mx_optimizer_set_rescale_grad(t->optimizer, t->base_rescale / t->window_scale);
        mx_kvstore_unlock_updater(t->kv);
    }
    if (s == MX_OK && !*apply) {
        logf_(t, "Gradients overflowed at loss scale %g: update skipped (%lld so far)", t->window_scale,
              (long long)t->scaler.skipped);
        for (int k = 0; k < n && t->grad_accum > 1 && s == MX_OK; k++) s = mx_nd_fill(grads[k], 0.0);
        if (s == MX_OK) s = mx_loss_scaler_check(&t->scaler);
        t->accumulated = 0;
    }
    free(grads);
    return s;
}

/* The loss scale of a new update window, on every executor. */
static mx_status start_scaled_window(trainer *t)
{
    t->window_scale = mx_loss_scaler_scale(&t->scaler);
    for (int d = 0; d < t->group.n; d++)
        MX_TRY(mx_executor_set_loss_scale(t->group.dev[d].ex, (float)t->window_scale));
    return MX_OK;
}

static mx_status apply_update(trainer *t, int64_t batches)
{
    int n = t->group.n;
    if (t->loss_scaling) {
        bool apply = false;
        MX_TRY(scaled_update_applies(t, &apply));
        if (!apply) return MX_OK;
    }
    if (t->update_in_place) return update_in_place(t, batches);
    /* Last layers first: their gradients are ready first, and a dist store
     * sends in push order. */
    for (int i = t->n_args - 1; i >= 0; i--) {
        int k = t->key[i];
        if (k < 0) continue;
        for (int d = 0; d < n; d++) {
            t->push_list[d] = t->group.dev[d].grads[i];
            t->pull_list[d] = t->group.dev[d].args[i];
            if (batches != t->grad_accum)
                MX_TRY(mx_nd_binary_scalar(MX_OP_MUL, t->push_list[d], t->push_list[d],
                                           (double)t->grad_accum / (double)batches, false));
        }
        /* The store sums the devices' gradients and every device pulls the update. */
        MX_TRY(mx_kvstore_push(t->kv, k, t->push_list, n, -k));
        MX_TRY(mx_kvstore_pull(t->kv, k, t->pull_list, n, -k));
        for (int d = 0; d < n && t->grad_accum > 1; d++) MX_TRY(mx_nd_fill(t->push_list[d], 0.0));
    }
    t->accumulated = 0;
    return MX_OK;
}

static bool stop_requested(const trainer *t) { return t->opt->stop && *t->opt->stop; }

/* Whether to stop here (an update boundary). Under mpirun every rank must
 * stop at the same step: a request is agreed among the ranks at the first
 * update boundary after each progress line (a collective every rank reaches
 * at the same step), so a signal to any rank stops all of them together. */
static bool stop_agreed(trainer *t)
{
    if (!t->opt->comm) return stop_requested(t);
    if (!t->agree_stop) return false;
    t->agree_stop = false;
    bool stop = false;
    if (any_rank(t, stop_requested(t), "the stop requests", &stop) != MX_OK) stop = false;
    if (stop && t->opt->stop && !*t->opt->stop) *t->opt->stop = SIGTERM; /* another rank's signal */
    return stop;
}

/* A step without samples (mpirun, this rank's part done): no gradient. */
static mx_status zero_step(trainer *t)
{
    if (t->grad_accum > 1) return MX_OK; /* the sums simply get nothing added */
    for (int d = 0; d < t->group.n; d++)
        for (int i = 0; i < t->n_args; i++)
            if (t->key[i] >= 0) MX_TRY(mx_nd_fill(t->group.dev[d].grads[i], 0.0));
    return MX_OK;
}

/* Trains one epoch; *stopped_at >= 0 when a stop request ended it there
 * (batches done). */
static mx_status train_epoch(trainer *t, int epoch, int64_t *stopped_at)
{
    *stopped_at = -1;
    for (int m = 0; m < t->n_metrics; m++) mx_metric_reset(t->metrics[m]);
    double t_epoch = mx_time_seconds(), t_window = t_epoch;
    int64_t window_samples = 0, disp = t->s->fit.disp_batches;
    int pending_pad = -1; /* pad of the batch whose output is in out_copy, -1 if none */
    int64_t b = 0;
    /* Resuming mid-epoch: the batches already done are read and dropped, so
     * the data order is the uninterrupted run's. */
    for (; b < t->skip_batches; b++) {
        mx_data_batch batch;
        bool has;
        MX_TRY(mx_data_iter_next(t->train_it, &batch, &has));
        if (!has) break;
    }
    t->skip_batches = 0;
    bool trace_epoch = t->tracing && epoch == t->until_epoch, data_left = true;
    for (;; b++) {
        if (trace_epoch && b > t->until_batch) break;
        mx_data_batch batch;
        bool has = false;
        if (data_left) MX_TRY(mx_data_iter_next(t->train_it, &batch, &has));
        data_left = has;
        /* Under mpirun a rank whose part ran out takes steps without samples
         * until every rank's epoch is over, so the collectives line up. */
        bool empty = !has;
        if (empty && (!t->opt->comm || b >= t->steps_per_epoch)) break;
        if (trace_epoch && b == t->check_from) MX_TRY(train_group_set_check_numerics(&t->group, true));
        MX_TRY(profile_batch_begin(t));
        /* Every rank, empty steps too: the window's scale is the update's. */
        if (t->loss_scaling && t->accumulated == 0) MX_TRY(start_scaled_window(t));
        if (empty) {
            MX_TRY(zero_step(t));
        } else {
            MX_TRY(train_group_load(&t->group, t->data_arg, t->label_arg, batch.data, batch.label));
            mx_status s = train_group_forward(&t->group, true);
            if (s == MX_OK) s = train_group_backward(&t->group);
            if (s != MX_OK)
                return s == MX_ERR_RUNTIME && train_group_check_numerics(&t->group)
                           ? mx_error_prefix(s, "training diverged at epoch %d, batch %lld", epoch, (long long)b)
                           : s;
        }
        if (++t->accumulated == t->grad_accum) MX_TRY(apply_update(t, t->accumulated));
        /* Metrics of the previous batch, while this one runs. */
        if (pending_pad >= 0) MX_TRY(update_metrics(t, t->out_copy, t->label_copy, epoch, b - 1, pending_pad, true));
        pending_pad = -1;
        if (!empty) {
            MX_TRY(train_group_gather(&t->group, t->out_copy));
            MX_TRY(mx_nd_copy(t->label_copy, batch.label));
            pending_pad = batch.pad;
            window_samples += t->batch_size - batch.pad;
        }
        if (t->opt->progress) t->opt->progress(t->opt->log_user, epoch, b + 1, t->steps_per_epoch);
        if ((b + 1) % disp == 0) {
            t->agree_stop = true;
            if (pending_pad >= 0) MX_TRY(update_metrics(t, t->out_copy, t->label_copy, epoch, b, pending_pad, true));
            pending_pad = -1;
            double now = mx_time_seconds();
            double speed = (double)window_samples / (now - t_window);
            char text[1024];
            MX_TRY(metric_values(t, false, t->values));
            metric_text(t, t->values, text, sizeof(text));
            logf_(t, "Epoch[%d] Batch[%lld] Speed: %.2f samples/sec %s", epoch, (long long)(b + 1), speed, text);
            if (t->metrics_log) {
                char json[1024];
                metric_json(t, t->values, json, sizeof(json));
                mx_kvstore_lock_updater(t->kv); /* a server's optimizer */
                double lr = mx_optimizer_learning_rate(t->optimizer);
                mx_kvstore_unlock_updater(t->kv);
                fprintf(t->metrics_log,
                        "{\"phase\": \"train\", \"epoch\": %d, \"batch\": %lld, \"samples_per_sec\": %.2f, \"lr\": "
                        "%.9g%s}\n",
                        epoch, (long long)(b + 1), speed, lr, json);
                fflush(t->metrics_log);
            }
            for (int m = 0; m < t->n_metrics; m++) mx_metric_reset_local(t->metrics[m]);
            t_window = now;
            window_samples = 0;
        }
        MX_TRY(profile_batch_end(t));
        /* A stop lands on an update boundary, so resuming repeats nothing. */
        if (t->accumulated == 0 && stop_agreed(t)) {
            if (pending_pad >= 0) MX_TRY(update_metrics(t, t->out_copy, t->label_copy, epoch, b, pending_pad, true));
            MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt)));
            *stopped_at = b + 1;
            return MX_OK;
        }
    }
    if (trace_epoch) return MX_OK; /* traced up to the batch that diverged: nothing went non-finite */
    if (t->accumulated > 0) MX_TRY(apply_update(t, t->accumulated));
    if (pending_pad >= 0) MX_TRY(update_metrics(t, t->out_copy, t->label_copy, epoch, b - 1, pending_pad, true));
    MX_TRY(mx_engine_wait_all(mx_runtime_engine(t->rt)));
    double cost = mx_time_seconds() - t_epoch;
    MX_TRY(metric_values(t, true, t->values));
    for (int m = 0; m < t->n_metrics; m++)
        logf_(t, "Epoch[%d] Train-%s=%f", epoch, mx_metric_get_name(t->metrics[m]), t->values[m]);
    logf_(t, "Epoch[%d] Time cost=%.3f", epoch, cost);
    if (t->loss_scaling) {
        char text[128];
        logf_(t, "Epoch[%d] %s", epoch, mx_loss_scaler_str(&t->scaler, text, sizeof(text)));
    }
    if (!t->graphs_logged && t->group.dev[0].ctx.dev_type == MX_DEV_GPU) {
        log_cuda_graphs(t);
        t->graphs_logged = true;
    }
    if (t->metrics_log) {
        char json[1024];
        metric_json(t, t->values, json, sizeof(json));
        fprintf(t->metrics_log, "{\"phase\": \"train_epoch\", \"epoch\": %d, \"time\": %.3f, \"batches\": %lld%s}\n",
                epoch, cost, (long long)b, json);
        fflush(t->metrics_log);
    }
    return MX_OK;
}

/* Data an iterator left out as corrupt (records, or stretches of a file
 * between records): a summary line after every epoch that misses some,
 * and an error once the share passes fit.max_skip_fraction, so heavy loss
 * cannot pass as a finished run. */
static mx_status check_skipped_data(trainer *t, mx_data_iter *it, const char *section, int epoch)
{
    mx_data_skip_stats s;
    if (!it || !mx_data_iter_skip_stats(it, &s) || (!s.skipped_records && !s.skipped_bytes)) return MX_OK;
    double by_records = s.records > 0 ? (double)s.skipped_records / (double)s.records : 0;
    double by_bytes = s.bytes > 0 ? (double)s.skipped_bytes / (double)s.bytes : 0;
    double share = by_records > by_bytes ? by_records : by_bytes;
    logf_(t,
          "Epoch[%d] [%s] data skipped as corrupt: %lld of %lld records and %llu of %llu bytes between records "
          "(%.2f%% of the data; latest: %s)",
          epoch, section, (long long)s.skipped_records, (long long)s.records, (unsigned long long)s.skipped_bytes,
          (unsigned long long)s.bytes, 100 * share, s.why[0] ? s.why : "-");
    if (share > t->s->fit.max_skip_fraction)
        return MX_ERROR(MX_ERR_FORMAT,
                        "%s: [%s] %.2f%% of the data was skipped as corrupt (%lld of %lld records, %llu of %llu "
                        "bytes), more than fit.max_skip_fraction = %g: %s",
                        t->cfg->path, section, 100 * share, (long long)s.skipped_records, (long long)s.records,
                        (unsigned long long)s.skipped_bytes, (unsigned long long)s.bytes, t->s->fit.max_skip_fraction,
                        s.why[0] ? s.why : "see the warnings above");
    return MX_OK;
}

static mx_status time_layers(trainer *t)
{
    mx_layer_time *lt;
    int n;
    MX_TRY(mx_executor_time_layers(t->ex, t->opt->time_batches, &lt, &n));
    double fwd = 0, bwd = 0;
    logf_(t, "%-24s %-22s %12s %12s", "layer", "op", "forward ms", "backward ms");
    for (int i = 0; i < n; i++) {
        logf_(t, "%-24s %-22s %12.3f %12.3f", lt[i].name, lt[i].op, lt[i].forward_ms, lt[i].backward_ms);
        fwd += lt[i].forward_ms;
        bwd += lt[i].backward_ms;
    }
    logf_(t, "total: forward %.3f ms, backward %.3f ms per batch of %lld (mean of %d)", fwd, bwd,
          (long long)t->batch_size, t->opt->time_batches);
    free(lt);
    return MX_OK;
}

/* The newest epoch whose checkpoint is complete: PREFIX-NNNN.params and
 * PREFIX-NNNN.states (each is written to a temporary name and renamed, so
 * one that exists is whole, but a stop between the two renames leaves the
 * weights without the optimizer state). Newer incomplete ones are named
 * and passed over; -1 when there is none. */
static int newest_complete_checkpoint(trainer *t, const char *prefix)
{
    for (int e = mx_checkpoint_latest_epoch(prefix); e >= 0; e = mx_checkpoint_epoch_before(prefix, e)) {
        char params[PATH_BUF], states[PATH_BUF];
        mx_checkpoint_params_path(prefix, e, params, sizeof(params));
        snprintf(states, sizeof(states), "%s-%04d.states", prefix, e);
        if (access(states, F_OK) == 0) return e;
        logf_(t, "skipped the incomplete checkpoint %s: %s is missing (the save of epoch %d was interrupted)", params,
              states, e);
    }
    return -1;
}

/* Where training starts: a checkpoint (--resume, fit.load_epoch), else
 * fresh weights, fine-tuned from a file when asked. */
static mx_status starting_point(trainer *t, int *begin)
{
    const mx_fit_params *fit = &t->s->fit;
    *begin = 0;
    if (!t->opt->resume && fit->load_epoch < 0) return fit->finetune_from[0] ? finetune(t) : MX_OK;
    if (!has_prefix(t)) return MX_ERROR(MX_ERR_INVALID, "%s: resuming needs fit.model_prefix", t->cfg->path);
    const char *prefix = fit->model_prefix;
    int latest = fit->load_epoch >= 0 ? (int)fit->load_epoch : newest_complete_checkpoint(t, prefix);
    bool found = false;
    int64_t e = 0, b = 0;
    if (t->opt->resume && fit->load_epoch < 0) MX_TRY(load_interrupted(t, latest, &found, &e, &b));
    if (found) {
        char path[PATH_BUF];
        logf_(t, "Resumed from %s (epoch %lld, after batch %lld)",
              mx_train_interrupted_path(prefix, path, sizeof(path)), (long long)e, (long long)b);
        *begin = (int)e;
        t->skip_batches = b;
    } else if (latest < 0) {
        logf_(t, "no checkpoint %s-NNNN.params yet: starting from scratch", prefix);
        return fit->finetune_from[0] ? finetune(t) : MX_OK;
    } else {
        MX_TRY(load_checkpoint(t, latest, t->opt->resume));
        logf_(t, "Resumed from epoch %d", latest);
        *begin = latest;
    }
    if (fit->finetune_from[0]) logf_(t, "fit.finetune_from is not applied: the checkpoint holds the weights");
    /* Replay the data order of the epochs already done. */
    for (int ep = 0; ep < *begin; ep++) MX_TRY(mx_data_iter_reset(t->train_it));
    return MX_OK;
}

/* What a tracing re-run needs from the run that diverged. */
typedef struct trace_request {
    int from_epoch;       /* epoch checkpoint to start from; -1: where the run started */
    int epoch;            /* where the output went non-finite */
    int64_t batch;
} trace_request;

/* One run: the user's, or (trace != NULL) a quiet re-run up to a
 * divergence with every layer checked near it. */
static mx_status fit(const mx_train_settings *settings, const mx_train_options *opt, mx_train_result *result,
                     const trace_request *trace, trace_request *diverged)
{
    trainer *t = mx_calloc(1, sizeof(*t));
    if (!t) return MX_ERR_NOMEM;
    mx_train_options quiet = {.resume = opt->resume};
    t->s = settings;
    t->cfg = settings->cfg;
    t->opt = trace ? &quiet : opt;
    t->diverged_epoch = -1;
    if (trace) {
        /* The first non-finite value comes at most one update before the
         * output shows it: check from the batch after the update before. */
        t->tracing = true;
        t->until_epoch = trace->epoch;
        t->until_batch = trace->batch;
        t->check_from = trace->batch - settings->fit.grad_accum;
        if (t->check_from < 0) t->check_from = 0;
    }
    mx_status s = setup(t);
    if (s == MX_OK && opt->metrics_log && !trace) {
        t->metrics_log = fopen(opt->metrics_log, "a");
        if (!t->metrics_log) s = MX_ERROR(MX_ERR_IO, "%s: cannot open for writing: %s", opt->metrics_log, strerror(errno));
    }
    int begin = 0, first = 0;
    if (s == MX_OK && trace && trace->from_epoch >= 0) {
        s = load_checkpoint(t, trace->from_epoch, true);
        begin = trace->from_epoch;
        for (int ep = 0; ep < begin && s == MX_OK; ep++) s = mx_data_iter_reset(t->train_it);
    } else if (s == MX_OK) {
        s = starting_point(t, &begin);
        /* Every rank has its starting point (a parameter server its
         * restored weights and state) before any rank pushes. */
        if (s == MX_OK && opt->comm && opt->time_batches <= 0) s = mx_kvstore_barrier(t->kv);
    }
    first = begin;
    if (s == MX_OK && opt->time_batches > 0 && !trace) {
        s = time_layers(t);
        teardown(t);
        free(t);
        return s;
    }
    const mx_fit_params *fit = &settings->fit;
    int last = trace ? trace->epoch + 1 : (int)fit->num_epoch;
    int saved = -1; /* the newest epoch checkpoint this run wrote */
    for (int epoch = begin; epoch < last && s == MX_OK; epoch++) {
        int64_t stopped_at;
        s = train_epoch(t, epoch, &stopped_at);
        if (trace) {
            if (s == MX_OK && epoch + 1 < last) s = mx_data_iter_reset(t->train_it);
            continue;
        }
        if (s == MX_OK && stopped_at >= 0) {
            result->stopped = true;
            result->epoch = epoch;
            result->batch = stopped_at;
            if (writes_files(t))
                s = save_interrupted(t, epoch, stopped_at, result->checkpoint, sizeof(result->checkpoint));
            break;
        }
        if (s == MX_OK) s = check_skipped_data(t, t->train_it, "train", epoch);
        /* (A parameter server's workers hold different copies by design.) */
        if (s == MX_OK && opt->comm && !mx_kvstore_has_server(t->kv)) s = check_weights_agree(t, epoch);
        if (s == MX_OK) s = run_validation(t, epoch);
        if (s == MX_OK) s = check_skipped_data(t, t->val_it, "val", epoch);
        if (s == MX_OK && writes_files(t) && (epoch + 1) % fit->save_period == 0) {
            s = save_checkpoint(t, epoch + 1);
            if (s == MX_OK) saved = epoch + 1;
        }
        if (s == MX_OK && epoch + 1 < fit->num_epoch) s = mx_data_iter_reset(t->train_it);
        t->agree_stop = true; /* between epochs: a boundary every rank reaches */
        if (s == MX_OK && stop_agreed(t) && epoch + 1 < fit->num_epoch) {
            /* Asked between epochs: resume at the start of the next one. */
            result->stopped = true;
            result->epoch = epoch + 1;
            result->batch = 0;
            if (writes_files(t))
                s = save_interrupted(t, epoch + 1, 0, result->checkpoint, sizeof(result->checkpoint));
            break;
        }
    }
    if (s == MX_OK && t->prof_open) s = profile_finish(t); /* the window reached the end of the run */
    else if (s == MX_OK && t->prof && !t->prof_done)
        logf_(t, "Profile: the run ended before batch %lld: nothing recorded, %s not written",
              (long long)settings->profile_first, t->prof_path);
    if (s == MX_OK) s = mx_engine_wait_all(mx_runtime_engine(t->rt));
    if (diverged && !opt->comm && t->diverged_epoch >= 0 && !train_group_check_numerics(&t->group)) {
        /* Re-run from this run's newest checkpoint before the divergence,
         * else from where it started. */
        diverged->from_epoch = saved >= 0 && saved <= t->diverged_epoch && saved > first ? saved : -1;
        diverged->epoch = t->diverged_epoch;
        diverged->batch = t->diverged_batch;
    }
    teardown(t);
    free(t);
    return s;
}

mx_status mx_train_fit(const mx_train_settings *settings, const mx_train_options *opt, mx_train_result *result)
{
    mx_train_result local;
    if (!result) result = &local;
    memset(result, 0, sizeof(*result));
    trace_request diverged = {.epoch = -1};
    mx_status s = fit(settings, opt, result, NULL, &diverged);
    if (s != MX_ERR_RUNTIME || diverged.epoch < 0) return s;
    /* The output went non-finite: the normal run checks nothing, so run
     * again (deterministic from the same start) with every layer checked
     * around that batch, to name the first layer that produced it. */
    char first[1024];
    snprintf(first, sizeof(first), "%s", mx_last_error());
    if (opt->log) {
        char line[256];
        snprintf(line, sizeof(line), "training diverged at epoch %d, batch %lld: re-running %s with every layer checked",
                 diverged.epoch, (long long)diverged.batch,
                 diverged.from_epoch >= 0 ? "from the last checkpoint" : "from the start of this run");
        opt->log(opt->log_user, line);
    }
    mx_train_result ignored;
    memset(&ignored, 0, sizeof(ignored));
    mx_status t = fit(settings, opt, &ignored, &diverged, NULL);
    char found[2048];
    if (t == MX_ERR_RUNTIME) {
        const char *msg = mx_last_error();
        const char *colon = strstr(msg, ": "); /* after "training diverged at epoch E, batch B" */
        snprintf(found, sizeof(found), "%s (epoch %d, batch %lld of the re-run)", colon ? colon + 2 : msg,
                 diverged.epoch, (long long)diverged.batch);
    } else if (t != MX_OK) {
        snprintf(found, sizeof(found), "the re-run failed: %s", mx_last_error());
    } else {
        snprintf(found, sizeof(found), "the re-run with every layer checked found no NaN or Inf up to that batch");
    }
    return MX_ERROR(MX_ERR_RUNTIME, "%s; first non-finite value: %s (lower the learning rate?)", first, found);
}
