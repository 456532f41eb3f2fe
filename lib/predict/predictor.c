/*
 * predictor.c - a checkpoint bound for prediction: the symbol and its
 * parameters on the CPU, bound (no backward pass, the prediction memory
 * plan, only the graph up to the requested output) at a batch size.
 */
#include "predict/predict.h"

#include "checkpoint/checkpoint.h"
#include "profile/profile.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mx_predictor {
    mx_runtime *rt;
    mx_profiler *prof; /* between mx_predictor_profile_begin and _end */
    mx_graph *g;
    char *prefix;
    int epoch;
    mx_ndarray_list file_args, file_aux; /* CPU, as loaded */
    /* Look-ups by name into those lists and the label variables, made once:
     * a scan per argument is quadratic in a deep net. */
    mx_name_index args_index, aux_index;
    bool *label;
    uint32_t data_id;
    /* For layers that draw even at inference (Dropout with mode=always);
     * a fixed seed keeps predictions reproducible run to run. */
    mx_rng *rng;
    /* bound */
    mx_graph *folded;      /* the graph bound when BatchNorm layers folded (else NULL: g) */
    mx_graph *mixed;       /* opts.dtype's mixed-precision graph of that (else NULL) */
    mx_graph_bn_fold *folds;
    int n_folds;
    mx_ndarray **fold_arrays; /* per fold: new weight, new bias (CPU) */
    mx_executor *ex;
    mx_ndarray **args, **aux;
    int n_args, n_aux;
    mx_ndarray *data;      /* the bound data argument */
    mx_ndarray *staging;   /* CPU copy of the batch for another context; NULL on the CPU */
    mx_ndarray *output;    /* borrowed from the executor */
    mx_ndarray *output_f32; /* CPU float32 copy of a half-precision output (else NULL) */
    mx_shape out_sample;
    int64_t batch_size;
    size_t batch_bytes;
};

static int find_name(const mx_name_index *index, const char *name)
{
    uint32_t i = mx_name_index_find(index, name);
    return i == MX_NAME_NONE ? -1 : (int)i;
}

static const char *list_name_of(const void *l, uint32_t i) { return ((const mx_ndarray_list *)l)->names[i]; }

/* The name indexes and the label mask (variables that feed the label slot
 * of a loss layer). */
static mx_status make_lookups(mx_predictor *p)
{
    mx_name_index_init(&p->args_index, list_name_of, &p->file_args);
    mx_name_index_init(&p->aux_index, list_name_of, &p->file_aux);
    MX_TRY(mx_name_index_reserve(&p->args_index, (uint32_t)p->file_args.count, (uint32_t)p->file_args.count));
    MX_TRY(mx_name_index_reserve(&p->aux_index, (uint32_t)p->file_aux.count, (uint32_t)p->file_aux.count));
    int n_nodes = mx_graph_num_nodes(p->g);
    if (!(p->label = mx_calloc((size_t)n_nodes + 1, sizeof(bool)))) return mx_last_status();
    for (int i = 0; i < n_nodes; i++) {
        const mx_node *n = mx_graph_node(p->g, (uint32_t)i);
        if (n->kind != MX_NODE_OP || !(n->op->flags & MX_OP_LOSS)) continue;
        for (int j = 1; j < n->n_inputs; j++) p->label[n->inputs[j].node] = true;
    }
    return MX_OK;
}

static void unbind(mx_predictor *p)
{
    if (p->rt) mx_engine_wait_all(mx_runtime_engine(p->rt));
    mx_executor_free(p->ex);
    p->ex = NULL;
    for (int i = 0; i < p->n_args; i++) mx_ndarray_free(p->args ? p->args[i] : NULL);
    for (int i = 0; i < p->n_aux; i++) mx_ndarray_free(p->aux ? p->aux[i] : NULL);
    free(p->args);
    free(p->aux);
    p->args = p->aux = NULL;
    p->n_args = p->n_aux = 0;
    mx_ndarray_free(p->staging);
    mx_ndarray_free(p->output_f32);
    p->staging = p->output_f32 = NULL;
    p->data = p->output = NULL;
    for (int i = 0; p->fold_arrays && i < 2 * p->n_folds; i++) mx_ndarray_free(p->fold_arrays[i]);
    free(p->fold_arrays);
    p->fold_arrays = NULL;
    mx_graph_bn_folds_free(p->folds, p->n_folds);
    p->folds = NULL;
    p->n_folds = 0;
    mx_graph_free(p->folded);
    mx_graph_free(p->mixed);
    p->folded = p->mixed = NULL;
}

