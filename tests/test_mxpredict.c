/*
 * test_mxpredict.c - mxpredict end to end (build/bin/mxpredict, with
 * build/bin/mxtrain to make models; MX_TEST_BUILD names the build):
 *   - on models mxtrain trained (MLP and LeNet on Fashion-MNIST subsets),
 *     the accuracy computed here from mxpredict's CSV equals the
 *     Validation-accuracy mxtrain logged for that epoch, to the digit;
 *   - the MXNet-written MLP in ../shared/fixtures/mxnet/sagemaker-mnist-mlp
 *     loads and its probabilities (and an inner layer) match a float64
 *     forward pass computed here from the .params file read by this test's
 *     own parser;
 *   - --layer output equals that layer's values in a full forward pass of
 *     the library's executor, as CSV and raw, and its planned memory is
 *     smaller than the full network's;
 *   - idx, image files, .lst, .rec and paths on stdin give the same
 *     answers for the same pixels; unreadable inputs are reported and
 *     skipped, exit 1;
 *   - usage errors exit 2 with one line.
 * Data: Fashion-MNIST from Debian's dataset-fashion-mnist (make deps).
 */
#include "executor/executor.h"
#include "image/image.h"
#include "io/io.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"
#include "checkpoint/checkpoint.h"

#include "support/tooltest.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#define FM_DIR "/usr/share/datasets/fashion-mnist"
#define T10K_IMAGES FM_DIR "/t10k-images-idx3-ubyte.gz"
#define T10K_LABELS FM_DIR "/t10k-labels-idx1-ubyte.gz"

static char predict_bin[512], train_bin[512], fixture[1024];
static char tmp[256];

static void setup(void)
{
    const char *build = getenv("MX_TEST_BUILD");
    if (!build || !*build) build = "build";
    snprintf(predict_bin, sizeof(predict_bin), "%s/bin/mxpredict", build);
    snprintf(train_bin, sizeof(train_bin), "%s/bin/mxtrain", build);
    const char *shared = getenv("MX_SHARED_DIR");
    snprintf(fixture, sizeof(fixture), "%s/fixtures/mxnet/sagemaker-mnist-mlp/model",
             shared && *shared ? shared : "../shared");
    tool_tmp_make(tmp, sizeof(tmp), "mxpredict-test");
}

static void teardown(void) { tool_tmp_remove(tmp); }

static const char *tpath(const char *name)
{
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmp, name);
    return buf[k];
}

/* Runs `bin args` with stdin from stdin_path (or /dev/null); returns the
 * exit status, stdout and stderr (malloc'ed). */
static int run_bin(const char *bin, const char *args, const char *stdin_path, char **out, char **err)
{
    return tool_run(bin, args, tmp, stdin_path, out, err);
}

static int predict(const char *args, char **out, char **err) { return run_bin(predict_bin, args, NULL, out, err); }

/* ---------------------------------------------------------------- data */

