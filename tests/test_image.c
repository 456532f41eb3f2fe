/*
 * test_image.c - lib/image: JPEG/PNG round trips, decode colour modes,
 * OpenCV-compatible bilinear resize (against OpenCV 4.8's own output for
 * small cases and against an exact float64 bilinear reference computed
 * here), im2rec's shorter-edge sizes and centre crop, EXIF orientation,
 * channel conversion, and rejection of truncated, corrupt, garbage and
 * oversized input with an error (never a crash: run under ASan too).
 */
#include "image/image.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define OK(expr)                                                                 \
    do {                                                                         \
        mx_status ok_st_ = (expr);                                               \
        ck_assert_msg(ok_st_ == MX_OK, "%s failed: %s", #expr, mx_last_error()); \
    } while (0)

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static uint8_t px(const mx_image *im, int x, int y, int c)
{
    return im->data[((size_t)y * (size_t)im->width + (size_t)x) * (size_t)im->channels + (size_t)c];
}

/* A smooth image (sums of low-frequency waves): JPEG-friendly. */
static mx_image smooth_image(int w, int h, int c)
{
    mx_image im;
    OK(mx_image_create(w, h, c, &im));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                double v = 128 + 60 * sin(0.11 * x + 1.3 * k) + 50 * cos(0.07 * y + 0.4 * k) +
                           10 * sin(0.05 * (x + y));
                im.data[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return im;
}

static mx_image noise_image(int w, int h, int c)
{
    mx_image im;
    OK(mx_image_create(w, h, c, &im));
    for (size_t i = 0; i < mx_image_bytes(&im); i++) im.data[i] = (uint8_t)rnd();
    return im;
}

static mx_image from_bytes(int w, int h, int c, const uint8_t *v)
{
    mx_image im;
    OK(mx_image_create(w, h, c, &im));
    memcpy(im.data, v, mx_image_bytes(&im));
    return im;
}

/* ---- PNG ------------------------------------------------------------------- */

START_TEST(test_png_round_trip_exact)
{
    static const int sizes[][2] = {{1, 1}, {7, 3}, {64, 48}, {33, 129}};
    for (size_t s = 0; s < 4; s++) {
        for (int c = 1; c <= 4; c++) {
            if (c == 2) continue;
            mx_image im = noise_image(sizes[s][0], sizes[s][1], c), out;
            uint8_t *png;
            size_t n;
            OK(mx_image_encode_png(&im, (int)(s * 3) % 10, &png, &n));
            ck_assert_int_eq(mx_image_sniff(png, n), MX_IMAGE_FORMAT_PNG);
            mx_image_info info;
            OK(mx_image_probe(png, n, &info));
            ck_assert_int_eq(info.width, im.width);
            ck_assert_int_eq(info.height, im.height);
            ck_assert_int_eq(info.channels, c);
            OK(mx_image_decode(png, n, MX_IMAGE_UNCHANGED, &out));
            ck_assert_int_eq(out.width, im.width);
            ck_assert_int_eq(out.height, im.height);
            ck_assert_int_eq(out.channels, c);
            ck_assert_msg(memcmp(out.data, im.data, mx_image_bytes(&im)) == 0,
                          "PNG %dx%dx%d did not round-trip exactly", im.width, im.height, c);
            mx_image_free(&out);
            mx_free(png);
            mx_image_free(&im);
        }
    }
}
END_TEST

START_TEST(test_png_colour_modes)
{
    /* RGBA: COLOR drops alpha, GRAY gives 0.299 R + 0.587 G + 0.114 B */
    mx_image im = noise_image(19, 11, 4), col, gray, un;
    uint8_t *png;
    size_t n;
    OK(mx_image_encode_png(&im, 6, &png, &n));
    OK(mx_image_decode(png, n, MX_IMAGE_COLOR, &col));
    OK(mx_image_decode(png, n, MX_IMAGE_GRAY, &gray));
    OK(mx_image_decode(png, n, MX_IMAGE_UNCHANGED, &un));
    ck_assert_int_eq(col.channels, 3);
    ck_assert_int_eq(gray.channels, 1);
    ck_assert_int_eq(un.channels, 4);
    for (int y = 0; y < im.height; y++)
        for (int x = 0; x < im.width; x++) {
            for (int k = 0; k < 3; k++) ck_assert_uint_eq(px(&col, x, y, k), px(&im, x, y, k));
            double ref = 0.299 * px(&im, x, y, 0) + 0.587 * px(&im, x, y, 1) + 0.114 * px(&im, x, y, 2);
            ck_assert_msg(fabs(px(&gray, x, y, 0) - ref) <= 1.0, "gray %d vs %.2f at %d,%d",
                          px(&gray, x, y, 0), ref, x, y);
        }
    mx_image_free(&col);
    mx_image_free(&gray);
    mx_image_free(&un);
    mx_free(png);
    mx_image_free(&im);

    /* gray PNG: COLOR replicates, UNCHANGED keeps one channel */
    im = noise_image(5, 9, 1);
    OK(mx_image_encode_png(&im, 9, &png, &n));
    OK(mx_image_decode(png, n, MX_IMAGE_COLOR, &col));
    OK(mx_image_decode(png, n, MX_IMAGE_UNCHANGED, &un));
    ck_assert_int_eq(col.channels, 3);
    ck_assert_int_eq(un.channels, 1);
    for (int y = 0; y < im.height; y++)
        for (int x = 0; x < im.width; x++)
            for (int k = 0; k < 3; k++) ck_assert_uint_eq(px(&col, x, y, k), px(&im, x, y, 0));
    mx_image_free(&col);
    mx_image_free(&un);
    mx_free(png);
    mx_image_free(&im);
}
END_TEST

/* ---- JPEG ------------------------------------------------------------------ */

static double mean_abs_diff(const mx_image *a, const mx_image *b, int *max_out)
{
    ck_assert_int_eq(a->width, b->width);
    ck_assert_int_eq(a->height, b->height);
    ck_assert_int_eq(a->channels, b->channels);
    double s = 0;
    int mx = 0;
    for (size_t i = 0; i < mx_image_bytes(a); i++) {
        int d = abs((int)a->data[i] - (int)b->data[i]);
        s += d;
        if (d > mx) mx = d;
    }
    if (max_out) *max_out = mx;
    return s / (double)mx_image_bytes(a);
}

START_TEST(test_jpeg_round_trip_tolerance)
{
    /* Tolerance: mean |error| < 2 and max < 32 at quality 95 on a smooth
     * image (gray and RGB); quality 30 must be clearly worse but < 6. */
    for (int c = 1; c <= 3; c += 2) {
        mx_image im = smooth_image(96, 64, c), out;
        uint8_t *jpg;
        size_t n;
        OK(mx_image_encode_jpeg(&im, 95, &jpg, &n));
        ck_assert_int_eq(mx_image_sniff(jpg, n), MX_IMAGE_FORMAT_JPEG);
        OK(mx_image_decode(jpg, n, MX_IMAGE_UNCHANGED, &out));
        ck_assert_int_eq(out.channels, c);
        int mx;
        double mad95 = mean_abs_diff(&im, &out, &mx);
        ck_assert_msg(mad95 < 2.0 && mx < 32, "q95 %d ch: mean %.3f max %d", c, mad95, mx);
        mx_image_free(&out);
        mx_free(jpg);
        OK(mx_image_encode_jpeg(&im, 30, &jpg, &n));
        OK(mx_image_decode(jpg, n, MX_IMAGE_UNCHANGED, &out));
        double mad30 = mean_abs_diff(&im, &out, NULL);
        ck_assert_msg(mad30 > mad95 && mad30 < 6.0, "q30 %d ch: mean %.3f (q95 %.3f)", c, mad30, mad95);
        mx_image_free(&out);
        mx_free(jpg);
        mx_image_free(&im);
    }
}
END_TEST

START_TEST(test_jpeg_colour_modes)
{
    mx_image im = smooth_image(40, 24, 3), col, gray, un, gcol;
    uint8_t *jpg;
    size_t n;
    OK(mx_image_encode_jpeg(&im, 95, &jpg, &n));
    OK(mx_image_decode(jpg, n, MX_IMAGE_COLOR, &col));
    OK(mx_image_decode(jpg, n, MX_IMAGE_GRAY, &gray));
    OK(mx_image_decode(jpg, n, MX_IMAGE_UNCHANGED, &un));
    ck_assert_int_eq(col.channels, 3);
    ck_assert_int_eq(un.channels, 3);
    ck_assert_int_eq(gray.channels, 1);
    ck_assert_int_eq(memcmp(col.data, un.data, mx_image_bytes(&col)), 0);
    /* GRAY is the JPEG's luma: close to the original's BT.601 luma */
    double s = 0;
    for (int y = 0; y < im.height; y++)
        for (int x = 0; x < im.width; x++)
            s += fabs(px(&gray, x, y, 0) - (0.299 * px(&im, x, y, 0) + 0.587 * px(&im, x, y, 1) +
                                            0.114 * px(&im, x, y, 2)));
    ck_assert_msg(s / (im.width * im.height) < 1.5, "luma mean error %.3f", s / (im.width * im.height));
    mx_free(jpg);
    /* a gray JPEG: UNCHANGED 1 channel, COLOR three equal channels */
    OK(mx_image_encode_jpeg(&gray, 90, &jpg, &n));
    OK(mx_image_decode(jpg, n, MX_IMAGE_COLOR, &gcol));
    mx_image g1;
    OK(mx_image_decode(jpg, n, MX_IMAGE_UNCHANGED, &g1));
    ck_assert_int_eq(g1.channels, 1);
    ck_assert_int_eq(gcol.channels, 3);
    for (int y = 0; y < g1.height; y++)
        for (int x = 0; x < g1.width; x++)
            for (int k = 0; k < 3; k++) ck_assert_uint_eq(px(&gcol, x, y, k), px(&g1, x, y, 0));
    /* RGBA input encodes as RGB (alpha dropped), like OpenCV */
    mx_image rgba, back;
    OK(mx_image_convert(&im, 4, &rgba));
    mx_free(jpg);
    OK(mx_image_encode_jpeg(&rgba, 95, &jpg, &n));
    OK(mx_image_decode(jpg, n, MX_IMAGE_UNCHANGED, &back));
    ck_assert_int_eq(back.channels, 3);
    ck_assert_int_eq(memcmp(back.data, un.data, mx_image_bytes(&un)), 0);
    mx_image_free(&back);
    mx_image_free(&rgba);
    mx_image_free(&g1);
    mx_image_free(&gcol);
    mx_free(jpg);
    mx_image_free(&col);
    mx_image_free(&gray);
    mx_image_free(&un);
    mx_image_free(&im);
}
END_TEST

START_TEST(test_encode_bad_arguments)
{
    mx_image im = smooth_image(8, 8, 3), empty = {0};
    uint8_t *out = (uint8_t *)1;
    size_t n = 7;
    ck_assert_int_eq(mx_image_encode_jpeg(&im, 0, &out, &n), MX_ERR_INVALID);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(mx_image_encode_jpeg(&im, 101, &out, &n), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_encode_png(&im, 10, &out, &n), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_encode_png(&im, -1, &out, &n), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_encode_png(&empty, 3, &out, &n), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_create(0, 5, 3, &empty), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_create(5, 5, 2, &empty), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_create(40000, 40000, 1, &empty), MX_ERR_UNSUPPORTED);
    mx_image_free(&im);
}
END_TEST

/* ---- rejection of bad data --------------------------------------------------- */

START_TEST(test_truncated_every_cut)
{
    mx_image im = smooth_image(24, 16, 3);
    for (int fmt = 0; fmt < 2; fmt++) {
        uint8_t *buf;
        size_t n;
        if (fmt == 0) OK(mx_image_encode_jpeg(&im, 90, &buf, &n));
        else OK(mx_image_encode_png(&im, 6, &buf, &n));
        mx_image out;
        OK(mx_image_decode(buf, n, MX_IMAGE_COLOR, &out));
        mx_image_free(&out);
        for (size_t cut = 0; cut < n; cut++) {
            /* a heap copy of exactly `cut` bytes so ASan sees overreads */
            uint8_t *part = malloc(cut ? cut : 1);
            ck_assert_ptr_nonnull(part);
            memcpy(part, buf, cut);
            out = (mx_image){0};
            mx_status st = mx_image_decode(part, cut, MX_IMAGE_COLOR, &out);
            ck_assert_msg(st == MX_ERR_FORMAT, "%s cut at %zu of %zu: status %d (%s)",
                          fmt ? "PNG" : "JPEG", cut, n, st, mx_last_error());
            ck_assert_ptr_null(out.data);
            ck_assert_str_ne(mx_last_error(), "");
            free(part);
        }
        mx_free(buf);
    }
    mx_image_free(&im);
}
END_TEST

START_TEST(test_truncated_messages)
{
    mx_image im = smooth_image(32, 32, 3), out;
    uint8_t *jpg;
    size_t n;
    OK(mx_image_encode_jpeg(&im, 90, &jpg, &n));
    ck_assert_int_eq(mx_image_decode(jpg, n / 2, MX_IMAGE_COLOR, &out), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "Premature end of JPEG file") != NULL, "%s", mx_last_error());
    ck_assert_int_eq(mx_image_decode(jpg, 0, MX_IMAGE_COLOR, &out), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "empty") != NULL, "%s", mx_last_error());
    static const uint8_t garbage[] = "GIF89a this is not a JPEG or a PNG";
    ck_assert_int_eq(mx_image_decode(garbage, sizeof(garbage), MX_IMAGE_COLOR, &out), MX_ERR_FORMAT);
    ck_assert_msg(strstr(mx_last_error(), "not a JPEG or PNG") != NULL, "%s", mx_last_error());
    mx_free(jpg);
    mx_image_free(&im);
}
END_TEST

