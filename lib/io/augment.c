/* augment.c - decode, resize, pad, crop, mirror and normalise one image
 * into a (C, H, W) float32 sample (see augment.h for the exact order). */
#include "io/augment.h"

#include "image/image.h"

#include <string.h>
#include <turbojpeg.h>

#if defined(__SSE2__)
#include <emmintrin.h> /* _mm_stream_ps: see write_sample */
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h> /* the AVX2 kernels, compiled for that target only and chosen at run time */
#define HAVE_AVX2_KERNELS 1
#else
#define HAVE_AVX2_KERNELS 0
#endif

/* ---------------------------------------------------------------- generator */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t mx_aug_key(uint64_t seed, uint64_t pass, uint64_t pos)
{
    return mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ mix64(pass * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull) ^
                 (pos * 0xC2B2AE3D27D4EB4Full));
}

void mx_aug_rng_seed(mx_aug_rng *g, uint64_t key) { g->state = key; }

uint64_t mx_aug_rng_next(mx_aug_rng *g)
{
    g->state += 0x9E3779B97F4A7C15ull;
    return mix64(g->state);
}

uint64_t mx_aug_rng_upto(mx_aug_rng *g, uint64_t n)
{
    if (n == 0) return 0;
    if (n == UINT64_MAX) return mx_aug_rng_next(g);
    uint64_t range = n + 1;
    /* Reject the lowest 2^64 mod range values so every residue is equally likely. */
    uint64_t threshold = (0 - range) % range;
    for (;;) {
        uint64_t r = mx_aug_rng_next(g);
        if (r >= threshold) return r % range;
    }
}

float mx_aug_rng_uniform(mx_aug_rng *g) { return (float)(mx_aug_rng_next(g) >> 40) * 0x1p-24f; }

/* ---------------------------------------------------------------- params */

/* MXNet's per-plane factors for one sample (ProcessImage): float math. */
static void plane_factors(const mx_aug_params *p, float u_contrast, float u_illum, float *mult, float *bias)
{
    float mrc = p->max_random_contrast, mri = p->max_random_illumination;
    float contrast = (u_contrast * mrc * 2.0f - mrc + 1.0f) * p->scale;
    float illum = (u_illum * mri * 2.0f - mri) * p->scale;
    for (int c = 0; c < p->channels; c++) {
        mult[c] = contrast / p->std[c];
        bias[c] = illum / p->std[c];
    }
}

static void fill_lut(const mx_aug_params *p, const float *mult, const float *bias, float lut[4][256])
{
    for (int c = 0; c < p->channels; c++)
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v - p->mean[c]) * mult[c] + bias[c];
}

static bool bias_matters(const float *mean, const float *mult, const float *bias, int32_t C);

mx_status mx_aug_prepare(mx_aug_params *p)
{
    if (p->channels != 1 && p->channels != 3 && p->channels != 4)
        return MX_ERROR(MX_ERR_INVALID, "data_shape must have 1, 3 or 4 channels, not %d", (int)p->channels);
    if (p->height < 1 || p->width < 1 || p->height > MX_IMAGE_MAX_SIDE || p->width > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_INVALID, "data_shape height and width must be 1..%d, got %dx%d", MX_IMAGE_MAX_SIDE,
                        (int)p->height, (int)p->width);
    if ((uint64_t)p->height * (uint64_t)p->width > MX_IMAGE_MAX_PIXELS)
        return MX_ERROR(MX_ERR_INVALID, "data_shape %dx%d has more than %llu pixels", (int)p->height, (int)p->width,
                        (unsigned long long)MX_IMAGE_MAX_PIXELS);
    if (p->pad < 0 || p->pad > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_INVALID, "pad must be 0..%d, got %d", MX_IMAGE_MAX_SIDE, (int)p->pad);
    if (p->resize > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_INVALID, "resize must be at most %d, got %d", MX_IMAGE_MAX_SIDE, (int)p->resize);
    for (int c = 0; c < p->channels; c++)
        if (!(p->std[c] != 0.0f))
            return MX_ERROR(MX_ERR_INVALID, "std of channel %d must not be 0", c);
    float mult[4], bias[4];
    plane_factors(p, 0.0f, 0.0f, mult, bias);
    p->lut_valid = p->max_random_contrast == 0.0f && p->max_random_illumination == 0.0f;
    if (p->lut_valid) fill_lut(p, mult, bias, p->lut);
    p->bias_matters = p->lut_valid && bias_matters(p->mean, mult, bias, p->channels);
#if HAVE_AVX2_KERNELS
    p->avx2 = !p->portable && __builtin_cpu_supports("avx2");
#else
    p->avx2 = false;
#endif
    return MX_OK;
}

/* ---------------------------------------------------------------- decode */

void mx_aug_scratch_free(mx_aug_scratch *s)
{
    if (!s) return;
    if (s->tj) tjDestroy(s->tj);
    mx_free(s->buf);
    mx_free(s->yuv);
    mx_free(s->rows);
    memset(s, 0, sizeof(*s));
}

/* An image whose pixels may belong to the scratch buffer (owned = false). */
typedef struct work_image {
    mx_image img;
    bool owned;
} work_image;

