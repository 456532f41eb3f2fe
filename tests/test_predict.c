/*
 * test_predict.c - lib/predict: preprocessing against hand-computed
 * pixels, top-k ordering, the output formats, input detection and the
 * readers (with corrupt records, bad list lines, truncated idx files), and
 * a predictor on a small hand-built network checked against a float64
 * forward pass computed here.
 */
#include "predict/predict.h"

#include "image/image.h"
#include "recordio/imrec.h"
#include "recordio/recordio.h"
#include "checkpoint/checkpoint.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmp[256];

static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/mx-predict-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmp, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static char *slurp(FILE *f, size_t *len)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

/* A w x h image with pixel (x, y, c) = (x * 7 + y * 13 + c * 50) % 256. */
static mx_image pattern(int w, int h, int channels)
{
    mx_image img;
    ck_assert_int_eq(mx_image_create(w, h, channels, &img), MX_OK);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < channels; c++) img.data[((size_t)y * w + x) * channels + c] = (uint8_t)((x * 7 + y * 13 + c * 50) % 256);
    return img;
}

static uint8_t *png_of(const mx_image *img, size_t *size)
{
    uint8_t *png;
    ck_assert_int_eq(mx_image_encode_png(img, 6, &png, size), MX_OK);
    return png;
}

/* ---------------------------------------------------------------- preprocessing */

START_TEST(preproc_shapes)
{
    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(3, 32, 24)), MX_OK);
    ck_assert_int_eq(p.channels, 3);
    ck_assert_int_eq(p.height, 32);
    ck_assert_int_eq(p.width, 24);
    ck_assert_int_eq(mx_predict_preproc_size(&p), 3 * 32 * 24);
    ck_assert_float_eq(p.std[2], 1.0f);
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(784)), MX_OK);
    ck_assert_int_eq(p.channels, 1);
    ck_assert_int_eq(p.height, 28);
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(3072)), MX_OK);
    ck_assert_int_eq(p.channels, 3);
    ck_assert_int_eq(p.width, 32);
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1000)), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "(1000)"));
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(2, 8, 8)), MX_ERR_INVALID);
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 2, 8, 8)), MX_ERR_INVALID);
}
END_TEST

START_TEST(preproc_centre_crop_and_normalise)
{
    /* A 10x8 RGB PNG (lossless) cropped to 6x4: offsets x = 2, y = 2. */
    mx_image img = pattern(10, 8, 3);
    size_t size;
    uint8_t *png = png_of(&img, &size);
    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(3, 4, 6)), MX_OK);
    float mean[3] = {10, 20, 30}, sd[3] = {2, 4, 8};
    memcpy(p.mean, mean, sizeof(mean));
    memcpy(p.std, sd, sizeof(sd));
    p.scale = 0.5f;
    float out[3 * 4 * 6];
    ck_assert_int_eq(mx_predict_preproc_image(&p, png, size, out), MX_OK);
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 6; x++) {
                double px = img.data[((size_t)(y + 2) * 10 + (x + 2)) * 3 + c];
                double want = (px - mean[c]) * 0.5 / sd[c];
                ck_assert_msg(fabs(out[(c * 4 + y) * 6 + x] - want) < 1e-6, "c%d y%d x%d: %g vs %g", c, y, x,
                              out[(c * 4 + y) * 6 + x], want);
            }
    /* Grey: colour PNG -> libpng's grey; checked for the crop only. */
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 8, 10)), MX_OK);
    float grey[80];
    ck_assert_int_eq(mx_predict_preproc_image(&p, png, size, grey), MX_OK);
    /* Not an image: a clear error. */
    ck_assert_int_eq(mx_predict_preproc_image(&p, "hello", 5, grey), MX_ERR_FORMAT);
    free(png);
    mx_image_free(&img);
}
END_TEST

START_TEST(preproc_resize_and_upscale)
{
    /* resize 16 on a 40x20 image: 32x16, then the centre 16x16 crop. */
    mx_image img = pattern(40, 20, 1), small = {0}, crop = {0};
    size_t size;
    uint8_t *png = png_of(&img, &size);
    ck_assert_int_eq(mx_image_resize(&img, 32, 16, &small), MX_OK);
    ck_assert_int_eq(mx_image_crop(&small, 8, 0, 16, 16, &crop), MX_OK);
    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 16, 16)), MX_OK);
    p.resize = 16;
    float out[256];
    ck_assert_int_eq(mx_predict_preproc_image(&p, png, size, out), MX_OK);
    for (int i = 0; i < 256; i++) ck_assert_float_eq(out[i], (float)crop.data[i]);
    /* No resize, an image smaller than the input: scaled up to 64x32, cropped to 32x32. */
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 32, 32)), MX_OK);
    float big[32 * 32];
    ck_assert_int_eq(mx_predict_preproc_image(&p, png, size, big), MX_OK);
    mx_image up = {0}, upc = {0};
    ck_assert_int_eq(mx_image_resize(&img, 64, 32, &up), MX_OK);
    ck_assert_int_eq(mx_image_crop(&up, 16, 0, 32, 32, &upc), MX_OK);
    for (int i = 0; i < 32 * 32; i++) ck_assert_float_eq(big[i], (float)upc.data[i]);
    mx_image_free(&up);
    mx_image_free(&upc);
    mx_image_free(&small);
    mx_image_free(&crop);
    mx_image_free(&img);
    free(png);
}
END_TEST

