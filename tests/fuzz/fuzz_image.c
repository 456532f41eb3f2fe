/*
 * fuzz_image.c - JPEG / PNG decoding (lib/image, libjpeg-turbo + libpng),
 * as im2rec and the image-record iterator decode a user's images. The
 * first byte picks the colour mode (UNCHANGED, GRAY, COLOR) and whether
 * the EXIF orientation is ignored; the rest is the file. The probe and the
 * JPEG layout reader must not crash; an image that decodes must have the
 * probed size (sides swapped by orientations 5-8) and the channels the
 * mode asks for, and must survive a PNG encode -> decode unchanged.
 *
 * The harness lowers the pixel limit to 2^22 (the library's default is
 * 2^28) so that one input cannot spend seconds and gigabytes on a large
 * but valid image; the limit itself is checked from the header.
 */
#include "fuzz.h"
#include "image/image.h"

#define FUZZ_MAX_PIXELS ((uint64_t)1 << 22)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    uint32_t opt = fuzz_take_u8(&in);
    mx_image_decode_opts opts = {
        .color = (int32_t)(opt % 3) - 1,
        .max_pixels = FUZZ_MAX_PIXELS,
        .ignore_orientation = (int32_t)(opt >> 2) & 1,
    };

    mx_image_info info;
    int probed = mx_image_probe(in.data, in.size, &info) == MX_OK;
    mx_image_jpeg_layout layout;
    (void)mx_image_jpeg_layout_read(in.data, in.size, &layout);

    mx_image img = {0};
    if (mx_image_decode_ex(in.data, in.size, &opts, &img) != MX_OK) {
        FUZZ_CHECK(img.data == NULL, "%s", "failed decode left pixels");
        return 0;
    }
    FUZZ_CHECK(probed, "%s", "decodes but does not probe");
    int32_t w = info.width, h = info.height;
    if (opts.color != MX_IMAGE_UNCHANGED && !opts.ignore_orientation && info.orientation >= 5) {
        w = info.height;
        h = info.width;
    }
    FUZZ_CHECK(img.width == w && img.height == h, "decoded %dx%d, probed %dx%d (orientation %d)", img.width,
               img.height, info.width, info.height, info.orientation);
    int32_t want = opts.color == MX_IMAGE_GRAY ? 1 : opts.color == MX_IMAGE_COLOR ? 3 : info.channels;
    FUZZ_CHECK(img.channels == want, "%d channels, expected %d", img.channels, want);

    uint8_t *png = NULL;
    size_t png_size = 0;
    FUZZ_OK(mx_image_encode_png(&img, 1, &png, &png_size));
    mx_image back = {0};
    FUZZ_OK(mx_image_decode(png, png_size, MX_IMAGE_UNCHANGED, &back));
    FUZZ_CHECK(back.width == img.width && back.height == img.height && back.channels == img.channels &&
                   memcmp(back.data, img.data, mx_image_bytes(&img)) == 0,
               "%s", "PNG round trip differs");
    mx_image_free(&back);
    mx_free(png);
    mx_image_free(&img);
    return 0;
}
