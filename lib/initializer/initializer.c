/*
 * initializer.c - the initializer registry (xavier, msraprelu, uniform,
 * normal, constant, zero, one), MXNet's name-suffix dispatch, Xavier's fan
 * computation, and MXNet's dumps() JSON form in both directions.
 */
#include "initializer/initializer.h"

#include "json/json.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum init_kind_id { K_XAVIER, K_MSRA, K_UNIFORM, K_NORMAL, K_CONSTANT, K_ZERO, K_ONE } init_kind_id;

typedef struct init_kind {
    init_kind_id id;
    const char *name;   /* MXNet's registered name (dumps) */
    const char *alias;  /* another accepted name, or NULL */
    const mx_param_desc *params;
    int n_params;
} init_kind;

struct mx_initializer {
    const init_kind *kind;
    mx_initializer_params p;
};

static const char *const rnd_types[] = {"uniform", "gaussian", NULL};
static const char *const factor_types[] = {"avg", "in", "out", NULL};

#define P(f) offsetof(mx_initializer_params, f)

static const mx_param_desc xavier_params[] = {
    {"rnd_type", MX_PARAM_ENUM, "uniform", 1, 0, rnd_types, P(rnd_type), "uniform or gaussian draws"},
    {"factor_type", MX_PARAM_ENUM, "avg", 1, 0, factor_types, P(factor_type),
     "avg: (fan_in + fan_out)/2, in: fan_in, out: fan_out"},
    {"magnitude", MX_PARAM_FLOAT, "3", 0, 1e30, NULL, P(magnitude), "scale = sqrt(magnitude / factor)"},
};
static const mx_param_desc msra_params[] = {
    {"factor_type", MX_PARAM_ENUM, "avg", 1, 0, factor_types, P(factor_type),
     "avg: (fan_in + fan_out)/2, in: fan_in, out: fan_out"},
    {"slope", MX_PARAM_FLOAT, "0.25", 1, 0, NULL, P(slope), "negative slope of the PReLU: magnitude 2/(1+slope^2)"},
};
static const mx_param_desc uniform_params[] = {
    {"scale", MX_PARAM_FLOAT, "0.07", 0, 1e30, NULL, P(scale), "draws from U(-scale, scale)"},
};
static const mx_param_desc normal_params[] = {
    {"sigma", MX_PARAM_FLOAT, "0.01", 0, 1e30, NULL, P(sigma), "draws from N(0, sigma^2)"},
};
static const mx_param_desc constant_params[] = {
    {"value", MX_PARAM_FLOAT, NULL, 1, 0, NULL, P(value), "the value of every element"},
};

#define N_ROWS(t) ((int)(sizeof(t) / sizeof((t)[0])))

/* The table of initializers. */
static const init_kind kinds[] = {
    {K_XAVIER, "xavier", NULL, xavier_params, N_ROWS(xavier_params)},
    {K_MSRA, "msraprelu", "msra", msra_params, N_ROWS(msra_params)},
    {K_UNIFORM, "uniform", NULL, uniform_params, N_ROWS(uniform_params)},
    {K_NORMAL, "normal", NULL, normal_params, N_ROWS(normal_params)},
    {K_CONSTANT, "constant", NULL, constant_params, N_ROWS(constant_params)},
    {K_ZERO, "zero", "zeros", NULL, 0},
    {K_ONE, "one", "ones", NULL, 0},
};
#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

/* ---------------------------------------------------------------- names */

typedef struct suffix_rule {
    const char *suffix;
    mx_init_pattern pattern;
} suffix_rule;

/* MXNet's Initializer.__call__ and _legacy_init, in their order. */
static const suffix_rule suffix_rules[] = {
    {"weight", MX_INIT_PATTERN_WEIGHT}, {"bias", MX_INIT_PATTERN_ZERO},       {"gamma", MX_INIT_PATTERN_ONE},
    {"beta", MX_INIT_PATTERN_ZERO},     {"moving_mean", MX_INIT_PATTERN_ZERO}, {"moving_var", MX_INIT_PATTERN_ONE},
    {"moving_inv_var", MX_INIT_PATTERN_ZERO}, {"moving_avg", MX_INIT_PATTERN_ZERO}, {"min", MX_INIT_PATTERN_ZERO},
    {"max", MX_INIT_PATTERN_ONE},
};

