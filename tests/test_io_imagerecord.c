/*
 * test_io_imagerecord.c - the imagerecord iterator (MXNet's
 * ImageRecordIter, mxnet-formats.md 1.5, 1.7, 3.1, 3.2) on .rec files
 * written here with lib/recordio's writer and lib/image's PNG encoder, so
 * every pixel is known: exact batch tensors for centre crop, resize,
 * cover-upscale, pad, mirror and mean/std/scale, grey and colour; random
 * crop/mirror found back in the known images, reproducible per seed and
 * the same for 1, 2 and 3 threads; byte and index partitions covering
 * every record once; shuffles that are permutations; round_batch padding;
 * corrupt, truncated and non-image records skipped with a warning while
 * every good record is still delivered; mean_img; parameter errors. Last,
 * configs/lenet-rec.conf trained by mxtrain on a small Fashion-MNIST .rec
 * made by scripts/make-fashion-rec.sh (skipped without python3 or the data
 * set).
 */
#include "image/image.h"
#include "io/augment.h"
#include "io/io.h"
#include "io/iter_imagerecord.h"
#include "ndarray/ndarray.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>

#define OK(expr)                                                                 \
    do {                                                                         \
        mx_status ok_st_ = (expr);                                               \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error()); \
    } while (0)

/* ---- temporary files ------------------------------------------------------ */

static char tmp[256];

static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/test_io_imrec.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *T(const char *name)
{
    static char buf[16][512];
    static int slot;
    char *p = buf[slot++ % 16];
    snprintf(p, 512, "%s/%s", tmp, name);
    return p;
}

static uint8_t *slurp(const char *path, size_t *n)
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

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- known images ------------------------------------------------------------ */

/* Pixel (x, y, c) of test image `k`: distinct enough to find crops back. */
static uint8_t px(int k, int x, int y, int c) { return (uint8_t)(k * 53 + y * 17 + x * 5 + c * 89 + 3); }

typedef struct test_img {
    int w, h, c;
    uint8_t *data; /* (h, w, c) */
} test_img;

static test_img make_img(int k, int w, int h, int c)
{
    test_img t = {w, h, c, malloc((size_t)w * h * c)};
    ck_assert_ptr_nonnull(t.data);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) t.data[((size_t)y * w + x) * c + ch] = px(k, x, y, ch);
    return t;
}

static uint8_t *png_of(const test_img *t, size_t *size)
{
    mx_image im = {t->data, t->w, t->h, t->c};
    uint8_t *out;
    OK(mx_image_encode_png(&im, 6, &out, size));
    return out;
}

/* ---- .rec files --------------------------------------------------------------- */

typedef struct rec_item {
    uint64_t id;
    float label;
    uint32_t n_labels;
    float labels[4];
    const uint8_t *image; /* encoded image, or raw payload when raw */
    size_t image_size;
    bool raw;             /* write `image` as the whole payload */
} rec_item;

/* Writes a .rec (and an .idx when idx_path); offsets[i] = record i's head. */
static void write_rec(const char *path, const char *idx_path, const rec_item *items, int n, uint64_t *offsets)
{
    mx_recordio_writer *w;
    OK(mx_recordio_writer_open(path, &w));
    mx_recordio_index *idx = NULL;
    if (idx_path) OK(mx_recordio_index_create(&idx));
    for (int i = 0; i < n; i++) {
        uint8_t *payload = NULL;
        size_t size;
        const rec_item *it = &items[i];
        if (it->raw) {
            payload = malloc(it->image_size + 1);
            memcpy(payload, it->image, it->image_size);
            size = it->image_size;
        } else {
            mx_irheader h = {.flag = it->n_labels, .label = it->label, .id = it->id, .id2 = 0};
            OK(mx_imrec_pack(&h, it->n_labels ? it->labels : NULL, it->image, it->image_size, &payload, &size));
        }
        uint64_t off;
        OK(mx_recordio_writer_write(w, payload, size, &off));
        if (offsets) offsets[i] = off;
        if (idx) OK(mx_recordio_index_add(idx, (int64_t)it->id, off));
        if (it->raw) free(payload);
        else mx_free(payload);
    }
    OK(mx_recordio_writer_close(w));
    if (idx) {
        OK(mx_recordio_index_write(idx, idx_path));
        mx_recordio_index_free(idx);
    }
}

/* ---- iterators -------------------------------------------------------------------- */

static mx_runtime *rt_new(void)
{
    mx_runtime *rt = NULL;
    OK(mx_runtime_create(NULL, &rt));
    return rt;
}

/* Creates the kind's state from "k=v" strings (NULL-terminated list);
 * returns the status. */
static mx_status ir_open(mx_runtime *rt, const char *const *kv, void **state)
{
    const char *keys[64], *values[64];
    char buf[64][600];
    int n = 0;
    for (; kv[n]; n++) {
        snprintf(buf[n], sizeof(buf[n]), "%s", kv[n]);
        char *eq = strchr(buf[n], '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        keys[n] = buf[n];
        values[n] = eq + 1;
    }
    void *params = calloc(1, mx_iter_imagerecord.params_size);
    mx_status s = mx_params_parse("imagerecord", mx_iter_imagerecord.params, mx_iter_imagerecord.n_params,
                                  mx_iter_imagerecord.params_size, keys, values, n, params);
    *state = NULL;
    if (s == MX_OK) s = mx_iter_imagerecord.create(rt, params, state);
    free(params);
    return s;
}

static void *ir_must(mx_runtime *rt, const char *const *kv)
{
    void *st;
    OK(ir_open(rt, kv, &st));
    return st;
}

typedef struct log_lines {
    int n;
    char lines[64][1024];
} log_lines;

static void collect(void *user, const char *line)
{
    log_lines *l = user;
    if (l->n < 64) snprintf(l->lines[l->n], sizeof(l->lines[0]), "%s", line);
    l->n++;
}

/* One epoch, every batch copied: data (nb, B, sample), labels, index, pad. */
typedef struct epoch {
    int nb;
    int64_t B, sample, lw;
    float *data, *label;
    uint64_t *index;
    int pad[4096];
} epoch;

static epoch run_epoch(void *st)
{
    epoch e = {0};
    size_t cap = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_iter_imagerecord.next(st, &b, &has));
        if (!has) break;
        const mx_shape *ds = mx_ndarray_shape(b.data), *ls = mx_ndarray_shape(b.label);
        e.B = ds->dims[0];
        e.sample = mx_shape_size(ds) / e.B;
        e.lw = mx_shape_size(ls) / e.B;
        if ((size_t)e.nb + 1 > cap) {
            cap = cap ? cap * 2 : 16;
            e.data = realloc(e.data, cap * (size_t)(e.B * e.sample) * sizeof(float));
            e.label = realloc(e.label, cap * (size_t)(e.B * e.lw) * sizeof(float));
            e.index = realloc(e.index, cap * (size_t)e.B * sizeof(uint64_t));
        }
        memcpy(e.data + (size_t)e.nb * e.B * e.sample, mx_ndarray_data(b.data), (size_t)(e.B * e.sample) * sizeof(float));
        memcpy(e.label + (size_t)e.nb * e.B * e.lw, mx_ndarray_data(b.label), (size_t)(e.B * e.lw) * sizeof(float));
        ck_assert_ptr_nonnull(b.index);
        memcpy(e.index + (size_t)e.nb * e.B, b.index, (size_t)e.B * sizeof(uint64_t));
        ck_assert_int_lt(e.nb, 4096);
        e.pad[e.nb++] = b.pad;
    }
    return e;
}

static void epoch_free(epoch *e)
{
    free(e->data);
    free(e->label);
    free(e->index);
    memset(e, 0, sizeof(*e));
}

static bool epoch_equal(const epoch *a, const epoch *b)
{
    if (a->nb != b->nb || a->B != b->B || a->sample != b->sample) return false;
    size_t n = (size_t)a->nb * a->B;
    return !memcmp(a->data, b->data, n * a->sample * sizeof(float)) &&
           !memcmp(a->label, b->label, n * a->lw * sizeof(float)) && !memcmp(a->index, b->index, n * sizeof(uint64_t)) &&
           !memcmp(a->pad, b->pad, (size_t)a->nb * sizeof(int));
}

/* MXNet's float normalisation of one pixel (ProcessImage with contrast 1,
 * illumination 0): (p - mean) * (scale / std) + 0 / std. */
static float norm(uint8_t p, float mean, float std, float scale)
{
    float mult = scale / std, bias = 0.0f / std;
    return ((float)p - mean) * mult + bias;
}

/* Checks sample `out` (C, H, W) against the crop (x0, y0) of src. */
static void check_crop(const float *out, const test_img *src, int C, int H, int W, int x0, int y0, bool mirror,
                       const float *mean, const float *std, float scale, const char *what)
{
    for (int c = 0; c < C; c++)
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++) {
                int sc = src->c == 1 ? 0 : c;
                uint8_t p = src->data[((size_t)(y0 + i) * src->w + (x0 + j)) * src->c + sc];
                float want = norm(p, mean[c], std[c], scale);
                float got = out[((size_t)c * H + i) * W + (mirror ? W - 1 - j : j)];
                ck_assert_msg(got == want, "%s: c%d (%d,%d): got %.9g want %.9g", what, c, i, j, got, want);
            }
}

static const float zero4[4] = {0, 0, 0, 0}, one4[4] = {1, 1, 1, 1};

/* ---- exact tensors ------------------------------------------------------------------ */

