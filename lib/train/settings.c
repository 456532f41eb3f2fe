/*
 * settings.c - the [fit] table, and the one place that hands each settings
 * section of a config to its owner's parser (settings.h).
 */
#include "train/settings.h"

#include "device/device.h"
#include "kvstore/kvstore.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F(f) offsetof(mx_fit_params, f)
#define NOR 1, 0
/* fit.dtype's choices, in mx_fit_dtype's order. */
static const char *const fit_dtypes[] = {"float32", "float16", "bfloat16", NULL};
static const mx_dtype fit_dtype_values[] = {MX_FLOAT32, MX_FLOAT16, MX_BFLOAT16};
static const mx_param_desc fit_table[] = {
    {"num_epoch", MX_PARAM_INT, "10", 0, 1e9, NULL, F(num_epoch), "epochs to train"},
    {"ctx", MX_PARAM_STRING, "cpu", NOR, NULL, F(ctx), "devices: cpu, cpu:0-3, gpu:0, gpu:0-3, gpu:0,2"},
    {"kvstore", MX_PARAM_STRING, "local", NOR, NULL, F(kvstore),
     "gradient aggregation: local, device, dist_sync, dist_async, dist_sync_device"},
    {"model_prefix", MX_PARAM_STRING, "", NOR, NULL, F(model_prefix),
     "checkpoints PREFIX-symbol.json, PREFIX-NNNN.params and .states (\"\": none)"},
    {"save_period", MX_PARAM_INT, "1", 1, 1e9, NULL, F(save_period), "epochs between checkpoints"},
    {"initializer", MX_PARAM_STRING, "xavier(rnd_type=gaussian, factor_type=in, magnitude=2)", NOR, NULL,
     F(initializer), "NAME or NAME(key=value, ...): xavier, msra, uniform, normal, constant, zero, one"},
    {"metric", MX_PARAM_STRING, "acc", NOR, NULL, F(metric),
     "metrics: acc, top_k_acc:5, ce, mse, mae, rmse, NAME(key=value, ...)"},
    {"seed", MX_PARAM_INT, "0", 0, 4294967295.0, NULL, F(seed), "random seed of initialization and Dropout"},
    {"disp_batches", MX_PARAM_INT, "20", 1, 1e9, NULL, F(disp_batches), "batches between progress lines"},
    {"load_epoch", MX_PARAM_INT, "-1", -1, 1e9, NULL, F(load_epoch), "resume from this epoch's checkpoint"},
    {"finetune_from", MX_PARAM_STRING, "", NOR, NULL, F(finetune_from),
     "PREFIX-NNNN.params: start from its parameters whose names match"},
    {"fixed_params", MX_PARAM_STRING, "", NOR, NULL, F(fixed_params),
     "glob patterns (conv1_*, conv2_*) of parameters kept frozen"},
    {"grad_accum", MX_PARAM_INT, "1", 1, 1e6, NULL, F(grad_accum), "batches whose gradients make one update"},
    {"check_numerics", MX_PARAM_BOOL, "0", NOR, NULL, F(check_numerics),
     "check every layer's output and gradient for NaN/Inf every batch"},
    {"dtype", MX_PARAM_ENUM, "float32", NOR, fit_dtypes, F(dtype),
     "the layers' compute type: float32, or float16 / bfloat16 mixed precision (float32 master weights, BatchNorm "
     "statistics and loss; dynamic loss scaling for float16)"},
    {"cuda_graph", MX_PARAM_BOOL, "1", NOR, NULL, F(cuda_graph),
     "GPU: each kind of pass (forward, backward, validation) captured as a CUDA graph after its first run and "
     "launched as one, where it can be (not with Dropout in training, nor under fit.profile)"},
    {"stall_timeout", MX_PARAM_FLOAT, "60", 0, 1e6, NULL, F(stall_timeout),
     "under mpirun: seconds a rank may be missing from a collective before the job ends (0: wait forever)"},
    {"fusion_bytes", MX_PARAM_INT, "0", 0, 2147483647.0, NULL, F(fusion_bytes),
     "dist_sync kinds: gradients are summed over the ranks in buckets of up to this many bytes (Horovod's tensor "
     "fusion; 0: 1 MiB)"},
    {"work_load_list", MX_PARAM_STRING, "", NOR, NULL, F(work_load_list),
     "relative share of each context in a batch, e.g. 1, 1, 2 (\"\": equal)"},
    {"profile", MX_PARAM_STRING, "", NOR, NULL, F(profile),
     "FILE.json: Chrome-trace timeline of the engine and MPI (under mpirun FILE.rankR.json) (\"\": none)"},
    {"profile_batches", MX_PARAM_STRING, "", NOR, NULL, F(profile_batches),
     "batches in the timeline: A-B (inclusive, from 0 over the run), N (the first N) or \"\" (all)"},
    {"max_skip_fraction", MX_PARAM_FLOAT, "0.01", 0, 1, NULL, F(max_skip_fraction),
     "the most of the data (records or bytes) an iterator may skip as corrupt before training stops with an error"},
};
#undef F
#undef NOR
#define N_FIT ((int)(sizeof(fit_table) / sizeof(fit_table[0])))

