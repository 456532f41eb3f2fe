/* test_symbol.c - graph building, listing, shapes, gradients, symbol JSON. */
#include "json/json.h"
#include "symbol/symbol.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *shared_path(const char *rel)
{
    const char *dir = getenv("MX_SHARED_DIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/%s", dir && *dir ? dir : "../shared", rel);
    return p;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static uint32_t add_op(mx_graph *g, const char *op, const char *name, const char *k1, const char *v1, mx_entry *in,
                       int n_in)
{
    const char *keys[1] = {k1}, *values[1] = {v1};
    uint32_t id;
    ck_assert_msg(mx_graph_add_op(g, op, name, keys, values, k1 ? 1 : 0, in, n_in, NULL, 0, &id) == MX_OK, "%s",
                  mx_last_error());
    return id;
}

static mx_graph *build_mlp(void)
{
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t data;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &data), MX_OK);
    mx_entry x = {data, 0};
    uint32_t fc1 = add_op(g, "FullyConnected", "fc1", "num_hidden", "128", &x, 1);
    x = (mx_entry){fc1, 0};
    uint32_t relu = add_op(g, "Activation", "relu1", "act_type", "relu", &x, 1);
    x = (mx_entry){relu, 0};
    uint32_t fc2 = add_op(g, "FullyConnected", "fc2", "num_hidden", "10", &x, 1);
    x = (mx_entry){fc2, 0};
    uint32_t sm = add_op(g, "SoftmaxOutput", "softmax", NULL, NULL, &x, 1);
    mx_entry head = {sm, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &head, 1), MX_OK);
    return g;
}

START_TEST(compose_creates_mxnet_named_variables)
{
    mx_graph *g = build_mlp();
    uint32_t ids[64];
    int n = mx_graph_list_arguments(g, ids);
    const char *want[] = {"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"};
    ck_assert_int_eq(n, 6);
    for (int i = 0; i < n; i++) ck_assert_str_eq(mx_graph_node(g, ids[i])->name, want[i]);
    ck_assert_int_eq(mx_graph_list_aux(g, ids), 0);
    char buf[64];
    ck_assert_str_eq(mx_graph_output_name(g, 0, buf, sizeof(buf)), "softmax_output");
    /* Variables inherit the node's attributes, as MXNet does. */
    ck_assert_str_eq(mx_graph_get_attr(g, mx_graph_find(g, "fc1_weight"), "num_hidden"), "128");

    mx_graph_shapes sh;
    const char *names[] = {"data"};
    mx_shape shapes[] = {MX_SHAPE(32, 1, 28, 28)};
    ck_assert_msg(mx_graph_infer_shapes(g, names, shapes, 1, &sh) == MX_OK, "%s", mx_last_error());
    const mx_shape *w = mx_graph_entry_shape(&sh, (mx_entry){mx_graph_find(g, "fc1_weight"), 0});
    ck_assert_int_eq(w->dims[0], 128);
    ck_assert_int_eq(w->dims[1], 784);
    const mx_shape *label = mx_graph_entry_shape(&sh, (mx_entry){mx_graph_find(g, "softmax_label"), 0});
    ck_assert_int_eq(label->ndim, 1);
    ck_assert_int_eq(label->dims[0], 32);
    const mx_shape *out = mx_graph_entry_shape(&sh, mx_graph_head(g, 0));
    ck_assert_int_eq(out->dims[1], 10);
    mx_graph_shapes_free(&sh);
    mx_graph_free(g);
}
END_TEST

