/*
 * iter_mnist.c - MXNet's MNISTIter (mxnet-formats.md section 3.4): idx3
 * images and idx1 labels, raw or gzip'd (zlib reads both), loaded into
 * memory once, handed out as float32 batches through the prefetcher.
 *
 * Semantics, as MXNet 1.9.1 unless noted:
 *   - pixels become byte / 256 (not 255), labels their byte value;
 *   - num_parts / part_index select the contiguous slice
 *     [n/num_parts*part_index, n/num_parts*(part_index+1)) of each file
 *     (mx_io_part_range: the last part ends at n, where MXNet's rounding
 *     can leave the last sample out);
 *   - flat=1 gives data (batch, rows*cols), else (batch, 1, rows, cols);
 *   - only full batches: the remainder of the part is dropped;
 *   - shuffle=1 permutes the part at load with MT19937 seeded with `seed`
 *     (Fisher-Yates, prefetch.h), and (unlike MXNet, which keeps one order)
 *     draws a new permutation from the same generator at every reset, so the
 *     sequence of epochs is fixed by the seed;
 *   - stricter than MXNet: the magics (0x00000803 / 0x00000801), the
 *     dimensions, the image and label counts and the file lengths are
 *     checked, and a part smaller than one batch is an error;
 *   - unless silent, the first next() sends one line to the log callback
 *     (set_log), as MXNet's MNISTIter prints at load: the image file, the
 *     count and the batch shape; ctx is accepted without effect (MXNet's
 *     hint of where batches go; they are made on the host);
 *   - image and label are required (MXNet defaults them to files in the
 *     working directory);
 *   - dtype: None or float32 only.
 *
 * Files are read incrementally (a gzip'd file's size is unknown until it
 * ends), so a header that claims more data than the file holds fails with
 * MX_ERR_FORMAT without a large allocation.
 */
#include "io/io.h"
#include "io/prefetch.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define MAX_IMAGE_PIXELS (1 << 24)

typedef struct mnist_params {
    char image[MX_PARAM_STRING_MAX];
    char label[MX_PARAM_STRING_MAX];
    int64_t batch_size;
    bool shuffle;
    bool flat;
    int64_t seed;
    bool silent;
    int64_t num_parts;
    int64_t part_index;
    int64_t prefetch_buffer;
    int ctx;
    int dtype;
} mnist_params;

static const char *const ctx_choices[] = {"cpu", "gpu", NULL};
static const char *const dtype_choices[] = {"None", "float32", "float64", "float16", "int32",
                                            "int64", "uint8",   "int8",    NULL};

#define P(f) offsetof(mnist_params, f)
static const mx_param_desc mnist_param_table[] = {
    /* Required, unlike MXNet's ./train-images-idx3-ubyte defaults: a config
     * that forgets them must not silently read whatever is in the cwd. */
    {"image", MX_PARAM_STRING, NULL, 1, 0, NULL, P(image), "image file: idx3-ubyte, raw or gzip'd"},
    {"label", MX_PARAM_STRING, NULL, 1, 0, NULL, P(label), "label file: idx1-ubyte, raw or gzip'd"},
    {"batch_size", MX_PARAM_INT, "128", 1, 1e9, NULL, P(batch_size), "batch size"},
    {"shuffle", MX_PARAM_BOOL, "True", 1, 0, NULL, P(shuffle), "shuffle the examples (a new order every epoch)"},
    {"flat", MX_PARAM_BOOL, "False", 1, 0, NULL, P(flat), "data (batch, rows*cols) instead of (batch, 1, rows, cols)"},
    {"seed", MX_PARAM_INT, "0", -2147483648.0, 4294967295.0, NULL, P(seed),
     "shuffle seed: MT19937 seeded with (uint32)seed"},
    {"silent", MX_PARAM_BOOL, "False", 1, 0, NULL, P(silent), "no load line in the log"},
    {"num_parts", MX_PARAM_INT, "1", 1, 1e9, NULL, P(num_parts), "partition the data into this many parts"},
    {"part_index", MX_PARAM_INT, "0", 0, 1e9, NULL, P(part_index), "the part to read"},
    {"prefetch_buffer", MX_PARAM_INT, "4", 1, 1e6, NULL, P(prefetch_buffer), "batches prefetched in background"},
    {"ctx", MX_PARAM_ENUM, "gpu", 1, 0, ctx_choices, P(ctx), "accepted; batches are produced on the CPU"},
    {"dtype", MX_PARAM_ENUM, "None", 1, 0, dtype_choices, P(dtype), "output type: None (float32) or float32"},
};
#undef P

