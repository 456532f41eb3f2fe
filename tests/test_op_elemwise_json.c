/*
 * test_op_elemwise_json.c - issue 17 end to end: a Gluon HybridBlock that
 * calls F.relu, F.sigmoid, F.exp, F.broadcast_mul, F.where, F.BlockGrad,
 * ** 2, F.tanh, 3 - ..., F.broadcast_maximum, / 2.5, F.log1p, F.abs,
 * F.square, F.broadcast_sub, F.negative and F.identity, exported by MXNet
 * 1.9.1 (net.export), loads from its symbol JSON, binds, and reproduces
 * MXNet's output and the gradients of all three inputs for a head
 * gradient.
 *
 * Made with ~/.cache/mxc/mxnet-venv (MXNet 1.9.1, CPU):
 *   a = F.relu(x) * 2 + F.sigmoid(y); b = F.broadcast_mul(a, F.exp(z))
 *   c = F.where(x > 0.5, b, F.BlockGrad(a)) ** 2
 *   d = F.broadcast_maximum(c, 3 - F.tanh(x)) / 2.5
 *   return F.broadcast_sub(F.log1p(F.abs(d)), F.square(z)) + F.identity(F.negative(y))
 * with x, y of shape (2,3), z of (2,1), the values below, o.backward(h)
 * under autograd.record(), printed with %.9g.
 */
#include "executor/executor.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char gluon_json[] =
    "{\"nodes\": [{\"op\": \"null\", \"name\": \"data0\", \"inputs\": []}, {"
    "\"op\": \"_greater_scalar\", \"name\": \"b0__greater_scalar0\", \"attrs\": {\"scalar\": \"0.5\"}, \"inputs\": [[0, 0, 0]]}, {"
    "\"op\": \"relu\", \"name\": \"b0_relu0\", \"inputs\": [[0, 0, 0]]}, {"
    "\"op\": \"_mul_scalar\", \"name\": \"b0__mulscalar0\", \"attrs\": {\"scalar\": \"2\"}, \"inputs\": [[2, 0, 0]]}, {"
    "\"op\": \"null\", \"name\": \"data1\", \"inputs\": []}, {"
    "\"op\": \"sigmoid\", \"name\": \"b0_sigmoid0\", \"inputs\": [[4, 0, 0]]}, {"
    "\"op\": \"elemwise_add\", \"name\": \"b0__plus0\", \"inputs\": [[3, 0, 0], [5, 0, 0]]}, {"
    "\"op\": \"null\", \"name\": \"data2\", \"inputs\": []}, {"
    "\"op\": \"exp\", \"name\": \"b0_exp0\", \"inputs\": [[7, 0, 0]]}, {"
    "\"op\": \"broadcast_mul\", \"name\": \"b0_broadcast_mul0\", \"inputs\": [[6, 0, 0], [8, 0, 0]]}, {"
    "\"op\": \"BlockGrad\", \"name\": \"b0_blockgrad0\", \"inputs\": [[6, 0, 0]]}, {"
    "\"op\": \"where\", \"name\": \"b0_where0\", \"inputs\": [[1, 0, 0], [9, 0, 0], [10, 0, 0]]}, {"
    "\"op\": \"_power_scalar\", \"name\": \"b0__powerscalar0\", \"attrs\": {\"scalar\": \"2\"}, \"inputs\": [[11, 0, 0]]}, {"
    "\"op\": \"tanh\", \"name\": \"b0_tanh0\", \"inputs\": [[0, 0, 0]]}, {"
    "\"op\": \"_rminus_scalar\", \"name\": \"b0__rminusscalar0\", \"attrs\": {\"scalar\": \"3\"}, \"inputs\": [[13, 0, 0]]}, {"
    "\"op\": \"broadcast_maximum\", \"name\": \"b0_broadcast_maximum0\", \"inputs\": [[12, 0, 0], [14, 0, 0]]}, {"
    "\"op\": \"_div_scalar\", \"name\": \"b0__divscalar0\", \"attrs\": {\"scalar\": \"2.5\"}, \"inputs\": [[15, 0, 0]]}, {"
    "\"op\": \"abs\", \"name\": \"b0_abs0\", \"inputs\": [[16, 0, 0]]}, {"
    "\"op\": \"log1p\", \"name\": \"b0_log1p0\", \"inputs\": [[17, 0, 0]]}, {"
    "\"op\": \"square\", \"name\": \"b0_square0\", \"inputs\": [[7, 0, 0]]}, {"
    "\"op\": \"broadcast_sub\", \"name\": \"b0_broadcast_sub0\", \"inputs\": [[18, 0, 0], [19, 0, 0]]}, {"
    "\"op\": \"negative\", \"name\": \"b0_negative0\", \"inputs\": [[4, 0, 0]]}, {"
    "\"op\": \"_copy\", \"name\": \"b0_identity0\", \"inputs\": [[21, 0, 0]]}, {"
    "\"op\": \"elemwise_add\", \"name\": \"b0__plus1\", \"inputs\": [[20, 0, 0], [22, 0, 0]]}], \"arg_nodes\": [0, 4, 7], \"node_row_ptr\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24], \"heads\": [[23, 0, 0]], \"attrs\": {\"mxnet_version\": [\"int\", 10901]}}";

