/*
 * test_symbol_tensor_ops.c - a symbol JSON written by MXNet 1.9.1 that uses
 * the issue-17 operators (LayerNorm, mean over an axis, expand_dims, tile,
 * slice with None, norm, max, stack, sum, squeeze) loads, binds, and gives
 * MXNet's forward output and data/gamma gradients.
 *
 * Made once in the venv with mx.sym (see the node names) and
 *   x = (arange(24).reshape(2,3,4) % 7) / 5 - 0.4, gamma = [1,-0.5,2,0.25],
 *   beta = [0.1,0.2,-0.3,0]; simple_bind, forward(is_train=True),
 *   backward(ones((2,2,2))).
 */
#include "executor/executor.h"
#include "support/graphs.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char net_json[] =
    "{\"nodes\":[{\"op\":\"null\",\"name\":\"data\",\"inputs\":[]},{\"op\":\"null\",\"name\":\"ln_gam"
    "ma\",\"attrs\":{\"axis\":\"-1\"},\"inputs\":[]},{\"op\":\"null\",\"name\":\"ln_beta\",\"attrs\":"
    "{\"axis\":\"-1\"},\"inputs\":[]},{\"op\":\"LayerNorm\",\"name\":\"ln\",\"attrs\":{\"axis\":\"-1"
    "\"},\"inputs\":[[0,0,0],[1,0,0],[2,0,0]]},{\"op\":\"mean\",\"name\":\"m\",\"attrs\":{\"axis\":\""
    "(1,)\",\"keepdims\":\"False\"},\"inputs\":[[3,0,0]]},{\"op\":\"expand_dims\",\"name\":\"e\",\"at"
    "trs\":{\"axis\":\"1\"},\"inputs\":[[4,0,0]]},{\"op\":\"tile\",\"name\":\"t\",\"attrs\":{\"reps\""
    ":\"(1, 3, 1)\"},\"inputs\":[[5,0,0]]},{\"op\":\"elemwise_mul\",\"name\":\"_mul0\",\"inputs\":[[6"
    ",0,0],[0,0,0]]},{\"op\":\"slice\",\"name\":\"s\",\"attrs\":{\"begin\":\"(None, 1)\",\"end\":\"(N"
    "one, None)\"},\"inputs\":[[7,0,0]]},{\"op\":\"norm\",\"name\":\"n\",\"attrs\":{\"axis\":\"-1\","
    "\"keepdims\":\"True\"},\"inputs\":[[8,0,0]]},{\"op\":\"max\",\"name\":\"max0\",\"attrs\":{\"axis"
    "\":\"-1\",\"keepdims\":\"True\"},\"inputs\":[[8,0,0]]},{\"op\":\"stack\",\"name\":\"st\",\"attrs"
    "\":{\"axis\":\"0\",\"num_args\":\"2\"},\"inputs\":[[9,0,0],[10,0,0]]},{\"op\":\"sum\",\"name\":"
    "\"su\",\"attrs\":{\"axis\":\"-1\"},\"inputs\":[[11,0,0]]},{\"op\":\"squeeze\",\"name\":\"sq\",\""
    "inputs\":[[12,0,0]]}],\"arg_nodes\":[0,1,2],\"node_row_ptr\":[0,1,2,3,6,7,8,9,10,11,12,13,14,15,"
    "16],\"heads\":[[13,0,0]],\"attrs\":{\"mxnet_version\":[\"int\",10901]}}";

static const double want_y[] = {0.8368964, 0.24622485, 0.46397948, 0.4470173,
                                0.7638359, 0.19095898, 0.048611645, 0.3704979};
static const double want_dx[] = {-0.64361227, -1.0248595, 3.9798584, -2.3113866, -0.6285709, -0.9918493,
                                 3.2944727,   0.47062358, -1.110004, -1.0248595, 5.675142,   -2.2992644,
                                 0.63069916,  -0.5634489, -0.29458517, 0.22733492, 0.897612, -0.46707493,
                                 -0.07634127, 1.0606452,  0.923322,    0.33867347, -1.0718846, 0.010019161};
static const double want_dgamma[] = {0.7611184, -0.03928177, 1.3960503, 0.02941389};

static mx_ndarray *array(mx_runtime *rt, mx_shape s, const float *v)
{
    mx_ndarray *a;
    ck_assert_int_eq(mx_ndarray_create(rt, s, MX_FLOAT32, mx_cpu(), &a), MX_OK);
    if (v) ck_assert_int_eq(mx_ndarray_from_host(a, v, sizeof(float) * (size_t)mx_shape_size(&s)), MX_OK);
    else ck_assert_int_eq(mx_nd_fill(a, 0.0), MX_OK);
    return a;
}

static void expect_close(mx_ndarray *a, const double *want, int n, const char *what)
{
    float got[32];
    ck_assert_int_eq(mx_ndarray_size(a), n);
    ck_assert_int_eq(mx_ndarray_to_host(a, got, sizeof(float) * (size_t)n), MX_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 2e-5 + 2e-5 * fabs(want[i]), "%s[%d] = %.7g, MXNet %.7g", what, i,
                      got[i], want[i]);
}