START_TEST(test_corrupt_bytes_no_crash)
{
    /* Random byte changes after the headers: decoding either fails with a
     * status or returns an image of the declared size; never crashes. */
    mx_image im = smooth_image(40, 30, 3);
    for (int fmt = 0; fmt < 2; fmt++) {
        uint8_t *buf;
        size_t n;
        if (fmt == 0) OK(mx_image_encode_jpeg(&im, 85, &buf, &n));
        else OK(mx_image_encode_png(&im, 6, &buf, &n));
        uint8_t *copy = malloc(n);
        int failures = 0;
        for (int trial = 0; trial < 300; trial++) {
            memcpy(copy, buf, n);
            int flips = 1 + (int)(rnd() % 4);
            for (int f = 0; f < flips; f++) copy[20 + rnd() % (n - 20)] = (uint8_t)rnd();
            mx_image out = {0};
            mx_status st = mx_image_decode(copy, n, MX_IMAGE_UNCHANGED, &out);
            if (st == MX_OK) {
                ck_assert_int_gt(out.width, 0);
                ck_assert_int_le((int64_t)out.width * out.height, 1 << 20);
                mx_image_free(&out);
            } else {
                ck_assert_ptr_null(out.data);
                failures++;
            }
        }
        ck_assert_int_gt(failures, 0); /* corruption is noticed */
        free(copy);
        mx_free(buf);
    }
    /* pure garbage with valid magic numbers */
    for (int trial = 0; trial < 200; trial++) {
        uint8_t g[512];
        for (size_t i = 0; i < sizeof(g); i++) g[i] = (uint8_t)rnd();
        if (trial % 2) {
            g[0] = 0xFF, g[1] = 0xD8, g[2] = 0xFF;
        } else {
            memcpy(g, "\x89PNG\r\n\x1a\n", 8);
        }
        mx_image out = {0};
        ck_assert_int_ne(mx_image_decode(g, sizeof(g), MX_IMAGE_COLOR, &out), MX_OK);
        ck_assert_ptr_null(out.data);
    }
    mx_image_free(&im);
}
END_TEST