START_TEST(test_centre_crop_rgb_and_grey_exact)
{
    /* 3 colour images 7x5 and 3 grey ones 6x9, PNG (lossless) */
    test_img im[6];
    uint8_t *png[6];
    size_t png_size[6];
    rec_item items[6];
    for (int k = 0; k < 6; k++) {
        im[k] = k < 3 ? make_img(k, 7, 5, 3) : make_img(k, 6, 9, 1);
        png[k] = png_of(&im[k], &png_size[k]);
        items[k] = (rec_item){.id = 100 + (uint64_t)k, .label = (float)k + 0.5f, .image = png[k], .image_size = png_size[k]};
    }
    write_rec(T("rgb.rec"), NULL, items, 3, NULL);
    write_rec(T("grey.rec"), NULL, items + 3, 3, NULL);
    mx_runtime *rt = rt_new();

    /* colour, centre crop 3x4x4 of 7x5: x0 = 1, y0 = 0 */
    const char *kv[] = {"path_imgrec=", "data_shape=3,4,4", "batch_size=3", "preprocess_threads=2", NULL};
    char p0[600];
    snprintf(p0, sizeof(p0), "path_imgrec=%s", T("rgb.rec"));
    kv[0] = p0;
    void *st = ir_must(rt, kv);
    ck_assert_int_eq(mx_iter_imagerecord.num_samples(st), 3);
    mx_shape ds = mx_iter_imagerecord.data_shape(st), ls = mx_iter_imagerecord.label_shape(st);
    ck_assert_int_eq(ds.ndim, 4);
    ck_assert_int_eq(ds.dims[0], 3);
    ck_assert_int_eq(ds.dims[1], 3);
    ck_assert_int_eq(ls.ndim, 1);
    epoch e = run_epoch(st);
    ck_assert_int_eq(e.nb, 1);
    ck_assert_int_eq(e.pad[0], 0);
    for (int k = 0; k < 3; k++) {
        check_crop(e.data + k * e.sample, &im[k], 3, 4, 4, 1, 0, false, zero4, one4, 1.0f, "rgb centre");
        ck_assert_float_eq(e.label[k], (float)k + 0.5f);
        ck_assert_uint_eq(e.index[k], 100 + (uint64_t)k);
    }
    /* plane 0 is R: the first pixel of image 0 */
    ck_assert_float_eq(e.data[0], (float)px(0, 1, 0, 0));
    ck_assert_float_eq(e.data[16], (float)px(0, 1, 0, 1));
    ck_assert_float_eq(e.data[32], (float)px(0, 1, 0, 2));
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* grey: centre crop 1x5x4 of 6x9: x0 = 1, y0 = 2; with mean_r/std_r/scale */
    char p1[600];
    snprintf(p1, sizeof(p1), "path_imgrec=%s", T("grey.rec"));
    const char *kg[] = {p1, "data_shape=1,5,4", "batch_size=3", "mean_r=100.5", "std_r=3.25", "scale=0.7",
                        "mean_g=9", "std_g=2", "preprocess_threads=1", NULL};
    st = ir_must(rt, kg);
    e = run_epoch(st);
    ck_assert_int_eq(e.nb, 1);
    const float mg[4] = {100.5f, 9, 0, 0}, sg[4] = {3.25f, 2, 1, 1};
    for (int k = 0; k < 3; k++) check_crop(e.data + k * e.sample, &im[3 + k], 1, 5, 4, 1, 2, false, mg, sg, 0.7f, "grey");
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* grey images as 3 planes: replicated; per-plane mean/std/scale */
    const char *kr[] = {p1, "data_shape=3,9,6", "batch_size=3", "mean_r=1", "mean_g=2", "mean_b=3.5", "std_r=2",
                        "std_g=4", "std_b=0.5", "scale=0.25", NULL};
    st = ir_must(rt, kr);
    e = run_epoch(st);
    const float m3[4] = {1, 2, 3.5f, 0}, s3[4] = {2, 4, 0.5f, 1};
    for (int k = 0; k < 3; k++) check_crop(e.data + k * e.sample, &im[3 + k], 3, 9, 6, 0, 0, false, m3, s3, 0.25f, "grey3");
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* colour with mirror=1 and per-plane normalisation, through the registry */
    mx_data_iter *it;
    const char *keys[] = {"path_imgrec", "data_shape", "batch_size", "mirror", "mean_r", "mean_g", "mean_b",
                          "std_r",       "std_g",      "std_b",      "scale"};
    const char *vals[] = {T("rgb.rec"), "(3, 5, 7)", "3", "1", "123.68", "116.779", "103.939", "58.393", "57.12", "57.375", "1"};
    OK(mx_data_iter_create(rt, "imagerecord", keys, vals, 11, &it));
    mx_data_batch b;
    bool has;
    OK(mx_data_iter_next(it, &b, &has));
    ck_assert(has);
    const float mm[4] = {123.68f, 116.779f, 103.939f, 0}, sm[4] = {58.393f, 57.12f, 57.375f, 1};
    const float *d = mx_ndarray_data(b.data);
    for (int k = 0; k < 3; k++) check_crop(d + k * 105, &im[k], 3, 5, 7, 0, 0, true, mm, sm, 1.0f, "mirror");
    OK(mx_data_iter_next(it, &b, &has));
    ck_assert(!has);
    mx_data_iter_free(it);

    for (int k = 0; k < 6; k++) {
        free(im[k].data);
        mx_free(png[k]);
    }
    mx_runtime_free(rt);
}
END_TEST

/* Samples of 64 KB and more are written with streaming stores: rows of an
 * odd width (unaligned starts), mirrored and not, with per-plane factors. */
START_TEST(test_large_sample_exact)
{
    test_img im[2] = {make_img(4, 101, 98, 3), make_img(5, 97, 96, 3)};
    uint8_t *png[2];
    size_t sz[2];
    rec_item items[2];
    for (int k = 0; k < 2; k++) {
        png[k] = png_of(&im[k], &sz[k]);
        items[k] = (rec_item){.id = (uint64_t)k, .image = png[k], .image_size = sz[k]};
    }
    write_rec(T("big.rec"), NULL, items, 2, NULL);
    mx_runtime *rt = rt_new();
    char path[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("big.rec"));
    const float m[4] = {10, 20, 30, 0}, sd[4] = {2, 3, 5, 1};
    for (int mirror = 0; mirror < 2; mirror++) {
        const char *kv[] = {path, "data_shape=3,96,95", "batch_size=2", "mean_r=10", "mean_g=20", "mean_b=30",
                            "std_r=2", "std_g=3", "std_b=5", "scale=1.5", "preprocess_threads=2",
                            mirror ? "mirror=1" : "mirror=0", NULL};
        void *st = ir_must(rt, kv);
        epoch e = run_epoch(st);
        ck_assert_int_eq(e.nb, 1);
        check_crop(e.data, &im[0], 3, 96, 95, 3, 1, mirror, m, sd, 1.5f, "large 0");
        check_crop(e.data + e.sample, &im[1], 3, 96, 95, 1, 0, mirror, m, sd, 1.5f, "large 1");
        epoch_free(&e);
        mx_iter_imagerecord.free(st);
    }
    for (int k = 0; k < 2; k++) {
        free(im[k].data);
        mx_free(png[k]);
    }
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_resize_cover_and_pad_exact)
{
    /* colour 8x4 -> resize 2 -> 4x2 (shorter side 2); grey 3x5 and 2x2 */
    test_img a = make_img(1, 8, 4, 3), g = make_img(2, 3, 5, 1), s = make_img(3, 2, 2, 1);
    size_t na, ng, ns;
    uint8_t *pa = png_of(&a, &na), *pg = png_of(&g, &ng), *ps = png_of(&s, &ns);
    rec_item ia = {.id = 1, .image = pa, .image_size = na}, ig = {.id = 2, .image = pg, .image_size = ng},
             is = {.id = 3, .image = ps, .image_size = ns};
    write_rec(T("a.rec"), NULL, &ia, 1, NULL);
    write_rec(T("g.rec"), NULL, &ig, 1, NULL);
    write_rec(T("s.rec"), NULL, &is, 1, NULL);
    mx_runtime *rt = rt_new();
    char path[600];

    /* resize=2: the reference is lib/image's OpenCV-exact bilinear resize */
    snprintf(path, sizeof(path), "path_imgrec=%s", T("a.rec"));
    const char *k1[] = {path, "data_shape=3,2,4", "batch_size=1", "resize=2", NULL};
    void *st = ir_must(rt, k1);
    epoch e = run_epoch(st);
    mx_image src = {a.data, 8, 4, 3}, r;
    OK(mx_image_resize(&src, 4, 2, &r));
    test_img rt_img = {4, 2, 3, r.data};
    check_crop(e.data, &rt_img, 3, 2, 4, 0, 0, false, zero4, one4, 1.0f, "resize");
    mx_image_free(&r);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* resize=6 on a 3x5 grey image: shorter side (w) 6, h = 6*5/3 = 10;
     * centre crop 1x8x4: y0 = 1, x0 = 1 */
    snprintf(path, sizeof(path), "path_imgrec=%s", T("g.rec"));
    const char *k2[] = {path, "data_shape=1,8,4", "batch_size=1", "resize=6", NULL};
    st = ir_must(rt, k2);
    e = run_epoch(st);
    mx_image gsrc = {g.data, 3, 5, 1};
    OK(mx_image_resize(&gsrc, 6, 10, &r));
    test_img gr = {6, 10, 1, r.data};
    check_crop(e.data, &gr, 1, 8, 4, 1, 1, false, zero4, one4, 1.0f, "resize grey");
    mx_image_free(&r);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* smaller than the crop: 2x2 -> cover 1x6x8: width binds, 8x8, y0 = 1 */
    snprintf(path, sizeof(path), "path_imgrec=%s", T("s.rec"));
    const char *k3[] = {path, "data_shape=1,6,8", "batch_size=1", NULL};
    st = ir_must(rt, k3);
    e = run_epoch(st);
    mx_image ssrc = {s.data, 2, 2, 1};
    OK(mx_image_resize(&ssrc, 8, 8, &r));
    test_img sr = {8, 8, 1, r.data};
    check_crop(e.data, &sr, 1, 6, 8, 0, 1, false, zero4, one4, 1.0f, "cover");
    mx_image_free(&r);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* pad=2 fill_value=7 on the 8x4 colour image: 12x8, centre crop 3x8x12 is all of it */
    snprintf(path, sizeof(path), "path_imgrec=%s", T("a.rec"));
    const char *k4[] = {path, "data_shape=3,8,12", "batch_size=1", "pad=2", "fill_value=7", NULL};
    st = ir_must(rt, k4);
    e = run_epoch(st);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 8; y++)
            for (int x = 0; x < 12; x++) {
                bool in = x >= 2 && x < 10 && y >= 2 && y < 6;
                float want = in ? (float)px(1, x - 2, y - 2, c) : 7.0f;
                ck_assert_float_eq(e.data[(c * 8 + y) * 12 + x], want);
            }
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    free(a.data);
    free(g.data);
    free(s.data);
    mx_free(pa);
    mx_free(pg);
    mx_free(ps);
    mx_runtime_free(rt);
}
END_TEST

/* ---- random crop / mirror, threads ---------------------------------------------------- */

/* Finds the (x0, y0, mirror) whose crop of `src` gives `out` exactly; fails
 * unless exactly one does. */
static void find_crop(const float *out, const test_img *src, int H, int W, int *x0, int *y0, bool *mirror)
{
    int found = 0;
    for (int m = 0; m < 2; m++)
        for (int y = 0; y <= src->h - H; y++)
            for (int x = 0; x <= src->w - W; x++) {
                bool ok = true;
                for (int i = 0; i < H && ok; i++)
                    for (int j = 0; j < W && ok; j++)
                        ok = out[i * W + (m ? W - 1 - j : j)] == (float)src->data[(size_t)(y + i) * src->w + (x + j)];
                if (ok) {
                    found++;
                    *x0 = x;
                    *y0 = y;
                    *mirror = m;
                }
            }
    ck_assert_int_eq(found, 1);
}

/* n grey 16x12 images of distinct content, ids 0..n-1, label = id. */
static void write_grey_set(const char *rec, const char *idx, int n, test_img *imgs)
{
    rec_item *items = calloc((size_t)n, sizeof(rec_item));
    uint8_t **png = calloc((size_t)n, sizeof(uint8_t *));
    for (int k = 0; k < n; k++) {
        imgs[k] = make_img(k, 16, 12, 1);
        /* make every pixel of image k distinct from its neighbours' patterns */
        for (int i = 0; i < 16 * 12; i++) imgs[k].data[i] = (uint8_t)(imgs[k].data[i] ^ (uint8_t)(i * 29));
        size_t sz;
        png[k] = png_of(&imgs[k], &sz);
        items[k] = (rec_item){.id = (uint64_t)k, .label = (float)k, .image = png[k], .image_size = sz};
    }
    write_rec(rec, idx, items, n, NULL);
    for (int k = 0; k < n; k++) mx_free(png[k]);
    free(png);
    free(items);
}