static uint8_t *gunzip(const char *path, size_t *len)
{
    gzFile g = gzopen(path, "rb");
    ck_assert_msg(g != NULL, "cannot open %s (install dataset-fashion-mnist: make deps)", path);
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    int got;
    while ((got = gzread(g, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    ck_assert_int_eq(got, 0);
    gzclose(g);
    *len = n;
    return buf;
}

static uint8_t *test_images(void)
{
    size_t len;
    uint8_t *img = gunzip(T10K_IMAGES, &len);
    ck_assert_uint_eq(len, 16 + 10000u * 784);
    return img;
}

static uint8_t *test_labels(void)
{
    size_t len;
    uint8_t *lab = gunzip(T10K_LABELS, &len);
    ck_assert_uint_eq(len, 8 + 10000u);
    return lab;
}

/* The first n test images as a raw idx3 file. */
static void write_subset(const char *path, int n)
{
    uint8_t *img = test_images();
    img[4] = (uint8_t)(n >> 24);
    img[5] = (uint8_t)(n >> 16);
    img[6] = (uint8_t)(n >> 8);
    img[7] = (uint8_t)n;
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(img, 1, 16 + (size_t)n * 784, f), 16 + (size_t)n * 784);
    ck_assert_int_eq(fclose(f), 0);
    free(img);
}

/* ---------------------------------------------------------------- CSV */

typedef struct csv {
    int rows, cols;
    char **cell; /* rows x cols, row 0 the header */
    char *text;
} csv;

/* Splits simple CSV (no quoted fields). */
static csv parse_csv(char *text)
{
    csv c = {0};
    c.text = text;
    int cap = 1024;
    c.cell = malloc(sizeof(char *) * (size_t)cap);
    char *save, *line = strtok_r(text, "\n", &save);
    while (line) {
        int cols = 0;
        char *p = line;
        for (;;) {
            if (c.rows * c.cols + cols + 1 >= cap) c.cell = realloc(c.cell, sizeof(char *) * (size_t)(cap *= 2));
            c.cell[(c.rows ? c.rows * c.cols : 0) + cols++] = p;
            char *comma = strchr(p, ',');
            if (!comma) break;
            *comma = '\0';
            p = comma + 1;
        }
        if (c.rows == 0) c.cols = cols;
        ck_assert_msg(cols == c.cols, "row %d has %d fields, the header %d", c.rows, cols, c.cols);
        c.rows++;
        line = strtok_r(NULL, "\n", &save);
    }
    return c;
}

static const char *cell(const csv *c, int r, int k) { return c->cell[r * c->cols + k]; }

static void free_csv(csv *c)
{
    free(c->cell);
    free(c->text);
}

/* "Epoch[E] Validation-accuracy=X" as written, X as text. */
static void logged_accuracy(const char *log, int epoch, char *out, size_t size)
{
    char key[64];
    snprintf(key, sizeof(key), "Epoch[%d] Validation-accuracy=", epoch);
    const char *p = strstr(log, key);
    ck_assert_msg(p != NULL, "no %s in\n%s", key, log);
    p += strlen(key);
    size_t n = strcspn(p, "\n");
    ck_assert_uint_lt(n, size);
    memcpy(out, p, n);
    out[n] = '\0';
}

/* Accuracy of top1 over ids [0, n) of a prediction CSV, as "%f". */
static void csv_accuracy(const char *path, const uint8_t *labels, int n, char *out, size_t size)
{
    csv c = parse_csv(tool_slurp(path, NULL));
    ck_assert_str_eq(cell(&c, 0, 0), "id");
    ck_assert_str_eq(cell(&c, 0, 1), "top1");
    int correct = 0, seen = 0;
    for (int r = 1; r < c.rows; r++) {
        int id = atoi(cell(&c, r, 0));
        ck_assert_int_eq(id, r - 1); /* input order */
        if (id >= n) continue;
        seen++;
        correct += atoi(cell(&c, r, 1)) == labels[8 + id];
    }
    ck_assert_int_eq(seen, n);
    snprintf(out, size, "%f", (double)correct / n);
    free_csv(&c);
}

/* ---------------------------------------------------------------- accuracy */

START_TEST(accuracy_equals_mxtrain_validation)
{
    char *out, *err, args[2048], want[64], got[64];
    uint8_t *labels = test_labels();
    /* MLP (flat input, batch 64): [val] is part 0 of 2, images [0, 5000):
     * 78 full batches of 64 = 4992 scored (the iterator drops the rest). */
    snprintf(args, sizeof(args),
             "configs/mlp.conf train.num_parts=6 val.num_parts=2 fit.num_epoch=2 fit.disp_batches=1000 "
             "fit.model_prefix=%s",
             tpath("mlp"));
    ck_assert_msg(run_bin(train_bin, args, NULL, &out, &err) == 0, "%s", err);
    char *log = err;
    free(out);
    for (int epoch = 1; epoch <= 2; epoch++) {
        /* Newest by default (epoch 2), else --epoch 1. */
        snprintf(args, sizeof(args), "--config configs/mlp.conf --model %s %s --top-k 3 --output %s %s",
                 tpath("mlp"), epoch == 1 ? "--epoch 1" : "", tpath("mlp.csv"), T10K_IMAGES);
        ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
        ck_assert_str_eq(out, "");
        csv_accuracy(tpath("mlp.csv"), labels, 4992, got, sizeof(got));
        logged_accuracy(log, epoch - 1, want, sizeof(want));
        ck_assert_msg(!strcmp(got, want), "epoch %d: mxpredict %s, mxtrain %s", epoch, got, want);
        fprintf(stderr, "mlp epoch %d: accuracy %s from the CSV, %s logged by mxtrain\n", epoch, got, want);
        free(out);
        free(err);
    }
    free(log);

    /* LeNet (1,28,28): [val] part 0 of 4, [0, 2500): 39 batches = 2496. */
    snprintf(args, sizeof(args),
             "configs/lenet.conf train.num_parts=12 val.num_parts=4 fit.num_epoch=1 fit.disp_batches=1000 "
             "fit.model_prefix=%s",
             tpath("lenet"));
    ck_assert_msg(run_bin(train_bin, args, NULL, &out, &err) == 0, "%s", err);
    log = err;
    free(out);
    snprintf(args, sizeof(args), "--config configs/lenet.conf --model %s --output %s %s", tpath("lenet"),
             tpath("lenet.csv"), T10K_IMAGES);
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    csv_accuracy(tpath("lenet.csv"), labels, 2496, got, sizeof(got));
    logged_accuracy(log, 0, want, sizeof(want));
    ck_assert_msg(!strcmp(got, want), "lenet: mxpredict %s, mxtrain %s", got, want);
    fprintf(stderr, "lenet epoch 1: accuracy %s from the CSV, %s logged by mxtrain\n", got, want);
    ck_assert_msg(strstr(err, "mxpredict: 10000 samples predicted, 0 unreadable"), "%s", err);
    free(out);
    free(err);
    free(log);
    free(labels);
}
END_TEST

/* Fashion-MNIST images [0, n) of the given idx (gz) as a .rec of grey
 * JPEGs (id = index, label = class) with its .idx. */
static void write_jpeg_rec(const char *images, const char *labels_path, int n, const char *rec, const char *idx_path,
                           uint8_t *labels_out)
{
    size_t ilen, llen;
    uint8_t *img = gunzip(images, &ilen), *lab = gunzip(labels_path, &llen);
    ck_assert_uint_ge(ilen, 16 + (size_t)n * 784);
    mx_recordio_writer *w;
    mx_recordio_index *index;
    ck_assert_int_eq(mx_recordio_writer_open(rec, &w), MX_OK);
    ck_assert_int_eq(mx_recordio_index_create(&index), MX_OK);
    for (int i = 0; i < n; i++) {
        mx_image im;
        ck_assert_int_eq(mx_image_create(28, 28, 1, &im), MX_OK);
        memcpy(im.data, img + 16 + (size_t)i * 784, 784);
        uint8_t *jpg, *payload;
        size_t size, psize;
        ck_assert_int_eq(mx_image_encode_jpeg(&im, 95, &jpg, &size), MX_OK);
        mx_irheader h = {.flag = 0, .label = (float)lab[8 + i], .id = (uint64_t)i};
        ck_assert_int_eq(mx_imrec_pack(&h, NULL, jpg, size, &payload, &psize), MX_OK);
        uint64_t off;
        ck_assert_int_eq(mx_recordio_writer_write(w, payload, psize, &off), MX_OK);
        ck_assert_int_eq(mx_recordio_index_add(index, i, off), MX_OK);
        if (labels_out) labels_out[i] = lab[8 + i];
        free(payload);
        free(jpg);
        mx_image_free(&im);
    }
    ck_assert_int_eq(mx_recordio_writer_close(w), MX_OK);
    ck_assert_int_eq(mx_recordio_index_write(index, idx_path), MX_OK);
    mx_recordio_index_free(index);
    free(img);
    free(lab);
}

START_TEST(accuracy_equals_mxtrain_validation_on_a_rec)
{
    /* The image iterator and mxpredict decode and scale JPEGs the same way. */
    if (!mx_data_iter_kind_find("imagerecord")) {
        fprintf(stderr, "SKIPPED: no imagerecord iterator in this build\n");
        return;
    }
    const int n_train = 3000, n_val = 1000;
    uint8_t *val_labels = malloc((size_t)n_val);
    write_jpeg_rec(FM_DIR "/train-images-idx3-ubyte.gz", FM_DIR "/train-labels-idx1-ubyte.gz", n_train,
                   tpath("train.rec"), tpath("train.idx"), NULL);
    write_jpeg_rec(T10K_IMAGES, T10K_LABELS, n_val, tpath("val.rec"), tpath("val.idx"), val_labels);
    /* LeNet with imagerecord sections, pixels / 256 as the mnist iterator. */
    char *lenet = tool_slurp("configs/lenet.conf", NULL);
    char *cut = strstr(lenet, "\n[train]");
    ck_assert_ptr_nonnull(cut);
    cut[1] = '\0';
    FILE *f = fopen(tpath("lenet-rec.conf"), "w");
    fputs(lenet, f);
    fprintf(f,
            "[train]\niter = imagerecord\npath_imgrec = %s\npath_imgidx = %s\ndata_shape = 1,28,28\n"
            "batch_size = 64\nshuffle = 1\nscale = 0.00390625\n\n"
            "[val]\niter = imagerecord\npath_imgrec = %s\ndata_shape = 1,28,28\nbatch_size = 64\n"
            "scale = 0.00390625\n\n[optimizer]\ntype = sgd\nlr = 0.05\nmomentum = 0.9\n\n"
            "[fit]\nnum_epoch = 1\nmodel_prefix = %s\ndisp_batches = 1000\n",
            tpath("train.rec"), tpath("train.idx"), tpath("val.rec"), tpath("lrec"));
    fclose(f);
    free(lenet);
    char *out, *err, args[4096], want[64], got[64];
    snprintf(args, sizeof(args), "%s", tpath("lenet-rec.conf"));
    ck_assert_msg(run_bin(train_bin, args, NULL, &out, &err) == 0, "%s", err);
    char *log = err;
    free(out);
    /* Everything from the config: the model prefix, shape, scale, batch size. */
    snprintf(args, sizeof(args), "--config %s --top-k 1 --output %s %s", tpath("lenet-rec.conf"), tpath("r.csv"),
             tpath("val.rec"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    /* round_batch pads the last [val] batch from the start; padding is not scored: all 1000 count. */
    csv c = parse_csv(tool_slurp(tpath("r.csv"), NULL));
    ck_assert_int_eq(c.rows, n_val + 1);
    int correct = 0;
    for (int r = 1; r < c.rows; r++) {
        int id = atoi(cell(&c, r, 0));
        ck_assert_int_eq(id, r - 1);
        correct += atoi(cell(&c, r, 1)) == val_labels[id];
    }
    snprintf(got, sizeof(got), "%f", (double)correct / n_val);
    logged_accuracy(log, 0, want, sizeof(want));
    ck_assert_msg(!strcmp(got, want), "mxpredict %s, mxtrain %s", got, want);
    fprintf(stderr, "lenet on a .rec: accuracy %s from the CSV, %s logged by mxtrain\n", got, want);
    free_csv(&c);
    free(out);
    free(err);
    free(log);
    free(val_labels);
}
END_TEST

/* ---------------------------------------------------------------- the MXNet fixture */

typedef struct param {
    char name[128];
    int ndim;
    int64_t dims[4];
    float *data;
} param;

static uint64_t rd_u64(const uint8_t **p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)(*p)[i] << (8 * i);
    *p += 8;
    return v;
}

static uint32_t rd_u32(const uint8_t **p)
{
    uint32_t v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 | (uint32_t)(*p)[3] << 24;
    *p += 4;
    return v;
}

/* MXNet's V2 NDArray list (mxnet-formats.md 5.1/5.2), dense float32 only:
 * this test's own reader, independent of lib/ndarray. */
static int read_params(const char *path, param *ps, int cap)
{
    size_t len;
    uint8_t *file = (uint8_t *)tool_slurp(path, &len);
    const uint8_t *p = file, *end = file + len;
    ck_assert_uint_eq(rd_u64(&p), 0x112);
    rd_u64(&p);
    int n = (int)rd_u64(&p);
    ck_assert_int_le(n, cap);
    for (int i = 0; i < n; i++) {
        ck_assert_uint_eq(rd_u32(&p), 0xF993FAC9u);
        ck_assert_uint_eq(rd_u32(&p), 0); /* dense */
        ps[i].ndim = (int)rd_u32(&p);
        ck_assert(ps[i].ndim >= 1 && ps[i].ndim <= 4);
        size_t count = 1;
        for (int d = 0; d < ps[i].ndim; d++) count *= (size_t)(ps[i].dims[d] = (int64_t)rd_u64(&p));
        rd_u32(&p);
        rd_u32(&p);
        ck_assert_uint_eq(rd_u32(&p), 0); /* float32 */
        ck_assert(p + 4 * count <= end);
        ps[i].data = malloc(4 * count);
        for (size_t k = 0; k < count; k++) {
            uint32_t u = rd_u32(&p);
            memcpy(&ps[i].data[k], &u, 4);
        }
    }
    ck_assert_uint_eq(rd_u64(&p), (uint64_t)n);
    for (int i = 0; i < n; i++) {
        size_t l = (size_t)rd_u64(&p);
        ck_assert_uint_lt(l, sizeof(ps[i].name));
        memcpy(ps[i].name, p, l);
        ps[i].name[l] = '\0';
        p += l;
    }
    ck_assert(p == end);
    free(file);
    return n;
}

static const param *find_param(const param *ps, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ps[i].name, name)) return &ps[i];
    ck_abort_msg("no %s", name);
    return NULL;
}

/* y = W x + b over float64, W (out, in). */
static void dense(const param *w, const param *b, const double *x, double *y)
{
    int64_t out = w->dims[0], in = w->dims[1];
    for (int64_t o = 0; o < out; o++) {
        double s = b->data[o];
        for (int64_t i = 0; i < in; i++) s += (double)w->data[o * in + i] * x[i];
        y[o] = s;
    }
}

START_TEST(mxnet_fixture_matches_reference_forward)
{
    const int N = 50;
    write_subset(tpath("sub-idx3-ubyte"), N);
    char *out, *err, args[4096], path[1100];
    snprintf(args, sizeof(args), "--model %s --top-k 10 --batch-size 16 -v --output %s %s", fixture, tpath("p.csv"),
             tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "input 'data' (1,28,28)"), "%s", err);
    free(out);
    free(err);
    snprintf(args, sizeof(args), "--model %s --epoch 0 --layer activation0 --batch-size 16 --output %s %s", fixture,
             tpath("relu.csv"), tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    free(out);
    free(err);

    param ps[8];
    snprintf(path, sizeof(path), "%s-0000.params", fixture);
    int np = read_params(path, ps, 8);
    ck_assert_int_eq(np, 6);
    const param *w0 = find_param(ps, np, "arg:fullyconnected0_weight"), *b0 = find_param(ps, np, "arg:fullyconnected0_bias");
    const param *w1 = find_param(ps, np, "arg:fullyconnected1_weight"), *b1 = find_param(ps, np, "arg:fullyconnected1_bias");
    const param *w2 = find_param(ps, np, "arg:fullyconnected2_weight"), *b2 = find_param(ps, np, "arg:fullyconnected2_bias");
    ck_assert(fabsf(w0->data[0] - 0.00097627f) < 1e-8f); /* the README's first value */

    csv c = parse_csv(tool_slurp(tpath("p.csv"), NULL));
    csv r = parse_csv(tool_slurp(tpath("relu.csv"), NULL));
    ck_assert_int_eq(c.rows, N + 1);
    ck_assert_int_eq(c.cols, 21);
    ck_assert_int_eq(r.rows, N + 1);
    ck_assert_int_eq(r.cols, 129);
    uint8_t *img = test_images();
    double max_diff = 0, max_relu = 0;
    for (int s = 0; s < N; s++) {
        double x[784], h0[128], h1[64], z[10], prob[10], m = -INFINITY, sum = 0;
        for (int i = 0; i < 784; i++) x[i] = img[16 + s * 784 + i] / 256.0; /* MNISTIter's byte / 256 */
        dense(w0, b0, x, h0);
        for (int i = 0; i < 128; i++) h0[i] = h0[i] > 0 ? h0[i] : 0;
        dense(w1, b1, h0, h1);
        for (int i = 0; i < 64; i++) h1[i] = h1[i] > 0 ? h1[i] : 0;
        dense(w2, b2, h1, z);
        for (int i = 0; i < 10; i++) m = z[i] > m ? z[i] : m;
        for (int i = 0; i < 10; i++) sum += exp(z[i] - m);
        for (int i = 0; i < 10; i++) prob[i] = exp(z[i] - m) / sum;
        ck_assert_int_eq(atoi(cell(&c, s + 1, 0)), s);
        int seen = 0;
        for (int k = 0; k < 10; k++) {
            int cls = atoi(cell(&c, s + 1, 1 + 2 * k));
            ck_assert(cls >= 0 && cls < 10);
            seen |= 1 << cls;
            double d = fabs(atof(cell(&c, s + 1, 2 + 2 * k)) - prob[cls]);
            max_diff = d > max_diff ? d : max_diff;
            ck_assert_msg(d < 1e-5, "sample %d class %d: %s vs %.8f", s, cls, cell(&c, s + 1, 2 + 2 * k), prob[cls]);
            if (k > 0) /* ranked: never below the next by more than the printed precision */
                ck_assert(prob[cls] <= prob[atoi(cell(&c, s + 1, 2 * k - 1))] + 1e-6);
        }
        ck_assert_int_eq(seen, 0x3ff);
        for (int i = 0; i < 128; i++) {
            double d = fabs(atof(cell(&r, s + 1, 1 + i)) - h0[i]);
            max_relu = d > max_relu ? d : max_relu;
            ck_assert_msg(d < 1e-5 * (1 + fabs(h0[i])), "sample %d unit %d: %s vs %.8f", s, i, cell(&r, s + 1, 1 + i), h0[i]);
        }
    }
    fprintf(stderr, "fixture: max |prob - reference| %.3g, max |relu - reference| %.3g over %d samples\n", max_diff,
            max_relu, N);
    free(img);
    free_csv(&c);
    free_csv(&r);
    for (int i = 0; i < np; i++) free(ps[i].data);
}
END_TEST

/* ---------------------------------------------------------------- features */

/* "KEY N bytes" in a log. */
static long long logged_bytes(const char *log, const char *key)
{
    const char *p = strstr(log, key);
    ck_assert_msg(p != NULL, "no '%s' in\n%s", key, log);
    return atoll(p + strlen(key));
}

/* The library's executor over the full network, outputs pool1 and softmax,
 * in batches of `batch` (padded with zeros). */
static void full_forward(const char *prefix, int epoch, const uint8_t *img, int n, int batch, float *pool1, float *prob)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    char path[700];
    snprintf(path, sizeof(path), "%s-symbol.json", prefix);
    mx_graph *g;
    ck_assert_int_eq(mx_graph_load_json(path, &g), MX_OK);
    mx_ndarray_list args, aux;
    ck_assert_int_eq(mx_checkpoint_load(rt, prefix, epoch, &args, &aux), MX_OK);
    ck_assert_int_eq(aux.count, 0);
    uint32_t ids[64];
    int na = mx_graph_list_arguments(g, ids);
    mx_ndarray *arrays[64] = {0}, *data = NULL;
    for (int i = 0; i < na; i++) {
        const char *name = mx_graph_node(g, ids[i])->name;
        if (!strcmp(name, "data")) {
            ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(batch, 1, 28, 28), MX_FLOAT32, mx_cpu(), &arrays[i]), MX_OK);
            data = arrays[i];
        } else if (!strcmp(name, "softmax_label")) {
            ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(batch), MX_FLOAT32, mx_cpu(), &arrays[i]), MX_OK);
            ck_assert_int_eq(mx_nd_fill(arrays[i], 0), MX_OK);
        } else {
            int k = 0;
            while (k < args.count && strcmp(args.names[k], name)) k++;
            ck_assert_int_lt(k, args.count);
            arrays[i] = mx_ndarray_retain(args.arrays[k]);
        }
    }
    const char *outs[2] = {"pool1_output", "softmax_output"};
    mx_bind_config bc = {.ctx = mx_cpu(), .args = arrays, .outputs = outs, .n_outputs = 2, .for_training = false};
    mx_executor *ex;
    ck_assert_int_eq(mx_executor_bind(rt, g, &bc, &ex), MX_OK);
    float *x = calloc((size_t)batch * 784, sizeof(float)), *o1 = malloc((size_t)batch * 20 * 12 * 12 * 4),
          *o2 = malloc((size_t)batch * 10 * 4);
    for (int b0 = 0; b0 < n; b0 += batch) {
        int m = n - b0 < batch ? n - b0 : batch;
        memset(x, 0, (size_t)batch * 784 * sizeof(float));
        for (int i = 0; i < m * 784; i++) x[i] = (float)img[16 + (size_t)b0 * 784 + i] * (1.0f / 256.0f);
        ck_assert_int_eq(mx_ndarray_from_host(data, x, (size_t)batch * 784 * 4), MX_OK);
        ck_assert_int_eq(mx_executor_forward(ex, false), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), o1, (size_t)batch * 2880 * 4), MX_OK);
        ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 1), o2, (size_t)batch * 10 * 4), MX_OK);
        memcpy(pool1 + (size_t)b0 * 2880, o1, (size_t)m * 2880 * 4);
        memcpy(prob + (size_t)b0 * 10, o2, (size_t)m * 10 * 4);
    }
    free(x);
    free(o1);
    free(o2);
    mx_executor_free(ex);
    for (int i = 0; i < na; i++) mx_ndarray_free(arrays[i]);
    mx_ndarray_list_free(&args);
    mx_ndarray_list_free(&aux);
    mx_graph_free(g);
    mx_runtime_free(rt);
}

