/*
 * recordio.c - dmlc RecordIO writer, reader (with resynchronisation after
 * corrupt data), record-head search, byte and index partitions, and the
 * .idx text index. Spec: mxnet-formats.md section 1.
 */
#include "recordio/recordio.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_SIZE 65536            /* reader look-ahead buffer */
#define PAYLOAD_CHUNK ((size_t)1 << 20) /* growth step when the size is unknown */

static const uint8_t magic_bytes[4] = {0x0A, 0x23, 0xD7, 0xCE};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint64_t pad4(uint64_t n) { return (n + 3u) & ~(uint64_t)3u; }

/* ---- writer ------------------------------------------------------------ */

struct mx_recordio_writer {
    mx_stream *stream;
    int own_stream;
    int failed;
    uint64_t pos;
    uint64_t escapes;
};

mx_status mx_recordio_writer_create(mx_stream *stream, int own_stream, mx_recordio_writer **out)
{
    if (!stream || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_writer_create: NULL argument");
    *out = NULL;
    uint64_t pos = 0;
    mx_status st = mx_stream_tell(stream, &pos);
    if (st == MX_ERR_UNSUPPORTED) {
        pos = 0; /* e.g. a pipe: offsets count from where writing starts */
        mx_error_clear();
    } else if (st != MX_OK) {
        return st;
    }
    if (pos % 4 != 0)
        return MX_ERROR(MX_ERR_INVALID,
                        "RecordIO writer: stream position %llu is not a multiple of 4",
                        (unsigned long long)pos);
    mx_recordio_writer *w = mx_calloc(1, sizeof(*w));
    if (!w) return MX_ERR_NOMEM;
    w->stream = stream;
    w->own_stream = own_stream;
    w->pos = pos;
    *out = w;
    return MX_OK;
}

mx_status mx_recordio_writer_open(const char *path, mx_recordio_writer **out)
{
    if (!path || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_writer_open: NULL argument");
    *out = NULL;
    mx_stream *s = NULL;
    MX_TRY(mx_stream_open_file(path, "wb", &s));
    mx_status st = mx_recordio_writer_create(s, 1, out);
    if (st != MX_OK) mx_stream_close(s);
    return st;
}

static mx_status put_part(mx_recordio_writer *w, uint32_t cflag, const uint8_t *p, size_t n)
{
    uint8_t h[8];
    wr32(h, MX_RECORDIO_MAGIC);
    wr32(h + 4, mx_recordio_lrec(cflag, (uint32_t)n));
    MX_TRY(mx_stream_write(w->stream, h, sizeof(h)));
    if (n) MX_TRY(mx_stream_write(w->stream, p, n));
    w->pos += 8 + n;
    return MX_OK;
}

static mx_status write_record(mx_recordio_writer *w, const uint8_t *d, size_t size)
{
    size_t lower = size & ~(size_t)3, dptr = 0;
    for (size_t i = 0; i < lower; i += 4) {
        if (memcmp(d + i, magic_bytes, 4) != 0) continue;
        MX_TRY(put_part(w, dptr == 0 ? 1u : 2u, d + dptr, i - dptr));
        dptr = i + 4;
        w->escapes++;
    }
    MX_TRY(put_part(w, dptr != 0 ? 3u : 0u, d + dptr, size - dptr));
    static const uint8_t zeros[4];
    size_t pad = (size_t)pad4(size) - size;
    if (pad) {
        MX_TRY(mx_stream_write(w->stream, zeros, pad));
        w->pos += pad;
    }
    return MX_OK;
}

mx_status mx_recordio_writer_write(mx_recordio_writer *w, const void *data, size_t size,
                                   uint64_t *offset)
{
    if (!w || (!data && size)) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_writer_write: NULL argument");
    if (w->failed)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO writer: an earlier write failed; the output is incomplete");
    if (size >= MX_RECORDIO_MAX_RECORD)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO record of %zu bytes is too large (limit 2^29 - 1)", size);
    uint64_t start = w->pos;
    mx_status st = write_record(w, data, size);
    if (st != MX_OK) {
        w->failed = 1;
        return mx_error_prefix(st, "writing RecordIO record at offset %llu", (unsigned long long)start);
    }
    if (offset) *offset = start;
    return MX_OK;
}

uint64_t mx_recordio_writer_tell(const mx_recordio_writer *w) { return w->pos; }
uint64_t mx_recordio_writer_escapes(const mx_recordio_writer *w) { return w->escapes; }

mx_status mx_recordio_writer_close(mx_recordio_writer *w)
{
    if (!w) return MX_OK;
    mx_status st = MX_OK;
    if (w->own_stream) st = mx_stream_close(w->stream);
    mx_free(w);
    return st;
}

/* ---- windowed source: random-offset reads with a look-ahead buffer ------ */

typedef struct source {
    mx_stream *stream;
    uint64_t stream_pos; /* where the stream is now */
    uint64_t eof_at;     /* where a read came up short; UINT64_MAX = not seen */
    uint8_t *win;
    uint64_t win_off;
    size_t win_len;
} source;

static mx_status source_init(source *s, mx_stream *stream)
{
    memset(s, 0, sizeof(*s));
    s->stream = stream;
    s->eof_at = UINT64_MAX;
    mx_status st = mx_stream_tell(stream, &s->stream_pos);
    if (st == MX_ERR_UNSUPPORTED) {
        s->stream_pos = 0; /* cannot tell: take its position as offset 0 */
        mx_error_clear();
    } else if (st != MX_OK) {
        return st;
    }
    s->win = mx_malloc(WINDOW_SIZE);
    return s->win ? MX_OK : MX_ERR_NOMEM;
}

static void source_free(source *s) { mx_free(s->win); }

static mx_status source_goto(source *s, uint64_t off)
{
    if (s->stream_pos == off) return MX_OK;
    MX_TRY(mx_stream_seek(s->stream, off));
    s->stream_pos = off;
    return MX_OK;
}

/* Reads up to n bytes at `off` into dst; *got < n only at the end of data. */
static mx_status source_read(source *s, uint64_t off, uint8_t *dst, size_t n, size_t *got)
{
    *got = 0;
    while (n > 0) {
        if (off >= s->win_off && off - s->win_off < s->win_len) {
            size_t at = (size_t)(off - s->win_off), k = s->win_len - at;
            if (k > n) k = n;
            memcpy(dst, s->win + at, k);
            dst += k;
            n -= k;
            off += k;
            *got += k;
            continue;
        }
        /* Past the known end: no stream call, and the window (the only copy
         * of recent data for a stream that cannot seek back) is kept. */
        if (off >= s->eof_at) return MX_OK;
        MX_TRY(source_goto(s, off));
        size_t k = 0;
        if (n >= WINDOW_SIZE) { /* large payloads bypass the window */
            MX_TRY(mx_stream_read(s->stream, dst, n, &k));
            s->stream_pos += k;
            *got += k;
            if (k < n) s->eof_at = s->stream_pos;
            return MX_OK;
        }
        MX_TRY(mx_stream_read(s->stream, s->win, WINDOW_SIZE, &k));
        s->stream_pos += k;
        if (k < WINDOW_SIZE) s->eof_at = s->stream_pos;
        if (k == 0) return MX_OK;
        s->win_off = off;
        s->win_len = k;
    }
    return MX_OK;
}

/* Whether a whole record starts at p and ends at `limit` or where another
 * magic word follows: after corruption a magic word alone is weak evidence
 * (the writer escapes it only at aligned payload offsets), a record that
 * chains to the next one is not. Reads ahead, so only for seekable data. */
static mx_status source_record_chains(source *s, uint64_t p, uint64_t limit, bool *ok)
{
    *ok = false;
    uint64_t at = p;
    for (uint32_t parts = 0;; parts++) {
        uint8_t h[8];
        size_t n = 0;
        MX_TRY(source_read(s, at, h, 8, &n));
        if (n < 8 || rd32(h) != MX_RECORDIO_MAGIC) return MX_OK;
        uint32_t cflag = mx_recordio_cflag(rd32(h + 4));
        if (cflag > 3 || (parts == 0) != (cflag <= 1)) return MX_OK;
        uint64_t padded = pad4(mx_recordio_length(rd32(h + 4)));
        if (at + 8 > limit || padded > limit - at - 8) return MX_OK;
        at += 8 + padded;
        if (cflag == 0 || cflag == 3) break;
    }
    if (at >= limit) {
        *ok = true;
        return MX_OK;
    }
    uint8_t w[4];
    size_t n = 0;
    MX_TRY(source_read(s, at, w, 4, &n));
    *ok = n == 0 || (n == 4 && rd32(w) == MX_RECORDIO_MAGIC);
    return MX_OK;
}

/* Resynchronisation after corrupt data from p (bounded by `limit`): the
 * first offset, at any byte (inserted garbage shifts the records off the
 * 4-byte grid), where a magic word with a cflag 0/1 header starts and,
 * when `chain_limit` is not 0, a whole record chains to the next one
 * (source_record_chains within chain_limit); else the end of the data /
 * limit. */
static mx_status source_resync_head(source *s, uint64_t p, uint64_t limit, uint64_t chain_limit, uint64_t *head)
{
    for (;; p++) {
        if (p >= limit) {
            *head = limit;
            return MX_OK;
        }
        uint8_t w[8];
        size_t n = 0;
        MX_TRY(source_read(s, p, w, 8, &n));
        if (n < 8) { /* no room for a record header: the end */
            *head = p + n;
            return MX_OK;
        }
        if (rd32(w) != MX_RECORDIO_MAGIC || mx_recordio_cflag(rd32(w + 4)) > 1) continue;
        bool ok = true;
        if (chain_limit) MX_TRY(source_record_chains(s, p, chain_limit, &ok));
        if (ok) {
            *head = p;
            return MX_OK;
        }
    }
}

/* Spec 1.4 scan from p (bounded by `limit`): the first magic word whose
 * next word has cflag 0/1, or the end of the data / limit. */
static mx_status source_find_head(source *s, uint64_t p, uint64_t limit, uint64_t *head)
{
    for (;;) {
        if (p >= limit) {
            *head = limit;
            return MX_OK;
        }
        uint8_t w[4];
        size_t n = 0;
        MX_TRY(source_read(s, p, w, 4, &n));
        if (n < 4) {
            *head = p + n;
            return MX_OK;
        }
        if (rd32(w) != MX_RECORDIO_MAGIC) {
            p += 4;
            continue;
        }
        MX_TRY(source_read(s, p + 4, w, 4, &n));
        if (n < 4) { /* a dangling magic at the end is no head */
            *head = p + 4 + n;
            return MX_OK;
        }
        if (mx_recordio_cflag(rd32(w)) <= 1) {
            *head = p;
            return MX_OK;
        }
        /* The next word may itself be a head's magic (corrupt data): step
         * one word, not two (dmlc's SeekRecordBegin steps two), so that the
         * head found from p is the first one at or after p and partitions
         * cannot overlap. Valid files give the same heads either way. */
        p += 4;
    }
}

mx_status mx_recordio_find_head(mx_stream *stream, uint64_t pos, uint64_t *head)
{
    if (!stream || !head) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_find_head: NULL argument");
    if (pos % 4 != 0)
        return MX_ERROR(MX_ERR_INVALID, "record head search from offset %llu: not a multiple of 4",
                        (unsigned long long)pos);
    source s;
    mx_status st = source_init(&s, stream);
    if (st == MX_OK) st = source_find_head(&s, pos, UINT64_MAX, head);
    source_free(&s);
    return st;
}

/* ---- reader ------------------------------------------------------------ */

enum { READER_OK, READER_DATA_ERROR, READER_FAILED };

struct mx_recordio_reader {
    mx_stream *stream;
    int own_stream;
    source src;
    int size_known;
    uint64_t size;
    uint64_t pos;       /* offset of the next record head */
    uint64_t range_end; /* records must start below this */
    uint8_t *buf;       /* reassembled record */
    size_t buf_cap;
    int state;
    mx_status err_status;
    char err_msg[1024];
    uint64_t skip_begin, resync_from; /* for READER_DATA_ERROR */
    /* The last record delivered, [last_start, last_end); last_end is
     * UINT64_MAX when there is none since the last seek or resync. */
    uint64_t last_start, last_end;
    mx_recordio_skip *skips;
    size_t skip_count, skip_cap;
};

mx_status mx_recordio_reader_create(mx_stream *stream, int own_stream, mx_recordio_reader **out)
{
    if (!stream || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_create: NULL argument");
    *out = NULL;
    mx_recordio_reader *r = mx_calloc(1, sizeof(*r));
    if (!r) return MX_ERR_NOMEM;
    mx_status st = source_init(&r->src, stream);
    if (st != MX_OK) {
        source_free(&r->src);
        mx_free(r);
        return st;
    }
    r->stream = stream;
    r->range_end = UINT64_MAX;
    r->last_end = UINT64_MAX;
    r->buf_cap = 4096;
    r->buf = mx_malloc(r->buf_cap);
    if (!r->buf) {
        source_free(&r->src);
        mx_free(r);
        return MX_ERR_NOMEM;
    }
    st = mx_stream_size(stream, &r->size);
    if (st == MX_OK) {
        r->size_known = 1;
    } else if (st == MX_ERR_UNSUPPORTED) {
        mx_error_clear();
    } else {
        mx_recordio_reader_free(r);
        return st;
    }
    r->own_stream = own_stream;
    *out = r;
    return MX_OK;
}

mx_status mx_recordio_reader_open(const char *path, mx_recordio_reader **out)
{
    if (!path || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_open: NULL argument");
    *out = NULL;
    mx_stream *s = NULL;
    MX_TRY(mx_stream_open_file(path, "rb", &s));
    mx_status st = mx_recordio_reader_create(s, 1, out);
    if (st != MX_OK) mx_stream_close(s);
    return st;
}

void mx_recordio_reader_free(mx_recordio_reader *r)
{
    if (!r) return;
    if (r->own_stream) mx_stream_close(r->stream); /* read-only: nothing to flush */
    source_free(&r->src);
    mx_free(r->buf);
    mx_free(r->skips);
    mx_free(r);
}

static void save_error(mx_recordio_reader *r, int state, mx_status st)
{
    r->state = state;
    r->err_status = st;
    snprintf(r->err_msg, sizeof(r->err_msg), "%s", mx_last_error());
}

static mx_status reader_failed(mx_recordio_reader *r, mx_status st)
{
    save_error(r, READER_FAILED, st);
    return st;
}

/* Records a resynchronisable data error: the caller may skip from
 * skip_begin, scanning for a head from resync_from. */
static mx_status data_error_at(mx_recordio_reader *r, uint64_t skip_begin, uint64_t resync_from,
                               const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static mx_status data_error_at(mx_recordio_reader *r, uint64_t skip_begin, uint64_t resync_from,
                               const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mx_error_setv(MX_ERR_FORMAT, file, line, fmt, ap);
    va_end(ap);
    r->skip_begin = skip_begin;
    r->resync_from = resync_from;
    save_error(r, READER_DATA_ERROR, MX_ERR_FORMAT);
    return MX_ERR_FORMAT;
}
#define DATA_ERROR(r, skip_begin, resync_from, ...) \
    data_error_at((r), (skip_begin), (resync_from), __FILE__, __LINE__, __VA_ARGS__)

static mx_status reserve(mx_recordio_reader *r, size_t need)
{
    if (need <= r->buf_cap) return MX_OK;
    size_t cap = r->buf_cap;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = mx_realloc(r->buf, cap);
    if (!p) return MX_ERR_NOMEM;
    r->buf = p;
    r->buf_cap = cap;
    return MX_OK;
}

/* Reads `n` payload bytes at `off` to r->buf + len. With a known size the
 * caller has checked they exist; otherwise memory grows with the data that
 * actually arrives. *got < n at the end of data. */
static mx_status read_payload(mx_recordio_reader *r, uint64_t off, size_t len, size_t n, size_t *got)
{
    *got = 0;
    while (*got < n) {
        size_t want = n - *got;
        if (!r->size_known) {
            size_t step = *got > PAYLOAD_CHUNK ? *got : PAYLOAD_CHUNK;
            if (want > step) want = step;
        }
        size_t need;
        if (!mx_size_add(len, *got, &need) || !mx_size_add(need, want, &need))
            return MX_ERROR(MX_ERR_NOMEM, "RecordIO record too large for memory");
        MX_TRY(reserve(r, need));
        size_t k = 0;
        MX_TRY(source_read(&r->src, off + *got, r->buf + len + *got, want, &k));
        *got += k;
        if (k < want) break;
    }
    return MX_OK;
}

mx_status mx_recordio_reader_next(mx_recordio_reader *r, mx_recordio_record *rec, int *got)
{
    if (!r || !rec || !got) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_next: NULL argument");
    *got = 0;
    memset(rec, 0, sizeof(*rec));
    if (r->state != READER_OK) return mx_error_set_message(r->err_status, r->err_msg);
    if (r->pos >= r->range_end || (r->size_known && r->pos >= r->size)) return MX_OK;

    const uint64_t start = r->pos;
    uint64_t at = start;
    size_t len = 0;
    uint32_t parts = 0;
    for (;;) {
        uint8_t h[8];
        size_t n = 0;
        mx_status st = source_read(&r->src, at, h, sizeof(h), &n);
        if (st != MX_OK) return reader_failed(r, st);
        if (n == 0 && parts == 0) return MX_OK; /* clean end (size unknown) */
        const unsigned long long uat = at, ustart = start;
        if (n == 0)
            return DATA_ERROR(r, start, at,
                              "RecordIO record at offset %llu is cut short: the data ends at "
                              "offset %llu where its next part should start", ustart, uat);
        if (n < 8)
            return DATA_ERROR(r, parts ? start : at, at + n,
                              "RecordIO data truncated: part header at offset %llu has only "
                              "%zu of 8 bytes", uat, n);
        uint32_t magic = rd32(h), lrec = rd32(h + 4);
        if (magic != MX_RECORDIO_MAGIC) {
            if (parts)
                return DATA_ERROR(r, start, at + 4,
                                  "corrupt RecordIO data: bad magic 0x%08x at offset %llu "
                                  "(continuation of the record at offset %llu)", magic, uat, ustart);
            return DATA_ERROR(r, at, at + 4,
                              "corrupt RecordIO data: bad magic 0x%08x at offset %llu", magic, uat);
        }
        uint32_t cflag = mx_recordio_cflag(lrec), plen = mx_recordio_length(lrec);
        if (cflag > 3)
            return DATA_ERROR(r, parts ? start : at, at + 8,
                              "corrupt RecordIO data: invalid cflag %u at offset %llu", cflag, uat);
        if (parts == 0 && cflag >= 2)
            return DATA_ERROR(r, at, at + 8,
                              "corrupt RecordIO data: continuation part (cflag %u) at offset %llu "
                              "where a record should start", cflag, uat);
        if (parts > 0 && cflag <= 1)
            return DATA_ERROR(r, start, at,
                              "corrupt RecordIO data: the record at offset %llu is unfinished: the "
                              "part at offset %llu has cflag %u, expected a continuation (2 or 3)",
                              ustart, uat, cflag);
        size_t padded = (size_t)pad4(plen);
        if (r->size_known && (at + 8 > r->size || padded > r->size - (at + 8)))
            return DATA_ERROR(r, parts ? start : at, at + 8,
                              "RecordIO data truncated: the part at offset %llu claims %u payload "
                              "bytes but only %llu remain", uat, plen,
                              (unsigned long long)(r->size > at + 8 ? r->size - (at + 8) : 0));
        size_t k = 0;
        st = read_payload(r, at + 8, len, padded, &k);
        if (st != MX_OK) return reader_failed(r, st);
        if (k < padded)
            return DATA_ERROR(r, parts ? start : at, at + 8,
                              "RecordIO data truncated: the part at offset %llu has %zu of its "
                              "%zu payload bytes", uat, k, padded);
        len += plen;
        at += 8 + padded;
        parts++;
        if (cflag == 0 || cflag == 3) break;
        size_t need;
        if (!mx_size_add(len, 4, &need)) return reader_failed(r, MX_ERROR(MX_ERR_NOMEM, "record too large"));
        st = reserve(r, need);
        if (st != MX_OK) return reader_failed(r, st);
        memcpy(r->buf + len, magic_bytes, 4);
        len += 4;
    }
    r->pos = at;
    r->last_start = start;
    r->last_end = at;
    rec->data = r->buf;
    rec->size = len;
    rec->offset = start;
    rec->parts = parts;
    *got = 1;
    return MX_OK;
}

mx_status mx_recordio_reader_resync(mx_recordio_reader *r, mx_recordio_skip *skip)
{
    if (!r) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_resync: NULL argument");
    if (r->state != READER_DATA_ERROR)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO resync: the reader has no data error to recover from");
    uint64_t limit = r->range_end;
    if (r->size_known && r->size < limit) limit = r->size;
    uint64_t head = 0;
    /* In a file (size known: it can be read back and ahead), from the byte
     * after the bad record's start, not resync_from: garbage of fewer than
     * 4 bytes puts the next head inside the word that failed; and each
     * candidate is checked to chain. A stream that cannot seek goes on
     * from resync_from, byte by byte. */
    uint64_t from = r->resync_from;
    if (r->size_known && r->skip_begin + 1 < from) from = r->skip_begin + 1;
    /* Garbage that happens to frame a record (a magic word, a small
     * length) is delivered as one and swallows the real heads after it;
     * when the error comes right after the last record, look again from
     * just past that record's start (a file only: it reads back). */
    if (r->size_known && r->last_end == r->skip_begin && r->last_start + 1 < from) from = r->last_start + 1;
    mx_status st = source_resync_head(&r->src, from, limit, r->size_known ? r->size : 0, &head);
    if (st != MX_OK) return reader_failed(r, st);
    if (r->skip_count == r->skip_cap) {
        size_t cap = r->skip_cap ? r->skip_cap * 2 : 8, bytes;
        if (!mx_size_mul(cap, sizeof(*r->skips), &bytes))
            return MX_ERROR(MX_ERR_NOMEM, "too many skipped ranges");
        mx_recordio_skip *p = mx_realloc(r->skips, bytes);
        if (!p) return MX_ERR_NOMEM; /* state unchanged: the caller may retry */
        r->skips = p;
        r->skip_cap = cap;
    }
    mx_recordio_skip s = {r->skip_begin, head < r->skip_begin ? r->skip_begin : head};
    r->skips[r->skip_count++] = s;
    if (skip) *skip = s;
    r->pos = head;
    r->last_end = UINT64_MAX;
    r->state = READER_OK;
    return MX_OK;
}

void mx_recordio_reader_skips(const mx_recordio_reader *r, const mx_recordio_skip **skips,
                              size_t *count)
{
    *skips = r->skips;
    *count = r->skip_count;
}

mx_status mx_recordio_reader_seek(mx_recordio_reader *r, uint64_t offset)
{
    if (!r) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_seek: NULL argument");
    if (offset % 4 != 0)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO seek to offset %llu: not a multiple of 4",
                        (unsigned long long)offset);
    if (r->size_known && offset > r->size)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO seek to offset %llu beyond the end (%llu bytes)",
                        (unsigned long long)offset, (unsigned long long)r->size);
    r->pos = offset;
    r->state = READER_OK;
    r->last_end = UINT64_MAX;
    return MX_OK;
}

mx_status mx_recordio_reader_read_at(mx_recordio_reader *r, uint64_t offset, mx_recordio_record *rec)
{
    MX_TRY(mx_recordio_reader_seek(r, offset));
    int got = 0;
    MX_TRY(mx_recordio_reader_next(r, rec, &got));
    if (!got)
        return MX_ERROR(MX_ERR_FORMAT, "no RecordIO record at offset %llu: end of the data",
                        (unsigned long long)offset);
    return MX_OK;
}

mx_status mx_recordio_reader_set_range(mx_recordio_reader *r, uint64_t begin, uint64_t end)
{
    if (!r) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_reader_set_range: NULL argument");
    if (begin > end)
        return MX_ERROR(MX_ERR_INVALID, "RecordIO range [%llu, %llu) is reversed",
                        (unsigned long long)begin, (unsigned long long)end);
    MX_TRY(mx_recordio_reader_seek(r, begin));
    r->range_end = end;
    return MX_OK;
}

/* ---- partitions -------------------------------------------------------- */

mx_status mx_recordio_partition_nominal(uint64_t total, uint32_t num_parts, uint32_t part_index,
                                        uint64_t *begin, uint64_t *end)
{
    if (!begin || !end) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_partition_nominal: NULL argument");
    if (num_parts == 0 || part_index >= num_parts)
        return MX_ERROR(MX_ERR_INVALID, "partition: part_index %u is not in [0, num_parts = %u)",
                        part_index, num_parts);
    uint64_t step = total / num_parts + (total % num_parts != 0);
    step = step > UINT64_MAX - 3 ? UINT64_MAX & ~(uint64_t)3 : pad4(step);
    uint64_t k = part_index;
    *begin = (k != 0 && step > total / k) ? total : step * k;
    if (*begin > total) *begin = total;
    *end = step > total / (k + 1) ? total : step * (k + 1);
    if (*end > total) *end = total;
    return MX_OK;
}

mx_status mx_recordio_partition(mx_stream *stream, uint32_t num_parts, uint32_t part_index,
                                uint64_t *begin, uint64_t *end)
{
    if (!stream || !begin || !end) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_partition: NULL argument");
    uint64_t total = 0;
    mx_status st = mx_stream_size(stream, &total);
    if (st != MX_OK) return mx_error_prefix(st, "RecordIO partition needs the data size");
    if (total % 4 != 0)
        return MX_ERROR(MX_ERR_FORMAT, "RecordIO data size %llu is not a multiple of 4",
                        (unsigned long long)total);
    MX_TRY(mx_recordio_partition_nominal(total, num_parts, part_index, begin, end));
    if (*begin == *end) return MX_OK;
    source s;
    st = source_init(&s, stream);
    if (st == MX_OK && *end != total) st = source_find_head(&s, *end, total, end);
    if (st == MX_OK && *begin != 0) st = source_find_head(&s, *begin, total, begin);
    source_free(&s);
    return st;
}

mx_status mx_recordio_index_partition(size_t n, uint32_t num_parts, uint32_t part_index,
                                      size_t *first, size_t *count)
{
    if (!first || !count) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_partition: NULL argument");
    if (num_parts == 0 || part_index >= num_parts)
        return MX_ERROR(MX_ERR_INVALID, "partition: part_index %u is not in [0, num_parts = %u)",
                        part_index, num_parts);
    size_t step = n / num_parts + (n % num_parts != 0);
    size_t k = part_index;
    size_t b = (k != 0 && step > n / k) ? n : step * k;
    size_t e = (step > n / (k + 1)) ? n : step * (k + 1);
    if (b > n) b = n;
    if (e > n) e = n;
    *first = b;
    *count = e - b;
    return MX_OK;
}

/* ---- .idx index -------------------------------------------------------- */

typedef struct key_slot {
    int64_t key;
    size_t entry;
} key_slot;

struct mx_recordio_index {
    mx_recordio_index_entry *entries;
    size_t count, capacity;
    key_slot *by_key; /* sorted by (key, entry); valid when by_key_count == count */
    size_t by_key_count;
};

mx_status mx_recordio_index_create(mx_recordio_index **out)
{
    if (!out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_create: NULL argument");
    *out = mx_calloc(1, sizeof(**out));
    return *out ? MX_OK : MX_ERR_NOMEM;
}

void mx_recordio_index_free(mx_recordio_index *idx)
{
    if (!idx) return;
    mx_free(idx->entries);
    mx_free(idx->by_key);
    mx_free(idx);
}

mx_status mx_recordio_index_add(mx_recordio_index *idx, int64_t key, uint64_t offset)
{
    if (!idx) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_add: NULL argument");
    if (idx->count == idx->capacity) {
        size_t cap = idx->capacity ? idx->capacity * 2 : 64, bytes;
        if (!mx_size_mul(cap, sizeof(*idx->entries), &bytes))
            return MX_ERROR(MX_ERR_NOMEM, "index too large");
        mx_recordio_index_entry *p = mx_realloc(idx->entries, bytes);
        if (!p) return MX_ERR_NOMEM;
        idx->entries = p;
        idx->capacity = cap;
    }
    idx->entries[idx->count].key = key;
    idx->entries[idx->count].offset = offset;
    idx->count++;
    idx->by_key_count = 0; /* the key table is stale */
    return MX_OK;
}

const mx_recordio_index_entry *mx_recordio_index_entries(const mx_recordio_index *idx, size_t *count)
{
    *count = idx->count;
    return idx->entries;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

/* Parses an optionally signed decimal integer token [p, e) into *mag and
 * *neg. Returns 0 on bad syntax or a magnitude above UINT64_MAX. */
static int parse_decimal(const char *p, const char *e, uint64_t *mag, int *neg)
{
    *neg = 0;
    if (p < e && (*p == '+' || *p == '-')) *neg = *p++ == '-';
    if (p == e) return 0;
    uint64_t v = 0;
    for (; p < e; p++) {
        if (*p < '0' || *p > '9') return 0;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *mag = v;
    return 1;
}

static mx_status parse_idx_line(const char *line, size_t len, const char *name, uint64_t lineno,
                                mx_recordio_index *idx)
{
    const char *p = line, *e = line + len;
    const unsigned long long ln = lineno;
    while (p < e && is_blank(*p)) p++;
    if (p == e) return MX_OK; /* blank line */
    const char *k0 = p;
    while (p < e && !is_blank(*p)) p++;
    const char *k1 = p;
    while (p < e && is_blank(*p)) p++;
    const char *o0 = p;
    while (p < e && !is_blank(*p)) p++;
    const char *o1 = p;
    while (p < e && is_blank(*p)) p++;
    if (o0 == o1)
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: expected \"key<TAB>offset\", found one field",
                        name, ln);
    if (p != e)
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: expected \"key<TAB>offset\", found more than two fields",
                        name, ln);
    uint64_t kmag, off;
    int kneg, oneg;
    if (!parse_decimal(k0, k1, &kmag, &kneg) || kmag > (uint64_t)INT64_MAX + (uint64_t)kneg)
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: key \"%.*s\" is not a 64-bit integer", name, ln,
                        (int)(k1 - k0 > 40 ? 40 : k1 - k0), k0);
    if (!parse_decimal(o0, o1, &off, &oneg))
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: offset \"%.*s\" is not an integer", name, ln,
                        (int)(o1 - o0 > 40 ? 40 : o1 - o0), o0);
    if (oneg && off != 0)
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: offset %.*s is negative", name, ln,
                        (int)(o1 - o0 > 40 ? 40 : o1 - o0), o0);
    if (off % 4 != 0)
        return MX_ERROR(MX_ERR_FORMAT, "%s:%llu: offset %llu is not a multiple of 4 (records are 4-aligned)",
                        name, ln, (unsigned long long)off);
    int64_t key = kneg ? (kmag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)kmag) : (int64_t)kmag;
    return mx_recordio_index_add(idx, key, off);
}