START_TEST(composition_errors_name_the_layer)
{
    mx_graph *g = build_mlp();
    uint32_t id;
    mx_entry x = {0, 0};
    const char *k[] = {"num_hidden"}, *v[] = {"5"};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc1", k, v, 1, &x, 1, NULL, 0, &id), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'fc1' is already used"));
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConected", "fc9", k, v, 1, &x, 1, NULL, 0, &id), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "layer 'fc9'"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'FullyConnected'"));
    const char *bk[] = {"num_hiden"};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc9", bk, v, 1, &x, 1, NULL, 0, &id), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "layer 'fc9': FullyConnected: unknown parameter 'num_hiden'"));
    mx_entry four[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc9", k, v, 1, four, 4, NULL, 0, &id), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "takes 3 inputs, got 4"));
    mx_entry bad = {0, 3};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc9", k, v, 1, &bad, 1, NULL, 0, &id), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "has no output 3"));
    ck_assert_int_eq(mx_graph_num_nodes(g), 10); /* nothing half-added */

    /* A shape that contradicts a given weight names the layer and both shapes. */
    mx_graph_shapes sh;
    const char *names[] = {"data", "fc2_weight"};
    mx_shape shapes[] = {MX_SHAPE(4, 20), MX_SHAPE(10, 64)};
    ck_assert_int_eq(mx_graph_infer_shapes(g, names, shapes, 2, &sh), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "layer 'fc2' (FullyConnected)"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "(10,64)"));
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "(10,128)"));
    const char *typo[] = {"dta"};
    ck_assert_int_eq(mx_graph_infer_shapes(g, typo, shapes, 1, &sh), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "no input named 'dta' (did you mean 'data'?)"));
    ck_assert_int_eq(mx_graph_infer_shapes(g, NULL, NULL, 0, &sh), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'data'"));
    mx_graph_free(g);
}
END_TEST

/* Loading a real MXNet file and writing it again gives the same bytes. */
static void check_fixture_round_trip(const char *rel, const char *data_shape_name, mx_shape data_shape, int n_nodes)
{
    char *path = shared_path(rel);
    size_t len;
    char *text = read_file(path, &len);
    mx_graph *g;
    ck_assert_msg(mx_graph_load_json(path, &g) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_graph_num_nodes(g), n_nodes);
    char *out;
    size_t out_len;
    ck_assert_int_eq(mx_graph_to_json(g, &out, &out_len), MX_OK);
    ck_assert_int_eq(out_len, len);
    ck_assert_msg(memcmp(out, text, len) == 0, "re-written %s differs", rel);
    mx_graph_shapes sh;
    ck_assert_msg(mx_graph_infer_shapes(g, &data_shape_name, &data_shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    const mx_shape *o = mx_graph_entry_shape(&sh, mx_graph_head(g, 0));
    ck_assert_int_eq(o->ndim, 2);
    ck_assert_int_eq(o->dims[0], data_shape.dims[0]);
    ck_assert_int_eq(o->dims[1], 10);
    mx_graph_shapes_free(&sh);
    free(out);
    mx_graph_free(g);
    free(text);
    free(path);
}

START_TEST(mxnet_fixtures_load_and_round_trip)
{
    check_fixture_round_trip("fixtures/mxnet/apache-mxnet/test-symbol.json.ref", "data", MX_SHAPE(1, 784), 14);
    check_fixture_round_trip("fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json", "data", MX_SHAPE(5, 1, 28, 28), 15);
}
END_TEST

START_TEST(batchnorm_aux_states_and_json_layout)
{
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t data, id;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &data), MX_OK);
    mx_entry x = {data, 0};
    const char *ck[] = {"kernel", "num_filter"}, *cv[] = {"(3, 3)", "8"};
    ck_assert_int_eq(mx_graph_add_op(g, "Convolution", "conv1", ck, cv, 2, &x, 1, NULL, 0, &id), MX_OK);
    x = (mx_entry){id, 0};
    const char *bk[] = {"fix_gamma"}, *bv[] = {"False"};
    ck_assert_msg(mx_graph_add_op(g, "BatchNorm", "bn1", bk, bv, 1, &x, 1, NULL, 0, &id) == MX_OK, "%s", mx_last_error());
    mx_entry h = {id, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &h, 1), MX_OK);
    uint32_t ids[16];
    ck_assert_int_eq(mx_graph_list_aux(g, ids), 2);
    ck_assert_str_eq(mx_graph_node(g, ids[0])->name, "bn1_moving_mean");
    ck_assert_str_eq(mx_graph_get_attr(g, ids[0], "__init__"), "[\"zero\", {}]");
    ck_assert_str_eq(mx_graph_get_attr(g, ids[1], "__init__"), "[\"one\", {}]");
    ck_assert_int_eq(mx_graph_list_arguments(g, ids), 5);
    char *json;
    size_t len;
    ck_assert_int_eq(mx_graph_to_json(g, &json, &len), MX_OK);
    /* As in the spec's 4.9 example: aux inputs carry version 1, BatchNorm
     * counts 3 outputs in node_row_ptr, aux variables are arg_nodes. */
    ck_assert_ptr_nonnull(strstr(json, "\"inputs\": [[3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 1], [7, 0, 1]]"));
    ck_assert_ptr_nonnull(strstr(json, "\"arg_nodes\": [0, 1, 2, 4, 5, 6, 7]"));
    ck_assert_ptr_nonnull(strstr(json, "\"node_row_ptr\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 11]"));
    ck_assert_ptr_nonnull(strstr(json,
                                 "      \"attrs\": {\n"
                                 "        \"__init__\": \"[\\\"zero\\\", {}]\", \n"
                                 "        \"fix_gamma\": \"False\"\n"
                                 "      }, \n"));
    ck_assert_ptr_nonnull(strstr(json, "\"heads\": [[8, 0, 0]], \n  \"attrs\": {\"mxnet_version\": [\"int\", 10901]}\n}"));
    ck_assert(json[len - 1] == '}');
    mx_graph *back;
    ck_assert_int_eq(mx_graph_from_json(json, len, &back), MX_OK);
    char *again;
    size_t again_len;
    ck_assert_int_eq(mx_graph_to_json(back, &again, &again_len), MX_OK);
    ck_assert_int_eq(again_len, len);
    ck_assert_int_eq(memcmp(json, again, len), 0);
    free(again);
    free(json);
    mx_graph_free(back);
    mx_graph_free(g);
}
END_TEST

