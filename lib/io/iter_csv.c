/*
 * iter_csv.c - MXNet's CSVIter: one sample per line of comma-separated
 * numbers, reshaped to data_shape; labels from a second CSV file read in
 * step (label_csv), or zero. Rows are parsed on the prefetch thread as the
 * epoch goes, so a bad number surfaces at next() as "FILE:LINE: ...".
 *
 * Semantics, as MXNet 1.9.1 (CSVIter + BatchLoader) unless noted:
 *   - every line must hold exactly prod(data_shape) numbers (label lines
 *     prod(label_shape)); blank lines are skipped; numbers are read with
 *     strtof, blanks around them allowed;
 *   - round_batch=1: a last partial batch is completed with the first rows
 *     of the data and pad = the number of those rows; the epoch after it
 *     starts after them (they are not repeated), as BatchLoader's
 *     BeforeFirst does. A reset in the middle of an epoch starts at row 0;
 *   - round_batch=0: the partial batch comes with pad = missing rows, whose
 *     slots hold zeros (MXNet leaves stale data) and index UINT64_MAX;
 *   - data (batch, *data_shape); label (batch,) when label_shape is (1,),
 *     else (batch, *label_shape). label_csv "NULL" (MXNet) or "" means
 *     none: labels are 0;
 *   - extensions: num_parts / part_index take the contiguous slice of rows
 *     given by MXNet's part formula (prefetch.h), as the config allows them
 *     for every iterator; the files are counted once at creation, so data
 *     and label row counts must match (MX_ERR_FORMAT), and a part with
 *     fewer rows than batch_size is an error when round_batch=1 (MXNet:
 *     "number of input must be bigger than batch size");
 *   - dtype: None or float32 only; ctx is accepted and has no effect.
 */
#include "io/io.h"
#include "io/prefetch.h"
#include "recordio/stream.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct csv_params {
    char data_csv[MX_PARAM_STRING_MAX];
    mx_tuple data_shape;
    char label_csv[MX_PARAM_STRING_MAX];
    mx_tuple label_shape;
    int64_t batch_size;
    bool round_batch;
    int64_t prefetch_buffer;
    int ctx;
    int dtype;
    int64_t num_parts;
    int64_t part_index;
} csv_params;

static const char *const ctx_choices[] = {"cpu", "gpu", NULL};
static const char *const dtype_choices[] = {"None", "float32", "float64", "float16", "int32",
                                            "int64", "uint8",   "int8",    NULL};

#define P(f) offsetof(csv_params, f)
static const mx_param_desc csv_param_table[] = {
    {"data_csv", MX_PARAM_STRING, NULL, 1, 0, NULL, P(data_csv), "data CSV file"},
    {"data_shape", MX_PARAM_TUPLE, NULL, 1, 1e9, NULL, P(data_shape), "shape of one sample (one line)"},
    {"label_csv", MX_PARAM_STRING, "NULL", 1, 0, NULL, P(label_csv), "label CSV file; NULL: labels are 0"},
    {"label_shape", MX_PARAM_TUPLE, "(1,)", 1, 1e9, NULL, P(label_shape), "shape of one label (one line)"},
    {"batch_size", MX_PARAM_INT, NULL, 1, 1e9, NULL, P(batch_size), "batch size"},
    {"round_batch", MX_PARAM_BOOL, "True", 1, 0, NULL, P(round_batch),
     "complete the last batch with rows from the start (pad reports how many)"},
    {"prefetch_buffer", MX_PARAM_INT, "4", 1, 1e6, NULL, P(prefetch_buffer), "batches prefetched in background"},
    {"ctx", MX_PARAM_ENUM, "gpu", 1, 0, ctx_choices, P(ctx), "accepted; batches are produced on the CPU"},
    {"dtype", MX_PARAM_ENUM, "None", 1, 0, dtype_choices, P(dtype), "output type: None (float32) or float32"},
    {"num_parts", MX_PARAM_INT, "1", 1, 1e9, NULL, P(num_parts), "partition the rows into this many parts"},
    {"part_index", MX_PARAM_INT, "0", 0, 1e9, NULL, P(part_index), "the part to read"},
};
#undef P