mx_status mx_init_pattern_for(const char *name, mx_init_pattern *out)
{
    if (!name) return MX_ERROR(MX_ERR_INVALID, "initializer: variable name is NULL");
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(suffix_rules) / sizeof(suffix_rules[0]); i++) {
        size_t m = strlen(suffix_rules[i].suffix);
        if (n >= m && !strcmp(name + n - m, suffix_rules[i].suffix)) {
            *out = suffix_rules[i].pattern;
            return MX_OK;
        }
    }
    return MX_ERROR(MX_ERR_INVALID,
                    "initializer: unknown initialization pattern for '%s': names ending in weight, bias, gamma, "
                    "beta, moving_mean, moving_var, moving_inv_var, moving_avg, min or max are known; give the "
                    "variable its own initializer (INPUT_init in the config, __init__ in MXNet)", name);
}

static mx_status find_kind(const char *name, const init_kind **out)
{
    *out = NULL;
    if (!name) return MX_ERROR(MX_ERR_INVALID, "initializer: no name given");
    for (int i = 0; i < N_KINDS; i++)
        if (!strcasecmp(name, kinds[i].name) || (kinds[i].alias && !strcasecmp(name, kinds[i].alias))) {
            *out = &kinds[i];
            return MX_OK;
        }
    const char *names[2 * N_KINDS];
    int n = 0;
    for (int i = 0; i < N_KINDS; i++) {
        names[n++] = kinds[i].name;
        if (kinds[i].alias) names[n++] = kinds[i].alias;
    }
    const char *near = mx_suggest(name, names, n);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown initializer '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID,
                    "unknown initializer '%s' (xavier, msraprelu, uniform, normal, constant, zero or one)", name);
}

const char *mx_initializer_name_at(int i) { return i >= 0 && i < N_KINDS ? kinds[i].name : NULL; }

mx_status mx_initializer_param_table(const char *name, const mx_param_desc **table, int *n)
{
    const init_kind *k;
    MX_TRY(find_kind(name, &k));
    *table = k->params;
    *n = k->n_params;
    return MX_OK;
}

/* ---------------------------------------------------------------- create */

mx_status mx_initializer_defaults(const char *name, mx_initializer_params *out)
{
    memset(out, 0, sizeof(*out));
    const init_kind *k;
    MX_TRY(find_kind(name, &k));
    for (int i = 0; i < k->n_params; i++)
        if (k->params[i].default_value) MX_TRY(mx_params_parse_one(k->name, &k->params[i], k->params[i].default_value, out));
    return MX_OK;
}

static mx_status check_params(const init_kind *k, const mx_initializer_params *p)
{
    for (int i = 0; i < k->n_params; i++) {
        const mx_param_desc *d = &k->params[i];
        if (d->type == MX_PARAM_ENUM) {
            int v = *(const int *)((const char *)p + d->offset);
            int n = 0;
            while (d->choices[n]) n++;
            if (v < 0 || v >= n)
                return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value %d", k->name, d->name, v);
            continue;
        }
        double v = *(const double *)((const char *)p + d->offset);
        if (!isfinite(v) || (d->min <= d->max && !(v >= d->min && v <= d->max)))
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value '%g'", k->name, d->name, v);
    }
    return MX_OK;
}

static mx_status create_kind(const init_kind *k, const mx_initializer_params *params, mx_initializer **out)
{
    MX_TRY(check_params(k, params));
    mx_initializer *init = mx_calloc(1, sizeof(*init));
    if (!init) return MX_ERR_NOMEM;
    init->kind = k;
    init->p = *params;
    *out = init;
    return MX_OK;
}

mx_status mx_initializer_create(const char *name, const mx_initializer_params *params, mx_initializer **out)
{
    *out = NULL;
    const init_kind *k;
    MX_TRY(find_kind(name, &k));
    return create_kind(k, params, out);
}

mx_status mx_initializer_create_kv(const char *name, const char *const *keys, const char *const *values, int n,
                                   mx_initializer **out)
{
    *out = NULL;
    const init_kind *k;
    MX_TRY(find_kind(name, &k));
    mx_initializer_params p;
    MX_TRY(mx_params_parse(k->name, k->params, k->n_params, sizeof(p), keys, values, n, &p));
    return create_kind(k, &p, out);
}

/* Shortest "%g" that reads back as v. */
static void format_number(double v, char *buf, size_t size)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

