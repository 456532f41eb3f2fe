/*
 * group.c - the data-parallel executor group (group.h).
 */
#include "train/group.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mx_status train_group_slices(int64_t batch, const double *work_load, int n, int64_t *offsets, int64_t *rows)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        double w = work_load ? work_load[i] : 1.0;
        if (!(w > 0) || !isfinite(w))
            return MX_ERROR(MX_ERR_INVALID, "work load %g of context %d: shares must be positive", w, i);
        total += w;
    }
    int64_t given = 0;
    for (int i = 0; i < n; i++) {
        /* round(w * batch / total), as MXNet's _split_input_slice */
        rows[i] = (int64_t)llround((work_load ? work_load[i] : 1.0) * (double)batch / total);
        given += rows[i];
    }
    rows[n - 1] += batch - given;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 1)
            return MX_ERROR(MX_ERR_INVALID, "a batch of %lld cannot be split over %d contexts with these shares: "
                                            "context %d would get %lld rows",
                            (long long)batch, n, i, (long long)rows[i]);
        offsets[i] = at;
        at += rows[i];
    }
    return MX_OK;
}

static void device_free(train_device *d, int n_args, int n_aux)
{
    mx_executor_free(d->ex);
    for (int i = 0; i < n_args; i++) {
        if (d->args) mx_ndarray_free(d->args[i]);
        if (d->grads) mx_ndarray_free(d->grads[i]);
    }
    for (int i = 0; i < n_aux && d->aux; i++) mx_ndarray_free(d->aux[i]);
    free(d->args);
    free(d->grads);
    free(d->aux);
    memset(d, 0, sizeof(*d));
}

void train_group_free(train_group *g)
{
    for (int k = 0; k < g->n && g->dev; k++) device_free(&g->dev[k], g->n_args, g->n_aux);
    free(g->dev);
    memset(g, 0, sizeof(*g));
}

/* A batch shape with `rows` as its first axis. */
static mx_shape with_rows(mx_shape s, int64_t rows)
{
    s.dims[0] = rows;
    return s;
}

static mx_status bind_device(const train_group_config *c, train_group *g, int k, const uint32_t *arg_ids,
                             const uint32_t *aux_ids)
{
    train_device *d = &g->dev[k];
    d->ctx = c->ctx[k];
    d->args = mx_calloc((size_t)g->n_args + 1, sizeof(mx_ndarray *));
    d->grads = mx_calloc((size_t)g->n_args + 1, sizeof(mx_ndarray *));
    d->aux = mx_calloc((size_t)g->n_aux + 1, sizeof(mx_ndarray *));
    if (!d->args || !d->grads || !d->aux) return mx_last_status();
    const char *names[2] = {c->data_name, c->label_name};
    mx_shape shapes[2] = {with_rows(c->data_shape, d->rows), with_rows(c->label_shape, d->rows)};
    mx_graph_shapes sh;
    MX_TRY(mx_graph_infer_shapes(c->g, names, shapes, 2, &sh));
    mx_status s = MX_OK;
    for (int i = 0; i < g->n_args && s == MX_OK; i++) {
        const mx_shape *shape = mx_graph_entry_shape(&sh, (mx_entry){arg_ids[i], 0});
        const char *name = mx_graph_node(c->g, arg_ids[i])->name;
        s = mx_ndarray_create(c->rt, *shape, MX_FLOAT32, d->ctx, &d->args[i]);
        if (s != MX_OK) mx_error_prefix(s, "input '%s'", name);
        bool in_backward = c->update_in_backward && c->update_in_backward[i];
        if (s == MX_OK && c->reqs && c->reqs[i] != MX_GRAD_NULL && !in_backward) {
            s = mx_ndarray_create(c->rt, *shape, MX_FLOAT32, d->ctx, &d->grads[i]);
            if (s != MX_OK) mx_error_prefix(s, "the gradient of '%s'", name);
        }
    }
    for (int i = 0; i < g->n_aux && s == MX_OK; i++) {
        s = mx_ndarray_create(c->rt, *mx_graph_entry_shape(&sh, (mx_entry){aux_ids[i], 0}), MX_FLOAT32, d->ctx,
                              &d->aux[i]);
        if (s != MX_OK) mx_error_prefix(s, "auxiliary state '%s'", mx_graph_node(c->g, aux_ids[i])->name);
    }
    mx_graph_shapes_free(&sh);
    MX_TRY(s);
    mx_bind_config bc = {.ctx = d->ctx, .args = d->args, .arg_grads = d->grads, .grad_reqs = c->reqs,
                         .aux = d->aux, .for_training = true, .rng = c->rng, .no_folding = c->no_folding,
                         .update_in_backward = c->update_in_backward, .update = c->update,
                         .update_ctx = c->update_ctx, .cuda_graph = c->cuda_graph};
    return mx_executor_bind(c->rt, c->g, &bc, &d->ex);
}

