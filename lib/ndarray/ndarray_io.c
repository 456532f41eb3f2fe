/*
 * ndarray_io.c - MXNet NDArray list files (.params, mx.nd.save), spec
 * section 5 of mxnet-formats.md.
 *
 * Writing always emits V2 dense arrays with context cpu(0). Reading accepts
 * V0, V1, V2 and V3 dense arrays and validates the whole file (structure,
 * sizes, names, trailing bytes) before any array is allocated, so a
 * malformed or truncated file costs no allocation beyond a small table of
 * array descriptors that grows with the arrays actually present.
 *
 * Representation choices (the header's mx_shape cannot express them all):
 *  - An empty / "none" entry (ndim <= 0 in V0-V2, ndim -1 in V3) has no
 *    dtype, context or data. It loads as a float32 array of shape (0,), so
 *    list entries are never NULL; saving that array writes ndim 1, dim 0 and
 *    no data, which MXNet 1.9.1's mx.nd.load reads as an empty (0,) array.
 *  - A 0-d array (ndim 0, one element) cannot be stored in V2, where ndim 0
 *    means empty; it is saved as shape (1,), which is how MXNet's legacy
 *    mode represents scalars. V3 scalars load as 0-d arrays.
 */
#include "ndarray/ndarray.h"
#include "device/device.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Array payloads are copied as raw native bytes and the format is
 * little-endian; a big-endian port would need byte swapping here. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ndarray_io.c assumes a little-endian host (MXNet files are little-endian)"
#endif

#define LIST_MAGIC UINT64_C(0x112)
#define V1_MAGIC UINT32_C(0xF993FAC8)
#define V2_MAGIC UINT32_C(0xF993FAC9)
#define V3_MAGIC UINT32_C(0xF993FACA)

#define STYPE_UNDEFINED (-1)
#define STYPE_DENSE 0
#define STYPE_ROW_SPARSE 1
#define STYPE_CSR 2

/* Device arrays are saved through a host buffer of at most this size. */
#define SAVE_PIECE_BYTES ((size_t)16 << 20)

/* ---------------------------------------------------------------- writing */

/* Where encoded bytes go: a preallocated buffer of exactly the right size,
 * or a FILE. Data of each array is staged in `scratch` for files. */
typedef struct sink {
    FILE *fp;
    const char *path;    /* for error messages (file sinks) */
    uint8_t *buf;
    size_t len;          /* bytes written so far */
    size_t cap;          /* buffer size (buffer sinks) */
    uint8_t *scratch;
    size_t scratch_cap;
} sink;

static mx_status sink_write(sink *s, const void *p, size_t n)
{
    if (n == 0) return MX_OK;
    if (s->fp) {
        if (fwrite(p, 1, n, s->fp) != n)
            return MX_ERROR(MX_ERR_IO, "%s: write failed: %s", s->path, strerror(errno));
    } else {
        /* The size pass and the write pass must agree; anything else is a
         * bug in this file, reported rather than overflowing. */
        if (n > s->cap - s->len)
            return MX_ERROR(MX_ERR_RUNTIME, "ndarray save: encoded size exceeds the %zu bytes planned",
                            s->cap);
        memcpy(s->buf + s->len, p, n);
    }
    s->len += n;
    return MX_OK;
}

static mx_status sink_u32(sink *s, uint32_t v) { return sink_write(s, &v, sizeof(v)); }
static mx_status sink_i32(sink *s, int32_t v) { return sink_write(s, &v, sizeof(v)); }
static mx_status sink_u64(sink *s, uint64_t v) { return sink_write(s, &v, sizeof(v)); }
static mx_status sink_i64(sink *s, int64_t v) { return sink_write(s, &v, sizeof(v)); }

/* The shape written to the file: 0-d arrays become (1,) (see top). */
static mx_shape file_shape(const mx_ndarray *a)
{
    const mx_shape *shape = mx_ndarray_shape(a);
    if (shape->ndim == 0) return MX_SHAPE(1);
    return *shape;
}

