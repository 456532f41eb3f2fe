/* io.c - the iterator registry and the generic front end. */
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

extern const mx_data_iter_kind mx_iter_mnist;
extern const mx_data_iter_kind mx_iter_csv;
extern const mx_data_iter_kind mx_iter_imagerecord;

/* The table of iterator kinds. */
static const mx_data_iter_kind *const kinds[] = {
    &mx_iter_mnist,
    &mx_iter_csv,
    &mx_iter_imagerecord,
};

#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

struct mx_data_iter {
    const mx_data_iter_kind *kind;
    void *params;
    void *state;
};

const mx_data_iter_kind *mx_data_iter_kind_find(const char *name)
{
    for (int i = 0; i < N_KINDS; i++)
        if (kinds[i] && !strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

mx_status mx_data_iter_kind_lookup(const char *name, const mx_data_iter_kind **out)
{
    *out = mx_data_iter_kind_find(name);
    if (*out) return MX_OK;
    const char *names[64] = {NULL};
    int n = 0;
    for (int i = 0; i < N_KINDS && n < 64; i++)
        if (kinds[i]) names[n++] = kinds[i]->name;
    const char *near = mx_suggest(name, names, n);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown iterator '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown iterator '%s'", name);
}

mx_status mx_data_iter_create(mx_runtime *rt, const char *kind_name, const char *const *keys,
                              const char *const *values, int n, mx_data_iter **out)
{
    *out = NULL;
    const mx_data_iter_kind *kind;
    MX_TRY(mx_data_iter_kind_lookup(kind_name, &kind));
    mx_data_iter *it = mx_calloc(1, sizeof(*it));
    if (!it) return MX_ERR_NOMEM;
    it->kind = kind;
    it->params = mx_calloc(1, kind->params_size ? kind->params_size : 1);
    mx_status s = it->params ? MX_OK : MX_ERR_NOMEM;
    if (s == MX_OK)
        s = mx_params_parse(kind->name, kind->params, kind->n_params, kind->params_size, keys, values, n, it->params);
    if (s == MX_OK) s = kind->create(rt, it->params, &it->state);
    if (s != MX_OK) {
        free(it->params);
        free(it);
        return s;
    }
    *out = it;
    return MX_OK;
}

void mx_data_iter_free(mx_data_iter *it)
{
    if (!it) return;
    it->kind->free(it->state);
    free(it->params);
    free(it);
}

mx_status mx_data_iter_next(mx_data_iter *it, mx_data_batch *batch, bool *has_batch)
{
    return it->kind->next(it->state, batch, has_batch);
}

mx_status mx_data_iter_reset(mx_data_iter *it) { return it->kind->reset(it->state); }
mx_shape mx_data_iter_data_shape(const mx_data_iter *it) { return it->kind->data_shape(it->state); }
mx_shape mx_data_iter_label_shape(const mx_data_iter *it) { return it->kind->label_shape(it->state); }
int64_t mx_data_iter_num_samples(const mx_data_iter *it) { return it->kind->num_samples(it->state); }

void mx_data_iter_set_log(mx_data_iter *it, mx_io_log_fn fn, void *user)
{
    if (it && it->kind->set_log) it->kind->set_log(it->state, fn, user);
}
