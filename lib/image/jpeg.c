/*
 * jpeg.c - JPEG decode/encode through libjpeg-turbo's TurboJPEG API, plus a
 * small bounds-checked marker walker for the frame header (size and
 * component count, read before anything is allocated) and the EXIF
 * orientation tag.
 *
 * Decoding uses TJFLAG_STOPONWARNING: data libjpeg can only decode with a
 * warning (premature end of data, corrupt entropy data, extraneous bytes)
 * is reported as MX_ERR_FORMAT, not returned half grey. TurboJPEG handles
 * are created per call, so every function is thread-safe.
 */
#include "image/image.h"

#include <string.h>
#include <turbojpeg.h>

#ifndef TJFLAG_LIMITSCANS
#define TJFLAG_LIMITSCANS 0
#endif

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

/* ---- marker walk ---------------------------------------------------------- */

typedef struct jpeg_header {
    int32_t width, height, components, precision;
    int found_sof;
    int orientation; /* 1..8 */
    /* what libjpeg bases its colour-space guess on (jdapimin.c
     * default_decompress_parms), and the sampling of each component */
    int saw_jfif, saw_adobe, adobe_transform;
    int32_t comp_id[4], h_samp[4], v_samp[4];
} jpeg_header;

static int exif_orientation(const uint8_t *p, size_t n)
{
    /* p: APP1 payload after the length field. "Exif\0\0" then TIFF. */
    if (n < 6 + 8 || memcmp(p, "Exif\0\0", 6) != 0) return 0;
    const uint8_t *t = p + 6;
    size_t tn = n - 6;
    int le;
    if (t[0] == 'I' && t[1] == 'I') le = 1;
    else if (t[0] == 'M' && t[1] == 'M') le = 0;
    else return 0;
#define RD16(q) (le ? (uint32_t)(q)[0] | (uint32_t)(q)[1] << 8 : be16(q))
#define RD32(q) (le ? (uint32_t)(q)[0] | (uint32_t)(q)[1] << 8 | (uint32_t)(q)[2] << 16 | (uint32_t)(q)[3] << 24 \
                    : (uint32_t)(q)[0] << 24 | (uint32_t)(q)[1] << 16 | (uint32_t)(q)[2] << 8 | (uint32_t)(q)[3])
    if (RD16(t + 2) != 42) return 0;
    uint32_t ifd = RD32(t + 4);
    if (ifd > tn || tn - ifd < 2) return 0;
    uint32_t count = RD16(t + ifd);
    if ((tn - ifd - 2) / 12 < count) return 0;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + ifd + 2 + 12 * (size_t)i;
        if (RD16(e) == 0x0112) {
            uint32_t type = RD16(e + 2);
            uint32_t v = type == 3 ? RD16(e + 8) : type == 4 ? RD32(e + 8) : 0;
            return v >= 1 && v <= 8 ? (int)v : 0;
        }
    }
    return 0;
#undef RD16
#undef RD32
}

/* Walks the markers up to the first SOS. Returns MX_ERR_FORMAT when the
 * stream ends or is malformed before a frame header was found. */
static mx_status jpeg_parse_header(const uint8_t *d, size_t n, jpeg_header *h)
{
    memset(h, 0, sizeof(*h));
    h->orientation = 1;
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return MX_ERROR(MX_ERR_FORMAT, "not a JPEG image (no SOI marker)");
    size_t pos = 2;
    int exif_seen = 0;
    for (;;) {
        /* a marker: one or more 0xFF, then the code */
        if (pos >= n || d[pos] != 0xFF) {
            if (h->found_sof) return MX_OK;
            return MX_ERROR(MX_ERR_FORMAT, "corrupt JPEG: %s at byte %zu before the frame header",
                            pos >= n ? "data ends" : "no marker", pos);
        }
        while (pos < n && d[pos] == 0xFF) pos++;
        if (pos >= n) break;
        uint8_t m = d[pos++];
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* no length */
        if (m == 0xD9 || m == 0xDA) break;                                 /* EOI, SOS */
        if (n - pos < 2) break;
        size_t len = be16(d + pos);
        if (len < 2 || len > n - pos) {
            if (h->found_sof) return MX_OK;
            return MX_ERROR(MX_ERR_FORMAT, "truncated JPEG: segment 0xFF%02X at byte %zu claims %zu bytes",
                            m, pos - 2, len);
        }
        const uint8_t *seg = d + pos + 2;
        size_t seg_len = len - 2;
        int is_sof = (m >= 0xC0 && m <= 0xCF) && m != 0xC4 && m != 0xC8 && m != 0xCC;
        if (is_sof && !h->found_sof) {
            if (seg_len < 6) return MX_ERROR(MX_ERR_FORMAT, "corrupt JPEG: short frame header");
            h->precision = seg[0];
            h->height = (int32_t)be16(seg + 1);
            h->width = (int32_t)be16(seg + 3);
            h->components = seg[5];
            h->found_sof = 1;
            for (int c = 0; c < h->components && c < 4 && seg_len >= 6 + 3 * (size_t)(c + 1); c++) {
                h->comp_id[c] = seg[6 + 3 * c];
                h->h_samp[c] = seg[7 + 3 * c] >> 4;
                h->v_samp[c] = seg[7 + 3 * c] & 15;
            }
        } else if (m == 0xE0 && seg_len >= 14 && !memcmp(seg, "JFIF", 5)) {
            h->saw_jfif = 1;
        } else if (m == 0xEE && seg_len >= 12 && !memcmp(seg, "Adobe", 5)) {
            h->saw_adobe = 1;
            h->adobe_transform = seg[11];
        } else if (m == 0xE1 && !exif_seen) {
            int o = exif_orientation(seg, seg_len);
            if (o) {
                h->orientation = o;
                exif_seen = 1;
            }
        }
        pos += len;
    }
    if (!h->found_sof)
        return MX_ERROR(MX_ERR_FORMAT, "corrupt or truncated JPEG: no frame header before the scan data");
    return MX_OK;
}