START_TEST(attributes_are_written_in_mxnet_form)
{
    /* MXNet's parser rejects "5,5" and "1": tuples, bools and ints are
     * stored as Python's str() would write them; floats stay as given. */
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t d, c;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &d), MX_OK);
    mx_entry x = {d, 0};
    const char *k[] = {"kernel", "num_filter", "no_bias", "stride"}, *v[] = {"5,5", " 8 ", "1", "[2,2]"};
    ck_assert_int_eq(mx_graph_add_op(g, "Convolution", "c", k, v, 4, &x, 1, NULL, 0, &c), MX_OK);
    ck_assert_str_eq(mx_graph_get_attr(g, c, "kernel"), "(5, 5)");
    ck_assert_str_eq(mx_graph_get_attr(g, c, "num_filter"), "8");
    ck_assert_str_eq(mx_graph_get_attr(g, c, "no_bias"), "True");
    ck_assert_str_eq(mx_graph_get_attr(g, c, "stride"), "(2, 2)");
    ck_assert_str_eq(mx_graph_get_attr(g, mx_graph_find(g, "c_weight"), "kernel"), "(5, 5)");
    x = (mx_entry){c, 0};
    const char *bk[] = {"eps", "momentum"}, *bv[] = {"2e-05", "0.9"};
    ck_assert_int_eq(mx_graph_add_op(g, "BatchNorm", "bn", bk, bv, 2, &x, 1, NULL, 0, &c), MX_OK);
    ck_assert_str_eq(mx_graph_get_attr(g, c, "eps"), "2e-05");
    mx_graph_free(g);
}
END_TEST

