/*
 * png.c - PNG decode/encode through libpng's classic API, from and to
 * memory. libpng reports errors by longjmp; each call keeps its state in a
 * context struct reached through a pointer that does not change after
 * setjmp, so cleanup after a longjmp is well defined. Warnings (bad
 * ancillary chunks, sRGB profile notes) are ignored, as OpenCV does.
 *
 * Decode transforms follow OpenCV's PngDecoder::readData: 16 -> 8 bits,
 * palette -> RGB, low-bit gray expanded, gray -> RGB for colour output,
 * rgb_to_gray(0.299, 0.587) for gray output, alpha stripped unless the
 * output has 4 channels (then tRNS becomes alpha). The image must be
 * complete through IEND (png_read_end), as OpenCV requires.
 */
#include "image/image.h"

#include <png.h>
#include <setjmp.h>
#include <string.h>

typedef struct png_ctx {
    const uint8_t *data; /* decode: input */
    size_t size, pos;
    uint8_t *out; /* encode: growing output */
    size_t out_len, out_cap;
    int nomem;
    char msg[200];
    mx_image img;
    png_bytep *rows;
} png_ctx;

static void on_error(png_structp png, png_const_charp msg)
{
    png_ctx *c = png_get_error_ptr(png);
    if (c && !c->msg[0]) snprintf(c->msg, sizeof(c->msg), "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_ctx *c = png_get_io_ptr(png);
    if (n > c->size - c->pos) {
        snprintf(c->msg, sizeof(c->msg), "data ends at byte %zu (truncated file)", c->size);
        png_error(png, c->msg);
    }
    memcpy(out, c->data + c->pos, n);
    c->pos += n;
}

/* Output channels OpenCV gives for IMREAD_UNCHANGED. */
static int unchanged_channels(int color_type, int has_trns)
{
    switch (color_type) {
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_PALETTE: return has_trns ? 4 : 3;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;
    }
}

static mx_status png_open(png_ctx *c, png_structp *png, png_infop *info)
{
    *png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, on_error, on_warning);
    if (!*png) return MX_ERROR(MX_ERR_NOMEM, "cannot create a libpng reader");
    *info = png_create_info_struct(*png);
    if (!*info) {
        png_destroy_read_struct(png, NULL, NULL);
        return MX_ERROR(MX_ERR_NOMEM, "cannot create a libpng info struct");
    }
    return MX_OK;
}

mx_status mx_image_png_probe(const uint8_t *data, size_t size, mx_image_info *info_out)
{
    png_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    png_ctx *c = &ctx;
    c->data = data;
    c->size = size;
    png_structp png;
    png_infop info;
    MX_TRY(png_open(c, &png, &info));
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return MX_ERROR(MX_ERR_FORMAT, "bad PNG header: %s", c->msg);
    }
    png_set_read_fn(png, c, read_mem);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int ct = png_get_color_type(png, info);
    int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    png_destroy_read_struct(&png, &info, NULL);
    if (w > MX_IMAGE_MAX_SIDE || h > MX_IMAGE_MAX_SIDE)
        return MX_ERROR(MX_ERR_UNSUPPORTED, "PNG of %lux%lu pixels is over %d a side",
                        (unsigned long)w, (unsigned long)h, MX_IMAGE_MAX_SIDE);
    info_out->format = MX_IMAGE_FORMAT_PNG;
    info_out->width = (int32_t)w;
    info_out->height = (int32_t)h;
    info_out->channels = unchanged_channels(ct, trns);
    info_out->orientation = 1;
    return MX_OK;
}