static bool is_jpeg(const uint8_t *data, size_t size)
{
    return size >= 3 && size <= 0xFFFFFFFFu && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

/* lib/image's marker walk for the size and layout: cheaper than a second
 * libjpeg header parse (tjDecompressHeader3), which costs as much as
 * decoding a small image's pixels. */
static bool read_layout(const uint8_t *data, size_t size, mx_image_jpeg_layout *lay)
{
    if (!is_jpeg(data, size)) return false;
    if (mx_image_jpeg_layout_read(data, size, lay) != MX_OK) {
        mx_error_clear();
        return false;
    }
    return true;
}

/* The fast path: a JPEG TurboJPEG decodes straight to grey/RGB, into the
 * scratch buffer, with lib/image's flags (accurate IDCT, warnings are
 * errors, scan limit). Returns false to let lib/image decode (and explain)
 * anything else. */
static bool decode_jpeg_fast(mx_aug_scratch *s, const uint8_t *data, size_t size, const mx_image_jpeg_layout *lay,
                             int32_t channels, mx_image *out)
{
    /* CMYK files pass here but TurboJPEG refuses to convert them to
     * RGB/grey, so they fall back below. */
    if (!s || !lay || channels == 4) return false;
    int w = lay->width, h = lay->height;
    if (w < 1 || h < 1 || w > MX_IMAGE_MAX_SIDE || h > MX_IMAGE_MAX_SIDE ||
        (uint64_t)w * (uint64_t)h > MX_IMAGE_MAX_PIXELS)
        return false;
    if (!s->tj && !(s->tj = tjInitDecompress())) return false;
    size_t need = (size_t)w * (size_t)h * (size_t)channels;
    if (need > s->cap) {
        uint8_t *nb = mx_malloc(need);
        if (!nb) {
            mx_error_clear();
            return false;
        }
        mx_free(s->buf);
        s->buf = nb;
        s->cap = need;
    }
#ifndef TJFLAG_LIMITSCANS
#define TJFLAG_LIMITSCANS 0
#endif
    if (tjDecompress2(s->tj, data, (unsigned long)size, s->buf, w, 0, h, channels == 1 ? TJPF_GRAY : TJPF_RGB,
                      TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        return false;
    *out = (mx_image){s->buf, w, h, channels};
    return true;
}

static mx_status decode(mx_aug_scratch *s, const void *data, size_t size, const mx_image_jpeg_layout *lay,
                        int32_t channels, work_image *out)
{
    if (decode_jpeg_fast(s, data, size, lay, channels, &out->img)) {
        out->owned = false;
        return MX_OK;
    }
    mx_image_decode_opts opts = {
        .color = channels == 1 ? MX_IMAGE_GRAY : channels == 3 ? MX_IMAGE_COLOR : MX_IMAGE_UNCHANGED,
        .max_pixels = 0,
        .ignore_orientation = 1,
    };
    MX_TRY(mx_image_decode_ex(data, size, &opts, &out->img));
    out->owned = true;
    return MX_OK;
}

static void work_free(work_image *w)
{
    if (w->owned) mx_image_free(&w->img);
    memset(w, 0, sizeof(*w));
}

/* ---------------------------------------------------------------- geometry */

/* Replaces *img by `next` (freeing the old pixels if they were ours). */
static void replace(work_image *img, mx_image *next)
{
    work_free(img);
    img->img = *next;
    img->owned = true;
    memset(next, 0, sizeof(*next));
}

/* MXNet's resize of the shorter side (image_aug_default.cc). */
static mx_status resize_shorter(work_image *w, int32_t edge)
{
    const mx_image *img = &w->img;
    int64_t rows = img->height, cols = img->width, nh, nw;
    if (rows > cols) {
        nh = (int64_t)edge * rows / cols;
        nw = edge;
    } else {
        nh = edge;
        nw = (int64_t)edge * cols / rows;
    }
    if (nh < 1 || nw < 1 || nh > MX_IMAGE_MAX_SIDE || nw > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_INVALID, "resize=%d turns the %dx%d image into %lldx%lld", (int)edge, (int)cols,
                        (int)rows, (long long)nw, (long long)nh);
    if (nh == rows && nw == cols) return MX_OK; /* cv::resize copies */
    mx_image out;
    MX_TRY(mx_image_resize(img, (int32_t)nw, (int32_t)nh, &out));
    replace(w, &out);
    return MX_OK;
}

/* cv::copyMakeBorder(BORDER_CONSTANT, Scalar(v, v, v)): the 4th channel
 * of the scalar is 0. */
static mx_status pad_border(work_image *wi, int32_t pad, uint8_t v)
{
    const mx_image *img = &wi->img;
    int64_t w = (int64_t)img->width + 2 * (int64_t)pad, h = (int64_t)img->height + 2 * (int64_t)pad;
    if (w > MX_IMAGE_MAX_SIDE || h > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "pad=%d makes the image %lldx%lld", (int)pad, (long long)w,
                        (long long)h);
    mx_image out;
    MX_TRY(mx_image_create((int32_t)w, (int32_t)h, img->channels, &out));
    const size_t c = (size_t)img->channels;
    uint8_t fill[4] = {v, v, v, 0};
    uint8_t *row0 = out.data;
    for (int64_t x = 0; x < w; x++) memcpy(row0 + (size_t)x * c, fill, c);
    const size_t out_row = (size_t)w * c, in_row = (size_t)img->width * c, margin = (size_t)pad * c;
    for (int64_t y = 1; y < h; y++) memcpy(out.data + (size_t)y * out_row, row0, out_row);
    for (int32_t y = 0; y < img->height; y++)
        memcpy(out.data + ((size_t)y + (size_t)pad) * out_row + margin, img->data + (size_t)y * in_row, in_row);
    replace(wi, &out);
    return MX_OK;
}

/* Step 4: scale up (aspect kept) until the image covers height x width. */
static mx_status cover(work_image *w, int32_t height, int32_t width)
{
    const mx_image *img = &w->img;
    int64_t rows = img->height, cols = img->width;
    if (rows >= height && cols >= width) return MX_OK;
    int64_t nh, nw;
    if ((int64_t)height * cols >= (int64_t)width * rows) { /* height binds */
        nh = height;
        nw = (cols * height + rows - 1) / rows;
        if (nw < width) nw = width;
    } else {
        nw = width;
        nh = (rows * width + cols - 1) / cols;
        if (nh < height) nh = height;
    }
    if (nh > MX_IMAGE_MAX_SIDE || nw > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "the %lldx%lld image would need %lldx%lld pixels to cover the crop",
                        (long long)cols, (long long)rows, (long long)nw, (long long)nh);
    mx_image out;
    MX_TRY(mx_image_resize(img, (int32_t)nw, (int32_t)nh, &out));
    replace(w, &out);
    return MX_OK;
}

/* ---------------------------------------------------------------- output */

/* Output rows are written CHUNK floats at a time. A large sample
 * (ImageNet-sized: 600 KB of floats) is built in a small buffer and goes
 * to memory with non-temporal stores: it will not be read again before it has left
 * the cache, and streaming skips reading the destination lines first,
 * which is most of the cost on a machine short of memory bandwidth. */
#define CHUNK 256
#define STREAM_MIN_FLOATS (64 * 1024 / 4)

#if defined(__SSE2__)
#define HAVE_STREAM 1
#else
#define HAVE_STREAM 0
#endif

/* Copies n floats to dst with non-temporal stores where aligned. */
static void stream_row(float *dst, const float *src, int32_t n)
{
#if HAVE_STREAM
    int32_t j = 0;
    for (; j < n && ((uintptr_t)(dst + j) & 15u) != 0; j++) dst[j] = src[j];
    for (; j + 4 <= n; j += 4) _mm_stream_ps(dst + j, _mm_loadu_ps(src + j));
    for (; j < n; j++) dst[j] = src[j];
#else
    memcpy(dst, src, (size_t)n * sizeof(float));
#endif
}

/* Normalisation of up to 3 planes, the LUT's formula: ((float)v - mean)
 * * mult + bias. add_bias is false when adding the bias changes no value
 * of any plane (bias 0, the usual case), checked over all 256 inputs, so
 * leaving the addition out gives the same bits. */
typedef struct plane_norm {
    float mean[3], mult[3], bias[3];
    bool add_bias;
} plane_norm;

/* Whether adding bias[c] changes any plane's value (see plane_norm). */
static bool bias_matters(const float *mean, const float *mult, const float *bias, int32_t C)
{
    for (int32_t c = 0; c < C && c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float t = ((float)v - mean[c]) * mult[c], u = t + bias[c];
            if (memcmp(&t, &u, sizeof(t)) != 0) return true;
        }
    return false;
}

/* For a sample with these factors: with fixed factors (lut_valid) they are
 * mx_aug_prepare's, whose check it kept; random ones add the bias. */
static void plane_norm_init(plane_norm *n, const mx_aug_params *p, const float *mult, const float *bias, int32_t C)
{
    for (int32_t c = 0; c < 3; c++) {
        n->mean[c] = c < C ? p->mean[c] : 0.0f;
        n->mult[c] = c < C ? mult[c] : 0.0f;
        n->bias[c] = c < C ? bias[c] : 0.0f;
    }
    n->add_bias = p->lut_valid ? p->bias_matters : true;
}

#if HAVE_AVX2_KERNELS
/* 8 values (int32 lanes) normalised and stored at dst. Separate multiply
 * and add (this target has no FMA to fuse them): the roundings of the LUT. */
__attribute__((target("avx2"))) static inline void norm_store8(__m256i v, __m256 mean, __m256 mult, __m256 bias,
                                                                bool add_bias, float *dst, bool stream)
{
    __m256 x = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(v), mean), mult);
    if (add_bias) x = _mm256_add_ps(x, bias);
    if (stream) _mm256_stream_ps(dst, x);
    else _mm256_storeu_ps(dst, x);
}

/* 16 pixels of one plane (bytes in x, mirrored already) normalised to dst. */
__attribute__((target("avx2"))) static inline void norm_store16(__m128i x, __m256 mean, __m256 mult, __m256 bias,
                                                                 bool add_bias, float *dst, bool stream)
{
    norm_store8(_mm256_cvtepu8_epi32(x), mean, mult, bias, add_bias, dst, stream);
    norm_store8(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)), mean, mult, bias, add_bias, dst + 8, stream);
}