START_TEST(layer_features_equal_full_forward_with_less_memory)
{
    const int N = 50;
    char *out, *err, args[4096];
    snprintf(args, sizeof(args),
             "configs/lenet.conf train.num_parts=60 val.num_parts=10 fit.num_epoch=1 fit.disp_batches=1000 "
             "fit.model_prefix=%s",
             tpath("lenet"));
    ck_assert_msg(run_bin(train_bin, args, NULL, &out, &err) == 0, "%s", err);
    free(out);
    free(err);
    write_subset(tpath("sub-idx3-ubyte"), N);
    /* Feature CSV, raw features with ids, and the full network. */
    snprintf(args, sizeof(args), "--model %s --layer pool1 --batch-size 16 -v --output %s %s", tpath("lenet"),
             tpath("f.csv"), tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    char *layer_log = err;
    free(out);
    snprintf(args, sizeof(args), "--model %s --layer pool1_output --batch-size 16 --format raw --ids %s --output %s %s",
             tpath("lenet"), tpath("ids.txt"), tpath("f.raw"), tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    free(out);
    free(err);
    size_t raw_len;
    char *raw = tool_slurp(tpath("f.raw"), &raw_len);
    snprintf(args, sizeof(args), "--model %s --batch-size 16 --top-k 10 -v --output %s %s", tpath("lenet"),
             tpath("p.csv"), tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    char *full_log = err;
    free(out);

    uint8_t *img = test_images();
    float *pool1 = malloc((size_t)N * 2880 * 4), *prob = malloc((size_t)N * 10 * 4);
    full_forward(tpath("lenet"), 1, img, N, 16, pool1, prob);

    /* Equal to float rounding: the full network's larger shared workspace
     * lets conv1 lower more images per GEMM, and OpenBLAS may then sum a
     * few elements in another order (an ulp or two). */
    csv f = parse_csv(tool_slurp(tpath("f.csv"), NULL));
    ck_assert_int_eq(f.rows, N + 1);
    ck_assert_int_eq(f.cols, 1 + 2880);
    ck_assert_str_eq(cell(&f, 0, 2880), "v2879");
    double max_diff = 0;
    long exact = 0;
    float *feat = malloc((size_t)N * 2880 * 4);
    for (int s = 0; s < N; s++) {
        ck_assert_int_eq(atoi(cell(&f, s + 1, 0)), s);
        for (int i = 0; i < 2880; i++) {
            float v = strtof(cell(&f, s + 1, 1 + i), NULL), want = pool1[(size_t)s * 2880 + i];
            feat[(size_t)s * 2880 + i] = v;
            double d = fabs((double)v - want);
            max_diff = d > max_diff ? d : max_diff;
            exact += v == want;
            ck_assert_msg(d <= 1e-6 * (1 + fabs(want)), "sample %d value %d: %s vs %.9g", s, i, cell(&f, s + 1, 1 + i),
                          want);
        }
    }
    fprintf(stderr, "lenet --layer pool1 vs the full forward pass: %ld of %d values bit-equal, max |diff| %.3g\n",
            exact, N * 2880, max_diff);
    free_csv(&f);
    const char *hdr = "MXPREDICT-RAW float32 le shape=(20,12,12)\n";
    ck_assert_uint_eq(raw_len, strlen(hdr) + (size_t)N * 2880 * 4);
    ck_assert_int_eq(memcmp(raw, hdr, strlen(hdr)), 0);
    const uint8_t *b = (const uint8_t *)raw + strlen(hdr);
    for (size_t i = 0; i < (size_t)N * 2880; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                     (uint32_t)b[4 * i + 3] << 24;
        float v;
        memcpy(&v, &u, 4);
        ck_assert_msg(v == feat[i], "raw value %zu: %.9g, the CSV %.9g", i, v, feat[i]); /* the same run, bit for bit */
    }
    char *ids = tool_slurp(tpath("ids.txt"), NULL);
    ck_assert_int_eq(strncmp(ids, "0\n1\n2\n", 6), 0);
    ck_assert_ptr_nonnull(strstr(ids, "\n49\n"));
    free(ids);
    csv c = parse_csv(tool_slurp(tpath("p.csv"), NULL));
    for (int s = 0; s < N; s++)
        for (int k = 0; k < 10; k++) {
            int cls = atoi(cell(&c, s + 1, 1 + 2 * k));
            ck_assert(fabs(atof(cell(&c, s + 1, 2 + 2 * k)) - prob[s * 10 + cls]) < 1e-6);
        }
    free_csv(&c);

    long long li = logged_bytes(layer_log, "internal "), lt = logged_bytes(layer_log, "total ");
    long long fi = logged_bytes(full_log, "internal "), ft = logged_bytes(full_log, "total ");
    fprintf(stderr, "lenet batch 16: planned bytes, --layer pool1: internal %lld total %lld; full: internal %lld total %lld\n",
            li, lt, fi, ft);
    ck_assert_msg(li < fi && lt < ft, "layer %lld/%lld, full %lld/%lld", li, lt, fi, ft);
    free(layer_log);
    free(full_log);
    free(raw);
    free(pool1);
    free(feat);
    free(prob);
    free(img);
}
END_TEST

/* ---------------------------------------------------------------- input kinds */

/* Test image i as a PNG file (lossless: the same pixels as the idx). */
static void write_png(const uint8_t *img, int i, const char *path)
{
    mx_image im;
    ck_assert_int_eq(mx_image_create(28, 28, 1, &im), MX_OK);
    memcpy(im.data, img + 16 + (size_t)i * 784, 784);
    uint8_t *png;
    size_t size;
    ck_assert_int_eq(mx_image_encode_png(&im, 6, &png, &size), MX_OK);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(png, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
    free(png);
    mx_image_free(&im);
}

/* The probability columns of a CSV row, joined. */
static void probs_of(const csv *c, int r, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int k = 1; k < c->cols; k++) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, ",%s", cell(c, r, k));
    }
}

START_TEST(every_input_kind_gives_the_same_answers)
{
    const int N = 6;
    uint8_t *img = test_images();
    write_subset(tpath("sub-idx3-ubyte"), N);
    ck_assert_int_eq(mkdir(tpath("img"), 0755), 0);
    char name[64], args[8192], *out, *err;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "img/%d.png", i);
        write_png(img, i, tpath(name));
    }
    FILE *f = fopen(tpath("img/bad.png"), "wb");
    fputs("\x89PNG\r\n\x1a\nnot really", f);
    fclose(f);
    /* A .lst relative to its folder, with a missing file. */
    f = fopen(tpath("img/list.lst"), "w");
    for (int i = 0; i < N; i++) fprintf(f, "%d\t%d.000000\t%d.png\n", i, img[0] % 10, i);
    fprintf(f, "%d\t0.000000\tgone.png\n", N);
    fclose(f);
    /* A .rec with ids 0..N-1, record 2 a broken PNG. */
    mx_recordio_writer *rw;
    ck_assert_int_eq(mx_recordio_writer_open(tpath("all.rec"), &rw), MX_OK);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "img/%d.png", i);
        size_t size, psize;
        char *png = tool_slurp(tpath(name), &size);
        uint8_t *payload;
        mx_irheader h = {.flag = 0, .label = 0, .id = (uint64_t)i};
        ck_assert_int_eq(mx_imrec_pack(&h, NULL, png, i == 2 ? 30 : size, &payload, &psize), MX_OK);
        ck_assert_int_eq(mx_recordio_writer_write(rw, payload, psize, NULL), MX_OK);
        free(payload);
        free(png);
    }
    ck_assert_int_eq(mx_recordio_writer_close(rw), MX_OK);
    /* Paths on stdin. */
    f = fopen(tpath("paths.txt"), "w");
    for (int i = N - 1; i >= 0; i--) fprintf(f, "%s/img/%d.png\n", tmp, i);
    fclose(f);

    /* The reference: the idx file (pixels / 256). */
    const char *common = "--top-k 10 --batch-size 4 --scale 0.00390625";
    snprintf(args, sizeof(args), "--model %s %s %s", fixture, common, tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    csv ref = parse_csv(out);
    free(err);
    ck_assert_int_eq(ref.rows, N + 1);
    char want[1024], got[1024];

    /* Image files, one broken, one missing: reported, no line, exit 1. */
    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 %s %s/img/3.png %s/img/bad.png %s/img/0.png %s/nope.png %s/img/5.png",
             fixture, common, tmp, tmp, tmp, tmp, tmp);
    ck_assert_int_eq(predict(args, &out, &err), 1);
    char line[1024];
    snprintf(line, sizeof(line), "mxpredict: %s/img/bad.png: ", tmp);
    ck_assert_msg(strstr(err, line), "%s", err);
    snprintf(line, sizeof(line), "mxpredict: %s/nope.png: cannot open: No such file or directory\n", tmp);
    ck_assert_msg(strstr(err, line), "%s", err);
    ck_assert_msg(strstr(err, "3 samples predicted, 2 unreadable"), "%s", err);
    csv c = parse_csv(out);
    ck_assert_int_eq(c.rows, 4);
    int order[3] = {3, 0, 5};
    for (int r = 0; r < 3; r++) {
        snprintf(line, sizeof(line), "%s/img/%d.png", tmp, order[r]);
        ck_assert_str_eq(cell(&c, r + 1, 0), line);
        probs_of(&c, r + 1, got, sizeof(got));
        probs_of(&ref, order[r] + 1, want, sizeof(want));
        ck_assert_str_eq(got, want);
    }
    free_csv(&c);
    free(err);

    /* The .lst (paths as listed), the .rec (record ids) and stdin (reversed). */
    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 %s %s", fixture, common, tpath("img/list.lst"));
    ck_assert_int_eq(predict(args, &out, &err), 1);
    snprintf(line, sizeof(line), "mxpredict: %s/img/gone.png: cannot open", tmp);
    ck_assert_msg(strstr(err, line), "%s", err);
    c = parse_csv(out);
    ck_assert_int_eq(c.rows, N + 1);
    for (int r = 1; r <= N; r++) {
        snprintf(line, sizeof(line), "%d.png", r - 1);
        ck_assert_str_eq(cell(&c, r, 0), line);
        probs_of(&c, r, got, sizeof(got));
        probs_of(&ref, r, want, sizeof(want));
        ck_assert_str_eq(got, want);
    }
    free_csv(&c);
    free(err);
    /* --root: the same list read from elsewhere. */
    char *lst = tool_slurp(tpath("img/list.lst"), NULL);
    f = fopen(tpath("moved.lst"), "w");
    fputs(lst, f);
    fclose(f);
    free(lst);
    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 %s --root %s/img %s", fixture, common, tmp,
             tpath("moved.lst"));
    ck_assert_int_eq(predict(args, &out, &err), 1);
    c = parse_csv(out);
    ck_assert_int_eq(c.rows, N + 1);
    free_csv(&c);
    free(err);

    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 %s %s", fixture, common, tpath("all.rec"));
    ck_assert_int_eq(predict(args, &out, &err), 1);
    snprintf(line, sizeof(line), "mxpredict: %s: id 2: ", tpath("all.rec"));
    ck_assert_msg(strstr(err, line), "%s", err);
    c = parse_csv(out);
    ck_assert_int_eq(c.rows, N);
    for (int r = 1, i = 0; r < c.rows; r++, i++) {
        if (i == 2) i++;
        ck_assert_int_eq(atoi(cell(&c, r, 0)), i);
        probs_of(&c, r, got, sizeof(got));
        probs_of(&ref, i + 1, want, sizeof(want));
        ck_assert_str_eq(got, want);
    }
    free_csv(&c);
    free(err);

    /* --config: the shape and MNISTIter's 1/256 from an mnist [val] section. */
    snprintf(args, sizeof(args), "--config configs/lenet.conf --model %s --top-k 10 %s/img/1.png", fixture, tmp);
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    c = parse_csv(out);
    ck_assert_int_eq(c.rows, 2);
    probs_of(&c, 1, got, sizeof(got));
    probs_of(&ref, 2, want, sizeof(want));
    ck_assert_str_eq(got, want);
    free_csv(&c);
    free(err);

    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 %s -", fixture, common);
    ck_assert_msg(run_bin(predict_bin, args, tpath("paths.txt"), &out, &err) == 0, "%s", err);
    c = parse_csv(out);
    ck_assert_int_eq(c.rows, N + 1);
    for (int r = 1; r <= N; r++) {
        probs_of(&c, r, got, sizeof(got));
        probs_of(&ref, N - r + 1, want, sizeof(want));
        ck_assert_str_eq(got, want);
    }
    free_csv(&c);
    free(err);
    free_csv(&ref);
    free(img);
}
END_TEST

