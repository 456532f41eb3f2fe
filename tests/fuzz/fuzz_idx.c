/*
 * fuzz_idx.c - .idx index files (lib/recordio), as the image-record
 * iterator and mxpredict read them. An index that reads must write and read
 * back to the same entries in the same order, and every key must look up
 * the offset of its last entry (Python's dict semantics).
 */
#include "fuzz.h"
#include "recordio/recordio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_stream *stream = NULL;
    FUZZ_OK(mx_stream_open_memory(data, size, &stream));
    mx_recordio_index *idx = NULL;
    mx_status s = mx_recordio_index_read_stream(stream, "fuzz.idx", &idx);
    mx_stream_close(stream);
    if (s != MX_OK) {
        FUZZ_CHECK(idx == NULL, "%s", "failed read left an index");
        return 0;
    }
    size_t n = 0, n_back = 0;
    const mx_recordio_index_entry *e = mx_recordio_index_entries(idx, &n);

    mx_stream *out = NULL;
    FUZZ_OK(mx_stream_create_memory(&out));
    FUZZ_OK(mx_recordio_index_write_stream(idx, out));
    FUZZ_OK(mx_stream_seek(out, 0));
    mx_recordio_index *back = NULL;
    FUZZ_CHECK(mx_recordio_index_read_stream(out, "written.idx", &back) == MX_OK, "%s", "written index does not read");
    const mx_recordio_index_entry *eb = mx_recordio_index_entries(back, &n_back);
    FUZZ_CHECK(n == n_back, "%zu entries, %zu after the round trip", n, n_back);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(e[i].key == eb[i].key && e[i].offset == eb[i].offset, "entry %zu differs", i);

    for (size_t i = 0; i < n; i++) {
        uint64_t off = 0, last = 0;
        int found = 0;
        for (size_t j = 0; j < n; j++)
            if (e[j].key == e[i].key) last = e[j].offset;
        FUZZ_OK(mx_recordio_index_find(back, e[i].key, &off, &found));
        FUZZ_CHECK(found && off == last, "key %lld", (long long)e[i].key);
    }
    uint64_t *sorted = NULL;
    FUZZ_OK(mx_recordio_index_sorted_offsets(idx, &sorted));
    for (size_t i = 1; i < n; i++) FUZZ_CHECK(sorted[i - 1] <= sorted[i], "%s", "offsets not sorted");
    mx_free(sorted);
    mx_recordio_index_free(back);
    mx_recordio_index_free(idx);
    mx_stream_close(out);
    return 0;
}
