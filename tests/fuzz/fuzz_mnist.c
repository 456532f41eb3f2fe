/*
 * fuzz_mnist.c - MNIST idx files (lib/io's mnist iterator: idx3 images and
 * idx1 labels, raw or gzip'd), as mxtrain opens [train] image/label. The
 * input is [u16 split][byte options][image file][label file]: the first
 * `split` bytes after the options are the image file (all of the rest when
 * split is larger). Both go into memfd files (the iterator takes paths);
 * an iterator that opens must deliver its batches, each label one of the
 * label file's bytes. Options pick flat, num_parts (1-3) and part_index.
 */
#include "fuzz.h"
#include "io/io.h"

static mx_runtime *rt;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mx_runtime_create(NULL, &rt) != MX_OK) {
        fprintf(stderr, "fuzz_mnist: %s\n", mx_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    size_t split = fuzz_take_u16(&in);
    uint32_t opt = fuzz_take_u8(&in);
    if (split > in.size) split = in.size;
    char img_path[64], lab_path[64];
    int img_fd = fuzz_memfile(in.data, split, img_path, sizeof(img_path));
    int lab_fd = fuzz_memfile(in.data + split, in.size - split, lab_path, sizeof(lab_path));
    FUZZ_CHECK(img_fd >= 0 && lab_fd >= 0, "%s", "memfd_create failed");

    int parts = (int)(opt % 3) + 1, part = (int)((opt >> 2) % 3) % parts;
    char image_kv[96], label_kv[96], flat[16], num_parts[16], part_index[16];
    snprintf(image_kv, sizeof(image_kv), "%s", img_path);
    snprintf(label_kv, sizeof(label_kv), "%s", lab_path);
    snprintf(flat, sizeof(flat), "%d", (int)(opt >> 4) & 1);
    snprintf(num_parts, sizeof(num_parts), "%d", parts);
    snprintf(part_index, sizeof(part_index), "%d", part);
    const char *keys[] = {"image", "label", "batch_size", "shuffle", "silent", "prefetch_buffer", "flat",
                          "num_parts", "part_index"};
    const char *values[] = {image_kv, label_kv, "1", "0", "1", "1", flat, num_parts, part_index};
    mx_data_iter *it = NULL;
    if (mx_data_iter_create(rt, "mnist", keys, values, 9, &it) == MX_OK) {
        for (int b = 0; b < 3; b++) {
            mx_data_batch batch;
            bool has = false;
            FUZZ_OK(mx_data_iter_next(it, &batch, &has));
            if (!has) break;
            float label = -1;
            FUZZ_OK(mx_ndarray_to_host(batch.label, &label, sizeof(label)));
            FUZZ_CHECK(label >= 0 && label <= 255 && label == (float)(int)label, "label %g", label);
        }
        mx_data_iter_free(it);
    } else {
        FUZZ_CHECK(it == NULL, "%s", "failed create left an iterator");
    }
    close(img_fd);
    close(lab_fd);
    return 0;
}
