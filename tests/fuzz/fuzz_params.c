/*
 * fuzz_params.c - .params / mx.nd.save files (lib/ndarray's loader: V0, V1,
 * V2, V3 dense), as mxpredict and --resume read them, from memory. A file
 * that loads must save (V2) and load back to the same names, shapes, dtypes
 * and bytes, and saving that again must give the same file. A 0-d array (a
 * V3 scalar) comes back as shape (1,): V2 has no 0-d arrays (ndim 0 is an
 * empty entry there; lib/ndarray/ndarray_io.c).
 */
#include "fuzz.h"
#include "ndarray/ndarray.h"

/* One runtime for the whole run (engine threads and pools are expensive);
 * every array is freed after each input, so no state carries over. */
static mx_runtime *rt;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mx_runtime_create(NULL, &rt) != MX_OK) {
        fprintf(stderr, "fuzz_params: %s\n", mx_last_error());
        abort();
    }
    return 0;
}

/* b's shape is a's as V2 stores it. */
static bool saved_shape(const mx_shape *a, const mx_shape *b)
{
    if (a->ndim == 0) return b->ndim == 1 && b->dims[0] == 1;
    return mx_shape_equal(a, b);
}

static void check_same(const mx_ndarray_list *a, const mx_ndarray_list *b)
{
    FUZZ_CHECK(a->count == b->count, "count %d vs %d", a->count, b->count);
    FUZZ_CHECK((a->names == NULL) == (b->names == NULL), "%s", "names present in one only");
    for (int i = 0; i < a->count; i++) {
        if (a->names) FUZZ_CHECK(strcmp(a->names[i], b->names[i]) == 0, "name %d differs", i);
        FUZZ_CHECK(saved_shape(mx_ndarray_shape(a->arrays[i]), mx_ndarray_shape(b->arrays[i])), "shape %d differs",
                   i);
        FUZZ_CHECK(mx_ndarray_dtype(a->arrays[i]) == mx_ndarray_dtype(b->arrays[i]), "dtype %d differs", i);
        FUZZ_OK(mx_ndarray_wait_to_read(a->arrays[i]));
        FUZZ_OK(mx_ndarray_wait_to_read(b->arrays[i]));
        size_t n = mx_ndarray_nbytes(a->arrays[i]);
        FUZZ_CHECK(n == mx_ndarray_nbytes(b->arrays[i]), "bytes %d differ", i);
        FUZZ_CHECK(n == 0 || memcmp(mx_ndarray_data(a->arrays[i]), mx_ndarray_data(b->arrays[i]), n) == 0,
                   "data %d differs", i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_ndarray_list list = {0};
    if (mx_ndarray_load_buffer(rt, data, size, &list) != MX_OK) {
        FUZZ_CHECK(list.count == 0 && list.arrays == NULL, "%s", "failed load left arrays");
        return 0;
    }
    void *saved = NULL, *again = NULL;
    size_t saved_len = 0, again_len = 0;
    FUZZ_OK(mx_ndarray_save_buffer(list.arrays, (const char *const *)list.names, list.count, &saved, &saved_len));
    mx_ndarray_list back = {0};
    FUZZ_CHECK(mx_ndarray_load_buffer(rt, saved, saved_len, &back) == MX_OK, "%s", "saved file does not load");
    check_same(&list, &back);
    FUZZ_OK(mx_ndarray_save_buffer(back.arrays, (const char *const *)back.names, back.count, &again, &again_len));
    FUZZ_CHECK(saved_len == again_len && memcmp(saved, again, saved_len) == 0, "%s", "second save differs");
    mx_free(saved);
    mx_free(again);
    mx_ndarray_list_free(&back);
    mx_ndarray_list_free(&list);
    return 0;
}
