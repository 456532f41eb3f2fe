/*
 * fuzz_lst.c - .lst list files (lib/recordio's reader, as im2rec reads its
 * list): every line parses or is reported and skipped; every entry that
 * parses formats into a line that parses back to the same index, path and
 * label count, and formatting that again gives the same line (format ->
 * parse is a fixed point after one round: write_list prints labels "%f").
 */
#include "fuzz.h"
#include "recordio/imrec.h"

#include <math.h>

static void check_round_trip(const mx_lst_entry *e)
{
    char *line = NULL, *again = NULL;
    size_t len = 0, again_len = 0;
    if (mx_lst_format(e, &line, &len) != MX_OK) {
        /* Only a path that would not read back may be refused; the reader
         * strips paths, so that cannot come from a parsed line. */
        FUZZ_CHECK(0, "a parsed entry does not format (path \"%s\")", e->path);
    }
    mx_lst_entry back = {0};
    FUZZ_CHECK(len > 0 && line[len - 1] == '\n', "%s", "no line end");
    FUZZ_CHECK(mx_lst_parse_line(line, len - 1, "formatted", 1, &back) == MX_OK, "formatted line does not parse: %s",
               line);
    FUZZ_CHECK(back.index == e->index && back.num_labels == e->num_labels && strcmp(back.path, e->path) == 0,
               "round trip differs: %s", line);
    for (size_t i = 0; i < e->num_labels; i++) {
        double a = e->labels[i], b = back.labels[i];
        /* "%f" rounds to 6 decimals: half a unit of the last place, plus the
         * double rounding of the decimal string back to binary. */
        FUZZ_CHECK((isnan(a) && isnan(b)) || a == b || fabs(a - b) <= 5.0000001e-7 + fabs(a) * 0x1p-52,
                   "label %zu: %.17g became %.17g", i, a, b);
    }
    FUZZ_OK(mx_lst_format(&back, &again, &again_len));
    FUZZ_CHECK(len == again_len && memcmp(line, again, len) == 0, "second format differs:\n%s%s", line, again);
    mx_free(line);
    mx_free(again);
    mx_lst_entry_clear(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_stream *stream = NULL;
    FUZZ_OK(mx_stream_open_memory(data, size, &stream));
    mx_lst_reader *r = NULL;
    FUZZ_OK(mx_lst_reader_create(stream, "fuzz.lst", 1, &r));
    mx_lst_entry e = {0};
    uint64_t last_line = 0;
    for (size_t step = 0; step <= size + 1; step++) {
        int got = 0;
        mx_status s = mx_lst_reader_next(r, &e, &got);
        uint64_t line = mx_lst_reader_lineno(r);
        if (s == MX_OK && !got) break;
        FUZZ_CHECK(line > last_line, "line %llu after %llu", (unsigned long long)line, (unsigned long long)last_line);
        last_line = line;
        if (s == MX_OK) check_round_trip(&e);
        else FUZZ_CHECK(s == MX_ERR_FORMAT, "unexpected error %d", (int)s);
    }
    mx_lst_entry_clear(&e);
    mx_lst_reader_free(r);
    return 0;
}