START_TEST(no_overlap_and_batch_padding_keep_the_rows)
{
    write_subset(tpath("sub-idx3-ubyte"), 100);
    char args[4096], *a, *b, *err;
    snprintf(args, sizeof(args), "--model %s --batch-size 7 %s", fixture, tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &a, &err) == 0, "%s", err);
    free(err);
    snprintf(args, sizeof(args), "--model %s --batch-size 7 --no-overlap -v %s", fixture, tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &b, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "network ") && !strstr(err, "not overlapped"), "%s", err);
    ck_assert_msg(strstr(err, "15 batches"), "%s", err);
    ck_assert_msg(strstr(err, "network per batch of 7: best "), "%s", err);
    /* the network's CPU time over its 101 samples */
    ck_assert_msg(strstr(err, "network CPU time (all threads): ") && strstr(err, " ms per sample\n"), "%s", err);
    ck_assert_str_eq(a, b);
    int lines = 0;
    for (const char *p = a; *p; p++) lines += *p == '\n';
    ck_assert_int_eq(lines, 101);
    free(a);
    free(b);
    free(err);
}
END_TEST

/* --profile writes a Chrome-trace timeline: every layer's forward once a
 * batch (relu folded into the layer before it), the same rows as without
 * it; a file that cannot be written is an error (exit 1) after the rows. */