START_TEST(test_random_crop_mirror_in_range_and_reproducible)
{
    enum { N = 40 };
    test_img imgs[N];
    write_grey_set(T("r.rec"), NULL, N, imgs);
    mx_runtime *rt = rt_new();
    char path[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("r.rec"));
    const char *kv[] = {path, "data_shape=1,8,10", "batch_size=8", "rand_crop=1", "rand_mirror=1", "seed=5", NULL};
    void *st = ir_must(rt, kv);
    int seen_x[7] = {0}, seen_y[5] = {0}, mirrored = 0, total = 0;
    epoch first = {0};
    for (int ep = 0; ep < 3; ep++) {
        epoch e = run_epoch(st);
        ck_assert_int_eq(e.nb, 5);
        for (int r = 0; r < e.nb * e.B; r++) {
            int id = (int)e.index[r], x = -1, y = -1;
            bool m = false;
            ck_assert_int_lt(id, N);
            find_crop(e.data + (size_t)r * e.sample, &imgs[id], 8, 10, &x, &y, &m);
            ck_assert(x >= 0 && x <= 6 && y >= 0 && y <= 4);
            seen_x[x]++;
            seen_y[y]++;
            mirrored += m;
            total++;
        }
        if (ep == 0) first = e;
        else {
            ck_assert_msg(!epoch_equal(&first, &e), "epoch %d repeats epoch 0's augmentation", ep);
            epoch_free(&e);
        }
        OK(mx_iter_imagerecord.reset(st));
    }
    mx_iter_imagerecord.free(st);
    for (int x = 0; x <= 6; x++) ck_assert_msg(seen_x[x] > 0, "crop x %d never drawn", x);
    for (int y = 0; y <= 4; y++) ck_assert_msg(seen_y[y] > 0, "crop y %d never drawn", y);
    ck_assert_msg(mirrored > total / 4 && mirrored < total * 3 / 4, "%d of %d mirrored", mirrored, total);

    /* same seed: the same batches; another seed: others */
    st = ir_must(rt, kv);
    epoch again = run_epoch(st);
    ck_assert(epoch_equal(&first, &again));
    mx_iter_imagerecord.free(st);
    const char *kv2[] = {path, "data_shape=1,8,10", "batch_size=8", "rand_crop=1", "rand_mirror=1", "seed=6", NULL};
    st = ir_must(rt, kv2);
    epoch other = run_epoch(st);
    ck_assert(!epoch_equal(&first, &other));
    mx_iter_imagerecord.free(st);
    /* seed_aug overrides seed for the augmentation */
    const char *kv3[] = {path, "data_shape=1,8,10", "batch_size=8", "rand_crop=1", "rand_mirror=1", "seed=6", "seed_aug=5",
                         NULL};
    st = ir_must(rt, kv3);
    epoch aug5 = run_epoch(st);
    ck_assert(epoch_equal(&first, &aug5));
    mx_iter_imagerecord.free(st);
    epoch_free(&first);
    epoch_free(&again);
    epoch_free(&other);
    epoch_free(&aug5);
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_threads_give_identical_batches)
{
    enum { N = 61 };
    test_img imgs[N];
    write_grey_set(T("t.rec"), T("t.idx"), N, imgs);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("t.rec"));
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("t.idx"));
    for (int variant = 0; variant < 2; variant++) {
        epoch ref[3];
        for (int threads = 1; threads <= 3; threads++) {
            char th[64];
            snprintf(th, sizeof(th), "preprocess_threads=%d", threads);
            const char *kv[] = {path, "data_shape=1,9,9", "batch_size=7", "rand_crop=1", "rand_mirror=1", "shuffle=1",
                                "seed=3", "max_random_contrast=0.3", "max_random_illumination=5", th,
                                "prefetch_buffer=2", variant ? idx : "round_batch=1", NULL};
            void *st = ir_must(rt, kv);
            for (int ep = 0; ep < 3; ep++) {
                epoch e = run_epoch(st);
                if (threads == 1) ref[ep] = e;
                else {
                    ck_assert_msg(epoch_equal(&ref[ep], &e), "%d threads, epoch %d differs from 1 thread", threads, ep);
                    epoch_free(&e);
                }
                OK(mx_iter_imagerecord.reset(st));
            }
            mx_iter_imagerecord.free(st);
        }
        for (int ep = 0; ep < 3; ep++) epoch_free(&ref[ep]);
    }
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

/* ---- partitions, shuffle, round_batch --------------------------------------------- */

/* n records of varying sizes with 2 labels each; every third one has the
 * RecordIO magic as a label, so it is stored in several parts. */
static void write_label_set(const char *rec, const char *idx, int n, uint8_t *png, size_t png_size)
{
    rec_item *items = calloc((size_t)n, sizeof(rec_item));
    uint32_t magic = MX_RECORDIO_MAGIC;
    float fm;
    memcpy(&fm, &magic, 4);
    for (int k = 0; k < n; k++) {
        items[k] = (rec_item){.id = 1000 + (uint64_t)k * 3, .n_labels = 2, .image = png, .image_size = png_size};
        items[k].labels[0] = k % 3 == 0 ? fm : (float)k;
        items[k].labels[1] = (float)(k * 2);
    }
    write_rec(rec, idx, items, n, NULL);
    free(items);
}

START_TEST(test_partitions_cover_every_record_once)
{
    enum { N = 23 };
    test_img im = make_img(0, 5, 5, 1);
    size_t sz;
    uint8_t *png = png_of(&im, &sz);
    write_label_set(T("p.rec"), T("p.idx"), N, png, sz);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("p.rec"));
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("p.idx"));
    uint32_t magic = MX_RECORDIO_MAGIC;
    float fm;
    memcpy(&fm, &magic, 4);
    for (int indexed = 0; indexed < 2; indexed++)
        for (int parts = 1; parts <= 5; parts++) {
            int count[N] = {0};
            int64_t samples = 0;
            for (int k = 0; k < parts; k++) {
                char np[32], pi[32];
                snprintf(np, sizeof(np), "num_parts=%d", parts);
                snprintf(pi, sizeof(pi), "part_index=%d", k);
                const char *kv[] = {path, "data_shape=1,5,5", "batch_size=1", "label_width=2", "round_batch=0", np, pi,
                                    indexed ? idx : "shuffle=1", NULL};
                void *st = ir_must(rt, kv);
                samples += mx_iter_imagerecord.num_samples(st);
                epoch e = run_epoch(st);
                for (int r = 0; r < e.nb; r++) {
                    ck_assert_int_eq(e.pad[r], 0);
                    int rec = (int)(e.index[r] - 1000) / 3;
                    ck_assert(rec >= 0 && rec < N && e.index[r] == 1000 + (uint64_t)rec * 3);
                    count[rec]++;
                    /* the labels survive the multi-part records */
                    float l0 = e.label[r * 2], l1 = e.label[r * 2 + 1];
                    ck_assert(rec % 3 == 0 ? !memcmp(&l0, &fm, 4) : l0 == (float)rec);
                    ck_assert_float_eq(l1, (float)(rec * 2));
                }
                mx_imagerecord_stats s;
                mx_imagerecord_get_stats(st, &s);
                ck_assert_int_eq(s.warnings, 0);
                epoch_free(&e);
                mx_iter_imagerecord.free(st);
            }
            ck_assert_int_eq(samples, N);
            for (int r = 0; r < N; r++)
                ck_assert_msg(count[r] == 1, "%s, %d parts: record %d delivered %d times", indexed ? "idx" : "bytes",
                              parts, r, count[r]);
        }
    /* index parts follow spec 1.7: 23 records in 5 parts of ceil(23/5) = 5 */
    const char *kv[] = {path, idx, "data_shape=1,5,5", "batch_size=1", "label_width=2", "num_parts=5", "part_index=4",
                        "round_batch=0", NULL};
    void *st = ir_must(rt, kv);
    ck_assert_int_eq(mx_iter_imagerecord.num_samples(st), 3);
    mx_iter_imagerecord.free(st);
    free(im.data);
    mx_free(png);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_shuffle_is_a_permutation_per_epoch)
{
    enum { N = 48 };
    test_img imgs[N];
    write_grey_set(T("s.rec"), T("s.idx"), N, imgs);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("s.rec"));
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("s.idx"));
    for (int indexed = 0; indexed < 2; indexed++) {
        uint64_t orders[4][N];
        const char *kv[] = {path, "data_shape=1,12,16", "batch_size=8", "shuffle=1", "seed=11", indexed ? idx : "verbose=0",
                            NULL};
        void *st = ir_must(rt, kv);
        for (int ep = 0; ep < 4; ep++) {
            epoch e = run_epoch(st);
            ck_assert_int_eq(e.nb, 6);
            int seen[N] = {0};
            for (int r = 0; r < N; r++) {
                orders[ep][r] = e.index[r];
                ck_assert_uint_lt(e.index[r], N);
                seen[e.index[r]]++;
                /* the data is that record's image, unchanged */
                check_crop(e.data + (size_t)r * e.sample, &imgs[e.index[r]], 1, 12, 16, 0, 0, false, zero4, one4, 1.0f,
                           "shuffled");
                ck_assert_float_eq(e.label[r], (float)e.index[r]);
            }
            for (int r = 0; r < N; r++) ck_assert_int_eq(seen[r], 1);
            epoch_free(&e);
            OK(mx_iter_imagerecord.reset(st));
        }
        mx_iter_imagerecord.free(st);
        int identity = 1;
        for (int r = 0; r < N; r++) identity &= orders[0][r] == (uint64_t)r;
        ck_assert_msg(!identity, "shuffle=1 kept file order");
        ck_assert(memcmp(orders[0], orders[1], sizeof(orders[0])) != 0);
        ck_assert(memcmp(orders[1], orders[2], sizeof(orders[0])) != 0);
        /* the same seed replays the same sequence of epochs */
        st = ir_must(rt, kv);
        for (int ep = 0; ep < 2; ep++) {
            epoch e = run_epoch(st);
            for (int r = 0; r < N; r++) ck_assert_uint_eq(e.index[r], orders[ep][r]);
            epoch_free(&e);
            OK(mx_iter_imagerecord.reset(st));
        }
        mx_iter_imagerecord.free(st);
    }
    /* without shuffle: file order */
    const char *kf[] = {path, "data_shape=1,12,16", "batch_size=8", NULL};
    void *st = ir_must(rt, kf);
    epoch e = run_epoch(st);
    for (int r = 0; r < N; r++) ck_assert_uint_eq(e.index[r], (uint64_t)r);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_round_batch_pad)
{
    enum { N = 10 };
    test_img imgs[N];
    write_grey_set(T("b.rec"), NULL, N, imgs);
    mx_runtime *rt = rt_new();
    char path[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("b.rec"));
    /* round_batch=1: [0-3] [4-7] [8 9 | 0 1] pad 2; next epoch [2-5] [6-9]; then [0-3] ... */
    const char *kv[] = {path, "data_shape=1,12,16", "batch_size=4", "preprocess_threads=3", NULL};
    void *st = ir_must(rt, kv);
    static const int want0[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}, want1[] = {2, 3, 4, 5, 6, 7, 8, 9},
                     want2[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1};
    const int *wants[] = {want0, want1, want2};
    const int nbs[] = {3, 2, 3};
    for (int ep = 0; ep < 3; ep++) {
        epoch e = run_epoch(st);
        ck_assert_int_eq(e.nb, nbs[ep]);
        for (int r = 0; r < e.nb * 4; r++) {
            ck_assert_uint_eq(e.index[r], (uint64_t)wants[ep][r]);
            check_crop(e.data + (size_t)r * e.sample, &imgs[wants[ep][r]], 1, 12, 16, 0, 0, false, zero4, one4, 1.0f,
                       "round");
        }
        for (int b = 0; b < e.nb; b++) ck_assert_int_eq(e.pad[b], ep != 1 && b == e.nb - 1 ? 2 : 0);
        epoch_free(&e);
        OK(mx_iter_imagerecord.reset(st));
    }
    /* a reset in the middle of an epoch starts the next one at the top */
    mx_data_batch b;
    bool has;
    OK(mx_iter_imagerecord.next(st, &b, &has));
    OK(mx_iter_imagerecord.reset(st));
    epoch e = run_epoch(st);
    ck_assert_uint_eq(e.index[0], 0);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);

    /* round_batch=0: the last batch [8 9 . .] pad 2, zeros and UINT64_MAX */
    const char *k0[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", NULL};
    st = ir_must(rt, k0);
    for (int ep = 0; ep < 2; ep++) {
        e = run_epoch(st);
        ck_assert_int_eq(e.nb, 3);
        ck_assert_int_eq(e.pad[2], 2);
        ck_assert_uint_eq(e.index[8], 8);
        ck_assert_uint_eq(e.index[10], UINT64_MAX);
        ck_assert_uint_eq(e.index[11], UINT64_MAX);
        for (int64_t i = 0; i < 2 * e.sample; i++) ck_assert_float_eq(e.data[10 * e.sample + i], 0.0f);
        ck_assert_float_eq(e.label[10], 0.0f);
        epoch_free(&e);
        OK(mx_iter_imagerecord.reset(st));
    }
    mx_iter_imagerecord.free(st);

    /* fewer records than batch_size: an error with round_batch, a padded batch without */
    const char *kb[] = {path, "data_shape=1,12,16", "batch_size=11", NULL};
    void *bad;
    ck_assert_int_eq(ir_open(rt, kb, &bad), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "has 10 records, fewer than batch_size 11"), "%s", mx_last_error());
    const char *kc[] = {path, "data_shape=1,12,16", "batch_size=11", "round_batch=0", NULL};
    st = ir_must(rt, kc);
    e = run_epoch(st);
    ck_assert_int_eq(e.nb, 1);
    ck_assert_int_eq(e.pad[0], 1);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