mx_status mx_recordio_index_read_stream(mx_stream *stream, const char *name, mx_recordio_index **out)
{
    if (!stream || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_read_stream: NULL argument");
    *out = NULL;
    if (!name) name = "<index>";
    mx_recordio_index *idx = NULL;
    mx_line_reader *lr = NULL;
    mx_status st = mx_recordio_index_create(&idx);
    if (st == MX_OK) st = mx_line_reader_create(stream, &lr);
    while (st == MX_OK) {
        const char *line;
        size_t len;
        int got = 0;
        st = mx_line_reader_next(lr, &line, &len, &got);
        if (st != MX_OK || !got) break;
        st = parse_idx_line(line, len, name, mx_line_reader_lineno(lr), idx);
    }
    mx_line_reader_free(lr);
    if (st != MX_OK) {
        mx_recordio_index_free(idx);
        return st;
    }
    *out = idx;
    return MX_OK;
}

mx_status mx_recordio_index_read(const char *path, mx_recordio_index **out)
{
    if (!path || !out) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_read: NULL argument");
    *out = NULL;
    mx_stream *s = NULL;
    MX_TRY(mx_stream_open_file(path, "rb", &s));
    mx_status st = mx_recordio_index_read_stream(s, path, out);
    mx_stream_close(s); /* read-only */
    return st;
}

mx_status mx_recordio_index_write_stream(const mx_recordio_index *idx, mx_stream *stream)
{
    if (!idx || !stream) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_write_stream: NULL argument");
    for (size_t i = 0; i < idx->count; i++) {
        char line[64];
        int n = snprintf(line, sizeof(line), "%lld\t%llu\n", (long long)idx->entries[i].key,
                         (unsigned long long)idx->entries[i].offset);
        MX_TRY(mx_stream_write(stream, line, (size_t)n));
    }
    return MX_OK;
}

mx_status mx_recordio_index_write(const mx_recordio_index *idx, const char *path)
{
    if (!idx || !path) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_write: NULL argument");
    mx_stream *s = NULL;
    MX_TRY(mx_stream_open_file(path, "wb", &s));
    mx_status st = mx_recordio_index_write_stream(idx, s);
    mx_status cst = mx_stream_close(s);
    return st != MX_OK ? st : cst;
}

static int cmp_key_slot(const void *a, const void *b)
{
    const key_slot *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->entry < y->entry ? -1 : x->entry > y->entry;
}

mx_status mx_recordio_index_find(mx_recordio_index *idx, int64_t key, uint64_t *offset, int *found)
{
    if (!idx || !offset || !found) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_find: NULL argument");
    *found = 0;
    if (idx->count == 0) return MX_OK;
    if (idx->by_key_count != idx->count) {
        size_t bytes;
        if (!mx_size_mul(idx->count, sizeof(key_slot), &bytes))
            return MX_ERROR(MX_ERR_NOMEM, "index too large");
        key_slot *t = mx_realloc(idx->by_key, bytes);
        if (!t) return MX_ERR_NOMEM;
        for (size_t i = 0; i < idx->count; i++) t[i] = (key_slot){idx->entries[i].key, i};
        qsort(t, idx->count, sizeof(*t), cmp_key_slot);
        idx->by_key = t;
        idx->by_key_count = idx->count;
    }
    /* upper bound of key, then step back: the last entry with that key */
    size_t lo = 0, hi = idx->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (idx->by_key[mid].key <= key) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0 && idx->by_key[lo - 1].key == key) {
        *offset = idx->entries[idx->by_key[lo - 1].entry].offset;
        *found = 1;
    }
    return MX_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

mx_status mx_recordio_index_sorted_offsets(const mx_recordio_index *idx, uint64_t **offsets)
{
    if (!idx || !offsets) return MX_ERROR(MX_ERR_INVALID, "mx_recordio_index_sorted_offsets: NULL argument");
    *offsets = mx_calloc(idx->count, sizeof(uint64_t));
    if (!*offsets) return MX_ERR_NOMEM;
    for (size_t i = 0; i < idx->count; i++) (*offsets)[i] = idx->entries[i].offset;
    qsort(*offsets, idx->count, sizeof(uint64_t), cmp_u64);
    return MX_OK;
}