/* Checks the arguments and computes the exact encoded size. */
static mx_status plan_save(mx_ndarray *const *arrays, const char *const *names, int count,
                           size_t *out_bytes)
{
    if (count < 0) return MX_ERROR(MX_ERR_INVALID, "ndarray save: negative count %d", count);
    if (count > 0 && !arrays) return MX_ERROR(MX_ERR_INVALID, "ndarray save: arrays is NULL");
    size_t total = 3 * sizeof(uint64_t) + sizeof(uint64_t); /* header + name count */
    for (int i = 0; i < count; i++) {
        if (!arrays[i]) return MX_ERROR(MX_ERR_INVALID, "ndarray save: array %d is NULL", i);
        if (names && !names[i]) return MX_ERROR(MX_ERR_INVALID, "ndarray save: name %d is NULL", i);
        mx_shape shape = file_shape(arrays[i]);
        size_t head = 2 * sizeof(uint32_t) + sizeof(int32_t) +
                      (size_t)shape.ndim * sizeof(int64_t) + 3 * sizeof(int32_t);
        size_t item = 0;
        if (!mx_size_add(head, mx_ndarray_nbytes(arrays[i]), &item) ||
            !mx_size_add(total, item, &total))
            return MX_ERROR(MX_ERR_INVALID, "ndarray save: total size overflows");
        if (names && (!mx_size_add(total, sizeof(uint64_t), &total) ||
                      !mx_size_add(total, strlen(names[i]), &total)))
            return MX_ERROR(MX_ERR_INVALID, "ndarray save: total size overflows");
    }
    *out_bytes = total;
    return MX_OK;
}

/* One array in V2 layout, its data read back through mx_ndarray_to_host
 * (which waits for pending writes and returns their error). */
static mx_status write_array(sink *s, mx_ndarray *a, int index)
{
    mx_shape shape = file_shape(a);
    MX_TRY(sink_u32(s, V2_MAGIC));
    MX_TRY(sink_i32(s, STYPE_DENSE));
    MX_TRY(sink_i32(s, shape.ndim));
    for (int d = 0; d < shape.ndim; d++) MX_TRY(sink_i64(s, shape.dims[d]));
    MX_TRY(sink_i32(s, MX_DEV_CPU)); /* files record cpu(0) whatever the source */
    MX_TRY(sink_i32(s, 0));
    MX_TRY(sink_i32(s, (int32_t)mx_ndarray_dtype(a)));

    size_t nbytes = mx_ndarray_nbytes(a);
    if (nbytes == 0) return MX_OK;
    void *dst;
    if (s->fp) {
        /* Straight from the array (host memory) or through a bounded
         * buffer (device memory), never a whole copy: saving VGG-16's
         * fc6 weight would otherwise take another 392 MiB. */
        mx_status st = mx_ndarray_wait_to_read(a);
        if (st != MX_OK) return mx_error_prefix(st, "ndarray save: reading array %d", index);
        const uint8_t *src = mx_ndarray_data(a);
        mx_context ctx = mx_ndarray_context(a);
        if (ctx.dev_type == MX_DEV_CPU) return sink_write(s, src, nbytes);
        size_t piece = nbytes < SAVE_PIECE_BYTES ? nbytes : SAVE_PIECE_BYTES;
        if (piece > s->scratch_cap) {
            uint8_t *grown = mx_realloc(s->scratch, piece);
            if (!grown) return MX_ERR_NOMEM;
            s->scratch = grown;
            s->scratch_cap = piece;
        }
        for (size_t at = 0; at < nbytes; at += piece) {
            size_t n = nbytes - at < piece ? nbytes - at : piece;
            MX_TRY(mx_device_copy(s->scratch, mx_cpu(), src + at, ctx, n, NULL));
            MX_TRY(sink_write(s, s->scratch, n));
        }
        return MX_OK;
    } else {
        if (nbytes > s->cap - s->len)
            return MX_ERROR(MX_ERR_RUNTIME, "ndarray save: encoded size exceeds the %zu bytes planned",
                            s->cap);
        dst = s->buf + s->len;
    }
    mx_status st = mx_ndarray_to_host(a, dst, nbytes);
    if (st != MX_OK) return mx_error_prefix(st, "ndarray save: reading array %d", index);
    s->len += nbytes;
    return MX_OK;
}

static mx_status write_list(sink *s, mx_ndarray *const *arrays, const char *const *names,
                            int count)
{
    MX_TRY(sink_u64(s, LIST_MAGIC));
    MX_TRY(sink_u64(s, 0));
    MX_TRY(sink_u64(s, (uint64_t)count));
    for (int i = 0; i < count; i++) MX_TRY(write_array(s, arrays[i], i));
    MX_TRY(sink_u64(s, names ? (uint64_t)count : 0));
    for (int i = 0; names && i < count; i++) {
        size_t n = strlen(names[i]);
        MX_TRY(sink_u64(s, (uint64_t)n));
        MX_TRY(sink_write(s, names[i], n));
    }
    return MX_OK;
}