static mx_status check_header(const jpeg_header *h, uint64_t max_pixels)
{
    if (h->width < 1 || h->height < 1)
        return MX_ERROR(MX_ERR_FORMAT, "corrupt JPEG: frame size %dx%d", (int)h->width, (int)h->height);
    if (h->components != 1 && h->components != 3 && h->components != 4)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "JPEG with %d colour components is not supported",
                        (int)h->components);
    if (h->precision != 8)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "%d-bit JPEG is not supported (8-bit only)",
                        (int)h->precision);
    uint64_t px = (uint64_t)h->width * (uint64_t)h->height;
    if (px > max_pixels)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "JPEG of %dx%d pixels exceeds the limit of %llu pixels",
                        (int)h->width, (int)h->height, (unsigned long long)max_pixels);
    return MX_OK;
}

int mx_image_jpeg_exif_orientation(const uint8_t *data, size_t size)
{
    jpeg_header h;
    if (!data || jpeg_parse_header(data, size, &h) != MX_OK) {
        mx_error_clear();
        return 1;
    }
    return h.orientation;
}

mx_status mx_image_jpeg_probe(const uint8_t *data, size_t size, mx_image_info *info)
{
    jpeg_header h;
    MX_TRY(jpeg_parse_header(data, size, &h));
    MX_TRY(check_header(&h, UINT64_MAX));
    info->format = MX_IMAGE_FORMAT_JPEG;
    info->width = h.width;
    info->height = h.height;
    info->channels = h.components == 1 ? 1 : 3;
    info->orientation = h.orientation;
    return MX_OK;
}

mx_status mx_image_jpeg_layout_read(const void *data, size_t size, mx_image_jpeg_layout *out)
{
    if (!data || !out) return MX_ERROR(MX_ERR_INVALID, "mx_image_jpeg_layout_read: NULL argument");
    jpeg_header h;
    MX_TRY(jpeg_parse_header(data, size, &h));
    MX_TRY(check_header(&h, UINT64_MAX));
    memset(out, 0, sizeof(*out));
    out->width = h.width;
    out->height = h.height;
    out->components = h.components;
    for (int c = 0; c < h.components; c++) {
        out->h_samp[c] = h.h_samp[c];
        out->v_samp[c] = h.v_samp[c];
    }
    if (h.components == 3) {
        /* libjpeg's guess: JFIF implies YCbCr; else an Adobe marker's
         * transform (0 RGB, 1 YCbCr, others warned about: not claimed
         * here); else component ids 'R','G','B' mean RGB, anything else
         * YCbCr. */
        if (h.saw_jfif) out->ycbcr = 1;
        else if (h.saw_adobe) out->ycbcr = h.adobe_transform == 1;
        else out->ycbcr = !(h.comp_id[0] == 'R' && h.comp_id[1] == 'G' && h.comp_id[2] == 'B');
    }
    return MX_OK;
}

/* ---- decode --------------------------------------------------------------- */

/* OpenCV's icvCvt_CMYK2BGR_8u_C4C3R for Adobe (inverted) CMYK, to RGB. */
static void cmyk_to_rgb(const uint8_t *s, uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++, s += 4, d += 3) {
        int c = s[0], m = s[1], y = s[2], k = s[3];
        d[0] = (uint8_t)(k - ((255 - c) * k >> 8));
        d[1] = (uint8_t)(k - ((255 - m) * k >> 8));
        d[2] = (uint8_t)(k - ((255 - y) * k >> 8));
    }
}

