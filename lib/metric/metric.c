/*
 * metric.c - the metric registry (acc, top_k_acc, ce, mse, mae, rmse) and
 * the batch computations of MXNet 1.9.1's metric.py on host float arrays.
 */
#include "metric/metric.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct metric_kind metric_kind;

struct mx_metric {
    const metric_kind *kind;
    mx_metric_params p;
    char name[64];
    double sum, count, global_sum, global_count;
};

/* Computes one batch's (sum, count); MX_ERR_INVALID for bad shapes. */
typedef mx_status (*metric_fn)(const mx_metric *m, const float *labels, const mx_shape *ls, const float *preds,
                               const mx_shape *ps, double *sum, double *count);

struct metric_kind {
    const char *name;             /* the config / registry name */
    const char *const *aliases;
    const char *display;          /* MXNet's metric name */
    const mx_param_desc *params;
    int n_params;
    metric_fn fn;
};

#define P(f) offsetof(mx_metric_params, f)

static const mx_param_desc acc_params[] = {
    {"axis", MX_PARAM_INT, "1", 0, MX_MAX_NDIM - 1, NULL, P(axis), "the axis of the classes in the predictions"},
};
static const mx_param_desc top_k_params[] = {
    {"top_k", MX_PARAM_INT, NULL, 2, 1e9, NULL, P(top_k), "a label in the k highest scores counts (k > 1)"},
};
static const mx_param_desc ce_params[] = {
    {"eps", MX_PARAM_FLOAT, "1e-12", 0, 1, NULL, P(eps), "added to the probability inside the log"},
};

/* ---------------------------------------------------------------- helpers */

static const char *shape_str(const mx_shape *s, char *buf, size_t size) { return mx_shape_str(s, buf, size); }

/* float -> int32 as numpy's astype('int32') for values in range; others
 * (NaN, huge) map to a value no class index has. */
static int64_t as_int32(float v)
{
    if (!(v > -2147483649.0f && v < 2147483648.0f)) return INT64_MIN;
    return (int64_t)(int32_t)v;
}

/* ---------------------------------------------------------------- accuracy */

static mx_status acc_fn(const mx_metric *m, const float *labels, const mx_shape *ls, const float *preds,
                        const mx_shape *ps, double *sum, double *count)
{
    char a[96], b[96];
    int64_t n_labels = mx_shape_size(ls);
    int64_t correct = 0, n;
    if (mx_shape_equal(ls, ps)) {
        /* Predictions are class ids already. */
        n = n_labels;
        for (int64_t i = 0; i < n; i++) correct += as_int32(preds[i]) == as_int32(labels[i]);
    } else {
        int axis = (int)m->p.axis;
        if (axis >= ps->ndim)
            return MX_ERROR(MX_ERR_INVALID, "accuracy: axis %d is out of range for predictions %s", axis,
                            shape_str(ps, a, sizeof(a)));
        int64_t outer = 1, classes = ps->dims[axis], inner = 1;
        for (int i = 0; i < axis; i++) outer *= ps->dims[i];
        for (int i = axis + 1; i < ps->ndim; i++) inner *= ps->dims[i];
        n = outer * inner;
        if (n != n_labels || classes < 1)
            return MX_ERROR(MX_ERR_INVALID, "accuracy: %lld labels %s do not match predictions %s (argmax over axis %d)",
                            (long long)n_labels, shape_str(ls, a, sizeof(a)), shape_str(ps, b, sizeof(b)), axis);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t in = 0; in < inner; in++) {
                const float *p = preds + o * classes * inner + in;
                int64_t best = 0;
                for (int64_t c = 1; c < classes; c++)
                    if (p[c * inner] > p[best * inner] || (isnan(p[c * inner]) && !isnan(p[best * inner]))) best = c;
                correct += best == as_int32(labels[o * inner + in]);
            }
    }
    *sum = (double)correct;
    *count = (double)n;
    return MX_OK;
}

/* ---------------------------------------------------------------- top k */

static mx_status top_k_fn(const mx_metric *m, const float *labels, const mx_shape *ls, const float *preds,
                          const mx_shape *ps, double *sum, double *count)
{
    char a[96], b[96];
    if (ps->ndim != 2)
        return MX_ERROR(MX_ERR_INVALID, "%s: predictions must be (batch, classes), got %s", m->name,
                        shape_str(ps, a, sizeof(a)));
    int64_t n = ps->dims[0], classes = ps->dims[1];
    if (mx_shape_size(ls) != n)
        return MX_ERROR(MX_ERR_INVALID, "%s: %lld labels %s for %lld predictions %s", m->name,
                        (long long)mx_shape_size(ls), shape_str(ls, a, sizeof(a)), (long long)n,
                        shape_str(ps, b, sizeof(b)));
    int64_t k = m->p.top_k < classes ? m->p.top_k : classes, correct = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t label = as_int32(labels[i]);
        if (label < 0 || label >= classes) continue;
        const float *p = preds + i * classes;
        float v = p[label];
        /* Rank of the label in a stable ascending sort, from the top. */
        int64_t above = 0;
        for (int64_t c = 0; c < classes && above < k; c++)
            if (p[c] > v || (p[c] == v && c > label)) above++;
        correct += above < k;
    }
    *sum = (double)correct;
    *count = (double)n;
    return MX_OK;
}