#define N_MNIST_PARAMS ((int)(sizeof(mnist_param_table) / sizeof(mnist_param_table[0])))

/* ---------------------------------------------------------------- idx files */

/* An open idx file: header fields and where the body starts. */
typedef struct idx_file {
    const char *path;
    const char *what;   /* "image file" / "label file" */
    const char *items;  /* "images" / "labels" */
    gzFile gz;
    bool compressed;
    uint32_t count;
    uint32_t dims[2];   /* rows, cols for images */
    uint64_t item_bytes;
    uint64_t body_read; /* body bytes consumed so far */
} idx_file;

/* Reads up to n bytes; *got < n only at the end of the data. Errors:
 * MX_ERR_IO (read failure), MX_ERR_FORMAT (corrupt gzip data). A gzip
 * stream cut short reads as end of data and is reported by the caller. */
static mx_status idx_read(idx_file *f, void *buf, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f->gz, (char *)buf + *got, (unsigned)want);
        if (r > 0) {
            *got += (size_t)r;
            continue;
        }
        int errnum = Z_OK;
        const char *msg = gzerror(f->gz, &errnum);
        if (errnum == Z_ERRNO)
            return MX_ERROR(MX_ERR_IO, "mnist: %s '%s': read failed: %s", f->what, f->path, strerror(errno));
        if (errnum != Z_OK && errnum != Z_BUF_ERROR) {
            /* zlib's message reads "PATH: what"; the path is given already. */
            size_t plen = strlen(f->path);
            if (msg && !strncmp(msg, f->path, plen) && !strncmp(msg + plen, ": ", 2)) msg += plen + 2;
            return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s': corrupt gzip data: %s", f->what, f->path,
                            msg && *msg ? msg : "unknown zlib error");
        }
        break; /* end of data */
    }
    return MX_OK;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static const char *data_name(const idx_file *f) { return f->compressed ? "decompressed data" : "file"; }

static void idx_close(idx_file *f)
{
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

/* Opens `path` and reads its header: magic `magic` with ndim = magic & 0xff
 * dimension words. Errors name the file: MX_ERR_IO (cannot open),
 * MX_ERR_FORMAT (short header, wrong magic, absurd dimensions, a raw file
 * whose length disagrees with the header). */
static mx_status idx_open_header(idx_file *f, const char *path, const char *what, const char *items, uint32_t magic);

/* Opens and checks an idx file; on failure the file is closed again (its
 * gzip handle holds an fd and a 256 KiB buffer). */
static mx_status idx_open(idx_file *f, const char *path, const char *what, const char *items, uint32_t magic)
{
    mx_status s = idx_open_header(f, path, what, items, magic);
    if (s != MX_OK) idx_close(f);
    return s;
}

static mx_status idx_open_header(idx_file *f, const char *path, const char *what, const char *items, uint32_t magic)
{
    memset(f, 0, sizeof(*f));
    f->path = path;
    f->what = what;
    f->items = items;
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return MX_ERROR(MX_ERR_IO, "mnist: cannot open %s '%s': %s", what, path,
                        errno ? strerror(errno) : "out of memory");
    if (gzbuffer(f->gz, 1u << 18) != 0) return MX_ERROR(MX_ERR_IO, "mnist: %s '%s': gzbuffer failed", what, path);
    f->compressed = !gzdirect(f->gz);

    int ndim = (int)(magic & 0xffu);
    size_t header = 4 + 4 * (size_t)ndim;
    uint8_t hdr[16];
    size_t got;
    MX_TRY(idx_read(f, hdr, header, &got));
    if (got < header) {
        if (got == 0) return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' is empty", what, path);
        return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' is truncated: the idx header needs %zu bytes, the %s has %zu",
                        what, path, header, data_name(f), got);
    }
    uint32_t m = be32(hdr);
    if (m != magic) {
        const char *hint = "";
        if (m == IDX_IMAGES_MAGIC) hint = " (an idx3 image file: are image and label swapped?)";
        else if (m == IDX_LABELS_MAGIC) hint = " (an idx1 label file: are image and label swapped?)";
        else if ((m >> 16) != 0) hint = " (not an idx file)";
        return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' has magic 0x%08x, expected 0x%08x%s", what, path, m, magic,
                        hint);
    }
    f->count = be32(hdr + 4);
    f->item_bytes = 1;
    for (int d = 0; d + 1 < ndim; d++) {
        f->dims[d] = be32(hdr + 8 + 4 * d);
        if (f->dims[d] == 0 || f->dims[d] > MAX_IMAGE_PIXELS)
            return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' has a bad dimension %u in its header", what, path,
                            f->dims[d]);
        f->item_bytes *= f->dims[d];
    }
    if (f->item_bytes > MAX_IMAGE_PIXELS)
        return MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' declares %ux%u images, more than %d pixels each", what, path,
                        f->dims[0], f->dims[1], MAX_IMAGE_PIXELS);

    if (!f->compressed) {
        /* A raw file's length is known: check it before reading anything. */
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            uint64_t want = header + (uint64_t)f->count * f->item_bytes;
            uint64_t have = (uint64_t)st.st_size;
            if (have < want)
                return MX_ERROR(MX_ERR_FORMAT,
                                "mnist: %s '%s' is truncated: its header declares %u %s (%llu bytes) but the file "
                                "is %llu bytes, %llu short",
                                what, path, f->count, items, (unsigned long long)want, (unsigned long long)have,
                                (unsigned long long)(want - have));
            if (have > want)
                return MX_ERROR(MX_ERR_FORMAT,
                                "mnist: %s '%s' has %llu bytes after the %u %s its header declares", what, path,
                                (unsigned long long)(have - want), f->count, items);
        }
    }
    return MX_OK;
}