START_TEST(gradient_sums_shared_entries)
{
    /* x feeds two layers whose outputs are added: dx needs a sum node. */
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t x, a, b, s;
    ck_assert_int_eq(mx_graph_add_variable(g, "x", NULL, 0, &x), MX_OK);
    mx_entry xe = {x, 0};
    a = add_op(g, "FullyConnected", "fa", "num_hidden", "4", &xe, 1);
    b = add_op(g, "FullyConnected", "fb", "num_hidden", "4", &xe, 1);
    mx_entry ab[2] = {{a, 0}, {b, 0}};
    s = add_op(g, "elemwise_add", "sum", NULL, NULL, ab, 2);
    mx_entry head = {s, 0};
    ck_assert_int_eq(mx_graph_set_heads(g, &head, 1), MX_OK);
    int n_fwd = mx_graph_num_nodes(g);
    uint32_t wrt[3] = {x, mx_graph_find(g, "fa_weight"), mx_graph_find(g, "fb_bias")};
    mx_entry grads[3];
    ck_assert_msg(mx_graph_gradient(g, wrt, 3, grads) == MX_OK, "%s", mx_last_error());
    const mx_node *dx = mx_graph_node(g, grads[0].node);
    ck_assert_str_eq(dx->op->name, "ElementWiseSum");
    ck_assert_int_eq(dx->n_inputs, 2);
    for (int i = 0; i < 2; i++) {
        const mx_node *src = mx_graph_node(g, dx->inputs[i].node);
        ck_assert_int_eq(src->kind, MX_NODE_BACKWARD);
        ck_assert_int_eq(dx->inputs[i].index, 0); /* d data */
    }
    const mx_node *dw = mx_graph_node(g, grads[1].node);
    ck_assert_int_eq(dw->kind, MX_NODE_BACKWARD);
    ck_assert_str_eq(mx_graph_node(g, dw->forward_node)->name, "fa");
    ck_assert_int_eq(grads[1].index, 1);
    ck_assert_int_eq(grads[2].index, 2);
    /* The non-loss head got a head-gradient variable. */
    ck_assert_uint_ne(mx_graph_find(g, "sum_output_head_grad"), MX_NO_NODE);
    /* Shapes flow through the backward pass. */
    mx_graph_shapes sh;
    const char *names[] = {"x", "sum_output_head_grad"};
    mx_shape shapes[] = {MX_SHAPE(3, 5), MX_SHAPE(3, 4)};
    ck_assert_msg(mx_graph_infer_shapes(g, names, shapes, 2, &sh) == MX_OK, "%s", mx_last_error());
    ck_assert(mx_shape_equal(mx_graph_entry_shape(&sh, grads[0]), &shapes[0]));
    const mx_shape *gw = mx_graph_entry_shape(&sh, grads[1]);
    ck_assert_int_eq(gw->dims[0], 4);
    ck_assert_int_eq(gw->dims[1], 5);
    mx_graph_shapes_free(&sh);
    /* Backward nodes are not part of the saved symbol. */
    char *json;
    size_t len;
    ck_assert_int_eq(mx_graph_to_json(g, &json, &len), MX_ERR_UNSUPPORTED);
    ck_assert_int_gt(mx_graph_num_nodes(g), n_fwd);
    ck_assert_int_eq(mx_graph_gradient(g, wrt, 1, grads), MX_ERR_INVALID);
    mx_graph_free(g);
}
END_TEST

START_TEST(gradient_prunes_unreached_nodes)
{
    mx_graph *g = build_mlp();
    /* Only fc2's weight: fc1 and relu1 need no backward node. */
    uint32_t wrt[1] = {mx_graph_find(g, "fc2_weight")};
    mx_entry grads[1];
    ck_assert_int_eq(mx_graph_gradient(g, wrt, 1, grads), MX_OK);
    ck_assert_uint_eq(mx_graph_find(g, "_backward_fc1"), MX_NO_NODE);
    ck_assert_uint_eq(mx_graph_find(g, "_backward_relu1"), MX_NO_NODE);
    ck_assert_uint_ne(mx_graph_find(g, "_backward_fc2"), MX_NO_NODE);
    ck_assert_uint_ne(mx_graph_find(g, "_backward_softmax"), MX_NO_NODE);
    ck_assert_uint_eq(mx_graph_find(g, "softmax_output_head_grad"), MX_NO_NODE); /* a loss head */
    mx_graph_free(g);
}
END_TEST

