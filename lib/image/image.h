/*
 * image.h - 8-bit images in memory: JPEG (libjpeg-turbo's TurboJPEG API) and
 * PNG (libpng) decode/encode, and the few pixel operations im2rec and the
 * image iterator need, with OpenCV's semantics where MXNet relies on them.
 *
 * Pixel layout: an mx_image is (height, width, channels) row-major with the
 * channels interleaved and no row padding. Channel ORDER is RGB / RGBA
 * (not OpenCV's BGR / BGRA): the files on disk are ordinary JPEG/PNG either
 * way, and the iterator wants RGB planes, which is what ImageRecordIter
 * produces after its BGR->RGB swap (spec 3.2 step 6). 1 channel = gray.
 *
 * Decoding follows cv2.imread(path, flag) as im2rec.py calls it:
 *   MX_IMAGE_COLOR (1)      3 channels; gray images replicated, alpha dropped
 *   MX_IMAGE_GRAY (0)       1 channel; colour JPEG -> its luma (Y) channel,
 *                           colour PNG -> libpng rgb_to_gray(0.299, 0.587)
 *   MX_IMAGE_UNCHANGED (-1) as stored: gray 1, colour 3, with alpha (PNG
 *                           RGBA, gray+alpha, palette with tRNS) 4
 * For COLOR and GRAY a JPEG's EXIF orientation tag is applied, as OpenCV
 * does (not for UNCHANGED). 16-bit PNGs are reduced to 8 bits (OpenCV keeps
 * 16 bits for UNCHANGED; this library is 8-bit only). CMYK/YCCK JPEGs are
 * converted to RGB with OpenCV's (Adobe-inverted) formula.
 *
 * Strictness: a JPEG that libjpeg decodes only with a warning (truncated
 * data, "Corrupt JPEG data: N extraneous bytes", ...) is an error here,
 * where OpenCV would silently return a partly grey image; a PNG must be
 * complete through IEND with correct CRCs on critical chunks (as OpenCV).
 * Images whose decoded size exceeds max_pixels (default MX_IMAGE_MAX_PIXELS)
 * are rejected from the header, before anything is allocated.
 *
 * Errors: every function returns an mx_status and sets mx_last_error();
 * bad or truncated image data is MX_ERR_FORMAT, an image over the size
 * limit MX_ERR_UNSUPPORTED, bad arguments MX_ERR_INVALID. All functions
 * are thread-safe (no shared state; codec handles are per call).
 */
#ifndef MX_IMAGE_IMAGE_H
#define MX_IMAGE_IMAGE_H

#include "base/base.h"

#include <stddef.h>
#include <stdint.h>

/* Default limit on width * height of a decoded or resized image. */
#define MX_IMAGE_MAX_PIXELS ((uint64_t)1 << 28)
/* Largest width or height accepted anywhere (JPEG's own limit is 65500). */
#define MX_IMAGE_MAX_SIDE 65535

typedef enum mx_image_format {
    MX_IMAGE_FORMAT_UNKNOWN = 0,
    MX_IMAGE_FORMAT_JPEG = 1,
    MX_IMAGE_FORMAT_PNG = 2,
} mx_image_format;

/* OpenCV imread flags, im2rec --color. */
typedef enum mx_image_color {
    MX_IMAGE_UNCHANGED = -1,
    MX_IMAGE_GRAY = 0,
    MX_IMAGE_COLOR = 1,
} mx_image_color;

typedef struct mx_image {
    uint8_t *data;    /* (height, width, channels), interleaved; owned (mx_free) */
    int32_t width;
    int32_t height;
    int32_t channels; /* 1 gray, 3 RGB, 4 RGBA */
} mx_image;

/* Allocates an uninitialised width x height x channels image (each side
 * 1..MX_IMAGE_MAX_SIDE, channels 1/3/4, at most MX_IMAGE_MAX_PIXELS). */
mx_status mx_image_create(int32_t width, int32_t height, int32_t channels, mx_image *out);
/* Frees the pixels and zeroes the struct; NULL or an empty image is a no-op. */
void mx_image_free(mx_image *img);
/* width * height * channels. */
size_t mx_image_bytes(const mx_image *img);

/* Recognises JPEG (FF D8 FF) and PNG (8-byte signature) by their magic. */
mx_image_format mx_image_sniff(const void *data, size_t size);
/* "jpeg", "png", "unknown". */
const char *mx_image_format_name(mx_image_format format);

/* What the header says, without decoding pixels. channels is the count
 * UNCHANGED decoding yields; orientation is the JPEG EXIF orientation
 * (1..8; 1 when absent or for PNG). */
typedef struct mx_image_info {
    mx_image_format format;
    int32_t width, height, channels;
    int32_t orientation;
} mx_image_info;

/* MX_ERR_FORMAT when the data is not a JPEG/PNG or its header is bad. */
mx_status mx_image_probe(const void *data, size_t size, mx_image_info *info);