/* Sets a JPEG's frame size (SOF0 at its first 0xFFC0). */
static void jpeg_patch_size(uint8_t *j, size_t n, uint16_t w, uint16_t h)
{
    for (size_t i = 2; i + 9 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            j[i + 5] = (uint8_t)(h >> 8), j[i + 6] = (uint8_t)h;
            j[i + 7] = (uint8_t)(w >> 8), j[i + 8] = (uint8_t)w;
            return;
        }
    ck_abort_msg("no SOF0 marker");
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

START_TEST(test_oversized_rejected_before_allocation)
{
    mx_image im = smooth_image(16, 16, 3), out = {0};
    uint8_t *jpg, *png;
    size_t nj, np;
    OK(mx_image_encode_jpeg(&im, 90, &jpg, &nj));
    jpeg_patch_size(jpg, nj, 65000, 65000);
    ck_assert_int_eq(mx_image_decode(jpg, nj, MX_IMAGE_COLOR, &out), MX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mx_last_error(), "65000x65000") != NULL, "%s", mx_last_error());
    mx_image_info info;
    OK(mx_image_probe(jpg, nj, &info)); /* probing only reads the header */
    ck_assert_int_eq(info.width, 65000);

    OK(mx_image_encode_png(&im, 6, &png, &np));
    /* IHDR: width at 16, height at 20, CRC over type+data at 29 */
    const uint8_t big[8] = {0, 0, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF};
    memcpy(png + 16, big, 8);
    uint32_t crc = crc32_of(png + 12, 17);
    png[29] = (uint8_t)(crc >> 24), png[30] = (uint8_t)(crc >> 16);
    png[31] = (uint8_t)(crc >> 8), png[32] = (uint8_t)crc;
    ck_assert_int_eq(mx_image_decode(png, np, MX_IMAGE_COLOR, &out), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_null(out.data);
    mx_free(png);

    /* Within the pixel limit but far beyond what the file can hold: a
     * header of 16000x16000 RGB (768 MB) in a file of a few hundred bytes
     * is found truncated before any pixel memory is allocated. */
    OK(mx_image_encode_png(&im, 6, &png, &np));
    const uint8_t wide[8] = {0, 0, 0x3E, 0x80, 0, 0, 0x3E, 0x80}; /* 16000 x 16000 */
    memcpy(png + 16, wide, 8);
    crc = crc32_of(png + 12, 17);
    png[29] = (uint8_t)(crc >> 24), png[30] = (uint8_t)(crc >> 16);
    png[31] = (uint8_t)(crc >> 8), png[32] = (uint8_t)crc;
    mx_image_decode_opts roomy = {.color = MX_IMAGE_COLOR, .max_pixels = 16000ull * 16000};
    ck_assert_int_eq(mx_image_decode_ex(png, np, &roomy, &out), MX_ERR_FORMAT);
    char want[200];
    snprintf(want, sizeof(want), "its header declares 16000x16000 pixels (768000000 bytes of pixel data) but the file has "
             "%zu bytes", np);
    ck_assert_msg(strstr(mx_last_error(), want) != NULL, "%s", mx_last_error());
    ck_assert_ptr_null(out.data);
    mx_free(png);

    /* a caller limit below the real size */
    OK(mx_image_encode_png(&im, 6, &png, &np));
    mx_image_decode_opts o = {.color = MX_IMAGE_COLOR, .max_pixels = 255};
    ck_assert_int_eq(mx_image_decode_ex(png, np, &o, &out), MX_ERR_UNSUPPORTED);
    o.max_pixels = 256;
    OK(mx_image_decode_ex(png, np, &o, &out));
    mx_image_free(&out);
    mx_free(png);
    mx_free(jpg);
    mx_image_free(&im);
}
END_TEST

/* ---- resize ----------------------------------------------------------------- */

/* OpenCV 4.8.1 cv2.resize(src, (w, h)) of this 5x4 gray image. */
static const uint8_t CV_SRC[20] = {0, 11, 22, 33, 44, 37, 53, 69, 85, 101,
                                   74, 95, 116, 137, 158, 111, 137, 163, 189, 215};
static const uint8_t CV_7x3[21] = {6, 13, 21, 30, 38, 47, 53, 56, 66, 79, 93,
                                   106, 119, 130, 105, 119, 137, 155, 173, 191, 205};
static const uint8_t CV_3x2[6] = {23, 46, 68, 100, 140, 178};
static const uint8_t CV_9x9[81] = {
    0,   4,   10,  16,  22,  28,  34,  40,  44,  6,   10,  17,  23,  30,  36,  43,  49,
    53,  23,  27,  35,  43,  51,  58,  66,  74,  79,  39,  44,  53,  63,  71,  81,  90,
    99,  104, 56,  62,  72,  82,  93,  103, 113, 123, 130, 72,  79,  90,  102, 113, 125,
    136, 148, 155, 88,  96,  109, 121, 134, 147, 160, 172, 180, 105, 113, 127, 141, 155,
    169, 183, 197, 205, 111, 119, 134, 149, 163, 177, 192, 206, 215};
static const uint8_t CV_2x7[14] = {8, 36, 23, 55, 46, 85, 69, 116, 93, 146, 116, 176, 130, 195};

START_TEST(test_resize_matches_opencv)
{
    mx_image src = from_bytes(5, 4, 1, CV_SRC);
    struct {
        int w, h;
        const uint8_t *ref;
    } cases[] = {{7, 3, CV_7x3}, {3, 2, CV_3x2}, {9, 9, CV_9x9}, {2, 7, CV_2x7}};
    for (size_t i = 0; i < 4; i++) {
        mx_image dst;
        OK(mx_image_resize(&src, cases[i].w, cases[i].h, &dst));
        for (int k = 0; k < cases[i].w * cases[i].h; k++)
            ck_assert_msg(dst.data[k] == cases[i].ref[k], "%dx%d pixel %d: %d, OpenCV %d", cases[i].w,
                          cases[i].h, k, dst.data[k], cases[i].ref[k]);
        mx_image_free(&dst);
    }
    /* 2 -> 4 columns by hand: x = -0.25 (edge), 0.25, 0.75, 1.25 (edge) */
    const uint8_t two[2] = {0, 255};
    mx_image s2 = from_bytes(2, 1, 1, two), d2;
    OK(mx_image_resize(&s2, 4, 1, &d2));
    ck_assert_uint_eq(d2.data[0], 0);
    ck_assert_uint_eq(d2.data[1], 64);  /* 63.75 */
    ck_assert_uint_eq(d2.data[2], 191); /* 191.25 */
    ck_assert_uint_eq(d2.data[3], 255);
    mx_image_free(&d2);
    mx_image_free(&s2);
    mx_image_free(&src);
}
END_TEST

/* Exact bilinear with OpenCV's geometry, in float64. */
static double ref_axis(int d, int src, int dst, int *i0, int *i1)
{
    double x = (d + 0.5) * ((double)src / dst) - 0.5;
    int s = (int)floor(x);
    double f = x - s;
    if (s < 0) s = 0, f = 0;
    if (s >= src - 1) s = src - 1, f = 0;
    *i0 = s;
    *i1 = s + 1 < src ? s + 1 : s;
    return f;
}

START_TEST(test_resize_against_float64_reference)
{
    static const int cases[][4] = {{28, 28, 56, 56}, {28, 28, 14, 14}, {100, 80, 37, 29},
                                   {17, 13, 40, 17}, {1, 9, 5, 4},     {9, 1, 3, 3},
                                   {64, 48, 64, 20}, {31, 57, 73, 11}, {300, 7, 299, 8}};
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        for (int c = 1; c <= 4; c++) {
            if (c == 2) continue;
            int sw = cases[t][0], sh = cases[t][1], dw = cases[t][2], dh = cases[t][3];
            mx_image src = (t % 2) ? noise_image(sw, sh, c) : smooth_image(sw, sh, c), dst;
            OK(mx_image_resize(&src, dw, dh, &dst));
            ck_assert_int_eq(dst.width, dw);
            ck_assert_int_eq(dst.height, dh);
            ck_assert_int_eq(dst.channels, c);
            double sum = 0;
            for (int y = 0; y < dh; y++) {
                /* rows: OpenCV clamps the row indices but keeps the weight
                 * (the same value as clamping the coordinate) */
                double ry = (y + 0.5) * ((double)sh / dh) - 0.5;
                double fy = ry - floor(ry);
                int sy = (int)floor(ry);
                int y0 = sy < 0 ? 0 : sy > sh - 1 ? sh - 1 : sy;
                int y1 = sy + 1 < 0 ? 0 : sy + 1 > sh - 1 ? sh - 1 : sy + 1;
                for (int x = 0; x < dw; x++) {
                    int x0, x1;
                    double fx = ref_axis(x, sw, dw, &x0, &x1);
                    for (int k = 0; k < c; k++) {
                        double top = (1 - fx) * px(&src, x0, y0, k) + fx * px(&src, x1, y0, k);
                        double bot = (1 - fx) * px(&src, x0, y1, k) + fx * px(&src, x1, y1, k);
                        double ref = (1 - fy) * top + fy * bot;
                        double d = fabs(px(&dst, x, y, k) - ref);
                        sum += d;
                        ck_assert_msg(d <= 1.0, "%dx%d->%dx%d c%d at (%d,%d,%d): %d vs %.3f", sw, sh,
                                      dw, dh, c, x, y, k, px(&dst, x, y, k), ref);
                    }
                }
            }
            ck_assert_msg(sum / (double)mx_image_bytes(&dst) < 0.6, "mean error %.3f",
                          sum / (double)mx_image_bytes(&dst));
            mx_image_free(&dst);
            mx_image_free(&src);
        }
    }
}
END_TEST