START_TEST(malformed_json_is_rejected_not_crashed_on)
{
    char *path = shared_path("fixtures/mxnet/sagemaker-mnist-mlp/model-symbol.json");
    size_t len;
    char *text = read_file(path, &len);
    mx_graph *g;
    for (size_t cut = 0; cut < len; cut += (cut < 64 ? 1 : 7)) {
        char *copy = malloc(cut + 1);
        memcpy(copy, text, cut);
        ck_assert_int_ne(mx_graph_from_json(copy, cut, &g), MX_OK);
        ck_assert_ptr_null(g);
        free(copy);
    }
    uint64_t rng = 77;
    for (int trial = 0; trial < 3000; trial++) {
        char *copy = malloc(len);
        memcpy(copy, text, len);
        for (int k = 0; k < 1 + trial % 4; k++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            copy[rng % len] = (char)(rng >> 32);
        }
        if (mx_graph_from_json(copy, len, &g) == MX_OK) mx_graph_free(g);
        free(copy);
    }
    struct {
        const char *json, *message;
    } cases[] = {
        {"[]", "no \"nodes\""},
        {"{\"nodes\": [], \"heads\": []}", "\"heads\" is empty"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": []}], \"heads\": [[1, 0, 0]]}", "later node"},
        {"{\"nodes\": [{\"op\": \"Bogus\", \"name\": \"b\", \"inputs\": []}], \"heads\": [[0, 0]]}", "unknown operator 'Bogus'"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": []}, {\"op\": \"FullyConnected\", \"name\": "
         "\"f\", \"attrs\": {\"num_hidden\": \"x\"}, \"inputs\": [[0, 0, 0]]}], \"heads\": [[1, 0]]}",
         "'num_hidden' has bad value 'x'"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": []}, {\"op\": \"null\", \"name\": \"a\", "
         "\"inputs\": []}], \"heads\": [[0, 0]]}",
         "already used"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": [[0, 0]]}], \"heads\": [[0, 0]]}", "has inputs"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": []}], \"heads\": [[0, 5]]}", "no output 5"},
        {"{\"nodes\": [1, 2], \"heads\": []}", "not an object"},
        {"{\"nodes\": [{\"op\": \"null\", \"name\": \"a\", \"inputs\": []}], \"heads\": [[0, 0]]} x", "trailing"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_int_ne(mx_graph_from_json(cases[i].json, strlen(cases[i].json), &g), MX_OK);
        ck_assert_msg(strstr(mx_last_error(), cases[i].message), "case %zu: '%s' lacks '%s'", i, mx_last_error(),
                      cases[i].message);
    }
    ck_assert_int_eq(mx_graph_load_json("/nonexistent/x-symbol.json", &g), MX_ERR_IO);
    free(text);
    free(path);
}
END_TEST

START_TEST(legacy_attr_key_and_missing_aux_are_upgraded)
{
    /* 0.11-style "attr" and a pre-0.9 BatchNorm without its aux inputs. */
    const char *json =
        "{\"nodes\": [{\"op\": \"null\", \"name\": \"data\", \"inputs\": []},"
        " {\"op\": \"null\", \"name\": \"bn_gamma\", \"inputs\": []},"
        " {\"op\": \"null\", \"name\": \"bn_beta\", \"inputs\": []},"
        " {\"op\": \"BatchNorm\", \"name\": \"bn\", \"param\": {\"eps\": \"0.001\"}, \"attr\": {\"lr_mult\": \"2\"},"
        "  \"inputs\": [[0, 0], [1, 0], [2, 0]], \"backward_source_id\": -1}],"
        " \"arg_nodes\": [0, 1, 2], \"heads\": [[3, 0]]}";
    mx_graph *g;
    ck_assert_msg(mx_graph_from_json(json, strlen(json), &g) == MX_OK, "%s", mx_last_error());
    uint32_t bn = mx_graph_find(g, "bn");
    ck_assert_str_eq(mx_graph_get_attr(g, bn, "__lr_mult__"), "2");
    ck_assert_str_eq(mx_graph_get_attr(g, bn, "eps"), "0.001");
    uint32_t ids[8];
    ck_assert_int_eq(mx_graph_list_aux(g, ids), 2);
    ck_assert_str_eq(mx_graph_node(g, ids[0])->name, "bn_moving_mean");
    mx_graph_free(g);
}
END_TEST

/* MXNet's own 0.8 file (tests/python/unittest/save_000800.json): "param"
 * and "attr" per node, backward_source_id, hidden keys without
 * underscores, a per-input weight_lr_mult on an operator, BatchNorm
 * without its aux states. Loaded and re-written, it is byte for byte what
 * MXNet 1.9.1 writes after loading it (sym.load + sym.save), but for the
 * entry version of the two aux inputs the upgrade creates: MXNet leaves
 * them 0, we write 1 as for every aux input (readers ignore it). */
START_TEST(mxnet_0_8_file_upgrades_as_mxnet_does)
{
    size_t len;
    char *want = read_file("tests/fixtures/mxnet/save_000800.upgraded.json", &len);
    char *aux_entries = strstr(want, "[14, 0, 0], [15, 0, 0]");
    ck_assert_ptr_nonnull(aux_entries);
    aux_entries[8] = aux_entries[20] = '1';
    mx_graph *g;
    ck_assert_msg(mx_graph_load_json("tests/fixtures/mxnet/save_000800.json", &g) == MX_OK, "%s", mx_last_error());
    char *out;
    size_t out_len;
    ck_assert_int_eq(mx_graph_to_json(g, &out, &out_len), MX_OK);
    if (out_len != len || memcmp(out, want, len) != 0) {
        FILE *f = fopen("/tmp/mx-save_000800.ours.json", "wb");
        if (f) fwrite(out, 1, out_len, f), fclose(f);
        ck_abort_msg("upgraded file differs from MXNet's (ours: /tmp/mx-save_000800.ours.json)");
    }
    /* What the trainer reads as multipliers: the variables' attributes. */
    struct {
        const char *node, *key, *value;
    } attrs[] = {
        {"data", "__lr_mult__", "0.2"},          {"fc1_weight", "__lr_mult__", "1.2"}, /* from fc1's weight_lr_mult */
        {"fc1_weight", "__wd_mult__", "0.3"},    {"fc1_bias", "__wd_mult__", "0.3"},
        {"fc2_weight", "__lr_mult__", "0.01"},   {"fc1", "__wd_mult__", "0.3"},
        {"fc1", "__ctx_group__", "stage1"},      {"batchnorm0_moving_var", "__ctx_group__", "stage2"},
        {"fc1_bias", "weight_lr_mult", "1.2"}, /* a variable keeps it, as MXNet */
    };
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        const char *v = mx_graph_get_attr(g, mx_graph_find(g, attrs[i].node), attrs[i].key);
        ck_assert_msg(v && !strcmp(v, attrs[i].value), "%s.%s = %s", attrs[i].node, attrs[i].key, v ? v : "(none)");
    }
    ck_assert_ptr_null(mx_graph_get_attr(g, mx_graph_find(g, "fc1_bias"), "__lr_mult__"));
    ck_assert_ptr_null(mx_graph_get_attr(g, mx_graph_find(g, "fc1"), "weight_lr_mult"));
    uint32_t ids[32];
    ck_assert_int_eq(mx_graph_list_arguments(g, ids), 10);
    ck_assert_int_eq(mx_graph_list_aux(g, ids), 2);
    const char *name = "data";
    mx_shape shape = MX_SHAPE(1, 200);
    mx_graph_shapes sh;
    ck_assert_msg(mx_graph_infer_shapes(g, &name, &shape, 1, &sh) == MX_OK, "%s", mx_last_error());
    mx_graph_shapes_free(&sh);
    free(out);
    free(want);
    mx_graph_free(g);

    /* An INPUT_KEY naming no input stays and is refused as a parameter. */
    const char *json =
        "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\", \"inputs\": []},"
        " {\"op\": \"FullyConnected\", \"name\": \"fc\", \"param\": {\"num_hidden\": \"2\"},"
        " \"attr\": {\"gamma_lr_mult\": \"2\"}, \"inputs\": [[0, 0]]}], \"heads\": [[1, 0]]}";
    ck_assert_int_eq(mx_graph_from_json(json, strlen(json), &g), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "'gamma_lr_mult'"));
}
END_TEST