/* ---- damaged input ----------------------------------------------------------------------- */

/* 12 grey images, ids 0..11; record 4 not an image, record 7 a truncated
 * JPEG, record 9 shorter than an IRHeader. Good ids: the other 9. */
static void write_damaged_set(const char *rec, const char *idx, test_img *imgs, uint64_t *offsets)
{
    enum { N = 12 };
    rec_item items[N];
    uint8_t *enc[N] = {0};
    for (int k = 0; k < N; k++) {
        imgs[k] = make_img(k, 16, 12, 1);
        size_t sz;
        enc[k] = png_of(&imgs[k], &sz);
        items[k] = (rec_item){.id = (uint64_t)k, .label = (float)k, .image = enc[k], .image_size = sz};
    }
    static const char text[] = "hello, not an image at all";
    items[4].image = (const uint8_t *)text;
    items[4].image_size = sizeof(text);
    mx_image j = {imgs[7].data, 16, 12, 1};
    uint8_t *jpg;
    size_t jsz;
    OK(mx_image_encode_jpeg(&j, 90, &jpg, &jsz));
    items[7].image = jpg;
    items[7].image_size = jsz / 2; /* cut in the middle of the scan */
    static const uint8_t shorty[10] = {1, 2, 3};
    items[9] = (rec_item){.id = 9, .image = shorty, .image_size = sizeof(shorty), .raw = true};
    write_rec(rec, idx, items, N, offsets);
    for (int k = 0; k < N; k++) mx_free(enc[k]);
    mx_free(jpg);
}

static void expect_ids(const epoch *e, const int *ids, int n, const test_img *imgs)
{
    int got = 0;
    for (int b = 0; b < e->nb; b++)
        for (int r = 0; r < e->B - e->pad[b]; r++, got++) {
            uint64_t id = e->index[b * e->B + r];
            ck_assert_int_lt(got, n);
            ck_assert_uint_eq(id, (uint64_t)ids[got]);
            check_crop(e->data + ((size_t)b * e->B + r) * e->sample, &imgs[id], 1, 12, 16, 0, 0, false, zero4, one4,
                       1.0f, "damaged set");
        }
    ck_assert_int_eq(got, n);
}

START_TEST(test_bad_records_skipped_and_reported)
{
    test_img imgs[12];
    uint64_t off[12];
    write_damaged_set(T("d.rec"), T("d.idx"), imgs, off);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("d.rec"));
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("d.idx"));
    static const int good[] = {0, 1, 2, 3, 5, 6, 8, 10, 11};
    for (int indexed = 0; indexed < 2; indexed++)
        for (int threads = 1; threads <= 3; threads += 2) {
            char th[40];
            snprintf(th, sizeof(th), "preprocess_threads=%d", threads);
            const char *kv[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", th, indexed ? idx : "shuffle=0", NULL};
            void *st = ir_must(rt, kv);
            log_lines log = {0};
            mx_imagerecord_set_log(st, collect, &log);
            for (int ep = 0; ep < 2; ep++) {
                epoch e = run_epoch(st);
                ck_assert_int_eq(e.nb, 3);
                ck_assert_int_eq(e.pad[2], 3);
                expect_ids(&e, good, 9, imgs);
                epoch_free(&e);
                OK(mx_iter_imagerecord.reset(st));
            }
            /* reported once each, not again in the second epoch */
            ck_assert_int_eq(log.n, 3);
            char want[3][128];
            snprintf(want[0], 128, "skipped the record at offset %llu: not a JPEG or PNG image", (unsigned long long)off[4]);
            snprintf(want[1], 128, "skipped the record at offset %llu: truncated or corrupt JPEG", (unsigned long long)off[7]);
            snprintf(want[2], 128, "skipped the record at offset %llu: not an image record", (unsigned long long)off[9]);
            for (int i = 0; i < 3; i++) {
                ck_assert_msg(strstr(log.lines[i], want[i]), "line %d: %s", i, log.lines[i]);
                ck_assert_msg(strstr(log.lines[i], "imagerecord: '"), "%s", log.lines[i]);
            }
            mx_imagerecord_stats s;
            mx_imagerecord_get_stats(st, &s);
            ck_assert_int_eq(s.records, 12);
            ck_assert_int_eq(s.skipped_records, 3);
            ck_assert_int_eq(s.skipped_ranges, 0);
            ck_assert_int_eq(s.warnings, 3);
            ck_assert_int_eq(s.delivered, 18);
            ck_assert_str_eq(s.last_warning, log.lines[2]);
            mx_iter_imagerecord.free(st);
        }
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_corrupt_and_truncated_files)
{
    test_img imgs[12];
    uint64_t off[12];
    write_damaged_set(T("c.rec"), T("c.idx"), imgs, off);
    size_t n;
    uint8_t *bytes = slurp(T("c.rec"), &n);
    /* bad magic at the head of record 2 */
    uint8_t *bad = malloc(n);
    memcpy(bad, bytes, n);
    bad[off[2]] ^= 0xFF;
    spit(T("m.rec"), bad, n);
    /* cut inside the last record's payload, at an odd size */
    spit(T("t.rec"), bytes, off[11] + 30 + 1);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("c.idx"));

    static const int good_m[] = {0, 1, 3, 5, 6, 8, 10, 11}, good_t[] = {0, 1, 2, 3, 5, 6, 8, 10};
    for (int indexed = 0; indexed < 2; indexed++) {
        /* bad magic: a skipped byte range; with the .idx, whose offset 2
         * is no record head now, one line more: it is read by scanning */
        snprintf(path, sizeof(path), "path_imgrec=%s", T("m.rec"));
        const char *kv[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", "preprocess_threads=2",
                            indexed ? idx : "shuffle=0", NULL};
        void *st = ir_must(rt, kv);
        log_lines log = {0};
        mx_imagerecord_set_log(st, collect, &log);
        epoch e = run_epoch(st);
        expect_ids(&e, good_m, 8, imgs);
        epoch_free(&e);
        mx_imagerecord_stats s;
        mx_imagerecord_get_stats(st, &s);
        ck_assert_int_eq(log.n, 4 + indexed);
        char want[160];
        if (indexed) {
            snprintf(want, sizeof(want), "does not match path_imgrec '%s': 1 of 12 offsets are not record heads (first: "
                     "offset %llu: corrupt RecordIO data: bad magic 0x", T("m.rec"), (unsigned long long)off[2]);
            ck_assert_msg(strstr(log.lines[0], want), "%s\nwanted: %s", log.lines[0], want);
            ck_assert_msg(strstr(log.lines[0], "reading the .rec by scanning instead"), "%s", log.lines[0]);
        }
        snprintf(want, sizeof(want), "skipped bytes [%llu, %llu) (%llu bytes): corrupt RecordIO data: bad magic 0x",
                 (unsigned long long)off[2], (unsigned long long)off[3], (unsigned long long)(off[3] - off[2]));
        ck_assert_int_eq(s.skipped_ranges, 1);
        ck_assert_uint_eq(s.skipped_bytes, off[3] - off[2]);
        ck_assert_int_eq(s.skipped_records, 3);
        ck_assert_int_eq(s.records, 11);
        ck_assert_msg(strstr(log.lines[indexed], want), "%s\nwanted: %s", log.lines[indexed], want);
        mx_iter_imagerecord.free(st);

        /* verbose = 0: the same skips, counted but not sent to the log */
        const char *quiet[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", "preprocess_threads=2",
                               indexed ? idx : "shuffle=0", "verbose=0", NULL};
        st = ir_must(rt, quiet);
        log.n = 0;
        mx_imagerecord_set_log(st, collect, &log);
        e = run_epoch(st);
        expect_ids(&e, good_m, 8, imgs);
        epoch_free(&e);
        mx_imagerecord_stats q;
        mx_imagerecord_get_stats(st, &q);
        ck_assert_int_eq(log.n, 0);
        ck_assert_int_eq(q.skipped_records, s.skipped_records);
        ck_assert_int_eq(q.warnings, s.warnings);
        mx_iter_imagerecord.free(st);

        /* truncated file */
        snprintf(path, sizeof(path), "path_imgrec=%s", T("t.rec"));
        const char *kt[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", indexed ? idx : "shuffle=0", NULL};
        st = ir_must(rt, kt);
        log.n = 0;
        mx_imagerecord_set_log(st, collect, &log);
        e = run_epoch(st);
        expect_ids(&e, good_t, 8, imgs);
        epoch_free(&e);
        ck_assert_int_eq(log.n, 4 + indexed);
        snprintf(want, sizeof(want), "RecordIO data truncated: the part at offset %llu claims", (unsigned long long)off[11]);
        ck_assert_msg(strstr(log.lines[indexed], want), "%s", log.lines[indexed]);
        mx_iter_imagerecord.free(st);
    }

    /* a file that is no RecordIO at all: everything skipped, then an error at next() */
    spit(T("junk.rec"), "this is not a record file at all....", 36);
    snprintf(path, sizeof(path), "path_imgrec=%s", T("junk.rec"));
    const char *kj[] = {path, "data_shape=1,4,4", "batch_size=1", NULL};
    void *st;
    ck_assert_int_eq(ir_open(rt, kj, &st), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "has no records"), "%s", mx_last_error());
    /* records that are all undecodable: an error at next(), not an endless epoch */
    snprintf(path, sizeof(path), "path_imgrec=%s", T("c.rec"));
    const char *ka[] = {path, "data_shape=4,12,16", "batch_size=2", NULL};
    st = ir_must(rt, ka);
    mx_data_batch b;
    bool has;
    ck_assert_int_eq(mx_iter_imagerecord.next(st, &b, &has), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "no record of this epoch could be used"), "%s", mx_last_error());
    ck_assert_msg(strstr(mx_last_error(), "data_shape asks for 4"), "%s", mx_last_error());
    mx_iter_imagerecord.free(st);

    free(bad);
    free(bytes);
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

/* Garbage inserted at an unaligned offset inside record 6 shifts every
 * later record off the 4-byte grid: the scan still finds each of them, and
 * the .idx (whose later offsets now miss) is detected: one part reads by
 * scanning, two parts are refused. */