START_TEST(profile_writes_a_timeline)
{
    write_subset(tpath("sub-idx3-ubyte"), 20);
    char args[4096], *a, *b, *err;
    snprintf(args, sizeof(args), "--model %s --batch-size 10 %s", fixture, tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &a, &err) == 0, "%s", err);
    free(err);
    snprintf(args, sizeof(args), "--model %s --batch-size 10 -v --profile %s %s", fixture, tpath("p.json"),
             tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &b, &err) == 0, "%s", err);
    ck_assert_str_eq(a, b);
    ck_assert_msg(strstr(err, "timeline written to "), "%s", err);
    free(err);
    char *json = tool_slurp(tpath("p.json"), NULL);
    ck_assert_ptr_nonnull(json);
    ck_assert_ptr_nonnull(strstr(json, "\"traceEvents\""));
    /* two batches: each layer's forward twice */
    static const char *const layers[] = {"\"fullyconnected0+activation0 (FullyConnected+Activation) fwd\"",
                                         "\"fullyconnected2 (FullyConnected) fwd\"", "\"softmax (SoftmaxOutput) fwd\""};
    for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
        int n = 0;
        for (const char *p = json; (p = strstr(p, layers[i])); p++) n++;
        ck_assert_msg(n == 2, "%s: %d events", layers[i], n);
    }
    free(json);
    free(a);
    free(b);
    snprintf(args, sizeof(args), "--model %s --profile %s %s", fixture, tpath("no-such-dir/p.json"),
             tpath("sub-idx3-ubyte"));
    ck_assert_int_eq(predict(args, &a, &err), 1);
    ck_assert_msg(strstr(err, "no-such-dir/p.json"), "%s", err);
    free(a);
    free(err);
}
END_TEST

