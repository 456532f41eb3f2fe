/* test_op_embedding.c - Embedding against a float64 reference: row lookup
 * with MXNet's index truncation and clipping, scatter-add weight gradient,
 * no gradient to the indices. */
#include "support/opcheck.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t iparam(const void *params, const char *name)
{
    const mx_op_def *op = mx_op_find("Embedding");
    return *(const int64_t *)((const char *)params + mx_op_param(op, name)->offset);
}

/* MXNet's take with mode clip on a float index. */
static int64_t ref_row(double v, int64_t rows)
{
    int64_t j = v < 0 ? (int64_t)ceil(v) : (int64_t)floor(v);
    return j < 0 ? 0 : j >= rows ? rows - 1 : j;
}

static void emb_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)out_shapes;
    int64_t rows = iparam(params, "input_dim"), d = iparam(params, "output_dim");
    int64_t n = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = ref_row(in[0][i], rows);
        for (int64_t j = 0; j < d; j++) out[0][i * d + j] = in[1][r * d + j];
    }
}

static int64_t g_rows;

/* Indices: mostly whole numbers in range, with repeats, fractions and some
 * out of range on both sides; the weight uniform in [-1, 1). */
static void emb_init(int index, float *data, int64_t n, uint64_t *rng)
{
    for (int64_t i = 0; i < n; i++) {
        if (index == 1) {
            data[i] = (float)opcheck_uniform(rng, -1, 1);
            continue;
        }
        double u = opcheck_uniform(rng, 0, 1);
        if (u < 0.1) data[i] = (float)-opcheck_uniform(rng, 0, 3);                          /* below: row 0 */
        else if (u < 0.2) data[i] = (float)(g_rows + opcheck_uniform(rng, 0, 3));           /* above: last row */
        else if (u < 0.3) data[i] = (float)opcheck_uniform(rng, 0, (double)g_rows);         /* fraction: truncated */
        else data[i] = (float)(int64_t)opcheck_uniform(rng, 0, (double)g_rows);
    }
}

static void run(mx_shape data, int64_t input_dim, const char *output_dim, uint64_t seed)
{
    char in_dim[24];
    snprintf(in_dim, sizeof(in_dim), "%lld", (long long)input_dim);
    g_rows = input_dim;
    const char *keys[] = {"input_dim", "output_dim"}, *values[] = {in_dim, output_dim};
    opcheck_case c = {.op = "Embedding", .keys = keys, .values = values, .n_params = 2, .ref = emb_ref,
                      .init = emb_init, .skip_grad = 1, .seed = seed};
    c.in_shapes[0] = data;
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run(MX_SHAPE(4, 5), 10, "3", 1);
    run(MX_SHAPE(7), 3, "8", 2);        /* many repeats: accumulation */
    run(MX_SHAPE(2, 3, 2), 50, "1", 3);
    run(MX_SHAPE(1), 1, "5", 4);
    run(MX_SHAPE(16, 9), 100, "33", 5);
}
END_TEST

/* The data gradient is zeroed; repeated indices accumulate; clipping. */
START_TEST(gradients_and_clipping)
{
    const mx_op_def *op = mx_op_find("Embedding");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"input_dim", "output_dim"}, *v[] = {"3", "2"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 2, params), MX_OK);
    float idx[5] = {1, 1, -7, 99, 2.9f}, w[6] = {0, 1, 10, 11, 20, 21}, y[10];
    float dy[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, didx[5] = {5, 5, 5, 5, 5}, dw[6] = {9, 9, 9, 9, 9, 9};
    mx_tensor in[2] = {{idx, MX_SHAPE(5), MX_FLOAT32, mx_cpu(), 0}, {w, MX_SHAPE(3, 2), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {y, MX_SHAPE(5, 2), MX_FLOAT32, mx_cpu(), 0}, og = {dy, MX_SHAPE(5, 2), MX_FLOAT32, mx_cpu(), 0};
    mx_tensor g[2] = {{didx, MX_SHAPE(5), MX_FLOAT32, mx_cpu(), 0}, {dw, MX_SHAPE(3, 2), MX_FLOAT32, mx_cpu(), 0}};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[2] = {MX_REQ_WRITE, MX_REQ_WRITE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    const float wy[10] = {10, 11, 10, 11, 0, 1, 20, 21, 20, 21};
    for (int i = 0; i < 10; i++) ck_assert_msg(y[i] == wy[i], "y[%d] = %g, want %g", i, y[i], wy[i]);
    ck_assert_int_eq(op->backward(&ctx, params, &og, in, &out, req, g, NULL), MX_OK);
    const float wdw[6] = {5, 6, 4, 6, 16, 18};
    for (int i = 0; i < 6; i++) ck_assert_msg(dw[i] == wdw[i], "dw[%d] = %g, want %g", i, dw[i], wdw[i]);
    for (int i = 0; i < 5; i++) ck_assert(didx[i] == 0);
}
END_TEST

static bool shape_is(const mx_shape *s, mx_shape want) { return mx_shape_equal(s, &want); }

START_TEST(shapes_and_parameters)
{
    mx_shape in[2] = {MX_SHAPE(32, 20)}, out[1];
    int n_in, n_out;
    const char *k[] = {"input_dim", "output_dim"}, *v[] = {"1000", "64"};
    ck_assert_int_eq(opcheck_infer("Embedding", k, v, 2, in, &n_in, out, &n_out), MX_OK);
    ck_assert(shape_is(&in[1], MX_SHAPE(1000, 64)));
    ck_assert(shape_is(&out[0], MX_SHAPE(32, 20, 64)));
    in[1] = MX_SHAPE(64, 1000);
    ck_assert_int_eq(opcheck_infer("Embedding", k, v, 2, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Embedding: weight has shape (64,1000), expected (1000,64)"));
    in[0] = MX_SHAPE(1, 1, 1, 1, 1, 1, 1, 1);
    in[1] = (mx_shape){0};
    ck_assert_int_eq(opcheck_infer("Embedding", k, v, 2, in, &n_in, out, &n_out), MX_ERR_INVALID);
    const mx_op_def *op = mx_op_find("Embedding");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *v1[] = {"0", "4"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v1, 2, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Embedding: parameter 'input_dim' has bad value '0'"));
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "required parameter 'output_dim' is missing"));
    const char *k2[] = {"input_dim", "output_dim", "dtype"}, *v2[] = {"10", "4", "float64"};
    ck_assert_int_eq(mx_op_parse_params(op, k2, v2, 3, params), MX_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "Embedding: parameter 'dtype' value 'float64' is not supported"));
    const char *k3[] = {"input_dim", "output_dim", "sparse_grad"}, *v3[] = {"10", "4", "True"};
    ck_assert_int_eq(mx_op_parse_params(op, k3, v3, 3, params), MX_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_embedding");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, gradients_and_clipping);
    tcase_add_test(tc, shapes_and_parameters);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
