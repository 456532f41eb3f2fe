/*
 * test_recordio.c - dmlc RecordIO, .idx, IRHeader and .lst against the
 * spec (mxnet-formats.md sections 1-2), an encoder/decoder written here
 * independently from the spec, and the dmlc-core sample.rec fixture
 * ($MX_SHARED_DIR, default ../shared relative to the repo root).
 */
#include "recordio/imrec.h"
#include "recordio/recordio.h"

#include <check.h>
#include <math.h>
#include <float.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ----------------------------------------------------------- */

#define OK(expr)                                                                   \
    do {                                                                           \
        mx_status ok_st_ = (expr);                                                 \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error());   \
    } while (0)

static const uint8_t MAGIC[4] = {0x0A, 0x23, 0xD7, 0xCE};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static char tmp_dir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int slot;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_recordio.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    }
    char *p = buf[slot++ % 4];
    snprintf(p, 512, "%s/%s", tmp_dir, name);
    return p;
}

static void tmp_cleanup(const char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) unlink(tmp_path(names[i]));
    if (tmp_dir[0]) rmdir(tmp_dir);
    tmp_dir[0] = '\0'; /* CK_FORK=no: the next test makes a fresh one */
}

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
    uint8_t *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static void spit(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
}

static const char *fixture_path(void)
{
    static char p[1024];
    const char *shared = getenv("MX_SHARED_DIR");
    snprintf(p, sizeof(p), "%s/fixtures/mxnet/dmlc-core/sample.rec",
             shared && *shared ? shared : "../shared");
    return p;
}

/* Does `msg` mention "offset N" (N not followed by another digit)? */
static int mentions_offset(const char *msg, unsigned long long n)
{
    char pat[48];
    snprintf(pat, sizeof(pat), "offset %llu", n);
    for (const char *p = strstr(msg, pat); p; p = strstr(p + 1, pat)) {
        char c = p[strlen(pat)];
        if (c < '0' || c > '9') return 1;
    }
    return 0;
}

/* Byte buffer builder. */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_le32(bytes *b, uint32_t v)
{
    uint8_t q[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, q, 4);
}

/*
 * Reference encoder, written from spec 1.1/1.2 independently of the
 * library: find every 4-aligned complete word equal to the magic, cut the
 * payload there, label the pieces 0 (no cut) or 1, 2..., 3, pad the end.
 */
static void ref_encode(bytes *out, const uint8_t *p, size_t n)
{
    size_t cuts[4096], nc = 0;
    for (size_t w = 0; w + 4 <= n; w += 4)
        if (p[w] == 0x0A && p[w + 1] == 0x23 && p[w + 2] == 0xD7 && p[w + 3] == 0xCE) cuts[nc++] = w;
    for (size_t k = 0; k <= nc; k++) {
        size_t from = k == 0 ? 0 : cuts[k - 1] + 4, to = k < nc ? cuts[k] : n;
        uint32_t flag = nc == 0 ? 0 : k == 0 ? 1 : k == nc ? 3 : 2;
        put(out, MAGIC, 4);
        put_le32(out, flag << 29 | (uint32_t)(to - from));
        put(out, p + from, to - from);
    }
    static const uint8_t z[3];
    put(out, z, (4 - n % 4) % 4);
}

/* Independent part walker: checks framing field by field. */
typedef struct part {
    size_t off;
    unsigned cflag;
    size_t len;
} part;

static size_t walk_parts(const uint8_t *b, size_t n, part *out, size_t max)
{
    size_t at = 0, k = 0;
    ck_assert_uint_eq(n % 4, 0);
    while (at < n) {
        ck_assert_msg(at + 8 <= n, "part header at %zu cut", at);
        ck_assert_msg(memcmp(b + at, MAGIC, 4) == 0, "no magic at %zu", at);
        uint32_t lrec = (uint32_t)b[at + 4] | (uint32_t)b[at + 5] << 8 | (uint32_t)b[at + 6] << 16 |
                        (uint32_t)b[at + 7] << 24;
        ck_assert_uint_lt(k, max);
        out[k].off = at;
        out[k].cflag = lrec >> 29;
        out[k].len = lrec & 0x1FFFFFFF;
        size_t padded = (out[k].len + 3) / 4 * 4;
        ck_assert_msg(at + 8 + padded <= n, "payload of part at %zu cut", at);
        for (size_t i = out[k].len; i < padded; i++)
            ck_assert_msg(b[at + 8 + i] == 0, "padding byte %zu of part at %zu not zero", i, at);
        at += 8 + padded;
        k++;
    }
    return k;
}

/* The payload of sample.rec record i (1..10), from the fixture README. */
static size_t sample_payload(int i, uint8_t *out)
{
    uint8_t h[24] = {0};
    float label = (float)(i % 2);
    memcpy(h + 4, &label, 4); /* little-endian host */
    h[8] = (uint8_t)i;
    memcpy(out, h, 24);
    size_t n = 24;
    for (int k = 0; k < 10; k++) n += (size_t)sprintf((char *)out + n, "%d\n", i);
    return n;
}

/* Writes `n` payloads with our writer to a memory stream. */
static void write_mem(uint8_t **payloads, size_t *sizes, size_t n, bytes *out, uint64_t *offsets)
{
    mx_stream *s;
    mx_recordio_writer *w;
    OK(mx_stream_create_memory(&s));
    OK(mx_recordio_writer_create(s, 0, &w));
    for (size_t i = 0; i < n; i++) OK(mx_recordio_writer_write(w, payloads[i], sizes[i], offsets ? &offsets[i] : NULL));
    OK(mx_recordio_writer_close(w));
    const uint8_t *d;
    size_t sz;
    OK(mx_stream_memory_data(s, &d, &sz));
    out->n = 0;
    put(out, d, sz);
    OK(mx_stream_close(s));
}

static mx_recordio_reader *mem_reader(const uint8_t *d, size_t n)
{
    mx_stream *s;
    mx_recordio_reader *r;
    OK(mx_stream_open_memory(d, n, &s));
    OK(mx_recordio_reader_create(s, 1, &r));
    return r;
}

/* A stream over a memory view with only read (no seek/tell/size), counting
 * the largest read request. */
typedef struct plain_src {
    const uint8_t *d;
    size_t n, pos, max_req;
} plain_src;

static mx_status plain_read(void *self, void *buf, size_t size, size_t *nread)
{
    plain_src *p = self;
    if (size > p->max_req) p->max_req = size;
    size_t k = p->n - p->pos < size ? p->n - p->pos : size;
    memcpy(buf, p->d + p->pos, k);
    p->pos += k;
    *nread = k;
    return MX_OK;
}
static const mx_stream_ops plain_ops = {plain_read, NULL, NULL, NULL, NULL, NULL};

/* ---- fixture ----------------------------------------------------------- */

START_TEST(test_fixture_read)
{
    mx_recordio_reader *r;
    OK(mx_recordio_reader_open(fixture_path(), &r));
    for (int i = 1; i <= 10; i++) {
        mx_recordio_record rec;
        int got = 0;
        OK(mx_recordio_reader_next(r, &rec, &got));
        ck_assert_int_eq(got, 1);
        ck_assert_uint_eq(rec.offset, 52u * (unsigned)(i - 1));
        ck_assert_uint_eq(rec.size, i == 10 ? 54 : 44);
        ck_assert_uint_eq(rec.parts, 1);
        uint8_t want[64];
        size_t wn = sample_payload(i, want);
        ck_assert_uint_eq(rec.size, wn);
        ck_assert_mem_eq(rec.data, want, wn);

        mx_imrec im;
        OK(mx_imrec_parse(rec.data, rec.size, &im));
        ck_assert_uint_eq(im.header.flag, 0);
        ck_assert_float_eq(im.header.label, (float)(i % 2));
        ck_assert_float_eq(mx_imrec_label(&im, 0), (float)(i % 2));
        ck_assert_uint_eq(im.header.id, (uint64_t)i);
        ck_assert_uint_eq(im.header.id2, 0);
        ck_assert_uint_eq(im.image_size, i == 10 ? 30 : 20);
        char text[40] = "";
        for (int k = 0; k < 10; k++) sprintf(text + strlen(text), "%d\n", i);
        ck_assert_mem_eq(im.image, text, im.image_size);
    }
    mx_recordio_record rec;
    int got = 1;
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 0);
    mx_recordio_reader_free(r);
}
END_TEST

START_TEST(test_fixture_write_byte_exact)
{
    size_t fsize;
    uint8_t *fixture = slurp(fixture_path(), &fsize);
    ck_assert_uint_eq(fsize, 532);

    uint8_t store[10][64], *payloads[10];
    size_t sizes[10];
    for (int i = 0; i < 10; i++) {
        payloads[i] = store[i];
        sizes[i] = sample_payload(i + 1, store[i]);
    }
    /* to memory */
    bytes out = {0};
    uint64_t offs[10];
    write_mem(payloads, sizes, 10, &out, offs);
    ck_assert_uint_eq(out.n, 532);
    ck_assert_mem_eq(out.p, fixture, 532);
    for (int i = 0; i < 10; i++) ck_assert_uint_eq(offs[i], 52u * (unsigned)i);

    /* to a file */
    const char *path = tmp_path("sample_copy.rec");
    mx_recordio_writer *w;
    OK(mx_recordio_writer_open(path, &w));
    for (int i = 0; i < 10; i++) {
        uint64_t off;
        OK(mx_recordio_writer_write(w, payloads[i], sizes[i], &off));
        ck_assert_uint_eq(off, 52u * (unsigned)i);
    }
    ck_assert_uint_eq(mx_recordio_writer_tell(w), 532);
    ck_assert_uint_eq(mx_recordio_writer_escapes(w), 0);
    OK(mx_recordio_writer_close(w));
    size_t n;
    uint8_t *written = slurp(path, &n);
    ck_assert_uint_eq(n, 532);
    ck_assert_mem_eq(written, fixture, 532);

    /* the .idx im2rec would write for it */
    mx_recordio_index *idx;
    OK(mx_recordio_index_create(&idx));
    for (int i = 0; i < 10; i++) OK(mx_recordio_index_add(idx, i + 1, offs[i]));
    OK(mx_recordio_index_write(idx, tmp_path("sample_copy.idx")));
    size_t tn;
    char *text = (char *)slurp(tmp_path("sample_copy.idx"), &tn);
    const char *want = "1\t0\n2\t52\n3\t104\n4\t156\n5\t208\n6\t260\n7\t312\n8\t364\n9\t416\n10\t468\n";
    ck_assert_uint_eq(tn, strlen(want));
    ck_assert_mem_eq(text, want, tn);
    mx_recordio_index_free(idx);

    const char *names[] = {"sample_copy.rec", "sample_copy.idx"};
    tmp_cleanup(names, 2);
    free(text);
    free(written);
    free(out.p);
    free(fixture);
}
END_TEST