/* The (C, H, W) crop at (x0, y0) of a grey (C = 1) or RGB (C = 3) image,
 * mirrored or not, normalised into out: 16 pixels a step (RGB
 * de-interleaved with byte shuffles); a row whose width is not a multiple
 * of 16 ends with its last 16 pixels again (overlapping, equal values),
 * a row narrower than 16 goes pixel by pixel; all the LUT's bits (same
 * formula). Streams where `stream` and the rows are 32-byte aligned. */
__attribute__((target("avx2"))) static void interleaved_avx2(const mx_image *img, int32_t x0, int32_t y0, int32_t C,
                                                              int32_t H, int32_t W, bool mirrored,
                                                              const plane_norm *n, float *out, bool stream)
{
    static const int8_t deint[3][3][16] = {
        {{0, 3, 6, 9, 12, 15, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128},
         {1, 4, 7, 10, 13, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128},
         {2, 5, 8, 11, 14, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128}},
        {{-128, -128, -128, -128, -128, -128, 2, 5, 8, 11, 14, -128, -128, -128, -128, -128},
         {-128, -128, -128, -128, -128, 0, 3, 6, 9, 12, 15, -128, -128, -128, -128, -128},
         {-128, -128, -128, -128, -128, 1, 4, 7, 10, 13, -128, -128, -128, -128, -128, -128}},
        {{-128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, 1, 4, 7, 10, 13},
         {-128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, 2, 5, 8, 11, 14},
         {-128, -128, -128, -128, -128, -128, -128, -128, -128, -128, 0, 3, 6, 9, 12, 15}},
    }; /* [16-byte block][channel]: pixel i's byte 3i + c, or zero */
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const size_t stride = (size_t)img->width * (size_t)C, plane = (size_t)H * (size_t)W;
    const bool add = n->add_bias;
    const __m256 m0 = _mm256_set1_ps(n->mean[0]), m1 = _mm256_set1_ps(n->mean[1]), m2 = _mm256_set1_ps(n->mean[2]);
    const __m256 f0 = _mm256_set1_ps(n->mult[0]), f1 = _mm256_set1_ps(n->mult[1]), f2 = _mm256_set1_ps(n->mult[2]);
    const __m256 b0 = _mm256_set1_ps(n->bias[0]), b1 = _mm256_set1_ps(n->bias[1]), b2 = _mm256_set1_ps(n->bias[2]);
    __m128i sh[3][3];
    for (int blk = 0; blk < 3; blk++)
        for (int c = 0; c < 3; c++) sh[blk][c] = _mm_loadu_si128((const __m128i *)(const void *)deint[blk][c]);
    /* 32-byte aligned rows: every plane row starts aligned when the first does and W is a multiple of 8 */
    stream = stream && !((uintptr_t)out & 31u) && W % 8 == 0;
    for (int32_t i = 0; i < H; i++) {
        const uint8_t *row = img->data + ((size_t)y0 + (size_t)i) * stride + (size_t)x0 * (size_t)C;
        float *d0 = out + (size_t)i * (size_t)W, *d1 = C == 3 ? d0 + plane : d0, *d2 = C == 3 ? d1 + plane : d0;
        if (W < 16) {
            for (int32_t k = 0; k < W; k++) {
                const int32_t j = mirrored ? W - 1 - k : k;
                for (int32_t c = 0; c < C; c++)
                    out[(size_t)c * plane + (size_t)i * (size_t)W + (size_t)k] =
                        ((float)row[(size_t)j * (size_t)C + (size_t)c] - n->mean[c]) * n->mult[c] + n->bias[c];
            }
            continue;
        }
        for (int32_t k = 0; k < W; k += 16) {
            bool st = stream;
            if (k + 16 > W) { /* the overlapping last step */
                k = W - 16;
                st = false;
            }
            const int32_t j = mirrored ? W - 16 - k : k;
            const uint8_t *q = row + (size_t)j * (size_t)C;
            if (C == 1) {
                __m128i x = _mm_loadu_si128((const __m128i *)(const void *)q);
                if (mirrored) x = _mm_shuffle_epi8(x, rev);
                norm_store16(x, m0, f0, b0, add, d0 + k, st);
                continue;
            }
            const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)q);
            const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(q + 16));
            const __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(q + 32));
            __m128i r = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, sh[0][0]), _mm_shuffle_epi8(b, sh[1][0])),
                                     _mm_shuffle_epi8(e, sh[2][0]));
            __m128i g = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, sh[0][1]), _mm_shuffle_epi8(b, sh[1][1])),
                                     _mm_shuffle_epi8(e, sh[2][1]));
            __m128i bl = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, sh[0][2]), _mm_shuffle_epi8(b, sh[1][2])),
                                      _mm_shuffle_epi8(e, sh[2][2]));
            if (mirrored) {
                r = _mm_shuffle_epi8(r, rev);
                g = _mm_shuffle_epi8(g, rev);
                bl = _mm_shuffle_epi8(bl, rev);
            }
            norm_store16(r, m0, f0, b0, add, d0 + k, st);
            norm_store16(g, m1, f1, b1, add, d1 + k, st);
            norm_store16(bl, m2, f2, b2, add, d2 + k, st);
        }
    }
}
#endif

