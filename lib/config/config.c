/*
 * config.c - reads a net config: checks the bytes, feeds the lines to inih
 * one at a time (so every key keeps its line number and sections without
 * keys are seen), collects sections of key = value entries, applies
 * SECTION.KEY=VALUE overrides, then runs the section compilers
 * (settings.c, net.c). Errors are one line, FILE:LINE first.
 */
#include "config/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[CFG_KIND_COUNT] = {
    [CFG_NET] = "net",         [CFG_LAYER] = "layer",         [CFG_TRAIN] = "train",
    [CFG_VAL] = "val",         [CFG_OPTIMIZER] = "optimizer", [CFG_FIT] = "fit",
};

/* ------------------------------------------------------------ errors */

mx_status cfg_error(const mx_config_priv *p, int line, const char *title, const char *key, const char *fmt, ...)
{
    char msg[1024];
    const char *file = p && p->file ? p->file : "config";
    int used;
    if (line > 0) used = snprintf(msg, 512, "%s:%d: ", file, line);
    else if (line == 0) used = snprintf(msg, 512, "command line: ");
    else used = snprintf(msg, 512, "%s: ", file);
    if (used < 0 || used >= 512) used = 511;
    int more = 0;
    if (title && key) more = snprintf(msg + used, 256, "[%s] %s: ", title, key);
    else if (title) more = snprintf(msg + used, 256, "[%s]: ", title);
    else if (key) more = snprintf(msg + used, 256, "%s: ", key);
    if (more < 0 || more >= 256) more = 255;
    used += more;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + used, sizeof(msg) - (size_t)used, fmt, ap);
    va_end(ap);
    return mx_error_set_message(MX_ERR_INVALID, msg);
}

/* Length of a "name.c:123: " source prefix at s, or 0. */
static size_t source_prefix(const char *s)
{
    const char *p = s;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '-') p++;
    if (p == s || *p != '.') return 0;
    p++;
    if (!strncmp(p, "cu", 2)) p += 2;
    else if (*p == 'c' || *p == 'h') p++;
    else return 0;
    if (*p != ':' || !isdigit((unsigned char)p[1])) return 0;
    p++;
    while (isdigit((unsigned char)*p)) p++;
    if (p[0] != ':' || p[1] != ' ') return 0;
    return (size_t)(p + 2 - s);
}

const char *cfg_clean_error(char *buf, size_t size)
{
    const char *msg = mx_last_error();
    size_t o = 0;
    for (size_t i = 0; msg[i] && o + 1 < size;) {
        bool boundary = i == 0 || msg[i - 1] == ' ';
        size_t skip = boundary ? source_prefix(msg + i) : 0;
        if (skip) {
            i += skip;
            continue;
        }
        buf[o++] = msg[i++];
    }
    buf[o] = '\0';
    return buf;
}

const cfg_entry *cfg_find(const cfg_section *s, const char *key)
{
    if (!s) return NULL;
    for (int i = 0; i < s->n_entries; i++)
        if (!strcmp(s->entries[i].key, key)) return &s->entries[i];
    return NULL;
}

const char *cfg_keep(mx_config_priv *p, const char *s)
{
    if (p->n_strings == p->cap_strings) {
        int cap = p->cap_strings ? 2 * p->cap_strings : 16;
        char **grown = mx_realloc(p->strings, (size_t)cap * sizeof(*grown));
        if (!grown) return NULL;
        p->strings = grown;
        p->cap_strings = cap;
    }
    char *copy = mx_strdup(s);
    if (!copy) return NULL;
    p->strings[p->n_strings++] = copy;
    return copy;
}

void cfg_trim_copy(const char *text, size_t len, char *buf, size_t size)
{
    while (len && isspace((unsigned char)*text)) text++, len--;
    while (len && isspace((unsigned char)text[len - 1])) len--;
    if (len >= size) len = size - 1;
    memcpy(buf, text, len);
    buf[len] = '\0';
}