mx_status train_group_bind(const train_group_config *c, train_group *out)
{
    memset(out, 0, sizeof(*out));
    size_t cap = (size_t)mx_graph_num_nodes(c->g) + 1;
    uint32_t *arg_ids = mx_malloc(cap * sizeof(uint32_t)), *aux_ids = mx_malloc(cap * sizeof(uint32_t));
    int64_t *offsets = mx_calloc((size_t)c->n_ctx, sizeof(int64_t)), *rows = mx_calloc((size_t)c->n_ctx, sizeof(int64_t));
    out->dev = mx_calloc((size_t)c->n_ctx, sizeof(train_device));
    mx_status s = arg_ids && aux_ids && offsets && rows && out->dev ? MX_OK : mx_last_status();
    if (s == MX_OK) {
        out->n = c->n_ctx;
        out->n_args = mx_graph_list_arguments(c->g, arg_ids);
        out->n_aux = mx_graph_list_aux(c->g, aux_ids);
        s = train_group_slices(c->data_shape.dims[0], c->work_load, c->n_ctx, offsets, rows);
    }
    for (int k = 0; k < c->n_ctx && s == MX_OK; k++) {
        out->dev[k].offset = offsets[k];
        out->dev[k].rows = rows[k];
        s = bind_device(c, out, k, arg_ids, aux_ids);
    }
    free(arg_ids);
    free(aux_ids);
    free(offsets);
    free(rows);
    if (s != MX_OK) train_group_free(out);
    return s;
}

/* dst = src[offset, offset + rows) along the first axis. */
static mx_status copy_rows_from(mx_ndarray *dst, mx_ndarray *src, int64_t offset, int64_t rows)
{
    if (offset == 0 && rows == mx_ndarray_shape(src)->dims[0]) return mx_nd_copy(dst, src);
    mx_ndarray *view;
    MX_TRY(mx_ndarray_slice(src, offset, offset + rows, &view));
    mx_status s = mx_nd_copy(dst, view);
    mx_ndarray_free(view);
    return s;
}

mx_status train_group_load(train_group *g, int data_arg, int label_arg, mx_ndarray *data, mx_ndarray *label)
{
    for (int k = 0; k < g->n; k++) {
        train_device *d = &g->dev[k];
        MX_TRY(copy_rows_from(d->args[data_arg], data, d->offset, d->rows));
        MX_TRY(copy_rows_from(d->args[label_arg], label, d->offset, d->rows));
    }
    return MX_OK;
}

mx_status train_group_forward(train_group *g, bool is_train)
{
    for (int k = 0; k < g->n; k++) MX_TRY(mx_executor_forward(g->dev[k].ex, is_train));
    return MX_OK;
}

mx_status train_group_backward(train_group *g)
{
    for (int k = 0; k < g->n; k++) MX_TRY(mx_executor_backward(g->dev[k].ex, NULL));
    return MX_OK;
}

mx_status train_group_set_check_numerics(train_group *g, bool on)
{
    for (int k = 0; k < g->n; k++) MX_TRY(mx_executor_set_check_numerics(g->dev[k].ex, on));
    return MX_OK;
}

bool train_group_check_numerics(const train_group *g) { return g->n > 0 && mx_executor_check_numerics(g->dev[0].ex); }

mx_status train_group_gather(train_group *g, mx_ndarray *out)
{
    for (int k = 0; k < g->n; k++) {
        train_device *d = &g->dev[k];
        mx_ndarray *src = mx_executor_output(d->ex, 0);
        if (g->n == 1) return mx_nd_copy(out, src);
        mx_ndarray *view;
        MX_TRY(mx_ndarray_slice(out, d->offset, d->offset + d->rows, &view));
        mx_status s = mx_nd_copy(view, src);
        mx_ndarray_free(view);
        MX_TRY(s);
    }
    return MX_OK;
}

mx_status train_group_broadcast(train_group *g, int i, bool aux)
{
    for (int k = 1; k < g->n; k++) {
        mx_ndarray *dst = aux ? g->dev[k].aux[i] : g->dev[k].args[i];
        mx_ndarray *src = aux ? g->dev[0].aux[i] : g->dev[0].args[i];
        MX_TRY(mx_nd_copy(dst, src));
    }
    return MX_OK;
}
