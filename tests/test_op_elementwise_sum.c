/* test_op_elementwise_sum.c - ElementWiseSum (add_n) against a float64
 * reference. */
#include "parallel/parallel.h"
#include "support/opcheck.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sum_ref(const void *params, const double *const *in, const mx_shape *in_shapes, double *const *out,
                    const mx_shape *out_shapes)
{
    (void)out_shapes;
    const mx_op_def *op = mx_op_find("ElementWiseSum");
    int n = (int)*(const int64_t *)((const char *)params + mx_op_param(op, "num_args")->offset);
    int64_t size = mx_shape_size(&in_shapes[0]);
    for (int64_t i = 0; i < size; i++) {
        double s = 0;
        for (int k = 0; k < n; k++) s += in[k][i];
        out[0][i] = s;
    }
}

static void run(const char *name, int n, mx_shape shape, uint64_t seed)
{
    char num[16];
    snprintf(num, sizeof(num), "%d", n);
    const char *keys[] = {"num_args"}, *values[] = {num};
    opcheck_case c = {.op = name, .keys = keys, .values = values, .n_params = 1, .ref = sum_ref, .seed = seed};
    c.in_shapes[0] = shape; /* the others are inferred */
    opcheck_run(&c);
}

START_TEST(forward_backward_against_reference)
{
    run("ElementWiseSum", 2, MX_SHAPE(4, 7), 1);
    run("ElementWiseSum", 3, MX_SHAPE(3, 2, 5), 2);
    run("add_n", 1, MX_SHAPE(9), 3);
    run("ElementWiseSum", 5, MX_SHAPE(1300), 4); /* several chunks */
    run("ElementWiseSum", 64, MX_SHAPE(3, 3), 5);
}
END_TEST