/* ------------------------------------------------------------ numbers */

bool cfg_parse_int(const char *text, int64_t *out)
{
    while (isspace((unsigned char)*text)) text++;
    if (!*text) return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = v;
    return true;
}

bool cfg_parse_float(const char *text, double *out)
{
    while (isspace((unsigned char)*text)) text++;
    if (!*text) return false;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || v != v || v - v != 0) return false; /* NaN, inf */
    if (errno == ERANGE && (v > 1.0 || v < -1.0)) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = v;
    return true;
}

bool cfg_parse_bool(const char *text, bool *out)
{
    char buf[16];
    cfg_trim_copy(text, strlen(text), buf, sizeof(buf));
    if (!strcasecmp(buf, "true") || !strcmp(buf, "1")) return *out = true, true;
    if (!strcasecmp(buf, "false") || !strcmp(buf, "0")) return *out = false, true;
    return false;
}

bool cfg_parse_tuple(const char *text, mx_tuple *out)
{
    char buf[256];
    size_t len = strlen(text);
    if (len >= sizeof(buf)) return false;
    cfg_trim_copy(text, len, buf, sizeof(buf));
    char *p = buf;
    size_t n = strlen(p);
    if (n && (p[0] == '(' || p[0] == '[')) {
        char close = p[0] == '(' ? ')' : ']';
        if (n < 2 || p[n - 1] != close) return false;
        p[n - 1] = '\0';
        p++;
    }
    mx_tuple t = {.ndim = 0};
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || t.ndim == MX_MAX_NDIM) return false;
        t.v[t.ndim++] = v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p) return false;
    }
    *out = t;
    return true;
}

/* ------------------------------------------------------------ document */

static const char *section_title_of(const void *p, uint32_t i)
{
    return ((const mx_config_priv *)p)->sections[i].title;
}

static cfg_section *add_section(mx_config_priv *p, cfg_kind kind, const char *name, int line)
{
    if (!p->section_titles.name_of) mx_name_index_init(&p->section_titles, section_title_of, p);
    if (mx_name_index_reserve(&p->section_titles, (uint32_t)p->n_sections + 1, (uint32_t)p->n_sections) != MX_OK)
        return NULL;
    if (p->n_sections == p->cap_sections) {
        int cap = p->cap_sections ? 2 * p->cap_sections : 16;
        cfg_section *grown = mx_realloc(p->sections, (size_t)cap * sizeof(*grown));
        if (!grown) return NULL;
        p->sections = grown;
        p->cap_sections = cap;
    }
    cfg_section *s = &p->sections[p->n_sections];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->line = line;
    char title[256];
    if (name) snprintf(title, sizeof(title), "%s %s", kind_names[kind], name);
    else snprintf(title, sizeof(title), "%s", kind_names[kind]);
    s->title = mx_strdup(title);
    s->name = name ? mx_strdup(name) : NULL;
    if (!s->title || (name && !s->name)) {
        mx_free(s->title);
        mx_free(s->name);
        return NULL;
    }
    p->n_sections++;
    mx_name_index_put(&p->section_titles, (uint32_t)(p->n_sections - 1));
    return s;
}

static cfg_entry *add_entry(cfg_section *s, const char *key, const char *value, int line)
{
    if (s->n_entries == s->cap_entries) {
        int cap = s->cap_entries ? 2 * s->cap_entries : 8;
        cfg_entry *grown = mx_realloc(s->entries, (size_t)cap * sizeof(*grown));
        if (!grown) return NULL;
        s->entries = grown;
        s->cap_entries = cap;
    }
    cfg_entry *e = &s->entries[s->n_entries];
    e->key = mx_strdup(key);
    e->value = mx_strdup(value);
    e->line = line;
    if (!e->key || !e->value) {
        mx_free(e->key);
        mx_free(e->value);
        return NULL;
    }
    s->n_entries++;
    return e;
}

