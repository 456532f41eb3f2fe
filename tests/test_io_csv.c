/*
 * test_io_csv.c - the CSV iterator (MXNet's CSVIter with BatchLoader's
 * round_batch): exact batch contents from files written here, padding and
 * the carry-over into the next epoch (the example of MXNet's CSVIter
 * documentation), shapes, partitioning, and errors that name FILE:LINE.
 */
#include "io/io.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(expr)                                                                 \
    do {                                                                         \
        mx_status ok_st_ = (expr);                                               \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error()); \
    } while (0)

static char tmp_dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[64][128];
    static int slot;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/tiocsv.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    }
    char *p = buf[slot++ % 64];
    snprintf(p, 128, "%s/%s", tmp_dir, name);
    return p;
}

static void tmp_cleanup(void)
{
    static const char *names[] = {"d.csv", "l.csv", "bad.csv", "l2.csv", "crlf.csv"};
    if (!tmp_dir[0]) return;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) unlink(tmp_path(names[i]));
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    size_t n = strlen(text);
    ck_assert_uint_eq(fwrite(text, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static mx_runtime *rt_new(void)
{
    mx_runtime *rt = NULL;
    OK(mx_runtime_create(NULL, &rt));
    return rt;
}

/* keys/values as "k=v" strings. */
static mx_status make_iter(mx_runtime *rt, const char *const *kv, int n, mx_data_iter **it)
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
    mx_status s = mx_data_iter_create(rt, "csv", k, v, n, it);
    for (int i = 0; i < n; i++) free(copy[i]);
    return s;
}

static char kv_buf[16][300];
static const char *kv(int slot, const char *key, const char *value)
{
    size_t a = strlen(key), b = strlen(value);
    ck_assert_uint_lt(a + b + 2, sizeof(kv_buf[slot]));
    memcpy(kv_buf[slot], key, a);
    kv_buf[slot][a] = '=';
    memcpy(kv_buf[slot] + a + 1, value, b + 1);
    return kv_buf[slot];
}

/* Next batch into host arrays; false at the end of the epoch. */
static bool next_batch(mx_data_iter *it, float *data, size_t dn, float *label, size_t ln, int *pad, uint64_t *index)
{
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    if (!has) return false;
    ck_assert_int_eq(mx_ndarray_size(b.data), (int64_t)dn);
    ck_assert_int_eq(mx_ndarray_size(b.label), (int64_t)ln);
    OK(mx_ndarray_to_host(b.data, data, dn * sizeof(float)));
    OK(mx_ndarray_to_host(b.label, label, ln * sizeof(float)));
    *pad = b.pad;
    if (index) memcpy(index, b.index, (size_t)mx_ndarray_shape(b.data)->dims[0] * sizeof(uint64_t));
    return true;
}

static void expect_floats(const float *got, const float *want, int n, const char *what)
{
    for (int i = 0; i < n; i++) ck_assert_msg(got[i] == want[i], "%s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
}

START_TEST(test_exact_contents_no_round)
{
    const char *d = tmp_path("d.csv"), *l = tmp_path("l.csv");
    /* Blanks around numbers, exponents, negatives, a blank line, no final
     * newline. */
    write_text(d, "1,2,3\n -4.5 , 0.25,1e3\n\n7,8,9\n0.1,-0,3.5e-2\n10,11,12");
    write_text(l, "0\n1\n\n2\n3\n4\n");
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    const char *args[] = {kv(0, "data_csv", d), kv(1, "label_csv", l), "data_shape=(3,)", "batch_size=2",
                          "round_batch=0"};
    OK(make_iter(rt, args, 5, &it));
    mx_shape ds = mx_data_iter_data_shape(it), ls = mx_data_iter_label_shape(it);
    mx_shape wd = MX_SHAPE(2, 3), wl = MX_SHAPE(2);
    ck_assert(mx_shape_equal(&ds, &wd));
    ck_assert(mx_shape_equal(&ls, &wl));
    ck_assert_int_eq(mx_data_iter_num_samples(it), 5);
    for (int epoch = 0; epoch < 2; epoch++) {
        float data[6], label[2];
        int pad;
        uint64_t idx[2];
        ck_assert(next_batch(it, data, 6, label, 2, &pad, idx));
        expect_floats(data, (float[]){1, 2, 3, -4.5f, 0.25f, 1000}, 6, "batch 0");
        expect_floats(label, (float[]){0, 1}, 2, "label 0");
        ck_assert_int_eq(pad, 0);
        ck_assert(idx[0] == 0 && idx[1] == 1);
        ck_assert(next_batch(it, data, 6, label, 2, &pad, idx));
        expect_floats(data, (float[]){7, 8, 9, 0.1f, -0.0f, 3.5e-2f}, 6, "batch 1");
        ck_assert(!signbit(data[3]) && signbit(data[4]));
        expect_floats(label, (float[]){2, 3}, 2, "label 1");
        /* Last, partial: pad 1, the padded slot zero with index UINT64_MAX. */
        ck_assert(next_batch(it, data, 6, label, 2, &pad, idx));
        expect_floats(data, (float[]){10, 11, 12, 0, 0, 0}, 6, "batch 2");
        expect_floats(label, (float[]){4, 0}, 2, "label 2");
        ck_assert_int_eq(pad, 1);
        ck_assert(idx[0] == 4 && idx[1] == UINT64_MAX);
        ck_assert(!next_batch(it, data, 6, label, 2, &pad, idx));
        OK(mx_data_iter_reset(it)); /* round_batch=0: every epoch from the top */
    }
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

/* MXNet's CSVIter documentation: rows 1,2,3 / 2,3,4 / 3,4,5 / 4,5,6,
 * batch_size 3, round_batch default: first pass [r1 r2 r3] [r4 r1 r2]; after
 * reset [r3 r4 r1]. */
START_TEST(test_round_batch_mxnet_example)
{
    const char *d = tmp_path("d.csv");
    write_text(d, "1,2,3\n2,3,4\n3,4,5\n4,5,6\n");
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    const char *args[] = {kv(0, "data_csv", d), "data_shape=(3,)", "batch_size=3"};
    OK(make_iter(rt, args, 3, &it));
    float data[9], label[3];
    int pad;
    uint64_t idx[3];
    const float r[4][3] = {{1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 6}};
    /* Expected epochs: row ids and pad of each batch. */
    const int epochs[4][2][4] = {
        {{0, 1, 2, 0}, {3, 0, 1, 2}},  /* pad 2 */
        {{2, 3, 0, 1}, {-1}},          /* continues at r3; pad 1 */
        {{1, 2, 3, 0}, {-1}},          /* continues at r2; exact */
        {{0, 1, 2, 0}, {3, 0, 1, 2}},  /* from the top again */
    };
    for (int e = 0; e < 4; e++) {
        for (int b = 0; b < 2 && epochs[e][b][0] >= 0; b++) {
            ck_assert_msg(next_batch(it, data, 9, label, 3, &pad, idx), "epoch %d batch %d missing", e, b);
            for (int s = 0; s < 3; s++) {
                int row = epochs[e][b][s];
                expect_floats(data + 3 * s, r[row], 3, "row");
                ck_assert_uint_eq(idx[s], (uint64_t)row);
                ck_assert(label[s] == 0.0f); /* no label file */
            }
            ck_assert_int_eq(pad, epochs[e][b][3]);
        }
        ck_assert_msg(!next_batch(it, data, 9, label, 3, &pad, idx), "epoch %d too long", e);
        OK(mx_data_iter_reset(it));
    }
    /* Handed the wrapped batch, a reset carries over even before next()
     * reports the end: this epoch started at r3, its one batch [r3 r4 r1]. */
    ck_assert(next_batch(it, data, 9, label, 3, &pad, idx));
    ck_assert(idx[0] == 2 && pad == 1);
    OK(mx_data_iter_reset(it));
    ck_assert(next_batch(it, data, 9, label, 3, &pad, idx));
    ck_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 3 && pad == 0);
    mx_data_iter_free(it);
    /* A reset in the middle of an epoch starts at the top. */
    OK(make_iter(rt, args, 3, &it));
    ck_assert(next_batch(it, data, 9, label, 3, &pad, idx));
    OK(mx_data_iter_reset(it));
    ck_assert(next_batch(it, data, 9, label, 3, &pad, idx));
    ck_assert(idx[0] == 0 && idx[1] == 1 && idx[2] == 2 && pad == 0);
    mx_data_iter_free(it);

    /* round_batch needs at least one full batch. */
    const char *big[] = {kv(0, "data_csv", d), "data_shape=(3,)", "batch_size=5"};
    ck_assert_int_eq(make_iter(rt, big, 3, &it), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "fewer than batch_size"));
    /* Without it, one short batch. */
    const char *big0[] = {kv(0, "data_csv", d), "data_shape=(3,)", "batch_size=5", "round_batch=0"};
    OK(make_iter(rt, big0, 4, &it));
    float d5[15], l5[5];
    ck_assert(next_batch(it, d5, 15, l5, 5, &pad, NULL));
    ck_assert_int_eq(pad, 1);
    ck_assert(!next_batch(it, d5, 15, l5, 5, &pad, NULL));
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_shapes_and_crlf)
{
    const char *d = tmp_path("crlf.csv"), *l = tmp_path("l.csv");
    write_text(d, "1,2,3,4\r\n5,6,7,8\r\n9,10,11,12\r\n");
    write_text(l, "1,-1\n2,-2\n3,-3\n");
    mx_runtime *rt = rt_new();
    mx_data_iter *it;
    const char *args[] = {kv(0, "data_csv", d), kv(1, "label_csv", l), "data_shape=(2,2)", "label_shape=(2,)",
                          "batch_size=3", "prefetch_buffer=1"};
    OK(make_iter(rt, args, 6, &it));
    mx_shape ds = mx_data_iter_data_shape(it), ls = mx_data_iter_label_shape(it);
    mx_shape wd = MX_SHAPE(3, 2, 2), wl = MX_SHAPE(3, 2);
    ck_assert(mx_shape_equal(&ds, &wd));
    ck_assert(mx_shape_equal(&ls, &wl));
    float data[12], label[6];
    int pad;
    ck_assert(next_batch(it, data, 12, label, 6, &pad, NULL));
    for (int i = 0; i < 12; i++) ck_assert(data[i] == (float)(i + 1));
    expect_floats(label, (float[]){1, -1, 2, -2, 3, -3}, 6, "label");
    ck_assert_int_eq(pad, 0);
    ck_assert(!next_batch(it, data, 12, label, 6, &pad, NULL));
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_partition_covers_once)
{
    const char *d = tmp_path("d.csv");
    char text[1024] = "";
    for (int i = 0; i < 23; i++) {
        char line[32];
        snprintf(line, sizeof(line), "%d,%d\n", i, -i);
        strcat(text, line);
    }
    write_text(d, text);
    mx_runtime *rt = rt_new();
    for (int parts = 1; parts <= 13; parts++) {
        int seen[23] = {0};
        for (int part = 0; part < parts; part++) {
            char np[16], pi[16];
            snprintf(np, sizeof(np), "%d", parts);
            snprintf(pi, sizeof(pi), "%d", part);
            const char *args[] = {kv(0, "data_csv", d), "data_shape=2", "batch_size=1", kv(1, "num_parts", np),
                                  kv(2, "part_index", pi)};
            mx_data_iter *it;
            OK(make_iter(rt, args, 5, &it));
            float data[2], label[1];
            int pad;
            uint64_t idx[1];
            while (next_batch(it, data, 2, label, 1, &pad, idx)) {
                ck_assert_uint_lt(idx[0], 23);
                ck_assert(data[0] == (float)idx[0] && data[1] == -(float)idx[0]);
                seen[idx[0]]++;
            }
            mx_data_iter_free(it);
        }
        for (int i = 0; i < 23; i++) ck_assert_msg(seen[i] == 1, "parts=%d: row %d seen %d times", parts, i, seen[i]);
    }
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

/* Creates an iterator over `text` and reads until the error; returns the
 * status and how many batches came before it. */
static mx_status read_until_error(mx_runtime *rt, const char *text, const char *label_text, int *batches)
{
    const char *d = tmp_path("bad.csv"), *l = tmp_path("l2.csv");
    write_text(d, text);
    if (label_text) write_text(l, label_text);
    const char *args[] = {kv(0, "data_csv", d), "data_shape=(3,)", "batch_size=2",
                          kv(1, "label_csv", label_text ? l : "NULL")};
    mx_data_iter *it;
    mx_status s = make_iter(rt, args, 4, &it);
    *batches = 0;
    if (s != MX_OK) return s;
    for (;;) {
        mx_data_batch b;
        bool has;
        s = mx_data_iter_next(it, &b, &has);
        if (s != MX_OK || !has) break;
        (*batches)++;
    }
    mx_data_iter_free(it); /* keeps the message, also under NaiveEngine */
    return s;
}

static void expect_msg(const char *needle)
{
    ck_assert_msg(strstr(mx_last_error(), needle) != NULL, "message '%s' lacks '%s'", mx_last_error(), needle);
}

START_TEST(test_errors_name_file_and_line)
{
    mx_runtime *rt = rt_new();
    char where[160];
    int nb;
    /* A bad number on line 6 (after a blank line): two good batches first. */
    ck_assert_int_eq(read_until_error(rt, "1,2,3\n4,5,6\n7,8,9\n1,1,1\n\n2,x2,2\n3,3,3\n", NULL, &nb), MX_ERR_FORMAT);
    ck_assert_int_eq(nb, 2);
    snprintf(where, sizeof(where), "%s:6:", tmp_path("bad.csv"));
    expect_msg(where);
    expect_msg("'x2' is not a number");
    expect_msg("column 2");
    /* Wrong column count. */
    ck_assert_int_eq(read_until_error(rt, "1,2,3\n4,5\n", NULL, &nb), MX_ERR_FORMAT);
    ck_assert_int_eq(nb, 0);
    snprintf(where, sizeof(where), "%s:2:", tmp_path("bad.csv"));
    expect_msg(where);
    expect_msg("2 columns, expected 3");
    ck_assert_int_eq(read_until_error(rt, "1,2,3,4\n4,5,6\n", NULL, &nb), MX_ERR_FORMAT);
    expect_msg(":1: 4 columns, expected 3");
    /* Empty field. */
    ck_assert_int_eq(read_until_error(rt, "1,,3\n4,5,6\n", NULL, &nb), MX_ERR_FORMAT);
    expect_msg(":1: column 2 is empty");
    /* Out of float range. */
    ck_assert_int_eq(read_until_error(rt, "1,2,3\n4,5,1e99\n", NULL, &nb), MX_ERR_FORMAT);
    expect_msg(":2: column 3");
    /* A bad label names the label file. */
    ck_assert_int_eq(read_until_error(rt, "1,2,3\n4,5,6\n", "1\n2 3\n", &nb), MX_ERR_FORMAT);
    snprintf(where, sizeof(where), "%s:2:", tmp_path("l2.csv"));
    expect_msg(where);
    /* Row counts that disagree: found at creation. */
    ck_assert_int_eq(read_until_error(rt, "1,2,3\n4,5,6\n", "1\n2\n3\n", &nb), MX_ERR_FORMAT);
    expect_msg("has 2 rows but label file");
    /* Empty data file. */
    ck_assert_int_eq(read_until_error(rt, "\n\n", NULL, &nb), MX_ERR_INVALID);
    expect_msg("no rows");

    /* Missing file, parameters. */
    mx_data_iter *it;
    const char *missing[] = {kv(0, "data_csv", tmp_path("nope.csv")), "data_shape=(3,)", "batch_size=2"};
    ck_assert_int_eq(make_iter(rt, missing, 3, &it), MX_ERR_IO);
    expect_msg("nope.csv");
    const char *typo[] = {kv(0, "data_csv", tmp_path("bad.csv")), "data_shap=(3,)", "batch_size=2"};
    ck_assert_int_eq(make_iter(rt, typo, 3, &it), MX_ERR_INVALID);
    expect_msg("did you mean 'data_shape'");
    const char *nobs[] = {kv(0, "data_csv", tmp_path("bad.csv")), "data_shape=(3,)"};
    ck_assert_int_eq(make_iter(rt, nobs, 2, &it), MX_ERR_INVALID);
    expect_msg("'batch_size' is missing");
    const char *noshape[] = {kv(0, "data_csv", tmp_path("bad.csv")), "data_shape=()", "batch_size=2"};
    ck_assert_int_eq(make_iter(rt, noshape, 3, &it), MX_ERR_INVALID);
    expect_msg("data_shape");
    const char *i32[] = {kv(0, "data_csv", tmp_path("bad.csv")), "data_shape=(3,)", "batch_size=2", "dtype=int32"};
    ck_assert_int_eq(make_iter(rt, i32, 4, &it), MX_ERR_UNSUPPORTED);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

START_TEST(test_free_mid_epoch)
{
    const char *d = tmp_path("d.csv");
    char *text = malloc(64 * 1000 + 1);
    text[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < 1000; i++) len += (size_t)sprintf(text + len, "%d,%d,%d\n", i, i + 1, i + 2);
    write_text(d, text);
    free(text);
    mx_runtime *rt = rt_new();
    const char *args[] = {kv(0, "data_csv", d), "data_shape=(3,)", "batch_size=7", "prefetch_buffer=2"};
    for (int stop_after = 0; stop_after < 4; stop_after++) {
        mx_data_iter *it;
        OK(make_iter(rt, args, 4, &it));
        for (int i = 0; i < stop_after * 3; i++) {
            mx_data_batch b;
            bool has;
            OK(mx_data_iter_next(it, &b, &has));
            ck_assert(has);
        }
        if (stop_after == 2) OK(mx_data_iter_reset(it));
        mx_data_iter_free(it);
    }
    /* A whole epoch: 1000 rows, batch 7: 143 batches, the last padded by 1. */
    mx_data_iter *it;
    OK(make_iter(rt, args, 4, &it));
    int nb = 0, last_pad = -1;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        last_pad = b.pad;
        nb++;
    }
    ck_assert_int_eq(nb, 143);
    ck_assert_int_eq(last_pad, 1);
    mx_data_iter_free(it);
    mx_runtime_free(rt);
    tmp_cleanup();
}
END_TEST

static Suite *io_csv_suite(void)
{
    Suite *s = suite_create("io_csv");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_exact_contents_no_round);
    tcase_add_test(t, test_round_batch_mxnet_example);
    tcase_add_test(t, test_shapes_and_crlf);
    tcase_add_test(t, test_partition_covers_once);
    tcase_add_test(t, test_errors_name_file_and_line);
    tcase_add_test(t, test_free_mid_epoch);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(io_csv_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
