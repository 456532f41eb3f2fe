/* params.c - the one parser for every typed parameter table. */
#include "params/params.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
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

static bool in_range(const mx_param_desc *d, double v)
{
    return d->min > d->max || (v >= d->min && v <= d->max);
}

/* Parses raw into the descriptor's field. On failure writes the reason as
 * "bad value 'v': why" into body (no owner, no location) and returns false;
 * callers add who and where. */
static bool parse_field(const mx_param_desc *d, const char *raw, void *params, char *body, size_t size)
{
    void *field = (char *)params + d->offset;
    while (isspace((unsigned char)*raw)) raw++;
    size_t len = strlen(raw);
    while (len > 0 && isspace((unsigned char)raw[len - 1])) len--;
    if (d->type == MX_PARAM_STRING) {
        if (len >= MX_PARAM_STRING_MAX) {
            snprintf(body, size, "bad value of %zu characters: at most %d", len, MX_PARAM_STRING_MAX - 1);
            return false;
        }
        memcpy(field, raw, len);
        ((char *)field)[len] = '\0';
        return true;
    }
    char text[256], why[200];
    if (len >= sizeof(text)) {
        snprintf(body, size, "bad value '%.40s...': too long for %s", raw, type_hint(d));
        return false;
    }
    memcpy(text, raw, len);
    text[len] = '\0';
    snprintf(why, sizeof(why), "expected %s", type_hint(d));
    bool ok = true, range_ok = true;
    switch (d->type) {
    case MX_PARAM_INT: {
        int64_t v;
        ok = parse_int(text, &v);
        if (ok && !(range_ok = in_range(d, (double)v))) break;
        if (ok) *(int64_t *)field = v;
        break;
    }
    case MX_PARAM_FLOAT: {
        double v;
        ok = parse_float(text, &v);
        if (ok && !(range_ok = in_range(d, v))) break;
        if (ok) *(double *)field = v;
        break;
    }
    case MX_PARAM_BOOL: ok = parse_bool(text, (bool *)field); break;
    case MX_PARAM_TUPLE: {
        mx_tuple t;
        ok = parse_tuple(text, &t);
        for (int i = 0; ok && i < t.ndim && range_ok; i++) range_ok = in_range(d, (double)t.v[i]);
        if (ok && range_ok) *(mx_tuple *)field = t;
        break;
    }
    case MX_PARAM_ENUM: {
        int n = 0;
        for (; d->choices && d->choices[n]; n++)
            if (!strcmp(d->choices[n], text)) {
                *(int *)field = n;
                return true;
            }
        char list[160] = "";
        for (int i = 0; i < n; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", d->choices[i]);
        }
        const char *near = mx_suggest(text, d->choices, n);
        if (near) snprintf(why, sizeof(why), "did you mean '%s'? (choices: %s)", near, list);
        else snprintf(why, sizeof(why), "choices: %s", list);
        ok = false;
        break;
    }
    case MX_PARAM_STRING: break; /* above */
    default:
        snprintf(body, size, "has an unknown type");
        return false;
    }
    if (ok && !range_ok) snprintf(why, sizeof(why), "must be between %g and %g", d->min, d->max);
    if (ok && range_ok) return true;
    snprintf(body, size, "bad value '%s': %s", text, why);
    return false;
}

mx_status mx_params_parse_one(const char *owner, const mx_param_desc *d, const char *raw, void *params)
{
    char body[512];
    if (parse_field(d, raw, params, body, sizeof(body))) return MX_OK;
    return MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has %s", owner, d->name, body);
}

int mx_param_input_find(const mx_param_input *in, const char *key)
{
    for (int i = 0; in && i < in->n; i++)
        if (!strcmp(in->keys[i], key)) return i;
    return -1;
}

mx_status mx_params_blame(const mx_param_input *in, const char *owner, const char *key, mx_status code,
                          const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int i = mx_param_input_find(in, key);
    if (in && in->where && i >= 0) return MX_ERROR(code, "%s: %s", in->where[i], msg);
    if (in && in->where && in->section) return MX_ERROR(code, "%s %s: %s", in->section, key, msg);
    return MX_ERROR(code, "%s: parameter '%s': %s", owner, key, msg);
}