/* ---------------------------------------------------------------- cross-entropy */

static mx_status ce_fn(const mx_metric *m, const float *labels, const mx_shape *ls, const float *preds,
                       const mx_shape *ps, double *sum, double *count)
{
    char a[96], b[96];
    int64_t n = mx_shape_size(ls);
    if (ps->ndim != 2 || ps->dims[0] != n)
        return MX_ERROR(MX_ERR_INVALID, "cross-entropy: %lld labels %s for predictions %s (expected (%lld, classes))",
                        (long long)n, shape_str(ls, a, sizeof(a)), shape_str(ps, b, sizeof(b)), (long long)n);
    int64_t classes = ps->dims[1];
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        /* numpy.int64(label): truncation toward zero. */
        float lv = labels[i];
        if (!(lv > -1.0f && lv < (float)classes))
            return MX_ERROR(MX_ERR_INVALID, "cross-entropy: label %g of sample %lld is not a class index (0 to %lld)",
                            (double)lv, (long long)i, (long long)classes - 1);
        int64_t label = (int64_t)lv;
        double prob = (double)preds[i * classes + label];
        total += -log(prob + m->p.eps);
    }
    *sum = total;
    *count = (double)n;
    return MX_OK;
}

/* ---------------------------------------------------------------- regression */

typedef enum reg_kind { REG_MSE, REG_MAE, REG_RMSE } reg_kind;

/* The batch mean of the squared / absolute differences with MXNet's
 * reshaping: 1-D arrays become (N, 1), an (N, 1) side broadcasts. */
static mx_status reg_mean(const char *name, bool absolute, const float *labels, const mx_shape *ls, const float *preds,
                          const mx_shape *ps, double *mean)
{
    char a[96], b[96];
    mx_shape l = *ls, p = *ps;
    if (l.ndim == 1) l = MX_SHAPE(l.dims[0], 1);
    if (p.ndim == 1) p = MX_SHAPE(p.dims[0], 1);
    int64_t rows, cols, lcols, pcols;
    if (mx_shape_equal(&l, &p)) {
        rows = 1;
        cols = lcols = pcols = mx_shape_size(&l);
    } else if (l.ndim == 2 && p.ndim == 2 && l.dims[0] == p.dims[0] && (l.dims[1] == 1 || p.dims[1] == 1)) {
        rows = l.dims[0];
        lcols = l.dims[1];
        pcols = p.dims[1];
        cols = lcols > pcols ? lcols : pcols;
    } else {
        return MX_ERROR(MX_ERR_INVALID, "%s: labels %s and predictions %s do not match", name,
                        shape_str(ls, a, sizeof(a)), shape_str(ps, b, sizeof(b)));
    }
    if (rows * cols == 0) {
        *mean = NAN;
        return MX_OK;
    }
    double total = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double d = (double)labels[r * lcols + (lcols == 1 ? 0 : c)] - (double)preds[r * pcols + (pcols == 1 ? 0 : c)];
            total += absolute ? fabs(d) : d * d;
        }
    *mean = total / (double)(rows * cols);
    return MX_OK;
}

static mx_status reg_fn(reg_kind kind, const mx_metric *m, const float *labels, const mx_shape *ls, const float *preds,
                        const mx_shape *ps, double *sum, double *count)
{
    double mean;
    MX_TRY(reg_mean(m->name, kind == REG_MAE, labels, ls, preds, ps, &mean));
    *sum = kind == REG_RMSE ? sqrt(mean) : mean;
    *count = 1;
    return MX_OK;
}

static mx_status mse_fn(const mx_metric *m, const float *l, const mx_shape *ls, const float *p, const mx_shape *ps,
                        double *sum, double *count)
{
    return reg_fn(REG_MSE, m, l, ls, p, ps, sum, count);
}
static mx_status mae_fn(const mx_metric *m, const float *l, const mx_shape *ls, const float *p, const mx_shape *ps,
                        double *sum, double *count)
{
    return reg_fn(REG_MAE, m, l, ls, p, ps, sum, count);
}
static mx_status rmse_fn(const mx_metric *m, const float *l, const mx_shape *ls, const float *p, const mx_shape *ps,
                         double *sum, double *count)
{
    return reg_fn(REG_RMSE, m, l, ls, p, ps, sum, count);
}