START_TEST(unknown_operators_are_reported_together)
{
    const char *json =
        "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\", \"inputs\": []},"
        " {\"op\": \"bogus_relu\", \"name\": \"a\", \"inputs\": [[0, 0, 0]]},"
        " {\"op\": \"bogus_sigmoid\", \"name\": \"b\", \"inputs\": [[1, 0, 0]]},"
        " {\"op\": \"bogus_relu\", \"name\": \"c\", \"inputs\": [[2, 0, 0]]}], \"heads\": [[3, 0, 0]]}";
    mx_graph *g;
    ck_assert_int_eq(mx_graph_from_json(json, strlen(json), &g), MX_ERR_FORMAT);
    ck_assert_ptr_null(g);
    ck_assert_str_eq(mx_last_error(), "symbol json: 2 unknown operators: 'bogus_relu' (nodes 'a', 'c'); "
                                      "'bogus_sigmoid' (node 'b')");
    /* Versions: checked before any conversion to int. */
    const char *versions[] = {"1e300", "-1", "10901.5", "1e7", "\"x\""};
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        char buf[512];
        snprintf(buf, sizeof(buf),
                 "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\", \"inputs\": []}], \"heads\": [[0, 0, 0]],"
                 " \"attrs\": {\"mxnet_version\": [\"int\", %s]}}", versions[i]);
        ck_assert_int_eq(mx_graph_from_json(buf, strlen(buf), &g), MX_ERR_FORMAT);
        ck_assert_msg(strstr(mx_last_error(), "mxnet_version"), "%s: %s", versions[i], mx_last_error());
    }
}
END_TEST

