/*
 * fuzz_lst_format.c - .lst format -> parse (lib/recordio): an entry built
 * from the input (any int64 index, 1-4 labels of any double value, any
 * path) either is refused by mx_lst_format (a path that would not read
 * back) or formats into a line that mx_lst_parse_line reads back to the
 * same index, path and labels (to "%f"'s 6 decimals), as im2rec.py's
 * write_list / read_list do.
 */
#include "fuzz.h"
#include "recordio/imrec.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    mx_lst_entry e = {0};
    double labels[4];
    uint64_t index = 0;
    for (int i = 0; i < 8; i++) index |= (uint64_t)fuzz_take_u8(&in) << (8 * i);
    e.index = (int64_t)index;
    e.num_labels = fuzz_take_u8(&in) % 4 + 1;
    for (size_t i = 0; i < e.num_labels; i++) {
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++) bits |= (uint64_t)fuzz_take_u8(&in) << (8 * k);
        memcpy(&labels[i], &bits, sizeof(double));
    }
    e.labels = labels;
    char *path = mx_malloc(in.size + 1);
    FUZZ_CHECK(path != NULL, "%s", "out of memory");
    if (in.size) memcpy(path, in.data, in.size);
    path[in.size] = '\0';
    e.path = path;

    char *line = NULL;
    size_t len = 0;
    if (mx_lst_format(&e, &line, &len) == MX_OK) {
        mx_lst_entry back = {0};
        FUZZ_CHECK(mx_lst_parse_line(line, len - 1, "formatted", 1, &back) == MX_OK, "formatted line does not parse: %s",
                   line);
        FUZZ_CHECK(back.index == e.index && back.num_labels == e.num_labels && strcmp(back.path, e.path) == 0,
                   "round trip differs: %s", line);
        for (size_t i = 0; i < e.num_labels; i++) {
            double a = e.labels[i], b = back.labels[i];
            FUZZ_CHECK((isnan(a) && isnan(b)) || a == b || fabs(a - b) <= 5.0000001e-7 + fabs(a) * 0x1p-52,
                       "label %zu: %.17g became %.17g", i, a, b);
        }
        mx_lst_entry_clear(&back);
        mx_free(line);
    }
    mx_free(path);
    return 0;
}