START_TEST(test_unaligned_garbage_and_stale_idx)
{
    test_img imgs[12];
    uint64_t off[12];
    write_damaged_set(T("g.rec"), T("g.idx"), imgs, off);
    size_t n;
    uint8_t *bytes = slurp(T("g.rec"), &n);
    size_t ins = (size_t)off[6] + 13, glen = 7; /* not a multiple of 4 */
    uint8_t *bad = malloc(n + glen);
    memcpy(bad, bytes, ins);
    memset(bad + ins, 0xA5, glen);
    memcpy(bad + ins + glen, bytes + ins, n - ins);
    spit(T("gb.rec"), bad, n + glen);
    mx_runtime *rt = rt_new();
    char path[600], idx[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("gb.rec"));
    snprintf(idx, sizeof(idx), "path_imgidx=%s", T("g.idx"));
    /* The damaged set's own bad records (4, 7, 9) and now 6 are left out. */
    static const int good[] = {0, 1, 2, 3, 5, 8, 10, 11};
    for (int indexed = 0; indexed < 2; indexed++) {
        const char *kv[] = {path, "data_shape=1,12,16", "batch_size=4", "round_batch=0", indexed ? idx : "shuffle=0",
                            NULL};
        void *st = ir_must(rt, kv);
        log_lines log = {0};
        mx_imagerecord_set_log(st, collect, &log);
        epoch e = run_epoch(st);
        expect_ids(&e, good, 8, imgs);
        epoch_free(&e);
        mx_imagerecord_stats s;
        mx_imagerecord_get_stats(st, &s);
        ck_assert_int_eq(s.skipped_ranges, 1);
        ck_assert_uint_eq(s.skipped_bytes, glen); /* record 6 keeps its framing, fails to decode */
        ck_assert_uint_eq(s.bytes, n + glen);
        if (indexed) ck_assert_msg(strstr(log.lines[0], "offsets are not record heads"), "%s", log.lines[0]);
        mx_data_skip_stats ds;
        mx_iter_imagerecord.skip_stats(st, &ds);
        ck_assert_int_eq(ds.skipped_records, s.skipped_records);
        ck_assert_uint_eq(ds.skipped_bytes, s.skipped_bytes);
        ck_assert_uint_eq(ds.bytes, n + glen);
        mx_iter_imagerecord.free(st);
    }
    const char *two[] = {path, "data_shape=1,12,16", "batch_size=2", idx, "num_parts=2", "part_index=1", NULL};
    void *st;
    ck_assert_int_eq(ir_open(rt, two, &st), MX_ERR_FORMAT);
    char want[800];
    snprintf(want, sizeof(want), "path_imgidx '%s' does not match path_imgrec '%s': 5 of 6 offsets in this part are not "
             "record heads (first: offset %llu", T("g.idx"), T("gb.rec"), (unsigned long long)off[7]);
    ck_assert_msg(strstr(mx_last_error(), want), "%s\nwanted: %s", mx_last_error(), want);
    ck_assert_msg(strstr(mx_last_error(), "set path_imgidx = \"\" to read the .rec by scanning"), "%s", mx_last_error());
    free(bad);
    free(bytes);
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

/* ---- labels, mean image, parameters ------------------------------------------------- */

START_TEST(test_multi_label_and_imglist)
{
    test_img im = make_img(0, 4, 4, 1);
    size_t sz;
    uint8_t *png = png_of(&im, &sz);
    rec_item items[3];
    for (int k = 0; k < 3; k++) {
        items[k] = (rec_item){.id = 7 + (uint64_t)k, .n_labels = 3, .image = png, .image_size = sz};
        for (int j = 0; j < 3; j++) items[k].labels[j] = (float)(k * 10 + j);
    }
    write_rec(T("ml.rec"), NULL, items, 3, NULL);
    FILE *f = fopen(T("ml.lst"), "w");
    fprintf(f, "7\t1.5\t2.5\ta/x.png\n  8 3.5  4.5 b/y.png\n9\t0\t0\tc.png\n9\t5.5\t6.5\tc.png\n");
    fclose(f);
    mx_runtime *rt = rt_new();
    char path[600], lst[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("ml.rec"));
    snprintf(lst, sizeof(lst), "path_imglist=%s", T("ml.lst"));
    const char *kv[] = {path, "data_shape=1,4,4", "batch_size=3", "label_width=3", NULL};
    void *st = ir_must(rt, kv);
    mx_shape ls = mx_iter_imagerecord.label_shape(st);
    ck_assert_int_eq(ls.ndim, 2);
    ck_assert_int_eq(ls.dims[1], 3);
    epoch e = run_epoch(st);
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++) ck_assert_float_eq(e.label[k * 3 + j], (float)(k * 10 + j));
    epoch_free(&e);
    mx_iter_imagerecord.free(st);
    /* labels from the list by id (the later line of a repeated id wins) */
    const char *kl[] = {path, lst, "data_shape=1,4,4", "batch_size=3", "label_width=2", NULL};
    st = ir_must(rt, kl);
    e = run_epoch(st);
    static const float want[] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(e.label[i], want[i]);
    epoch_free(&e);
    mx_iter_imagerecord.free(st);
    /* label_width that does not match the records: every record skipped, an error */
    const char *kw[] = {path, "data_shape=1,4,4", "batch_size=3", "label_width=2", NULL};
    st = ir_must(rt, kw);
    mx_data_batch b;
    bool has;
    ck_assert_int_eq(mx_iter_imagerecord.next(st, &b, &has), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "the record has 3 labels (IRHeader flag) but label_width is 2"), "%s",
                  mx_last_error());
    mx_iter_imagerecord.free(st);
    free(im.data);
    mx_free(png);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_mean_img_computed_saved_and_loaded)
{
    enum { N = 5 };
    test_img imgs[N];
    write_grey_set(T("mi.rec"), NULL, N, imgs);
    mx_runtime *rt = rt_new();
    char path[600], mean[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("mi.rec"));
    snprintf(mean, sizeof(mean), "mean_img=%s", T("mean.nd"));
    const char *kv[] = {path, mean, "data_shape=1,12,16", "batch_size=5", "preprocess_threads=2", NULL};
    float want[12 * 16];
    for (int i = 0; i < 12 * 16; i++) {
        double s = 0;
        for (int k = 0; k < N; k++) s += imgs[k].data[i];
        want[i] = (float)(s / N);
    }
    for (int round = 0; round < 2; round++) { /* computed, then loaded */
        void *st = ir_must(rt, kv);
        ck_assert(access(T("mean.nd"), F_OK) == 0);
        epoch e = run_epoch(st);
        for (int k = 0; k < N; k++)
            for (int i = 0; i < 12 * 16; i++)
                ck_assert_float_eq(e.data[k * e.sample + i], (float)imgs[k].data[i] - want[i]);
        epoch_free(&e);
        mx_iter_imagerecord.free(st);
    }
    mx_ndarray_list list;
    OK(mx_ndarray_load(rt, T("mean.nd"), &list));
    ck_assert_int_eq(list.count, 1);
    ck_assert_str_eq(list.names[0], "mean_img");
    ck_assert_int_eq(mx_ndarray_shape(list.arrays[0])->ndim, 3);
    mx_ndarray_list_free(&list);
    /* a mean image of the wrong shape */
    const char *k2[] = {path, mean, "data_shape=1,10,16", "batch_size=5", NULL};
    void *st;
    ck_assert_int_eq(ir_open(rt, k2, &st), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "expected float32 (1,10,16)"), "%s", mx_last_error());
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_parameter_and_file_errors)
{
    test_img im = make_img(0, 4, 4, 3);
    size_t sz;
    uint8_t *png = png_of(&im, &sz);
    rec_item it = {.id = 1, .image = png, .image_size = sz};
    write_rec(T("e.rec"), NULL, &it, 1, NULL);
    spit(T("empty.rec"), "", 0);
    mx_runtime *rt = rt_new();
    char p[600], pdir[600], pempty[600], pmiss[600];
    snprintf(p, sizeof(p), "path_imgrec=%s", T("e.rec"));
    snprintf(pdir, sizeof(pdir), "path_imgrec=%s", tmp);
    snprintf(pempty, sizeof(pempty), "path_imgrec=%s", T("empty.rec"));
    snprintf(pmiss, sizeof(pmiss), "path_imgrec=%s", T("missing.rec"));
    struct {
        const char *kv[8];
        mx_status status;
        const char *msg;
    } cases[] = {
        {{pmiss, "data_shape=3,4,4", "batch_size=1", NULL}, MX_ERR_IO, "cannot open path_imgrec"},
        {{pdir, "data_shape=3,4,4", "batch_size=1", NULL}, MX_ERR_UNSUPPORTED, "is a directory"},
        {{pempty, "data_shape=3,4,4", "batch_size=1", NULL}, MX_ERR_FORMAT, "is empty"},
        {{"data_shape=3,4,4", "batch_size=1", NULL}, MX_ERR_INVALID, "'path_imgrec': is required"},
        {{p, "data_shape=2,4,4", "batch_size=1", NULL}, MX_ERR_INVALID, "1, 3 or 4 channels"},
        {{p, "data_shape=4,4", "batch_size=1", NULL}, MX_ERR_INVALID, "'data_shape': expected (C, H, W)"},
        {{p, "data_shape=3,4,4", "batch_size=1", "max_rotate_angle=10", NULL}, MX_ERR_UNSUPPORTED,
         "'max_rotate_angle': not supported"},
        {{p, "data_shape=3,4,4", "batch_size=1", "inter_method=2", NULL}, MX_ERR_UNSUPPORTED, "'inter_method': 2 is not supported"},
        {{p, "data_shape=3,4,4", "batch_size=1", "dtype=uint8", NULL}, MX_ERR_UNSUPPORTED, "'dtype': 'uint8' is not supported"},
        {{p, "data_shape=3,4,4", "batch_size=1", "num_parts=2", "part_index=2", NULL}, MX_ERR_INVALID,
         "'part_index': must be less than num_parts (2)"},
        {{p, "data_shape=3,4,4", "batch_size=1", "std_g=0", NULL}, MX_ERR_INVALID, "std_g"},
        {{p, "data_shape=3,4,4", "batch_size=1", "rand_crpo=1", NULL}, MX_ERR_INVALID, "did you mean 'rand_crop'"},
        {{p, "data_shape=3,4,4", NULL}, MX_ERR_INVALID, "batch_size"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        void *st = NULL;
        mx_status s = ir_open(rt, cases[i].kv, &st);
        ck_assert_msg(s == cases[i].status, "case %zu: status %d (%s)", i, (int)s, mx_last_error());
        ck_assert_msg(strstr(mx_last_error(), cases[i].msg), "case %zu: %s", i, mx_last_error());
        ck_assert_ptr_null(st);
    }
    /* chunked shuffles are refused (the shuffle is global) */
    const char *chunk[] = {p, "data_shape=3,4,4", "batch_size=1", "shuffle_chunk_size=64", NULL};
    void *st = NULL;
    ck_assert_int_eq(ir_open(rt, chunk, &st), MX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mx_last_error(), "'shuffle_chunk_size': not supported"), "%s", mx_last_error());
    /* keys a config may carry with MXNet's meaning */
    const char *ok[] = {p, "data_shape=3,4,4", "batch_size=1", "verbose=0", "ctx=cpu", "dtype=float32", NULL};
    st = ir_must(rt, ok);
    mx_iter_imagerecord.free(st);
    free(im.data);
    mx_free(png);
    mx_runtime_free(rt);
}
END_TEST