START_TEST(preproc_idx_pixels_are_byte_over_256)
{
    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 2, 3)), MX_OK);
    uint8_t px[6] = {0, 1, 128, 200, 255, 7};
    float out[6];
    ck_assert_int_eq(mx_predict_preproc_pixels(&p, px, 2, 3, out), MX_OK);
    for (int i = 0; i < 6; i++) ck_assert_msg(out[i] == (float)px[i] * (1.0f / 256.0f), "%d", i);
    ck_assert_int_eq(mx_predict_preproc_pixels(&p, px, 3, 2, out), MX_ERR_INVALID);
    p.scale = 1;
    p.mean[0] = 1;
    ck_assert_int_eq(mx_predict_preproc_pixels(&p, px, 2, 3, out), MX_OK);
    ck_assert_float_eq(out[4], 254.0f);
}
END_TEST

/* ---------------------------------------------------------------- results */

START_TEST(top_k_order_ties_and_nan)
{
    float v[6] = {0.1f, 0.4f, NAN, 0.4f, 0.05f, 0.4f};
    int64_t idx[6];
    mx_predict_top_k(v, 6, 6, idx);
    int64_t want[6] = {1, 3, 5, 0, 4, 2};
    for (int i = 0; i < 6; i++) ck_assert_int_eq(idx[i], want[i]);
    mx_predict_top_k(v, 6, 2, idx);
    ck_assert_int_eq(idx[0], 1);
    ck_assert_int_eq(idx[1], 3);
}
END_TEST

START_TEST(writer_formats)
{
    /* top-k CSV with indices */
    FILE *f = tmpfile();
    mx_predict_writer *w;
    mx_predict_writer_opts o = {.out = f, .top_k = 2};
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(3), &w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_begin(w), MX_OK);
    float p[3] = {0.2f, 0.5f, 0.3f};
    ck_assert_int_eq(mx_predict_writer_row(w, "a,b.jpg", p), MX_OK);
    ck_assert_int_eq(mx_predict_writer_row(w, "say \"hi\"", p), MX_OK);
    ck_assert_int_eq(mx_predict_writer_end(w), MX_OK);
    mx_predict_writer_free(w);
    char *text = slurp(f, NULL);
    ck_assert_str_eq(text, "id,top1,prob1,top2,prob2\n\"a,b.jpg\",1,0.5,2,0.3\n\"say \"\"hi\"\"\",1,0.5,2,0.3\n");
    free(text);
    fclose(f);

    /* with a synset */
    const char *names[3] = {"cat", "dog, large", "bird"};
    f = tmpfile();
    o = (mx_predict_writer_opts){.out = f, .top_k = 1, .synset = names, .n_synset = 3};
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(3), &w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_begin(w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_row(w, "7", p), MX_OK);
    ck_assert_int_eq(mx_predict_writer_end(w), MX_OK);
    mx_predict_writer_free(w);
    text = slurp(f, NULL);
    ck_assert_str_eq(text, "id,name1,prob1\n7,\"dog, large\",0.5\n");
    free(text);
    fclose(f);
    o.n_synset = 2;
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(3), &w), MX_ERR_INVALID);
    o = (mx_predict_writer_opts){.out = stdout, .top_k = 4};
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(3), &w), MX_ERR_INVALID);

    /* feature CSV: %.9g reads back as the same float */
    f = tmpfile();
    o = (mx_predict_writer_opts){.out = f, .features = true};
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(1, 3), &w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_begin(w), MX_OK);
    float v[3] = {1.0f / 3.0f, -2.5e-12f, 16777217.0f};
    ck_assert_int_eq(mx_predict_writer_row(w, "x", v), MX_OK);
    ck_assert_int_eq(mx_predict_writer_end(w), MX_OK);
    mx_predict_writer_free(w);
    text = slurp(f, NULL);
    ck_assert_int_eq(strncmp(text, "id,v0,v1,v2\nx,", 14), 0);
    char *s = text + 14;
    for (int i = 0; i < 3; i++) {
        char *end;
        ck_assert_msg(strtof(s, &end) == v[i], "value %d: %s", i, s);
        s = end + 1;
    }
    free(text);
    fclose(f);

    /* raw: the shape line, then little-endian float32; ids aside */
    f = tmpfile();
    FILE *ids = tmpfile();
    o = (mx_predict_writer_opts){.out = f, .features = true, .format = MX_PREDICT_FORMAT_RAW, .ids_file = ids};
    ck_assert_int_eq(mx_predict_writer_create(&o, MX_SHAPE(3, 1), &w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_begin(w), MX_OK);
    ck_assert_int_eq(mx_predict_writer_row(w, "first", v), MX_OK);
    ck_assert_int_eq(mx_predict_writer_row(w, "second", p), MX_OK);
    ck_assert_int_eq(mx_predict_writer_end(w), MX_OK);
    mx_predict_writer_free(w);
    size_t len;
    text = slurp(f, &len);
    const char *hdr = "MXPREDICT-RAW float32 le shape=(3,1)\n";
    ck_assert_uint_eq(len, strlen(hdr) + 24);
    ck_assert_int_eq(memcmp(text, hdr, strlen(hdr)), 0);
    const uint8_t *b = (const uint8_t *)text + strlen(hdr);
    for (int i = 0; i < 6; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                     (uint32_t)b[4 * i + 3] << 24;
        float x;
        memcpy(&x, &u, 4);
        ck_assert(x == (i < 3 ? v[i] : p[i - 3]));
    }
    free(text);
    text = slurp(ids, NULL);
    ck_assert_str_eq(text, "first\nsecond\n");
    free(text);
    fclose(ids);
    fclose(f);
}
END_TEST

