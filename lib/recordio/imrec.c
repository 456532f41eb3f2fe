/* imrec.c - IRHeader pack/unpack, image-record payloads and .lst files. */
#include "recordio/imrec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- IRHeader ---------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void mx_irheader_encode(const mx_irheader *h, uint8_t out[MX_IRHEADER_SIZE])
{
    put_u32(out, h->flag);
    put_u32(out + 4, float_bits(h->label));
    put_u64(out + 8, h->id);
    put_u64(out + 16, h->id2);
}

void mx_irheader_decode(const uint8_t in[MX_IRHEADER_SIZE], mx_irheader *h)
{
    h->flag = get_u32(in);
    h->label = bits_float(get_u32(in + 4));
    h->id = get_u64(in + 8);
    h->id2 = get_u64(in + 16);
}

mx_status mx_imrec_parse(const uint8_t *payload, size_t size, mx_imrec *out)
{
    if (!out || (!payload && size)) return MX_ERROR(MX_ERR_INVALID, "mx_imrec_parse: NULL argument");
    memset(out, 0, sizeof(*out));
    if (size < MX_IRHEADER_SIZE)
        return MX_ERROR(MX_ERR_FORMAT, "image record of %zu bytes is shorter than its %d-byte header",
                        size, MX_IRHEADER_SIZE);
    mx_irheader_decode(payload, &out->header);
    uint64_t label_bytes = 4 * (uint64_t)out->header.flag;
    if (label_bytes > size - MX_IRHEADER_SIZE)
        return MX_ERROR(MX_ERR_FORMAT,
                        "image record of %zu bytes announces %u labels (flag) that do not fit",
                        size, out->header.flag);
    out->num_labels = out->header.flag;
    out->labels = out->num_labels ? payload + MX_IRHEADER_SIZE : NULL;
    out->image = payload + MX_IRHEADER_SIZE + label_bytes;
    out->image_size = size - MX_IRHEADER_SIZE - (size_t)label_bytes;
    return MX_OK;
}

float mx_imrec_label(const mx_imrec *rec, uint32_t i)
{
    if (rec->num_labels == 0) return i == 0 ? rec->header.label : NAN;
    if (i >= rec->num_labels) return NAN;
    return bits_float(get_u32(rec->labels + 4 * (size_t)i));
}

mx_status mx_imrec_pack(const mx_irheader *h, const float *labels, const void *image,
                        size_t image_size, uint8_t **out, size_t *out_size)
{
    if (!h || !out || !out_size || (h->flag && !labels) || (!image && image_size))
        return MX_ERROR(MX_ERR_INVALID, "mx_imrec_pack: NULL argument");
    *out = NULL;
    *out_size = 0;
    size_t label_bytes, total;
    if (!mx_size_mul(h->flag, 4, &label_bytes) ||
        !mx_size_add(MX_IRHEADER_SIZE, label_bytes, &total) || !mx_size_add(total, image_size, &total))
        return MX_ERROR(MX_ERR_INVALID, "image record size overflows");
    uint8_t *p = mx_malloc(total);
    if (!p) return MX_ERR_NOMEM;
    mx_irheader_encode(h, p);
    for (uint32_t i = 0; i < h->flag; i++) put_u32(p + MX_IRHEADER_SIZE + 4 * (size_t)i, float_bits(labels[i]));
    if (image_size) memcpy(p + MX_IRHEADER_SIZE + label_bytes, image, image_size);
    *out = p;
    *out_size = total;
    return MX_OK;
}

/* ---- .lst -------------------------------------------------------------- */

void mx_lst_entry_clear(mx_lst_entry *e)
{
    if (!e) return;
    mx_free(e->labels);
    mx_free(e->path);
    memset(e, 0, sizeof(*e));
}

/* Python's str.strip() whitespace, ASCII part. */
static int py_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static void strip(const char **b, const char **e)
{
    while (*b < *e && py_space(**b)) (*b)++;
    while (*e > *b && py_space((*e)[-1])) (*e)--;
}