/* ---- framing and escaping ---------------------------------------------- */

START_TEST(test_abc_and_empty_exact)
{
    uint8_t *p[3] = {(uint8_t *)"abc", (uint8_t *)"", (uint8_t *)"12345678"};
    size_t n[3] = {3, 0, 8};
    bytes out = {0};
    uint64_t offs[3];
    write_mem(p, n, 1, &out, offs);
    const uint8_t abc[12] = {0x0A, 0x23, 0xD7, 0xCE, 0x03, 0, 0, 0, 0x61, 0x62, 0x63, 0x00};
    ck_assert_uint_eq(out.n, 12);
    ck_assert_mem_eq(out.p, abc, 12);

    write_mem(p + 1, n + 1, 1, &out, offs);
    const uint8_t empty[8] = {0x0A, 0x23, 0xD7, 0xCE, 0, 0, 0, 0};
    ck_assert_uint_eq(out.n, 8);
    ck_assert_mem_eq(out.p, empty, 8);

    /* 8-byte records occupy 16 bytes: offsets 0, 16, 32 */
    uint8_t *eight[3] = {p[2], p[2], p[2]};
    size_t en[3] = {8, 8, 8};
    write_mem(eight, en, 3, &out, offs);
    ck_assert_uint_eq(out.n, 48);
    ck_assert_uint_eq(offs[0], 0);
    ck_assert_uint_eq(offs[1], 16);
    ck_assert_uint_eq(offs[2], 32);

    /* and reading "abc" and "" back */
    mx_recordio_reader *r = mem_reader(abc, 12);
    mx_recordio_record rec;
    int got;
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(rec.size, 3);
    ck_assert_mem_eq(rec.data, "abc", 3);
    mx_recordio_reader_free(r);
    r = mem_reader(empty, 8);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(rec.size, 0);
    ck_assert_ptr_nonnull(rec.data);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 0);
    mx_recordio_reader_free(r);
    free(out.p);
}
END_TEST

typedef struct escape_case {
    const char *name;
    size_t len;
    size_t magic_at[4]; /* byte offsets of inserted magics, SIZE_MAX ends */
    unsigned nparts;
    unsigned cflags[5];
    size_t lens[5];
} escape_case;

START_TEST(test_magic_escaping)
{
    const size_t E = SIZE_MAX;
    const escape_case cases[] = {
        {"at start", 12, {0, E}, 2, {1, 3}, {0, 8}},
        {"middle", 16, {8, E}, 2, {1, 3}, {8, 4}},
        {"adjacent twice", 20, {4, 8, E}, 3, {1, 2, 3}, {4, 0, 8}},
        {"at end", 12, {8, E}, 2, {1, 3}, {8, 0}},
        {"at end, odd tail", 14, {8, E}, 2, {1, 3}, {8, 2}},
        {"only the magic", 4, {0, E}, 2, {1, 3}, {0, 0}},
        {"magic twice only", 8, {0, 4, E}, 3, {1, 2, 3}, {0, 0, 0}},
        {"three with gaps", 30, {0, 12, 24, E}, 4, {1, 2, 2, 3}, {0, 8, 8, 2}},
        {"unaligned 1", 12, {1, E}, 1, {0}, {12}},
        {"unaligned 2", 12, {6, E}, 1, {0}, {12}},
        {"unaligned 3", 11, {7, E}, 1, {0}, {11}},
        {"in incomplete tail word", 7, {3, E}, 1, {0}, {7}},
        {"aligned then unaligned", 16, {4, 9, E}, 2, {1, 3}, {4, 8}},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const escape_case *k = &cases[c];
        uint8_t payload[64];
        for (size_t i = 0; i < k->len; i++) payload[i] = (uint8_t)(0x40 + i);
        for (int m = 0; k->magic_at[m] != E; m++) memcpy(payload + k->magic_at[m], MAGIC, 4);

        uint8_t *pp = payload;
        size_t pn = k->len;
        bytes ours = {0}, ref = {0};
        write_mem(&pp, &pn, 1, &ours, NULL);
        ref_encode(&ref, payload, k->len);
        ck_assert_msg(ours.n == ref.n && memcmp(ours.p, ref.p, ref.n) == 0,
                      "%s: writer differs from the reference encoder", k->name);

        part parts[8];
        size_t np = walk_parts(ours.p, ours.n, parts, 8);
        ck_assert_msg(np == k->nparts, "%s: %zu parts, want %u", k->name, np, k->nparts);
        for (size_t i = 0; i < np; i++) {
            ck_assert_msg(parts[i].cflag == k->cflags[i], "%s: part %zu cflag %u want %u", k->name, i,
                          parts[i].cflag, k->cflags[i]);
            ck_assert_msg(parts[i].len == k->lens[i], "%s: part %zu len %zu want %zu", k->name, i,
                          parts[i].len, k->lens[i]);
        }

        mx_recordio_reader *r = mem_reader(ours.p, ours.n);
        mx_recordio_record rec;
        int got;
        OK(mx_recordio_reader_next(r, &rec, &got));
        ck_assert_int_eq(got, 1);
        ck_assert_msg(rec.size == k->len && memcmp(rec.data, payload, k->len) == 0,
                      "%s: read back differs", k->name);
        ck_assert_uint_eq(rec.parts, k->nparts);
        OK(mx_recordio_reader_next(r, &rec, &got));
        ck_assert_int_eq(got, 0);
        mx_recordio_reader_free(r);
        free(ours.p);
        free(ref.p);
    }
}
END_TEST

/* Random payloads dense with magics against the reference encoder. */
START_TEST(test_escaping_random_vs_reference)
{
    enum { N = 300 };
    uint8_t *payloads[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = rnd() % 80;
        payloads[i] = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)rnd();
        for (size_t j = 0; j + 4 <= sizes[i]; j++)
            if (rnd() % 5 == 0) memcpy(payloads[i] + j, MAGIC, 4);
    }
    bytes ours = {0}, ref = {0};
    uint64_t offs[N];
    write_mem(payloads, sizes, N, &ours, offs);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(offs[i], ref.n);
        ref_encode(&ref, payloads[i], sizes[i]);
    }
    ck_assert_uint_eq(ours.n, ref.n);
    ck_assert_mem_eq(ours.p, ref.p, ref.n);

    mx_recordio_reader *r = mem_reader(ours.p, ours.n);
    for (int i = 0; i < N; i++) {
        mx_recordio_record rec;
        int got;
        OK(mx_recordio_reader_next(r, &rec, &got));
        ck_assert_int_eq(got, 1);
        ck_assert_uint_eq(rec.offset, offs[i]);
        ck_assert_uint_eq(rec.size, sizes[i]);
        ck_assert(sizes[i] == 0 || memcmp(rec.data, payloads[i], sizes[i]) == 0);
    }
    mx_recordio_reader_free(r);
    for (int i = 0; i < N; i++) free(payloads[i]);
    free(ours.p);
    free(ref.p);
}
END_TEST

START_TEST(test_writer_refuses_large)
{
    mx_stream *s;
    mx_recordio_writer *w;
    OK(mx_stream_create_memory(&s));
    OK(mx_recordio_writer_create(s, 1, &w));
    uint8_t small[4] = {0};
    /* the size check comes before any byte is read or written */
    ck_assert_int_eq(mx_recordio_writer_write(w, small, (size_t)1 << 29, NULL), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "too large"));
    ck_assert_int_eq(mx_recordio_writer_write(w, small, SIZE_MAX, NULL), MX_ERR_INVALID);
    ck_assert_uint_eq(mx_recordio_writer_tell(w), 0);
    /* a refused record is not a failure: the writer still works */
    uint64_t off = 99;
    OK(mx_recordio_writer_write(w, small, 4, &off));
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(mx_recordio_writer_tell(w), 12);
    OK(mx_recordio_writer_close(w));
}
END_TEST

/* A sink that fails once `limit` bytes have been written. */
typedef struct failing_sink {
    size_t written, limit;
} failing_sink;
static mx_status failing_write(void *self, const void *buf, size_t size)
{
    (void)buf;
    failing_sink *f = self;
    if (f->written + size > f->limit) return MX_ERROR(MX_ERR_IO, "disk full (test)");
    f->written += size;
    return MX_OK;
}
static const mx_stream_ops failing_ops = {NULL, failing_write, NULL, NULL, NULL, NULL};

START_TEST(test_writer_errors)
{
    /* write failure: reported with the record offset, later writes refused */
    failing_sink sink = {0, 20};
    mx_stream *s;
    mx_recordio_writer *w;
    OK(mx_stream_create(&failing_ops, &sink, &s));
    OK(mx_recordio_writer_create(s, 0, &w)); /* no tell: offsets count from 0 */
    uint64_t off;
    OK(mx_recordio_writer_write(w, "abcd", 4, &off));
    ck_assert_uint_eq(off, 0);
    ck_assert_int_eq(mx_recordio_writer_write(w, "abcdefgh", 8, &off), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "disk full"));
    ck_assert(mentions_offset(mx_last_error(), 12));
    ck_assert_int_eq(mx_recordio_writer_write(w, "x", 1, &off), MX_ERR_INVALID);
    OK(mx_recordio_writer_close(w));
    OK(mx_stream_close(s));

    /* unaligned start position */
    OK(mx_stream_create_memory(&s));
    OK(mx_stream_write(s, "xy", 2));
    ck_assert_int_eq(mx_recordio_writer_create(s, 0, &w), MX_ERR_INVALID);
    ck_assert_ptr_null(w);
    OK(mx_stream_close(s));

    /* appending at an aligned position reports absolute offsets */
    OK(mx_stream_create_memory(&s));
    OK(mx_stream_write(s, "wxyz", 4));
    OK(mx_recordio_writer_create(s, 0, &w));
    OK(mx_recordio_writer_write(w, "a", 1, &off));
    ck_assert_uint_eq(off, 4);
    OK(mx_recordio_writer_close(w));
    OK(mx_stream_close(s));

    /* unopenable path */
    ck_assert_int_eq(mx_recordio_writer_open("/nonexistent-dir/x.rec", &w), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "/nonexistent-dir/x.rec"));

    /* a failed flush at close (buffered data, full device) is an error */
    if (access("/dev/full", W_OK) == 0) {
        OK(mx_recordio_writer_open("/dev/full", &w));
        OK(mx_recordio_writer_write(w, "abc", 3, NULL));
        ck_assert_int_eq(mx_recordio_writer_close(w), MX_ERR_IO);
        ck_assert_ptr_nonnull(strstr(mx_last_error(), "/dev/full"));
    }
}
END_TEST

