/*
 * test_io_mnist.c - the MNIST idx iterator (mxnet-formats.md 3.4) and the
 * prefetcher under it: tiny idx files written here (raw, and gzip'd with
 * zlib's gzwrite) with known pixels, checked value by value; partitioning,
 * shuffling, truncated and corrupt files, shutdown in the middle of an
 * epoch; and the real Fashion-MNIST test set against a decoding of the
 * gzip done here with zlib's inflate (not the iterator's gzread path).
 * Prints the iterator's throughput on the Fashion-MNIST training set.
 */
#include "io/io.h"
#include "io/prefetch.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define OK(expr)                                                                 \
    do {                                                                         \
        mx_status ok_st_ = (expr);                                               \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error()); \
    } while (0)

static const char *fashion_dir(void)
{
    const char *d = getenv("MX_FASHION_MNIST_DIR");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}

/* ---- temporary files ---------------------------------------------------- */

static char tmp_dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[64][128]; /* rotating: a test keeps up to 64 paths */
    static int slot;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/tiomn.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    }
    char *p = buf[slot++ % 64];
    snprintf(p, 128, "%s/%s", tmp_dir, name);
    return p;
}

static void tmp_cleanup(void)
{
    static const char *names[] = {"i",  "l",  "i.gz", "l.gz", "bad", "bad.gz", "x", "x.gz", "cut", "cut.gz",
                                  "tr", "em", "l9",   "big",  "flip"};
    if (!tmp_dir[0]) return;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unlink(tmp_path(names[i]));
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

static void put_be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

/* Writes an idx file: header (magic, dims) then body, raw or gzip'd. */
static void write_idx(const char *path, bool gz, uint32_t magic, const uint32_t *dims, int ndim, const uint8_t *body,
                      size_t body_len)
{
    uint8_t hdr[16];
    put_be32(hdr, magic);
    for (int i = 0; i < ndim; i++) put_be32(hdr + 4 + 4 * i, dims[i]);
    size_t hlen = 4 + 4 * (size_t)ndim;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, hdr, (unsigned)hlen), (int)hlen);
        if (body_len) ck_assert_int_eq(gzwrite(f, body, (unsigned)body_len), (int)body_len);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(hdr, 1, hlen, f), hlen);
        if (body_len) ck_assert_uint_eq(fwrite(body, 1, body_len, f), body_len);
        ck_assert_int_eq(fclose(f), 0);
    }
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* The synthetic set: pixel (i, r, c) and label i, recognisable from any
 * position. */
static uint8_t px_of(uint32_t i, uint32_t r, uint32_t c) { return (uint8_t)(i * 37u + r * 11u + c * 3u + 1u); }
static uint8_t label_of(uint32_t i) { return (uint8_t)((i * 7u + 3u) % 251u); }

/* Writes images and labels files for n images of rows x cols. */
static void write_set(const char *img, const char *lab, bool gz, uint32_t n, uint32_t rows, uint32_t cols)
{
    size_t px = (size_t)rows * cols;
    uint8_t *body = malloc(n * px + 1), *labels = malloc(n + 1);
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t c = 0; c < cols; c++) body[i * px + r * cols + c] = px_of(i, r, c);
        labels[i] = label_of(i);
    }
    uint32_t idims[3] = {n, rows, cols}, ldims[1] = {n};
    write_idx(img, gz, 0x803, idims, 3, body, n * px);
    write_idx(lab, gz, 0x801, ldims, 1, labels, n);
    free(body);
    free(labels);
}

/* ---- iterator helpers --------------------------------------------------- */

static mx_runtime *rt_new(void)
{
    mx_runtime *rt = NULL;
    OK(mx_runtime_create(NULL, &rt));
    return rt;
}

/* keys/values as "k=v" strings. */
static mx_status make_iter(mx_runtime *rt, const char *kind, const char *const *kv, int n, mx_data_iter **it)
{
    char *copy[16];
    const char *k[16] = {0}, *v[16] = {0};
    ck_assert_int_le(n, 16);
    for (int i = 0; i < n; i++) {
        copy[i] = strdup(kv[i]);
        ck_assert_ptr_nonnull(copy[i]);
        char *eq = strchr(copy[i], '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        k[i] = copy[i];
        v[i] = eq + 1;
    }
    mx_status s = mx_data_iter_create(rt, kind, k, v, n, it);
    for (int i = 0; i < n; i++) free(copy[i]);
    return s;
}

static char kv_buf[16][600];
static const char *kv(int slot, const char *key, const char *value)
{
    size_t a = strlen(key), b = strlen(value);
    ck_assert_uint_lt(a + b + 2, sizeof(kv_buf[slot]));
    memcpy(kv_buf[slot], key, a);
    kv_buf[slot][a] = '=';
    memcpy(kv_buf[slot] + a + 1, value, b + 1);
    return kv_buf[slot];
}

/* Checks a batch against the synthetic set: every sample's pixels are
 * px_of(index)/256 exactly, its label label_of(index). Returns the ids. */
static void check_batch(mx_data_batch *b, int64_t bs, uint32_t rows, uint32_t cols, uint64_t *ids)
{
    size_t px = (size_t)rows * cols;
    float *data = malloc(bs * px * sizeof(float)), *label = malloc(bs * sizeof(float));
    ck_assert_int_eq(mx_ndarray_size(b->data), bs * (int64_t)px);
    ck_assert_int_eq(mx_ndarray_size(b->label), bs);
    OK(mx_ndarray_to_host(b->data, data, bs * px * sizeof(float)));
    OK(mx_ndarray_to_host(b->label, label, bs * sizeof(float)));
    ck_assert_int_eq(b->pad, 0);
    ck_assert_ptr_nonnull(b->index);
    for (int64_t s = 0; s < bs; s++) {
        uint32_t id = (uint32_t)b->index[s];
        if (ids) ids[s] = id;
        ck_assert_msg(label[s] == (float)label_of(id), "sample %lld (id %u): label %g, want %u", (long long)s, id,
                      label[s], label_of(id));
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t c = 0; c < cols; c++) {
                float want = (float)px_of(id, r, c) / 256.0f;
                float got = data[s * px + r * cols + c];
                ck_assert_msg(got == want, "sample %lld (id %u) pixel (%u,%u): %.9g, want %.9g", (long long)s, id, r,
                              c, got, want);
            }
    }
    free(data);
    free(label);
}

