/* io.c - the iterator registry and the generic front end. */
#include "io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const mx_data_iter_kind mx_iter_mnist;
extern const mx_data_iter_kind mx_iter_csv;
extern const mx_data_iter_kind mx_iter_imagerecord;
extern const mx_data_iter_kind mx_iter_synthetic;

/* The table of iterator kinds. */
static const mx_data_iter_kind *const kinds[] = {
    &mx_iter_mnist,
    &mx_iter_csv,
    &mx_iter_imagerecord,
    &mx_iter_synthetic,
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

const mx_data_iter_kind *mx_data_iter_kind_at(int i) { return i >= 0 && i < N_KINDS ? kinds[i] : NULL; }

/* "mnist, csv, imagerecord or synthetic" into buf. */
static const char *kind_list(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_KINDS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i == 0 ? "" : i == N_KINDS - 1 ? " or " : ", ",
                                 kinds[i]->name);
    return buf;
}

mx_status mx_data_iter_kind_lookup(const char *name, const mx_data_iter_kind **out)
{
    *out = mx_data_iter_kind_find(name);
    if (*out) return MX_OK;
    const char *names[N_KINDS];
    for (int i = 0; i < N_KINDS; i++) names[i] = kinds[i]->name;
    const char *near = mx_suggest(name, names, N_KINDS);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown iterator '%s' (did you mean '%s'?)", name, near);
    char list[256];
    return MX_ERROR(MX_ERR_INVALID, "unknown iterator '%s' (%s)", name, kind_list(list, sizeof(list)));
}

struct mx_data_iter_spec {
    const mx_data_iter_kind *kind;
    void *params;
    bool *given; /* per table row */
};

void mx_data_iter_spec_free(mx_data_iter_spec *spec)
{
    if (!spec) return;
    free(spec->params);
    free(spec->given);
    free(spec);
}

/* A key no row of `kind` has: which other kinds have it, else a near miss. */
static mx_status unknown_key(const mx_data_iter_kind *kind, const mx_param_input *in, int i, bool with_selector)
{
    const char *key = in->keys[i];
    char users[256] = "";
    size_t used = 0;
    for (int k = 0; k < N_KINDS; k++)
        if (kinds[k] != kind && mx_params_find(kinds[k]->params, kinds[k]->n_params, key))
            used += (size_t)snprintf(users + used, sizeof(users) - used, "%s%s", used ? ", " : "", kinds[k]->name);
    if (used && in->where)
        return mx_params_blame(in, kind->name, key, MX_ERR_INVALID, "not used with iter = %s (only with %s)",
                               kind->name, users);
    if (used)
        return MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s' (only %s %s it)", kind->name, key, users,
                        strchr(users, ',') ? "have" : "has");
    const char **cands = mx_malloc(sizeof(char *) * ((size_t)kind->n_params + 2));
    if (!cands) return mx_last_status();
    int n = 0;
    for (int k = 0; k < kind->n_params; k++) cands[n++] = kind->params[k].name;
    if (with_selector) cands[n++] = "iter";
    const char *near = mx_suggest(key, cands, n);
    free(cands);
    char hint[128] = "";
    if (near) snprintf(hint, sizeof(hint), " (did you mean '%s'?)", near);
    if (in->where) return mx_params_blame(in, kind->name, key, MX_ERR_INVALID, "unknown key%s", hint);
    return MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s'%s", kind->name, key, hint);
}

