/*
 * report.c - the layer table and memory report of `mxtrain --dry-run`:
 * every layer's output shape and parameter count, then the internal
 * memory of the training and the prediction plans (naive, in-place,
 * co-share, both), computed without allocating anything.
 */
#include "train/trainer.h"

#include "checkpoint/checkpoint.h"
#include "device/device.h"
#include "executor/executor.h"
#include "kvstore/kvstore.h"
#include "train/group.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void logf_(const mx_train_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const mx_train_options *o, const char *fmt, ...)
{
    if (!o->log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    o->log(o->log_user, line);
}

static const char *human_bytes(double bytes, char *buf, size_t size)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* The data input's batch shape from [train] (else [val]). */
static mx_status input_shape(const mx_train_settings *s, const char **name, mx_shape *shape)
{
    const mx_data_iter_spec *spec = mx_train_settings_shape_source(s);
    if (!spec) return MX_ERROR(MX_ERR_INVALID, "%s: no [train] or [val] section to take the input shape from", s->cfg->path);
    mx_shape label;
    mx_status st = mx_data_iter_spec_shapes(spec, shape, &label);
    if (st != MX_OK) return mx_error_prefix(st, "%s: [%s]", s->cfg->path, s->train ? "train" : "val");
    *name = s->cfg->inputs[0];
    return MX_OK;
}

static bool *label_mask(const mx_train_settings *s);
static bool is_data_input(const mx_train_settings *s, const bool *is_label, uint32_t id);

mx_status mx_train_plan_report(const mx_train_settings *s, mx_train_report *out)
{
    memset(out, 0, sizeof(*out));
    const char *name;
    mx_shape shape;
    MX_TRY(input_shape(s, &name, &shape));
    out->batch_size = shape.dims[0];
    /* fit.dtype: the graph the executors would bind (its variables are the
     * config graph's, in the same order). */
    mx_graph *mixed = NULL;
    if (mx_train_settings_dtype(s) != MX_FLOAT32) MX_TRY(mx_graph_compute_in(s->cfg->graph, mx_train_settings_dtype(s), &mixed));
    const mx_graph *g = mixed ? mixed : s->cfg->graph;
    mx_status st = mx_executor_plan_memory(g, &name, &shape, 1, true, &out->train);
    if (st == MX_OK) st = mx_executor_plan_memory_mirror(g, &name, &shape, 1, 1, &out->train_mirror);
    if (st == MX_OK) st = mx_executor_plan_memory_mirror(g, &name, &shape, 1, 2, &out->train_segments);
    if (st == MX_OK) st = mx_executor_plan_memory(g, &name, &shape, 1, false, &out->predict);
    if (st != MX_OK) {
        mx_graph_free(mixed);
        return st;
    }
    /* The learnable parameters: arguments that are neither inputs nor
     * labels nor frozen, as the trainer's. */
    uint32_t *ids = mx_malloc(sizeof(uint32_t) * ((size_t)mx_graph_num_nodes(g) + 1));
    bool *learnable = mx_calloc((size_t)mx_graph_num_nodes(g) + 1, sizeof(bool));
    bool *is_label = label_mask(s);
    st = ids && learnable && is_label ? MX_OK : mx_last_status();
    int n = st == MX_OK ? mx_graph_list_arguments(s->cfg->graph, ids) : 0; /* g's, in the same order */
    for (int i = 0; i < n; i++)
        learnable[i] = !is_data_input(s, is_label, ids[i]) && !mx_train_settings_fixed(s, mx_graph_node(g, ids[i])->name);
    if (st == MX_OK) st = mx_executor_plan_memory_updating(g, &name, &shape, 1, learnable, &out->train_updating);
    free(ids);
    free(learnable);
    free(is_label);
    mx_graph_free(mixed);
    return st;
}

/* "a, b, c" of up to `max` names into buf, with "... (N more)". */
static void name_list(const char *const *names, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        if (used > 600) {
            snprintf(buf + used, size - used, ", ... (%d more)", n - i);
            return;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    }
}

/* is_label[node]: the variable feeds a loss layer's label slot (marked
 * once: a scan of the layers per argument is quadratic in a deep net).
 * NULL when out of memory. */
static bool *label_mask(const mx_train_settings *s)
{
    const mx_graph *g = s->cfg->graph;
    bool *is_label = mx_calloc((size_t)mx_graph_num_nodes(g) + 1, sizeof(bool));
    for (int l = 0; l < s->cfg->n_layers && is_label; l++) {
        const mx_node *ln = mx_graph_node(g, s->cfg->layers[l].node);
        if ((ln->op->flags & MX_OP_LOSS) && ln->n_inputs >= 2) is_label[ln->inputs[1].node] = true;
    }
    return is_label;
}

/* Whether argument node id is fed by the data: a [net] input or a loss
 * layer's label (is_label from label_mask), not a learnable parameter. */
static bool is_data_input(const mx_train_settings *s, const bool *is_label, uint32_t id)
{
    const char *name = mx_graph_node(s->cfg->graph, id)->name;
    bool input = is_label[id];
    for (int k = 0; k < s->cfg->n_inputs && !input; k++) input = !strcmp(name, s->cfg->inputs[k]);
    return input;
}

static const char *list_name_of(const void *l, uint32_t i) { return ((const mx_ndarray_list *)l)->names[i]; }

/* What fit.finetune_from loads and fit.fixed_params freezes. */
static mx_status report_finetune(const mx_train_settings *s, const mx_train_options *opt)
{
    const mx_graph *g = s->cfg->graph;
    size_t cap = (size_t)mx_graph_num_nodes(g) + 1;
    uint32_t *ids = mx_malloc(cap * sizeof(uint32_t));
    const char **params = mx_malloc(cap * sizeof(char *)), **frozen = mx_malloc(cap * sizeof(char *));
    const char **from_file = mx_malloc(cap * sizeof(char *)), **fresh = mx_malloc(cap * sizeof(char *));
    bool *is_label = label_mask(s);
    mx_status st = ids && params && frozen && from_file && fresh && is_label ? MX_OK : mx_last_status();
    int n_params = 0, n_frozen = 0, n_file = 0, n_fresh = 0;
    if (st == MX_OK) {
        int n = mx_graph_list_arguments(g, ids);
        for (int i = 0; i < n; i++) {
            const mx_node *node = mx_graph_node(g, ids[i]);
            if (is_data_input(s, is_label, ids[i])) continue;
            params[n_params++] = node->name;
            if (mx_train_settings_fixed(s, node->name)) frozen[n_frozen++] = node->name;
        }
        n = mx_graph_list_aux(g, ids);
        for (int i = 0; i < n; i++) params[n_params++] = mx_graph_node(g, ids[i])->name;
    }
    char buf[1024];
    if (st == MX_OK && s->fit.finetune_from[0]) {
        mx_runtime *rt = NULL;
        mx_ndarray_list args = {0}, aux = {0};
        st = mx_runtime_create(NULL, &rt);
        if (st == MX_OK) st = mx_checkpoint_load_file(rt, s->fit.finetune_from, &args, &aux, NULL);
        mx_name_index in_args, in_aux;
        mx_name_index_init(&in_args, list_name_of, &args);
        mx_name_index_init(&in_aux, list_name_of, &aux);
        if (st == MX_OK) st = mx_name_index_reserve(&in_args, (uint32_t)args.count, (uint32_t)args.count);
        if (st == MX_OK) st = mx_name_index_reserve(&in_aux, (uint32_t)aux.count, (uint32_t)aux.count);
        for (int i = 0; i < n_params && st == MX_OK; i++) {
            bool found = mx_name_index_find(&in_args, params[i]) != MX_NAME_NONE ||
                         mx_name_index_find(&in_aux, params[i]) != MX_NAME_NONE;
            if (found) from_file[n_file++] = params[i];
            else fresh[n_fresh++] = params[i];
        }
        mx_name_index_free(&in_args);
        mx_name_index_free(&in_aux);
        mx_ndarray_list_free(&args);
        mx_ndarray_list_free(&aux);
        mx_runtime_free(rt);
        if (st == MX_OK) {
            logf_(opt, "fine-tuning from %s:", s->fit.finetune_from);
            name_list(from_file, n_file, buf, sizeof(buf));
            logf_(opt, "  from the file (%d): %s", n_file, n_file ? buf : "none");
            name_list(fresh, n_fresh, buf, sizeof(buf));
            logf_(opt, "  initialized (%d): %s", n_fresh, n_fresh ? buf : "none");
        }
    }
    if (st == MX_OK && n_frozen) {
        name_list(frozen, n_frozen, buf, sizeof(buf));
        logf_(opt, "frozen by fit.fixed_params (%d, no gradient computed or applied): %s", n_frozen, buf);
    }
    free(ids);
    free(params);
    free(frozen);
    free(from_file);
    free(fresh);
    free(is_label);
    return st;
}

/* The bytes of each key's gradient in the order the trainer pushes them
 * (learnable parameters, not frozen, from the last layer back): *out is
 * malloc'ed, NULL (and *n 0) when out of memory. */
static void pushed_bytes(const mx_train_settings *s, const mx_graph_shapes *sh, size_t **out, int *n)
{
    const mx_graph *g = s->cfg->graph;
    uint32_t *ids = mx_malloc(sizeof(uint32_t) * ((size_t)mx_graph_num_nodes(g) + 1));
    size_t *bytes = mx_malloc(sizeof(size_t) * ((size_t)mx_graph_num_nodes(g) + 1));
    bool *is_label = label_mask(s);
    *out = NULL;
    *n = 0;
    if (ids && bytes && is_label) {
        const int args = mx_graph_list_arguments(g, ids);
        for (int i = args - 1; i >= 0; i--) {
            const mx_node *node = mx_graph_node(g, ids[i]);
            if (mx_train_settings_fixed(s, node->name) || is_data_input(s, is_label, ids[i])) continue;
            bytes[(*n)++] = (size_t)mx_shape_size(mx_graph_entry_shape(sh, (mx_entry){ids[i], 0})) * sizeof(float);
        }
        *out = bytes;
        bytes = NULL;
    }
    free(ids);
    free(bytes);
    free(is_label);
}

/* Several GPUs with the device store: where each parameter's sum and
 * update live (the store's rule, mx_kvstore_device_homes, over the keys in
 * the trainer's push order). */
static void report_device_store(const mx_train_settings *s, const mx_train_options *opt, const mx_graph_shapes *sh)
{
    if (s->n_ctx < 2 || s->ctx[0].dev_type != MX_DEV_GPU || strcmp(s->fit.kvstore, "device") != 0) return;
    size_t *bytes;
    int keys;
    pushed_bytes(s, sh, &bytes, &keys);
    int *home = mx_malloc(sizeof(int) * ((size_t)keys + 1));
    if (bytes && home) {
        mx_kvstore_device_homes(bytes, keys, s->n_ctx, home);
        char list[1024] = "";
        size_t used = 0;
        for (int d = 0; d < s->n_ctx && used < sizeof(list); d++) {
            size_t total = 0;
            int count = 0;
            for (int k = 0; k < keys; k++)
                if (home[k] == d) total += bytes[k], count++;
            char c[32], b[32];
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s %s (%d)", d ? ", " : "",
                                     mx_context_str(s->ctx[d], c, sizeof(c)), human_bytes((double)total, b, sizeof(b)),
                                     count);
        }
        logf_(opt, "kvstore device: each parameter's gradients summed by NCCL on its home GPU, updated there and "
                   "broadcast back; at home: %s", list);
    }
    free(bytes);
    free(home);
}