static cfg_section *find_section(mx_config_priv *p, cfg_kind kind, const char *name)
{
    if (kind == CFG_LAYER && !name) return NULL;
    /* By title, as add_section makes it ("layer NAME", "train"). */
    char title[256];
    if (kind == CFG_LAYER) snprintf(title, sizeof(title), "%s %s", kind_names[kind], name);
    else snprintf(title, sizeof(title), "%s", kind_names[kind]);
    uint32_t i = mx_name_index_find(&p->section_titles, title);
    return i == MX_NAME_NONE || p->sections[i].kind != kind ? NULL : &p->sections[i];
}

static bool layer_name_char(int c)
{
    return isalnum(c) || c == '_' || c == '-' || c == '.' || c == '/';
}

/* ------------------------------------------------------------ reading */

typedef struct reader {
    mx_config_priv *p;
    const char *text;
    size_t len, pos;
    int lineno;           /* the line last handed to inih */
    cfg_section *current; /* NULL before the first header */
    bool current_bad;     /* the current header was in error: skip its keys */
    int err_line;         /* first error's line (0: none) */
    mx_status err_status;
    char err_msg[1024];
    bool nomem;
} reader;

static void reader_fail(reader *r, int line, const char *title, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void reader_fail(reader *r, int line, const char *title, const char *key, const char *fmt, ...)
{
    if (r->err_line && r->err_line <= line) return;
    char body[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    cfg_error(r->p, line, title, key, "%s", body);
    snprintf(r->err_msg, sizeof(r->err_msg), "%s", mx_last_error());
    r->err_line = line;
    r->err_status = MX_ERR_INVALID;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Parses a section header "[kind name]" (content starts with '['). */
static void read_header(reader *r, const char *content, int line)
{
    r->current = NULL;
    r->current_bad = true;
    const char *close = strchr(content, ']');
    if (!close) {
        reader_fail(r, line, NULL, NULL, "section header without ']'");
        return;
    }
    for (const char *q = close + 1; *q; q++)
        if (!isspace((unsigned char)*q)) {
            reader_fail(r, line, NULL, NULL, "unexpected text after ']' in section header");
            return;
        }
    char title[256];
    cfg_trim_copy(content + 1, (size_t)(close - content - 1), title, sizeof(title));
    if (!title[0]) {
        reader_fail(r, line, NULL, NULL, "empty section header '[]'");
        return;
    }
    char word[256];
    size_t wl = strcspn(title, " \t");
    cfg_trim_copy(title, wl, word, sizeof(word));
    const char *rest = title + wl;
    while (isspace((unsigned char)*rest)) rest++;
    int kind = -1;
    for (int k = 0; k < CFG_KIND_COUNT; k++)
        if (!strcmp(word, kind_names[k])) kind = k;
    if (kind < 0) {
        const char *near = mx_suggest(word, kind_names, CFG_KIND_COUNT);
        if (near)
            reader_fail(r, line, title, NULL, "unknown section (did you mean '%s'?)", near);
        else
            reader_fail(r, line, title, NULL,
                        "unknown section (sections: net, layer NAME, train, val, optimizer, fit)");
        return;
    }
    if (kind == CFG_LAYER) {
        if (!*rest) {
            reader_fail(r, line, title, NULL, "a layer section needs a name: [layer NAME]");
            return;
        }
        for (const char *q = rest; *q; q++)
            if (!layer_name_char((unsigned char)*q)) {
                reader_fail(r, line, title, NULL,
                            "bad layer name '%s': use letters, digits and _ - . / only", rest);
                return;
            }
        if (strlen(rest) > 100) {
            reader_fail(r, line, title, NULL, "layer name longer than 100 characters");
            return;
        }
        cfg_section *prev = find_section(r->p, CFG_LAYER, rest);
        if (prev) {
            reader_fail(r, line, title, NULL, "duplicate layer name '%s' (first defined at line %d)", rest,
                        prev->line);
            return;
        }
    } else {
        if (*rest) {
            reader_fail(r, line, title, NULL, "[%s] takes no name", kind_names[kind]);
            return;
        }
        cfg_section *prev = find_section(r->p, (cfg_kind)kind, NULL);
        if (prev) {
            reader_fail(r, line, title, NULL, "duplicate section (first at line %d)", prev->line);
            return;
        }
    }
    r->current = add_section(r->p, (cfg_kind)kind, kind == CFG_LAYER ? rest : NULL, line);
    if (!r->current) {
        r->nomem = true;
        return;
    }
    r->current_bad = false;
}

/* inih's fgets-style reader: hands over one checked, comment-free line. */
static char *read_line(char *str, int num, void *stream)
{
    reader *r = stream;
    if (r->pos >= r->len || num < 4) return NULL;
    const char *line = r->text + r->pos;
    const char *nl = memchr(line, '\n', r->len - r->pos);
    size_t n = nl ? (size_t)(nl - line) : r->len - r->pos;
    r->pos += n + (nl ? 1 : 0);
    int lineno = ++r->lineno;
    str[0] = '\n';
    str[1] = '\0';
    if (lineno == 1 && n >= 3 && !memcmp(line, "\xEF\xBB\xBF", 3)) line += 3, n -= 3; /* BOM */
    if (n && line[n - 1] == '\r') n--;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)line[i];
        if (c == 0) {
            reader_fail(r, lineno, NULL, NULL, "NUL byte at column %zu (not a text file?)", i + 1);
            return str;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7F) {
            reader_fail(r, lineno, NULL, NULL, "control character 0x%02x at column %zu (not a text file?)", c,
                        i + 1);
            return str;
        }
        size_t k = utf8_len((const unsigned char *)line + i, n - i);
        if (!k) {
            reader_fail(r, lineno, NULL, NULL, "invalid UTF-8 byte 0x%02x at column %zu (not a text file?)", c,
                        i + 1);
            return str;
        }
        i += k;
    }
    /* Leading blanks go (no multi-line values); comments go. */
    while (n && (*line == ' ' || *line == '\t')) line++, n--;
    if (n && (*line == ';' || *line == '#')) n = 0;
    for (size_t i = 1; i < n; i++)
        if (line[i] == ';' && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
            n = i;
            break;
        }
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
    if (n == 0) return str;
    if (n > MX_CONFIG_MAX_LINE || (int)n + 2 > num) {
        reader_fail(r, lineno, NULL, NULL, "line too long (%zu characters; at most %d)", n,
                    MX_CONFIG_MAX_LINE < num - 2 ? MX_CONFIG_MAX_LINE : num - 2);
        return str;
    }
    char content[MX_CONFIG_MAX_LINE + 1];
    memcpy(content, line, n);
    content[n] = '\0';
    if (content[0] == '[') {
        read_header(r, content, lineno);
        return str; /* sections are tracked here; inih sees a blank line */
    }
    memcpy(str, content, n);
    str[n] = '\n';
    str[n + 1] = '\0';
    return str;
}

static bool key_char(int c) { return isalnum(c) || c == '_'; }

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    (void)section;
    reader *r = user;
    int line = r->lineno;
    if (r->nomem) return 0;
    if (!*name) {
        reader_fail(r, line, NULL, NULL, "missing key name before '='");
        return 0;
    }
    for (const char *q = name; *q; q++)
        if (!key_char((unsigned char)*q)) {
            reader_fail(r, line, r->current ? r->current->title : NULL, NULL,
                        "bad key name '%s': use letters, digits and _ only", name);
            return 0;
        }
    if (!r->current) {
        if (!r->current_bad)
            reader_fail(r, line, NULL, name, "key outside any section (put it under [net], [layer NAME], [train], "
                                             "[val], [optimizer] or [fit])");
        return 0; /* keys of a broken header were already reported */
    }
    const cfg_entry *prev = cfg_find(r->current, name);
    if (prev) {
        reader_fail(r, line, r->current->title, name, "given twice (first at line %d)", prev->line);
        return 0;
    }
    if (!add_entry(r->current, name, value, line)) {
        r->nomem = true;
        return 0;
    }
    return 1;
}

