/*
 * fuzz_imrec.c - image-record payloads (lib/recordio's IRHeader: flag,
 * label, ids, `flag` float labels, then the image), as the image-record
 * iterator and mxpredict split each record. A payload that parses must
 * give every label it announces, and packing its parts must give back the
 * same bytes (parse -> pack round trip); the header encodes back to its
 * 24 bytes.
 */
#include "fuzz.h"
#include "recordio/imrec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_imrec rec;
    if (mx_imrec_parse(data, size, &rec) != MX_OK) return 0;
    FUZZ_CHECK(rec.num_labels == rec.header.flag, "%u labels, flag %u", rec.num_labels, rec.header.flag);
    FUZZ_CHECK(MX_IRHEADER_SIZE + 4 * (uint64_t)rec.num_labels + rec.image_size == size, "%s", "sizes do not add up");

    uint8_t hdr[MX_IRHEADER_SIZE];
    mx_irheader_encode(&rec.header, hdr);
    FUZZ_CHECK(memcmp(hdr, data, MX_IRHEADER_SIZE) == 0, "%s", "header does not encode back");

    float *labels = NULL;
    if (rec.num_labels) {
        labels = mx_malloc(rec.num_labels * sizeof(float));
        FUZZ_CHECK(labels != NULL, "%s", "out of memory");
        /* The raw bits, not the float values: a signalling NaN label must
         * not be quietened on its way through. */
        memcpy(labels, rec.labels, rec.num_labels * sizeof(float));
        for (uint32_t i = 0; i < rec.num_labels; i++) (void)mx_imrec_label(&rec, i);
    } else {
        (void)mx_imrec_label(&rec, 0);
    }
    uint8_t *packed = NULL;
    size_t packed_size = 0;
    FUZZ_OK(mx_imrec_pack(&rec.header, labels, rec.image, rec.image_size, &packed, &packed_size));
    FUZZ_CHECK(packed_size == size && memcmp(packed, data, size) == 0, "%s", "pack(parse(x)) != x");
    mx_free(packed);
    mx_free(labels);
    return 0;
}