/* Under mpirun: what one step sends (MXNet's dist kvstore, in buckets as
 * kvstore_dist.c makes them: learnable parameters from the last layer
 * back, greedily up to fit.fusion_bytes, MX_KVSTORE_FUSION_BYTES when 0). */
static void report_communication(const mx_train_settings *s, const mx_train_options *opt, const mx_graph_shapes *sh)
{
    mx_comm *comm = opt->comm;
    size_t *key_bytes;
    int keys;
    pushed_bytes(s, sh, &key_bytes, &keys);
    if (!key_bytes) return;
    const int64_t params = keys;
    int64_t buckets = 0;
    size_t total = 0, open_bytes = 0;
    size_t fusion = mx_kvstore_bucket_limit((size_t)s->fit.fusion_bytes);
    for (int k = 0; k < keys; k++) {
        if (mx_kvstore_bucket_full(open_bytes, key_bytes[k], fusion)) buckets++, open_bytes = 0;
        open_bytes += key_bytes[k];
        total += key_bytes[k];
    }
    if (open_bytes) buckets++;
    free(key_bytes);
    char a[32], b[32];
    logf_(opt, "under mpirun: %d ranks on %d hosts, kvstore %s", mx_comm_size(comm), mx_comm_num_hosts(comm),
          s->fit.kvstore);
    if (!strcmp(s->fit.kvstore, "dist_async")) { /* kvstore_async.c: one server thread, on rank 0 */
        logf_(opt, "  parameter server: 1 server (a thread of rank 0, which also trains) holds all %lld keys (%s) "
                   "and runs the optimizer",
              (long long)params, human_bytes((double)total, a, sizeof(a)));
        logf_(opt, "  per step, each rank: %lld pushes (%s of gradients), applied as they arrive, each answered "
                   "with the weight its update left (%s in all; the pulls that follow send nothing): no barrier "
                   "between steps",
              (long long)params, human_bytes((double)total, a, sizeof(a)), human_bytes((double)total, b, sizeof(b)));
        logf_(opt, "  the server receives %s and sends %s per step of all %d ranks",
              human_bytes((double)total * mx_comm_size(comm), a, sizeof(a)),
              human_bytes((double)total * mx_comm_size(comm), b, sizeof(b)), mx_comm_size(comm));
        logf_(opt, "  each rank reads 1/%d of the data; rank 0 logs and writes checkpoints (with the server's "
                   "weights and optimizer state)", mx_comm_size(comm));
        return;
    }
    logf_(opt, "  per step: %s of gradients (%lld parameters) summed over the ranks in %lld buckets of up to %s%s", human_bytes((double)total, a, sizeof(a)),
          (long long)params, (long long)buckets, human_bytes((double)fusion, b, sizeof(b)),
          strstr(s->fit.kvstore, "device") ? ": within each host, then among one leader per host, then back" : "");
    logf_(opt, "  each rank reads 1/%d of the data; rank 0 logs and writes checkpoints", mx_comm_size(comm));
}