/* Describes what inih rejected on `line`. */
static void syntax_error(reader *r, int line)
{
    reader_fail(r, line, NULL, NULL, "expected 'key = value' or '[section]'");
}

static mx_status read_document(mx_config_priv *p, const char *text, size_t len)
{
    reader r = {.p = p, .text = text, .len = len};
    int rc = ini_parse_stream(read_line, &r, on_key, &r);
    if (r.nomem) return MX_ERROR(MX_ERR_NOMEM, "out of memory reading %s", p->file);
    if (rc < 0) return MX_ERROR(MX_ERR_NOMEM, "inih could not allocate its line buffer");
    if (rc > 0 && (!r.err_line || rc < r.err_line)) syntax_error(&r, rc);
    if (r.err_line) return mx_error_set_message(r.err_status, r.err_msg);
    return MX_OK;
}

/* ------------------------------------------------------------ overrides */

bool mx_config_is_override(const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || arg[0] == '-') return false;
    const char *dot = NULL;
    for (const char *q = arg; q < eq; q++)
        if (*q == '.') dot = q;
    return dot && dot > arg && dot + 1 < eq;
}

static mx_status apply_override(mx_config_priv *p, const char *arg)
{
    char lhs[256];
    const char *eq = strchr(arg, '=');
    if (!mx_config_is_override(arg) || (size_t)(eq - arg) >= sizeof(lhs))
        return cfg_error(p, 0, NULL, NULL, "'%s': expected SECTION.KEY=VALUE (e.g. fit.num_epoch=2)", arg);
    memcpy(lhs, arg, (size_t)(eq - arg));
    lhs[eq - arg] = '\0';
    char *dot = strrchr(lhs, '.');
    *dot = '\0';
    const char *sec = lhs, *key = dot + 1;
    char value[MX_CONFIG_MAX_LINE + 1];
    size_t vlen = strlen(eq + 1);
    if (vlen > MX_CONFIG_MAX_LINE)
        return cfg_error(p, 0, NULL, NULL, "'%.40s...': value longer than %d characters", arg, MX_CONFIG_MAX_LINE);
    cfg_trim_copy(eq + 1, vlen, value, sizeof(value));
    for (const char *q = value; *q; q++)
        if ((unsigned char)*q < 0x20 && *q != '\t')
            return cfg_error(p, 0, NULL, NULL, "'%s': control character in the value", arg);
    for (const char *q = key; *q; q++)
        if (!key_char((unsigned char)*q)) return cfg_error(p, 0, NULL, NULL, "'%s': bad key name '%s'", arg, key);

    cfg_section *s = NULL;
    const char *layer = NULL;
    int kind = -1;
    if (!strncmp(sec, "layer.", 6)) layer = sec + 6;
    else {
        for (int k = 0; k < CFG_KIND_COUNT; k++)
            if (k != CFG_LAYER && !strcmp(sec, kind_names[k])) kind = k;
        if (kind < 0) layer = sec;
    }
    if (layer) {
        s = find_section(p, CFG_LAYER, layer);
        if (!s) {
            const char *cands[1024];
            int n = 0;
            for (int k = 0; k < CFG_KIND_COUNT; k++)
                if (k != CFG_LAYER) cands[n++] = kind_names[k];
            for (int i = 0; i < p->n_sections && n < 1024; i++)
                if (p->sections[i].kind == CFG_LAYER) cands[n++] = p->sections[i].name;
            const char *near = mx_suggest(layer, cands, n);
            if (near)
                return cfg_error(p, 0, NULL, NULL, "'%s': no section or layer '%s' (did you mean '%s'?)", arg, layer,
                                 near);
            return cfg_error(p, 0, NULL, NULL,
                             "'%s': no section or layer '%s' (sections: net, train, val, optimizer, fit, or a layer "
                             "name)",
                             arg, layer);
        }
    } else {
        s = find_section(p, (cfg_kind)kind, NULL);
        if (!s && !(s = add_section(p, (cfg_kind)kind, NULL, 0))) return mx_last_status();
    }
    for (int i = 0; i < s->n_entries; i++)
        if (!strcmp(s->entries[i].key, key)) {
            char *v = mx_strdup(value);
            if (!v) return mx_last_status();
            mx_free(s->entries[i].value);
            s->entries[i].value = v;
            s->entries[i].line = 0;
            return MX_OK;
        }
    if (!add_entry(s, key, value, 0)) return mx_last_status();
    return MX_OK;
}