const mx_param_desc *mx_fit_param_table(int *n)
{
    *n = N_FIT;
    return fit_table;
}

void mx_train_settings_free(mx_train_settings *s)
{
    if (!s) return;
    mx_data_iter_spec_free(s->train);
    mx_data_iter_spec_free(s->val);
    free(s->ctx);
    free(s->work_load);
    mx_initializer_free(s->initializer);
    free(s->metrics);
    for (int i = 0; i < s->n_fixed; i++) free(s->fixed[i]);
    free(s->fixed);
    free(s);
}

/* A structured value's owner said no: its message at the key's place. */
static mx_status blame_owner(const mx_param_input *in, const char *key, mx_status code)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", mx_last_error());
    return mx_params_blame(in, "fit", key, code, "%s", msg);
}

bool mx_train_settings_fixed(const mx_train_settings *s, const char *name)
{
    for (int i = 0; i < s->n_fixed; i++)
        if (!fnmatch(s->fixed[i], name, 0)) return true;
    return false;
}

/* fit.fixed_params: comma-separated glob patterns, each matching at least
 * one learnable parameter of the network (a typo must not freeze nothing). */
static mx_status parse_fixed(mx_train_settings *s, const mx_param_input *in)
{
    const char *p = s->fit.fixed_params;
    const mx_graph *g = s->cfg->graph;
    uint32_t *ids = mx_malloc(sizeof(uint32_t) * ((size_t)mx_graph_num_nodes(g) + 1));
    if (!ids) return mx_last_status();
    int n_args = mx_graph_list_arguments(g, ids);
    mx_status st = MX_OK;
    while (*p && st == MX_OK) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (!*p) break;
        const char *end = p;
        while (*end && *end != ',') end++;
        size_t len = (size_t)(end - p);
        while (len && isspace((unsigned char)p[len - 1])) len--;
        char *pattern = mx_malloc(len + 1);
        char **grown = pattern ? mx_realloc(s->fixed, sizeof(char *) * (size_t)(s->n_fixed + 1)) : NULL;
        if (!grown) {
            free(pattern);
            st = mx_last_status();
            break;
        }
        s->fixed = grown;
        memcpy(pattern, p, len);
        pattern[len] = '\0';
        s->fixed[s->n_fixed++] = pattern;
        bool matched = false;
        for (int i = 0; i < n_args && !matched; i++) {
            const char *name = mx_graph_node(g, ids[i])->name;
            bool is_input = false;
            for (int k = 0; k < s->cfg->n_inputs; k++) is_input = is_input || !strcmp(name, s->cfg->inputs[k]);
            if (!is_input && !fnmatch(pattern, name, 0)) matched = true;
        }
        if (!matched)
            st = mx_params_blame(in, "fit", "fixed_params", MX_ERR_INVALID,
                                 "'%s' matches no parameter of the network", pattern);
        p = end;
    }
    free(ids);
    return st;
}