/* ---------------------------------------------------------------- names, errors */

START_TEST(synset_names_classes)
{
    write_subset(tpath("sub-idx3-ubyte"), 3);
    FILE *f = fopen(tpath("synset.txt"), "w");
    const char *names[10] = {"t-shirt", "trouser", "pullover", "dress", "coat, long",
                             "sandal", "shirt", "sneaker", "bag", "ankle boot"};
    for (int i = 0; i < 10; i++) fprintf(f, "%s\n", names[i]);
    fclose(f);
    char args[4096], *out, *err;
    snprintf(args, sizeof(args), "--model %s --top-k 10 --synset %s %s", fixture, tpath("synset.txt"),
             tpath("sub-idx3-ubyte"));
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    ck_assert_int_eq(strncmp(out, "id,name1,prob1,name2,prob2,", 27), 0);
    ck_assert_ptr_nonnull(strstr(out, ",\"coat, long\","));
    ck_assert_ptr_nonnull(strstr(out, ",ankle boot,"));
    free(out);
    free(err);
    f = fopen(tpath("short.txt"), "w");
    fputs("a\nb\n", f);
    fclose(f);
    snprintf(args, sizeof(args), "--model %s --synset %s %s", fixture, tpath("short.txt"), tpath("sub-idx3-ubyte"));
    ck_assert_int_eq(predict(args, &out, &err), 2);
    ck_assert_msg(strstr(err, "synset names 2 classes, the output has 10"), "%s", err);
    free(out);
    free(err);
}
END_TEST