START_TEST(synset_lines)
{
    write_bytes(tpath("synset.txt"), "n01 tench, Tinca tinca\r\nn02 goldfish\n\n", 38);
    char **names;
    int n;
    ck_assert_int_eq(mx_predict_synset_load(tpath("synset.txt"), &names, &n), MX_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(names[0], "n01 tench, Tinca tinca");
    ck_assert_str_eq(names[1], "n02 goldfish");
    mx_predict_synset_free(names, n);
    ck_assert_int_eq(mx_predict_synset_load(tpath("none.txt"), &names, &n), MX_ERR_IO);
    write_bytes(tpath("empty.txt"), "", 0);
    ck_assert_int_eq(mx_predict_synset_load(tpath("empty.txt"), &names, &n), MX_ERR_FORMAT);
}
END_TEST

/* ---------------------------------------------------------------- inputs */

/* An idx3 file of n rows x cols images, pixel (i, j) = (i * 31 + j) % 256;
 * gzip'd when gz. */
static void write_idx(const char *path, uint32_t n, uint32_t rows, uint32_t cols, bool gz, size_t cut)
{
    size_t total = 16 + (size_t)n * rows * cols;
    uint8_t *buf = malloc(total);
    uint32_t hdr[4] = {0x803, n, rows, cols};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) buf[4 * i + k] = (uint8_t)(hdr[i] >> (24 - 8 * k));
    for (size_t i = 0; i < (size_t)n; i++)
        for (size_t j = 0; j < (size_t)rows * cols; j++) buf[16 + i * rows * cols + j] = (uint8_t)((i * 31 + j) % 256);
    total -= cut;
    if (gz) {
        gzFile g = gzopen(path, "wb");
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(gzwrite(g, buf, (unsigned)total), (int)total);
        ck_assert_int_eq(gzclose(g), Z_OK);
    } else {
        write_bytes(path, buf, total);
    }
    free(buf);
}

START_TEST(input_detection)
{
    mx_predict_input_kind k;
    ck_assert_int_eq(mx_predict_input_detect("-", &k), MX_OK);
    ck_assert_int_eq(k, MX_PREDICT_INPUT_PATHS);
    mx_image img = pattern(4, 4, 3);
    size_t size;
    uint8_t *png = png_of(&img, &size);
    write_bytes(tpath("a.dat"), png, size); /* by content, not name */
    ck_assert_int_eq(mx_predict_input_detect(tpath("a.dat"), &k), MX_OK);
    ck_assert_int_eq(k, MX_PREDICT_INPUT_IMAGE);
    write_idx(tpath("x-idx3-ubyte.gz"), 2, 3, 3, true, 0);
    ck_assert_int_eq(mx_predict_input_detect(tpath("x-idx3-ubyte.gz"), &k), MX_OK);
    ck_assert_int_eq(k, MX_PREDICT_INPUT_IDX);
    write_idx(tpath("x-idx3-ubyte"), 2, 3, 3, false, 0);
    ck_assert_int_eq(mx_predict_input_detect(tpath("x-idx3-ubyte"), &k), MX_OK);
    ck_assert_int_eq(k, MX_PREDICT_INPUT_IDX);
    uint8_t lab[9] = {0, 0, 8, 1, 0, 0, 0, 1, 3};
    write_bytes(tpath("labels"), lab, 9);
    ck_assert_int_eq(mx_predict_input_detect(tpath("labels"), &k), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "idx1 label file"));
    write_bytes(tpath("l.lst"), "0\t1.0\ta.dat\n", 12);
    ck_assert_int_eq(mx_predict_input_detect(tpath("l.lst"), &k), MX_OK);
    ck_assert_int_eq(k, MX_PREDICT_INPUT_LST);
    write_bytes(tpath("t.idx"), "0\t0\n", 4);
    ck_assert_int_eq(mx_predict_input_detect(tpath("t.idx"), &k), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "pass the .rec"));
    write_bytes(tpath("e.jpg"), "", 0);
    ck_assert_int_eq(mx_predict_input_detect(tpath("e.jpg"), &k), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "is empty"));
    ck_assert_int_eq(mx_predict_input_detect(tpath("missing.jpg"), &k), MX_ERR_IO);
    ck_assert_int_eq(mx_predict_input_detect(tmp, &k), MX_ERR_IO);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "directory"));
    free(png);
    mx_image_free(&img);
}
END_TEST