/* Writes the (C, H, W) crop at (x0, y0) of img, mirrored or not: plane c
 * from lut[c] (mean[] and fixed factors), or from the mean image. */
static void write_sample(const mx_aug_params *p, const mx_image *img, int32_t x0, int32_t y0, bool mirrored,
                         const float lut[4][256], const float *mult, const float *bias, float *out)
{
    const int32_t C = p->channels, H = p->height, W = p->width;
    const size_t stride = (size_t)img->width * (size_t)C, plane = (size_t)H * (size_t)W;
    const bool stream = HAVE_STREAM && (size_t)C * plane >= STREAM_MIN_FLOATS;
#if HAVE_AVX2_KERNELS
    if (p->avx2 && !p->mean_img && (C == 1 || C == 3)) {
        plane_norm n;
        plane_norm_init(&n, p, mult, bias, C);
        interleaved_avx2(img, x0, y0, C, H, W, mirrored, &n, out, stream);
        if (stream) _mm_sfence(); /* order the streamed stores before whatever publishes the batch */
        return;
    }
#endif
    float buf[CHUNK];
    for (int32_t i = 0; i < H; i++) {
        const uint8_t *row = img->data + ((size_t)y0 + (size_t)i) * stride + (size_t)x0 * (size_t)C;
        for (int32_t c = 0; c < C; c++) {
            const uint8_t *src = row + c;
            float *dst = out + (size_t)c * plane + (size_t)i * (size_t)W;
            const float *m = p->mean_img ? p->mean_img + (size_t)c * plane + (size_t)i * (size_t)W : NULL;
            for (int32_t o0 = 0; o0 < W; o0 += CHUNK) {
                int32_t n = W - o0 < CHUNK ? W - o0 : CHUNK;
                float *to = stream ? buf : dst + o0; /* streamed rows go through buf */
                /* output column o takes cropped column j = o, or W - 1 - o mirrored */
                if (m) {
                    for (int32_t k = 0; k < n; k++) {
                        int32_t j = mirrored ? W - 1 - (o0 + k) : o0 + k;
                        to[k] = ((float)src[(size_t)j * (size_t)C] - m[j]) * mult[c] + bias[c];
                    }
                } else {
                    const float *t = lut[c];
                    if (C == 1) {
                        /* contiguous bytes: the LUT's own formula, which
                         * the compiler vectorises (same float operations,
                         * so the same bits) */
                        const float mc = p->mean[0], kc = mult[0], bc = bias[0];
                        if (mirrored) {
                            const uint8_t *q = src + (W - 1 - o0);
                            for (int32_t k = 0; k < n; k++) to[k] = ((float)q[-k] - mc) * kc + bc;
                        } else {
                            const uint8_t *q = src + o0;
                            for (int32_t k = 0; k < n; k++) to[k] = ((float)q[k] - mc) * kc + bc;
                        }
                    } else if (mirrored) {
                        for (int32_t k = 0; k < n; k++) to[k] = t[src[(size_t)(W - 1 - (o0 + k)) * (size_t)C]];
                    } else {
                        for (int32_t k = 0; k < n; k++) to[k] = t[src[(size_t)(o0 + k) * (size_t)C]];
                    }
                }
                if (stream) stream_row(dst + o0, buf, n);
            }
        }
    }
#if HAVE_STREAM
    if (stream) _mm_sfence(); /* order the streamed stores before whatever publishes the batch */
#endif
}

/* ---------------------------------------------------------------- YCbCr fast path */

/* A JPEG decoded to its planes. Chroma rows have one valid sample on
 * either side (the edge sample repeated) so the upsampler needs no edge
 * cases, and every plane is followed by slack for 16-byte vector loads. */