/* ---- independent .rec + .idx, and our writer field by field ------------ */

START_TEST(test_independent_rec_idx)
{
    /* Hand-built from spec 1.1/1.2/1.6: key 7 = "hello" (5 bytes + 3 pad);
     * key 3 = "ABCD" MAGIC "EFGH" MAGIC "z" (parts cflag 1, 2, 3); key -2 =
     * the empty record. */
    bytes rec = {0};
    put(&rec, MAGIC, 4); /* record key 7 at 0 */
    put_le32(&rec, 5);
    put(&rec, "hello\0\0\0", 8);
    put(&rec, MAGIC, 4); /* record key 3 at 16: cflag 1, "ABCD" */
    put_le32(&rec, 1u << 29 | 4);
    put(&rec, "ABCD", 4);
    put(&rec, MAGIC, 4); /* cflag 2, "EFGH" */
    put_le32(&rec, 2u << 29 | 4);
    put(&rec, "EFGH", 4);
    put(&rec, MAGIC, 4); /* cflag 3, "z" + pad */
    put_le32(&rec, 3u << 29 | 1);
    put(&rec, "z\0\0\0", 4);
    put(&rec, MAGIC, 4); /* record key -2 at 52: empty */
    put_le32(&rec, 0);
    ck_assert_uint_eq(rec.n, 60);
    const char *idx_text = "7\t0\n3\t16\n-2\t52\n";
    spit(tmp_path("hand.rec"), rec.p, rec.n);
    spit(tmp_path("hand.idx"), idx_text, strlen(idx_text));

    uint8_t want3[17];
    memcpy(want3, "ABCD", 4);
    memcpy(want3 + 4, MAGIC, 4);
    memcpy(want3 + 8, "EFGH", 4);
    memcpy(want3 + 12, MAGIC, 4);
    want3[16] = 'z';

    mx_recordio_index *idx;
    OK(mx_recordio_index_read(tmp_path("hand.idx"), &idx));
    size_t n;
    const mx_recordio_index_entry *e = mx_recordio_index_entries(idx, &n);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(e[0].key, 7);
    ck_assert_uint_eq(e[0].offset, 0);
    ck_assert_int_eq(e[1].key, 3);
    ck_assert_uint_eq(e[1].offset, 16);
    ck_assert_int_eq(e[2].key, -2);
    ck_assert_uint_eq(e[2].offset, 52);

    mx_recordio_reader *r;
    OK(mx_recordio_reader_open(tmp_path("hand.rec"), &r));
    const int64_t keys[3] = {3, -2, 7};
    for (int i = 0; i < 3; i++) {
        uint64_t off;
        int found;
        OK(mx_recordio_index_find(idx, keys[i], &off, &found));
        ck_assert_int_eq(found, 1);
        mx_recordio_record rec2;
        OK(mx_recordio_reader_read_at(r, off, &rec2));
        ck_assert_uint_eq(rec2.offset, off);
        if (keys[i] == 3) {
            ck_assert_uint_eq(rec2.size, 17);
            ck_assert_mem_eq(rec2.data, want3, 17);
            ck_assert_uint_eq(rec2.parts, 3);
        } else if (keys[i] == 7) {
            ck_assert_uint_eq(rec2.size, 5);
            ck_assert_mem_eq(rec2.data, "hello", 5);
        } else {
            ck_assert_uint_eq(rec2.size, 0);
        }
    }
    uint64_t off;
    int found = 1;
    OK(mx_recordio_index_find(idx, 4, &off, &found));
    ck_assert_int_eq(found, 0);
    mx_recordio_reader_free(r);
    mx_recordio_index_free(idx);

    /* our writer produces exactly the hand-built bytes */
    uint8_t *payloads[3] = {(uint8_t *)"hello", want3, (uint8_t *)""};
    size_t sizes[3] = {5, 17, 0};
    bytes ours = {0};
    uint64_t offs[3];
    write_mem(payloads, sizes, 3, &ours, offs);
    ck_assert_uint_eq(ours.n, rec.n);
    ck_assert_mem_eq(ours.p, rec.p, rec.n);
    ck_assert_uint_eq(offs[1], 16);
    ck_assert_uint_eq(offs[2], 52);

    const char *names[] = {"hand.rec", "hand.idx"};
    tmp_cleanup(names, 2);
    free(ours.p);
    free(rec.p);
}
END_TEST

START_TEST(test_writer_field_by_field)
{
    enum { N = 40 };
    uint8_t *payloads[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = (size_t)i * 3 % 37;
        payloads[i] = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)(i * 31 + j);
        if (i % 4 == 1 && sizes[i] >= 8) memcpy(payloads[i] + 4, MAGIC, 4);
    }
    const char *path = tmp_path("fields.rec");
    mx_recordio_writer *w;
    uint64_t offs[N];
    OK(mx_recordio_writer_open(path, &w));
    for (int i = 0; i < N; i++) OK(mx_recordio_writer_write(w, payloads[i], sizes[i], &offs[i]));
    OK(mx_recordio_writer_close(w));

    size_t n;
    uint8_t *b = slurp(path, &n);
    part parts[4 * N];
    size_t np = walk_parts(b, n, parts, 4 * N);
    /* walk parts record by record: cflags, lengths, bytes */
    size_t k = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_uint_lt(k, np);
        ck_assert_uint_eq(parts[k].off, offs[i]);
        ck_assert_uint_eq(parts[k].off % 4, 0);
        int escaped = i % 4 == 1 && sizes[i] >= 8;
        if (!escaped) {
            ck_assert_uint_eq(parts[k].cflag, 0);
            ck_assert_uint_eq(parts[k].len, sizes[i]);
            ck_assert(sizes[i] == 0 || memcmp(b + parts[k].off + 8, payloads[i], sizes[i]) == 0);
            k++;
        } else {
            ck_assert_uint_eq(parts[k].cflag, 1);
            ck_assert_uint_eq(parts[k].len, 4);
            ck_assert_mem_eq(b + parts[k].off + 8, payloads[i], 4);
            ck_assert_uint_eq(parts[k + 1].cflag, 3);
            ck_assert_uint_eq(parts[k + 1].len, sizes[i] - 8);
            ck_assert_uint_eq(parts[k + 1].off, parts[k].off + 12);
            ck_assert(sizes[i] == 8 || memcmp(b + parts[k + 1].off + 8, payloads[i] + 8, sizes[i] - 8) == 0);
            k += 2;
        }
    }
    ck_assert_uint_eq(k, np);
    const char *names[] = {"fields.rec"};
    tmp_cleanup(names, 1);
    free(b);
    for (int i = 0; i < N; i++) free(payloads[i]);
}
END_TEST

/* ---- truncation -------------------------------------------------------- */

/* A small multi-record file: a multi-part record, an empty one, padding. */
static void small_file(bytes *out, uint64_t *offs, uint8_t **payloads, size_t *sizes, size_t *count)
{
    static uint8_t p0[5] = "hello", p1[1], p2[16], p3[8] = "8bytes!!", p4[13] = "thirteen byte";
    memcpy(p2, "ab", 2);
    memcpy(p2 + 4, MAGIC, 4);
    memcpy(p2 + 8, MAGIC, 4);
    memcpy(p2 + 12, "wxyz", 4);
    p2[2] = 'c';
    p2[3] = 'd';
    payloads[0] = p0, sizes[0] = 5;
    payloads[1] = p1, sizes[1] = 0;
    payloads[2] = p2, sizes[2] = 16;
    payloads[3] = p3, sizes[3] = 8;
    payloads[4] = p4, sizes[4] = 13;
    *count = 5;
    write_mem(payloads, sizes, 5, out, offs);
}

/* Reads every cut of the small file through `make` and checks the results. */
typedef mx_recordio_reader *(*reader_maker)(const uint8_t *d, size_t n, void *ctx);

static void check_truncations(reader_maker make, void *ctx, size_t step)
{
    bytes file = {0};
    uint64_t offs[5];
    uint8_t *payloads[5];
    size_t sizes[5], count;
    small_file(&file, offs, payloads, sizes, &count);
    part parts[16];
    size_t np = walk_parts(file.p, file.n, parts, 16);
    ck_assert_uint_eq(np, 7);

    for (size_t cut = 0; cut < file.n; cut += step) {
        mx_recordio_reader *r = make(file.p, cut, ctx);
        size_t complete = 0; /* records wholly before the cut */
        while (complete < count && (complete + 1 < count ? offs[complete + 1] : file.n) <= cut) complete++;
        for (size_t i = 0; i < complete; i++) {
            mx_recordio_record rec;
            int got;
            OK(mx_recordio_reader_next(r, &rec, &got));
            ck_assert_int_eq(got, 1);
            ck_assert_uint_eq(rec.offset, offs[i]);
            ck_assert_uint_eq(rec.size, sizes[i]);
            ck_assert(sizes[i] == 0 || memcmp(rec.data, payloads[i], sizes[i]) == 0);
        }
        mx_recordio_record rec;
        int got = 7;
        mx_status st = mx_recordio_reader_next(r, &rec, &got);
        int at_boundary = complete == count || offs[complete] == cut;
        if (at_boundary) {
            ck_assert_msg(st == MX_OK && got == 0, "cut %zu: want clean end, got %d (%s)", cut, st,
                          mx_last_error());
        } else {
            ck_assert_msg(st == MX_ERR_FORMAT, "cut %zu: want a format error, got %d", cut, st);
            ck_assert_int_eq(got, 0);
            size_t last = 0; /* the part the cut falls in (or starts at) */
            for (size_t k = 0; k < np; k++)
                if (parts[k].off <= cut) last = parts[k].off;
            ck_assert_msg(mentions_offset(mx_last_error(), last), "cut %zu: \"%s\" does not name offset %zu",
                          cut, mx_last_error(), last);
            ck_assert_msg(strstr(mx_last_error(), "truncated") || strstr(mx_last_error(), "cut short"),
                          "cut %zu: %s", cut, mx_last_error());
            mx_recordio_skip skip;
            OK(mx_recordio_reader_resync(r, &skip));
            ck_assert_uint_eq(skip.begin, offs[complete]);
            ck_assert_uint_eq(skip.end, cut);
            OK(mx_recordio_reader_next(r, &rec, &got));
            ck_assert_int_eq(got, 0);
        }
        mx_recordio_reader_free(r);
    }
    free(file.p);
}