mx_status mx_initializer_create_json(const char *json, mx_initializer **out)
{
    *out = NULL;
    if (!json) return MX_ERROR(MX_ERR_INVALID, "initializer: JSON is NULL");
    mx_json *root;
    if (mx_json_parse(json, strlen(json), &root) != MX_OK)
        return mx_error_prefix(MX_ERR_INVALID, "initializer '%.80s'", json);
    mx_status s = MX_OK;
    const char *keys[16], *values[16];
    char vbuf[16][64];
    int n = 0;
    if (root->type != MX_JSON_ARRAY || root->count < 1 || root->count > 2 || root->items[0]->type != MX_JSON_STRING ||
        (root->count == 2 && root->items[1]->type != MX_JSON_OBJECT))
        s = MX_ERROR(MX_ERR_INVALID, "initializer '%.80s': expected [\"name\", {\"key\": value, ...}]", json);
    if (s == MX_OK && root->count == 2) {
        const mx_json *kw = root->items[1];
        if (kw->count > 16) s = MX_ERROR(MX_ERR_INVALID, "initializer '%.80s': too many arguments", json);
        for (int i = 0; s == MX_OK && i < kw->count; i++) {
            const mx_json *v = kw->items[i];
            keys[n] = kw->keys[i];
            if (v->type == MX_JSON_STRING) snprintf(vbuf[n], sizeof(vbuf[n]), "%s", v->string);
            else if (v->type == MX_JSON_NUMBER) format_number(v->number, vbuf[n], sizeof(vbuf[n]));
            else if (v->type == MX_JSON_BOOL) snprintf(vbuf[n], sizeof(vbuf[n]), "%s", v->boolean ? "True" : "False");
            else
                s = MX_ERROR(MX_ERR_INVALID, "initializer '%.80s': argument '%s' is a %s", json, kw->keys[i],
                             mx_json_type_name(v->type));
            values[n] = vbuf[n];
            n++;
        }
    }
    if (s == MX_OK) s = mx_initializer_create_kv(root->items[0]->string, keys, values, n, out);
    mx_json_free(root);
    return s;
}

mx_status mx_initializer_parse(const char *text, mx_initializer **out)
{
    *out = NULL;
    mx_param_call call;
    MX_TRY(mx_param_call_parse(text, &call));
    const init_kind *k;
    mx_status s = find_kind(call.name, &k);
    if (s == MX_OK)
        s = mx_initializer_create_kv(k->name, (const char *const *)call.keys, (const char *const *)call.values, call.n,
                                     out);
    mx_param_call_free(&call);
    return s;
}

void mx_initializer_free(mx_initializer *init) { free(init); }

const char *mx_initializer_name(const mx_initializer *init) { return init->kind->name; }
const mx_initializer_params *mx_initializer_get_params(const mx_initializer *init) { return &init->p; }

const char *mx_initializer_dumps(const mx_initializer *init, char *buf, size_t size)
{
    const mx_initializer_params *p = &init->p;
    char a[40], b[40];
    switch (init->kind->id) {
    case K_XAVIER:
        format_number(p->magnitude, a, sizeof(a));
        snprintf(buf, size, "[\"xavier\", {\"rnd_type\": \"%s\", \"factor_type\": \"%s\", \"magnitude\": %s}]",
                 rnd_types[p->rnd_type], factor_types[p->factor_type], a);
        break;
    case K_MSRA:
        format_number(p->slope, a, sizeof(a));
        snprintf(buf, size, "[\"msraprelu\", {\"factor_type\": \"%s\", \"slope\": %s}]", factor_types[p->factor_type],
                 a);
        break;
    case K_UNIFORM:
        format_number(p->scale, a, sizeof(a));
        snprintf(buf, size, "[\"uniform\", {\"scale\": %s}]", a);
        break;
    case K_NORMAL:
        format_number(p->sigma, a, sizeof(a));
        snprintf(buf, size, "[\"normal\", {\"sigma\": %s}]", a);
        break;
    case K_CONSTANT:
        format_number(p->value, b, sizeof(b));
        snprintf(buf, size, "[\"constant\", {\"value\": %s}]", b);
        break;
    case K_ZERO: snprintf(buf, size, "[\"zero\", {}]"); break;
    case K_ONE: snprintf(buf, size, "[\"one\", {}]"); break;
    }
    return buf;
}

/* ---------------------------------------------------------------- fills */

mx_status mx_init_xavier_fans(const mx_shape *shape, double *fan_in, double *fan_out)
{
    if (shape->ndim < 2) {
        char b[64];
        return MX_ERROR(MX_ERR_INVALID, "xavier: cannot initialize a vector %s: it needs at least 2 dimensions",
                        mx_shape_str(shape, b, sizeof(b)));
    }
    double hw_scale = 1.0;
    for (int i = 2; i < shape->ndim; i++) hw_scale *= (double)shape->dims[i];
    *fan_in = (double)shape->dims[1] * hw_scale;
    *fan_out = (double)shape->dims[0] * hw_scale;
    return MX_OK;
}