typedef struct yuv_image {
    const uint8_t *plane[3];
    size_t stride[3];
    int32_t width, height; /* luma, = the image */
    int32_t cw, ch;        /* chroma plane */
    int32_t hs, vs;        /* chroma subsampling: 1 or 2 each */
} yuv_image;

#define YUV_SLACK 64

/* Whether the sample can take the YCbCr path: see augment.h. */
static bool yuv_eligible(const mx_aug_params *p, const mx_aug_scratch *s, const mx_image_jpeg_layout *lay)
{
    /* Without AVX2 the portable kernels would cost more than TurboJPEG's
     * own SIMD upsampling and conversion: only tests take them here. */
    if (!p->avx2 && !p->portable) return false;
    if (!s || !lay || p->channels != 3 || p->resize > 0 || p->pad > 0 || p->mean_img) return false;
    if (lay->components != 3 || !lay->ycbcr || lay->width < p->width || lay->height < p->height) return false;
    if (lay->h_samp[1] != 1 || lay->v_samp[1] != 1 || lay->h_samp[2] != 1 || lay->v_samp[2] != 1) return false;
    int hs = lay->h_samp[0], vs = lay->v_samp[0];
    if (!((hs == 1 && vs == 1) || (hs == 2 && vs == 1) || (hs == 2 && vs == 2))) return false;
    /* libjpeg upsamples chroma rows of 2 samples or fewer by plain
     * replication (jdsample.c), not the triangle filter done here */
    if (hs == 2 && (lay->width + 1) / 2 <= 2) return false;
    if ((uint64_t)lay->width * (uint64_t)lay->height > MX_IMAGE_MAX_PIXELS) return false;
    return true;
}

/* Lays out planes for a width x height image with hs x vs chroma
 * subsampling in the scratch buffer (*y: pointers and strides, contents
 * not yet written). False on allocation failure (nothing reported). */
static bool yuv_alloc(mx_aug_scratch *s, int32_t w, int32_t h, int32_t hs, int32_t vs, yuv_image *y)
{
    const int32_t cw = (w + hs - 1) / hs, ch = (h + vs - 1) / vs;
    /* TurboJPEG writes the luma plane padded to whole chroma samples
     * (tjPlaneWidth/Height): cw * hs columns, ch * vs rows */
    const size_t ys = ((size_t)cw * (size_t)hs + 31) & ~(size_t)31, cs = ((size_t)cw + 2 + 31) & ~(size_t)31;
    const size_t ybytes = ys * (size_t)ch * (size_t)vs + YUV_SLACK, cbytes = cs * (size_t)ch + YUV_SLACK;
    const size_t need = ybytes + 2 * cbytes;
    if (need > s->yuv_cap) {
        uint8_t *nb = mx_malloc(need);
        if (!nb) {
            mx_error_clear();
            return false;
        }
        mx_free(s->yuv);
        s->yuv = nb;
        s->yuv_cap = need;
    }
    /* chroma rows start one byte in: sample -1 is theirs */
    *y = (yuv_image){{s->yuv, s->yuv + ybytes + 1, s->yuv + ybytes + cbytes + 1}, {ys, cs, cs}, w, h, cw, ch, hs, vs};
    return true;
}

/* Repeats every chroma row's edge samples at -1 and cw. */
static void yuv_edges(const yuv_image *y)
{
    for (int c = 1; c < 3; c++)
        for (int32_t r = 0; r < y->ch; r++) {
            uint8_t *row = (uint8_t *)y->plane[c] + (size_t)r * y->stride[c];
            row[-1] = row[0];
            row[y->cw] = row[y->cw - 1];
        }
}

/* Decodes the planes into the scratch buffer; false (nothing reported) if
 * TurboJPEG refuses, so the caller falls back to the RGB path, which
 * decodes again and explains. */