/* "operation folding: N WHATs run inside the WHERE before them: a+b, ...",
 * a and b each pair's node that took the fold and the layer folded in. */
static mx_status report_fold_pairs(const mx_train_options *opt, const mx_graph *g, const mx_graph_fold_pair *pairs,
                                   int n, const char *what, const char *where)
{
    const char **names = mx_calloc((size_t)n + 1, sizeof(char *));
    char *text = names ? mx_calloc((size_t)n + 1, 256) : NULL;
    if (!names || !text) {
        free(names);
        return MX_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        names[i] = text + (size_t)i * 256;
        snprintf(text + (size_t)i * 256, 256, "%s+%s", mx_graph_node(g, pairs[i].into)->name,
                 mx_graph_node(g, pairs[i].folded)->name);
    }
    char list[1024];
    name_list(names, n, list, sizeof(list));
    logf_(opt, "operation folding: %d %s%s run inside the %s before %s: %s", n, what, n == 1 ? "" : "s", where,
          n == 1 ? "it" : "them", list);
    free(names);
    free(text);
    return MX_OK;
}

/* What operation folding does to this net on the training contexts. */
static mx_status report_folding(const mx_train_settings *s, const mx_train_options *opt)
{
    char c[32];
    for (int i = 0; i < s->n_ctx; i++)
        if (!mx_executor_folds(s->ctx[i])) {
            if (s->ctx[i].dev_type == MX_DEV_CPU)
                logf_(opt, "operation folding: off (MXNET_EXEC_ENABLE_FOLDING=0)");
            else
                logf_(opt, "operation folding: none on %s (only the CPU kernels fold so far)",
                      mx_context_str(s->ctx[i], c, sizeof(c)));
            return MX_OK;
        }
    mx_graph *g;
    MX_TRY(mx_graph_clone(s->cfg->graph, &g));
    mx_graph_fold_pair *pairs = NULL, *sums = NULL;
    int n = 0, n_sums = 0;
    mx_status st = mx_graph_fold_activations(g, &pairs, &n);
    /* Then the residual sums (with what folded into them) into the
     * BatchNorm before them, as the executor does. */
    if (st == MX_OK) st = mx_graph_fold_residual_sums(g, &sums, &n_sums);
    if (st == MX_OK && n) st = report_fold_pairs(opt, g, pairs, n, "activation", "layer");
    if (st == MX_OK && n_sums) st = report_fold_pairs(opt, g, sums, n_sums, "residual sum", "BatchNorm");
    if (st == MX_OK && !n && !n_sums) logf_(opt, "operation folding: nothing to fold");
    free(sums);
    free(pairs);
    mx_graph_free(g);
    return st;
}