START_TEST(rec_reader_skips_bad_records)
{
    mx_recordio_writer *rw;
    ck_assert_int_eq(mx_recordio_writer_open(tpath("x.rec"), &rw), MX_OK);
    for (int i = 0; i < 4; i++) {
        mx_image img = pattern(6 + i, 6, 3);
        size_t size;
        uint8_t *png = png_of(&img, &size), *payload;
        size_t psize;
        mx_irheader h = {.flag = 0, .label = (float)i, .id = (uint64_t)(100 + i)};
        if (i == 1) size = 20; /* a cut PNG: this sample fails */
        ck_assert_int_eq(mx_imrec_pack(&h, NULL, png, size, &payload, &psize), MX_OK);
        ck_assert_int_eq(mx_recordio_writer_write(rw, payload, psize, NULL), MX_OK);
        free(payload);
        free(png);
        mx_image_free(&img);
    }
    ck_assert_int_eq(mx_recordio_writer_close(rw), MX_OK);
    /* Corrupt the framing of the third record: its magic. */
    FILE *f = fopen(tpath("x.rec"), "r+b");
    uint8_t word[4];
    long off = 0;
    for (int r = 0; r < 2; r++) {
        fseek(f, off + 4, SEEK_SET);
        ck_assert_int_eq(fread(word, 1, 4, f), 4);
        uint32_t len = ((uint32_t)word[0] | (uint32_t)word[1] << 8 | (uint32_t)word[2] << 16 | (uint32_t)word[3] << 24) &
                       ((1u << 29) - 1);
        off += 8 + ((len + 3) & ~3u);
    }
    fseek(f, off, SEEK_SET);
    fputc(0x55, f);
    fclose(f);

    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(3, 6, 6)), MX_OK);
    mx_predict_reader_opts o = {.preproc = &p};
    mx_predict_reader *r;
    ck_assert_int_eq(mx_predict_reader_open(tpath("x.rec"), &o, &r), MX_OK);
    float out[108];
    mx_predict_item it;
    const char *ids[8];
    int ok[8], n = 0;
    char saved[8][512];
    for (;;) {
        ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
        if (!it.got) break;
        ck_assert_int_lt(n, 8);
        snprintf(saved[n], sizeof(saved[n]), "%s|%s", it.id, it.ok ? "" : it.why);
        ids[n] = saved[n];
        ok[n++] = it.ok;
    }
    mx_predict_reader_free(r);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ok[0], 1);
    ck_assert_str_eq(ids[0], "100|");
    ck_assert_int_eq(ok[1], 0);
    ck_assert_msg(strstr(ids[1], "x.rec: id 101|"), "%s", ids[1]);
    ck_assert_int_eq(ok[2], 0); /* the broken framing, skipped to the next record */
    ck_assert_msg(strstr(ids[2], "skipped"), "%s", ids[2]);
    ck_assert_int_eq(ok[3], 1);
    ck_assert_str_eq(ids[3], "103|");
}
END_TEST

START_TEST(lst_and_idx_readers)
{
    mkdir(tpath("imgs"), 0755);
    mx_image img = pattern(5, 5, 1);
    size_t size;
    uint8_t *png = png_of(&img, &size);
    write_bytes(tpath("imgs/a.png"), png, size);
    const char *lst = "0\t1.000000\ta.png\nnot a line\n2\t0.000000\tmissing.png\n3\t2.0\ta.png\n";
    write_bytes(tpath("imgs/list.lst"), lst, strlen(lst));
    mx_predict_preproc p;
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 5, 5)), MX_OK);
    mx_predict_reader_opts o = {.preproc = &p};
    mx_predict_reader *r;
    ck_assert_int_eq(mx_predict_reader_open(tpath("imgs/list.lst"), &o, &r), MX_OK);
    float out[25];
    mx_predict_item it;
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && it.ok);
    ck_assert_str_eq(it.id, "a.png");
    ck_assert_float_eq(out[6], (float)img.data[6]);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && !it.ok);
    ck_assert_msg(strstr(it.id, "list.lst:2"), "%s", it.id);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && !it.ok);
    ck_assert_msg(strstr(it.id, "imgs/missing.png"), "%s", it.id);
    ck_assert_msg(strstr(it.why, "cannot open"), "%s", it.why);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && it.ok);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(!it.got);
    mx_predict_reader_free(r);

    /* idx: ids are indices; a truncated file stops with an error after the whole images. */
    write_idx(tpath("t-idx3.gz"), 3, 5, 5, true, 10);
    ck_assert_int_eq(mx_predict_reader_open(tpath("t-idx3.gz"), &o, &r), MX_OK);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert_str_eq(it.id, "0");
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert_str_eq(it.id, "1");
    for (int j = 0; j < 25; j++) ck_assert(out[j] == (float)((31 + j) % 256) / 256.0f);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "truncated"), "%s", mx_last_error());
    mx_predict_reader_free(r);
    /* Wrong size for the input. */
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 4, 4)), MX_OK);
    ck_assert_int_eq(mx_predict_reader_open(tpath("t-idx3.gz"), &o, &r), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "5x5"));

    /* Paths from a stream, blank lines skipped. */
    ck_assert_int_eq(mx_predict_preproc_init(&p, MX_SHAPE(1, 5, 5)), MX_OK);
    FILE *paths = tmpfile();
    fprintf(paths, "%s\n\n%s\r\n", tpath("imgs/a.png"), tpath("nope.png"));
    rewind(paths);
    o.paths = paths;
    ck_assert_int_eq(mx_predict_reader_open("-", &o, &r), MX_OK);
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && it.ok);
    ck_assert_str_eq(it.id, tpath("imgs/a.png"));
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(it.got && !it.ok);
    ck_assert_str_eq(it.id, tpath("nope.png"));
    ck_assert_int_eq(mx_predict_reader_next(r, out, &it), MX_OK);
    ck_assert(!it.got);
    mx_predict_reader_free(r);
    fclose(paths);
    free(png);
    mx_image_free(&img);
}
END_TEST