#define N_CSV_PARAMS ((int)(sizeof(csv_param_table) / sizeof(csv_param_table[0])))

/* ---------------------------------------------------------------- reading */

/* A CSV file read line by line, counting the non-blank rows seen. */
typedef struct csv_file {
    const char *path;
    const char *what; /* "data" / "label" */
    int64_t width;    /* numbers per row */
    mx_stream *stream;
    mx_line_reader *reader;
    int64_t row;      /* non-blank rows read so far */
} csv_file;

static void csv_close(csv_file *f)
{
    mx_line_reader_free(f->reader);
    f->reader = NULL;
    (void)mx_stream_close(f->stream); /* read-only: nothing to flush */
    f->stream = NULL;
    f->row = 0;
}

static mx_status csv_open(csv_file *f)
{
    csv_close(f);
    mx_status s = mx_stream_open_file(f->path, "rb", &f->stream);
    if (s != MX_OK) return mx_error_prefix(s, "csv: %s file", f->what);
    s = mx_line_reader_create(f->stream, &f->reader);
    if (s != MX_OK) csv_close(f);
    return s;
}

static bool blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)line[i])) return false;
    return true;
}

/* The next non-blank line, or *got = 0 at the end of the file. */
static mx_status csv_next_line(csv_file *f, const char **line, size_t *len, int *got)
{
    for (;;) {
        mx_status s = mx_line_reader_next(f->reader, line, len, got);
        if (s != MX_OK) return mx_error_prefix(s, "csv: reading %s file '%s'", f->what, f->path);
        if (!*got) return MX_OK;
        if (!blank(*line, *len)) {
            f->row++;
            return MX_OK;
        }
    }
}

/* Parses one row of exactly f->width numbers into dst. Errors (MX_ERR_FORMAT)
 * read "csv: PATH:LINE: ...". */
static mx_status csv_parse_row(const csv_file *f, const char *line, size_t len, float *dst)
{
    unsigned long long lineno = (unsigned long long)mx_line_reader_lineno(f->reader);
    if (memchr(line, '\0', len))
        return MX_ERROR(MX_ERR_FORMAT, "csv: %s:%llu: the line holds a NUL byte (not a text file?)", f->path, lineno);
    const char *p = line, *end = line + len;
    int64_t col = 0;
    for (;;) {
        const char *field_end = memchr(p, ',', (size_t)(end - p));
        if (!field_end) field_end = end;
        if (col < f->width) {
            const char *a = p, *b = field_end;
            while (a < b && isspace((unsigned char)*a)) a++;
            while (b > a && isspace((unsigned char)b[-1])) b--;
            if (a == b)
                return MX_ERROR(MX_ERR_FORMAT, "csv: %s:%llu: column %lld is empty", f->path, lineno,
                                (long long)col + 1);
            char *stop;
            errno = 0;
            float v = strtof(a, &stop);
            if (stop != b) {
                int n = (int)(b - a) > 40 ? 40 : (int)(b - a);
                return MX_ERROR(MX_ERR_FORMAT, "csv: %s:%llu: column %lld: '%.*s' is not a number", f->path,
                                lineno, (long long)col + 1, n, a);
            }
            if (errno == ERANGE && isinf(v))
                return MX_ERROR(MX_ERR_FORMAT, "csv: %s:%llu: column %lld: '%.*s' is out of float32 range",
                                f->path, lineno, (long long)col + 1, (int)(b - a) > 40 ? 40 : (int)(b - a), a);
            dst[col] = v;
        }
        col++;
        if (field_end == end) break;
        p = field_end + 1;
    }
    if (col != f->width)
        return MX_ERROR(MX_ERR_FORMAT, "csv: %s:%llu: %lld columns, expected %lld (the size of %s_shape)", f->path,
                        lineno, (long long)col, (long long)f->width, f->what);
    return MX_OK;
}

