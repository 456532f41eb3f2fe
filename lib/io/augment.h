/*
 * augment.h - one encoded image to one (C, H, W) float32 sample, as MXNet's
 * ImageRecordIter does it per image (mxnet-formats.md 3.2; MXNet 1.9.1
 * src/io/iter_image_recordio_2.cc ParseChunk/ProcessImage and
 * src/io/image_aug_default.cc), in this order:
 *
 *   1. decode (lib/image): C = 1 grey, C = 3 RGB, C = 4 as stored and it
 *      must have 4 channels. A JPEG's EXIF orientation is NOT applied, as
 *      MXNet's TurboJPEG path (TJimdecode) does not apply it;
 *   2. resize > 0: the shorter side becomes `resize`, the other
 *      resize * long / short (integer division), bilinear (OpenCV-exact);
 *   3. pad > 0: a border of `pad` pixels of fill_value on every side
 *      (cv::copyMakeBorder with Scalar(v, v, v): an alpha channel gets 0);
 *   4. an image still smaller than H x W in a side is scaled up, keeping
 *      its aspect ratio, until it covers H x W (spec 3.2 step 4): the
 *      binding side becomes exactly H (or W), the other
 *      ceil(other * H / side) (bilinear). MXNet 1.x aborts there instead;
 *   5. crop H x W at y = (rows - H) / 2, x = (cols - W) / 2, or, with
 *      rand_crop, y uniform in [0, rows - H] then x in [0, cols - W];
 *   6. mirror when `mirror`, or when rand_mirror and a fair coin says so:
 *      output column j takes cropped column W - 1 - j;
 *   7. planes in RGB(A) order (lib/image decodes to RGB, which is where
 *      MXNet ends after its BGR->RGB swap) and, in float32 exactly as
 *      MXNet: out = (pixel - mean_c) * mult_c + bias_c with
 *      mult_c = (float)contrast / std_c, bias_c = (float)illumination /
 *      std_c, contrast = (u1 * mrc * 2 - mrc + 1) * scale and
 *      illumination = (u2 * mri * 2 - mri) * scale (mrc, mri: the
 *      max_random_contrast / max_random_illumination parameters; both 0
 *      give contrast = scale, illumination = 0, i.e. the familiar
 *      (pixel - mean) * scale / std). mean_r/std_r go with plane 0 (also
 *      for grey images). With a mean image, mean_img[c][i][j] at the
 *      cropped, unmirrored position replaces mean_c.
 *
 * Randomness: every random choice of a sample (crop offsets, mirror coin,
 * contrast, illumination, in that order) comes from a small generator
 * seeded by a 64-bit key the caller derives from the seed and the sample's
 * place in the data stream, so results do not depend on which thread runs
 * the sample. (MXNet's per-thread mt19937 streams depend on scheduling and
 * are not reproduced.)
 *
 * Thread-safety: mx_aug_process only reads the params; any number of
 * threads may use one params struct at once.
 */
#ifndef MX_IO_AUGMENT_H
#define MX_IO_AUGMENT_H

#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mx_aug_params {
    int32_t channels, height, width; /* the output sample (C, H, W); C in {1, 3, 4} */
    int32_t resize;                  /* shorter side, or <= 0: off */
    int32_t pad;                     /* >= 0 */
    uint8_t fill_value;
    bool rand_crop, rand_mirror, mirror;
    float mean[4], std[4];           /* per output plane: R, G, B, A (plane 0 for grey) */
    float scale;
    float max_random_contrast, max_random_illumination;
    const float *mean_img;           /* (C, H, W), or NULL: mean[] */
    bool portable;                   /* only the portable C kernels, also on the YCbCr path, which without
                                        AVX2 is otherwise not taken (tests compare them with the SIMD ones) */
    /* Filled by mx_aug_prepare: the value of every byte in every plane when
     * contrast and illumination are fixed; whether the AVX2 kernels run. */
    float lut[4][256];
    bool lut_valid;
    bool bias_matters; /* lut_valid and adding the bias changes some value (else it is left out) */
    bool avx2;
} mx_aug_params;