static bool decode_yuv(mx_aug_scratch *s, const uint8_t *data, size_t size, const mx_image_jpeg_layout *lay,
                       yuv_image *y)
{
    if (!yuv_alloc(s, lay->width, lay->height, lay->h_samp[0], lay->v_samp[0], y)) return false;
    if (!s->tj && !(s->tj = tjInitDecompress())) return false;
    unsigned char *planes[3] = {(uint8_t *)y->plane[0], (uint8_t *)y->plane[1], (uint8_t *)y->plane[2]};
    int strides[3] = {(int)y->stride[0], (int)y->stride[1], (int)y->stride[2]};
    if (tjDecompressToYUVPlanes(s->tj, data, (unsigned long)size, planes, y->width, strides, y->height,
                                TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        return false;
    yuv_edges(y);
    return true;
}

/* libjpeg's YCbCr->RGB (jdcolor.c, SCALEBITS 16): R = Y + Cr * 1.402,
 * G = Y - Cb * 0.34414 - Cr * 0.71414, B = Y + Cb * 1.772, each offset
 * rounded as its tables do, then clamped. */
static inline int32_t clamp255(int32_t v) { return v < 0 ? 0 : v > 255 ? 255 : v; }
static inline int32_t ycc_r(int32_t y, int32_t cr) { return clamp255(y + ((91881 * (cr - 128) + 32768) >> 16)); }
static inline int32_t ycc_g(int32_t y, int32_t cb, int32_t cr)
{
    return clamp255(y + ((-22554 * (cb - 128) - 46802 * (cr - 128) + 32768) >> 16));
}
static inline int32_t ycc_b(int32_t y, int32_t cb) { return clamp255(y + ((116130 * (cb - 128) + 32768) >> 16)); }

/* Upsamples one chroma row into out[0 .. W) = image columns x0 .. x0 + W
 * (out[-1] and out[W .. W + 32] are scratch): libjpeg's fancy upsampling
 * (jdsample.c), h2v2 when far is given (3/4 of the nearer chroma row, 1/4
 * of the farther, then the same across columns), else h2v1. `near`/`far`
 * have valid samples at -1 and cw (edges repeated), which is what
 * libjpeg's edge cases compute. */
static void up_row_c(const uint8_t *near, const uint8_t *far, int32_t x0, int32_t W, uint8_t *out)
{
    const int32_t c0 = x0 >> 1, c1 = (x0 + W - 1) >> 1;
    uint8_t *o = out - (x0 & 1);
    for (int32_t cx = c0; cx <= c1; cx++, o += 2) {
        if (far) {
            int32_t c = 3 * near[cx] + far[cx], l = 3 * near[cx - 1] + far[cx - 1], r = 3 * near[cx + 1] + far[cx + 1];
            o[0] = (uint8_t)((3 * c + l + 8) >> 4);
            o[1] = (uint8_t)((3 * c + r + 7) >> 4);
        } else {
            int32_t c = 3 * near[cx];
            o[0] = (uint8_t)((c + near[cx - 1] + 1) >> 2);
            o[1] = (uint8_t)((c + near[cx + 1] + 2) >> 2);
        }
    }
}

/* Output columns k0 .. W of one row (k0 = 0: all of it): RGB from Y, Cb,
 * Cr (source column j = k, or W - 1 - k mirrored), normalised, to the
 * three plane rows. */
static void conv_row_c(const uint8_t *Y, const uint8_t *U, const uint8_t *V, int32_t k0, int32_t W, bool mirrored,
                       const plane_norm *n, float *d0, float *d1, float *d2)
{
    for (int32_t k = k0; k < W; k++) {
        int32_t j = mirrored ? W - 1 - k : k;
        int32_t y = Y[j], cb = U[j], cr = V[j];
        d0[k] = ((float)ycc_r(y, cr) - n->mean[0]) * n->mult[0] + n->bias[0];
        d1[k] = ((float)ycc_g(y, cb, cr) - n->mean[1]) * n->mult[1] + n->bias[1];
        d2[k] = ((float)ycc_b(y, cb) - n->mean[2]) * n->mult[2] + n->bias[2];
    }
}

#if HAVE_AVX2_KERNELS
/* up_row_c, 16 chroma samples (32 outputs) a step. Reads up to 17 samples
 * past c1 and writes up to 32 bytes past W (both slack). */
__attribute__((target("avx2"))) static void up_row_avx2(const uint8_t *near, const uint8_t *far, int32_t x0,
                                                         int32_t W, uint8_t *out)
{
    const int32_t c0 = x0 >> 1, c1 = (x0 + W - 1) >> 1;
    uint8_t *o = out - (x0 & 1);
    const __m256i k7 = _mm256_set1_epi16(7), k8 = _mm256_set1_epi16(8), k1 = _mm256_set1_epi16(1),
                  k2 = _mm256_set1_epi16(2);
#define LD16(ptr) _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(ptr)))
#define TIMES3(v) _mm256_add_epi16(_mm256_add_epi16((v), (v)), (v))
    for (int32_t cx = c0; cx <= c1; cx += 16, o += 32) {
        __m256i even, odd;
        if (far) {
            __m256i c = _mm256_add_epi16(TIMES3(LD16(near + cx)), LD16(far + cx));
            __m256i l = _mm256_add_epi16(TIMES3(LD16(near + cx - 1)), LD16(far + cx - 1));
            __m256i r = _mm256_add_epi16(TIMES3(LD16(near + cx + 1)), LD16(far + cx + 1));
            __m256i c3 = TIMES3(c);
            even = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c3, l), k8), 4);
            odd = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c3, r), k7), 4);
        } else {
            __m256i c3 = TIMES3(LD16(near + cx));
            even = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c3, LD16(near + cx - 1)), k1), 2);
            odd = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(c3, LD16(near + cx + 1)), k2), 2);
        }
        /* in-lane interleave then pack: 32 bytes in column order */
        __m256i lo = _mm256_unpacklo_epi16(even, odd), hi = _mm256_unpackhi_epi16(even, odd);
        _mm256_storeu_si256((__m256i *)(void *)o, _mm256_packus_epi16(lo, hi));
    }
#undef LD16
#undef TIMES3
}

/* conv_row_c, 16 pixels a step, in 16-bit lanes with libjpeg's SIMD
 * formulation of the same fixed-point offsets (equal for every Cb, Cr;
 * tests check all of them): R - Y = Cr + 0.402 Cr, B - Y = 2 Cb - 0.228 Cb,
 * G - Y = (-0.34414 Cb + 0.28586 Cr) - Cr. The tail goes to conv_row_c.
 * Streams (non-temporal stores) where `stream` and the rows are 32-byte
 * aligned. */