/* ---------------------------------------------------------------- registry */

static const char *const acc_aliases[] = {"accuracy", NULL};
static const char *const top_k_aliases[] = {"top_k_accuracy", NULL};
static const char *const ce_aliases[] = {"cross-entropy", "crossentropy", NULL};

#define N_ROWS(t) ((int)(sizeof(t) / sizeof((t)[0])))

/* The table of metrics. */
static const metric_kind kinds[] = {
    {"acc", acc_aliases, "accuracy", acc_params, N_ROWS(acc_params), acc_fn},
    {"top_k_acc", top_k_aliases, "top_k_accuracy", top_k_params, N_ROWS(top_k_params), top_k_fn},
    {"ce", ce_aliases, "cross-entropy", ce_params, N_ROWS(ce_params), ce_fn},
    {"mse", NULL, "mse", NULL, 0, mse_fn},
    {"mae", NULL, "mae", NULL, 0, mae_fn},
    {"rmse", NULL, "rmse", NULL, 0, rmse_fn},
};
#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

static mx_status find_kind(const char *name, const metric_kind **out)
{
    *out = NULL;
    if (!name) return MX_ERROR(MX_ERR_INVALID, "metric: no name given");
    const char *names[4 * N_KINDS];
    int n = 0;
    for (int i = 0; i < N_KINDS; i++) {
        names[n++] = kinds[i].name;
        if (!strcasecmp(name, kinds[i].name)) {
            *out = &kinds[i];
            return MX_OK;
        }
        for (const char *const *a = kinds[i].aliases; a && *a; a++) {
            names[n++] = *a;
            if (!strcasecmp(name, *a)) {
                *out = &kinds[i];
                return MX_OK;
            }
        }
    }
    const char *near = mx_suggest(name, names, n);
    if (near) return MX_ERROR(MX_ERR_INVALID, "unknown metric '%s' (did you mean '%s'?)", name, near);
    return MX_ERROR(MX_ERR_INVALID, "unknown metric '%s' (acc, top_k_acc, ce, mse, mae or rmse)", name);
}

mx_status mx_metric_param_table(const char *name, const mx_param_desc **table, int *n)
{
    const metric_kind *k;
    MX_TRY(find_kind(name, &k));
    *table = k->params;
    *n = k->n_params;
    return MX_OK;
}

mx_status mx_metric_defaults(const char *name, mx_metric_params *out)
{
    memset(out, 0, sizeof(*out));
    const metric_kind *k;
    MX_TRY(find_kind(name, &k));
    for (int i = 0; i < k->n_params; i++)
        if (k->params[i].default_value) MX_TRY(mx_params_parse_one(k->name, &k->params[i], k->params[i].default_value, out));
    return MX_OK;
}

static mx_status create_kind(const metric_kind *k, const mx_metric_params *p, mx_metric **out)
{
    for (int i = 0; i < k->n_params; i++) {
        const mx_param_desc *d = &k->params[i];
        double v = d->type == MX_PARAM_INT ? (double)*(const int64_t *)((const char *)p + d->offset)
                                           : *(const double *)((const char *)p + d->offset);
        if (!(v >= d->min && v <= d->max))
            return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value '%g': must be between %g and %g", k->name,
                            d->name, v, d->min, d->max);
    }
    mx_metric *m = mx_calloc(1, sizeof(*m));
    if (!m) return MX_ERR_NOMEM;
    m->kind = k;
    m->p = *p;
    if (k->fn == top_k_fn) snprintf(m->name, sizeof(m->name), "%s_%lld", k->display, (long long)p->top_k);
    else snprintf(m->name, sizeof(m->name), "%s", k->display);
    *out = m;
    return MX_OK;
}

mx_status mx_metric_create(const char *name, const mx_metric_params *params, mx_metric **out)
{
    *out = NULL;
    const metric_kind *k;
    MX_TRY(find_kind(name, &k));
    return create_kind(k, params, out);
}

mx_status mx_metric_create_kv(const char *name, const char *const *keys, const char *const *values, int n,
                              mx_metric **out)
{
    *out = NULL;
    const metric_kind *k;
    MX_TRY(find_kind(name, &k));
    mx_metric_params p;
    MX_TRY(mx_params_parse(k->name, k->params, k->n_params, sizeof(p), keys, values, n, &p));
    return create_kind(k, &p, out);
}

const char *mx_metric_name_at(int i) { return i >= 0 && i < N_KINDS ? kinds[i].name : NULL; }
const mx_metric_params *mx_metric_get_params(const mx_metric *m) { return &m->p; }