START_TEST(json_reader_handles_escapes_and_depth)
{
    mx_json *v;
    const char *ok = "{\"a\": \"x\\u00e9\\ud83d\\ude00\\n\", \"b\": [1, -2.5e3, true, null]}";
    ck_assert_int_eq(mx_json_parse(ok, strlen(ok), &v), MX_OK);
    ck_assert_str_eq(mx_json_get(v, "a")->string, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    ck_assert_double_eq(mx_json_get(v, "b")->items[1]->number, -2500.0);
    mx_json_free(v);
    char deep[400];
    memset(deep, '[', sizeof(deep));
    ck_assert_int_eq(mx_json_parse(deep, sizeof(deep), &v), MX_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "too deep"));
    const char *bad[] = {"{\"a\" 1}", "[1,]", "\"\\ud800\"", "01", "[1 2]", "\"abc", "{\"a\":}", "-", "1.e5", "nul"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(mx_json_parse(bad[i], strlen(bad[i]), &v) == MX_ERR_FORMAT, "accepted %s", bad[i]);
}
END_TEST

/* A name with control characters (reachable from JSON as \u0001) writes
 * JSON that reads back: found by fuzz_symbol_json. */
START_TEST(control_characters_in_names_round_trip)
{
    const char *in = "{\"nodes\": [{\"op\": \"null\", \"name\": \"a\\u0001b\\u001f\", \"inputs\": []}], "
                     "\"arg_nodes\": [0], \"heads\": [[0, 0, 0]]}";
    mx_graph *g = NULL, *back = NULL;
    ck_assert_int_eq(mx_graph_from_json(in, strlen(in), &g), MX_OK);
    ck_assert_str_eq(mx_graph_node(g, 0)->name, "a\001b\037");
    char *json = NULL;
    size_t len = 0;
    ck_assert_int_eq(mx_graph_to_json(g, &json, &len), MX_OK);
    ck_assert_ptr_nonnull(strstr(json, "\"a\\u0001b\\u001f\""));
    ck_assert_int_eq(mx_graph_from_json(json, len, &back), MX_OK);
    ck_assert_str_eq(mx_graph_node(back, 0)->name, "a\001b\037");
    mx_graph_free(back);
    mx_graph_free(g);
    mx_free(json);
}
END_TEST

/* conv -> BatchNorm(axis) [-> extra consumer of the convolution's output]:
 * how many pairs mx_graph_fold_batchnorm folds, and what the new graph
 * holds. */
static int folds_of(const char *axis, bool second_reader, bool bn_mean_used, const char *keep, int *n_nodes_out)
{
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t d, c, b, r;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &d), MX_OK);
    mx_entry x = {d, 0};
    const char *ck[] = {"num_filter", "kernel", "no_bias"}, *cv[] = {"4", "(3,3)", "True"};
    ck_assert_int_eq(mx_graph_add_op(g, "Convolution", "conv", ck, cv, 3, &x, 1, NULL, 0, &c), MX_OK);
    x = (mx_entry){c, 0};
    const char *bk[] = {"axis", "output_mean_var"}, *bv[] = {axis, bn_mean_used ? "True" : "False"};
    ck_assert_int_eq(mx_graph_add_op(g, "BatchNorm", "bn", bk, bv, 2, &x, 1, NULL, 0, &b), MX_OK);
    mx_entry heads[3] = {{b, 0}};
    int n_heads = 1;
    if (second_reader) {
        const char *ak[] = {"act_type"}, *av[] = {"relu"};
        ck_assert_int_eq(mx_graph_add_op(g, "Activation", "relu", ak, av, 1, &x, 1, NULL, 0, &r), MX_OK);
        heads[n_heads++] = (mx_entry){r, 0};
    }
    if (bn_mean_used) heads[n_heads++] = (mx_entry){b, 1};
    ck_assert_int_eq(mx_graph_set_heads(g, heads, n_heads), MX_OK);
    mx_graph *out;
    mx_graph_bn_fold *folds;
    int n;
    ck_assert_msg(mx_graph_fold_batchnorm(g, keep, &out, &folds, &n) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(out != NULL, n > 0);
    *n_nodes_out = out ? mx_graph_num_nodes(out) : 0;
    if (n == 1) {
        /* data, the new weight and bias, the convolution (with a bias now). */
        ck_assert_int_eq(mx_graph_num_nodes(out), 4);
        ck_assert_str_eq(folds[0].weight, "conv_weight");
        ck_assert_ptr_null(folds[0].bias);
        ck_assert_str_eq(folds[0].moving_var, "bn_moving_var");
        ck_assert_str_eq(folds[0].new_weight, "conv_weight_bnfold");
        uint32_t nc = mx_graph_find(out, "conv");
        ck_assert_uint_ne(nc, MX_NO_NODE);
        ck_assert_int_eq(mx_graph_node(out, nc)->n_inputs, 3);
        ck_assert_str_eq(mx_graph_get_attr(out, nc, "no_bias"), "False");
        ck_assert_uint_eq(mx_graph_head(out, 0).node, nc);
        ck_assert_uint_eq(mx_graph_find(out, "bn_gamma"), MX_NO_NODE);
        ck_assert_uint_eq(mx_graph_find(out, "bn"), MX_NO_NODE);
    }
    mx_graph_bn_folds_free(folds, n);
    mx_graph_free(out);
    mx_graph_free(g);
    return n;
}