/* ---------------------------------------------------------------- predictor */

static const float W[3][4] = {{0.5f, -1.0f, 0.25f, 2.0f}, {-0.5f, 0.75f, 1.5f, -2.0f}, {1.0f, 0.0f, -0.25f, 0.5f}};
static const float B[3] = {0.1f, -0.2f, 0.3f};

/* data (batch,1,2,2) -> [Dropout(p=0.5, mode=dropout)] -> fc (3) ->
 * SoftmaxOutput, saved as PREFIX epoch 3. */
static void save_model_dropout(const char *prefix, bool with_shape, bool with_bias, const char *dropout)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t d, fc, sm;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &d), MX_OK);
    if (with_shape) ck_assert_int_eq(mx_graph_set_attr(g, d, "__shape__", "(1, 1, 2, 2)"), MX_OK);
    const char *k[] = {"num_hidden"}, *v[] = {"3"};
    mx_entry x = {d, 0};
    if (dropout) {
        const char *dk[] = {"p", "mode"}, *dv[] = {"0.5", dropout};
        uint32_t drop;
        ck_assert_int_eq(mx_graph_add_op(g, "Dropout", "drop", dk, dv, 2, &x, 1, NULL, 0, &drop), MX_OK);
        x = (mx_entry){drop, 0};
    }
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc", k, v, 1, &x, 1, NULL, 0, &fc), MX_OK);
    x = (mx_entry){fc, 0};
    ck_assert_int_eq(mx_graph_add_op(g, "SoftmaxOutput", "softmax", NULL, NULL, 0, &x, 1, NULL, 0, &sm), MX_OK);
    mx_entry h = {sm, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    mx_ndarray *a[2];
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3, 4), MX_FLOAT32, mx_cpu(), &a[0]), MX_OK);
    ck_assert_int_eq(mx_ndarray_from_host(a[0], W, sizeof(W)), MX_OK);
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(3), MX_FLOAT32, mx_cpu(), &a[1]), MX_OK);
    ck_assert_int_eq(mx_ndarray_from_host(a[1], B, sizeof(B)), MX_OK);
    const char *names[] = {"fc_weight", "fc_bias"}, *aux_names[1] = {NULL};
    mx_named_arrays args = {with_bias ? 2 : 1, names, a}, aux = {0, aux_names, NULL};
    ck_assert_int_eq(mx_checkpoint_save(prefix, 3, g, args, aux), MX_OK);
    mx_ndarray_free(a[0]);
    mx_ndarray_free(a[1]);
    mx_graph_free(g);
    mx_runtime_free(rt);
}

static void save_model(const char *prefix, bool with_shape, bool with_bias)
{
    save_model_dropout(prefix, with_shape, with_bias, NULL);
}

static void reference(const float *x, double *logits, double *prob)
{
    double m = -INFINITY, sum = 0;
    for (int o = 0; o < 3; o++) {
        logits[o] = B[o];
        for (int i = 0; i < 4; i++) logits[o] += (double)W[o][i] * x[i];
        if (logits[o] > m) m = logits[o];
    }
    for (int o = 0; o < 3; o++) sum += exp(logits[o] - m);
    for (int o = 0; o < 3; o++) prob[o] = exp(logits[o] - m) / sum;
}

/* Predicts 2 samples through PREFIX's logits layer. */
static void predict_logits(const char *prefix, const float *in, float *out)
{
    mx_predictor *p;
    ck_assert_int_eq(mx_predictor_load(prefix, -1, &p), MX_OK);
    mx_predictor_bind_opts bo = {.sample = MX_SHAPE(1, 2, 2), .batch_size = 2, .layer = "fc", .ctx = mx_cpu()};
    ck_assert_msg(mx_predictor_bind(p, &bo) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_predictor_push(p, in), MX_OK);
    ck_assert_int_eq(mx_predictor_pull(p, out), MX_OK);
    mx_predictor_free(p);
}

/* As MXNet: Dropout is the identity in prediction; mode=always still
 * drops (x * 0 or x * 2), the same way in every run. */