static mx_status spec_parse(const mx_data_iter_kind *kind, const mx_param_input *in, bool with_selector,
                            mx_data_iter_spec **out)
{
    *out = NULL;
    int n = in ? in->n : 0;
    bool *keep = mx_calloc((size_t)n + 1, sizeof(bool));
    if (!keep) return mx_last_status();
    mx_status s = MX_OK;
    for (int i = 0; i < n && s == MX_OK; i++) {
        if (with_selector && !strcmp(in->keys[i], "iter")) continue;
        if (!mx_params_find(kind->params, kind->n_params, in->keys[i])) s = unknown_key(kind, in, i, with_selector);
        keep[i] = true;
    }
    mx_param_subset sub = {0};
    if (s == MX_OK) s = mx_param_input_subset(in, keep, &sub);
    free(keep);
    mx_data_iter_spec *spec = s == MX_OK ? mx_calloc(1, sizeof(*spec)) : NULL;
    if (s == MX_OK && !spec) s = mx_last_status();
    if (s == MX_OK) {
        spec->kind = kind;
        spec->params = mx_calloc(1, kind->params_size ? kind->params_size : 1);
        spec->given = mx_calloc((size_t)kind->n_params + 1, sizeof(bool));
        if (!spec->params || !spec->given) s = mx_last_status();
    }
    char owner[96];
    snprintf(owner, sizeof(owner), in && in->where ? "iter = %s" : "%s", kind->name);
    if (s == MX_OK)
        s = mx_params_parse_input(owner, kind->params, kind->n_params, kind->params_size, &sub.in, spec->params,
                                  spec->given);
    mx_param_subset_free(&sub);
    if (s == MX_OK && kind->check) s = kind->check(spec->params, in);
    if (s != MX_OK) {
        mx_data_iter_spec_free(spec);
        return s;
    }
    *out = spec;
    return MX_OK;
}

mx_status mx_data_iter_spec_parse(const mx_param_input *in, mx_data_iter_spec **out)
{
    *out = NULL;
    int i = mx_param_input_find(in, "iter");
    char list[256];
    if (i < 0) {
        if (in && in->where && in->section)
            return MX_ERROR(MX_ERR_INVALID, "%s iter: required key is missing (%s)", in->section,
                            kind_list(list, sizeof(list)));
        return MX_ERROR(MX_ERR_INVALID, "iterator: no iter given (%s)", kind_list(list, sizeof(list)));
    }
    const mx_data_iter_kind *kind = mx_data_iter_kind_find(in->values[i]);
    if (!kind) {
        const char *names[N_KINDS];
        for (int k = 0; k < N_KINDS; k++) names[k] = kinds[k]->name;
        const char *near = mx_suggest(in->values[i], names, N_KINDS);
        if (near)
            return mx_params_blame(in, "iterator", "iter", MX_ERR_INVALID, "bad value '%s' (did you mean '%s'?)",
                                   in->values[i], near);
        return mx_params_blame(in, "iterator", "iter", MX_ERR_INVALID, "bad value '%s' (choices: %s)", in->values[i],
                               kind_list(list, sizeof(list)));
    }
    return spec_parse(kind, in, true, out);
}

mx_status mx_data_iter_spec_parse_kind(const char *kind_name, const mx_param_input *in, mx_data_iter_spec **out)
{
    *out = NULL;
    const mx_data_iter_kind *kind;
    MX_TRY(mx_data_iter_kind_lookup(kind_name, &kind));
    return spec_parse(kind, in, false, out);
}

mx_status mx_data_iter_spec_clone(const mx_data_iter_spec *spec, mx_data_iter_spec **out)
{
    *out = NULL;
    const mx_data_iter_kind *kind = spec->kind;
    mx_data_iter_spec *copy = mx_calloc(1, sizeof(*copy));
    if (!copy) return mx_last_status();
    copy->kind = kind;
    copy->params = mx_malloc(kind->params_size ? kind->params_size : 1);
    copy->given = mx_calloc((size_t)kind->n_params + 1, sizeof(bool));
    if (!copy->params || !copy->given) {
        mx_data_iter_spec_free(copy);
        return mx_last_status();
    }
    memcpy(copy->params, spec->params, kind->params_size);
    memcpy(copy->given, spec->given, (size_t)kind->n_params * sizeof(bool));
    *out = copy;
    return MX_OK;
}

const mx_data_iter_kind *mx_data_iter_spec_kind(const mx_data_iter_spec *spec) { return spec->kind; }
const void *mx_data_iter_spec_params(const mx_data_iter_spec *spec) { return spec->params; }

bool mx_data_iter_spec_given(const mx_data_iter_spec *spec, const char *key)
{
    const mx_param_desc *d = mx_params_find(spec->kind->params, spec->kind->n_params, key);
    return d && spec->given[d - spec->kind->params];
}