/* ------------------------------------------------------------ load */

static void free_priv(mx_config_priv *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_sections; i++) {
        cfg_section *s = &p->sections[i];
        for (int j = 0; j < s->n_entries; j++) {
            mx_free(s->entries[j].key);
            mx_free(s->entries[j].value);
        }
        mx_free(s->entries);
        mx_free(s->name);
        mx_free(s->title);
        for (int j = 0; s->where && j < s->n_entries; j++) mx_free(s->where[j]);
        mx_free(s->where);
        mx_free(s->keys);
        mx_free(s->values);
        mx_free(s->where_section);
    }
    for (int k = 0; k < CFG_KIND_COUNT; k++) mx_free(p->absent_where[k]);
    mx_free(p->sections);
    mx_name_index_free(&p->section_titles);
    for (int i = 0; i < p->n_strings; i++) mx_free(p->strings[i]);
    mx_free(p->strings);
    mx_free(p->layers);
    mx_free(p->file);
    mx_free(p);
}

void mx_config_free(mx_config *cfg)
{
    if (!cfg) return;
    mx_graph_free(cfg->graph);
    free_priv(cfg->priv);
    mx_free(cfg);
}

static bool is_settings(cfg_kind kind)
{
    return kind == CFG_TRAIN || kind == CFG_VAL || kind == CFG_OPTIMIZER || kind == CFG_FIT;
}