mx_status mx_train_dry_run(const mx_train_settings *s, const mx_train_options *opt)
{
    const mx_config *cfg = s->cfg;
    const char *name;
    mx_shape shape;
    MX_TRY(mx_env_check()); /* the report reads them: one it cannot take is an error here too */
    MX_TRY(input_shape(s, &name, &shape));
    mx_graph_shapes sh;
    MX_TRY(mx_config_infer_shapes(cfg, &name, &shape, 1, &sh));
    const mx_graph *g = cfg->graph;
    char buf[160], buf2[64];
    logf_(opt, "%-24s %-22s %-22s %12s", "layer", "op", "output", "parameters");
    int64_t total = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const mx_config_layer *layer = &cfg->layers[l];
        const mx_node *node = mx_graph_node(g, layer->node);
        int64_t params = 0;
        const char *in_names[MX_OP_MAX_IO];
        mx_node_input_names(node, in_names);
        int n_aux = mx_node_num_aux(node);
        for (int j = 0; j < node->n_inputs - n_aux; j++) {
            const mx_node *src = mx_graph_node(g, node->inputs[j].node);
            char own[600];
            snprintf(own, sizeof(own), "%s_%s", node->name, in_names[j]);
            /* The layer's own learnable inputs (weights, biases, gamma...). */
            if (src->kind == MX_NODE_VARIABLE && !strcmp(src->name, own) && strcmp(in_names[j], "label") != 0)
                params += mx_shape_size(mx_graph_entry_shape(&sh, node->inputs[j]));
        }
        total += params;
        snprintf(buf2, sizeof(buf2), "%lld", (long long)params);
        logf_(opt, "%-24s %-22s %-22s %12s", layer->name, layer->op,
              mx_shape_str(mx_graph_entry_shape(&sh, (mx_entry){layer->node, 0}), buf, sizeof(buf)), params ? buf2 : "-");
    }
    logf_(opt, "total parameters: %lld (%s as float32)", (long long)total, human_bytes((double)total * 4, buf, sizeof(buf)));
    if (mx_train_settings_dtype(s) != MX_FLOAT32)
        logf_(opt, "mixed precision: layers compute in %s (float32 master weights, BatchNorm statistics and loss%s); "
                   "the memory plans below are of that graph",
              mx_dtype_name(mx_train_settings_dtype(s)),
              mx_train_settings_dtype(s) == MX_FLOAT16 ? "; dynamic loss scaling" : "");
    if (opt->comm) report_communication(s, opt, &sh);
    report_device_store(s, opt, &sh);
    mx_graph_shapes_free(&sh);

    /* Contexts: a config for another machine still dry-runs, with a note. */
    for (int i = 0; i < s->n_ctx; i++)
        if (mx_device_check(s->ctx[i]) != MX_OK)
            logf_(opt, "note: fit.ctx %s is not available here: %s", mx_context_str(s->ctx[i], buf, sizeof(buf)),
                  mx_last_error());
    if (s->n_ctx > 1) { /* the data-parallel split of every batch */
        int64_t *offsets = mx_calloc((size_t)s->n_ctx, sizeof(int64_t)), *rows = mx_calloc((size_t)s->n_ctx, sizeof(int64_t));
        mx_status st = offsets && rows ? train_group_slices(shape.dims[0], s->work_load, s->n_ctx, offsets, rows)
                                       : mx_last_status();
        char list[1024] = "";
        size_t used = 0;
        for (int i = 0; i < s->n_ctx && st == MX_OK && used < sizeof(list); i++) {
            char c[32];
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s %lld rows", i ? ", " : "",
                                     mx_context_str(s->ctx[i], c, sizeof(c)), (long long)rows[i]);
        }
        free(offsets);
        free(rows);
        MX_TRY(st);
        logf_(opt, "data-parallel over %d contexts: %s", s->n_ctx, list);
    }
    MX_TRY(report_finetune(s, opt));
    if (s->fit.grad_accum > 1)
        logf_(opt, "gradient accumulation: %lld batches of %lld per update (%lld samples)",
              (long long)s->fit.grad_accum, (long long)shape.dims[0], (long long)(s->fit.grad_accum * shape.dims[0]));

    mx_train_report r;
    MX_TRY(mx_train_plan_report(s, &r));
    logf_(opt, "internal memory at batch %lld (arguments, gradients and outputs excluded):", (long long)r.batch_size);
    logf_(opt, "  %-19s %12s %12s %12s %12s %10s %12s", "plan", "naive", "inplace", "co-share", "both", "saving",
          "workspace");
    /* Mirroring's row whatever MXNET_BACKWARD_DO_MIRROR says, so that one
     * dry run shows what it would save. */
    const mx_memory_plan_stats *st[4] = {&r.train, &r.train_mirror, &r.train_segments, &r.predict};
    const char *label[4] = {"training", "training (mirror)", "training (segments)", "prediction"};
    for (int k = 0; k < 4; k++) {
        char a[32], b[32], c[32], d[32], w[32];
        logf_(opt, "  %-19s %12s %12s %12s %12s %9.2fx %12s", label[k], human_bytes((double)st[k]->naive, a, sizeof(a)),
              human_bytes((double)st[k]->inplace, b, sizeof(b)), human_bytes((double)st[k]->coshare, c, sizeof(c)),
              human_bytes((double)st[k]->both, d, sizeof(d)),
              st[k]->both ? (double)st[k]->naive / (double)st[k]->both : 0.0,
              human_bytes((double)st[k]->workspace, w, sizeof(w)));
    }
    const long level = mx_env_long("MXNET_BACKWARD_DO_MIRROR", 0);
    logf_(opt, "  training (mirror): MXNET_BACKWARD_DO_MIRROR=1 (%s in this run) recomputes %d layer outputs in backward",
          level == 1 ? "on" : "off", r.train_mirror.n_mirror);
    {
        const mx_memory_plan_stats *g2 = &r.train_segments;
        char b[32];
        logf_(opt, "  training (segments): MXNET_BACKWARD_DO_MIRROR=2 (%s in this run) keeps %d of its %d possible checkpoints "
                   "(budget %s, the smallest of %d plans) and recomputes %d layer outputs in backward, %d of them "
                   "convolutions or fully-connected",
              level == 2 ? "on" : "off", g2->n_checkpoints, g2->n_checkpoint_candidates,
              human_bytes((double)g2->segment_budget, b, sizeof(b)), g2->n_segment_plans, g2->n_mirror,
              g2->n_mirror_heavy);
    }
    {
        long colors = mx_env_long("MXNET_EXEC_NUM_MATCH_COLOR", -1);
        if (colors >= 0)
            logf_(opt, "  co-sharing: training %d colour%s, prediction %d (MXNET_EXEC_NUM_MATCH_COLOR=%ld)",
                  r.train.n_colors, r.train.n_colors == 1 ? "" : "s", r.predict.n_colors, colors);
        else
            logf_(opt, "  co-sharing: training %d colour%s, prediction %d, mirror %d (the smallest plan of 4, 3 and 2; "
                       "with recomputation 1; MXNET_EXEC_NUM_MATCH_COLOR unset)",
                  r.train.n_colors, r.train.n_colors == 1 ? "" : "s", r.predict.n_colors, r.train_mirror.n_colors);
    }
    {
        const mx_memory_plan_stats *u = &r.train_updating;
        const char *why_not;
        char a[32], b[32];
        human_bytes((double)u->grads_in_plan, a, sizeof(a));
        if (mx_train_settings_update_in_backward(s, &why_not))
            logf_(opt, "  parameter gradients: %s, updated inside the backward pass (those of %d layers at its end): "
                       "the training plan takes %s more instead (MXC_UPDATE_IN_BACKWARD=0: held through the step)",
                  a, u->n_deferred, human_bytes((double)(u->both > r.train.both ? u->both - r.train.both : 0), b, sizeof(b)));
        else
            logf_(opt, "  parameter gradients: %s, held through the step (not updated inside the backward pass: %s)", a,
                  why_not);
    }
    if (r.train.n_sums) {
        long addto = mx_env_long("MXNET_EXEC_ENABLE_ADDTO", -1);
        logf_(opt, "  gradient sums: %d of %d done by adds into one buffer (MXNET_EXEC_ENABLE_ADDTO %s)",
              r.train.n_sums_added, r.train.n_sums,
              addto < 0 ? "unset: unless that grows the plan by more than 1%" : addto ? "=1: wherever it can" : "=0: never");
    }
    if (r.train.n_concat_inputs)
        logf_(opt, "  concatenation in place: %d of %d Concat inputs written inside the Concat's output, %d of their "
                   "gradients read inside its gradient: nothing to copy for them (MXC_CONCAT_IN_PLACE %s)",
              r.train.n_concat_views, r.train.n_concat_inputs, r.train.n_concat_grad_views,
              mx_env_long("MXC_CONCAT_IN_PLACE", 1) ? "unset or 1" : "=0: off");
    MX_TRY(report_folding(s, opt));
    if (s->val && s->train) {
        mx_shape vd, vl;
        if (mx_data_iter_spec_shapes(s->val, &vd, &vl) == MX_OK && vd.dims[0] != shape.dims[0]) {
            mx_memory_plan_stats vp;
            MX_TRY(mx_executor_plan_memory(g, &name, &vd, 1, false, &vp));
            char a[32];
            logf_(opt, "  validation at batch %lld: a prediction plan of %s beside the training one",
                  (long long)vd.dims[0], human_bytes((double)vp.both, a, sizeof(a)));
        }
    }
    return MX_OK;
}