/* Detaches the profiler once the engine has run everything that might
 * record into it. */
static void profile_detach(mx_predictor *p)
{
    mx_engine *e = mx_runtime_engine(p->rt);
    mx_engine_wait_all(e);
    mx_engine_set_profiler(e, NULL);
}

static void profile_stop(mx_predictor *p)
{
    if (!p->prof) return;
    profile_detach(p);
    mx_profiler_free(p->prof);
    p->prof = NULL;
}

mx_status mx_predictor_profile_begin(mx_predictor *p)
{
    if (p->prof) return MX_ERROR(MX_ERR_INVALID, "predictor: a timeline is already being recorded");
    MX_TRY(mx_profiler_create(0, "mxpredict", &p->prof));
    mx_profiler_set_active(p->prof, true);
    mx_engine_set_profiler(mx_runtime_engine(p->rt), p->prof);
    return MX_OK;
}

mx_status mx_predictor_profile_end(mx_predictor *p, const char *path)
{
    if (!p->prof) return MX_ERROR(MX_ERR_INVALID, "predictor: no timeline is being recorded");
    profile_detach(p);
    mx_status s = mx_profiler_write(p->prof, path);
    if (s != MX_OK) mx_error_prefix(s, "timeline");
    mx_profiler_free(p->prof);
    p->prof = NULL;
    return s;
}

void mx_predictor_free(mx_predictor *p)
{
    if (!p) return;
    profile_stop(p);
    unbind(p);
    mx_rng_free(p->rng);
    mx_name_index_free(&p->args_index);
    mx_name_index_free(&p->aux_index);
    free(p->label);
    mx_ndarray_list_free(&p->file_args);
    mx_ndarray_list_free(&p->file_aux);
    mx_graph_free(p->g);
    free(p->prefix);
    mx_runtime_free(p->rt);
    free(p);
}

static mx_status find_data(mx_predictor *p)
{
    const mx_graph *g = p->g;
    uint32_t *ids = mx_malloc(sizeof(uint32_t) * ((size_t)mx_graph_num_nodes(g) + 1));
    if (!ids) return MX_ERR_NOMEM;
    int n = mx_graph_list_arguments(g, ids), n_cand = 0;
    uint32_t cand[8];
    p->data_id = MX_NO_NODE;
    for (int i = 0; i < n; i++) {
        const char *name = mx_graph_node(g, ids[i])->name;
        if (find_name(&p->args_index, name) >= 0 || p->label[ids[i]]) continue;
        if (!strcmp(name, "data")) p->data_id = ids[i];
        if (n_cand < 8) cand[n_cand] = ids[i];
        n_cand++;
    }
    free(ids);
    char path[4096];
    mx_checkpoint_params_path(p->prefix, p->epoch, path, sizeof(path));
    if (p->data_id != MX_NO_NODE) return MX_OK;
    if (n_cand == 1) {
        p->data_id = cand[0];
        return MX_OK;
    }
    if (n_cand == 0)
        return MX_ERROR(MX_ERR_INVALID, "%s-symbol.json: every input is in %s: the symbol has no data input",
                        p->prefix, path);
    char list[512] = "";
    for (int i = 0; i < n_cand && i < 8; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s'%s'", i ? ", " : "", mx_graph_node(g, cand[i])->name);
    }
    return MX_ERROR(MX_ERR_INVALID,
                    "%s-symbol.json: %d inputs are not in %s (%s): mxpredict feeds one data input (name it 'data'), "
                    "the others must be parameters",
                    p->prefix, n_cand, path, list);
}