mx_status mx_image_jpeg_decode(const uint8_t *data, size_t size, const mx_image_decode_opts *opts,
                               mx_image *out)
{
    jpeg_header h;
    MX_TRY(jpeg_parse_header(data, size, &h));
    MX_TRY(check_header(&h, opts->max_pixels));
    if (size > (size_t)0xFFFFFFFFu)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "JPEG of %zu bytes is too large for TurboJPEG", size);

    int cmyk = h.components == 4;
    int gray_out = opts->color == MX_IMAGE_GRAY ||
                   (opts->color == MX_IMAGE_UNCHANGED && h.components == 1);
    int pf = cmyk ? TJPF_CMYK : gray_out ? TJPF_GRAY : TJPF_RGB;
    int32_t dec_channels = cmyk ? 4 : gray_out ? 1 : 3;

    mx_image img;
    MX_TRY(mx_image_create(h.width, h.height, dec_channels, &img));
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        mx_image_free(&img);
        return MX_ERROR(MX_ERR_NOMEM, "cannot create a TurboJPEG decoder: %s", tjGetErrorStr2(NULL));
    }
    int rc = tjDecompress2(tj, data, (unsigned long)size, img.data, h.width, 0, h.height, pf,
                           TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS);
    if (rc != 0) {
        int warning = tjGetErrorCode(tj) == TJERR_WARNING;
        mx_status st = MX_ERROR(MX_ERR_FORMAT, "%s JPEG: %s",
                                warning ? "truncated or corrupt" : "cannot decode",
                                tjGetErrorStr2(tj));
        tjDestroy(tj);
        mx_image_free(&img);
        return st;
    }
    tjDestroy(tj);

    if (cmyk) {
        mx_image rgb;
        mx_status st = mx_image_create(h.width, h.height, 3, &rgb);
        if (st == MX_OK) {
            cmyk_to_rgb(img.data, rgb.data, (size_t)h.width * (size_t)h.height);
            if (gray_out || opts->color == MX_IMAGE_GRAY) {
                mx_image g;
                st = mx_image_convert(&rgb, 1, &g);
                mx_image_free(&rgb);
                rgb = g;
            }
        }
        mx_image_free(&img);
        if (st != MX_OK) return st;
        img = rgb;
    }
    if (opts->color != MX_IMAGE_UNCHANGED && !opts->ignore_orientation && h.orientation != 1) {
        mx_image o;
        mx_status st = mx_image_orient(&img, h.orientation, &o);
        mx_image_free(&img);
        if (st != MX_OK) return st;
        img = o;
    }
    *out = img;
    return MX_OK;
}

/* ---- encode --------------------------------------------------------------- */

mx_status mx_image_encode_jpeg(const mx_image *img, int quality, uint8_t **out, size_t *size)
{
    if (!out || !size) return MX_ERROR(MX_ERR_INVALID, "mx_image_encode_jpeg: NULL output");
    *out = NULL;
    *size = 0;
    if (!img || !img->data || img->width < 1 || img->height < 1 ||
        (img->channels != 1 && img->channels != 3 && img->channels != 4))
        return MX_ERROR(MX_ERR_INVALID, "mx_image_encode_jpeg: not a valid image");
    if (quality < 1 || quality > 100)
        return MX_ERROR(MX_ERR_INVALID, "JPEG quality must be 1..100, not %d", quality);
    if (img->width > 65500 || img->height > 65500)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "JPEG cannot hold %dx%d pixels (65500 a side at most)",
                        (int)img->width, (int)img->height);
    int pf = img->channels == 1 ? TJPF_GRAY : img->channels == 3 ? TJPF_RGB : TJPF_RGBX;
    int samp = img->channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
    tjhandle tj = tjInitCompress();
    if (!tj) return MX_ERROR(MX_ERR_NOMEM, "cannot create a TurboJPEG encoder: %s", tjGetErrorStr2(NULL));
    unsigned char *buf = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, img->data, img->width, 0, img->height, pf, &buf, &len, samp, quality,
                    TJFLAG_ACCURATEDCT) != 0) {
        mx_status st = MX_ERROR(MX_ERR_RUNTIME, "JPEG encoding failed: %s", tjGetErrorStr2(tj));
        tjFree(buf);
        tjDestroy(tj);
        return st;
    }
    tjDestroy(tj);
    uint8_t *copy = mx_malloc(len);
    if (!copy) {
        tjFree(buf);
        return MX_ERR_NOMEM;
    }
    memcpy(copy, buf, len);
    tjFree(buf);
    *out = copy;
    *size = len;
    return MX_OK;
}