#define LST_ERROR(...) lst_error(name, lineno, __FILE__, __LINE__, __VA_ARGS__)
static mx_status lst_error(const char *name, uint64_t lineno, const char *file, int line,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static mx_status lst_error(const char *name, uint64_t lineno, const char *file, int line,
                           const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return mx_error_set(MX_ERR_FORMAT, file, line, "%s:%llu: %s", name ? name : "<list>",
                        (unsigned long long)lineno, msg);
}

/* Python int(): optional sign and decimal digits (no '_' support). */
static int parse_py_int(const char *b, const char *e, int64_t *out)
{
    int neg = 0;
    if (b < e && (*b == '+' || *b == '-')) neg = *b++ == '-';
    if (b == e) return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; b < e; b++) {
        if (*b < '0' || *b > '9') return 0;
        unsigned d = (unsigned)(*b - '0');
        if (v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 1;
}

/* Python float(): decimal numbers, inf/infinity/nan (no hex, no '_'). */
static int parse_py_float(const char *b, const char *e, double *out)
{
    /* Any length, as Python: "%f" alone writes up to 317 characters. */
    char small[128], *tmp = small;
    size_t n = (size_t)(e - b);
    if (n == 0) return 0;
    if (n >= sizeof(small) && !(tmp = mx_malloc(n + 1))) return 0;
    memcpy(tmp, b, n);
    tmp[n] = '\0';
    char *end = NULL;
    double v = 0;
    if (strlen(tmp) == n && !strpbrk(tmp, "xX(")) v = strtod(tmp, &end);
    /* overflow gives +-inf, underflow 0 or a subnormal, as Python */
    int ok = end == tmp + n;
    if (tmp != small) mx_free(tmp);
    if (ok) *out = v;
    return ok;
}

mx_status mx_lst_parse_line(const char *line, size_t len, const char *name, uint64_t lineno,
                            mx_lst_entry *e)
{
    if (!e || (!line && len)) return MX_ERROR(MX_ERR_INVALID, "mx_lst_parse_line: NULL argument");
    const char *b = line ? line : "", *end = b + len;
    strip(&b, &end);
    size_t fields = 1;
    for (const char *p = b; p < end; p++) fields += *p == '\t';
    if (fields < 3)
        return LST_ERROR("expected at least 3 TAB-separated fields (index, label..., path), found %zu",
                         fields);
    /* field boundaries, stripped one by one */
    const char *fb = b, *fe = memchr(b, '\t', (size_t)(end - b));
    const char *ib = fb, *ie = fe;
    strip(&ib, &ie);
    int64_t index;
    if (!parse_py_int(ib, ie, &index))
        return LST_ERROR("index \"%.*s\" is not an integer", (int)(ie - ib > 40 ? 40 : ie - ib), ib);
    size_t nlab = fields - 2;
    if (nlab > e->labels_cap) {
        size_t bytes;
        if (!mx_size_mul(nlab, sizeof(double), &bytes)) return MX_ERROR(MX_ERR_NOMEM, "too many labels");
        double *p = mx_realloc(e->labels, bytes);
        if (!p) return MX_ERR_NOMEM;
        e->labels = p;
        e->labels_cap = nlab;
    }
    for (size_t i = 0; i < nlab; i++) {
        fb = fe + 1;
        fe = memchr(fb, '\t', (size_t)(end - fb));
        const char *lb = fb, *le = fe;
        strip(&lb, &le);
        if (!parse_py_float(lb, le, &e->labels[i]))
            return LST_ERROR("label %zu \"%.*s\" is not a number", i + 1,
                             (int)(le - lb > 40 ? 40 : le - lb), lb);
    }
    const char *pb = fe + 1, *pe = end;
    strip(&pb, &pe);
    size_t plen = (size_t)(pe - pb);
    if (plen == 0) return LST_ERROR("empty image path");
    if (memchr(pb, '\0', plen)) return LST_ERROR("image path contains a NUL byte");
    if (plen + 1 > e->path_cap) {
        char *p = mx_realloc(e->path, plen + 1);
        if (!p) return MX_ERR_NOMEM;
        e->path = p;
        e->path_cap = plen + 1;
    }
    memcpy(e->path, pb, plen);
    e->path[plen] = '\0';
    e->index = index;
    e->num_labels = nlab;
    return MX_OK;
}

mx_status mx_lst_format(const mx_lst_entry *e, char **out, size_t *len)
{
    if (!e || !out) return MX_ERROR(MX_ERR_INVALID, "mx_lst_format: NULL argument");
    *out = NULL;
    if (len) *len = 0;
    if (e->num_labels == 0 || !e->labels)
        return MX_ERROR(MX_ERR_INVALID, ".lst entry %lld has no label", (long long)e->index);
    size_t plen = e->path ? strlen(e->path) : 0;
    if (plen == 0) return MX_ERROR(MX_ERR_INVALID, ".lst entry %lld has an empty path", (long long)e->index);
    if (strpbrk(e->path, "\t\r\n") || py_space(e->path[0]) || py_space(e->path[plen - 1]))
        return MX_ERROR(MX_ERR_INVALID,
                        ".lst entry %lld: path \"%s\" has a TAB, line break or surrounding "
                        "whitespace and would not read back", (long long)e->index, e->path);
    size_t cap = 32 + plen, used = 0;
    size_t lab_bytes;
    if (!mx_size_mul(e->num_labels, 352, &lab_bytes) || !mx_size_add(cap, lab_bytes, &cap))
        return MX_ERROR(MX_ERR_NOMEM, ".lst line too long");
    char *s = mx_malloc(cap);
    if (!s) return MX_ERR_NOMEM;
    used += (size_t)snprintf(s, cap, "%lld\t", (long long)e->index);
    for (size_t i = 0; i < e->num_labels; i++) {
        double v = e->labels[i];
        if (isnan(v)) used += (size_t)snprintf(s + used, cap - used, "nan\t"); /* never "-nan" */
        else used += (size_t)snprintf(s + used, cap - used, "%f\t", v);
    }
    used += (size_t)snprintf(s + used, cap - used, "%s\n", e->path);
    *out = s;
    if (len) *len = used;
    return MX_OK;
}

mx_status mx_lst_write(mx_stream *stream, const mx_lst_entry *e)
{
    if (!stream) return MX_ERROR(MX_ERR_INVALID, "mx_lst_write: NULL stream");
    char *s = NULL;
    size_t n = 0;
    MX_TRY(mx_lst_format(e, &s, &n));
    mx_status st = mx_stream_write(stream, s, n);
    mx_free(s);
    return st;
}

struct mx_lst_reader {
    mx_stream *stream;
    int own_stream;
    mx_line_reader *lines;
    char *name;
};

mx_status mx_lst_reader_create(mx_stream *stream, const char *name, int own_stream, mx_lst_reader **out)
{
    if (!stream || !out) return MX_ERROR(MX_ERR_INVALID, "mx_lst_reader_create: NULL argument");
    *out = NULL;
    mx_lst_reader *r = mx_calloc(1, sizeof(*r));
    if (!r) return MX_ERR_NOMEM;
    r->name = mx_strdup(name ? name : "<list>");
    mx_status st = r->name ? mx_line_reader_create(stream, &r->lines) : MX_ERR_NOMEM;
    if (st != MX_OK) {
        mx_free(r->name);
        mx_free(r);
        return st;
    }
    r->stream = stream;
    r->own_stream = own_stream;
    *out = r;
    return MX_OK;
}

mx_status mx_lst_reader_open(const char *path, mx_lst_reader **out)
{
    if (!path || !out) return MX_ERROR(MX_ERR_INVALID, "mx_lst_reader_open: NULL argument");
    *out = NULL;
    mx_stream *s = NULL;
    MX_TRY(mx_stream_open_file(path, "rb", &s));
    mx_status st = mx_lst_reader_create(s, path, 1, out);
    if (st != MX_OK) mx_stream_close(s);
    return st;
}

mx_status mx_lst_reader_next(mx_lst_reader *r, mx_lst_entry *e, int *got)
{
    if (!r || !e || !got) return MX_ERROR(MX_ERR_INVALID, "mx_lst_reader_next: NULL argument");
    *got = 0;
    const char *line;
    size_t len;
    int have = 0;
    MX_TRY(mx_line_reader_next(r->lines, &line, &len, &have));
    if (!have) return MX_OK;
    MX_TRY(mx_lst_parse_line(line, len, r->name, mx_line_reader_lineno(r->lines), e));
    *got = 1;
    return MX_OK;
}

uint64_t mx_lst_reader_lineno(const mx_lst_reader *r) { return mx_line_reader_lineno(r->lines); }

void mx_lst_reader_free(mx_lst_reader *r)
{
    if (!r) return;
    mx_line_reader_free(r->lines);
    if (r->own_stream) mx_stream_close(r->stream); /* read-only */
    mx_free(r->name);
    mx_free(r);
}