/* Counts the non-blank rows of a file. */
static mx_status csv_count_rows(csv_file *f, int64_t *rows)
{
    MX_TRY(csv_open(f));
    const char *line;
    size_t len;
    int got;
    mx_status s;
    do s = csv_next_line(f, &line, &len, &got);
    while (s == MX_OK && got);
    *rows = f->row;
    csv_close(f);
    return s;
}

/* Positions f so that the next row read is row `row` (0-based, non-blank). */
static mx_status csv_seek_row(csv_file *f, int64_t row)
{
    MX_TRY(csv_open(f));
    const char *line;
    size_t len;
    int got;
    while (f->row < row) {
        MX_TRY(csv_next_line(f, &line, &len, &got));
        if (!got)
            return MX_ERROR(MX_ERR_FORMAT, "csv: %s file '%s' ends after %lld rows; it had more when opened",
                            f->what, f->path, (long long)f->row);
    }
    return MX_OK;
}

/* Reads the next row of f into dst (width floats). */
static mx_status csv_read_row(csv_file *f, float *dst)
{
    const char *line;
    size_t len;
    int got;
    MX_TRY(csv_next_line(f, &line, &len, &got));
    if (!got)
        return MX_ERROR(MX_ERR_FORMAT, "csv: %s file '%s' ends after %lld rows; it had more when opened", f->what,
                        f->path, (long long)f->row);
    return csv_parse_row(f, line, len, dst);
}

/* ---------------------------------------------------------------- iterator */

typedef struct csv_state {
    csv_params p;
    bool has_labels;
    int64_t start, n;       /* this part: rows [start, start + n) of the files */
    mx_shape data_shape, label_shape;
    mx_prefetch *pf;
    /* Set between stop and start (consumer), read by the producer. */
    int64_t first;          /* part row the epoch starts at (round_batch carry-over) */
    /* Consumer only. */
    int64_t carry;          /* rows the last batch handed out wrapped around */
    /* Producer only. */
    csv_file data, label;
    int64_t pos;            /* next part row to read */
    bool ended;             /* the epoch's last batch has been filled */
} csv_state;

/* Reads part row st->pos into sample slot i of the batch. */
static mx_status csv_read_sample(csv_state *st, mx_prefetch_slot *slot, int64_t i)
{
    float *data = (float *)slot->data + i * slot->data_size;
    float *label = slot->label + i * slot->label_size;
    MX_TRY(csv_read_row(&st->data, data));
    if (st->has_labels) MX_TRY(csv_read_row(&st->label, label));
    else memset(label, 0, (size_t)slot->label_size * sizeof(float));
    slot->index[i] = (uint64_t)(st->start + st->pos);
    st->pos++;
    return MX_OK;
}

static mx_status csv_seek(csv_state *st, int64_t part_row)
{
    MX_TRY(csv_seek_row(&st->data, st->start + part_row));
    if (st->has_labels) MX_TRY(csv_seek_row(&st->label, st->start + part_row));
    st->pos = part_row;
    return MX_OK;
}

static mx_status csv_fill(void *user, int64_t k, mx_prefetch_slot *slot, bool *produced)
{
    csv_state *st = user;
    *produced = false;
    if (k == 0) {
        st->ended = false;
        MX_TRY(csv_seek(st, st->first));
    }
    if (st->ended || st->pos >= st->n) return MX_OK;
    int64_t bs = slot->batch_size, top = 0;
    while (top < bs && st->pos < st->n) MX_TRY(csv_read_sample(st, slot, top++));
    if (top < bs) {
        st->ended = true;
        slot->pad = (int)(bs - top);
        if (st->p.round_batch) {
            /* Complete the batch with the first rows of the part. */
            MX_TRY(csv_seek(st, 0));
            while (top < bs) MX_TRY(csv_read_sample(st, slot, top++));
        } else {
            memset((float *)slot->data + top * slot->data_size, 0,
                   (size_t)((bs - top) * slot->data_size) * sizeof(float));
            memset(slot->label + top * slot->label_size, 0, (size_t)((bs - top) * slot->label_size) * sizeof(float));
            for (; top < bs; top++) slot->index[top] = UINT64_MAX;
        }
    }
    *produced = true;
    return MX_OK;
}