static mx_recordio_reader *make_mem(const uint8_t *d, size_t n, void *ctx)
{
    (void)ctx;
    return mem_reader(d, n);
}

static mx_recordio_reader *make_plain(const uint8_t *d, size_t n, void *ctx)
{
    plain_src *p = ctx;
    *p = (plain_src){d, n, 0, 0};
    mx_stream *s;
    mx_recordio_reader *r;
    OK(mx_stream_create(&plain_ops, p, &s));
    OK(mx_recordio_reader_create(s, 1, &r));
    return r;
}

static mx_recordio_reader *make_file(const uint8_t *d, size_t n, void *ctx)
{
    (void)ctx;
    spit(tmp_path("cut.rec"), d, n);
    mx_recordio_reader *r;
    OK(mx_recordio_reader_open(tmp_path("cut.rec"), &r));
    return r;
}

START_TEST(test_truncation_every_cut)
{
    check_truncations(make_mem, NULL, 1);
}
END_TEST

START_TEST(test_truncation_unknown_size_and_file)
{
    plain_src p;
    check_truncations(make_plain, &p, 1); /* no size, no seek: chunked reads */
    check_truncations(make_file, NULL, 3);
    const char *names[] = {"cut.rec"};
    tmp_cleanup(names, 1);
}
END_TEST

START_TEST(test_huge_claimed_length)
{
    /* a header claiming 2^29-1 bytes in a 24-byte file: an error naming the
     * offset, and (sizeless stream) no read request beyond the chunk size */
    bytes b = {0};
    put(&b, MAGIC, 4);
    put_le32(&b, 0x1FFFFFFF);
    put(&b, "0123456789abcdef", 16);
    mx_recordio_reader *r = mem_reader(b.p, b.n);
    mx_recordio_record rec;
    int got;
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "claims 536870911"));
    ck_assert(mentions_offset(mx_last_error(), 0));
    mx_recordio_reader_free(r);

    plain_src p;
    r = make_plain(b.p, b.n, &p);
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    ck_assert(mentions_offset(mx_last_error(), 0));
    ck_assert_uint_le(p.max_req, (size_t)1 << 20);
    mx_recordio_reader_free(r);
    free(b.p);
}
END_TEST

START_TEST(test_large_record)
{
    /* 3 MiB + 5 bytes with aligned magics far apart: exercises the direct
     * (window-bypassing) reads and, without a known size, chunked growth */
    size_t n = ((size_t)3 << 20) + 5;
    uint8_t *big = malloc(n);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < n; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
    const size_t at[3] = {0, (size_t)1 << 20, ((size_t)2 << 20) + 4};
    for (int k = 0; k < 3; k++) memcpy(big + at[k], MAGIC, 4);
    uint8_t *ps[3] = {(uint8_t *)"pre", big, (uint8_t *)"post"};
    size_t ss[3] = {3, n, 4};
    bytes f = {0}, ref = {0};
    uint64_t offs[3];
    write_mem(ps, ss, 3, &f, offs);
    for (int i = 0; i < 3; i++) ref_encode(&ref, ps[i], ss[i]);
    ck_assert_uint_eq(f.n, ref.n);
    ck_assert_mem_eq(f.p, ref.p, ref.n);
    plain_src p;
    for (int pass = 0; pass < 2; pass++) {
        mx_recordio_reader *r = pass == 0 ? mem_reader(f.p, f.n) : make_plain(f.p, f.n, &p);
        for (int i = 0; i < 3; i++) {
            mx_recordio_record rec;
            int got;
            OK(mx_recordio_reader_next(r, &rec, &got));
            ck_assert_int_eq(got, 1);
            ck_assert_uint_eq(rec.offset, offs[i]);
            ck_assert_uint_eq(rec.size, ss[i]);
            ck_assert(memcmp(rec.data, ps[i], ss[i]) == 0);
            ck_assert_uint_eq(rec.parts, i == 1 ? 4 : 1);
        }
        mx_recordio_reader_free(r);
    }
    free(big);
    free(f.p);
    free(ref.p);
}
END_TEST

/* ---- corruption and resync --------------------------------------------- */

/* Random bytes inserted at any offset, aligned or not, shift every later
 * record off the 4-byte grid: the reader scans byte by byte and delivers
 * every record the insertion did not land inside, each once and intact,
 * and nothing made of the garbage. 300 files, garbage of 1 to 13 bytes
 * (sometimes a magic word and a cflag-0 header whose length runs past the
 * end: a head by the spec's test, not by the chain check). */
START_TEST(test_inserted_garbage_any_offset)
{
    enum { N = 24, TRIALS = 300 };
    for (int trial = 0; trial < TRIALS; trial++) {
        uint8_t *payloads[N];
        size_t sizes[N];
        for (int i = 0; i < N; i++) {
            sizes[i] = 1 + rnd() % 40;
            payloads[i] = malloc(sizes[i]);
            for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)rnd();
        }
        bytes file = {0};
        uint64_t offs[N + 1];
        write_mem(payloads, sizes, N, &file, offs);
        offs[N] = file.n;
        size_t ins = rnd() % (file.n + 1), glen = 1 + rnd() % 13;
        uint8_t garbage[13];
        for (size_t j = 0; j < glen; j++) garbage[j] = (uint8_t)rnd();
        if (glen >= 8 && trial % 3 == 0) { /* a fake head: magic, cflag 0, a length past the end */
            memcpy(garbage, MAGIC, 4);
            uint32_t lrec = (uint32_t)(100000 + rnd() % 1000);
            memcpy(garbage + 4, &lrec, 4);
        }
        uint8_t *bad = malloc(file.n + glen);
        memcpy(bad, file.p, ins);
        memcpy(bad + ins, garbage, glen);
        memcpy(bad + ins + glen, file.p + ins, file.n - ins);
        mx_recordio_reader *r = mem_reader(bad, file.n + glen);
        int seen[N] = {0};
        for (int guard = 0; guard < 4 * N; guard++) {
            mx_recordio_record rec;
            int got;
            mx_status st = mx_recordio_reader_next(r, &rec, &got);
            if (st == MX_ERR_FORMAT) {
                OK(mx_recordio_reader_resync(r, NULL));
                continue;
            }
            ck_assert_msg(st == MX_OK, "%s", mx_last_error());
            if (!got) break;
            /* Back to the clean file's offsets. */
            uint64_t off = rec.offset >= ins + glen ? rec.offset - glen : rec.offset;
            int i = 0;
            while (i < N && offs[i] != off) i++;
            ck_assert_msg(i < N && rec.offset != ins, "trial %d: a record made of garbage at %llu (inserted %zu at %zu)",
                          trial, (unsigned long long)rec.offset, glen, ins);
            seen[i]++;
            /* Garbage inside a payload keeps its framing: RecordIO has no
             * checksum, so that record may come out with the garbage in it
             * (the image decoder is the next check). Every other is exact. */
            if (ins > offs[i] && ins < offs[i + 1]) continue;
            ck_assert_uint_eq(rec.size, sizes[i]);
            ck_assert_mem_eq(rec.data, payloads[i], sizes[i]);
        }
        for (int i = 0; i < N; i++) {
            bool hit = ins > offs[i] && ins < offs[i + 1]; /* strictly inside record i */
            ck_assert_msg(hit ? seen[i] <= 1 : seen[i] == 1,
                          "trial %d: record %d (at %llu) seen %d times, garbage of %zu at %zu", trial, i,
                          (unsigned long long)offs[i], seen[i], glen, ins);
        }
        mx_recordio_reader_free(r);
        free(bad);
        free(file.p);
        for (int i = 0; i < N; i++) free(payloads[i]);
    }
}
END_TEST

START_TEST(test_corrupt_magic_resync)
{
    enum { N = 20 };
    uint8_t *payloads[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = 10 + rnd() % 60;
        payloads[i] = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)rnd();
        if (i == 5 || i == 12) memcpy(payloads[i] + 4, MAGIC, 4); /* multi-part */
    }
    bytes file = {0};
    uint64_t offs[N];
    write_mem(payloads, sizes, N, &file, offs);
    file.p[offs[7] + 1] ^= 0xFF;                     /* record 7: first header */
    uint64_t second12 = offs[12] + 8 + 4;             /* record 12: second part */
    ck_assert_mem_eq(file.p + second12, MAGIC, 4);
    file.p[second12 + 3] ^= 0x01;

    mx_recordio_reader *r = mem_reader(file.p, file.n);
    int seen[N] = {0}, errors = 0;
    for (;;) {
        mx_recordio_record rec;
        int got;
        mx_status st = mx_recordio_reader_next(r, &rec, &got);
        if (st == MX_ERR_FORMAT) {
            errors++;
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", mx_last_error());
            ck_assert_ptr_nonnull(strstr(msg, "bad magic"));
            int which = errors == 1 ? 7 : 12;
            ck_assert_msg(mentions_offset(msg, which == 7 ? offs[7] : second12), "%s", msg);
            if (which == 12) ck_assert_msg(mentions_offset(msg, offs[12]), "%s", msg);
            /* sticky until resync */
            mx_error_clear();
            ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
            ck_assert_str_eq(mx_last_error(), msg);
            mx_recordio_skip skip;
            OK(mx_recordio_reader_resync(r, &skip));
            ck_assert_uint_eq(skip.begin, offs[which]);
            ck_assert_uint_eq(skip.end, offs[which + 1]);
            continue;
        }
        ck_assert_msg(st == MX_OK, "%s", mx_last_error());
        if (!got) break;
        int i = 0;
        while (i < N && offs[i] != rec.offset) i++;
        ck_assert_int_lt(i, N);
        ck_assert_uint_eq(rec.size, sizes[i]);
        ck_assert_mem_eq(rec.data, payloads[i], sizes[i]);
        seen[i]++;
    }
    ck_assert_int_eq(errors, 2);
    for (int i = 0; i < N; i++) ck_assert_int_eq(seen[i], (i == 7 || i == 12) ? 0 : 1);
    const mx_recordio_skip *skips;
    size_t ns;
    mx_recordio_reader_skips(r, &skips, &ns);
    ck_assert_uint_eq(ns, 2);
    ck_assert_uint_eq(skips[0].begin, offs[7]);
    ck_assert_uint_eq(skips[1].end, offs[13]);
    /* nothing to resync now */
    ck_assert_int_eq(mx_recordio_reader_resync(r, NULL), MX_ERR_INVALID);
    mx_recordio_reader_free(r);

    /* the same through a stream that cannot seek or tell its size */
    plain_src p;
    r = make_plain(file.p, file.n, &p);
    int delivered = 0;
    for (;;) {
        mx_recordio_record rec;
        int got;
        mx_status st = mx_recordio_reader_next(r, &rec, &got);
        if (st == MX_ERR_FORMAT) {
            OK(mx_recordio_reader_resync(r, NULL));
            continue;
        }
        OK(st);
        if (!got) break;
        delivered++;
    }
    ck_assert_int_eq(delivered, N - 2);
    mx_recordio_reader_free(r);
    for (int i = 0; i < N; i++) free(payloads[i]);
    free(file.p);
}
END_TEST