/* "FILE:LINE: [title]" (line > 0), "command line: [title]" (0), "FILE: [title]" (< 0). */
static char *location(const mx_config_priv *p, int line, const char *title, const char *key)
{
    char buf[1024];
    if (line > 0) snprintf(buf, sizeof(buf), "%s:%d: [%s]", p->file, line, title);
    else if (line == 0) snprintf(buf, sizeof(buf), "command line: [%s]", title);
    else snprintf(buf, sizeof(buf), "%s: [%s]", p->file, title);
    if (key) {
        size_t used = strlen(buf);
        snprintf(buf + used, sizeof(buf) - used, " %s", key);
    }
    return mx_strdup(buf);
}

/* The settings sections' entries as located pairs for their owners. */
static mx_status locate_settings(mx_config_priv *p)
{
    bool present[CFG_KIND_COUNT] = {false};
    for (int i = 0; i < p->n_sections; i++) {
        cfg_section *s = &p->sections[i];
        if (!is_settings(s->kind)) continue;
        present[s->kind] = true;
        size_t n = (size_t)s->n_entries + 1;
        s->keys = mx_calloc(n, sizeof(char *));
        s->values = mx_calloc(n, sizeof(char *));
        s->where = mx_calloc(n, sizeof(char *));
        s->where_section = location(p, s->line, s->title, NULL);
        if (!s->keys || !s->values || !s->where || !s->where_section) return mx_last_status();
        for (int j = 0; j < s->n_entries; j++) {
            const cfg_entry *e = &s->entries[j];
            s->keys[j] = e->key;
            s->values[j] = e->value;
            if (!(s->where[j] = location(p, e->line, s->title, e->key))) return mx_last_status();
        }
    }
    for (int k = 0; k < CFG_KIND_COUNT; k++)
        if (is_settings((cfg_kind)k) && !present[k] && !(p->absent_where[k] = location(p, -1, kind_names[k], NULL)))
            return mx_last_status();
    return MX_OK;
}