/* One item of a list: NAME, NAME(k=v, ...) or NAME:K (top_k_acc). */
static mx_status parse_item(const char *item, mx_metric_spec *out)
{
    const char *colon = strchr(item, ':');
    char shorthand[64];
    const char *text = item;
    if (colon && !strchr(item, '(')) { /* "top_k_acc:5" is top_k_acc(top_k=5) */
        size_t len = (size_t)(colon - item);
        while (len && item[len - 1] == ' ') len--;
        if (len >= 32) return MX_ERROR(MX_ERR_INVALID, "metric '%s': name too long", item);
        const metric_kind *k;
        char name[32];
        memcpy(name, item, len);
        name[len] = '\0';
        MX_TRY(find_kind(name, &k));
        if (k->fn != top_k_fn)
            return MX_ERROR(MX_ERR_INVALID, "metric '%s' takes no ':%s' (only top_k_acc:K does)", name, colon + 1);
        snprintf(shorthand, sizeof(shorthand), "%s(top_k=%.20s)", name, colon + 1);
        text = shorthand;
    }
    mx_param_call call;
    MX_TRY(mx_param_call_parse(text, &call));
    const metric_kind *k;
    mx_status s = find_kind(call.name, &k);
    if (s == MX_OK && k->fn == top_k_fn && call.n == 0)
        s = MX_ERROR(MX_ERR_INVALID, "top_k_acc needs k: top_k_acc:5 or top_k_acc(top_k=5)");
    if (s == MX_OK) {
        out->name = k->name;
        s = mx_params_parse(k->name, k->params, k->n_params, sizeof(out->params), (const char *const *)call.keys,
                            (const char *const *)call.values, call.n, &out->params);
    }
    mx_param_call_free(&call);
    return s;
}

mx_status mx_metric_parse_list(const char *text, mx_metric_spec **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t len = strlen(text);
    char *buf = mx_malloc(len + 1);
    if (!buf) return mx_last_status();
    memcpy(buf, text, len + 1);
    mx_metric_spec *list = NULL;
    int n = 0;
    mx_status s = MX_OK;
    /* Items end at commas outside parentheses. */
    char *p = buf;
    while (s == MX_OK) {
        char *q = p;
        int depth = 0;
        for (; *q && !(*q == ',' && depth == 0); q++) depth += *q == '(' ? 1 : *q == ')' ? -1 : 0;
        bool last = !*q;
        *q = '\0';
        while (*p == ' ' || *p == '\t') p++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t')) p[--l] = '\0';
        if (!*p) {
            s = MX_ERROR(MX_ERR_INVALID, n || !last ? "empty item in the metric list" :
                                                      "no metric given (acc, top_k_acc:5, ce, mse, mae, rmse)");
            break;
        }
        mx_metric_spec *grown = mx_realloc(list, sizeof(*list) * (size_t)(n + 1));
        if (!grown) {
            s = mx_last_status();
            break;
        }
        list = grown;
        s = parse_item(p, &list[n]);
        for (int i = 0; s == MX_OK && i < n; i++)
            if (list[i].name == list[n].name && !memcmp(&list[i].params, &list[n].params, sizeof(list[n].params)))
                s = MX_ERROR(MX_ERR_INVALID, "metric '%s' listed twice", p);
        if (s == MX_OK) n++;
        if (last) break;
        p = q + 1;
    }
    free(buf);
    if (s != MX_OK) {
        free(list);
        return s;
    }
    *out = list;
    *n_out = n;
    return MX_OK;
}

void mx_metric_free(mx_metric *m) { free(m); }

const char *mx_metric_get_name(const mx_metric *m) { return m->name; }

mx_status mx_metric_update(mx_metric *m, const float *labels, const mx_shape *label_shape, const float *preds,
                           const mx_shape *pred_shape)
{
    if (!labels || !preds || !label_shape || !pred_shape)
        return MX_ERROR(MX_ERR_INVALID, "%s: labels or predictions missing", m->name);
    double sum, count;
    MX_TRY(m->kind->fn(m, labels, label_shape, preds, pred_shape, &sum, &count));
    m->sum += sum;
    m->count += count;
    m->global_sum += sum;
    m->global_count += count;
    return MX_OK;
}

const char *mx_metric_get(const mx_metric *m, double *value)
{
    *value = m->count == 0 ? NAN : m->sum / m->count;
    return m->name;
}

const char *mx_metric_get_global(const mx_metric *m, double *value)
{
    *value = m->global_count == 0 ? NAN : m->global_sum / m->global_count;
    return m->name;
}

void mx_metric_reset(mx_metric *m) { m->sum = m->count = m->global_sum = m->global_count = 0; }

void mx_metric_reset_local(mx_metric *m) { m->sum = m->count = 0; }

void mx_metric_sums(const mx_metric *m, double *sum, double *count, double *global_sum, double *global_count)
{
    if (sum) *sum = m->sum;
    if (count) *count = m->count;
    if (global_sum) *global_sum = m->global_sum;
    if (global_count) *global_count = m->global_count;
}