static mx_status idx_truncated(const idx_file *f)
{
    uint64_t want = (uint64_t)f->count * f->item_bytes;
    uint64_t full = f->body_read / f->item_bytes;
    return MX_ERROR(MX_ERR_FORMAT,
                    "mnist: %s '%s' is truncated: its header declares %u %s but the %s ends after %llu of them "
                    "(%llu of %llu bytes after the header)",
                    f->what, f->path, f->count, f->items, data_name(f), (unsigned long long)full,
                    (unsigned long long)f->body_read, (unsigned long long)want);
}

/* Skips n body bytes. */
static mx_status idx_skip(idx_file *f, uint64_t n, uint8_t *scratch, size_t scratch_size)
{
    while (n > 0) {
        size_t want = n < scratch_size ? (size_t)n : scratch_size, got;
        MX_TRY(idx_read(f, scratch, want, &got));
        f->body_read += got;
        if (got < want) return idx_truncated(f);
        n -= got;
    }
    return MX_OK;
}

/* Reads items [start, end) of the body into a new buffer (*out), checking
 * that the whole body is present and nothing follows it. The buffer grows
 * as data arrives, so a lying header cannot make it larger than the data. */
static mx_status idx_load_range(idx_file *f, int64_t start, int64_t end, uint8_t **out)
{
    *out = NULL;
    const size_t chunk = 1u << 20;
    uint8_t *scratch = mx_malloc(chunk);
    if (!scratch) return MX_ERR_NOMEM;
    mx_status s = idx_skip(f, (uint64_t)start * f->item_bytes, scratch, chunk);

    uint64_t need = (uint64_t)(end - start) * f->item_bytes, have = 0, cap = 0;
    uint8_t *buf = NULL;
    while (s == MX_OK && have < need) {
        if (have == cap) {
            uint64_t ncap = cap ? cap * 2 : chunk;
            if (ncap > need) ncap = need;
            uint8_t *nb = mx_realloc(buf, (size_t)ncap);
            if (!nb) {
                s = MX_ERR_NOMEM;
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t want = (size_t)(cap - have), got;
        if (want > chunk) want = chunk;
        s = idx_read(f, buf + have, want, &got);
        if (s != MX_OK) break;
        have += got;
        f->body_read += got;
        if (got < want) s = idx_truncated(f);
    }
    if (s == MX_OK) s = idx_skip(f, (uint64_t)(f->count - end) * f->item_bytes, scratch, chunk);
    if (s == MX_OK) {
        /* Nothing may follow the declared items. */
        uint64_t extra = 0;
        size_t got;
        do {
            s = idx_read(f, scratch, chunk, &got);
            extra += got;
        } while (s == MX_OK && got == chunk);
        if (s == MX_OK && extra > 0)
            s = MX_ERROR(MX_ERR_FORMAT, "mnist: %s '%s' has %llu bytes of %s after the %u %s its header declares",
                         f->what, f->path, (unsigned long long)extra, f->compressed ? "decompressed data" : "data",
                         f->count, f->items);
    }
    mx_free(scratch);
    if (s != MX_OK) {
        mx_free(buf);
        return s;
    }
    *out = buf;
    return MX_OK;
}

/* ---------------------------------------------------------------- iterator */

typedef struct mnist_state {
    mnist_params p;
    int64_t start;       /* first example of this part in the files */
    int64_t n;           /* examples in this part */
    int64_t pixels;      /* rows * cols */
    int64_t n_batches;   /* full batches per epoch */
    uint8_t *images;     /* (n, rows, cols) */
    uint8_t *labels;     /* (n) */
    uint32_t *order;     /* the epoch's order of the n examples */
    mx_mt19937 rng;
    mx_shape data_shape, label_shape;
    mx_prefetch *pf;
    mx_io_log_fn log_fn;  /* where the load line goes (set_log) */
    void *log_user;
    bool announced;       /* the load line was sent */
} mnist_state;

static mx_status mnist_fill(void *user, int64_t k, mx_prefetch_slot *slot, bool *produced)
{
    mnist_state *st = user;
    *produced = false;
    if (k >= st->n_batches) return MX_OK;
    int64_t bs = st->p.batch_size, px = st->pixels;
    float *data = slot->data;
    for (int64_t i = 0; i < bs; i++) {
        uint32_t id = st->order[k * bs + i];
        const uint8_t *src = st->images + (size_t)id * (size_t)px;
        float *dst = data + i * px;
        for (int64_t j = 0; j < px; j++) dst[j] = (float)src[j] * (1.0f / 256.0f);
        slot->label[i] = (float)st->labels[id];
        slot->index[i] = (uint64_t)(st->start + id);
    }
    *produced = true;
    return MX_OK;
}

static void mnist_free(void *state)
{
    mnist_state *st = state;
    if (!st) return;
    mx_prefetch_free(st->pf);
    mx_free(st->images);
    mx_free(st->labels);
    mx_free(st->order);
    mx_free(st);
}

static mx_status mnist_load(mnist_state *st)
{
    const mnist_params *p = &st->p;
    idx_file img, lab;
    mx_status s = idx_open(&img, p->image, "image file", "images", IDX_IMAGES_MAGIC);
    if (s == MX_OK) {
        s = idx_open(&lab, p->label, "label file", "labels", IDX_LABELS_MAGIC);
        if (s != MX_OK) {
            idx_close(&img);
            idx_close(&lab); /* idx_open leaves the file open on a bad header */
            return s;
        }
    } else {
        idx_close(&img);
        return s;
    }
    if (img.count != lab.count)
        s = MX_ERROR(MX_ERR_FORMAT, "mnist: image file '%s' holds %u images but label file '%s' holds %u labels",
                     p->image, img.count, p->label, lab.count);
    int64_t start = 0, end = 0;
    if (s == MX_OK) {
        mx_io_part_range(img.count, p->num_parts, p->part_index, &start, &end);
        s = idx_load_range(&lab, start, end, &st->labels);
    }
    if (s == MX_OK) s = idx_load_range(&img, start, end, &st->images);
    idx_close(&img);
    idx_close(&lab);
    if (s != MX_OK) return s;
    st->start = start;
    st->n = end - start;
    st->pixels = (int64_t)img.item_bytes;
    if (p->flat) {
        st->data_shape = MX_SHAPE(p->batch_size, st->pixels);
    } else {
        st->data_shape = MX_SHAPE(p->batch_size, 1, (int64_t)img.dims[0], (int64_t)img.dims[1]);
    }
    st->label_shape = MX_SHAPE(p->batch_size);
    return MX_OK;
}

static mx_status mnist_check(const void *params, const mx_param_input *in)
{
    const mnist_params *p = params;
    if (p->part_index >= p->num_parts)
        return mx_params_blame(in, "mnist", "part_index", MX_ERR_INVALID, "must be less than num_parts (%lld)",
                               (long long)p->num_parts);
    if (p->dtype > 1)
        return mx_params_blame(in, "mnist", "dtype", MX_ERR_UNSUPPORTED, "'%s' is not supported (batches are float32)",
                               dtype_choices[p->dtype]);
    return MX_OK;
}

/* The image file's header gives rows and columns. */
static mx_status mnist_shapes(const void *params, mx_shape *data, mx_shape *label)
{
    const mnist_params *p = params;
    idx_file img;
    mx_status s = idx_open(&img, p->image, "image file", "images", IDX_IMAGES_MAGIC);
    idx_close(&img);
    MX_TRY(s);
    *data = p->flat ? MX_SHAPE(p->batch_size, (int64_t)img.item_bytes)
                    : MX_SHAPE(p->batch_size, 1, (int64_t)img.dims[0], (int64_t)img.dims[1]);
    *label = MX_SHAPE(p->batch_size);
    return MX_OK;
}

/* Pixels are bytes / 256, as MXNet's MNISTIter. */
static void mnist_image_norm(const void *params, mx_data_image_norm *out)
{
    (void)params;
    *out = (mx_data_image_norm){.mean = {0, 0, 0, 0}, .std = {1, 1, 1, 1}, .scale = 1.0f / 256.0f, .resize = -1,
                                .mean_img = ""};
}

static mx_status mnist_create(mx_runtime *rt, const void *params, void **out)
{
    *out = NULL;
    const mnist_params *p = params;
    MX_TRY(mnist_check(params, NULL));
    mnist_state *st = mx_calloc(1, sizeof(*st));
    if (!st) return MX_ERR_NOMEM;
    st->p = *p;
    mx_status s = mnist_load(st);
    if (s == MX_OK && st->n < p->batch_size)
        s = MX_ERROR(MX_ERR_INVALID,
                     "mnist: part %lld of %lld of '%s' holds %lld images, fewer than batch_size %lld: no batch "
                     "would be produced",
                     (long long)p->part_index, (long long)p->num_parts, p->image, (long long)st->n,
                     (long long)p->batch_size);
    if (s == MX_OK) {
        st->n_batches = st->n / p->batch_size;
        st->order = mx_malloc((size_t)st->n * sizeof(uint32_t));
        if (!st->order) s = MX_ERR_NOMEM;
    }
    if (s == MX_OK) {
        for (int64_t i = 0; i < st->n; i++) st->order[i] = (uint32_t)i;
        mx_mt19937_seed(&st->rng, (uint32_t)p->seed);
        if (p->shuffle) mx_io_shuffle_u32(st->order, (size_t)st->n, &st->rng);
        mx_prefetch_config cfg = {
            .data_shape = st->data_shape,
            .data_dtype = MX_FLOAT32,
            .label_shape = st->label_shape,
            .capacity = (int)p->prefetch_buffer,
            .ctx = mx_runtime_host_context(rt), /* pinned when bound for a GPU */
            .fill = mnist_fill,
            .user = st,
        };
        s = mx_prefetch_create(rt, &cfg, &st->pf);
    }
    if (s == MX_OK) s = mx_prefetch_start(st->pf);
    if (s != MX_OK) {
        mnist_free(st);
        return s;
    }
    *out = st;
    return MX_OK;
}

/* Unless silent, one line as MXNet's MNISTIter prints at load. */
static void announce(mnist_state *st)
{
    if (st->announced || !st->log_fn || st->p.silent) return;
    st->announced = true;
    char line[2 * MX_PARAM_STRING_MAX + 256], shape[128];
    snprintf(line, sizeof(line), "mnist: '%s': %lld images of batch shape %s (part %lld of %lld), shuffle=%d",
             st->p.image, (long long)st->n, mx_shape_str(&st->data_shape, shape, sizeof(shape)),
             (long long)st->p.part_index, (long long)st->p.num_parts, (int)st->p.shuffle);
    st->log_fn(st->log_user, line);
}

static void mnist_set_log(void *state, mx_io_log_fn fn, void *user)
{
    mnist_state *st = state;
    st->log_fn = fn;
    st->log_user = user;
}

static mx_status mnist_next(void *state, mx_data_batch *batch, bool *has_batch)
{
    mnist_state *st = state;
    announce(st);
    return mx_prefetch_next(st->pf, batch, has_batch);
}

static mx_status mnist_reset(void *state)
{
    mnist_state *st = state;
    mx_prefetch_stop(st->pf);
    if (st->p.shuffle) mx_io_shuffle_u32(st->order, (size_t)st->n, &st->rng);
    return mx_prefetch_start(st->pf);
}

static mx_shape mnist_data_shape(const void *state) { return ((const mnist_state *)state)->data_shape; }
static mx_shape mnist_label_shape(const void *state) { return ((const mnist_state *)state)->label_shape; }
static int64_t mnist_num_samples(const void *state) { return ((const mnist_state *)state)->n; }

const mx_data_iter_kind mx_iter_mnist = {
    .name = "mnist",
    .params = mnist_param_table,
    .n_params = N_MNIST_PARAMS,
    .params_size = sizeof(mnist_params),
    .create = mnist_create,
    .next = mnist_next,
    .reset = mnist_reset,
    .free = mnist_free,
    .data_shape = mnist_data_shape,
    .label_shape = mnist_label_shape,
    .num_samples = mnist_num_samples,
    .set_log = mnist_set_log,
    .check = mnist_check,
    .shapes = mnist_shapes,
    .image_norm = mnist_image_norm,
};