/* What one call did, for tests and diagnostics. */
typedef struct mx_aug_info {
    int32_t decoded_width, decoded_height, decoded_channels;
    int32_t width, height;  /* the image the crop was taken from */
    int32_t crop_x, crop_y;
    bool mirrored;
    bool planar;            /* took the YCbCr fast path (mx_aug_scratch) */
} mx_aug_info;

/* Checks the params (MX_ERR_INVALID naming the problem) and fills the LUT. */
mx_status mx_aug_prepare(mx_aug_params *p);

/* One thread's reusable decoder state: a TurboJPEG handle and pixel
 * buffers, so ordinary JPEGs (8-bit grey or YCbCr, within lib/image's size
 * limits) decode without allocating; everything else (PNG, CMYK, data
 * TurboJPEG rejects) goes through lib/image's mx_image_decode_ex, whose
 * messages the errors then carry. Same flags and pixels either way.
 *
 * The YCbCr fast path: a colour (C = 3) sample cropped straight from a
 * YCbCr JPEG with 4:4:4, 4:2:2 or 4:2:0 sampling (no resize, pad or
 * cover-upscale, no mean_img) is decoded to its Y, Cb and Cr planes
 * (tjDecompressToYUVPlanes: no upsampling or colour conversion inside
 * libjpeg), and only the cropped pixels are upsampled (libjpeg's "fancy"
 * triangle filter), converted to RGB (libjpeg's fixed-point YCbCr->RGB)
 * and normalised, row by row, into the output, with AVX2 (a CPU without
 * it decodes to RGB as before): the same bits as decoding to RGB first
 * (tests compare the two). Start it zeroed; one per thread. */
typedef struct mx_aug_scratch {
    void *tj;     /* tjhandle */
    uint8_t *buf; /* RGB / grey pixels */
    size_t cap;
    uint8_t *yuv; /* Y, Cb, Cr planes */
    size_t yuv_cap;
    uint8_t *rows; /* one upsampled Cb and Cr row */
    size_t rows_cap;
} mx_aug_scratch;

void mx_aug_scratch_free(mx_aug_scratch *s);

/* Decodes `size` bytes of JPEG/PNG and writes the (C, H, W) sample to
 * `out` (C * H * W floats). `key` seeds the sample's random choices.
 * `scratch` (may be NULL) is the calling thread's decoder state.
 * `info` may be NULL. Errors (nothing useful written to out):
 * MX_ERR_FORMAT for data that is not a decodable image or has the wrong
 * channel count for C = 4, MX_ERR_UNSUPPORTED for images over lib/image's
 * size limit, MX_ERR_INVALID when a resize would give an empty side,
 * MX_ERR_NOMEM. */
mx_status mx_aug_process(const mx_aug_params *p, mx_aug_scratch *scratch, const void *data, size_t size,
                         uint64_t key, float *out, mx_aug_info *info);

/* The YCbCr fast path's second half (crop, upsample, convert, normalise)
 * on planes given directly, for tests: Y is width x height, Cb and Cr
 * ceil(width / hs) x ceil(height / vs) (hs x vs: 1x1, 2x1 or 2x2; with
 * hs = 2 at least 5 columns), rows strides[] bytes apart. The planes are
 * copied into `scratch` (required); C must be 3, the image must cover the
 * sample, no mean_img. MX_ERR_INVALID otherwise. */
mx_status mx_aug_process_planes(const mx_aug_params *p, mx_aug_scratch *scratch, const uint8_t *const planes[3],
                                const int32_t strides[3], int32_t width, int32_t height, int32_t hs, int32_t vs,
                                uint64_t key, float *out, mx_aug_info *info);

/* The per-sample generator (splitmix64), exposed for tests. */
typedef struct mx_aug_rng {
    uint64_t state;
} mx_aug_rng;

/* Key of sample `pos` of data-stream pass `pass` under `seed`. */
uint64_t mx_aug_key(uint64_t seed, uint64_t pass, uint64_t pos);
void mx_aug_rng_seed(mx_aug_rng *g, uint64_t key);
uint64_t mx_aug_rng_next(mx_aug_rng *g);
/* Uniform integer in [0, n] (inclusive, unbiased). */
uint64_t mx_aug_rng_upto(mx_aug_rng *g, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float mx_aug_rng_uniform(mx_aug_rng *g);

#endif /* MX_IO_AUGMENT_H */