/* In place on arg0, and the same array given twice (x + x). */
START_TEST(in_place_and_aliases)
{
    const mx_op_def *op = mx_op_find("ElementWiseSum");
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *k[] = {"num_args"}, *v[] = {"3"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    enum { N = 1100 };
    static float a[N], b[N], want[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f;
        want[i] = 2.0f * (float)i + 0.5f;
    }
    mx_tensor in[3] = {{a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}, {b, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0},
                       {a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
    mx_tensor out = {a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0};
    mx_exec_ctx exec = {.ctx = mx_cpu()};
    mx_op_ctx ctx = {.exec = &exec};
    mx_req req[1] = {MX_REQ_INPLACE};
    ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
    for (int i = 0; i < N; i++) ck_assert_float_eq(a[i], want[i]);
    /* backward in place: in_grad 0 on out_grad */
    mx_tensor grads[3] = {{a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}, {b, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0},
                          {want, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
    mx_req breq[3] = {MX_REQ_INPLACE, MX_REQ_WRITE, MX_REQ_NULL};
    ck_assert_int_eq(op->backward(&ctx, params, &out, in, &out, breq, grads, NULL), MX_OK);
    ck_assert(b[7] == a[7] && want[7] == 14.5f);
}
END_TEST

/* Sizes split across the kernel pool (over 32K elements, not a multiple
 * of the chunk or of 16), on every vector width. */
START_TEST(large_shapes_on_every_width)
{
    static const char *const widths[] = {"portable", "avx2", "avx512"};
    for (int w = 0; w < 3; w++) {
        setenv("MX_SIMD", widths[w], 1);
        run("ElementWiseSum", 3, MX_SHAPE(5, 7001), 20 + (uint64_t)w);
        run("ElementWiseSum", 2, MX_SHAPE(33, 1025), 30 + (uint64_t)w);
        run("ElementWiseSum", 2, MX_SHAPE(13), 40 + (uint64_t)w);
    }
    unsetenv("MX_SIMD");
}
END_TEST

/* In place on arg0 (also given again as arg2) split across 1, 2 and 3
 * threads: every piece reads its inputs before writing; backward copies
 * and adds, bit for bit the same whatever the split. */
START_TEST(large_in_place_on_threads)
{
    const mx_op_def *op = mx_op_find("ElementWiseSum");
    _Alignas(16) char params[16384];
    const char *k[] = {"num_args"}, *v[] = {"3"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v, 1, params), MX_OK);
    enum { N = 40013 };
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N), *g1 = malloc(sizeof(float) * N);
    float *g2 = malloc(sizeof(float) * N), *first = malloc(sizeof(float) * 2 * N);
    mx_threadpool *pools[3] = {NULL};
    ck_assert_int_eq(mx_threadpool_create(2, &pools[1]), MX_OK);
    ck_assert_int_eq(mx_threadpool_create(3, &pools[2]), MX_OK);
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < N; i++) {
            a[i] = (float)(i % 1000) * 0.001f;
            b[i] = 0.5f - (float)(i % 7);
            g1[i] = 12345.0f;
            g2[i] = 1.0f;
        }
        mx_tensor in[3] = {{a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}, {b, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0},
                           {a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
        mx_tensor out = {a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0};
        mx_exec_ctx exec = {.ctx = mx_cpu(), .pool = pools[t]};
        mx_op_ctx ctx = {.exec = &exec};
        mx_req req[1] = {MX_REQ_INPLACE};
        ck_assert_int_eq(op->forward(&ctx, params, in, req, &out, NULL), MX_OK);
        for (int i = 0; i < N; i++) {
            float x = (float)(i % 1000) * 0.001f, want = x + (0.5f - (float)(i % 7)) + x;
            ck_assert_msg(a[i] == want, "%d threads: out[%d] = %g, want %g", t + 1, i, a[i], want);
        }
        /* forward adding onto an output that is none of the inputs */
        mx_tensor sum = {g2, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0};
        mx_req areq[1] = {MX_REQ_ADD};
        ck_assert_int_eq(op->forward(&ctx, params, in, areq, &sum, NULL), MX_OK);
        for (int i = 0; i < N; i++) {
            float want = 1.0f + ((a[i] + b[i]) + a[i]);
            ck_assert_msg(g2[i] == want, "%d threads: added out[%d] = %g, want %g", t + 1, i, g2[i], want);
            g2[i] = 1.0f;
        }
        /* backward: in_grad 0 in place on out_grad, 1 written, 2 added */
        mx_tensor grads[3] = {{a, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}, {g1, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0},
                              {g2, MX_SHAPE(N), MX_FLOAT32, mx_cpu(), 0}};
        mx_req breq[3] = {MX_REQ_INPLACE, MX_REQ_WRITE, MX_REQ_ADD};
        ck_assert_int_eq(op->backward(&ctx, params, &out, in, &out, breq, grads, NULL), MX_OK);
        for (int i = 0; i < N; i++) ck_assert(g1[i] == a[i] && g2[i] == a[i] + 1.0f);
        if (t == 0) {
            memcpy(first, a, sizeof(float) * N);
            memcpy(first + N, g2, sizeof(float) * N);
        } else {
            ck_assert(!memcmp(first, a, sizeof(float) * N) && !memcmp(first + N, g2, sizeof(float) * N));
        }
    }
    mx_threadpool_free(pools[1]);
    mx_threadpool_free(pools[2]);
    free(a), free(b), free(g1), free(g2), free(first);
}
END_TEST

START_TEST(shapes_and_errors)
{
    const mx_op_def *op = mx_op_find("ElementWiseSum");
    ck_assert_ptr_eq(mx_op_find("add_n"), op);
    mx_shape in[3] = {{0}, MX_SHAPE(2, 3), {0}}, out[1];
    int n_in, n_out;
    const char *k[] = {"num_args"}, *v[] = {"3"};
    ck_assert_int_eq(opcheck_infer("ElementWiseSum", k, v, 1, in, &n_in, out, &n_out), MX_OK);
    ck_assert(mx_shape_equal(&in[0], &in[1]) && mx_shape_equal(&in[2], &in[1]) && mx_shape_equal(&out[0], &in[1]));
    in[2] = MX_SHAPE(3, 2);
    ck_assert_int_eq(opcheck_infer("ElementWiseSum", k, v, 1, in, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "ElementWiseSum: arg2 has shape (3,2), but arg0 has (2,3)"));
    mx_shape none[3] = {{0}};
    ck_assert_int_eq(opcheck_infer("ElementWiseSum", k, v, 1, none, &n_in, out, &n_out), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "the shapes of all 3 inputs are unknown"));
    _Alignas(16) char params[16384]; /* >= every op's params_size (checked in test_op_fully_connected) */
    const char *v2[] = {"0"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v2, 1, params), MX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(mx_last_error(), "ElementWiseSum: parameter 'num_args' has bad value '0'"));
    ck_assert_int_eq(mx_op_parse_params(op, NULL, NULL, 0, params), MX_ERR_INVALID);
    const char *names[MX_OP_MAX_IO];
    const char *v3[] = {"4"};
    ck_assert_int_eq(mx_op_parse_params(op, k, v3, 1, params), MX_OK);
    ck_assert_int_eq(op->list_inputs(params, names), 4);
    ck_assert_str_eq(names[3], "arg3");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("op_elementwise_sum");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_backward_against_reference);
    tcase_add_test(tc, in_place_and_aliases);
    tcase_add_test(tc, large_shapes_on_every_width);
    tcase_add_test(tc, large_in_place_on_threads);
    tcase_add_test(tc, shapes_and_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