START_TEST(predictor_runs_dropout_as_mxnet)
{
    const float in[8] = {0.1f, 0.2f, 0.3f, 0.4f, -1.0f, 0.5f, 2.0f, 0.25f};
    float out[6], again[6];
    save_model_dropout(tpath("train"), true, true, "training");
    predict_logits(tpath("train"), in, out);
    for (int s = 0; s < 2; s++) {
        double lg[3], pr[3];
        reference(in + 4 * s, lg, pr);
        for (int o = 0; o < 3; o++) ck_assert_msg(fabs(out[3 * s + o] - lg[o]) < 1e-6, "%g vs %g", out[3 * s + o], lg[o]);
    }
    save_model_dropout(tpath("always"), true, true, "always");
    predict_logits(tpath("always"), in, out);
    predict_logits(tpath("always"), in, again);
    ck_assert(memcmp(out, again, sizeof(out)) == 0);
    /* Some mask of zeros and twos over the 8 inputs gives these logits. */
    int n_match = 0, n_identity = 0;
    for (int mask = 0; mask < 256; mask++) {
        float dropped[8];
        for (int i = 0; i < 8; i++) dropped[i] = in[i] * ((mask >> i) & 1 ? 2.0f : 0.0f);
        bool match = true;
        for (int s = 0; s < 2; s++) {
            double lg[3], pr[3];
            reference(dropped + 4 * s, lg, pr);
            for (int o = 0; o < 3; o++) match = match && fabs(out[3 * s + o] - lg[o]) < 1e-5;
        }
        n_match += match;
    }
    for (int s = 0; s < 2; s++) {
        double lg[3], pr[3];
        reference(in + 4 * s, lg, pr);
        for (int o = 0; o < 3; o++) n_identity += fabs(out[3 * s + o] - lg[o]) < 1e-5;
    }
    ck_assert_int_ge(n_match, 1);
    ck_assert_int_lt(n_identity, 6);
}
END_TEST

/* data (2, 3, 5, 5) -> conv1 (4 filters 3x3 pad 1, no bias) -> bn1 ->
 * relu -> conv2 (3 filters 1x1, bias) -> bn2 (fix_gamma, eps 1e-3) ->
 * flatten -> fc (5) -> SoftmaxOutput, random parameters and statistics. */