static mx_status compile(mx_config *cfg, const char *text, size_t len, const char *const *overrides, int n_overrides)
{
    mx_config_priv *p = cfg->priv;
    if (len > MX_CONFIG_MAX_BYTES)
        return cfg_error(p, -1, NULL, NULL, "file too large (%zu bytes; a config is at most %u)", len,
                         MX_CONFIG_MAX_BYTES);
    MX_TRY(read_document(p, text, len));
    for (int i = 0; i < n_overrides; i++) MX_TRY(apply_override(p, overrides[i] ? overrides[i] : ""));

    /* The file's base name is the default net name. */
    const char *base = strrchr(p->file, '/');
    base = base ? base + 1 : p->file;
    char name[256];
    snprintf(name, sizeof(name), "%s", base);
    char *dot = strrchr(name, '.');
    if (dot && dot != name) *dot = '\0';
    if (!(cfg->name = cfg_keep(p, name))) return mx_last_status();

    MX_TRY(locate_settings(p));
    return cfg_compile_net(cfg);
}

mx_status mx_config_parse(const char *name, const char *text, size_t len, const char *const *overrides,
                          int n_overrides, mx_config **out)
{
    *out = NULL;
    mx_config *cfg = mx_calloc(1, sizeof(*cfg));
    if (!cfg) return mx_last_status();
    cfg->priv = mx_calloc(1, sizeof(*cfg->priv));
    if (!cfg->priv || !(cfg->priv->file = mx_strdup(name ? name : "config"))) {
        mx_config_free(cfg);
        return mx_last_status();
    }
    cfg->path = cfg->priv->file;
    mx_status st = compile(cfg, text ? text : "", text ? len : 0, overrides, n_overrides);
    if (st != MX_OK) {
        mx_config_free(cfg);
        return st;
    }
    *out = cfg;
    return MX_OK;
}

mx_status mx_config_load(const char *path, const char *const *overrides, int n_overrides, mx_config **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s: cannot open: %s", path, strerror(errno));
        return mx_error_set_message(MX_ERR_IO, msg);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap > MX_CONFIG_MAX_BYTES) break;
            cap = cap ? 2 * cap : 65536;
            char *grown = mx_realloc(buf, cap + 1);
            if (!grown) {
                mx_free(buf);
                fclose(f);
                return mx_last_status();
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int failed = ferror(f), err = errno;
    fclose(f);
    if (failed) {
        mx_free(buf);
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s: cannot read: %s", path, strerror(err));
        return mx_error_set_message(MX_ERR_IO, msg);
    }
    if (!buf && !(buf = mx_malloc(1))) return mx_last_status();
    buf[len] = '\0';
    mx_status st = mx_config_parse(path, buf, len, overrides, n_overrides, out);
    mx_free(buf);
    return st;
}

/* ------------------------------------------------------------ queries */

const mx_config_layer *mx_config_find_layer(const mx_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->n_layers; i++)
        if (!strcmp(cfg->layers[i].name, name)) return &cfg->layers[i];
    return NULL;
}

const char *mx_config_where(const mx_config *cfg, const char *section, const char *key, char *buf, size_t size)
{
    const mx_config_priv *p = cfg->priv;
    for (int i = 0; i < p->n_sections; i++) {
        const cfg_section *s = &p->sections[i];
        if (strcmp(s->title, section)) continue;
        const cfg_entry *e = key ? cfg_find(s, key) : NULL;
        int line = e ? e->line : s->line;
        if (line > 0) snprintf(buf, size, "%s:%d: [%s]%s%s", p->file, line, section, key ? " " : "", key ? key : "");
        else snprintf(buf, size, "command line: [%s]%s%s", section, key ? " " : "", key ? key : "");
        return buf;
    }
    snprintf(buf, size, "%s: [%s]%s%s", p->file, section, key ? " " : "", key ? key : "");
    return buf;
}