START_TEST(test_free_mid_epoch)
{
    enum { N = 64 };
    test_img imgs[N];
    write_grey_set(T("f.rec"), NULL, N, imgs);
    mx_runtime *rt = rt_new();
    char path[600];
    snprintf(path, sizeof(path), "path_imgrec=%s", T("f.rec"));
    const char *kv[] = {path, "data_shape=1,12,16", "batch_size=4", "preprocess_threads=3", "prefetch_buffer=3",
                        "resize=48", "rand_crop=1", NULL};
    for (int i = 0; i < 4; i++) {
        void *st = ir_must(rt, kv);
        mx_data_batch b;
        bool has;
        for (int k = 0; k < i; k++) OK(mx_iter_imagerecord.next(st, &b, &has));
        if (i == 3) OK(mx_iter_imagerecord.reset(st));
        mx_iter_imagerecord.free(st);
    }
    for (int k = 0; k < N; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

/* The generator: keys differ per pass and position; upto stays in range and
 * covers it. */
START_TEST(test_aug_generator)
{
    ck_assert_uint_ne(mx_aug_key(0, 0, 0), mx_aug_key(0, 0, 1));
    ck_assert_uint_ne(mx_aug_key(0, 0, 0), mx_aug_key(0, 1, 0));
    ck_assert_uint_ne(mx_aug_key(0, 0, 0), mx_aug_key(1, 0, 0));
    mx_aug_rng g;
    mx_aug_rng_seed(&g, 42);
    int hist[5] = {0};
    for (int i = 0; i < 5000; i++) {
        uint64_t v = mx_aug_rng_upto(&g, 4);
        ck_assert_uint_le(v, 4);
        hist[v]++;
        float u = mx_aug_rng_uniform(&g);
        ck_assert(u >= 0.0f && u < 1.0f);
    }
    for (int i = 0; i < 5; i++) ck_assert_msg(hist[i] > 850 && hist[i] < 1150, "bucket %d: %d", i, hist[i]);
    ck_assert_uint_eq(mx_aug_rng_upto(&g, 0), 0);
}
END_TEST

/* The decoder's JPEG fast path (reused TurboJPEG handle and buffer) gives
 * the same pixels, and the same errors, as lib/image's decoder. */
START_TEST(test_aug_jpeg_fast_path_matches_lib)
{
    test_img colour = make_img(7, 37, 29, 3), grey = make_img(8, 30, 26, 1);
    uint8_t *jc, *jg;
    size_t nc, ng;
    mx_image ic = {colour.data, 37, 29, 3}, ig = {grey.data, 30, 26, 1};
    OK(mx_image_encode_jpeg(&ic, 90, &jc, &nc));
    OK(mx_image_encode_jpeg(&ig, 75, &jg, &ng));
    mx_aug_scratch scratch = {0};
    for (int c = 1; c <= 3; c += 2)
        for (int which = 0; which < 2; which++) {
            mx_aug_params p = {.channels = c, .height = 20, .width = 24, .rand_crop = true, .rand_mirror = true,
                               .scale = 0.5f, .mean = {1, 2, 3, 4}, .std = {2, 3, 4, 5}};
            OK(mx_aug_prepare(&p));
            const uint8_t *data = which ? jg : jc;
            size_t size = which ? ng : nc;
            float fast[3 * 20 * 24], slow[3 * 20 * 24];
            mx_aug_info fi, si;
            for (uint64_t key = 0; key < 4; key++) {
                OK(mx_aug_process(&p, &scratch, data, size, key, fast, &fi));
                OK(mx_aug_process(&p, NULL, data, size, key, slow, &si));
                ck_assert(!memcmp(fast, slow, sizeof(float) * (size_t)(c * 20 * 24)));
                ck_assert_int_eq(fi.crop_x, si.crop_x);
                ck_assert_int_eq(fi.mirrored, si.mirrored);
            }
            /* the decoded pixels are lib/image's */
            mx_image ref;
            mx_image_decode_opts o = {.color = c == 1 ? MX_IMAGE_GRAY : MX_IMAGE_COLOR, .ignore_orientation = 1};
            OK(mx_image_decode_ex(data, size, &o, &ref));
            p.rand_crop = p.rand_mirror = false;
            p.scale = 1.0f;
            for (int k = 0; k < 4; k++) p.mean[k] = 0.0f, p.std[k] = 1.0f;
            OK(mx_aug_prepare(&p));
            OK(mx_aug_process(&p, &scratch, data, size, 0, fast, NULL));
            int x0 = (ref.width - 24) / 2, y0 = (ref.height - 20) / 2;
            for (int ch = 0; ch < c; ch++)
                for (int i = 0; i < 20; i++)
                    for (int j = 0; j < 24; j++)
                        ck_assert_float_eq(fast[(ch * 20 + i) * 24 + j],
                                           (float)ref.data[((size_t)(y0 + i) * ref.width + x0 + j) * c + ch]);
            mx_image_free(&ref);
        }
    /* a truncated JPEG: the lib's message, with or without the fast path */
    mx_aug_params p = {.channels = 3, .height = 20, .width = 24, .scale = 1, .std = {1, 1, 1, 1}};
    OK(mx_aug_prepare(&p));
    float out[3 * 20 * 24];
    ck_assert_int_eq(mx_aug_process(&p, &scratch, jc, nc / 2, 0, out, NULL), MX_ERR_FORMAT);
    char with[512];
    snprintf(with, sizeof(with), "%s", mx_last_error());
    ck_assert_int_eq(mx_aug_process(&p, NULL, jc, nc / 2, 0, out, NULL), MX_ERR_FORMAT);
    ck_assert_str_eq(with, mx_last_error());
    ck_assert_msg(strstr(with, "JPEG"), "%s", with);
    mx_aug_scratch_free(&scratch);
    mx_free(jc);
    mx_free(jg);
    free(colour.data);
    free(grey.data);
}
END_TEST

/* The generic front end: mx_data_iter_set_log reaches the kind's hook;
 * kinds without warnings have none and the call is a no-op. */
START_TEST(test_set_log_through_io_registry)
{
    test_img imgs[12];
    uint64_t off[12];
    write_damaged_set(T("g.rec"), NULL, imgs, off);
    mx_runtime *rt = rt_new();
    const char *keys[] = {"path_imgrec", "data_shape", "batch_size", "round_batch"};
    const char *values[] = {T("g.rec"), "1,12,16", "4", "0"};
    mx_data_iter *it;
    OK(mx_data_iter_create(rt, "imagerecord", keys, values, 4, &it));
    log_lines log = {0};
    mx_data_iter_set_log(it, collect, &log);
    int samples = 0;
    for (;;) {
        mx_data_batch b;
        bool has;
        OK(mx_data_iter_next(it, &b, &has));
        if (!has) break;
        samples += 4 - b.pad;
    }
    ck_assert_int_eq(samples, 9);
    ck_assert_int_eq(log.n, 3);
    char want[600];
    snprintf(want, sizeof(want),
             "imagerecord: '%s': skipped the record at offset %llu: not a JPEG or PNG image (starts with 68 65 6c 6c)",
             T("g.rec"), (unsigned long long)off[4]);
    ck_assert_str_eq(log.lines[0], want);
    /* cleared: later warnings are only counted */
    mx_data_iter_set_log(it, NULL, NULL);
    OK(mx_data_iter_reset(it));
    mx_data_iter_free(it);
    ck_assert_ptr_nonnull(mx_data_iter_kind_find("mnist")->set_log); /* its load line */
    ck_assert_ptr_null(mx_data_iter_kind_find("csv")->set_log);
    ck_assert_ptr_nonnull(mx_data_iter_kind_find("imagerecord")->set_log);
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    mx_runtime_free(rt);
}
END_TEST

static const char *build_dir(void);

/* True when `line` is one whole line of `log`. */
static bool has_line(const char *log, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = log; (p = strstr(p, line)); p++)
        if ((p == log || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0')) return true;
    return false;
}

/* mxtrain training from .rec files with corrupt records: every skip
 * warning of both iterators is a line on stderr, each iterator's epoch
 * ends with a summary of what it skipped, and training completes (3 of 12
 * records lost: within the fit.max_skip_fraction this config allows). */
START_TEST(test_mxtrain_shows_skip_warnings)
{
    test_img imgs[12];
    uint64_t off[12];
    write_damaged_set(T("train.rec"), NULL, imgs, off);
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    write_damaged_set(T("val.rec"), NULL, imgs, off); /* same layout, same offsets */
    for (int k = 0; k < 12; k++) free(imgs[k].data);
    char conf[4096];
    snprintf(conf, sizeof(conf),
             "[net]\ninputs = data\n\n"
             "[layer fc1]\nop = FullyConnected\nnum_hidden = 12\n\n"
             "[layer softmax]\nop = SoftmaxOutput\n\n"
             "[train]\niter = imagerecord\npath_imgrec = %s\ndata_shape = 1,12,16\nbatch_size = 3\n"
             "round_batch = 0\npreprocess_threads = 2\nscale = 0.00390625\n\n"
             "[val]\niter = imagerecord\npath_imgrec = %s\ndata_shape = 1,12,16\nbatch_size = 3\n"
             "round_batch = 0\nscale = 0.00390625\n\n"
             "[optimizer]\ntype = sgd\nlr = 0.1\n\n"
             "[fit]\nnum_epoch = 1\nctx = cpu\nmodel_prefix =\nmetric = acc\ndisp_batches = 1\n"
             "max_skip_fraction = 0.3\n",
             T("train.rec"), T("val.rec"));
    spit(T("tiny.conf"), conf, strlen(conf));
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s/bin/mxtrain '%s' 2>'%s' >/dev/null", build_dir(), T("tiny.conf"), T("err.txt"));
    int st = system(cmd);
    size_t n;
    char *err = (char *)slurp(T("err.txt"), &n);
    err[n] = '\0';
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mxtrain failed:\n%s", err);
    const char *files[2] = {T("train.rec"), T("val.rec")};
    for (int f = 0; f < 2; f++) {
        char want[3][700];
        snprintf(want[0], sizeof(want[0]),
                 "imagerecord: '%s': skipped the record at offset %llu: not a JPEG or PNG image (starts with 68 65 "
                 "6c 6c)",
                 files[f], (unsigned long long)off[4]);
        snprintf(want[1], sizeof(want[1]),
                 "imagerecord: '%s': skipped the record at offset %llu: truncated or corrupt JPEG: Premature end of "
                 "JPEG file",
                 files[f], (unsigned long long)off[7]);
        snprintf(want[2], sizeof(want[2]),
                 "imagerecord: '%s': skipped the record at offset %llu: not an image record: image record of 10 "
                 "bytes is shorter than its 24-byte header",
                 files[f], (unsigned long long)off[9]);
        for (int i = 0; i < 3; i++) ck_assert_msg(has_line(err, want[i]), "no line '%s' in:\n%s", want[i], err);
    }
    ck_assert_msg(strstr(err, "Epoch[0] Validation-accuracy="), "%s", err);
    ck_assert_msg(strstr(err, "Epoch[0] Time cost="), "%s", err);
    for (int f = 0; f < 2; f++) {
        char want[200];
        snprintf(want, sizeof(want), "Epoch[0] [%s] data skipped as corrupt: 3 of 12 records and 0 of ", f ? "val" : "train");
        ck_assert_msg(strstr(err, want), "no '%s' in:\n%s", want, err);
    }
    free(err);
}
END_TEST

/* ---- the YCbCr fast path ------------------------------------------------------------------ */

/* Params that write plain RGB values: out = pixel. */
static mx_aug_params plain_rgb(int h, int w, bool portable)
{
    mx_aug_params p = {.channels = 3, .height = h, .width = w, .scale = 1.0f, .std = {1, 1, 1, 1},
                       .portable = portable};
    OK(mx_aug_prepare(&p));
    return p;
}

/* libjpeg's YCbCr->RGB tables (jdcolor.c build_ycc_rgb_table), the reference. */
typedef struct ycc_tables {
    int cr_r[256], cb_b[256];
    int64_t cr_g[256], cb_g[256];
} ycc_tables;

static void ycc_tables_init(ycc_tables *t)
{
    for (int i = 0; i < 256; i++) {
        int64_t x = i - 128;
        t->cr_r[i] = (int)((INT64_C(91881) * x + 32768) >> 16); /* FIX(1.40200) */
        t->cb_b[i] = (int)((INT64_C(116130) * x + 32768) >> 16); /* FIX(1.77200) */
        t->cr_g[i] = -INT64_C(46802) * x;                        /* -FIX(0.71414) */
        t->cb_g[i] = -INT64_C(22554) * x + 32768;                /* -FIX(0.34414), + ONE_HALF */
    }
}

static uint8_t limit(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* Every (Cb, Cr) pair, with four kinds of luma, through the 4:4:4 planes
 * path (no upsampling), against TurboJPEG's own conversion of the same
 * planes (tjDecodeYUVPlanes) and the tables: the AVX2 kernel's 16-bit
 * formulation and the portable one both give libjpeg's values. */
START_TEST(test_aug_ycc_every_value_matches_turbojpeg)
{
    enum { S = 256 };
    uint8_t *pl[3];
    for (int c = 0; c < 3; c++) pl[c] = malloc(S * S);
    uint8_t *rgb = malloc(S * S * 3);
    float *out = aligned_alloc(64, sizeof(float) * 3 * S * S); /* aligned as batch buffers: streamed */
    ycc_tables tab;
    ycc_tables_init(&tab);
    tjhandle tj = tjInitDecompress();
    ck_assert_ptr_nonnull(tj);
    mx_aug_scratch scratch = {0};
    for (int ykind = 0; ykind < 4; ykind++) {
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                pl[0][y * S + x] = ykind == 0 ? 0 : ykind == 1 ? 255 : ykind == 2 ? 128 : (uint8_t)(x * 7 + y * 13);
                pl[1][y * S + x] = (uint8_t)x; /* Cb */
                pl[2][y * S + x] = (uint8_t)y; /* Cr */
            }
        const unsigned char *src[3] = {pl[0], pl[1], pl[2]};
        int strides[3] = {S, S, S};
        ck_assert_int_eq(tjDecodeYUVPlanes(tj, src, strides, TJSAMP_444, rgb, S, 0, S, TJPF_RGB, 0), 0);
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                int Y = pl[0][y * S + x];
                const uint8_t *q = rgb + (y * S + x) * 3;
                ck_assert_int_eq(q[0], limit(Y + tab.cr_r[y]));
                ck_assert_int_eq(q[1], limit(Y + (int)((tab.cb_g[x] + tab.cr_g[y]) >> 16)));
                ck_assert_int_eq(q[2], limit(Y + tab.cb_b[x]));
            }
        for (int portable = 0; portable < 2; portable++)
            for (int mirror = 0; mirror < 2; mirror++) {
                mx_aug_params p = plain_rgb(S, S, portable);
                p.mirror = mirror;
                const uint8_t *cpl[3] = {pl[0], pl[1], pl[2]};
                const int32_t st[3] = {S, S, S};
                mx_aug_info info;
                OK(mx_aug_process_planes(&p, &scratch, cpl, st, S, S, 1, 1, 0, out, &info));
                ck_assert(info.planar);
                for (int c = 0; c < 3; c++)
                    for (int y = 0; y < S; y++)
                        for (int x = 0; x < S; x++) {
                            int sx = mirror ? S - 1 - x : x;
                            float want = (float)rgb[(y * S + sx) * 3 + c], got = out[((size_t)c * S + y) * S + x];
                            ck_assert_msg(got == want, "Y kind %d, Cb %d, Cr %d, plane %d, %s: %g, want %g", ykind, sx,
                                          y, c, portable ? "portable" : "simd", got, want);
                        }
            }
    }
    tjDestroy(tj);
    mx_aug_scratch_free(&scratch);
    for (int c = 0; c < 3; c++) free(pl[c]);
    free(rgb);
    free(out);
}
END_TEST

/* libjpeg's fancy upsampling written as jdsample.c writes it (special
 * first and last columns; the rows above the first and below the last are
 * those rows repeated, as jdmainct.c's context pointers give them): chroma
 * plane (cw, ch) to the (w, h) image. */
static void fancy_upsample_ref(const uint8_t *in, int cw, int ch, int vs, int w, int h, uint8_t *out)
{
    uint8_t *row = malloc((size_t)cw * 2 + 2);
    for (int y = 0; y < h; y++) {
        const uint8_t *in0 = in + (size_t)(vs == 2 ? y / 2 : y) * cw;
        if (vs == 1) {
            /* h2v1_fancy_upsample */
            int o = 0;
            int v = in0[0];
            row[o++] = (uint8_t)v;
            row[o++] = (uint8_t)((v * 3 + in0[1] + 2) >> 2);
            for (int i = 1; i < cw - 1; i++) {
                v = in0[i] * 3;
                row[o++] = (uint8_t)((v + in0[i - 1] + 1) >> 2);
                row[o++] = (uint8_t)((v + in0[i + 1] + 2) >> 2);
            }
            v = in0[cw - 1];
            row[o++] = (uint8_t)((v * 3 + in0[cw - 2] + 1) >> 2);
            row[o++] = (uint8_t)v;
        } else {
            /* h2v2_fancy_upsample: even rows lean on the row above, odd rows on the row below */
            int cy = y / 2, fy = (y & 1) ? cy + 1 : cy - 1;
            if (fy < 0) fy = 0;
            if (fy > ch - 1) fy = ch - 1;
            const uint8_t *in1 = in + (size_t)fy * cw;
            int o = 0;
            int this_sum = in0[0] * 3 + in1[0], next_sum = in0[1] * 3 + in1[1], last_sum;
            row[o++] = (uint8_t)((this_sum * 4 + 8) >> 4);
            row[o++] = (uint8_t)((this_sum * 3 + next_sum + 7) >> 4);
            last_sum = this_sum;
            this_sum = next_sum;
            for (int i = 2; i < cw; i++) {
                next_sum = in0[i] * 3 + in1[i];
                row[o++] = (uint8_t)((this_sum * 3 + last_sum + 8) >> 4);
                row[o++] = (uint8_t)((this_sum * 3 + next_sum + 7) >> 4);
                last_sum = this_sum;
                this_sum = next_sum;
            }
            row[o++] = (uint8_t)((this_sum * 3 + last_sum + 8) >> 4);
            row[o++] = (uint8_t)((this_sum * 4 + 7) >> 4);
        }
        memcpy(out + (size_t)y * w, row, (size_t)w);
    }
    free(row);
}

static uint64_t test_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* 4:2:2 and 4:2:0 planes of random samples, odd and even sizes, random
 * crops and mirrors: the planes path against the reference upsampling and
 * the tables, AVX2 and portable kernels alike. */
START_TEST(test_aug_upsampling_matches_libjpeg_reference)
{
    static const int sizes[][2] = {{5, 3}, {6, 4}, {7, 7}, {17, 9}, {33, 31}, {64, 2}, {70, 5}, {101, 37}};
    static const int shapes[][2] = {{1, 1}, {2, 3}, {3, 5}, {1, 16}, {2, 17}, {5, 33}};
    ycc_tables tab;
    ycc_tables_init(&tab);
    mx_aug_scratch scratch = {0};
    uint64_t seed = 12345;
    for (int sub = 0; sub < 2; sub++) {
        const int hs = 2, vs = sub ? 2 : 1;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            const int w = sizes[si][0], h = sizes[si][1], cw = (w + 1) / 2, ch = (h + vs - 1) / vs;
            uint8_t *Y = malloc((size_t)w * h), *cb = malloc((size_t)cw * ch), *cr = malloc((size_t)cw * ch);
            uint8_t *ucb = malloc((size_t)w * h), *ucr = malloc((size_t)w * h);
            for (int i = 0; i < w * h; i++) Y[i] = (uint8_t)test_rng(&seed);
            for (int i = 0; i < cw * ch; i++) {
                cb[i] = (uint8_t)test_rng(&seed);
                cr[i] = (uint8_t)test_rng(&seed);
            }
            fancy_upsample_ref(cb, cw, ch, vs, w, h, ucb);
            fancy_upsample_ref(cr, cw, ch, vs, w, h, ucr);
            const uint8_t *pl[3] = {Y, cb, cr};
            const int32_t st[3] = {w, cw, cw};
            for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]) + 1; k++) {
                /* the listed shapes that fit, and the whole image */
                int H = k < sizeof(shapes) / sizeof(shapes[0]) ? shapes[k][0] : h;
                int W = k < sizeof(shapes) / sizeof(shapes[0]) ? shapes[k][1] : w;
                if (H > h || W > w) continue;
                float *out = malloc(sizeof(float) * 3 * (size_t)H * W);
                for (int portable = 0; portable < 2; portable++)
                    for (uint64_t key = 0; key < 6; key++) {
                        mx_aug_params p = plain_rgb(H, W, portable);
                        p.rand_crop = p.rand_mirror = true;
                        mx_aug_info info;
                        OK(mx_aug_process_planes(&p, &scratch, pl, st, w, h, hs, vs, key, out, &info));
                        for (int y = 0; y < H; y++)
                            for (int x = 0; x < W; x++) {
                                int ix = info.crop_x + (info.mirrored ? W - 1 - x : x), iy = info.crop_y + y;
                                size_t q = (size_t)iy * w + ix;
                                int yy = Y[q], b = ucb[q], r = ucr[q];
                                uint8_t want[3] = {limit(yy + tab.cr_r[r]),
                                                   limit(yy + (int)((tab.cb_g[b] + tab.cr_g[r]) >> 16)),
                                                   limit(yy + tab.cb_b[b])};
                                for (int c = 0; c < 3; c++)
                                    ck_assert_msg(out[((size_t)c * H + y) * W + x] == (float)want[c],
                                                  "%dx%d %s, sample %dx%d, key %llu, %s: plane %d at (%d, %d): %g, "
                                                  "want %d",
                                                  w, h, vs == 2 ? "4:2:0" : "4:2:2", W, H, (unsigned long long)key,
                                                  portable ? "portable" : "simd", c, x, y,
                                                  out[((size_t)c * H + y) * W + x], want[c]);
                            }
                    }
                free(out);
            }
            free(Y);
            free(cb);
            free(cr);
            free(ucb);
            free(ucr);
        }
    }
    mx_aug_scratch_free(&scratch);
}
END_TEST

