/*
 * test_graph_scale.c - deep nets build, bind and train: a 2,000-layer chain
 * of FullyConnected layers compiles from a config (each layer's input found
 * by name), infers shapes and plans memory for training, binds and runs
 * forward and backward with known values, and trains end to end through
 * mxtrain (4,000 parameters, saved and counted) and draws with mxviz. Correctness only: the time bound is in
 * scripts/bench/graph_scale.sh, not here.
 */
#include "config/config.h"
#include "executor/executor.h"
#include "support/graphs.h"
#include "support/tooltest.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 2000

/* The chain: data(4, 2) -> fc0 ... fc1999 (2 units) -> softmax. Every
 * third layer names its input explicitly (the rest take the previous one). */
static char *chain_config(int layers, size_t *len)
{
    size_t cap = (size_t)layers * 96 + 512, n = 0;
    char *t = malloc(cap);
    ck_assert_ptr_nonnull(t);
    n += (size_t)snprintf(t + n, cap - n, "[net]\ninputs = data\n");
    for (int i = 0; i < layers; i++) {
        n += (size_t)snprintf(t + n, cap - n, "[layer fc%d]\nop = FullyConnected\nnum_hidden = 2\n", i);
        if (i > 0 && i % 3 == 0) n += (size_t)snprintf(t + n, cap - n, "input = fc%d\n", i - 1);
    }
    n += (size_t)snprintf(t + n, cap - n, "[layer softmax]\nop = SoftmaxOutput\n");
    *len = n;
    return t;
}

START_TEST(deep_chain_compiles_plans_and_binds)
{
    size_t len;
    char *text = chain_config(LAYERS, &len);
    mx_config *cfg;
    ck_assert_msg(mx_config_parse("deep.conf", text, len, NULL, 0, &cfg) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(cfg->n_layers, LAYERS + 1);
    /* Names resolve to the right nodes, with the implicit variables. */
    const mx_config_layer *l = mx_config_find_layer(cfg, "fc1234");
    ck_assert_ptr_nonnull(l);
    ck_assert_str_eq(mx_graph_node(cfg->graph, l->node)->name, "fc1234");
    uint32_t w = mx_graph_find(cfg->graph, "fc1234_weight");
    ck_assert_uint_ne(w, MX_NO_NODE);
    ck_assert_str_eq(mx_graph_node(cfg->graph, w)->name, "fc1234_weight");
    ck_assert_uint_eq(mx_graph_node(cfg->graph, l->node)->inputs[1].node, w);
    ck_assert_uint_eq(mx_graph_node(cfg->graph, l->node)->inputs[0].node, cfg->layers[1233].node);
    ck_assert_uint_eq(mx_graph_find(cfg->graph, "fc2000_weight"), MX_NO_NODE);

    const char *names[] = {"data"};
    mx_shape shapes[] = {MX_SHAPE(4, 3)};
    mx_memory_plan_stats st;
    ck_assert_msg(mx_executor_plan_memory(cfg->graph, names, shapes, 1, true, &st) == MX_OK, "%s", mx_last_error());
    ck_assert_uint_gt(st.naive, 0);
    ck_assert_uint_le(st.both, st.naive);

    /* Bind for training: every weight the identity-like [[1, 0], [0, 1]]
     * (fc0 reads 3 inputs: [[1, 0, 0], [0, 1, 0]]), biases 0, so the chain
     * passes x[:, :2] through and softmax gives its probabilities. */
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    int n_nodes = mx_graph_num_nodes(cfg->graph);
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)n_nodes);
    int n_args = mx_graph_list_arguments(cfg->graph, ids);
    ck_assert_int_eq(n_args, 2 * LAYERS + 2); /* data, weights, biases, label */
    mx_ndarray **args = calloc((size_t)n_args, sizeof(*args)), **grads = calloc((size_t)n_args, sizeof(*grads));
    float x[12] = {0.5f, -1, 7, 2, 0, 7, -3, 1, 7, 0.25f, 0.25f, 7}, label[4] = {0, 1, 1, 0};
    for (int i = 0; i < n_args; i++) {
        const char *name = mx_graph_node(cfg->graph, ids[i])->name;
        size_t nl = strlen(name);
        mx_shape s = MX_SHAPE(2);
        float v[6] = {0};
        if (!strcmp(name, "data")) s = MX_SHAPE(4, 3);
        else if (!strcmp(name, "softmax_label")) s = MX_SHAPE(4);
        else if (nl > 7 && !strcmp(name + nl - 7, "_weight")) {
            bool first = !strcmp(name, "fc0_weight");
            s = first ? MX_SHAPE(2, 3) : MX_SHAPE(2, 2);
            v[0] = 1;
            v[first ? 4 : 3] = 1;
        }
        ck_assert_int_eq(mx_ndarray_create(rt, s, MX_FLOAT32, mx_cpu(), &args[i]), MX_OK);
        const float *src = !strcmp(name, "data") ? x : !strcmp(name, "softmax_label") ? label : v;
        ck_assert_int_eq(mx_ndarray_from_host(args[i], src, sizeof(float) * (size_t)mx_ndarray_size(args[i])), MX_OK);
        if (strcmp(name, "data") && strcmp(name, "softmax_label"))
            ck_assert_int_eq(mx_ndarray_create(rt, s, MX_FLOAT32, mx_cpu(), &grads[i]), MX_OK);
    }
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args, .arg_grads = grads, .for_training = true};
    mx_executor *ex;
    ck_assert_msg(mx_executor_bind(rt, cfg->graph, &bc, &ex) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_executor_forward(ex, true), MX_OK);
    ck_assert_int_eq(mx_executor_backward(ex, NULL), MX_OK);
    float out[8];
    ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), out, sizeof(out)), MX_OK);
    for (int r = 0; r < 4; r++) {
        double a = x[3 * r], b = x[3 * r + 1], p0 = 1 / (1 + exp(b - a));
        ck_assert_double_eq_tol(out[2 * r], p0, 1e-5);
        ck_assert_double_eq_tol(out[2 * r + 1], 1 - p0, 1e-5);
    }
    /* The last bias's gradient: the softmax gradient summed over the batch
     * (the identity weights pass it through unchanged). */
    for (int i = 0; i < n_args; i++) {
        if (strcmp(mx_graph_node(cfg->graph, ids[i])->name, "fc1999_bias")) continue;
        float g[2];
        ck_assert_int_eq(mx_ndarray_to_host(grads[i], g, sizeof(g)), MX_OK);
        double want[2] = {0, 0};
        for (int r = 0; r < 4; r++) {
            double a = x[3 * r], b = x[3 * r + 1], p0 = 1 / (1 + exp(b - a));
            want[0] += p0 - (label[r] == 0);
            want[1] += (1 - p0) - (label[r] == 1);
        }
        ck_assert_double_eq_tol(g[0], want[0], 1e-4);
        ck_assert_double_eq_tol(g[1], want[1], 1e-4);
    }
    mx_executor_free(ex);
    for (int i = 0; i < n_args; i++) {
        mx_ndarray_free(args[i]);
        if (grads[i]) mx_ndarray_free(grads[i]);
    }
    free(args);
    free(grads);
    free(ids);
    mx_runtime_free(rt);
    mx_config_free(cfg);
    free(text);
}
END_TEST