static void csv_free(void *state)
{
    csv_state *st = state;
    if (!st) return;
    mx_prefetch_free(st->pf); /* stops the producer first */
    csv_close(&st->data);
    csv_close(&st->label);
    mx_free(st);
}

/* The batch shape (batch, *t); MX_ERR_INVALID naming `name`. */
static mx_status batch_shape(const char *name, const mx_tuple *t, int64_t batch, bool squeeze_one, mx_shape *out,
                             int64_t *width)
{
    if (t->ndim < 1) return MX_ERROR(MX_ERR_INVALID, "csv: %s must have at least one dimension", name);
    if (t->ndim + 1 > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_INVALID, "csv: %s has %d dimensions, at most %d are supported", name, t->ndim,
                        MX_MAX_NDIM - 1);
    int64_t w = 1;
    for (int i = 0; i < t->ndim; i++) {
        w *= t->v[i];
        if (w > (int64_t)1 << 30) return MX_ERROR(MX_ERR_INVALID, "csv: %s is too large", name);
    }
    *width = w;
    if (squeeze_one && t->ndim == 1 && t->v[0] == 1) {
        *out = MX_SHAPE(batch);
        return MX_OK;
    }
    out->ndim = t->ndim + 1;
    memset(out->dims, 0, sizeof(out->dims));
    out->dims[0] = batch;
    for (int i = 0; i < t->ndim; i++) out->dims[i + 1] = t->v[i];
    return MX_OK;
}

static mx_status csv_check(const void *params, const mx_param_input *in)
{
    const csv_params *p = params;
    if (p->part_index >= p->num_parts)
        return mx_params_blame(in, "csv", "part_index", MX_ERR_INVALID, "must be less than num_parts (%lld)",
                               (long long)p->num_parts);
    if (p->dtype > 1)
        return mx_params_blame(in, "csv", "dtype", MX_ERR_UNSUPPORTED, "'%s' is not supported (batches are float32)",
                               dtype_choices[p->dtype]);
    if (!p->data_csv[0]) return mx_params_blame(in, "csv", "data_csv", MX_ERR_INVALID, "is empty");
    mx_shape shape;
    int64_t width;
    const char *names[2] = {"data_shape", "label_shape"};
    const mx_tuple *t[2] = {&p->data_shape, &p->label_shape};
    for (int i = 0; i < 2; i++)
        if (batch_shape(names[i], t[i], p->batch_size, i == 1, &shape, &width) != MX_OK) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s", mx_last_error());
            const char *body = strstr(msg, names[i]);
            body = body ? body + strlen(names[i]) + 1 : msg; /* "csv: data_shape must ..." -> "must ..." */
            return mx_params_blame(in, "csv", names[i], MX_ERR_INVALID, "%s", body);
        }
    return MX_OK;
}

static mx_status csv_shapes(const void *params, mx_shape *data, mx_shape *label)
{
    const csv_params *p = params;
    int64_t width;
    MX_TRY(batch_shape("data_shape", &p->data_shape, p->batch_size, false, data, &width));
    return batch_shape("label_shape", &p->label_shape, p->batch_size, true, label, &width);
}