/* Real JPEGs (4:4:4, 4:2:2, 4:2:0, baseline and progressive, odd sizes):
 * the fast path gives the bits of decoding to RGB first (lib/image), for
 * both kernels, with mean/std/scale and with random contrast and
 * illumination; JPEGs it does not take (grey for C = 3) still match. */
START_TEST(test_aug_yuv_path_matches_rgb_decode)
{
    static const int sizes[][2] = {{37, 29}, {64, 64}, {33, 18}, {250, 40}, {9, 300}, {101, 37}};
    static const int samps[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_GRAY};
    tjhandle tj = tjInitCompress();
    ck_assert_ptr_nonnull(tj);
    mx_aug_scratch scratch = {0};
    uint64_t seed = 777;
    int planar = 0;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int w = sizes[si][0], h = sizes[si][1];
        uint8_t *img = malloc((size_t)w * h * 3);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    /* saturated gradients (clamping in the conversion) plus noise */
                    int v = (x * 255 / w) * (c == 0) + (y * 255 / h) * (c == 1) + ((x + y) * 7 % 256) * (c == 2);
                    img[((size_t)y * w + x) * 3 + c] = (uint8_t)(v + (int)(test_rng(&seed) % 41) - 20);
                }
        for (size_t sa = 0; sa < sizeof(samps) / sizeof(samps[0]); sa++)
            for (int progressive = 0; progressive < 2; progressive++) {
                unsigned char *jpg = NULL;
                unsigned long jsz = 0;
                /* a handle per image: libjpeg-turbo 2.1 writes a corrupt
                 * baseline JPEG from a handle that did a progressive one */
                tjhandle tjc = tjInitCompress();
                ck_assert_ptr_nonnull(tjc);
                ck_assert_int_eq(tjCompress2(tjc, img, w, 0, h, TJPF_RGB, &jpg, &jsz, samps[sa], 85,
                                             TJFLAG_ACCURATEDCT | (progressive ? TJFLAG_PROGRESSIVE : 0)),
                                 0);
                tjDestroy(tjc);
                float *fast = malloc(sizeof(float) * 3 * (size_t)h * w), *slow = malloc(sizeof(float) * 3 * (size_t)h * w);
                /* variant bit 0: random contrast and illumination; bit 1:
                 * the whole image (every edge row and column) instead of a crop */
                for (int variant = 0; variant < 4; variant++)
                    for (int portable = 0; portable < 2; portable++)
                        for (uint64_t key = 0; key < 5; key++) {
                            const int H = variant & 2 ? h : h > 20 ? 20 : h - 1;
                            const int W = variant & 2 ? w : w > 24 ? 24 : w - 2;
                            mx_aug_params p = {.channels = 3, .height = H, .width = W, .rand_crop = true,
                                               .rand_mirror = true, .scale = 0.5f, .mean = {123.68f, 116.779f, 103.939f},
                                               .std = {58.393f, 57.12f, 57.375f, 1}, .portable = portable};
                            if (variant & 1) p.max_random_contrast = 0.3f, p.max_random_illumination = 20.0f;
                            OK(mx_aug_prepare(&p));
                            /* the reference: RGB decode, then the portable LUT path */
                            mx_aug_params ref = p;
                            ref.portable = true;
                            OK(mx_aug_prepare(&ref));
                            mx_aug_info fi, si2;
                            mx_status fs = mx_aug_process(&p, &scratch, jpg, jsz, key, fast, &fi);
                            ck_assert_msg(fs == MX_OK, "%dx%d samp %d%s %s variant %d key %llu: %s", w, h, samps[sa],
                                          progressive ? " progressive" : "", portable ? "portable" : "simd", variant,
                                          (unsigned long long)key, mx_last_error());
                            OK(mx_aug_process(&ref, NULL, jpg, jsz, key, slow, &si2));
                            ck_assert_msg(!memcmp(fast, slow, sizeof(float) * 3 * (size_t)H * W),
                                          "%dx%d samp %d%s %s variant %d key %llu", w, h, samps[sa],
                                          progressive ? " progressive" : "", portable ? "portable" : "simd", variant,
                                          (unsigned long long)key);
                            ck_assert_int_eq(fi.crop_x, si2.crop_x);
                            ck_assert_int_eq(fi.crop_y, si2.crop_y);
                            ck_assert_int_eq(fi.mirrored, si2.mirrored);
                            ck_assert(!si2.planar);
                            ck_assert_int_eq(fi.planar, samps[sa] != TJSAMP_GRAY && (p.avx2 || portable));
                            planar += fi.planar;
                        }
                free(fast);
                free(slow);
                tjFree(jpg);
            }
        free(img);
    }
    ck_assert_int_gt(planar, 0);
    /* a truncated colour JPEG: the fast path declines, the error is lib/image's */
    unsigned char *jpg = NULL;
    unsigned long jsz = 0;
    uint8_t px3[64 * 48 * 3];
    for (size_t i = 0; i < sizeof(px3); i++) px3[i] = (uint8_t)(i * 31);
    ck_assert_int_eq(tjCompress2(tj, px3, 64, 0, 48, TJPF_RGB, &jpg, &jsz, TJSAMP_420, 90, 0), 0);
    mx_aug_params p = plain_rgb(32, 32, false);
    float out[3 * 32 * 32];
    ck_assert_int_eq(mx_aug_process(&p, &scratch, jpg, jsz / 2, 0, out, NULL), MX_ERR_FORMAT);
    char with[512];
    snprintf(with, sizeof(with), "%s", mx_last_error());
    ck_assert_int_eq(mx_aug_process(&p, NULL, jpg, jsz / 2, 0, out, NULL), MX_ERR_FORMAT);
    ck_assert_str_eq(with, mx_last_error());
    tjFree(jpg);
    tjDestroy(tj);
    mx_aug_scratch_free(&scratch);
}
END_TEST