static const float xv[6] = {0.9f, -0.3f, 0.6f, 1.2f, 0.1f, -0.8f};
static const float yv[6] = {0.2f, -1.1f, 0.7f, -0.4f, 0.5f, 1.3f};
static const float zv[2] = {0.3f, -0.6f};
static const float hv[6] = {1.0f, -0.5f, 2.0f, 0.25f, 1.5f, -1.0f};
static const float want_out[6] = {1.32432425f, 1.85006833f, 0.475190938f, 0.705483437f, -0.089830339f, -0.757558823f};
static const float want_dx[6] = {1.36345792f, 0.0790094584f, 3.07384396f, 0.173481181f, -0.275001496f, 0.0906962752f};
static const float want_dy[6] = {-0.8312608f, 0.5f, -1.65924454f, -0.229159638f, -1.5f, 1.0f};
static const float want_dz[2] = {2.97320843f, 1.14298749f};

static void expect(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-6f + 1e-5f * fabsf(want[i]), "%s[%d] = %.9g, MXNet %.9g", what, i,
                      got[i], want[i]);
}

START_TEST(gluon_export_trains_like_mxnet)
{
    mx_graph *g0, *g;
    ck_assert_msg(mx_graph_from_json(gluon_json, strlen(gluon_json), &g0) == MX_OK, "%s", mx_last_error());
    /* Written back and read again, every op keeps its MXNet name and attributes. */
    char *js;
    size_t len;
    ck_assert_int_eq(mx_graph_to_json(g0, &js, &len), MX_OK);
    ck_assert_msg(strstr(js, "\"op\": \"_copy\"") && strstr(js, "\"op\": \"broadcast_maximum\"") &&
                      strstr(js, "\"scalar\": \"2.5\""),
                  "%s", js);
    ck_assert_msg(mx_graph_from_json(js, len, &g) == MX_OK, "%s", mx_last_error());
    ck_assert_int_eq(mx_graph_num_nodes(g), mx_graph_num_nodes(g0));
    for (int i = 0; i < mx_graph_num_nodes(g); i++)
        ck_assert_ptr_eq(mx_graph_node(g, (uint32_t)i)->op, mx_graph_node(g0, (uint32_t)i)->op);
    free(js);
    mx_graph_free(g0);
    uint32_t ids[8];
    int n_args = mx_graph_list_arguments(g, ids);
    ck_assert_int_eq(n_args, 3);
    mx_runtime *rt;
    ck_assert_int_eq(mx_runtime_create(NULL, &rt), MX_OK);
    mx_ndarray *args[3], *grads[3], *head;
    const float *vals[3] = {xv, yv, zv};
    for (int i = 0; i < 3; i++) {
        const char *name = mx_graph_node(g, ids[i])->name;
        int k = name[4] - '0'; /* data0, data1, data2 */
        ck_assert_msg(!strncmp(name, "data", 4) && k >= 0 && k < 3, "argument %s", name);
        mx_shape s = k == 2 ? MX_SHAPE(2, 1) : MX_SHAPE(2, 3);
        ck_assert_int_eq(mx_ndarray_create(rt, s, MX_FLOAT32, mx_cpu(), &args[i]), MX_OK);
        ck_assert_int_eq(mx_ndarray_create(rt, s, MX_FLOAT32, mx_cpu(), &grads[i]), MX_OK);
        ck_assert_int_eq(mx_ndarray_from_host(args[i], vals[k], sizeof(float) * (size_t)mx_shape_size(&s)), MX_OK);
    }
    ck_assert_int_eq(mx_ndarray_create(rt, MX_SHAPE(2, 3), MX_FLOAT32, mx_cpu(), &head), MX_OK);
    ck_assert_int_eq(mx_ndarray_from_host(head, hv, sizeof(hv)), MX_OK);
    mx_bind_config bc = {.ctx = mx_cpu(), .args = args, .arg_grads = grads, .for_training = true};
    mx_executor *ex;
    ck_assert_msg(mx_executor_bind(rt, g, &bc, &ex) == MX_OK, "%s", mx_last_error());
    for (int pass = 0; pass < 2; pass++) { /* the second pass reuses the planned buffers */
        ck_assert_int_eq(mx_executor_forward(ex, true), MX_OK);
        ck_assert_int_eq(mx_executor_backward(ex, &head), MX_OK);
        float out[6], d[3][6];
        ck_assert_int_eq(mx_ndarray_to_host(mx_executor_output(ex, 0), out, sizeof(out)), MX_OK);
        expect("output", out, want_out, 6);
        for (int i = 0; i < 3; i++) {
            const char *name = mx_graph_node(g, ids[i])->name;
            int k = name[4] - '0';
            ck_assert_int_eq(mx_ndarray_to_host(grads[i], d[k], sizeof(float) * (k == 2 ? 2 : 6)), MX_OK);
        }
        expect("dx", d[0], want_dx, 6);
        expect("dy", d[1], want_dy, 6);
        expect("dz", d[2], want_dz, 2);
    }
    mx_executor_free(ex);
    for (int i = 0; i < 3; i++) {
        mx_ndarray_free(args[i]);
        mx_ndarray_free(grads[i]);
    }
    mx_ndarray_free(head);
    mx_runtime_free(rt);
    mx_graph_free(g);
}
END_TEST