/* Reads one epoch; returns the number of batches, ids appended to ids. */
static int64_t read_epoch(mx_data_iter *it, int64_t bs, uint32_t rows, uint32_t cols, uint64_t *ids, int64_t max_ids)
{
    int64_t nb = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        ck_assert_int_le((nb + 1) * bs, max_ids);
        check_batch(&b, bs, rows, cols, ids ? ids + nb * bs : NULL);
        nb++;
    }
    return nb;
}

/* ---- tests -------------------------------------------------------------- */

START_TEST(test_mt19937_and_part_formula)
{
    /* The C++ standard: the 10000th output of a default-seeded (5489)
     * std::mt19937 is 4123659995. */
    mx_mt19937 g;
    mx_mt19937_seed(&g, 5489u);
    ck_assert_uint_eq(mx_mt19937_next(&g), 3499211612u);
    uint32_t v = 0;
    for (int i = 1; i < 10000; i++) v = mx_mt19937_next(&g);
    ck_assert_uint_eq(v, 4123659995u);

    /* start = (int)((double)n/num_parts*part_index) */
    int64_t s, e;
    mx_io_part_range(10, 3, 0, &s, &e);
    ck_assert(s == 0 && e == 3);
    mx_io_part_range(10, 3, 1, &s, &e);
    ck_assert(s == 3 && e == 6);
    mx_io_part_range(10, 3, 2, &s, &e);
    ck_assert(s == 6 && e == 10);
    mx_io_part_range(60000, 7, 6, &s, &e);
    ck_assert(s == 51428 && e == 60000); /* the formula gives 59999: the last part ends at n */
    mx_io_part_range(15, 11, 10, &s, &e);
    ck_assert(s == 13 && e == 15);

    /* Unbiased below(): every value of [0, 3) turns up, none outside. */
    int hist[3] = {0};
    for (int i = 0; i < 3000; i++) {
        uint32_t r = mx_mt19937_below(&g, 3);
        ck_assert_uint_lt(r, 3);
        hist[r]++;
    }
    for (int i = 0; i < 3; i++) ck_assert_int_gt(hist[i], 800);
}
END_TEST

START_TEST(test_raw_exact_and_remainder_dropped)
{
    const char *img = tmp_path("i"), *lab = tmp_path("l");
    write_set(img, lab, false, 10, 3, 4);
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=4", "shuffle=0", "silent=1"};
    OK(make_iter(rt, "mnist", args, 5, &it));
    mx_shape ds = mx_data_iter_data_shape(it), ls = mx_data_iter_label_shape(it);
    mx_shape want_d = MX_SHAPE(4, 1, 3, 4), want_l = MX_SHAPE(4);
    ck_assert(mx_shape_equal(&ds, &want_d));
    ck_assert(mx_shape_equal(&ls, &want_l));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 10);

    for (int epoch = 0; epoch < 2; epoch++) {
        uint64_t ids[8];
        /* 10 images, batch 4: two batches, the last 2 images dropped. */
        ck_assert_int_eq(read_epoch(it, 4, 3, 4, ids, 8), 2);
        for (int i = 0; i < 8; i++) ck_assert_uint_eq(ids[i], (uint64_t)i); /* file order */
        bool has;
        mx_data_batch b;
        OK(mx_data_iter_next(it, &b, &has)); /* stays at the end */
        ck_assert(!has);
        OK(mx_data_iter_reset(it));
    }

    /* Spot values written out: image 1 pixel (2,3) = 37+22+9+1 = 69. */
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    ck_assert(has);
    float d[48], l[4];
    OK(mx_ndarray_to_host(b.data, d, sizeof(d)));
    OK(mx_ndarray_to_host(b.label, l, sizeof(l)));
    ck_assert(d[12 + 2 * 4 + 3] == 69.0f / 256.0f);
    ck_assert(d[0] == 1.0f / 256.0f);
    ck_assert(l[1] == 10.0f);
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