/* The AVX2 row kernels of the RGB/grey path (de-interleave, mirror,
 * normalise, stream) give the portable LUT path's bits: grey and colour,
 * widths around the 16-pixel step, mirrored or not, fixed and random
 * contrast/illumination, with and without a resize, small samples and
 * streamed large ones. */
START_TEST(test_aug_row_kernels_match_portable)
{
    static const int widths[] = {1, 7, 15, 16, 17, 31, 32, 33, 40};
    for (int c = 1; c <= 3; c += 2)
        for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]) + 1; wi++) {
            const bool big = wi == sizeof(widths) / sizeof(widths[0]); /* 150x152 (x3): streamed */
            const int W = big ? 152 : widths[wi], H = big ? 150 : 9;
            test_img im = make_img((int)wi, W + 5, H + 3, c);
            size_t n;
            uint8_t *png = png_of(&im, &n);
            size_t floats = (size_t)c * H * W;
            /* 64-byte aligned, as batch buffers are: the large case streams */
            size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
            float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes);
            for (int variant = 0; variant < 3; variant++)
                for (uint64_t key = 0; key < 6; key++) {
                    mx_aug_params p[2];
                    for (int portable = 0; portable < 2; portable++) {
                        p[portable] = (mx_aug_params){.channels = c, .height = H, .width = W, .rand_crop = true,
                                                      .rand_mirror = true, .scale = 0.7f,
                                                      .mean = {10.5f, 20.25f, 30.0f, 0}, .std = {3, 5, 7, 1},
                                                      .portable = portable};
                        if (variant == 1) p[portable].max_random_contrast = 0.4f, p[portable].max_random_illumination = 9;
                        if (variant == 2) p[portable].resize = (H + 3) * 2;
                        OK(mx_aug_prepare(&p[portable]));
                    }
                    OK(mx_aug_process(&p[0], NULL, png, n, key, a, NULL));
                    OK(mx_aug_process(&p[1], NULL, png, n, key, b, NULL));
                    ck_assert_msg(!memcmp(a, b, floats * sizeof(float)), "C %d, %dx%d, variant %d, key %llu", c, W, H,
                                  variant, (unsigned long long)key);
                }
            free(a);
            free(b);
            mx_free(png);
            free(im.data);
        }
}
END_TEST

/* ---- end to end: configs/lenet-rec.conf through mxtrain ------------------------------ */

static const char *build_dir(void)
{
    const char *b = getenv("MX_TEST_BUILD");
    return b && *b ? b : "build";
}

START_TEST(test_lenet_rec_trains_above_chance)
{
    const char *dir = getenv("FASHION_MNIST_DIR");
    if (!dir || !*dir) dir = "/usr/share/datasets/fashion-mnist";
    char probe[600];
    snprintf(probe, sizeof(probe), "%s/train-images-idx3-ubyte.gz", dir);
    if (access(probe, R_OK) != 0 || system("python3 -c '' 2>/dev/null") != 0 ||
        access("configs/lenet-rec.conf", R_OK) != 0) {
        fprintf(stderr, "test_lenet_rec_trains_above_chance: SKIPPED (needs python3, Fashion-MNIST in %s and the "
                        "repository root as working directory)\n", dir);
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "scripts/make-fashion-rec.sh --out '%s' --limit 2000 --build '%s' 2>'%s'", tmp,
             build_dir(), T("make.txt"));
    ck_assert_msg(system(cmd) == 0, "make-fashion-rec.sh failed: see %s", T("make.txt"));
    snprintf(cmd, sizeof(cmd),
             "%s/bin/mxtrain configs/lenet-rec.conf train.path_imgrec=%s train.path_imgidx=%s val.path_imgrec=%s "
             "fit.num_epoch=2 fit.model_prefix=%s fit.disp_batches=10 2>'%s' >/dev/null",
             build_dir(), T("fashion-train.rec"), T("fashion-train.idx"), T("fashion-test.rec"), T("lenet"),
             T("train.txt"));
    int st = system(cmd);
    size_t n;
    uint8_t *log = slurp(T("train.txt"), &n);
    log[n] = '\0';
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mxtrain failed:\n%s", (char *)log);
    double acc = -1;
    for (const char *p = (const char *)log; (p = strstr(p, "Validation-accuracy=")); p++)
        acc = atof(p + strlen("Validation-accuracy="));
    fprintf(stderr, "lenet-rec on 2000 Fashion-MNIST JPEGs, 2 epochs: validation accuracy %.4f\n", acc);
    ck_assert_msg(acc > 0.55, "validation accuracy %.4f (chance is 0.10):\n%s", acc, (char *)log);
    free(log);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_imagerecord");
    TCase *t = tcase_create("core");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_aug_generator);
    tcase_add_test(t, test_aug_jpeg_fast_path_matches_lib);
    tcase_add_test(t, test_aug_ycc_every_value_matches_turbojpeg);
    tcase_add_test(t, test_aug_upsampling_matches_libjpeg_reference);
    tcase_add_test(t, test_aug_yuv_path_matches_rgb_decode);
    tcase_add_test(t, test_aug_row_kernels_match_portable);
    tcase_add_test(t, test_centre_crop_rgb_and_grey_exact);
    tcase_add_test(t, test_large_sample_exact);
    tcase_add_test(t, test_resize_cover_and_pad_exact);
    tcase_add_test(t, test_random_crop_mirror_in_range_and_reproducible);
    tcase_add_test(t, test_threads_give_identical_batches);
    tcase_add_test(t, test_partitions_cover_every_record_once);
    tcase_add_test(t, test_shuffle_is_a_permutation_per_epoch);
    tcase_add_test(t, test_round_batch_pad);
    tcase_add_test(t, test_bad_records_skipped_and_reported);
    tcase_add_test(t, test_corrupt_and_truncated_files);
    tcase_add_test(t, test_unaligned_garbage_and_stale_idx);
    tcase_add_test(t, test_multi_label_and_imglist);
    tcase_add_test(t, test_mean_img_computed_saved_and_loaded);
    tcase_add_test(t, test_parameter_and_file_errors);
    tcase_add_test(t, test_free_mid_epoch);
    tcase_add_test(t, test_set_log_through_io_registry);
    tcase_add_test(t, test_mxtrain_shows_skip_warnings);
    suite_add_tcase(s, t);
    TCase *e = tcase_create("end_to_end");
    tcase_add_checked_fixture(e, setup, teardown);
    tcase_set_timeout(e, 600);
    tcase_add_test(e, test_lenet_rec_trains_above_chance);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