mx_status mx_predictor_load(const char *prefix, int epoch, mx_predictor **out)
{
    *out = NULL;
    mx_predictor *p = calloc(1, sizeof(*p));
    if (!p) return MX_ERROR(MX_ERR_NOMEM, "out of memory");
    p->prefix = strdup(prefix);
    if (!p->prefix) {
        free(p);
        return MX_ERROR(MX_ERR_NOMEM, "out of memory");
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s-symbol.json", prefix);
    mx_status s = mx_graph_load_json(path, &p->g);
    if (s == MX_OK) {
        if (epoch < 0) {
            epoch = mx_checkpoint_latest_epoch(prefix);
            if (epoch < 0) s = MX_ERROR(MX_ERR_IO, "no %s-NNNN.params: the model has no saved epoch", prefix);
        }
        p->epoch = epoch;
    }
    mx_engine_config ec = mx_engine_config_default();
    if (s == MX_OK) s = mx_runtime_create(&ec, &p->rt);
    if (s == MX_OK) s = mx_checkpoint_load(p->rt, prefix, epoch, &p->file_args, &p->file_aux);
    if (s == MX_OK) s = make_lookups(p);
    if (s == MX_OK) s = find_data(p);
    if (s != MX_OK) {
        mx_predictor_free(p);
        return s;
    }
    *out = p;
    return MX_OK;
}

int mx_predictor_epoch(const mx_predictor *p) { return p->epoch; }
const char *mx_predictor_data_name(const mx_predictor *p) { return mx_graph_node(p->g, p->data_id)->name; }
const mx_graph *mx_predictor_graph(const mx_predictor *p) { return p->g; }

bool mx_predictor_shape_hint(const mx_predictor *p, mx_shape *sample)
{
    const char *v = mx_graph_get_attr(p->g, p->data_id, "__shape__");
    if (!v) return false;
    int64_t dims[MX_MAX_NDIM];
    int n = 0;
    const char *s = v;
    while (*s) {
        while (*s && !isdigit((unsigned char)*s)) {
            if (*s == '-') return false;
            s++;
        }
        if (!*s) break;
        if (n == MX_MAX_NDIM) return false;
        char *end;
        errno = 0;
        long long d = strtoll(s, &end, 10);
        if (errno || d <= 0) return false; /* 0: unknown */
        dims[n++] = d;
        s = end;
    }
    if (n < 2) return false;
    *sample = mx_shape_make(n - 1, dims + 1);
    return true;
}

/* An array on ctx holding src's values in dtype (src itself when it is
 * that already): a float16 model's weights saved as float32, or the
 * reverse, are converted. */
static mx_status to_ctx(mx_runtime *rt, mx_ndarray *src, mx_context ctx, mx_dtype dtype, mx_ndarray **out)
{
    if (mx_context_equal(mx_ndarray_context(src), ctx) && mx_ndarray_dtype(src) == dtype) {
        *out = mx_ndarray_retain(src);
        return MX_OK;
    }
    MX_TRY(mx_ndarray_create(rt, *mx_ndarray_shape(src), dtype, ctx, out));
    return mx_nd_copy(*out, src);
}

/* The host values of a saved array (args, or aux when aux), as floats. */
static mx_status saved_values(mx_predictor *p, const char *name, bool aux, int64_t n, float *out)
{
    int k = find_name(aux ? &p->aux_index : &p->args_index, name);
    const mx_ndarray_list *l = aux ? &p->file_aux : &p->file_args;
    char path[4096];
    mx_checkpoint_params_path(p->prefix, p->epoch, path, sizeof(path));
    if (k < 0) return MX_ERROR(MX_ERR_FORMAT, "%s: has no %s:%s, which the symbol needs", path, aux ? "aux" : "arg", name);
    mx_ndarray *a = l->arrays[k];
    if (mx_ndarray_size(a) != n)
        return MX_ERROR(MX_ERR_INVALID, "%s: %s has %lld values, the folded BatchNorm needs %lld", path, name,
                        (long long)mx_ndarray_size(a), (long long)n);
    if (mx_ndarray_dtype(a) == MX_FLOAT32) return mx_ndarray_to_host(a, out, (size_t)n * sizeof(float));
    mx_ndarray *f;
    MX_TRY(mx_ndarray_create(p->rt, *mx_ndarray_shape(a), MX_FLOAT32, mx_cpu(), &f));
    mx_status s = mx_nd_copy(f, a);
    if (s == MX_OK) s = mx_ndarray_to_host(f, out, (size_t)n * sizeof(float));
    mx_ndarray_free(f);
    return s;
}

/* The folded convolution's weight and bias (mx_graph_bn_fold): per output
 * channel c, s = gamma / sqrt(var + eps) in double, W' = W * s,
 * b' = (b - mean) * s + beta. */
static mx_status fold_values(mx_predictor *p, const mx_graph_bn_fold *f, mx_ndarray **weight, mx_ndarray **bias)
{
    int k = find_name(&p->args_index, f->weight);
    if (k < 0) return saved_values(p, f->weight, false, 0, NULL); /* the missing-parameter error */
    const mx_shape ws = *mx_ndarray_shape(p->file_args.arrays[k]);
    const int64_t channels = ws.ndim > 0 ? ws.dims[0] : 0, total = mx_shape_size(&ws);
    const int64_t per = channels > 0 ? total / channels : 0;
    float *w = mx_malloc(sizeof(float) * (size_t)(total + 1));
    float *st = mx_malloc(sizeof(float) * (size_t)(5 * channels + 1)); /* bias, gamma, beta, mean, var */
    mx_status s = w && st ? MX_OK : MX_ERR_NOMEM;
    float *b = st, *gamma = st + channels, *beta = st + 2 * channels, *mean = st + 3 * channels,
          *var = st + 4 * channels;
    if (s == MX_OK) s = saved_values(p, f->weight, false, total, w);
    if (s == MX_OK && f->bias) s = saved_values(p, f->bias, false, channels, b);
    else if (s == MX_OK) memset(b, 0, sizeof(float) * (size_t)channels);
    if (s == MX_OK) s = saved_values(p, f->gamma, false, channels, gamma);
    if (s == MX_OK) s = saved_values(p, f->beta, false, channels, beta);
    if (s == MX_OK) s = saved_values(p, f->moving_mean, true, channels, mean);
    if (s == MX_OK) s = saved_values(p, f->moving_var, true, channels, var);
    for (int64_t c = 0; s == MX_OK && c < channels; c++) {
        double scale = (f->fix_gamma ? 1.0 : (double)gamma[c]) / sqrt((double)var[c] + f->eps);
        for (int64_t i = 0; i < per; i++) w[c * per + i] = (float)((double)w[c * per + i] * scale);
        b[c] = (float)(((double)b[c] - (double)mean[c]) * scale + (double)beta[c]);
    }
    if (s == MX_OK) s = mx_ndarray_create(p->rt, ws, MX_FLOAT32, mx_cpu(), weight);
    if (s == MX_OK) s = mx_ndarray_from_host(*weight, w, sizeof(float) * (size_t)total);
    if (s == MX_OK) s = mx_ndarray_create(p->rt, MX_SHAPE(channels), MX_FLOAT32, mx_cpu(), bias);
    if (s == MX_OK) s = mx_ndarray_from_host(*bias, b, sizeof(float) * (size_t)channels);
    free(w);
    free(st);
    return s;
}

/* Folds BatchNorm into convolutions unless told not to (p->folded, the
 * folds and their arrays; nothing when no pair folds). */
static mx_status fold_batchnorm(mx_predictor *p, const mx_predictor_bind_opts *o)
{
    if (o->keep_batchnorm) return MX_OK;
    MX_TRY(mx_graph_fold_batchnorm(p->g, o->layer, &p->folded, &p->folds, &p->n_folds));
    if (!p->n_folds) return MX_OK;
    p->fold_arrays = calloc((size_t)(2 * p->n_folds), sizeof(mx_ndarray *));
    if (!p->fold_arrays) return MX_ERROR(MX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p->n_folds; i++)
        MX_TRY(fold_values(p, &p->folds[i], &p->fold_arrays[2 * i], &p->fold_arrays[2 * i + 1]));
    return MX_OK;
}

/* A folded convolution's new weight or bias by name, or NULL. */
static mx_ndarray *fold_array(const mx_predictor *p, const char *name)
{
    for (int i = 0; i < p->n_folds; i++) {
        if (!strcmp(p->folds[i].new_weight, name)) return p->fold_arrays[2 * i];
        if (!strcmp(p->folds[i].new_bias, name)) return p->fold_arrays[2 * i + 1];
    }
    return NULL;
}

mx_status mx_predictor_bind(mx_predictor *p, const mx_predictor_bind_opts *o)
{
    unbind(p);
    if (o->batch_size < 1) return MX_ERROR(MX_ERR_INVALID, "batch size %lld must be at least 1", (long long)o->batch_size);
    if (o->sample.ndim < 1 || o->sample.ndim >= MX_MAX_NDIM || mx_shape_size(&o->sample) < 1)
        return MX_ERROR(MX_ERR_INVALID, "bad input shape");
    mx_status fs = fold_batchnorm(p, o);
    if (fs != MX_OK) {
        unbind(p);
        return fs;
    }
    const mx_graph *g = p->folded ? p->folded : p->g;
    if (o->dtype != MX_FLOAT32) {
        fs = mx_graph_compute_in(g, o->dtype, &p->mixed);
        if (fs != MX_OK) {
            unbind(p);
            return fs;
        }
        g = p->mixed;
    }
    const uint32_t data_id = mx_graph_find(g, mx_graph_node(p->g, p->data_id)->name);
    int n_nodes = mx_graph_num_nodes(g);
    uint32_t *arg_ids = mx_malloc(sizeof(uint32_t) * ((size_t)n_nodes + 1));
    uint32_t *aux_ids = mx_malloc(sizeof(uint32_t) * ((size_t)n_nodes + 1));
    int cap = p->file_args.count + p->file_aux.count + 2 * p->n_folds + 1;
    const char **names = mx_malloc(sizeof(char *) * (size_t)cap);
    mx_shape *shapes = mx_malloc(sizeof(mx_shape) * (size_t)cap);
    mx_status s = (arg_ids && aux_ids && names && shapes) ? MX_OK : MX_ERR_NOMEM;
    mx_graph_shapes sh = {0};
    bool have_shapes = false;
    char path[4096], a[160], b[160];
    mx_checkpoint_params_path(p->prefix, p->epoch, path, sizeof(path));
    mx_shape data_shape = {0};
    if (s == MX_OK) {
        p->n_args = mx_graph_list_arguments(g, arg_ids);
        p->n_aux = mx_graph_list_aux(g, aux_ids);
        p->args = calloc((size_t)p->n_args + 1, sizeof(mx_ndarray *));
        p->aux = calloc((size_t)p->n_aux + 1, sizeof(mx_ndarray *));
        if (!p->args || !p->aux) s = MX_ERROR(MX_ERR_NOMEM, "out of memory");
    }
    if (s == MX_OK) {
        /* The data shape and every saved array the symbol has. */
        int n = 0;
        data_shape.ndim = o->sample.ndim + 1;
        data_shape.dims[0] = o->batch_size;
        for (int i = 0; i < o->sample.ndim; i++) data_shape.dims[i + 1] = o->sample.dims[i];
        names[n] = mx_graph_node(g, data_id)->name;
        shapes[n++] = data_shape;
        for (int i = 0; i < 2 * p->n_folds; i++) {
            names[n] = i % 2 ? p->folds[i / 2].new_bias : p->folds[i / 2].new_weight;
            shapes[n++] = *mx_ndarray_shape(p->fold_arrays[i]);
        }
        for (int pass = 0; pass < 2; pass++) {
            const mx_ndarray_list *l = pass ? &p->file_aux : &p->file_args;
            for (int i = 0; i < l->count; i++) {
                if (mx_graph_find(g, l->names[i]) == MX_NO_NODE) continue; /* extra arrays: ignored, as MXNet */
                names[n] = l->names[i];
                shapes[n++] = *mx_ndarray_shape(l->arrays[i]);
            }
        }
        s = mx_graph_infer_shapes(g, names, shapes, n, &sh);
        if (s == MX_OK) have_shapes = true;
        else mx_error_prefix(s, "input %s", mx_shape_str(&data_shape, a, sizeof(a)));
        /* The dtypes the symbol computes in (a float16 model's Casts and
         * weights): the arrays are made in them, converted from the file. */
        if (s == MX_OK) s = mx_graph_infer_types(g, NULL, NULL, 0, &sh);
    }
    for (int i = 0; i < p->n_args && s == MX_OK; i++) {
        uint32_t id = arg_ids[i];
        const char *name = mx_graph_node(g, id)->name;
        const mx_shape *shape = mx_graph_entry_shape(&sh, (mx_entry){id, 0});
        const mx_dtype dtype = mx_graph_entry_dtype(&sh, (mx_entry){id, 0});
        int k = find_name(&p->args_index, name);
        uint32_t source_id = mx_graph_find(p->g, name); /* the label mask is the loaded graph's */
        mx_ndarray *folded = fold_array(p, name);
        if (id == data_id) {
            s = mx_ndarray_create(p->rt, *shape, dtype, o->ctx, &p->args[i]);
            p->data = p->args[i];
        } else if (folded) {
            s = to_ctx(p->rt, folded, o->ctx, dtype, &p->args[i]);
        } else if (k >= 0) {
            if (!mx_shape_equal(mx_ndarray_shape(p->file_args.arrays[k]), shape))
                s = MX_ERROR(MX_ERR_INVALID, "%s: %s has shape %s, the network needs %s", path, name,
                             mx_shape_str(mx_ndarray_shape(p->file_args.arrays[k]), a, sizeof(a)),
                             mx_shape_str(shape, b, sizeof(b)));
            else
                s = to_ctx(p->rt, p->file_args.arrays[k], o->ctx, dtype, &p->args[i]);
        } else if (source_id != MX_NO_NODE && p->label[source_id]) {
            s = mx_ndarray_create(p->rt, *shape, dtype, o->ctx, &p->args[i]);
            if (s == MX_OK) s = mx_nd_fill(p->args[i], 0.0);
        } else {
            s = MX_ERROR(MX_ERR_FORMAT, "%s: has no arg:%s, which the symbol needs", path, name);
        }
    }
    for (int i = 0; i < p->n_aux && s == MX_OK; i++) {
        const char *name = mx_graph_node(g, aux_ids[i])->name;
        int k = find_name(&p->aux_index, name);
        if (k < 0) s = MX_ERROR(MX_ERR_FORMAT, "%s: has no aux:%s, which the symbol needs", path, name);
        else s = to_ctx(p->rt, p->file_aux.arrays[k], o->ctx, mx_graph_entry_dtype(&sh, (mx_entry){aux_ids[i], 0}),
                        &p->aux[i]);
    }
    if (s == MX_OK && !p->rng) s = mx_rng_create(p->rt, 0, &p->rng);
    /* Everything but the data is written here and never again: kernels may
     * keep what they derive from it (mx_bind_config.fixed_args). */
    bool *fixed = s == MX_OK ? mx_malloc((size_t)p->n_args + 1) : NULL;
    if (s == MX_OK && !fixed) s = MX_ERR_NOMEM;
    for (int i = 0; i < p->n_args && s == MX_OK; i++) fixed[i] = arg_ids[i] != data_id;
    if (s == MX_OK) {
        const char *outputs[1] = {o->layer};
        mx_bind_config bc = {.ctx = o->ctx, .args = p->args, .aux = p->aux, .outputs = o->layer ? outputs : NULL,
                             .n_outputs = o->layer ? 1 : 0, .for_training = false, .rng = p->rng,
                             .fixed_args = fixed, .cuda_graph = o->cuda_graph};
        s = mx_executor_bind(p->rt, g, &bc, &p->ex);
    }
    free(fixed);
    if (s == MX_OK) {
        p->output = mx_executor_output(p->ex, 0);
        if (!p->output)
            s = MX_ERROR(MX_ERR_INVALID, "output '%s' is not computed", mx_executor_output_name(p->ex, 0));
    }
    if (s == MX_OK) {
        const mx_shape *os = mx_ndarray_shape(p->output);
        if (os->ndim < 1 || os->dims[0] != o->batch_size) {
            s = MX_ERROR(MX_ERR_INVALID, "output '%s' has shape %s: its first axis is not the batch (%lld)",
                         mx_executor_output_name(p->ex, 0), mx_shape_str(os, a, sizeof(a)), (long long)o->batch_size);
        } else {
            p->out_sample = mx_shape_make(os->ndim - 1, os->dims + 1);
            if (p->out_sample.ndim == 0) p->out_sample = MX_SHAPE(1);
        }
    }
    p->batch_size = o->batch_size;
    p->batch_bytes = (size_t)mx_shape_size(&data_shape) * sizeof(float);
    /* The batch arrives as float32 on the host: staged there when the data
     * argument lives elsewhere or in another dtype. */
    if (s == MX_OK && (!mx_context_equal(o->ctx, mx_cpu()) || mx_ndarray_dtype(p->data) != MX_FLOAT32))
        s = mx_ndarray_create(p->rt, data_shape, MX_FLOAT32, mx_cpu(), &p->staging);
    /* Outputs are read as float32: a half-precision layer's through a copy. */
    if (s == MX_OK && mx_ndarray_dtype(p->output) != MX_FLOAT32)
        s = mx_ndarray_create(p->rt, *mx_ndarray_shape(p->output), MX_FLOAT32, mx_cpu(), &p->output_f32);
    if (have_shapes) mx_graph_shapes_free(&sh);
    free(arg_ids);
    free(aux_ids);
    free(names);
    free(shapes);
    if (s != MX_OK) unbind(p);
    return s;
}

mx_shape mx_predictor_output_shape(const mx_predictor *p) { return p->out_sample; }
const char *mx_predictor_output_name(const mx_predictor *p) { return p->ex ? mx_executor_output_name(p->ex, 0) : ""; }
int64_t mx_predictor_batch_size(const mx_predictor *p) { return p->batch_size; }
int mx_predictor_folded(const mx_predictor *p) { return p->n_folds; }

void mx_predictor_memory(const mx_predictor *p, mx_memory_plan_stats *plan, size_t *output_bytes)
{
    memset(plan, 0, sizeof(*plan));
    if (output_bytes) *output_bytes = 0;
    if (!p->ex) return;
    mx_executor_memory(p->ex, plan);
    if (output_bytes) *output_bytes = mx_ndarray_nbytes(p->output);
}


mx_status mx_predictor_push(mx_predictor *p, const float *batch)
{
    if (!p->ex) return MX_ERROR(MX_ERR_INVALID, "mx_predictor_push: not bound");
    if (p->staging) {
        MX_TRY(mx_ndarray_from_host(p->staging, batch, p->batch_bytes));
        MX_TRY(mx_nd_copy(p->data, p->staging));
    } else {
        MX_TRY(mx_ndarray_from_host(p->data, batch, p->batch_bytes));
    }
    return mx_executor_forward(p->ex, false);
}

mx_status mx_predictor_pull(mx_predictor *p, float *out)
{
    if (!p->ex) return MX_ERROR(MX_ERR_INVALID, "mx_predictor_pull: not bound");
    if (p->output_f32) {
        MX_TRY(mx_nd_copy(p->output_f32, p->output));
        return mx_ndarray_to_host(p->output_f32, out, mx_ndarray_nbytes(p->output_f32));
    }
    return mx_ndarray_to_host(p->output, out, mx_ndarray_nbytes(p->output));
}