START_TEST(test_resize_same_size_and_errors)
{
    mx_image src = noise_image(13, 7, 3), dst, bad = {0};
    OK(mx_image_resize(&src, 13, 7, &dst));
    ck_assert_int_eq(memcmp(src.data, dst.data, mx_image_bytes(&src)), 0);
    mx_image_free(&dst);
    ck_assert_int_eq(mx_image_resize(&src, 0, 5, &dst), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_resize(&bad, 5, 5, &dst), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_resize(&src, 60000, 60000, &dst), MX_ERR_UNSUPPORTED);
    mx_image_free(&src);
}
END_TEST

/* ---- im2rec geometry -------------------------------------------------------- */

START_TEST(test_shorter_edge_sizes)
{
    /* im2rec.py: h > w -> (N, h*N//w) else (w*N//h, N), as (width, height) */
    static const int cases[][5] = {
        {640, 480, 256, 341, 256}, {480, 640, 256, 256, 341}, {100, 100, 32, 32, 32},
        {28, 28, 32, 32, 32},      {1000, 3, 10, 3333, 10},  {3, 1000, 10, 10, 3333},
        {500, 333, 224, 336, 224}, {333, 500, 224, 224, 336}, {7, 5, 7, 9, 7},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t w, h;
        OK(mx_image_shorter_edge_size(cases[i][0], cases[i][1], cases[i][2], &w, &h));
        ck_assert_msg(w == cases[i][3] && h == cases[i][4], "%dx%d N=%d: %dx%d, want %dx%d",
                      cases[i][0], cases[i][1], cases[i][2], w, h, cases[i][3], cases[i][4]);
    }
    int32_t w, h;
    ck_assert_int_eq(mx_image_shorter_edge_size(10, 10, 0, &w, &h), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_shorter_edge_size(1, 1000, 100, &w, &h), MX_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_center_crop)
{
    /* wide 5x3: margin (5-3)/2 = 1 column; tall 3x6: margin 1 row; values
     * encode their (x, y) so the crop position is checked exactly */
    mx_image wide, tall, out;
    OK(mx_image_create(5, 3, 1, &wide));
    OK(mx_image_create(3, 6, 1, &tall));
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++) wide.data[y * 5 + x] = (uint8_t)(10 * y + x);
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 3; x++) tall.data[y * 3 + x] = (uint8_t)(10 * y + x);
    OK(mx_image_center_square(&wide, &out));
    ck_assert_int_eq(out.width, 3);
    ck_assert_int_eq(out.height, 3);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++) ck_assert_uint_eq(px(&out, x, y, 0), 10 * y + x + 1);
    mx_image_free(&out);
    OK(mx_image_center_square(&tall, &out));
    ck_assert_int_eq(out.width, 3);
    ck_assert_int_eq(out.height, 3);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++) ck_assert_uint_eq(px(&out, x, y, 0), 10 * (y + 1) + x);
    mx_image_free(&out);
    ck_assert_int_eq(mx_image_crop(&wide, 3, 0, 3, 3, &out), MX_ERR_INVALID);
    ck_assert_int_eq(mx_image_crop(&wide, -1, 0, 2, 2, &out), MX_ERR_INVALID);
    OK(mx_image_crop(&wide, 4, 2, 1, 1, &out));
    ck_assert_uint_eq(out.data[0], 24);
    mx_image_free(&out);
    mx_image_free(&wide);
    mx_image_free(&tall);
}
END_TEST