mx_status mx_train_settings_for_rank(mx_train_settings *s, int local_rank, int local_size, const char *host)
{
    /* One GPU listed: every rank takes it as given (a per-rank
     * CUDA_VISIBLE_DEVICES makes it each rank's own). */
    if (local_size <= 1 || s->n_ctx <= 1 || s->ctx[0].dev_type != MX_DEV_GPU) return MX_OK;
    if (s->n_ctx < local_size)
        return MX_ERROR(MX_ERR_INVALID, "[fit] ctx: '%s' lists %d GPU(s) for the %d ranks on host %s: under mpirun each "
                                        "rank of a host trains on the GPU of fit.ctx at its local rank (list at least "
                                        "%d, e.g. gpu:0-%d)",
                        s->fit.ctx, s->n_ctx, local_size, host ? host : "?", local_size, local_size - 1);
    if (s->work_load)
        return MX_ERROR(MX_ERR_INVALID, "[fit] work_load_list: shares of several contexts of one process; under "
                                        "mpirun with %d ranks on host %s each rank trains on one GPU",
                        local_size, host ? host : "?");
    s->ctx[0] = s->ctx[local_rank];
    s->n_ctx = 1;
    return MX_OK;
}

/* fit.work_load_list: one positive share per context. */
static mx_status parse_work_load(mx_train_settings *s, const mx_param_input *in)
{
    const char *p = s->fit.work_load_list;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return MX_OK;
    s->work_load = mx_calloc((size_t)s->n_ctx + 1, sizeof(double));
    if (!s->work_load) return mx_last_status();
    int n = 0;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0) || v > 1e9)
            return mx_params_blame(in, "fit", "work_load_list", MX_ERR_INVALID,
                                   "bad value '%s': expected positive shares such as 1, 1, 2", s->fit.work_load_list);
        if (n < s->n_ctx) s->work_load[n] = v;
        n++;
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == ',') p++;
        else if (*p)
            return mx_params_blame(in, "fit", "work_load_list", MX_ERR_INVALID,
                                   "bad value '%s': expected positive shares such as 1, 1, 2", s->fit.work_load_list);
    }
    if (n != s->n_ctx)
        return mx_params_blame(in, "fit", "work_load_list", MX_ERR_INVALID, "%d shares for %d contexts (fit.ctx)", n,
                               s->n_ctx);
    return MX_OK;
}

/* fit.profile_batches: "A-B", "N" or "" (every batch). */
static mx_status parse_profile_batches(mx_train_settings *s, const mx_param_input *in)
{
    const char *p = s->fit.profile_batches;
    s->profile_first = 0;
    s->profile_last = -1;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return MX_OK;
    char *end;
    long long a = strtoll(p, &end, 10), b = -1;
    bool ok = end != p && a >= 0 && isdigit((unsigned char)*p);
    bool range = false;
    if (ok) {
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '-') {
            range = true;
            p++;
            while (*p == ' ' || *p == '\t') p++;
            b = strtoll(p, &end, 10);
            ok = end != p && isdigit((unsigned char)*p) && b >= a;
            p = end;
            while (*p == ' ' || *p == '\t') p++;
        }
        ok = ok && !*p && (range || a > 0);
    }
    if (!ok)
        return mx_params_blame(in, "fit", "profile_batches", MX_ERR_INVALID,
                               "bad value '%s': expected A-B (batches A to B, A <= B) or N (the first N batches, N >= 1)",
                               s->fit.profile_batches);
    if (range) {
        s->profile_first = a;
        s->profile_last = b;
    } else {
        s->profile_last = a - 1;
    }
    return MX_OK;
}