START_TEST(test_corrupt_structure_cases)
{
    mx_recordio_record rec;
    int got;
    mx_recordio_skip skip;

    /* (a) a record that starts with a continuation part: seek into the
     * middle of a multi-part record */
    uint8_t mp[12];
    memcpy(mp, "1234", 4);
    memcpy(mp + 4, MAGIC, 4);
    memcpy(mp + 8, "5678", 4);
    uint8_t *ps[3] = {(uint8_t *)"first", mp, (uint8_t *)"last"};
    size_t ss[3] = {5, 12, 4};
    bytes f = {0};
    uint64_t offs[3];
    write_mem(ps, ss, 3, &f, offs);
    uint64_t cont = offs[1] + 12; /* the cflag-3 part */
    mx_recordio_reader *r = mem_reader(f.p, f.n);
    OK(mx_recordio_reader_seek(r, cont));
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "continuation part (cflag 3)"));
    ck_assert(mentions_offset(mx_last_error(), cont));
    OK(mx_recordio_reader_resync(r, &skip));
    ck_assert_uint_eq(skip.begin, cont);
    ck_assert_uint_eq(skip.end, offs[2]);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_mem_eq(rec.data, "last", 4);
    /* find_head from the same place agrees (spec 1.4) */
    mx_stream *s;
    OK(mx_stream_open_memory(f.p, f.n, &s));
    uint64_t head;
    OK(mx_recordio_find_head(s, cont, &head));
    ck_assert_uint_eq(head, offs[2]);
    OK(mx_recordio_find_head(s, offs[1], &head));
    ck_assert_uint_eq(head, offs[1]);
    OK(mx_recordio_find_head(s, offs[1] + 4, &head));
    ck_assert_uint_eq(head, offs[2]);
    OK(mx_recordio_find_head(s, offs[2] + 4, &head));
    ck_assert_uint_eq(head, f.n);
    ck_assert_int_eq(mx_recordio_find_head(s, 2, &head), MX_ERR_INVALID);
    OK(mx_stream_close(s));
    mx_recordio_reader_free(r);

    /* A magic followed by a head's magic (corrupt data): the search steps
     * one word, so the head at 4 is found from 0 as from 4, and partitions
     * of such data cannot overlap (found by fuzz_recordio). */
    bytes mm = {0};
    put(&mm, MAGIC, 4);
    put(&mm, MAGIC, 4);
    put_le32(&mm, 1u << 29 | 4);
    put(&mm, "AAAA", 4);
    OK(mx_stream_open_memory(mm.p, mm.n, &s));
    OK(mx_recordio_find_head(s, 0, &head));
    ck_assert_uint_eq(head, 4);
    OK(mx_stream_close(s));
    free(mm.p);

    /* (b) cflag 1 followed by a new record (cflag 0): the unfinished record
     * is skipped, the new one delivered */
    bytes b = {0};
    put(&b, MAGIC, 4);
    put_le32(&b, 1u << 29 | 4);
    put(&b, "AAAA", 4);
    put(&b, MAGIC, 4);
    put_le32(&b, 2);
    put(&b, "hi\0\0", 4);
    r = mem_reader(b.p, b.n);
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "unfinished"));
    ck_assert(mentions_offset(mx_last_error(), 0));
    ck_assert(mentions_offset(mx_last_error(), 12));
    OK(mx_recordio_reader_resync(r, &skip));
    ck_assert_uint_eq(skip.begin, 0);
    ck_assert_uint_eq(skip.end, 12);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_uint_eq(rec.offset, 12);
    ck_assert_uint_eq(rec.size, 2);
    ck_assert_mem_eq(rec.data, "hi", 2);
    mx_recordio_reader_free(r);

    /* (c) a corrupted length (too large) and an invalid cflag: reported,
     * then the following records are delivered */
    bytes c = {0};
    uint8_t *pc[5] = {(uint8_t *)"r0", (uint8_t *)"r1r1r1", (uint8_t *)"r2", (uint8_t *)"r3", (uint8_t *)"r4"};
    size_t sc[5] = {2, 6, 2, 2, 2};
    uint64_t oc[5];
    write_mem(pc, sc, 5, &c, oc);
    c.p[oc[1] + 7] = 0x1F; /* lrec of record 1: length 0x1F000006 */
    c.p[oc[3] + 7] = 0xE0; /* lrec of record 3: cflag 7 */
    r = mem_reader(c.p, c.n);
    const char *want[3] = {"r0", "r2", "r4"};
    int k = 0, errs = 0;
    for (;;) {
        mx_status st = mx_recordio_reader_next(r, &rec, &got);
        if (st == MX_ERR_FORMAT) {
            errs++;
            if (errs == 1) {
                ck_assert_ptr_nonnull(strstr(mx_last_error(), "claims"));
                ck_assert(mentions_offset(mx_last_error(), oc[1]));
            } else {
                ck_assert_ptr_nonnull(strstr(mx_last_error(), "invalid cflag 7"));
                ck_assert(mentions_offset(mx_last_error(), oc[3]));
            }
            OK(mx_recordio_reader_resync(r, &skip));
            ck_assert_uint_eq(skip.end, errs == 1 ? oc[2] : oc[4]);
            continue;
        }
        OK(st);
        if (!got) break;
        ck_assert_int_lt(k, 3);
        ck_assert_uint_eq(rec.size, 2);
        ck_assert_mem_eq(rec.data, want[k], 2);
        k++;
    }
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(errs, 2);

    /* (d) seek clears the error; seeks must be aligned and in range */
    OK(mx_recordio_reader_seek(r, oc[1]));
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    OK(mx_recordio_reader_seek(r, oc[2]));
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_mem_eq(rec.data, "r2", 2);
    ck_assert_int_eq(mx_recordio_reader_seek(r, 2), MX_ERR_INVALID);
    ck_assert_int_eq(mx_recordio_reader_seek(r, c.n + 4), MX_ERR_INVALID);
    ck_assert_int_eq(mx_recordio_reader_read_at(r, c.n, &rec), MX_ERR_FORMAT);
    ck_assert_int_eq(mx_recordio_reader_set_range(r, 8, 4), MX_ERR_INVALID);
    mx_recordio_reader_free(r);

    /* (e) a dangling magic as the last word */
    bytes d = {0};
    put(&d, MAGIC, 4);
    put_le32(&d, 0);
    put(&d, MAGIC, 4);
    r = mem_reader(d.p, d.n);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(mx_recordio_reader_next(r, &rec, &got), MX_ERR_FORMAT);
    ck_assert(mentions_offset(mx_last_error(), 8));
    OK(mx_recordio_reader_resync(r, &skip));
    ck_assert_uint_eq(skip.begin, 8);
    ck_assert_uint_eq(skip.end, 12);
    OK(mx_recordio_reader_next(r, &rec, &got));
    ck_assert_int_eq(got, 0);
    mx_recordio_reader_free(r);
    OK(mx_stream_open_memory(d.p, d.n, &s));
    OK(mx_recordio_find_head(s, 4, &head));
    ck_assert_uint_eq(head, 12);
    OK(mx_stream_close(s));

    free(f.p);
    free(b.p);
    free(c.p);
    free(d.p);
}
END_TEST

/* ---- partitions -------------------------------------------------------- */

START_TEST(test_partition_nominal_values)
{
    uint64_t b, e;
    /* total 532 in 3 parts: ceil(532/3) = 178 -> 180 */
    OK(mx_recordio_partition_nominal(532, 3, 0, &b, &e));
    ck_assert_uint_eq(b, 0);
    ck_assert_uint_eq(e, 180);
    OK(mx_recordio_partition_nominal(532, 3, 2, &b, &e));
    ck_assert_uint_eq(b, 360);
    ck_assert_uint_eq(e, 532);
    /* more parts than words: trailing parts are empty */
    OK(mx_recordio_partition_nominal(8, 5, 4, &b, &e));
    ck_assert_uint_eq(b, 8);
    ck_assert_uint_eq(e, 8);
    ck_assert_int_eq(mx_recordio_partition_nominal(8, 0, 0, &b, &e), MX_ERR_INVALID);
    ck_assert_int_eq(mx_recordio_partition_nominal(8, 2, 2, &b, &e), MX_ERR_INVALID);
    OK(mx_recordio_partition_nominal(UINT64_MAX - 3, 2, 1, &b, &e));
    ck_assert_uint_eq(e, UINT64_MAX - 3);

    /* sample.rec in 3 parts: heads at 0, 208 (>= 180), 364 (>= 360) */
    mx_stream *s;
    OK(mx_stream_open_file(fixture_path(), "rb", &s));
    OK(mx_recordio_partition(s, 3, 0, &b, &e));
    ck_assert_uint_eq(b, 0);
    ck_assert_uint_eq(e, 208);
    OK(mx_recordio_partition(s, 3, 1, &b, &e));
    ck_assert_uint_eq(b, 208);
    ck_assert_uint_eq(e, 364);
    OK(mx_recordio_partition(s, 3, 2, &b, &e));
    ck_assert_uint_eq(b, 364);
    ck_assert_uint_eq(e, 532);
    OK(mx_stream_close(s));

    /* a size that is not a multiple of 4 is refused */
    OK(mx_stream_open_memory("abcdef", 6, &s));
    ck_assert_int_eq(mx_recordio_partition(s, 2, 0, &b, &e), MX_ERR_FORMAT);
    OK(mx_stream_close(s));

    /* index partition (spec 1.7) */
    size_t first, count;
    OK(mx_recordio_index_partition(10, 3, 2, &first, &count));
    ck_assert_uint_eq(first, 8);
    ck_assert_uint_eq(count, 2);
    OK(mx_recordio_index_partition(10, 4, 3, &first, &count));
    ck_assert_uint_eq(first, 9);
    ck_assert_uint_eq(count, 1);
    OK(mx_recordio_index_partition(2, 3, 2, &first, &count));
    ck_assert_uint_eq(count, 0);
    OK(mx_recordio_index_partition(0, 1, 0, &first, &count));
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(mx_recordio_index_partition(10, 3, 3, &first, &count), MX_ERR_INVALID);
}
END_TEST