/* ---- orientation, conversion ------------------------------------------------- */

START_TEST(test_orient_all)
{
    /* 3 wide, 2 high:  a b c / d e f  (values 1..6) */
    const uint8_t v[6] = {1, 2, 3, 4, 5, 6};
    mx_image im = from_bytes(3, 2, 1, v);
    static const uint8_t want[9][6] = {
        {0},
        {1, 2, 3, 4, 5, 6}, /* 1 */
        {3, 2, 1, 6, 5, 4}, /* 2 flip left-right */
        {6, 5, 4, 3, 2, 1}, /* 3 rotate 180 */
        {4, 5, 6, 1, 2, 3}, /* 4 flip top-bottom */
        {1, 4, 2, 5, 3, 6}, /* 5 transpose: 2 wide, 3 high */
        {4, 1, 5, 2, 6, 3}, /* 6 rotate 90 clockwise */
        {6, 3, 5, 2, 4, 1}, /* 7 transverse */
        {3, 6, 2, 5, 1, 4}, /* 8 rotate 90 counter-clockwise */
    };
    for (int o = 1; o <= 8; o++) {
        mx_image out;
        OK(mx_image_orient(&im, o, &out));
        ck_assert_int_eq(out.width, o >= 5 ? 2 : 3);
        ck_assert_int_eq(out.height, o >= 5 ? 3 : 2);
        ck_assert_msg(memcmp(out.data, want[o], 6) == 0, "orientation %d: %d %d %d %d %d %d", o,
                      out.data[0], out.data[1], out.data[2], out.data[3], out.data[4], out.data[5]);
        mx_image_free(&out);
    }
    mx_image out;
    ck_assert_int_eq(mx_image_orient(&im, 9, &out), MX_ERR_INVALID);
    mx_image_free(&im);
}
END_TEST