START_TEST(batchnorm_folds_only_where_nothing_can_tell)
{
    int nodes;
    ck_assert_int_eq(folds_of("1", false, false, NULL, &nodes), 1);
    ck_assert_int_eq(folds_of("1", false, false, "bn_output", &nodes), 0);
    ck_assert_int_eq(folds_of("1", false, false, "conv", &nodes), 0);
    ck_assert_int_eq(folds_of("1", false, false, "convx", &nodes), 1); /* another layer's name */
    ck_assert_int_eq(folds_of("2", false, false, NULL, &nodes), 0);    /* not the channel axis */
    ck_assert_int_eq(folds_of("1", true, false, NULL, &nodes), 0);     /* the convolution's output read twice */
    ck_assert_int_eq(folds_of("1", false, true, NULL, &nodes), 0);     /* the batch mean is an output */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("symbol");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, compose_creates_mxnet_named_variables);
    tcase_add_test(tc, composition_errors_name_the_layer);
    tcase_add_test(tc, mxnet_fixtures_load_and_round_trip);
    tcase_add_test(tc, batchnorm_aux_states_and_json_layout);
    tcase_add_test(tc, attributes_are_written_in_mxnet_form);
    tcase_add_test(tc, gradient_sums_shared_entries);
    tcase_add_test(tc, gradient_prunes_unreached_nodes);
    tcase_add_test(tc, malformed_json_is_rejected_not_crashed_on);
    tcase_add_test(tc, legacy_attr_key_and_missing_aux_are_upgraded);
    tcase_add_test(tc, json_reader_handles_escapes_and_depth);
    tcase_add_test(tc, mxnet_0_8_file_upgrades_as_mxnet_does);
    tcase_add_test(tc, unknown_operators_are_reported_together);
    tcase_add_test(tc, control_characters_in_names_round_trip);
    tcase_add_test(tc, batchnorm_folds_only_where_nothing_can_tell);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