__attribute__((target("avx2"))) static void conv_row_avx2(const uint8_t *Y, const uint8_t *U, const uint8_t *V,
                                                           int32_t W, bool mirrored, const plane_norm *n, float *d0,
                                                           float *d1, float *d2, bool stream)
{
    const __m256i c128 = _mm256_set1_epi16(128), one = _mm256_set1_epi16(1);
    const __m256i kr = _mm256_set1_epi16(26345);  /* FIX(0.40200) */
    const __m256i kb = _mm256_set1_epi16(-14942); /* -FIX(0.22800) */
    const __m256i kg = _mm256_set1_epi32((int32_t)((uint32_t)18734 << 16 | (uint16_t)(int16_t)-22554)); /* (Cb, Cr) pairs */
    const __m256i half = _mm256_set1_epi32(32768);
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m256 m0 = _mm256_set1_ps(n->mean[0]), m1 = _mm256_set1_ps(n->mean[1]), m2 = _mm256_set1_ps(n->mean[2]);
    const __m256 f0 = _mm256_set1_ps(n->mult[0]), f1 = _mm256_set1_ps(n->mult[1]), f2 = _mm256_set1_ps(n->mult[2]);
    const __m256 b0 = _mm256_set1_ps(n->bias[0]), b1 = _mm256_set1_ps(n->bias[1]), b2 = _mm256_set1_ps(n->bias[2]);
    stream = stream && !(((uintptr_t)d0 | (uintptr_t)d1 | (uintptr_t)d2) & 31u);
    int32_t k = 0;
    for (; k + 16 <= W; k += 16) {
        const int32_t j = mirrored ? W - 16 - k : k;
        __m128i y8 = _mm_loadu_si128((const __m128i *)(const void *)(Y + j));
        __m128i u8 = _mm_loadu_si128((const __m128i *)(const void *)(U + j));
        __m128i v8 = _mm_loadu_si128((const __m128i *)(const void *)(V + j));
        if (mirrored) {
            y8 = _mm_shuffle_epi8(y8, rev);
            u8 = _mm_shuffle_epi8(u8, rev);
            v8 = _mm_shuffle_epi8(v8, rev);
        }
        __m256i y = _mm256_cvtepu8_epi16(y8);
        __m256i cb = _mm256_sub_epi16(_mm256_cvtepu8_epi16(u8), c128);
        __m256i cr = _mm256_sub_epi16(_mm256_cvtepu8_epi16(v8), c128);
        __m256i cb2 = _mm256_add_epi16(cb, cb), cr2 = _mm256_add_epi16(cr, cr);
        __m256i rd = _mm256_add_epi16(_mm256_srai_epi16(_mm256_add_epi16(_mm256_mulhi_epi16(cr2, kr), one), 1), cr);
        __m256i bd = _mm256_add_epi16(_mm256_srai_epi16(_mm256_add_epi16(_mm256_mulhi_epi16(cb2, kb), one), 1), cb2);
        __m256i glo = _mm256_madd_epi16(_mm256_unpacklo_epi16(cb, cr), kg);
        __m256i ghi = _mm256_madd_epi16(_mm256_unpackhi_epi16(cb, cr), kg);
        glo = _mm256_srai_epi32(_mm256_add_epi32(glo, half), 16);
        ghi = _mm256_srai_epi32(_mm256_add_epi32(ghi, half), 16);
        __m256i gd = _mm256_sub_epi16(_mm256_packs_epi32(glo, ghi), cr);
        /* clamp to bytes: per 128-bit lane [R0-7 G0-7 | R8-15 G8-15] and [B0-7 B0-7 | B8-15 B8-15] */
        __m256i rg = _mm256_packus_epi16(_mm256_add_epi16(y, rd), _mm256_add_epi16(y, gd));
        __m256i bb = _mm256_packus_epi16(_mm256_add_epi16(y, bd), _mm256_add_epi16(y, bd));
        __m128i rg0 = _mm256_castsi256_si128(rg), rg1 = _mm256_extracti128_si256(rg, 1);
        __m128i bb0 = _mm256_castsi256_si128(bb), bb1 = _mm256_extracti128_si256(bb, 1);
        norm_store8(_mm256_cvtepu8_epi32(rg0), m0, f0, b0, n->add_bias, d0 + k, stream);
        norm_store8(_mm256_cvtepu8_epi32(rg1), m0, f0, b0, n->add_bias, d0 + k + 8, stream);
        norm_store8(_mm256_cvtepu8_epi32(_mm_srli_si128(rg0, 8)), m1, f1, b1, n->add_bias, d1 + k, stream);
        norm_store8(_mm256_cvtepu8_epi32(_mm_srli_si128(rg1, 8)), m1, f1, b1, n->add_bias, d1 + k + 8, stream);
        norm_store8(_mm256_cvtepu8_epi32(bb0), m2, f2, b2, n->add_bias, d2 + k, stream);
        norm_store8(_mm256_cvtepu8_epi32(bb1), m2, f2, b2, n->add_bias, d2 + k + 8, stream);
    }
    if (k < W && W >= 16) {
        /* the last 16 columns again, overlapping: rewrites equal values */
        const int32_t j = mirrored ? 0 : W - 16;
        conv_row_avx2(Y + j, U + j, V + j, 16, mirrored, n, d0 + W - 16, d1 + W - 16, d2 + W - 16, false);
    } else if (k < W) {
        conv_row_c(Y, U, V, k, W, mirrored, n, d0, d1, d2);
    }
}
#endif

/* Writes the (3, H, W) crop at (x0, y0), mirrored or not, from the planes. */
static mx_status write_sample_yuv(const mx_aug_params *p, mx_aug_scratch *s, const yuv_image *im, int32_t x0,
                                  int32_t y0, bool mirrored, const float *mult, const float *bias, float *out)
{
    const int32_t H = p->height, W = p->width;
    const size_t plane = (size_t)H * (size_t)W;
    const bool upsample = im->hs == 2;
    const size_t row_bytes = ((size_t)W + 2 * YUV_SLACK + 31) & ~(size_t)31;
    if (upsample && 2 * row_bytes > s->rows_cap) {
        uint8_t *nb = mx_malloc(2 * row_bytes);
        if (!nb) return MX_ERR_NOMEM;
        mx_free(s->rows);
        s->rows = nb;
        s->rows_cap = 2 * row_bytes;
    }
    uint8_t *urow = s->rows + 32, *vrow = s->rows + row_bytes + 32;
    plane_norm n;
    plane_norm_init(&n, p, mult, bias, 3);
    const bool stream = HAVE_STREAM && 3 * plane >= STREAM_MIN_FLOATS;
#if HAVE_AVX2_KERNELS
    const bool avx2 = p->avx2;
#endif
    (void)stream; /* unused without SSE2 and AVX2 */
    for (int32_t i = 0; i < H; i++) {
        const int32_t y = y0 + i;
        const uint8_t *Y = im->plane[0] + (size_t)y * im->stride[0] + x0, *U, *V;
        if (upsample) {
            const int32_t cy = im->vs == 2 ? y >> 1 : y;
            int32_t fy = -1;
            if (im->vs == 2) {
                fy = (y & 1) ? cy + 1 : cy - 1;
                fy = fy < 0 ? 0 : fy >= im->ch ? im->ch - 1 : fy;
            }
            for (int c = 1; c < 3; c++) {
                const uint8_t *near = im->plane[c] + (size_t)cy * im->stride[c];
                const uint8_t *far = fy >= 0 ? im->plane[c] + (size_t)fy * im->stride[c] : NULL;
                uint8_t *dst = c == 1 ? urow : vrow;
#if HAVE_AVX2_KERNELS
                if (avx2) {
                    up_row_avx2(near, far, x0, W, dst);
                    continue;
                }
#endif
                up_row_c(near, far, x0, W, dst);
            }
            U = urow;
            V = vrow;
        } else {
            U = im->plane[1] + (size_t)y * im->stride[1] + x0;
            V = im->plane[2] + (size_t)y * im->stride[2] + x0;
        }
        float *d0 = out + (size_t)i * (size_t)W, *d1 = d0 + plane, *d2 = d1 + plane;
#if HAVE_AVX2_KERNELS
        if (avx2) {
            conv_row_avx2(Y, U, V, W, mirrored, &n, d0, d1, d2, stream);
            continue;
        }
#endif
        conv_row_c(Y, U, V, 0, W, mirrored, &n, d0, d1, d2);
    }
#if HAVE_STREAM
    if (stream) _mm_sfence(); /* order the streamed stores before whatever publishes the batch */
#endif
    return MX_OK;
}