START_TEST(test_partition_coverage)
{
    enum { N = 100 };
    uint8_t *payloads[N];
    size_t sizes[N];
    int multi = 0;
    for (int i = 0; i < N; i++) {
        sizes[i] = rnd() % 200;
        payloads[i] = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)rnd();
        if (i % 4 == 0 && sizes[i] >= 4) {
            for (int m = 0; m < 1 + i % 3; m++) memcpy(payloads[i] + rnd() % (sizes[i] / 4) * 4, MAGIC, 4);
            multi++;
        }
    }
    ck_assert_int_ge(multi, 15);
    const char *path = tmp_path("parts.rec");
    mx_recordio_writer *w;
    uint64_t offs[N];
    OK(mx_recordio_writer_open(path, &w));
    for (int i = 0; i < N; i++) OK(mx_recordio_writer_write(w, payloads[i], sizes[i], &offs[i]));
    ck_assert_uint_gt(mx_recordio_writer_escapes(w), 15);
    uint64_t total = mx_recordio_writer_tell(w);
    OK(mx_recordio_writer_close(w));

    const uint32_t nps[] = {1, 2, 3, 4, 5, 6, 7, 13, 64, 150};
    for (size_t t = 0; t < sizeof(nps) / sizeof(nps[0]); t++) {
        uint32_t np = nps[t];
        int next = 0; /* the next record expected, in order across parts */
        uint64_t step = (total + np - 1) / np;
        step = (step + 3) / 4 * 4;
        for (uint32_t k = 0; k < np; k++) {
            mx_stream *s;
            uint64_t b, e;
            OK(mx_stream_open_file(path, "rb", &s));
            OK(mx_recordio_partition(s, np, k, &b, &e));
            OK(mx_stream_close(s));
            /* independent expectation: nominal range moved to the first
             * record offset at or after it */
            uint64_t nb = step * k < total ? step * k : total;
            uint64_t ne = step * (k + 1) < total ? step * (k + 1) : total;
            uint64_t wb = nb, we = ne;
            if (nb != ne) {
                if (nb != 0) {
                    wb = total;
                    for (int i = N - 1; i >= 0; i--) if (offs[i] >= nb) wb = offs[i];
                }
                if (ne != total) {
                    we = total;
                    for (int i = N - 1; i >= 0; i--) if (offs[i] >= ne) we = offs[i];
                }
            }
            ck_assert_msg(b == wb && e == we, "np %u part %u: [%llu,%llu) want [%llu,%llu)", np, k,
                          (unsigned long long)b, (unsigned long long)e, (unsigned long long)wb,
                          (unsigned long long)we);

            mx_recordio_reader *r;
            OK(mx_recordio_reader_open(path, &r));
            OK(mx_recordio_reader_set_range(r, b, e));
            for (;;) {
                mx_recordio_record rec;
                int got;
                OK(mx_recordio_reader_next(r, &rec, &got));
                if (!got) break;
                ck_assert_int_lt(next, N);
                ck_assert_msg(rec.offset == offs[next], "np %u part %u: record at %llu, want #%d at %llu",
                              np, k, (unsigned long long)rec.offset, next, (unsigned long long)offs[next]);
                ck_assert_uint_ge(rec.offset, b);
                ck_assert_uint_lt(rec.offset, e);
                ck_assert_uint_eq(rec.size, sizes[next]);
                ck_assert(sizes[next] == 0 || memcmp(rec.data, payloads[next], sizes[next]) == 0);
                next++;
            }
            mx_recordio_reader_free(r);
        }
        ck_assert_msg(next == N, "num_parts %u covered %d of %d records", np, next, N);
    }
    const char *names[] = {"parts.rec"};
    tmp_cleanup(names, 1);
    for (int i = 0; i < N; i++) free(payloads[i]);
}
END_TEST

/* ---- .idx -------------------------------------------------------------- */

START_TEST(test_idx_random_access)
{
    enum { N = 50 };
    uint8_t *payloads[N];
    size_t sizes[N];
    int64_t keys[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = rnd() % 100;
        payloads[i] = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) payloads[i][j] = (uint8_t)rnd();
        if (i % 3 == 0 && sizes[i] >= 12) memcpy(payloads[i] + 8, MAGIC, 4);
        keys[i] = 1000 + (int64_t)((i * 37) % N) * 7; /* distinct, not in order */
    }
    const char *rec_path = tmp_path("ra.rec"), *idx_path = tmp_path("ra.idx");
    mx_recordio_writer *w;
    mx_recordio_index *idx;
    OK(mx_recordio_writer_open(rec_path, &w));
    OK(mx_recordio_index_create(&idx));
    uint64_t offs[N];
    for (int i = 0; i < N; i++) {
        OK(mx_recordio_writer_write(w, payloads[i], sizes[i], &offs[i]));
        OK(mx_recordio_index_add(idx, keys[i], offs[i]));
    }
    OK(mx_recordio_writer_close(w));
    OK(mx_recordio_index_write(idx, idx_path));
    mx_recordio_index_free(idx);

    /* the text is exactly "key\toffset\n" per record in write order */
    size_t tn;
    char *text = (char *)slurp(idx_path, &tn);
    bytes want = {0};
    for (int i = 0; i < N; i++) {
        char line[64];
        int n = snprintf(line, sizeof(line), "%lld\t%llu\n", (long long)keys[i], (unsigned long long)offs[i]);
        put(&want, line, (size_t)n);
    }
    ck_assert_uint_eq(tn, want.n);
    ck_assert_mem_eq(text, want.p, tn);

    OK(mx_recordio_index_read(idx_path, &idx));
    mx_recordio_reader *r;
    OK(mx_recordio_reader_open(rec_path, &r));
    for (int t = 0; t < 3 * N; t++) {
        int i = (int)(rnd() % N);
        uint64_t off;
        int found;
        OK(mx_recordio_index_find(idx, keys[i], &off, &found));
        ck_assert_int_eq(found, 1);
        ck_assert_uint_eq(off, offs[i]);
        mx_recordio_record rec;
        OK(mx_recordio_reader_read_at(r, off, &rec));
        ck_assert_uint_eq(rec.size, sizes[i]);
        ck_assert(sizes[i] == 0 || memcmp(rec.data, payloads[i], sizes[i]) == 0);
    }
    /* ascending offsets and an index partition read the records in order */
    uint64_t *sorted;
    OK(mx_recordio_index_sorted_offsets(idx, &sorted));
    for (int i = 0; i < N; i++) ck_assert_uint_eq(sorted[i], offs[i]);
    int seen = 0;
    for (uint32_t k = 0; k < 4; k++) {
        size_t first, count;
        OK(mx_recordio_index_partition(N, 4, k, &first, &count));
        ck_assert_uint_eq(first, (size_t)seen);
        for (size_t j = first; j < first + count; j++) {
            mx_recordio_record rec;
            OK(mx_recordio_reader_read_at(r, sorted[j], &rec));
            ck_assert_uint_eq(rec.size, sizes[j]);
            seen++;
        }
    }
    ck_assert_int_eq(seen, N);
    mx_free(sorted);
    mx_recordio_reader_free(r);
    mx_recordio_index_free(idx);
    const char *names[] = {"ra.rec", "ra.idx"};
    tmp_cleanup(names, 2);
    free(text);
    free(want.p);
    for (int i = 0; i < N; i++) free(payloads[i]);
}
END_TEST

static mx_status idx_from_text(const char *text, mx_recordio_index **idx)
{
    mx_stream *s;
    OK(mx_stream_open_memory(text, strlen(text), &s));
    mx_status st = mx_recordio_index_read_stream(s, "t.idx", idx);
    OK(mx_stream_close(s));
    return st;
}