/* Draws into arr (uniform in [a, b), or normal with mean a and std b),
 * through a CPU buffer when arr lives elsewhere. */
static mx_status draw(mx_rng *rng, mx_ndarray *arr, bool gaussian, double a, double b, const char *name)
{
    mx_dtype t = mx_ndarray_dtype(arr);
    if (t != MX_FLOAT32 && t != MX_FLOAT64)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "initializer: '%s' has dtype %s; random patterns fill float32 or float64",
                        name, mx_dtype_name(t));
    if (!rng) return MX_ERROR(MX_ERR_INVALID, "initializer: '%s' needs a random generator", name);
    mx_ndarray *target = arr;
    if (mx_ndarray_context(arr).dev_type != MX_DEV_CPU)
        MX_TRY(mx_ndarray_create(mx_ndarray_runtime(arr), *mx_ndarray_shape(arr), t, mx_cpu(), &target));
    mx_status s = gaussian ? mx_nd_random_normal(rng, target, a, b) : mx_nd_random_uniform(rng, target, a, b);
    if (target != arr) {
        if (s == MX_OK) s = mx_nd_copy(arr, target);
        mx_ndarray_free(target);
    }
    return s;
}

static mx_status xavier(mx_rng *rng, mx_ndarray *arr, int rnd_type, int factor_type, double magnitude,
                        const char *name)
{
    double fan_in, fan_out;
    mx_status s = mx_init_xavier_fans(mx_ndarray_shape(arr), &fan_in, &fan_out);
    if (s != MX_OK) return mx_error_prefix(s, "initializer for '%s'", name);
    if (mx_ndarray_size(arr) == 0) return MX_OK;
    double factor = factor_type == MX_INIT_IN ? fan_in : factor_type == MX_INIT_OUT ? fan_out : (fan_in + fan_out) / 2.0;
    double scale = sqrt(magnitude / factor);
    return rnd_type == MX_INIT_GAUSSIAN_RND ? draw(rng, arr, true, 0.0, scale, name)
                                            : draw(rng, arr, false, -scale, scale, name);
}

mx_status mx_initializer_init_weight(const mx_initializer *init, mx_rng *rng, const char *name, mx_ndarray *arr)
{
    const mx_initializer_params *p = &init->p;
    if (!arr) return MX_ERROR(MX_ERR_INVALID, "initializer: array for '%s' is NULL", name ? name : "?");
    if (!name) name = "?";
    switch (init->kind->id) {
    case K_XAVIER: return xavier(rng, arr, p->rnd_type, p->factor_type, p->magnitude, name);
    case K_MSRA: return xavier(rng, arr, MX_INIT_GAUSSIAN_RND, p->factor_type, 2.0 / (1.0 + p->slope * p->slope), name);
    case K_UNIFORM: return draw(rng, arr, false, -p->scale, p->scale, name);
    case K_NORMAL: return draw(rng, arr, true, 0.0, p->sigma, name);
    case K_CONSTANT: return mx_nd_fill(arr, p->value);
    case K_ZERO: return mx_nd_fill(arr, 0.0);
    case K_ONE: return mx_nd_fill(arr, 1.0);
    }
    return MX_ERROR(MX_ERR_INVALID, "initializer: unknown kind");
}

mx_status mx_initializer_init(const mx_initializer *init, mx_rng *rng, const char *name,
                              const mx_initializer *explicit_init, mx_ndarray *arr)
{
    if (explicit_init) return mx_initializer_init_weight(explicit_init, rng, name, arr);
    mx_init_pattern pattern;
    MX_TRY(mx_init_pattern_for(name, &pattern));
    if (!arr) return MX_ERROR(MX_ERR_INVALID, "initializer: array for '%s' is NULL", name);
    switch (pattern) {
    case MX_INIT_PATTERN_WEIGHT: return mx_initializer_init_weight(init, rng, name, arr);
    case MX_INIT_PATTERN_ZERO: return mx_nd_fill(arr, 0.0);
    case MX_INIT_PATTERN_ONE: return mx_nd_fill(arr, 1.0);
    }
    return MX_ERROR(MX_ERR_INVALID, "initializer: unknown pattern");
}