/* A JPEG's frame layout, from its markers (no pixels decoded), for
 * decoders that take the YCbCr planes (TurboJPEG's
 * tjDecompressToYUVPlanes) rather than RGB pixels. */
typedef struct mx_image_jpeg_layout {
    int32_t width, height;
    int32_t components;           /* 1, 3 or 4 */
    int32_t h_samp[4], v_samp[4]; /* sampling factors of each component (1..4; 0 past `components`) */
    int32_t ycbcr;                /* 3 components that libjpeg decodes as YCbCr (its default colour-space guess) */
} mx_image_jpeg_layout;

/* MX_ERR_FORMAT when the data is not a JPEG or its header is bad,
 * MX_ERR_UNSUPPORTED for what lib/image does not decode (not 8-bit, not
 * 1, 3 or 4 components). */
mx_status mx_image_jpeg_layout_read(const void *data, size_t size, mx_image_jpeg_layout *out);

typedef struct mx_image_decode_opts {
    int32_t color;              /* mx_image_color */
    uint64_t max_pixels;        /* 0: MX_IMAGE_MAX_PIXELS */
    int32_t ignore_orientation; /* 1: never apply the EXIF orientation */
} mx_image_decode_opts;

/* Decodes a complete JPEG or PNG file held in memory into *out (which the
 * caller frees with mx_image_free; untouched on failure). */
mx_status mx_image_decode(const void *data, size_t size, mx_image_color color, mx_image *out);
mx_status mx_image_decode_ex(const void *data, size_t size, const mx_image_decode_opts *opts,
                             mx_image *out);

/* Baseline JPEG at quality 1..100 (4:2:0 for colour, as OpenCV's default;
 * accurate DCT); an alpha channel is dropped. PNG at zlib level 0..9 with
 * default filters. *out is malloc'd (free with mx_free). */
mx_status mx_image_encode_jpeg(const mx_image *img, int quality, uint8_t **out, size_t *size);
mx_status mx_image_encode_png(const mx_image *img, int level, uint8_t **out, size_t *size);

/*
 * Bilinear resize to width x height, OpenCV's cv2.resize INTER_LINEAR on
 * 8-bit data: half-pixel centres (src = (dst + 0.5) * scale - 0.5), edge
 * pixels repeated, 11-bit fixed-point weights, and the rounding of
 * OpenCV's SIMD vertical pass. Results are within 1 of the exact real-valued
 * bilinear interpolation. Same size copies.
 */
mx_status mx_image_resize(const mx_image *src, int32_t width, int32_t height, mx_image *dst);

/* Copies the rectangle (x, y, width, height), which must lie inside src. */
mx_status mx_image_crop(const mx_image *src, int32_t x, int32_t y, int32_t width, int32_t height,
                        mx_image *dst);

/* im2rec --center-crop: the central square whose side is the shorter edge;
 * the margin (long - short) / 2 (integer division) is cut from the start. */
mx_status mx_image_center_square(const mx_image *src, mx_image *dst);

/* im2rec --resize N: the size that makes the shorter edge N. If height >
 * width: (N, height * N / width) else (width * N / height, N), integer
 * division, as im2rec.py. MX_ERR_INVALID for non-positive inputs or a
 * result beyond MX_IMAGE_MAX_SIDE. */
mx_status mx_image_shorter_edge_size(int32_t width, int32_t height, int32_t edge, int32_t *out_width,
                                     int32_t *out_height);

/* Applies an EXIF orientation (1..8) as OpenCV's ApplyExifOrientation:
 * 2 flip left-right, 3 rotate 180, 4 flip top-bottom, 5 transpose,
 * 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise. */
mx_status mx_image_orient(const mx_image *src, int orientation, mx_image *dst);

/* Converts between 1, 3 and 4 channels: gray -> RGB replicates, alpha added
 * as 255 or dropped, RGB -> gray with OpenCV's fixed-point
 * (4899 R + 9617 G + 1868 B + 8192) >> 14. */
mx_status mx_image_convert(const mx_image *src, int32_t channels, mx_image *dst);

/* ---- internal, shared between image.c, jpeg.c and png.c --------------- */
mx_status mx_image_jpeg_decode(const uint8_t *data, size_t size, const mx_image_decode_opts *opts,
                               mx_image *out);
mx_status mx_image_jpeg_probe(const uint8_t *data, size_t size, mx_image_info *info);
mx_status mx_image_png_decode(const uint8_t *data, size_t size, const mx_image_decode_opts *opts,
                              mx_image *out);
mx_status mx_image_png_probe(const uint8_t *data, size_t size, mx_image_info *info);
/* The EXIF orientation in a JPEG's APP1 segment: 1..8, or 1 when absent or
 * unreadable (as OpenCV, a broken EXIF block is ignored). */
int mx_image_jpeg_exif_orientation(const uint8_t *data, size_t size);

#endif /* MX_IMAGE_IMAGE_H */
