/* params.c - the one parser for every typed parameter table. */
#include "params/params.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const mx_param_desc *mx_params_find(const mx_param_desc *table, int n_table, const char *key)
{
    for (int i = 0; i < n_table; i++)
        if (strcmp(table[i].name, key) == 0) return &table[i];
    return NULL;
}

/* Copies s without surrounding blanks into buf. */
static void trim_copy(const char *s, char *buf, size_t size)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
    if (n >= size) n = size - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

static bool parse_int(const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno == ERANGE && fabs(v) > 1.0) return false;
    if (end == text || isnan(v)) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *text, bool *out)
{
    if (!strcasecmp(text, "true") || !strcmp(text, "1")) return *out = true, true;
    if (!strcasecmp(text, "false") || !strcmp(text, "0")) return *out = false, true;
    return false;
}

/* MXNet's tuple syntax: "(3, 3)", "[3,3]", "3,3", "3", "(2,)", "()", "None". */
static bool parse_tuple(const char *text, mx_tuple *out)
{
    char buf[256];
    trim_copy(text, buf, sizeof(buf));
    out->ndim = 0;
    if (!strcmp(buf, "None")) {
        out->ndim = -1;
        return true;
    }
    char *p = buf;
    size_t n = strlen(p);
    if (n && (p[0] == '(' || p[0] == '[')) {
        char close = p[0] == '(' ? ')' : ']';
        if (n < 2 || p[n - 1] != close) return false;
        p[n - 1] = '\0';
        p++;
    }
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || out->ndim == MX_MAX_NDIM) return false;
        out->v[out->ndim++] = v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p) return false;
    }
    return true;
}

static const char *type_hint(const mx_param_desc *d)
{
    switch (d->type) {
    case MX_PARAM_INT: return "an integer";
    case MX_PARAM_FLOAT: return "a number";
    case MX_PARAM_BOOL: return "true/false/1/0";
    case MX_PARAM_TUPLE: return "a tuple of integers such as (3, 3)";
    case MX_PARAM_ENUM: return "one of the listed choices";
    case MX_PARAM_STRING: return "a string";
    }
    return "a value";
}

static mx_status bad_value(const char *owner, const mx_param_desc *d, const char *value, const char *why)
{
    return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has bad value '%s': %s", owner, d->name, value, why);
}

static bool in_range(const mx_param_desc *d, double v)
{
    return d->min > d->max || (v >= d->min && v <= d->max);
}

static mx_status range_error(const char *owner, const mx_param_desc *d, const char *value)
{
    char why[160];
    snprintf(why, sizeof(why), "must be between %g and %g", d->min, d->max);
    return bad_value(owner, d, value, why);
}

mx_status mx_params_parse_one(const char *owner, const mx_param_desc *d, const char *raw, void *params)
{
    char text[256], why[200];
    trim_copy(raw, text, sizeof(text));
    void *field = (char *)params + d->offset;
    snprintf(why, sizeof(why), "expected %s", type_hint(d));
    switch (d->type) {
    case MX_PARAM_INT: {
        int64_t v;
        if (!parse_int(text, &v)) return bad_value(owner, d, raw, why);
        if (!in_range(d, (double)v)) return range_error(owner, d, raw);
        *(int64_t *)field = v;
        return MX_OK;
    }
    case MX_PARAM_FLOAT: {
        double v;
        if (!parse_float(text, &v)) return bad_value(owner, d, raw, why);
        if (!in_range(d, v)) return range_error(owner, d, raw);
        *(double *)field = v;
        return MX_OK;
    }
    case MX_PARAM_BOOL:
        if (!parse_bool(text, (bool *)field)) return bad_value(owner, d, raw, why);
        return MX_OK;
    case MX_PARAM_TUPLE: {
        mx_tuple t;
        if (!parse_tuple(text, &t)) return bad_value(owner, d, raw, why);
        for (int i = 0; i < t.ndim; i++)
            if (!in_range(d, (double)t.v[i])) return range_error(owner, d, raw);
        *(mx_tuple *)field = t;
        return MX_OK;
    }
    case MX_PARAM_ENUM: {
        int n = 0;
        for (; d->choices && d->choices[n]; n++)
            if (!strcmp(d->choices[n], text)) {
                *(int *)field = n;
                return MX_OK;
            }
        char list[160] = "";
        for (int i = 0; i < n; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", d->choices[i]);
        }
        const char *near = mx_suggest(text, d->choices, n);
        if (near) snprintf(why, sizeof(why), "did you mean '%s'? (choices: %s)", near, list);
        else snprintf(why, sizeof(why), "choices: %s", list);
        return bad_value(owner, d, raw, why);
    }
    case MX_PARAM_STRING:
        if (strlen(text) >= MX_PARAM_STRING_MAX) return bad_value(owner, d, raw, "too long");
        memcpy(field, text, strlen(text) + 1);
        return MX_OK;
    }
    return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has an unknown type", owner, d->name);
}

mx_status mx_params_parse(const char *owner, const mx_param_desc *table, int n_table, size_t size,
                          const char *const *keys, const char *const *values, int n, void *out)
{
    memset(out, 0, size);
    bool given[128] = {false};
    if (n_table > 128) return MX_ERROR(MX_ERR_INVALID, "%s: too many parameters", owner);
    for (int i = 0; i < n; i++) {
        const mx_param_desc *d = mx_params_find(table, n_table, keys[i]);
        if (!d) {
            const char *names[128];
            for (int k = 0; k < n_table; k++) names[k] = table[k].name;
            const char *near = mx_suggest(keys[i], names, n_table);
            if (near)
                return MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s' (did you mean '%s'?)", owner, keys[i], near);
            return MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s'", owner, keys[i]);
        }
        int idx = (int)(d - table);
        if (given[idx]) return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' given twice", owner, keys[i]);
        given[idx] = true;
        MX_TRY(mx_params_parse_one(owner, d, values[i], out));
    }
    for (int k = 0; k < n_table; k++) {
        if (given[k]) continue;
        const mx_param_desc *d = &table[k];
        if (!d->default_value)
            return MX_ERROR(MX_ERR_INVALID, "%s: required parameter '%s' is missing", owner, d->name);
        MX_TRY(mx_params_parse_one(owner, d, d->default_value, out));
    }
    return MX_OK;
}

const char *mx_params_format(const mx_param_desc *d, const void *params, char *buf, size_t size)
{
    const void *field = (const char *)params + d->offset;
    switch (d->type) {
    case MX_PARAM_INT: snprintf(buf, size, "%lld", (long long)*(const int64_t *)field); break;
    case MX_PARAM_FLOAT: snprintf(buf, size, "%.9g", *(const double *)field); break;
    case MX_PARAM_BOOL: snprintf(buf, size, "%s", *(const bool *)field ? "True" : "False"); break;
    case MX_PARAM_ENUM: snprintf(buf, size, "%s", d->choices[*(const int *)field]); break;
    case MX_PARAM_STRING: snprintf(buf, size, "%s", (const char *)field); break;
    case MX_PARAM_TUPLE: {
        const mx_tuple *t = field;
        if (t->ndim < 0) {
            snprintf(buf, size, "None");
            break;
        }
        size_t used = 0;
        used += (size_t)snprintf(buf, size, "(");
        for (int i = 0; i < t->ndim && used < size; i++)
            used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)t->v[i]);
        if (t->ndim == 1 && used < size) used += (size_t)snprintf(buf + used, size - used, ",");
        if (used < size) snprintf(buf + used, size - used, ")");
        break;
    }
    }
    return buf;
}
