/*
 * fuzz_config.c - the net config compiler (lib/config): INI text -> symbol
 * graph, as mxtrain / mxpredict / mxviz load a user's .conf. A config that
 * compiles must also serialise to symbol JSON that loads back and
 * serialises to the same bytes, infer shapes from a small input without
 * crashing, and take the gradient (what mxtrain does next).
 */
#include "config/config.h"
#include "fuzz.h"

/* The graph's symbol JSON loads back and writes the same bytes again. */
static void check_json_round_trip(const mx_graph *g)
{
    char *json = NULL, *again = NULL;
    size_t len = 0, again_len = 0;
    FUZZ_OK(mx_graph_to_json(g, &json, &len));
    mx_graph *back = NULL;
    FUZZ_CHECK(mx_graph_from_json(json, len, &back) == MX_OK, "the graph's own JSON does not load:\n%s", json);
    FUZZ_OK(mx_graph_to_json(back, &again, &again_len));
    FUZZ_CHECK(len == again_len && memcmp(json, again, len) == 0, "JSON round trip differs:\n%s\n---\n%s", json,
               again);
    mx_graph_free(back);
    mx_free(json);
    mx_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mx_config *cfg = NULL;
    if (mx_config_parse("fuzz.conf", (const char *)data, size, NULL, 0, &cfg) != MX_OK) {
        FUZZ_CHECK(cfg == NULL, "%s", "failed parse left a config");
        return 0;
    }
    check_json_round_trip(cfg->graph);

    /* Shapes from a small image batch on the first input: the layers'
     * parameter arithmetic (kernels, strides, pads, hidden sizes) runs on
     * the fuzzed values; errors are fine, overflow is not. */
    mx_graph_shapes shapes = {0};
    const char *names[1] = {cfg->inputs[0]};
    mx_shape in[1] = {MX_SHAPE(2, 1, 12, 12)};
    if (mx_config_infer_shapes(cfg, names, in, 1, &shapes) == MX_OK) mx_graph_shapes_free(&shapes);

    /* The gradient graph with respect to every argument, on a copy. */
    mx_graph *g = NULL;
    FUZZ_OK(mx_graph_clone(cfg->graph, &g));
    int n_nodes = mx_graph_num_nodes(g);
    uint32_t *args = mx_malloc((size_t)n_nodes * sizeof(uint32_t) + 1);
    mx_entry *grads = mx_malloc((size_t)n_nodes * sizeof(mx_entry) + 1);
    FUZZ_CHECK(args && grads, "%s", "out of memory");
    int n_args = mx_graph_list_arguments(g, args);
    (void)mx_graph_gradient(g, args, n_args, grads);
    mx_free(args);
    mx_free(grads);
    mx_graph_free(g);
    mx_config_free(cfg);
    return 0;
}