static const cfg_section *settings_section(const mx_config *cfg, const char *section, cfg_kind *kind)
{
    *kind = CFG_KIND_COUNT;
    for (int k = 0; k < CFG_KIND_COUNT; k++)
        if (is_settings((cfg_kind)k) && !strcmp(kind_names[k], section)) *kind = (cfg_kind)k;
    const mx_config_priv *p = cfg->priv;
    for (int i = 0; i < p->n_sections && *kind != CFG_KIND_COUNT; i++)
        if (p->sections[i].kind == *kind) return &p->sections[i];
    return NULL;
}

bool mx_config_has_section(const mx_config *cfg, const char *section)
{
    cfg_kind kind;
    return settings_section(cfg, section, &kind) != NULL;
}

void mx_config_section_input(const mx_config *cfg, const char *section, mx_param_input *out)
{
    cfg_kind kind;
    const cfg_section *s = settings_section(cfg, section, &kind);
    static const char *const none[1] = {NULL};
    if (s) {
        *out = (mx_param_input){.n = s->n_entries, .keys = s->keys, .values = s->values,
                                .where = (const char *const *)s->where, .section = s->where_section};
    } else {
        *out = (mx_param_input){.n = 0, .keys = none, .values = none, .where = none,
                                .section = kind < CFG_KIND_COUNT ? cfg->priv->absent_where[kind] : cfg->priv->file};
    }
}

/* True when `name` occurs in msg as a whole word (not inside a longer name). */
static const char *find_word(const char *msg, const char *name)
{
    size_t n = strlen(name);
    if (!n) return NULL;
    for (const char *q = strstr(msg, name); q; q = strstr(q + 1, name)) {
        bool left = q == msg || !(isalnum((unsigned char)q[-1]) || q[-1] == '_' || q[-1] == '-' || q[-1] == '/');
        char c = q[n];
        bool right = !(isalnum((unsigned char)c) || c == '_' || c == '-' || c == '/' ||
                       (c == '.' && isalnum((unsigned char)q[n + 1])));
        if (left && right) return q;
    }
    return NULL;
}

mx_status mx_config_infer_shapes(const mx_config *cfg, const char *const *names, const mx_shape *shapes, int n,
                                 mx_graph_shapes *out)
{
    mx_status st = mx_graph_infer_shapes(cfg->graph, names, shapes, n, out);
    if (st == MX_OK) return MX_OK;
    char why[1024];
    snprintf(why, sizeof(why), "%s", cfg_clean_error((char[1024]){0}, 1024));
    /* The layer named first in the message (the longest name on a tie). */
    const mx_config_layer *best = NULL;
    const char *best_at = NULL;
    for (int i = 0; i < cfg->n_layers; i++) {
        const char *at = find_word(why, cfg->layers[i].name);
        if (!at) continue;
        if (!best || at < best_at || (at == best_at && strlen(cfg->layers[i].name) > strlen(best->name))) {
            best = &cfg->layers[i];
            best_at = at;
        }
    }
    if (st != MX_ERR_INVALID) return st;
    if (best) {
        char title[256], prefix[300];
        snprintf(title, sizeof(title), "layer %s", best->name);
        /* symbol.c says "layer 'NAME' (Op): why"; the location says the layer. */
        int pl = snprintf(prefix, sizeof(prefix), "layer '%s' (%s): ", best->name, best->op);
        const char *body = why;
        if (pl > 0 && (size_t)pl < sizeof(prefix) && !strncmp(why, prefix, (size_t)pl)) {
            body = why + pl;
            size_t on = strlen(best->op);
            if (strncmp(body, best->op, on) || body[on] != ':')
                return cfg_error(cfg->priv, best->line, title, NULL, "%s: %s", best->op, body);
        }
        return cfg_error(cfg->priv, best->line, title, NULL, "%s", body);
    }
    return cfg_error(cfg->priv, -1, NULL, NULL, "%s", why);
}