static void save_model_bn(const char *prefix)
{
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t id;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &id), MX_OK);
    mx_entry x = {id, 0};
    const char *c1k[] = {"num_filter", "kernel", "pad", "no_bias"}, *c1v[] = {"4", "(3,3)", "(1,1)", "True"};
    ck_assert_int_eq(mx_graph_add_op(g, "Convolution", "conv1", c1k, c1v, 4, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *b1k[] = {"fix_gamma", "eps"}, *b1v[] = {"False", "2e-5"};
    ck_assert_int_eq(mx_graph_add_op(g, "BatchNorm", "bn1", b1k, b1v, 2, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *ak[] = {"act_type"}, *av[] = {"relu"};
    ck_assert_int_eq(mx_graph_add_op(g, "Activation", "relu1", ak, av, 1, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *c2k[] = {"num_filter", "kernel"}, *c2v[] = {"3", "(1,1)"};
    ck_assert_int_eq(mx_graph_add_op(g, "Convolution", "conv2", c2k, c2v, 2, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *b2k[] = {"fix_gamma", "eps"}, *b2v[] = {"True", "1e-3"};
    ck_assert_int_eq(mx_graph_add_op(g, "BatchNorm", "bn2", b2k, b2v, 2, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    ck_assert_int_eq(mx_graph_add_op(g, "Flatten", "flat", NULL, NULL, 0, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *fk[] = {"num_hidden"}, *fv[] = {"5"};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc", fk, fv, 1, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    ck_assert_int_eq(mx_graph_add_op(g, "SoftmaxOutput", "softmax", NULL, NULL, 0, &x, 1, NULL, 0, &id), MX_OK);
    mx_entry h = {id, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    const struct {
        const char *name;
        mx_shape shape;
        double lo, hi;
    } params[] = {
        {"conv1_weight", MX_SHAPE(4, 3, 3, 3), -0.5, 0.5}, {"bn1_gamma", MX_SHAPE(4), 0.5, 1.5},
        {"bn1_beta", MX_SHAPE(4), -0.5, 0.5},              {"conv2_weight", MX_SHAPE(3, 4, 1, 1), -1, 1},
        {"conv2_bias", MX_SHAPE(3), -0.5, 0.5},            {"bn2_gamma", MX_SHAPE(3), 0.5, 1.5},
        {"bn2_beta", MX_SHAPE(3), -0.5, 0.5},              {"fc_weight", MX_SHAPE(5, 75), -0.3, 0.3},
        {"fc_bias", MX_SHAPE(5), -0.1, 0.1},               {"bn1_moving_mean", MX_SHAPE(4), -0.5, 0.5},
        {"bn1_moving_var", MX_SHAPE(4), 0.2, 2.0},         {"bn2_moving_mean", MX_SHAPE(3), -1, 1},
        {"bn2_moving_var", MX_SHAPE(3), 0.2, 2.0},
    };
    enum { N_PARAMS = 13, N_ARGS = 9 };
    mx_ndarray *a[N_PARAMS];
    const char *names[N_PARAMS];
    uint64_t seed = 77;
    for (int i = 0; i < N_PARAMS; i++) {
        int64_t n = mx_shape_size(&params[i].shape);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            v[j] = (float)(params[i].lo + (params[i].hi - params[i].lo) * (double)(seed >> 11) * 0x1.0p-53);
        }
        ck_assert_int_eq(mx_ndarray_create(rt, params[i].shape, MX_FLOAT32, mx_cpu(), &a[i]), MX_OK);
        ck_assert_int_eq(mx_ndarray_from_host(a[i], v, sizeof(float) * (size_t)n), MX_OK);
        names[i] = params[i].name;
        free(v);
    }
    mx_named_arrays args = {N_ARGS, names, a}, aux = {N_PARAMS - N_ARGS, names + N_ARGS, a + N_ARGS};
    ck_assert_int_eq(mx_checkpoint_save(prefix, 1, g, args, aux), MX_OK);
    for (int i = 0; i < N_PARAMS; i++) mx_ndarray_free(a[i]);
    mx_graph_free(g);
    mx_runtime_free(rt);
}

/* One batch of 2 through `layer` (NULL: the output); returns the number
 * of folded BatchNorm layers and fills out (the layer's n floats). */
static int predict_bn(const char *prefix, const char *layer, bool keep, const float *in, float *out, size_t n)
{
    mx_predictor *p;
    ck_assert_int_eq(mx_predictor_load(prefix, -1, &p), MX_OK);
    mx_predictor_bind_opts bo = {.sample = MX_SHAPE(3, 5, 5), .batch_size = 2, .layer = layer, .ctx = mx_cpu(),
                                 .keep_batchnorm = keep};
    ck_assert_msg(mx_predictor_bind(p, &bo) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_predictor_push(p, in), MX_OK);
    ck_assert_int_eq(mx_predictor_pull(p, out), MX_OK);
    (void)n;
    int folded = mx_predictor_folded(p);
    mx_predictor_free(p);
    return folded;
}

/* BatchNorm folded into the convolution before it gives the unfolded
 * network's outputs (float rounding apart), and never folds a layer the
 * caller asks for. */
START_TEST(predictor_folds_batchnorm)
{
    const char *prefix = tpath("bnnet");
    save_model_bn(prefix);
    float in[2 * 75], a[2 * 100], b[2 * 100];
    for (int i = 0; i < 2 * 75; i++) in[i] = (float)sin(0.37 * i) * 2.0f;
    static const struct {
        const char *layer;
        int folds, n;
    } cases[] = {{NULL, 2, 2 * 5}, {"fc", 2, 2 * 5}, {"bn2", 1, 2 * 75}, {"conv2", 1, 2 * 75},
                 {"bn1_output", 1, 2 * 100}, {"conv1", 1, 2 * 100}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ck_assert_int_eq(predict_bn(prefix, cases[c].layer, true, in, a, (size_t)cases[c].n), 0);
        ck_assert_int_eq(predict_bn(prefix, cases[c].layer, false, in, b, (size_t)cases[c].n), cases[c].folds);
        double scale = 0;
        for (int i = 0; i < cases[c].n; i++) scale = fmax(scale, fabs(a[i]));
        for (int i = 0; i < cases[c].n; i++)
            ck_assert_msg(fabs((double)a[i] - b[i]) <= 1e-5 * fmax(1.0, scale), "layer %s [%d]: folded %.9g, kept %.9g",
                          cases[c].layer ? cases[c].layer : "(output)", i, b[i], a[i]);
    }
}
END_TEST

START_TEST(predictor_matches_reference_forward)
{
    const char *prefix = tpath("net");
    save_model(prefix, true, true);
    mx_predictor *p;
    ck_assert_int_eq(mx_predictor_load(prefix, -1, &p), MX_OK);
    ck_assert_int_eq(mx_predictor_epoch(p), 3);
    ck_assert_str_eq(mx_predictor_data_name(p), "data");
    mx_shape hint;
    ck_assert(mx_predictor_shape_hint(p, &hint));
    mx_shape want = MX_SHAPE(1, 2, 2);
    ck_assert(mx_shape_equal(&hint, &want));
    mx_predictor_bind_opts bo = {.sample = hint, .batch_size = 2, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_OK);
    ck_assert_str_eq(mx_predictor_output_name(p), "softmax_output");
    mx_shape os = mx_predictor_output_shape(p);
    ck_assert_int_eq(os.ndim, 1);
    ck_assert_int_eq(os.dims[0], 3);
    float in[8] = {0.1f, 0.2f, 0.3f, 0.4f, -1.0f, 0.5f, 2.0f, 0.0f}, out[6];
    ck_assert_int_eq(mx_predictor_push(p, in), MX_OK);
    ck_assert_int_eq(mx_predictor_pull(p, out), MX_OK);
    for (int s = 0; s < 2; s++) {
        double lg[3], pr[3];
        reference(in + 4 * s, lg, pr);
        for (int o = 0; o < 3; o++) ck_assert_msg(fabs(out[3 * s + o] - pr[o]) < 1e-6, "%g vs %g", out[3 * s + o], pr[o]);
    }
    mx_memory_plan_stats full, layer;
    size_t full_out, layer_out;
    mx_predictor_memory(p, &full, &full_out);
    /* The inner layer: logits, and only the graph up to it. */
    bo.layer = "fc";
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_OK);
    ck_assert_str_eq(mx_predictor_output_name(p), "fc_output");
    ck_assert_int_eq(mx_predictor_push(p, in), MX_OK);
    ck_assert_int_eq(mx_predictor_pull(p, out), MX_OK);
    for (int s = 0; s < 2; s++) {
        double lg[3], pr[3];
        reference(in + 4 * s, lg, pr);
        for (int o = 0; o < 3; o++) ck_assert(fabs(out[3 * s + o] - lg[o]) < 1e-6);
    }
    mx_predictor_memory(p, &layer, &layer_out);
    ck_assert_uint_lt(layer.naive, full.naive);
    ck_assert_uint_eq(layer_out, full_out);
    /* Errors: unknown layer (with a suggestion), a shape the network cannot take. */
    bo.layer = "fcc";
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "did you mean 'fc'"), "%s", mx_last_error());
    bo.layer = NULL;
    bo.sample = MX_SHAPE(3, 2, 2);
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "fc"), "%s", mx_last_error());
    ck_assert_int_eq(mx_predictor_push(p, in), MX_ERR_INVALID); /* not bound */
    mx_predictor_free(p);

    /* No __shape__: no hint. A parameter missing from the file. */
    save_model(tpath("bare"), false, false);
    ck_assert_int_eq(mx_predictor_load(tpath("bare"), 3, &p), MX_OK);
    ck_assert(!mx_predictor_shape_hint(p, &hint));
    bo = (mx_predictor_bind_opts){.sample = MX_SHAPE(4), .batch_size = 1, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "no arg:fc_bias"), "%s", mx_last_error());
    mx_predictor_free(p);
    ck_assert_int_eq(mx_predictor_load(tpath("bare"), 7, &p), MX_ERR_IO);
    ck_assert_int_eq(mx_predictor_load(tpath("nothing"), -1, &p), MX_ERR_IO);
}
END_TEST

typedef struct failures {
    int n;
    char what[8][512];
} failures;

static void collect(void *user, const char *what, const char *why)
{
    failures *f = user;
    (void)why;
    if (f->n < 8) snprintf(f->what[f->n], sizeof(f->what[0]), "%s", what);
    f->n++;
}

START_TEST(run_keeps_order_and_drops_padding)
{
    const char *prefix = tpath("net");
    save_model(prefix, true, true);
    write_idx(tpath("six-idx3"), 6, 2, 2, false, 0);
    mx_predictor *p;
    ck_assert_int_eq(mx_predictor_load(prefix, -1, &p), MX_OK);
    mx_predictor_bind_opts bo = {.sample = MX_SHAPE(1, 2, 2), .batch_size = 4, .ctx = mx_cpu()};
    ck_assert_int_eq(mx_predictor_bind(p, &bo), MX_OK);
    mx_predict_preproc pre;
    ck_assert_int_eq(mx_predict_preproc_init(&pre, bo.sample), MX_OK);
    FILE *f = tmpfile();
    mx_predict_writer *w;
    mx_predict_writer_opts wo = {.out = f, .features = true};
    ck_assert_int_eq(mx_predict_writer_create(&wo, mx_predictor_output_shape(p), &w), MX_OK);
    const char *inputs[] = {tpath("six-idx3"), tpath("missing.rec"), tpath("six-idx3")};
    failures fl = {0};
    mx_predict_run_opts ro = {.inputs = inputs, .n_inputs = 3, .reader = {.preproc = &pre}, .on_failure = collect,
                              .user = &fl};
    mx_predict_stats st;
    ck_assert_int_eq(mx_predict_run(p, w, &ro, &st), MX_OK);
    ck_assert_int_eq(st.samples, 12);
    ck_assert_int_eq(st.failed, 1);
    ck_assert_int_eq(st.batches, 3);
    ck_assert_int_eq(fl.n, 1);
    ck_assert_str_eq(fl.what[0], tpath("missing.rec"));
    mx_predict_writer_free(w);
    char *text = slurp(f, NULL);
    fclose(f);
    /* 12 rows: ids 0..5 twice, each the softmax of the reference. */
    char *line = strtok(text, "\n");
    ck_assert_str_eq(line, "id,v0,v1,v2");
    for (int r = 0; r < 12; r++) {
        line = strtok(NULL, "\n");
        ck_assert_ptr_nonnull(line);
        char *end;
        ck_assert_int_eq(strtol(line, &end, 10), r % 6);
        float x[4];
        for (int j = 0; j < 4; j++) x[j] = (float)(((r % 6) * 31 + j) % 256) / 256.0f;
        double lg[3], pr[3];
        reference(x, lg, pr);
        for (int o = 0; o < 3; o++) {
            double v = strtod(end + 1, &end);
            ck_assert_msg(fabs(v - pr[o]) < 1e-6, "row %d: %g vs %g", r, v, pr[o]);
        }
    }
    ck_assert_ptr_null(strtok(NULL, "\n"));
    free(text);
    mx_predictor_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("predict");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, preproc_shapes);
    tcase_add_test(tc, preproc_centre_crop_and_normalise);
    tcase_add_test(tc, preproc_resize_and_upscale);
    tcase_add_test(tc, preproc_idx_pixels_are_byte_over_256);
    tcase_add_test(tc, top_k_order_ties_and_nan);
    tcase_add_test(tc, writer_formats);
    tcase_add_test(tc, synset_lines);
    tcase_add_test(tc, input_detection);
    tcase_add_test(tc, rec_reader_skips_bad_records);
    tcase_add_test(tc, lst_and_idx_readers);
    tcase_add_test(tc, predictor_matches_reference_forward);
    tcase_add_test(tc, predictor_folds_batchnorm);
    tcase_add_test(tc, predictor_runs_dropout_as_mxnet);
    tcase_add_test(tc, run_keeps_order_and_drops_padding);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