static void count_line(void *user, const char *line)
{
    int *n = user;
    (*n)++;
    ck_assert_msg(strstr(line, "mnist: '") && strstr(line, "': 10 images of batch shape (4,1,3,4) (part 0 of 1), "
                                                           "shuffle=0"),
                  "%s", line);
}

/* silent=0 sends one load line to the log at the first batch, as MXNet's
 * MNISTIter prints it; silent=1 sends none. */
START_TEST(test_silent_controls_the_load_line)
{
    const char *img = tmp_path("i"), *lab = tmp_path("l");
    write_set(img, lab, false, 10, 3, 4);
    mx_runtime *rt = rt_new();
    for (int silent = 0; silent < 2; silent++) {
        mx_data_iter *it;
        const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=4", "shuffle=0",
                              silent ? "silent=1" : "silent=0"};
        OK(make_iter(rt, "mnist", args, 5, &it));
        int lines = 0;
        mx_data_iter_set_log(it, count_line, &lines);
        mx_data_batch b;
        bool has;
        for (int k = 0; k < 3; k++) OK(mx_data_iter_next(it, &b, &has));
        ck_assert_int_eq(lines, silent ? 0 : 1);
        mx_data_iter_free(it);
    }
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_gzip_flat)
{
    const char *img = tmp_path("i.gz"), *lab = tmp_path("l.gz");
    write_set(img, lab, true, 9, 5, 2);
    /* Check that the files really are gzip'd. */
    size_t n;
    uint8_t *raw = read_bytes(img, &n);
    ck_assert(n > 2 && raw[0] == 0x1f && raw[1] == 0x8b);
    free(raw);

    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=3", "shuffle=False", "flat=True"};
    OK(make_iter(rt, "mnist", args, 5, &it));
    mx_shape ds = mx_data_iter_data_shape(it), want = MX_SHAPE(3, 10);
    ck_assert(mx_shape_equal(&ds, &want));
    uint64_t ids[9];
    ck_assert_int_eq(read_epoch(it, 3, 5, 2, ids, 9), 3);
    for (int i = 0; i < 9; i++) ck_assert_uint_eq(ids[i], (uint64_t)i);
    mx_data_iter_free(it);

    /* Mixed: gzip'd images, raw labels. */
    const char *lab_raw = tmp_path("l");
    uint8_t labels[9];
    for (uint32_t i = 0; i < 9; i++) labels[i] = label_of(i);
    uint32_t ld[1] = {9};
    write_idx(lab_raw, false, 0x801, ld, 1, labels, 9);
    const char *args2[] = {kv(0, "image", img), kv(1, "label", lab_raw), "batch_size=9", "shuffle=0"};
    OK(make_iter(rt, "mnist", args2, 4, &it));
    ck_assert_int_eq(read_epoch(it, 9, 5, 2, ids, 9), 1);
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_partition_covers_once)
{
    const char *img = tmp_path("i.gz"), *lab = tmp_path("l.gz");
    const uint32_t N = 23;
    write_set(img, lab, true, N, 2, 3);
    mx_runtime *rt = rt_new();
    for (int parts = 1; parts <= 13; parts++) { /* 11 and 13: 23/p*p rounds below 23 */
        int seen[23] = {0};
        int64_t total = 0;
        for (int part = 0; part < parts; part++) {
            char np[16], pi[16];
            snprintf(np, sizeof(np), "%d", parts);
            snprintf(pi, sizeof(pi), "%d", part);
            const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=1", "shuffle=1",
                                  kv(2, "num_parts", np),  kv(3, "part_index", pi), "seed=3"};
            mx_data_iter *it;
            OK(make_iter(rt, "mnist", args, 7, &it));
            int64_t s, e;
            mx_io_part_range(N, parts, part, &s, &e);
            ck_assert_int_eq(mx_data_iter_num_samples(it), e - s);
            uint64_t ids[23];
            int64_t nb = read_epoch(it, 1, 2, 3, ids, 23);
            ck_assert_int_eq(nb, e - s);
            for (int64_t i = 0; i < nb; i++) {
                ck_assert_msg((int64_t)ids[i] >= s && (int64_t)ids[i] < e, "id %llu outside part [%lld,%lld)",
                              (unsigned long long)ids[i], (long long)s, (long long)e);
                seen[ids[i]]++;
            }
            total += nb;
            mx_data_iter_free(it);
        }
        ck_assert_int_eq(total, N);
        for (uint32_t i = 0; i < N; i++) ck_assert_msg(seen[i] == 1, "parts=%d: sample %u seen %d times", parts, i, seen[i]);
    }
    /* part_index out of range, and a part smaller than a batch. */
    mx_data_iter *it;
    const char *bad[] = {kv(0, "image", img), kv(1, "label", lab), "num_parts=2", "part_index=2", "batch_size=1"};
    ck_assert_int_eq(make_iter(rt, "mnist", bad, 5, &it), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "part_index"));
    const char *small[] = {kv(0, "image", img), kv(1, "label", lab), "num_parts=4", "part_index=1", "batch_size=7"};
    ck_assert_int_eq(make_iter(rt, "mnist", small, 5, &it), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "fewer than batch_size"));
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