START_TEST(test_idx_parse)
{
    mx_recordio_index *idx;
    /* accepted: spaces, CRLF, lone CR, blank lines, signs, leading zeros,
     * no final newline */
    OK(idx_from_text("0\t0\n  1 \t 52  \r\n\n+2\t104\r-5\t0156\n\t\n007 208\n9\t260", &idx));
    size_t n;
    const mx_recordio_index_entry *e = mx_recordio_index_entries(idx, &n);
    const int64_t wk[6] = {0, 1, 2, -5, 7, 9};
    const uint64_t wo[6] = {0, 52, 104, 156, 208, 260};
    ck_assert_uint_eq(n, 6);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(e[i].key, wk[i]);
        ck_assert_uint_eq(e[i].offset, wo[i]);
    }
    mx_recordio_index_free(idx);

    OK(idx_from_text("", &idx));
    mx_recordio_index_entries(idx, &n);
    ck_assert_uint_eq(n, 0);
    mx_recordio_index_free(idx);

    /* duplicate keys: the last one wins (Python dict) */
    OK(idx_from_text("4\t0\n4\t16\n-9223372036854775808\t32\n", &idx));
    uint64_t off;
    int found;
    OK(mx_recordio_index_find(idx, 4, &off, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_uint_eq(off, 16);
    OK(mx_recordio_index_find(idx, INT64_MIN, &off, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_uint_eq(off, 32);
    OK(mx_recordio_index_add(idx, 4, 48)); /* the key table follows additions */
    OK(mx_recordio_index_find(idx, 4, &off, &found));
    ck_assert_uint_eq(off, 48);
    mx_recordio_index_free(idx);

    /* rejected, each naming its line (the bad line is line 3) */
    const char *bad[] = {
        "abc\t0",   "7",      "1\t2\t3",  "1\t-4",   "1\t6",        "1\t1.5",
        "99999999999999999999\t0", "1\t0x10", "1\t18446744073709551616", "1,\t4", "1\t4\0x",
    };
    const char *what[] = {
        "key", "one field", "more than two", "negative", "multiple of 4", "not an integer",
        "key", "not an integer", "not an integer", "key", "not an integer",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[128];
        int len = snprintf(text, sizeof(text), "0\t0\n1\t4\n%s\n3\t8\n", bad[i]);
        if (i == 10) { /* embedded NUL: build by hand */
            memcpy(text + 8, "1\t4\0x\n", 6);
            len = 14;
        }
        mx_stream *s;
        OK(mx_stream_open_memory(text, (size_t)len, &s));
        idx = (mx_recordio_index *)1;
        ck_assert_int_eq(mx_recordio_index_read_stream(s, "t.idx", &idx), MX_ERR_FORMAT);
        ck_assert_ptr_null(idx);
        ck_assert_msg(strstr(mx_last_error(), "t.idx:3:") != NULL, "case %zu: %s", i, mx_last_error());
        ck_assert_msg(strstr(mx_last_error(), what[i]) != NULL, "case %zu: %s", i, mx_last_error());
        OK(mx_stream_close(s));
    }
    ck_assert_int_eq(mx_recordio_index_read("/nonexistent/x.idx", &idx), MX_ERR_IO);
}
END_TEST

/* ---- IRHeader ---------------------------------------------------------- */

START_TEST(test_irheader)
{
    /* struct.pack('IfQQ', 0, 1.0, 1, 0) == the fixture's first 24 payload bytes */
    const uint8_t py[24] = {0, 0, 0, 0, 0, 0, 0x80, 0x3F, 1, 0, 0, 0, 0, 0, 0, 0,
                            0, 0, 0, 0, 0, 0, 0, 0};
    mx_irheader h = {0, 1.0f, 1, 0}, d;
    uint8_t b[24];
    mx_irheader_encode(&h, b);
    ck_assert_mem_eq(b, py, 24);
    size_t fn;
    uint8_t *fixture = slurp(fixture_path(), &fn);
    ck_assert_mem_eq(fixture + 8, py, 24);
    free(fixture);

    /* all fields, byte by byte */
    h = (mx_irheader){0x01020304u, -2.5f, 0x1122334455667788ull, 0x99AABBCCDDEEFF00ull};
    mx_irheader_encode(&h, b);
    const uint8_t want[24] = {0x04, 0x03, 0x02, 0x01, 0x00, 0x00, 0x20, 0xC0, 0x88, 0x77, 0x66, 0x55,
                              0x44, 0x33, 0x22, 0x11, 0x00, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99};
    ck_assert_mem_eq(b, want, 24);
    mx_irheader_decode(b, &d);
    ck_assert_uint_eq(d.flag, h.flag);
    ck_assert_float_eq(d.label, -2.5f);
    ck_assert_uint_eq(d.id, h.id);
    ck_assert_uint_eq(d.id2, h.id2);

    /* multi-label: header ‖ 3 f32 ‖ image */
    const float labels[3] = {1.0f, 0.5f, -3.0f};
    mx_irheader mh = {3, 0.0f, 42, 0};
    uint8_t *payload;
    size_t psize;
    OK(mx_imrec_pack(&mh, labels, "JPEGDATA", 8, &payload, &psize));
    ck_assert_uint_eq(psize, 24 + 12 + 8);
    const uint8_t lab_bytes[12] = {0, 0, 0x80, 0x3F, 0, 0, 0, 0x3F, 0, 0, 0x40, 0xC0};
    ck_assert_mem_eq(payload + 24, lab_bytes, 12);
    ck_assert_mem_eq(payload + 36, "JPEGDATA", 8);
    mx_imrec im;
    OK(mx_imrec_parse(payload, psize, &im));
    ck_assert_uint_eq(im.header.flag, 3);
    ck_assert_uint_eq(im.header.id, 42);
    ck_assert_uint_eq(im.num_labels, 3);
    for (uint32_t i = 0; i < 3; i++) ck_assert_float_eq(mx_imrec_label(&im, i), labels[i]);
    ck_assert(isnan(mx_imrec_label(&im, 3)));
    ck_assert_uint_eq(im.image_size, 8);
    ck_assert_mem_eq(im.image, "JPEGDATA", 8);

    /* malformed payloads */
    ck_assert_int_eq(mx_imrec_parse(payload, 23, &im), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "23 bytes"));
    ck_assert_int_eq(mx_imrec_parse(payload, 24 + 11, &im), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "3 labels"));
    OK(mx_imrec_parse(payload, 36, &im)); /* labels but no image */
    ck_assert_uint_eq(im.image_size, 0);
    payload[0] = 0xFF, payload[1] = 0xFF, payload[2] = 0xFF, payload[3] = 0xFF;
    ck_assert_int_eq(mx_imrec_parse(payload, psize, &im), MX_ERR_FORMAT);
    mx_free(payload);

    /* single label: flag 0 */
    mx_irheader sh = {0, 7.0f, 9, 0};
    OK(mx_imrec_pack(&sh, NULL, "x", 1, &payload, &psize));
    ck_assert_uint_eq(psize, 25);
    OK(mx_imrec_parse(payload, psize, &im));
    ck_assert_float_eq(mx_imrec_label(&im, 0), 7.0f);
    ck_assert(isnan(mx_imrec_label(&im, 1)));
    ck_assert_ptr_null(im.labels);
    mx_free(payload);
    ck_assert_int_eq(mx_imrec_pack(&mh, NULL, "x", 1, &payload, &psize), MX_ERR_INVALID);
}
END_TEST

/* ---- .lst -------------------------------------------------------------- */

/* Huge labels print with hundreds of digits ("%f" of 1e308 is 316
 * characters) and read back exactly, as Python's float() does. */
START_TEST(test_lst_huge_labels_round_trip)
{
    double labels[5] = {1e120, -1.5e200, 1e308, DBL_MAX, -DBL_MAX};
    mx_lst_entry e = {.index = 1, .labels = labels, .num_labels = 5, .path = "x.jpg"};
    char *s;
    size_t n;
    OK(mx_lst_format(&e, &s, &n));
    ck_assert_uint_gt(n, 1000);
    mx_lst_entry p = {0};
    ck_assert_msg(mx_lst_parse_line(s, n - 1, "t.lst", 1, &p) == MX_OK, "%s", mx_last_error());
    ck_assert_uint_eq(p.num_labels, 5);
    for (int i = 0; i < 5; i++) ck_assert_double_eq(p.labels[i], labels[i]);
    ck_assert_str_eq(p.path, "x.jpg");
    mx_free(s);
    mx_free(p.labels);
    mx_free(p.path);
}
END_TEST

START_TEST(test_lst_format_parse)
{
    double one = 1.0, multi[3] = {0.0, 2.5, -1.25};
    mx_lst_entry e = {.index = 3, .labels = &one, .num_labels = 1, .path = "cat/x.jpg"};
    char *s;
    size_t n;
    OK(mx_lst_format(&e, &s, &n));
    ck_assert_str_eq(s, "3\t1.000000\tcat/x.jpg\n");
    ck_assert_uint_eq(n, strlen(s));
    mx_free(s);
    mx_lst_entry m = {.index = -7, .labels = multi, .num_labels = 3, .path = "a b/c d.png"};
    OK(mx_lst_format(&m, &s, &n));
    ck_assert_str_eq(s, "-7\t0.000000\t2.500000\t-1.250000\ta b/c d.png\n");

    mx_lst_entry p = {0};
    OK(mx_lst_parse_line(s, n - 1, "t.lst", 1, &p));
    ck_assert_int_eq(p.index, -7);
    ck_assert_uint_eq(p.num_labels, 3);
    for (int i = 0; i < 3; i++) ck_assert_double_eq(p.labels[i], multi[i]);
    ck_assert_str_eq(p.path, "a b/c d.png");
    mx_free(s);

    /* im2rec.py stripping and number syntax */
    const char *line = "  12 \t 1e3 \t inf\t-nan\t.5\t  dir/f.jpg  \r";
    OK(mx_lst_parse_line(line, strlen(line), "t.lst", 2, &p));
    ck_assert_int_eq(p.index, 12);
    ck_assert_uint_eq(p.num_labels, 4);
    ck_assert_double_eq(p.labels[0], 1000.0);
    ck_assert(isinf(p.labels[1]) && p.labels[1] > 0);
    ck_assert(isnan(p.labels[2]));
    ck_assert_double_eq(p.labels[3], 0.5);
    ck_assert_str_eq(p.path, "dir/f.jpg");
    OK(mx_lst_format(&p, &s, &n));
    ck_assert_str_eq(s, "12\t1000.000000\tinf\tnan\t0.500000\tdir/f.jpg\n");
    mx_free(s);

    /* rejected lines name the line */
    const char *bad[] = {"3\tcat.jpg", "", "x\t1\tp", "3\t1.0.0\tp", "3\t\t1\tp", "3\t0x10\tp",
                         "3.0\t1\tp", "3\t1\t2", "99999999999999999999\t1\tp"};
    const char *what[] = {"found 2", "found 1", "index", "label 1", "label 1", "label 1",
                          "index", NULL, "index"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mx_status st = mx_lst_parse_line(bad[i], strlen(bad[i]), "t.lst", 40 + i, &p);
        if (!what[i]) { /* "3\t1\t2": valid, path "2" */
            OK(st);
            ck_assert_str_eq(p.path, "2");
            continue;
        }
        ck_assert_int_eq(st, MX_ERR_FORMAT);
        char where[32];
        snprintf(where, sizeof(where), "t.lst:%zu:", 40 + i);
        ck_assert_msg(strstr(mx_last_error(), where) && strstr(mx_last_error(), what[i]), "case %zu: %s", i,
                      mx_last_error());
    }
    ck_assert_int_eq(mx_lst_parse_line("3\t1\tp\0q", 7, "t.lst", 1, &p), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "NUL"));
    mx_lst_entry_clear(&p);

    /* formatting refuses what would not read back */
    mx_lst_entry t = {.index = 1, .labels = &one, .num_labels = 1, .path = "a\tb"};
    ck_assert_int_eq(mx_lst_format(&t, &s, &n), MX_ERR_INVALID);
    t.path = " lead";
    ck_assert_int_eq(mx_lst_format(&t, &s, &n), MX_ERR_INVALID);
    t.path = "";
    ck_assert_int_eq(mx_lst_format(&t, &s, &n), MX_ERR_INVALID);
    t.path = "ok.jpg";
    t.num_labels = 0;
    ck_assert_int_eq(mx_lst_format(&t, &s, &n), MX_ERR_INVALID);

    /* "%f" of 1e300 is 308 characters: the line still reads back (found by
     * fuzz_lst_format; a 128-byte field buffer refused it). */
    double big[2] = {1e300, -1.7976931348623157e308};
    mx_lst_entry h = {.index = 5, .labels = big, .num_labels = 2, .path = "h.jpg"};
    OK(mx_lst_format(&h, &s, &n));
    ck_assert_uint_gt(n, 600);
    mx_lst_entry hb = {0};
    OK(mx_lst_parse_line(s, n - 1, "t.lst", 1, &hb));
    ck_assert_uint_eq(hb.num_labels, 2);
    ck_assert_double_eq(hb.labels[0], 1e300);
    ck_assert_double_eq(hb.labels[1], -1.7976931348623157e308);
    mx_lst_entry_clear(&hb);
    mx_free(s);
}
END_TEST