/* An operator this build lacks is named, with a near miss from the whole
 * registry (every name and alias, however many). */
START_TEST(unknown_operator_suggests_a_near_name)
{
    static const char json[] = "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\", \"inputs\": []}, "
                               "{\"op\": \"broadcast_maximun\", \"name\": \"m\", \"inputs\": [[0, 0, 0], [0, 0, 0]]}], "
                               "\"arg_nodes\": [0], \"heads\": [[1, 0, 0]]}";
    mx_graph *g;
    ck_assert_int_eq(mx_graph_from_json(json, strlen(json), &g), MX_ERR_FORMAT);
    const char *msg = mx_last_error();
    ck_assert_msg(strstr(msg, "unknown operator 'broadcast_maximun'") && strstr(msg, "did you mean 'broadcast_maximum'"),
                  "%s", msg);
    /* the last name in the table is among the candidates too */
    const mx_op_def *op;
    ck_assert_int_eq(mx_op_lookup("wherf", &op), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "did you mean 'where'"));
}
END_TEST

/* No name or alias belongs to two operators. */
START_TEST(names_are_unique)
{
    for (int i = 0; i < mx_op_count(); i++) {
        const mx_op_def *op = mx_op_at(i);
        ck_assert_msg(mx_op_find(op->name) == op, "%s is shadowed", op->name);
        for (const char *const *a = op->aliases; a && *a; a++)
            ck_assert_msg(mx_op_find(*a) == op, "alias %s of %s is shadowed", *a, op->name);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_elemwise_json");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gluon_export_trains_like_mxnet);
    tcase_add_test(tc, unknown_operator_suggests_a_near_name);
    tcase_add_test(tc, names_are_unique);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