/* JPEG bytes with an APP1 EXIF block (orientation o) inserted after SOI. */
static uint8_t *with_exif(const uint8_t *jpg, size_t n, int o, int little, size_t *out_n)
{
    uint8_t tiff[26];
    size_t k = 0;
#define P16(v) (little ? (tiff[k++] = (uint8_t)(v), tiff[k++] = (uint8_t)((v) >> 8)) \
                       : (tiff[k++] = (uint8_t)((v) >> 8), tiff[k++] = (uint8_t)(v)))
#define P32(v) (little ? (P16((v) & 0xFFFF), P16((v) >> 16)) : (P16((v) >> 16), P16((v) & 0xFFFF)))
    tiff[k++] = little ? 'I' : 'M';
    tiff[k++] = little ? 'I' : 'M';
    P16(42);
    P32(8u);
    P16(1);      /* one entry */
    P16(0x0112); /* orientation */
    P16(3);      /* SHORT */
    P32(1u);
    P16((unsigned)o);
    P16(0);
    P32(0u); /* no next IFD */
#undef P16
#undef P32
    size_t seg = 2 + 6 + k;
    uint8_t *b = malloc(n + 2 + seg);
    memcpy(b, jpg, 2);
    b[2] = 0xFF, b[3] = 0xE1, b[4] = (uint8_t)(seg >> 8), b[5] = (uint8_t)seg;
    memcpy(b + 6, "Exif\0\0", 6);
    memcpy(b + 12, tiff, k);
    memcpy(b + 12 + k, jpg + 2, n - 2);
    *out_n = n + 2 + seg;
    return b;
}