/* The sample's random choices (crop origin, mirror, contrast and
 * illumination factors) from its key, for an image of w x h. */
static void choose(const mx_aug_params *p, int32_t w, int32_t h, uint64_t key, int32_t *x0, int32_t *y0,
                   bool *mirrored, float *mult, float *bias)
{
    mx_aug_rng g;
    mx_aug_rng_seed(&g, key);
    *y0 = (h - p->height) / 2;
    *x0 = (w - p->width) / 2;
    if (p->rand_crop) {
        *y0 = (int32_t)mx_aug_rng_upto(&g, (uint64_t)(h - p->height));
        *x0 = (int32_t)mx_aug_rng_upto(&g, (uint64_t)(w - p->width));
    }
    bool coin = (mx_aug_rng_next(&g) >> 63) != 0;
    *mirrored = p->mirror || (p->rand_mirror && coin);
    float u_contrast = mx_aug_rng_uniform(&g), u_illum = mx_aug_rng_uniform(&g);
    plane_factors(p, u_contrast, u_illum, mult, bias);
}

static void fill_info(mx_aug_info *info, int32_t w, int32_t h, int32_t c, int32_t cw, int32_t ch, int32_t x0,
                      int32_t y0, bool mirrored)
{
    if (!info) return;
    *info = (mx_aug_info){.decoded_width = w, .decoded_height = h, .decoded_channels = c, .width = cw,
                          .height = ch, .crop_x = x0, .crop_y = y0, .mirrored = mirrored};
}

/* The crop of planes that cover the sample. */
static mx_status process_yuv(const mx_aug_params *p, mx_aug_scratch *s, const yuv_image *im, uint64_t key, float *out,
                             mx_aug_info *info)
{
    int32_t x0, y0;
    bool mirrored;
    float mult[4], bias[4];
    choose(p, im->width, im->height, key, &x0, &y0, &mirrored, mult, bias);
    MX_TRY(write_sample_yuv(p, s, im, x0, y0, mirrored, mult, bias, out));
    fill_info(info, im->width, im->height, 3, im->width, im->height, x0, y0, mirrored);
    if (info) info->planar = true;
    return MX_OK;
}

mx_status mx_aug_process(const mx_aug_params *p, mx_aug_scratch *scratch, const void *data, size_t size,
                         uint64_t key, float *out, mx_aug_info *info)
{
    mx_image_jpeg_layout lay = {0};
    const bool jpeg = scratch && read_layout(data, size, &lay);
    yuv_image planes = {0};
    if (jpeg && yuv_eligible(p, scratch, &lay) && decode_yuv(scratch, data, size, &lay, &planes))
        return process_yuv(p, scratch, &planes, key, out, info);

    work_image w = {0};
    MX_TRY(decode(scratch, data, size, jpeg ? &lay : NULL, p->channels, &w));
    const int32_t dw = w.img.width, dh = w.img.height, dc = w.img.channels;
    mx_status s = MX_OK;
    if (w.img.channels != p->channels)
        s = MX_ERROR(MX_ERR_FORMAT, "the image has %d channels but data_shape asks for %d (C = 4 needs RGBA images)",
                     (int)w.img.channels, (int)p->channels);
    if (s == MX_OK && p->resize > 0) s = resize_shorter(&w, p->resize);
    if (s == MX_OK && p->pad > 0) s = pad_border(&w, p->pad, p->fill_value);
    if (s == MX_OK) s = cover(&w, p->height, p->width);
    if (s != MX_OK) {
        if (info) fill_info(info, dw, dh, dc, 0, 0, 0, 0, false);
        work_free(&w);
        return s;
    }
    const mx_image *img = &w.img;
    int32_t x0, y0;
    bool mirrored;
    float mult[4], bias[4];
    choose(p, img->width, img->height, key, &x0, &y0, &mirrored, mult, bias);
    if (p->mean_img || p->lut_valid) {
        write_sample(p, img, x0, y0, mirrored, p->lut, mult, bias, out);
    } else {
        float lut[4][256];
        fill_lut(p, mult, bias, lut);
        write_sample(p, img, x0, y0, mirrored, (const float(*)[256])lut, mult, bias, out);
    }
    fill_info(info, dw, dh, dc, img->width, img->height, x0, y0, mirrored);
    work_free(&w);
    return MX_OK;
}

mx_status mx_aug_process_planes(const mx_aug_params *p, mx_aug_scratch *scratch, const uint8_t *const planes[3],
                                const int32_t strides[3], int32_t width, int32_t height, int32_t hs, int32_t vs,
                                uint64_t key, float *out, mx_aug_info *info)
{
    if (!scratch || !planes || !strides || p->channels != 3 || width < p->width || height < p->height ||
        !((hs == 1 && vs == 1) || (hs == 2 && vs == 1) || (hs == 2 && vs == 2)) ||
        (hs == 2 && (width + 1) / 2 <= 2) || p->mean_img)
        return MX_ERROR(MX_ERR_INVALID, "mx_aug_process_planes: unsupported arguments");
    yuv_image im;
    if (!yuv_alloc(scratch, width, height, hs, vs, &im)) return MX_ERR_NOMEM;
    for (int c = 0; c < 3; c++) {
        const int32_t pw = c ? im.cw : width, ph = c ? im.ch : height;
        for (int32_t r = 0; r < ph; r++)
            memcpy((uint8_t *)im.plane[c] + (size_t)r * im.stride[c], planes[c] + (size_t)r * (size_t)strides[c],
                   (size_t)pw);
    }
    yuv_edges(&im);
    return process_yuv(p, scratch, &im, key, out, info);
}