static mx_status parse_fit(mx_train_settings *s, const mx_param_input *in)
{
    MX_TRY(mx_params_parse_input("fit", fit_table, N_FIT, sizeof(s->fit), in, &s->fit, NULL));
    MX_TRY(parse_profile_batches(s, in));
    if (mx_device_parse_list(s->fit.ctx, &s->ctx, &s->n_ctx) != MX_OK) return blame_owner(in, "ctx", MX_ERR_INVALID);
    MX_TRY(parse_work_load(s, in));
    if (mx_kvstore_type_check(s->fit.kvstore) != MX_OK) return blame_owner(in, "kvstore", MX_ERR_INVALID);
    mx_kvstore_options kvo = {.fusion_bytes = (size_t)s->fit.fusion_bytes};
    if (mx_kvstore_options_check(s->fit.kvstore, &kvo) != MX_OK)
        return blame_owner(in, "fusion_bytes", MX_ERR_INVALID);
    if (mx_initializer_parse(s->fit.initializer, &s->initializer) != MX_OK)
        return blame_owner(in, "initializer", MX_ERR_INVALID);
    if (mx_metric_parse_list(s->fit.metric, &s->metrics, &s->n_metrics) != MX_OK)
        return blame_owner(in, "metric", MX_ERR_INVALID);
    /* The dist_sync kinds agree on every skipped step; dist_async's server
     * applies each worker's push as it comes. */
    if (mx_train_settings_dtype(s) == MX_FLOAT16 && !strcmp(s->fit.kvstore, "dist_async"))
        return mx_params_blame(in, "fit", "dtype", MX_ERR_UNSUPPORTED,
                               "float16 with kvstore 'dist_async' is not supported yet (its server would have to skip "
                               "the updates of overflowed pushes): use bfloat16, which needs no loss scaling, or "
                               "dist_sync");
    return parse_fixed(s, in);
}

mx_status mx_train_settings_load(const mx_config *cfg, mx_train_settings **out)
{
    *out = NULL;
    mx_train_settings *s = mx_calloc(1, sizeof(*s));
    if (!s) return mx_last_status();
    s->cfg = cfg;
    mx_param_input in;
    mx_status st = MX_OK;
    static const char *const iters[2] = {"train", "val"};
    for (int k = 0; k < 2 && st == MX_OK; k++) {
        if (!mx_config_has_section(cfg, iters[k])) continue;
        mx_config_section_input(cfg, iters[k], &in);
        st = mx_data_iter_spec_parse(&in, k == 0 ? &s->train : &s->val);
    }
    if (st == MX_OK) {
        mx_config_section_input(cfg, "optimizer", &in);
        st = mx_optimizer_spec_parse(&in, &s->optimizer);
    }
    if (st == MX_OK) {
        mx_config_section_input(cfg, "fit", &in);
        st = parse_fit(s, &in);
    }
    if (st != MX_OK) {
        mx_train_settings_free(s);
        return st;
    }
    *out = s;
    return MX_OK;
}

const mx_data_iter_spec *mx_train_settings_shape_source(const mx_train_settings *s)
{
    return s->train ? s->train : s->val;
}

mx_dtype mx_train_settings_dtype(const mx_train_settings *s) { return fit_dtype_values[s->fit.dtype]; }

bool mx_train_settings_update_in_backward(const mx_train_settings *s, const char **why_not)
{
    const char *reason = NULL;
    if (mx_env_long("MXC_UPDATE_IN_BACKWARD", 1) == 0) reason = "MXC_UPDATE_IN_BACKWARD=0";
    else if (mx_train_settings_dtype(s) == MX_FLOAT16) reason = "float16's loss scaling checks every gradient first";
    else if (s->n_ctx != 1) reason = "several contexts sum their gradients first";
    else if (s->ctx[0].dev_type != MX_DEV_CPU) reason = "CPU contexts only so far";
    else if (mx_kvstore_type_is_dist(s->fit.kvstore)) reason = "a dist store sums the workers' gradients first";
    else if (s->fit.grad_accum > 1) reason = "fit.grad_accum sums several batches' gradients";
    if (why_not) *why_not = reason;
    return reason == NULL;
}