mx_status mx_params_parse_input(const char *owner, const mx_param_desc *table, int n_table, size_t size,
                                const mx_param_input *in, void *out, bool *given)
{
    memset(out, 0, size);
    bool *seen = given ? given : mx_calloc((size_t)n_table + 1, sizeof(bool));
    if (!seen) return mx_last_status();
    if (given) memset(given, 0, (size_t)n_table * sizeof(bool));
    bool located = in && in->where;
    mx_status s = MX_OK;
    for (int i = 0; in && i < in->n && s == MX_OK; i++) {
        const mx_param_desc *d = mx_params_find(table, n_table, in->keys[i]);
        if (!d) {
            const char **names = mx_malloc(sizeof(*names) * ((size_t)n_table + 1));
            if (!names) {
                s = mx_last_status();
                break;
            }
            for (int k = 0; k < n_table; k++) names[k] = table[k].name;
            const char *near = mx_suggest(in->keys[i], names, n_table);
            char hint[400] = "";
            if (near) {
                snprintf(hint, sizeof(hint), " (did you mean '%s'?)", near);
            } else if (n_table == 0) {
                snprintf(hint, sizeof(hint), " (%s takes no parameters)", owner);
            } else if (n_table <= 12) { /* a short table: name them all */
                size_t used = (size_t)snprintf(hint, sizeof(hint), " (known: ");
                for (int k = 0; k < n_table && used < sizeof(hint); k++)
                    used += (size_t)snprintf(hint + used, sizeof(hint) - used, "%s%s", k ? ", " : "", names[k]);
                if (used < sizeof(hint)) snprintf(hint + used, sizeof(hint) - used, ")");
            }
            free(names);
            if (located) s = MX_ERROR(MX_ERR_INVALID, "%s: unknown key%s", in->where[i], hint);
            else s = MX_ERROR(MX_ERR_INVALID, "%s: unknown parameter '%s'%s", owner, in->keys[i], hint);
            break;
        }
        int idx = (int)(d - table);
        if (seen[idx]) {
            if (located) s = MX_ERROR(MX_ERR_INVALID, "%s: given twice", in->where[i]);
            else s = MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' given twice", owner, in->keys[i]);
            break;
        }
        seen[idx] = true;
        char body[512];
        if (!parse_field(d, in->values[i], out, body, sizeof(body))) {
            if (located) s = MX_ERROR(MX_ERR_INVALID, "%s: %s", in->where[i], body);
            else s = MX_ERROR(MX_ERR_INVALID, "%s: parameter '%s' has %s", owner, d->name, body);
        }
    }
    for (int k = 0; k < n_table && s == MX_OK; k++) {
        if (seen[k]) continue;
        const mx_param_desc *d = &table[k];
        if (!d->default_value) {
            if (located && in->section)
                s = MX_ERROR(MX_ERR_INVALID, "%s %s: required key is missing (%s)", in->section, d->name, owner);
            else s = MX_ERROR(MX_ERR_INVALID, "%s: required parameter '%s' is missing", owner, d->name);
            break;
        }
        s = mx_params_parse_one(owner, d, d->default_value, out);
    }
    if (!given) free(seen);
    return s;
}

mx_status mx_params_parse(const char *owner, const mx_param_desc *table, int n_table, size_t size,
                          const char *const *keys, const char *const *values, int n, void *out)
{
    mx_param_input in = {.n = n, .keys = keys, .values = values};
    return mx_params_parse_input(owner, table, n_table, size, &in, out, NULL);
}

mx_status mx_param_input_subset(const mx_param_input *in, const bool *keep, mx_param_subset *out)
{
    memset(out, 0, sizeof(*out));
    size_t n = (size_t)(in ? in->n : 0) + 1;
    out->keys = mx_malloc(n * sizeof(char *));
    out->values = mx_malloc(n * sizeof(char *));
    out->where = in && in->where ? mx_malloc(n * sizeof(char *)) : NULL;
    if (!out->keys || !out->values || (in && in->where && !out->where)) {
        mx_param_subset_free(out);
        return mx_last_status();
    }
    int k = 0;
    for (int i = 0; in && i < in->n; i++) {
        if (!keep[i]) continue;
        out->keys[k] = in->keys[i];
        out->values[k] = in->values[i];
        if (out->where) out->where[k] = in->where[i];
        k++;
    }
    out->in = (mx_param_input){.n = k, .keys = out->keys, .values = out->values, .where = out->where,
                               .section = in ? in->section : NULL};
    return MX_OK;
}