static mx_status csv_setup(csv_state *st)
{
    const csv_params *p = &st->p;
    MX_TRY(csv_check(p, NULL));
    MX_TRY(batch_shape("data_shape", &p->data_shape, p->batch_size, false, &st->data_shape, &st->data.width));
    MX_TRY(batch_shape("label_shape", &p->label_shape, p->batch_size, true, &st->label_shape, &st->label.width));
    st->data.path = p->data_csv;
    st->data.what = "data";
    st->label.path = p->label_csv;
    st->label.what = "label";
    st->has_labels = p->label_csv[0] && strcmp(p->label_csv, "NULL") != 0;

    int64_t rows, label_rows;
    MX_TRY(csv_count_rows(&st->data, &rows));
    if (st->has_labels) {
        MX_TRY(csv_count_rows(&st->label, &label_rows));
        if (label_rows != rows)
            return MX_ERROR(MX_ERR_FORMAT, "csv: data file '%s' has %lld rows but label file '%s' has %lld",
                            p->data_csv, (long long)rows, p->label_csv, (long long)label_rows);
    }
    int64_t end;
    mx_io_part_range(rows, p->num_parts, p->part_index, &st->start, &end);
    st->n = end - st->start;
    if (st->n == 0)
        return MX_ERROR(MX_ERR_INVALID, "csv: '%s' has no rows%s", p->data_csv, p->num_parts > 1 ? " in this part" : "");
    if (p->round_batch && st->n < p->batch_size)
        return MX_ERROR(MX_ERR_INVALID,
                        "csv: '%s' has %lld rows%s, fewer than batch_size %lld (round_batch needs at least one "
                        "full batch)",
                        p->data_csv, (long long)st->n, p->num_parts > 1 ? " in this part" : "",
                        (long long)p->batch_size);
    return MX_OK;
}

static mx_status csv_create(mx_runtime *rt, const void *params, void **out)
{
    *out = NULL;
    csv_state *st = mx_calloc(1, sizeof(*st));
    if (!st) return MX_ERR_NOMEM;
    st->p = *(const csv_params *)params;
    mx_status s = csv_setup(st);
    if (s == MX_OK) {
        mx_prefetch_config cfg = {
            .data_shape = st->data_shape,
            .data_dtype = MX_FLOAT32,
            .label_shape = st->label_shape,
            .capacity = (int)st->p.prefetch_buffer,
            .ctx = mx_runtime_host_context(rt), /* pinned when bound for a GPU */
            .fill = csv_fill,
            .user = st,
        };
        s = mx_prefetch_create(rt, &cfg, &st->pf);
    }
    if (s == MX_OK) s = mx_prefetch_start(st->pf);
    if (s != MX_OK) {
        csv_free(st);
        return s;
    }
    *out = st;
    return MX_OK;
}

static mx_status csv_next(void *state, mx_data_batch *batch, bool *has_batch)
{
    csv_state *st = state;
    mx_status s = mx_prefetch_next(st->pf, batch, has_batch);
    if (s == MX_OK && *has_batch) st->carry = st->p.round_batch ? batch->pad : 0;
    return s;
}

static mx_status csv_reset(void *state)
{
    csv_state *st = state;
    mx_prefetch_stop(st->pf);
    /* After a wrapped last batch the next epoch starts after the rows it
     * borrowed (BatchLoader::BeforeFirst); otherwise at the top. */
    st->first = st->carry;
    st->carry = 0;
    return mx_prefetch_start(st->pf);
}

static mx_shape csv_data_shape(const void *state) { return ((const csv_state *)state)->data_shape; }
static mx_shape csv_label_shape(const void *state) { return ((const csv_state *)state)->label_shape; }
static int64_t csv_num_samples(const void *state) { return ((const csv_state *)state)->n; }

const mx_data_iter_kind mx_iter_csv = {
    .name = "csv",
    .params = csv_param_table,
    .n_params = N_CSV_PARAMS,
    .params_size = sizeof(csv_params),
    .create = csv_create,
    .next = csv_next,
    .reset = csv_reset,
    .free = csv_free,
    .data_shape = csv_data_shape,
    .label_shape = csv_label_shape,
    .num_samples = csv_num_samples,
    .check = csv_check,
    .shapes = csv_shapes,
};