START_TEST(test_jpeg_exif_orientation)
{
    mx_image im = smooth_image(30, 20, 3);
    uint8_t *jpg;
    size_t n;
    OK(mx_image_encode_jpeg(&im, 95, &jpg, &n));
    mx_image plain;
    OK(mx_image_decode(jpg, n, MX_IMAGE_COLOR, &plain));
    for (int little = 0; little < 2; little++)
        for (int o = 1; o <= 8; o++) {
            size_t en;
            uint8_t *e = with_exif(jpg, n, o, little, &en);
            ck_assert_int_eq(mx_image_jpeg_exif_orientation(e, en), o);
            mx_image_info info;
            OK(mx_image_probe(e, en, &info));
            ck_assert_int_eq(info.orientation, o);
            mx_image col, un, want;
            OK(mx_image_decode(e, en, MX_IMAGE_COLOR, &col));
            OK(mx_image_decode(e, en, MX_IMAGE_UNCHANGED, &un));
            OK(mx_image_orient(&plain, o, &want));
            ck_assert_int_eq(col.width, want.width);
            ck_assert_int_eq(col.height, want.height);
            ck_assert_int_eq(memcmp(col.data, want.data, mx_image_bytes(&want)), 0);
            /* UNCHANGED ignores the tag, as OpenCV's IMREAD_UNCHANGED */
            ck_assert_int_eq(un.width, 30);
            ck_assert_int_eq(memcmp(un.data, plain.data, mx_image_bytes(&plain)), 0);
            mx_image_decode_opts opt = {.color = MX_IMAGE_COLOR, .ignore_orientation = 1};
            mx_image ign;
            OK(mx_image_decode_ex(e, en, &opt, &ign));
            ck_assert_int_eq(memcmp(ign.data, plain.data, mx_image_bytes(&plain)), 0);
            mx_image_free(&ign);
            mx_image_free(&col);
            mx_image_free(&un);
            mx_image_free(&want);
            free(e);
        }
    ck_assert_int_eq(mx_image_jpeg_exif_orientation(jpg, n), 1);
    mx_image_free(&plain);
    mx_free(jpg);
    mx_image_free(&im);
}
END_TEST

START_TEST(test_convert)
{
    const uint8_t rgb[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 200, 30};
    mx_image im = from_bytes(4, 1, 3, rgb), g, rgba, back;
    OK(mx_image_convert(&im, 1, &g));
    /* (4899 R + 9617 G + 1868 B + 8192) >> 14 */
    ck_assert_uint_eq(g.data[0], 76);
    ck_assert_uint_eq(g.data[1], 150);
    ck_assert_uint_eq(g.data[2], 29);
    ck_assert_uint_eq(g.data[3], (10 * 4899 + 200 * 9617 + 30 * 1868 + 8192) >> 14);
    OK(mx_image_convert(&im, 4, &rgba));
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(memcmp(rgba.data + 4 * i, rgb + 3 * i, 3), 0);
        ck_assert_uint_eq(rgba.data[4 * i + 3], 255);
    }
    OK(mx_image_convert(&g, 3, &back));
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) ck_assert_uint_eq(back.data[3 * i + k], g.data[i]);
    mx_image_free(&back);
    mx_image_free(&rgba);
    mx_image_free(&g);
    mx_image_free(&im);
}
END_TEST