static void expect(int code, const char *args, const char *message)
{
    char *out, *err;
    int got = predict(args, &out, &err);
    ck_assert_msg(got == code, "mxpredict %s: exit %d, wanted %d\n%s", args, got, code, err);
    ck_assert_msg(strstr(err, message), "mxpredict %s: no '%s' in\n%s", args, message, err);
    /* One line, starting with the tool's name. */
    ck_assert_msg(!strncmp(err, "mxpredict: ", 11) && strchr(err, '\n') == err + strlen(err) - 1, "%s", err);
    ck_assert_str_eq(out, "");
    free(out);
    free(err);
}

/* --dtype float16 / bfloat16 (mixed precision of a float32 model, as
 * MXNet's amp.convert_model) on the MXNet-written MLP: every probability
 * within the format's rounding of float32's, the same top class nearly
 * everywhere, and not float32's bits. */
START_TEST(half_precision_prediction_matches_float32)
{
    const int N = 200;
    write_subset(tpath("sub-idx3-ubyte"), N);
    const char *dtypes[3] = {"float32", "float16", "bfloat16"};
    const double tol[3] = {0, 5e-3, 3e-2};
    csv c[3];
    for (int k = 0; k < 3; k++) {
        char *out, *err, args[4096], name[64];
        snprintf(name, sizeof(name), "p-%s.csv", dtypes[k]);
        snprintf(args, sizeof(args), "--model %s --top-k 10 --dtype %s --output %s %s", fixture, dtypes[k], tpath(name),
                 tpath("sub-idx3-ubyte"));
        ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
        free(out);
        free(err);
        c[k] = parse_csv(tool_slurp(tpath(name), NULL));
        ck_assert_int_eq(c[k].rows, N + 1);
    }
    for (int k = 1; k < 3; k++) {
        int same_top = 0;
        bool differs = false;
        for (int r = 1; r <= N; r++) {
            same_top += !strcmp(c[0].cell[r * c[0].cols + 1], c[k].cell[r * c[k].cols + 1]);
            /* probabilities by class: (class, prob) pairs after the id */
            for (int j = 1; j < c[0].cols; j += 2) {
                const char *cls = c[0].cell[r * c[0].cols + j];
                double p0 = atof(c[0].cell[r * c[0].cols + j + 1]), pk = -1;
                for (int m = 1; m < c[k].cols; m += 2)
                    if (!strcmp(c[k].cell[r * c[k].cols + m], cls)) pk = atof(c[k].cell[r * c[k].cols + m + 1]);
                ck_assert_msg(fabs(p0 - pk) <= tol[k], "%s row %d class %s: %g, float32 %g", dtypes[k], r, cls, pk, p0);
                differs |= p0 != pk;
            }
        }
        ck_assert_msg(same_top >= N * 97 / 100, "%s: the same top class on %d of %d rows", dtypes[k], same_top, N);
        ck_assert_msg(differs, "%s: float32's probabilities to the digit", dtypes[k]);
    }
    for (int k = 0; k < 3; k++) free_csv(&c[k]);
}
END_TEST

/* --benchmark: random batches timed, one line on stdout; what it would
 * ignore is refused. */
