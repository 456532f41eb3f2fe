/*
 * fuzz_recordio_roundtrip.c - RecordIO write -> read (lib/recordio): the
 * input is cut into records (a u16 length before each), written with the
 * writer into a memory stream (escaping aligned magic words into parts),
 * and read back: the same records in the same order, at the offsets the
 * writer reported, with no error and nothing skipped; each record is also
 * read back by offset (the .idx path), and the offsets survive an .idx
 * write -> read.
 */
#include "fuzz.h"
#include "recordio/recordio.h"

#define MAX_RECORDS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    const uint8_t *rec_data[MAX_RECORDS];
    size_t rec_size[MAX_RECORDS];
    uint64_t rec_off[MAX_RECORDS];
    int n = 0;
    while (in.size && n < MAX_RECORDS) {
        size_t len = fuzz_take_u16(&in);
        if (len > in.size) len = in.size;
        rec_data[n] = in.data;
        rec_size[n] = len;
        in.data += len;
        in.size -= len;
        n++;
    }

    mx_stream *stream = NULL;
    FUZZ_OK(mx_stream_create_memory(&stream));
    mx_recordio_writer *w = NULL;
    FUZZ_OK(mx_recordio_writer_create(stream, 0, &w));
    for (int i = 0; i < n; i++) FUZZ_OK(mx_recordio_writer_write(w, rec_data[i], rec_size[i], &rec_off[i]));
    uint64_t end = mx_recordio_writer_tell(w);
    FUZZ_OK(mx_recordio_writer_close(w));
    const uint8_t *file = NULL;
    size_t file_size = 0;
    FUZZ_OK(mx_stream_memory_data(stream, &file, &file_size));
    FUZZ_CHECK(file_size == end && file_size % 4 == 0, "file of %zu bytes, writer at %llu", file_size,
               (unsigned long long)end);

    mx_stream *view = NULL;
    FUZZ_OK(mx_stream_open_memory(file, file_size, &view));
    mx_recordio_reader *r = NULL;
    FUZZ_OK(mx_recordio_reader_create(view, 1, &r));
    for (int i = 0; i <= n; i++) {
        mx_recordio_record rec;
        int got = 0;
        FUZZ_CHECK(mx_recordio_reader_next(r, &rec, &got) == MX_OK, "record %d of %d", i, n);
        if (i == n) {
            FUZZ_CHECK(!got, "%s", "a record after the last one written");
            break;
        }
        FUZZ_CHECK(got, "%d records read of %d", i, n);
        FUZZ_CHECK(rec.offset == rec_off[i], "record %d at %llu, written at %llu", i,
                   (unsigned long long)rec.offset, (unsigned long long)rec_off[i]);
        FUZZ_CHECK(rec.size == rec_size[i] && (!rec.size || memcmp(rec.data, rec_data[i], rec.size) == 0),
                   "record %d differs (%zu bytes, wrote %zu)", i, rec.size, rec_size[i]);
    }
    const mx_recordio_skip *skips = NULL;
    size_t n_skips = 0;
    mx_recordio_reader_skips(r, &skips, &n_skips);
    FUZZ_CHECK(n_skips == 0, "%zu skips", n_skips);

    /* Random access through an index written and read back as .idx text;
     * keys run backwards so that file order and key order differ. */
    mx_recordio_index *idx = NULL, *idx_back = NULL;
    FUZZ_OK(mx_recordio_index_create(&idx));
    for (int i = 0; i < n; i++) FUZZ_OK(mx_recordio_index_add(idx, n - i, rec_off[i]));
    mx_stream *idx_stream = NULL;
    FUZZ_OK(mx_stream_create_memory(&idx_stream));
    FUZZ_OK(mx_recordio_index_write_stream(idx, idx_stream));
    FUZZ_OK(mx_stream_seek(idx_stream, 0));
    FUZZ_OK(mx_recordio_index_read_stream(idx_stream, "fuzz.idx", &idx_back));
    for (int i = n - 1; i >= 0; i--) {
        uint64_t off = 0;
        int found = 0;
        FUZZ_OK(mx_recordio_index_find(idx_back, n - i, &off, &found));
        FUZZ_CHECK(found && off == rec_off[i], "key %d", n - i);
        mx_recordio_record rec;
        FUZZ_CHECK(mx_recordio_reader_read_at(r, off, &rec) == MX_OK, "read_at %llu", (unsigned long long)off);
        FUZZ_CHECK(rec.size == rec_size[i] && (!rec.size || memcmp(rec.data, rec_data[i], rec.size) == 0),
                   "record %d read at its offset differs", i);
    }
    mx_recordio_index_free(idx);
    mx_recordio_index_free(idx_back);
    mx_stream_close(idx_stream);
    mx_recordio_reader_free(r);
    mx_stream_close(stream);
    return 0;
}