START_TEST(deep_chain_duplicate_layer_is_found)
{
    size_t len;
    char *text = chain_config(LAYERS, &len);
    /* A second [layer fc17] at the end. */
    text = realloc(text, len + 64);
    len += (size_t)sprintf(text + len, "[layer fc17]\nop = Activation\nact_type = relu\n");
    mx_config *cfg;
    ck_assert_int_eq(mx_config_parse("dup.conf", text, len, NULL, 0, &cfg), MX_ERR_INVALID);
    /* fc17's header: 2 [net] lines, 3 per layer, 1 more every third. */
    ck_assert_msg(strstr(mx_last_error(), "duplicate layer name 'fc17' (first defined at line 59)"), "%s",
                  mx_last_error());
    free(text);
}
END_TEST

START_TEST(deep_chain_trains_and_draws)
{
    char tmp[256], conf[400], args[1024], *err, *out;
    tool_tmp_make(tmp, sizeof(tmp), "graph-scale");
    size_t len;
    char *text = chain_config(LAYERS, &len);
    snprintf(conf, sizeof(conf), "%s/deep.conf", tmp);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, len, f);
    fprintf(f, "[train]\niter = synthetic\ndata_shape = 3\nnum_classes = 2\nnum_samples = 8\nbatch_size = 4\n"
               "[fit]\nnum_epoch = 1\nctx = cpu\nmodel_prefix = %s/deep\n"
               "initializer = uniform(scale=0.5)\n" /* shrinks through the chain: stays finite */, tmp);
    fclose(f);
    free(text);
    const char *build = getenv("MX_TEST_BUILD");
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/bin/mxtrain", build && *build ? build : "build");
    snprintf(args, sizeof(args), "%s", conf);
    ck_assert_msg(tool_run(bin, args, tmp, NULL, NULL, &err) == 0, "%s", err);
    free(err);
    char params[400];
    snprintf(params, sizeof(params), "%s/deep-0001.params", tmp);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray_list all;
    ck_assert_msg(mx_ndarray_load(rt, params, &all) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(all.count, 2 * LAYERS);
    mx_ndarray_list_free(&all);
    mx_runtime_free(rt);

    snprintf(bin, sizeof(bin), "%s/bin/mxviz", build && *build ? build : "build");
    ck_assert_msg(tool_run(bin, args, tmp, NULL, &out, &err) == 0, "%s", err);
    int nodes = 0;
    for (const char *p = out; (p = strstr(p, "label=\"fc")); p++) nodes++;
    ck_assert_int_eq(nodes, LAYERS);
    ck_assert_ptr_nonnull(strstr(out, "fc1999"));
    free(out);
    free(err);
    tool_tmp_remove(tmp);
}
END_TEST