START_TEST(mxnet_json_forward_backward)
{
    mx_graph *g;
    ck_assert_msg(mx_graph_from_json(net_json, strlen(net_json), &g) == MX_OK, "%s", mx_last_error());
    mx_engine_config cfg = mx_engine_config_default();
    cfg.cpu_workers = 2;
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(&cfg, &rt), MX_OK);
    uint32_t ids[8];
    ck_assert_int_eq(mx_graph_list_arguments(g, ids), 3);
    ck_assert_str_eq(mx_graph_node(g, ids[1])->name, "ln_gamma");

    float x[24], gamma[] = {1, -0.5f, 2, 0.25f}, beta[] = {0.1f, 0.2f, -0.3f, 0}, ones[8];
    for (int i = 0; i < 24; i++) x[i] = (float)((i % 7) / 5.0 - 0.4);
    for (int i = 0; i < 8; i++) ones[i] = 1;
    mx_ndarray *args[3] = {array(rt, MX_SHAPE(2, 3, 4), x), array(rt, MX_SHAPE(4), gamma), array(rt, MX_SHAPE(4), beta)};
    mx_ndarray *grads[3] = {array(rt, MX_SHAPE(2, 3, 4), NULL), array(rt, MX_SHAPE(4), NULL),
                            array(rt, MX_SHAPE(4), NULL)};
    mx_grad_req reqs[3] = {MX_GRAD_WRITE, MX_GRAD_WRITE, MX_GRAD_WRITE};
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args, .arg_grads = grads, .grad_reqs = reqs, .for_training = true};
    mx_executor *ex;
    ck_assert_msg(mx_executor_bind(rt, g, &bc, &ex) == MX_OK, "%s", mx_last_error());
    ck_assert_msg(mx_executor_forward(ex, true) == MX_OK, "%s", mx_last_error());
    expect_close(mx_executor_output(ex, 0), want_y, 8, "output");
    mx_ndarray *hg = array(rt, MX_SHAPE(2, 2, 2), ones);
    ck_assert_msg(mx_executor_backward(ex, &hg) == MX_OK, "%s", mx_last_error());
    expect_close(grads[0], want_dx, 24, "data gradient");
    expect_close(grads[1], want_dgamma, 4, "gamma gradient");

    ck_assert_int_eq(mx_engine_wait_all(mx_runtime_engine(rt)), MX_OK);
    mx_executor_free(ex);
    mx_ndarray_free(hg);
    for (int i = 0; i < 3; i++) {
        mx_ndarray_free(args[i]);
        mx_ndarray_free(grads[i]);
    }
    mx_graph_free(g);
    mx_runtime_free(rt);
}
END_TEST

/* Hidden outputs count as in MXNet, so node_row_ptr of a written file
 * matches MXNet's: InstanceNorm 3 (output, mean, var), L2Normalization 2
 * (output, norm). MXNet 1.9.1 writes [0,1,2,3,6,8,9] for
 * Activation(L2Normalization(InstanceNorm(data))). */
START_TEST(hidden_outputs_counted_like_mxnet)
{
    static const char json[] =
        "{\"nodes\":[{\"op\":\"null\",\"name\":\"data\",\"inputs\":[]},{\"op\":\"null\",\"name\":\"in0_gamma\","
        "\"inputs\":[]},{\"op\":\"null\",\"name\":\"in0_beta\",\"inputs\":[]},{\"op\":\"InstanceNorm\",\"name\":"
        "\"in0\",\"inputs\":[[0,0,0],[1,0,0],[2,0,0]]},{\"op\":\"L2Normalization\",\"name\":\"l2\",\"inputs\":"
        "[[3,0,0]]},{\"op\":\"Activation\",\"name\":\"r\",\"attrs\":{\"act_type\":\"relu\"},\"inputs\":[[4,0,0]]}],"
        "\"arg_nodes\":[0,1,2],\"node_row_ptr\":[0,1,2,3,6,8,9],\"heads\":[[5,0,0]],"
        "\"attrs\":{\"mxnet_version\":[\"int\",10901]}}";
    mx_graph *g;
    ck_assert_msg(mx_graph_from_json(json, strlen(json), &g) == MX_OK, "%s", mx_last_error());
    char *out;
    size_t len;
    ck_assert_int_eq(mx_graph_to_json(g, &out, &len), MX_OK);
    char compact[4096];
    size_t n = 0;
    for (size_t i = 0; i < len && n + 1 < sizeof(compact); i++)
        if (out[i] != ' ' && out[i] != '\n') compact[n++] = out[i];
    compact[n] = '\0';
    ck_assert_msg(strstr(compact, "\"node_row_ptr\":[0,1,2,3,6,8,9]"), "%s", compact);
    free(out);
    mx_graph_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("symbol_tensor_ops");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mxnet_json_forward_backward);
    tcase_add_test(tc, hidden_outputs_counted_like_mxnet);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