START_TEST(test_lst_file_round_trip)
{
    enum { N = 200 };
    mx_stream *s;
    OK(mx_stream_create_memory(&s));
    double labels[N][3];
    char paths[N][32];
    for (int i = 0; i < N; i++) {
        size_t nl = 1 + (size_t)i % 3;
        for (size_t j = 0; j < nl; j++) labels[i][j] = (double)((int)(rnd() % 20001) - 10000) / 1000.0;
        snprintf(paths[i], sizeof(paths[i]), "class_%d/img %04d.jpg", i % 7, i);
        mx_lst_entry e = {.index = i * 3 - 50, .labels = labels[i], .num_labels = nl, .path = paths[i]};
        OK(mx_lst_write(s, &e));
    }
    OK(mx_stream_seek(s, 0));
    mx_lst_reader *r;
    OK(mx_lst_reader_create(s, "mem.lst", 1, &r));
    mx_lst_entry e = {0};
    for (int i = 0; i < N; i++) {
        int got;
        OK(mx_lst_reader_next(r, &e, &got));
        ck_assert_int_eq(got, 1);
        ck_assert_int_eq(e.index, i * 3 - 50);
        ck_assert_uint_eq(e.num_labels, 1 + (size_t)i % 3);
        for (size_t j = 0; j < e.num_labels; j++) ck_assert_double_eq_tol(e.labels[j], labels[i][j], 5e-7);
        ck_assert_str_eq(e.path, paths[i]);
        ck_assert_uint_eq(mx_lst_reader_lineno(r), (uint64_t)i + 1);
    }
    int got = 1;
    OK(mx_lst_reader_next(r, &e, &got));
    ck_assert_int_eq(got, 0);
    mx_lst_reader_free(r);

    /* a file with bad lines: each is reported with its line, reading goes on */
    const char *text = "0\t1.000000\ta.jpg\r\nbroken line\n2\t0.5\tb.jpg\n\n4\tx\tc.jpg\n5\t2\td.jpg";
    const char *path = tmp_path("bad.lst");
    spit(path, text, strlen(text));
    OK(mx_lst_reader_open(path, &r));
    int64_t indices[8];
    int ni = 0;
    uint64_t bad_lines[8];
    int nb = 0;
    for (;;) {
        mx_status st = mx_lst_reader_next(r, &e, &got);
        if (st == MX_ERR_FORMAT) {
            ck_assert_ptr_nonnull(strstr(mx_last_error(), path));
            bad_lines[nb++] = mx_lst_reader_lineno(r);
            char where[16];
            snprintf(where, sizeof(where), ":%llu:", (unsigned long long)mx_lst_reader_lineno(r));
            ck_assert_ptr_nonnull(strstr(mx_last_error(), where));
            continue;
        }
        OK(st);
        if (!got) break;
        indices[ni++] = e.index;
    }
    ck_assert_int_eq(ni, 3);
    ck_assert_int_eq(indices[0], 0);
    ck_assert_int_eq(indices[1], 2);
    ck_assert_int_eq(indices[2], 5);
    ck_assert_int_eq(nb, 3);
    ck_assert_uint_eq(bad_lines[0], 2);
    ck_assert_uint_eq(bad_lines[1], 4);
    ck_assert_uint_eq(bad_lines[2], 5);
    mx_lst_reader_free(r);
    mx_lst_entry_clear(&e);
    const char *names[] = {"bad.lst"};
    tmp_cleanup(names, 1);
}
END_TEST

/* ---- streams ----------------------------------------------------------- */

START_TEST(test_streams_and_lines)
{
    mx_stream *s;
    uint8_t buf[16];
    size_t n;
    uint64_t pos;
    /* memory view */
    OK(mx_stream_open_memory("0123456789", 10, &s));
    OK(mx_stream_read(s, buf, 4, &n));
    ck_assert_uint_eq(n, 4);
    ck_assert_mem_eq(buf, "0123", 4);
    OK(mx_stream_tell(s, &pos));
    ck_assert_uint_eq(pos, 4);
    ck_assert_int_eq(mx_stream_read_exact(s, buf, 8, "widget"), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "truncated widget"));
    ck_assert(mentions_offset(mx_last_error(), 4));
    ck_assert_int_eq(mx_stream_write(s, "x", 1), MX_ERR_UNSUPPORTED);
    ck_assert_int_eq(mx_stream_seek(s, 11), MX_ERR_INVALID);
    OK(mx_stream_close(s));

    /* growable memory: write, seek past the end, zero fill */
    const uint8_t *d;
    OK(mx_stream_create_memory(&s));
    OK(mx_stream_write(s, "ab", 2));
    OK(mx_stream_seek(s, 5));
    OK(mx_stream_write(s, "c", 1));
    OK(mx_stream_memory_data(s, &d, &n));
    ck_assert_uint_eq(n, 6);
    ck_assert_mem_eq(d, "ab\0\0\0c", 6);
    OK(mx_stream_size(s, &pos));
    ck_assert_uint_eq(pos, 6);
    OK(mx_stream_close(s));

    /* files */
    ck_assert_int_eq(mx_stream_open_file("/nonexistent/f", "rb", &s), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "/nonexistent/f"));
    const char *path = tmp_path("s.bin");
    OK(mx_stream_open_file(path, "w+b", &s));
    OK(mx_stream_write(s, "hello world", 11));
    OK(mx_stream_size(s, &pos));
    ck_assert_uint_eq(pos, 11);
    OK(mx_stream_seek(s, 6));
    OK(mx_stream_read_exact(s, buf, 5, "tail"));
    ck_assert_mem_eq(buf, "world", 5);
    ck_assert_int_eq(mx_stream_memory_data(s, &d, &n), MX_ERR_INVALID);
    OK(mx_stream_close(s));
    OK(mx_stream_open_file(path, "rb", &s));
    OK(mx_stream_size(s, &pos));
    ck_assert_uint_eq(pos, 11);
    OK(mx_stream_close(s));

    /* lines: \r\n split across the 64 KiB chunk boundary, lone \r, no final
     * terminator, empty lines */
    size_t big = 65535;
    char *text = malloc(big + 32);
    memset(text, 'a', big);
    memcpy(text + big, "\r\nx\r\ry\n\nlast", 12); /* '\r' is byte 65535 */
    size_t tlen = big + 12;
    OK(mx_stream_open_memory(text, tlen, &s));
    mx_line_reader *lr;
    OK(mx_line_reader_create(s, &lr));
    const char *line;
    size_t len;
    int got;
    const char *want[] = {NULL, "x", "", "y", "", "last"};
    for (int i = 0; i < 6; i++) {
        OK(mx_line_reader_next(lr, &line, &len, &got));
        ck_assert_int_eq(got, 1);
        if (i == 0) {
            ck_assert_uint_eq(len, big);
            ck_assert(line[0] == 'a' && line[len - 1] == 'a' && line[len] == '\0');
        } else {
            ck_assert_uint_eq(len, strlen(want[i]));
            ck_assert_str_eq(line, want[i]);
        }
        ck_assert_uint_eq(mx_line_reader_lineno(lr), (uint64_t)i + 1);
    }
    OK(mx_line_reader_next(lr, &line, &len, &got));
    ck_assert_int_eq(got, 0);
    mx_line_reader_free(lr);
    OK(mx_stream_close(s));
    free(text);
    const char *names[] = {"s.bin"};
    tmp_cleanup(names, 1);
}
END_TEST

static Suite *recordio_suite(void)
{
    Suite *s = suite_create("recordio");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_fixture_read);
    tcase_add_test(t, test_fixture_write_byte_exact);
    tcase_add_test(t, test_abc_and_empty_exact);
    tcase_add_test(t, test_magic_escaping);
    tcase_add_test(t, test_escaping_random_vs_reference);
    tcase_add_test(t, test_writer_refuses_large);
    tcase_add_test(t, test_writer_errors);
    tcase_add_test(t, test_independent_rec_idx);
    tcase_add_test(t, test_writer_field_by_field);
    tcase_add_test(t, test_truncation_every_cut);
    tcase_add_test(t, test_truncation_unknown_size_and_file);
    tcase_add_test(t, test_huge_claimed_length);
    tcase_add_test(t, test_large_record);
    tcase_add_test(t, test_corrupt_magic_resync);
    tcase_add_test(t, test_inserted_garbage_any_offset);
    tcase_add_test(t, test_lst_huge_labels_round_trip);
    tcase_add_test(t, test_corrupt_structure_cases);
    tcase_add_test(t, test_partition_nominal_values);
    tcase_add_test(t, test_partition_coverage);
    tcase_add_test(t, test_idx_random_access);
    tcase_add_test(t, test_idx_parse);
    tcase_add_test(t, test_irheader);
    tcase_add_test(t, test_lst_format_parse);
    tcase_add_test(t, test_lst_file_round_trip);
    tcase_add_test(t, test_streams_and_lines);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(recordio_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