/* Names of any length: two layers whose 700-character names differ only
 * at the end get their own weights, gradient nodes and head gradients (a
 * fixed buffer cut them to one clashing name). */
START_TEST(long_names_keep_their_variables)
{
    char a[701], b[701];
    memset(a, 'n', 700);
    a[700] = '\0';
    memcpy(b, a, sizeof(a));
    a[699] = 'a';
    b[699] = 'b';
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    uint32_t data;
    ck_assert_int_eq(mx_graph_add_variable(g, "data", NULL, 0, &data), MX_OK);
    mx_entry in = test_entry(data);
    uint32_t la = test_graph_op(g, "FullyConnected", a, "num_hidden=2", &in, 1);
    in = test_entry(la);
    uint32_t lb = test_graph_op(g, "FullyConnected", b, "num_hidden=2", &in, 1);
    char name[800];
    snprintf(name, sizeof(name), "%s_weight", b);
    uint32_t wb = mx_graph_find(g, name);
    ck_assert_uint_ne(wb, MX_NO_NODE);
    ck_assert_str_eq(mx_graph_node(g, wb)->name, name);
    ck_assert_uint_eq(mx_graph_node(g, lb)->inputs[1].node, wb);
    snprintf(name, sizeof(name), "%s_weight", a);
    uint32_t wa = mx_graph_find(g, name);
    ck_assert_uint_ne(wa, MX_NO_NODE);
    ck_assert_uint_ne(wa, wb);
    mx_entry head = test_entry(lb);
    ck_assert_int_eq(mx_graph_set_heads(g, &head, 1), MX_OK);
    uint32_t wrt[2] = {wa, wb};
    mx_entry grads[2];
    ck_assert_msg(mx_graph_gradient(g, wrt, 2, grads) == MX_OK, "%s", mx_last_error());
    snprintf(name, sizeof(name), "_backward_%s", a);
    ck_assert_uint_ne(mx_graph_find(g, name), MX_NO_NODE);
    snprintf(name, sizeof(name), "%s_output_head_grad", b);
    ck_assert_uint_ne(mx_graph_find(g, name), MX_NO_NODE);
    ck_assert_uint_ne(grads[0].node, grads[1].node);
    mx_graph_free(g);
}
END_TEST

/* The name index: the first node of a name wins, a dropped node (a failed
 * add) leaves no trace, and look-ups survive the table's growth. */
START_TEST(name_index_first_wins_and_drops)
{
    mx_graph *g;
    ck_assert_int_eq(mx_graph_create(&g), MX_OK);
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "v%d", i);
        ck_assert_int_eq(mx_graph_add_variable(g, name, NULL, 0, NULL), MX_OK);
    }
    ck_assert_int_eq(mx_graph_add_variable(g, "v17", NULL, 0, NULL), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "name 'v17' is already used"), "%s", mx_last_error());
    /* An attribute given twice: the implicit weight is added, then
     * dropped again with the failure, and leaves the index. */
    mx_entry in = test_entry(0);
    const char *k[] = {"num_hidden"}, *v[] = {"2"};
    mx_attr twice[2] = {{"__lr_mult__", "1"}, {"__lr_mult__", "2"}};
    ck_assert_int_eq(mx_graph_add_op(g, "FullyConnected", "fc", k, v, 1, &in, 1, twice, 2, NULL), MX_ERR_INVALID);
    ck_assert_msg(strstr(mx_last_error(), "given twice"), "%s", mx_last_error());
    ck_assert_int_eq(mx_graph_num_nodes(g), 5000);
    ck_assert_uint_eq(mx_graph_find(g, "fc"), MX_NO_NODE);
    ck_assert_uint_eq(mx_graph_find(g, "fc_weight"), MX_NO_NODE);
    ck_assert_int_eq(mx_graph_add_variable(g, "fc_weight", NULL, 0, NULL), MX_OK);
    ck_assert_uint_eq(mx_graph_find(g, "fc_weight"), 5000);
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "v%d", i);
        ck_assert_uint_eq(mx_graph_find(g, name), (uint32_t)i);
    }
    mx_graph *c;
    ck_assert_int_eq(mx_graph_clone(g, &c), MX_OK);
    ck_assert_uint_eq(mx_graph_find(c, "v4321"), 4321);
    ck_assert_uint_eq(mx_graph_find(c, "v5000"), MX_NO_NODE);
    ck_assert_uint_eq(mx_graph_find(c, "fc_weight"), 5000);
    mx_graph_free(c);
    mx_graph_free(g);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("graph_scale");
    TCase *tc = tcase_create("deep");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, deep_chain_compiles_plans_and_binds);
    tcase_add_test(tc, deep_chain_duplicate_layer_is_found);
    tcase_add_test(tc, deep_chain_trains_and_draws);
    tcase_add_test(tc, long_names_keep_their_variables);
    tcase_add_test(tc, name_index_first_wins_and_drops);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