static void epoch_ids(mx_data_iter *it, uint64_t *ids, int64_t n, int64_t bs)
{
    ck_assert_int_eq(read_epoch(it, bs, 4, 4, ids, n), n / bs);
}

START_TEST(test_shuffle_permutation_reproducible)
{
    const char *img = tmp_path("i"), *lab = tmp_path("l");
    const int64_t N = 50, BS = 5;
    write_set(img, lab, false, (uint32_t)N, 4, 4);
    mx_runtime *rt = rt_new();
    uint64_t a[3][50], b[3][50], c[50];
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=5", "seed=7"}; /* shuffle defaults to 1 */
    mx_data_iter *ia, *ib, *ic;
    OK(make_iter(rt, "mnist", args, 4, &ia));
    OK(make_iter(rt, "mnist", args, 4, &ib));
    for (int e = 0; e < 3; e++) {
        epoch_ids(ia, a[e], N, BS);
        epoch_ids(ib, b[e], N, BS);
        OK(mx_data_iter_reset(ia));
        OK(mx_data_iter_reset(ib));
        /* A permutation of 0..N-1. */
        int seen[50] = {0};
        for (int i = 0; i < N; i++) seen[a[e][i]]++;
        for (int i = 0; i < N; i++) ck_assert_int_eq(seen[i], 1);
        /* Same seed, same sequence of epochs. */
        ck_assert_mem_eq(a[e], b[e], sizeof(a[e]));
    }
    int identity = 1, same01 = 1, same12 = 1;
    for (int i = 0; i < N; i++) {
        identity &= a[0][i] == (uint64_t)i;
        same01 &= a[0][i] == a[1][i];
        same12 &= a[1][i] == a[2][i];
    }
    ck_assert_msg(!identity, "shuffle=1 left the file order");
    ck_assert_msg(!same01 && !same12, "epochs repeat the same order");

    /* Another seed, another order. */
    const char *args8[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=5", "seed=8"};
    OK(make_iter(rt, "mnist", args8, 4, &ic));
    epoch_ids(ic, c, N, BS);
    ck_assert(memcmp(c, a[0], sizeof(c)) != 0);

    /* The order is the documented one: Fisher-Yates on MT19937(seed). */
    uint32_t want[50];
    for (uint32_t i = 0; i < N; i++) want[i] = i;
    mx_mt19937 g;
    mx_mt19937_seed(&g, 7);
    mx_io_shuffle_u32(want, N, &g);
    for (int i = 0; i < N; i++) ck_assert_uint_eq(a[0][i], want[i]);
    mx_io_shuffle_u32(want, N, &g);
    for (int i = 0; i < N; i++) ck_assert_uint_eq(a[1][i], want[i]);

    mx_data_iter_free(ia);
    mx_data_iter_free(ib);
    mx_data_iter_free(ic);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

/* Expects create to fail with `status` and a message holding each needle. */
static void expect_fail(mx_runtime *rt, const char *img, const char *lab, mx_status status, const char *n1,
                        const char *n2)
{
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=2"};
    mx_data_iter *it = NULL;
    mx_status s = make_iter(rt, "mnist", args, 3, &it);
    ck_assert_msg(s == status, "%s / %s: status %d (%s), want %d", img, lab, s, mx_last_error(), status);
    ck_assert_ptr_null(it);
    ck_assert_msg(strstr(mx_last_error(), n1) != NULL, "message '%s' lacks '%s'", mx_last_error(), n1);
    if (n2) ck_assert_msg(strstr(mx_last_error(), n2) != NULL, "message '%s' lacks '%s'", mx_last_error(), n2);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A label (or image) file whose header is bad closes every file opened so
 * far: each gzip handle holds an fd and a 256 KiB buffer. */
START_TEST(test_bad_header_closes_both_files)
{
    mx_runtime *rt = rt_new();
    const char *img = tmp_path("i.gz"), *lab = tmp_path("l.gz"), *x = tmp_path("x"), *em = tmp_path("em");
    write_set(img, lab, true, 20, 28, 28);
    write_bytes(x, "hello, world, this is text", 26);
    write_bytes(em, "", 0);
    int before = open_fds();
    for (int k = 0; k < 20; k++) {
        expect_fail(rt, img, x, MX_ERR_FORMAT, x, "magic");   /* label header */
        expect_fail(rt, img, em, MX_ERR_FORMAT, em, "empty"); /* label header */
        expect_fail(rt, img, img, MX_ERR_FORMAT, img, "0x00000803");
        expect_fail(rt, x, lab, MX_ERR_FORMAT, x, "magic");   /* image header */
    }
    ck_assert_int_eq(open_fds(), before);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_truncated_and_corrupt_files)
{
    mx_runtime *rt = rt_new();
    const char *img = tmp_path("i"), *lab = tmp_path("l"), *imgz = tmp_path("i.gz"), *labz = tmp_path("l.gz");
    write_set(img, lab, false, 20, 28, 28);
    write_set(imgz, labz, true, 20, 28, 28);

    /* Raw file cut short: the size check names the file and the shortfall. */
    size_t n;
    uint8_t *bytes = read_bytes(img, &n);
    const char *cut = tmp_path("cut");
    write_bytes(cut, bytes, n - 100);
    expect_fail(rt, cut, lab, MX_ERR_FORMAT, cut, "truncated");
    /* ... inside the header. */
    write_bytes(cut, bytes, 10);
    expect_fail(rt, cut, lab, MX_ERR_FORMAT, cut, "truncated");
    /* Bytes after the declared images. */
    uint8_t *longer = malloc(n + 5);
    memcpy(longer, bytes, n);
    memset(longer + n, 7, 5);
    const char *tr = tmp_path("tr");
    write_bytes(tr, longer, n + 5);
    expect_fail(rt, tr, lab, MX_ERR_FORMAT, tr, "5 bytes");
    free(longer);
    free(bytes);

    /* Gzip'd file cut short: found while decompressing. */
    bytes = read_bytes(imgz, &n);
    const char *cutz = tmp_path("cut.gz");
    write_bytes(cutz, bytes, n / 2);
    expect_fail(rt, cutz, labz, MX_ERR_FORMAT, cutz, "truncated");
    /* Corrupt deflate data in the middle. */
    const char *flip = tmp_path("flip");
    for (size_t i = n / 3; i < n / 3 + 16; i++) bytes[i] ^= 0x5a;
    write_bytes(flip, bytes, n);
    expect_fail(rt, flip, labz, MX_ERR_FORMAT, flip, NULL);
    free(bytes);

    /* A header claiming 4e9 images of 28x28 in a tiny gzip'd file: fails
     * on the early end, with no allocation sized from the header. */
    const char *big = tmp_path("big");
    uint32_t dims[3] = {0xffffffffu, 28, 28}, ldims[1] = {0xffffffffu};
    uint8_t some[784 * 3];
    memset(some, 9, sizeof(some));
    write_idx(big, true, 0x803, dims, 3, some, sizeof(some));
    const char *l9 = tmp_path("l9");
    write_idx(l9, true, 0x801, ldims, 1, some, 100);
    expect_fail(rt, big, l9, MX_ERR_FORMAT, "truncated", NULL);
    /* The same claim in a raw file is caught from the file size. */
    write_idx(big, false, 0x803, dims, 3, some, sizeof(some));
    write_idx(l9, false, 0x801, ldims, 1, some, 100);
    expect_fail(rt, big, l9, MX_ERR_FORMAT, big, "truncated");

    /* Swapped files: wrong magic, with a hint. */
    expect_fail(rt, lab, img, MX_ERR_FORMAT, lab, "0x00000801");
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "swapped"));
    /* Not an idx file at all. */
    const char *x = tmp_path("x");
    write_bytes(x, "hello, world, this is text", 26);
    expect_fail(rt, x, lab, MX_ERR_FORMAT, x, "magic");
    /* Empty file. */
    const char *em = tmp_path("em");
    write_bytes(em, "", 0);
    expect_fail(rt, em, lab, MX_ERR_FORMAT, em, "empty");
    /* Zero rows. */
    uint32_t zd[3] = {2, 0, 28};
    write_idx(x, false, 0x803, zd, 3, NULL, 0);
    expect_fail(rt, x, lab, MX_ERR_FORMAT, x, "dimension");
    /* Counts that disagree. */
    uint8_t nine[19];
    memset(nine, 1, sizeof(nine));
    uint32_t d19[1] = {19};
    write_idx(l9, true, 0x801, d19, 1, nine, 19);
    expect_fail(rt, img, l9, MX_ERR_FORMAT, "20 images", "19 labels");
    /* Missing file. */
    expect_fail(rt, tmp_path("nope"), lab, MX_ERR_IO, "nope", NULL);

    /* Parameters: near misses, bad values, unsupported dtype. */
    mx_data_iter *it = NULL;
    const char *typo[] = {kv(0, "image", img), kv(1, "label", lab), "batchsize=2"};
    ck_assert_int_eq(make_iter(rt, "mnist", typo, 3, &it), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'batch_size'"));
    const char *zero[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=0"};
    ck_assert_int_eq(make_iter(rt, "mnist", zero, 3, &it), MX_ERR_INVALID);
    const char *f16[] = {kv(0, "image", img), kv(1, "label", lab), "dtype=float16"};
    ck_assert_int_eq(make_iter(rt, "mnist", f16, 3, &it), MX_ERR_UNSUPPORTED);
    const char *f32[] = {kv(0, "image", img), kv(1, "label", lab), "dtype=float32", "ctx=cpu", "batch_size=20"};
    OK(make_iter(rt, "mnist", f32, 5, &it));
    mx_data_iter_free(it);
    const mx_data_iter_kind *kind;
    ck_assert_int_eq(mx_data_iter_kind_lookup("mnst", &kind), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'mnist'"));

    mx_runtime_free(rt);
    unlink(tmp_path("nope"));
    tmp_cleanup();
}
END_TEST

START_TEST(test_shutdown_mid_epoch_and_reset)
{
    const char *img = tmp_path("i.gz"), *lab = tmp_path("l.gz");
    write_set(img, lab, true, 600, 28, 28);
    mx_runtime *rt = rt_new();
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=10", "prefetch_buffer=2"};
    mx_data_iter *it;
    /* Freed before anything was read, while the producer fills. */
    OK(make_iter(rt, "mnist", args, 4, &it));
    mx_data_iter_free(it);
    /* Freed after one batch: the producer is blocked on a full ring. */
    OK(make_iter(rt, "mnist", args, 4, &it));
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    ck_assert(has);
    usleep(20000);
    mx_data_iter_free(it);
    /* Reset in the middle of an epoch: the next epoch is whole. */
    OK(make_iter(rt, "mnist", args, 4, &it));
    for (int i = 0; i < 7; i++) {
        OK(mx_data_iter_next(it, &b, &has));
        ck_assert(has);
    }
    OK(mx_data_iter_reset(it));
    uint64_t ids[600];
    ck_assert_int_eq(read_epoch(it, 10, 28, 28, ids, 600), 60);
    int seen[600] = {0};
    for (int i = 0; i < 600; i++) seen[ids[i]]++;
    for (int i = 0; i < 600; i++) ck_assert_int_eq(seen[i], 1);
    /* Many quick resets. */
    for (int i = 0; i < 50; i++) {
        OK(mx_data_iter_reset(it));
        if (i % 2) OK(mx_data_iter_next(it, &b, &has));
    }
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

/* The consumer pushes asynchronous copies of every batch and moves on; the
 * producer must not refill a slot before those copies have run. */
START_TEST(test_async_consumer_copies)
{
    const char *img = tmp_path("i"), *lab = tmp_path("l");
    const int N = 120, BS = 4;
    write_set(img, lab, false, N, 6, 5);
    mx_runtime *rt = rt_new();
    const char *args[] = {kv(0, "image", img), kv(1, "label", lab), "batch_size=4", "prefetch_buffer=1", "seed=11"};
    mx_data_iter *it;
    OK(make_iter(rt, "mnist", args, 5, &it));
    mx_ndarray *copies[30], *lcopies[30];
    uint64_t ids[120];
    int nb = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        OK(mx_ndarray_create(rt, *mx_ndarray_shape(b.data), MX_FLOAT32, mx_cpu(), &copies[nb]));
        OK(mx_ndarray_create(rt, *mx_ndarray_shape(b.label), MX_FLOAT32, mx_cpu(), &lcopies[nb]));
        OK(mx_nd_copy(copies[nb], b.data));
        OK(mx_nd_copy(lcopies[nb], b.label));
        memcpy(ids + nb * BS, b.index, BS * sizeof(uint64_t));
        nb++;
    }
    ck_assert_int_eq(nb, N / BS);
    for (int k = 0; k < nb; k++) {
        mx_data_batch b = {.data = copies[k], .label = lcopies[k], .pad = 0, .index = ids + k * BS};
        check_batch(&b, BS, 6, 5, NULL);
        mx_ndarray_free(copies[k]);
        mx_ndarray_free(lcopies[k]);
    }
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

/* ---- the prefetcher on its own ------------------------------------------ */

typedef struct fail_user {
    int fail_at;   /* batch that fails; -1 never */
    int n_batches;
    int sleep_us;
} fail_user;

static mx_status fail_fill(void *user, int64_t k, mx_prefetch_slot *slot, bool *produced)
{
    fail_user *u = user;
    *produced = false;
    if (u->sleep_us) usleep((useconds_t)u->sleep_us);
    if (k == u->fail_at) return MX_ERROR(MX_ERR_FORMAT, "synthetic failure in batch %lld", (long long)k);
    if (k >= u->n_batches) return MX_OK;
    float *d = slot->data;
    for (int64_t i = 0; i < slot->batch_size * slot->data_size; i++) d[i] = (float)(k * 1000 + i);
    for (int64_t i = 0; i < slot->batch_size; i++) {
        slot->label[i] = (float)k;
        slot->index[i] = (uint64_t)(k * slot->batch_size + i);
    }
    slot->pad = (int)(k % 2);
    *produced = true;
    return MX_OK;
}

START_TEST(test_prefetch_error_surfaces_at_next)
{
    mx_runtime *rt = rt_new();
    fail_user u = {.fail_at = 3, .n_batches = 10};
    mx_prefetch_config cfg = {.data_shape = MX_SHAPE(2, 3), .data_dtype = MX_FLOAT32, .label_shape = MX_SHAPE(2),
                              .capacity = 2, .fill = fail_fill, .user = &u};
    mx_prefetch *p;
    OK(mx_prefetch_create(rt, &cfg, &p));
    mx_data_batch b;
    bool has;
    OK(mx_prefetch_next(p, &b, &has)); /* not started: no batch */
    ck_assert(!has);
    OK(mx_prefetch_start(p));
    ck_assert_int_eq(mx_prefetch_start(p), MX_ERR_INVALID);
    for (int k = 0; k < 3; k++) {
        OK(mx_prefetch_next(p, &b, &has));
        ck_assert(has);
        float d[6], l[2];
        OK(mx_ndarray_to_host(b.data, d, sizeof(d)));
        OK(mx_ndarray_to_host(b.label, l, sizeof(l)));
        for (int i = 0; i < 6; i++) ck_assert(d[i] == (float)(k * 1000 + i));
        ck_assert(l[0] == (float)k && l[1] == (float)k);
        ck_assert_int_eq(b.pad, k % 2);
        ck_assert_uint_eq(b.index[1], (uint64_t)(2 * k + 1));
    }
    /* Batch 3 failed on the producer thread: its message arrives here. */
    mx_error_clear();
    ck_assert_int_eq(mx_prefetch_next(p, &b, &has), MX_ERR_FORMAT);
    ck_assert(!has);
    ck_assert_str_eq(mx_last_error(), "synthetic failure in batch 3");
    ck_assert_int_eq(mx_prefetch_next(p, &b, &has), MX_ERR_FORMAT); /* sticky */
    /* A new epoch clears it. */
    mx_prefetch_stop(p);
    u.fail_at = -1;
    OK(mx_prefetch_start(p));
    int nb = 0;
    for (;;) {
        OK(mx_prefetch_next(p, &b, &has));
        if (!has) break;
        nb++;
    }
    ck_assert_int_eq(nb, 10);
    /* Stop while a slow fill runs, then free. */
    mx_prefetch_stop(p);
    u.sleep_us = 20000;
    OK(mx_prefetch_start(p));
    usleep(5000);
    mx_prefetch_stop(p);
    ck_assert(mx_prefetch_stopping(p));
    OK(mx_prefetch_start(p));
    mx_prefetch_free(p);

    /* Bad configurations. */
    cfg.capacity = 0;
    ck_assert_int_eq(mx_prefetch_create(rt, &cfg, &p), MX_ERR_INVALID);
    cfg.capacity = 1;
    cfg.label_shape = MX_SHAPE(3);
    ck_assert_int_eq(mx_prefetch_create(rt, &cfg, &p), MX_ERR_INVALID);
    mx_runtime_free(rt);
}
END_TEST

/* ---- the real Fashion-MNIST --------------------------------------------- */

/* Decompresses a gzip file with inflate (the test's own path). */
static uint8_t *inflate_file(const char *path, size_t *out_len)
{
    size_t n;
    uint8_t *in = read_bytes(path, &n);
    size_t cap = 16u << 20, len = 0;
    uint8_t *out = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    ck_assert_int_eq(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);
    zs.next_in = in;
    zs.avail_in = (uInt)n;
    int rc;
    do {
        if (len == cap) {
            cap *= 2;
            out = realloc(out, cap);
            ck_assert_ptr_nonnull(out);
        }
        zs.next_out = out + len;
        zs.avail_out = (uInt)(cap - len);
        rc = inflate(&zs, Z_NO_FLUSH);
        ck_assert_msg(rc == Z_OK || rc == Z_STREAM_END, "inflate %s: %d", path, rc);
        len = cap - zs.avail_out;
    } while (rc != Z_STREAM_END);
    inflateEnd(&zs);
    free(in);
    *out_len = len;
    return out;
}

static bool have_fashion(void)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/t10k-images-idx3-ubyte.gz", fashion_dir());
    struct stat st;
    if (stat(p, &st) == 0) return true;
    fprintf(stderr, "\n*** test_io_mnist: Fashion-MNIST not found at %s: REAL-DATA CHECKS SKIPPED ***\n\n",
            fashion_dir());
    return false;
}

START_TEST(test_fashion_mnist_t10k)
{
    if (!have_fashion()) return;
    char ip[512], lp[512];
    snprintf(ip, sizeof(ip), "%s/t10k-images-idx3-ubyte.gz", fashion_dir());
    snprintf(lp, sizeof(lp), "%s/t10k-labels-idx1-ubyte.gz", fashion_dir());
    size_t ni, nl;
    uint8_t *ref_img = inflate_file(ip, &ni), *ref_lab = inflate_file(lp, &nl);
    ck_assert_uint_eq(ni, 16 + 10000 * 784);
    ck_assert_uint_eq(nl, 8 + 10000);
    /* Known facts of the set: the first test image is an ankle boot (9),
     * and a few of its pixels. */
    ck_assert_int_eq(ref_lab[8], 9);
    ck_assert_int_eq(ref_img[16 + 14 * 28 + 14], 110);
    ck_assert_int_eq(ref_img[16 + 20 * 28 + 10], 126);

    mx_runtime *rt = rt_new();
    const char *args[] = {kv(0, "image", ip), kv(1, "label", lp), "batch_size=64", "shuffle=0"};
    mx_data_iter *it;
    OK(make_iter(rt, "mnist", args, 4, &it));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 10000);
    float *d = malloc(64 * 784 * sizeof(float)), l[64];
    int nb = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        if (nb == 0 || nb == 155) {
            OK(mx_ndarray_to_host(b.data, d, 64 * 784 * sizeof(float)));
            OK(mx_ndarray_to_host(b.label, l, sizeof(l)));
            for (int s = 0; s < 64; s++) {
                size_t id = (size_t)nb * 64 + (size_t)s;
                ck_assert_uint_eq(b.index[s], id);
                ck_assert(l[s] == (float)ref_lab[8 + id]);
                for (int j = 0; j < 784; j++)
                    ck_assert_msg(d[s * 784 + j] == (float)ref_img[16 + id * 784 + j] / 256.0f,
                                  "image %zu pixel %d", id, j);
            }
            if (nb == 0) {
                ck_assert(l[0] == 9.0f);
                ck_assert(d[14 * 28 + 14] == 110.0f / 256.0f);
                ck_assert(d[20 * 28 + 10] == 126.0f / 256.0f);
            }
        }
        nb++;
    }
    ck_assert_int_eq(nb, 10000 / 64); /* 156; the last 16 images dropped */
    mx_data_iter_free(it);

    /* Shuffled and flat: same count, distinct samples, right labels. */
    const char *args2[] = {kv(0, "image", ip), kv(1, "label", lp), "batch_size=64", "flat=1", "seed=5"};
    OK(make_iter(rt, "mnist", args2, 5, &it));
    mx_shape ds = mx_data_iter_data_shape(it), want = MX_SHAPE(64, 784);
    ck_assert(mx_shape_equal(&ds, &want));
    char *seen = calloc(10000, 1);
    nb = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        OK(mx_ndarray_to_host(b.label, l, sizeof(l)));
        for (int s = 0; s < 64; s++) {
            ck_assert_int_eq(seen[b.index[s]], 0);
            seen[b.index[s]] = 1;
            ck_assert(l[s] == (float)ref_lab[8 + b.index[s]]);
        }
        nb++;
    }
    ck_assert_int_eq(nb, 156);
    free(seen);
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    free(d);
    free(ref_img);
    free(ref_lab);
}
END_TEST

START_TEST(test_fashion_mnist_train_throughput)
{
    if (!have_fashion()) return;
    char ip[512], lp[512];
    snprintf(ip, sizeof(ip), "%s/train-images-idx3-ubyte.gz", fashion_dir());
    snprintf(lp, sizeof(lp), "%s/train-labels-idx1-ubyte.gz", fashion_dir());
    mx_runtime *rt = rt_new();
    const char *args[] = {kv(0, "image", ip), kv(1, "label", lp), "batch_size=64", "shuffle=1"};
    mx_data_iter *it;
    double t0 = mx_time_seconds();
    OK(make_iter(rt, "mnist", args, 4, &it));
    double t_load = mx_time_seconds() - t0;
    ck_assert_int_eq(mx_data_iter_num_samples(it), 60000);
    /* Pure next(): batches handed out per second. */
    const int epochs = 3;
    int nb = 0;
    t0 = mx_time_seconds();
    for (int e = 0; e < epochs; e++) {
        for (;;) {
            mx_data_batch b;
            bool has;
            OK(mx_data_iter_next(it, &b, &has));
            if (!has) break;
            nb++;
        }
        OK(mx_data_iter_reset(it));
    }
    double t_next = mx_time_seconds() - t0;
    ck_assert_int_eq(nb, epochs * 937);
    /* next() plus reading each batch out to the host. */
    float *d = malloc(64 * 784 * sizeof(float)), l[64];
    int nb2 = 0;
    t0 = mx_time_seconds();
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        OK(mx_ndarray_to_host(b.data, d, 64 * 784 * sizeof(float)));
        OK(mx_ndarray_to_host(b.label, l, sizeof(l)));
        nb2++;
    }
    double t_read = mx_time_seconds() - t0;
    ck_assert_int_eq(nb2, 937);
    printf("mnist throughput (Fashion-MNIST train, batch 64, shuffle): load %.2f s; next() %.0f batches/s "
           "(%.0f images/s); next()+to_host %.0f batches/s\n",
           t_load, nb / t_next, nb * 64 / t_next, nb2 / t_read);
    free(d);
    mx_data_iter_free(it);
    mx_runtime_free(rt);
}
END_TEST

static Suite *io_mnist_suite(void)
{
    Suite *s = suite_create("io_mnist");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_mt19937_and_part_formula);
    tcase_add_test(t, test_raw_exact_and_remainder_dropped);
    tcase_add_test(t, test_silent_controls_the_load_line);
    tcase_add_test(t, test_gzip_flat);
    tcase_add_test(t, test_partition_covers_once);
    tcase_add_test(t, test_shuffle_permutation_reproducible);
    tcase_add_test(t, test_truncated_and_corrupt_files);
    tcase_add_test(t, test_bad_header_closes_both_files);
    tcase_add_test(t, test_shutdown_mid_epoch_and_reset);
    tcase_add_test(t, test_async_consumer_copies);
    tcase_add_test(t, test_prefetch_error_surfaces_at_next);
    suite_add_tcase(s, t);
    TCase *r = tcase_create("fashion_mnist");
    tcase_set_timeout(r, 300);
    tcase_add_test(r, test_fashion_mnist_t10k);
    tcase_add_test(r, test_fashion_mnist_train_throughput);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(io_mnist_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