const char *mx_data_iter_spec_format(const mx_data_iter_spec *spec, const char *key, char *buf, size_t size)
{
    const mx_param_desc *d = mx_params_find(spec->kind->params, spec->kind->n_params, key);
    return d ? mx_params_format(d, spec->params, buf, size) : NULL;
}

mx_status mx_data_iter_spec_set(mx_data_iter_spec *spec, const char *key, const char *value)
{
    const mx_data_iter_kind *kind = spec->kind;
    const mx_param_desc *d = mx_params_find(kind->params, kind->n_params, key);
    if (!d) return MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s'", kind->name, key);
    void *copy = mx_malloc(kind->params_size ? kind->params_size : 1);
    if (!copy) return mx_last_status();
    memcpy(copy, spec->params, kind->params_size);
    mx_status s = mx_params_parse_one(kind->name, d, value, copy);
    if (s == MX_OK && kind->check) s = kind->check(copy, NULL);
    if (s == MX_OK) {
        memcpy(spec->params, copy, kind->params_size);
        spec->given[d - kind->params] = true;
    }
    free(copy);
    return s;
}

mx_status mx_data_iter_spec_shapes(const mx_data_iter_spec *spec, mx_shape *data, mx_shape *label)
{
    if (!spec->kind->shapes) return MX_ERROR(MX_ERR_UNSUPPORTED, "%s: cannot tell its shapes", spec->kind->name);
    return spec->kind->shapes(spec->params, data, label);
}

bool mx_data_iter_spec_image_norm(const mx_data_iter_spec *spec, mx_data_image_norm *out)
{
    if (!spec->kind->image_norm) return false;
    spec->kind->image_norm(spec->params, out);
    return true;
}

mx_status mx_data_iter_create_spec(mx_runtime *rt, const mx_data_iter_spec *spec, mx_data_iter **out)
{
    *out = NULL;
    const mx_data_iter_kind *kind = spec->kind;
    mx_data_iter *it = mx_calloc(1, sizeof(*it));
    if (!it) return MX_ERR_NOMEM;
    it->kind = kind;
    it->params = mx_malloc(kind->params_size ? kind->params_size : 1);
    mx_status s = it->params ? MX_OK : MX_ERR_NOMEM;
    if (s == MX_OK) {
        memcpy(it->params, spec->params, kind->params_size);
        s = kind->create(rt, it->params, &it->state);
    }
    if (s != MX_OK) {
        free(it->params);
        free(it);
        return s;
    }
    *out = it;
    return MX_OK;
}

mx_status mx_data_iter_create(mx_runtime *rt, const char *kind_name, const char *const *keys,
                              const char *const *values, int n, mx_data_iter **out)
{
    *out = NULL;
    mx_param_input in = {.n = n, .keys = keys, .values = values};
    mx_data_iter_spec *spec;
    MX_TRY(mx_data_iter_spec_parse_kind(kind_name, &in, &spec));
    mx_status s = mx_data_iter_create_spec(rt, spec, out);
    mx_data_iter_spec_free(spec);
    return s;
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

int64_t mx_data_iter_num_batches(const mx_data_iter *it)
{
    int64_t samples = mx_data_iter_num_samples(it), batch = mx_data_iter_data_shape(it).dims[0];
    if (samples < 0 || batch < 1) return -1;
    const mx_param_desc *d = mx_params_find(it->kind->params, it->kind->n_params, "round_batch");
    bool round = d && d->type == MX_PARAM_BOOL && *(const bool *)((const char *)it->params + d->offset);
    return round ? (samples + batch - 1) / batch : samples / batch;
}

void mx_data_iter_set_log(mx_data_iter *it, mx_io_log_fn fn, void *user)
{
    if (it && it->kind->set_log) it->kind->set_log(it->state, fn, user);
}

bool mx_data_iter_skip_stats(mx_data_iter *it, mx_data_skip_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!it || !it->kind->skip_stats) return false;
    it->kind->skip_stats(it->state, out);
    return true;
}