START_TEST(benchmark_times_random_batches)
{
    char *out, *err, args[4096];
    snprintf(args, sizeof(args), "--model %s --benchmark 20 --batch-size 16 --data-shape 1,28,28 --dtype float16",
             fixture);
    ck_assert_msg(predict(args, &out, &err) == 0, "%s", err);
    double speed = 0, ms = 0;
    const char *line = strstr(out, "mxpredict: benchmark: 20 batches of 16 (float16): ");
    ck_assert_msg(line && sscanf(line + strlen("mxpredict: benchmark: 20 batches of 16 (float16): "),
                                 "%lf images/s, %lf ms a batch", &speed, &ms) == 2,
                  "%s", out);
    ck_assert_msg(speed > 0 && ms > 0 && fabs(speed * ms / 1000.0 - 16) < 0.1, "%s", out);
    free(out);
    free(err);
    snprintf(args, sizeof(args), "--model %s --benchmark 5 --data-shape 1,28,28 %s", fixture, tpath("x.rec"));
    expect(2, args, "--benchmark times random batches: '");
    snprintf(args, sizeof(args), "--model %s --benchmark 5 --data-shape 1,28,28 --top-k 2", fixture);
    expect(2, args, "'--top-k' does not apply");
    snprintf(args, sizeof(args), "--model %s --benchmark 0", fixture);
    expect(2, args, "--benchmark needs a number of batches 1..1000000, got '0'");
}
END_TEST

START_TEST(usage_and_model_errors)
{
    char *out, *err, args[4096];
    ck_assert_int_eq(predict("--help", &out, &err), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: mxpredict --model PREFIX"));
    ck_assert_ptr_nonnull(strstr(out, "--layer NAME"));
    free(out);
    free(err);
    write_subset(tpath("sub-idx3-ubyte"), 2);
    char in[700];
    snprintf(in, sizeof(in), "%s", tpath("sub-idx3-ubyte"));
    expect(2, "", "no model given");
    snprintf(args, sizeof(args), "--model %s", fixture);
    expect(2, args, "no INPUT given");
    snprintf(args, sizeof(args), "--model %s --frobnicate %s", fixture, in);
    expect(2, args, "unknown option '--frobnicate'");
    snprintf(args, sizeof(args), "--model %s --batch-size 0 %s", fixture, in);
    expect(2, args, "--batch-size needs a number >= 1, got '0'");
    snprintf(args, sizeof(args), "--model %s --dtype float64 %s", fixture, in);
    expect(2, args, "--dtype is float32, float16 or bfloat16, not 'float64'");
    snprintf(args, sizeof(args), "--model %s --format raw %s", fixture, in);
    expect(2, args, "--format applies to --layer output");
    snprintf(args, sizeof(args), "--model %s --top-k 11 %s", fixture, in);
    expect(2, args, "--top-k 11: the output 'softmax_output' has 10 classes");
    snprintf(args, sizeof(args), "--model %s --layer fullyconected1 %s", fixture, in);
    expect(2, args, "did you mean 'fullyconnected1'");
    snprintf(args, sizeof(args), "--model %s --data-shape 3,32,32 %s", fixture, in);
    expect(2, args, "fullyconnected0");
    snprintf(args, sizeof(args), "--model %s --data-shape 3,x,32 %s", fixture, in);
    expect(2, args, "--data-shape needs C,H,W");
    snprintf(args, sizeof(args), "--model %s --mean 1,2 --data-shape 3,28,28 %s", fixture, in);
    expect(2, args, "--mean needs 1 or 3 numbers");
    snprintf(args, sizeof(args), "--model %s --epoch 7 %s", fixture, in);
    expect(1, args, "model-0007.params");
    snprintf(args, sizeof(args), "--model %s/none %s", tmp, in);
    expect(1, args, "none-symbol.json");
    snprintf(args, sizeof(args), "--config %s/missing.conf %s", tmp, in);
    expect(2, args, "missing.conf");
    /* A PNG alone gives no input shape for this model. */
    mx_image im;
    ck_assert_int_eq(mx_image_create(28, 28, 1, &im), MX_OK);
    memset(im.data, 9, 784);
    uint8_t *png;
    size_t size;
    ck_assert_int_eq(mx_image_encode_png(&im, 1, &png, &size), MX_OK);
    FILE *f = fopen(tpath("x.png"), "wb");
    fwrite(png, 1, size, f);
    fclose(f);
    free(png);
    mx_image_free(&im);
    snprintf(args, sizeof(args), "--model %s %s", fixture, tpath("x.png"));
    expect(2, args, "give --data-shape C,H,W");
    /* A broken idx file or a directory, with no shape: what is wrong with
     * the input is said first. */
    f = fopen(tpath("bad-idx3-ubyte"), "wb");
    fwrite("\x00\x00\x08\x03\x00\x00\x00\x02", 1, 8, f);
    fclose(f);
    snprintf(args, sizeof(args), "--model %s %s", fixture, tpath("bad-idx3-ubyte"));
    char want[1200];
    snprintf(want, sizeof(want), "mxpredict: %s: truncated idx header (8 of 16 bytes); the model does not record its input shape either",
             tpath("bad-idx3-ubyte"));
    expect(1, args, want);
    snprintf(args, sizeof(args), "--model %s %s", fixture, tmp);
    snprintf(want, sizeof(want), "mxpredict: %s: is a directory (give its images, a .lst or a .rec); the model", tmp);
    expect(1, args, want);
    /* An output that cannot be written. */
    snprintf(args, sizeof(args), "--model %s --output %s/no/such/dir.csv %s", fixture, tmp, in);
    expect(1, args, "cannot open for writing");
    /* Every input unreadable: still a run, exit 1. */
    snprintf(args, sizeof(args), "--model %s --data-shape 1,28,28 -q %s/a.jpg", fixture, tmp);
    ck_assert_int_eq(predict(args, &out, &err), 1);
    ck_assert_str_eq(out, "id,top1,prob1,top2,prob2,top3,prob3,top4,prob4,top5,prob5\n");
    ck_assert_msg(strstr(err, "a.jpg: cannot open"), "%s", err);
    free(out);
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mxpredict");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, accuracy_equals_mxtrain_validation);
    tcase_add_test(tc, accuracy_equals_mxtrain_validation_on_a_rec);
    tcase_add_test(tc, mxnet_fixture_matches_reference_forward);
    tcase_add_test(tc, layer_features_equal_full_forward_with_less_memory);
    tcase_add_test(tc, every_input_kind_gives_the_same_answers);
    tcase_add_test(tc, no_overlap_and_batch_padding_keep_the_rows);
    tcase_add_test(tc, profile_writes_a_timeline);
    tcase_add_test(tc, synset_names_classes);
    tcase_add_test(tc, half_precision_prediction_matches_float32);
    tcase_add_test(tc, benchmark_times_random_batches);
    tcase_add_test(tc, usage_and_model_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
