/*
 * fuzz_recordio.c - the RecordIO reader (lib/recordio) on any .rec bytes,
 * as the image-record iterator reads it: records until the end, resyncing
 * after each data error. The same bytes are read twice, once from a memory
 * view (size known: lengths checked before allocating) and once from a
 * stream that cannot tell its size (payloads read in chunks), and both must
 * deliver the same records and skip the same ranges. Partitions must cover
 * the file: part k ends where part k+1 begins.
 */
#include "fuzz.h"
#include "recordio/recordio.h"

/* A read-only memory stream without a size operation. */
typedef struct nosize {
    const uint8_t *data;
    size_t size, pos;
} nosize;

static mx_status ns_read(void *self, void *buf, size_t size, size_t *nread)
{
    nosize *s = self;
    size_t n = s->size - s->pos < size ? s->size - s->pos : size;
    if (n) memcpy(buf, s->data + s->pos, n);
    s->pos += n;
    *nread = n;
    return MX_OK;
}

static mx_status ns_seek(void *self, uint64_t offset)
{
    nosize *s = self;
    if (offset > s->size) return MX_ERROR(MX_ERR_IO, "seek past the end");
    s->pos = (size_t)offset;
    return MX_OK;
}

static mx_status ns_tell(void *self, uint64_t *offset)
{
    *offset = ((nosize *)self)->pos;
    return MX_OK;
}

static mx_status ns_close(void *self)
{
    mx_free(self);
    return MX_OK;
}

static const mx_stream_ops nosize_ops = {.read = ns_read, .seek = ns_seek, .tell = ns_tell, .close = ns_close};

/* What one reading delivered: a hash of the records and their offsets. */
typedef struct digest {
    uint64_t records, hash, skips;
    mx_status last;
} digest;

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

static digest read_all(mx_stream *stream, size_t size)
{
    digest d = {0, 0xcbf29ce484222325ull, 0, MX_OK};
    mx_recordio_reader *r = NULL;
    FUZZ_OK(mx_recordio_reader_create(stream, 1, &r));
    /* Each step consumes at least 4 bytes or ends: bound it anyway. */
    for (size_t step = 0; step < size / 4 + 4; step++) {
        mx_recordio_record rec;
        int got = 0;
        mx_status s = mx_recordio_reader_next(r, &rec, &got);
        if (s == MX_OK) {
            if (!got) break;
            /* After corruption the reader resynchronises at any byte, so a
             * record may start at an unaligned offset. */
            FUZZ_CHECK(rec.offset + 8 <= size, "record at %llu", (unsigned long long)rec.offset);
            FUZZ_CHECK(rec.size < size, "record of %zu bytes in %zu", rec.size, size);
            d.records++;
            d.hash = mix(d.hash, rec.offset);
            d.hash = mix(d.hash, rec.size);
            for (size_t i = 0; i < rec.size; i++) d.hash = mix(d.hash, rec.data[i]);
            continue;
        }
        d.last = s;
        FUZZ_CHECK(s == MX_ERR_FORMAT, "unexpected error %d", (int)s);
        mx_recordio_skip skip;
        FUZZ_OK(mx_recordio_reader_resync(r, &skip));
        FUZZ_CHECK(skip.begin <= skip.end && skip.end <= size, "skip [%llu, %llu)", (unsigned long long)skip.begin,
                   (unsigned long long)skip.end);
        d.skips++;
        d.hash = mix(mix(d.hash, skip.begin), skip.end);
    }
    mx_recordio_reader_free(r);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_stream *mem = NULL;
    FUZZ_OK(mx_stream_open_memory(data, size, &mem));
    digest a = read_all(mem, size);

    nosize *ns = mx_malloc(sizeof(*ns));
    FUZZ_CHECK(ns != NULL, "%s", "out of memory");
    *ns = (nosize){data, size, 0};
    mx_stream *plain = NULL;
    FUZZ_OK(mx_stream_create(&nosize_ops, ns, &plain));
    digest b = read_all(plain, size);
    /* On an intact file both readers deliver the same records. After
     * corruption they may not: with the size known, a candidate head must
     * chain to the next record or the end; a stream that cannot seek back
     * only checks the header (lib/recordio/recordio.c). */
    FUZZ_CHECK(a.skips != 0 || (a.records == b.records && a.skips == b.skips && a.hash == b.hash),
               "sized stream: %llu records %llu skips; unsized: %llu records %llu skips",
               (unsigned long long)a.records, (unsigned long long)a.skips, (unsigned long long)b.records,
               (unsigned long long)b.skips);

    /* dmlc's InputSplit: the parts of every part count tile the file. */
    FUZZ_OK(mx_stream_open_memory(data, size, &mem));
    for (uint32_t parts = 1; parts <= 3; parts++) {
        uint64_t prev_end = 0;
        uint32_t k = 0;
        for (; k < parts; k++) {
            uint64_t begin = 0, end = 0;
            if (mx_recordio_partition(mem, parts, k, &begin, &end) != MX_OK) {
                FUZZ_CHECK(size % 4 != 0, "%s", "partition failed on an aligned file");
                break;
            }
            FUZZ_CHECK(begin == prev_end && begin <= end && end <= size, "part %u/%u [%llu, %llu) after %llu", k,
                       parts, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)prev_end);
            prev_end = end;
        }
        FUZZ_CHECK(k < parts || prev_end == size, "%u parts end at %llu of %zu", parts,
                   (unsigned long long)prev_end, size);
    }
    mx_stream_close(mem);
    return 0;
}