mx_status mx_ndarray_save_buffer(mx_ndarray *const *arrays, const char *const *names,
                                 int count, void **out, size_t *out_bytes)
{
    if (!out || !out_bytes)
        return MX_ERROR(MX_ERR_INVALID, "ndarray save: NULL output pointer");
    *out = NULL;
    *out_bytes = 0;
    size_t total = 0;
    MX_TRY(plan_save(arrays, names, count, &total));
    sink s = {.cap = total};
    s.buf = mx_malloc(total);
    if (!s.buf) return MX_ERR_NOMEM;
    mx_status st = write_list(&s, arrays, names, count);
    if (st == MX_OK && s.len != total)
        st = MX_ERROR(MX_ERR_RUNTIME, "ndarray save: wrote %zu bytes, planned %zu", s.len, total);
    if (st != MX_OK) {
        mx_free(s.buf);
        return st;
    }
    *out = s.buf;
    *out_bytes = total;
    return MX_OK;
}

mx_status mx_ndarray_save(const char *path, mx_ndarray *const *arrays,
                          const char *const *names, int count)
{
    if (!path) return MX_ERROR(MX_ERR_INVALID, "ndarray save: path is NULL");
    size_t total = 0;
    MX_TRY(plan_save(arrays, names, count, &total));

    size_t plen = strlen(path);
    char *tmp = mx_malloc(plen + sizeof(".tmp"));
    if (!tmp) return MX_ERR_NOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", sizeof(".tmp"));

    sink s = {.path = tmp};
    s.fp = fopen(tmp, "wb");
    if (!s.fp) {
        mx_status st = MX_ERROR(MX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        mx_free(tmp);
        return st;
    }
    mx_status st = write_list(&s, arrays, names, count);
    mx_free(s.scratch);
    /* Flush and sync before the rename so that a crash never leaves a
     * truncated file under the final name. */
    if (st == MX_OK && fflush(s.fp) != 0)
        st = MX_ERROR(MX_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st == MX_OK && fsync(fileno(s.fp)) != 0)
        st = MX_ERROR(MX_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (fclose(s.fp) != 0 && st == MX_OK)
        st = MX_ERROR(MX_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (st == MX_OK && rename(tmp, path) != 0)
        st = MX_ERROR(MX_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    if (st != MX_OK) {
        /* Best effort: the original failure is what the caller needs. */
        (void)unlink(tmp);
        mx_free(tmp);
        return mx_error_prefix(st, "saving %s", path);
    }
    mx_free(tmp);
    return MX_OK;
}

/* ---------------------------------------------------------------- reading */

typedef struct reader {
    const uint8_t *data;
    size_t len;
    size_t pos;
} reader;

/* What one array entry holds once validated; data points into the input. */
typedef struct entry {
    mx_shape shape;
    mx_dtype dtype;
    const uint8_t *data;
    size_t nbytes;
} entry;

/* Takes n bytes or reports truncation naming the field (`what`), the array
 * (index >= 0) and the byte offset. */
static mx_status take(reader *r, size_t n, const char *what, long index, const uint8_t **out)
{
    size_t left = r->len - r->pos;
    if (n > left) {
        if (index >= 0)
            return MX_ERROR(MX_ERR_FORMAT,
                            "truncated file: %s of array %ld at byte offset %zu needs %zu bytes, %zu left",
                            what, index, r->pos, n, left);
        return MX_ERROR(MX_ERR_FORMAT,
                        "truncated file: %s at byte offset %zu needs %zu bytes, %zu left", what,
                        r->pos, n, left);
    }
    *out = r->data + r->pos;
    r->pos += n;
    return MX_OK;
}

static mx_status take_u32(reader *r, const char *what, long index, uint32_t *v)
{
    const uint8_t *p = NULL;
    MX_TRY(take(r, sizeof(*v), what, index, &p));
    memcpy(v, p, sizeof(*v));
    return MX_OK;
}

static mx_status take_i32(reader *r, const char *what, long index, int32_t *v)
{
    const uint8_t *p = NULL;
    MX_TRY(take(r, sizeof(*v), what, index, &p));
    memcpy(v, p, sizeof(*v));
    return MX_OK;
}

static mx_status take_u64(reader *r, const char *what, long index, uint64_t *v)
{
    const uint8_t *p = NULL;
    MX_TRY(take(r, sizeof(*v), what, index, &p));
    memcpy(v, p, sizeof(*v));
    return MX_OK;
}

/* Reads ndim dims (u32 for V0, i64 otherwise) into shape, rejecting
 * negative dims. */
static mx_status read_dims(reader *r, int ndim, bool dims32, long index, mx_shape *shape)
{
    size_t at = r->pos;
    int64_t dims[MX_MAX_NDIM];
    for (int d = 0; d < ndim; d++) {
        if (dims32) {
            uint32_t v;
            MX_TRY(take_u32(r, "shape", index, &v));
            dims[d] = v;
        } else {
            const uint8_t *p = NULL;
            MX_TRY(take(r, sizeof(int64_t), "shape", index, &p));
            memcpy(&dims[d], p, sizeof(int64_t));
            if (dims[d] < 0)
                return MX_ERROR(MX_ERR_FORMAT, "array %ld: negative dimension %lld at byte offset %zu",
                                index, (long long)dims[d], at + (size_t)d * sizeof(int64_t));
        }
    }
    *shape = mx_shape_make(ndim, dims);
    return MX_OK;
}

/* Empty / none entry (see top of file). */
static void set_empty(entry *e)
{
    e->shape = MX_SHAPE(0);
    e->dtype = MX_FLOAT32;
    e->data = NULL;
    e->nbytes = 0;
}

/* Parses one array in any version, leaving r after it. */
static mx_status parse_array(reader *r, long index, entry *e)
{
    size_t start = r->pos;
    uint32_t magic;
    MX_TRY(take_u32(r, "magic", index, &magic));

    int version;
    int32_t ndim;
    if (magic == V1_MAGIC) {
        version = 1;
    } else if (magic == V2_MAGIC) {
        version = 2;
    } else if (magic == V3_MAGIC) {
        version = 3;
    } else {
        version = 0; /* no magic: the word was ndim (u32) */
    }

    if (version >= 2) {
        size_t at = r->pos;
        int32_t stype;
        MX_TRY(take_i32(r, "storage type", index, &stype));
        if (stype == STYPE_ROW_SPARSE || stype == STYPE_CSR)
            return MX_ERROR(MX_ERR_FORMAT,
                            "array %ld at byte offset %zu: sparse arrays are not supported "
                            "(storage type %d)", index, start, (int)stype);
        if (stype != STYPE_DENSE && stype != STYPE_UNDEFINED)
            return MX_ERROR(MX_ERR_FORMAT, "array %ld: unknown storage type %d at byte offset %zu",
                            index, (int)stype, at);
        size_t ndim_at = r->pos;
        MX_TRY(take_i32(r, "ndim", index, &ndim));
        if (version == 3 && ndim < -1)
            return MX_ERROR(MX_ERR_FORMAT, "array %ld: invalid ndim %d at byte offset %zu", index,
                            (int)ndim, ndim_at);
        /* Only none arrays (stop after ndim) carry the undefined type. */
        bool none = version == 3 ? ndim == -1 : ndim <= 0;
        if (stype == STYPE_UNDEFINED && !none)
            return MX_ERROR(MX_ERR_FORMAT,
                            "array %ld: undefined storage type on a non-empty array at byte offset %zu",
                            index, at);
    } else if (version == 1) {
        MX_TRY(take_i32(r, "ndim", index, &ndim));
    } else {
        if (magic > MX_MAX_NDIM)
            return MX_ERROR(MX_ERR_FORMAT,
                            "array %ld at byte offset %zu: unknown array magic 0x%08x (read as a V0 "
                            "ndim it exceeds the maximum %d)", index, start, (unsigned)magic,
                            MX_MAX_NDIM);
        ndim = (int32_t)magic;
    }

    /* V3 keeps ndim 0 for scalars; everywhere else ndim <= 0 is empty. */
    bool empty = version == 3 ? ndim == -1 : ndim <= 0;
    if (empty) {
        set_empty(e);
        return MX_OK;
    }
    if (ndim > MX_MAX_NDIM)
        return MX_ERROR(MX_ERR_FORMAT, "array %ld: ndim %d exceeds the maximum %d at byte offset %zu",
                        index, (int)ndim, MX_MAX_NDIM, start);
    MX_TRY(read_dims(r, (int)ndim, version == 0, index, &e->shape));

    int32_t dev_type, dev_id, flag;
    MX_TRY(take_i32(r, "device type", index, &dev_type));
    MX_TRY(take_i32(r, "device id", index, &dev_id));
    size_t flag_at = r->pos;
    MX_TRY(take_i32(r, "dtype flag", index, &flag));
    /* The saved context is ignored: arrays always load onto the CPU. */
    (void)dev_type;
    (void)dev_id;
    if (!mx_dtype_valid(flag))
        return MX_ERROR(MX_ERR_FORMAT, "array %ld: unsupported dtype flag %d at byte offset %zu",
                        index, (int)flag, flag_at);
    e->dtype = (mx_dtype)flag;

    /* Size checked against the bytes present before anything is allocated. */
    size_t nbytes = mx_dtype_size(e->dtype);
    for (int d = 0; d < e->shape.ndim; d++) {
        if ((uint64_t)e->shape.dims[d] > SIZE_MAX ||
            !mx_size_mul(nbytes, (size_t)e->shape.dims[d], &nbytes))
            return MX_ERROR(MX_ERR_FORMAT, "array %ld: data size overflows at byte offset %zu",
                            index, r->pos);
    }
    MX_TRY(take(r, nbytes, "data", index, &e->data));
    e->nbytes = nbytes;
    return MX_OK;
}

static void free_built(mx_ndarray_list *list)
{
    for (int i = 0; i < list->count; i++) {
        if (list->arrays) mx_ndarray_free(list->arrays[i]);
        if (list->names) mx_free(list->names[i]);
    }
    mx_free(list->arrays);
    mx_free(list->names);
    memset(list, 0, sizeof(*list));
}

mx_status mx_ndarray_load_buffer(mx_runtime *rt, const void *data, size_t bytes,
                                 mx_ndarray_list *out)
{
    if (!out) return MX_ERROR(MX_ERR_INVALID, "ndarray load: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!rt) return MX_ERROR(MX_ERR_INVALID, "ndarray load: runtime is NULL");
    if (!data && bytes > 0) return MX_ERROR(MX_ERR_INVALID, "ndarray load: data is NULL");

    reader r = {.data = data, .len = bytes};
    uint64_t magic, reserved, count;
    MX_TRY(take_u64(&r, "list magic", -1, &magic));
    if (magic != LIST_MAGIC)
        return MX_ERROR(MX_ERR_FORMAT,
                        "not an NDArray list file: magic 0x%llx at byte offset 0 (expected 0x112)",
                        (unsigned long long)magic);
    /* MXNet writes 0 here and never checks it; neither do we. */
    MX_TRY(take_u64(&r, "reserved field", -1, &reserved));
    size_t count_at = r.pos;
    MX_TRY(take_u64(&r, "array count", -1, &count));
    /* Every array takes at least 4 bytes, which bounds the count by the
     * input size before any table is sized from it. */
    if (count > INT_MAX || count > (r.len - r.pos) / sizeof(uint32_t))
        return MX_ERROR(MX_ERR_FORMAT,
                        "array count %llu at byte offset %zu is impossible for %zu remaining bytes "
                        "(truncated or corrupt file)",
                        (unsigned long long)count, count_at, r.len - r.pos);
    int n = (int)count;

    mx_status st = MX_OK;
    entry *entries = NULL;
    const uint8_t **name_ptr = NULL;
    size_t *name_len = NULL;
    int cap = 0;
    /* Grow the descriptor table with the arrays actually parsed. */
    for (int i = 0; i < n; i++) {
        if (i == cap) {
            int grown_cap = cap ? (cap > n / 2 ? n : cap * 2) : (n < 16 ? n : 16);
            entry *grown = mx_realloc(entries, (size_t)grown_cap * sizeof(entry));
            if (!grown) {
                st = MX_ERR_NOMEM;
                goto done;
            }
            entries = grown;
            cap = grown_cap;
        }
        st = parse_array(&r, i, &entries[i]);
        if (st != MX_OK) goto done;
    }

    uint64_t names;
    size_t names_at = r.pos;
    st = take_u64(&r, "name count", -1, &names);
    if (st != MX_OK) goto done;
    if (names != 0 && names != count) {
        st = MX_ERROR(MX_ERR_FORMAT, "name count %llu at byte offset %zu must be 0 or %d",
                      (unsigned long long)names, names_at, n);
        goto done;
    }
    if (names) {
        name_ptr = mx_calloc((size_t)n, sizeof(*name_ptr));
        name_len = mx_calloc((size_t)n, sizeof(*name_len));
        if (!name_ptr || !name_len) {
            st = MX_ERR_NOMEM;
            goto done;
        }
        for (int i = 0; i < n; i++) {
            uint64_t len;
            size_t len_at = r.pos;
            st = take_u64(&r, "name length", i, &len);
            if (st != MX_OK) goto done;
            if (len > r.len - r.pos) {
                st = MX_ERROR(MX_ERR_FORMAT,
                              "truncated file: name of array %d at byte offset %zu needs %llu "
                              "bytes, %zu left", i, r.pos, (unsigned long long)len, r.len - r.pos);
                goto done;
            }
            st = take(&r, (size_t)len, "name", i, &name_ptr[i]);
            if (st != MX_OK) goto done;
            /* Names become C strings; an embedded NUL would silently cut one. */
            if (memchr(name_ptr[i], 0, (size_t)len)) {
                st = MX_ERROR(MX_ERR_FORMAT, "name of array %d at byte offset %zu contains a NUL byte",
                              i, len_at);
                goto done;
            }
            name_len[i] = (size_t)len;
        }
    }
    if (r.pos != r.len) {
        st = MX_ERROR(MX_ERR_FORMAT, "%zu unexpected trailing bytes at byte offset %zu",
                      r.len - r.pos, r.pos);
        goto done;
    }

    /* The file is valid: build the arrays. */
    out->arrays = mx_calloc((size_t)n, sizeof(*out->arrays));
    if (!out->arrays) {
        st = MX_ERR_NOMEM;
        goto done;
    }
    if (names) {
        out->names = mx_calloc((size_t)n, sizeof(*out->names));
        if (!out->names) {
            st = MX_ERR_NOMEM;
            goto done;
        }
    }
    out->count = n;
    for (int i = 0; i < n; i++) {
        st = mx_ndarray_create(rt, entries[i].shape, entries[i].dtype, mx_cpu(), &out->arrays[i]);
        if (st != MX_OK) {
            st = mx_error_prefix(st, "ndarray load: creating array %d", i);
            goto done;
        }
        st = mx_ndarray_from_host(out->arrays[i], entries[i].data, entries[i].nbytes);
        if (st != MX_OK) {
            st = mx_error_prefix(st, "ndarray load: filling array %d", i);
            goto done;
        }
        if (names) {
            out->names[i] = mx_malloc(name_len[i] + 1);
            if (!out->names[i]) {
                st = MX_ERR_NOMEM;
                goto done;
            }
            memcpy(out->names[i], name_ptr[i], name_len[i]);
            out->names[i][name_len[i]] = '\0';
        }
    }

done:
    mx_free(entries);
    mx_free(name_ptr);
    mx_free(name_len);
    if (st != MX_OK) free_built(out);
    return st;
}

mx_status mx_ndarray_load(mx_runtime *rt, const char *path, mx_ndarray_list *out)
{
    if (!out) return MX_ERROR(MX_ERR_INVALID, "ndarray load: out is NULL");
    memset(out, 0, sizeof(*out));
    if (!path) return MX_ERROR(MX_ERR_INVALID, "ndarray load: path is NULL");

    FILE *fp = fopen(path, "rb");
    if (!fp) return MX_ERROR(MX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    mx_status st = MX_OK;
    uint8_t *buf = NULL;
    long size = -1;
    /* A directory opens fine on Linux and reports an absurd size. */
    struct stat info;
    if (fstat(fileno(fp), &info) != 0) {
        st = MX_ERROR(MX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(info.st_mode)) {
        st = MX_ERROR(MX_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    if (fseek(fp, 0, SEEK_END) != 0 || (size = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        st = MX_ERROR(MX_ERR_IO, "%s: cannot determine size: %s", path, strerror(errno));
        goto done;
    }
    buf = mx_malloc((size_t)size);
    if (!buf) {
        st = mx_error_prefix(MX_ERR_NOMEM, "%s", path);
        goto done;
    }
    if (fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        st = ferror(fp) ? MX_ERROR(MX_ERR_IO, "%s: read failed: %s", path, strerror(errno))
                        : MX_ERROR(MX_ERR_IO, "%s: file shrank while reading", path);
        goto done;
    }
    st = mx_ndarray_load_buffer(rt, buf, (size_t)size, out);
    if (st != MX_OK) st = mx_error_prefix(st, "%s", path);

done:
    if (fclose(fp) != 0 && st == MX_OK) {
        /* Read-only stream: a close failure loses nothing, but report it. */
        mx_ndarray_list_free(out);
        st = MX_ERROR(MX_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    }
    mx_free(buf);
    return st;
}

void mx_ndarray_list_free(mx_ndarray_list *list)
{
    if (!list) return;
    free_built(list);
}