void mx_param_subset_free(mx_param_subset *s)
{
    free(s->keys);
    free(s->values);
    free(s->where);
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------ NAME(k=v, ...) */

/* A copy of text[0..len) without surrounding blanks and, for values,
 * without one pair of matching quotes. */
static char *trimmed_dup(const char *text, size_t len, bool unquote)
{
    while (len && isspace((unsigned char)*text)) text++, len--;
    while (len && isspace((unsigned char)text[len - 1])) len--;
    if (unquote && len >= 2 && (text[0] == '\'' || text[0] == '"') && text[len - 1] == text[0]) text++, len -= 2;
    char *s = mx_malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, text, len);
    s[len] = '\0';
    return s;
}

void mx_param_call_free(mx_param_call *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->keys[i]);
        free(c->values[i]);
    }
    free(c->keys);
    free(c->values);
    free(c->name);
    memset(c, 0, sizeof(*c));
}

static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-'; }

mx_status mx_param_call_parse(const char *text, mx_param_call *out)
{
    memset(out, 0, sizeof(*out));
    const char *open = strchr(text, '(');
    size_t name_len = open ? (size_t)(open - text) : strlen(text);
    out->name = trimmed_dup(text, name_len, false);
    if (!out->name) return mx_last_status();
    if (!out->name[0]) {
        mx_param_call_free(out);
        return MX_ERROR(MX_ERR_INVALID, "'%s': expected NAME or NAME(key=value, ...)", text);
    }
    for (const char *q = out->name; *q; q++)
        if (!is_name_char(*q)) {
            char bad = *q;
            mx_param_call_free(out);
            return MX_ERROR(MX_ERR_INVALID, "'%s': unexpected '%c' in the name (expected NAME(key=value, ...))", text,
                            bad);
        }
    if (!open) return MX_OK;
    const char *close = strrchr(open, ')');
    const char *after = close ? close + 1 : NULL;
    while (after && isspace((unsigned char)*after)) after++;
    if (!close || *after) {
        mx_param_call_free(out);
        return MX_ERROR(MX_ERR_INVALID, "'%s': expected NAME(key=value, ...)", text);
    }
    /* Arguments: split at commas outside brackets and quotes. */
    const char *p = open + 1;
    size_t cap = 0;
    while (p < close) {
        const char *item = p;
        int depth = 0;
        char quote = 0;
        for (; p < close; p++) {
            if (quote) {
                if (*p == quote) quote = 0;
            } else if (*p == '\'' || *p == '"') {
                quote = *p;
            } else if (*p == '(' || *p == '[') {
                depth++;
            } else if (*p == ')' || *p == ']') {
                depth--;
            } else if (*p == ',' && depth == 0) {
                break;
            }
        }
        const char *item_end = p;
        bool last = p >= close;
        if (!last) p++; /* the comma */
        const char *a = item;
        while (a < item_end && isspace((unsigned char)*a)) a++;
        if (a == item_end) {
            if (last && out->n == 0 && item == open + 1) break; /* NAME() */
            mx_param_call_free(out);
            return MX_ERROR(MX_ERR_INVALID, "'%s': empty argument", text);
        }
        const char *eq = memchr(a, '=', (size_t)(item_end - a));
        if (!eq) {
            char *arg = trimmed_dup(a, (size_t)(item_end - a), false);
            MX_ERROR(MX_ERR_INVALID, "'%s': argument '%s' is not key=value", text, arg ? arg : "?");
            free(arg);
            mx_param_call_free(out);
            return MX_ERR_INVALID;
        }
        if ((size_t)out->n == cap) {
            cap = cap ? 2 * cap : 4;
            char **k = mx_realloc(out->keys, cap * sizeof(char *));
            if (k) out->keys = k;
            char **v = k ? mx_realloc(out->values, cap * sizeof(char *)) : NULL;
            if (v) out->values = v;
            if (!k || !v) {
                mx_param_call_free(out);
                return mx_last_status();
            }
        }
        char *key = trimmed_dup(a, (size_t)(eq - a), false);
        char *value = key ? trimmed_dup(eq + 1, (size_t)(item_end - eq - 1), true) : NULL;
        if (!key || !value) {
            free(key);
            mx_param_call_free(out);
            return mx_last_status();
        }
        out->keys[out->n] = key;
        out->values[out->n++] = value;
        for (int i = 0; i + 1 < out->n; i++)
            if (!strcmp(out->keys[i], key)) {
                MX_ERROR(MX_ERR_INVALID, "%s: argument '%s' given twice", out->name, key);
                mx_param_call_free(out);
                return MX_ERR_INVALID;
            }
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