mx_status mx_image_png_decode(const uint8_t *data, size_t size, const mx_image_decode_opts *opts,
                              mx_image *out)
{
    png_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    png_ctx *c = &ctx;
    c->data = data;
    c->size = size;
    png_structp png;
    png_infop info;
    MX_TRY(png_open(c, &png, &info));
    mx_status st = MX_OK;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        mx_free(c->rows);
        mx_image_free(&c->img);
        if (c->nomem) return MX_ERR_NOMEM;
        return MX_ERROR(MX_ERR_FORMAT, "corrupt or truncated PNG: %s", c->msg);
    }
    png_set_read_fn(png, c, read_mem);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int depth = png_get_bit_depth(png, info);
    int ct = png_get_color_type(png, info);
    int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    uint64_t px = (uint64_t)w * (uint64_t)h;
    if (px > opts->max_pixels || w > MX_IMAGE_MAX_SIDE || h > MX_IMAGE_MAX_SIDE) {
        png_destroy_read_struct(&png, &info, NULL);
        return MX_ERROR(MX_ERR_UNSUPPORTED, "PNG of %lux%lu pixels exceeds the limit of %llu pixels",
                        (unsigned long)w, (unsigned long)h, (unsigned long long)opts->max_pixels);
    }
    /* Deflate expands at most 1032:1, so a file too small to hold its
     * pixel data (a 74-byte "PNG" declaring 16000x16000) is truncated:
     * say so before allocating hundreds of MiB for pixels that never come. */
    uint64_t raw = (uint64_t)h * (((uint64_t)w * (uint64_t)depth * png_get_channels(png, info) + 7) / 8);
    if (raw / 1032 > size) {
        png_destroy_read_struct(&png, &info, NULL);
        return MX_ERROR(MX_ERR_FORMAT,
                        "corrupt or truncated PNG: its header declares %lux%lu pixels (%llu bytes of pixel data) but "
                        "the file has %zu bytes, too few to hold them compressed",
                        (unsigned long)w, (unsigned long)h, (unsigned long long)raw, size);
    }
    int channels = opts->color == MX_IMAGE_GRAY    ? 1
                   : opts->color == MX_IMAGE_COLOR ? 3
                                                   : unchanged_channels(ct, trns);
    int is_color = (ct & PNG_COLOR_MASK_COLOR) != 0 || ct == PNG_COLOR_TYPE_PALETTE;
    if (depth == 16) png_set_strip_16(png);
    if (channels < 4) png_set_strip_alpha(png);
    else png_set_tRNS_to_alpha(png);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (!is_color && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (!is_color && channels > 1) png_set_gray_to_rgb(png);
    else if (is_color && channels == 1) png_set_rgb_to_gray(png, 1, 0.299, 0.587);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * (size_t)channels ||
        png_get_channels(png, info) != channels || png_get_bit_depth(png, info) != 8) {
        snprintf(c->msg, sizeof(c->msg), "unexpected row layout after transforms");
        png_error(png, c->msg);
    }
    st = mx_image_create((int32_t)w, (int32_t)h, channels, &c->img);
    if (st == MX_OK) {
        c->rows = mx_malloc(sizeof(png_bytep) * h);
        if (!c->rows) st = MX_ERR_NOMEM;
    }
    if (st != MX_OK) {
        png_destroy_read_struct(&png, &info, NULL);
        mx_free(c->rows);
        mx_image_free(&c->img);
        return st;
    }
    for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->img.data + (size_t)y * w * (size_t)channels;
    png_read_image(png, c->rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    mx_free(c->rows);
    *out = c->img;
    return MX_OK;
}

/* ---- encode --------------------------------------------------------------- */

static void write_mem(png_structp png, png_bytep in, png_size_t n)
{
    png_ctx *c = png_get_io_ptr(png);
    if (n > c->out_cap - c->out_len) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap - c->out_len < n) {
            if (cap > SIZE_MAX / 2) {
                c->nomem = 1;
                png_error(png, "PNG output too large");
            }
            cap *= 2;
        }
        uint8_t *p = mx_realloc(c->out, cap);
        if (!p) {
            c->nomem = 1;
            png_error(png, "out of memory");
        }
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, in, n);
    c->out_len += n;
}

static void flush_mem(png_structp png) { (void)png; }

mx_status mx_image_encode_png(const mx_image *img, int level, uint8_t **out, size_t *size)
{
    if (!out || !size) return MX_ERROR(MX_ERR_INVALID, "mx_image_encode_png: NULL output");
    *out = NULL;
    *size = 0;
    if (!img || !img->data || img->width < 1 || img->height < 1 ||
        (img->channels != 1 && img->channels != 3 && img->channels != 4))
        return MX_ERROR(MX_ERR_INVALID, "mx_image_encode_png: not a valid image");
    if (level < 0 || level > 9)
        return MX_ERROR(MX_ERR_INVALID, "PNG compression level must be 0..9, not %d", level);
    png_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    png_ctx *c = &ctx;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, c, on_error, on_warning);
    if (!png) return MX_ERROR(MX_ERR_NOMEM, "cannot create a libpng writer");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return MX_ERROR(MX_ERR_NOMEM, "cannot create a libpng info struct");
    }
    c->rows = mx_malloc(sizeof(png_bytep) * (size_t)img->height);
    if (!c->rows) {
        png_destroy_write_struct(&png, &info);
        return MX_ERR_NOMEM;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        mx_free(c->rows);
        mx_free(c->out);
        if (c->nomem) return MX_ERROR(MX_ERR_NOMEM, "PNG encoding: %s", c->msg);
        return MX_ERROR(MX_ERR_RUNTIME, "PNG encoding failed: %s", c->msg);
    }
    int ct = img->channels == 1 ? PNG_COLOR_TYPE_GRAY
             : img->channels == 3 ? PNG_COLOR_TYPE_RGB
                                  : PNG_COLOR_TYPE_RGB_ALPHA;
    png_set_write_fn(png, c, write_mem, flush_mem);
    png_set_compression_level(png, level);
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, ct,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t stride = (size_t)img->width * (size_t)img->channels;
    for (int32_t y = 0; y < img->height; y++) c->rows[y] = img->data + (size_t)y * stride;
    png_write_image(png, c->rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    mx_free(c->rows);
    *out = c->out;
    *size = c->out_len;
    return MX_OK;
}
