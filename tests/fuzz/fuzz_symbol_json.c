/*
 * fuzz_symbol_json.c - the symbol JSON loader (lib/symbol), as mxpredict
 * and --resume read MODEL-symbol.json. A graph that loads must serialise,
 * load back, and serialise to the same bytes (a fixed point after one
 * round, since older formats are rewritten as 1.x JSON), and infer shapes
 * from what the variables declare without crashing.
 */
#include "fuzz.h"
#include "symbol/symbol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_graph *g = NULL;
    if (mx_graph_from_json((const char *)data, size, &g) != MX_OK) return 0;
    char *json = NULL, *again = NULL;
    size_t len = 0, again_len = 0;
    FUZZ_OK(mx_graph_to_json(g, &json, &len));
    mx_graph *back = NULL;
    FUZZ_CHECK(mx_graph_from_json(json, len, &back) == MX_OK, "the graph's own JSON does not load:\n%s", json);
    FUZZ_OK(mx_graph_to_json(back, &again, &again_len));
    FUZZ_CHECK(len == again_len && memcmp(json, again, len) == 0, "JSON round trip differs:\n%s\n---\n%s", json,
               again);

    mx_graph_shapes shapes = {0};
    if (mx_graph_infer_shapes(g, NULL, NULL, 0, &shapes) == MX_OK) mx_graph_shapes_free(&shapes);

    mx_graph_free(back);
    mx_graph_free(g);
    mx_free(json);
    mx_free(again);
    return 0;
}