START_TEST(test_jpeg_cmyk)
{
    /* A 4-component (YCCK) JPEG made by TurboJPEG from CMYK pixels. The
     * expected RGB is computed here from TurboJPEG's own CMYK decode with
     * OpenCV's inverted-CMYK formula v = k - (255 - c) * k / 256. */
    enum { W = 20, H = 12 };
    uint8_t cmyk[W * H * 4];
    for (int i = 0; i < W * H; i++) {
        cmyk[4 * i + 0] = (uint8_t)(20 + 9 * (i % W));
        cmyk[4 * i + 1] = (uint8_t)(200 - 11 * (i / W));
        cmyk[4 * i + 2] = (uint8_t)(128 + (i % 7));
        cmyk[4 * i + 3] = (uint8_t)(180 + (i % 5) * 10);
    }
    tjhandle c = tjInitCompress(), d = tjInitDecompress();
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_nonnull(d);
    unsigned char *jpg = NULL;
    unsigned long n = 0;
    ck_assert_int_eq(tjCompress2(c, cmyk, W, 0, H, TJPF_CMYK, &jpg, &n, TJSAMP_444, 95, 0), 0);
    uint8_t back[W * H * 4];
    ck_assert_int_eq(tjDecompress2(d, jpg, n, back, W, 0, H, TJPF_CMYK, 0), 0);
    mx_image rgb, gray;
    OK(mx_image_decode(jpg, n, MX_IMAGE_COLOR, &rgb));
    OK(mx_image_decode(jpg, n, MX_IMAGE_GRAY, &gray));
    ck_assert_int_eq(rgb.channels, 3);
    ck_assert_int_eq(gray.channels, 1);
    for (int i = 0; i < W * H; i++) {
        int k = back[4 * i + 3];
        uint8_t want[3];
        for (int ch = 0; ch < 3; ch++) {
            want[ch] = (uint8_t)(k - ((255 - back[4 * i + ch]) * k >> 8));
            ck_assert_uint_eq(rgb.data[3 * i + ch], want[ch]);
        }
        ck_assert_uint_eq(gray.data[i], (want[0] * 4899 + want[1] * 9617 + want[2] * 1868 + 8192) >> 14);
    }
    mx_image_info info;
    OK(mx_image_probe(jpg, n, &info));
    ck_assert_int_eq(info.channels, 3);
    mx_image_free(&rgb);
    mx_image_free(&gray);
    tjFree(jpg);
    tjDestroy(c);
    tjDestroy(d);
}
END_TEST

/* ---- threads ------------------------------------------------------------------ */

typedef struct thread_arg {
    const uint8_t *jpg;
    size_t n;
    const mx_image *want;
    int bad;
} thread_arg;

static void *decode_many(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 50; i++) {
        mx_image out;
        if (mx_image_decode(a->jpg, a->n, MX_IMAGE_COLOR, &out) != MX_OK) {
            a->bad++;
            continue;
        }
        if (memcmp(out.data, a->want->data, mx_image_bytes(a->want)) != 0) a->bad++;
        mx_image_free(&out);
        /* an error in this thread must not disturb the others */
        if (mx_image_decode(a->jpg, a->n / 2, MX_IMAGE_COLOR, &out) != MX_ERR_FORMAT) a->bad++;
    }
    return NULL;
}

START_TEST(test_concurrent_decode)
{
    mx_image im = smooth_image(64, 64, 3), want;
    uint8_t *jpg;
    size_t n;
    OK(mx_image_encode_jpeg(&im, 90, &jpg, &n));
    OK(mx_image_decode(jpg, n, MX_IMAGE_COLOR, &want));
    pthread_t t[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){jpg, n, &want, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, decode_many, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(args[i].bad, 0);
    }
    mx_image_free(&want);
    mx_free(jpg);
    mx_image_free(&im);
}
END_TEST

static Suite *image_suite(void)
{
    Suite *s = suite_create("image");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_png_round_trip_exact);
    tcase_add_test(t, test_png_colour_modes);
    tcase_add_test(t, test_jpeg_round_trip_tolerance);
    tcase_add_test(t, test_jpeg_colour_modes);
    tcase_add_test(t, test_encode_bad_arguments);
    tcase_add_test(t, test_truncated_every_cut);
    tcase_add_test(t, test_truncated_messages);
    tcase_add_test(t, test_corrupt_bytes_no_crash);
    tcase_add_test(t, test_oversized_rejected_before_allocation);
    tcase_add_test(t, test_resize_matches_opencv);
    tcase_add_test(t, test_resize_against_float64_reference);
    tcase_add_test(t, test_resize_same_size_and_errors);
    tcase_add_test(t, test_shorter_edge_sizes);
    tcase_add_test(t, test_center_crop);
    tcase_add_test(t, test_orient_all);
    tcase_add_test(t, test_jpeg_exif_orientation);
    tcase_add_test(t, test_convert);
    tcase_add_test(t, test_jpeg_cmyk);
    tcase_add_test(t, test_concurrent_decode);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(image_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
